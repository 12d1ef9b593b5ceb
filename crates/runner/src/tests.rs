use std::sync::Mutex;

use async_trait::async_trait;

use super::*;

#[test]
fn only_a_start_the_service_will_never_take_is_refused_for_good() {
    let status = |code: u16| {
        EvolutionError::Api(gepa_lab_http::ApiError::Status {
            status: reqwest::StatusCode::from_u16(code).unwrap(),
            retry_after: None,
            body: String::new(),
        })
    };
    assert!(refused(&status(400)) && refused(&status(422)) && refused(&status(401)));
    // Rate limited or timed out: nothing started, but it may be sent again on resume.
    assert!(!refused(&status(429)) && !refused(&status(408)));
    assert!(!refused(&status(500)) && !refused(&status(503)));
}
use gepa_lab_evolution::wire::{BatchJobs, Execution, HistoryRecord, PromptState, StartExecution};
use gepa_lab_experiment::{Settings, validate_file};
use gepa_lab_inference::{InferenceError, SimConfig, SimModel};
use gepa_lab_store::{CACHE_FILE, EVENTS_FILE, ReplayRow};

/// An evolution service in memory: each execution is pending, then in progress, then
/// completed (or failed for a customId containing "fail"), with a two-generation history.
#[derive(Default)]
struct Scripted {
    starts: Mutex<Vec<String>>,
    polls: Mutex<HashMap<String, u32>>,
    /// A customId the service stores only after its first `list` (a start still on its way
    /// when the run was killed), as execution `evo-late`.
    stored_late: Option<String>,
    lists: Mutex<u32>,
}

use std::collections::HashMap;

#[async_trait]
impl Evolution for Scripted {
    async fn start(&self, request: &StartExecution) -> Result<String, EvolutionError> {
        let mut starts = self.starts.lock().unwrap();
        starts.push(request.custom_id.clone().unwrap_or_default());
        Ok(format!("evo-{}", starts.len()))
    }
    async fn get(&self, id: &str) -> Result<Execution, EvolutionError> {
        let mut polls = self.polls.lock().unwrap();
        let count = polls.entry(id.to_owned()).or_default();
        *count += 1;
        let index: usize = id.trim_start_matches("evo-").parse().unwrap();
        let failing = self.starts.lock().unwrap()[index - 1].contains("fail");
        let status = match *count {
            1 => Status::Pending,
            2 => Status::InProgress,
            _ if failing => Status::Failed,
            _ => Status::Completed,
        };
        Ok(Execution {
            evolution_id: None,
            custom_id: None,
            strategy: Some("RPM".into()),
            error: (status == Status::Failed).then(|| "reflection model unavailable".into()),
            status,
            budget: Some(30.0),
            prompt: (*count > 1).then(|| PromptState {
                current_prompt: Some("p".into()),
                current_prompt_score: Some(0.5),
                current_generation: Some(1.0),
            }),
            created_at: None,
            budget_used: None,
        })
    }
    async fn list(&self, _: Option<u32>, _: Option<u32>) -> Result<Vec<Execution>, EvolutionError> {
        let mut lists = self.lists.lock().unwrap();
        *lists += 1;
        Ok(match &self.stored_late {
            Some(custom_id) if *lists > 1 => vec![Execution {
                evolution_id: Some("evo-late".into()),
                custom_id: Some(custom_id.clone()),
                strategy: None,
                error: None,
                status: Status::Completed,
                budget: None,
                prompt: None,
                created_at: None,
                budget_used: None,
            }],
            _ => Vec::new(),
        })
    }
    async fn prompts(
        &self,
        _: &str,
        page: Option<u32>,
        _: Option<u32>,
    ) -> Result<Vec<HistoryRecord>, EvolutionError> {
        if page != Some(1) {
            return Ok(Vec::new());
        }
        Ok(vec![
            HistoryRecord {
                generation: 0.0,
                score: 0.5,
                prompt: "Is this review positive or negative?\nReview: {review}".into(),
                pareto_scores: None,
                costs: None,
            },
            HistoryRecord {
                generation: 1.0,
                score: 0.75,
                prompt: "Answer with one of: positive, negative\nReview: {review}".into(),
                pareto_scores: None,
                costs: None,
            },
        ])
    }
    async fn batch_jobs(&self) -> Result<BatchJobs, EvolutionError> {
        Ok(BatchJobs {
            success: true,
            jobs: Vec::new(),
        })
    }
}

