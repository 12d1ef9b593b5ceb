//! Runs tracked in MLflow: `run --mlflow URL`, or `[tracking] mlflow = URL` in the experiment
//! file. Each execution of a run is one MLflow run, in the MLflow experiment named after the
//! experiment (or `[tracking] experiment`):
//!
//! - at the start: the run is created (or, for a resumed run, found again through the run
//!   directory's `mlflow.json`) with its parameters (models, budget, splits, engine settings,
//!   content hash) and tags, and marked running;
//! - at the end: the evolution's score and budget spent per generation as metric histories
//!   (steps logged before are not logged twice), each replayed version's holdout mean per model,
//!   the headline test (difference, interval, p-value; the verdict as a tag), the report, the
//!   prompts and `results.json` as artifacts; then the run's status.
//!
//! Tracking never stops or fails a run: what goes wrong is a warning, and the run directory
//! keeps everything to log again (`gepa-lab run --resume` logs a finished run's end again).
pub mod mlflow;

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use gepa_lab_report::ReportContext;
use gepa_lab_store::{ExecutionRecord, HISTORY_FILE, HistoryRow, RunDir, RunManifest};
use mlflow::{Metric, Mlflow, RunInfo, RunStatus, TrackingError};

/// The file in the run directory that names each execution's MLflow run.
pub const TRACKING_FILE: &str = "mlflow.json";

/// Where an execution is logged: the tracking server and the MLflow experiment's name.
pub use gepa_lab_experiment::TrackingPlan as Target;

/// Each execution's MLflow run, as logged so far.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Record {
    executions: Vec<Logged>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Logged {
    custom_id: String,
    url: String,
    experiment_id: String,
    run_id: String,
}

/// The MLflow targets of a run's executions: `--mlflow URL` for every one when given (in the
/// experiment named after the file), else each execution's own `[tracking]`.
pub fn targets(manifest: &RunManifest, flag: Option<&str>) -> Vec<(usize, Target)> {
    manifest
        .executions
        .iter()
        .enumerate()
        .filter_map(|(index, execution)| {
            let target = match flag {
                Some(url) => Some(Target {
                    url: url.to_owned(),
                    experiment: execution
                        .plan
                        .tracking
                        .as_ref()
                        .map_or_else(|| manifest.plan.name.clone(), |t| t.experiment.clone()),
                }),
                None => execution.plan.tracking.clone(),
            };
            Some((index, target?))
        })
        .collect()
}

/// The MLflow runs of one gepa-lab run, started or found again.
pub struct Tracker {
    dir: PathBuf,
    runs: Vec<Tracked>,
}

/// One execution and its MLflow run.
struct Tracked {
    /// Its position in the run's executions, and its customId.
    index: usize,
    custom_id: String,
    client: Mlflow,
    run: RunInfo,
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

fn read_record(dir: &RunDir, warn: &mut impl FnMut(String)) -> Record {
    let path = dir.file(TRACKING_FILE);
    if !path.exists() {
        return Record::default();
    }
    match gepa_lab_input::read_text(&path, 16 << 20)
        .map_err(|err| err.to_string())
        .and_then(|text| serde_json::from_str(&text).map_err(|err| err.to_string()))
    {
        Ok(record) => record,
        Err(err) => {
            warn(format!(
                "{}: {err}; new MLflow runs are made for this run",
                path.display()
            ));
            Record::default()
        }
    }
}

impl Tracker {
    /// Creates each tracked execution's MLflow run, or finds the one `mlflow.json` names,
    /// logs its parameters and marks it running. `None` when no execution is tracked.
    pub async fn start(
        dir: &RunDir,
        manifest: &RunManifest,
        flag: Option<&str>,
        warn: &mut impl FnMut(String),
    ) -> Option<Tracker> {
        let mut record = read_record(dir, warn);
        let mut targets = targets(manifest, flag);
        // An execution logged before goes on being logged, flag or not.
        for (index, execution) in manifest.executions.iter().enumerate() {
            let logged = record
                .executions
                .iter()
                .find(|l| l.custom_id == execution.custom_id);
            if let Some(logged) = logged
                && !targets.iter().any(|(i, _)| *i == index)
            {
                targets.push((
                    index,
                    Target {
                        url: logged.url.clone(),
                        experiment: String::new(),
                    },
                ));
            }
        }
        if targets.is_empty() {
            return None;
        }
        let mut runs = Vec::new();
        for (index, target) in targets {
            let execution = &manifest.executions[index];
            let client = Mlflow::new(&target.url);
            match start_one(&client, &mut record, dir, manifest, execution, &target).await {
                Ok(run) => runs.push(Tracked {
                    index,
                    custom_id: execution.custom_id.clone(),
                    client,
                    run,
                }),
                Err(err) => warn(format!(
                    "{}: not tracked in MLflow: {err}; the run goes on without it",
                    execution.custom_id
                )),
            }
        }
        Some(Tracker {
            dir: dir.path.clone(),
            runs,
        })
    }

