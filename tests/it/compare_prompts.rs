//! `compare --prompts A B --dataset FILE`: prompt files answered on a dataset through `serve`
//! (whose stand-in model is deterministic), scored, compared with the report's statistics; and
//! bad input refused before anything is sent.
use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

use crate::common::{Serve, fake_upstream};

const KEY: &str = "compare-key";

/// A folder with `data.csv`: 40 reviews, whose `hint` repeats the label, so a prompt that
/// offers only the hint is always right.
fn with_dataset() -> tempfile::TempDir {
    let temp = tempfile::tempdir().unwrap();
    let mut csv = String::from("review,hint,label\n");
    for i in 0..40 {
        let label = if i % 3 == 0 { "negative" } else { "positive" };
        csv.push_str(&format!("review number {i} was {label},{label},{label}\n"));
    }
    std::fs::write(temp.path().join("data.csv"), csv).unwrap();
    temp
}

fn write(dir: &Path, name: &str, text: &str) {
    std::fs::write(dir.join(name), text).unwrap();
}

/// `a.txt` offers both labels, so the stand-in model picks one by hash; `b.txt` offers only the
/// hint, which is the label, so it is always right.
fn write_review_and_hint_prompts(dir: &Path) {
    write(
        dir,
        "a.txt",
        "Review: {review}\nAnswer with one of: positive, negative\n",
    );
    write(
        dir,
        "b.txt",
        "Review: {review}\nAnswer with one of: {hint}, {hint}\n",
    );
}

