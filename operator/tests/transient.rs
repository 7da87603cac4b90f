//! Transient causes make a scan wait, never fail: the real operator binary
//! against the test ground's kube-apiserver, versitygw and a Redis of the
//! test's own (so it can be stopped). A Secret created after the scan (as
//! GitOps tools do), a store that does not answer yet, and Redis down for a
//! while each show as condition `Blocked` with the reason, and the scan goes
//! on once the cause has passed. Deleting a scan while Redis is down waits
//! for Redis, and the documented annotation lets it go without.

mod cluster;
#[path = "../../worker/tests/common/mod.rs"]
mod common;

use bucketscan_operator::crd::{BucketScan, Phase};
use cluster::*;
use common::*;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Event;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::Client;
use tokio::net::{TcpListener, TcpStream};

const NS: &str = "transient";

fn start_operator(redis_url: &str) -> Operator {
    Operator::watching(NS)
        .redis(redis_url)
        .lease_secs(5)
        .args(["--redis-patience-secs", "2"])
        .log(temp_path("operator-transient.log"))
        .start()
}

fn scan_body(name: &str, endpoint: &str, secret: &str, bucket: &str, out: &str) -> BucketScan {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "bucketscan.dev/v1alpha1", "kind": "BucketScan",
        "metadata": {"name": name},
        "spec": {
            "source": {"endpoint": endpoint, "bucket": bucket, "pathStyle": true,
                       "credentialsSecret": {"name": secret}},
            "output": {"bucket": out, "prefix": format!("{name}/")},
            "workers": {"replicas": 1},
            "sharding": {"targetShards": 4, "minShardObjects": 10}
        }
    }))
    .unwrap()
}

/// (status, reason, message) of the scan's `Blocked` condition.
async fn blocked(scans: &Api<BucketScan>, name: &str) -> Option<(String, String, String)> {
    let st = scans.get(name).await.ok()?.status?;
    assert_ne!(st.phase, Phase::Failed, "{name} failed: {:?}", st.conditions);
    let c = st.conditions.into_iter().find(|c| c.type_ == "Blocked")?;
    Some((c.status, c.reason, c.message))
}

async fn wait_blocked(scans: &Api<BucketScan>, name: &str, reason: &str) -> String {
    eventually(&format!("{name} blocked by {reason}"), 90, async || {
        let (status, r, message) = blocked(scans, name).await?;
        (status == "True" && r == reason).then_some(message)
    })
    .await
}

/// Planned, and no longer blocked.
async fn wait_unblocked(scans: &Api<BucketScan>, name: &str) {
    eventually(&format!("{name} unblocked and planned"), 90, async || {
        let (status, reason, _) = blocked(scans, name).await?;
        let st = scans.get(name).await.ok()?.status?;
        let planned = st
            .conditions
            .iter()
            .any(|c| c.type_ == "Planned" && c.status == "True");
        (status == "False" && reason == "Unblocked" && planned && st.phase == Phase::Scanning).then_some(())
    })
    .await
}

async fn event_reasons(client: &Client) -> Vec<String> {
    let events: Api<Event> = Api::namespaced(client.clone(), NS);
    let list = events.list(&ListParams::default()).await.unwrap().items;
    list.into_iter().filter_map(|e| e.reason).collect()
}

