//! `HttpInference` against `serve`: every behaviour the contract gives the inference API.
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use gepa_lab::http::ApiError;
use gepa_lab::inference::wire::{JsonSchemaFormat, ResponseFormat, UrlRef};
use gepa_lab::inference::{
    ChatMessage, ChatRequest, Content, ContentPart, Fallback, Inference, InferenceError, Role,
    validate_answer,
};
use serde_json::json;

use crate::common::{Serve, fake_upstream, raw};

const KEY: &str = "dkn_live_test_key";

fn ask(model: &str, text: &str) -> ChatRequest {
    ChatRequest::new(
        model,
        vec![
            ChatMessage::system("You are terse."),
            ChatMessage::user(text),
        ],
    )
}

fn with_image(model: &str) -> ChatRequest {
    ChatRequest::new(
        model,
        vec![ChatMessage {
            role: Role::User,
            content: Content::Parts(vec![
                ContentPart::Text {
                    text: "What is in this picture?\nAnswer with one of: cat, dog".into(),
                },
                ContentPart::ImageUrl {
                    image_url: UrlRef {
                        url: "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==".into(),
                    },
                },
            ]),
        }],
    )
}

fn status_of(err: &InferenceError) -> Option<u16> {
    match err {
        InferenceError::Api(api) => api.status().map(|s| s.as_u16()),
        _ => None,
    }
}

#[tokio::test]
async fn plain_chat_is_answered_labelled_and_counted() {
    let serve = Serve::start(&["sim:model=qwen-text,seed=4"], &[&format!("{KEY}:600")]);
    let client = serve.client(Some(KEY));
    let answer = client
        .chat(&ask(
            "qwen-text",
            "Is the sky blue?\nAnswer with one of: yes, no",
        ))
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", serve.log()));
    assert!(
        ["yes", "no"].contains(&answer.content()),
        "{}",
        answer.content()
    );
    assert_eq!(answer.model, "qwen-text (simulated)");
    assert_eq!(answer.node_id(), Some("sim-0/sim-node-4"));
    let usage = answer.usage.expect("usage");
    assert_eq!(
        usage.total_tokens,
        usage.prompt_tokens + usage.completion_tokens
    );
    let (requests, rate_limited, prompt_tokens) = serve.usage_of_key_with_rpm(600);
    assert_eq!((requests, rate_limited), (1, 0));
    assert_eq!(prompt_tokens, usage.prompt_tokens);
}

#[tokio::test]
async fn models_list_node_counts_across_upstreams() {
    let serve = Serve::start(
        &["sim:model=shared,model=solo-vl", "sim:model=shared"],
        &[KEY],
    );
    let mut models = serve.client(Some(KEY)).models().await.unwrap();
    models.sort_by(|a, b| a.id.cmp(&b.id));
    let counts: Vec<_> = models
        .iter()
        .map(|m| (m.id.as_str(), m.node_count))
        .collect();
    assert_eq!(counts, vec![("shared", 2), ("solo-vl", 1)]);
}

#[tokio::test]
async fn streaming_gives_the_same_answer_and_ends_at_done() {
    let serve = Serve::start(&["sim:model=qwen-text"], &[KEY]);
    let client = serve.client(Some(KEY));
    let request = ask(
        "qwen-text",
        "Describe a quiet harbour at dawn in a few words",
    );
    let whole = client.chat(&request).await.unwrap();
    let mut chunks = client.chat_stream(&request).await.unwrap();
    let mut text = String::new();
    let mut count = 0;
    while let Some(chunk) = chunks.next().await {
        let chunk = chunk.unwrap_or_else(|e| panic!("{e}"));
        text.push_str(chunk.content());
        count += 1;
        let node = chunk.metadata.and_then(|m| m.node_id).unwrap_or_default();
        assert!(node.starts_with("sim-0/"), "{node}");
    }
    assert!(count > 2, "expected several chunks, got {count}");
    assert_eq!(text, whole.content());
}

