//! `GET /v1/credits/balance` and `POST /v1/credits/topup`. A top-up without `X-PAYMENT` is
//! answered 402 with the documented requirements; with one, the payment is decoded and checked
//! (EIP-712 signer, network, receiver, exact value, validity window) and its nonce recorded
//! once, then the credits are added. Nothing is settled on a chain: the transaction hash is a
//! local id, and `X-PAYMENT-RESPONSE` says the network is `local`.
use axum::body::Bytes;
use axum::extract::{Extension, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use super::{
    AccountSettings, Rejection, bad_request, caller_account, internal, now_unix, parse_body,
};
use crate::AppState;
use crate::account_db::NewPayment;
use crate::auth::Caller;
use gepa_lab_account::amount::UsdcAmount;
use gepa_lab_account::credits_as_usdc;
use gepa_lab_account::requirements::EXACT_SCHEME;
use gepa_lab_account::wire::{
    CreditBalance, PAYMENT_HEADER, PAYMENT_RESPONSE_HEADER, PaymentOption, PaymentRequirements,
    SettlementResponse, TOPUP_PATH, TokenExtra, TopupRequest, TopupResult,
};
use gepa_lab_wallet::{Address, Eip712Domain, Network, PaymentPayload, X402_VERSION, keccak256};

/// Seconds a top-up authorization may stay valid, as the public service asks.
pub const MAX_TIMEOUT_SECONDS: u64 = 300;
/// The network name `X-PAYMENT-RESPONSE` gives: nothing was settled on a chain.
pub const LOCAL_SETTLEMENT_NETWORK: &str = "local";
const USDC_VERSION: &str = "2";

/// The token's EIP-712 name on each network, as its contract declares it.
fn usdc_name(network: Network) -> &'static str {
    match network {
        Network::Base => "USD Coin",
        Network::BaseSepolia => "USDC",
    }
}

pub(super) async fn credit_balance(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
) -> Result<Response, Rejection> {
    let account = caller_account(&state, &caller).await?;
    Ok(axum::Json(CreditBalance {
        balance: account.balance,
        balance_usdc: credits_as_usdc(account.balance),
    })
    .into_response())
}

