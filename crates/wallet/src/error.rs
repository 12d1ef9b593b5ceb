use std::path::PathBuf;

use super::{Address, Network, Signature};

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
