//! What a platform team controls about a scan, with the real operator binary
//! against the test ground's kube-apiserver, Redis and versitygw: the worker
//! image allowlist, the worker pod template reaching a Deployment the API
//! server accepts, `suspend` (workers gone, work kept, no merge; resume ends
//! with every object exactly once), `activeDeadlineSeconds`, and the scan's
//! own Redis ACL user in its Secret.

mod cluster;
#[path = "../../worker/tests/common/mod.rs"]
mod common;
mod kubelet;

use bucketscan_operator::crd::{BucketScan, Phase};
use cluster::*;
use common::*;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::Client;
use kubelet::{run_like_pod, terminate};
use std::collections::BTreeMap;
use std::time::Duration;

fn start_operator(ns: &str, env: &[(&str, &str)]) -> Operator {
    env.iter()
        .fold(
            Operator::watching(ns).redis_scan_users().lease_secs(5),
            |operator, (key, value)| operator.env(key, value),
        )
        .start()
}

/// A namespace with an S3 credentials Secret `s3` for `s3`.
async fn ground(client: &Client, ns: &str, s3: &Server) {
    install_crd(client).await;
    namespace(client, ns).await;
    create_s3_secret(client, ns, "s3", &s3.access_key, &s3.secret_key).await;
}

fn scan_body(name: &str, s3: &Server, bucket: &str, out: &str, extra: serde_json::Value) -> BucketScan {
    let mut spec = serde_json::json!({
        "workers": {"replicas": 2, "concurrency": 16},
        "sharding": {"targetShards": 16, "minShardObjects": 100}
    });
    for (k, v) in extra.as_object().unwrap() {
        spec[k] = v.clone();
    }
    s3_scan(name, &s3.endpoint, bucket, out, spec)
}

