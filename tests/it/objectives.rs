//! `[objectives]` end to end: `run --backend local` on the simulated model behind HTTP (which
//! counts a token per word), first with a limit too high to bite, then with a limit set between
//! the candidates' costs. The search is the same both times (objectives choose among what it
//! finds), the recommended prompt is the best within the limit, and the report draws the
//! frontier and tables the recommended against the cheapest on the holdout. A search of another
//! seed, whose child beats the seed at a higher cost, shows that table with both rows and the
//! verdict between them.
use std::path::Path;
use std::process::Stdio;

use gepa_lab::store::{HISTORY_FILE, HistoryRow, RunDir};
use serde_json::Value;

use crate::checkpoint::upstream;
use crate::common::root;

/// Runs the objectives fixture with `objective` as its `[objectives]` line, under `out`, and
/// returns its run directory.
fn run_with(upstream: &str, out: &Path, objective: &str) -> RunDir {
    let fixtures = root().join("tests/fixtures");
    let absolute = |path: &str| fixtures.join(path).display().to_string();
    let text = std::fs::read_to_string(fixtures.join("run_experiments/objectives.toml"))
        .unwrap()
        .replace("prompt_tokens = { limit = 1000000 }", objective)
        .replace("../data/tiny.csv", &absolute("data/tiny.csv"))
        .replace(
            "\"reflection.md\"",
            &format!("{:?}", absolute("run_experiments/reflection.md")),
        );
    let file = out.join("objectives.toml");
    std::fs::write(&file, text).unwrap();
    let output = crate::common::command()
        .args(["run", "--backend", "local", "--yes", "--seed", "20261124"])
        .arg(&file)
        .arg("--out")
        .arg(out)
        .env("GEPA_LAB_LOCAL_UPSTREAM", upstream)
        .env("GEPA_LAB_REFLECTION_MODEL", "local")
        .stdin(Stdio::null())
        .output()
        .expect("gepa-lab runs");
    assert!(
        output.status.success(),
        "exit {:?}: {}",
        output.status.code(),
        String::from_utf8_lossy(&output.stderr)
    );
    let experiment = out.join("objectives");
    let run = std::fs::read_dir(&experiment)
        .expect("the experiment folder")
        .next()
        .expect("a run")
        .expect("readable")
        .path();
    RunDir::open(&run).unwrap()
}

fn prompt_tokens(row: &HistoryRow) -> f64 {
    row.costs
        .expect("the local engine records costs")
        .prompt_tokens
}

fn json(dir: &RunDir, name: &str) -> Value {
    serde_json::from_str(&std::fs::read_to_string(dir.file(name)).unwrap()).unwrap()
}

