//! `run.json`: the run record. One list of executions, each with its variant, its plan and its
//! [`ExecutionState`].
//!
//! Format 2 (written now) keeps each execution's plan beside its state. Format 1 kept the plan's
//! executions and the records of what happened to them in two lists joined by position, and the
//! state as loose fields (`evolution_id`, `start_sent`, a free-text `status`, `error`). A format-1
//! file is read and converted on the spot, so older run directories still render and resume; the
//! next save writes it as format 2. A damaged or edited file is an error that names the file and
//! the field, never a panic.
use std::path::Path;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::StoreError;
use gepa_lab_evolution::wire::Status;
use gepa_lab_experiment::{ExecutionPlan, PlanSummary};

/// Version of the `run.json` format; bumped when a reader would misread an older one.
pub const FORMAT_VERSION: u32 = 2;

/// Where the services of a run were.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Backend {
    /// The public services.
    Remote {
        evolution_url: String,
        inference_url: String,
    },
    /// The built-in engine and the embedded model, in process.
    Local,
    /// A `gepa-lab serve` (or another deployment of both APIs) at one address.
    Url { url: String },
}

impl std::fmt::Display for Backend {
    /// Where the services were, as reports and `gepa-lab view` say it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Remote {
                evolution_url,
                inference_url,
            } => write!(
                f,
                "public services (evolution {evolution_url}, inference {inference_url})"
            ),
            Self::Local => f.write_str("local engine and embedded model"),
            Self::Url { url } => write!(f, "gepa-lab serve at {url}"),
        }
    }
}

/// Where one execution stands, as far as the run knows. Each state carries exactly what it
/// needs: only a started execution has an evolutionId, only a failed one has a reason.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ExecutionState {
    /// No start request has been sent.
    NotSent,
    /// A start request was sent and no answer was recorded: the run stopped while it was in
    /// flight, or it failed in a way that may have reached the service. A resume looks the
    /// customId up before sending it again, so that it never starts twice. `error` is why the
    /// last attempt failed, when it did.
    StartSent {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
        /// When the last start request went out (none in files written before it was kept).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        sent_at: Option<DateTime<Utc>>,
    },
    /// The service accepted the start and last said `status`: pending, in_progress, or a state
    /// the contract does not name. `note` says why the run stopped waiting (a time-out).
    Running {
        evolution_id: String,
        status: Status,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        note: Option<String>,
    },
    /// The service reported the execution completed.
    Finished { evolution_id: String },
    /// The execution failed, its start was refused, or the service does not know it.
    Failed {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        evolution_id: Option<String>,
        reason: String,
    },
}

impl ExecutionState {
    /// The state after the service said `status` about a started execution.
    pub fn reported(evolution_id: String, status: Status, error: Option<String>) -> Self {
        match status {
            Status::Completed => Self::Finished { evolution_id },
            Status::Failed => Self::Failed {
                evolution_id: Some(evolution_id),
                reason: error.unwrap_or_else(|| {
                    "the service reported the execution as failed, without a reason".into()
                }),
            },
            status => Self::Running {
                evolution_id,
                status,
                note: None,
            },
        }
    }

    pub fn evolution_id(&self) -> Option<&str> {
        match self {
            Self::Running { evolution_id, .. } | Self::Finished { evolution_id } => {
                Some(evolution_id)
            }
            Self::Failed { evolution_id, .. } => evolution_id.as_deref(),
            Self::NotSent | Self::StartSent { .. } => None,
        }
    }

    /// Finished or failed: nothing more will happen to it.
    pub fn is_final(&self) -> bool {
        matches!(self, Self::Finished { .. } | Self::Failed { .. })
    }

    pub fn is_finished(&self) -> bool {
        matches!(self, Self::Finished { .. })
    }

    /// Started and not final: the run polls it.
    pub fn is_running(&self) -> bool {
        matches!(self, Self::Running { .. })
    }

    /// One word or two for tables: `not sent`, `start sent`, the service's own status while it
    /// runs, `completed` or `failed`.
    pub fn status_text(&self) -> String {
        match self {
            Self::NotSent => "not sent".into(),
            Self::StartSent { .. } => "start sent".into(),
            Self::Running { status, .. } => status.to_string(),
            Self::Finished { .. } => Status::Completed.to_string(),
            Self::Failed { .. } => Status::Failed.to_string(),
        }
    }

