//! Deletion (the finalizer): the scan's Redis keys, its Redis user and its
//! parts in S3 go; the merged result stays. A scan without a credentials
//! Secret has its parts deleted by a Job under its workers' identity, never
//! the operator's. An unreachable store does not block deletion (its parts
//! are left, with a warning, after at most [`S3_CLEANUP`]); Redis must be
//! reached to delete its keys and user, unless the scan carries the escape
//! annotation [`SKIP_CLEANUP`] (for a Redis or store gone for good). The
//! annotation never leaves what can be reached in Redis: a tenant may set it,
//! and a working Redis user with keys that outlive their scan would be Redis
//! memory and access no quota counts.

use super::context::{key_of, lease, scan_labels, Context, Error, MANAGER};
use super::owned;
use super::redis_user::delete_scan_user;
use super::report::publish;
use super::source::s3_for;
use crate::crd::BucketScan;
use crate::desired;
use bucketscan_core::fleet::queue::Queue;
use bucketscan_core::s3::delete::delete_prefix;
use k8s_openapi::api::batch::v1::Job;
use kube::api::{Api, DeleteParams, Preconditions};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::ResourceExt;

/// Delete: the scan's Redis keys and user and its parts in S3 go; the
/// merged result (if any) stays.
pub(super) async fn cleanup(scan: &BucketScan, ctx: &Context) -> Result<Action, Error> {
    let skip = skips_cleanup(scan);
    if skip {
        let note = format!(
            "{SKIP_CLEANUP} is set: the scan's parts in S3 are left; its Redis keys and user go if Redis \
             answers within {} s",
            REDIS_WHEN_SKIPPING.as_secs()
        );
        tracing::warn!(scan = %scan.name_any(), "{note}");
        publish(ctx, scan, EventType::Warning, "CleanupSkipped", &note).await;
    } else if !ctx.cleanup_reaches(scan) {
        // Never started (and its Secrets are out of the operator's reach).
    } else if desired::uses_pod_identity(scan) {
        delete_parts_by_job(scan, ctx).await?;
    } else {
        // A missing Secret or bucket, lost access or a store that does not
        // answer must not block deletion forever.
        match tokio::time::timeout(S3_CLEANUP, delete_parts(scan, ctx)).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) if e.endpoint_refusal().is_some() => {
                let why = e.endpoint_refusal().unwrap_or_default();
                let note = format!(
                    "{}; the scan's parts are left",
                    crate::validate::endpoint_refused(scan, why)
                );
                publish(ctx, scan, EventType::Warning, "EndpointNotAllowed", &note).await;
            }
            Ok(Err(e)) => tracing::warn!(scan = %scan.name_any(), error = %e, "could not delete the parts"),
            Err(_) => tracing::warn!(scan = %scan.name_any(), "the store did not answer: the parts are left"),
        }
    }
    if !skip {
        delete_from_redis(scan, ctx).await?;
    } else {
        match tokio::time::timeout(REDIS_WHEN_SKIPPING, delete_from_redis(scan, ctx)).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                tracing::warn!(scan = %scan.name_any(), error = %e, "{SKIP_CLEANUP}: Redis refused; its keys and user are left")
            }
            Err(_) => {
                tracing::warn!(scan = %scan.name_any(), "{SKIP_CLEANUP}: Redis did not answer; its keys and user are left")
            }
        }
    }
    forget(scan, ctx)
}

/// Every key of the scan (by name, so keys its own user wrote beside the
/// queue's go too) and its Redis user.
async fn delete_from_redis(scan: &BucketScan, ctx: &Context) -> Result<(), Error> {
    let queue = Queue::on(&ctx.connection, &desired::scan_id(scan), MANAGER, lease(ctx));
    // The user first: it can write no more keys while they are deleted.
    delete_scan_user(scan, ctx).await?;
    queue.delete_scan().await?;
    Ok(())
}

/// How long a scan with [`SKIP_CLEANUP`] tries Redis before it goes without.
const REDIS_WHEN_SKIPPING: std::time::Duration = std::time::Duration::from_secs(10);

/// The annotation that lets a scan go without what cannot be reached (its
/// value `"true"`): its parts in S3 are left; its Redis keys and user only
/// when Redis does not answer (the escape when Redis is gone for good).
pub const SKIP_CLEANUP: &str = "bucketscan.dev/skip-cleanup";

/// How long deletion waits for the store.
const S3_CLEANUP: std::time::Duration = std::time::Duration::from_secs(60);

