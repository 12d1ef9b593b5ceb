//! The engine's own CPU time per call, next to a task that answers instantly.
//!
//! One engine run (budget 2000, 50 feedback and 50 Pareto rows) is recorded once; the baseline
//! replays exactly the same `evaluate` and `reflect` calls on the same task without the engine.
//! The difference, divided by the number of calls, is what the engine adds to each model call:
//! selection, sampling, caching, reflection text, parsing, records and events. A remote model
//! call takes hundreds of milliseconds, so anything in microseconds is negligible.

use std::hint::black_box;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput};
use gepa_lab::engine::{
    self, EngineConfig, Evaluation, ExampleView, Reflection, Run, Task, TaskError,
};
use tokio::runtime::{Builder, Runtime};

const FEEDBACK: usize = 50;
const PARETO: usize = 50;
const BUDGET: u64 = 2000;
const KEYWORDS: usize = 40;
const SEED_PROMPT: &str = "Answer {question}.";

/// Scores 1 on a row when the prompt mentions the row's keyword; its reflection appends the
/// first keyword the feedback asks for. Enough keywords that the run uses its whole budget.
struct InstantTask;

fn keyword(example: usize) -> String {
    format!("kw{:02}", example % KEYWORDS)
}

impl Task for InstantTask {
    async fn evaluate(&self, prompt: &str, example: usize) -> Result<Evaluation, TaskError> {
        let keyword = keyword(example);
        Ok(if prompt.contains(&keyword) {
            Evaluation {
                output: keyword,
                score: 1.0,
                feedback: "Correct.".into(),
                tokens: 0,
                cost: None,
            }
        } else {
            Evaluation {
                output: "no idea".into(),
                score: 0.0,
                feedback: format!("Wrong. The answer must mention {keyword}."),
                tokens: 0,
                cost: None,
            }
        })
    }

    async fn reflect(&self, request: &str) -> Result<Reflection, TaskError> {
        let instruction = request
            .split_once("```\n")
            .and_then(|(_, rest)| rest.split_once("\n```"))
            .map_or("", |(instruction, _)| instruction);
        let wanted = request
            .split_once("must mention ")
            .and_then(|(_, rest)| rest.split_once('.'))
            .map_or("", |(keyword, _)| keyword);
        Ok(Reflection::new(format!(
            "```\n{instruction} Mention {wanted}.\n```"
        )))
    }

    fn describe(&self, example: usize) -> ExampleView {
        ExampleView {
            inputs: vec![("question".into(), format!("question {example}"))],
            expected: keyword(example),
        }
    }

    fn example_count(&self) -> usize {
        FEEDBACK + PARETO
    }
}

/// The calls one engine run makes, in order.
enum Call {
    Evaluate(String, usize),
    Reflect(String),
}

/// Wraps the instant task to write down every call.
struct Recording {
    calls: Mutex<Vec<Call>>,
}

impl Recording {
    fn push(&self, call: Call) {
        if let Ok(mut calls) = self.calls.lock() {
            calls.push(call);
        }
    }
}

impl Task for Recording {
    async fn evaluate(&self, prompt: &str, example: usize) -> Result<Evaluation, TaskError> {
        self.push(Call::Evaluate(prompt.to_string(), example));
        InstantTask.evaluate(prompt, example).await
    }

    async fn reflect(&self, request: &str) -> Result<Reflection, TaskError> {
        self.push(Call::Reflect(request.to_string()));
        InstantTask.reflect(request).await
    }

    fn describe(&self, example: usize) -> ExampleView {
        InstantTask.describe(example)
    }

    fn example_count(&self) -> usize {
        InstantTask.example_count()
    }
}

fn config() -> EngineConfig {
    EngineConfig::new(FEEDBACK, PARETO, BUDGET)
}

fn engine_run(runtime: &Runtime) -> Run {
    let result = runtime.block_on(engine::run(&InstantTask, SEED_PROMPT, &config(), |event| {
        black_box(event);
    }));
    match result {
        Ok(run) => run,
        Err(error) => panic!("the benchmark run failed to start: {error}"),
    }
}

fn bare_calls(runtime: &Runtime, calls: &[Call]) {
    runtime.block_on(async {
        for call in calls {
            match call {
                Call::Evaluate(prompt, example) => {
                    black_box(InstantTask.evaluate(prompt, *example).await.ok());
                }
                Call::Reflect(request) => {
                    black_box(InstantTask.reflect(request).await.ok());
                }
            }
        }
    });
}

fn median_time(runs: usize, mut work: impl FnMut()) -> Duration {
    let mut times: Vec<Duration> = (0..runs)
        .map(|_| {
            let start = Instant::now();
            work();
            start.elapsed()
        })
        .collect();
    times.sort();
    times[runs / 2]
}

fn main() {
    let runtime = match Builder::new_current_thread().build() {
        Ok(runtime) => runtime,
        Err(error) => panic!("no tokio runtime: {error}"),
    };
    let recording = Recording {
        calls: Mutex::new(Vec::new()),
    };
    let recorded = runtime.block_on(engine::run(&recording, SEED_PROMPT, &config(), |_| {}));
    let run = match recorded {
        Ok(run) => run,
        Err(error) => panic!("the benchmark run failed to start: {error}"),
    };
    let calls = recording.calls.into_inner().unwrap_or_default();
    let spent = run.spent();
    assert_eq!(calls.len() as u64, spent.total());

    let mut criterion = Criterion::default()
        .sample_size(20)
        .measurement_time(Duration::from_secs(5))
        .configure_from_args();
    let mut group = criterion.benchmark_group("engine_overhead");
    group.throughput(Throughput::Elements(spent.total()));
    group.bench_function("engine_run", |b| b.iter(|| engine_run(&runtime)));
    group.bench_function("bare_calls", |b| b.iter(|| bare_calls(&runtime, &calls)));
    group.finish();
    criterion.final_summary();

    let engine = median_time(15, || {
        black_box(engine_run(&runtime));
    });
    let bare = median_time(15, || bare_calls(&runtime, &calls));
    let overhead = engine.saturating_sub(bare).as_secs_f64() * 1e6 / spent.total() as f64;
    println!(
        "\nengine run: {} calls ({} task, {} reflection), {} iterations, {} candidates, stop {:?}",
        spent.total(),
        spent.task_calls,
        spent.reflection_calls,
        run.iterations().len(),
        run.candidates().len(),
        run.stop(),
    );
    println!(
        "median: engine {:.2} ms, bare calls {:.2} ms, ratio {:.2}x, engine overhead {overhead:.2} µs per call",
        engine.as_secs_f64() * 1e3,
        bare.as_secs_f64() * 1e3,
        engine.as_secs_f64() / bare.as_secs_f64(),
    );
}
