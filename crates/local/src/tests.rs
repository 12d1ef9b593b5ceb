//! `LocalEvolution` over the simulated model: states, history, budget, the store hook, queueing
//! and restore.
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::*;
use gepa_lab_evolution::wire::DatasetItem;
use gepa_lab_inference::wire::Model;
use gepa_lab_inference::{ChatRequest, ChatResponse, ChunkStream, InferenceError, SimModel};

const MODEL: &str = "local-sim";
const SEED_PROMPT: &str = "Classify the sentiment of the review. Answer with one of: positive, negative\nReview: {review}";

/// The order things happened in, across the store and the model.
type Log = Arc<Mutex<Vec<String>>>;

/// The simulated model, counting calls and logging them. Calls from number `hang_from` on
/// (counted from 0) never return: they are in flight when a test interrupts the execution.
struct Counted {
    sim: SimModel,
    calls: AtomicU64,
    /// The last message of each request, in the order sent.
    messages: Mutex<Vec<String>>,
    log: Log,
    hang_from: Option<u64>,
}

impl Counted {
    fn new(sim: &str, log: Log, hang_from: Option<u64>) -> Self {
        Self {
            sim: SimModel::new(sim.parse().unwrap()),
            calls: AtomicU64::new(0),
            messages: Mutex::default(),
            log,
            hang_from,
        }
    }
}

#[async_trait]
impl Inference for Counted {
    async fn models(&self) -> Result<Vec<Model>, InferenceError> {
        self.sim.models().await
    }
    async fn chat(&self, request: &ChatRequest) -> Result<ChatResponse, InferenceError> {
        let number = self.calls.fetch_add(1, Ordering::SeqCst);
        self.log.lock().unwrap().push("call".into());
        if let Some(last) = request.messages.last() {
            self.messages.lock().unwrap().push(last.text());
        }
        if self.hang_from.is_some_and(|from| number >= from) {
            std::future::pending::<()>().await;
        }
        self.sim.chat(request).await
    }
    async fn chat_stream(&self, request: &ChatRequest) -> Result<ChunkStream, InferenceError> {
        self.sim.chat_stream(request).await
    }
}

/// Records what it is told in the shared log (calls and iteration records aside) and keeps the
/// executions as a store would, so a test can restart from them; refuses everything once
/// `broken`.
struct Recorder {
    log: Log,
    broken: bool,
    kept: Arc<Mutex<Vec<StoredExecution>>>,
    /// When set, the next state saved is held: handed over at once, as serve hands a write to a
    /// database thread, but applied only once the gate opens, whether or not its caller still
    /// waits for it.
    held: Mutex<Option<Arc<Semaphore>>>,
    /// The held write has landed.
    landed: Arc<std::sync::atomic::AtomicBool>,
}

#[async_trait]
impl ExecutionStore for Recorder {
    async fn insert(&self, execution: &StoredExecution) -> Result<(), StoreError> {
        self.refuse()?;
        self.log
            .lock()
            .unwrap()
            .push(format!("insert {}", execution.state.status));
        self.kept.lock().unwrap().push(execution.clone());
        Ok(())
    }
    async fn save_state(&self, id: &str, state: &ExecutionState) -> Result<(), StoreError> {
        self.refuse()?;
        self.log
            .lock()
            .unwrap()
            .push(format!("state {}", state.status));
        let held = self.held.lock().unwrap().take();
        if let Some(gate) = held {
            let (kept, id, state) = (Arc::clone(&self.kept), id.to_owned(), state.clone());
            let landed = Arc::clone(&self.landed);
            let write = tokio::spawn(async move {
                let _open = gate.acquire().await;
                change(&kept, &id, |execution| execution.state = state);
                landed.store(true, Ordering::SeqCst);
            });
            let _ = write.await;
            return Ok(());
        }
        self.change(id, |execution| execution.state = state.clone());
        Ok(())
    }
    async fn add_history(&self, id: &str, record: &HistoryRecord) -> Result<(), StoreError> {
        self.refuse()?;
        self.log
            .lock()
            .unwrap()
            .push(format!("history {}", record.generation));
        self.change(id, |execution| {
            execution
                .history
                .retain(|known| known.generation != record.generation);
            execution.history.push(record.clone());
        });
        Ok(())
    }
    async fn add_iteration(&self, id: &str, record: &IterationRecord) -> Result<(), StoreError> {
        self.refuse()?;
        self.change(id, |execution| {
            execution
                .iterations
                .retain(|known| known.iteration() != record.iteration());
            execution.iterations.push(record.clone());
        });
        Ok(())
    }
    async fn add_call(&self, id: &str, call: &CallRecord) -> Result<(), StoreError> {
        self.refuse()?;
        self.change(id, |execution| execution.calls.push(call.clone()));
        Ok(())
    }
}

