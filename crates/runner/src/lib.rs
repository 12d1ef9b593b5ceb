//! Executing a Plan: start one execution per variant (never twice), poll them, fetch every page
//! of their history, replay the seed and the best prompts on the holdout rows, score the answers,
//! and keep the run directory up to date all along so that a run killed at any point resumes.
//!
//! The runner reads only the Plan and the run directory, talks to services only through the
//! `Evolution` and `Inference` traits, and writes only through `store`.
mod events;
pub mod probe;
pub mod prompts;
pub mod providers;
mod replay;

use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::Utc;
use rand::Rng;
use thiserror::Error;

pub use events::{AnswerFor, Event, Observer, Silent};
use replay::Holdout;
pub use replay::{AnswerEvents, Replayed};

use gepa_lab_evolution::wire::Status;
use gepa_lab_evolution::{Evolution, EvolutionError, PAGE_LIMIT, fetch_history, find_by_custom_id};
use gepa_lab_experiment::Plan;
use gepa_lab_inference::Inference;
use gepa_lab_store::{
    Backend, ExecutionRecord, ExecutionState, FORMAT_VERSION, HISTORY_FILE, HistoryRow,
    IterationRow, REPLAY_FILE, RunDir, RunManifest, StoreError,
};

/// The two services a run talks to, and how to describe them in `run.json`.
#[derive(Clone)]
pub struct Backends {
    pub evolution: Arc<dyn Evolution>,
    pub inference: Arc<dyn Inference>,
    pub description: Backend,
    /// Both take the same key at the same service (a `gepa-lab serve`): a start refused for
    /// its key means the replay's requests would be refused too, so none is sent.
    pub shared_key: bool,
}

/// How patiently the runner waits.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Time between two polls of an execution (plus up to `poll_jitter`).
    pub poll_interval: Duration,
    pub poll_jitter: Duration,
    /// The whole wait for executions to finish; what is still running then is reported as timed
    /// out and the run goes on with what it has.
    pub timeout: Duration,
    /// Which replay answers get a line in `events.jsonl`.
    pub answer_events: AnswerEvents,
}

impl RunOptions {
    /// The public service asks to be polled every 10 to 30 seconds.
    pub fn remote() -> Self {
        Self {
            poll_interval: Duration::from_secs(10),
            poll_jitter: Duration::from_secs(20),
            timeout: Duration::from_secs(6 * 3600),
            answer_events: AnswerEvents::default(),
        }
    }

    /// A local engine or a `serve` on this machine can be asked every second.
    pub fn local() -> Self {
        Self {
            poll_interval: Duration::from_millis(500),
            poll_jitter: Duration::from_millis(500),
            timeout: Duration::from_secs(6 * 3600),
            answer_events: AnswerEvents::default(),
        }
    }
}

#[derive(Debug, Error)]
pub enum RunError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Dataset(#[from] gepa_lab_dataset::DatasetError),
    #[error("the plan's dataset split: {0}")]
    Split(gepa_lab_dataset::SplitError),
    #[error("replay scorer: {0}")]
    Scorer(gepa_lab_score::ScorerError),
    #[error("the seed prompt: {0}")]
    Seed(gepa_lab_prompt::TemplateError),
    #[error(
        "the dataset {file} changed since the run started (sha256 {expected}, now {found}); a resumed run must replay the same rows"
    )]
    DatasetChanged {
        file: String,
        expected: String,
        found: String,
    },
    /// Polling got a 401 or 403: the key, not an outage. The run ends with every state kept,
    /// so that a resume with a valid key goes on.
    #[error(
        "the evolution service refused the key while polling evolutionId {evolution_id} \
         ({error}); every execution's state is kept: set a valid key and resume the run"
    )]
    KeyRefused {
        evolution_id: String,
        error: gepa_lab_http::ApiError,
    },
}

// By hand rather than `#[from]`, which would make each error a `source` as well as part of the
// message, and a report of the chain would say it twice.
impl From<gepa_lab_dataset::SplitError> for RunError {
    fn from(error: gepa_lab_dataset::SplitError) -> Self {
        Self::Split(error)
    }
}

