//! Pure status arithmetic: progress, rate, ETA and standard conditions.

use crate::crd::{BucketScanStatus, ObjectCounts, Phase, ShardCounts};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use std::collections::BTreeMap;
use std::time::Duration;

pub use bucketscan_api::conditions::*;

/// How long a blocked scan waits before its next attempt: 5 s, doubling
/// with every attempt in a row, at most 5 minutes.
pub fn retry_wait(attempt: u32) -> Duration {
    let secs = 5u64.saturating_mul(1 << attempt.saturating_sub(1).min(16));
    Duration::from_secs(secs.min(300))
}

/// Seconds left before `activeDeadlineSeconds` runs out (0 or less: it has),
/// or `None` without a deadline or before the scan started.
pub fn deadline_left(started: Option<&Time>, deadline: Option<i64>, now: &Time) -> Option<i64> {
    let start = started?.0.as_second();
    Some(start + deadline? - now.0.as_second())
}

/// Share of shards finished (done or dead), as `kubectl get` shows it.
pub fn progress(shards: &ShardCounts) -> String {
    if shards.total == 0 {
        return "0%".into();
    }
    let finished = shards.done + shards.dead;
    format!("{}%", finished * 100 / shards.total)
}

/// The governors' summary as the status shows it: `governedRate` (at most
/// three partitions, then how many more), its number (the limits summed)
/// and the throttles seen.
pub fn governed(summary: &bucketscan_core::fleet::governor::Summary) -> (Option<String>, Option<u64>, u64) {
    if summary.limited.is_empty() {
        return (None, None, summary.throttles);
    }
    let mut parts: Vec<String> = summary
        .limited
        .iter()
        .take(3)
        .map(|(p, r)| format!("{} {}/s", shorten(p, 40), r.round() as u64))
        .collect();
    if summary.limited.len() > 3 {
        parts.push(format!("+{} more", summary.limited.len() - 3));
    }
    let total: f64 = summary.limited.iter().map(|(_, r)| r).sum();
    (
        Some(parts.join(", ")),
        Some(total.round() as u64),
        summary.throttles,
    )
}

fn shorten(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_string();
    }
    let head: String = s.chars().take(max - 1).collect();
    format!("{head}…")
}

/// Time left at the pace so far, from the share of shards finished: a rough
/// guide (shards differ in size; live splitting makes more of them).
pub fn eta(elapsed: Duration, shards: &ShardCounts) -> Option<String> {
    time_left(elapsed, shards).map(human_duration)
}

/// [`eta`] as a duration.
pub fn time_left(elapsed: Duration, shards: &ShardCounts) -> Option<Duration> {
    let finished = shards.done + shards.dead;
    if finished == 0 || shards.total == 0 || finished >= shards.total {
        return None;
    }
    let fraction = finished as f64 / shards.total as f64;
    let left = elapsed.as_secs_f64() * (1.0 - fraction) / fraction;
    // Not from_secs_f64: the counts are read from the scan's Redis keys, and
    // a time left past what a Duration holds must not panic the operator.
    Duration::try_from_secs_f64(left).ok()
}

/// How a merged scan completed, for its Complete condition.
#[derive(Debug, PartialEq, Eq)]
pub struct Completed {
    /// `Merged`, or `MergedWithUnreadableObjects` when the result holds
    /// error records (the CLI's exit code 3).
    pub reason: &'static str,
    pub message: String,
    /// Objects whose record is an error (exact: the manifest's count).
    pub unreadable: u64,
}

/// What an incremental scan's merge found: the change counts, and whether
/// unchanged objects were taken from the baseline (the Incremental
/// condition says why not when they were not).
pub fn incremental(
    st: &mut BucketScanStatus,
    inc: &bucketscan_core::fleet::merge::IncrementalSummary,
    generation: Option<i64>,
    now: &Time,
) {
    let c = &inc.counts;
    st.changes = Some(crate::crd::ChangeCounts {
        added: c.added,
        removed: c.removed,
        content_changed: c.content_changed,
        metadata_changed: c.metadata_changed,
        reused: c.reused,
    });
    let (reason, message) = match inc.reused_records {
        true => (
            "RecordsReused",
            format!(
                "{} unchanged objects taken from the baseline {} without a HEAD; {} added, {} removed, {} content changed, {} metadata changed (change set: {})",
                c.reused, inc.baseline, c.added, c.removed, c.content_changed, c.metadata_changed, inc.changes
            ),
        ),
        false => ("EveryObjectHeaded", format!("{}; change set: {}", inc.detail, inc.changes)),
    };
    set_condition(
        &mut st.conditions,
        INCREMENTAL,
        inc.reused_records,
        reason,
        &message,
        generation,
        now,
    );
}

