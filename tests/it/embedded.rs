//! The embedded model for real: the default GGUF model run by llama.cpp in this process, in
//! `gepa-lab chat`, and behind `gepa-lab serve`.
//!
//! These need the model file (`scripts/setup-model.sh`, which `.ci/run` runs first). Without
//! it they fail under CI (`CI` set), so a missing install can never pass as green; elsewhere
//! they print why they were skipped and return.
use std::sync::{Arc, OnceLock};

use futures::StreamExt;
use gepa_lab::inference::embedded::{self, DEFAULT_MODEL, FileState};
use gepa_lab::inference::wire::{JsonSchemaFormat, ResponseFormat};
use gepa_lab::inference::{
    ChatMessage, ChatRequest, EmbeddedConfig, EmbeddedModel, Inference, ModelChoice,
    validate_answer,
};
use serde_json::json;

use crate::common::{Serve, gepa_lab, stdout};

/// One test at a time uses the model: its answers would not get faster by sharing 2 cores, the
/// prefix-cache test needs its two requests back to back, and `serve`'s copy of the model would
/// compete with this process's for the same cores.
pub(crate) static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The default model, loaded once for every test here; `None` (after saying why) when it is not
/// installed outside CI.
fn model() -> Option<Arc<EmbeddedModel>> {
    static MODEL: OnceLock<Option<Arc<EmbeddedModel>>> = OnceLock::new();
    MODEL
        .get_or_init(|| {
            if !installed() {
                return None;
            }
            let config = EmbeddedConfig::from_env().expect("embedded model settings");
            Some(EmbeddedModel::load_with(ModelChoice::Default, config).expect("load the model"))
        })
        .clone()
}

/// Whether the default model is installed; panics under CI when it is not.
fn installed() -> bool {
    let dir = embedded::models_dir();
    let model = embedded::catalog::default_model();
    let problem = match embedded::file_state(model, &dir) {
        FileState::Ready => return true,
        FileState::Missing => "not installed".to_owned(),
        FileState::Unusable(reason) => reason,
    };
    let message = format!(
        "the embedded model {DEFAULT_MODEL} in {} is {problem}: run scripts/setup-model.sh",
        dir.display()
    );
    if std::env::var_os("CI").is_some() {
        panic!("{message} (CI must install it before the tests)");
    }
    eprintln!("skipped: {message}");
    false
}

fn ask(text: &str) -> ChatRequest {
    let mut request = ChatRequest::new("local", vec![ChatMessage::user(text)]);
    request.temperature = Some(0.0);
    request.max_tokens = Some(16);
    request
}

#[tokio::test]
async fn a_short_chat_is_answered_with_real_token_counts() {
    let _turn = TURN.lock().await;
    let Some(model) = model() else { return };
    let answer = model
        .chat(&ask(
            "What is the capital of France? Answer with the city name only.",
        ))
        .await
        .expect("an answer");
    assert!(answer.content().contains("Paris"), "{answer:?}");
    // Answered under the id asked for; the node names the model file behind it.
    assert_eq!(answer.model, "local");
    assert_eq!(
        answer.node_id(),
        Some(format!("local/{DEFAULT_MODEL}").as_str())
    );
    assert_eq!(answer.choices[0].finish_reason.as_deref(), Some("stop"));
    let usage = answer.usage.expect("usage");
    // The chat template adds a system turn and role markers around the 14-word question.
    assert!((20..80).contains(&usage.prompt_tokens), "{usage:?}");
    assert!((1..=4).contains(&usage.completion_tokens), "{usage:?}");
    assert_eq!(
        usage.total_tokens,
        usage.prompt_tokens + usage.completion_tokens
    );
}

