//! The reconcile of a live scan, as a pipeline: validate, observe Redis,
//! plan when Redis has no plan, reap expired leases, size the workers, report
//! progress; once every shard is done or dead, hand over to the merge.

use super::admission::check_output;
use super::children::ensure_workers;
use super::context::{lease, max_failures, scan_labels, Context, Error, ACTIVE_REQUEUE, MANAGER};
use super::finish::{fail, finished};
use super::merge::merging;
use super::observe::observe;
use super::planning::{plan, replan};
use super::report::{publish, write_status};
use crate::crd::{BucketScan, Phase};
use crate::desired;
use crate::status::{self, COMPLETE, PLANNED};
use bucketscan_core::fleet::plan::PlanError;
use bucketscan_core::fleet::queue::Queue;
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
        return finished(scan, ctx).await;
    }
    if let Err(message) = crate::validate::validate(scan) {
        return fail(scan, ctx, st, "InvalidSpec", &message, &now).await;
    }
    let queue = Queue::on(&ctx.connection, &desired::scan_id(scan), MANAGER, lease(ctx));
    let mut seen = observe(&queue).await?;

    if !seen.planned {
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
        let planned = if replanning {
            replan(scan, ctx, &queue).await
        } else {
            plan(scan, ctx, &queue)
                .await
                .map(|p| format!("{} shards", p.shards))
        };
        match planned {
            Ok(msg) => {
                let reason = if replanning { "Replanned" } else { "Planned" };
                status::set_condition(&mut st.conditions, PLANNED, true, reason, &msg, generation, &now);
                publish(ctx, scan, EventType::Normal, reason, &msg).await;
            }
            Err(
                e @ (Error::Plan(PlanError::Source { .. })
                | Error::Plan(PlanError::Output { .. })
                | Error::Config(_)),
            ) => {
                return fail(scan, ctx, st, "InvalidSource", &e.to_string(), &now).await;
            }
            Err(e) => return Err(e),
        }
        seen = observe(&queue).await?;
    }

    queue.reap(max_failures()).await?;
    let work_left = seen.shards.pending + seen.shards.leased;
    let replicas = desired::desired_replicas(&scan.spec.workers, Some(work_left));
    ensure_workers(scan, ctx, replicas).await?;

    let labels = scan_labels(scan);
    let m = &ctx.metrics;
    let counts = status::object_counts(&seen.counters);
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
    st.observed_generation = generation;
    let elapsed = st
        .start_time
        .as_ref()
        .map(|t| Duration::from_secs(now.0.as_second().saturating_sub(t.0.as_second()).max(0) as u64))
        .unwrap_or_default();
    st.eta = status::eta(elapsed, &seen.shards);

    if work_left > 0 {
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
        return Ok(Action::requeue(ACTIVE_REQUEUE));
    }

    // Every shard is done or dead: merge.
    merging(scan, ctx, st, &before, seen.manifest, &now).await
}
