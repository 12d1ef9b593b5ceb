//! The engine behind `serve`'s evolution half: a `LocalEvolution` running on serve's own
//! upstream models (the catalog, as one `Inference`), with its executions written to SQLite and
//! loaded back at start-up.
//!
//! After a restart, executions left `pending` are run (none of their budget was spent: the
//! engine records `in_progress` before its first model call), and executions left `in_progress`
//! continue from their checkpoint, the result of every call they had paid for
//! (`local::journal`): only the calls in flight at the interruption are made again, and the
//! history ends as it would have without the restart.
use std::sync::Arc;

use async_trait::async_trait;
use reqwest::StatusCode;

use super::Catalog;
use super::db::{Db, DbError};
use super::evolution_store::SqliteExecutions;
use gepa_lab_evolution::{EvolutionError, ServiceProfile};
use gepa_lab_http::ApiError;
use gepa_lab_inference::wire::Model;
use gepa_lab_inference::{
    ChatRequest, ChatResponse, ChunkStream, Inference, InferenceError, ModelClass,
};
use gepa_lab_local::{ExecutionStore, LocalEvolution, LocalSettings, ModelSettings};

/// How `serve` runs evolutions.
#[derive(Debug, Clone, Default)]
pub struct EvolutionServeConfig {
    /// The upstream model every task call uses, whatever evolution model a request names;
    /// default: the first text model the upstreams serve.
    pub task_model: Option<String>,
    /// The upstream model that writes new prompts; default: the task model.
    pub reflection_model: Option<String>,
    /// Executions running at once; default 2.
    pub max_running: Option<usize>,
    /// Which evolution model ids requests may name.
    pub profile: ServiceProfile,
}

#[derive(Debug, thiserror::Error)]
pub enum EvolutionSetupError {
    #[error("{flag} {model:?}: no upstream serves this model (served: {served})")]
    UnknownModel {
        flag: &'static str,
        model: String,
        served: String,
    },
    #[error("no upstream serves a model the evolution engine could use")]
    NoModel,
    #[error("loading stored executions: {0}")]
    Load(DbError),
    #[error("restoring stored executions: {0}")]
    Restore(EvolutionError),
}

// By hand rather than `#[from]`, which would make the error a `source` as well as part of the
// message, and a report of the chain would say it twice.
impl From<DbError> for EvolutionSetupError {
    fn from(error: DbError) -> Self {
        Self::Load(error)
    }
}

impl From<EvolutionError> for EvolutionSetupError {
    fn from(error: EvolutionError) -> Self {
        Self::Restore(error)
    }
}

/// The catalog answers like one model service: each request goes to a node serving its model.
#[async_trait]
impl Inference for Catalog {
    async fn models(&self) -> Result<Vec<Model>, InferenceError> {
        Ok(Catalog::models(self))
    }

    async fn chat(&self, request: &ChatRequest) -> Result<ChatResponse, InferenceError> {
        self.node_for(&request.model)?.inference.chat(request).await
    }

    async fn chat_stream(&self, request: &ChatRequest) -> Result<ChunkStream, InferenceError> {
        self.node_for(&request.model)?
            .inference
            .chat_stream(request)
            .await
    }
}

impl Catalog {
    fn node_for(&self, model: &str) -> Result<Arc<super::Node>, InferenceError> {
        self.pick(model).ok_or_else(|| {
            InferenceError::Api(ApiError::Status {
                status: StatusCode::SERVICE_UNAVAILABLE,
                retry_after: None,
                body: format!("no node is available for model {model}"),
            })
        })
    }
}

/// Builds the engine, loads the stored executions and resumes or fails the unfinished ones.
pub async fn start(
    db: &Db,
    catalog: &Arc<Catalog>,
    config: &EvolutionServeConfig,
) -> Result<LocalEvolution, EvolutionSetupError> {
    let served = Catalog::models(catalog);
    let check = |flag: &'static str, model: &str| {
        if served.iter().any(|m| m.id == model) {
            Ok(model.to_owned())
        } else {
            Err(EvolutionSetupError::UnknownModel {
                flag,
                model: model.to_owned(),
                served: served
                    .iter()
                    .map(|m| m.id.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            })
        }
    };
    let task_model = match &config.task_model {
        Some(model) => check("--evolution-model", model)?,
        None => served
            .iter()
            .find(|m| ModelClass::of(&m.id) == ModelClass::Text)
            .or(served.first())
            .map(|m| m.id.clone())
            .ok_or(EvolutionSetupError::NoModel)?,
    };
    let reflection_model = match &config.reflection_model {
        Some(model) => check("--reflection-model", model)?,
        None => task_model.clone(),
    };
    tracing::info!(%task_model, %reflection_model, "evolution engine ready");
    let mut models = ModelSettings::new(task_model);
    models.reflection_model = reflection_model;
    let mut settings = LocalSettings::new(models);
    settings.profile = config.profile.clone();
    if let Some(max_running) = config.max_running {
        settings.max_running = max_running.max(1);
    }
    let store = SqliteExecutions::new(db.clone());
    let stored = store.load().await?;
    let inference: Arc<dyn Inference> = catalog.clone();
    let store: Arc<dyn ExecutionStore> = Arc::new(store);
    let evolution = LocalEvolution::new(Arc::clone(&inference), inference, settings, Some(store));
    let restored = evolution.restore(stored);
    tracing::info!(
        loaded = restored.loaded,
        resumed = restored.resumed.len(),
        continued = restored.continued.len(),
        "stored executions restored"
    );
    Ok(evolution)
}
