//! The experiment file as written: plain serde types, one per TOML table.
//!
//! These types say what may be written and parse it; they do not judge it. Counts are `i64` so
//! that `budget = 0` or `minibatch = -1` reach the validator, which explains the rule, instead of
//! stopping in serde with a bare type error. The JSON Schema of the format (`gepa-lab schema`) is
//! generated from these types, and the unknown-key check reads that same schema, so a key added
//! here is known everywhere at once.
use std::collections::BTreeMap;
use std::path::PathBuf;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

// The ranges of counts that the validator checks, the schema states and the command-line
// options share.
/// Most answers per version and row (`replay.repeat`, `compare --repeat`).
pub const MAX_REPEAT: u32 = 100;
/// Most requests in flight in a replay (`replay.concurrency`, `compare --concurrency`); a key's
/// rate limit holds more back anyway, and a value past it is a typo.
pub const MAX_CONCURRENCY: u32 = 256;
/// Most tokens one answer may ask for (`replay.max_tokens`, `engine.reflection_max_tokens`,
/// `chat` and `compare --max-tokens`): the embedded models' whole context.
pub const MAX_ANSWER_TOKENS: u32 = 32_768;

/// A whole experiment file: one experiment, optionally with a matrix of variants.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
#[schemars(title = "gepa-lab experiment")]
pub struct ExperimentFile {
    #[serde(flatten)]
    pub experiment: Experiment,
    /// One execution per variant, each overriding keys of the experiment.
    #[serde(default)]
    pub variants: Vec<Variant>,
}

/// One experiment with every variant override applied.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct Experiment {
    /// `[a-z0-9_-]`, at most 40 characters; the base of the executions' customId.
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    pub prompt: PromptSection,
    pub dataset: DatasetSection,
    pub evolution: EvolutionSection,
    pub evaluator: EvaluatorSection,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replay: Option<ReplaySection>,
    /// Settings of gepa-lab's engine, for `--backend local` and `gepa-lab serve` only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine: Option<EngineSection>,
    /// Costs weighed beside the score when the run recommends a prompt (gepa-lab's engine
    /// only): each of `prompt_tokens`, `answer_tokens` and `latency_ms`, a mean per answer on
    /// the Pareto rows, with a hard `limit` or a `weight`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub objectives: Option<ObjectivesSection>,
    /// Where runs are tracked: each execution is logged as an MLflow run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tracking: Option<TrackingSection>,
    /// OpenAI-compatible servers by name (`[providers.ollama]`): a model written
    /// `<name>/<model-id>` is asked of that server for `<model-id>`. The user's config file may
    /// declare providers too; one of the same name here wins.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub providers: BTreeMap<String, ProviderSection>,
}

/// An OpenAI-compatible server that model references may name. The key is never written here:
/// `key_env` names the environment variable that holds it.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct ProviderSection {
    /// The base URL, http or https, as the provider documents it: `https://api.openai.com/v1`,
    /// `http://127.0.0.1:11434/v1` (a server's root works too).
    pub url: String,
    /// The name of the environment variable holding the key, sent as `Authorization: Bearer`;
    /// leave it out for a server without keys.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_env: Option<String>,
    /// Requests per minute to stay under, 1 to 100000: requests are spaced to it. Without it the
    /// client slows down on 429 answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100_000))]
    pub rpm: Option<i64>,
    /// Requests in flight at once, 1 to 1024 (default: no limit beyond the run's own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1024))]
    pub max_in_flight: Option<i64>,
    /// Seconds one request may take, 1 to 3600 (default: 130).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 3600))]
    pub timeout_secs: Option<i64>,
    /// Extra headers: a value written out (`"X-Title" = "gepa-lab"`), or `{ env = "VAR" }` for
    /// one read from an environment variable.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, gepa_lab_inference::provider::HeaderSource>,
}

/// An MLflow tracking server that logs every run of the experiment (`run --mlflow URL` gives
/// one on the command line instead).
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct TrackingSection {
    /// The tracking server's address: `http://host:port` (or https, with a path).
    pub mlflow: String,
    /// The MLflow experiment the runs go to (default: the experiment's `name`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub experiment: Option<String>,
}

