//! `summary.md`: the short Markdown a pull-request comment can carry (headline, one table of
//! comparisons, every version in a fold). Rendered by minijinja from the same context as the
//! page; run text is escaped for Markdown by the `md` filter, since Markdown has no auto-escaping.
use minijinja::Environment;
use minijinja::value::{Serde, Value};

use super::ReportError;
use super::context::ReportContext;
use super::format;

const TEMPLATE: &str = include_str!("templates/summary.md");

pub fn render(context: &ReportContext) -> Result<String, ReportError> {
    let mut env = Environment::new();
    format::register_filters(&mut env);
    env.add_filter("md", |text: String| escape(&text));
    env.add_filter("md_code", |text: String| escape_keeping_code(&text));
    env.add_filter("md_label", |text: String| {
        escape_keeping_code(&format::code(&text))
    });
    env.add_template("summary.md", TEMPLATE)
        .map_err(ReportError::template("summary.md"))?;
    let template = env
        .get_template("summary.md")
        .map_err(ReportError::template("summary.md"))?;
    template
        .render(Value::from(Serde(context)))
        .map_err(ReportError::template("summary.md"))
}

/// Makes run text safe inside a Markdown table cell: no line breaks or pipes that would end the
/// cell, and no raw HTML or emphasis characters that GitHub would interpret.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\n' | '\r' => out.push(' '),
            '|' => out.push_str("\\|"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '\\' | '`' | '*' | '_' | '[' | ']' => {
                out.push('\\');
                out.push(c);
            }
            c => out.push(c),
        }
    }
    out
}

/// As [`escape`], but a sentence's code spans (see [`format::code`]) stay code, with only what
/// would end a table cell changed inside them.
pub fn escape_keeping_code(text: &str) -> String {
    format::code_spans(text)
        .into_iter()
        .map(|(is_code, piece)| {
            if is_code {
                format::code(&piece.replace(['\n', '\r'], " ").replace('|', "\\|"))
            } else {
                escape(piece)
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_what_would_break_a_table_or_inject_html() {
        assert_eq!(escape("a|b\nc"), "a\\|b c");
        assert_eq!(escape("<script>"), "&lt;script&gt;");
        assert_eq!(escape("budget-10"), "budget-10");
        assert_eq!(escape("x_y *z*"), "x\\_y \\*z\\*");
    }

    #[test]
    fn code_spans_stay_code_and_the_rest_is_escaped() {
        assert_eq!(
            escape_keeping_code("answers `a_b|c` to 90% of *rows*"),
            "answers `a_b\\|c` to 90% of \\*rows\\*"
        );
        assert_eq!(escape_keeping_code("a ` lone"), "a \\` lone");
    }
}
