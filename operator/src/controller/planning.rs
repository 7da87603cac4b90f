//! Planning: cut the scan's keyspace into shards in Redis (LIST only, with
//! the scan's own credentials), or plan again from the done records in S3
//! when Redis lost a planned scan. A scan without a credentials Secret is
//! planned by a Job in its workers' pod instead ([`job_gate`]): the
//! operator's own identity never reaches a tenant's store. So is a scan
//! with a baseline: its manifest is never decoded in the operator
//! (`desired::plans_by_job`).

use super::children::ensure_redis_secret;
use super::context::{key_of, Context, Error};
use super::health::{job_pod_problem, job_pods};
use super::owned;
use super::report::publish;
use super::source::s3_for;
use crate::crd::BucketScan;
use crate::desired;
use crate::pods::{job_outcome, last_exit};
use crate::status;
use bucketscan_core::fleet::plan::plan_marked;
use bucketscan_core::fleet::queue::Queue;
use bucketscan_core::fleet::recovery;
use k8s_openapi::api::batch::v1::Job;
use kube::api::{Api, DeleteParams};
use kube::runtime::events::EventType;
use kube::ResourceExt;

/// Plan in the operator (scans with a credentials Secret), within the
/// planning deadline; then settle the store check of a scan without a
/// baseline (bounded by itself: the plan is marked, its workers run).
pub(super) async fn plan(
    scan: &BucketScan,
    ctx: &Context,
    queue: &Queue,
) -> Result<bucketscan_core::fleet::plan::Planned, Error> {
    let spec = desired::spec_of(scan);
    let (s3, planned, pending) = within_deadline(ctx, "planning", async {
        let s3 = s3_for(scan, ctx).await?;
        let opts = desired::plan_options(scan, &ctx.settings);
        // Boxed: planning's future (the store check's SDK calls, the
        // baseline) is large, and the reconcile's stack is a worker thread's.
        let (planned, pending) = Box::pin(plan_marked(&s3, &spec, &opts, queue)).await?;
        Ok((s3, planned, pending))
    })
    .await?;
    if let Some(pending) = pending {
        Box::pin(pending.settle(&s3, &spec)).await;
    }
    Ok(planned)
}

/// Plan again after Redis lost the scan: finished shards are restored from
/// their records in S3, only the rest is queued. Within the planning
/// deadline too.
pub(super) async fn replan(scan: &BucketScan, ctx: &Context, queue: &Queue) -> Result<String, Error> {
    within_deadline(ctx, "planning again", async {
        let s3 = s3_for(scan, ctx).await?;
        let (restored, queued) = recovery::replan(&s3, &desired::spec_of(scan), queue).await?;
        Ok(format!(
            "Redis had lost the scan: {restored} finished shards restored from S3, {queued} ranges queued again"
        ))
    })
    .await
}

/// `work` cut off after `--planning-deadline-seconds`: a store that answers
/// slowly or never (each request may wait 30 s and be retried) must not
/// hold one of the controller's few reconcile slots for hours. Cutting it
/// off is safe: planning stores the spec and its shards so that a plan cut
/// short is continued, never tiled again (`plan_scan`).
async fn within_deadline<T>(
    ctx: &Context,
    what: &str,
    work: impl std::future::Future<Output = Result<T, Error>>,
) -> Result<T, Error> {
    let deadline = ctx.settings.planning_deadline;
    tokio::time::timeout(deadline, work).await.unwrap_or_else(|_| {
        Err(Error::PlanningSlow(format!(
            "{what} did not finish within {} s (operator flag --planning-deadline-seconds): \
             the store answers too slowly or not at all; planning again after a backoff",
            deadline.as_secs()
        )))
    })
}

/// Where planning by Job stands (scans that use their pods' identity).
pub(super) enum Gate {
    /// Redis holds the plan; `Some(message)` the first time it is seen.
    Proceed(Option<String>),
    /// The Job runs (or was just started): look again soon.
    Wait(String),
    /// The Job gave up: the scan fails with this message.
    Failed(String),
    /// The plan was refused for good by what the scan asks (the pod's
    /// error line): the scan fails with reason `PlanRefused`.
    Refused(String),
}

