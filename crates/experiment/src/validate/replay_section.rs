//! The checks of the `[replay]` table: its models, counts, sampling, repeats and scorer. Every
//! problem is reported at its key; a table with any is no replay plan.
use super::{Scope, at_least_one, one_to, resolve_path};
use crate::diagnostic::Diagnostic;
use crate::file::{MAX_ANSWER_TOKENS, MAX_CONCURRENCY, MAX_REPEAT, ReplaySection};
use crate::plan::ReplayPlan;
use crate::rules::Rule;
use gepa_lab_score::judge::JudgePlan;
use gepa_lab_score::{SCORER_NAMES, ScorerSpec};
use gepa_lab_suggest::closest;

pub(super) fn check_replay(
    scope: &mut Scope<'_, '_>,
    replay: &ReplaySection,
) -> Option<ReplayPlan> {
    let mut ok = check_replay_models(scope, &replay.models);
    let top = at_least_one(scope, "replay.top", Rule::ReplayTop, replay.top);
    let concurrency = one_to(
        scope,
        "replay.concurrency",
        Rule::ReplayConcurrency,
        replay.concurrency,
        MAX_CONCURRENCY,
    );
    let max_tokens = match replay.max_tokens {
        Some(tokens) => one_to(
            scope,
            "replay.max_tokens",
            Rule::ReplayMaxTokens,
            tokens,
            MAX_ANSWER_TOKENS,
        )
        .map(Some),
        None => Some(None),
    };
    let repeat = check_repeat(scope, replay);
    if !gepa_lab_inference::wire::TEMPERATURES.contains(&replay.temperature) {
        ok = false;
        scope.report(
            "replay.temperature",
            Diagnostic::error(
                Rule::ReplayTemperature,
                "replay.temperature must be a number from 0 to 2",
            )
            .seen(replay.temperature),
        );
    }
    let scorer = check_scorer(scope, replay);
    let judge = replay.judge.as_ref().map(|judge| JudgePlan {
        model: judge.model.clone(),
        rubric: judge.rubric.clone(),
    });
    if !ok {
        return None;
    }
    Some(ReplayPlan {
        models: replay.models.clone(),
        top: top?,
        scorer: scorer?,
        temperature: replay.temperature,
        max_tokens: max_tokens?.and_then(|tokens| u32::try_from(tokens).ok()),
        concurrency: concurrency?,
        repeat: repeat?,
        judge,
    })
}

/// At least 1 replay model, each a non-empty id listed once.
fn check_replay_models(scope: &mut Scope<'_, '_>, models: &[String]) -> bool {
    let mut ok = true;
    if models.is_empty() {
        ok = false;
        scope.report(
            "replay.models",
            Diagnostic::error(Rule::ReplayModels, "replay.models needs at least 1 model id")
                .seen("[]")
                .help("name inference model ids, or \"local\" for the embedded model; remove [replay] to skip replay"),
        );
    }
    for (index, model) in models.iter().enumerate() {
        if model.trim().is_empty() || models[..index].contains(model) {
            ok = false;
            scope.report(
                &format!("replay.models.{index}"),
                Diagnostic::error(
                    Rule::ReplayModels,
                    "each replay model must be a non-empty id, listed once",
                )
                .seen(format!("{model:?}")),
            );
        }
    }
    ok
}

/// `replay.repeat` from 1 to [`MAX_REPEAT`]; above 1 at temperature 0 is a warning.
fn check_repeat(scope: &mut Scope<'_, '_>, replay: &ReplaySection) -> Option<u32> {
    match u32::try_from(replay.repeat) {
        Ok(repeat @ 1..=MAX_REPEAT) => {
            if repeat > 1 && replay.temperature == 0.0 {
                scope.report(
                    "replay.repeat",
                    Diagnostic::warning(
                        Rule::ReplayRepeatGreedy,
                        "at temperature 0 a model usually gives the same answer every time, so \
                         repeated answers add cost and little information",
                    )
                    .seen(replay.repeat)
                    .help(
                        "set replay.temperature above 0 (0.7 is common), or remove replay.repeat",
                    ),
                );
            }
            Some(repeat)
        }
        _ => {
            scope.report(
                "replay.repeat",
                Diagnostic::error(
                    Rule::ReplayRepeat,
                    format!("replay.repeat must be from 1 to {MAX_REPEAT}"),
                )
                .seen(replay.repeat),
            );
            None
        }
    }
}

/// `replay.scorer` parsed, with its schema file or program found; the judge needs its table.
fn check_scorer(scope: &mut Scope<'_, '_>, replay: &ReplaySection) -> Option<ScorerSpec> {
    match replay.scorer.parse::<ScorerSpec>() {
        Ok(ScorerSpec::JsonSchema { schema }) => {
            let full = resolve_path(&scope.checker.base_dir, &schema);
            match gepa_lab_score::load_schema(&full) {
                Ok(_) => Some(ScorerSpec::JsonSchema { schema: full }),
                Err(err) => {
                    scope.report(
                        "replay.scorer",
                        Diagnostic::error(Rule::ReplayScorer, err.to_string()).seen(&replay.scorer),
                    );
                    None
                }
            }
        }
        Ok(ScorerSpec::Command { command, .. }) => {
            // The program runs in the experiment file's folder.
            let dir = scope.checker.base_dir.clone();
            match gepa_lab_score::command::find_program(&command, &dir) {
                Ok(()) => Some(ScorerSpec::Command { command, dir }),
                Err(message) => {
                    scope.report(
                        "replay.scorer",
                        Diagnostic::error(
                            Rule::ReplayScorer,
                            format!("scorer command `{command}`: {message}"),
                        )
                        .seen(&replay.scorer),
                    );
                    None
                }
            }
        }
        Ok(ScorerSpec::Judge) if replay.judge.is_none() => {
            scope.report(
                "replay.scorer",
                Diagnostic::error(
                    Rule::ReplayJudge,
                    "the judge scorer needs a [replay.judge] table with `model` and `rubric`",
                )
                .seen("judge"),
            );
            None
        }
        Ok(spec) => Some(spec),
        Err(err) => {
            let names = SCORER_NAMES.map(|name| name.split([':', '[']).next().unwrap_or(name));
            let head = replay.scorer.split(':').next().unwrap_or_default();
            scope.report(
                "replay.scorer",
                Diagnostic::error(Rule::ReplayScorer, format!("replay.scorer: {err}"))
                    .seen(format!("{:?}", replay.scorer))
                    .help_if(closest(head, names).map(|s| format!("did you mean \"{s}\"?"))),
            );
            None
        }
    }
}
