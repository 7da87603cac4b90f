//! The `BucketScan` custom resource. Doc comments become the schema's
//! descriptions, which `kubectl explain bucketscan.spec...` shows; schema
//! rules (required fields, ranges, patterns, CEL) make the API server refuse a
//! bad spec with a readable message before the operator ever sees it.

use k8s_openapi::api::core::v1::{
    Affinity, LocalObjectReference, ResourceRequirements, Toleration, TopologySpreadConstraint,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

pub const GROUP: &str = "bucketscan.dev";

/// Read the user metadata of every object in an S3 bucket into a result in S3 (JSON Lines, CSV or Parquet; one object or a dataset with a manifest).
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[kube(
    group = "bucketscan.dev",
    version = "v1alpha1",
    kind = "BucketScan",
    plural = "bucketscans",
    shortname = "bscan",
    namespaced,
    doc = "A scan of every object's user metadata in one S3 bucket, merged into a result in S3: one JSON Lines, CSV or Parquet object, or a dataset of such files with a manifest (spec.output). Create one per scan; its status shows progress, and the Complete condition is set when the result is ready.",
    status = "BucketScanStatus",
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"Progress","type":"string","jsonPath":".status.progress"}"#,
    printcolumn = r#"{"name":"Objects","type":"integer","jsonPath":".status.objects.scanned"}"#,
    printcolumn = r#"{"name":"Rate","type":"string","jsonPath":".status.rate"}"#,
    printcolumn = r#"{"name":"ETA","type":"string","jsonPath":".status.eta"}"#,
    printcolumn = r#"{"name":"Workers","type":"string","jsonPath":".status.workersReady"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    printcolumn = r#"{"name":"Governed","type":"string","priority":1,"jsonPath":".status.governedRate"}"#,
    printcolumn = r#"{"name":"Message","type":"string","priority":1,"jsonPath":".status.conditions[?(@.type==\"Ready\")].message"}"#
)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("self.source == oldSelf.source && self.output == oldSelf.output").message("source and output cannot change once a scan exists: create a new BucketScan"))]
// On the spec, not on `Filters`: a schedule's template (the spec without its
// transition rules) may change its filters for the next run.
#[x_kube(validation = Rule::new("self.filters == oldSelf.filters").message("filters cannot change once a scan exists (its workers apply the filters it was planned with): create a new BucketScan"))]
#[x_kube(validation = Rule::new("has(self.baseline) == has(oldSelf.baseline) && (!has(self.baseline) || self.baseline == oldSelf.baseline)").message("baseline cannot change once a scan exists (it was planned against it, in its own pod): create a new BucketScan (kubectl bucketscan rerun makes one incremental against a finished scan)"))]
pub struct BucketScanSpec {
    /// The bucket to scan and how to reach it.
    pub source: Source,
    /// Where the merged result (and, while the scan runs, its parts) go.
    pub output: Output,
    /// The worker pods.
    #[serde(default)]
    pub workers: Workers,
    /// How the keyspace is cut into shards before the scan starts.
    #[serde(default)]
    pub sharding: Sharding,
    /// Which objects go into the result.
    #[serde(default)]
    pub filters: Filters,
    /// Where each object's user metadata is read from. `auto`: from the
    /// listing when the store puts it there (MinIO), checked against HEADs
    /// of a sample of every page; elsewhere a HEAD per object. `head`: a
    /// HEAD per object. `list`: the listing's metadata, trusted unchecked.
    /// See docs/metadata-source.md.
    #[serde(default)]
    pub metadata_source: MetadataSource,
    /// Ceiling on HEAD requests per second for the whole scan, shared by the
    /// workers (protects a store that also serves other traffic). Unset: no
    /// ceiling.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self >= 1").message("maxRequestsPerSecond must be at least 1"))]
    pub max_requests_per_second: Option<u32>,
    /// Delete the BucketScan (and with it its Redis keys) this many seconds
    /// after it completed or failed. Unset: keep it. The result stays in S3.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self >= 0").message("ttlSecondsAfterFinished must not be negative"))]
    pub ttl_seconds_after_finished: Option<i64>,
    /// Pause the scan (like a Job's `suspend`): its workers scale to 0 and
    /// nothing new starts (no planning, no merge); every finished shard and
    /// checkpoint stays in Redis, and setting it back to false continues
    /// where the scan stopped. The Suspended condition shows it.
    #[serde(default)]
    pub suspend: bool,
    /// Seconds the scan may run, counted from status.startTime (suspended
    /// time included); past it the scan fails with reason DeadlineExceeded
    /// and its workers and merge Job are removed. Unset: no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self >= 1").message("activeDeadlineSeconds must be at least 1"))]
    pub active_deadline_seconds: Option<i64>,
    /// An earlier complete result of the same bucket, prefix and output
    /// format to be incremental against: objects whose size, ETag and
    /// LastModified match its record (and were safely older than its start)
    /// are not HEADed again but taken from it, and the scan also writes the
    /// changes since it under `changes/`. See docs/incremental.md.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baseline: Option<Baseline>,
    /// Optional columns of the result, each at a cost (docs/results.md,
    /// "Columns a HEAD or LIST answers"). A baseline must have been scanned
    /// with the same ones.
    #[serde(default, skip_serializing_if = "Columns::is_default")]
    pub columns: Columns,
    /// What the scan says when shards failed for good (after their
    /// retries): `Fail` (default): phase Failed, reason ShardsFailed.
    /// `Partial`: phase Complete, Complete condition reason Partial. Either
    /// way the result holds every other object exactly once, the manifest's
    /// `dead` and status.missing name the missing key ranges, and a partial
    /// result is never taken as a baseline. See spec.retry.
    #[serde(default)]
    pub on_dead_shards: crate::retry::OnDeadShards,
    /// Retry a finished scan in place: raise this by one (`kubectl
    /// bucketscan retry NAME` does) and the operator scans again only the
    /// dead shards and the shards holding error records, then merges again;
    /// the scan ends Complete, or Partial or Failed when shards die again.
    /// status.retries is the last value acted on; refused (a RetryRefused
    /// event) while the scan runs or when it has nothing to retry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 1000))]
    pub retry: Option<u32>,
}

