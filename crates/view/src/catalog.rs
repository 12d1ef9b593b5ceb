//! The runs under a folder: found on every request, so a run started after the viewer appears
//! without a restart, and summarised from the files each run already writes (`run.json`, and
//! `results.json` once its report is rendered). A summary is kept while neither file changes,
//! so a folder of a thousand runs is read once and then only stat'ed.
use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use gepa_lab_report::stats::Verdict;
use gepa_lab_report::{FORMAT_VERSION, RESULTS_FILE};
use gepa_lab_store::{Backend, ExecutionState, MANIFEST_FILE, RunDir, RunManifest};

/// How deep under the folder run directories are looked for: `run` writes
/// `<out>/<experiment>/<run id>/`, and a folder may group those one or two levels more.
pub const MAX_DEPTH: usize = 4;

/// Largest `results.json` read (a 100-variant matrix writes about 1 MB).
const RESULTS_LIMIT: u64 = 64 << 20;

/// One run directory under the folder.
#[derive(Debug, Clone, Serialize)]
pub struct RunEntry {
    /// Its path under the folder with `/` between names: the run's name in the viewer's URLs.
    pub key: String,
    #[serde(skip)]
    pub dir: PathBuf,
    /// What its files say; the reason when `run.json` cannot be read.
    pub summary: Result<RunSummary, String>,
}

/// Where a run stands, from `run.json`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum RunState {
    /// It went through to the end and every execution finished.
    Finished,
    /// It went through to the end, but `failed` of its `executions` failed.
    Failed { failed: usize, executions: usize },
    /// It has not gone through to the end: it is running now, or it stopped and
    /// `gepa-lab run --resume` goes on with it.
    Unfinished,
}

impl RunState {
    fn of(manifest: &RunManifest) -> Self {
        if manifest.finished_at.is_none() {
            return Self::Unfinished;
        }
        let failed = manifest
            .executions
            .iter()
            .filter(|e| matches!(e.state, ExecutionState::Failed { .. }))
            .count();
        if failed == 0 {
            Self::Finished
        } else {
            Self::Failed {
                failed,
                executions: manifest.executions.len(),
            }
        }
    }

    pub fn text(&self) -> String {
        match self {
            Self::Finished => "finished".into(),
            Self::Failed { failed, executions } if failed == executions => "failed".into(),
            Self::Failed { failed, executions } => {
                format!("finished, {failed} of {executions} executions failed")
            }
            Self::Unfinished => "unfinished".into(),
        }
    }

    /// The word the state filter matches.
    pub fn word(&self) -> &'static str {
        match self {
            Self::Finished => "finished",
            Self::Failed { .. } => "failed",
            Self::Unfinished => "unfinished",
        }
    }
}

/// Where a run's services were, as the runs table names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BackendKind {
    /// The built-in engine and the embedded model.
    Local,
    /// A `gepa-lab serve` or another deployment of both APIs at one address.
    Serve,
    /// The public services.
    Public,
}

impl BackendKind {
    fn of(backend: &Backend) -> Self {
        match backend {
            Backend::Local => Self::Local,
            Backend::Url { .. } => Self::Serve,
            Backend::Remote { .. } => Self::Public,
        }
    }

    pub fn word(self) -> &'static str {
        match self {
            Self::Local => "local",
            Self::Serve => "serve",
            Self::Public => "public",
        }
    }
}

/// What the runs table shows of a run.
#[derive(Debug, Clone, Serialize)]
pub struct RunSummary {
    pub experiment: String,
    /// The experiment file, as the run recorded it.
    pub file: String,
    /// The experiment file's content hash: two runs with the same hash ran the same file.
    pub content_hash: String,
    pub run_id: String,
    pub created_at: DateTime<Utc>,
    pub backend: BackendKind,
    /// The backend in full (its address).
    pub backend_text: String,
    /// Some answer came from the test stand-in model.
    pub simulated: bool,
    pub state: RunState,
    pub executions: usize,
    /// Calls planned over every execution, and spent where the service said.
    pub budget: u64,
    pub budget_used: Option<u64>,
    /// `index.html` is there to open.
    pub has_report: bool,
    /// The holdout results of the rendered report; none before it is rendered, the reason
    /// when `results.json` cannot be read. Pages read it through [`RunSummary::results`].
    #[serde(skip)]
    pub holdout: Option<Result<Holdout, String>>,
}

