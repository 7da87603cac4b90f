//! The operator touches only what its scan owns (issue 28, item 2), with the
//! real operator binary against the test ground's kube-apiserver and Redis.
//! Objects of another workload that happen to carry a scan's child names
//! (`NAME-workers`, `NAME-redis`, `NAME-plan`, `NAME-delete-parts`) are never
//! replaced, adopted nor deleted: not by a running scan, a suspended one, a
//! refused one, nor by deleting one. A scan that meets one says so in its
//! status (condition `Conflict`) and a Warning event, and goes on once the
//! name is free. No store is reached: the scans are suspended, refused or
//! planned by a Job (no `credentialsSecret`), which no kubelet runs here.

mod cluster;

use bucketscan_operator::crd::BucketScan;
use cluster::*;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Event, Secret};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use std::time::Duration;

fn start_operator(ns: &str, args: &[&str]) -> Operator {
    Operator::watching(ns)
        .redis_scan_users()
        .args(args)
        .debug_log()
        .start()
}

/// Another team's object, with none of the operator's labels and no owner.
fn foreign(kind: &str, name: &str) -> serde_json::Value {
    let pod = serde_json::json!({
        "metadata": {"labels": {"app": "celery"}},
        "spec": {"restartPolicy": "Never",
                 "containers": [{"name": "celery", "image": "celery:5", "args": ["worker"]}]}
    });
    match kind {
        "Deployment" => {
            let mut template = pod;
            template["spec"]["restartPolicy"] = "Always".into();
            serde_json::json!({
                "metadata": {"name": name, "labels": {"app": "celery"}},
                "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "celery"}}, "template": template}
            })
        }
        "Secret" => serde_json::json!({
            "metadata": {"name": name},
            "stringData": {"broker": "redis://celery-broker:6379/0"}
        }),
        "Job" => serde_json::json!({"metadata": {"name": name}, "spec": {"template": pod}}),
        _ => unreachable!("{kind}"),
    }
}

async fn create_foreign(client: &Client, ns: &str, objects: &[(&str, &str)]) {
    for (kind, name) in objects {
        let body = foreign(kind, name);
        let pp = PostParams::default();
        match *kind {
            "Deployment" => {
                let api: Api<Deployment> = Api::namespaced(client.clone(), ns);
                api.create(&pp, &serde_json::from_value(body).unwrap())
                    .await
                    .unwrap();
            }
            "Secret" => {
                let api: Api<Secret> = Api::namespaced(client.clone(), ns);
                api.create(&pp, &serde_json::from_value(body).unwrap())
                    .await
                    .unwrap();
            }
            _ => {
                let api: Api<Job> = Api::namespaced(client.clone(), ns);
                api.create(&pp, &serde_json::from_value(body).unwrap())
                    .await
                    .unwrap();
            }
        }
    }
}

/// Each object as the API server holds it now (`null` when gone): its uid,
/// resourceVersion (any write changes it), spec and data included.
async fn snapshot(client: &Client, ns: &str, objects: &[(&str, &str)]) -> Vec<serde_json::Value> {
    let mut out = Vec::new();
    for (kind, name) in objects {
        let got = match *kind {
            "Deployment" => {
                let api: Api<Deployment> = Api::namespaced(client.clone(), ns);
                serde_json::to_value(api.get_opt(name).await.unwrap()).unwrap()
            }
            "Secret" => {
                let api: Api<Secret> = Api::namespaced(client.clone(), ns);
                serde_json::to_value(api.get_opt(name).await.unwrap()).unwrap()
            }
            _ => {
                let api: Api<Job> = Api::namespaced(client.clone(), ns);
                serde_json::to_value(api.get_opt(name).await.unwrap()).unwrap()
            }
        };
        out.push(got);
    }
    out
}

async fn assert_untouched(client: &Client, ns: &str, objects: &[(&str, &str)], before: &[serde_json::Value]) {
    let now = snapshot(client, ns, objects).await;
    for ((object, was), is) in objects.iter().zip(before).zip(&now) {
        assert!(!is.is_null(), "{object:?} was deleted");
        assert_eq!(is, was, "{object:?} was changed");
    }
}

