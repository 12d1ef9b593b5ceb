//! The seeded split of a dataset's rows into minibatch, Pareto and holdout parts.
use rand_chacha::ChaCha8Rng;
use rand_chacha::rand_core::{RngCore, SeedableRng};
use serde::{Deserialize, Serialize};
use thiserror::Error;

/// How many rows after the minibatch and Pareto parts are kept for replay.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HoldoutSize {
    /// Every remaining row.
    Rest,
    /// The first N remaining rows.
    Count(usize),
    /// No holdout; replay is then impossible.
    None,
}

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SplitError {
    #[error("the dataset has {rows} usable rows but minibatch + pareto needs {needed}")]
    TooFewRows { rows: usize, needed: usize },
    #[error("holdout asks for {asked} rows but only {left} remain after minibatch and pareto")]
    HoldoutTooLarge { asked: usize, left: usize },
}

/// Row indices (0-based data rows of the file) of each part, in the order they are used.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Split {
    pub minibatch: Vec<usize>,
    pub pareto: Vec<usize>,
    pub holdout: Vec<usize>,
}

impl Split {
    /// Splits `rows` rows: the first `minibatch` rows (after an optional seeded shuffle) are the
    /// feedback set, the next `pareto` the validation set, and the holdout comes from the rest.
    pub fn new(
        rows: usize,
        minibatch: usize,
        pareto: usize,
        holdout: HoldoutSize,
        shuffle_seed: Option<u64>,
    ) -> Result<Self, SplitError> {
        let needed = minibatch + pareto;
        if rows < needed {
            return Err(SplitError::TooFewRows { rows, needed });
        }
        let left = rows - needed;
        let holdout_len = match holdout {
            HoldoutSize::Rest => left,
            HoldoutSize::None => 0,
            HoldoutSize::Count(asked) if asked > left => {
                return Err(SplitError::HoldoutTooLarge { asked, left });
            }
            HoldoutSize::Count(asked) => asked,
        };
        let mut order: Vec<usize> = (0..rows).collect();
        if let Some(seed) = shuffle_seed {
            shuffle(&mut order, seed);
        }
        order.truncate(needed + holdout_len);
        let holdout = order.split_off(needed);
        let pareto = order.split_off(minibatch);
        Ok(Self {
            minibatch: order,
            pareto,
            holdout,
        })
    }
}

/// Fisher–Yates with ChaCha8, written out so that the split of a given seed never changes with a
/// `rand` upgrade: a published experiment must split the same way next year.
fn shuffle(items: &mut [usize], seed: u64) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    for i in (1..items.len()).rev() {
        let j = below(&mut rng, i as u64 + 1) as usize;
        items.swap(i, j);
    }
}

/// A uniform integer in `0..bound` by rejection, free of modulo bias.
fn below(rng: &mut ChaCha8Rng, bound: u64) -> u64 {
    let zone = u64::MAX - (u64::MAX % bound);
    loop {
        let value = rng.next_u64();
        if value < zone {
            return value % bound;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_seed_keeps_file_order() {
        let split = Split::new(10, 2, 3, HoldoutSize::Count(4), None).unwrap();
        assert_eq!(split.minibatch, vec![0, 1]);
        assert_eq!(split.pareto, vec![2, 3, 4]);
        assert_eq!(split.holdout, vec![5, 6, 7, 8]);
    }

    #[test]
    fn rest_and_none_holdout() {
        assert_eq!(
            Split::new(6, 1, 1, HoldoutSize::Rest, None)
                .unwrap()
                .holdout,
            vec![2, 3, 4, 5]
        );
        assert!(
            Split::new(6, 1, 1, HoldoutSize::None, None)
                .unwrap()
                .holdout
                .is_empty()
        );
    }

    #[test]
    fn seeded_shuffle_is_a_stable_permutation() {
        let a = Split::new(50, 4, 8, HoldoutSize::Rest, Some(7)).unwrap();
        let b = Split::new(50, 4, 8, HoldoutSize::Rest, Some(7)).unwrap();
        assert_eq!(a, b);
        let mut all: Vec<usize> =
            [a.minibatch.clone(), a.pareto.clone(), a.holdout.clone()].concat();
        assert_ne!(all, (0..50).collect::<Vec<_>>(), "seed 7 should move rows");
        all.sort_unstable();
        assert_eq!(all, (0..50).collect::<Vec<_>>());
        // Pinned so that an accidental change of the algorithm shows up here, not in users' runs.
        assert_eq!(a.minibatch, SEED_7_MINIBATCH);
        assert_ne!(Split::new(50, 4, 8, HoldoutSize::Rest, Some(8)).unwrap(), a);
    }

    const SEED_7_MINIBATCH: [usize; 4] = [36, 27, 11, 31];

    #[test]
    fn too_few_rows_and_too_large_holdout_are_errors() {
        assert_eq!(
            Split::new(5, 4, 2, HoldoutSize::Rest, None).unwrap_err(),
            SplitError::TooFewRows { rows: 5, needed: 6 }
        );
        assert_eq!(
            Split::new(8, 4, 2, HoldoutSize::Count(3), None).unwrap_err(),
            SplitError::HoldoutTooLarge { asked: 3, left: 2 }
        );
    }

    #[test]
    fn uniform_below_stays_in_range() {
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let mut counts = [0usize; 3];
        for _ in 0..3000 {
            counts[below(&mut rng, 3) as usize] += 1;
        }
        assert!(
            counts.iter().all(|&c| (900..1100).contains(&c)),
            "{counts:?}"
        );
    }
}
