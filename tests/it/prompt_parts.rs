//! Prompts of several parts end to end: `run --backend local` evolves the system message of a
//! prompt whose user template is fixed, asks every answer as chat messages (system, the turn,
//! the filled user template) and replays the versions the same way; a killed run resumes to the
//! same history; `compare --prompts` sends two joined prompt files as chat messages and diffs
//! them part by part.
//!
//! The models are the simulated model behind HTTP (`GEPA_LAB_LOCAL_UPSTREAM`, or `--url` for
//! `compare`), and the upstream keeps every request it answers: what reached the model is
//! checked, not only what the run directory says.
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use gepa_lab::engine::IterationRecord;
use gepa_lab::inference::wire::{ChatRequest, Role};
use gepa_lab::prompt::{ChatPrompt, PartName, Turn};
use gepa_lab::store::{HISTORY_FILE, HistoryRow, REPLAY_FILE, ReplayRow, RunDir};

use crate::checkpoint::{only_run, upstream};
use crate::common::root;

pub(crate) const SYSTEM: &str =
    "You label the sentiment of product reviews.\nAnswer with one of: positive, negative";
pub(crate) const TURN_USER: &str = "Review: Great value for the price.";
pub(crate) const USER: &str = "Review: {review}";

fn local_run(upstream: &str, args: &[&std::ffi::OsStr]) -> Command {
    let mut command = crate::common::command();
    command
        .args(args)
        .env("GEPA_LAB_LOCAL_UPSTREAM", upstream)
        .env("GEPA_LAB_REFLECTION_MODEL", "local")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    command
}

/// `run --backend local` of the prompt-parts fixture under `out`, its models the simulated one
/// at `upstream`.
pub(crate) fn start(upstream: &str, out: &Path) -> Command {
    let experiment = root().join("tests/fixtures/run_experiments/prompt_parts.toml");
    local_run(
        upstream,
        &[
            "run".as_ref(),
            experiment.as_os_str(),
            "--backend".as_ref(),
            "local".as_ref(),
            "--yes".as_ref(),
            "--seed".as_ref(),
            "46".as_ref(),
            "--out".as_ref(),
            out.as_os_str(),
        ],
    )
}

