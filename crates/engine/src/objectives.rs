//! Choosing among candidates by their costs (`costs`): the frontier of mean Pareto score
//! against cost, the candidate a run with objectives recommends, and the cheapest one not
//! significantly worse than it on the Pareto rows.
//!
//! It does not own the search: parent selection, acceptance and the stop conditions go by the
//! score alone. Objectives only decide which candidate the run recommends at its end
//! ([`recommend`]) and which cheaper one is worth testing beside it ([`cheapest_not_worse`]).
//! The functions take a [`Standing`], so the runner and the report apply the same rules to the
//! candidates a run directory records.

use serde::{Deserialize, Serialize};

use super::costs::{CostKind, Costs, Objectives};
use super::records::{CandidateRecord, Run, sign_test, wins_and_losses};

/// A candidate as the objectives read it: its mean Pareto score, its score on each Pareto row,
/// and its costs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Standing<'a> {
    pub generation: usize,
    pub score: f64,
    pub pareto_scores: &'a [f64],
    pub costs: Option<Costs>,
}

impl<'a> From<&'a CandidateRecord> for Standing<'a> {
    fn from(candidate: &'a CandidateRecord) -> Self {
        Self {
            generation: candidate.generation,
            score: candidate.score,
            pareto_scores: &candidate.pareto_scores,
            costs: candidate.costs,
        }
    }
}

impl Standing<'_> {
    fn cost(&self, kind: CostKind) -> Option<f64> {
        self.costs.as_ref().and_then(|costs| costs.get(kind))
    }
}

