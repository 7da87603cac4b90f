//! `kubectl-bucketscan` against the real kube-apiserver of the test ground
//! (scripts/with-test-servers.sh with BUCKETSCAN_TEST_KUBE=1): a BucketScan
//! is created and its status written through the status subresource, as the
//! operator writes it; the built binary reads it like a user runs it.

#[path = "../../operator/tests/cluster/mod.rs"]
mod cluster;

use bucketscan_api::crd::BucketScan;
use cluster::*;
use kube::api::{Api, Patch, PatchParams, PostParams};
use std::process::{Output, Stdio};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, BufReader};

const BIN: &str = env!("CARGO_BIN_EXE_kubectl-bucketscan");

/// A stored BucketScan `name` in namespace `ns` (created with it).
async fn scan(ns: &str, name: &str) -> Api<BucketScan> {
    let client = client().await;
    install_crd(&client).await;
    namespace(&client, ns).await;
    let api: Api<BucketScan> = Api::namespaced(client, ns);
    let body: BucketScan = serde_json::from_value(serde_json::json!({
        "apiVersion": "bucketscan.dev/v1alpha1",
        "kind": "BucketScan",
        "metadata": {"name": name},
        "spec": {
            "source": {"endpoint": "http://10.0.0.5:9000", "bucket": "photos", "prefix": "2026/"},
            "output": {"bucket": "results", "gzip": true}
        }
    }))
    .unwrap();
    let _ = api.delete(name, &Default::default()).await;
    eventually("the old scan to go", 30, async || {
        api.get_opt(name).await.unwrap().is_none().then_some(())
    })
    .await;
    api.create(&PostParams::default(), &body).await.unwrap();
    api
}

/// Merge `status` into the scan's status subresource.
async fn set_status(api: &Api<BucketScan>, name: &str, status: serde_json::Value) {
    api.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({ "status": status })),
    )
    .await
    .unwrap();
}

fn scanning(done: u64, shards_done: u64) -> serde_json::Value {
    serde_json::json!({
        "phase": "Scanning",
        "workers": 3,
        "objectsDone": done,
        "objectsEstimate": 40000,
        "ratePerSecond": 5000,
        "etaSeconds": 200,
        "shards": {"total": 8, "pending": 8 - shards_done - 1, "leased": 1, "done": shards_done, "dead": 0},
        "objects": {"scanned": done, "withMetadata": done / 2, "vanished": 0, "errors": 0, "bytes": done * 100},
    })
}

fn condition(type_: &str, reason: &str, message: &str) -> serde_json::Value {
    serde_json::json!({"type": type_, "status": "True", "reason": reason, "message": message,
                       "lastTransitionTime": "2026-01-01T00:00:00Z"})
}

fn complete() -> serde_json::Value {
    serde_json::json!({
        "phase": "Complete",
        "output": "s3://results/plugin/done/result.jsonl.gz",
        "manifest": "s3://results/plugin/done/manifest.json",
        "completionTime": "2026-01-01T00:10:00Z",
        "shards": {"total": 8, "pending": 0, "leased": 0, "done": 8, "dead": 0},
        "objects": {"scanned": 40123, "withMetadata": 30000, "vanished": 2, "errors": 1, "bytes": 987654321},
        "conditions": [condition("Complete", "Merged", "40123 objects in 1 file")],
    })
}

fn plugin() -> std::process::Command {
    let mut cmd = std::process::Command::new(BIN);
    cmd.env("KUBECONFIG", kubeconfig_path());
    cmd
}

fn run(args: &[&str]) -> Output {
    plugin().args(args).output().unwrap()
}

fn text(out: &[u8]) -> String {
    String::from_utf8_lossy(out).into_owned()
}

