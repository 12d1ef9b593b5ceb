//! `compare`: prompt versions set against a reference on the same rows, with the paired
//! statistics of the report. The versions come from one of two places:
//! - run directories ([`compare`]): the best version of each run against the first run's best,
//!   on the holdout rows both answered. Runs must use the same dataset file (by SHA-256):
//!   otherwise the rows are not the same rows and a paired test would compare nothing.
//! - prompt files answered on one dataset ([`compare_prompts`]): each prompt against the first,
//!   from the replay rows the runner produced for them.
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::answers::{ReplayTable, Rows, Texts};
use super::context::{ComparisonView, adjust_family};
use super::format::number;
use super::load::{RunData, load};
use super::samples::{self, Agreement, RowAnswers};
use super::{DatasetMismatch, ReportError, stats, terminal};
use crate::prompt::PromptFile;
use crate::store::{REPLAY_FILE, ReplayOf, ReplayRow};

/// One version in a comparison: the best of a run, or a prompt file.
#[derive(Debug, Clone, Serialize)]
pub struct Contender {
    /// The run directory, or the prompt file.
    pub source: String,
    /// The experiment's name, or the prompt file's name.
    pub name: String,
    /// The run's id; none for a prompt file.
    pub run_id: Option<String>,
    /// The execution the best version came from; none for a prompt file.
    pub execution: Option<String>,
    /// `seed` or `g<generation>` of a run; the prompt file as given for a prompt.
    pub version: String,
    pub model: String,
    /// The evolution's (Pareto) score of a run's best version.
    pub validation_score: Option<f64>,
    pub simulated: bool,
    /// Rows with at least one answer: what the mean and its interval rest on.
    pub rows: usize,
    /// Over rows: each row's score is the mean of its answered samples.
    pub mean: Option<f64>,
    pub ci_low: Option<f64>,
    pub ci_high: Option<f64>,
    /// How often a row's repeated answers agree; none with one answer per row.
    pub agreement: Option<Agreement>,
    pub prompt: String,
}

impl Contender {
    /// The version as the tables show it: `<execution> · <version>` for a run.
    fn label(&self) -> String {
        match &self.execution {
            Some(execution) => format!("{execution} · {}", self.version),
            None => self.version.clone(),
        }
    }

    fn scores(&self) -> String {
        format!(
            "{} ({} to {})",
            number(self.mean, 3),
            number(self.ci_low, 3),
            number(self.ci_high, 3)
        )
    }
}

/// What `compare` prints, in any of its forms.
#[derive(Debug, Clone, Serialize)]
pub struct CompareReport {
    /// What the contenders are: `run` or `prompt`.
    pub subject: String,
    pub dataset_file: String,
    pub dataset_sha256: String,
    /// Settings every contender shared (model, scorer, rows), one per entry; none for runs,
    /// whose settings are in their own run directories.
    pub settings: Vec<String>,
    pub contenders: Vec<Contender>,
    /// Every contender after the first against the first, paired on rows both answered.
    pub comparisons: Vec<ComparisonView>,
    /// For prompt files: each contender after the first against the first, the rows they
    /// scored differently on, with both answers. Empty for runs.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub differing: Vec<DifferingRows>,
}

/// The rows two prompts scored differently on.
#[derive(Debug, Clone, Serialize)]
pub struct DifferingRows {
    /// The reference (the first prompt) and the other.
    pub a: String,
    pub b: String,
    pub rows: Vec<RowPair>,
}

/// One dataset row answered by two prompts.
#[derive(Debug, Clone, Serialize)]
pub struct RowPair {
    pub row: usize,
    pub inputs: Vec<(String, String)>,
    pub expected: String,
    pub a: Answer,
    pub b: Answer,
}

/// One prompt's answer to a row, and its score (none when it failed). With repeats: the first
/// answered sample, the row's mean score, and a line on all of its answers.
#[derive(Debug, Clone, Serialize)]
pub struct Answer {
    pub output: String,
    pub score: Option<f64>,
    pub feedback: String,
    pub error: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub repeats: Option<String>,
}

