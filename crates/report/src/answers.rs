//! The replay's answers as the report holds them, whatever the holdout's size: one compact
//! [`Answer`] per record of `replay.csv`, sorted by (variant, prompt version, model), row and
//! sample, in memory while they fit in one chunk and in a temporary file beyond
//! ([`sorted`]), so that a million-row holdout takes no more memory than a hundred-thousand-row
//! one. Each (variant, prompt version, model) reads its answers row by row ([`Rows`]), and
//! several walk together in row order ([`walk`]).
//!
//! What an answer says (its inputs, expected value, output, feedback and error) stays in the
//! file. The statistics need only its row, sample and score, whether it was answered, a hash of
//! its output to tell equal answers apart, and its expected value where that may be a label. The
//! report reads whole records again only for the rows it shows ([`Texts`]).
//!
//! The totals of each version and model ([`VersionTotals`]) are counted as records are added, in
//! the same pass.
use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};

use gepa_lab_store::{ReplayAnswer, ReplayOf, ReplayRow, Version};

use super::tables::VersionTotals;

mod sorted;

pub(super) use sorted::read_exact_at;
use sorted::{Cursor, Keyed, Sorter, Store};

// The longest expected value, in characters, that can be a label: the engine's rule,
// `gepa_lab_engine::is_label_set`.
use gepa_lab_engine::LABEL_CHARS;

/// One answer of the replay, without its text.
#[derive(Debug, Clone, Copy)]
pub struct Answer {
    pub(super) row: u32,
    pub(super) sample: u32,
    /// Its 0-based record in `replay.csv`.
    pub(super) record: u32,
    /// Its variant's [`ExpectedValues`] id, or [`NOT_KEPT`].
    expected: u32,
    /// Meaningful only when answered.
    pub(super) score: f64,
    /// A hash of the output trimmed of white space at its ends: equal hashes, equal answers.
    pub(super) output: u64,
    pub(super) answered: bool,
}

// The size the module's documentation and the README promise.
const _: () = assert!(std::mem::size_of::<Answer>() == 40);

/// The expected value of an answer whose value was not kept (see [`ExpectedValues`]).
const NOT_KEPT: u32 = u32::MAX;

impl Answer {
    pub fn row(&self) -> usize {
        self.row as usize
    }

    /// The score, when answered.
    pub fn score(&self) -> Option<f64> {
        self.answered.then_some(self.score)
    }
}

/// The distinct expected values of one variant's answers that could be labels: trimmed, at most
/// [`LABEL_CHARS`] characters, and at most [`KEPT_VALUES`] of them. A classification has at
/// most [`MAX_LABELS`](gepa_lab_engine::MAX_LABELS) labels (told apart by case at most), so a
/// variant with more values, or a longer one, is never read as one.
#[derive(Debug, Default)]
struct ExpectedValues {
    ids: HashMap<String, u32>,
    values: Vec<String>,
}

/// The most distinct expected values kept per variant.
const KEPT_VALUES: usize = 1024;

impl ExpectedValues {
    fn id(&mut self, value: &str) -> u32 {
        let value = value.trim();
        if let Some(&id) = self.ids.get(value) {
            return id;
        }
        if self.values.len() >= KEPT_VALUES || value.chars().count() > LABEL_CHARS {
            return NOT_KEPT;
        }
        let id = self.values.len() as u32;
        self.ids.insert(value.to_owned(), id);
        self.values.push(value.to_owned());
        id
    }
}

/// What a group's answers add up to without their rows: the parts of [`VersionTotals`] that do
/// not need the rows.
#[derive(Debug, Default, Clone)]
struct Tally {
    asked: u32,
    answered: u32,
    latency_sum: u128,
    latency_max: Option<u64>,
    waited_sum: u128,
    waited: u32,
    prompt_tokens: u64,
    completion_tokens: u64,
    fallbacks: u32,
}

