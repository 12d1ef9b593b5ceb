//! `gepa-lab report` and `gepa-lab compare` on the fixture run directory `tests/fixtures/run/`
//! (made by `tests/fixtures/make_report_run.py`; simulated, as its run.json says). The report
//! context and `summary.md` are snapshot-tested; the rest checks what a reader relies on: the
//! simulated banner, escaping, offline rendering and errors that name the bad record, and the
//! section on how the search went, from an `iterations.jsonl` written beside the fixture.
//!
//! Everything goes through the binary, never the library in this process: a render here would
//! raise this process's peak memory, which the memory test of `dataset_files` sees in its child.
use std::path::{Path, PathBuf};
use std::process::Output;

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
    crate::common::command()
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

/// The fixture's sentiment labels are a classification: budget-10's seed made to answer
/// `Negative` to every row it answered, so that it scores what always answering the majority
/// label scores and its gain shows as a gain over a collapsed seed.
#[test]
fn summary_md_snapshot_of_a_seed_that_answers_one_label() {
    let (_temp, dir) = render(|dir| {
        let path = dir.join("replay.csv");
        let mut reader = csv::Reader::from_path(&path).unwrap();
        let header = reader.headers().unwrap().clone();
        let column = |name: &str| header.iter().position(|h| h == name).unwrap();
        let (variant, version, expected, output, score, error) = (
            column("variant"),
            column("version"),
            column("expected"),
            column("output"),
            column("score"),
            column("error"),
        );
        let mut writer = csv::Writer::from_writer(Vec::new());
        writer.write_record(&header).unwrap();
        for record in reader.records() {
            let record = record.unwrap();
            let mut fields: Vec<String> = record.iter().map(str::to_owned).collect();
            if fields[variant] == "budget-10"
                && fields[version] == "seed"
                && fields[error].is_empty()
            {
                fields[output] = "Negative".into();
                fields[score] = if fields[expected] == "negative" {
                    "1.0"
                } else {
                    "0.0"
                }
                .into();
            }
            writer.write_record(&fields).unwrap();
        }
        std::fs::write(&path, writer.into_inner().unwrap()).unwrap();
    });
    let summary = read(&dir.join("summary.md"));
    assert!(
        summary.contains("**answers `negative` to 100% of rows**"),
        "{summary}"
    );
    insta::assert_snapshot!(summary);
    let html = read(&dir.join("index.html"));
    assert!(html.contains(
        "<div class=\"caution\">scores no better than always answering <code>negative</code> (0.500 on the same 30 rows)</div>"
    ));
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
    // The fixture's plan has no shuffle seed and predates stratified splits.
    assert!(
        html.contains("expected column label; rows split in the file&#x27;s order.</p>"),
        "how the rows were split"
    );
    assert!(!html.contains("<script"), "no script in the page");
    assert_eq!(html.matches("<svg").count(), 5, "every chart is inline");
    let results: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("results.json")).unwrap()).unwrap();
    assert_eq!(results["format_version"], 2);
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

const BUDGET_30_ID: &str = "3f1c9a52-0b7e-4d1e-9c55-000000000002";

/// One line of `iterations.jsonl` of budget-30, as the runner writes it: the variant and
/// evolution id, then the engine's record (costing 4 task calls, 1 reflection and 300 tokens).
fn iteration(iteration: u64, kind: &str, parents: &[u64], outcome: serde_json::Value) -> String {
    let accepted = outcome["status"] == "accepted";
    let ran = accepted || outcome["status"] == "rejected";
    let mut record = serde_json::json!({
        "variant": "budget-30",
        "evolution_id": BUDGET_30_ID,
        "kind": kind,
        "iteration": iteration,
        "child_prompt": (outcome["status"] != "skipped_perfect")
            .then(|| format!("Proposal {iteration}: </pre><script>alert({iteration})</script>")),
        "child_scores": if ran { vec![1.0, 1.0] } else { vec![] },
        "outcome": outcome,
        "spent": {"task_calls": 4 * iteration, "reflection_calls": iteration, "tokens": 300 * iteration},
        "cost": {"task_calls": 4, "reflection_calls": 1, "tokens": 300},
        "best": {"generation": 0, "score": 0.625},
    });
    if kind == "merge" {
        record["parents"] = serde_json::json!(parents);
        record["ancestor"] = 0.into();
        record["subsample"] = serde_json::json!([5, 6]);
        record["parent_scores"] = serde_json::json!([[1.0, 0.0], [0.0, 1.0]]);
    } else {
        record["parent"] = parents[0].into();
        record["minibatch"] = serde_json::json!([1, 2]);
        record["parent_scores"] = serde_json::json!([0.0, 1.0]);
    }
    record.to_string()
}

