//! The rules of `POST /gepa/start_execution`, checked in one place for every backend that runs
//! executions: `LocalEvolution::start` and `serve`'s route both call [`validate_start`], and the
//! route first reads its body with [`parse_start`], which adds the rules only a JSON body can break
//! (a missing field, a number where a string belongs).
//!
//! Each broken rule becomes a [`RuleViolation`] naming the rule, the field and the value seen.
//! Shape problems (`body-json`, `required`, `type`, `dataset-input-value`) are reported first;
//! once the body has the right shape, every other rule it breaks is listed at once.
//!
//! Not here: the experiment file's own rules (`experiment::validate`), which are stricter and
//! point at lines of a TOML file.
use std::collections::BTreeSet;
use std::fmt;

use gepa_lab_engine::{CostKind, Objective, ObjectiveProblem, Objectives};
use serde_json::Value;

use super::ServiceProfile;
use super::wire::{StartExecution, Strategy};

/// The contract's limit on `customId`.
pub const CUSTOM_ID_MAX_CHARS: usize = 50;
/// Items listed per rule before the rest are counted, so a bad 10,000-row dataset gives a
/// readable answer.
const MAX_ITEMS_SHOWN: usize = 5;
/// Longest excerpt of a seen value.
const MAX_SEEN_CHARS: usize = 80;

/// One broken rule: which, where, why, and what was sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleViolation {
    /// Stable rule name, e.g. `budget-min`.
    pub rule: &'static str,
    /// JSON path of the field, e.g. `dataset[3].input`.
    pub field: String,
    pub message: String,
    /// The value seen, shortened.
    pub seen: String,
}

impl RuleViolation {
    fn new(
        rule: &'static str,
        field: impl Into<String>,
        message: impl Into<String>,
        seen: impl Into<String>,
    ) -> Self {
        Self {
            rule,
            field: field.into(),
            message: message.into(),
            seen: seen.into(),
        }
    }
}

impl fmt::Display for RuleViolation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "rule {}: {} {}; seen: {}",
            self.rule, self.field, self.message, self.seen
        )
    }
}

/// Every rule a start request breaks, one per line when shown.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct Violations(pub Vec<RuleViolation>);

impl Violations {
    pub fn rules(&self) -> Vec<&'static str> {
        self.0.iter().map(|violation| violation.rule).collect()
    }
}

impl fmt::Display for Violations {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, violation) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            write!(f, "{violation}")?;
        }
        Ok(())
    }
}

/// Checks a typed start request against every rule of the contract.
pub fn validate_start(
    request: &StartExecution,
    profile: &ServiceProfile,
) -> Result<(), Violations> {
    let mut found = Vec::new();
    check_models(request, profile, &mut found);
    if request.dataset_columns.is_empty() {
        found.push(RuleViolation::new(
            "dataset-columns-min",
            "datasetColumns",
            "must list at least 1 column",
            "[]",
        ));
    }
    check_counts(request, profile, &mut found);
    check_dataset(request, &mut found);
    if request.prompt.is_empty() {
        found.push(RuleViolation::new(
            "prompt-empty",
            "prompt",
            "must have at least 1 character",
            "\"\"",
        ));
    }
    if let Some(custom_id) = &request.custom_id {
        let chars = custom_id.chars().count();
        if chars > CUSTOM_ID_MAX_CHARS {
            found.push(RuleViolation::new(
                "custom-id-length",
                "customId",
                format!("must have at most {CUSTOM_ID_MAX_CHARS} characters"),
                format!("{chars} characters: {}", quoted(custom_id)),
            ));
        }
    }
    if let Err(violation) = evaluator_model(&request.evaluator, profile) {
        found.push(violation);
    }
    if let Some(objectives) = request
        .engine
        .as_ref()
        .and_then(|engine| engine.objectives.as_ref())
    {
        found.extend(objectives.problems().into_iter().map(objective_violation));
    }
    if found.is_empty() {
        Ok(())
    } else {
        Err(Violations(found))
    }
}