/// A scan of bucket `tasks` named `name`; `spec` fields are set over it.
fn scan(name: &str, spec: serde_json::Value) -> BucketScan {
    let mut body = serde_json::json!({
        "apiVersion": "bucketscan.dev/v1alpha1", "kind": "BucketScan",
        "metadata": {"name": name},
        "spec": {
            "source": {"endpoint": "http://127.0.0.1:9", "bucket": "tasks", "pathStyle": true},
            "output": {"bucket": "tasks-out"},
            "workers": {"replicas": 1}
        }
    });
    for (k, v) in spec.as_object().unwrap() {
        body["spec"][k] = v.clone();
    }
    serde_json::from_value(body).unwrap()
}

/// The Warning events of `ns` with reason `reason`: their messages.
async fn warnings(client: &Client, ns: &str, reason: &str) -> Vec<String> {
    let events: Api<Event> = Api::namespaced(client.clone(), ns);
    let list = events.list(&Default::default()).await.unwrap().items;
    list.into_iter()
        .filter(|e| e.reason.as_deref() == Some(reason) && e.type_.as_deref() == Some("Warning"))
        .filter_map(|e| e.message)
        .collect()
}

async fn conflict(scans: &Api<BucketScan>, name: &str) -> (String, String) {
    eventually(&format!("condition Conflict on {name}"), 60, async || {
        let (status, reason, message) = condition(scans, name, "Conflict").await?;
        (status == "True").then_some((reason, message))
    })
    .await
}

async fn deleted(scans: &Api<BucketScan>, name: &str) {
    scans.delete(name, &DeleteParams::default()).await.unwrap();
    eventually(&format!("{name} deleted"), 60, async || {
        scans.get_opt(name).await.ok()?.is_none().then_some(())
    })
    .await;
}