fn backends(evolution: Arc<Scripted>) -> Backends {
    let sim: SimConfig = "model=local,seed=1".parse().unwrap();
    Backends {
        evolution,
        inference: Arc::new(SimModel::new(sim)),
        description: Backend::Local,
        shared_key: false,
    }
}

fn fast() -> RunOptions {
    RunOptions {
        poll_interval: Duration::from_millis(1),
        poll_jitter: Duration::from_millis(1),
        timeout: Duration::from_secs(30),
        answer_events: AnswerEvents::All,
    }
}

fn plan() -> Plan {
    let file =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/valid.toml");
    validate_file(&file, &Settings::default())
        .plan
        .expect("the fixture is valid")
}

/// Runs `plan` to its end in a new run directory under `root`.
async fn run_new(
    root: &std::path::Path,
    plan: &Plan,
    evolution: Arc<Scripted>,
    options: &RunOptions,
) -> Outcome {
    let (dir, manifest) = create_run(root, plan, Backend::Local, None).unwrap();
    execute(dir, manifest, &backends(evolution), options, &Silent)
        .await
        .unwrap()
}

/// Resumes the run of `outcome` to its end.
async fn resume(outcome: &Outcome, evolution: Arc<Scripted>) -> Outcome {
    let dir = RunDir::open(&outcome.dir.path).unwrap();
    let manifest = dir.read_manifest().unwrap();
    execute(dir, manifest, &backends(evolution), &fast(), &Silent)
        .await
        .unwrap()
}

/// Lines of the run file `name`.
fn lines_of(outcome: &Outcome, name: &str) -> usize {
    std::fs::read_to_string(outcome.dir.file(name))
        .unwrap()
        .lines()
        .count()
}

#[tokio::test]
async fn a_run_goes_from_start_to_scored_replay() {
    let root = tempfile::tempdir().unwrap();
    let evolution = Arc::new(Scripted::default());
    let outcome = run_new(root.path(), &plan(), evolution.clone(), &fast()).await;

    assert_eq!(evolution.starts.lock().unwrap().len(), 1);
    assert!(outcome.manifest.executions[0].state.is_finished());
    assert!(
        outcome.manifest.simulated,
        "answers from SimModel mark the run simulated"
    );
    assert_eq!(outcome.history.len(), 2);
    // holdout 14 rows × (seed + g1; g0 repeats the seed) × 1 model
    let replay: Vec<ReplayRow> = outcome.dir.read_csv(REPLAY_FILE).unwrap();
    assert_eq!(replay.len(), 28);
    assert_eq!(
        outcome.replay,
        Replayed {
            rows: 28,
            errors: 0,
            simulated: true,
            key_refused: false
        }
    );
    assert!(replay.iter().all(|row| row.error.is_empty()));
    assert!(replay.iter().any(|row| row.version.to_string() == "g1"));
    let g1_correct = replay
        .iter()
        .filter(|r| r.version.to_string() == "g1" && r.score == 1.0)
        .count();
    assert!(
        g1_correct > 0,
        "the labelled prompt gets some rows right: {replay:?}"
    );
    let events = std::fs::read_to_string(outcome.dir.file(EVENTS_FILE)).unwrap();
    for kind in [
        "run_started",
        "start_sending",
        "started",
        "poll",
        "finished",
        "history",
        "answer",
        "run_finished",
    ] {
        assert!(
            events.contains(&format!("\"event\":\"{kind}\"")),
            "no {kind} event"
        );
    }
    let answer_lines = events.matches("\"event\":\"answer\"").count();
    assert_eq!(answer_lines, 28, "`fast()` logs every answer");
}

