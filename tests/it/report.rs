//! `gepa-lab report` and `gepa-lab compare` on the fixture run directory `tests/fixtures/run/`
//! (made by `tests/fixtures/make_report_run.py`; simulated, as its run.json says). The report
//! context and `summary.md` are snapshot-tested; the rest checks what a reader relies on: the
//! simulated banner, escaping, offline rendering and errors that name the bad record.
//!
//! Everything goes through the binary, never the library in this process: a render here would
//! raise this process's peak memory, which the memory test of `dataset_files` sees in its child.
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::common::{root, stdout};

const FIXTURE: &str = "tests/fixtures/run";

/// A copy of the fixture run directory, so that rendering never writes into the repository.
fn fixture_copy() -> (tempfile::TempDir, PathBuf) {
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path().join("run");
    std::fs::create_dir(&dir).unwrap();
    for name in ["run.json", "history.csv", "replay.csv", "events.jsonl"] {
        std::fs::copy(root().join(FIXTURE).join(name), dir.join(name)).unwrap();
    }
    (temp, dir)
}

/// Runs the binary from `cwd`, which for the report tests is a folder with no dataset in it.
fn gepa_lab_in(cwd: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_gepa-lab"))
        .args(args)
        .current_dir(cwd)
        .output()
        .expect("the gepa-lab binary runs")
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn edit(path: &Path, edit: impl FnOnce(String) -> String) {
    let text = std::fs::read_to_string(path).unwrap();
    std::fs::write(path, edit(text)).unwrap();
}

/// Renders a copy of the fixture (optionally edited) with the binary; returns the copy.
fn render(edit_copy: impl FnOnce(&Path)) -> (tempfile::TempDir, PathBuf) {
    let (temp, dir) = fixture_copy();
    edit_copy(&dir);
    let output = gepa_lab_in(temp.path(), &["report", "run"]);
    assert!(output.status.success(), "{}", stderr(&output));
    (temp, dir)
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap()
}

#[test]
fn report_context_snapshot() {
    let output = gepa_lab_in(&root(), &["report", "--context-json", FIXTURE]);
    assert!(output.status.success(), "{}", stderr(&output));
    let context: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    insta::assert_json_snapshot!(context);
    assert!(
        !root().join(FIXTURE).join("index.html").exists(),
        "--context-json writes nothing"
    );
}

#[test]
fn summary_md_snapshot() {
    let (_temp, dir) = render(|_| {});
    insta::assert_snapshot!(read(&dir.join("summary.md")));
}

#[test]
fn report_renders_offline_from_the_run_directory_alone() {
    let (temp, dir) = fixture_copy();
    // The working directory has no dataset: the report must not need it.
    let output = gepa_lab_in(temp.path(), &["report", "run"]);
    assert!(output.status.success(), "{}", stderr(&output));
    let text = stdout(&output);
    assert!(text.starts_with("SIMULATED RUN"), "{text}");
    assert!(
        text.contains("budget-30, local, 30 holdout rows: g5 scored"),
        "{text}"
    );
    for file in [
        "index.html",
        "summary.md",
        "results.json",
        "replay.parquet",
        "charts/holdout.svg",
        "charts/heatmap-local.svg",
        "charts/latency-tokens.svg",
        "charts/score-by-generation-budget-10.svg",
        "charts/score-by-generation-budget-30.svg",
    ] {
        assert!(dir.join(file).is_file(), "{file} missing");
    }
    let html = std::fs::read_to_string(dir.join("index.html")).unwrap();
    assert!(html.contains("Simulated run: not real model output."));
    assert!(!html.contains("<script"), "no script in the page");
    assert_eq!(html.matches("<svg").count(), 5, "every chart is inline");
    let results: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("results.json")).unwrap()).unwrap();
    assert_eq!(results["format_version"], 1);
    assert_eq!(results["simulated"], true);
    assert_eq!(results["headline"]["b"], "g5");
    let parquet = std::fs::read(dir.join("replay.parquet")).unwrap();
    let metadata =
        polars_parquet::read::read_metadata(&mut std::io::Cursor::new(&parquet)).unwrap();
    assert_eq!(metadata.num_rows, 180, "every record of replay.csv");
    assert_eq!(
        metadata.schema().fields().len(),
        17,
        "every column of replay.csv (the fixture's file predates `sample`, read as 1)"
    );

    // Rendering again gives the same bytes: nothing depends on the clock or on hash order.
    let again = gepa_lab_in(temp.path(), &["report", "run"]);
    assert!(again.status.success());
    assert_eq!(
        std::fs::read_to_string(dir.join("index.html")).unwrap(),
        html
    );
    assert_eq!(std::fs::read(dir.join("replay.parquet")).unwrap(), parquet);
}

