//! The BucketScan a schedule's run makes, and how the schedule's scans
//! are read back: each run's name (`SCHEDULE-MINUTES`, the same for the
//! same scheduled time, so an operator restarted halfway never makes a run
//! twice), its label and owner (deleting the schedule deletes its scans),
//! its own output prefix, and its baseline (the last Complete run). Pure.
//!
//! May import: `crd`.

use crate::crd::{Baseline, BucketScan, BucketScanSpec, Phase};
use bucketscan_api::schedule::{BucketScanSchedule, SCHEDULE_LABEL};
use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::{Resource, ResourceExt};
use std::collections::BTreeMap;

/// The annotation with the run's scheduled time (RFC 3339).
pub const SCHEDULED_AT: &str = "bucketscan.dev/scheduled-at";

/// A schedule's name may be this long at most: its runs' names add a dash
/// and the minutes since 1970 (8 digits until 2160), and a scan's name is
/// a label value of its pods (63 characters at most).
pub const MAX_NAME: usize = 52;

/// The name of the run scheduled at `at`.
pub fn run_name(schedule: &str, at: Timestamp) -> String {
    format!("{schedule}-{}", at.as_second().div_euclid(60))
}

/// The scan of the run at `at`, incremental against `baseline` (the last
/// Complete run) when the schedule says so.
pub fn desired_scan(schedule: &BucketScanSchedule, at: Timestamp, baseline: Option<&str>) -> BucketScan {
    let name = run_name(&schedule.name_any(), at);
    let mut spec = schedule.spec.scan_template.clone();
    if let Some(prefix) = spec
        .output
        .prefix
        .as_deref()
        .filter(|p| !p.trim_matches('/').is_empty())
    {
        spec.output.prefix = Some(format!("{}/{name}/", prefix.trim_end_matches('/')));
    } else {
        // The default prefix (NAMESPACE/NAME/UID/) differs per run already.
        spec.output.prefix = None;
    }
    if schedule.spec.incremental {
        if let Some(scan) = baseline {
            spec.baseline = Some(Baseline {
                scan: Some(scan.to_string()),
                manifest: None,
            });
        }
    }
    BucketScan {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: schedule.namespace(),
            labels: Some(BTreeMap::from([(
                SCHEDULE_LABEL.to_string(),
                schedule.name_any(),
            )])),
            annotations: Some(BTreeMap::from([(SCHEDULED_AT.to_string(), at.to_string())])),
            owner_references: schedule.controller_owner_ref(&()).map(|o| vec![o]),
            ..ObjectMeta::default()
        },
        spec,
        status: None,
    }
}

/// Whether `existing`, found under the name of the run of `at` when that
/// run's scan was created, is the run made already (an operator restarted
/// before it recorded the run): `Ok`. Else the event's reason and why the
/// run is skipped: the name holds another's scan (left alone), or this
/// schedule's scan of that run is being deleted (a user deleted it before
/// the run was recorded: it is not made again, and it is no active run).
pub fn made_already(
    schedule: &BucketScanSchedule,
    existing: &BucketScan,
    at: Timestamp,
) -> Result<(), (&'static str, String)> {
    let name = existing.name_any();
    let ours = existing
        .owner_references()
        .iter()
        .any(|o| Some(&o.uid) == schedule.metadata.uid.as_ref());
    if !ours {
        return Err((
            "RunNameTaken",
            format!("the run of {at} was skipped: BucketScan {name} exists and is not this schedule's (it is left alone)"),
        ));
    }
    if existing.metadata.deletion_timestamp.is_some() {
        return Err((
            "RunDeleted",
            format!("the run of {at} was skipped: its BucketScan {name} was deleted before the run was recorded (it is not made again)"),
        ));
    }
    Ok(())
}

/// One of the schedule's scans, as the schedule needs to know it.
#[derive(Clone, Debug, PartialEq)]
pub struct Run {
    pub name: String,
    pub phase: Phase,
    pub created: Option<Timestamp>,
    /// When it completed or failed.
    pub finished: Option<Timestamp>,
    /// The scan it is incremental against.
    pub baseline: Option<String>,
    /// What a baseline must share with the run that uses it ([`shape`]).
    pub shape: String,
    /// Complete with key ranges missing (`onDeadShards: Partial`): never
    /// a baseline, so never the last successful run.
    pub partial: bool,
    /// Failed because planning refused its baseline (or something else it
    /// planned with): that baseline is not offered to a later run again.
    pub refused_baseline: bool,
}

