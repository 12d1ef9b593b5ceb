//! A first experiment for a dataset (`gepa-lab init`): the shape of the CSV (its inputs,
//! expected column, row count, labels or JSON answers), and from it a commented experiment file
//! that validates as written: a seed prompt that uses every input, splits and a budget that fit
//! the rows, and a scorer that fits the answers.
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use gepa_lab_engine::{
    DEFAULT_REFLECTION_MINIBATCH, FEW_LABELS, MAX_LABELS, input_last, is_label_set,
    labels_are_numbers, reflections_assured,
};

/// Header names taken for the expected column, in this order, when `--expected` is not given.
const EXPECTED_NAMES: [&str; 10] = [
    "expected", "label", "answer", "output", "target", "gold", "class", "category", "queue", "y",
];
/// Words of an expected column's name that say nothing of what the answer is: a classification's
/// seed names the answer ([`task_line`]) only when its name has another word.
const CONTENTLESS_NAME_WORDS: [&str; 22] = [
    "answer", "answers", "class", "classes", "column", "expected", "field", "gold", "ground", "id",
    "label", "labels", "name", "output", "outputs", "result", "target", "targets", "text", "true",
    "truth", "y",
];
/// Reflections the generated budget pays for at least (see `budget-reflections`).
const REFLECTIONS: u64 = 6;
/// The shuffle seed the generated file sets.
const SHUFFLE_SEED: u64 = 7;
/// The `stratify` line of a classification's `[dataset]` table, with its reason.
const STRATIFY: &str = "# Each part holds every label in its share of the file: Pareto rows heavy in one label would\n\
                        # reward a prompt that leans to it.\n\
                        stratify = true\n";
/// At most this many rows are held out when a file has more: each costs one answer per version
/// and model, and 400 rows already tell apart two prompts about 5 points apart (McNemar at 5%,
/// with one row in seven answered differently). The rest of a 25,000-row file would take hours.
const MAX_HOLDOUT: usize = 400;
/// The most Pareto rows `init` gives, from a file with rows to spare (see [`splits`]).
const MAX_PARETO: usize = 80;
/// A column whose values alone give the expected label on at least this share of rows...
const ANSWER_SHARE: f64 = 0.9;
/// ...and remove at least this share of the errors of always answering the commonest label
/// gives the answer away: a copy of the label, or a value derived from it (annotators' votes, a
/// score). Left in, the evolution learns to read it instead of doing the task.
const ANSWER_ERRORS_REMOVED: f64 = 2.0 / 3.0;
/// Columns with more distinct values than this are not checked for giving the answer away
/// (free text, measurements); nor those with fewer than ten rows per value, whose values would
/// "predict" the few rows that hold them.
const MAX_ANSWER_VALUES: usize = 64;

/// What `init` learned of the dataset.
pub struct Shape {
    pub inputs: Vec<String>,
    /// The columns neither expected nor inputs, and why each was left out.
    pub left_out: Vec<LeftOut>,
    pub expected: String,
    pub rows: usize,
    /// The distinct expected values, when they are the labels of a classification (the engine's
    /// rule, [`is_label_set`]): the seed lists them.
    pub labels: Option<BTreeSet<String>>,
    /// Every expected value is a JSON object.
    pub json_objects: bool,
    /// The fields of those objects, in the order first seen, each with the kind of value the
    /// data holds there.
    pub json_fields: Vec<JsonField>,
    pub longest_expected: usize,
    /// The expected column is the file's last only because no column is named like one
    /// ([`EXPECTED_NAMES`]) and `--expected` was not given: a guess the user should check.
    pub expected_by_position: bool,
    /// What a classification's labels give, named by a model because the expected column's
    /// name does not say ([`Shape::answer_name_question`]); `None` from [`read_shape`].
    pub answer_name: Option<AnswerName>,
}

/// What a classification's labels give (`sentiment`), as a model named it from the labels
/// alone, for the seed's first line ([`task_line`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AnswerName {
    pub name: String,
    /// The model that named it, which the file's comment names.
    pub model: String,
}

impl Shape {
    /// The labels, when every one is a number (`0`, `1`, `2`): a model cannot guess what each
    /// stands for, and nothing in the data tells it; the person who knows can say in the seed.
    pub fn numeric_labels(&self) -> Option<&BTreeSet<String>> {
        self.labels
            .as_ref()
            .filter(|labels| labels_are_numbers(labels.iter().map(String::as_str)))
    }

    /// What `init` asks a model when a classification's seed would not say what the answer is:
    /// the expected column's name says nothing of it (`label`) and the labels are words. Only
    /// the labels and the inputs' names are shown, never a row, so the name cannot quote one.
    /// `None` when no name is needed. Read the answer with [`answer_name_of`].
    pub fn answer_name_question(&self) -> Option<String> {
        let labels = self.labels.as_ref()?;
        if self.json_objects
            || self.numeric_labels().is_some()
            || !is_contentless_name(&self.expected)
        {
            return None;
        }
        let subject = match self.inputs.as_slice() {
            [input] => title(input).to_lowercase(),
            inputs => {
                let titles: Vec<String> = inputs.iter().map(|input| title(input)).collect();
                format!("row (with {})", titles.join(", "))
            }
        };
        let labels: Vec<&str> = labels.iter().map(String::as_str).collect();
        Some(format!(
            "Each {subject} in a dataset is labelled with one of: {}.\n\
             What property of the {subject} do these labels describe? Answer with a noun of one \
             to three words, nothing else.",
            labels.join(", ")
        ))
    }
}

/// The name in a model's answer to [`Shape::answer_name_question`], lower case (`sentiment`,
/// `question type`), or `None` when the answer is not one: more than three words, anything but
/// letters and hyphens, a name that says nothing ([`CONTENTLESS_NAME_WORDS`]), or one of the
/// `labels` itself.
pub fn answer_name_of(answer: &str, labels: &BTreeSet<String>) -> Option<String> {
    let line = answer.lines().find(|line| !line.trim().is_empty())?;
    let line = line
        .trim()
        .trim_matches(|c: char| matches!(c, '"' | '\'' | '`' | '*' | '.' | ':'))
        .to_lowercase();
    let words: Vec<&str> = line
        .split_whitespace()
        .skip_while(|word| *word == "the")
        .collect();
    let name = words.join(" ");
    let fits = (1..=3).contains(&words.len())
        && words
            .iter()
            .all(|word| word.chars().all(|c| c.is_alphabetic() || c == '-'))
        && !is_contentless_name(&name)
        && !labels.iter().any(|label| label.to_lowercase() == name);
    fits.then_some(name)
}

