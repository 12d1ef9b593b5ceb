//! Scorers: turn a model's answer and the expected output into a score in [0, 1] and a short
//! feedback text that GEPA's reflection step can read.
//!
//! A scorer is named in the experiment file by a spec string (`exact_match`, `regex:^yes$`, …);
//! [`ScorerSpec`] parses and checks it, [`Scorer`] is the ready-to-run form. The `judge` scorer
//! needs an inference model, so it is run by the caller that owns one; this module only knows it
//! by name.
pub mod command;
pub mod judge;

use std::path::{Path, PathBuf};
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// A scorer as written in an experiment file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ScorerSpec {
    /// The trimmed answer equals the trimmed expected output, case-sensitive.
    ExactMatch,
    /// As `exact_match`, ignoring case.
    ExactMatchCi,
    /// The expected output appears in the answer, ignoring case.
    Contains,
    /// The answer matches a regular expression (the expected output is not used).
    Regex { pattern: String },
    /// The first number in the answer is within `tolerance` of the expected number.
    Numeric { tolerance: f64 },
    /// The answer parses as JSON and conforms to the schema file.
    JsonSchema { schema: PathBuf },
    /// The answer and the expected output parse as JSON objects; the score is the share of the
    /// expected keys whose values are equal.
    JsonMatch,
    /// Token-overlap F1 between answer and expected output (SQuAD normalisation).
    F1,
    /// An inference model grades the answer against the expected output with a rubric.
    Judge,
    /// The user's program scores each answer (see [`command`]); it runs in `dir`, the
    /// experiment file's folder (the current folder for `compare`).
    Command { command: String, dir: PathBuf },
}

/// A model that gives one answer to at least this percentage of its answered rows (rounded
/// down) answers (almost) always the same, whatever the input: the report cautions beside such
/// a version, and `init`'s model probe passes over such a model when another reads its input.
pub const ONE_ANSWER_PERCENT: usize = 90;

/// Whether `top` answers of `answered` rows make the answers one answer (see
/// [`ONE_ANSWER_PERCENT`]).
pub fn answers_one_way(top: usize, answered: usize) -> bool {
    answered > 0 && top * 100 / answered >= ONE_ANSWER_PERCENT
}

/// The names a spec may start with, for suggestions.
pub const SCORER_NAMES: [&str; 10] = [
    "exact_match",
    "exact_match_ci",
    "contains",
    "regex:<pattern>",
    "numeric[:tolerance]",
    "json_schema:<file>",
    "json_match",
    "f1",
    "judge",
    "command:<program>",
];

const DEFAULT_NUMERIC_TOLERANCE: f64 = 1e-6;

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ScorerSpecError {
    #[error("unknown scorer; known scorers: {}", SCORER_NAMES.join(", "))]
    Unknown,
    #[error("invalid regular expression: {0}")]
    Regex(String),
    #[error("numeric tolerance must be a non-negative number, as in `numeric:0.01`")]
    Tolerance,
    #[error("json_schema needs a schema file, as in `json_schema:schemas/answer.json`")]
    SchemaPathMissing,
    #[error("command needs a program, as in `command:python3 score.py`")]
    CommandMissing,
}

impl FromStr for ScorerSpec {
    type Err = ScorerSpecError;

    fn from_str(spec: &str) -> Result<Self, Self::Err> {
        let (name, argument) = match spec.split_once(':') {
            Some((name, argument)) => (name.trim(), Some(argument)),
            None => (spec.trim(), None),
        };
        Ok(match (name, argument) {
            ("exact_match", None) => Self::ExactMatch,
            ("exact_match_ci", None) => Self::ExactMatchCi,
            ("contains", None) => Self::Contains,
            ("json_match", None) => Self::JsonMatch,
            ("f1", None) => Self::F1,
            ("judge", None) => Self::Judge,
            ("regex", Some(pattern)) => {
                regex::Regex::new(pattern)
                    .map_err(|err| ScorerSpecError::Regex(err.to_string()))?;
                Self::Regex {
                    pattern: pattern.to_owned(),
                }
            }
            ("numeric", None) => Self::Numeric {
                tolerance: DEFAULT_NUMERIC_TOLERANCE,
            },
            ("numeric", Some(tolerance)) => match tolerance.trim().parse::<f64>() {
                Ok(tolerance) if tolerance.is_finite() && tolerance >= 0.0 => {
                    Self::Numeric { tolerance }
                }
                _ => return Err(ScorerSpecError::Tolerance),
            },
            ("json_schema", Some(path)) if !path.trim().is_empty() => Self::JsonSchema {
                schema: PathBuf::from(path.trim()),
            },
            ("json_schema", _) => return Err(ScorerSpecError::SchemaPathMissing),
            ("command", Some(command)) if !command.trim().is_empty() => Self::Command {
                command: command.trim().to_owned(),
                dir: PathBuf::from("."),
            },
            ("command", _) => return Err(ScorerSpecError::CommandMissing),
            _ => return Err(ScorerSpecError::Unknown),
        })
    }
}

