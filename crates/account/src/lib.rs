//! The account half of the inference API, for a user who pays with their own wallet: wallet
//! registration (an EIP-191 login that yields an API key), the credit balance, the two-step
//! x402 top-up with every requirement checked before signing, and the community channels with
//! the contract's rules checked before sending. Also the user's config file, where the key,
//! its rpmLimit and the confirmed top-up receiver are kept.
//!
//! Not here: signing itself and the payment payload (`wallet`), retries and pacing (`http`),
//! the routes that serve this API (`server`, which shares `wire`, `amount` and `channel`).
use reqwest::StatusCode;

pub mod amount;
pub mod channel;
mod client;
pub mod config;
pub mod requirements;
pub mod wire;

pub use amount::{AmountError, UsdcAmount, credits_as_usdc};
pub use channel::{Channel, ChannelRuleError, ReadQuery};
pub use client::{
    AccountClient, AccountConfig, TopupReceipt, created_at, login_message, sort_oldest_first,
};
pub use config::{ConfigError, ServiceAccount, UserConfig, config_path};
pub use requirements::{
    AcceptedPayment, PaymentPolicy, Refusal, check_cap, check_requirements, offered_pay_to,
};

/// The login word of the public service; others are configured with `GEPA_LAB_LOGIN_WORD`.
pub const DEFAULT_LOGIN_WORD: &str = "dria";

#[derive(Debug, thiserror::Error)]
pub enum AccountError {
    #[error(transparent)]
    Api(#[from] gepa_lab_http::ApiError),
    #[error(transparent)]
    Wallet(#[from] gepa_lab_wallet::WalletError),
    /// A payment the checks refused; nothing was signed.
    #[error("payment refused: {0}")]
    Refused(Refusal),
    #[error(transparent)]
    Rule(#[from] ChannelRuleError),
    #[error(transparent)]
    Amount(#[from] AmountError),
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("top-up without payment was answered {status}, not 402 with payment requirements")]
    NoPaymentAsked { status: StatusCode },
    #[error("the 402 body is not x402 payment requirements ({error}): {body}")]
    Requirements {
        error: serde_json::Error,
        body: String,
    },
}

// By hand rather than `#[from]`, which would make the refusal a `source` as well as part of the
// message, and a report of the chain would say it twice.
impl From<Refusal> for AccountError {
    fn from(refusal: Refusal) -> Self {
        Self::Refused(refusal)
    }
}
