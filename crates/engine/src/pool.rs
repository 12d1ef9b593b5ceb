//! The candidate pool, its per-instance Pareto front, and parent selection.
//!
//! For every Pareto example the pool keeps the best score seen and the candidates that reach it.
//! Selection follows the reference implementation: take the candidates on some front, drop the
//! dominated ones (every example a candidate wins is also won by a remaining candidate; the
//! lowest-scoring are dropped first), and draw among the rest with probability proportional to
//! the number of examples each wins. A candidate that is best on only a few examples keeps a
//! chance to be improved, which is what keeps GEPA from collapsing onto one lineage.

use rand::Rng;
use rand_chacha::ChaCha8Rng;

use super::records::CandidateRecord;

pub(crate) struct Pool {
    candidates: Vec<CandidateRecord>,
    best_per_instance: Vec<f64>,
    // Per Pareto example, the generations that reach its best score, ascending.
    fronts: Vec<Vec<usize>>,
    // Only `add` changes the fronts, so selection reuses this between additions.
    leaders: Vec<(usize, usize)>,
}

impl Pool {
    pub(crate) fn new(seed: CandidateRecord) -> Self {
        let mut pool = Self {
            best_per_instance: seed.pareto_scores.clone(),
            fronts: vec![Vec::new(); seed.pareto_scores.len()],
            candidates: Vec::new(),
            leaders: Vec::new(),
        };
        pool.add(seed);
        pool
    }

    /// The next generation number.
    pub(crate) fn len(&self) -> usize {
        self.candidates.len()
    }

    pub(crate) fn get(&self, generation: usize) -> &CandidateRecord {
        &self.candidates[generation]
    }

    pub(crate) fn into_candidates(self) -> Vec<CandidateRecord> {
        self.candidates
    }

    /// Adds a candidate scored on every Pareto example; its generation must be `len()`.
    pub(crate) fn add(&mut self, candidate: CandidateRecord) {
        let generation = candidate.generation;
        for (instance, &score) in candidate.pareto_scores.iter().enumerate() {
            let best = &mut self.best_per_instance[instance];
            if score > *best {
                *best = score;
                self.fronts[instance] = vec![generation];
            } else if score == *best {
                self.fronts[instance].push(generation);
            }
        }
        self.candidates.push(candidate);
        self.leaders = self.find_leaders();
    }

    /// The generation with the highest mean Pareto score; the earlier one on a tie.
    pub(crate) fn best(&self) -> usize {
        let mut best = 0;
        for candidate in &self.candidates {
            if candidate.score > self.candidates[best].score {
                best = candidate.generation;
            }
        }
        best
    }

    /// The candidates selection can pick, each with the number of Pareto examples it wins once
    /// dominated candidates are dropped, ascending by generation.
    pub(crate) fn leaders(&self) -> &[(usize, usize)] {
        &self.leaders
    }

    fn find_leaders(&self) -> Vec<(usize, usize)> {
        let count = self.candidates.len();
        let mut wins: Vec<Vec<usize>> = vec![Vec::new(); count];
        for (instance, front) in self.fronts.iter().enumerate() {
            for &generation in front {
                wins[generation].push(instance);
            }
        }
        let mut order: Vec<usize> = (0..count).filter(|&g| !wins[g].is_empty()).collect();
        order.sort_by(|&a, &b| {
            self.candidates[a]
                .score
                .total_cmp(&self.candidates[b].score)
                .then(a.cmp(&b))
        });
        let mut alive = vec![false; count];
        for &generation in &order {
            alive[generation] = true;
        }
        // Dropping a candidate only makes the others harder to dominate, so one pass from the
        // weakest up finds the same set as the reference's restart-after-each-removal loop.
        for &candidate in &order {
            let covered = wins[candidate].iter().all(|&instance| {
                self.fronts[instance]
                    .iter()
                    .any(|&other| other != candidate && alive[other])
            });
            if covered {
                alive[candidate] = false;
            }
        }
        let mut leads = vec![0; count];
        for front in &self.fronts {
            for &generation in front.iter().filter(|&&g| alive[g]) {
                leads[generation] += 1;
            }
        }
        leads
            .into_iter()
            .enumerate()
            .filter(|&(_, count)| count > 0)
            .collect()
    }

