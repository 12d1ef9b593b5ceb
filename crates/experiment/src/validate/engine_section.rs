//! The checks of the `[engine]` table: each number in its range, each choice one the engine
//! knows, the reflection template's file readable and complete. Every problem is reported at its
//! key; a table with any is no settings at all.
use std::path::Path;

use super::{MAX_REFLECTION_MINIBATCH, Scope, resolve_path};
use crate::diagnostic::Diagnostic;
use crate::file::EngineSection;
use crate::rules::Rule;
use gepa_lab_engine::{Proposer, ReflectionTemplate};
use gepa_lab_evolution::wire::{EngineSettings, OnError};

/// The `[engine]` table as the engine's settings; `Some(None)` when it sets nothing. Each key
/// out of its range is reported at its line, with the range and the value seen.
pub(super) fn check_engine(
    scope: &mut Scope<'_, '_>,
    engine: &EngineSection,
) -> Option<Option<EngineSettings>> {
    let numbers = check_numbers(scope, engine);
    let choices = check_choices(scope, engine);
    let (numbers, choices) = (numbers?, choices?);
    let settings = EngineSettings {
        reflection_minibatch: numbers.reflection_minibatch.map(|n| n as usize),
        reflection_model: engine.reflection_model.clone(),
        task_model: engine.task_model.clone(),
        proposer: choices.proposer,
        reflection_temperature: numbers.reflection_temperature,
        reflection_max_tokens: numbers.reflection_max_tokens.map(|n| n as u32),
        max_seconds: numbers.max_seconds,
        stall_iterations: numbers.stall_iterations.map(|n| n as usize),
        score_threshold: numbers.score_threshold,
        on_error: choices.on_error,
        merge: engine.merge,
        parallel_calls: numbers.parallel_calls.map(|n| n as usize),
        demonstrations: numbers.demonstrations.map(|n| n as usize),
        reflection_template: choices.reflection_template,
        seed: numbers.seed,
        objectives: None,
    };
    Some((settings != EngineSettings::default()).then_some(settings))
}

/// The numeric `[engine]` keys, each in its range (absent ones `None`).
struct EngineNumbers {
    reflection_minibatch: Option<u64>,
    reflection_max_tokens: Option<u64>,
    max_seconds: Option<u64>,
    stall_iterations: Option<u64>,
    parallel_calls: Option<u64>,
    demonstrations: Option<u64>,
    seed: Option<u64>,
    reflection_temperature: Option<f64>,
    score_threshold: Option<f64>,
}

/// The numeric `[engine]` keys, checked against their ranges; `None` when any is out of its
/// range (each reported at its key).
fn check_numbers(scope: &mut Scope<'_, '_>, engine: &EngineSection) -> Option<EngineNumbers> {
    let mut ok = true;
    let mut whole = |key: &str, value: Option<i64>, min: i64, max: i64| -> Option<u64> {
        let value = value?;
        if (min..=max).contains(&value) {
            return Some(value as u64);
        }
        ok = false;
        scope.report(
            &format!("engine.{key}"),
            Diagnostic::error(
                Rule::EngineRange,
                format!("engine.{key} must be from {min} to {max}"),
            )
            .seen(value),
        );
        None
    };
    let reflection_minibatch = whole(
        "reflection_minibatch",
        engine.reflection_minibatch,
        1,
        MAX_REFLECTION_MINIBATCH,
    );
    let reflection_max_tokens = whole(
        "reflection_max_tokens",
        engine.reflection_max_tokens,
        1,
        i64::from(crate::file::MAX_ANSWER_TOKENS),
    );
    let max_seconds = whole("max_seconds", engine.max_seconds, 1, 604_800);
    let stall_iterations = whole("stall_iterations", engine.stall_iterations, 1, 10_000);
    let parallel_calls = whole("parallel_calls", engine.parallel_calls, 1, 64);
    let demonstrations = whole(
        "demonstrations",
        engine.demonstrations,
        0,
        gepa_lab_engine::MAX_DEMONSTRATIONS as i64,
    );
    let seed = whole("seed", engine.seed, 0, i64::MAX);
    let mut fraction = |key: &str, value: Option<f64>, max: f64| -> Option<f64> {
        let value = value?;
        if value.is_finite() && (0.0..=max).contains(&value) {
            return Some(value);
        }
        ok = false;
        scope.report(
            &format!("engine.{key}"),
            Diagnostic::error(
                Rule::EngineRange,
                format!("engine.{key} must be a number from 0 to {max}"),
            )
            .seen(value),
        );
        None
    };
    let reflection_temperature =
        fraction("reflection_temperature", engine.reflection_temperature, 2.0);
    let score_threshold = fraction("score_threshold", engine.score_threshold, 1.0);
    ok.then_some(EngineNumbers {
        reflection_minibatch,
        reflection_max_tokens,
        max_seconds,
        stall_iterations,
        parallel_calls,
        demonstrations,
        seed,
        reflection_temperature,
        score_threshold,
    })
}

/// The `[engine]` keys that name one of a few choices, as parsed.
struct EngineChoices {
    on_error: Option<OnError>,
    proposer: Option<Proposer>,
    reflection_template: Option<String>,
}

