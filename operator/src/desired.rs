//! Pure functions from a `BucketScan` (and the operator's settings) to the
//! objects it should own: the worker Deployment, the merge Job and the Secret
//! that hands the workers the Redis URL. No API calls here, so every rule is
//! unit-tested.

use crate::crd::{BucketScan, WorkerPodTemplate, Workers};
use bucketscan_core::fleet::spec::{normalize_output_prefix, ScanSpec, DEFAULT_FILE_SIZE};
use bucketscan_core::keyspace::planner::PlanOptions;
use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::batch::v1::{Job, JobSpec};
use k8s_openapi::api::core::v1::ResourceRequirements;
use k8s_openapi::api::core::v1::{
    Capabilities, Container, EnvVar, EnvVarSource, KeyToPath, ObjectFieldSelector, PodSecurityContext,
    PodSpec, PodTemplateSpec, SeccompProfile, Secret, SecretKeySelector, SecretVolumeSource, SecurityContext,
    Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use kube::{Resource, ResourceExt};
use std::collections::BTreeMap;

/// The one image of operator, workers and merge (both binaries are in it),
/// where releases publish it (`just release`), tagged with this build's
/// version: the chart's `appVersion` and image are the same (a test checks).
pub const DEFAULT_IMAGE: &str = concat!("ghcr.io/bucketscan/bucketscan:", env!("CARGO_PKG_VERSION"));

/// The repository of an image reference, without its tag and digest
/// (`reg:5000/team/bucketscan:1.2@sha256:..` → `reg:5000/team/bucketscan`):
/// the image allowlist when none is given (`validate::worker_image`).
pub fn image_repository(image: &str) -> &str {
    let named = image.split('@').next().unwrap_or(image);
    match named.rfind(':') {
        Some(colon) if !named[colon..].contains('/') => &named[..colon],
        _ => named,
    }
}

/// What the operator was started with that shapes every scan's objects.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Worker image when the scan does not name one.
    pub worker_image: String,
    pub image_pull_policy: Option<String>,
    /// HEADs in flight per worker when the scan does not say.
    pub default_concurrency: u32,
    /// Seconds a worker's lease lasts (a dead worker's shard waits this long).
    pub lease_secs: u32,
    /// Images a scan may name in `workers.image` (see
    /// `validate::worker_image`; `*`: any). Default: the repository of the
    /// default image.
    pub allowed_images: Vec<String>,
    /// Container resources of a scan's pods (workers, plan, merge,
    /// delete-parts) when the scan sets none.
    pub worker_resources: ResourceRequirements,
    /// A scan without progress this long shows Progressing=False.
    pub stall_after: std::time::Duration,
    /// Give each scan's pods a Redis user of its own (see
    /// `controller/redis_user.rs`) instead of the operator's Redis URL.
    pub redis_scan_users: bool,
    /// LIST requests planning a scan may spend (the planner's budget).
    pub plan_list_budget: usize,
    /// How long the operator may spend planning one scan in one reconcile
    /// (a store that answers slowly or never would hold a reconcile slot
    /// for hours); past it the scan is blocked, reason PlanningSlow.
    pub planning_deadline: std::time::Duration,
    /// Namespaces whose scans this operator runs (and whose Secrets its RBAC
    /// lets it read); empty: any.
    pub scan_namespaces: Vec<String>,
    /// Where the operator may send a scan's requests (planning, cleanup of
    /// scans with a credentials Secret); see `validate::endpoint`.
    pub allowed_endpoints: std::sync::Arc<bucketscan_core::s3::EndpointAllowlist>,
    /// What one namespace and one scan may take (`limits`).
    pub limits: crate::limits::Limits,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            worker_image: DEFAULT_IMAGE.into(),
            image_pull_policy: None,
            default_concurrency: 256,
            lease_secs: 30,
            allowed_images: vec![image_repository(DEFAULT_IMAGE).to_string()],
            worker_resources: default_worker_resources(),
            redis_scan_users: true,
            stall_after: std::time::Duration::from_secs(300),
            plan_list_budget: PlanOptions::default().max_requests,
            planning_deadline: std::time::Duration::from_secs(120),
            scan_namespaces: Vec::new(),
            allowed_endpoints: Default::default(),
            limits: Default::default(),
        }
    }
}

/// How the scan's keyspace is cut into shards: its `sharding` settings, the
/// operator's LIST budget.
pub fn plan_options(scan: &BucketScan, settings: &Settings) -> PlanOptions {
    let sharding = &scan.spec.sharding;
    PlanOptions {
        delimiter: Some(sharding.delimiter.clone().unwrap_or_else(|| "/".into())).filter(|d| !d.is_empty()),
        target_shards: sharding
            .target_shards
            .unwrap_or(64)
            .min(settings.limits.target_shards.max(1)) as usize,
        min_shard_objects: sharding.min_shard_objects.unwrap_or(10_000),
        max_requests: settings.plan_list_budget,
        ..PlanOptions::default()
    }
}

/// Requests and limits of a worker when neither the scan nor the operator's
/// settings say: a pod without them is BestEffort, which namespaces with a
/// ResourceQuota refuse. A worker at full speed uses about 1.4 cores and
/// under 100 MiB (BENCHMARKS.md); no CPU limit, so it is never throttled.
pub fn default_worker_resources() -> ResourceRequirements {
    let q = |v: &str| Quantity(v.to_string());
    ResourceRequirements {
        requests: Some(BTreeMap::from([
            ("cpu".to_string(), q("250m")),
            ("memory".to_string(), q("128Mi")),
        ])),
        limits: Some(BTreeMap::from([("memory".to_string(), q("512Mi"))])),
        ..ResourceRequirements::default()
    }
}

/// The scan's id in Redis: namespace, name and a piece of the uid, so a
/// BucketScan deleted and created again under the same name starts afresh.
/// Never holds `{` or `}` (the Redis hash tag delimiters).
pub fn scan_id(scan: &BucketScan) -> String {
    let uid = scan.uid().unwrap_or_default();
    let short: String = uid.chars().filter(|c| *c != '-').take(8).collect();
    format!(
        "{}.{}.{}",
        scan.namespace().unwrap_or_default(),
        scan.name_any(),
        short
    )
}

/// Key prefix of the scan's output in its output bucket, ending with `/`.
/// The default holds the scan's uid, so a BucketScan deleted and created
/// again under the same name never writes into the first one's result.
pub fn output_prefix(scan: &BucketScan) -> String {
    match &scan.spec.output.prefix {
        Some(p) => normalize_output_prefix(p),
        None => format!(
            "{}/{}/{}/",
            scan.namespace().unwrap_or_default(),
            scan.name_any(),
            scan.uid().unwrap_or_default()
        ),
    }
}