impl Tally {
    fn add(&mut self, row: &ReplayAnswer<'_>) {
        self.asked += 1;
        if !row.error.is_empty() {
            return;
        }
        self.answered += 1;
        self.latency_sum += u128::from(row.latency_ms);
        self.latency_max = self.latency_max.max(Some(row.latency_ms));
        if let Some(waited) = row.waited_ms {
            self.waited_sum += u128::from(waited);
            self.waited += 1;
        }
        self.prompt_tokens += u64::from(row.prompt_tokens);
        self.completion_tokens += u64::from(row.completion_tokens);
        if row.answered_by != row.model {
            self.fallbacks += 1;
        }
    }
}

/// The answers of one (variant, prompt version or file, model).
#[derive(Debug)]
struct Group {
    variant: String,
    of: ReplayOf,
    model: String,
    /// Its answers, and the position of the first in the sorted answers (the groups lie one
    /// after the other, in the order first seen).
    count: u64,
    start: u64,
    tally: Tally,
}

/// The replay's answers, being read in file order; [`TableBuilder::finish`] sorts them.
#[derive(Debug, Default)]
pub struct TableBuilder {
    sorter: Sorter,
    records: u32,
    groups: Vec<Group>,
    /// Each group by variant, then model, then what it answers for: looked up by the record's
    /// borrowed texts, without allocating.
    index: GroupIndex,
    expected: HashMap<String, ExpectedValues>,
}

/// Groups by variant, then model, then (a short list) what they answer for.
type GroupIndex = HashMap<String, HashMap<String, Vec<(ReplayOf, usize)>>>;

/// A record the table cannot hold, by 0-based record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    pub record: usize,
    pub message: String,
}

/// Why the table could not be built: a record it cannot hold, or a temporary file that could
/// not be written or read.
#[derive(Debug)]
pub enum TableError {
    Refused(Refused),
    Disk(std::io::Error),
}

impl TableError {
    /// The report's error: a refused record of `path` (the file read), or the temporary
    /// directory that could not be written or read.
    pub fn at(self, path: &std::path::Path) -> super::ReportError {
        match self {
            Self::Refused(refused) => {
                super::ReportError::record(path, refused.record, refused.message)
            }
            Self::Disk(source) => super::ReportError::temp_file(source),
        }
    }
}

impl From<Refused> for TableError {
    fn from(refused: Refused) -> Self {
        Self::Refused(refused)
    }
}

impl From<std::io::Error> for TableError {
    fn from(err: std::io::Error) -> Self {
        Self::Disk(err)
    }
}

impl TableBuilder {
    /// Adds the next record of the file.
    pub fn push(&mut self, row: &ReplayAnswer<'_>) -> Result<(), TableError> {
        let record = self.records;
        let refuse = |message: String| Refused {
            record: record as usize,
            message,
        };
        if record == u32::MAX {
            return Err(refuse("more than 4,294,967,294 answers in one report".into()).into());
        }
        let row_number = u32::try_from(row.row)
            .map_err(|_| refuse(format!("row {} is beyond the 32-bit row numbers", row.row)))?;
        let found = lookup(&self.index, row.variant, row.model, &row.version);
        let group = match found {
            Some(group) => group,
            None => {
                self.groups.push(Group {
                    variant: row.variant.to_owned(),
                    of: row.version.clone(),
                    model: row.model.to_owned(),
                    count: 0,
                    start: 0,
                    tally: Tally::default(),
                });
                let group = self.groups.len() - 1;
                self.index
                    .entry(row.variant.to_owned())
                    .or_default()
                    .entry(row.model.to_owned())
                    .or_default()
                    .push((row.version.clone(), group));
                group
            }
        };
        let expected = match self.expected.get_mut(row.variant) {
            Some(values) => values.id(row.expected),
            None => self
                .expected
                .entry(row.variant.to_owned())
                .or_default()
                .id(row.expected),
        };
        self.sorter.push(Keyed {
            group: group as u32,
            answer: Answer {
                row: row_number,
                sample: row.sample,
                record,
                expected,
                score: row.score,
                output: output_hash(row.output),
                answered: row.error.is_empty(),
            },
        })?;
        let group = &mut self.groups[group];
        group.count += 1;
        group.tally.add(row);
        self.records += 1;
        Ok(())
    }