    /// Logs what the run ended with, then sets each MLflow run's status: finished, or failed
    /// for an execution that did not finish. `context` is the report's, when it was rendered.
    pub async fn finish(
        &self,
        manifest: &RunManifest,
        context: Option<&ReportContext>,
        warn: &mut impl FnMut(String),
    ) {
        let history: Vec<HistoryRow> =
            match RunDir::open(&self.dir).and_then(|dir| dir.read_csv(HISTORY_FILE)) {
                Ok(history) => history,
                Err(err) => {
                    warn(format!("no score per generation is logged: {err}"));
                    Vec::new()
                }
            };
        for tracked in &self.runs {
            let execution = &manifest.executions[tracked.index];
            let status = if execution.state.is_finished() {
                RunStatus::Finished
            } else {
                RunStatus::Failed
            };
            let ending = Ending::of(context, execution);
            let logged = async {
                log_end(tracked, &self.dir, manifest, execution, &history, ending).await?;
                tracked
                    .client
                    .set_status(&tracked.run.run_id, status, Some(now_ms()))
                    .await
            };
            if let Err(err) = logged.await {
                warn(self.incomplete(tracked, &err));
            }
        }
    }

    /// Marks each MLflow run killed: the run was interrupted (Ctrl-C).
    pub async fn interrupted(&self, warn: &mut impl FnMut(String)) {
        for tracked in &self.runs {
            let killed = tracked
                .client
                .set_status(&tracked.run.run_id, RunStatus::Killed, Some(now_ms()))
                .await;
            if let Err(err) = killed {
                warn(self.incomplete(tracked, &err));
            }
        }
    }

    fn incomplete(&self, tracked: &Tracked, err: &TrackingError) -> String {
        format!(
            "{}: MLflow run {} is incomplete: {err}; `gepa-lab run --resume {}` logs it again",
            tracked.custom_id,
            tracked.run.run_id,
            self.dir.display()
        )
    }

    /// Each tracked execution's MLflow run: (custom id, run id).
    pub fn runs(&self) -> impl Iterator<Item = (&str, &str)> {
        self.runs
            .iter()
            .map(|t| (t.custom_id.as_str(), t.run.run_id.as_str()))
    }
}

/// What the report says of one execution: the report's context and the execution's label in
/// it (looked up once).
#[derive(Clone, Copy)]
struct Ending<'a> {
    context: &'a ReportContext,
    label: &'a str,
}

impl<'a> Ending<'a> {
    fn of(context: Option<&'a ReportContext>, execution: &ExecutionRecord) -> Option<Self> {
        let context = context?;
        let label = context
            .executions
            .iter()
            .find(|e| e.custom_id == execution.custom_id)?
            .label
            .as_str();
        Some(Self { context, label })
    }

    fn versions(self) -> impl Iterator<Item = &'a gepa_lab_report::VersionView> {
        let label = self.label;
        self.context
            .versions
            .iter()
            .filter(move |v| v.execution == label)
    }

    fn comparisons(self) -> impl Iterator<Item = &'a gepa_lab_report::ComparisonView> {
        let label = self.label;
        self.context
            .comparisons
            .iter()
            .filter(move |c| c.execution == label)
    }
}

