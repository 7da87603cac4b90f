//! What can go wrong, each with a message that says what to do.
//!
//! May import: (none of this crate)

/// Every error the plugin reports; `main` prints it and exits non-zero.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("no usable kubeconfig: {0}. Set KUBECONFIG or create ~/.kube/config (the file kubectl uses)")]
    NoKubeconfig(String),
    #[error("cannot reach the Kubernetes API: {0}")]
    Unreachable(String),
    #[error(
        "the BucketScan CRD is not installed in this cluster (no API bucketscan.dev/v1alpha1): \
         install the bucketscan chart, or kubectl apply -f crds/bucketscans.bucketscan.dev.yaml"
    )]
    NoCrd,
    #[error(
        "the BucketScanSchedule CRD is not installed in this cluster: install the bucketscan chart, \
         or kubectl apply -f crds/bucketscanschedules.bucketscan.dev.yaml"
    )]
    NoScheduleCrd,
    #[error("bucketscanschedule {name:?} not found in namespace {namespace:?}")]
    ScheduleNotFound { name: String, namespace: String },
    #[error("bucketscan {name:?} not found in namespace {namespace:?}")]
    NotFound { name: String, namespace: String },
    #[error("bucketscan {name:?} was deleted while being watched")]
    Deleted { name: String },
    #[error("bucketscan {name:?} failed: {reason}")]
    Failed { name: String, reason: String },
    #[error(
        "bucketscan {name:?} has no result yet (phase {phase}): `kubectl bucketscan watch {name}` waits for it"
    )]
    NotComplete { name: String, phase: String },
    #[error("bucketscan {name:?} did not finish within --timeout {secs}s")]
    Timeout { name: String, secs: u64 },
    #[error("bucketscan {name:?}: {what} refused: {why}")]
    Refused {
        name: String,
        what: &'static str,
        why: String,
    },
    #[error("the Kubernetes API refused the request: {0}")]
    Api(#[from] kube::Error),
}