/// The search of budget-30 that made its history (g1 to g5, g5 a merge of g2 and g4), with a
/// rejection, a skip and two failed proposals.
fn budget_30_iterations() -> Vec<String> {
    use serde_json::json;
    let accepted = |generation: u64| json!({"status": "accepted", "generation": generation});
    vec![
        iteration(1, "mutation", &[0], accepted(1)),
        iteration(2, "mutation", &[1], json!({"status": "rejected"})),
        iteration(3, "mutation", &[0], accepted(2)),
        iteration(
            4,
            "mutation",
            &[2],
            json!({"status": "failed", "reason": {"reason": "duplicate", "generation": 1}}),
        ),
        iteration(5, "mutation", &[2], accepted(3)),
        iteration(6, "mutation", &[3], json!({"status": "skipped_perfect"})),
        iteration(7, "mutation", &[3], accepted(4)),
        iteration(8, "merge", &[2, 4], accepted(5)),
        iteration(
            9,
            "mutation",
            &[5],
            json!({"status": "failed", "reason": {"reason": "no_fenced_block", "answer": "none"}}),
        ),
    ]
}

/// Gives budget-30's generations (seed to g5) these scores on its 8 Pareto rows, each score
/// their mean, as serve and the local engine report them.
fn set_budget_30_pareto_scores(dir: &Path, per_row: [[f64; 8]; 6]) {
    let run = gepa_lab::store::RunDir::open(dir).unwrap();
    let mut history: Vec<gepa_lab::store::HistoryRow> =
        run.read_csv(gepa_lab::store::HISTORY_FILE).unwrap();
    for row in history.iter_mut().filter(|row| row.variant == "budget-30") {
        let scores = per_row[row.generation as usize];
        row.score = scores.iter().sum::<f64>() / 8.0;
        row.pareto_scores = Some(scores.to_vec());
    }
    run.write_csv(gepa_lab::store::HISTORY_FILE, &history)
        .unwrap();
}

/// Budget-30's generations each win 3 Pareto rows or fewer against the seed and lose 1 or more
/// (sign test p >= 0.31), and g5 scores highest (0.875 against the seed's 0.625).
fn budget_30_wins_by_a_row_or_two(dir: &Path) {
    set_budget_30_pareto_scores(
        dir,
        [
            [1.0, 1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0],
            [0.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.0, 0.0],
            [0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0],
            [0.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0],
            [1.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0],
            [1.0, 1.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0],
        ],
    );
}

