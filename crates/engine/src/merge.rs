//! Merging two lineages (the paper's GEPA+Merge): when to try, which pair to merge, and which
//! Pareto examples to test the merged prompt on first.
//!
//! Scheduling and preconditions follow the reference implementation: a merge becomes due after
//! each accepted mutation (until `max_merges` merges have been accepted) and is tried in the very
//! next iteration; the pair is two distinct non-dominated candidates, neither an ancestor of the
//! other, with a common ancestor that scores no better than either; a (pair, ancestor) triplet is
//! tried once; the pool must hold at least three candidates. The reference also needs a component
//! that one descendant changed and the other did not; for a single prompt that reduces to "the
//! two prompts differ", which the pool guarantees because it never holds a duplicate, and for a
//! prompt of several evolvable parts it is checked part by part (`parts::mergeable`), since such
//! a prompt is merged part by part as the reference merges components (`parts::merge_parts`).

use std::collections::BTreeSet;

use rand::Rng;
use rand::seq::index;
use rand_chacha::ChaCha8Rng;

use super::config::MergeConfig;
use super::pool::Pool;

/// How many pairs to draw before giving up for this iteration (the reference: 10 × 10).
const PAIR_DRAWS: usize = 100;

/// Pareto examples the merged prompt is scored on before a full evaluation (the reference's 5).
pub(crate) const SUBSAMPLE: usize = 5;

/// Two candidates to merge through their common ancestor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Triplet {
    pub(crate) first: usize,
    pub(crate) second: usize,
    pub(crate) ancestor: usize,
}

pub(crate) struct MergeScheduler {
    max_merges: usize,
    due: usize,
    accepted: usize,
    after_new_candidate: bool,
    tried: BTreeSet<(usize, usize, usize)>,
}

impl MergeScheduler {
    pub(crate) fn new(config: &MergeConfig) -> Self {
        Self {
            max_merges: config.max_merges,
            due: 0,
            accepted: 0,
            after_new_candidate: false,
            tried: BTreeSet::new(),
        }
    }

    /// A mutation was accepted: schedule a merge for the next iteration.
    pub(crate) fn mutation_accepted(&mut self) {
        self.after_new_candidate = true;
        if self.accepted < self.max_merges {
            self.due += 1;
        }
    }

    pub(crate) fn merge_accepted(&mut self) {
        self.due = self.due.saturating_sub(1);
        self.accepted += 1;
    }

    /// Whether the next iteration will try a merge.
    pub(crate) fn turn_pending(&self) -> bool {
        self.due > 0 && self.after_new_candidate
    }

    /// Whether this iteration tries a merge. Called once per iteration: a merge is only tried
    /// right after the iteration that found a new candidate.
    pub(crate) fn take_turn(&mut self) -> bool {
        let turn = self.turn_pending();
        self.after_new_candidate = false;
        turn
    }

    /// Draws a pair that meets every precondition and marks its triplet as tried. `usable`
    /// adds one of the caller's: for prompts merged part by part, that one descendant changed
    /// a part the other did not (the reference's "desirable predictors").
    pub(crate) fn find_triplet(
        &mut self,
        pool: &Pool,
        rng: &mut ChaCha8Rng,
        usable: impl Fn(Triplet) -> bool,
    ) -> Option<Triplet> {
        let candidates: Vec<usize> = pool.leaders().iter().map(|&(g, _)| g).collect();
        if candidates.len() < 2 || pool.len() < 3 {
            return None;
        }
        let score = |generation: usize| pool.get(generation).score;
        for _ in 0..PAIR_DRAWS {
            let drawn = index::sample(rng, candidates.len(), 2);
            let (a, b) = (candidates[drawn.index(0)], candidates[drawn.index(1)]);
            let (first, second) = (a.min(b), a.max(b));
            let first_ancestors = ancestors(pool, first);
            let second_ancestors = ancestors(pool, second);
            if first_ancestors.contains(&second) || second_ancestors.contains(&first) {
                continue;
            }
            let common: Vec<usize> = first_ancestors
                .intersection(&second_ancestors)
                .copied()
                .filter(|&ancestor| {
                    !self.tried.contains(&(first, second, ancestor))
                        && score(ancestor) <= score(first)
                        && score(ancestor) <= score(second)
                        && usable(Triplet {
                            first,
                            second,
                            ancestor,
                        })
                })
                .collect();
            if common.is_empty() {
                continue;
            }
            let ancestor = pick_weighted(&common, score, rng);
            self.tried.insert((first, second, ancestor));
            return Some(Triplet {
                first,
                second,
                ancestor,
            });
        }
        None
    }
}

