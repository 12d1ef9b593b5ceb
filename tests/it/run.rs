//! `gepa-lab run` end to end against `serve` on 127.0.0.1 with the simulated model: a complete
//! run directory, resume after SIGKILL at each phase without a second start or a second answer,
//! and the failures a real service has.
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use gepa_lab::evolution::{Evolution, EvolutionConfig, HttpEvolution};
use gepa_lab::http::Secret;
use gepa_lab::store::{ExecutionState, HistoryRow, ReplayRow, RunDir};

use crate::common::{Serve, output_within, root};

pub const KEY: &str = "run-test-key";

/// A run seed with which the two-variant experiment, against `serve` with the simulated model
/// of seed 4, accepts evolved prompts: tests that need evolved versions pass it, so that the
/// engine's choices are the same in every run instead of a new random draw each time.
const EVOLVING_SEED: &str = "1";

fn experiment() -> PathBuf {
    root().join("tests/fixtures/run_experiments/two_variants.toml")
}

/// The two-variant experiment written to `dir/name` with its dataset path made absolute and
/// each (from, to) replacement made.
pub fn edited_experiment(dir: &Path, name: &str, replacements: &[(&str, &str)]) -> PathBuf {
    let dataset = root().join("tests/fixtures/data/tiny.csv");
    let mut text = std::fs::read_to_string(experiment())
        .unwrap()
        .replace("../data/tiny.csv", &dataset.display().to_string());
    for (from, to) in replacements {
        text = text.replace(from, to);
    }
    let file = dir.join(name);
    std::fs::write(&file, text).unwrap();
    file
}

