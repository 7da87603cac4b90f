//! Partial results and retry through the operator, on the real
//! kube-apiserver, Redis and versitygw (behind a fault proxy): the LIST that
//! starts one shard is refused for good until that shard is dead; the scan
//! (`onDeadShards: Partial`) ends Complete with reason Partial and its
//! missing range in the status; `spec.retry` then scans that shard again
//! against the healed store and the scan ends Complete with the whole
//! bucket; a retry with nothing left to retry is refused with an event. As
//! in lifecycle.rs, the test runs what the pods would.

mod cluster;
#[path = "../../worker/tests/common/mod.rs"]
mod common;
#[path = "../../worker/tests/common/fault_proxy.rs"]
mod fault_proxy;
mod kubelet;
#[path = "../../core/tests/support/snapshot.rs"]
mod snapshot;

use bucketscan_operator::crd::{BucketScan, BucketScanStatus, Phase};
use cluster::*;
use common::*;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Event;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use kubelet::run_like_pod;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

const NS: &str = "retry-flow";

fn start_operator(ns: &str) -> Operator {
    Operator::watching(ns)
        .redis_scan_users()
        .lease_secs(5)
        .debug_log()
        .start()
}

/// Run the scan's workers (one pod's worth) and then its merge Job, as the
/// kubelet would; `merge_uid_not`: the uid of an earlier merge Job, which a
/// retry replaces.
async fn run_workers_then_merge(client: &Client, ns: &str, merge_uid_not: Option<&str>) -> String {
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), ns);
    let deployment = eventually("the workers", 60, async || {
        deployments.get_opt("partly-workers").await.ok()?
    })
    .await;
    let container = deployment.spec.unwrap().template.spec.unwrap().containers[0].clone();
    let mut worker = run_like_pod(client, ns, &container, "partly-workers-a", &[]).await;
    assert!(
        wait_exit(&mut worker, Duration::from_secs(120)).success(),
        "worker failed"
    );
    let jobs: Api<Job> = Api::namespaced(client.clone(), ns);
    let job = eventually("the merge Job", 60, async || {
        let job = jobs.get_opt("partly-merge").await.ok()??;
        (job.uid().as_deref() != merge_uid_not && job.metadata.deletion_timestamp.is_none()).then_some(job)
    })
    .await;
    let container = job.spec.clone().unwrap().template.spec.unwrap().containers[0].clone();
    // Exit 1 with dead shards (the merge's default says so); the operator
    // reads the manifest in Redis, not the exit code.
    let mut merge = run_like_pod(client, ns, &container, "partly-merge-x", &[]).await;
    wait_exit(&mut merge, Duration::from_secs(60));
    job.uid().unwrap()
}

async fn ended(
    scans: &Api<BucketScan>,
    what: &str,
    pick: impl Fn(&BucketScanStatus) -> bool,
) -> BucketScanStatus {
    eventually(what, 90, async || {
        let st = scans.get("partly").await.ok()?.status?;
        pick(&st).then_some(st)
    })
    .await
}

/// The first round: planned, then scanned while the LIST starting `b/` is
/// refused, and merged: Complete (Partial). The merge Job's uid and the status.
async fn partial_first_round(
    client: &Client,
    ns: &str,
    scans: &Api<BucketScan>,
    refusing: &AtomicBool,
) -> (String, BucketScanStatus) {
    eventually("planned", 60, async || {
        let st = scans.get("partly").await.ok()?.status?;
        st.shards.filter(|s| s.total == 3)
    })
    .await;
    refusing.store(true, Ordering::Relaxed);
    let first_merge = run_workers_then_merge(client, ns, None).await;
    let partial = ended(scans, "Complete (Partial)", |st| st.phase == Phase::Complete).await;
    (first_merge, partial)
}

/// Retry round `round`, as `kubectl bucketscan retry partly` asks for it.
async fn ask_retry(scans: &Api<BucketScan>, round: u32) {
    scans
        .patch(
            "partly",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"retry": round}})),
        )
        .await
        .unwrap();
}

fn reason(st: &BucketScanStatus, type_: &str) -> String {
    st.conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| c.reason.clone())
        .unwrap_or_default()
}