/// The run's recommendation on the holdout, from `results.json`.
#[derive(Debug, Clone, Serialize)]
pub struct Holdout {
    /// `<execution> · <version>` of the version the run recommends.
    pub best_version: String,
    pub model: String,
    /// Mean holdout score of the execution's seed and of the recommended version, over the
    /// rows each answered.
    pub seed: Option<f64>,
    pub best: Option<f64>,
    /// The headline test, seed against best, when the best is not the seed.
    pub rows: Option<usize>,
    pub difference: Option<f64>,
    pub verdict: Option<Verdict>,
    pub verdict_text: String,
    /// Every replayed version, `(execution, version)`, for picking one to compare.
    pub versions: Vec<(String, String)>,
}

/// The parts of `results.json` the viewer reads (see `report::export::Results`).
#[derive(Deserialize)]
struct Results {
    format_version: u32,
    best: Option<Best>,
    headline: Option<Headline>,
    #[serde(default)]
    versions: Vec<ResultVersion>,
}

#[derive(Deserialize)]
struct Best {
    execution: String,
    version: String,
    model: String,
    mean: Option<f64>,
}

#[derive(Deserialize)]
struct Headline {
    rows: usize,
    difference: f64,
    verdict: Verdict,
    verdict_text: String,
}

#[derive(Deserialize)]
struct ResultVersion {
    execution: String,
    label: String,
    is_seed: bool,
    #[serde(default)]
    scores: Vec<ResultScore>,
}

#[derive(Deserialize)]
struct ResultScore {
    model: String,
    mean: Option<f64>,
}

impl Holdout {
    fn read(path: &Path) -> Result<Self, String> {
        let text = gepa_lab_input::read_text(path, RESULTS_LIMIT).map_err(|err| err.to_string())?;
        let results: Results = serde_json::from_str(&text).map_err(|err| err.to_string())?;
        if results.format_version != FORMAT_VERSION {
            return Err(format!(
                "format_version {}, this build reads {FORMAT_VERSION}: render it again with \
                 `gepa-lab report`",
                results.format_version
            ));
        }
        let versions = results
            .versions
            .iter()
            .map(|v| (v.execution.clone(), v.label.clone()))
            .collect();
        let Some(best) = results.best else {
            return Ok(Self {
                best_version: String::new(),
                model: String::new(),
                seed: None,
                best: None,
                rows: None,
                difference: None,
                verdict: None,
                verdict_text: "no version was replayed".into(),
                versions,
            });
        };
        let seed = results
            .versions
            .iter()
            .find(|v| v.is_seed && v.execution == best.execution)
            .and_then(|v| v.scores.iter().find(|s| s.model == best.model))
            .and_then(|s| s.mean);
        let headline = results.headline;
        Ok(Self {
            best_version: format!("{} · {}", best.execution, best.version),
            model: best.model,
            seed,
            best: best.mean,
            rows: headline.as_ref().map(|h| h.rows),
            difference: headline.as_ref().map(|h| h.difference),
            verdict: headline.as_ref().map(|h| h.verdict),
            verdict_text: headline.map_or_else(
                || "the seed is the best version".to_owned(),
                |h| h.verdict_text,
            ),
            versions,
        })
    }
}

impl RunSummary {
    fn read(dir: &Path) -> Result<Self, String> {
        let manifest = RunDir::open(dir)
            .and_then(|run| run.read_manifest())
            .map_err(|err| err.to_string())?;
        let results = dir.join(RESULTS_FILE);
        let holdout = results.is_file().then(|| Holdout::read(&results));
        Ok(Self {
            experiment: manifest.plan.name.clone(),
            file: manifest.plan.file.display().to_string(),
            content_hash: manifest.plan.content_hash.clone(),
            run_id: manifest.run_id.clone(),
            created_at: manifest.created_at,
            backend: BackendKind::of(&manifest.backend),
            backend_text: manifest.backend_description(),
            simulated: manifest.simulated,
            state: RunState::of(&manifest),
            executions: manifest.executions.len(),
            budget: manifest
                .executions
                .iter()
                .map(|e| e.plan.start.budget)
                .sum(),
            budget_used: manifest
                .executions
                .iter()
                .map(|e| e.budget_used)
                .sum::<Option<u64>>(),
            has_report: dir.join(gepa_lab_report::HTML_FILE).is_file(),
            holdout,
        })
    }

    /// The report's holdout results, when it is rendered and readable.
    pub fn results(&self) -> Option<&Holdout> {
        self.holdout.as_ref()?.as_ref().ok()
    }

    /// The seed's and the best version's holdout means, when the report has them.
    pub fn scores(&self) -> (Option<f64>, Option<f64>) {
        self.results()
            .map_or((None, None), |holdout| (holdout.seed, holdout.best))
    }
}

/// What a summary was read from: a file's length and modification time, for each file read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    manifest: Option<(u64, SystemTime)>,
    results: Option<(u64, SystemTime)>,
    report: bool,
}