/// A column `init` left out of the inputs.
#[derive(Debug, Clone, PartialEq)]
pub struct LeftOut {
    /// Its place in the header, from 1.
    pub position: usize,
    pub name: String,
    pub reason: LeftOutReason,
}

/// Why a column is not an input.
#[derive(Debug, Clone, PartialEq)]
pub enum LeftOutReason {
    /// Named `id` or `..._id`.
    Id,
    /// The header gives it no name (most often the index a data frame was saved with).
    Unnamed,
    /// Its values alone give the expected label on `share` of the rows, where always answering
    /// the commonest label gives `majority` (see [`ANSWER_SHARE`]).
    GivesTheAnswer { share: f64, majority: f64 },
}

impl LeftOut {
    /// How a comment names it: `ticket_id`, `column 1 (no name)`.
    pub fn label(&self) -> String {
        match self.reason {
            LeftOutReason::Unnamed => format!("column {} (no name)", self.position),
            _ => self.name.clone(),
        }
    }

    /// Its name and, in a few words, why it was left out.
    pub fn summary(&self) -> String {
        match self.reason {
            LeftOutReason::Unnamed => self.label(),
            LeftOutReason::Id => format!("{} (an id)", self.name),
            LeftOutReason::GivesTheAnswer { share, .. } => format!(
                "{} (gives the answer on {:.0}% of rows)",
                self.label(),
                share * 100.0
            ),
        }
    }
}

/// One key of the expected JSON objects and what the data holds under it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JsonField {
    pub key: String,
    /// The kind of its non-null values; `None` when every value seen was null.
    pub kind: Option<JsonKind>,
    /// Some row holds null here, or lacks the key.
    pub nullable: bool,
}

/// The kind of a JSON value, as precise as the rows allow: two rows that disagree make the
/// wider kind (an integer and a number make a number; anything else makes `Any`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JsonKind {
    String,
    Integer,
    Number,
    Boolean,
    Object,
    /// A list; the kind of its elements (`None` while every list seen was empty).
    List(Option<Box<JsonKind>>),
    Any,
}

impl JsonKind {
    fn of(value: &serde_json::Value) -> Option<Self> {
        use serde_json::Value;
        Some(match value {
            Value::Null => return None,
            Value::Bool(_) => Self::Boolean,
            Value::Number(n) if n.is_i64() || n.is_u64() => Self::Integer,
            Value::Number(_) => Self::Number,
            Value::String(_) => Self::String,
            Value::Object(_) => Self::Object,
            Value::Array(items) => Self::List(
                items
                    .iter()
                    .filter_map(Self::of)
                    .reduce(Self::join)
                    .map(Box::new),
            ),
        })
    }

    /// The kind that holds both.
    fn join(self, other: Self) -> Self {
        match (self, other) {
            (a, b) if a == b => a,
            (Self::Integer | Self::Number, Self::Integer | Self::Number) => Self::Number,
            (Self::List(a), Self::List(b)) => Self::List(match (a, b) {
                (Some(a), Some(b)) => Some(Box::new(a.join(*b))),
                (a, b) => a.or(b),
            }),
            _ => Self::Any,
        }
    }

    /// How the seed describes it: "a list of strings", "a number".
    fn described(&self) -> String {
        match self {
            Self::String => "a string".into(),
            Self::Integer => "a whole number".into(),
            Self::Number => "a number".into(),
            Self::Boolean => "true or false".into(),
            Self::Object => "an object".into(),
            Self::Any => "a value".into(),
            Self::List(None) => "a list".into(),
            Self::List(Some(item)) => format!("a list of {}", item.plural()),
        }
    }

    fn plural(&self) -> String {
        match self {
            Self::String => "strings".into(),
            Self::Integer => "whole numbers".into(),
            Self::Number => "numbers".into(),
            Self::Boolean => "true or false values".into(),
            Self::Object => "objects".into(),
            Self::Any => "values".into(),
            Self::List(_) => "lists".into(),
        }
    }

    /// A made-up value of this kind for the seed's example of the shape: never a row's value,
    /// so the example shows the form and quotes no input.
    fn example(&self) -> String {
        match self {
            Self::String => "\"...\"".into(),
            Self::Integer => "0".into(),
            Self::Number => "0.0".into(),
            Self::Boolean => "false".into(),
            Self::Object => "{}".into(),
            Self::Any => "null".into(),
            Self::List(None) => "[]".into(),
            Self::List(Some(item)) => format!("[{}, {}]", item.example(), item.example()),
        }
    }
}

/// At most this many JSON keys are named in the seed; more, and it asks for "the same fields".
const MAX_JSON_KEYS: usize = 12;

/// Reads the header and every row once: the columns, the row count and the expected values.
pub fn read_shape(dataset: &Path, expected: Option<&str>) -> Result<Shape, String> {
    // The validator's reader: a row of the wrong width is reported as it reports it, at its line.
    let mut reader = gepa_lab_dataset::csv_reader(
        gepa_lab_input::open_stream(dataset).map_err(|e| e.to_string())?,
    );
    let header = header_names(&mut reader)?;
    let (expected, expected_by_position) = expected_column(&header, expected)?;
    let at = header
        .iter()
        .position(|h| *h == expected)
        .unwrap_or_default();
    let mut rows = 0;
    let mut labels = BTreeMap::<String, usize>::new();
    let mut longest_expected = 0;
    let mut json_objects = true;
    let mut json_fields: Vec<JsonField> = Vec::new();
    let mut tables = ValueTables::new(header.len(), at);
    let mut record = csv::StringRecord::new();
    while reader
        .read_record(&mut record)
        .map_err(|e| format!("row {}: {e}", rows + 1))?
    {
        if record.len() != header.len() {
            let line = gepa_lab_dataset::line_at(&mut reader, record.position());
            let problem =
                gepa_lab_dataset::RowProblemKind::ragged(header.len(), record.as_byte_record());
            return Err(format!("row {} (line {line}) {problem}", rows + 1));
        }
        rows += 1;
        let value = record.get(at).unwrap_or_default().trim();
        longest_expected = longest_expected.max(value.len());
        match serde_json::from_str::<serde_json::Value>(value) {
            Ok(serde_json::Value::Object(object)) if json_objects => {
                add_json_row(&mut json_fields, &object, rows == 1);
            }
            _ => json_objects = false,
        }
        // Counted up to one past the most labels; an empty value (which `validate` reports
        // with its row) is no label.
        if labels.len() <= MAX_LABELS && !value.is_empty() {
            *labels.entry(value.to_owned()).or_default() += 1;
        }
        if labels.len() > MAX_LABELS {
            tables.clear();
        } else {
            tables.add(&record, value);
        }
    }
    let json_objects = json_objects && rows > 0;
    let labelled_rows = labels.values().sum();
    let distinct: Vec<&str> = labels.keys().map(String::as_str).collect();
    let classification = !json_objects && is_label_set(&distinct, labelled_rows);
    let majority = labels.values().max().copied().unwrap_or_default();
    let (inputs, left_out) = input_columns(&header, at, |column| {
        classification
            .then(|| tables.gives_the_answer(column, rows, majority))
            .flatten()
    });
    Ok(Shape {
        inputs,
        left_out,
        expected,
        rows,
        labels: classification.then(|| labels.into_keys().collect()),
        json_objects,
        json_fields,
        longest_expected,
        expected_by_position,
        answer_name: None,
    })
}

