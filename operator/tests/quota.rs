//! The ResourceQuota that docs/operations.md tells platform teams to give
//! each tenant namespace (`count/bucketscans.bucketscan.dev`), on the test
//! ground's kube-apiserver: with the cluster's resourcequota controller
//! running (kube-controller-manager with only that controller, as in any
//! cluster), the API server refuses the BucketScan past the quota, and
//! admits one again once another is deleted. The ResourceQuota admission
//! plugin alone enforces nothing: a quota whose status the controller has
//! not written (its hard limits) lets every create through.

mod cluster;

use bucketscan_operator::crd::BucketScan;
use cluster::*;
use k8s_openapi::api::core::v1::ResourceQuota;
use kube::api::{Api, DeleteParams, PostParams};

const NS: &str = "quota";

/// kube-controller-manager with the resourcequota controller only.
fn quota_controller() -> Guarded {
    controller_manager(
        "resourcequota",
        &["--resource-quota-sync-period=5s"],
        &std::env::temp_dir().join(format!("bucketscan-quota-controller-{}.log", std::process::id())),
    )
}

fn scan(name: &str) -> BucketScan {
    s3_scan(
        name,
        "http://s3.example",
        "data",
        "results",
        serde_json::json!({"suspend": true}),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resource_quota_refuses_the_bucketscan_past_its_count() {
    let client = client().await;
    install_crd(&client).await;
    namespace(&client, NS).await;
    let quota: ResourceQuota = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "bucketscans"},
        "spec": {"hard": {"count/bucketscans.bucketscan.dev": "2"}}
    }))
    .unwrap();
    // Without the controller: three scans under a quota of two.
    namespace(&client, "quota-unsynced").await;
    let unsynced: Api<ResourceQuota> = Api::namespaced(client.clone(), "quota-unsynced");
    unsynced.create(&PostParams::default(), &quota).await.unwrap();
    let unsynced_scans: Api<BucketScan> = Api::namespaced(client.clone(), "quota-unsynced");
    for name in ["one", "two", "three"] {
        unsynced_scans
            .create(&PostParams::default(), &scan(name))
            .await
            .unwrap();
    }

    let quotas: Api<ResourceQuota> = Api::namespaced(client.clone(), NS);
    quotas.create(&PostParams::default(), &quota).await.unwrap();
    let mut controller = quota_controller();
    eventually("the quota's status", 60, async || {
        let status = quotas.get("bucketscans").await.ok()?.status?;
        status
            .hard?
            .contains_key("count/bucketscans.bucketscan.dev")
            .then_some(())
    })
    .await;

    let scans: Api<BucketScan> = Api::namespaced(client.clone(), NS);
    for name in ["one", "two"] {
        scans.create(&PostParams::default(), &scan(name)).await.unwrap();
    }
    let refused = scans
        .create(&PostParams::default(), &scan("three"))
        .await
        .unwrap_err();
    let kube::Error::Api(answer) = &refused else {
        panic!("{refused:?}")
    };
    assert_eq!(answer.code, 403, "{answer:?}");
    assert!(
        answer.message.contains("exceeded quota: bucketscans"),
        "{}",
        answer.message
    );
    assert!(
        answer.message.contains("count/bucketscans.bucketscan.dev=2"),
        "{}",
        answer.message
    );

    // One goes (no operator runs here: its finalizer is not set), and the
    // controller counts it out: another may come.
    scans.delete("one", &DeleteParams::default()).await.unwrap();
    eventually("a place in the quota", 60, async || {
        scans.create(&PostParams::default(), &scan("three")).await.ok()
    })
    .await;
    controller.stop();
}
