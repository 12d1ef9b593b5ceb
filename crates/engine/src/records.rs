//! What a run leaves behind and what it reports while it goes: candidates (the history), one
//! record per iteration, progress events, and why it stopped. All of it serialises, so the
//! caller can write it to the run directory as it comes.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::budget::Spent;
use super::costs::{Costs, Objectives};
use super::labels::FEW_LABELS;
use super::task::TaskError;
use gepa_lab_prompt::PartName;

/// A candidate in the pool: the seed (generation 0) or an accepted child. The caller turns these
/// into the evolution API's history records {generation, score, prompt}.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CandidateRecord {
    /// Order of acceptance: 0 is the seed, 1 the first accepted child, and so on. It is also the
    /// candidate's id in every other record.
    pub generation: usize,
    /// Mean score on the Pareto set.
    pub score: f64,
    pub prompt: String,
    /// Per Pareto example, in order: `pareto_scores[i]` is example `minibatch + i`.
    pub pareto_scores: Vec<f64>,
    /// Generations it was made from: none for the seed, one for a mutation, two for a merge.
    pub parents: Vec<usize>,
    /// The iteration that produced it; 0 for the seed.
    pub iteration: usize,
    /// Calls spent when it had been scored on the Pareto set.
    pub spent: Spent,
    /// Its mean cost per answer on the Pareto rows, when its answers there had costs (see
    /// [`Costs`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub costs: Option<Costs>,
}

/// One iteration: a reflective mutation or a merge attempt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum IterationRecord {
    Mutation(MutationRecord),
    Merge(MergeRecord),
}

/// What an iteration proposed, as the event log and the report name it: a reflective
/// `mutation`, a label `glossary`, a `layout` change, `demonstrations`, or a `merge` of two
/// lineages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProposalKind {
    Mutation,
    Glossary,
    Layout,
    Demonstrations,
    Merge,
}

impl ProposalKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Mutation => "mutation",
            Self::Glossary => "glossary",
            Self::Layout => "layout",
            Self::Demonstrations => "demonstrations",
            Self::Merge => "merge",
        }
    }
}

impl fmt::Display for ProposalKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl IterationRecord {
    /// 1-based index of the iteration.
    pub fn iteration(&self) -> usize {
        match self {
            Self::Mutation(record) => record.iteration,
            Self::Merge(record) => record.iteration,
        }
    }

    pub fn outcome(&self) -> &Outcome {
        match self {
            Self::Mutation(record) => &record.outcome,
            Self::Merge(record) => &record.outcome,
        }
    }

    /// Calls spent when the iteration ended.
    pub fn spent(&self) -> Spent {
        match self {
            Self::Mutation(record) => record.spent,
            Self::Merge(record) => record.spent,
        }
    }

    /// Calls and tokens the iteration spent.
    pub fn cost(&self) -> Spent {
        match self {
            Self::Mutation(record) => record.cost,
            Self::Merge(record) => record.cost,
        }
    }

    pub fn best(&self) -> Best {
        match self {
            Self::Mutation(record) => record.best,
            Self::Merge(record) => record.best,
        }
    }

    /// The candidates the proposal was made from.
    pub fn parents(&self) -> Vec<usize> {
        match self {
            Self::Mutation(record) => vec![record.parent],
            Self::Merge(record) => record.parents.to_vec(),
        }
    }

    /// What kind of proposal the iteration made.
    pub fn kind(&self) -> ProposalKind {
        match self {
            Self::Mutation(record) => match record.written_from {
                MutationKind::Reflection => ProposalKind::Mutation,
                MutationKind::Glossary => ProposalKind::Glossary,
                MutationKind::Layout => ProposalKind::Layout,
                MutationKind::Demonstrations => ProposalKind::Demonstrations,
            },
            Self::Merge(_) => ProposalKind::Merge,
        }
    }

    /// The proposed prompt, when the reflection answer held one.
    pub fn child_prompt(&self) -> Option<&str> {
        match self {
            Self::Mutation(record) => record.child_prompt.as_deref(),
            Self::Merge(record) => record.child_prompt.as_deref(),
        }
    }

    /// The outcome and its reason in words, with the scores behind a rejection: the one
    /// description the terminal and the report show.
    pub fn explain(&self) -> String {
        let mut outcome = self.explain_outcome();
        if let Self::Mutation(MutationRecord {
            part: Some(part), ..
        }) = self
        {
            outcome.push_str(&format!(" (proposed for the {part} part)"));
        }
        match self {
            Self::Mutation(MutationRecord {
                reworded: Some(first),
                ..
            }) => format!("{outcome} (a second answer's rule; the first was refused: {first})"),
            _ => outcome,
        }
    }

