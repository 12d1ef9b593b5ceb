//! The report's statistics on large holdouts: the paired comparison of two versions and the
//! interval of one version's mean, at 100,000 and 1,000,000 rows, on scores shaped like real
//! answers rather than a stand-in's (which answers both versions alike, so that nearly every
//! paired difference is 0 and any resampling is cheap):
//! - `binary`: exact-match scores, right 55 % and 60 % of the time, independently (the versions
//!   disagree on about half the rows);
//! - `json_match`: a five-field `json_match` (scores 0, 0.2, …, 1; differences in 11 values);
//! - `continuous`: a score with thousands of distinct values (a command scorer's), drawn row by
//!   row, the one case that stays proportional to the rows.
//!
//! `cargo bench --bench report_stats` (release) prints a table of seconds per call (the median
//! of `REPS`, default 3). A timing script rather than criterion, whose ten samples would take
//! ten minutes on the slow paths it was written to compare: to set a change beside its parent,
//! build this file in a worktree of the parent sharing `target/` (only gepa-lab recompiles) and
//! run both in turn.
use std::hint::black_box;
use std::time::Instant;

use gepa_lab::report::stats::{compare_paired, mean_interval};

/// A deterministic generator, so every run measures the same scores.
struct Lcg(u64);

impl Lcg {
    fn unit(&mut self) -> f64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Two versions' scores on `rows` rows: `kind` says which scorer they look like.
fn scores(kind: &str, rows: usize) -> (Vec<f64>, Vec<f64>) {
    let mut rng = Lcg(7);
    let mut score = |better: f64| match kind {
        "binary" => f64::from(u8::from(rng.unit() < better)),
        "json_match" => (0..5).filter(|_| rng.unit() < better).count() as f64 / 5.0,
        _ => (rng.unit() * better * 10_000.0).round() / 10_000.0,
    };
    let a: Vec<f64> = (0..rows).map(|_| score(0.55)).collect();
    let b: Vec<f64> = (0..rows).map(|_| score(0.6)).collect();
    (a, b)
}

/// The median of `reps` timings of `f`, in seconds.
fn time(reps: usize, mut f: impl FnMut()) -> f64 {
    let mut seconds: Vec<f64> = (0..reps)
        .map(|_| {
            let start = Instant::now();
            f();
            start.elapsed().as_secs_f64()
        })
        .collect();
    seconds.sort_by(f64::total_cmp);
    seconds[reps / 2]
}

fn main() {
    let reps: usize = std::env::var("REPS")
        .ok()
        .and_then(|r| r.parse().ok())
        .filter(|&r| r >= 1)
        .unwrap_or(3);
    println!("| scores | rows | compare_paired | mean_interval |");
    println!("|---|--:|--:|--:|");
    for rows in [100_000, 1_000_000] {
        for kind in ["binary", "json_match", "continuous"] {
            let (a, b) = scores(kind, rows);
            let paired = time(reps, || {
                black_box(compare_paired(black_box(&a), black_box(&b)));
            });
            let interval = time(reps, || {
                black_box(mean_interval(black_box(&b)));
            });
            println!("| {kind} | {rows} | {paired:.3} s | {interval:.3} s |");
        }
    }
}