#[tokio::test]
async fn max_tokens_cuts_the_answer_and_says_so() {
    let _turn = TURN.lock().await;
    let Some(model) = model() else { return };
    let mut request = ask("Write a long poem about the sea.");
    request.max_tokens = Some(5);
    let answer = model.chat(&request).await.expect("an answer");
    assert_eq!(answer.usage.expect("usage").completion_tokens, 5);
    assert_eq!(answer.choices[0].finish_reason.as_deref(), Some("length"));
    assert!(!answer.content().is_empty());
}

#[tokio::test]
async fn structured_output_follows_the_schema_of_a_dataset() {
    let _turn = TURN.lock().await;
    let Some(model) = model() else { return };
    let schema: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(crate::common::root().join("datasets/extraction.schema.json"))
            .expect("the extraction schema"),
    )
    .expect("JSON");
    let mut request = ask(
        "Extract the contact as JSON with name, company, email and date (YYYY-MM-DD or null).\n\
         Message: Hi team, this is Ana Ruiz from Helix Labs. Could we move our kickoff to \
         March 3rd, 2025? You can reach me at ana.ruiz@helixlabs.example.",
    );
    request.max_tokens = Some(96);
    request.response_format = Some(ResponseFormat::JsonSchema {
        json_schema: JsonSchemaFormat {
            name: "contact".into(),
            schema: schema.clone(),
        },
    });
    let answer = model.chat(&request).await.expect("a conforming answer");
    let value = validate_answer(&schema, answer.content()).expect("conforms");
    assert_eq!(value["name"], "Ana Ruiz", "{value}");
    assert_eq!(value["email"], "ana.ruiz@helixlabs.example", "{value}");
}

#[tokio::test]
async fn an_enum_schema_constrains_a_label() {
    let _turn = TURN.lock().await;
    let Some(model) = model() else { return };
    let schema = json!({"type": "object", "required": ["label"], "additionalProperties": false,
        "properties": {"label": {"enum": ["positive", "negative"]}}});
    let mut request = ask(
        "Classify the sentiment of this review.\nReview: The charging cable stopped working after two weeks.",
    );
    request.max_tokens = Some(32);
    request.response_format = Some(ResponseFormat::JsonSchema {
        json_schema: JsonSchemaFormat {
            name: "verdict".into(),
            schema,
        },
    });
    let answer = model.chat(&request).await.expect("a conforming answer");
    let value: serde_json::Value = serde_json::from_str(answer.content()).expect("JSON");
    assert_eq!(value, json!({"label": "negative"}));
}

#[tokio::test]
async fn streaming_sends_the_same_answer_piece_by_piece() {
    let _turn = TURN.lock().await;
    let Some(model) = model() else { return };
    let request = ask("List three primary colours, comma separated.");
    let whole = model.chat(&request).await.expect("an answer");
    let mut stream = model.chat_stream(&request).await.expect("a stream");
    let mut pieces = Vec::new();
    let mut finish = None;
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.expect("a chunk");
        assert_eq!(
            chunk.metadata.as_ref().and_then(|m| m.node_id.clone()),
            Some(format!("local/{DEFAULT_MODEL}"))
        );
        if let Some(reason) = chunk.choices[0].finish_reason.clone() {
            finish = Some(reason);
        }
        if !chunk.content().is_empty() {
            pieces.push(chunk.content().to_owned());
        }
    }
    assert!(pieces.len() > 1, "streamed as it decodes: {pieces:?}");
    assert_eq!(pieces.concat(), whole.content());
    assert_eq!(finish.as_deref(), Some("stop"));
}