/// The fixture plan on a generated file of `rows` distinct reviews (holdout: all but the
/// first 6), in `dir`.
fn plan_with_rows(dir: &std::path::Path, rows: usize) -> Plan {
    let data = dir.join("many.csv");
    let mut text = String::from("review,label\n");
    for i in 0..rows {
        let (words, label) = if i % 2 == 0 {
            ("loved it", "positive")
        } else {
            ("broke at once", "negative")
        };
        text.push_str(&format!("\"Review {i}: {words}\",{label}\n"));
    }
    std::fs::write(&data, text).unwrap();
    let fixture =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/valid.toml");
    let toml = std::fs::read_to_string(fixture)
        .unwrap()
        .replace("data/tiny.csv", data.to_str().unwrap());
    let file = dir.join("many.toml");
    std::fs::write(&file, toml).unwrap();
    validate_file(&file, &Settings::default())
        .plan
        .expect("the edited fixture is valid")
}

#[tokio::test]
async fn a_holdout_longer_than_a_chunk_is_replayed_whole_and_resumed_from_the_cache() {
    let root = tempfile::tempdir().unwrap();
    // Two chunks and a part of a third.
    let holdout = 2 * replay::CHUNK_ROWS + 10;
    let plan = plan_with_rows(root.path(), holdout + 6);
    let evolution = Arc::new(Scripted::default());
    let first = run_new(root.path(), &plan, evolution.clone(), &fast()).await;
    // seed + g1 on every holdout row, each once.
    assert_eq!(first.replay.rows, 2 * holdout);
    assert_eq!(first.replay.errors, 0);
    let replay: Vec<ReplayRow> = first.dir.read_csv(REPLAY_FILE).unwrap();
    assert_eq!(replay.len(), 2 * holdout);
    let mut cells: Vec<(String, usize)> = replay
        .iter()
        .map(|row| (row.version.to_string(), row.row))
        .collect();
    cells.sort();
    cells.dedup();
    assert_eq!(cells.len(), 2 * holdout, "no cell twice");
    assert!(
        replay
            .iter()
            .all(|row| row.row > 6 && row.row <= holdout + 6)
    );
    let events = std::fs::read_to_string(first.dir.file(EVENTS_FILE)).unwrap();
    assert!(
        events.contains(&format!(
            "\"event\":\"replay_planned\",\"requests\":{},\"waiting\":{},\"cached\":0",
            2 * holdout,
            2 * holdout
        )),
        "one plan for every chunk: {}",
        events
            .lines()
            .find(|l| l.contains("replay_planned"))
            .unwrap_or("")
    );
    let cached = lines_of(&first, CACHE_FILE);
    assert_eq!(cached, 2 * holdout);

    // A resume finds every answer in the cache file and writes the same table.
    let second = resume(&first, evolution).await;
    assert_eq!(second.replay, first.replay);
    let again: Vec<ReplayRow> = second.dir.read_csv(REPLAY_FILE).unwrap();
    assert_eq!(again, replay);
    assert_eq!(lines_of(&second, CACHE_FILE), cached, "nothing asked again");
}