/// From now on, forward every connection to `listener` to `to` (a store
/// that starts answering).
fn forward(listener: TcpListener, to: String) {
    tokio::spawn(async move {
        while let Ok((mut inbound, _)) = listener.accept().await {
            let to = to.clone();
            tokio::spawn(async move {
                if let Ok(mut outbound) = TcpStream::connect(&to).await {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                }
            });
        }
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transient_causes_block_a_scan_until_they_pass_and_never_fail_it() {
    let client = client().await;
    install_crd(&client).await;
    namespace(&client, NS).await;
    let s3 = versitygw();
    let (bucket, out) = (s3.bucket("transient").await, s3.bucket("transient-out").await);
    let objects: std::collections::BTreeMap<String, Seeded> = (0..50)
        .map(|i| (format!("k/{i:03}"), Seeded::default()))
        .collect();
    s3.seed(&bucket, &objects).await;
    let mut redis = PrivateRedis::start();
    let mut operator = start_operator(&redis.url());
    let scans: Api<BucketScan> = Api::namespaced(client.clone(), NS);

    // 1. The credentials Secret comes a moment after the scan.
    let late = scan_body("late", &s3.endpoint, "late-creds", &bucket, &out);
    scans.create(&PostParams::default(), &late).await.unwrap();
    let message = wait_blocked(&scans, "late", "SecretNotFound").await;
    assert!(
        message.starts_with(
            "Secret \"late-creds\" (spec.source.credentialsSecret) does not exist; retrying in "
        ),
        "{message}"
    );
    // The workers made beside the plan are gone while the scan is blocked:
    // their pods could not even start without the Secret.
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), NS);
    assert!(deployments.get_opt("late-workers").await.unwrap().is_none());
    create_s3_secret(&client, NS, "late-creds", &s3.access_key, &s3.secret_key).await;
    wait_unblocked(&scans, "late").await;

    // 2. The store does not answer yet (nothing listens on its port), then
    //    does.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    let down = scan_body(
        "down",
        &format!("http://127.0.0.1:{port}"),
        "late-creds",
        &bucket,
        &out,
    );
    scans.create(&PostParams::default(), &down).await.unwrap();
    let message = wait_blocked(&scans, "down", "StoreUnavailable").await;
    assert!(message.contains("connection"), "{message}");
    assert!(deployments.get_opt("down-workers").await.unwrap().is_none());
    let listener = TcpListener::bind(("127.0.0.1", port)).await.unwrap();
    forward(listener, s3.endpoint.trim_start_matches("http://").to_string());
    wait_unblocked(&scans, "down").await;

    // 3. Redis goes down while both scan: they wait, then go on (Redis came
    //    back empty: they are planned again).
    redis.crash();
    let message = wait_blocked(&scans, "late", "RedisUnavailable").await;
    assert!(message.contains("redis"), "{message}");
    redis.restart();
    wait_unblocked(&scans, "late").await;
    wait_unblocked(&scans, "down").await;
    let reasons = event_reasons(&client).await;
    for reason in [
        "SecretNotFound",
        "StoreUnavailable",
        "RedisUnavailable",
        "Unblocked",
    ] {
        assert!(
            reasons.iter().any(|r| r == reason),
            "no {reason} event in {reasons:?}"
        );
    }

    // 4. Deleting a scan while Redis is down waits for Redis (its keys must
    //    go) and says how to let it go without; the annotation does.
    redis.crash();
    scans.delete("down", &DeleteParams::default()).await.unwrap();
    // The scan's own reconcile may say RedisUnavailable first (Redis went
    // before the deletion was seen); the deletion's says how to let it go.
    eventually(
        "down's deletion blocked by Redis, with the way out",
        90,
        async || {
            let (status, reason, message) = blocked(&scans, "down").await?;
            (status == "True"
                && reason == "RedisUnavailable"
                && message.contains("bucketscan.dev/skip-cleanup=true"))
            .then_some(())
        },
    )
    .await;
    assert!(
        scans.get_opt("down").await.unwrap().is_some(),
        "deleted without cleaning Redis"
    );
    let skip = serde_json::json!({"metadata": {"annotations": {"bucketscan.dev/skip-cleanup": "true"}}});
    scans
        .patch("down", &PatchParams::default(), &Patch::Merge(&skip))
        .await
        .unwrap();
    eventually("the annotated scan deleted", 60, async || {
        scans.get_opt("down").await.ok()?.is_none().then_some(())
    })
    .await;
    assert!(event_reasons(&client).await.iter().any(|r| r == "CleanupSkipped"));

    // 5. With Redis back, deletion cleans Redis up, the annotation or not: the
    //    annotation (which a tenant may set) skips only what cannot be
    //    reached, and a Redis user and keys left behind would outlive every
    //    quota.
    redis.restart();
    let mut root = redis::Client::open(redis.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let users_and_keys = async |root: &mut redis::aio::MultiplexedConnection| {
        let users: Vec<String> = redis::cmd("ACL").arg("USERS").query_async(root).await.unwrap();
        let keys: Vec<String> = redis::cmd("KEYS").arg("bs:*").query_async(root).await.unwrap();
        let users: Vec<String> = users
            .into_iter()
            .filter(|u| u.starts_with("bucketscan."))
            .collect();
        (users, keys)
    };
    eventually("late's user and keys set again", 60, async || {
        let (users, keys) = users_and_keys(&mut root).await;
        (!users.is_empty() && !keys.is_empty()).then_some(())
    })
    .await;
    scans
        .patch("late", &PatchParams::default(), &Patch::Merge(&skip))
        .await
        .unwrap();
    scans.delete("late", &DeleteParams::default()).await.unwrap();
    eventually("late deleted", 60, async || {
        scans.get_opt("late").await.ok()?.is_none().then_some(())
    })
    .await;
    let (users, keys) = users_and_keys(&mut root).await;
    assert!(users.is_empty(), "a scan user outlives its scan: {users:?}");
    assert!(keys.is_empty(), "keys outlive their scan: {keys:?}");
    operator.stop();
}