fn compare(dir: &Path, url: &str, args: &[&str]) -> Output {
    crate::common::command()
        .arg("compare")
        .args(args)
        .args(["--url", url])
        .current_dir(dir)
        .env("GEPA_LAB_INFERENCE_KEY", KEY)
        .output()
        .expect("the gepa-lab binary runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Lines of the answer cache shared by every comparison under `reports/`.
fn cached_answers(dir: &Path) -> usize {
    std::fs::read_to_string(dir.join("reports/compare/cache.jsonl"))
        .map_or(0, |text| text.lines().count())
}

const ARGS: [&str; 11] = [
    "--yes",
    "--prompts",
    "a.txt",
    "b.txt",
    "--dataset",
    "data.csv",
    "--expected",
    "label",
    "--model",
    "m",
    "--json",
];

#[test]
fn prompt_files_are_answered_scored_and_compared_on_the_dataset() {
    let serve = Serve::start(&["sim:model=m"], &[&format!("{KEY}:100000")]);
    let temp = with_dataset();
    let dir = temp.path();
    write_review_and_hint_prompts(dir);

    // A model that is not local may cost money: without a terminal, --yes is needed.
    let unconfirmed = compare(dir, &serve.url, &ARGS[1..]);
    assert_eq!(unconfirmed.status.code(), Some(1));
    assert!(
        text(&unconfirmed.stderr).contains(&format!(
            "this comparison sends 80 request(s) to m at {} (0 answer(s) already cached); pass --yes",
            serve.url
        )),
        "{}",
        text(&unconfirmed.stderr)
    );
    assert_eq!(cached_answers(dir), 0, "nothing was sent");

    let output = compare(dir, &serve.url, &ARGS);
    assert!(output.status.success(), "{}", text(&output.stderr));
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["subject"], "prompt");
    assert_eq!(report["contenders"][0]["source"], "a.txt");
    assert_eq!(report["contenders"][1]["source"], "b.txt");
    assert_eq!(report["contenders"][0]["simulated"], true);

    // The table the numbers come from: every prompt on every row, named as given.
    let folder = std::fs::read_dir(dir.join("reports/compare"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.is_dir())
        .expect("a comparison folder");
    let mut reader = csv::Reader::from_path(folder.join("replay.csv")).unwrap();
    let rows: Vec<csv::StringRecord> = reader.records().map(Result::unwrap).collect();
    assert_eq!(rows.len(), 80);
    let headers = reader.headers().unwrap().clone();
    let column = |name: &str| headers.iter().position(|h| h == name).unwrap();
    let (version, expected, answer) = (column("version"), column("expected"), column("output"));
    let right = |prompt: &str| -> Vec<bool> {
        rows.iter()
            .filter(|r| &r[version] == prompt)
            .map(|r| r[answer].trim() == r[expected].trim())
            .collect()
    };
    let (a, b) = (right("a.txt"), right("b.txt"));
    assert_eq!((a.len(), b.len()), (40, 40));
    assert!(b.iter().all(|&ok| ok), "the hint is always the label");
    let a_right = a.iter().filter(|&&ok| ok).count();
    assert!(
        a_right > 5 && a_right < 35,
        "a picks labels by hash: {a_right}"
    );

    // Means, the paired counts and the verdict, against the rows just counted.
    let mean_a = report["contenders"][0]["mean"].as_f64().unwrap();
    assert!((mean_a - a_right as f64 / 40.0).abs() < 1e-12);
    assert_eq!(report["contenders"][1]["mean"].as_f64(), Some(1.0));
    let comparison = &report["comparisons"][0];
    assert_eq!(comparison["rows"], 40);
    assert_eq!(comparison["only_a"], 0);
    assert_eq!(comparison["only_b"], 40 - a_right);
    assert_eq!(comparison["verdict"], "better");
    assert!(comparison["p_value"].as_f64().unwrap() < 0.001);
    assert!(
        comparison["sentence"]
            .as_str()
            .unwrap()
            .contains("40 dataset rows")
    );
    assert!(folder.join("summary.md").is_file() && folder.join("compare.json").is_file());
    // The page: scores, the comparison, and each row b scored differently with both answers.
    let page = std::fs::read_to_string(folder.join("index.html")).unwrap();
    assert!(
        !page.contains("<script") && !page.contains("http"),
        "self-contained"
    );
    assert!(
        page.contains(&format!(
            "{} of 40 paired rows scored differently",
            40 - a_right
        )),
        "{page}"
    );
    assert!(page.contains("better (significant)"));
    assert!(
        page.matches("<td class=\"n\">").count() >= 40 - a_right,
        "a line per differing row"
    );
    assert_eq!(cached_answers(dir), 80);

    // The same comparison again asks nothing; a changed prompt asks only its own rows.
    let again = compare(dir, &serve.url, &ARGS);
    assert!(again.status.success());
    assert!(
        text(&again.stderr).contains("0 request(s) to send, 80 answer(s) already cached"),
        "{}",
        text(&again.stderr)
    );
    assert_eq!(
        serde_json::from_slice::<Value>(&again.stdout).unwrap(),
        report
    );
    write(
        dir,
        "b.txt",
        "Review: {review}\nAnswer with one of: negative, positive\n",
    );
    let changed = compare(dir, &serve.url, &ARGS);
    assert!(
        text(&changed.stderr).contains("40 request(s) to send, 40 answer(s) already cached"),
        "{}",
        text(&changed.stderr)
    );
    assert_eq!(cached_answers(dir), 120);

    let mut markdown_args = ARGS.to_vec();
    markdown_args.pop();
    markdown_args.push("--markdown");
    let markdown = text(&compare(dir, &serve.url, &markdown_args).stdout);
    assert!(markdown.contains("**Simulated:**"), "{markdown}");
    assert!(
        markdown.contains("| prompt | model | mean (95% CI) |"),
        "{markdown}"
    );
    assert!(markdown.contains("| a.txt | m |"), "{markdown}");
}

#[test]
fn failed_answers_are_left_out_and_counted() {
    // Every third request gets a 503 (no node for the model), which is not retried; those rows
    // stay in the table with their error and are not paired.
    let serve = Serve::start(
        &["sim:model=m,faults=ok*2/503,cycle=3"],
        &[&format!("{KEY}:100000")],
    );
    let temp = with_dataset();
    let dir = temp.path();
    write(
        dir,
        "a.txt",
        "{review}\nAnswer with one of: positive, negative",
    );
    write(
        dir,
        "b.txt",
        "{review}\nOne of: positive, negative. Be brief.",
    );
    let mut args = ARGS.to_vec();
    args.extend(["--concurrency", "1"]);
    let output = compare(dir, &serve.url, &args);
    let stderr = text(&output.stderr);
    // Answers are missing: the comparison is printed, and the exit status says it is short.
    assert_eq!(output.status.code(), Some(6), "{stderr}");
    assert!(stderr.contains("Run the same command again"), "{stderr}");
    assert!(
        stderr.contains("answers failed and are left out"),
        "{stderr}"
    );
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    // One request at a time, a's 40 rows then b's: requests 3, 6, 9, ... fail, so a loses rows
    // 3, 6, ..., 39 and b rows 2, 5, ..., 38 (its requests 42, 45, ...): 13 each, no row twice.
    let answered = |i: usize| report["contenders"][i]["rows"].as_u64().unwrap();
    assert_eq!((answered(0), answered(1)), (27, 27), "{report}");
    assert_eq!(
        report["comparisons"][0]["rows"], 14,
        "only rows both answered are paired"
    );
    assert!(stderr.contains("26 of 80 answers failed"), "{stderr}");
    // Counted per prompt, not "40 of 40 answered by each".
    let settings = report["settings"].to_string();
    assert!(
        settings.contains("answered: a.txt 27 (13 missing), b.txt 27 (13 missing)"),
        "{settings}"
    );
    // Allowed: the same comparison (its failed rows asked again) exits 0.
    args.push("--allow-missing");
    let output = compare(dir, &serve.url, &args);
    assert!(output.status.success(), "{}", text(&output.stderr));
}

#[test]
fn bad_input_is_refused_before_anything_is_sent() {
    let temp = with_dataset();
    let dir = temp.path();
    write(
        dir,
        "good.txt",
        "Review: {review}\nAnswer with one of: positive, negative",
    );
    write(
        dir,
        "other.txt",
        "Review: {review}\nAnswer positive or negative",
    );
    write(dir, "typo.txt", "Review: {reviw}");
    write(dir, "unclosed.txt", "Review:\n {review");
    write(
        dir,
        "empty_label.csv",
        "review,label\nfine,positive\n\"two\nlines\",  \n",
    );
    // Nothing listens here: a request would fail with exit 3, not be refused with exit 1.
    let url = "http://127.0.0.1:9";
    let cases: [(&[&str], &str); 7] = [
        (
            &[
                "--prompts",
                "good.txt",
                "typo.txt",
                "--dataset",
                "data.csv",
                "--expected",
                "label",
            ],
            "typo.txt: placeholder {reviw} is not a column of data.csv (columns: review, hint, label); did you mean {review}?",
        ),
        (
            &[
                "--prompts",
                "good.txt",
                "unclosed.txt",
                "--dataset",
                "data.csv",
                "--expected",
                "label",
            ],
            "unclosed.txt:2:2: unclosed `{`",
        ),
        (
            &[
                "--prompts",
                "good.txt",
                "other.txt",
                "--dataset",
                "data.csv",
                "--expected",
                "labl",
            ],
            "--expected: column \"labl\" is not in the header of data.csv (columns: review, hint, label); did you mean \"label\"?",
        ),
        (
            &[
                "--prompts",
                "good.txt",
                "other.txt",
                "--dataset",
                "data.csv",
            ],
            "--expected: column \"expected\" is not in the header",
        ),
        (
            &[
                "--prompts",
                "good.txt",
                "other.txt",
                "--dataset",
                "empty_label.csv",
                "--expected",
                "label",
            ],
            "line 3 (row 2): column \"label\" (expected output) is empty",
        ),
        (
            &[
                "--prompts",
                "good.txt",
                "missing.txt",
                "--dataset",
                "data.csv",
                "--expected",
                "label",
            ],
            "missing.txt: cannot read the prompt file",
        ),
        (
            &[
                "--prompts",
                "good.txt",
                "other.txt",
                "--dataset",
                "data.csv",
                "--expected",
                "label",
                "--scorer",
                "judge",
            ],
            "--scorer judge needs a judge: --judge-model MODEL and --rubric FILE",
        ),
    ];
    for (args, message) in cases {
        let output = compare(dir, url, args);
        let stderr = text(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(stderr.contains(message), "{args:?}: {stderr}");
    }
    assert!(
        !dir.join("reports").exists(),
        "nothing was asked or written"
    );

    // Usage errors: one prompt, no dataset, run directories and prompts together, and one
    // prompt file named twice (its answers would share one version's name).
    let twice = compare(
        dir,
        url,
        &[
            "--prompts",
            "good.txt",
            "other.txt",
            "good.txt",
            "--dataset",
            "data.csv",
            "--expected",
            "label",
        ],
    );
    assert_eq!(twice.status.code(), Some(2), "{}", text(&twice.stderr));
    assert!(
        text(&twice.stderr).contains("--prompts names good.txt twice"),
        "{}",
        text(&twice.stderr)
    );
    for args in [
        &["--prompts", "good.txt", "--dataset", "data.csv"][..],
        &["--prompts", "good.txt", "other.txt"],
        &[
            "run-a",
            "run-b",
            "--prompts",
            "good.txt",
            "other.txt",
            "--dataset",
            "data.csv",
        ],
        &[
            "--prompts",
            "good.txt",
            "other.txt",
            "--dataset",
            "data.csv",
            "--concurrency",
            "0",
        ],
        &[
            "--prompts",
            "good.txt",
            "other.txt",
            "--dataset",
            "data.csv",
            "--concurrency",
            "257",
        ],
        &[
            "--prompts",
            "good.txt",
            "other.txt",
            "--dataset",
            "data.csv",
            "--max-tokens",
            "0",
        ],
    ] {
        let output = compare(dir, url, args);
        assert_eq!(
            output.status.code(),
            Some(2),
            "{args:?}: {}",
            text(&output.stderr)
        );
    }
}

/// The `replay.csv` of the only comparison folder under `dir/reports/compare/`.
fn replay_rows(dir: &Path) -> Vec<std::collections::HashMap<String, String>> {
    let folder = std::fs::read_dir(dir.join("reports/compare"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.is_dir())
        .expect("a comparison folder");
    csv::Reader::from_path(folder.join("replay.csv"))
        .unwrap()
        .deserialize()
        .map(Result::unwrap)
        .collect()
}

/// Two short prompt files compared on the dataset through `serve`, with `extra` arguments.
fn compare_two(serve: &Serve, extra: &[&str]) -> (tempfile::TempDir, Output) {
    let temp = with_dataset();
    let dir = temp.path();
    write(
        dir,
        "a.txt",
        "{review}\nAnswer with one of: positive, negative",
    );
    write(dir, "b.txt", "{review}\nOne of: positive, negative.");
    let mut args = ARGS.to_vec();
    args.extend(extra);
    let output = compare(dir, &serve.url, &args);
    (temp, output)
}

fn median(mut values: Vec<u64>) -> u64 {
    values.sort_unstable();
    values[values.len() / 2]
}

#[test]
fn latency_is_the_answered_request_alone_and_pacing_is_counted_as_waiting() {
    // The case from the field: rpm pacing made `latency_ms` a median of 1504 ms where the server
    // answered in 205. Here 16 requests, 4 in flight, paced 200 ms apart (300 rpm).
    let serve = Serve::start(&["sim:model=m"], &[&format!("{KEY}:100000")]);
    let (temp, output) = compare_two(
        &serve,
        &["--limit", "8", "--rpm", "300", "--concurrency", "4"],
    );
    let dir = temp.path();
    assert!(output.status.success(), "{}", text(&output.stderr));
    let rows = replay_rows(dir);
    assert_eq!(rows.len(), 16);
    let column =
        |name: &str| -> Vec<u64> { rows.iter().map(|r| r[name].parse().unwrap()).collect() };
    let (latency, waited) = (column("latency_ms"), column("waited_ms"));
    // 16 requests 200 ms apart span at least 3 s, almost all of it spent waiting for a slot.
    assert!(
        waited.iter().sum::<u64>() >= 3000,
        "the pacing is recorded as waiting: {waited:?}"
    );
    assert!(
        median(latency.clone()) * 3 < median(waited.clone()),
        "latency {latency:?} is not the wait {waited:?}"
    );
}

#[test]
fn without_a_known_rpm_the_client_adapts_to_429s_and_loses_no_answer() {
    // The case from the field: a 120 rpm key, no --rpm, and one request gave up on a 429 after
    // its retries while the summary said every row was answered. Here a 10 rpm key and 4
    // requests in flight: 10 answers come at once, the other 6 meet a 429 that says to wait
    // most of the window (5 seconds here; a minute at the service).
    let serve = Serve::start_with(
        &["sim:model=m"],
        &[&format!("{KEY}:10")],
        &["--rate-window", "5"],
    );
    let (temp, output) = compare_two(&serve, &["--limit", "8", "--concurrency", "4"]);
    let dir = temp.path();
    let stderr = text(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    let rows = replay_rows(dir);
    assert_eq!(rows.len(), 16);
    let failed: Vec<&String> = rows
        .iter()
        .map(|r| &r["error"])
        .filter(|e| !e.is_empty())
        .collect();
    assert!(failed.is_empty(), "{failed:?}");
    let (requests, rate_limited, _) = serve.usage_of_key_with_rpm(10);
    assert!(rate_limited > 0, "the limit was met: {requests} requests");
    assert_eq!(requests, 16, "each answered once");
}

#[test]
fn a_ci_job_gates_a_prompt_change_and_reads_each_row_in_its_test_panel() {
    let serve = Serve::start(&["sim:model=m"], &[&format!("{KEY}:100000")]);
    let temp = with_dataset();
    let dir = temp.path();
    // `hint.txt` always gives the label; `plain.txt` picks one by hash.
    write(
        dir,
        "hint.txt",
        "Review: {review}\nAnswer with one of: {hint}, {hint}\n",
    );
    write(
        dir,
        "plain.txt",
        "Review: {review}\nAnswer with one of: positive, negative\n",
    );
    let gated = |first: &str, second: &str| {
        let args = [
            "--yes",
            "--prompts",
            first,
            second,
            "--dataset",
            "data.csv",
            "--expected",
            "label",
            "--model",
            "m",
            "--json",
            "--fail-under",
            "0.9",
            "--fail-if-worse",
            "--junit",
            "junit.xml",
        ];
        let output = compare(dir, &serve.url, &args);
        let xml = std::fs::read_to_string(dir.join("junit.xml")).unwrap();
        (output, xml)
    };

    // The change makes it worse: both gates miss, exit 4, and every lost row is a failed case.
    let (output, xml) = gated("hint.txt", "plain.txt");
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(4), "{stderr}");
    assert!(
        stderr.contains("--fail-under 0.9: missed (plain.txt scored 0."),
        "{stderr}"
    );
    assert!(
        stderr.contains("--fail-if-worse: missed (plain.txt: "),
        "{stderr}"
    );
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    let plain_right = (report["contenders"][1]["mean"].as_f64().unwrap() * 40.0).round() as usize;
    assert!(xml.starts_with("<?xml"));
    assert!(
        xml.contains("<testsuite name=\"hint.txt\" tests=\"40\" failures=\"0\""),
        "{xml}"
    );
    assert!(
        xml.contains(&format!(
            "<testsuite name=\"plain.txt\" tests=\"40\" failures=\"{}\"",
            40 - plain_right
        )),
        "{xml}"
    );
    // 40 rows of each prompt, and the comparison, which fails as --fail-if-worse did.
    assert_eq!(xml.matches("<testcase ").count(), 81);
    assert!(
        xml.contains("<testsuite name=\"comparisons\" tests=\"1\" failures=\"1\"")
            && xml.contains("name=\"plain.txt against hint.txt\""),
        "{xml}"
    );
    assert_eq!(xml.matches("<failure ").count(), 40 - plain_right + 1);
    assert!(
        xml.contains("expected: negative") && xml.contains("answer: "),
        "{xml}"
    );

    // The change makes it better: both gates pass, exit 0.
    let (output, xml) = gated("plain.txt", "hint.txt");
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("--fail-under 0.9: passed (hint.txt 1.000)"),
        "{stderr}"
    );
    assert!(stderr.contains("--fail-if-worse: passed"), "{stderr}");
    assert!(xml.contains("<testsuite name=\"hint.txt\" tests=\"40\" failures=\"0\""));
    assert!(
        xml.contains("<testsuite name=\"comparisons\" tests=\"1\" failures=\"0\""),
        "{xml}"
    );

    // Out of range: refused before anything is sent.
    let output = compare(
        dir,
        &serve.url,
        &[
            "--prompts",
            "a",
            "b",
            "--dataset",
            "data.csv",
            "--fail-under",
            "1.5",
        ],
    );
    assert_eq!(output.status.code(), Some(2), "{}", text(&output.stderr));
}

#[test]
fn a_refused_key_says_which_key_was_sent_and_how_to_set_one() {
    let serve = Serve::start(&["sim:model=m"], &[&format!("{KEY}:100000")]);
    let temp = with_dataset();
    let dir = temp.path();
    write(dir, "a.txt", "{review}");
    write(dir, "b.txt", "{review}!");
    let output = crate::common::command()
        .args([
            "compare",
            "--yes",
            "--prompts",
            "a.txt",
            "b.txt",
            "--dataset",
            "data.csv",
        ])
        .args([
            "--expected",
            "label",
            "--model",
            "m",
            "--limit",
            "2",
            "--url",
            &serve.url,
        ])
        .current_dir(dir)
        .env("GEPA_LAB_INFERENCE_KEY", "not-a-key-of-this-server")
        .env("GEPA_LAB_CONFIG", dir.join("no-config.toml"))
        .output()
        .unwrap();
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(6), "{stderr}");
    assert!(
        stderr.contains(&format!("tip: the service refused the API key (401 Unauthorized or 403 Forbidden). Sent: the key in GEPA_LAB_INFERENCE_KEY to the inference API ({})", serve.url)),
        "{stderr}"
    );
    assert!(
        !stderr.contains("evolution API ("),
        "compare sends no key to an evolution API: {stderr}"
    );
    assert!(
        !stderr.contains("not-a-key-of-this-server"),
        "the key itself is never printed"
    );
}

#[test]
fn progress_is_printed_plainly_in_a_log_and_ctrl_c_keeps_what_was_answered() {
    // Paced at 120 rpm: 20 requests take about 10 s, so an interrupt lands halfway.
    let serve = Serve::start(&["sim:model=m"], &[&format!("{KEY}:100000")]);
    let temp = with_dataset();
    let dir = temp.path();
    write(
        dir,
        "a.txt",
        "{review}\nAnswer with one of: positive, negative",
    );
    write(dir, "b.txt", "{review}\nOne of: positive, negative.");
    let mut args = ARGS.to_vec();
    args.extend(["--limit", "10", "--rpm", "120", "--concurrency", "1"]);
    let child = crate::common::command()
        .arg("compare")
        .args(&args)
        .args(["--url", &serve.url])
        .current_dir(dir)
        .env("GEPA_LAB_INFERENCE_KEY", KEY)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_secs(4));
    let sent = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
    let output = child.wait_with_output().unwrap();
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(130), "{stderr}");
    assert!(
        stderr.contains("interrupted: every answer received so far is kept in"),
        "{stderr}"
    );
    assert!(
        stderr.contains("answers: 1 of 20 ("),
        "a plain line at once: {stderr}"
    );
    let kept = cached_answers(dir);
    assert!((2..20).contains(&kept), "{kept} answers kept: {stderr}");

    // The same command goes on where it stopped, and says how far it is as it goes.
    let output = compare(dir, &serve.url, &args);
    let stderr = text(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "{} request(s) to send, {kept} answer(s) already cached",
            20 - kept
        )),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!("answers: {0} of {0} (", 20 - kept)),
        "{stderr}"
    );
    assert_eq!(cached_answers(dir), 20);
}

