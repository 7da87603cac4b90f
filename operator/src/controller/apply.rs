//! The reconcile of a live scan, as a pipeline: validate, observe Redis,
//! plan when Redis has no plan, reap expired leases, size the workers, report
//! progress; once every shard is done or dead, hand over to the merge.

use super::admission::{check_output, start_checks, ENDPOINT_NOT_ALLOWED};
use super::baseline::Resolved;
use super::children::{ensure_workers, stop_jobs, Stop};
use super::context::{
    elapsed, key_of, lease, max_failures, scan_labels, Context, Error, ACTIVE_REQUEUE, MANAGER, QUICK_REQUEUE,
};
use super::finish::{fail, finished};
use super::health::observe_workers;
use super::merge::merging;
use super::observe::{observe, Observed};
use super::planning::{job_gate, plan, replan, Gate};
use super::redis_user::refresh;
use super::report::{publish, write_status};
use super::turns::wait_turn;
use crate::crd::{BucketScan, BucketScanStatus, Phase};
use crate::status::{self, BLOCKED, COMPLETE, PLANNED, STORE_SATURATED, SUSPENDED};
use crate::{autoscale, desired};
use bucketscan_core::fleet::plan::PlanError;
use bucketscan_core::fleet::queue::Queue;
use bucketscan_core::fleet::recovery::RecoveryError;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use std::time::Duration;