/// The Complete condition from the merged result's counts: a result with
/// error records says so, with their count, so "Complete" alone always
/// means every object was read.
pub fn completed(counts: &BTreeMap<String, u64>, result: &str) -> Completed {
    let objects = counts.get("objects").copied().unwrap_or(0);
    let unreadable = counts.get("errors").copied().unwrap_or(0);
    if unreadable == 0 {
        return Completed {
            reason: "Merged",
            message: format!("{objects} objects in {result}"),
            unreadable,
        };
    }
    Completed {
        reason: "MergedWithUnreadableObjects",
        message: format!(
            "{objects} objects in {result}; {unreadable} of them could not be read: their records have status \"error\" with the reason"
        ),
        unreadable,
    }
}

/// Where a scan stands, in the words GitOps tools read (kstatus, Argo CD,
/// Flux): one of these, with the reason and message of the condition that
/// says most.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Standing {
    /// Complete: Ready.
    Current,
    /// Working, or waiting on a cause that may pass: Reconciling.
    InProgress,
    /// Failed, or stuck until someone acts: Stalled.
    Stalled,
    /// Suspended by its spec: neither (kstatus and Flux read Ready=False as
    /// in progress; Argo CD's check says Suspended).
    Suspended,
}

/// The scan's standing and the reason and message that explain it.
pub fn standing(st: &BucketScanStatus) -> (Standing, String, String) {
    let said = |type_: &str| {
        st.conditions
            .iter()
            .find(|c| c.type_ == type_ && c.status == "True")
    };
    let from = |standing, c: &Condition| (standing, c.reason.clone(), c.message.clone());
    match st.phase {
        Phase::Complete => {
            let m = said(COMPLETE).map(|c| c.message.clone()).unwrap_or_default();
            return (Standing::Current, "Complete".into(), m);
        }
        Phase::Failed => {
            return match said(FAILED) {
                Some(c) => from(Standing::Stalled, c),
                None => (Standing::Stalled, "Failed".into(), "the scan failed".into()),
            }
        }
        _ => {}
    }
    // What holds the scan up now comes before Suspended (resuming would not
    // help, and a scan resumed shows Suspended until its status is written
    // again) and before NoProgress (it is why).
    if let Some(c) = said(CONFLICT) {
        return from(Standing::Stalled, c);
    }
    if let Some(c) = said(BLOCKED) {
        return from(Standing::InProgress, c);
    }
    // Waiting for a place among its namespace's running scans: it starts
    // by itself once one ends.
    if let Some(c) = said(QUEUED) {
        return from(Standing::InProgress, c);
    }
    if said(SUSPENDED).is_some() {
        return (
            Standing::Suspended,
            "Suspended".into(),
            "spec.suspend is true".into(),
        );
    }
    if let Some(c) = st
        .conditions
        .iter()
        .find(|c| c.type_ == PROGRESSING && c.status == "False")
    {
        return from(Standing::Stalled, c);
    }
    let phase = format!("{:?}", st.phase);
    let progress = st
        .conditions
        .iter()
        .find(|c| c.type_ == COMPLETE)
        .map(|c| c.message.clone());
    (Standing::InProgress, phase.clone(), progress.unwrap_or(phase))
}

/// The summary conditions, from [`standing`]: Ready (True once the result
/// is complete; False otherwise, its reason the phase (Planning, Scanning,
/// Merging, Suspended) or what holds the scan, its message the one of the
/// condition that says most), and Reconciling or Stalled while they hold.
/// Returns true when anything changed.
pub fn set_summary(st: &mut BucketScanStatus, generation: Option<i64>, now: &Time) -> bool {
    let (standing, reason, message) = standing(st);
    let conditions = &mut st.conditions;
    let mut changed = set_condition(
        conditions,
        READY,
        standing == Standing::Current,
        &reason,
        &message,
        generation,
        now,
    );
    for (type_, holds) in [
        (RECONCILING, standing == Standing::InProgress),
        (STALLED, standing == Standing::Stalled),
    ] {
        changed |= if holds {
            set_condition(conditions, type_, true, &reason, &message, generation, now)
        } else {
            remove_condition(conditions, type_)
        };
    }
    changed
}

