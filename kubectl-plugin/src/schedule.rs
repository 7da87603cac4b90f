//! `kubectl bucketscan schedule`: one BucketScanSchedule (its schedule,
//! status, next run and its runs with phase, objects and changes, newest
//! first), or a line per schedule. Reading ([`get`], [`runs`], [`list`])
//! and the text (`report`, `table`: pure, unit-tested) are apart.
//!
//! May import: error, render

use crate::error::Error;
use crate::render::{columns, thousands};
use bucketscan_api::crd::BucketScan;
use bucketscan_api::schedule::{BucketScanSchedule, SCHEDULE_LABEL};
use kube::api::ListParams;
use kube::{Api, Client, ResourceExt};
use std::fmt::Write as _;

fn refused(e: kube::Error) -> Error {
    match e {
        kube::Error::Api(status) if status.is_not_found() => Error::NoScheduleCrd,
        e @ (kube::Error::HyperError(_) | kube::Error::Service(_)) => Error::Unreachable(e.to_string()),
        e => e.into(),
    }
}

/// The schedule `name`, or a not-found error naming it.
pub async fn get(client: &Client, namespace: &str, name: &str) -> Result<BucketScanSchedule, Error> {
    let api: Api<BucketScanSchedule> = Api::namespaced(client.clone(), namespace);
    match api.get_opt(name).await {
        Ok(Some(s)) => Ok(s),
        Ok(None) => Err(Error::ScheduleNotFound {
            name: name.to_string(),
            namespace: namespace.to_string(),
        }),
        Err(e) => Err(refused(e)),
    }
}

/// The scans of `schedule` (by its label and owner), newest first.
pub async fn runs(client: &Client, schedule: &BucketScanSchedule) -> Result<Vec<BucketScan>, Error> {
    let ns = schedule.namespace().unwrap_or_default();
    let api: Api<BucketScan> = Api::namespaced(client.clone(), &ns);
    let selector = format!("{SCHEDULE_LABEL}={}", schedule.name_any());
    let mut scans: Vec<BucketScan> = api
        .list(&ListParams::default().labels(&selector))
        .await
        .map_err(refused)?
        .items
        .into_iter()
        .filter(|s| {
            s.owner_references()
                .iter()
                .any(|o| Some(&o.uid) == schedule.metadata.uid.as_ref())
        })
        .collect();
    scans.sort_by(|a, b| {
        (&b.metadata.creation_timestamp, b.name_any()).cmp(&(&a.metadata.creation_timestamp, a.name_any()))
    });
    Ok(scans)
}

/// The schedules of `namespace`, or of every namespace.
pub async fn list(client: &Client, namespace: Option<&str>) -> Result<Vec<BucketScanSchedule>, Error> {
    let api: Api<BucketScanSchedule> = match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let mut items = api.list(&Default::default()).await.map_err(refused)?.items;
    items.sort_by(|a, b| {
        (&a.metadata.namespace, &a.metadata.name).cmp(&(&b.metadata.namespace, &b.metadata.name))
    });
    Ok(items)
}

fn time(t: &Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>) -> String {
    t.as_ref().map_or_else(|| "-".into(), |t| t.0.to_string())
}

/// The report of one schedule and its runs.
pub fn report(schedule: &BucketScanSchedule, runs: &[BucketScan]) -> String {
    let st = schedule.status.clone().unwrap_or_default();
    let spec = &schedule.spec;
    let mut out = String::new();
    let ns = schedule.namespace().unwrap_or_default();
    let _ = writeln!(out, "BucketScanSchedule {ns}/{}", schedule.name_any());
    let zone = spec.time_zone.as_deref().unwrap_or("UTC");
    let _ = writeln!(out, "  schedule:      {} ({zone})", spec.schedule);
    let _ = writeln!(
        out,
        "  policy:        {:?}{}{}",
        spec.concurrency_policy,
        if spec.incremental {
            ", incremental"
        } else {
            ", full scans"
        },
        if spec.suspend { ", SUSPENDED" } else { "" }
    );
    let _ = writeln!(out, "  last run:      {}", time(&st.last_schedule_time));
    let _ = writeln!(out, "  next run:      {}", time(&st.next_schedule_time));
    let success = st.last_successful_scan.as_ref().map_or_else(
        || "-".into(),
        |n| format!("{n} at {}", time(&st.last_successful_time)),
    );
    let _ = writeln!(out, "  last success:  {success}");
    if st.skipped_runs > 0 {
        let _ = writeln!(out, "  skipped runs:  {}", st.skipped_runs);
    }
    if let Some(skip) = &st.last_skip {
        let _ = writeln!(out, "  last skip:     {skip}");
    }
    for c in &st.conditions {
        let _ = writeln!(
            out,
            "  {:<14} {} {}: {}",
            format!("{}:", c.type_),
            c.status,
            c.reason,
            c.message
        );
    }
    if runs.is_empty() {
        let _ = writeln!(out, "  runs:          none yet");
        return out;
    }
    let mut rows = vec![["RUN", "PHASE", "OBJECTS", "CHANGES", "STARTED"]
        .map(String::from)
        .to_vec()];
    for scan in runs {
        let s = scan.status.clone().unwrap_or_default();
        let objects = s
            .objects
            .as_ref()
            .map_or_else(|| "-".into(), |o| thousands(o.scanned));
        let changes = s.changes.as_ref().map_or_else(
            || "-".into(),
            |c| {
                format!(
                    "+{} -{} ~{} m{}",
                    thousands(c.added),
                    thousands(c.removed),
                    thousands(c.content_changed),
                    thousands(c.metadata_changed)
                )
            },
        );
        rows.push(vec![
            scan.name_any(),
            format!("{:?}", s.phase),
            objects,
            changes,
            time(&scan.metadata.creation_timestamp),
        ]);
    }
    let _ = writeln!(
        out,
        "  runs (newest first; changes: +added -removed ~content m metadata):"
    );
    out.push_str(&columns(&rows, "    "));
    out
}

