//! CSV files as users really have them: byte-order marks, CRLF, quoted newlines, broken rows,
//! and files too large to hold in memory.
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::common::{gepa_lab, root, stdout, validate_json};

/// Writes `data.csv` and an experiment using it (inputs `text`, expected `label`) into `dir`.
fn experiment(dir: &Path, csv: &[u8], minibatch: usize, pareto: usize) -> PathBuf {
    std::fs::write(dir.join("data.csv"), csv).unwrap();
    experiment_file(dir, minibatch, pareto)
}

/// Writes only the experiment; `data.csv` is the caller's.
fn experiment_file(dir: &Path, minibatch: usize, pareto: usize) -> PathBuf {
    let file = dir.join("experiment.toml");
    std::fs::write(
        &file,
        format!(
            r#"name = "csv-edge"
[prompt]
seed = "Label this: {{text}}"
[dataset]
file = "data.csv"
inputs = ["text"]
expected = "label"
minibatch = {minibatch}
pareto = {pareto}
holdout = "rest"
[evolution]
strategy = "RPM"
model = "gpt-4o-mini"
budget = 30
[evaluator]
model = "gpt-4o-mini"
"#
        ),
    )
    .unwrap();
    file
}

fn plan_json(file: &Path) -> serde_json::Value {
    let output = gepa_lab(&["plan", "--json", file.to_str().unwrap()]);
    assert!(
        output.status.success(),
        "{}{}",
        stdout(&output),
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("plan --json prints JSON")
}

#[test]
fn bom_crlf_and_quoted_newlines_are_read_as_written() {
    let dir = tempfile::tempdir().unwrap();
    let csv = b"\xEF\xBB\xBFtext,label\r\n\"first line\r\nsecond line, with comma\",yes\r\n\"She said \"\"hi\"\"\",no\r\nplain,yes\r\n";
    let file = experiment(dir.path(), csv, 1, 2);
    let plan = plan_json(&file);
    let items = &plan["executions"][0]["start"]["dataset"];
    assert_eq!(
        items[0]["input"]["text"],
        "first line\r\nsecond line, with comma"
    );
    assert_eq!(items[0]["expectedOutput"], "yes");
    assert_eq!(items[1]["input"]["text"], "She said \"hi\"");
    assert_eq!(items[2]["expectedOutput"], "yes");
    assert_eq!(plan["executions"][0]["dataset"]["rows"], 3);
}

/// The diagnostics `validate` gives an experiment on `csv` (one minibatch and one Pareto row),
/// which must be invalid.
fn invalid(dir: &Path, csv: &[u8]) -> Vec<serde_json::Value> {
    let (report, code) = validate_json(&experiment(dir, csv, 1, 1));
    assert_eq!(code, 1, "{report}");
    report["diagnostics"].as_array().unwrap().clone()
}

/// The first diagnostic of `rule`.
fn find<'a>(diagnostics: &'a [serde_json::Value], rule: &str) -> &'a serde_json::Value {
    diagnostics
        .iter()
        .find(|d| d["rule"] == rule)
        .unwrap_or_else(|| panic!("{rule} missing in {diagnostics:?}"))
}

#[test]
fn a_quote_left_open_is_named_as_the_likely_cause_of_a_short_row() {
    let dir = tempfile::tempdir().unwrap();
    // Row 2 opens a quote that is never closed: the reader takes the rest of the file as one
    // field, so the row has one field where the header has two.
    let csv = b"text,label\nfine,yes\n\"open,no\nnext,yes\nlast,no\n";
    let diagnostics = invalid(dir.path(), csv);
    let ragged = find(&diagnostics, "dataset-ragged-row");
    assert_eq!(ragged["location"]["line"], 3);
    assert_eq!(
        ragged["message"],
        "row 2 has 1 field but the header has 2; its quoted text runs over 4 lines: is a quote \
         (\") left open? (inside a quoted field a quote is written twice, \"\")"
    );
}

#[test]
fn problems_name_the_row_the_line_and_the_column() {
    let dir = tempfile::tempdir().unwrap();
    // The quoted newline in row 1 makes file lines and row numbers differ.
    let csv = b"text,label\n\"two\nlines\",yes\nfine,no\nragged,no,extra\nblank,\"  \"\n";
    let diagnostics = invalid(dir.path(), csv);
    let ragged = find(&diagnostics, "dataset-ragged-row");
    assert_eq!(ragged["location"]["line"], 5);
    assert_eq!(ragged["message"], "row 3 has 3 fields but the header has 2");
    let blank = find(&diagnostics, "dataset-expected-empty");
    assert_eq!(blank["location"]["line"], 6);
    assert!(
        blank["message"]
            .as_str()
            .unwrap()
            .starts_with("row 4 column \"label\" (expected output) is empty"),
        "{blank}"
    );
}

#[test]
fn a_missing_column_suggests_the_closest_header() {
    let dir = tempfile::tempdir().unwrap();
    let file = experiment(dir.path(), b"txt,label\na,b\nc,d\n", 1, 1);
    let (report, _) = validate_json(&file);
    let column = report["diagnostics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["rule"] == "dataset-column")
        .cloned()
        .expect("dataset-column reported");
    assert_eq!(column["help"], "did you mean \"txt\"?");
    assert_eq!(column["seen"], "header: txt, label");
}

#[test]
fn an_empty_file_is_an_error_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let file = experiment(dir.path(), b"", 1, 1);
    let (report, code) = validate_json(&file);
    assert_eq!(code, 1);
    assert_eq!(
        report["diagnostics"][0]["rule"], "dataset-header",
        "{report}"
    );
}