    fn explain_outcome(&self) -> String {
        match self {
            Self::Mutation(record)
                if record.outcome == Outcome::Rejected
                    && record.written_from.judged_on_pareto()
                    && sum(&record.child_scores) > sum(&record.parent_scores) =>
            {
                let (wins, losses) = wins_and_losses(&record.parent_scores, &record.child_scores);
                format!(
                    "rejected: the child scored {:.2} against the parent's {:.2} on {} {}, \
                     higher on {wins} and lower on {losses}: sign test p = {:.2}, which chance \
                     gives too often (it must be at most {PARETO_ACCEPT_P})",
                    sum(&record.child_scores),
                    sum(&record.parent_scores),
                    record.minibatch.len(),
                    record.rows_judged(),
                    sign_test(wins, losses)
                )
            }
            Self::Mutation(record)
                if record.outcome == Outcome::Rejected
                    && sum(&record.child_scores) > sum(&record.parent_scores) =>
            {
                let (parent, child) = record.unshown_sums();
                format!(
                    "rejected: the child scored {:.2} against the parent's {:.2} on {} {}, \
                     but {:.2} against {:.2} on the {} rows its proposal was not written from (it \
                     must not score lower there)",
                    sum(&record.child_scores),
                    sum(&record.parent_scores),
                    record.minibatch.len(),
                    record.rows_judged(),
                    child,
                    parent,
                    record.unshown_rows()
                )
            }
            Self::Mutation(record) if record.outcome == Outcome::Rejected => format!(
                "rejected: the child scored {:.2} against the parent's {:.2} on {} {} (it must score higher)",
                sum(&record.child_scores),
                sum(&record.parent_scores),
                record.minibatch.len(),
                record.rows_judged()
            ),
            Self::Merge(record) if record.outcome == Outcome::Rejected => format!(
                "rejected: the merge scored {:.2} against the better parent's {:.2} on {} Pareto rows (it must match it)",
                sum(&record.child_scores),
                sum(&record.parent_scores[0]).max(sum(&record.parent_scores[1])),
                record.subsample.len()
            ),
            _ => self.outcome().to_string(),
        }
    }

    /// Records what the iteration spent, given what had been spent before it began, and the
    /// best candidate at its end.
    pub(crate) fn finish(&mut self, before: Spent, now: Spent, best: Best) {
        let (spent, cost, best_now) = match self {
            Self::Mutation(record) => (&mut record.spent, &mut record.cost, &mut record.best),
            Self::Merge(record) => (&mut record.spent, &mut record.cost, &mut record.best),
        };
        *spent = now;
        *cost = now.since(before);
        *best_now = best;
    }
}

/// What a mutation's child was written from, and so which rows judge it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MutationKind {
    /// The reflection model saw a minibatch of feedback rows (a rewrite or a rule); the child is
    /// judged on that minibatch.
    #[default]
    Reflection,
    /// A glossary of the labels, written from the feedback rows; the child is judged on the
    /// Pareto set (see `EngineConfig::label_glossary`).
    Glossary,
    /// The best candidate with its instruction moved above the input, written without a
    /// reflection; the child is judged on the Pareto set (see `EngineConfig::input_last`).
    Layout,
    /// The best candidate with labelled feedback rows shown as worked examples, chosen or one
    /// of them swapped by the engine without a reflection; the child is judged on the Pareto set
    /// (see `EngineConfig::demonstrations`).
    Demonstrations,
}

impl MutationKind {
    fn is_reflection(&self) -> bool {
        *self == Self::Reflection
    }

    /// Whether the child is judged on the Pareto set (where the parent's scores are known)
    /// rather than on a minibatch.
    pub fn judged_on_pareto(&self) -> bool {
        !self.is_reflection()
    }
}

/// How strong the evidence must be for a child judged on the Pareto set: the one-sided sign
/// test's p-value of its wins against its losses (rows where it scores higher, and lower, than
/// its parent) at most this. With 2 wins and no loss p = 0.25; with 3 wins and 1 loss p = 0.31,
/// which is refused: a gain of one row net out of four changed rows is what chance gives.
pub const PARETO_ACCEPT_P: f64 = 0.25;

/// The one-sided sign test: the chance of at least `wins` heads in `wins + losses` fair coin
/// flips. 1 when nothing changed.
pub fn sign_test(wins: usize, losses: usize) -> f64 {
    let n = wins + losses;
    if n == 0 {
        return 1.0;
    }
    // Sum of C(n, k) / 2^n for k >= wins, in logs so that large n stays finite.
    let ln_choose = |n: usize, k: usize| -> f64 {
        (1..=k)
            .map(|i| ((n - k + i) as f64).ln() - (i as f64).ln())
            .sum()
    };
    let total: f64 = (wins..=n)
        .map(|k| (ln_choose(n, k) - n as f64 * std::f64::consts::LN_2).exp())
        .sum();
    total.min(1.0)
}

