//! Machine-readable exports beside the CSV files: `results.json` (versioned) and the replay
//! table in a columnar format for notebooks.
use serde::Serialize;

use super::context::{
    ComparisonView, ExecutionView, ExperimentView, MethodView, ReportContext, VersionScore,
};

/// Name of the results file in the run directory.
pub const RESULTS_FILE: &str = "results.json";

/// `results.json`: the numbers of the report without its prose, diffs and per-row tables. The
/// shape is versioned by `format_version` (the report context's version): a reader should check
/// it before reading further.
#[derive(Debug, Serialize)]
pub struct Results<'a> {
    pub format_version: u32,
    pub generator: String,
    pub simulated: bool,
    pub experiment: &'a ExperimentView,
    pub executions: &'a [ExecutionView],
    pub headline: Option<&'a ComparisonView>,
    pub comparisons: &'a [ComparisonView],
    pub versions: Vec<VersionResult<'a>>,
    pub method: &'a MethodView,
}

#[derive(Debug, Serialize)]
pub struct VersionResult<'a> {
    pub execution: &'a str,
    pub label: &'a str,
    pub generation: Option<u32>,
    pub is_seed: bool,
    pub is_best: bool,
    pub validation_score: Option<f64>,
    pub prompt: &'a str,
    pub scores: &'a [VersionScore],
}

pub fn results(context: &ReportContext) -> Results<'_> {
    Results {
        format_version: context.format_version,
        generator: format!("gepa-lab {}", env!("CARGO_PKG_VERSION")),
        simulated: context.simulated,
        experiment: &context.experiment,
        executions: &context.executions,
        headline: context.headline.as_ref(),
        comparisons: &context.comparisons,
        versions: context
            .versions
            .iter()
            .map(|v| VersionResult {
                execution: &v.execution,
                label: &v.label,
                generation: v.generation,
                is_seed: v.is_seed,
                is_best: v.is_best,
                validation_score: v.validation_score,
                prompt: &v.prompt,
                scores: &v.scores,
            })
            .collect(),
        method: &context.method,
    }
}