impl Run {
    pub fn is_active(&self) -> bool {
        !matches!(self.phase, Phase::Complete | Phase::Failed)
    }

    /// When it ended, else when it was made (shown as the last success's
    /// time).
    pub fn time(&self) -> Option<Timestamp> {
        self.finished.or(self.created)
    }

    /// The order of history: when it was made, not when it ended. A run
    /// retried in place ends again later, yet holds the store as its first
    /// round listed it (its later rounds only fill in missing ranges), so a
    /// run made after it is the newer one.
    pub fn age(&self) -> (Option<Timestamp>, &str) {
        (self.created, &self.name)
    }
}

/// The scans of `schedule` among `scans`: labelled with its name and owned
/// by it (its uid; a scan labelled by hand, or of an earlier schedule of
/// the same name, is not its run).
pub fn runs(schedule: &BucketScanSchedule, scans: &[BucketScan]) -> Vec<Run> {
    let uid = schedule.uid();
    let mut runs: Vec<Run> = scans
        .iter()
        .filter(|s| s.labels().get(SCHEDULE_LABEL) == Some(&schedule.name_any()))
        .filter(|s| s.owner_references().iter().any(|o| Some(&o.uid) == uid.as_ref()))
        // A scan being deleted is on its way out, however long its
        // finalizer takes (its parts are deleted by a Job): no longer
        // active (Replace deleted it, or a user did; counted, Forbid held
        // the next run and the status named a replaced run until it was
        // gone), never a baseline (its object goes), not in the history
        // counts.
        .filter(|s| s.metadata.deletion_timestamp.is_none())
        .map(|s| Run {
            name: s.name_any(),
            phase: s.status.as_ref().map(|st| st.phase).unwrap_or_default(),
            created: s.metadata.creation_timestamp.as_ref().map(|t| t.0),
            finished: s
                .status
                .as_ref()
                .and_then(|st| st.completion_time.as_ref())
                .map(|t| t.0),
            baseline: s.spec.baseline.as_ref().and_then(|b| b.scan.clone()),
            shape: shape(&s.spec),
            partial: s
                .status
                .as_ref()
                .is_some_and(|st| st.missing_ranges.unwrap_or(0) > 0),
            refused_baseline: s.status.as_ref().is_some_and(|st| {
                st.phase == Phase::Failed
                    && st.conditions.iter().any(|c| {
                        c.type_ == "Failed"
                            && c.status == "True"
                            && matches!(c.reason.as_str(), "BaselineRefused" | "PlanRefused")
                    })
            }),
        })
        .collect();
    runs.sort_by(|a, b| a.age().cmp(&b.age()));
    runs
}

/// The newest Complete run that misses no key range (a partial one is not
/// a success a later run may build on).
pub fn last_successful(runs: &[Run]) -> Option<&Run> {
    runs.iter()
        .filter(|r| r.phase == Phase::Complete && !r.partial)
        .max_by(|a, b| a.age().cmp(&b.age()))
}

/// The next run's baseline: the newest Complete run of the same store,
/// bucket, prefix, result format, filters and columns as the template now
/// (a scan refuses a baseline of another; after such a change of the
/// template the next run is a full scan), none of whose later runs was
/// refused it (a Complete run whose store check did not settle, say: each
/// run after it would be refused the same, for ever). None when the
/// template cannot take a baseline at all (tags, versions, only objects
/// with metadata): every run is a full scan.
pub fn baseline_for<'a>(schedule: &BucketScanSchedule, runs: &'a [Run]) -> Option<&'a Run> {
    let template = &schedule.spec.scan_template;
    if template.columns.tags || template.columns.versions || template.filters.only_with_metadata {
        return None;
    }
    baseline_among(runs, &shape(template))
}

/// The newest Complete run of shape `wanted` that no later run was
/// refused as its baseline.
pub fn baseline_among<'a>(runs: &'a [Run], wanted: &str) -> Option<&'a Run> {
    newest_not_refused(runs, |r| r.shape == wanted)
}

