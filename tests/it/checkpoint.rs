//! Kill -9 in the middle of an evolution, then a restart: of `serve` on the same database, and of
//! `run --backend local` with `run --resume` on the same run directory. The execution continues
//! from its checkpoint and ends exactly as an uninterrupted one, paying again only for the calls
//! that were in flight at the kill.
//!
//! The models come from an upstream inside this test (the simulated model over HTTP) that
//! counts every request it answers, so the calls are counted across the processes. A local run
//! reaches it through `GEPA_LAB_LOCAL_UPSTREAM`.
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::routing::{get, post};
use axum::{Json, Router};
use gepa_lab::engine::{DEFAULT_PARALLEL_CALLS, IterationRecord};
use gepa_lab::evolution::wire::{HistoryRecord, Status};
use gepa_lab::evolution::{Evolution, HttpEvolution};
use gepa_lab::inference::wire::{ChatRequest, ChatResponse};
use gepa_lab::inference::{Inference, SimModel};
use rand::{Rng, SeedableRng};

use gepa_lab::store::{HISTORY_FILE, HistoryRow, REPLAY_FILE, ReplayRow, RunDir};

use crate::common::{Serve, root};
use crate::evolution::{finished, sentiment};

const KEY: &str = "checkpoint-key";

/// The simulated model behind HTTP, keeping every chat request it answers.
pub(crate) struct Upstream {
    pub(crate) url: String,
    requests: Arc<Mutex<Vec<ChatRequest>>>,
}

impl Upstream {
    /// The requests answered since the last `take`, which forgets them.
    pub(crate) fn take(&self) -> Vec<ChatRequest> {
        std::mem::take(&mut *self.requests.lock().unwrap())
    }

    /// How many requests were answered since the last `take`.
    pub(crate) fn count(&self) -> u64 {
        self.requests.lock().unwrap().len() as u64
    }

