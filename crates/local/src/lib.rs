//! `LocalEvolution`: the built-in GEPA engine behind the `Evolution` trait.
//!
//! `start` checks the request with the contract's rules (the same function `serve` uses), records
//! the execution as `pending` and returns its id; a background tokio task then waits for a
//! running slot, records `in_progress` (before any model call), runs the engine over an
//! [`InferenceTask`], and ends `completed`, or `failed` with the engine's error as the reason.
//! While it runs, each accepted candidate (the seed prompt first, as generation 0) becomes a
//! history record and the execution's `prompt` shows that latest generation; once it is over,
//! `prompt` shows the run's best generation (`engine::Run::best`: the highest mean Pareto score
//! among the seed and the generations whose rows show a gain over it, the earlier on a tie).
//!
//! Executions live in memory. An [`ExecutionStore`] hook, when given, is told of every change
//! so that a caller can make them durable: the state, each history record, each iteration's
//! record, and the result of every paid call, the checkpoint ([`journal`]).
//! [`LocalEvolution::restore`] loads them back after a restart: `pending` ones (nothing spent
//! yet) are run, and `in_progress` ones continue from their checkpoint: the engine runs again
//! with every recorded call answered from the journal, so it makes the same choices, pays only
//! for calls the journal does not hold (those in flight at the interruption), and ends with the
//! history an uninterrupted run would have.
//!
//! The engine's seed is `gepaLabEngine.seed` when the request gives one (a gepa-lab run always
//! does: it derives one per variant from the run's seed), else a hash of the request (customId
//! included): the same request makes the same random choices. The models' sampling seeds are
//! derived from it and each call's text, so that with the same seed a run repeats.
//!
//! Strategy `RPM` runs reflective mutation only; `SAM` adds the engine's merge of two lineages
//! (our reading of "system-aware merge", which the service does not define).
mod adapter;
mod call;
mod file_store;
mod journal;
mod store;

pub use adapter::{InferenceTask, ModelSettings, evaluator_metric, scorer_for_metric};
pub use call::{CallRecord, CallResult};
pub use file_store::FileExecutions;
pub use gepa_lab_evolution::StoreError;
pub use journal::{JournaledTask, Replay, Sink};
pub use store::{ExecutionState, ExecutionStore, StoredExecution};

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use chrono::{SecondsFormat, Utc};
use tokio::sync::{Semaphore, watch};

use gepa_lab_engine::{
    self as engine, CandidateRecord, DEFAULT_REFLECTION_MINIBATCH, EngineConfig, EngineEvent,
    IterationRecord, MergeConfig, OnTaskError, Proposer, ReflectionTemplate,
};
use gepa_lab_evolution::PAGE_LIMIT;
use gepa_lab_evolution::rules::validate_start;
use gepa_lab_evolution::wire::{
    BatchJobs, EngineSettings, Execution, HistoryRecord, MAX_ENGINE_SEED, OnError, PromptState,
    StartExecution, Status, Strategy,
};
use gepa_lab_evolution::{Evolution, EvolutionError, ITERATIONS_LIMIT, ServiceProfile};
use gepa_lab_inference::{Inference, is_local_model};
use gepa_lab_score::ScorerSpec;

/// How a `LocalEvolution` runs its executions.
#[derive(Debug, Clone, PartialEq)]
pub struct LocalSettings {
    pub models: ModelSettings,
    /// Which evolution model ids a request may name.
    pub profile: ServiceProfile,
    /// Executions running at once; later ones wait as `pending`, as the service queues jobs.
    pub max_running: usize,
    /// Task calls in flight within one execution.
    pub parallel_calls: usize,
    /// How the reflection model proposes children.
    pub proposer: Proposer,
    /// Feedback examples per reflection minibatch.
    pub reflection_minibatch: usize,
    /// Scores the engine's answers with this instead of the scorer the evaluator's metric maps
    /// to ([`scorer_for_metric`]): a local run sets its replay scorer, so that the prompt is
    /// evolved on what it is then measured by.
    pub scorer: Option<ScorerSpec>,
}

impl LocalSettings {
    /// With an embedded reflection model, the rules proposer on a larger minibatch: a small
    /// model writes usable rules where its rewrites are mostly unusable, and a larger minibatch
    /// shows it more failures per (slow) reflection and judges the child on more examples.
    /// Otherwise the reference implementation's rewrite on 3 examples.
    pub fn new(models: ModelSettings) -> Self {
        let proposer = default_proposer(&models.reflection_model);
        Self::with_proposer(models, proposer)
    }

    /// The settings of `proposer`: the rules proposer's larger minibatch and short answers
    /// (see [`LocalSettings::new`]), or the rewrite's.
    pub fn with_proposer(mut models: ModelSettings, proposer: Proposer) -> Self {
        let rules = proposer == Proposer::Rules;
        if rules && models.reflection_max_tokens.is_none() {
            // A rules answer is a few short lines; a CPU model that rambles past them costs
            // seconds per token.
            models.reflection_max_tokens = Some(EMBEDDED_REFLECTION_MAX_TOKENS);
        }
        Self {
            models,
            profile: ServiceProfile::default(),
            max_running: 2,
            parallel_calls: gepa_lab_engine::DEFAULT_PARALLEL_CALLS,
            proposer,
            reflection_minibatch: if rules {
                EMBEDDED_REFLECTION_MINIBATCH
            } else {
                DEFAULT_REFLECTION_MINIBATCH
            },
            scorer: None,
        }
    }
}