pub fn workers_name(scan: &BucketScan) -> String {
    format!("{}-workers", scan.name_any())
}

pub fn merge_job_name(scan: &BucketScan) -> String {
    format!("{}-merge", scan.name_any())
}

pub fn redis_secret_name(scan: &BucketScan) -> String {
    format!("{}-redis", scan.name_any())
}

/// How many workers to run. `work_left` is pending + leased shards (`None`
/// before the plan exists): no work left means no workers (a worker exits
/// when the queue is drained; a Deployment would only restart it).
pub fn desired_replicas(workers: &Workers, work_left: Option<u64>) -> i32 {
    if work_left == Some(0) {
        return 0;
    }
    let left = work_left.map(|n| n.min(i32::MAX as u64) as i32);
    match (workers.replicas, workers.min_replicas, workers.max_replicas) {
        (Some(fixed), _, _) => fixed,
        (None, None, None) => 1,
        (None, min, max) => {
            let min = min.unwrap_or(1);
            let max = max.unwrap_or(min.max(1_000));
            left.unwrap_or(min).clamp(min, max.max(min))
        }
    }
}

/// Each worker's share of the scan's request ceiling. With autoscaling it is
/// divided by the maximum, so the ceiling holds at any scale without
/// restarting pods when the scale changes.
pub fn per_worker_rate(scan: &BucketScan) -> Option<f64> {
    let total = scan.spec.max_requests_per_second? as f64;
    let w = &scan.spec.workers;
    let divisor = w
        .replicas
        .or(w.max_replicas)
        .or(w.min_replicas)
        .unwrap_or(1)
        .max(1);
    Some(total / divisor as f64)
}

/// The label selector of the scan's worker pods (`k=v,k=v`).
pub fn worker_selector(scan: &BucketScan) -> String {
    labels(scan, "worker")
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// The annotation that names the scan (its uid) on a child that outlives
/// it and so has no owner reference (the delete-parts Job): the operator
/// writes such a Job only when it carries the scan's own uid.
pub const SCAN_UID: &str = "bucketscan.dev/scan-uid";

/// The label on everything the operator makes (the controller watches only
/// Deployments and Jobs that carry it), and its value.
pub const MANAGED_BY: &str = "app.kubernetes.io/managed-by";
pub const OPERATOR: &str = "bucketscan-operator";

fn labels(scan: &BucketScan, component: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("app.kubernetes.io/name".to_string(), "bucketscan".to_string()),
        ("app.kubernetes.io/component".to_string(), component.to_string()),
        ("app.kubernetes.io/instance".to_string(), scan.name_any()),
        (MANAGED_BY.to_string(), OPERATOR.to_string()),
    ])
}

fn owned_meta(scan: &BucketScan, name: String, component: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name),
        namespace: scan.namespace(),
        labels: Some(labels(scan, component)),
        // blockOwnerDeletion as controller-runtime sets it: a foreground
        // deletion of the scan waits for its children.
        owner_references: scan.controller_owner_ref(&()).map(|mut o| {
            o.block_owner_deletion = Some(true);
            vec![o]
        }),
        ..ObjectMeta::default()
    }
}

/// The Secret the pods read the Redis URL from (the URL may hold the Redis
/// password, so it never goes into a pod spec or an argument).
pub fn redis_secret(scan: &BucketScan, redis_url: &str, redis_ca: Option<&str>) -> Secret {
    let mut data = BTreeMap::from([("url".to_string(), redis_url.to_string())]);
    if let Some(ca) = redis_ca {
        data.insert("ca.crt".to_string(), ca.to_string());
    }
    Secret {
        metadata: owned_meta(scan, redis_secret_name(scan), "redis-credentials"),
        string_data: Some(data),
        ..Secret::default()
    }
}

fn secret_env(name: &str, secret: &str, key: &str, optional: bool) -> EnvVar {
    EnvVar {
        name: name.to_string(),
        value_from: Some(EnvVarSource {
            secret_key_ref: Some(SecretKeySelector {
                name: secret.to_string(),
                key: key.to_string(),
                optional: optional.then_some(true),
            }),
            ..EnvVarSource::default()
        }),
        ..EnvVar::default()
    }
}

fn plain_env(name: &str, value: &str) -> EnvVar {
    EnvVar {
        name: name.to_string(),
        value: Some(value.to_string()),
        ..EnvVar::default()
    }
}

const SOURCE_CA_DIR: &str = "/etc/bucketscan/source-ca";
const REDIS_CA_DIR: &str = "/etc/bucketscan/redis-ca";

/// Arguments every worker command shares: the scan and how to reach the store.
fn common_args(scan: &BucketScan, command: &str) -> Vec<String> {
    let mut args = vec![command.to_string(), "--scan".into(), scan_id(scan)];
    args.extend(endpoint_args(scan));
    args
}

/// How to reach the store.
fn endpoint_args(scan: &BucketScan) -> Vec<String> {
    let src = &scan.spec.source;
    let mut args = vec!["--region".to_string(), src.region.clone()];
    if let Some(endpoint) = &src.endpoint {
        args.extend(["--endpoint".into(), endpoint.clone()]);
    }
    if src.path_style {
        args.push("--path-style".into());
    }
    if let Some(ca) = &src.ca_secret {
        args.extend(["--ca-file".into(), format!("{SOURCE_CA_DIR}/{}", ca.key)]);
    }
    if src.insecure_skip_tls_verify {
        args.push("--insecure-skip-tls-verify".into());
    }
    args
}