/// Optional columns of the result. Encryption, KMS key, bucket key,
/// checksum algorithm, multipart, object lock and replication come with
/// every HEAD and need nothing here.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct Columns {
    /// HEAD in checksum mode: each record gets the object's checksum value
    /// (`checksum`). No more requests; every object is HEADed (a listing
    /// has no checksum values), whatever `metadataSource` says.
    #[serde(default)]
    pub checksums: bool,
    /// Fill `object_tags`: one GetObjectTagging more per object HEADed
    /// (none where MinIO lists the tags and `metadataSource` allows it).
    /// Not with `baseline`: tags change without moving an object's ETag or
    /// LastModified.
    #[serde(default)]
    pub tags: bool,
    /// Every version and delete marker of every key (ListObjectVersions):
    /// a record each, with `version_id`, `is_latest` and
    /// `is_delete_marker`. Each version is HEADed by its version id (every
    /// one, whatever `metadataSource` says); a delete marker is a record
    /// without a HEAD. A bucket without versioning lists one version `null`
    /// per object. Not with `baseline`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub versions: bool,
}

impl Columns {
    pub fn is_default(&self) -> bool {
        *self == Columns::default()
    }
}

/// The result an incremental scan starts from: exactly one of `scan` and
/// `manifest`.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("has(self.scan) != has(self.manifest)").message("baseline takes exactly one of scan (a BucketScan in this namespace) and manifest (s3://BUCKET/KEY of a result's manifest.json)"))]
pub struct Baseline {
    /// A Complete BucketScan in this namespace; its status.manifest is read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub scan: Option<String>,
    /// `s3://BUCKET/KEY` of a result's manifest.json, on the output's store.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 6, max = 2048))]
    pub manifest: Option<String>,
}

