//! Experiment files: loading (TOML with spans, variants), validation against every rule of the
//! format and the evolution API, and the Plan that everything after validation reads.
//!
//! `Experiment` is the file as written; `Plan` is what it means, checked. No code after
//! [`validate_file`] re-checks input.
mod diagnostic;
mod file;
mod plan;
mod rules;
mod schema;
mod source;
pub mod starter;
mod validate;

pub use diagnostic::{Diagnostic, Location, Severity};
pub use file::*;
pub use plan::{
    DatasetPlan, Estimate, ExecutionPlan, ModelRoles, ModelSources, Plan, PlanSummary, ReplayPlan,
    TrackingPlan,
};
pub use rules::Rule;
pub use schema::json_schema;
pub use validate::{KNOWN_METRICS, Settings, Validation, name_chars, validate_file};