fn best_version_of_budget_30(dir: &Path) -> serde_json::Value {
    let results: serde_json::Value =
        serde_json::from_str(&read(&dir.join("results.json"))).unwrap();
    results["executions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|execution| execution["label"] == "budget-30")
        .expect("budget-30's execution")["best_version"]
        .clone()
}

/// An evolved prompt whose higher score rests on a few Pareto rows more won than lost is not
/// the best: the seed stays best though g5 scores 0.875 against 0.625.
#[test]
fn a_higher_score_without_enough_rows_won_leaves_the_seed_best() {
    let (_temp, dir) = render(budget_30_wins_by_a_row_or_two);
    assert_eq!(best_version_of_budget_30(&dir), "seed");
    let summary = read(&dir.join("summary.md"));
    assert!(
        summary.contains(
            "budget-30: g5 scored 0.875 against the seed's 0.625 on the evolution's own score \
             (its Pareto rows), but won 3 rows and lost 1 of its 8 Pareto rows: a one-sided sign \
             test gives p = 0.31, and a best needs p ≤ 0.25; so the seed is the best version"
        ),
        "{summary}"
    );
}

/// The feedback rows both were scored on count too, unless a proposal of the prompt's lineage
/// was written from them: g5 (a merge of g2 and g4) wins 3 Pareto rows and loses 1, and wins
/// the two feedback rows 3 and 4 (p = 0.11 on all six); rows 1 and 2, which its parents'
/// rules were written from, do not count.
#[test]
fn feedback_rows_no_proposal_was_written_from_count_for_the_best() {
    let (_temp, dir) = render(|dir| {
        budget_30_wins_by_a_row_or_two(dir);
        let scored_on_rows_3_and_4 = |iteration: u64, parent: u64, scores: [f64; 2]| {
            let mut record: serde_json::Value = serde_json::from_str(&self::iteration(
                iteration,
                "mutation",
                &[parent],
                serde_json::json!({"status": "rejected"}),
            ))
            .unwrap();
            record["minibatch"] = serde_json::json!([3, 4]);
            record["parent_scores"] = serde_json::json!(scores);
            record.to_string()
        };
        let mut lines = budget_30_iterations();
        lines.push(scored_on_rows_3_and_4(10, 0, [0.0, 0.0]));
        lines.push(scored_on_rows_3_and_4(11, 5, [1.0, 1.0]));
        std::fs::write(dir.join("iterations.jsonl"), lines.join("\n") + "\n").unwrap();
    });
    assert_eq!(best_version_of_budget_30(&dir), "g5");
}

#[test]
fn the_report_shows_how_the_search_went() {
    let (_temp, dir) = render(|dir| {
        let mut lines = budget_30_iterations();
        // A record of another evolution of budget-30, and a repeat of iteration 2: left out.
        lines.push(lines[0].replace(BUDGET_30_ID, "an-earlier-attempt"));
        lines.push(lines[1].clone());
        std::fs::write(dir.join("iterations.jsonl"), lines.join("\n") + "\n").unwrap();
        // 8 Pareto rows: data rows 5 to 12; each mean is the fixture's score already.
        set_budget_30_pareto_scores(
            dir,
            [
                [1.0, 1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0],
                [1.0, 1.0, 1.0, 1.0, 0.0, 1.0, 0.0, 0.0],
                [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.0, 0.0],
                [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.0],
                [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.0, 1.0],
                [1.0; 8],
            ],
        );
    });
    let html = read(&dir.join("index.html"));
    let section = &html[html.find("<section id=\"search\">").expect("the section")..];
    let section = &section[..section.find("</section>").unwrap()];
    assert!(section.contains("<h2>How the search went</h2>"));
    // budget-10 has no record in the file: one sentence says so.
    assert!(
        section.contains(
            "<p>No iteration of this execution is in iterations.jsonl; only accepted candidates are known.</p>"
        ),
        "{section}"
    );
    assert!(
        section.contains(
            "9 iterations (1 merge): 5 accepted, 1 rejected, 1 skipped, 2 failed (1 duplicate, \
             1 no_fenced_block); 45 calls and 2700 tokens spent in them."
        ),
        "{section}"
    );
    // The lineage, inline and as a file: a node per generation, the merge dashed, the best
    // (g5) named.
    assert_eq!(
        html.matches("<svg").count(),
        6,
        "the five charts and a lineage"
    );
    let svg = read(&dir.join("charts/lineage-budget-30.svg"));
    assert!(section.contains(svg.trim()), "the page inlines the file");
    for g in 0..=5 {
        assert!(svg.contains(&format!(">\ng{g}\n</text>")), "g{g}");
    }
    assert!(
        svg.contains("merge of g2 + g4, iteration 8 · wins 4 rows · best"),
        "{svg}"
    );
    assert!(
        svg.contains("from g3, iteration 7 · wins 3 rows\n</text>"),
        "{svg}"
    );
    // Which Pareto rows each wins: data rows 5 to 8 every candidate gets right, so no one wins
    // them; row 9 all but g1, row 10 all but g0, row 11 g3 and g5, row 12 g4 and g5.
    assert!(
        section
            .contains("8 rows, 6 candidates with per-row scores; 4 rows tied by all, won by none"),
        "{section}"
    );
    for (label, score, won, rows) in [
        ("g0", "0.625", 1, "9"),
        ("g1", "0.625", 1, "10"),
        ("g3", "0.875", 3, "9, 10, 11"),
        (
            "g5<span class=\"tag best\">best</span>",
            "1.000",
            4,
            "9, 10, 11, 12",
        ),
    ] {
        let row = format!(
            "<tr><td>{label}</td><td class=\"n\">{score}</td><td class=\"n\">{won}</td><td class=\"n\">0</td><td class=\"rows\">{rows}</td></tr>"
        );
        assert!(section.contains(&row), "{row}\n{section}");
    }
    // One row per proposal, with the engine's own explanation and the prompt escaped.
    assert_eq!(section.matches("<tr class=").count(), 9);
    assert!(section.contains(
        "<tr class=\"accepted\"><td class=\"n\">8</td><td>merge</td><td>g2 + g4</td><td class=\"n\">2</td><td class=\"n\">1.00 / 1.00</td><td class=\"n\">2.00</td>"
    ), "{section}");
    assert!(section.contains(
        "rejected: the child scored 2.00 against the parent&#x27;s 1.00 on 2 minibatch rows"
    ));
    assert!(section.contains("no child: the child is g1 again"));
    assert!(
        !html.contains("<script"),
        "a proposed prompt got through unescaped"
    );
    assert!(section.contains("Proposal 3: &lt;&#x2f;pre&gt;&lt;script&gt;alert(3)"));

    assert!(html.contains(
        "<li>Records left out of iterations.jsonl: 2 (each names no execution of this run by its \
         variant and evolution id, or repeats an iteration already recorded).</li>"
    ));

    let markdown = read(&dir.join("summary.md"));
    assert!(markdown.contains("**How the search went**"), "{markdown}");
    assert!(
        markdown.contains("| 8 | merge | g2 + g4 | accepted (g5) | 2.00 vs 1.00 / 1.00 | 5 |"),
        "{markdown}"
    );
    assert!(markdown.contains("| 9 | mutation | g5 | no\\_fenced\\_block | – vs 1.00 | 5 |"));
}

#[test]
fn without_iteration_records_the_report_says_so() {
    let (_temp, dir) = render(|_| {});
    let html = read(&dir.join("index.html"));
    assert_eq!(
        html.matches(
            "<p>The service did not report its iterations; only accepted candidates are known.</p>"
        )
        .count(),
        2,
        "one sentence per execution"
    );
    assert!(!read(&dir.join("summary.md")).contains("How the search went"));
}

#[test]
fn a_damaged_iteration_record_leaves_the_report_standing_with_a_note() {
    let (_temp, dir) = render(|dir| {
        let mut lines = budget_30_iterations();
        lines[1] = lines[1].replace("\"rejected\"", "\"thrown away\"");
        std::fs::write(dir.join("iterations.jsonl"), lines.join("\n") + "\n").unwrap();
    });
    let html = read(&dir.join("index.html"));
    assert!(
        html.contains("<li>The iteration records could not be read, so the report does not show how the search went:"),
        "{html}"
    );
    let note = &html[html.find("could not be read, so the report").unwrap()..];
    let note = &note[..note.find("</li>").unwrap()];
    assert!(
        note.contains("iterations.jsonl") && note.contains("line 2"),
        "{note}"
    );
    assert_eq!(
        html.matches(
            "iterations.jsonl could not be read, so the search is not shown (see the notes)."
        )
        .count(),
        2
    );
    // The rest of the report is all there.
    assert!(html.contains("budget-30, local, 30 holdout rows: g5 scored"));
    assert!(!dir.join("charts/lineage-budget-30.svg").exists());
}

/// Keeps the rows of a CSV file of the fixture for which `keep` holds (by the named column).
fn keep_rows(path: &Path, column: &str, keep: impl Fn(&csv::StringRecord, usize) -> bool) {
    let mut reader = csv::Reader::from_path(path).unwrap();
    let header = reader.headers().unwrap().clone();
    let at = header.iter().position(|name| name == column).unwrap();
    let rows: Vec<csv::StringRecord> = reader
        .records()
        .map(Result::unwrap)
        .filter(|row| keep(row, at))
        .collect();
    let mut writer = csv::Writer::from_path(path).unwrap();
    writer.write_record(&header).unwrap();
    for row in rows {
        writer.write_record(&row).unwrap();
    }
    writer.flush().unwrap();
}

/// Only the seeds of the executions `which` picks (by name) left in the fixture's history and
/// replay: their searches accepted nothing.
fn keep_only_seeds(dir: &Path, which: fn(&str) -> bool) {
    keep_rows(&dir.join("history.csv"), "generation", |row, at| {
        !which(&row[0]) || &row[at] == "0"
    });
    keep_rows(&dir.join("replay.csv"), "version", |row, at| {
        !which(&row[0]) || &row[at] == "seed"
    });
}

/// budget-30's iteration records: `count` mutations, each rejected.
fn write_rejected_iterations(dir: &Path, count: u64) {
    let lines: String = (1..=count)
        .map(|i| {
            iteration(
                i,
                "mutation",
                &[0],
                serde_json::json!({"status": "rejected"}),
            ) + "\n"
        })
        .collect();
    std::fs::write(dir.join("iterations.jsonl"), lines).unwrap();
}

/// The fixture with budget-30 accepting nothing: only its seed in the history and the replay,
/// `refused` refused proposals in its iteration records, and `used` of its 30 calls spent.
fn render_accepting_nothing(used: u64, refused: u64) -> (tempfile::TempDir, PathBuf) {
    render(|dir| accepting_nothing(dir, used, refused))
}

/// The edits of [`render_accepting_nothing`], on the copy in `dir`.
fn accepting_nothing(dir: &Path, used: u64, refused: u64) {
    keep_only_seeds(dir, |execution| execution == "budget-30");
    write_rejected_iterations(dir, refused);
    edit(&dir.join("run.json"), |text| {
        let mut run: serde_json::Value = serde_json::from_str(&text).unwrap();
        let execution = run["executions"]
            .as_array_mut()
            .unwrap()
            .iter_mut()
            .find(|e| e["custom_id"].as_str().unwrap().contains("budget-30"))
            .unwrap();
        execution["budget_used"] = used.into();
        run.to_string()
    });
}

#[test]
fn a_run_whose_searches_accepted_nothing_says_the_seed_is_best_not_that_nothing_compares() {
    // Both executions keep only their seeds; budget-30's search recorded 4 iterations.
    let (_temp, dir) = render(|dir| {
        keep_only_seeds(dir, |_| true);
        write_rejected_iterations(dir, 4);
    });
    let summary = read(&dir.join("summary.md"));
    assert!(
        summary.contains(
            "The seed is the best version: no evolved prompt was accepted in 4 iterations."
        ),
        "{summary}"
    );
    assert!(!summary.contains("No comparison"), "{summary}");
    // Nothing is compared, so no table of comparisons (a header alone reads as rows lost).
    assert!(!summary.contains("| difference (95% CI) |"), "{summary}");
    let page = read(&dir.join("index.html"));
    assert!(
        page.contains(
            "The seed is the best version: no evolved prompt was accepted in 4 iterations (see \
             the notes)."
        ),
        "the page's headline"
    );
    // The comparisons section says why it has no table, in a sentence rather than "None.".
    assert!(
        page.contains(
            "No evolved version was answered on the holdout rows, so there is no row of the seed \
             against one here"
        ),
        "the comparisons section"
    );
    // Without iteration records nothing says the searches tried: no claim that the seed held.
    let (_temp, dir) = render(|dir| {
        keep_only_seeds(dir, |_| true);
        write_rejected_iterations(dir, 0);
    });
    let summary = read(&dir.join("summary.md"));
    assert!(
        summary.contains("No comparison of the seed with an evolved prompt is possible"),
        "{summary}"
    );
}

#[test]
fn a_seed_that_answers_one_label_is_named_instead_of_advice_to_pay_for_more_proposals() {
    // budget-30 accepted nothing after spending most of its budget, and its seed answers
    // `negative` to every holdout row: more proposals judged against such a model would tie.
    let (_temp, dir) = render(|dir| {
        accepting_nothing(dir, 28, 3);
        let path = dir.join("replay.csv");
        let mut reader = csv::Reader::from_path(&path).unwrap();
        let header = reader.headers().unwrap().clone();
        let at = |name: &str| header.iter().position(|h| h == name).unwrap();
        let (variant, output, score, expected) =
            (at("variant"), at("output"), at("score"), at("expected"));
        let rows: Vec<Vec<String>> = reader
            .records()
            .map(|row| {
                let mut row: Vec<String> = row.unwrap().iter().map(str::to_owned).collect();
                if row[variant] == "budget-30" {
                    row[output] = "negative".to_owned();
                    row[score] = if row[expected] == "negative" {
                        "1.0"
                    } else {
                        "0.0"
                    }
                    .to_owned();
                }
                row
            })
            .collect();
        let mut writer = csv::Writer::from_path(&path).unwrap();
        writer.write_record(&header).unwrap();
        for row in rows {
            writer.write_record(&row).unwrap();
        }
        writer.flush().unwrap();
    });
    let summary = read(&dir.join("summary.md"));
    assert!(
        summary.contains(
            "so the seed stands and there is nothing to compare with it on the holdout rows. On \
             the holdout rows the seed answers `negative` to 100% of rows on local: the model \
             gives one answer to nearly every input, which a larger `budget` does not change; a \
             model that tells the rows apart comes first."
        ),
        "{summary}"
    );
    assert!(!summary.contains("pays for more proposals"), "{summary}");
}

#[test]
fn a_search_that_accepted_nothing_says_what_it_tried_and_what_would_try_more() {
    let tried = "budget-30: no evolved prompt was accepted in 3 iterations (each one's outcome is \
                 under \"How the search went\"), so the seed stands and there is nothing to \
                 compare with it on the holdout rows.";
    let (_temp, dir) = render_accepting_nothing(28, 3);
    let summary = read(&dir.join("summary.md"));
    assert!(
        summary.contains(&format!(
            "{tried} It spent 28 of its budget of 30 calls; a larger `budget` pays for more \
             proposals."
        )),
        "{summary}"
    );
    // budget-10, whose evolved versions were replayed, has no such note.
    assert!(
        !summary.contains("budget-10: no evolved prompt"),
        "{summary}"
    );
    // With most of its budget left, the search did not stop for want of it: no advice to pay.
    let (_temp, dir) = render_accepting_nothing(10, 3);
    let summary = read(&dir.join("summary.md"));
    assert!(summary.contains(tried), "{summary}");
    assert!(!summary.contains("a larger `budget`"), "{summary}");
    // Without iteration records, the built-in engine proposed nothing: with most of the budget
    // spent, the budget is why (scoring the seed on the Pareto rows took it).
    let (_temp, dir) = render_accepting_nothing(28, 0);
    let summary = read(&dir.join("summary.md"));
    assert!(
        summary.contains(
            "budget-30: the evolution spent 28 of its budget of 30 calls before proposing any \
             prompt (scoring the seed on the Pareto rows comes first), so the seed stands and \
             there is nothing to compare with it on the holdout rows; a larger `budget` pays \
             for proposals."
        ),
        "{summary}"
    );
    assert!(!summary.contains("was accepted"), "{summary}");
    // A service's run reports no iterations whatever it proposed: the note says only what the
    // history holds.
    let (_temp, dir) = render(|dir| {
        accepting_nothing(dir, 28, 0);
        edit(&dir.join("run.json"), |text| {
            let mut run: serde_json::Value = serde_json::from_str(&text).unwrap();
            run["backend"] = serde_json::json!({"kind": "url", "url": "http://127.0.0.1:1"});
            run.to_string()
        });
    });
    let summary = read(&dir.join("summary.md"));
    assert!(
        summary.contains(
            "budget-30: the evolution's history holds only the seed (no evolved prompt was \
             accepted), so the seed stands and there is nothing to compare with it on the \
             holdout rows."
        ),
        "{summary}"
    );
}