/// Fails the test with the command's stderr unless it exited 0.
pub fn assert_succeeded(output: &Output) {
    assert!(
        output.status.success(),
        "exit {:?}: {}",
        output.status.code(),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// The two-variant experiment with each (from, to) replacement made, run against `serve` to
/// its end: the folder holding its run directory, and what the command printed.
fn run_edited(serve: &Serve, replacements: &[(&str, &str)]) -> (tempfile::TempDir, Output) {
    let out = tempfile::tempdir().unwrap();
    let file = edited_experiment(out.path(), "edited.toml", replacements);
    let output = run_command(serve, out.path(), &[file.to_str().unwrap()])
        .output()
        .expect("run");
    (out, output)
}

/// [`run_command`] resuming the run in `dir`.
fn resume_command(serve: &Serve, out: &Path, dir: &RunDir) -> Command {
    run_command(serve, out, &["--resume", dir.path.to_str().unwrap()])
}

/// `gepa-lab run --backend URL --yes` with fast polling, writing under `out`.
pub fn run_command(serve: &Serve, out: &Path, extra: &[&str]) -> Command {
    let mut command = crate::common::command();
    command
        .current_dir(root())
        .env("GEPA_LAB_EVOLUTION_KEY", KEY)
        .env("GEPA_LAB_INFERENCE_KEY", KEY)
        .args([
            "run",
            "--backend",
            &serve.url,
            "--yes",
            "--poll-interval",
            "0.1",
            "--out",
        ])
        .arg(out)
        .args(extra)
        .stdin(Stdio::null());
    command
}

/// Runs `file` against `serve` to its end, with the run directory under `out`: the directory and
/// its manifest.
fn run_to_end(serve: &Serve, out: &Path, file: &Path) -> (RunDir, gepa_lab::store::RunManifest) {
    let output = run_command(serve, out, &[file.to_str().unwrap()])
        .output()
        .expect("run");
    assert_succeeded(&output);
    let dir = run_dir(out);
    let manifest = dir.read_manifest().unwrap();
    (dir, manifest)
}

pub fn run_dir(out: &Path) -> RunDir {
    let experiment = out.join("two-variants");
    let entry = std::fs::read_dir(&experiment)
        .expect("the experiment folder exists")
        .next()
        .expect("one run directory")
        .expect("readable");
    RunDir::open(&entry.path()).expect("a run directory")
}

fn events(dir: &RunDir) -> String {
    std::fs::read_to_string(dir.file("events.jsonl")).unwrap_or_default()
}

/// Starts `run` and kills it (SIGKILL) once `events.jsonl` holds `marker`.
fn kill_when(serve: &Serve, out: &Path, marker: &str) {
    let file = experiment();
    kill_run_when(serve, out, &file, Duration::from_secs(60), |events| {
        events.contains(marker)
    });
}

/// Starts `run` of `file` (an experiment named `two-variants`) with every answer logged, so that
/// a kill can be aimed between two of them, and kills it (SIGKILL) once `seen` holds of its
/// `events.jsonl`, or after `patience`.
fn kill_run_when(
    serve: &Serve,
    out: &Path,
    file: &Path,
    patience: Duration,
    seen: impl Fn(&str) -> bool,
) {
    let args = [
        "--answer-events",
        "all",
        "--seed",
        "1",
        file.to_str().unwrap(),
    ];
    let mut child: Child = run_command(serve, out, &args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn run");
    let deadline = Instant::now() + patience;
    loop {
        let events = std::fs::read_dir(out.join("two-variants"))
            .ok()
            .and_then(|mut entries| entries.next())
            .and_then(Result::ok)
            .map(|entry| {
                std::fs::read_to_string(entry.path().join("events.jsonl")).unwrap_or_default()
            })
            .unwrap_or_default();
        if seen(&events) || Instant::now() > deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    child.kill().expect("SIGKILL");
    child.wait().expect("reaped");
}

fn evolution_client(serve: &Serve) -> HttpEvolution {
    HttpEvolution::new(EvolutionConfig::new(
        serve.url.clone(),
        Some(Secret::new(KEY)),
    ))
    .unwrap()
}

/// How many executions the server holds for each customId.
fn starts_per_custom_id(serve: &Serve) -> std::collections::BTreeMap<String, usize> {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let client = evolution_client(serve);
    let executions = runtime
        .block_on(client.list(Some(1), Some(50)))
        .expect("list executions");
    let mut counts = std::collections::BTreeMap::new();
    for execution in executions {
        *counts
            .entry(execution.custom_id.unwrap_or_default())
            .or_insert(0) += 1;
    }
    counts
}

/// `iterations.jsonl` numbers each execution's iterations 1, 2, 3 ... once each, and every
/// accepted proposal is the generation of `history.csv` it names. Every generation carries its
/// score on each Pareto row, and their mean is its score. Returns how many iterations there are.
fn assert_iterations_agree_with_history(dir: &RunDir, history: &[HistoryRow]) -> usize {
    let manifest = dir.read_manifest().expect("run.json");
    for row in history {
        let plan = &manifest
            .executions
            .iter()
            .find(|e| e.plan.variant.as_deref().unwrap_or_default() == row.variant)
            .expect("the variant is planned")
            .plan;
        let scores = row
            .pareto_scores
            .as_ref()
            .expect("serve reports per-row scores");
        assert_eq!(scores.len(), plan.dataset.pareto_rows.len(), "{row:?}");
        let mean = scores.iter().sum::<f64>() / scores.len() as f64;
        assert!((mean - row.score).abs() < 1e-9, "{row:?}");
    }
    let rows = dir.read_iterations().expect("iterations.jsonl");
    let ids: std::collections::BTreeSet<&str> =
        rows.iter().map(|row| row.evolution_id.as_str()).collect();
    for id in ids {
        let numbers: Vec<usize> = rows
            .iter()
            .filter(|row| row.evolution_id == id)
            .map(|row| row.record.iteration())
            .collect();
        let expected: Vec<usize> = (1..=numbers.len()).collect();
        assert_eq!(numbers, expected, "{id}");
    }
    for row in &rows {
        if let gepa_lab::engine::Outcome::Accepted { generation } = row.record.outcome() {
            let found = history.iter().find(|h| {
                h.evolution_id == row.evolution_id && h.generation as usize == *generation
            });
            let found = found.unwrap_or_else(|| panic!("g{generation} not in history"));
            assert_eq!(Some(found.prompt.as_str()), row.record.child_prompt());
        }
    }
    rows.len()
}

fn assert_complete(dir: &RunDir) -> (Vec<HistoryRow>, Vec<ReplayRow>) {
    let manifest = dir.read_manifest().expect("run.json");
    assert!(manifest.finished_at.is_some(), "run finished: {manifest:?}");
    assert!(manifest.simulated, "answers came from the simulated model");
    assert_eq!(manifest.executions.len(), 2);
    for execution in &manifest.executions {
        assert!(execution.state.is_finished(), "{execution:?}");
        // Also when a resume recovered the start instead of reading its answer.
        assert!(execution.started_at.is_some(), "{execution:?}");
        assert!(execution.finished_at.is_some(), "{execution:?}");
        assert!(execution.budget_used.is_some(), "{execution:?}");
    }
    let history: Vec<HistoryRow> = dir.read_csv("history.csv").expect("history.csv");
    let replay: Vec<ReplayRow> = dir.read_csv("replay.csv").expect("replay.csv");
    for variant in ["small", "large"] {
        assert!(
            history
                .iter()
                .any(|row| row.variant == variant && row.generation == 0),
            "{variant} has a seed generation"
        );
        // 12 holdout rows for the seed and each evolved version
        let seed_rows = replay
            .iter()
            .filter(|r| r.variant == variant && r.version.to_string() == "seed")
            .count();
        assert_eq!(seed_rows, 12, "{variant}");
    }
    assert!(
        replay.iter().all(|row| row.error.is_empty()),
        "no replay errors"
    );
    (history, replay)
}

#[test]
fn a_two_variant_experiment_runs_to_a_complete_run_directory() {
    let serve = Serve::start(&["sim:seed=4"], &[&format!("{KEY}:6000")]);
    let out = tempfile::tempdir().unwrap();
    let experiment = experiment();
    let args = [experiment.to_str().unwrap(), "--seed", EVOLVING_SEED];
    let output = run_command(&serve, out.path(), &args)
        .output()
        .expect("run");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}\n{}", serve.log());
    let dir = run_dir(out.path());
    let (history, replay) = assert_complete(&dir);
    assert!(history.len() >= 2, "{history:?}");
    assert!(replay.iter().any(|row| row.version.to_string() != "seed"));
    assert!(String::from_utf8_lossy(&output.stdout).contains("SIMULATED"));
    for file in [
        "run.json",
        "events.jsonl",
        "history.csv",
        "replay.csv",
        "cache.jsonl",
        "iterations.jsonl",
    ] {
        assert!(dir.file(file).is_file(), "{file} written");
    }
    // serve's engine reports each iteration; the terminal showed them as they came.
    let iterations = assert_iterations_agree_with_history(&dir, &history);
    assert!(iterations > 0);
    assert!(
        stderr.contains("small: iteration 1 (demonstrations of g0, ")
            && stderr.contains("small: iteration 2 (mutation of g"),
        "{stderr}"
    );
    let starts = starts_per_custom_id(&serve);
    assert_eq!(starts.len(), 2);
    assert!(starts.values().all(|&count| count == 1), "{starts:?}");
}

/// A key the service refuses (401) is told apart by its status, for a start as for a replay
/// request, and the terminal says which keys were sent and where.
#[test]
fn a_refused_key_is_named_whether_the_start_or_the_replay_met_it() {
    let serve = Serve::start(&["sim:seed=4"], &[&format!("{KEY}:6000")]);
    for refused in ["GEPA_LAB_EVOLUTION_KEY", "GEPA_LAB_INFERENCE_KEY"] {
        let out = tempfile::tempdir().unwrap();
        let output = run_command(&serve, out.path(), &[experiment().to_str().unwrap()])
            .env(refused, "not-a-key-serve-knows")
            .output()
            .expect("run");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{refused}: {stderr}");
        assert!(
            stderr.contains(
                "tip: the service refused the API key (401 Unauthorized or 403 Forbidden)"
            ),
            "{refused}: {stderr}"
        );
        assert!(!stderr.contains("not-a-key-serve-knows"), "{stderr}");
    }
}

/// Both keys refused by a `serve` (the command of issue 47): the tip names the serve as where
/// each key went, not the public services; the start's refusal ends the replay before it sends
/// a request with the same key; a resume names the same and stops at its first refusal.
#[test]
fn refused_keys_are_named_where_they_went_and_end_the_replay_at_the_first_refusal() {
    let serve = Serve::start(&["sim:seed=4"], &[&format!("{KEY}:6000")]);
    let out = tempfile::tempdir().unwrap();
    let config = tempfile::tempdir().unwrap();
    let wrong = |command: &mut Command| {
        command
            .env("GEPA_LAB_EVOLUTION_KEY", "wrong")
            .env("GEPA_LAB_INFERENCE_KEY", "wrong")
            .env("GEPA_LAB_CONFIG", config.path().join("config.toml"))
            .output()
            .expect("run")
    };
    let named = format!(
        "Sent: the key in GEPA_LAB_INFERENCE_KEY to the inference API ({url}), the key in \
         GEPA_LAB_EVOLUTION_KEY to the evolution API ({url}).",
        url = serve.url
    );
    let output = wrong(&mut run_command(
        &serve,
        out.path(),
        &[experiment().to_str().unwrap()],
    ));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(5), "{stderr}");
    assert!(stderr.contains(&named), "{stderr}");
    let dir = run_dir(out.path());
    let rows: Vec<ReplayRow> = dir.read_csv("replay.csv").unwrap();
    assert!(!rows.is_empty());
    assert!(
        rows.iter().all(|row| row
            .error
            .starts_with("not sent: the service refused the key (the start")),
        "no replay request went out: {rows:?}"
    );
    let before = dir.read_manifest().unwrap();

    let output = wrong(&mut resume_command(&serve, out.path(), &dir));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(5), "{stderr}");
    assert!(stderr.contains(&named), "on a resume too: {stderr}");
    let rows: Vec<ReplayRow> = dir.read_csv("replay.csv").unwrap();
    // The variants share the seed, so each holdout row is one request.
    let refused: std::collections::BTreeSet<usize> = rows
        .iter()
        .filter(|row| row.error == "401 Unauthorized: invalid API key")
        .map(|row| row.row)
        .collect();
    // replay.concurrency is 2: at most the requests in flight at the first refusal went out.
    assert!((1..=2).contains(&refused.len()), "{rows:?}");
    assert!(
        rows.iter().all(|row| refused.contains(&row.row)
            || row
                .error
                .starts_with("not sent: the service refused the key")),
        "{rows:?}"
    );
    let after = dir.read_manifest().unwrap();
    let states = |m: &gepa_lab::store::RunManifest| -> Vec<ExecutionState> {
        m.executions.iter().map(|e| e.state.clone()).collect()
    };
    assert_eq!(states(&after), states(&before), "every state kept");
}

/// Kill during a phase, resume, and check that nothing was started or answered twice.
fn kill_and_resume(marker: &str) {
    let serve = Serve::start(&["sim:seed=4,latency_ms=20"], &[&format!("{KEY}:6000")]);
    let out = tempfile::tempdir().unwrap();
    kill_when(&serve, out.path(), marker);
    let dir = run_dir(out.path());
    assert!(events(&dir).contains(marker), "killed after {marker}");
    // A kill that came after the run's end would leave nothing for the resume to do.
    assert!(
        !events(&dir).contains("\"event\":\"run_finished\""),
        "the kill landed before the run finished"
    );
    assert_eq!(dir.read_manifest().unwrap().finished_at, None);
    // What a kill between writing a temporary file and renaming it leaves.
    std::fs::write(dir.file(".gepa-lab-tmpK1ll3d"), "half of run.json").unwrap();
    let output = resume_command(&serve, out.path(), &dir)
        .output()
        .expect("resume");
    assert!(
        output.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&output.stderr),
        serve.log()
    );
    let (history, replay) = assert_complete(&dir);
    assert!(
        !dir.file(".gepa-lab-tmpK1ll3d").exists(),
        "the leftover is removed"
    );
    assert_iterations_agree_with_history(&dir, &history);
    let starts = starts_per_custom_id(&serve);
    assert_eq!(starts.len(), 2, "{starts:?}");
    assert!(
        starts.values().all(|&count| count == 1),
        "exactly one start per variant: {starts:?}"
    );
    let distinct_requests = distinct_cached(&dir);
    let (requests, _, _) = serve.usage_of_key_with_rpm(6000);
    // A request in flight at the kill may have been answered by the server without reaching the
    // cache: at most `concurrency` (2) such answers are paid twice, never a cached one.
    assert!(
        requests as usize <= distinct_requests + 2,
        "server answered {requests} chat requests for {distinct_requests} distinct replay requests"
    );
    assert!(!replay.is_empty());
}

