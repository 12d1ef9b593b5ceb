//! Diagnostics: what is wrong, where, by which rule, with the value seen and a way to fix it.
use std::fmt;
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::rules::Rule;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Error,
    Warning,
}

/// A place in a file, 1-based, with the text of that line for showing it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Location {
    pub file: PathBuf,
    pub line: usize,
    pub column: usize,
    #[serde(skip)]
    pub source_line: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Diagnostic {
    pub severity: Severity,
    /// Stable identifier of the rule, listed in the README.
    pub rule: Rule,
    pub message: String,
    pub location: Option<Location>,
    /// The offending value as written.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seen: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub help: Option<String>,
    /// The variant the problem was found in, when the file has variants and the problem is
    /// specific to one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub variant: Option<String>,
}

impl Diagnostic {
    pub fn error(rule: Rule, message: impl Into<String>) -> Self {
        Self::new(Severity::Error, rule, message)
    }

    pub fn warning(rule: Rule, message: impl Into<String>) -> Self {
        Self::new(Severity::Warning, rule, message)
    }

    fn new(severity: Severity, rule: Rule, message: impl Into<String>) -> Self {
        Self {
            severity,
            rule,
            message: message.into(),
            location: None,
            seen: None,
            help: None,
            variant: None,
        }
    }

    pub fn at(mut self, location: Option<Location>) -> Self {
        self.location = location;
        self
    }

    pub fn seen(mut self, seen: impl fmt::Display) -> Self {
        self.seen = Some(seen.to_string());
        self
    }

    pub fn help(mut self, help: impl Into<String>) -> Self {
        self.help = Some(help.into());
        self
    }

    pub fn help_if(self, help: Option<String>) -> Self {
        match help {
            Some(help) => self.help(help),
            None => self,
        }
    }

    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }

    /// A location at the start of a file (for problems of the file as a whole).
    pub fn in_file(self, file: &Path) -> Self {
        self.at(Some(Location {
            file: file.to_owned(),
            line: 1,
            column: 1,
            source_line: None,
        }))
    }
}

impl Diagnostic {
    /// The first line alone: `file:line:column: error[rule]: message`.
    pub fn headline(&self) -> String {
        let severity = match self.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
        };
        let mut line = String::new();
        if let Some(location) = &self.location {
            line = format!(
                "{}:{}:{}: ",
                location.file.display(),
                location.line,
                location.column
            );
        }
        line.push_str(&format!("{severity}[{}]: {}", self.rule, self.message));
        if let Some(variant) = &self.variant {
            line.push_str(&format!(" (variant \"{variant}\")"));
        }
        line
    }
}

/// Renders like a compiler: `file:line:column: error[rule]: message`, then the line with a caret,
/// the value seen and the help.
impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.headline())?;
        if let Some(Location {
            line,
            column,
            source_line: Some(text),
            ..
        }) = &self.location
        {
            let gutter = line.to_string().len();
            let (text, caret) = excerpt(text, *column);
            write!(
                f,
                "\n{:gutter$} |\n{line} | {text}\n{:gutter$} | {:>caret$}",
                "", "", "^"
            )?;
        }
        if let Some(seen) = &self.seen {
            write!(f, "\n  = seen: {seen}")?;
        }
        if let Some(help) = &self.help {
            write!(f, "\n  = help: {help}")?;
        }
        Ok(())
    }
}

/// Characters of a source line shown around the column; a longer line is cut around it.
const EXCERPT_BEFORE: usize = 60;
const EXCERPT_AFTER: usize = 40;

/// The part of `text` shown under a diagnostic, and the 1-based column of the caret in it: the
/// whole line when it is short, else the characters around `column` (1-based, in characters)
/// with `…` where it was cut. A 100,000-character line is not printed whole.
fn excerpt(text: &str, column: usize) -> (String, usize) {
    let chars: Vec<char> = text.chars().collect();
    if chars.len() <= EXCERPT_BEFORE + EXCERPT_AFTER {
        return (text.to_owned(), column.max(1));
    }
    let at = column.clamp(1, chars.len() + 1) - 1;
    let start = at.saturating_sub(EXCERPT_BEFORE);
    let end = (at + EXCERPT_AFTER).min(chars.len());
    let mut shown = String::new();
    if start > 0 {
        shown.push('…');
    }
    shown.extend(&chars[start..end]);
    if end < chars.len() {
        shown.push('…');
    }
    (shown, at - start + 1 + usize::from(start > 0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_line_is_cut_around_its_column() {
        let short = "budget = 30";
        assert_eq!(excerpt(short, 10), (short.to_owned(), 10));
        let long = format!("{}= 1", "x".repeat(100_000));
        let (shown, caret) = excerpt(&long, 100_001);
        assert_eq!(shown.chars().count(), 1 + EXCERPT_BEFORE + 3);
        assert!(shown.starts_with('…') && shown.ends_with("= 1"), "{shown}");
        assert_eq!(shown.chars().nth(caret - 1), Some('='));
        // A caret past the end of the line stays just after it.
        let (shown, caret) = excerpt(&long, 200_000);
        assert_eq!(caret, shown.chars().count() + 1);
    }

    #[test]
    fn renders_location_caret_seen_and_help() {
        let diagnostic = Diagnostic::error(Rule::BudgetMin, "evolution.budget must be at least 1")
            .at(Some(Location {
                file: "x.toml".into(),
                line: 12,
                column: 10,
                source_line: Some("budget = 0".into()),
            }))
            .seen(0)
            .help("25 to 50 is recommended");
        assert_eq!(
            diagnostic.to_string(),
            "x.toml:12:10: error[budget-min]: evolution.budget must be at least 1\n   |\n12 | budget = 0\n   |          ^\n  = seen: 0\n  = help: 25 to 50 is recommended"
        );
    }
}
