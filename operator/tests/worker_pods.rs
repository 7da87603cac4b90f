//! Worker pods that cannot start show in the BucketScan: the real operator
//! binary against the test ground's kube-apiserver. The ground has no
//! kubelet, scheduler or controller-manager, so the test writes what they
//! would report (pod status, the Deployment's ReplicaFailure condition)
//! through the status subresources, as they do; the operator reads it back
//! as in a cluster. A pod that cannot pull its image, crash-loops or cannot
//! be scheduled, a quota refusal, a
//! scan without progress past the stall threshold, and a plan Job whose pod
//! cannot pull its image each say why.

mod cluster;
#[path = "../../worker/tests/common/mod.rs"]
mod common;

use bucketscan_operator::crd::BucketScan;
use cluster::*;
use common::*;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Event, Pod};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use std::process::Command;

const NS: &str = "worker-pods";

async fn condition(scans: &Api<BucketScan>, type_: &str) -> Option<(String, String, String)> {
    let st = scans.get("stuck").await.ok()?.status?;
    let c = st.conditions.into_iter().find(|c| c.type_ == type_)?;
    Some((c.status, c.reason, c.message))
}

/// A worker pod as the Deployment would make it, with `status` as the
/// kubelet would report it.
async fn worker_pod(pods: &Api<Pod>, name: &str, status: serde_json::Value) {
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "labels": {
            "app.kubernetes.io/name": "bucketscan", "app.kubernetes.io/component": "worker",
            "app.kubernetes.io/instance": "stuck", "app.kubernetes.io/managed-by": "bucketscan-operator"}},
        "spec": {"containers": [{"name": "worker", "image": "registry.invalid/bucketscan:nope"}]}
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    set_pod_status(pods, name, status).await;
}

const PULL: &str = "Back-off pulling image \"registry.invalid/bucketscan:nope\"";

/// A pod status as the kubelet reports a container that cannot pull its
/// image.
fn image_pull_back_off() -> serde_json::Value {
    serde_json::json!({"phase": "Pending",
    "containerStatuses": [{"name": "worker", "image": "registry.invalid/bucketscan:nope", "imageID": "",
        "ready": false, "restartCount": 0,
        "state": {"waiting": {"reason": "ImagePullBackOff", "message": PULL}}}]})
}

/// A pod status as the kubelet reports a running, ready pod.
fn running_and_ready() -> serde_json::Value {
    serde_json::json!({"phase": "Running",
    "containerStatuses": [{"name": "worker", "image": "x", "imageID": "", "ready": true,
        "restartCount": 0, "state": {"running": {}}}],
    "conditions": [{"type": "Ready", "status": "True"}]})
}

