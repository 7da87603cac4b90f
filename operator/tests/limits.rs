//! What one tenant may take (`limits`, issue 28 item 7), with the real
//! operator binary against the test ground's kube-apiserver, Redis and
//! versitygw: a namespace runs at most its cap of scans and the next waits,
//! condition Queued, until one ends; a scan asking for more workers or
//! shards than the operator allows fails, the cap named; and a steady
//! reconcile of a running scan costs few Kubernetes API requests (counted
//! by the operator's own client, `bucketscan_kube_api_requests_total`).
//! No kubelet here: planned scans stay Scanning, their workers never start.

mod cluster;
#[path = "../../worker/tests/common/mod.rs"]
mod common;

use bucketscan_operator::crd::{BucketScan, Phase};
use cluster::*;
use common::*;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use std::collections::BTreeMap;
use std::time::Duration;

fn start_operator(ns: &str, flags: &[&str]) -> Operator {
    Operator::watching(ns).args(flags).debug_log().start()
}

/// A namespace with the S3 Secret, and a bucket of a few objects with its
/// output bucket.
async fn ground(client: &kube::Client, ns: &str) -> (Server, String, String) {
    install_crd(client).await;
    namespace(client, ns).await;
    let s3 = versitygw();
    let bucket = s3.bucket(ns).await;
    let out = s3.bucket(&format!("{ns}-out")).await;
    let seeded: BTreeMap<String, Seeded> = (0..40).map(|i| (format!("k{i:03}"), Seeded::default())).collect();
    s3.seed(&bucket, &seeded).await;
    create_s3_secret(client, ns, "s3", &s3.access_key, &s3.secret_key).await;
    (s3, bucket, out)
}

async fn phase(scans: &Api<BucketScan>, name: &str) -> Option<Phase> {
    scans.get(name).await.ok()?.status.map(|s| s.phase)
}

async fn wait_phase(scans: &Api<BucketScan>, name: &str, want: Phase) {
    eventually(&format!("{name} {want:?}"), 60, async || {
        (phase(scans, name).await == Some(want)).then_some(())
    })
    .await;
}

/// The value of the sample `series` (name and labels as exposed) in a scrape.
fn sample(scrape: &str, series: &str) -> f64 {
    scrape
        .lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("{series} not in the scrape"))
        .trim()
        .parse()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespace_runs_its_cap_of_scans_and_the_next_waits_its_turn() {
    const NS: &str = "limits";
    let client = client().await;
    let (s3, bucket, out) = ground(&client, NS).await;
    let scans: Api<BucketScan> = Api::namespaced(client.clone(), NS);
    let mut operator = start_operator(
        NS,
        &[
            "--max-active-scans-per-namespace=2",
            "--max-workers-per-scan=20",
            "--max-target-shards=500",
        ],
    );
    for name in ["first", "second", "third"] {
        let scan = s3_scan(name, &s3.endpoint, &bucket, &out, serde_json::json!({}));
        scans.create(&PostParams::default(), &scan).await.unwrap();
        // One at a time: the order they were created in is their turn.
        tokio::time::sleep(Duration::from_millis(1100)).await;
    }
    wait_phase(&scans, "first", Phase::Scanning).await;
    wait_phase(&scans, "second", Phase::Scanning).await;
    let (status, reason, message) = eventually("third queued", 30, async || {
        condition(&scans, "third", "Queued")
            .await
            .filter(|(s, _, _)| s == "True")
    })
    .await;
    assert_eq!((status.as_str(), reason.as_str()), ("True", "ActiveScanLimit"));
    assert!(message.contains("limit of 2 per namespace"), "{message}");
    assert!(
        message.contains("operator.limits.activeScansPerNamespace"),
        "{message}"
    );
    assert_eq!(phase(&scans, "third").await, Some(Phase::Pending));
    wait_event(&client, NS, "Queued").await;
    // Queued, not failed, and nothing started: no start time, no workers.
    let third = scans.get("third").await.unwrap().status.unwrap();
    assert!(third.start_time.is_none(), "{third:?}");
    let (ready, why, _) = condition(&scans, "third", "Ready").await.unwrap();
    assert_eq!((ready.as_str(), why.as_str()), ("False", "ActiveScanLimit"));

    // Over the per-scan caps: refused at once, the cap named.
    let greedy = [
        ("workers", serde_json::json!({"workers": {"minReplicas": 5}})),
        ("autoscaled", serde_json::json!({"workers": {"maxReplicas": 50}})),
        ("shards", serde_json::json!({"sharding": {"targetShards": 5000}})),
    ];
    for (name, spec) in &greedy {
        let scan = s3_scan(name, &s3.endpoint, &bucket, &out, spec.clone());
        scans.create(&PostParams::default(), &scan).await.unwrap();
    }
    for (name, cap) in [
        ("autoscaled", "limit of 20 workers per scan"),
        ("shards", "limit of 500 shards"),
    ] {
        let (_, reason, message) = eventually(&format!("{name} refused"), 30, async || {
            condition(&scans, name, "Failed")
                .await
                .filter(|(s, _, _)| s == "True")
        })
        .await;
        assert_eq!(reason, "OverLimit", "{message}");
        assert!(message.contains(cap), "{message}");
    }
    // minReplicas 5 is within the cap: it waits its turn like the others.
    eventually("workers queued", 30, async || {
        condition(&scans, "workers", "Queued")
            .await
            .filter(|(s, _, _)| s == "True")
    })
    .await;

    // One ends: the oldest waiting starts.
    scans.delete("first", &DeleteParams::default()).await.unwrap();
    wait_phase(&scans, "third", Phase::Scanning).await;
    let (queued, why, _) = condition(&scans, "third", "Queued").await.unwrap();
    assert_eq!((queued.as_str(), why.as_str()), ("False", "Started"));
    assert_eq!(phase(&scans, "workers").await, Some(Phase::Pending));

    delete_scans(&scans, &["second", "third", "workers", "autoscaled", "shards"]).await;
    operator.stop();
}

