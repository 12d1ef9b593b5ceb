//! Helpers shared by the integration tests: running the binary, and starting `gepa-lab serve`
//! on an ephemeral port with clients for it.
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Output, Stdio};
use std::time::{Duration, Instant};

use gepa_lab::evolution::{EvolutionConfig, HttpEvolution};
use gepa_lab::http::{RetryPolicy, Secret};
use gepa_lab::inference::{HttpInference, InferenceConfig};

/// A running `serve`, killed when dropped.
pub struct Serve {
    child: Child,
    _stdout: BufReader<ChildStdout>,
    pub url: String,
    pub db: PathBuf,
    // Taken by `kill`, so the database outlives the process for a restart.
    dir: Option<tempfile::TempDir>,
}

impl Serve {
    /// Starts `serve` with these `--upstream` specs and `--api-key` specs.
    pub fn start(upstreams: &[&str], keys: &[&str]) -> Serve {
        Serve::start_in(tempfile::tempdir().expect("temp dir"), upstreams, keys, &[])
    }

    /// `start`, with further flags (the account settings, for instance).
    pub fn start_with(upstreams: &[&str], keys: &[&str], flags: &[&str]) -> Serve {
        Serve::start_in(
            tempfile::tempdir().expect("temp dir"),
            upstreams,
            keys,
            flags,
        )
    }

    /// Starts `serve` on the database in `dir` (new or left by an earlier `serve`), with extra
    /// arguments.
    pub fn start_in(
        dir: tempfile::TempDir,
        upstreams: &[&str],
        keys: &[&str],
        extra: &[&str],
    ) -> Serve {
        Serve::start_configured(dir, upstreams, keys, extra, |_| {})
    }

    /// `start_in`, with `configure` applied to the command before it is spawned (to lower a
    /// resource limit, for instance).
    pub fn start_configured(
        dir: tempfile::TempDir,
        upstreams: &[&str],
        keys: &[&str],
        extra: &[&str],
        configure: impl FnOnce(&mut Command),
    ) -> Serve {
        let db = dir.path().join("serve.sqlite3");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.path().join("serve.log"))
            .expect("log file");
        let mut command = command();
        command
            .args(["serve", "--bind", "127.0.0.1:0", "--db"])
            .arg(&db)
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(log);
        for upstream in upstreams {
            command.args(["--upstream", upstream]);
        }
        for key in keys {
            command.args(["--api-key", key]);
        }
        configure(&mut command);
        let mut child = command.spawn().expect("spawn gepa-lab serve");
        let mut stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
        let mut first = String::new();
        stdout
            .read_line(&mut first)
            .expect("read serve's first line");
        let Some(addr) = first.trim().strip_prefix("listening on ") else {
            let _ = child.kill();
            let log = std::fs::read_to_string(dir.path().join("serve.log")).unwrap_or_default();
            panic!("serve did not start: first line {first:?}; log:\n{log}");
        };
        Serve {
            url: addr.to_owned(),
            child,
            _stdout: stdout,
            db,
            dir: Some(dir),
        }
    }

    /// Kills the process at once (no graceful shutdown, as in a crash) and hands back its
    /// folder, database and log included.
    pub fn kill(mut self) -> tempfile::TempDir {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.dir.take().expect("the folder is still held")
    }

    /// Sends SIGTERM (a graceful shutdown) and waits up to `limit` for the process to exit;
    /// how long it took, or `None` when it was still running (then it is killed).
    pub fn terminate(&mut self, limit: Duration) -> Option<Duration> {
        let started = std::time::Instant::now();
        let sent = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .expect("kill runs");
        assert!(sent.success());
        while started.elapsed() < limit {
            if self.child.try_wait().expect("wait").is_some() {
                return Some(started.elapsed());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }

    /// An evolution client with fast retries, as a test wants them.
    pub fn evolution(&self, key: Option<&str>) -> HttpEvolution {
        let mut config = EvolutionConfig::new(self.url.clone(), key.map(Secret::new));
        config.retry = RetryPolicy {
            base_delay: Duration::from_millis(20),
            max_elapsed: Duration::from_secs(30),
            ..config.retry
        };
        HttpEvolution::new(config).expect("evolution client")
    }

    /// A client with fast retries, as a test wants them.
    pub fn client(&self, key: Option<&str>) -> HttpInference {
        self.client_with(key, None)
    }

    pub fn client_with(&self, key: Option<&str>, rpm: Option<u32>) -> HttpInference {
        let mut config = InferenceConfig::new(self.url.clone(), key.map(Secret::new));
        config.rpm = rpm.and_then(std::num::NonZeroU32::new);
        config.retry = RetryPolicy {
            base_delay: Duration::from_millis(20),
            max_elapsed: Duration::from_secs(30),
            ..config.retry
        };
        HttpInference::new(config).expect("client")
    }

    /// What the server logged so far, for failure messages.
    pub fn log(&self) -> String {
        self.dir
            .as_ref()
            .and_then(|dir| std::fs::read_to_string(dir.path().join("serve.log")).ok())
            .unwrap_or_default()
    }

    /// `(requests, rate_limited, prompt_tokens)` recorded for the only key with that rpm.
    pub fn usage_of_key_with_rpm(&self, rpm: u32) -> (u64, u64, u64) {
        let conn = rusqlite::Connection::open(&self.db).expect("open db");
        conn.query_row(
            "SELECT u.requests, u.rate_limited, u.prompt_tokens FROM usage u
             JOIN api_keys k ON k.id = u.key_id WHERE k.rpm_limit = ?1",
            [rpm],
            |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)),
        )
        .expect("usage row")
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An OpenAI-compatible server on 127.0.0.1 that answers every `/v1/chat/completions` with
/// `answer` and lists one model, `m`, with no `created` time: the bare minimum some servers
/// send, and whatever broken answer a test needs. Returns its base URL.
pub fn fake_upstream(runtime: &tokio::runtime::Runtime, answer: serde_json::Value) -> String {
    use axum::routing::{get, post};
    use axum::{Json, Router};
    let app = Router::new()
        .route(
            "/v1/models",
            get(|| async { Json(serde_json::json!({"data": [{"id": "m"}]})) }),
        )
        .route(
            "/v1/chat/completions",
            post(move || {
                let answer = answer.clone();
                async move { Json(answer) }
            }),
        );
    let listener = runtime
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("address"));
    runtime.spawn(async move { axum::serve(listener, app).await });
    url
}