/// The model is one the service supports (the strategy, typed, is read by [`parse_start`]).
fn check_models(
    request: &StartExecution,
    profile: &ServiceProfile,
    found: &mut Vec<RuleViolation>,
) {
    if !profile.supports(&request.model) {
        found.push(RuleViolation::new(
            "evolution-model",
            "model",
            format!(
                "must be a supported model ({})",
                profile.models().join(", ")
            ),
            quoted(&request.model),
        ));
    }
}

/// Budget, minibatch and Pareto sizes are at least 1, and the budget within the service's most.
fn check_counts(
    request: &StartExecution,
    profile: &ServiceProfile,
    found: &mut Vec<RuleViolation>,
) {
    for (rule, field, value) in [
        ("budget-min", "budget", request.budget),
        ("minibatch-min", "minibatchSize", request.minibatch_size),
        ("pareto-min", "paretoSize", request.pareto_size),
    ] {
        if value < 1 {
            found.push(RuleViolation::new(
                rule,
                field,
                "must be at least 1",
                value.to_string(),
            ));
        }
    }
    if let Some(max) = profile.max_budget
        && request.budget > max
    {
        found.push(RuleViolation::new(
            "budget-max",
            "budget",
            format!("must be at most {max} on this service"),
            request.budget.to_string(),
        ));
    }
}

fn check_dataset(request: &StartExecution, found: &mut Vec<RuleViolation>) {
    let length = request.dataset.len();
    if length == 0 {
        found.push(RuleViolation::new(
            "dataset-empty",
            "dataset",
            "must have at least 1 item",
            "[]",
        ));
    } else {
        let needed = request.minibatch_size.checked_add(request.pareto_size);
        if needed != Some(length as u64) {
            found.push(RuleViolation::new(
                "dataset-length",
                "dataset",
                "must have exactly minibatchSize + paretoSize items",
                format!(
                    "{length} items for minibatchSize {} + paretoSize {}",
                    request.minibatch_size, request.pareto_size
                ),
            ));
        }
    }
    let columns: BTreeSet<&str> = request.dataset_columns.iter().map(String::as_str).collect();
    let mut bad_keys = Listed::new("dataset-input-keys");
    let mut empty_expected = Listed::new("expected-output-empty");
    for (i, item) in request.dataset.iter().enumerate() {
        let keys: BTreeSet<&str> = item.input.keys().map(String::as_str).collect();
        if keys != columns {
            let missing: Vec<&str> = columns.difference(&keys).copied().collect();
            let extra: Vec<&str> = keys.difference(&columns).copied().collect();
            let mut seen = Vec::new();
            if !missing.is_empty() {
                seen.push(format!("missing {}", missing.join(", ")));
            }
            if !extra.is_empty() {
                seen.push(format!("not in datasetColumns: {}", extra.join(", ")));
            }
            bad_keys.push(RuleViolation::new(
                "dataset-input-keys",
                format!("dataset[{i}].input"),
                "must have exactly the datasetColumns as keys",
                seen.join("; "),
            ));
        }
        if item.expected_output.is_empty() {
            empty_expected.push(RuleViolation::new(
                "expected-output-empty",
                format!("dataset[{i}].expectedOutput"),
                "must have at least 1 character",
                "\"\"",
            ));
        }
    }
    bad_keys.finish(found);
    empty_expected.finish(found);
}