/// The bucket to scan.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("!(has(self.insecureSkipTlsVerify) && self.insecureSkipTlsVerify && has(self.caSecret))").message("set either caSecret or insecureSkipTlsVerify, not both"))]
pub struct Source {
    /// S3 endpoint URL, such as http://10.0.0.5:9000 or https://s3.example.com.
    /// Unset: AWS S3 in `region`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self.matches('^https?://[^/?#\\\\s]+/?$')").message("endpoint must be http(s)://HOST[:PORT] without a path"))]
    #[schemars(length(max = 2048))]
    pub endpoint: Option<String>,
    /// Region to sign requests for (on AWS also part of the host name):
    /// lower-case letters, digits and dashes, such as us-east-1.
    #[serde(default = "default_region")]
    #[x_kube(validation = Rule::new("self.matches('^[a-z0-9-]{1,64}$')").message("region must be 1-64 lower-case letters, digits and dashes, such as us-east-1"))]
    #[schemars(length(max = 64))]
    pub region: String,
    /// Bucket name.
    #[x_kube(validation = Rule::new("self.matches('^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$')").message("bucket must be a valid S3 bucket name: 3-63 lower-case letters, digits, dots and hyphens"))]
    #[schemars(length(max = 63))]
    pub bucket: String,
    /// Scan only keys that start with this prefix.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(length(max = 1024))]
    pub prefix: String,
    /// Path-style addressing (endpoint/bucket/key), which most stores other
    /// than AWS need.
    #[serde(default)]
    pub path_style: bool,
    /// Secret with the keys AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and
    /// optionally AWS_SESSION_TOKEN). Unset: the pods' own identity (IRSA,
    /// Workload Identity, instance profile, through
    /// workers.podTemplate.serviceAccountName); planning and the deletion of
    /// parts then run as Jobs in the workers' pod, never with the
    /// operator's identity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials_secret: Option<SecretReference>,
    /// Secret holding a PEM CA bundle (key `ca.crt` unless `key` says
    /// otherwise) that signed the endpoint's certificate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_secret: Option<SecretKeyReference>,
    /// Do not verify the endpoint's TLS certificate. For tests only.
    #[serde(default)]
    pub insecure_skip_tls_verify: bool,
}

fn default_region() -> String {
    "us-east-1".into()
}

/// A Secret in the BucketScan's namespace.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
pub struct SecretReference {
    /// Secret name.
    #[schemars(length(max = 253))]
    #[x_kube(validation = Rule::new("self.matches('^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$')").message("name must be a valid Secret name"))]
    pub name: String,
}

/// One key of a Secret in the BucketScan's namespace.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
pub struct SecretKeyReference {
    /// Secret name.
    #[schemars(length(max = 253))]
    #[x_kube(validation = Rule::new("self.matches('^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$')").message("name must be a valid Secret name"))]
    pub name: String,
    /// Key within the Secret.
    #[serde(default = "default_ca_key")]
    #[schemars(length(max = 253))]
    pub key: String,
}

fn default_ca_key() -> String {
    "ca.crt".into()
}