    /// Draws a parent: a non-dominated candidate, weighted by the examples it wins.
    pub(crate) fn select_parent(&self, rng: &mut ChaCha8Rng) -> usize {
        let total: usize = self.leaders.iter().map(|&(_, count)| count).sum();
        // Every front keeps at least one candidate, so `total` is at least the number of Pareto
        // examples; the guard only keeps `random_range` from ever seeing an empty range.
        if total == 0 {
            return self.best();
        }
        let mut ticket = rng.random_range(0..total as u64) as usize;
        for &(generation, count) in &self.leaders {
            if ticket < count {
                return generation;
            }
            ticket -= count;
        }
        self.best()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use rand::SeedableRng;

    use super::*;
    use crate::budget::Spent;

    pub(crate) fn candidate(
        generation: usize,
        parents: &[usize],
        scores: &[f64],
    ) -> CandidateRecord {
        CandidateRecord {
            generation,
            score: scores.iter().sum::<f64>() / scores.len() as f64,
            prompt: format!("prompt {generation}"),
            pareto_scores: scores.to_vec(),
            parents: parents.to_vec(),
            iteration: generation,
            spent: Spent::default(),
            costs: None,
        }
    }

    pub(crate) fn pool(candidates: &[(&[usize], &[f64])]) -> Pool {
        let mut iter = candidates.iter().enumerate();
        let mut pool = match iter.next() {
            Some((_, (parents, scores))) => Pool::new(candidate(0, parents, scores)),
            None => panic!("a pool needs a seed"),
        };
        for (generation, (parents, scores)) in iter {
            pool.add(candidate(generation, parents, scores));
        }
        pool
    }

    #[test]
    fn fronts_keep_every_candidate_that_ties_the_best() {
        let pool = pool(&[(&[], &[0.5, 0.0]), (&[0], &[0.5, 1.0]), (&[0], &[0.2, 1.0])]);
        assert_eq!(pool.fronts, vec![vec![0, 1], vec![1, 2]]);
        assert_eq!(pool.best_per_instance, vec![0.5, 1.0]);
    }

    #[test]
    fn dominated_candidates_are_never_selected() {
        // 1 wins examples 0 and 1; 2 wins only example 1, which 1 also wins: 2 is dominated.
        // The seed wins nothing. 3 alone wins example 2.
        let pool = pool(&[
            (&[], &[0.0, 0.0, 0.0]),
            (&[0], &[1.0, 1.0, 0.0]),
            (&[0], &[0.0, 1.0, 0.0]),
            (&[0], &[0.0, 0.0, 1.0]),
        ]);
        assert_eq!(pool.leaders(), [(1, 2), (3, 1)]);
        let mut rng = ChaCha8Rng::seed_from_u64(5);
        for _ in 0..200 {
            let parent = pool.select_parent(&mut rng);
            assert!(
                parent == 1 || parent == 3,
                "picked dominated candidate {parent}"
            );
        }
    }

    #[test]
    fn of_two_equal_candidates_the_weaker_mean_is_dropped_first() {
        // 1 and 2 tie on example 0, the only one either wins; 1 has the lower mean, so it goes
        // and 2 stays (dropping both would leave example 0 without a leader).
        let pool = pool(&[(&[], &[0.0, 0.5]), (&[0], &[1.0, 0.0]), (&[0], &[1.0, 0.2])]);
        assert_eq!(pool.leaders(), [(0, 1), (2, 1)]);
    }

    #[test]
    fn selection_is_weighted_by_the_examples_each_candidate_wins() {
        // 1 wins three examples, 2 wins one: expect about 3:1.
        let pool = pool(&[
            (&[], &[0.0, 0.0, 0.0, 0.0]),
            (&[0], &[1.0, 1.0, 1.0, 0.0]),
            (&[0], &[0.0, 0.0, 0.0, 1.0]),
        ]);
        let mut rng = ChaCha8Rng::seed_from_u64(11);
        let draws = 4000;
        let firsts = (0..draws)
            .filter(|_| pool.select_parent(&mut rng) == 1)
            .count();
        let share = firsts as f64 / draws as f64;
        assert!(
            (0.72..0.78).contains(&share),
            "share of candidate 1: {share}"
        );
    }

    #[test]
    fn best_is_the_highest_mean_and_the_earlier_on_a_tie() {
        let pool = pool(&[(&[], &[0.5, 0.5]), (&[0], &[1.0, 0.0]), (&[0], &[0.0, 0.9])]);
        assert_eq!(pool.best(), 0);
        let pool = self::pool(&[(&[], &[0.5, 0.5]), (&[0], &[1.0, 0.2])]);
        assert_eq!(pool.best(), 1);
    }
}