/// A resumed run recomputes a stratified holdout from the file's labels (its manifest keeps no
/// holdout rows) and replays exactly the rows the first run did, asking nothing again. The
/// holdout is a count, so which of the rows left it takes depends on the order.
#[tokio::test]
async fn a_resumed_stratified_run_replays_the_same_holdout_rows() {
    let root = tempfile::tempdir().unwrap();
    // 30 `positive` rows, then 10 `negative`: in the file's order the first 26 rows (minibatch,
    // Pareto rows, holdout) would all be `positive`. (A seeded shuffle whose first rows hold
    // each label in its share would give the same rows as the stratified split: no seed here.)
    let data = root.path().join("skewed.csv");
    let mut text = String::from("review,label\n");
    for i in 0..40 {
        let label = if i < 30 { "positive" } else { "negative" };
        text.push_str(&format!("Review {i},{label}\n"));
    }
    std::fs::write(&data, text).unwrap();
    let fixture =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/valid.toml");
    let toml = std::fs::read_to_string(fixture)
        .unwrap()
        .replace("data/tiny.csv", data.to_str().unwrap())
        .replace("holdout = \"rest\"", "holdout = 20\nstratify = true");
    let file = root.path().join("skewed.toml");
    std::fs::write(&file, toml).unwrap();
    let plan = validate_file(&file, &Settings::default())
        .plan
        .expect("valid");
    let evolution = Arc::new(Scripted::default());
    let first = run_new(root.path(), &plan, evolution.clone(), &fast()).await;
    let rows = |outcome: &Outcome| -> Vec<usize> {
        let replay: Vec<ReplayRow> = outcome.dir.read_csv(REPLAY_FILE).unwrap();
        let mut rows: Vec<usize> = replay.iter().map(|row| row.row).collect();
        rows.sort_unstable();
        rows.dedup();
        rows
    };
    let held_out = rows(&first);
    assert_eq!(held_out.len(), 20);
    // Rows are numbered from 1: 31 to 40 are `negative`, a quarter of the file.
    let negatives = held_out.iter().filter(|&&row| row > 30).count();
    assert_eq!(negatives, 5, "{held_out:?}");

    std::fs::remove_file(first.dir.file(REPLAY_FILE)).unwrap();
    let cached = lines_of(&first, CACHE_FILE);
    let second = resume(&first, evolution).await;
    assert_eq!(rows(&second), held_out);
    assert_eq!(lines_of(&second, CACHE_FILE), cached, "nothing asked again");
}

#[tokio::test]
async fn by_default_only_failed_answers_are_logged() {
    let root = tempfile::tempdir().unwrap();
    let options = RunOptions {
        answer_events: AnswerEvents::default(),
        ..fast()
    };
    let outcome = run_new(root.path(), &plan(), Arc::default(), &options).await;
    assert_eq!(outcome.replay.rows, 28);
    let events = std::fs::read_to_string(outcome.dir.file(EVENTS_FILE)).unwrap();
    assert!(!events.contains("\"event\":\"answer\""), "{events}");
    assert!(events.contains("\"replay_rows\":28"), "{events}");
}

#[tokio::test]
async fn a_resumed_run_neither_restarts_nor_reasks() {
    let root = tempfile::tempdir().unwrap();
    let evolution = Arc::new(Scripted::default());
    let first = run_new(root.path(), &plan(), evolution.clone(), &fast()).await;
    let answers = lines_of(&first, CACHE_FILE);
    let second = resume(&first, evolution.clone()).await;
    assert_eq!(evolution.starts.lock().unwrap().len(), 1, "no second start");
    assert_eq!(
        answers,
        lines_of(&second, CACHE_FILE),
        "every answer came from the cache"
    );
    assert_eq!(first.replay, second.replay);
    let replay: Vec<ReplayRow> = second.dir.read_csv(REPLAY_FILE).unwrap();
    assert_eq!(replay.len(), 28);
}

#[tokio::test]
async fn a_resume_skips_and_counts_damaged_cache_lines_and_asks_their_answers_again() {
    let root = tempfile::tempdir().unwrap();
    let evolution = Arc::new(Scripted::default());
    let first = run_new(root.path(), &plan(), evolution.clone(), &fast()).await;
    let path = first.dir.file(CACHE_FILE);
    let text = std::fs::read_to_string(&path).unwrap();
    let mut lines: Vec<&str> = text.lines().collect();
    let answers = lines.len();
    // One answer cut in the middle of the file, one line of garbage.
    let cut = &lines[1][..lines[1].len() / 2];
    lines[1] = cut;
    lines.insert(3, "\u{0}\u{0}garbage");
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    let second = resume(&first, evolution).await;
    assert_eq!(
        second.replay, first.replay,
        "the cut answer was asked again"
    );
    assert_eq!(lines_of(&second, CACHE_FILE), answers + 2);
    let events = std::fs::read_to_string(second.dir.file(EVENTS_FILE)).unwrap();
    assert!(
        events.contains("\"event\":\"cache_lines_skipped\",\"lines\":2"),
        "{events}"
    );
}