    /// Sorts the answers by group, row and sample. Refuses a table where one group answers a
    /// row's sample twice, naming the later of the two records that comes first in the file.
    pub fn finish(mut self) -> Result<ReplayTable, TableError> {
        // The repeated record that comes first in the file, with its group.
        let mut twice: Option<(Answer, u32)> = None;
        let mut previous: Option<Keyed> = None;
        let sorted = self.sorter.finish(|keyed| {
            if let Some(before) = previous
                && (before.group, before.answer.row, before.answer.sample)
                    == (keyed.group, keyed.answer.row, keyed.answer.sample)
                && twice.is_none_or(|(t, _)| keyed.answer.record < t.record)
            {
                twice = Some((keyed.answer, keyed.group));
            }
            previous = Some(*keyed);
        })?;
        if let Some((answer, group)) = twice {
            let group = &self.groups[group as usize];
            return Err(Refused {
                record: answer.record as usize,
                message: format!(
                    "row {} (sample {}) of version {:?} on model {:?} is answered twice",
                    answer.row,
                    answer.sample,
                    group.of.to_string(),
                    group.model
                ),
            }
            .into());
        }
        let mut start = 0;
        for group in &mut self.groups {
            group.start = start;
            start += group.count;
        }
        Ok(ReplayTable {
            store: Store::new(sorted),
            groups: self.groups,
            index: self.index,
            expected: self.expected,
        })
    }
}

/// The group of (variant, model, what it answers for), if there is one yet.
fn lookup(index: &GroupIndex, variant: &str, model: &str, of: &ReplayOf) -> Option<usize> {
    let groups = index.get(variant)?.get(model)?;
    groups
        .iter()
        .find(|(seen, _)| seen == of)
        .map(|&(_, group)| group)
}

/// A hash of an answer trimmed of white space at its ends.
fn output_hash(output: &str) -> u64 {
    let mut hasher = DefaultHasher::new();
    output.trim().hash(&mut hasher);
    hasher.finish()
}

/// The replay's answers, each group's sorted by row and sample.
#[derive(Debug)]
pub struct ReplayTable {
    store: Store,
    groups: Vec<Group>,
    index: GroupIndex,
    expected: HashMap<String, ExpectedValues>,
}

