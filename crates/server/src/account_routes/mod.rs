//! The account routes of `serve`: `POST /v1/auth/wallet` (EIP-191 login, no key needed),
//! `GET /v1/credits/balance`, `POST /v1/credits/topup` (x402, verified here and settled
//! locally: no chain is contacted), `POST`/`GET /v1/channel`, and `meter_chat`, the middleware
//! that debits chat requests from the caller's credits. This file holds the settings, the
//! routers, metering and the helpers the route files share; `login`, `credits` and `channel`
//! hold the handlers.
//!
//! Errors are plain text naming the parameter or check that failed; the 402 of a top-up is the
//! one JSON error body, since it carries the payment requirements.
use std::num::{NonZeroU32, NonZeroU64};
use std::time::Duration;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use rand::TryRngCore;
use rand::rngs::OsRng;
use serde::de::DeserializeOwned;

use super::AppState;
use super::account_db::AccountRow;
use super::auth::{Caller, text};
use super::db::UsageRow;
use gepa_lab_account::DEFAULT_LOGIN_WORD;
use gepa_lab_account::wire::TOPUP_PATH;
use gepa_lab_wallet::{Address, Network};

mod channel;
mod credits;
mod login;

pub use credits::{LOCAL_SETTLEMENT_NETWORK, MAX_TIMEOUT_SECONDS};

/// How `serve` runs the account routes.
#[derive(Debug, Clone)]
pub struct AccountSettings {
    /// The fixed word of the login text `<word>-login-<timestamp>`.
    pub login_word: String,
    /// How far a login timestamp may be from the server's clock, either way.
    pub login_window: Duration,
    /// Prefix of issued keys, like the public service's `dkn_live_`.
    pub key_prefix: String,
    pub wallet_tier: String,
    pub wallet_rpm: NonZeroU32,
    /// Credits a wallet gets when it first registers.
    pub free_credits: u64,
    /// Chat price: one credit per this many total tokens, rounded up, at least 1 per request.
    pub tokens_per_credit: NonZeroU64,
    /// Answer 402 to chat requests of a metered account with no credits left.
    pub require_credits: bool,
    /// The top-up receiver; without one, top-ups are refused with 501.
    pub pay_to: Option<Address>,
    pub network: Network,
}

impl Default for AccountSettings {
    fn default() -> Self {
        AccountSettings {
            login_word: DEFAULT_LOGIN_WORD.to_string(),
            login_window: Duration::from_secs(300),
            key_prefix: "dkn_live_".to_string(),
            wallet_tier: "free".to_string(),
            wallet_rpm: NonZeroU32::new(60).unwrap_or(NonZeroU32::MIN),
            free_credits: 100,
            tokens_per_credit: NonZeroU64::new(1000).unwrap_or(NonZeroU64::MIN),
            require_credits: false,
            pay_to: None,
            network: Network::Base,
        }
    }
}

/// Routes that need no key.
pub fn login_routes() -> Router<AppState> {
    Router::new().route("/v1/auth/wallet", post(login::auth_wallet))
}

/// Routes behind `auth::require_key`.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/v1/credits/balance", get(credits::credit_balance))
        .route(TOPUP_PATH, post(credits::topup))
        .route(
            "/v1/channel",
            post(channel::post_message).get(channel::read_messages),
        )
}

/// The credits a chat answer costs: `ceil(total_tokens / tokens_per_credit)`, at least 1.
pub fn chat_price(total_tokens: u64, tokens_per_credit: NonZeroU64) -> i64 {
    let credits = total_tokens.div_ceil(tokens_per_credit.get()).max(1);
    i64::try_from(credits).unwrap_or(i64::MAX)
}

/// Middleware on the inference routes: refuses chat to an empty metered account when
/// `require_credits` is set, and debits each answered chat request. A streamed answer carries
/// no usage, so it costs the minimum of 1 credit.
pub async fn meter_chat(State(state): State<AppState>, request: Request, next: Next) -> Response {
    if request.uri().path() != "/v1/chat/completions" {
        return next.run(request).await;
    }
    let Some(caller) = request.extensions().get::<Caller>().cloned() else {
        return next.run(request).await;
    };
    let account = match state.db.account_of_key(&caller.key_id).await {
        Ok(account) => account,
        Err(err) => return internal("account lookup", &err).into_response(),
    };
    if !account.metered {
        return next.run(request).await;
    }
    let settings = &state.account;
    if settings.require_credits && account.balance <= 0 {
        return text(
            StatusCode::PAYMENT_REQUIRED,
            "no credits left: top up with POST /v1/credits/topup",
        );
    }
    let response = next.run(request).await;
    if response.status().is_success() {
        let tokens = response
            .extensions()
            .get::<UsageRow>()
            .map_or(0, |usage| usage.prompt_tokens + usage.completion_tokens);
        let cost = chat_price(tokens, settings.tokens_per_credit);
        match state.db.debit(&account.id, cost).await {
            Ok(balance) => tracing::debug!(key = %caller.key_id, cost, balance, "debited"),
            Err(err) => tracing::error!(%err, "debit failed"),
        }
    }
    response
}

/// A refused request: its status and the plain-text body that says why. Small, unlike a
/// `Response`, so handlers can return it through `?`.
#[derive(Debug)]
struct Rejection {
    status: StatusCode,
    message: String,
}

impl Rejection {
    fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Rejection {
            status,
            message: message.into(),
        }
    }
}

impl IntoResponse for Rejection {
    fn into_response(self) -> Response {
        text(self.status, self.message)
    }
}

/// A server-side failure: logged in full, told to the caller only by what was being done.
fn internal(action: &str, err: &dyn std::fmt::Display) -> Rejection {
    tracing::error!(%err, "{action} failed");
    Rejection::new(
        StatusCode::INTERNAL_SERVER_ERROR,
        format!("{action} failed"),
    )
}

/// The body as `T`, or a 400 naming the parameter that does not fit.
fn parse_body<T: DeserializeOwned>(body: &[u8]) -> Result<T, Rejection> {
    super::body::parse_json(body).map_err(bad_request)
}

fn bad_request(message: impl Into<String>) -> Rejection {
    Rejection::new(StatusCode::BAD_REQUEST, message)
}

fn random_hex(bytes: usize) -> Result<String, Rejection> {
    let mut buffer = vec![0u8; bytes];
    OsRng
        .try_fill_bytes(&mut buffer)
        .map_err(|err| internal("random number generation", &err))?;
    Ok(hex::encode(buffer))
}

fn now_unix() -> i64 {
    chrono::Utc::now().timestamp()
}

async fn caller_account(state: &AppState, caller: &Caller) -> Result<AccountRow, Rejection> {
    state
        .db
        .account_of_key(&caller.key_id)
        .await
        .map_err(|err| internal("account lookup", &err))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chat_costs_a_credit_per_started_thousand_tokens_and_at_least_one() {
        let per = NonZeroU64::new(1000).unwrap();
        assert_eq!(chat_price(0, per), 1);
        assert_eq!(chat_price(1, per), 1);
        assert_eq!(chat_price(1000, per), 1);
        assert_eq!(chat_price(1001, per), 2);
        assert_eq!(chat_price(u64::MAX, NonZeroU64::MIN), i64::MAX);
    }
}
