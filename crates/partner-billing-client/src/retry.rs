//! How often and how patiently the SDK sends a request again.

use std::time::Duration;

use rand::Rng;

/// The SDK's retry and timeout settings.
///
/// Only failures whose outcome is unknown or pending are retried: transport failures, timeouts,
/// `503 Service.Unavailable` and `409 Reseller.RequestInProgress`. A write is always retried
/// with the same idempotency key, so a retry can never charge twice. Definite outcomes (any
/// other 4xx, `500 Reseller.PromoGenerationFailed`, a success) are returned at once.
///
/// The wait before retry `n` (1-based) is drawn from `[b/2, b]` where
/// `b = min(initial_backoff × 2^(n-1), max_backoff)`. When the server sends `Retry-After`, the
/// wait is that many seconds plus up to `initial_backoff` of jitter, still capped at
/// `max_backoff`.
///
/// Retries stop at `max_attempts`, or when the next wait would end more than `retry_budget`
/// after the first attempt began, whichever comes first. The default budget (45 s) outlasts a
/// database failover (a new leader and the service back within 30 s), so a write cut off by
/// one is retried, with its key, until it lands.
///
/// ```
/// use std::time::Duration;
/// use partner_billing_client::RetryPolicy;
///
/// let patient = RetryPolicy { max_attempts: 8, ..RetryPolicy::default() };
/// let raw = RetryPolicy::none().with_request_timeout(Duration::from_secs(5));
/// assert_eq!(raw.max_attempts, 1);
/// # let _ = patient;
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts in all, the first included; `1` means no retry. `0` is read as `1`.
    pub max_attempts: u32,
    /// The base of the exponential backoff (the wait before the first retry is at most this).
    pub initial_backoff: Duration,
    /// The longest single wait, `Retry-After` included.
    pub max_backoff: Duration,
    /// How long one attempt may take, from connecting to the last byte of the answer.
    pub request_timeout: Duration,
    /// How long after the first attempt began a retry may still start: no wait is begun that
    /// would end past it.
    pub retry_budget: Duration,
}

impl Default for RetryPolicy {
    /// Up to 30 attempts within 45 s, backoff from 200 ms up to 5 s, 30 s per attempt.
    fn default() -> Self {
        Self {
            max_attempts: 30,
            initial_backoff: Duration::from_millis(200),
            max_backoff: Duration::from_secs(5),
            request_timeout: Duration::from_secs(30),
            retry_budget: Duration::from_secs(45),
        }
    }
}

impl RetryPolicy {
    /// One attempt, no retry: every error, `409 Reseller.RequestInProgress` included, comes
    /// back to the caller as the server sent it. The default timeout still applies.
    pub fn none() -> Self {
        Self {
            max_attempts: 1,
            ..Self::default()
        }
    }

    /// The same policy with another number of attempts (the first included).
    pub fn with_max_attempts(mut self, max_attempts: u32) -> Self {
        self.max_attempts = max_attempts;
        self
    }

    /// The same policy with another backoff range.
    pub fn with_backoff(mut self, initial: Duration, max: Duration) -> Self {
        self.initial_backoff = initial;
        self.max_backoff = max;
        self
    }

    /// The same policy with another per-attempt timeout.
    pub fn with_request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// The same policy with another retry budget (see [`RetryPolicy::retry_budget`]).
    pub fn with_retry_budget(mut self, budget: Duration) -> Self {
        self.retry_budget = budget;
        self
    }

    /// Attempts in all, at least one.
    pub(crate) fn attempts(&self) -> u32 {
        self.max_attempts.max(1)
    }

    /// After failed attempt number `attempt` (1 for the first), `elapsed` after the first
    /// began, with the server's `Retry-After` if any: the wait before the next attempt, or
    /// `None` when the policy gives up (attempts or budget used up). Jitter is drawn afresh;
    /// the SDK's own retry loop asks exactly this.
    pub fn next_retry(
        &self,
        attempt: u32,
        elapsed: Duration,
        retry_after: Option<Duration>,
    ) -> Option<Duration> {
        if attempt >= self.attempts() {
            return None;
        }
        let delay = self.delay(attempt, retry_after);
        (elapsed.saturating_add(delay) <= self.retry_budget).then_some(delay)
    }

