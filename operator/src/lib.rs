//! bucketscan's Kubernetes operator: the `BucketScan` resource and the
//! controller that plans a scan into Redis, runs worker pods, merges the
//! result and reports progress in the resource's status; and the
//! `BucketScanSchedule` resource, which makes BucketScans on a cron
//! schedule (`schedule`, `controller::run_schedules`).

// The reconcile nests async fns deeply (apply, the plan Job, the scan's
// queue): the default query depth (128) overflowed computing its future's
// layout once the scan engine's retries were paced (see main.rs too).
#![recursion_limit = "256"]

/// The resource's types live in the shared lean crate (the kubectl plugin
/// uses them without the operator's stack).
pub use bucketscan_api::crd;

pub mod autoscale;
pub mod controller;
pub mod desired;
pub mod fairness;
pub mod filters;
pub mod leader;
pub mod limits;
pub mod metrics;
pub mod pods;
pub mod schedule;
pub mod status;
pub mod throttle;
pub mod validate;
