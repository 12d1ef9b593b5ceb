use sha3::{Digest, Keccak256};

use super::{Address, WalletError, keccak256};

pub const EIP712_DOMAIN_TYPE: &str =
    "EIP712Domain(string name,string version,uint256 chainId,address verifyingContract)";

/// The signing domain with the four fields token contracts such as USDC use.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Eip712Domain {
    pub name: String,
    pub version: String,
    pub chain_id: u64,
    pub verifying_contract: Address,
}

impl Eip712Domain {
    pub fn separator(&self) -> [u8; 32] {
        hash_encoded(
            EIP712_DOMAIN_TYPE,
            &[
                Eip712Value::String(&self.name),
                Eip712Value::String(&self.version),
                Eip712Value::Uint(u128::from(self.chain_id)),
                Eip712Value::Address(self.verifying_contract),
            ],
        )
    }
}

/// One member value of a struct. Arrays are not supported; a nested struct is given by its own
/// `hash_struct`, which is exactly what EIP-712 encodes in its place.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Eip712Value<'a> {
    Address(Address),
    /// Any of `uint8` … `uint256`; amounts here never need more than 128 bits.
    Uint(u128),
    Bool(bool),
    Bytes32([u8; 32]),
    String(&'a str),
    Bytes(&'a [u8]),
    Struct([u8; 32]),
}

impl Eip712Value<'_> {
    fn encode(&self) -> [u8; 32] {
        let mut word = [0u8; 32];
        match self {
            Eip712Value::Address(address) => word[12..].copy_from_slice(&address.0),
            Eip712Value::Uint(value) => word[16..].copy_from_slice(&value.to_be_bytes()),
            Eip712Value::Bool(value) => word[31] = u8::from(*value),
            Eip712Value::Bytes32(bytes) | Eip712Value::Struct(bytes) => word = *bytes,
            Eip712Value::String(text) => word = keccak256(text.as_bytes()),
            Eip712Value::Bytes(bytes) => word = keccak256(bytes),
        }
        word
    }

    /// Why this value cannot stand for a member declared as `declared`, if it cannot.
    fn mismatch(&self, declared: &str, encode_type: &str) -> Option<String> {
        let fits = match (declared, self) {
            ("address", Eip712Value::Address(_))
            | ("bool", Eip712Value::Bool(_))
            | ("bytes32", Eip712Value::Bytes32(_))
            | ("string", Eip712Value::String(_))
            | ("bytes", Eip712Value::Bytes(_)) => true,
            (_, Eip712Value::Uint(value)) if declared.starts_with("uint") => {
                let Some(bits) = uint_bits(declared) else {
                    return Some(format!("{declared} is not a uint type"));
                };
                if bits < 128 && *value >= 1u128 << bits {
                    return Some(format!("{value} does not fit in {declared}"));
                }
                true
            }
            (_, Eip712Value::Struct(_)) if is_struct_name(declared) => {
                if !encode_type.contains(&format!("){declared}(")) {
                    return Some(format!(
                        "struct type {declared} is used but its definition is not appended to the type"
                    ));
                }
                true
            }
            _ => false,
        };
        (!fits).then(|| format!("a {} value cannot encode a {declared} member", self.kind()))
    }

    fn kind(&self) -> &'static str {
        match self {
            Eip712Value::Address(_) => "address",
            Eip712Value::Uint(_) => "uint",
            Eip712Value::Bool(_) => "bool",
            Eip712Value::Bytes32(_) => "bytes32",
            Eip712Value::String(_) => "string",
            Eip712Value::Bytes(_) => "bytes",
            Eip712Value::Struct(_) => "struct hash",
        }
    }
}

fn uint_bits(declared: &str) -> Option<u32> {
    let bits: u32 = declared.strip_prefix("uint")?.parse().ok()?;
    (bits.is_multiple_of(8) && (8..=256).contains(&bits)).then_some(bits)
}

/// Solidity's elementary type names are reserved, so any other identifier names a struct.
fn is_struct_name(declared: &str) -> bool {
    declared.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        && declared
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !["address", "bool", "string", "bytes"].contains(&declared)
        && !["uint", "int", "bytes"].iter().any(|prefix| {
            declared
                .strip_prefix(prefix)
                .is_some_and(|rest| rest.parse::<u32>().is_ok())
        })
}

