//! `compare`: prompt versions set against a reference on the same rows, with the paired
//! statistics of the report. The versions come from one of two places:
//! - run directories ([`compare`]): a version of each run (by default the one its report
//!   recommends) against the first run's, on the holdout rows both answered. Runs must use the
//!   same dataset file (by SHA-256): otherwise the rows are not the same rows and a paired test
//!   would compare nothing.
//! - prompt files answered on one dataset ([`compare_prompts`]): each prompt against the first,
//!   from the replay rows the runner produced for them.
use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::answers::RowAnswers;
use super::answers::{ReplayTable, Rows, Texts};
use super::context::{ComparisonView, ROWS_ON_PAGE, adjust_family};
use super::diff::{DiffStats, PartDiff, Segment, part_diffs, word_diff};
use super::format::number;
use super::load::{RunData, load};
use super::samples::{self, Agreement};
use super::{DatasetMismatch, ReportError, stats, terminal};
use gepa_lab_prompt::PromptFile;
use gepa_lab_store::{REPLAY_FILE, ReplayOf, ReplayRow};

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
    /// The word diff of `prompt` against the first contender's; none for the first.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub diff: Option<PromptDiff>,
}

/// A contender's prompt against the reference's, word by word.
#[derive(Debug, Clone, Serialize)]
pub struct PromptDiff {
    pub segments: Vec<Segment>,
    pub stats: DiffStats,
    /// For prompts of several parts, a word diff per part; empty otherwise.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub parts: Vec<PartDiff>,
}

impl Contender {
    /// The version as the tables show it: `<execution> · <version>` for a run.
    fn label(&self) -> String {
        match &self.execution {
            Some(execution) => format!("{execution} · {}", self.version),
            None => self.version.clone(),
        }
    }

