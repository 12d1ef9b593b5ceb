//! Pacing learned from 429 answers, for a client that does not know its rate limit.
//!
//! Without a known rpm, concurrent requests go out as fast as they are made. When the service
//! answers 429, every request of the client (not only the one refused) waits until its
//! `Retry-After`, and from then on requests are spaced: the spacing doubles at each 429 and
//! shrinks by a quarter after every [`SPEED_UP_AFTER`] answers in a row without one, down to no
//! spacing at all. So a client settles near the service's rate without knowing it, and a burst
//! of retries never meets the limit all at once.
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The first spacing after a 429.
const MIN_SPACING: Duration = Duration::from_millis(50);
/// The largest spacing: one request a minute, the lowest limit a key can have.
const MAX_SPACING: Duration = Duration::from_secs(60);
/// Answers in a row without a 429 before the spacing shrinks.
pub(super) const SPEED_UP_AFTER: u32 = 20;

#[derive(Debug)]
pub(super) struct Adaptive {
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    spacing: Duration,
    /// The earliest moment the next request may go out.
    next: Option<Instant>,
    successes: u32,
}

impl Default for Adaptive {
    fn default() -> Self {
        Self {
            state: Mutex::new(State {
                spacing: Duration::ZERO,
                next: None,
                successes: 0,
            }),
        }
    }
}

impl Adaptive {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// How long a request made `now` waits before going out; its slot is taken.
    pub(super) fn reserve(&self, now: Instant) -> Duration {
        let mut state = self.state();
        let at = state.next.map_or(now, |next| next.max(now));
        state.next = Some(at + state.spacing);
        at - now
    }

    /// A 429 arrived `now`: slow down, and let nothing out before `retry_after` has passed.
    pub(super) fn rate_limited(&self, now: Instant, retry_after: Option<Duration>) {
        let mut state = self.state();
        state.spacing = (state.spacing * 2).clamp(MIN_SPACING, MAX_SPACING);
        state.successes = 0;
        let resume = now + retry_after.unwrap_or(state.spacing);
        state.next = Some(state.next.map_or(resume, |next| next.max(resume)));
    }

    /// An answer that was not a 429: after enough in a row, speed up a little.
    pub(super) fn answered(&self) {
        let mut state = self.state();
        state.successes += 1;
        if state.successes >= SPEED_UP_AFTER {
            state.successes = 0;
            state.spacing = state.spacing * 3 / 4;
            if state.spacing < MIN_SPACING {
                state.spacing = Duration::ZERO;
            }
        }
    }

    #[cfg(test)]
    fn spacing(&self) -> Duration {
        self.state().spacing
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_waits_until_the_first_429() {
        let pacer = Adaptive::default();
        let now = Instant::now();
        for _ in 0..100 {
            assert_eq!(pacer.reserve(now), Duration::ZERO);
        }
    }

    #[test]
    fn a_429_holds_every_request_until_retry_after_then_spaces_them() {
        let pacer = Adaptive::default();
        let now = Instant::now();
        pacer.rate_limited(now, Some(Duration::from_secs(2)));
        // Three requests made at once: the first after Retry-After, the next one spacing apart.
        let waits: Vec<Duration> = (0..3).map(|_| pacer.reserve(now)).collect();
        assert_eq!(
            waits,
            [
                Duration::from_secs(2),
                Duration::from_millis(2050),
                Duration::from_millis(2100)
            ]
        );
    }

    #[test]
    fn the_spacing_doubles_on_each_429_and_shrinks_slowly_after_answers() {
        let pacer = Adaptive::default();
        let now = Instant::now();
        for expected in [50, 100, 200, 400] {
            pacer.rate_limited(now, None);
            assert_eq!(pacer.spacing(), Duration::from_millis(expected));
        }
        for _ in 0..SPEED_UP_AFTER - 1 {
            pacer.answered();
        }
        assert_eq!(pacer.spacing(), Duration::from_millis(400), "not yet");
        pacer.answered();
        assert_eq!(pacer.spacing(), Duration::from_millis(300));
        // A 429 in between starts the count again.
        for _ in 0..SPEED_UP_AFTER - 1 {
            pacer.answered();
        }
        pacer.rate_limited(now, None);
        assert_eq!(pacer.spacing(), Duration::from_millis(600));
        for _ in 0..SPEED_UP_AFTER * 40 {
            pacer.answered();
        }
        assert_eq!(pacer.spacing(), Duration::ZERO, "back to full speed");
        for _ in 0..30 {
            pacer.rate_limited(now, None);
        }
        assert_eq!(pacer.spacing(), MAX_SPACING);
    }
}
