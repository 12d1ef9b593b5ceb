//! Errors the engine returns and the error type a [`Task`](super::Task) reports.

use std::error::Error;
use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use thiserror::Error;

use super::budget::Spent;
use super::records::Failure;

/// A failed model call or scoring, as the adapter reports it.
///
/// It wraps the adapter's own error (for example the `http` layer's `ApiError`) so a caller can
/// downcast it through [`TaskError::inner`]; it is cheap to clone because the same failure is
/// kept in the run's records and sent to the observer.
#[derive(Debug, Clone, Error)]
#[error(transparent)]
pub struct TaskError(Arc<dyn Error + Send + Sync>);

impl TaskError {
    /// Wrap any error, or a message (`&str` and `String` convert too).
    pub fn new(error: impl Into<Box<dyn Error + Send + Sync>>) -> Self {
        Self(Arc::from(error.into()))
    }

    /// The adapter's original error.
    pub fn inner(&self) -> &(dyn Error + Send + Sync + 'static) {
        &*self.0
    }
}

// Records holding a task error compare equal when the errors say the same thing, which is what
// a serialised record keeps of them.
impl PartialEq for TaskError {
    fn eq(&self, other: &Self) -> bool {
        self.to_string() == other.to_string()
    }
}

impl Serialize for TaskError {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// A recorded error comes back as its message: what serialising it kept.
impl<'de> Deserialize<'de> for TaskError {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        String::deserialize(deserializer).map(TaskError::new)
    }
}

/// Why a run could not produce any result. A run that started and then stopped on an error is
/// not an `EngineError`: it returns its records with [`StopReason::Failed`](super::StopReason).
#[derive(Debug, Error)]
pub enum EngineError {
    /// A setting breaks a rule; nothing was spent.
    #[error("engine setting `{field}` is {value}: {rule}")]
    Config {
        field: &'static str,
        value: String,
        rule: &'static str,
    },
    /// The task's dataset is smaller than the feedback and Pareto sets together; nothing was spent.
    #[error(
        "the dataset has {available} examples but minibatch {minibatch} + pareto {pareto} need {}",
        minibatch + pareto
    )]
    Dataset {
        available: usize,
        minibatch: usize,
        pareto: usize,
    },
    /// The budget cannot pay for scoring the seed prompt on the Pareto set, which every run needs
    /// before it can compare anything; nothing was spent.
    #[error(
        "budget {budget} cannot cover the seed prompt's Pareto evaluation ({needed} calls); nothing was spent"
    )]
    BudgetTooSmall { budget: u64, needed: u64 },
    /// Scoring the seed prompt failed, so there is no candidate to report.
    #[error("the seed prompt's Pareto evaluation failed after {} calls: {failure}", spent.total())]
    SeedEvaluation { spent: Spent, failure: Failure },
}