async fn start_one(
    client: &Mlflow,
    record: &mut Record,
    dir: &RunDir,
    manifest: &RunManifest,
    execution: &ExecutionRecord,
    target: &Target,
) -> Result<RunInfo, TrackingError> {
    let known = record
        .executions
        .iter()
        .find(|l| l.custom_id == execution.custom_id && l.url == target.url)
        .cloned();
    let run = match known {
        Some(logged) => client.get_run(&logged.run_id).await?,
        None => {
            let experiment_id = client.experiment_id(&target.experiment).await?;
            let name = match &execution.plan.variant {
                Some(variant) => format!("{} {variant}", manifest.run_id),
                None => manifest.run_id.clone(),
            };
            let run = client
                .create_run(
                    &experiment_id,
                    &name,
                    manifest.created_at.timestamp_millis(),
                    &tags(dir, manifest, execution),
                )
                .await?;
            record.executions.push(Logged {
                custom_id: execution.custom_id.clone(),
                url: target.url.clone(),
                experiment_id,
                run_id: run.run_id.clone(),
            });
            let text = serde_json::to_vec_pretty(record).unwrap_or_default();
            if let Err(err) = gepa_lab_store::write_atomic(&dir.file(TRACKING_FILE), &text) {
                // Without the file a resume makes a second MLflow run; the run itself is fine.
                tracing::warn!("writing {TRACKING_FILE}: {err}");
            }
            run
        }
    };
    client
        .log_batch(&run.run_id, &[], &params(manifest, execution), &[])
        .await?;
    client
        .set_status(&run.run_id, RunStatus::Running, None)
        .await?;
    Ok(run)
}

/// The tags a new MLflow run gets: where it came from.
fn tags(
    dir: &RunDir,
    manifest: &RunManifest,
    execution: &ExecutionRecord,
) -> Vec<(String, String)> {
    let mut tags = vec![
        ("mlflow.source.name".into(), "gepa-lab".into()),
        ("mlflow.source.type".into(), "LOCAL".into()),
        ("gepa_lab.run_dir".into(), dir.path.display().to_string()),
        ("gepa_lab.run_id".into(), manifest.run_id.clone()),
        ("gepa_lab.custom_id".into(), execution.custom_id.clone()),
        (
            "gepa_lab.version".into(),
            env!("CARGO_PKG_VERSION").to_owned(),
        ),
    ];
    if let Some(description) = &manifest.plan.description {
        tags.push(("mlflow.note.content".into(), description.clone()));
    }
    tags
}

/// What an execution was run with: the plan's settings, never its rows or secrets.
fn params(manifest: &RunManifest, execution: &ExecutionRecord) -> Vec<(String, String)> {
    let plan = &execution.plan;
    let start = &plan.start;
    let mut params: Vec<(String, String)> = vec![
        ("experiment".into(), manifest.plan.name.clone()),
        (
            "experiment_file".into(),
            manifest.plan.file.display().to_string(),
        ),
        ("content_hash".into(), manifest.plan.content_hash.clone()),
        ("run_id".into(), manifest.run_id.clone()),
        ("custom_id".into(), execution.custom_id.clone()),
        (
            "backend".into(),
            serde_json::to_string(&manifest.backend).unwrap_or_default(),
        ),
        (
            "evolution.strategy".into(),
            start.strategy.as_str().to_owned(),
        ),
        ("evolution.model".into(), start.model.clone()),
        ("evolution.budget".into(), start.budget.to_string()),
        ("evolution.evaluator".into(), start.evaluator.clone()),
        (
            "dataset.file".into(),
            plan.dataset.file.display().to_string(),
        ),
        ("dataset.sha256".into(), plan.dataset.sha256.clone()),
        ("dataset.rows".into(), plan.dataset.rows.to_string()),
        ("dataset.inputs".into(), plan.dataset.inputs.join(",")),
        ("dataset.expected".into(), plan.dataset.expected.clone()),
        ("dataset.minibatch".into(), start.minibatch_size.to_string()),
        ("dataset.pareto".into(), start.pareto_size.to_string()),
        (
            "dataset.holdout".into(),
            plan.dataset.holdout_rows.to_string(),
        ),
    ];
    if let Some(variant) = &plan.variant {
        params.push(("variant".into(), variant.clone()));
    }
    if let Some(seed) = manifest.seed {
        params.push(("seed".into(), seed.to_string()));
    }
    if let Some(seed) = plan.dataset.shuffle_seed {
        params.push(("dataset.shuffle_seed".into(), seed.to_string()));
    }
    if plan.dataset.stratify {
        params.push(("dataset.stratify".into(), "true".into()));
    }
    if let Some(replay) = &plan.replay {
        params.extend([
            ("replay.models".into(), replay.models.join(",")),
            ("replay.top".into(), replay.top.to_string()),
            ("replay.scorer".into(), replay.scorer.to_string()),
            ("replay.temperature".into(), replay.temperature.to_string()),
        ]);
        if let Some(max_tokens) = replay.max_tokens {
            params.push(("replay.max_tokens".into(), max_tokens.to_string()));
        }
    }
    if let Some(engine) = &start.engine
        && let Ok(serde_json::Value::Object(settings)) = serde_json::to_value(engine)
    {
        for (key, value) in settings {
            let value = match value {
                serde_json::Value::String(text) => text,
                other => other.to_string(),
            };
            params.push((format!("engine.{key}"), value));
        }
    }
    params
}