/// The spec as it is written, so that it parses back to itself.
impl std::fmt::Display for ScorerSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::ExactMatch => f.write_str("exact_match"),
            Self::ExactMatchCi => f.write_str("exact_match_ci"),
            Self::Contains => f.write_str("contains"),
            Self::Regex { pattern } => write!(f, "regex:{pattern}"),
            Self::Numeric { tolerance } => write!(f, "numeric:{tolerance}"),
            Self::JsonSchema { schema } => write!(f, "json_schema:{}", schema.display()),
            Self::JsonMatch => f.write_str("json_match"),
            Self::F1 => f.write_str("f1"),
            Self::Judge => f.write_str("judge"),
            Self::Command { command, .. } => write!(f, "command:{command}"),
        }
    }
}

/// A score in [0, 1] with feedback for the reflection step.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Score {
    pub value: f64,
    pub feedback: String,
}

impl Score {
    fn binary(correct: bool, feedback: impl Into<String>) -> Self {
        Self {
            value: if correct { 1.0 } else { 0.0 },
            feedback: feedback.into(),
        }
    }
}

#[derive(Debug, Error)]
pub enum ScorerError {
    #[error("{}: cannot read the JSON schema: {error}", path.display())]
    SchemaRead {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("{}: not a valid JSON schema: {message}", path.display())]
    SchemaInvalid { path: PathBuf, message: String },
    #[error("the judge scorer runs through an inference model; score it with the judge, not here")]
    NeedsJudge,
    #[error("scorer command `{command}`: {message}")]
    Command { command: String, message: String },
}

/// A scorer ready to run: regular expressions compiled, schemas loaded.
#[derive(Debug)]
pub enum Scorer {
    ExactMatch,
    ExactMatchCi,
    Contains,
    Regex(regex::Regex),
    Numeric { tolerance: f64 },
    JsonSchema(Box<jsonschema::Validator>),
    JsonMatch,
    F1,
    Command(command::CommandScorer),
}

impl Scorer {
    /// Builds the scorer; `base` is the folder relative paths in the spec resolve against.
    pub fn new(spec: &ScorerSpec, base: &Path) -> Result<Self, ScorerError> {
        Ok(match spec {
            ScorerSpec::ExactMatch => Self::ExactMatch,
            ScorerSpec::ExactMatchCi => Self::ExactMatchCi,
            ScorerSpec::Contains => Self::Contains,
            ScorerSpec::Regex { pattern } => Self::Regex(
                // Checked when the spec was parsed.
                regex::Regex::new(pattern).map_err(|err| ScorerError::SchemaInvalid {
                    path: PathBuf::from(pattern),
                    message: err.to_string(),
                })?,
            ),
            ScorerSpec::Numeric { tolerance } => Self::Numeric {
                tolerance: *tolerance,
            },
            ScorerSpec::JsonSchema { schema } => {
                Self::JsonSchema(Box::new(load_schema(&base.join(schema))?))
            }
            ScorerSpec::JsonMatch => Self::JsonMatch,
            ScorerSpec::F1 => Self::F1,
            ScorerSpec::Judge => return Err(ScorerError::NeedsJudge),
            ScorerSpec::Command { command, dir } => {
                let dir = base.join(dir);
                command::find_program(command, &dir).map_err(|message| ScorerError::Command {
                    command: command.clone(),
                    message,
                })?;
                Self::Command(command::CommandScorer::new(command, &dir))
            }
        })
    }

