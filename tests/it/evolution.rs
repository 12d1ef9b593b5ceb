//! `HttpEvolution` against `serve` (its evolution half running on the simulated model): start,
//! poll and history pages, every 400 rule, keys, unknown ids, batch jobs, a restart in the middle
//! of an execution, and the `executions` and `batch` commands.
use std::collections::BTreeMap;
use std::time::Duration;

use async_trait::async_trait;
use gepa_lab::evolution::wire::{
    BatchJobs, DatasetItem, Execution, HistoryRecord, StartExecution, Status,
};
use gepa_lab::evolution::{
    Evolution, EvolutionError, HttpEvolution, MAX_GENERATIONS, fetch_history,
};
use gepa_lab::http::ApiError;
use serde_json::json;

use crate::common::{Serve, raw, stdout};

const KEY: &str = "evo_test_key";
const OTHER_KEY: &str = "evo_other_key";
/// SimModel picks a listed label by a hash of the whole prompt, so every rewrite of the
/// instruction answers the rows differently and the engine has better prompts to find.
const SIM: &str = "sim:model=local-text,seed=3";
const SEED_PROMPT: &str = "Classify the sentiment of the review. Answer with one of: positive, negative\nReview: {review}";

const REVIEWS: [(&str, &str); 10] = [
    ("Arrived broken and support never answered.", "negative"),
    ("Works exactly as described, very happy.", "positive"),
    ("The battery died after two days.", "negative"),
    ("Great value, would buy again.", "positive"),
    ("Stopped working after a week.", "negative"),
    ("My kids love it.", "positive"),
    ("Cheap plastic, feels flimsy.", "negative"),
    ("Fast delivery and solid build.", "positive"),
    ("Not worth the money at all.", "negative"),
    ("Exceeded my expectations.", "positive"),
];

pub(crate) fn sentiment(budget: u64, minibatch: u64, pareto: u64) -> StartExecution {
    StartExecution {
        strategy: gepa_lab::evolution::wire::Strategy::Rpm,
        model: "gpt-4o-mini".into(),
        dataset_columns: vec!["review".into()],
        budget,
        minibatch_size: minibatch,
        pareto_size: pareto,
        evaluator: r#"{"model":"gpt-4o-mini","metric":"exact_match"}"#.into(),
        dataset: REVIEWS
            .iter()
            .cycle()
            .take((minibatch + pareto) as usize)
            .map(|(review, label)| DatasetItem {
                input: BTreeMap::from([("review".to_owned(), (*review).to_owned())]),
                expected_output: (*label).to_owned(),
            })
            .collect(),
        prompt: SEED_PROMPT.into(),
        custom_id: Some("sentiment-it".into()),
        engine: None,
    }
}

/// Polls (every 50 ms, as a test may) until `done` holds.
async fn poll_until(
    client: &HttpEvolution,
    id: &str,
    done: impl Fn(&Execution) -> bool,
) -> Execution {
    for _ in 0..1200 {
        let execution = client.get(id).await.expect("poll");
        if done(&execution) {
            return execution;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("execution {id} did not get there in 60 s");
}

pub(crate) async fn finished(client: &HttpEvolution, id: &str) -> Execution {
    poll_until(client, id, |e| e.status.is_final()).await
}

fn status_and_body(err: &EvolutionError) -> (u16, String) {
    match err {
        EvolutionError::Api(ApiError::Status { status, body, .. }) => {
            (status.as_u16(), body.clone())
        }
        other => panic!("expected an HTTP status, got {other:?}"),
    }
}

/// A service that ignores `page` and always answers with page 1.
struct IgnoresPage<'a>(&'a HttpEvolution);

#[async_trait]
impl Evolution for IgnoresPage<'_> {
    async fn start(&self, request: &StartExecution) -> Result<String, EvolutionError> {
        self.0.start(request).await
    }
    async fn get(&self, id: &str) -> Result<Execution, EvolutionError> {
        self.0.get(id).await
    }
    async fn list(
        &self,
        _: Option<u32>,
        limit: Option<u32>,
    ) -> Result<Vec<Execution>, EvolutionError> {
        self.0.list(Some(1), limit).await
    }
    async fn prompts(
        &self,
        id: &str,
        _: Option<u32>,
        limit: Option<u32>,
    ) -> Result<Vec<HistoryRecord>, EvolutionError> {
        self.0.prompts(id, Some(1), limit).await
    }
    async fn batch_jobs(&self) -> Result<BatchJobs, EvolutionError> {
        self.0.batch_jobs().await
    }
}