/// How long the operator gets to do what it must not: a scan requeues every
/// 3 s, the issue saw the Deployment go within 5 s.
const SETTLE: Duration = Duration::from_secs(6);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_a_scan_does_not_own_are_left_alone_and_the_scan_says_conflict() {
    const NS: &str = "ownership";
    let client = client().await;
    install_crd(&client).await;
    namespace(&client, NS).await;
    let taken = [
        ("Deployment", "celery-workers"),
        ("Secret", "celery-redis"),
        ("Job", "celery-plan"),
        ("Job", "celery-delete-parts"),
    ];
    create_foreign(&client, NS, &taken).await;
    let before = snapshot(&client, NS, &taken).await;
    let mut operator = start_operator(NS, &[]);
    let scans: Api<BucketScan> = Api::namespaced(client.clone(), NS);

    // Suspended (the issue: its Deployment `celery-workers` was deleted
    // within 5 s). With a credentials Secret, which a suspended scan never
    // reads: the names it uses are the workers' and the Redis Secret's.
    let suspended = scan(
        "celery",
        serde_json::json!({"suspend": true, "source": {"endpoint": "http://127.0.0.1:9", "bucket": "tasks",
            "pathStyle": true, "credentialsSecret": {"name": "s3"}}}),
    );
    scans.create(&PostParams::default(), &suspended).await.unwrap();
    let (reason, message) = conflict(&scans, "celery").await;
    assert_eq!(reason, "Conflict");
    for named in ["Deployment celery-workers", "Secret celery-redis", NS] {
        assert!(message.contains(named), "{named:?} not in {message:?}");
    }
    assert!(
        !message.contains("celery-plan"),
        "a scan with a credentials Secret has no plan Job: {message}"
    );
    let (ready, ready_reason, _) = condition(&scans, "celery", "Ready").await.unwrap();
    assert_eq!((ready.as_str(), ready_reason.as_str()), ("False", "Conflict"));
    eventually("a Conflict event", 30, async || {
        let notes = warnings(&client, NS, "Conflict").await;
        notes
            .iter()
            .any(|n| n.contains("Deployment celery-workers"))
            .then_some(())
    })
    .await;
    tokio::time::sleep(SETTLE).await;
    assert_untouched(&client, NS, &taken, &before).await;
    deleted(&scans, "celery").await;
    assert_untouched(&client, NS, &taken, &before).await;

    // Running, planned by a Job in its pods (no credentials Secret): the
    // issue saw the operator force-apply the Deployment. Nothing is
    // applied; the condition names every name that is taken.
    scans
        .create(&PostParams::default(), &scan("celery", serde_json::json!({})))
        .await
        .unwrap();
    let (_, message) = conflict(&scans, "celery").await;
    for named in [
        "Deployment celery-workers",
        "Secret celery-redis",
        "Job celery-plan",
    ] {
        assert!(message.contains(named), "{named:?} not in {message:?}");
    }
    tokio::time::sleep(SETTLE).await;
    assert_untouched(&client, NS, &taken, &before).await;
    let st = scans.get("celery").await.unwrap().status.unwrap();
    assert!(st.workers.unwrap_or(0) == 0, "{st:?}");

    // The other team renames its workload: the scan goes on by itself
    // (the annotation only spares the test the slow requeue).
    let bg = DeleteParams::background();
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), NS);
    deployments.delete("celery-workers", &bg).await.unwrap();
    let secrets: Api<Secret> = Api::namespaced(client.clone(), NS);
    secrets.delete("celery-redis", &bg).await.unwrap();
    let jobs: Api<Job> = Api::namespaced(client.clone(), NS);
    jobs.delete("celery-plan", &bg).await.unwrap();
    let wake = serde_json::json!({"metadata": {"annotations": {"test/wake": "1"}}});
    scans
        .patch("celery", &PatchParams::default(), &Patch::Merge(&wake))
        .await
        .unwrap();
    let uid = scans.get("celery").await.unwrap().uid().unwrap();
    let plan = eventually("the scan's own plan Job", 60, async || {
        jobs.get_opt("celery-plan").await.ok()?
    })
    .await;
    let owner = plan.owner_references().first().cloned().expect("owned");
    assert_eq!((owner.uid.as_str(), owner.controller), (uid.as_str(), Some(true)));
    let redis = secrets.get("celery-redis").await.unwrap();
    assert_eq!(
        redis.owner_references().first().map(|o| o.uid.as_str()),
        Some(uid.as_str())
    );
    let (status, reason, _) = eventually("Conflict cleared", 30, async || {
        condition(&scans, "celery", "Conflict")
            .await
            .filter(|(status, ..)| status == "False")
    })
    .await;
    assert_eq!((status.as_str(), reason.as_str()), ("False", "Resolved"));

    // Deleting it: the Job that deletes its parts outlives the scan and so
    // is not owned by it; the name is taken, so no Job runs (the parts are
    // left, with a warning) and the deletion is not held up.
    let cleanup = [("Job", "celery-delete-parts")];
    let cleanup_before = snapshot(&client, NS, &cleanup).await;
    deleted(&scans, "celery").await;
    eventually("a CleanupConflict event", 30, async || {
        let notes = warnings(&client, NS, "CleanupConflict").await;
        notes
            .iter()
            .any(|n| n.contains("Job celery-delete-parts"))
            .then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_untouched(&client, NS, &cleanup, &cleanup_before).await;
    operator.stop();
}

/// A scan refused before it started (a spec the operator rejects, a
/// namespace outside `--scan-namespaces`) ran nothing, so it tears nothing
/// down: not when it fails, not when it is deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_scan_deletes_nothing() {
    const NS: &str = "ownership-refused";
    let client = client().await;
    install_crd(&client).await;
    namespace(&client, NS).await;
    let taken = [
        ("Deployment", "celery-workers"),
        ("Job", "celery-plan"),
        ("Deployment", "flower-workers"),
        ("Secret", "flower-redis"),
    ];
    create_foreign(&client, NS, &taken).await;
    let before = snapshot(&client, NS, &taken).await;
    let mut operator = start_operator(NS, &["--scan-namespaces", "elsewhere"]);
    let scans: Api<BucketScan> = Api::namespaced(client.clone(), NS);
    // The output inside the scanned keyspace: refused by the operator.
    let invalid = scan(
        "celery",
        serde_json::json!({"output": {"bucket": "tasks", "prefix": "out/"}}),
    );
    scans.create(&PostParams::default(), &invalid).await.unwrap();
    scans
        .create(&PostParams::default(), &scan("flower", serde_json::json!({})))
        .await
        .unwrap();
    for (name, why) in [("celery", "InvalidSpec"), ("flower", "NamespaceNotAllowed")] {
        eventually(&format!("{name} refused"), 60, async || {
            let (status, reason, _) = condition(&scans, name, "Failed").await?;
            (status == "True" && reason == why).then_some(())
        })
        .await;
    }
    tokio::time::sleep(SETTLE).await;
    assert_untouched(&client, NS, &taken, &before).await;
    for name in ["celery", "flower"] {
        assert_eq!(
            condition(&scans, name, "Conflict").await,
            None,
            "{name} touched nothing"
        );
    }
    deleted(&scans, "celery").await;
    deleted(&scans, "flower").await;
    assert_untouched(&client, NS, &taken, &before).await;
    operator.stop();
}

