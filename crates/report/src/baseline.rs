//! Baselines for a classification replay. When the expected values of an execution's holdout
//! rows are a set of labels, the report says what always answering the most common label
//! would score (the majority baseline), how often each version gave each label, and which
//! versions score no better than that baseline or give one label to nearly every row: a gain over
//! a seed that answers `negative` to every row is no evidence of a good prompt.
//!
//! Everything here comes from the replay's answers and expected values, compared the way the
//! replay's scorer compares them ([`LabelRule`]); nothing else is read. It does not decide the
//! version scores themselves (`samples` and `answers` do) nor how they are shown (`context` and the
//! templates).
use serde::Serialize;

use gepa_lab_score::ScorerSpec;

use super::answers::{Answer, RowAnswers, Rows};
use super::format;
use super::stats::{PairedComparison, Pairs, Verdict};

// The engine's rule for a label set (`is_label_set`: at most `MAX_LABELS` distinct values,
// short, on two rows each on average), applied to the holdout rows.
use gepa_lab_engine::{MAX_LABELS, is_label_set};

// A row's label is kept in a byte, with one value for "no label".
const _: () = assert!(MAX_LABELS < u8::MAX as usize);

/// How the scorer compares an answer with the expected value, as far as labels go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Matching {
    /// `exact_match`: equal after trimming white space at the ends.
    Exact,
    /// `exact_match_ci`: equal after trimming, ignoring case. Also how answers are sorted into
    /// labels for scorers whose own comparison the report cannot repeat.
    IgnoreCase,
    /// `contains`: the answer contains the label, ignoring case. An answer that contains two
    /// labels counts as neither.
    Contains,
}

/// How a replay's expected values and answers are read as labels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LabelRule {
    pub matching: Matching,
    /// Whether the scorer gives 1 to an answer that matches the expected value and 0 otherwise,
    /// so that the score of always answering one label is known.
    pub scored: bool,
}

impl LabelRule {
    /// The rule for a scorer; none for a scorer that does not compare the answer with the
    /// expected value (`regex`, `json_schema`, `json_match`).
    pub fn of(scorer: &ScorerSpec) -> Option<Self> {
        let (matching, scored) = match scorer {
            ScorerSpec::ExactMatch => (Matching::Exact, true),
            ScorerSpec::ExactMatchCi => (Matching::IgnoreCase, true),
            ScorerSpec::Contains => (Matching::Contains, true),
            // They compare in their own way (tokens, a number, a model's grade, a program):
            // the labels can be counted, but what always answering one scores is not known.
            ScorerSpec::F1
            | ScorerSpec::Numeric { .. }
            | ScorerSpec::Judge
            | ScorerSpec::Command { .. } => (Matching::IgnoreCase, false),
            ScorerSpec::Regex { .. } | ScorerSpec::JsonSchema { .. } | ScorerSpec::JsonMatch => {
                return None;
            }
        };
        Some(Self { matching, scored })
    }

    /// A text as the scorer compares it.
    fn key(self, text: &str) -> String {
        match self.matching {
            Matching::Exact => text.trim().to_owned(),
            Matching::IgnoreCase | Matching::Contains => text.trim().to_lowercase(),
        }
    }

    /// Whether an answer (as a key) is right for an expected value (as a key).
    fn hits(self, answer: &str, expected: &str) -> bool {
        match self.matching {
            Matching::Exact | Matching::IgnoreCase => answer == expected,
            Matching::Contains => answer.contains(expected),
        }
    }
}

/// One label and how many rows it stands for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LabelCount {
    pub label: String,
    pub rows: usize,
}

/// The majority-label baseline of one execution's holdout rows.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Baseline {
    /// The label most rows expect; of labels with equal counts, the first in character order.
    pub label: String,
    /// Rows that expect it.
    pub rows: usize,
    /// Rows it is counted over: the holdout rows some version answered on some model.
    pub scored_rows: usize,
    /// Holdout rows of the plan that no version answered, left out.
    pub missing_rows: usize,
    /// What answering `label` on every one of `scored_rows` would score under `scorer`; none
    /// for a scorer that does not score an answer by matching it with the expected value.
    pub score: Option<f64>,
    pub scorer: String,
    pub matching: Matching,
    /// Other labels expected by as many rows as `label`.
    pub tied_with: Vec<String>,
    /// Every label with the rows that expect it, most expected first (ties in character order).
    pub labels: Vec<LabelCount>,
    /// The baseline in one sentence.
    pub sentence: String,
}

/// Where a version stands against always answering the majority label, on the rows it answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Standing {
    /// Its mean is at or below the baseline's.
    AtOrBelow,
    /// Its mean is above, but the paired test does not call the difference (not significant,
    /// or too few rows to test): it is not shown to be better than answering one label.
    NotShownAbove,
    /// Its mean is above, and the paired test calls the difference significant.
    Above,
}

impl Standing {
    /// The standing a comparison of the version (`b`) against the baseline (`a`) gives.
    fn of(against: &PairedComparison) -> Self {
        // Both are means over the same rows; the margin absorbs the rounding of the sums.
        if against.difference <= 1e-9 {
            Self::AtOrBelow
        } else if against.verdict == Verdict::Better {
            Self::Above
        } else {
            Self::NotShownAbove
        }
    }
}

