//! `AccountClient`: wallet registration, credits, the two-step x402 top-up and channels, over
//! `http::HttpClient`.
use std::collections::HashSet;

use chrono::{DateTime, Utc};
use reqwest::StatusCode;
use reqwest::header::HeaderName;

use super::AccountError;
use super::amount::UsdcAmount;
use super::channel::{Channel, MAX_LIMIT, ReadQuery, check_post};
use super::requirements::AcceptedPayment;
use super::wire::{
    ApiKeyGrant, ChannelMessage, CreditBalance, MessagePage, PAYMENT_HEADER,
    PAYMENT_RESPONSE_HEADER, PaymentRequirements, PostMessage, SettlementResponse, TOPUP_PATH,
    TopupRequest, TopupResult, WalletLogin,
};
use gepa_lab_http::{
    ATTEMPT_TIMEOUT, ApiError, Auth, Call, HttpClient, RetryPolicy, ServiceConfig,
};
use gepa_lab_wallet::{PaymentPayload, PrivateKey, TransferWithAuthorization, random_nonce};

/// The text a wallet signs to log in: `<word>-login-<timestamp>`. The word is configuration
/// (`dria` for the public service).
pub fn login_message(login_word: &str, timestamp: i64) -> String {
    format!("{login_word}-login-{timestamp}")
}

/// Pages a forward read may walk back through before it stops; bounds one catch-up to
/// 50 × 200 messages.
const MAX_CATCH_UP_PAGES: usize = 50;

/// The inference service's account routes. The key is sent as `Authorization: Bearer`; only
/// wallet registration works without one.
pub type AccountConfig = ServiceConfig;

/// What a paid top-up returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopupReceipt {
    pub result: TopupResult,
    /// The decoded `X-PAYMENT-RESPONSE`, if the service sent one; `Err` holds why it did not
    /// decode, since a receipt is still worth showing when its header is garbled.
    pub settlement: Option<Result<SettlementResponse, String>>,
    /// The payer address the payment was signed by.
    pub payer: String,
}

#[derive(Debug, Clone)]
pub struct AccountClient {
    http: HttpClient,
    /// The paid request is sent exactly once: if its answer is lost, resending the same
    /// authorization could only be refused as a reused nonce, and a fresh one could pay twice.
    once: HttpClient,
}

impl AccountClient {
    pub fn new(config: AccountConfig) -> Result<Self, AccountError> {
        let auth = match config.key.clone() {
            Some(key) => Auth::Bearer(key),
            None => Auth::None,
        };
        let client = config.client(config.base_url.clone(), auth, ATTEMPT_TIMEOUT);
        let mut once = client.clone();
        once.retry = RetryPolicy {
            max_attempts: 1,
            ..client.retry.clone()
        };
        Ok(AccountClient {
            http: HttpClient::new(client)?,
            once: HttpClient::new(once)?,
        })
    }

    /// Signs the login text for `timestamp` (unix seconds) and asks for an API key.
    pub async fn register_wallet(
        &self,
        wallet: &PrivateKey,
        login_word: &str,
        timestamp: i64,
    ) -> Result<ApiKeyGrant, AccountError> {
        let signature = wallet.sign_personal(login_message(login_word, timestamp));
        let body = WalletLogin {
            address: wallet.address().to_string(),
            signature: signature.to_string(),
            timestamp,
        };
        let call = Call::post_json("/v1/auth/wallet", &body)?;
        Ok(self.http.send_json(&call).await?)
    }

    pub async fn balance(&self) -> Result<CreditBalance, AccountError> {
        Ok(self
            .http
            .send_json(&Call::get("/v1/credits/balance"))
            .await?)
    }

    /// Step 1 of a top-up: the request without payment, which must be answered 402 with the
    /// payment requirements.
    pub async fn payment_requirements(
        &self,
        amount: UsdcAmount,
    ) -> Result<PaymentRequirements, AccountError> {
        let call = Call::post_json(TOPUP_PATH, &topup_body(amount))?;
        match self.http.send(&call).await {
            Ok(response) => Err(AccountError::NoPaymentAsked {
                status: response.status(),
            }),
            Err(ApiError::Status { status, body, .. })
                if status == StatusCode::PAYMENT_REQUIRED =>
            {
                serde_json::from_str(&body)
                    .map_err(|error| AccountError::Requirements { error, body })
            }
            Err(err) => Err(err.into()),
        }
    }