pub(super) async fn apply(scan: &BucketScan, ctx: &Context) -> Result<Action, Error> {
    let mut st = scan.status.clone().unwrap_or_default();
    let mut before = st.clone();
    let generation = scan.metadata.generation;
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    if matches!(st.phase, Phase::Complete | Phase::Failed) {
        if let Some(retrying) = super::retry::retry_requested(scan, ctx, &mut st, &now).await? {
            return Ok(retrying);
        }
        return finished(scan, ctx, st.start_time.is_some()).await;
    }
    // Caps are judged before the start; a running scan edited past a cap
    // is held at the cap instead (`capped_workers`, `plan_options`).
    if let Err((reason, message)) = start_checks(scan, ctx, st.start_time.is_some()) {
        return fail(scan, ctx, st, reason, &message, &now).await;
    }
    let deadline_left =
        status::deadline_left(st.start_time.as_ref(), scan.spec.active_deadline_seconds, &now);
    if deadline_left.is_some_and(|left| left <= 0) {
        stop_jobs(scan, ctx, Stop::All).await?;
        let message = format!(
            "the scan ran longer than activeDeadlineSeconds ({} s); its workers and Jobs were stopped",
            scan.spec.active_deadline_seconds.unwrap_or_default()
        );
        return fail(scan, ctx, st, "DeadlineExceeded", &message, &now).await;
    }
    // Before anything that runs pods: a Redis that restarted forgot the
    // scan's user and the queue's functions, and the pods wait for them.
    refresh(scan, ctx).await?;
    let queue = Queue::on(&ctx.connection, &desired::scan_id(scan), MANAGER, lease(ctx));
    let mut seen = observe(&queue).await?;
    // Before planning and before a suspended scan sleeps: the scan's Redis
    // user exists from its first workers on (made beside the plan), and
    // one kept for a scan that is Blocked, waits for its plan Job or is
    // suspended must not hold more of Redis than a running one may. What
    // put it over goes with it: its author may never delete the scan.
    if let Some(message) =
        super::budget::over_budget(ctx, &queue, &key_of(scan), &desired::scan_id(scan)).await?
    {
        stop_jobs(scan, ctx, Stop::All).await?;
        queue.delete_scan().await?;
        return fail(scan, ctx, st, "OverLimit", &message, &now).await;
    }
    if scan.spec.suspend {
        return suspended(scan, ctx, st, &before, &seen, deadline_left, &now).await;
    }
    if status::is_true(&st.conditions, SUSPENDED) {
        let msg = "resumed: workers start again where the scan stopped";
        status::set_condition(
            &mut st.conditions,
            SUSPENDED,
            false,
            "Resumed",
            msg,
            generation,
            &now,
        );
        publish(ctx, scan, EventType::Normal, "Resumed", msg).await;
    }
    if st.start_time.is_none() {
        if let Some(later) = wait_turn(scan, ctx, &mut st, &before, &now).await? {
            return Ok(later);
        }
    }

    if !seen.planned && !status::is_true(&st.conditions, PLANNED) {
        match Box::pin(super::baseline::resolve(scan, ctx, &mut st, &before)).await? {
            Resolved::Ready => {}
            // Planning reads it from the status: at the next look.
            Resolved::Written => return Ok(Action::requeue(Duration::from_secs(1))),
            Resolved::Refused(message) => {
                return fail(scan, ctx, st, "BaselineRefused", &message, &now).await
            }
        }
    }
    if desired::plans_by_job(scan) {
        let planned = status::is_true(&st.conditions, PLANNED);
        if !planned && !seen.planned {
            if let Err(message) = check_output(scan, ctx).await? {
                return fail(scan, ctx, st, "OutputConflict", &message, &now).await;
            }
        }
        if !seen.planned && !desired::uses_pod_identity(scan) {
            // Blocked until its Secrets come, as when the operator plans
            // it, rather than a plan Job whose pod cannot start.
            super::source::secrets_ready(scan, ctx).await?;
        }
        match job_gate(scan, ctx, seen.planned, planned).await? {
            Gate::Proceed(None) => {}
            Gate::Proceed(Some(how)) => {
                let msg = format!("{} shards, {how}", seen.shards.total);
                status::set_condition(
                    &mut st.conditions,
                    PLANNED,
                    true,
                    "Planned",
                    &msg,
                    generation,
                    &now,
                );
                publish(ctx, scan, EventType::Normal, "Planned", &msg).await;
            }
            Gate::Wait(msg) => {
                st.phase = Phase::Planning;
                st.start_time.get_or_insert(now.clone());
                status::set_condition(
                    &mut st.conditions,
                    COMPLETE,
                    false,
                    "Planning",
                    &msg,
                    generation,
                    &now,
                );
                write_status(ctx, scan, &before, &st).await?;
                return Ok(Action::requeue(ACTIVE_REQUEUE));
            }
            Gate::Failed(msg) => return fail(scan, ctx, st, "PlanFailed", &msg, &now).await,
            Gate::Refused(msg) => return fail(scan, ctx, st, "PlanRefused", &msg, &now).await,
        }
    } else if !seen.planned {
        // Planned before, yet Redis has nothing: it lost the scan (restarted
        // without persistence). Finished shards come back from S3.
        let replanning = status::is_true(&st.conditions, PLANNED);
        if !replanning {
            if let Err(message) = check_output(scan, ctx).await? {
                return fail(scan, ctx, st, "OutputConflict", &message, &now).await;
            }
        }
        st.phase = Phase::Planning;
        st.start_time.get_or_insert(now.clone());
        write_status(ctx, scan, &before, &st).await?;
        before = st.clone();
        // The workers' pods start while the plan is made (they wait for
        // it); not again while the scan is blocked (a missing Secret, the
        // store down): its pods would only wait, or not start at all. Not
        // for a replan: the Deployment is there, at the autoscaler's size.
        // Not for a plan Job (`job_gate`): it waits out transient failures
        // and pods that cannot start, minutes at a time.
        let prestarted = !replanning && !status::is_true(&st.conditions, BLOCKED);
        if prestarted {
            ensure_workers(scan, ctx, initial_workers(scan, ctx)).await?;
        } else if !replanning {
            remove_blocked_workers(scan, ctx).await;
        }
        let planned = if replanning {
            replan(scan, ctx, &queue).await
        } else {
            plan(scan, ctx, &queue).await.map(|p| {
                st.numbers.objects_estimate = Some(p.estimated_objects);
                format!("{} shards, about {} objects", p.shards, p.estimated_objects)
            })
        };
        match planned {
            Ok(msg) => {
                let reason = if replanning { "Replanned" } else { "Planned" };
                status::set_condition(&mut st.conditions, PLANNED, true, reason, &msg, generation, &now);
                publish(ctx, scan, EventType::Normal, reason, &msg).await;
            }
            // A name that resolved to an address the allowlist refuses:
            // nothing was sent.
            Err(e) if e.endpoint_refusal().is_some() => {
                let why = e.endpoint_refusal().unwrap_or_default();
                let message = crate::validate::endpoint_refused(scan, why);
                return fail(scan, ctx, st, ENDPOINT_NOT_ALLOWED, &message, &now).await;
            }
            // The cause may pass (a Secret not created yet, the store down):
            // the scan waits, blocked (`blocked.rs`).
            Err(e) if e.blocked_reason().is_some() => {
                if prestarted {
                    remove_blocked_workers(scan, ctx).await;
                }
                return Err(e);
            }
            Err(
                e @ (Error::Plan(PlanError::Source { .. })
                | Error::Plan(PlanError::Output { .. })
                | Error::Config(_)),
            ) => {
                return fail(scan, ctx, st, "InvalidSource", &e.to_string(), &now).await;
            }
            // Refused by planning for good: a baseline that cannot be used,
            // a result that cannot fit, a dataset folder that is not ours;
            // done records that cannot be this scan's (planning again
            // would read them again, for ever).
            Err(Error::Plan(PlanError::Settings(message))) => {
                return fail(scan, ctx, st, "PlanRefused", &message, &now).await;
            }
            Err(Error::Recovery(e @ RecoveryError::TooManyDone)) => {
                return fail(scan, ctx, st, "PlanRefused", &e.to_string(), &now).await;
            }
            Err(Error::Recovery(RecoveryError::Corrupt { key, source })) => {
                // Where, never what: the object is the tenant's to write.
                let message = format!(
                    "done record {key} is not one a worker wrote (line {}, column {}): delete the scan's \
                     parts folder to scan it anew",
                    source.line(),
                    source.column()
                );
                return fail(scan, ctx, st, "PlanRefused", &message, &now).await;
            }
            Err(e) => return Err(e),
        }
        seen = observe(&queue).await?;
    }

    queue.reap(max_failures()).await?;
    let work_left = seen.shards.pending + seen.shards.leased;
    let replicas = crate::limits::capped_workers(
        desired::desired_replicas(&scan.spec.workers, Some(work_left)),
        &ctx.settings.limits,
    );
    let replicas = autoscaled(scan, &mut st, &seen, replicas, &now);
    let deployment = ensure_workers(scan, ctx, replicas).await?;
    report_progress(scan, ctx, &mut st, &seen, replicas, &now);

    if work_left > 0 {
        observe_workers(scan, ctx, &mut st, &before, (replicas, deployment.as_ref()), &now).await?;
        st.phase = Phase::Scanning;
        let msg = format!(
            "{} of {} shards finished",
            seen.shards.done + seen.shards.dead,
            seen.shards.total
        );
        status::set_condition(
            &mut st.conditions,
            COMPLETE,
            false,
            "Scanning",
            &msg,
            generation,
            &now,
        );
        write_status(ctx, scan, &before, &st).await?;
        let left = st.numbers.eta_seconds.map(Duration::from_secs);
        super::merge::merge_ahead(scan, ctx, &seen.shards, left).await?;
        return Ok(Action::requeue(scanning_requeue(&seen.shards, left)));
    }

    // Every shard is done or dead: merge.
    merging(scan, ctx, st, &before, seen.manifest, &now).await
}

