//! Fault injection: the real HTTP clients, and the binary, against a service inside the test
//! process that answers whatever fault a test scripts, down to the bytes on the socket: 429
//! storms with absurd `Retry-After` values, 5xx bursts, reset connections, truncated streams,
//! invalid and oversized bodies, history pages that repeat, cycle, go back or never end, and
//! executions that never finish. Each case must end in bounded time, with what was gathered
//! kept and the fault named.
use std::collections::HashSet;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use gepa_lab::evolution::{
    EvolutionConfig, EvolutionError, HttpEvolution, MAX_GENERATIONS, fetch_history,
};
use gepa_lab::http::{ApiError, RetryPolicy};
use gepa_lab::inference::{ChatMessage, ChatRequest, HttpInference, Inference, InferenceConfig};
use gepa_lab::store::ExecutionState;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::common::{output_within, root};

/// What the scripted service does with one request.
enum Reply {
    /// A whole answer: status, extra headers, body.
    Http(u16, Vec<(&'static str, String)>, Vec<u8>),
    /// An event stream of these bytes, after which the connection closes.
    Stream(String),
    /// The connection is closed with no answer.
    Reset,
    /// Nothing is ever answered; the connection stays open.
    Stall,
}

fn json(status: u16, body: serde_json::Value) -> Reply {
    Reply::Http(status, Vec::new(), body.to_string().into_bytes())
}

fn too_many(retry_after: &str) -> Reply {
    Reply::Http(
        429,
        vec![("retry-after", retry_after.to_owned())],
        b"{\"error\":\"slow down\"}".to_vec(),
    )
}

fn answer(text: &str) -> Reply {
    json(
        200,
        serde_json::json!({
            "id": "c1", "model": "m",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                         "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}
        }),
    )
}

/// One request as the script sees it: its method and path (query included), and how many
/// requests came before it.
struct Request {
    method: String,
    path: String,
    index: usize,
}

type Script = dyn Fn(&Request) -> Reply + Send + Sync;

/// The scripted service, on 127.0.0.1, until dropped.
struct Faulty {
    url: String,
    requests: Arc<AtomicUsize>,
    runtime: tokio::runtime::Runtime,
}

impl Faulty {
    fn start(script: impl Fn(&Request) -> Reply + Send + Sync + 'static) -> Faulty {
        let runtime = tokio::runtime::Runtime::new().expect("runtime");
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("address"));
        let requests = Arc::new(AtomicUsize::new(0));
        let script: Arc<Script> = Arc::new(script);
        let counter = requests.clone();
        runtime.spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                let (script, counter) = (script.clone(), counter.clone());
                tokio::spawn(async move { serve_one(socket, &*script, &counter).await });
            }
        });
        Faulty {
            url,
            requests,
            runtime,
        }
    }

    fn requests(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }

    fn inference(&self, max_elapsed: Duration) -> HttpInference {
        let mut config = InferenceConfig::new(self.url.clone(), None);
        config.retry = fast_retries(max_elapsed, config.retry);
        HttpInference::new(config).expect("client")
    }

    fn evolution(&self) -> HttpEvolution {
        let mut config = EvolutionConfig::new(self.url.clone(), None);
        config.retry = fast_retries(Duration::from_secs(5), config.retry);
        HttpEvolution::new(config).expect("client")
    }

    fn block_on<F: std::future::Future>(&self, future: F) -> F::Output {
        self.runtime.block_on(future)
    }
}

fn fast_retries(max_elapsed: Duration, policy: RetryPolicy) -> RetryPolicy {
    RetryPolicy {
        base_delay: Duration::from_millis(10),
        max_delay: Duration::from_millis(100),
        max_elapsed,
        ..policy
    }
}