pub fn type_hash(encode_type: &str) -> [u8; 32] {
    keccak256(encode_type.as_bytes())
}

/// `hashStruct` of the primary (first) type in `encode_type`, which is the EIP's `encodeType`:
/// the primary type followed by the definitions of the struct types it uses, sorted by name,
/// e.g. `Mail(Person from,Person to,string contents)Person(string name,address wallet)`.
/// The values must follow the primary type's members in order and match their types.
pub fn hash_struct(encode_type: &str, values: &[Eip712Value]) -> Result<[u8; 32], WalletError> {
    let invalid = |reason: String| WalletError::TypedData {
        type_name: encode_type.to_string(),
        reason,
    };
    let (_, after_name) = encode_type
        .split_once('(')
        .ok_or_else(|| invalid("expected Name(type member,…)".to_string()))?;
    let (members, _) = after_name
        .split_once(')')
        .ok_or_else(|| invalid("missing ')' after the members".to_string()))?;
    let members: Vec<&str> = if members.is_empty() {
        Vec::new()
    } else {
        members.split(',').collect()
    };
    if members.len() != values.len() {
        return Err(invalid(format!(
            "{} members declared, {} values given",
            members.len(),
            values.len()
        )));
    }
    for (member, value) in members.iter().zip(values) {
        let (declared, name) = member
            .split_once(' ')
            .ok_or_else(|| invalid(format!("member {member:?} is not \"type name\"")))?;
        if let Some(reason) = value.mismatch(declared, encode_type) {
            return Err(invalid(format!("member {name}: {reason}")));
        }
    }
    Ok(hash_encoded(encode_type, values))
}

/// `keccak256(typeHash ‖ encodeData)`, for callers that already know the values fit the type.
pub(super) fn hash_encoded(encode_type: &str, values: &[Eip712Value]) -> [u8; 32] {
    let mut hasher = Keccak256::new();
    hasher.update(type_hash(encode_type));
    for value in values {
        hasher.update(value.encode());
    }
    hasher.finalize().into()
}