#[tokio::test]
async fn a_shared_instruction_is_evaluated_once() {
    let _turn = TURN.lock().await;
    let Some(model) = model() else { return };
    let instruction = "Classify the sentiment of the review as positive or negative. \
                       Answer with one word, in lower case.";
    let review = |text: &str| {
        let mut request = ChatRequest::new(
            "local",
            vec![
                ChatMessage::system(instruction),
                ChatMessage::user(format!("Review: {text}")),
            ],
        );
        request.temperature = Some(0.0);
        request.max_tokens = Some(4);
        request
    };
    // The previous test's prompt sits in the cache: put the instruction there first.
    model
        .generate(&review("Great value."))
        .await
        .expect("an answer");
    let answer = model
        .generate(&review(
            "The headphones arrived a day early and sound great.",
        ))
        .await
        .expect("an answer");
    let stats = answer.stats;
    assert!(
        stats.prompt_tokens_evaluated < stats.prompt_tokens / 2,
        "{stats:?}"
    );
    assert_eq!(
        answer.response.usage.expect("usage").prompt_tokens,
        u64::from(stats.prompt_tokens),
        "usage counts the whole prompt, cached or not"
    );
    assert!(
        answer
            .response
            .content()
            .to_lowercase()
            .contains("positive"),
        "{:?}",
        answer.response
    );
}

#[tokio::test]
async fn concurrent_callers_are_all_answered() {
    let _turn = TURN.lock().await;
    let Some(model) = model() else { return };
    let model: Arc<dyn Inference> = model;
    let questions = ["2 + 2 = ?", "3 + 3 = ?", "4 + 4 = ?"];
    let answers = futures::future::join_all(questions.iter().map(|q| {
        let model = Arc::clone(&model);
        let mut request = ask(&format!("{q} Answer with the number only."));
        request.max_tokens = Some(4);
        async move { model.chat(&request).await }
    }))
    .await;
    let texts: Vec<String> = answers
        .into_iter()
        .map(|a| a.expect("an answer").content().to_owned())
        .collect();
    for (text, expected) in texts.iter().zip(["4", "6", "8"]) {
        assert!(text.contains(expected), "{texts:?}");
    }
}

/// A second copy of the default model with its own settings, answering to `local:<id>`.
fn copy(model: &EmbeddedModel, id: &str, slots: usize, reuse_prefix: bool) -> Arc<EmbeddedModel> {
    let mut config = EmbeddedConfig::from_env().expect("embedded model settings");
    config.slots = slots;
    config.reuse_prefix = reuse_prefix;
    EmbeddedModel::load_with(
        ModelChoice::File {
            id: format!("local:{id}"),
            path: model.info().path.clone(),
        },
        config,
    )
    .expect("a second copy of the model")
}

/// A request for `model` with `instruction` as the system message and `row` as the user's.
fn row_request(model: &EmbeddedModel, instruction: &str, row: &str) -> ChatRequest {
    let mut request = ChatRequest::new(
        model.id(),
        vec![ChatMessage::system(instruction), ChatMessage::user(row)],
    );
    request.temperature = Some(0.0);
    request.max_tokens = Some(4);
    request
}

const SENTIMENT: &str = "Classify the sentiment of the customer review below as positive or \
    negative. A review that asks for a refund is negative even when its tone is calm; a review \
    that mentions a small flaw but recommends the product is positive. Judge the words, not \
    the star ratings written in the text. Answer with one word, in lower case.";

const REVIEWS: [&str; 4] = [
    "Review: The headphones arrived a day early and sound great.",
    "Review: The charging cable stopped working after two weeks; I want my money back.",
    "Review: Small scratch on the lid, but I would buy this kettle again.",
    "Review: Support never answered my emails and the toy broke on day one.",
];

#[tokio::test]
async fn rows_of_one_version_sent_together_evaluate_the_instruction_once() {
    let _turn = TURN.lock().await;
    let Some(model) = model() else { return };
    let batched = copy(&model, "batched", 4, true);
    // The first row's prompt is evaluated whole; the others wait a step for its instruction
    // and copy it, instead of evaluating it side by side.
    let answers = futures::future::join_all(
        REVIEWS
            .iter()
            .map(|review| row_request(&batched, SENTIMENT, review))
            .map(|request| {
                let batched = Arc::clone(&batched);
                async move { batched.generate(&request).await }
            }),
    )
    .await;
    let stats: Vec<_> = answers
        .into_iter()
        .map(|answer| answer.expect("an answer").stats)
        .collect();
    let evaluated: u32 = stats.iter().map(|s| s.prompt_tokens_evaluated).sum();
    let whole: u32 = stats.iter().map(|s| s.prompt_tokens).sum();
    assert!(
        evaluated < whole / 2,
        "evaluated {evaluated} of {whole} prompt tokens: {stats:?}"
    );
}