/// Where the result goes: `s3://{bucket}/{prefix}result.jsonl[.gz]` (layout
/// `single`) or files under `s3://{bucket}/{prefix}data/` (layout
/// `dataset`), with `manifest.json` beside it listing every file.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("!(has(self.format) && self.format == 'parquet' && has(self.gzip) && self.gzip)").message("gzip does not apply to parquet: Parquet compresses its columns itself (zstd); set gzip to false"))]
pub struct Output {
    /// Bucket for the result, on the source's endpoint.
    #[x_kube(validation = Rule::new("self.matches('^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$')").message("bucket must be a valid S3 bucket name: 3-63 lower-case letters, digits, dots and hyphens"))]
    #[schemars(length(max = 63))]
    pub bucket: String,
    /// Key prefix for the result, such as `scans/photos/` (a prefix without a
    /// trailing `/` gets one). Unset: `NAMESPACE/NAME/UID/`. It must not
    /// overlap the scanned keyspace, nor the output of another running scan.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024))]
    pub prefix: Option<String>,
    /// Result format.
    #[serde(default)]
    pub format: Format,
    /// `single`: one object (the default, where earlier releases put it);
    /// `dataset`: files of at most `fileSizeBytes` under `data/`.
    #[serde(default)]
    pub layout: Layout,
    /// Bound on one data file in bytes, 5 MiB to 5 GiB. Default 1 GiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self >= 5242880 && self <= 5368709120").message("fileSizeBytes must be between 5242880 (5 MiB, S3's smallest part) and 5368709120 (5 GiB, S3's largest copied part)"))]
    pub file_size_bytes: Option<u64>,
    /// Gzip the result.
    #[serde(default)]
    pub gzip: bool,
}

/// Result format.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    /// JSON Lines: one JSON object per object of the bucket.
    #[default]
    Jsonl,
    /// RFC 4180 CSV with a header row; user metadata as a JSON column.
    Csv,
    /// Apache Parquet (zstd); user metadata as a map<string,string> column.
    /// Not with `gzip`.
    Parquet,
}

/// Where user metadata comes from (`bucketscan-worker run --metadata-source`).
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum MetadataSource {
    /// The listing's metadata where a HEAD of a sample of every page agrees
    /// with it; a HEAD per object where the store lists none.
    #[default]
    Auto,
    /// A HEAD per object.
    Head,
    /// The listing's metadata, unchecked; a HEAD for entries without any.
    List,
}

/// Result layout.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum Layout {
    /// One object, `result.jsonl[.gz]`, `result.csv[.gz]` or `result.parquet`.
    #[default]
    Single,
    /// Files of bounded size in key order under `data/`.
    Dataset,
}

/// The worker pods: a fixed number (`replicas`), or between `minReplicas` and
/// `maxReplicas` following the work left.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("!has(self.replicas) || (!has(self.minReplicas) && !has(self.maxReplicas))").message("set either replicas or minReplicas/maxReplicas, not both"))]
#[x_kube(validation = Rule::new("!has(self.minReplicas) || !has(self.maxReplicas) || self.minReplicas <= self.maxReplicas").message("minReplicas must not exceed maxReplicas"))]
pub struct Workers {
    /// A fixed number of workers. Default: 1 when no min/max is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self >= 1 && self <= 1000").message("replicas must be between 1 and 1000"))]
    pub replicas: Option<i32>,
    /// Autoscaling: never fewer workers than this while work is left.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self >= 1 && self <= 1000").message("minReplicas must be between 1 and 1000"))]
    pub min_replicas: Option<i32>,
    /// Autoscaling: never more workers than this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self >= 1 && self <= 1000").message("maxReplicas must be between 1 and 1000"))]
    pub max_replicas: Option<i32>,
    /// HEAD requests in flight per worker.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = 256))]
    #[x_kube(validation = Rule::new("self >= 1 && self <= 10000").message("concurrency must be between 1 and 10000"))]
    pub concurrency: Option<u32>,
    /// Shards each worker lists at once (one LIST stream each, all sharing
    /// its HEADs): more hides slow LIST pages (AWS: about 100 ms for 1,000
    /// keys, 10,000 keys/s per stream). The streams past the first take
    /// only pending shards while no worker waits for work.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = 4))]
    #[x_kube(validation = Rule::new("self >= 1 && self <= 64").message("shardsInFlight must be between 1 and 64"))]
    pub shards_in_flight: Option<u32>,
    /// CPU and memory of each worker container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
    /// Worker image (default: the operator's configured worker image). The
    /// operator may restrict it to an allowlist (chart value
    /// `worker.allowedImages`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024))]
    pub image: Option<String>,
    /// Scheduling, identity and metadata of the worker and merge pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_template: Option<WorkerPodTemplate>,
}

// ---- Worker pod overrides (spec.workers.podTemplate) ----

