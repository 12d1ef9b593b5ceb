//! Who is calling, and whether they may call now: the Bearer key check (401) and the per-key
//! `rpmLimit` (429 with `Retry-After`), as a middleware for every authenticated route.
//!
//! Keys live in the database (`db`); rate-limit state lives in memory, so a restart forgives.
use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::AppState;
use super::db::{KeyRecord, UsageRow};
use gepa_lab_http::Secret;

/// The authenticated caller, put in the request's extensions for the handlers.
#[derive(Debug, Clone)]
pub struct Caller {
    pub key_id: String,
    pub rpm_limit: u32,
}

/// The window an `rpmLimit` counts requests in, as the service counts them.
pub const MINUTE: Duration = Duration::from_secs(60);

/// Per key, the times of its requests accepted in the last window (a minute, as the service
/// counts): a key may send `rpmLimit` requests in any window, at once or spread out, and the one
/// after gets 429 with the wait until the oldest of them leaves the window.
pub struct RateLimits {
    window: Duration,
    by_key: Mutex<HashMap<String, VecDeque<Instant>>>,
}

impl Default for RateLimits {
    fn default() -> Self {
        RateLimits::new(MINUTE)
    }
}

impl RateLimits {
    /// Limits counted in `window` instead of a minute (`serve --rate-window`): the same sliding
    /// window and `Retry-After`, on a shorter clock, so that tests of a client's waiting take
    /// seconds.
    pub fn new(window: Duration) -> Self {
        RateLimits {
            window,
            by_key: Mutex::default(),
        }
    }

    /// What a 429 says the limit is: "3 requests per minute", or per the window's seconds.
    fn describe(&self, limit: u32) -> String {
        let requests = if limit == 1 { "request" } else { "requests" };
        if self.window == MINUTE {
            format!("{limit} {requests} per minute")
        } else {
            format!("{limit} {requests} per {} s", self.window.as_secs_f64())
        }
    }

    /// `Ok` (and counted) if the key may send a request now, else how long until it may.
    pub fn check(&self, key_id: &str, rpm_limit: u32) -> Result<(), Duration> {
        self.check_at(key_id, rpm_limit, Instant::now())
    }

    fn check_at(&self, key_id: &str, rpm_limit: u32, now: Instant) -> Result<(), Duration> {
        let mut by_key = self
            .by_key
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let sent = by_key.entry(key_id.to_owned()).or_default();
        while sent
            .front()
            .is_some_and(|&at| now.saturating_duration_since(at) >= self.window)
        {
            sent.pop_front();
        }
        let limit = rpm_limit.max(1) as usize;
        if sent.len() < limit {
            sent.push_back(now);
            return Ok(());
        }
        // After a lowered limit more than `limit` may be in the window: room comes when all but
        // `limit - 1` of them have left it.
        let blocking = sent[sent.len() - limit];
        Err((blocking + self.window).saturating_duration_since(now))
    }
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
                "rate limit of {} exceeded; retry after {secs} s",
                state.rate_limits.describe(record.rpm_limit)
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
    fn a_key_may_send_its_limit_in_any_minute_and_hears_exactly_how_long_to_wait() {
        let limits = RateLimits::default();
        let start = Instant::now();
        let at = |secs: u64| start + Duration::from_secs(secs);
        // 60 rpm: 30 requests sent at once at 0 s, 30 spread until 50 s, all accepted.
        for _ in 0..30 {
            assert_eq!(limits.check_at("k", 60, at(0)), Ok(()));
        }
        for second in 21..51 {
            assert_eq!(limits.check_at("k", 60, at(second)), Ok(()));
        }
        // The 61st inside the minute waits until the first 30 leave the window, at 60 s.
        assert_eq!(
            limits.check_at("k", 60, at(55)),
            Err(Duration::from_secs(5))
        );
        assert_eq!(limits.check_at("k", 60, at(60)), Ok(()));
        // Keys do not share a window.
        assert_eq!(limits.check_at("other", 60, at(55)), Ok(()));
        // A lowered limit counts what the window already holds: at 61 s it holds 31 requests
        // (sent from 21 s to 60 s), and under a limit of 10 the next fits once 22 of them have
        // left: the 22nd was sent at 42 s and leaves at 102 s, 41 s from now.
        assert_eq!(
            limits.check_at("k", 10, at(61)),
            Err(Duration::from_secs(41))
        );
        assert_eq!(limits.describe(60), "60 requests per minute");
        assert_eq!(limits.describe(1), "1 request per minute");
    }

    #[test]
    fn a_shorter_window_is_the_same_limit_on_a_shorter_clock() {
        let limits = RateLimits::new(Duration::from_secs(5));
        let start = Instant::now();
        let at = |millis: u64| start + Duration::from_millis(millis);
        for _ in 0..3 {
            assert_eq!(limits.check_at("k", 3, at(0)), Ok(()));
        }
        assert_eq!(
            limits.check_at("k", 3, at(1_500)),
            Err(Duration::from_millis(3_500))
        );
        assert_eq!(limits.check_at("k", 3, at(5_000)), Ok(()));
        assert_eq!(limits.describe(3), "3 requests per 5 s");
    }
}