/// Drop condition `type_`; true when it was there.
pub fn remove_condition(conditions: &mut Vec<Condition>, type_: &str) -> bool {
    let before = conditions.len();
    conditions.retain(|c| c.type_ != type_);
    conditions.len() != before
}

pub use bucketscan_api::human_duration;

/// `12345/s`.
pub fn rate(per_second: f64) -> String {
    format!("{}/s", per_second.round() as u64)
}

/// The live counters from Redis, as status shows them.
pub fn object_counts(counters: &BTreeMap<String, u64>) -> ObjectCounts {
    let get = |k: &str| counters.get(k).copied().unwrap_or(0);
    ObjectCounts {
        // A HEAD per object, a record from the listing's metadata
        // (`metadataSource`) or one taken from the baseline (incremental
        // scans): either way one object scanned.
        scanned: get("heads") + get("from_listing") + get("reused"),
        with_metadata: get("with_metadata"),
        vanished: get("vanished"),
        errors: get("errors"),
        bytes: get("bytes"),
        filtered: get("filtered"),
    }
}

/// Counts only grow while a scan runs. After Redis lost the scan its
/// counters start again from the finished shards' records, below what the
/// status already showed (the shards that were halfway are scanned again):
/// each count keeps the higher figure until the new progress passes it.
pub fn never_below(now: ObjectCounts, before: Option<&ObjectCounts>) -> ObjectCounts {
    let Some(b) = before else { return now };
    ObjectCounts {
        scanned: now.scanned.max(b.scanned),
        with_metadata: now.with_metadata.max(b.with_metadata),
        vanished: now.vanished.max(b.vanished),
        errors: now.errors.max(b.errors),
        bytes: now.bytes.max(b.bytes),
        filtered: now.filtered.max(b.filtered),
    }
}

/// Set condition `type_`; its transition time moves only when its status
/// does (the Kubernetes convention). Returns true when anything changed.
pub fn set_condition(
    conditions: &mut Vec<Condition>,
    type_: &str,
    status: bool,
    reason: &str,
    message: &str,
    generation: Option<i64>,
    now: &Time,
) -> bool {
    let status = if status { "True" } else { "False" }.to_string();
    let wanted = Condition {
        type_: type_.to_string(),
        status,
        reason: reason.to_string(),
        message: message.to_string(),
        observed_generation: generation,
        last_transition_time: now.clone(),
    };
    match conditions.iter_mut().find(|c| c.type_ == type_) {
        Some(c) if c.status == wanted.status => {
            let changed = c.reason != wanted.reason
                || c.message != wanted.message
                || c.observed_generation != generation;
            c.reason = wanted.reason;
            c.message = wanted.message;
            c.observed_generation = generation;
            changed
        }
        Some(c) => {
            *c = wanted;
            true
        }
        None => {
            conditions.push(wanted);
            true
        }
    }
}

pub fn is_true(conditions: &[Condition], type_: &str) -> bool {
    conditions.iter().any(|c| c.type_ == type_ && c.status == "True")
}

#[cfg(test)]
mod tests {
    #[test]
    fn complete_says_how_many_objects_could_not_be_read() {
        let counts =
            |errors| BTreeMap::from([("objects".to_string(), 1_000), ("errors".to_string(), errors)]);
        let clean = completed(&counts(0), "s3://out/r.jsonl");
        assert_eq!((clean.reason, clean.unreadable), ("Merged", 0));
        assert_eq!(clean.message, "1000 objects in s3://out/r.jsonl");
        let some = completed(&counts(7), "s3://out/r.jsonl");
        assert_eq!((some.reason, some.unreadable), ("MergedWithUnreadableObjects", 7));
        assert!(
            some.message
                .starts_with("1000 objects in s3://out/r.jsonl; 7 of them could not be read"),
            "{}",
            some.message
        );
        assert_eq!(
            completed(&BTreeMap::new(), "r").reason,
            "Merged",
            "a result of no objects"
        );
    }

