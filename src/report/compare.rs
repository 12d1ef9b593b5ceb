//! `compare`: the best version of each of several runs, set against the first run's best on the
//! holdout rows both answered. Runs must use the same dataset file (by SHA-256): otherwise the
//! rows are not the same rows and a paired test would compare nothing.
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::context::{ComparisonView, sentence};
use super::format::{number, p_value, signed};
use super::load::{RunData, load};
use super::{DatasetMismatch, ReportError, stats, terminal};

#[derive(Debug, Clone, Serialize)]
pub struct CompareRun {
    pub dir: String,
    pub name: String,
    pub run_id: String,
    pub simulated: bool,
    pub execution: String,
    pub version: String,
    pub model: String,
    pub validation_score: Option<f64>,
    pub rows: usize,
    pub mean: Option<f64>,
    pub ci_low: Option<f64>,
    pub ci_high: Option<f64>,
    pub prompt: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct CompareReport {
    pub dataset_file: String,
    pub dataset_sha256: String,
    pub runs: Vec<CompareRun>,
    /// Every run after the first against the first, paired on rows both answered.
    pub comparisons: Vec<ComparisonView>,
}

impl CompareReport {
    pub fn any_simulated(&self) -> bool {
        self.runs.iter().any(|r| r.simulated)
    }

    /// Plain-text table for the terminal.
    pub fn text(&self) -> String {
        let mut out = String::new();
        if self.any_simulated() {
            out.push_str(
                "SIMULATED: at least one run's answers came from the test stand-in model.\n",
            );
        }
        out.push_str(&format!(
            "dataset {} (sha256 {})\n\n",
            self.dataset_file, self.dataset_sha256
        ));
        let rows: Vec<Vec<String>> = self
            .runs
            .iter()
            .map(|r| {
                vec![
                    r.dir.clone(),
                    format!("{} · {}", r.execution, r.version),
                    r.model.clone(),
                    r.rows.to_string(),
                    format!(
                        "{} ({} to {})",
                        number(r.mean, 3),
                        number(r.ci_low, 3),
                        number(r.ci_high, 3)
                    ),
                    if r.simulated {
                        "yes".into()
                    } else {
                        "no".into()
                    },
                ]
            })
            .collect();
        out.push_str(&terminal::table(
            &[
                "run",
                "best",
                "model",
                "rows",
                "holdout mean (95% CI)",
                "simulated",
            ],
            &rows,
        ));
        out.push('\n');
        let rows: Vec<Vec<String>> = self
            .comparisons
            .iter()
            .map(|c| {
                vec![
                    c.b.clone(),
                    c.a.clone(),
                    c.rows.to_string(),
                    format!(
                        "{} ({} to {})",
                        signed(Some(c.difference)),
                        signed(c.ci_low),
                        signed(c.ci_high)
                    ),
                    p_value(c.p_value),
                    c.verdict_text.clone(),
                ]
            })
            .collect();
        out.push_str(&terminal::table(
            &[
                "run",
                "against",
                "paired rows",
                "difference (95% CI)",
                "p",
                "verdict",
            ],
            &rows,
        ));
        out
    }

