//! The scan's worker pods: a Deployment of `bucketscan-worker run` and the
//! Secret with the Redis URL, applied server-side from `desired`; deleted
//! when no worker is wanted.

use super::context::{Context, Error, MANAGER};
use super::redis_user::pods_redis_url;
use crate::crd::BucketScan;
use crate::desired;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PropagationPolicy};
use kube::ResourceExt;

pub(super) fn apply_params() -> PatchParams {
    PatchParams::apply(MANAGER).force()
}

pub(super) async fn ensure_workers(scan: &BucketScan, ctx: &Context, replicas: i32) -> Result<(), Error> {
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
    let with_ca = ensure_redis_secret(scan, ctx).await?;
    let deployment = desired::worker_deployment(scan, &ctx.settings, replicas, with_ca);
    deployments
        .patch(&name, &apply_params(), &Patch::Apply(&deployment))
        .await?;
    Ok(())
}

/// The Secret the scan's pods read Redis's address from (with the scan's
/// own user, see `redis_user`). Returns whether it carries a CA.
pub(super) async fn ensure_redis_secret(scan: &BucketScan, ctx: &Context) -> Result<bool, Error> {
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), &scan.namespace().unwrap_or_default());
    let ca = ctx
        .redis
        .ca_pem
        .as_ref()
        .map(|p| String::from_utf8_lossy(p).into_owned());
    let url = pods_redis_url(scan, ctx).await?;
    let secret = desired::redis_secret(scan, &url, ca.as_deref());
    secrets
        .patch(
            &desired::redis_secret_name(scan),
            &apply_params(),
            &Patch::Apply(&secret),
        )
        .await?;
    Ok(ca.is_some())
}

/// Which of a scan's Jobs to stop.
pub(super) enum Stop {
    /// Planning (suspended: planning starts again on resume).
    Planning,
    /// Every Job (past the deadline).
    All,
}

/// Stop the scan's plan and replan Jobs, and with [`Stop::All`] its merge
/// Job: the Jobs and their pods go.
pub(super) async fn stop_jobs(scan: &BucketScan, ctx: &Context, which: Stop) -> Result<(), Error> {
    let jobs: Api<Job> = Api::namespaced(ctx.client.clone(), &scan.namespace().unwrap_or_default());
    let mut names = vec![
        desired::plan_job_name(scan, false),
        desired::plan_job_name(scan, true),
    ];
    if matches!(which, Stop::All) {
        names.push(desired::merge_job_name(scan));
    }
    let background = DeleteParams {
        propagation_policy: Some(PropagationPolicy::Background),
        ..DeleteParams::default()
    };
    for name in names {
        if jobs.get_opt(&name).await?.is_some() {
            jobs.delete(&name, &background).await?;
        }
    }
    Ok(())
}