/// The header's column names, trimmed: at least two, an input and the expected column.
fn header_names(reader: &mut csv::Reader<impl std::io::Read>) -> Result<Vec<String>, String> {
    let header: Vec<String> = reader
        .headers()
        .map_err(|e| format!("reading the header: {e}"))?
        .iter()
        .map(|h| h.trim().to_owned())
        .collect();
    if header.len() < 2 {
        return Err(format!(
            "the header has {} column(s) ({}); an experiment needs at least one input column and \
             the expected column",
            header.len(),
            header.join(", ")
        ));
    }
    Ok(header)
}

/// Per column other than the expected one, how often each of its values came with each expected
/// value; a column's table is dropped once it holds more than [`MAX_ANSWER_VALUES`] values, so
/// the memory is bounded whatever the file.
struct ValueTables(Vec<Option<HashMap<String, HashMap<String, usize>>>>);

impl ValueTables {
    fn new(columns: usize, expected: usize) -> Self {
        Self(
            (0..columns)
                .map(|column| (column != expected).then(HashMap::new))
                .collect(),
        )
    }

    /// Stops counting: the expected column is not a label set.
    fn clear(&mut self) {
        self.0.iter_mut().for_each(|table| *table = None);
    }

    fn add(&mut self, record: &csv::StringRecord, expected: &str) {
        for (column, table) in self.0.iter_mut().enumerate() {
            let Some(values) = table else { continue };
            let cell = record.get(column).unwrap_or_default().trim();
            if !values.contains_key(cell) && values.len() == MAX_ANSWER_VALUES {
                *table = None;
                continue;
            }
            *values
                .entry(cell.to_owned())
                .or_default()
                .entry(expected.to_owned())
                .or_default() += 1;
        }
    }

    /// Whether `column` gives the answer away ([`ANSWER_SHARE`]), of `rows` rows whose commonest
    /// label is on `majority`.
    fn gives_the_answer(
        &self,
        column: usize,
        rows: usize,
        majority: usize,
    ) -> Option<LeftOutReason> {
        let values = self.0[column].as_ref()?;
        if values.len() < 2 || values.len() * 10 > rows {
            return None;
        }
        let right: usize = values
            .values()
            .map(|labels| labels.values().max().copied().unwrap_or_default())
            .sum();
        let (share, majority) = (right as f64 / rows as f64, majority as f64 / rows as f64);
        (share >= ANSWER_SHARE && share - majority >= ANSWER_ERRORS_REMOVED * (1.0 - majority))
            .then_some(LeftOutReason::GivesTheAnswer { share, majority })
    }
}

/// Adds one expected object to the fields seen so far (`first`: it is the first row). A key the
/// row lacks, or holds null, is nullable; at most [`MAX_JSON_KEYS`] + 1 keys are kept (more, and
/// the seed names none).
fn add_json_row(
    fields: &mut Vec<JsonField>,
    object: &serde_json::Map<String, serde_json::Value>,
    first: bool,
) {
    for field in fields.iter_mut() {
        field.nullable |= !object.contains_key(&field.key);
    }
    for (key, value) in object {
        let kind = JsonKind::of(value);
        if let Some(field) = fields.iter_mut().find(|field| field.key == *key) {
            field.nullable |= kind.is_none();
            field.kind = match (field.kind.take(), kind) {
                (Some(a), Some(b)) => Some(a.join(b)),
                (a, b) => a.or(b),
            };
        } else if fields.len() <= MAX_JSON_KEYS {
            fields.push(JsonField {
                key: key.clone(),
                nullable: kind.is_none() || !first,
                kind,
            });
        }
    }
}

/// The expected column: the one `--expected` names, else the first header named like one of
/// [`EXPECTED_NAMES`], else the last (then `true`: a guess by position alone).
fn expected_column(header: &[String], expected: Option<&str>) -> Result<(String, bool), String> {
    if let Some(name) = expected {
        if !header.iter().any(|h| h == name) {
            return Err(format!(
                "--expected {name:?} is not a column (columns: {})",
                header.join(", ")
            ));
        }
        return Ok((name.to_owned(), false));
    }
    Ok(EXPECTED_NAMES
        .iter()
        .find_map(|want| header.iter().find(|h| h.eq_ignore_ascii_case(want)))
        .map_or_else(
            || (header[header.len() - 1].clone(), true),
            |h| (h.clone(), false),
        ))
}

/// A column name that says it holds ids: its last word is `id` (`id`, `pair_ID`, `#1 ID`,
/// `comment-id`), or it ends in `Id` or `ID` after a lower-case letter (`commentId`, `userID`;
/// not `VALID`, `paid`).
fn is_id_name(name: &str) -> bool {
    let Some(last) = name
        .rsplit(|c: char| !c.is_alphanumeric())
        .find(|word| !word.is_empty())
    else {
        return false;
    };
    if last.eq_ignore_ascii_case("id") {
        return true;
    }
    let camel = last.strip_suffix("Id").or_else(|| last.strip_suffix("ID"));
    camel.is_some_and(|stem| stem.chars().next_back().is_some_and(char::is_lowercase))
}

