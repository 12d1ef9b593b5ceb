//! Statistics of the report: confidence intervals of a version's holdout score, and the paired
//! comparison of two versions on the same rows (paired bootstrap interval of the difference, exact
//! McNemar test for binary scores), ending in a verdict the report prints as it is. When a report
//! makes several comparisons beside the one it chose before reading the holdout, [`holm`] adjusts
//! them as a family, so that K prompts do not raise K times the false alarms.
//!
//! Everything here is a pure function of its inputs and a fixed seed, so a report re-rendered
//! next year shows the same numbers.
use serde::{Deserialize, Serialize};

/// Bootstrap resamples for every interval. 10,000 keeps the Monte-Carlo error of a 2.5 %
/// percentile to about ±0.003 on a difference of means of 0/1 scores over 30 rows, well below
/// the width of any interval the report prints (two decimals).
pub const RESAMPLES: usize = 10_000;
/// Seed of the resampling generator ("gepa" in ASCII); fixed, so that intervals are reproducible.
pub const SEED: u64 = 0x6765_7061;
/// Two-sided level of every interval and test.
pub const ALPHA: f64 = 0.05;
/// Fewest paired rows on which the report calls a difference at all. Below about 10 pairs the
/// percentile bootstrap's resampling distribution has too few distinct values and its 95 %
/// interval covers well under 95 %, so any verdict would claim more than the data support.
pub const MIN_PAIRED_ROWS: usize = 10;
/// Fewest discordant pairs (one version right, the other wrong) for the exact McNemar test. Its
/// smallest two-sided p-value with n discordant pairs is 2 · 0.5ⁿ, which is below 0.05 only from
/// n = 6 (n = 5 gives 0.0625): with fewer, no outcome could be significant, so the report says
/// the test cannot decide instead of "not significant".
pub const MIN_DISCORDANT: usize = 6;

/// A two-sided 95 % interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Interval {
    pub low: f64,
    pub high: f64,
}

impl Interval {
    pub fn contains(&self, value: f64) -> bool {
        self.low <= value && value <= self.high
    }
}

pub fn mean(values: &[f64]) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    values.iter().sum::<f64>() / values.len() as f64
}

/// Wilson score interval of a proportion (Wilson 1927), for binary scores: unlike the normal
/// approximation it stays inside [0, 1] and keeps its coverage near 0 and 1, where good prompts
/// live.
pub fn wilson(successes: usize, n: usize) -> Option<Interval> {
    if n == 0 {
        return None;
    }
    let z = 1.959_963_984_540_054_f64;
    let n = n as f64;
    let p = successes as f64 / n;
    let denominator = 1.0 + z * z / n;
    let centre = (p + z * z / (2.0 * n)) / denominator;
    let half = z * (p * (1.0 - p) / n + z * z / (4.0 * n * n)).sqrt() / denominator;
    // At 0 or n successes the bound on that side is exactly 0 or 1; the formula gets there only
    // up to rounding.
    Some(Interval {
        low: if successes == 0 {
            0.0
        } else {
            (centre - half).max(0.0)
        },
        high: if successes as f64 == n {
            1.0
        } else {
            (centre + half).min(1.0)
        },
    })
}

/// How a 95 % interval was computed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IntervalMethod {
    /// The Wilson score interval, for 0/1 scores.
    Wilson,
    /// The percentile bootstrap over rows ([`RESAMPLES`] resamples, fixed seed).
    Bootstrap,
    /// The normal approximation the bootstrap tends to: beyond [`ROW_BY_ROW_ROWS`] rows whose
    /// scores take more than [`MANY_VALUES`] values (see [`Sampling`]).
    Normal,
}

/// 95 % interval of a version's mean score and how it was computed: Wilson for binary scores,
/// otherwise the percentile bootstrap of the mean (or its normal approximation, see
/// [`Sampling`]).
pub fn mean_interval(scores: &[f64]) -> Option<(Interval, IntervalMethod)> {
    Values::of(scores).interval()
}

/// Most distinct values for which a resample is drawn as category counts rather than row by row.
const FEW_VALUES: usize = 8;
/// Beyond this many rows, up to [`MANY_VALUES`] distinct values are drawn as counts too, and
/// scores with more values take the normal approximation ([`Sampling::Normal`]): drawing row by
/// row costs rows × [`RESAMPLES`] random numbers (10¹⁰ at a million rows, about a minute per
/// interval), counts cost about one binomial per value. Below it, row by row is fast enough and
/// keeps the random stream of earlier reports.
pub const ROW_BY_ROW_ROWS: usize = 20_000;
/// Most distinct values drawn as counts beyond [`ROW_BY_ROW_ROWS`] rows: the differences of 0/1
/// scorers, `numeric`, a `json_match` over up to 31 fields and a judge's 1 to 10 fit; `f1` and
/// command scorers may not.
pub const MANY_VALUES: usize = 64;

/// Percentile bootstrap interval of the mean of `values`.
///
/// A resample's mean depends only on how many times each distinct value is drawn. Scores and
/// paired differences of 0/1 scores take very few distinct values (a difference is −1, 0 or 1),
/// so for those the counts are drawn directly, as a multinomial by successive binomials, with the
/// most common value taking the remainder: a resample then costs a few steps per value (see
/// [`SplitMix64::binomial`]), not one random draw per row. Beyond [`ROW_BY_ROW_ROWS`] rows this
/// holds for up to [`MANY_VALUES`] distinct values. The distribution is exactly that of drawing
/// rows one by one; only the random stream differs.
pub fn bootstrap_mean(values: &[f64], resamples: usize, seed: u64) -> Interval {
    let counts = Values::of(values).counts().unwrap_or_default();
    percentile_interval(&bootstrap_means(
        values,
        values.len(),
        counts,
        resamples,
        seed,
    ))
}

/// The values of a mean (a version's row scores, or the paired differences of two versions),
/// added one at a time in memory that does not grow with their number: every value while there
/// are at most [`ROW_BY_ROW_ROWS`] (a resample may then draw them row by row), the distinct
/// values with their counts while there are at most [`MANY_VALUES`], and the sums the normal
/// approximation needs. What [`Sampling`] draws from them is what it would draw from the values
/// themselves, so a report of a million rows holds a few kilobytes per mean.
#[derive(Debug, Clone)]
pub struct Values {
    n: usize,
    /// Every value, in the order added, while there are at most [`ROW_BY_ROW_ROWS`]; none
    /// beyond.
    kept: Vec<f64>,
    /// The distinct values in the order first seen, with how many times each was added; `None`
    /// once there are more than [`MANY_VALUES`].
    distinct: Option<Vec<(f64, usize)>>,
    /// The sum, added in order, as [`mean`] adds.
    sum: f64,
    /// Welford's running mean and sum of squared deviations from it.
    running_mean: f64,
    squares: f64,
    /// Whether every value is 0 or 1, and how many are 1.
    binary: bool,
    ones: usize,
}

