//! Settings of one engine run, with their defaults and rules.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::costs::{CostKind, Objectives};
use super::error::EngineError;
use super::reflection::ReflectionTemplate;

/// Examples shown to the reflection model per iteration unless set otherwise: the reference
/// implementation's default.
pub const DEFAULT_REFLECTION_MINIBATCH: usize = 3;

/// Settings of one run. Build it with [`EngineConfig::new`] and change the fields you need.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EngineConfig {
    /// Size of the feedback set: the first `minibatch` examples (the API's `minibatchSize`).
    pub minibatch: usize,
    /// Size of the Pareto set: the next `pareto` examples (the API's `paretoSize`).
    pub pareto: usize,
    /// Total calls the run may make, task and reflection calls alike (the API's `budget`).
    pub budget: u64,
    /// Seeds every random choice; the same seed, data and model answers give the same run.
    pub seed: u64,
    /// Examples shown to the reflection model per iteration (the reference's default is 3);
    /// capped at the feedback set's size.
    pub reflection_minibatch: usize,
    /// Stop when this much wall-clock time has passed. Checked between iterations: an
    /// iteration in flight finishes, so its calls are not wasted.
    pub time_limit: Option<Duration>,
    /// Stop after this many iterations in a row without an accepted candidate.
    pub stall_iterations: Option<usize>,
    /// Stop as soon as the best mean Pareto score reaches this value, in `[0, 1]`.
    pub score_threshold: Option<f64>,
    /// How the reflection model proposes a child.
    pub proposer: Proposer,
    /// With [`Proposer::Rules`] and a classification of at least three labels, or of two that
    /// are numbers, the first iteration writes a glossary of the labels (see
    /// [`Engine::describe_labels`]) instead of a rule, and it is judged on the Pareto set.
    ///
    /// [`Engine::describe_labels`]: super::run
    pub label_glossary: bool,
    /// With [`Proposer::Rules`] and a classification whose prompt gives the input before the
    /// instruction, the iteration after the glossary (the first when there is none) offers the
    /// best candidate with its instruction first and its input last (`reflection::input_last`),
    /// without a reflection, judged on the Pareto set.
    pub input_last: bool,
    /// At most this many labelled feedback rows shown in the prompt as worked examples (of a
    /// classification, first sets alternate between one of each label and at least four rows
    /// in all, `demonstrations::SetSize`; else up to three): the engine offers the best candidate with
    /// them, then now and then with one of them swapped, each judged on the Pareto set
    /// (`demonstrations`). 0 turns them off.
    pub demonstrations: usize,
    /// Whether [`Self::demonstrations`] are offered for a task without a label set (an
    /// extraction, free text) too, or only for a classification.
    pub unlabelled_demonstrations: bool,
    /// Rows the parent is known to fail (its cached answers on feedback rows) take the place of
    /// rows it is known to answer right in a reflection's minibatch, up to half of it
    /// (`sampler::with_known_failures`), so that a reflection sees failures where the parent has
    /// them. `false` keeps the reference implementation's epoch-sampled minibatches as drawn.
    pub known_failures_first: bool,
    /// A reflection's child that wins its minibatch first runs on this many Pareto rows, drawn at
    /// random, and is refused there ([`Outcome::Screened`](super::Outcome::Screened)) when it
    /// scores lower than its parent on them: the rule that a child must not score lower on the
    /// minibatch rows its proposal was not written from ([`MutationRecord::improves`](super::MutationRecord::improves)),
    /// on more such rows, and on rows drawn without regard to the parent's failures. Otherwise it
    /// runs on the rest and joins the pool. 0 (or a Pareto set no larger) runs every such child on
    /// the whole set, as the reference implementation does. A set of demonstrations is screened
    /// too, against the candidate it was added to, before it pays for the whole set, and is
    /// refused there only when it scores lower by more than chance would
    /// (`ScreenRule::NotClearlyWorse`).
    pub pareto_screen: usize,
    /// The request [`Proposer::Rewrite`] sends, when the user has one of their own; `None`
    /// sends the built-in one. [`Proposer::Rules`] does not use it.
    pub reflection_template: Option<ReflectionTemplate>,
    /// Merge two lineages now and then (the paper's GEPA+Merge); `None` turns merging off.
    pub merge: Option<MergeConfig>,
    /// What a failed `evaluate` or `reflect` does to the run.
    pub on_task_error: OnTaskError,
    /// A failed call is sent again this many times before it counts as failed. A retried call
    /// is paid for once: the budget counts evaluations and reflections, not attempts.
    pub retries: u32,
    /// With [`OnTaskError::ScoreZero`], the run stops as failed after this many calls in a row
    /// have failed (after their retries): one slow or failed answer is noise, a run of them is a
    /// model or service that is down.
    pub failures_in_a_row: usize,
    /// How many `evaluate` calls may be in flight at once. Results are used in example order,
    /// so this changes speed, never the run.
    pub parallel_calls: usize,
    /// Costs the run weighs beside the score: they choose the candidate it recommends
    /// ([`Run::best`](super::Run::best)), never the search. Empty by default.
    pub objectives: Objectives,
}