/// How many answers `cache.jsonl` holds, failing when one was asked and kept twice (a resume
/// that asked again what was answered).
fn distinct_cached(dir: &RunDir) -> usize {
    let cached = std::fs::read_to_string(dir.file("cache.jsonl")).unwrap();
    let keys: Vec<String> = cached
        .lines()
        .map(|line| serde_json::from_str::<serde_json::Value>(line).unwrap()["key"].to_string())
        .collect();
    let distinct: std::collections::HashSet<&String> = keys.iter().collect();
    assert_eq!(distinct.len(), keys.len(), "no answer asked and kept twice");
    distinct.len()
}

#[test]
fn resume_after_a_kill_right_after_the_start_request() {
    kill_and_resume("\"event\":\"start_sending\"");
}

#[test]
fn resume_after_a_kill_during_polling() {
    kill_and_resume("\"event\":\"poll\"");
}

#[test]
fn resume_after_a_kill_during_replay() {
    kill_and_resume("\"event\":\"answer\"");
}

#[test]
fn failures_are_recorded_and_the_run_completes() {
    // 30 requests a window and no client pacing: the run's requests past the 30th of a window
    // meet 429s and wait for their Retry-After (a 5-second window, so that the test waits
    // seconds, not minutes). A variant whose budget cannot score the seed fails; a replay model
    // no node serves answers 503.
    let serve = Serve::start_with(
        &["sim:seed=4"],
        &[&format!("{KEY}:30")],
        &["--rate-window", "5"],
    );
    spend_the_window(&serve, 30);
    let (out, output) = run_edited(
        &serve,
        &[
            (
                "models = [\"sim-text\"]",
                "models = [\"no-such-model\", \"sim-text\"]",
            ),
            ("evolution = { budget = 20 }", "evolution = { budget = 2 }"),
        ],
    );
    assert_eq!(
        output.status.code(),
        Some(5),
        "a failed execution exits 5: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let dir = run_dir(out.path());
    let manifest = dir.read_manifest().unwrap();
    assert!(manifest.finished_at.is_some());
    let small = manifest.execution("small").unwrap();
    assert!(
        matches!(&small.state, ExecutionState::Failed { reason, .. } if !reason.is_empty()),
        "failed, with the reason kept: {small:?}"
    );
    assert!(manifest.execution("large").unwrap().state.is_finished());
    let replay: Vec<ReplayRow> = dir.read_csv("replay.csv").unwrap();
    let missing: Vec<&ReplayRow> = replay
        .iter()
        .filter(|r| r.model == "no-such-model")
        .collect();
    assert!(
        !missing.is_empty() && missing.iter().all(|r| r.error.contains("503")),
        "{missing:?}"
    );
    let answered: Vec<&ReplayRow> = replay.iter().filter(|r| r.model == "sim-text").collect();
    assert!(
        !answered.is_empty() && answered.iter().all(|r| r.error.is_empty()),
        "{answered:?}"
    );
    let (_, rate_limited, _) = serve.usage_of_key_with_rpm(30);
    assert!(rate_limited > 0, "the storm happened");
}

/// Sends `limit` chat requests with the test key, so that the key's window is full when the run
/// starts and its first requests meet 429 however slowly the machine sends them. Left to the
/// run alone, the storm needed 31 of its 48 requests within one window: a busy CI machine once
/// sent fewer, and the test failed with nothing wrong in the client.
fn spend_the_window(serve: &Serve, limit: u32) {
    use gepa_lab::inference::{ChatMessage, ChatRequest, Inference};
    let client = serve.client(Some(KEY));
    let request = ChatRequest::new("sim-text", vec![ChatMessage::user("hi")]);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        for _ in 0..limit {
            client
                .chat(&request)
                .await
                .expect("a request within the limit");
        }
    });
    assert_eq!(
        client.stats().rate_limited,
        0,
        "the window was not yet full"
    );
}