impl ReplayTable {
    /// The table of records held in memory (a comparison of prompt files, a test).
    pub fn of<'a>(rows: impl IntoIterator<Item = &'a ReplayRow>) -> Result<Self, TableError> {
        let mut table = TableBuilder::default();
        for row in rows {
            table.push(&row.answer())?;
        }
        table.finish()
    }

    /// The answers of `of` on `model` in `variant`, by row; none when it gave none.
    pub fn rows(&self, variant: &str, of: &ReplayOf, model: &str) -> Option<Rows<'_>> {
        let group = lookup(&self.index, variant, model, of)?;
        Some(self.rows_of(&self.groups[group]))
    }

    /// The answers of a run's `version` on `model` in `variant`, by row.
    pub fn version(&self, variant: &str, version: Version, model: &str) -> Option<Rows<'_>> {
        self.rows(variant, &ReplayOf::Version(version), model)
    }

    fn rows_of(&self, group: &Group) -> Rows<'_> {
        Rows {
            store: &self.store,
            start: group.start,
            end: group.start + group.count,
        }
    }

    /// An answer's expected value, when its variant kept it (see [`ExpectedValues`]): trimmed.
    pub fn expected(&self, variant: &str, answer: &Answer) -> Option<&str> {
        let values = self.expected.get(variant)?;
        values
            .values
            .get(answer.expected as usize)
            .map(String::as_str)
    }

    /// Fails with the first error met reading the sorted answers back from their temporary
    /// file, if any: every [`Rows`] read after it ended early, so nothing built from them may be
    /// shown. Every user of a table calls it once it has read what it needs.
    pub fn check(&self) -> Result<(), super::ReportError> {
        match self.store.failure() {
            Some(source) => Err(super::ReportError::temp_file(source)),
            None => Ok(()),
        }
    }

    /// Totals per (variant, version, model) of a run's versions, sorted by those keys as the
    /// files spell them.
    pub fn version_totals(&self) -> Vec<VersionTotals> {
        let mut totals: Vec<VersionTotals> = self
            .groups
            .iter()
            .filter_map(|group| {
                let version = group.of.version()?;
                let rows = self.rows_of(group);
                let (mut row_count, mut samples, mut scored) = (0u32, 0u32, 0);
                let mut score_sum = CompensatedSum::default();
                for (_, answers) in rows.iter() {
                    row_count += 1;
                    samples = samples.max(answers.asked() as u32);
                    if let Some(score) = answers.score() {
                        scored += 1;
                        score_sum.add(score);
                    }
                }
                let t = &group.tally;
                let mean = |sum: f64, n: u32| (n > 0).then(|| sum / f64::from(n));
                Some(VersionTotals {
                    variant: group.variant.clone(),
                    version,
                    model: group.model.clone(),
                    rows: row_count,
                    samples,
                    asked: t.asked,
                    answered: t.answered,
                    errors: t.asked - t.answered,
                    mean_score: mean(score_sum.total(), scored),
                    mean_latency_ms: mean(t.latency_sum as f64, t.answered),
                    max_latency_ms: t.latency_max,
                    mean_waited_ms: mean(t.waited_sum as f64, t.waited),
                    mean_prompt_tokens: mean(t.prompt_tokens as f64, t.answered),
                    mean_completion_tokens: mean(t.completion_tokens as f64, t.answered),
                    fallbacks: t.fallbacks,
                })
            })
            .collect();
        totals.sort_by(|a, b| {
            (&a.variant, a.version.to_string(), &a.model).cmp(&(
                &b.variant,
                b.version.to_string(),
                &b.model,
            ))
        });
        totals
    }
}

/// A sum of floats that carries the rounding error of each addition (Neumaier's variant of
/// Kahan summation), so that a mean over a million rows is the mean of its values, not of their
/// running rounding: 0.62, not 0.6199999999999992.
#[derive(Debug, Default, Clone, Copy)]
struct CompensatedSum {
    sum: f64,
    carried: f64,
}

impl CompensatedSum {
    fn add(&mut self, value: f64) {
        let sum = self.sum + value;
        self.carried += if self.sum.abs() >= value.abs() {
            (self.sum - sum) + value
        } else {
            (value - sum) + self.sum
        };
        self.sum = sum;
    }

    fn total(self) -> f64 {
        self.sum + self.carried
    }
}

/// The answers of one version (or prompt file) on one model, by row: each row's samples
/// together, rows in order. Read from the table each time they are walked.
#[derive(Debug, Clone, Copy)]
pub struct Rows<'a> {
    store: &'a Store,
    /// Positions of its answers in the store, sorted by row and sample.
    start: u64,
    end: u64,
}

impl<'a> Rows<'a> {
    /// Each row with its answers, in row order.
    pub fn iter(self) -> RowIter<'a> {
        RowIter {
            answers: self.store.cursor(self.start..self.end),
        }
    }

    /// Each row's answers, in row order.
    pub fn values(self) -> impl Iterator<Item = RowAnswers> + 'a {
        self.iter().map(|(_, answers)| answers)
    }

    /// The answers to `row`, if any: found by bisection, reading a few answers.
    pub fn get(&self, row: usize) -> Option<RowAnswers> {
        let row = u32::try_from(row).ok()?;
        // The first position whose row is not below `row`.
        let (mut low, mut high) = (self.start, self.end);
        while low < high {
            let middle = low + (high - low) / 2;
            if self.store.get(middle)?.row < row {
                low = middle + 1;
            } else {
                high = middle;
            }
        }
        let (found, answers) = RowIter {
            answers: self.store.cursor(low..self.end),
        }
        .next()?;
        (found == row as usize).then_some(answers)
    }
}

