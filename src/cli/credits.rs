//! `gepa-lab credits balance` and `gepa-lab credits topup`: the credit balance, and buying
//! credits with USDC through the two-step x402 flow, refusing to sign anything the user did
//! not ask for.
use super::ExitStatus;

use anyhow::Context;
use clap::Subcommand;

use super::inference_args::InferenceArgs;
use super::wallet_args::WalletArgs;
use crate::account::{
    AccountError, PaymentPolicy, Refusal, TopupReceipt, UsdcAmount, UserConfig, check_cap,
    check_requirements, config_path, offered_pay_to,
};
use crate::wallet::{Address, Network};

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: CreditsCommand,
}

#[derive(Debug, Subcommand)]
enum CreditsCommand {
    /// Show the credit balance (1 USDC = 100 credits).
    Balance(BalanceArgs),
    /// Buy credits with USDC: ask the service what to pay (402), check every requirement,
    /// sign a USDC transfer authorization and send it.
    Topup(TopupArgs),
}

#[derive(Debug, clap::Args)]
struct BalanceArgs {
    #[command(flatten)]
    inference: InferenceArgs,
}

#[derive(Debug, clap::Args)]
struct TopupArgs {
    #[command(flatten)]
    inference: InferenceArgs,
    #[command(flatten)]
    wallet: WalletArgs,
    /// USDC to pay, as a decimal such as 10 or 2.5 (at most 6 fraction digits).
    amount: UsdcAmount,
    /// The most you allow this payment to be, in USDC; a larger AMOUNT is refused.
    #[arg(long, value_name = "USDC")]
    max_usdc: UsdcAmount,
    /// The receiver you expect the service to name. Required on the first top-up at a
    /// service; it is then stored in the config file, and later top-ups must name the same
    /// receiver unless you pass another one here.
    #[arg(long, value_name = "ADDRESS")]
    pay_to: Option<Address>,
    /// The chain to pay on: base or base-sepolia.
    #[arg(long, default_value = "base")]
    network: Network,
}

impl Args {
    pub fn key_sent(&self) -> super::keys::KeySent {
        match &self.command {
            CreditsCommand::Balance(args) => args.inference.key_sent(),
            CreditsCommand::Topup(args) => args.inference.key_sent(),
        }
    }
}

pub fn run(args: Args) -> anyhow::Result<ExitStatus> {
    match args.command {
        CreditsCommand::Balance(args) => balance(args),
        CreditsCommand::Topup(args) => topup(args),
    }
}

fn balance(args: BalanceArgs) -> anyhow::Result<ExitStatus> {
    let client = args.inference.account_client()?;
    let balance = super::runtime()?
        .block_on(client.balance())
        .context("reading the credit balance")?;
    println!(
        "balance: {} credits ({} USDC)",
        balance.balance, balance.balance_usdc
    );
    Ok(ExitStatus::Ok)
}

fn topup(args: TopupArgs) -> anyhow::Result<ExitStatus> {
    if args.amount.is_zero() {
        eprintln!("error: amount 0: a top-up must be above 0 USDC");
        return Ok(ExitStatus::Invalid);
    }
    // Checked before anything is sent: an over-cap top-up contacts nobody.
    if let Err(refusal) = check_cap(args.amount, args.max_usdc) {
        return Ok(refused(&refusal));
    }
    let wallet = match args.wallet.load() {
        Ok(wallet) => wallet,
        Err(err) => {
            eprintln!("error: {err}");
            return Ok(ExitStatus::Invalid);
        }
    };
    let base_url = args.inference.base_url.clone();
    let path = config_path()?;
    let mut config = UserConfig::load(&path)?;
    let stored_pay_to = config.service(&base_url).and_then(|s| s.pay_to);
    let client = args.inference.account_client()?;
    let runtime = super::runtime()?;
    let requirements = runtime
        .block_on(client.payment_requirements(args.amount))
        .context("asking for the payment requirements")?;
    let Some(pay_to) = args.pay_to.or(stored_pay_to) else {
        let refusal = match offered_pay_to(&requirements) {
            Some(seen) => Refusal::UnconfirmedPayTo {
                seen: seen.to_string(),
            },
            None => Refusal::NoOption,
        };
        return Ok(refused(&refusal));
    };
    let policy = PaymentPolicy {
        network: args.network,
        amount: args.amount,
        cap: args.max_usdc,
        pay_to,
    };
    let accepted = match check_requirements(&requirements, &policy) {
        Ok(accepted) => accepted,
        Err(refusal) => return Ok(refused(&refusal)),
    };
    if stored_pay_to != Some(pay_to) {
        if let Some(old) = stored_pay_to {
            eprintln!("note: the confirmed receiver for {base_url} changes from {old} to {pay_to}");
        }
        config.service_mut(&base_url).pay_to = Some(pay_to);
        config.save(&path)?;
    }
    let now = u64::try_from(chrono::Utc::now().timestamp()).unwrap_or_default();
    let receipt = match runtime.block_on(client.pay(&accepted, &wallet, now)) {
        Ok(receipt) => receipt,
        Err(AccountError::Api(err)) if err.status().is_none() => {
            // The payment may have arrived even though its answer did not.
            return Err(err).context(
                "sending the payment; its answer was lost, so check `gepa-lab credits balance` before paying again",
            );
        }
        Err(err) => return Err(err).context("sending the payment"),
    };
    print_receipt(&args.amount, &accepted.pay_to, args.network, &receipt);
    Ok(ExitStatus::Ok)
}

fn refused(refusal: &Refusal) -> ExitStatus {
    eprintln!("error: payment refused, nothing was signed: {refusal}");
    ExitStatus::Invalid
}

fn print_receipt(amount: &UsdcAmount, pay_to: &Address, network: Network, receipt: &TopupReceipt) {
    let result = &receipt.result;
    println!(
        "paid {amount} USDC on {network} from {} to {pay_to}",
        receipt.payer
    );
    println!("credits added: {}", result.credits_added);
    println!(
        "balance: {} credits ({} USDC)",
        result.balance, result.balance_usdc
    );
    println!("transaction: {}", result.tx_hash);
    match &receipt.settlement {
        None => {}
        Some(Ok(settlement)) => {
            let mut line = format!(
                "settlement: {}, network {}, transaction {}",
                if settlement.success {
                    "success"
                } else {
                    "failed"
                },
                settlement.network,
                settlement.transaction
            );
            if let Some(payer) = &settlement.payer {
                line.push_str(&format!(", payer {payer}"));
            }
            if let Some(reason) = &settlement.error_reason {
                line.push_str(&format!(", error {reason}"));
            }
            println!("{line}");
        }
        Some(Err(reason)) => eprintln!("warning: X-PAYMENT-RESPONSE does not decode: {reason}"),
    }
}
