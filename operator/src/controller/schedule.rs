//! The BucketScanSchedule controller: for each schedule, start the run
//! that is due (or skip it, or hold it for Forbid), delete what the
//! history limits drop, write the status, and look again at the next time.
//! The decisions are in `schedule` (pure); this file reads the schedule's
//! scans, creates and deletes them, and writes status and events.
//!
//! What wakes a reconcile: a change of a schedule's spec, labels or
//! annotations (not its status, which this writes), a change of phase or
//! the deletion of one of its scans (label-selected, owned), and the
//! requeue at the next scheduled time. Its reconciles share the operator's
//! Kubernetes client (its pacing, `throttle`) and take turns by namespace
//! (`fairness`, slots of their own: a schedule's reconcile is a few API
//! requests, and must not wait behind a scan's planning).
//!
//! May import: `context`, `crd`, `schedule`, `status`, `metrics`.

use super::context::{apply_params, Context, Error, ERROR_REQUEUE};
use crate::crd::BucketScan;
use crate::fairness::{FairShare, DEFER};
use crate::metrics::ResultLabel;
use crate::schedule::build::{baseline_for, desired_scan, last_successful, made_already, runs, Run};
use crate::schedule::history::to_prune;
use crate::schedule::summary::{check, refused, running, Refusal};
use crate::schedule::timing::{decide, requeue_after, Decision, Facts};
use bucketscan_api::schedule::{BucketScanSchedule, BucketScanScheduleStatus, SCHEDULE_LABEL};
use futures::StreamExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, ListParams, Patch, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{Event, EventType};
use kube::runtime::{reflector, watcher, PredicateConfig, WatchStreamExt};
use kube::{Resource, ResourceExt};
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// Schedules reconciled at once.
const CONCURRENCY: u16 = 2;

struct Scheduler {
    ctx: Arc<Context>,
    fair: Mutex<FairShare>,
}

/// Run the schedule controller until the process is told to stop.
/// `namespace`: watch only that one (a namespaced install), else all.
pub async fn run(ctx: Arc<Context>, namespace: Option<&str>) {
    let client = ctx.client.clone();
    let (reader, writer) = reflector::store();
    let schedules = watcher(
        api::<BucketScanSchedule>(&client, namespace),
        watcher::Config::default(),
    )
    .default_backoff()
    .reflect(writer)
    .applied_objects()
    .predicate_filter(spec_changes, PredicateConfig::default());
    // Only scans that belong to a schedule, and only their phase changes
    // and deletion: a running scan's status is written every few seconds.
    let scans = watcher(
        api::<BucketScan>(&client, namespace),
        watcher::Config::default().labels(SCHEDULE_LABEL),
    )
    .default_backoff()
    .touched_objects()
    .predicate_filter(phase_changes, PredicateConfig::default());
    let scheduler = Arc::new(Scheduler {
        ctx,
        fair: Mutex::new(FairShare::new(CONCURRENCY.into())),
    });
    Controller::for_stream(schedules, reader)
        .owns_stream(scans)
        .with_config(kube::runtime::controller::Config::default().concurrency(CONCURRENCY))
        .shutdown_on_signal()
        .run(reconcile, error_policy, scheduler)
        .for_each(|result| async move {
            if let Err(e) = result {
                tracing::debug!(error = %e, "schedule reconcile ended with an error");
            }
        })
        .await;
}