    /// Waits until the upstream has received `k` requests since the last `take`.
    fn wait_for(&self, k: u64) {
        let began = Instant::now();
        while self.count() < k {
            assert!(
                began.elapsed() < Duration::from_secs(60),
                "k {k} never reached"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

/// The request count at which kill number `moment` of `moments` happens: one in each
/// `1/moments` of a run of `whole_calls` calls, at a random place within it.
fn kill_point(
    rng: &mut rand_chacha::ChaCha8Rng,
    whole_calls: u64,
    moment: u64,
    moments: u64,
) -> u64 {
    let share = whole_calls / moments;
    1 + moment * share + rng.random_range(0..share.max(1))
}

/// The simulated model configured by `sim` (see `SimConfig`), served over HTTP.
pub(crate) fn upstream(runtime: &tokio::runtime::Runtime, sim: &str) -> Upstream {
    #[derive(Clone)]
    struct Shared {
        sim: Arc<SimModel>,
        requests: Arc<Mutex<Vec<ChatRequest>>>,
    }
    async fn models(State(shared): State<Shared>) -> Json<serde_json::Value> {
        let models = shared.sim.models().await.unwrap_or_default();
        Json(serde_json::json!({ "data": models }))
    }
    async fn chat(
        State(shared): State<Shared>,
        Json(request): Json<ChatRequest>,
    ) -> Json<ChatResponse> {
        shared.requests.lock().unwrap().push(request.clone());
        Json(
            shared
                .sim
                .chat(&request)
                .await
                .expect("the simulated model answers"),
        )
    }
    let requests = Arc::new(Mutex::new(Vec::new()));
    let shared = Shared {
        // Deterministic: the same request gets the same answer, in any process.
        sim: Arc::new(SimModel::new(sim.parse().unwrap())),
        requests: Arc::clone(&requests),
    };
    let app = Router::new()
        .route("/v1/models", get(models))
        .route("/v1/chat/completions", post(chat))
        .with_state(shared);
    let listener = runtime
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("address"));
    runtime.spawn(async move { axum::serve(listener, app).await });
    Upstream { url, requests }
}

/// What an execution ended with.
#[derive(Debug, PartialEq)]
struct Ended {
    status: Status,
    budget_used: Option<f64>,
    history: Vec<HistoryRecord>,
    iterations: Vec<IterationRecord>,
}

async fn ended(client: &HttpEvolution, id: &str) -> Ended {
    let execution = finished(client, id).await;
    let history = client.prompts(id, Some(1), Some(1000)).await.unwrap();
    let iterations = client.iterations(id, 0).await.unwrap().expect("serve says");
    Ended {
        status: execution.status,
        budget_used: execution.budget_used,
        history,
        iterations,
    }
}

fn calls_recorded(db: &std::path::Path, id: &str) -> u64 {
    let conn = rusqlite::Connection::open(db).expect("open db");
    conn.query_row(
        "SELECT COUNT(*) FROM evolution_calls WHERE evolution_id = ?1",
        [id],
        |row| row.get(0),
    )
    .expect("count calls")
}

#[test]
fn serve_killed_at_ten_moments_continues_each_evolution_and_pays_only_for_calls_in_flight() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let upstream = upstream(&runtime, "model=local-text,seed=3,latency_ms=15");
    let start = sentiment(80, 4, 6);
    let serve_with =
        |dir: tempfile::TempDir| Serve::start_in(dir, &[upstream.url.as_str()], &[KEY], &[]);

    let serve = serve_with(tempfile::tempdir().unwrap());
    let client = serve.evolution(Some(KEY));
    let whole = runtime.block_on(async {
        let id = client.start(&start).await.unwrap();
        ended(&client, &id).await
    });
    let whole_calls = upstream.take().len() as u64;
    assert_eq!(whole.status, Status::Completed, "{}", serve.log());
    assert!(whole.history.len() > 1, "{whole:?}");
    assert!(whole.iterations.len() > 3, "{whole:?}");
    drop(serve);

    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(20261123);
    let moments = 10;
    let mut in_flight_total = 0;
    for moment in 0..moments {
        let k = kill_point(&mut rng, whole_calls, moment, moments);
        let serve = serve_with(tempfile::tempdir().unwrap());
        let client = serve.evolution(Some(KEY));
        let id = runtime.block_on(client.start(&start)).unwrap();
        upstream.wait_for(k);
        let db = serve.db.clone();
        let dir = serve.kill();
        // A request serve sent just before it died may still be on its way to the upstream:
        // it counts as sent by the killed process, not as one made after the restart.
        std::thread::sleep(Duration::from_millis(300));
        let sent = upstream.take().len() as u64;
        let recorded = calls_recorded(&db, &id);
        assert!(
            recorded <= sent,
            "k {k}: {recorded} recorded of {sent} sent"
        );
        let in_flight = sent - recorded;
        // At most serve's parallel task calls, or one reflection.
        assert!(
            in_flight <= DEFAULT_PARALLEL_CALLS as u64,
            "k {k}: {sent} sent, {recorded} recorded"
        );
        in_flight_total += in_flight;

        let serve = serve_with(dir);
        let client = serve.evolution(Some(KEY));
        let after = runtime.block_on(ended(&client, &id));
        let made = upstream.take().len() as u64;
        assert_eq!(after, whole, "k {k}\n{}", serve.log());
        assert_eq!(made, whole_calls - recorded, "k {k}: paid twice or skipped");
        assert_eq!(sent + made, whole_calls + in_flight, "k {k}");
    }
    eprintln!(
        "{moments} kills of a {whole_calls}-call evolution: {in_flight_total} calls in flight at \
         the kills were paid again, nothing else"
    );
}

/// What a local run left in its run directory that must not depend on a kill: the history
/// (with per-row Pareto scores), every iteration record, and every replay answer and score.
#[derive(Debug, PartialEq)]
struct LocalOutcome {
    history: Vec<(u32, String, String, Option<Vec<f64>>)>,
    iterations: Vec<IterationRecord>,
    replay: Vec<(String, usize, u32, String, String)>,
}

fn local_outcome(dir: &RunDir) -> LocalOutcome {
    let manifest = dir.read_manifest().expect("run.json");
    assert!(manifest.finished_at.is_some(), "the run finished");
    assert!(manifest.simulated, "labelled simulated");
    let history: Vec<HistoryRow> = dir.read_csv(HISTORY_FILE).expect("history.csv");
    let replay: Vec<ReplayRow> = dir.read_csv(REPLAY_FILE).expect("replay.csv");
    LocalOutcome {
        history: history
            .into_iter()
            .map(|h| (h.generation, h.score.to_string(), h.prompt, h.pareto_scores))
            .collect(),
        iterations: dir
            .read_iterations()
            .expect("iterations.jsonl")
            .into_iter()
            .map(|row| row.record)
            .collect(),
        replay: replay
            .into_iter()
            .map(|r| {
                (
                    r.version.to_string(),
                    r.row,
                    r.sample,
                    r.output,
                    r.score.to_string(),
                )
            })
            .collect(),
    }
}

/// Calls whose result the run directory holds: the engine's (`engine.jsonl`) and the replay's
/// (`cache.jsonl`). A torn last line holds none.
fn calls_kept(dir: &Path) -> u64 {
    let lines = |name: &str| -> Vec<serde_json::Value> {
        std::fs::read_to_string(dir.join(name))
            .unwrap_or_default()
            .lines()
            .filter_map(|line| serde_json::from_str(line).ok())
            .collect()
    };
    let engine_calls = lines("engine.jsonl")
        .iter()
        .filter(|line| line["change"] == "call")
        .count();
    (engine_calls + lines("cache.jsonl").len()) as u64
}

/// The one run directory of experiment `name` under `out`.
pub(crate) fn only_run(out: &Path, name: &str) -> PathBuf {
    let mut runs = std::fs::read_dir(out.join(name)).expect("the experiment folder");
    let run = runs.next().expect("a run").expect("readable").path();
    assert!(runs.next().is_none(), "one run");
    run
}

/// `gepa-lab ARGS` with the local backend's models (and the reflection model) at `upstream`,
/// its output captured.
fn local_command(upstream: &Upstream, args: &[&std::ffi::OsStr]) -> Command {
    let mut command = crate::common::command();
    command
        .args(args)
        .env("GEPA_LAB_LOCAL_UPSTREAM", &upstream.url)
        .env("GEPA_LAB_REFLECTION_MODEL", "local")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    command
}

/// `run` of the kill experiment into `out`, on the local backend at `upstream`.
fn start_local_kill(upstream: &Upstream, out: &Path) -> Command {
    let experiment = root().join("tests/fixtures/run_experiments/local_kill.toml");
    local_command(
        upstream,
        &[
            "run".as_ref(),
            experiment.as_os_str(),
            "--backend".as_ref(),
            "local".as_ref(),
            "--yes".as_ref(),
            // The same seed for every run, so that each resumed run can equal the whole one.
            "--seed".as_ref(),
            "20261124".as_ref(),
            "--out".as_ref(),
            out.as_os_str(),
        ],
    )
}

#[test]
fn a_local_run_killed_at_ten_moments_resumes_and_pays_only_for_calls_in_flight() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let upstream = upstream(&runtime, "model=local,seed=1,latency_ms=10");
    let gepa_lab = |args: &[&std::ffi::OsStr]| local_command(&upstream, args);
    let start = |out: &Path| start_local_kill(&upstream, out);
    let finished = |mut command: Command| {
        let output = command.output().expect("gepa-lab runs");
        assert!(
            output.status.success(),
            "exit {:?}: {}",
            output.status.code(),
            String::from_utf8_lossy(&output.stderr)
        );
    };

    let whole_out = tempfile::tempdir().unwrap();
    finished(start(whole_out.path()));
    let whole_calls = upstream.take().len() as u64;
    let whole = local_outcome(&RunDir::open(&only_run(whole_out.path(), "local-kill")).unwrap());
    let accepted = whole
        .iterations
        .iter()
        .filter(|r| matches!(r.outcome(), gepa_lab::engine::Outcome::Accepted { .. }))
        .count();
    assert!(accepted >= 2, "a search worth resuming: {whole:?}");
    assert!(!whole.replay.is_empty());

    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(20261124);
    let moments = 10;
    let mut in_flight_total = 0;
    for moment in 0..moments {
        let k = kill_point(&mut rng, whole_calls, moment, moments);
        let out = tempfile::tempdir().unwrap();
        let mut child = start(out.path()).spawn().expect("gepa-lab starts");
        upstream.wait_for(k);
        child.kill().expect("SIGKILL");
        child.wait().expect("reaped");
        // A request sent just before the kill may still be on its way to the upstream.
        std::thread::sleep(Duration::from_millis(300));
        let sent = upstream.take().len() as u64;
        let run = only_run(out.path(), "local-kill");
        let kept = calls_kept(&run);
        assert!(kept <= sent, "k {k}: {kept} kept of {sent} sent");
        let in_flight = sent - kept;
        // At most the engine's parallel task calls, one reflection, or the replay's requests
        // in flight (the example's `concurrency`, below the engine's).
        assert!(
            in_flight <= DEFAULT_PARALLEL_CALLS as u64,
            "k {k}: {sent} sent, {kept} kept"
        );
        in_flight_total += in_flight;

        finished(gepa_lab(&[
            "run".as_ref(),
            "--resume".as_ref(),
            run.as_os_str(),
        ]));
        let made = upstream.take().len() as u64;
        let after = local_outcome(&RunDir::open(&run).unwrap());
        assert_eq!(after, whole, "k {k}");
        assert_eq!(made, whole_calls - kept, "k {k}: paid twice or skipped");
        assert_eq!(sent + made, whole_calls + in_flight, "k {k}");
    }
    eprintln!(
        "{moments} kills of a local run of {whole_calls} calls ({accepted} candidates accepted): \
         {in_flight_total} calls in flight at the kills were paid again, nothing else"
    );
}

#[test]
fn a_run_another_process_is_writing_is_not_resumed_until_that_process_ends() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    // Slow answers, so that the first process is still writing when the second comes.
    let upstream = upstream(&runtime, "model=local,seed=1,latency_ms=100");
    let out = tempfile::tempdir().unwrap();
    let mut first = start_local_kill(&upstream, out.path())
        .spawn()
        .expect("gepa-lab starts");
    upstream.wait_for(1);
    let run = only_run(out.path(), "local-kill");
    let resume = || {
        local_command(
            &upstream,
            &["run".as_ref(), "--resume".as_ref(), run.as_os_str()],
        )
    };
    let second = resume().output().expect("gepa-lab runs");
    let stderr = String::from_utf8_lossy(&second.stderr);
    assert_eq!(second.status.code(), Some(3), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "another gepa-lab process (pid {}) is writing this run",
            first.id()
        )),
        "{stderr}"
    );
    assert!(
        !stderr.contains("resuming run"),
        "refused before it wrote anything: {stderr}"
    );
    first.kill().expect("SIGKILL");
    first.wait().expect("reaped");
    // The kill ended the lock with the process: the resume goes on to the end.
    let resumed = resume().output().expect("gepa-lab runs");
    assert!(
        resumed.status.success(),
        "exit {:?}: {}",
        resumed.status.code(),
        String::from_utf8_lossy(&resumed.stderr)
    );
}