    #[test]
    fn the_governed_rate_shows_the_lowest_partitions_and_sums_them() {
        use bucketscan_core::fleet::governor::Summary;
        assert_eq!(
            governed(&Summary {
                throttles: 3,
                limited: vec![],
                ..Summary::default()
            }),
            (None, None, 3)
        );
        let one = Summary {
            throttles: 40,
            limited: vec![("hot/".into(), 4_199.6)],
            ..Summary::default()
        };
        assert_eq!(governed(&one), (Some("hot/ 4200/s".into()), Some(4200), 40));
        let many = Summary {
            throttles: 1,
            limited: (0..5)
                .map(|i| (format!("{}/", "p".repeat(60 + i)), 100.0))
                .collect(),
            ..Summary::default()
        };
        let (text, total, _) = governed(&many);
        let text = text.unwrap();
        assert!(text.ends_with(", +2 more"), "{text}");
        assert!(text.len() <= 256, "within the CRD's maxLength: {}", text.len());
        assert_eq!(total, Some(500));
    }

    use super::*;

    #[test]
    fn a_blocked_scan_waits_longer_each_time_up_to_five_minutes() {
        let waits: Vec<u64> = (1..=9).map(|n| retry_wait(n).as_secs()).collect();
        assert_eq!(waits, [5, 10, 20, 40, 80, 160, 300, 300, 300]);
        assert_eq!(retry_wait(0).as_secs(), 5);
        assert_eq!(retry_wait(u32::MAX).as_secs(), 300);
    }

    #[test]
    fn counts_never_go_back_when_redis_restarts_them() {
        let shown = ObjectCounts {
            scanned: 900,
            with_metadata: 300,
            vanished: 2,
            errors: 1,
            bytes: 9_000,
            filtered: 40,
        };
        let rebuilt = ObjectCounts {
            scanned: 600,
            with_metadata: 310,
            bytes: 6_000,
            ..ObjectCounts::default()
        };
        let kept = never_below(rebuilt.clone(), Some(&shown));
        assert_eq!(
            (
                kept.scanned,
                kept.with_metadata,
                kept.vanished,
                kept.errors,
                kept.bytes,
                kept.filtered
            ),
            (900, 310, 2, 1, 9_000, 40)
        );
        assert_eq!(never_below(rebuilt.clone(), None), rebuilt);
    }

    fn shards(total: u64, done: u64, dead: u64) -> ShardCounts {
        ShardCounts {
            total,
            done,
            dead,
            ..ShardCounts::default()
        }
    }

    #[test]
    fn progress_and_eta_follow_finished_shards() {
        assert_eq!(progress(&shards(0, 0, 0)), "0%");
        assert_eq!(progress(&shards(8, 3, 1)), "50%");
        assert_eq!(
            eta(Duration::from_secs(60), &shards(8, 0, 0)),
            None,
            "no pace yet"
        );
        assert_eq!(
            eta(Duration::from_secs(60), &shards(8, 2, 0)).as_deref(),
            Some("3m0s")
        );
        assert_eq!(eta(Duration::from_secs(60), &shards(8, 8, 0)), None, "finished");
        assert_eq!(human_duration(Duration::from_secs(3 * 3600 + 5 * 60 + 9)), "3h5m");
        assert_eq!(rate(12_344.6), "12345/s");
    }

    #[test]
    fn a_condition_moves_its_transition_time_only_when_its_status_changes() {
        let t0 = Time(k8s_openapi::jiff::Timestamp::from_second(1_000).unwrap());
        let t1 = Time(k8s_openapi::jiff::Timestamp::from_second(2_000).unwrap());
        let mut c = Vec::new();
        assert!(set_condition(
            &mut c,
            COMPLETE,
            false,
            "Scanning",
            "3 of 8 shards",
            Some(1),
            &t0
        ));
        assert!(set_condition(
            &mut c,
            COMPLETE,
            false,
            "Scanning",
            "5 of 8 shards",
            Some(1),
            &t1
        ));
        assert_eq!(c[0].last_transition_time, t0, "same status: time kept");
        assert!(!set_condition(
            &mut c,
            COMPLETE,
            false,
            "Scanning",
            "5 of 8 shards",
            Some(1),
            &t1
        ));
        assert!(set_condition(
            &mut c,
            COMPLETE,
            true,
            "Merged",
            "done",
            Some(1),
            &t1
        ));
        assert_eq!(c[0].last_transition_time, t1);
        assert!(is_true(&c, COMPLETE) && !is_true(&c, FAILED));
        assert_eq!(c.len(), 1);
    }