/// The most demonstrations a prompt may show.
pub const MAX_DEMONSTRATIONS: usize = 16;

/// Task calls in flight at once by default. It hides most of a remote model's latency (the
/// `http` layer paces requests per minute), and it fills the embedded model's slots, 16 by
/// default on 2 cores.
pub const DEFAULT_PARALLEL_CALLS: usize = 16;

impl EngineConfig {
    /// A run over `minibatch` feedback and `pareto` Pareto examples with `budget` calls, with the
    /// reference implementation's defaults elsewhere and no stop condition but the budget.
    pub fn new(minibatch: usize, pareto: usize, budget: u64) -> Self {
        Self {
            minibatch,
            pareto,
            budget,
            seed: 0,
            reflection_minibatch: DEFAULT_REFLECTION_MINIBATCH,
            time_limit: None,
            stall_iterations: None,
            score_threshold: None,
            proposer: Proposer::Rewrite,
            label_glossary: false,
            input_last: false,
            demonstrations: 0,
            unlabelled_demonstrations: true,
            known_failures_first: false,
            pareto_screen: 0,
            reflection_template: None,
            merge: None,
            on_task_error: OnTaskError::Fail,
            retries: 1,
            failures_in_a_row: 3,
            parallel_calls: DEFAULT_PARALLEL_CALLS,
            objectives: Objectives::default(),
        }
    }

    pub(crate) fn validate(&self) -> Result<(), EngineError> {
        let rule = |field: &'static str, value: String, rule: &'static str| {
            Err(EngineError::Config { field, value, rule })
        };
        if self.minibatch == 0 {
            return rule(
                "minibatch",
                "0".into(),
                "the feedback set needs at least 1 example",
            );
        }
        if self.pareto == 0 {
            return rule(
                "pareto",
                "0".into(),
                "the Pareto set needs at least 1 example",
            );
        }
        if self.reflection_minibatch == 0 {
            return rule(
                "reflection_minibatch",
                "0".into(),
                "the reflection model needs at least 1 example",
            );
        }
        if self.demonstrations > MAX_DEMONSTRATIONS {
            return rule(
                "demonstrations",
                self.demonstrations.to_string(),
                "must be at most 16",
            );
        }
        if self.parallel_calls == 0 {
            return rule("parallel_calls", "0".into(), "must be at least 1");
        }
        if self.failures_in_a_row == 0 {
            return rule("failures_in_a_row", "0".into(), "must be at least 1");
        }
        if let Some(threshold) = self.score_threshold
            && !(0.0..=1.0).contains(&threshold)
        {
            return rule(
                "score_threshold",
                threshold.to_string(),
                "must be between 0 and 1",
            );
        }
        if let Some((kind, value, rule)) = self.objectives.out_of_range() {
            return Err(EngineError::Config {
                field: objective_field(kind),
                value: value.to_string(),
                rule,
            });
        }
        Ok(())
    }
}