impl Stamp {
    fn of(dir: &Path) -> Self {
        let file = |name: &str| {
            let meta = fs::metadata(dir.join(name)).ok()?;
            Some((meta.len(), meta.modified().ok()?))
        };
        Self {
            manifest: file(MANIFEST_FILE),
            results: file(RESULTS_FILE),
            report: dir.join(gepa_lab_report::HTML_FILE).is_file(),
        }
    }
}

/// The run directories under one folder, with their summaries kept between requests.
pub struct Catalog {
    root: PathBuf,
    kept: Mutex<HashMap<PathBuf, (Stamp, Arc<RunEntry>)>>,
}

impl Catalog {
    pub fn new(root: &Path) -> Self {
        Self {
            root: root.to_owned(),
            kept: Mutex::new(HashMap::new()),
        }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Every run directory under the folder, as it is now, newest first.
    pub fn runs(&self) -> Vec<Arc<RunEntry>> {
        let mut found = Vec::new();
        find_runs(&self.root, 0, &mut found);
        let mut kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        let mut seen = HashMap::with_capacity(found.len());
        let mut runs: Vec<Arc<RunEntry>> = found
            .into_iter()
            .map(|dir| {
                let (stamp, entry) = self.read(&kept, dir.clone());
                seen.insert(dir, (stamp, Arc::clone(&entry)));
                entry
            })
            .collect();
        // Runs deleted since are forgotten.
        *kept = seen;
        runs.sort_by(|a, b| created(b).cmp(&created(a)).then(a.key.cmp(&b.key)));
        runs
    }

    /// The run named `key`, as it is now.
    pub fn run(&self, key: &str) -> Option<Arc<RunEntry>> {
        let (run, rest) = self.run_in(key)?;
        rest.is_empty().then_some(run)
    }

    /// The run directory a path under the folder starts with (`<run>/<rest>`), and the rest:
    /// found by its names, as [`find_runs`] would find it, without reading the whole folder.
    pub fn run_in<'p>(&self, path: &'p str) -> Option<(Arc<RunEntry>, &'p str)> {
        let mut dir = self.root.clone();
        let mut end = 0;
        for (depth, name) in path.split('/').enumerate() {
            // Names only: never `.`, `..` or a hidden folder, which the scan skips too.
            if depth >= MAX_DEPTH || name.is_empty() || name.starts_with('.') {
                return None;
            }
            dir.push(name);
            end += name.len() + usize::from(depth > 0);
            if dir.join(MANIFEST_FILE).is_file() {
                let mut kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
                let (stamp, entry) = self.read(&kept, dir.clone());
                kept.insert(dir, (stamp, Arc::clone(&entry)));
                let rest = path[end..].strip_prefix('/').unwrap_or(&path[end..]);
                return Some((entry, rest));
            }
        }
        None
    }

    /// The run in `dir`: kept from an earlier read while its files are unchanged, else read.
    fn read(
        &self,
        kept: &HashMap<PathBuf, (Stamp, Arc<RunEntry>)>,
        dir: PathBuf,
    ) -> (Stamp, Arc<RunEntry>) {
        let stamp = Stamp::of(&dir);
        let entry = match kept.get(&dir) {
            Some((was, entry)) if *was == stamp => Arc::clone(entry),
            _ => Arc::new(RunEntry {
                key: key_of(&self.root, &dir),
                summary: RunSummary::read(&dir),
                dir,
            }),
        };
        (stamp, entry)
    }
}

fn created(run: &RunEntry) -> Option<DateTime<Utc>> {
    run.summary.as_ref().ok().map(|s| s.created_at)
}

/// `dir`'s path under `root`, its names joined by `/`.
fn key_of(root: &Path, dir: &Path) -> String {
    let relative = dir.strip_prefix(root).unwrap_or(dir);
    let names: Vec<String> = relative
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    names.join("/")
}

