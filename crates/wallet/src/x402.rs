use std::fmt;
use std::str::FromStr;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use rand::TryRngCore;
use rand::rngs::OsRng;
use serde::{Deserialize, Serialize};

use super::eip712::hash_encoded;
use super::{
    Address, Eip712Domain, Eip712Value, PrivateKey, Signature, WalletError, decode_hex_into,
    eip712_digest, recover_digest, to_0x_hex,
};

pub const X402_VERSION: u32 = 1;
const SCHEME: &str = "exact";

pub const TRANSFER_WITH_AUTHORIZATION_TYPE: &str = "TransferWithAuthorization(address from,address to,uint256 value,uint256 validAfter,uint256 validBefore,bytes32 nonce)";

/// The reference clients date `validAfter` this far back so a server whose clock runs behind
/// still accepts the payment.
pub const VALID_AFTER_SLACK_SECONDS: u64 = 600;

/// A chain that x402 payments settle on, by its x402 network name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Network {
    Base,
    BaseSepolia,
}

impl Network {
    pub fn name(self) -> &'static str {
        match self {
            Network::Base => "base",
            Network::BaseSepolia => "base-sepolia",
        }
    }

    pub fn chain_id(self) -> u64 {
        match self {
            Network::Base => 8453,
            Network::BaseSepolia => 84532,
        }
    }

    /// Circle's USDC contract on this network, the only asset a careful client pays in.
    pub fn usdc(self) -> Address {
        Address(match self {
            // 0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913
            Network::Base => [
                0x83, 0x35, 0x89, 0xfc, 0xd6, 0xed, 0xb6, 0xe0, 0x8f, 0x4c, 0x7c, 0x32, 0xd4, 0xf7,
                0x1b, 0x54, 0xbd, 0xa0, 0x29, 0x13,
            ],
            // 0x036CbD53842c5426634e7929541eC2318f3dCF7e
            Network::BaseSepolia => [
                0x03, 0x6c, 0xbd, 0x53, 0x84, 0x2c, 0x54, 0x26, 0x63, 0x4e, 0x79, 0x29, 0x54, 0x1e,
                0xc2, 0x31, 0x8f, 0x3d, 0xcf, 0x7e,
            ],
        })
    }
}

impl FromStr for Network {
    type Err = WalletError;

    fn from_str(name: &str) -> Result<Self, WalletError> {
        match name {
            "base" => Ok(Network::Base),
            "base-sepolia" => Ok(Network::BaseSepolia),
            _ => Err(WalletError::UnknownNetwork {
                name: name.to_string(),
            }),
        }
    }
}

impl fmt::Display for Network {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// 32 bytes from the operating system, for `TransferWithAuthorization.nonce`: the token contract
/// refuses a nonce it has seen, so it must never repeat.
pub fn random_nonce() -> Result<[u8; 32], WalletError> {
    let mut nonce = [0u8; 32];
    OsRng
        .try_fill_bytes(&mut nonce)
        .map_err(WalletError::Randomness)?;
    Ok(nonce)
}

/// EIP-3009's signed permission for the token contract to move `value` atomic units (USDC has 6
/// decimals) from `from` to `to` within the validity window (unix seconds).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TransferWithAuthorization {
    pub from: Address,
    pub to: Address,
    pub value: u128,
    pub valid_after: u64,
    pub valid_before: u64,
    pub nonce: [u8; 32],
}

impl TransferWithAuthorization {
    /// The window the reference clients use: from `now - 600` to `now + max_timeout_seconds`,
    /// where the timeout is the one the 402 requirements give.
    pub fn for_payment(
        from: Address,
        to: Address,
        value: u128,
        now: u64,
        max_timeout_seconds: u64,
        nonce: [u8; 32],
    ) -> Self {
        TransferWithAuthorization {
            from,
            to,
            value,
            valid_after: now.saturating_sub(VALID_AFTER_SLACK_SECONDS),
            valid_before: now.saturating_add(max_timeout_seconds),
            nonce,
        }
    }

    pub fn struct_hash(&self) -> [u8; 32] {
        hash_encoded(
            TRANSFER_WITH_AUTHORIZATION_TYPE,
            &[
                Eip712Value::Address(self.from),
                Eip712Value::Address(self.to),
                Eip712Value::Uint(self.value),
                Eip712Value::Uint(u128::from(self.valid_after)),
                Eip712Value::Uint(u128::from(self.valid_before)),
                Eip712Value::Bytes32(self.nonce),
            ],
        )
    }