    /// The wait before retry number `retry` (1 for the first retry), with fresh jitter.
    pub(crate) fn delay(&self, retry: u32, retry_after: Option<Duration>) -> Duration {
        self.delay_with_jitter(retry, retry_after, rand::thread_rng().gen_range(0.0..=1.0))
    }

    /// [`Self::delay`] with the jitter given: `unit` in `[0, 1]`.
    pub(crate) fn delay_with_jitter(
        &self,
        retry: u32,
        retry_after: Option<Duration>,
        unit: f64,
    ) -> Duration {
        let unit = unit.clamp(0.0, 1.0);
        let wait = match retry_after {
            Some(asked) => asked.saturating_add(self.initial_backoff.mul_f64(unit)),
            None => {
                let ceiling = self.backoff_ceiling(retry);
                ceiling / 2 + (ceiling / 2).mul_f64(unit)
            }
        };
        wait.min(self.max_backoff)
    }

    /// `min(initial_backoff × 2^(retry-1), max_backoff)`, without overflow.
    fn backoff_ceiling(&self, retry: u32) -> Duration {
        let doublings = retry.saturating_sub(1).min(31);
        self.initial_backoff
            .saturating_mul(1u32 << doublings)
            .min(self.max_backoff)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_within_bounds() {
        let policy = RetryPolicy::default();
        for retry in 1..=40 {
            let ceiling = policy.backoff_ceiling(retry);
            let low = policy.delay_with_jitter(retry, None, 0.0);
            let high = policy.delay_with_jitter(retry, None, 1.0);
            assert_eq!(low, ceiling / 2, "retry {retry}");
            assert_eq!(high, ceiling, "retry {retry}");
            assert!(high <= policy.max_backoff);
            for _ in 0..20 {
                let drawn = policy.delay(retry, None);
                assert!(low <= drawn && drawn <= high, "retry {retry}: {drawn:?}");
            }
        }
        assert_eq!(
            policy.delay_with_jitter(1, None, 1.0),
            Duration::from_millis(200)
        );
        assert_eq!(
            policy.delay_with_jitter(2, None, 1.0),
            Duration::from_millis(400)
        );
        assert_eq!(
            policy.delay_with_jitter(3, None, 1.0),
            Duration::from_millis(800)
        );
        assert_eq!(
            policy.delay_with_jitter(10, None, 1.0),
            Duration::from_secs(5)
        );
        assert_eq!(
            policy.delay_with_jitter(u32::MAX, None, 0.0),
            Duration::from_millis(2500)
        );
    }

    #[test]
    fn retry_after_is_honoured_and_capped() {
        let policy = RetryPolicy::default();
        let one = Some(Duration::from_secs(1));
        assert_eq!(
            policy.delay_with_jitter(1, one, 0.0),
            Duration::from_secs(1)
        );
        assert_eq!(
            policy.delay_with_jitter(1, one, 1.0),
            Duration::from_millis(1200)
        );
        let hour = Some(Duration::from_secs(3600));
        assert_eq!(policy.delay_with_jitter(1, hour, 0.5), policy.max_backoff);
        assert_eq!(
            policy.delay_with_jitter(1, Some(Duration::MAX), 1.0),
            policy.max_backoff
        );
    }

    #[test]
    fn none_means_a_single_attempt() {
        assert_eq!(RetryPolicy::none().attempts(), 1);
        assert_eq!(RetryPolicy::default().with_max_attempts(0).attempts(), 1);
        assert_eq!(RetryPolicy::default().attempts(), 30);
        assert_eq!(
            RetryPolicy::none().next_retry(1, Duration::ZERO, None),
            None
        );
    }
}