#[test]
fn a_users_scorer_command_scores_each_answer_and_its_failures_are_errors() {
    let serve = Serve::start(&["sim:model=m"], &[&format!("{KEY}:100000")]);
    let temp = with_dataset();
    let dir = temp.path();
    // Full marks for an answer that names the label, half for any other answer; it fails on
    // row 3 by printing something that is not a reply.
    write(
        dir,
        "score.sh",
        r#"while read -r line; do
  case "$line" in
    *'"row":3}'*) echo 'not json' ;;
    *'"answer":"positive"'*'"expected":"positive"'*|*'"answer":"negative"'*'"expected":"negative"'*) echo '{"score": 1, "feedback": "right"}' ;;
    *) echo '{"score": 0.5, "feedback": "half"}' ;;
  esac
done
"#,
    );
    write(
        dir,
        "a.txt",
        "{review}\nAnswer with one of: positive, negative",
    );
    write(
        dir,
        "b.txt",
        "Review: {review}\nAnswer with one of: {hint}, {hint}\n",
    );
    let mut args = ARGS.to_vec();
    args.extend(["--limit", "6", "--scorer", "command:sh score.sh"]);
    let output = compare(dir, &serve.url, &args);
    let stderr = text(&output.stderr);
    // Row 3 of each prompt could not be scored: missing, exit 6, never a zero.
    assert_eq!(output.status.code(), Some(6), "{stderr}");
    let rows = replay_rows(dir);
    let row3: Vec<&String> = rows
        .iter()
        .filter(|r| r["row"] == "3")
        .map(|r| &r["error"])
        .collect();
    assert_eq!(row3.len(), 2);
    assert!(
        row3.iter().all(|e| e
            .contains("scorer command `sh score.sh`: its reply \"not json\" is not a JSON object")),
        "{row3:?}"
    );
    let b_scores: Vec<&String> = rows
        .iter()
        .filter(|r| r["version"] == "b.txt" && r["row"] != "3")
        .map(|r| &r["score"])
        .collect();
    assert_eq!(b_scores.len(), 5);
    assert!(b_scores.iter().all(|s| s.as_str() == "1.0"), "{b_scores:?}");
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(
        report["contenders"][1]["rows"], 5,
        "the unscored row is left out"
    );

    // A program that is not there is refused before anything is sent.
    let mut args = ARGS.to_vec();
    args.extend(["--scorer", "command:./nope.sh"]);
    let output = compare(dir, &serve.url, &args);
    assert_eq!(output.status.code(), Some(1), "{}", text(&output.stderr));
    assert!(
        text(&output.stderr).contains("program `./nope.sh` not found"),
        "{}",
        text(&output.stderr)
    );
}

