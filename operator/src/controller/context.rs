//! What every phase of a reconcile shares: the [`Context`] (clients,
//! settings, Redis, events, metrics), the [`Error`] type with its kinds, and
//! small helpers that name a scan. The bottom of the controller.
//!
//! May import: `crd`, `desired`, `validate`, `metrics`, `bucketscan_core`
//! and `labelled_namespaces`.

use crate::crd::BucketScan;
use crate::desired::Settings;
use crate::metrics::{Metrics, ScanLabels};
use bucketscan_core::fleet::plan::PlanError;
use bucketscan_core::fleet::queue::{QueueError, RedisConfig, RedisConnection};
use kube::runtime::events::{Recorder, Reporter};
use kube::{Client, ResourceExt};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub(crate) const MANAGER: &str = "bucketscan-operator";

/// Server-side apply as the operator (its field manager), taking over
/// fields another manager set: of the scan's status and of objects `owned`
/// found free or the scan's, never of anyone else's.
pub(crate) fn apply_params() -> kube::api::PatchParams {
    kube::api::PatchParams::apply(MANAGER).force()
}

/// How often an active scan is looked at (progress, reaper, scaling); its
/// workers' and Jobs' changes wake it sooner. Each look of a scan whose
/// state did not change costs three API requests (docs/operations.md).
pub(crate) const ACTIVE_REQUEUE: Duration = Duration::from_secs(5);

/// How often a scan about to change phase is looked at (the last seconds
/// of its scanning, a young merge): nothing else wakes it when Redis says
/// the change came.
pub(crate) const QUICK_REQUEUE: Duration = Duration::from_secs(1);

/// Time from `then` to `now`, whole seconds (zero when `then` is later: a
/// clock that stepped back).
pub(crate) fn elapsed(
    now: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time,
    then: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time,
) -> Duration {
    Duration::from_secs(now.0.as_second().saturating_sub(then.0.as_second()).max(0) as u64)
}

