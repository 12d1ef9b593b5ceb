//! `gepa-lab auth wallet`: log in with the wallet, and keep the API key it yields.
use std::num::NonZeroU32;
use std::process::ExitCode;

use anyhow::Context;
use clap::Subcommand;

use super::exit;
use super::wallet_args::WalletArgs;
use crate::account::{AccountClient, AccountConfig, DEFAULT_LOGIN_WORD, UserConfig, config_path};
use crate::inference::DEFAULT_BASE_URL;

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: AuthCommand,
}

#[derive(Debug, Subcommand)]
enum AuthCommand {
    /// Sign the login text with the wallet, get an API key, and store it (with its tier and
    /// rpmLimit) in the config file. The key is never printed.
    Wallet(WalletLogin),
}

#[derive(Debug, clap::Args)]
struct WalletLogin {
    /// Base URL of the inference API.
    #[arg(long = "url", env = "GEPA_LAB_INFERENCE_URL", default_value = DEFAULT_BASE_URL)]
    base_url: String,
    #[command(flatten)]
    wallet: WalletArgs,
    /// The fixed word of the login text `<word>-login-<timestamp>`.
    #[arg(long, env = "GEPA_LAB_LOGIN_WORD", default_value = DEFAULT_LOGIN_WORD, value_name = "WORD")]
    login_word: String,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    match args.command {
        AuthCommand::Wallet(login) => wallet(login),
    }
}

fn wallet(args: WalletLogin) -> anyhow::Result<ExitCode> {
    let wallet = match args.wallet.load() {
        Ok(wallet) => wallet,
        Err(err) => {
            eprintln!("error: {err}");
            return Ok(ExitCode::from(exit::INVALID));
        }
    };
    // Read the config before asking for a key, so a config that cannot be updated fails the
    // command before a key is issued and lost.
    let path = config_path()?;
    let mut config = UserConfig::load(&path)?;
    let client = AccountClient::new(AccountConfig::new(args.base_url.clone(), None))
        .with_context(|| format!("inference API at {}", args.base_url))?;
    let timestamp = chrono::Utc::now().timestamp();
    let grant = super::runtime()?
        .block_on(client.register_wallet(&wallet, &args.login_word, timestamp))
        .with_context(|| {
            format!(
                "registering wallet {} at {}",
                wallet.address(),
                args.base_url
            )
        })?;
    let account = config.service_mut(&args.base_url);
    account.address = Some(wallet.address());
    account.key = Some(grant.key.clone());
    account.tier = Some(grant.tier.clone());
    account.rpm_limit = NonZeroU32::new(grant.rpm_limit);
    config.save(&path)?;
    println!(
        "registered wallet {} at {}",
        wallet.address(),
        args.base_url
    );
    println!("tier: {}", grant.tier);
    println!("rpmLimit: {}", grant.rpm_limit);
    println!("API key stored in {} (not shown)", path.display());
    Ok(ExitCode::from(exit::OK))
}
