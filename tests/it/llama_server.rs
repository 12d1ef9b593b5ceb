//! Named providers on real servers: llama.cpp's own `llama-server` serves the embedded catalog's
//! 0.5B and 1.5B models on two loopback ports as providers `small` and `large`. The local engine
//! evolves on one and reflects with the other, is killed with SIGKILL mid-run, resumes with
//! `run --resume`, and replays on both providers and on the embedded model.
//!
//! These need the llama-server binary (`scripts/build-llama-server.sh`, which `.ci/run` runs,
//! or `GEPA_LAB_LLAMA_SERVER`) and both models (`scripts/setup-model.sh qwen2.5-coder-0.5b
//! qwen2.5-coder-1.5b`). Without them they fail under CI (`CI` set), so that a missing build
//! never passes as green; elsewhere they print what is missing and how to get it, and return.
use std::collections::HashSet;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use gepa_lab::inference::embedded::{self, FileState, catalog};
use gepa_lab::store::{HISTORY_FILE, HistoryRow, REPLAY_FILE, ReplayRow, RunDir};

use crate::common::root;

/// The variable that points the tests at a llama-server binary.
const SERVER_VARIABLE: &str = "GEPA_LAB_LLAMA_SERVER";

/// Where `scripts/build-llama-server.sh` puts the server for the target directory these tests
/// were built in.
fn built_server() -> PathBuf {
    let binary = Path::new(env!("CARGO_BIN_EXE_gepa-lab"));
    let target = binary
        .parent()
        .and_then(Path::parent)
        .expect("the binary sits in <target>/<profile>/");
    target.join("llama-server/build-native/bin/llama-server")
}

/// What a test needs: the server binary and the two models' files; `None` (after saying what is
/// missing) outside CI, a panic under CI.
fn needs() -> Option<(PathBuf, PathBuf, PathBuf)> {
    let server = std::env::var_os(SERVER_VARIABLE).map_or_else(built_server, PathBuf::from);
    let mut missing = Vec::new();
    if !server.is_file() {
        missing.push(format!(
            "llama-server at {} is not built: run scripts/build-llama-server.sh (about 10 \
             minutes the first time on 2 cores), or point {SERVER_VARIABLE} at one",
            server.display()
        ));
    }
    let dir = embedded::models_dir();
    let mut files = Vec::new();
    for name in [catalog::DEFAULT_MODEL, catalog::REFLECTION_MODEL] {
        let model = catalog::CATALOG
            .iter()
            .find(|model| model.name == name)
            .expect("a catalog model");
        match embedded::file_state(model, &dir) {
            FileState::Ready => files.push(model.path_in(&dir)),
            FileState::Missing => missing.push(format!(
                "the model {name} is not installed in {}: run scripts/setup-model.sh {} {}",
                dir.display(),
                catalog::DEFAULT_MODEL,
                catalog::REFLECTION_MODEL
            )),
            FileState::Unusable(reason) => {
                missing.push(format!("the model {name} in {}: {reason}", dir.display()))
            }
        }
    }
    if missing.is_empty() {
        let large = files.pop()?;
        let small = files.pop()?;
        return Some((server, small, large));
    }
    let message = missing.join("; ");
    if std::env::var_os("CI").is_some() {
        panic!("{message} (CI must build and install them before the tests)");
    }
    eprintln!("skipped: {message}");
    None
}

/// A llama-server on 127.0.0.1, killed when dropped.
struct LlamaServer {
    child: Child,
    url: String,
    log: PathBuf,
}