impl Recorder {
    fn refuse(&self) -> Result<(), StoreError> {
        if self.broken {
            Err(StoreError("the disk is full".into()))
        } else {
            Ok(())
        }
    }

    fn change(&self, id: &str, how: impl FnOnce(&mut StoredExecution)) {
        change(&self.kept, id, how);
    }

    /// The executions as a restarted process would load them.
    fn load(&self) -> Vec<StoredExecution> {
        self.kept.lock().unwrap().clone()
    }
}

/// Changes the kept execution `id`, if there is one.
fn change(kept: &Mutex<Vec<StoredExecution>>, id: &str, how: impl FnOnce(&mut StoredExecution)) {
    let mut kept = kept.lock().unwrap();
    if let Some(execution) = kept.iter_mut().find(|e| e.evolution_id == id) {
        how(execution);
    }
}

struct Setup {
    local: LocalEvolution,
    model: Arc<Counted>,
    log: Log,
    store: Option<Arc<Recorder>>,
}

fn setup(sim: &str, max_running: usize, store: Option<bool>) -> Setup {
    setup_with(sim, max_running, store, None, Vec::new())
}

/// `setup`, with calls hanging from `hang_from` on and the store holding `kept`.
fn setup_with(
    sim: &str,
    max_running: usize,
    store: Option<bool>,
    hang_from: Option<u64>,
    kept: Vec<StoredExecution>,
) -> Setup {
    let log: Log = Arc::default();
    let model = Arc::new(Counted::new(sim, Arc::clone(&log), hang_from));
    let mut settings = LocalSettings::new(ModelSettings::new(MODEL));
    settings.max_running = max_running;
    let store = store.map(|broken| {
        Arc::new(Recorder {
            log: Arc::clone(&log),
            broken,
            kept: Arc::new(Mutex::new(kept)),
            held: Mutex::default(),
            landed: Arc::default(),
        })
    });
    let local = LocalEvolution::new(
        model.clone(),
        model.clone(),
        settings,
        store.clone().map(|s| s as Arc<dyn ExecutionStore>),
    );
    Setup {
        local,
        model,
        log,
        store,
    }
}

const REVIEWS: [(&str, &str); 10] = [
    ("Arrived broken and support never answered.", "negative"),
    ("Works exactly as described, very happy.", "positive"),
    ("The battery died after two days.", "negative"),
    ("Great value, would buy again.", "positive"),
    ("Stopped working after a week.", "negative"),
    ("My kids love it.", "positive"),
    ("Cheap plastic, feels flimsy.", "negative"),
    ("Fast delivery and solid build.", "positive"),
    ("Not worth the money at all.", "negative"),
    ("Exceeded my expectations.", "positive"),
];

fn request(budget: u64, minibatch: u64, pareto: u64) -> StartExecution {
    StartExecution {
        strategy: Strategy::Rpm,
        model: "gpt-4o-mini".into(),
        dataset_columns: vec!["review".into()],
        budget,
        minibatch_size: minibatch,
        pareto_size: pareto,
        evaluator: r#"{"model":"gpt-4o-mini","metric":"exact_match"}"#.into(),
        dataset: REVIEWS
            .iter()
            .cycle()
            .take((minibatch + pareto) as usize)
            .map(|(review, label)| DatasetItem {
                input: BTreeMap::from([("review".to_owned(), (*review).to_owned())]),
                expected_output: (*label).to_owned(),
            })
            .collect(),
        prompt: SEED_PROMPT.into(),
        custom_id: None,
        engine: None,
    }
}