/// The files in `charts/` with this extension, sorted.
fn charts_with(dir: &Path, extension: &str) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir.join("charts"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == extension))
        .collect();
    files.sort();
    files
}

/// The `width="…" height="…"` of an SVG's root element.
fn svg_size(svg: &str) -> (u32, u32) {
    let attribute = |name: &str| -> u32 {
        let start = svg.find(&format!(" {name}=\"")).unwrap() + name.len() + 3;
        let end = start + svg[start..].find('"').unwrap();
        svg[start..end].parse().unwrap()
    };
    (attribute("width"), attribute("height"))
}

#[test]
fn report_png_writes_a_png_beside_each_svg() {
    let (temp, dir) = fixture_copy();
    let output = gepa_lab_in(temp.path(), &["report", "run"]);
    assert!(output.status.success(), "{}", stderr(&output));
    let svgs = charts_with(&dir, "svg");
    assert_eq!(svgs.len(), 5, "{svgs:?}");
    assert!(charts_with(&dir, "png").is_empty(), "no PNG without --png");

    let output = gepa_lab_in(temp.path(), &["report", "--png", "run"]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(
        stdout(&output).contains("wrote 14 files"),
        "{}",
        stdout(&output)
    );
    assert_eq!(charts_with(&dir, "png").len(), svgs.len());
    for svg in &svgs {
        let png = std::fs::read(svg.with_extension("png")).unwrap();
        let name = svg.display();
        assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n", "{name}: PNG signature");
        // The first chunk is IHDR: length 13, then width and height, big-endian.
        assert_eq!(&png[8..16], b"\0\0\0\x0dIHDR", "{name}: IHDR first");
        let width = u32::from_be_bytes(png[16..20].try_into().unwrap());
        let height = u32::from_be_bytes(png[20..24].try_into().unwrap());
        assert_eq!(
            (width, height),
            svg_size(&read(svg)),
            "{name}: the chart's size"
        );
        // A white page would deflate to a few hundred bytes; axes, marks and text do not.
        assert!(png.len() > 5_000, "{name}: only {} bytes", png.len());
        assert!(png.ends_with(b"IEND\xaeB`\x82"), "{name}: ends with IEND");
    }
    let html = read(&dir.join("index.html"));
    assert_eq!(
        html.matches("<svg").count(),
        5,
        "the page still inlines the SVG"
    );
    assert!(
        !html.contains(".png"),
        "the page does not refer to the PNG files"
    );
}

#[test]
fn a_real_run_has_no_simulated_banner() {
    let (_temp, dir) = render(|dir| {
        edit(&dir.join("run.json"), |t| {
            t.replace("\"simulated\": true", "\"simulated\": false")
        })
    });
    assert!(!read(&dir.join("index.html")).contains("Simulated run"));
    assert!(!read(&dir.join("summary.md")).contains("Simulated"));
}

#[test]
fn prompts_and_outputs_are_escaped() {
    let (_temp, dir) = render(|dir| {
        edit(&dir.join("replay.csv"), |t| {
            t.replacen(
                ",Negative,0.0,",
                ",\"<script>alert('output')</script>\",0.0,",
                1,
            )
        });
        // g5 of budget-30 is replayed, so its prompt is shown in full and diffed.
        edit(&dir.join("history.csv"), |t| {
            t.replacen(
                "You label product reviews",
                "You label </pre><script>alert(1)</script> product reviews",
                1,
            )
        });
    });
    let html = read(&dir.join("index.html"));
    assert!(!html.contains("<script"), "a script got through");
    // minijinja escapes `'` and `/` as well as `<`, `>`, `&` and `"`.
    assert!(html.contains("&lt;script&gt;alert(&#x27;output&#x27;)&lt;&#x2f;script&gt;"));
    assert!(html.contains("&lt;&#x2f;pre&gt;&lt;script&gt;alert(1)"));
}

#[test]
fn a_corrupt_record_is_an_error_naming_the_file_and_record() {
    let (temp, dir) = fixture_copy();
    let path = dir.join("replay.csv");
    let text = std::fs::read_to_string(&path).unwrap();
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    // Record 5 is line 6 (after the header); its score becomes text.
    lines[5] = lines[5].replacen(",1.0,match,", ",one,match,", 1);
    assert!(
        lines[5].contains(",one,"),
        "the fixture changed: {}",
        lines[5]
    );
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    let output = gepa_lab_in(temp.path(), &["report", "run"]);
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    let err = stderr(&output);
    assert!(
        err.contains("replay.csv") && err.contains("record 5"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn records_that_contradict_the_plan_are_errors() {
    let (temp, dir) = fixture_copy();
    edit(&dir.join("replay.csv"), |t| {
        t.replacen("budget-10,g1,", "budget-10,g7,", 1)
    });
    let output = gepa_lab_in(temp.path(), &["report", "run"]);
    assert_eq!(output.status.code(), Some(1));
    let err = stderr(&output);
    assert!(err.contains("replay.csv: record 31:"), "{err}");
    assert!(
        err.contains("\"g7\" of variant \"budget-10\" is not a generation"),
        "{err}"
    );

    let (temp, dir) = fixture_copy();
    edit(&dir.join("history.csv"), |t| {
        t.replacen("budget-30,", "budget-99,", 1)
    });
    let output = gepa_lab_in(temp.path(), &["report", "run"]);
    assert_eq!(output.status.code(), Some(1));
    let err = stderr(&output);
    assert!(err.contains("history.csv: record 4:"), "{err}");
    assert!(
        err.contains("variant \"budget-99\" is not in the plan"),
        "{err}"
    );
}

#[test]
fn compare_sets_the_best_of_each_run_against_the_first() {
    let (temp, _dir) = fixture_copy();
    let second = temp.path().join("second");
    std::fs::create_dir(&second).unwrap();
    for name in ["run.json", "history.csv", "replay.csv"] {
        std::fs::copy(temp.path().join("run").join(name), second.join(name)).unwrap();
    }
    let output = gepa_lab_in(temp.path(), &["compare", "run", "second"]);
    assert!(output.status.success(), "{}", stderr(&output));
    let text = stdout(&output);
    assert!(text.starts_with("SIMULATED"), "{text}");
    assert!(text.contains("budget-30 · g5"), "{text}");
    // The same run against itself: no difference, and the test says so.
    assert!(text.contains("+0.000"), "{text}");
    assert!(text.contains("too few rows that differ"), "{text}");

    let markdown = stdout(&gepa_lab_in(
        temp.path(),
        &["compare", "--markdown", "run", "second"],
    ));
    assert!(markdown.contains("| run | best |"), "{markdown}");

    edit(&second.join("run.json"), |t| {
        t.replace(
            "92db5d35dc258fc7c774a12912120e8286f9567ff7a16599d6d229b565b9d56d",
            "0000000000000000000000000000000000000000000000000000000000000000",
        )
    });
    let output = gepa_lab_in(temp.path(), &["compare", "run", "second"]);
    assert_eq!(output.status.code(), Some(1));
    assert!(
        stderr(&output).contains("runs use different datasets"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn compare_needs_two_runs() {
    let output = gepa_lab_in(&root(), &["compare", FIXTURE]);
    assert_eq!(output.status.code(), Some(2), "a usage error");
}

/// An edited run.json (one execution record removed, so the two lists of format 1 no longer
/// match) is an error naming the file and the field, for `report` and for `run --resume`.
#[test]
fn an_edited_run_json_is_an_error_naming_the_field_not_a_panic() {
    let (temp, dir) = fixture_copy();
    let path = dir.join("run.json");
    let mut manifest: serde_json::Value = serde_json::from_str(&read(&path)).unwrap();
    manifest["executions"].as_array_mut().unwrap().pop();
    std::fs::write(&path, manifest.to_string()).unwrap();
    for args in [&["report", "run"][..], &["run", "--resume", "run"]] {
        let output = gepa_lab_in(temp.path(), args);
        let err = stderr(&output);
        assert!(!output.status.success(), "{args:?}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert!(
            err.contains("run.json") && err.contains("field `executions`: 1 entries"),
            "{args:?}: {err}"
        );
    }
}
