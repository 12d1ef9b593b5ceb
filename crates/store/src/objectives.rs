//! What an execution's `[objectives]` choose among the generations of its history: the
//! candidate the run recommends, the cheapest one not significantly worse than it on the Pareto
//! rows, and the frontier of score against cost. The rules are the engine's
//! (`gepa_lab_engine::{recommend, cheapest_not_worse, frontier}`), applied to `history.csv`, so
//! the runner (which replays both) and the report (which compares them) can never disagree.
use gepa_lab_engine::{self as engine, Objectives, ParetoComparison, Standing};

use super::HistoryRow;

/// The generations an execution's objectives pick.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ObjectiveChoices {
    /// Within every limit, the highest trade-off score; `None` when no generation is.
    pub recommended: Option<u32>,
    /// The lowest cost on the objectives' first cost among those within the limits and not
    /// significantly worse than the recommended one on the Pareto rows, with that comparison;
    /// the recommended one itself when nothing cheaper is close enough.
    pub cheapest: Option<(u32, ParetoComparison)>,
    /// The frontier of mean Pareto score against the first cost, by ascending cost.
    pub frontier: Vec<u32>,
}

/// The choices of `objectives` among the generations `history` holds (one execution's, in any
/// order; a tie goes to the earlier generation).
pub fn objective_choices(history: &[&HistoryRow], objectives: &Objectives) -> ObjectiveChoices {
    let mut rows: Vec<&HistoryRow> = history.to_vec();
    rows.sort_by_key(|row| row.generation);
    let standings: Vec<Standing<'_>> = rows
        .iter()
        .map(|row| Standing {
            generation: row.generation as usize,
            score: row.score,
            pareto_scores: row.pareto_scores.as_deref().unwrap_or_default(),
            costs: row.costs,
        })
        .collect();
    let generation = |g: usize| u32::try_from(g).unwrap_or(u32::MAX);
    let recommended = engine::recommend(&standings, objectives);
    ObjectiveChoices {
        recommended: recommended.map(generation),
        cheapest: recommended
            .and_then(|best| engine::cheapest_not_worse(&standings, objectives, best))
            .map(|(g, comparison)| (generation(g), comparison)),
        frontier: objectives
            .axis()
            .map(|axis| engine::frontier(&standings, axis))
            .unwrap_or_default()
            .into_iter()
            .map(generation)
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use gepa_lab_engine::{Costs, Objective};

    use super::*;

    fn row(generation: u32, scores: &[f64], prompt_tokens: f64) -> HistoryRow {
        HistoryRow {
            variant: String::new(),
            evolution_id: "e1".into(),
            generation,
            score: scores.iter().sum::<f64>() / scores.len() as f64,
            prompt: format!("p{generation}"),
            budget_used: None,
            costs: Some(Costs {
                prompt_tokens,
                answer_tokens: 1.0,
                latency_ms: None,
                rows: scores.len(),
            }),
            pareto_scores: Some(scores.to_vec()),
        }
    }

    #[test]
    fn a_limit_picks_the_best_within_it_and_the_cheapest_close_to_it() {
        let history = [
            row(0, &[0.0; 8], 10.0),
            row(1, &[1., 1., 1., 1., 1., 1., 0., 0.], 30.0),
            row(2, &[1.0; 8], 80.0),
            row(3, &[1., 1., 1., 1., 1., 1., 1., 0.], 50.0),
        ];
        let rows: Vec<&HistoryRow> = history.iter().rev().collect();
        let objectives = Objectives {
            prompt_tokens: Some(Objective::Limit(60.0)),
            ..Objectives::default()
        };
        let choices = objective_choices(&rows, &objectives);
        assert_eq!(choices.recommended, Some(3));
        // g1 loses 1 row to g3 and wins none (p = 1): not significantly worse, and cheaper.
        // The seed loses 7 (p = 0.016): significantly worse, though the cheapest of all.
        let (cheapest, comparison) = choices.cheapest.expect("a cheapest");
        assert_eq!((cheapest, comparison.losses, comparison.rows), (1, 1, 8));
        assert_eq!(choices.frontier, vec![0, 1, 3, 2]);
        assert_eq!(
            objective_choices(&rows, &Objectives::default()),
            ObjectiveChoices::default()
        );
    }
}
