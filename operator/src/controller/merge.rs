//! The merge phase: once every shard is done or dead, a Job of
//! `bucketscan-worker merge` joins the parts; its manifest in Redis ends the
//! scan as Complete, or, with dead shards, as Failed (ShardsFailed) or
//! Complete (Partial) as spec.onDeadShards says, naming the missing ranges.
//! Only a manifest of the round the status says (`status.retries`) ends it.
//! The Job may start a few seconds before the last shard ends
//! ([`merge_ahead`]): its pod waits for the shards.

use super::children::ensure_redis_secret;
use super::context::{elapsed, key_of, Context, Error, ACTIVE_REQUEUE, QUICK_REQUEUE};
use super::finish::{fail, finished};
use super::health::job_pod_problem;
use super::owned;
use super::planning::transient_exit;
use super::report::{publish, write_status};
use crate::crd::{BucketScan, BucketScanStatus, Phase};
use crate::desired;
use crate::pods::job_outcome;
use crate::status::{self, COMPLETE};
use bucketscan_api::retry::{cut, MissingRange, OnDeadShards, MISSING_LISTED, PARTIAL, SHARDS_FAILED};
use bucketscan_core::fleet::merge::Manifest;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, DeleteParams};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::ResourceExt;

/// How soon a merging scan is looked at again, by its merge Job's age
/// (`None`: not known). The manifest the merge stores in Redis ends the
/// scan, and nothing wakes the operator when it does: the Job's own
/// completion comes seconds after its pod ended (the e2e bench's merge
/// ended at 22:10:34, the 5 s look saw it at :36, the Job said Complete at
/// :37). A merge of 10^6 objects takes a few seconds, so a young Job is
/// looked at every second; one that runs longer is big, and is looked at
/// every [`ACTIVE_REQUEUE`] (a look costs three API requests).
fn merging_requeue(job_age: Option<std::time::Duration>) -> std::time::Duration {
    match job_age {
        Some(age) if age <= YOUNG_MERGE => QUICK_REQUEUE,
        _ => ACTIVE_REQUEUE,
    }
}

/// How long a merge Job is looked at every second.
const YOUNG_MERGE: std::time::Duration = std::time::Duration::from_secs(30);

/// The scan after its last shard: start the merge, wait for it, finish.
pub(super) async fn merging(
    scan: &BucketScan,
    ctx: &Context,
    mut st: BucketScanStatus,
    before: &BucketScanStatus,
    manifest: Option<Manifest>,
    now: &Time,
) -> Result<Action, Error> {
    let generation = scan.metadata.generation;
    match manifest {
        None => {
            st.phase = Phase::Merging;
            let job = ensure_merge_job(scan, ctx, "all shards finished; merge Job started").await?;
            if let Some(again) = merge_again(scan, ctx, job.as_ref()).await? {
                status::set_condition(
                    &mut st.conditions,
                    COMPLETE,
                    false,
                    "Merging",
                    &again,
                    generation,
                    now,
                );
                write_status(ctx, scan, before, &st).await?;
                return Ok(Action::requeue(ACTIVE_REQUEUE));
            }
            if let Some(Err(why)) = job.as_ref().and_then(job_outcome) {
                return fail(
                    scan,
                    ctx,
                    st,
                    "MergeFailed",
                    &format!("merge Job failed: {why}"),
                    now,
                )
                .await;
            }
            let problem = match &job {
                Some(job) => job_pod_problem(scan, ctx, job, "merge Job").await?,
                None => None,
            };
            status::set_condition(
                &mut st.conditions,
                COMPLETE,
                false,
                "Merging",
                problem.as_deref().unwrap_or("joining the parts"),
                generation,
                now,
            );
            write_status(ctx, scan, before, &st).await?;
            let age = job
                .as_ref()
                .and_then(|j| j.creation_timestamp())
                .map(|t| elapsed(now, &t));
            Ok(Action::requeue(merging_requeue(age)))
        }
        // Redis holds the manifest of an earlier round than the status's:
        // it lost the retry's step (rolled back past it). The scan is not
        // ended on an earlier round's result: the step runs again.
        Some(m) if m.retries < u64::from(st.retries.unwrap_or(0)) => {
            super::retry::retry_lost(scan, ctx, st, before, &m, now).await
        }
        Some(m) if m.shards_dead > 0 && scan.spec.on_dead_shards == OnDeadShards::Fail => {
            let msg = format!(
                "{}; kubectl bucketscan retry {} scans them again",
                m.missing_message(),
                scan.name_any()
            );
            st.output = Some(m.result.clone());
            st.manifest = Some(manifest_location(&m));
            note_missing(&mut st, &m);
            fail(scan, ctx, st, SHARDS_FAILED, &msg, now).await
        }
        Some(m) => {
            st.phase = Phase::Complete;
            st.output = Some(m.result.clone());
            st.manifest = Some(manifest_location(&m));
            st.completion_time = Some(now.clone());
            st.eta = None;
            st.numbers.eta_seconds = None;
            note_missing(&mut st, &m);
            let mut done = status::completed(&m.counts, &m.result);
            if m.shards_dead > 0 {
                // onDeadShards: Partial.
                done.reason = PARTIAL;
                done.message = format!(
                    "partial result: {}; {}; kubectl bucketscan retry {} scans them again",
                    m.missing_message(),
                    done.message,
                    scan.name_any()
                );
            }
            // The manifest's count is exact; the live one may count a
            // record twice (a part scanned again after a crash).
            st.objects.get_or_insert_with(Default::default).errors = done.unreadable;
            if let Some(inc) = &m.incremental {
                status::incremental(&mut st, inc, generation, now);
            }
            status::set_condition(
                &mut st.conditions,
                COMPLETE,
                true,
                done.reason,
                &done.message,
                generation,
                now,
            );
            write_status(ctx, scan, before, &st).await?;
            let (kind, reason) = match (m.shards_dead, done.unreadable) {
                (0, 0) => (EventType::Normal, "Complete"),
                (0, _) => (EventType::Warning, "CompleteWithUnreadableObjects"),
                _ => (EventType::Warning, "CompletePartial"),
            };
            publish(ctx, scan, kind, reason, &done.message).await;
            ctx.merge_retries.lock().expect("lock").remove(&key_of(scan));
            finished(scan, ctx, true).await
        }
    }
}