/// Fields of the worker and merge pods a cluster's policies often require
/// (like KEDA ScaledJob's jobTargetRef and Stackable's podOverrides). Each
/// one is copied into both pods as it is; unset fields keep the defaults.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct WorkerPodTemplate {
    /// Labels added to the pods. The operator's own labels
    /// (app.kubernetes.io/name, component, instance, managed-by) win over
    /// these: they select the pods.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Annotations added to the pods.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    /// Run only on nodes with these labels.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,
    /// Taints the pods tolerate.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tolerations: Vec<Toleration>,
    /// Node and pod (anti-)affinity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub affinity: Option<Affinity>,
    /// How the pods spread over zones or nodes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub topology_spread_constraints: Vec<TopologySpreadConstraint>,
    /// PriorityClass of the pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub priority_class_name: Option<String>,
    /// Secrets to pull a private worker image with.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub image_pull_secrets: Vec<LocalObjectReference>,
    /// ServiceAccount the pods run as (for a cloud identity such as IRSA or
    /// workload identity). Its Kubernetes API token is not mounted: the
    /// workers never call the API.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub service_account_name: Option<String>,
}

// ---- end of worker pod overrides ----

/// How the keyspace is cut into shards before the scan starts. Idle workers
/// split busy workers' shards while it runs, so this only sets the start.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct Sharding {
    /// Split at this character first, like directories (default `/`); empty
    /// for key ranges only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 16), extend("default" = "/"))]
    pub delimiter: Option<String>,
    /// Shards to plan (default 64).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = 64))]
    #[x_kube(validation = Rule::new("self >= 1 && self <= 100000").message("targetShards must be between 1 and 100000"))]
    pub target_shards: Option<u32>,
    /// Plan fewer, bigger shards rather than shards below this many objects
    /// (default 10,000): each shard costs a few dozen Redis operations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = 10000))]
    pub min_shard_objects: Option<u64>,
}

/// Which objects go into the result. Every filter but `onlyWithMetadata` is
/// judged from the listing (LastModified, size, key, storage class), so an
/// object it leaves out costs no HEAD; the scan counts those as `filtered`.
/// See docs/results.md, "Filters".
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("!has(self.minSizeBytes) || !has(self.maxSizeBytes) || self.minSizeBytes <= self.maxSizeBytes").message("minSizeBytes must not exceed maxSizeBytes: no object could match"))]
#[x_kube(validation = Rule::new("!has(self.modifiedAfter) || !has(self.modifiedBefore) || self.modifiedAfter < self.modifiedBefore").message("modifiedAfter must be before modifiedBefore: no object could match (the window is [modifiedAfter, modifiedBefore))"))]
pub struct Filters {
    /// Keep only objects that have user metadata (errors are always kept).
    #[serde(default)]
    pub only_with_metadata: bool,
    /// Keep only objects last modified at or after this time (RFC 3339,
    /// such as 2026-05-01T00:00:00Z).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64), extend("format" = "date-time"))]
    pub modified_after: Option<String>,
    /// Keep only objects last modified before this time (excluded: one
    /// scan's modifiedBefore can be the next one's modifiedAfter).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64), extend("format" = "date-time"))]
    pub modified_before: Option<String>,
    /// Keep only objects of at least this many bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_size_bytes: Option<u64>,
    /// Keep only objects of at most this many bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_size_bytes: Option<u64>,
    /// Keep only keys that match one of these globs. A glob matches the
    /// whole key, the source prefix included: `*` and `?` stop at `/`, `**`
    /// crosses it, `[a-z]` and `[!a-z]` match one character, `\` escapes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 100), inner(length(min = 1, max = 1024)))]
    pub include: Vec<String>,
    /// Leave out keys that match one of these globs (wins over `include`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 100), inner(length(min = 1, max = 1024)))]
    pub exclude: Vec<String>,
    /// Keep only objects of one of these storage classes, such as STANDARD
    /// or GLACIER_IR (case does not matter; an object the listing gives no
    /// class is STANDARD).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(
        length(max = 16),
        inner(length(min = 1, max = 64), regex(pattern = r"^[A-Za-z0-9_-]+$"))
    )]
    pub storage_classes: Vec<String>,
}

