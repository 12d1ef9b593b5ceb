use std::fmt;
use std::str::FromStr;

use k256::ecdsa::VerifyingKey;
use sha3::{Digest, Keccak256};

use super::{WalletError, decode_hex_into};

pub fn keccak256(data: impl AsRef<[u8]>) -> [u8; 32] {
    Keccak256::digest(data).into()
}

/// A 20-byte Ethereum account address. Displays in EIP-55 checksummed form, which is what the
/// services and the x402 payload expect.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Address(pub [u8; 20]);

impl Address {
    pub fn from_public_key(key: &VerifyingKey) -> Self {
        let point = key.to_sec1_point(false);
        // keccak256 of x ‖ y, without SEC1's leading 0x04 tag; the address is its last 20 bytes.
        let hash = keccak256(&point.as_bytes()[1..]);
        let mut bytes = [0u8; 20];
        bytes.copy_from_slice(&hash[12..]);
        Address(bytes)
    }

    pub fn to_checksummed(&self) -> String {
        let lower = hex::encode(self.0);
        let hash = keccak256(lower.as_bytes());
        let mut out = String::with_capacity(42);
        out.push_str("0x");
        for (i, digit) in lower.chars().enumerate() {
            let nibble = if i % 2 == 0 {
                hash[i / 2] >> 4
            } else {
                hash[i / 2] & 0x0f
            };
            out.push(if nibble >= 8 {
                digit.to_ascii_uppercase()
            } else {
                digit
            });
        }
        out
    }
}

impl FromStr for Address {
    type Err = WalletError;

    /// Accepts any case, with or without `0x`; mixed case is taken as an EIP-55 checksum and must
    /// be right, since a wrong one usually means a mistyped address.
    fn from_str(value: &str) -> Result<Self, WalletError> {
        let mut bytes = [0u8; 20];
        decode_hex_into(value, &mut bytes).map_err(|reason| WalletError::MalformedAddress {
            value: value.to_string(),
            reason,
        })?;
        let address = Address(bytes);
        let digits = &value[value.len() - 40..];
        let has_upper = digits.bytes().any(|b| b.is_ascii_uppercase());
        let has_lower = digits.bytes().any(|b| b.is_ascii_lowercase());
        if has_upper && has_lower && address.to_checksummed()[2..] != *digits {
            return Err(WalletError::AddressChecksum {
                value: value.to_string(),
                expected: address,
            });
        }
        Ok(address)
    }
}

impl fmt::Display for Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_checksummed())
    }
}

impl fmt::Debug for Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Address({self})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keccak256_of_empty_input() {
        assert_eq!(
            hex::encode(keccak256([])),
            "c5d2460186f7233c927e7db2dcc703c0e500b653ca82273b7bfad8045d85a470"
        );
    }

    #[test]
    fn checksummed_display_round_trips_through_any_case() {
        let checksummed = "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913";
        let lower: Address = checksummed.to_lowercase().parse().unwrap();
        let upper: Address = format!("0x{}", &checksummed[2..].to_uppercase())
            .parse()
            .unwrap();
        let bare: Address = checksummed[2..].parse().unwrap();
        assert_eq!(lower.to_string(), checksummed);
        assert_eq!(upper, lower);
        assert_eq!(bare, lower);
        assert_eq!(checksummed.parse::<Address>().unwrap(), lower);
    }

    #[test]
    fn eip55_examples() {
        for checksummed in [
            "0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed",
            "0xfB6916095ca1df60bB79Ce92cE3Ea74c37c5d359",
            "0xdbF03B407c01E7cD3CBea99509d93f8DDDC8C6FB",
            "0xD1220A0cf47c7B9Be7A2E6BA89F429762e7b9aDb",
        ] {
            let address: Address = checksummed.to_lowercase().parse().unwrap();
            assert_eq!(address.to_string(), checksummed);
        }
    }

    #[test]
    fn wrong_checksum_is_rejected_with_the_right_form() {
        let err = "0x833589FCD6eDb6E08f4c7C32D4f71b54bdA02913"
            .parse::<Address>()
            .unwrap_err();
        assert!(matches!(err, WalletError::AddressChecksum { .. }));
        assert!(
            err.to_string()
                .contains("0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913")
        );
    }

    #[test]
    fn malformed_addresses_name_the_value() {
        for bad in [
            "",
            "0x",
            "0x1234",
            "0xzz3589fcd6edb6e08f4c7c32d4f71b54bda02913",
            "0x833589fcd6edb6e08f4c7c32d4f71b54bda0291300",
            "0xé33589fcd6edb6e08f4c7c32d4f71b54bda0291",
        ] {
            let err = bad.parse::<Address>().unwrap_err();
            assert!(
                matches!(err, WalletError::MalformedAddress { .. }),
                "{bad}: {err}"
            );
            assert!(err.to_string().contains(&format!("{bad:?}")), "{err}");
        }
    }
}
