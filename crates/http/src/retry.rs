//! When to try a request again and how long to wait first. Pure decisions, so they are tested
//! without a network; the loop that acts on them is `HttpClient::send`.
use std::time::Duration;

use reqwest::StatusCode;

use super::ApiError;

/// Limits and shape of retries. One policy per client; callers that need another make another
/// client from the same builder.
#[derive(Debug, Clone)]
pub struct RetryPolicy {
    /// Attempts in all, the first one included, that failed for a reason other than rate
    /// limiting; 1 means never retry. A 429 means the request was not served: it is retried
    /// (after its `Retry-After`) until `max_elapsed`, however many there were.
    pub max_attempts: u32,
    /// No new attempt starts, and no wait is begun, past this much time since the first attempt.
    pub max_elapsed: Duration,
    /// First backoff delay; it doubles with each retry up to `max_delay`.
    pub base_delay: Duration,
    pub max_delay: Duration,
    /// Whether 503 is retried. The inference contract uses 503 for "no node serves this model",
    /// which waiting rarely fixes and which the model fallback handles instead; other services
    /// use it for a transient overload.
    pub retry_unavailable: bool,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 5,
            max_elapsed: Duration::from_secs(300),
            base_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(30),
            retry_unavailable: true,
        }
    }
}

impl RetryPolicy {
    /// Exponential backoff for retry number `retry` (0 for the first retry), scaled by `jitter`
    /// in [0, 1): the wait is drawn from the upper half of the exponential step ("equal
    /// jitter"), so concurrent clients spread out but none retries immediately.
    pub fn backoff(&self, retry: u32, jitter: f64) -> Duration {
        let step = self
            .base_delay
            .saturating_mul(2u32.saturating_pow(retry.min(30)))
            .min(self.max_delay);
        let jitter = jitter.clamp(0.0, 1.0);
        step.mul_f64(0.5 + 0.5 * jitter)
    }

    /// Decides what to do after an attempt failed with `error`, when `elapsed` has passed since
    /// the first attempt. `attempt` counts (from 1) the attempts that failed as this one did:
    /// the 429s for a 429, the other failures otherwise.
    pub fn decide(
        &self,
        attempt: u32,
        elapsed: Duration,
        error: &ApiError,
        jitter: f64,
    ) -> Decision {
        let rate_limited = matches!(
            error,
            ApiError::Status { status, .. } if *status == StatusCode::TOO_MANY_REQUESTS
        );
        if attempt >= self.max_attempts && !rate_limited {
            return Decision::GiveUp;
        }
        let wait = match error {
            ApiError::Status {
                status,
                retry_after,
                ..
            } => {
                if *status == StatusCode::TOO_MANY_REQUESTS {
                    // The service said exactly when; guessing earlier only earns another 429.
                    retry_after.unwrap_or_else(|| self.backoff(attempt - 1, jitter))
                } else if self.is_transient(*status) {
                    self.backoff(attempt - 1, jitter)
                } else {
                    return Decision::GiveUp;
                }
            }
            ApiError::Transport(err) if err.is_connect() || err.is_timeout() => {
                self.backoff(attempt - 1, jitter)
            }
            ApiError::Transport(_)
            | ApiError::Decode { .. }
            | ApiError::TooLarge { .. }
            | ApiError::Config(_) => {
                return Decision::GiveUp;
            }
        };
        if elapsed.saturating_add(wait) > self.max_elapsed {
            return Decision::GiveUp;
        }
        Decision::RetryAfter(wait)
    }

    fn is_transient(&self, status: StatusCode) -> bool {
        server_failed(status, self.retry_unavailable)
    }
}