/// How one version answered on one model, against the labels.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AnswerCounts {
    /// Every label with the answered rows that got it, most given first (ties in label order).
    /// With repeated answers a row counts once, as its most common label (ties to the one
    /// given first).
    pub labels: Vec<LabelCount>,
    /// Answered rows whose answer is none of the labels.
    pub other: usize,
    /// Rows with an answer, which the counts rest on.
    pub rows: usize,
    /// Rows asked that have no answer.
    pub missing: usize,
    /// The label given most often, when any was given.
    pub top: Option<LabelCount>,
    /// Its share of `rows`.
    pub top_share: Option<f64>,
    /// What always answering the baseline's label scores on the same rows; none when that score
    /// is not known (see [`Baseline::score`]).
    pub baseline_score: Option<f64>,
    /// The version against always answering the baseline's label, row by row on the same rows
    /// (`a` the baseline, `b` the version), by the test the report uses for any two versions;
    /// none when `baseline_score` is.
    pub against_baseline: Option<PairedComparison>,
    /// What that comparison says; none when `baseline_score` is.
    pub standing: Option<Standing>,
    /// [`Standing::Above`] in words, with the test; otherwise the standing is a caution.
    pub above_baseline: Option<String>,
    /// It gives one label to at least [`gepa_lab_score::ONE_ANSWER_PERCENT`]% of its answered
    /// rows.
    pub one_label: bool,
    /// The counts in words.
    pub text: String,
    /// What a reader should know beside the version's score: one clause per warning above.
    pub cautions: Vec<String>,
}

/// A label met in the expected values: its key, its rows, and how they spell it.
#[derive(Default)]
struct Seen {
    key: String,
    rows: usize,
    /// Each spelling with its rows, in the order first met (one, unless case differs).
    spellings: Vec<(String, usize)>,
}

impl Seen {
    fn add(&mut self, spelling: &str) {
        self.rows += 1;
        match self.spellings.iter_mut().find(|(seen, _)| seen == spelling) {
            Some((_, rows)) => *rows += 1,
            None => self.spellings.push((spelling.to_owned(), 1)),
        }
    }

    /// The commonest spelling; of equal counts, the first in character order.
    fn spelling(&self) -> String {
        self.spellings
            .iter()
            .max_by(|(a, a_rows), (b, b_rows)| a_rows.cmp(b_rows).then_with(|| b.cmp(a)))
            .map(|(text, _)| text.clone())
            .unwrap_or_default()
    }
}

/// An execution's holdout rows read as a classification.
#[derive(Debug, Clone)]
pub struct Classification {
    rule: LabelRule,
    /// Each label as the scorer compares it ([`LabelRule::key`]), sorted.
    labels: Vec<String>,
    /// Each label as the rows spell it (the commonest spelling of its expected values, trimmed;
    /// a tie to the first in character order), in the order of `labels`: what the report shows.
    /// Under `exact_match_ci` a file's `Flags` is shown as `Flags`, not as the key `flags`.
    shown: Vec<String>,
    /// The index in `labels` of the baseline's label.
    top: usize,
    baseline: Baseline,
}