/// The proposer a reflection model gets unless `[engine] proposer` says otherwise: rules for an
/// embedded model, the rewrite for any other.
fn default_proposer(reflection_model: &str) -> Proposer {
    if is_local_model(reflection_model) {
        Proposer::Rules
    } else {
        Proposer::Rewrite
    }
}

/// `max_tokens` of a rules answer unless set otherwise.
pub const EMBEDDED_REFLECTION_MAX_TOKENS: u32 = 400;

/// The reflection minibatch with an embedded reflection model (see [`LocalSettings::new`]).
pub const EMBEDDED_REFLECTION_MINIBATCH: usize = 6;

/// Pareto rows that screen a minibatch winner before it pays for the rest (see
/// `EngineConfig::pareto_screen`). In the benchmark's round 12, 16 of 22 minibatch winners then
/// scored below their parent on the 40 Pareto rows (the worst 0.23 against 0.85): the parent's
/// known failures make half of each minibatch, so a rule that moves the task model towards one
/// label wins there; 10 rows drawn without regard to failures cost a quarter of the pass.
pub const PARETO_SCREEN_ROWS: usize = 10;

/// Demonstrations a classification's prompt may show unless `[engine] demonstrations` says
/// otherwise: one of each label (every second new set, two of each of two or three labels), the
/// commonest labels first, so at most this many labels are shown.
/// More lengthen every prompt of the run (a 10-label set of short inputs adds about 200 tokens).
pub const DEFAULT_DEMONSTRATIONS: usize = 8;

/// What the engine's observer passes to the task that records an execution.
enum Recorded {
    Candidate(CandidateRecord),
    Iteration(IterationRecord),
    /// Calls spent so far.
    Spent(u64),
}

/// A page of a list, numbered from 1 (the convention `fetch_history` documents).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Paging {
    pub page: u32,
    pub limit: u32,
}

impl Paging {
    /// Page 1 and [`PAGE_LIMIT`] when not given; 0 for either is refused, with the reason.
    pub fn new(page: Option<u32>, limit: Option<u32>) -> Result<Self, String> {
        let page = page.unwrap_or(1);
        let limit = limit.unwrap_or(PAGE_LIMIT);
        if page == 0 {
            return Err("page: pages are numbered from 1; seen: 0".into());
        }
        if limit == 0 {
            return Err("limit: must be at least 1; seen: 0".into());
        }
        Ok(Self { page, limit })
    }

    /// The slice of `items` on this page; empty past the end.
    pub fn slice<'a, T>(&self, items: &'a [T]) -> &'a [T] {
        let start = u64::from(self.page - 1) * u64::from(self.limit);
        let start = usize::try_from(start)
            .unwrap_or(usize::MAX)
            .min(items.len());
        let end = start.saturating_add(self.limit as usize).min(items.len());
        &items[start..end]
    }
}

/// What [`LocalEvolution::restore`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Restored {
    /// Executions loaded, whatever their status.
    pub loaded: usize,
    /// `pending` executions started again from their request and seed.
    pub resumed: Vec<String>,
    /// `in_progress` executions continued from their checkpoint.
    pub continued: Vec<String>,
    /// Ids already known, left as they were.
    pub skipped: Vec<String>,
}

/// The built-in engine as an evolution backend. Cheap to clone; clones share executions.
#[derive(Clone)]
pub struct LocalEvolution {
    inner: Arc<Inner>,
}

struct Inner {
    task_model: Arc<dyn Inference>,
    reflection_model: Arc<dyn Inference>,
    settings: LocalSettings,
    store: Option<Arc<dyn ExecutionStore>>,
    slots: Arc<Semaphore>,
    registry: Mutex<Registry>,
}

/// Executions in creation order, so pages stay stable as new executions are added at the end.
#[derive(Default)]
struct Registry {
    executions: Vec<StoredExecution>,
    by_id: HashMap<String, usize>,
    /// The engine task of each execution that is waiting for a slot or running.
    running: HashMap<String, Running>,
    /// Executions cancelled by their owner: the engine's own last words are ignored.
    cancelled: std::collections::HashSet<String>,
}

/// An execution's engine task, waiting for a slot or running.
struct Running {
    /// Stops the task where it is, a write in flight included: what a kill does.
    #[cfg_attr(not(test), allow(dead_code))]
    abort: tokio::task::AbortHandle,
    /// Asks the task to stop at its next step, once the write it has begun is done. The task
    /// holds the only receiver, so the sender is closed once the task has ended.
    stop: Arc<watch::Sender<bool>>,
}

/// What [`LocalEvolution::cancel_as`] found.
#[derive(Debug, Clone, PartialEq)]
pub enum Cancel {
    /// It was pending or running; now it is `failed`, with the cancel as its error.
    Cancelled(Execution),
    /// It had already ended (`completed` or `failed`); nothing changed.
    AlreadyEnded(Execution),
}

impl Registry {
    fn get(&self, id: &str) -> Option<&StoredExecution> {
        self.by_id.get(id).map(|&i| &self.executions[i])
    }