/// The input columns (every column but the expected one, at `expected`, and those
/// [`LeftOutReason`] names; all of the others when that leaves none), and those left out.
fn input_columns(
    header: &[String],
    expected: usize,
    gives_the_answer: impl Fn(usize) -> Option<LeftOutReason>,
) -> (Vec<String>, Vec<LeftOut>) {
    let mut inputs = Vec::new();
    let mut left_out = Vec::new();
    for (column, name) in header.iter().enumerate().filter(|(c, _)| *c != expected) {
        let reason = if name.is_empty() {
            Some(LeftOutReason::Unnamed)
        } else if is_id_name(name) {
            Some(LeftOutReason::Id)
        } else {
            gives_the_answer(column)
        };
        match reason {
            Some(reason) => left_out.push(LeftOut {
                position: column + 1,
                name: name.clone(),
                reason,
            }),
            None => inputs.push(name.clone()),
        }
    }
    if inputs.is_empty() {
        return (
            left_out.into_iter().map(|column| column.name).collect(),
            Vec::new(),
        );
    }
    (inputs, left_out)
}

/// The experiment's name: the dataset's stem in the characters a name may use.
pub fn name_of(stem: &str) -> String {
    let name = super::name_chars(&stem.to_ascii_lowercase(), '-', 30);
    if name.is_empty() {
        "experiment".into()
    } else {
        name
    }
}

/// The splits for `rows` rows: (minibatch, pareto), a sixth each up to 40, leaving at least a
/// third for the holdout. Ten feedback and twenty Pareto rows of a 240-row file let rules fitted
/// to a few rows pass: a child was accepted on the minibatch and picked as best on 20 Pareto
/// rows by noise, and lost its lead on the holdout.
///
/// A file with rows to spare once [`MAX_HOLDOUT`] rows are held out gives them to the Pareto
/// set, up to [`MAX_PARETO`]: rows that would go unused judge each new prompt instead, so that
/// the best is less often a prompt that won there by chance (on AG News a child at 0.700 against
/// the seed's 0.575 on 40 Pareto rows scored 0.669 against 0.725 on the holdout).
pub fn splits(rows: usize) -> Result<(usize, usize), String> {
    if rows < 6 {
        return Err(format!(
            "{rows} data rows; an experiment needs at least 6 (minibatch, Pareto and holdout rows)"
        ));
    }
    let part = (rows / 6).clamp(2, 40);
    let spare = rows.saturating_sub(2 * part + MAX_HOLDOUT);
    Ok((part, part + spare.min(MAX_PARETO.saturating_sub(part))))
}

/// The replay model the file names, with the probe's findings as a comment.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelLine {
    pub model: String,
    /// TOML comment lines written above it (empty, or each line starting with `#`).
    pub comment: String,
}

/// The smallest budget of at least 25, in steps of 5, that pays for [`REFLECTIONS`].
fn budget(minibatch: usize, pareto: usize) -> u64 {
    let mut budget = 25;
    while reflections_assured(
        minibatch as u64,
        pareto as u64,
        budget,
        DEFAULT_REFLECTION_MINIBATCH as u64,
    ) < REFLECTIONS
    {
        budget += 5;
    }
    budget
}

