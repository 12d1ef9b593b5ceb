//! The JSON bodies of the account half of the inference API (`inference-api.md` sections 2 and
//! 4: wallet registration, credits, x402 top-up, channels), and the x402 settlement header.
//! Both the client and `serve` use these types, so each shape is written down once.
//!
//! Parsing is lenient (unknown keys ignored); what the contract calls "not shown" is optional.
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use gepa_lab_http::Secret;

/// The path the 402 requirements name as `resource`.
pub const TOPUP_PATH: &str = "/v1/credits/topup";

/// `POST /v1/auth/wallet` body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WalletLogin {
    pub address: String,
    pub signature: String,
    pub timestamp: i64,
}

/// `POST /v1/auth/wallet` answer. The key is a `Secret`: it serialises (the server must send
/// it) but never prints.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ApiKeyGrant {
    #[serde(default)]
    pub id: String,
    #[serde(serialize_with = "expose_secret", deserialize_with = "secret")]
    pub key: Secret,
    #[serde(default)]
    pub tier: String,
    pub rpm_limit: u32,
}

fn expose_secret<S: Serializer>(secret: &Secret, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(secret.expose())
}

fn secret<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Secret, D::Error> {
    String::deserialize(deserializer).map(Secret::new)
}

/// `GET /v1/credits/balance` answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CreditBalance {
    pub balance: i64,
    #[serde(default)]
    pub balance_usdc: String,
}

/// `POST /v1/credits/topup` body: a decimal USDC amount, as a string.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopupRequest {
    pub amount: String,
}

/// The top-up's 402 body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PaymentRequirements {
    pub x402_version: u32,
    #[serde(default)]
    pub accepts: Vec<PaymentOption>,
}

/// One way to pay, an item of `accepts`. Fields are kept as sent (strings) so that checking
/// them can quote exactly what the service asked for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PaymentOption {
    pub scheme: String,
    pub network: String,
    pub max_amount_required: String,
    #[serde(default)]
    pub resource: String,
    pub pay_to: String,
    pub asset: String,
    #[serde(default)]
    pub max_timeout_seconds: u64,
    #[serde(default)]
    pub extra: Option<TokenExtra>,
}

/// The token's EIP-712 domain name and version.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenExtra {
    pub name: String,
    pub version: String,
}

/// `POST /v1/credits/topup` answer after payment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopupResult {
    pub credits_added: i64,
    pub balance: i64,
    #[serde(default)]
    pub balance_usdc: String,
    #[serde(rename = "txHash", default)]
    pub tx_hash: String,
}

/// The `X-PAYMENT-RESPONSE` header: base64 JSON of the settlement.
pub const PAYMENT_RESPONSE_HEADER: &str = "x-payment-response";
pub const PAYMENT_HEADER: &str = "x-payment";

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SettlementResponse {
    pub success: bool,
    #[serde(default)]
    pub transaction: String,
    #[serde(default)]
    pub network: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payer: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_reason: Option<String>,
}

impl SettlementResponse {
    pub fn to_header(&self) -> String {
        STANDARD.encode(serde_json::to_vec(self).unwrap_or_default())
    }

    /// Decodes the header; the reason says which layer (base64 or JSON) failed.
    pub fn from_header(value: &str) -> Result<Self, String> {
        let bytes = STANDARD
            .decode(value.trim())
            .map_err(|e| format!("not base64: {e}"))?;
        serde_json::from_slice(&bytes).map_err(|e| format!("not settlement JSON: {e}"))
    }
}

/// `POST /v1/channel` body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PostMessage {
    pub channel: String,
    pub content: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub avatar: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ChannelMessage {
    pub id: String,
    pub channel: String,
    #[serde(default)]
    pub author: String,
    #[serde(default)]
    pub author_name: String,
    #[serde(default)]
    pub author_type: String,
    #[serde(default)]
    pub content: String,
    pub created_at: String,
}

/// `GET /v1/channel` answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MessagePage {
    #[serde(default)]
    pub messages: Vec<ChannelMessage>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_grants_parse_leniently_and_never_print_the_key() {
        let grant: ApiKeyGrant = serde_json::from_str(
            r#"{"id":"u1","key":"dkn_live_secret","tier":"free","rpmLimit":60,"other":1}"#,
        )
        .unwrap();
        assert_eq!(grant.key.expose(), "dkn_live_secret");
        assert_eq!(grant.rpm_limit, 60);
        assert!(!format!("{grant:?}").contains("dkn_live_secret"));
        let json = serde_json::to_string(&grant).unwrap();
        assert!(json.contains(r#""key":"dkn_live_secret""#), "{json}");
        assert!(json.contains(r#""rpmLimit":60"#), "{json}");
    }

    #[test]
    fn documented_requirements_parse() {
        let body = r#"{"x402Version":1,"accepts":[{"scheme":"exact","network":"base",
            "maxAmountRequired":"10000000","resource":"/v1/credits/topup",
            "payTo":"0x209693Bc6afc0C5328bA36FaF03C514EF312287C",
            "asset":"0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913","maxTimeoutSeconds":300,
            "extra":{"name":"USD Coin","version":"2"}}]}"#;
        let parsed: PaymentRequirements = serde_json::from_str(body).unwrap();
        assert_eq!(parsed.accepts[0].max_amount_required, "10000000");
        assert_eq!(parsed.accepts[0].extra.as_ref().unwrap().version, "2");
    }

    #[test]
    fn settlement_header_round_trips() {
        let settlement = SettlementResponse {
            success: true,
            transaction: "0xab".into(),
            network: "local".into(),
            payer: Some("0x1".into()),
            error_reason: None,
        };
        let header = settlement.to_header();
        assert_eq!(
            SettlementResponse::from_header(&header).unwrap(),
            settlement
        );
        assert!(
            SettlementResponse::from_header("!!")
                .unwrap_err()
                .contains("base64")
        );
    }
}
