//! What a shard's scan does after a transient failure: a request that used
//! up its retries on throttling, a 5xx, a timeout or a broken connection. Such
//! a failure says nothing about the objects, so it never becomes a record and
//! never fails the shard at once: the scan pauses and resumes after its last
//! good record. It gives up only when a whole `patience` passed without one
//! new record (a store that is down, not one that is busy).
//!
//! May import: nothing of the crate.

use rand::RngExt;
use std::time::Duration;
use tokio::time::Instant;

#[derive(Clone, Debug)]
pub struct ResumePolicy {
    /// The pause after the first failure; it doubles with each failure in a
    /// row, up to `max_pause`.
    pub first_pause: Duration,
    pub max_pause: Duration,
    /// How long a shard may go without a new record before a transient
    /// failure counts as final.
    pub patience: Duration,
}

impl Default for ResumePolicy {
    fn default() -> Self {
        ResumePolicy {
            first_pause: Duration::from_secs(1),
            max_pause: Duration::from_secs(30),
            patience: Duration::from_secs(600),
        }
    }
}

/// One shard's transient failures so far.
#[derive(Debug)]
pub struct Resumption {
    policy: ResumePolicy,
    in_a_row: u32,
    last_progress: Instant,
}

impl Resumption {
    pub fn new(policy: ResumePolicy) -> Resumption {
        Resumption {
            policy,
            in_a_row: 0,
            last_progress: Instant::now(),
        }
    }

    /// The pause before resuming after a transient failure, or `None` when
    /// the shard made no record for `patience` (give up). `progressed`: the
    /// failed attempt made records, so the failures in a row start again.
    pub fn after_failure(&mut self, progressed: bool) -> Option<Duration> {
        let now = Instant::now();
        if progressed {
            self.in_a_row = 0;
            self.last_progress = now;
        }
        if now.duration_since(self.last_progress) >= self.policy.patience {
            return None;
        }
        let ceiling = self
            .policy
            .first_pause
            .saturating_mul(1u32.checked_shl(self.in_a_row.min(31)).unwrap_or(u32::MAX))
            .min(self.policy.max_pause);
        self.in_a_row += 1;
        // Half fixed, half jitter: shards that failed together (one storm)
        // do not come back together, and none comes back at once.
        let half = ceiling / 2;
        let jitter = rand::rng().random_range(0..=half.as_millis() as u64);
        Some(half + Duration::from_millis(jitter))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> ResumePolicy {
        ResumePolicy {
            first_pause: Duration::from_secs(1),
            max_pause: Duration::from_secs(8),
            patience: Duration::from_secs(60),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn pauses_double_up_to_the_cap_and_progress_starts_them_again() {
        let mut r = Resumption::new(policy());
        let ceilings = [1, 2, 4, 8, 8, 8];
        for secs in ceilings {
            let pause = r.after_failure(false).expect("within patience");
            let ceiling = Duration::from_secs(secs);
            assert!(
                pause >= ceiling / 2 && pause <= ceiling,
                "{pause:?} for {ceiling:?}"
            );
        }
        let pause = r.after_failure(true).expect("progress");
        assert!(pause <= Duration::from_secs(1), "{pause:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn gives_up_only_after_patience_without_progress() {
        let mut r = Resumption::new(policy());
        tokio::time::advance(Duration::from_secs(59)).await;
        assert!(r.after_failure(false).is_some());
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(r.after_failure(false), None, "60 s without a record");
        // A record made in the failed attempt counts as progress.
        assert!(r.after_failure(true).is_some());
    }
}