/// Settings of gepa-lab's own GEPA engine (the built-in one, and `gepa-lab serve`'s). The
/// public evolution service takes none of them: a run against it refuses the table. Every key
/// is optional; an absent one keeps the engine's default.
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
pub struct EngineSection {
    /// Feedback rows shown to the reflection model per iteration, 1 to 64 (default 3, or 6 with
    /// an embedded reflection model); at most `dataset.minibatch` are used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 64))]
    pub reflection_minibatch: Option<i64>,
    /// The model that proposes new prompts: `local` or `local:<name>`, or `<provider>/<model>`
    /// for a local run (default: GEPA_LAB_REFLECTION_MODEL, else the catalog's reflection model);
    /// a model serve's upstreams serve for `gepa-lab serve`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reflection_model: Option<String>,
    /// The model the engine evolves the prompt on: `local`, `local:<name>` or
    /// `<provider>/<model>` (default: the first replay model, else `local`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_model: Option<String>,
    /// How the reflection model proposes children: `rules` (one general rule added per
    /// reflection, with the label glossary and the layout child: what a small model writes
    /// well) or `rewrite` (the reference implementation's whole new prompt). Default: rules
    /// for an embedded reflection model, rewrite for any other, so set `rules` for a small
    /// model served by a provider.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proposer: Option<String>,
    /// Temperature of the reflection model, 0 to 2 (default: the model's own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0.0, max = 2.0))]
    pub reflection_temperature: Option<f64>,
    /// Tokens per reflection answer, 1 to 32768 (default 400 for an embedded model).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = MAX_ANSWER_TOKENS))]
    pub reflection_max_tokens: Option<i64>,
    /// Start no iteration after this many seconds, 1 to 604800 (a week); the one in flight
    /// finishes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 604_800))]
    pub max_seconds: Option<i64>,
    /// Stop after this many iterations in a row without an accepted candidate, 1 to 10000.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 10_000))]
    pub stall_iterations: Option<i64>,
    /// Stop once the best mean Pareto score reaches this, 0 to 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0.0, max = 1.0))]
    pub score_threshold: Option<f64>,
    /// `score_zero` (default: a failed call scores 0 and the evolution goes on until 3 calls in
    /// a row fail) or `fail` (the first failed call ends it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_error: Option<String>,
    /// Merge two lineages now and then (GEPA+Merge); default: on for strategy SAM, off for RPM.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub merge: Option<bool>,
    /// Task calls in flight at once, 1 to 64 (default 16).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 64))]
    pub parallel_calls: Option<i64>,
    /// At most this many labelled feedback rows shown in the prompt as worked examples, 0 to 16:
    /// of a classification, one of each label, or in every second new set two of each of two or
    /// three labels; else 3. Default 8 for a classification, 0 (off) for other tasks. The engine
    /// offers the best prompt with them, and later with one swapped, each judged on the Pareto
    /// rows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 16))]
    pub demonstrations: Option<i64>,
    /// A file holding a reflection request of your own, relative to the experiment file. It must
    /// contain `<curr_instructions>` (the current prompt) and `<inputs_outputs_feedback>` (the
    /// minibatch), the reference implementation's placeholders, and should ask for the new
    /// prompt in a ``` fenced block. With it, the engine proposes whole prompts (even with an
    /// embedded reflection model, which otherwise writes rules).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reflection_template: Option<PathBuf>,
    /// The run's seed, 0 to 9223372036854775807 (2^63 - 1): each variant's engine seed and the
    /// models' sampling seeds are derived from it, so that a run repeats. `run --seed` overrides
    /// it; without either, each run draws one and records it in `run.json`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub seed: Option<i64>,
}

/// Costs the run weighs beside the score, each a mean per answer over a candidate's Pareto
/// rows. A candidate over a `limit` is never recommended; weights choose, among those within
/// the limits, the highest score less each weight times its cost. The search itself goes by
/// the score alone.
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
pub struct ObjectivesSection {
    /// Tokens of the prompt as the model counts them (the rendered prompt, row included).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_tokens: Option<ObjectiveSection>,
    /// Tokens of the model's answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer_tokens: Option<ObjectiveSection>,
    /// Milliseconds the model took to answer, as the backend measured it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_ms: Option<ObjectiveSection>,
}

/// One cost objective: exactly one of `limit` and `weight`.
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
pub struct ObjectiveSection {
    /// The most a recommended prompt may cost per answer, above 0: at most 1000000 tokens, or
    /// 3600000 ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<f64>,
    /// Score given up per token (or millisecond) when choosing the recommended prompt, above 0
    /// and at most 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<f64>,
}

/// The seed prompt: one text (`seed` or `seed_file`), or chat parts (`user`, with an optional
/// `system` and `turns`).
#[derive(Debug, Clone, Default, Deserialize, Serialize, JsonSchema)]
pub struct PromptSection {
    /// The prompt text; `{column}` placeholders name input columns, `{{` and `}}` are braces.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<String>,
    /// A file holding the prompt text, relative to the experiment file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed_file: Option<PathBuf>,
    /// A system message, sent before the turns and the user template; no `{column}`
    /// placeholders (it is the same for every row).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system: Option<String>,
    /// The user template: the message with the `{column}` placeholders, sent last.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// Few-shot turns, fixed, sent between the system message and the user template.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub turns: Vec<TurnSection>,
    /// The parts the evolution may change: `system`, `user` (default: both that the prompt
    /// has); the others are fixed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evolve: Option<Vec<String>>,
}