    /// What went wrong or is pending, in words, when anything did.
    pub fn problem(&self) -> Option<&str> {
        match self {
            Self::StartSent { error, .. } => error.as_deref(),
            Self::Running { note, .. } => note.as_deref(),
            Self::Failed { reason, .. } => Some(reason),
            Self::NotSent | Self::Finished { .. } => None,
        }
    }
}

/// One execution of the run: its plan, and what happened to it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ExecutionRecord {
    pub custom_id: String,
    pub state: ExecutionState,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<DateTime<Utc>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<DateTime<Utc>>,
    /// Calls the execution spent, when the service says (the local engine and `serve` do;
    /// the evolution API's contract has no such field).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget_used: Option<u64>,
    pub plan: ExecutionPlan,
}

impl ExecutionRecord {
    /// A record of an execution not started yet.
    pub fn new(plan: ExecutionPlan) -> Self {
        Self {
            custom_id: plan.start.custom_id.clone().unwrap_or_default(),
            state: ExecutionState::NotSent,
            started_at: None,
            finished_at: None,
            budget_used: None,
            plan,
        }
    }

    /// The variant as the CSV files spell it: empty for a file without variants.
    pub fn variant(&self) -> &str {
        self.plan.variant.as_deref().unwrap_or_default()
    }
}

/// `run.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunManifest {
    pub format_version: u32,
    pub run_id: String,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub backend: Backend,
    /// True when any answer came from the deterministic test stand-in model: such a run says
    /// nothing about real models, and every report of it says so.
    #[serde(default)]
    pub simulated: bool,
    /// Set when the run went through to the end (executions final or timed out, replay written);
    /// a run without it can be resumed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<DateTime<Utc>>,
    /// The run's seed (`run --seed`, `[engine] seed`, or drawn): each execution's engine seed,
    /// in its start request, is derived from it. None for the public service, which takes none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    pub plan: PlanSummary,
    pub executions: Vec<ExecutionRecord>,
}

impl RunManifest {
    /// The execution of `variant` (empty for a file without variants).
    pub fn execution(&self, variant: &str) -> Option<&ExecutionRecord> {
        self.executions.iter().find(|e| e.variant() == variant)
    }

    /// Where the run's services and models were, as a report's header says it. A local run
    /// whose engine evolves or reflects on a provider's model names each such role's model and
    /// provider: [`Backend`]'s own text would claim the embedded model did all of it.
    pub fn backend_description(&self) -> String {
        if self.backend != Backend::Local {
            return self.backend.to_string();
        }
        let mut roles: Vec<String> = Vec::new();
        for execution in &self.executions {
            let models = &execution.plan.models;
            for (role, model) in [("task", &models.task), ("reflection", &models.reflection)] {
                let Some(model) = model else { continue };
                let said = if model.is_embedded() {
                    format!("{role} model {} (embedded)", model.model())
                } else {
                    format!(
                        "{role} model {} of provider {}",
                        model.model(),
                        model.provider()
                    )
                };
                if !roles.contains(&said) {
                    roles.push(said);
                }
            }
        }
        if roles.iter().all(|role| role.ends_with("(embedded)")) {
            return self.backend.to_string();
        }
        format!("local engine; {}", roles.join(", "))
    }
}

/// Reads `run.json` of either format from `text`; `path` names the file in errors.
pub(super) fn parse(path: &Path, text: &str) -> Result<RunManifest, StoreError> {
    let error = |message: String| StoreError::Format {
        path: path.to_owned(),
        message,
    };
    let value: serde_json::Value =
        serde_json::from_str(text).map_err(|err| error(format!("not JSON: {err}")))?;
    let version = value
        .get("format_version")
        .ok_or_else(|| error("field `format_version`: missing".into()))?;
    let manifest = match version.as_u64() {
        Some(1) => {
            v1::convert(deserialize::<v1::RunManifest>(value).map_err(error)?).map_err(error)?
        }
        Some(2) => deserialize::<RunManifest>(value).map_err(error)?,
        Some(newer) if newer > u64::from(FORMAT_VERSION) => {
            return Err(error(format!(
                "field `format_version`: {newer} is newer than this gepa-lab reads \
                 ({FORMAT_VERSION}); upgrade gepa-lab to read this run"
            )));
        }
        _ => {
            return Err(error(format!(
                "field `format_version`: expected 1 or {FORMAT_VERSION}, found {version}"
            )));
        }
    };
    check(&manifest).map_err(error)?;
    Ok(manifest)
}