/// When a child is refused on the screen's few Pareto rows
/// ([`EngineConfig::pareto_screen`](super::EngineConfig::pareto_screen)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ScreenRule {
    /// When it scores lower there in sum: a reflection's child, whose rule may fix the rows it
    /// was written from by breaking others. (Refusing only on a sign test at p <= 0.05 let
    /// through 10 of 14 such children that then scored below their parent on the 40 Pareto rows,
    /// in round 13 of the quality benchmark.)
    NoLower,
    /// When it scores lower there in sum and its losses against its wins pass the sign test at
    /// [`PARETO_ACCEPT_P`], the evidence asked of it the other way round on the whole set: a
    /// set of demonstrations, which changes few answers. In round 31 of the quality benchmark
    /// 6 of 14 sets were refused by [`ScreenRule::NoLower`] on one row lost of 10 and none won,
    /// where a parent that answers most rows right can only lose on them (the SNIPS parent
    /// had all 10 right).
    NotClearlyWorse,
}

impl ScreenRule {
    /// Whether `child`'s scores on the screen's rows refuse it against `parent`'s.
    pub(crate) fn refuses(self, parent: &[f64], child: &[f64]) -> bool {
        let lower = sum(child) < sum(parent);
        match self {
            Self::NoLower => lower,
            Self::NotClearlyWorse => {
                let (wins, losses) = wins_and_losses(parent, child);
                lower && sign_test(losses, wins) <= PARETO_ACCEPT_P
            }
        }
    }
}

/// Rows where `child` scores above `parent`, and below.
pub fn wins_and_losses(parent: &[f64], child: &[f64]) -> (usize, usize) {
    parent
        .iter()
        .zip(child)
        .fold((0, 0), |(wins, losses), (p, c)| {
            if c > p {
                (wins + 1, losses)
            } else if c < p {
                (wins, losses + 1)
            } else {
                (wins, losses)
            }
        })
}

/// A reflective mutation: the parent ran on a minibatch of feedback examples, the reflection
/// model proposed a child, and the child ran on the same minibatch. (A glossary runs both on the
/// Pareto set instead.)
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MutationRecord {
    pub iteration: usize,
    /// Generation of the parent.
    pub parent: usize,
    /// What the child was written from. Records written before glossaries read as reflections.
    #[serde(default, skip_serializing_if = "MutationKind::is_reflection")]
    pub written_from: MutationKind,
    /// The examples (dataset indexes) both prompts ran on: feedback examples, or the Pareto set
    /// for a glossary.
    pub minibatch: Vec<usize>,
    /// The minibatch examples the proposal was written to fix: all of them for a rewrite, the
    /// failures a rule was written from for the rules proposer. (The rows the rules proposer
    /// shows for contrast are not among them: they are rows the rule must not change, and the
    /// acceptance rule counts them with the other unshown rows.) Records written before this
    /// field read as all of the minibatch.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shown: Vec<usize>,
    /// For a set of demonstrations the Pareto rows left undecided: how many feedback rows it
    /// does not show were added at the end of `minibatch` to decide it (0 otherwise).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub feedback_rows: usize,
    pub parent_scores: Vec<f64>,
    /// The part of a prompt of several parts the child was written to change (the others are
    /// kept byte for byte); absent for a prompt of one part.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub part: Option<PartName>,
    /// The proposed prompt, when one could be parsed from the reflection answer.
    pub child_prompt: Option<String>,
    /// Empty when the child was never run (skipped or failed proposal).
    pub child_scores: Vec<f64>,
    /// Why the reflection model's first answer was refused, when the engine asked it once more
    /// for the same rule in general words (see `Engine::propose`); `child_prompt` and `outcome`
    /// are those of the second answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reworded: Option<Box<ProposalFailure>>,
    pub outcome: Outcome,
    /// Calls spent when the iteration ended, counted from the start of the run.
    pub spent: Spent,
    /// Calls and tokens this iteration spent.
    pub cost: Spent,
    /// The candidate with the highest mean Pareto score when the iteration ended: the search's
    /// best so far. The run's best must also show a gain over the seed (see `Run::best`).
    pub best: Best,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// What a proposed child fills in its iteration's record: the rows it runs on first, then its
/// text, its scores there and the iteration's outcome.
pub(crate) type ChildFields<'a> = (
    &'a [usize],
    &'a mut Option<String>,
    &'a mut Vec<f64>,
    &'a mut Outcome,
);