#[tokio::test]
async fn start_poll_and_read_every_history_page() {
    let serve = Serve::start(&[SIM], &[KEY]);
    let client = serve.evolution(Some(KEY));
    let id = client
        .start(&sentiment(60, 4, 6))
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", serve.log()));
    let execution = finished(&client, &id).await;
    assert_eq!(execution.status, Status::Completed, "{execution:?}");
    assert_eq!(execution.evolution_id.as_deref(), Some(id.as_str()));
    assert_eq!(execution.custom_id.as_deref(), Some("sentiment-it"));
    assert_eq!(execution.strategy.as_deref(), Some("RPM"));
    assert_eq!(execution.budget, Some(60.0));
    let prompt = execution
        .prompt
        .expect("a completed execution reports its prompt");

    let all = client.prompts(&id, Some(1), Some(1000)).await.unwrap();
    let n = all.len();
    assert!(n >= 3, "too short a history to test paging: {all:?}");
    assert_eq!(
        (all[0].generation, all[0].prompt.as_str()),
        (0.0, SEED_PROMPT)
    );
    let highest = all.iter().map(|r| r.score).fold(f64::MIN, f64::max);
    assert!(
        highest > all[0].score,
        "no improvement over the seed: {all:?}"
    );
    // The prompt reported is the run's best: the highest score among the seed and the
    // generations whose rows show a gain over it.
    let iterations = client
        .iterations(&id, 0)
        .await
        .unwrap()
        .expect("serve keeps the iteration records");
    let pareto = |generation: usize| {
        all.iter()
            .find(|r| r.generation as usize == generation)
            .and_then(|r| r.pareto_scores.as_deref())
    };
    let best = all
        .iter()
        .filter(|r| gepa_lab::engine::may_be_best(r.generation as usize, pareto, &iterations))
        .map(|r| r.score)
        .fold(f64::MIN, f64::max);
    assert_eq!(prompt.current_prompt_score, Some(best));

    // Every page size, including exact boundaries (an empty page ends them) and a last short
    // page, reads the same history.
    for limit in 1..=(n as u32 + 1) {
        let history = fetch_history(&client, &id, limit, MAX_GENERATIONS)
            .await
            .unwrap();
        assert_eq!(history.records, all, "limit {limit}");
        assert_eq!(history.pages, n as u32 / limit + 1, "limit {limit}");
        assert!(!history.repeated_page);
    }
    for page in 1..=(n as u32 / 2 + 1) {
        let got = client.prompts(&id, Some(page), Some(2)).await.unwrap();
        let start = (page as usize - 1) * 2;
        assert_eq!(got, all[start..(start + 2).min(n)], "page {page}");
    }
    let past_the_end = client.prompts(&id, Some(n as u32 + 1), Some(1)).await;
    assert_eq!(past_the_end.unwrap(), []);

    // A service that ignores `page` repeats page 1; paging stops there instead of looping.
    let history = fetch_history(&IgnoresPage(&client), &id, 2, MAX_GENERATIONS)
        .await
        .unwrap();
    assert!(history.repeated_page);
    assert_eq!(history.pages, 2);
    assert_eq!(history.records, all[..2]);

    let listed = client.list(None, None).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].evolution_id.as_deref(), Some(id.as_str()));
}