impl Classification {
    /// Reads the expected values of the scored rows (one value per row) as labels: none when
    /// the scorer has no [`LabelRule`] or the values are not a label set (see [`MAX_LABELS`]).
    pub fn of<'a>(
        scorer: &ScorerSpec,
        expected: impl IntoIterator<Item = &'a str>,
        holdout_rows: usize,
    ) -> Option<Self> {
        let rule = LabelRule::of(scorer)?;
        // Labels (key, rows, each spelling with its rows) in the order first seen; more than
        // MAX_LABELS and it is no label set.
        let mut seen: Vec<Seen> = Vec::new();
        for value in expected {
            let key = rule.key(value);
            let at = match seen.iter().position(|label| label.key == key) {
                Some(at) => at,
                None if seen.len() == MAX_LABELS => return None,
                None => {
                    seen.push(Seen {
                        key,
                        ..Seen::default()
                    });
                    seen.len() - 1
                }
            };
            seen[at].add(value.trim());
        }
        seen.sort_by(|a, b| a.key.cmp(&b.key));
        let mut labels = Vec::with_capacity(seen.len());
        let mut shown = Vec::with_capacity(seen.len());
        let mut counts = Vec::with_capacity(seen.len());
        for label in seen {
            shown.push(label.spelling());
            labels.push(label.key);
            counts.push(label.rows);
        }
        let scored_rows: usize = counts.iter().sum();
        if !is_label_set(&labels, scored_rows) {
            return None;
        }
        let top = by_count(&counts)[0];
        let baseline = baseline(rule, (&labels, &shown), &counts, top, scorer, holdout_rows);
        Some(Self {
            rule,
            labels,
            shown,
            top,
            baseline,
        })
    }

    pub fn baseline(&self) -> &Baseline {
        &self.baseline
    }

    /// Which label an answer is; none when it is none of them (or, under `contains`, several).
    pub fn label_of(&self, answer: &str) -> Option<usize> {
        let answer = self.rule.key(answer);
        let mut found =
            (0..self.labels.len()).filter(|&i| self.rule.hits(&answer, &self.labels[i]));
        let first = found.next()?;
        found.next().is_none().then_some(first)
    }

    /// A row's label: its most common one over its answered samples (ties to the one given
    /// first); `Some(None)` for an answer that is no label, none when no sample was answered.
    fn row_label(&self, answers: &RowAnswers, labels: &Labels) -> Option<Option<usize>> {
        let mut tally: Vec<(Option<usize>, usize)> = Vec::new();
        for (record, _) in answers.answered() {
            let label = labels.get(record);
            match tally.iter_mut().find(|(seen, _)| *seen == label) {
                Some((_, n)) => *n += 1,
                None => tally.push((label, 1)),
            }
        }
        let mut best: Option<(Option<usize>, usize)> = None;
        for (label, n) in tally {
            if best.is_none_or(|(_, most)| n > most) {
                best = Some((label, n));
            }
        }
        best.map(|(label, _)| label)
    }

    /// The label an expected value is (every scored row's is one of them).
    fn expected_label(&self, value: &str) -> Option<usize> {
        self.labels.binary_search(&self.rule.key(value)).ok()
    }

    /// How one version answered on one model: its answers by row, each answer's label in
    /// `labels`, each row's expected value as `expected` gives it.
    pub fn answers<'e>(
        &self,
        rows: Rows<'_>,
        labels: &Labels,
        expected: impl Fn(&Answer) -> Option<&'e str>,
    ) -> AnswerCounts {
        let mut counts = vec![0usize; self.labels.len()];
        let mut other = 0;
        let mut asked = 0;
        let mut answered = 0;
        // Always answering the baseline's label (a) against the version (b), row by row.
        let mut against_baseline = Pairs::default();
        // Whether always answering the baseline's label is right for each label.
        let baseline_hits_label: Vec<bool> = self
            .labels
            .iter()
            .map(|label| self.rule.hits(&self.labels[self.top], label))
            .collect();
        for (_, answers) in rows.iter() {
            asked += 1;
            let (Some(score), Some(label)) = (answers.score(), self.row_label(&answers, labels))
            else {
                continue;
            };
            answered += 1;
            match label {
                Some(i) => counts[i] += 1,
                None => other += 1,
            }
            let baseline_hit = expected(answers.first())
                .and_then(|v| self.expected_label(v))
                .is_some_and(|label| baseline_hits_label[label]);
            against_baseline.push(f64::from(u8::from(baseline_hit)), score);
        }
        let labels = ranked(&self.shown, &counts);
        let top = labels.first().filter(|top| top.rows > 0).cloned();
        let against_baseline =
            (self.rule.scored && answered > 0).then(|| against_baseline.compare());
        let baseline_score = against_baseline.as_ref().map(|c| c.mean_a);
        let standing = against_baseline.as_ref().map(Standing::of);
        let one_label = top
            .as_ref()
            .is_some_and(|top| gepa_lab_score::answers_one_way(top.rows, answered));
        let mut cautions = Vec::new();
        let mut above_baseline = None;
        if let (Some(against), Some(standing)) = (&against_baseline, standing) {
            let text = self.against_baseline_text(against, standing, answered);
            match standing {
                Standing::Above => above_baseline = Some(text),
                Standing::AtOrBelow | Standing::NotShownAbove => cautions.push(text),
            }
        }
        if one_label && let Some(top) = &top {
            cautions.push(format!("answers {}", one_label_share(top, answered)));
        }
        AnswerCounts {
            text: answers_text(&labels, other, answered, asked - answered),
            missing: asked - answered,
            top_share: top.as_ref().map(|top| top.rows as f64 / answered as f64),
            top,
            labels,
            other,
            rows: answered,
            baseline_score,
            against_baseline,
            standing,
            above_baseline,
            one_label,
            cautions,
        }
    }
}

impl Classification {
    /// A version's score beside always answering the baseline's label on the same `rows`, in
    /// words: no higher, higher by no more than the test calls chance, or significantly higher.
    fn against_baseline_text(
        &self,
        against: &PairedComparison,
        standing: Standing,
        rows: usize,
    ) -> String {
        let always = format!("always answering {}", format::code(&self.baseline.label));
        let number = |value: f64| format::number(Some(value), 3);
        let test = || {
            format!(
                "{} {}",
                against.test.text(),
                format::p_phrase(against.p_value)
            )
        };
        let scores = format!(
            "({} against {} on the same {})",
            number(against.mean_b),
            number(against.mean_a),
            rows_text(rows)
        );
        match standing {
            Standing::AtOrBelow => format!(
                "scores no better than {always} ({} on the same {})",
                number(against.mean_a),
                rows_text(rows)
            ),
            Standing::NotShownAbove if against.verdict == Verdict::NotSignificant => {
                format!(
                    "scores above {always} {scores}, not significantly ({})",
                    test()
                )
            }
            Standing::NotShownAbove => {
                format!(
                    "scores above {always} {scores}, with {}",
                    against.verdict.text()
                )
            }
            Standing::Above => format!("scores significantly above {always} {scores}, {}", test()),
        }
    }
}

/// Each answer's label in its execution's [`Classification`], by record of `replay.csv`, read
/// in one pass over the file. An answer without a label (none of them, or not in a
/// classification) has none.
///
/// One byte a record: in memory up to [`LABELS_IN_MEMORY`] records, and beyond that in an
/// anonymous temporary file read back a block at a time, so that a million-row replay takes no
/// more memory than a small one. Records are set in file order.
#[derive(Debug, Default)]
pub struct Labels {
    /// The labels of records `0..memory.len()`, until they spill to `file`.
    memory: Vec<u8>,
    /// Every label set, once there are more than [`LABELS_IN_MEMORY`]; then `written` of them.
    file: Option<std::io::BufWriter<std::fs::File>>,
    written: u64,
    /// The block of the file last read: its first record and its labels.
    block: std::cell::RefCell<(u64, Vec<u8>)>,
    /// The first error met writing or reading the file; the report fails on it.
    failed: std::cell::RefCell<Option<std::io::Error>>,
}