/// The rows of a [`Rows`], in order, each with its answers.
#[derive(Debug)]
pub struct RowIter<'a> {
    answers: Cursor<'a>,
}

impl Iterator for RowIter<'_> {
    type Item = (usize, RowAnswers);

    fn next(&mut self) -> Option<Self::Item> {
        let first = self.answers.next()?;
        let mut answers = RowAnswers::one(first);
        while let Some(next) = self.answers.peek() {
            if next.row != first.row {
                break;
            }
            let next = *next;
            self.answers.next();
            answers.push(next);
        }
        Some((first.row(), answers))
    }
}

/// Several versions' answers walked together in row order: each row that any of them answered
/// (or failed), with each one's answers to it, `None` where it has none (or no answers at all).
pub fn walk<'a>(
    versions: &[Option<Rows<'a>>],
) -> impl Iterator<Item = (usize, Vec<Option<RowAnswers>>)> + 'a {
    let mut walks: Vec<_> = versions
        .iter()
        .map(|rows| rows.map(Rows::iter).into_iter().flatten().peekable())
        .collect();
    std::iter::from_fn(move || {
        let row = walks
            .iter_mut()
            .filter_map(|walk| walk.peek().map(|(row, _)| *row))
            .min()?;
        let answers = walks
            .iter_mut()
            .map(|walk| walk.next_if(|(r, _)| *r == row).map(|(_, a)| a))
            .collect();
        Some((row, answers))
    })
}

/// Whole records of `replay.csv`, by 0-based record: those of the rows a report shows, read
/// again from the file, or every record of a replay held in memory.
#[derive(Debug)]
pub enum Texts<'a> {
    Read(HashMap<u32, ReplayRow>),
    All(&'a [ReplayRow]),
}

impl Texts<'_> {
    pub fn get(&self, record: u32) -> Option<&ReplayRow> {
        match self {
            Self::Read(records) => records.get(&record),
            Self::All(rows) => rows.get(record as usize),
        }
    }
}

/// The answers one version gave to one row on one model, in sample order.
#[derive(Debug, Clone)]
pub struct RowAnswers {
    samples: Samples,
}

/// A row's answers: nearly always one, so that one needs no allocation.
#[derive(Debug, Clone)]
enum Samples {
    One(Answer),
    Many(Vec<Answer>),
}

impl RowAnswers {
    pub(super) fn one(answer: Answer) -> Self {
        Self {
            samples: Samples::One(answer),
        }
    }

    /// Adds the next sample.
    pub(super) fn push(&mut self, answer: Answer) {
        match &mut self.samples {
            Samples::One(first) => self.samples = Samples::Many(vec![*first, answer]),
            Samples::Many(all) => all.push(answer),
        }
    }

    fn all(&self) -> &[Answer] {
        match &self.samples {
            Samples::One(answer) => std::slice::from_ref(answer),
            Samples::Many(all) => all,
        }
    }

    /// Every sample's record in `replay.csv` with its answer, in sample order.
    pub fn samples(&self) -> impl Iterator<Item = (u32, &Answer)> {
        self.all().iter().map(|answer| (answer.record, answer))
    }

    /// Answered samples: those without an error.
    pub fn answered(&self) -> impl Iterator<Item = (u32, &Answer)> {
        self.samples().filter(|(_, a)| a.answered)
    }

    /// The row's score: the mean of its answered samples; none when every one failed.
    pub fn score(&self) -> Option<f64> {
        let (sum, n) = self
            .answered()
            .fold((0.0, 0usize), |(sum, n), (_, a)| (sum + a.score, n + 1));
        (n > 0).then(|| sum / n as f64)
    }