/// An inference service that refuses every key (401), counting the requests it got.
#[derive(Default)]
struct Refusing {
    requests: std::sync::atomic::AtomicUsize,
}

#[async_trait]
impl Inference for Refusing {
    async fn models(&self) -> Result<Vec<gepa_lab_inference::wire::Model>, InferenceError> {
        Ok(Vec::new())
    }
    async fn chat(
        &self,
        _: &gepa_lab_inference::ChatRequest,
    ) -> Result<gepa_lab_inference::ChatResponse, InferenceError> {
        self.requests
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        // Answered after the other requests in flight went out, as a service would.
        tokio::task::yield_now().await;
        Err(InferenceError::Api(gepa_lab_http::ApiError::Status {
            status: reqwest::StatusCode::UNAUTHORIZED,
            retry_after: None,
            body: "invalid API key".into(),
        }))
    }
    async fn chat_stream(
        &self,
        request: &gepa_lab_inference::ChatRequest,
    ) -> Result<gepa_lab_inference::ChunkStream, InferenceError> {
        Err(self.chat(request).await.unwrap_err())
    }
}

#[tokio::test]
async fn a_refused_key_ends_the_replay_at_the_first_refusal_with_every_row_kept() {
    let root = tempfile::tempdir().unwrap();
    let plan = remote_plan();
    let concurrency = plan.executions[0].replay.as_ref().unwrap().concurrency;
    let refusing = Arc::new(Refusing::default());
    let backends = Backends {
        inference: refusing.clone(),
        ..backends(Arc::default())
    };
    let (dir, manifest) = create_run(root.path(), &plan, Backend::Local, None).unwrap();
    let outcome = execute(dir, manifest, &backends, &fast(), &Silent)
        .await
        .unwrap();
    let sent = refusing.requests.load(std::sync::atomic::Ordering::SeqCst);
    assert!(
        (1..=concurrency).contains(&sent),
        "{sent} requests sent, at most the {concurrency} in flight at the first refusal"
    );
    assert!(outcome.key_refused);
    assert_eq!(
        outcome.replay.errors, outcome.replay.rows,
        "no row answered"
    );
    let replay: Vec<ReplayRow> = outcome.dir.read_csv(REPLAY_FILE).unwrap();
    assert_eq!(
        replay.len(),
        28,
        "every row kept, with why it has no answer"
    );
    let not_sent = replay
        .iter()
        .filter(|row| {
            row.error
                .starts_with("not sent: the service refused the key")
        })
        .count();
    assert!(not_sent >= replay.len() - concurrency, "{not_sent}");
    let events = std::fs::read_to_string(outcome.dir.file(EVENTS_FILE)).unwrap();
    assert_eq!(
        events.matches("\"event\":\"replay_key_refused\"").count(),
        1
    );
}

/// An evolution service that refuses the key of every start (401).
struct RefusingStarts(Scripted);

#[async_trait]
impl Evolution for RefusingStarts {
    async fn start(&self, _: &StartExecution) -> Result<String, EvolutionError> {
        Err(EvolutionError::Api(gepa_lab_http::ApiError::Status {
            status: reqwest::StatusCode::UNAUTHORIZED,
            retry_after: None,
            body: "invalid API key".into(),
        }))
    }
    async fn get(&self, id: &str) -> Result<Execution, EvolutionError> {
        self.0.get(id).await
    }
    async fn list(
        &self,
        page: Option<u32>,
        limit: Option<u32>,
    ) -> Result<Vec<Execution>, EvolutionError> {
        self.0.list(page, limit).await
    }
    async fn prompts(
        &self,
        id: &str,
        page: Option<u32>,
        limit: Option<u32>,
    ) -> Result<Vec<HistoryRecord>, EvolutionError> {
        self.0.prompts(id, page, limit).await
    }
    async fn batch_jobs(&self) -> Result<BatchJobs, EvolutionError> {
        self.0.batch_jobs().await
    }
}