impl From<gepa_lab_score::ScorerError> for RunError {
    fn from(error: gepa_lab_score::ScorerError) -> Self {
        Self::Scorer(error)
    }
}

impl From<gepa_lab_prompt::TemplateError> for RunError {
    fn from(error: gepa_lab_prompt::TemplateError) -> Self {
        Self::Seed(error)
    }
}

/// How long after a start request went out the service may still be storing it: a resume looks
/// a customId up again after this much time before sending the start a second time. Measured:
/// 8 of 8 immediate resumes found nothing and started twice; 0 of 5 did after 2.5 s.
const START_MAY_STILL_ARRIVE: Duration = Duration::from_secs(10);

/// The calls an execution has spent, as a service reports them (a number that is not a count
/// is not one).
fn budget_used(reported: Option<f64>) -> Option<u64> {
    reported
        .filter(|used| used.is_finite() && *used >= 0.0)
        .map(|used| used.round() as u64)
}

/// What a finished (or timed-out) run produced.
#[derive(Debug)]
pub struct Outcome {
    pub dir: RunDir,
    pub manifest: RunManifest,
    pub history: Vec<HistoryRow>,
    /// Executions whose history could not be fetched this time (what was stored is kept).
    pub history_failures: usize,
    /// How many rows `replay.csv` got, and how many of them have no answer.
    pub replay: Replayed,
    /// A start or a replay request failed because the service refused the key (401 or 403).
    pub key_refused: bool,
}

/// A new run directory for `plan`, with its first manifest written.
pub fn create_run(
    root: &std::path::Path,
    plan: &Plan,
    backend: Backend,
    seed: Option<u64>,
) -> Result<(RunDir, RunManifest), RunError> {
    let now = Utc::now();
    let run_id = format!(
        "{}-{:04x}",
        now.format("%Y%m%d-%H%M%S"),
        rand::rng().random::<u16>()
    );
    let dir = RunDir::create(root, &plan.name, &run_id)?;
    let manifest = RunManifest {
        format_version: FORMAT_VERSION,
        run_id,
        created_at: now,
        updated_at: now,
        backend,
        simulated: false,
        finished_at: None,
        seed,
        plan: plan.summary(),
        executions: plan
            .executions
            .iter()
            .cloned()
            .map(|mut execution| {
                anchor_paths(&mut execution);
                ExecutionRecord::new(execution)
            })
            .collect(),
    };
    dir.write_manifest(&manifest)?;
    Ok((dir, manifest))
}

/// Makes the files an execution reads later (the dataset, a scorer's schema or program folder)
/// absolute, so that `run --resume` and `report` work from any folder, not only the one the run
/// started in. A path that cannot be made absolute is left as it was.
fn anchor_paths(execution: &mut gepa_lab_experiment::ExecutionPlan) {
    let anchor = |path: &mut std::path::PathBuf| {
        if let Ok(absolute) = std::path::absolute(&*path) {
            *path = absolute;
        }
    };
    anchor(&mut execution.dataset.file);
    if let Some(replay) = &mut execution.replay {
        match &mut replay.scorer {
            gepa_lab_score::ScorerSpec::JsonSchema { schema } => anchor(schema),
            gepa_lab_score::ScorerSpec::Command { dir, .. } => anchor(dir),
            _ => {}
        }
    }
}