    fn get_mut(&mut self, id: &str) -> Option<&mut StoredExecution> {
        self.by_id.get(id).map(|&i| &mut self.executions[i])
    }

    fn insert(&mut self, execution: StoredExecution) {
        self.by_id
            .insert(execution.evolution_id.clone(), self.executions.len());
        self.executions.push(execution);
    }

    fn visible<'a>(
        &'a self,
        owner: Option<&'a str>,
    ) -> impl Iterator<Item = &'a StoredExecution> + 'a {
        self.executions
            .iter()
            .filter(move |e| e.owner.as_deref() == owner)
    }
}

impl LocalEvolution {
    /// `store`, when given, is told of every change (see [`ExecutionStore`]).
    pub fn new(
        task_model: Arc<dyn Inference>,
        reflection_model: Arc<dyn Inference>,
        settings: LocalSettings,
        store: Option<Arc<dyn ExecutionStore>>,
    ) -> Self {
        let slots = Arc::new(Semaphore::new(settings.max_running.max(1)));
        Self {
            inner: Arc::new(Inner {
                task_model,
                reflection_model,
                settings,
                store,
                slots,
                registry: Mutex::new(Registry::default()),
            }),
        }
    }

    pub fn settings(&self) -> &LocalSettings {
        &self.inner.settings
    }

    /// Starts an execution on behalf of `owner`; only the same owner sees it afterwards.
    pub async fn start_as(
        &self,
        owner: Option<&str>,
        request: &StartExecution,
    ) -> Result<String, EvolutionError> {
        validate_start(request, &self.inner.settings.profile)
            .map_err(|violations| EvolutionError::Invalid(violations.to_string()))?;
        if let Some(engine) = &request.engine {
            reflection_template(engine).map_err(EvolutionError::Invalid)?;
            if let Some(seed) = engine.seed
                && seed > MAX_ENGINE_SEED
            {
                return Err(EvolutionError::Invalid(format!(
                    "invalid parameter gepaLabEngine.seed: must be from 0 to {MAX_ENGINE_SEED}; got {seed}"
                )));
            }
        }
        if let Some(model) = request
            .engine
            .as_ref()
            .and_then(|engine| engine.reflection_model.as_deref())
        {
            let served = self.inner.reflection_model.models().await.map_err(|err| {
                EvolutionError::Invalid(format!(
                    "gepaLabEngine.reflectionModel: the models could not be listed: {err}"
                ))
            })?;
            if !served.iter().any(|m| m.id == model) {
                let names: Vec<&str> = served.iter().map(|m| m.id.as_str()).collect();
                return Err(EvolutionError::Invalid(format!(
                    "invalid parameter gepaLabEngine.reflectionModel: no model {model:?} here; served: {}",
                    names.join(", ")
                )));
            }
        }
        let evolution_id = uuid::Uuid::new_v4().to_string();
        let seed = request
            .engine
            .as_ref()
            .and_then(|engine| engine.seed)
            .unwrap_or_else(|| seed_of(request));
        let mut request = request.clone();
        if request.custom_id.is_none() {
            request.custom_id = Some(format!("local-{}", &evolution_id[..8]));
        }
        let execution = StoredExecution {
            evolution_id: evolution_id.clone(),
            owner: owner.map(str::to_owned),
            request,
            seed,
            state: ExecutionState {
                status: Status::Pending,
                prompt: None,
                error: None,
                budget_used: None,
            },
            created_at: now(),
            history: Vec::new(),
            iterations: Vec::new(),
            calls: Vec::new(),
        };
        if let Some(store) = &self.inner.store {
            store.insert(&execution).await?;
        }
        self.inner.registry().insert(execution);
        Inner::spawn(Arc::clone(&self.inner), evolution_id.clone());
        Ok(evolution_id)
    }

    pub fn get_as(
        &self,
        owner: Option<&str>,
        evolution_id: &str,
    ) -> Result<Execution, EvolutionError> {
        self.inner
            .registry()
            .get(evolution_id)
            .filter(|e| e.owner.as_deref() == owner)
            .map(StoredExecution::to_wire)
            .ok_or_else(|| EvolutionError::NotFound(evolution_id.to_owned()))
    }

