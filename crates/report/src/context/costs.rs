//! What an execution's `[objectives]` show: every generation's mean Pareto score against its
//! cost, the frontier, the recommended and the cheapest candidates, and on the holdout their
//! scores and costs with the verdict between them. `verdict` decides the comparison; the
//! choices are the store's (`objective_choices`), read from `history.csv`.
use serde::Serialize;

use gepa_lab_engine::{CostKind, Objective, Objectives, Standing};
use gepa_lab_store::ObjectiveChoices;

use super::{ComparisonView, VersionView};
use crate::load::Execution;

/// One execution's costs and the choices its objectives make.
#[derive(Debug, Clone, Serialize)]
pub struct CostView {
    pub execution: String,
    /// Each objective in words: `prompt_tokens: at most 40 per answer`,
    /// `answer_tokens: weight 0.001 per token`.
    pub objectives: Vec<String>,
    /// The cost the frontier is drawn on and "cheapest" means (the first objective set), by
    /// its name and in words.
    pub axis: CostKind,
    pub axis_label: String,
    /// That cost's limit, when it has one.
    pub limit: Option<f64>,
    /// Every generation of the history, by generation.
    pub candidates: Vec<CostPoint>,
    /// The frontier's candidates by ascending cost (`seed`, `g3`, ...).
    pub frontier: Vec<String>,
    /// The candidate the objectives recommend (the execution's best); none when no generation
    /// is within the limits.
    pub recommended: Option<String>,
    /// The cheapest candidate within the limits not significantly worse than the recommended
    /// one on the Pareto rows; the recommended one itself when nothing cheaper is close enough.
    pub cheapest: Option<String>,
    /// That Pareto comparison in words, with the rows it rests on.
    pub pareto_text: Option<String>,
    /// On the holdout, on the execution's first replay model: the recommended and the cheapest
    /// candidates' scores and costs (one row when they are one candidate).
    pub holdout: Vec<CostRow>,
    /// The recommended against the cheapest on the holdout, as `verdict` decides it; none when
    /// they are one candidate or either was not replayed.
    pub comparison: Option<ComparisonView>,
    /// Every objective set, in [`CostKind::ALL`]'s order, each drawn as a chart of its own
    /// (the first is `axis`).
    #[serde(skip)]
    pub axes: Vec<CostAxis>,
}

/// One objective's cost against the score: what its frontier chart draws.
#[derive(Debug, Clone)]
pub struct CostAxis {
    pub axis: CostKind,
    /// The objective in words, as `objectives` says it.
    pub objective: String,
    pub axis_label: String,
    /// This cost's limit, when it has one.
    pub limit: Option<f64>,
    /// Each candidate's mean cost on this axis, in `candidates`' order; none when not measured.
    pub costs: Vec<Option<f64>>,
    /// The frontier of score against this cost, by ascending cost.
    pub frontier: Vec<String>,
}

/// One generation as the objectives see it.
#[derive(Debug, Clone, Serialize)]
pub struct CostPoint {
    /// `seed` for generation 0 when it is the seed prompt, else `g<generation>`.
    pub label: String,
    pub generation: u32,
    /// Mean score on the Pareto rows.
    pub score: f64,
    /// Mean cost per answer on the axis, over `cost_rows` Pareto rows; none when not measured.
    pub cost: Option<f64>,
    pub cost_rows: Option<usize>,
    pub on_frontier: bool,
    pub within_limits: bool,
    pub recommended: bool,
    pub cheapest: bool,
}

/// Which choice of the objectives a row of the holdout table is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum CostRole {
    #[serde(rename = "recommended")]
    Recommended,
    #[serde(rename = "cheapest")]
    Cheapest,
    /// The recommended candidate is also the cheapest close to it.
    #[serde(rename = "recommended and cheapest")]
    Both,
}

/// A candidate's holdout score and costs on one model, as the replay measured them.
#[derive(Debug, Clone, Serialize)]
pub struct CostRow {
    pub role: CostRole,
    pub version: String,
    pub model: String,
    /// Rows with an answer: what the means rest on.
    pub answered_rows: u32,
    pub mean: Option<f64>,
    pub mean_prompt_tokens: Option<f64>,
    pub mean_answer_tokens: Option<f64>,
    pub mean_latency_ms: Option<f64>,
}