impl Default for Values {
    fn default() -> Self {
        Self {
            n: 0,
            kept: Vec::new(),
            distinct: Some(Vec::new()),
            // What `Iterator::sum` starts from, so that a sum of zeros is the same zero.
            sum: -0.0,
            running_mean: 0.0,
            squares: 0.0,
            binary: true,
            ones: 0,
        }
    }
}

impl Values {
    pub fn of(values: &[f64]) -> Self {
        let mut all = Self::default();
        for &value in values {
            all.push(value);
        }
        all
    }

    pub fn push(&mut self, value: f64) {
        self.n += 1;
        if self.n <= ROW_BY_ROW_ROWS {
            self.kept.push(value);
        } else if !self.kept.is_empty() {
            self.kept = Vec::new();
        }
        if let Some(distinct) = &mut self.distinct {
            if let Some((_, count)) = distinct.iter_mut().find(|(v, _)| *v == value) {
                *count += 1;
            } else if distinct.len() < MANY_VALUES {
                distinct.push((value, 1));
            } else {
                self.distinct = None;
            }
        }
        self.sum += value;
        let delta = value - self.running_mean;
        self.running_mean += delta / self.n as f64;
        self.squares += delta * (value - self.running_mean);
        if value == 1.0 {
            self.ones += 1;
        } else if value != 0.0 {
            self.binary = false;
        }
    }

    pub fn len(&self) -> usize {
        self.n
    }

    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// The mean; NaN without values.
    pub fn mean(&self) -> f64 {
        if self.n == 0 {
            return f64::NAN;
        }
        self.sum / self.n as f64
    }

    /// 95 % interval of the mean and how it was computed: Wilson for binary values, otherwise
    /// the percentile bootstrap (or its normal approximation, see [`Sampling`]). None without
    /// values.
    pub fn interval(&self) -> Option<(Interval, IntervalMethod)> {
        if self.n == 0 {
            return None;
        }
        if self.binary {
            return wilson(self.ones, self.n).map(|i| (i, IntervalMethod::Wilson));
        }
        let sampling = self.sampling(RESAMPLES, SEED);
        Some((sampling.interval(), sampling.method()))
    }

    /// The distinct values and how many times each was added, most common last (it takes
    /// whatever the binomials leave), when a resample is drawn as counts: up to [`FEW_VALUES`]
    /// values, or [`MANY_VALUES`] beyond [`ROW_BY_ROW_ROWS`] values. `None`: row by row.
    fn counts(&self) -> Option<Vec<(f64, usize)>> {
        let most = if self.n > ROW_BY_ROW_ROWS {
            MANY_VALUES
        } else {
            FEW_VALUES
        };
        let mut distinct = self.distinct.clone().filter(|d| d.len() <= most)?;
        // Stable: values with equal counts stay in the order first seen.
        distinct.sort_by_key(|&(_, count)| count);
        Some(distinct)
    }

    /// The distribution of the mean over resampled values: the percentile bootstrap, or beyond
    /// [`ROW_BY_ROW_ROWS`] values with more than [`MANY_VALUES`] distinct ones its normal
    /// approximation.
    fn sampling(&self, resamples: usize, seed: u64) -> Sampling {
        match self.counts() {
            None if self.n > ROW_BY_ROW_ROWS => Sampling::Normal {
                mean: self.mean(),
                standard_error: (self.squares / self.n as f64 / self.n as f64).sqrt(),
            },
            counts => Sampling::Resampled(bootstrap_means(
                &self.kept,
                self.n,
                counts.unwrap_or_default(),
                resamples,
                seed,
            )),
        }
    }
}

/// The distribution of a mean over rows drawn again with replacement, from which an interval
/// and a p-value are read.
#[derive(Debug, Clone, PartialEq)]
enum Sampling {
    /// The resampled means, sorted (percentile bootstrap).
    Resampled(Vec<f64>),
    /// Beyond [`ROW_BY_ROW_ROWS`] rows whose values do not fit [`MANY_VALUES`]: the normal law
    /// those resampled means follow ever more closely as rows grow (their standard deviation is
    /// the values' own, over n, divided by √n). Its error in the 95 % bounds is about
    /// skewness / (6√n) of the interval's half-width, below 0.1 % of it at 20,000 rows, and
    /// smaller than the Monte-Carlo error of [`RESAMPLES`] resamples.
    Normal { mean: f64, standard_error: f64 },
}

/// z such that a standard normal variable exceeds it with probability [`ALPHA`] / 2.
const Z_95: f64 = 1.959_963_984_540_054;

impl Sampling {
    fn method(&self) -> IntervalMethod {
        match self {
            Sampling::Resampled(_) => IntervalMethod::Bootstrap,
            Sampling::Normal { .. } => IntervalMethod::Normal,
        }
    }

    fn interval(&self) -> Interval {
        match *self {
            Sampling::Resampled(ref sorted) => percentile_interval(sorted),
            Sampling::Normal {
                mean,
                standard_error,
            } => Interval {
                low: mean - Z_95 * standard_error,
                high: mean + Z_95 * standard_error,
            },
        }
    }

    /// Two-sided p-value of "the mean is 0": [`bootstrap_p_value`], or twice the normal tail
    /// beyond |mean| / standard error.
    fn p_value(&self) -> f64 {
        match *self {
            Sampling::Resampled(ref sorted) => bootstrap_p_value(sorted),
            Sampling::Normal {
                mean,
                standard_error,
            } => {
                if standard_error == 0.0 {
                    return if mean == 0.0 { 1.0 } else { 0.0 };
                }
                let z = (mean / standard_error).abs();
                libm::erfc(z / std::f64::consts::SQRT_2).min(1.0)
            }
        }
    }
}

/// The two-sided 95 % percentile interval of sorted resampled means.
fn percentile_interval(sorted: &[f64]) -> Interval {
    Interval {
        low: quantile(sorted, ALPHA / 2.0),
        high: quantile(sorted, 1.0 - ALPHA / 2.0),
    }
}