/// As [`baseline_among`], of any shape (what history keeps).
pub fn baseline_among_any(runs: &[Run]) -> Option<&Run> {
    newest_not_refused(runs, |_| true)
}

fn newest_not_refused(runs: &[Run], shaped: impl Fn(&Run) -> bool) -> Option<&Run> {
    let refused: Vec<&str> = runs
        .iter()
        .filter(|r| r.refused_baseline)
        .filter_map(|r| r.baseline.as_deref())
        .collect();
    let same: Vec<Run> = runs
        .iter()
        .filter(|r| shaped(r) && !refused.contains(&r.name.as_str()))
        .cloned()
        .collect();
    let name = last_successful(&same)?.name.clone();
    runs.iter().find(|r| r.name == name)
}

/// What a baseline must share with the scan incremental against it
/// (`Baseline::admit`).
fn shape(spec: &BucketScanSpec) -> String {
    let (source, output) = (&spec.source, &spec.output);
    format!(
        "{:?} {} {} {:?} {:?} {} {}",
        source.endpoint,
        source.bucket,
        source.prefix,
        output.format,
        output.layout,
        serde_json::to_string(&spec.filters).unwrap_or_default(),
        spec.columns.checksums
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn schedule(prefix: Option<&str>, incremental: bool) -> BucketScanSchedule {
        let mut s: BucketScanSchedule = serde_json::from_value(serde_json::json!({
            "apiVersion": "bucketscan.dev/v1alpha1", "kind": "BucketScanSchedule",
            "metadata": {"name": "nightly", "namespace": "team", "uid": "u-1"},
            "spec": {"schedule": "0 2 * * *", "incremental": incremental,
                     "scanTemplate": {"source": {"bucket": "photos"}, "output": {"bucket": "out"}}}
        }))
        .unwrap();
        s.spec.scan_template.output.prefix = prefix.map(str::to_string);
        s
    }

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn a_run_is_named_by_its_minute_owned_labelled_and_writes_its_own_prefix() {
        let at = ts("2026-11-27T02:00:00Z");
        let scan = desired_scan(&schedule(Some("inventory/photos"), true), at, None);
        assert_eq!(scan.name_any(), "nightly-29929080");
        assert_eq!(
            run_name("nightly", ts("2026-11-27T02:00:59Z")),
            "nightly-29929080"
        );
        assert_eq!(scan.namespace().as_deref(), Some("team"));
        assert_eq!(scan.labels()[SCHEDULE_LABEL], "nightly");
        assert_eq!(scan.annotations()[SCHEDULED_AT], "2026-11-27T02:00:00Z");
        let owner = &scan.owner_references()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.uid.as_str(), owner.controller),
            ("BucketScanSchedule", "u-1", Some(true))
        );
        assert_eq!(
            scan.spec.output.prefix.as_deref(),
            Some("inventory/photos/nightly-29929080/")
        );
        assert_eq!(scan.spec.baseline, None, "no earlier run: a full scan");
        let plain = desired_scan(&schedule(Some("inventory/"), true), at, None);
        assert_eq!(
            plain.spec.output.prefix.as_deref(),
            Some("inventory/nightly-29929080/")
        );
        let default = desired_scan(&schedule(None, true), at, None);
        assert_eq!(
            default.spec.output.prefix, None,
            "the default prefix has the run's name and uid"
        );
    }

    #[test]
    fn an_incremental_run_names_the_last_complete_one_as_baseline() {
        let at = ts("2026-11-27T02:00:00Z");
        let scan = desired_scan(&schedule(None, true), at, Some("nightly-29401080"));
        assert_eq!(
            scan.spec.baseline,
            Some(Baseline {
                scan: Some("nightly-29401080".into()),
                manifest: None
            })
        );
        let full = desired_scan(&schedule(None, false), at, Some("nightly-29401080"));
        assert_eq!(full.spec.baseline, None);
    }

    #[test]
    fn a_baseline_is_a_complete_run_of_the_same_bucket_prefix_and_format() {
        let mut s = schedule(None, true);
        let complete = |scan: &mut BucketScan| {
            scan.status = Some(crate::crd::BucketScanStatus {
                phase: Phase::Complete,
                ..Default::default()
            })
        };
        let mut old = desired_scan(&s, ts("2026-11-25T02:00:00Z"), None);
        complete(&mut old);
        let mut newer = desired_scan(&s, ts("2026-11-26T02:00:00Z"), None);
        complete(&mut newer);
        let found = runs(&s, &[old.clone(), newer.clone()]);
        assert_eq!(
            baseline_for(&s, &found).map(|r| r.name.as_str()),
            Some("nightly-29927640")
        );
        // A newer run that ended Partial is passed over.
        let mut partial = desired_scan(&s, ts("2026-11-27T02:00:00Z"), None);
        complete(&mut partial);
        partial.status.as_mut().unwrap().missing_ranges = Some(1);
        let found = runs(&s, &[old.clone(), newer.clone(), partial]);
        assert_eq!(
            baseline_for(&s, &found).map(|r| r.name.as_str()),
            Some("nightly-29927640")
        );
        assert_eq!(
            last_successful(&found).map(|r| r.name.as_str()),
            Some("nightly-29927640")
        );
        // The template now writes Parquet: no earlier run can be its baseline.
        s.spec.scan_template.output.format = crate::crd::Format::Parquet;
        assert_eq!(baseline_for(&s, &runs(&s, &[old, newer])), None);
    }

    #[test]
    fn a_template_of_other_filters_or_columns_or_one_that_takes_no_baseline_runs_in_full() {
        let mut s = schedule(None, true);
        let mut last = desired_scan(&s, ts("2026-11-26T02:00:00Z"), None);
        last.status = Some(crate::crd::BucketScanStatus {
            phase: Phase::Complete,
            ..Default::default()
        });
        let found = |s: &BucketScanSchedule| runs(s, std::slice::from_ref(&last));
        assert!(baseline_for(&s, &found(&s)).is_some());
        // Each change a scan would refuse the baseline for (`Baseline::admit`).
        s.spec.scan_template.filters.exclude = vec!["*.tmp".into()];
        assert_eq!(baseline_for(&s, &found(&s)), None, "other filters");
        s.spec.scan_template.filters.exclude.clear();
        s.spec.scan_template.columns.checksums = true;
        assert_eq!(baseline_for(&s, &found(&s)), None, "other columns");
        s.spec.scan_template.columns.checksums = false;
        // Templates no baseline serves, whatever the runs before.
        for change in [
            |s: &mut BucketScanSchedule| s.spec.scan_template.columns.tags = true,
            |s: &mut BucketScanSchedule| s.spec.scan_template.filters.only_with_metadata = true,
        ] {
            let mut t = s.clone();
            change(&mut t);
            let same_shape = runs(
                &t,
                &[{
                    let mut r = desired_scan(&t, ts("2026-11-26T03:00:00Z"), None);
                    r.status = last.status.clone();
                    r
                }],
            );
            assert_eq!(baseline_for(&t, &same_shape), None);
        }
    }

    #[test]
    fn a_complete_run_a_later_run_was_refused_is_no_baseline_again() {
        let s = schedule(None, true);
        let done = |scan: &mut BucketScan, phase: Phase, reason: &str| {
            let mut st = crate::crd::BucketScanStatus {
                phase,
                ..Default::default()
            };
            if phase == Phase::Failed {
                st.conditions
                    .push(k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
                        type_: "Failed".into(),
                        status: "True".into(),
                        reason: reason.into(),
                        message: String::new(),
                        last_transition_time: Time(ts("2026-11-26T03:00:00Z")),
                        observed_generation: None,
                    });
            }
            scan.status = Some(st);
        };
        let mut older = desired_scan(&s, ts("2026-11-24T02:00:00Z"), None);
        done(&mut older, Phase::Complete, "");
        // Complete, but its store check never settled: refused as a baseline.
        let mut unsettled = desired_scan(&s, ts("2026-11-25T02:00:00Z"), Some(&older.name_any()));
        done(&mut unsettled, Phase::Complete, "");
        let mut refused = desired_scan(&s, ts("2026-11-26T02:00:00Z"), Some(&unsettled.name_any()));
        done(&mut refused, Phase::Failed, "PlanRefused");
        let found = runs(&s, &[older.clone(), unsettled.clone(), refused.clone()]);
        assert_eq!(
            baseline_for(&s, &found).map(|r| r.name.clone()),
            Some(older.name_any()),
            "the run before it"
        );
        // A run that failed for another reason says nothing of its baseline.
        done(&mut refused, Phase::Failed, "DeadlineExceeded");
        let found = runs(&s, &[older, unsettled.clone(), refused]);
        assert_eq!(
            baseline_for(&s, &found).map(|r| r.name.clone()),
            Some(unsettled.name_any())
        );
    }

    #[test]
    fn a_scan_being_deleted_is_no_longer_a_run() {
        let s = schedule(None, true);
        let deleting = |scan: &mut BucketScan| {
            scan.metadata.deletion_timestamp = Some(Time(ts("2026-11-27T03:00:00Z")));
            scan.metadata.finalizers = Some(vec!["bucketscan.dev/cleanup".into()]);
        };
        let mut complete = desired_scan(&s, ts("2026-11-26T02:00:00Z"), None);
        complete.status = Some(crate::crd::BucketScanStatus {
            phase: Phase::Complete,
            ..Default::default()
        });
        let mut replaced = desired_scan(&s, ts("2026-11-27T02:00:00Z"), None);
        let next = desired_scan(&s, ts("2026-11-27T03:00:00Z"), None);
        let found = runs(&s, &[complete.clone(), replaced.clone(), next.clone()]);
        assert_eq!(found.iter().filter(|r| r.is_active()).count(), 2);
        deleting(&mut replaced);
        let found = runs(&s, &[complete.clone(), replaced.clone(), next.clone()]);
        let active: Vec<&str> = found
            .iter()
            .filter(|r| r.is_active())
            .map(|r| r.name.as_str())
            .collect();
        assert_eq!(
            active,
            ["nightly-29929140"],
            "the replaced run is not active while its finalizer runs"
        );
        assert_eq!(
            baseline_for(&s, &found).map(|r| r.name.as_str()),
            Some("nightly-29927640")
        );
        deleting(&mut complete);
        let found = runs(&s, &[complete, replaced, next]);
        assert_eq!(baseline_for(&s, &found), None, "a deleted run is no baseline");
        assert_eq!(last_successful(&found), None);
    }

    #[test]
    fn a_run_found_made_is_taken_unless_another_s_or_being_deleted() {
        let s = schedule(None, true);
        let at = ts("2026-11-27T02:00:00Z");
        let mut made = desired_scan(&s, at, None);
        assert_eq!(made_already(&s, &made, at), Ok(()));
        let mut stranger = made.clone();
        stranger.metadata.owner_references = None;
        assert_eq!(made_already(&s, &stranger, at).unwrap_err().0, "RunNameTaken");
        // Made, its status write lost, then deleted by a user: counted as
        // started it was neither active nor made again, and the run was
        // lost without a word.
        made.metadata.deletion_timestamp = Some(Time(ts("2026-11-27T02:00:30Z")));
        let (reason, why) = made_already(&s, &made, at).unwrap_err();
        assert_eq!(reason, "RunDeleted");
        assert!(
            why.contains("nightly-29929080 was deleted before the run was recorded"),
            "{why}"
        );
    }

    #[test]
    fn only_labelled_scans_owned_by_this_schedule_are_its_runs() {
        let s = schedule(None, true);
        let mut ours = desired_scan(&s, ts("2026-11-27T02:00:00Z"), None);
        ours.status = Some(crate::crd::BucketScanStatus {
            phase: Phase::Complete,
            ..Default::default()
        });
        let mut stranger = ours.clone();
        stranger.metadata.name = Some("nightly-1".into());
        stranger.metadata.owner_references = None;
        let mut orphan_of_old = ours.clone();
        orphan_of_old.metadata.name = Some("nightly-2".into());
        orphan_of_old.metadata.owner_references.as_mut().unwrap()[0].uid = "u-0".into();
        let found = runs(&s, &[stranger, ours, orphan_of_old]);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].name, "nightly-29929080");
        assert!(!found[0].is_active());
        assert_eq!(
            last_successful(&found).map(|r| r.name.as_str()),
            Some("nightly-29929080")
        );
    }
}
