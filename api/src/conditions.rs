//! The types of a BucketScan's conditions, as the operator sets them and
//! the plugin and GitOps tools read them.

pub const PLANNED: &str = "Planned";
pub const COMPLETE: &str = "Complete";
pub const FAILED: &str = "Failed";
pub const SUSPENDED: &str = "Suspended";
/// True while the scan waits on something outside it that may come right
/// by itself (a Secret not created yet, the store or Redis unreachable).
pub const BLOCKED: &str = "Blocked";
/// True while a name the scan's children take (`NAME-workers`, `NAME-redis`,
/// `NAME-plan`, ...) holds another workload's object, which the operator
/// leaves alone: the scan waits until the name is free.
pub const CONFLICT: &str = "Conflict";
/// True while a scan waits for a place among its namespace's running scans
/// (`limits`: the operator's cap per namespace).
pub const QUEUED: &str = "Queued";
/// Whether the worker pods run, and why not (`pods::WorkerHealth`).
pub const WORKERS_READY: &str = "WorkersReady";
/// False while a scan makes no progress for longer than the operator's
/// stall threshold.
pub const PROGRESSING: &str = "Progressing";
/// True when more workers would not make the scan faster (autoscaling:
/// the rate stopped growing with the workers, or the store throttles).
pub const STORE_SATURATED: &str = "StoreSaturated";
/// Incremental scans: True when unchanged objects were taken from the
/// baseline, False when the store check found LastModified does not move
/// on a metadata replace (or could not check) and every object was HEADed.
pub const INCREMENTAL: &str = "Incremental";
pub const READY: &str = "Ready";
/// kstatus's "abnormal-true" conditions, present only while True (as Flux's
/// controllers keep them): Reconciling while the scan works towards its
/// result or waits on something that may pass; Stalled while it cannot go
/// on without a person (failed, a name another workload holds, no progress).
pub const RECONCILING: &str = "Reconciling";
pub const STALLED: &str = "Stalled";