/// The cost view of every execution with objectives; `comparisons` are their holdout
/// comparisons (`verdict::cheapest_against_best`), adjusted with the page's family.
pub(super) fn views(
    executions: &[Execution],
    versions: &[VersionView],
    comparisons: &[ComparisonView],
) -> Vec<CostView> {
    executions
        .iter()
        .filter_map(|execution| {
            let (objectives, choices) = execution.objectives.as_ref()?;
            let comparison = comparisons
                .iter()
                .find(|c| c.execution == execution.label)
                .cloned();
            Some(view(execution, objectives, choices, versions, comparison))
        })
        .collect()
}

fn view(
    execution: &Execution,
    objectives: &Objectives,
    choices: &ObjectiveChoices,
    versions: &[VersionView],
    comparison: Option<ComparisonView>,
) -> CostView {
    let axis = objectives.axis().unwrap_or(CostKind::PromptTokens);
    let label = |generation: u32| label_of(execution, generation);
    let recommended = choices.recommended;
    let cheapest = choices.cheapest.map(|(generation, _)| generation);
    let candidates = execution
        .generations
        .iter()
        .map(|row| CostPoint {
            label: label(row.generation),
            generation: row.generation,
            score: row.score,
            cost: row.costs.and_then(|costs| costs.get(axis)),
            cost_rows: row.costs.map(|costs| costs.rows),
            on_frontier: choices.frontier.contains(&row.generation),
            within_limits: objectives.within_limits(row.costs.as_ref()),
            recommended: recommended == Some(row.generation),
            cheapest: cheapest == Some(row.generation),
        })
        .collect();
    // One row when the recommended candidate is also the cheapest.
    let roles = if cheapest == recommended {
        [(CostRole::Both, recommended), (CostRole::Cheapest, None)]
    } else {
        [
            (CostRole::Recommended, recommended),
            (CostRole::Cheapest, cheapest),
        ]
    };
    let holdout = roles
        .into_iter()
        .filter_map(|(role, generation)| cost_row(execution, versions, role, &label(generation?)))
        .collect();
    let axes = objectives
        .iter()
        .map(|(kind, objective)| cost_axis(execution, kind, objective))
        .collect();
    CostView {
        axes,
        execution: execution.label.clone(),
        objectives: objectives
            .iter()
            .map(|(kind, o)| objective_text(kind, o))
            .collect(),
        axis,
        axis_label: axis.label().to_owned(),
        limit: match objectives.get(axis) {
            Some(Objective::Limit(limit)) => Some(limit),
            _ => None,
        },
        candidates,
        frontier: choices.frontier.iter().map(|&g| label(g)).collect(),
        recommended: recommended.map(label),
        cheapest: cheapest.map(label),
        pareto_text: choices.cheapest.map(|(generation, c)| {
            if Some(generation) == recommended {
                return "no cheaper candidate within the limits is close enough to the \
                        recommended one on the Pareto rows"
                    .to_owned();
            }
            format!(
                "on the {} Pareto rows it scores higher on {} and lower on {} than the \
                 recommended one: sign test p = {:.2}, not significantly worse",
                c.rows, c.wins, c.losses, c.p_value
            )
        }),
        holdout,
        comparison,
    }
}

/// The chart of one objective: every generation's cost on it and the frontier of score
/// against it (the engine's rule, as the store applies it to the first objective).
fn cost_axis(execution: &Execution, kind: CostKind, objective: Objective) -> CostAxis {
    let standings: Vec<Standing<'_>> = execution
        .generations
        .iter()
        .map(|row| Standing {
            generation: row.generation as usize,
            score: row.score,
            pareto_scores: &[],
            costs: row.costs,
        })
        .collect();
    CostAxis {
        axis: kind,
        objective: objective_text(kind, objective),
        axis_label: kind.label().to_owned(),
        limit: match objective {
            Objective::Limit(limit) => Some(limit),
            Objective::Weight(_) => None,
        },
        costs: execution
            .generations
            .iter()
            .map(|row| row.costs.and_then(|costs| costs.get(kind)))
            .collect(),
        frontier: gepa_lab_engine::frontier(&standings, kind)
            .into_iter()
            .map(|g| label_of(execution, u32::try_from(g).unwrap_or(u32::MAX)))
            .collect(),
    }
}

