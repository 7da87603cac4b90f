//! The worker pods as the user should see them: how many are ready, why the
//! others are not (a pod that cannot pull its image, crash-loops, cannot be
//! scheduled, or a ReplicaSet refused by a quota), and a scan that makes no
//! progress for the operator's stall threshold; and the pod of a plan or
//! merge Job that does not run. The judgement is pure (`crate::pods`); this
//! file lists the pods and writes conditions and events.

use super::context::{Context, Error};
use super::report::publish;
use crate::crd::{BucketScan, BucketScanStatus};
use crate::desired;
use crate::pods::{job_problem, stalled_for, worker_health};
use crate::status::{self, human_duration, PROGRESSING, WORKERS_READY};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, ListParams};
use kube::runtime::events::EventType;
use kube::ResourceExt;
use std::time::Duration;

/// Look at the scan's `desired` worker pods (and its `deployment`, as the
/// reconcile just applied or read it); `st` gets `workersReady` and the
/// WorkersReady and Progressing conditions.
pub(super) async fn observe_workers(
    scan: &BucketScan,
    ctx: &Context,
    st: &mut BucketScanStatus,
    before: &BucketScanStatus,
    (desired, deployment): (i32, Option<&Deployment>),
    now: &Time,
) -> Result<(), Error> {
    let ns = scan.namespace().unwrap_or_default();
    let health = if desired == 0 {
        worker_health(&[], None, 0)
    } else {
        let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
        let listed = pods
            .list(&ListParams::default().labels(&desired::worker_selector(scan)))
            .await?;
        worker_health(&listed.items, deployment, desired)
    };
    st.workers_ready = Some(health.display());
    st.numbers.ready_workers = Some(health.ready);
    let (ready, reason, message) = health.condition();
    let generation = scan.metadata.generation;
    status::set_condition(
        &mut st.conditions,
        WORKERS_READY,
        ready,
        &reason,
        &message,
        generation,
        now,
    );
    let said_before = before
        .conditions
        .iter()
        .any(|c| c.type_ == WORKERS_READY && c.reason == reason);
    if health.problem.is_some() && !said_before {
        publish(ctx, scan, EventType::Warning, &reason, &message).await;
    }
    stall(scan, ctx, st, before, &message, now).await;
    Ok(())
}

/// How long a Job may have no pod before that counts as a problem (the Job
/// controller creates one within seconds when nothing stops it).
const JOB_POD_PATIENCE: Duration = Duration::from_secs(60);

/// What is wrong with the pod of `job` (a plan or merge Job of `scan`), as
/// `"{what}: {message}"` for the scan's condition; a Warning event with the
/// pod's reason the first time the scan's status does not say it yet.
pub(super) async fn job_pod_problem(
    scan: &BucketScan,
    ctx: &Context,
    job: &Job,
    what: &str,
) -> Result<Option<String>, Error> {
    let name = job.name_any();
    let pods = job_pods(scan, ctx, &name).await?;
    let age = job
        .metadata
        .creation_timestamp
        .as_ref()
        .map_or(Duration::ZERO, |t| {
            let secs = k8s_openapi::jiff::Timestamp::now().as_second() - t.0.as_second();
            Duration::from_secs(secs.max(0) as u64)
        });
    let Some((reason, problem)) = job_problem(job, &pods, age, JOB_POD_PATIENCE) else {
        return Ok(None);
    };
    let message = format!("{what} {name} cannot run: {problem}");
    let said = scan
        .status
        .iter()
        .flat_map(|s| &s.conditions)
        .any(|c| c.message.contains(&problem));
    if !said {
        publish(ctx, scan, EventType::Warning, &reason, &message).await;
    }
    Ok(Some(message))
}

/// The pods of the scan's Job `job` (the Job controller labels them
/// `job-name`).
pub(super) async fn job_pods(scan: &BucketScan, ctx: &Context, job: &str) -> Result<Vec<Pod>, Error> {
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &scan.namespace().unwrap_or_default());
    let listed = pods
        .list(&ListParams::default().labels(&format!("job-name={job}")))
        .await?;
    Ok(listed.items)
}

/// Progressing=False once no object was scanned for the stall threshold,
/// with what the pods say; True again when objects move.
async fn stall(
    scan: &BucketScan,
    ctx: &Context,
    st: &mut BucketScanStatus,
    before: &BucketScanStatus,
    workers: &str,
    now: &Time,
) {
    let scanned = |s: &BucketScanStatus| s.objects.as_ref().map_or(0, |o| o.scanned);
    if st.last_progress_time.is_none() || scanned(st) > scanned(before) {
        st.last_progress_time = Some(now.clone());
    }
    let since = st
        .last_progress_time
        .as_ref()
        .map(|t| super::context::elapsed(now, t).as_secs())
        .unwrap_or(0);
    let generation = scan.metadata.generation;
    let was_stalled = before
        .conditions
        .iter()
        .any(|c| c.type_ == PROGRESSING && c.status == "False");
    match stalled_for(Duration::from_secs(since), ctx.settings.stall_after) {
        Some(d) => {
            let message = format!("no object scanned for {}; {workers}", human_duration(d));
            status::set_condition(
                &mut st.conditions,
                PROGRESSING,
                false,
                "NoProgress",
                &message,
                generation,
                now,
            );
            if !was_stalled {
                publish(ctx, scan, EventType::Warning, "NoProgress", &message).await;
            }
        }
        None if was_stalled => {
            let message = "objects are being scanned again";
            status::set_condition(
                &mut st.conditions,
                PROGRESSING,
                true,
                "Progress",
                message,
                generation,
                now,
            );
        }
        None => {}
    }
}