/// Reads the evaluator string and checks its `model`; the rest of the evaluator is free-form.
fn evaluator_model(evaluator: &str, profile: &ServiceProfile) -> Result<(), RuleViolation> {
    let object = match serde_json::from_str::<Value>(evaluator) {
        Ok(Value::Object(object)) => object,
        Ok(other) => {
            return Err(RuleViolation::new(
                "evaluator-json",
                "evaluator",
                "must be a string holding a JSON object",
                format!("JSON {}", json_kind(&other)),
            ));
        }
        Err(err) => {
            return Err(RuleViolation::new(
                "evaluator-json",
                "evaluator",
                "must be a string holding a JSON object",
                format!("{} ({err})", quoted(evaluator)),
            ));
        }
    };
    match object.get("model") {
        Some(Value::String(model)) if profile.supports(model) => Ok(()),
        Some(Value::String(model)) => Err(RuleViolation::new(
            "evaluator-model",
            "evaluator.model",
            format!(
                "must be a supported model ({})",
                profile.models().join(", ")
            ),
            quoted(model),
        )),
        Some(other) => Err(RuleViolation::new(
            "evaluator-model",
            "evaluator.model",
            "must be a string naming a supported model",
            excerpt(&other.to_string()),
        )),
        None => Err(RuleViolation::new(
            "evaluator-model",
            "evaluator.model",
            "is required",
            "no model",
        )),
    }
}

/// The start request's fields that hold a whole number, with the rule of their minimum.
const WHOLE_NUMBERS: [(&str, &str); 3] = [
    ("budget", "budget-min"),
    ("minibatchSize", "minibatch-min"),
    ("paretoSize", "pareto-min"),
];

/// A JSON number that is a whole number from 0, however it is written: the contract says
/// "number", so `20`, `20.0` and `2e1` are all 20 (as serve's own responses write `20.0`);
/// `20.5` is not. Floats are exact up to 2^53, past any budget.
fn whole(number: &serde_json::Number) -> Option<u64> {
    const EXACT: f64 = 9_007_199_254_740_992.0; // 2^53
    number.as_u64().or_else(|| {
        number
            .as_f64()
            .filter(|n| n.fract() == 0.0 && (0.0..=EXACT).contains(n))
            .map(|n| n as u64)
    })
}

/// Reads a start request from a JSON body, then checks it with [`validate_start`].
pub fn parse_start(body: &[u8], profile: &ServiceProfile) -> Result<StartExecution, Violations> {
    let mut value: Value = serde_json::from_slice(body).map_err(|err| {
        Violations(vec![RuleViolation::new(
            "body-json",
            "body",
            "must be a JSON object",
            format!("not JSON ({err})"),
        )])
    })?;
    let shape = check_shape(&value);
    if !shape.is_empty() {
        return Err(Violations(shape));
    }
    let objectives = check_objectives(&value);
    if !objectives.is_empty() {
        return Err(Violations(objectives));
    }
    // Whole numbers written as floats become integers, which is what the request type holds.
    for (field, _) in WHOLE_NUMBERS {
        if let Some(slot) = value.get_mut(field)
            && let Some(n) = slot.as_number().and_then(whole)
        {
            *slot = Value::from(n);
        }
    }
    let unknown_strategy = read_strategy(&mut value);
    // The shape checks above are what this conversion needs; should they ever miss a case,
    // the body is still refused with the serde error rather than accepted.
    let request: StartExecution = serde_json::from_value(value).map_err(|err| {
        Violations(vec![RuleViolation::new(
            "type",
            "body",
            "does not have the start request's shape",
            err.to_string(),
        )])
    })?;
    match (unknown_strategy, validate_start(&request, profile)) {
        (None, Ok(())) => Ok(request),
        (unknown, checked) => {
            let mut found: Vec<RuleViolation> = unknown.into_iter().collect();
            found.extend(checked.err().into_iter().flat_map(|broken| broken.0));
            Err(Violations(found))
        }
    }
}

/// The strategy of a start request's body (a string, as the shape checks made sure): RPM or
/// SAM, or the rule it breaks. An unknown strategy is listed with every other broken rule, so
/// the body is then read with RPM in its place to check the rest.
fn read_strategy(value: &mut Value) -> Option<RuleViolation> {
    let slot = value.get_mut("strategy")?;
    let name = slot.as_str()?;
    if Strategy::parse(name).is_some() {
        return None;
    }
    let violation = RuleViolation::new("strategy", "strategy", "must be RPM or SAM", quoted(name));
    *slot = Value::from(Strategy::Rpm.as_str());
    Some(violation)
}

