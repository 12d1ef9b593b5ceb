//! How well and how fast each installed catalog model does the project's own tasks: the seed
//! prompts of `experiments/` on rows of `datasets/`, scored with the experiments' scorers, plus
//! one GEPA-style reflection (rewrite an instruction from feedback) per dataset. This is the
//! measurement behind the choice of the default model in the README.
//!
//! `cargo bench --bench model_choice`. Settings: `BENCH_ROWS` rows per dataset (default 20,
//! spread over the file), `BENCH_MODELS` (comma-separated catalog names; default: every
//! installed one), `GEPA_LAB_THREADS`. Prints a Markdown table.
use std::path::Path;
use std::time::Instant;

use gepa_lab::inference::embedded::{CATALOG, FileState, catalog, file_state};
use gepa_lab::inference::{ChatMessage, ChatRequest, EmbeddedConfig, EmbeddedModel, ModelChoice};
use gepa_lab::prompt::Template;
use gepa_lab::score::{Scorer, ScorerSpec};

struct Task {
    name: &'static str,
    file: &'static str,
    inputs: &'static [&'static str],
    expected: &'static str,
    prompt: String,
    scorer: Scorer,
    max_tokens: u32,
}

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let rows: usize = std::env::var("BENCH_ROWS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20);
    let config = EmbeddedConfig::from_env().unwrap_or_else(|err| fail(&err.to_string()));
    let wanted: Option<Vec<String>> = std::env::var("BENCH_MODELS")
        .ok()
        .map(|v| v.split(',').map(|s| s.trim().to_owned()).collect());
    let tasks = tasks(root);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|err| fail(&err.to_string()));

    println!("| model | dataset | score | s/row | prompt tok/s | gen tok/s |");
    println!("|---|---|---|---|---|---|");
    let mut rewrites = Vec::new();
    for model in CATALOG {
        if wanted
            .as_ref()
            .is_some_and(|w| !w.iter().any(|n| n == model.name))
        {
            continue;
        }
        if file_state(model, &config.models_dir) != FileState::Ready {
            eprintln!("model_choice: {} is not installed; skipped", model.name);
            continue;
        }
        let loaded = EmbeddedModel::load_with(
            ModelChoice::Catalog(catalog::find(model.name).unwrap_or(model)),
            config.clone(),
        )
        .unwrap_or_else(|err| fail(&err.to_string()));
        for task in &tasks {
            let examples = read_rows(&root.join(task.file), task, rows);
            println!(
                "{}",
                score_line(&runtime, &loaded, model.name, task, &examples)
            );
            let (rewritten, usable) = reflect(&runtime, &loaded, task);
            rewrites.push(format!(
                "- {} on {}: {}\n  ```\n  {}\n  ```",
                model.name,
                task.name,
                if usable {
                    "usable rewrite (differs, keeps every variable)"
                } else {
                    "not usable (echo, or a variable lost)"
                },
                rewritten.trim().replace('\n', "\n  ")
            ));
        }
    }
    println!("\nReflection (rewrite the seed prompt from one failure):\n");
    for line in rewrites {
        println!("{line}");
    }
}

/// The table's line of one model on one task: its mean score on `examples`, seconds per row,
/// and prompt and generation speeds.
fn score_line(
    runtime: &tokio::runtime::Runtime,
    loaded: &EmbeddedModel,
    model: &str,
    task: &Task,
    examples: &[(Vec<String>, String)],
) -> String {
    let template = Template::parse(&task.prompt).unwrap_or_else(|e| fail(&e.to_string()));
    let (mut total, mut prompt_tokens, mut prompt_secs, mut gen_tokens, mut gen_secs) =
        (0.0, 0u64, 0.0, 0u64, 0.0);
    let started = Instant::now();
    for (inputs, expected) in examples {
        let text = template
            .render(|name| {
                task.inputs
                    .iter()
                    .position(|i| *i == name)
                    .map(|i| inputs[i].as_str())
            })
            .unwrap_or_else(|e| fail(&e.to_string()));
        let mut request = ChatRequest::new(loaded.id(), vec![ChatMessage::user(text)]);
        request.temperature = Some(0.0);
        request.max_tokens = Some(task.max_tokens);
        let answer = runtime
            .block_on(loaded.generate(&request))
            .unwrap_or_else(|e| fail(&e.to_string()));
        total += task
            .scorer
            .score(None, answer.response.content(), expected)
            .unwrap_or_else(|e| fail(&e.to_string()))
            .value;
        prompt_tokens += u64::from(answer.stats.prompt_tokens_evaluated);
        prompt_secs += answer.stats.prompt_time.as_secs_f64();
        gen_tokens += u64::from(answer.stats.completion_tokens);
        gen_secs += answer.stats.generation_time.as_secs_f64();
    }
    let n = examples.len().max(1) as f64;
    format!(
        "| {} | {} | {:.2} ({}/{}) | {:.2} | {:.0} | {:.1} |",
        model,
        task.name,
        total / n,
        fmt_score(total),
        examples.len(),
        started.elapsed().as_secs_f64() / n,
        prompt_tokens as f64 / prompt_secs.max(1e-9),
        gen_tokens as f64 / gen_secs.max(1e-9),
    )
}