/// The digest that is signed: `keccak256(0x1901 ‖ domainSeparator ‖ hashStruct(message))`.
pub fn eip712_digest(domain_separator: &[u8; 32], struct_hash: &[u8; 32]) -> [u8; 32] {
    let mut hasher = Keccak256::new();
    hasher.update([0x19, 0x01]);
    hasher.update(domain_separator);
    hasher.update(struct_hash);
    hasher.finalize().into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{PrivateKey, Signature, recover_digest};

    const PERSON: &str = "Person(string name,address wallet)";
    const MAIL: &str =
        "Mail(Person from,Person to,string contents)Person(string name,address wallet)";

    fn address(text: &str) -> Address {
        text.parse().unwrap()
    }

    fn hex32(bytes: [u8; 32]) -> String {
        format!("0x{}", hex::encode(bytes))
    }

    fn mail_domain() -> Eip712Domain {
        Eip712Domain {
            name: "Ether Mail".to_string(),
            version: "1".to_string(),
            chain_id: 1,
            verifying_contract: address("0xCcCCccccCCCCcCCCCCCcCcCccCcCCCcCcccccccC"),
        }
    }

    fn mail_hash() -> [u8; 32] {
        let from = hash_struct(
            PERSON,
            &[
                Eip712Value::String("Cow"),
                Eip712Value::Address(address("0xCD2a3d9F938E13CD947Ec05AbC7FE734Df8DD826")),
            ],
        )
        .unwrap();
        let to = hash_struct(
            PERSON,
            &[
                Eip712Value::String("Bob"),
                Eip712Value::Address(address("0xbBbBBBBbbBBBbbbBbbBbbbbBBbBbbbbBbBbbBBbB")),
            ],
        )
        .unwrap();
        hash_struct(
            MAIL,
            &[
                Eip712Value::Struct(from),
                Eip712Value::Struct(to),
                Eip712Value::String("Hello, Bob!"),
            ],
        )
        .unwrap()
    }

    #[test]
    fn mail_example_of_the_eip() {
        let key = PrivateKey::from_hex(&hex::encode(keccak256(b"cow"))).unwrap();
        assert_eq!(
            key.address().to_string(),
            "0xCD2a3d9F938E13CD947Ec05AbC7FE734Df8DD826"
        );
        let domain = mail_domain().separator();
        assert_eq!(
            hex32(domain),
            "0xf2cee375fa42b42143804025fc449deafd50cc031ca257e0b194a650a912090f"
        );
        let mail = mail_hash();
        assert_eq!(
            hex32(mail),
            "0xc52c0ee5d84264471806290a3f2c4cecfc5490626bf912d01f240d7a274b371e"
        );
        let digest = eip712_digest(&domain, &mail);
        assert_eq!(
            hex32(digest),
            "0xbe609aee343fb3c4b28e1df9e632fca64fcfaede20f02e86244efddf30957bd2"
        );
        let signature = key.sign_digest(&digest);
        assert_eq!(signature.v(), 28);
        assert_eq!(
            hex32(signature.r()),
            "0x4355c47d63924e8a72e509b65029052eb6c299d53a04e167c5775fd466751c9d"
        );
        assert_eq!(
            hex32(signature.s()),
            "0x07299936d304c153f6443dfa05f40ff007d72911b6f72307f996231605b91562"
        );
        assert_eq!(recover_digest(&digest, &signature).unwrap(), key.address());
    }

    #[test]
    fn sign_then_recover_over_a_digest() {
        let key = PrivateKey::from_hex(&hex::encode(keccak256(b"cow"))).unwrap();
        let digest = eip712_digest(&mail_domain().separator(), &[7u8; 32]);
        let signature = key.sign_digest(&digest);
        let reparsed: Signature = signature.to_string().parse().unwrap();
        assert_eq!(recover_digest(&digest, &reparsed).unwrap(), key.address());
    }

    #[test]
    fn every_atomic_type_encodes() {
        let encode_type = "All(address a,uint8 b,uint256 c,bytes32 d,string e,bytes f,bool g)";
        let values = [
            Eip712Value::Address(address("0x0000000000000000000000000000000000000001")),
            Eip712Value::Uint(255),
            Eip712Value::Uint(u128::MAX),
            Eip712Value::Bytes32([0xab; 32]),
            Eip712Value::String(""),
            Eip712Value::Bytes(&[1, 2, 3]),
            Eip712Value::Bool(true),
        ];
        let mut expected = type_hash(encode_type).to_vec();
        let mut word = [0u8; 32];
        word[31] = 1;
        expected.extend(word);
        word[31] = 255;
        expected.extend(word);
        let mut max = [0u8; 32];
        max[16..].fill(0xff);
        expected.extend(max);
        expected.extend([0xab; 32]);
        expected.extend(keccak256(b""));
        expected.extend(keccak256([1, 2, 3]));
        word[31] = 1;
        expected.extend(word);
        assert_eq!(
            hash_struct(encode_type, &values).unwrap(),
            keccak256(&expected)
        );
        assert!(hash_struct("Empty()", &[]).is_ok());
    }

    #[test]
    fn values_that_do_not_fit_the_type_are_errors() {
        let cases: [(&str, Vec<Eip712Value>, &str); 9] = [
            (
                "Person(string name,address wallet)",
                vec![Eip712Value::String("Cow")],
                "1 values",
            ),
            (
                "Person(string name,address wallet)",
                vec![Eip712Value::Bool(true), Eip712Value::Bool(true)],
                "member name",
            ),
            (
                "Small(uint8 x)",
                vec![Eip712Value::Uint(256)],
                "does not fit in uint8",
            ),
            (
                "Odd(uint7 x)",
                vec![Eip712Value::Uint(1)],
                "not a uint type",
            ),
            ("Signed(int256 x)", vec![Eip712Value::Uint(1)], "int256"),
            (
                "List(uint256[] xs)",
                vec![Eip712Value::Struct([0; 32])],
                "uint256[]",
            ),
            (
                "Mail(Person from)",
                vec![Eip712Value::Struct([0; 32])],
                "definition",
            ),
            ("NoParens", vec![], "expected Name("),
            (
                "Broken(uint256 x",
                vec![Eip712Value::Uint(1)],
                "missing ')'",
            ),
        ];
        for (encode_type, values, reason) in cases {
            let err = hash_struct(encode_type, &values).unwrap_err();
            let message = err.to_string();
            assert!(matches!(err, WalletError::TypedData { .. }));
            assert!(message.contains(reason), "{encode_type}: {message}");
            assert!(message.contains(encode_type), "{message}");
        }
    }
}
