//! Retry in place: a finished scan whose spec.retry is above status.retries
//! (`kubectl bucketscan retry NAME` raises it). Its dead shards and the
//! shards holding error records go back to pending in Redis in one step
//! (`Queue::retry`, safe to send twice: Redis records the round), the old
//! merge Job goes, and the scan is Scanning again: the usual pipeline runs
//! workers and the merge, under the same fencing and recovery as a first
//! run. A retry with nothing to scan again, or of a scan that failed for
//! another cause, is refused with an event and recorded as acted on.
//!
//! Redis may lose a retry's step after the status recorded it (rolled back
//! past it: a failover to a replica that lagged, an older snapshot): the
//! scan then shows an earlier round's manifest, which never ends it
//! ([`retry_lost`]: the step runs again).
//!
//! May import: `context`, `report`, `redis_user`, `children`, `admission`,
//! `turns`.

use super::admission::{check_output, start_checks};
use super::children::{stop_jobs, Stop};
use super::context::{lease, Context, Error, MANAGER};
use super::redis_user::refresh;
use super::report::{publish, write_status, write_status_now};
use super::turns::take_place_now;
use crate::crd::{BucketScan, BucketScanStatus, Phase};
use crate::desired;
use crate::status::{self, COMPLETE, FAILED};
use bucketscan_api::retriable::retriable;
use bucketscan_core::fleet::merge::Manifest;
use bucketscan_core::fleet::queue::{Queue, Retried};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use std::time::Duration;

/// Act on a retry request of a finished scan. `Some`: the retry started
/// (the scan is Scanning again); `None`: no request, or refused.
pub(super) async fn retry_requested(
    scan: &BucketScan,
    ctx: &Context,
    st: &mut BucketScanStatus,
    now: &Time,
) -> Result<Option<Action>, Error> {
    let asked = scan.spec.retry.unwrap_or(0);
    if asked <= st.retries.unwrap_or(0) {
        return Ok(None);
    }
    let before = st.clone();
    if let Err(why) = retriable(st) {
        return refuse(scan, ctx, st, &before, asked, &why).await;
    }
    // Before anything that touches Redis or the scan's Jobs.
    if let Err(why) = admissible(scan, ctx).await? {
        return refuse(scan, ctx, st, &before, asked, &why).await;
    }
    // The scan's Redis user went when it finished; the pods need it again.
    refresh(scan, ctx).await?;
    let queue = Queue::on(&ctx.connection, &desired::scan_id(scan), MANAGER, lease(ctx));
    let shards = match queue.retry(u64::from(asked)).await? {
        Retried::Requeued { shards } => format!("{shards} shard(s)"),
        // Redis took this round before the status could say so (the
        // operator stopped between the two): go on with it.
        Retried::Applied { .. } => "the shards".to_string(),
        Retried::NotMerged => {
            let why =
                "Redis holds no merged state of this scan (it lost it: restarted without persistence?); \
                       create a new scan (kubectl bucketscan rerun)";
            return refuse(scan, ctx, st, &before, asked, why).await;
        }
        Retried::NothingToRetry => {
            let why = "Redis shows no dead shard and no shard with error records: nothing to retry";
            return refuse(scan, ctx, st, &before, asked, why).await;
        }
        Retried::PartsGone => {
            let why = "the scan was merged by a release before retries, which deleted its parts: \
                       create a new scan (kubectl bucketscan rerun)";
            return refuse(scan, ctx, st, &before, asked, why).await;
        }
        Retried::TooLarge => {
            let why = "the scan's state in Redis holds more shards or shard fields than any plan makes \
                       (200,000 shards, 256 fields each): create a new scan (kubectl bucketscan rerun)";
            return refuse(scan, ctx, st, &before, asked, why).await;
        }
    };
    // The finished merge Job would say the merge is done.
    stop_jobs(scan, ctx, Stop::All).await?;
    let msg = format!(
        "retry {asked}: {shards} with dead ranges or error records are scanned again, then merged again"
    );
    st.retries = Some(asked);
    // A retry's deadline (activeDeadlineSeconds) counts from the retry.
    st.start_time = Some(now.clone());
    st.completion_time = None;
    st.missing_ranges = None;
    st.missing.clear();
    scanning_again(scan, st, &msg, now);
    write_status(ctx, scan, &before, st).await?;
    publish(ctx, scan, EventType::Normal, "Retrying", &msg).await;
    Ok(Some(Action::requeue(Duration::from_secs(1))))
}