/// Whether `status` is a passing failure of the server rather than an answer about the request.
/// `unavailable_is_transient` says what 503 means to the service: a passing overload, or (as in
/// the inference contract) "no node serves this model", which waiting rarely fixes.
pub fn server_failed(status: StatusCode, unavailable_is_transient: bool) -> bool {
    match status {
        StatusCode::SERVICE_UNAVAILABLE => unavailable_is_transient,
        // 501 and 505 are answers about the request, not a passing state of the server.
        StatusCode::NOT_IMPLEMENTED | StatusCode::HTTP_VERSION_NOT_SUPPORTED => false,
        s => s.is_server_error(),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    RetryAfter(Duration),
    GiveUp,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(code: u16, retry_after: Option<u64>) -> ApiError {
        ApiError::Status {
            status: StatusCode::from_u16(code).unwrap(),
            retry_after: retry_after.map(Duration::from_secs),
            body: String::new(),
        }
    }

    fn policy() -> RetryPolicy {
        RetryPolicy {
            max_attempts: 4,
            max_elapsed: Duration::from_secs(60),
            base_delay: Duration::from_millis(100),
            max_delay: Duration::from_secs(1),
            retry_unavailable: false,
        }
    }

    #[test]
    fn too_many_requests_waits_exactly_the_announced_delay() {
        let d = policy().decide(1, Duration::ZERO, &status(429, Some(7)), 0.9);
        assert_eq!(d, Decision::RetryAfter(Duration::from_secs(7)));
    }

    #[test]
    fn too_many_requests_without_header_backs_off() {
        let d = policy().decide(2, Duration::ZERO, &status(429, None), 0.0);
        assert_eq!(d, Decision::RetryAfter(Duration::from_millis(100)));
    }

    #[test]
    fn server_errors_back_off_exponentially_with_jitter_and_a_cap() {
        let p = policy();
        let waits: Vec<_> = (1..4)
            .map(|attempt| p.decide(attempt, Duration::ZERO, &status(500, None), 0.0))
            .collect();
        assert_eq!(
            waits,
            vec![
                Decision::RetryAfter(Duration::from_millis(50)),
                Decision::RetryAfter(Duration::from_millis(100)),
                Decision::RetryAfter(Duration::from_millis(200)),
            ]
        );
        assert_eq!(p.backoff(0, 0.999), Duration::from_micros(99_950));
        assert_eq!(p.backoff(20, 1.0), Duration::from_secs(1));
    }

    #[test]
    fn client_errors_and_payment_required_are_final() {
        for code in [400, 401, 402, 403, 404, 422, 501] {
            assert_eq!(
                policy().decide(1, Duration::ZERO, &status(code, None), 0.5),
                Decision::GiveUp,
                "status {code}"
            );
        }
    }

    #[test]
    fn unavailable_is_retried_only_when_the_policy_says_so() {
        let p = policy();
        assert_eq!(
            p.decide(1, Duration::ZERO, &status(503, None), 0.5),
            Decision::GiveUp
        );
        let p = RetryPolicy {
            retry_unavailable: true,
            ..p
        };
        assert!(matches!(
            p.decide(1, Duration::ZERO, &status(503, None), 0.5),
            Decision::RetryAfter(_)
        ));
    }

    #[test]
    fn attempts_and_total_time_are_capped() {
        let p = policy();
        assert_eq!(
            p.decide(4, Duration::ZERO, &status(500, None), 0.5),
            Decision::GiveUp
        );
        // A Retry-After that would end past the time budget is not waited for.
        assert_eq!(
            p.decide(1, Duration::from_secs(55), &status(429, Some(10)), 0.5),
            Decision::GiveUp
        );
        assert_eq!(
            RetryPolicy {
                max_attempts: 1,
                ..p
            }
            .decide(1, Duration::ZERO, &status(500, None), 0.5),
            Decision::GiveUp
        );
    }

    #[test]
    fn a_429_is_retried_past_max_attempts_until_the_time_budget() {
        // Rate limiting serves nothing: giving up after a few 429s would lose an answer that
        // waiting would get.
        let p = policy();
        assert_eq!(
            p.decide(50, Duration::from_secs(30), &status(429, Some(2)), 0.5),
            Decision::RetryAfter(Duration::from_secs(2))
        );
        assert_eq!(
            p.decide(50, Duration::from_secs(59), &status(429, Some(2)), 0.5),
            Decision::GiveUp
        );
    }

    #[test]
    fn undecodable_bodies_are_not_retried() {
        let source = serde_json::from_str::<u8>("x").unwrap_err();
        let err = ApiError::Decode {
            error: source,
            body: "x".into(),
        };
        assert_eq!(
            policy().decide(1, Duration::ZERO, &err, 0.5),
            Decision::GiveUp
        );
    }
}