/// The resampled means of [`bootstrap_mean`] over `n` values, sorted: drawn as counts of
/// `distinct` (see [`Values::counts`]), or row by row from `values` (all `n` of them) when it is
/// empty.
fn bootstrap_means(
    values: &[f64],
    n: usize,
    distinct: Vec<(f64, usize)>,
    resamples: usize,
    seed: u64,
) -> Vec<f64> {
    debug_assert!(!distinct.is_empty() || values.len() == n);
    let mut rng = SplitMix64(seed);
    let mut means: Vec<f64> = (0..resamples)
        .map(|_| {
            if distinct.is_empty() {
                let mut sum = 0.0;
                for _ in 0..n {
                    sum += values[rng.below(n as u64) as usize];
                }
                return sum / n as f64;
            }
            let mut left = n as u64;
            let mut left_weight = n;
            let mut sum = 0.0;
            for (i, &(value, count)) in distinct.iter().enumerate() {
                let drawn = if i + 1 == distinct.len() {
                    left
                } else {
                    rng.binomial(left, count as f64 / left_weight as f64)
                };
                sum += value * drawn as f64;
                left -= drawn;
                left_weight -= count;
            }
            sum / n as f64
        })
        .collect();
    means.sort_unstable_by(f64::total_cmp);
    means
}

/// Paired bootstrap of the difference `b - a`: rows are resampled as pairs, so the interval keeps
/// the correlation between two prompts answering the same rows (which makes it much narrower than
/// comparing two independent intervals).
pub fn paired_bootstrap(a: &[f64], b: &[f64], resamples: usize, seed: u64) -> Interval {
    paired_differences(a, b, resamples, seed).interval()
}

/// The distribution of the mean difference `b - a` over resampled pairs.
fn paired_differences(a: &[f64], b: &[f64], resamples: usize, seed: u64) -> Sampling {
    let mut differences = Values::default();
    for (a, b) in a.iter().zip(b) {
        differences.push(b - a);
    }
    differences.sampling(resamples, seed)
}

/// Two-sided p-value of "no difference" from sorted resampled mean differences: twice the share
/// of resamples on the far side of 0 (those at 0 count on both sides), with the usual +1 that
/// keeps a Monte-Carlo p-value valid (Davison and Hinkley 1997, §4.2), capped at 1. It is the
/// inversion of the percentile interval: below [`ALPHA`] just when the 95 % interval leaves 0
/// out, up to one resample; the smallest it can be is 2 / (resamples + 1).
fn bootstrap_p_value(sorted: &[f64]) -> f64 {
    let at_or_below = sorted.partition_point(|d| *d <= 0.0);
    let at_or_above = sorted.len() - sorted.partition_point(|d| *d < 0.0);
    let tail = at_or_below.min(at_or_above);
    (2.0 * (tail + 1) as f64 / (sorted.len() + 1) as f64).min(1.0)
}

/// Sample quantile by linear interpolation between order statistics (Hyndman and Fan type 7, the
/// default of R and NumPy), on sorted values.
fn quantile(sorted: &[f64], q: f64) -> f64 {
    let position = q * (sorted.len() - 1) as f64;
    let below = position.floor() as usize;
    let above = position.ceil() as usize;
    let fraction = position - below as f64;
    sorted[below] + (sorted[above] - sorted[below]) * fraction
}

/// Exact (conditional) McNemar test on binary paired scores.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct McNemar {
    /// Rows that `a` got right and `b` wrong.
    pub only_a: usize,
    /// Rows that `b` got right and `a` wrong.
    pub only_b: usize,
    /// Two-sided p-value: twice the binomial(n, ½) tail of the smaller discordant count, capped
    /// at 1.
    pub p_value: f64,
}

pub fn mcnemar_exact(only_a: usize, only_b: usize) -> McNemar {
    let n = only_a + only_b;
    let k = only_a.min(only_b);
    // ln P(X = i) for X ~ Binomial(n, ½), stepped up from i = 0; summed relative to the largest
    // term (the last, since k ≤ n/2) so that thousands of discordant pairs do not underflow.
    let mut log_terms = Vec::with_capacity(k + 1);
    let mut log_p = n as f64 * 0.5f64.ln();
    for i in 0..=k {
        log_terms.push(log_p);
        log_p += ((n - i) as f64).ln() - ((i + 1) as f64).ln();
    }
    let largest = log_terms.last().copied().unwrap_or(0.0);
    let tail = largest.exp() * log_terms.iter().map(|t| (t - largest).exp()).sum::<f64>();
    McNemar {
        only_a,
        only_b,
        p_value: (2.0 * tail).min(1.0),
    }
}

/// What the report may say about `b` against `a`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// `b` scores higher, and the test says the difference is unlikely to be chance.
    Better,
    Worse,
    NotSignificant,
    /// Fewer paired rows than [`MIN_PAIRED_ROWS`]: no verdict.
    TooFewRows,
    /// Binary scores with fewer discordant pairs than [`MIN_DISCORDANT`]: no verdict.
    TooFewDiscordant,
}

impl Verdict {
    pub fn text(self) -> &'static str {
        match self {
            Self::Better => "better (significant)",
            Self::Worse => "worse (significant)",
            Self::NotSignificant => "not significant",
            Self::TooFewRows => "too few rows to call a difference",
            Self::TooFewDiscordant => "too few rows that differ to call a difference",
        }
    }
}

/// How a comparison's verdict accounts for the other comparisons made beside it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(tag = "method", rename_all = "snake_case")]
pub enum Adjustment {
    /// Tested alone at [`ALPHA`]: the only comparison made, or the headline one, chosen before
    /// the holdout was read (the best version by Pareto score against the seed).
    None,
    /// One of `family` comparisons tested together, by Holm's step-down method (Holm 1979): the
    /// chance of any false "significant" among them stays at most [`ALPHA`].
    Holm {
        family: usize,
        /// Holm's adjusted p-value, the one the verdict compares with [`ALPHA`].
        adjusted_p_value: f64,
    },
}

/// The test that decides a paired comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PairedTest {
    /// Binary scores: the exact McNemar test.
    McnemarExact,
    /// Other scores: the paired bootstrap's p-value.
    PairedBootstrap,
    /// Other scores beyond [`ROW_BY_ROW_ROWS`] rows whose differences take more than
    /// [`MANY_VALUES`] values: the normal approximation of the paired bootstrap (a z-test).
    PairedNormal,
}

impl PairedTest {
    pub fn text(self) -> &'static str {
        match self {
            Self::McnemarExact => "exact McNemar",
            Self::PairedBootstrap => "paired bootstrap",
            Self::PairedNormal => "paired normal approximation",
        }
    }
}

