//! The scan's worker pods: a Deployment of `bucketscan-worker run` and the
//! Secret with the Redis URL, applied server-side from `desired`; deleted
//! when no worker is wanted. Only the scan's own objects are written or
//! deleted (`owned`).

use super::context::{Context, Error};
use super::owned::{self, unless_foreign};
use super::redis_user::pods_redis_url;
use crate::crd::BucketScan;
use crate::desired;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DeleteParams, PropagationPolicy};
use kube::ResourceExt;

/// The scan's worker Deployment with `replicas` (none: deleted); returns it
/// as it is now.
pub(super) async fn ensure_workers(
    scan: &BucketScan,
    ctx: &Context,
    replicas: i32,
) -> Result<Option<Deployment>, Error> {
    let ns = scan.namespace().unwrap_or_default();
    let deployments: Api<Deployment> = Api::namespaced(ctx.client.clone(), &ns);
    let name = desired::workers_name(scan);
    if replicas == 0 {
        // Nothing to run: the Deployment goes (its pods get SIGTERM and
        // release any shard they hold).
        owned::delete(&deployments, scan, &name, &DeleteParams::default()).await?;
        return Ok(None);
    }
    // Checked before the Secret is written: a scan whose workers' name is
    // taken writes nothing.
    let mine = owned::get(&deployments, scan, &name).await?;
    let with_ca = ensure_redis_secret(scan, ctx).await?;
    let deployment = desired::worker_deployment(scan, &ctx.settings, replicas, with_ca);
    Ok(Some(
        mine.apply_changed(&deployments, &deployment, scan, ctx).await?,
    ))
}

/// A scan that ended keeps no workers: its own Deployment goes; an object of
/// that name that was never the scan's stays, and is no concern of it now.
pub(super) async fn remove_workers(scan: &BucketScan, ctx: &Context) -> Result<(), Error> {
    unless_foreign(scan, ensure_workers(scan, ctx, 0).await.map(|_| ()))
}

/// The Secret the scan's pods read Redis's address from (with the scan's
/// own user, see `redis_user`). Returns whether it carries a CA.
pub(super) async fn ensure_redis_secret(scan: &BucketScan, ctx: &Context) -> Result<bool, Error> {
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), &scan.namespace().unwrap_or_default());
    let mine = owned::get(&secrets, scan, &desired::redis_secret_name(scan)).await?;
    let ca = ctx
        .redis
        .ca_pem
        .as_ref()
        .map(|p| String::from_utf8_lossy(p).into_owned());
    let url = pods_redis_url(scan, ctx, mine.object.as_ref()).await?;
    let secret = desired::redis_secret(scan, &url, ca.as_deref());
    mine.apply_changed(&secrets, &secret, scan, ctx).await?;
    Ok(ca.is_some())
}

/// Which of a scan's Jobs to stop.
pub(super) enum Stop {
    /// Planning (suspended: planning starts again on resume). A Job of
    /// that name that is not the scan's is a `Conflict`: the scan will
    /// need the name.
    Planning,
    /// Every Job (past the deadline: the scan ends). A Job of that name
    /// that is not the scan's stays, and is no concern of it now.
    All,
    /// The merge Job only: one started ahead in a scan's last seconds
    /// (`merge::merge_ahead`), when the scan leaves Scanning other than by
    /// its merge (suspended, failed). A Job of that name that is not the
    /// scan's stays.
    Merge,
}

/// Stop the scan's plan and replan Jobs (only a scan planned by Job has
/// them), and with [`Stop::All`] or [`Stop::Merge`] its merge Job: the Jobs
/// and their pods go.
pub(super) async fn stop_jobs(scan: &BucketScan, ctx: &Context, which: Stop) -> Result<(), Error> {
    let jobs: Api<Job> = Api::namespaced(ctx.client.clone(), &scan.namespace().unwrap_or_default());
    let (plan, merge) = match which {
        Stop::Planning => (true, false),
        Stop::All => (true, true),
        Stop::Merge => (false, true),
    };
    let mut names = Vec::new();
    if plan && desired::plans_by_job(scan) {
        names.push(desired::plan_job_name(scan, false));
        names.push(desired::plan_job_name(scan, true));
    }
    if merge {
        names.push(desired::merge_job_name(scan));
    }
    let background = DeleteParams {
        propagation_policy: Some(PropagationPolicy::Background),
        ..DeleteParams::default()
    };
    for name in names {
        let stopped = owned::delete(&jobs, scan, &name, &background).await;
        match which {
            Stop::Planning => stopped?,
            Stop::All | Stop::Merge => unless_foreign(scan, stopped)?,
        };
    }
    Ok(())
}