async fn set_pod_status(pods: &Api<Pod>, name: &str, status: serde_json::Value) {
    let patch = serde_json::json!({"status": status});
    pods.patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_that_cannot_start_and_a_stalled_scan_say_why() {
    let client = client().await;
    install_crd(&client).await;
    namespace(&client, NS).await;
    let s3 = versitygw();
    create_s3_secret(&client, NS, "s3", &s3.access_key, &s3.secret_key).await;
    let (bucket, out) = (s3.bucket("pods").await, s3.bucket("pods-out").await);
    let objects: std::collections::BTreeMap<String, Seeded> = (0..20)
        .map(|i| (format!("k/{i:02}"), Seeded::default()))
        .collect();
    s3.seed(&bucket, &objects).await;
    let mut operator = Operator::watching(NS).args(["--stall-seconds", "4"]).start();
    let scans: Api<BucketScan> = Api::namespaced(client.clone(), NS);
    let scan: BucketScan = serde_json::from_value(serde_json::json!({
        "apiVersion": "bucketscan.dev/v1alpha1", "kind": "BucketScan",
        "metadata": {"name": "stuck"},
        "spec": {
            "source": {"endpoint": s3.endpoint, "bucket": bucket, "pathStyle": true,
                       "credentialsSecret": {"name": "s3"}},
            "output": {"bucket": out},
            "workers": {"replicas": 2}
        }
    }))
    .unwrap();
    scans.create(&PostParams::default(), &scan).await.unwrap();
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), NS);
    eventually("the worker Deployment", 60, async || {
        deployments.get_opt("stuck-workers").await.ok()?.map(|_| ())
    })
    .await;

    // One pod runs, the other cannot pull its image.
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    worker_pod(
        &pods,
        "stuck-workers-a",
        serde_json::json!({"phase": "Running",
        "conditions": [{"type": "Ready", "status": "True"}]}),
    )
    .await;
    let pull = PULL;
    worker_pod(&pods, "stuck-workers-b", image_pull_back_off()).await;
    let (status, reason, message) = eventually("WorkersReady=False", 30, async || {
        condition(&scans, "WorkersReady")
            .await
            .filter(|c| c.1 == "ImagePullBackOff")
    })
    .await;
    assert_eq!(status, "False");
    assert_eq!(reason, "ImagePullBackOff");
    assert_eq!(
        message,
        format!("1/2 worker pods ready; pod stuck-workers-b: ImagePullBackOff: {pull}")
    );
    let st = scans.get("stuck").await.unwrap().status.unwrap();
    assert_eq!(
        (st.workers_ready.as_deref(), st.numbers.ready_workers),
        (Some("1/2"), Some(1))
    );

    // Nothing is scanned (no worker really runs): past the stall threshold
    // the scan says so, with what the pods say, and Ready says it too.
    let (_, _, stalled) = eventually("Progressing=False", 30, async || {
        condition(&scans, "Progressing").await.filter(|c| c.0 == "False")
    })
    .await;
    assert!(
        stalled.starts_with("no object scanned for ") && stalled.contains("ImagePullBackOff"),
        "{stalled}"
    );
    let (_, ready_reason, _) = condition(&scans, "Ready").await.unwrap();
    assert_eq!(ready_reason, "NoProgress");
    // The events follow the status write just seen.
    for reason in ["ImagePullBackOff", "NoProgress"] {
        wait_event(&client, NS, reason).await;
    }

    // The pod then crash-loops, then cannot be placed: each says why.
    let crash = "back-off 40s restarting failed container=worker pod=stuck-workers-b";
    let crashing = serde_json::json!({"phase": "Running",
        "containerStatuses": [{"name": "worker", "image": "x", "imageID": "", "ready": false, "restartCount": 4,
            "state": {"waiting": {"reason": "CrashLoopBackOff", "message": crash}}}]});
    let nodes = "0/3 nodes are available: 3 Insufficient cpu.";
    let unplaced = serde_json::json!({"phase": "Pending", "containerStatuses": [],
        "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": nodes}]});
    for (reason, detail, status) in [
        ("CrashLoopBackOff", crash, crashing),
        ("Unschedulable", nodes, unplaced),
    ] {
        set_pod_status(&pods, "stuck-workers-b", status).await;
        let (_, _, message) = eventually(reason, 30, async || {
            condition(&scans, "WorkersReady").await.filter(|c| c.1 == reason)
        })
        .await;
        assert_eq!(
            message,
            format!("1/2 worker pods ready; pod stuck-workers-b: {reason}: {detail}")
        );
    }

    // The image comes: every pod ready, and `kubectl get` shows it.
    set_pod_status(&pods, "stuck-workers-b", running_and_ready()).await;
    eventually("WorkersReady=True", 30, async || {
        condition(&scans, "WorkersReady").await.filter(|c| c.0 == "True")
    })
    .await;
    let out = Command::new("kubectl")
        .args(["get", "bucketscan", "stuck", "-n", NS])
        .env("KUBECONFIG", kubeconfig_path())
        .output()
        .expect("kubectl (scripts/install-kube.sh installs it)");
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        table.lines().nth(1).is_some_and(|l| l.contains(" 2/2 ")),
        "{table}"
    );

    // A quota refuses the next pod: the Deployment says so (as its
    // controller reports a ReplicaSet's FailedCreate), and so does the scan.
    pods.delete("stuck-workers-b", &DeleteParams::default())
        .await
        .unwrap();
    let quota = "pods \"stuck-workers-c\" is forbidden: exceeded quota: compute, requested: cpu=250m, used: cpu=2, limited: cpu=2";
    let failure = serde_json::json!({"status": {"conditions": [{"type": "ReplicaFailure", "status": "True",
        "reason": "FailedCreate", "message": quota}]}});
    deployments
        .patch_status("stuck-workers", &PatchParams::default(), &Patch::Merge(&failure))
        .await
        .unwrap();
    let (_, _, message) = eventually("FailedCreate", 30, async || {
        condition(&scans, "WorkersReady")
            .await
            .filter(|c| c.1 == "FailedCreate")
    })
    .await;
    assert_eq!(
        message,
        format!("1/2 worker pods ready; the worker pods cannot be created: {quota}")
    );

    scans.delete("stuck", &DeleteParams::default()).await.unwrap();
    eventually("stuck deleted", 60, async || {
        scans.get_opt("stuck").await.ok()?.is_none().then_some(())
    })
    .await;
    let _ = pods.delete("stuck-workers-a", &DeleteParams::default()).await;
    operator.stop();
}