#[test]
fn a_token_limit_recommends_a_prompt_within_it_and_the_report_shows_the_frontier() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    // The checkpoint test's model and seed, whose search accepts at least two children.
    let upstream = upstream(&runtime, "model=local,seed=1");

    let free_out = tempfile::tempdir().unwrap();
    let free = run_with(
        &upstream.url,
        free_out.path(),
        "prompt_tokens = { limit = 1000000 }",
    );
    let history: Vec<HistoryRow> = free.read_csv(HISTORY_FILE).unwrap();
    assert!(history.len() >= 3, "a search with candidates: {history:?}");
    // A limit just below the costliest candidates, so that they are excluded and the others
    // are within.
    let costliest = history.iter().map(prompt_tokens).fold(f64::NAN, f64::max);
    let limit = history
        .iter()
        .map(prompt_tokens)
        .filter(|&cost| cost < costliest)
        .fold(f64::NAN, f64::max);
    assert!(
        limit.is_finite(),
        "candidates of different lengths: {history:?}"
    );
    let top = history.iter().fold(
        &history[0],
        |best, row| {
            if row.score > best.score { row } else { best }
        },
    );

    let limited_out = tempfile::tempdir().unwrap();
    let limited = run_with(
        &upstream.url,
        limited_out.path(),
        &format!("prompt_tokens = {{ limit = {limit} }}"),
    );
    let again: Vec<HistoryRow> = limited.read_csv(HISTORY_FILE).unwrap();
    let search = |rows: &[HistoryRow]| -> Vec<(u32, String, String)> {
        rows.iter()
            .map(|r| (r.generation, r.prompt.clone(), r.score.to_string()))
            .collect()
    };
    assert_eq!(
        search(&again),
        search(&history),
        "objectives do not steer the search"
    );

    // The recommended prompt: the best score among the candidates within the limit.
    let within: Vec<&HistoryRow> = again.iter().filter(|r| prompt_tokens(r) <= limit).collect();
    let recommended =
        within.iter().fold(
            within[0],
            |best, row| if row.score > best.score { row } else { best },
        );
    assert!(prompt_tokens(recommended) <= limit);
    assert!(recommended.score <= top.score);
    assert!(
        again.iter().any(|r| prompt_tokens(r) > limit),
        "the limit excludes some"
    );

    // The report: the frontier chart, and the recommended against the cheapest on the holdout.
    let results = json(&limited, "results.json");
    let label = |generation: u32| {
        if generation == 0 {
            "seed".to_owned()
        } else {
            format!("g{generation}")
        }
    };
    assert_eq!(results["best"]["version"], label(recommended.generation));
    let costs = &results["costs"][0];
    assert_eq!(costs["recommended"], label(recommended.generation));
    assert_eq!(costs["axis"], "prompt_tokens");
    assert_eq!(costs["limit"], limit);
    let holdout = costs["holdout"].as_array().expect("a holdout table");
    assert!(!holdout.is_empty());
    for row in holdout {
        assert!(row["answered_rows"].as_u64().unwrap() > 0, "{row}");
        assert!(row["mean_prompt_tokens"].as_f64().unwrap() > 0.0, "{row}");
    }
    let chart = std::fs::read_to_string(limited.file("charts/frontier-experiment.svg"))
        .expect("the frontier chart");
    assert!(
        chart.contains("<svg") && chart.contains("frontier"),
        "{chart}"
    );
    let page = std::fs::read_to_string(limited.file("index.html")).unwrap();
    assert!(page.contains("Score against cost"));
    let summary = std::fs::read_to_string(limited.file("summary.md")).unwrap();
    assert!(
        summary.contains("**Score against cost: experiment**"),
        "{summary}"
    );
    assert!(summary.contains("| recommended"), "{summary}");

    // A limit only the seed is within, and an evolved prompt that scored higher (its Pareto
    // score raised in the history, the report rendered again): the seed is the recommended
    // version, and the report says why in those words, not that no evolved prompt scored higher.
    let seed_cost = prompt_tokens(&history[0]);
    assert!(
        history.iter().skip(1).all(|r| prompt_tokens(r) > seed_cost),
        "every child is longer than the seed: {history:?}"
    );
    let seed_only_out = tempfile::tempdir().unwrap();
    let seed_only = run_with(
        &upstream.url,
        seed_only_out.path(),
        &format!("prompt_tokens = {{ limit = {seed_cost} }}"),
    );
    let mut raised: Vec<HistoryRow> = seed_only.read_csv(HISTORY_FILE).unwrap();
    raised[1].score = 1.0;
    assert!(raised[1].score > raised[0].score);
    seed_only.write_csv(HISTORY_FILE, &raised).unwrap();
    let output = crate::common::command()
        .arg("report")
        .arg(seed_only.file(""))
        .stdin(Stdio::null())
        .output()
        .expect("gepa-lab report runs");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(json(&seed_only, "results.json")["best"]["version"], "seed");
    let because = "The seed is the best version: no evolved prompt within the objectives' limits \
                   scored above the seed on the evolution's own score (its Pareto rows), less its weighted \
                   costs";
    let summary = std::fs::read_to_string(seed_only.file("summary.md")).unwrap();
    assert!(summary.contains(because), "{summary}");
    let page = std::fs::read_to_string(seed_only.file("index.html")).unwrap();
    assert!(
        page.contains("no evolved prompt within the objectives"),
        "{page}"
    );
}