/// When a reconcile that failed (and is neither blocked nor in conflict)
/// is tried again.
pub(crate) const ERROR_REQUEUE: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error(transparent)]
    Queue(#[from] QueueError),
    #[error(transparent)]
    Plan(#[from] PlanError),
    #[error("S3: {0}")]
    S3(#[from] bucketscan_core::s3::error::S3Error),
    #[error("{0}")]
    Config(String),
    /// A Secret the scan names is not there (yet: GitOps tools often create
    /// it a moment after the scan).
    #[error("{0}")]
    SecretMissing(String),
    /// The Secret is there but lacks a key the scan needs.
    #[error("{0}")]
    SecretIncomplete(String),
    /// The operator's RBAC does not reach Secrets in the scan's namespace
    /// (an admin may still grant it).
    #[error("{0}")]
    SecretForbidden(String),
    #[error(transparent)]
    Recovery(#[from] bucketscan_core::fleet::recovery::RecoveryError),
    /// Planning in the operator did not finish within its deadline
    /// (`--planning-deadline-seconds`): the store answers too slowly, or
    /// not at all. Given up so that the reconcile slot is free for other
    /// scans; the scan waits, blocked, and is planned again after the
    /// backoff (a plan cut short is continued, never tiled again).
    #[error("{0}")]
    PlanningSlow(String),
    #[error("finalizer: {0}")]
    Finalizer(#[source] Box<kube::runtime::finalizer::Error<Error>>),
    /// An object of a name the scan's children take (`NAME-workers`, ...)
    /// exists and is not the scan's: it is left alone (`owned`), and the
    /// scan waits, condition `Conflict` (`conflict`). Only its kind and
    /// name are told: the object is another workload's business.
    #[error("{kind} {name} in namespace {namespace} exists and is not this scan's")]
    NotOwned {
        kind: String,
        name: String,
        namespace: String,
    },
}

impl Error {
    /// A short, stable name for the kind of failure: the `error` label of the
    /// failure metric, so a dashboard can tell Redis trouble from S3 trouble.
    pub fn kind(&self) -> &'static str {
        use kube::runtime::finalizer::Error as F;
        match self {
            Error::Kube(_) => "kube",
            Error::Queue(_) => "redis",
            Error::Plan(_) => "plan",
            Error::S3(_) => "s3",
            Error::Config(_)
            | Error::SecretMissing(_)
            | Error::SecretIncomplete(_)
            | Error::SecretForbidden(_) => "config",
            Error::Recovery(_) => "recovery",
            Error::PlanningSlow(_) => "s3",
            Error::NotOwned { .. } => "conflict",
            Error::Finalizer(e) => match e.as_ref() {
                F::ApplyFailed(inner) | F::CleanupFailed(inner) => inner.kind(),
                _ => "finalizer",
            },
        }
    }
}

impl Error {
    /// Why the endpoint allowlist refused the scan's store, when that is
    /// what failed (no request was sent).
    pub fn endpoint_refusal(&self) -> Option<&str> {
        use bucketscan_core::fleet::recovery::RecoveryError;
        use bucketscan_core::s3::S3Error;
        use kube::runtime::finalizer::Error as F;
        match self {
            Error::S3(S3Error::NotAllowed(why))
            | Error::Plan(PlanError::Source {
                source: S3Error::NotAllowed(why),
                ..
            })
            | Error::Plan(PlanError::Output {
                source: S3Error::NotAllowed(why),
                ..
            })
            | Error::Plan(PlanError::Planning(S3Error::NotAllowed(why)))
            | Error::Recovery(RecoveryError::S3(S3Error::NotAllowed(why))) => Some(why),
            Error::Finalizer(f) => match f.as_ref() {
                F::ApplyFailed(inner) | F::CleanupFailed(inner) => inner.endpoint_refusal(),
                _ => None,
            },
            _ => None,
        }
    }

    /// Why the scan must wait, when the cause may pass by itself: a Secret
    /// not created yet, Redis or the store unreachable, slow or throttling.
    /// `None` for what only the user can fix (the scan fails) and for the
    /// Kubernetes API itself (nothing could be written: the error policy
    /// retries).
    pub fn blocked_reason(&self) -> Option<&'static str> {
        use bucketscan_core::fleet::recovery::RecoveryError;
        use kube::runtime::finalizer::Error as F;
        match self {
            Error::SecretMissing(_) => Some("SecretNotFound"),
            Error::SecretIncomplete(_) => Some("SecretIncomplete"),
            Error::SecretForbidden(_) => Some("SecretForbidden"),
            Error::PlanningSlow(_) => Some("PlanningSlow"),
            Error::Queue(_) | Error::Plan(PlanError::Queue(_)) | Error::Recovery(RecoveryError::Queue(_)) => {
                Some("RedisUnavailable")
            }
            Error::S3(e)
            | Error::Plan(PlanError::Source { source: e, .. })
            | Error::Plan(PlanError::Output { source: e, .. })
            | Error::Plan(PlanError::Planning(e))
            | Error::Recovery(RecoveryError::S3(e))
                if e.is_retryable() =>
            {
                Some("StoreUnavailable")
            }
            Error::Finalizer(f) => match f.as_ref() {
                F::ApplyFailed(inner) | F::CleanupFailed(inner) => inner.blocked_reason(),
                _ => None,
            },
            _ => None,
        }
    }
}

/// Per child (`Kind/name`): the hash of the object last applied and the
/// version the API server gave it.
pub(super) type AppliedChildren = HashMap<String, (u64, String)>;

/// What every reconcile shares.
pub struct Context {
    pub client: Client,
    pub settings: Settings,
    /// Where Redis is (the workers get it too).
    pub redis: RedisConfig,
    /// One connection to it for every scan.
    pub connection: RedisConnection,
    pub recorder: Recorder,
    pub metrics: Arc<Metrics>,
    /// The namespace watched (a namespaced install), or `None` for all.
    pub namespace: Option<String>,
    /// When each scan's status was last written.
    pub(super) last_status: Mutex<HashMap<String, Instant>>,
    /// When each scan's Redis usage was last counted (`budget`).
    pub(super) last_budget: Mutex<HashMap<String, Instant>>,
    /// Blocked scans: attempts in a row that met a transient cause.
    pub(super) blocked: Mutex<HashMap<String, u32>>,
    /// Plan Jobs started again after a transient failure, per scan (the
    /// backoff between them grows; forgotten on restart, which starts the
    /// backoff over).
    pub(super) plan_retries: Mutex<HashMap<String, u32>>,
    /// Merge Jobs started again (after a pod that exited 75, or one that
    /// succeeded while Redis lost its manifest since), per scan, likewise.
    pub(super) merge_retries: Mutex<HashMap<String, u32>>,
    /// Who holds the reconcile slots, per namespace (`fairness`).
    pub(super) fair: Mutex<crate::fairness::FairShare>,
    /// Scans a freed slot wakes (`fairness`), to the controller; set by `run`.
    pub(super) wake: std::sync::OnceLock<
        futures::channel::mpsc::UnboundedSender<kube::runtime::reflector::ObjectRef<BucketScan>>,
    >,
    /// Every BucketScan the controller watches (its cache: counting a
    /// namespace's running scans costs no API call); set by `run`.
    pub(super) scans: std::sync::OnceLock<kube::runtime::reflector::Store<BucketScan>>,
    /// Scans this operator let start (`limits::turn`), until they are
    /// forgotten: the cache may not show their start yet.
    pub(super) started: Mutex<std::collections::HashSet<String>>,
    /// What the operator last applied of each scan's children, per scan
    /// key and `Kind/name`: the desired object's hash and the version the
    /// API server gave it (`owned::Mine::apply_changed`).
    pub(super) applied: Mutex<HashMap<String, AppliedChildren>>,
    /// The namespaces that may run scans when a label selector chooses
    /// them (`--scan-namespace-selector`); unset: `settings.scan_namespaces`.
    scans_by_label: std::sync::OnceLock<super::labelled_namespaces::LabelledNamespaces>,
    /// Each active scan's Redis password, by scan id, as its Secret holds
    /// it: setting the user again on every reconcile costs no API request
    /// (read from the Secret once after an operator restart).
    pub(super) redis_passwords: Mutex<HashMap<String, String>>,
}

impl Context {
    pub fn new(
        client: Client,
        settings: Settings,
        redis: RedisConfig,
        connection: RedisConnection,
        instance: String,
        metrics: Arc<Metrics>,
        namespace: Option<String>,
    ) -> Arc<Context> {
        let reporter = Reporter {
            controller: MANAGER.into(),
            instance: Some(instance),
        };
        Arc::new(Context {
            recorder: Recorder::new(client.clone(), reporter),
            client,
            settings,
            redis,
            connection,
            metrics,
            namespace,
            last_status: Mutex::default(),
            last_budget: Mutex::default(),
            blocked: Mutex::default(),
            plan_retries: Mutex::default(),
            merge_retries: Mutex::default(),
            fair: Mutex::default(),
            wake: std::sync::OnceLock::new(),
            scans: std::sync::OnceLock::new(),
            started: Mutex::default(),
            applied: Mutex::default(),
            redis_passwords: Mutex::default(),
            scans_by_label: std::sync::OnceLock::new(),
        })
    }

    /// Run scans only in the namespaces `labelled` matches, instead of
    /// `settings.scan_namespaces` (set once, before the controller runs).
    pub fn run_scans_in(&self, labelled: super::labelled_namespaces::LabelledNamespaces) {
        let _ = self.scans_by_label.set(labelled);
    }

    /// Whether `scan`'s namespace may run scans: it is in the operator's
    /// list (`--scan-namespaces`), or carries the labels of its selector.
    pub(crate) fn namespace_allows(&self, scan: &BucketScan) -> Result<(), String> {
        match self.scans_by_label.get() {
            Some(labelled) => labelled.allows(&scan.namespace().unwrap_or_default()),
            None => crate::validate::scan_namespace(scan, &self.settings.scan_namespaces),
        }
    }

    /// Whether deleting `scan` may clean up after it in its namespace. With
    /// a list, only where the chart binds the operator's rights. With a
    /// selector they are cluster-wide, so also a scan that started before
    /// its namespace lost the labels (one refused at once left nothing).
    pub(crate) fn cleanup_reaches(&self, scan: &BucketScan) -> bool {
        let started = scan.status.as_ref().is_some_and(|s| s.start_time.is_some());
        self.namespace_allows(scan).is_ok() || (self.scans_by_label.get().is_some() && started)
    }
}

pub(crate) fn scan_labels(scan: &BucketScan) -> ScanLabels {
    ScanLabels {
        namespace: scan.namespace().unwrap_or_default(),
        scan: scan.name_any(),
    }
}

pub(crate) fn lease(ctx: &Context) -> Duration {
    Duration::from_secs(ctx.settings.lease_secs as u64)
}

pub(crate) fn max_failures() -> u32 {
    crate::desired::MAX_FAILURES
}

pub(crate) fn key_of(scan: &BucketScan) -> String {
    format!("{}/{}", scan.namespace().unwrap_or_default(), scan.name_any())
}