    /// A Markdown table for a pull-request comment.
    pub fn markdown(&self) -> String {
        let esc = super::markdown::escape;
        let mut out = String::from("## gepa-lab compare\n\n");
        if self.any_simulated() {
            out.push_str("> [!WARNING]\n> **Simulated:** at least one run's answers came from the test stand-in model, not a real model.\n\n");
        }
        out.push_str("| run | best | model | holdout mean (95% CI) | difference vs first (95% CI) | p | verdict |\n|---|---|---|--:|--:|--:|---|\n");
        for (i, run) in self.runs.iter().enumerate() {
            let comparison = i.checked_sub(1).and_then(|i| self.comparisons.get(i));
            out.push_str(&format!(
                "| {} | {} | {} | {} ({} to {}) | {} | {} | {} |\n",
                esc(&run.dir),
                esc(&format!("{} · {}", run.execution, run.version)),
                esc(&run.model),
                number(run.mean, 3),
                number(run.ci_low, 3),
                number(run.ci_high, 3),
                comparison.map_or("reference".into(), |c| format!(
                    "{} ({} to {})",
                    signed(Some(c.difference)),
                    signed(c.ci_low),
                    signed(c.ci_high)
                )),
                comparison.map_or("–".into(), |c| p_value(c.p_value)),
                comparison.map_or("–".into(), |c| c.verdict_text.clone()),
            ));
        }
        out
    }
}

/// The best version of one run: the execution whose best prompt the evolution rated highest
/// (as in the run's own headline), on its first replay model. Returns that execution's index.
fn best_of(run: &RunData) -> Option<(usize, usize, String)> {
    run.executions
        .iter()
        .filter_map(|e| {
            let best = e.best?;
            let model = e.models.first()?.clone();
            Some((
                e.index,
                best,
                model,
                e.versions[best]
                    .validation_score
                    .unwrap_or(f64::NEG_INFINITY),
            ))
        })
        .fold(None::<(usize, usize, String, f64)>, |top, next| match top {
            Some(ref t) if t.3 >= next.3 => top,
            _ => Some(next),
        })
        .map(|(e, v, m, _)| (e, v, m))
}

/// Scores by row of one version on one model, answered rows only.
fn scores_by_row(run: &RunData, variant: &str, version: &str, model: &str) -> BTreeMap<usize, f64> {
    run.replay
        .iter()
        .filter(|r| {
            r.variant == variant && r.version == version && r.model == model && r.error.is_empty()
        })
        .map(|r| (r.row, r.score))
        .collect()
}

pub fn compare(dirs: &[PathBuf]) -> Result<CompareReport, ReportError> {
    let runs: Vec<RunData> = dirs.iter().map(|dir| load(dir)).collect::<Result<_, _>>()?;
    let Some(first) = runs.first() else {
        return Err(ReportError::NothingToCompare {
            run: PathBuf::from("."),
            message: "no run directory given".into(),
        });
    };
    let dataset = |run: &RunData| {
        run.manifest
            .plan
            .executions
            .iter()
            .map(|e| {
                (
                    e.dataset.sha256.clone(),
                    e.dataset.file.display().to_string(),
                )
            })
            .collect::<Vec<_>>()
    };
    let Some((sha256, file)) = dataset(first).into_iter().next() else {
        return Err(nothing(&first.dir, "the plan has no execution"));
    };
    for run in &runs {
        if let Some((other_sha, other_file)) =
            dataset(run).into_iter().find(|(sha, _)| *sha != sha256)
        {
            return Err(ReportError::DifferentDatasets(Box::new(DatasetMismatch {
                first_run: first.dir.clone(),
                first_file: file,
                first_sha256: sha256,
                other_run: run.dir.clone(),
                other_file,
                other_sha256: other_sha,
            })));
        }
    }

    let mut picked = Vec::new();
    for run in &runs {
        let (execution, version, model) = best_of(run).ok_or_else(|| {
            nothing(
                &run.dir,
                "no evolved prompt of this run was replayed; nothing to compare",
            )
        })?;
        let execution = &run.executions[execution];
        let version = &execution.versions[version];
        let scores = scores_by_row(run, &execution.variant, &version.label, &model);
        let values: Vec<f64> = scores.values().copied().collect();
        let interval = stats::mean_interval(&values);
        picked.push((
            CompareRun {
                dir: run.dir.display().to_string(),
                name: run.manifest.plan.name.clone(),
                run_id: run.manifest.run_id.clone(),
                simulated: run.manifest.simulated,
                execution: execution.label.clone(),
                version: version.label.clone(),
                model,
                validation_score: version.validation_score,
                rows: values.len(),
                mean: (!values.is_empty()).then(|| stats::mean(&values)),
                ci_low: interval.map(|i| i.low),
                ci_high: interval.map(|i| i.high),
                prompt: version.prompt.clone(),
            },
            scores,
        ));
    }

    let (reference, reference_scores) = &picked[0];
    let comparisons = picked
        .iter()
        .skip(1)
        .map(|(run, scores)| {
            let (a, b): (Vec<f64>, Vec<f64>) = reference_scores
                .iter()
                .filter_map(|(row, a)| scores.get(row).map(|b| (*a, *b)))
                .unzip();
            let c = stats::compare_paired(&a, &b);
            let name_a = format!("{} {}", reference.dir, reference.version);
            let name_b = format!("{} {}", run.dir, run.version);
            let model = if run.model == reference.model {
                run.model.clone()
            } else {
                format!("{} vs {}", run.model, reference.model)
            };
            ComparisonView {
                execution: run.execution.clone(),
                model: model.clone(),
                a: name_a.clone(),
                b: name_b.clone(),
                rows: c.rows,
                mean_a: c.mean_a,
                mean_b: c.mean_b,
                difference: c.difference,
                ci_low: c.interval.map(|i| i.low),
                ci_high: c.interval.map(|i| i.high),
                p_value: c.mcnemar.map(|m| m.p_value),
                only_a: c.mcnemar.map(|m| m.only_a),
                only_b: c.mcnemar.map(|m| m.only_b),
                test: c.test.to_owned(),
                verdict: c.verdict,
                verdict_text: c.verdict.text().to_owned(),
                sentence: sentence("compare", &model, &name_a, &name_b, &c),
            }
        })
        .collect();
    Ok(CompareReport {
        dataset_file: file,
        dataset_sha256: sha256,
        runs: picked.into_iter().map(|(run, _)| run).collect(),
        comparisons,
    })
}

fn nothing(run: &Path, message: &str) -> ReportError {
    ReportError::NothingToCompare {
        run: run.to_owned(),
        message: message.to_owned(),
    }
}
