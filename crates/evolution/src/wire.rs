//! Request and response bodies of the prompt-evolution API (`evolution-api.md`), field for field.
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Settings of gepa-lab's own engine (the built-in one and `gepa-lab serve`), sent in a start
/// request as `gepaLabEngine`: an extension beyond the contract, never sent to a service that
/// does not offer it (the experiment's `[engine]` table is refused for the public service).
/// Every field is optional; absent ones keep the engine's defaults.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EngineSettings {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reflection_minibatch: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reflection_model: Option<String>,
    /// The model every task call uses, whatever evolution model the request names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_model: Option<String>,
    /// How reflections become children; absent: follows the reflection model (an embedded
    /// one writes rules, any other rewrites).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proposer: Option<gepa_lab_engine::Proposer>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reflection_temperature: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reflection_max_tokens: Option<u32>,
    /// Stop starting iterations after this many seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_seconds: Option<u64>,
    /// Stop after this many iterations in a row without an accepted candidate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stall_iterations: Option<usize>,
    /// Stop once the best mean Pareto score reaches this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub score_threshold: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_error: Option<OnError>,
    /// Merge two lineages now and then; absent: on for strategy SAM, off for RPM.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub merge: Option<bool>,
    /// Task calls in flight at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parallel_calls: Option<usize>,
    /// Worked examples the engine may show in a prompt; 0 turns them off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub demonstrations: Option<usize>,
    /// The text of a reflection request of the user's own, with the placeholders
    /// `<curr_instructions>` and `<inputs_outputs_feedback>` (see `engine::ReflectionTemplate`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reflection_template: Option<String>,
    /// Seeds the engine's random choices and the models' sampling, 0 to 2^63 - 1 (see
    /// [`MAX_ENGINE_SEED`]); absent: a hash of the request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    /// The experiment's `[objectives]`: costs that choose the recommended candidate beside the
    /// score (see `engine::Objectives`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub objectives: Option<gepa_lab_engine::Objectives>,
}

/// The largest engine seed: 63 bits, so that stores with signed 64-bit integers keep it exactly.
pub const MAX_ENGINE_SEED: u64 = i64::MAX as u64;

impl EngineSettings {
    /// The keys set, as the experiment file names them.
    pub fn keys_set(&self) -> Vec<&'static str> {
        let set = [
            ("reflection_minibatch", self.reflection_minibatch.is_some()),
            ("reflection_model", self.reflection_model.is_some()),
            ("task_model", self.task_model.is_some()),
            ("proposer", self.proposer.is_some()),
            (
                "reflection_temperature",
                self.reflection_temperature.is_some(),
            ),
            (
                "reflection_max_tokens",
                self.reflection_max_tokens.is_some(),
            ),
            ("max_seconds", self.max_seconds.is_some()),
            ("stall_iterations", self.stall_iterations.is_some()),
            ("score_threshold", self.score_threshold.is_some()),
            ("on_error", self.on_error.is_some()),
            ("merge", self.merge.is_some()),
            ("parallel_calls", self.parallel_calls.is_some()),
            ("demonstrations", self.demonstrations.is_some()),
            ("reflection_template", self.reflection_template.is_some()),
            ("seed", self.seed.is_some()),
            ("objectives", self.objectives.is_some()),
        ];
        set.into_iter()
            .filter(|(_, on)| *on)
            .map(|(key, _)| key)
            .collect()
    }
}

/// What a failed model call does to an evolution of gepa-lab's engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnError {
    /// The first call that fails (after its retries) ends the evolution as failed.
    Fail,
    /// A failed call scores 0 (or fails one proposal) and the evolution goes on, until 3 calls
    /// in a row have failed.
    ScoreZero,
}

/// The contract's two strategies, written `RPM` and `SAM`. The body of a start request carries
/// the name as text, and a service must answer any other text with a 400 naming the rule: the
/// server reads it in [`parse_start`](crate::rules::parse_start), an experiment file in its
/// validation, and past those edges it is this type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Strategy {
    /// Reflective prompt mutation.
    Rpm,
    /// Adds merges of two lineages (our reading of "system-aware merge").
    Sam,
}

impl Strategy {
    pub const ALL: [Strategy; 2] = [Strategy::Rpm, Strategy::Sam];

    /// The name as the contract writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Strategy::Rpm => "RPM",
            Strategy::Sam => "SAM",
        }
    }

    /// The strategy `name` is, exactly as the contract writes it (the service is case-sensitive).
    pub fn parse(name: &str) -> Option<Strategy> {
        Strategy::ALL.into_iter().find(|s| s.as_str() == name)
    }
}