    pub fn digest(&self, domain: &Eip712Domain) -> [u8; 32] {
        eip712_digest(&domain.separator(), &self.struct_hash())
    }
}

/// A signed x402 `exact` payment: what the client puts in `X-PAYMENT` and the server checks.
/// `domain` is the token's EIP-712 domain: `extra.name`, `extra.version` of the 402
/// requirements, the network's chain id, and `asset` as the verifying contract.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PaymentPayload {
    pub network: Network,
    pub signature: Signature,
    pub authorization: TransferWithAuthorization,
}

impl PaymentPayload {
    pub fn sign(
        key: &PrivateKey,
        network: Network,
        domain: &Eip712Domain,
        authorization: TransferWithAuthorization,
    ) -> Result<Self, WalletError> {
        check_chain(network, domain)?;
        if authorization.from != key.address() {
            return Err(WalletError::SignerMismatch {
                from: authorization.from,
                signer: key.address(),
            });
        }
        Ok(PaymentPayload {
            network,
            signature: key.sign_digest(&authorization.digest(domain)),
            authorization,
        })
    }

    /// Checks that `authorization.from` signed this authorization under `domain`, and returns
    /// that payer. Amount, recipient, asset and time window are the server's to judge.
    pub fn verify(&self, domain: &Eip712Domain) -> Result<Address, WalletError> {
        check_chain(self.network, domain)?;
        let signer = recover_digest(&self.authorization.digest(domain), &self.signature)?;
        if signer != self.authorization.from {
            return Err(WalletError::SignerMismatch {
                from: self.authorization.from,
                signer,
            });
        }
        Ok(signer)
    }

    /// The JSON the reference clients send: every number a decimal string, addresses EIP-55.
    pub fn to_json(&self) -> String {
        let authorization = &self.authorization;
        let wire = WirePayment {
            x402_version: X402_VERSION,
            scheme: SCHEME.to_string(),
            network: self.network.name().to_string(),
            payload: WireExactPayload {
                signature: self.signature.to_string(),
                authorization: WireAuthorization {
                    from: authorization.from.to_string(),
                    to: authorization.to.to_string(),
                    value: authorization.value.to_string(),
                    valid_after: authorization.valid_after.to_string(),
                    valid_before: authorization.valid_before.to_string(),
                    nonce: to_0x_hex(&authorization.nonce),
                },
            },
        };
        serde_json::to_string(&wire).expect("a struct of strings and an integer serialises")
    }

    /// Parses the JSON leniently (unknown keys ignored) but the values strictly: version 1,
    /// scheme `exact`, a known network, and well-formed numbers, addresses, nonce and signature.
    pub fn from_json(text: &str) -> Result<Self, WalletError> {
        let wire: WirePayment =
            serde_json::from_str(text).map_err(|err| WalletError::PaymentEncoding {
                reason: format!("JSON: {err}"),
            })?;
        if wire.x402_version != X402_VERSION {
            return Err(field_error(
                "x402Version",
                &wire.x402_version.to_string(),
                "only version 1 is supported",
            ));
        }
        if wire.scheme != SCHEME {
            return Err(field_error(
                "scheme",
                &wire.scheme,
                "only the exact scheme is supported",
            ));
        }
        let network = wire
            .network
            .parse()
            .map_err(|_| field_error("network", &wire.network, "expected base or base-sepolia"))?;
        let signature = wire.payload.signature.parse().map_err(|err| {
            field_error(
                "payload.signature",
                &wire.payload.signature,
                &reason_of(err),
            )
        })?;
        let auth = &wire.payload.authorization;
        let mut nonce = [0u8; 32];
        decode_hex_into(&auth.nonce, &mut nonce)
            .map_err(|reason| field_error("payload.authorization.nonce", &auth.nonce, &reason))?;
        let authorization = TransferWithAuthorization {
            from: parse_address("payload.authorization.from", &auth.from)?,
            to: parse_address("payload.authorization.to", &auth.to)?,
            value: parse_decimal("payload.authorization.value", &auth.value)?,
            valid_after: parse_decimal("payload.authorization.validAfter", &auth.valid_after)?,
            valid_before: parse_decimal("payload.authorization.validBefore", &auth.valid_before)?,
            nonce,
        };
        Ok(PaymentPayload {
            network,
            signature,
            authorization,
        })
    }

