//! Capped exponential backoff with full jitter (the AWS architecture blog's
//! recommendation: the sleep is uniform in `[0, min(cap, base * 2^attempt))`,
//! which spreads a throttled fleet out instead of retrying in lockstep).
//!
//! May import: `error` only.

use super::error::S3Error;
use rand::RngExt;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

#[derive(Clone, Debug)]
pub struct RetryPolicy {
    /// Attempts in all, the first one included.
    pub max_attempts: u32,
    pub base: Duration,
    pub cap: Duration,
    /// Throttling is retried past `max_attempts` for this long since the
    /// first attempt: a store that says "slow down" is busy, not broken,
    /// and the caller's rate governor needs time to bring the rate down.
    pub throttle_patience: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 10,
            base: Duration::from_millis(25),
            cap: Duration::from_secs(10),
            throttle_patience: Duration::from_secs(120),
        }
    }
}

impl RetryPolicy {
    /// The sleep before retry number `retry` (0 for the first retry).
    pub fn backoff(&self, retry: u32) -> Duration {
        let ceiling = self
            .base
            .saturating_mul(1u32.checked_shl(retry.min(31)).unwrap_or(u32::MAX))
            .min(self.cap);
        let nanos = ceiling.as_nanos() as u64;
        if nanos == 0 {
            return Duration::ZERO;
        }
        Duration::from_nanos(rand::rng().random_range(0..nanos))
    }

    /// The sleep after `error` before retry number `retry`: the jittered
    /// backoff, but at least what the server asked for (`Retry-After`),
    /// which is honoured up to the cap.
    pub fn wait_before_retry(&self, error: &S3Error, retry: u32) -> Duration {
        if error.is_corrected() {
            return Duration::ZERO;
        }
        let backoff = self.backoff(retry);
        match error.retry_after() {
            Some(asked) => backoff.max(asked.min(self.cap)),
            None => backoff,
        }
    }

    /// Run `op` until it succeeds, fails with a final error, or runs out of
    /// attempts (throttling: of attempts and of `throttle_patience`). Every
    /// retry is counted in `retries`.
    pub async fn run<T, F, Fut>(&self, retries: &AtomicU64, op: F) -> Result<T, S3Error>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, S3Error>>,
    {
        self.run_paced(retries, || std::future::ready(()), op).await
    }

    /// [`RetryPolicy::run`] with `pace` awaited before every attempt (a
    /// rate limiter's slot). The time spent in it is the caller's own queue,
    /// not the store's: throttling's patience does not count it. Counted,
    /// 256 HEADs in flight at a governed 20/s waited some 13 s for each
    /// attempt's slot, and a throttled HEAD got its 10 attempts, not the
    /// two minutes of the store's answers that patience gives.
    pub async fn run_paced<T, F, Fut, P, PFut>(
        &self,
        retries: &AtomicU64,
        mut pace: P,
        mut op: F,
    ) -> Result<T, S3Error>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, S3Error>>,
        P: FnMut() -> PFut,
        PFut: Future<Output = ()>,
    {
        let started = tokio::time::Instant::now();
        let mut paced = Duration::ZERO;
        let mut attempt = 0;
        loop {
            let queued = tokio::time::Instant::now();
            pace().await;
            paced += queued.elapsed();
            match op().await {
                Err(e)
                    if e.is_retryable()
                        && self.tries_again(&e, attempt, started.elapsed().saturating_sub(paced)) =>
                {
                    retries.fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(self.wait_before_retry(&e, attempt)).await;
                    attempt += 1;
                }
                other => return other,
            }
        }
    }

