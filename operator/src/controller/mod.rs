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
//!   the scan wait (condition `Blocked`, backoff) instead of failing it;
//! - `labelled_namespaces`: the namespaces a label selector chooses to run
//!   scans (`--scan-namespace-selector`), watched;
//! - `turns`: a new scan waits (condition `Queued`) while its namespace
//!   runs as many scans as the operator allows;
//! - `owned`: every write and delete of a child goes through it, and only
//!   touches the scan's own objects; `conflict`: condition `Conflict` when a
//!   child's name holds another workload's object;
//! - `schedule`: the BucketScanSchedule controller ([`run_schedules`]),
//!   which creates BucketScans on their schedules.
//!
//! May import: `crd`, `desired`, `status`, `validate`, `metrics` and
//! `bucketscan_core`; nothing imports it but the binary. Inside, files form
//! layers (`scripts/check-layers.py` checks there is no circle):
//! `labelled_namespaces`; `context`;
//! `owned`; `redis_user`; `children`, `source`, `observe`, `admission`; `report`, `planning`, `turns`; `finish`, `health`,
//! `conflict`; `merge`, `cleanup`; `apply`; `blocked`; `schedule`; this file.

mod admission;
mod apply;
mod baseline;
mod blocked;
mod budget;
mod children;
mod cleanup;
mod conflict;
mod context;
mod finish;
mod health;
pub mod labelled_namespaces;
mod merge;
mod observe;
mod owned;
mod planning;
mod redis_user;
mod report;
mod retry;
mod schedule;
mod source;
mod turns;

use context::ERROR_REQUEUE;
pub use context::{Context, Error};
pub use schedule::run as run_schedules;

use crate::crd::BucketScan;
use crate::desired::{MANAGED_BY, OPERATOR};
use crate::metrics::{ErrorLabel, ResultLabel};
use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use kube::api::Api;
use kube::core::PartialObjectMeta;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::EventType;
use kube::runtime::finalizer::{finalizer, Event as Finalizer};
use kube::runtime::{reflector, watcher, PredicateConfig, WatchStreamExt};
use kube::{Client, Resource, ResourceExt};
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::Instant;

pub const FINALIZER: &str = "bucketscan.dev/cleanup";

/// Run the controller until the process is told to stop. `namespace`: watch
/// only that one (a namespaced install), else all.
///
/// What wakes a reconcile: a change of a scan's spec, annotations, labels,
/// finalizers or deletion, but not its status, which the reconciles write
/// themselves (a running scan requeues itself, see `apply`); and changes of
/// the Deployments and Jobs this operator made (label-selected: the
/// cluster's other Deployments and Jobs are not watched nor cached), in the
/// namespaces that may run scans only (`owned_namespaces`).
pub async fn run(ctx: Arc<Context>, concurrency: u16, namespace: Option<&str>) {
    let (reader, writer) = reflector::store();
    let metrics = ctx.metrics.clone();
    let scans = watcher(
        watched::<BucketScan>(&ctx.client, namespace),
        watcher::Config::default(),
    )
    .default_backoff()
    .inspect(move |event| {
        if let Ok(watcher::Event::InitDone) = event {
            metrics
                .watch_synced
                .store(true, std::sync::atomic::Ordering::Relaxed);
        }
    })
    .reflect(writer)
    .applied_objects()
    .predicate_filter(user_changes, PredicateConfig::default());
    let reach = owned_namespaces(namespace, &ctx.settings.scan_namespaces);
    *ctx.fair.lock().expect("lock") = crate::fairness::FairShare::new(concurrency.max(1).into());
    let _ = ctx.scans.set(reader.clone());
    let (wake, woken) = futures::channel::mpsc::unbounded();
    let _ = ctx.wake.set(wake);
    let config = kube::runtime::controller::Config::default().concurrency(concurrency);
    Controller::for_stream(scans, reader)
        .owns_stream(owned::<Deployment>(&ctx.client, &reach))
        .owns_stream(owned::<Job>(&ctx.client, &reach))
        .with_config(config)
        .reconcile_on(woken)
        .shutdown_on_signal()
        .run(reconcile, error_policy, ctx)
        .for_each(|result| async move {
            if let Err(e) = result {
                tracing::debug!(error = %e, "reconcile ended with an error");
            }
        })
        .await;
}

