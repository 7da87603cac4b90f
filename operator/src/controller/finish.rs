//! The end of a scan: Failed with a reason, or finished (no workers left),
//! and deleted once its `ttlSecondsAfterFinished` has passed.

use super::children::{remove_workers, stop_jobs, Stop};
use super::context::{Context, Error};
use super::redis_user::delete_scan_user;
use super::report::{publish, write_status};
use crate::crd::{BucketScan, BucketScanStatus, Phase};
use crate::status::{self, COMPLETE, FAILED};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, DeleteParams};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::ResourceExt;
use std::time::Duration;

pub(super) async fn fail(
    scan: &BucketScan,
    ctx: &Context,
    mut st: BucketScanStatus,
    reason: &str,
    message: &str,
    now: &Time,
) -> Result<Action, Error> {
    let before = scan.status.clone().unwrap_or_default();
    let generation = scan.metadata.generation;
    if st.phase == Phase::Scanning {
        // A merge Job started ahead of the last shard would merge a failed
        // scan's parts (and delete them) once that shard ends.
        stop_jobs(scan, ctx, Stop::Merge).await?;
    }
    st.phase = Phase::Failed;
    st.completion_time = Some(now.clone());
    st.eta = None;
    st.numbers.eta_seconds = None;
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
    finished(scan, ctx, st.start_time.is_some()).await
}

/// A finished scan keeps no workers; it is deleted after its TTL. `started`:
/// the scan got as far as planning (its status has a start time). One
/// refused before that (its spec, its namespace, its image) ran nothing, so
/// it tears nothing down: the names of its children may well be another
/// workload's.
pub(super) async fn finished(scan: &BucketScan, ctx: &Context, started: bool) -> Result<Action, Error> {
    if started {
        remove_workers(scan, ctx).await?;
        delete_scan_user(scan, ctx).await?;
    }
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