/// A TOML basic string literal.
fn quoted(text: &str) -> String {
    let mut out = String::from("\"");
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The text of a first experiment file for the dataset `shape` describes: commented, and
/// valid as written. `dataset` is the CSV as the user named it; `out` the file to write.
pub fn starter_text(
    shape: &Shape,
    dataset: &Path,
    out: &Path,
    model: &ModelLine,
) -> Result<String, String> {
    let (minibatch, pareto) = splits(shape.rows)?;
    let budget = budget(minibatch, pareto);
    let stem = out
        .file_stem()
        .map_or_else(String::new, |s| s.to_string_lossy().into_owned());
    let name = name_of(&stem);
    let (seed, scorer, max_tokens) = seed_prompt(shape)?;
    let (unused_note, labels_note) = notes(shape);
    let mut text = format!(
        r#"# Written by `gepa-lab init --dataset {dataset}`: a first experiment on this dataset.
# It validates as it is; read the comments, change what you know better, then:
#   gepa-lab validate {file}
#   gepa-lab run {file}              # offline: the built-in engine and the embedded model
# The format: `gepa-lab schema`, and the README's "The experiment file".
name = {name}
description = {description}

[prompt]
# The prompt to improve. Each {{column}} is filled from a dataset row.
{labels_note}seed = """{seed}"""

"#,
        dataset = dataset.display(),
        file = out.display(),
        name = quoted(&name),
        description = quoted(&format!(
            "{} from {}",
            title(&shape.expected),
            shape.inputs.join(", ")
        )),
        seed = seed.replace('\\', "\\\\").replace("\"\"\"", "\"\"\\\""),
    );
    text.push_str(&dataset_table(
        shape,
        dataset,
        out,
        &unused_note,
        (minibatch, pareto),
    ));
    text.push_str(&run_tables(budget, model, scorer, max_tokens));
    Ok(text)
}

/// The `[dataset]` table: the file, its columns, and the split in words.
fn dataset_table(
    shape: &Shape,
    dataset: &Path,
    out: &Path,
    unused_note: &str,
    (minibatch, pareto): (usize, usize),
) -> String {
    // The dataset as the experiment file names it: as given when absolute, else relative to the
    // experiment file's own folder (paths in the file resolve against it).
    let dataset_path = if dataset.is_absolute() {
        dataset.to_owned()
    } else {
        relative_to(dataset, out.parent().unwrap_or(Path::new("")))
    };
    let inputs: Vec<String> = shape.inputs.iter().map(|i| quoted(i)).collect();
    let rest = shape.rows - minibatch - pareto;
    let (split, holdout) = if rest > MAX_HOLDOUT {
        (
            format!(
                "the next\n\
                 # {pareto} judge each new prompt, and {MAX_HOLDOUT} of the {rest} others are held out to compare\n\
                 # the prompts at the end: enough to tell two prompts about 5 points apart. Each\n\
                 # held-out row costs an answer per prompt and model (\"rest\" holds out all {rest})."
            ),
            MAX_HOLDOUT.to_string(),
        )
    } else {
        (
            format!(
                "the next\n# {pareto} judge each new prompt, and the rest are held out to compare the \
                 prompts at the end."
            ),
            quoted("rest"),
        )
    };
    format!(
        r#"[dataset]
file = {dataset_path}
{unused_note}inputs = [{inputs}]
expected = {expected}
# {rows} data rows: the first {minibatch} (after shuffling) show the engine its mistakes, {split}
minibatch = {minibatch}
pareto = {pareto}
holdout = {holdout}
shuffle_seed = {shuffle_seed}
{stratify}
"#,
        dataset_path = quoted(&dataset_path.to_string_lossy()),
        stratify = if shape.labels.is_some() { STRATIFY } else { "" },
        inputs = inputs.join(", "),
        expected = quoted(&shape.expected),
        rows = shape.rows,
        shuffle_seed = SHUFFLE_SEED,
    )
}

/// The `[evolution]`, `[evaluator]` and `[replay]` tables.
fn run_tables(budget: u64, model: &ModelLine, scorer: &str, max_tokens: usize) -> String {
    format!(
        r#"[evolution]
strategy = "RPM"
model = "{word}-4o-mini"
# Inference calls the evolution may spend: this one pays for at least {reflections} proposals.
budget = {budget}

[evaluator]
model = "{word}-4o-mini"
metric = "exact_match"

[replay]
# The seed and the best evolved prompt, answered on the holdout rows by each model. The engine
# evolves the prompt on the first.
{model_comment}models = [{model}]
top = 1
scorer = "{scorer}"
temperature = 0.0
max_tokens = {max_tokens}
concurrency = 16
"#,
        word = gepa_lab_evolution::ServiceProfile::from_env().model_word,
        reflections = REFLECTIONS,
        model_comment = model.comment,
        model = quoted(&model.model),
    )
}

/// The seed prompt (each input as `Title: {column}`, then the task; the task first when it lists
/// more than [`FEW_LABELS`] labels), the scorer that fits the expected answers, and the replay's
/// token limit.
fn seed_prompt(shape: &Shape) -> Result<(String, &'static str, usize), String> {
    let mut seed = String::new();
    for input in &shape.inputs {
        // A placeholder names its column; `{` and `}` in a column name cannot be written.
        if input.contains(['{', '}']) {
            return Err(format!(
                "column {input:?} has a brace in its name, which a prompt placeholder cannot name"
            ));
        }
        seed.push_str(&format!("{}: {{{input}}}\n", title(input)));
    }
    let (task, scorer, max_tokens) = match &shape.labels {
        // A person writing the first prompt names the fields they want: without them the small
        // model invented its own ("forecast", "start_date") for every row of the public SNIPS
        // weather sample and scored 0.02.
        _ if shape.json_objects => (
            json_task(&shape.json_fields),
            "json_match",
            (shape.longest_expected * 2).max(64),
        ),
        Some(labels) => {
            let name = shape.answer_name.as_ref().map(|named| named.name.as_str());
            if let Some(line) = task_line(&shape.expected, name, &shape.inputs) {
                seed.insert_str(0, &format!("{line}\n"));
            }
            let list: Vec<&str> = labels.iter().map(String::as_str).collect();
            (
                format!(
                    "Answer with exactly one of: {}. Give only the answer.",
                    list.join(", ")
                ),
                "exact_match_ci",
                shape.longest_expected + 16,
            )
        }
        None => (
            format!(
                "Give the {}. Give only the answer.",
                title(&shape.expected).to_lowercase()
            ),
            "f1",
            (shape.longest_expected + 16).max(64),
        ),
    };
    // The task is literal text: a brace in it (a JSON example, a label) is written doubled.
    seed.push_str(&task.replace('{', "{{").replace('}', "}}"));
    // A long list of labels goes above the input (see `FEW_LABELS`).
    if shape
        .labels
        .as_ref()
        .is_some_and(|labels| labels.len() > FEW_LABELS)
    {
        seed = input_last(&seed).unwrap_or(seed);
    }
    Ok((seed, scorer, max_tokens))
}

/// The first line of a classification's seed: what the answer is, by the expected column's name
/// (`Give the sentiment of this text.`, `Give the entailment judgment for Sentence A and Sentence
/// B.`, `Is this comment spam?` for `is_spam`). When the name says nothing of it (`label`,
/// `class`, `gold_label`: see [`CONTENTLESS_NAME_WORDS`]), by `answer_name`, the name a model
/// gave the labels ([`Shape::answer_name_question`]), and `None` without one. The question
/// form is not measured; it is the same statement asked the way the name asks it.
///
/// The labels alone leave a small model to guess the task. Measured with `compare --prompts` on
/// 200 rows the engine never sees, the 0.5B model answering (2026-12-01): SICK's entailment
/// pairs (`entailment_judgment`, three labels) 0.525 with the seed, which answered `NEUTRAL` to
/// every row, and 0.640 with this line (p = 0.002); SST-2 with its column named `sentiment`,
/// 0.700 and 0.800 (p = 0.008); TweetEval sentiment 0.400 and 0.420 (p = 0.50). The same line
/// with `label` changed 6 and 8 answers of 200 and neither score; after the input instead of
/// above it, it gained less (SICK +0.030, p = 0.53; SST-2 +0.080).
fn task_line(expected: &str, answer_name: Option<&str>, inputs: &[String]) -> Option<String> {
    let name = if is_contentless_name(expected) {
        answer_name?.to_owned()
    } else {
        expected.to_lowercase()
    };
    let words: Vec<&str> = name
        .split(|c: char| !c.is_alphanumeric())
        .filter(|word| !word.is_empty())
        .collect();
    // A name that asks a question (`is_spam`, `is_duplicate`) is asked as one.
    let question = match words.as_slice() {
        ["is", rest @ ..] if !rest.is_empty() => Some(rest.join(" ")),
        _ => None,
    };
    let name = words.join(" ");
    match (inputs, question) {
        ([], _) => None,
        ([input], Some(quality)) => Some(format!(
            "Is this {} {quality}?",
            title(input).to_lowercase()
        )),
        ([input], None) => Some(format!(
            "Give the {name} of this {}.",
            title(input).to_lowercase()
        )),
        ([first @ .., last], question) => {
            let first: Vec<String> = first.iter().map(|input| title(input)).collect();
            let inputs = format!("{} and {}", first.join(", "), title(last));
            Some(match question {
                Some(quality) => format!("Are {inputs} {quality}?"),
                None => format!("Give the {name} for {inputs}."),
            })
        }
    }
}

/// Whether a column's name says nothing of what its values are (`label`, `gold_label`; `label2`
/// and `y_1` say no more than `label` and `y`): every word is one of [`CONTENTLESS_NAME_WORDS`].
fn is_contentless_name(name: &str) -> bool {
    name.to_lowercase()
        .split(|c: char| !c.is_alphanumeric())
        .filter(|word| !word.is_empty())
        .all(|word| {
            let word = word.trim_end_matches(|c: char| c.is_ascii_digit());
            word.is_empty() || CONTENTLESS_NAME_WORDS.contains(&word)
        })
}

/// The comments above `inputs` (columns left out) and above the seed (what kind of task the
/// expected column makes it, and how it is scored).
fn notes(shape: &Shape) -> (String, String) {
    let mut unused_note = String::new();
    let named = |reason: fn(&LeftOutReason) -> bool| -> Vec<String> {
        shape
            .left_out
            .iter()
            .filter(|column| reason(&column.reason))
            .map(LeftOut::label)
            .collect()
    };
    let ids = named(|reason| matches!(reason, LeftOutReason::Id | LeftOutReason::Unnamed));
    if !ids.is_empty() {
        unused_note.push_str(&format!(
            "# Left out of the inputs (they look like ids): {}.\n",
            ids.join(", ")
        ));
    }
    // Every such column is measured against the same baseline: the commonest label's share.
    let answers: Vec<(String, f64)> = shape
        .left_out
        .iter()
        .filter_map(|column| match column.reason {
            LeftOutReason::GivesTheAnswer { share, majority } => Some((
                format!("{} ({:.0}%)", column.label(), share * 100.0),
                majority,
            )),
            _ => None,
        })
        .collect();
    if let Some((_, majority)) = answers.first() {
        let columns: Vec<&str> = answers.iter().map(|(column, _)| column.as_str()).collect();
        unused_note.push_str(&format!(
            "# Left out of the inputs: {columns}.\n\
             # Alone, each one's values give the {expected} on that share of the rows (always the\n\
             # commonest {expected}: {majority:.0}%): it copies the answer or is derived from it (votes,\n\
             # a score), and a prompt would learn to read it instead of doing the task. Add it back\n\
             # if it is known before the answer is.\n",
            columns = columns.join(", "),
            expected = shape.expected,
            majority = majority * 100.0,
        ));
    }
    (unused_note, labels_note(shape))
}

/// The comment above the seed: what kind of task the expected column makes it, and how it is
/// scored.
fn labels_note(shape: &Shape) -> String {
    match &shape.labels {
        _ if shape.json_objects => {
            "# The expected column holds JSON objects: answers are scored field by field\n\
             # (json_match: a value right or wrong, a list by the F1 of its elements).\n"
                .to_owned()
        }
        Some(labels) => {
            let mut note = format!(
                "# The expected column has {} distinct values, so this is a classification: the seed\n\
                 # lists them and answers are scored by exact match, ignoring case.\n",
                labels.len()
            );
            if labels.len() > FEW_LABELS {
                note.push_str(
                    "# A list this long stands above the input: a small model answers it better there,\n\
                     # and every row shares it as a prefix that the model evaluates once.\n",
                );
            }
            if let Some(named) = &shape.answer_name {
                note.push_str(&format!(
                    "# The seed's first line names what the labels give ({name:?}): the column's name\n\
                     # ({column:?}) does not say, so `init` asked {model} what the labels describe,\n\
                     # showing it the labels and the inputs' names. Change it if it is wrong.\n",
                    name = named.name,
                    column = shape.expected,
                    model = named.model,
                ));
            }
            if shape.numeric_labels().is_some() {
                note.push_str(
                    "# The labels are numbers: say in the seed what each stands for (`2 means ...`),\n\
                     # since nothing in the data tells a model.\n",
                );
            }
            note
        }
        None => "# The expected column is free text: answers are scored by token overlap (f1).\n"
            .to_owned(),
    }
}

/// The seed's request for a JSON answer: each key with the kind of value the data holds there
/// (lists included, since a small model told only the keys answers a string where a list is
/// expected), null asked for where the data uses it, and a made-up example of the shape. More
/// than [`MAX_JSON_KEYS`] keys, and it asks for "the same fields".
fn json_task(fields: &[JsonField]) -> String {
    if fields.is_empty() || fields.len() > MAX_JSON_KEYS {
        return "Answer with a JSON object only, with the same fields every time.".to_owned();
    }
    let described: Vec<String> = fields
        .iter()
        .map(|field| {
            let kind = field.kind.as_ref().unwrap_or(&JsonKind::Any).described();
            let null = if field.nullable { ", or null" } else { "" };
            format!("\"{}\" ({kind}{null})", field.key)
        })
        .collect();
    let mut task = format!(
        "Answer with a JSON object only, with the keys {}.",
        described.join(", ")
    );
    if fields.iter().any(|field| field.nullable) {
        task.push_str(" Use null for a value the input does not give.");
    }
    if fields
        .iter()
        .any(|field| matches!(field.kind, Some(JsonKind::List(_))))
    {
        task.push_str(" Use an empty list [] when the input has none.");
    }
    let example: Vec<String> = fields
        .iter()
        .map(|field| {
            let value = field.kind.as_ref().unwrap_or(&JsonKind::Any).example();
            format!("{}: {value}", serde_json::Value::String(field.key.clone()))
        })
        .collect();
    task.push_str(&format!(
        "\nThe shape of the answer (the values are made up): {{{}}}",
        example.join(", ")
    ));
    task
}

/// `Review text` for `review_text`.
fn title(column: &str) -> String {
    let spaced = column.replace(['_', '-'], " ");
    let mut chars = spaced.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => spaced,
    }
}

