//! Each numeric and textual rule of the format at its edge: the last value it accepts and the
//! first it refuses, on a small edit of `tests/fixtures/valid.toml`. (Every rule's refusal, at
//! its line, is also checked end to end by the fixtures of `tests/fixtures/invalid`.)
use std::path::{Path, PathBuf};

use super::*;
use crate::Severity;
use gepa_lab_dataset::SplitError;

/// The fixture every case edits, with a budget of 40 so that it warns of nothing: a 20-row
/// dataset, minibatch 2, pareto 4, so a holdout of the rest is 14 rows.
fn base() -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures");
    let text = std::fs::read_to_string(root.join("valid.toml")).expect("the valid fixture");
    let data = root.join("data/tiny.csv");
    text.replace(
        "file = \"data/tiny.csv\"",
        &format!("file = {:?}", data.display().to_string()),
    )
    .replace("budget = 30", "budget = 40")
}

/// The base with each key's line (`key =`, or all the lines of its multi-line string) replaced
/// by the edit's lines; an edit whose key is a table (`[engine]`) is appended.
fn edited(edits: &[(&str, &str)]) -> String {
    let mut text = base();
    for (key, lines) in edits {
        if key.starts_with('[') {
            text = format!("{text}\n{key}\n{lines}\n");
            continue;
        }
        let prefix = format!("{key} =");
        let at = text
            .lines()
            .position(|line| line.starts_with(&prefix))
            .unwrap_or_else(|| panic!("the base has no line starting with {prefix:?}"));
        let mut out: Vec<&str> = text.lines().collect();
        // A multi-line string ends at the next line holding the closing quotes.
        let end = if out[at].matches("\"\"\"").count() == 1 {
            (at + 1..out.len())
                .find(|&i| out[i].contains("\"\"\""))
                .expect("a closed multi-line string")
        } else {
            at
        };
        out.splice(at..=end, [*lines]);
        text = out.join("\n");
    }
    text
}

/// Validates `text` as a file in a fresh folder.
fn validate(text: &str) -> Validation {
    let folder = tempfile::tempdir().unwrap();
    let file: PathBuf = folder.path().join("experiment.toml");
    std::fs::write(&file, text).unwrap();
    validate_file(&file, &Settings::default())
}

/// The rules `edits` break, errors and warnings alike, each once, in rule order.
fn rules(edits: &[(&str, &str)]) -> Vec<Rule> {
    let validation = validate(&edited(edits));
    // A file is refused only with an error that says why.
    assert_eq!(
        validation.plan.is_none(),
        validation.diagnostics.iter().any(Diagnostic::is_error),
        "{edits:?}: a plan without errors or errors with a plan: {:?}",
        validation.diagnostics
    );
    let mut rules: Vec<Rule> = validation.diagnostics.iter().map(|d| d.rule).collect();
    rules.sort_by_key(|rule| Rule::ALL.iter().position(|r| r == rule));
    rules.dedup();
    rules
}

/// Edits of the base: a key (or a table to append) and the lines that replace it.
type Edits<'a> = &'a [(&'a str, &'a str)];

