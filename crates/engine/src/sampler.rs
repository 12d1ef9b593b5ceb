//! The reflection minibatch sampler: the reference implementation's epoch-shuffled sampler over
//! the feedback set.
//!
//! Each epoch shuffles every feedback example once; when the set does not divide into whole
//! minibatches, the last one is padded with the examples used least so far, so every example is
//! seen equally often over many epochs. Unlike the reference, padding never repeats an example
//! inside the same minibatch (that would show the reflection model one example twice and pay
//! for nothing) and breaks ties by the lower index, which keeps it deterministic.

use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;

pub(crate) struct EpochSampler {
    examples: Vec<usize>,
    batch: usize,
    order: Vec<usize>,
    cursor: usize,
    // How often each example (by position in `examples`) has been scheduled.
    uses: Vec<u64>,
    rng: ChaCha8Rng,
}

impl EpochSampler {
    /// `batch` is capped at the number of examples; `examples` must not be empty.
    pub(crate) fn new(examples: Vec<usize>, batch: usize, rng: ChaCha8Rng) -> Self {
        let batch = batch.min(examples.len()).max(1);
        let uses = vec![0; examples.len()];
        Self {
            examples,
            batch,
            order: Vec::new(),
            cursor: 0,
            uses,
            rng,
        }
    }

    pub(crate) fn next_batch(&mut self) -> Vec<usize> {
        if self.cursor + self.batch > self.order.len() {
            self.new_epoch();
        }
        let batch = self.order[self.cursor..self.cursor + self.batch].to_vec();
        self.cursor += self.batch;
        batch
    }

    fn new_epoch(&mut self) {
        let mut positions: Vec<usize> = (0..self.examples.len()).collect();
        positions.shuffle(&mut self.rng);
        for &position in &positions {
            self.uses[position] += 1;
        }
        let partial = positions.len() % self.batch;
        if partial != 0 {
            let tail = positions[positions.len() - partial..].to_vec();
            let mut fill: Vec<usize> = (0..self.examples.len())
                .filter(|position| !tail.contains(position))
                .collect();
            fill.sort_by_key(|&position| (self.uses[position], position));
            for &position in fill.iter().take(self.batch - partial) {
                self.uses[position] += 1;
                positions.push(position);
            }
        }
        self.order = positions
            .into_iter()
            .map(|position| self.examples[position])
            .collect();
        self.cursor = 0;
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use rand::SeedableRng;

    use super::*;

    fn sampler(examples: usize, batch: usize, seed: u64) -> EpochSampler {
        EpochSampler::new(
            (0..examples).collect(),
            batch,
            ChaCha8Rng::seed_from_u64(seed),
        )
    }

    #[test]
    fn every_epoch_covers_every_example_once_when_batches_divide() {
        let mut sampler = sampler(6, 3, 1);
        for _ in 0..4 {
            let epoch: Vec<usize> = (0..2).flat_map(|_| sampler.next_batch()).collect();
            let seen: BTreeSet<usize> = epoch.iter().copied().collect();
            assert_eq!(epoch.len(), 6);
            assert_eq!(seen.len(), 6);
        }
    }

    #[test]
    fn padding_uses_the_least_used_examples_and_never_repeats_inside_a_batch() {
        let mut sampler = sampler(5, 3, 7);
        let mut counts = [0u32; 5];
        for _ in 0..50 {
            let batch = sampler.next_batch();
            let distinct: BTreeSet<usize> = batch.iter().copied().collect();
            assert_eq!(distinct.len(), 3, "repeat inside {batch:?}");
            for example in batch {
                counts[example] += 1;
            }
        }
        // 150 draws over 5 examples: padding keeps them within one use of each other per epoch.
        let (min, max) = (counts.iter().min(), counts.iter().max());
        assert!(
            max.zip(min).is_some_and(|(max, min)| max - min <= 2),
            "{counts:?}"
        );
    }

    #[test]
    fn batch_is_capped_at_the_feedback_set() {
        let mut sampler = sampler(2, 3, 0);
        for _ in 0..3 {
            let mut batch = sampler.next_batch();
            batch.sort_unstable();
            assert_eq!(batch, vec![0, 1]);
        }
    }

    #[test]
    fn same_seed_same_batches() {
        let draw = |seed| {
            let mut sampler = sampler(7, 3, seed);
            (0..10).map(|_| sampler.next_batch()).collect::<Vec<_>>()
        };
        assert_eq!(draw(3), draw(3));
        assert_ne!(draw(3), draw(4));
    }
}
