//! `run --mlflow URL` against a real MLflow tracking server (from PyPI, installed by
//! `scripts/setup-test-tools.sh`) started on 127.0.0.1: each execution is an MLflow run with its
//! parameters, its score per generation, its holdout results and its report; a resume continues
//! the same MLflow runs without logging a step twice; an unreachable server is a warning.
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::common::{Serve, raw, root};
use crate::run::{KEY, assert_succeeded, edited_experiment, run_command};

/// The `mlflow` of the test tools, when installed; under CI its absence fails the test.
fn mlflow_program() -> Option<PathBuf> {
    let program = std::env::var_os("GEPA_LAB_MLFLOW")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join("target/test-tools/mlflow/bin/mlflow"));
    if program.is_file() {
        return Some(program);
    }
    let message = format!(
        "{} is not installed (scripts/setup-test-tools.sh installs mlflow from PyPI)",
        program.display()
    );
    assert!(std::env::var_os("CI").is_none(), "{message}");
    eprintln!("skipped: the MLflow tracking tests: {message}");
    None
}

/// A tracking server on a free port, its store and artifacts in a temporary folder; killed
/// when dropped.
struct Mlflow {
    child: Child,
    url: String,
    _dir: tempfile::TempDir,
}

impl Mlflow {
    fn start(program: &Path) -> Mlflow {
        let dir = tempfile::tempdir().unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let log = std::fs::File::create(dir.path().join("mlflow.log")).unwrap();
        // `mlflow server` starts uvicorn and job workers as children: in a process group of
        // their own, they all end with it (see Drop).
        let child = Command::new(program)
            .process_group(0)
            .args(["server", "--host", "127.0.0.1", "--port", &port.to_string()])
            .arg("--backend-store-uri")
            .arg(format!(
                "sqlite:///{}",
                dir.path().join("mlflow.db").display()
            ))
            .arg("--artifacts-destination")
            .arg(dir.path().join("artifacts"))
            .args(["--workers", "1"])
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start mlflow server");
        let server = Mlflow {
            child,
            url: format!("http://127.0.0.1:{port}"),
            _dir: dir,
        };
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(120) {
            if server
                .get("/health")
                .is_some_and(|(status, _)| status == 200)
            {
                return server;
            }
            std::thread::sleep(Duration::from_millis(250));
        }
        let log =
            std::fs::read_to_string(server._dir.path().join("mlflow.log")).unwrap_or_default();
        panic!("mlflow server did not answer /health within 120 s:\n{log}");
    }

    fn get(&self, path: &str) -> Option<(u16, String)> {
        let runtime = tokio::runtime::Runtime::new().unwrap();
        runtime.block_on(async {
            let response = raw().get(format!("{}{path}", self.url)).send().await.ok()?;
            let status = response.status().as_u16();
            Some((status, response.text().await.ok()?))
        })
    }

    /// A JSON answer of the REST API.
    fn api(&self, path: &str, body: Option<Value>) -> Value {
        let runtime = tokio::runtime::Runtime::new().unwrap();
        runtime.block_on(async {
            let url = format!("{}/api/2.0/mlflow/{path}", self.url);
            let request = match body {
                Some(body) => raw().post(url).json(&body),
                None => raw().get(url),
            };
            let response = request.send().await.expect("mlflow answers");
            assert!(
                response.status().is_success(),
                "{path}: {}",
                response.status()
            );
            response.json().await.unwrap()
        })
    }

    /// The runs of the experiment `name`, each as its `run` object.
    fn runs(&self, name: &str) -> Vec<Value> {
        let experiment = self.api(
            &format!("experiments/get-by-name?experiment_name={name}"),
            None,
        );
        let id = experiment["experiment"]["experiment_id"]
            .as_str()
            .unwrap()
            .to_owned();
        let found = self.api(
            "runs/search",
            Some(json!({ "experiment_ids": [id], "max_results": 100 })),
        );
        found["runs"].as_array().cloned().unwrap_or_default()
    }

    fn history(&self, run_id: &str, key: &str) -> Vec<(i64, f64)> {
        let answer = self.api(
            &format!("metrics/get-history?run_id={run_id}&metric_key={key}"),
            None,
        );
        let mut points: Vec<(i64, f64)> = answer["metrics"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .iter()
            .map(|m| {
                let step = m["step"]
                    .as_i64()
                    .or_else(|| m["step"].as_str()?.parse().ok())
                    .unwrap_or(-1);
                (step, m["value"].as_f64().unwrap())
            })
            .collect();
        points.sort_by_key(|point| point.0);
        points
    }
}

impl Drop for Mlflow {
    fn drop(&mut self) {
        // The whole group: the server's workers would outlive the `mlflow` process alone.
        if let Ok(group) = i32::try_from(self.child.id()) {
            // SAFETY: kill only sends a signal, to the group this test started.
            unsafe { libc::kill(-group, libc::SIGKILL) };
        }
        let _ = self.child.wait();
    }
}

/// A run's parameter or tag value by key.
fn value_of<'a>(run: &'a Value, list: &str, key: &str) -> Option<&'a str> {
    run["data"][list]
        .as_array()?
        .iter()
        .find(|item| item["key"] == key)?["value"]
        .as_str()
}