/// The workers a scan starts with, made while the operator plans it: as many as
/// once planned, before its shards are counted (fixed replicas, or the
/// autoscaler's minimum), within the operator's caps. Their pods take a
/// second or more to start (e2e bench: the first HEAD came 1.4 s after the
/// plan when they were made after it, issue 29); they wait for the plan.
fn initial_workers(scan: &BucketScan, ctx: &Context) -> i32 {
    crate::limits::capped_workers(
        desired::desired_replicas(&scan.spec.workers, None),
        &ctx.settings.limits,
    )
}

/// The workers made beside a plan that was blocked go: the blocked cause
/// is what the scan shows, so a failed delete is only logged, and tried
/// again at the next look.
async fn remove_blocked_workers(scan: &BucketScan, ctx: &Context) {
    if let Err(e) = ensure_workers(scan, ctx, 0).await {
        tracing::warn!(error = %e, "cannot remove the workers of a blocked scan");
    }
}

/// How soon a scanning scan is looked at again: every [`ACTIVE_REQUEUE`]
/// (progress, reaping and scaling need no more) until the scan is within
/// [`TAIL`] of its estimated end (`merge::near_end`). Then its last shard
/// may end at any moment, and nothing else wakes the scan when it does
/// (workers write to Redis, not to the API): the 5 s look cost the e2e bench
/// 2.5 s on average between its last shard and the merge Job (issue 29). A
/// look costs three API requests; the time-left bound keeps the 1 s looks to
/// the last seconds of a scan, not the whole life of one with fewer shards
/// than workers, so a namespace of such scans does not spend the operator's
/// API budget.
fn scanning_requeue(shards: &crate::crd::ShardCounts, time_left: Option<Duration>) -> Duration {
    match super::merge::near_end(shards, time_left, TAIL) {
        true => QUICK_REQUEUE,
        false => ACTIVE_REQUEUE,
    }
}