impl MutationRecord {
    /// The fields a proposed child fills; it runs on the minibatch.
    pub(crate) fn child_fields(&mut self) -> ChildFields<'_> {
        (
            &self.minibatch,
            &mut self.child_prompt,
            &mut self.child_scores,
            &mut self.outcome,
        )
    }

    /// What the rows the child was judged on are, in words.
    fn rows_judged(&self) -> &'static str {
        match self.written_from {
            MutationKind::Reflection => "minibatch rows",
            MutationKind::Demonstrations if self.feedback_rows > 0 => {
                "Pareto rows and feedback rows not shown"
            }
            MutationKind::Glossary | MutationKind::Layout | MutationKind::Demonstrations => {
                "Pareto rows"
            }
        }
    }

    /// The one acceptance rule of a mutation: the child scores higher than its parent on the
    /// minibatch (as in the paper: a tie is not progress), and no lower on the minibatch rows the
    /// reflection model was not shown. A rule that fixes the rows it was written from by breaking
    /// others moves a bias from one answer to another; it is not kept. With every row shown (a
    /// rewrite) the second part holds trivially.
    ///
    /// A child judged on the Pareto set (a glossary, a layout, demonstrations) changes how every
    /// row is read, and there many rows are known: it must score higher in sum and win more rows
    /// than it loses by more than chance would ([`PARETO_ACCEPT_P`]).
    pub fn improves(&self) -> bool {
        if self.written_from.judged_on_pareto() {
            let (wins, losses) = wins_and_losses(&self.parent_scores, &self.child_scores);
            return sum(&self.child_scores) > sum(&self.parent_scores)
                && sign_test(wins, losses) <= PARETO_ACCEPT_P;
        }
        let (parent, child) = self.unshown_sums();
        sum(&self.child_scores) > sum(&self.parent_scores) && child >= parent
    }

    /// A child judged on the Pareto set that scores higher in sum there, but whose wins against
    /// its losses do not pass the sign test: more rows could decide it either way.
    pub(crate) fn undecided(&self) -> bool {
        self.written_from.judged_on_pareto()
            && sum(&self.child_scores) > sum(&self.parent_scores)
            && !self.improves()
    }

    /// The parent's and the child's score sums on the minibatch rows not shown.
    fn unshown_sums(&self) -> (f64, f64) {
        self.minibatch
            .iter()
            .zip(self.parent_scores.iter().zip(&self.child_scores))
            .filter(|(example, _)| !self.shown.is_empty() && !self.shown.contains(example))
            .fold((0.0, 0.0), |(parent, child), (_, (p, c))| {
                (parent + p, child + c)
            })
    }

    fn unshown_rows(&self) -> usize {
        if self.shown.is_empty() {
            return 0;
        }
        self.minibatch
            .iter()
            .filter(|example| !self.shown.contains(example))
            .count()
    }
}

/// The sum of a set of scores, which the engine's acceptance rules compare.
pub(crate) fn sum(scores: &[f64]) -> f64 {
    scores.iter().sum()
}

/// The candidate with the highest mean Pareto score (the earlier one on a tie).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Best {
    pub generation: usize,
    pub score: f64,
}

/// A merge: two candidates that share an ancestor, combined by the reflection model, scored on
/// a few Pareto examples where they differ.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MergeRecord {
    pub iteration: usize,
    /// Generations of the two candidates merged.
    pub parents: [usize; 2],
    /// Their common ancestor.
    pub ancestor: usize,
    /// Pareto examples (dataset indexes) the merged prompt ran on first.
    pub subsample: Vec<usize>,
    /// Each parent's known scores on the subsample.
    pub parent_scores: [Vec<f64>; 2],
    pub child_prompt: Option<String>,
    pub child_scores: Vec<f64>,
    pub outcome: Outcome,
    /// Calls spent when the iteration ended, counted from the start of the run.
    pub spent: Spent,
    /// Calls and tokens this iteration spent.
    pub cost: Spent,
    /// The candidate with the highest mean Pareto score when the iteration ended: the search's
    /// best so far. The run's best must also show a gain over the seed (see `Run::best`).
    pub best: Best,
}

impl MergeRecord {
    /// The fields a proposed child fills; it runs on the subsample.
    pub(crate) fn child_fields(&mut self) -> ChildFields<'_> {
        (
            &self.subsample,
            &mut self.child_prompt,
            &mut self.child_scores,
            &mut self.outcome,
        )
    }
}

/// How an iteration ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum Outcome {
    /// The child won and joined the pool as this generation.
    Accepted { generation: usize },
    /// The child did not beat its parent on the minibatch (a merge: did not match the better
    /// parent on the subsample).
    Rejected,
    /// The parent was perfect on the minibatch: nothing to learn from it.
    SkippedPerfect,
    /// The child (a reflection's that won its minibatch, or a set of demonstrations) scored
    /// `child_sum` against its parent's `parent_sum` on `rows` Pareto rows drawn at random, where
    /// it was higher on `wins` rows and lower on `losses`, which refuses it (`ScreenRule`); the
    /// rest of the Pareto set was not paid for (see `EngineConfig::pareto_screen`).
    Screened {
        rows: usize,
        parent_sum: f64,
        child_sum: f64,
        wins: usize,
        losses: usize,
    },
    /// No usable child came out of the reflection.
    Failed { reason: ProposalFailure },
}

