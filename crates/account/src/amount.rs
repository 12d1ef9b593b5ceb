//! USDC amounts as the user types them and as x402 carries them, and credits. Exact decimal
//! arithmetic on the digits: a payment amount must never pass through a float.
use std::fmt;
use std::str::FromStr;

/// USDC has 6 decimals: 1 USDC is 10^6 atomic units.
pub const USDC_DECIMALS: u32 = 6;
const ATOMIC_PER_USDC: u128 = 10u128.pow(USDC_DECIMALS);

/// 1 USDC = 100 credits, so one credit is 0.01 USDC = 10^4 atomic units.
pub const CREDITS_PER_USDC: u64 = 100;
const ATOMIC_PER_CREDIT: u128 = ATOMIC_PER_USDC / CREDITS_PER_USDC as u128;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("amount {value:?} is not a USDC amount: {reason}")]
pub struct AmountError {
    pub value: String,
    pub reason: String,
}

/// A non-negative amount of USDC, held in atomic units (6 decimals).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct UsdcAmount(u128);

impl UsdcAmount {
    pub fn from_atomic(atomic: u128) -> Self {
        UsdcAmount(atomic)
    }

    /// The amount in the token's smallest unit, as `maxAmountRequired` and the signed `value`
    /// carry it.
    pub fn atomic(self) -> u128 {
        self.0
    }

    pub fn is_zero(self) -> bool {
        self.0 == 0
    }

    /// The credits this amount buys, if it is a whole number of cents.
    pub fn whole_credits(self) -> Option<u64> {
        if !self.0.is_multiple_of(ATOMIC_PER_CREDIT) {
            return None;
        }
        u64::try_from(self.0 / ATOMIC_PER_CREDIT).ok()
    }

    /// Parses an atomic-unit decimal string such as `maxAmountRequired`: digits only.
    pub fn from_atomic_str(value: &str) -> Result<Self, AmountError> {
        let error = |reason: &str| AmountError {
            value: value.to_string(),
            reason: reason.to_string(),
        };
        if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
            return Err(error(
                "expected a whole number of atomic units (digits only)",
            ));
        }
        value
            .parse()
            .map(UsdcAmount)
            .map_err(|_| error("number too large"))
    }
}

impl FromStr for UsdcAmount {
    type Err = AmountError;

    /// A plain decimal: digits, optionally `.` and 1 to 6 fraction digits. No sign, exponent,
    /// separators or spaces: an amount of money is refused rather than guessed at.
    fn from_str(value: &str) -> Result<Self, AmountError> {
        let error = |reason: &str| AmountError {
            value: value.to_string(),
            reason: reason.to_string(),
        };
        let (whole, fraction) = match value.split_once('.') {
            Some((whole, fraction)) => (whole, Some(fraction)),
            None => (value, None),
        };
        let digits = |text: &str| !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit());
        if !digits(whole) {
            return Err(error(
                "expected a decimal number such as 10 or 2.5 (digits, optionally a point and up to 6 fraction digits)",
            ));
        }
        let fraction = match fraction {
            None => "",
            Some(fraction) if !digits(fraction) => {
                return Err(error("expected digits after the decimal point"));
            }
            Some(fraction) if fraction.len() > USDC_DECIMALS as usize => {
                return Err(error(&format!(
                    "{} fraction digits; USDC has {USDC_DECIMALS}",
                    fraction.len()
                )));
            }
            Some(fraction) => fraction,
        };
        let too_large = || error("number too large");
        let whole: u128 = whole.parse().map_err(|_| too_large())?;
        let padded = format!("{fraction:0<width$}", width = USDC_DECIMALS as usize);
        let fraction: u128 = padded.parse().map_err(|_| too_large())?;
        whole
            .checked_mul(ATOMIC_PER_USDC)
            .and_then(|atomic| atomic.checked_add(fraction))
            .map(UsdcAmount)
            .ok_or_else(too_large)
    }
}