/// In a scan's last seconds, with no shard left to take: the merge Job is
/// started before the last shard ends, so that its pod is up when it does
/// (`merge --wait-for-shards` waits for it). Its pod took 1-2 s to start
/// after the last shard in the e2e bench (issue 29).
pub(super) async fn merge_ahead(
    scan: &BucketScan,
    ctx: &Context,
    shards: &crate::crd::ShardCounts,
    time_left: Option<std::time::Duration>,
) -> Result<(), Error> {
    if merges_soon(shards, time_left) {
        let note = "the last shards are running; merge Job started, it merges once they end";
        ensure_merge_job(scan, ctx, note).await?;
    }
    Ok(())
}

/// Something is leased and the scan is near its end (within
/// [`MERGE_AHEAD`]).
fn merges_soon(shards: &crate::crd::ShardCounts, time_left: Option<std::time::Duration>) -> bool {
    shards.leased > 0 && near_end(shards, time_left, MERGE_AHEAD)
}

/// Is the scan within `bound` of its estimated end? The estimate is from the
/// share of shards finished, trusted once half of them are (the first to
/// finish may be the smallest). It does not wait until no shard is pending:
/// the last wave's shards are pending until its last second or two (the
/// e2e bench's 125 shards on 6 streams), and a look every 5 s missed that
/// window, so the merge Job started only after the last shard (issue 29).
pub(super) fn near_end(
    shards: &crate::crd::ShardCounts,
    time_left: Option<std::time::Duration>,
    bound: std::time::Duration,
) -> bool {
    let finished = shards.done + shards.dead;
    finished.saturating_mul(2) >= shards.total && time_left.is_some_and(|left| left <= bound)
}

/// How long before a scan's estimated end its merge Job is started: the
/// pod's start (1-2 s here) with room for an estimate that is short.
const MERGE_AHEAD: std::time::Duration = std::time::Duration::from_secs(10);

/// The merge Job, started if it is not there yet (`None` the moment it is
/// started: the API server has not run it yet); `note` is the event's.
async fn ensure_merge_job(scan: &BucketScan, ctx: &Context, note: &str) -> Result<Option<Job>, Error> {
    let jobs: Api<Job> = Api::namespaced(ctx.client.clone(), &scan.namespace().unwrap_or_default());
    let name = desired::merge_job_name(scan);
    // The Job's pod reads Redis as the scan's user, which a restarted Redis
    // forgot: set on every look.
    let with_ca = ensure_redis_secret(scan, ctx).await?;
    // Only the scan's own Job: another workload's Job of that name is
    // neither judged as the merge's outcome nor replaced.
    let mine = owned::get(&jobs, scan, &name).await?;
    if let Some(job) = mine.object {
        return Ok(Some(job));
    }
    let job = desired::merge_job(scan, &ctx.settings, with_ca);
    mine.apply(&jobs, &job).await?;
    publish(ctx, scan, EventType::Normal, "Merging", note).await;
    Ok(None)
}