/// Adds the run directories at and under `dir` to `found`: a folder holding `run.json` is a
/// run, and nothing under it is looked at. Hidden folders are skipped; unreadable ones too.
fn find_runs(dir: &Path, depth: usize, found: &mut Vec<PathBuf>) {
    if dir.join(MANIFEST_FILE).is_file() {
        found.push(dir.to_owned());
        return;
    }
    if depth >= MAX_DEPTH {
        return;
    }
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    let mut children: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
        .map(|e| e.path())
        .filter(|path| path.is_dir())
        .collect();
    children.sort();
    for child in children {
        find_runs(&child, depth + 1, found);
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use gepa_lab_report::{self as report, RenderOptions};

    /// A folder holding the fixture run twice, as `sentiment/open` (unfinished, never
    /// reported) and `sentiment/done` (finished, its report rendered), a hidden copy, and a
    /// run directory whose `run.json` is damaged.
    pub fn folder() -> tempfile::TempDir {
        let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/run");
        let root = tempfile::tempdir().unwrap();
        for name in ["sentiment/open", "sentiment/done", ".hidden/copy"] {
            let dir = root.path().join(name);
            fs::create_dir_all(&dir).unwrap();
            for file in ["run.json", "history.csv", "replay.csv", "events.jsonl"] {
                fs::copy(fixture.join(file), dir.join(file)).unwrap();
            }
        }
        let done = RunDir::open(&root.path().join("sentiment/done")).unwrap();
        let mut manifest = done.read_manifest().unwrap();
        manifest.run_id = "done-run".into();
        manifest.created_at += chrono::Duration::hours(1);
        manifest.finished_at = Some(manifest.created_at);
        done.write_manifest(&manifest).unwrap();
        let rendered = report::build(&done.path, RenderOptions::default()).unwrap();
        report::write(&rendered, &done.path).unwrap();
        let broken = root.path().join("broken");
        fs::create_dir_all(&broken).unwrap();
        fs::write(broken.join(MANIFEST_FILE), "{").unwrap();
        root
    }

    #[test]
    fn keys_join_names_with_slashes() {
        let root = Path::new("/tmp/reports");
        assert_eq!(key_of(root, &root.join("a").join("b")), "a/b");
    }

    #[test]
    fn runs_are_found_summarised_and_read_again_when_they_change() {
        let root = folder();
        let catalog = Catalog::new(root.path());
        let runs = catalog.runs();
        let keys: Vec<&str> = runs.iter().map(|r| r.key.as_str()).collect();
        // Newest first; the damaged run (no date) last; the hidden folder is not looked in.
        assert_eq!(keys, ["sentiment/done", "sentiment/open", "broken"]);

        let done = runs[0].summary.as_ref().unwrap();
        assert_eq!(done.state, RunState::Finished);
        assert_eq!(done.experiment, "sentiment-report");
        assert!(done.has_report);
        let holdout = done.holdout.as_ref().unwrap().as_ref().unwrap();
        assert!(
            holdout.best.is_some() && holdout.seed.is_some(),
            "{holdout:?}"
        );
        assert!(
            holdout
                .versions
                .contains(&("budget-30".into(), "seed".into()))
        );

        let open = runs[1].summary.as_ref().unwrap();
        assert_eq!(open.state, RunState::Unfinished);
        assert!(open.holdout.is_none() && !open.has_report);
        let broken = runs[2].summary.as_ref().unwrap_err();
        assert!(broken.contains("run.json"), "{broken}");

        // A report removed, and a run removed, show at the next look.
        fs::remove_file(root.path().join("sentiment/done").join(RESULTS_FILE)).unwrap();
        fs::remove_dir_all(root.path().join("sentiment/open")).unwrap();
        let runs = catalog.runs();
        assert_eq!(runs.len(), 2);
        assert!(runs[0].summary.as_ref().unwrap().holdout.is_none());
        assert!(catalog.run("sentiment/open").is_none());
    }

    #[test]
    fn a_run_is_found_by_its_names_and_nothing_outside_the_folder_is() {
        let root = folder();
        let catalog = Catalog::new(root.path());
        let (run, rest) = catalog.run_in("sentiment/done/charts/a.svg").unwrap();
        assert_eq!((run.key.as_str(), rest), ("sentiment/done", "charts/a.svg"));
        assert_eq!(catalog.run("sentiment/open").unwrap().key, "sentiment/open");
        for outside in [
            "sentiment",
            "sentiment/done/x",
            "../x",
            ".hidden/copy",
            "/etc",
            "",
        ] {
            assert!(catalog.run(outside).is_none(), "{outside}");
        }
    }

    #[test]
    fn a_results_file_of_another_format_says_to_render_again() {
        let root = folder();
        let results = root.path().join("sentiment/done").join(RESULTS_FILE);
        let text = fs::read_to_string(&results).unwrap().replacen(
            &format!("\"format_version\": {FORMAT_VERSION}"),
            "\"format_version\": 99",
            1,
        );
        fs::write(&results, text).unwrap();
        let run = Catalog::new(root.path()).run("sentiment/done").unwrap();
        let err = run
            .summary
            .as_ref()
            .unwrap()
            .holdout
            .clone()
            .unwrap()
            .unwrap_err();
        assert!(
            err.contains("format_version 99") && err.contains("gepa-lab report"),
            "{err}"
        );
        // The runs table says so in the run's row.
        let catalog = Catalog::new(root.path());
        let page = crate::pages::runs_page(
            root.path(),
            &catalog.runs(),
            &crate::pages::RunsQuery::default(),
        )
        .unwrap();
        assert!(page.contains("results.json: format_version 99"), "{page}");
    }
}