    /// The `X-PAYMENT` header value: standard base64 with padding.
    pub fn to_header(&self) -> String {
        STANDARD.encode(self.to_json())
    }

    pub fn from_header(value: &str) -> Result<Self, WalletError> {
        let json = STANDARD
            .decode(value.trim())
            .map_err(|err| WalletError::PaymentEncoding {
                reason: format!("base64: {err}"),
            })?;
        let text = std::str::from_utf8(&json).map_err(|err| WalletError::PaymentEncoding {
            reason: format!("not UTF-8: {err}"),
        })?;
        Self::from_json(text)
    }
}

fn check_chain(network: Network, domain: &Eip712Domain) -> Result<(), WalletError> {
    if domain.chain_id != network.chain_id() {
        return Err(WalletError::ChainMismatch {
            network,
            chain_id: domain.chain_id,
        });
    }
    Ok(())
}

fn field_error(field: &'static str, value: &str, reason: &str) -> WalletError {
    WalletError::PaymentField {
        field,
        value: value.to_string(),
        reason: reason.to_string(),
    }
}

/// The reason inside a value error, so a field error does not repeat the value twice.
fn reason_of(err: WalletError) -> String {
    match err {
        WalletError::MalformedAddress { reason, .. }
        | WalletError::MalformedSignature { reason, .. } => reason,
        other => other.to_string(),
    }
}

fn parse_address(field: &'static str, value: &str) -> Result<Address, WalletError> {
    value
        .parse()
        .map_err(|err| field_error(field, value, &reason_of(err)))
}

/// x402 writes every number as a decimal string; plain digits only, as a sign or spaces there
/// would mean a client bug.
fn parse_decimal<T: FromStr>(field: &'static str, value: &str) -> Result<T, WalletError> {
    if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
        return Err(field_error(
            field,
            value,
            "expected a decimal string of digits",
        ));
    }
    value
        .parse()
        .map_err(|_| field_error(field, value, "number too large"))
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct WirePayment {
    x402_version: u32,
    scheme: String,
    network: String,
    payload: WireExactPayload,
}

