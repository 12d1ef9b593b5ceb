//! The checks of the `[objectives]` table: each cost with exactly one of `limit` and `weight`,
//! each number in its range. Every problem is reported at its key; a table with any is no
//! objectives at all. The objectives travel to the engine with the `[engine]` settings
//! (`gepaLabEngine.objectives`), so a run on the public service refuses them like `[engine]`.
use super::Scope;
use super::engine_section::check_engine;
use crate::diagnostic::Diagnostic;
use crate::file::{Experiment, ObjectiveSection, ObjectivesSection};
use crate::rules::Rule;
use gepa_lab_engine::{CostKind, MAX_WEIGHT, Objective, Objectives};
use gepa_lab_evolution::wire::EngineSettings;

/// `[engine]` and `[objectives]` as the engine's settings; `Some(None)` when neither sets
/// anything, `None` when either has a problem.
pub(super) fn check_engine_and_objectives(
    scope: &mut Scope<'_, '_>,
    experiment: &Experiment,
) -> Option<Option<EngineSettings>> {
    let engine = match &experiment.engine {
        Some(section) => check_engine(scope, section),
        None => Some(None),
    };
    let objectives = match &experiment.objectives {
        Some(section) => check_objectives(scope, section).map(Some),
        None => Some(None),
    };
    let (engine, objectives) = (engine?, objectives?);
    let Some(objectives) = objectives else {
        return Some(engine);
    };
    let mut settings = engine.unwrap_or_default();
    settings.objectives = Some(objectives);
    Some(Some(settings))
}

/// The section of the file for one cost.
fn section_of(section: &ObjectivesSection, kind: CostKind) -> Option<&ObjectiveSection> {
    match kind {
        CostKind::PromptTokens => section.prompt_tokens.as_ref(),
        CostKind::AnswerTokens => section.answer_tokens.as_ref(),
        CostKind::LatencyMs => section.latency_ms.as_ref(),
    }
}

/// The `[objectives]` table as the engine's objectives, or `None` after reporting each problem
/// at its key.
fn check_objectives(scope: &mut Scope<'_, '_>, section: &ObjectivesSection) -> Option<Objectives> {
    let mut objectives = Objectives::default();
    let mut ok = true;
    for kind in CostKind::ALL {
        let Some(objective) = section_of(section, kind) else {
            continue;
        };
        match check_objective(scope, kind, objective) {
            Some(checked) => objectives.set(kind, checked),
            None => ok = false,
        }
    }
    if ok && objectives.is_empty() {
        scope.report(
            "objectives",
            Diagnostic::error(
                Rule::ObjectivesOneOf,
                "[objectives] names no cost: give prompt_tokens, answer_tokens or latency_ms a \
                 limit or a weight, or remove the table",
            )
            .seen("an empty table"),
        );
        return None;
    }
    ok.then_some(objectives)
}

/// One cost's objective: exactly one of `limit` and `weight`, in its range.
fn check_objective(
    scope: &mut Scope<'_, '_>,
    kind: CostKind,
    objective: &ObjectiveSection,
) -> Option<Objective> {
    let key = format!("objectives.{kind}");
    match (objective.limit, objective.weight) {
        (Some(limit), None) => {
            let max = kind.max_limit();
            if limit.is_finite() && limit > 0.0 && limit <= max {
                return Some(Objective::Limit(limit));
            }
            scope.report(
                &format!("{key}.limit"),
                Diagnostic::error(
                    Rule::ObjectivesLimit,
                    format!("{key}.limit must be a number above 0 and at most {max}"),
                )
                .seen(limit),
            );
            None
        }
        (None, Some(weight)) => {
            if weight.is_finite() && weight > 0.0 && weight <= MAX_WEIGHT {
                return Some(Objective::Weight(weight));
            }
            scope.report(
                &format!("{key}.weight"),
                Diagnostic::error(
                    Rule::ObjectivesWeight,
                    format!("{key}.weight must be a number above 0 and at most {MAX_WEIGHT}"),
                )
                .seen(weight),
            );
            None
        }
        (limit, _) => {
            // Both, or neither.
            let seen = if limit.is_some() {
                "both limit and weight"
            } else {
                "neither limit nor weight"
            };
            scope.report(
                &key,
                Diagnostic::error(
                    Rule::ObjectivesOneOf,
                    format!(
                        "{key} sets {seen}: give it a hard limit or a weight, exactly one of them"
                    ),
                )
                .seen(seen),
            );
            None
        }
    }
}