/// The setting an objective is, as a config error names it.
fn objective_field(kind: CostKind) -> &'static str {
    match kind {
        CostKind::PromptTokens => "objectives.prompt_tokens",
        CostKind::AnswerTokens => "objectives.answer_tokens",
        CostKind::LatencyMs => "objectives.latency_ms",
    }
}

/// Merge settings, as the reference implementation schedules merges: one merge attempt becomes
/// due after each accepted mutation, tried in the next iteration, until `max_merges` merged
/// candidates have been accepted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MergeConfig {
    /// Accepted merges after which no more are scheduled (the reference's default is 5).
    pub max_merges: usize,
}

impl Default for MergeConfig {
    fn default() -> Self {
        Self { max_merges: 5 }
    }
}

/// How a reflection turns into a child prompt.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Proposer {
    /// The reference implementation's: the reflection model sees the minibatch (right and wrong
    /// answers with feedback) and rewrites the whole instruction inside a fenced block.
    #[default]
    Rewrite,
    /// For small reflection models: it sees the answers of one confusion that were wrong (for
    /// a classification, up to 3 rows with the same correct and the same wrong answer, and up
    /// to 2 rows whose correct answer is that wrong one, for contrast; otherwise one failure
    /// with its feedback), with the set of correct answers for a task that has a small one, and
    /// writes one general rule in a fixed form ("When ..., answer ..."); the engine adds the
    /// rule to the parent's "Rules:" list, so the rest of the prompt is never lost. Measured
    /// with the embedded 1.5B model: its rewrites mostly fail (no fenced block, placeholders
    /// dropped, generic text); shown failures with different correct answers it pairs rules
    /// with the wrong ones; shown one failure it writes rules about that row's words.
    Rules,
}

impl Proposer {
    /// Every proposer, by the name an experiment file gives it.
    pub const ALL: [(&'static str, Self); 2] = [("rewrite", Self::Rewrite), ("rules", Self::Rules)];

    /// The proposer an experiment file names, if it names one.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL
            .iter()
            .find(|(known, _)| *known == name)
            .map(|(_, proposer)| *proposer)
    }
}

/// What a failed task call does.
///
/// The default stops the run: a failure is usually systematic (a wrong key, no credits, a model
/// that is not served), and going on would spend budget on scores of 0 that say nothing about the
/// prompt. The run still returns its records up to the failure.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OnTaskError {
    /// Stop the run with [`StopReason::Failed`](super::StopReason) and the error.
    #[default]
    Fail,
    /// Score a failed evaluation 0 with the error as its feedback (kept like any other score, so
    /// it is not paid for twice), and count a failed reflection as a failed iteration; stop only
    /// after [`EngineConfig::failures_in_a_row`] failures in a row.
    ScoreZero,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_settings_that_cannot_run() {
        let good = EngineConfig::new(3, 2, 10);
        assert!(good.validate().is_ok());
        type Break = fn(&mut EngineConfig);
        let cases: [(&str, Break); 7] = [
            ("minibatch", |c| c.minibatch = 0),
            ("pareto", |c| c.pareto = 0),
            ("reflection_minibatch", |c| c.reflection_minibatch = 0),
            ("parallel_calls", |c| c.parallel_calls = 0),
            ("failures_in_a_row", |c| c.failures_in_a_row = 0),
            ("score_threshold", |c| c.score_threshold = Some(f64::NAN)),
            ("objectives.answer_tokens", |c| {
                c.objectives.answer_tokens = Some(crate::Objective::Limit(-1.0))
            }),
        ];
        for (name, break_it) in cases {
            let mut config = good.clone();
            break_it(&mut config);
            match config.validate() {
                Err(EngineError::Config { field, .. }) => assert_eq!(field, name),
                other => panic!("{name}: expected a config error, got {other:?}"),
            }
        }
    }
}