/// Reads one request (head and declared body) and answers it as the script says, with
/// `Connection: close`: every request is on its own connection.
async fn serve_one(mut socket: tokio::net::TcpStream, script: &Script, counter: &AtomicUsize) {
    let mut bytes = Vec::new();
    let mut buffer = [0u8; 8192];
    let head_end = loop {
        if let Some(end) = bytes.windows(4).position(|w| w == b"\r\n\r\n") {
            break end + 4;
        }
        match socket.read(&mut buffer).await {
            Ok(0) | Err(_) => return,
            Ok(n) => bytes.extend_from_slice(&buffer[..n]),
        }
    };
    let head = String::from_utf8_lossy(&bytes[..head_end]).into_owned();
    let length: usize = head
        .lines()
        .find_map(|line| {
            let (name, value) = line.split_once(':')?;
            name.eq_ignore_ascii_case("content-length")
                .then(|| value.trim().parse().ok())?
        })
        .unwrap_or(0);
    while bytes.len() < head_end + length {
        match socket.read(&mut buffer).await {
            Ok(0) | Err(_) => return,
            Ok(n) => bytes.extend_from_slice(&buffer[..n]),
        }
    }
    let mut first = head.split_whitespace();
    let request = Request {
        method: first.next().unwrap_or_default().to_owned(),
        path: first.next().unwrap_or_default().to_owned(),
        index: counter.fetch_add(1, Ordering::SeqCst),
    };
    let (status, headers, body) = match script(&request) {
        Reply::Reset => return,
        Reply::Stall => {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            return;
        }
        Reply::Stream(events) => {
            let head =
                "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n";
            let _ = socket.write_all(head.as_bytes()).await;
            let _ = socket.write_all(events.as_bytes()).await;
            let _ = socket.shutdown().await;
            return;
        }
        Reply::Http(status, headers, body) => (status, headers, body),
    };
    let mut head = format!(
        "HTTP/1.1 {status} Scripted\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
         connection: close\r\n",
        body.len()
    );
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    let _ = socket.write_all(head.as_bytes()).await;
    let _ = socket.write_all(&body).await;
    let _ = socket.shutdown().await;
}

fn chat() -> ChatRequest {
    let mut request = ChatRequest::new("m", vec![ChatMessage::user("hello")]);
    request.max_tokens = Some(8);
    request
}

/// Runs `case` and fails when it took `limit` or longer. Limits are a few times what a case
/// takes on an idle machine, so that a busy CI passes; what they catch is a wait of a day (a
/// `Retry-After` taken at its word) or one that never ends.
fn within<T>(limit: Duration, case: impl FnOnce() -> T) -> T {
    let started = Instant::now();
    let result = case();
    let took = started.elapsed();
    assert!(took < limit, "took {took:?}, more than {limit:?}");
    result
}

#[test]
fn a_429_storm_is_waited_out_then_answered() {
    let service = Faulty::start(|request| {
        if request.index < 6 {
            too_many("0")
        } else {
            answer("hi")
        }
    });
    let client = service.inference(Duration::from_secs(20));
    let response = within(Duration::from_secs(30), || {
        service.block_on(client.chat(&chat())).expect("answered")
    });
    assert_eq!(response.content(), "hi");
    assert_eq!(client.stats().rate_limited, 6);
    assert_eq!(service.requests(), 7);
}

#[test]
fn an_absurd_retry_after_ends_the_request_at_once_without_a_panic() {
    // Each is beyond the client's time budget (here 30 s): the request ends at the first 429.
    for retry_after in ["86400", "1e20", "99999999999999999999"] {
        let service = Faulty::start(move |_| too_many(retry_after));
        let client = service.inference(Duration::from_secs(30));
        let error = within(Duration::from_secs(10), || {
            service.block_on(client.chat(&chat())).unwrap_err()
        });
        let text = error.to_string();
        assert!(text.contains("429"), "Retry-After {retry_after}: {text}");
        assert_eq!(service.requests(), 1, "Retry-After {retry_after}");
        // Nor does it hold the client's next request for a day: that one is sent, and ends
        // at its own answer.
        let next = service.block_on(async {
            tokio::time::timeout(Duration::from_secs(10), client.chat(&chat())).await
        });
        let error = next
            .unwrap_or_else(|_| panic!("Retry-After {retry_after}: the next request waited"))
            .unwrap_err();
        assert!(error.to_string().contains("429"), "{error}");
        assert_eq!(service.requests(), 2, "Retry-After {retry_after}");
    }
    // No delay the client can use: it backs off, and a 429 is retried until the time budget
    // (here 3 s) is spent, however many came.
    let service = Faulty::start(|_| too_many("-5"));
    let client = service.inference(Duration::from_secs(3));
    let error = within(Duration::from_secs(20), || {
        service.block_on(client.chat(&chat())).unwrap_err()
    });
    assert!(error.to_string().contains("429"), "{error}");
    assert!(service.requests() >= 2, "backed off and tried again");
}

