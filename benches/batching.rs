//! Throughput of answering many requests at once: the README's extraction replay and one engine
//! minibatch evaluation, sent to the embedded model in this process or to any OpenAI-compatible
//! server (llama.cpp's `llama-server`), so that the two can be set side by side on the same
//! requests. `benches/compare-llama-server.sh` runs it against both; see the README.
//!
//! The requests (`benches/data/extraction-replay/`, from a run of the README's first command):
//! - `minibatch`: a child prompt on 4 holdout rows at once, as the engine evaluates a proposal
//!   (the prompt is new to the model, so nothing of it is cached);
//! - `replay`: the seed and the best prompt on the 77 holdout rows, 154 answers, seed first,
//!   as the replay queues them.
//!
//! Every request is one user message, temperature 0, at most 96 tokens (the experiment's
//! `max_tokens`). Times run from the first request sent to the last answer received, with the
//! model already loaded. Token rates are the `usage` counts over that time: prompt tokens
//! include those a server took from its cache, which is the point of reusing a prefix.
//!
//! Settings (environment): `BENCH_URL` (an OpenAI-compatible base URL; unset: the embedded
//! model), `BENCH_MODEL` (the model id; default `local`), `BENCH_CONCURRENCY` (requests in
//! flight; default: the embedded model's slots, else 8), `BENCH_LABEL` (the row's name),
//! `BENCH_ANSWERS` (write every answer to this JSON Lines file, to count the answers that
//! differ between two runs). Embedded: `GEPA_LAB_THREADS`, `GEPA_LAB_SLOTS`.
//!
//! `cargo bench --bench batching` (release). Exits 0 without measuring when the embedded model
//! is not installed.
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use gepa_lab::inference::{
    ChatMessage, ChatRequest, EmbeddedModel, HttpInference, Inference, InferenceConfig, ModelChoice,
};
use gepa_lab::prompt::Template;

const MAX_TOKENS: u32 = 96;
const MINIBATCH_ROWS: usize = 4;

/// One request: which scenario, which prompt version, which row, and the rendered prompt.
struct Request {
    scenario: &'static str,
    version: &'static str,
    row: String,
    prompt: String,
}

fn data_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/data/extraction-replay")
}

fn fail(message: impl std::fmt::Display) -> ! {
    eprintln!("batching: {message}");
    std::process::exit(2);
}

/// The holdout rows as (row id, text).
fn rows() -> Vec<(String, String)> {
    let path = data_dir().join("holdout.csv");
    let mut reader =
        csv::Reader::from_path(&path).unwrap_or_else(|e| fail(format!("{}: {e}", path.display())));
    reader
        .records()
        .map(|record| {
            let record = record.unwrap_or_else(|e| fail(format!("{}: {e}", path.display())));
            (record[0].to_owned(), record[1].to_owned())
        })
        .collect()
}

fn requests(
    scenario: &'static str,
    versions: &[&'static str],
    rows: &[(String, String)],
) -> Vec<Request> {
    let mut requests = Vec::new();
    for &version in versions {
        let path = data_dir().join(format!("{version}.txt"));
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| fail(format!("{}: {e}", path.display())));
        let template =
            Template::parse(&text).unwrap_or_else(|e| fail(format!("{}: {e}", path.display())));
        for (row, input) in rows {
            let prompt = template
                .render(|name| (name == "text").then_some(input.as_str()))
                .unwrap_or_else(|e| fail(format!("{}: {e}", path.display())));
            requests.push(Request {
                scenario,
                version,
                row: row.clone(),
                prompt,
            });
        }
    }
    requests
}

/// What one scenario measured.
struct Measured {
    answers: usize,
    failed: usize,
    elapsed: Duration,
    prompt_tokens: u64,
    completion_tokens: u64,
}