#[tokio::test]
async fn two_versions_that_alternate_keep_their_prefixes() {
    let _turn = TURN.lock().await;
    let Some(model) = model() else { return };
    let batched = copy(&model, "alternating", 2, true);
    let other = "Decide whether the customer who wrote this review would buy from the shop \
        again. Consider delivery, quality, support and price together. Answer yes or no.";
    for (round, review) in REVIEWS.iter().enumerate() {
        for instruction in [SENTIMENT, other] {
            let answer = batched
                .generate(&row_request(&batched, instruction, review))
                .await
                .expect("an answer");
            let stats = answer.stats;
            if round > 0 {
                assert!(
                    stats.prompt_tokens_evaluated < stats.prompt_tokens / 2,
                    "round {round}: the version's instruction was evaluated again: {stats:?}"
                );
            }
        }
    }
}

#[tokio::test]
async fn batched_answers_are_those_of_one_at_a_time() {
    let _turn = TURN.lock().await;
    let Some(model) = model() else { return };
    let batched = copy(&model, "together", 4, true);
    let alone = copy(&model, "alone", 1, false);
    let questions = [
        "2 + 2 = ? Answer with the number only.",
        "Name the capital of France in one word.",
        "Write the word 'banana' backwards.",
        "List three primary colours, separated by commas.",
        "7 * 6 = ? Answer with the number only.",
        "Translate 'thank you' into Spanish.",
    ];
    let request = |model: &EmbeddedModel, text: &str| {
        let mut request = ChatRequest::new(model.id(), vec![ChatMessage::user(text)]);
        request.temperature = Some(0.0);
        request.max_tokens = Some(24);
        request
    };
    let together = futures::future::join_all(questions.iter().map(|q| request(&batched, q)).map(
        |request| {
            let batched = Arc::clone(&batched);
            async move { batched.chat(&request).await }
        },
    ))
    .await;
    let mut differ = Vec::new();
    for (question, answer) in questions.iter().zip(together) {
        let together = answer.expect("an answer").content().to_owned();
        let alone = alone
            .chat(&request(&alone, question))
            .await
            .expect("an answer")
            .content()
            .to_owned();
        if together != alone {
            differ.push((question, together, alone));
        }
    }
    // Batched arithmetic may round differently and, rarely, tip a greedy choice: at most one
    // answer in six may differ.
    assert!(differ.len() <= 1, "{differ:#?}");
}

#[tokio::test]
async fn the_time_limit_counts_generation_not_the_wait_in_the_queue() {
    let _turn = TURN.lock().await;
    let Some(model) = model() else { return };
    // One slot, so that requests queue.
    let model = copy(&model, "one-slot", 1, true);
    // A long answer occupies the model's one slot (600 tokens: about 15 s at the 0.5B
    // model's 41 tokens/s on an idle machine)...
    let mut long = ask("Count from 1 to 1000, separated by commas.");
    long.model = model.id().to_owned();
    long.max_tokens = Some(600);
    // ...while a short request with a 5-second limit (its own work takes well under a second)
    // waits behind it.
    let mut short = ask("2 + 2 = ? Answer with the number only.");
    short.model = model.id().to_owned();
    short.max_tokens = Some(3);
    short.timeout_secs = Some(5);
    let started = std::time::Instant::now();
    let (long_answer, short_answer) = tokio::join!(model.chat(&long), async {
        // Queued second.
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        let answer = model.chat(&short).await;
        (answer, started.elapsed())
    });
    long_answer.expect("the long answer");
    let (short_answer, waited) = short_answer;
    assert!(
        waited > std::time::Duration::from_secs(5),
        "the short request should have waited behind the long one for longer than its limit: \
         {waited:?}"
    );
    let short_answer = short_answer.expect("answered after waiting longer than its limit");
    assert!(short_answer.content().contains('4'), "{short_answer:?}");

    // A generation that itself runs past the limit is stopped, as a gateway would: 504.
    let mut endless = ask("Write a very long story about a lighthouse keeper.");
    endless.model = model.id().to_owned();
    endless.max_tokens = Some(2000);
    endless.timeout_secs = Some(1);
    let started = std::time::Instant::now();
    let err = model.chat(&endless).await.expect_err("timed out");
    assert!(started.elapsed() < std::time::Duration::from_secs(10));
    let text = err.to_string();
    assert!(text.contains("504"), "{text}");
    assert!(text.contains("timed out after 1 s"), "{text}");
}