impl Answer {
    fn of(answers: &RowAnswers<'_>, texts: &Texts<'_>) -> Self {
        Self {
            output: answers.output(texts).to_owned(),
            score: answers.score(),
            feedback: answers.feedback(texts).to_owned(),
            error: answers
                .shown_row(texts)
                .map(|r| r.error.clone())
                .unwrap_or_default(),
            repeats: answers.summary(texts),
        }
    }
}

/// The answers of one prompt on one model, by row; none when it has none.
fn prompt_rows<'a>(table: &'a ReplayTable, prompt: &str, model: &str) -> Option<Rows<'a>> {
    // The rows of `compare --prompts` have no variant.
    table.rows("", &ReplayOf::PromptFile(prompt.to_owned()), model)
}

/// The rows where `b`'s score differs from `a`'s (a failed answer counts as differing).
fn differing(
    a: &str,
    b: &str,
    table: &ReplayTable,
    texts: &Texts<'_>,
    model: &str,
) -> DifferingRows {
    let (rows_a, rows_b) = (prompt_rows(table, a, model), prompt_rows(table, b, model));
    let rows = rows_a
        .zip(rows_b)
        .into_iter()
        .flat_map(|(rows_a, rows_b)| rows_a.iter().map(move |(row, ra)| (row, ra, rows_b)))
        .filter_map(|(row, ra, rows_b)| {
            let rb = rows_b.get(row)?;
            let (sa, sb) = (Answer::of(&ra, texts), Answer::of(&rb, texts));
            let shown = ra.shown_row(texts);
            (sa.score != sb.score).then(|| RowPair {
                row,
                inputs: shown
                    .map(|r| r.inputs.clone().into_iter().collect())
                    .unwrap_or_default(),
                expected: shown.map(|r| r.expected.clone()).unwrap_or_default(),
                a: sa,
                b: sb,
            })
        })
        .collect();
    DifferingRows {
        a: a.to_owned(),
        b: b.to_owned(),
        rows,
    }
}

impl CompareReport {
    pub fn any_simulated(&self) -> bool {
        self.contenders.iter().any(|c| c.simulated)
    }

    /// Plain-text tables for the terminal.
    pub fn text(&self) -> String {
        let subject = self.subject.as_str();
        let mut out = String::new();
        if self.any_simulated() {
            out.push_str(&format!(
                "SIMULATED: at least one {subject}'s answers came from the test stand-in model.\n"
            ));
        }
        out.push_str(&format!(
            "dataset {} (sha256 {})\n",
            self.dataset_file, self.dataset_sha256
        ));
        for setting in &self.settings {
            out.push_str(setting);
            out.push('\n');
        }
        out.push('\n');
        let from_runs = self.contenders.iter().any(|c| c.execution.is_some());
        let rows: Vec<Vec<String>> = self
            .contenders
            .iter()
            .map(|c| {
                let mut row = vec![c.source.clone()];
                if from_runs {
                    row.push(c.label());
                }
                row.extend([
                    c.model.clone(),
                    c.rows.to_string(),
                    c.scores(),
                    if c.simulated { "yes" } else { "no" }.to_owned(),
                ]);
                row
            })
            .collect();
        let mut header = vec![subject];
        if from_runs {
            header.push("best");
        }
        header.extend(["model", "rows", "mean (95% CI)", "simulated"]);
        out.push_str(&terminal::table(&header, &rows));
        for contender in &self.contenders {
            if let Some(agreement) = &contender.agreement {
                out.push_str(&format!("{}: {}\n", contender.source, agreement.text()));
            }
        }
        out.push('\n');
        let rows: Vec<Vec<String>> = self
            .comparisons
            .iter()
            .map(|c| {
                vec![
                    c.b.clone(),
                    c.a.clone(),
                    c.rows.to_string(),
                    c.difference_text(),
                    c.p_text.clone(),
                    c.verdict_text.clone(),
                ]
            })
            .collect();
        out.push_str(&terminal::table(
            &[
                subject,
                "against",
                "paired rows",
                "difference (95% CI)",
                "p",
                "verdict",
            ],
            &rows,
        ));
        out.push('\n');
        for comparison in &self.comparisons {
            out.push_str(&comparison.sentence);
            out.push('\n');
        }
        out
    }

