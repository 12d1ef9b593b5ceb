//! Replay throughput through `HttpInference` against an in-process `serve` with the simulated
//! model: N requests at a key limit of R rpm, server latency L, C requests in flight. The limit
//! on throughput is min(R/60, C/L); the report is achieved req/s as a ratio of it, and the 429s
//! the client received (a well-paced run receives none).
//!
//! Run it with `cargo bench --profile dev --bench replay_throughput` (no release build needed:
//! the work is waiting, not computing).
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use criterion::{Criterion, SamplingMode, criterion_group, criterion_main};
use futures::StreamExt;
use gepa_lab::http::Secret;
use gepa_lab::inference::{
    ChatMessage, ChatRequest, HttpInference, Inference, InferenceConfig, SimConfig,
};
use gepa_lab::server::{AppState, KeySpec, ServeConfig, Server, UpstreamSpec};

const KEY: &str = "dkn_live_bench";

struct Scenario {
    name: &'static str,
    requests: usize,
    rpm: u32,
    latency: Duration,
    concurrency: usize,
}

impl Scenario {
    fn limit_per_sec(&self) -> f64 {
        let by_rate = f64::from(self.rpm) / 60.0;
        let by_latency = self.concurrency as f64 / self.latency.as_secs_f64();
        by_rate.min(by_latency)
    }
}

/// Latencies are those of a small, fast model; real ones are seconds, which only makes the
/// fixed per-request cost (HTTP, SQLite, a debug build) matter less than here.
const SCENARIOS: &[Scenario] = &[
    Scenario {
        name: "rate-bound",
        requests: 30,
        rpm: 1200,
        latency: Duration::from_millis(20),
        concurrency: 4,
    },
    Scenario {
        name: "latency-bound",
        requests: 80,
        rpm: 12000,
        latency: Duration::from_millis(200),
        concurrency: 8,
    },
];

/// Starts `serve` in-process for one scenario and returns its base URL.
async fn start_server(scenario: &Scenario, db: std::path::PathBuf) -> String {
    let sim = SimConfig {
        models: vec!["bench-model".into()],
        latency: scenario.latency,
        ..SimConfig::default()
    };
    let config = ServeConfig {
        db,
        keys: vec![KeySpec {
            key: Secret::new(KEY),
            rpm_limit: NonZeroU32::new(scenario.rpm).expect("rpm > 0"),
        }],
        upstreams: vec![UpstreamSpec::Sim(sim)],
        upstream_key: None,
        account: Default::default(),
        evolution: Default::default(),
        rate_window: gepa_lab::server::auth::MINUTE,
    };
    let state = AppState::new(&config).await.expect("server state");
    let server = Server::bind("127.0.0.1:0".parse().expect("address"), state)
        .await
        .expect("bind");
    let url = format!("http://{}", server.local_addr().expect("address"));
    tokio::spawn(server.run(std::future::pending()));
    url
}

async fn replay(client: &HttpInference, scenario: &Scenario) -> usize {
    futures::stream::iter(0..scenario.requests)
        .map(|row| async move {
            let request = ChatRequest::new(
                "bench-model",
                vec![ChatMessage::user(format!(
                    "Row {row}: is this positive?\nAnswer with one of: yes, no"
                ))],
            );
            client.chat(&request).await
        })
        .buffer_unordered(scenario.concurrency)
        .filter(|result| std::future::ready(result.is_ok()))
        .count()
        .await
}

fn replay_throughput(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let dir = tempfile::tempdir().expect("temp dir");
    let mut summary = Vec::new();
    let mut group = c.benchmark_group("replay_throughput");
    // Each iteration is a whole replay of seconds; ten flat samples keep the run under a minute.
    group
        .sample_size(10)
        .sampling_mode(SamplingMode::Flat)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(1));
    for scenario in SCENARIOS {
        let url = runtime.block_on(start_server(
            scenario,
            dir.path().join(format!("{}.sqlite3", scenario.name)),
        ));
        let mut config = InferenceConfig::new(url, Some(Secret::new(KEY)));
        config.rpm = NonZeroU32::new(scenario.rpm);
        let client = HttpInference::new(config).expect("client");
        let totals = Arc::new(Mutex::new((0usize, 0usize, Duration::ZERO)));
        group.bench_function(scenario.name, |b| {
            b.iter_custom(|iters| {
                let mut elapsed = Duration::ZERO;
                for _ in 0..iters {
                    let started = Instant::now();
                    let ok = runtime.block_on(replay(&client, scenario));
                    let took = started.elapsed();
                    elapsed += took;
                    let mut totals = totals.lock().expect("totals");
                    totals.0 += scenario.requests;
                    totals.1 += ok;
                    totals.2 += took;
                }
                elapsed
            });
        });
        let (sent, ok, took) = *totals.lock().expect("totals");
        let achieved = sent as f64 / took.as_secs_f64();
        summary.push(format!(
            "{:<14} N={} R={} rpm L={} ms C={}: achieved {:.2} req/s, limit {:.2} req/s, ratio {:.3}, 429s {}, failed {}",
            scenario.name,
            scenario.requests,
            scenario.rpm,
            scenario.latency.as_millis(),
            scenario.concurrency,
            achieved,
            scenario.limit_per_sec(),
            achieved / scenario.limit_per_sec(),
            client.stats().rate_limited,
            sent - ok,
        ));
        // Touch the models route once so a misconfigured server shows up as a failure here.
        runtime
            .block_on(client.models())
            .expect("models of the bench server");
    }
    group.finish();
    println!("\nreplay throughput (all iterations, warm-up included):");
    for line in summary {
        println!("  {line}");
    }
}

criterion_group!(benches, replay_throughput);
criterion_main!(benches);
