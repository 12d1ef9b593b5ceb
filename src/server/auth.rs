//! Who is calling, and whether they may call now: the Bearer key check (401) and the per-key
//! `rpmLimit` (429 with `Retry-After`), as a middleware for every authenticated route.
//!
//! Keys live in the database (`db`); rate-limit state lives in memory, so a restart forgives.
use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use governor::clock::{Clock, DefaultClock};
use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};

use super::AppState;
use super::db::{KeyRecord, UsageRow};
use crate::http::Secret;

/// The authenticated caller, put in the request's extensions for the handlers.
#[derive(Debug, Clone)]
pub struct Caller {
    pub key_id: String,
    pub rpm_limit: u32,
}

/// One limiter per key, rebuilt when the key's limit changes.
#[derive(Default)]
pub struct RateLimits {
    by_key: Mutex<HashMap<String, (u32, Arc<DefaultDirectRateLimiter>)>>,
}

impl RateLimits {
    /// `Ok` if the key may send a request now, else how long until it may.
    pub fn check(&self, key_id: &str, rpm_limit: u32) -> Result<(), Duration> {
        let limiter = {
            let mut by_key = self
                .by_key
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            let entry = by_key
                .entry(key_id.to_owned())
                .or_insert_with(|| (rpm_limit, Arc::new(RateLimiter::direct(quota(rpm_limit)))));
            if entry.0 != rpm_limit {
                *entry = (rpm_limit, Arc::new(RateLimiter::direct(quota(rpm_limit))));
            }
            Arc::clone(&entry.1)
        };
        limiter
            .check()
            .map_err(|not_until| not_until.wait_time_from(DefaultClock::default().now()))
    }
}

/// A steady `rpm` per minute with a burst of a tenth of it (at least 2, at most `rpm`): evenly
/// paced clients get through despite network jitter, and no 60-second window passes more than
/// `rpm + burst - 1` requests.
fn quota(rpm: u32) -> Quota {
    let rpm = NonZeroU32::new(rpm).unwrap_or(NonZeroU32::MIN);
    let burst = (rpm.get() / 10).max(2).min(rpm.get());
    Quota::per_minute(rpm).allow_burst(NonZeroU32::new(burst).unwrap_or(NonZeroU32::MIN))
}

/// Whole seconds, rounded up, and never 0: a client told "0" would retry at once and fail again.
fn retry_after_secs(wait: Duration) -> u64 {
    let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
    secs.max(1)
}

fn bearer(headers: &HeaderMap) -> Option<Secret> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, key) = value.split_once(' ')?;
    let key = key.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !key.is_empty()).then(|| Secret::new(key))
}

pub fn text(status: StatusCode, body: impl Into<String>) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        body.into(),
    )
        .into_response()
}

/// The stored record of a presented key; a 401 for an unknown key, a 500 when the lookup fails.
/// Both APIs' key checks share it, whatever header carried the key.
pub async fn known_key(
    state: &AppState,
    key: &Secret,
    method: &axum::http::Method,
    path: &str,
) -> Result<KeyRecord, Response> {
    match state.db.find_key(key).await {
        Ok(Some(record)) => Ok(record),
        Ok(None) => {
            tracing::info!(%method, %path, status = 401, "unknown key");
            Err(text(StatusCode::UNAUTHORIZED, "invalid API key"))
        }
        Err(err) => {
            tracing::error!(%err, "key lookup failed");
            Err(text(StatusCode::INTERNAL_SERVER_ERROR, "key lookup failed"))
        }
    }
}