/// Labels held in memory before they go to a temporary file: a megabyte.
const LABELS_IN_MEMORY: usize = 1 << 20;
/// Labels read from the file at a time.
const LABELS_BLOCK: usize = 1 << 16;

impl Labels {
    /// Stands for "no label": a classification has at most [`MAX_LABELS`].
    const NONE: u8 = u8::MAX;

    /// Sets the label of `record`, after every record set before it; records skipped have none.
    pub fn set(&mut self, record: u32, label: Option<usize>) {
        let label = label
            .and_then(|label| u8::try_from(label).ok())
            .unwrap_or(Self::NONE);
        let record = u64::from(record);
        let before = self.written + self.memory.len() as u64;
        if record < before {
            return;
        }
        self.memory
            .extend(std::iter::repeat_n(Self::NONE, (record - before) as usize));
        self.memory.push(label);
        if self.memory.len() > LABELS_IN_MEMORY
            && let Err(err) = self.spill()
        {
            self.fail(err);
        }
    }

    /// Appends the labels in memory to the file.
    fn spill(&mut self) -> std::io::Result<()> {
        use std::io::Write;
        let file = match &mut self.file {
            Some(file) => file,
            None => self
                .file
                .insert(std::io::BufWriter::new(tempfile::tempfile()?)),
        };
        file.write_all(&self.memory)?;
        self.written += self.memory.len() as u64;
        self.memory.clear();
        Ok(())
    }

    /// Ends the setting: what is left in memory goes to the file, if there is one.
    pub fn finish(&mut self) {
        if self.file.is_some() {
            let flushed = self.spill().and_then(|()| match &mut self.file {
                Some(file) => std::io::Write::flush(file),
                None => Ok(()),
            });
            if let Err(err) = flushed {
                self.fail(err);
            }
        }
    }

    fn fail(&self, err: std::io::Error) {
        self.failed.borrow_mut().get_or_insert(err);
    }

    /// The first error met writing or reading the temporary file, if any (taken).
    pub fn failure(&self) -> Option<std::io::Error> {
        self.failed.borrow_mut().take()
    }

    fn get(&self, record: u32) -> Option<usize> {
        let label = match &self.file {
            None => self.memory.get(record as usize).copied(),
            Some(file) => self.read(file.get_ref(), u64::from(record)),
        }?;
        (label != Self::NONE).then_some(usize::from(label))
    }

    /// A label from the file, through the block last read.
    fn read(&self, file: &std::fs::File, record: u64) -> Option<u8> {
        if record >= self.written {
            return None;
        }
        let mut block = self.block.borrow_mut();
        let (start, labels) = &mut *block;
        if record < *start || record >= *start + labels.len() as u64 {
            *start = record - record % LABELS_BLOCK as u64;
            let length = (self.written - *start).min(LABELS_BLOCK as u64) as usize;
            labels.resize(length, Self::NONE);
            if let Err(err) = super::answers::read_exact_at(file, labels, *start) {
                labels.clear();
                self.fail(err);
                return None;
            }
        }
        labels.get((record - *start) as usize).copied()
    }
}

/// The baseline of labels given as (keys, spellings), in the order of [`Classification`]'s;
/// `top_index` is the index of the commonest ([`by_count`]'s first, so a tie goes to the first
/// key in character order).
fn baseline(
    rule: LabelRule,
    (keys, shown): (&[String], &[String]),
    counts: &[usize],
    top_index: usize,
    scorer: &ScorerSpec,
    holdout_rows: usize,
) -> Baseline {
    let ranked = ranked(shown, counts);
    let top_key = &keys[top_index];
    let top = ranked[0].clone();
    let tied_with: Vec<String> = ranked[1..]
        .iter()
        .take_while(|l| l.rows == top.rows)
        .map(|l| l.label.clone())
        .collect();
    let scored_rows: usize = counts.iter().sum();
    let score = rule.scored.then(|| {
        let hits: usize = keys
            .iter()
            .zip(counts)
            .filter(|(label, _)| rule.hits(top_key, label))
            .map(|(_, rows)| rows)
            .sum();
        hits as f64 / scored_rows as f64
    });
    let missing_rows = holdout_rows.saturating_sub(scored_rows);
    let scorer = scorer.to_string();
    let scorer_code = format::code(&scorer);
    let label = format::code(&top.label);
    let mut sentence = match score {
        Some(score) => format!(
            "Always answering {label} would score {} under {scorer_code} on these {} ({} of them \
             expect it)",
            format::number(Some(score), 3),
            rows_text(scored_rows),
            top.rows
        ),
        None => format!(
            "The most common expected answer is {label} ({} of {}, {}%); {scorer_code} does not score \
             an answer by matching it with the expected one, so what always answering it would \
             score is not known",
            top.rows,
            rows_text(scored_rows),
            percent(top.rows, scored_rows)
        ),
    };
    if !tied_with.is_empty() {
        let mut tied: Vec<String> = vec![label.clone()];
        tied.extend(tied_with.iter().map(|l| format::code(l)));
        sentence.push_str(&format!(
            "; {} tie at {} rows each, and the tie goes to the first in character order",
            and_list(&tied),
            top.rows
        ));
    }
    if missing_rows > 0 {
        sentence.push_str(&format!(
            "; {missing_rows} of the {holdout_rows} holdout rows have no answer from any version \
             and are left out"
        ));
    }
    sentence.push('.');
    Baseline {
        label: top.label.clone(),
        rows: top.rows,
        scored_rows,
        missing_rows,
        score,
        scorer,
        matching: rule.matching,
        tied_with,
        labels: ranked,
        sentence,
    }
}