/// A service that leaves out `prompt` and ignores `page` (every history page is the same full
/// page), with chat answered by the simulated model.
fn odd_service() -> (String, tokio::runtime::Runtime) {
    use axum::routing::{get, post};
    use axum::{Json, Router};
    use gepa_lab::inference::{ChatRequest, Inference, SimModel};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, Ordering};

    let runtime = tokio::runtime::Runtime::new().unwrap();
    let polls = Arc::new(AtomicU32::new(0));
    let sim = Arc::new(SimModel::new("model=sim-text,seed=4".parse().unwrap()));
    let history: Vec<serde_json::Value> = (0..50)
        .map(|generation| {
            serde_json::json!({"generation": generation, "score": f64::from(generation) / 100.0,
                "prompt": format!("Review: {{review}}\nAnswer with one of: positive, negative ({generation})")})
        })
        .collect();
    let app = Router::new()
        .route(
            "/api/v0/gepa/start_execution",
            post(|| async { Json(serde_json::json!({"evolutionId": "odd-1"})) }),
        )
        .route(
            "/api/v0/gepa/get_single_execution/{id}",
            get(move || {
                let polls = polls.clone();
                async move {
                    let status = if polls.fetch_add(1, Ordering::SeqCst) < 2 {
                        "in_progress"
                    } else {
                        "completed"
                    };
                    Json(serde_json::json!({"status": status, "customId": "x", "budget": 30}))
                }
            }),
        )
        .route(
            "/api/v0/gepa/get_all_executions",
            get(|| async { Json(serde_json::json!({"executions": []})) }),
        )
        .route(
            "/api/v0/gepa/get_execution_prompts",
            get(move || {
                let history = history.clone();
                async move { Json(serde_json::json!({"prompts": history})) }
            }),
        )
        .route(
            "/v1/chat/completions",
            post(move |Json(request): Json<ChatRequest>| {
                let sim = sim.clone();
                async move { Json(sim.chat(&request).await.expect("sim answers")) }
            }),
        );
    let listener = runtime
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    runtime.spawn(async move { axum::serve(listener, app).await });
    (url, runtime)
}

#[test]
fn a_missing_prompt_object_and_a_repeated_history_page_are_tolerated() {
    let (url, _runtime) = odd_service();
    let out = tempfile::tempdir().unwrap();
    let file = out.path().join("single.toml");
    let text = std::fs::read_to_string(experiment()).unwrap();
    let text = text[..text.find("[[variants]]").unwrap()].replace(
        "../data/tiny.csv",
        &root()
            .join("tests/fixtures/data/tiny.csv")
            .display()
            .to_string(),
    );
    std::fs::write(&file, text).unwrap();
    let output = crate::common::command()
        .current_dir(root())
        .env("GEPA_LAB_EVOLUTION_KEY", KEY)
        .env("GEPA_LAB_INFERENCE_KEY", KEY)
        .args([
            "run",
            "--backend",
            &url,
            "--yes",
            "--poll-interval",
            "0.05",
            "--out",
        ])
        .arg(out.path())
        .arg(&file)
        .output()
        .expect("run");
    assert_succeeded(&output);
    let dir = run_dir(out.path());
    let events = events(&dir);
    assert!(
        events.contains("\"repeated_page\":true"),
        "the repeated page was noticed"
    );
    let history: Vec<HistoryRow> = dir.read_csv("history.csv").unwrap();
    assert_eq!(
        history.len(),
        50,
        "one record per generation, the repeat dropped"
    );
    let replay: Vec<ReplayRow> = dir.read_csv("replay.csv").unwrap();
    // seed + the two best generations (49 and 48)
    let versions: std::collections::BTreeSet<String> =
        replay.iter().map(|r| r.version.to_string()).collect();
    assert_eq!(versions, ["g48", "g49", "seed"].map(String::from).into());
}

#[test]
fn an_unfinished_run_is_offered_and_the_score_gate_sets_the_exit_status() {
    let serve = Serve::start(&["sim:seed=4,latency_ms=20"], &[&format!("{KEY}:6000")]);
    let out = tempfile::tempdir().unwrap();
    kill_when(&serve, out.path(), "\"event\":\"poll\"");
    let dir = run_dir(out.path());

    let again = run_command(&serve, out.path(), &[experiment().to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(again.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&again.stderr);
    assert!(
        stderr.contains(&format!("gepa-lab run --resume {}", dir.path.display())),
        "{stderr}"
    );

    let gated = run_command(
        &serve,
        out.path(),
        &["--resume", dir.path.to_str().unwrap(), "--fail-under", "1"],
    )
    .output()
    .unwrap();
    assert_eq!(
        gated.status.code(),
        Some(4),
        "{}",
        String::from_utf8_lossy(&gated.stderr)
    );
    assert!(String::from_utf8_lossy(&gated.stderr).contains("--fail-under 1: missed"));
    let passed = run_command(
        &serve,
        out.path(),
        &["--resume", dir.path.to_str().unwrap(), "--fail-under", "0"],
    )
    .output()
    .unwrap();
    assert_eq!(
        passed.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&passed.stderr)
    );
}

#[test]
fn a_resume_while_the_service_has_lost_the_executions_keeps_every_generation_and_answer() {
    let serve = Serve::start(&["sim:seed=4,latency_ms=20"], &[&format!("{KEY}:6000")]);
    let out = tempfile::tempdir().unwrap();
    let experiment = experiment();
    let args = [experiment.to_str().unwrap(), "--seed", EVOLVING_SEED];
    let output = run_command(&serve, out.path(), &args)
        .output()
        .expect("run");
    assert!(output.status.success(), "{}", serve.log());
    let dir = run_dir(out.path());
    let (history, replay) = assert_complete(&dir);
    assert!(
        replay.iter().any(|row| row.version.to_string() != "seed"),
        "evolved versions were replayed, so there is something to lose"
    );
    // Another serve knows none of these executions: every history request fails (404).
    let stranger = Serve::start(&["sim:seed=4,latency_ms=20"], &[&format!("{KEY}:6000")]);
    let output = resume_command(&stranger, out.path(), &dir)
        .output()
        .expect("resume");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(3), "{stderr}");
    assert!(
        stderr.contains("the history of 2 execution(s) could not be fetched"),
        "{stderr}"
    );
    let (history_after, replay_after) = assert_complete(&dir);
    assert_eq!(history_after, history, "history.csv never shrinks");
    assert_eq!(replay_after, replay, "replay.csv keeps every answer");
    let (requests, _, _) = stranger.usage_of_key_with_rpm(6000);
    assert_eq!(requests, 0, "every answer came from the cache");
}