/// Runs (or resumes) the run in `dir` to the end.
pub async fn execute(
    dir: RunDir,
    manifest: RunManifest,
    backends: &Backends,
    options: &RunOptions,
    observer: &dyn Observer,
) -> Result<Outcome, RunError> {
    let resumed = manifest
        .executions
        .iter()
        .any(|e| e.state != ExecutionState::NotSent);
    // Before anything is appended: a kill may have left a torn line at the end of a file.
    dir.cut_torn_tails()?;
    let mut iterations_seen = std::collections::HashMap::new();
    for row in dir.read_iterations()? {
        let last = iterations_seen.entry(row.evolution_id).or_insert(0);
        *last = row.record.iteration().max(*last);
    }
    let mut run = Runner {
        dir,
        manifest,
        backends,
        observer,
        iterations_seen,
        key_refused: None,
        answer_events: options.answer_events,
    };
    run.emit(Event::RunStarted {
        run_id: run.manifest.run_id.clone(),
        // Where it goes on now, which a resume may have been told to change.
        backend: backend_label(&backends.description),
        executions: run.manifest.executions.len(),
        resumed,
    })?;
    let holdouts = load_holdouts(&run.manifest.executions)?;
    run.start_all().await?;
    run.poll_all(options).await?;
    let (history, history_failures) = run.fetch_histories().await?;
    let iterations = run.dir.read_iterations()?;
    let mut out = run.dir.csv_appender(REPLAY_FILE)?;
    let replayed = replay::replay(
        &run.answering(),
        &run.manifest.executions,
        &holdouts,
        &history,
        &iterations,
        &mut out,
        run.key_refused.as_deref().filter(|_| backends.shared_key),
    )
    .await?;
    out.finish()?;
    if replayed.simulated {
        run.manifest.simulated = true;
    }
    let key_refused = run.key_refused.is_some() || replayed.key_refused;
    let failed = run
        .manifest
        .executions
        .iter()
        .filter(|e| !e.state.is_finished())
        .count();
    run.emit(Event::RunFinished {
        executions_completed: run.manifest.executions.len() - failed,
        executions_failed: failed,
        replay_rows: replayed.rows,
        replay_errors: replayed.errors,
    })?;
    run.manifest.finished_at = Some(Utc::now());
    run.save()?;
    Ok(Outcome {
        dir: run.dir,
        manifest: run.manifest,
        history,
        history_failures,
        replay: replayed,
        key_refused,
    })
}

/// Where the holdout rows of each execution are (`None` for one without a replay), in files whose
/// bytes are the ones the run started with: a resumed run must replay the same rows.
fn load_holdouts(executions: &[ExecutionRecord]) -> Result<Vec<Option<Holdout>>, RunError> {
    let mut holdouts = Vec::with_capacity(executions.len());
    for execution in executions {
        let dataset = &execution.plan.dataset;
        let changed = |found: String| RunError::DatasetChanged {
            file: dataset.file.display().to_string(),
            expected: dataset.sha256.clone(),
            found,
        };
        let columns = planned_columns(dataset)?;
        // A stratified holdout's label keys come from the same pass as the hash, so they are of
        // the bytes the run started with; without a replay no holdout is split.
        let replayed = execution.plan.replay.is_some();
        let labels = gepa_lab_dataset::LabelKeys::for_split(dataset.stratify && replayed);
        let scan = gepa_lab_dataset::scan(&dataset.file, &columns, 0, labels)?;
        if scan.sha256 != dataset.sha256 {
            return Err(changed(scan.sha256));
        }
        holdouts.push(if replayed {
            let split = dataset.split(scan.label_keys.as_deref())?;
            Some(Holdout {
                file: dataset.file.clone(),
                columns,
                rows: split.holdout,
            })
        } else {
            None
        });
    }
    Ok(holdouts)
}

