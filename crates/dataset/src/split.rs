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

/// Row indices (0-based data rows of the file) of each part: the minibatch and Pareto rows in
/// the order they are used, the holdout rows as a set (the replay reads them in file order).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Split {
    pub minibatch: Vec<usize>,
    pub pareto: Vec<usize>,
    pub holdout: RowSet,
}

/// A set of data rows (0-based positions in the file) in memory that does not grow with a run
/// of consecutive rows: the holdout of an unshuffled split is one range of rows, whatever its
/// length; any other set takes one bit per row up to its last (125 KB for a million rows).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RowSet {
    Range(std::ops::Range<usize>),
    Bits {
        /// Bit `i % 64` of word `i / 64` is set when row `i` is in the set.
        words: Vec<u64>,
        len: usize,
    },
}

impl RowSet {
    /// The set of `rows`, in any order; a row given twice is in it once.
    pub fn of(rows: impl IntoIterator<Item = usize>) -> Self {
        let mut words: Vec<u64> = Vec::new();
        let mut len = 0;
        for row in rows {
            let (word, bit) = (row / 64, 1u64 << (row % 64));
            if words.len() <= word {
                words.resize(word + 1, 0);
            }
            if words[word] & bit == 0 {
                words[word] |= bit;
                len += 1;
            }
        }
        Self::Bits { words, len }
    }

    pub fn len(&self) -> usize {
        match self {
            Self::Range(range) => range.len(),
            Self::Bits { len, .. } => *len,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn contains(&self, row: usize) -> bool {
        match self {
            Self::Range(range) => range.contains(&row),
            Self::Bits { words, .. } => words
                .get(row / 64)
                .is_some_and(|word| word & (1 << (row % 64)) != 0),
        }
    }

    /// The first row of the set at `row` or after it.
    pub fn next_from(&self, row: usize) -> Option<usize> {
        match self {
            Self::Range(range) => {
                let next = row.max(range.start);
                (next < range.end).then_some(next)
            }
            Self::Bits { words, .. } => {
                let mut at = row / 64;
                // The bits of the first word from `row` on.
                let mut word = words.get(at)? & (u64::MAX << (row % 64));
                loop {
                    if word != 0 {
                        return Some(at * 64 + word.trailing_zeros() as usize);
                    }
                    at += 1;
                    word = *words.get(at)?;
                }
            }
        }
    }

    /// The rows, in file order.
    pub fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        let mut next = 0;
        std::iter::from_fn(move || {
            let row = self.next_from(next)?;
            next = row + 1;
            Some(row)
        })
    }
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
        let Some(seed) = shuffle_seed else {
            // File order: the holdout is one range of rows, held as two numbers.
            return Ok(Self {
                minibatch: (0..minibatch).collect(),
                pareto: (minibatch..needed).collect(),
                holdout: RowSet::Range(needed..needed + holdout_len),
            });
        };
        // The permutation needs every row for a moment: 4 bytes each when they fit in 32 bits.
        let parts = (minibatch, needed, needed + holdout_len);
        let (minibatch, pareto, holdout) = match u32::try_from(rows) {
            Ok(rows) => shuffled_parts((0..rows).collect(), seed, parts, |r| r as usize),
            Err(_) => shuffled_parts((0..rows).collect(), seed, parts, |r| r),
        };
        Ok(Self {
            minibatch,
            pareto,
            holdout,
        })
    }
}

/// The rows `order` holds, shuffled with `seed`, cut at the ends of the minibatch, the Pareto
/// rows and the holdout: the first two in their shuffled order, the holdout as a set.
fn shuffled_parts<T: Copy>(
    mut order: Vec<T>,
    seed: u64,
    (minibatch, pareto, holdout): (usize, usize, usize),
    row: impl Fn(T) -> usize,
) -> (Vec<usize>, Vec<usize>, RowSet) {
    shuffle(&mut order, seed);
    let part = |range: std::ops::Range<usize>| order[range].iter().map(|&r| row(r));
    (
        part(0..minibatch).collect(),
        part(minibatch..pareto).collect(),
        RowSet::of(part(pareto..holdout)),
    )
}

/// Fisher–Yates with ChaCha8, written out so that the split of a given seed never changes with a
/// `rand` upgrade: a published experiment must split the same way next year.
fn shuffle<T>(items: &mut [T], seed: u64) {
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
        assert_eq!(split.holdout, RowSet::Range(5..9));
        assert_eq!(split.holdout.iter().collect::<Vec<_>>(), [5, 6, 7, 8]);
    }

    #[test]
    fn rest_and_none_holdout() {
        assert_eq!(
            Split::new(6, 1, 1, HoldoutSize::Rest, None)
                .unwrap()
                .holdout,
            RowSet::Range(2..6)
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
        let holdout: Vec<usize> = a.holdout.iter().collect();
        let mut all: Vec<usize> = [a.minibatch.clone(), a.pareto.clone(), holdout].concat();
        assert_ne!(all, (0..50).collect::<Vec<_>>(), "seed 7 should move rows");
        all.sort_unstable();
        assert_eq!(all, (0..50).collect::<Vec<_>>());
        // Pinned so that an accidental change of the algorithm shows up here, not in users' runs.
        assert_eq!(a.minibatch, SEED_7_MINIBATCH);
        assert_eq!(a.pareto, SEED_7_PARETO);
        // A holdout of a count takes the first rows of the shuffled rest.
        let counted = Split::new(50, 4, 8, HoldoutSize::Count(3), Some(7)).unwrap();
        assert_eq!(counted.holdout.len(), 3);
        assert!(counted.holdout.iter().all(|row| a.holdout.contains(row)));
        assert_ne!(Split::new(50, 4, 8, HoldoutSize::Rest, Some(8)).unwrap(), a);
    }

    const SEED_7_MINIBATCH: [usize; 4] = [36, 27, 11, 31];
    const SEED_7_PARETO: [usize; 8] = [49, 7, 28, 3, 4, 40, 18, 12];

    #[test]
    fn a_row_set_is_a_range_or_a_bit_per_row() {
        let set = RowSet::of([130, 3, 64, 3, 63]);
        assert_eq!(set.len(), 4, "3 counts once");
        assert_eq!(set.iter().collect::<Vec<_>>(), [3, 63, 64, 130]);
        assert_eq!(set.next_from(4), Some(63));
        assert_eq!(set.next_from(65), Some(130));
        assert_eq!(set.next_from(131), None);
        assert!(set.contains(64) && !set.contains(65) && !set.contains(10_000));
        let range = RowSet::Range(5..8);
        assert_eq!(range.iter().collect::<Vec<_>>(), [5, 6, 7]);
        assert_eq!((range.next_from(0), range.next_from(8)), (Some(5), None));
        assert!(RowSet::of([]).is_empty() && RowSet::Range(4..4).is_empty());
    }

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