    /// Step 2: signs a `TransferWithAuthorization` for exactly what was accepted, valid from
    /// `now - 600` to `now + maxTimeoutSeconds`, and sends it once in `X-PAYMENT`.
    pub async fn pay(
        &self,
        accepted: &AcceptedPayment,
        wallet: &PrivateKey,
        now: u64,
    ) -> Result<TopupReceipt, AccountError> {
        let authorization = TransferWithAuthorization::for_payment(
            wallet.address(),
            accepted.pay_to,
            accepted.amount.atomic(),
            now,
            accepted.max_timeout_seconds,
            random_nonce()?,
        );
        let payload =
            PaymentPayload::sign(wallet, accepted.network, &accepted.domain, authorization)?;
        let call = Call::post_json(TOPUP_PATH, &topup_body(accepted.amount))?.with_header(
            HeaderName::from_static(PAYMENT_HEADER),
            &payload.to_header(),
        )?;
        let response = self.once.send(&call).await?;
        let settlement = response
            .headers()
            .get(PAYMENT_RESPONSE_HEADER)
            .map(|value| match value.to_str() {
                Ok(text) => SettlementResponse::from_header(text),
                Err(_) => Err("not ASCII".to_string()),
            });
        let body = response.text().await.map_err(ApiError::Transport)?;
        let result =
            serde_json::from_str(&body).map_err(|error| ApiError::Decode { error, body })?;
        Ok(TopupReceipt {
            result,
            settlement,
            payer: wallet.address().to_string(),
        })
    }

    /// Posts a message after checking the contract's rules.
    pub async fn post_message(&self, post: &PostMessage) -> Result<ChannelMessage, AccountError> {
        check_post(post)?;
        let call = Call::post_json("/v1/channel", post)?;
        Ok(self.http.send_json(&call).await?)
    }

    /// One page, in the order the service sends it (newest first on `serve`).
    pub async fn read_messages(
        &self,
        query: &ReadQuery,
    ) -> Result<Vec<ChannelMessage>, AccountError> {
        super::channel::check_limit(query.limit)?;
        let call = Call::get(format!("/v1/channel?{}", query.to_query_string()));
        let page: MessagePage = self.http.send_json(&call).await?;
        Ok(page.messages)
    }

    /// Every message after `after`, oldest first. Works whatever order the service pages in:
    /// while pages come back full, it reads the gap below the oldest message seen (with
    /// `before`), so a burst of more than one page between two polls is not lost.
    pub async fn read_after(
        &self,
        channel: Channel,
        after: DateTime<Utc>,
    ) -> Result<Vec<ChannelMessage>, AccountError> {
        let mut seen = HashSet::new();
        let mut messages = Vec::new();
        let mut before: Option<DateTime<Utc>> = None;
        for _ in 0..MAX_CATCH_UP_PAGES {
            let query = ReadQuery {
                channel,
                limit: MAX_LIMIT,
                before,
                after: Some(after),
            };
            let page = self.read_messages(&query).await?;
            let full = page.len() >= MAX_LIMIT as usize;
            let oldest = page.iter().filter_map(created_at).min();
            for message in page {
                if seen.insert(message.id.clone()) {
                    messages.push(message);
                }
            }
            match oldest {
                Some(oldest) if full && before.is_none_or(|b| oldest < b) => {
                    before = Some(oldest);
                }
                _ => break,
            }
        }
        sort_oldest_first(&mut messages);
        Ok(messages)
    }
}

fn topup_body(amount: UsdcAmount) -> TopupRequest {
    TopupRequest {
        amount: amount.to_string(),
    }
}

/// A message's `createdAt`, if it is a timestamp.
pub fn created_at(message: &ChannelMessage) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(&message.created_at)
        .ok()
        .map(|t| t.with_timezone(&Utc))
}

/// Chronological order, as a chat log reads; ties (and unreadable times) by id.
pub fn sort_oldest_first(messages: &mut [ChannelMessage]) {
    messages.sort_by(|a, b| {
        created_at(a)
            .cmp(&created_at(b))
            .then_with(|| a.id.cmp(&b.id))
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_login_text_is_word_login_timestamp() {
        assert_eq!(login_message("dria", 1740672089), "dria-login-1740672089");
    }

    #[test]
    fn messages_sort_chronologically() {
        let message = |id: &str, at: &str| ChannelMessage {
            id: id.into(),
            channel: "general".into(),
            author: String::new(),
            author_name: String::new(),
            author_type: "api".into(),
            content: String::new(),
            created_at: at.into(),
        };
        let mut messages = vec![
            message("c", "2025-01-01T00:00:02.000Z"),
            message("a", "2025-01-01T01:00:00.000+01:00"),
            message("b", "2025-01-01T00:00:01.000Z"),
        ];
        sort_oldest_first(&mut messages);
        let ids: Vec<_> = messages.iter().map(|m| m.id.as_str()).collect();
        assert_eq!(ids, ["a", "b", "c"]);
    }
}
