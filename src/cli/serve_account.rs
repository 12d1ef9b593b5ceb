//! `serve`'s flags for the account routes: wallet login, issued keys, credits and top-ups.
use std::num::{NonZeroU32, NonZeroU64};
use std::time::Duration;

use crate::account::DEFAULT_LOGIN_WORD;
use crate::server::account_routes::AccountSettings;
use crate::wallet::{Address, Network};

#[derive(Debug, clap::Args)]
pub struct ServeAccountArgs {
    /// The fixed word of the wallet login text `<word>-login-<timestamp>`.
    #[arg(long, env = crate::env::LOGIN_WORD, default_value = DEFAULT_LOGIN_WORD, value_name = "WORD")]
    login_word: String,
    /// How far (seconds, either way) a login timestamp may be from the server's clock.
    #[arg(long, default_value_t = 300, value_name = "SECONDS")]
    login_window: u64,
    /// Prefix of the keys issued to wallets.
    #[arg(long, default_value = "dkn_live_", value_name = "PREFIX")]
    key_prefix: String,
    /// Requests-per-minute limit of the keys issued to wallets.
    #[arg(long, default_value_t = NonZeroU32::new(60).unwrap_or(NonZeroU32::MIN), value_name = "RPM")]
    wallet_rpm: NonZeroU32,
    /// Credits a wallet gets when it first registers (100 credits = 1 USDC).
    #[arg(long, default_value_t = 100, value_name = "CREDITS")]
    free_credits: u64,
    /// Chat price: one credit per this many total tokens, rounded up, at least 1 credit per
    /// request. Keys given with --api-key are never charged.
    #[arg(long, default_value_t = NonZeroU64::new(1000).unwrap_or(NonZeroU64::MIN), value_name = "TOKENS")]
    tokens_per_credit: NonZeroU64,
    /// Answer 402 to chat requests of wallet keys whose account has no credits left.
    #[arg(long)]
    require_credits: bool,
    /// The address top-ups pay to; without it, top-ups are refused (501).
    #[arg(long, env = crate::env::SERVE_PAY_TO, value_name = "ADDRESS")]
    pay_to: Option<Address>,
    /// The chain top-ups are signed for: base or base-sepolia.
    #[arg(long, default_value = "base")]
    network: Network,
}

impl ServeAccountArgs {
    pub fn settings(self) -> AccountSettings {
        AccountSettings {
            login_word: self.login_word,
            login_window: Duration::from_secs(self.login_window),
            key_prefix: self.key_prefix,
            wallet_rpm: self.wallet_rpm,
            free_credits: self.free_credits,
            tokens_per_credit: self.tokens_per_credit,
            require_credits: self.require_credits,
            pay_to: self.pay_to,
            network: self.network,
            ..AccountSettings::default()
        }
    }
}