/// A metric key from names that may hold any character: MLflow takes letters, digits, `_`,
/// `-`, `.`, ` ` and `/`.
fn key(parts: &[&str]) -> String {
    parts
        .iter()
        .map(|part| {
            part.chars()
                .map(|c| {
                    if c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | ' ') {
                        c
                    } else {
                        '_'
                    }
                })
                .collect::<String>()
        })
        .collect::<Vec<_>>()
        .join("/")
}

/// The metrics of an execution's end: its generations' scores and budget, and its holdout
/// results from the report.
fn end_metrics(
    execution: &ExecutionRecord,
    history: &[HistoryRow],
    ending: Option<Ending<'_>>,
    now: i64,
) -> Vec<Metric> {
    let variant = execution.plan.variant.as_deref().unwrap_or("");
    let at = |key: &str, value: f64, step: i64| Metric {
        key: key.to_owned(),
        value,
        timestamp: now,
        step,
    };
    let mut metrics = Vec::new();
    for row in history.iter().filter(|r| r.variant == variant) {
        let step = i64::from(row.generation);
        metrics.push(at("evolution_score", row.score, step));
        if let Some(used) = row.budget_used {
            metrics.push(at("budget_used", used as f64, step));
        }
    }
    let Some(ending) = ending else {
        return metrics;
    };
    for version in ending.versions() {
        for score in &version.scores {
            if let Some(mean) = score.mean {
                metrics.push(at(
                    &key(&["holdout", &version.label, &score.model]),
                    mean,
                    0,
                ));
            }
        }
    }
    for comparison in ending.comparisons() {
        let prefix = |what: &str| key(&["holdout", "best_vs_seed", &comparison.model, what]);
        metrics.push(at(&prefix("difference"), comparison.difference, 0));
        metrics.push(at(&prefix("rows"), comparison.rows as f64, 0));
        for (what, value) in [
            ("ci_low", comparison.ci_low),
            ("ci_high", comparison.ci_high),
            ("p_value", comparison.p_value),
        ] {
            if let Some(value) = value {
                metrics.push(at(&prefix(what), value, 0));
            }
        }
    }
    metrics
}

/// The tags of an execution's end: whether a stand-in model answered (known only once answers
/// came), the verdicts of its comparisons and its best version.
fn end_tags(manifest: &RunManifest, ending: Option<Ending<'_>>) -> Vec<(String, String)> {
    let mut tags = vec![(
        "gepa_lab.simulated".to_owned(),
        manifest.simulated.to_string(),
    )];
    let Some(ending) = ending else {
        return tags;
    };
    tags.extend(
        ending
            .comparisons()
            .map(|c| (key(&["gepa_lab.verdict", &c.model]), c.verdict_text.clone())),
    );
    if let Some(best) = &ending.context.best {
        tags.push((
            "gepa_lab.run_best".into(),
            format!("{} · {}", best.execution, best.version),
        ));
    }
    if let Some(best) = ending.versions().find(|v| v.is_best) {
        tags.push(("gepa_lab.best_version".into(), best.label.clone()));
    }
    tags
}

async fn log_end(
    tracked: &Tracked,
    dir: &Path,
    manifest: &RunManifest,
    execution: &ExecutionRecord,
    history: &[HistoryRow],
    ending: Option<Ending<'_>>,
) -> Result<(), TrackingError> {
    let (client, run) = (&tracked.client, &tracked.run);
    let mut metrics = end_metrics(execution, history, ending, now_ms());
    // A resumed run logs its end again: a point already logged with the same value is left
    // out, so no history is doubled; a value that changed (answers asked again) is logged anew
    // and, being newer, is the one MLflow shows.
    let mut keys: Vec<String> = metrics.iter().map(|m| m.key.clone()).collect();
    keys.sort();
    keys.dedup();
    for metric_key in keys {
        let logged = client.metric_points(&run.run_id, &metric_key).await?;
        metrics.retain(|m| m.key != metric_key || !logged.contains(&(m.step, m.value)));
    }
    client
        .log_batch(&run.run_id, &metrics, &[], &end_tags(manifest, ending))
        .await?;
    for (path, file, kind) in artifacts(dir) {
        let bytes = match gepa_lab_input::read_bytes(&file, 256 << 20) {
            Ok(bytes) => bytes,
            Err(_) => continue,
        };
        client.upload(run, &path, bytes, kind).await?;
    }
    for version in ending.into_iter().flat_map(Ending::versions) {
        client
            .upload(
                run,
                &format!("prompts/{}.txt", key(&[&version.label])),
                version.prompt.clone().into_bytes(),
                "text/plain; charset=utf-8",
            )
            .await?;
    }
    Ok(())
}