    /// The record of the sample whose inputs, expected output, model and error a table shows:
    /// the first answered one, else the first.
    pub fn shown(&self) -> u32 {
        self.first().record
    }

    /// The shown sample's answer (see [`Self::shown`]).
    pub fn first(&self) -> &Answer {
        self.answered()
            .next()
            .map_or(&self.all()[0], |(_, answer)| answer)
    }

    /// The record whose answer a table shows: the row's one answer, or with repeats its most
    /// common one (ties to the one given first), since the score beside it is the mean of all
    /// of them.
    pub fn output_record(&self) -> u32 {
        if self.all().len() < 2 {
            return self.shown();
        }
        self.distinct()
            .first()
            .map_or(self.shown(), |&(record, _)| record)
    }

    /// The answer a table shows (see [`Self::output_record`]); trimmed with repeats, where
    /// answers are compared trimmed. Empty when `texts` lacks the record.
    pub fn output<'t>(&self, texts: &'t Texts<'_>) -> &'t str {
        let output = texts
            .get(self.output_record())
            .map_or("", |r| r.output.as_str());
        if self.all().len() < 2 {
            output
        } else {
            output.trim()
        }
    }

    /// The shown sample's whole record, when `texts` holds it.
    pub fn shown_row<'t>(&self, texts: &'t Texts<'_>) -> Option<&'t ReplayRow> {
        texts.get(self.shown())
    }

    /// The scorer's feedback on the row's one answer; empty with repeats, where each answer
    /// has its own and the summary lists them.
    pub fn feedback<'t>(&self, texts: &'t Texts<'_>) -> &'t str {
        match self.shown_row(texts) {
            Some(row) if self.all().len() < 2 => &row.feedback,
            _ => "",
        }
    }

    /// Samples asked for this row.
    pub fn asked(&self) -> usize {
        self.all().len()
    }

    /// The share of answered samples that gave the most common answer (answers compared after
    /// trimming white space); none with fewer than two answered samples.
    pub fn agreement(&self) -> Option<f64> {
        let answers = self.distinct();
        let total: usize = answers.iter().map(|(_, n)| n).sum();
        (total >= 2).then(|| answers[0].1 as f64 / total as f64)
    }

    /// Whether every answered sample got the same score; none with fewer than two answered.
    /// Answers that differ only where the scorer does not look (case, say) agree here.
    pub fn same_score(&self) -> Option<bool> {
        let mut scores = self.answered().map(|(_, a)| a.score);
        let first = scores.next()?;
        let mut count = 1;
        let mut same = true;
        for score in scores {
            count += 1;
            same &= score == first;
        }
        (count >= 2).then_some(same)
    }

    /// Each distinct answer, as the record that first gave it, and how many samples gave it,
    /// most common first (ties by first seen).
    fn distinct(&self) -> Vec<(u32, usize)> {
        let mut counts: Vec<(u32, u64, usize)> = Vec::new();
        for (record, answer) in self.answered() {
            match counts
                .iter_mut()
                .find(|(_, seen, _)| *seen == answer.output)
            {
                Some((_, _, n)) => *n += 1,
                None => counts.push((record, answer.output, 1)),
            }
        }
        // Stable: equal counts keep the order they were first seen in.
        counts.sort_by_key(|&(_, _, n)| std::cmp::Reverse(n));
        counts
            .into_iter()
            .map(|(record, _, n)| (record, n))
            .collect()
    }