#[test]
fn a_retry_after_in_words_falls_back_to_backoff() {
    let service = Faulty::start(|request| {
        if request.index < 2 {
            too_many("soon, maybe")
        } else {
            answer("hi")
        }
    });
    let client = service.inference(Duration::from_secs(20));
    let response = within(Duration::from_secs(20), || {
        service.block_on(client.chat(&chat())).expect("answered")
    });
    assert_eq!(response.content(), "hi");
    assert_eq!(service.requests(), 3);
}

#[test]
fn a_5xx_burst_is_retried_and_a_longer_one_is_reported_with_its_status() {
    let service = Faulty::start(|request| match request.index {
        0 => json(500, serde_json::json!({"error": "boom"})),
        1 => json(502, serde_json::json!({"error": "bad gateway"})),
        2 => json(504, serde_json::json!({"error": "timeout"})),
        _ => answer("hi"),
    });
    let client = service.inference(Duration::from_secs(20));
    let response = within(Duration::from_secs(20), || {
        service.block_on(client.chat(&chat())).expect("answered")
    });
    assert_eq!(response.content(), "hi");
    assert_eq!(service.requests(), 4);

    let service = Faulty::start(|_| json(500, serde_json::json!({"error": "down for good"})));
    let client = service.inference(Duration::from_secs(20));
    let error = within(Duration::from_secs(20), || {
        service.block_on(client.chat(&chat())).unwrap_err()
    });
    assert!(error.to_string().contains("500"), "{error}");
    assert!(error.to_string().contains("down for good"), "{error}");
    assert_eq!(
        service.requests(),
        RetryPolicy::default().max_attempts as usize,
        "attempts are capped"
    );
}

#[test]
fn reset_and_stalled_connections_end_in_an_error_in_bounded_time() {
    let service = Faulty::start(|_| Reply::Reset);
    let client = service.inference(Duration::from_secs(20));
    let error = within(Duration::from_secs(10), || {
        service.block_on(client.chat(&chat())).unwrap_err()
    });
    // The request reached the service, which may have acted on it: a chat is not sent again.
    assert!(error.to_string().contains("request failed"), "{error}");
    assert_eq!(service.requests(), 1);

    // A stalled answer: the request's own time-out (its `timeout_secs` and the 10 s the client
    // grants the server to say it timed out) ends the attempt, and the retry budget the request.
    let service = Faulty::start(|_| Reply::Stall);
    let client = service.inference(Duration::from_secs(3));
    let mut request = chat();
    request.timeout_secs = Some(1);
    let error = within(Duration::from_secs(30), || {
        service.block_on(client.chat(&request)).unwrap_err()
    });
    assert!(error.to_string().contains("timed out"), "{error}");
}

#[test]
fn a_truncated_stream_keeps_its_chunks_and_says_it_was_cut() {
    let service = Faulty::start(|_| {
        Reply::Stream(
            "data: {\"choices\":[{\"delta\":{\"content\":\"Hel\"}}]}\n\n\
             data: {\"choices\":[{\"delta\":{\"content\":\"lo\"}}]}\n\n\
             data: {\"choices\":[{\"del"
                .to_owned(),
        )
    });
    let client = service.inference(Duration::from_secs(5));
    let items = within(Duration::from_secs(10), || {
        service.block_on(async {
            let stream = client.chat_stream(&chat()).await.expect("stream opened");
            stream.collect::<Vec<_>>().await
        })
    });
    let text: String = items
        .iter()
        .filter_map(|item| item.as_ref().ok())
        .filter_map(|chunk| chunk.choices.first())
        .filter_map(|choice| choice.delta.content.clone())
        .collect();
    assert_eq!(text, "Hello", "the chunks before the cut are kept");
    let last = items.last().expect("items").as_ref().unwrap_err();
    assert!(last.to_string().contains("[DONE]"), "{last}");
}

