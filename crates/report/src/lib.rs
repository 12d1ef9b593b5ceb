//! The report of a run: reads a run directory (and nothing else: no service, no dataset file),
//! checks it, computes totals and statistics, draws charts (plotters: SVG, and PNG when asked)
//! and renders `index.html` and `summary.md` (minijinja), plus `results.json` and
//! `replay.parquet`. `compare` sets the best versions of several runs on the same dataset against
//! each other.
//!
//! It never holds `replay.csv`'s records: `load` turns each answer into 37 bytes, sorted by version,
//! model and row through temporary files past 131,072 of them (`answers`), and counts the version
//! totals in one pass; `context::build` walks them row by row into summaries of bounded size and
//! reads back the records of the rows the page shows in a second pass, and `write` streams
//! `replay.parquet` from the file in a third. So a report's memory does not grow with the
//! holdout, whatever its texts.
//!
//! When the holdout rows' expected values are a set of labels (a classification), the report
//! also gives the majority-label baseline and each version's answers per label (`baseline`), and
//! says beside a score when it is no better than that baseline or nearly all one label.
//!
//! When the run directory has `iterations.jsonl`, the page and `summary.md` also show how each
//! execution's search went (`search`): the lineage of its candidates and every proposal.
//!
//! It does not own the run directory's format (the store does) and never writes outside the
//! run directory it was given, but for anonymous temporary files in `TMPDIR` (the sorted answers,
//! the answers' labels) that vanish when it ends.
//!
//! ```text
//! load(run_dir) → RunData ─┬─ answers: ReplayTable, VersionTotals ─┬─ context::build ─→ ReportContext ─┬─ html, markdown
//!   (replay.csv, pass 1)   ├─ tables: HistoryTotals ───────────────┘   (pass 2: shown rows, labels)   ├─ results.json
//!                          └─ charts::build → Charts ──────────────────────────────────────────────────┴─ charts/*.svg (*.png)
//! write: replay.parquet from replay.csv (pass 3, a row group at a time)
//! ```
mod answers;
mod baseline;
mod charts;
mod compare;
mod context;
mod diff;
mod export;
mod format;
pub mod gate;
mod html;
mod junit;
mod load;
mod markdown;
mod samples;
mod search;
pub mod stats;
mod tables;
mod terminal;

use std::path::{Path, PathBuf};

use thiserror::Error;

use gepa_lab_store::{REPLAY_FILE, RunDir, StoreError, write_atomic, write_atomic_with};

pub use baseline::{AnswerCounts, Baseline, Classification, LabelCount, Matching};
pub use charts::{Chart, Charts, RunPoint, runs_history};
pub use compare::{
    CompareReport, Contender, Pick, PromptDiff, PromptSetting, compare, compare_prompts,
};
pub use context::{
    Cell, ComparisonView, CostPoint, CostRole, CostRow, CostView, ExecutionView, ExperimentView,
    FORMAT_VERSION, InputField, MethodView, Recommendation, ReplayView, ReportContext, RowTable,
    RowView, VersionScore, VersionView,
};
pub use diff::{DiffStats, PartDiff, Segment, SegmentKind, part_diffs, word_diff};
pub use export::{REPLAY_PARQUET_FILE, RESULTS_FILE, Results};
pub use html::{render_compare, render_page_with};
pub use junit::junit;
pub use load::{Execution, IterationLog, PromptVersion, RunData, load};
pub use search::{LineageNode, OutcomeClass, ProposalView, ReasonCount, SearchSummary, SearchView};
pub use tables::{HistoryTotals, VersionTotals};

/// Files the report writes into the run directory.
pub const HTML_FILE: &str = "index.html";
pub const SUMMARY_FILE: &str = "summary.md";
pub const CHARTS_DIR: &str = "charts";
/// What `compare --prompts` writes beside its page: the comparison as JSON.
pub const COMPARE_FILE: &str = "compare.json";

#[derive(Debug, Error)]
pub enum ReportError {
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A record that contradicts the rest of the run directory.
    #[error("{}: record {record}: {message}", path.display())]
    Record {
        path: PathBuf,
        /// 1-based, counting data records after the header.
        record: usize,
        message: String,
    },
    #[error("computing tables: {0}")]
    Table(polars::error::PolarsError),
    #[error("drawing chart {chart}: {message}")]
    Chart { chart: String, message: String },
    #[error("rendering {name}: {message}")]
    Template { name: String, message: String },
    #[error("{}: {error}", path.display())]
    Io {
        path: PathBuf,
        error: std::io::Error,
    },
    /// A temporary file of the report (the sorted answers, their labels) that could not be
    /// written or read back.
    #[error(
        "{}: a temporary file of the report could not be written or read back: {error} (set TMPDIR to a writable directory with room for about 74 bytes per replay answer)",
        dir.display()
    )]
    TempFile { dir: PathBuf, error: std::io::Error },
    /// `compare` needs runs on the same data: different datasets make the paired test meaningless.
    #[error("{0}")]
    DifferentDatasets(Box<DatasetMismatch>),
    #[error("{}: {message}", run.display())]
    NothingToCompare { run: PathBuf, message: String },
}

// By hand rather than `#[from]`, which would make the error a `source` as well as part of the
// message, and a report of the chain would say it twice.
impl From<polars::error::PolarsError> for ReportError {
    fn from(error: polars::error::PolarsError) -> Self {
        Self::Table(error)
    }
}

