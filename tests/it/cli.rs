//! The `models` and `chat` subcommands against `serve`.
use std::process::Output;

use crate::common::Serve;

const KEY: &str = "dkn_live_cli_key";

fn gepa_lab(serve: &Serve, args: &[&str]) -> Output {
    crate::common::command()
        .args(args)
        .env("GEPA_LAB_INFERENCE_URL", &serve.url)
        .env("GEPA_LAB_INFERENCE_KEY", KEY)
        .output()
        .expect("run gepa-lab")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn models_prints_a_table_most_available_first() {
    let serve = Serve::start(&["sim:model=a-text,model=b-vl", "sim:model=b-vl"], &[KEY]);
    let out = gepa_lab(&serve, &["models"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{stdout}");
    assert!(
        lines[0].starts_with("model") && lines[0].contains("node_count"),
        "{stdout}"
    );
    assert!(
        lines[1].starts_with("b-vl") && lines[1].contains(" 2 ") && lines[1].contains("vision")
    );
    assert!(lines[2].starts_with("a-text") && lines[2].contains(" 1 "));
}

#[test]
fn chat_prints_the_answer_plain_and_streamed() {
    let serve = Serve::start(&["sim:model=m"], &[KEY]);
    let question = "Is this spam?\nAnswer with one of: spam, ham";
    let plain = gepa_lab(
        &serve,
        &["chat", "--model", "m", "--system", "Be careful.", question],
    );
    assert!(plain.status.success(), "{}", text(&plain.stderr));
    let answer = text(&plain.stdout);
    assert!(["spam\n", "ham\n"].contains(&answer.as_str()), "{answer:?}");
    let streamed = gepa_lab(
        &serve,
        &[
            "chat",
            "--model",
            "m",
            "--system",
            "Be careful.",
            "--stream",
            question,
        ],
    );
    assert!(streamed.status.success(), "{}", text(&streamed.stderr));
    assert_eq!(text(&streamed.stdout), answer);
}

#[test]
fn chat_falls_back_and_says_which_model_answered() {
    let serve = Serve::start(&["sim:model=small"], &[KEY]);
    let out = gepa_lab(
        &serve,
        &["chat", "--model", "big", "--model", "small", "hello there"],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("answered by small"), "{stderr}");
}

#[test]
fn chat_sends_images_only_to_vision_models() {
    let serve = Serve::start(&["sim:model=m-vl,model=m"], &[KEY]);
    let dir = tempfile::tempdir().unwrap();
    let image = dir.path().join("photo.png");
    std::fs::write(&image, b"\x89PNG\r\n\x1a\nnot really").unwrap();
    let image = image.to_str().unwrap();
    let ok = gepa_lab(
        &serve,
        &["chat", "--model", "m-vl", "--image", image, "What is it?"],
    );
    assert!(ok.status.success(), "{}", text(&ok.stderr));
    let refused = gepa_lab(
        &serve,
        &["chat", "--model", "m", "--image", image, "What is it?"],
    );
    assert_eq!(refused.status.code(), Some(1));
    assert!(
        text(&refused.stderr).contains("image_url"),
        "{}",
        text(&refused.stderr)
    );
}

#[test]
fn chat_checks_structured_answers_against_the_schema() {
    let serve = Serve::start(&["sim:model=m"], &[KEY]);
    let dir = tempfile::tempdir().unwrap();
    let schema = dir.path().join("verdict.json");
    std::fs::write(
        &schema,
        r#"{"type":"object","required":["verdict"],"properties":{"verdict":{"enum":["yes","no"]}}}"#,
    )
    .unwrap();
    let schema = schema.to_str().unwrap();
    let good = gepa_lab(
        &serve,
        &["chat", "--model", "m", "--schema", schema, "Is it?"],
    );
    assert!(good.status.success(), "{}", text(&good.stderr));
    let value: serde_json::Value = serde_json::from_slice(&good.stdout).unwrap();
    assert!(
        value["verdict"] == "yes" || value["verdict"] == "no",
        "{value}"
    );
    // A server that passes on an answer breaking the schema: the client says so, exit 1.
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let lax = crate::common::fake_upstream(
        &runtime,
        serde_json::json!({"id": "x", "model": "m", "choices": [{"message": {"content": "{\"verdict\": \"maybe\"}"}}]}),
    );
    let bad = crate::common::command()
        .args([
            "chat", "--model", "m", "--schema", schema, "--url", &lax, "Is it?",
        ])
        .env("GEPA_LAB_INFERENCE_KEY", KEY)
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(1), "{}", text(&bad.stderr));
    assert!(
        text(&bad.stderr).contains("does not conform"),
        "{}",
        text(&bad.stderr)
    );
}

/// The json_schema scorer reads a JSON answer inside a Markdown fence; `chat --schema` does the
/// same, through the same function.
#[test]
fn chat_accepts_a_schema_answer_inside_a_markdown_fence() {
    let dir = tempfile::tempdir().unwrap();
    let schema = dir.path().join("verdict.json");
    std::fs::write(
        &schema,
        r#"{"type":"object","required":["verdict"],"properties":{"verdict":{"enum":["yes","no"]}}}"#,
    )
    .unwrap();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    for (content, code) in [
        ("```json\n{\"verdict\": \"yes\"}\n```", 0),
        ("```json\n{\"verdict\": \"maybe\"}\n```", 1),
    ] {
        let fenced = crate::common::fake_upstream(
            &runtime,
            serde_json::json!({"id": "x", "model": "m", "choices": [{"message": {"content": content}}]}),
        );
        let output = crate::common::command()
            .args(["chat", "--model", "m", "--schema"])
            .arg(&schema)
            .args(["--url", &fenced, "Is it?"])
            .env("GEPA_LAB_INFERENCE_KEY", KEY)
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(code), "{}", text(&output.stderr));
    }
}

#[test]
fn a_wrong_key_fails_without_showing_the_key() {
    let serve = Serve::start(&["sim:model=m"], &[KEY]);
    let out = crate::common::command()
        .args(["chat", "--model", "m", "hello"])
        .env("GEPA_LAB_INFERENCE_URL", &serve.url)
        .env("GEPA_LAB_INFERENCE_KEY", "dkn_live_not_this_one")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("401"), "{stderr}");
    assert!(!stderr.contains("not_this_one"), "{stderr}");
    assert!(!serve.log().contains("not_this_one"));
    assert!(!serve.log().contains(KEY));
}