/// Redis holds a manifest of an earlier round than `status.retries`: it was
/// rolled back past the retry's step (and maybe past that round's merge,
/// whose manifest.json the next merge then adopts). The step runs again, so
/// the scan ends on a result of the round its status says; if Redis cannot
/// take it again, or lost the same round before (`status.retryRestored`),
/// the scan fails saying why.
pub(super) async fn retry_lost(
    scan: &BucketScan,
    ctx: &Context,
    mut st: BucketScanStatus,
    before: &BucketScanStatus,
    seen: &Manifest,
    now: &Time,
) -> Result<Action, Error> {
    let round = st.retries.unwrap_or(0);
    let queue = Queue::on(&ctx.connection, &desired::scan_id(scan), MANAGER, lease(ctx));
    let lost = format!(
        "Redis lost retry {round} (it holds the merged result of round {}: rolled back past the retry?)",
        seen.retries
    );
    // Once per round: the scan's own Redis user can write `meta.retries`
    // and the manifest, and so make every reconcile look like a loss.
    if st.retry_restored == Some(round) {
        let msg = format!(
            "{lost}, a second time: the operator took that round's step again once already, and \
             does not again (the scan's own Redis user can write what makes a round look lost); \
             create a new scan (kubectl bucketscan rerun)"
        );
        return super::finish::fail(scan, ctx, st, "RetryLost", &msg, now).await;
    }
    let why = match queue.retry(u64::from(round)).await? {
        Retried::Requeued { .. } | Retried::Applied { .. } => None,
        Retried::NotMerged => Some("Redis holds no merged state of this round"),
        Retried::NothingToRetry => Some("Redis shows nothing to retry"),
        Retried::PartsGone => Some("the scan's parts are gone"),
        Retried::TooLarge => Some("the scan's state in Redis is larger than one retry step walks"),
    };
    if let Some(why) = why {
        let msg =
            format!("{lost}, and cannot take it again ({why}): create a new scan (kubectl bucketscan rerun)");
        return super::finish::fail(scan, ctx, st, "RetryLost", &msg, now).await;
    }
    // The merge Job of the lost round would say the merge is done.
    stop_jobs(scan, ctx, Stop::All).await?;
    let msg = format!("{lost}; its shards are scanned again, then merged again");
    scanning_again(scan, &mut st, &msg, now);
    st.retry_restored = Some(round);
    // Now, not paced: the record that this round was restored must be
    // there before the next reconcile looks.
    write_status_now(ctx, scan, before, &st).await?;
    publish(ctx, scan, EventType::Warning, "RetryRestored", &msg).await;
    Ok(Action::requeue(Duration::from_secs(1)))
}

/// The scan Scanning again for a retry: neither Failed nor Complete.
fn scanning_again(scan: &BucketScan, st: &mut BucketScanStatus, msg: &str, now: &Time) {
    st.phase = Phase::Scanning;
    let generation = scan.metadata.generation;
    for kind in [FAILED, COMPLETE] {
        status::set_condition(&mut st.conditions, kind, false, "Retrying", msg, generation, now);
    }
}

/// A retry starts the scan again, so it passes what a start passes, judged
/// now: the operator's settings (namespaces, images, endpoints, limits) may
/// have changed since the scan ran, another scan may write where it does
/// (`OutputConflict`), a running scan may read its result as a baseline,
/// and it takes a place among its namespace's running scans.
async fn admissible(scan: &BucketScan, ctx: &Context) -> Result<Result<(), String>, Error> {
    if let Err((_, why)) = start_checks(scan, ctx, false) {
        return Ok(Err(why));
    }
    if let Err(why) = check_output(scan, ctx).await? {
        return Ok(Err(why));
    }
    let all = ctx.scans.get().map(|store| store.state()).unwrap_or_default();
    let scans: Vec<&BucketScan> = all.iter().map(|s| s.as_ref()).collect();
    if let Err(why) = crate::validate::read_as_baseline(scan, &scans) {
        return Ok(Err(why));
    }
    Ok(take_place_now(scan, ctx))
}

async fn refuse(
    scan: &BucketScan,
    ctx: &Context,
    st: &mut BucketScanStatus,
    before: &BucketScanStatus,
    asked: u32,
    why: &str,
) -> Result<Option<Action>, Error> {
    st.retries = Some(asked);
    // Now, not paced: the finished scan is not looked at again until it
    // changes, and the user waits for this answer.
    write_status_now(ctx, scan, before, st).await?;
    let msg = format!("retry {asked} refused: {why}");
    publish(ctx, scan, EventType::Warning, "RetryRefused", &msg).await;
    Ok(None)
}
