//! What a schedule does now: nothing yet, start a run, skip one that is
//! too late, or hold one while Forbid waits for the active scan. Pure: the
//! controller passes the clock, the schedule's last run and its active
//! scans, and does what [`decide`] says.
//!
//! As CronJob: after a downtime only the most recent missed time is run (at
//! most one catch-up), and only when it is within startingDeadlineSeconds
//! (if set); a time held by Forbid starts once the active scan ends, as
//! long as it is within that deadline.
//!
//! May import: `schedule::cron`.

use super::cron::Cron;
use bucketscan_api::schedule::ConcurrencyPolicy;
use jiff::tz::TimeZone;
use jiff::Timestamp;
use std::time::Duration;

/// What the controller knows when it decides.
pub struct Facts<'a> {
    pub cron: &'a Cron,
    pub tz: &'a TimeZone,
    pub policy: ConcurrencyPolicy,
    pub starting_deadline_seconds: Option<i64>,
    pub suspend: bool,
    /// The scheduled time of the last run started or skipped; else the
    /// schedule's creation.
    pub since: Timestamp,
    /// Names of the schedule's scans that are neither Complete nor Failed.
    pub active: &'a [String],
    pub now: Timestamp,
}

#[derive(Debug, PartialEq, Eq)]
pub enum Decision {
    /// Suspended: nothing starts.
    Suspended,
    /// Nothing is due before `next`.
    Wait { next: Option<Timestamp> },
    /// Start the run of `at`, deleting `replace` first (Replace).
    Run {
        at: Timestamp,
        replace: Vec<String>,
        /// Earlier times since the last run were missed (not run).
        missed_earlier: bool,
        next: Option<Timestamp>,
    },
    /// The run of `at` is skipped: it is `late` past its time, more than
    /// startingDeadlineSeconds allows.
    Skip {
        at: Timestamp,
        late: Duration,
        next: Option<Timestamp>,
    },
    /// Forbid: the run of `at` waits for `active` to end.
    Hold {
        at: Timestamp,
        active: Vec<String>,
        next: Option<Timestamp>,
    },
}

pub fn decide(f: &Facts) -> Decision {
    if f.suspend {
        return Decision::Suspended;
    }
    let next = f.cron.next_after(f.now, f.tz);
    let Some((at, missed_earlier)) = f.cron.latest_due(f.since, f.now, f.tz) else {
        return Decision::Wait {
            next: f.cron.next_after(f.since.max(f.now), f.tz),
        };
    };
    let late = f.now.duration_since(at).unsigned_abs();
    if let Some(deadline) = f.starting_deadline_seconds {
        if late > Duration::from_secs(deadline.max(0) as u64) {
            return Decision::Skip { at, late, next };
        }
    }
    match (f.policy, f.active.is_empty()) {
        (_, true) => Decision::Run {
            at,
            replace: Vec::new(),
            missed_earlier,
            next,
        },
        (ConcurrencyPolicy::Forbid, false) => Decision::Hold {
            at,
            active: f.active.to_vec(),
            next,
        },
        (ConcurrencyPolicy::Replace, false) => Decision::Run {
            at,
            replace: f.active.to_vec(),
            missed_earlier,
            next,
        },
    }
}