/// A line per schedule, as `kubectl get` shows them.
pub fn table(schedules: &[BucketScanSchedule], namespaces: bool) -> String {
    if schedules.is_empty() {
        return "No BucketScanSchedules found.\n".into();
    }
    let mut rows = vec![["NAME", "SCHEDULE", "SUSPEND", "ACTIVE", "LAST SUCCESS", "NEXT"]
        .map(String::from)
        .to_vec()];
    if namespaces {
        rows[0].insert(0, "NAMESPACE".into());
    }
    for s in schedules {
        let st = s.status.clone().unwrap_or_default();
        let mut row = vec![
            s.name_any(),
            s.spec.schedule.clone(),
            s.spec.suspend.to_string(),
            st.active_count.to_string(),
            st.last_successful_scan.clone().unwrap_or_else(|| "-".into()),
            time(&st.next_schedule_time),
        ];
        if namespaces {
            row.insert(0, s.namespace().unwrap_or_default());
        }
        rows.push(row);
    }
    columns(&rows, "")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schedule() -> BucketScanSchedule {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "bucketscan.dev/v1alpha1", "kind": "BucketScanSchedule",
            "metadata": {"name": "nightly", "namespace": "team"},
            "spec": {"schedule": "0 2 * * *", "timeZone": "Europe/Berlin",
                     "scanTemplate": {"source": {"bucket": "photos"}, "output": {"bucket": "out"}}},
            "status": {"lastScheduleTime": "2026-11-27T01:00:00Z", "nextScheduleTime": "2026-11-28T01:00:00Z",
                       "lastSuccessfulScan": "nightly-29929020", "lastSuccessfulTime": "2026-11-27T01:20:00Z",
                       "activeCount": 1, "active": ["nightly-29929080"],
                       "conditions": [{"type": "Ready", "status": "True", "reason": "Scheduled",
                                       "message": "next run at 2026-11-28T01:00:00Z",
                                       "lastTransitionTime": "2026-11-27T01:00:00Z"}]}
        }))
        .unwrap()
    }

    #[test]
    fn the_report_shows_the_schedule_its_next_run_and_each_run_with_its_changes() {
        let run: BucketScan = serde_json::from_value(serde_json::json!({
            "apiVersion": "bucketscan.dev/v1alpha1", "kind": "BucketScan",
            "metadata": {"name": "nightly-29929080", "creationTimestamp": "2026-11-27T01:00:01Z"},
            "spec": {"source": {"bucket": "photos"}, "output": {"bucket": "out"}},
            "status": {"phase": "Complete", "objects": {"scanned": 1234567, "withMetadata": 0, "vanished": 0, "errors": 0, "bytes": 0},
                       "changes": {"added": 10, "removed": 2, "contentChanged": 3, "metadataChanged": 4, "reused": 1000}}
        }))
        .unwrap();
        let text = report(&schedule(), &[run]);
        for want in [
            "BucketScanSchedule team/nightly",
            "schedule:      0 2 * * * (Europe/Berlin)",
            "policy:        Forbid, incremental",
            "next run:      2026-11-28T01:00:00Z",
            "last success:  nightly-29929020 at 2026-11-27T01:20:00Z",
            "Ready:         True Scheduled: next run at",
            "nightly-29929080   Complete   1,234,567   +10 -2 ~3 m4   2026-11-27T01:00:01Z",
        ] {
            assert!(text.contains(want), "{want:?} not in:\n{text}");
        }
        assert!(report(&schedule(), &[]).contains("runs:          none yet"));
    }

    #[test]
    fn the_table_has_a_line_per_schedule() {
        let text = table(&[schedule()], true);
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].starts_with("NAMESPACE   NAME      SCHEDULE"), "{text}");
        assert!(
            lines[1].contains("team        nightly   0 2 * * *   false     1"),
            "{text}"
        );
        assert_eq!(table(&[], false), "No BucketScanSchedules found.\n");
    }
}