/// What the scan is doing.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Phase {
    /// Accepted, not started.
    #[default]
    Pending,
    /// Listing the bucket to cut it into shards.
    Planning,
    /// Workers are scanning shards.
    Scanning,
    /// Joining the parts into the result.
    Merging,
    /// The result is complete.
    Complete,
    /// Stopped for good; the Failed condition says why.
    Failed,
}

/// The scan's progress as the operator last saw it.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct BucketScanStatus {
    /// What the scan is doing: Pending, Planning, Scanning, Merging, Complete
    /// or Failed.
    #[serde(default)]
    pub phase: Phase,
    /// Standard conditions, one of each type: Ready (True once the result is
    /// complete; False with the phase or the failure as reason), Reconciling
    /// and Stalled (kstatus: present only while True; read by Flux, Argo CD
    /// and kstatus-based tools), Planned, Complete, Failed, Suspended,
    /// Blocked (waiting on a cause that may pass), WorkersReady (why worker
    /// pods do not run) and Progressing (False: no progress for a while).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
    /// The spec generation this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Shards by state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shards: Option<ShardCounts>,
    /// Objects seen so far.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub objects: Option<ObjectCounts>,
    /// Share of shards done, such as `42%`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 16))]
    pub progress: Option<String>,
    /// Current HEAD rate of all workers, such as `12345/s`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 32))]
    pub rate: Option<String>,
    /// The rate governor's limits, when the store pushed back: each governed
    /// key partition (first-level prefix, `*` for the rest) with the
    /// requests per second the whole fleet may send to it, lowest first,
    /// such as `hot/ 4200/s`. Absent while nothing is limited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 256))]
    pub governed_rate: Option<String>,
    /// Estimated time left, such as `3m20s`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 32))]
    pub eta: Option<String>,
    /// The result, once complete: s3://BUCKET/PREFIXresult.EXT (layout
    /// single) or s3://BUCKET/PREFIXdata/ (layout dataset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 2048))]
    pub output: Option<String>,
    /// The manifest listing the result's files: s3://BUCKET/PREFIXmanifest.json.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 2048))]
    pub manifest: Option<String>,
    /// When planning started; activeDeadlineSeconds counts from here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,
    /// When the scan completed or failed; ttlSecondsAfterFinished counts from here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_time: Option<Time>,
    /// Current worker replicas.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workers: Option<i32>,
    /// Worker pods ready / wanted, as `kubectl get` shows it (`1/2`); why
    /// the others are not is in the WorkersReady condition.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 32))]
    pub workers_ready: Option<String>,
    /// When the count of objects scanned last grew; a scan without progress
    /// for the operator's --stall-seconds shows Progressing=False.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_progress_time: Option<Time>,
    /// The numbers behind the display strings, for alerts and dashboards.
    #[serde(flatten)]
    pub numbers: StatusNumbers,
    /// The autoscaler's memory between reconciles (with minReplicas /
    /// maxReplicas), so a restarted operator goes on where it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub autoscale: Option<AutoscaleState>,
    /// What changed since the baseline (incremental scans only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub changes: Option<ChangeCounts>,
    /// The baseline's manifest (`s3://BUCKET/KEY`), resolved from
    /// spec.baseline before planning.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 2048))]
    pub baseline: Option<String>,
    /// Key ranges missing from the result (shards that failed for good).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub missing_ranges: Option<u64>,
    /// The first of them (at most 10), with their last error; the manifest's
    /// `dead` lists every one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 10))]
    pub missing: Vec<crate::retry::MissingRange>,
    /// The last spec.retry the operator acted on (retried or refused).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retries: Option<u32>,
    /// The retry round whose step the operator took again after Redis lost
    /// it (`RetryRestored`): once per round, since the scan's own Redis
    /// user can write what makes it look lost; a second loss of the same
    /// round fails the scan.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_restored: Option<u32>,
}

