//! What the user sees: the status, written by server-side apply (at most
//! every STATUS_EVERY unless the phase changes), and events.

use super::context::{apply_params, key_of, scan_labels, Context, Error};
use crate::crd::{BucketScan, BucketScanStatus};
use crate::status;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, Patch};
use kube::runtime::events::{Event, EventType};
use kube::{Resource, ResourceExt};
use std::time::{Duration, Instant};

/// At most one status write per scan this often, unless the phase changes.
const STATUS_EVERY: Duration = Duration::from_secs(2);

/// Write the status by server-side apply, unless nothing changed, or it was
/// written less than STATUS_EVERY ago and the phase is the same.
pub(super) async fn write_status(
    ctx: &Context,
    scan: &BucketScan,
    before: &BucketScanStatus,
    st: &BucketScanStatus,
) -> Result<(), Error> {
    write(ctx, scan, before, st, false).await
}

/// [`write_status`] without the pacing: for a change the user must see now
/// (a condition that says why the scan waits).
pub(super) async fn write_status_now(
    ctx: &Context,
    scan: &BucketScan,
    before: &BucketScanStatus,
    st: &BucketScanStatus,
) -> Result<(), Error> {
    write(ctx, scan, before, st, true).await
}

async fn write(
    ctx: &Context,
    scan: &BucketScan,
    before: &BucketScanStatus,
    st: &BucketScanStatus,
    now_anyway: bool,
) -> Result<(), Error> {
    // Every write says which spec it describes and whether the scan is Ready.
    let mut st = st.clone();
    st.observed_generation = scan.metadata.generation;
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    status::set_summary(&mut st, scan.metadata.generation, &now);
    let st = &st;
    ctx.metrics
        .observe_phase(&scan_labels(scan), &format!("{:?}", st.phase));
    if before == st {
        return Ok(());
    }
    let key = key_of(scan);
    let phase_changed = before.phase != st.phase;
    {
        let last = ctx.last_status.lock().expect("lock");
        if !phase_changed && !now_anyway && last.get(&key).is_some_and(|t| t.elapsed() < STATUS_EVERY) {
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

/// The scan as it is now: the reconcile may have written its status since
/// `scan` was read.
pub(super) async fn current(scan: &BucketScan, ctx: &Context) -> Result<BucketScan, Error> {
    let api: Api<BucketScan> = Api::namespaced(ctx.client.clone(), &scan.namespace().unwrap_or_default());
    Ok(api.get_status(&scan.name_any()).await?)
}

pub(super) async fn publish(ctx: &Context, scan: &BucketScan, type_: EventType, reason: &str, note: &str) {
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
