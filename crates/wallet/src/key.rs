use std::fmt;
use std::io::Read;
use std::path::Path;
use std::str::FromStr;

use k256::ecdsa::{RecoveryId, SigningKey, VerifyingKey};
use sha3::{Digest, Keccak256};
use zeroize::Zeroizing;

use super::{Address, WalletError, decode_hex_into, to_0x_hex};

/// The user's secp256k1 private key. It can sign but never shows itself: `Debug` prints only a
/// shortened address, and there is no way to get the secret back out.
pub struct PrivateKey {
    signing_key: SigningKey,
    address: Address,
}

impl PrivateKey {
    /// 64 hex digits, with or without `0x`; surrounding whitespace is ignored.
    pub fn from_hex(text: &str) -> Result<Self, WalletError> {
        Self::parse(text, "the given hex string".to_string())
    }

    pub fn from_env(var: &str) -> Result<Self, WalletError> {
        let origin = format!("environment variable {var}");
        match std::env::var(var) {
            Ok(text) => Self::parse(&Zeroizing::new(text), origin),
            Err(std::env::VarError::NotPresent) => Err(WalletError::MissingKeyEnv {
                var: var.to_string(),
            }),
            Err(std::env::VarError::NotUnicode(_)) => Err(WalletError::MalformedKey {
                origin,
                reason: "not valid UTF-8".to_string(),
            }),
        }
    }

    /// Reads a key file that only its owner may read or write; on unix any group or other
    /// permission bit is refused, as ssh does for its keys.
    pub fn from_file(path: &Path) -> Result<Self, WalletError> {
        let read_error = |source| WalletError::KeyFileRead {
            path: path.to_path_buf(),
            source,
        };
        let mut file = gepa_lab_input::open_regular(path).map_err(read_error)?;
        // Checked on the open file rather than the path, so the file read is the file checked.
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = file.metadata().map_err(read_error)?.permissions().mode();
            if mode & 0o077 != 0 {
                return Err(WalletError::KeyFileTooOpen {
                    path: path.to_path_buf(),
                    mode: mode & 0o7777,
                });
            }
        }
        let mut text = Zeroizing::new(String::new());
        file.read_to_string(&mut text).map_err(read_error)?;
        Self::parse(&text, format!("file {}", path.display()))
    }

    fn parse(text: &str, origin: String) -> Result<Self, WalletError> {
        let mut secret = Zeroizing::new([0u8; 32]);
        decode_hex_into(text.trim(), secret.as_mut_slice()).map_err(|reason| {
            WalletError::MalformedKey {
                origin: origin.clone(),
                reason,
            }
        })?;
        let signing_key =
            SigningKey::from_slice(secret.as_slice()).map_err(|_| WalletError::MalformedKey {
                origin,
                reason: "not a secp256k1 private key (zero, or not below the curve order)"
                    .to_string(),
            })?;
        let address = Address::from_public_key(signing_key.verifying_key());
        Ok(PrivateKey {
            signing_key,
            address,
        })
    }

    pub fn address(&self) -> Address {
        self.address
    }

    /// Signs a 32-byte digest as Ethereum does: low-s, `v` = 27 or 28.
    pub fn sign_digest(&self, digest: &[u8; 32]) -> Signature {
        let (signature, recovery_id) = self.signing_key.sign_prehash_recoverable(digest);
        // Ethereum's v keeps only the parity of R.y; the "x reduced" case has probability ~2^-127.
        let recovery_id = RecoveryId::new(recovery_id.is_y_odd(), false);
        Signature {
            inner: signature,
            recovery_id,
        }
    }

    /// EIP-191 personal signature, as wallets' `personal_sign` makes it.
    pub fn sign_personal(&self, message: impl AsRef<[u8]>) -> Signature {
        self.sign_digest(&personal_message_hash(message))
    }
}

impl fmt::Debug for PrivateKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let address = self.address.to_string();
        write!(
            f,
            "PrivateKey({}…{} address)",
            &address[..6],
            &address[address.len() - 4..]
        )
    }
}