/// Why the public evolution service cannot run these plans (it takes no seed and no engine
/// settings), or `None`.
pub fn public_service_refusal<'a>(
    seed: Option<u64>,
    plans: impl IntoIterator<Item = (&'a std::path::Path, &'a Plan)>,
    resumed: Option<(&'a std::path::Path, &'a RunManifest)>,
) -> Option<String> {
    if let Some(seed) = seed {
        return Some(format!(
            "--seed {seed}: the public evolution service takes no seed; nothing was started\n  \
             run with --backend local or --backend <URL of a gepa-lab serve>, or drop --seed"
        ));
    }
    let planned = plans.into_iter().flat_map(|(file, plan)| {
        plan.executions
            .iter()
            .map(move |execution| (file.display().to_string(), execution))
    });
    let resumed_executions = resumed.into_iter().flat_map(|(dir, manifest)| {
        manifest
            .executions
            .iter()
            .map(move |execution| (dir.display().to_string(), &execution.plan))
    });
    planned
        .chain(resumed_executions)
        .find_map(|(file, execution)| {
            let engine = execution.start.engine.as_ref()?;
            // `[objectives]` travel with the engine's settings but are a table of their own:
            // the refusal names the tables the file sets, so the advice removes the right one.
            let (objectives, keys): (Vec<&str>, Vec<&str>) = engine
                .keys_set()
                .into_iter()
                .partition(|key| *key == "objectives");
            let (set, remove) = match (keys.is_empty(), objectives.is_empty()) {
                (true, false) => ("[objectives] is set".to_owned(), "[objectives]"),
                (_, true) => (format!("[engine] sets {}", keys.join(", ")), "[engine]"),
                (false, false) => (
                    format!("[engine] sets {} and [objectives] is set", keys.join(", ")),
                    "[engine] and [objectives]",
                ),
            };
            Some(format!(
                "{file}: {set} but the public evolution service takes no engine \
                 settings; nothing was started\n  run with --backend local or --backend \
                 <URL of a gepa-lab serve>, or remove {remove}"
            ))
        })
}

/// The columns of `dataset`'s file that its plan names; the file changed since it was planned
/// when its header no longer has them.
pub(crate) fn planned_columns(
    dataset: &gepa_lab_experiment::DatasetPlan,
) -> Result<gepa_lab_dataset::Columns, RunError> {
    gepa_lab_dataset::read_header(&dataset.file)?
        .columns(&dataset.inputs, &dataset.expected)
        .map_err(|missing| {
            let names: Vec<&String> = missing.iter().map(|m| &m.name).collect();
            RunError::DatasetChanged {
                file: dataset.file.display().to_string(),
                expected: dataset.sha256.clone(),
                found: format!("a header without the planned columns {names:?}"),
            }
        })
}

pub fn backend_label(backend: &Backend) -> String {
    match backend {
        Backend::Remote { .. } => "remote".to_owned(),
        Backend::Local => "local".to_owned(),
        Backend::Url { url } => url.clone(),
    }
}

/// The state of one run while it executes.
struct Runner<'a> {
    dir: RunDir,
    manifest: RunManifest,
    backends: &'a Backends,
    observer: &'a dyn Observer,
    /// Per evolutionId, the last iteration `iterations.jsonl` holds.
    iterations_seen: std::collections::HashMap<String, usize>,
    /// How a start was refused for its key (the first, when some was).
    key_refused: Option<String>,
    answer_events: AnswerEvents,
}