#[tokio::test]
async fn other_model_ids_are_unavailable_here() {
    let _turn = TURN.lock().await;
    let Some(model) = model() else { return };
    let err = model
        .chat(&ChatRequest::new(
            "qwen3.5:9b",
            vec![ChatMessage::user("hi")],
        ))
        .await
        .unwrap_err();
    assert!(err.is_unavailable(), "{err}");
}

#[test]
fn the_cli_chats_with_the_local_model_in_process() {
    let _turn = TURN.blocking_lock();
    if !installed() {
        return;
    }
    let output = gepa_lab(&[
        "chat",
        "--model",
        "local",
        "--temperature",
        "0",
        "--max-tokens",
        "8",
        "What is 6 times 7? Answer with the number only.",
    ]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(stdout(&output).contains("42"), "{}", stdout(&output));
    assert!(
        stderr.contains(&format!("node local/{DEFAULT_MODEL}")),
        "{stderr}"
    );
    assert!(stderr.contains("tokens: "), "{stderr}");
}

#[tokio::test]
async fn serve_offers_the_local_model_over_http() {
    let _turn = TURN.lock().await;
    if !installed() {
        return;
    }
    let key = "dkn_live_local_test";
    let serve = Serve::start(&["local"], &[&format!("{key}:600")]);
    let client = serve.client(Some(key));
    let mut ids: Vec<String> = client
        .models()
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", serve.log()))
        .into_iter()
        .map(|m| m.id)
        .collect();
    ids.sort();
    assert_eq!(ids, ["local", &format!("local:{DEFAULT_MODEL}")]);
    let answer = client
        .chat(&ask("What is the capital of Italy? One word."))
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", serve.log()));
    assert!(answer.content().contains("Rome"), "{answer:?}");
    assert_eq!(
        answer.node_id(),
        Some(format!("local-0/local/{DEFAULT_MODEL}").as_str())
    );
    let usage = answer.usage.expect("usage");
    assert!(usage.prompt_tokens > 10 && usage.completion_tokens >= 1);
    let mut stream = client
        .chat_stream(&ask("Say hello."))
        .await
        .expect("a stream");
    let mut text = String::new();
    while let Some(chunk) = stream.next().await {
        text.push_str(chunk.expect("a chunk").content());
    }
    assert!(!text.trim().is_empty());
}

/// GEPA for real, in small: the local engine on the embedded model over real rows of the
/// sentiment dataset, with a budget of 6 calls.
#[tokio::test]
async fn a_tiny_gepa_run_on_real_rows_stays_within_its_budget() {
    use gepa_lab::evolution::wire::{DatasetItem, StartExecution, Status};
    use gepa_lab::evolution::{Evolution, fetch_history};
    use gepa_lab::local::{LocalEvolution, LocalSettings, ModelSettings};

    let _turn = TURN.lock().await;
    let Some(model) = model() else { return };
    let rows: Vec<(String, String)> =
        csv::Reader::from_path(crate::common::root().join("datasets/sentiment.csv"))
            .expect("the dataset")
            .records()
            .take(3)
            .map(|record| {
                let record = record.expect("a row");
                (record[0].to_owned(), record[1].to_owned())
            })
            .collect();
    let request = StartExecution {
        strategy: gepa_lab::evolution::wire::Strategy::Rpm,
        model: "gpt-4o-mini".into(),
        dataset_columns: vec!["review".into()],
        // The seed on 2 Pareto rows, then one iteration at its worst case: the parent and the
        // child on the 1 minibatch row, one reflection, the child on the Pareto rows.
        budget: 7,
        minibatch_size: 1,
        pareto_size: 2,
        evaluator: r#"{"model":"gpt-4o-mini","metric":"accuracy"}"#.into(),
        dataset: rows
            .iter()
            .map(|(review, label)| DatasetItem {
                input: [("review".to_owned(), review.clone())].into(),
                // An answer the model never gives in 4 tokens, so the parent is not perfect on
                // its minibatch row and the iteration reaches a reflection.
                expected_output: format!("the label is {label}"),
            })
            .collect(),
        prompt: "Is this review positive or negative? Answer with one word.\nReview: {review}"
            .into(),
        custom_id: Some("tiny-real".into()),
        // One reflection iteration is what this test pays for; worked examples would take the
        // budget first.
        engine: Some(gepa_lab::evolution::wire::EngineSettings {
            demonstrations: Some(0),
            ..Default::default()
        }),
    };
    let counted = Arc::new(Counted {
        inner: model,
        calls: std::sync::atomic::AtomicU64::new(0),
    });
    let inference: Arc<dyn Inference> = counted.clone();
    let mut settings = LocalSettings::new(ModelSettings::new("local"));
    settings.models.max_tokens = Some(4);
    let evolution = LocalEvolution::new(inference.clone(), inference, settings, None);
    let id = evolution.start(&request).await.expect("started");
    let execution = loop {
        let execution = evolution.get(&id).await.expect("polled");
        if execution.status.is_final() {
            break execution;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    assert_eq!(execution.status, Status::Completed, "{execution:?}");
    let history = fetch_history(&evolution, &id, 10, gepa_lab::evolution::MAX_GENERATIONS)
        .await
        .expect("history");
    assert_eq!(history.records[0].generation, 0.0);
    assert_eq!(history.records[0].prompt, request.prompt);
    let score = history.records[0].score;
    assert!(
        (0.0..=1.0).contains(&score),
        "the seed's mean Pareto score: {score}"
    );
    let calls = counted.calls.load(std::sync::atomic::Ordering::SeqCst);
    assert!(
        (4..=7).contains(&calls),
        "the seed's 2 Pareto rows, the parent's minibatch row and a reflection at least, the \
         budget of 7 at most: {calls}"
    );
    assert_eq!(execution.budget_used, Some(calls as f64), "{execution:?}");
    let iterations = evolution
        .iterations(&id, 0)
        .await
        .expect("iterations")
        .expect("the built-in engine records its iterations");
    assert_eq!(iterations.len(), 1, "{iterations:?}");
    assert!(
        iterations[0].cost().reflection_calls == 1,
        "the iteration reached a reflection: {:?}",
        iterations[0]
    );
}

/// Counts the model calls the engine makes: each one costs a unit of budget.
struct Counted {
    inner: Arc<EmbeddedModel>,
    calls: std::sync::atomic::AtomicU64,
}

#[async_trait::async_trait]
impl Inference for Counted {
    async fn models(
        &self,
    ) -> Result<Vec<gepa_lab::inference::Model>, gepa_lab::inference::InferenceError> {
        self.inner.models().await
    }

    async fn chat(
        &self,
        request: &ChatRequest,
    ) -> Result<gepa_lab::inference::ChatResponse, gepa_lab::inference::InferenceError> {
        self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.inner.chat(request).await
    }

    async fn chat_stream(
        &self,
        request: &ChatRequest,
    ) -> Result<gepa_lab::inference::ChunkStream, gepa_lab::inference::InferenceError> {
        self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.inner.chat_stream(request).await
    }
}

#[tokio::test]
async fn answers_do_not_depend_on_the_previous_request() {
    let _turn = TURN.lock().await;
    let Some(model) = model() else { return };
    // A second copy that evaluates every prompt from scratch.
    let mut config = EmbeddedConfig::from_env().expect("embedded model settings");
    config.reuse_prefix = false;
    let fresh = EmbeddedModel::load_with(
        ModelChoice::File {
            id: "local:fresh".into(),
            path: model.info().path.clone(),
        },
        config,
    )
    .expect("a second copy");
    let instruction = std::fs::read_to_string(
        crate::common::root().join("experiments/prompts/support_tickets.txt"),
    )
    .expect("the support-tickets prompt");
    let tickets = [
        (
            "Charged twice this month",
            "Our card was charged $49 twice on March 2. Can you refund the duplicate charge?",
        ),
        (
            "Change the delivery address",
            "Please ship my order to my office instead: 12 Main Street.",
        ),
        (
            "Webhook signatures don't verify",
            "Since yesterday every webhook we receive fails signature verification.",
        ),
    ];
    for (subject, body) in tickets {
        let text = instruction
            .replace("{subject}", subject)
            .replace("{body}", body);
        let mut request = ask(&text);
        request.model = "local".into();
        let reused = model.generate(&request).await.expect("an answer");
        request.model = "local:fresh".into();
        let scratch = fresh.generate(&request).await.expect("an answer");
        assert_eq!(
            reused.response.content(),
            scratch.response.content(),
            "{subject}: {:?} vs {:?}",
            reused.stats,
            scratch.stats
        );
    }
}

#[test]
fn init_asks_the_installed_model_what_labels_named_label_describe() {
    let _turn = TURN.blocking_lock();
    if !installed() {
        return;
    }
    // A models folder holding only the default model: `init` names the labels with it and,
    // with one model, probes none.
    let dir = tempfile::tempdir().unwrap();
    let models = dir.path().join("models");
    std::fs::create_dir(&models).unwrap();
    let file = embedded::catalog::default_model().file_name;
    // The file and the record of its checked hash, beside it.
    for name in [file.to_owned(), format!("{file}.sha256")] {
        std::os::unix::fs::symlink(embedded::models_dir().join(&name), models.join(&name)).unwrap();
    }
    let mut csv = String::from("text,label\n");
    for (i, (text, label)) in [
        ("I can't stop smiling today", "joy"),
        ("This makes me so furious", "anger"),
        ("I miss her every single day", "sadness"),
    ]
    .iter()
    .cycle()
    .take(60)
    .enumerate()
    {
        csv.push_str(&format!("{text} ({i}),{label}\n"));
    }
    std::fs::write(dir.path().join("moods.csv"), csv).unwrap();
    let output = crate::common::command()
        .current_dir(dir.path())
        .env("GEPA_LAB_MODELS", &models)
        .args(["init", "--dataset", "moods.csv"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    let written = std::fs::read_to_string(dir.path().join("moods.toml")).unwrap();
    let seed_line = written
        .lines()
        .find_map(|line| line.strip_prefix("seed = \"\"\""))
        .unwrap();
    // Named or not, the terminal says which, and the file agrees with it.
    if let Some(name) = stderr
        .split("local named them \"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
    {
        assert_eq!(
            seed_line,
            format!("Give the {name} of this text."),
            "{written}"
        );
        assert!(
            written.contains(&format!("names what the labels give ({name:?})")),
            "{written}"
        );
    } else {
        assert!(
            stderr.contains("the seed lists the labels only"),
            "{stderr}"
        );
        assert_eq!(seed_line, "Text: {text}", "{written}");
    }
    assert!(!stderr.contains("probe:"), "{stderr}");
}