/// Each case: the edits, then the rules they must break (none: the value is accepted).
fn assert_cases(cases: &[(Edits<'_>, &[Rule])]) {
    for (edits, expected) in cases {
        assert_eq!(rules(edits), *expected, "edits {edits:?}");
    }
}

#[test]
fn the_base_is_valid_and_warns_of_nothing() {
    let validation = validate(&base());
    assert!(
        validation.diagnostics.is_empty(),
        "{:?}",
        validation.diagnostics
    );
    let plan = validation.plan.expect("a plan");
    assert_eq!(plan.executions.len(), 1);
    assert_eq!(plan.executions[0].dataset.holdout_rows, 14);
}

#[test]
fn a_name_is_1_to_40_lowercase_letters_digits_underscores_or_hyphens() {
    let forty = format!("name = \"{}\"", "a".repeat(40));
    let forty_one = format!("name = \"{}\"", "a".repeat(41));
    assert_cases(&[
        (&[("name", "name = \"a\"")], &[]),
        (&[("name", "name = \"a_b-9\"")], &[]),
        (&[("name", &forty)], &[]),
        (&[("name", &forty_one)], &[Rule::NameFormat]),
        (&[("name", "name = \"\"")], &[Rule::NameFormat]),
        (&[("name", "name = \"Fixture\"")], &[Rule::NameFormat]),
        (&[("name", "name = \"a b\"")], &[Rule::NameFormat]),
        (&[("name", "name = \"é\"")], &[Rule::NameFormat]),
    ]);
}

#[test]
fn a_custom_id_has_at_most_50_characters() {
    let with = |id: String| format!("budget = 40\ncustom_id = \"{id}\"");
    let fifty = with("c".repeat(50));
    let fifty_one = with("c".repeat(51));
    assert_cases(&[
        (&[("budget", &fifty)], &[]),
        (&[("budget", &fifty_one)], &[Rule::CustomIdLength]),
    ]);
}

#[test]
fn minibatch_and_pareto_are_at_least_1_and_fit_in_the_rows() {
    assert_cases(&[
        (&[("minibatch", "minibatch = 1")], &[]),
        (&[("minibatch", "minibatch = 0")], &[Rule::MinibatchMin]),
        (&[("minibatch", "minibatch = -3")], &[Rule::MinibatchMin]),
        (&[("pareto", "pareto = 1")], &[]),
        (&[("pareto", "pareto = 0")], &[Rule::ParetoMin]),
        // 20 rows: 2 + 17 leaves 1 for the holdout; 2 + 18 leaves none, 2 + 19 is one too many.
        (
            &[("pareto", "pareto = 17"), ("budget", "budget = 200")],
            &[],
        ),
        (&[("pareto", "pareto = 17")], &[Rule::BudgetReflections]),
        (
            &[("pareto", "pareto = 18"), ("budget", "budget = 200")],
            &[Rule::HoldoutEmpty],
        ),
        (&[("pareto", "pareto = 19")], &[Rule::DatasetRows]),
    ]);
}

#[test]
fn a_holdout_is_rest_none_or_a_count_that_fits() {
    assert_cases(&[
        (&[("holdout", "holdout = 14")], &[]),
        (&[("holdout", "holdout = 1")], &[]),
        (&[("holdout", "holdout = 15")], &[Rule::HoldoutSize]),
        (&[("holdout", "holdout = -1")], &[Rule::HoldoutValue]),
        (&[("holdout", "holdout = \"all\"")], &[Rule::HoldoutValue]),
        // With [replay], no holdout row is nothing to replay on.
        (&[("holdout", "holdout = 0")], &[Rule::HoldoutEmpty]),
        (&[("holdout", "holdout = \"none\"")], &[Rule::HoldoutEmpty]),
    ]);
}

#[test]
fn a_budget_is_at_least_1_and_below_10_is_a_warning() {
    let rules_at = |budget: u32| rules(&[("budget", &format!("budget = {budget}"))]);
    assert!(rules_at(0).contains(&Rule::BudgetMin));
    assert!(!rules_at(1).contains(&Rule::BudgetMin));
    assert!(rules_at(9).contains(&Rule::BudgetLow));
    assert!(!rules_at(10).contains(&Rule::BudgetLow));
    let errors = |budget: u32| {
        validate(&edited(&[("budget", &format!("budget = {budget}"))]))
            .diagnostics
            .iter()
            .filter(|d| d.severity == Severity::Error)
            .count()
    };
    assert_eq!(errors(0), 1);
    assert_eq!(errors(1), 0, "a low budget is a warning, not an error");
}

/// The budget-reflections warning tells the budget that silences it, and that budget does.
#[test]
fn the_budget_the_reflections_warning_asks_for_is_enough() {
    let mut warned = 0;
    for budget in 1..=60 {
        let validation = validate(&edited(&[("budget", &format!("budget = {budget}"))]));
        let Some(warning) = validation
            .diagnostics
            .iter()
            .find(|d| d.rule == Rule::BudgetReflections)
        else {
            continue;
        };
        warned += 1;
        let help = warning.help.as_deref().expect("a help line");
        let needed: u32 = help
            .strip_prefix("raise the budget to ")
            .and_then(|rest| rest.split(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no budget in {help:?}"));
        assert!(needed > budget, "budget {budget}: {help}");
        assert!(
            !rules(&[("budget", &format!("budget = {needed}"))]).contains(&Rule::BudgetReflections),
            "budget {budget} asks for {needed}, which still warns"
        );
    }
    assert!(warned > 0, "no budget from 1 to 60 warned");
}

/// A budget below the Pareto rows cannot even score the seed: the built-in engine refuses to
/// start, so the warning says so rather than counting reflections (until 2026-11-30 such a file
/// validated without a word, and its run replayed the seed alone).
#[test]
fn a_budget_below_the_pareto_rows_warns_that_no_evolution_can_start() {
    let message = |budget: u32| {
        validate(&edited(&[("budget", &format!("budget = {budget}"))]))
            .diagnostics
            .into_iter()
            .find(|d| d.rule == Rule::BudgetReflections)
            .map(|d| d.message)
    };
    // The base has 4 Pareto rows.
    let below = message(3).expect("budget 3 with pareto 4 warns");
    assert!(below.contains("no evolution can start"), "{below}");
    let at = message(4).expect("budget 4 pays for no reflection");
    assert!(at.contains("leaves room for 0 reflections"), "{at}");
}

#[test]
fn a_threshold_is_from_0_to_1() {
    let threshold = |value: &str| format!("metric = \"exact_match\"\nthreshold = {value}");
    let at = |value: &str| rules(&[("metric", &threshold(value))]);
    assert_eq!(at("0.0"), []);
    assert_eq!(at("1.0"), []);
    assert_eq!(at("1.01"), [Rule::EvaluatorThreshold]);
    assert_eq!(at("-0.01"), [Rule::EvaluatorThreshold]);
    assert_eq!(at("nan"), [Rule::EvaluatorThreshold]);
}

#[test]
fn the_replay_numbers_have_their_ranges() {
    let replay = |line: &str| format!("scorer = \"exact_match\"\n{line}");
    let at = |line: &str| rules(&[("scorer", &replay(line))]);
    assert_eq!(at("repeat = 1"), []);
    assert_eq!(at("repeat = 100\ntemperature = 0.7"), []);
    assert_eq!(at("repeat = 101\ntemperature = 0.7"), [Rule::ReplayRepeat]);
    assert_eq!(at("repeat = 0"), [Rule::ReplayRepeat]);
    assert_eq!(at("repeat = 2"), [Rule::ReplayRepeatGreedy]);
    assert_eq!(at("temperature = 0.0"), []);
    assert_eq!(at("temperature = -0.1"), [Rule::ReplayTemperature]);
    assert_eq!(at("temperature = 2.0"), []);
    assert_eq!(at("temperature = 7.5"), [Rule::ReplayTemperature]);
    assert_eq!(at("concurrency = 1"), []);
    assert_eq!(at("concurrency = 0"), [Rule::ReplayConcurrency]);
    assert_eq!(at("concurrency = 256"), []);
    assert_eq!(at("concurrency = 100000"), [Rule::ReplayConcurrency]);
    assert_eq!(at("max_tokens = 1"), []);
    assert_eq!(at("max_tokens = 0"), [Rule::ReplayMaxTokens]);
    assert_eq!(at("max_tokens = 32768"), []);
    // Past u32 it was once dropped without a word, and the service's default sent instead.
    assert_eq!(at("max_tokens = 5000000000"), [Rule::ReplayMaxTokens]);
    assert_eq!(rules(&[("top", "top = 1")]), []);
    assert_eq!(rules(&[("top", "top = 0")]), [Rule::ReplayTop]);
    assert_eq!(
        rules(&[("models", "models = [\"local\", \"local\"]")]),
        [Rule::ReplayModels]
    );
    assert_eq!(rules(&[("models", "models = []")]), [Rule::ReplayModels]);
}

#[test]
fn every_engine_number_is_checked_at_both_ends_of_its_range() {
    let cases: &[(&str, &str, &str, &str, &str)] = &[
        // key, lowest accepted, highest accepted, below, above
        ("reflection_minibatch", "1", "64", "0", "65"),
        ("reflection_max_tokens", "1", "32768", "0", "32769"),
        ("max_seconds", "1", "604800", "0", "604801"),
        ("stall_iterations", "1", "10000", "0", "10001"),
        ("parallel_calls", "1", "64", "0", "65"),
        ("demonstrations", "0", "16", "-1", "17"),
        ("reflection_temperature", "0.0", "2.0", "-0.5", "2.5"),
        ("score_threshold", "0.0", "1.0", "-0.1", "1.1"),
    ];
    for (key, low, high, below, above) in cases {
        let at = |value: &str| rules(&[("[engine]", &format!("{key} = {value}"))]);
        assert_eq!(at(low), [], "{key} = {low}");
        assert_eq!(at(high), [], "{key} = {high}");
        assert_eq!(at(below), [Rule::EngineRange], "{key} = {below}");
        assert_eq!(at(above), [Rule::EngineRange], "{key} = {above}");
    }
    let engine = |line: &str| rules(&[("[engine]", line)]);
    assert_eq!(engine("seed = 0"), []);
    assert_eq!(engine("seed = -1"), [Rule::EngineRange]);
    assert_eq!(engine("on_error = \"score_zero\""), []);
    assert_eq!(engine("on_error = \"skip\""), [Rule::EngineOnError]);
    assert_eq!(engine("proposer = \"rules\""), []);
    assert_eq!(engine("proposer = \"rewrite\""), []);
    assert_eq!(engine("proposer = \"rule\""), [Rule::EngineProposer]);
    // A reflection template asks for whole prompts, which the rules proposer never writes.
    let both = engine("proposer = \"rules\"\nreflection_template = \"reflection.md\"");
    assert!(both.contains(&Rule::EngineProposer), "{both:?}");
    assert_eq!(engine("reflection_model = \"local\""), []);
    assert_eq!(
        engine("reflection_model = \" \""),
        [Rule::EngineReflectionModel]
    );
}

#[test]
fn the_strategy_is_rpm_or_sam_and_sam_is_a_warning() {
    assert_eq!(
        rules(&[("strategy", "strategy = \"SAM\"")]),
        [Rule::StrategySam]
    );
    assert_eq!(
        rules(&[("strategy", "strategy = \"GEPA\"")]),
        [Rule::Strategy]
    );
}

#[test]
fn the_seed_prompt_has_one_source_and_names_only_input_columns() {
    assert_cases(&[
        (&[("seed", "seed = \"{review} {{literal}}\"")], &[]),
        (&[("seed", "seed = \"\"")], &[Rule::PromptEmpty]),
        (&[("seed", "seed = \"{review\"")], &[Rule::PromptSyntax]),
        (
            &[("seed", "seed = \"{rating}\"")],
            &[Rule::PromptVariable, Rule::PromptUnusedInput],
        ),
        (
            &[("seed", "seed = \"{review} {rating}\"")],
            &[Rule::PromptVariable],
        ),
        (
            &[("seed", "seed = \"no column at all\"")],
            &[Rule::PromptUnusedInput],
        ),
    ]);
}

/// The base with `[providers.ollama]` of `lines` (after its URL) appended and its replay models
/// replaced by `models`.
fn with_provider(models: &str, lines: &str) -> Vec<Rule> {
    let provider = format!("url = \"http://127.0.0.1:11434/v1\"\n{lines}");
    rules(&[
        ("models", &format!("models = {models}")),
        ("[providers.ollama]", &provider),
    ])
}

/// A variable no test environment sets.
const UNSET: &str = "GEPA_LAB_TEST_SURELY_UNSET_VARIABLE_43";

#[test]
fn a_provider_is_checked_field_by_field_at_both_ends_of_each_range() {
    let at = |line: &str| with_provider("[\"local\"]", line);
    assert_eq!(at(""), []);
    for (key, low, high) in [
        ("rpm", 1, 100_000),
        ("max_in_flight", 1, 1024),
        ("timeout_secs", 1, 3600),
    ] {
        assert_eq!(at(&format!("{key} = {low}")), [], "{key} = {low}");
        assert_eq!(at(&format!("{key} = {high}")), [], "{key} = {high}");
        let below = at(&format!("{key} = {}", low - 1));
        assert_eq!(below, [Rule::ProviderRange], "{key}");
        let above = at(&format!("{key} = {}", high + 1));
        assert_eq!(above, [Rule::ProviderRange], "{key}");
    }
    assert_eq!(at("headers = { \"X-Title\" = \"lab\" }"), []);
    assert_eq!(at("headers = { \"X-Key\" = { env = \"HOME\" } }"), []);
    assert_eq!(
        at("headers = { \"bad header\" = \"x\" }"),
        [Rule::ProviderHeader]
    );
    assert_eq!(
        at("headers = { \"X-Key\" = { env = \"a b\" } }"),
        [Rule::ProviderKeyEnv]
    );
    let url = |url: &str| rules(&[("[providers.ollama]", &format!("url = \"{url}\""))]);
    assert_eq!(url("https://api.openai.com/v1"), []);
    assert_eq!(url("ftp://host"), [Rule::ProviderUrl]);
    assert_eq!(url("http://"), [Rule::ProviderUrl]);
    for name in ["local", "public", "Big", "a.b"] {
        let table = format!("[providers.\"{name}\"]");
        let found = rules(&[(table.as_str(), "url = \"http://h\"")]);
        assert_eq!(found, [Rule::ProviderName], "{name}");
    }
}

#[test]
fn a_key_written_into_a_provider_is_never_shown() {
    let key = "sk-live-0123456789";
    for line in [format!("key_env = \"{key}\""), format!("key = \"{key}\"")] {
        let text = edited(&[(
            "[providers.openai]",
            &format!("url = \"https://api.openai.com/v1\"\n{line}"),
        )]);
        let validation = validate(&text);
        assert_eq!(
            validation.errors(),
            1,
            "{line}: {:?}",
            validation.diagnostics
        );
        let shown: String = validation
            .diagnostics
            .iter()
            .map(|d| d.to_string())
            .collect();
        assert!(!shown.contains(key), "{shown}");
        assert!(shown.contains("key_env = \"OPENAI_API_KEY\"") || shown.contains("key_env"));
    }
}

#[test]
fn model_references_name_declared_providers_whose_variables_are_set() {
    assert_eq!(
        with_provider("[\"ollama/qwen3:8b\"]", "key_env = \"HOME\""),
        []
    );
    assert_eq!(
        with_provider("[\"olama/qwen3:8b\"]", ""),
        [Rule::ModelProvider]
    );
    assert_eq!(with_provider("[\"ollama/\"]", ""), [Rule::ModelProvider]);
    // Far from every declared name: a public model id, as before providers existed.
    assert_eq!(with_provider("[\"meta-llama/llama-3\"]", ""), []);
    assert_eq!(with_provider("[\"public/olama/x\"]", ""), []);
    let unset = format!("key_env = \"{UNSET}\"");
    assert_eq!(
        with_provider("[\"ollama/q\"]", &unset),
        [Rule::ProviderKeyEnv]
    );
    // A provider no model uses may lack its key.
    assert_eq!(with_provider("[\"local\"]", &unset), []);
    let header = format!("headers = {{ \"X-Key\" = {{ env = \"{UNSET}\" }} }}");
    assert_eq!(
        with_provider("[\"ollama/q\"]", &header),
        [Rule::ProviderKeyEnv]
    );
    let engine = |line: &str| {
        rules(&[
            ("[providers.ollama]", "url = \"http://h/v1\""),
            ("[engine]", line),
        ])
    };
    assert_eq!(engine("task_model = \"ollama/q\""), []);
    assert_eq!(engine("task_model = \"olama/q\""), [Rule::ModelProvider]);
    assert_eq!(
        engine("reflection_model = \"ollam/q\""),
        [Rule::ModelProvider]
    );
    assert_eq!(engine("task_model = \"\""), [Rule::EngineReflectionModel]);
}

#[test]
fn the_plan_names_each_roles_provider_and_where_it_was_written() {
    let text = edited(&[
        ("models", "models = [\"ollama/qwen3:8b\", \"local\"]"),
        (
            "[providers.ollama]",
            "url = \"http://127.0.0.1:11434/v1\"\nrpm = 30",
        ),
        ("[providers.unused]", "url = \"http://127.0.0.1:1/v1\""),
        ("[engine]", "reflection_model = \"ollama/qwen3:32b\""),
    ]);
    let plan = validate(&text).plan.expect("valid");
    let names: Vec<&str> = plan.providers.keys().map(|n| n.as_str()).collect();
    assert_eq!(names, ["ollama"], "only the providers a model uses");
    let roles = &plan.executions[0].models;
    let reflection = roles.reflection.as_ref().unwrap();
    assert_eq!(
        (reflection.provider(), reflection.model()),
        ("ollama", "qwen3:32b")
    );
    assert_eq!(roles.replay[1], ModelRef::Embedded("local".into()));
    assert!(roles.task.is_none(), "left to the backend");
    let (key, _, at) = &plan.sources.references[0];
    assert_eq!(key, "engine.reflection_model");
    assert!(at.as_ref().is_some_and(|at| at.line > 20), "{at:?}");
    // A provider's calls are not the public service's credits.
    assert_eq!(plan.estimate.credits, 0.0);
    assert!(plan.estimate.replay_calls > 0);
}

#[test]
fn the_config_files_providers_may_be_named_and_the_experiments_own_win() {
    let folder = tempfile::tempdir().unwrap();
    let config = folder.path().join("config.toml");
    let declared = "[providers.team]\nurl = \"http://127.0.0.1:8000/v1\"\nmax_in_flight = 8\n\
                    [providers.ollama]\nurl = \"ftp://not-this-one\"\n\
                    [providers.broken]\nurl = \"http://h\"\nrpm = 0\n";
    std::fs::write(&config, declared).unwrap();
    let file = folder.path().join("experiment.toml");
    let settings = Settings {
        config_file: Some(config.clone()),
        ..Settings::default()
    };
    let text = edited(&[
        ("models", "models = [\"team/qwen\", \"ollama/qwen\"]"),
        ("[providers.ollama]", "url = \"http://127.0.0.1:11434/v1\""),
    ]);
    std::fs::write(&file, &text).unwrap();
    let validation = validate_file(&file, &settings);
    // The config's broken provider is reported in the config file, where it can be fixed.
    let errors: Vec<&Diagnostic> = validation
        .diagnostics
        .iter()
        .filter(|d| d.is_error())
        .collect();
    assert_eq!(errors.len(), 1, "{errors:?}");
    let at = errors[0].location.as_ref().unwrap();
    assert_eq!(
        (errors[0].rule, &at.file, at.line),
        (Rule::ProviderRange, &config, 8)
    );
    std::fs::write(&config, declared.replace("rpm = 0", "rpm = 1")).unwrap();
    let plan = validate_file(&file, &settings).plan.expect("valid");
    let team = plan
        .providers
        .values()
        .find(|p| p.name.as_str() == "team")
        .unwrap();
    assert_eq!(team.max_in_flight, Some(8));
    let ollama = plan
        .providers
        .values()
        .find(|p| p.name.as_str() == "ollama")
        .unwrap();
    assert_eq!(ollama.url, "http://127.0.0.1:11434/v1");
}

#[test]
fn each_objective_sets_exactly_one_of_a_limit_and_a_weight() {
    let objectives = |lines: &'static str| [("[objectives]", lines)];
    assert_cases(&[
        (&objectives("prompt_tokens = { limit = 120 }"), &[]),
        (&objectives("answer_tokens = { weight = 0.001 }"), &[]),
        (
            &objectives("prompt_tokens = { limit = 120, weight = 0.1 }"),
            &[Rule::ObjectivesOneOf],
        ),
        (&objectives("latency_ms = {}"), &[Rule::ObjectivesOneOf]),
        // An empty table is a mistake, not "no objectives".
        (&objectives(""), &[Rule::ObjectivesOneOf]),
        // An unknown key is named, and what is left names no objective.
        (
            &objectives("cost = { limit = 1 }"),
            &[Rule::UnknownKey, Rule::ObjectivesOneOf],
        ),
        (
            &objectives("prompt_tokens = { max = 1 }"),
            &[Rule::UnknownKey, Rule::ObjectivesOneOf],
        ),
    ]);
}

#[test]
fn an_objectives_limit_is_above_0_and_at_most_a_million_tokens_or_an_hour() {
    let objectives = |lines: &'static str| [("[objectives]", lines)];
    assert_cases(&[
        (&objectives("prompt_tokens = { limit = 0.5 }"), &[]),
        (&objectives("prompt_tokens = { limit = 1000000 }"), &[]),
        (&objectives("latency_ms = { limit = 3600000 }"), &[]),
        (
            &objectives("prompt_tokens = { limit = 0 }"),
            &[Rule::ObjectivesLimit],
        ),
        (
            &objectives("answer_tokens = { limit = -3 }"),
            &[Rule::ObjectivesLimit],
        ),
        (
            &objectives("answer_tokens = { limit = 1000001 }"),
            &[Rule::ObjectivesLimit],
        ),
        (
            &objectives("latency_ms = { limit = 3600001 }"),
            &[Rule::ObjectivesLimit],
        ),
        (
            &objectives("latency_ms = { limit = nan }"),
            &[Rule::ObjectivesLimit],
        ),
    ]);
}

#[test]
fn an_objectives_weight_is_above_0_and_at_most_1() {
    let objectives = |lines: &'static str| [("[objectives]", lines)];
    assert_cases(&[
        (&objectives("latency_ms = { weight = 1 }"), &[]),
        (&objectives("latency_ms = { weight = 0.000001 }"), &[]),
        (
            &objectives("latency_ms = { weight = 0 }"),
            &[Rule::ObjectivesWeight],
        ),
        (
            &objectives("prompt_tokens = { weight = 1.5 }"),
            &[Rule::ObjectivesWeight],
        ),
        (
            &objectives("prompt_tokens = { weight = -0.1 }"),
            &[Rule::ObjectivesWeight],
        ),
    ]);
}

#[test]
fn objectives_reach_the_engine_with_its_settings_and_name_their_line() {
    let text = edited(&[(
        "[objectives]",
        "prompt_tokens = { limit = 120 }\nanswer_tokens = { weight = 0.01 }",
    )]);
    let plan = validate(&text).plan.expect("valid");
    let engine = plan.executions[0].start.engine.as_ref().expect("settings");
    let objectives = engine.objectives.as_ref().expect("objectives");
    assert_eq!(
        objectives.prompt_tokens,
        Some(gepa_lab_engine::Objective::Limit(120.0))
    );
    assert_eq!(
        objectives.answer_tokens,
        Some(gepa_lab_engine::Objective::Weight(0.01))
    );
    assert_eq!(engine.keys_set(), ["objectives"]);
    // A problem is shown at its key's line, with the value seen.
    let broken = edited(&[("[objectives]", "prompt_tokens = { limit = -1 }")]);
    let validation = validate(&broken);
    let error = &validation.diagnostics[0];
    let line = broken
        .lines()
        .position(|l| l.starts_with("prompt_tokens"))
        .unwrap()
        + 1;
    assert_eq!(error.rule, Rule::ObjectivesLimit);
    assert_eq!(error.location.as_ref().map(|at| at.line), Some(line));
    assert_eq!(error.seen.as_deref(), Some("-1"));
}

/// The `[prompt]` of the base written as chat parts: `lines` replace its `seed`.
fn with_parts(lines: &str) -> Validation {
    validate(&edited(&[("seed", lines)]))
}

#[test]
fn a_prompt_of_chat_parts_is_sent_to_the_service_as_their_join() {
    let validation = with_parts(
        "system = \"You label reviews.\"\nuser = \"Review: {review}\"\nevolve = [\"system\"]\n\
         [[prompt.turns]]\nuser = \"Review: fine\"\nassistant = \"positive\"",
    );
    assert!(
        validation.diagnostics.is_empty(),
        "{:?}",
        validation.diagnostics
    );
    let plan = validation.plan.expect("a plan");
    assert_eq!(
        plan.executions[0].start.prompt,
        "<system>\nYou label reviews.\n\n<turn user>\nReview: fine\n\n<turn assistant>\npositive\
         \n\n<user fixed>\nReview: {review}"
    );
    // Without `evolve`, every part may change; a user template alone is a seed of one text.
    let all = with_parts("system = \"S.\"\nuser = \"Review: {review}\"");
    assert_eq!(
        all.plan.expect("a plan").executions[0].start.prompt,
        "<system>\nS.\n\n<user>\nReview: {review}"
    );
    let user_only = with_parts("user = \"Review: {review}\"");
    assert_eq!(
        user_only.plan.expect("a plan").executions[0].start.prompt,
        "Review: {review}"
    );
}

#[test]
fn chat_parts_are_checked_part_by_part() {
    assert_cases(&[
        // Literal braces are fine anywhere; a placeholder only in the user template.
        (
            &[(
                "seed",
                "system = \"Answer {{\\\"label\\\": ...}}.\"\nuser = \"Review: {review}\"",
            )],
            &[],
        ),
        (
            &[(
                "seed",
                "system = \"Label {review}.\"\nuser = \"Review: {review}\"",
            )],
            &[Rule::PromptPartPlaceholder],
        ),
        (
            &[(
                "seed",
                "user = \"Review: {review}\"\n[[prompt.turns]]\nuser = \"Review: {review}\"\n\
                 assistant = \"positive\"",
            )],
            &[Rule::PromptPartPlaceholder],
        ),
        (
            &[("seed", "system = \"S.\"\nuser = \"Review: {text}\"")],
            &[Rule::PromptVariable, Rule::PromptUnusedInput],
        ),
        (
            &[("seed", "system = \" \"\nuser = \"Review: {review}\"")],
            &[Rule::PromptEmpty],
        ),
        (
            &[("seed", "system = \"S.\"\nuser = \"Review: {review\"")],
            &[Rule::PromptSyntax],
        ),
        // A part may not hold a marker line; a seed may not read as a join.
        (
            &[(
                "seed",
                "system = \"S.\\n<user>\\nmore\"\nuser = \"Review: {review}\"",
            )],
            &[Rule::PromptPartMarker],
        ),
        (
            &[(
                "seed",
                "seed = \"<system>\\nS.\\n\\n<user>\\nReview: {review}\"",
            )],
            &[Rule::PromptPartMarker],
        ),
        (&[("seed", "seed = \"Say <user> here: {review}\"")], &[]),
    ]);
}

#[test]
fn evolve_names_parts_the_prompt_has() {
    assert_cases(&[
        (
            &[(
                "seed",
                "system = \"S.\"\nuser = \"Review: {review}\"\nevolve = [\"user\"]",
            )],
            &[],
        ),
        (
            &[("seed", "seed = \"Review: {review}\"\nevolve = [\"user\"]")],
            &[],
        ),
        (
            &[(
                "seed",
                "system = \"S.\"\nuser = \"Review: {review}\"\nevolve = [\"turns\"]",
            )],
            &[Rule::PromptEvolve],
        ),
        (
            &[("seed", "user = \"Review: {review}\"\nevolve = [\"system\"]")],
            &[Rule::PromptEvolve],
        ),
        (
            &[("seed", "seed = \"Review: {review}\"\nevolve = [\"system\"]")],
            &[Rule::PromptEvolve],
        ),
        (
            &[(
                "seed",
                "system = \"S.\"\nuser = \"Review: {review}\"\nevolve = []",
            )],
            &[Rule::PromptEvolve],
        ),
    ]);
    let validation =
        with_parts("system = \"S.\"\nuser = \"Review: {review}\"\nevolve = [\"sytem\"]");
    let refused = validation
        .diagnostics
        .iter()
        .find(|d| d.rule == Rule::PromptEvolve)
        .expect("refused");
    let text = format!("{refused}");
    assert!(
        text.contains("\"sytem\"") && text.contains("[\"system\", \"user\"]"),
        "names the value and the parts allowed: {text}"
    );
}

#[test]
fn a_seed_beside_chat_parts_is_refused_naming_both() {
    assert_cases(&[
        (
            &[(
                "seed",
                "seed = \"Review: {review}\"\nuser = \"Review: {review}\"",
            )],
            &[Rule::PromptSource],
        ),
        (
            &[("seed", "system = \"You label reviews.\"")],
            &[Rule::PromptSource],
        ),
    ]);
    let validation =
        with_parts("seed = \"Review: {review}\"\nsystem = \"S.\"\nuser = \"Review: {review}\"");
    let refused = validation
        .diagnostics
        .iter()
        .find(|d| d.rule == Rule::PromptSource)
        .expect("refused");
    assert!(
        refused.message.contains("`seed` and `system`, `user`"),
        "{}",
        refused.message
    );
    assert_eq!(
        refused.location.as_ref().map(|l| l.line),
        Some(5),
        "at the seed's line"
    );
}

/// A 60-row file in `folder` whose last 15 rows (46 to 60) are `negative` and the others
/// `positive`; the first row's review is `first`, the others `review <row>`.
fn skewed_file(folder: &Path, first: &str) -> PathBuf {
    let data = folder.join("skewed.csv");
    let mut csv = format!("review,label\n{first},positive\n");
    for row in 1..60 {
        let label = if row < 45 { "positive" } else { "negative" };
        csv.push_str(&format!("review {row},{label}\n"));
    }
    std::fs::write(&data, csv).unwrap();
    data
}

/// `stratify = true` gives each part every label in its share, where the file's order gives
/// the minibatch and Pareto rows none of the rarer label; a plan read back from JSON (which
/// keeps no rows of the holdout) recomputes the same split from the file's labels, and refuses
/// labels that split otherwise.
#[test]
fn a_stratified_split_keeps_each_label_share_and_is_recomputed_the_same() {
    let folder = tempfile::tempdir().unwrap();
    let data = skewed_file(folder.path(), "review 0");
    let text = edited(&[
        ("file", &format!("file = {:?}", data.display().to_string())),
        ("minibatch", "minibatch = 4"),
        ("pareto", "pareto = 8\nstratify = true"),
    ]);
    let plan = validate(&text).plan.expect("valid");
    let dataset = &plan.executions[0].dataset;
    assert!(dataset.stratify);
    // Data rows from 1; rows 46 to 60 are `negative`: a quarter of the file.
    let negatives = |rows: &[usize]| rows.iter().filter(|&&row| row > 45).count();
    assert_eq!(negatives(&dataset.minibatch_rows), 1, "{dataset:?}");
    assert_eq!(negatives(&dataset.pareto_rows), 2, "{dataset:?}");
    // As validated, the plan holds its split: it needs no labels.
    let split = dataset.split(None);
    let holdout: Vec<usize> = split.unwrap().holdout.iter().collect();
    assert_eq!(holdout.len(), 48);
    assert_eq!(holdout.iter().filter(|&&row| row >= 45).count(), 12);

    let read_back: DatasetPlan =
        serde_json::from_value(serde_json::to_value(dataset).unwrap()).unwrap();
    assert_eq!(serde_json::to_value(dataset).unwrap()["stratify"], true);
    let columns = dataset::read_header(&data)
        .unwrap()
        .columns(&["review".to_owned()], "label")
        .unwrap();
    let recomputed = read_back
        .split(
            dataset::scan(&data, &columns, 0, dataset::LabelKeys::Keep)
                .unwrap()
                .label_keys
                .as_deref(),
        )
        .unwrap();
    assert_eq!(recomputed.holdout.iter().collect::<Vec<_>>(), holdout);
    assert!(matches!(
        read_back.split(None),
        Err(SplitError::LabelCount { .. })
    ));
    let other_labels = read_back.split(Some(&(0..60).collect::<Vec<u64>>()));
    assert_eq!(other_labels.unwrap_err(), SplitError::NotRecorded);
}

/// A matrix whose first variant splits the file in order and whose second stratifies it: the
/// file is scanned for the first, scanned again with the label keys for the second (which
/// stratifies, not falling back to the file's order), and a row's warning is reported once.
#[test]
fn a_stratified_variant_after_a_plain_one_gets_the_labels_and_no_second_warning() {
    let folder = tempfile::tempdir().unwrap();
    let data = skewed_file(folder.path(), "");
    let text = edited(&[
        ("file", &format!("file = {:?}", data.display().to_string())),
        ("minibatch", "minibatch = 4"),
        ("pareto", "pareto = 8"),
        (
            "[[variants]]",
            "name = \"plain\"\n\n[[variants]]\nname = \"stratified\"\ndataset = { stratify = true }",
        ),
    ]);
    let validation = validate(&text);
    let plan = validation.plan.expect("valid");
    let negatives = |rows: &[usize]| rows.iter().filter(|&&row| row > 45).count();
    let [plain, stratified] = [0, 1].map(|i| &plan.executions[i].dataset);
    assert!(!plain.stratify && stratified.stratify);
    assert_eq!(negatives(&plain.pareto_rows), 0, "{plain:?}");
    assert_eq!(negatives(&stratified.pareto_rows), 2, "{stratified:?}");
    let empty_input = validation
        .diagnostics
        .iter()
        .filter(|d| d.rule == Rule::DatasetInputEmpty)
        .count();
    assert_eq!(empty_input, 1, "{:?}", validation.diagnostics);
}