    /// Cancels `owner`'s execution (an extension beyond the contract): its engine stops at its
    /// next step, and it ends `failed` with "cancelled by its owner at <time>", keeping the
    /// history and budget spent so far. It returns once the engine has stopped: the calls that
    /// returned until then are in the budget it reports, those still in flight are dropped, and
    /// nothing is recorded after it, so the spend it reports is the spend that stays.
    pub async fn cancel_as(
        &self,
        owner: Option<&str>,
        evolution_id: &str,
    ) -> Result<Cancel, EvolutionError> {
        let (cancelled, stop) = {
            let mut registry = self.inner.registry();
            let execution = registry
                .get(evolution_id)
                .filter(|e| e.owner.as_deref() == owner)
                .ok_or_else(|| EvolutionError::NotFound(evolution_id.to_owned()))?;
            let cancelled = !execution.state.status.is_final();
            if cancelled {
                // Decided under the lock: from here on the engine's own end is ignored, so an
                // engine that ends at this very moment cannot overwrite the cancel.
                let state = ExecutionState {
                    status: Status::Failed,
                    error: Some(format!("cancelled by its owner at {}", now())),
                    ..execution.state.clone()
                };
                registry.cancelled.insert(evolution_id.to_owned());
                if let Some(execution) = registry.get_mut(evolution_id) {
                    execution.state = state;
                }
            }
            // Also for a cancel that an earlier one decided and whose engine is still stopping.
            let stop = registry
                .cancelled
                .contains(evolution_id)
                .then(|| registry.running.get(evolution_id))
                .flatten()
                .map(|running| Arc::clone(&running.stop));
            (cancelled, stop)
        };
        if let Some(stop) = stop {
            stop.send_replace(true);
            stop.closed().await;
        }
        let execution = self.get_as(owner, evolution_id)?;
        if !cancelled {
            return Ok(Cancel::AlreadyEnded(execution));
        }
        // Stored once the engine has stopped, after every write it made: the last word.
        let state = self
            .inner
            .registry()
            .get(evolution_id)
            .map(|execution| execution.state.clone());
        if let (Some(store), Some(state)) = (&self.inner.store, state)
            && let Err(err) = store.save_state(evolution_id, &state).await
        {
            tracing::error!(%evolution_id, %err, "the cancel was not stored");
        }
        tracing::info!(%evolution_id, "execution cancelled by its owner");
        Ok(Cancel::Cancelled(execution))
    }

    /// One page of `owner`'s executions, oldest first, and how many there are in all.
    pub fn list_as(&self, owner: Option<&str>, paging: Paging) -> (Vec<Execution>, usize) {
        let registry = self.inner.registry();
        let visible: Vec<&StoredExecution> = registry.visible(owner).collect();
        let page = paging.slice(&visible).iter().map(|e| e.to_wire()).collect();
        (page, visible.len())
    }

    /// One page of an execution's history, in generation order.
    pub fn prompts_as(
        &self,
        owner: Option<&str>,
        evolution_id: &str,
        paging: Paging,
    ) -> Result<Vec<HistoryRecord>, EvolutionError> {
        let registry = self.inner.registry();
        let execution = registry
            .get(evolution_id)
            .filter(|e| e.owner.as_deref() == owner)
            .ok_or_else(|| EvolutionError::NotFound(evolution_id.to_owned()))?;
        Ok(paging.slice(&execution.history).to_vec())
    }

    /// Loads executions kept by a store before a restart, in creation order. `pending` ones are
    /// started (they had spent nothing); `in_progress` ones continue from their checkpoint, the
    /// calls recorded with them. Ids already known are skipped, so restoring twice never runs an
    /// execution twice.
    pub fn restore(&self, executions: Vec<StoredExecution>) -> Restored {
        let mut restored = Restored::default();
        for execution in executions {
            let id = execution.evolution_id.clone();
            if self.inner.registry().get(&id).is_some() {
                restored.skipped.push(id);
                continue;
            }
            match execution.state.status {
                Status::InProgress => restored.continued.push(id),
                Status::Pending => restored.resumed.push(id),
                _ => {}
            }
            restored.loaded += 1;
            self.inner.registry().insert(execution);
        }
        for id in restored.continued.iter().chain(&restored.resumed) {
            Inner::spawn(Arc::clone(&self.inner), id.clone());
        }
        restored
    }

    /// Stops every engine where it is, recording nothing more: what a kill does to a process.
    #[cfg(test)]
    fn halt(&self) {
        for task in self.inner.registry().running.values() {
            task.abort.abort();
        }
    }

    /// Up to `limit` of the records of an execution's iterations that came after iteration
    /// `after` (0 for the first), in order: what the engine tried and why it kept or dropped
    /// each proposal (an extension beyond the contract).
    pub fn iterations_as(
        &self,
        owner: Option<&str>,
        evolution_id: &str,
        after: usize,
        limit: usize,
    ) -> Result<Vec<IterationRecord>, EvolutionError> {
        let registry = self.inner.registry();
        let execution = registry
            .get(evolution_id)
            .filter(|e| e.owner.as_deref() == owner)
            .ok_or_else(|| EvolutionError::NotFound(evolution_id.to_owned()))?;
        Ok(execution
            .iterations
            .iter()
            .filter(|record| record.iteration() > after)
            .take(limit)
            .cloned()
            .collect())
    }
}

#[async_trait]
impl Evolution for LocalEvolution {
    async fn start(&self, request: &StartExecution) -> Result<String, EvolutionError> {
        self.start_as(None, request).await
    }

    async fn get(&self, evolution_id: &str) -> Result<Execution, EvolutionError> {
        self.get_as(None, evolution_id)
    }

    async fn list(
        &self,
        page: Option<u32>,
        limit: Option<u32>,
    ) -> Result<Vec<Execution>, EvolutionError> {
        let paging = Paging::new(page, limit).map_err(EvolutionError::Invalid)?;
        Ok(self.list_as(None, paging).0)
    }

    async fn prompts(
        &self,
        evolution_id: &str,
        page: Option<u32>,
        limit: Option<u32>,
    ) -> Result<Vec<HistoryRecord>, EvolutionError> {
        let paging = Paging::new(page, limit).map_err(EvolutionError::Invalid)?;
        self.prompts_as(None, evolution_id, paging)
    }

