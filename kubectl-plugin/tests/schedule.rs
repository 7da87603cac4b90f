//! `kubectl bucketscan schedule` against the real kube-apiserver of the
//! test ground: a BucketScanSchedule and its runs are stored with the
//! status the operator would write; the built binary shows the schedule,
//! its next run and its runs (not a scan that only carries the label), a
//! line per schedule with `-A`, and a clear error for a missing one.

#[path = "../../operator/tests/cluster/mod.rs"]
mod cluster;

use bucketscan_api::crd::BucketScan;
use bucketscan_api::schedule::BucketScanSchedule;
use cluster::*;
use kube::api::{Api, Patch, PatchParams, PostParams};

const BIN: &str = env!("CARGO_BIN_EXE_kubectl-bucketscan");
const NS: &str = "plugin-schedule";

fn run(args: &[&str]) -> std::process::Output {
    std::process::Command::new(BIN)
        .env("KUBECONFIG", kubeconfig_path())
        .args(args)
        .output()
        .unwrap()
}

async fn run_of(scans: &Api<BucketScan>, name: &str, owner_uid: Option<&str>, status: serde_json::Value) {
    let mut meta = serde_json::json!({"name": name, "labels": {"bucketscan.dev/schedule": "nightly"}});
    if let Some(uid) = owner_uid {
        meta["ownerReferences"] = serde_json::json!([{
            "apiVersion": "bucketscan.dev/v1alpha1", "kind": "BucketScanSchedule",
            "name": "nightly", "uid": uid, "controller": true
        }]);
    }
    let body: BucketScan = serde_json::from_value(serde_json::json!({
        "apiVersion": "bucketscan.dev/v1alpha1", "kind": "BucketScan", "metadata": meta,
        "spec": {"source": {"bucket": "photos"}, "output": {"bucket": "results"}}
    }))
    .unwrap();
    scans.create(&PostParams::default(), &body).await.unwrap();
    scans
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"status": status})),
        )
        .await
        .unwrap();
}

#[tokio::test]
async fn schedule_shows_the_status_the_next_run_and_its_runs() {
    let client = client().await;
    install_crd(&client).await;
    namespace(&client, NS).await;
    let schedules: Api<BucketScanSchedule> = Api::namespaced(client.clone(), NS);
    let scans: Api<BucketScan> = Api::namespaced(client.clone(), NS);
    let body: BucketScanSchedule = serde_json::from_value(serde_json::json!({
        "apiVersion": "bucketscan.dev/v1alpha1", "kind": "BucketScanSchedule",
        "metadata": {"name": "nightly"},
        "spec": {"schedule": "0 2 * * *", "timeZone": "Europe/Berlin", "concurrencyPolicy": "Replace",
                 "scanTemplate": {"source": {"bucket": "photos"}, "output": {"bucket": "results"}}}
    }))
    .unwrap();
    let made = schedules.create(&PostParams::default(), &body).await.unwrap();
    let uid = made.metadata.uid.clone().unwrap();
    let status = serde_json::json!({"status": {
        "lastScheduleTime": "2026-11-27T01:00:00Z", "nextScheduleTime": "2026-11-28T01:00:00Z",
        "lastSuccessfulScan": "nightly-29928960", "lastSuccessfulTime": "2026-11-26T01:30:00Z",
        "active": ["nightly-29929080"], "activeCount": 1,
        "conditions": [{"type": "Ready", "status": "True", "reason": "Scheduled",
                        "message": "next run at 2026-11-28T01:00:00Z", "lastTransitionTime": "2026-11-27T01:00:00Z"}]
    }});
    schedules
        .patch_status("nightly", &PatchParams::default(), &Patch::Merge(status))
        .await
        .unwrap();
    run_of(
        &scans,
        "nightly-29928960",
        Some(&uid),
        serde_json::json!({"phase": "Complete",
            "objects": {"scanned": 40123, "withMetadata": 0, "vanished": 0, "errors": 0, "bytes": 0},
            "changes": {"added": 12, "removed": 3, "contentChanged": 4, "metadataChanged": 5, "reused": 40000}}),
    )
    .await;
    run_of(
        &scans,
        "nightly-29929080",
        Some(&uid),
        serde_json::json!({"phase": "Scanning"}),
    )
    .await;
    run_of(&scans, "lookalike", None, serde_json::json!({"phase": "Failed"})).await;

    let out = run(&["schedule", "nightly", "-n", NS]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    for want in [
        "BucketScanSchedule plugin-schedule/nightly",
        "schedule:      0 2 * * * (Europe/Berlin)",
        "policy:        Replace, incremental",
        "next run:      2026-11-28T01:00:00Z",
        "last success:  nightly-29928960 at 2026-11-26T01:30:00Z",
        "Ready:         True Scheduled",
        "+12 -3 ~4 m5",
    ] {
        assert!(text.contains(want), "{want:?} not in:\n{text}");
    }
    let lines: Vec<&str> = text.lines().collect();
    let newer = lines
        .iter()
        .position(|l| l.contains("nightly-29929080"))
        .expect("the active run");
    let older = lines
        .iter()
        .position(|l| l.contains("nightly-29928960   Complete"))
        .expect("the complete run");
    assert!(newer < older, "newest first:\n{text}");
    assert!(lines[newer].contains("Scanning"), "{text}");
    assert!(
        !text.contains("lookalike"),
        "a scan only labelled is not a run:\n{text}"
    );

    let out = run(&["schedule", "-A"]);
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        table
            .lines()
            .any(|l| l.starts_with(NS) && l.contains("nightly") && l.contains("0 2 * * *")),
        "{table}"
    );

    let out = run(&["schedule", "nope", "-n", NS]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("bucketscanschedule \"nope\" not found in namespace \"plugin-schedule\""),
        "{err}"
    );
}