/// A label glossary needs at least this many labels: with two, the labels' names and the task
/// already say what each means; with more, names such as `meta` or `utility` are shorthand whose
/// scope a small model cannot guess. Labels that are numbers are the exception
/// ([`glossary_labels_needed`]).
pub(crate) const MIN_GLOSSARY_LABELS: usize = 3;

/// Whether every label is a number (`0`, `1`, `-1`, `2.5`; at least one label, and not `nan`
/// or `inf`, which parse as numbers but are words): a name that says nothing of what it stands
/// for, which a model cannot guess and only the rows can show.
pub fn labels_are_numbers<'a>(labels: impl IntoIterator<Item = &'a str>) -> bool {
    let mut any = false;
    for label in labels {
        if !label.parse::<f64>().is_ok_and(f64::is_finite) {
            return false;
        }
        any = true;
    }
    any
}

/// How many labels a glossary must keep entries for to be proposed, `None` when none is written:
/// [`MIN_GLOSSARY_LABELS`] of three to [`FEW_LABELS`] labels (a glossary asks once per label,
/// and would take 77 calls of a budget of 325 for banking77's labels); both of two labels that are
/// numbers (whose names and the task do not say what each means, and where a glossary of one
/// singles it out).
pub(crate) fn glossary_labels_needed(labels: &[String]) -> Option<usize> {
    if labels.len() > FEW_LABELS {
        None
    } else if labels.len() >= MIN_GLOSSARY_LABELS {
        Some(MIN_GLOSSARY_LABELS)
    } else if labels.len() == 2 && labels_are_numbers(labels.iter().map(String::as_str)) {
        Some(2)
    } else {
        None
    }
}

/// What [`ProposalFailure::ThinGlossary`] records needed before they said (three labels).
fn min_glossary_labels() -> usize {
    MIN_GLOSSARY_LABELS
}

/// Why a reflection produced no child worth running.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "reason", rename_all = "snake_case")]
pub enum ProposalFailure {
    /// The answer has no ``` fenced block.
    NoFencedBlock { answer: String },
    /// The answer opens a fenced block and never closes it, as an answer cut off by its token
    /// limit does.
    UnclosedFence { answer: String },
    /// The fenced block is empty.
    EmptyInstruction,
    /// A rules answer ([`Proposer::Rules`](super::Proposer)) has no "- " list.
    NoRules { answer: String },
    /// Every rule of the answer names an answer that is not the correct one of any example it
    /// was written for.
    WrongAnswerInRules { answer: String },
    /// Every rule of the answer is already in the parent.
    NoNewRule,
    /// A label glossary kept subjects for fewer labels than it needs (`needed`, see
    /// [`glossary_labels_needed`]; the answers had no list, or every subject was dropped);
    /// `answers` are the reflection model's answers, one per label asked about.
    ThinGlossary {
        labels: usize,
        #[serde(default = "min_glossary_labels")]
        needed: usize,
        answers: String,
    },
    /// The child dropped `{variable}` placeholders the seed uses, so it could not be rendered
    /// with an example's inputs.
    MissingPlaceholders { missing: Vec<String> },
    /// The child uses `{variable}` placeholders that are neither dataset inputs nor in the seed.
    UnknownPlaceholders { unknown: Vec<String> },
    /// The child is a prompt already in the pool.
    Duplicate { generation: usize },
    /// The child adds words found in only a few of the inputs the engine sees (at most three):
    /// a pair of adjacent words, or a span in quotation marks (see `engine::quotes`). A rule
    /// tied to those rows, not to the task. `pair` keeps its name from when only pairs counted.
    QuotesInputs { pair: String, inputs: usize },
    /// The child puts a stop word beside `word`, a word of `word_inputs` of the inputs the
    /// engine sees, and the pair is in at most three of them (`inputs`; see `engine::quotes`):
    /// ordinary English around a word of the inputs, the likeliest to stand in a few rows the
    /// engine has not seen.
    QuotesPhrase {
        pair: String,
        word: String,
        word_inputs: usize,
        inputs: usize,
    },
    /// The reflection call failed (only with [`OnTaskError::ScoreZero`](super::OnTaskError)).
    ReflectionError { error: TaskError },
    /// The child of a prompt of several parts changes a fixed part, or the parts themselves (a
    /// part missing, a marker line inside one): only the evolvable parts' texts may change.
    PartsChanged,
}