/// Plan (or, when Redis lost a planned scan, plan again) with a Job in the
/// workers' pod, so the store is reached with the scan's identity and never
/// the operator's. `planned`: the scan's Planned condition. The scan moves
/// on only once the Job succeeded: Redis shows the spec before the shards.
pub(super) async fn job_gate(
    scan: &BucketScan,
    ctx: &Context,
    in_redis: bool,
    planned: bool,
) -> Result<Gate, Error> {
    let jobs: Api<Job> = Api::namespaced(ctx.client.clone(), &scan.namespace().unwrap_or_default());
    let name = desired::plan_job_name(scan, planned);
    // Only the scan's own Job: another workload's Job of that name is
    // neither judged as the plan's outcome nor replaced.
    let mine = owned::get(&jobs, scan, &name).await?;
    let Some(job) = mine.object.clone() else {
        if in_redis && planned {
            return Ok(Gate::Proceed(None));
        }
        let with_ca = ensure_redis_secret(scan, ctx).await?;
        let job = desired::plan_job(scan, &ctx.settings, with_ca, planned);
        mine.apply(&jobs, &job).await?;
        let why = if desired::uses_pod_identity(scan) {
            "the scan has no credentialsSecret: the store is reached with the workers' identity, \
             never the operator's"
        } else {
            "the scan has a baseline: its manifest is read in the scan's own pod, never the operator's"
        };
        let message = format!(
            "planning Job {name} started under ServiceAccount {:?} ({why})",
            job_service_account(&job)
        );
        publish(ctx, scan, EventType::Normal, "Planning", &message).await;
        return Ok(Gate::Wait(message));
    };
    match job_outcome(&job) {
        None => match job_pod_problem(scan, ctx, &job, "planning Job").await? {
            Some(problem) => Ok(Gate::Wait(problem)),
            None => Ok(Gate::Wait(format!("planning Job {name} is running"))),
        },
        // Past its deadline (a store that stalls, a pod that cannot start):
        // planned again after a backoff, as the operator's own planning is.
        Some(Err(reason)) if reason.starts_with("DeadlineExceeded") => {
            let why = format!(
                "it ran past its deadline ({} s: --planning-deadline-seconds and {} s for its pod to start)",
                (ctx.settings.planning_deadline + desired::PLAN_JOB_START_GRACE).as_secs(),
                desired::PLAN_JOB_START_GRACE.as_secs()
            );
            retry_after_transient(scan, ctx, &job, &why).await
        }
        Some(Err(reason)) => match exit_of(scan, ctx, &name).await? {
            Some((desired::EXIT_TRANSIENT, why)) => retry_after_transient(scan, ctx, &job, &why).await,
            Some((desired::EXIT_REFUSED, said)) => Ok(Gate::Refused(error_line(&said).unwrap_or_else(|| {
                format!("planning Job {name} refused the plan; its pod's log says why: kubectl logs job/{name}")
            }))),
            _ => Ok(Gate::Failed(format!(
                "planning Job {name} failed ({reason}); its pod's log says why: kubectl logs job/{name}{}",
                desired::identity_hint(scan)
                    .map(|hint| format!(" ({hint})"))
                    .unwrap_or_default()
            ))),
        },
        Some(Ok(())) if in_redis => {
            ctx.plan_retries.lock().expect("lock").remove(&key_of(scan));
            Ok(Gate::Proceed(
                (!planned).then(|| format!("planned by Job {name}")),
            ))
        }
        Some(Ok(())) => {
            // Redis lost the plan after the Job made it: a new Job.
            owned::delete_owned(&jobs, scan, &job, &DeleteParams::background()).await?;
            Ok(Gate::Wait(format!(
                "Redis lost the plan Job {name} made; planning again"
            )))
        }
    }
}

/// The exit code and termination message of the Job's last pod.
async fn exit_of(scan: &BucketScan, ctx: &Context, job: &str) -> Result<Option<(i32, String)>, Error> {
    Ok(last_exit(&job_pods(scan, ctx, job).await?))
}

/// The worker's `error: …` line in a termination message (its log's last
/// lines), without the word: what the scan's status says.
fn error_line(message: &str) -> Option<String> {
    let line = message
        .lines()
        .rev()
        .find_map(|l| l.trim().strip_prefix("error: "))?;
    Some(line.chars().take(1024).collect())
}

/// The termination message of the Job's last pod when it exited with
/// [`desired::EXIT_TRANSIENT`] (a cause that may pass by itself).
pub(super) async fn transient_exit(
    scan: &BucketScan,
    ctx: &Context,
    job: &str,
) -> Result<Option<String>, Error> {
    Ok(last_exit(&job_pods(scan, ctx, job).await?)
        .filter(|(code, _)| *code == desired::EXIT_TRANSIENT)
        .map(|(_, message)| message))
}

/// A plan Job that failed for a cause that may pass: once the backoff
/// since its failure is over (5 s, doubling up to 5 minutes per retry), it
/// is deleted so that the next look starts a new one; the scan keeps
/// planning and says why.
async fn retry_after_transient(
    scan: &BucketScan,
    ctx: &Context,
    job: &Job,
    why: &str,
) -> Result<Gate, Error> {
    let name = job.name_any();
    let retries = ctx
        .plan_retries
        .lock()
        .expect("lock")
        .get(&key_of(scan))
        .copied()
        .unwrap_or(0);
    let now = k8s_openapi::jiff::Timestamp::now().as_second();
    let left = crate::pods::seconds_until_retry(job, status::retry_wait(retries + 1), now).max(0);
    let cause = format!("planning Job {name} failed for a cause that may pass ({why})");
    if left > 0 {
        return Ok(Gate::Wait(format!("{cause}; planning again in {left} s")));
    }
    let jobs: Api<Job> = Api::namespaced(ctx.client.clone(), &scan.namespace().unwrap_or_default());
    owned::delete_owned(&jobs, scan, job, &DeleteParams::background()).await?;
    ctx.plan_retries
        .lock()
        .expect("lock")
        .insert(key_of(scan), retries + 1);
    let message = format!("{cause}; planning again (retry {})", retries + 1);
    publish(ctx, scan, EventType::Warning, "PlanRetrying", &message).await;
    Ok(Gate::Wait(message))
}

fn job_service_account(job: &Job) -> String {
    job.spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .and_then(|p| p.service_account_name.clone())
        .unwrap_or_else(|| "default".into())
}