    /// The engine runs no batch jobs.
    async fn batch_jobs(&self) -> Result<BatchJobs, EvolutionError> {
        Ok(BatchJobs {
            success: true,
            jobs: Vec::new(),
        })
    }

    async fn iterations(
        &self,
        evolution_id: &str,
        after: usize,
    ) -> Result<Option<Vec<IterationRecord>>, EvolutionError> {
        self.iterations_as(None, evolution_id, after, ITERATIONS_LIMIT)
            .map(Some)
    }
}

/// A reflection template of the request's `gepaLabEngine`, parsed; the error names the field
/// and the placeholders it lacks.
fn reflection_template(settings: &EngineSettings) -> Result<Option<ReflectionTemplate>, String> {
    let Some(text) = &settings.reflection_template else {
        return Ok(None);
    };
    ReflectionTemplate::parse(text)
        .map(Some)
        .map_err(|missing| {
            format!("invalid parameter gepaLabEngine.reflectionTemplate: it {missing}")
        })
}

/// The experiment's `[engine]` settings over the backend's: each one set replaces the default.
/// A reflection template of the user's own makes the engine propose whole prompts with it.
fn apply_engine_settings(
    config: &mut EngineConfig,
    settings: &EngineSettings,
) -> Result<(), String> {
    if let Some(template) = reflection_template(settings)? {
        config.reflection_template = Some(template);
        config.proposer = Proposer::Rewrite;
    }
    if let Some(size) = settings.reflection_minibatch {
        config.reflection_minibatch = size;
    }
    if let Some(seconds) = settings.max_seconds {
        config.time_limit = Some(std::time::Duration::from_secs(seconds));
    }
    if let Some(iterations) = settings.stall_iterations {
        config.stall_iterations = Some(iterations);
    }
    if let Some(threshold) = settings.score_threshold {
        config.score_threshold = Some(threshold);
    }
    if let Some(on_error) = settings.on_error {
        config.on_task_error = match on_error {
            OnError::Fail => OnTaskError::Fail,
            OnError::ScoreZero => OnTaskError::ScoreZero,
        };
    }
    if let Some(merge) = settings.merge {
        config.merge = merge.then(MergeConfig::default);
    }
    if let Some(parallel) = settings.parallel_calls {
        config.parallel_calls = parallel;
    }
    if let Some(demonstrations) = settings.demonstrations {
        // Asked for by name: for any task, as many as asked (0: none).
        config.demonstrations = demonstrations;
        config.unlabelled_demonstrations = true;
    }
    if let Some(objectives) = &settings.objectives {
        config.objectives = objectives.clone();
    }
    Ok(())
}

/// The engine's seed for a request: a hash of the request as sent, customId included, so the
/// same request makes the same random choices (a run can be reproduced, and tests are exact),
/// while variants and replicates with their own customIds differ. 63 bits, so that stores with
/// signed 64-bit integers (SQLite) keep it exactly.
fn seed_of(request: &StartExecution) -> u64 {
    // A request always serialises; an empty text would only make the seed a constant.
    let text = serde_json::to_vec(request).unwrap_or_default();
    gepa_lab_inference::sampling_seed(&[&text]) & MAX_ENGINE_SEED
}