/// In words, for the terminal and the report: "accepted as g3", "rejected: ...".
impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Accepted { generation } => write!(f, "accepted as g{generation}"),
            Self::Rejected => write!(f, "rejected: not better than its parent"),
            Self::SkippedPerfect => write!(f, "skipped: the parent was perfect on the minibatch"),
            Self::Screened {
                rows,
                parent_sum,
                child_sum,
                wins,
                losses,
            } => write!(
                f,
                "screened out: on {rows} Pareto rows drawn at random it scored {child_sum:.2} \
                 against its parent's {parent_sum:.2} (higher on {wins}, lower on {losses}), so \
                 the other Pareto rows were not paid for"
            ),
            Self::Failed { reason } => write!(f, "no child: {reason}"),
        }
    }
}

impl Outcome {
    /// A short name of the outcome: `accepted`, `rejected`, `skipped_perfect`, `screened` or the
    /// failure's reason.
    pub fn label(&self) -> &'static str {
        match self {
            Self::Accepted { .. } => "accepted",
            Self::Rejected => "rejected",
            Self::SkippedPerfect => "skipped_perfect",
            Self::Screened { .. } => "screened",
            Self::Failed { reason } => reason.label(),
        }
    }
}

impl ProposalFailure {
    /// The words of the inputs a refused child repeats, when it was refused for quoting them.
    pub fn quoted_words(&self) -> Option<&str> {
        match self {
            Self::QuotesInputs { pair, .. } | Self::QuotesPhrase { pair, .. } => Some(pair),
            _ => None,
        }
    }

    pub fn label(&self) -> &'static str {
        match self {
            Self::NoFencedBlock { .. } => "no_fenced_block",
            Self::UnclosedFence { .. } => "unclosed_fence",
            Self::EmptyInstruction => "empty_instruction",
            Self::NoRules { .. } => "no_rules",
            Self::WrongAnswerInRules { .. } => "wrong_answer_in_rules",
            Self::NoNewRule => "no_new_rule",
            Self::ThinGlossary { .. } => "thin_glossary",
            Self::MissingPlaceholders { .. } => "missing_placeholders",
            Self::UnknownPlaceholders { .. } => "unknown_placeholders",
            Self::Duplicate { .. } => "duplicate",
            Self::QuotesInputs { .. } => "quotes_inputs",
            Self::QuotesPhrase { .. } => "quotes_phrase",
            Self::ReflectionError { .. } => "reflection_error",
            Self::PartsChanged => "parts_changed",
        }
    }
}

impl fmt::Display for ProposalFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let list = |names: &[String]| {
            names
                .iter()
                .map(|name| format!("{{{name}}}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        match self {
            Self::NoFencedBlock { .. } => write!(f, "the answer has no ``` fenced block"),
            Self::UnclosedFence { .. } => {
                write!(f, "the answer's fenced block is never closed (cut off?)")
            }
            Self::EmptyInstruction => write!(f, "the fenced block is empty"),
            Self::NoRules { .. } => write!(f, "the answer has no \"- \" rule"),
            Self::WrongAnswerInRules { .. } => {
                write!(f, "every rule names an answer that is not the correct one")
            }
            Self::NoNewRule => write!(f, "every rule is already in the parent"),
            Self::ThinGlossary { labels, needed, .. } => write!(
                f,
                "the glossary kept subjects for {labels} label(s); it needs {needed}"
            ),
            Self::MissingPlaceholders { missing } => {
                write!(f, "the child dropped {}", list(missing))
            }
            Self::UnknownPlaceholders { unknown } => {
                write!(f, "the child uses unknown {}", list(unknown))
            }
            Self::Duplicate { generation } => write!(f, "the child is g{generation} again"),
            Self::QuotesInputs { pair, inputs } => write!(
                f,
                "the child quotes \"{pair}\", found in only {inputs} of the feedback and Pareto inputs"
            ),
            Self::QuotesPhrase {
                pair,
                word,
                word_inputs,
                inputs,
            } => write!(
                f,
                "the child adds \"{pair}\", a stop word beside \"{word}\" (a word of {word_inputs} \
                 of the feedback and Pareto inputs), a pair in only {inputs} of them: a phrase \
                 likely in a few inputs the engine has not seen"
            ),
            Self::ReflectionError { error } => write!(f, "the reflection call failed: {error}"),
            Self::PartsChanged => write!(
                f,
                "the child changes a fixed part of the prompt, or its parts (a marker line, a \
                 part missing)"
            ),
        }
    }
}

/// Which kind of call failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CallKind {
    Evaluate,
    Reflect,
}

/// The task error that stopped a run.
#[derive(Debug, Clone, Serialize)]
pub struct Failure {
    /// 0 while the seed was being scored.
    pub iteration: usize,
    pub call: CallKind,
    /// The example being evaluated; `None` for a reflection.
    pub example: Option<usize>,
    /// Calls that had failed in a row when the run stopped, this one included.
    pub failures_in_a_row: usize,
    pub error: TaskError,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.call, self.example) {
            (CallKind::Evaluate, Some(example)) => write!(
                f,
                "iteration {}: evaluating example {example} failed",
                self.iteration
            )?,
            _ => write!(
                f,
                "iteration {}: the reflection call failed",
                self.iteration
            )?,
        }
        if self.failures_in_a_row > 1 {
            write!(f, " ({} failed calls in a row)", self.failures_in_a_row)?;
        }
        write!(f, ": {}", self.error)
    }
}

