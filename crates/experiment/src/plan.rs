//! The Plan: a validated experiment, ready to run. Everything after validation reads only this.
use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::diagnostic::Location;
use gepa_lab_inference::{ModelRef, Provider, ProviderName};

use gepa_lab_dataset::{HoldoutSize, Order, Split, SplitError};
use gepa_lab_evolution::wire::StartExecution;
use gepa_lab_score::ScorerSpec;
use gepa_lab_score::judge::JudgePlan;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Plan {
    /// The experiment file, as named on the command line.
    pub file: PathBuf,
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// SHA-256 over the experiment file, the seed prompt file and the dataset files: the same
    /// hash means the same experiment on the same data.
    pub content_hash: String,
    /// One execution per variant, or one for a file without variants.
    pub executions: Vec<ExecutionPlan>,
    pub estimate: Estimate,
    /// The providers the executions' models name, from the file or the user's config file.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub providers: BTreeMap<ProviderName, Provider>,
    /// Where each model reference and each used provider was written, for the checks that ask
    /// the providers (`plan --check`, and `run` before it spends anything).
    #[serde(skip)]
    pub sources: ModelSources,
}

/// Where the plan's model references and providers were written.
#[derive(Debug, Clone, Default)]
pub struct ModelSources {
    /// Each model reference: the key it was written at (`replay.models.0`), the reference and
    /// its place, once per distinct reference and key.
    pub references: Vec<(String, ModelRef, Option<Location>)>,
    /// Each used provider's `url`, in the experiment file or the config file.
    pub providers: BTreeMap<ProviderName, Option<Location>>,
}

/// The models of an execution's roles, each with its provider. Roles the file leaves to the
/// backend's default (the local engine's task and reflection models) are filled in when a run
/// is created, so that `run.json` names every model that answered.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ModelRoles {
    /// The model the engine evolves the prompt on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task: Option<ModelRef>,
    /// The model that proposes new prompts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reflection: Option<ModelRef>,
    /// The model that grades replay answers (the `judge` scorer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub judge: Option<ModelRef>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub replay: Vec<ModelRef>,
}

impl ModelRoles {
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }

    /// Each role's name and model, replay models last.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, &ModelRef)> {
        [
            ("task", &self.task),
            ("reflection", &self.reflection),
            ("judge", &self.judge),
        ]
        .into_iter()
        .filter_map(|(role, model)| Some((role, model.as_ref()?)))
        .chain(self.replay.iter().map(|model| ("replay", model)))
    }
}

/// A plan without its list of executions: what a run record keeps of it, beside its own list of
/// executions (each with its [`ExecutionPlan`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlanSummary {
    pub file: PathBuf,
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    pub content_hash: String,
    pub estimate: Estimate,
    /// As in [`Plan::providers`]; none in runs recorded before providers existed.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub providers: BTreeMap<ProviderName, Provider>,
}

impl Plan {
    /// The run's seed the file gives (`[engine] seed`), if it gives one.
    pub fn file_seed(&self) -> Option<u64> {
        self.executions
            .iter()
            .find_map(|execution| execution.start.engine.as_ref()?.seed)
    }

    /// Gives each execution the engine seed [`engine_seed`] derives from the run's seed and its
    /// variant, in its start request (`gepaLabEngine.seed`): for gepa-lab's engine only, since
    /// the public service takes no engine settings.
    pub fn seed_executions(&mut self, run_seed: u64) {
        for execution in &mut self.executions {
            let seed = engine_seed(run_seed, execution.variant.as_deref().unwrap_or(""));
            execution.start.engine.get_or_insert_default().seed = Some(seed);
        }
    }