/// A scan "partly" in namespace `ns` of `a/`, `b/` and `c/` (1,100 objects
/// each, three shards, `onDeadShards: Partial`) through a proxy that refuses
/// the LIST starting `b/` while `refusing` is set.
struct Partly {
    client: Client,
    s3: Server,
    out: String,
    seeded: BTreeMap<String, Seeded>,
    refusing: Arc<AtomicBool>,
    scans: Api<BucketScan>,
    _proxy: fault_proxy::FaultProxy,
}

async fn partly(ns: &str) -> Partly {
    let client = client().await;
    install_crd(&client).await;
    namespace(&client, ns).await;
    let s3 = versitygw();
    let bucket = s3.bucket(&format!("{ns}-partly")).await;
    let out = s3.bucket(&format!("{ns}-partly-out")).await;
    let seeded: BTreeMap<String, Seeded> = ["a", "b", "c"]
        .iter()
        .flat_map(|dir| (0..1100).map(move |i| format!("{dir}/{i:04}")))
        .map(|key| (key, Seeded::default()))
        .collect();
    s3.seed(&bucket, &seeded).await;
    // Refused only while `refusing`: planning lists freely.
    let refusing = Arc::new(AtomicBool::new(false));
    let proxy = fault_proxy::start(
        s3.endpoint.clone(),
        {
            let refusing = refusing.clone();
            move |req| {
                (refusing.load(Ordering::Relaxed) && fault_proxy::lists_after(req, "b."))
                    .then(|| fault_proxy::error_document(403, "AccessDenied", "Access Denied", &[]))
            }
        },
        |_, _| {},
    )
    .await;
    create_s3_secret(&client, ns, "s3", &s3.access_key, &s3.secret_key).await;
    let scans: Api<BucketScan> = Api::namespaced(client.clone(), ns);
    let scan: BucketScan = serde_json::from_value(serde_json::json!({
        "apiVersion": "bucketscan.dev/v1alpha1", "kind": "BucketScan",
        "metadata": {"name": "partly"},
        "spec": {
            "source": {"endpoint": proxy.url, "bucket": bucket, "pathStyle": true,
                       "credentialsSecret": {"name": "s3"}},
            "output": {"bucket": out, "prefix": "p/"},
            "workers": {"replicas": 1, "concurrency": 16},
            "sharding": {"targetShards": 3, "minShardObjects": 1000},
            "onDeadShards": "Partial"
        }
    }))
    .unwrap();
    scans.create(&PostParams::default(), &scan).await.unwrap();
    Partly {
        client,
        s3,
        out,
        seeded,
        refusing,
        scans,
        _proxy: proxy,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partial_scan_is_complete_with_its_missing_range_and_a_retry_completes_it() {
    let Partly {
        client,
        s3,
        out,
        seeded,
        refusing,
        scans,
        _proxy,
    } = partly(NS).await;
    let mut operator = start_operator(NS);

    let (first_merge, partial) = partial_first_round(&client, NS, &scans, &refusing).await;
    assert_eq!(reason(&partial, "Complete"), "Partial", "{partial:?}");
    assert_eq!(partial.missing_ranges, Some(1), "{partial:?}");
    assert!(
        partial.missing[0].range.contains("after \"b.") && partial.missing[0].error.contains("access denied"),
        "{partial:?}"
    );
    assert_eq!(
        partial.output.as_deref(),
        Some(format!("s3://{out}/p/result.jsonl").as_str())
    );
    let records = parse_records(&s3.read(&out, "p/result.jsonl").await);
    assert_eq!(records.len(), 2200, "every live record once, none of b/");
    assert!(records.keys().all(|k| !k.starts_with("b/")));

    // Retry, as `kubectl bucketscan retry partly` asks for it.
    refusing.store(false, Ordering::Relaxed);
    ask_retry(&scans, 1).await;
    ended(&scans, "Scanning again", |st| {
        st.phase == Phase::Scanning && st.retries == Some(1)
    })
    .await;
    run_workers_then_merge(&client, NS, Some(&first_merge)).await;
    let done = ended(&scans, "Complete after the retry", |st| {
        st.phase == Phase::Complete && reason(st, "Complete") == "Merged"
    })
    .await;
    assert_eq!(done.missing_ranges, None, "{done:?}");
    assert!(done.missing.is_empty());
    assert_eq!(done.retries, Some(1));
    assert_matches_seed(&parse_records(&s3.read(&out, "p/result.jsonl").await), &seeded);
    let manifest: serde_json::Value =
        serde_json::from_slice(&s3.read(&out, "p/manifest.json").await).unwrap();
    assert_eq!(
        (manifest["partial"].clone(), manifest["retries"].clone()),
        (false.into(), 1.into())
    );

    // Nothing left to retry: refused, said in an event, the scan stays.
    ask_retry(&scans, 2).await;
    ended(&scans, "retry 2 acted on", |st| st.retries == Some(2)).await;
    let events: Api<Event> = Api::namespaced(client.clone(), NS);
    let refused = eventually("a RetryRefused event", 30, async || {
        events
            .list(&ListParams::default())
            .await
            .ok()?
            .items
            .into_iter()
            .find(|e| e.reason.as_deref() == Some("RetryRefused"))
    })
    .await;
    assert!(
        refused.message.unwrap_or_default().contains("nothing to retry"),
        "the event says why"
    );
    assert_eq!(
        scans.get("partly").await.unwrap().status.unwrap().phase,
        Phase::Complete
    );
    operator.stop();
}

/// A scan merged partial in round 0, retried (round 1), and Redis then
/// rolled back to its round-0 state (as a failover to a replica that lagged
/// the retry would): the operator has taken the retry's step again, its
/// `RetryRestored` event is there.
struct LostOnce {
    partly: Partly,
    operator: Operator,
    first_merge: String,
    /// Redis as it was at the end of round 0, and a connection to restore it.
    round_0: snapshot::Snapshot,
    con: redis::aio::MultiplexedConnection,
    events: Api<Event>,
}

async fn lost_once(ns: &str) -> LostOnce {
    let partly = partly(ns).await;
    let operator = start_operator(ns);
    let Partly {
        client,
        scans,
        refusing,
        ..
    } = &partly;
    let (first_merge, partial) = partial_first_round(client, ns, scans, refusing).await;
    assert_eq!(partial.missing_ranges, Some(1), "{partial:?}");
    let scan = scans.get("partly").await.unwrap();
    let id = bucketscan_operator::desired::scan_id(&scan);
    let mut con = redis::Client::open(std::env::var("BUCKETSCAN_TEST_REDIS_URL").unwrap())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let round_0 = snapshot::Snapshot::take(&mut con, &id).await;

    refusing.store(false, Ordering::Relaxed);
    ask_retry(scans, 1).await;
    ended(scans, "Scanning again", |st| {
        st.phase == Phase::Scanning && st.retries == Some(1)
    })
    .await;
    // Redis back at round 0, merged and partial, before any worker ran.
    round_0.restore(&mut con).await;
    let events: Api<Event> = Api::namespaced(client.clone(), ns);
    let restored = eventually("a RetryRestored event", 60, async || {
        restorations(&events).await.ok()?.into_iter().next()
    })
    .await;
    assert!(
        restored
            .message
            .unwrap_or_default()
            .contains("Redis lost retry 1"),
        "the event says why"
    );
    LostOnce {
        partly,
        operator,
        first_merge,
        round_0,
        con,
        events,
    }
}

async fn restorations(events: &Api<Event>) -> Result<Vec<Event>, kube::Error> {
    Ok(events
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("RetryRestored"))
        .collect())
}

/// Redis loses a retry's step after the status recorded it: every shard
/// looks finished and the manifest is round 0's. The operator does not end
/// the scan on it (its status says round 1): it takes the step again, the
/// shard is scanned again, and the scan ends with the whole bucket, of
/// round 1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_step_redis_lost_is_taken_again_not_ended_as_the_earlier_round() {
    const LOST: &str = "retry-lost";
    let LostOnce {
        partly,
        mut operator,
        first_merge,
        ..
    } = lost_once(LOST).await;
    let Partly {
        client,
        s3,
        out,
        seeded,
        scans,
        ..
    } = &partly;
    let st = scans.get("partly").await.unwrap().status.unwrap();
    assert_ne!(
        (st.phase, reason(&st, "Complete")),
        (Phase::Complete, "Partial".to_string()),
        "ended on round 0: {st:?}"
    );
    assert_eq!(st.retry_restored, Some(1), "{st:?}");
    run_workers_then_merge(client, LOST, Some(&first_merge)).await;
    let done = ended(scans, "Complete after the retry", |st| {
        st.phase == Phase::Complete && reason(st, "Complete") == "Merged"
    })
    .await;
    assert_eq!((done.missing_ranges, done.retries), (None, Some(1)), "{done:?}");
    assert_matches_seed(&parse_records(&s3.read(out, "p/result.jsonl").await), seeded);
    let manifest: serde_json::Value = serde_json::from_slice(&s3.read(out, "p/manifest.json").await).unwrap();
    assert_eq!(manifest["retries"], 1, "{manifest}");
    operator.stop();
}

