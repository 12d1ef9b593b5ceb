//! Named providers end to end: two `gepa-lab serve --upstream sim` on loopback ports play two
//! OpenAI-compatible providers of one experiment run with `--backend local`. The engine evolves
//! on one and reflects with the other, the replay answers on both, and the run record names the
//! provider and model of every role and answer. A misspelt provider, an unset key variable and
//! a provider that does not answer each stop the run at the file's line before it spends.
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use gepa_lab::store::{REPLAY_FILE, ReplayRow, RunDir};

use crate::common::{Serve, root};

const TASKS_KEY: &str = "tasks-provider-key";
const REFLECTOR_KEY: &str = "reflector-provider-key";

/// The two providers: the task model's server and the reflection model's.
struct Providers {
    tasks: Serve,
    reflector: Serve,
}

impl Providers {
    fn start() -> Self {
        Self::with_options("")
    }

    /// Both servers with further simulated-model `options` (`,latency_ms=40`).
    fn with_options(options: &str) -> Self {
        Self::each_with(options, options)
    }

    /// The task model's server with `tasks` options, the reflection model's with `reflector`.
    fn each_with(tasks: &str, reflector: &str) -> Self {
        Self {
            tasks: Serve::start(
                &[&format!("sim:model=task-sim,seed=1{tasks}")],
                &[&format!("{TASKS_KEY}:60000")],
            ),
            reflector: Serve::start(
                &[&format!("sim:model=reflect-sim,seed=2{reflector}")],
                &[&format!("{REFLECTOR_KEY}:60000")],
            ),
        }
    }

    /// The fixture written to `dir` with the servers' URLs and each (from, to) replacement.
    fn experiment(&self, dir: &Path, replacements: &[(&str, &str)]) -> PathBuf {
        let fixture = root().join("tests/fixtures/run_experiments/providers.toml");
        let dataset = root().join("tests/fixtures/data/tiny.csv");
        let mut text = std::fs::read_to_string(fixture)
            .unwrap()
            .replace("../data/tiny.csv", &dataset.display().to_string())
            .replace("TASKS_URL", &self.tasks.url)
            .replace("REFLECTOR_URL", &self.reflector.url);
        for (from, to) in replacements {
            assert!(text.contains(from), "the fixture holds {from:?}");
            text = text.replace(from, to);
        }
        let file = dir.join("providers.toml");
        std::fs::write(&file, text).unwrap();
        file
    }

    /// Requests each server has counted for its key.
    fn requests(&self) -> (u64, u64) {
        let count = |serve: &Serve| -> u64 {
            let conn = rusqlite::Connection::open(&serve.db).expect("open db");
            conn.query_row("SELECT COALESCE(SUM(requests), 0) FROM usage", [], |row| {
                row.get(0)
            })
            .expect("a sum")
        };
        (count(&self.tasks), count(&self.reflector))
    }
}