/// `engine.on_error`, the model keys, `engine.reflection_template` and `engine.proposer`, each
/// checked; `None` when any is wrong (each reported at its key).
fn check_choices(scope: &mut Scope<'_, '_>, engine: &EngineSection) -> Option<EngineChoices> {
    let on_error = check_on_error(scope, engine);
    let models = check_models(scope, engine);
    let reflection_template = match &engine.reflection_template {
        None => Some(None),
        Some(file) => reflection_template(scope, file).map(Some),
    };
    let proposer = check_proposer(scope, engine);
    let choices = EngineChoices {
        on_error: on_error?,
        proposer: proposer?,
        reflection_template: reflection_template?,
    };
    models.then_some(choices)
}

/// `engine.on_error`: `Some(None)` when absent, `None` when it is neither choice.
fn check_on_error(scope: &mut Scope<'_, '_>, engine: &EngineSection) -> Option<Option<OnError>> {
    match engine.on_error.as_deref() {
        None => Some(None),
        Some("fail") => Some(Some(OnError::Fail)),
        Some("score_zero") => Some(Some(OnError::ScoreZero)),
        Some(other) => {
            scope.report(
                "engine.on_error",
                Diagnostic::error(
                    Rule::EngineOnError,
                    "engine.on_error must be fail or score_zero",
                )
                .seen(format!("{other:?}")),
            );
            None
        }
    }
}

/// `engine.reflection_model` and `engine.task_model`, when given, name a model.
fn check_models(scope: &mut Scope<'_, '_>, engine: &EngineSection) -> bool {
    let mut ok = true;
    for (key, model) in [
        ("reflection_model", &engine.reflection_model),
        ("task_model", &engine.task_model),
    ] {
        if let Some(model) = model
            && model.trim().is_empty()
        {
            ok = false;
            scope.report(
                &format!("engine.{key}"),
                Diagnostic::error(
                    Rule::EngineReflectionModel,
                    format!("engine.{key} must name a model"),
                )
                .seen(format!("{model:?}"))
                .help("`local` or `local:<name>`, or `<provider>/<model>` for a local run, a model serve's upstreams serve for gepa-lab serve; remove the key for the default"),
            );
        }
    }
    ok
}

/// `engine.proposer`: `Some(None)` when absent, `None` when it names no proposer or asks for
/// rules beside a reflection template (which asks for whole prompts).
fn check_proposer(scope: &mut Scope<'_, '_>, engine: &EngineSection) -> Option<Option<Proposer>> {
    let Some(name) = engine.proposer.as_deref() else {
        return Some(None);
    };
    let Some(proposer) = Proposer::parse(name) else {
        scope.report(
            "engine.proposer",
            Diagnostic::error(
                Rule::EngineProposer,
                "engine.proposer must be rules or rewrite",
            )
            .seen(format!("{name:?}")),
        );
        return None;
    };
    if proposer == Proposer::Rules && engine.reflection_template.is_some() {
        scope.report(
            "engine.proposer",
            Diagnostic::error(
                Rule::EngineProposer,
                "engine.proposer = \"rules\" cannot use engine.reflection_template, which asks for whole prompts",
            )
            .seen("\"rules\"")
            .help("remove one of the two: a reflection template makes the engine rewrite"),
        );
        return None;
    }
    Some(Some(proposer))
}

/// The text of `engine.reflection_template`'s file, checked: readable, with both placeholders.
/// A template that asks for no fenced block is a warning: the engine reads the new prompt from
/// one, so every answer would fail as `no_fenced_block`.
fn reflection_template(scope: &mut Scope<'_, '_>, file: &Path) -> Option<String> {
    const KEY: &str = "engine.reflection_template";
    let full = resolve_path(&scope.checker.base_dir, file);
    let text = match gepa_lab_input::read_text(&full, gepa_lab_input::TEXT_LIMIT) {
        Ok(text) => text,
        Err(err) => {
            scope.report(
                KEY,
                Diagnostic::error(
                    Rule::EngineReflectionTemplate,
                    format!("cannot read the reflection template file: {err}"),
                )
                .seen(full.display()),
            );
            return None;
        }
    };
    if let Err(missing) = ReflectionTemplate::parse(&text) {
        scope.report(
            KEY,
            Diagnostic::error(
                Rule::EngineReflectionTemplate,
                format!("the reflection template {missing}"),
            )
            .seen(full.display())
            .help("the reference implementation's placeholders, written exactly like that, angle brackets included"),
        );
        return None;
    }
    if !ReflectionTemplate::mentions_a_fence(&text) {
        scope.report(
            KEY,
            Diagnostic::warning(
                Rule::EngineReflectionTemplateFence,
                "the reflection template never mentions a ``` fenced block; the engine reads the \
                 new prompt from one, so answers without it are failed proposals",
            )
            .seen(full.display())
            .help(
                "end it with something like: Write the new instruction inside a ``` fenced block.",
            ),
        );
    }
    scope.checker.file_texts.insert(full, text.clone());
    Some(text)
}
