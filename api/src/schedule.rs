//! The `BucketScanSchedule` custom resource: BucketScans made on a cron
//! schedule, as a CronJob makes Jobs. Doc comments become the schema's
//! descriptions (`kubectl explain bucketscanschedule.spec`); what a schema
//! rule can check (ranges, enums, the refused `deleteResultsWithHistory`)
//! is refused at `kubectl apply`, the cron expression and the time zone by
//! the operator (condition Ready=False, reason InvalidSchedule or
//! InvalidTimeZone).
//!
//! May import: `crd` (the scan template is a `BucketScanSpec`).

use crate::crd::BucketScanSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The label every scan of a schedule carries, its value the schedule's name.
pub const SCHEDULE_LABEL: &str = "bucketscan.dev/schedule";

/// Make a BucketScan on a cron schedule, as a CronJob makes Jobs.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "bucketscan.dev",
    version = "v1alpha1",
    kind = "BucketScanSchedule",
    plural = "bucketscanschedules",
    shortname = "bscansched",
    namespaced,
    doc = "BucketScans made on a cron schedule (as a CronJob makes Jobs): each run is a BucketScan named SCHEDULE-MINUTES, owned by the schedule and labelled bucketscan.dev/schedule, incremental against the last successful run unless spec.incremental is false.",
    status = "BucketScanScheduleStatus",
    printcolumn = r#"{"name":"Schedule","type":"string","jsonPath":".spec.schedule"}"#,
    printcolumn = r#"{"name":"Suspend","type":"boolean","jsonPath":".spec.suspend"}"#,
    printcolumn = r#"{"name":"Active","type":"integer","jsonPath":".status.activeCount"}"#,
    printcolumn = r#"{"name":"Last Schedule","type":"date","jsonPath":".status.lastScheduleTime"}"#,
    printcolumn = r#"{"name":"Last Success","type":"date","jsonPath":".status.lastSuccessfulTime"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    printcolumn = r#"{"name":"Next","type":"date","priority":1,"jsonPath":".status.nextScheduleTime"}"#,
    printcolumn = r#"{"name":"Message","type":"string","priority":1,"jsonPath":".status.conditions[?(@.type==\"Ready\")].message"}"#
)]
#[serde(rename_all = "camelCase")]
// A scan of versions takes no baseline (docs/bad-input.md, row 183), so an
// incremental schedule of one would have every run after the first refused
// (PlanRefused): refused when written instead.
#[x_kube(validation = Rule::new("!(self.incremental && has(self.scanTemplate.columns) && has(self.scanTemplate.columns.versions) && self.scanTemplate.columns.versions)").message("an incremental schedule cannot scan versions (scanTemplate.columns.versions): incremental runs compare one record per key with the last run; set incremental: false to scan every version on each run"))]
pub struct BucketScanScheduleSpec {
    /// When to run, in cron's five fields (minute hour day-of-month month
    /// day-of-week, names such as `mon` and `jan` allowed), or `@hourly`,
    /// `@daily`, `@weekly`, `@monthly`, `@yearly`. Such as `0 2 * * *`
    /// (every night at 02:00).
    #[schemars(length(min = 1, max = 256))]
    pub schedule: String,
    /// IANA time zone the schedule is read in, such as `Europe/Berlin`.
    /// Unset: UTC.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 64))]
    pub time_zone: Option<String>,
    /// What to do when a run is due while an earlier run still scans.
    #[serde(default)]
    pub concurrency_policy: ConcurrencyPolicy,
    /// A run that could not start within this many seconds of its time
    /// (the operator was down, or Forbid held it) is skipped, and counted
    /// in status.skippedRuns. Unset: it starts however late (only the most
    /// recent missed run: at most one catch-up run after a downtime).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self >= 1").message("startingDeadlineSeconds must be at least 1"))]
    pub starting_deadline_seconds: Option<i64>,
    /// Start no new run while true (runs already started go on).
    #[serde(default)]
    pub suspend: bool,
    /// Complete scans to keep (older ones are deleted, their results stay
    /// in S3 unless deleteResultsWithHistory). With incremental, the last
    /// Complete scan is always kept: it is the next run's baseline.
    #[serde(default = "default_successful_limit")]
    #[schemars(extend("default" = 3))]
    #[x_kube(validation = Rule::new("self >= 0 && self <= 1000").message("successfulScansHistoryLimit must be between 0 and 1000"))]
    pub successful_scans_history_limit: i32,
    /// Failed scans to keep (older ones are deleted).
    #[serde(default = "default_failed_limit")]
    #[schemars(extend("default" = 1))]
    #[x_kube(validation = Rule::new("self >= 0 && self <= 1000").message("failedScansHistoryLimit must be between 0 and 1000"))]
    pub failed_scans_history_limit: i32,
    /// Delete the results in S3 of the scans the history limits delete.
    /// Only false is implemented: their results stay in S3 (remove them
    /// with a bucket lifecycle rule on the output prefix).
    #[serde(default)]
    #[x_kube(validation = Rule::new("self == false").message("deleteResultsWithHistory: true is not implemented yet: pruned scans keep their results in S3; set it to false and expire old results with a lifecycle rule on the output prefix"))]
    pub delete_results_with_history: bool,
    /// Make each run incremental against the last Complete run
    /// (spec.baseline.scan): it HEADs only what changed. False: every run
    /// is a full scan.
    #[serde(default = "default_true")]
    #[schemars(extend("default" = true))]
    pub incremental: bool,
    /// The BucketScan each run makes. Its output prefix gets the run's
    /// name appended (`PREFIX/RUN/`) so that runs never write to the same
    /// place; without a prefix each run writes to its own default
    /// (`NAMESPACE/RUN/UID/`).
    #[schemars(schema_with = "scan_template_schema")]
    pub scan_template: BucketScanSpec,
}