/// `gepa-lab run --backend local` of `file` with both keys in their variables, writing under
/// `out`.
fn run(file: &Path, out: &Path) -> Command {
    let mut command = crate::common::local_run(file, out);
    command
        .env("GEPA_LAB_TEST_TASKS_KEY", TASKS_KEY)
        .env("GEPA_LAB_TEST_REFLECTOR_KEY", REFLECTOR_KEY);
    command
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn only_run(out: &Path) -> RunDir {
    let entry = std::fs::read_dir(out.join("providers"))
        .expect("the experiment folder")
        .next()
        .expect("a run")
        .expect("readable");
    RunDir::open(&entry.path()).unwrap()
}

#[test]
fn a_local_run_evolves_on_one_provider_reflects_with_another_and_names_both() {
    let providers = Providers::start();
    let out = tempfile::tempdir().unwrap();
    let file = providers.experiment(out.path(), &[]);
    let output = run(&file, out.path()).output().expect("run");
    assert!(output.status.success(), "{}", stderr(&output));
    let dir = only_run(out.path());

    let manifest: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.file("run.json")).unwrap()).unwrap();
    let recorded = &manifest["plan"]["providers"];
    assert_eq!(recorded["tasks"]["key_env"], "GEPA_LAB_TEST_TASKS_KEY");
    assert_eq!(
        recorded["reflector"]["url"],
        providers.reflector.url.as_str()
    );
    let roles = &manifest["executions"][0]["plan"]["models"];
    let role = |value: &serde_json::Value| {
        (
            value["provider"].as_str().unwrap().to_owned(),
            value["model"].as_str().unwrap().to_owned(),
        )
    };
    assert_eq!(role(&roles["task"]), ("tasks".into(), "task-sim".into()));
    assert_eq!(
        role(&roles["reflection"]),
        ("reflector".into(), "reflect-sim".into())
    );
    assert_eq!(
        role(&roles["replay"][1]),
        ("reflector".into(), "reflect-sim".into())
    );

    let rows: Vec<ReplayRow> = dir.read_csv(REPLAY_FILE).unwrap();
    for model in ["tasks/task-sim", "reflector/reflect-sim"] {
        let answered: Vec<&ReplayRow> = rows.iter().filter(|r| r.model == model).collect();
        assert_eq!(answered.len(), rows.len() / 2, "{model}: half the answers");
        assert!(
            answered
                .iter()
                .all(|r| r.answered_by == model && r.error.is_empty())
        );
    }
    assert!(
        rows.len() >= 2 * 12,
        "the seed on 12 holdout rows, on each model"
    );
    // The engine's task calls went to one server and its reflections to the other: each
    // server answered more than its replay requests and the check's list of models.
    let replayed = (rows.len() / 2) as u64;
    let (tasks, reflector) = providers.requests();
    assert!(
        tasks > replayed + 1 + 5,
        "the seed's Pareto rows at least: {tasks}"
    );
    assert!(
        reflector > replayed + 1,
        "at least one reflection: {reflector}"
    );
    // The keys were read from their variables and written nowhere.
    for entry in std::fs::read_dir(&dir.path).unwrap() {
        let path = entry.unwrap().path();
        if let Ok(text) = std::fs::read_to_string(&path) {
            assert!(
                !text.contains(TASKS_KEY) && !text.contains(REFLECTOR_KEY),
                "{path:?}"
            );
        }
    }
    let summary = std::fs::read_to_string(dir.file("summary.md")).unwrap();
    assert!(summary.contains("tasks/task-sim"), "{summary}");
}

/// The first line of the run's error output that names `file`, which must be its only error.
fn one_error(output: &Output, file: &Path) -> String {
    assert_eq!(output.status.code(), Some(1), "{}", stderr(output));
    let text = stderr(output);
    let errors: Vec<&str> = text
        .lines()
        .filter(|line| line.contains("error["))
        .collect();
    assert_eq!(errors.len(), 1, "{text}");
    assert!(errors[0].starts_with(&file.display().to_string()), "{text}");
    errors[0].to_owned()
}

#[test]
fn a_misspelt_provider_an_unset_key_or_a_silent_provider_stops_the_run_before_it_spends() {
    let providers = Providers::start();
    let out = tempfile::tempdir().unwrap();

    let file = providers.experiment(
        out.path(),
        &[("\"tasks/task-sim\", ", "\"taks/task-sim\", ")],
    );
    let line = one_error(&run(&file, out.path()).output().unwrap(), &file);
    assert!(line.contains(":44:11: error[model-provider]"), "{line}");
    assert!(line.contains("\"taks/task-sim\""), "{line}");

    let file = providers.experiment(out.path(), &[]);
    let unset = run(&file, out.path())
        .env_remove("GEPA_LAB_TEST_REFLECTOR_KEY")
        .output()
        .unwrap();
    let line = one_error(&unset, &file);
    assert!(line.contains(":34:11: error[provider-key-env]"), "{line}");
    assert!(line.contains("GEPA_LAB_TEST_REFLECTOR_KEY"), "{line}");

    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let down = format!("http://127.0.0.1:{port}");
    let file = providers.experiment(out.path(), &[(&providers.reflector.url, &down)]);
    let line = one_error(&run(&file, out.path()).output().unwrap(), &file);
    assert!(
        line.contains(":33:7: error[provider-unreachable]"),
        "{line}"
    );
    assert!(line.contains(&down), "{line}");

    assert!(
        !out.path().join("providers").exists(),
        "no run directory was made"
    );
    // Only the check's GET /v1/models reached the provider that answers.
    assert_eq!(
        providers.requests(),
        (1, 0),
        "nothing was asked of the models"
    );
}

