//! The errors the engine returns; the error a [`Task`](super::Task) reports is `task`'s.

use thiserror::Error;

use super::budget::Spent;
use super::records::Failure;

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