#[test]
fn invalid_and_oversized_bodies_are_errors_read_no_further_than_the_bound() {
    let service = Faulty::start(|_| Reply::Http(200, Vec::new(), b"<html>not json".to_vec()));
    let client = service.inference(Duration::from_secs(5));
    let error = service.block_on(client.chat(&chat())).unwrap_err();
    assert!(error.to_string().contains("<html>not json"), "{error}");
    assert_eq!(
        service.requests(),
        1,
        "an undecodable answer is not asked again"
    );

    // Past the client's bound (16 MiB): refused while reading, not kept.
    let big = gepa_lab::http::MAX_BODY_BYTES + 1024 * 1024;
    let service = Faulty::start(move |_| {
        let mut body = b"{\"choices\":[{\"message\":{\"content\":\"".to_vec();
        body.resize(big, b'x');
        Reply::Http(200, Vec::new(), body)
    });
    let client = service.inference(Duration::from_secs(5));
    let error = within(Duration::from_secs(30), || {
        service.block_on(client.chat(&chat())).unwrap_err()
    });
    assert!(error.to_string().contains("larger than"), "{error}");
    assert_eq!(service.requests(), 1);
}

/// One history record of `generation`, its prompt tagged so that pages can differ in content.
fn record(generation: u64, tag: &str) -> serde_json::Value {
    serde_json::json!({"generation": generation, "score": 0.5, "prompt": format!("p{generation}{tag}")})
}

/// The 1-based `page=` of a request's query.
fn page_of(request: &Request) -> u64 {
    request
        .path
        .split(['?', '&'])
        .find_map(|part| part.strip_prefix("page=")?.parse().ok())
        .unwrap_or(1)
}

/// A `get_execution_prompts` page of two records starting at `first`.
fn page(first: u64, tag: &str) -> Reply {
    json(
        200,
        serde_json::json!({"prompts": [record(first, tag), record(first + 1, tag)]}),
    )
}

#[test]
fn history_pages_that_repeat_cycle_go_back_or_never_end_stop_with_what_was_read() {
    struct Case {
        name: &'static str,
        pages: fn(u64) -> Reply,
        generations: usize,
        requests: usize,
        repeated: bool,
        truncated: bool,
    }
    let cases = [
        Case {
            name: "ignores page",
            pages: |_| page(0, ""),
            generations: 2,
            requests: 2,
            repeated: true,
            truncated: false,
        },
        Case {
            name: "cycles A B C",
            pages: |n| page(2 * ((n - 1) % 3), ""),
            generations: 6,
            requests: 4,
            repeated: true,
            truncated: false,
        },
        Case {
            name: "goes back with other content",
            pages: |n| {
                if n <= 2 {
                    page(2 * (n - 1), "")
                } else {
                    page(0, &format!(" again {n}"))
                }
            },
            generations: 4,
            requests: 3,
            repeated: true,
            truncated: false,
        },
        Case {
            name: "never ends",
            pages: |n| page(2 * (n - 1), ""),
            generations: 40,
            requests: 21,
            repeated: false,
            truncated: true,
        },
    ];
    for case in cases {
        let pages = case.pages;
        let service = Faulty::start(move |request| pages(page_of(request)));
        let client = service.evolution();
        let history = within(Duration::from_secs(20), || {
            service
                .block_on(fetch_history(&client, "e1", 2, 40))
                .expect(case.name)
        });
        assert_eq!(history.records.len(), case.generations, "{}", case.name);
        assert_eq!(service.requests(), case.requests, "{}", case.name);
        assert_eq!(history.repeated_page, case.repeated, "{}", case.name);
        assert_eq!(history.truncated, case.truncated, "{}", case.name);
        let generations: HashSet<u64> = history
            .records
            .iter()
            .map(|r| r.generation as u64)
            .collect();
        assert_eq!(
            generations.len(),
            case.generations,
            "one record per generation"
        );
        assert!(
            history.records.iter().all(|r| !r.prompt.contains("again")),
            "{}: a stale page is not taken",
            case.name
        );
    }
}

