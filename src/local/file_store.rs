//! An [`ExecutionStore`] in one append-only JSON Lines file: how `run --backend local` keeps the
//! built-in engine's executions in the run directory (`engine.jsonl`), so that `run --resume`
//! continues an evolution that was interrupted instead of losing it.
//!
//! Every change is one line, written with one `write` call before the engine goes on: a kill
//! can leave at most a torn last line, which [`FileExecutions::load`] skips (at worst one call
//! is paid for again). Loading replays the lines in order into the executions they describe.
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use super::journal::CallRecord;
use super::store::{ExecutionState, ExecutionStore, StoredExecution};
use crate::engine::IterationRecord;
use crate::evolution::StoreError;
use crate::evolution::wire::HistoryRecord;

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

/// A damaged line that is not the torn last one.
#[derive(Debug, thiserror::Error)]
#[error("{}: line {line}: {message}", path.display())]
pub struct FileStoreError {
    pub path: PathBuf,
    pub line: usize,
    pub message: String,
}

pub struct FileExecutions {
    path: PathBuf,
    file: Mutex<File>,
}

impl FileExecutions {
    /// Opens `path` for appending, creating it when it does not exist. A torn last line is cut
    /// first, so that what is appended starts on a line of its own.
    pub fn open(path: &Path) -> Result<Self, crate::store::StoreError> {
        crate::store::cut_torn_tail(path)?;
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|source| crate::store::StoreError::Io {
                path: path.to_owned(),
                source,
            })?;
        Ok(Self {
            path: path.to_owned(),
            file: Mutex::new(file),
        })
    }

    /// The executions the file describes, in creation order. A missing file holds none.
    pub fn load(path: &Path) -> Result<Vec<StoredExecution>, FileStoreError> {
        let file = match File::open(path) {
            Ok(file) => file,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(err) => {
                return Err(FileStoreError {
                    path: path.to_owned(),
                    line: 0,
                    message: err.to_string(),
                });
            }
        };
        let mut reader = BufReader::new(file);
        let mut executions: Vec<StoredExecution> = Vec::new();
        let mut text = Vec::new();
        for number in 1.. {
            let failed = |message: String| FileStoreError {
                path: path.to_owned(),
                line: number,
                message,
            };
            text.clear();
            if reader
                .read_until(b'\n', &mut text)
                .map_err(|err| failed(err.to_string()))?
                == 0
            {
                break;
            }
            let line = match serde_json::from_slice::<Line>(&text) {
                Ok(line) => line,
                // Only the last line can be torn, and only it lacks its line feed.
                Err(_) if !text.ends_with(b"\n") => break,
                Err(err) => return Err(failed(err.to_string())),
            };
            apply(&mut executions, line);
        }
        Ok(executions)
    }

    fn append(&self, line: &Line) -> Result<(), StoreError> {
        let mut bytes = serde_json::to_vec(line).map_err(|err| StoreError(Box::new(err)))?;
        bytes.push(b'\n');
        let mut file = self
            .file
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        file.write_all(&bytes)
            .map_err(|err| StoreError(format!("{}: {err}", self.path.display()).into()))
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