#[test]
fn a_failed_grade_is_an_error_left_out_of_every_mean_not_a_zero() {
    // For about one grading request in two the judge model always answers against the grade's
    // schema (serve's second try and the client's retries get the same), so about half the
    // grades fail.
    let serve = Serve::start(
        &[
            "sim:seed=4,latency_ms=5",
            "sim:model=judge-sim,broken_schema_every=2",
        ],
        &[&format!("{KEY}:6000")],
    );
    let out = tempfile::tempdir().unwrap();
    let experiment = root().join("tests/fixtures/run_experiments/judged.toml");
    let output = run_command(&serve, out.path(), &[experiment.to_str().unwrap()])
        .output()
        .expect("run");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let experiment_dir = out.path().join("judged");
    let entry = std::fs::read_dir(&experiment_dir)
        .expect("a run directory")
        .next()
        .unwrap()
        .unwrap();
    let dir = RunDir::open(&entry.path()).unwrap();
    let replay: Vec<ReplayRow> = dir.read_csv("replay.csv").expect("replay.csv");
    let ungraded: Vec<&ReplayRow> = replay
        .iter()
        .filter(|row| row.error.starts_with("judge: "))
        .collect();
    let graded: Vec<&ReplayRow> = replay.iter().filter(|row| row.error.is_empty()).collect();
    assert!(
        !ungraded.is_empty() && !graded.is_empty(),
        "some grades failed and some did not: {replay:?}\n{stdout}\n{stderr}"
    );
    for row in &ungraded {
        assert!(!row.output.is_empty(), "the answer itself is kept: {row:?}");
        assert_eq!(row.feedback, "not graded");
    }
    // The report's means rest on the graded rows only.
    let results: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.file("results.json")).unwrap()).unwrap();
    let seed = results["versions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["label"] == "seed")
        .expect("the seed");
    let score = &seed["scores"][0];
    let graded_seed: Vec<f64> = graded
        .iter()
        .filter(|row| row.version.to_string() == "seed")
        .map(|row| row.score)
        .collect();
    let mean = graded_seed.iter().sum::<f64>() / graded_seed.len() as f64;
    assert!(
        (score["mean"].as_f64().unwrap() - mean).abs() < 1e-9,
        "{score} vs {mean}"
    );
    assert_eq!(
        score["errors"].as_u64().unwrap() as usize,
        ungraded
            .iter()
            .filter(|r| r.version.to_string() == "seed")
            .count(),
        "{score}"
    );
}

#[test]
fn numeric_options_out_of_range_are_usage_errors_not_panics_or_hangs() {
    let experiment = experiment();
    let file = experiment.to_str().unwrap();
    for (option, value, says) in [
        ("--fail-under", "nan", "expected a finite number"),
        ("--fail-under", "1.5", "must be from 0 to 1"),
        ("--max-credits", "nan", "expected a finite number"),
        ("--timeout", "1e20", "at most 2592000 seconds"),
        ("--poll-interval", "1e18", "at most 2592000 seconds"),
        ("--poll-interval", "1e300", "at most 2592000 seconds"),
        ("--timeout", "0", "must be above 0"),
    ] {
        let output = crate::common::gepa_lab(&["run", file, "--backend", "local", option, value]);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{option} {value}: {stderr}");
        assert!(
            stderr.contains(option) && stderr.contains(value) && stderr.contains(says),
            "{option} {value}: {stderr}"
        );
    }
}

#[test]
fn a_run_whose_replay_answers_all_failed_exits_6_unless_allowed() {
    let serve = Serve::start(&["sim:seed=4"], &[&format!("{KEY}:6000")]);
    // No node serves this model: every replay answer is a 503.
    let (out, output) = run_edited(
        &serve,
        &[("models = [\"sim-text\"]", "models = [\"no-such-model\"]")],
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(6), "{stderr}");
    let replay: Vec<ReplayRow> = run_dir(out.path()).read_csv("replay.csv").unwrap();
    assert!(!replay.is_empty() && replay.iter().all(|row| !row.error.is_empty()));
    assert!(
        stderr.contains(&format!(
            "{} of {} replay answers are missing",
            replay.len(),
            replay.len()
        )),
        "{stderr}"
    );
    let dir = run_dir(out.path());
    let allowed = run_command(
        &serve,
        out.path(),
        &["--resume", dir.path.to_str().unwrap(), "--allow-missing"],
    )
    .output()
    .expect("resume");
    assert_eq!(
        allowed.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&allowed.stderr)
    );
}