/// `path` as seen from `base`, both taken as given (relative to the current folder, or absolute).
fn relative_to(path: &Path, base: &Path) -> PathBuf {
    let absolute = |p: &Path| {
        if p.is_absolute() {
            p.to_owned()
        } else {
            std::env::current_dir().unwrap_or_default().join(p)
        }
    };
    let (path, base) = (absolute(path), absolute(base));
    let path: Vec<_> = path.components().collect();
    let base: Vec<_> = base.components().collect();
    let common = path.iter().zip(&base).take_while(|(a, b)| a == b).count();
    let mut out = PathBuf::new();
    for _ in common..base.len() {
        out.push("..");
    }
    for part in &path[common..] {
        out.push(part);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_fit_the_rows_and_the_budget_pays_for_the_reflections() {
        assert!(splits(5).is_err());
        for rows in [6, 20, 40, 109, 500, 5000] {
            let (minibatch, pareto) = splits(rows).unwrap();
            assert!(minibatch + pareto < rows, "{rows}: a holdout is left");
            let budget = budget(minibatch, pareto);
            assert!(budget >= 25 && budget.is_multiple_of(5));
            assert!(reflections_assured(minibatch as u64, pareto as u64, budget, 3) >= REFLECTIONS);
        }
    }

    /// The fields `read_shape` would find in these expected objects.
    fn fields(rows: &[&str]) -> Vec<JsonField> {
        let mut fields = Vec::new();
        for (at, row) in rows.iter().enumerate() {
            let serde_json::Value::Object(object) = serde_json::from_str(row).unwrap() else {
                panic!("not an object: {row}");
            };
            add_json_row(&mut fields, &object, at == 0);
        }
        fields
    }

    #[test]
    fn a_json_seed_states_each_keys_kind_as_the_data_holds_it() {
        // Keys come in the order serde_json's map keeps them: sorted.
        let fields = fields(&[
            r#"{"persons": [], "city": "Oslo", "year": 2001, "score": 1}"#,
            r#"{"persons": ["Ana", "Bo"], "city": null, "year": 1999, "score": 0.5}"#,
        ]);
        let field = |key: &str| fields.iter().find(|f| f.key == key).unwrap();
        assert_eq!(
            field("persons").kind,
            Some(JsonKind::List(Some(Box::new(JsonKind::String))))
        );
        assert!(!field("persons").nullable);
        assert!(field("city").nullable, "city is null in a row");
        assert_eq!(field("year").kind, Some(JsonKind::Integer));
        assert_eq!(
            field("score").kind,
            Some(JsonKind::Number),
            "1 and 0.5 make a number"
        );
        let task = json_task(&fields);
        assert_eq!(
            task,
            "Answer with a JSON object only, with the keys \"city\" (a string, or null), \
             \"persons\" (a list of strings), \"score\" (a number), \"year\" (a whole number). \
             Use null for a value the input does not give. Use an empty list [] when the input \
             has none.\nThe shape of the answer (the values are made up): {\"city\": \"...\", \
             \"persons\": [\"...\", \"...\"], \"score\": 0.0, \"year\": 0}"
        );
        // The example is JSON of the stated shape, with none of the rows' values.
        let example = task.split("made up): ").nth(1).unwrap();
        let parsed: serde_json::Value = serde_json::from_str(example).unwrap();
        assert_eq!(parsed["persons"], serde_json::json!(["...", "..."]));
        assert!(!example.contains("Ana") && !example.contains("Oslo"));
    }

    #[test]
    fn a_key_missing_from_a_later_row_is_nullable_and_too_many_keys_name_none() {
        let fields = fields(&[r#"{"a": "x", "b": true}"#, r#"{"a": "y", "c": [1]}"#]);
        let field = |key: &str| fields.iter().find(|f| f.key == key).unwrap();
        assert!(!field("a").nullable);
        assert!(field("b").nullable, "b is missing from the second row");
        assert!(field("c").nullable, "c is missing from the first row");
        assert_eq!(field("b").kind, Some(JsonKind::Boolean));
        assert_eq!(
            JsonKind::of(&serde_json::json!(["a", 1])),
            Some(JsonKind::List(Some(Box::new(JsonKind::Any))))
        );
        let many: Vec<JsonField> = (0..=MAX_JSON_KEYS)
            .map(|k| JsonField {
                key: format!("k{k}"),
                kind: Some(JsonKind::String),
                nullable: false,
            })
            .collect();
        assert_eq!(
            json_task(&many),
            "Answer with a JSON object only, with the same fields every time."
        );
    }

    #[test]
    fn id_columns_are_told_by_the_last_word_of_their_name() {
        for id in [
            "id",
            "ID",
            "pair_ID",
            "#1 ID",
            "comment-id",
            "commentId",
            "userID",
        ] {
            assert!(is_id_name(id), "{id}");
        }
        for not_id in ["idea", "paid", "VALID", "Android", "ids_seen", "text"] {
            assert!(!is_id_name(not_id), "{not_id}");
        }
    }

    #[test]
    fn a_classification_seed_names_the_answer_when_the_column_name_says_what_it_is() {
        let inputs = |names: &[&str]| names.iter().map(|n| n.to_string()).collect::<Vec<_>>();
        assert_eq!(
            task_line("sentiment", None, &inputs(&["text"])).as_deref(),
            Some("Give the sentiment of this text.")
        );
        assert_eq!(
            task_line(
                "entailment_judgment",
                None,
                &inputs(&["sentence_A", "sentence_B"])
            )
            .as_deref(),
            Some("Give the entailment judgment for Sentence A and Sentence B.")
        );
        assert_eq!(
            task_line("Topic", None, &inputs(&["title", "body", "url"])).as_deref(),
            Some("Give the topic for Title, Body and Url.")
        );
        assert_eq!(
            task_line("is_spam", None, &inputs(&["CONTENT"])).as_deref(),
            Some("Is this content spam?")
        );
        assert_eq!(
            task_line("is_duplicate", None, &inputs(&["question1", "question2"])).as_deref(),
            Some("Are Question1 and Question2 duplicate?")
        );
        // A column named for nothing takes the name a model gave its labels.
        assert_eq!(
            task_line("label", Some("question type"), &inputs(&["question"])).as_deref(),
            Some("Give the question type of this question.")
        );
        assert_eq!(
            task_line("sentiment", Some("mood"), &inputs(&["text"])).as_deref(),
            Some("Give the sentiment of this text.")
        );
        for contentless in ["label", "CLASS", "gold_label", "label2", "y", "target"] {
            assert_eq!(
                task_line(contentless, None, &inputs(&["text"])),
                None,
                "{contentless}"
            );
        }
        // In the seed: first, above the input, with the labels' line after the input.
        let csv: String = std::iter::once("review,sentiment\n".to_string())
            .chain((0..12).map(|i| format!("words {i},{}\n", ["good", "bad"][i % 2])))
            .collect();
        let (seed, scorer, _) = seed_prompt(&shape_of(&csv)).unwrap();
        assert_eq!(
            seed,
            "Give the sentiment of this review.\nReview: {review}\n\
             Answer with exactly one of: bad, good. Give only the answer."
        );
        assert_eq!(scorer, "exact_match_ci");
        let csv = csv.replace("review,sentiment", "review,label");
        let (seed, _, _) = seed_prompt(&shape_of(&csv)).unwrap();
        assert!(seed.starts_with("Review: {review}\n"), "{seed}");
    }

    #[test]
    fn a_model_names_the_labels_only_where_the_column_name_does_not() {
        let labels = |csv_labels: &[&str]| -> String {
            std::iter::once("text,label\n".to_string())
                .chain((0..12).map(|i| format!("words {i},{}\n", csv_labels[i % csv_labels.len()])))
                .collect()
        };
        let shape = shape_of(&labels(&["joy", "anger", "sadness"]));
        assert_eq!(
            shape.answer_name_question().as_deref(),
            Some(
                "Each text in a dataset is labelled with one of: anger, joy, sadness.\n\
                 What property of the text do these labels describe? Answer with a noun of one \
                 to three words, nothing else."
            )
        );
        // The column says it, or the labels are numbers (a name would be a guess): no question.
        let named = labels(&["joy", "anger"]).replace("text,label", "text,emotion");
        assert_eq!(shape_of(&named).answer_name_question(), None);
        assert_eq!(shape_of(&labels(&["0", "1"])).answer_name_question(), None);
        // Several inputs are named in the question.
        let pairs = "premise,hypothesis,label\n".to_string()
            + &(0..12)
                .map(|i| format!("a {i},b {i},{}\n", ["yes", "no"][i % 2]))
                .collect::<String>();
        assert!(
            shape_of(&pairs)
                .answer_name_question()
                .unwrap()
                .starts_with("Each row (with Premise, Hypothesis) in a dataset is labelled")
        );
        // The answer: a name of one to three words, in lower case, without "the" or quotes.
        let set: BTreeSet<String> = ["positive", "negative"].map(String::from).into();
        for (answer, name) in [
            ("Sentiment", Some("sentiment")),
            ("  \"Question Type.\"\nmore", Some("question type")),
            ("The emotional tone", Some("emotional tone")),
            ("**Topic**", Some("topic")),
            ("Label", None),
            ("positive", None),
            ("the overall emotional tone here", None),
            ("sentiment (positive or negative)", None),
            ("", None),
        ] {
            assert_eq!(answer_name_of(answer, &set).as_deref(), name, "{answer:?}");
        }
        // Named, the seed says it on its first line, and the file's comment says who named it.
        let mut shape = shape;
        shape.answer_name = Some(AnswerName {
            name: "emotion".into(),
            model: "local:qwen2.5-coder-1.5b".into(),
        });
        let (seed, _, _) = seed_prompt(&shape).unwrap();
        assert!(
            seed.starts_with("Give the emotion of this text.\nText: {text}\n"),
            "{seed}"
        );
        let (_, note) = notes(&shape);
        assert!(
            note.contains("(\"emotion\"): the column's name\n# (\"label\") does not say, so `init` asked local:qwen2.5-coder-1.5b"),
            "{note}"
        );
    }

    /// `read_shape` of a CSV written to a temporary file.
    fn shape_of(csv: &str) -> Shape {
        let file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(file.path(), csv).unwrap();
        read_shape(file.path(), None).unwrap()
    }

    #[test]
    fn columns_that_give_the_answer_away_or_have_no_name_are_left_out_and_said_so() {
        // 200 rows of three labels, the commonest (`1`) on 100. `votes` copies the label but on
        // 8 rows, whose `9` goes with `1` on 4: 196 of 200 (98%). `topic` copies it on 70% of
        // rows and is `x` on the others, which go with `1` on 30 of 60: 85%, below 90%. `note`
        // has a value per row (not checked); column 1 has no name.
        let mut csv = String::from(",text,votes,topic,note,label\n");
        for row in 0..200 {
            let label = ["0", "1", "1", "2"][row % 4];
            let votes = if row < 8 { "9" } else { label };
            let topic = if row % 10 < 7 { label } else { "x" };
            csv.push_str(&format!(
                "{row},words {row},{votes},{topic},n{row},{label}\n"
            ));
        }
        let shape = shape_of(&csv);
        assert_eq!(shape.inputs, ["text", "topic", "note"]);
        let left: Vec<String> = shape.left_out.iter().map(LeftOut::summary).collect();
        assert_eq!(
            left,
            [
                "column 1 (no name)",
                "votes (gives the answer on 98% of rows)"
            ]
        );
        let (unused, labels) = notes(&shape);
        assert!(
            unused.contains("(they look like ids): column 1 (no name).\n"),
            "{unused}"
        );
        assert!(
            unused.contains("inputs: votes (98%).\n# Alone, each one's values give the label")
                && unused.contains("(always the\n# commonest label: 50%)"),
            "{unused}"
        );
        assert!(labels.contains("The labels are numbers"), "{labels}");

        // Words for labels need no such note; a column that is all ids is kept when nothing else is.
        let shape = shape_of("id,label\n1,yes\n2,no\n3,yes\n4,no\n5,yes\n6,no\n");
        assert_eq!(shape.inputs, ["id"]);
        assert!(shape.left_out.is_empty());
        assert!(!notes(&shape).1.contains("numbers"));
    }

    #[test]
    fn a_large_file_holds_out_a_bounded_count_and_a_small_one_the_rest() {
        let table = |rows: usize| {
            let mut csv = String::from("text,label\n");
            for row in 0..rows {
                csv.push_str(&format!("words {row},{}\n", ["a", "b"][row % 2]));
            }
            let shape = shape_of(&csv);
            let split = splits(shape.rows).unwrap();
            dataset_table(&shape, Path::new("/d.csv"), Path::new("/e.toml"), "", split)
        };
        let small = table(240);
        assert!(small.contains("holdout = \"rest\""), "{small}");
        let large = table(MAX_HOLDOUT + 80);
        assert!(
            large.contains("pareto = 40\nholdout = \"rest\""),
            "400 rows left: {large}"
        );
        // Rows beyond 480 judge candidates, up to 80 of them; the holdout stays 400.
        let large = table(MAX_HOLDOUT + 100);
        assert!(large.contains("pareto = 60\nholdout = \"rest\""), "{large}");
        let large = table(MAX_HOLDOUT + 121);
        assert!(
            large.contains(&format!("pareto = 80\nholdout = {MAX_HOLDOUT}\n")),
            "{large}"
        );
        assert!(
            large.contains("and 400 of the 401 others are held out"),
            "{large}"
        );
    }

    #[test]
    fn names_titles_and_paths() {
        assert_eq!(name_of("My Tickets (2024)"), "my-tickets--2024-");
        assert_eq!(title("review_text"), "Review text");
        assert_eq!(
            relative_to(Path::new("/a/data/x.csv"), Path::new("/a/exp")),
            PathBuf::from("../data/x.csv")
        );
        assert_eq!(quoted("a \"b\"\n\\"), "\"a \\\"b\\\"\\n\\\\\"");
    }
}