async fn wait_until(
    local: &LocalEvolution,
    id: &str,
    done: impl Fn(&Execution) -> bool,
) -> Execution {
    for _ in 0..3000 {
        let execution = local.get(id).await.unwrap();
        if done(&execution) {
            return execution;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("execution {id} did not get there in 30 s");
}

async fn finished(local: &LocalEvolution, id: &str) -> Execution {
    wait_until(local, id, |e| e.status.is_final()).await
}

async fn history(local: &LocalEvolution, id: &str) -> Vec<HistoryRecord> {
    local.prompts(id, Some(1), Some(1000)).await.unwrap()
}

#[tokio::test]
async fn runs_to_completion_within_budget_with_the_seed_as_generation_0() {
    let Setup { local, model, .. } = setup("model=local-sim", 2, None);
    let id = local.start(&request(30, 3, 5)).await.unwrap();
    let execution = finished(&local, &id).await;
    assert_eq!(execution.status, Status::Completed, "{execution:?}");
    assert_eq!(execution.budget, Some(30.0));
    assert_eq!(execution.custom_id, Some(format!("local-{}", &id[..8])));
    assert!(model.calls.load(Ordering::SeqCst) <= 30);

    let history = history(&local, &id).await;
    assert_eq!(history[0].generation, 0.0);
    assert_eq!(history[0].prompt, SEED_PROMPT);
    let generations: Vec<f64> = history.iter().map(|r| r.generation).collect();
    let expected: Vec<f64> = (0..history.len()).map(|g| g as f64).collect();
    assert_eq!(generations, expected);
    // Once over, `prompt` is the best generation, the earlier one on a tie.
    let best = history.iter().fold(
        &history[0],
        |best, r| if r.score > best.score { r } else { best },
    );
    let prompt = execution.prompt.expect("a scored execution has a prompt");
    assert_eq!(prompt.current_generation, Some(best.generation));
    assert_eq!(prompt.current_prompt_score, Some(best.score));
    assert_eq!(prompt.current_prompt.as_deref(), Some(best.prompt.as_str()));
}

#[tokio::test]
async fn the_simulated_model_lets_the_engine_improve_the_seed() {
    // SimModel picks a listed label by a hash of the whole prompt, so each rewrite of the
    // instruction answers the rows differently; the engine keeps the rewrites that score better.
    // Deterministic for this model seed and dataset.
    let Setup { local, .. } = setup("model=local-sim,seed=3", 2, None);
    let id = local.start(&request(60, 4, 6)).await.unwrap();
    assert_eq!(finished(&local, &id).await.status, Status::Completed);
    let history = history(&local, &id).await;
    let seed = history[0].score;
    let best = history.iter().map(|r| r.score).fold(f64::MIN, f64::max);
    assert!(history.len() > 1, "{history:?}");
    assert!(best > seed, "seed {seed}, best {best}: {history:?}");
}

#[tokio::test]
async fn invalid_requests_are_refused_before_anything_is_recorded() {
    let Setup { local, log, .. } = setup("model=local-sim", 2, Some(false));
    let mut bad = request(0, 3, 5);
    bad.dataset_columns.clear();
    match local.start(&bad).await {
        Err(EvolutionError::Invalid(text)) => {
            assert!(text.contains("rule dataset-columns-min: "), "{text}");
            assert!(text.contains("rule budget-min: "), "{text}");
        }
        other => panic!("expected Invalid, got {other:?}"),
    }
    assert!(log.lock().unwrap().is_empty());
    assert!(local.list(None, None).await.unwrap().is_empty());
}

#[tokio::test]
async fn a_budget_below_the_pareto_set_fails_with_the_engines_reason() {
    let Setup { local, model, .. } = setup("model=local-sim", 2, None);
    let id = local.start(&request(2, 3, 5)).await.unwrap();
    let execution = finished(&local, &id).await;
    assert_eq!(execution.status, Status::Failed);
    let error = execution.error.unwrap();
    assert!(error.contains("budget 2 cannot cover"), "{error}");
    assert!(execution.prompt.is_none());
    assert_eq!(model.calls.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_task_model_that_is_not_served_fails_the_execution() {
    let Setup { local, .. } = setup("model=another-model", 2, None);
    let id = local.start(&request(30, 3, 5)).await.unwrap();
    let execution = finished(&local, &id).await;
    assert_eq!(execution.status, Status::Failed);
    let error = execution.error.unwrap();
    assert!(error.contains("503"), "{error}");
    assert!(history(&local, &id).await.is_empty());
}

#[tokio::test]
async fn the_store_hears_of_in_progress_before_the_first_model_call() {
    let Setup { local, log, .. } = setup("model=local-sim", 2, Some(false));
    let id = local.start(&request(20, 3, 3)).await.unwrap();
    finished(&local, &id).await;
    let log = log.lock().unwrap().clone();
    assert_eq!(log[0], "insert pending");
    assert_eq!(log[1], "state in_progress", "{log:?}");
    assert_eq!(log[2], "call");
    assert_eq!(log.last().map(String::as_str), Some("state completed"));
    let stored: Vec<&String> = log.iter().filter(|l| l.starts_with("history")).collect();
    assert_eq!(stored.len(), history(&local, &id).await.len());
}

#[tokio::test]
async fn a_store_that_refuses_the_start_refuses_the_execution() {
    let Setup { local, model, .. } = setup("model=local-sim", 2, Some(true));
    let err = local.start(&request(20, 3, 3)).await.unwrap_err();
    assert!(matches!(err, EvolutionError::Store(_)), "{err}");
    assert!(local.list(None, None).await.unwrap().is_empty());
    assert_eq!(model.calls.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn executions_wait_as_pending_for_a_running_slot() {
    let Setup { local, .. } = setup("model=local-sim,latency_ms=5", 1, None);
    let first = local.start(&request(30, 3, 5)).await.unwrap();
    let second = local.start(&request(30, 3, 5)).await.unwrap();
    wait_until(&local, &first, |e| e.status == Status::InProgress).await;
    assert_eq!(local.get(&second).await.unwrap().status, Status::Pending);
    // `prompt` appears once the seed has been scored.
    assert!(local.get(&second).await.unwrap().prompt.is_none());
    assert_eq!(finished(&local, &first).await.status, Status::Completed);
    assert_eq!(finished(&local, &second).await.status, Status::Completed);
}

/// A cancel returns once the engine has stopped, after the write it had begun: the state and
/// spend it reports are those the store keeps last, and a restart finds the same. Before, a
/// write the engine had handed over before the cancel could land after the cancel's own, so
/// serve's spend after a restart was not the one the cancel reported (issue 47).
#[tokio::test]
async fn a_cancel_reports_the_state_and_spend_that_stay() {
    let Setup { local, store, .. } = setup("model=local-sim", 1, Some(false));
    let store = store.expect("a store");
    let gate = Arc::new(Semaphore::new(0));
    *store.held.lock().unwrap() = Some(Arc::clone(&gate));
    let id = local.start(&request(30, 3, 5)).await.unwrap();
    // The engine's first write, `in_progress`, is handed over and held.
    wait_until(&local, &id, |e| e.status == Status::InProgress).await;
    while store.held.lock().unwrap().is_some() {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let cancel = tokio::spawn({
        let (local, id) = (local.clone(), id.clone());
        async move { local.cancel_as(None, &id).await }
    });
    wait_until(&local, &id, |e| e.status == Status::Failed).await;
    gate.add_permits(1);
    let Cancel::Cancelled(reported) = cancel.await.unwrap().unwrap() else {
        panic!("it was running");
    };
    // The held write lands once the gate is open, whoever waits for it.
    while !store.landed.load(Ordering::SeqCst) {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    assert!(
        reported
            .error
            .as_deref()
            .unwrap_or_default()
            .starts_with("cancelled by its owner"),
        "{reported:?}"
    );
    let kept = store.load();
    assert_eq!(
        kept[0].to_wire(),
        reported,
        "the store keeps what the cancel said"
    );
    assert_eq!(local.get(&id).await.unwrap(), reported);
    let again = setup_with("model=local-sim", 1, Some(false), None, kept);
    again.local.restore(again.store.unwrap().load());
    assert_eq!(
        again.local.get(&id).await.unwrap(),
        reported,
        "after a restart"
    );
}

fn stored(id: &str, status: Status, history: Vec<HistoryRecord>) -> StoredExecution {
    StoredExecution {
        evolution_id: id.into(),
        owner: None,
        request: request(30, 3, 5),
        seed: 42,
        state: ExecutionState {
            status,
            prompt: None,
            error: None,
            budget_used: None,
        },
        created_at: "2026-01-01T00:00:00.000Z".into(),
        history,
        iterations: Vec::new(),
        calls: Vec::new(),
    }
}

#[tokio::test]
async fn restore_runs_pending_executions_and_continues_interrupted_ones() {
    let Setup { local, .. } = setup("model=local-sim", 2, Some(false));
    let seed_record = HistoryRecord {
        generation: 0.0,
        score: 0.5,
        prompt: SEED_PROMPT.into(),
        pareto_scores: None,
        costs: None,
    };
    let restored = local.restore(vec![
        stored("queued", Status::Pending, Vec::new()),
        stored("running", Status::InProgress, vec![seed_record.clone()]),
        stored("done", Status::Completed, vec![seed_record.clone()]),
    ]);
    assert_eq!(restored.loaded, 3);
    assert_eq!(restored.resumed, ["queued"]);
    assert_eq!(restored.continued, ["running"]);

    // An interrupted execution without a recorded call starts over; it had paid for nothing.
    assert_eq!(finished(&local, "running").await.status, Status::Completed);
    assert_eq!(local.get("done").await.unwrap().status, Status::Completed);
    assert_eq!(history(&local, "done").await, [seed_record]);
    assert_eq!(finished(&local, "queued").await.status, Status::Completed);

    // Restoring the same executions again changes nothing and runs nothing twice.
    let again = local.restore(vec![stored("queued", Status::Pending, Vec::new())]);
    assert_eq!(again.skipped, ["queued"]);
    assert_eq!(local.list(None, None).await.unwrap().len(), 3);
}

#[tokio::test]
async fn a_resumed_execution_repeats_the_run_its_seed_gives() {
    let mut histories = Vec::new();
    for _ in 0..2 {
        let Setup { local, .. } = setup("model=local-sim,seed=5", 2, None);
        local.restore(vec![stored("same", Status::Pending, Vec::new())]);
        finished(&local, "same").await;
        histories.push(history(&local, "same").await);
    }
    assert_eq!(histories[0], histories[1]);
}

#[tokio::test]
async fn the_same_request_makes_the_same_run_and_another_custom_id_another() {
    let Setup { local, .. } = setup("model=local-sim,seed=5", 2, None);
    let mut request = request(40, 3, 5);
    request.custom_id = Some("replicate-1".into());
    let first = local.start(&request).await.unwrap();
    let second = local.start(&request).await.unwrap();
    request.custom_id = Some("replicate-2".into());
    let third = local.start(&request).await.unwrap();
    for id in [&first, &second, &third] {
        finished(&local, id).await;
    }
    assert_ne!(first, second);
    assert_eq!(
        history(&local, &first).await,
        history(&local, &second).await
    );
    // The stand-in model answers the same prompts alike, so another run shows in what the
    // engine's seed draws: the order of each iteration's minibatch rows.
    let minibatches = |records: Vec<IterationRecord>| -> Vec<Vec<usize>> {
        records
            .into_iter()
            .filter_map(|record| match record {
                IterationRecord::Mutation(mutation) => Some(mutation.minibatch),
                IterationRecord::Merge(_) => None,
            })
            .collect()
    };
    let drawn = |id: String| {
        let local = &local;
        async move {
            let records = local.iterations(&id, 0).await.unwrap().expect("recorded");
            minibatches(records)
        }
    };
    let (first_draws, second_draws, third_draws) = (
        drawn(first.clone()).await,
        drawn(second.clone()).await,
        drawn(third.clone()).await,
    );
    assert!(first_draws.len() > 1, "{first_draws:?}");
    assert_eq!(first_draws, second_draws);
    assert_ne!(
        first_draws, third_draws,
        "another custom id draws another run"
    );
    assert_ne!(seed_of(&request), {
        request.custom_id = Some("replicate-1".into());
        seed_of(&request)
    });
}

#[tokio::test]
async fn pages_are_numbered_from_1_and_executions_are_seen_by_their_owner_only() {
    assert_eq!(
        Paging::new(None, None),
        Ok(Paging {
            page: 1,
            limit: PAGE_LIMIT
        })
    );
    assert!(
        Paging::new(Some(0), None)
            .unwrap_err()
            .contains("numbered from 1")
    );
    assert!(Paging::new(None, Some(0)).is_err());
    let items = [1, 2, 3, 4, 5];
    let page = |page, limit| Paging { page, limit }.slice(&items).to_vec();
    assert_eq!(page(1, 2), [1, 2]);
    assert_eq!(page(3, 2), [5]);
    assert_eq!(page(4, 2), Vec::<i32>::new());
    assert_eq!(page(u32::MAX, u32::MAX), Vec::<i32>::new());

    let Setup { local, .. } = setup("model=local-sim", 2, None);
    let mine = local
        .start_as(Some("key-a"), &request(20, 3, 3))
        .await
        .unwrap();
    let theirs = local
        .start_as(Some("key-b"), &request(20, 3, 3))
        .await
        .unwrap();
    let (list, total) = local.list_as(Some("key-a"), Paging::new(None, None).unwrap());
    assert_eq!(total, 1);
    assert_eq!(list[0].evolution_id.as_deref(), Some(mine.as_str()));
    assert!(matches!(
        local.get_as(Some("key-a"), &theirs),
        Err(EvolutionError::NotFound(_))
    ));
    assert!(matches!(
        local.prompts_as(Some("key-a"), "nope", Paging::new(None, None).unwrap()),
        Err(EvolutionError::NotFound(_))
    ));
    assert!(matches!(
        local.list(Some(0), None).await,
        Err(EvolutionError::Invalid(_))
    ));
    assert_eq!(local.batch_jobs().await.unwrap().jobs.len(), 0);
}

#[tokio::test]
async fn a_scorer_in_the_settings_replaces_the_metrics_and_spent_calls_are_reported() {
    // The evaluator says exact_match, which the simulated answers rarely meet; a run whose
    // settings carry its replay scorer is scored by that instead (here one every answer meets).
    let Setup { local, .. } = setup("model=local-sim", 2, None);
    let id = local.start(&request(20, 3, 5)).await.unwrap();
    finished(&local, &id).await;
    let by_metric = history(&local, &id).await;
    assert!(by_metric[0].score < 1.0, "{by_metric:?}");

    let model = Arc::new(Counted::new("model=local-sim", Arc::default(), None));
    let mut settings = LocalSettings::new(ModelSettings::new(MODEL));
    settings.scorer = Some("regex:.".parse().unwrap());
    let local = LocalEvolution::new(model.clone(), model.clone(), settings, None);
    let id = local.start(&request(20, 3, 5)).await.unwrap();
    let execution = finished(&local, &id).await;
    let by_replay_scorer = history(&local, &id).await;
    assert_eq!(by_replay_scorer[0].score, 1.0);
    // budgetUsed is what the engine paid: here every model call (none failed, so none was
    // retried).
    assert_eq!(
        execution.budget_used,
        Some(model.calls.load(Ordering::SeqCst) as f64)
    );
}

/// The kill-and-resume check: an execution interrupted after `k` model calls, for 12 values of
/// `k` spread over the whole run, continues on a restart from what its store kept. It ends with
/// the history, iteration records and budget used of an uninterrupted run, and the restarted
/// engine makes exactly the calls the checkpoint lacks: the ones in flight at the interruption.
#[tokio::test]
async fn an_execution_interrupted_at_any_call_continues_from_its_checkpoint() {
    let sim = "model=local-sim,seed=3";
    let mut start = request(60, 4, 6);
    start.custom_id = Some("kill-and-resume".into());
    let Setup { local, model, .. } = setup(sim, 1, Some(false));
    let id = local.start(&start).await.unwrap();
    let whole = finished(&local, &id).await;
    assert_eq!(whole.status, Status::Completed);
    let whole_history = history(&local, &id).await;
    let whole_iterations = local.iterations_as(None, &id, 0, usize::MAX).unwrap();
    let whole_calls = model.calls.load(Ordering::SeqCst);
    assert!(whole_history.len() > 1, "{whole_history:?}");
    assert!(whole_iterations.len() > 3, "{whole_iterations:?}");

    let moments = 12;
    for moment in 0..moments {
        // From the first call to the last, never the same place twice.
        let k = 1 + moment * (whole_calls - 2) / (moments - 1);
        let first = setup_with(sim, 1, Some(false), Some(k), Vec::new());
        let id = first.local.start(&start).await.unwrap();
        while first.model.calls.load(Ordering::SeqCst) <= k {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        // Let the calls that do return be recorded, then kill.
        tokio::time::sleep(Duration::from_millis(20)).await;
        first.local.halt();
        let kept = first.store.as_ref().unwrap().load();
        let recorded = kept[0].calls.len() as u64;
        let sent = first.model.calls.load(Ordering::SeqCst);
        let in_flight = sent - recorded;
        let most_in_flight = gepa_lab_engine::DEFAULT_PARALLEL_CALLS as u64;
        assert!(
            (1..=most_in_flight).contains(&in_flight),
            "k {k}: {sent} sent, {recorded} recorded"
        );
        assert_eq!(kept[0].state.status, Status::InProgress);

        let second = setup_with(sim, 1, Some(false), None, kept.clone());
        let restored = second.local.restore(kept);
        assert_eq!(restored.continued, std::slice::from_ref(&id));
        let execution = finished(&second.local, &id).await;
        assert_eq!(execution.status, Status::Completed, "k {k}");
        assert_eq!(execution.budget_used, whole.budget_used, "k {k}");
        assert_eq!(history(&second.local, &id).await, whole_history, "k {k}");
        let iterations = second.local.iterations_as(None, &id, 0, usize::MAX);
        assert_eq!(iterations.unwrap(), whole_iterations, "k {k}");
        let made = second.model.calls.load(Ordering::SeqCst);
        assert_eq!(made, whole_calls - recorded, "k {k}: paid twice or skipped");
        assert_eq!(sent + made, whole_calls + in_flight, "k {k}");
    }
}

/// The same check through `FileExecutions`, the store of `run --backend local` (`engine.jsonl`):
/// each interruption also leaves a torn last line, as a kill in the middle of a write would.
#[tokio::test]
async fn a_local_run_interrupted_at_any_call_continues_from_its_engine_file() {
    let sim = "model=local-sim,seed=3";
    let mut start = request(60, 4, 6);
    start.custom_id = Some("kill-and-resume-file".into());
    let Setup { local, model, .. } = setup(sim, 1, None);
    let id = local.start(&start).await.unwrap();
    finished(&local, &id).await;
    let whole_history = history(&local, &id).await;
    let whole_calls = model.calls.load(Ordering::SeqCst);

    let folder = tempfile::tempdir().unwrap();
    let with_file = |path: &std::path::Path, hang_from: Option<u64>| {
        let model = Arc::new(Counted::new(sim, Arc::default(), hang_from));
        let mut settings = LocalSettings::new(ModelSettings::new(MODEL));
        settings.max_running = 1;
        let store = Arc::new(FileExecutions::open(path).unwrap());
        let local = LocalEvolution::new(model.clone(), model.clone(), settings, Some(store));
        (local, model)
    };
    for moment in 0..10 {
        let path = folder.path().join(format!("engine-{moment}.jsonl"));
        let k = 1 + moment * (whole_calls - 2) / 9;
        let (first, first_model) = with_file(&path, Some(k));
        let id = first.start(&start).await.unwrap();
        while first_model.calls.load(Ordering::SeqCst) <= k {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        first.halt();
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        std::io::Write::write_all(&mut file, br#"{"change":"call","evolution_id":"#).unwrap();

        let kept = FileExecutions::load(&path).unwrap();
        let recorded = kept[0].calls.len() as u64;
        assert_eq!(kept[0].state.status, Status::InProgress);
        let (second, second_model) = with_file(&path, None);
        assert_eq!(second.restore(kept).continued, std::slice::from_ref(&id));
        assert_eq!(finished(&second, &id).await.status, Status::Completed);
        assert_eq!(history(&second, &id).await, whole_history, "k {k}");
        let made = second_model.calls.load(Ordering::SeqCst);
        assert_eq!(made, whole_calls - recorded, "k {k}");
        // Read back once more, the file describes the finished execution, without a
        // checkpoint left to continue from.
        let reread = FileExecutions::load(&path).unwrap();
        assert_eq!(reread[0].state.status, Status::Completed);
        assert_eq!(reread[0].history, whole_history);
        assert!(reread[0].calls.is_empty());
    }
}

/// An experiment's `[engine]` settings reach the engine: a score threshold of 0 stops it as soon
/// as the seed is scored, and a reflection model nothing serves is refused at the start.
#[tokio::test]
async fn engine_settings_in_the_request_are_applied_or_refused() {
    let Setup { local, model, .. } = setup("model=local-sim", 2, None);
    let mut start = request(60, 3, 5);
    start.engine = Some(EngineSettings {
        score_threshold: Some(0.0),
        ..EngineSettings::default()
    });
    let id = local.start(&start).await.unwrap();
    assert_eq!(finished(&local, &id).await.status, Status::Completed);
    assert!(local.iterations_as(None, &id, 0, 10).unwrap().is_empty());
    // Only the seed's Pareto rows were scored.
    assert_eq!(model.calls.load(Ordering::SeqCst), 5);

    start.engine = Some(EngineSettings {
        reflection_model: Some("no-such-model".into()),
        ..EngineSettings::default()
    });
    match local.start(&start).await {
        Err(EvolutionError::Invalid(text)) => {
            assert!(text.contains("gepaLabEngine.reflectionModel"), "{text}");
            assert!(text.contains("no-such-model"), "{text}");
            assert!(text.contains(MODEL), "{text}");
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[tokio::test]
async fn a_reflection_template_of_the_users_own_is_what_the_reflection_model_reads() {
    let Setup { local, model, .. } = setup("model=local-sim", 2, None);
    let mut start = request(40, 3, 5);
    let template = "My own request. The current instruction:\n```\n<curr_instructions>\n```\n\
                    Cases:\n<inputs_outputs_feedback>\n\nWrite a better instruction in a ``` block.";
    start.engine = Some(EngineSettings {
        reflection_template: Some(template.into()),
        ..EngineSettings::default()
    });
    let id = local.start(&start).await.unwrap();
    assert_eq!(finished(&local, &id).await.status, Status::Completed);
    let messages = model.messages.lock().unwrap().clone();
    let reflections: Vec<&String> = messages
        .iter()
        .filter(|m| m.starts_with("My own request."))
        .collect();
    let iterations = local.iterations_as(None, &id, 0, 100).unwrap();
    let reflected = iterations
        .iter()
        // Demonstrations are offered without a reflection.
        .filter(|r| r.kind() != engine::ProposalKind::Demonstrations)
        .filter(|r| r.outcome() != &engine::Outcome::SkippedPerfect)
        .count();
    assert!(reflected > 0, "{iterations:?}");
    assert_eq!(reflections.len(), reflected, "one request per reflection");
    for text in &reflections {
        assert!(
            text.contains("# Example 1\n## Inputs\n### review\n"),
            "{text}"
        );
        assert!(text.contains("Write a better instruction in a ``` block.\n\nThe instruction is a template: before it reaches the assistant, {review} is replaced"), "{text}");
        assert!(
            !text.contains("<curr_instructions>") && !text.contains("<inputs_outputs_feedback>")
        );
    }
    assert!(
        reflections[0].contains(SEED_PROMPT),
        "the first parent is the seed"
    );
    assert!(
        !messages
            .iter()
            .any(|m| m.starts_with("I gave an assistant")),
        "the built-in request is not sent"
    );
    assert!(
        iterations.iter().any(|r| r.child_prompt().is_some()),
        "the answers to it are read"
    );

    start.engine = Some(EngineSettings {
        reflection_template: Some("Improve: <curr_instructions>".into()),
        ..EngineSettings::default()
    });
    let calls = model.calls.load(Ordering::SeqCst);
    match local.start(&start).await {
        Err(EvolutionError::Invalid(text)) => {
            assert!(text.contains("gepaLabEngine.reflectionTemplate"), "{text}");
            assert!(text.contains("lacks <inputs_outputs_feedback>"), "{text}");
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert_eq!(model.calls.load(Ordering::SeqCst), calls, "nothing ran");
}

#[test]
fn a_reflection_template_makes_even_the_rules_proposer_rewrite_with_it() {
    let mut config = EngineConfig::new(3, 5, 40);
    config.proposer = Proposer::Rules;
    let text = "<curr_instructions>\n<inputs_outputs_feedback>\n```";
    let settings = EngineSettings {
        reflection_template: Some(text.into()),
        ..EngineSettings::default()
    };
    apply_engine_settings(&mut config, &settings).unwrap();
    assert_eq!(config.proposer, Proposer::Rewrite);
    assert_eq!(
        config.reflection_template,
        Some(ReflectionTemplate::parse(text).unwrap())
    );

    let mut untouched = EngineConfig::new(3, 5, 40);
    untouched.proposer = Proposer::Rules;
    apply_engine_settings(&mut untouched, &EngineSettings::default()).unwrap();
    assert_eq!(
        untouched.proposer,
        Proposer::Rules,
        "no template, no change"
    );
    let broken = EngineSettings {
        reflection_template: Some("<inputs_outputs_feedback>".into()),
        ..EngineSettings::default()
    };
    let err = apply_engine_settings(&mut untouched, &broken).unwrap_err();
    assert!(err.contains("lacks <curr_instructions>"), "{err}");
}

/// The reflection request follows the model a start request names: a capable model (here the
/// engine's own, not embedded) gets the rewrite, an embedded one the rules proposer with its
/// larger minibatch and short answers; naming none keeps the engine's.
#[test]
fn the_proposer_follows_the_reflection_model_a_request_names() {
    let Setup { local, .. } = setup("model=local-sim", 2, None);
    let inner = &local.inner;
    let mut start = request(40, 3, 5);
    let own = inner.engine_config(&start, 1, 3, 5).unwrap();
    assert_eq!(own.proposer, Proposer::Rewrite);
    assert_eq!(
        inner
            .models(&EngineSettings::default())
            .reflection_max_tokens,
        None
    );

    let embedded = EngineSettings {
        reflection_model: Some("local:qwen2.5-coder-1.5b".into()),
        task_model: Some("ollama/qwen3:8b".into()),
        ..EngineSettings::default()
    };
    start.engine = Some(embedded.clone());
    let config = inner.engine_config(&start, 1, 3, 5).unwrap();
    assert_eq!(config.proposer, Proposer::Rules);
    assert_eq!(config.reflection_minibatch, EMBEDDED_REFLECTION_MINIBATCH);
    let models = inner.models(&embedded);
    assert_eq!(
        models.reflection_max_tokens,
        Some(EMBEDDED_REFLECTION_MAX_TOKENS)
    );
    assert_eq!(models.task_model, "ollama/qwen3:8b");
}

/// `[engine] proposer` overrides what the reflection model would get: a small model served by a
/// provider can be given the rules proposer (with its minibatch and short answers), and an
/// embedded one the rewrite.
#[test]
fn a_named_proposer_wins_over_the_reflection_models_default() {
    let Setup { local, .. } = setup("model=local-sim", 2, None);
    let inner = &local.inner;
    let mut start = request(40, 3, 5);

    let served_small = EngineSettings {
        reflection_model: Some("large/qwen2.5-coder-1.5b".into()),
        proposer: Some(Proposer::Rules),
        ..EngineSettings::default()
    };
    start.engine = Some(served_small.clone());
    let config = inner.engine_config(&start, 1, 3, 5).unwrap();
    assert_eq!(config.proposer, Proposer::Rules);
    assert!(config.label_glossary && config.input_last);
    assert_eq!(config.reflection_minibatch, EMBEDDED_REFLECTION_MINIBATCH);
    let models = inner.models(&served_small);
    assert_eq!(models.reflection_model, "large/qwen2.5-coder-1.5b");
    assert_eq!(
        models.reflection_max_tokens,
        Some(EMBEDDED_REFLECTION_MAX_TOKENS)
    );

    let embedded_rewriting = EngineSettings {
        reflection_model: Some("local:qwen2.5-coder-1.5b".into()),
        proposer: Some(Proposer::Rewrite),
        ..EngineSettings::default()
    };
    start.engine = Some(embedded_rewriting.clone());
    let config = inner.engine_config(&start, 1, 3, 5).unwrap();
    assert_eq!(config.proposer, Proposer::Rewrite);
    assert!(!config.label_glossary);
    assert_eq!(
        inner.models(&embedded_rewriting).reflection_max_tokens,
        None
    );
}

/// Demonstrations are on for classifications unless the file says otherwise; `[engine]
/// demonstrations` sets how many, for any task.
#[test]
fn demonstrations_default_to_classifications_and_a_set_number_applies_to_any_task() {
    let Setup { local, .. } = setup("model=local-sim", 2, None);
    let inner = &local.inner;
    let mut start = request(40, 3, 5);
    let default = inner.engine_config(&start, 1, 3, 5).unwrap();
    assert_eq!(default.demonstrations, DEFAULT_DEMONSTRATIONS);
    assert!(!default.unlabelled_demonstrations);

    for asked in [0, 3] {
        start.engine = Some(EngineSettings {
            demonstrations: Some(asked),
            ..EngineSettings::default()
        });
        let config = inner.engine_config(&start, 1, 3, 5).unwrap();
        assert_eq!(config.demonstrations, asked);
        assert!(config.unlabelled_demonstrations);
    }
}