#[test]
fn a_judge_grades_each_answer_and_a_failed_grade_is_an_error_not_a_zero() {
    // The judge is serve's second stand-in model; for about one grading request in two it
    // always answers against the grade's schema (serve's second try and the client's retries
    // get the same), so about half the grades fail.
    let serve = Serve::start(
        &["sim:model=m", "sim:model=judge-sim,broken_schema_every=2"],
        &[&format!("{KEY}:100000")],
    );
    let temp = with_dataset();
    let dir = temp.path();
    write(
        dir,
        "a.txt",
        "{review}\nAnswer with one of: positive, negative",
    );
    write(
        dir,
        "b.txt",
        "Review: {review}\nAnswer with one of: {hint}, {hint}\n",
    );
    write(
        dir,
        "rubric.txt",
        "Full marks when the answer names the expected label.",
    );
    let mut args = ARGS.to_vec();
    args.extend([
        "--limit",
        "6",
        "--scorer",
        "judge",
        "--judge-model",
        "judge-sim",
    ]);
    args.extend(["--rubric", "rubric.txt", "--allow-missing"]);
    let output = compare(dir, &serve.url, &args);
    let stderr = text(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    let rows = replay_rows(dir);
    assert_eq!(rows.len(), 12);
    let (ungraded, graded): (Vec<_>, Vec<_>) = rows.iter().partition(|r| !r["error"].is_empty());
    assert!(!ungraded.is_empty() && !graded.is_empty(), "{rows:?}");
    for row in &ungraded {
        assert!(row["error"].starts_with("judge: "), "{row:?}");
        assert!(!row["output"].is_empty(), "the answer is kept: {row:?}");
        assert_eq!(row["feedback"], "not graded");
    }
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    let rows_of = |i: usize| report["contenders"][i]["rows"].as_u64().unwrap() as usize;
    assert_eq!(
        rows_of(0) + rows_of(1),
        graded.len(),
        "means rest on graded rows only"
    );

    // The rubric must be readable and only goes with the judge.
    let mut args = ARGS.to_vec();
    args.extend([
        "--judge-model",
        "judge-sim",
        "--rubric",
        "nope.txt",
        "--scorer",
        "judge",
    ]);
    let output = compare(dir, &serve.url, &args);
    assert_eq!(output.status.code(), Some(1));
    assert!(text(&output.stderr).contains("nope.txt: cannot read the rubric"));
}

#[test]
fn an_answer_far_longer_than_its_token_limit_is_not_kept() {
    // The case from the field: a 10 MB answer to a `max_tokens = 8` request was kept whole.
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let url = fake_upstream(
        &runtime,
        serde_json::json!({
            "id": "x", "model": "m",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "positive ".repeat(30_000)}, "finish_reason": "stop"}],
        }),
    );

    let temp = with_dataset();
    let dir = temp.path();
    write(dir, "a.txt", "{review}");
    write(dir, "b.txt", "{review}!");
    let mut args = ARGS.to_vec();
    args.extend(["--limit", "2", "--max-tokens", "8"]);
    let output = compare(dir, &url, &args);
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(6), "{stderr}");
    let rows = replay_rows(dir);
    assert_eq!(rows.len(), 4);
    for row in &rows {
        assert!(
            row["error"]
                .contains("the answer is 270000 bytes, more than 65536 that max_tokens 8 allows"),
            "{row:?}"
        );
        assert!(row["output"].is_empty());
    }
    assert_eq!(cached_answers(dir), 0, "nothing of it is cached");
}