/// A merge Job that ended without a manifest in Redis, for a cause that
/// passes: it is deleted (the next look starts a new one) and the message
/// says why. A Job that succeeded while Redis lost its manifest since (a
/// restart, a failover): the new merge adopts the `manifest.json` it wrote.
/// A Job whose pod exited 75 (the scan not finished after a rollback, the
/// store or Redis away): merged again once the backoff since its failure is
/// over (5 s, doubling up to 5 minutes per retry, as for plan Jobs).
/// `None`: neither; the Job runs, or failed for good.
async fn merge_again(scan: &BucketScan, ctx: &Context, job: Option<&Job>) -> Result<Option<String>, Error> {
    let Some(job) = job else { return Ok(None) };
    let name = job.name_any();
    let retries = ctx
        .merge_retries
        .lock()
        .expect("lock")
        .get(&key_of(scan))
        .copied()
        .unwrap_or(0);
    let why = match job_outcome(job) {
        None => return Ok(None),
        Some(Ok(())) => format!("merge Job {name} finished but Redis holds no manifest (it lost it since)"),
        Some(Err(_)) => match transient_exit(scan, ctx, &name).await? {
            None => return Ok(None),
            Some(cause) => {
                let now = k8s_openapi::jiff::Timestamp::now().as_second();
                let left = crate::pods::seconds_until_retry(job, status::retry_wait(retries + 1), now);
                let cause = format!("merge Job {name} failed for a cause that may pass ({cause})");
                if left > 0 {
                    return Ok(Some(format!("{cause}; merging again in {left} s")));
                }
                cause
            }
        },
    };
    let jobs: Api<Job> = Api::namespaced(ctx.client.clone(), &scan.namespace().unwrap_or_default());
    owned::delete_owned(&jobs, scan, job, &DeleteParams::background()).await?;
    ctx.merge_retries
        .lock()
        .expect("lock")
        .insert(key_of(scan), retries + 1);
    let message = format!("{why}; merging again (retry {})", retries + 1);
    publish(ctx, scan, EventType::Warning, "MergeRetrying", &message).await;
    Ok(Some(message))
}

/// The missing ranges into the status: their count, and the first few.
fn note_missing(st: &mut BucketScanStatus, m: &Manifest) {
    st.missing_ranges = (m.shards_dead > 0).then_some(m.shards_dead);
    st.missing = m
        .dead
        .iter()
        .take(MISSING_LISTED)
        .map(|d| MissingRange {
            range: cut(&d.range.to_string(), 4096),
            error: cut(d.last_error.as_deref().unwrap_or("no error recorded"), 1024),
        })
        .collect();
}

/// Where the merge wrote the manifest (beside the result).
fn manifest_location(m: &Manifest) -> String {
    format!("s3://{}/{}", m.spec.output_bucket, m.spec.manifest_key())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn the_merge_starts_ahead_only_when_the_end_is_near() {
        // 100 shards, as many finished as not pending or leased.
        let shards = |pending, leased| crate::crd::ShardCounts {
            total: 100,
            pending,
            leased,
            done: 100 - pending - leased,
            dead: 0,
        };
        let secs = |s| Some(Duration::from_secs(s));
        assert!(merges_soon(&shards(0, 2), secs(10)));
        assert!(merges_soon(&shards(0, 1), secs(0)));
        // The last wave's shards still pending, the end near.
        assert!(merges_soon(&shards(10, 6), secs(4)));
        // Too far from the end, no estimate, or too few shards finished to
        // trust the estimate.
        assert!(!merges_soon(&shards(0, 2), secs(11)));
        assert!(!merges_soon(&shards(0, 2), None));
        assert!(!merges_soon(&shards(45, 6), secs(1)));
        // Nothing leased: the scan merges now, by `merging`.
        assert!(!merges_soon(&shards(0, 0), secs(1)));
    }

    #[test]
    fn a_young_merge_is_looked_at_every_second_an_old_one_every_five() {
        assert_eq!(merging_requeue(Some(Duration::ZERO)), Duration::from_secs(1));
        assert_eq!(
            merging_requeue(Some(Duration::from_secs(30))),
            Duration::from_secs(1)
        );
        assert_eq!(merging_requeue(Some(Duration::from_secs(31))), ACTIVE_REQUEUE);
        assert_eq!(merging_requeue(None), ACTIVE_REQUEUE);
    }
}