pub(super) fn skips_cleanup(scan: &BucketScan) -> bool {
    scan.annotations().get(SKIP_CLEANUP).is_some_and(|v| v == "true")
}

async fn delete_parts(scan: &BucketScan, ctx: &Context) -> Result<(), Error> {
    let s3 = s3_for(scan, ctx).await?;
    let spec = desired::spec_of(scan);
    delete_prefix(&s3, &spec.output_bucket, &spec.parts_prefix()).await?;
    Ok(())
}

/// A scan using its pods' identity: its parts are deleted by a Job in the
/// workers' pod, which outlives the scan (it is not owned by it: it carries
/// the scan's uid in an annotation instead) and is removed by the TTL
/// controller once finished. Deletion does not wait. A Job of that name
/// that is not this scan's is never replaced: the parts are left, with a
/// Warning event (as when the store does not answer), unless it is the
/// finished delete-parts Job of an earlier scan of the same name, which
/// goes first.
async fn delete_parts_by_job(scan: &BucketScan, ctx: &Context) -> Result<(), Error> {
    let jobs: Api<Job> = Api::namespaced(ctx.client.clone(), &scan.namespace().unwrap_or_default());
    let job = desired::cleanup_job(
        &with_an_allowed_image(scan, &ctx.settings.allowed_images),
        &ctx.settings,
    );
    let name = desired::cleanup_job_name(scan);
    let mine = match owned::get(&jobs, scan, &name).await {
        Err(e @ Error::NotOwned { .. }) => {
            if !replaced_earlier_job(&jobs, &name).await? {
                let note = format!(
                    "{e}: the operator runs its delete-parts Job only under that name and does not replace \
                     another; the scan's parts under s3://{}/{} are left",
                    scan.spec.output.bucket,
                    desired::spec_of(scan).parts_prefix()
                );
                tracing::warn!(scan = %scan.name_any(), "{note}");
                // Its own reason: the events of one scan and reason are one
                // series, which keeps the first note.
                publish(ctx, scan, EventType::Warning, "CleanupConflict", &note).await;
                return Ok(());
            }
            owned::get(&jobs, scan, &name).await?
        }
        other => other?,
    };
    mine.apply(&jobs, &job).await?;
    tracing::info!(scan = %scan.name_any(), job = %name, "the parts are deleted by a Job under the workers' identity");
    Ok(())
}

/// Whether Job `name` was the delete-parts Job of an earlier scan of the
/// same name (the operator's label and uid annotation, another uid) that
/// has finished, and is now deleted (that very Job: its uid is the
/// precondition). A running one still deletes that scan's parts: it stays.
async fn replaced_earlier_job(jobs: &Api<Job>, name: &str) -> Result<bool, Error> {
    let Some(job) = jobs.get_opt(name).await? else {
        return Ok(true);
    };
    let labels = job.labels();
    let earlier = job.annotations().contains_key(desired::SCAN_UID)
        && labels
            .get(desired::MANAGED_BY)
            .is_some_and(|v| v == desired::OPERATOR)
        && labels
            .get("app.kubernetes.io/component")
            .is_some_and(|v| v == "delete-parts");
    if !earlier || crate::pods::job_outcome(&job).is_none() {
        return Ok(false);
    }
    let params = DeleteParams::background().preconditions(Preconditions {
        uid: job.uid(),
        resource_version: None,
    });
    match jobs.delete(name, &params).await {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(true),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// The scan as its delete-parts Job runs it: an image the allowlist refuses
/// never runs, not even to clean up after a scan that was refused for it
/// (deleting would otherwise be a way around the allowlist); the operator's
/// own image, always allowed, deletes the parts just as well.
fn with_an_allowed_image(scan: &BucketScan, allowed: &[String]) -> BucketScan {
    let mut scan = scan.clone();
    if crate::validate::worker_image(&scan, allowed).is_err() {
        scan.spec.workers.image = None;
    }
    scan
}

fn forget(scan: &BucketScan, ctx: &Context) -> Result<Action, Error> {
    ctx.last_status.lock().expect("lock").remove(&key_of(scan));
    ctx.last_budget.lock().expect("lock").remove(&key_of(scan));
    ctx.started.lock().expect("lock").remove(&key_of(scan));
    ctx.applied.lock().expect("lock").remove(&key_of(scan));
    ctx.metrics.forget_scan(&scan_labels(scan));
    Ok(Action::await_change())
}