/// Why a run stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// The remaining budget could not pay for the next iteration's worst case.
    Budget,
    /// The time limit passed.
    Time,
    /// No candidate was accepted for `stall_iterations` iterations.
    Stalled,
    /// The best mean Pareto score reached the threshold.
    Threshold,
    /// Every candidate the selector can pick is perfect on the whole feedback set, so reflection
    /// has nothing left to learn from (and further iterations would cost nothing and do nothing).
    Solved,
    /// A task call failed and the config says to stop; see [`Run::failure`].
    Failed,
}

/// A snapshot for progress displays, sent after every batch of paid calls.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Progress {
    /// Current iteration, 0 while the seed is being scored.
    pub iteration: usize,
    /// Latest accepted generation (0, the seed, while it is being scored).
    pub generation: usize,
    /// Generation with the best mean Pareto score so far, and that score; `None` until the seed
    /// has been scored.
    pub best_generation: usize,
    pub best_score: Option<f64>,
    pub spent: Spent,
    pub budget: u64,
}

/// What the engine tells its observer while it runs.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum EngineEvent {
    Progress(Progress),
    /// A candidate joined the pool (the seed first).
    Candidate(CandidateRecord),
    /// An iteration ended.
    Iteration(IterationRecord),
    /// The run is over.
    Finished {
        stop: StopReason,
        progress: Progress,
    },
}

/// The result of a run that got as far as scoring its seed.
#[derive(Debug, Clone, Serialize)]
pub struct Run {
    pub(crate) stop: StopReason,
    pub(crate) failure: Option<Failure>,
    pub(crate) best: usize,
    pub(crate) candidates: Vec<CandidateRecord>,
    pub(crate) iterations: Vec<IterationRecord>,
    pub(crate) spent: Spent,
    pub(crate) budget: u64,
    pub(crate) objectives: Objectives,
}

impl Run {
    pub fn stop(&self) -> StopReason {
        self.stop
    }

    /// The error that stopped the run, when `stop()` is [`StopReason::Failed`].
    pub fn failure(&self) -> Option<&Failure> {
        self.failure.as_ref()
    }

    /// The candidate the run recommends: with objectives, [`Self::recommended`] when one is
    /// within the limits; otherwise (and always without objectives) the candidate with the
    /// highest mean Pareto score, the earlier one on a tie, among the seed and the evolved
    /// prompts whose rows show a gain over it ([`crate::may_be_best`]).
    pub fn best(&self) -> &CandidateRecord {
        let best = self.recommended().map_or(self.best, |c| c.generation);
        &self.candidates[best]
    }

    pub fn objectives(&self) -> &Objectives {
        &self.objectives
    }

    /// Every accepted candidate in generation order, the seed first: the run's history.
    pub fn candidates(&self) -> &[CandidateRecord] {
        &self.candidates
    }

    pub fn iterations(&self) -> &[IterationRecord] {
        &self.iterations
    }

    pub fn spent(&self) -> Spent {
        self.spent
    }