/// The fixture's plan, replayed on a model of the service rather than the embedded one.
fn remote_plan() -> Plan {
    let mut plan = plan();
    for execution in &mut plan.executions {
        if let Some(replay) = &mut execution.replay {
            replay.models = vec!["sim-text".into()];
        }
    }
    plan
}

#[tokio::test]
async fn a_start_refused_for_the_key_the_replay_shares_sends_no_replay_request() {
    let root = tempfile::tempdir().unwrap();
    let refusing = Arc::new(Refusing::default());
    for shared_key in [true, false] {
        let backends = Backends {
            evolution: Arc::new(RefusingStarts(Scripted::default())),
            inference: refusing.clone(),
            description: Backend::Local,
            shared_key,
        };
        let plan = remote_plan();
        let (dir, manifest) = create_run(root.path(), &plan, Backend::Local, None).unwrap();
        let outcome = execute(dir, manifest, &backends, &fast(), &Silent)
            .await
            .unwrap();
        let sent = refusing
            .requests
            .swap(0, std::sync::atomic::Ordering::SeqCst);
        assert!(outcome.key_refused);
        assert_eq!(outcome.replay.errors, outcome.replay.rows);
        if shared_key {
            assert_eq!(sent, 0, "the start's refusal ended the replay");
        } else {
            assert!(sent > 0, "another key: the replay asks");
        }
    }
}

#[tokio::test]
async fn a_failed_execution_is_recorded_and_its_seed_still_replayed() {
    let root = tempfile::tempdir().unwrap();
    let mut plan = plan();
    plan.executions[0].start.custom_id = Some("will-fail".into());
    let (dir, mut manifest) = create_run(root.path(), &plan, Backend::Local, None).unwrap();
    manifest.executions[0].custom_id = "will-fail".into();
    let outcome = execute(
        dir,
        manifest,
        &backends(Arc::new(Scripted::default())),
        &fast(),
        &Silent,
    )
    .await
    .unwrap();
    let record = &outcome.manifest.executions[0];
    assert!(
        matches!(&record.state, ExecutionState::Failed { reason, evolution_id: Some(_) }
            if reason == "reflection model unavailable"),
        "{:?}",
        record.state
    );
    let replay: Vec<ReplayRow> = outcome.dir.read_csv(REPLAY_FILE).unwrap();
    assert!(replay.iter().any(|row| row.version.to_string() == "seed"));
}

#[tokio::test]
async fn a_resume_right_after_a_kill_waits_for_a_start_still_on_its_way() {
    // The case from the field: killed while the start was in flight, resumed at once, the
    // lookup ran before the service had stored it, and the execution was started twice.
    let root = tempfile::tempdir().unwrap();
    let plan = plan();
    let (dir, mut manifest) = create_run(root.path(), &plan, Backend::Local, None).unwrap();
    let custom_id = manifest.executions[0].custom_id.clone();
    manifest.executions[0].state = ExecutionState::StartSent {
        error: None,
        // Sent almost the whole window ago, so the test waits a moment, not 10 s.
        sent_at: Some(Utc::now() - chrono::Duration::milliseconds(9_800)),
    };
    let evolution = Arc::new(Scripted {
        stored_late: Some(custom_id),
        ..Scripted::default()
    });
    let outcome = execute(
        dir,
        manifest,
        &backends(evolution.clone()),
        &fast(),
        &Silent,
    )
    .await
    .unwrap();
    assert!(
        evolution.starts.lock().unwrap().is_empty(),
        "not started again"
    );
    assert_eq!(
        *evolution.lists.lock().unwrap(),
        2,
        "looked up, waited, looked again"
    );
    assert_eq!(
        outcome.manifest.executions[0].state.evolution_id(),
        Some("evo-late")
    );
}