/// Requests to the Kubernetes API per reconcile of a scan that is running
/// and whose state does not change (its workers never start here).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_steady_reconcile_makes_few_api_requests() {
    const NS: &str = "steady";
    let client = client().await;
    let (s3, bucket, out) = ground(&client, NS).await;
    let scans: Api<BucketScan> = Api::namespaced(client.clone(), NS);
    let mut operator = start_operator(NS, &[]);
    let port = operator.metrics_port();
    let scan = s3_scan("steady", &s3.endpoint, &bucket, &out, serde_json::json!({}));
    scans.create(&PostParams::default(), &scan).await.unwrap();
    wait_phase(&scans, "steady", Phase::Scanning).await;
    // Past the first reconciles (conditions still settling).
    tokio::time::sleep(Duration::from_secs(8)).await;
    let counts = async || {
        let scrape = http_get(port, "/metrics").await.unwrap().1;
        (
            sample(&scrape, "bucketscan_kube_api_requests_total"),
            sample(&scrape, r#"bucketscan_reconciles_total{result="ok"}"#),
        )
    };
    let (requests_before, reconciles_before) = counts().await;
    tokio::time::sleep(Duration::from_secs(30)).await;
    let (requests_after, reconciles_after) = counts().await;
    let reconciles = reconciles_after - reconciles_before;
    // The liveness probe of the API (a list every 5 s) is counted too.
    let probes = 30.0 / 5.0;
    let per_reconcile = (requests_after - requests_before - probes) / reconciles;
    println!("steady reconcile: {reconciles} reconciles in 30 s, {per_reconcile:.2} API requests each");
    assert!(reconciles >= 4.0, "{reconciles} reconciles in 30 s");
    assert!(
        per_reconcile <= 3.5,
        "{per_reconcile:.2} API requests per steady reconcile"
    );

    delete_scans(&scans, &["steady"]).await;
    operator.stop();
}