/// Two versions compared on the rows both answered.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PairedComparison {
    pub rows: usize,
    pub mean_a: f64,
    pub mean_b: f64,
    /// `mean_b - mean_a`.
    pub difference: f64,
    /// Paired bootstrap 95 % interval of the difference; none without rows.
    pub interval: Option<Interval>,
    /// Only for binary scores.
    pub mcnemar: Option<McNemar>,
    /// Which test decided.
    pub test: PairedTest,
    /// Two-sided p-value of that test (the McNemar one, [`bootstrap_p_value`], or the normal
    /// approximation's); none when there are too few rows to test (the verdict says which).
    pub p_value: Option<f64>,
    /// [`Adjustment::None`] from [`compare_paired`]; [`holm`] sets the family's.
    pub adjustment: Adjustment,
    pub verdict: Verdict,
}

impl PairedComparison {
    /// The p-value the verdict rests on: Holm's adjusted one in a family, else the test's own.
    pub fn deciding_p_value(&self) -> Option<f64> {
        match self.adjustment {
            Adjustment::None => self.p_value,
            Adjustment::Holm {
                adjusted_p_value, ..
            } => Some(adjusted_p_value),
        }
    }

    /// The verdict for a p-value: the direction of the difference below [`ALPHA`], else not
    /// significant. The one place a p-value becomes a verdict.
    fn decide(&mut self) {
        if let Some(p) = self.deciding_p_value() {
            self.verdict = if p >= ALPHA {
                Verdict::NotSignificant
            } else if self.difference > 0.0 {
                Verdict::Better
            } else {
                Verdict::Worse
            };
        }
    }
}

/// Adjusts a family of comparisons made together (every prompt against the first, every variant
/// and model beside the headline) by Holm's step-down method and decides each verdict on its
/// adjusted p-value. Comparisons with too few rows to test are not tested, so they neither count
/// in the family nor change. A family of one is left alone: there is nothing to adjust.
pub fn holm(family: &mut [&mut PairedComparison]) {
    let mut tested: Vec<&mut PairedComparison> = family
        .iter_mut()
        .filter(|c| c.p_value.is_some())
        .map(|c| &mut **c)
        .collect();
    let m = tested.len();
    if m < 2 {
        return;
    }
    tested.sort_by(|a, b| {
        a.p_value
            .unwrap_or(1.0)
            .total_cmp(&b.p_value.unwrap_or(1.0))
    });
    // The i-th smallest p (from 0) is multiplied by m - i; each adjusted value is at least the
    // one before it, so the rejections stop at the first that is not below ALPHA.
    let mut running = 0.0f64;
    for (i, comparison) in tested.into_iter().enumerate() {
        let p = comparison.p_value.unwrap_or(1.0);
        running = running.max(((m - i) as f64 * p).min(1.0));
        comparison.adjustment = Adjustment::Holm {
            family: m,
            adjusted_p_value: running,
        };
        comparison.decide();
    }
}

/// Compares `b` against `a` on paired scores (`a[i]` and `b[i]` are the same row): see
/// [`Pairs::compare`].
pub fn compare_paired(a: &[f64], b: &[f64]) -> PairedComparison {
    let mut pairs = Pairs::default();
    for (&a, &b) in a.iter().zip(b) {
        pairs.push(a, b);
    }
    pairs.compare()
}

/// Two versions' scores on the rows both answered, added a row at a time in memory that does not
/// grow with the rows: what [`Pairs::compare`] needs.
#[derive(Debug, Clone)]
pub struct Pairs {
    rows: usize,
    /// Sums added in row order, as [`mean`] adds.
    sum_a: f64,
    sum_b: f64,
    /// Whether every score of both is 0 or 1.
    binary: bool,
    /// Rows where `a` scored higher, and where `b` did.
    only_a: usize,
    only_b: usize,
    /// `b - a`, row by row.
    differences: Values,
}

impl Default for Pairs {
    fn default() -> Self {
        Self {
            rows: 0,
            sum_a: -0.0,
            sum_b: -0.0,
            binary: true,
            only_a: 0,
            only_b: 0,
            differences: Values::default(),
        }
    }
}

impl Pairs {
    /// Adds one row: `a`'s score and `b`'s.
    pub fn push(&mut self, a: f64, b: f64) {
        self.rows += 1;
        self.sum_a += a;
        self.sum_b += b;
        let binary = |s: f64| s == 0.0 || s == 1.0;
        self.binary &= binary(a) && binary(b);
        if a > b {
            self.only_a += 1;
        } else if b > a {
            self.only_b += 1;
        }
        self.differences.push(b - a);
    }

    /// Compares `b` against `a`. Binary scores are decided by the exact McNemar test; other
    /// scores by whether the paired bootstrap interval excludes 0.
    pub fn compare(&self) -> PairedComparison {
        let rows = self.rows;
        let mean = |sum: f64| {
            if rows == 0 {
                f64::NAN
            } else {
                sum / rows as f64
            }
        };
        let (mean_a, mean_b) = (mean(self.sum_a), mean(self.sum_b));
        let difference = mean_b - mean_a;
        let sampling = (rows > 0).then(|| self.differences.sampling(RESAMPLES, SEED));
        let interval = sampling.as_ref().map(Sampling::interval);
        let binary = self.binary;
        let mcnemar = binary.then(|| mcnemar_exact(self.only_a, self.only_b));
        let (verdict, p_value) = if rows < MIN_PAIRED_ROWS {
            (Verdict::TooFewRows, None)
        } else if let Some(test) = mcnemar {
            if test.only_a + test.only_b < MIN_DISCORDANT {
                (Verdict::TooFewDiscordant, None)
            } else {
                (Verdict::NotSignificant, Some(test.p_value))
            }
        } else {
            (
                Verdict::NotSignificant,
                sampling.as_ref().map(Sampling::p_value),
            )
        };
        let test = match &sampling {
            _ if binary => PairedTest::McnemarExact,
            Some(Sampling::Normal { .. }) => PairedTest::PairedNormal,
            _ => PairedTest::PairedBootstrap,
        };
        let mut comparison = PairedComparison {
            rows,
            mean_a,
            mean_b,
            difference,
            interval,
            mcnemar,
            test,
            p_value,
            adjustment: Adjustment::None,
            verdict,
        };
        comparison.decide();
        comparison
    }
}