#[tokio::test]
async fn a_stream_cut_short_is_an_error_not_a_short_answer() {
    let serve = Serve::start(&["sim:model=qwen-text,faults=truncate*2"], &[KEY]);
    let client = serve.client(Some(KEY));
    let request = ask(
        "qwen-text",
        "Describe a quiet harbour at dawn in a few words",
    );
    let items: Vec<_> = client.chat_stream(&request).await.unwrap().collect().await;
    assert!(items.len() >= 2, "{items:?}");
    assert!(items[..items.len() - 1].iter().all(Result::is_ok));
    // serve says why in an error event, which the client reads as the stream's failure.
    assert!(
        matches!(items.last(), Some(Err(InferenceError::StreamFailed { message }))
            if message.contains("the upstream sim-0 failed: stream ended without [DONE]")),
        "{:?}",
        items.last()
    );
    // On the wire: 200, the chunks, then an error event in place of [DONE].
    let mut body = serde_json::to_value(&request).unwrap();
    body["stream"] = json!(true);
    let response = raw()
        .post(format!("{}/v1/chat/completions", serve.url))
        .bearer_auth(KEY)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let text = response.text().await.unwrap();
    let last = text.trim_end().rsplit("\n\n").next().unwrap_or_default();
    assert!(
        last.starts_with("event: error\ndata: {\"error\":{\"message\":\"the upstream sim-0 failed"),
        "{text}"
    );
    assert!(!text.contains("data: [DONE]"), "{text}");
}

#[tokio::test]
async fn a_vision_model_accepts_a_data_url_image() {
    let serve = Serve::start(&["sim:model=tiny-vl,model=tiny-text"], &[KEY]);
    let answer = serve
        .client(Some(KEY))
        .chat(&with_image("tiny-vl"))
        .await
        .unwrap();
    assert!(
        ["cat", "dog"].contains(&answer.content()),
        "{}",
        answer.content()
    );
}

