//! Waiting out what may pass. A reconcile that fails for a cause that can
//! come right by itself (a Secret created a moment after the scan, as GitOps
//! tools do; the store or Redis unreachable for a while) does not fail the
//! scan: the scan shows condition `Blocked` with the reason and the error,
//! gets a Warning event when it starts to wait, and is tried again after
//! 5 s, doubling up to 5 minutes. The first attempt that gets through clears
//! the condition. Only causes the user must fix fail a scan.
//!
//! Also here, as the one place a reconcile's outcome becomes status: a name
//! another workload holds (`conflict`), and any other error, which shows as
//! `Blocked` with reason `ReconcileError` while the error policy retries.

use super::cleanup::SKIP_CLEANUP;
use super::conflict::{self, CONFLICT_REQUEUE};
use super::context::{key_of, Context, Error, ERROR_REQUEUE};
use super::report::{current, publish, write_status_now};
use crate::crd::BucketScan;
use crate::status::{self, human_duration, BLOCKED};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::ResourceExt;

/// The outcome of one reconcile of `scan`, with transient failures turned
/// into a wait.
pub(super) async fn wait_out(
    scan: &BucketScan,
    ctx: &Context,
    result: Result<Action, Error>,
) -> Result<Action, Error> {
    let key = key_of(scan);
    match result {
        Ok(action) => {
            let waited = ctx.blocked.lock().expect("lock").remove(&key).is_some();
            let shown = scan
                .status
                .as_ref()
                .is_some_and(|st| status::is_true(&st.conditions, BLOCKED));
            if (waited || shown) && scan.metadata.deletion_timestamp.is_none() {
                unblock(scan, ctx).await?;
            }
            if conflict::shown(scan) && scan.metadata.deletion_timestamp.is_none() {
                conflict::resolved(scan, ctx).await?;
            }
            Ok(action)
        }
        // A name another workload holds: its object was left alone; the
        // scan says so and looks again slowly.
        Err(e @ Error::NotOwned { .. }) => {
            conflict::conflict(scan, ctx, &e).await?;
            if scan.metadata.deletion_timestamp.is_some() {
                // Deleting: an Ok would let the finalizer go without the
                // cleanup. The error policy tries again.
                return Err(e);
            }
            Ok(Action::requeue(CONFLICT_REQUEUE))
        }
        Err(e) => match e.blocked_reason() {
            Some(reason) => {
                let attempt = {
                    let mut blocked = ctx.blocked.lock().expect("lock");
                    let n = blocked.entry(key).or_insert(0);
                    *n = n.saturating_add(1);
                    *n
                };
                let wait = status::retry_wait(attempt);
                let mut message = format!("{e}; retrying in {}", human_duration(wait));
                if scan.metadata.deletion_timestamp.is_some() && reason == "RedisUnavailable" {
                    message.push_str(&format!(
                        "; deletion waits for Redis to delete the scan's keys: if Redis is gone for good, \
                         annotate the BucketScan {SKIP_CLEANUP}=true to delete it without"
                    ));
                }
                block(scan, ctx, reason, &message, true).await?;
                if scan.metadata.deletion_timestamp.is_some() {
                    // Deleting: an Ok would let the finalizer go without the
                    // cleanup. The error policy tries again.
                    return Err(e);
                }
                Ok(Action::requeue(wait))
            }
            // Neither passing nor a conflict (the Kubernetes API refused a
            // write, a setting is wrong): the error policy retries and
            // publishes the event; the condition shows it too, so what holds
            // the scan up is not only in the operator's log. Best effort:
            // the API may refuse this write as well.
            None => {
                let message = format!("{e}; retrying in {} s", ERROR_REQUEUE.as_secs());
                if let Err(w) = block(scan, ctx, "ReconcileError", &message, false).await {
                    tracing::debug!(scan = %scan.name_any(), error = %w, "could not show the error in the status");
                }
                Err(e)
            }
        },
    }
}

/// Condition Blocked with `reason`; a Warning event with `event` when the
/// scan was not blocked for that reason already.
async fn block(
    scan: &BucketScan,
    ctx: &Context,
    reason: &str,
    message: &str,
    event: bool,
) -> Result<(), Error> {
    let scan = current(scan, ctx).await?;
    let before = scan.status.clone().unwrap_or_default();
    let mut st = before.clone();
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    let newly = !before
        .conditions
        .iter()
        .any(|c| c.type_ == BLOCKED && c.status == "True" && c.reason == reason);
    status::set_condition(
        &mut st.conditions,
        BLOCKED,
        true,
        reason,
        message,
        scan.metadata.generation,
        &now,
    );
    write_status_now(ctx, &scan, &before, &st).await?;
    if newly && event {
        publish(ctx, &scan, EventType::Warning, reason, message).await;
    }
    Ok(())
}

async fn unblock(scan: &BucketScan, ctx: &Context) -> Result<(), Error> {
    let scan = current(scan, ctx).await?;
    let before = scan.status.clone().unwrap_or_default();
    if !status::is_true(&before.conditions, BLOCKED) {
        return Ok(());
    }
    let mut st = before.clone();
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    let msg = "what blocked the scan has passed";
    status::set_condition(
        &mut st.conditions,
        BLOCKED,
        false,
        "Unblocked",
        msg,
        scan.metadata.generation,
        &now,
    );
    write_status_now(ctx, &scan, &before, &st).await?;
    publish(ctx, &scan, EventType::Normal, "Unblocked", msg).await;
    Ok(())
}