#[test]
fn a_better_prompt_that_costs_more_is_tabled_against_the_cheapest_with_a_verdict() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    // With this seed the stand-in model's search finds a child that scores above the seed on the
    // Pareto rows and is longer than it: the trade the holdout table exists for.
    let upstream = upstream(&runtime, "model=local,seed=9");
    let out = tempfile::tempdir().unwrap();
    let dir = run_with(
        &upstream.url,
        out.path(),
        "prompt_tokens = { weight = 0.001 }",
    );
    let history: Vec<HistoryRow> = dir.read_csv(HISTORY_FILE).unwrap();
    let seed = &history[0];
    let top = history.iter().fold(
        seed,
        |best, row| {
            if row.score > best.score { row } else { best }
        },
    );
    assert!(top.score > seed.score, "{history:?}");
    assert!(prompt_tokens(top) > prompt_tokens(seed), "{history:?}");
    let top_label = format!("g{}", top.generation);

    let results = json(&dir, "results.json");
    let costs = &results["costs"][0];
    assert_eq!(costs["recommended"], top_label.as_str(), "{costs:#}");
    let holdout = costs["holdout"].as_array().expect("a holdout table");
    let roles: Vec<(&str, &str)> = holdout
        .iter()
        .map(|row| {
            (
                row["version"].as_str().unwrap(),
                row["role"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        roles,
        [(top_label.as_str(), "recommended"), ("seed", "cheapest")],
        "{costs:#}"
    );
    for row in holdout {
        assert!(row["answered_rows"].as_u64().unwrap() > 0, "{row}");
    }
    assert!(
        holdout[0]["mean_prompt_tokens"].as_f64() > holdout[1]["mean_prompt_tokens"].as_f64(),
        "{costs:#}"
    );
    let comparison = &costs["comparison"];
    assert_eq!(
        comparison["rows"].as_u64(),
        holdout[1]["answered_rows"].as_u64(),
        "{comparison}"
    );
    let verdict = comparison["verdict"].as_str().expect("a verdict");
    // The line names the cheapest first: the difference and the verdict are its own.
    let line = format!("Cheapest (seed) against recommended ({top_label})");
    let page = std::fs::read_to_string(dir.file("index.html")).unwrap();
    assert!(page.contains(&line), "{page}");
    assert!(page.contains(verdict), "{verdict}");
    let summary = std::fs::read_to_string(dir.file("summary.md")).unwrap();
    assert!(summary.contains(&line), "{summary}");
    // The cheapest is chosen on the Pareto rows, before the holdout: the line says so, since the
    // holdout may then find it significantly worse.
    assert!(
        summary.contains("cheapest not significantly worse on the Pareto rows seed"),
        "{summary}"
    );
}

/// The public service takes no engine settings, and `[objectives]` travel with them: `run
/// --backend remote` refuses the file before anything is created, naming the tables it sets
/// (`[objectives]`, `[engine]` or both) and advising to remove those, not another.
#[test]
fn the_public_service_refusal_names_the_tables_the_file_sets() {
    let fixtures = root().join("tests/fixtures");
    let text = std::fs::read_to_string(fixtures.join("run_experiments/objectives.toml"))
        .unwrap()
        .replace(
            "../data/tiny.csv",
            &fixtures.join("data/tiny.csv").display().to_string(),
        )
        .replace(
            "\"reflection.md\"",
            &format!(
                "{:?}",
                fixtures
                    .join("run_experiments/reflection.md")
                    .display()
                    .to_string()
            ),
        );
    let engine = "[engine]\nreflection_template = ";
    let engine_line = text
        .lines()
        .find(|line| line.starts_with("reflection_template = "))
        .unwrap()
        .to_owned();
    let objectives = "[objectives]\nprompt_tokens = { limit = 1000000 }\n";
    let cases = [
        (
            "objectives only",
            text.replace(&format!("[engine]\n{engine_line}\n"), ""),
            "[objectives] is set but the public evolution service takes no engine settings",
            "or remove [objectives]\n",
        ),
        (
            "engine only",
            text.replace(objectives, ""),
            "[engine] sets reflection_template but the public evolution service",
            "or remove [engine]\n",
        ),
        (
            "both",
            text.clone(),
            "[engine] sets reflection_template and [objectives] is set but the public",
            "or remove [engine] and [objectives]\n",
        ),
    ];
    assert!(text.contains(engine) && text.contains(objectives), "{text}");
    for (case, text, set, remove) in cases {
        let out = tempfile::tempdir().unwrap();
        let file = out.path().join("objectives.toml");
        std::fs::write(&file, &text).unwrap();
        let elsewhere = out.path().join("runs");
        std::fs::create_dir(&elsewhere).unwrap();
        let output = crate::common::command()
            .args(["run", "--backend", "remote", "--yes", "--out"])
            .arg(&elsewhere)
            .arg(&file)
            .stdin(Stdio::null())
            .output()
            .expect("gepa-lab runs");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{case}: {stderr}");
        assert!(stderr.contains(set), "{case}: {stderr}");
        assert!(stderr.contains(remove), "{case}: {stderr}");
        assert_eq!(
            std::fs::read_dir(&elsewhere).unwrap().count(),
            0,
            "{case}: nothing was started"
        );
    }
}