/// `keccak256("\x19Ethereum Signed Message:\n" ‖ decimal byte length ‖ message)`.
pub fn personal_message_hash(message: impl AsRef<[u8]>) -> [u8; 32] {
    let message = message.as_ref();
    let mut hasher = Keccak256::new();
    hasher.update(b"\x19Ethereum Signed Message:\n");
    hasher.update(message.len().to_string().as_bytes());
    hasher.update(message);
    hasher.finalize().into()
}

pub fn recover_personal(
    message: impl AsRef<[u8]>,
    signature: &Signature,
) -> Result<Address, WalletError> {
    recover_digest(&personal_message_hash(message), signature)
}

pub fn recover_digest(digest: &[u8; 32], signature: &Signature) -> Result<Address, WalletError> {
    let key = VerifyingKey::recover_from_prehash(digest, &signature.inner, signature.recovery_id)
        .map_err(|_| WalletError::UnrecoverableSignature {
        signature: *signature,
    })?;
    Ok(Address::from_public_key(&key))
}

/// A 65-byte Ethereum signature `r ‖ s ‖ v`. Only the form USDC's `ecrecover` accepts can be
/// built: `v` 27 or 28 and low `s`, so a payment that passes here cannot fail on chain for its
/// signature's shape.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Signature {
    inner: k256::ecdsa::Signature,
    recovery_id: RecoveryId,
}

impl Signature {
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, WalletError> {
        let malformed = |reason: &str| WalletError::MalformedSignature {
            value: to_0x_hex(bytes),
            reason: reason.to_string(),
        };
        if bytes.len() != 65 {
            return Err(malformed(&format!(
                "expected 65 bytes (r ‖ s ‖ v), found {}",
                bytes.len()
            )));
        }
        let y_is_odd = match bytes[64] {
            27 => false,
            28 => true,
            v => return Err(malformed(&format!("v is {v}, expected 27 or 28"))),
        };
        let inner = k256::ecdsa::Signature::from_slice(&bytes[..64])
            .map_err(|_| malformed("r or s is zero or not below the curve order"))?;
        if inner.normalize_s() != inner {
            return Err(malformed(
                "s is in the upper half of the curve order (not low-s)",
            ));
        }
        Ok(Signature {
            inner,
            recovery_id: RecoveryId::new(y_is_odd, false),
        })
    }

    pub fn to_bytes(&self) -> [u8; 65] {
        let mut bytes = [0u8; 65];
        bytes[..64].copy_from_slice(&self.inner.to_bytes());
        bytes[64] = self.v();
        bytes
    }

    pub fn r(&self) -> [u8; 32] {
        self.inner.split_bytes().0.into()
    }

    pub fn s(&self) -> [u8; 32] {
        self.inner.split_bytes().1.into()
    }

    pub fn v(&self) -> u8 {
        27 + u8::from(self.recovery_id.is_y_odd())
    }
}

impl FromStr for Signature {
    type Err = WalletError;

    /// 130 hex digits, with or without `0x`.
    fn from_str(value: &str) -> Result<Self, WalletError> {
        let mut bytes = [0u8; 65];
        decode_hex_into(value, &mut bytes).map_err(|reason| WalletError::MalformedSignature {
            value: value.to_string(),
            reason,
        })?;
        Signature::from_bytes(&bytes)
    }
}

/// `0x` followed by 130 lowercase hex digits, the form the services send and expect.
impl fmt::Display for Signature {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&to_0x_hex(&self.to_bytes()))
    }
}

impl fmt::Debug for Signature {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Signature({self})")
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    pub const HELLO_KEY: &str = "ac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80";
    const SOME_DATA_KEY: &str =
        "0x4c0883a69102937d6231471b5dbb6204fe5129617082792ae468d01a3f362318";
    /// secp256k1's group order n; `n - s` turns a low-s signature into its high-s twin.
    const CURVE_ORDER: &str = "fffffffffffffffffffffffffffffffebaaedce6af48a03bbfd25e8cd0364141";