/// When to look again: at the next time, or, for a held run with a
/// deadline, when the deadline passes (to count it skipped); a changed
/// scan of the schedule wakes it sooner. At most an hour: a clock that
/// jumped is noticed.
pub fn requeue_after(decision: &Decision, now: Timestamp, deadline: Option<i64>) -> Duration {
    const MAX: Duration = Duration::from_secs(3600);
    let until = |t: Timestamp| {
        // Half a second past the time, so that the next look finds it due.
        t.duration_since(now).unsigned_abs() + Duration::from_millis(500)
    };
    let wake = match decision {
        Decision::Suspended => None,
        Decision::Wait { next } | Decision::Run { next, .. } | Decision::Skip { next, .. } => next.map(until),
        Decision::Hold { at, next, .. } => {
            let expiry = deadline.map(|d| until(*at + jiff::SignedDuration::from_secs(d)));
            [expiry, next.map(until)].into_iter().flatten().min()
        }
    };
    wake.unwrap_or(MAX).min(MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    static UTC: TimeZone = TimeZone::UTC;

    fn facts<'a>(cron: &'a Cron, active: &'a [String], since: &str, now: &str) -> Facts<'a> {
        Facts {
            cron,
            tz: &UTC,
            policy: ConcurrencyPolicy::Forbid,
            starting_deadline_seconds: None,
            suspend: false,
            since: ts(since),
            active,
            now: ts(now),
        }
    }

    #[test]
    fn nothing_due_waits_for_the_next_time() {
        let cron = Cron::parse("0 * * * *").unwrap();
        let f = facts(&cron, &[], "2026-11-27T03:00:00Z", "2026-11-27T03:40:00Z");
        assert_eq!(
            decide(&f),
            Decision::Wait {
                next: Some(ts("2026-11-27T04:00:00Z"))
            }
        );
        assert_eq!(
            requeue_after(&decide(&f), f.now, None),
            Duration::from_secs(20 * 60) + Duration::from_millis(500)
        );
    }

    #[test]
    fn a_due_time_runs_once_and_a_downtime_gives_one_catch_up() {
        let cron = Cron::parse("* * * * *").unwrap();
        let f = facts(&cron, &[], "2026-11-27T03:00:00Z", "2026-11-27T03:40:10Z");
        assert_eq!(
            decide(&f),
            Decision::Run {
                at: ts("2026-11-27T03:40:00Z"),
                replace: vec![],
                missed_earlier: true,
                next: Some(ts("2026-11-27T03:41:00Z")),
            }
        );
        // Once it ran (since moved to its time), nothing more is due.
        let after = facts(&cron, &[], "2026-11-27T03:40:00Z", "2026-11-27T03:40:30Z");
        assert!(matches!(decide(&after), Decision::Wait { .. }));
    }

    #[test]
    fn a_run_later_than_the_starting_deadline_is_skipped() {
        let cron = Cron::parse("0 2 * * *").unwrap();
        let mut f = facts(&cron, &[], "2026-11-26T02:00:00Z", "2026-11-27T02:10:00Z");
        f.starting_deadline_seconds = Some(300);
        assert_eq!(
            decide(&f),
            Decision::Skip {
                at: ts("2026-11-27T02:00:00Z"),
                late: Duration::from_secs(600),
                next: Some(ts("2026-11-28T02:00:00Z")),
            }
        );
        f.starting_deadline_seconds = Some(900);
        assert!(matches!(decide(&f), Decision::Run { .. }));
    }

    #[test]
    fn forbid_holds_while_a_scan_is_active_and_replace_deletes_it() {
        let cron = Cron::parse("* * * * *").unwrap();
        let active = vec!["nightly-100".to_string()];
        let mut f = facts(&cron, &active, "2026-11-27T03:39:00Z", "2026-11-27T03:40:01Z");
        assert_eq!(
            decide(&f),
            Decision::Hold {
                at: ts("2026-11-27T03:40:00Z"),
                active: active.clone(),
                next: Some(ts("2026-11-27T03:41:00Z")),
            }
        );
        // Held with a deadline: look again when it runs out.
        f.starting_deadline_seconds = Some(30);
        assert_eq!(
            requeue_after(&decide(&f), f.now, Some(30)),
            Duration::from_secs(29) + Duration::from_millis(500)
        );
        f.policy = ConcurrencyPolicy::Replace;
        assert!(matches!(decide(&f), Decision::Run { replace, .. } if replace == active));
    }

    #[test]
    fn suspended_starts_nothing() {
        let cron = Cron::parse("* * * * *").unwrap();
        let mut f = facts(&cron, &[], "2026-11-27T03:00:00Z", "2026-11-27T03:40:00Z");
        f.suspend = true;
        assert_eq!(decide(&f), Decision::Suspended);
        assert_eq!(
            requeue_after(&Decision::Suspended, f.now, None),
            Duration::from_secs(3600)
        );
    }
}
