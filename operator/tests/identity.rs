//! No confused deputy: a BucketScan without a credentials Secret never makes
//! the operator reach the store with the operator's own identity. Its
//! planning and the deletion of its parts run as Jobs in the workers' pod
//! (their ServiceAccount: IRSA, Workload Identity), and the operator sends
//! the store nothing at all. A proxy in front of versitygw records every
//! request with its signing key; the operator runs with an identity of its
//! own in its environment, which must never show up. No kubelet here: the
//! test runs the Jobs' pods (`kubelet`) and writes the Job status the job
//! controller would.

mod cluster;
#[path = "../../worker/tests/common/mod.rs"]
mod common;
#[path = "../../worker/tests/common/fault_proxy.rs"]
mod fault_proxy;
mod kubelet;

use bucketscan_operator::crd::{BucketScan, Phase};
use cluster::*;
use common::*;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};
use kubelet::{complete, ended_pod, fail, run_like_pod_as};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

const NS: &str = "identity";
const OPERATOR_KEY: &str = "AKIAOPERATORIDENTITY";

fn start_operator() -> Operator {
    Operator::watching(NS)
        .redis_scan_users()
        // The operator's own cloud identity, as its pod's role would give it.
        .env("AWS_ACCESS_KEY_ID", OPERATOR_KEY)
        .env("AWS_SECRET_ACCESS_KEY", "operator-secret")
        .debug_log()
        .start()
}

/// The only container of Job `name`, once the operator made it.
async fn job_container(jobs: &Api<Job>, name: &str) -> (Job, k8s_openapi::api::core::v1::Container) {
    let job = eventually(&format!("Job {name}"), 60, async || {
        jobs.get_opt(name).await.ok()?
    })
    .await;
    let pod = job.spec.clone().unwrap().template.spec.unwrap();
    assert_eq!(pod.service_account_name.as_deref(), Some("scan-reader"), "{name}");
    let container = pod.containers[0].clone();
    let env: Vec<String> = container.env.iter().flatten().map(|e| e.name.clone()).collect();
    assert!(
        !env.iter()
            .any(|e| e.starts_with("AWS_ACCESS_KEY") || e.starts_with("AWS_SECRET")),
        "{name} carries no credentials of its own: {env:?}"
    );
    (job, container)
}

/// (reason, message) of the namespace's events.
async fn events(client: &kube::Client, ns: &str) -> Vec<(String, String)> {
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(client.clone(), ns);
    let list = events.list(&Default::default()).await.unwrap().items;
    list.into_iter()
        .map(|e| (e.reason.unwrap_or_default(), e.message.unwrap_or_default()))
        .collect()
}