fn succeeded(output: Output) {
    assert!(
        output.status.success(),
        "exit {:?}: {}",
        output.status.code(),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// What a run left that must not depend on an interruption: the history and the iterations.
fn outcome(run: &Path) -> (Vec<(u32, String)>, Vec<IterationRecord>) {
    let dir = RunDir::open(run).unwrap();
    let history: Vec<HistoryRow> = dir.read_csv(HISTORY_FILE).expect("history.csv");
    let iterations = dir.read_iterations().expect("iterations.jsonl");
    (
        history
            .into_iter()
            .map(|row| (row.generation, row.prompt))
            .collect(),
        iterations.into_iter().map(|row| row.record).collect(),
    )
}

/// Every prompt is the seed's parts with only the system message changed.
fn assert_fixed_parts_kept(prompt: &str) {
    let parts = ChatPrompt::split(prompt);
    assert_eq!(parts.part(PartName::User), Some(USER), "{prompt}");
    let seed = ChatPrompt::new(
        Some(SYSTEM.into()),
        vec![Turn {
            user: TURN_USER.into(),
            assistant: "positive".into(),
        }],
        USER.into(),
        &[PartName::System],
    )
    .unwrap();
    assert!(seed.keeps_fixed_parts_of(&parts), "{prompt}");
}

/// The reviews of the holdout rows (after the 3 minibatch and 5 Pareto rows), as filled in.
fn holdout_messages() -> Vec<String> {
    let mut reader = csv::Reader::from_path(root().join("tests/fixtures/data/tiny.csv")).unwrap();
    reader
        .records()
        .skip(8)
        .map(|row| format!("Review: {}", &row.unwrap()[0]))
        .collect()
}

/// Every answer the models were asked for went as chat messages; every reflection saw the
/// system message alone.
fn assert_requests_are_chat_messages(requests: &[ChatRequest]) -> usize {
    let mut replayed = 0;
    let holdout = holdout_messages();
    for request in requests {
        let last = request.messages.last().expect("a message").text();
        if last.contains("```") {
            // A reflection: one user message holding the part it may change, nothing else.
            assert_eq!(request.messages.len(), 1, "{request:?}");
            assert!(!last.contains(USER) && !last.contains("<user"), "{last}");
            assert!(!last.contains(TURN_USER), "{last}");
            continue;
        }
        let roles: Vec<Role> = request.messages.iter().map(|m| m.role).collect();
        assert_eq!(
            roles,
            [Role::System, Role::User, Role::Assistant, Role::User],
            "{request:?}"
        );
        let system = request.messages[0].text();
        assert!(!system.is_empty() && !system.contains("<turn"), "{system}");
        assert_eq!(request.messages[1].text(), TURN_USER);
        assert_eq!(request.messages[2].text(), "positive");
        assert!(
            last.starts_with("Review: ") && !last.contains('{'),
            "{last}"
        );
        if holdout.contains(&last) {
            replayed += 1;
        }
    }
    replayed
}

#[test]
fn a_local_run_evolves_the_system_message_alone_and_sends_chat_messages() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let upstream = upstream(&runtime, "model=local,seed=2,latency_ms=1");
    let out = tempfile::tempdir().unwrap();
    succeeded(
        start(&upstream.url, out.path())
            .output()
            .expect("gepa-lab runs"),
    );
    let requests = upstream.take();
    let run = only_run(out.path(), "prompt-parts");
    let (history, iterations) = outcome(&run);

    assert_eq!(
        ChatPrompt::split(&history[0].1).part(PartName::System),
        Some(SYSTEM),
        "the seed"
    );
    for (_, prompt) in &history {
        assert_fixed_parts_kept(prompt);
    }
    let mut changed = 0;
    for record in &iterations {
        let IterationRecord::Mutation(mutation) = record else {
            panic!("merge is off for RPM: {record:?}");
        };
        assert_eq!(mutation.part, Some(PartName::System), "{mutation:?}");
        if let Some(child) = &mutation.child_prompt {
            assert_fixed_parts_kept(child);
            changed += usize::from(ChatPrompt::split(child).part(PartName::System) != Some(SYSTEM));
        }
    }
    assert!(
        changed >= 1,
        "a child with a new system message: {iterations:?}"
    );

    let replayed = assert_requests_are_chat_messages(&requests);
    let replay: Vec<ReplayRow> = RunDir::open(&run)
        .unwrap()
        .read_csv(REPLAY_FILE)
        .expect("replay.csv");
    assert!(!replay.is_empty());
    assert!(
        replayed >= 12,
        "the seed's 12 holdout rows at least, as chat messages: {replayed}"
    );
}

#[test]
fn a_killed_run_of_a_prompt_of_parts_resumes_to_the_same_history() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let upstream = upstream(&runtime, "model=local,seed=2,latency_ms=5");
    let whole_out = tempfile::tempdir().unwrap();
    succeeded(
        start(&upstream.url, whole_out.path())
            .output()
            .expect("gepa-lab runs"),
    );
    let whole_calls = upstream.take().len();
    let whole = outcome(&only_run(whole_out.path(), "prompt-parts"));

    let out = tempfile::tempdir().unwrap();
    let mut child = start(&upstream.url, out.path())
        .spawn()
        .expect("gepa-lab starts");
    let began = Instant::now();
    while upstream.count() < whole_calls as u64 / 2 {
        assert!(
            began.elapsed() < Duration::from_secs(120),
            "half never reached"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    child.kill().expect("SIGKILL");
    child.wait().expect("reaped");
    let run = only_run(out.path(), "prompt-parts");
    succeeded(
        local_run(
            &upstream.url,
            &["run".as_ref(), "--resume".as_ref(), run.as_os_str()],
        )
        .output()
        .expect("gepa-lab resumes"),
    );
    assert_eq!(outcome(&run), whole);
    assert_requests_are_chat_messages(&upstream.take());
}

#[test]
fn compare_sends_joined_prompt_files_as_chat_messages_and_diffs_each_part() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let upstream = upstream(&runtime, "model=m,seed=2");
    let dir = tempfile::tempdir().unwrap();
    let mut csv = String::from("review,label\n");
    for i in 0..12 {
        let label = if i % 3 == 0 { "negative" } else { "positive" };
        csv.push_str(&format!("review number {i},{label}\n"));
    }
    std::fs::write(dir.path().join("data.csv"), csv).unwrap();
    let prompt = |system: &str| {
        ChatPrompt::new(
            Some(system.into()),
            Vec::new(),
            USER.into(),
            &[PartName::System],
        )
        .unwrap()
        .join()
    };
    std::fs::write(dir.path().join("a.txt"), prompt(SYSTEM)).unwrap();
    let b = format!("{SYSTEM}\nBe brief.");
    std::fs::write(dir.path().join("b.txt"), prompt(&b)).unwrap();
    let output = crate::common::command()
        .args(["compare", "--yes", "--prompts", "a.txt", "b.txt"])
        .args([
            "--dataset",
            "data.csv",
            "--expected",
            "label",
            "--model",
            "m",
        ])
        .args(["--json", "--url", &upstream.url])
        .current_dir(dir.path())
        .env("GEPA_LAB_INFERENCE_KEY", "compare-key")
        .output()
        .expect("the gepa-lab binary runs");
    succeeded(output.clone());

    let requests = upstream.take();
    assert_eq!(requests.len(), 24, "each prompt on each row");
    for request in &requests {
        let roles: Vec<Role> = request.messages.iter().map(|m| m.role).collect();
        assert_eq!(roles, [Role::System, Role::User], "{request:?}");
        assert!(
            request.messages[1]
                .text()
                .starts_with("Review: review number")
        );
    }
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let parts = &report["contenders"][1]["diff"]["parts"];
    assert_eq!(parts[0]["part"], "system message");
    assert_eq!(parts[0]["fixed"], false);
    assert_eq!(parts[0]["stats"]["added_words"], 2, "{parts}");
    assert_eq!(parts[1]["part"], "user template");
    assert_eq!(parts[1]["fixed"], true);
    assert_eq!(parts[1]["stats"]["added_words"], 0);
}
