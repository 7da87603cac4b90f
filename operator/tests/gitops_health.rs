//! GitOps tools read a BucketScan's health from its status: kstatus (the
//! library Flux, kpt and Config Sync use), the Argo CD health check of
//! docs/gitops/argocd-health.lua and the Flux healthCheckExprs of
//! docs/gitops/flux-kustomization.yaml. Real BucketScans, driven by the real
//! operator against the test ground's kube-apiserver, Redis and versitygw
//! into each phase, are read back and handed to `gitops-health`
//! (scripts/gitops-health: kstatus's own Go library, gopher-lua as Argo CD
//! embeds it, cel-go as Flux configures it), and each tool must say what a
//! person would: done, working, suspended, or needing someone.

mod cluster;
#[path = "../../worker/tests/common/mod.rs"]
mod common;
mod kubelet;

use bucketscan_operator::crd::{BucketScan, Phase};
use cluster::*;
use common::*;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kubelet::run_like_pod;
use std::collections::BTreeMap;
use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

const NS: &str = "gitops";

fn start_operator() -> Operator {
    Operator::watching(NS).lease_secs(5).start()
}

/// What each tool says of one object.
#[derive(Debug, PartialEq, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct Verdict {
    name: String,
    kstatus: String,
    kstatus_message: String,
    argocd: String,
    argocd_message: String,
    flux: String,
}

