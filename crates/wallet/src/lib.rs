//! The wallet: the user's private key and everything signed with it. Owns key loading (hex,
//! environment variable, owner-only file), EIP-55 addresses, EIP-191 personal signatures (the
//! wallet login), a small EIP-712 encoder, and the x402 `exact` payment (a USDC
//! `TransferWithAuthorization`) with its `X-PAYMENT` header, for both the paying client and the
//! verifying server. Pure computation: no HTTP and no clock; `account` and `server` decide when
//! to sign and what to accept.

mod address;
mod eip712;
mod key;
mod x402;

pub use address::{Address, keccak256};
pub use eip712::{
    EIP712_DOMAIN_TYPE, Eip712Domain, Eip712Value, eip712_digest, hash_struct, type_hash,
};
pub use key::{PrivateKey, Signature, personal_message_hash, recover_digest, recover_personal};
pub use x402::{
    Network, PaymentPayload, TRANSFER_WITH_AUTHORIZATION_TYPE, TransferWithAuthorization,
    VALID_AFTER_SLACK_SECONDS, X402_VERSION, random_nonce,
};

use std::path::PathBuf;

/// Everything that can go wrong in the wallet. Variants name the file, variable or field and the
/// value seen, except for private keys, whose text is never repeated.
#[derive(Debug, thiserror::Error)]
pub enum WalletError {
    #[error(
        "environment variable {var} is not set; it should hold the wallet's private key (64 hex digits)"
    )]
    MissingKeyEnv { var: String },

    #[error("private key from {origin} is malformed: {reason}")]
    MalformedKey { origin: String, reason: String },

    #[error("cannot read private key file {}", path.display())]
    KeyFileRead {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    #[error(
        "private key file {} has mode {mode:04o}, so others may read it; allow only its owner (chmod 600 {})",
        path.display(),
        path.display()
    )]
    KeyFileTooOpen { path: PathBuf, mode: u32 },

    #[error("address {value:?} is malformed: {reason}")]
    MalformedAddress { value: String, reason: String },

    #[error("address {value} fails its EIP-55 checksum; the checksummed form is {expected}")]
    AddressChecksum { value: String, expected: Address },

    #[error("signature {value:?} is malformed: {reason}")]
    MalformedSignature { value: String, reason: String },

    #[error("signature {signature} does not recover to a public key for this message")]
    UnrecoverableSignature { signature: Signature },

    #[error("typed data {type_name:?}: {reason}")]
    TypedData { type_name: String, reason: String },

    #[error("unknown network {name:?}; known networks: base, base-sepolia")]
    UnknownNetwork { name: String },

    #[error("X-PAYMENT value is not an x402 payment payload: {reason}")]
    PaymentEncoding { reason: String },

    #[error("payment field {field} is {value:?}: {reason}")]
    PaymentField {
        field: &'static str,
        value: String,
        reason: String,
    },

    #[error("payment authorization is signed by {signer}, not by its payer {from}")]
    SignerMismatch { from: Address, signer: Address },

    #[error("signing domain has chain id {chain_id}, but network {network} is chain {}", network.chain_id())]
    ChainMismatch { network: Network, chain_id: u64 },

    #[error("the operating system's random number generator failed")]
    Randomness(#[source] rand::rand_core::OsError),
}

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
