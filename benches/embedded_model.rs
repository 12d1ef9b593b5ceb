//! The embedded model's speed through `EmbeddedModel`, measured the way llama.cpp's
//! `llama-bench` measures it, so the two can be put side by side
//! (`benches/compare-llama-cpp.sh` does that): load time, prompt evaluation tokens/s for a
//! ~215-token prompt (`pp`), generation tokens/s for 32 tokens (`tg`), peak memory.
//!
//! Differences that favour llama-bench, kept on purpose because they are what a request costs:
//! `tg` here includes sampling (greedy over the whole vocabulary), detokenising and handing the
//! text over; llama-bench decodes without sampling.
//!
//! `cargo bench --bench embedded_model` (release). Settings: `GEPA_LAB_THREADS` (default: the
//! cores), `BENCH_MODEL` (a `local` model id; default `local`), `BENCH_REPS` (default 5).
//! Prints a Markdown table and exits 0 without measuring when the model is not installed.
use std::sync::Arc;
use std::time::Duration;

use gepa_lab::inference::embedded::ModelInfo;
use gepa_lab::inference::{ChatMessage, ChatRequest, EmbeddedConfig, EmbeddedModel, ModelChoice};

/// A prompt whose rendered template is about 215 tokens, like the notes' llama.cpp runs.
const PROMPT: &str = "You are reviewing customer feedback for an online shop that sells \
headphones, chargers, toys, kitchen tools and outdoor gear. For each review, decide whether the \
customer is satisfied. Pay attention to sarcasm, to complaints hidden in polite wording, and to \
reviews that praise one part of a product while returning it for another. Reviews may mention \
delivery, packaging, customer service, price, durability, comfort, battery life and sound \
quality. A review that asks for a refund is negative even when its tone is calm. A review that \
mentions a small flaw but recommends the product is positive. Ignore star ratings written in \
the text; judge the words. When the review compares two products, judge the one that was \
bought. Answer with one word, positive or negative, and nothing else.\n\nReview: The charging \
cable stopped working after two weeks. Cheap plastic at the connector, and support never \
answered my emails.";

fn main() {
    let reps: usize = std::env::var("BENCH_REPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|n| *n >= 1)
        .unwrap_or(5);
    let id = std::env::var("BENCH_MODEL").unwrap_or_else(|_| "local".into());
    let Some(model) = load(&id) else {
        return;
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("embedded_model: {err}");
            std::process::exit(2);
        }
    };
    let (prompt_request, generation_request) = requests(&model);
    let run = |request: &ChatRequest| {
        runtime
            .block_on(model.generate(request))
            .unwrap_or_else(|err| {
                eprintln!("embedded_model: generation failed: {err}");
                std::process::exit(1);
            })
            .stats
    };
    // One of each first: llama.cpp sizes its buffers on the first decode.
    run(&prompt_request);
    run(&generation_request);
    let mut prompt_tokens = 0;
    let pp: Vec<f64> = (0..reps)
        .map(|_| {
            let stats = run(&prompt_request);
            prompt_tokens = stats.prompt_tokens_evaluated;
            stats.prompt_per_sec()
        })
        .collect();
    let mut generated = 0;
    let tg: Vec<f64> = (0..reps)
        .map(|_| {
            let stats = run(&generation_request);
            generated = stats.completion_tokens;
            stats.generation_per_sec()
        })
        .collect();
    print_table(
        model.info(),
        &[
            (format!("pp{prompt_tokens}"), &pp),
            (format!("tg{generated}"), &tg),
        ],
    );
}

/// The model `id` names, loaded without prefix reuse (each request is measured from scratch);
/// `None` when it is not installed. Exits 2 on a wrong setting.
fn load(id: &str) -> Option<Arc<EmbeddedModel>> {
    let mut config = match EmbeddedConfig::from_env() {
        Ok(config) => config,
        Err(err) => {
            eprintln!("embedded_model: {err}");
            std::process::exit(2);
        }
    };
    config.reuse_prefix = false;
    let choice = match ModelChoice::from_model_id(id, &config.models_dir) {
        Ok(Some(choice)) => choice,
        Ok(None) => {
            eprintln!("embedded_model: BENCH_MODEL={id} is not a local model id");
            std::process::exit(2);
        }
        Err(err) => {
            eprintln!("embedded_model: {err}");
            std::process::exit(2);
        }
    };
    match EmbeddedModel::load_with(choice, config) {
        Ok(model) => Some(model),
        Err(err) => {
            eprintln!("embedded_model: not measured: {err}");
            None
        }
    }
}

/// The prompt-evaluation request (one token out) and the generation request (32 tokens).
fn requests(model: &EmbeddedModel) -> (ChatRequest, ChatRequest) {
    let mut prompt_request = ChatRequest::new("local", vec![ChatMessage::user(PROMPT)]);
    prompt_request.model = model.id().to_owned();
    prompt_request.temperature = Some(0.0);
    prompt_request.max_tokens = Some(1);
    let mut generation_request = ChatRequest::new(
        model.id(),
        vec![ChatMessage::user(
            "Count from 1 to 200, separated by commas, with nothing else.",
        )],
    );
    generation_request.temperature = Some(0.0);
    generation_request.max_tokens = Some(32);
    (prompt_request, generation_request)
}

/// The Markdown table of the measurements, one line per test.
fn print_table(info: &ModelInfo, tests: &[(String, &Vec<f64>)]) {
    println!("| runner | model | threads | load | test | t/s | peak RSS |");
    println!("|---|---|---|---|---|---|---|");
    let peak = peak_rss_mib().map_or("?".to_owned(), |m| format!("{m:.0} MiB"));
    for (test, values) in tests {
        let (mean, sd) = mean_sd(values);
        println!(
            "| EmbeddedModel | {} | {} | {} | {test} | {mean:.2} ± {sd:.2} | {peak} |",
            info.name,
            info.threads,
            seconds(info.load_time),
        );
    }
}

fn mean_sd(values: &[f64]) -> (f64, f64) {
    let n = values.len() as f64;
    let mean = values.iter().sum::<f64>() / n;
    let var = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0).max(1.0);
    (mean, var.sqrt())
}

fn seconds(d: Duration) -> String {
    format!("{:.2} s", d.as_secs_f64())
}

/// VmHWM of this process: the most resident memory it ever had.
fn peak_rss_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}