#[tokio::test]
async fn every_rule_of_start_execution_is_a_400_naming_the_rule_and_the_value() {
    let serve = Serve::start(&[SIM], &[KEY]);
    let client = serve.evolution(Some(KEY));
    type Change = fn(&mut StartExecution);
    let cases: Vec<(&str, Change, &str)> = vec![
        (
            "evolution-model",
            |r| r.model = "gpt-3".into(),
            "seen: \"gpt-3\"",
        ),
        (
            "dataset-columns-min",
            |r| {
                r.dataset_columns.clear();
                r.dataset.iter_mut().for_each(|item| item.input.clear());
            },
            "datasetColumns must list at least 1 column; seen: []",
        ),
        (
            "budget-min",
            |r| r.budget = 0,
            "budget must be at least 1; seen: 0",
        ),
        (
            "minibatch-min",
            |r| {
                r.minibatch_size = 0;
                r.pareto_size = 5;
            },
            "minibatchSize must be at least 1; seen: 0",
        ),
        (
            "pareto-min",
            |r| {
                r.minibatch_size = 5;
                r.pareto_size = 0;
            },
            "paretoSize must be at least 1; seen: 0",
        ),
        (
            "dataset-empty",
            |r| {
                r.minibatch_size = 1;
                r.pareto_size = 1;
                r.dataset.clear();
            },
            "dataset must have at least 1 item; seen: []",
        ),
        (
            "dataset-length",
            |r| r.pareto_size = 9,
            "seen: 5 items for minibatchSize 2 + paretoSize 9",
        ),
        (
            "dataset-input-keys",
            |r| {
                r.dataset[4].input.remove("review");
                r.dataset[4].input.insert("text".into(), "x".into());
            },
            "dataset[4].input must have exactly the datasetColumns as keys; seen: missing review; not in datasetColumns: text",
        ),
        (
            "expected-output-empty",
            |r| r.dataset[0].expected_output.clear(),
            "dataset[0].expectedOutput must have at least 1 character; seen: \"\"",
        ),
        (
            "prompt-empty",
            |r| r.prompt.clear(),
            "prompt must have at least 1 character",
        ),
        (
            "custom-id-length",
            |r| r.custom_id = Some("x".repeat(51)),
            "seen: 51 characters",
        ),
        (
            "evaluator-json",
            |r| r.evaluator = "exact_match please".into(),
            "seen: \"exact_match please\"",
        ),
        (
            "evaluator-model",
            |r| r.evaluator = r#"{"model":"gpt-4o-maxi","metric":"accuracy"}"#.into(),
            "evaluator.model must be a supported model (gpt-5-mini, gpt-5, gpt-4.1, gpt-4o, gpt-4o-mini); seen: \"gpt-4o-maxi\"",
        ),
    ];
    for (rule, change, shown) in cases {
        let mut request = sentiment(30, 2, 3);
        change(&mut request);
        let err = client.start(&request).await.expect_err(rule);
        let (status, body) = status_and_body(&err);
        assert_eq!(status, 400, "{rule}: {body}");
        assert_eq!(
            body.lines().count(),
            1,
            "{rule}: only its rule is broken: {body}"
        );
        assert!(
            body.starts_with(&format!("rule {rule}: ")),
            "{rule}: {body}"
        );
        assert!(body.contains(shown), "{rule}: {body}");
    }

    // Rules only a JSON body can break, sent as raw bodies.
    let url = format!("{}/api/v0/gepa/start_execution", serve.url);
    let valid = serde_json::to_value(sentiment(30, 2, 3)).unwrap();
    let mut missing = valid.clone();
    missing.as_object_mut().unwrap().remove("prompt");
    let with = |field: &str, value: serde_json::Value| {
        let mut body = valid.clone();
        body[field] = value;
        body
    };
    let objectives = |objectives: serde_json::Value| {
        with("gepaLabEngine", json!({ "objectives": objectives })).to_string()
    };
    let mut input_number = valid.clone();
    input_number["dataset"][1]["input"]["review"] = json!(42);
    let raw_cases: Vec<(&str, String, &str)> = vec![
        (
            "strategy",
            with("strategy", json!("GREEDY")).to_string(),
            "seen: \"GREEDY\"",
        ),
        (
            "body-json",
            "{\"strategy\": ".into(),
            "body must be a JSON object; seen: not JSON",
        ),
        ("body-json", "[]".into(), "seen: JSON array"),
        ("required", missing.to_string(), "prompt is required"),
        (
            "type",
            with("budget", json!("30")).to_string(),
            "budget must be a number; seen: string \"30\"",
        ),
        (
            "type",
            with("budget", json!(12.5)).to_string(),
            "budget must be a whole number; seen: 12.5",
        ),
        (
            "budget-min",
            with("budget", json!(-4)).to_string(),
            "budget must be at least 1; seen: -4",
        ),
        (
            "dataset-input-value",
            input_number.to_string(),
            "dataset[1].input.review must be a string; seen: number 42",
        ),
        // The experiment file's `[objectives]` rules, as `validate` names them.
        (
            "objectives-limit",
            objectives(json!({"prompt_tokens": {"limit": 0}})),
            "gepaLabEngine.objectives.prompt_tokens.limit must be a number above 0 and at most 1000000; seen: 0",
        ),
        (
            "objectives-weight",
            objectives(json!({"latency_ms": {"weight": 2}})),
            "gepaLabEngine.objectives.latency_ms.weight must be a number above 0 and at most 1; seen: 2",
        ),
        (
            "objectives-one-of",
            objectives(json!({"answer_tokens": {"limit": 10, "weight": 0.1}})),
            "gepaLabEngine.objectives.answer_tokens sets both limit and weight",
        ),
        (
            "objectives-one-of",
            objectives(json!({})),
            "gepaLabEngine.objectives must name a cost",
        ),
    ];
    for (rule, body, shown) in raw_cases {
        let response = raw()
            .post(&url)
            .header("x-api-key", KEY)
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), 400, "{rule}");
        let text = response.text().await.unwrap();
        assert!(
            text.starts_with(&format!("rule {rule}: ")),
            "{rule}: {text}"
        );
        assert!(text.contains(shown), "{rule}: {text}");
    }
    assert_eq!(client.list(None, None).await.unwrap(), []);
    // Whole numbers written as floats, as serve's own responses write them, are whole numbers.
    let mut floats = with("budget", json!(30.0));
    floats["paretoSize"] = serde_json::from_str("3e0").unwrap();
    let response = raw()
        .post(&url)
        .header("x-api-key", KEY)
        .header("content-type", "application/json")
        .body(floats.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(
        response.status().as_u16(),
        200,
        "{}",
        response.text().await.unwrap()
    );
    let started = client.list(None, None).await.unwrap();
    assert_eq!(started.len(), 1);
    assert_eq!(started[0].budget, Some(30.0));
}