    /// Scores one answer of data row `row` (1-based, when there is one). Only a user's command
    /// can fail; its failure is an error for that answer, never a score.
    pub fn score(
        &self,
        row: Option<usize>,
        output: &str,
        expected: &str,
    ) -> Result<Score, ScorerError> {
        if let Self::Command(command) = self {
            return command.score(row, output, expected);
        }
        let output = output.trim();
        let expected = expected.trim();
        Ok(match self {
            Self::ExactMatch => exact(output == expected, output, expected),
            Self::ExactMatchCi => exact(
                output.to_lowercase() == expected.to_lowercase(),
                output,
                expected,
            ),
            Self::Contains => {
                let found = output.to_lowercase().contains(&expected.to_lowercase());
                Score::binary(
                    found,
                    if found {
                        format!("correct: the answer contains {expected:?}")
                    } else {
                        format!(
                            "wrong: expected the answer to contain {expected:?}; the answer was {output:?}"
                        )
                    },
                )
            }
            Self::Regex(pattern) => {
                let found = pattern.is_match(output);
                Score::binary(
                    found,
                    if found {
                        format!("correct: the answer matches /{pattern}/")
                    } else {
                        format!("wrong: the answer {output:?} does not match /{pattern}/")
                    },
                )
            }
            Self::Numeric { tolerance } => numeric(output, expected, *tolerance),
            Self::JsonSchema(validator) => json_schema(validator, output),
            Self::JsonMatch => json_match(output, expected),
            Self::F1 => f1(output, expected),
            Self::Command(_) => unreachable!("scored above"),
        })
    }
}

/// Loads and compiles a JSON schema file; also used by validation to check the file early.
pub fn load_schema(path: &Path) -> Result<jsonschema::Validator, ScorerError> {
    let text = gepa_lab_input::read_text(path, gepa_lab_input::TEXT_LIMIT).map_err(|source| {
        ScorerError::SchemaRead {
            path: path.to_owned(),
            error: source,
        }
    })?;
    let schema: serde_json::Value =
        serde_json::from_str(&text).map_err(|err| ScorerError::SchemaInvalid {
            path: path.to_owned(),
            message: err.to_string(),
        })?;
    jsonschema::validator_for(&schema).map_err(|err| ScorerError::SchemaInvalid {
        path: path.to_owned(),
        message: err.to_string(),
    })
}

fn exact(correct: bool, output: &str, expected: &str) -> Score {
    Score::binary(
        correct,
        if correct {
            "correct".to_owned()
        } else {
            format!("wrong: expected {expected:?}, the answer was {output:?}")
        },
    )
}

fn first_number(text: &str) -> Option<f64> {
    static NUMBER: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
        regex::Regex::new(r"[-+]?(?:\d[\d,]*)?\.?\d+(?:[eE][-+]?\d+)?")
            .expect("the pattern is valid")
    });
    NUMBER
        .find(text)
        .and_then(|found| found.as_str().replace(',', "").parse().ok())
}

fn numeric(output: &str, expected: &str, tolerance: f64) -> Score {
    let Some(want) = first_number(expected) else {
        return Score::binary(
            false,
            format!("the expected output {expected:?} holds no number"),
        );
    };
    match first_number(output) {
        None => Score::binary(
            false,
            format!("wrong: expected the number {want}; the answer {output:?} holds no number"),
        ),
        Some(got) if (got - want).abs() <= tolerance => {
            Score::binary(true, format!("correct: {got}"))
        }
        Some(got) => Score::binary(
            false,
            format!("wrong: expected {want} (±{tolerance}), the answer gave {got}"),
        ),
    }
}

fn json_schema(validator: &jsonschema::Validator, output: &str) -> Score {
    let value: serde_json::Value =
        match serde_json::from_str(gepa_lab_inference::strip_fence(output)) {
            Ok(value) => value,
            Err(err) => {
                return Score::binary(false, format!("wrong: the answer is not JSON ({err})"));
            }
        };
    let problems: Vec<String> = validator
        .iter_errors(&value)
        .take(5)
        .map(|err| format!("at {:?}: {err}", err.instance_path().to_string()))
        .collect();
    if problems.is_empty() {
        Score::binary(true, "correct: the answer conforms to the schema")
    } else {
        Score::binary(
            false,
            format!(
                "wrong: the answer breaks the schema: {}",
                problems.join("; ")
            ),
        )
    }
}