/// Body of `POST /gepa/start_execution`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StartExecution {
    pub strategy: Strategy,
    pub model: String,
    pub dataset_columns: Vec<String>,
    pub budget: u64,
    pub minibatch_size: u64,
    pub pareto_size: u64,
    /// The evaluator configuration as a JSON string (see [`Evaluator`]).
    pub evaluator: String,
    pub dataset: Vec<DatasetItem>,
    pub prompt: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub custom_id: Option<String>,
    /// gepa-lab's extension (see [`EngineSettings`]); absent for the public service.
    #[serde(
        default,
        rename = "gepaLabEngine",
        skip_serializing_if = "Option::is_none"
    )]
    pub engine: Option<EngineSettings>,
}

/// One row of the dataset sent to the service.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DatasetItem {
    pub input: BTreeMap<String, String>,
    pub expected_output: String,
}

/// The evaluator configuration, which travels as a JSON string inside [`StartExecution`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Evaluator {
    pub model: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metric: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threshold: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partial_credit: Option<bool>,
}

impl Evaluator {
    pub fn to_json_string(&self) -> String {
        serde_json::to_string(self).expect("an evaluator is plain JSON")
    }
}

/// Response of `POST /gepa/start_execution`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Started {
    pub evolution_id: String,
}

/// The states the contract names. Anything else a service says is kept as written, so that a new
/// state is shown to the user instead of failing the poll.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Status {
    Pending,
    InProgress,
    Completed,
    Failed,
    Other(String),
}

impl Status {
    pub fn as_str(&self) -> &str {
        match self {
            Self::Pending => "pending",
            Self::InProgress => "in_progress",
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Other(other) => other,
        }
    }

    /// `completed` and `failed` end an execution; polling stops there.
    pub fn is_final(&self) -> bool {
        matches!(self, Self::Completed | Self::Failed)
    }
}

impl From<&str> for Status {
    fn from(text: &str) -> Self {
        match text {
            "pending" => Self::Pending,
            "in_progress" => Self::InProgress,
            "completed" => Self::Completed,
            "failed" => Self::Failed,
            other => Self::Other(other.to_owned()),
        }
    }
}

impl Serialize for Status {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Status {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        Ok(Self::from(text.as_str()))
    }
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The current state of an evolution, as `get_single_execution` reports it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PromptState {
    #[serde(default)]
    pub current_prompt: Option<String>,
    #[serde(default)]
    pub current_prompt_score: Option<f64>,
    #[serde(default)]
    pub current_generation: Option<f64>,
}

/// An evolution session. Parsed leniently: the contract documents `prompt` as required but
/// clients must tolerate its absence, and the single-execution response has no `evolutionId`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Execution {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evolution_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub custom_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strategy: Option<String>,
    pub status: Status,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt: Option<PromptState>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_at: Option<String>,
    /// Why a failed execution failed, when the service says (not in the contract; `serve` and the
    /// local engine fill it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Calls spent so far, task and reflection calls alike (not in the contract; `serve` and the
    /// local engine fill it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget_used: Option<f64>,
}

/// One generation of an evolution's history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HistoryRecord {
    pub generation: f64,
    pub score: f64,
    pub prompt: String,
    /// The candidate's score on each Pareto row, in the order of the Pareto set: `score` is
    /// their mean. Not in the contract; `serve` and the local engine fill it, and the report
    /// shows with it which rows each candidate wins.
    #[serde(
        default,
        rename = "paretoScores",
        skip_serializing_if = "Option::is_none"
    )]
    pub pareto_scores: Option<Vec<f64>>,
    /// The candidate's mean cost per answer on its Pareto rows (`engine::Costs`), when its
    /// answers had costs. Not in the contract; the local engine fills it, and the report weighs
    /// it against the score when the experiment sets `[objectives]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub costs: Option<gepa_lab_engine::Costs>,
}

/// Response of `get_execution_prompts`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PromptsPage {
    #[serde(default)]
    pub prompts: Vec<HistoryRecord>,
}

/// Response of `get_execution_iterations`, gepa-lab's extension beyond the contract: what each
/// iteration of an execution tried and why its proposal was kept or dropped.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IterationsPage {
    #[serde(default)]
    pub iterations: Vec<gepa_lab_engine::IterationRecord>,
}

