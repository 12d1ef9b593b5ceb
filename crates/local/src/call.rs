//! One paid call of a local execution and its result, as the checkpoint keeps it: what the
//! journal records and replays, and what an execution store persists.
use serde::{Deserialize, Serialize};

use gepa_lab_engine::{Evaluation, Reflection, TaskError};

/// One paid call and its result, as the checkpoint keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "call", rename_all = "snake_case")]
pub enum CallRecord {
    Evaluate {
        /// SHA-256 of the prompt template, in hex.
        prompt: String,
        example: usize,
        result: CallResult<Evaluation>,
    },
    Reflect {
        /// SHA-256 of the reflection request, in hex.
        request: String,
        result: CallResult<Reflection>,
    },
}

/// What a call returned: its value, or the error it failed with.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CallResult<T> {
    Answered(T),
    Failed(String),
}

impl<T: Clone> CallResult<T> {
    pub(crate) fn of(result: &Result<T, TaskError>) -> Self {
        match result {
            Ok(value) => Self::Answered(value.clone()),
            Err(error) => Self::Failed(error.to_string()),
        }
    }

    pub(crate) fn into_result(self) -> Result<T, TaskError> {
        match self {
            Self::Answered(value) => Ok(value),
            Self::Failed(error) => Err(TaskError::new(error)),
        }
    }
}
