//! Rendering the report of a large run: 50 variants × 100 generations (5,000 history rows) and
//! 20,000 replay rows (50 variants × seed + 3 versions × 100 holdout rows × 1 model). Measures
//! `report::build` (read, check, tables, statistics, charts, HTML and Markdown) and
//! `report::write`, and prints the peak resident memory a render adds. Target: under 2 s.
//! `build_with_png` is the same render with `--png` (every chart drawn a second time, as PNG).
//!
//! `REPORT_BENCH_DIR=path` keeps the generated run directory there (to time the CLI on it).
use std::collections::BTreeMap;
use std::hint::black_box;
use std::path::Path;
use std::time::{Duration, Instant};

use criterion::Criterion;
use gepa_lab::report::{self, RenderOptions};
use gepa_lab::store::{HISTORY_FILE, HistoryRow, REPLAY_FILE, ReplayRow, RunDir};

const VARIANTS: usize = 50;
const GENERATIONS: u32 = 100;
const ROWS: usize = 100;
const REPLAYED: [&str; 4] = ["seed", "g97", "g98", "g99"];

/// A deterministic generator, so every run of the bench renders the same directory.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> f64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }
}

fn generate(dir: &Path) {
    let template = write_manifest(dir);
    let run = RunDir::open(dir).expect("a run directory");
    let mut rng = Lcg(7);
    let seed = template["start"]["prompt"]
        .as_str()
        .unwrap_or("seed")
        .to_owned();
    run.write_csv(HISTORY_FILE, &history(&mut rng, &seed))
        .expect("history");
    run.write_csv(REPLAY_FILE, &replay(&mut rng))
        .expect("replay");
}

fn variant_name(v: usize) -> String {
    format!("variant-{v:02}")
}

/// The fixture's run.json with [`VARIANTS`] executions of [`ROWS`] holdout rows each; returns
/// the fixture's planned execution they are copies of.
fn write_manifest(dir: &Path) -> serde_json::Value {
    let fixture: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string("tests/fixtures/run/run.json").expect("the fixture run.json"),
    )
    .expect("the fixture run.json is JSON");
    let mut manifest = fixture.clone();
    let template = fixture["plan"]["executions"][0].clone();
    let record = fixture["executions"][0].clone();
    let name = variant_name;
    manifest["plan"]["executions"] = (0..VARIANTS)
        .map(|v| {
            let mut execution = template.clone();
            execution["variant"] = name(v).into();
            execution["start"]["customId"] = format!("bench-{v:02}").into();
            execution["dataset"]["holdout"] = serde_json::json!({"count": ROWS});
            execution["dataset"]["holdout_rows"] = ROWS.into();
            execution
        })
        .collect();
    manifest["executions"] = (0..VARIANTS)
        .map(|v| {
            let mut r = record.clone();
            r["variant"] = name(v).into();
            r["custom_id"] = format!("bench-{v:02}").into();
            r
        })
        .collect();
    std::fs::write(
        dir.join("run.json"),
        serde_json::to_vec_pretty(&manifest).expect("JSON"),
    )
    .expect("write run.json");
    template
}

/// [`GENERATIONS`] generations of each variant, the best score creeping up.
fn history(rng: &mut Lcg, seed: &str) -> Vec<HistoryRow> {
    let mut history = Vec::new();
    for v in 0..VARIANTS {
        let mut best: f64 = 0.4;
        for generation in 0..GENERATIONS {
            best = (best + rng.next() * 0.01).min(1.0);
            history.push(HistoryRow {
                variant: variant_name(v),
                evolution_id: format!("evo-{v}"),
                generation,
                score: (best - rng.next() * 0.2).max(0.0),
                prompt: format!(
                    "{seed}\nRule {generation}: read the whole review; sarcasm counts as negative."
                ),
                budget_used: Some(u64::from(generation) * 3),
                costs: None,
                pareto_scores: None,
            });
        }
    }
    history
}

/// Every replayed version of every variant on every row, later versions right more often.
fn replay(rng: &mut Lcg) -> Vec<ReplayRow> {
    let mut replay = Vec::new();
    for v in 0..VARIANTS {
        for (k, version) in REPLAYED.iter().enumerate() {
            for row in 0..ROWS {
                let right = rng.next() < 0.5 + 0.1 * k as f64;
                replay.push(ReplayRow {
                    variant: variant_name(v),
                    version: version.parse().unwrap(),
                    model: "local".into(),
                    answered_by: "local".into(),
                    row: 13 + row,
                    sample: 1,
                    inputs: BTreeMap::from([(
                        "review".into(),
                        format!("Review number {row}: arrived late, but works <fine>."),
                    )]),
                    expected: "positive".into(),
                    output: if right { "positive" } else { "negative" }.into(),
                    score: if right { 1.0 } else { 0.0 },
                    feedback: String::new(),
                    latency_ms: 80 + (rng.next() * 300.0) as u64,
                    waited_ms: Some((rng.next() * 500.0) as u64),
                    prompt_tokens: 60,
                    completion_tokens: 2,
                    node_id: "local-0".into(),
                    error: String::new(),
                });
            }
        }
    }
    replay
}

fn peak_rss_kib() -> i64 {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage only writes into the struct we hand it.
    let status = unsafe { libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr()) };
    assert_eq!(status, 0, "getrusage failed");
    // SAFETY: getrusage returned 0, so the struct is initialised.
    unsafe { usage.assume_init() }.ru_maxrss
}

fn main() {
    let temp = tempfile::tempdir().expect("a temporary directory");
    let dir = match std::env::var_os("REPORT_BENCH_DIR") {
        Some(path) => {
            let path = std::path::PathBuf::from(path);
            std::fs::create_dir_all(&path).expect("REPORT_BENCH_DIR can be created");
            path
        }
        None => temp.path().to_owned(),
    };
    generate(&dir);
    let options = RenderOptions::default();

    let before = peak_rss_kib();
    let start = Instant::now();
    let first = report::build(&dir, options).expect("the generated run renders");
    let once = start.elapsed();
    let after = peak_rss_kib();
    let html_bytes = first.html.len();
    drop(first);

    let mut criterion = Criterion::default()
        .sample_size(10)
        .measurement_time(Duration::from_secs(20))
        .configure_from_args();
    let mut group = criterion.benchmark_group("report_render");
    group.bench_function("build_50x100_20000_rows", |b| {
        b.iter(|| black_box(report::build(&dir, options).expect("renders")))
    });
    group.bench_function("build_with_png", |b| {
        b.iter(|| black_box(report::build(&dir, RenderOptions { png: true }).expect("renders")))
    });
    let built = report::build(&dir, options).expect("renders");
    group.bench_function("write_files", |b| {
        b.iter(|| black_box(report::write(&built, &dir).expect("writes")))
    });
    group.finish();
    criterion.final_summary();

    println!(
        "\nfirst build: {:.0} ms; index.html {:.1} MB; peak RSS {:.0} MB before the first render, {:.0} MB after (+{:.0} MB)",
        once.as_secs_f64() * 1e3,
        html_bytes as f64 / 1e6,
        before as f64 / 1024.0,
        after as f64 / 1024.0,
        (after - before) as f64 / 1024.0,
    );
}
