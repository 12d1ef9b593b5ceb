//! `gepa-lab validate`: every rule has a failing fixture, and each is reported at its line.
use std::path::{Path, PathBuf};

use gepa_lab::experiment::Rule;

use crate::common::{gepa_lab, root, stdout, validate_json};

/// A fixture in `tests/fixtures/invalid/` says what it breaks in its second line:
/// `# expect: RULE at LINE` (a line of the fixture itself) or `# expect: RULE at FILE:LINE`
/// (a line of another file, such as a CSV, relative to the fixture).
struct Expectation {
    rule: String,
    file: PathBuf,
    line: u64,
}

fn expectation(fixture: &Path) -> Expectation {
    let text = std::fs::read_to_string(fixture).expect("fixture readable");
    let spec = text
        .lines()
        .find_map(|line| line.strip_prefix("# expect: "))
        .unwrap_or_else(|| panic!("{} has no `# expect:` line", fixture.display()));
    let (rule, place) = spec.split_once(" at ").expect("`RULE at PLACE`");
    let (file, line) = match place.rsplit_once(':') {
        Some((file, line)) => (fixture.parent().unwrap().join(file), line),
        None => (fixture.to_owned(), place),
    };
    Expectation {
        rule: rule.to_owned(),
        file: file.canonicalize().expect("expected file exists"),
        line: line.trim().parse().expect("a line number"),
    }
}

fn fixtures() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(root().join("tests/fixtures/invalid"))
        .expect("fixture folder")
        .map(|entry| entry.expect("dir entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "toml"))
        .collect();
    files.sort();
    files
}

#[test]
fn every_fixture_reports_its_rule_at_its_line() {
    let mut failures = Vec::new();
    for fixture in fixtures() {
        let expected = expectation(&fixture);
        let (report, code) = validate_json(&fixture);
        let diagnostics = report["diagnostics"].as_array().expect("diagnostics array");
        let found = diagnostics.iter().any(|d| {
            d["rule"] == expected.rule.as_str()
                && d["location"]["line"].as_u64() == Some(expected.line)
                && d["location"]["file"]
                    .as_str()
                    .and_then(|file| root().join(file).canonicalize().ok())
                    .is_some_and(|file| file == expected.file)
                && !d["message"].as_str().unwrap_or_default().is_empty()
        });
        if !found {
            failures.push(format!(
                "{}: expected {} at {}:{}, got {}",
                fixture.display(),
                expected.rule,
                expected.file.display(),
                expected.line,
                serde_json::to_string_pretty(diagnostics).unwrap()
            ));
        }
        let is_warning = diagnostics
            .iter()
            .filter(|d| d["rule"] == expected.rule.as_str())
            .all(|d| d["severity"] == "warning");
        let expected_code = if is_warning { 0 } else { 1 };
        if code != expected_code {
            failures.push(format!(
                "{}: exit {code}, expected {expected_code}",
                fixture.display()
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn every_rule_has_a_fixture() {
    let covered: Vec<String> = fixtures().iter().map(|f| expectation(f).rule).collect();
    let missing: Vec<&str> = Rule::ALL
        .iter()
        .map(|rule| rule.id())
        // The providers' answers are checked by `plan --check` and `run`, not by `validate`
        // (tests/it/providers.rs).
        .filter(|id| !["file-read", "provider-unreachable", "provider-model"].contains(id))
        .filter(|id| !covered.iter().any(|c| c == id))
        .collect();
    assert!(missing.is_empty(), "rules without a fixture: {missing:?}");
}

#[test]
fn missing_file_is_reported_not_panicked() {
    let (report, code) = validate_json(Path::new("experiments/no-such-file.toml"));
    assert_eq!(code, 1);
    assert_eq!(report["diagnostics"][0]["rule"], "file-read");
    assert_eq!(
        report["diagnostics"][0]["location"]["file"],
        "experiments/no-such-file.toml"
    );
}

#[test]
fn examples_are_valid() {
    let output = gepa_lab(&[
        "validate",
        "experiments/sentiment.toml",
        "experiments/support_tickets.toml",
        "experiments/extraction.toml",
        "experiments/sentiment_budgets.toml",
    ]);
    let text = stdout(&output);
    assert!(output.status.success(), "{text}");
    assert_eq!(
        text.matches(": valid (0 errors, 0 warnings)").count(),
        3,
        "{text}"
    );
    // The budget matrix is there to show what small budgets buy: each of its variants is told
    // how few reflections its budget pays for, and nothing else.
    assert!(
        text.contains("experiments/sentiment_budgets.toml: valid (0 errors, 3 warnings)"),
        "{text}"
    );
    assert_eq!(
        text.matches("warning[budget-reflections]").count(),
        3,
        "{text}"
    );
    assert!(text.contains(
        "budget 10 with pareto 8 leaves room for 0 reflections when every proposal is accepted"
    ));
}

#[test]
fn all_problems_are_reported_at_once_with_position_and_help() {
    let output = gepa_lab(&["validate", "tests/fixtures/many_problems.toml"]);
    let text = stdout(&output);
    assert_eq!(output.status.code(), Some(1));
    for expected in [
        "tests/fixtures/many_problems.toml:1:8: error[name-format]",
        "tests/fixtures/many_problems.toml:10:1: error[unknown-key]: unknown key `dataset.minibach`",
        "= help: did you mean `minibatch`?",
        "tests/fixtures/many_problems.toml:15:9: error[evolution-model]",
        "= help: did you mean \"gpt-4o-mini\"?",
        "tests/fixtures/many_problems.toml:8:21: error[dataset-column]: column \"lable\"",
        "= help: did you mean \"label\"?",
        "tests/fixtures/many_problems.toml:16:10: error[budget-min]",
        "= seen: 0",
        "invalid (5 errors, 1 warning)",
    ] {
        assert!(text.contains(expected), "missing {expected:?} in:\n{text}");
    }
}

#[test]
fn usage_errors_exit_with_2() {
    assert_eq!(gepa_lab(&["validate"]).status.code(), Some(2));
    assert_eq!(gepa_lab(&["no-such-command"]).status.code(), Some(2));
}

#[test]
fn a_variant_override_is_reported_at_the_variant() {
    let (report, code) = validate_json(Path::new("tests/fixtures/variant_override.toml"));
    assert_eq!(code, 1);
    let diagnostics = report["diagnostics"].as_array().unwrap();
    let budget = diagnostics
        .iter()
        .find(|d| d["rule"] == "budget-min")
        .expect("budget-min reported");
    assert_eq!(budget["location"]["line"], 36);
    assert_eq!(budget["variant"], "zero");
    assert_eq!(
        diagnostics
            .iter()
            .filter(|d| d["rule"] == "budget-low")
            .count(),
        0,
        "the base budget is fine: {diagnostics:?}"
    );
}

#[test]
fn the_experiment_page_lists_every_rule() {
    let page = std::fs::read_to_string(root().join("docs/experiment-file.md"))
        .expect("docs/experiment-file.md");
    for rule in Rule::ALL {
        let row = format!("| `{}` | {} |", rule.id(), rule.summary());
        assert!(
            page.contains(&row),
            "docs/experiment-file.md lacks the row {row:?}; paste `gepa-lab validate --rules`"
        );
    }
}