/// The run directory's files logged as artifacts: (artifact path, file, content type).
fn artifacts(dir: &Path) -> Vec<(String, PathBuf, &'static str)> {
    let mut files = vec![
        (
            "report/index.html".to_owned(),
            dir.join(gepa_lab_report::HTML_FILE),
            "text/html; charset=utf-8",
        ),
        (
            "report/summary.md".to_owned(),
            dir.join("summary.md"),
            "text/markdown; charset=utf-8",
        ),
        (
            gepa_lab_report::RESULTS_FILE.to_owned(),
            dir.join(gepa_lab_report::RESULTS_FILE),
            "application/json",
        ),
    ];
    if let Ok(entries) = std::fs::read_dir(dir.join("charts")) {
        let mut charts: Vec<PathBuf> = entries
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "svg"))
            .collect();
        charts.sort();
        for chart in charts {
            let name = chart
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            files.push((format!("report/charts/{name}"), chart, "image/svg+xml"));
        }
    }
    files
        .into_iter()
        .filter(|(_, file, _)| file.is_file())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture() -> RunManifest {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/run");
        RunDir::open(&dir).unwrap().read_manifest().unwrap()
    }

    #[test]
    fn the_flag_tracks_every_execution_and_the_file_only_its_own() {
        let mut manifest = fixture();
        assert!(targets(&manifest, None).is_empty());
        let all = targets(&manifest, Some("http://127.0.0.1:5000"));
        assert_eq!(all.len(), manifest.executions.len());
        assert!(all.iter().all(|(_, t)| t.experiment == manifest.plan.name));
        let own = Target {
            url: "http://mlflow:5000".into(),
            experiment: "sentiment runs".into(),
        };
        manifest.executions[1].plan.tracking = Some(own.clone());
        assert_eq!(targets(&manifest, None), vec![(1, own)]);
        // The flag picks the server; the file's experiment name stays.
        let flagged = targets(&manifest, Some("http://other:5000"));
        assert_eq!(flagged[1].1.url, "http://other:5000");
        assert_eq!(flagged[1].1.experiment, "sentiment runs");
    }

    #[test]
    fn parameters_are_the_plan_settings_never_its_rows() {
        let manifest = fixture();
        let execution = &manifest.executions[0];
        let params = params(&manifest, execution);
        let value = |key: &str| {
            params
                .iter()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v.as_str())
        };
        assert_eq!(
            value("evolution.budget"),
            Some(execution.plan.start.budget.to_string().as_str())
        );
        assert_eq!(
            value("content_hash"),
            Some(manifest.plan.content_hash.as_str())
        );
        assert_eq!(
            value("dataset.sha256"),
            Some(execution.plan.dataset.sha256.as_str())
        );
        for item in &execution.plan.start.dataset {
            for text in item.input.values() {
                assert!(
                    params.iter().all(|(_, v)| !v.contains(text.as_str())),
                    "{text}"
                );
            }
        }
        // Keys are unique: MLflow refuses a parameter logged twice with two values.
        let mut keys: Vec<&str> = params.iter().map(|(k, _)| k.as_str()).collect();
        keys.sort_unstable();
        let before = keys.len();
        keys.dedup();
        assert_eq!(keys.len(), before);
    }

    #[test]
    fn a_stratified_split_is_a_parameter_and_a_plain_one_is_not() {
        let mut manifest = fixture();
        let logged = |manifest: &RunManifest| {
            params(manifest, &manifest.executions[0])
                .into_iter()
                .find(|(k, _)| k == "dataset.stratify")
                .map(|(_, v)| v)
        };
        manifest.executions[0].plan.dataset.stratify = false;
        assert_eq!(logged(&manifest), None);
        manifest.executions[0].plan.dataset.stratify = true;
        assert_eq!(logged(&manifest).as_deref(), Some("true"));
    }

    #[test]
    fn metric_keys_keep_only_what_mlflow_takes() {
        assert_eq!(
            key(&["holdout", "g2", "local:qwen"]),
            "holdout/g2/local_qwen"
        );
    }
}
