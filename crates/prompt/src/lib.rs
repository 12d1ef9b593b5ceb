//! Prompt templates: `{variable}` placeholders filled from a dataset row.
//!
//! `{{` and `}}` stand for literal braces, as in Python's `str.format`, which is what the
//! prompt-evolution service and most prompt tooling expect. This module parses, lists and renders
//! templates; it knows nothing about datasets or experiment files. [`chat`] holds prompts of several
//! parts (a system message, few-shot turns, the user template) and the one text that carries them.
use std::collections::BTreeSet;

use thiserror::Error;

pub mod chat;

pub use chat::{ChatPrompt, ChatTemplate, Message, PartName, PartsError, Place, Role, Turn};

/// A prompt read from a file, named as the user gave it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PromptFile {
    /// The path as given on the command line: how tables and replay rows name the prompt.
    pub file: String,
    pub text: String,
}

impl PromptFile {
    pub fn read(path: &std::path::Path) -> std::io::Result<Self> {
        Ok(PromptFile {
            file: path.display().to_string(),
            text: gepa_lab_input::read_text(path, gepa_lab_input::TEXT_LIMIT)?,
        })
    }
}

/// A template that parsed: literal text and placeholders, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    parts: Vec<Part>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Literal(String),
    Variable(String),
}

/// Why a template did not parse. Offsets are 0-based character positions in the template text;
/// `line` and `column` are 1-based, for people.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum TemplateError {
    #[error(
        "unclosed `{{` at line {line}, column {column}: a placeholder must end with `}}` (write `{{{{` for a literal brace)"
    )]
    Unclosed {
        offset: usize,
        line: usize,
        column: usize,
    },
    #[error("single `}}` at line {line}, column {column}: write `}}}}` for a literal brace")]
    StrayClose {
        offset: usize,
        line: usize,
        column: usize,
    },
    #[error(
        "empty placeholder `{{}}` at line {line}, column {column}: name a column inside the braces"
    )]
    EmptyName {
        offset: usize,
        line: usize,
        column: usize,
    },
}

impl TemplateError {
    /// 1-based line and column of the problem within the template text.
    pub fn position(&self) -> (usize, usize) {
        match *self {
            Self::Unclosed { line, column, .. }
            | Self::StrayClose { line, column, .. }
            | Self::EmptyName { line, column, .. } => (line, column),
        }
    }

    /// The same error in a text where the template starts after `lines` lines and `chars`
    /// characters (a part of a prompt of several parts).
    pub fn shifted(mut self, lines: usize, chars: usize) -> Self {
        match &mut self {
            Self::Unclosed { offset, line, .. }
            | Self::StrayClose { offset, line, .. }
            | Self::EmptyName { offset, line, .. } => {
                *offset += chars;
                *line += lines;
            }
        }
        self
    }
}

/// A placeholder that a row could not fill.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("the row has no value for placeholder `{{{name}}}`")]
pub struct MissingVariable {
    pub name: String,
}

impl Template {
    pub fn parse(text: &str) -> Result<Self, TemplateError> {
        let mut parts = Vec::new();
        let mut literal = String::new();
        let mut chars = text.char_indices().enumerate().peekable();
        let position = |offset: usize| {
            let before = &text[..offset];
            let line = before.matches('\n').count() + 1;
            let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
            (line, column)
        };
        while let Some((index, (byte, c))) = chars.next() {
            match c {
                '{' if chars.peek().is_some_and(|&(_, (_, next))| next == '{') => {
                    chars.next();
                    literal.push('{');
                }
                '}' if chars.peek().is_some_and(|&(_, (_, next))| next == '}') => {
                    chars.next();
                    literal.push('}');
                }
                '}' => {
                    let (line, column) = position(byte);
                    return Err(TemplateError::StrayClose {
                        offset: index,
                        line,
                        column,
                    });
                }
                '{' => {
                    let mut name = String::new();
                    let mut closed = false;
                    for (_, (_, inner)) in chars.by_ref() {
                        match inner {
                            '}' => {
                                closed = true;
                                break;
                            }
                            // A `{` inside a placeholder means the first one was never closed.
                            '{' => break,
                            _ => name.push(inner),
                        }
                    }
                    let (line, column) = position(byte);
                    if !closed {
                        return Err(TemplateError::Unclosed {
                            offset: index,
                            line,
                            column,
                        });
                    }
                    let name = name.trim();
                    if name.is_empty() {
                        return Err(TemplateError::EmptyName {
                            offset: index,
                            line,
                            column,
                        });
                    }
                    if !literal.is_empty() {
                        parts.push(Part::Literal(std::mem::take(&mut literal)));
                    }
                    parts.push(Part::Variable(name.to_owned()));
                }
                _ => literal.push(c),
            }
        }
        if !literal.is_empty() {
            parts.push(Part::Literal(literal));
        }
        Ok(Self { parts })
    }