fn json_match(output: &str, expected: &str) -> Score {
    let Ok(serde_json::Value::Object(want)) = serde_json::from_str(expected) else {
        return Score::binary(
            false,
            format!("the expected output is not a JSON object: {expected:?}"),
        );
    };
    let got =
        match serde_json::from_str::<serde_json::Value>(gepa_lab_inference::strip_fence(output)) {
            Ok(serde_json::Value::Object(got)) => got,
            Ok(_) => return Score::binary(false, "wrong: the answer is JSON but not an object"),
            Err(err) => {
                return Score::binary(false, format!("wrong: the answer is not JSON ({err})"));
            }
        };
    if want.is_empty() {
        return Score::binary(got.is_empty(), "the expected object is empty");
    }
    let mut total = 0.0;
    let mut wrong = Vec::new();
    for (key, value) in &want {
        let (credit, problem) = field_match(value, got.get(key));
        total += credit;
        if let Some(problem) = problem {
            wrong.push(format!("{key}: {problem}"));
        }
    }
    let value = total / want.len() as f64;
    let feedback = if wrong.is_empty() {
        "correct: every field matches".to_owned()
    } else {
        format!(
            "{} of {} fields wrong: {}",
            wrong.len(),
            want.len(),
            wrong.join("; ")
        )
    };
    Score { value, feedback }
}

/// The credit of one field of `json_match`, in [0, 1], and what is wrong with it. A scalar is
/// right or wrong. A list gets partial credit, the F1 of its elements (each matched once;
/// strings trimmed and compared ignoring case), so a model that finds some of the names scores
/// above one that finds none and the engine has a gradient; a string where a list is expected
/// is read as the list of its comma-separated parts, at half the credit, and said to be the
/// wrong shape.
fn field_match(want: &serde_json::Value, got: Option<&serde_json::Value>) -> (f64, Option<String>) {
    use serde_json::Value;
    let serde_json::Value::Array(want_items) = want else {
        return match got {
            Some(seen) if seen == want => (1.0, None),
            Some(seen) => (0.0, Some(format!("expected {want}, got {seen}"))),
            None => (0.0, Some(format!("missing (expected {want})"))),
        };
    };
    let (got_items, shape_factor, shape_note) = match got {
        Some(Value::Array(items)) => (items.clone(), 1.0, ""),
        Some(Value::String(text)) => (
            text.split([',', ';'])
                .map(str::trim)
                .filter(|part| !part.is_empty())
                .map(|part| Value::String(part.to_owned()))
                .collect(),
            0.5,
            " (the answer is a string; a list was expected)",
        ),
        Some(Value::Null) | None => (Vec::new(), 0.5, " (a list was expected, [] when empty)"),
        Some(other) => {
            return (0.0, Some(format!("expected the list {want}, got {other}")));
        }
    };
    if want_items.is_empty() && got_items.is_empty() {
        return if shape_factor < 1.0 {
            (
                shape_factor,
                Some(format!("expected [], got {}{shape_note}", shown(got))),
            )
        } else {
            (1.0, None)
        };
    }
    let key = |value: &Value| match value {
        Value::String(text) => text.trim().to_lowercase(),
        other => other.to_string(),
    };
    let mut unmatched: Vec<String> = want_items.iter().map(key).collect();
    let mut extra = Vec::new();
    for item in &got_items {
        match unmatched.iter().position(|w| *w == key(item)) {
            Some(at) => {
                unmatched.swap_remove(at);
            }
            None => extra.push(item.to_string()),
        }
    }
    let common = got_items.len() - extra.len();
    let f1 = if common == 0 {
        0.0
    } else {
        let precision = common as f64 / got_items.len() as f64;
        let recall = common as f64 / want_items.len() as f64;
        2.0 * precision * recall / (precision + recall)
    };
    let credit = f1 * shape_factor;
    if credit >= 1.0 {
        return (1.0, None);
    }
    let missing: Vec<String> = want_items
        .iter()
        .filter(|item| unmatched.contains(&key(item)))
        .map(Value::to_string)
        .collect();
    let mut problem = format!("expected {want}, got {}{shape_note}", shown(got));
    if !missing.is_empty() {
        problem.push_str(&format!("; missing {}", missing.join(", ")));
    }
    if !extra.is_empty() {
        problem.push_str(&format!("; not expected {}", extra.join(", ")));
    }
    (credit, Some(problem))
}