/// The rules of `gepaLabEngine.objectives` (an experiment's `[objectives]`), read from the body
/// as sent, so that a cost with both or neither of `limit` and `weight` is named by its rule
/// rather than refused as a shape the request type cannot hold. The rules are the engine's, the
/// ones `validate` reports in the file; a value of the wrong JSON type is left to the
/// conversion to refuse.
fn check_objectives(value: &Value) -> Vec<RuleViolation> {
    let Some(Value::Object(costs)) = value
        .get("gepaLabEngine")
        .and_then(|engine| engine.get("objectives"))
    else {
        return Vec::new();
    };
    let mut found = Vec::new();
    let mut objectives = Objectives::default();
    for kind in CostKind::ALL {
        let Some(Value::Object(cost)) = costs.get(kind.as_str()) else {
            continue;
        };
        let number = |name: &str| cost.get(name).and_then(Value::as_f64);
        match Objective::from_parts(kind, number("limit"), number("weight")) {
            Ok(objective) => objectives.set(kind, objective),
            Err(problem) => found.push(objective_violation(problem)),
        }
    }
    if found.is_empty() {
        found.extend(objectives.problems().into_iter().map(objective_violation));
    }
    found
}

fn objective_violation(problem: ObjectiveProblem) -> RuleViolation {
    RuleViolation::new(
        problem.rule.id(),
        format!("gepaLabEngine.{}", problem.key),
        problem.requirement,
        problem.seen,
    )
}

/// The rules a typed request cannot break: presence and JSON types of each field.
fn check_shape(value: &Value) -> Vec<RuleViolation> {
    let mut found = Vec::new();
    let Value::Object(body) = value else {
        found.push(RuleViolation::new(
            "body-json",
            "body",
            "must be a JSON object",
            format!("JSON {}", json_kind(value)),
        ));
        return found;
    };
    for field in ["strategy", "model", "evaluator", "prompt"] {
        match body.get(field) {
            None | Some(Value::Null) => found.push(missing(field)),
            Some(Value::String(_)) => {}
            Some(other) => found.push(wrong_type(field, "a string", other)),
        }
    }
    match body.get("customId") {
        None | Some(Value::Null) | Some(Value::String(_)) => {}
        Some(other) => found.push(wrong_type("customId", "a string", other)),
    }
    for (field, min_rule) in WHOLE_NUMBERS {
        match body.get(field) {
            None | Some(Value::Null) => found.push(missing(field)),
            Some(Value::Number(number)) if whole(number).is_some_and(|n| n >= 1) => {}
            // Below 1 is the rule the caller needs to hear about, whatever the number's form.
            Some(Value::Number(number)) if number.as_f64().is_some_and(|n| n < 1.0) => {
                found.push(RuleViolation::new(
                    min_rule,
                    field,
                    "must be at least 1",
                    number.to_string(),
                ));
            }
            Some(Value::Number(number)) => found.push(RuleViolation::new(
                "type",
                field,
                "must be a whole number",
                number.to_string(),
            )),
            Some(other) => found.push(wrong_type(field, "a number", other)),
        }
    }
    match body.get("datasetColumns") {
        None | Some(Value::Null) => found.push(missing("datasetColumns")),
        Some(Value::Array(columns)) => {
            for (i, column) in columns.iter().enumerate() {
                if !column.is_string() {
                    found.push(wrong_type(
                        &format!("datasetColumns[{i}]"),
                        "a string",
                        column,
                    ));
                }
            }
        }
        Some(other) => found.push(wrong_type("datasetColumns", "an array of strings", other)),
    }
    match body.get("dataset") {
        None | Some(Value::Null) => found.push(missing("dataset")),
        Some(Value::Array(items)) => check_items_shape(items, &mut found),
        Some(other) => found.push(wrong_type("dataset", "an array of items", other)),
    }
    found
}

