//! The checks of the `[objectives]` table: each cost with exactly one of `limit` and `weight`,
//! each number in its range. Every problem is reported at its key; a table with any is no
//! objectives at all. The objectives travel to the engine with the `[engine]` settings
//! (`gepaLabEngine.objectives`), so a run on the public service refuses them like `[engine]`.
use super::Scope;
use super::engine_section::check_engine;
use crate::diagnostic::Diagnostic;
use crate::file::{Experiment, ObjectiveSection, ObjectivesSection};
use crate::rules::Rule;
use gepa_lab_engine::{CostKind, Objective, ObjectiveProblem, ObjectiveRule, Objectives};
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
/// at its key. The rules are the engine's ([`Objective::from_parts`],
/// [`Objectives::problems`]), the same that `serve` answers a start request with.
fn check_objectives(scope: &mut Scope<'_, '_>, section: &ObjectivesSection) -> Option<Objectives> {
    let mut objectives = Objectives::default();
    let mut ok = true;
    for kind in CostKind::ALL {
        let Some(objective) = section_of(section, kind) else {
            continue;
        };
        match Objective::from_parts(kind, objective.limit, objective.weight) {
            Ok(checked) => objectives.set(kind, checked),
            Err(problem) => {
                report(scope, problem);
                ok = false;
            }
        }
    }
    if !ok {
        return None;
    }
    let problems = objectives.problems();
    let clean = problems.is_empty();
    for problem in problems {
        report(scope, problem);
    }
    clean.then_some(objectives)
}

/// A broken rule of the engine's, reported at the key it names.
fn report(scope: &mut Scope<'_, '_>, problem: ObjectiveProblem) {
    let rule = match problem.rule {
        ObjectiveRule::OneOf => Rule::ObjectivesOneOf,
        ObjectiveRule::Limit => Rule::ObjectivesLimit,
        ObjectiveRule::Weight => Rule::ObjectivesWeight,
    };
    scope.report(
        &problem.key,
        Diagnostic::error(rule, problem.to_string()).seen(problem.seen),
    );
}