/// The signing keys (`Credential=KEY/...`) of the requests the proxy saw.
fn signers(proxy: &fault_proxy::FaultProxy) -> Vec<String> {
    proxy
        .requests()
        .iter()
        .map(|r| {
            let auth = r.authorization.clone().unwrap_or_default();
            auth.split("Credential=")
                .nth(1)
                .and_then(|c| c.split('/').next())
                .unwrap_or("(unsigned)")
                .to_string()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scan_without_credentials_never_borrows_the_operator_s_identity() {
    let client = client().await;
    install_crd(&client).await;
    namespace(&client, NS).await;
    let s3 = versitygw();
    let bucket = s3.bucket("deputy").await;
    let out = s3.bucket("deputy-out").await;
    let seeded: BTreeMap<String, Seeded> = (0..200)
        .map(|i| (format!("k/{i:04}"), Seeded::default()))
        .collect();
    s3.seed(&bucket, &seeded).await;
    // One bucket the store throttles until the test says otherwise.
    let flaky = s3.bucket("flaky").await;
    let throttling = Arc::new(AtomicBool::new(true));
    let proxy = fault_proxy::start(
        s3.endpoint.clone(),
        {
            let (flaky, throttling) = (flaky.clone(), throttling.clone());
            move |req| {
                (throttling.load(Ordering::Relaxed) && fault_proxy::bucket_of(req.uri.path()) == flaky).then(
                    || fault_proxy::error_document(503, "SlowDown", "Please reduce your request rate.", &[]),
                )
            }
        },
        |_, _| {},
    )
    .await;
    let pod_identity = [
        ("AWS_ACCESS_KEY_ID", s3.access_key.as_str()),
        ("AWS_SECRET_ACCESS_KEY", s3.secret_key.as_str()),
    ];

    let scans: Api<BucketScan> = Api::namespaced(client.clone(), NS);
    let scan: BucketScan = serde_json::from_value(serde_json::json!({
        "apiVersion": "bucketscan.dev/v1alpha1", "kind": "BucketScan",
        "metadata": {"name": "deputy"},
        "spec": {
            "source": {"endpoint": proxy.url, "bucket": bucket, "pathStyle": true},
            "output": {"bucket": out, "prefix": "scan/"},
            "workers": {"podTemplate": {"serviceAccountName": "scan-reader"}},
            "sharding": {"targetShards": 4, "minShardObjects": 20}
        }
    }))
    .unwrap();
    scans.create(&PostParams::default(), &scan).await.unwrap();
    let mut operator = start_operator();

    // Planning is a Job in the workers' pod; the operator sent nothing.
    let jobs: Api<Job> = Api::namespaced(client.clone(), NS);
    let (_, plan) = job_container(&jobs, "deputy-plan").await;
    assert_eq!(plan.args.as_ref().unwrap()[0], "plan");
    let waiting = eventually("Planning", 30, async || {
        let st = scans.get("deputy").await.ok()?.status?;
        let c = st.conditions.into_iter().find(|c| c.type_ == "Complete")?;
        (st.phase == Phase::Planning && c.reason == "Planning").then_some(c.message)
    })
    .await;
    assert!(
        waiting.contains("deputy-plan") && waiting.contains("scan-reader"),
        "{waiting}"
    );
    // No workers beside a plan Job (it may wait out a store that is down,
    // or a pod that cannot start, for minutes): they come after the plan.
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), NS);
    assert!(deployments.get_opt("deputy-workers").await.unwrap().is_none());
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        proxy.requests().is_empty(),
        "the operator reached the store: {:?}",
        signers(&proxy)
    );

    // The "pod" plans with the workers' identity; the Job completes.
    let mut planner = run_like_pod_as(&client, NS, &plan, "deputy-plan-x", &[], &pod_identity).await;
    assert!(
        planner.wait().unwrap().success(),
        "see {}",
        temp_path("deputy-plan-x.log").display()
    );
    complete(&jobs, "deputy-plan").await;
    let planned = eventually("Scanning", 60, async || {
        let st = scans.get("deputy").await.ok()?.status?;
        (st.phase == Phase::Scanning).then_some(st)
    })
    .await;
    assert!(planned.shards.as_ref().unwrap().total >= 1, "{planned:?}");
    let planned_cond = planned.conditions.iter().find(|c| c.type_ == "Planned").unwrap();
    assert!(
        planned_cond.message.contains("planned by Job deputy-plan"),
        "{planned_cond:?}"
    );

    // A part as a worker would leave it (under the scan's own parts
    // folder); then the scan is deleted: its parts go by a Job under the
    // same ServiceAccount.
    let id = bucketscan_operator::desired::scan_id(&scans.get("deputy").await.unwrap());
    let parts_key = format!("scan/parts/{id}/x.jsonl");
    s3.client()
        .put_object()
        .bucket(&out)
        .key(parts_key)
        .body(b"{}".to_vec().into())
        .send()
        .await
        .unwrap();
    scans.delete("deputy", &Default::default()).await.unwrap();
    let (cleanup, delete) = job_container(&jobs, "deputy-delete-parts").await;
    assert!(
        cleanup.metadata.owner_references.is_none(),
        "it outlives the scan"
    );
    assert_eq!(delete.args.as_ref().unwrap()[0], "delete-parts");
    eventually("the scan gone", 30, async || {
        scans.get_opt("deputy").await.ok()?.is_none().then_some(())
    })
    .await;
    let mut deleter = run_like_pod_as(&client, NS, &delete, "deputy-delete-x", &[], &pod_identity).await;
    assert!(
        deleter.wait().unwrap().success(),
        "see {}",
        temp_path("deputy-delete-x.log").display()
    );
    assert_eq!(s3.key_count(&out, "scan/parts/").await, 0);

    // A bucket the pods cannot plan: their Job fails, and so does the scan,
    // pointing at the Job's log.
    let mut missing = scan.clone();
    missing.metadata.name = Some("no-bucket".into());
    missing.spec.source.bucket = format!("{bucket}-missing");
    missing.spec.output.prefix = Some("missing/".into());
    scans.create(&PostParams::default(), &missing).await.unwrap();
    let (_, plan) = job_container(&jobs, "no-bucket-plan").await;
    let mut planner = run_like_pod_as(&client, NS, &plan, "no-bucket-plan-x", &[], &pod_identity).await;
    let exit = planner.wait().unwrap();
    let log = std::fs::read_to_string(temp_path("no-bucket-plan-x.log")).unwrap();
    assert!(
        log.contains("NoSuchBucket") || log.contains("does not exist"),
        "{log}"
    );
    assert_eq!(
        exit.code(),
        Some(1),
        "a missing bucket is no transient cause: {log}"
    );
    // A permanent cause (exit code 1, its pod reported as the kubelet would).
    ended_pod(&client, NS, "no-bucket-plan-x", "no-bucket-plan", 1, &log).await;
    fail(&jobs, "no-bucket-plan").await;
    let reason = eventually("PlanFailed", 30, async || {
        let st = scans.get("no-bucket").await.ok()?.status?;
        let c = st
            .conditions
            .into_iter()
            .find(|c| c.type_ == "Failed" && c.status == "True")?;
        Some((c.reason, c.message))
    })
    .await;
    assert_eq!(reason.0, "PlanFailed");
    assert!(
        reason.1.contains("kubectl logs job/no-bucket-plan"),
        "{}",
        reason.1
    );

    // The store throttles a bucket past every retry: the plan pod gives up
    // with the transient exit code, the Job fails, and the scan plans
    // again with a new Job instead of failing; once the store answers, it
    // is planned.
    let mut throttled = scan.clone();
    throttled.metadata.name = Some("flaky".into());
    throttled.spec.source.bucket = flaky.clone();
    throttled.spec.output.prefix = Some("flaky/".into());
    scans.create(&PostParams::default(), &throttled).await.unwrap();
    let (first, plan) = job_container(&jobs, "flaky-plan").await;
    let mut planner = run_like_pod_as(&client, NS, &plan, "flaky-plan-x", &[], &pod_identity).await;
    let log = || std::fs::read_to_string(temp_path("flaky-plan-x.log")).unwrap();
    assert_eq!(planner.wait().unwrap().code(), Some(75), "{}", log());
    ended_pod(&client, NS, "flaky-plan-x", "flaky-plan", 75, &log()).await;
    fail(&jobs, "flaky-plan").await;
    let retried = eventually("a PlanRetrying event", 60, async || {
        events(&client, NS)
            .await
            .into_iter()
            .find_map(|(reason, message)| (reason == "PlanRetrying").then_some(message))
    })
    .await;
    assert!(
        retried.contains("planning Job flaky-plan failed for a cause that may pass")
            && retried.contains("S3 is throttling (HTTP 503)")
            && retried.contains("planning again (retry 1)"),
        "{retried}"
    );
    let second = eventually("a new plan Job", 60, async || {
        let job = jobs.get_opt("flaky-plan").await.ok()??;
        (job.metadata.uid != first.metadata.uid).then_some(job)
    })
    .await;
    assert_eq!(
        scans.get("flaky").await.unwrap().status.unwrap().phase,
        Phase::Planning
    );
    // The deleted Job's pod goes with it (the garbage collector's part).
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    pods.delete("flaky-plan-x", &Default::default()).await.unwrap();
    throttling.store(false, Ordering::Relaxed);
    let plan = second.spec.unwrap().template.spec.unwrap().containers.remove(0);
    let mut planner = run_like_pod_as(&client, NS, &plan, "flaky-plan-y", &[], &pod_identity).await;
    assert!(
        planner.wait().unwrap().success(),
        "see {}",
        temp_path("flaky-plan-y.log").display()
    );
    complete(&jobs, "flaky-plan").await;
    eventually("flaky planned", 60, async || {
        let st = scans.get("flaky").await.ok()?.status?;
        (st.phase == Phase::Scanning).then_some(())
    })
    .await;

    // Every request the store saw was signed with the pods' identity.
    let keys = signers(&proxy);
    assert!(!keys.is_empty());
    assert!(keys.iter().all(|k| k == &s3.access_key), "{keys:?}");
    operator.stop();
}