/// The scan's own Redis user can write what makes a round look lost (its
/// `meta.retries` and manifest), again and again: the operator takes a
/// round's step again once, and on a second loss of the same round fails
/// the scan saying why, instead of re-running the step, stopping the Jobs
/// and warning on every reconcile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_round_lost_again_is_restored_once_then_fails_the_scan() {
    const AGAIN: &str = "retry-lost-again";
    let LostOnce {
        partly,
        mut operator,
        round_0,
        mut con,
        events,
        ..
    } = lost_once(AGAIN).await;
    for _ in 0..3 {
        round_0.restore(&mut con).await;
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    let failed = ended(&partly.scans, "Failed (RetryLost)", |st| {
        st.phase == Phase::Failed
    })
    .await;
    assert_eq!(reason(&failed, "Failed"), "RetryLost", "{failed:?}");
    let message = failed
        .conditions
        .iter()
        .find(|c| c.type_ == "Failed")
        .map(|c| c.message.clone())
        .unwrap_or_default();
    assert!(
        message.contains("Redis lost retry 1") && message.contains("a second time"),
        "{message}"
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    let restored = restorations(&events).await.unwrap();
    assert_eq!(restored.len(), 1, "one RetryRestored a round: {restored:?}");
    operator.stop();
}

/// The API server refuses bad values of the two fields (untyped bodies, so
/// it is the one to judge).
#[tokio::test]
async fn the_api_server_refuses_bad_retry_fields() {
    use kube::api::{ApiResource, DynamicObject};
    let client = client().await;
    install_crd(&client).await;
    namespace(&client, "retry-crd").await;
    let raw: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        "retry-crd",
        &ApiResource::erase::<BucketScan>(&()),
    );
    let body = |name: &str, extra: serde_json::Value| {
        let mut spec = serde_json::json!({
            "source": {"endpoint": "http://10.0.0.5:9000", "bucket": "photos", "pathStyle": true},
            "output": {"bucket": "results"}
        });
        spec.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        serde_json::from_value::<DynamicObject>(serde_json::json!({
            "apiVersion": "bucketscan.dev/v1alpha1", "kind": "BucketScan",
            "metadata": {"name": name}, "spec": spec
        }))
        .unwrap()
    };
    let _ = raw.delete("fine", &Default::default()).await;
    eventually("the old scan to go", 30, async || {
        raw.get_opt("fine").await.unwrap().is_none().then_some(())
    })
    .await;
    raw.create(
        &PostParams::default(),
        &body("fine", serde_json::json!({"onDeadShards": "Partial", "retry": 3})),
    )
    .await
    .unwrap();
    let stored: Api<BucketScan> = Api::namespaced(client.clone(), "retry-crd");
    let fine = stored.get("fine").await.unwrap();
    assert_eq!(fine.spec.retry, Some(3));
    assert_eq!(
        fine.spec.on_dead_shards,
        bucketscan_api::retry::OnDeadShards::Partial
    );
    for (name, extra, words) in [
        (
            "ignore",
            serde_json::json!({"onDeadShards": "Ignore"}),
            "supported values: \"Fail\", \"Partial\"",
        ),
        (
            "negative",
            serde_json::json!({"retry": -1}),
            "should be greater than or equal to 0",
        ),
        (
            "huge",
            serde_json::json!({"retry": 1001}),
            "should be less than or equal to 1000",
        ),
    ] {
        let err = raw
            .create(&PostParams::default(), &body(name, extra))
            .await
            .unwrap_err();
        assert!(err.to_string().contains(words), "{name}: {err}");
    }
}