    pub fn summary(&self) -> PlanSummary {
        PlanSummary {
            file: self.file.clone(),
            name: self.name.clone(),
            description: self.description.clone(),
            content_hash: self.content_hash.clone(),
            estimate: self.estimate,
            providers: self.providers.clone(),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ExecutionPlan {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub variant: Option<String>,
    /// The exact body `POST /gepa/start_execution` receives.
    pub start: StartExecution,
    pub dataset: DatasetPlan,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replay: Option<ReplayPlan>,
    /// Where the execution is logged (`[tracking]`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tracking: Option<TrackingPlan>,
    pub estimate: Estimate,
    /// Which provider and model each role uses.
    #[serde(default, skip_serializing_if = "ModelRoles::is_empty")]
    pub models: ModelRoles,
}

/// Where an execution is logged: an MLflow tracking server, and the MLflow experiment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrackingPlan {
    /// `http://host:port`, without a trailing slash.
    pub url: String,
    pub experiment: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DatasetPlan {
    /// Resolved against the experiment file's folder.
    pub file: PathBuf,
    pub sha256: String,
    pub inputs: Vec<String>,
    pub expected: String,
    /// Data rows in the file, header excluded.
    pub rows: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shuffle_seed: Option<u64>,
    /// Each part holds every expected answer in its share (`[dataset] stratify`); plans
    /// written before stratified splits existed were not.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stratify: bool,
    pub holdout: HoldoutSize,
    /// Data rows (1-based, as diagnostics number them) of each part, in the order sent.
    pub minibatch_rows: Vec<usize>,
    pub pareto_rows: Vec<usize>,
    pub holdout_rows: usize,
    /// 0-based row indices of every part. Not stored: the holdout may be large, and
    /// [`DatasetPlan::split`] recomputes it exactly from the sizes, the seed and (when
    /// stratified) the file's expected answers.
    #[serde(skip)]
    pub(super) split: Option<Split>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ReplayPlan {
    pub models: Vec<String>,
    pub top: usize,
    pub scorer: ScorerSpec,
    pub temperature: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    pub concurrency: usize,
    /// Answers per version and row; plans written before repeats existed had one.
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub repeat: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub judge: Option<JudgePlan>,
}

fn one() -> u32 {
    1
}

fn is_one(value: &u32) -> bool {
    *value == 1
}

/// What a run will spend, at most. Replay counts assume every execution yields `top` distinct
/// prompts better than the seed; fewer prompts mean fewer calls.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Estimate {
    /// Sum of the evolution budgets: inference calls the service may spend on evolution.
    pub evolution_calls: u64,
    /// Replay calls on remote models (every model except `local`).
    pub replay_calls: u64,
    /// Replay calls answered by the embedded model, which cost no credits.
    pub local_replay_calls: u64,
    /// Grading calls of the `judge` scorer.
    pub judge_calls: u64,
    /// Credits the remote replay and judge calls would cost at the assumed price per call; the
    /// services do not publish a per-request price, so this is an estimate, not a quote.
    pub credits: f64,
}

impl std::ops::Add for Estimate {
    type Output = Self;

    fn add(self, other: Self) -> Self {
        Self {
            evolution_calls: self.evolution_calls + other.evolution_calls,
            replay_calls: self.replay_calls + other.replay_calls,
            local_replay_calls: self.local_replay_calls + other.local_replay_calls,
            judge_calls: self.judge_calls + other.judge_calls,
            credits: self.credits + other.credits,
        }
    }
}

impl std::iter::Sum for Estimate {
    fn sum<I: Iterator<Item = Self>>(iter: I) -> Self {
        iter.fold(Self::default(), |total, next| total + next)
    }
}

impl DatasetPlan {
    /// The rows of each part. Recomputed from the plan's own numbers when the plan was read back
    /// from a run directory: the split of a seed never changes. A stratified split also needs
    /// the key of each row's expected answer, `labels` ([`gepa_lab_dataset::Scan::label_keys`],
    /// read with the file's hash; none is a count of 0, an error); other splits ignore them. An
    /// error when the plan's numbers were edited into ones that do not split, or the rows
    /// recomputed are not the ones the plan records (another file, or another algorithm): a
    /// resumed run must replay the same rows.
    pub fn split(&self, labels: Option<&[u64]>) -> Result<Split, SplitError> {
        if let Some(split) = &self.split {
            return Ok(split.clone());
        }
        let labels = self.stratify.then(|| labels.unwrap_or_default());
        let split = Split::new(
            self.rows,
            self.minibatch_rows.len(),
            self.pareto_rows.len(),
            self.holdout,
            Order::new(self.shuffle_seed, labels),
        )?;
        let one_based = |rows: &[usize]| rows.iter().map(|row| row + 1).collect::<Vec<_>>();
        if one_based(&split.minibatch) != self.minibatch_rows
            || one_based(&split.pareto) != self.pareto_rows
        {
            return Err(SplitError::NotRecorded);
        }
        Ok(split)
    }

    /// How the rows were ordered before the parts were cut, in words that follow "rows split":
    /// "in the file's order", "after a shuffle with seed 7", "after a shuffle with seed 7, each
    /// part holding every expected answer in its share".
    pub fn order_words(&self) -> String {
        let order = match self.shuffle_seed {
            Some(seed) => format!("after a shuffle with seed {seed}"),
            None => "in the file's order".to_owned(),
        };
        if self.stratify {
            format!("{order}, each part holding every expected answer in its share")
        } else {
            order
        }
    }

    /// Whether the plan's sizes split its rows, without computing the split (which a
    /// stratified plan cannot without its file).
    pub fn check_sizes(&self) -> Result<(), SplitError> {
        let sizes = (self.minibatch_rows.len(), self.pareto_rows.len());
        Split::holdout_len(self.rows, sizes.0, sizes.1, self.holdout).map(|_| ())
    }
}

/// A variant's engine seed: 63 bits of a hash of the run's seed and the variant's name (empty
/// without variants), so that variants of one run make different random choices and a run
/// started again with the same seed makes the same ones.
pub fn engine_seed(run_seed: u64, variant: &str) -> u64 {
    gepa_lab_inference::sampling_seed(&[b"engine", &run_seed.to_le_bytes(), variant.as_bytes()])
        & gepa_lab_evolution::wire::MAX_ENGINE_SEED
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_order_of_a_split_in_words() {
        let plan = |shuffle_seed, stratify| DatasetPlan {
            file: PathBuf::from("d.csv"),
            sha256: String::new(),
            inputs: vec!["text".into()],
            expected: "label".into(),
            rows: 10,
            shuffle_seed,
            stratify,
            holdout: HoldoutSize::Rest,
            minibatch_rows: vec![1],
            pareto_rows: vec![2],
            holdout_rows: 8,
            split: None,
        };
        assert_eq!(plan(None, false).order_words(), "in the file's order");
        assert_eq!(
            plan(Some(7), false).order_words(),
            "after a shuffle with seed 7"
        );
        assert_eq!(
            plan(Some(7), true).order_words(),
            "after a shuffle with seed 7, each part holding every expected answer in its share"
        );
        assert_eq!(
            plan(None, true).order_words(),
            "in the file's order, each part holding every expected answer in its share"
        );
    }
}