    /// Whether to try again after `error` on attempt `attempt`, `spent`
    /// since the first one (the caller's own pacing left out).
    fn tries_again(&self, error: &S3Error, attempt: u32, spent: Duration) -> bool {
        attempt + 1 < self.max_attempts
            || (matches!(error, S3Error::Throttled { .. }) && spent < self.throttle_patience)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_is_capped_and_jittered() {
        let p = RetryPolicy {
            max_attempts: 5,
            base: Duration::from_millis(10),
            cap: Duration::from_millis(100),
            throttle_patience: Duration::ZERO,
        };
        for retry in 0..40 {
            let ceiling = Duration::from_millis(10 * (1u64 << retry.min(20))).min(p.cap);
            for _ in 0..50 {
                assert!(p.backoff(retry) < ceiling);
            }
        }
        // Full jitter: the spread covers most of the window, not one fixed value.
        let samples: Vec<_> = (0..200).map(|_| p.backoff(10)).collect();
        assert!(samples.iter().any(|d| *d < Duration::from_millis(30)));
        assert!(samples.iter().any(|d| *d > Duration::from_millis(70)));
    }

    #[test]
    fn the_wait_the_server_asks_for_is_honoured_within_the_cap() {
        let p = RetryPolicy::default();
        let throttled = |wait| S3Error::from_status(503, Some("SlowDown"), "b").with_retry_after(wait);
        for _ in 0..50 {
            let wait = p.wait_before_retry(&throttled(Some(Duration::from_secs(3))), 0);
            assert!(wait >= Duration::from_secs(3), "{wait:?}");
            assert!(wait <= p.cap, "{wait:?}");
            let wait = p.wait_before_retry(&throttled(Some(Duration::from_secs(3600))), 0);
            assert_eq!(wait, p.cap, "capped");
            // Without a header: the backoff of the first retry (under 25 ms).
            assert!(p.wait_before_retry(&throttled(None), 0) < p.base);
        }
        let server = S3Error::from_status(500, None, "b").with_retry_after(Some(Duration::from_secs(5)));
        assert_eq!(server.retry_after(), None, "only throttling answers carry a wait");
    }

    #[tokio::test(start_paused = true)]
    async fn the_retry_loop_sleeps_what_the_server_asked_for() {
        let p = RetryPolicy::default();
        let retries = AtomicU64::new(0);
        let mut calls = 0;
        let started = tokio::time::Instant::now();
        let r: Result<u32, _> = p
            .run(&retries, || {
                calls += 1;
                let first = calls == 1;
                async move {
                    if first {
                        Err(S3Error::from_status(429, None, "b")
                            .with_retry_after(Some(Duration::from_secs(4))))
                    } else {
                        Ok(7)
                    }
                }
            })
            .await;
        assert_eq!(r.unwrap(), 7);
        assert!(
            started.elapsed() >= Duration::from_secs(4),
            "{:?}",
            started.elapsed()
        );
    }

    #[tokio::test(start_paused = true)]
    async fn retries_transient_then_gives_up_on_final() {
        let p = RetryPolicy::default();
        let retries = AtomicU64::new(0);
        let mut calls = 0;
        let r: Result<u32, _> = p
            .run(&retries, || {
                calls += 1;
                let n = calls;
                async move {
                    if n < 3 {
                        Err(S3Error::Throttled {
                            status: 503,
                            retry_after: None,
                        })
                    } else {
                        Ok(n)
                    }
                }
            })
            .await;
        assert_eq!(r.unwrap(), 3);
        assert_eq!(retries.load(Ordering::Relaxed), 2);

        let mut calls = 0;
        let r: Result<(), _> = p
            .run(&retries, || {
                calls += 1;
                async { Err(S3Error::from_status(403, Some("AccessDenied"), "b")) }
            })
            .await;
        assert!(matches!(r, Err(S3Error::AccessDenied { .. })));
        assert_eq!(calls, 1, "403 is not retried");

        let r: Result<(), _> = p
            .run(&retries, || async {
                Err(S3Error::Server {
                    status: 500,
                    detail: "x".into(),
                })
            })
            .await;
        assert!(matches!(r, Err(S3Error::Server { .. })));
    }

    #[tokio::test(start_paused = true)]
    async fn the_callers_own_pacing_is_not_spent_from_the_patience() {
        // Backoffs under 1 s, 10 s of patience, 2 attempts; each attempt
        // waits 5 s for its slot under the caller's rate first.
        let p = RetryPolicy {
            max_attempts: 2,
            base: Duration::from_secs(1),
            cap: Duration::from_secs(1),
            throttle_patience: Duration::from_secs(10),
        };
        let retries = AtomicU64::new(0);
        let mut calls = 0;
        let r: Result<(), _> = p
            .run_paced(
                &retries,
                || tokio::time::sleep(Duration::from_secs(5)),
                || {
                    calls += 1;
                    async {
                        Err(S3Error::Throttled {
                            status: 503,
                            retry_after: None,
                        })
                    }
                },
            )
            .await;
        assert!(matches!(r, Err(S3Error::Throttled { .. })));
        // The store's answers alone took under 1 s each: at least 10 of
        // them fit the patience (counted with the pacing: 2).
        assert!(calls >= 11, "{calls} attempts");
    }

    #[tokio::test(start_paused = true)]
    async fn throttling_is_waited_out_past_the_attempts_until_patience_runs_out() {
        let p = RetryPolicy::default();
        let retries = AtomicU64::new(0);
        let throttled = || S3Error::Throttled {
            status: 503,
            retry_after: None,
        };
        // A storm of 15 answers, half again the attempts: waited out. (Its
        // backoffs are at most 12.8 s for the first nine and 10 s for each
        // after: 73 s at worst, inside the patience whatever the jitter.)
        let mut calls = 0;
        let r: Result<u32, _> = p
            .run(&retries, || {
                calls += 1;
                let n = calls;
                async move {
                    if n <= 15 {
                        Err(throttled())
                    } else {
                        Ok(n)
                    }
                }
            })
            .await;
        assert_eq!(r.unwrap(), 16);
        // A storm that never ends: given up once the patience is spent.
        let started = tokio::time::Instant::now();
        let r: Result<(), _> = p.run(&retries, || async { Err(throttled()) }).await;
        assert!(matches!(r, Err(S3Error::Throttled { .. })));
        let waited = started.elapsed();
        assert!(
            waited >= p.throttle_patience && waited <= p.throttle_patience + p.cap,
            "{waited:?}"
        );
        // A 5xx is no throttle: the attempts bound it.
        let mut calls = 0;
        let _ = p
            .run(&retries, || {
                calls += 1;
                async { Err::<(), _>(S3Error::from_status(500, None, "b")) }
            })
            .await;
        assert_eq!(calls, p.max_attempts);
    }
}