/// The pod both workers and the merge run in: the worker image, credentials
/// from Secrets, restricted security settings.
fn pod_spec(scan: &BucketScan, settings: &Settings, args: Vec<String>, redis_ca: bool) -> PodSpec {
    let src = &scan.spec.source;
    let mut env = vec![
        secret_env("BUCKETSCAN_REDIS_URL", &redis_secret_name(scan), "url", false),
        EnvVar {
            name: "POD_NAME".into(),
            value_from: Some(EnvVarSource {
                field_ref: Some(ObjectFieldSelector {
                    field_path: "metadata.name".into(),
                    ..ObjectFieldSelector::default()
                }),
                ..EnvVarSource::default()
            }),
            ..EnvVar::default()
        },
        plain_env("BUCKETSCAN_LOG", "info"),
        plain_env(
            "AWS_EC2_METADATA_DISABLED",
            if uses_instance_metadata(scan) {
                "false"
            } else {
                "true"
            },
        ),
    ];
    if let Some(creds) = &src.credentials_secret {
        env.push(secret_env(
            "AWS_ACCESS_KEY_ID",
            &creds.name,
            "AWS_ACCESS_KEY_ID",
            false,
        ));
        env.push(secret_env(
            "AWS_SECRET_ACCESS_KEY",
            &creds.name,
            "AWS_SECRET_ACCESS_KEY",
            false,
        ));
        env.push(secret_env(
            "AWS_SESSION_TOKEN",
            &creds.name,
            "AWS_SESSION_TOKEN",
            true,
        ));
    }
    let mut volumes = Vec::new();
    let mut mounts = Vec::new();
    if let Some(ca) = &src.ca_secret {
        volumes.push(secret_volume("source-ca", &ca.name, &ca.key));
        mounts.push(mount("source-ca", SOURCE_CA_DIR));
    }
    if redis_ca {
        // Only the CA: the Secret's `url` (the scan's Redis password) is
        // an environment variable already, and no file.
        volumes.push(secret_volume("redis-ca", &redis_secret_name(scan), "ca.crt"));
        mounts.push(mount("redis-ca", REDIS_CA_DIR));
        env.push(plain_env(
            "BUCKETSCAN_REDIS_CA_FILE",
            &format!("{REDIS_CA_DIR}/ca.crt"),
        ));
    }
    let mut pod = PodSpec {
        containers: vec![Container {
            name: "worker".into(),
            image: Some(
                scan.spec
                    .workers
                    .image
                    .clone()
                    .unwrap_or_else(|| settings.worker_image.clone()),
            ),
            image_pull_policy: settings.image_pull_policy.clone(),
            args: Some(args),
            env: Some(env),
            resources: Some(
                scan.spec
                    .workers
                    .resources
                    .clone()
                    .unwrap_or_else(|| settings.worker_resources.clone()),
            ),
            volume_mounts: Some(mounts).filter(|m| !m.is_empty()),
            // A failed pod's last log lines become its termination message:
            // the operator reads why a plan Job failed (and whether it may
            // pass) without reading logs.
            termination_message_policy: Some("FallbackToLogsOnError".into()),
            security_context: Some(SecurityContext {
                allow_privilege_escalation: Some(false),
                read_only_root_filesystem: Some(true),
                capabilities: Some(Capabilities {
                    drop: Some(vec!["ALL".into()]),
                    ..Capabilities::default()
                }),
                ..SecurityContext::default()
            }),
            ..Container::default()
        }],
        volumes: Some(volumes).filter(|v| !v.is_empty()),
        automount_service_account_token: Some(false),
        security_context: Some(PodSecurityContext {
            run_as_non_root: Some(true),
            run_as_user: Some(65532),
            run_as_group: Some(65532),
            seccomp_profile: Some(SeccompProfile {
                type_: "RuntimeDefault".into(),
                ..SeccompProfile::default()
            }),
            ..PodSecurityContext::default()
        }),
        // SIGTERM: the worker checkpoints and releases its shard in seconds.
        termination_grace_period_seconds: Some(30),
        ..PodSpec::default()
    };
    if let Some(t) = &scan.spec.workers.pod_template {
        apply_pod_template(&mut pod, t);
    }
    pod
}

/// The scan's `workers.podTemplate` fields, copied into the pod spec.
fn apply_pod_template(pod: &mut PodSpec, t: &WorkerPodTemplate) {
    pod.node_selector = Some(t.node_selector.clone()).filter(|m| !m.is_empty());
    pod.tolerations = Some(t.tolerations.clone()).filter(|v| !v.is_empty());
    pod.affinity = t.affinity.clone();
    pod.topology_spread_constraints = Some(t.topology_spread_constraints.clone()).filter(|v| !v.is_empty());
    pod.priority_class_name = t.priority_class_name.clone();
    pod.image_pull_secrets = Some(t.image_pull_secrets.clone()).filter(|v| !v.is_empty());
    pod.service_account_name = t.service_account_name.clone();
}

/// Pod metadata: the scan's own labels and annotations, then the operator's
/// labels over them (they select the pods, so a user's may not change them).
fn pod_meta(scan: &BucketScan, component: &str) -> ObjectMeta {
    let template = scan.spec.workers.pod_template.clone().unwrap_or_default();
    let mut pod_labels = template.labels;
    pod_labels.extend(labels(scan, component));
    ObjectMeta {
        labels: Some(pod_labels),
        annotations: Some(template.annotations).filter(|a| !a.is_empty()),
        ..ObjectMeta::default()
    }
}

/// A volume of one key of a Secret, as a file of that name: the pod reads
/// the CA it needs and nothing else the Secret may hold (a `caSecret` is
/// often a TLS Secret with its private key beside `ca.crt`).
fn secret_volume(name: &str, secret: &str, key: &str) -> Volume {
    Volume {
        name: name.into(),
        secret: Some(SecretVolumeSource {
            secret_name: Some(secret.into()),
            items: Some(vec![KeyToPath {
                key: key.into(),
                path: key.into(),
                ..KeyToPath::default()
            }]),
            ..SecretVolumeSource::default()
        }),
        ..Volume::default()
    }
}

fn mount(name: &str, path: &str) -> VolumeMount {
    VolumeMount {
        name: name.into(),
        mount_path: path.into(),
        read_only: Some(true),
        ..VolumeMount::default()
    }
}

/// The worker Deployment: `replicas` pods running `bucketscan-worker run`.
pub fn worker_deployment(
    scan: &BucketScan,
    settings: &Settings,
    replicas: i32,
    redis_ca: bool,
) -> Deployment {
    let mut args = common_args(scan, "run");
    let concurrency = scan
        .spec
        .workers
        .concurrency
        .unwrap_or(settings.default_concurrency);
    let shards_in_flight = scan
        .spec
        .workers
        .shards_in_flight
        .unwrap_or(bucketscan_core::fleet::run::DEFAULT_SHARDS_IN_FLIGHT as u32);
    args.extend([
        "--concurrency".into(),
        concurrency.to_string(),
        "--shards-in-flight".into(),
        shards_in_flight.to_string(),
        "--lease-secs".into(),
        settings.lease_secs.to_string(),
        // The operator runs the reaper.
        "--no-reap".into(),
        // The Deployment is made while the operator plans.
        "--wait-for-plan".into(),
        "--metadata-source".into(),
        core_metadata_source(scan.spec.metadata_source).as_str().into(),
    ]);
    if let Some(rate) = per_worker_rate(scan) {
        args.extend(["--max-rate".into(), format!("{rate}")]);
    }
    let labels = labels(scan, "worker");
    Deployment {
        metadata: owned_meta(scan, workers_name(scan), "worker"),
        spec: Some(DeploymentSpec {
            replicas: Some(replicas),
            selector: LabelSelector {
                match_labels: Some(labels),
                ..LabelSelector::default()
            },
            template: PodTemplateSpec {
                metadata: Some(pod_meta(scan, "worker")),
                spec: Some(pod_spec(scan, settings, args, redis_ca)),
            },
            ..DeploymentSpec::default()
        }),
        ..Deployment::default()
    }
}