#[tokio::test]
async fn a_text_model_refuses_images_in_the_client_and_with_400_on_the_server() {
    let serve = Serve::start(&["sim:model=tiny-vl,model=tiny-text"], &[KEY]);
    let client = serve.client(Some(KEY));
    let err = client.chat(&with_image("tiny-text")).await.unwrap_err();
    assert!(
        matches!(&err, InferenceError::InvalidRequest { field, .. } if field == "messages[0].content[1].image_url"),
        "{err}"
    );
    assert_eq!(client.stats().attempts, 0, "nothing may be sent");
    // A client without the rule gets the contract's 400 with a text body naming the field.
    let response = raw()
        .post(format!("{}/v1/chat/completions", serve.url))
        .bearer_auth(KEY)
        .json(&with_image("tiny-text"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
    let body = response.text().await.unwrap();
    assert!(body.contains("messages[0].content[1].image_url"), "{body}");
}

#[tokio::test]
async fn invalid_parameters_get_400_naming_the_parameter() {
    let serve = Serve::start(&["sim:model=m"], &[KEY]);
    let cases = [
        (
            json!({"model": "m", "messages": [{"role": "user", "content": "x"}], "temperature": "hot"}),
            "temperature",
        ),
        (
            json!({"model": "m", "messages": [{"role": "robot", "content": "x"}]}),
            "messages[0].role",
        ),
        (json!({"model": "m", "messages": []}), "messages"),
        (
            json!({"messages": [{"role": "user", "content": "x"}]}),
            "model",
        ),
        (
            json!({"model": "m", "messages": [{"role": "user", "content": "x"}], "max_tokens": 0}),
            "max_tokens",
        ),
    ];
    for (body, field) in cases {
        let response = raw()
            .post(format!("{}/v1/chat/completions", serve.url))
            .bearer_auth(KEY)
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 400, "{body}");
        let text = response.text().await.unwrap();
        assert!(text.contains(field), "{body} -> {text}");
    }
}

fn structured(model: &str) -> (ChatRequest, serde_json::Value) {
    let schema = json!({
        "type": "object",
        "required": ["label", "confidence"],
        "properties": {
            "label": {"enum": ["positive", "negative"]},
            "confidence": {"type": "number", "minimum": 0, "maximum": 1}
        }
    });
    let mut request = ask(model, "Rate: 'what a lovely day'");
    request.response_format = Some(ResponseFormat::JsonSchema {
        json_schema: JsonSchemaFormat {
            name: "rating".into(),
            schema: schema.clone(),
        },
    });
    (request, schema)
}

#[test]
fn structured_output_is_validated_both_ways() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (request, schema) = structured("m");
    // serve asks its upstream once more for an answer that breaks the schema: the stand-in
    // model breaks it on its first answer only, so the caller gets the second.
    let serve = Serve::start(&["sim:model=m,faults=nonconforming"], &[KEY]);
    let answer = runtime
        .block_on(serve.client(Some(KEY)).chat(&request))
        .unwrap();
    let value = validate_answer(&schema, answer.content()).unwrap();
    assert!(["positive", "negative"].contains(&value["label"].as_str().unwrap()));
    // Broken every time: refused with 502 (which the client retries), never passed on.
    let serve = Serve::start(&["sim:model=m,faults=nonconforming*40"], &[KEY]);
    let err = runtime
        .block_on(serve.client(Some(KEY)).chat(&request))
        .unwrap_err();
    assert_eq!(status_of(&err), Some(502), "{err}");
    assert!(
        err.to_string()
            .contains("does not conform to the schema (2 tries)"),
        "{err}"
    );
    // A server that does not check: the client does.
    let lax = fake_upstream(
        &runtime,
        json!({"id": "x", "model": "m", "choices": [{"message": {"content": "[\"not\",\"an\",\"object\"]"}}]}),
    );
    let direct = gepa_lab::inference::HttpInference::new(
        gepa_lab::inference::InferenceConfig::new(lax, None),
    )
    .unwrap();
    match runtime.block_on(direct.chat(&request)).unwrap_err() {
        InferenceError::SchemaMismatch {
            content, errors, ..
        } => {
            assert_eq!(content, "[\"not\",\"an\",\"object\"]");
            assert!(!errors.is_empty());
        }
        other => panic!("expected SchemaMismatch, got {other}"),
    }
}

#[tokio::test]
async fn missing_and_wrong_keys_get_401_with_a_text_body() {
    let serve = Serve::start(&["sim:model=m"], &[KEY]);
    for key in [None, Some("dkn_live_wrong")] {
        let err = serve.client(key).models().await.unwrap_err();
        match err {
            InferenceError::Api(ApiError::Status { status, body, .. }) => {
                assert_eq!(status, 401);
                assert!(!body.is_empty());
                assert!(!body.contains("dkn_live_wrong"), "{body}");
            }
            other => panic!("expected 401, got {other}"),
        }
    }
    let err = serve.client(None).chat(&ask("m", "hi")).await.unwrap_err();
    assert_eq!(status_of(&err), Some(401));
}