/// How long before its estimated end a scan is in its tail.
const TAIL: Duration = Duration::from_secs(15);

/// A suspended scan: no workers, nothing new started (no planning, no
/// merge); the status still shows what Redis holds.
async fn suspended(
    scan: &BucketScan,
    ctx: &Context,
    mut st: BucketScanStatus,
    before: &BucketScanStatus,
    seen: &Observed,
    deadline_left: Option<i64>,
    now: &Time,
) -> Result<Action, Error> {
    ensure_workers(scan, ctx, 0).await?;
    stop_jobs(scan, ctx, Stop::Planning).await?;
    if st.phase == Phase::Scanning {
        // A merge Job started ahead of the last shard: it would wait out
        // the suspension, or merge while the scan is suspended.
        stop_jobs(scan, ctx, Stop::Merge).await?;
    }
    if seen.planned {
        report_progress(scan, ctx, &mut st, seen, 0, now);
    }
    st.workers = Some(0);
    st.eta = None;
    st.numbers.eta_seconds = None;
    st.numbers.rate_per_second = Some(0);
    let msg = "spec.suspend is true: no workers or planning Job run; finished work is kept";
    let generation = scan.metadata.generation;
    status::set_condition(
        &mut st.conditions,
        SUSPENDED,
        true,
        "Suspended",
        msg,
        generation,
        now,
    );
    if !status::is_true(&before.conditions, SUSPENDED) {
        publish(ctx, scan, EventType::Normal, "Suspended", msg).await;
    }
    write_status(ctx, scan, before, &st).await?;
    // Pods slow to stop may still finish shards: keep the counts current
    // (one look at Redis), and fail on time when a deadline comes.
    let next = deadline_left.map_or(SUSPENDED_REQUEUE, |left| {
        SUSPENDED_REQUEUE.min(Duration::from_secs(left.max(1) as u64))
    });
    Ok(Action::requeue(next))
}

/// How often a suspended scan is looked at.
const SUSPENDED_REQUEUE: Duration = Duration::from_secs(10);

/// With minReplicas/maxReplicas: the throughput-seeking autoscaler's
/// answer within `bound` (desired_replicas': the work left), its state kept
/// in status and the StoreSaturated condition set. Fixed replicas: `bound`.
fn autoscaled(scan: &BucketScan, st: &mut BucketScanStatus, seen: &Observed, bound: i32, now: &Time) -> i32 {
    let w = &scan.spec.workers;
    if w.replicas.is_some() || (w.min_replicas.is_none() && w.max_replicas.is_none()) {
        return bound;
    }
    let g = &seen.governor;
    let obs = autoscale::Observation {
        ceiling: scan.spec.max_requests_per_second.map(f64::from),
        governed: g.held_share(),
        governed_by: g.held_by.describe(),
        throttle_noise: g.noise,
        latency_ms: g.latency_us.map(|l| l / 1000.0),
        baseline_ms: g.baseline_us.map(|l| l / 1000.0),
        // Ready workers as the last reconcile saw them (observe_workers runs
        // after).
        ..autoscale::Observation::of(
            now.0.as_second(),
            seen.rate,
            g.throttles,
            st.numbers.ready_workers.unwrap_or(0),
        )
    };
    let min = w.min_replicas.unwrap_or(1);
    let d = autoscale::decide(
        st.autoscale.as_ref(),
        &obs,
        min,
        bound,
        &autoscale::AutoscaleConfig::default(),
    );
    let generation = scan.metadata.generation;
    let conditions = &mut st.conditions;
    match (&d.saturated, &d.at_ceiling) {
        (_, Some(message)) => {
            status::set_condition(
                conditions,
                STORE_SATURATED,
                false,
                "AtRequestCeiling",
                message,
                generation,
                now,
            );
        }
        (Some(s), None) => {
            status::set_condition(
                conditions,
                STORE_SATURATED,
                true,
                s.reason,
                &s.message,
                generation,
                now,
            );
        }
        // Held between steps (at a knee, waiting for a step's workers): the
        // condition stays as the last judgement set it.
        (None, None) if d.state.step_time != obs.now_secs => {}
        (None, None) => {
            let msg = format!("{} workers: each step so far raised the rate", d.workers);
            status::set_condition(
                conditions,
                STORE_SATURATED,
                false,
                "RateGrowing",
                &msg,
                generation,
                now,
            );
        }
    }
    st.autoscale = Some(d.state);
    d.workers
}