/// Starts `run --mlflow` of `file` with every answer logged, and kills it (SIGKILL) at its
/// first replay answer.
fn run_killed_in_replay(serve: &Serve, out: &Path, file: &Path, mlflow: &str) {
    let args = [
        "--mlflow",
        mlflow,
        "--answer-events",
        "all",
        "--seed",
        "1",
        file.to_str().unwrap(),
    ];
    let mut child = run_command(serve, out, &args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    while Instant::now() < deadline {
        let events = std::fs::read_dir(out.join("two-variants"))
            .ok()
            .and_then(|mut entries| entries.next())
            .and_then(Result::ok)
            .map(|e| std::fs::read_to_string(e.path().join("events.jsonl")).unwrap_or_default())
            .unwrap_or_default();
        if events.contains("\"event\":\"answer\"") {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    child.kill().unwrap();
    child.wait().unwrap();
}

#[test]
fn each_execution_is_an_mlflow_run_with_its_history_results_and_report() {
    let Some(program) = mlflow_program() else {
        return;
    };
    let mlflow = Mlflow::start(&program);
    let serve = Serve::start(&["sim:seed=4,latency_ms=20"], &[&format!("{KEY}:6000")]);
    let out = tempfile::tempdir().unwrap();
    let file = edited_experiment(out.path(), "tracked.toml", &[]);

    // Killed during its replay: both MLflow runs exist, with their parameters, still running.
    run_killed_in_replay(&serve, out.path(), &file, &mlflow.url);
    let dir = crate::run::run_dir(out.path());
    assert_eq!(
        dir.read_manifest().unwrap().finished_at,
        None,
        "killed before its end"
    );
    assert!(dir.file("mlflow.json").is_file());
    let runs = mlflow.runs("two-variants");
    assert_eq!(runs.len(), 2, "{runs:?}");
    for run in &runs {
        assert_eq!(run["info"]["status"], "RUNNING");
        assert!(value_of(run, "params", "evolution.budget").is_some());
    }

    // Resumed without the flag: the same MLflow runs go on (mlflow.json names them).
    let output = run_command(
        &serve,
        out.path(),
        &["--resume", dir.path.to_str().unwrap()],
    )
    .output()
    .unwrap();
    assert_succeeded(&output);

    // One MLflow run per execution, in the experiment named after the file, finished.
    let ids = |runs: &[Value]| -> Vec<String> {
        let mut ids: Vec<String> = runs
            .iter()
            .map(|r| r["info"]["run_id"].as_str().unwrap().to_owned())
            .collect();
        ids.sort();
        ids
    };
    let before = ids(&runs);
    let runs = mlflow.runs("two-variants");
    assert_eq!(ids(&runs), before, "the resume made new MLflow runs");
    assert_eq!(runs.len(), 2, "{runs:?}");
    let history: Vec<gepa_lab::store::HistoryRow> =
        dir.read_csv(gepa_lab::store::HISTORY_FILE).unwrap();
    for run in &runs {
        let info = &run["info"];
        assert_eq!(info["status"], "FINISHED");
        let variant = value_of(run, "params", "variant").unwrap();
        let budget = value_of(run, "params", "evolution.budget").unwrap();
        assert_eq!(budget, if variant == "small" { "20" } else { "30" });
        assert_eq!(value_of(run, "params", "seed"), Some("1"));
        assert!(value_of(run, "params", "content_hash").is_some_and(|h| h.len() == 64));
        assert_eq!(value_of(run, "tags", "gepa_lab.simulated"), Some("true"));
        // The evolution's score per generation, as history.csv has it.
        let expected: Vec<(i64, f64)> = history
            .iter()
            .filter(|row| row.variant == variant)
            .map(|row| (i64::from(row.generation), row.score))
            .collect();
        let run_id = info["run_id"].as_str().unwrap();
        assert!(!expected.is_empty());
        assert_eq!(
            mlflow.history(run_id, "evolution_score"),
            expected,
            "{variant}"
        );
        // The holdout: the seed's mean on the replay model, and the report as an artifact.
        let metrics = run["data"]["metrics"].as_array().unwrap();
        assert!(
            metrics.iter().any(|m| m["key"] == "holdout/seed/sim-text"),
            "{metrics:?}"
        );
        let listed = mlflow.api(&format!("artifacts/list?run_id={run_id}&path=report"), None);
        let files: Vec<&str> = listed["files"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|f| f["path"].as_str())
            .collect();
        assert!(files.contains(&"report/index.html"), "{files:?}");
    }

    // A finished run resumed again logs its end again without a step twice.
    let resumed = run_command(
        &serve,
        out.path(),
        &[
            "--mlflow",
            &mlflow.url,
            "--resume",
            dir.path.to_str().unwrap(),
        ],
    )
    .output()
    .unwrap();
    assert_succeeded(&resumed);
    let again = mlflow.runs("two-variants");
    assert_eq!(ids(&again), before);
    for run in &again {
        let run_id = run["info"]["run_id"].as_str().unwrap();
        let variant = value_of(run, "params", "variant").unwrap();
        let generations = history.iter().filter(|row| row.variant == variant).count();
        assert_eq!(mlflow.history(run_id, "evolution_score").len(), generations);
        assert_eq!(run["info"]["status"], "FINISHED");
    }

    // A server that is not there is a warning; the run completes.
    let out = tempfile::tempdir().unwrap();
    let file = edited_experiment(out.path(), "untracked.toml", &[]);
    let output = run_command(
        &serve,
        out.path(),
        &["--mlflow", "http://127.0.0.1:9", file.to_str().unwrap()],
    )
    .output()
    .unwrap();
    assert_succeeded(&output);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("warning: MLflow") && stderr.contains("127.0.0.1:9"),
        "{stderr}"
    );
    assert!(crate::run::run_dir(out.path()).file("index.html").is_file());
}

#[test]
fn a_tracking_table_is_planned_for_every_execution_and_a_bad_one_refused() {
    let dir = tempfile::tempdir().unwrap();
    let file = edited_experiment(dir.path(), "tracked.toml", &[]);
    let mut text = std::fs::read_to_string(&file).unwrap();
    text.push_str(
        "\n[tracking]\nmlflow = \"http://127.0.0.1:5000/\"\nexperiment = \"team runs\"\n",
    );
    std::fs::write(&file, &text).unwrap();
    let output = crate::common::gepa_lab(&["plan", "--json", file.to_str().unwrap()]);
    assert_succeeded(&output);
    let plan: Value = serde_json::from_slice(&output.stdout).unwrap();
    let executions = plan["executions"].as_array().unwrap();
    assert_eq!(executions.len(), 2);
    for execution in executions {
        assert_eq!(
            execution["tracking"],
            json!({ "url": "http://127.0.0.1:5000", "experiment": "team runs" })
        );
    }
    std::fs::write(
        &file,
        text.replace("http://127.0.0.1:5000/", "127.0.0.1:5000"),
    )
    .unwrap();
    let output = crate::common::gepa_lab(&["validate", file.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        format!("{stdout}{stderr}").contains("tracking-mlflow"),
        "{stdout}{stderr}"
    );
}

/// A prompt of several parts is logged like any other: each replayed version's prompt is an
/// artifact holding the join of its parts (the markers, the fixed turn and user template kept),
/// which splits back into the parts of `history.csv`'s prompt, and the engine's settings are
/// parameters.
#[test]
fn a_prompt_of_several_parts_is_logged_with_each_versions_parts() {
    use gepa_lab::prompt::{ChatPrompt, PartName};
    use gepa_lab::store::{HISTORY_FILE, HistoryRow, RunDir};

    use crate::prompt_parts::{SYSTEM, TURN_USER, USER};

    let Some(program) = mlflow_program() else {
        return;
    };
    let mlflow = Mlflow::start(&program);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let upstream = crate::checkpoint::upstream(&runtime, "model=local,seed=2,latency_ms=1");
    let out = tempfile::tempdir().unwrap();
    let output = crate::prompt_parts::start(&upstream.url, out.path())
        .args(["--mlflow", &mlflow.url])
        .output()
        .expect("gepa-lab runs");
    assert_succeeded(&output);
    let dir = RunDir::open(&crate::checkpoint::only_run(out.path(), "prompt-parts")).unwrap();
    let history: Vec<HistoryRow> = dir.read_csv(HISTORY_FILE).unwrap();

    let runs = mlflow.runs("prompt-parts");
    assert_eq!(runs.len(), 1, "{runs:?}");
    let run = &runs[0];
    assert_eq!(run["info"]["status"], "FINISHED");
    assert!(
        value_of(run, "params", "engine.reflectionTemplate").is_some(),
        "{run}"
    );
    let run_id = run["info"]["run_id"].as_str().unwrap();
    let listed = mlflow.api(
        &format!("artifacts/list?run_id={run_id}&path=prompts"),
        None,
    );
    let files: Vec<&str> = listed["files"]
        .as_array()
        .expect("prompt artifacts")
        .iter()
        .filter_map(|f| f["path"].as_str())
        .collect();
    assert!(files.contains(&"prompts/seed.txt"), "{files:?}");
    assert!(
        files.len() >= 2,
        "the seed and an evolved version: {files:?}"
    );
    for file in files {
        let (status, text) = mlflow
            .get(&format!("/get-artifact?path={file}&run_id={run_id}"))
            .expect("mlflow serves the artifact");
        assert_eq!(status, 200, "{file}: {text}");
        assert!(
            history.iter().any(|row| row.prompt == text),
            "{file} is a prompt of the history: {text}"
        );
        let parts = ChatPrompt::split(&text);
        assert!(!parts.is_plain(), "{file} keeps its parts: {text}");
        assert_eq!(parts.part(PartName::User), Some(USER), "{file}");
        assert_eq!(parts.sections()[1].text, TURN_USER, "{file}");
        assert!(parts.sections().iter().any(|s| s.fixed), "{file}");
        if file == "prompts/seed.txt" {
            assert_eq!(text, history[0].prompt);
            assert_eq!(parts.part(PartName::System), Some(SYSTEM));
        }
    }
}