#[tokio::test]
async fn keys_are_required_and_executions_belong_to_their_key() {
    let serve = Serve::start(&[SIM], &[KEY, OTHER_KEY]);
    let request = sentiment(12, 2, 3);
    for (key, body) in [
        (
            None,
            "missing API key: send the header x-api-key: <API_KEY>",
        ),
        (Some("not-a-key"), "invalid API key"),
    ] {
        let client = serve.evolution(key);
        let errors = [
            client.start(&request).await.unwrap_err(),
            client.get("any").await.unwrap_err(),
            client.list(None, None).await.unwrap_err(),
            client.prompts("any", None, None).await.unwrap_err(),
            client.batch_jobs().await.unwrap_err(),
        ];
        for err in &errors {
            assert_eq!(status_and_body(err), (401, body.to_owned()));
        }
    }
    // The inference API's Bearer header is not this API's header.
    let response = raw()
        .get(format!("{}/api/v0/gepa/get_all_executions", serve.url))
        .bearer_auth(KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 401);

    let mine = serve.evolution(Some(KEY));
    let theirs = serve.evolution(Some(OTHER_KEY));
    let id = mine.start(&request).await.unwrap();
    for client in [&mine, &theirs] {
        let unknown = "00000000-0000-4000-8000-000000000000";
        assert!(
            matches!(client.get(unknown).await, Err(EvolutionError::NotFound(got)) if got == unknown)
        );
        assert!(matches!(
            client.prompts(unknown, None, None).await,
            Err(EvolutionError::NotFound(_))
        ));
    }
    assert!(matches!(
        theirs.get(&id).await,
        Err(EvolutionError::NotFound(_))
    ));
    assert_eq!(theirs.list(None, None).await.unwrap(), []);
    assert_eq!(mine.list(None, None).await.unwrap().len(), 1);

    let response = raw()
        .get(format!(
            "{}/api/v0/gepa/get_single_execution/nope",
            serve.url
        ))
        .header("x-api-key", KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 404);
    assert_eq!(
        response.text().await.unwrap(),
        "no execution with evolutionId nope"
    );
    for (query, shown) in [
        (
            "page=0",
            "invalid parameter page: pages are numbered from 1; seen: 0",
        ),
        (
            "limit=x",
            "invalid parameter limit: must be a whole number from 1; seen: \"x\"",
        ),
    ] {
        let response = raw()
            .get(format!(
                "{}/api/v0/gepa/get_all_executions?{query}",
                serve.url
            ))
            .header("x-api-key", KEY)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), 400, "{query}");
        assert_eq!(response.text().await.unwrap(), shown);
    }
    let response = raw()
        .get(format!("{}/api/v0/gepa/get_execution_prompts", serve.url))
        .header("x-api-key", KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 400);
    assert_eq!(
        response.text().await.unwrap(),
        "invalid parameter evolutionId: is required"
    );
}

