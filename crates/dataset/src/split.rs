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
    #[error(
        "a stratified split of {rows} rows was given {labels} expected answers; it needs one per row"
    )]
    LabelCount { labels: usize, rows: usize },
    #[error(
        "the split recomputed from the plan does not give the minibatch and Pareto rows it records; the data or the plan changed"
    )]
    NotRecorded,
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

/// The order the rows are put in before the parts are cut from its front: the minibatch first,
/// then the Pareto rows, then the holdout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Order<'a> {
    /// The file's order.
    File,
    /// A seeded shuffle of the rows.
    Shuffled(u64),
    /// Each part holds every expected answer in its share of the file, within about a row:
    /// `labels[i]` is a key of row `i`'s expected answer (see
    /// [`Scan::label_keys`](crate::Scan::label_keys)). The rows of each answer keep their order
    /// (the file's, or the seeded shuffle's), and each is placed at its rank within its answer
    /// as a fraction of that answer's rows, so the first `n` rows of the order hold each answer
    /// about `n` times its share. A part whose answers' shares differ from the data's rewards a
    /// prompt that leans to its commonest answer; the Pareto rows judge every candidate.
    Stratified {
        labels: &'a [u64],
        shuffle_seed: Option<u64>,
    },
}

impl<'a> Order<'a> {
    /// The order of a seed, if any, stratified by `labels` when they are given.
    pub fn new(shuffle_seed: Option<u64>, stratified_by: Option<&'a [u64]>) -> Self {
        match (stratified_by, shuffle_seed) {
            (Some(labels), shuffle_seed) => Self::Stratified {
                labels,
                shuffle_seed,
            },
            (None, Some(seed)) => Self::Shuffled(seed),
            (None, None) => Self::File,
        }
    }
}

impl Split {
    /// Splits `rows` rows: the first `minibatch` rows of `order` are the feedback set, the next
    /// `pareto` the validation set, and the holdout comes from the rest. A stratified order
    /// has a label for every row: `labels.len()` must be `rows`.
    pub fn new(
        rows: usize,
        minibatch: usize,
        pareto: usize,
        holdout: HoldoutSize,
        order: Order<'_>,
    ) -> Result<Self, SplitError> {
        let holdout_len = Self::holdout_len(rows, minibatch, pareto, holdout)?;
        let needed = minibatch + pareto;
        let parts = (minibatch, needed, needed + holdout_len);
        let (minibatch, pareto, holdout) = match order {
            // File order: the holdout is one range of rows, held as two numbers.
            Order::File => (
                (0..minibatch).collect(),
                (minibatch..needed).collect(),
                RowSet::Range(needed..needed + holdout_len),
            ),
            // The permutation needs every row for a moment: 4 bytes each when they fit in 32 bits.
            Order::Shuffled(seed) => match u32::try_from(rows) {
                Ok(rows) => cut(shuffled(0..rows, seed), parts, |r| r as usize),
                Err(_) => cut(shuffled(0..rows, seed), parts, |r| r),
            },
            Order::Stratified {
                labels,
                shuffle_seed,
            } => {
                if labels.len() != rows {
                    return Err(SplitError::LabelCount {
                        labels: labels.len(),
                        rows,
                    });
                }
                let mut order = match shuffle_seed {
                    Some(seed) => shuffled(0..rows, seed),
                    None => (0..rows).collect(),
                };
                stratify(&mut order, labels);
                cut(order, parts, |r| r)
            }
        };
        Ok(Self {
            minibatch,
            pareto,
            holdout,
        })
    }

    /// How many rows the holdout of these sizes holds, or why `rows` rows do not split so.
    pub fn holdout_len(
        rows: usize,
        minibatch: usize,
        pareto: usize,
        holdout: HoldoutSize,
    ) -> Result<usize, SplitError> {
        let needed = minibatch + pareto;
        if rows < needed {
            return Err(SplitError::TooFewRows { rows, needed });
        }
        let left = rows - needed;
        match holdout {
            HoldoutSize::Rest => Ok(left),
            HoldoutSize::None => Ok(0),
            HoldoutSize::Count(asked) if asked > left => {
                Err(SplitError::HoldoutTooLarge { asked, left })
            }
            HoldoutSize::Count(asked) => Ok(asked),
        }
    }
}

/// `rows`, shuffled with `seed`.
fn shuffled<T>(rows: impl Iterator<Item = T>, seed: u64) -> Vec<T> {
    let mut order: Vec<T> = rows.collect();
    shuffle(&mut order, seed);
    order
}