    /// The version as comparisons name it: `<run directory> <version>` for a run, the prompt
    /// file for a prompt.
    fn title(&self) -> String {
        match &self.execution {
            Some(_) => format!("{} {}", self.source, self.version),
            None => self.source.clone(),
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
    /// Each contender after the first against the first: the rows they scored differently
    /// on, with both answers.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub differing: Vec<DifferingRows>,
}

/// The rows two versions scored differently on, in row order: all of them, or the first
/// [`ROWS_ON_PAGE`] when there are more.
#[derive(Debug, Clone, Serialize)]
pub struct DifferingRows {
    /// The reference (the first contender) and the other.
    pub a: String,
    pub b: String,
    pub rows: Vec<RowPair>,
    /// Rows scored differently in all; more than `rows.len()` when the list was cut.
    pub total: usize,
    /// Rows both answered (a failed answer counts as an answer here).
    pub paired: usize,
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
    fn of(answers: &RowAnswers, texts: &Texts<'_>) -> Self {
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

/// The rows both versions have answers for, and the first [`ROWS_ON_PAGE`] of those where
/// `b`'s score differs from `a`'s (a row whose every answer failed differs from a scored one).
struct Differences {
    rows: Vec<usize>,
    total: usize,
    paired: usize,
}

impl Differences {
    fn of(a: Option<Rows<'_>>, b: Option<Rows<'_>>) -> Self {
        let mut found = Self {
            rows: Vec::new(),
            total: 0,
            paired: 0,
        };
        let (Some(a), Some(b)) = (a, b) else {
            return found;
        };
        for (row, ra, rb) in samples::both(a, b) {
            found.paired += 1;
            if ra.score() != rb.score() {
                found.total += 1;
                if found.rows.len() < ROWS_ON_PAGE {
                    found.rows.push(row);
                }
            }
        }
        found
    }

    /// The records of `rows`' answers to these rows, which the table needs read back.
    fn records(&self, rows: Option<Rows<'_>>) -> Vec<u32> {
        let mut records = Vec::new();
        for answers in rows
            .into_iter()
            .flat_map(|rows| self.rows.iter().filter_map(move |&row| rows.get(row)))
        {
            records.extend(answers.samples().map(|(record, _)| record));
        }
        records
    }

    /// The table of these rows with both versions' answers.
    fn table(
        self,
        (a, rows_a, texts_a): (&str, Option<Rows<'_>>, &Texts<'_>),
        (b, rows_b, texts_b): (&str, Option<Rows<'_>>, &Texts<'_>),
    ) -> DifferingRows {
        let rows = rows_a
            .zip(rows_b)
            .into_iter()
            .flat_map(|(rows_a, rows_b)| {
                self.rows
                    .iter()
                    .filter_map(move |&row| Some((row, rows_a.get(row)?, rows_b.get(row)?)))
            })
            .map(|(row, ra, rb)| {
                let shown = ra.shown_row(texts_a);
                RowPair {
                    row,
                    inputs: shown
                        .map(|r| r.inputs.clone().into_iter().collect())
                        .unwrap_or_default(),
                    expected: shown.map(|r| r.expected.clone()).unwrap_or_default(),
                    a: Answer::of(&ra, texts_a),
                    b: Answer::of(&rb, texts_b),
                }
            })
            .collect();
        DifferingRows {
            a: a.to_owned(),
            b: b.to_owned(),
            rows,
            total: self.total,
            paired: self.paired,
        }
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

/// A prompt version of a run directory, to compare.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pick {
    pub dir: PathBuf,
    /// The version, by its execution's label and its own (`experiment`, `g2`); none for the
    /// version the run's report recommends ([`RunData::recommended`]).
    pub version: Option<(String, String)>,
}

impl Pick {
    /// The version the report of the run in `dir` recommends.
    pub fn recommended(dir: &Path) -> Self {
        Self {
            dir: dir.to_owned(),
            version: None,
        }
    }
}

/// A picked version found in its run: (run, execution, version, model), on the execution's
/// first replay model, as in the run's own headline.
struct Found {
    run: usize,
    execution: usize,
    version: usize,
    model: String,
}

impl Found {
    fn rows<'a>(&self, runs: &'a [RunData]) -> Option<Rows<'a>> {
        let run = &runs[self.run];
        let execution = &run.executions[self.execution];
        let version = execution.versions[self.version].version;
        run.replay.version(&execution.variant, version, &self.model)
    }
}

/// Finds what `pick` names in `run` (loaded as `runs[index]`).
fn find(pick: &Pick, runs: &[RunData], index: usize) -> Result<Found, ReportError> {
    let run = &runs[index];
    let (execution, version) = match &pick.version {
        None => run.recommended().ok_or_else(|| {
            nothing(
                &run.dir,
                "replay.csv holds no answer of this run's prompts (a run stopped before its \
                 replay: `gepa-lab run --resume` asks for them); nothing to compare",
            )
        })?,
        Some((execution_label, version_label)) => {
            let execution = run
                .executions
                .iter()
                .find(|e| e.label == *execution_label)
                .ok_or_else(|| {
                    let known: Vec<&str> =
                        run.executions.iter().map(|e| e.label.as_str()).collect();
                    nothing(
                        &run.dir,
                        &format!(
                            "no execution {execution_label:?} in this run; it has {}",
                            known.join(", ")
                        ),
                    )
                })?;
            let version = execution
                .versions
                .iter()
                .position(|v| v.label == *version_label)
                .ok_or_else(|| {
                    let known: Vec<&str> = execution
                        .versions
                        .iter()
                        .map(|v| v.label.as_str())
                        .collect();
                    nothing(
                        &run.dir,
                        &format!(
                            "execution {execution_label:?} has no replayed version \
                             {version_label:?}; it has {}",
                            known.join(", ")
                        ),
                    )
                })?;
            (execution.index, version)
        }
    };
    let model = run.executions[execution]
        .models
        .first()
        .cloned()
        .ok_or_else(|| nothing(&run.dir, "its replay names no model; nothing to compare"))?;
    Ok(Found {
        run: index,
        execution,
        version,
        model,
    })
}

/// Prompt versions of runs against the first, on the holdout rows both answered: by default
/// the version each run's report recommends (`compare RUN_DIR...`), or any version of any run
/// (`gepa-lab view`'s side by side). Each directory is read once however many of its versions
/// are picked.
pub fn compare(picks: &[Pick]) -> Result<CompareReport, ReportError> {
    let (runs, found) = load_picks(picks)?;
    let (sha256, file) = shared_dataset(&runs)?;
    let picked = contenders(&runs, &found);
    let comparisons = against_first(&picked, "compare", "holdout");
    let differing = differing_rows(&runs, &found, &picked)?;
    for run in &runs {
        run.replay.check()?;
    }
    Ok(CompareReport {
        subject: "run".to_owned(),
        dataset_file: file,
        dataset_sha256: sha256,
        settings: Vec::new(),
        comparisons,
        contenders: with_diffs(picked),
        differing,
    })
}

/// The run directories the picks name, each read once, and where each pick is in them.
fn load_picks(picks: &[Pick]) -> Result<(Vec<RunData>, Vec<Found>), ReportError> {
    let mut runs: Vec<RunData> = Vec::new();
    let mut found = Vec::with_capacity(picks.len());
    for pick in picks {
        let index = match runs.iter().position(|run| run.dir == pick.dir) {
            Some(index) => index,
            None => {
                runs.push(load(&pick.dir)?);
                runs.len() - 1
            }
        };
        found.push(find(pick, &runs, index)?);
    }
    if runs.is_empty() {
        return Err(ReportError::NothingToCompare {
            run: PathBuf::from("."),
            message: "no run directory given".into(),
        });
    }
    Ok((runs, found))
}

/// The dataset every run was made on, as (SHA-256, file): runs on different datasets do not
/// answer the same rows, so they are refused.
fn shared_dataset(runs: &[RunData]) -> Result<(String, String), ReportError> {
    let first = &runs[0];
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
    for run in runs {
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
    Ok((sha256, file))
}

/// Each picked version as a contender, with its row scores.
fn contenders(runs: &[RunData], found: &[Found]) -> Vec<(Contender, BTreeMap<usize, f64>)> {
    let mut picked = Vec::new();
    for f in found {
        let run = &runs[f.run];
        let execution = &run.executions[f.execution];
        let version = &execution.versions[f.version];
        let rows = f.rows(runs);
        let scores = rows.map(samples::row_scores).unwrap_or_default();
        picked.push((
            Contender {
                source: run.dir.display().to_string(),
                name: run.manifest.plan.name.clone(),
                run_id: Some(run.manifest.run_id.clone()),
                execution: Some(execution.label.clone()),
                version: version.label.clone(),
                model: f.model.clone(),
                validation_score: version.validation_score,
                simulated: run.manifest.simulated,
                prompt: version.prompt.clone(),
                agreement: rows.and_then(|rows| Agreement::of(rows.values())),
                ..Contender::scored(&scores)
            },
            scores,
        ));
    }
    picked
}

/// The rows each contender scored differently from the first, with their texts, read back
/// from each run's replay.csv in one more pass per directory.
fn differing_rows(
    runs: &[RunData],
    found: &[Found],
    picked: &[(Contender, BTreeMap<usize, f64>)],
) -> Result<Vec<DifferingRows>, ReportError> {
    let differences: Vec<Differences> = found
        .iter()
        .skip(1)
        .map(|f| Differences::of(found[0].rows(runs), f.rows(runs)))
        .collect();
    let mut wanted: Vec<HashSet<u32>> = vec![HashSet::new(); runs.len()];
    for (f, difference) in found.iter().skip(1).zip(&differences) {
        wanted[found[0].run].extend(difference.records(found[0].rows(runs)));
        wanted[f.run].extend(difference.records(f.rows(runs)));
    }
    let texts: Vec<Texts<'static>> = runs
        .iter()
        .zip(&wanted)
        .map(|(run, wanted)| run.texts(|record| wanted.contains(&record), |_, _| {}))
        .collect::<Result<_, _>>()?;
    let reference = &picked[0].0;
    Ok(found
        .iter()
        .zip(picked)
        .skip(1)
        .zip(differences)
        .map(|((f, (contender, _)), difference)| {
            difference.table(
                (
                    &reference.title(),
                    found[0].rows(runs),
                    &texts[found[0].run],
                ),
                (&contender.title(), f.rows(runs), &texts[f.run]),
            )
        })
        .collect())
}

/// The contenders, each after the first with its prompt's diff against the first's.
fn with_diffs(picked: Vec<(Contender, BTreeMap<usize, f64>)>) -> Vec<Contender> {
    let reference = picked
        .first()
        .map(|(contender, _)| contender.prompt.clone())
        .unwrap_or_default();
    picked
        .into_iter()
        .enumerate()
        .map(|(i, (mut contender, _))| {
            if i > 0 {
                let (segments, stats) = word_diff(&reference, &contender.prompt);
                let parts = part_diffs(&reference, &contender.prompt);
                contender.diff = Some(PromptDiff {
                    segments,
                    stats,
                    parts,
                });
            }
            contender
        })
        .collect()
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
    let table = ReplayTable::of(replay).map_err(|err| err.at(Path::new(REPLAY_FILE)))?;
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
    let differing = match prompts.first() {
        Some(first) => {
            let rows_a = prompt_rows(&table, &first.file, &setting.model);
            prompts
                .iter()
                .skip(1)
                .map(|prompt| {
                    let rows_b = prompt_rows(&table, &prompt.file, &setting.model);
                    Differences::of(rows_a, rows_b).table(
                        (&first.file, rows_a, &texts),
                        (&prompt.file, rows_b, &texts),
                    )
                })
                .collect()
        }
        None => Vec::new(),
    };
    table.check()?;
    Ok(CompareReport {
        subject: "prompt".to_owned(),
        dataset_file: setting.dataset_file,
        dataset_sha256: setting.dataset_sha256,
        settings: setting.settings,
        contenders: with_diffs(picked),
        comparisons,
        differing,
    })
}

impl Contender {
    /// A contender with only its scores filled in: the row count, mean and 95% interval.
    fn scored(scores: &BTreeMap<usize, f64>) -> Contender {
        let values: Vec<f64> = scores.values().copied().collect();
        let interval = stats::mean_interval(&values).map(|(interval, _)| interval);
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
            diff: None,
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
            let model = if contender.model == reference.model {
                contender.model.clone()
            } else {
                format!("{} vs {}", contender.model, reference.model)
            };
            ComparisonView::new(
                contender.execution.as_deref().unwrap_or(execution),
                &model,
                &reference.title(),
                &contender.title(),
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