fn now() -> String {
    Utc::now().to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// Hands the memory an ended engine freed back to the system. glibc keeps freed memory in its
/// per-thread arenas, and the engines' evaluation caches and candidate pools are allocated on
/// whatever runtime thread ran them. Measured with `benches/serve-memory.py` (six executions of
/// budget 100,000): 162 MiB resident afterwards without this, 79 MiB with it (46 to 48 at
/// start).
fn release_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only returns free pages of glibc's heaps to the kernel; it touches no
    // memory in use and is safe to call from any thread at any time.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Completes once `cancel_as` asks the engine to stop; never, if it cannot ask any more.
async fn stop_asked(stopped: &mut watch::Receiver<bool>) {
    if stopped.wait_for(|stop| *stop).await.is_err() {
        std::future::pending::<()>().await;
    }
}

impl Inner {
    fn registry(&self) -> MutexGuard<'_, Registry> {
        // Every change under this lock is a plain field update that cannot be left half-done.
        self.registry
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Runs the execution in the background. A panic in the engine still ends it as `failed`,
    /// never leaves it `in_progress` for good.
    fn spawn(inner: Arc<Self>, evolution_id: String) {
        let runner = Arc::clone(&inner);
        let id = evolution_id.clone();
        let (stop, stopped) = watch::channel(false);
        let task = tokio::spawn(async move { runner.run(&id, stopped).await });
        // Registered before the watcher below can remove it.
        let running = Running {
            abort: task.abort_handle(),
            stop: Arc::new(stop),
        };
        inner
            .registry()
            .running
            .insert(evolution_id.clone(), running);
        tokio::spawn(async move {
            let ended = task.await;
            inner.registry().running.remove(&evolution_id);
            release_freed_memory();
            let stopped = match ended {
                Ok(()) => return,
                // Stopped by `cancel_as`, which set its state.
                Err(stopped) if stopped.is_cancelled() => return,
                Err(stopped) => stopped,
            };
            tracing::error!(%evolution_id, %stopped, "the engine task stopped");
            let current = inner.registry().get(&evolution_id).map(|e| e.state.clone());
            if let Some(state) = current {
                let failed = ExecutionState {
                    status: Status::Failed,
                    error: Some(format!("the engine stopped unexpectedly: {stopped}")),
                    ..state
                };
                inner.set_state(&evolution_id, failed).await;
            }
        });
    }

    async fn run(&self, evolution_id: &str, mut stopped: watch::Receiver<bool>) {
        // The semaphore is never closed, so this only waits, unless the execution is cancelled.
        let slot = tokio::select! {
            biased;
            () = stop_asked(&mut stopped) => return,
            slot = Arc::clone(&self.slots).acquire_owned() => slot,
        };
        let Ok(_slot) = slot else {
            return;
        };
        // The checkpoint moves to the engine; the registry keeps no second copy of it.
        let Some(execution) = self.registry().get_mut(evolution_id).map(|execution| {
            let calls = std::mem::take(&mut execution.calls);
            StoredExecution {
                calls,
                ..execution.clone()
            }
        }) else {
            return;
        };
        // A continued execution keeps what it showed (its prompt, budget used) until the
        // replay of its checkpoint brings it up to date.
        let started = ExecutionState {
            status: Status::InProgress,
            error: None,
            budget_used: execution.state.budget_used.or(Some(0)),
            ..execution.state.clone()
        };
        // A store that cannot say "in progress" could not tell a restart that calls were made.
        if !self.set_state(evolution_id, started).await {
            self.set_state(
                evolution_id,
                ExecutionState {
                    status: Status::Failed,
                    prompt: None,
                    error: Some("the start of the run could not be recorded".into()),
                    budget_used: Some(0),
                },
            )
            .await;
            return;
        }
        let Some(end) = self.run_engine(evolution_id, &execution, stopped).await else {
            // Cancelled: `cancel_as` records the end.
            return;
        };
        tracing::info!(%evolution_id, status = %end.status, error = ?end.error, "execution ended");
        self.set_state(evolution_id, end).await;
    }

    /// Runs the engine to its end and returns the final state; `None` when it was asked to stop
    /// (by `cancel_as`), which it does at its next step, after the write in flight.
    async fn run_engine(
        &self,
        evolution_id: &str,
        execution: &StoredExecution,
        mut stopped: watch::Receiver<bool>,
    ) -> Option<ExecutionState> {
        let request = &execution.request;
        // What was spent when the run failed early: the last progress the engine reported.
        let failed = |error: String| {
            Some(ExecutionState {
                status: Status::Failed,
                prompt: None,
                error: Some(error),
                budget_used: self
                    .registry()
                    .get(evolution_id)
                    .and_then(|execution| execution.state.budget_used),
            })
        };
        let (task, config) = match self.prepare(evolution_id, execution) {
            Ok(prepared) => prepared,
            Err(err) => return failed(err),
        };
        // The engine reports synchronously; candidates are recorded (and stored) beside it.
        let (candidates, received) = tokio::sync::mpsc::unbounded_channel::<Recorded>();
        let observer = forward_events(evolution_id.to_owned(), candidates);
        let engine = engine::run(&task, &request.prompt, &config, observer);
        // A stop drops the engine with its calls in flight; what it reported before is still
        // recorded, to the end, since the recorder is not dropped with it.
        let stoppable = async {
            tokio::select! {
                biased;
                () = stop_asked(&mut stopped) => None,
                result = engine => Some(result),
            }
        };
        let record = self.record_all(evolution_id, received);
        let (result, ()) = tokio::join!(stoppable, record);
        let replay = task.replay();
        if replay.replayed > 0 {
            tracing::info!(
                %evolution_id, replayed = replay.replayed, made = replay.made,
                "execution continued from its checkpoint"
            );
        }
        match result? {
            Ok(run) => Some(finished_state(evolution_id, &run)),
            Err(err) => failed(err.to_string()),
        }
    }

    /// The engine's task (the models, the scorer, and the calls the execution's checkpoint
    /// holds) and configuration for an execution, or why it cannot run.
    fn prepare(
        &self,
        evolution_id: &str,
        execution: &StoredExecution,
    ) -> Result<(JournaledTask<InferenceTask>, EngineConfig), String> {
        let request = &execution.request;
        let (Ok(minibatch), Ok(pareto)) = (
            usize::try_from(request.minibatch_size),
            usize::try_from(request.pareto_size),
        ) else {
            return Err("minibatchSize or paretoSize does not fit this machine".into());
        };
        let metric = evaluator_metric(&request.evaluator);
        let (scorer, note) = match &self.settings.scorer {
            Some(scorer) => (scorer.clone(), None),
            None => scorer_for_metric(metric.as_deref()),
        };
        if let Some(note) = note {
            tracing::warn!(%evolution_id, "{note}");
        }
        let engine_settings = request.engine.clone().unwrap_or_default();
        let inference = InferenceTask::new(
            Arc::clone(&self.task_model),
            Arc::clone(&self.reflection_model),
            self.models(&engine_settings),
            request.dataset_columns.clone(),
            request.dataset.clone(),
            &scorer,
        )
        .map_err(|err| err.to_string())?;
        let sink = self.store.as_ref().map(|store| Sink {
            store: Arc::clone(store),
            evolution_id: evolution_id.to_owned(),
        });
        let task = JournaledTask::new(
            inference.with_seed(execution.seed),
            execution.calls.clone(),
            sink,
        );
        let config = self.engine_config(request, execution.seed, minibatch, pareto)?;
        Ok((task, config))
    }

    /// The settings of the proposer a request asks for (its `proposer`, else the one its
    /// reflection model gets by default: a capable model the reference implementation's
    /// rewrite, the small embedded one rules), when it is not this engine's own.
    fn following(&self, engine_settings: &EngineSettings) -> Option<LocalSettings> {
        let model = engine_settings
            .reflection_model
            .as_deref()
            .unwrap_or(&self.settings.models.reflection_model);
        let proposer = engine_settings
            .proposer
            .unwrap_or_else(|| default_proposer(model));
        (proposer != self.settings.proposer).then(|| {
            let mut models = self.settings.models.clone();
            model.clone_into(&mut models.reflection_model);
            models.reflection_max_tokens = None;
            LocalSettings::with_proposer(models, proposer)
        })
    }

    /// The task and reflection models, with what the request's `[engine]` settings override.
    fn models(&self, engine_settings: &EngineSettings) -> ModelSettings {
        let mut models = self.settings.models.clone();
        if let Some(follow) = self.following(engine_settings) {
            models.reflection_max_tokens = follow.models.reflection_max_tokens;
        }
        if let Some(model) = &engine_settings.reflection_model {
            models.reflection_model.clone_from(model);
        }
        if let Some(model) = &engine_settings.task_model {
            models.task_model.clone_from(model);
        }
        if let Some(temperature) = engine_settings.reflection_temperature {
            models.reflection_temperature = Some(temperature);
        }
        if let Some(tokens) = engine_settings.reflection_max_tokens {
            models.reflection_max_tokens = Some(tokens);
        }
        models
    }

    /// The engine's configuration for a request: the shape and budget it asks for, this
    /// engine's settings, then the request's own `[engine]` settings (or why they do not fit).
    fn engine_config(
        &self,
        request: &StartExecution,
        seed: u64,
        minibatch: usize,
        pareto: usize,
    ) -> Result<EngineConfig, String> {
        let mut config = EngineConfig::new(minibatch, pareto, request.budget);
        config.seed = seed;
        config.parallel_calls = self.settings.parallel_calls.max(1);
        // A slow or failed answer (a busy machine, a flaky service) costs one zero score or one
        // proposal, not the whole evolution; a run of failures still stops it, with the reason.
        config.on_task_error = OnTaskError::ScoreZero;
        let follow = request.engine.as_ref().and_then(|e| self.following(e));
        let own = follow.as_ref().unwrap_or(&self.settings);
        config.proposer = own.proposer;
        // The rules proposer is the small reflection model's; so are the glossary and the layout.
        // Demonstrations of a classification, one per label: with the 1.5B model on 120 rows
        // of TREC questions one such set scored 0.692 against the seed's 0.492 (+0.200, McNemar
        // p < 0.001). Each set is screened on a few Pareto rows before it pays for the rest
        // (on the first benchmark run with them, each of 25 offers cost a whole pass). Not for
        // other tasks unless `[engine] demonstrations` asks: on CoNLL-2003 entities each of
        // four sets scored far below its parent (22.7 of 40 against 8 to 16).
        config.demonstrations = DEFAULT_DEMONSTRATIONS;
        config.unlabelled_demonstrations = false;
        config.label_glossary = config.proposer == Proposer::Rules;
        config.input_last = config.proposer == Proposer::Rules;
        // Every proposer learns from failures only; see `EngineConfig::known_failures_first`.
        config.known_failures_first = true;
        // A minibatch winner judged on 10 Pareto rows before it pays for the rest; see
        // `EngineConfig::pareto_screen`.
        config.pareto_screen = PARETO_SCREEN_ROWS;
        config.reflection_minibatch = own.reflection_minibatch;
        if request.strategy == Strategy::Sam {
            config.merge = Some(MergeConfig::default());
        }
        apply_engine_settings(&mut config, &request.engine.clone().unwrap_or_default())?;
        Ok(config)
    }

    /// Records what the engine reports, in order, until it stops: candidates and iterations
    /// stored, the calls spent kept in memory (stored with the next candidate or the end).
    async fn record_all(
        &self,
        evolution_id: &str,
        mut received: tokio::sync::mpsc::UnboundedReceiver<Recorded>,
    ) {
        while let Some(recorded) = received.recv().await {
            match recorded {
                Recorded::Candidate(candidate) => {
                    self.record_candidate(evolution_id, candidate).await;
                }
                Recorded::Iteration(record) => {
                    self.record_iteration(evolution_id, record).await;
                }
                // Kept in memory; stored with the next candidate or the end.
                Recorded::Spent(spent) => {
                    if let Some(execution) = self.registry().get_mut(evolution_id) {
                        execution.state.budget_used = Some(spent);
                    }
                }
            }
        }
    }

    async fn record_candidate(&self, evolution_id: &str, candidate: CandidateRecord) {
        let record = HistoryRecord {
            generation: candidate.generation as f64,
            score: candidate.score,
            prompt: candidate.prompt,
            pareto_scores: Some(candidate.pareto_scores),
            costs: candidate.costs,
        };
        let state = {
            let mut registry = self.registry();
            let Some(execution) = registry.get_mut(evolution_id) else {
                return;
            };
            execution
                .history
                .retain(|known| known.generation != record.generation);
            execution.history.push(record.clone());
            execution.state.prompt = Some(PromptState {
                current_prompt: Some(record.prompt.clone()),
                current_prompt_score: Some(record.score),
                current_generation: Some(record.generation),
            });
            execution.state.clone()
        };
        if let Some(store) = &self.store {
            let stored = match store.add_history(evolution_id, &record).await {
                Ok(()) => store.save_state(evolution_id, &state).await,
                Err(err) => Err(err),
            };
            if let Err(err) = stored {
                tracing::error!(%evolution_id, %err, "history not stored");
            }
        }
    }

    async fn record_iteration(&self, evolution_id: &str, record: IterationRecord) {
        {
            let mut registry = self.registry();
            let Some(execution) = registry.get_mut(evolution_id) else {
                return;
            };
            // A continued execution replays the iterations it had already recorded.
            let known = execution
                .iterations
                .iter()
                .position(|known| known.iteration() == record.iteration());
            match known {
                Some(position) => execution.iterations[position] = record.clone(),
                None => execution.iterations.push(record.clone()),
            }
        }
        if let Some(store) = &self.store
            && let Err(err) = store.add_iteration(evolution_id, &record).await
        {
            tracing::error!(%evolution_id, %err, "iteration record not stored");
        }
    }

    /// Sets the state in memory, then in the store; false if the store refused it. An
    /// execution its owner cancelled keeps the cancel's state.
    async fn set_state(&self, evolution_id: &str, state: ExecutionState) -> bool {
        {
            let mut registry = self.registry();
            if registry.cancelled.contains(evolution_id) {
                return true;
            }
            let Some(execution) = registry.get_mut(evolution_id) else {
                return false;
            };
            execution.state = state.clone();
        }
        let Some(store) = &self.store else {
            return true;
        };
        match store.save_state(evolution_id, &state).await {
            Ok(()) => true,
            Err(err) => {
                tracing::error!(%evolution_id, %err, status = %state.status, "state not stored");
                false
            }
        }
    }
}

/// The engine's observer: each candidate, iteration and progress report sent on to be recorded
/// (the engine reports synchronously), each iteration also logged at debug level.
fn forward_events(
    id: String,
    candidates: tokio::sync::mpsc::UnboundedSender<Recorded>,
) -> impl FnMut(&EngineEvent) + Send {
    move |event: &EngineEvent| match event {
        EngineEvent::Candidate(candidate) => {
            let _ = candidates.send(Recorded::Candidate(candidate.clone()));
        }
        EngineEvent::Progress(progress) => {
            let _ = candidates.send(Recorded::Spent(progress.spent.total()));
        }
        EngineEvent::Iteration(record) => {
            // What the README promises `RUST_LOG=gepa_lab=debug` prints.
            match record {
                IterationRecord::Mutation(m) => tracing::debug!(
                    evolution_id = %id,
                    iteration = m.iteration,
                    kind = record.kind().as_str(),
                    parent = m.parent,
                    minibatch = ?m.minibatch,
                    shown = ?m.shown,
                    parent_scores = ?m.parent_scores,
                    child_scores = ?m.child_scores,
                    child_prompt = ?m.child_prompt,
                    outcome = %record.explain(),
                    "engine mutation"
                ),
                IterationRecord::Merge(m) => tracing::debug!(
                    evolution_id = %id,
                    iteration = m.iteration,
                    parents = ?m.parents,
                    ancestor = m.ancestor,
                    subsample = ?m.subsample,
                    parent_scores = ?m.parent_scores,
                    child_scores = ?m.child_scores,
                    child_prompt = ?m.child_prompt,
                    outcome = %record.explain(),
                    "engine merge"
                ),
            }
            let _ = candidates.send(Recorded::Iteration(record.clone()));
        }
        _ => {}
    }
}

/// The state of an execution whose engine ran to its end: completed, or failed with the reason
/// it stopped; either way with its best prompt and the calls spent.
fn finished_state(evolution_id: &str, run: &engine::Run) -> ExecutionState {
    let best = run.best();
    let prompt = Some(PromptState {
        current_prompt: Some(best.prompt.clone()),
        current_prompt_score: Some(best.score),
        current_generation: Some(best.generation as f64),
    });
    tracing::info!(
        %evolution_id, stop = ?run.stop(), task_calls = run.spent().task_calls,
        reflection_calls = run.spent().reflection_calls, budget = run.budget(),
        "engine finished"
    );
    let budget_used = Some(run.spent().total());
    match run.failure() {
        None => ExecutionState {
            status: Status::Completed,
            prompt,
            error: None,
            budget_used,
        },
        Some(failure) => ExecutionState {
            status: Status::Failed,
            prompt,
            error: Some(format!("the engine stopped: {failure}")),
            budget_used,
        },
    }
}

#[cfg(test)]
mod tests;
