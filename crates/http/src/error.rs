//! `ApiError`, the one error type of the HTTP layer, and reading `Retry-After`.
use std::time::Duration;

use reqwest::StatusCode;

/// What went wrong talking to a service, with what a caller needs to act on it.
///
/// Service error bodies are plain text (see `protocol-notes.md`), so `body` keeps them verbatim
/// rather than trying to parse a JSON error object.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// The service answered with a non-success status.
    #[error("{status}{}: {}", retry_after_note(*.retry_after), body_excerpt(.body))]
    Status {
        status: StatusCode,
        /// The `Retry-After` header in seconds, when the service sent one.
        retry_after: Option<Duration>,
        /// The raw response body (plain text on this API).
        body: String,
    },
    /// No HTTP answer: connection refused or reset, DNS failure, time-out. The message names
    /// the deepest cause ("Connection refused"), which reqwest's own message leaves out; the
    /// chain is not a `source`, so that a report of the error does not repeat it.
    #[error("request failed: {}{}", .0, root_cause(.0))]
    Transport(reqwest::Error),
    /// A success status whose body is not the JSON we expected; the raw text is kept.
    #[error("response body does not parse ({error}): {}", body_excerpt(.body))]
    Decode {
        error: serde_json::Error,
        body: String,
    },
    /// A response body longer than any answer of these APIs can be: it is not read further.
    #[error("response body larger than {limit} bytes; not read further")]
    TooLarge { limit: usize },
    /// The client itself could not be set up (bad base URL, bad header value, bad TLS setup).
    #[error("invalid client configuration: {0}")]
    Config(String),
}

/// `: <the innermost cause>` of an error, when it has causes; empty otherwise.
fn root_cause(error: &(dyn std::error::Error + 'static)) -> String {
    let mut cause = error.source();
    let mut last = None;
    while let Some(inner) = cause {
        last = Some(inner);
        cause = inner.source();
    }
    last.map_or_else(String::new, |inner| format!(": {inner}"))
}

impl ApiError {
    pub fn status(&self) -> Option<StatusCode> {
        match self {
            ApiError::Status { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// The service refused the key (401) or what the key may do (403): an answer about the key,
    /// which asking again with the same key cannot change.
    pub fn refuses_key(&self) -> bool {
        matches!(
            self.status(),
            Some(StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN)
        )
    }

    /// A request not sent because an earlier 429 holds every request of the client for `wait`,
    /// past the request's time budget: a 429 of its own, which callers count as one.
    pub fn held(wait: Duration) -> Self {
        ApiError::Status {
            status: StatusCode::TOO_MANY_REQUESTS,
            retry_after: Some(wait),
            body: format!(
                "not sent: an earlier 429 holds every request for {}s more, past this request's \
                 time budget",
                wait.as_secs()
            ),
        }
    }

    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            ApiError::Status { retry_after, .. } => *retry_after,
            _ => None,
        }
    }
}

fn retry_after_note(retry_after: Option<Duration>) -> String {
    retry_after
        .map(|d| format!(" (retry after {}s)", d.as_secs()))
        .unwrap_or_default()
}

/// Bodies can be whole HTML error pages from a proxy; a log line needs only the start.
fn body_excerpt(body: &str) -> String {
    const MAX: usize = 300;
    let trimmed = body.trim();
    if trimmed.is_empty() {
        return "(empty body)".to_owned();
    }
    match trimmed.char_indices().nth(MAX) {
        Some((cut, _)) => format!("{}…", &trimmed[..cut]),
        None => trimmed.to_owned(),
    }
}

/// The longest `Retry-After` taken as given: a day. A larger one (`1e20`, a 20-digit number)
/// reads as a day, which is past every time budget, so the request fails with the answer's
/// status instead of overflowing a clock or waiting for ever.
pub(crate) const MAX_RETRY_AFTER: Duration = Duration::from_secs(24 * 3600);

/// Parses `Retry-After` as the contract gives it: whole seconds. The HTTP-date form is not used
/// by these services; a value we cannot read is treated as absent, so backoff applies instead.
pub(crate) fn parse_retry_after(value: &str) -> Option<Duration> {
    let value = value.trim();
    if let Ok(secs) = value.parse::<u64>() {
        return Some(Duration::from_secs(secs).min(MAX_RETRY_AFTER));
    }
    value
        .parse::<f64>()
        .ok()
        .filter(|secs| !secs.is_nan() && *secs >= 0.0)
        .map(|secs| Duration::from_secs_f64(secs.min(MAX_RETRY_AFTER.as_secs_f64())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_reads_whole_and_fractional_seconds() {
        assert_eq!(parse_retry_after("3"), Some(Duration::from_secs(3)));
        assert_eq!(parse_retry_after(" 0 "), Some(Duration::ZERO));
        assert_eq!(parse_retry_after("1.5"), Some(Duration::from_millis(1500)));
        assert_eq!(parse_retry_after("-1"), None);
        for huge in [
            "1e20",
            "99999999999999999999",
            "18446744073709551615",
            "inf",
            "1e300",
        ] {
            assert_eq!(parse_retry_after(huge), Some(MAX_RETRY_AFTER), "{huge}");
        }
        assert_eq!(parse_retry_after("NaN"), None);
        assert_eq!(parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT"), None);
    }

    #[test]
    fn status_error_message_keeps_status_retry_after_and_body() {
        let err = ApiError::Status {
            status: StatusCode::TOO_MANY_REQUESTS,
            retry_after: Some(Duration::from_secs(2)),
            body: "rate limit exceeded".into(),
        };
        let text = err.to_string();
        assert!(text.contains("429"), "{text}");
        assert!(text.contains("retry after 2s"), "{text}");
        assert!(text.contains("rate limit exceeded"), "{text}");
        assert_eq!(err.retry_after(), Some(Duration::from_secs(2)));
    }

    #[test]
    fn long_bodies_are_cut_in_messages_but_kept_whole() {
        let body = "x".repeat(1000);
        let err = ApiError::Status {
            status: StatusCode::BAD_GATEWAY,
            retry_after: None,
            body: body.clone(),
        };
        assert!(err.to_string().len() < 400);
        match err {
            ApiError::Status { body: kept, .. } => assert_eq!(kept, body),
            _ => unreachable!(),
        }
    }
}