/// The frontier of mean Pareto score against the `axis` cost: the candidates with a known cost
/// that no other candidate beats on both (as high a score for at most the cost, and better on
/// one), by ascending cost, then descending score, then generation.
pub fn frontier(candidates: &[Standing<'_>], axis: CostKind) -> Vec<usize> {
    let known: Vec<(&Standing<'_>, f64)> = candidates
        .iter()
        .filter_map(|candidate| candidate.cost(axis).map(|cost| (candidate, cost)))
        .collect();
    let mut front: Vec<(&Standing<'_>, f64)> = known
        .iter()
        .filter(|(candidate, cost)| {
            !known.iter().any(|(other, other_cost)| {
                other.score >= candidate.score
                    && other_cost <= cost
                    && (other.score > candidate.score || other_cost < cost)
            })
        })
        .copied()
        .collect();
    front.sort_by(|(a, a_cost), (b, b_cost)| {
        a_cost
            .total_cmp(b_cost)
            .then(b.score.total_cmp(&a.score))
            .then(a.generation.cmp(&b.generation))
    });
    front
        .into_iter()
        .map(|(candidate, _)| candidate.generation)
        .collect()
}

/// The candidate a run with objectives recommends: of those within every limit, the highest
/// trade-off score ([`Objectives::trade_off`]); the earlier generation on a tie. `None` without
/// objectives, or when no candidate is within the limits.
pub fn recommend(candidates: &[Standing<'_>], objectives: &Objectives) -> Option<usize> {
    if objectives.is_empty() {
        return None;
    }
    let mut best: Option<(usize, f64)> = None;
    for candidate in candidates {
        let Some(value) = objectives.trade_off(candidate.score, candidate.costs.as_ref()) else {
            continue;
        };
        if best.is_none_or(|(_, known)| value > known) {
            best = Some((candidate.generation, value));
        }
    }
    best.map(|(generation, _)| generation)
}

/// How far from the best a cheaper candidate may be on the Pareto rows: "significantly worse"
/// is a two-sided sign test on the rows where the two differ (on 0/1 scores, the exact McNemar
/// test) below this, with a lower sum.
pub const NOT_WORSE_P: f64 = 0.05;

/// How a cheaper candidate compares with the recommended one on the Pareto rows.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ParetoComparison {
    /// The Pareto rows both were scored on.
    pub rows: usize,
    /// Rows where the cheaper one scores higher, and lower.
    pub wins: usize,
    pub losses: usize,
    /// The two-sided sign test's p-value of those wins against those losses.
    pub p_value: f64,
}

impl ParetoComparison {
    fn of(best: &[f64], other: &[f64]) -> Self {
        let (wins, losses) = wins_and_losses(best, other);
        let p_value = (2.0 * sign_test(wins.max(losses), wins.min(losses))).min(1.0);
        Self {
            rows: best.len().min(other.len()),
            wins,
            losses,
            p_value,
        }
    }

    /// Not significantly worse: it loses no more rows than it wins, or the sign test cannot
    /// tell the two apart at [`NOT_WORSE_P`].
    pub fn not_worse(&self) -> bool {
        self.losses <= self.wins || self.p_value >= NOT_WORSE_P
    }
}

/// The candidate with the lowest `axis` cost (the earlier on a tie) that is within every limit
/// and not significantly worse than `best` on the Pareto rows ([`ParetoComparison::not_worse`]),
/// with its comparison; `best` itself when none is cheaper. `None` when `best` is not among the
/// candidates or the objectives set no cost.
pub fn cheapest_not_worse(
    candidates: &[Standing<'_>],
    objectives: &Objectives,
    best: usize,
) -> Option<(usize, ParetoComparison)> {
    let axis = objectives.axis()?;
    let best = candidates.iter().find(|c| c.generation == best)?;
    let mut cheapest: Option<(&Standing<'_>, f64, ParetoComparison)> = None;
    for candidate in candidates {
        let Some(cost) = candidate.cost(axis) else {
            continue;
        };
        if candidate.pareto_scores.len() != best.pareto_scores.len()
            || !objectives.within_limits(candidate.costs.as_ref())
        {
            continue;
        }
        let comparison = ParetoComparison::of(best.pareto_scores, candidate.pareto_scores);
        let cheaper = cheapest.is_none_or(|(_, known, _)| cost < known);
        if comparison.not_worse() && cheaper {
            cheapest = Some((candidate, cost, comparison));
        }
    }
    cheapest.map(|(candidate, _, comparison)| (candidate.generation, comparison))
}

impl Run {
    /// With objectives, the candidate within every limit with the highest trade-off score
    /// ([`recommend`]); `None` without objectives or when none is within them.
    pub fn recommended(&self) -> Option<&CandidateRecord> {
        recommend(&self.standings(), &self.objectives).map(|g| &self.candidates[g])
    }

    /// The frontier of mean Pareto score against the first objective's cost ([`frontier`]),
    /// by ascending cost; empty without objectives.
    pub fn frontier(&self) -> Vec<usize> {
        self.objectives
            .axis()
            .map_or_else(Vec::new, |axis| frontier(&self.standings(), axis))
    }

    fn standings(&self) -> Vec<Standing<'_>> {
        self.candidates.iter().map(Standing::from).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::costs::{AnswerCost, Objective};

    fn costs(prompt_tokens: f64) -> Option<Costs> {
        Some(Costs {
            prompt_tokens,
            answer_tokens: 1.0,
            latency_ms: None,
            rows: 4,
        })
    }

    fn standing(generation: usize, scores: &[f64], prompt_tokens: f64) -> Standing<'_> {
        Standing {
            generation,
            score: scores.iter().sum::<f64>() / scores.len() as f64,
            pareto_scores: scores,
            costs: costs(prompt_tokens),
        }
    }

    fn limit(tokens: f64) -> Objectives {
        Objectives {
            prompt_tokens: Some(Objective::Limit(tokens)),
            ..Objectives::default()
        }
    }

    #[test]
    fn the_frontier_keeps_the_candidates_nothing_beats_on_both() {
        let rows = [
            [0.0, 0.0, 1.0, 0.0], // g0: 0.25 at 10 tokens
            [1.0, 0.0, 1.0, 0.0], // g1: 0.50 at 20
            [1.0, 1.0, 1.0, 0.0], // g2: 0.75 at 40
            [1.0, 0.0, 0.0, 0.0], // g3: 0.25 at 30, beaten by g1 on both
            [1.0, 1.0, 0.0, 0.0], // g4: 0.50 at 20, a tie with g1: neither beats the other
        ];
        let tokens = [10.0, 20.0, 40.0, 30.0, 20.0];
        let candidates: Vec<Standing<'_>> = rows
            .iter()
            .zip(tokens)
            .enumerate()
            .map(|(g, (scores, cost))| standing(g, scores, cost))
            .collect();
        assert_eq!(
            frontier(&candidates, CostKind::PromptTokens),
            vec![0, 1, 4, 2]
        );
        // A cost that is not known leaves a candidate off the frontier.
        assert!(frontier(&candidates, CostKind::LatencyMs).is_empty());
    }

    #[test]
    fn a_limit_excludes_and_the_best_score_within_it_is_recommended() {
        let (cheap, mid, long) = ([0.0, 1.0, 0.0, 0.0], [1.0, 1.0, 0.0, 0.0], [1.0; 4]);
        let candidates = [
            standing(0, &cheap, 10.0),
            standing(1, &mid, 50.0),
            standing(2, &long, 120.0),
        ];
        assert_eq!(recommend(&candidates, &Objectives::default()), None);
        assert_eq!(recommend(&candidates, &limit(200.0)), Some(2));
        assert_eq!(recommend(&candidates, &limit(100.0)), Some(1));
        // At the limit is within it.
        assert_eq!(recommend(&candidates, &limit(50.0)), Some(1));
        assert_eq!(recommend(&candidates, &limit(5.0)), None);
        // A candidate whose cost is unknown is never within a limit.
        let unknown = Standing {
            costs: None,
            ..standing(3, &long, 0.0)
        };
        assert_eq!(recommend(&[unknown], &limit(1000.0)), None);
    }

    #[test]
    fn a_weight_trades_score_for_cost() {
        let (half, full) = ([1.0, 1.0, 0.0, 0.0], [1.0; 4]);
        let candidates = [standing(0, &half, 10.0), standing(1, &full, 100.0)];
        let weighted = |weight| Objectives {
            prompt_tokens: Some(Objective::Weight(weight)),
            ..Objectives::default()
        };
        // 0.5 - 0.01 = 0.49 against 1.0 - 0.1 = 0.9: the score wins.
        assert_eq!(recommend(&candidates, &weighted(0.001)), Some(1));
        // 0.5 - 0.1 = 0.4 against 1.0 - 1.0 = 0: the cost wins.
        assert_eq!(recommend(&candidates, &weighted(0.01)), Some(0));
        // A tie goes to the earlier generation.
        let twins = [standing(0, &half, 10.0), standing(1, &half, 10.0)];
        assert_eq!(recommend(&twins, &weighted(0.01)), Some(0));
        // Weights choose among the candidates within the limits only.
        let both = Objectives {
            prompt_tokens: Some(Objective::Limit(50.0)),
            answer_tokens: Some(Objective::Weight(0.001)),
            ..Objectives::default()
        };
        assert_eq!(recommend(&candidates, &both), Some(0));
    }

    #[test]
    fn the_cheapest_is_the_cheapest_not_significantly_worse_than_the_best() {
        let best = [1.0; 12];
        // Loses 2 of 12 rows: p = 0.5, not significantly worse.
        let close = [1., 1., 1., 1., 1., 1., 1., 1., 1., 1., 0., 0.];
        // Loses all 12: p = 0.0005, significantly worse.
        let poor = [0.0; 12];
        let candidates = [
            standing(0, &poor, 5.0),
            standing(1, &best, 100.0),
            standing(2, &close, 40.0),
            standing(3, &close, 60.0),
        ];
        let (generation, comparison) =
            cheapest_not_worse(&candidates, &limit(1000.0), 1).expect("a cheapest");
        assert_eq!(generation, 2);
        assert_eq!(
            (comparison.rows, comparison.wins, comparison.losses),
            (12, 0, 2)
        );
        assert!((comparison.p_value - 0.5).abs() < 1e-12);
        // Over a limit, a candidate is not a candidate for cheapest either; the best is its
        // own cheapest when nothing cheaper is close enough.
        let (generation, comparison) =
            cheapest_not_worse(&candidates[..2], &limit(1000.0), 1).expect("the best itself");
        assert_eq!((generation, comparison.losses), (1, 0));
        assert_eq!(
            cheapest_not_worse(&candidates, &Objectives::default(), 1),
            None
        );
    }

    #[test]
    fn costs_are_means_over_the_rows_that_have_them() {
        let answers = [
            AnswerCost {
                prompt_tokens: 10,
                answer_tokens: 1,
                latency_ms: Some(100),
            },
            AnswerCost {
                prompt_tokens: 20,
                answer_tokens: 3,
                latency_ms: None,
            },
        ];
        let costs = Costs::mean(&answers).expect("two rows");
        assert_eq!((costs.prompt_tokens, costs.answer_tokens), (15.0, 2.0));
        assert_eq!((costs.latency_ms, costs.rows), (None, 2));
        assert_eq!(Costs::mean(&answers[..1]).unwrap().latency_ms, Some(100.0));
        assert_eq!(Costs::mean(std::iter::empty()), None);
    }

    #[test]
    fn ranges_name_the_cost_and_the_value() {
        assert_eq!(limit(1.0).out_of_range(), None);
        let (kind, value, _) = limit(0.0).out_of_range().expect("out of range");
        assert_eq!((kind, value), (CostKind::PromptTokens, 0.0));
        let heavy = Objectives {
            latency_ms: Some(Objective::Weight(2.0)),
            ..Objectives::default()
        };
        assert_eq!(
            heavy.out_of_range().map(|(k, v, _)| (k, v)),
            Some((CostKind::LatencyMs, 2.0))
        );
        let serialised = serde_json::to_string(&limit(120.0)).unwrap();
        assert_eq!(serialised, r#"{"prompt_tokens":{"limit":120.0}}"#);
    }
}