    /// A Markdown table for a pull-request comment.
    pub fn markdown(&self) -> String {
        let esc = super::markdown::escape;
        let subject = self.subject.as_str();
        let mut out = String::from("## gepa-lab compare\n\n");
        if self.any_simulated() {
            out.push_str(&format!("> [!WARNING]\n> **Simulated:** at least one {subject}'s answers came from the test stand-in model, not a real model.\n\n"));
        }
        out.push_str(&format!(
            "Dataset `{}` (sha256 `{}`)",
            esc(&self.dataset_file),
            &self.dataset_sha256
        ));
        for setting in &self.settings {
            out.push_str(&format!(" · {}", esc(setting)));
        }
        out.push_str("\n\n");
        let from_runs = self.contenders.iter().any(|c| c.execution.is_some());
        let best = if from_runs { " best |" } else { "" };
        let best_rule = if from_runs { "---|" } else { "" };
        out.push_str(&format!(
            "| {subject} |{best} model | mean (95% CI) | difference vs first (95% CI) | p | verdict |\n|---|{best_rule}---|--:|--:|--:|---|\n"
        ));
        for (i, contender) in self.contenders.iter().enumerate() {
            let comparison = i.checked_sub(1).and_then(|i| self.comparisons.get(i));
            let best = if from_runs {
                format!(" {} |", esc(&contender.label()))
            } else {
                String::new()
            };
            out.push_str(&format!(
                "| {} |{best} {} | {} | {} | {} | {} |\n",
                esc(&contender.source),
                esc(&contender.model),
                contender.scores(),
                comparison.map_or("reference".into(), |c| c.difference_text()),
                comparison.map_or("–".into(), |c| c.p_text.clone()),
                comparison.map_or("–".into(), |c| c.verdict_text.clone()),
            ));
        }
        let agreements: Vec<String> = self
            .contenders
            .iter()
            .filter_map(|c| {
                let agreement = c.agreement.as_ref()?;
                Some(format!("`{}`: {}", esc(&c.source), agreement.text()))
            })
            .collect();
        if !agreements.is_empty() {
            out.push_str(&format!(
                "\nRepeated answers (each row counts once, scored by the mean of its answers): {}.\n",
                agreements.join("; ")
            ));
        }
        out
    }
}

/// The best version of one run (as in the run's own headline, by [`RunData::best`]), on its
/// execution's first replay model: (execution, version, model).
fn best_of(run: &RunData) -> Option<(usize, usize, String)> {
    let (execution, version) = run.best()?;
    let model = run.executions[execution].models.first()?.clone();
    Some((execution, version, model))
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
            .executions
            .iter()
            .map(|e| {
                (
                    e.plan.dataset.sha256.clone(),
                    e.plan.dataset.file.display().to_string(),
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
                "replay.csv holds no scored answer of this run's prompts (a run stopped before \
                 its replay: `gepa-lab run --resume` asks for them); nothing to compare",
            )
        })?;
        let execution = &run.executions[execution];
        let version = &execution.versions[version];
        let rows = run
            .replay
            .version(&execution.variant, version.version, &model);
        let scores = rows.map(samples::row_scores).unwrap_or_default();
        picked.push((
            Contender {
                source: run.dir.display().to_string(),
                name: run.manifest.plan.name.clone(),
                run_id: Some(run.manifest.run_id.clone()),
                execution: Some(execution.label.clone()),
                version: version.label.clone(),
                model,
                validation_score: version.validation_score,
                simulated: run.manifest.simulated,
                prompt: version.prompt.clone(),
                agreement: rows.and_then(|rows| Agreement::of(rows.values())),
                ..Contender::scored(&scores)
            },
            scores,
        ));
    }
    Ok(CompareReport {
        subject: "run".to_owned(),
        dataset_file: file,
        dataset_sha256: sha256,
        settings: Vec::new(),
        comparisons: against_first(&picked, "compare", "holdout"),
        contenders: picked.into_iter().map(|(contender, _)| contender).collect(),
        differing: Vec::new(),
    })
}

/// The dataset and settings every prompt of a [`compare_prompts`] shared.
#[derive(Debug, Clone)]
pub struct PromptSetting {
    pub dataset_file: String,
    pub dataset_sha256: String,
    pub model: String,
    pub settings: Vec<String>,
    /// Some answer came from the test stand-in model.
    pub simulated: bool,
}