/// Deserializes with the path of the field that failed in the message (`executions[1].state`).
fn deserialize<T: serde::de::DeserializeOwned>(value: serde_json::Value) -> Result<T, String> {
    serde_path_to_error::deserialize(value).map_err(|err| {
        let field = err.path().to_string();
        format!("field `{field}`: {}", err.inner())
    })
}

/// What serde cannot check: the rules that tie the records together.
fn check(manifest: &RunManifest) -> Result<(), String> {
    if manifest.executions.is_empty() {
        return Err("field `executions`: empty; a run has at least one execution".into());
    }
    let mut variants = std::collections::HashSet::new();
    for (index, execution) in manifest.executions.iter().enumerate() {
        if !variants.insert(execution.variant()) {
            return Err(format!(
                "field `executions[{index}].plan.variant`: {:?} appears twice",
                execution.variant()
            ));
        }
        if let Err(err) = execution.plan.dataset.check_sizes() {
            return Err(format!("field `executions[{index}].plan.dataset`: {err}"));
        }
        if execution.state.evolution_id() == Some("") {
            return Err(format!(
                "field `executions[{index}].state.evolution_id`: empty"
            ));
        }
    }
    Ok(())
}

/// Format 1, read only to convert it.
mod v1 {
    use chrono::{DateTime, Utc};
    use serde::Deserialize;

    use super::{Backend, ExecutionState};
    use gepa_lab_evolution::wire::Status;
    use gepa_lab_experiment::Plan;

    #[derive(Deserialize)]
    pub struct RunManifest {
        pub run_id: String,
        pub created_at: DateTime<Utc>,
        pub updated_at: DateTime<Utc>,
        pub backend: Backend,
        #[serde(default)]
        pub simulated: bool,
        #[serde(default)]
        pub finished_at: Option<DateTime<Utc>>,
        pub plan: Plan,
        pub executions: Vec<ExecutionRecord>,
    }

    #[derive(Deserialize)]
    pub struct ExecutionRecord {
        #[serde(default)]
        pub variant: Option<String>,
        pub custom_id: String,
        #[serde(default)]
        pub evolution_id: Option<String>,
        #[serde(default)]
        pub start_sent: bool,
        #[serde(default)]
        pub status: Option<String>,
        #[serde(default)]
        pub error: Option<String>,
        #[serde(default)]
        pub started_at: Option<DateTime<Utc>>,
        #[serde(default)]
        pub finished_at: Option<DateTime<Utc>>,
        #[serde(default)]
        pub budget_used: Option<u64>,
    }

    /// Joins the two lists of format 1, which must match one to one.
    pub fn convert(old: RunManifest) -> Result<super::RunManifest, String> {
        let planned = old.plan.executions.len();
        if old.executions.len() != planned {
            return Err(format!(
                "field `executions`: {} entries, but `plan.executions` has {planned}; each \
                 planned execution needs exactly one record",
                old.executions.len()
            ));
        }
        let summary = old.plan.summary();
        let executions = old
            .plan
            .executions
            .into_iter()
            .zip(old.executions)
            .enumerate()
            .map(|(index, (plan, record))| {
                if record.variant != plan.variant {
                    return Err(format!(
                        "field `executions[{index}].variant`: {:?}, but the plan's execution \
                         {index} is variant {:?}",
                        record.variant.unwrap_or_default(),
                        plan.variant.unwrap_or_default()
                    ));
                }
                Ok(super::ExecutionRecord {
                    custom_id: record.custom_id,
                    state: state(
                        record.evolution_id,
                        record.start_sent,
                        record.status.as_deref(),
                        record.error,
                    ),
                    started_at: record.started_at,
                    finished_at: record.finished_at,
                    budget_used: record.budget_used,
                    plan,
                })
            })
            .collect::<Result<_, String>>()?;
        Ok(super::RunManifest {
            format_version: super::FORMAT_VERSION,
            run_id: old.run_id,
            created_at: old.created_at,
            updated_at: old.updated_at,
            backend: old.backend,
            simulated: old.simulated,
            finished_at: old.finished_at,
            seed: None,
            plan: summary,
            executions,
        })
    }

