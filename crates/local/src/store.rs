//! What `LocalEvolution` remembers of an execution, and the hook through which a caller makes it
//! durable (`serve` writes it to SQLite). The hook is told of every change as it happens, in
//! order; `LocalEvolution` keeps its own copy in memory and never reads the hook back, except
//! through [`LocalEvolution::restore`](super::LocalEvolution::restore) at start-up.
use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use super::call::CallRecord;
use gepa_lab_engine::IterationRecord;
use gepa_lab_evolution::StoreError;
use gepa_lab_evolution::wire::{Execution, HistoryRecord, PromptState, StartExecution, Status};

/// One execution as a backend keeps it: the request it was started with (so it can be run
/// again), its seed, its state and its history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredExecution {
    pub evolution_id: String,
    /// Who started it (`serve`'s key id); `None` for in-process use. Only the owner sees it.
    pub owner: Option<String>,
    /// The request, with its customId filled in when the caller left it out.
    pub request: StartExecution,
    /// Seeds the engine: a run started again from this record makes the same random choices.
    pub seed: u64,
    pub state: ExecutionState,
    /// ISO 8601 (RFC 3339, UTC).
    pub created_at: String,
    /// One record per accepted candidate, the seed prompt (generation 0) first.
    #[serde(default)]
    pub history: Vec<HistoryRecord>,
    /// One record per iteration the engine finished, in order.
    #[serde(default)]
    pub iterations: Vec<IterationRecord>,
    /// The checkpoint: every paid call's result (see [`journal`](super::journal)). Loaded for an
    /// execution to continue; emptied once its engine has taken it.
    #[serde(default)]
    pub calls: Vec<CallRecord>,
}

/// The part of an execution that changes while it runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExecutionState {
    pub status: Status,
    /// Absent until the seed prompt has been scored.
    pub prompt: Option<PromptState>,
    /// Why a failed execution failed.
    pub error: Option<String>,
    /// Calls spent so far (task and reflection calls), when the engine has reported them.
    pub budget_used: Option<u64>,
}

impl StoredExecution {
    /// The execution as the API shows it.
    pub fn to_wire(&self) -> Execution {
        Execution {
            evolution_id: Some(self.evolution_id.clone()),
            custom_id: self.request.custom_id.clone(),
            strategy: Some(self.request.strategy.as_str().to_owned()),
            status: self.state.status.clone(),
            budget: Some(self.request.budget as f64),
            prompt: self.state.prompt.clone(),
            created_at: Some(self.created_at.clone()),
            error: self.state.error.clone(),
            budget_used: self.state.budget_used.map(|used| used as f64),
        }
    }
}

/// Makes executions durable. Calls for one execution arrive in order and never overlap, except
/// [`add_call`](Self::add_call), which the engine's parallel task calls make at the same time.
#[async_trait]
pub trait ExecutionStore: Send + Sync {
    /// A new execution, recorded before `start` returns its id: a start that was answered is
    /// never lost.
    async fn insert(&self, execution: &StoredExecution) -> Result<(), StoreError>;

    /// The status, prompt state or error changed. `in_progress` is recorded before the first
    /// model call, so a stored `pending` execution has spent nothing.
    async fn save_state(
        &self,
        evolution_id: &str,
        state: &ExecutionState,
    ) -> Result<(), StoreError>;

    /// A generation joined the history. Recording the same generation twice must keep one.
    async fn add_history(
        &self,
        evolution_id: &str,
        record: &HistoryRecord,
    ) -> Result<(), StoreError>;

    /// An iteration ended. Recording the same iteration twice (a resumed execution replays its
    /// iterations) must keep one.
    async fn add_iteration(
        &self,
        evolution_id: &str,
        record: &IterationRecord,
    ) -> Result<(), StoreError>;

    /// A paid call returned. It must be durable when this returns: the engine acts on the
    /// result only afterwards, so a checkpoint never lacks a call whose effect was recorded.
    async fn add_call(&self, evolution_id: &str, call: &CallRecord) -> Result<(), StoreError>;
}