/// A field's value as feedback shows it.
fn shown(value: Option<&serde_json::Value>) -> String {
    value.map_or_else(|| "nothing".to_owned(), serde_json::Value::to_string)
}

/// Lower case, no punctuation, no articles, split on white space (the SQuAD evaluation's rules).
fn tokens(text: &str) -> Vec<String> {
    text.to_lowercase()
        .chars()
        .map(|c| {
            if c.is_alphanumeric() || c.is_whitespace() {
                c
            } else {
                ' '
            }
        })
        .collect::<String>()
        .split_whitespace()
        .filter(|word| !matches!(*word, "a" | "an" | "the"))
        .map(str::to_owned)
        .collect()
}

fn f1(output: &str, expected: &str) -> Score {
    let got = tokens(output);
    let want = tokens(expected);
    if got.is_empty() || want.is_empty() {
        let same = got.is_empty() && want.is_empty();
        return Score::binary(
            same,
            if same {
                "correct"
            } else {
                "wrong: one side has no words"
            },
        );
    }
    let mut unmatched = want.clone();
    let mut common = 0usize;
    for token in &got {
        if let Some(at) = unmatched.iter().position(|w| w == token) {
            unmatched.swap_remove(at);
            common += 1;
        }
    }
    if common == 0 {
        return Score::binary(
            false,
            format!("wrong: no words in common with {expected:?}"),
        );
    }
    let precision = common as f64 / got.len() as f64;
    let recall = common as f64 / want.len() as f64;
    let value = 2.0 * precision * recall / (precision + recall);
    Score {
        value,
        feedback: format!(
            "F1 {value:.2} (precision {precision:.2}, recall {recall:.2}); missing words: {}",
            if unmatched.is_empty() {
                "none".to_owned()
            } else {
                unmatched.join(" ")
            }
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_print_as_they_are_written() {
        for written in [
            "exact_match",
            "exact_match_ci",
            "contains",
            "regex:^(yes|no)$",
            "numeric:0.5",
            "json_schema:schemas/a.json",
            "json_match",
            "f1",
            "judge",
        ] {
            let spec: ScorerSpec = written.parse().unwrap();
            assert_eq!(spec.to_string(), written);
            assert_eq!(spec.to_string().parse::<ScorerSpec>().unwrap(), spec);
        }
    }

    fn score(spec: &str, output: &str, expected: &str) -> Score {
        let spec: ScorerSpec = spec.parse().expect("spec parses");
        Scorer::new(&spec, Path::new("."))
            .expect("scorer builds")
            .score(None, output, expected)
            .unwrap()
    }

    #[test]
    fn parses_every_documented_spec() {
        assert_eq!("exact_match".parse(), Ok(ScorerSpec::ExactMatch));
        assert_eq!(
            "numeric:0.5".parse(),
            Ok(ScorerSpec::Numeric { tolerance: 0.5 })
        );
        assert_eq!(
            "regex:^(yes|no)$".parse(),
            Ok(ScorerSpec::Regex {
                pattern: "^(yes|no)$".into()
            })
        );
        assert_eq!(
            "json_schema:a/b.json".parse(),
            Ok(ScorerSpec::JsonSchema {
                schema: "a/b.json".into()
            })
        );
        assert_eq!("exact".parse::<ScorerSpec>(), Err(ScorerSpecError::Unknown));
        assert!(matches!(
            "regex:(".parse::<ScorerSpec>(),
            Err(ScorerSpecError::Regex(_))
        ));
        assert_eq!(
            "numeric:-1".parse::<ScorerSpec>(),
            Err(ScorerSpecError::Tolerance)
        );
        assert_eq!(
            "json_schema".parse::<ScorerSpec>(),
            Err(ScorerSpecError::SchemaPathMissing)
        );
    }

    #[test]
    fn exact_matches_trim_and_respect_case() {
        assert_eq!(score("exact_match", " positive\n", "positive").value, 1.0);
        let wrong = score("exact_match", "Positive", "positive");
        assert_eq!(wrong.value, 0.0);
        assert_eq!(
            wrong.feedback,
            "wrong: expected \"positive\", the answer was \"Positive\""
        );
        assert_eq!(score("exact_match_ci", "Positive", "positive").value, 1.0);
    }

    #[test]
    fn contains_and_regex() {
        assert_eq!(
            score("contains", "The answer is Billing.", "billing").value,
            1.0
        );
        assert_eq!(score("contains", "technical", "billing").value, 0.0);
        assert_eq!(
            score("regex:^(positive|negative)$", "negative", "").value,
            1.0
        );
        assert_eq!(
            score("regex:^(positive|negative)$", "neutral", "").value,
            0.0
        );
    }

    #[test]
    fn numeric_reads_the_first_number() {
        assert_eq!(score("numeric", "The total is 1,250.", "1250").value, 1.0);
        assert_eq!(score("numeric:0.1", "about 3.14", "3.2").value, 1.0);
        assert_eq!(score("numeric", "3.14", "3.2").value, 0.0);
        assert_eq!(score("numeric", "none", "3").value, 0.0);
    }

    #[test]
    fn json_match_gives_list_fields_the_f1_of_their_elements() {
        let expected = r#"{"persons":["Ana Lima","Bo"],"places":[]}"#;
        // (answer, score, what the feedback says)
        let cases = [
            // Order, case and spaces aside: exact.
            (
                r#"{"persons":["bo","ana lima "],"places":[]}"#,
                1.0,
                "correct",
            ),
            // One of two names and one made up: F1 1/2 on persons, places right.
            (
                r#"{"persons":["Ana Lima","Cy"],"places":[]}"#,
                0.75,
                "missing \"Bo\"",
            ),
            (
                r#"{"persons":["Ana Lima","Cy"],"places":[]}"#,
                0.75,
                "not expected \"Cy\"",
            ),
            // The right names as a string: the wrong shape, half the credit, and said so.
            (
                r#"{"persons":"Ana Lima, Bo","places":[]}"#,
                0.75,
                "a list was expected",
            ),
            // null for an empty list: half; a number for a list: nothing.
            (
                r#"{"persons":["Ana Lima","Bo"],"places":null}"#,
                0.75,
                "places: expected []",
            ),
            (r#"{"persons":3,"places":[]}"#, 0.5, "expected the list"),
            (
                r#"{"persons":[],"places":["Oslo"]}"#,
                0.0,
                "2 of 2 fields wrong",
            ),
        ];
        for (answer, value, said) in cases {
            let got = score("json_match", answer, expected);
            assert!((got.value - value).abs() < 1e-9, "{answer}: {}", got.value);
            assert!(got.feedback.contains(said), "{answer}: {}", got.feedback);
        }
    }

    #[test]
    fn json_match_gives_partial_credit_per_field() {
        let expected = r#"{"name":"Ana","company":null}"#;
        assert_eq!(
            score(
                "json_match",
                "```json\n{\"name\":\"Ana\",\"company\":null}\n```",
                expected
            )
            .value,
            1.0
        );
        let half = score("json_match", r#"{"name":"Ana","company":"X"}"#, expected);
        assert_eq!(half.value, 0.5);
        assert!(
            half.feedback.contains("company: expected null, got \"X\""),
            "{}",
            half.feedback
        );
        assert_eq!(score("json_match", "not json", expected).value, 0.0);
    }

    #[test]
    fn json_schema_checks_conformance() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("s.json"),
            r#"{"type":"object","required":["a"],"properties":{"a":{"type":"integer"}}}"#,
        )
        .unwrap();
        let spec: ScorerSpec = "json_schema:s.json".parse().unwrap();
        let scorer = Scorer::new(&spec, dir.path()).unwrap();
        assert_eq!(scorer.score(None, r#"{"a": 1}"#, "").unwrap().value, 1.0);
        let wrong = scorer.score(None, r#"{"a": "x"}"#, "").unwrap();
        assert_eq!(wrong.value, 0.0);
        assert!(wrong.feedback.contains("/a"), "{}", wrong.feedback);
        assert!(matches!(
            Scorer::new(&"json_schema:missing.json".parse().unwrap(), dir.path()),
            Err(ScorerError::SchemaRead { .. })
        ));
    }

    #[test]
    fn f1_follows_squad_normalisation() {
        assert_eq!(score("f1", "The Eiffel Tower!", "eiffel tower").value, 1.0);
        let partial = score("f1", "tower in paris", "eiffel tower");
        // precision 1/3, recall 1/2 → F1 0.4
        assert!((partial.value - 0.4).abs() < 1e-9, "{}", partial.value);
        assert_eq!(score("f1", "london", "paris").value, 0.0);
    }
}