/// One few-shot exchange, sent as it is written: a user message and the assistant's answer.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct TurnSection {
    /// What the user says; no `{column}` placeholders.
    pub user: String,
    /// What the assistant answers.
    pub assistant: String,
}

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct DatasetSection {
    /// CSV file with a header row, relative to the experiment file.
    pub file: PathBuf,
    /// Columns passed to the prompt as input variables (the service's `datasetColumns`).
    pub inputs: Vec<String>,
    /// The column holding the expected output.
    pub expected: String,
    /// Rows used for feedback (the service's `minibatchSize`): the first rows.
    pub minibatch: i64,
    /// Rows used for validation (the service's `paretoSize`): the rows after the minibatch.
    pub pareto: i64,
    /// Rows after those kept for replay: "rest", a count, or "none".
    #[serde(default)]
    pub holdout: Holdout,
    /// Shuffle the rows with this seed before splitting.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shuffle_seed: Option<u64>,
    /// Give each part every expected answer in its share of the file, within about a row
    /// (after the shuffle, if any): for classifications, whose Pareto rows judge every
    /// candidate and would otherwise reward a lean to a label they hold too many of.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stratify: bool,
}

/// `holdout = "rest"`, `holdout = "none"` or `holdout = 20`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize, JsonSchema)]
#[serde(untagged)]
pub enum Holdout {
    Count(i64),
    Word(String),
}

impl Default for Holdout {
    fn default() -> Self {
        Self::Word("rest".to_owned())
    }
}

#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct EvolutionSection {
    /// `RPM` (reflective prompt mutation) or `SAM`.
    pub strategy: String,
    /// A supported evolution model, `<word>-<suffix>`.
    pub model: String,
    /// Inference calls the evolution may spend; at least 1, 25-50 recommended.
    pub budget: i64,
    /// The execution's name at the service; default: name, variant and a run suffix.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub custom_id: Option<String>,
}

/// Sent to the service as a JSON string.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct EvaluatorSection {
    /// A supported evolution model.
    pub model: String,
    /// `accuracy`, `exact_match`, `coherence`, or another metric the service knows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metric: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threshold: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partial_credit: Option<bool>,
}

/// Re-run the seed and the best prompts through the inference API on the holdout rows.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct ReplaySection {
    /// Model references: `local` or `local:<name>` (embedded), `<provider>/<model>` (a declared
    /// provider), or an inference API model id.
    pub models: Vec<String>,
    /// Replay the seed plus the best N prompts of each execution.
    #[serde(default = "default_top")]
    pub top: i64,
    /// Local scorer for the answers: exact_match, exact_match_ci, contains, regex:<pattern>,
    /// numeric[:tolerance], json_schema:<file>, json_match, f1 or judge.
    #[serde(default = "default_scorer")]
    pub scorer: String,
    /// Sampling temperature of the answers, 0 to 2.
    #[serde(default)]
    #[schemars(range(min = 0.0, max = 2.0))]
    pub temperature: f64,
    /// Tokens per answer, 1 to 32768; when absent the service default (2048) applies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = MAX_ANSWER_TOKENS))]
    pub max_tokens: Option<i64>,
    /// Requests in flight at once, 1 to 256; the key's rpm limit also applies.
    #[serde(default = "default_concurrency")]
    #[schemars(range(min = 1, max = MAX_CONCURRENCY))]
    pub concurrency: i64,
    /// Answers per version and holdout row (1 to 100). Above 1, each row is answered that
    /// many times (sensible with temperature above 0): the row's score is the mean of its
    /// answers, and the report shows how often they agree.
    #[serde(default = "default_repeat")]
    #[schemars(range(min = 1, max = MAX_REPEAT))]
    pub repeat: i64,
    /// Required by the `judge` scorer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub judge: Option<JudgeSection>,
}

/// The model and rubric of the `judge` scorer.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct JudgeSection {
    /// The model that grades the answers: a reference as in `replay.models`.
    pub model: String,
    /// What a correct answer looks like; shown to the judge with the expected output.
    pub rubric: String,
}

fn default_top() -> i64 {
    3
}

fn default_repeat() -> i64 {
    1
}

fn default_scorer() -> String {
    "exact_match".to_owned()
}

fn default_concurrency() -> i64 {
    16
}

/// A variant: a name, plus any keys of the experiment (except `name` and `variants`) to override.
/// The override tables are checked against the experiment's own tables when the file is loaded.
#[derive(Debug, Clone, Deserialize, Serialize, JsonSchema)]
pub struct Variant {
    /// Unique within the file; `[a-z0-9_-]`.
    pub name: String,
}