fn fmt_score(total: f64) -> String {
    if total.fract() == 0.0 {
        format!("{total:.0}")
    } else {
        format!("{total:.1}")
    }
}

fn tasks(root: &Path) -> Vec<Task> {
    let seed = |file: &str| -> String {
        let text = std::fs::read_to_string(root.join("experiments").join(file))
            .unwrap_or_else(|e| fail(&format!("{file}: {e}")));
        let value: toml::Value = toml::from_str(&text).unwrap_or_else(|e| fail(&e.to_string()));
        match value["prompt"].get("seed").and_then(|s| s.as_str()) {
            Some(seed) => seed.to_owned(),
            None => {
                let path = value["prompt"]["seed_file"].as_str().unwrap_or_default();
                std::fs::read_to_string(root.join("experiments").join(path))
                    .unwrap_or_else(|e| fail(&format!("{path}: {e}")))
            }
        }
    };
    let scorer =
        |spec: ScorerSpec| Scorer::new(&spec, root).unwrap_or_else(|e| fail(&e.to_string()));
    vec![
        Task {
            name: "sentiment",
            file: "datasets/sentiment.csv",
            inputs: &["review"],
            expected: "label",
            prompt: seed("sentiment.toml"),
            scorer: scorer(ScorerSpec::ExactMatchCi),
            max_tokens: 8,
        },
        Task {
            name: "support_tickets",
            file: "datasets/support_tickets.csv",
            inputs: &["subject", "body"],
            expected: "queue",
            prompt: seed("support_tickets.toml"),
            scorer: scorer(ScorerSpec::ExactMatchCi),
            max_tokens: 8,
        },
        Task {
            name: "extraction",
            file: "datasets/extraction.csv",
            inputs: &["text"],
            expected: "expected_json",
            prompt: seed("extraction.toml"),
            scorer: scorer(ScorerSpec::JsonMatch),
            max_tokens: 96,
        },
    ]
}

/// `count` rows spread evenly over the file: (input values in `task.inputs` order, expected).
fn read_rows(path: &Path, task: &Task, count: usize) -> Vec<(Vec<String>, String)> {
    let mut reader = csv::Reader::from_path(path).unwrap_or_else(|e| fail(&e.to_string()));
    let headers = reader
        .headers()
        .unwrap_or_else(|e| fail(&e.to_string()))
        .clone();
    let column = |name: &str| {
        headers
            .iter()
            .position(|h| h == name)
            .unwrap_or_else(|| fail(&format!("{}: no column {name}", path.display())))
    };
    let inputs: Vec<usize> = task.inputs.iter().map(|n| column(n)).collect();
    let expected = column(task.expected);
    let all: Vec<csv::StringRecord> = reader
        .records()
        .map(|r| r.unwrap_or_else(|e| fail(&e.to_string())))
        .collect();
    let step = (all.len() / count.max(1)).max(1);
    all.iter()
        .step_by(step)
        .take(count)
        .map(|record| {
            (
                inputs
                    .iter()
                    .map(|i| record.get(*i).unwrap_or_default().to_owned())
                    .collect(),
                record.get(expected).unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

/// One reflection request in the shape GEPA sends; usable when the new instruction differs
/// from the old one and keeps every `{variable}`.
fn reflect(
    runtime: &tokio::runtime::Runtime,
    model: &EmbeddedModel,
    task: &Task,
) -> (String, bool) {
    let request_text = format!(
        "I gave an assistant the following instruction to perform a task:\n```\n{}\n```\n\n\
         On one example its answer was scored 0. Feedback: the answer was longer than the \
         expected label and included an explanation; the expected output is only the label, \
         in lower case.\n\n\
         Write a new, improved instruction for the assistant. Keep every placeholder in curly \
         braces exactly as it is. Return the new instruction within ``` blocks.",
        task.prompt.trim()
    );
    let mut request = ChatRequest::new(model.id(), vec![ChatMessage::user(request_text)]);
    request.temperature = Some(0.0);
    request.max_tokens = Some(160);
    let answer = runtime
        .block_on(model.generate(&request))
        .unwrap_or_else(|e| fail(&e.to_string()));
    let text = answer.response.content().to_owned();
    let block = text
        .split("```")
        .nth(1)
        .map(|b| {
            b.split_once('\n').map_or(
                b,
                |(first, rest)| if first.trim().contains(' ') { b } else { rest },
            )
        })
        .unwrap_or("")
        .trim()
        .to_owned();
    let keeps_variables = task
        .inputs
        .iter()
        .all(|v| block.contains(&format!("{{{v}}}")));
    let differs = !block.is_empty() && block != task.prompt.trim();
    (block, keeps_variables && differs)
}

fn fail(message: &str) -> ! {
    eprintln!("model_choice: {message}");
    std::process::exit(1)
}
