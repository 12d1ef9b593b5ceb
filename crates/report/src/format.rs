//! How numbers look in every output (HTML, Markdown, terminal): the same digits everywhere, and
//! a dash for a value that does not exist. Also the template filters that apply it, and the one
//! way a sentence quotes a run's text verbatim (a label, an answer): as a Markdown code span,
//! which the terminal shows as it is and the page and `summary.md` render as code.
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

/// `text` as a Markdown code span: in backticks, more of them than any run of backticks in it,
/// with a space inside each end when it starts or ends with one (CommonMark's rule).
pub fn code(text: &str) -> String {
    let longest = text.split(|c| c != '`').map(str::len).max().unwrap_or(0);
    let fence = "`".repeat(longest + 1);
    if text.starts_with('`') || text.ends_with('`') {
        format!("{fence} {text} {fence}")
    } else {
        format!("{fence}{text}{fence}")
    }
}

/// A text as plain pieces and code spans (`true`), read by CommonMark's rule: a run of n
/// backticks opens a span that the next run of exactly n closes; a run never closed is text.
pub fn code_spans(text: &str) -> Vec<(bool, &str)> {
    let bytes = text.as_bytes();
    let run_end = |mut i: usize| {
        while i < bytes.len() && bytes[i] == b'`' {
            i += 1;
        }
        i
    };
    let mut pieces = Vec::new();
    let mut plain = 0;
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'`' {
            i += 1;
            continue;
        }
        let open = i;
        i = run_end(i);
        let width = i - open;
        let mut j = i;
        let mut close = None;
        while j < bytes.len() {
            if bytes[j] == b'`' {
                let end = run_end(j);
                if end - j == width {
                    close = Some((j, end));
                    break;
                }
                j = end;
            } else {
                j += 1;
            }
        }
        if let Some((start, end)) = close {
            if open > plain {
                pieces.push((false, &text[plain..open]));
            }
            let inner = &text[i..start];
            let inner = match inner.strip_prefix(' ').and_then(|t| t.strip_suffix(' ')) {
                Some(stripped) if !inner.trim().is_empty() => stripped,
                _ => inner,
            };
            pieces.push((true, inner));
            plain = end;
            i = end;
        }
    }
    if plain < text.len() {
        pieces.push((false, &text[plain..]));
    }
    pieces
}

/// Text as HTML, the way the templates escape it (minijinja's own escaper).
fn escape_html(text: &str) -> String {
    minijinja::HtmlEscape(text).to_string()
}

/// A sentence for the page: escaped, its code spans in `<code>`.
pub fn html_with_code(text: &str) -> String {
    code_spans(text)
        .into_iter()
        .map(|(is_code, piece)| {
            if is_code {
                format!("<code>{}</code>", escape_html(piece))
            } else {
                escape_html(piece)
            }
        })
        .collect()
}

/// Registers `code` on an HTML environment: a sentence escaped, with its code spans as code.
pub fn register_html_filters(env: &mut Environment<'_>) {
    env.add_filter("code", |text: String| {
        Value::from_safe_string(html_with_code(&text))
    });
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

    #[test]
    fn code_spans_quote_any_text_and_read_back() {
        assert_eq!(code("neutral"), "`neutral`");
        assert_eq!(code("a`b"), "``a`b``");
        assert_eq!(code("`x"), "`` `x ``");
        for text in ["neutral", "a`b", "`x", "x``", "<b>&"] {
            let sentence = format!("always {} here", code(text));
            assert_eq!(
                code_spans(&sentence),
                [(false, "always "), (true, text), (false, " here")],
                "{sentence}"
            );
        }
        assert_eq!(code_spans("a ` lone"), [(false, "a ` lone")]);
        assert_eq!(
            html_with_code("always `<b>` & \"x\""),
            "always <code>&lt;b&gt;</code> &amp; &quot;x&quot;"
        );
    }
}