/// Shard and object counts, rate, workers and ETA into the status and metrics.
fn report_progress(
    scan: &BucketScan,
    ctx: &Context,
    st: &mut BucketScanStatus,
    seen: &Observed,
    replicas: i32,
    now: &Time,
) {
    let labels = scan_labels(scan);
    let m = &ctx.metrics;
    let counts = status::never_below(status::object_counts(&seen.counters), st.objects.as_ref());
    m.observe_counts(&labels, &counts);
    let s = &seen.shards;
    m.observe_shards(
        &labels,
        [
            ("pending", s.pending),
            ("leased", s.leased),
            ("done", s.done),
            ("dead", s.dead),
        ],
    );
    m.scan_workers.get_or_create(&labels).set(replicas.max(0) as u64);
    st.shards = Some(seen.shards.clone());
    st.objects = Some(counts);
    st.progress = Some(status::progress(&seen.shards));
    st.rate = Some(status::rate(seen.rate));
    st.workers = Some(replicas);
    st.observed_generation = scan.metadata.generation;
    let elapsed = st
        .start_time
        .as_ref()
        .map(|t| elapsed(now, t))
        .unwrap_or_default();
    st.eta = status::eta(elapsed, &seen.shards);
    st.numbers.objects_done = st.objects.as_ref().map(|o| o.scanned);
    st.numbers.rate_per_second = Some(seen.rate.round() as u64);
    st.numbers.eta_seconds = status::time_left(elapsed, &seen.shards).map(|d| d.as_secs());
    let (governed, governed_rate, throttles) = status::governed(&seen.governor);
    m.observe_governor(&labels, throttles, governed_rate);
    st.governed_rate = governed;
    st.numbers.governed_rate_per_second = governed_rate;
    st.numbers.store_throttles = Some(throttles);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::ShardCounts;

    #[test]
    fn a_scan_is_looked_at_every_second_only_in_its_last_seconds() {
        let shards = |pending, leased| ShardCounts {
            total: 64,
            pending,
            leased,
            done: 64 - pending - leased,
            dead: 0,
        };
        let secs = |s| Some(Duration::from_secs(s));
        assert_eq!(scanning_requeue(&shards(0, 12), secs(7)), QUICK_REQUEUE);
        assert_eq!(scanning_requeue(&shards(0, 1), secs(15)), QUICK_REQUEUE);
        // The last wave's shards still pending, the end near.
        assert_eq!(scanning_requeue(&shards(8, 6), secs(3)), QUICK_REQUEUE);
        // Too few finished to trust the estimate.
        assert_eq!(scanning_requeue(&shards(20, 14), secs(3)), ACTIVE_REQUEUE);
        // Fewer shards than workers: nothing pending from the start, but
        // the end is far (or not known before a shard finishes).
        assert_eq!(scanning_requeue(&shards(0, 12), secs(16)), ACTIVE_REQUEUE);
        assert_eq!(scanning_requeue(&shards(0, 3), None), ACTIVE_REQUEUE);
        assert!(QUICK_REQUEUE < ACTIVE_REQUEUE);
    }
}