/// The resource's choices in core's types (the lean API crate knows nothing
/// of core).
fn core_format(f: crate::crd::Format) -> bucketscan_core::scan::format::Format {
    use bucketscan_core::scan::format::Format;
    match f {
        crate::crd::Format::Jsonl => Format::Jsonl,
        crate::crd::Format::Csv => Format::Csv,
        crate::crd::Format::Parquet => Format::Parquet,
    }
}

fn core_layout(l: crate::crd::Layout) -> bucketscan_core::scan::format::Layout {
    use bucketscan_core::scan::format::Layout;
    match l {
        crate::crd::Layout::Single => Layout::Single,
        crate::crd::Layout::Dataset => Layout::Dataset,
    }
}

fn core_metadata_source(m: crate::crd::MetadataSource) -> bucketscan_core::scan::listed::MetadataSource {
    use bucketscan_core::scan::listed::MetadataSource;
    match m {
        crate::crd::MetadataSource::Auto => MetadataSource::Auto,
        crate::crd::MetadataSource::Head => MetadataSource::Head,
        crate::crd::MetadataSource::List => MetadataSource::List,
    }
}

/// A shard fails for good after this many attempts.
pub const MAX_FAILURES: u32 = 5;

/// The scan's spec as the workers and the merge read it from Redis.
pub fn spec_of(scan: &BucketScan) -> ScanSpec {
    ScanSpec {
        bucket: scan.spec.source.bucket.clone(),
        prefix: scan.spec.source.prefix.clone(),
        output_bucket: scan.spec.output.bucket.clone(),
        output_prefix: output_prefix(scan),
        gzip: scan.spec.output.gzip,
        only_with_metadata: scan.spec.filters.only_with_metadata,
        max_failures: MAX_FAILURES,
        format: core_format(scan.spec.output.format),
        layout: core_layout(scan.spec.output.layout),
        file_size: scan.spec.output.file_size_bytes.unwrap_or(DEFAULT_FILE_SIZE),
        scan_id: scan_id(scan),
        baseline: baseline_manifest(scan),
        change_set: false,
        // Checked before planning (`validate::validate`).
        filter: crate::filters::object_filter(scan).unwrap_or_default(),
        columns: column_options(&scan.spec.columns),
    }
}

/// The CRD's `spec.columns` as the workers read them.
pub fn column_options(columns: &crate::crd::Columns) -> bucketscan_core::scan::column_options::ColumnOptions {
    bucketscan_core::scan::column_options::ColumnOptions {
        checksums: columns.checksums,
        tags: columns.tags,
        versions: columns.versions,
    }
}

/// The baseline's manifest: given in the spec, or resolved from a
/// baseline scan into the status before planning (`controller::baseline`).
pub fn baseline_manifest(scan: &BucketScan) -> Option<String> {
    let baseline = scan.spec.baseline.as_ref()?;
    baseline
        .manifest
        .clone()
        .or_else(|| scan.status.as_ref().and_then(|s| s.baseline.clone()))
}

/// Whether the scan reaches its store with the identity its pods get
/// (no `credentialsSecret`: IRSA, Workload Identity, instance roles). The
/// operator then never talks to the store itself, which would lend the
/// scan the operator's own identity: planning and the deletion of parts
/// run as Jobs in the workers' pod (same ServiceAccount and template).
pub fn uses_pod_identity(scan: &BucketScan) -> bool {
    scan.spec.source.credentials_secret.is_none()
}

/// Whether the scan is planned (and planned again) by a Job in its workers'
/// pod rather than in the operator: a scan with its pods' identity (the
/// operator has none to lend), and a scan with a baseline. A baseline's
/// manifest is the tenant's object, up to `MAX_MANIFEST_BYTES` (64 MiB)
/// decoded whole: a 10^9-object result's runs to tens of MB. In the
/// operator, whose memory every namespace shares, a tenant could fill it;
/// in the scan's own pod it costs only the scan.
pub fn plans_by_job(scan: &BucketScan) -> bool {
    uses_pod_identity(scan) || scan.spec.baseline.is_some()
}

/// Whether the scan's pods may ask the node's instance metadata service for
/// credentials: only when the scan has no credentials Secret and names a
/// ServiceAccount (`podTemplate.serviceAccountName`), the identity a
/// platform team set up for it. Otherwise the node's role,
/// shared by every tenant whose pods run there, stays out of reach
/// (`AWS_EC2_METADATA_DISABLED=true`).
pub fn uses_instance_metadata(scan: &BucketScan) -> bool {
    scan.spec.source.credentials_secret.is_none()
        && scan
            .spec
            .workers
            .pod_template
            .as_ref()
            .is_some_and(|t| t.service_account_name.is_some())
}

/// What to add to a failed plan Job's message when the scan gave its pods
/// no identity: no credentials Secret and no ServiceAccount, so they run as
/// the namespace's `default` ServiceAccount without instance metadata.
pub fn identity_hint(scan: &BucketScan) -> Option<&'static str> {
    (uses_pod_identity(scan) && !uses_instance_metadata(scan)).then_some(
        "the scan names neither spec.source.credentialsSecret nor \
         spec.workers.podTemplate.serviceAccountName, so its pods have no credentials unless the \
         namespace's default ServiceAccount carries a cloud identity (instance metadata is off for \
         them); set one of the two",
    )
}

/// The exit code of `bucketscan-worker` when it failed for a cause that may
/// pass by itself (the store or Redis unreachable): the operator plans
/// again with a new Job instead of failing the scan.
pub const EXIT_TRANSIENT: i32 = 75;

/// The exit code of `bucketscan-worker plan` refused for good by what the
/// scan asks (a baseline it cannot use, an output that is not its own): the
/// scan fails with reason `PlanRefused`, as when the operator plans.
pub const EXIT_REFUSED: i32 = 65;

pub fn plan_job_name(scan: &BucketScan, replan: bool) -> String {
    format!("{}-{}", scan.name_any(), if replan { "replan" } else { "plan" })
}

pub fn cleanup_job_name(scan: &BucketScan) -> String {
    format!("{}-delete-parts", scan.name_any())
}

