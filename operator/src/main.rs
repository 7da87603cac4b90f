//! `bucketscan-operator`: the Kubernetes operator. Not built yet: the
//! `BucketScan` CRD, the reconciler and the Helm chart come with the
//! operator's own work item. Until then this binary says so and fails, so
//! nothing can mistake it for a working operator.

fn main() -> std::process::ExitCode {
    eprintln!(
        "error: bucketscan-operator is not implemented yet; use `bucketscan-worker scan` to scan a bucket in one process"
    );
    std::process::ExitCode::FAILURE
}