    fn personal_vector(key: &str, address: &str, message: &str, hash: &str, signature: &str) {
        let key = PrivateKey::from_hex(key).unwrap();
        assert_eq!(key.address().to_string(), address);
        assert_eq!(to_0x_hex(&personal_message_hash(message)), hash);
        let signed = key.sign_personal(message);
        assert_eq!(signed.to_string(), signature);
        let parsed: Signature = signature.parse().unwrap();
        assert_eq!(parsed, signed);
        assert_eq!(
            recover_personal(message, &parsed).unwrap().to_string(),
            address
        );
    }

    #[test]
    fn eip191_hello_world_vector() {
        personal_vector(
            HELLO_KEY,
            "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266",
            "hello world",
            "0xd9eba16ed0ecae432b71fe008c98cc872bb4cc214d3220a36f365326cf807d68",
            "0xa461f509887bd19e312c0c58467ce8ff8e300d3c1a90b608a760c5b80318eaf15fe57c96f9175d6cd4daad4663763baa7e78836e067d0163e9a2ccf2ff753f5b1b",
        );
    }

    #[test]
    fn eip191_some_data_vector() {
        personal_vector(
            SOME_DATA_KEY,
            "0x2c7536E3605D9C16a7a3D7b1898e529396a65c23",
            "Some data",
            "0x1da44b586eb0729ff70a73c326926f6ed5a25f5b056e7f47fbc6e58d86871655",
            "0xb91467e570a6466aa9e9876cbcd013baba02900b8979d43fe208a4a4f339f5fd6007e74cd82e037b800186422fc2da167c747ef045e5d18a5f5d4300f8e1a0291c",
        );
    }

    #[test]
    fn sign_then_recover_round_trips_and_a_changed_message_does_not() {
        let key = PrivateKey::from_hex(SOME_DATA_KEY).unwrap();
        for message in ["", "service-login-1740672089", "ünïcødé ✓"] {
            let signature = key.sign_personal(message);
            assert!(signature.v() == 27 || signature.v() == 28);
            assert_eq!(
                recover_personal(message, &signature).unwrap(),
                key.address()
            );
            let reparsed = Signature::from_bytes(&signature.to_bytes()).unwrap();
            assert_eq!(reparsed, signature);
            if let Ok(other) = recover_personal(format!("{message}!"), &signature) {
                assert_ne!(other, key.address());
            }
        }
    }

    #[test]
    fn debug_shows_only_a_shortened_address() {
        let key = PrivateKey::from_hex(HELLO_KEY).unwrap();
        let printed = format!("{key:?}");
        assert_eq!(printed, "PrivateKey(0xf39F…2266 address)");
        assert!(!printed.to_lowercase().contains(HELLO_KEY));
        assert!(!printed.contains(&HELLO_KEY[..8]));
        assert!(!format!("{key:#?}").contains(&HELLO_KEY[..8]));
    }

    #[test]
    fn hex_keys_accept_prefix_case_and_whitespace() {
        let expected = PrivateKey::from_hex(HELLO_KEY).unwrap().address();
        for text in [
            format!("0x{HELLO_KEY}"),
            format!("0X{}", HELLO_KEY.to_uppercase()),
            format!("  {HELLO_KEY}\n"),
        ] {
            assert_eq!(PrivateKey::from_hex(&text).unwrap().address(), expected);
        }
    }

    #[test]
    fn malformed_keys_are_errors_that_never_repeat_the_key() {
        let cases = [
            String::new(),
            "0x".to_string(),
            HELLO_KEY[..62].to_string(),
            format!("{HELLO_KEY}00"),
            format!("{}g", &HELLO_KEY[..63]),
            "0".repeat(64),
            CURVE_ORDER.to_string(),
            "é".repeat(32),
        ];
        for text in cases {
            let err = PrivateKey::from_hex(&text).unwrap_err();
            assert!(matches!(err, WalletError::MalformedKey { .. }), "{err}");
            let message = err.to_string();
            assert!(message.contains("the given hex string"), "{message}");
            if text.len() >= 8 {
                assert!(!message.contains(&text[..8]), "{message}");
            }
        }
    }

    #[test]
    fn missing_env_var_is_named() {
        let var = "GEPA_LAB_WALLET_TEST_KEY_THAT_IS_NEVER_SET";
        let err = PrivateKey::from_env(var).unwrap_err();
        assert!(matches!(err, WalletError::MissingKeyEnv { .. }));
        assert!(err.to_string().contains(var));
    }