#[tokio::test]
async fn status_shows_the_numbers_of_the_status() {
    let api = scan("plugin-status", "running").await;
    let mut status = scanning(12345, 4);
    status["conditions"] = serde_json::json!([
        condition("Planned", "Planned", "8 shards"),
        condition("StoreSaturated", "Throttling", "the store throttles at 3 workers")
    ]);
    // What the operator writes while the store pushes back (through the
    // CRD's schema: unknown fields would be pruned and not shown).
    status["storeThrottles"] = serde_json::json!(4321);
    status["governedRate"] = serde_json::json!("hot/ 4200/s");
    status["governedRatePerSecond"] = serde_json::json!(4200);
    set_status(&api, "running", status).await;

    let out = run(&["status", "running", "-n", "plugin-status"]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    for expected in [
        "BucketScan plugin-status/running: Scanning",
        "source:     s3://photos/2026/",
        "[##########..........]  50%",
        "12,345 / ~40,000 objects",
        "rate:       5,000/s",
        "eta:        3m20s",
        "workers:    3",
        "4/8 shards done (3 pending, 1 leased)",
        "Planned    True   Planned            8 shards",
        "throttled:  4,321 answers, governed hot/ 4200/s",
        "saturated:  Throttling: the store throttles at 3 workers",
    ] {
        assert!(stdout.contains(expected), "missing {expected:?} in:\n{stdout}");
    }
}

#[tokio::test]
async fn the_namespace_defaults_to_the_kubeconfig_contexts() {
    // The test kubeconfig's context names namespace `default`.
    let api = scan("default", "plugin-default-ns").await;
    set_status(&api, "plugin-default-ns", scanning(7, 1)).await;
    let out = run(&["status", "plugin-default-ns"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("BucketScan default/plugin-default-ns: Scanning"));
}

#[tokio::test]
async fn watch_prints_each_change_and_exits_0_on_complete() {
    let api = scan("plugin-watch", "done").await;
    set_status(&api, "done", scanning(1000, 1)).await;
    let mut child = tokio::process::Command::new(BIN)
        .args(["watch", "done", "-n", "plugin-watch"])
        .env("KUBECONFIG", kubeconfig_path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut next = async || {
        tokio::time::timeout(Duration::from_secs(30), lines.next_line())
            .await
            .expect("a progress line within 30 s")
            .unwrap()
            .expect("more output")
    };
    let first = next().await;
    assert!(
        first.contains("1,000 / ~40,000 objects") && first.contains("1/8 shards done"),
        "{first}"
    );
    // Each patch waits for its line: the watch sees every state.
    for (done, shards) in [(20000, 4), (39000, 7)] {
        set_status(&api, "done", scanning(done, shards)).await;
        let line = next().await;
        let objects = format!("{} / ~40,000 objects", thousands(done));
        assert!(line.starts_with("Scanning") && line.contains(&objects), "{line}");
        assert!(line.contains(&format!("{shards}/8 shards done")), "{line}");
    }
    // A status write that changes nothing shown prints nothing.
    set_status(&api, "done", serde_json::json!({"observedGeneration": 1})).await;
    set_status(&api, "done", complete()).await;
    let last = next().await;
    assert!(
        last.starts_with("Complete") && last.contains("[####################] 100%"),
        "{last}"
    );
    assert_eq!(next().await, "complete: s3://results/plugin/done/result.jsonl.gz");
    let exit = tokio::time::timeout(Duration::from_secs(10), child.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(exit.success(), "watch exits 0 on Complete");
}

fn thousands(n: u64) -> String {
    let s = n.to_string();
    match s.len() {
        4..=6 => format!("{},{}", &s[..s.len() - 3], &s[s.len() - 3..]),
        _ => s,
    }
}

#[tokio::test]
async fn watch_exits_non_zero_with_the_reason_on_failed() {
    let api = scan("plugin-watch-fail", "doomed").await;
    set_status(&api, "doomed", scanning(10, 0)).await;
    let child = tokio::process::Command::new(BIN)
        .args(["watch", "doomed", "-n", "plugin-watch-fail"])
        .env("KUBECONFIG", kubeconfig_path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Let the watch start before the scan fails (either order must end the same).
    tokio::time::sleep(Duration::from_millis(500)).await;
    set_status(
        &api,
        "doomed",
        serde_json::json!({"phase": "Failed", "conditions": [
            condition("Failed", "DeadlineExceeded", "the scan ran past activeDeadlineSeconds (60)")]}),
    )
    .await;
    let out = tokio::time::timeout(Duration::from_secs(30), child.wait_with_output())
        .await
        .expect("watch ends when the scan fails")
        .unwrap();
    assert!(!out.status.success());
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains(
            "bucketscan \"doomed\" failed: DeadlineExceeded: the scan ran past activeDeadlineSeconds (60)"
        ),
        "{stderr}"
    );
    assert!(text(&out.stdout).lines().last().unwrap().starts_with("Failed"));
}

#[tokio::test]
async fn result_prints_the_location_and_totals() {
    let api = scan("plugin-result", "finished").await;
    set_status(&api, "finished", scanning(5, 0)).await;
    let early = run(&["result", "finished", "-n", "plugin-result"]);
    assert!(!early.status.success());
    assert!(
        text(&early.stderr).contains("has no result yet (phase Scanning)"),
        "{}",
        text(&early.stderr)
    );

    set_status(&api, "finished", complete()).await;
    let out = run(&["result", "finished", "-n", "plugin-result"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    for expected in [
        "result:     s3://results/plugin/done/result.jsonl.gz",
        "format:     jsonl (single layout, gzip)",
        "manifest:   s3://results/plugin/done/manifest.json",
        "40,123 scanned: 30,000 with metadata, 2 vanished, 1 errors",
        "bytes:      987,654,321",
        "shards:     8 done, 0 dead of 8",
    ] {
        assert!(stdout.contains(expected), "missing {expected:?} in:\n{stdout}");
    }

    let json = run(&["result", "finished", "-n", "plugin-result", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(v["output"], "s3://results/plugin/done/result.jsonl.gz");
    assert_eq!(v["manifest"], "s3://results/plugin/done/manifest.json");
    assert_eq!(v["objects"]["scanned"], 40123);
    assert_eq!(v["objects"]["bytes"], 987654321u64);
}

#[tokio::test]
async fn a_missing_scan_or_kubeconfig_is_a_clear_error() {
    let _ = scan("plugin-missing", "present").await;
    for command in ["status", "watch", "result"] {
        let out = run(&[command, "nope", "-n", "plugin-missing"]);
        assert!(!out.status.success());
        assert_eq!(
            text(&out.stderr).trim(),
            "error: bucketscan \"nope\" not found in namespace \"plugin-missing\"",
            "{command}"
        );
    }
    let home = std::env::temp_dir().join(format!("plugin-no-kubeconfig-{}", std::process::id()));
    std::fs::create_dir_all(&home).unwrap();
    let out = std::process::Command::new(BIN)
        .args(["status", "x"])
        .env("KUBECONFIG", home.join("missing"))
        .env("HOME", &home)
        .env_remove("KUBERNETES_SERVICE_HOST")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("no usable kubeconfig") && stderr.contains("Set KUBECONFIG"),
        "{stderr}"
    );
}

#[tokio::test]
async fn kubectl_finds_the_plugin_on_path() {
    let api = scan("plugin-kubectl", "via-kubectl").await;
    set_status(&api, "via-kubectl", scanning(321, 2)).await;
    // kubectl runs `kubectl-bucketscan` from PATH for `kubectl bucketscan`.
    let bin_dir = std::path::Path::new(BIN).parent().unwrap();
    let path = format!("{}:{}", bin_dir.display(), std::env::var("PATH").unwrap());
    let out = std::process::Command::new("kubectl")
        .args(["bucketscan", "status", "via-kubectl", "-n", "plugin-kubectl"])
        .env("KUBECONFIG", kubeconfig_path())
        .env("PATH", &path)
        .output()
        .expect("kubectl (scripts/install-kube.sh builds it)");
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("321 / ~40,000 objects"),
        "{}",
        text(&out.stdout)
    );
    let listed = std::process::Command::new("kubectl")
        .args(["plugin", "list"])
        .env("PATH", &path)
        .output()
        .unwrap();
    assert!(
        text(&listed.stdout).contains("kubectl-bucketscan"),
        "{}",
        text(&listed.stdout)
    );
}

#[tokio::test]
async fn watch_gives_up_after_its_timeout() {
    let api = scan("plugin-watch-timeout", "slow").await;
    set_status(&api, "slow", scanning(10, 0)).await;
    let out = run(&["watch", "slow", "-n", "plugin-watch-timeout", "--timeout", "1"]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("bucketscan \"slow\" did not finish within --timeout 1s"),
        "{}",
        text(&out.stderr)
    );
    assert!(text(&out.stdout).starts_with("Scanning"), "{}", text(&out.stdout));
}

/// `status` without a name: a line per scan of the namespace; `-A` adds
/// the namespace and every namespace's scans; `--kubeconfig` names the
/// file when KUBECONFIG is unset, as kubectl's own flag does.
#[tokio::test]
async fn status_lists_the_scans_of_a_namespace_or_of_all() {
    let first = scan("plugin-list-a", "alpha").await;
    set_status(&first, "alpha", scanning(12345, 4)).await;
    let second = scan("plugin-list-b", "beta").await;
    set_status(&second, "beta", complete()).await;

    let out = run(&["status", "-n", "plugin-list-a"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 2, "{stdout}");
    let header: Vec<&str> = lines[0].split_whitespace().collect();
    assert_eq!(
        header,
        ["NAME", "PHASE", "PROGRESS", "OBJECTS", "RATE", "ETA", "READY"]
    );
    let row: Vec<&str> = lines[1].split_whitespace().collect();
    assert_eq!(
        row,
        ["alpha", "Scanning", "50%", "12,345", "5,000/s", "3m20s", "-"]
    );

    let out = plugin()
        .env_remove("KUBECONFIG")
        .args(["--kubeconfig", &kubeconfig_path(), "status", "-A"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(stdout.starts_with("NAMESPACE"), "{stdout}");
    let rows: Vec<Vec<&str>> = stdout.lines().map(|l| l.split_whitespace().collect()).collect();
    assert!(
        rows.iter()
            .any(|r| r[..4] == ["plugin-list-a", "alpha", "Scanning", "50%"]),
        "{stdout}"
    );
    assert!(
        rows.iter()
            .any(|r| r[..5] == ["plugin-list-b", "beta", "Complete", "100%", "40,123"]),
        "{stdout}"
    );

    let out = run(&["status", "-n", "plugin-list-empty"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "No BucketScans found.\n");
    // A name and -A do not go together.
    let out = run(&["status", "alpha", "-A"]);
    assert!(!out.status.success());
    // A kubeconfig file that is not there is a clear error.
    let out = plugin()
        .args(["--kubeconfig", "/nonexistent/kubeconfig", "status", "alpha"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("no usable kubeconfig"),
        "{}",
        text(&out.stderr)
    );
}
