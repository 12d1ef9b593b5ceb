//! The prompt-evolution API under `/api/v0`, over serve's `LocalEvolution`:
//! `POST /gepa/start_execution`, `GET /gepa/get_all_executions`,
//! `GET /gepa/get_single_execution/{evolutionId}`, `GET /gepa/get_execution_prompts` and
//! `GET /batch/all_jobs`, each behind the `x-api-key` header (the same keys as the inference
//! routes' Bearer keys). Beyond the contract, as extensions: `POST
//! /gepa/cancel_execution/{evolutionId}` (200 with the cancelled execution, 409 when it had
//! already ended, 404 as for a read), and `GET /gepa/get_execution_iterations?evolutionId=&after=
//! &limit=` (`{"iterations": [...]}`: the records of the iterations after iteration `after`,
//! default 0, at most `limit`, 1 to 1,000, default 200; see `engine::IterationRecord`).
//!
//! Statuses and plain-text bodies: 400 names the broken rule, the field and the value seen (one
//! line per rule, see `evolution::rules`); 401 for a missing or unknown key; 404 for an
//! evolutionId the caller does not own or that does not exist. Each key sees only the executions
//! it started. Pages are numbered from 1 and default to page 1 of 50; a page past the end is
//! empty.
use std::collections::HashMap;

use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Extension, Path, Query, Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};

use super::AppState;
use super::auth::{Caller, known_key, text};
use super::evolution_store::SqliteExecutions;
use gepa_lab_evolution::wire::{BatchJobs, ExecutionList, IterationsPage, PromptsPage, Started};
use gepa_lab_evolution::{EvolutionError, ITERATIONS_LIMIT, UNKNOWN_EXECUTION, rules};
use gepa_lab_http::Secret;
use gepa_lab_local::{Cancel, Paging};

/// A dataset travels inside the start request; axum's 2 MB default is small for a long one.
const BODY_LIMIT: usize = 16 * 1024 * 1024;

pub fn routes(state: AppState) -> Router<AppState> {
    Router::new()
        .route("/api/v0/gepa/start_execution", post(start_execution))
        .route("/api/v0/gepa/get_all_executions", get(get_all_executions))
        .route(
            "/api/v0/gepa/get_single_execution/{evolution_id}",
            get(get_single_execution),
        )
        .route(
            "/api/v0/gepa/get_execution_prompts",
            get(get_execution_prompts),
        )
        .route(
            "/api/v0/gepa/cancel_execution/{evolution_id}",
            post(cancel_execution),
        )
        .route(
            "/api/v0/gepa/get_execution_iterations",
            get(get_execution_iterations),
        )
        .route("/api/v0/batch/all_jobs", get(all_jobs))
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .route_layer(axum::middleware::from_fn_with_state(state, require_api_key))
}

/// Middleware: 401 without a known `x-api-key`; otherwise passes the request on with a `Caller`.
async fn require_api_key(
    State(state): State<AppState>,
    mut request: Request,
    next: Next,
) -> Response {
    let method = request.method().clone();
    let path = request.uri().path().to_owned();
    let key = request
        .headers()
        .get("x-api-key")
        .and_then(|value| value.to_str().ok())
        .map(str::trim)
        .filter(|key| !key.is_empty())
        .map(Secret::new);
    let Some(key) = key else {
        tracing::info!(%method, %path, status = 401, "no x-api-key");
        return text(
            StatusCode::UNAUTHORIZED,
            "missing API key: send the header x-api-key: <API_KEY>",
        );
    };
    let record = match known_key(&state, &key, &method, &path).await {
        Ok(record) => record,
        Err(refusal) => return refusal,
    };
    request.extensions_mut().insert(Caller {
        key_id: record.id.clone(),
        rpm_limit: record.rpm_limit,
    });
    let response = next.run(request).await;
    tracing::info!(%method, %path, key = %record.id, status = response.status().as_u16());
    response
}

async fn start_execution(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    body: Bytes,
) -> Response {
    let request = match rules::parse_start(&body, &state.evolution.settings().profile) {
        Ok(request) => request,
        Err(violations) => return text(StatusCode::BAD_REQUEST, violations.to_string()),
    };
    match state
        .evolution
        .start_as(Some(&caller.key_id), &request)
        .await
    {
        Ok(evolution_id) => Json(Started { evolution_id }).into_response(),
        Err(EvolutionError::Invalid(rules)) => text(StatusCode::BAD_REQUEST, rules),
        Err(err) => {
            tracing::error!(%err, "start failed");
            text(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("the execution could not be started: {err}"),
            )
        }
    }
}