    /// The loose fields of format 1 as one state.
    fn state(
        evolution_id: Option<String>,
        start_sent: bool,
        status: Option<&str>,
        error: Option<String>,
    ) -> ExecutionState {
        let status = status.map(Status::from);
        match (evolution_id, status) {
            (evolution_id, Some(Status::Failed)) => ExecutionState::Failed {
                evolution_id,
                reason: error.unwrap_or_else(|| "failed; no reason was recorded".into()),
            },
            (Some(evolution_id), Some(Status::Completed)) => {
                ExecutionState::Finished { evolution_id }
            }
            (Some(evolution_id), status) => ExecutionState::Running {
                evolution_id,
                status: status.unwrap_or(Status::Pending),
                note: error,
            },
            // Completed without an evolutionId cannot be confirmed: ask the service again.
            (None, _) if start_sent => ExecutionState::StartSent {
                error,
                sent_at: None,
            },
            (None, _) => ExecutionState::NotSent,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FIXTURE: &str = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/fixtures/run/run.json"
    );

    fn fixture() -> serde_json::Value {
        serde_json::from_str(&std::fs::read_to_string(FIXTURE).unwrap()).unwrap()
    }

    fn parse_value(value: &serde_json::Value) -> Result<RunManifest, String> {
        parse(Path::new("run.json"), &value.to_string()).map_err(|e| e.to_string())
    }

    #[test]
    fn a_format_1_file_is_read_as_one_list_of_executions() {
        let manifest = parse_value(&fixture()).unwrap();
        assert_eq!(manifest.format_version, FORMAT_VERSION);
        assert_eq!(manifest.executions.len(), 2);
        assert_eq!(manifest.executions[1].variant(), "budget-30");
        assert_eq!(manifest.executions[1].plan.start.budget, 30);
        assert_eq!(
            manifest.executions[0].state,
            ExecutionState::Finished {
                evolution_id: "3f1c9a52-0b7e-4d1e-9c55-000000000001".into()
            }
        );
        // Written back as format 2, it reads the same.
        let text = serde_json::to_string(&manifest).unwrap();
        let again = parse(Path::new("run.json"), &text).unwrap();
        assert_eq!(again.executions[0].state, manifest.executions[0].state);
        assert_eq!(again.plan, manifest.plan);
    }

    #[test]
    fn a_local_run_on_providers_names_each_engine_roles_model_and_provider() {
        let mut manifest = parse_value(&fixture()).unwrap();
        manifest.backend = Backend::Local;
        let roles = |value: serde_json::Value| serde_json::from_value(value).unwrap();
        // No roles recorded (older runs), or only embedded ones: the embedded model did it all.
        assert_eq!(
            manifest.backend_description(),
            "local engine and embedded model"
        );
        let embedded = serde_json::json!({"provider": "local", "model": "local"});
        manifest.executions[0].plan.models =
            roles(serde_json::json!({"task": embedded, "reflection": embedded}));
        assert_eq!(
            manifest.backend_description(),
            "local engine and embedded model"
        );
        manifest.executions[0].plan.models = roles(serde_json::json!({
            "task": {"provider": "small", "model": "qwen-0.5b"},
            "reflection": {"provider": "large", "model": "qwen-1.5b"},
            "replay": [embedded],
        }));
        manifest.executions[1].plan.models = roles(serde_json::json!({
            "task": {"provider": "small", "model": "qwen-0.5b"},
            "reflection": embedded,
        }));
        assert_eq!(
            manifest.backend_description(),
            "local engine; task model qwen-0.5b of provider small, reflection model qwen-1.5b \
             of provider large, reflection model local (embedded)"
        );
        // Other backends say what they always said.
        manifest.backend = Backend::Url {
            url: "http://127.0.0.1:8080".into(),
        };
        assert_eq!(
            manifest.backend_description(),
            "gepa-lab serve at http://127.0.0.1:8080"
        );
    }

    #[test]
    fn format_1_states_map_to_the_state_they_meant() {
        let cases = [
            (None, false, None, ExecutionState::NotSent),
            (
                None,
                true,
                None,
                ExecutionState::StartSent {
                    error: None,
                    sent_at: None,
                },
            ),
            (
                Some("e"),
                true,
                Some("in_progress"),
                ExecutionState::Running {
                    evolution_id: "e".into(),
                    status: Status::InProgress,
                    note: None,
                },
            ),
            (
                None,
                true,
                Some("failed"),
                ExecutionState::Failed {
                    evolution_id: None,
                    reason: "failed; no reason was recorded".into(),
                },
            ),
            // Completed without an id cannot be confirmed: looked up again.
            (
                None,
                true,
                Some("completed"),
                ExecutionState::StartSent {
                    error: None,
                    sent_at: None,
                },
            ),
        ];
        for (id, sent, status, expected) in cases {
            let mut value = fixture();
            let record = &mut value["executions"][0];
            let object = record.as_object_mut().unwrap();
            object.remove("evolution_id");
            object.remove("status");
            if let Some(id) = id {
                object.insert("evolution_id".into(), id.into());
            }
            if let Some(status) = status {
                object.insert("status".into(), status.into());
            }
            object.insert("start_sent".into(), sent.into());
            let manifest = parse_value(&value).unwrap();
            assert_eq!(manifest.executions[0].state, expected, "{id:?} {status:?}");
        }
    }

    #[test]
    fn an_edited_file_is_an_error_naming_the_field_never_a_panic() {
        let mut shorter = fixture();
        shorter["executions"].as_array_mut().unwrap().pop();
        let err = parse_value(&shorter).unwrap_err();
        assert!(
            err.contains("run.json") && err.contains("`executions`: 1 entries"),
            "{err}"
        );

        let mut swapped = fixture();
        swapped["executions"].as_array_mut().unwrap().swap(0, 1);
        let err = parse_value(&swapped).unwrap_err();
        assert!(err.contains("`executions[0].variant`"), "{err}");

        let mut wrong_type = fixture();
        wrong_type["plan"]["executions"][1]["start"]["budget"] = "lots".into();
        let err = parse_value(&wrong_type).unwrap_err();
        assert!(err.contains("`plan.executions[1].start.budget`"), "{err}");

        let mut newer = fixture();
        newer["format_version"] = 7.into();
        let err = parse_value(&newer).unwrap_err();
        assert!(err.contains("newer than this gepa-lab reads"), "{err}");

        let current = parse_value(&fixture()).unwrap();
        let mut value = serde_json::to_value(&current).unwrap();
        value["executions"][1]["state"] = serde_json::json!({"kind": "finished"});
        let err = parse_value(&value).unwrap_err();
        assert!(
            err.contains("`executions[1].state`") && err.contains("evolution_id"),
            "{err}"
        );
        value["executions"][1]["state"] = serde_json::json!({"kind": "exploded"});
        assert!(parse_value(&value).unwrap_err().contains("exploded"));

        let mut unsplittable = serde_json::to_value(&current).unwrap();
        unsplittable["executions"][0]["plan"]["dataset"]["rows"] = 3.into();
        let err = parse_value(&unsplittable).unwrap_err();
        assert!(
            err.contains("`executions[0].plan.dataset`") && err.contains("usable rows"),
            "{err}"
        );

        let mut twice = serde_json::to_value(&current).unwrap();
        twice["executions"][1]["plan"]["variant"] = "budget-10".into();
        let err = parse_value(&twice).unwrap_err();
        assert!(err.contains("appears twice"), "{err}");

        assert!(
            parse(Path::new("run.json"), "{")
                .unwrap_err()
                .to_string()
                .contains("not JSON")
        );
    }

    #[test]
    fn a_poll_answer_becomes_the_state_it_means() {
        let id = || "e".to_owned();
        assert!(ExecutionState::reported(id(), Status::Completed, None).is_finished());
        let failed = ExecutionState::reported(id(), Status::Failed, Some("boom".into()));
        assert_eq!(failed.problem(), Some("boom"));
        assert!(failed.is_final());
        let odd = ExecutionState::reported(id(), Status::Other("paused".into()), None);
        assert!(odd.is_running());
        assert_eq!(odd.status_text(), "paused");
        assert_eq!(odd.evolution_id(), Some("e"));
    }
}
