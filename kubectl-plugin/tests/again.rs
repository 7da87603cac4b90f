//! `kubectl bucketscan retry` and `rerun` against the real kube-apiserver of
//! the test ground (BUCKETSCAN_TEST_KUBE=1): the status is written through
//! the status subresource as the operator writes it; the built binary asks
//! for a retry (spec.retry) or creates the rerun, or refuses with the reason
//! and changes nothing.

#[path = "../../operator/tests/cluster/mod.rs"]
mod cluster;

use bucketscan_api::crd::BucketScan;
use cluster::*;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::ResourceExt;

const BIN: &str = env!("CARGO_BIN_EXE_kubectl-bucketscan");

fn run(args: &[&str]) -> std::process::Output {
    std::process::Command::new(BIN)
        .env("KUBECONFIG", kubeconfig_path())
        .args(args)
        .output()
        .unwrap()
}

fn text(out: &[u8]) -> String {
    String::from_utf8_lossy(out).into_owned()
}

async fn scans(ns: &str) -> Api<BucketScan> {
    let client = client().await;
    install_crd(&client).await;
    namespace(&client, ns).await;
    Api::namespaced(client, ns)
}

/// A stored scan `name` with `status` (through the status subresource).
async fn stored(api: &Api<BucketScan>, name: &str, status: serde_json::Value) {
    let body: BucketScan = serde_json::from_value(serde_json::json!({
        "apiVersion": "bucketscan.dev/v1alpha1", "kind": "BucketScan",
        "metadata": {"name": name, "labels": {"team": "photos"}},
        "spec": {"source": {"bucket": "photos", "prefix": "2026/"},
                 "output": {"bucket": "results", "prefix": format!("inv/{name}/"), "format": "parquet", "layout": "dataset"},
                 "onDeadShards": "Partial"}
    }))
    .unwrap();
    let _ = api.delete(name, &Default::default()).await;
    eventually("the old scan to go", 30, async || {
        api.get_opt(name).await.unwrap().is_none().then_some(())
    })
    .await;
    api.create(&PostParams::default(), &body).await.unwrap();
    api.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({ "status": status })),
    )
    .await
    .unwrap();
}

fn condition(type_: &str, reason: &str) -> serde_json::Value {
    serde_json::json!({"type": type_, "status": "True", "reason": reason, "message": "",
                       "lastTransitionTime": "2026-01-01T00:00:00Z"})
}

fn partial() -> serde_json::Value {
    serde_json::json!({
        "phase": "Complete",
        "manifest": "s3://results/inv/p/manifest.json",
        "missingRanges": 1,
        "missing": [{"range": "\"\" after \"b.\" before \"c/\"", "error": "access denied to bucket \"photos\""}],
        "objects": {"scanned": 2400, "withMetadata": 0, "vanished": 0, "errors": 1, "bytes": 0},
        "conditions": [condition("Complete", "Partial")],
    })
}

#[tokio::test]
async fn retry_asks_the_operator_for_the_next_round_and_refuses_what_it_cannot_retry() {
    let api = scans("plugin-retry").await;
    stored(&api, "partial", partial()).await;
    // status shows the missing ranges.
    let status = run(&["status", "partial", "-n", "plugin-retry"]);
    let said = text(&status.stdout);
    assert!(
        said.contains("missing:    1 key range(s) not in the result")
            && said.contains("\"\" after \"b.\" before \"c/\": access denied"),
        "{said}"
    );

    let out = run(&["retry", "partial", "-n", "plugin-retry"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("retry 1 asked for (1 missing key ranges, 1 error records)"));
    assert_eq!(api.get("partial").await.unwrap().spec.retry, Some(1));
    // Asked for, not acted on yet: a second retry does not ask twice.
    let twice = run(&["retry", "partial", "-n", "plugin-retry"]);
    assert!(!twice.status.success());
    assert!(
        text(&twice.stderr).contains("not acted on it yet"),
        "{}",
        text(&twice.stderr)
    );
    assert_eq!(api.get("partial").await.unwrap().spec.retry, Some(1));

    // Running, or Complete with nothing missing: refused, nothing patched.
    for (name, status, words) in [
        (
            "running",
            serde_json::json!({"phase": "Scanning"}),
            "still running",
        ),
        (
            "clean",
            serde_json::json!({"phase": "Complete", "manifest": "s3://results/m",
                               "conditions": [condition("Complete", "Merged")]}),
            "nothing to retry",
        ),
    ] {
        stored(&api, name, status).await;
        let out = run(&["retry", name, "-n", "plugin-retry"]);
        assert!(!out.status.success());
        let err = text(&out.stderr);
        assert!(err.contains("retry refused") && err.contains(words), "{err}");
        assert_eq!(api.get(name).await.unwrap().spec.retry, None);
    }
}

#[tokio::test]
async fn rerun_creates_an_incremental_scan_from_a_complete_one_and_refuses_a_running_one() {
    let api = scans("plugin-rerun").await;
    stored(
        &api,
        "nightly",
        serde_json::json!({"phase": "Complete", "manifest": "s3://results/inv/nightly/manifest.json",
                           "conditions": [condition("Complete", "Merged")]}),
    )
    .await;
    let out = run(&["rerun", "nightly", "-n", "plugin-rerun"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let name = text(&out.stdout).trim().to_string();
    assert!(
        name.starts_with("nightly-rerun-") && name.len() == "nightly-rerun-".len() + 5,
        "{name}"
    );
    let new = api.get(&name).await.unwrap();
    let base = api.get("nightly").await.unwrap();
    assert_eq!(
        new.spec.baseline.as_ref().unwrap().scan.as_deref(),
        Some("nightly")
    );
    assert_eq!(
        new.spec.output.prefix.as_deref(),
        Some(format!("inv/{name}/").as_str())
    );
    assert_eq!(new.spec.source, base.spec.source);
    assert_eq!(new.spec.output.format, base.spec.output.format);
    assert_eq!(new.spec.on_dead_shards, base.spec.on_dead_shards);
    assert_eq!(new.annotations()["bucketscan.dev/rerun-of"], "nightly");
    assert_eq!(new.labels()["team"], "photos");

    // A partial one: a full scan, said on stderr.
    stored(&api, "partial", partial()).await;
    let out = run(&["rerun", "partial", "-n", "plugin-rerun"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("not a complete result"),
        "{}",
        text(&out.stderr)
    );
    let full = api.get(text(&out.stdout).trim()).await.unwrap();
    assert_eq!(full.spec.baseline, None);

    stored(&api, "running", serde_json::json!({"phase": "Scanning"})).await;
    let before = api.list(&Default::default()).await.unwrap().items.len();
    let out = run(&["rerun", "running", "-n", "plugin-rerun"]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("rerun refused: it is Scanning"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(api.list(&Default::default()).await.unwrap().items.len(), before);
}