/// The shortest exact decimal: `10`, `2.5`, `0.000001`.
impl fmt::Display for UsdcAmount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let whole = self.0 / ATOMIC_PER_USDC;
        let fraction = self.0 % ATOMIC_PER_USDC;
        if fraction == 0 {
            return write!(f, "{whole}");
        }
        let digits = format!("{fraction:0width$}", width = USDC_DECIMALS as usize);
        write!(f, "{whole}.{}", digits.trim_end_matches('0'))
    }
}

/// A credit balance in USDC with two fraction digits, as `balance_usdc` carries it.
pub fn credits_as_usdc(credits: i64) -> String {
    let sign = if credits < 0 { "-" } else { "" };
    let credits = credits.unsigned_abs();
    let per_usdc = CREDITS_PER_USDC;
    format!("{sign}{}.{:02}", credits / per_usdc, credits % per_usdc)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn atomic(text: &str) -> u128 {
        text.parse::<UsdcAmount>()
            .unwrap_or_else(|e| panic!("{e}"))
            .atomic()
    }

    #[test]
    fn decimal_amounts_scale_by_ten_to_the_sixth_exactly() {
        assert_eq!(atomic("10"), 10_000_000);
        assert_eq!(atomic("0"), 0);
        assert_eq!(atomic("2.5"), 2_500_000);
        assert_eq!(atomic("0.000001"), 1);
        assert_eq!(atomic("1.000001"), 1_000_001);
        assert_eq!(atomic("007.10"), 7_100_000);
        assert_eq!(atomic("123456789.123456"), 123_456_789_123_456);
        // A float would get this wrong: 0.1 + 0.2 style drift must not exist here.
        assert_eq!(atomic("0.3"), 300_000);
    }

    #[test]
    fn malformed_amounts_are_refused_with_a_reason() {
        for (bad, reason) in [
            ("", "decimal number"),
            ("1.2345678", "7 fraction digits"),
            ("-1", "decimal number"),
            ("+1", "decimal number"),
            ("1e6", "decimal number"),
            (" 1", "decimal number"),
            ("1.", "after the decimal point"),
            (".5", "decimal number"),
            ("1.2.3", "after the decimal point"),
            ("1,5", "decimal number"),
            ("١", "decimal number"),
            ("999999999999999999999999999999999999999", "too large"),
        ] {
            let err = bad.parse::<UsdcAmount>().unwrap_err();
            let message = err.to_string();
            assert!(message.contains(reason), "{bad:?}: {message}");
            assert!(message.contains(&format!("{bad:?}")), "{message}");
        }
    }

    #[test]
    fn display_is_the_shortest_exact_decimal() {
        for (text, shown) in [
            ("10", "10"),
            ("10.000000", "10"),
            ("2.50", "2.5"),
            ("0.000001", "0.000001"),
        ] {
            assert_eq!(text.parse::<UsdcAmount>().unwrap().to_string(), shown);
        }
    }

    #[test]
    fn atomic_strings_are_digits_only() {
        assert_eq!(
            UsdcAmount::from_atomic_str("10000000").unwrap(),
            "10".parse().unwrap()
        );
        for bad in ["", "10.0", "1e7", "-1", " 1"] {
            assert!(UsdcAmount::from_atomic_str(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn credits_are_cents() {
        assert_eq!(
            "10".parse::<UsdcAmount>().unwrap().whole_credits(),
            Some(1000)
        );
        assert_eq!(
            "0.01".parse::<UsdcAmount>().unwrap().whole_credits(),
            Some(1)
        );
        assert_eq!("0.015".parse::<UsdcAmount>().unwrap().whole_credits(), None);
        assert_eq!(credits_as_usdc(0), "0.00");
        assert_eq!(credits_as_usdc(5), "0.05");
        assert_eq!(credits_as_usdc(1250), "12.50");
        assert_eq!(credits_as_usdc(-7), "-0.07");
    }
}