/// Labels with their counts, the largest count first; equal counts keep the labels' order.
fn ranked(labels: &[String], counts: &[usize]) -> Vec<LabelCount> {
    by_count(counts)
        .into_iter()
        .map(|i| LabelCount {
            label: labels[i].clone(),
            rows: counts[i],
        })
        .collect()
}

/// The indices of `counts`, the largest count first; equal counts keep their order.
fn by_count(counts: &[usize]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..counts.len()).collect();
    // Stable.
    order.sort_by_key(|&i| std::cmp::Reverse(counts[i]));
    order
}

/// `part` as a whole percentage of `whole`, rounded down, so that "90%" is never said of 89.5%.
/// The label a version gives to nearly every row, with its share of the `answered` rows:
/// "`1` to 100% of rows".
pub(crate) fn one_label_share(top: &LabelCount, answered: usize) -> String {
    format!(
        "{} to {}% of rows",
        format::code(&top.label),
        percent(top.rows, answered)
    )
}

fn percent(part: usize, whole: usize) -> usize {
    (part * 100).checked_div(whole).unwrap_or(0)
}

fn rows_text(rows: usize) -> String {
    if rows == 1 {
        "1 row".to_owned()
    } else {
        format!("{rows} rows")
    }
}

fn and_list(items: &[String]) -> String {
    match items {
        [] => String::new(),
        [one] => one.clone(),
        [init @ .., last] => format!("{} and {last}", init.join(", ")),
    }
}

/// The labels named in a version's answers, the commonest first; the rest are counted together
/// (a classification may have up to [`MAX_LABELS`]).
const NAMED_LABELS: usize = 8;