/// A hash of what a user (or Kubernetes, deleting) changes in a scan; a
/// status write leaves it alone. Deletion bumps the generation, and the
/// finalizer's own add shows in the finalizers.
fn user_changes(scan: &BucketScan) -> Option<u64> {
    let meta = scan.meta();
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (
        meta.generation,
        scan.annotations(),
        scan.labels(),
        scan.finalizers(),
        meta.deletion_timestamp.is_some(),
    )
        .hash(&mut h);
    Some(h.finish())
}

/// Where the operator's Deployments and Jobs may be: `None` for every
/// namespace, else these (none at all when it watches a namespace that may
/// not run scans). With a list of scan namespaces the chart grants the
/// operator those kinds there only, so a cluster-wide watch would be
/// refused: each namespace is watched on its own.
fn owned_namespaces(namespace: Option<&str>, scan_namespaces: &[String]) -> Option<Vec<String>> {
    let any = scan_namespaces.is_empty() || scan_namespaces.iter().any(|n| n == "*");
    match namespace {
        Some(ns) if any || scan_namespaces.iter().any(|n| n == ns) => Some(vec![ns.to_string()]),
        Some(_) => Some(Vec::new()),
        None if any => None,
        None => Some(scan_namespaces.to_vec()),
    }
}

/// The operator's own objects of kind `K` (label-selected) in `reach`, as
/// one stream of the changes to them: one watch cluster-wide, or one per
/// namespace merged. A refused or broken watch retries with backoff.
fn owned<K>(
    client: &Client,
    reach: &Option<Vec<String>>,
) -> impl futures::Stream<Item = Result<PartialObjectMeta<K>, watcher::Error>> + Send + 'static
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let ours = watcher::Config::default().labels(&format!("{MANAGED_BY}={OPERATOR}"));
    // Metadata only: the objects' specs are never needed to wake a scan.
    let apis: Vec<Api<PartialObjectMeta<K>>> = match reach {
        None => vec![Api::all(client.clone())],
        Some(namespaces) => namespaces
            .iter()
            .map(|ns| Api::namespaced(client.clone(), ns))
            .collect(),
    };
    futures::stream::select_all(apis.into_iter().map(|api| {
        watcher(api, ours.clone())
            .default_backoff()
            .touched_objects()
            .boxed()
    }))
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
    // Its namespace holds its share of the slots: later, at no API cost.
    let Some(_slot) = Slot::take(&ctx, &scan) else {
        return Ok(Action::requeue(crate::fairness::DEFER));
    };
    let started = Instant::now();
    let api: Api<BucketScan> = Api::namespaced(ctx.client.clone(), &scan.namespace().unwrap_or_default());
    let result = finalizer(&api, FINALIZER, scan, |event| async {
        match event {
            // The pipeline's deep future needs the binary's raised
            // recursion limit (main.rs), boxed or not.
            Finalizer::Apply(scan) => {
                let applied = apply::apply(&scan, &ctx).await;
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

/// A reconcile slot held by a namespace (`fairness`), given back on drop.
struct Slot<'a> {
    ctx: &'a Context,
    namespace: String,
}

impl<'a> Slot<'a> {
    fn take(ctx: &'a Context, scan: &BucketScan) -> Option<Slot<'a>> {
        let namespace = scan.namespace().unwrap_or_default();
        let taken = ctx
            .fair
            .lock()
            .expect("lock")
            .try_start(&namespace, &scan.name_any(), Instant::now());
        // Made only when taken: a Slot dropped gives a slot back.
        taken.then(|| Slot { ctx, namespace })
    }
}

impl Drop for Slot<'_> {
    /// The slot is free: the next scan in line (if any) is woken for it.
    fn drop(&mut self) {
        let next = self.ctx.fair.lock().expect("lock").finish(&self.namespace);
        if let (Some((namespace, name)), Some(wake)) = (next, self.ctx.wake.get()) {
            let _ = wake.unbounded_send(kube::runtime::reflector::ObjectRef::new(&name).within(&namespace));
        }
    }
}

fn error_policy(scan: Arc<BucketScan>, error: &Error, ctx: Arc<Context>) -> Action {
    tracing::warn!(scan = %scan.name_any(), error = %error, "reconcile failed; retrying");
    // The user sees it too (kubectl describe), not only the operator's log;
    // the status says it as well (`blocked`).
    let note = format!("{error}; retrying in {} s", ERROR_REQUEUE.as_secs());
    tokio::spawn(
        async move { report::publish(&ctx, &scan, EventType::Warning, "ReconcileError", &note).await },
    );
    Action::requeue(ERROR_REQUEUE)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::finalizer::Error as F;

    #[test]
    fn status_writes_do_not_wake_a_reconcile_but_user_changes_do() {
        let scan: BucketScan = serde_json::from_value(serde_json::json!({
            "apiVersion": "bucketscan.dev/v1alpha1", "kind": "BucketScan",
            "metadata": {"name": "s", "namespace": "n", "generation": 1},
            "spec": {"source": {"bucket": "b"}, "output": {"bucket": "o"}}
        }))
        .unwrap();
        let base = user_changes(&scan);
        let mut status_only = scan.clone();
        status_only.status = Some(Default::default());
        status_only.metadata.resource_version = Some("42".into());
        assert_eq!(user_changes(&status_only), base);
        let mut changed = Vec::new();
        let mut spec = scan.clone();
        spec.metadata.generation = Some(2);
        changed.push(spec);
        let mut annotated = scan.clone();
        annotated
            .annotations_mut()
            .insert(cleanup::SKIP_CLEANUP.into(), "true".into());
        changed.push(annotated);
        let mut labelled = scan.clone();
        labelled.labels_mut().insert("team".into(), "a".into());
        changed.push(labelled);
        let mut finalized = scan.clone();
        finalized.finalizers_mut().push(FINALIZER.into());
        changed.push(finalized);
        let mut deleted = scan.clone();
        deleted.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::now(),
        ));
        changed.push(deleted);
        for c in &changed {
            assert_ne!(user_changes(c), base, "{:?}", c.metadata);
        }
    }

    #[test]
    fn deployments_and_jobs_are_watched_only_where_scans_may_run() {
        let list = |v: &[&str]| v.iter().map(|n| n.to_string()).collect::<Vec<_>>();
        assert_eq!(owned_namespaces(None, &[]), None, "no list: everywhere");
        assert_eq!(owned_namespaces(None, &list(&["*"])), None);
        assert_eq!(
            owned_namespaces(None, &list(&["team-a", "team-b"])),
            Some(list(&["team-a", "team-b"]))
        );
        assert_eq!(owned_namespaces(Some("own"), &[]), Some(list(&["own"])));
        assert_eq!(
            owned_namespaces(Some("team-a"), &list(&["team-a"])),
            Some(list(&["team-a"]))
        );
        assert_eq!(
            owned_namespaces(Some("elsewhere"), &list(&["team-a"])),
            Some(Vec::new()),
            "a watched namespace that may not run scans has none of them"
        );
    }

    #[test]
    fn a_failure_inside_the_finalizer_is_labelled_by_its_own_kind() {
        let config = || Error::Config("Secret \"x\" does not exist".into());
        assert_eq!(config().kind(), "config");
        let wrapped = Error::Finalizer(Box::new(F::ApplyFailed(config())));
        assert_eq!(wrapped.kind(), "config");
        let cleanup = Error::Finalizer(Box::new(F::CleanupFailed(Error::S3(
            bucketscan_core::s3::S3Error::Timeout(std::time::Duration::from_secs(1)),
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
