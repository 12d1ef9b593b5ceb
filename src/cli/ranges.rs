//! Value parsers for numeric options: each names its range, so that clap refuses a value
//! outside it (exit 2, with the option, the rule and the value seen) before anything runs. NaN,
//! infinities and values whose `Duration` would overflow never reach the code.

use std::time::Duration;

/// The longest wait any option may ask for: 30 days.
const LONGEST_WAIT_SECS: f64 = 30.0 * 24.0 * 3600.0;

fn number(text: &str) -> Result<f64, String> {
    let value: f64 = text
        .trim()
        .parse()
        .map_err(|_| format!("expected a number, got {text:?}"))?;
    if !value.is_finite() {
        return Err(format!("expected a finite number, got {text}"));
    }
    Ok(value)
}

/// A score from 0 to 1 (`--fail-under`).
pub fn score(text: &str) -> Result<f64, String> {
    let value = number(text)?;
    if !(0.0..=1.0).contains(&value) {
        return Err(format!("must be from 0 to 1, got {text}"));
    }
    Ok(value)
}

/// Credits, 0 or more (`--max-credits`).
pub fn credits(text: &str) -> Result<f64, String> {
    let value = number(text)?;
    if value < 0.0 {
        return Err(format!("must be 0 or more, got {text}"));
    }
    Ok(value)
}

/// A sampling temperature, 0 to 2 (`--temperature`; `inference::wire::TEMPERATURES`).
pub fn temperature(text: &str) -> Result<f64, String> {
    let value = number(text)?;
    let range = crate::inference::wire::TEMPERATURES;
    if !range.contains(&value) {
        return Err(format!(
            "must be from {} to {}, got {text}",
            range.start(),
            range.end()
        ));
    }
    Ok(value)
}

/// A whole number from 1 to `most` (`--max-tokens`, `--concurrency`, `--repeat`, with the bounds
/// the experiment file has for the same settings), checked by clap so that its message names
/// the option and the range.
pub fn one_to(most: u32) -> clap::builder::RangedI64ValueParser<u32> {
    clap::value_parser!(u32).range(1..=i64::from(most))
}

/// A run's seed, 0 to 2^63 - 1 (`run --seed`).
pub fn seed(text: &str) -> Result<u64, String> {
    let max = crate::evolution::wire::MAX_ENGINE_SEED;
    match text.trim().parse::<u64>() {
        Ok(value) if value <= max => Ok(value),
        _ => Err(format!(
            "must be a whole number from 0 to {max}, got {text}"
        )),
    }
}

/// A wait in seconds, above 0 and at most 30 days (`--timeout`, `--poll-interval`).
pub fn seconds(text: &str) -> Result<Duration, String> {
    let value = number(text)?;
    if value <= 0.0 || value > LONGEST_WAIT_SECS {
        return Err(format!(
            "must be above 0 and at most {LONGEST_WAIT_SECS} seconds (30 days), got {text}"
        ));
    }
    Ok(Duration::from_secs_f64(value))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_range_refuses_what_is_outside_it() {
        assert_eq!(score("0.5"), Ok(0.5));
        for bad in ["nan", "NaN", "inf", "-0.1", "1.01", "x", ""] {
            assert!(score(bad).is_err(), "{bad}");
        }
        assert_eq!(credits("0"), Ok(0.0));
        assert!(credits("nan").is_err() && credits("-1").is_err());
        assert_eq!(seconds("0.1"), Ok(Duration::from_millis(100)));
        for bad in ["0", "-1", "1e20", "1e300", "1e18", "inf", "nan"] {
            assert!(seconds(bad).is_err(), "{bad}");
        }
        assert_eq!(seconds("2592000"), Ok(Duration::from_secs(30 * 24 * 3600)));
        assert_eq!(temperature("2"), Ok(2.0));
        assert_eq!(
            temperature("7.5"),
            Err("must be from 0 to 2, got 7.5".into())
        );
        for bad in ["-0.1", "nan", "inf"] {
            assert!(temperature(bad).is_err(), "{bad}");
        }
    }
}