fn answers_text(labels: &[LabelCount], other: usize, answered: usize, missing: usize) -> String {
    let mut text = match labels.first().filter(|top| top.rows > 0) {
        None if answered == 0 => "answered no row".to_owned(),
        None => format!("answered none of the labels on {}", rows_text(answered)),
        Some(top) => {
            let mut text = format!(
                "answered {} to {} of {} ({}%)",
                format::code(&top.label),
                top.rows,
                rows_text(answered),
                percent(top.rows, answered)
            );
            let given: Vec<&LabelCount> = labels[1..].iter().filter(|l| l.rows > 0).collect();
            // One label left over is named: "1 other labels to 16" says no less in more words.
            let named = match given.len() {
                n if n == NAMED_LABELS => n,
                n => n.min(NAMED_LABELS - 1),
            };
            let (named, rest) = given.split_at(named);
            for label in named {
                text.push_str(&format!(
                    ", {} to {}",
                    format::code(&label.label),
                    label.rows
                ));
            }
            if !rest.is_empty() {
                let rows: usize = rest.iter().map(|l| l.rows).sum();
                text.push_str(&format!(", {} other labels to {rows}", rest.len()));
            }
            if other > 0 {
                text.push_str(&format!(", something else to {other}"));
            }
            text
        }
    };
    if missing > 0 {
        text.push_str(&format!("; no answer on {}", rows_text(missing)));
    }
    text
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::answers::ReplayTable;
    use gepa_lab_store::{ReplayOf, ReplayRow, Version};

    /// How the seed's answers in `replay` count against `c`.
    fn counted(c: &Classification, replay: &[ReplayRow]) -> AnswerCounts {
        let table = ReplayTable::of(replay).unwrap();
        let mut labels = Labels::default();
        for (record, row) in replay.iter().enumerate() {
            labels.set(record as u32, c.label_of(&row.output));
        }
        let rows = table.rows("", &ReplayOf::Version(Version::Seed), "m");
        c.answers(rows.unwrap(), &labels, |answer| table.expected("", answer))
    }

    fn answer(row: usize, sample: u32, expected: &str, output: &str, score: f64) -> ReplayRow {
        ReplayRow {
            variant: String::new(),
            version: ReplayOf::Version(Version::Seed),
            model: "m".into(),
            answered_by: "m".into(),
            row,
            sample,
            inputs: BTreeMap::new(),
            expected: expected.into(),
            output: output.into(),
            score,
            feedback: String::new(),
            latency_ms: 1,
            waited_ms: Some(0),
            prompt_tokens: 1,
            completion_tokens: 1,
            node_id: String::new(),
            error: String::new(),
        }
    }

    fn failed(row: usize, expected: &str) -> ReplayRow {
        ReplayRow {
            error: "timed out".into(),
            output: String::new(),
            ..answer(row, 1, expected, "", 0.0)
        }
    }

    /// Expected values, one per row.
    fn rows(expected: &[&'static str]) -> Vec<&'static str> {
        expected.to_vec()
    }

    fn classify(scorer: &str, expected: &[&'static str]) -> Option<Classification> {
        Classification::of(&scorer.parse().unwrap(), rows(expected), expected.len())
    }

    #[test]
    fn the_majority_label_and_what_always_answering_it_scores() {
        let expected = [
            "neutral", "Positive", "positive", "neutral", "negative", "neutral", "positive",
            "negative",
        ];
        // exact_match_ci: `Positive` and `positive` are one label, which ties with `neutral`.
        let c = classify("exact_match_ci", &expected).unwrap();
        let b = c.baseline();
        assert_eq!((b.label.as_str(), b.rows, b.scored_rows), ("neutral", 3, 8));
        assert_eq!(b.tied_with, ["positive"]);
        assert_eq!(b.score, Some(3.0 / 8.0));
        assert_eq!(b.missing_rows, 0);
        assert_eq!(
            b.sentence,
            "Always answering `neutral` would score 0.375 under `exact_match_ci` on these 8 rows (3 \
             of them expect it); `neutral` and `positive` tie at 3 rows each, and the tie goes to \
             the first in character order."
        );
        // The tie is broken the same way whatever order the rows come in.
        let mut reversed = rows(&expected);
        reversed.reverse();
        let again = Classification::of(&ScorerSpec::ExactMatchCi, reversed, 8).unwrap();
        assert_eq!(again.baseline(), b);

        // exact_match: `Positive` is a label of its own, and `neutral` wins alone.
        let b = classify("exact_match", &expected)
            .unwrap()
            .baseline()
            .clone();
        assert_eq!((b.label.as_str(), b.rows), ("neutral", 3));
        assert!(b.tied_with.is_empty());
        // Equal counts in character order (upper case before lower case).
        assert_eq!(
            b.labels
                .iter()
                .map(|l| (l.label.as_str(), l.rows))
                .collect::<Vec<_>>(),
            [
                ("neutral", 3),
                ("negative", 2),
                ("positive", 2),
                ("Positive", 1)
            ]
        );
    }

    /// Under `exact_match_ci` the report names a label as the rows spell it (their commonest
    /// spelling, whatever the rows' order), not as the lowercase key it compares.
    #[test]
    fn labels_are_shown_as_the_rows_spell_them() {
        let expected = [
            "People & Body",
            "Flags",
            "people & body",
            "People & Body",
            "Flags",
            "Objects",
        ];
        let c = classify("exact_match_ci", &expected).unwrap();
        let b = c.baseline();
        assert_eq!((b.label.as_str(), b.rows), ("People & Body", 3));
        assert!(
            b.sentence
                .starts_with("Always answering `People & Body` would score 0.500")
        );
        let mut reversed = rows(&expected);
        reversed.reverse();
        let again = Classification::of(&ScorerSpec::ExactMatchCi, reversed, 6).unwrap();
        assert_eq!(again.baseline(), b);
        let replay = [
            answer(1, 1, "People & Body", "people & body", 1.0),
            answer(2, 1, "Flags", "FLAGS", 1.0),
            answer(3, 1, "People & Body", "People & Body", 1.0),
        ];
        let counts = counted(&c, &replay);
        assert_eq!(
            counts.text,
            "answered `People & Body` to 2 of 3 rows (66%), `Flags` to 1"
        );
    }

    #[test]
    fn only_a_small_set_of_short_labels_is_a_classification() {
        // `n` labels on two rows each.
        let labels = |n: usize| {
            let names: Vec<String> = (0..n).map(|i| format!("intent_{i}")).collect();
            let rows = names.iter().chain(&names).map(String::as_str);
            Classification::of(&ScorerSpec::ExactMatch, rows, 2 * n)
        };
        assert!(labels(77).is_some(), "banking77");
        assert!(labels(MAX_LABELS).is_some());
        assert!(labels(MAX_LABELS + 1).is_none());
        // Free text: every row its own answer.
        assert!(classify("exact_match", &["one", "two", "three", "four"]).is_none());
        let long = "a label of more than sixty-four characters, which reads as a sentence";
        assert!(classify("exact_match", &[long, long, "b", "b"]).is_none());
        assert!(
            classify("exact_match", &["", "", "b", "b"]).is_none(),
            "empty"
        );
        // A scorer that does not read the expected value as an answer.
        assert!(classify("regex:^(yes|no)$", &["yes", "no", "yes", "no"]).is_none());
        assert!(classify("exact_match", &[]).is_none());
        assert!(classify("f1", &["yes", "no", "yes", "no"]).is_some());
    }

    #[test]
    fn the_answers_of_many_labels_name_the_commonest_and_count_the_rest() {
        // 20 labels, two rows each; the version answers `l00` to 20 rows of 210, `l01` to 19, ...
        let names: Vec<String> = (0..20).map(|i| format!("l{i:02}")).collect();
        let expected: Vec<&str> = names.iter().chain(&names).map(String::as_str).collect();
        let c = Classification::of(&ScorerSpec::ExactMatch, expected.iter().copied(), 40).unwrap();
        let replay: Vec<ReplayRow> = (0..20)
            .flat_map(|i| std::iter::repeat_n(i, i + 1))
            .enumerate()
            .map(|(row, i)| answer(row + 1, 1, &names[i], &names[19 - i], 0.0))
            .collect();
        let counts = counted(&c, &replay);
        assert_eq!(
            counts.text,
            "answered `l00` to 20 of 210 rows (9%), `l01` to 19, `l02` to 18, `l03` to 17, `l04` to \
             16, `l05` to 15, `l06` to 14, `l07` to 13, 12 other labels to 78"
        );
        // Nine labels given: the one past the eighth is named, not counted as "1 other labels".
        let few: Vec<ReplayRow> = (0..9)
            .flat_map(|i| std::iter::repeat_n(i, 9 - i))
            .enumerate()
            .map(|(row, i)| answer(row + 1, 1, &names[i], &names[i], 1.0))
            .collect();
        let text = counted(&c, &few).text;
        assert!(text.ends_with(", `l07` to 2, `l08` to 1"), "{text}");
    }

    #[test]
    fn answers_are_counted_as_the_scorer_compares_them() {
        let expected = ["positive", "negative", "negative", "negative"];
        let c = classify("exact_match_ci", &expected).unwrap();
        assert_eq!(c.baseline().label, "negative");
        let replay = [
            answer(1, 1, "positive", " Positive\n", 1.0),
            answer(2, 1, "negative", "NEGATIVE", 1.0),
            answer(3, 1, "negative", "The review is negative.", 0.0),
            failed(4, "negative"),
        ];
        let counts = counted(&c, &replay);
        assert_eq!((counts.rows, counts.missing, counts.other), (3, 1, 1));
        assert_eq!(
            counts.labels,
            [
                LabelCount {
                    label: "negative".into(),
                    rows: 1
                },
                LabelCount {
                    label: "positive".into(),
                    rows: 1
                }
            ],
            "a tie in label order"
        );
        assert_eq!(counts.top_share, Some(1.0 / 3.0));
        // Always `negative` on the three answered rows: rows 2 and 3, 2/3; the version's mean 2/3.
        assert_eq!(counts.baseline_score, Some(2.0 / 3.0));
        assert_eq!(counts.standing, Some(Standing::AtOrBelow));
        assert!(!counts.one_label);
        assert_eq!(
            counts.text,
            "answered `negative` to 1 of 3 rows (33%), `positive` to 1, something else to 1; no \
             answer on 1 row"
        );
        assert_eq!(
            counts.cautions,
            ["scores no better than always answering `negative` (0.667 on the same 3 rows)"]
        );

        // exact_match: case counts, so `NEGATIVE` is something else.
        let c = classify("exact_match", &expected).unwrap();
        let counts = counted(&c, &replay);
        assert_eq!(counts.other, 3, "{counts:?}");
        assert_eq!(counts.top, None);
        assert_eq!(
            counts.text,
            "answered none of the labels on 3 rows; no answer on 1 row"
        );
    }

    /// The answers of a version that answers `yes` to the first `yes` rows of `expected` and
    /// `no` to the rest, scored by exact match.
    fn yes_first(c: &Classification, expected: &[&str], yes: usize) -> AnswerCounts {
        let replay: Vec<ReplayRow> = expected
            .iter()
            .enumerate()
            .map(|(i, e)| {
                let output = if i < yes { "yes" } else { "no" };
                answer(i + 1, 1, e, output, f64::from(u8::from(output == *e)))
            })
            .collect();
        counted(c, &replay)
    }

    #[test]
    fn one_label_to_ninety_percent_of_rows_is_said_and_eighty_nine_is_not() {
        let expected: Vec<&'static str> =
            (0..20).map(|i| if i < 10 { "yes" } else { "no" }).collect();
        let c = classify("exact_match", &expected).unwrap();
        // `no` and `yes` tie at 10 rows: `no` first in character order.
        assert_eq!(c.baseline().label, "no");
        assert_eq!(c.baseline().score, Some(0.5));
        let version = |yes: usize| yes_first(&c, &expected, yes);
        // 18 of 20: 90%, scoring 0.6 against the baseline's 0.5: right where the baseline is
        // wrong on 10 rows, wrong where it is right on 8, which chance explains.
        let counts = version(18);
        assert!(counts.one_label);
        assert_eq!(counts.standing, Some(Standing::NotShownAbove));
        assert_eq!(
            counts.cautions,
            [
                "scores above always answering `no` (0.600 against 0.500 on the same 20 rows), \
                 not significantly (exact McNemar p = 0.815)",
                "answers `yes` to 90% of rows"
            ]
        );
        assert_eq!(
            counts.text,
            "answered `yes` to 18 of 20 rows (90%), `no` to 2"
        );
        // With 89.5% it says 89%, and no warning.
        let expected: Vec<&'static str> = (0..200)
            .map(|i| if i < 100 { "yes" } else { "no" })
            .collect();
        let c = classify("exact_match", &expected).unwrap();
        let replay: Vec<ReplayRow> = expected
            .iter()
            .enumerate()
            .map(|(i, e)| answer(i + 1, 1, e, if i < 179 { "yes" } else { "no" }, 0.0))
            .collect();
        let counts = counted(&c, &replay);
        assert!(!counts.one_label);
        assert!(
            counts
                .text
                .starts_with("answered `yes` to 179 of 200 rows (89%)")
        );
        // Every answer `yes`: both warnings.
        let counts = version(20);
        assert_eq!(
            counts.cautions,
            [
                "scores no better than always answering `no` (0.500 on the same 20 rows)",
                "answers `yes` to 100% of rows"
            ]
        );
    }

    #[test]
    fn repeated_answers_count_a_row_once_as_its_most_common_label() {
        let c = classify("exact_match_ci", &["a", "a", "b", "b"]).unwrap();
        let replay = [
            answer(1, 1, "a", "b", 0.0),
            answer(1, 2, "a", "A", 1.0),
            answer(1, 3, "a", "a", 1.0),
            // A tie between `b` and something else: the one given first.
            answer(2, 1, "a", "b", 0.0),
            answer(2, 2, "a", "maybe", 0.0),
            ReplayRow {
                error: "failed".into(),
                ..answer(3, 1, "b", "", 0.0)
            },
            answer(3, 2, "b", "b", 1.0),
        ];
        let counts = counted(&c, &replay);
        assert_eq!(counts.rows, 3);
        assert_eq!(counts.missing, 0, "row 3 has one answer");
        assert_eq!(
            counts
                .labels
                .iter()
                .map(|l| (l.label.as_str(), l.rows))
                .collect::<Vec<_>>(),
            [("b", 2), ("a", 1)]
        );
    }

    #[test]
    fn under_contains_an_answer_is_the_one_label_it_contains() {
        let c = classify(
            "contains",
            &["positive", "negative", "negative", "negative"],
        )
        .unwrap();
        let b = c.baseline();
        assert_eq!((b.label.as_str(), b.score), ("negative", Some(0.75)));
        let replay = [
            answer(1, 1, "positive", "The review is Positive.", 1.0),
            answer(2, 1, "negative", "negative, not positive", 1.0),
            answer(3, 1, "negative", "negative", 1.0),
            answer(4, 1, "negative", "unsure", 0.0),
        ];
        let counts = counted(&c, &replay);
        assert_eq!(
            counts
                .labels
                .iter()
                .map(|l| (l.label.as_str(), l.rows))
                .collect::<Vec<_>>(),
            [("negative", 1), ("positive", 1)]
        );
        assert_eq!(counts.other, 2, "two labels, or none");
        // Its 0.75 is what always answering `negative` scores on these rows.
        assert_eq!(counts.baseline_score, Some(0.75));
        assert_eq!(counts.standing, Some(Standing::AtOrBelow));
    }

    #[test]
    fn a_version_significantly_above_the_baseline_gets_no_caution_and_one_within_chance_does() {
        // 50 rows expect `yes`, 50 `no`: always `no` scores 0.5.
        let expected: Vec<&'static str> = (0..100)
            .map(|i| if i < 50 { "yes" } else { "no" })
            .collect();
        let c = classify("exact_match", &expected).unwrap();
        let version = |yes_rows: usize| yes_first(&c, &expected, yes_rows);
        // 0.8: right where the baseline is wrong on 50 rows, wrong where it is right on 20.
        let counts = version(70);
        let against = counts.against_baseline.as_ref().unwrap();
        assert_eq!((against.mean_a, against.mean_b), (0.5, 0.8));
        assert_eq!(
            (against.verdict, counts.standing),
            (Verdict::Better, Some(Standing::Above))
        );
        assert!(counts.cautions.is_empty(), "{:?}", counts.cautions);
        // 0.55: 50 rows against 45, within chance.
        let counts = version(95);
        assert_eq!(counts.standing, Some(Standing::NotShownAbove));
        assert_eq!(
            counts.cautions,
            [
                "scores above always answering `no` (0.550 against 0.500 on the same 100 rows), \
                 not significantly (exact McNemar p = 0.682)",
                "answers `yes` to 95% of rows"
            ]
        );
    }

    #[test]
    fn without_a_known_score_the_baseline_names_the_label_only() {
        let c = Classification::of(&ScorerSpec::F1, rows(&["yes", "yes", "yes", "no", "no"]), 7)
            .unwrap();
        let b = c.baseline();
        assert_eq!((b.label.as_str(), b.rows, b.score), ("yes", 3, None));
        assert_eq!(b.missing_rows, 2);
        assert_eq!(
            b.sentence,
            "The most common expected answer is `yes` (3 of 5 rows, 60%); `f1` does not score an \
             answer by matching it with the expected one, so what always answering it would score \
             is not known; 2 of the 7 holdout rows have no answer from any version and are left \
             out."
        );
        let replay = [answer(1, 1, "yes", "yes", 1.0)];
        let counts = counted(&c, &replay);
        assert_eq!(counts.baseline_score, None);
        assert_eq!((&counts.against_baseline, counts.standing), (&None, None));
        assert_eq!(counts.cautions, ["answers `yes` to 100% of rows"]);
    }

    #[test]
    fn labels_beyond_a_megabyte_go_to_a_file_and_read_back() {
        let mut labels = Labels::default();
        let records = LABELS_IN_MEMORY as u32 * 2 + 5;
        // Every third record has no label set: skipped.
        for record in (0..records).filter(|r| r % 3 != 0) {
            labels.set(record, Some(record as usize % 5));
        }
        labels.finish();
        assert!(labels.file.is_some() && labels.memory.is_empty());
        for record in [
            0,
            1,
            2,
            3,
            65_535,
            65_536,
            records / 2,
            records - 2,
            records - 1,
        ] {
            let expected = (record % 3 != 0).then_some(record as usize % 5);
            assert_eq!(labels.get(record), expected, "record {record}");
        }
        assert_eq!(labels.get(records), None, "beyond the last");
        assert!(labels.failure().is_none());
    }
}