#[test]
fn a_response_body_past_the_read_limit_is_not_read_further() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    // 17 MiB of content: past the 16 MiB a body is read to.
    let url = fake_upstream(
        &runtime,
        serde_json::json!({
            "id": "x", "model": "m",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "y".repeat(17 << 20)}}],
        }),
    );

    let temp = with_dataset();
    let dir = temp.path();
    write(dir, "a.txt", "{review}");
    write(dir, "b.txt", "{review}!");
    let mut args = ARGS.to_vec();
    args.extend(["--limit", "1", "--concurrency", "1"]);
    let output = compare(dir, &url, &args);
    assert_eq!(output.status.code(), Some(6), "{}", text(&output.stderr));
    for row in replay_rows(dir) {
        assert!(
            row["error"].contains("response body larger than 16777216 bytes"),
            "{row:?}"
        );
    }
}

#[test]
fn repeated_answers_are_asked_apart_and_every_statistic_counts_rows() {
    // `varies=1`: at a temperature above 0 the stand-in model's answers differ between calls.
    let serve = Serve::start(&["sim:model=m,varies=1"], &[&format!("{KEY}:100000")]);
    let temp = with_dataset();
    let dir = temp.path();
    write_review_and_hint_prompts(dir);
    let mut args = ARGS.to_vec();
    args.extend(["--temperature", "0.8", "--repeat", "3"]);
    let output = compare(dir, &serve.url, &args);
    assert!(output.status.success(), "{}", text(&output.stderr));
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();

    // Every (prompt, row) answered three times, each a request of its own.
    let rows = replay_rows(dir);
    assert_eq!(rows.len(), 2 * 40 * 3);
    assert_eq!(cached_answers(dir), 240);
    // (prompt, row) -> each sample's (number, score, answer).
    type Samples = Vec<(u32, f64, String)>;
    let mut by_row: std::collections::BTreeMap<(String, usize), Samples> = Default::default();
    for row in &rows {
        by_row
            .entry((row["version"].clone(), row["row"].parse().unwrap()))
            .or_default()
            .push((
                row["sample"].parse().unwrap(),
                row["score"].parse().unwrap(),
                row["output"].clone(),
            ));
    }
    assert!(
        by_row.values().all(|samples| {
            let mut numbers: Vec<u32> = samples.iter().map(|s| s.0).collect();
            numbers.sort_unstable();
            numbers == [1, 2, 3]
        }),
        "samples 1 to 3 of each row"
    );

    // The mean is over rows of each row's mean; intervals and the test count 40 rows, not 120.
    let row_means = |prompt: &str| -> Vec<f64> {
        by_row
            .iter()
            .filter(|((version, _), _)| version == prompt)
            .map(|(_, samples)| samples.iter().map(|s| s.1).sum::<f64>() / 3.0)
            .collect()
    };
    let means_a = row_means("a.txt");
    let mean_a = means_a.iter().sum::<f64>() / 40.0;
    let a = &report["contenders"][0];
    assert_eq!(a["rows"], 40);
    assert!((a["mean"].as_f64().unwrap() - mean_a).abs() < 1e-12);
    assert_eq!(report["comparisons"][0]["rows"], 40);
    assert_eq!(
        report["comparisons"][0]["test"], "paired_bootstrap",
        "row means are not binary, so not McNemar"
    );

    // Agreement: the hint prompt's answers always agree; a's do not on some rows.
    let unanimous = |prompt: &str| {
        by_row
            .iter()
            .filter(|((version, _), samples)| {
                version == prompt && samples.iter().all(|s| s.2.trim() == samples[0].2.trim())
            })
            .count()
    };
    let agreement = &a["agreement"];
    assert_eq!(agreement["rows"], 40);
    assert_eq!(agreement["unanimous"], unanimous("a.txt"));
    assert!(unanimous("a.txt") < 40, "answers vary at temperature 0.8");
    assert_eq!(report["contenders"][1]["agreement"]["unanimous"], 40);
    assert_eq!(report["contenders"][1]["agreement"]["same_score"], 40);
    let same_score = by_row
        .iter()
        .filter(|((version, _), samples)| {
            version == "a.txt" && samples.iter().all(|s| s.1 == samples[0].1)
        })
        .count();
    assert_eq!(agreement["same_score"], same_score);
    let page = std::fs::read_to_string(
        std::fs::read_dir(dir.join("reports/compare"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| p.is_dir())
            .unwrap()
            .join("index.html"),
    )
    .unwrap();
    assert!(
        page.contains("answers · scores agree"),
        "the agreement column"
    );
    assert!(page.contains("mean of 3 of 3 answers"), "a row's answers");

    // Asked again, every repeat comes from the cache.
    let again = compare(dir, &serve.url, &args);
    assert!(
        text(&again.stderr).contains("0 request(s) to send, 240 answer(s) already cached"),
        "{}",
        text(&again.stderr)
    );

    // The range is checked, and repeats at temperature 0 get a warning.
    for bad in ["0", "101", "x"] {
        let mut args = ARGS.to_vec();
        args.extend(["--repeat", bad]);
        let refused = compare(dir, &serve.url, &args);
        assert_eq!(refused.status.code(), Some(2), "--repeat {bad}");
        assert!(text(&refused.stderr).contains("--repeat"));
    }
    let mut greedy = ARGS.to_vec();
    greedy.extend(["--repeat", "2", "--limit", "2"]);
    let warned = compare(dir, &serve.url, &greedy);
    assert!(warned.status.success(), "{}", text(&warned.stderr));
    assert!(
        text(&warned.stderr).contains("warning: --repeat 2 at --temperature 0"),
        "{}",
        text(&warned.stderr)
    );
}