/// `page` and `limit` from the query, each a whole number from 1 when given; otherwise the
/// text of the 400 answer.
fn paging(query: &HashMap<String, String>) -> Result<Paging, String> {
    let number = |name: &str| -> Result<Option<u32>, String> {
        match query.get(name) {
            None => Ok(None),
            Some(value) => value.trim().parse::<u32>().map(Some).map_err(|_| {
                format!("invalid parameter {name}: must be a whole number from 1; seen: {value:?}")
            }),
        }
    };
    Paging::new(number("page")?, number("limit")?)
        .map_err(|reason| format!("invalid parameter {reason}"))
}

fn not_found(evolution_id: &str) -> Response {
    text(
        StatusCode::NOT_FOUND,
        format!("{UNKNOWN_EXECUTION} {evolution_id}"),
    )
}

async fn get_all_executions(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let paging = match paging(&query) {
        Ok(paging) => paging,
        Err(reason) => return text(StatusCode::BAD_REQUEST, reason),
    };
    let (executions, _) = state.evolution.list_as(Some(&caller.key_id), paging);
    Json(ExecutionList { executions }).into_response()
}

async fn get_single_execution(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(evolution_id): Path<String>,
) -> Response {
    match state.evolution.get_as(Some(&caller.key_id), &evolution_id) {
        Ok(mut execution) => {
            // The contract's single-execution body has no evolutionId.
            execution.evolution_id = None;
            Json(execution).into_response()
        }
        Err(_) => not_found(&evolution_id),
    }
}

/// The extension route: see the module comment.
async fn cancel_execution(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(evolution_id): Path<String>,
) -> Response {
    match state
        .evolution
        .cancel_as(Some(&caller.key_id), &evolution_id)
        .await
    {
        Ok(Cancel::Cancelled(execution)) => Json(execution).into_response(),
        Ok(Cancel::AlreadyEnded(execution)) => text(
            StatusCode::CONFLICT,
            format!(
                "execution {evolution_id} already ended: {}",
                execution.status
            ),
        ),
        Err(_) => not_found(&evolution_id),
    }
}

/// The `evolutionId` query parameter, when present and not blank.
fn evolution_id_of(query: &HashMap<String, String>) -> Option<&str> {
    query
        .get("evolutionId")
        .map(String::as_str)
        .filter(|id| !id.trim().is_empty())
}

fn missing_evolution_id() -> Response {
    text(
        StatusCode::BAD_REQUEST,
        "invalid parameter evolutionId: is required",
    )
}

async fn get_execution_prompts(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let Some(evolution_id) = evolution_id_of(&query) else {
        return missing_evolution_id();
    };
    let paging = match paging(&query) {
        Ok(paging) => paging,
        Err(reason) => return text(StatusCode::BAD_REQUEST, reason),
    };
    match state
        .evolution
        .prompts_as(Some(&caller.key_id), evolution_id, paging)
    {
        Ok(prompts) => Json(PromptsPage { prompts }).into_response(),
        Err(_) => not_found(evolution_id),
    }
}

async fn get_execution_iterations(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let Some(evolution_id) = evolution_id_of(&query) else {
        return missing_evolution_id();
    };
    let number = |name: &str, default: usize, range: std::ops::RangeInclusive<usize>| {
        let Some(value) = query.get(name) else {
            return Ok(default);
        };
        match value.trim().parse::<usize>() {
            Ok(number) if range.contains(&number) => Ok(number),
            _ => Err(format!(
                "invalid parameter {name}: must be a whole number from {} to {}; seen: {value:?}",
                range.start(),
                range.end()
            )),
        }
    };
    let (after, limit) = match (
        number("after", 0, 0..=usize::MAX),
        number("limit", ITERATIONS_LIMIT, 1..=MAX_ITERATIONS_LIMIT),
    ) {
        (Ok(after), Ok(limit)) => (after, limit),
        (Err(reason), _) | (_, Err(reason)) => return text(StatusCode::BAD_REQUEST, reason),
    };
    match state
        .evolution
        .iterations_as(Some(&caller.key_id), evolution_id, after, limit)
    {
        Ok(iterations) => Json(IterationsPage { iterations }).into_response(),
        Err(_) => not_found(evolution_id),
    }
}

/// The most iteration records one `get_execution_iterations` answer holds.
const MAX_ITERATIONS_LIMIT: usize = 1000;

async fn all_jobs(State(state): State<AppState>, Extension(caller): Extension<Caller>) -> Response {
    match SqliteExecutions::new(state.db.clone())
        .batch_jobs(&caller.key_id)
        .await
    {
        Ok(jobs) => Json(BatchJobs {
            success: true,
            jobs,
        })
        .into_response(),
        Err(err) => {
            tracing::error!(%err, "batch jobs lookup failed");
            text(
                StatusCode::INTERNAL_SERVER_ERROR,
                "batch jobs lookup failed",
            )
        }
    }
}