#[test]
fn plan_names_each_roles_provider_and_check_names_a_model_a_provider_lacks() {
    let providers = Providers::start();
    let out = tempfile::tempdir().unwrap();
    let plan = |file: &Path| {
        crate::common::command()
            .env("GEPA_LAB_TEST_TASKS_KEY", TASKS_KEY)
            .env("GEPA_LAB_TEST_REFLECTOR_KEY", REFLECTOR_KEY)
            .args(["plan", "--check"])
            .arg(file)
            .output()
            .unwrap()
    };
    let file = providers.experiment(out.path(), &[]);
    let output = plan(&file);
    assert!(output.status.success(), "{}", stderr(&output));
    let shown = String::from_utf8_lossy(&output.stdout);
    for role in [
        "task       provider tasks        model task-sim",
        "reflection provider reflector    model reflect-sim",
    ] {
        assert!(shown.contains(role), "{shown}");
    }
    assert!(stderr(&output).contains("providers checked: reflector, tasks"));

    let lacking = ("\"reflector/reflect-sim\"]", "\"reflector/task-sim\"]");
    let file = providers.experiment(out.path(), &[lacking]);
    let line = one_error(&plan(&file), &file);
    assert!(line.contains(":44:29: error[provider-model]"), "{line}");
    assert!(line.contains("\"reflector/task-sim\""), "{line}");
}

