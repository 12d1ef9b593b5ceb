//! The report's tables, built from the records the store has already read and checked: the
//! history's totals per execution (generations, best score, budget spent), and the polars replay
//! frame `replay.parquet` is written from, a row group at a time. The totals per prompt version
//! and model ([`VersionTotals`]) are counted in the one pass that reads `replay.csv` for the
//! report (`answers`), which never holds every record at once.
//!
//! The CSV files are parsed by the store, not by polars: the store is the one owner of their
//! format and names the file and record of a bad row, which polars' reader cannot. So polars gets
//! typed columns and needs neither its CSV reader nor its streaming engine.
use std::collections::BTreeMap;

use polars::prelude::*;
use serde::Serialize;

use gepa_lab_store::{HistoryRow, ReplayRow, Version};

/// One prompt version on one model, over the holdout rows it was asked.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct VersionTotals {
    pub variant: String,
    pub version: Version,
    pub model: String,
    /// Rows asked.
    pub rows: u32,
    /// Answers asked of each row (more than 1 with repeats), at most.
    pub samples: u32,
    /// Answers asked: every row times its samples.
    pub asked: u32,
    /// Answers received; the others have an error and no score.
    pub answered: u32,
    pub errors: u32,
    /// Mean over rows of each row's score, the mean of its answered samples (see
    /// `report::samples`); `None` when nothing was answered.
    pub mean_score: Option<f64>,
    /// Send to answer of the answered request (see `ReplayRow::latency_ms`).
    pub mean_latency_ms: Option<f64>,
    pub max_latency_ms: Option<u64>,
    /// Pacing, retries and queues before it (see `ReplayRow::waited_ms`).
    pub mean_waited_ms: Option<f64>,
    pub mean_prompt_tokens: Option<f64>,
    pub mean_completion_tokens: Option<f64>,
    /// Rows whose answer came from another model than the one asked (a 503 fallback).
    pub fallbacks: u32,
}

/// One execution's history.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HistoryTotals {
    pub variant: String,
    pub generations: u32,
    pub best_score: f64,
    pub last_generation: u32,
    /// The largest budget spent that the history reports, when it reports any.
    pub budget_used: Option<u64>,
}

/// The replay table: the columns of `replay.csv` in its order, typed. A row with an error has no
/// answer, so its score, latency, wait and token counts are null (the CSV file writes 0 there).
/// It is [`totals_frame`] with the text columns the totals do not read put in their places.
pub fn replay_frame(rows: &[ReplayRow]) -> PolarsResult<DataFrame> {
    let text = |name: &str, field: fn(&ReplayRow) -> &str| {
        Column::new(name.into(), rows.iter().map(field).collect::<Vec<_>>())
    };
    let mut frame = totals_frame(rows)?;
    // In increasing position, each after the ones before it are in place.
    let sample = Column::new(
        "sample".into(),
        rows.iter().map(|r| r.sample).collect::<Vec<_>>(),
    );
    let inputs = Column::new(
        "inputs".into(),
        rows.iter().map(ReplayRow::inputs_json).collect::<Vec<_>>(),
    );
    for (at, column) in [
        (5, sample),
        (6, inputs),
        (7, text("expected", |r| &r.expected)),
        (8, text("output", |r| &r.output)),
        (10, text("feedback", |r| &r.feedback)),
        (15, text("node_id", |r| &r.node_id)),
    ] {
        frame.insert_column(at, column)?;
    }
    Ok(frame)
}

/// The columns of the replay table without its texts (inputs, expected values, outputs, feedback
/// and node ids), typed as in [`replay_frame`].
fn totals_frame(rows: &[ReplayRow]) -> PolarsResult<DataFrame> {
    let text = |field: fn(&ReplayRow) -> &str| rows.iter().map(field).collect::<Vec<_>>();
    let answered = |row: &ReplayRow| row.error.is_empty();
    df!(
        "variant" => text(|r| &r.variant),
        "version" => rows.iter().map(|r| r.version.to_string()).collect::<Vec<_>>(),
        "model" => text(|r| &r.model),
        "answered_by" => text(|r| &r.answered_by),
        "row" => rows.iter().map(|r| r.row as u64).collect::<Vec<_>>(),
        "score" => rows.iter().map(|r| answered(r).then_some(r.score)).collect::<Vec<_>>(),
        "latency_ms" => rows.iter().map(|r| answered(r).then_some(r.latency_ms)).collect::<Vec<_>>(),
        "waited_ms" => rows.iter().map(|r| r.waited_ms.filter(|_| answered(r))).collect::<Vec<_>>(),
        "prompt_tokens" => rows.iter().map(|r| answered(r).then_some(r.prompt_tokens)).collect::<Vec<_>>(),
        "completion_tokens" => rows.iter().map(|r| answered(r).then_some(r.completion_tokens)).collect::<Vec<_>>(),
        "error" => text(|r| &r.error),
    )
}

/// Totals per variant of the history, sorted by variant. A few rows per generation: plain Rust,
/// not a polars group-by, which would need polars' `lazy` feature and its query engine (about a
/// third of polars' compile time) for this alone. Maxima skip NaN scores as polars' `max` does.
pub fn history_totals(history: &[HistoryRow]) -> Vec<HistoryTotals> {
    let mut totals = BTreeMap::<&str, HistoryTotals>::new();
    for row in history {
        let total = totals
            .entry(row.variant.as_str())
            .or_insert_with(|| HistoryTotals {
                variant: row.variant.clone(),
                generations: 0,
                best_score: f64::NAN,
                last_generation: 0,
                budget_used: None,
            });
        total.generations += 1;
        total.best_score = total.best_score.max(row.score);
        total.last_generation = total.last_generation.max(row.generation);
        total.budget_used = total.budget_used.max(row.budget_used);
    }
    totals.into_values().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn history_totals_per_variant() {
        let row = |variant: &str, generation: u32, score: f64, budget: Option<u64>| HistoryRow {
            variant: variant.into(),
            evolution_id: "e".into(),
            generation,
            score,
            prompt: "p".into(),
            budget_used: budget,
            costs: None,
            pareto_scores: None,
        };
        let rows = [
            row("a", 0, 0.5, None),
            row("a", 1, 0.75, None),
            row("b", 0, 0.5, Some(8)),
            row("b", 1, 0.4, Some(20)),
        ];
        let totals = history_totals(&rows);
        assert_eq!(totals[0].variant, "a");
        assert_eq!((totals[0].generations, totals[0].best_score), (2, 0.75));
        assert_eq!(totals[0].budget_used, None);
        assert_eq!(
            (totals[1].last_generation, totals[1].budget_used),
            (1, Some(20))
        );
    }
}