#[tokio::test]
async fn the_rpm_limit_answers_429_with_retry_after_then_the_client_succeeds() {
    // 3 requests a window: three at once are accepted; the fourth waits until the first has been
    // in the window for its length, as its Retry-After says. The window is 5 seconds here (the
    // same sliding window as the service's minute, on a shorter clock), so the test waits
    // seconds.
    let serve = Serve::start_with(
        &["sim:model=m"],
        &[&format!("{KEY}:3"), "dkn_live_one:1"],
        &["--rate-window", "5"],
    );
    let client = serve.client(Some(KEY));
    let started = Instant::now();
    for _ in 0..3 {
        client.chat(&ask("m", "hi")).await.unwrap();
    }
    assert_eq!(client.stats().rate_limited, 0, "3 in a window are allowed");
    client.chat(&ask("m", "hi")).await.unwrap();
    let stats = client.stats();
    assert_eq!(stats.rate_limited, 1, "{stats:?}");
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_secs(4) && waited < Duration::from_secs(10),
        "{waited:?}"
    );
    let (requests, rate_limited, _) = serve.usage_of_key_with_rpm(3);
    assert_eq!((requests, rate_limited), (4, 1));

    // What the 429 itself looks like on the wire, with the service's minute and with the
    // shorter window.
    let minute = Serve::start(&["sim:model=m"], &["dkn_live_one:1"]);
    for (serve, window, said) in [
        (&minute, 60, "1 request per minute"),
        (&serve, 5, "1 request per 5 s"),
    ] {
        let send = || {
            raw()
                .get(format!("{}/v1/models", serve.url))
                .bearer_auth("dkn_live_one")
                .send()
        };
        assert_eq!(send().await.unwrap().status(), 200);
        let limited = send().await.unwrap();
        assert_eq!(limited.status(), 429);
        let retry_after: u64 = limited.headers()["retry-after"]
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        assert!(
            (window - 1..=window).contains(&retry_after),
            "{retry_after}"
        );
        let body = limited.text().await.unwrap();
        assert!(body.contains(said), "{body}");
    }
}

#[tokio::test]
async fn an_upstream_429_burst_is_waited_out_as_announced() {
    let serve = Serve::start(&["sim:model=m,faults=429*2,retry_after=1"], &[KEY]);
    let client = serve.client(Some(KEY));
    let started = Instant::now();
    let answer = client.chat(&ask("m", "hi")).await.unwrap();
    assert!(!answer.content().is_empty());
    assert!(
        started.elapsed() >= Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(client.stats().rate_limited, 2);
}

#[tokio::test]
async fn server_errors_are_retried_with_backoff() {
    let serve = Serve::start(&["sim:model=m,faults=500*2"], &[KEY]);
    let client = serve.client(Some(KEY));
    client.chat(&ask("m", "hi")).await.unwrap();
    let stats = client.stats();
    assert_eq!((stats.attempts, stats.retries), (3, 2));
}

#[tokio::test]
async fn pacing_to_the_rpm_limit_sees_no_429() {
    // 600 rpm allows a burst of 60; 64 requests sent at once would be refused past it.
    let serve = Serve::start(&["sim:model=m"], &[&format!("{KEY}:600")]);
    let client = Arc::new(serve.client_with(Some(KEY), Some(600)));
    let started = Instant::now();
    let results: Vec<_> = futures::stream::iter(0..64)
        .map(|i| {
            let client = Arc::clone(&client);
            async move { client.chat(&ask("m", &format!("request {i}"))).await }
        })
        .buffer_unordered(16)
        .collect()
        .await;
    assert!(results.iter().all(Result::is_ok));
    assert_eq!(client.stats().rate_limited, 0);
    // Evenly spaced at 100 ms: 63 gaps.
    assert!(
        started.elapsed() >= Duration::from_millis(6200),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn unserved_models_get_503_and_fall_back_to_the_next_model() {
    let serve = Serve::start(&["sim:model=small"], &[KEY]);
    let client = Arc::new(serve.client(Some(KEY)));
    let err = client.chat(&ask("big", "hi")).await.unwrap_err();
    assert_eq!(status_of(&err), Some(503));
    assert!(err.to_string().contains("big"), "{err}");
    let fallback = Fallback::new(client.clone(), vec!["big".into(), "small".into()]).unwrap();
    let answered = fallback.chat(&ask("big", "hi")).await.unwrap();
    assert_eq!(answered.model, "small");
    assert_eq!(answered.unavailable, vec!["big"]);
    assert_eq!(answered.response.model, "small (simulated)");
    let answered = fallback.chat_stream(&ask("big", "hi")).await.unwrap();
    assert_eq!(answered.model, "small");
}

#[tokio::test]
async fn a_timeout_of_u64_max_seconds_is_served_even_through_a_proxying_serve() {
    let upstream = Serve::start(&["sim:model=m"], &[KEY]);
    let proxy = Serve::start_with(&[&upstream.url], &[KEY], &["--upstream-key", KEY]);
    let mut request = ask("m", "Name a colour");
    request.timeout_secs = Some(u64::MAX);
    for serve in [&upstream, &proxy] {
        let answer = serve.client(Some(KEY)).chat(&request).await;
        assert!(answer.is_ok(), "{}: {answer:?}", serve.url);
    }
}

#[test]
fn a_retry_after_past_any_clock_ends_the_request_with_its_status_not_a_panic() {
    use axum::Router;
    use axum::http::{StatusCode, header};
    use axum::routing::post;
    let runtime = tokio::runtime::Runtime::new().unwrap();
    for retry_after in ["1e20", "99999999999999999999"] {
        let app = Router::new().route(
            "/v1/chat/completions",
            post(move || async move {
                (
                    StatusCode::TOO_MANY_REQUESTS,
                    [(header::RETRY_AFTER, retry_after)],
                    "slow down",
                )
            }),
        );
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        runtime.spawn(async move { axum::serve(listener, app).await });
        let started = Instant::now();
        let output = crate::common::command()
            .args(["chat", "--model", "m", "--url", &url, "hello"])
            .env("GEPA_LAB_INFERENCE_KEY", KEY)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_ne!(
            output.status.code(),
            Some(101),
            "{retry_after}: a panic: {stderr}"
        );
        assert!(!output.status.success(), "{retry_after}");
        assert!(stderr.contains("429"), "{retry_after}: {stderr}");
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{retry_after}: not waited for"
        );
    }
}

/// A raw connection to serve at `url` (`http://host:port`).
fn connect(url: &str) -> std::net::TcpStream {
    let stream = std::net::TcpStream::connect(url.trim_start_matches("http://")).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(15)))
        .unwrap();
    stream
}