fn ancestors(pool: &Pool, generation: usize) -> BTreeSet<usize> {
    let mut found = BTreeSet::new();
    let mut stack = pool.get(generation).parents.clone();
    while let Some(parent) = stack.pop() {
        if found.insert(parent) {
            stack.extend(pool.get(parent).parents.iter().copied());
        }
    }
    found
}

/// An ancestor drawn with probability proportional to its score, as the reference does; uniform
/// when every score is 0 (the reference would fail there).
fn pick_weighted(options: &[usize], score: impl Fn(usize) -> f64, rng: &mut ChaCha8Rng) -> usize {
    let total: f64 = options.iter().map(|&option| score(option)).sum();
    if total <= 0.0 {
        return options[rng.random_range(0..options.len() as u64) as usize];
    }
    let mut ticket = rng.random_range(0.0..total);
    for &option in options {
        let weight = score(option);
        if ticket < weight {
            return option;
        }
        ticket -= weight;
    }
    // Rounding can leave a sliver past the last weight.
    options[options.len() - 1]
}

/// Pareto instances (0-based within the Pareto set) to score the merged prompt on first: up to
/// two where `first` wins, two where `second` wins and the rest from ties, topped up from
/// whatever is left, as the reference picks them. Never repeats an instance.
pub(crate) fn subsample(pool: &Pool, triplet: Triplet, rng: &mut ChaCha8Rng) -> Vec<usize> {
    let first = &pool.get(triplet.first).pareto_scores;
    let second = &pool.get(triplet.second).pareto_scores;
    let instances = 0..first.len();
    let buckets: [Vec<usize>; 3] = [
        instances
            .clone()
            .filter(|&i| first[i] > second[i])
            .collect(),
        instances
            .clone()
            .filter(|&i| second[i] > first[i])
            .collect(),
        instances
            .clone()
            .filter(|&i| first[i] == second[i])
            .collect(),
    ];
    let per_bucket = SUBSAMPLE.div_ceil(3);
    let mut chosen: Vec<usize> = Vec::new();
    for bucket in &buckets {
        let take = per_bucket.min(bucket.len()).min(SUBSAMPLE - chosen.len());
        chosen.extend(
            index::sample(rng, bucket.len(), take)
                .iter()
                .map(|i| bucket[i]),
        );
    }
    let unused: Vec<usize> = instances.filter(|i| !chosen.contains(i)).collect();
    let take = (SUBSAMPLE - chosen.len()).min(unused.len());
    chosen.extend(
        index::sample(rng, unused.len(), take)
            .iter()
            .map(|i| unused[i]),
    );
    chosen
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;

    use super::*;
    use crate::pool::tests::pool;

    fn scheduler() -> MergeScheduler {
        MergeScheduler::new(&MergeConfig::default())
    }

    fn rng() -> ChaCha8Rng {
        ChaCha8Rng::seed_from_u64(9)
    }

    #[test]
    fn two_siblings_that_each_beat_their_parent_merge_through_it() {
        let pool = pool(&[(&[], &[0.2, 0.2]), (&[0], &[1.0, 0.2]), (&[0], &[0.2, 1.0])]);
        assert_eq!(
            scheduler().find_triplet(&pool, &mut rng(), |_| true),
            Some(Triplet {
                first: 1,
                second: 2,
                ancestor: 0
            })
        );
    }

    #[test]
    fn needs_three_candidates_and_two_non_dominated_ones() {
        let two = pool(&[(&[], &[0.2, 0.2]), (&[0], &[1.0, 0.2])]);
        assert_eq!(scheduler().find_triplet(&two, &mut rng(), |_| true), None);
        // 2 dominates 1 (it wins everything 1 wins), so only one candidate can be picked.
        let dominated = pool(&[(&[], &[0.2, 0.2]), (&[0], &[1.0, 0.2]), (&[0], &[1.0, 1.0])]);
        assert_eq!(
            scheduler().find_triplet(&dominated, &mut rng(), |_| true),
            None
        );
    }

    #[test]
    fn never_merges_a_candidate_with_its_own_ancestor() {
        // 2 descends from 1; both lead somewhere, but one is the other's ancestor.
        let pool = pool(&[(&[], &[0.0, 0.0]), (&[0], &[1.0, 0.5]), (&[1], &[0.5, 1.0])]);
        assert_eq!(scheduler().find_triplet(&pool, &mut rng(), |_| true), None);
    }

    #[test]
    fn the_ancestor_must_not_beat_either_descendant() {
        // The seed leads example 2 and has the best mean: merging its worse children through it
        // would go backwards.
        let pool = pool(&[
            (&[], &[0.4, 0.4, 1.0]),
            (&[0], &[1.0, 0.0, 0.0]),
            (&[0], &[0.0, 1.0, 0.0]),
        ]);
        assert_eq!(scheduler().find_triplet(&pool, &mut rng(), |_| true), None);
    }

    #[test]
    fn a_triplet_the_caller_cannot_merge_is_not_drawn() {
        // Prompts merged part by part need a part one descendant changed and the other did
        // not: a triplet without one is never drawn, nor marked tried.
        let pool = pool(&[(&[], &[0.2, 0.2]), (&[0], &[1.0, 0.2]), (&[0], &[0.2, 1.0])]);
        let mut scheduler = scheduler();
        assert_eq!(scheduler.find_triplet(&pool, &mut rng(), |_| false), None);
        assert!(
            scheduler
                .find_triplet(&pool, &mut rng(), |_| true)
                .is_some()
        );
    }

    #[test]
    fn each_triplet_is_tried_once() {
        let pool = pool(&[(&[], &[0.2, 0.2]), (&[0], &[1.0, 0.2]), (&[0], &[0.2, 1.0])]);
        let mut scheduler = scheduler();
        assert!(
            scheduler
                .find_triplet(&pool, &mut rng(), |_| true)
                .is_some()
        );
        assert_eq!(scheduler.find_triplet(&pool, &mut rng(), |_| true), None);
    }

    #[test]
    fn merges_are_due_only_right_after_an_accepted_mutation_and_up_to_the_limit() {
        let mut scheduler = MergeScheduler::new(&MergeConfig { max_merges: 1 });
        assert!(!scheduler.take_turn());
        scheduler.mutation_accepted();
        assert!(scheduler.turn_pending());
        assert!(scheduler.take_turn());
        assert!(!scheduler.turn_pending());
        assert!(!scheduler.take_turn(), "only the iteration right after");
        scheduler.mutation_accepted();
        scheduler.merge_accepted();
        scheduler.mutation_accepted();
        // One merge accepted out of one allowed: the earlier due merge still runs once.
        assert!(scheduler.take_turn());
        scheduler.merge_accepted();
        scheduler.mutation_accepted();
        assert!(!scheduler.take_turn());
    }

    #[test]
    fn subsample_covers_wins_of_both_sides_and_ties_without_repeats() {
        let pool = pool(&[
            (&[], &[0.0; 8]),
            (&[0], &[1.0, 1.0, 1.0, 0.0, 0.0, 0.5, 0.5, 0.5]),
            (&[0], &[0.0, 0.0, 0.0, 1.0, 1.0, 0.5, 0.5, 0.5]),
        ]);
        let triplet = Triplet {
            first: 1,
            second: 2,
            ancestor: 0,
        };
        let chosen = subsample(&pool, triplet, &mut rng());
        assert_eq!(chosen.len(), SUBSAMPLE);
        assert_eq!(chosen.iter().filter(|&&i| i < 3).count(), 2);
        assert_eq!(chosen.iter().filter(|&&i| (3..5).contains(&i)).count(), 2);
        assert_eq!(chosen.iter().filter(|&&i| i >= 5).count(), 1);
        let distinct: BTreeSet<usize> = chosen.iter().copied().collect();
        assert_eq!(distinct.len(), SUBSAMPLE);
        let small = self::pool(&[
            (&[], &[0.0; 3]),
            (&[0], &[1.0, 0.0, 0.0]),
            (&[0], &[0.0, 1.0, 0.0]),
        ]);
        assert_eq!(subsample(&small, triplet, &mut rng()).len(), 3);
    }
}
