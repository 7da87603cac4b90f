//! What the operator and the kubectl plugin share: the `BucketScan`
//! resource's types ([`crd`]), the `BucketScanSchedule`'s ([`schedule`]), the names of its conditions
//! ([`conditions`]), partial results and retry ([`retry`], [`retriable`]) and how durations are worded ([`human_duration`]).
//! Lean on purpose (no S3, Redis, Parquet or AWS SDK, and kube without its
//! client), so the plugin builds without the operator's stack.
//!
//! May import: nothing of the workspace.

pub mod conditions;
pub mod crd;
pub mod retriable;
pub mod retry;
pub mod schedule;

pub use schedule::{BucketScanSchedule, BucketScanScheduleSpec, BucketScanScheduleStatus, ConcurrencyPolicy};

use std::time::Duration;

/// `3h5m`, `4m20s`, `12s`.
pub fn human_duration(d: Duration) -> String {
    let s = d.as_secs();
    match (s / 3600, (s % 3600) / 60, s % 60) {
        (0, 0, sec) => format!("{sec}s"),
        (0, min, sec) => format!("{min}m{sec}s"),
        (h, min, _) => format!("{h}h{min}m"),
    }
}