#[tokio::test]
async fn batch_jobs_have_the_contract_shape() {
    let serve = Serve::start(&[SIM], &[KEY]);
    let response = raw()
        .get(format!("{}/api/v0/batch/all_jobs", serve.url))
        .header("x-api-key", KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let body: serde_json::Value = response.json().await.unwrap();
    assert_eq!(body, json!({"success": true, "jobs": []}));
    let jobs = serve.evolution(Some(KEY)).batch_jobs().await.unwrap();
    assert!(jobs.success);
    assert!(jobs.jobs.is_empty());
}

/// serve keeps `in_progress` in SQLite before an execution's first model call, and the result
/// of every call after it: after a crash an `in_progress` execution continues from its
/// checkpoint, and a `pending` one is run.
#[tokio::test]
async fn a_restart_continues_the_running_execution_and_runs_the_queued_one() {
    let upstreams = ["sim:model=local-text,seed=3,latency_ms=150"];
    let extra = ["--max-running-executions", "1"];
    let serve = Serve::start_in(tempfile::tempdir().unwrap(), &upstreams, &[KEY], &extra);
    let client = serve.evolution(Some(KEY));
    let running = client.start(&sentiment(40, 3, 3)).await.unwrap();
    let queued = client.start(&sentiment(40, 3, 3)).await.unwrap();
    // The seed prompt has been scored: generation 0 is in the history.
    poll_until(&client, &running, |e| e.prompt.is_some()).await;
    let before = client.prompts(&running, None, None).await.unwrap();
    assert!(!before.is_empty());
    assert_eq!(client.get(&queued).await.unwrap().status, Status::Pending);
    let dir = serve.kill();

    let serve = Serve::start_in(dir, &upstreams, &[KEY], &extra);
    let client = serve.evolution(Some(KEY));
    let continued = finished(&client, &running).await;
    assert_eq!(
        continued.status,
        Status::Completed,
        "{continued:?}\n{}",
        serve.log()
    );
    // What was read before the crash is still there, never rewritten.
    let after = client.prompts(&running, None, None).await.unwrap();
    assert_eq!(after[..before.len()], before[..]);

    let resumed = finished(&client, &queued).await;
    assert_eq!(
        resumed.status,
        Status::Completed,
        "{resumed:?}\n{}",
        serve.log()
    );
    let ids: Vec<Option<String>> = client
        .list(None, None)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.evolution_id)
        .collect();
    assert_eq!(ids, [Some(running), Some(queued)]);
}

