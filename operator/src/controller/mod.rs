//! The reconciler: for each BucketScan, plan it into Redis, run its workers,
//! reap expired leases, report progress, start the merge and finish. The
//! decisions are in `desired`, `status` and `validate` (pure); this folder
//! does the I/O, one file per phase:
//!
//! - this file: the controller loop, the reconcile entry (a tracing span per
//!   reconcile) and the error policy;
//! - `context`: [`Context`], [`Error`] and the helpers every phase shares;
//! - `admission`: a new scan may not write where a running one writes;
//! - `apply`: the pipeline of a live scan; `observe`: what Redis knows;
//!   `planning` (+ `source`: S3 clients from the scan's Secrets);
//!   `children`: the worker Deployment (+ `redis_user`: the scan's own
//!   Redis user); `merge`: the merge Job and the end of
//!   the scan; `finish`: Failed / finished / TTL; `cleanup`: the finalizer;
//!   `health`: worker pods that do not run and scans without progress;
//!   `report`: status writes and events; `blocked`: transient causes make
//!   the scan wait (condition `Blocked`, backoff) instead of failing it.
//!
//! May import: `crd`, `desired`, `status`, `validate`, `metrics` and
//! `bucketscan_core`; nothing imports it but the binary. Inside, files form
//! layers (`scripts/check-layers.py` checks there is no circle): `context`;
//! `redis_user`; `children`, `source`, `observe`, `admission`; `report`, `planning`; `finish`, `health`; `merge`,
//! `cleanup`; `apply`; `blocked`; this file.

mod admission;
mod apply;
mod blocked;
mod children;
mod cleanup;
mod context;
mod finish;
mod health;
mod merge;
mod observe;
mod planning;
mod redis_user;
mod report;
mod source;

pub use context::{Context, Error};

use crate::crd::BucketScan;
use crate::metrics::{ErrorLabel, ResultLabel};
use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use kube::api::Api;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::EventType;
use kube::runtime::finalizer::{finalizer, Event as Finalizer};
use kube::runtime::watcher;
use kube::{Client, Resource, ResourceExt};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub const FINALIZER: &str = "bucketscan.dev/cleanup";

/// Run the controller until the process is told to stop. `namespace`: watch
/// only that one (a namespaced install), else all.
pub async fn run(ctx: Arc<Context>, concurrency: u16, namespace: Option<&str>) {
    let scans = watched::<BucketScan>(&ctx.client, namespace);
    let (deployments, jobs) = (
        watched::<Deployment>(&ctx.client, namespace),
        watched::<Job>(&ctx.client, namespace),
    );
    let config = kube::runtime::controller::Config::default().concurrency(concurrency);
    Controller::new(scans, watcher::Config::default())
        .owns(deployments, watcher::Config::default())
        .owns(jobs, watcher::Config::default())
        .with_config(config)
        .shutdown_on_signal()
        .run(reconcile, error_policy, ctx)
        .for_each(|result| async move {
            if let Err(e) = result {
                tracing::debug!(error = %e, "reconcile ended with an error");
            }
        })
        .await;
}

fn watched<K>(client: &Client, namespace: Option<&str>) -> Api<K>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
{
    match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

/// One reconcile of one BucketScan, in a span carrying its name; the finalizer
/// routes it to [`apply::apply`] or, on delete, [`cleanup::cleanup`].
#[tracing::instrument(skip_all, fields(scan = %scan.name_any(), namespace = %scan.namespace().unwrap_or_default()))]
async fn reconcile(scan: Arc<BucketScan>, ctx: Arc<Context>) -> Result<Action, Error> {
    let started = Instant::now();
    let api: Api<BucketScan> = Api::namespaced(ctx.client.clone(), &scan.namespace().unwrap_or_default());
    let result = finalizer(&api, FINALIZER, scan, |event| async {
        match event {
            // Boxed: the pipeline's future is deep enough to overflow the
            // compiler's layout recursion limit when inlined here.
            Finalizer::Apply(scan) => {
                let applied = Box::pin(apply::apply(&scan, &ctx)).await;
                blocked::wait_out(&scan, &ctx, applied).await
            }
            Finalizer::Cleanup(scan) => {
                let cleaned = cleanup::cleanup(&scan, &ctx).await;
                blocked::wait_out(&scan, &ctx, cleaned).await
            }
        }
    })
    .await
    .map_err(|e| Error::Finalizer(Box::new(e)));
    ctx.metrics
        .reconcile_seconds
        .observe(started.elapsed().as_secs_f64());
    let label = ResultLabel {
        result: if result.is_ok() { "ok" } else { "error" }.into(),
    };
    ctx.metrics.reconciles.get_or_create(&label).inc();
    if let Err(e) = &result {
        let label = ErrorLabel {
            error: e.kind().into(),
        };
        ctx.metrics.reconcile_failures.get_or_create(&label).inc();
    }
    result
}

fn error_policy(scan: Arc<BucketScan>, error: &Error, ctx: Arc<Context>) -> Action {
    tracing::warn!(scan = %scan.name_any(), error = %error, "reconcile failed; retrying");
    // The user sees it too (kubectl describe), not only the operator's log.
    let note = format!("{error}; retrying in 10 s");
    tokio::spawn(
        async move { report::publish(&ctx, &scan, EventType::Warning, "ReconcileError", &note).await },
    );
    Action::requeue(Duration::from_secs(10))
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::finalizer::Error as F;

    #[test]
    fn a_failure_inside_the_finalizer_is_labelled_by_its_own_kind() {
        let config = || Error::Config("Secret \"x\" does not exist".into());
        assert_eq!(config().kind(), "config");
        let wrapped = Error::Finalizer(Box::new(F::ApplyFailed(config())));
        assert_eq!(wrapped.kind(), "config");
        let cleanup = Error::Finalizer(Box::new(F::CleanupFailed(Error::S3(
            bucketscan_core::s3::S3Error::Timeout(Duration::from_secs(1)),
        ))));
        assert_eq!(cleanup.kind(), "s3");
        assert_eq!(Error::Finalizer(Box::new(F::UnnamedObject)).kind(), "finalizer");
        // Every kind is among the label values the metrics start at 0.
        for e in [
            config(),
            wrapped,
            cleanup,
            Error::Finalizer(Box::new(F::UnnamedObject)),
        ] {
            assert!(crate::metrics::ERROR_KINDS.contains(&e.kind()), "{}", e.kind());
        }
    }
}
