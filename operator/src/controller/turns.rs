//! A scan's turn to start: at most `limits.active_scans_per_namespace`
//! scans of a namespace run at once (the rule is the pure `limits::turn`);
//! the others wait, phase Pending and condition Queued, and start oldest
//! first as places free. Counted from the controller's cache of scans: no
//! API call.

use super::context::{key_of, Context, Error};
use super::report::{publish, write_status, write_status_now};
use crate::crd::{BucketScan, BucketScanStatus, Phase};
use crate::limits::{queued_message, turn, Turn};
use crate::status::{self, QUEUED};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::ResourceExt;
use std::time::Duration;

/// How often a queued scan looks whether a place is free.
const QUEUED_REQUEUE: Duration = Duration::from_secs(10);

/// Decide `scan`'s turn from the controller's cache of scans and take its
/// place when it may start, under one lock: two reconciles at once never
/// both take the last place.
fn claim_turn(scan: &BucketScan, ctx: &Context) -> Turn {
    let cap = ctx.settings.limits.active_scans_per_namespace;
    let all = ctx.scans.get().map(|store| store.state()).unwrap_or_default();
    let scans: Vec<&BucketScan> = all.iter().map(|s| s.as_ref()).collect();
    let mut started = ctx.started.lock().expect("lock");
    let known: Vec<String> = started.iter().cloned().collect();
    let decided = turn(scan, &scans, &known, cap);
    if decided == Turn::Start {
        started.insert(key_of(scan));
    }
    decided
}

/// A retried scan runs again: it takes one of its namespace's places now,
/// or is refused with the Queued message (a retry does not wait in line:
/// the user asks again once a place is free).
pub(super) fn take_place_now(scan: &BucketScan, ctx: &Context) -> Result<(), String> {
    match claim_turn(scan, ctx) {
        Turn::Start => Ok(()),
        Turn::Wait { active, ahead } => Err(queued_message(
            &scan.namespace().unwrap_or_default(),
            active,
            ahead,
            ctx.settings.limits.active_scans_per_namespace,
        )),
    }
}

/// `None`: the scan (not started yet) may start now, and holds its place
/// from here on. `Some`: it waits; its status says why, and when to look
/// again is the action.
pub(super) async fn wait_turn(
    scan: &BucketScan,
    ctx: &Context,
    st: &mut BucketScanStatus,
    before: &BucketScanStatus,
    now: &Time,
) -> Result<Option<Action>, Error> {
    let cap = ctx.settings.limits.active_scans_per_namespace;
    let decided = claim_turn(scan, ctx);
    let generation = scan.metadata.generation;
    let Turn::Wait { active, ahead } = decided else {
        if status::is_true(&st.conditions, QUEUED) {
            let msg = "a place among the namespace's running scans is free: starting";
            status::set_condition(&mut st.conditions, QUEUED, false, "Started", msg, generation, now);
        }
        return Ok(None);
    };
    let message = queued_message(&scan.namespace().unwrap_or_default(), active, ahead, cap);
    let first = !status::is_true(&before.conditions, QUEUED);
    st.phase = Phase::Pending;
    status::set_condition(
        &mut st.conditions,
        QUEUED,
        true,
        "ActiveScanLimit",
        &message,
        generation,
        now,
    );
    if first {
        write_status_now(ctx, scan, before, st).await?;
        publish(ctx, scan, EventType::Normal, "Queued", &message).await;
    } else {
        write_status(ctx, scan, before, st).await?;
    }
    Ok(Some(Action::requeue(QUEUED_REQUEUE)))
}
