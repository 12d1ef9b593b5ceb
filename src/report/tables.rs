//! The report's tables, built with polars from the records the store has already read and
//! checked: per prompt version and model (rows, answers, errors, mean score, latency, tokens) and
//! per execution (generations, best and seed scores, budget spent). The replay frame is also what
//! `replay.parquet` is written from.
//!
//! The CSV files are parsed by the store, not by polars: the store is the one owner of their
//! format and names the file and record of a bad row, which polars' reader cannot. So polars gets
//! typed columns and needs neither its CSV reader nor its streaming engine.
use polars::prelude::*;
use serde::Serialize;

use crate::store::{HistoryRow, ReplayRow, Version};

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

/// The columns of the replay table that [`version_totals`] reads, typed as in [`replay_frame`]:
/// without the inputs, expected values, outputs, feedback and node ids, which the totals never
/// look at and which are most of the table's bytes.
pub fn totals_frame(rows: &[ReplayRow]) -> PolarsResult<DataFrame> {
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

pub fn history_frame(rows: &[HistoryRow]) -> PolarsResult<DataFrame> {
    df!(
        "variant" => rows.iter().map(|r| r.variant.as_str()).collect::<Vec<_>>(),
        "generation" => rows.iter().map(|r| r.generation).collect::<Vec<_>>(),
        "score" => rows.iter().map(|r| r.score).collect::<Vec<_>>(),
        "budget_used" => rows.iter().map(|r| r.budget_used).collect::<Vec<_>>(),
    )
}

/// Totals per (variant, version, model), sorted by those keys.
pub fn version_totals(replay: &DataFrame) -> PolarsResult<Vec<VersionTotals>> {
    let by_row = row_scores(replay)?;
    let totals = answer_totals(replay)?;
    let height = totals.height();
    // Both are grouped by the same keys and sorted by them: one line each per group.
    if by_row.height() != height {
        return Err(PolarsError::ShapeMismatch(
            format!(
                "{} version groups by answer, {} by row",
                height,
                by_row.height()
            )
            .into(),
        ));
    }
    let text = |name: &str| -> PolarsResult<Vec<String>> {
        let values = totals.column(name)?.str()?;
        Ok((0..height)
            .map(|i| values.get(i).unwrap_or_default().to_owned())
            .collect())
    };
    let float = |name: &str| -> PolarsResult<Vec<Option<f64>>> {
        let values = totals.column(name)?.f64()?;
        Ok((0..height).map(|i| values.get(i)).collect())
    };
    let count = |name: &str| -> PolarsResult<Vec<u32>> {
        let values = totals
            .column(name)
            .or_else(|_| by_row.column(name))?
            .u32()?;
        Ok((0..height)
            .map(|i| values.get(i).unwrap_or_default())
            .collect())
    };
    let (variant, model) = (text("variant")?, text("model")?);
    let version = text("version")?
        .iter()
        .map(|text| text.parse::<Version>())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|err| PolarsError::ComputeError(err.into()))?;
    let (asked, answered, fallbacks) = (count("asked")?, count("answered")?, count("fallbacks")?);
    let (rows, samples) = (count("rows")?, count("samples")?);
    let mean_score = by_row.column("mean_score")?.f64()?;
    let mean_score: Vec<Option<f64>> = (0..height).map(|i| mean_score.get(i)).collect();
    let mean_latency = float("mean_latency_ms")?;
    let max_latency = totals.column("max_latency_ms")?.u64()?;
    let max_latency: Vec<Option<u64>> = (0..height).map(|i| max_latency.get(i)).collect();
    let mean_waited = float("mean_waited_ms")?;
    let prompt_tokens = float("mean_prompt_tokens")?;
    let completion_tokens = float("mean_completion_tokens")?;
    Ok((0..height)
        .map(|i| VersionTotals {
            variant: variant[i].clone(),
            version: version[i],
            model: model[i].clone(),
            rows: rows[i],
            samples: samples[i],
            asked: asked[i],
            answered: answered[i],
            errors: asked[i] - answered[i],
            mean_score: mean_score[i],
            mean_latency_ms: mean_latency[i],
            max_latency_ms: max_latency[i],
            mean_waited_ms: mean_waited[i],
            mean_prompt_tokens: prompt_tokens[i],
            mean_completion_tokens: completion_tokens[i],
            fallbacks: fallbacks[i],
        })
        .collect())
}

/// A replay row with an answer: its error is empty.
fn answered() -> Expr {
    col("error").eq(lit(""))
}

/// `name` on answered rows only.
fn when_answered(name: &str) -> Expr {
    col(name).filter(answered())
}

/// The mean of `name` over answered rows, as `mean_<name>`.
fn mean_answered(name: &str) -> Expr {
    when_answered(name)
        .cast(DataType::Float64)
        .mean()
        .alias(format!("mean_{name}"))
}

/// What the version tables are grouped by.
fn version_keys() -> [Expr; 3] {
    [col("variant"), col("version"), col("model")]
}

/// Per (variant, version, model): its rows, the most samples a row has, and the mean score over
/// rows. The row is the unit of the score: first each row's mean over its answered samples, then
/// the mean over rows (a row none of whose samples was answered has a null score, skipped).
fn row_scores(replay: &DataFrame) -> PolarsResult<DataFrame> {
    replay
        .clone()
        .lazy()
        .group_by([col("variant"), col("version"), col("model"), col("row")])
        .agg([
            when_answered("score").mean().alias("row_score"),
            len().cast(DataType::UInt32).alias("samples"),
        ])
        .group_by(version_keys())
        .agg([
            len().cast(DataType::UInt32).alias("rows"),
            col("samples").max().alias("samples"),
            col("row_score").mean().alias("mean_score"),
        ])
        .sort(
            ["variant", "version", "model"],
            SortMultipleOptions::default(),
        )
        .collect()
}

