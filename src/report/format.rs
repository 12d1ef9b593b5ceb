//! How numbers look in every output (HTML, Markdown, terminal): the same digits everywhere, and
//! a dash for a value that does not exist. Also the template filters that apply it.
use minijinja::{Environment, Value};

/// A number with `digits` decimals, or "–" when there is none.
pub fn number(value: Option<f64>, digits: usize) -> String {
    match value {
        Some(v) if v.is_finite() => format!("{v:.digits$}"),
        _ => "–".to_owned(),
    }
}

/// A difference, always with its sign.
pub fn signed(value: Option<f64>) -> String {
    match value {
        Some(v) if v.is_finite() => format!("{v:+.3}"),
        _ => "–".to_owned(),
    }
}

/// A p-value: three decimals, or "< 0.001".
pub fn p_value(value: Option<f64>) -> String {
    match value {
        Some(p) if p < 0.001 => "< 0.001".to_owned(),
        other => number(other, 3),
    }
}

/// A p-value in a sentence: "p = 0.016" or "p < 0.001".
pub fn p_phrase(value: Option<f64>) -> String {
    match value {
        Some(p) if p < 0.001 => "p < 0.001".to_owned(),
        other => format!("p = {}", number(other, 3)),
    }
}

fn as_f64(value: &Value) -> Option<f64> {
    if value.is_none() || value.is_undefined() {
        return None;
    }
    f64::try_from(value.clone()).ok()
}

/// Registers `num(digits=3)`, `signed`, `p` and `p_phrase` on a template environment.
pub fn register_filters(env: &mut Environment<'_>) {
    env.add_filter("num", |value: Value, digits: Option<usize>| {
        number(as_f64(&value), digits.unwrap_or(3))
    });
    env.add_filter("signed", |value: Value| signed(as_f64(&value)));
    env.add_filter("p", |value: Value| p_value(as_f64(&value)));
    env.add_filter("p_phrase", |value: Value| p_phrase(as_f64(&value)));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_have_fixed_digits_and_a_dash_for_nothing() {
        assert_eq!(number(Some(0.5), 3), "0.500");
        assert_eq!(number(None, 3), "–");
        assert_eq!(number(Some(f64::NAN), 2), "–");
        assert_eq!(signed(Some(0.25)), "+0.250");
        assert_eq!(signed(Some(-0.1)), "-0.100");
        assert_eq!(p_value(Some(0.0004)), "< 0.001");
        assert_eq!(p_value(Some(0.0703)), "0.070");
        assert_eq!(p_phrase(Some(0.0004)), "p < 0.001");
        assert_eq!(p_phrase(Some(0.0156)), "p = 0.016");
    }
}