/// A BucketScan's spec schema without its transition rule (source and
/// output cannot change once a scan exists): a schedule's template may
/// change; each run's scan is made from it anew.
fn scan_template_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let mut schema = generator.subschema_for::<BucketScanSpec>();
    if let Some(rules) = schema
        .get_mut("x-kubernetes-validations")
        .and_then(|v| v.as_array_mut())
    {
        rules.retain(|r| !r["rule"].as_str().is_some_and(|rule| rule.contains("oldSelf")));
        if rules.is_empty() {
            schema.remove("x-kubernetes-validations");
        }
    }
    schema
}

fn default_successful_limit() -> i32 {
    3
}

fn default_failed_limit() -> i32 {
    1
}

fn default_true() -> bool {
    true
}

/// What to do when a run is due while another still scans. There is no
/// `Allow` (CronJob's default): two runs of one schedule at once would scan
/// the same bucket twice, double the load on the store, and the later one
/// could not be incremental against the earlier.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum ConcurrencyPolicy {
    /// Skip the new run while one of the schedule's scans is active; the
    /// most recent skipped run starts once it ends (within
    /// startingDeadlineSeconds, if set).
    #[default]
    Forbid,
    /// Delete the active scan and start the new one.
    Replace,
}

/// The schedule as the operator last saw it.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct BucketScanScheduleStatus {
    /// Ready (True while the schedule is valid and running; False with
    /// reason InvalidSchedule, InvalidTimeZone, NameTooLong,
    /// NamespaceNotAllowed or Suspended), and Stalled (kstatus: present
    /// only while True, when the spec must be fixed). No Reconciling: a
    /// valid schedule is current between its runs, as kstatus reads a
    /// CronJob; its runs are BucketScans with their own conditions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
    /// The spec generation this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The scheduled time of the last run started or skipped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_schedule_time: Option<Time>,
    /// When the next run is due (absent while suspended or invalid).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_schedule_time: Option<Time>,
    /// The newest Complete scan of the schedule: the next run's baseline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub last_successful_scan: Option<String>,
    /// When that scan completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_successful_time: Option<Time>,
    /// The schedule's scans still running (neither Complete nor Failed).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 1000), inner(length(max = 253)))]
    pub active: Vec<String>,
    /// How many scans are active (the Active column).
    #[serde(default)]
    pub active_count: i32,
    /// Runs skipped since the schedule was made: late past
    /// startingDeadlineSeconds (held by Forbid past it too), or whose name
    /// a scan that is not the schedule's holds.
    #[serde(default)]
    pub skipped_runs: u64,
    /// Why the last run was skipped or held, and when it was due.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024))]
    pub last_skip: Option<String>,
}