    pub fn budget(&self) -> u64 {
        self.budget
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sign_test_counts_the_changed_rows() {
        assert_eq!(sign_test(0, 0), 1.0);
        assert!((sign_test(2, 0) - 0.25).abs() < 1e-12);
        assert!((sign_test(3, 1) - 5.0 / 16.0).abs() < 1e-12);
        assert!((sign_test(4, 1) - 6.0 / 32.0).abs() < 1e-12);
        assert!((sign_test(0, 3) - 1.0).abs() < 1e-12);
        // Large counts stay finite: 600 wins of 1,000 is far beyond chance.
        assert!(sign_test(600, 400) < 1e-9);
        assert_eq!(wins_and_losses(&[1.0, 0.0, 0.5], &[1.0, 1.0, 0.0]), (1, 1));
    }

    #[test]
    fn a_child_judged_on_the_pareto_set_needs_more_than_a_row_of_luck() {
        let record = |parent: Vec<f64>, child: Vec<f64>| MutationRecord {
            iteration: 1,
            parent: 0,
            written_from: MutationKind::Demonstrations,
            minibatch: (10..10 + parent.len()).collect(),
            shown: vec![0, 1],
            feedback_rows: 0,
            parent_scores: parent,
            part: None,
            child_prompt: Some("child".into()),
            child_scores: child,
            reworded: None,
            outcome: Outcome::Rejected,
            spent: Spent::default(),
            cost: Spent::default(),
            best: Best::default(),
        };
        // Three rows won, one lost: +2 in sum, p = 0.31.
        let lucky = record(vec![0., 0., 0., 1., 1., 1.], vec![1., 1., 1., 0., 1., 1.]);
        assert!(!lucky.improves());
        let text = IterationRecord::Mutation(lucky).explain();
        assert!(
            text.contains("higher on 3 and lower on 1: sign test p = 0.31"),
            "{text}"
        );
        assert!(text.contains("on 6 Pareto rows, higher"), "{text}");
        // More rows could decide it; a set judged on feedback rows too says so.
        let lucky = record(vec![0., 0., 0., 1., 1., 1.], vec![1., 1., 1., 0., 1., 1.]);
        assert!(lucky.undecided());
        let widened = MutationRecord {
            feedback_rows: 2,
            ..lucky
        };
        let text = IterationRecord::Mutation(widened).explain();
        assert!(
            text.contains("on 6 Pareto rows and feedback rows not shown, higher"),
            "{text}"
        );
        // Three won, none lost: p = 0.125.
        let clear = record(vec![0., 0., 0., 1.], vec![1., 1., 1., 1.]);
        assert!(clear.improves());
        assert!(!clear.undecided());
        // A child no higher in sum is decided too: it loses.
        assert!(!record(vec![1., 0.], vec![0., 1.]).undecided());
        // The same rows judged on a minibatch take the paper's rule: any gain in sum.
        let minibatch = MutationRecord {
            written_from: MutationKind::Reflection,
            shown: Vec::new(),
            ..record(vec![0., 0., 0., 1., 1., 1.], vec![1., 1., 1., 0., 1., 1.])
        };
        assert!(minibatch.improves());
    }

    #[test]
    fn a_thin_glossary_recorded_before_it_said_what_it_needed_needed_three() {
        let old: ProposalFailure =
            serde_json::from_str(r#"{"reason": "thin_glossary", "labels": 2, "answers": ""}"#)
                .unwrap();
        assert_eq!(
            old.to_string(),
            "the glossary kept subjects for 2 label(s); it needs 3"
        );
    }

    #[test]
    fn labels_that_are_numbers_say_nothing_and_get_a_glossary_even_as_two() {
        assert!(labels_are_numbers(["0", "1", "-1", "2.5"]));
        assert!(!labels_are_numbers(["0", "spam"]));
        assert!(!labels_are_numbers(["nan", "inf"]));
        assert!(!labels_are_numbers([]));
        let labels = |names: &[&str]| names.iter().map(|n| n.to_string()).collect::<Vec<_>>();
        assert_eq!(glossary_labels_needed(&labels(&["0", "1"])), Some(2));
        assert_eq!(glossary_labels_needed(&labels(&["ham", "spam"])), None);
        assert_eq!(glossary_labels_needed(&labels(&["a", "b", "c"])), Some(3));
        let many: Vec<String> = (0..=FEW_LABELS).map(|i| format!("l{i}")).collect();
        assert_eq!(glossary_labels_needed(&many[1..]), Some(3));
        assert_eq!(
            glossary_labels_needed(&many),
            None,
            "one reflection per label is too many"
        );
        assert_eq!(
            glossary_labels_needed(&labels(&["0", "1", "2", "3"])),
            Some(3)
        );
    }

    /// The short names the terminal and events use are the names the records are written with.
    #[test]
    fn labels_are_the_serialised_names() {
        let failures = [
            ProposalFailure::NoFencedBlock { answer: "a".into() },
            ProposalFailure::UnclosedFence { answer: "a".into() },
            ProposalFailure::EmptyInstruction,
            ProposalFailure::NoRules { answer: "a".into() },
            ProposalFailure::WrongAnswerInRules { answer: "a".into() },
            ProposalFailure::NoNewRule,
            ProposalFailure::PartsChanged,
            ProposalFailure::ThinGlossary {
                labels: 1,
                needed: 3,
                answers: "a".into(),
            },
            ProposalFailure::MissingPlaceholders {
                missing: vec!["q".into()],
            },
            ProposalFailure::UnknownPlaceholders {
                unknown: vec!["x".into()],
            },
            ProposalFailure::Duplicate { generation: 1 },
            ProposalFailure::ReflectionError {
                error: TaskError::new("down"),
            },
        ];
        for failure in failures {
            let json = serde_json::to_value(&failure).unwrap();
            assert_eq!(json["reason"], failure.label(), "{failure:?}");
        }
        for outcome in [
            Outcome::Accepted { generation: 2 },
            Outcome::Rejected,
            Outcome::SkippedPerfect,
        ] {
            let json = serde_json::to_value(&outcome).unwrap();
            assert_eq!(json["status"], outcome.label(), "{outcome:?}");
        }
    }
}
