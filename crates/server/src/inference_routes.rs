//! `GET /v1/models` and `POST /v1/chat/completions` (plain and SSE) with the contract's status
//! codes and plain-text error bodies: 400 naming the invalid parameter, 503 when no node serves
//! the model, and the upstream's own 429/5xx passed on with their `Retry-After`.
use std::convert::Infallible;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Extension, State};
use axum::http::{StatusCode, header};
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use futures::StreamExt;

use super::AppState;
use super::auth::{Caller, text};
use super::db::UsageRow;
use gepa_lab_http::ApiError;
use gepa_lab_inference::wire::{
    ChatRequest, ChatResponse, Metadata, ModelList, STREAM_ERROR_EVENT, StreamError, Usage,
};
use gepa_lab_inference::{ChunkStream, InferenceError, check_request, validate_answer};

/// Tries for an answer that conforms to a request's JSON schema.
const SCHEMA_ATTEMPTS: u32 = 2;

/// Images travel inline as base64 data URLs; axum's 2 MB default is too small for a photo.
const BODY_LIMIT: usize = 32 * 1024 * 1024;

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/v1/models", get(list_models))
        .route("/v1/chat/completions", post(chat_completions))
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
}

async fn list_models(State(state): State<AppState>) -> Response {
    axum::Json(ModelList {
        data: state.catalog.models(),
    })
    .into_response()
}

async fn chat_completions(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    body: Bytes,
) -> Response {
    let request: ChatRequest = match super::body::parse_json(&body) {
        Ok(request) => request,
        Err(message) => return text(StatusCode::BAD_REQUEST, message),
    };
    if let Err(err) = check_request(&request) {
        return error_response(&err);
    }
    let Some(node) = state.catalog.pick(&request.model) else {
        return text(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("no node is available for model {}", request.model),
        );
    };
    let deadline = request.timeout();
    if request.stream == Some(true) {
        let started = tokio::time::timeout(deadline, node.inference.chat_stream(&request)).await;
        return match started {
            Err(_) => timed_out(deadline),
            Ok(Err(err)) => error_response(&err),
            Ok(Ok(chunks)) => sse(chunks, node.name.clone()),
        };
    }
    let mut answer = match conforming_answer(&node, &request, deadline).await {
        Ok(answer) => answer,
        Err(refusal) => return refusal,
    };
    if answer.choices.is_empty() {
        return text(
            StatusCode::BAD_GATEWAY,
            format!("the upstream {} answered with no choices", node.name),
        );
    }
    complete(&mut answer, &request);
    let node_id = node_id(&node.name, answer.node_id());
    tracing::debug!(key = %caller.key_id, model = %request.model, node = %node_id, "answered");
    answer.metadata = Some(Metadata {
        node_id: Some(node_id),
    });
    let usage = answer.usage.map(|usage| UsageRow {
        prompt_tokens: usage.prompt_tokens,
        completion_tokens: usage.completion_tokens,
        ..UsageRow::default()
    });
    let mut response = axum::Json(answer).into_response();
    if let Some(usage) = usage {
        response.extensions_mut().insert(usage);
    }
    response
}

/// The node's answer. Structured output is checked here as the client checks it: an answer that
/// does not conform to the request's schema is asked for once more, then refused (502), never
/// passed on.
async fn conforming_answer(
    node: &super::Node,
    request: &ChatRequest,
    deadline: std::time::Duration,
) -> Result<ChatResponse, Response> {
    let mut errors = Vec::new();
    for attempt in 1..=SCHEMA_ATTEMPTS {
        errors = match tokio::time::timeout(deadline, node.inference.chat(request)).await {
            Err(_) => return Err(timed_out(deadline)),
            Ok(Err(InferenceError::SchemaMismatch { errors, .. })) => errors,
            Ok(Err(err)) => return Err(error_response(&err)),
            Ok(Ok(answer)) => match request.json_schema() {
                Some(schema) => match validate_answer(schema, answer.content()) {
                    Ok(_) => return Ok(answer),
                    Err(errors) => errors,
                },
                None => return Ok(answer),
            },
        };
        tracing::warn!(model = %request.model, node = %node.name, attempt, "the answer does not conform to the schema");
    }
    Err(text(
        StatusCode::BAD_GATEWAY,
        format!(
            "the upstream's answer does not conform to the schema ({SCHEMA_ATTEMPTS} tries): {}",
            errors.join("; ")
        ),
    ))
}

fn timed_out(deadline: std::time::Duration) -> Response {
    text(
        StatusCode::GATEWAY_TIMEOUT,
        format!("generation timed out after {} s", deadline.as_secs()),
    )
}

