//! The prompt-evolution service (GEPA): the `Evolution` trait every backend implements, its wire
//! types (defined once here for the client, the local engine and `serve` alike), the contract's
//! start rules (shared by every backend that runs executions), reading histories page by page,
//! and `HttpEvolution`, the service over HTTP. The other backend, the built-in engine in process,
//! is `LocalEvolution` (gepa-lab's `local` module).
mod client;
mod history;
pub mod rules;
pub mod wire;

use async_trait::async_trait;

pub use client::{DEFAULT_EVOLUTION_URL, EvolutionConfig, HttpEvolution, config_from_env};
pub use history::{History, MAX_GENERATIONS, PAGE_LIMIT, fetch_history, find_by_custom_id};
use wire::{BatchJobs, Execution, HistoryRecord, StartExecution};

use gepa_lab_engine::IterationRecord;
use gepa_lab_http::ApiError;

/// A prompt-evolution backend: the service over HTTP, or the built-in engine in process.
#[async_trait]
pub trait Evolution: Send + Sync {
    /// Starts an execution and returns its evolutionId. The evolution runs asynchronously.
    async fn start(&self, request: &StartExecution) -> Result<String, EvolutionError>;
    /// The current state of one execution.
    async fn get(&self, evolution_id: &str) -> Result<Execution, EvolutionError>;
    /// One page (numbered from 1) of the caller's executions.
    async fn list(
        &self,
        page: Option<u32>,
        limit: Option<u32>,
    ) -> Result<Vec<Execution>, EvolutionError>;
    /// One page (numbered from 1) of an execution's history.
    async fn prompts(
        &self,
        evolution_id: &str,
        page: Option<u32>,
        limit: Option<u32>,
    ) -> Result<Vec<HistoryRecord>, EvolutionError>;
    async fn batch_jobs(&self) -> Result<BatchJobs, EvolutionError>;
    /// Up to [`ITERATIONS_LIMIT`] records of an execution's iterations after iteration `after`
    /// (0 for the first), in order: what the engine tried and why it kept or dropped each
    /// proposal. An extension beyond the contract, offered by the built-in engine and by
    /// `gepa-lab serve`; `Ok(None)` from a service that does not offer it.
    async fn iterations(
        &self,
        _evolution_id: &str,
        _after: usize,
    ) -> Result<Option<Vec<IterationRecord>>, EvolutionError> {
        Ok(None)
    }
}

/// How serve's 404 for an execution it does not know begins; the client tells it from a 404 for
/// a route the service lacks by it.
pub const UNKNOWN_EXECUTION: &str = "no execution with evolutionId";

/// Iteration records per [`Evolution::iterations`] call.
pub const ITERATIONS_LIMIT: usize = 200;

#[derive(Debug, thiserror::Error)]
pub enum EvolutionError {
    /// The service answered with an error, or did not answer.
    #[error(transparent)]
    Api(#[from] ApiError),
    /// No execution has this id.
    #[error("no execution with evolutionId {0}")]
    NotFound(String),
    /// The request breaks a rule of the contract (a start request's rules, or a page numbered
    /// from 0), as a local backend checks it; the text names each rule and the value seen.
    #[error("invalid request: {0}")]
    Invalid(String),
    /// A local backend could not record an execution; nothing was started.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A local backend's store that could not record a change (see gepa-lab's
/// `local::ExecutionStore`).
#[derive(Debug, thiserror::Error)]
#[error("execution store: {0}")]
pub struct StoreError(pub Box<dyn std::error::Error + Send + Sync>);

/// Model suffixes the evolution service supports; ids are `<word>-<suffix>`, where the word is
/// configuration (see [`ServiceProfile`]).
pub const MODEL_SUFFIXES: [&str; 5] = ["5-mini", "5", "4.1", "4o", "4o-mini"];

/// Names that differ between deployments of the two services. Never hard-coded in logic: read
/// from the environment, with the public deployment's values as defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceProfile {
    /// The fixed word of evolution model ids (`<word>-4o-mini`).
    pub model_word: String,
    /// The largest budget a start request may ask for; none for the public service, whose
    /// contract states no maximum. `serve` sets one (`--max-budget`), since the budget is what
    /// an execution runs for and keeps in memory.
    pub max_budget: Option<u64>,
}

impl Default for ServiceProfile {
    fn default() -> Self {
        Self {
            model_word: "gpt".to_owned(),
            max_budget: None,
        }
    }
}

impl ServiceProfile {
    /// The defaults, overridden by `GEPA_LAB_MODEL_WORD`.
    pub fn from_env() -> Self {
        let mut profile = Self::default();
        if let Some(word) = gepa_lab_env::var(gepa_lab_env::MODEL_WORD) {
            profile.model_word = word;
        }
        profile
    }

    /// Every supported evolution model id under this profile.
    pub fn models(&self) -> Vec<String> {
        MODEL_SUFFIXES
            .iter()
            .map(|suffix| format!("{}-{suffix}", self.model_word))
            .collect()
    }

    pub fn supports(&self, model: &str) -> bool {
        model
            .strip_prefix(&self.model_word)
            .and_then(|rest| rest.strip_prefix('-'))
            .is_some_and(|suffix| MODEL_SUFFIXES.contains(&suffix))
    }
}
