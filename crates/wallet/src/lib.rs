//! The wallet: the user's private key and everything signed with it. Owns key loading (hex,
//! environment variable, owner-only file), EIP-55 addresses, EIP-191 personal signatures (the
//! wallet login), a small EIP-712 encoder, and the x402 `exact` payment (a USDC
//! `TransferWithAuthorization`) with its `X-PAYMENT` header, for both the paying client and the
//! verifying server. Pure computation: no HTTP and no clock; `account` and `server` decide when
//! to sign and what to accept.

mod address;
mod eip712;
mod error;
mod key;
mod x402;

pub use address::{Address, keccak256};
pub use eip712::{
    EIP712_DOMAIN_TYPE, Eip712Domain, Eip712Value, eip712_digest, hash_struct, type_hash,
};
pub use error::WalletError;
pub use key::{PrivateKey, Signature, personal_message_hash, recover_digest, recover_personal};
pub use x402::{
    Network, PaymentPayload, TRANSFER_WITH_AUTHORIZATION_TYPE, TransferWithAuthorization,
    VALID_AFTER_SLACK_SECONDS, X402_VERSION, random_nonce,
};

/// Fills `out` from hex digits, with or without `0x`. The reason it returns never quotes the
/// input, because the input may be a private key.
fn decode_hex_into(text: &str, out: &mut [u8]) -> Result<(), String> {
    let digits = text
        .strip_prefix("0x")
        .or_else(|| text.strip_prefix("0X"))
        .unwrap_or(text);
    if digits.len() != 2 * out.len() {
        return Err(format!(
            "expected {} hex digits, found {}",
            2 * out.len(),
            digits.chars().count()
        ));
    }
    hex::decode_to_slice(digits, out)
        .map_err(|_| "contains a character that is not a hex digit".to_string())
}

fn to_0x_hex(bytes: &[u8]) -> String {
    format!("0x{}", hex::encode(bytes))
}
