//! `bucketscan-operator check`, what the chart's `helm test` pod runs,
//! against a real operator (the test ground's kube-apiserver, a redis-server
//! of the test's own): it passes when the operator is ready and BucketScans
//! are served, and fails with a message naming what is wrong otherwise. The
//! e2e runs it in the cluster through `helm test`.

mod cluster;
#[path = "../../worker/tests/common/mod.rs"]
mod common;

use cluster::*;
use std::process::Output;

const NS: &str = "install-check";
fn check(args: &[&str]) -> Output {
    let args: Vec<&str> = std::iter::once("check").chain(args.iter().copied()).collect();
    Operator::output(&args, &[("KUBECONFIG", &kubeconfig_path())])
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
    let mut operator = Operator::watching(NS)
        .redis(&redis.url())
        .env_remove("BUCKETSCAN_ALLOWED_ENDPOINTS")
        .log(common::temp_path("operator-install-check.log"))
        .start();
    let readyz = format!("http://127.0.0.1:{}/readyz", operator.metrics_port());

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

    operator.stop();
}
