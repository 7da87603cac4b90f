//! The clock requests are signed with. SigV4 signatures carry the time and
//! servers refuse a request more than 15 minutes off (`RequestTimeTooSkewed`;
//! a HEAD gets a bare 403). A pod on a node whose clock drifted would fail
//! every request, so the client keeps the offset to the server's clock, read
//! from the `Date` of such an answer, and signs with the corrected time, as
//! the AWS SDKs do. Both the fast paths and the SDK (as its time source) use it.
//!
//! May import: nothing of the crate.

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, SystemTime};

/// A difference to the server's clock beyond this is taken as skew (servers
/// allow 15 minutes; a `Date` has whole seconds and the answer took a while).
pub const SKEW_THRESHOLD: Duration = Duration::from_secs(5 * 60);

#[derive(Debug, Default)]
pub struct Clock {
    /// Server time minus local time, in milliseconds.
    offset_ms: AtomicI64,
}

impl Clock {
    pub fn now(&self) -> SystemTime {
        shifted(SystemTime::now(), self.offset_ms.load(Ordering::Relaxed))
    }

    /// The offset now applied, in whole seconds (for messages).
    pub fn offset_secs(&self) -> i64 {
        self.offset_ms.load(Ordering::Relaxed) / 1000
    }

    /// An answer refusing a request carried the server's `Date`. When the
    /// request's signing time (`signed_at`; `None`: unknown, taken as now)
    /// was off the server's by more than [`SKEW_THRESHOLD`], the refusal is
    /// the clock's, not a real one: adopt the server's time unless another
    /// request did already, and return the offset in seconds (the request
    /// deserves another attempt). `None`: the request was signed in time,
    /// the refusal is real.
    pub fn correct_from(&self, server_date: &str, signed_at: Option<SystemTime>) -> Option<i64> {
        let server = parse_http_date(server_date)?;
        let signed = signed_at.unwrap_or_else(|| self.now());
        if distance(server, signed) <= SKEW_THRESHOLD {
            return None;
        }
        if distance(server, self.now()) <= SKEW_THRESHOLD {
            // Signed before another request corrected the clock (HEADs in
            // flight meet the skew together): send it again as it is now.
            return Some(self.offset_secs());
        }
        let local = SystemTime::now();
        let offset_ms = match server.duration_since(local) {
            Ok(ahead) => ahead.as_millis() as i64,
            Err(behind) => -(behind.duration().as_millis() as i64),
        };
        self.offset_ms.store(offset_ms, Ordering::Relaxed);
        tracing::warn!(
            offset_seconds = offset_ms / 1000,
            "the S3 server's clock differs from this machine's; signing with the server's time"
        );
        Some(offset_ms / 1000)
    }
}

/// How far apart two times are, either way.
fn distance(a: SystemTime, b: SystemTime) -> Duration {
    a.duration_since(b).unwrap_or_else(|e| e.duration())
}

fn shifted(t: SystemTime, offset_ms: i64) -> SystemTime {
    let by = Duration::from_millis(offset_ms.unsigned_abs());
    if offset_ms >= 0 {
        t + by
    } else {
        t - by
    }
}

/// An HTTP `Date` (`Mon, 23 Nov 2026 14:03:52 GMT`).
fn parse_http_date(value: &str) -> Option<SystemTime> {
    let t = aws_smithy_types::DateTime::from_str(value.trim(), aws_smithy_types::date_time::Format::HttpDate)
        .ok()?;
    SystemTime::try_from(t).ok()
}

/// The clock as the SDK's time source, so its signatures are corrected too.
#[derive(Debug, Clone)]
pub struct SharedClock(pub std::sync::Arc<Clock>);

impl aws_smithy_async::time::TimeSource for SharedClock {
    fn now(&self) -> SystemTime {
        self.0.now()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn http_date(t: SystemTime) -> String {
        aws_smithy_types::DateTime::from(t)
            .fmt(aws_smithy_types::date_time::Format::HttpDate)
            .unwrap()
    }

    #[test]
    fn a_server_two_hours_ahead_moves_the_signing_clock() {
        let clock = Clock::default();
        let server = SystemTime::now() + Duration::from_secs(7200);
        let offset = clock.correct_from(&http_date(server), None).expect("skew seen");
        assert!((7195..=7205).contains(&offset), "{offset}");
        let signed = clock.now();
        let diff = server.duration_since(signed).unwrap_or_else(|e| e.duration());
        assert!(diff < Duration::from_secs(5), "{diff:?}");
        // Once corrected, the same server time is no longer skew.
        assert_eq!(clock.correct_from(&http_date(server), None), None);
    }

    #[test]
    fn a_server_behind_works_too_and_small_differences_are_not_skew() {
        let clock = Clock::default();
        assert_eq!(
            clock.correct_from(&http_date(SystemTime::now() - Duration::from_secs(60)), None),
            None
        );
        assert_eq!(clock.offset_secs(), 0, "no offset applied");
        let offset = clock
            .correct_from(&http_date(SystemTime::now() - Duration::from_secs(3600)), None)
            .unwrap();
        assert!((-3605..=-3595).contains(&offset), "{offset}");
        assert_eq!(clock.correct_from("not a date", None), None);
    }

    /// Many HEADs in flight meet the skew at once: the first corrects the
    /// clock, the others were signed before it and are refused too. Each
    /// of them is skew to retry, not a real refusal (which made them error
    /// records); a request signed after the correction and refused is real.
    #[test]
    fn requests_signed_before_another_corrected_the_clock_are_sent_again() {
        let clock = Clock::default();
        let server = SystemTime::now() + Duration::from_secs(7200);
        let signed_early = clock.now();
        assert!(clock
            .correct_from(&http_date(server), Some(signed_early))
            .is_some());
        let offset = clock.offset_secs();
        let again = clock.correct_from(&http_date(server), Some(signed_early));
        assert_eq!(again, Some(offset), "the second refusal of the burst is retried");
        assert_eq!(clock.offset_secs(), offset, "and moves nothing");
        assert_eq!(clock.correct_from(&http_date(server), Some(clock.now())), None);
    }
}
