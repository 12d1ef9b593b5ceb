//! `POST /v1/auth/wallet`: an EIP-191 login. The signature must recover to the address, over
//! `<word>-login-<timestamp>` with the timestamp inside the window, and each signature logs in
//! once; the key issued carries the live-key prefix and is stored hashed.
use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use super::{Rejection, bad_request, internal, now_unix, parse_body, random_hex};
use crate::AppState;
use crate::account_db::NewWalletKey;
use gepa_lab_account::login_message;
use gepa_lab_account::wire::{ApiKeyGrant, WalletLogin};
use gepa_lab_http::Secret;
use gepa_lab_wallet::{Address, Signature, recover_personal};

pub(super) async fn auth_wallet(
    State(state): State<AppState>,
    body: Bytes,
) -> Result<Response, Rejection> {
    register(&state, &body).await
}

async fn register(state: &AppState, body: &[u8]) -> Result<Response, Rejection> {
    let settings = &state.account;
    let login: WalletLogin = parse_body(body)?;
    let address: Address = login
        .address
        .parse()
        .map_err(|err| bad_request(format!("invalid parameter address: {err}")))?;
    let signature: Signature = login
        .signature
        .parse()
        .map_err(|err| bad_request(format!("invalid parameter signature: {err}")))?;
    let now = now_unix();
    let window = i64::try_from(settings.login_window.as_secs()).unwrap_or(i64::MAX);
    let skew = now.saturating_sub(login.timestamp);
    if skew.unsigned_abs() > window.unsigned_abs() {
        return Err(Rejection::new(
            StatusCode::UNAUTHORIZED,
            format!(
                "timestamp {} is {} s {} server time {now}; at most {window} s either way is accepted",
                login.timestamp,
                skew.unsigned_abs(),
                if skew > 0 { "behind" } else { "ahead of" }
            ),
        ));
    }
    let message = login_message(&settings.login_word, login.timestamp);
    let signer = recover_personal(&message, &signature).map_err(|err| {
        Rejection::new(
            StatusCode::UNAUTHORIZED,
            format!("signature: {err}; sign the text {message:?}"),
        )
    })?;
    if signer != address {
        return Err(Rejection::new(
            StatusCode::UNAUTHORIZED,
            format!(
                "signature is by {signer}, not by address {address}; sign the text {message:?} with that wallet"
            ),
        ));
    }
    let fresh = state
        .db
        .use_login_signature(
            signature.to_string(),
            now,
            now.saturating_sub(window.saturating_mul(2)),
        )
        .await
        .map_err(|err| internal("login", &err))?;
    if !fresh {
        return Err(Rejection::new(
            StatusCode::UNAUTHORIZED,
            "this login signature was used before; sign a new timestamp",
        ));
    }
    let key = Secret::new(format!("{}{}", settings.key_prefix, random_hex(32)?));
    let free_credits = i64::try_from(settings.free_credits).unwrap_or(i64::MAX);
    let key_id = state
        .db
        .register_wallet_key(NewWalletKey {
            address: &address.to_string(),
            key: &key,
            tier: &settings.wallet_tier,
            rpm_limit: settings.wallet_rpm.get(),
            free_credits,
        })
        .await
        .map_err(|err| internal("key registration", &err))?;
    tracing::info!(%address, key = %key_id, "wallet registered");
    Ok(axum::Json(ApiKeyGrant {
        id: address.to_string(),
        key,
        tier: settings.wallet_tier.clone(),
        rpm_limit: settings.wallet_rpm.get(),
    })
    .into_response())
}
