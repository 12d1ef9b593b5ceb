//! `gepa-lab auth wallet`: log in with the wallet, and keep the API key it yields.
//! `gepa-lab auth key`: keep an API key issued elsewhere (the evolution service's, say), read
//! from standard input so that it never stands on a command line.
use super::ExitStatus;
use std::num::NonZeroU32;

use anyhow::Context;
use clap::Subcommand;

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
    /// Read an API key from standard input (one line) and store it in the config file for one
    /// service, where `run`, `executions`, `batch`, `chat` and the rest find it when no key is
    /// set in the environment. The key is never printed.
    Key(StoreKey),
}

#[derive(Debug, clap::Args)]
struct StoreKey {
    /// Which service the key is for; its address comes from --url, else from
    /// GEPA_LAB_EVOLUTION_URL or GEPA_LAB_INFERENCE_URL, else the public service's.
    #[arg(value_enum)]
    service: Service,
    /// The service's base URL, when it is not the public one.
    #[arg(long = "url")]
    base_url: Option<String>,
    /// The key's requests-per-minute limit, used to pace requests (inference keys).
    #[arg(long)]
    rpm: Option<NonZeroU32>,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum Service {
    Evolution,
    Inference,
}

#[derive(Debug, clap::Args)]
struct WalletLogin {
    /// Base URL of the inference API.
    #[arg(long = "url", env = crate::env::INFERENCE_URL, default_value = DEFAULT_BASE_URL)]
    base_url: String,
    #[command(flatten)]
    wallet: WalletArgs,
    /// The fixed word of the login text `<word>-login-<timestamp>`.
    #[arg(long, env = crate::env::LOGIN_WORD, default_value = DEFAULT_LOGIN_WORD, value_name = "WORD")]
    login_word: String,
}

pub fn run(args: Args) -> anyhow::Result<ExitStatus> {
    match args.command {
        AuthCommand::Wallet(login) => wallet(login),
        AuthCommand::Key(store) => key(store),
    }
}

fn wallet(args: WalletLogin) -> anyhow::Result<ExitStatus> {
    let wallet = match args.wallet.load() {
        Ok(wallet) => wallet,
        Err(err) => {
            eprintln!("error: {err}");
            return Ok(ExitStatus::Invalid);
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
    Ok(ExitStatus::Ok)
}

fn key(args: StoreKey) -> anyhow::Result<ExitStatus> {
    let base_url = match (&args.base_url, args.service) {
        (Some(url), _) => url.clone(),
        (None, Service::Evolution) => crate::evolution::config_from_env().base_url,
        (None, Service::Inference) => crate::inference::base_url_from_env(),
    };
    let path = config_path()?;
    let mut config = UserConfig::load(&path)?;
    let mut line = zeroize::Zeroizing::new(String::new());
    std::io::stdin()
        .read_line(&mut line)
        .context("reading the key from standard input")?;
    let key = match super::inference_args::parse_secret(&line) {
        Ok(key) => key,
        Err(reason) => {
            eprintln!(
                "error: standard input: {reason}; pipe the key in, as in `printf %s \"$KEY\" | gepa-lab auth key evolution`"
            );
            return Ok(ExitStatus::Invalid);
        }
    };
    let account = config.service_mut(&base_url);
    account.key = Some(key);
    if args.rpm.is_some() {
        account.rpm_limit = args.rpm;
    }
    config.save(&path)?;
    println!(
        "API key for {base_url} stored in {} (not shown)",
        path.display()
    );
    Ok(ExitStatus::Ok)
}