async fn set_suspend(scans: &Api<BucketScan>, name: &str, suspend: bool) {
    let patch = serde_json::json!({"spec": {"suspend": suspend}});
    scans
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn images_are_allowlisted_and_the_pod_template_reaches_the_workers() {
    const NS: &str = "images";
    let client = client().await;
    let s3 = versitygw();
    ground(&client, NS, &s3).await;
    let bucket = s3.bucket("img").await;
    let out = s3.bucket("img-out").await;
    s3.seed(
        &bucket,
        &(0..20).map(|i| (format!("k{i:02}"), Seeded::default())).collect(),
    )
    .await;
    let mut operator = start_operator(
        NS,
        &[(
            "BUCKETSCAN_ALLOWED_WORKER_IMAGES",
            "reg.example/bucketscan,mirror.example/team/",
        )],
    );
    let scans: Api<BucketScan> = Api::namespaced(client.clone(), NS);

    let evil = scan_body(
        "evil",
        &s3,
        &bucket,
        &out,
        serde_json::json!({"workers": {"replicas": 1, "image": "reg.example/bucketscan-miner:1"}}),
    );
    scans.create(&PostParams::default(), &evil).await.unwrap();
    let (status, reason, message) = eventually("evil refused", 60, async || {
        condition(&scans, "evil", "Failed").await
    })
    .await;
    assert_eq!((status.as_str(), reason.as_str()), ("True", "ImageNotAllowed"));
    assert!(
        message.contains("\"reg.example/bucketscan-miner:1\" is not allowed")
            && message.contains("allowed: reg.example/bucketscan, mirror.example/team/"),
        "{message}"
    );
    // The event follows the status write.
    eventually("an ImageNotAllowed event", 30, async || {
        event_reasons(&client, NS)
            .await
            .iter()
            .any(|r| r == "ImageNotAllowed")
            .then_some(())
    })
    .await;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), NS);
    assert!(deployments.get_opt("evil-workers").await.unwrap().is_none());

    // Refused on its pods' identity (no credentialsSecret) and deleted: its
    // parts are deleted by a Job, which never runs the refused image.
    let mut evil_pods = scan_body(
        "evil-pods",
        &s3,
        &bucket,
        &out,
        serde_json::json!({"workers": {"replicas": 1, "image": "reg.example/bucketscan-miner:1"}}),
    );
    evil_pods.spec.source.credentials_secret = None;
    scans.create(&PostParams::default(), &evil_pods).await.unwrap();
    eventually("evil-pods refused", 60, async || {
        let (status, reason, _) = condition(&scans, "evil-pods", "Failed").await?;
        (status == "True" && reason == "ImageNotAllowed").then_some(())
    })
    .await;
    scans.delete("evil-pods", &DeleteParams::default()).await.unwrap();
    let jobs: Api<Job> = Api::namespaced(client.clone(), NS);
    let cleanup = eventually("evil-pods' delete-parts Job", 60, async || {
        jobs.get_opt("evil-pods-delete-parts").await.ok()?
    })
    .await;
    let pod = cleanup.spec.unwrap().template.spec.unwrap();
    assert_eq!(
        pod.containers[0].image.as_deref(),
        Some(bucketscan_operator::desired::DEFAULT_IMAGE),
        "the refused image must not run on deletion"
    );

    let template = serde_json::json!({
        "labels": {"team": "a", "app.kubernetes.io/component": "mine"},
        "annotations": {"cost-center": "42"},
        "nodeSelector": {"pool": "scan"},
        "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "scan", "effect": "NoSchedule"}],
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]}}},
        "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "ScheduleAnyway",
            "labelSelector": {"matchLabels": {"app.kubernetes.io/instance": "good"}}}],
        "priorityClassName": "batch-low",
        "imagePullSecrets": [{"name": "regcred"}],
        "serviceAccountName": "s3-reader"
    });
    let good = scan_body(
        "good",
        &s3,
        &bucket,
        &out,
        serde_json::json!({"workers": {"replicas": 1, "image": "mirror.example/team/bucketscan:2", "podTemplate": template}}),
    );
    scans.create(&PostParams::default(), &good).await.unwrap();
    let deployment = eventually("good's workers", 60, async || {
        deployments.get_opt("good-workers").await.unwrap()
    })
    .await;
    let spec = deployment.spec.unwrap();
    let meta = spec.template.metadata.unwrap();
    let labels = meta.labels.unwrap();
    assert_eq!(labels["team"], "a");
    assert_eq!(
        labels["app.kubernetes.io/component"], "worker",
        "the selector label is the operator's"
    );
    assert_eq!(meta.annotations.unwrap()["cost-center"], "42");
    let pod = spec.template.spec.unwrap();
    assert_eq!(
        pod.containers[0].image.as_deref(),
        Some("mirror.example/team/bucketscan:2")
    );
    assert_eq!(pod.node_selector.unwrap()["pool"], "scan");
    assert_eq!(pod.tolerations.unwrap()[0].value.as_deref(), Some("scan"));
    assert!(pod.affinity.unwrap().node_affinity.is_some());
    assert_eq!(pod.topology_spread_constraints.unwrap()[0].topology_key, "zone");
    assert_eq!(pod.priority_class_name.as_deref(), Some("batch-low"));
    assert_eq!(pod.image_pull_secrets.unwrap()[0].name, "regcred");
    assert_eq!(pod.service_account_name.as_deref(), Some("s3-reader"));
    let resources = pod.containers[0].resources.clone().unwrap();
    assert_eq!(
        resources,
        bucketscan_operator::desired::default_worker_resources(),
        "no BestEffort worker"
    );
    assert_ne!(
        condition(&scans, "good", "Failed").await.map(|c| c.0),
        Some("True".into())
    );

    delete_scans(&scans, &["evil", "good"]).await;
    operator.stop();
}

/// `cmd` on a fresh connection to `url`: the reply, or Redis' error text.
async fn redis_reply(url: &str, cmd: &redis::Cmd) -> Result<redis::Value, String> {
    let client = redis::Client::open(url).map_err(|e| e.to_string())?;
    let mut con = client
        .get_multiplexed_async_connection()
        .await
        .map_err(|e| e.to_string())?;
    cmd.query_async(&mut con).await.map_err(|e| e.to_string())
}