#[derive(Serialize, Deserialize)]
struct WireExactPayload {
    signature: String,
    authorization: WireAuthorization,
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireAuthorization {
    from: String,
    to: String,
    value: String,
    valid_after: String,
    valid_before: String,
    nonce: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::tests::HELLO_KEY;

    const VECTOR_JSON: &str = concat!(
        r#"{"x402Version":1,"scheme":"exact","network":"base","payload":{"#,
        r#""signature":"0x63be6f6ef96e4de001cadced720e2aec84f233c60549d555c2b1855d144f655c22805019207cf50dfc1d8fecdccda017f0b3f715d384fa8007c0aecb5268fdce1c","#,
        r#""authorization":{"from":"0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266","#,
        r#""to":"0x209693Bc6afc0C5328bA36FaF03C514EF312287C","value":"10000000","#,
        r#""validAfter":"1740672089","validBefore":"1740672154","#,
        r#""nonce":"0xf3746613c2d920b5fdabc0856f2aeb2d4f88ee6037b8cc5d04a71a4462f13480"}}}"#
    );

    fn usdc_base_domain() -> Eip712Domain {
        Eip712Domain {
            name: "USD Coin".to_string(),
            version: "2".to_string(),
            chain_id: Network::Base.chain_id(),
            verifying_contract: Network::Base.usdc(),
        }
    }

    fn vector_authorization() -> TransferWithAuthorization {
        let mut nonce = [0u8; 32];
        hex::decode_to_slice(
            "f3746613c2d920b5fdabc0856f2aeb2d4f88ee6037b8cc5d04a71a4462f13480",
            &mut nonce,
        )
        .unwrap();
        TransferWithAuthorization {
            from: "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266"
                .parse()
                .unwrap(),
            to: "0x209693Bc6afc0C5328bA36FaF03C514EF312287C"
                .parse()
                .unwrap(),
            value: 10_000_000,
            valid_after: 1740672089,
            valid_before: 1740672154,
            nonce,
        }
    }

    fn vector_payload() -> PaymentPayload {
        let key = PrivateKey::from_hex(HELLO_KEY).unwrap();
        PaymentPayload::sign(
            &key,
            Network::Base,
            &usdc_base_domain(),
            vector_authorization(),
        )
        .unwrap()
    }

    #[test]
    fn transfer_with_authorization_vector() {
        assert_eq!(
            to_0x_hex(&super::super::type_hash(TRANSFER_WITH_AUTHORIZATION_TYPE)),
            "0x7c7c6cdb67a18743f49ec6fa9b35f50d52ed05cbed4cc592e13b44501c1a2267"
        );
        assert_eq!(
            to_0x_hex(&usdc_base_domain().separator()),
            "0x02fa7265e7c5d81118673727957699e4d68f74cd74b7db77da710fe8a2c7834f"
        );
        assert_eq!(
            to_0x_hex(&vector_authorization().digest(&usdc_base_domain())),
            "0xcc5e4448512b3692965cecf4083edab0f5bfd7c088e7640d2d495ecb5610a3cc"
        );
        assert_eq!(
            vector_payload().signature.to_string(),
            "0x63be6f6ef96e4de001cadced720e2aec84f233c60549d555c2b1855d144f655c22805019207cf50dfc1d8fecdccda017f0b3f715d384fa8007c0aecb5268fdce1c"
        );
    }

    #[test]
    fn struct_hash_matches_the_checked_encoder() {
        let auth = vector_authorization();
        let checked = super::super::hash_struct(
            TRANSFER_WITH_AUTHORIZATION_TYPE,
            &[
                Eip712Value::Address(auth.from),
                Eip712Value::Address(auth.to),
                Eip712Value::Uint(auth.value),
                Eip712Value::Uint(u128::from(auth.valid_after)),
                Eip712Value::Uint(u128::from(auth.valid_before)),
                Eip712Value::Bytes32(auth.nonce),
            ],
        )
        .unwrap();
        assert_eq!(auth.struct_hash(), checked);
    }

    #[test]
    fn payload_json_is_exactly_the_reference_shape() {
        assert_eq!(vector_payload().to_json(), VECTOR_JSON);
    }

    #[test]
    fn header_round_trips_and_verifies() {
        let payload = vector_payload();
        let header = payload.to_header();
        assert_eq!(STANDARD.decode(&header).unwrap(), VECTOR_JSON.as_bytes());
        let decoded = PaymentPayload::from_header(&header).unwrap();
        assert_eq!(decoded, payload);
        assert_eq!(
            decoded.verify(&usdc_base_domain()).unwrap(),
            payload.authorization.from
        );
    }

    #[test]
    fn random_payment_round_trips() {
        let key = PrivateKey::from_hex(HELLO_KEY).unwrap();
        let nonce = random_nonce().unwrap();
        assert_ne!(nonce, random_nonce().unwrap());
        let authorization = TransferWithAuthorization::for_payment(
            key.address(),
            "0x209693Bc6afc0C5328bA36FaF03C514EF312287C"
                .parse()
                .unwrap(),
            10_000_000,
            1_740_672_689,
            300,
            nonce,
        );
        assert_eq!(authorization.valid_after, 1_740_672_089);
        assert_eq!(authorization.valid_before, 1_740_672_989);
        let domain = Eip712Domain {
            name: "USDC".to_string(),
            version: "2".to_string(),
            chain_id: Network::BaseSepolia.chain_id(),
            verifying_contract: Network::BaseSepolia.usdc(),
        };
        let payload =
            PaymentPayload::sign(&key, Network::BaseSepolia, &domain, authorization).unwrap();
        let decoded = PaymentPayload::from_header(&payload.to_header()).unwrap();
        assert_eq!(decoded.network, Network::BaseSepolia);
        assert_eq!(decoded.verify(&domain).unwrap(), key.address());
    }

    #[test]
    fn unknown_keys_are_ignored() {
        let with_extra = VECTOR_JSON.replacen(
            r#""scheme":"exact","#,
            r#""scheme":"exact","resource":"/v1/credits/topup","#,
            1,
        );
        assert_eq!(
            PaymentPayload::from_json(&with_extra).unwrap(),
            vector_payload()
        );
    }

    #[test]
    fn tampered_payment_does_not_verify() {
        let mut payload = vector_payload();
        payload.authorization.value += 1;
        let err = payload.verify(&usdc_base_domain()).unwrap_err();
        assert!(matches!(err, WalletError::SignerMismatch { .. }), "{err}");
        assert!(
            err.to_string()
                .contains("0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266")
        );

        let mut other_domain = usdc_base_domain();
        other_domain.name = "USDC".to_string();
        assert!(vector_payload().verify(&other_domain).is_err());
    }

    #[test]
    fn wrong_chain_or_signer_is_refused_before_signing() {
        let key = PrivateKey::from_hex(HELLO_KEY).unwrap();
        let err = PaymentPayload::sign(
            &key,
            Network::BaseSepolia,
            &usdc_base_domain(),
            vector_authorization(),
        )
        .unwrap_err();
        assert!(matches!(err, WalletError::ChainMismatch { .. }), "{err}");
        assert!(err.to_string().contains("84532"));

        let mut authorization = vector_authorization();
        authorization.from = authorization.to;
        let err = PaymentPayload::sign(&key, Network::Base, &usdc_base_domain(), authorization)
            .unwrap_err();
        assert!(matches!(err, WalletError::SignerMismatch { .. }), "{err}");
    }

    #[test]
    fn malformed_headers_say_what_is_wrong() {
        for (header, expected) in [
            ("not base64!".to_string(), "base64"),
            ("eyJ4NDA".to_string(), "base64"),
            (STANDARD.encode([0xff, 0xfe]), "UTF-8"),
            (STANDARD.encode("{\"x402Version\":1}"), "JSON"),
            (STANDARD.encode("[]"), "JSON"),
        ] {
            let err = PaymentPayload::from_header(&header).unwrap_err();
            assert!(matches!(err, WalletError::PaymentEncoding { .. }), "{err}");
            assert!(err.to_string().contains(expected), "{err}");
        }
    }

    #[test]
    fn malformed_fields_are_named_with_their_value() {
        let cases = [
            (r#""x402Version":1"#, r#""x402Version":2"#, "x402Version"),
            (r#""scheme":"exact""#, r#""scheme":"upto""#, "scheme"),
            (r#""network":"base""#, r#""network":"ethereum""#, "network"),
            (
                r#""value":"10000000""#,
                r#""value":"10e6""#,
                "payload.authorization.value",
            ),
            (
                r#""value":"10000000""#,
                r#""value":"-1""#,
                "payload.authorization.value",
            ),
            (
                r#""value":"10000000""#,
                r#""value":"""#,
                "payload.authorization.value",
            ),
            (
                r#""value":"10000000""#,
                r#""value":"999999999999999999999999999999999999999999""#,
                "payload.authorization.value",
            ),
            (
                r#""validAfter":"1740672089""#,
                r#""validAfter":" 1740672089""#,
                "payload.authorization.validAfter",
            ),
            (
                r#""validBefore":"1740672154""#,
                r#""validBefore":"0x10""#,
                "payload.authorization.validBefore",
            ),
            (
                r#""nonce":"0xf3"#,
                r#""nonce":"0x"#,
                "payload.authorization.nonce",
            ),
            (
                r#""to":"0x209693Bc6afc"#,
                r#""to":"0x209693bC6afc"#,
                "payload.authorization.to",
            ),
            (
                r#""from":"0xf39F"#,
                r#""from":"0xf39G"#,
                "payload.authorization.from",
            ),
            (
                r#""signature":"0x63"#,
                r#""signature":"0x"#,
                "payload.signature",
            ),
        ];
        for (from, to, field) in cases {
            let json = VECTOR_JSON.replacen(from, to, 1);
            assert_ne!(json, VECTOR_JSON, "{from} not found");
            let err = PaymentPayload::from_json(&json).unwrap_err();
            assert!(
                matches!(&err, WalletError::PaymentField { field: seen, .. } if *seen == field),
                "{to}: {err}"
            );
        }
    }

    #[test]
    fn networks_by_name() {
        for network in [Network::Base, Network::BaseSepolia] {
            assert_eq!(network.name().parse::<Network>().unwrap(), network);
            assert_eq!(network.to_string(), network.name());
        }
        assert_eq!(Network::Base.chain_id(), 8453);
        assert_eq!(Network::BaseSepolia.chain_id(), 84532);
        assert_eq!(
            Network::Base.usdc().to_string(),
            "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913"
        );
        assert_eq!(
            Network::BaseSepolia.usdc().to_string(),
            "0x036CbD53842c5426634e7929541eC2318f3dCF7e"
        );
        let err = "Base".parse::<Network>().unwrap_err();
        assert!(err.to_string().contains("\"Base\""), "{err}");
    }
}