fn check_items_shape(items: &[Value], found: &mut Vec<RuleViolation>) {
    let mut shape = Listed::new("type");
    let mut values = Listed::new("dataset-input-value");
    for (i, item) in items.iter().enumerate() {
        let Value::Object(item) = item else {
            shape.push(wrong_type(&format!("dataset[{i}]"), "an object", item));
            continue;
        };
        match item.get("input") {
            None | Some(Value::Null) => shape.push(missing(&format!("dataset[{i}].input"))),
            Some(Value::Object(input)) => {
                for (name, value) in input {
                    if !value.is_string() {
                        values.push(RuleViolation::new(
                            "dataset-input-value",
                            format!("dataset[{i}].input.{name}"),
                            "must be a string",
                            format!("{} {}", json_kind(value), excerpt(&value.to_string())),
                        ));
                    }
                }
            }
            Some(other) => shape.push(wrong_type(
                &format!("dataset[{i}].input"),
                "an object",
                other,
            )),
        }
        match item.get("expectedOutput") {
            None | Some(Value::Null) => {
                shape.push(missing(&format!("dataset[{i}].expectedOutput")));
            }
            Some(Value::String(_)) => {}
            Some(other) => shape.push(wrong_type(
                &format!("dataset[{i}].expectedOutput"),
                "a string",
                other,
            )),
        }
    }
    shape.finish(found);
    values.finish(found);
}

fn missing(field: &str) -> RuleViolation {
    let rule = if field.starts_with("dataset[") {
        // Per-item fields are counted under one name so that a long dataset gives one summary.
        "type"
    } else {
        "required"
    };
    RuleViolation::new(rule, field, "is required", "nothing")
}

fn wrong_type(field: &str, expected: &str, seen: &Value) -> RuleViolation {
    RuleViolation::new(
        "type",
        field,
        format!("must be {expected}"),
        format!("{} {}", json_kind(seen), excerpt(&seen.to_string())),
    )
}

fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn quoted(text: &str) -> String {
    excerpt(&format!("{text:?}"))
}

fn excerpt(text: &str) -> String {
    match text.char_indices().nth(MAX_SEEN_CHARS) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}

/// Per-item violations of one rule: the first few in full, then a count.
struct Listed {
    rule: &'static str,
    shown: Vec<RuleViolation>,
    more: usize,
}

impl Listed {
    fn new(rule: &'static str) -> Self {
        Self {
            rule,
            shown: Vec::new(),
            more: 0,
        }
    }

    fn push(&mut self, violation: RuleViolation) {
        if self.shown.len() < MAX_ITEMS_SHOWN {
            self.shown.push(violation);
        } else {
            self.more += 1;
        }
    }