/// The rows of `order` cut at the ends of the minibatch, the Pareto rows and the holdout: the
/// first two in their order, the holdout as a set.
fn cut<T: Copy>(
    order: Vec<T>,
    (minibatch, pareto, holdout): (usize, usize, usize),
    row: impl Fn(T) -> usize,
) -> (Vec<usize>, Vec<usize>, RowSet) {
    let part = |range: std::ops::Range<usize>| order[range].iter().map(|&r| row(r));
    (
        part(0..minibatch).collect(),
        part(minibatch..pareto).collect(),
        RowSet::of(part(pareto..holdout)),
    )
}

/// Reorders `order` so that every label is spread evenly over it: the row of rank `r` (from 0,
/// in `order`) among a label's `n` rows goes to the place `(r + 0.5) / n`, and rows at the same
/// place keep their order. The places are compared as exact fractions, so the order does not
/// depend on floating-point rounding.
fn stratify(order: &mut Vec<usize>, labels: &[u64]) {
    let mut counts: std::collections::HashMap<u64, u64> = std::collections::HashMap::new();
    for &row in order.iter() {
        *counts.entry(labels[row]).or_default() += 1;
    }
    let mut seen: std::collections::HashMap<u64, u64> = std::collections::HashMap::new();
    // (2r + 1, 2n) for each row in `order`: the place (r + 0.5) / n as a fraction.
    let mut placed: Vec<((u64, u64), usize)> = order
        .iter()
        .map(|&row| {
            let rank = seen.entry(labels[row]).or_default();
            let place = (2 * *rank + 1, 2 * counts[&labels[row]]);
            *rank += 1;
            (place, row)
        })
        .collect();
    // A stable sort: rows at equal places stay in the order they had.
    placed.sort_by(|((a, n), _), ((b, m), _)| {
        (u128::from(*a) * u128::from(*m)).cmp(&(u128::from(*b) * u128::from(*n)))
    });
    *order = placed.into_iter().map(|(_, row)| row).collect();
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
        let split = Split::new(10, 2, 3, HoldoutSize::Count(4), Order::File).unwrap();
        assert_eq!(split.minibatch, vec![0, 1]);
        assert_eq!(split.pareto, vec![2, 3, 4]);
        assert_eq!(split.holdout, RowSet::Range(5..9));
        assert_eq!(split.holdout.iter().collect::<Vec<_>>(), [5, 6, 7, 8]);
    }

    #[test]
    fn rest_and_none_holdout() {
        assert_eq!(
            Split::new(6, 1, 1, HoldoutSize::Rest, Order::File)
                .unwrap()
                .holdout,
            RowSet::Range(2..6)
        );
        assert!(
            Split::new(6, 1, 1, HoldoutSize::None, Order::File)
                .unwrap()
                .holdout
                .is_empty()
        );
    }

    #[test]
    fn seeded_shuffle_is_a_stable_permutation() {
        let a = Split::new(50, 4, 8, HoldoutSize::Rest, Order::Shuffled(7)).unwrap();
        let b = Split::new(50, 4, 8, HoldoutSize::Rest, Order::Shuffled(7)).unwrap();
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
        let counted = Split::new(50, 4, 8, HoldoutSize::Count(3), Order::Shuffled(7)).unwrap();
        assert_eq!(counted.holdout.len(), 3);
        assert!(counted.holdout.iter().all(|row| a.holdout.contains(row)));
        assert_ne!(
            Split::new(50, 4, 8, HoldoutSize::Rest, Order::Shuffled(8)).unwrap(),
            a
        );
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
            Split::new(5, 4, 2, HoldoutSize::Rest, Order::File).unwrap_err(),
            SplitError::TooFewRows { rows: 5, needed: 6 }
        );
        assert_eq!(
            Split::new(8, 4, 2, HoldoutSize::Count(3), Order::File).unwrap_err(),
            SplitError::HoldoutTooLarge { asked: 3, left: 2 }
        );
    }

    /// Labels for `rows` rows drawn with the weights given, in a seeded random arrangement.
    fn labels(rows: usize, weights: &[u64], seed: u64) -> Vec<u64> {
        let total: u64 = weights.iter().sum();
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        (0..rows)
            .map(|_| {
                let mut pick = below(&mut rng, total);
                let mut label = 0;
                while pick >= weights[label] {
                    pick -= weights[label];
                    label += 1;
                }
                label as u64
            })
            .collect()
    }

    /// The most any label's count in `rows` strays from its share of `labels`.
    fn worst_stray(rows: &[usize], labels: &[u64]) -> f64 {
        let len = rows.len() as f64;
        let mut distinct = labels.to_vec();
        distinct.sort_unstable();
        distinct.dedup();
        distinct
            .iter()
            .map(|label| {
                let share =
                    labels.iter().filter(|l| *l == label).count() as f64 / labels.len() as f64;
                let count = rows.iter().filter(|&&row| labels[row] == *label).count() as f64;
                (count - share * len).abs()
            })
            .fold(0.0, f64::max)
    }

    #[test]
    fn a_stratified_split_keeps_every_label_in_its_share_in_every_part() {
        // Two labels 71/29 (MPQA's shares), four even ones, ten skewed ones.
        let mixes: [&[u64]; 3] = [
            &[71, 29],
            &[1, 1, 1, 1],
            &[30, 20, 10, 10, 8, 8, 5, 4, 3, 2],
        ];
        for (mix, weights) in mixes.into_iter().enumerate() {
            for seed in 0..20 {
                let labels = labels(480, weights, seed);
                let order = Order::Stratified {
                    labels: &labels,
                    shuffle_seed: Some(7),
                };
                let split = Split::new(480, 40, 40, HoldoutSize::Count(300), order).unwrap();
                let parts = [
                    ("minibatch", worst_stray(&split.minibatch, &labels)),
                    ("pareto", worst_stray(&split.pareto, &labels)),
                    (
                        "holdout",
                        worst_stray(&split.holdout.iter().collect::<Vec<_>>(), &labels),
                    ),
                ];
                for (part, stray) in parts {
                    assert!(
                        stray <= 1.5,
                        "mix {mix}, seed {seed}: {part} strays {stray} rows"
                    );
                }
            }
        }
        // A plain shuffle of the same rows strays far more: MPQA's 36 to 4 was one such draw.
        let labels = labels(480, &[71, 29], 3);
        let strays: f64 = (0..50u64)
            .map(|seed| {
                let split = Split::new(480, 40, 40, HoldoutSize::Rest, Order::Shuffled(seed));
                worst_stray(&split.unwrap().pareto, &labels)
            })
            .sum();
        assert!(
            strays / 50.0 > 1.5,
            "mean stray of a shuffle: {}",
            strays / 50.0
        );
    }

    #[test]
    fn a_stratified_split_is_a_stable_permutation() {
        let labels = labels(60, &[3, 2, 1], 1);
        let stratified = |seed| Order::Stratified {
            labels: &labels,
            shuffle_seed: seed,
        };
        let a = Split::new(60, 6, 12, HoldoutSize::Rest, stratified(Some(7))).unwrap();
        assert_eq!(
            a,
            Split::new(60, 6, 12, HoldoutSize::Rest, stratified(Some(7))).unwrap()
        );
        let mut all: Vec<usize> = [a.minibatch.clone(), a.pareto.clone()].concat();
        all.extend(a.holdout.iter());
        all.sort_unstable();
        assert_eq!(all, (0..60).collect::<Vec<_>>());
        assert_ne!(
            a,
            Split::new(60, 6, 12, HoldoutSize::Rest, stratified(Some(8))).unwrap()
        );
        // Without a seed each label's rows keep the file's order: the first rows of each.
        let unshuffled = Split::new(60, 6, 12, HoldoutSize::Rest, stratified(None)).unwrap();
        let first_of = |label: u64| labels.iter().position(|l| *l == label).unwrap();
        assert!(unshuffled.minibatch.contains(&first_of(0)));
        // Pinned so that an accidental change of the algorithm shows up here, not in users' runs.
        assert_eq!(a.minibatch, STRATIFIED_SEED_7_MINIBATCH);
    }

    const STRATIFIED_SEED_7_MINIBATCH: [usize; 6] = [48, 33, 55, 19, 36, 24];

    #[test]
    fn a_stratified_split_of_distinct_answers_is_the_seeded_shuffle() {
        let labels: Vec<u64> = (0..50).collect();
        let order = Order::Stratified {
            labels: &labels,
            shuffle_seed: Some(7),
        };
        assert_eq!(
            Split::new(50, 4, 8, HoldoutSize::Rest, order).unwrap(),
            Split::new(50, 4, 8, HoldoutSize::Rest, Order::Shuffled(7)).unwrap()
        );
        let short = Order::Stratified {
            labels: &labels[..49],
            shuffle_seed: None,
        };
        assert_eq!(
            Split::new(50, 4, 8, HoldoutSize::Rest, short).unwrap_err(),
            SplitError::LabelCount {
                labels: 49,
                rows: 50
            }
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
