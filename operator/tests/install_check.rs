//! `bucketscan-operator check`, what the chart's `helm test` pod runs,
//! against a real operator (the test ground's kube-apiserver, a redis-server
//! of the test's own): it passes when the operator is ready and BucketScans
//! are served, and fails with a message naming what is wrong otherwise. The
//! e2e runs it in the cluster through `helm test`.

mod cluster;
#[path = "../../worker/tests/common/mod.rs"]
mod common;

use cluster::*;
use std::process::{Command, Output, Stdio};

const NS: &str = "install-check";
const BIN: &str = env!("CARGO_BIN_EXE_bucketscan-operator");

fn check(args: &[&str]) -> Output {
    Command::new(BIN)
        .arg("check")
        .args(args)
        .env("KUBECONFIG", kubeconfig_path())
        .output()
        .unwrap()
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[tokio::test]
async fn check_passes_on_a_ready_operator_and_names_what_fails() {
    let client = client().await;
    install_crd(&client).await;
    namespace(&client, NS).await;
    let redis = common::PrivateRedis::start();
    let port = free_port();
    let log = std::fs::File::create(common::temp_path("operator-install-check.log")).unwrap();
    let mut operator = Command::new(BIN)
        .args(["--namespace", NS, "--metrics-addr", &format!("127.0.0.1:{port}")])
        .env("KUBECONFIG", kubeconfig_path())
        .env("BUCKETSCAN_REDIS_URL", redis.url())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    let readyz = format!("http://127.0.0.1:{port}/readyz");

    // Retries until the starting operator is ready.
    let ok = check(&["--readyz", &readyz, "--namespace", NS, "--wait-secs", "60"]);
    assert!(ok.status.success(), "{}", text(&ok));
    let said = text(&ok);
    assert!(said.contains(&format!("operator ready: {readyz}")), "{said}");
    assert!(
        said.contains(&format!("BucketScans served: 0 in namespace {NS}")),
        "{said}"
    );

    let nobody = format!("http://127.0.0.1:{}/readyz", free_port());
    let down = check(&["--readyz", &nobody, "--namespace", NS, "--wait-secs", "0"]);
    assert!(!down.status.success());
    assert!(
        text(&down).contains(&format!("check failed: the operator does not answer on {nobody}")),
        "{}",
        text(&down)
    );
    let bad = check(&["--readyz", "not a url", "--wait-secs", "0"]);
    assert!(!bad.status.success());
    assert!(
        text(&bad).contains("check failed: not a url is not a valid URL"),
        "{}",
        text(&bad)
    );

    let _ = operator.kill();
    let _ = operator.wait();
}