/// How the page names a generation: `seed` for generation 0 when it is the seed prompt.
fn label_of(execution: &Execution, generation: u32) -> String {
    let is_seed = generation == 0
        && execution
            .generations
            .iter()
            .any(|row| row.generation == 0 && row.prompt == execution.seed);
    if is_seed {
        "seed".into()
    } else {
        format!("g{generation}")
    }
}

fn objective_text(kind: CostKind, objective: Objective) -> String {
    let unit = match kind {
        CostKind::LatencyMs => "ms",
        CostKind::PromptTokens | CostKind::AnswerTokens => "token",
    };
    match objective {
        Objective::Limit(limit) => format!("{kind}: at most {limit} per answer"),
        Objective::Weight(weight) => format!("{kind}: weight {weight} per {unit}"),
    }
}

/// The holdout score and costs of version `label` on the execution's first replay model.
fn cost_row(
    execution: &Execution,
    versions: &[VersionView],
    role: CostRole,
    label: &str,
) -> Option<CostRow> {
    let model = execution.models.first()?;
    let score = versions
        .iter()
        .find(|v| v.execution == execution.label && v.label == label)?
        .scores
        .iter()
        .find(|s| s.model == *model)?;
    Some(CostRow {
        role,
        version: label.to_owned(),
        model: model.clone(),
        answered_rows: score.answered_rows,
        mean: score.mean,
        mean_prompt_tokens: score.mean_prompt_tokens,
        mean_answer_tokens: score.mean_completion_tokens,
        mean_latency_ms: score.mean_latency_ms,
    })
}

#[cfg(test)]
mod tests {
    use gepa_lab_engine::Costs;
    use gepa_lab_store::objective_choices;

    use super::*;

    /// An execution whose generations cost `tokens` prompt tokens on 8 Pareto rows each with
    /// the given per-row scores, with a limit of 60 prompt tokens.
    fn execution(generations: &[(&[f64], f64)]) -> Execution {
        let mut execution = crate::search::tests::execution(generations.len() as u32, Vec::new());
        for (row, (scores, tokens)) in execution.generations.iter_mut().zip(generations) {
            row.score = scores.iter().sum::<f64>() / scores.len() as f64;
            row.pareto_scores = Some(scores.to_vec());
            row.costs = Some(Costs {
                prompt_tokens: *tokens,
                answer_tokens: 1.0,
                latency_ms: None,
                rows: scores.len(),
            });
        }
        execution.generations[0].prompt = execution.seed.clone();
        let objectives = Objectives {
            prompt_tokens: Some(Objective::Limit(60.0)),
            ..Objectives::default()
        };
        let rows: Vec<_> = execution.generations.iter().collect();
        let choices = objective_choices(&rows, &objectives);
        execution.objectives = Some((objectives, choices));
        execution
    }

    #[test]
    fn the_view_marks_the_frontier_the_limit_and_both_choices() {
        let seven = [1., 1., 1., 1., 1., 1., 1., 0.];
        let six = [1., 1., 1., 1., 1., 1., 0., 0.];
        let execution = execution(&[
            (&[0.0; 8], 10.0),
            (&six, 30.0),
            (&[1.0; 8], 80.0),
            (&seven, 50.0),
        ]);
        let views = views(std::slice::from_ref(&execution), &[], &[]);
        let view = &views[0];
        assert_eq!(view.axis, CostKind::PromptTokens);
        assert_eq!(view.limit, Some(60.0));
        assert_eq!(view.objectives, ["prompt_tokens: at most 60 per answer"]);
        assert_eq!(view.frontier, ["seed", "g1", "g3", "g2"]);
        assert_eq!(view.recommended.as_deref(), Some("g3"));
        assert_eq!(view.cheapest.as_deref(), Some("g1"));
        let text = view.pareto_text.as_deref().unwrap_or_default();
        assert!(
            text.contains("8 Pareto rows") && text.contains("lower on 1"),
            "{text}"
        );
        let over: Vec<&str> = view
            .candidates
            .iter()
            .filter(|c| !c.within_limits)
            .map(|c| c.label.as_str())
            .collect();
        assert_eq!(over, ["g2"]);
        // Nothing was replayed in this execution: no holdout rows, no comparison.
        assert!(view.holdout.is_empty() && view.comparison.is_none());
    }
}