    fn finish(self, found: &mut Vec<RuleViolation>) {
        found.extend(self.shown);
        if self.more > 0 {
            found.push(RuleViolation::new(
                self.rule,
                "dataset",
                format!("has {} more items breaking this rule", self.more),
                "not listed",
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use serde_json::json;

    use super::*;
    use crate::wire::DatasetItem;

    fn item(review: &str, label: &str) -> DatasetItem {
        DatasetItem {
            input: BTreeMap::from([("review".to_owned(), review.to_owned())]),
            expected_output: label.to_owned(),
        }
    }

    fn valid() -> StartExecution {
        StartExecution {
            strategy: Strategy::Rpm,
            model: "gpt-4o-mini".into(),
            dataset_columns: vec!["review".into()],
            budget: 30,
            minibatch_size: 1,
            pareto_size: 2,
            evaluator: r#"{"model":"gpt-4o-mini","metric":"exact_match"}"#.into(),
            dataset: vec![
                item("fine", "positive"),
                item("bad", "negative"),
                item("ok", "positive"),
            ],
            prompt: "Classify: {review}".into(),
            custom_id: Some("sentiment-a".into()),
            engine: None,
        }
    }

    fn broken(change: impl FnOnce(&mut StartExecution)) -> Violations {
        let mut request = valid();
        change(&mut request);
        validate_start(&request, &ServiceProfile::default()).expect_err("a rule is broken")
    }

    /// Like `broken`, with `strategy` as the body's strategy: the wire carries it as text, which
    /// `parse_start` reads.
    fn broken_strategy(strategy: &str, change: impl FnOnce(&mut StartExecution)) -> Violations {
        let mut request = valid();
        change(&mut request);
        let mut body = serde_json::to_value(&request).unwrap();
        body["strategy"] = json!(strategy);
        parse_start(body.to_string().as_bytes(), &ServiceProfile::default())
            .expect_err("a rule is broken")
    }

    #[test]
    fn an_unknown_strategy_names_its_rule_and_the_text_seen() {
        let (rule, shown) = only(&broken_strategy("rpm", |_| {}));
        assert_eq!(rule, "strategy");
        assert!(shown.contains("seen: \"rpm\""), "{shown}");
        // Listed first, with the rules the typed request breaks.
        let both = broken_strategy("X", |r| r.prompt = String::new());
        assert_eq!(both.rules(), ["strategy", "prompt-empty"]);
    }

    /// `gepaLabEngine.objectives` breaks the experiment file's `[objectives]` rules (the
    /// engine's, written once), named with the field and the value seen; valid ones pass.
    #[test]
    fn objectives_in_a_start_request_break_the_files_rules() {
        let with = |objectives: serde_json::Value| {
            let mut body = serde_json::to_value(valid()).unwrap();
            body["gepaLabEngine"] = json!({ "objectives": objectives });
            parse_start(body.to_string().as_bytes(), &ServiceProfile::default())
        };
        let ok = with(json!({"prompt_tokens": {"limit": 120}, "latency_ms": {"weight": 0.5}}))
            .expect("valid objectives");
        let objectives = ok.engine.unwrap().objectives.unwrap();
        assert_eq!(
            objectives.prompt_tokens,
            Some(gepa_lab_engine::Objective::Limit(120.0))
        );
        let cases = [
            (
                json!({"prompt_tokens": {"limit": -1}}),
                "rule objectives-limit: gepaLabEngine.objectives.prompt_tokens.limit must be a \
                 number above 0 and at most 1000000; seen: -1",
            ),
            (
                json!({"latency_ms": {"limit": 3600001}}),
                "rule objectives-limit: gepaLabEngine.objectives.latency_ms.limit must be a \
                 number above 0 and at most 3600000; seen: 3600001",
            ),
            (
                json!({"answer_tokens": {"weight": 1.5}}),
                "rule objectives-weight: gepaLabEngine.objectives.answer_tokens.weight must be \
                 a number above 0 and at most 1; seen: 1.5",
            ),
            (
                json!({"prompt_tokens": {"limit": 1, "weight": 0.1}}),
                "rule objectives-one-of: gepaLabEngine.objectives.prompt_tokens sets both \
                 limit and weight",
            ),
            (
                json!({"prompt_tokens": {}}),
                "rule objectives-one-of: gepaLabEngine.objectives.prompt_tokens sets neither",
            ),
            (
                json!({}),
                "rule objectives-one-of: gepaLabEngine.objectives must name a cost",
            ),
        ];
        for (objectives, expected) in cases {
            let refused = with(objectives.clone()).expect_err("refused");
            let (_, shown) = only(&refused);
            assert!(shown.contains(expected), "{objectives}: {shown}");
        }
    }

    /// The only rule broken, and the text shown for it.
    fn only(violations: &Violations) -> (&'static str, String) {
        assert_eq!(violations.0.len(), 1, "{violations}");
        (violations.0[0].rule, violations.to_string())
    }

    #[test]
    fn a_valid_request_passes() {
        assert_eq!(validate_start(&valid(), &ServiceProfile::default()), Ok(()));
        let mut sam = valid();
        sam.strategy = Strategy::Sam;
        sam.custom_id = Some("x".repeat(CUSTOM_ID_MAX_CHARS));
        assert_eq!(validate_start(&sam, &ServiceProfile::default()), Ok(()));
    }

    #[test]
    fn each_rule_names_itself_the_field_and_the_value() {
        type Change = fn(&mut StartExecution);
        let cases: Vec<(&str, Change, &str)> = vec![
            (
                "evolution-model",
                |r| r.model = "gpt-4o-mni".into(),
                "seen: \"gpt-4o-mni\"",
            ),
            (
                "dataset-columns-min",
                |r| {
                    r.dataset_columns.clear();
                    for item in &mut r.dataset {
                        item.input.clear();
                    }
                },
                "datasetColumns",
            ),
            (
                "budget-min",
                |r| r.budget = 0,
                "budget must be at least 1; seen: 0",
            ),
            (
                "minibatch-min",
                |r| {
                    r.minibatch_size = 0;
                    r.pareto_size = 3;
                },
                "minibatchSize must be at least 1; seen: 0",
            ),
            (
                "pareto-min",
                |r| {
                    r.minibatch_size = 3;
                    r.pareto_size = 0;
                },
                "paretoSize must be at least 1; seen: 0",
            ),
            (
                "dataset-length",
                |r| r.pareto_size = 5,
                "seen: 3 items for minibatchSize 1 + paretoSize 5",
            ),
            (
                "dataset-input-keys",
                |r| {
                    r.dataset[1].input.insert("extra".into(), "x".into());
                    r.dataset[1].input.remove("review");
                },
                "dataset[1].input must have exactly the datasetColumns as keys; seen: missing review; not in datasetColumns: extra",
            ),
            (
                "expected-output-empty",
                |r| r.dataset[2].expected_output.clear(),
                "dataset[2].expectedOutput",
            ),
            ("prompt-empty", |r| r.prompt.clear(), "prompt"),
            (
                "custom-id-length",
                |r| r.custom_id = Some("é".repeat(51)),
                "seen: 51 characters",
            ),
            (
                "evaluator-json",
                |r| r.evaluator = "model=gpt-4o".into(),
                "seen: \"model=gpt-4o\"",
            ),
            (
                "evaluator-model",
                |r| r.evaluator = r#"{"model":"gpt-3"}"#.into(),
                "seen: \"gpt-3\"",
            ),
        ];
        for (rule, change, shown) in cases {
            let violations = broken(change);
            let (seen_rule, text) = only(&violations);
            assert_eq!(seen_rule, rule, "{text}");
            assert!(text.contains(&format!("rule {rule}: ")), "{text}");
            assert!(text.contains(shown), "{rule}: {text}");
        }
    }

    #[test]
    fn an_empty_dataset_and_an_evaluator_without_model_are_named() {
        let violations = broken(|r| {
            r.minibatch_size = 0;
            r.pareto_size = 0;
            r.dataset.clear();
        });
        assert_eq!(
            violations.rules(),
            ["minibatch-min", "pareto-min", "dataset-empty"]
        );
        let (rule, text) = only(&broken(|r| r.evaluator = r#"{"metric":"accuracy"}"#.into()));
        assert_eq!(rule, "evaluator-model");
        assert!(text.contains("seen: no model"), "{text}");
        let (rule, _) = only(&broken(|r| r.evaluator = "[1]".into()));
        assert_eq!(rule, "evaluator-json");
    }

    #[test]
    fn every_broken_rule_is_listed_and_long_datasets_are_summarised() {
        let violations = broken(|r| {
            r.budget = 0;
            r.minibatch_size = 10;
            r.pareto_size = 2;
            r.dataset = (0..12).map(|_| item("x", "")).collect();
        });
        assert_eq!(
            violations.rules(),
            [
                "budget-min",
                "expected-output-empty",
                "expected-output-empty",
                "expected-output-empty",
                "expected-output-empty",
                "expected-output-empty",
                "expected-output-empty"
            ]
        );
        assert!(
            violations
                .to_string()
                .contains("has 7 more items breaking this rule"),
            "{violations}"
        );
    }

    #[test]
    fn a_budget_cap_applies_only_where_the_profile_sets_one() {
        let mut request = valid();
        request.budget = 1_000_000_000_000;
        assert!(validate_start(&request, &ServiceProfile::default()).is_ok());
        let capped = ServiceProfile {
            max_budget: Some(100_000),
            ..ServiceProfile::default()
        };
        let err = validate_start(&request, &capped).unwrap_err();
        assert_eq!(
            err.to_string(),
            "rule budget-max: budget must be at most 100000 on this service; seen: 1000000000000"
        );
        request.budget = 100_000;
        assert!(validate_start(&request, &capped).is_ok());
    }

    #[test]
    fn the_model_word_comes_from_the_profile() {
        let profile = ServiceProfile {
            model_word: "model".into(),
            max_budget: None,
        };
        let mut request = valid();
        request.model = "model-4o".into();
        request.evaluator = r#"{"model":"model-5-mini"}"#.into();
        assert_eq!(validate_start(&request, &profile), Ok(()));
        assert!(validate_start(&valid(), &profile).is_err());
    }

    fn parse(body: serde_json::Value) -> Result<StartExecution, Violations> {
        parse_start(body.to_string().as_bytes(), &ServiceProfile::default())
    }

    #[test]
    fn a_json_body_parses_into_the_request_it_describes() {
        let body = serde_json::to_value(valid()).unwrap();
        assert_eq!(parse(body), Ok(valid()));
    }

    #[test]
    fn shape_rules_name_the_field_and_the_value() {
        let not_json = parse_start(b"{strategy", &ServiceProfile::default()).unwrap_err();
        assert_eq!(not_json.rules(), ["body-json"]);
        assert_eq!(parse(json!([1])).unwrap_err().rules(), ["body-json"]);

        let mut body = serde_json::to_value(valid()).unwrap();
        body.as_object_mut().unwrap().remove("evaluator");
        body["strategy"] = json!(5);
        body["budget"] = json!(-3);
        body["paretoSize"] = json!(2.5);
        body["dataset"][0]["input"]["review"] = json!(4);
        body["dataset"][1]["expectedOutput"] = json!(null);
        let violations = parse(body).unwrap_err();
        let text = violations.to_string();
        assert_eq!(
            violations.rules(),
            [
                "type",
                "required",
                "budget-min",
                "type",
                "type",
                "dataset-input-value"
            ],
            "{text}"
        );
        for shown in [
            "rule type: strategy must be a string; seen: number 5",
            "rule required: evaluator is required",
            "rule budget-min: budget must be at least 1; seen: -3",
            "rule type: paretoSize must be a whole number; seen: 2.5",
            "rule type: dataset[1].expectedOutput is required",
            "rule dataset-input-value: dataset[0].input.review must be a string; seen: number 4",
        ] {
            assert!(text.contains(shown), "{shown}\n{text}");
        }
    }

    #[test]
    fn whole_numbers_written_as_floats_are_whole_numbers_and_fractions_are_not() {
        let mut body = serde_json::to_value(valid()).unwrap();
        let budget = valid().budget;
        body["budget"] = json!(budget as f64);
        body["paretoSize"] = serde_json::from_str(&format!("{}e0", valid().pareto_size)).unwrap();
        assert_eq!(
            parse(body.clone()),
            Ok(valid()),
            "20.0 and 2e0 are whole numbers"
        );
        body["minibatchSize"] = json!(2.5);
        let err = parse(body.clone()).unwrap_err();
        assert_eq!(
            err.to_string(),
            "rule type: minibatchSize must be a whole number; seen: 2.5"
        );
        body["minibatchSize"] = json!(0.0);
        assert_eq!(parse(body).unwrap_err().rules(), ["minibatch-min"]);
    }

    #[test]
    fn semantic_rules_apply_once_the_shape_is_right() {
        let mut body = serde_json::to_value(valid()).unwrap();
        body["budget"] = json!(0);
        body["customId"] = json!(null);
        assert_eq!(parse(body).unwrap_err().rules(), ["budget-min"]);
    }
}