    #[test]
    fn ready_is_true_only_when_complete_and_says_why_not() {
        let t = Time(k8s_openapi::jiff::Timestamp::from_second(1_000).unwrap());
        let ready = |st: &BucketScanStatus| {
            let c = st.conditions.iter().find(|c| c.type_ == READY).unwrap();
            (
                c.status.clone(),
                c.reason.clone(),
                c.message.clone(),
                c.observed_generation,
            )
        };
        let mut st = BucketScanStatus::default();
        assert!(set_summary(&mut st, Some(1), &t));
        assert_eq!(
            ready(&st),
            ("False".into(), "Pending".into(), "Pending".into(), Some(1))
        );
        st.phase = Phase::Scanning;
        set_condition(
            &mut st.conditions,
            COMPLETE,
            false,
            "Scanning",
            "3 of 8 shards finished",
            Some(1),
            &t,
        );
        set_summary(&mut st, Some(2), &t);
        assert_eq!(
            ready(&st),
            (
                "False".into(),
                "Scanning".into(),
                "3 of 8 shards finished".into(),
                Some(2)
            )
        );
        let secret = "Secret \"s3\" (spec.source.credentialsSecret) does not exist; retrying in 10s";
        set_condition(
            &mut st.conditions,
            BLOCKED,
            true,
            "SecretNotFound",
            secret,
            Some(2),
            &t,
        );
        set_summary(&mut st, Some(2), &t);
        assert_eq!(
            (ready(&st).1, ready(&st).2),
            ("SecretNotFound".into(), secret.into())
        );
        // Suspended (or resumed, and the status not written since), yet
        // held up: Ready says by what.
        set_condition(&mut st.conditions, SUSPENDED, true, "Suspended", "x", Some(2), &t);
        set_summary(&mut st, Some(2), &t);
        assert_eq!(ready(&st).1, "SecretNotFound");
        set_condition(&mut st.conditions, BLOCKED, false, "Unblocked", "", Some(2), &t);
        set_summary(&mut st, Some(2), &t);
        assert_eq!(ready(&st).1, "Suspended");
        // A name taken by another workload: resuming would not help.
        let taken = "Deployment s-workers in namespace n exists and is not this scan's";
        set_condition(&mut st.conditions, CONFLICT, true, "Conflict", taken, Some(2), &t);
        set_summary(&mut st, Some(2), &t);
        assert_eq!((ready(&st).1, ready(&st).2), ("Conflict".into(), taken.into()));
        set_condition(&mut st.conditions, CONFLICT, false, "Resolved", "", Some(2), &t);
        set_summary(&mut st, Some(2), &t);
        assert_eq!(ready(&st).1, "Suspended");
        st.phase = Phase::Failed;
        set_condition(
            &mut st.conditions,
            FAILED,
            true,
            "DeadlineExceeded",
            "too long",
            Some(2),
            &t,
        );
        set_summary(&mut st, Some(2), &t);
        assert_eq!(
            ready(&st),
            (
                "False".into(),
                "DeadlineExceeded".into(),
                "too long".into(),
                Some(2)
            )
        );
        let mut done = BucketScanStatus {
            phase: Phase::Complete,
            ..Default::default()
        };
        set_condition(
            &mut done.conditions,
            COMPLETE,
            true,
            "Merged",
            "3000 objects in s3://r/result.jsonl",
            Some(3),
            &t,
        );
        set_summary(&mut done, Some(3), &t);
        assert_eq!(
            ready(&done),
            (
                "True".into(),
                "Complete".into(),
                "3000 objects in s3://r/result.jsonl".into(),
                Some(3)
            )
        );
        assert!(!set_summary(&mut done, Some(3), &t), "nothing changed");
    }