#[test]
fn a_history_route_that_fails_mid_way_is_an_error_not_a_short_history() {
    let service = Faulty::start(|request| {
        if page_of(request) == 1 {
            page(0, "")
        } else {
            json(500, serde_json::json!({"error": "gone"}))
        }
    });
    let client = service.evolution();
    let error = within(Duration::from_secs(20), || {
        service
            .block_on(fetch_history(&client, "e1", 2, MAX_GENERATIONS))
            .unwrap_err()
    });
    assert!(
        matches!(error, EvolutionError::Api(ApiError::Status { .. })),
        "{error}"
    );
}

#[test]
fn an_execution_that_never_finishes_ends_the_run_at_its_timeout_with_its_state_kept() {
    let service = Faulty::start(|request| {
        if request.method == "POST" && request.path.ends_with("/start_execution") {
            json(
                200,
                serde_json::json!({"evolutionId": format!("e{}", request.index)}),
            )
        } else if request.path.contains("/get_single_execution/") {
            json(
                200,
                serde_json::json!({"status": "in_progress", "budgetUsed": 3}),
            )
        } else if request.path.contains("/get_execution_prompts") {
            json(200, serde_json::json!({"prompts": []}))
        } else if request.path == "/v1/chat/completions" {
            answer("positive")
        } else {
            json(500, serde_json::json!({"error": "not scripted"}))
        }
    });
    let out = tempfile::tempdir().unwrap();
    let output = within(Duration::from_secs(60), || {
        crate::common::command()
            .current_dir(root())
            .env("GEPA_LAB_EVOLUTION_KEY", "k")
            .env("GEPA_LAB_INFERENCE_KEY", "k")
            .args(["run", "--backend", &service.url, "--yes", "--timeout", "2"])
            .args(["--poll-interval", "0.2", "--out"])
            .arg(out.path())
            .arg("tests/fixtures/run_experiments/two_variants.toml")
            .stdin(Stdio::null())
            .output()
            .expect("run")
    });
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_ne!(output.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("still running at the time-out"), "{stderr}");
    let dir = crate::run::run_dir(out.path());
    let manifest = dir.read_manifest().unwrap();
    let states: Vec<&ExecutionState> = manifest.executions.iter().map(|e| &e.state).collect();
    assert_eq!(states.len(), 2);
    assert!(
        states
            .iter()
            .all(|state| matches!(state, ExecutionState::Running { .. })),
        "kept running for a resume: {states:?}"
    );
    // What could be done was: the seeds were answered on every holdout row.
    let replay: Vec<gepa_lab::store::ReplayRow> = dir.read_csv("replay.csv").unwrap();
    assert_eq!(replay.len(), 24);
    assert!(replay.iter().all(|row| row.error.is_empty()), "{replay:?}");
}