impl Runner<'_> {
    fn emit(&self, event: Event) -> Result<(), RunError> {
        self.answering().emit(event)
    }

    fn answering(&self) -> replay::Answering<'_> {
        replay::Answering {
            inference: self.backends.inference.clone(),
            cache: &self.dir,
            events: &self.dir,
            observer: self.observer,
            answer_events: self.answer_events,
        }
    }

    fn save(&mut self) -> Result<(), RunError> {
        self.manifest.updated_at = Utc::now();
        self.dir.write_manifest(&self.manifest)?;
        Ok(())
    }

    fn variant(&self, index: usize) -> String {
        self.manifest.executions[index].variant().to_owned()
    }

    /// Starts every execution that has no evolutionId yet. An execution whose start request was
    /// sent before (a crash between sending and recording the answer) is first looked up by its
    /// customId, so that it is never started twice.
    async fn start_all(&mut self) -> Result<(), RunError> {
        for index in 0..self.manifest.executions.len() {
            match self.manifest.executions[index].state {
                ExecutionState::NotSent => {}
                // A start whose answer was lost may have started it: look it up first.
                ExecutionState::StartSent { sent_at, .. } => {
                    if self.recover_start(index, sent_at).await? {
                        continue;
                    }
                }
                _ => continue,
            }
            self.send_start(index).await?;
        }
        Ok(())
    }

    /// Looks up by its customId an execution whose start went out at `sent_at` without an
    /// answer. Returns whether that settled it: the execution found (and recorded as the start's
    /// answer would have), or the lookup failed (then resending could start it twice, so it is
    /// not sent now). `false`: the service has no such execution, so the start is sent again.
    async fn recover_start(
        &mut self,
        index: usize,
        sent_at: Option<chrono::DateTime<Utc>>,
    ) -> Result<bool, RunError> {
        let custom_id = self.manifest.executions[index].custom_id.clone();
        let variant = self.variant(index);
        match self.look_up(&custom_id, sent_at).await {
            Ok(Some(found)) if found.evolution_id.is_some() => {
                let evolution_id = found.evolution_id.unwrap_or_default();
                let record = &mut self.manifest.executions[index];
                record.state =
                    ExecutionState::reported(evolution_id.clone(), found.status, found.error);
                // What the start's answer would have recorded: the service's creation
                // time (else when the start went out), and for an execution that ended
                // meanwhile, what polling records at its end.
                record.started_at = found
                    .created_at
                    .as_deref()
                    .and_then(|at| chrono::DateTime::parse_from_rfc3339(at).ok())
                    .map(|at| at.with_timezone(&Utc))
                    .or(sent_at)
                    .or_else(|| Some(Utc::now()));
                if let Some(used) = budget_used(found.budget_used) {
                    record.budget_used = Some(used);
                }
                if record.state.is_final() {
                    record.finished_at = Some(Utc::now());
                }
                self.save()?;
                self.emit(Event::StartRecovered {
                    variant,
                    custom_id,
                    evolution_id,
                })?;
                Ok(true)
            }
            Ok(_) => Ok(false),
            Err(err) => {
                // Without the lookup, resending could start the execution twice.
                self.emit(Event::StartFailed {
                    variant,
                    custom_id,
                    error: format!(
                        "cannot check whether the earlier start reached the service: {err}"
                    ),
                })?;
                Ok(true)
            }
        }
    }

    /// Sends the start of execution `index` and records its answer: running, refused for good
    /// (a 4xx), or still `start sent` so that a resume looks it up first.
    async fn send_start(&mut self, index: usize) -> Result<(), RunError> {
        let custom_id = self.manifest.executions[index].custom_id.clone();
        let variant = self.variant(index);
        self.manifest.executions[index].state = ExecutionState::StartSent {
            error: None,
            sent_at: Some(Utc::now()),
        };
        self.save()?;
        self.emit(Event::StartSending {
            variant: variant.clone(),
            custom_id: custom_id.clone(),
        })?;
        let request = &self.manifest.executions[index].plan.start;
        let result = self.backends.evolution.start(request).await;
        let record = &mut self.manifest.executions[index];
        match result {
            Ok(evolution_id) => {
                record.state = ExecutionState::Running {
                    evolution_id: evolution_id.clone(),
                    status: Status::Pending,
                    note: None,
                };
                record.started_at = Some(Utc::now());
                self.save()?;
                self.emit(Event::Started {
                    variant,
                    custom_id,
                    evolution_id,
                })?;
            }
            Err(err) => {
                if let EvolutionError::Api(api) = &err
                    && api.refuses_key()
                    && self.key_refused.is_none()
                {
                    self.key_refused = Some(format!("the start of {custom_id} was answered {api}"));
                }
                // A refusal (4xx) means nothing started; anything else stays `start sent`
                // so that a resume looks the customId up first.
                record.state = if refused(&err) {
                    ExecutionState::Failed {
                        evolution_id: None,
                        reason: err.to_string(),
                    }
                } else {
                    ExecutionState::StartSent {
                        error: Some(err.to_string()),
                        sent_at: Some(Utc::now()),
                    }
                };
                self.save()?;
                self.emit(Event::StartFailed {
                    variant,
                    custom_id,
                    error: err.to_string(),
                })?;
            }
        }
        Ok(())
    }

    /// Looks `custom_id` up. When it is not found and its start request went out less than
    /// [`START_MAY_STILL_ARRIVE`] ago, the service may not have stored it yet (a resume right
    /// after a kill): wait until then and look again before anything is sent a second time.
    async fn look_up(
        &self,
        custom_id: &str,
        sent_at: Option<chrono::DateTime<Utc>>,
    ) -> Result<Option<gepa_lab_evolution::wire::Execution>, EvolutionError> {
        let evolution = self.backends.evolution.as_ref();
        if let Some(found) = find_by_custom_id(evolution, custom_id).await? {
            return Ok(Some(found));
        }
        let since = sent_at.map_or(START_MAY_STILL_ARRIVE, |at| {
            (Utc::now() - at).to_std().unwrap_or_default()
        });
        let wait = START_MAY_STILL_ARRIVE.saturating_sub(since);
        if wait.is_zero() {
            return Ok(None);
        }
        tokio::time::sleep(wait).await;
        find_by_custom_id(evolution, custom_id).await
    }

    /// Polls every started execution until all are final or the timeout passes. An execution
    /// the service does not know is not polled again this run, and keeps its state.
    async fn poll_all(&mut self, options: &RunOptions) -> Result<(), RunError> {
        let deadline = Instant::now() + options.timeout;
        let mut unknown = std::collections::HashSet::new();
        loop {
            let waiting: Vec<usize> = (0..self.manifest.executions.len())
                .filter(|&i| {
                    self.manifest.executions[i].state.is_running() && !unknown.contains(&i)
                })
                .collect();
            if waiting.is_empty() {
                return Ok(());
            }
            for &index in &waiting {
                // A poll that hangs (retries included) must not hold the run past its time-out.
                let left = deadline.saturating_duration_since(Instant::now());
                let polled = tokio::time::timeout(left, self.poll_one(index)).await;
                match polled {
                    Ok(result) => {
                        if result? == Polled::Unknown {
                            unknown.insert(index);
                        }
                    }
                    Err(_) => {
                        let evolution_id = self.manifest.executions[index]
                            .state
                            .evolution_id()
                            .unwrap_or_default()
                            .to_owned();
                        self.emit(Event::PollFailed {
                            variant: self.variant(index),
                            evolution_id,
                            error: "no answer before the time-out".into(),
                        })?;
                        break;
                    }
                }
            }
            if Instant::now() >= deadline {
                for index in waiting {
                    let variant = self.variant(index);
                    let ExecutionState::Running {
                        evolution_id, note, ..
                    } = &mut self.manifest.executions[index].state
                    else {
                        continue;
                    };
                    *note = Some(format!(
                        "still running after the {:?} time-out",
                        options.timeout
                    ));
                    let evolution_id = evolution_id.clone();
                    self.emit(Event::TimedOut {
                        variant,
                        evolution_id,
                    })?;
                }
                self.save()?;
                return Ok(());
            }
            let jitter = options.poll_jitter.mul_f64(rand::rng().random::<f64>());
            tokio::time::sleep(options.poll_interval + jitter).await;
        }
    }

    async fn poll_one(&mut self, index: usize) -> Result<Polled, RunError> {
        let variant = self.variant(index);
        let Some(evolution_id) = self.manifest.executions[index]
            .state
            .evolution_id()
            .map(str::to_owned)
        else {
            return Ok(Polled::Answered);
        };
        match self.backends.evolution.get(&evolution_id).await {
            Ok(execution) => self.record_poll(index, &evolution_id, &execution).await?,
            // Not a failure of the execution: a service that does not know it (another service,
            // or one that lost its records) cannot say how it went. Its state is kept, so a
            // resume on the service that started it still finds it.
            Err(EvolutionError::NotFound(_)) => {
                let note = format!(
                    "the service polled does not know evolutionId {evolution_id}; its state is \
                     kept as it was: resume on the service that started it"
                );
                if let ExecutionState::Running { note: kept, .. } =
                    &mut self.manifest.executions[index].state
                {
                    *kept = Some(note.clone());
                }
                self.save()?;
                self.emit(Event::Unknown {
                    variant,
                    evolution_id,
                    note,
                })?;
                return Ok(Polled::Unknown);
            }
            // Asking again with the same key gets the same answer, for as long as the run's
            // time-out allows: end now, with the reason.
            Err(EvolutionError::Api(source)) if source.refuses_key() => {
                self.save()?;
                return Err(RunError::KeyRefused {
                    evolution_id,
                    error: source,
                });
            }
            // The HTTP layer already retried; the next round tries again until the time-out.
            Err(err) => self.emit(Event::PollFailed {
                variant,
                evolution_id,
                error: err.to_string(),
            })?,
        }
        Ok(Polled::Answered)
    }

    /// Records what a poll of execution `index` answered: the poll event, its state and spent
    /// budget (saved when they changed), and its end when it ended.
    async fn record_poll(
        &mut self,
        index: usize,
        evolution_id: &str,
        execution: &gepa_lab_evolution::wire::Execution,
    ) -> Result<(), RunError> {
        let variant = self.variant(index);
        // Read before the poll is reported, so that every iteration is shown before
        // the execution's end.
        self.fetch_iterations(index, evolution_id).await?;
        let prompt = execution.prompt.as_ref();
        self.emit(Event::Poll {
            variant: variant.clone(),
            evolution_id: evolution_id.to_owned(),
            status: execution.status.to_string(),
            generation: prompt.and_then(|p| p.current_generation),
            score: prompt.and_then(|p| p.current_prompt_score),
            budget: execution.budget,
        })?;
        let record = &mut self.manifest.executions[index];
        let budget_used = budget_used(execution.budget_used);
        let state = ExecutionState::reported(
            evolution_id.to_owned(),
            execution.status.clone(),
            execution.error.clone(),
        );
        let changed =
            record.state != state || (state.is_final() && record.budget_used != budget_used);
        let finished = state.is_final();
        record.state = state;
        if budget_used.is_some() {
            record.budget_used = budget_used;
        }
        if finished {
            record.finished_at = Some(Utc::now());
            let error = record.state.problem().map(str::to_owned);
            self.emit(Event::Finished {
                variant,
                evolution_id: evolution_id.to_owned(),
                status: execution.status.to_string(),
                error,
            })?;
        }
        if changed {
            self.save()?;
        }
        Ok(())
    }

    /// Every page of every started execution's history, written to `history.csv`.
    /// Every page of every execution's history, merged into what `history.csv` already holds:
    /// a generation fetched now replaces the stored one, and a stored generation the service
    /// did not return (it is down, or answered a shorter list) is kept. What a run directory
    /// holds never shrinks because a service failed; the failures are counted in the outcome.
    async fn fetch_histories(&mut self) -> Result<(Vec<HistoryRow>, usize), RunError> {
        let stored: Vec<HistoryRow> = self.dir.read_csv(HISTORY_FILE)?;
        let mut rows = Vec::new();
        let mut failures = 0;
        for index in 0..self.manifest.executions.len() {
            let Some(evolution_id) = self.manifest.executions[index]
                .state
                .evolution_id()
                .map(str::to_owned)
            else {
                continue;
            };
            // A run stopped between an execution's last poll and here has not read them all.
            self.fetch_iterations(index, &evolution_id).await?;
            let variant = self.variant(index);
            let mut fetched: Vec<HistoryRow> = Vec::new();
            // Every generation costs at least one call, so an execution has at most its budget
            // plus the seed's generation. A service may number them otherwise, so ten times that
            // (at least 1,000) is read: enough for anything plausible, and a runaway service
            // (500,000 generations were seen) cannot fill the disk.
            let budget = self.manifest.executions[index].plan.start.budget;
            let most = usize::try_from(budget)
                .unwrap_or(usize::MAX)
                .saturating_add(1)
                .saturating_mul(10)
                .clamp(1_000, gepa_lab_evolution::MAX_GENERATIONS);
            let evolution = self.backends.evolution.as_ref();
            match fetch_history(evolution, &evolution_id, PAGE_LIMIT, most).await {
                Ok(history) => {
                    self.emit(Event::History {
                        variant: variant.clone(),
                        evolution_id: evolution_id.clone(),
                        generations: history.records.len(),
                        pages: history.pages,
                        repeated_page: history.repeated_page,
                        duplicates: history.duplicates,
                        truncated: history.truncated,
                    })?;
                    fetched.extend(history.records.into_iter().map(|record| HistoryRow {
                        variant: variant.clone(),
                        evolution_id: evolution_id.clone(),
                        generation: record.generation.max(0.0).round() as u32,
                        score: record.score,
                        prompt: record.prompt,
                        // The evolution API does not say what each generation cost.
                        budget_used: None,
                        costs: record.costs,
                        pareto_scores: record.pareto_scores,
                    }));
                }
                Err(err) => {
                    failures += 1;
                    self.emit(Event::HistoryFailed {
                        variant: variant.clone(),
                        evolution_id: evolution_id.clone(),
                        error: err.to_string(),
                    })?;
                }
            }
            let mut merged: Vec<HistoryRow> = stored
                .iter()
                .filter(|old| {
                    old.variant == variant
                        && old.evolution_id == evolution_id
                        && !fetched.iter().any(|new| new.generation == old.generation)
                })
                .cloned()
                .collect();
            merged.extend(fetched);
            merged.sort_by_key(|row| row.generation);
            rows.extend(merged);
        }
        self.dir.write_csv(HISTORY_FILE, &rows)?;
        Ok((rows, failures))
    }

    /// Appends the iteration records the backend has beyond those `iterations.jsonl` holds, and
    /// reports each. A backend that does not offer them (the public service) is asked once;
    /// a failure to read them is reported and changes nothing else.
    async fn fetch_iterations(&mut self, index: usize, evolution_id: &str) -> Result<(), RunError> {
        let variant = self.variant(index);
        loop {
            let after = self.iterations_seen.get(evolution_id).copied().unwrap_or(0);
            let page = match self
                .backends
                .evolution
                .iterations(evolution_id, after)
                .await
            {
                Ok(Some(page)) => page,
                Ok(None) => return Ok(()),
                Err(err) => {
                    return self.emit(Event::PollFailed {
                        variant,
                        evolution_id: evolution_id.to_owned(),
                        error: format!("reading the iteration records: {err}"),
                    });
                }
            };
            let full = page.len() >= gepa_lab_evolution::ITERATIONS_LIMIT;
            let mut last = after;
            for record in page {
                // A service that answers out of order or repeats itself adds nothing twice.
                if record.iteration() <= last {
                    continue;
                }
                last = record.iteration();
                self.iterations_seen.insert(evolution_id.to_owned(), last);
                let best = record.best();
                self.emit(Event::Iteration {
                    variant: variant.clone(),
                    evolution_id: evolution_id.to_owned(),
                    iteration: record.iteration(),
                    kind: record.kind(),
                    parents: record.parents(),
                    outcome: record.outcome().label().to_owned(),
                    explanation: record.explain(),
                    calls: record.cost().total(),
                    best_generation: best.generation,
                    best_score: best.score,
                })?;
                self.dir.append_iteration(&IterationRow {
                    variant: variant.clone(),
                    evolution_id: evolution_id.to_owned(),
                    record,
                })?;
            }
            if !full || last == after {
                return Ok(());
            }
        }
    }
}

/// What one poll learnt of an execution.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Polled {
    /// The service answered, or failed in a way worth trying again.
    Answered,
    /// The service does not know the execution (404).
    Unknown,
}

/// The service said no to the request itself: nothing was started.
fn refused(err: &EvolutionError) -> bool {
    match err {
        EvolutionError::Invalid(_) => true,
        // 429 (rate limited) and 408 (request time-out) started nothing either, but say "again
        // later", not "never": the start stays to be sent on resume.
        EvolutionError::Api(api) => api.status().is_some_and(|status| {
            status.is_client_error()
                && status != reqwest::StatusCode::TOO_MANY_REQUESTS
                && status != reqwest::StatusCode::REQUEST_TIMEOUT
        }),
        EvolutionError::NotFound(_) | EvolutionError::Store(_) => false,
    }
}

#[cfg(test)]
mod tests;