/// Fills what the contract requires and an upstream may leave out: an `id`, each choice's
/// `finish_reason` (`stop`), and `usage`, estimated at one token per 4 bytes of text (at least 1
/// per message) when the upstream counts none.
fn complete(answer: &mut ChatResponse, request: &ChatRequest) {
    if answer.id.trim().is_empty() {
        answer.id = format!("chatcmpl-{}", uuid::Uuid::new_v4().simple());
    }
    for choice in &mut answer.choices {
        choice
            .finish_reason
            .get_or_insert_with(|| "stop".to_owned());
    }
    if answer.usage.is_none() {
        let estimate = |text: &str| (text.len() as u64).div_ceil(4).max(1);
        let prompt_tokens = request.messages.iter().map(|m| estimate(&m.text())).sum();
        let completion_tokens = estimate(answer.content());
        answer.usage = Some(Usage {
            prompt_tokens,
            completion_tokens,
            total_tokens: prompt_tokens + completion_tokens,
        });
    }
}

/// The serving node, and the upstream's own node when it names one.
fn node_id(node: &str, upstream: Option<&str>) -> String {
    match upstream {
        Some(inner) if !inner.is_empty() => format!("{node}/{inner}"),
        _ => node.to_owned(),
    }
}

/// Chunks as `data:` events, then `data: [DONE]`. If the source fails mid-way, the status (200)
/// is already sent: the stream ends with an `error` event that says why, and no `[DONE]`, so a
/// client knows the answer is incomplete and why.
fn sse(chunks: ChunkStream, node: String) -> Response {
    enum Phase {
        Streaming(ChunkStream),
        Finished,
    }
    let events = futures::stream::unfold(Phase::Streaming(chunks), move |phase| {
        let node = node.clone();
        async move {
            let Phase::Streaming(mut chunks) = phase else {
                return None;
            };
            match chunks.next().await {
                Some(Ok(mut chunk)) => {
                    let upstream = chunk.metadata.as_ref().and_then(|m| m.node_id.clone());
                    chunk.metadata = Some(Metadata {
                        node_id: Some(node_id(&node, upstream.as_deref())),
                    });
                    let data = serde_json::to_string(&chunk).unwrap_or_default();
                    Some((
                        Ok::<_, Infallible>(Event::default().data(data)),
                        Phase::Streaming(chunks),
                    ))
                }
                Some(Err(err)) => {
                    tracing::warn!(%err, %node, "stream cut short");
                    let error = StreamError::new(format!("the upstream {node} failed: {err}"));
                    let data = serde_json::to_string(&error).unwrap_or_default();
                    Some((
                        Ok(Event::default().event(STREAM_ERROR_EVENT).data(data)),
                        Phase::Finished,
                    ))
                }
                None => Some((Ok(Event::default().data("[DONE]")), Phase::Finished)),
            }
        }
    });
    Sse::new(events).into_response()
}

/// How an `Inference` failure is told to the caller.
fn error_response(err: &InferenceError) -> Response {
    match err {
        InferenceError::InvalidRequest { field, reason } => text(
            StatusCode::BAD_REQUEST,
            format!("invalid parameter {field}: {reason}"),
        ),
        InferenceError::Api(ApiError::Status {
            status,
            retry_after,
            body,
        }) => {
            // The upstream refusing *our* credentials or payment is our failure, not the
            // caller's: passing 401/402 on would tell them their own key is bad.
            let status = match status.as_u16() {
                401..=403 => StatusCode::BAD_GATEWAY,
                _ => *status,
            };
            let mut response = text(status, body.clone());
            if let Some(wait) = retry_after {
                let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
                response
                    .headers_mut()
                    .insert(header::RETRY_AFTER, secs.into());
            }
            response
        }
        InferenceError::NoModelAvailable { .. } => {
            text(StatusCode::SERVICE_UNAVAILABLE, err.to_string())
        }
        other => text(StatusCode::BAD_GATEWAY, format!("upstream failed: {other}")),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn upstream_statuses_pass_through_except_credential_failures() {
        let status = |code: u16| {
            let err = InferenceError::Api(ApiError::Status {
                status: StatusCode::from_u16(code).unwrap(),
                retry_after: Some(Duration::from_millis(1500)),
                body: "b".into(),
            });
            let response = error_response(&err);
            let retry = response
                .headers()
                .get(header::RETRY_AFTER)
                .map(|v| v.to_str().unwrap().to_owned());
            (response.status().as_u16(), retry)
        };
        assert_eq!(status(429), (429, Some("2".into())));
        assert_eq!(status(503).0, 503);
        assert_eq!(status(500).0, 500);
        assert_eq!(status(401).0, 502);
        assert_eq!(status(402).0, 502);
    }

    #[test]
    fn node_ids_nest_the_upstream_node() {
        assert_eq!(node_id("sim-0", Some("sim-node-7")), "sim-0/sim-node-7");
        assert_eq!(node_id("upstream-1", None), "upstream-1");
    }
}