/// `bucketscan-worker plan` with the scan's spec and sharding, as the
/// operator plans in-process for a scan with a credentials Secret.
pub fn plan_args(scan: &BucketScan, settings: &Settings, replan: bool) -> Vec<String> {
    let spec = spec_of(scan);
    let opts = plan_options(scan, settings);
    let word = |v: serde_json::Value| v.as_str().unwrap_or_default().to_string();
    let mut args = common_args(scan, "plan");
    args.extend([
        "--bucket".into(),
        spec.bucket.clone(),
        "--prefix".into(),
        spec.prefix.clone(),
        "--output".into(),
        format!("s3://{}/{}", spec.output_bucket, spec.output_prefix),
        "--format".into(),
        word(serde_json::to_value(spec.format).unwrap_or_default()),
        "--layout".into(),
        word(serde_json::to_value(spec.layout).unwrap_or_default()),
        "--file-size".into(),
        spec.file_size.to_string(),
        "--target-shards".into(),
        opts.target_shards.to_string(),
        "--plan-list-budget".into(),
        opts.max_requests.to_string(),
        "--min-shard-objects".into(),
        opts.min_shard_objects.to_string(),
        format!("--delimiter={}", opts.delimiter.unwrap_or_default()),
        "--max-failures".into(),
        spec.max_failures.to_string(),
    ]);
    if spec.gzip {
        args.push("--gzip".into());
    }
    if spec.only_with_metadata {
        args.push("--only-with-metadata".into());
    }
    if let Some(baseline) = &spec.baseline {
        args.extend(["--baseline".into(), baseline.clone()]);
    }
    args.extend(crate::filters::plan_flags(spec.filter.spec()));
    // The spec the plan stores for the workers holds the columns too: a
    // plan Job without these planned a scan of checksums, tags or versions
    // as one of none.
    let columns = &spec.columns;
    for (on, flag) in [
        (columns.checksums, "--checksums"),
        (columns.tags, "--tags"),
        (columns.versions, "--versions"),
    ] {
        if on {
            args.push(flag.into());
        }
    }
    if replan {
        args.push("--replan".into());
    }
    args
}

/// The planning Job of a scan that uses its pods' identity: one pod of the
/// workers' template running `bucketscan-worker plan` (safe to run again:
/// planning into a planned scan adds nothing).
pub fn plan_job(scan: &BucketScan, settings: &Settings, redis_ca: bool, replan: bool) -> Job {
    let pod = pod_spec(scan, settings, plan_args(scan, settings, replan), redis_ca);
    let mut job = one_pod_job(scan, plan_job_name(scan, replan), "plan", pod);
    if let Some(spec) = job.spec.as_mut() {
        // The planning deadline holds for a plan Job too (a store that
        // stalls an answer's body would hold it for ever), with time for
        // its pod to start; the operator plans again after a backoff.
        spec.active_deadline_seconds =
            Some((settings.planning_deadline + PLAN_JOB_START_GRACE).as_secs() as i64);
        // A plan refused for good is not run again by the Job's backoff.
        spec.pod_failure_policy = Some(k8s_openapi::api::batch::v1::PodFailurePolicy {
            rules: vec![k8s_openapi::api::batch::v1::PodFailurePolicyRule {
                action: "FailJob".into(),
                on_exit_codes: Some(
                    k8s_openapi::api::batch::v1::PodFailurePolicyOnExitCodesRequirement {
                        container_name: Some("worker".into()),
                        operator: "In".into(),
                        values: vec![EXIT_REFUSED],
                    },
                ),
                on_pod_conditions: None,
            }],
        });
    }
    job
}

/// What a plan Job's deadline adds to the planning deadline: its pod's
/// start (scheduling, an image pull).
pub const PLAN_JOB_START_GRACE: std::time::Duration = std::time::Duration::from_secs(120);

/// The Job that deletes a deleted scan's parts, under the workers' identity.
/// It needs no Redis (whose Secret goes with the scan) and is not owned by
/// the scan, so it outlives it; the TTL controller removes it afterwards.
pub fn cleanup_job(scan: &BucketScan, settings: &Settings) -> Job {
    let spec = spec_of(scan);
    let mut args = vec!["delete-parts".to_string()];
    args.extend(endpoint_args(scan));
    args.extend([
        "--output".into(),
        format!("s3://{}/{}", spec.output_bucket, spec.output_prefix),
        "--scan".into(),
        spec.scan_id,
    ]);
    let mut pod = pod_spec(scan, settings, args, false);
    for c in &mut pod.containers {
        if let Some(env) = c.env.as_mut() {
            env.retain(|e| e.name != "BUCKETSCAN_REDIS_URL");
        }
    }
    let mut job = one_pod_job(scan, cleanup_job_name(scan), "delete-parts", pod);
    job.metadata.owner_references = None;
    job.metadata.annotations = Some(BTreeMap::from([(
        SCAN_UID.to_string(),
        scan.uid().unwrap_or_default(),
    )]));
    if let Some(spec) = job.spec.as_mut() {
        spec.ttl_seconds_after_finished = Some(300);
        spec.active_deadline_seconds = Some(600);
    }
    job
}

fn one_pod_job(scan: &BucketScan, name: String, component: &str, mut pod: PodSpec) -> Job {
    pod.restart_policy = Some("Never".into());
    Job {
        metadata: owned_meta(scan, name, component),
        spec: Some(JobSpec {
            backoff_limit: Some(3),
            template: PodTemplateSpec {
                metadata: Some(pod_meta(scan, component)),
                spec: Some(pod),
            },
            ..JobSpec::default()
        }),
        ..Job::default()
    }
}