/// Reads until serve closes the connection (or the 15 s read time-out); what it sent.
fn read_to_close(stream: &mut std::net::TcpStream) -> String {
    use std::io::Read;
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    String::from_utf8_lossy(&answer).into_owned()
}

#[test]
fn slow_and_idle_clients_cannot_hold_serve() {
    use std::io::Write;
    let serve = Serve::start_with(
        &["sim:model=m"],
        &[KEY],
        &[
            "--header-timeout",
            "1",
            "--body-timeout",
            "1",
            "--max-connections",
            "8",
        ],
    );

    // Headers trickled and never finished: the connection is closed after the header time-out.
    let started = Instant::now();
    let mut trickle = connect(&serve.url);
    trickle
        .write_all(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n")
        .unwrap();
    read_to_close(&mut trickle);
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(900) && waited < Duration::from_secs(5),
        "{waited:?}"
    );

    // A body that stops half-way: 408 after the body time-out.
    let mut slow_body = connect(&serve.url);
    slow_body
        .write_all(
            format!(
                "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY}\r\n\
                 Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{{\"model\":"
            )
            .as_bytes(),
        )
        .unwrap();
    let answer = read_to_close(&mut slow_body);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");

    // A declared body past the largest any route takes: 413 before a byte of it is read.
    let mut huge = connect(&serve.url);
    huge.write_all(
        format!(
            "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY}\r\n\
             Content-Length: {}\r\n\r\n",
            64 << 20
        )
        .as_bytes(),
    )
    .unwrap();
    let answer = read_to_close(&mut huge);
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");

    // Eight idle connections fill serve; a ninth takes the place of the one idle longest, which
    // is closed, and is answered at once.
    let mut idle: Vec<std::net::TcpStream> = (0..8).map(|_| connect(&serve.url)).collect();
    std::thread::sleep(Duration::from_millis(200));
    let mut ninth = connect(&serve.url);
    let asked_at = Instant::now();
    ninth
        .write_all(
            format!(
                "GET /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY}\r\n\
                 Connection: close\r\n\r\n"
            )
            .as_bytes(),
        )
        .unwrap();
    let answer = read_to_close(&mut ninth);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(asked_at.elapsed() < Duration::from_secs(1));
    let closed = read_to_close(&mut idle[0]);
    assert!(closed.is_empty(), "closed without an answer: {closed}");
    assert!(
        asked_at.elapsed() < Duration::from_secs(1),
        "closed at once"
    );
}