fn api<K>(client: &kube::Client, namespace: Option<&str>) -> Api<K>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
{
    match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

fn spec_changes(s: &BucketScanSchedule) -> Option<u64> {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (s.metadata.generation, s.labels(), s.annotations()).hash(&mut h);
    Some(h.finish())
}

fn phase_changes(scan: &BucketScan) -> Option<u64> {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    let phase = scan.status.as_ref().map(|s| s.phase);
    (format!("{phase:?}"), scan.metadata.deletion_timestamp.is_some()).hash(&mut h);
    Some(h.finish())
}

#[tracing::instrument(skip_all, fields(schedule = %schedule.name_any(), namespace = %schedule.namespace().unwrap_or_default()))]
async fn reconcile(schedule: Arc<BucketScanSchedule>, s: Arc<Scheduler>) -> Result<Action, Error> {
    let ns = schedule.namespace().unwrap_or_default();
    let name = schedule.name_any();
    let taken = s.fair.lock().expect("lock").try_start(&ns, &name, Instant::now());
    if !taken {
        return Ok(Action::requeue(DEFER));
    }
    let result = reconcile_one(&schedule, &s.ctx).await;
    s.fair.lock().expect("lock").finish(&ns);
    let label = ResultLabel {
        result: if result.is_ok() { "ok" } else { "error" }.into(),
    };
    s.ctx.metrics.reconciles.get_or_create(&label).inc();
    result
}

async fn reconcile_one(cached: &BucketScanSchedule, ctx: &Context) -> Result<Action, Error> {
    if cached.metadata.deletion_timestamp.is_some() {
        // Its scans go with it: they are owned (garbage collection).
        return Ok(Action::await_change());
    }
    let ns = cached.namespace().unwrap_or_default();
    let name = cached.name_any();
    // Read afresh: the cache may not hold the status the last reconcile
    // wrote yet (a run's new scan wakes the next one at once), and a
    // decision on an older status would hold or count a run again and
    // write that status back.
    let api: Api<BucketScanSchedule> = Api::namespaced(ctx.client.clone(), &ns);
    let fresh = match api.get_status(&name).await {
        Ok(fresh) => fresh,
        Err(kube::Error::Api(e)) if e.code == 404 => return Ok(Action::await_change()),
        Err(e) => return Err(e.into()),
    };
    let schedule = &fresh;
    let generation = schedule.metadata.generation;
    let now_ts = Timestamp::now();
    let now = Time(now_ts);
    let before = schedule.status.clone().unwrap_or_default();
    let mut st = before.clone();
    st.observed_generation = generation;

    // The namespace by the rule scans follow (a list, or a label selector).
    let probe = desired_scan(schedule, now_ts, None);
    let checked = check(schedule).and_then(|ok| {
        ctx.namespace_allows(&probe)
            .map(|()| ok)
            .map_err(|message| Refusal {
                reason: "NamespaceNotAllowed",
                message,
            })
    });
    let (cron, tz) = match checked {
        Ok(ok) => ok,
        Err(refusal) => {
            refused(&mut st, &refusal, generation, &now);
            if write_status(ctx, schedule, &before, &st).await? {
                publish(
                    ctx,
                    schedule,
                    EventType::Warning,
                    refusal.reason,
                    &refusal.message,
                )
                .await;
            }
            // Only a change of the spec can mend it.
            return Ok(Action::await_change());
        }
    };

    let scans: Api<BucketScan> = Api::namespaced(ctx.client.clone(), &ns);
    let listed = scans
        .list(&ListParams::default().labels(&format!("{SCHEDULE_LABEL}={name}")))
        .await?;
    let mut runs = runs(schedule, &listed.items);
    let mut active: Vec<String> = runs
        .iter()
        .filter(|r| r.is_active())
        .map(|r| r.name.clone())
        .collect();
    let since = st
        .last_schedule_time
        .as_ref()
        .map(|t| t.0)
        .or_else(|| schedule.metadata.creation_timestamp.as_ref().map(|t| t.0))
        .unwrap_or(now_ts);
    let facts = Facts {
        cron: &cron,
        tz: &tz,
        policy: schedule.spec.concurrency_policy,
        starting_deadline_seconds: schedule.spec.starting_deadline_seconds,
        suspend: schedule.spec.suspend,
        since,
        active: &active,
        now: now_ts,
    };
    let decision = decide(&facts);
    let outcome = |o: &str| {
        ctx.metrics
            .schedule_runs
            .get_or_create(&ResultLabel { result: o.into() })
            .inc()
    };
    match &decision {
        Decision::Run {
            at,
            replace,
            missed_earlier,
            ..
        } => {
            let started = start(ctx, schedule, &scans, &runs, *at, replace, *missed_earlier).await?;
            outcome(if replace.is_empty() { "started" } else { "replaced" });
            active.retain(|a| !replace.contains(a));
            st.last_schedule_time = Some(Time(*at));
            match started {
                Ok(name) if !active.contains(&name) => active.push(name),
                Ok(_) => {}
                Err(why) => {
                    st.skipped_runs += 1;
                    st.last_skip = Some(why);
                }
            }
        }
        Decision::Skip { at, late, .. } => {
            let deadline = schedule.spec.starting_deadline_seconds.unwrap_or_default();
            let why = format!(
                "the run of {at} was skipped: it could start only {} s late, past startingDeadlineSeconds ({deadline} s)",
                late.as_secs()
            );
            publish(ctx, schedule, EventType::Warning, "RunSkipped", &why).await;
            outcome("skipped");
            st.last_schedule_time = Some(Time(*at));
            st.skipped_runs += 1;
            st.last_skip = Some(why);
        }
        Decision::Hold { at, active: busy, .. } => {
            let why = format!(
                "the run of {at} waits: concurrencyPolicy is Forbid and {} is still running",
                busy.join(", ")
            );
            if st.last_skip.as_deref() != Some(why.as_str()) {
                publish(ctx, schedule, EventType::Normal, "RunHeld", &why).await;
            }
            outcome("held");
            st.last_skip = Some(why);
        }
        Decision::Wait { .. } | Decision::Suspended => {}
    }

    let pruned = to_prune(
        &runs,
        schedule.spec.successful_scans_history_limit,
        schedule.spec.failed_scans_history_limit,
        schedule.spec.incremental,
    );
    for old in &pruned {
        delete(&scans, old).await?;
    }
    if !pruned.is_empty() {
        let note = format!(
            "deleted {} (history limits; their results stay in S3)",
            pruned.join(", ")
        );
        publish(ctx, schedule, EventType::Normal, "HistoryPruned", &note).await;
        runs.retain(|r| !pruned.contains(&r.name));
    }

    if let Some(last) = last_successful(&runs) {
        st.last_successful_scan = Some(last.name.clone());
        st.last_successful_time = last.time().map(Time);
    }
    active.sort();
    st.active_count = active.len() as i32;
    st.active = active;
    st.next_schedule_time = match &decision {
        Decision::Suspended => None,
        Decision::Wait { next }
        | Decision::Run { next, .. }
        | Decision::Skip { next, .. }
        | Decision::Hold { next, .. } => next.map(Time),
    };
    running(&mut st, schedule.spec.suspend, generation, &now);
    write_status(ctx, schedule, &before, &st).await?;
    Ok(Action::requeue(requeue_after(
        &decision,
        now_ts,
        schedule.spec.starting_deadline_seconds,
    )))
}

/// Start the run of `at`: delete the scans `replace` names, then create
/// the run's scan. `Ok(name)`, or `Err(why)` when its name holds a scan that
/// is not this schedule's (left alone) or this run's scan being deleted
/// (`made_already`): the run is skipped.
async fn start(
    ctx: &Context,
    schedule: &BucketScanSchedule,
    scans: &Api<BucketScan>,
    runs: &[Run],
    at: Timestamp,
    replace: &[String],
    missed_earlier: bool,
) -> Result<Result<String, String>, Error> {
    for old in replace {
        delete(scans, old).await?;
        let note = format!("deleted BucketScan {old} (concurrencyPolicy Replace) for the run of {at}");
        publish(ctx, schedule, EventType::Normal, "RunReplaced", &note).await;
    }
    let baseline = baseline_for(schedule, runs).map(|r| r.name.clone());
    let scan = desired_scan(schedule, at, baseline.as_deref());
    let name = scan.name_any();
    match scans.create(&PostParams::default(), &scan).await {
        Ok(_) => {}
        // Made already (an operator restarted before it wrote the status:
        // the same scheduled time, the same name), unless another made it.
        Err(kube::Error::Api(e)) if e.code == 409 => {
            let existing = scans.get(&name).await?;
            if let Err((reason, why)) = made_already(schedule, &existing, at) {
                publish(ctx, schedule, EventType::Warning, reason, &why).await;
                return Ok(Err(why));
            }
        }
        Err(e) => return Err(e.into()),
    }
    let mut note = format!("started BucketScan {name} for the run of {at}");
    if let Some(b) = baseline.filter(|_| schedule.spec.incremental) {
        note.push_str(&format!(", incremental against {b}"));
    }
    if missed_earlier {
        note.push_str("; earlier runs were missed (the operator was down or the schedule suspended): only the latest starts");
    }
    publish(ctx, schedule, EventType::Normal, "RunStarted", &note).await;
    Ok(Ok(name))
}

/// Delete a scan of the schedule (its finalizer cleans its Redis keys and
/// parts; its result stays). Gone already is fine.
async fn delete(scans: &Api<BucketScan>, name: &str) -> Result<(), Error> {
    match scans.delete(name, &DeleteParams::background()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Write the status by server-side apply when it changed; true when it did.
async fn write_status(
    ctx: &Context,
    schedule: &BucketScanSchedule,
    before: &BucketScanScheduleStatus,
    st: &BucketScanScheduleStatus,
) -> Result<bool, Error> {
    if before == st {
        return Ok(false);
    }
    let api: Api<BucketScanSchedule> =
        Api::namespaced(ctx.client.clone(), &schedule.namespace().unwrap_or_default());
    let patch = serde_json::json!({
        "apiVersion": BucketScanSchedule::api_version(&()),
        "kind": BucketScanSchedule::kind(&()),
        "status": st,
    });
    api.patch_status(&schedule.name_any(), &apply_params(), &Patch::Apply(&patch))
        .await?;
    Ok(true)
}

async fn publish(ctx: &Context, schedule: &BucketScanSchedule, type_: EventType, reason: &str, note: &str) {
    let event = Event {
        type_,
        reason: reason.into(),
        note: Some(note.chars().take(1000).collect()),
        action: "Schedule".into(),
        secondary: None,
    };
    if let Err(e) = ctx.recorder.publish(&event, &schedule.object_ref(&())).await {
        tracing::warn!(error = %e, "could not publish an event");
    }
}

fn error_policy(schedule: Arc<BucketScanSchedule>, error: &Error, s: Arc<Scheduler>) -> Action {
    tracing::warn!(schedule = %schedule.name_any(), error = %error, "schedule reconcile failed; retrying");
    let note = format!("{error}; retrying in {} s", ERROR_REQUEUE.as_secs());
    tokio::spawn(async move {
        publish(&s.ctx, &schedule, EventType::Warning, "ReconcileError", &note).await;
    });
    Action::requeue(ERROR_REQUEUE)
}
