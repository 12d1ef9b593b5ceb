//! `POST /v1/channel` and `GET /v1/channel`. Posts are checked with the same rules the client
//! uses; reads page newest first, with exclusive `before`/`after` cursors and at most 200
//! messages. Message times are unique on a server, so paging by timestamp loses nothing.
use axum::body::Bytes;
use axum::extract::{Extension, Query, State};
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use serde::Deserialize;

use super::{Rejection, bad_request, caller_account, internal, parse_body, random_hex};
use crate::AppState;
use crate::account_db::{MessageRange, NewMessage, StoredMessage};
use crate::auth::Caller;
use gepa_lab_account::channel::{
    DEFAULT_LIMIT, check_limit, check_post, format_timestamp, parse_cursor,
};
use gepa_lab_account::wire::{ChannelMessage, MessagePage, PostMessage};

/// `authorType` of messages posted through this API.
const AUTHOR_TYPE_API: &str = "api";

pub(super) async fn post_message(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    body: Bytes,
) -> Result<Response, Rejection> {
    store_message(&state, &caller, &body).await
}

async fn store_message(
    state: &AppState,
    caller: &Caller,
    body: &[u8],
) -> Result<Response, Rejection> {
    let post: PostMessage = parse_body(body)?;
    check_post(&post).map_err(|err| bad_request(err.to_string()))?;
    let account = caller_account(state, caller).await?;
    // Keys from --api-key have no wallet; their author is the key's id, as in the usage table.
    let author = account.address.unwrap_or(account.id);
    let message = NewMessage {
        id: format!("msg_{}", random_hex(12)?),
        channel: post.channel,
        author_name: post.name.unwrap_or_else(|| author.clone()),
        author,
        avatar: post.avatar,
        content: post.content,
    };
    let stored = state
        .db
        .insert_message(message, AUTHOR_TYPE_API, Utc::now().timestamp_millis())
        .await
        .map_err(|err| internal("storing the message", &err))?;
    Ok(axum::Json(wire_message(stored)).into_response())
}

fn wire_message(stored: StoredMessage) -> ChannelMessage {
    let created_at = DateTime::<Utc>::from_timestamp_millis(stored.created_at_ms)
        .map(format_timestamp)
        .unwrap_or_default();
    ChannelMessage {
        id: stored.id,
        channel: stored.channel,
        author: stored.author,
        author_name: stored.author_name,
        author_type: stored.author_type,
        content: stored.content,
        created_at,
    }
}

/// The query as sent; each field is checked by hand so a 400 can name it.
#[derive(Debug, Deserialize)]
pub(super) struct ReadParams {
    channel: Option<String>,
    limit: Option<String>,
    before: Option<String>,
    after: Option<String>,
}

pub(super) async fn read_messages(
    State(state): State<AppState>,
    Query(params): Query<ReadParams>,
) -> Result<Response, Rejection> {
    page(&state, params).await
}

async fn page(state: &AppState, params: ReadParams) -> Result<Response, Rejection> {
    let channel = params
        .channel
        .ok_or_else(|| bad_request("missing parameter channel (general or requests)"))?;
    let channel: gepa_lab_account::Channel = channel
        .parse()
        .map_err(|err: gepa_lab_account::ChannelRuleError| bad_request(err.to_string()))?;
    let limit = match params.limit {
        None => DEFAULT_LIMIT,
        Some(limit) => limit.parse::<u32>().map_err(|_| {
            bad_request(format!(
                "invalid parameter limit: {limit:?} is not a whole number from 1 to 200"
            ))
        })?,
    };
    let limit = check_limit(limit).map_err(|err| bad_request(err.to_string()))?;
    let cursor = |field, value: Option<String>| {
        value
            .map(|value| {
                parse_cursor(field, &value)
                    .map(|time| time.timestamp_micros())
                    .map_err(|err| bad_request(err.to_string()))
            })
            .transpose()
    };
    let before_us = cursor("before", params.before)?;
    let after_us = cursor("after", params.after)?;
    let stored = state
        .db
        .messages(MessageRange {
            channel: channel.name(),
            before_us,
            after_us,
            limit,
        })
        .await
        .map_err(|err| internal("reading messages", &err))?;
    Ok(axum::Json(MessagePage {
        messages: stored.into_iter().map(wire_message).collect(),
    })
    .into_response())
}