/// The merge Job: one pod running `bucketscan-worker merge` (safe to run
/// again, so the Job may retry). It always says `partial` for dead shards:
/// a merge that wrote its result succeeds, and the operator decides from
/// the manifest and spec.onDeadShards what the scan says; were the Job to
/// fail, a manifest Redis then lost could not be adopted by a merge again
/// (a failed merge Job is MergeFailed).
pub fn merge_job(scan: &BucketScan, settings: &Settings, redis_ca: bool) -> Job {
    let mut args = common_args(scan, "merge");
    args.extend(["--on-dead-shards".into(), "partial".into()]);
    // Started in the scan's last seconds (`controller::merge`).
    args.push("--wait-for-shards".into());
    let pod = pod_spec(scan, settings, args, redis_ca);
    one_pod_job(scan, merge_job_name(scan), "merge", pod)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::{BucketScanSpec, Output, SecretKeyReference, SecretReference, Source};

    fn scan(workers: Workers) -> BucketScan {
        let mut scan = BucketScan::new(
            "photos",
            BucketScanSpec {
                source: Source {
                    endpoint: Some("http://10.0.0.5:9000".into()),
                    region: "us-east-1".into(),
                    bucket: "photos".into(),
                    path_style: true,
                    credentials_secret: Some(SecretReference { name: "s3".into() }),
                    ..Source::default()
                },
                output: Output {
                    bucket: "results".into(),
                    ..Output::default()
                },
                workers,
                ..Default::default()
            },
        );
        scan.metadata.namespace = Some("team-a".into());
        scan.metadata.uid = Some("0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0".into());
        scan
    }

    #[test]
    fn planning_takes_the_scan_s_sharding_and_the_operator_s_list_budget() {
        let mut s = scan(Workers::default());
        let settings = Settings::default();
        let o = plan_options(&s, &settings);
        assert_eq!((o.target_shards, o.min_shard_objects), (64, 10_000));
        assert_eq!(o.max_requests, PlanOptions::default().max_requests);
        assert_eq!(o.delimiter.as_deref(), Some("/"));
        s.spec.sharding.target_shards = Some(10_000);
        s.spec.sharding.delimiter = Some(String::new());
        let big = Settings {
            plan_list_budget: 15_000,
            ..Settings::default()
        };
        let o = plan_options(&s, &big);
        assert_eq!(
            (o.target_shards, o.max_requests, o.delimiter),
            (10_000, 15_000, None)
        );
    }

    /// `spec.columns` reaches the spec the workers read from Redis (they
    /// HEAD in checksum mode and fetch tags from it), and its manifest.
    #[test]
    fn the_column_options_reach_the_workers_spec() {
        let mut s = scan(Workers::default());
        assert_eq!(spec_of(&s).columns, Default::default());
        s.spec.columns.checksums = true;
        s.spec.columns.tags = true;
        s.spec.columns.versions = true;
        let columns = spec_of(&s).columns;
        assert!(
            columns.checksums && columns.tags && columns.versions,
            "{columns:?}"
        );
        // And the plan a Job makes (scans planned in their own pod).
        let args = plan_args(&s, &Settings::default(), false);
        for flag in ["--checksums", "--tags", "--versions"] {
            assert!(args.iter().any(|a| a == flag), "{flag} missing: {args:?}");
        }
        s.spec.columns = Default::default();
        let args = plan_args(&s, &Settings::default(), false);
        assert!(!args
            .iter()
            .any(|a| a.starts_with("--checksums") || a == "--tags" || a == "--versions"));
    }

    #[test]
    fn scan_ids_are_stable_and_free_of_hash_tag_braces() {
        let s = scan(Workers::default());
        assert_eq!(scan_id(&s), "team-a.photos.0f1e2d3c");
        assert!(!scan_id(&s).contains(['{', '}']));
    }

    #[test]
    fn the_default_output_prefix_holds_the_uid_and_every_prefix_ends_with_a_slash() {
        let mut s = scan(Workers::default());
        assert_eq!(
            output_prefix(&s),
            "team-a/photos/0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0/"
        );
        s.spec.output.prefix = Some("scans/photos".into());
        assert_eq!(output_prefix(&s), "scans/photos/");
        s.spec.output.prefix = Some(String::new());
        assert_eq!(output_prefix(&s), "");
    }

    #[test]
    fn replicas_follow_the_work_left_between_min_and_max() {
        let auto = Workers {
            min_replicas: Some(2),
            max_replicas: Some(10),
            ..Workers::default()
        };
        assert_eq!(desired_replicas(&auto, None), 2, "before the plan: the minimum");
        assert_eq!(desired_replicas(&auto, Some(1)), 2);
        assert_eq!(desired_replicas(&auto, Some(7)), 7);
        assert_eq!(desired_replicas(&auto, Some(500)), 10);
        assert_eq!(desired_replicas(&auto, Some(0)), 0, "drained: no workers");
        let fixed = Workers {
            replicas: Some(4),
            ..Workers::default()
        };
        assert_eq!(desired_replicas(&fixed, Some(1)), 4);
        assert_eq!(desired_replicas(&fixed, Some(0)), 0);
        assert_eq!(desired_replicas(&Workers::default(), Some(9)), 1);
    }

    #[test]
    fn the_rate_ceiling_is_shared_by_the_most_workers_there_can_be() {
        let mut s = scan(Workers {
            min_replicas: Some(1),
            max_replicas: Some(8),
            ..Workers::default()
        });
        assert_eq!(per_worker_rate(&s), None);
        s.spec.max_requests_per_second = Some(40_000);
        assert_eq!(per_worker_rate(&s), Some(5_000.0));
    }

    #[test]
    fn worker_deployment_is_owned_restricted_and_carries_no_secret_values() {
        let mut s = scan(Workers {
            replicas: Some(3),
            concurrency: Some(128),
            ..Workers::default()
        });
        s.spec.source.ca_secret = Some(SecretKeyReference {
            name: "store-ca".into(),
            key: "ca.pem".into(),
        });
        let d = worker_deployment(&s, &Settings::default(), 3, true);
        let owner = &d.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.name.as_str()),
            ("BucketScan", "photos")
        );
        assert_eq!(owner.controller, Some(true));
        assert_eq!(owner.block_owner_deletion, Some(true));
        let spec = d.spec.unwrap();
        assert_eq!(spec.replicas, Some(3));
        let pod = spec.template.spec.unwrap();
        let c = &pod.containers[0];
        let args = c.args.as_ref().unwrap().join(" ");
        assert!(
            args.starts_with("run --scan team-a.photos.0f1e2d3c --region us-east-1 --endpoint http://10.0.0.5:9000 --path-style --ca-file /etc/bucketscan/source-ca/ca.pem"),
            "{args}"
        );
        assert!(
            args.contains("--concurrency 128")
                && args.contains("--shards-in-flight 4")
                && args.contains("--no-reap")
                && args.contains("--metadata-source auto"),
            "{args}"
        );
        let env = c.env.as_ref().unwrap();
        let from_secret = |name: &str| {
            env.iter()
                .find(|e| e.name == name)
                .and_then(|e| e.value_from.as_ref()?.secret_key_ref.as_ref())
                .map(|r| (r.name.clone(), r.key.clone()))
        };
        assert_eq!(
            from_secret("BUCKETSCAN_REDIS_URL"),
            Some(("photos-redis".into(), "url".into()))
        );
        assert_eq!(
            from_secret("AWS_SECRET_ACCESS_KEY"),
            Some(("s3".into(), "AWS_SECRET_ACCESS_KEY".into()))
        );
        assert!(env
            .iter()
            .all(|e| e.value.as_deref().is_none_or(|v| !v.contains("redis://"))));
        let psc = pod.security_context.unwrap();
        assert_eq!(psc.run_as_non_root, Some(true));
        assert_eq!(psc.seccomp_profile.unwrap().type_, "RuntimeDefault");
        let sc = c.security_context.as_ref().unwrap();
        assert_eq!(sc.read_only_root_filesystem, Some(true));
        assert_eq!(sc.allow_privilege_escalation, Some(false));
        assert_eq!(pod.automount_service_account_token, Some(false));
        assert_eq!(pod.volumes.unwrap().len(), 2, "source CA and Redis CA");
    }

    #[test]
    fn the_pod_template_reaches_worker_and_merge_pods_without_moving_their_selector() {
        use crate::crd::WorkerPodTemplate;
        use k8s_openapi::api::core::v1::{LocalObjectReference, Toleration};
        let mut s = scan(Workers::default());
        let plain = worker_deployment(&s, &Settings::default(), 1, false);
        let plain_pod = plain.spec.unwrap().template.spec.unwrap();
        assert_eq!(plain_pod.resources_of_first(), Some(default_worker_resources()));
        assert!(plain_pod.node_selector.is_none() && plain_pod.service_account_name.is_none());
        s.spec.workers.pod_template = Some(WorkerPodTemplate {
            labels: BTreeMap::from([
                ("team".to_string(), "a".to_string()),
                ("app.kubernetes.io/component".to_string(), "evil".to_string()),
                ("app.kubernetes.io/instance".to_string(), "other".to_string()),
            ]),
            annotations: BTreeMap::from([("cost-center".to_string(), "42".to_string())]),
            node_selector: BTreeMap::from([("pool".to_string(), "scan".to_string())]),
            tolerations: vec![Toleration {
                key: Some("dedicated".into()),
                operator: Some("Exists".into()),
                ..Toleration::default()
            }],
            priority_class_name: Some("batch-low".into()),
            image_pull_secrets: vec![LocalObjectReference {
                name: "regcred".into(),
            }],
            service_account_name: Some("s3-reader".into()),
            ..WorkerPodTemplate::default()
        });
        let d = worker_deployment(&s, &Settings::default(), 1, false)
            .spec
            .unwrap();
        let j = merge_job(&s, &Settings::default(), false).spec.unwrap();
        for (component, template) in [("worker", d.template.clone()), ("merge", j.template)] {
            let meta = template.metadata.unwrap();
            let l = meta.labels.unwrap();
            assert_eq!(l["team"], "a");
            assert_eq!(
                l["app.kubernetes.io/component"], component,
                "the operator's label wins"
            );
            assert_eq!(l["app.kubernetes.io/instance"], "photos");
            assert_eq!(meta.annotations.unwrap()["cost-center"], "42");
            let pod = template.spec.unwrap();
            assert_eq!(pod.node_selector.unwrap()["pool"], "scan");
            assert_eq!(pod.tolerations.unwrap()[0].key.as_deref(), Some("dedicated"));
            assert_eq!(pod.priority_class_name.as_deref(), Some("batch-low"));
            assert_eq!(pod.image_pull_secrets.unwrap()[0].name, "regcred");
            assert_eq!(pod.service_account_name.as_deref(), Some("s3-reader"));
            assert_eq!(pod.automount_service_account_token, Some(false));
        }
        let selector = d.selector.match_labels.unwrap();
        let pod_labels = d.template.metadata.unwrap().labels.unwrap();
        assert!(
            selector.iter().all(|(k, v)| pod_labels.get(k) == Some(v)),
            "the Deployment still selects its pods"
        );
        assert_eq!(selector, labels(&s, "worker"));
    }

    #[test]
    fn a_scan_s_resources_replace_the_default() {
        let mut s = scan(Workers::default());
        let mine = ResourceRequirements {
            requests: Some(BTreeMap::from([("cpu".to_string(), Quantity("2".into()))])),
            ..ResourceRequirements::default()
        };
        s.spec.workers.resources = Some(mine.clone());
        let pod = merge_job(&s, &Settings::default(), false)
            .spec
            .unwrap()
            .template
            .spec
            .unwrap();
        assert_eq!(pod.resources_of_first(), Some(mine));
        let defaults = default_worker_resources();
        assert!(defaults.requests.as_ref().unwrap().contains_key("memory"));
        assert!(defaults.limits.as_ref().unwrap().contains_key("memory"));
    }

    trait FirstContainer {
        fn resources_of_first(&self) -> Option<ResourceRequirements>;
    }
    impl FirstContainer for PodSpec {
        fn resources_of_first(&self) -> Option<ResourceRequirements> {
            self.containers[0].resources.clone()
        }
    }

    #[test]
    fn insecure_tls_reaches_the_worker_command() {
        let mut s = scan(Workers::default());
        s.spec.source.insecure_skip_tls_verify = true;
        let args = common_args(&s, "run");
        assert!(
            args.contains(&"--insecure-skip-tls-verify".to_string()),
            "{args:?}"
        );
    }

    #[test]
    fn a_scan_with_a_baseline_is_planned_in_its_own_pod_whatever_its_credentials() {
        let mut s = scan(Workers::default());
        assert!(
            !plans_by_job(&s),
            "a full scan with a Secret plans in the operator"
        );
        s.spec.baseline = Some(crate::crd::Baseline {
            manifest: Some("s3://out/last-night/manifest.json".into()),
            ..Default::default()
        });
        assert!(plans_by_job(&s), "its manifest is the tenant's object");
        let args = plan_args(&s, &Settings::default(), false);
        assert!(args.iter().any(|a| a == "--baseline"), "{args:?}");
        // Its Job keeps the planning deadline, and a refusal fails it at once.
        let job = plan_job(&s, &Settings::default(), false, false).spec.unwrap();
        assert_eq!(job.active_deadline_seconds, Some(240));
        let rule = &job.pod_failure_policy.unwrap().rules[0];
        assert_eq!(rule.action, "FailJob");
        assert_eq!(rule.on_exit_codes.as_ref().unwrap().values, vec![EXIT_REFUSED]);
        s.spec.baseline = None;
        s.spec.source.credentials_secret = None;
        assert!(plans_by_job(&s), "the operator has no identity to lend");
    }

    #[test]
    fn a_scan_without_credentials_plans_and_cleans_up_in_its_workers_pod() {
        let mut s = scan(Workers::default());
        assert!(!uses_pod_identity(&s));
        s.spec.source.credentials_secret = None;
        s.spec.workers.pod_template = Some(WorkerPodTemplate {
            service_account_name: Some("s3-reader".into()),
            ..WorkerPodTemplate::default()
        });
        s.spec.output.prefix = Some("runs/a".into());
        assert!(uses_pod_identity(&s));
        let settings = Settings::default();
        let plan = plan_job(&s, &settings, false, false);
        let replan = plan_job(&s, &settings, false, true);
        assert_eq!(plan.metadata.name.as_deref(), Some("photos-plan"));
        assert_eq!(replan.metadata.name.as_deref(), Some("photos-replan"));
        let pod = plan.spec.unwrap().template.spec.unwrap();
        assert_eq!(pod.service_account_name.as_deref(), Some("s3-reader"));
        let args = pod.containers[0].args.clone().unwrap();
        let after = |flag: &str| args[args.iter().position(|a| a == flag).unwrap() + 1].clone();
        assert_eq!(args[0], "plan");
        assert_eq!(after("--bucket"), "photos");
        assert_eq!(after("--output"), "s3://results/runs/a/");
        assert_eq!(
            (after("--format"), after("--layout")),
            ("jsonl".into(), "single".into())
        );
        assert_eq!(after("--target-shards"), "64");
        assert!(args.contains(&"--delimiter=/".to_string()) && !args.contains(&"--replan".to_string()));
        let replan_args = replan.spec.unwrap().template.spec.unwrap().containers[0]
            .args
            .clone()
            .unwrap();
        assert!(replan_args.contains(&"--replan".to_string()));
        let env: Vec<String> = pod.containers[0]
            .env
            .iter()
            .flatten()
            .map(|e| e.name.clone())
            .collect();
        assert!(!env.iter().any(|e| e.starts_with("AWS_ACCESS")), "{env:?}");

        let cleanup = cleanup_job(&s, &settings);
        assert!(cleanup.metadata.owner_references.is_none(), "outlives the scan");
        // ... so it names the scan otherwise: the operator writes only its own.
        let uid = s.metadata.uid.clone().unwrap();
        assert_eq!(cleanup.metadata.annotations.as_ref().unwrap()[SCAN_UID], uid);
        let spec = cleanup.spec.unwrap();
        assert_eq!(spec.ttl_seconds_after_finished, Some(300));
        let pod = spec.template.spec.unwrap();
        assert_eq!(pod.service_account_name.as_deref(), Some("s3-reader"));
        let c = &pod.containers[0];
        let args = c.args.clone().unwrap();
        assert_eq!(args[0], "delete-parts");
        // Only this scan's parts: a shared output prefix keeps the others'.
        assert!(args.ends_with(&[
            "--output".into(),
            "s3://results/runs/a/".into(),
            "--scan".into(),
            scan_id(&s)
        ]));
        assert!(
            !c.env.iter().flatten().any(|e| e.name == "BUCKETSCAN_REDIS_URL"),
            "the scan's Redis Secret goes with it"
        );
    }

    fn env_value(pod: &PodSpec, name: &str) -> Option<String> {
        pod.containers[0]
            .env
            .iter()
            .flatten()
            .find(|e| e.name == name)
            .and_then(|e| e.value.clone())
    }

    /// Every pod of the scan, as the operator builds them.
    fn every_pod(s: &BucketScan, redis_ca: bool) -> Vec<PodSpec> {
        let settings = Settings::default();
        let pod = |t: Option<PodTemplateSpec>| t.and_then(|t| t.spec).unwrap();
        vec![
            pod(worker_deployment(s, &settings, 1, redis_ca)
                .spec
                .map(|d| d.template)),
            pod(merge_job(s, &settings, redis_ca).spec.map(|j| j.template)),
            pod(plan_job(s, &settings, redis_ca, false).spec.map(|j| j.template)),
            pod(cleanup_job(s, &settings).spec.map(|j| j.template)),
        ]
    }

    #[test]
    fn a_ca_secret_mounts_only_its_key_and_the_redis_secret_only_its_ca() {
        let mut s = scan(Workers::default());
        s.spec.source.ca_secret = Some(SecretKeyReference {
            name: "store-tls".into(),
            key: "ca.pem".into(),
        });
        for pod in every_pod(&s, true) {
            let volumes = pod.volumes.clone().unwrap();
            let items = |name: &str| {
                let v = volumes.iter().find(|v| v.name == name)?;
                let secret = v.secret.clone().unwrap();
                let items = secret.items.unwrap_or_default();
                Some((
                    secret.secret_name.unwrap(),
                    items.into_iter().map(|i| (i.key, i.path)).collect::<Vec<_>>(),
                ))
            };
            assert_eq!(
                items("source-ca"),
                Some(("store-tls".into(), vec![("ca.pem".into(), "ca.pem".into())])),
                "only the CA of the Secret, at the path --ca-file names"
            );
            if let Some(redis) = items("redis-ca") {
                assert_eq!(
                    redis,
                    ("photos-redis".into(), vec![("ca.crt".into(), "ca.crt".into())]),
                    "the Redis URL (its password) is no file"
                );
            }
        }
        let args = every_pod(&s, true)[0].containers[0].args.clone().unwrap();
        assert!(
            args.join(" ")
                .contains("--ca-file /etc/bucketscan/source-ca/ca.pem"),
            "{args:?}"
        );
    }

    #[test]
    fn instance_metadata_is_off_unless_the_scan_names_a_service_account() {
        let mut s = scan(Workers::default()); // a credentials Secret
        let imds = |s: &BucketScan| -> Vec<Option<String>> {
            every_pod(s, false)
                .iter()
                .map(|p| env_value(p, "AWS_EC2_METADATA_DISABLED"))
                .collect()
        };
        let off = vec![Some("true".to_string()); 4];
        assert_eq!(imds(&s), off, "a credentials Secret");
        s.spec.source.credentials_secret = None;
        assert_eq!(
            imds(&s),
            off,
            "no Secret and no ServiceAccount: not the node's role"
        );
        assert!(identity_hint(&s).unwrap().contains("serviceAccountName"));
        s.spec.workers.pod_template = Some(WorkerPodTemplate {
            service_account_name: Some("s3-reader".into()),
            ..WorkerPodTemplate::default()
        });
        assert_eq!(
            imds(&s),
            vec![Some("false".to_string()); 4],
            "the scan's ServiceAccount"
        );
        assert_eq!(identity_hint(&s), None);
        s.spec.source.credentials_secret = Some(SecretReference { name: "s3".into() });
        assert_eq!(imds(&s), off, "a Secret wins: its keys are the identity");
    }

    #[test]
    fn merge_job_runs_merge_once_per_scan() {
        let s = scan(Workers::default());
        let job = merge_job(&s, &Settings::default(), false);
        assert_eq!(job.metadata.name.as_deref(), Some("photos-merge"));
        let pod = job.spec.unwrap().template.spec.unwrap();
        assert_eq!(pod.restart_policy.as_deref(), Some("Never"));
        let args = pod.containers[0].args.as_ref().unwrap();
        assert_eq!(args[..3], ["merge", "--scan", "team-a.photos.0f1e2d3c"]);
        assert!(
            args.windows(2).any(|w| w == ["--on-dead-shards", "partial"]),
            "a merge that wrote a partial result succeeds; the operator judges it: {args:?}"
        );
    }
}