/// Peak resident memory in KiB of this process.
fn own_peak_rss_kib() -> i64 {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage only writes into the struct we hand it.
    let status = unsafe { libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr()) };
    assert_eq!(status, 0, "getrusage failed");
    // SAFETY: getrusage returned 0, so the struct is initialised.
    unsafe { usage.assume_init() }.ru_maxrss
}

/// Runs `gepa-lab ARGS` and returns its stdout, whether it exited with 0, and the peak resident
/// memory in KiB of that child alone. `wait4` reports the one child it reaps; `RUSAGE_CHILDREN`
/// would report the largest child of any test running in parallel in this process.
#[expect(
    clippy::zombie_processes,
    reason = "the child is reaped by wait4, which clippy does not know"
)]
fn gepa_lab_with_peak(args: &[&str]) -> (String, bool, i64) {
    use std::io::Read;
    let mut child = crate::common::command()
        .args(args)
        .current_dir(crate::common::root())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("the gepa-lab binary runs");
    let mut out = String::new();
    if let Some(mut stdout) = child.stdout.take() {
        stdout.read_to_string(&mut out).unwrap();
    }
    let pid = i32::try_from(child.id()).unwrap();
    let mut status = 0;
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: wait4 only writes into the status and the struct we hand it.
    let reaped = unsafe { libc::wait4(pid, &mut status, 0, usage.as_mut_ptr()) };
    assert_eq!(reaped, pid, "wait4 failed");
    // SAFETY: wait4 returned the child, so the struct is initialised.
    let peak = unsafe { usage.assume_init() }.ru_maxrss;
    let success = libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0;
    (out, success, peak)
}

#[test]
fn a_million_row_file_validates_in_bounded_memory() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("data.csv");
    let mut out = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
    writeln!(out, "text,label").unwrap();
    for row in 0..1_000_000u32 {
        let label = if row % 3 == 0 { "negative" } else { "positive" };
        writeln!(
            out,
            "\"Review {row}: the blender arrived on time, works as described, and cleans up easily.\",{label}"
        )
        .unwrap();
    }
    out.into_inner().unwrap().sync_all().unwrap();
    let size = std::fs::metadata(&path).unwrap().len();
    assert!(size > 90_000_000, "the file should be large: {size} bytes");
    let file = experiment_file(dir.path(), 4, 8);

    let (out, success, child) = gepa_lab_with_peak(&["validate", file.to_str().unwrap()]);
    assert!(success, "{out}");
    assert!(out.contains("valid (0 errors"), "{out}");
    // The same command on a 20-row file: what the binary itself takes (code, runtime, buffers).
    let small = root().join("tests/fixtures/valid.toml");
    let (out, success, baseline) = gepa_lab_with_peak(&["validate", small.to_str().unwrap()]);
    assert!(success, "{out}");
    // The file is ~92 MiB; holding it would add at least that. What may grow with the rows is
    // the split's row index (8 bytes a row, 8 MiB here) and allocator slack.
    let growth = child - baseline;
    let own = own_peak_rss_kib();
    assert!(
        growth < 24 * 1024,
        "validate peaked at {child} KiB for a {size}-byte file, {baseline} KiB for a 20-row one (this test process: {own} KiB)"
    );
}

/// `gepa-lab ARGS` with a time limit: the test fails instead of hanging when a command blocks.
fn within(limit: std::time::Duration, args: &[&str]) -> std::process::Output {
    let mut child = crate::common::command()
        .args(args)
        .current_dir(root())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > limit {
            child.kill().unwrap();
            panic!("gepa-lab {args:?} still ran after {limit:?}");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    child.wait_with_output().unwrap()
}

#[test]
fn a_fifo_a_device_or_a_sparse_giant_as_input_is_refused_by_name_not_read() {
    let limit = std::time::Duration::from_secs(20);
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path();
    let file = experiment_file(dir, 2, 4);
    let file = file.to_str().unwrap();
    let data = dir.join("data.csv");

    // A FIFO with no writer: opening it for reading would block for ever.
    assert!(
        std::process::Command::new("mkfifo")
            .arg(&data)
            .status()
            .unwrap()
            .success()
    );
    for command in ["validate", "plan"] {
        let output = within(limit, &[command, file]);
        let text = format!(
            "{}{}",
            stdout(&output),
            String::from_utf8_lossy(&output.stderr)
        );
        assert_eq!(output.status.code(), Some(1), "{command}: {text}");
        assert!(
            text.contains("data.csv"),
            "{command} names the file: {text}"
        );
        assert!(
            text.contains("a FIFO (named pipe), not a regular file"),
            "{command}: {text}"
        );
    }
    let init = within(
        limit,
        &["init", "--dataset", data.to_str().unwrap(), "--out", "-"],
    );
    assert!(!init.status.success());
    assert!(String::from_utf8_lossy(&init.stderr).contains("a FIFO"));

    // A 2 GiB sparse file of zeros: one endless line.
    std::fs::remove_file(&data).unwrap();
    std::fs::File::create(&data)
        .unwrap()
        .set_len(2 << 30)
        .unwrap();
    let output = within(limit, &["validate", file]);
    let text = format!(
        "{}{}",
        stdout(&output),
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(output.status.code(), Some(1), "{text}");
    assert!(text.contains("a line longer than 16 MiB"), "{text}");

    // /dev/zero as a prompt file of `compare`: refused before any model is loaded.
    std::fs::write(&data, "text,label\nhi,a\n").unwrap();
    let output = within(
        limit,
        &[
            "compare",
            "--prompts",
            "/dev/zero",
            file,
            "--dataset",
            data.to_str().unwrap(),
        ],
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("/dev/zero: cannot read the prompt file: a character device"),
        "{stderr}"
    );
}