pub(super) async fn topup(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, Rejection> {
    pay(&state, &caller, &headers, &body).await
}

/// The requirements of a top-up of `amount`, exactly as protocol-notes documents them.
fn requirements(
    settings: &AccountSettings,
    pay_to: Address,
    amount: UsdcAmount,
) -> PaymentRequirements {
    PaymentRequirements {
        x402_version: X402_VERSION,
        accepts: vec![PaymentOption {
            scheme: EXACT_SCHEME.to_string(),
            network: settings.network.name().to_string(),
            max_amount_required: amount.atomic().to_string(),
            resource: TOPUP_PATH.to_string(),
            pay_to: pay_to.to_string(),
            asset: settings.network.usdc().to_string(),
            max_timeout_seconds: MAX_TIMEOUT_SECONDS,
            extra: Some(TokenExtra {
                name: usdc_name(settings.network).to_string(),
                version: USDC_VERSION.to_string(),
            }),
        }],
    }
}

async fn pay(
    state: &AppState,
    caller: &Caller,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Response, Rejection> {
    let settings = &state.account;
    let request: TopupRequest = parse_body(body)?;
    let (amount, credits) = amount_and_credits(&request)?;
    let Some(pay_to) = settings.pay_to else {
        return Err(Rejection::new(
            StatusCode::NOT_IMPLEMENTED,
            "this server takes no payments: it was started without --pay-to",
        ));
    };
    let Some(header) = headers.get(PAYMENT_HEADER) else {
        let mut response = (
            StatusCode::PAYMENT_REQUIRED,
            axum::Json(requirements(settings, pay_to, amount)),
        )
            .into_response();
        response.headers_mut().insert(
            axum::http::header::CACHE_CONTROL,
            HeaderValue::from_static("no-store"),
        );
        // Not a failure: step 1 of the flow is answered with what to pay.
        return Ok(response);
    };
    let (payload, payer) = verify_payment(settings, pay_to, amount, header)?;
    let authorization = &payload.authorization;
    let account = caller_account(state, caller).await?;
    // A local settlement id: deterministic in the signed payment, so one payment has one id.
    let tx_hash = format!("0x{}", hex::encode(keccak256(payload.to_json())));
    let nonce = format!("0x{}", hex::encode(authorization.nonce));
    let balance = state
        .db
        .credit_payment(NewPayment {
            account_id: account.id.clone(),
            nonce: nonce.clone(),
            payer: payer.to_string(),
            value: authorization.value.to_string(),
            credits,
            tx_hash: tx_hash.clone(),
        })
        .await
        .map_err(|err| internal("payment", &err))?;
    let Some(balance) = balance else {
        return Err(Rejection::new(
            StatusCode::CONFLICT,
            format!("invalid X-PAYMENT: nonce {nonce} was already used"),
        ));
    };
    tracing::info!(key = %caller.key_id, %payer, credits, balance, "top-up settled locally");
    let settlement = SettlementResponse {
        success: true,
        transaction: tx_hash.clone(),
        network: LOCAL_SETTLEMENT_NETWORK.to_string(),
        payer: Some(payer.to_string()),
        error_reason: None,
    };
    let mut response = axum::Json(TopupResult {
        credits_added: credits,
        balance,
        balance_usdc: credits_as_usdc(balance),
        tx_hash,
    })
    .into_response();
    if let Ok(value) = HeaderValue::from_str(&settlement.to_header()) {
        response
            .headers_mut()
            .insert(PAYMENT_RESPONSE_HEADER, value);
    }
    Ok(response)
}

/// The amount a top-up asks for, above 0 and a whole number of credits (1 credit = 0.01 USDC),
/// and those credits.
fn amount_and_credits(request: &TopupRequest) -> Result<(UsdcAmount, i64), Rejection> {
    let amount: UsdcAmount = request
        .amount
        .parse()
        .map_err(|err| bad_request(format!("invalid parameter amount: {err}")))?;
    if amount.is_zero() {
        return Err(bad_request("invalid parameter amount: must be above 0"));
    }
    let credits = amount
        .whole_credits()
        .and_then(|c| i64::try_from(c).ok())
        .ok_or_else(|| {
            bad_request(format!(
                "invalid parameter amount: {amount} USDC is not a whole number of credits (1 credit = 0.01 USDC)"
            ))
        })?;
    Ok((amount, credits))
}

/// The X-PAYMENT header's payment and its payer, checked: signed by the payer for this
/// server's network and USDC contract, paying `pay_to` exactly `amount`, and valid now.
fn verify_payment(
    settings: &AccountSettings,
    pay_to: Address,
    amount: UsdcAmount,
    header: &HeaderValue,
) -> Result<(PaymentPayload, Address), Rejection> {
    let header = header
        .to_str()
        .map_err(|_| bad_request("invalid X-PAYMENT: not ASCII"))?;
    let payload = PaymentPayload::from_header(header)
        .map_err(|err| bad_request(format!("invalid X-PAYMENT: {err}")))?;
    let authorization = &payload.authorization;
    if payload.network != settings.network {
        return Err(bad_request(format!(
            "invalid X-PAYMENT: network {} is not this server's network {}",
            payload.network, settings.network
        )));
    }
    let domain = Eip712Domain {
        name: usdc_name(settings.network).to_string(),
        version: USDC_VERSION.to_string(),
        chain_id: settings.network.chain_id(),
        verifying_contract: settings.network.usdc(),
    };
    let payer = payload
        .verify(&domain)
        .map_err(|err| bad_request(format!("invalid X-PAYMENT signature: {err}")))?;
    if authorization.to != pay_to {
        return Err(bad_request(format!(
            "invalid X-PAYMENT: it pays {}, not this server's receiver {pay_to}",
            authorization.to
        )));
    }
    if authorization.value != amount.atomic() {
        return Err(bad_request(format!(
            "invalid X-PAYMENT: value {} is not maxAmountRequired {} for amount {amount}",
            authorization.value,
            amount.atomic()
        )));
    }
    let now = u64::try_from(now_unix()).unwrap_or_default();
    if now < authorization.valid_after {
        return Err(bad_request(format!(
            "invalid X-PAYMENT: not valid yet: validAfter {} is after server time {now}",
            authorization.valid_after
        )));
    }
    if now > authorization.valid_before {
        return Err(bad_request(format!(
            "invalid X-PAYMENT: expired: validBefore {} is before server time {now}",
            authorization.valid_before
        )));
    }
    Ok((payload, payer))
}

#[cfg(test)]
mod tests {
    use super::*;
    use gepa_lab_wallet::Address;

    #[test]
    fn requirements_are_the_documented_ones() {
        let settings = AccountSettings::default();
        let pay_to: Address = "0x209693Bc6afc0C5328bA36FaF03C514EF312287C"
            .parse()
            .unwrap();
        let body =
            serde_json::to_value(requirements(&settings, pay_to, "10".parse().unwrap())).unwrap();
        assert_eq!(
            body,
            serde_json::json!({
                "x402Version": 1,
                "accepts": [{
                    "scheme": "exact",
                    "network": "base",
                    "maxAmountRequired": "10000000",
                    "resource": "/v1/credits/topup",
                    "payTo": "0x209693Bc6afc0C5328bA36FaF03C514EF312287C",
                    "asset": "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913",
                    "maxTimeoutSeconds": 300,
                    "extra": {"name": "USD Coin", "version": "2"}
                }]
            })
        );
    }
}