#[test]
fn a_missing_file_is_the_first_thing_said_and_a_typo_gets_a_suggestion() {
    let output = crate::common::gepa_lab(&["run", "missing.toml"]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.starts_with("missing.toml:1:1: error[file-read]: cannot read the experiment file"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("keys"),
        "nothing about backends first: {stderr}"
    );

    let output = crate::common::gepa_lab(&["rnu", "experiments/support_tickets.toml"]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("unrecognized subcommand 'rnu'")
            && stderr.contains("tip: did you mean `gepa-lab run`?"),
        "{stderr}"
    );
}

#[test]
fn resume_without_backend_goes_on_on_the_recorded_backend_and_keeps_its_states() {
    // The case from the field: `run --resume DIR` with no --backend and no evolution key ran
    // locally, then marked serve's completed executions failed.
    let serve = Serve::start(&["sim:seed=4"], &[&format!("{KEY}:6000")]);
    let out = tempfile::tempdir().unwrap();
    let output = run_command(&serve, out.path(), &[experiment().to_str().unwrap()])
        .output()
        .expect("run");
    assert_succeeded(&output);
    let dir = run_dir(out.path());
    let output = crate::common::command()
        .current_dir(root())
        .env("GEPA_LAB_INFERENCE_KEY", KEY)
        .env("GEPA_LAB_CONFIG", out.path().join("no-config.toml"))
        .args(["run", "--resume", dir.path.to_str().unwrap(), "--yes"])
        .stdin(Stdio::null())
        .output()
        .expect("resume");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(!stderr.contains("running locally"), "{stderr}");
    assert!(
        stderr.contains("resuming run") && stderr.contains(&serve.url),
        "{stderr}"
    );
    assert_complete(&dir);
}

#[test]
fn each_run_has_customids_of_its_own() {
    // The case from the field: `run --new` looked up its own customId after a lost start answer
    // and adopted the previous run's execution, as customIds were derived from content alone.
    let serve = Serve::start(&["sim:seed=4"], &[&format!("{KEY}:6000")]);
    let out = tempfile::tempdir().unwrap();
    for _ in 0..2 {
        let output = run_command(
            &serve,
            out.path(),
            &["--new", experiment().to_str().unwrap()],
        )
        .output()
        .expect("run");
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let starts = starts_per_custom_id(&serve);
    assert_eq!(starts.len(), 4, "two runs of two variants: {starts:?}");
    assert!(starts.values().all(|&count| count == 1), "{starts:?}");
    assert!(starts.keys().all(|id| id.len() <= 50), "{starts:?}");
}

/// What a run chose and answered, without what differs between any two runs (ids, times,
/// latencies): each variant's history, every iteration's record, and every replay answer.
/// Sorted, since two variants' records reach the run directory in whatever order their
/// executions run.
fn choices(dir: &RunDir) -> (Vec<String>, Vec<String>, Vec<String>) {
    let mut history: Vec<String> = dir
        .read_csv::<HistoryRow>("history.csv")
        .unwrap()
        .iter()
        .map(|h| {
            format!(
                "{} g{} {} {:?}: {}",
                h.variant, h.generation, h.score, h.budget_used, h.prompt
            )
        })
        .collect();
    let mut iterations: Vec<String> = std::fs::read_to_string(dir.file("iterations.jsonl"))
        .unwrap()
        .lines()
        .map(|line| {
            let mut record: serde_json::Value = serde_json::from_str(line).unwrap();
            record.as_object_mut().unwrap().remove("evolution_id");
            record.to_string()
        })
        .collect();
    history.sort();
    iterations.sort();
    let mut replay: Vec<String> = dir
        .read_csv::<ReplayRow>("replay.csv")
        .unwrap()
        .iter()
        .map(|r| {
            format!(
                "{} {} {} {}: {} {}",
                r.variant, r.version, r.row, r.sample, r.score, r.output
            )
        })
        .collect();
    replay.sort();
    (history, iterations, replay)
}

#[test]
fn the_same_seed_repeats_a_run_and_run_json_records_the_seed() {
    // The case from the field: two uninterrupted runs of one file against the stand-in differed
    // (budget used 50 against 41, 2 generations against 3), each with an engine seed of its own.
    let serve = Serve::start(&["sim:seed=4"], &[&format!("{KEY}:60000")]);
    let run = |extra: &[&str]| {
        let out = tempfile::tempdir().unwrap();
        let mut args = vec!["--new"];
        args.extend_from_slice(extra);
        let file = experiment();
        args.push(file.to_str().unwrap());
        let output = run_command(&serve, out.path(), &args)
            .output()
            .expect("run");
        assert_succeeded(&output);
        let dir = run_dir(out.path());
        let manifest = dir.read_manifest().unwrap();
        (
            out,
            dir,
            manifest,
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    };
    // A run without --seed draws one, records it and says it.
    let (_a, drawn, manifest, stderr) = run(&[]);
    let seed = manifest.seed.expect("run.json records the seed");
    assert!(stderr.contains(&format!("seed: {seed} (")), "{stderr}");
    let engine_seeds: Vec<u64> = manifest
        .executions
        .iter()
        .map(|e| {
            e.plan
                .start
                .engine
                .as_ref()
                .and_then(|engine| engine.seed)
                .unwrap()
        })
        .collect();
    assert_ne!(
        engine_seeds[0], engine_seeds[1],
        "each variant its own seed"
    );
    // The same seed again: the same choices, proposals and answers.
    let (_b, again, manifest, _) = run(&["--seed", &seed.to_string()]);
    assert_eq!(manifest.seed, Some(seed));
    let first = choices(&drawn);
    assert!(!first.1.is_empty(), "the run made iterations");
    assert_eq!(choices(&again), first);
    // Another seed makes other choices (so the equality above is not for want of randomness).
    let (_c, seven, _, _) = run(&["--seed", "7"]);
    let (_d, eight, _, _) = run(&["--seed", "8"]);
    assert_ne!(choices(&seven).1, choices(&eight).1);
}

#[test]
fn a_seed_out_of_range_or_for_the_public_service_is_refused_before_anything_starts() {
    for value in ["-1", "9223372036854775808", "x"] {
        let seed = format!("--seed={value}");
        let output = crate::common::gepa_lab(&["run", &seed, "--backend", "local"]);
        assert_eq!(output.status.code(), Some(2), "{value}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            stderr.contains("must be a whole number from 0 to 9223372036854775807"),
            "{stderr}"
        );
    }
}

#[test]
fn a_stalled_poll_does_not_hold_the_run_past_its_timeout() {
    // The case from the field: a poll that never answered took a `--timeout 30` run to 306 s.
    use axum::routing::{get, post};
    use axum::{Json, Router};
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let app = Router::new()
        .route(
            "/api/v0/gepa/start_execution",
            post(|| async { Json(serde_json::json!({"evolutionId": "stalled-1"})) }),
        )
        .route(
            "/api/v0/gepa/get_single_execution/{id}",
            get(|| async {
                tokio::time::sleep(std::time::Duration::from_secs(3600)).await;
                Json(serde_json::json!({"status": "completed"}))
            }),
        );
    let listener = runtime
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    runtime.spawn(async move { axum::serve(listener, app).await });

    let out = tempfile::tempdir().unwrap();
    let started = std::time::Instant::now();
    let output = crate::common::command()
        .current_dir(root())
        .env("GEPA_LAB_EVOLUTION_KEY", KEY)
        .env("GEPA_LAB_INFERENCE_KEY", KEY)
        .args(["run", "--backend", &url, "--yes", "--timeout", "2", "--out"])
        .arg(out.path())
        .arg(experiment())
        .stdin(Stdio::null())
        .output()
        .expect("run");
    let took = started.elapsed();
    let stderr = String::from_utf8_lossy(&output.stderr);
    // Both executions time out (exit 5); the replay of their seeds fails on this service.
    assert_ne!(output.status.code(), Some(0), "{stderr}");
    assert!(
        took < std::time::Duration::from_secs(30),
        "took {took:?} for a 2 s time-out: {stderr}"
    );
    assert!(stderr.contains("still running at the time-out"), "{stderr}");
}

#[test]
fn replay_repeat_answers_each_holdout_row_several_times_and_the_report_counts_rows() {
    // `varies=1`: at a temperature above 0 the stand-in model's answers differ between calls.
    let serve = Serve::start(&["sim:seed=4,varies=1"], &[&format!("{KEY}:100000")]);
    let (out, output) = run_edited(
        &serve,
        &[("temperature = 0.0", "temperature = 0.8\nrepeat = 3")],
    );
    assert_succeeded(&output);
    let dir = run_dir(out.path());
    let replay: Vec<ReplayRow> = dir.read_csv("replay.csv").unwrap();
    // Holdout: 20 rows less minibatch 3 and pareto 5.
    let mut by_row: std::collections::BTreeMap<(String, String, usize), Vec<&ReplayRow>> =
        Default::default();
    for row in &replay {
        by_row
            .entry((row.variant.clone(), row.version.to_string(), row.row))
            .or_default()
            .push(row);
    }
    assert!(
        by_row.values().all(|samples| {
            let mut numbers: Vec<u32> = samples.iter().map(|s| s.sample).collect();
            numbers.sort_unstable();
            numbers == [1, 2, 3]
        }),
        "three samples of every row"
    );

    let results: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.file("results.json")).unwrap()).unwrap();
    let seed = results["versions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["execution"] == "small" && v["label"] == "seed")
        .expect("the seed of small");
    let score = &seed["scores"][0];
    assert_eq!(score["rows"], 12);
    assert_eq!(score["samples"], 3);
    assert_eq!(score["answered"], 36);
    assert_eq!(score["answered_rows"], 12);
    let row_means: Vec<f64> = by_row
        .iter()
        .filter(|((variant, version, _), _)| variant == "small" && version == "seed")
        .map(|(_, samples)| samples.iter().map(|s| s.score).sum::<f64>() / 3.0)
        .collect();
    assert_eq!(row_means.len(), 12);
    let mean = row_means.iter().sum::<f64>() / 12.0;
    assert!(
        (score["mean"].as_f64().unwrap() - mean).abs() < 1e-9,
        "{score} vs {mean}"
    );
    assert_eq!(score["agreement"]["rows"], 12);
    // The comparison pairs rows, not answers.
    if let Some(comparison) = results["comparisons"].as_array().and_then(|c| c.first()) {
        assert!(comparison["rows"].as_u64().unwrap() <= 12, "{comparison}");
    }
    let page = std::fs::read_to_string(dir.file("index.html")).unwrap();
    assert!(
        page.contains("3 answers per row: all answers agree on"),
        "agreement line"
    );
    assert!(
        page.contains("mean of 3 of 3 answers"),
        "a row's answers in the row table"
    );
}

#[test]
fn a_service_that_does_not_know_a_running_execution_does_not_fail_it() {
    // Slow enough that the executions are still running when the run is killed while polling.
    let serve = Serve::start(&["sim:seed=4,latency_ms=40"], &[&format!("{KEY}:6000")]);
    let out = tempfile::tempdir().unwrap();
    kill_when(&serve, out.path(), "\"event\":\"poll\"");
    let dir = run_dir(out.path());
    let running = |dir: &RunDir| -> Vec<bool> {
        dir.read_manifest()
            .unwrap()
            .executions
            .iter()
            .map(|e| matches!(e.state, ExecutionState::Running { .. }))
            .collect()
    };
    assert!(running(&dir).iter().any(|&r| r), "killed while running");
    let before = dir.read_manifest().unwrap();

    // Resumed on another serve, which knows none of them: nothing is marked failed.
    let stranger = Serve::start(&["sim:seed=4"], &[&format!("{KEY}:6000")]);
    let output = resume_command(&stranger, out.path(), &dir)
        .output()
        .expect("resume on a stranger");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!("on {}", stranger.url))
            && stderr.contains("does not know evolutionId"),
        "says where it went on, and why nothing more was polled: {stderr}"
    );
    let after = dir.read_manifest().unwrap();
    for (then, now) in before.executions.iter().zip(&after.executions) {
        assert!(
            !matches!(now.state, ExecutionState::Failed { .. }),
            "{:?} became {:?}",
            then.state,
            now.state
        );
        if let ExecutionState::Running { note, .. } = &now.state {
            assert!(
                note.as_deref()
                    .is_some_and(|n| n.contains("does not know evolutionId")),
                "{note:?}"
            );
        }
    }

    // Resumed on the service that started them, the run completes.
    let output = resume_command(&serve, out.path(), &dir)
        .output()
        .expect("resume");
    assert_succeeded(&output);
    assert_complete(&dir);
}

