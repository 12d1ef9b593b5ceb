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

/// `batch` with rows it is known to fail swapped in, until half the batch (rounded up) is known
/// failures or no known failure is left outside it: in place of rows the parent is known to
/// answer right, then of rows it has not answered yet. Returns how many rows were swapped.
///
/// A reflection learns only from failures: a minibatch the parent answers right throughout is
/// skipped, and one with a single failure shows the reflection model one row. Where the task
/// model is right on most rows (a strong seed, or one label far commoner than the rest), most
/// epoch-sampled minibatches are such, and the budget goes on rows that teach nothing. The
/// parent's answers on many feedback rows are already known (cached), so a known failure costs
/// nothing to show. The other half stays as the epoch drew it (so rows not answered yet are
/// still explored), rows the child is also judged on
/// ([`MutationRecord::improves`](super::records::MutationRecord::improves)), so a rule that
/// fixes the failures by breaking right answers is still caught.
///
/// `known` gives the parent's known outcome on a feedback row (`Some(true)`: right); `rows` are
/// the feedback rows.
pub(crate) fn with_known_failures(
    batch: &mut [usize],
    rows: impl Iterator<Item = usize>,
    known: impl Fn(usize) -> Option<bool>,
    rng: &mut ChaCha8Rng,
) -> usize {
    let wanted = batch.len().div_ceil(2);
    let failing = batch
        .iter()
        .filter(|&&row| known(row) == Some(false))
        .count();
    let mut failures: Vec<usize> = rows
        .filter(|row| !batch.contains(row) && known(*row) == Some(false))
        .collect();
    failures.shuffle(rng);
    // Rows known right give way first, then rows not answered yet; the last of each first, so
    // the first rows of the epoch's draw stay in place.
    let mut replaceable: Vec<usize> = (0..batch.len())
        .rev()
        .filter(|&at| known(batch[at]) == Some(true))
        .collect();
    replaceable.extend(
        (0..batch.len())
            .rev()
            .filter(|&at| known(batch[at]).is_none()),
    );
    let swaps = wanted.saturating_sub(failing).min(failures.len());
    for (&at, failure) in replaceable.iter().zip(failures).take(swaps) {
        batch[at] = failure;
    }
    swaps
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

    #[test]
    fn known_failures_replace_known_right_rows_up_to_half_the_batch() {
        // Rows 0..10; the parent is known right on 0..6, known wrong on 6..9, unknown on 9.
        let known = |row: usize| match row {
            0..6 => Some(true),
            6..9 => Some(false),
            _ => None,
        };
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let mut batch = vec![0, 1, 2, 3, 9, 6];
        let swapped = with_known_failures(&mut batch, 0..10, known, &mut rng);
        // Half of six is three: one failure was in the batch, two are swapped in, in place of
        // the last known-right rows; the unknown row and the first rows stay.
        assert_eq!(swapped, 2);
        assert_eq!(&batch[..2], &[0, 1]);
        assert_eq!(batch[4..], [9, 6]);
        let mut swapped_in = batch[2..4].to_vec();
        swapped_in.sort_unstable();
        assert_eq!(swapped_in, vec![7, 8]);
    }

    #[test]
    fn nothing_is_swapped_without_known_failures_and_unknown_rows_give_way_last() {
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let mut batch = vec![0, 1, 2];
        let all_right = |_row: usize| Some(true);
        assert_eq!(
            with_known_failures(&mut batch, 0..6, all_right, &mut rng),
            0
        );
        assert_eq!(batch, vec![0, 1, 2]);
        // Rows not answered yet give way when no row is known right.
        let unknown = |row: usize| (row >= 3).then_some(false);
        assert_eq!(with_known_failures(&mut batch, 0..6, unknown, &mut rng), 2);
        assert_eq!(batch[0], 0);
        assert!(batch[1..].iter().all(|&row| row >= 3), "{batch:?}");
        // Already half failures: nothing to do.
        let half = |row: usize| Some(row != 0 && row != 1);
        let mut batch = vec![0, 2, 3, 1];
        assert_eq!(with_known_failures(&mut batch, 0..6, half, &mut rng), 0);
    }
}