/// Middleware: 401 without a known Bearer key, 429 past the key's rpm limit; otherwise passes
/// the request on with a `Caller`, then records it in the key's usage, adding the `UsageRow`
/// (token counts) a handler may have put in the response's extensions.
pub async fn require_key(
    State(state): State<AppState>,
    mut request: Request,
    next: Next,
) -> Response {
    let started = Instant::now();
    let method = request.method().clone();
    let path = request.uri().path().to_owned();
    let Some(key) = bearer(request.headers()) else {
        tracing::info!(%method, %path, status = 401, "no Bearer key");
        return text(
            StatusCode::UNAUTHORIZED,
            "missing API key: send the header Authorization: Bearer <API_KEY>",
        );
    };
    let record = match known_key(&state, &key, &method, &path).await {
        Ok(record) => record,
        Err(refusal) => return refusal,
    };
    if let Err(wait) = state.rate_limits.check(&record.id, record.rpm_limit) {
        let secs = retry_after_secs(wait);
        let limited = UsageRow {
            rate_limited: 1,
            ..UsageRow::default()
        };
        if let Err(err) = state.db.add_usage(&record.id, limited).await {
            tracing::error!(%err, "usage update failed");
        }
        tracing::info!(%method, %path, key = %record.id, status = 429, retry_after = secs);
        let mut response = text(
            StatusCode::TOO_MANY_REQUESTS,
            format!(
                "rate limit of {} requests per minute exceeded; retry after {secs} s",
                record.rpm_limit
            ),
        );
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, secs.into());
        return response;
    }
    request.extensions_mut().insert(Caller {
        key_id: record.id.clone(),
        rpm_limit: record.rpm_limit,
    });
    let response = next.run(request).await;
    // One write per request: the handler leaves its token counts in the response.
    let usage = UsageRow {
        requests: 1,
        ..response
            .extensions()
            .get::<UsageRow>()
            .copied()
            .unwrap_or_default()
    };
    if let Err(err) = state.db.add_usage(&record.id, usage).await {
        tracing::error!(%err, "usage update failed");
    }
    tracing::info!(
        %method, %path, key = %record.id, status = response.status().as_u16(),
        ms = started.elapsed().as_millis() as u64
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_rounds_up_to_whole_seconds() {
        assert_eq!(retry_after_secs(Duration::ZERO), 1);
        assert_eq!(retry_after_secs(Duration::from_millis(10)), 1);
        assert_eq!(retry_after_secs(Duration::from_secs(2)), 2);
        assert_eq!(retry_after_secs(Duration::from_millis(2001)), 3);
    }

    #[test]
    fn bearer_keys_are_read_from_the_authorization_header() {
        let mut headers = HeaderMap::new();
        assert_eq!(bearer(&headers), None);
        headers.insert(header::AUTHORIZATION, "Bearer abc".parse().unwrap());
        assert_eq!(bearer(&headers), Some(Secret::new("abc")));
        headers.insert(header::AUTHORIZATION, "bearer  abc ".parse().unwrap());
        assert_eq!(bearer(&headers), Some(Secret::new("abc")));
        headers.insert(header::AUTHORIZATION, "Basic abc".parse().unwrap());
        assert_eq!(bearer(&headers), None);
        headers.insert(header::AUTHORIZATION, "Bearer ".parse().unwrap());
        assert_eq!(bearer(&headers), None);
    }

    #[test]
    fn limits_allow_the_burst_then_announce_the_wait() {
        let limits = RateLimits::default();
        // 6 rpm: one request per 10 s, a burst of 2.
        assert!(limits.check("k", 6).is_ok());
        assert!(limits.check("k", 6).is_ok());
        let wait = limits.check("k", 6).unwrap_err();
        assert!(
            wait > Duration::from_secs(9) && wait <= Duration::from_secs(10),
            "{wait:?}"
        );
        // Keys do not share a budget, and a changed limit takes effect at once.
        assert!(limits.check("other", 6).is_ok());
        assert!(limits.check("k", 600).is_ok());
    }

    #[test]
    fn the_burst_is_a_tenth_of_the_limit() {
        assert_eq!(quota(1).burst_size().get(), 1);
        assert_eq!(quota(6).burst_size().get(), 2);
        assert_eq!(quota(600).burst_size().get(), 60);
        assert_eq!(quota(600).replenish_interval(), Duration::from_millis(100));
    }
}