/// Two runs given to `compare` whose plans name different dataset files.
#[derive(Debug, Error)]
#[error(
    "runs use different datasets: {} has {first_sha256} ({first_file}) but {} has {other_sha256} ({other_file}); compare needs the same dataset file",
    first_run.display(),
    other_run.display()
)]
pub struct DatasetMismatch {
    pub first_run: PathBuf,
    pub first_file: String,
    pub first_sha256: String,
    pub other_run: PathBuf,
    pub other_file: String,
    pub other_sha256: String,
}

impl ReportError {
    /// A temporary file's failure, in the system's temporary directory.
    fn temp_file(source: std::io::Error) -> Self {
        Self::TempFile {
            dir: std::env::temp_dir(),
            error: source,
        }
    }

    fn record(path: &Path, index: usize, message: String) -> Self {
        Self::Record {
            path: path.to_owned(),
            record: index + 1,
            message,
        }
    }

    fn template(name: &str) -> impl Fn(minijinja::Error) -> Self + '_ {
        move |err| Self::Template {
            name: name.to_owned(),
            // The alternate form carries the template line and the expression that failed.
            message: format!("{err:#}"),
        }
    }
}

/// What to render beyond the default files.
#[derive(Debug, Clone, Copy, Default)]
pub struct RenderOptions {
    /// Also draw each chart as `charts/<name>.png`, for a README or slides; the page still
    /// inlines the SVG.
    pub png: bool,
}

/// A rendered report, held in memory.
#[derive(Debug)]
pub struct Report {
    pub context: ReportContext,
    pub charts: Charts,
    pub html: String,
    pub markdown: String,
    pub results_json: String,
    /// The run directory the report was rendered from: [`write`] reads its `replay.csv` again,
    /// a row group at a time, for `replay.parquet`.
    pub source: PathBuf,
    pub version_totals: Vec<VersionTotals>,
}

/// Loads a run directory and renders every part of its report, writing nothing.
pub fn build(run_dir: &Path, options: RenderOptions) -> Result<Report, ReportError> {
    render(&load(run_dir)?, options)
}

/// Renders the report of a loaded run.
pub fn render(run: &RunData, options: RenderOptions) -> Result<Report, ReportError> {
    let version_totals = run.replay.version_totals();
    let history_totals = tables::history_totals(&run.history);
    let context = context::build(run, &version_totals, &history_totals)?;
    let charts = charts::build(run, &context, options.png)?;
    run.replay.check()?;
    let html = html::render(&context, &charts)?;
    let markdown = markdown::render(&context)?;
    let results_json = serde_json::to_string_pretty(&export::results(&context)).map_err(|err| {
        ReportError::Template {
            name: RESULTS_FILE.into(),
            message: err.to_string(),
        }
    })?;
    Ok(Report {
        context,
        charts,
        html,
        markdown,
        results_json,
        source: run.dir.clone(),
        version_totals,
    })
}

/// Writes the report into the run directory (each file atomically) and returns what it wrote.
pub fn write(report: &Report, run_dir: &Path) -> Result<Vec<PathBuf>, ReportError> {
    let charts_dir = run_dir.join(CHARTS_DIR);
    std::fs::create_dir_all(&charts_dir).map_err(|source| ReportError::Io {
        path: charts_dir.clone(),
        error: source,
    })?;
    let mut written = Vec::new();
    let parquet = run_dir.join(REPLAY_PARQUET_FILE);
    let rows = RunDir::open(&report.source)?.csv_records(REPLAY_FILE)?;
    write_atomic_with(&parquet, |out| {
        export::write_replay_parquet(rows, out).map(drop)
    })?;
    written.push(parquet);
    let mut put = |path: PathBuf, bytes: &[u8]| -> Result<(), ReportError> {
        write_atomic(&path, bytes)?;
        written.push(path);
        Ok(())
    };
    for chart in report.charts.all() {
        put(charts_dir.join(chart.svg_file()), chart.svg.as_bytes())?;
        if let Some(png) = &chart.png {
            put(charts_dir.join(chart.png_file()), png)?;
        }
    }
    put(run_dir.join(RESULTS_FILE), report.results_json.as_bytes())?;
    put(run_dir.join(SUMMARY_FILE), report.markdown.as_bytes())?;
    // The page last: its presence means the rest is there too.
    put(run_dir.join(HTML_FILE), report.html.as_bytes())?;
    Ok(written)
}

/// Writes a comparison's files into `dir`, each atomically: `compare.json`, `summary.md`, and
/// the page (`index.html`) last.
pub fn write_compare(dir: &Path, comparison: &CompareReport) -> Result<(), ReportError> {
    let json = serde_json::to_vec_pretty(comparison).map_err(|err| ReportError::Template {
        name: COMPARE_FILE.into(),
        message: err.to_string(),
    })?;
    write_atomic(&dir.join(COMPARE_FILE), &json)?;
    write_atomic(&dir.join(SUMMARY_FILE), comparison.markdown().as_bytes())?;
    write_atomic(&dir.join(HTML_FILE), render_compare(comparison)?.as_bytes())?;
    Ok(())
}

/// The terminal summary of a rendered report.
pub fn summary_text(context: &ReportContext) -> String {
    terminal::summary(context)
}