/// SplitMix64 (Steele, Lea and Flood 2014): written out rather than taken from `rand` so that a
/// seed gives the same resamples on every version of every dependency, and fast enough in debug
/// builds to resample 20,000 rows thousands of times.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1), with 53 random bits.
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Binomial(trials, p) by inversion of the distribution function (Kachitvichyanukul and
    /// Schmeiser's BINV), on the smaller of p and 1 − p; one uniform and about trials · p steps.
    /// When (1 − p)^trials would underflow (trials · p is then in the hundreds or more), by
    /// transformed rejection instead ([`Self::btrs`]), a few uniforms whatever the trials.
    fn binomial(&mut self, trials: u64, p: f64) -> u64 {
        if trials == 0 || p <= 0.0 {
            return 0;
        }
        if p >= 1.0 {
            return trials;
        }
        if p > 0.5 {
            return trials - self.binomial(trials, 1.0 - p);
        }
        let q = 1.0 - p;
        let mut term = q.powf(trials as f64);
        if term < 1e-280 {
            return self.btrs(trials, p);
        }
        let ratio = p / q;
        let mut u = self.unit();
        let mut x = 0;
        while u > term && x < trials {
            u -= term;
            term *= ratio * (trials - x) as f64 / (x + 1) as f64;
            x += 1;
        }
        x
    }

    /// Binomial(trials, p) for p ≤ ½ and trials · p ≥ 10 by transformed rejection with squeeze
    /// (Hörmann 1993, "The generation of binomial random variates", algorithm BTRS): exact, and
    /// about 1.2 pairs of uniforms a draw, most of them accepted by the squeeze without a
    /// logarithm.
    fn btrs(&mut self, trials: u64, p: f64) -> u64 {
        debug_assert!(p <= 0.5 && trials as f64 * p >= 10.0);
        let n = trials as f64;
        let spq = (n * p * (1.0 - p)).sqrt();
        let b = 1.15 + 2.53 * spq;
        let a = -0.0873 + 0.0248 * b + 0.01 * p;
        let c = n * p + 0.5;
        let v_r = 0.92 - 4.2 / b;
        let alpha = (2.83 + 5.1 / b) * spq;
        let log_odds = (p / (1.0 - p)).ln();
        let mode = ((n + 1.0) * p).floor();
        let h = ln_factorial(mode) + ln_factorial(n - mode);
        loop {
            let u = self.unit() - 0.5;
            let v = self.unit();
            let us = 0.5 - u.abs();
            let k = ((2.0 * a / us + b) * u + c).floor();
            if k < 0.0 || k > n {
                continue;
            }
            if us >= 0.07 && v <= v_r {
                return k as u64;
            }
            // Accept when v, on the hat's scale, is under the density relative to the mode's.
            let v = (v * alpha / (a / (us * us) + b)).ln();
            if v <= h - ln_factorial(k) - ln_factorial(n - k) + (k - mode) * log_odds {
                return k as u64;
            }
        }
    }

    /// Uniform in `0..n` without modulo bias (Lemire's multiply-shift with rejection).
    fn below(&mut self, n: u64) -> u64 {
        let threshold = n.wrapping_neg() % n;
        loop {
            let product = u128::from(self.next()) * u128::from(n);
            if (product as u64) >= threshold {
                return (product >> 64) as u64;
            }
        }
    }
}