/// The verdicts of every BucketScan in the namespace, by name.
async fn verdicts(scans: &Api<BucketScan>) -> BTreeMap<String, Verdict> {
    let list = scans.list(&Default::default()).await.unwrap();
    let mut objects = Vec::new();
    for scan in list.items {
        let mut object = serde_json::to_value(&scan).unwrap();
        object["apiVersion"] = "bucketscan.dev/v1alpha1".into();
        object["kind"] = "BucketScan".into();
        objects.push(object);
    }
    let docs = repo().join("docs/gitops");
    let bin = format!(
        "{}/.cache/bucketscan/bin/gitops-health",
        std::env::var("HOME").unwrap()
    );
    let mut child = Command::new(&bin)
        .arg("--argocd")
        .arg(docs.join("argocd-health.lua"))
        .arg("--flux")
        .arg(docs.join("flux-kustomization.yaml"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{bin}: {e} (scripts/install-kube.sh builds it)"));
    child
        .stdin
        .take()
        .unwrap()
        .write_all(&serde_json::to_vec(&objects).unwrap())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|line| {
            let v: Verdict = serde_json::from_str(line).unwrap();
            (v.name.clone(), v)
        })
        .collect()
}

async fn wait_phase(scans: &Api<BucketScan>, name: &str, phase: Phase) {
    eventually(&format!("{name} in phase {phase:?}"), 90, async || {
        (scans.get(name).await.ok()?.status?.phase == phase).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gitops_tools_read_each_phase_of_a_real_scan() {
    let client = client().await;
    install_crd(&client).await;
    namespace(&client, NS).await;
    let s3 = versitygw();
    let bucket = s3.bucket("gitops").await;
    let out = s3.bucket("gitops-out").await;
    let seeded: BTreeMap<String, Seeded> = (0..40)
        .map(|i| {
            (
                format!("k/{i:03}"),
                Seeded {
                    size: 1,
                    metadata: BTreeMap::new(),
                },
            )
        })
        .collect();
    s3.seed(&bucket, &seeded).await;
    create_s3_secret(&client, NS, "s3", &s3.access_key, &s3.secret_key).await;
    // A workload of someone else's holds the name `taken-workers`.
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), NS);
    let foreign: Deployment = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "taken-workers"},
        "spec": {"selector": {"matchLabels": {"app": "celery"}},
                 "template": {"metadata": {"labels": {"app": "celery"}},
                              "spec": {"containers": [{"name": "c", "image": "celery"}]}}}
    }))
    .unwrap();
    deployments
        .create(&PostParams::default(), &foreign)
        .await
        .unwrap();

    let scans: Api<BucketScan> = Api::namespaced(client.clone(), NS);
    let workers = serde_json::json!({"replicas": 1, "concurrency": 8});
    let create = async |name: &str, bucket: &str, extra: serde_json::Value| {
        let mut spec = serde_json::json!({"workers": workers});
        for (k, v) in extra.as_object().unwrap() {
            spec[k] = v.clone();
        }
        let scan = s3_scan(name, &s3.endpoint, bucket, &out, spec);
        scans.create(&PostParams::default(), &scan).await.unwrap();
    };
    create("done", &bucket, serde_json::json!({})).await;
    create("scanning", &bucket, serde_json::json!({})).await;
    create("paused", &bucket, serde_json::json!({"suspend": true})).await;
    create("taken", &bucket, serde_json::json!({})).await;
    create("broken", "no-such-bucket", serde_json::json!({})).await;
    let mut waiting = s3_scan("waiting", &s3.endpoint, &bucket, &out, serde_json::json!({}));
    waiting.spec.source.credentials_secret.as_mut().unwrap().name = "not-yet".into();
    scans.create(&PostParams::default(), &waiting).await.unwrap();

    let operator = start_operator();
    // `done` runs to the end: its worker and merge run as their pods would.
    let deployment = eventually("done's workers", 60, async || {
        deployments.get_opt("done-workers").await.ok()?
    })
    .await;
    let container = deployment.spec.unwrap().template.spec.unwrap().containers[0].clone();
    let mut worker = run_like_pod(&client, NS, &container, "done-workers-a", &[]).await;
    assert!(
        wait_exit(&mut worker, Duration::from_secs(120)).success(),
        "worker failed"
    );
    let jobs: Api<Job> = Api::namespaced(client.clone(), NS);
    let job = eventually("done's merge Job", 60, async || {
        jobs.get_opt("done-merge").await.ok()?
    })
    .await;
    let merge_container = job.spec.unwrap().template.spec.unwrap().containers[0].clone();
    let mut merge = run_like_pod(&client, NS, &merge_container, "done-merge-x", &[]).await;
    assert!(
        wait_exit(&mut merge, Duration::from_secs(60)).success(),
        "merge failed"
    );
    wait_phase(&scans, "done", Phase::Complete).await;
    wait_phase(&scans, "scanning", Phase::Scanning).await;
    wait_phase(&scans, "broken", Phase::Failed).await;
    eventually(
        "waiting Blocked, taken in Conflict, paused Suspended",
        60,
        async || {
            let blocked = condition(&scans, "waiting", "Blocked").await?.0 == "True";
            let conflict = condition(&scans, "taken", "Conflict").await?.0 == "True";
            let suspended = condition(&scans, "paused", "Suspended").await?.0 == "True";
            (blocked && conflict && suspended).then_some(())
        },
    )
    .await;

    let got = verdicts(&scans).await;
    let said = |name: &str| {
        let v = &got[name];
        (v.kstatus.as_str(), v.argocd.as_str(), v.flux.as_str())
    };
    assert_eq!(
        said("done"),
        ("Current", "Healthy", "Current"),
        "{:?}",
        got["done"]
    );
    assert!(
        got["done"].argocd_message.contains("40 objects"),
        "{:?}",
        got["done"]
    );
    assert_eq!(
        said("scanning"),
        ("InProgress", "Progressing", "InProgress"),
        "{:?}",
        got["scanning"]
    );
    assert_eq!(
        said("waiting"),
        ("InProgress", "Progressing", "InProgress"),
        "{:?}",
        got["waiting"]
    );
    assert!(
        got["waiting"].argocd_message.starts_with("SecretNotFound: "),
        "{:?}",
        got["waiting"]
    );
    assert!(
        got["waiting"].kstatus_message.contains("not-yet"),
        "{:?}",
        got["waiting"]
    );
    // No result yet: kstatus and Flux wait (Ready is False), Argo CD has a
    // word of its own.
    assert_eq!(
        said("paused"),
        ("InProgress", "Suspended", "InProgress"),
        "{:?}",
        got["paused"]
    );
    assert_eq!(
        said("taken"),
        ("Failed", "Degraded", "Failed"),
        "{:?}",
        got["taken"]
    );
    assert!(
        got["taken"].argocd_message.contains("taken-workers"),
        "{:?}",
        got["taken"]
    );
    assert_eq!(
        said("broken"),
        ("Failed", "Degraded", "Failed"),
        "{:?}",
        got["broken"]
    );
    assert!(
        got["broken"].argocd_message.contains("no-such-bucket"),
        "{:?}",
        got["broken"]
    );

    // A spec the operator has not seen yet (it is stopped) is in progress
    // for every tool, whatever the status says.
    drop(operator);
    scans
        .patch(
            "done",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"workers": {"replicas": 2}}})),
        )
        .await
        .unwrap();
    let got = verdicts(&scans).await;
    assert_eq!(
        (
            got["done"].kstatus.as_str(),
            got["done"].argocd.as_str(),
            got["done"].flux.as_str()
        ),
        ("InProgress", "Progressing", "InProgress"),
        "{:?}",
        got["done"]
    );
}