/// Per (variant, version, model): the answers asked and given, the means of latency, waiting
/// and tokens over answered rows, the longest latency, and the answers from a fallback model.
fn answer_totals(replay: &DataFrame) -> PolarsResult<DataFrame> {
    let answered = answered();
    replay
        .clone()
        .lazy()
        .group_by(version_keys())
        .agg([
            len().cast(DataType::UInt32).alias("asked"),
            answered
                .clone()
                .cast(DataType::UInt32)
                .sum()
                .alias("answered"),
            mean_answered("latency_ms"),
            when_answered("latency_ms").max().alias("max_latency_ms"),
            mean_answered("waited_ms"),
            mean_answered("prompt_tokens"),
            mean_answered("completion_tokens"),
            (answered.clone().and(col("answered_by").neq(col("model"))))
                .cast(DataType::UInt32)
                .sum()
                .alias("fallbacks"),
        ])
        .sort(
            ["variant", "version", "model"],
            SortMultipleOptions::default(),
        )
        .collect()
}

/// Totals per variant of the history, sorted by variant.
pub fn history_totals(history: &DataFrame) -> PolarsResult<Vec<HistoryTotals>> {
    let totals = history
        .clone()
        .lazy()
        .group_by([col("variant")])
        .agg([
            len().cast(DataType::UInt32).alias("generations"),
            col("score").max().alias("best_score"),
            col("generation").max().alias("last_generation"),
            col("budget_used").max().alias("budget_used"),
        ])
        .sort(["variant"], SortMultipleOptions::default())
        .collect()?;
    let variant = totals.column("variant")?.str()?;
    let generations = totals.column("generations")?.u32()?;
    let best = totals.column("best_score")?.f64()?;
    let last = totals.column("last_generation")?.u32()?;
    let budget = totals.column("budget_used")?.u64()?;
    Ok((0..totals.height())
        .map(|i| HistoryTotals {
            variant: variant.get(i).unwrap_or_default().to_owned(),
            generations: generations.get(i).unwrap_or_default(),
            best_score: best.get(i).unwrap_or(f64::NAN),
            last_generation: last.get(i).unwrap_or_default(),
            budget_used: budget.get(i),
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn replay(version: &str, row: usize, score: f64, error: &str) -> ReplayRow {
        ReplayRow {
            variant: "a".into(),
            version: version.parse().unwrap(),
            model: "m".into(),
            answered_by: if row == 3 { "n".into() } else { "m".into() },
            row,
            sample: 1,
            inputs: BTreeMap::new(),
            expected: "x".into(),
            output: "x".into(),
            score,
            feedback: String::new(),
            latency_ms: 100 * row as u64,
            waited_ms: Some(1000 * row as u64),
            prompt_tokens: 10,
            completion_tokens: 2,
            node_id: String::new(),
            error: error.into(),
        }
    }

    #[test]
    fn totals_leave_errors_out_of_the_means() {
        let rows = [
            replay("seed", 1, 1.0, ""),
            replay("seed", 2, 0.0, ""),
            replay("seed", 3, 0.0, "timeout"),
            replay("g2", 1, 1.0, ""),
            replay("g2", 3, 1.0, ""),
        ];
        let totals = version_totals(&replay_frame(&rows).unwrap()).unwrap();
        assert_eq!(totals.len(), 2);
        let seed = totals.iter().find(|t| t.version.is_seed()).unwrap();
        assert_eq!((seed.rows, seed.answered, seed.errors), (3, 2, 1));
        assert_eq!(seed.mean_score, Some(0.5));
        assert_eq!(seed.mean_latency_ms, Some(150.0));
        assert_eq!(seed.max_latency_ms, Some(200));
        assert_eq!(seed.mean_waited_ms, Some(1500.0), "kept apart from latency");
        assert_eq!(seed.fallbacks, 0, "the fallback row errored");
        let g2 = totals
            .iter()
            .find(|t| t.version == Version::Generation(2))
            .unwrap();
        assert_eq!((g2.mean_score, g2.fallbacks), (Some(1.0), 1));
    }

    #[test]
    fn history_totals_per_variant() {
        let row = |variant: &str, generation: u32, score: f64, budget: Option<u64>| HistoryRow {
            variant: variant.into(),
            evolution_id: "e".into(),
            generation,
            score,
            prompt: "p".into(),
            budget_used: budget,
            pareto_scores: None,
        };
        let rows = [
            row("a", 0, 0.5, None),
            row("a", 1, 0.75, None),
            row("b", 0, 0.5, Some(8)),
            row("b", 1, 0.4, Some(20)),
        ];
        let totals = history_totals(&history_frame(&rows).unwrap()).unwrap();
        assert_eq!(totals[0].variant, "a");
        assert_eq!((totals[0].generations, totals[0].best_score), (2, 0.75));
        assert_eq!(totals[0].budget_used, None);
        assert_eq!(
            (totals[1].last_generation, totals[1].budget_used),
            (1, Some(20))
        );
    }
}