async fn run(
    model: &Arc<dyn Inference>,
    model_id: &str,
    requests: &[Request],
    concurrency: usize,
    answers: &mut Option<std::fs::File>,
) -> Measured {
    let started = Instant::now();
    let results: Vec<_> = futures::stream::iter(requests.iter().map(|request| {
        let model = Arc::clone(model);
        let mut chat = ChatRequest::new(model_id, vec![ChatMessage::user(&request.prompt)]);
        chat.temperature = Some(0.0);
        chat.max_tokens = Some(MAX_TOKENS);
        async move { model.chat(&chat).await }
    }))
    .buffered(concurrency.max(1))
    .collect()
    .await;
    let elapsed = started.elapsed();
    let mut measured = Measured {
        answers: 0,
        failed: 0,
        elapsed,
        prompt_tokens: 0,
        completion_tokens: 0,
    };
    for (request, result) in requests.iter().zip(results) {
        let (output, error) = match result {
            Ok(response) => {
                measured.answers += 1;
                if let Some(usage) = &response.usage {
                    measured.prompt_tokens += usage.prompt_tokens;
                    measured.completion_tokens += usage.completion_tokens;
                }
                (Some(response.content().to_owned()), None)
            }
            Err(err) => {
                measured.failed += 1;
                (None, Some(err.to_string()))
            }
        };
        if let Some(file) = answers {
            let line = serde_json::json!({
                "scenario": request.scenario,
                "version": request.version,
                "row": request.row,
                "output": output,
                "error": error,
            });
            writeln!(file, "{line}").unwrap_or_else(|e| fail(format!("BENCH_ANSWERS: {e}")));
        }
    }
    measured
}

/// The model to measure, how many requests it gets in flight, and the setup in words: the
/// server at `url`, else the embedded model `model_id` (`None` when it is not installed).
fn answering_model(
    url: Option<&str>,
    model_id: &str,
    concurrency_setting: Option<usize>,
) -> Option<(Arc<dyn Inference>, usize, String)> {
    Some(match url {
        Some(url) => {
            let client = HttpInference::new(InferenceConfig::new(url.to_owned(), None))
                .unwrap_or_else(|e| fail(e));
            let concurrency = concurrency_setting.unwrap_or(8);
            (
                Arc::new(client),
                concurrency,
                format!("{concurrency} in flight"),
            )
        }
        None => {
            let config =
                gepa_lab::inference::EmbeddedConfig::from_env().unwrap_or_else(|e| fail(e));
            let choice = match ModelChoice::from_model_id(model_id, &config.models_dir) {
                Ok(Some(choice)) => choice,
                Ok(None) => fail(format!("BENCH_MODEL={model_id} is not a local model id")),
                Err(err) => fail(err),
            };
            let model = match EmbeddedModel::load_with(choice, config) {
                Ok(model) => model,
                Err(err) => {
                    eprintln!("batching: not measured: {err}");
                    return None;
                }
            };
            let info = model.info();
            let concurrency = concurrency_setting.unwrap_or(info.slots);
            let setup = format!(
                "{} threads, {} slots, {concurrency} in flight",
                info.threads, info.slots
            );
            (model, concurrency, setup)
        }
    })
}

fn main() {
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
    let url = var("BENCH_URL");
    let model_id = var("BENCH_MODEL").unwrap_or_else(|| "local".into());
    let label = var("BENCH_LABEL").unwrap_or_else(|| {
        url.as_ref().map_or_else(
            || format!("gepa-lab {model_id}"),
            |url| format!("{model_id} at {url}"),
        )
    });
    let concurrency_setting = var("BENCH_CONCURRENCY").map(|value| {
        value
            .parse::<usize>()
            .ok()
            .filter(|n| (1..=256).contains(n))
            .unwrap_or_else(|| fail(format!("BENCH_CONCURRENCY={value:?}: expected 1 to 256")))
    });
    let mut answers = var("BENCH_ANSWERS")
        .map(|path| std::fs::File::create(&path).unwrap_or_else(|e| fail(format!("{path}: {e}"))));

    let Some((model, concurrency, setup)) =
        answering_model(url.as_deref(), &model_id, concurrency_setting)
    else {
        return;
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap_or_else(|e| fail(e));

    let rows = rows();
    let scenarios = [
        (
            "minibatch",
            requests("minibatch", &["child"], &rows[..MINIBATCH_ROWS]),
        ),
        ("replay", requests("replay", &["seed", "g2"], &rows)),
    ];
    println!("{label} ({setup})");
    println!();
    println!(
        "| scenario | answers | failed | seconds | answers/s | prompt tokens/s | generated tokens/s |"
    );
    println!("|---|--:|--:|--:|--:|--:|--:|");
    for (name, requests) in &scenarios {
        let measured =
            runtime.block_on(run(&model, &model_id, requests, concurrency, &mut answers));
        let seconds = measured.elapsed.as_secs_f64();
        let rate = |n: f64| if seconds > 0.0 { n / seconds } else { 0.0 };
        println!(
            "| {name} | {} | {} | {seconds:.1} | {:.2} | {:.0} | {:.1} |",
            measured.answers,
            measured.failed,
            rate(measured.answers as f64),
            rate(measured.prompt_tokens as f64),
            rate(measured.completion_tokens as f64),
        );
    }
}