#[test]
fn a_connection_with_a_request_in_flight_is_never_closed_to_make_room() {
    use std::io::Write;
    let serve = Serve::start_with(
        &["sim:model=m,latency_ms=1500"],
        &[KEY],
        &["--max-connections", "2"],
    );
    let body = r#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#;
    let request = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let mut busy: Vec<std::net::TcpStream> = (0..2)
        .map(|_| {
            let mut stream = connect(&serve.url);
            stream.write_all(request.as_bytes()).unwrap();
            stream
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    // Both held connections are answering: the third is closed at once, unanswered.
    let mut third = connect(&serve.url);
    let asked_at = Instant::now();
    third
        .write_all(b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n")
        .ok();
    assert!(read_to_close(&mut third).is_empty());
    assert!(asked_at.elapsed() < Duration::from_secs(1));
    for stream in &mut busy {
        let answer = read_to_close(stream);
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    }
}

#[test]
fn idle_connections_past_the_open_file_limit_do_not_lock_a_client_out() {
    use std::os::unix::process::CommandExt;
    let serve = Serve::start_configured(
        tempfile::tempdir().unwrap(),
        &["sim:model=m"],
        &[KEY],
        &[],
        |command| {
            // SAFETY: only setrlimit runs between fork and exec.
            unsafe {
                command.pre_exec(|| {
                    let limit = libc::rlimit {
                        rlim_cur: 256,
                        rlim_max: 256,
                    };
                    if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) == 0 {
                        Ok(())
                    } else {
                        Err(std::io::Error::last_os_error())
                    }
                });
            }
        },
    );
    let idle: Vec<std::net::TcpStream> = (0..300).map(|_| connect(&serve.url)).collect();
    std::thread::sleep(Duration::from_millis(300));
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let asked_at = Instant::now();
    let models = runtime.block_on(serve.client(Some(KEY)).models());
    assert!(models.is_ok(), "{models:?}");
    assert!(
        asked_at.elapsed() < Duration::from_secs(3),
        "answered in {:?}",
        asked_at.elapsed()
    );
    drop(idle);
}

#[test]
fn sigterm_does_not_wait_for_ever_on_a_client_holding_half_a_request() {
    use std::io::Write;
    let mut serve = Serve::start_with(&["sim:model=m"], &[KEY], &["--header-timeout", "600"]);
    let mut half = connect(&serve.url);
    half.write_all(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n")
        .unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let took = serve.terminate(Duration::from_secs(30));
    // The shutdown grace is 10 s.
    assert!(
        took.is_some_and(|took| took < Duration::from_secs(15)),
        "{took:?}"
    );
}

#[test]
fn serve_completes_what_an_upstream_leaves_out_and_refuses_an_answer_without_choices() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let bare = fake_upstream(
        &runtime,
        json!({"choices": [{"message": {"content": "Paris is the capital."}}]}),
    );
    let serve = Serve::start_with(&[&bare], &[KEY], &["--upstream-key", "upstream-secret"]);
    let client = serve.client(Some(KEY));
    let answer = runtime.block_on(client.chat(&ask("m", "What is the capital of France?")));
    let answer = answer.unwrap();
    assert!(answer.id.starts_with("chatcmpl-"), "{}", answer.id);
    assert_eq!(answer.choices[0].finish_reason.as_deref(), Some("stop"));
    let usage = answer.usage.expect("usage filled in");
    assert_eq!(usage.completion_tokens, 6, "21 bytes at 4 bytes a token");
    assert_eq!(
        usage.total_tokens,
        usage.prompt_tokens + usage.completion_tokens
    );
    let models = runtime.block_on(client.models()).unwrap();
    assert!(models[0].created > 1_700_000_000, "{models:?}");

    // No choices: not an empty answer. Directly an error, and through serve a 502.
    let empty = fake_upstream(&runtime, json!({"id": "x", "model": "m", "choices": []}));
    let direct = gepa_lab::inference::HttpInference::new(
        gepa_lab::inference::InferenceConfig::new(empty.clone(), None),
    )
    .unwrap();
    let err = runtime
        .block_on(direct.chat(&ask("m", "hello")))
        .unwrap_err();
    assert!(matches!(err, InferenceError::NoChoices { .. }), "{err}");
    let serve = Serve::start_with(&[&empty], &[KEY], &["--upstream-key", "upstream-secret"]);
    let err = runtime
        .block_on(serve.client(Some(KEY)).chat(&ask("m", "hello")))
        .unwrap_err();
    assert!(err.to_string().contains("502"), "{err}");
    assert!(err.to_string().contains("no choices"), "{err}");
}

#[test]
fn an_answer_cut_at_its_token_limit_is_said_to_be_cut() {
    let serve = Serve::start(&["sim:model=m"], &[KEY]);
    for stream in [false, true] {
        let mut command = crate::common::command();
        command
            .args([
                "chat",
                "--model",
                "m",
                "--max-tokens",
                "2",
                "--url",
                &serve.url,
            ])
            .env("GEPA_LAB_INFERENCE_KEY", KEY);
        if stream {
            command.arg("--stream");
        }
        let output = command
            .arg("Tell me about the rivers and lakes of northern Finland")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "{stderr}");
        assert!(
            stderr.contains("warning: the answer stopped at its token limit (finish_reason length, max_tokens 2)"),
            "stream {stream}: {stderr}"
        );
    }
}

#[test]
fn keys_from_the_flag_and_the_environment_are_both_accepted() {
    use std::io::BufRead;
    let dir = tempfile::tempdir().unwrap();
    let mut child = crate::common::command()
        .args([
            "serve",
            "--bind",
            "127.0.0.1:0",
            "--upstream",
            "sim:model=m",
        ])
        .args(["--api-key", "flag_key"])
        .arg("--db")
        .arg(dir.path().join("serve.sqlite3"))
        .env("GEPA_LAB_SERVE_KEYS", "env_key_one,env_key_two:30")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut first = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    let url = first
        .trim()
        .strip_prefix("listening on ")
        .unwrap()
        .to_owned();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    for key in ["flag_key", "env_key_one", "env_key_two"] {
        let status = runtime
            .block_on(
                raw()
                    .get(format!("{url}/v1/models"))
                    .bearer_auth(key)
                    .send(),
            )
            .unwrap()
            .status();
        assert_eq!(status, 200, "{key}");
    }
    child.kill().unwrap();
    child.wait().unwrap();
}

#[tokio::test]
async fn an_absurd_retry_after_from_the_upstream_does_not_stop_serve_for_everyone() {
    // The upstream refuses its first request with a Retry-After of three years, then answers.
    let upstream = Serve::start(&["sim:model=m,faults=429*1,retry_after=100000000"], &[KEY]);
    let proxy = Serve::start_with(&[&upstream.url], &[KEY], &["--upstream-key", KEY]);
    let first = tokio::time::timeout(
        Duration::from_secs(20),
        proxy.client(Some(KEY)).chat(&ask("m", "hi")),
    )
    .await
    .expect("the refused request ends at once");
    assert_eq!(status_of(&first.unwrap_err()), Some(429));
    // Another client of the same serve is answered: the refusal held no one else for years.
    let second = tokio::time::timeout(
        Duration::from_secs(20),
        proxy.client(Some(KEY)).chat(&ask("m", "hello")),
    )
    .await
    .expect("not held behind the first answer's Retry-After");
    assert!(!second.unwrap().content().is_empty());
}