    /// One line on the repeats of this row, for the row tables: how many answers, which ones,
    /// how many failed. None for a row answered once.
    pub fn summary(&self, texts: &Texts<'_>) -> Option<String> {
        if self.all().len() < 2 {
            return None;
        }
        const SHOWN: usize = 3;
        const LONGEST: usize = 40;
        let answers = self.distinct();
        let answered: usize = answers.iter().map(|(_, n)| n).sum();
        let mut text = format!(
            "{answered} of {} answers: {} distinct",
            self.all().len(),
            answers.len()
        );
        if !answers.is_empty() {
            let each: Vec<String> = answers
                .iter()
                .take(SHOWN)
                .map(|&(record, n)| {
                    let answer = texts.get(record).map_or("", |r| r.output.trim());
                    let short: String = answer.chars().take(LONGEST).collect();
                    let cut = if short.len() < answer.len() {
                        "…"
                    } else {
                        ""
                    };
                    format!("\u{201c}{short}{cut}\u{201d} ×{n}")
                })
                .collect();
            text.push_str(&format!(" ({}", each.join(", ")));
            if answers.len() > SHOWN {
                text.push_str(&format!(", {} more", answers.len() - SHOWN));
            }
            text.push(')');
        }
        Some(text)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    pub(crate) fn answer(version: &str, row: usize, sample: u32, score: f64) -> ReplayRow {
        ReplayRow {
            variant: "a".into(),
            version: ReplayOf::Version(version.parse().unwrap()),
            model: "m".into(),
            answered_by: if row == 3 { "n".into() } else { "m".into() },
            row,
            sample,
            inputs: BTreeMap::new(),
            expected: format!(" x{} ", row % 2),
            output: "x".into(),
            score,
            feedback: String::new(),
            latency_ms: 100 * row as u64,
            waited_ms: Some(1000 * row as u64),
            prompt_tokens: 10,
            completion_tokens: 2,
            node_id: String::new(),
            error: String::new(),
        }
    }

    #[test]
    fn totals_leave_errors_out_of_the_means() {
        let failed = ReplayRow {
            error: "timeout".into(),
            ..answer("seed", 3, 1, 0.0)
        };
        let rows = [
            answer("seed", 1, 1, 1.0),
            answer("seed", 2, 1, 0.0),
            failed,
            answer("g2", 1, 1, 1.0),
            answer("g2", 3, 1, 1.0),
        ];
        let totals = ReplayTable::of(&rows).unwrap().version_totals();
        assert_eq!(totals.len(), 2);
        assert_eq!(
            totals[0].version,
            Version::Generation(2),
            "g2 sorts before seed"
        );
        let seed = &totals[1];
        assert_eq!((seed.rows, seed.answered, seed.errors), (3, 2, 1));
        assert_eq!(seed.mean_score, Some(0.5));
        assert_eq!(seed.mean_latency_ms, Some(150.0));
        assert_eq!(seed.max_latency_ms, Some(200));
        assert_eq!(seed.mean_waited_ms, Some(1500.0), "kept apart from latency");
        assert_eq!(seed.fallbacks, 0, "the fallback row errored");
        let g2 = &totals[0];
        assert_eq!((g2.mean_score, g2.fallbacks), (Some(1.0), 1));
    }

    #[test]
    fn rows_group_samples_in_row_order_whatever_the_file_order() {
        let rows = [
            answer("seed", 5, 2, 1.0),
            answer("g1", 5, 1, 0.0),
            answer("seed", 2, 1, 0.0),
            answer("seed", 5, 1, 0.0),
            answer("seed", 9, 1, 1.0),
        ];
        let table = ReplayTable::of(&rows).unwrap();
        let seed = table
            .rows("a", &ReplayOf::Version(Version::Seed), "m")
            .unwrap();
        let order: Vec<(usize, usize)> = seed.iter().map(|(row, a)| (row, a.asked())).collect();
        assert_eq!(order, [(2, 1), (5, 2), (9, 1)]);
        assert_eq!(seed.get(5).unwrap().score(), Some(0.5));
        assert!(seed.get(3).is_none() && seed.get(10).is_none() && seed.get(1).is_none());
        assert!(
            table
                .rows("a", &ReplayOf::Version(Version::Seed), "other")
                .is_none()
        );
        let totals = table.version_totals();
        assert_eq!(
            (totals[1].rows, totals[1].samples, totals[1].asked),
            (3, 2, 4)
        );
    }

    #[test]
    fn a_long_sum_of_scores_carries_its_rounding() {
        let mut sum = CompensatedSum::default();
        let mut naive = 0.0;
        for _ in 0..100_000 {
            sum.add(0.1);
            naive += 0.1;
        }
        assert_eq!(sum.total(), 10_000.0);
        assert_ne!(naive, 10_000.0, "what the plain sum gives");
    }

    #[test]
    fn a_sample_answered_twice_is_refused_at_its_second_record() {
        let rows = [
            answer("seed", 1, 1, 1.0),
            answer("seed", 2, 1, 1.0),
            answer("g1", 1, 1, 1.0),
            answer("seed", 1, 1, 0.0),
            answer("seed", 2, 1, 0.0),
        ];
        let Err(TableError::Refused(refused)) = ReplayTable::of(&rows) else {
            panic!("refused")
        };
        assert_eq!(refused.record, 3);
        assert_eq!(
            refused.message,
            "row 1 (sample 1) of version \"seed\" on model \"m\" is answered twice"
        );
    }

    #[test]
    fn expected_values_are_kept_trimmed_and_only_while_they_could_be_labels() {
        let mut long = answer("seed", 7, 1, 1.0);
        long.expected = "y".repeat(LABEL_CHARS + 1);
        let rows = [answer("seed", 1, 1, 1.0), answer("seed", 2, 1, 1.0), long];
        let table = ReplayTable::of(&rows).unwrap();
        let seed = table
            .rows("a", &ReplayOf::Version(Version::Seed), "m")
            .unwrap();
        let expected: Vec<Option<&str>> = seed
            .values()
            .map(|a| table.expected("a", a.first()))
            .collect();
        assert_eq!(expected, [Some("x1"), Some("x0"), None]);
        let mut values = ExpectedValues::default();
        for i in 0..KEPT_VALUES {
            assert_eq!(values.id(&i.to_string()), i as u32);
        }
        assert_eq!(values.id("one more"), NOT_KEPT);
        assert_eq!(values.id("7"), 7, "values already kept keep their id");
    }

    #[test]
    fn a_table_beyond_one_chunk_reads_the_same_from_its_temporary_file() {
        // Two versions of 70,000 rows each, written in the file's chunked order (every row of a
        // chunk for the seed, then for g1), with row 5 answered twice by g1 near the end.
        let rows_per_version = 70_000usize;
        let mut rows = Vec::new();
        for chunk in (1..=rows_per_version).collect::<Vec<_>>().chunks(1024) {
            for version in ["seed", "g1"] {
                rows.extend(
                    chunk
                        .iter()
                        .map(|&row| answer(version, row, 1, (row % 2) as f64)),
                );
            }
        }
        assert!(rows.len() > sorted::CHUNK);
        let table = ReplayTable::of(&rows).unwrap();
        let seed = table.version("a", Version::Seed, "m").unwrap();
        let g1 = table.version("a", Version::Generation(1), "m").unwrap();
        let order: Vec<usize> = seed.iter().map(|(row, _)| row).collect();
        assert_eq!(order, (1..=rows_per_version).collect::<Vec<_>>());
        assert_eq!(g1.get(69_999).unwrap().score(), Some(1.0));
        assert!(g1.get(70_001).is_none() && g1.get(0).is_none());
        let walked: Vec<(usize, usize)> = walk(&[Some(seed), None, Some(g1)])
            .map(|(row, answers)| (row, answers.iter().flatten().count()))
            .take(3)
            .collect();
        assert_eq!(walked, [(1, 2), (2, 2), (3, 2)]);
        let totals = table.version_totals();
        assert_eq!((totals[0].rows, totals[0].mean_score), (70_000, Some(0.5)));
        assert!(table.check().is_ok());

        rows.push(answer("g1", 5, 1, 0.0));
        let Err(TableError::Refused(refused)) = ReplayTable::of(&rows) else {
            panic!("refused")
        };
        assert_eq!(
            refused.record,
            rows.len() - 1,
            "found across the merged runs"
        );
    }
}
