//! What one namespace may take of the operator and the cluster, so that a
//! tenant cannot starve the others: how many of its scans run at once (the
//! rest wait their turn, oldest first), and how many workers and shards one
//! scan may ask for. Pure: the controller applies it (`controller/apply`).
//!
//! May import: `crd`, `status`.

use crate::crd::{BucketScan, Phase};
use kube::ResourceExt;

/// The operator's caps (flags `--max-active-scans-per-namespace`,
/// `--max-workers-per-scan`, `--max-target-shards`; chart values
/// `operator.limits.*`).
#[derive(Clone, Debug, PartialEq)]
pub struct Limits {
    /// Scans of one namespace that run at once (planned or planning, until
    /// they end); 0: no limit.
    pub active_scans_per_namespace: u32,
    /// Workers one scan may run: the ceiling of `replicas`, `minReplicas`
    /// and `maxReplicas`, and of autoscaling without `maxReplicas`.
    pub workers_per_scan: i32,
    /// Shards one scan may plan (`sharding.targetShards`): each lives in the
    /// shared Redis.
    pub target_shards: u32,
    /// Bytes one scan's keys may hold in Redis (its own user can write
    /// them); more: its user is switched off and it fails with OverLimit.
    /// 0: no limit.
    pub redis_bytes_per_scan: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            active_scans_per_namespace: 10,
            workers_per_scan: 100,
            target_shards: 10_000,
            redis_bytes_per_scan: 64 << 20,
        }
    }
}

/// A scan that asks for more workers or shards than the operator allows:
/// the message names the field, its value, the cap and where it is set.
pub fn over_limit(scan: &BucketScan, limits: &Limits) -> Result<(), String> {
    let w = &scan.spec.workers;
    let workers = [
        ("workers.replicas", w.replicas),
        ("workers.minReplicas", w.min_replicas),
        ("workers.maxReplicas", w.max_replicas),
    ];
    for (field, value) in workers {
        if let Some(n) = value.filter(|n| *n > limits.workers_per_scan) {
            return Err(format!(
                "{field} is {n}, above this operator's limit of {} workers per scan (chart value \
                 operator.limits.workersPerScan, flag --max-workers-per-scan); ask for at most {}",
                limits.workers_per_scan, limits.workers_per_scan
            ));
        }
    }
    if let Some(n) = scan
        .spec
        .sharding
        .target_shards
        .filter(|n| *n > limits.target_shards)
    {
        return Err(format!(
            "sharding.targetShards is {n}, above this operator's limit of {} shards per scan (chart value \
             operator.limits.targetShards, flag --max-target-shards); ask for at most {}",
            limits.target_shards, limits.target_shards
        ));
    }
    Ok(())
}

/// The workers a scan runs, within the cap: autoscaling without
/// `maxReplicas` goes up to the cap, never beyond.
pub fn capped_workers(wanted: i32, limits: &Limits) -> i32 {
    wanted.min(limits.workers_per_scan.max(1))
}

/// Whether `scan` holds one of its namespace's places: it started (planning
/// or later) and has not ended. A suspended scan keeps its place: resuming
/// it must not wait behind scans that came later.
pub fn is_active(scan: &BucketScan) -> bool {
    !ended(scan) && scan.status.as_ref().is_some_and(|st| st.start_time.is_some())
}

/// Where a scan that has not started stands: it may start, or it waits
/// while `active` scans of its namespace run, `ahead` older ones waiting
/// before it.
#[derive(Debug, PartialEq, Eq)]
pub enum Turn {
    Start,
    Wait { active: usize, ahead: usize },
}

/// Whether `scan` (not started) may start, given the other scans of its
/// namespace (`scans`: any set that holds them; others are ignored) and
/// the keys (`namespace/name`) of scans this operator let start that the
/// list may not show as started yet. Scans start oldest first (then by
/// name): a waiting scan lets an older waiting one go before it.
pub fn turn(scan: &BucketScan, scans: &[&BucketScan], started: &[String], cap: u32) -> Turn {
    if cap == 0 {
        return Turn::Start;
    }
    let ns = scan.namespace();
    let key = |s: &BucketScan| format!("{}/{}", s.namespace().unwrap_or_default(), s.name_any());
    let same_ns: Vec<&BucketScan> = scans
        .iter()
        .copied()
        .filter(|s| s.namespace() == ns && s.uid() != scan.uid())
        .collect();
    let holds_place = |s: &BucketScan| is_active(s) || (started.contains(&key(s)) && !ended(s));
    let active = same_ns.iter().filter(|s| holds_place(s)).count();
    let order = |s: &BucketScan| (s.metadata.creation_timestamp.as_ref().map(|t| t.0), s.name_any());
    let ahead = same_ns
        .iter()
        .filter(|s| !holds_place(s) && waits(s) && order(s) < order(scan))
        .count();
    if active + ahead < cap as usize {
        Turn::Start
    } else {
        Turn::Wait { active, ahead }
    }
}

/// A scan that would start when its turn came: not ended, not suspended.
fn waits(scan: &BucketScan) -> bool {
    !ended(scan) && !scan.spec.suspend
}

