//! An [`ExecutionStore`] in one append-only JSON Lines file: how `run --backend local` keeps the
//! built-in engine's executions in the run directory (`engine.jsonl`), so that `run --resume`
//! continues an evolution that was interrupted instead of losing it.
//!
//! Every change is one line, written with one `write` call before the engine goes on: a kill
//! can leave at most a torn last line, which [`FileExecutions::load`] skips and
//! [`FileExecutions::open`] cuts (at worst one call is paid for again). Loading replays the lines
//! in order into the executions they describe.
use std::path::{Path, PathBuf};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use super::call::CallRecord;
use super::store::{ExecutionState, ExecutionStore, StoredExecution};
use gepa_lab_engine::IterationRecord;
use gepa_lab_evolution::StoreError;
use gepa_lab_evolution::wire::HistoryRecord;
use gepa_lab_store::{append_json_line, cut_torn_tail, read_json_lines};

/// One change, as one line of the file.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "change", rename_all = "snake_case")]
enum Line {
    Execution {
        execution: Box<StoredExecution>,
    },
    State {
        evolution_id: String,
        state: ExecutionState,
    },
    History {
        evolution_id: String,
        record: HistoryRecord,
    },
    Iteration {
        evolution_id: String,
        record: Box<IterationRecord>,
    },
    Call {
        evolution_id: String,
        call: CallRecord,
    },
}

/// The store over `path`. Each change is appended to the file as it comes (see
/// [`append_json_line`]); nothing is held open between changes.
pub struct FileExecutions {
    path: PathBuf,
}

impl FileExecutions {
    /// The store over `path`, created when it does not exist. A torn last line is cut first, so
    /// that what is appended starts on a line of its own.
    pub fn open(path: &Path) -> Result<Self, gepa_lab_store::StoreError> {
        cut_torn_tail(path)?;
        // Created now, so that a folder that cannot hold it fails the start, not a later call.
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|source| gepa_lab_store::StoreError::Io {
                path: path.to_owned(),
                error: source,
            })?;
        Ok(Self {
            path: path.to_owned(),
        })
    }

    /// The executions the file describes, in creation order. A missing file holds none; a
    /// damaged line other than a torn last one is an error naming the file and the line.
    pub fn load(path: &Path) -> Result<Vec<StoredExecution>, gepa_lab_store::StoreError> {
        let mut executions = Vec::new();
        read_json_lines(path, |line| apply(&mut executions, line))?;
        Ok(executions)
    }

    fn append(&self, line: &Line) -> Result<(), StoreError> {
        let bytes = serde_json::to_vec(line).map_err(|err| StoreError(Box::new(err)))?;
        append_json_line(&self.path, bytes).map_err(|err| StoreError(Box::new(err)))
    }
}

/// Applies one change to the executions read so far. A change for an execution the file never
/// introduced is ignored.
fn apply(executions: &mut Vec<StoredExecution>, line: Line) {
    match line {
        Line::Execution { execution } => executions.push(*execution),
        Line::State {
            evolution_id,
            state,
        } => {
            if let Some(execution) = by_id(executions, &evolution_id) {
                // Calls matter only to an execution that will continue.
                if state.status.is_final() {
                    execution.calls.clear();
                }
                execution.state = state;
            }
        }
        Line::History {
            evolution_id,
            record,
        } => {
            if let Some(execution) = by_id(executions, &evolution_id) {
                execution
                    .history
                    .retain(|known| known.generation != record.generation);
                execution.history.push(record);
            }
        }
        Line::Iteration {
            evolution_id,
            record,
        } => {
            if let Some(execution) = by_id(executions, &evolution_id) {
                execution
                    .iterations
                    .retain(|known| known.iteration() != record.iteration());
                execution.iterations.push(*record);
            }
        }
        Line::Call { evolution_id, call } => {
            if let Some(execution) = by_id(executions, &evolution_id) {
                execution.calls.push(call);
            }
        }
    }
}

fn by_id<'a>(executions: &'a mut [StoredExecution], id: &str) -> Option<&'a mut StoredExecution> {
    executions
        .iter_mut()
        .find(|execution| execution.evolution_id == id)
}

#[async_trait]
impl ExecutionStore for FileExecutions {
    async fn insert(&self, execution: &StoredExecution) -> Result<(), StoreError> {
        self.append(&Line::Execution {
            execution: Box::new(execution.clone()),
        })
    }

    async fn save_state(
        &self,
        evolution_id: &str,
        state: &ExecutionState,
    ) -> Result<(), StoreError> {
        self.append(&Line::State {
            evolution_id: evolution_id.to_owned(),
            state: state.clone(),
        })
    }

    async fn add_history(
        &self,
        evolution_id: &str,
        record: &HistoryRecord,
    ) -> Result<(), StoreError> {
        self.append(&Line::History {
            evolution_id: evolution_id.to_owned(),
            record: record.clone(),
        })
    }

    async fn add_iteration(
        &self,
        evolution_id: &str,
        record: &IterationRecord,
    ) -> Result<(), StoreError> {
        self.append(&Line::Iteration {
            evolution_id: evolution_id.to_owned(),
            record: Box::new(record.clone()),
        })
    }

    async fn add_call(&self, evolution_id: &str, call: &CallRecord) -> Result<(), StoreError> {
        self.append(&Line::Call {
            evolution_id: evolution_id.to_owned(),
            call: call.clone(),
        })
    }
}