#[test]
fn completion_scripts_know_every_subcommand_and_load_in_bash() {
    for shell in ["bash", "zsh", "fish", "powershell"] {
        let output = crate::common::gepa_lab(&["completions", shell]);
        assert!(output.status.success(), "{shell}");
        let script = text(&output.stdout);
        for word in [
            "run",
            "compare",
            "fail-under",
            "allow-missing",
            "completions",
        ] {
            assert!(script.contains(word), "{shell} lacks {word}");
        }
    }
    let script = crate::common::gepa_lab(&["completions", "bash"]).stdout;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("gepa-lab.bash");
    std::fs::write(&file, script).unwrap();
    let loaded = std::process::Command::new("bash")
        .arg("-c")
        .arg(format!("source {} && complete -p gepa-lab", file.display()))
        .output()
        .expect("bash runs");
    assert!(
        text(&loaded.stdout).contains("gepa-lab"),
        "{}{}",
        text(&loaded.stdout),
        text(&loaded.stderr)
    );
    let unknown = crate::common::gepa_lab(&["completions", "tcsh"]);
    assert_eq!(unknown.status.code(), Some(2));
}

#[test]
#[cfg(unix)]
fn a_reader_that_stops_reading_ends_the_command_quietly_not_with_a_panic() {
    use std::io::{BufRead, BufReader};
    use std::os::unix::process::ExitStatusExt;
    use std::process::Stdio;
    // Over 64 KiB, more than a pipe holds, so the command is still writing when the reader
    // closes its end (`gepa-lab completions bash | head -1`).
    let mut child = crate::common::command()
        .args(["completions", "bash"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run gepa-lab");
    let mut first = String::new();
    let mut reader = BufReader::new(child.stdout.take().expect("piped"));
    reader.read_line(&mut first).expect("a first line");
    assert!(!first.is_empty());
    drop(reader);
    let out = child.wait_with_output().expect("gepa-lab ends");
    let stderr = text(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(out.status.signal(), Some(libc::SIGPIPE), "{:?}", out.status);
}