#[tokio::test]
async fn the_executions_and_batch_commands_read_serve() {
    let serve = Serve::start(&[SIM], &[KEY]);
    let client = serve.evolution(Some(KEY));
    let id = client.start(&sentiment(30, 2, 3)).await.unwrap();
    finished(&client, &id).await;
    let run = |args: &[&str]| {
        let output = crate::common::command()
            .args(args)
            .args(["--url", &serve.url])
            .env("GEPA_LAB_EVOLUTION_KEY", KEY)
            .output()
            .expect("the binary runs");
        let err = String::from_utf8_lossy(&output.stderr).into_owned();
        assert!(!stdout(&output).contains(KEY) && !err.contains(KEY));
        (output.status.code(), stdout(&output), err)
    };

    let (code, out, _) = run(&["executions", "list"]);
    assert_eq!(code, Some(0));
    assert!(out.starts_with("evolution_id"), "{out}");
    assert!(
        out.contains(&id) && out.contains("sentiment-it") && out.contains("completed"),
        "{out}"
    );

    let (code, out, _) = run(&["executions", "show", &id]);
    assert_eq!(code, Some(0));
    assert!(out.contains("status        completed\n"), "{out}");
    assert!(out.contains("prompt:\nClassify the sentiment"), "{out}");

    let all = client.prompts(&id, Some(1), Some(1000)).await.unwrap();
    let (code, out, _) = run(&[
        "executions",
        "history",
        &id,
        "--all-pages",
        "--limit",
        "1",
        "--json",
    ]);
    assert_eq!(code, Some(0));
    let printed: Vec<HistoryRecord> = serde_json::from_str(&out).unwrap();
    assert_eq!(printed, all);
    let (code, out, _) = run(&["executions", "history", &id]);
    assert_eq!(code, Some(0));
    assert!(out.starts_with("generation  score  prompt\n"), "{out}");
    assert_eq!(out.lines().count(), all.len() + 1);

    let (code, _, err) = run(&["executions", "show", "no-such-id"]);
    assert_eq!(code, Some(1));
    assert!(
        err.contains("no execution with evolutionId no-such-id"),
        "{err}"
    );

    let (code, out, err) = run(&["batch", "jobs"]);
    assert_eq!((code, out.as_str()), (Some(0), ""));
    assert!(err.contains("no batch jobs"), "{err}");
    let (code, out, _) = run(&["batch", "jobs", "--json"]);
    assert_eq!(code, Some(0));
    let body: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(body, json!({"success": true, "jobs": []}));
}