/// ln(x!) for a whole number x ≥ 0: summed below 16, else Stirling's series to the x⁻⁵ term,
/// whose error there is below 10⁻¹¹.
fn ln_factorial(x: f64) -> f64 {
    if x < 16.0 {
        return (2..=x as u64).map(|i| (i as f64).ln()).sum();
    }
    let n = x + 1.0;
    let n2 = n * n;
    let series = (1.0 / 12.0 - (1.0 / 360.0 - 1.0 / (1260.0 * n2)) / n2) / n;
    (n - 0.5) * n.ln() - n + 0.5 * std::f64::consts::TAU.ln() + series
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64, tolerance: f64) -> bool {
        (a - b).abs() <= tolerance
    }

    /// A binary comparison with `only_a` rows only `a` got right and `only_b` only `b`, among
    /// 40 rows.
    fn binary(only_a: usize, only_b: usize) -> PairedComparison {
        let mut a = vec![1.0; 40];
        let mut b = vec![1.0; 40];
        a[..only_b].fill(0.0);
        b[only_b..only_b + only_a].fill(0.0);
        compare_paired(&a, &b)
    }

    /// Holm (1979) on the p-values 0.01, 0.04, 0.03 and 0.005: sorted and multiplied by 4, 3, 2
    /// and 1 they are 0.02, 0.03, 0.06 and 0.04, and each adjusted value is at least the one
    /// before it: 0.02, 0.03, 0.06, 0.06 (as R's `p.adjust(p, "holm")` gives).
    #[test]
    fn holm_matches_the_textbook_step_down() {
        let mut family: Vec<PairedComparison> = [0.01, 0.04, 0.03, 0.005]
            .into_iter()
            .map(|p| PairedComparison {
                p_value: Some(p),
                difference: -0.1,
                ..binary(9, 1)
            })
            .collect();
        holm(&mut family.iter_mut().collect::<Vec<_>>());
        let adjusted: Vec<f64> = family
            .iter()
            .map(|c| c.deciding_p_value().unwrap())
            .collect();
        for (seen, expected) in adjusted.iter().zip([0.03, 0.06, 0.06, 0.02]) {
            assert!(close(*seen, expected, 1e-12), "{adjusted:?}");
        }
        let verdicts: Vec<Verdict> = family.iter().map(|c| c.verdict).collect();
        assert_eq!(
            verdicts,
            [
                Verdict::Worse,
                Verdict::NotSignificant,
                Verdict::NotSignificant,
                Verdict::Worse
            ]
        );
        assert!(
            family
                .iter()
                .all(|c| matches!(c.adjustment, Adjustment::Holm { family: 4, .. }))
        );
    }

    #[test]
    fn a_prompt_worse_alone_is_not_called_worse_among_two_when_holm_says_no() {
        // 9 discordant rows, 8 against b: exact p = 2 · 10/512 = 0.039, significant alone.
        let alone = binary(8, 1);
        assert!(close(alone.p_value.unwrap(), 20.0 / 512.0, 1e-12));
        assert_eq!(alone.verdict, Verdict::Worse);
        // Beside a second prompt that ties, Holm doubles the smaller p-value: 0.078.
        let (mut worse, mut tie) = (alone.clone(), binary(3, 3));
        holm(&mut [&mut worse, &mut tie]);
        assert_eq!(worse.verdict, Verdict::NotSignificant, "{worse:?}");
        assert!(close(
            worse.deciding_p_value().unwrap(),
            40.0 / 512.0,
            1e-12
        ));
        assert_eq!(worse.p_value, alone.p_value, "the test's own p is kept");
        // A clear loss stays a loss in the family.
        let (mut clear, mut tie) = (binary(20, 1), binary(3, 3));
        holm(&mut [&mut clear, &mut tie]);
        assert_eq!(clear.verdict, Verdict::Worse);
    }

    #[test]
    fn holm_leaves_a_family_of_one_and_untestable_comparisons_alone() {
        let mut one = binary(8, 1);
        holm(&mut [&mut one]);
        assert_eq!(one.adjustment, Adjustment::None);
        assert_eq!(one.verdict, Verdict::Worse);
        // Too few discordant rows to test: not in the family, so the other stands alone.
        let (mut few, mut worse) = (binary(2, 1), binary(8, 1));
        assert_eq!(few.p_value, None);
        holm(&mut [&mut few, &mut worse]);
        assert_eq!(few.verdict, Verdict::TooFewDiscordant);
        assert_eq!(few.adjustment, Adjustment::None);
        assert_eq!(worse.adjustment, Adjustment::None);
        assert_eq!(worse.verdict, Verdict::Worse);
    }

    #[test]
    fn the_bootstrap_p_value_agrees_with_its_interval() {
        // Scores in [0, 1] that are not binary, so the paired bootstrap decides.
        let a: Vec<f64> = (0..60).map(|i| f64::from(i % 5) / 4.0).collect();
        for shift in [0.0, 0.02, 0.05, 0.08, 0.15, -0.1] {
            let b: Vec<f64> = a
                .iter()
                .enumerate()
                .map(|(i, x)| (x + shift + if i % 3 == 0 { 0.1 } else { -0.05 }).clamp(0.0, 1.0))
                .collect();
            let c = compare_paired(&a, &b);
            let interval = c.interval.unwrap();
            let p = c.p_value.unwrap();
            assert!(c.mcnemar.is_none());
            assert_eq!(
                !interval.contains(0.0),
                p < ALPHA,
                "shift {shift}: interval {interval:?}, p {p}"
            );
        }
        // No difference at all: p is 1.
        assert_eq!(compare_paired(&a, &a).p_value, Some(1.0));
    }

    /// Fagerland, Lydersen and Laake, "The McNemar test for binary matched-pairs data: mid-p and
    /// asymptotic are better than exact conditional", BMC Medical Research Methodology 13:91
    /// (2013), Table 1: airway hyper-responsiveness before and after stem cell transplantation in
    /// 21 children (Bentur et al. 2009). Discordant pairs 1 and 7; the paper's exact conditional
    /// p-value is 0.070 (= 2 · 9/256 = 0.0703125), its mid-p 0.039.
    #[test]
    fn mcnemar_matches_the_published_example() {
        let test = mcnemar_exact(1, 7);
        assert!(close(test.p_value, 18.0 / 256.0, 1e-12), "{test:?}");
        assert_eq!(format!("{:.3}", test.p_value), "0.070");
        let mid_p = test.p_value - 8.0 / 256.0;
        assert_eq!(format!("{mid_p:.3}"), "0.039");
        assert_eq!(mcnemar_exact(7, 1).p_value, test.p_value, "symmetric");
    }

    /// Agresti, Categorical Data Analysis (2nd ed., 2002), Table 10.1: approval of the President
    /// in two surveys, discordant pairs 150 and 86. The exact p-value was computed independently
    /// with Python's `fractions` and `math.comb` (2 · Σ_{i≤86} C(236, i) / 2^236):
    /// 3.7159e-05, which agrees with the book's chi-squared of 17.36 (p ≈ 3.1e-05) in magnitude.
    #[test]
    fn mcnemar_matches_an_independent_exact_computation() {
        let test = mcnemar_exact(150, 86);
        assert!(
            close(test.p_value, 3.715_9e-5, 5e-9),
            "p = {:e}",
            test.p_value
        );
        assert_eq!(mcnemar_exact(0, 0).p_value, 1.0);
        assert_eq!(mcnemar_exact(3, 3).p_value, 1.0);
        // No underflow with many discordant pairs.
        let big = mcnemar_exact(2000, 2100);
        assert!(big.p_value > 0.0 && big.p_value < 1.0, "{big:?}");
    }

    #[test]
    fn fewer_than_six_discordant_pairs_can_never_be_significant() {
        assert!(mcnemar_exact(0, 5).p_value > ALPHA);
        assert!(mcnemar_exact(0, MIN_DISCORDANT).p_value < ALPHA);
    }

    #[test]
    fn paired_bootstrap_brackets_the_known_mean_difference() {
        // 40 rows whose differences have mean exactly 0.25 and standard deviation 0.5 / √(40/39)
        // (values −0.25 and 0.75 in equal numbers); the normal-theory interval is
        // 0.25 ± 1.96 · 0.5 / √40 = [0.095, 0.405], computed by hand.
        let a: Vec<f64> = (0..40)
            .map(|i| if i % 2 == 0 { 0.25 } else { 0.0 })
            .collect();
        let b: Vec<f64> = (0..40)
            .map(|i| if i % 2 == 0 { 0.0 } else { 0.75 })
            .collect();
        let interval = paired_bootstrap(&a, &b, RESAMPLES, SEED);
        assert!(interval.contains(0.25), "{interval:?}");
        assert!(close(interval.low, 0.095, 0.03), "{interval:?}");
        assert!(close(interval.high, 0.405, 0.03), "{interval:?}");
        // The same seed gives the same interval; another seed a nearby one.
        assert_eq!(interval, paired_bootstrap(&a, &b, RESAMPLES, SEED));
        let other = paired_bootstrap(&a, &b, RESAMPLES, 1);
        assert!(close(other.low, interval.low, 0.02) && close(other.high, interval.high, 0.02));
    }

    #[test]
    fn wilson_matches_the_textbook_values() {
        // Newcombe (1998), Statistics in Medicine 17:857, Table I, example (a): 81 of 263,
        // Wilson interval 0.2553 to 0.3662.
        let interval = wilson(81, 263).unwrap();
        assert!(close(interval.low, 0.2553, 5e-5), "{interval:?}");
        assert!(close(interval.high, 0.3662, 5e-5), "{interval:?}");
        let all = wilson(30, 30).unwrap();
        assert_eq!(all.high, 1.0);
        assert!(all.low > 0.88 && all.low < 0.89, "{all:?}");
        assert_eq!(wilson(0, 0), None);
    }

    #[test]
    fn verdicts_refuse_small_samples_and_say_not_significant() {
        let a = vec![0.0; 8];
        let b = vec![1.0; 8];
        assert_eq!(compare_paired(&a, &b).verdict, Verdict::TooFewRows);

        // 30 rows, 4 discordant pairs all for b: the test cannot decide.
        let a: Vec<f64> = (0..30).map(|i| f64::from(i >= 4 && i % 2 == 0)).collect();
        let mut b = a.clone();
        b[..4].fill(1.0);
        let c = compare_paired(&a, &b);
        assert_eq!(c.verdict, Verdict::TooFewDiscordant, "{c:?}");

        // 30 rows, 10 pairs for b and 0 for a: p = 2/1024.
        let a = vec![0.0; 30];
        let mut b = vec![0.0; 30];
        b[..10].fill(1.0);
        let c = compare_paired(&a, &b);
        assert_eq!(c.verdict, Verdict::Better);
        assert_eq!(c.test, PairedTest::McnemarExact);
        assert!(close(c.mcnemar.unwrap().p_value, 2.0 / 1024.0, 1e-12));
        assert!(close(c.difference, 10.0 / 30.0, 1e-12));

        // 4 for b, 3 for a: not significant.
        let mut a = vec![0.0; 30];
        let mut b = vec![0.0; 30];
        b[..4].fill(1.0);
        a[4..7].fill(1.0);
        assert_eq!(compare_paired(&a, &b).verdict, Verdict::NotSignificant);
        assert_eq!(compare_paired(&b, &a).verdict, Verdict::NotSignificant);

        // Partial credit: decided by the bootstrap interval.
        let a: Vec<f64> = (0..30).map(|i| 0.4 + f64::from(i % 3) * 0.1).collect();
        let b: Vec<f64> = a.iter().map(|x| x - 0.2).collect();
        let c = compare_paired(&a, &b);
        assert_eq!(
            (c.test, c.verdict),
            (PairedTest::PairedBootstrap, Verdict::Worse)
        );
    }

    /// The draws' mean is within 4 standard errors of trials · p, and their variance within
    /// `relative` of trials · p · (1 − p).
    fn assert_binomial_moments(draws: &[u64], trials: u64, p: f64, relative: f64) {
        let draws: Vec<f64> = draws.iter().map(|&d| d as f64).collect();
        let m = mean(&draws);
        let var = draws.iter().map(|d| (d - m).powi(2)).sum::<f64>() / draws.len() as f64;
        let (em, ev) = (trials as f64 * p, trials as f64 * p * (1.0 - p));
        assert!(
            (m - em).abs() < 4.0 * (ev / draws.len() as f64).sqrt(),
            "{trials} {p}: mean {m} vs {em}"
        );
        assert!(
            (var / ev - 1.0).abs() < relative,
            "{trials} {p}: variance {var} vs {ev}"
        );
    }

    #[test]
    fn binomial_draws_have_the_right_mean_and_variance() {
        let mut rng = SplitMix64(3);
        for (trials, p) in [(100u64, 0.13), (100, 0.87), (30, 0.5), (600, 0.4)] {
            let draws: Vec<u64> = (0..20_000).map(|_| rng.binomial(trials, p)).collect();
            assert_binomial_moments(&draws, trials, p, 0.05);
        }
        // (1 − p)^trials underflows here: transformed rejection.
        let draws: Vec<f64> = (0..300).map(|_| rng.binomial(3000, 0.5) as f64).collect();
        assert!((mean(&draws) - 1500.0).abs() < 4.0 * (750.0f64 / 300.0).sqrt());
        assert_eq!(rng.binomial(0, 0.3), 0);
        assert_eq!(rng.binomial(7, 1.0), 7);
    }

    #[test]
    fn ln_factorial_matches_the_sum_of_logarithms() {
        for x in [0u64, 1, 2, 15, 16, 17, 40, 1000, 100_000] {
            let exact: f64 = (2..=x).map(|i| (i as f64).ln()).sum();
            let got = ln_factorial(x as f64);
            assert!(
                (got - exact).abs() <= 1e-12 * exact.max(1.0),
                "{x}: {got} vs {exact}"
            );
        }
    }

    /// Pearson's chi-square of `draws` against Binomial(trials, p), over the values expected at
    /// least 20 times (the rest pooled into one cell), and the number of cells.
    fn chi_square(draws: &[u64], trials: u64, p: f64) -> (f64, usize) {
        let n = trials as f64;
        let pmf = |k: u64| {
            let k = k as f64;
            (ln_factorial(n) - ln_factorial(k) - ln_factorial(n - k)
                + k * p.ln()
                + (n - k) * (1.0 - p).ln())
            .exp()
        };
        let total = draws.len() as f64;
        let cells: Vec<u64> = (0..=trials).filter(|&k| pmf(k) * total >= 20.0).collect();
        let mut observed = vec![0usize; cells.len() + 1];
        for draw in draws {
            let cell = cells.binary_search(draw).unwrap_or(cells.len());
            observed[cell] += 1;
        }
        let mut expected: Vec<f64> = cells.iter().map(|&k| pmf(k) * total).collect();
        expected.push(total - expected.iter().sum::<f64>());
        let statistic = observed
            .iter()
            .zip(&expected)
            .filter(|(_, e)| **e > 0.0)
            .map(|(&o, &e)| (o as f64 - e).powi(2) / e)
            .sum();
        (statistic, cells.len() + 1)
    }

    #[test]
    fn transformed_rejection_draws_follow_the_binomial_distribution() {
        let mut rng = SplitMix64(11);
        for (trials, p) in [(60u64, 0.25), (1000, 0.5), (1000, 0.3), (1_000_000, 0.02)] {
            let draws: Vec<u64> = (0..100_000).map(|_| rng.btrs(trials, p)).collect();
            assert_binomial_moments(&draws, trials, p, 0.02);
            let (statistic, cells) = chi_square(&draws, trials, p);
            // The 0.999 quantile of chi-square with d degrees of freedom is below
            // d + 3.1·√(2d) + 10 for every d here (Wilson–Hilferty).
            let df = (cells - 1) as f64;
            assert!(
                statistic < df + 3.1 * (2.0 * df).sqrt() + 10.0,
                "{trials} {p}: chi-square {statistic:.1} on {df} degrees of freedom"
            );
        }
        // A million trials as a resample of a million rows draws them: a few steps, not a
        // million Bernoulli draws.
        let draws: Vec<f64> = (0..2_000)
            .map(|_| rng.binomial(1_000_000, 0.15) as f64)
            .collect();
        let sd = (1e6f64 * 0.15 * 0.85).sqrt();
        assert!((mean(&draws) - 150_000.0).abs() < 4.0 * sd / (2_000f64).sqrt());
    }

    #[test]
    fn beyond_twenty_thousand_rows_up_to_64_values_are_drawn_as_counts() {
        // Eleven values, as the differences of two five-field json_match scores take.
        let values: Vec<f64> = (0..50_000)
            .map(|i| f64::from((i * 7919) % 11) / 5.0 - 1.0)
            .collect();
        let m = mean(&values);
        let sd = (values.iter().map(|v| (v - m).powi(2)).sum::<f64>() / (values.len() - 1) as f64)
            .sqrt();
        let half = 1.96 * sd / (values.len() as f64).sqrt();
        assert_eq!(Values::of(&values).counts().map(|c| c.len()), Some(11));
        let interval = bootstrap_mean(&values, RESAMPLES, SEED);
        assert!(close(interval.low, m - half, 0.001), "{interval:?}");
        assert!(close(interval.high, m + half, 0.001), "{interval:?}");
        // Fewer rows, or more values, go row by row, as before.
        assert_eq!(Values::of(&values[..ROW_BY_ROW_ROWS]).counts(), None);
        let many: Vec<f64> = (0..50_000).map(|i| f64::from(i % 65)).collect();
        assert_eq!(Values::of(&many).counts(), None);
        assert_eq!(Values::of(&many[..1000]).counts().map(|c| c.len()), None);
        let sixty_four: Vec<f64> = (0..50_000).map(|i| f64::from(i % 64)).collect();
        assert_eq!(Values::of(&sixty_four).counts().map(|c| c.len()), Some(64));
    }

    #[test]
    fn beyond_twenty_thousand_rows_many_valued_scores_take_the_normal_approximation() {
        // 25,001 scores with thousands of values (a command scorer's), skewed to the right.
        let mut rng = SplitMix64(5);
        let values: Vec<f64> = (0..=ROW_BY_ROW_ROWS + 5_000)
            .map(|_| (rng.unit().powi(3) * 10_000.0).round() / 10_000.0)
            .collect();
        let sampling = Values::of(&values).sampling(RESAMPLES, SEED);
        let Sampling::Normal {
            mean: m,
            standard_error,
        } = sampling
        else {
            panic!("expected the normal approximation, got {sampling:?}");
        };
        assert_eq!(m, mean(&values));
        // The bootstrap it stands for, drawn row by row, gives the same bounds up to its own
        // Monte-Carlo error (with 2,500 resamples, a standard deviation of 0.054 standard
        // errors for either bound).
        let resampled = percentile_interval(&bootstrap_means(
            &values,
            values.len(),
            Vec::new(),
            2_500,
            SEED,
        ));
        let normal = sampling.interval();
        for (got, want) in [(normal.low, resampled.low), (normal.high, resampled.high)] {
            assert!(
                (got - want).abs() < 0.25 * standard_error,
                "{normal:?} vs {resampled:?} (standard error {standard_error})"
            );
        }
        let (interval, method) = mean_interval(&values).unwrap();
        assert_eq!((interval, method), (normal, IntervalMethod::Normal));
        // Fewer rows: the bootstrap itself.
        let (_, method) = mean_interval(&values[..ROW_BY_ROW_ROWS]).unwrap();
        assert_eq!(method, IntervalMethod::Bootstrap);
    }

    #[test]
    fn the_normal_p_value_is_twice_the_tail_beyond_the_observed_z() {
        let p = |mean: f64, standard_error: f64| {
            Sampling::Normal {
                mean,
                standard_error,
            }
            .p_value()
        };
        assert!(close(p(1.959_964, 1.0), 0.05, 1e-6));
        assert!(close(p(-0.3, 0.1), 0.002_699_796, 1e-8));
        assert_eq!(p(0.0, 0.2), 1.0);
        // The paired comparison that uses it says so, and decides on it.
        // Differences of 0.01 plus up to 0.001: a thousand values.
        let a: Vec<f64> = (0..30_000).map(|i| f64::from(i % 997) / 997.0).collect();
        let b: Vec<f64> = (0..30_000)
            .map(|i| a[i] + 0.01 + f64::from((i as u32 * 7919) % 1000) / 1e6)
            .collect();
        let c = compare_paired(&a, &b);
        assert_eq!(c.test, PairedTest::PairedNormal);
        assert_eq!(c.verdict, Verdict::Better);
    }

    #[test]
    fn counting_and_row_by_row_resampling_agree() {
        // Four distinct values take the counting path; adding nine more makes it row by row.
        let few: Vec<f64> = (0..60).map(|i| f64::from(i % 4) / 3.0).collect();
        let mut many = few.clone();
        many.extend((0..9).map(|i| 0.05 + f64::from(i) / 10.0));
        let a = bootstrap_mean(&few, RESAMPLES, SEED);
        let b = bootstrap_mean(&many, RESAMPLES, SEED);
        // Both are close to the normal-theory interval of their own data.
        for (values, interval) in [(&few, a), (&many, b)] {
            let m = mean(values);
            let sd = (values.iter().map(|v| (v - m).powi(2)).sum::<f64>()
                / (values.len() - 1) as f64)
                .sqrt();
            let half = 1.96 * sd / (values.len() as f64).sqrt();
            assert!(
                close(interval.low, m - half, 0.02),
                "{interval:?} vs {}",
                m - half
            );
            assert!(
                close(interval.high, m + half, 0.02),
                "{interval:?} vs {}",
                m + half
            );
        }
    }

    #[test]
    fn bootstrap_of_a_constant_is_that_constant() {
        let interval = bootstrap_mean(&[0.5; 12], 1000, SEED);
        assert_eq!(
            interval,
            Interval {
                low: 0.5,
                high: 0.5
            }
        );
    }

    #[test]
    fn values_hold_a_bounded_summary_that_gives_the_two_pass_moments() {
        let mut rng = SplitMix64(11);
        let values: Vec<f64> = (0..ROW_BY_ROW_ROWS * 3)
            .map(|_| (rng.unit().powi(2) * 1000.0).round() / 1000.0)
            .collect();
        let all = Values::of(&values);
        assert_eq!(all.len(), values.len());
        assert!(
            all.kept.is_empty() && all.kept.capacity() == 0,
            "dropped beyond the rows"
        );
        assert!(all.distinct.is_none(), "more than {MANY_VALUES} values");
        assert_eq!(all.mean(), mean(&values), "summed in the same order");
        let m = mean(&values);
        let variance = values.iter().map(|v| (v - m).powi(2)).sum::<f64>() / values.len() as f64;
        assert!(close(all.squares / values.len() as f64, variance, 1e-12));
        // Below the threshold every value is kept, in order, for the row-by-row resampling.
        let few = Values::of(&values[..100]);
        assert_eq!(few.kept, values[..100]);
        // A 0/1 score counts its ones.
        let binary = Values::of(&[1.0, 0.0, 1.0, 1.0]);
        assert!(binary.binary);
        assert_eq!(binary.ones, 3);
        assert!(!Values::of(&[1.0, 0.5]).binary);
    }
}