#[test]
fn a_run_started_with_relative_paths_resumes_from_any_folder() {
    let serve = Serve::start(&["sim:seed=4"], &[&format!("{KEY}:100000")]);
    let out = tempfile::tempdir().unwrap();
    // Started from the repository root with a relative experiment path: the dataset's path is
    // relative to that folder.
    let output = run_command(
        &serve,
        out.path(),
        &["tests/fixtures/run_experiments/two_variants.toml"],
    )
    .output()
    .expect("run");
    assert_succeeded(&output);
    let dir = run_dir(out.path());
    let manifest = dir.read_manifest().unwrap();
    for execution in &manifest.executions {
        assert!(
            execution.plan.dataset.file.is_absolute(),
            "{}",
            execution.plan.dataset.file.display()
        );
    }
    // Resumed from another folder, it still finds its dataset.
    let elsewhere = tempfile::tempdir().unwrap();
    let output = resume_command(&serve, out.path(), &dir)
        .current_dir(elsewhere.path())
        .output()
        .expect("resume");
    assert_succeeded(&output);
    assert_complete(&dir);
}

#[test]
fn an_unusable_backend_url_is_a_usage_error_that_creates_nothing() {
    let out = tempfile::tempdir().unwrap();
    for url in ["http://[::1", "http://"] {
        let output = crate::common::command()
            .current_dir(root())
            .args(["run", "--yes", "--backend", url, "--out"])
            .arg(out.path())
            .arg(experiment())
            .stdin(Stdio::null())
            .output()
            .expect("run");
        assert_eq!(output.status.code(), Some(2), "{url}");
        assert!(String::from_utf8_lossy(&output.stderr).contains("--backend"));
        assert_eq!(
            std::fs::read_dir(out.path()).unwrap().count(),
            0,
            "no run directory is left to block the next run"
        );
    }
}

/// `[engine]` reaches serve's engine (as the `gepaLabEngine` extension of the start request), and
/// is refused, before anything is created, for the public service, whose API takes none of it.
#[test]
fn engine_settings_reach_serve_and_are_refused_for_the_public_service() {
    let serve = Serve::start(&["sim:seed=4"], &[&format!("{KEY}:6000")]);
    let out = tempfile::tempdir().unwrap();
    let with_engine = [(
        "[replay]",
        "[engine]\nscore_threshold = 0.0\nmerge = true\n\n[replay]",
    )];
    let file = edited_experiment(out.path(), "engine.toml", &with_engine);
    let (dir, manifest) = run_to_end(&serve, out.path(), &file);
    let engine = manifest.executions[0].plan.start.engine.clone().unwrap();
    assert_eq!(engine.score_threshold, Some(0.0));
    assert_eq!(engine.merge, Some(true));
    // A threshold of 0 is met by the seed: no iteration, the seed alone in the history.
    assert!(dir.read_iterations().unwrap().is_empty());
    let history: Vec<HistoryRow> = dir.read_csv("history.csv").unwrap();
    assert!(history.iter().all(|row| row.generation == 0), "{history:?}");

    let elsewhere = tempfile::tempdir().unwrap();
    let output = crate::common::command()
        .current_dir(root())
        .args(["run", "--backend", "remote", "--yes", "--out"])
        .arg(elsewhere.path())
        .arg(&file)
        .stdin(Stdio::null())
        .output()
        .expect("run");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("engine.toml: [engine] sets score_threshold, merge but the public evolution service takes no engine settings"),
        "{stderr}"
    );
    assert_eq!(std::fs::read_dir(elsewhere.path()).unwrap().count(), 0);
}

