//! The local GEPA engine: the algorithm of the GEPA paper (arXiv 2507.19457) and its reference
//! implementation, run in-process.
//!
//! It owns the candidate pool with per-instance Pareto scores, parent selection, the epoch-shuffled
//! feedback sampler, reflective mutation (building the reflection text and parsing the answer),
//! strict-improvement acceptance, the optional merge of two lineages, budget accounting, stop
//! conditions, and the records of a run.
//!
//! It does not own models, prompt rendering, scoring or wire types: everything that touches the
//! outside world goes through the [`Task`] trait, which an adapter implements over the `inference`
//! and `score` modules. The `Evolution` backend (`LocalEvolution`) turns a [`Run`] and its
//! [`EngineEvent`]s into the evolution API's executions and history records.
//!
//! Data layout follows the evolution API: of the task's examples, the first `minibatch` are the
//! feedback set (the reflection model learns from them) and the next `pareto` are the Pareto set
//! (candidates are compared on them).

// The README's example runs as a doc test.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeExample;

mod budget;
mod cache;
mod config;
mod costs;
mod demonstrations;
mod error;
mod evidence;
mod labels;
mod merge;
mod objectives;
mod parts;
mod placeholders;
mod pool;
mod quotes;
mod records;
mod reflection;
mod run;
mod sampler;
#[cfg(test)]
mod stand_in;
mod task;

pub use budget::{Spent, reflections_assured, seed_affordable};
pub use config::{
    DEFAULT_PARALLEL_CALLS, DEFAULT_REFLECTION_MINIBATCH, EngineConfig, MAX_DEMONSTRATIONS,
    MergeConfig, OnTaskError, Proposer,
};
pub use costs::{
    AnswerCost, CostKind, Costs, MAX_WEIGHT, Objective, ObjectiveProblem, ObjectiveRule, Objectives,
};
pub use error::EngineError;
pub use evidence::{SeedEvidence, evidence_over_seed, may_be_best};
pub use labels::{FEW_LABELS, LABEL_CHARS, MAX_LABELS, is_label_set};
pub use objectives::{
    NOT_WORSE_P, ParetoComparison, Standing, cheapest_not_worse, frontier, recommend,
};
pub use records::{
    Best, CallKind, CandidateRecord, EngineEvent, Failure, IterationRecord, MergeRecord,
    MutationKind, MutationRecord, Outcome, PARETO_ACCEPT_P, Progress, ProposalFailure,
    ProposalKind, Run, StopReason, labels_are_numbers, sign_test, wins_and_losses,
};
pub use reflection::{MissingPlaceholders, ReflectionTemplate, input_last};
pub use run::run;
pub use task::{Evaluation, ExampleView, Reflection, Task, TaskError};