/// Any reconcile error that holds a scan up shows in its conditions, not
/// only in the operator's log: here the API server refuses the scan's own
/// Redis Secret (made immutable behind the operator's back), condition
/// `Blocked` says why (reason `ReconcileError`) and clears once it passed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconcile_error_shows_in_the_scan_s_conditions() {
    const NS: &str = "ownership-errors";
    let client = client().await;
    install_crd(&client).await;
    namespace(&client, NS).await;
    let mut operator = start_operator(NS, &[]);
    let scans: Api<BucketScan> = Api::namespaced(client.clone(), NS);
    // Suspended first: no Secret is written before the test's is there.
    scans
        .create(
            &PostParams::default(),
            &scan("imm", serde_json::json!({"suspend": true})),
        )
        .await
        .unwrap();
    eventually("Suspended", 60, async || {
        let (status, ..) = condition(&scans, "imm", "Suspended").await?;
        (status == "True").then_some(())
    })
    .await;
    let uid = scans.get("imm").await.unwrap().uid().unwrap();
    let secrets: Api<Secret> = Api::namespaced(client.clone(), NS);
    let immutable: Secret = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "imm-redis", "ownerReferences": [{"apiVersion": "bucketscan.dev/v1alpha1",
            "kind": "BucketScan", "name": "imm", "uid": uid, "controller": true}]},
        "immutable": true,
        "stringData": {"url": "redis://127.0.0.1:9"}
    }))
    .unwrap();
    secrets.create(&PostParams::default(), &immutable).await.unwrap();
    let resume = serde_json::json!({"spec": {"suspend": false}});
    scans
        .patch("imm", &PatchParams::default(), &Patch::Merge(&resume))
        .await
        .unwrap();
    let message = eventually("Blocked by the refused write", 60, async || {
        let (status, reason, message) = condition(&scans, "imm", "Blocked").await?;
        (status == "True" && reason == "ReconcileError").then_some(message)
    })
    .await;
    assert!(
        message.contains("imm-redis")
            && message.contains("immutable")
            && message.ends_with("retrying in 10 s"),
        "{message}"
    );
    let (ready, reason, _) = condition(&scans, "imm", "Ready").await.unwrap();
    assert_eq!((ready.as_str(), reason.as_str()), ("False", "ReconcileError"));

    secrets
        .delete("imm-redis", &DeleteParams::default())
        .await
        .unwrap();
    eventually("unblocked", 60, async || {
        let (status, reason, _) = condition(&scans, "imm", "Blocked").await?;
        (status == "False" && reason == "Unblocked").then_some(())
    })
    .await;
    let jobs: Api<Job> = Api::namespaced(client.clone(), NS);
    eventually("the plan Job", 30, async || {
        jobs.get_opt("imm-plan").await.ok()?
    })
    .await;
    operator.stop();
}
