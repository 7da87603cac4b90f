//! The reconciler: for each BucketScan, plan it into Redis, run its workers,
//! reap expired leases, report progress, start the merge and finish. The
//! decisions are in `desired` and `status` (pure); this file does the I/O.

use crate::crd::{BucketScan, BucketScanStatus, Phase, ShardCounts};
use crate::desired::{self, Settings};
use crate::metrics::{Metrics, ResultLabel, ScanLabels};
use crate::status::{self, COMPLETE, FAILED, PLANNED};
use bucketscan_core::merge::{delete_prefix, Manifest};
use bucketscan_core::plan::{plan_scan, PlanError};
use bucketscan_core::planner::PlanOptions;
use bucketscan_core::queue::{Queue, QueueError, RedisConfig, RedisConnection};
use bucketscan_core::recovery;
use bucketscan_core::s3::{Endpoint, S3};
use bucketscan_core::spec::ScanSpec;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::finalizer::{finalizer, Event as Finalizer};
use kube::runtime::watcher;
use kube::{Client, Resource, ResourceExt};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub const FINALIZER: &str = "bucketscan.dev/cleanup";
const MANAGER: &str = "bucketscan-operator";
/// How often an active scan is looked at (progress, reaper, scaling).
const ACTIVE_REQUEUE: Duration = Duration::from_secs(3);
/// At most one status write per scan this often, unless the phase changes.
const STATUS_EVERY: Duration = Duration::from_secs(2);

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error(transparent)]
    Queue(#[from] QueueError),
    #[error(transparent)]
    Plan(#[from] PlanError),
    #[error("S3: {0}")]
    S3(#[from] bucketscan_core::error::S3Error),
    #[error("{0}")]
    Config(String),
    #[error(transparent)]
    Recovery(#[from] bucketscan_core::recovery::RecoveryError),
    #[error("finalizer: {0}")]
    Finalizer(#[source] Box<kube::runtime::finalizer::Error<Error>>),
}

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
    /// When each scan's status was last written.
    last_status: Mutex<HashMap<String, Instant>>,
}

impl Context {
    pub fn new(
        client: Client,
        settings: Settings,
        redis: RedisConfig,
        connection: RedisConnection,
        instance: String,
        metrics: Arc<Metrics>,
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
            last_status: Mutex::default(),
        })
    }
}

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

use futures::StreamExt;

fn watched<K>(client: &Client, namespace: Option<&str>) -> Api<K>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
{
    match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

async fn reconcile(scan: Arc<BucketScan>, ctx: Arc<Context>) -> Result<Action, Error> {
    let started = Instant::now();
    let api: Api<BucketScan> = Api::namespaced(ctx.client.clone(), &scan.namespace().unwrap_or_default());
    let result = finalizer(&api, FINALIZER, scan, |event| async {
        match event {
            Finalizer::Apply(scan) => apply(&scan, &ctx).await,
            Finalizer::Cleanup(scan) => cleanup(&scan, &ctx).await,
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
    result
}

fn scan_labels(scan: &BucketScan) -> ScanLabels {
    ScanLabels {
        namespace: scan.namespace().unwrap_or_default(),
        scan: scan.name_any(),
    }
}

fn error_policy(scan: Arc<BucketScan>, error: &Error, ctx: Arc<Context>) -> Action {
    tracing::warn!(scan = %scan.name_any(), error = %error, "reconcile failed; retrying");
    // The user sees it too (kubectl describe), not only the operator's log.
    let note = format!("{error}; retrying in 10 s");
    tokio::spawn(async move { publish(&ctx, &scan, EventType::Warning, "ReconcileError", &note).await });
    Action::requeue(Duration::from_secs(10))
}

/// Everything known about a scan in Redis.
struct Observed {
    planned: bool,
    shards: ShardCounts,
    counters: std::collections::BTreeMap<String, u64>,
    rate: f64,
    manifest: Option<Manifest>,
}

async fn observe(queue: &Queue) -> Result<Observed, Error> {
    let planned = queue.spec::<ScanSpec>().await?.is_some();
    let counts = queue.counts().await?;
    let total = queue.shard_count().await?;
    let now = time::OffsetDateTime::now_utc().unix_timestamp();
    // Workers that reported in the last few seconds make up the live rate.
    let rate = queue
        .workers()
        .await?
        .values()
        .filter_map(|json| serde_json::from_str::<serde_json::Value>(json).ok())
        .filter(|v| v["updated"].as_i64().is_some_and(|t| now - t <= 10))
        .filter_map(|v| v["rate"].as_f64())
        .sum();
    let manifest = queue
        .meta_field("manifest")
        .await?
        .and_then(|m| serde_json::from_str(&m).ok());
    Ok(Observed {
        planned,
        shards: ShardCounts {
            total,
            pending: counts.pending,
            leased: counts.leased,
            done: counts.done,
            dead: counts.dead,
        },
        counters: queue.counters().await?,
        rate,
        manifest,
    })
}

async fn apply(scan: &BucketScan, ctx: &Context) -> Result<Action, Error> {
    let mut st = scan.status.clone().unwrap_or_default();
    let mut before = st.clone();
    let generation = scan.metadata.generation;
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    if matches!(st.phase, Phase::Complete | Phase::Failed) {
        return finished(scan, ctx).await;
    }
    if let Err(message) = crate::validate::validate(scan) {
        return fail(scan, ctx, st, "InvalidSpec", &message, &now).await;
    }
    let queue = Queue::on(&ctx.connection, &desired::scan_id(scan), MANAGER, lease(ctx));
    let mut seen = observe(&queue).await?;

    if !seen.planned {
        // Planned before, yet Redis has nothing: it lost the scan (restarted
        // without persistence). Finished shards come back from S3.
        let replanning = status::is_true(&st.conditions, PLANNED);
        st.phase = Phase::Planning;
        st.start_time.get_or_insert(now.clone());
        write_status(ctx, scan, &before, &st).await?;
        before = st.clone();
        let planned = if replanning {
            replan(scan, ctx, &queue).await
        } else {
            plan(scan, ctx, &queue)
                .await
                .map(|p| format!("{} shards", p.shards))
        };
        match planned {
            Ok(msg) => {
                let reason = if replanning { "Replanned" } else { "Planned" };
                status::set_condition(&mut st.conditions, PLANNED, true, reason, &msg, generation, &now);
                publish(ctx, scan, EventType::Normal, reason, &msg).await;
            }
            Err(
                e @ (Error::Plan(PlanError::Source { .. })
                | Error::Plan(PlanError::Output { .. })
                | Error::Config(_)),
            ) => {
                return fail(scan, ctx, st, "InvalidSource", &e.to_string(), &now).await;
            }
            Err(e) => return Err(e),
        }
        seen = observe(&queue).await?;
    }

    queue.reap(max_failures()).await?;
    let work_left = seen.shards.pending + seen.shards.leased;
    let replicas = desired::desired_replicas(&scan.spec.workers, Some(work_left));
    ensure_workers(scan, ctx, replicas).await?;

    let labels = scan_labels(scan);
    let m = &ctx.metrics;
    m.scan_objects
        .get_or_create(&labels)
        .set(seen.counters.get("heads").copied().unwrap_or(0));
    m.scan_rate.get_or_create(&labels).set(seen.rate.round() as u64);
    m.scan_shards_left.get_or_create(&labels).set(work_left);
    st.shards = Some(seen.shards.clone());
    st.objects = Some(status::object_counts(&seen.counters));
    st.progress = Some(status::progress(&seen.shards));
    st.rate = Some(status::rate(seen.rate));
    st.workers = Some(replicas);
    st.observed_generation = generation;
    let elapsed = st
        .start_time
        .as_ref()
        .map(|t| Duration::from_secs(now.0.as_second().saturating_sub(t.0.as_second()).max(0) as u64))
        .unwrap_or_default();
    st.eta = status::eta(elapsed, &seen.shards);

    if work_left > 0 {
        st.phase = Phase::Scanning;
        let msg = format!(
            "{} of {} shards finished",
            seen.shards.done + seen.shards.dead,
            seen.shards.total
        );
        status::set_condition(
            &mut st.conditions,
            COMPLETE,
            false,
            "Scanning",
            &msg,
            generation,
            &now,
        );
        write_status(ctx, scan, &before, &st).await?;
        return Ok(Action::requeue(ACTIVE_REQUEUE));
    }

    // Every shard is done or dead: merge.
    match seen.manifest {
        None => {
            st.phase = Phase::Merging;
            status::set_condition(
                &mut st.conditions,
                COMPLETE,
                false,
                "Merging",
                "joining the parts",
                generation,
                &now,
            );
            ensure_merge_job(scan, ctx).await?;
            if let Some(reason) = merge_job_failure(scan, ctx).await? {
                return fail(scan, ctx, st, "MergeFailed", &reason, &now).await;
            }
            write_status(ctx, scan, &before, &st).await?;
            Ok(Action::requeue(ACTIVE_REQUEUE))
        }
        Some(m) if m.shards_dead > 0 => {
            let first = &m.dead[0];
            let msg = format!(
                "{} shard(s) failed for good and are missing from the result; first: {} ({})",
                m.shards_dead,
                first.range,
                first.last_error.as_deref().unwrap_or("no error recorded")
            );
            st.output = Some(m.result.clone());
            fail(scan, ctx, st, "ShardsFailed", &msg, &now).await
        }
        Some(m) => {
            st.phase = Phase::Complete;
            st.output = Some(m.result.clone());
            st.completion_time = Some(now.clone());
            st.eta = None;
            let msg = format!(
                "{} objects in {}",
                m.counts.get("objects").copied().unwrap_or(0),
                m.result
            );
            status::set_condition(
                &mut st.conditions,
                COMPLETE,
                true,
                "Merged",
                &msg,
                generation,
                &now,
            );
            write_status(ctx, scan, &before, &st).await?;
            publish(ctx, scan, EventType::Normal, "Complete", &msg).await;
            finished(scan, ctx).await
        }
    }
}

fn lease(ctx: &Context) -> Duration {
    Duration::from_secs(ctx.settings.lease_secs as u64)
}

fn max_failures() -> u32 {
    5
}

async fn fail(
    scan: &BucketScan,
    ctx: &Context,
    mut st: BucketScanStatus,
    reason: &str,
    message: &str,
    now: &Time,
) -> Result<Action, Error> {
    let before = scan.status.clone().unwrap_or_default();
    let generation = scan.metadata.generation;
    st.phase = Phase::Failed;
    st.completion_time = Some(now.clone());
    st.eta = None;
    status::set_condition(&mut st.conditions, FAILED, true, reason, message, generation, now);
    status::set_condition(
        &mut st.conditions,
        COMPLETE,
        false,
        reason,
        message,
        generation,
        now,
    );
    write_status(ctx, scan, &before, &st).await?;
    publish(ctx, scan, EventType::Warning, reason, message).await;
    finished(scan, ctx).await
}

/// A finished scan keeps no workers; it is deleted after its TTL.
async fn finished(scan: &BucketScan, ctx: &Context) -> Result<Action, Error> {
    ensure_workers(scan, ctx, 0).await?;
    let Some(ttl) = scan.spec.ttl_seconds_after_finished else {
        return Ok(Action::await_change());
    };
    let done_at = scan
        .status
        .as_ref()
        .and_then(|s| s.completion_time.as_ref())
        .map(|t| t.0.as_second())
        .unwrap_or_else(|| k8s_openapi::jiff::Timestamp::now().as_second());
    let left = done_at + ttl - k8s_openapi::jiff::Timestamp::now().as_second();
    if left > 0 {
        return Ok(Action::requeue(Duration::from_secs(left as u64)));
    }
    let api: Api<BucketScan> = Api::namespaced(ctx.client.clone(), &scan.namespace().unwrap_or_default());
    api.delete(&scan.name_any(), &DeleteParams::default()).await?;
    Ok(Action::await_change())
}

/// One key of a Secret in the scan's namespace; a clear error when missing.
async fn secret_value(
    scan: &BucketScan,
    ctx: &Context,
    name: &str,
    key: &str,
    field: &str,
) -> Result<Vec<u8>, Error> {
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), &scan.namespace().unwrap_or_default());
    let secret = secrets
        .get_opt(name)
        .await?
        .ok_or_else(|| Error::Config(format!("Secret {name:?} ({field}) does not exist")))?;
    secret
        .data
        .and_then(|mut d| d.remove(key))
        .map(|v| v.0)
        .ok_or_else(|| Error::Config(format!("Secret {name:?} ({field}) has no key {key:?}")))
}

/// The scan's S3 clients, with the credentials from its Secret.
async fn s3_for(scan: &BucketScan, ctx: &Context) -> Result<Arc<S3>, Error> {
    let src = &scan.spec.source;
    let credentials = match &src.credentials_secret {
        None => None,
        Some(r) => {
            let secrets: Api<Secret> =
                Api::namespaced(ctx.client.clone(), &scan.namespace().unwrap_or_default());
            let secret = secrets.get_opt(&r.name).await?.ok_or_else(|| {
                Error::Config(format!(
                    "Secret {:?} (spec.source.credentialsSecret) does not exist",
                    r.name
                ))
            })?;
            let field = |key: &str| {
                secret
                    .data
                    .as_ref()
                    .and_then(|d| d.get(key))
                    .map(|v| String::from_utf8_lossy(&v.0).trim().to_string())
            };
            let (Some(id), Some(key)) = (field("AWS_ACCESS_KEY_ID"), field("AWS_SECRET_ACCESS_KEY")) else {
                return Err(Error::Config(format!(
                    "Secret {:?} needs the keys AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY",
                    r.name
                )));
            };
            Some(aws_credential_types::Credentials::new(
                id,
                key,
                field("AWS_SESSION_TOKEN"),
                None,
                "bucketscan-secret",
            ))
        }
    };
    let ca_pem = match &src.ca_secret {
        None => None,
        Some(r) => Some(secret_value(scan, ctx, &r.name, &r.key, "spec.source.caSecret").await?),
    };
    let endpoint = Endpoint {
        url: src.endpoint.clone(),
        region: src.region.clone(),
        path_style: src.path_style,
        ca_pem,
        insecure: src.insecure_skip_tls_verify,
        pool_size: 16,
    };
    Ok(S3::connect_with(endpoint, credentials).await?)
}

fn spec_of(scan: &BucketScan) -> ScanSpec {
    ScanSpec {
        bucket: scan.spec.source.bucket.clone(),
        prefix: scan.spec.source.prefix.clone(),
        output_bucket: scan.spec.output.bucket.clone(),
        output_prefix: desired::output_prefix(scan),
        gzip: scan.spec.output.gzip,
        only_with_metadata: scan.spec.filters.only_with_metadata,
        max_failures: max_failures(),
    }
}

async fn plan(
    scan: &BucketScan,
    ctx: &Context,
    queue: &Queue,
) -> Result<bucketscan_core::plan::Planned, Error> {
    let s3 = s3_for(scan, ctx).await?;
    let sharding = &scan.spec.sharding;
    let opts = PlanOptions {
        delimiter: Some(sharding.delimiter.clone().unwrap_or_else(|| "/".into())).filter(|d| !d.is_empty()),
        target_shards: sharding.target_shards.unwrap_or(64) as usize,
        min_shard_objects: sharding.min_shard_objects.unwrap_or(10_000),
        ..PlanOptions::default()
    };
    Ok(plan_scan(&s3, &spec_of(scan), &opts, queue).await?)
}

/// Plan again after Redis lost the scan: finished shards are restored from
/// their records in S3, only the rest is queued.
async fn replan(scan: &BucketScan, ctx: &Context, queue: &Queue) -> Result<String, Error> {
    let s3 = s3_for(scan, ctx).await?;
    let (restored, queued) = recovery::replan(&s3, &spec_of(scan), queue).await?;
    Ok(format!(
        "Redis had lost the scan: {restored} finished shards restored from S3, {queued} ranges queued again"
    ))
}

fn apply_params() -> PatchParams {
    PatchParams::apply(MANAGER).force()
}

async fn ensure_workers(scan: &BucketScan, ctx: &Context, replicas: i32) -> Result<(), Error> {
    let ns = scan.namespace().unwrap_or_default();
    let deployments: Api<Deployment> = Api::namespaced(ctx.client.clone(), &ns);
    let name = desired::workers_name(scan);
    if replicas == 0 {
        // Nothing to run: the Deployment goes (its pods get SIGTERM and
        // release any shard they hold).
        if deployments.get_opt(&name).await?.is_some() {
            deployments.delete(&name, &DeleteParams::default()).await?;
        }
        return Ok(());
    }
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), &ns);
    let ca = ctx
        .redis
        .ca_pem
        .as_ref()
        .map(|p| String::from_utf8_lossy(p).into_owned());
    let secret = desired::redis_secret(scan, &ctx.redis.url, ca.as_deref());
    secrets
        .patch(
            &desired::redis_secret_name(scan),
            &apply_params(),
            &Patch::Apply(&secret),
        )
        .await?;
    let deployment = desired::worker_deployment(scan, &ctx.settings, replicas, ca.is_some());
    deployments
        .patch(&name, &apply_params(), &Patch::Apply(&deployment))
        .await?;
    Ok(())
}

async fn ensure_merge_job(scan: &BucketScan, ctx: &Context) -> Result<(), Error> {
    let jobs: Api<Job> = Api::namespaced(ctx.client.clone(), &scan.namespace().unwrap_or_default());
    let name = desired::merge_job_name(scan);
    if jobs.get_opt(&name).await?.is_none() {
        let job = desired::merge_job(scan, &ctx.settings, ctx.redis.ca_pem.is_some());
        jobs.patch(&name, &apply_params(), &Patch::Apply(&job)).await?;
        publish(
            ctx,
            scan,
            EventType::Normal,
            "Merging",
            "all shards finished; merge Job started",
        )
        .await;
    }
    Ok(())
}

/// The merge Job's failure, once it gave up.
async fn merge_job_failure(scan: &BucketScan, ctx: &Context) -> Result<Option<String>, Error> {
    let jobs: Api<Job> = Api::namespaced(ctx.client.clone(), &scan.namespace().unwrap_or_default());
    let job = jobs.get_opt(&desired::merge_job_name(scan)).await?;
    Ok(job
        .and_then(|j| j.status)
        .and_then(|s| s.conditions)
        .unwrap_or_default()
        .into_iter()
        .find(|c| c.type_ == "Failed" && c.status == "True")
        .map(|c| format!("merge Job failed: {}", c.message.unwrap_or_default())))
}

/// Delete: the scan's Redis keys and its parts in S3 go; the merged result
/// (if any) stays.
async fn cleanup(scan: &BucketScan, ctx: &Context) -> Result<Action, Error> {
    let queue = Queue::on(&ctx.connection, &desired::scan_id(scan), MANAGER, lease(ctx));
    match s3_for(scan, ctx).await {
        Ok(s3) => {
            let spec = spec_of(scan);
            if let Err(e) = delete_prefix(&s3, &spec.output_bucket, &spec.parts_prefix()).await {
                // A missing bucket or lost access must not block deletion forever.
                tracing::warn!(scan = %scan.name_any(), error = %e, "could not delete the parts");
            }
        }
        Err(e) => {
            tracing::warn!(scan = %scan.name_any(), error = %e, "could not reach S3 to delete the parts")
        }
    }
    queue.delete_scan().await?;
    ctx.last_status.lock().expect("lock").remove(&key_of(scan));
    ctx.metrics.forget_scan(&scan_labels(scan));
    Ok(Action::await_change())
}

fn key_of(scan: &BucketScan) -> String {
    format!("{}/{}", scan.namespace().unwrap_or_default(), scan.name_any())
}

/// Write the status by server-side apply, unless nothing changed, or it was
/// written less than STATUS_EVERY ago and the phase is the same.
async fn write_status(
    ctx: &Context,
    scan: &BucketScan,
    before: &BucketScanStatus,
    st: &BucketScanStatus,
) -> Result<(), Error> {
    if before == st {
        return Ok(());
    }
    let key = key_of(scan);
    let phase_changed = before.phase != st.phase;
    {
        let last = ctx.last_status.lock().expect("lock");
        if !phase_changed && last.get(&key).is_some_and(|t| t.elapsed() < STATUS_EVERY) {
            return Ok(());
        }
    }
    let api: Api<BucketScan> = Api::namespaced(ctx.client.clone(), &scan.namespace().unwrap_or_default());
    let patch = serde_json::json!({
        "apiVersion": BucketScan::api_version(&()),
        "kind": BucketScan::kind(&()),
        "status": st,
    });
    api.patch_status(&scan.name_any(), &apply_params(), &Patch::Apply(&patch))
        .await?;
    ctx.last_status.lock().expect("lock").insert(key, Instant::now());
    if phase_changed {
        tracing::info!(scan = %scan.name_any(), from = ?before.phase, to = ?st.phase, "phase changed");
        let note = format!("{:?} -> {:?}", before.phase, st.phase);
        publish(ctx, scan, EventType::Normal, "PhaseChanged", &note).await;
    }
    Ok(())
}

async fn publish(ctx: &Context, scan: &BucketScan, type_: EventType, reason: &str, note: &str) {
    let event = Event {
        type_,
        reason: reason.into(),
        note: Some(note.chars().take(1000).collect()),
        action: "Reconcile".into(),
        secondary: None,
    };
    if let Err(e) = ctx.recorder.publish(&event, &scan.object_ref(&())).await {
        tracing::warn!(error = %e, "could not publish an event");
    }
}