    #[test]
    fn key_file_readable_only_by_owner_loads() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("wallet.key");
        std::fs::write(&path, format!("0x{HELLO_KEY}\n")).unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        }
        let key = PrivateKey::from_file(&path).unwrap();
        assert_eq!(
            key.address().to_string(),
            "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266"
        );
    }

    #[cfg(unix)]
    #[test]
    fn key_file_readable_by_others_is_refused_naming_file_and_mode() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("wallet.key");
        std::fs::write(&path, HELLO_KEY).unwrap();
        for mode in [0o644, 0o640, 0o604, 0o660] {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
            let err = PrivateKey::from_file(&path).unwrap_err();
            assert!(
                matches!(err, WalletError::KeyFileTooOpen { mode: seen, .. } if seen == mode),
                "{err}"
            );
            let message = err.to_string();
            assert!(message.contains(&path.display().to_string()), "{message}");
            assert!(message.contains(&format!("{mode:04o}")), "{message}");
            assert!(!message.contains(HELLO_KEY));
        }
    }

    #[test]
    fn missing_or_malformed_key_file_names_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("absent.key");
        let err = PrivateKey::from_file(&missing).unwrap_err();
        assert!(matches!(err, WalletError::KeyFileRead { .. }));
        assert!(err.to_string().contains("absent.key"));

        let path = dir.path().join("short.key");
        std::fs::write(&path, &HELLO_KEY[..40]).unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o400)).unwrap();
        }
        let err = PrivateKey::from_file(&path).unwrap_err();
        assert!(matches!(err, WalletError::MalformedKey { .. }), "{err}");
        assert!(err.to_string().contains("short.key"));
        assert!(!err.to_string().contains(&HELLO_KEY[..40]));
    }

    fn hello_signature_bytes() -> [u8; 65] {
        PrivateKey::from_hex(HELLO_KEY)
            .unwrap()
            .sign_personal("hello world")
            .to_bytes()
    }

    #[test]
    fn malformed_signatures_are_rejected() {
        let good = hello_signature_bytes();
        let mut wrong_v = good;
        wrong_v[64] = 29;
        let mut zero_r = good;
        zero_r[..32].fill(0);
        let mut big_s = good;
        big_s[32..64].fill(0xff);
        for bytes in [&good[..64], &wrong_v[..], &zero_r[..], &big_s[..]] {
            let err = Signature::from_bytes(bytes).unwrap_err();
            assert!(
                matches!(err, WalletError::MalformedSignature { .. }),
                "{err}"
            );
        }
        let err = "0x1234".parse::<Signature>().unwrap_err();
        assert!(err.to_string().contains("0x1234"), "{err}");
        assert!(
            format!("0x{}zz", "00".repeat(64))
                .parse::<Signature>()
                .is_err()
        );
    }

    #[test]
    fn high_s_twin_of_a_valid_signature_is_rejected() {
        let good = hello_signature_bytes();
        let mut order = [0u8; 32];
        hex::decode_to_slice(CURVE_ORDER, &mut order).unwrap();
        // n - s, big-endian, with borrow.
        let mut high = good;
        let mut borrow = 0i16;
        for i in (0..32).rev() {
            let difference = i16::from(order[i]) - i16::from(good[32 + i]) - borrow;
            borrow = i16::from(difference < 0);
            high[32 + i] = (difference + 256 * borrow) as u8;
        }
        high[64] = if good[64] == 27 { 28 } else { 27 };
        let err = Signature::from_bytes(&high).unwrap_err();
        assert!(err.to_string().contains("low-s"), "{err}");
    }

    #[test]
    fn signature_parts() {
        let signature = PrivateKey::from_hex(HELLO_KEY)
            .unwrap()
            .sign_personal("hello world");
        let bytes = signature.to_bytes();
        assert_eq!(signature.r(), bytes[..32]);
        assert_eq!(signature.s(), bytes[32..64]);
        assert_eq!(signature.v(), 27);
        assert_eq!(format!("{signature:?}"), format!("Signature({signature})"));
    }
}