/// What the throughput-seeking autoscaler keeps from its last step.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct AutoscaleState {
    /// Unix seconds of the last step.
    pub step_time: i64,
    /// Workers asked for since the last step.
    pub workers: i32,
    /// Workers before the last step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workers_before: Option<i32>,
    /// The scan's requests per second when the last step was taken (with
    /// `workersBefore` workers).
    pub rate_before: f64,
    /// Throttling answers seen up to the last step.
    pub throttles_at_step: u64,
    /// The worker count where the rate stopped growing or throttling
    /// began: held there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub knee: Option<i32>,
    /// What made it the knee: `Governed`, `LatencyRise`, `Throttling` or
    /// `RateFlat` (the StoreSaturated reason).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 32))]
    pub knee_reason: Option<String>,
    /// The store's mean HEAD latency (ms) when the last step was taken: a
    /// step that raised it 1.5x made the store queue.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_at_step: Option<f64>,
    /// Unix seconds since when every worker of the last step has been
    /// ready (absent while some are not): its rate is judged after that.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_time: Option<i64>,
}

// ---- Numeric status fields (beside progress/rate/eta strings) ----

/// Numbers beside the display strings of the status.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub struct StatusNumbers {
    /// Objects HEADed or read from the listing so far (live: objects
    /// scanned again after a worker crash count twice).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub objects_done: Option<u64>,
    /// Objects the plan counted when it listed the bucket: exact for small
    /// key ranges, a lower bound where it sampled big ones.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub objects_estimate: Option<u64>,
    /// Current HEAD requests per second of all workers (`rate` as a number).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_per_second: Option<u64>,
    /// Estimated seconds left (`eta` as a number).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eta_seconds: Option<u64>,
    /// Worker pods ready (the first number of `workersReady`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_workers: Option<i32>,
    /// Requests per second the rate governor allows the fleet, summed over
    /// the governed partitions (`governedRate` as a number); absent while
    /// nothing is limited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub governed_rate_per_second: Option<u64>,
    /// Throttling answers (503 SlowDown, 429) the workers got from the
    /// store so far, retries included.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub store_throttles: Option<u64>,
}

// ---- end of numeric status fields ----

/// Shards by state.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
pub struct ShardCounts {
    /// Shards planned (idle workers splitting busy ones' shards add more).
    pub total: u64,
    /// Waiting for a worker.
    pub pending: u64,
    /// Held by a worker now.
    pub leased: u64,
    /// Finished: their objects are in parts in S3.
    pub done: u64,
    /// Failed for good (after 5 tries): missing from the result.
    pub dead: u64,
}

/// Objects seen so far (live counters: keys scanned again after a worker
/// crash count twice; the manifest has exact counts).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub struct ObjectCounts {
    /// Objects HEADed, or read from the listing's metadata (`metadataSource`).
    pub scanned: u64,
    /// Objects that had user metadata.
    pub with_metadata: u64,
    /// Objects listed but gone by the time of their HEAD.
    pub vanished: u64,
    /// Objects whose HEAD failed (they are in the result as error records).
    pub errors: u64,
    /// Bytes of the objects HEADed (their sizes, not bytes transferred).
    pub bytes: u64,
    /// Objects listed that `spec.filters` left out: no HEAD, no record.
    #[serde(default)]
    pub filtered: u64,
}

/// Changes an incremental scan found against its baseline, by kind.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ChangeCounts {
    /// Objects not in the baseline.
    pub added: u64,
    /// Baseline objects no longer listed.
    pub removed: u64,
    /// Objects whose size or ETag changed.
    pub content_changed: u64,
    /// Objects whose content stayed and whose metadata changed.
    pub metadata_changed: u64,
    /// Objects taken from the baseline without a HEAD.
    pub reused: u64,
}