/// A reflection template of the user's own travels to serve with the start request, is kept in
/// `run.json`, and drives the proposals; changing it changes the experiment's content hash.
#[test]
fn a_reflection_template_file_reaches_serve_and_drives_its_proposals() {
    let serve = Serve::start(&["sim:seed=4"], &[&format!("{KEY}:6000")]);
    let out = tempfile::tempdir().unwrap();
    // The simulated model rewrites the first fenced block it is shown, so a line inside that
    // block reaches the proposed prompts only if serve sent this template.
    let template = "My own reflection. The current instruction:\n```\n<curr_instructions>\n\
                    (Shown through the user's template.)\n```\n\
                    How it did:\n<inputs_outputs_feedback>\n\n\
                    Write a better instruction inside a ``` fenced block.\n";
    std::fs::write(out.path().join("reflection.md"), template).unwrap();
    let with_template = [(
        "[replay]",
        "[engine]\nreflection_template = \"reflection.md\"\n\n[replay]",
    )];
    let file = edited_experiment(out.path(), "template.toml", &with_template);
    let hash = |file: &Path| {
        let output = crate::common::gepa_lab(&["plan", "--json", file.to_str().unwrap()]);
        let plan: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
        plan["content_hash"].as_str().unwrap().to_owned()
    };
    let before = hash(&file);
    let (dir, manifest) = run_to_end(&serve, out.path(), &file);
    for execution in &manifest.executions {
        let engine = execution.plan.start.engine.as_ref().unwrap();
        assert_eq!(engine.reflection_template.as_deref(), Some(template));
    }
    let iterations = dir.read_iterations().unwrap();
    assert!(
        iterations.iter().any(|row| row
            .record
            .child_prompt()
            .is_some_and(|prompt| prompt.contains("(Shown through the user's template.)"))),
        "serve's engine sent the template and read prompts from the answers: {iterations:?}"
    );

    std::fs::write(
        out.path().join("reflection.md"),
        template.replace("My own", "Our"),
    )
    .unwrap();
    assert_ne!(
        hash(&file),
        before,
        "the template is part of the experiment"
    );
}

#[test]
fn a_resume_without_a_key_ends_at_the_first_refusal_with_its_state_kept() {
    let serve = Serve::start(&["sim:seed=4,latency_ms=20"], &[&format!("{KEY}:6000")]);
    let out = tempfile::tempdir().unwrap();
    kill_when(&serve, out.path(), "\"event\":\"poll\"");
    let dir = run_dir(out.path());
    let before = dir.read_manifest().unwrap();
    assert!(
        before.executions.iter().any(|e| e.state.is_running()),
        "killed while polling: {before:?}"
    );
    // No key anywhere: none in the environment, no config file.
    let config = tempfile::tempdir().unwrap();
    let mut resume = resume_command(&serve, out.path(), &dir);
    resume
        .env_remove("GEPA_LAB_EVOLUTION_KEY")
        .env_remove("GEPA_LAB_INFERENCE_KEY")
        .env("GEPA_LAB_CONFIG", config.path().join("config.toml"));
    let output = output_within(Duration::from_secs(60), &mut resume);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(3), "{stderr}");
    assert!(
        stderr.contains("the evolution service refused the key while polling evolutionId"),
        "{stderr}"
    );
    assert!(stderr.contains("401 Unauthorized"), "{stderr}");
    assert!(
        stderr.contains("Sent: no key to the inference API"),
        "which key was sent, and how to set one: {stderr}"
    );
    let after = dir.read_manifest().unwrap();
    let states = |m: &gepa_lab::store::RunManifest| -> Vec<ExecutionState> {
        m.executions.iter().map(|e| e.state.clone()).collect()
    };
    assert_eq!(states(&after), states(&before), "every state kept");
    assert!(
        events(&dir).matches("\"event\":\"poll_failed\"").count() <= 1,
        "{}",
        events(&dir)
    );
}

/// A holdout of three replay chunks, killed in the middle of the second and resumed: every cell
/// of `replay.csv` once and answered, and nothing asked twice but what was in flight at the kill.
#[test]
fn a_replay_of_several_chunks_killed_midway_resumes_without_asking_again() {
    let serve = Serve::start(&["sim:seed=4"], &[&format!("{KEY}:6000000")]);
    let out = tempfile::tempdir().unwrap();
    // The tiny file's first 8 rows for the minibatch and Pareto splits, then 2,500 more.
    let tiny = root().join("tests/fixtures/data/tiny.csv");
    let mut text: String = std::fs::read_to_string(&tiny)
        .unwrap()
        .lines()
        .take(9)
        .map(|line| format!("{line}\n"))
        .collect();
    for i in 0..2_500 {
        let (words, label) = if i % 3 == 0 {
            ("Broke after a week", "negative")
        } else {
            ("Love it, works great", "positive")
        };
        text.push_str(&format!("\"{words} (order {i})\",{label}\n"));
    }
    let data = out.path().join("many.csv");
    std::fs::write(&data, text).unwrap();
    let file = edited_experiment(
        out.path(),
        "two-variants.toml",
        &[(&tiny.display().to_string(), &data.display().to_string())],
    );
    // Past the first chunk's 1,024 rows of every version (the seed, shared, and each variant's
    // evolved ones).
    kill_run_when(
        &serve,
        out.path(),
        &file,
        Duration::from_secs(120),
        |events| events.matches("\"event\":\"answer\"").count() >= 6_000,
    );
    let dir = run_dir(out.path());
    assert!(
        !events(&dir).contains("\"event\":\"run_finished\""),
        "the kill landed before the run finished"
    );
    assert!(!dir.file("replay.csv").exists(), "no half table in place");
    let output = resume_command(&serve, out.path(), &dir)
        .output()
        .expect("resume");
    assert_succeeded(&output);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("removed 1 temporary file"), "{stderr}");
    let replay: Vec<ReplayRow> = dir.read_csv("replay.csv").unwrap();
    assert!(replay.iter().all(|row| row.error.is_empty()));
    let mut cells: Vec<(String, String, usize)> = replay
        .iter()
        .map(|row| (row.variant.clone(), row.version.to_string(), row.row))
        .collect();
    cells.sort();
    cells.dedup();
    assert_eq!(cells.len(), replay.len(), "no cell twice");
    let versions = replay.len() / 2_500;
    assert_eq!(replay.len(), versions * 2_500, "every row of every version");
    assert!(versions >= 4, "seeds and evolved versions of both variants");
    let distinct = distinct_cached(&dir);
    let (requests, _, _) = serve.usage_of_key_with_rpm(6_000_000);
    // A request in flight at the kill may have been answered without reaching the cache: at most
    // `concurrency` (2) of them.
    assert!(
        requests as usize <= distinct + 2,
        "server answered {requests} chat requests for {distinct} distinct replay requests"
    );
}

/// A build without the embedded model (`--no-default-features`) still runs against a server,
/// and a run on the embedded model stops before anything starts, saying how to get it.
#[cfg(not(feature = "embedded"))]
#[test]
fn without_the_embedded_model_a_local_run_says_how_to_build_it() {
    let out = tempfile::tempdir().unwrap();
    let output = crate::common::command()
        .args(["run", "--backend", "local", "--yes", "--new", "--out"])
        .arg(out.path())
        .arg(root().join("experiments/sentiment.toml"))
        .env_remove("GEPA_LAB_EVOLUTION_KEY")
        .env_remove("GEPA_LAB_INFERENCE_KEY")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_ne!(output.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("built without the embedded model"),
        "{stderr}"
    );
    assert!(stderr.contains("cargo build --release"), "{stderr}");
}