#[tokio::test]
async fn serve_caps_budgets_and_cancels_an_execution_for_good() {
    let upstreams = ["sim:model=local-text,seed=3,latency_ms=20"];
    let extra = ["--max-budget", "5000"];
    let serve = Serve::start_in(tempfile::tempdir().unwrap(), &upstreams, &[KEY], &extra);
    let client = serve.evolution(Some(KEY));

    // Past the cap: refused with the rule, before anything runs.
    let err = client.start(&sentiment(5001, 3, 3)).await.unwrap_err();
    assert_eq!(
        status_and_body(&err),
        (
            400,
            "rule budget-max: budget must be at most 5000 on this service; seen: 5001".into()
        )
    );

    // A long execution, cancelled from the command line while it runs.
    let id = client.start(&sentiment(5000, 3, 3)).await.unwrap();
    poll_until(&client, &id, |e| {
        e.budget_used.is_some_and(|used| used > 10.0)
    })
    .await;
    let cancel = |id: &str| {
        let output = crate::common::command()
            .args(["executions", "cancel", id, "--url", &serve.url])
            .env("GEPA_LAB_EVOLUTION_KEY", KEY)
            .output()
            .expect("the binary runs");
        let err = String::from_utf8_lossy(&output.stderr).into_owned();
        (output.status.code(), stdout(&output), err)
    };
    let (code, out, err) = cancel(&id);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("status        failed\n"), "{out}");
    assert!(out.contains("cancelled by its owner at "), "{out}");
    // The spend the cancel reports is the spend that stays: the cancel returns once the engine
    // has stopped, with the calls that returned until then, so no wait is needed to read it.
    let spent: Option<f64> = out
        .lines()
        .find_map(|line| line.strip_prefix("budget_used"))
        .and_then(|value| value.trim().parse().ok());
    assert!(spent.is_some_and(|used| used < 5000.0), "{out}");
    let cancelled = client.get(&id).await.unwrap();
    assert_eq!(cancelled.status, Status::Failed);
    assert_eq!(cancelled.budget_used, spent);
    let history = client.prompts(&id, None, Some(1000)).await.unwrap();
    assert!(!history.is_empty(), "what was done is kept");

    // It stays stopped: a second cancel finds it ended, and a restart does not run it again.
    let (code, _, err) = cancel(&id);
    assert_eq!(code, Some(1));
    assert!(
        err.contains(&format!("execution {id} already ended: failed")),
        "{err}"
    );
    let (code, _, err) = cancel("no-such-id");
    assert_eq!(code, Some(1));
    assert!(err.contains("has no cancel route"), "{err}");
    let dir = serve.kill();
    let serve = Serve::start_in(dir, &upstreams, &[KEY], &extra);
    let client = serve.evolution(Some(KEY));
    let after = client.get(&id).await.unwrap();
    assert_eq!(after.status, Status::Failed);
    assert!(
        after
            .error
            .unwrap_or_default()
            .starts_with("cancelled by its owner at "),
        "the cancel, not a restart, is the reason"
    );
    assert_eq!(after.budget_used, spent);
}

#[test]
fn history_all_pages_says_and_exits_6_when_a_repeated_page_stops_it() {
    use axum::routing::get;
    use axum::{Json, Router};
    // A service that ignores `page`: every page is the same two records.
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let app = Router::new().route(
        "/api/v0/gepa/get_execution_prompts",
        get(|| async {
            Json(json!({"prompts": [
                {"generation": 0, "score": 0.5, "prompt": "a"},
                {"generation": 1, "score": 0.6, "prompt": "b"},
            ]}))
        }),
    );
    let listener = runtime
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    runtime.spawn(async move { axum::serve(listener, app).await });
    let output = crate::common::command()
        .args([
            "executions",
            "history",
            "some-id",
            "--all-pages",
            "--limit",
            "2",
        ])
        .args(["--url", &url])
        .env("GEPA_LAB_EVOLUTION_KEY", KEY)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(6), "{stderr}");
    assert_eq!(
        stdout(&output).lines().count(),
        3,
        "the two records are still printed"
    );
    assert!(
        stderr.contains("warning: the history may be incomplete: page 2 brought no generation not"),
        "{stderr}"
    );
}

/// serve's iteration records (an extension): an unknown execution is `None` for that execution
/// only, a bad `limit` is a 400 naming the range, and a known one answers with its records.
#[tokio::test]
async fn iteration_records_are_offered_and_an_unknown_id_does_not_turn_them_off() {
    let serve = Serve::start(&[SIM], &[KEY]);
    let client = serve.evolution(Some(KEY));
    assert!(client.iterations("no-such-id", 0).await.unwrap().is_none());
    let id = client.start(&sentiment(40, 3, 3)).await.unwrap();
    finished(&client, &id).await;
    let records = client.iterations(&id, 0).await.unwrap().expect("offered");
    assert!(!records.is_empty());
    let later = client.iterations(&id, 1).await.unwrap().expect("offered");
    assert_eq!(later[..], records[1..]);
    let response = raw()
        .get(format!(
            "{}/api/v0/gepa/get_execution_iterations?evolutionId={id}&limit=0",
            serve.url
        ))
        .header("x-api-key", KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 400);
    assert_eq!(
        response.text().await.unwrap(),
        "invalid parameter limit: must be a whole number from 1 to 1000; seen: \"0\""
    );
}