/// Each prompt against the first, from the replay rows they produced on one model (rows whose
/// answer failed are left out of the pairs, as in a run's report). Refuses rows that answer one
/// row's sample of a prompt twice.
pub fn compare_prompts(
    setting: PromptSetting,
    prompts: &[PromptFile],
    replay: &[ReplayRow],
) -> Result<CompareReport, ReportError> {
    let table = ReplayTable::of(replay).map_err(|refused| {
        ReportError::record(Path::new(REPLAY_FILE), refused.record, refused.message)
    })?;
    let texts = Texts::All(replay);
    let picked: Vec<(Contender, BTreeMap<usize, f64>)> = prompts
        .iter()
        .map(|prompt| {
            let rows = prompt_rows(&table, &prompt.file, &setting.model);
            let scores = rows.map(samples::row_scores).unwrap_or_default();
            let name = Path::new(&prompt.file)
                .file_name()
                .map_or_else(|| prompt.file.clone(), |n| n.to_string_lossy().into_owned());
            let contender = Contender {
                source: prompt.file.clone(),
                name,
                run_id: None,
                execution: None,
                version: prompt.file.clone(),
                model: setting.model.clone(),
                validation_score: None,
                simulated: setting.simulated,
                prompt: prompt.text.clone(),
                agreement: rows.and_then(|rows| Agreement::of(rows.values())),
                ..Contender::scored(&scores)
            };
            (contender, scores)
        })
        .collect();
    let comparisons = against_first(&picked, "compare", "dataset");
    let differing = prompts
        .iter()
        .skip(1)
        .filter_map(|prompt| {
            let first = prompts.first()?;
            Some(differing(
                &first.file,
                &prompt.file,
                &table,
                &texts,
                &setting.model,
            ))
        })
        .collect();
    Ok(CompareReport {
        subject: "prompt".to_owned(),
        dataset_file: setting.dataset_file,
        dataset_sha256: setting.dataset_sha256,
        settings: setting.settings,
        contenders: picked.into_iter().map(|(contender, _)| contender).collect(),
        comparisons,
        differing,
    })
}

impl Contender {
    /// A contender with only its scores filled in: the row count, mean and 95% interval.
    fn scored(scores: &BTreeMap<usize, f64>) -> Contender {
        let values: Vec<f64> = scores.values().copied().collect();
        let interval = stats::mean_interval(&values);
        Contender {
            source: String::new(),
            name: String::new(),
            run_id: None,
            execution: None,
            version: String::new(),
            model: String::new(),
            validation_score: None,
            simulated: false,
            rows: values.len(),
            mean: (!values.is_empty()).then(|| stats::mean(&values)),
            ci_low: interval.map(|i| i.low),
            ci_high: interval.map(|i| i.high),
            agreement: None,
            prompt: String::new(),
        }
    }
}

/// Every contender after the first against the first, on the rows both answered.
fn against_first(
    picked: &[(Contender, BTreeMap<usize, f64>)],
    execution: &str,
    scope: &str,
) -> Vec<ComparisonView> {
    let Some((reference, reference_scores)) = picked.first() else {
        return Vec::new();
    };
    let mut comparisons: Vec<ComparisonView> = picked
        .iter()
        .skip(1)
        .map(|(contender, scores)| {
            let (a, b): (Vec<f64>, Vec<f64>) = reference_scores
                .iter()
                .filter_map(|(row, a)| scores.get(row).map(|b| (*a, *b)))
                .unzip();
            let paired = stats::compare_paired(&a, &b);
            let name = |c: &Contender| match &c.execution {
                Some(_) => format!("{} {}", c.source, c.version),
                None => c.source.clone(),
            };
            let model = if contender.model == reference.model {
                contender.model.clone()
            } else {
                format!("{} vs {}", contender.model, reference.model)
            };
            ComparisonView::new(
                contender.execution.as_deref().unwrap_or(execution),
                &model,
                &name(reference),
                &name(contender),
                &paired,
                scope,
            )
        })
        .collect();
    // Several prompts against one reference are one family: unadjusted, K prompts would raise
    // K times the false alarms of `--fail-if-worse`.
    adjust_family(&mut comparisons);
    comparisons
}

fn nothing(run: &Path, message: &str) -> ReportError {
    ReportError::NothingToCompare {
        run: run.to_owned(),
        message: message.to_owned(),
    }
}