/// A scan whose keys grow past the per-scan Redis budget (its own user can
/// write them: here junk beside its queue) has its Redis user switched off
/// and fails with OverLimit naming the budget, within about a minute (the
/// count runs once a minute per scan, not on every reconcile).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scan_over_its_redis_budget_is_switched_off_and_fails() {
    const NS: &str = "budget";
    let client = client().await;
    let (s3, bucket, out) = ground(&client, NS).await;
    let scans: Api<BucketScan> = Api::namespaced(client.clone(), NS);
    let mut operator = start_operator(NS, &["--max-redis-bytes-per-scan", "1048576"]);
    let scan = s3_scan("fat", &s3.endpoint, &bucket, &out, serde_json::json!({}));
    scans.create(&PostParams::default(), &scan).await.unwrap();
    // And one that stays Blocked (its credentials Secret never comes): its
    // user exists from the workers made beside its first plan attempt, and
    // it is held to the budget as well.
    let source = serde_json::json!({"source": {"endpoint": s3.endpoint, "bucket": bucket, "pathStyle": true,
                                               "credentialsSecret": {"name": "never-made"}}});
    let stuck = s3_scan("stuck", &s3.endpoint, &bucket, &out, source);
    scans.create(&PostParams::default(), &stuck).await.unwrap();
    // And one suspended once planned: its user is kept while it sleeps,
    // so it is held to the budget too.
    let napping = s3_scan("napping", &s3.endpoint, &bucket, &out, serde_json::json!({}));
    scans.create(&PostParams::default(), &napping).await.unwrap();
    wait_phase(&scans, "fat", Phase::Scanning).await;
    wait_phase(&scans, "napping", Phase::Scanning).await;
    scans
        .patch(
            "napping",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"suspend": true}})),
        )
        .await
        .unwrap();
    eventually("napping Suspended", 60, async || {
        let (status, _, _) = condition(&scans, "napping", "Suspended").await?;
        (status == "True").then_some(())
    })
    .await;
    eventually("stuck Blocked", 60, async || {
        let (status, reason, _) = condition(&scans, "stuck", "Blocked").await?;
        (status == "True" && reason == "SecretNotFound").then_some(())
    })
    .await;
    let redis = redis::Client::open(std::env::var("BUCKETSCAN_TEST_REDIS_URL").unwrap()).unwrap();
    let mut root = redis.get_multiplexed_async_connection().await.unwrap();
    for name in ["fat", "stuck", "napping"] {
        let id = bucketscan_operator::desired::scan_id(&scans.get(name).await.unwrap());
        redis::cmd("SET")
            .arg(format!("bs:{{{id}}}:junk"))
            .arg("x".repeat(2 << 20))
            .query_async::<()>(&mut root)
            .await
            .unwrap();
    }
    let over_limit = async |name: &str| {
        let status = scans.get(name).await.ok()?.status?;
        let failed = status
            .conditions
            .iter()
            .find(|c| c.type_ == "Failed" && c.status == "True")?;
        (status.phase == Phase::Failed && failed.reason == "OverLimit").then(|| failed.message.clone())
    };
    let message = eventually("fat Failed OverLimit", 120, async || over_limit("fat").await).await;
    // A blocked scan is looked at after 5 s, doubling: the count a minute
    // after the first comes within about 80 s.
    eventually("stuck Failed OverLimit", 150, async || over_limit("stuck").await).await;
    eventually("napping Failed OverLimit", 150, async || {
        over_limit("napping").await
    })
    .await;
    // What put them over the budget is gone with them, not left for the
    // scan's deletion (its author may never delete it).
    for name in ["fat", "stuck", "napping"] {
        let id = bucketscan_operator::desired::scan_id(&scans.get(name).await.unwrap());
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg(format!("bs:{{{id}}}:*"))
            .query_async(&mut root)
            .await
            .unwrap();
        assert!(keys.is_empty(), "{name} keeps {keys:?}");
    }
    let id = bucketscan_operator::desired::scan_id(&scans.get("fat").await.unwrap());
    assert!(
        message.contains("over the budget of 1048576 bytes") && message.contains("switched off"),
        "{message}"
    );
    let user: redis::Value = redis::cmd("ACL")
        .arg("GETUSER")
        .arg(format!("bucketscan.{id}"))
        .query_async(&mut root)
        .await
        .unwrap();
    // Off, or already gone (a failed scan's user is deleted as it ends).
    assert!(
        user == redis::Value::Nil || format!("{user:?}").contains("off"),
        "{user:?}"
    );
    delete_scans(&scans, &["fat", "stuck", "napping"]).await;
    operator.stop();
}