    /// Placeholder names in order of first appearance, each once.
    pub fn variables(&self) -> Vec<&str> {
        let mut seen = BTreeSet::new();
        self.parts
            .iter()
            .filter_map(|part| match part {
                Part::Variable(name) if seen.insert(name.as_str()) => Some(name.as_str()),
                _ => None,
            })
            .collect()
    }

    /// Fills every placeholder with `lookup(name)`.
    pub fn render<'a>(
        &self,
        lookup: impl Fn(&str) -> Option<&'a str>,
    ) -> Result<String, MissingVariable> {
        let mut out = String::new();
        for part in &self.parts {
            match part {
                Part::Literal(text) => out.push_str(text),
                Part::Variable(name) => {
                    let value =
                        lookup(name).ok_or_else(|| MissingVariable { name: name.clone() })?;
                    out.push_str(value);
                }
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn render(template: &str, pairs: &[(&str, &str)]) -> Result<String, MissingVariable> {
        Template::parse(template)
            .expect("template parses")
            .render(|name| {
                pairs
                    .iter()
                    .find(|(key, _)| *key == name)
                    .map(|(_, value)| *value)
            })
    }

    #[test]
    fn lists_variables_once_in_order() {
        let template = Template::parse("{b} and {a}, then {b} again").unwrap();
        assert_eq!(template.variables(), vec!["b", "a"]);
    }

    #[test]
    fn renders_and_keeps_escaped_braces_literal() {
        let out = render(
            "Return {{\"label\": ...}} for {review}.",
            &[("review", "Great!")],
        );
        assert_eq!(out.unwrap(), "Return {\"label\": ...} for Great!.");
    }

    #[test]
    fn trims_spaces_inside_placeholders() {
        let template = Template::parse("{ review }").unwrap();
        assert_eq!(template.variables(), vec!["review"]);
    }

    #[test]
    fn missing_value_names_the_placeholder() {
        let err = render("Hi {name}", &[]).unwrap_err();
        assert_eq!(err.name, "name");
        assert_eq!(
            err.to_string(),
            "the row has no value for placeholder `{name}`"
        );
    }

    #[test]
    fn unclosed_brace_reports_line_and_column() {
        let err = Template::parse("first line\nsecond {review line").unwrap_err();
        assert_eq!(err.position(), (2, 8));
        assert!(matches!(err, TemplateError::Unclosed { offset: 18, .. }));
    }

    #[test]
    fn nested_open_brace_is_unclosed() {
        let err = Template::parse("{a {b}").unwrap_err();
        assert!(
            matches!(err, TemplateError::Unclosed { offset: 0, .. }),
            "{err:?}"
        );
    }

    #[test]
    fn stray_close_and_empty_name_are_errors() {
        assert!(matches!(
            Template::parse("a } b").unwrap_err(),
            TemplateError::StrayClose {
                line: 1,
                column: 3,
                ..
            }
        ));
        assert!(matches!(
            Template::parse("x {  } y").unwrap_err(),
            TemplateError::EmptyName {
                line: 1,
                column: 3,
                ..
            }
        ));
    }

    #[test]
    fn columns_count_characters_not_bytes() {
        let err = Template::parse("héllo {").unwrap_err();
        assert_eq!(err.position(), (1, 7));
    }
}