/// The keys under which a `get_all_executions` answer that is an object may hold its array, in
/// the order they are tried.
const EXECUTION_LIST_KEYS: [&str; 5] = ["executions", "executionList", "data", "items", "results"];

/// Response of `get_all_executions`. Its shape is not in the contract, so a bare array and an
/// object holding the array under a common key ([`EXECUTION_LIST_KEYS`]) are both accepted.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ExecutionList {
    pub executions: Vec<Execution>,
}

impl<'de> Deserialize<'de> for ExecutionList {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let value = serde_json::Value::deserialize(deserializer)?;
        let items = match &value {
            serde_json::Value::Array(_) => value.clone(),
            serde_json::Value::Object(object) => EXECUTION_LIST_KEYS
                .iter()
                .find_map(|key| object.get(*key).filter(|v| v.is_array()).cloned())
                .ok_or_else(|| D::Error::custom("no array of executions in the response"))?,
            _ => {
                return Err(D::Error::custom(
                    "expected an array or an object of executions",
                ));
            }
        };
        let executions = serde_json::from_value(items).map_err(D::Error::custom)?;
        Ok(Self { executions })
    }
}

/// One batch job of the caller.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BatchJob {
    #[serde(default)]
    pub status: Option<String>,
    #[serde(default)]
    pub created_at: Option<String>,
    #[serde(default)]
    pub file_id: Option<String>,
    #[serde(default)]
    pub task_count: Option<u64>,
    #[serde(default)]
    pub error_message: Option<String>,
    #[serde(default)]
    pub result_url: Option<String>,
}

/// Response of `GET /batch/all_jobs`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BatchJobs {
    #[serde(default)]
    pub success: bool,
    #[serde(default)]
    pub jobs: Vec<BatchJob>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn execution_tolerates_missing_prompt_unknown_status_and_fields() {
        let execution: Execution = serde_json::from_str(
            r#"{"status":"paused","customId":"x","budget":30,"createdAt":"2026-01-01T00:00:00Z","extra":1}"#,
        )
        .unwrap();
        assert_eq!(execution.status, Status::Other("paused".into()));
        assert!(!execution.status.is_final());
        assert!(execution.prompt.is_none());
        let full: Execution = serde_json::from_str(
            r#"{"status":"completed","prompt":{"currentPrompt":"p","currentPromptScore":0.8,"currentGeneration":3}}"#,
        )
        .unwrap();
        assert!(full.status.is_final());
        assert_eq!(full.prompt.unwrap().current_generation, Some(3.0));
    }

    #[test]
    fn execution_lists_in_any_common_shape() {
        for body in [
            r#"[{"status":"pending"}]"#,
            r#"{"executions":[{"status":"pending"}],"total":1}"#,
            r#"{"data":[{"status":"pending"}]}"#,
            r#"{"executionList":[{"status":"pending"}],"total":1}"#,
        ] {
            let list: ExecutionList = serde_json::from_str(body).unwrap();
            assert_eq!(list.executions.len(), 1, "{body}");
        }
        assert!(serde_json::from_str::<ExecutionList>(r#"{"count":0}"#).is_err());
    }

    #[test]
    fn start_execution_uses_the_service_field_names() {
        let body = StartExecution {
            strategy: Strategy::Rpm,
            model: "gpt-4o-mini".into(),
            dataset_columns: vec!["review".into()],
            budget: 30,
            minibatch_size: 1,
            pareto_size: 1,
            evaluator: Evaluator {
                model: "gpt-4o-mini".into(),
                metric: Some("exact_match".into()),
                threshold: None,
                partial_credit: Some(false),
            }
            .to_json_string(),
            dataset: vec![DatasetItem {
                input: BTreeMap::from([("review".into(), "ok".into())]),
                expected_output: "positive".into(),
            }],
            prompt: "{review}".into(),
            custom_id: None,
            engine: None,
        };
        let json = serde_json::to_value(&body).unwrap();
        let keys: Vec<&str> = json
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(
            keys,
            [
                "budget",
                "dataset",
                "datasetColumns",
                "evaluator",
                "minibatchSize",
                "model",
                "paretoSize",
                "prompt",
                "strategy"
            ]
        );
        assert_eq!(json["dataset"][0]["expectedOutput"], "positive");
        assert_eq!(
            json["evaluator"],
            r#"{"model":"gpt-4o-mini","metric":"exact_match","partialCredit":false}"#
        );
    }
}