/// A plain reqwest client, for checking raw statuses, headers and bodies.
pub fn raw() -> reqwest::Client {
    gepa_lab::http::client_builder()
        .build()
        .expect("reqwest client")
}

/// The repository root; tests run the binary from here, as the README does.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The variables of this machine that a test's `gepa-lab` keeps: where the models are and how
/// to run them. Every other `GEPA_LAB_*` variable points at a user's account, keys, services or
/// settings, which a test must not inherit; a test sets the ones it needs.
const MACHINE_VARIABLES: [&str; 5] = [
    "GEPA_LAB_MODELS",
    "GEPA_LAB_PIP",
    "GEPA_LAB_THREADS",
    "GEPA_LAB_SLOTS",
    "GEPA_LAB_CONTEXT_TOKENS",
];

/// `gepa-lab`, to be run from the repository root, without the `GEPA_LAB_*` variables of the
/// environment the tests run in (but those of [`MACHINE_VARIABLES`]). Every test that starts the
/// binary starts it from here.
pub fn command() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_gepa-lab"));
    command.current_dir(root());
    for (name, _) in std::env::vars_os() {
        if let Some(name) = name.to_str()
            && name.starts_with("GEPA_LAB_")
            && !MACHINE_VARIABLES.contains(&name)
        {
            command.env_remove(name);
        }
    }
    command
}

/// `gepa-lab run --backend local --yes` of `file`, writing under `out` and polling every 0.1 s.
pub fn local_run(file: &Path, out: &Path) -> Command {
    let mut command = command();
    command
        .args([
            "run",
            "--backend",
            "local",
            "--yes",
            "--poll-interval",
            "0.1",
        ])
        .arg(file)
        .arg("--out")
        .arg(out);
    command
}

/// Runs `gepa-lab ARGS` from the repository root.
pub fn gepa_lab(args: &[&str]) -> Output {
    command()
        .args(args)
        .output()
        .expect("the gepa-lab binary runs")
}

pub fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// `validate --json` of one file: the diagnostics array and the exit code.
pub fn validate_json(file: &Path) -> (serde_json::Value, i32) {
    let output = gepa_lab(&["validate", "--json", file.to_str().expect("UTF-8 path")]);
    let report: serde_json::Value = serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|err| panic!("validate --json printed JSON ({err}): {}", stdout(&output)));
    (report[0].clone(), output.status.code().expect("exited"))
}

/// Runs `command` to its end, or kills it and fails the test once `limit` has passed.
pub fn output_within(limit: Duration, command: &mut Command) -> Output {
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let deadline = Instant::now() + limit;
    while child.try_wait().expect("wait").is_none() {
        if Instant::now() > deadline {
            child.kill().ok();
            panic!("still running after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.wait_with_output().expect("output")
}