impl LlamaServer {
    /// Starts `server` on `model` under the model id `alias`, logging into `dir`, and waits until
    /// it has loaded the model.
    fn start(server: &Path, model: &Path, alias: &str, slots: usize, dir: &Path) -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.local_addr())
            .expect("a free port")
            .port();
        let log = dir.join(format!("llama-server-{alias}.log"));
        let file = std::fs::File::create(&log).expect("log file");
        let child = Command::new(server)
            .arg("--model")
            .arg(model)
            .args(["--alias", alias, "--host", "127.0.0.1"])
            .args(["--port", &port.to_string()])
            .args(["--threads", "2", "--parallel", &slots.to_string()])
            .args(["--ctx-size", &(2048 * slots).to_string(), "--no-webui"])
            .stdin(Stdio::null())
            .stdout(file.try_clone().expect("log file"))
            .stderr(file)
            .spawn()
            .unwrap_or_else(|err| panic!("{} does not start: {err}", server.display()));
        let mut started = Self {
            child,
            url: format!("http://127.0.0.1:{port}"),
            log,
        };
        started.wait_until_healthy(port);
        started
    }

    fn wait_until_healthy(&mut self, port: u16) {
        let began = Instant::now();
        while began.elapsed() < Duration::from_secs(180) {
            if let Some(status) = self.child.try_wait().expect("wait") {
                panic!("llama-server exited ({status}):\n{}", self.log_text());
            }
            if health(port) {
                return;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        panic!(
            "llama-server did not load its model in 180 s:\n{}",
            self.log_text()
        );
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for LlamaServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Whether `GET /health` on `port` answers 200 (llama-server answers 503 while it loads).
fn health(port: u16) -> bool {
    let Ok(mut stream) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    if stream
        .write_all(b"GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        .is_err()
    {
        return false;
    }
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    answer.starts_with("HTTP/1.1 200") || answer.starts_with("HTTP/1.0 200")
}

/// Engine calls recorded so far in the only run under `out`.
fn engine_calls(out: &Path) -> usize {
    let Some(dir) = run_dirs(out).into_iter().next() else {
        return 0;
    };
    std::fs::read_to_string(dir.join("engine.jsonl"))
        .map(|text| {
            text.lines()
                .filter(|line| line.contains("\"change\":\"call\""))
                .count()
        })
        .unwrap_or(0)
}

fn run_dirs(out: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(out.join("llama-server"))
        .map(|entries| entries.filter_map(|e| Some(e.ok()?.path())).collect())
        .unwrap_or_default()
}

/// Each value of `keys` that occurs more than once.
fn repeated<T: std::hash::Hash + Eq + Clone>(keys: impl IntoIterator<Item = T>) -> Vec<T> {
    let mut seen = HashSet::new();
    keys.into_iter()
        .filter(|key| !seen.insert(key.clone()))
        .collect()
}

#[test]
fn a_run_on_two_llama_servers_killed_mid_evolution_resumes_and_replays_on_both_and_embedded() {
    let _turn = crate::embedded::TURN.blocking_lock();
    let Some((server, small_model, large_model)) = needs() else {
        return;
    };
    let out = tempfile::tempdir().unwrap();
    let small = LlamaServer::start(&server, &small_model, "qwen-0.5b", 2, out.path());
    let large = LlamaServer::start(&server, &large_model, "qwen-1.5b", 1, out.path());
    let file = experiment(out.path(), &small, &large);

    let began = Instant::now();
    let dir = killed_mid_evolution(&file, out.path());
    let resumed = crate::common::output_within(
        Duration::from_secs(600),
        crate::common::command()
            .args(["run", "--yes", "--poll-interval", "0.1", "--resume"])
            .arg(&dir.path),
    );
    let said = String::from_utf8_lossy(&resumed.stderr);
    assert!(
        resumed.status.success(),
        "{said}\n{}\n{}",
        small.log_text(),
        large.log_text()
    );
    assert!(said.contains("continuing 1 evolution(s)"), "{said}");
    eprintln!("killed, resumed and replayed in {:?}", began.elapsed());

    let manifest: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.file("run.json")).unwrap()).unwrap();
    assert!(manifest["finished_at"].is_string(), "the run finished");
    assert_eq!(
        manifest["plan"]["providers"]["small"]["url"],
        format!("{}/v1", small.url).as_str()
    );
    assert_roles(&manifest["executions"][0]["plan"]["models"]);
    assert_each_answer_once_by_the_model_asked(&dir);
    assert_the_engine_did_nothing_twice(&dir);
    // The report says what the run ran on: each role's provider and model.
    let summary = std::fs::read_to_string(dir.file("summary.md")).unwrap();
    assert!(
        summary.contains(
            "local engine; task model qwen-0.5b of provider small, reflection model qwen-1.5b \
             of provider large"
        ),
        "{summary}"
    );
    for model in ["small/qwen-0.5b", "large/qwen-1.5b"] {
        assert!(summary.contains(model), "{model}: {summary}");
    }
}

/// The replay models of the fixture, as `replay.csv` names them.
const REPLAY_MODELS: [&str; 3] = ["small/qwen-0.5b", "large/qwen-1.5b", "local"];

/// The fixture written to `out` with the servers' URLs and the dataset's path.
fn experiment(out: &Path, small: &LlamaServer, large: &LlamaServer) -> PathBuf {
    let fixture = root().join("tests/fixtures/run_experiments/llama-server.toml");
    let dataset = root().join("tests/fixtures/data/tiny.csv");
    let text = std::fs::read_to_string(fixture)
        .unwrap()
        .replace("../data/tiny.csv", &dataset.display().to_string())
        .replace("SMALL_URL", &small.url)
        .replace("LARGE_URL", &large.url);
    let file = out.join("llama-server.toml");
    std::fs::write(&file, text).unwrap();
    file
}

/// Runs `file` and kills the run with SIGKILL once the engine has recorded its first calls (the
/// seed's Pareto rows on `small`), while the evolution runs: its run directory.
fn killed_mid_evolution(file: &Path, out: &Path) -> RunDir {
    let began = Instant::now();
    let mut child = crate::common::local_run(file, out)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("run starts");
    while engine_calls(out) < 4 {
        assert!(
            child.try_wait().unwrap().is_none(),
            "the run ended before the kill"
        );
        assert!(
            began.elapsed() < Duration::from_secs(240),
            "no engine calls in 240 s"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill().expect("SIGKILL");
    child.wait().unwrap();
    let dirs = run_dirs(out);
    assert_eq!(dirs.len(), 1, "{dirs:?}");
    let dir = RunDir::open(&dirs[0]).unwrap();
    let manifest = dir.read_manifest().unwrap();
    assert!(
        manifest.executions[0].state.is_running(),
        "killed while the evolution ran: {:?}",
        manifest.executions[0].state
    );
    dir
}

/// `run.json` names each role's provider and model.
fn assert_roles(roles: &serde_json::Value) {
    let role = |value: &serde_json::Value| {
        format!(
            "{}/{}",
            value["provider"].as_str().unwrap(),
            value["model"].as_str().unwrap()
        )
    };
    assert_eq!(role(&roles["task"]), "small/qwen-0.5b");
    assert_eq!(role(&roles["reflection"]), "large/qwen-1.5b");
    let replayed: Vec<String> = roles["replay"]
        .as_array()
        .unwrap()
        .iter()
        .map(role)
        .collect();
    assert_eq!(
        replayed,
        ["small/qwen-0.5b", "large/qwen-1.5b", "local/local"]
    );
}

/// Every replay answer came from the model it was asked of, and each was written once.
fn assert_each_answer_once_by_the_model_asked(dir: &RunDir) {
    let rows: Vec<ReplayRow> = dir.read_csv(REPLAY_FILE).unwrap();
    for model in REPLAY_MODELS {
        let answers: Vec<&ReplayRow> = rows.iter().filter(|r| r.model == model).collect();
        assert_eq!(
            answers.len(),
            rows.len() / 3,
            "{model}: a third of the answers"
        );
        for row in answers {
            assert!(row.error.is_empty(), "{model}: {}", row.error);
            assert_eq!(row.answered_by, model);
        }
    }
    assert!(
        rows.len() >= 3 * 4,
        "the seed on 4 holdout rows, on each model"
    );
    let twice = repeated(rows.iter().map(|r| {
        (
            r.variant.clone(),
            r.version.clone(),
            r.model.clone(),
            r.row,
            r.sample,
        )
    }));
    assert!(twice.is_empty(), "replay answers written twice: {twice:?}");
}

/// Nothing the engine did before the kill was done or written again after it: each generation,
/// iteration and task call is recorded once.
fn assert_the_engine_did_nothing_twice(dir: &RunDir) {
    let history: Vec<HistoryRow> = dir.read_csv(HISTORY_FILE).unwrap();
    let twice = repeated(history.iter().map(|h| h.generation));
    assert!(twice.is_empty(), "generations written twice: {twice:?}");
    let engine = std::fs::read_to_string(dir.file("engine.jsonl")).unwrap();
    let records: Vec<serde_json::Value> = engine
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let evaluations: Vec<String> = records
        .iter()
        .filter(|r| r["change"] == "call" && r["call"]["call"] == "evaluate")
        .map(|r| format!("{} {}", r["call"]["prompt"], r["call"]["example"]))
        .collect();
    assert!(evaluations.len() >= 4, "the seed's Pareto rows at least");
    let twice = repeated(evaluations);
    assert!(twice.is_empty(), "task calls recorded twice: {twice:?}");
    let iterations = repeated(
        records
            .iter()
            .filter(|r| r["change"] == "iteration")
            .map(|r| r["record"]["iteration"].to_string()),
    );
    assert!(
        iterations.is_empty(),
        "iterations recorded twice: {iterations:?}"
    );
}