/// A scan on its pods' identity plans in a Job; that Job's pod cannot pull
/// its image: the scan, still Planning, says so in its Complete condition
/// and an event, and goes back to "running" once the pod runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_job_whose_pod_cannot_run_says_why() {
    const NS: &str = "job-pods";
    let client = client().await;
    install_crd(&client).await;
    namespace(&client, NS).await;
    let s3 = versitygw();
    let (bucket, out) = (s3.bucket("jobpods").await, s3.bucket("jobpods-out").await);
    let mut operator = Operator::watching(NS).start();
    let scans: Api<BucketScan> = Api::namespaced(client.clone(), NS);
    let scan: BucketScan = serde_json::from_value(serde_json::json!({
        "apiVersion": "bucketscan.dev/v1alpha1", "kind": "BucketScan",
        "metadata": {"name": "jp"},
        "spec": {
            "source": {"endpoint": s3.endpoint, "bucket": bucket, "pathStyle": true},
            "output": {"bucket": out}
        }
    }))
    .unwrap();
    scans.create(&PostParams::default(), &scan).await.unwrap();
    let complete = async || {
        let st = scans.get("jp").await.ok()?.status?;
        let c = st.conditions.into_iter().find(|c| c.type_ == "Complete")?;
        Some((c.reason, c.message))
    };
    eventually("the plan Job runs", 60, async || {
        complete()
            .await
            .filter(|(_, m)| m == "planning Job jp-plan is running")
    })
    .await;

    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "jp-plan-x", "labels": {"job-name": "jp-plan"}},
        "spec": {"containers": [{"name": "worker", "image": "registry.invalid/bucketscan:nope"}]}
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    let pull = PULL;
    set_pod_status(&pods, "jp-plan-x", image_pull_back_off()).await;
    let (reason, message) = eventually("the stuck plan pod in the status", 30, async || {
        complete().await.filter(|(_, m)| m.contains("ImagePullBackOff"))
    })
    .await;
    assert_eq!(reason, "Planning");
    assert_eq!(
        message,
        format!("planning Job jp-plan cannot run: pod jp-plan-x: ImagePullBackOff: {pull}")
    );
    let events: Api<Event> = Api::namespaced(client.clone(), NS);
    eventually("an ImagePullBackOff event", 30, async || {
        let list = events.list(&ListParams::default()).await.ok()?.items;
        list.into_iter()
            .any(|e| e.reason.as_deref() == Some("ImagePullBackOff"))
            .then_some(())
    })
    .await;

    // The image comes: the Job runs again as far as the scan can tell.
    set_pod_status(&pods, "jp-plan-x", running_and_ready()).await;
    eventually("running again", 30, async || {
        complete()
            .await
            .filter(|(_, m)| m == "planning Job jp-plan is running")
    })
    .await;

    scans.delete("jp", &DeleteParams::default()).await.unwrap();
    eventually("jp deleted", 60, async || {
        scans.get_opt("jp").await.ok()?.is_none().then_some(())
    })
    .await;
    let _ = pods.delete("jp-plan-x", &DeleteParams::default()).await;
    operator.stop();
}
