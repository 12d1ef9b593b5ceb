//! `gepa-lab plan --json`: the exact bodies sent to the evolution service, snapshot-tested for
//! the example experiments so that any change to what we send shows up in review.
use crate::common::{gepa_lab, stdout};

fn plan(file: &str) -> serde_json::Value {
    let output = gepa_lab(&["plan", "--json", file]);
    assert!(
        output.status.success(),
        "{}{}",
        stdout(&output),
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("JSON")
}

#[test]
fn sentiment_plan() {
    let plan = plan("experiments/sentiment.toml");
    let start = &plan["executions"][0]["start"];
    assert_eq!(
        start["dataset"].as_array().unwrap().len(),
        20,
        "minibatch 8 + pareto 12"
    );
    assert_eq!(start["minibatchSize"], 8);
    assert_eq!(start["paretoSize"], 12);
    let evaluator: serde_json::Value = serde_json::from_str(
        start["evaluator"]
            .as_str()
            .expect("evaluator is a JSON string"),
    )
    .unwrap();
    assert_eq!(
        evaluator,
        serde_json::json!({"model": "gpt-4o-mini", "metric": "accuracy"})
    );
    insta::assert_json_snapshot!(plan);
}

#[test]
fn support_tickets_plan() {
    insta::assert_json_snapshot!(plan("experiments/support_tickets.toml"));
}

#[test]
fn extraction_plan() {
    insta::assert_json_snapshot!(plan("experiments/extraction.toml"));
}

#[test]
fn variants_plan() {
    let plan = plan("experiments/sentiment_budgets.toml");
    let executions = plan["executions"].as_array().unwrap();
    let budgets: Vec<u64> = executions
        .iter()
        .map(|e| e["start"]["budget"].as_u64().unwrap())
        .collect();
    assert_eq!(budgets, [10, 25, 50]);
    for execution in executions {
        let id = execution["start"]["customId"].as_str().unwrap();
        assert!(
            id.len() <= 50 && id.starts_with("sentiment-budgets-budget-"),
            "{id}"
        );
    }
    insta::assert_json_snapshot!(plan);
}

#[test]
fn human_plan_prints_each_body() {
    let output = gepa_lab(&["plan", "experiments/sentiment_budgets.toml"]);
    let text = stdout(&output);
    assert!(output.status.success());
    assert_eq!(
        text.matches("POST /gepa/start_execution").count(),
        3,
        "{text}"
    );
    assert!(text.contains("\"minibatchSize\": 4"), "{text}");
    // A classification's plan says what always answering its most common label would score on
    // the rows the engine sees, before anything is spent.
    let baselines: Vec<&str> = text
        .lines()
        .filter(|line| line.starts_with("feedback and Pareto rows: Always answering `"))
        .collect();
    assert_eq!(baselines.len(), 3, "{text}");
    assert!(
        baselines[0].contains("under `exact_match_ci` on these 12 rows"),
        "{text}"
    );
}

#[test]
fn schema_lists_every_table() {
    let output = gepa_lab(&["schema"]);
    let schema: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    for table in [
        "prompt",
        "dataset",
        "evolution",
        "evaluator",
        "replay",
        "variants",
    ] {
        assert!(schema["properties"].get(table).is_some(), "{table} missing");
    }
}

#[test]
fn a_variant_overrides_engine_settings_and_keeps_the_run_seed() {
    let dir = tempfile::tempdir().expect("temp dir");
    let data = crate::common::root().join("tests/fixtures/data/tiny.csv");
    let file = dir.path().join("engine-variants.toml");
    std::fs::write(
        &file,
        format!(
            r#"name = "engine-variants"

[prompt]
seed = "Is this review positive or negative?\nReview: {{review}}"

[dataset]
file = "{}"
inputs = ["review"]
expected = "label"
minibatch = 2
pareto = 4
holdout = "rest"

[evolution]
strategy = "RPM"
model = "gpt-4o-mini"
budget = 40

[evaluator]
model = "gpt-4o-mini"
metric = "exact_match"

[engine]
seed = 7
reflection_minibatch = 2

[[variants]]
name = "plain"

[[variants]]
name = "merged"
[variants.engine]
merge = true
seed = 7
"#,
            data.display()
        ),
    )
    .unwrap();
    let plan = plan(file.to_str().unwrap());
    let engines: Vec<&serde_json::Value> = plan["executions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|execution| &execution["start"]["gepaLabEngine"])
        .collect();
    assert_eq!(engines.len(), 2);
    // The variant's own key is applied and the base's kept.
    assert_eq!(engines[0].get("merge"), None, "{engines:?}");
    assert_eq!(engines[1]["merge"], true, "{engines:?}");
    for engine in engines {
        assert_eq!(engine["reflectionMinibatch"], 2, "{engine}");
    }
}