#[test]
fn a_run_on_two_providers_killed_mid_evolution_resumes_with_the_providers_it_recorded() {
    let providers = Providers::with_options(",latency_ms=20");
    let out = tempfile::tempdir().unwrap();
    let file = providers.experiment(out.path(), &[("budget = 40", "budget = 80")]);
    let mut child = run(&file, out.path())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("run starts");
    let began = std::time::Instant::now();
    let engine_calls = |out: &Path| {
        let folder = out.join("providers");
        let dir = std::fs::read_dir(folder).ok()?.next()?.ok()?.path();
        let text = std::fs::read_to_string(dir.join("engine.jsonl")).ok()?;
        Some(
            text.lines()
                .filter(|line| line.contains("\"call\""))
                .count(),
        )
    };
    while engine_calls(out.path()).unwrap_or(0) < 10 {
        assert!(
            child.try_wait().unwrap().is_none(),
            "the run ended before the kill"
        );
        assert!(
            began.elapsed() < std::time::Duration::from_secs(60),
            "no engine calls"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    child.kill().expect("SIGKILL");
    child.wait().unwrap();
    let dir = only_run(out.path());
    // The resume reads the providers from run.json; only their keys come from the environment.
    let resumed = crate::common::command()
        .env("GEPA_LAB_TEST_TASKS_KEY", TASKS_KEY)
        .env("GEPA_LAB_TEST_REFLECTOR_KEY", REFLECTOR_KEY)
        .args(["run", "--yes", "--poll-interval", "0.1", "--resume"])
        .arg(&dir.path)
        .output()
        .unwrap();
    let text = stderr(&resumed);
    assert!(resumed.status.success(), "{text}");
    assert!(text.contains("continuing 1 evolution(s)"), "{text}");
    let rows: Vec<ReplayRow> = dir.read_csv(REPLAY_FILE).unwrap();
    for model in ["tasks/task-sim", "reflector/reflect-sim"] {
        let answered = rows
            .iter()
            .filter(|r| r.answered_by == model && r.error.is_empty());
        assert_eq!(answered.count(), rows.len() / 2, "{model}");
    }
}

/// A provider that refuses its key stops the run before anything is spent, and the message
/// names that provider and the variable its key came from, never the key.
#[test]
fn a_provider_that_refuses_its_key_is_named_with_the_variable() {
    let providers = Providers::start();
    let out = tempfile::tempdir().unwrap();
    let file = providers.experiment(out.path(), &[]);
    let refused = run(&file, out.path())
        .env("GEPA_LAB_TEST_TASKS_KEY", "not-the-tasks-key")
        .output()
        .unwrap();
    let said = stderr(&refused);
    assert_eq!(refused.status.code(), Some(1), "{said}");
    assert!(said.contains("provider `tasks`"), "{said}");
    assert!(said.contains("GEPA_LAB_TEST_TASKS_KEY"), "{said}");
    assert!(!said.contains("not-the-tasks-key"), "{said}");
}

/// The chat requests `serve` answered, as its log says: when, and with which status.
fn chat_log(serve: &Serve) -> Vec<(chrono::DateTime<chrono::FixedOffset>, u16)> {
    let mut plain = String::new();
    let mut in_escape = false;
    // The log is coloured: escape sequences run from ESC to their final `m`.
    for c in serve.log().chars() {
        match (in_escape, c) {
            (false, '\u{1b}') => in_escape = true,
            (true, 'm') => in_escape = false,
            (false, c) => plain.push(c),
            (true, _) => {}
        }
    }
    plain
        .lines()
        .filter(|line| line.contains("path=/v1/chat/completions"))
        .map(|line| {
            let at = line.split_whitespace().next().unwrap_or_default();
            let status = line.split(" status=").nth(1).unwrap_or_default();
            let status = status.split_whitespace().next().unwrap_or_default();
            (
                chrono::DateTime::parse_from_rfc3339(at).unwrap_or_else(|e| panic!("{e}: {line}")),
                status.parse().unwrap_or_else(|e| panic!("{e}: {line}")),
            )
        })
        .collect()
}

/// Calls of `kind` (`evaluate`, `reflect`) the engine of the run in `dir` recorded.
fn engine_calls(dir: &RunDir, kind: &str) -> usize {
    std::fs::read_to_string(dir.file("engine.jsonl"))
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str::<serde_json::Value>(line).unwrap())
        .filter(|record| record["change"] == "call" && record["call"]["call"] == kind)
        .count()
}

/// The third chat request of every 24 to each provider is answered 429: with `Retry-After: 1`
/// by the task model's server, with no `Retry-After` by the reflection model's. Each is retried
/// (after the second it says, or after a backoff) until answered, and asked no more than that:
/// the run finishes with every answer, on the provider it names. (Every third request refused
/// would slow the client's learned pacing towards a minute a request, as it should.)
#[test]
fn a_provider_answering_429_with_or_without_retry_after_is_retried_until_it_answers() {
    let faults = ",faults=ok*2/429/ok*21,cycle=24";
    let providers = Providers::each_with(faults, &format!("{faults},retry_after=none"));
    let out = tempfile::tempdir().unwrap();
    let file = providers.experiment(out.path(), &[("budget = 40", "budget = 24")]);
    let began = std::time::Instant::now();
    let output = run(&file, out.path()).output().expect("run");
    assert!(output.status.success(), "{}", stderr(&output));
    let took = began.elapsed();
    let dir = only_run(out.path());

    let rows: Vec<ReplayRow> = dir.read_csv(REPLAY_FILE).unwrap();
    for (model, server, engine_kind) in [
        ("tasks/task-sim", &providers.tasks, "evaluate"),
        ("reflector/reflect-sim", &providers.reflector, "reflect"),
    ] {
        let answered: Vec<&ReplayRow> = rows.iter().filter(|r| r.model == model).collect();
        assert_eq!(answered.len(), rows.len() / 2, "{model}");
        for row in &answered {
            assert!(row.error.is_empty(), "{model}: {}", row.error);
            assert_eq!(row.answered_by, model);
        }
        // The server refused the chat requests numbered 2, 26, 50, ... (from 0) and answered
        // the others: one answered request per answer, one more per refusal, no other.
        let answers = answered.len() + engine_calls(&dir, engine_kind);
        let log = chat_log(server);
        let count = |status: u16| log.iter().filter(|(_, s)| *s == status).count();
        let (ok, refused) = (count(200), count(429));
        assert_eq!(ok, answers, "{model}: {refused} refused");
        assert_eq!(refused, (ok + refused + 21) / 24, "{model}: {ok} answered");
        assert!(refused >= 1, "{model}: {refused} refusals");
    }
    // `Retry-After: 1` holds every new request to that provider for a second: in the second
    // after each refusal only the requests already in flight with it (`max_in_flight = 4`) end.
    // The replay, with more requests to send, meets one of them (number 26 of at most 24 engine
    // calls and 24 replay requests).
    let log = chat_log(&providers.tasks);
    let events = std::fs::read_to_string(dir.file("events.jsonl")).unwrap();
    let replay_began = events
        .lines()
        .map(|line| serde_json::from_str::<serde_json::Value>(line).unwrap())
        .find(|event| event["event"] == "replay_planned")
        .and_then(|event| chrono::DateTime::parse_from_rfc3339(event["at"].as_str()?).ok())
        .expect("the replay's start");
    assert!(
        log.iter()
            .any(|(at, status)| *status == 429 && *at > replay_began),
        "no 429 during the replay"
    );
    for (refused_at, _) in log.iter().filter(|(_, status)| *status == 429) {
        let within = log
            .iter()
            .filter(|(at, _)| {
                at > refused_at && *at - *refused_at < chrono::Duration::milliseconds(900)
            })
            .count();
        assert!(
            within <= 3,
            "{within} requests within 0.9 s of a 429 at {refused_at}"
        );
    }
    assert!(took < std::time::Duration::from_secs(90), "{took:?}");
}

/// A provider that takes 5 s to answer, with `timeout_secs = 1`: the variant that evolves on it
/// fails (`on_error = "fail"`) and the replay on it stops after 8 failures in a row, each error
/// naming the provider and the model; the variant and the replay on the other provider go on.
/// The run goes to its end, with exit 5 (an execution failed).
#[test]
fn a_provider_that_does_not_answer_in_time_fails_its_answers_by_name_and_the_rest_goes_on() {
    let providers = Providers::start();
    let slow = Serve::start(
        &["sim:model=slow-sim,seed=3,latency_ms=5000"],
        &["slow-provider-key:60000"],
    );
    let out = tempfile::tempdir().unwrap();
    let declared = format!(
        "[providers.slow]\nurl = \"{}\"\nkey_env = \"GEPA_LAB_TEST_SLOW_KEY\"\n\
         timeout_secs = 1\n\n[engine]",
        slow.url
    );
    let variants = "concurrency = 8\n\n[[variants]]\nname = \"on-tasks\"\n\n\
                    [[variants]]\nname = \"on-slow\"\n\
                    engine = { task_model = \"slow/slow-sim\", on_error = \"fail\" }\n";
    let file = providers.experiment(
        out.path(),
        &[
            ("[engine]", &declared),
            ("\"reflector/reflect-sim\"]", "\"slow/slow-sim\"]"),
            ("concurrency = 2", variants),
            // Two answers per row, so that the slow provider has more requests (24 at least,
            // whichever versions are replayed) than the 8 that stop it and the 7 in flight.
            ("temperature = 0.0", "temperature = 0.5\nrepeat = 2"),
        ],
    );
    let began = std::time::Instant::now();
    let output = run(&file, out.path())
        .env("GEPA_LAB_TEST_SLOW_KEY", "slow-provider-key")
        .output()
        .expect("run");
    let took = began.elapsed();
    let said = stderr(&output);
    assert_eq!(output.status.code(), Some(5), "{said}");
    let named = "provider `slow`, model slow-sim: request failed";
    assert!(
        said.contains("on-slow: failed: ") && said.contains(named),
        "{said}"
    );
    assert!(
        said.contains("replay: 8 requests to slow/slow-sim failed in a row"),
        "{said}"
    );

    let dir = only_run(out.path());
    let manifest: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.file("run.json")).unwrap()).unwrap();
    assert!(
        manifest["finished_at"].is_string(),
        "the run went to its end"
    );
    let states: Vec<(&str, &str)> = manifest["executions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["plan"]["variant"].as_str().unwrap(),
                e["state"]["kind"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(states, [("on-tasks", "finished"), ("on-slow", "failed")]);
    let reason = manifest["executions"][1]["state"]["reason"]
        .as_str()
        .unwrap();
    assert!(
        reason.contains(named) && reason.contains("timed out"),
        "{reason}"
    );

    let rows: Vec<ReplayRow> = dir.read_csv(REPLAY_FILE).unwrap();
    let on =
        |model: &str| -> Vec<&ReplayRow> { rows.iter().filter(|r| r.model == model).collect() };
    assert!(!on("tasks/task-sim").is_empty());
    for row in on("tasks/task-sim") {
        assert!(row.error.is_empty(), "{}", row.error);
        assert_eq!(row.answered_by, "tasks/task-sim");
    }
    let slow_rows = on("slow/slow-sim");
    assert_eq!(slow_rows.len(), on("tasks/task-sim").len());
    let (mut timed_out, mut not_sent) = (0, 0);
    for row in &slow_rows {
        assert!(row.answered_by.is_empty(), "{}", row.answered_by);
        if row.error.starts_with(named) && row.error.contains("timed out") {
            timed_out += 1;
        } else if row
            .error
            .starts_with("not sent: the service failed 8 requests to slow/slow-sim in a row")
        {
            not_sent += 1;
        } else {
            panic!("{}", row.error);
        }
    }
    // The 8 failures in a row stop the rest: those in flight with them still fail, the others
    // are not sent.
    assert!(timed_out >= 8, "{timed_out} timed out");
    assert!(not_sent > 0, "every request was sent");
    // Each request waits 1 s per attempt, 5 attempts with backoff between: the evolution (its
    // failed calls retried once) and the replay on the slow provider take about 45 s in all.
    assert!(took < std::time::Duration::from_secs(120), "{took:?}");
}