/// Complete, Failed or being deleted.
fn ended(scan: &BucketScan) -> bool {
    scan.metadata.deletion_timestamp.is_some()
        || matches!(
            scan.status.as_ref().map(|s| s.phase),
            Some(Phase::Complete | Phase::Failed)
        )
}

/// The Queued condition's message.
pub fn queued_message(ns: &str, active: usize, ahead: usize, cap: u32) -> String {
    let line = match ahead {
        0 => "it is next in line".to_string(),
        1 => "1 older scan waits before it".to_string(),
        n => format!("{n} older scans wait before it"),
    };
    format!(
        "{active} scans of namespace {ns:?} are running, this operator's limit of {cap} per namespace (chart \
         value operator.limits.activeScansPerNamespace, flag --max-active-scans-per-namespace); {line}, and \
         it starts when one ends"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::BucketScanStatus;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn scan(ns: &str, name: &str, age: i64, phase: Option<Phase>) -> BucketScan {
        let mut s: BucketScan = serde_json::from_value(serde_json::json!({
            "apiVersion": "bucketscan.dev/v1alpha1", "kind": "BucketScan",
            "metadata": {"name": name, "namespace": ns, "uid": format!("{ns}-{name}")},
            "spec": {"source": {"bucket": "b"}, "output": {"bucket": "o"}}
        }))
        .unwrap();
        let t = k8s_openapi::jiff::Timestamp::from_second(1_700_000_000 + age).unwrap();
        s.metadata.creation_timestamp = Some(Time(t));
        if let Some(phase) = phase {
            s.status = Some(BucketScanStatus {
                phase,
                start_time: (phase != Phase::Pending).then_some(Time(t)),
                ..Default::default()
            });
        }
        s
    }

    #[test]
    fn a_namespace_runs_at_most_its_cap_and_the_rest_wait_oldest_first() {
        let running = [
            scan("a", "r1", 0, Some(Phase::Scanning)),
            scan("a", "r2", 1, Some(Phase::Planning)),
        ];
        let ended = scan("a", "done", 2, Some(Phase::Complete));
        let other_ns = scan("b", "r3", 0, Some(Phase::Scanning));
        let older = scan("a", "w1", 3, None);
        let newer = scan("a", "w2", 4, None);
        let all: Vec<&BucketScan> = running
            .iter()
            .chain([&ended, &other_ns, &older, &newer])
            .collect();
        assert_eq!(turn(&older, &all, &[], 2), Turn::Wait { active: 2, ahead: 0 });
        assert_eq!(turn(&newer, &all, &[], 2), Turn::Wait { active: 2, ahead: 1 });
        // A place frees: the older goes first, the newer still waits.
        assert_eq!(turn(&older, &all, &[], 3), Turn::Start);
        assert_eq!(turn(&newer, &all, &[], 3), Turn::Wait { active: 2, ahead: 1 });
        // Once the older started (known to this operator before the list
        // shows it), the newer waits for a place of its own.
        assert_eq!(
            turn(&newer, &all, &["a/w1".into()], 3),
            Turn::Wait { active: 3, ahead: 0 }
        );
        assert_eq!(turn(&newer, &all, &["a/w1".into()], 4), Turn::Start);
        // A scan this operator started that has ended since holds nothing.
        assert_eq!(turn(&older, &all, &["a/done".into()], 3), Turn::Start);
        // Another namespace's scans never count; no cap: no wait.
        assert_eq!(turn(&scan("b", "x", 9, None), &all, &[], 2), Turn::Start);
        assert_eq!(turn(&newer, &all, &[], 0), Turn::Start);
        let m = queued_message("a", 2, 1, 2);
        assert!(m.contains("operator.limits.activeScansPerNamespace"), "{m}");
        assert!(
            m.contains("limit of 2 per namespace") && m.contains("1 older scan"),
            "{m}"
        );
    }

    #[test]
    fn workers_and_shards_above_the_caps_are_refused_with_the_cap_named() {
        let limits = Limits {
            active_scans_per_namespace: 10,
            workers_per_scan: 20,
            target_shards: 500,
            redis_bytes_per_scan: 0,
        };
        let mut s = scan("a", "s", 0, None);
        assert_eq!(over_limit(&s, &limits), Ok(()));
        s.spec.workers.min_replicas = Some(21);
        let e = over_limit(&s, &limits).unwrap_err();
        assert!(
            e.starts_with("workers.minReplicas is 21, above this operator's limit of 20"),
            "{e}"
        );
        assert!(e.contains("operator.limits.workersPerScan"), "{e}");
        s.spec.workers.min_replicas = Some(5);
        assert_eq!(over_limit(&s, &limits), Ok(()));
        // Autoscaling without maxReplicas goes up to the cap, not 1,000.
        let wanted = crate::desired::desired_replicas(&s.spec.workers, Some(100_000));
        assert_eq!(capped_workers(wanted, &limits), 20);
        s.spec.sharding.target_shards = Some(100_000);
        let e = over_limit(&s, &limits).unwrap_err();
        assert!(
            e.starts_with("sharding.targetShards is 100000, above this operator's limit of 500"),
            "{e}"
        );
    }
}