#[test]
fn a_replay_during_an_outage_stops_sending_and_a_resume_asks_again() {
    use std::sync::atomic::AtomicBool;
    let healthy = Arc::new(AtomicBool::new(false));
    let chats = Arc::new(AtomicUsize::new(0));
    let (up, asked) = (healthy.clone(), chats.clone());
    let service = Faulty::start(move |request| {
        if request.path.ends_with("/start_execution") {
            json(
                200,
                serde_json::json!({"evolutionId": format!("e{}", request.index)}),
            )
        } else if request.path.contains("/get_single_execution/") {
            json(200, serde_json::json!({"status": "completed"}))
        } else if request.path.contains("/get_execution_prompts") {
            json(200, serde_json::json!({"prompts": []}))
        } else if request.path == "/v1/chat/completions" {
            asked.fetch_add(1, Ordering::SeqCst);
            if up.load(Ordering::SeqCst) {
                answer("positive")
            } else {
                json(
                    500,
                    serde_json::json!({"error": "the whole service is down"}),
                )
            }
        } else {
            json(500, serde_json::json!({"error": "not scripted"}))
        }
    });
    let out = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| {
        crate::common::command()
            .current_dir(root())
            .env("GEPA_LAB_EVOLUTION_KEY", "k")
            .env("GEPA_LAB_INFERENCE_KEY", "k")
            .args([
                "run",
                "--backend",
                &service.url,
                "--yes",
                "--poll-interval",
                "0.05",
            ])
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("run")
    };
    let out_path = out.path().to_str().unwrap();
    let output = within(Duration::from_secs(90), || {
        run(&[
            "--out",
            out_path,
            "tests/fixtures/run_experiments/two_variants.toml",
        ])
    });
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(6), "answers missing: {stderr}");
    assert!(
        stderr.contains("replay: 8 requests to sim-text failed in a row"),
        "said when it stopped: {stderr}"
    );
    let dir = crate::run::run_dir(out.path());
    let replay: Vec<gepa_lab::store::ReplayRow> = dir.read_csv("replay.csv").unwrap();
    assert_eq!(replay.len(), 24, "every cell has its row");
    let not_sent = replay
        .iter()
        .filter(|row| {
            row.error
                .starts_with("not sent: the service failed 8 requests to sim-text in a row")
        })
        .count();
    assert!(replay.iter().all(|row| !row.error.is_empty()));
    // The two variants share their seed: 12 distinct requests answer the 24 cells, and each one
    // sent was tried 5 times. At most the 8 that tripped the stop and the 2 in flight with
    // them were sent.
    let attempts = chats.load(Ordering::SeqCst);
    let attempts_per_request = RetryPolicy::default().max_attempts as usize;
    assert_eq!(attempts % attempts_per_request, 0, "{attempts} attempts");
    let sent = attempts / attempts_per_request;
    assert!((8..=10).contains(&sent), "{sent} requests sent");
    assert_eq!(sent + not_sent / 2, 12, "{not_sent} cells not sent");

    healthy.store(true, Ordering::SeqCst);
    let dir_path = dir.path.to_str().unwrap().to_owned();
    let output = within(Duration::from_secs(60), || run(&["--resume", &dir_path]));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    let replay: Vec<gepa_lab::store::ReplayRow> = dir.read_csv("replay.csv").unwrap();
    assert_eq!(replay.len(), 24);
    assert!(
        replay.iter().all(|row| row.error.is_empty()),
        "all answered on resume"
    );
}

#[test]
fn a_retry_after_of_1e20_ends_a_comparison_in_seconds_with_the_answers_missing() {
    // Every chat is refused with a Retry-After no command can wait: before, `compare --prompts`
    // was still waiting after 90 s.
    let service = Faulty::start(|request| {
        if request.path == "/v1/chat/completions" {
            too_many("1e20")
        } else {
            json(500, serde_json::json!({"error": "not scripted"}))
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let data = root().join("tests/fixtures/data/tiny.csv");
    std::fs::write(dir.path().join("a.txt"), "Label {review}.").unwrap();
    std::fs::write(dir.path().join("b.txt"), "Classify {review}.").unwrap();
    let mut compare = crate::common::command();
    compare
        .current_dir(dir.path())
        .env("GEPA_LAB_INFERENCE_KEY", "k")
        .args([
            "compare",
            "--yes",
            "--prompts",
            "a.txt",
            "b.txt",
            "--dataset",
        ])
        .arg(&data)
        .args(["--expected", "label", "--model", "m", "--url", &service.url]);
    let output = output_within(Duration::from_secs(60), &mut compare);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(6), "answers missing: {stderr}");
    assert!(stderr.contains("429"), "{stderr}");
    // The first answers' hold stopped the rest before they were sent.
    assert!(
        service.requests() <= 16 + 8,
        "{} chats sent",
        service.requests()
    );
}