/// What a tenant who reads its scan's Redis Secret holds: the scan's own
/// ACL user (not the operator's password), which reaches the scan's keys
/// and nothing else, and which goes with the scan.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scan_s_redis_secret_holds_its_own_user_which_goes_with_the_scan() {
    const NS: &str = "scan-user";
    let client = client().await;
    let s3 = versitygw();
    ground(&client, NS, &s3).await;
    let bucket = s3.bucket("own").await;
    let out = s3.bucket("own-out").await;
    s3.seed(
        &bucket,
        &(0..20).map(|i| (format!("k{i:02}"), Seeded::default())).collect(),
    )
    .await;
    let mut operator = start_operator(NS, &[]);
    let scans: Api<BucketScan> = Api::namespaced(client.clone(), NS);
    let scan = scan_body("own", &s3, &bucket, &out, serde_json::json!({}));
    let created = scans.create(&PostParams::default(), &scan).await.unwrap();
    let secrets: Api<Secret> = Api::namespaced(client.clone(), NS);
    let secret = eventually("own's Redis Secret", 60, async || {
        secrets.get_opt("own-redis").await.ok()?
    })
    .await;
    let url = String::from_utf8(secret.data.unwrap()["url"].0.clone()).unwrap();
    let admin = std::env::var("BUCKETSCAN_TEST_REDIS_URL").unwrap();
    assert!(
        !url.starts_with(&admin),
        "the operator's own URL was handed out: {admin}"
    );

    let uid: String = created
        .metadata
        .uid
        .unwrap()
        .chars()
        .filter(|c| *c != '-')
        .take(8)
        .collect();
    let user = format!("bucketscan.{NS}.own.{uid}");
    assert!(
        url.starts_with(&format!("redis://{user}:")),
        "the scan's own user: {url}"
    );
    let exists = redis_reply(&admin, redis::cmd("ACL").arg("GETUSER").arg(&user))
        .await
        .unwrap();
    assert_ne!(exists, redis::Value::Nil, "{user} is a Redis user");
    let own_key = format!("bs:{{{NS}.own.{uid}}}:meta");
    eventually("the scan's own spec read with its user", 60, async || {
        let exists = redis_reply(&url, redis::cmd("EXISTS").arg(&own_key)).await;
        (exists == Ok(redis::Value::Int(1))).then_some(())
    })
    .await;
    for other in ["bs:{other.scan.1}:spec", "some-other-key"] {
        let refused = redis_reply(&url, redis::cmd("GET").arg(other)).await.unwrap_err();
        assert!(refused.to_uppercase().contains("NOPERM"), "{other}: {refused}");
    }

    scans.delete("own", &DeleteParams::default()).await.unwrap();
    eventually("own's ACL user deleted", 60, async || {
        let got = redis_reply(&admin, redis::cmd("ACL").arg("GETUSER").arg(&user))
            .await
            .ok()?;
        (got == redis::Value::Nil).then_some(())
    })
    .await;
    let refused = redis_reply(&url, &redis::cmd("PING")).await.unwrap_err();
    assert!(
        ["WRONGPASS", "AUTHENTICATION", "INVALID"]
            .iter()
            .any(|w| refused.to_uppercase().contains(w)),
        "{refused}"
    );
    operator.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_suspended_scan_keeps_its_work_starts_no_merge_and_resumes_exactly() {
    const NS: &str = "suspend";
    let client = client().await;
    let s3 = versitygw();
    ground(&client, NS, &s3).await;
    let bucket = s3.bucket("sus").await;
    let out = s3.bucket("sus-out").await;
    // Shards hold at least a LIST page (1,000 keys): 4 of them.
    let seeded: BTreeMap<String, Seeded> = (0..4000)
        .map(|i| (format!("d{}/{i:05}", i % 8), Seeded::default()))
        .collect();
    s3.seed(&bucket, &seeded).await;
    let mut operator = start_operator(NS, &[]);
    let scans: Api<BucketScan> = Api::namespaced(client.clone(), NS);
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), NS);
    let jobs: Api<Job> = Api::namespaced(client.clone(), NS);

    // Created suspended: nothing is planned, no workers.
    // One shard at a time per worker, so shards finish one after another.
    let scan = scan_body(
        "pics",
        &s3,
        &bucket,
        &out,
        serde_json::json!({"suspend": true,
                           "workers": {"replicas": 2, "concurrency": 16, "shardsInFlight": 1}}),
    );
    scans.create(&PostParams::default(), &scan).await.unwrap();
    let (status, reason, _) = eventually("Suspended", 60, async || {
        condition(&scans, "pics", "Suspended").await
    })
    .await;
    assert_eq!((status.as_str(), reason.as_str()), ("True", "Suspended"));
    let st = scans.get("pics").await.unwrap().status.unwrap();
    assert_eq!((st.phase, st.workers), (Phase::Pending, Some(0)), "{st:?}");
    assert!(deployments.get_opt("pics-workers").await.unwrap().is_none());

    // Resumed: planned, workers wanted.
    set_suspend(&scans, "pics", false).await;
    let deployment = eventually("workers", 60, async || {
        deployments.get_opt("pics-workers").await.unwrap()
    })
    .await;
    let container = deployment.spec.unwrap().template.spec.unwrap().containers[0].clone();
    let args = container.args.clone().unwrap().join(" ");
    assert!(args.contains("--shards-in-flight 1"), "{args}");
    // Paced (10 s a shard) so the suspension lands mid-scan.
    let pace = ["--max-rate", "100", "--part-objects", "50"];
    let mut a = run_like_pod(&client, NS, &container, "pics-workers-a", &pace).await;
    let mut b = run_like_pod(&client, NS, &container, "pics-workers-b", &pace).await;
    let planned = eventually("a finished shard", 90, async || {
        let shards = scans.get("pics").await.ok()?.status?.shards?;
        (shards.done >= 1).then_some(shards)
    })
    .await;
    assert!(planned.total >= 4 && planned.done < planned.total, "{planned:?}");

    // A merge Job the operator started ahead of the last shard (it does in
    // a scan's last seconds; made here, the scan's own, so that the test
    // does not depend on the estimate): suspending the scan stops it too.
    let uid = scans.get("pics").await.unwrap().metadata.uid.unwrap();
    let ahead: Job = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "pics-merge", "ownerReferences": [{"apiVersion": "bucketscan.dev/v1alpha1",
            "kind": "BucketScan", "name": "pics", "uid": uid, "controller": true}]},
        "spec": {"template": {"spec": {"restartPolicy": "Never",
            "containers": [{"name": "merge", "image": "bucketscan", "args": ["merge", "--wait-for-shards"]}]}}}
    }))
    .unwrap();
    if jobs.get_opt("pics-merge").await.unwrap().is_none() {
        jobs.create(&PostParams::default(), &ahead).await.unwrap();
    }

    // Suspended mid-scan: the Deployment goes (its pods get SIGTERM; `a`
    // does here and releases its shard); `b` stands for a pod slow to stop
    // and finishes every shard while suspended. No merge may start.
    set_suspend(&scans, "pics", true).await;
    eventually("workers removed", 30, async || {
        deployments
            .get_opt("pics-workers")
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;
    terminate(&a);
    assert!(
        wait_exit(&mut a, Duration::from_secs(30)).success(),
        "worker a on SIGTERM"
    );
    assert!(wait_exit(&mut b, Duration::from_secs(120)).success(), "worker b");
    let done = eventually("every shard done, reported while suspended", 30, async || {
        let st = scans.get("pics").await.ok()?.status?;
        let s = st.shards.clone()?;
        (s.done == s.total && s.pending + s.leased == 0).then_some(st)
    })
    .await;
    assert!(done
        .conditions
        .iter()
        .any(|c| c.type_ == "Suspended" && c.status == "True"));
    assert_eq!(done.workers, Some(0));
    tokio::time::sleep(Duration::from_secs(8)).await;
    assert!(
        jobs.get_opt("pics-merge").await.unwrap().is_none(),
        "a merge started while suspended"
    );
    assert_eq!(
        scans.get("pics").await.unwrap().status.unwrap().phase,
        Phase::Scanning
    );

    // Resumed: the merge, then Complete with every object exactly once.
    set_suspend(&scans, "pics", false).await;
    let job = eventually("merge Job", 60, async || {
        jobs.get_opt("pics-merge").await.unwrap()
    })
    .await;
    let (status, reason, _) = condition(&scans, "pics", "Suspended").await.unwrap();
    assert_eq!((status.as_str(), reason.as_str()), ("False", "Resumed"));
    let merge_container = job.spec.unwrap().template.spec.unwrap().containers[0].clone();
    let mut merge = run_like_pod(&client, NS, &merge_container, "pics-merge-x", &[]).await;
    assert!(
        wait_exit(&mut merge, Duration::from_secs(60)).success(),
        "merge failed"
    );
    eventually("Complete", 60, async || {
        (scans.get("pics").await.ok()?.status?.phase == Phase::Complete).then_some(())
    })
    .await;
    assert_matches_seed(&parse_records(&s3.read(&out, "pics/result.jsonl").await), &seeded);
    let complete = scans.get("pics").await.unwrap().status.unwrap();
    let (ready, _, message) = condition(&scans, "pics", "Ready").await.unwrap();
    assert_eq!(ready, "True", "{message}");
    let numbers = &complete.numbers;
    assert!(numbers.objects_done.unwrap() >= 4000, "{numbers:?}");
    let estimate = numbers.objects_estimate.unwrap();
    assert!(estimate > 0 && estimate <= 4000, "{numbers:?}");
    assert_eq!(numbers.eta_seconds, None, "{numbers:?}");
    // Events follow the status writes.
    for reason in ["Suspended", "Resumed", "Complete"] {
        eventually(&format!("a {reason} event"), 30, async || {
            event_reasons(&client, NS)
                .await
                .iter()
                .any(|r| r == reason)
                .then_some(())
        })
        .await;
    }
    scans.delete("pics", &DeleteParams::default()).await.unwrap();
    eventually("deleted", 60, async || {
        scans.get_opt("pics").await.unwrap().is_none().then_some(())
    })
    .await;

    // A scan planning by Job (on its pods' identity), suspended: its plan
    // Job stops; resumed: a new one plans.
    let mut planning = scan_body("pics-plan", &s3, &bucket, &out, serde_json::json!({}));
    planning.spec.source.credentials_secret = None;
    scans.create(&PostParams::default(), &planning).await.unwrap();
    let first = eventually("the plan Job", 60, async || {
        jobs.get_opt("pics-plan-plan").await.ok()?
    })
    .await;
    set_suspend(&scans, "pics-plan", true).await;
    eventually("the plan Job stopped", 60, async || {
        jobs.get_opt("pics-plan-plan").await.ok()?.is_none().then_some(())
    })
    .await;
    set_suspend(&scans, "pics-plan", false).await;
    eventually("a new plan Job", 60, async || {
        let job = jobs.get_opt("pics-plan-plan").await.ok()??;
        (job.metadata.uid != first.metadata.uid).then_some(())
    })
    .await;
    scans.delete("pics-plan", &DeleteParams::default()).await.unwrap();
    eventually("pics-plan deleted", 60, async || {
        scans.get_opt("pics-plan").await.unwrap().is_none().then_some(())
    })
    .await;
    operator.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scan_past_its_deadline_fails_and_loses_its_workers() {
    const NS: &str = "deadline";
    let client = client().await;
    let s3 = versitygw();
    ground(&client, NS, &s3).await;
    let bucket = s3.bucket("dl").await;
    let out = s3.bucket("dl-out").await;
    s3.seed(
        &bucket,
        &(0..50).map(|i| (format!("k{i:02}"), Seeded::default())).collect(),
    )
    .await;
    let mut operator = start_operator(NS, &[]);
    let scans: Api<BucketScan> = Api::namespaced(client.clone(), NS);
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), NS);
    let scan = scan_body(
        "slow",
        &s3,
        &bucket,
        &out,
        serde_json::json!({"activeDeadlineSeconds": 6}),
    );
    scans.create(&PostParams::default(), &scan).await.unwrap();
    // No worker runs (no kubelet), so the scan outlives its deadline.
    eventually("workers", 60, async || {
        deployments.get_opt("slow-workers").await.unwrap()
    })
    .await;
    let (status, reason, message) = eventually("DeadlineExceeded", 60, async || {
        condition(&scans, "slow", "Failed").await
    })
    .await;
    assert_eq!((status.as_str(), reason.as_str()), ("True", "DeadlineExceeded"));
    assert!(message.contains("activeDeadlineSeconds (6 s)"), "{message}");
    let st = scans.get("slow").await.unwrap().status.unwrap();
    assert_eq!(st.phase, Phase::Failed);
    let took = st.completion_time.unwrap().0.as_second() - st.start_time.unwrap().0.as_second();
    assert!(took >= 6, "failed after {took} s, before its deadline");
    eventually("workers removed", 30, async || {
        deployments
            .get_opt("slow-workers")
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;
    wait_event(&client, NS, "DeadlineExceeded").await;
    // A scan still planning (on its pods' identity, by a Job that never
    // ends here) past its deadline: its plan Job is stopped too.
    let mut planning = scan_body(
        "slow-plan",
        &s3,
        &bucket,
        &out,
        serde_json::json!({"activeDeadlineSeconds": 6}),
    );
    planning.spec.source.credentials_secret = None;
    scans.create(&PostParams::default(), &planning).await.unwrap();
    let jobs: Api<Job> = Api::namespaced(client.clone(), NS);
    eventually("the plan Job", 60, async || {
        jobs.get_opt("slow-plan-plan").await.ok()?
    })
    .await;
    let (_, reason, message) = eventually("slow-plan past its deadline", 60, async || {
        condition(&scans, "slow-plan", "Failed").await
    })
    .await;
    assert_eq!(reason, "DeadlineExceeded", "{message}");
    assert!(message.contains("its workers and Jobs were stopped"), "{message}");
    eventually("the plan Job stopped", 30, async || {
        jobs.get_opt("slow-plan-plan").await.ok()?.is_none().then_some(())
    })
    .await;
    // Health for kstatus / Argo CD / Flux, and the reason in `-o wide`.
    let (ready, reason, _) = condition(&scans, "slow", "Ready").await.unwrap();
    assert_eq!((ready.as_str(), reason.as_str()), ("False", "DeadlineExceeded"));
    let stored = scans.get("slow").await.unwrap();
    assert_eq!(
        stored.status.unwrap().observed_generation,
        stored.metadata.generation
    );
    let wide = run("kubectl", &["get", "bucketscan", "slow", "-n", NS, "-o", "wide"]);
    let header = wide.lines().next().unwrap();
    for column in ["PHASE", "ETA", "WORKERS", "MESSAGE"] {
        assert!(header.contains(column), "{wide}");
    }
    assert!(
        wide.contains("the scan ran longer than activeDeadlineSeconds (6 s)"),
        "{wide}"
    );
    let narrow = run("kubectl", &["get", "bucketscan", "slow", "-n", NS]);
    assert!(
        !narrow.contains("MESSAGE"),
        "the message is for -o wide only: {narrow}"
    );
    for name in ["slow", "slow-plan"] {
        scans.delete(name, &DeleteParams::default()).await.unwrap();
        eventually("deleted", 60, async || {
            scans.get_opt(name).await.unwrap().is_none().then_some(())
        })
        .await;
    }
    operator.stop();
}

/// A default for worker resources that is not JSON stops the operator at
/// start, saying which setting and what shape it needs.
#[test]
fn bad_worker_resources_stop_the_operator_with_a_clear_error() {
    let out = Operator::output(
        &[],
        &[
            ("BUCKETSCAN_REDIS_URL", "redis://127.0.0.1:1"),
            ("BUCKETSCAN_WORKER_RESOURCES", "cpu=1"),
            ("KUBECONFIG", "/nonexistent"),
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr
            .contains("--worker-resources (BUCKETSCAN_WORKER_RESOURCES) is not a JSON ResourceRequirements"),
        "{stderr}"
    );
}