    #[test]
    fn reconciling_and_stalled_are_there_only_while_true() {
        let t = Time(k8s_openapi::jiff::Timestamp::from_second(1_000).unwrap());
        let present = |st: &BucketScanStatus| {
            let mut types: Vec<_> = st
                .conditions
                .iter()
                .filter(|c| c.type_ == RECONCILING || c.type_ == STALLED)
                .map(|c| format!("{}={}:{}", c.type_, c.status, c.reason))
                .collect();
            types.sort();
            types
        };
        let mut st = BucketScanStatus {
            phase: Phase::Scanning,
            ..Default::default()
        };
        assert!(set_summary(&mut st, Some(1), &t));
        assert_eq!(present(&st), ["Reconciling=True:Scanning"]);
        // Waiting on a Secret may pass by itself: still reconciling.
        set_condition(
            &mut st.conditions,
            BLOCKED,
            true,
            "SecretNotFound",
            "m",
            Some(1),
            &t,
        );
        set_summary(&mut st, Some(1), &t);
        assert_eq!(present(&st), ["Reconciling=True:SecretNotFound"]);
        set_condition(&mut st.conditions, BLOCKED, false, "Unblocked", "", Some(1), &t);
        // No progress for a while, or a name another workload holds: a
        // person must act.
        set_condition(
            &mut st.conditions,
            PROGRESSING,
            false,
            "NoProgress",
            "m",
            Some(1),
            &t,
        );
        set_summary(&mut st, Some(1), &t);
        assert_eq!(present(&st), ["Stalled=True:NoProgress"]);
        set_condition(&mut st.conditions, CONFLICT, true, "Conflict", "m", Some(1), &t);
        set_summary(&mut st, Some(1), &t);
        assert_eq!(present(&st), ["Stalled=True:Conflict"]);
        set_condition(&mut st.conditions, CONFLICT, false, "Resolved", "", Some(1), &t);
        set_condition(
            &mut st.conditions,
            PROGRESSING,
            true,
            "Progressing",
            "",
            Some(1),
            &t,
        );
        set_condition(&mut st.conditions, SUSPENDED, true, "Suspended", "", Some(1), &t);
        set_summary(&mut st, Some(1), &t);
        assert!(present(&st).is_empty(), "suspended: neither");
        st.phase = Phase::Failed;
        set_condition(
            &mut st.conditions,
            FAILED,
            true,
            "BucketNotFound",
            "m",
            Some(1),
            &t,
        );
        set_summary(&mut st, Some(1), &t);
        assert_eq!(present(&st), ["Stalled=True:BucketNotFound"]);
        st.phase = Phase::Complete;
        set_summary(&mut st, Some(1), &t);
        assert!(present(&st).is_empty(), "complete: neither");
        assert_eq!(standing(&st).0, Standing::Current);
        assert!(!set_summary(&mut st, Some(1), &t), "nothing changed");
    }

    #[test]
    fn the_deadline_counts_from_the_start() {
        let t = |s| Time(k8s_openapi::jiff::Timestamp::from_second(s).unwrap());
        assert_eq!(deadline_left(None, Some(10), &t(100)), None, "not started");
        assert_eq!(deadline_left(Some(&t(100)), None, &t(200)), None, "no deadline");
        assert_eq!(deadline_left(Some(&t(100)), Some(60), &t(130)), Some(30));
        assert_eq!(deadline_left(Some(&t(100)), Some(60), &t(160)), Some(0));
        assert_eq!(deadline_left(Some(&t(100)), Some(60), &t(175)), Some(-15));
    }

    #[test]
    fn counters_map_to_status_fields() {
        let counters = BTreeMap::from([
            ("heads".to_string(), 10),
            ("errors".to_string(), 2),
            ("filtered".to_string(), 7),
        ]);
        let o = object_counts(&counters);
        assert_eq!((o.scanned, o.errors, o.with_metadata), (10, 2, 0));
        assert_eq!(o.filtered, 7, "filtered objects are not scanned, but counted");
        let counters = BTreeMap::from([("heads".to_string(), 10), ("from_listing".to_string(), 990)]);
        assert_eq!(
            object_counts(&counters).scanned,
            1000,
            "records from the listing are scanned too"
        );
        let counters = BTreeMap::from([("heads".to_string(), 10), ("reused".to_string(), 990)]);
        assert_eq!(
            object_counts(&counters).scanned,
            1000,
            "records taken from the baseline are scanned too"
        );
    }
}
