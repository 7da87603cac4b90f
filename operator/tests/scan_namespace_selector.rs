//! Scan namespaces chosen by label (`--scan-namespace-selector`, chart
//! value `operator.scanNamespaceSelector`) on the real API server, the
//! operator running as the chart's ServiceAccount with the RBAC of `helm
//! template` (a kubeconfig that impersonates it), so that the chart's grants
//! are what is tested:
//! - with a selector the chart grants list and watch on Namespaces and the
//!   scan-namespace rules in every namespace (a RoleBinding cannot wait for
//!   a namespace labelled later); with a list, neither;
//! - the operator refuses to start on a selector it cannot honour: one the
//!   API server refuses, one beside `--scan-namespaces`, and one without
//!   the rights to watch Namespaces (the chart's RBAC for a list);
//! - a scan in a namespace without the labels fails (`NamespaceNotAllowed`,
//!   naming the selector); one in a labelled namespace is planned, also
//!   when the namespace was labelled after the operator started.

mod cluster;
#[path = "../../worker/tests/common/mod.rs"]
mod common;

use bucketscan_operator::crd::BucketScan;
use cluster::*;
use common::*;
use kube::{api::PostParams, Api, Client};
use std::{path::Path, path::PathBuf, time::Duration, time::Instant};

const RELEASE: &str = "bylabel";
const RELEASE_NS: &str = "bylabel-release";
/// Labelled before the operator starts.
const LABELLED: &str = "bylabel-team";
/// Labelled while the operator runs.
const LATER: &str = "bylabel-later";
/// Never labelled.
const PLAIN: &str = "bylabel-plain";
const LABEL: &str = "bylabel.bucketscan.dev/scans";
const SELECTOR: &str = "bylabel.bucketscan.dev/scans=true";

fn account() -> String {
    chart_account(RELEASE, RELEASE_NS)
}

/// The chart's RBAC for `values`, applied, and a kubeconfig acting as its
/// ServiceAccount.
fn chart_rbac(values: &[&str], file_name: &str) -> PathBuf {
    let mut args = vec![
        "template",
        RELEASE,
        "charts/bucketscan",
        "--namespace",
        RELEASE_NS,
    ];
    args.extend_from_slice(values);
    apply_rbac(&run("helm", &args), file_name);
    let kubeconfig = scratch(&format!("{file_name}-kubeconfig.yaml"));
    impersonating_kubeconfig(&account(), &kubeconfig);
    kubeconfig
}

async fn label(client: &Client, ns: &str) {
    set_namespace_label(client, ns, LABEL, "true").await;
}

/// The operator watching `ns`, as the chart's ServiceAccount, with `args`.
fn operator(ns: &str, kubeconfig: &Path, args: &[&str]) -> Operator {
    Operator::watching(ns)
        .kubeconfig(kubeconfig)
        .args(args)
        .log(temp_path(&format!("operator-bylabel-{ns}.log")))
        .start()
}

/// Runs the operator with `args` and expects it to stop at once with an
/// error saying `expected`; its stderr.
fn refused_at_start(kubeconfig: &Path, args: &[&str], expected: &str) -> String {
    let mut operator = operator(PLAIN, kubeconfig, args);
    let began = Instant::now();
    let status = loop {
        if let Some(status) = operator.try_wait() {
            break status;
        }
        if began.elapsed() > Duration::from_secs(30) {
            operator.stop();
            panic!("the operator did not stop with {args:?}: {}", operator.log());
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let stderr = operator.log();
    assert!(!status.success(), "{args:?}: {stderr}");
    assert!(stderr.contains(expected), "{args:?}: {stderr}");
    stderr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scans_run_where_the_namespace_labels_match_and_nowhere_else() {
    let client = client().await;
    install_crd(&client).await;
    for ns in [RELEASE_NS, LABELLED, LATER, PLAIN] {
        namespace(&client, ns).await;
    }
    label(&client, LABELLED).await;

    // The chart's RBAC for a list grants nothing on Namespaces: an operator
    // given a selector with it stops, saying what it lacks.
    let by_list = chart_rbac(
        &["--set", "operator.scanNamespaces={bylabel-team}"],
        "bylabel-list.yaml",
    );
    eventually("the list's binding in force", 30, async || {
        can_i(&account(), &["get", "secrets", "-n", LABELLED]).then_some(())
    })
    .await;
    assert!(!can_i(&account(), &["list", "namespaces"]));
    refused_at_start(
        &by_list,
        &["--scan-namespace-selector", SELECTOR],
        "--scan-namespace-selector needs list and watch on Namespaces, which the operator may not do",
    );

    let kubeconfig = chart_rbac(
        &[
            "--set-string",
            &format!(
                "operator.scanNamespaceSelector.matchLabels.{}=true",
                LABEL.replace('.', "\\.")
            ),
        ],
        "bylabel-selector.yaml",
    );
    eventually("the selector's bindings in force", 30, async || {
        (can_i(&account(), &["watch", "namespaces"]) && can_i(&account(), &["get", "secrets", "-n", PLAIN]))
            .then_some(())
    })
    .await;
    for (verb, what) in [
        ("list", "namespaces"),
        ("watch", "namespaces"),
        ("get", "secrets"),
        ("create", "deployments.apps"),
        ("watch", "jobs.batch"),
    ] {
        assert!(
            can_i(&account(), &[verb, what, "--all-namespaces"]),
            "{verb} {what}"
        );
    }
    assert!(
        !can_i(&account(), &["patch", "namespaces"]),
        "never changes a namespace"
    );
    assert!(!can_i(&account(), &["list", "secrets", "--all-namespaces"]));

    // Selectors it cannot honour.
    let stderr = refused_at_start(
        &kubeconfig,
        &["--scan-namespace-selector", "team in (a"],
        "--scan-namespace-selector (BUCKETSCAN_SCAN_NAMESPACE_SELECTOR) \"team in (a\" is refused by the API server",
    );
    assert!(stderr.contains("write a Kubernetes label selector"), "{stderr}");
    refused_at_start(
        &kubeconfig,
        &[
            "--scan-namespace-selector",
            SELECTOR,
            "--scan-namespaces",
            LABELLED,
        ],
        "are both given: choose the namespaces by label or by name, not both",
    );

    let s3 = versitygw();
    let (bucket, out) = (s3.bucket("bylabel").await, s3.bucket("bylabel-out").await);
    let objects = (0..10).map(|i| (format!("k{i:02}"), Seeded::default())).collect();
    s3.seed(&bucket, &objects).await;
    for ns in [LABELLED, LATER, PLAIN] {
        create_s3_secret(&client, ns, "s3", &s3.access_key, &s3.secret_key).await;
    }
    // One operator per namespace (`--namespace`, as every test operator
    // runs), each given the selector as the chart gives it (its
    // environment variable).
    let operators: Vec<Operator> = [LABELLED, LATER, PLAIN]
        .iter()
        .map(|ns| {
            Operator::watching(ns)
                .kubeconfig(&kubeconfig)
                .env("BUCKETSCAN_SCAN_NAMESPACE_SELECTOR", SELECTOR)
                .log(temp_path(&format!("operator-bylabel-run-{ns}.log")))
                .start()
        })
        .collect();
    let create = async |ns: &str| {
        let scans: Api<BucketScan> = Api::namespaced(client.clone(), ns);
        let scan = s3_scan(
            ns,
            &s3.endpoint,
            &bucket,
            &out,
            serde_json::json!({"workers": {"replicas": 1}}),
        );
        scans.create(&PostParams::default(), &scan).await.unwrap();
        scans
    };
    // Labelled before the start: planned.
    let team = create(LABELLED).await;
    // Labelled now, while its operator runs: taken in by the watch (the
    // plain namespace's refusal below gives the watch time to see it).
    label(&client, LATER).await;
    let plain = create(PLAIN).await;
    let message = wait_condition(&plain, PLAIN, "Failed", "True", "NamespaceNotAllowed").await;
    assert_eq!(
        message,
        format!(
            "namespace \"{PLAIN}\" may not run BucketScans: this operator runs them only in namespaces whose \
             labels match \"{SELECTOR}\" (chart value operator.scanNamespaceSelector); label the namespace, \
             then create the scan again"
        )
    );
    let later = create(LATER).await;
    for (scans, ns) in [(&team, LABELLED), (&later, LATER)] {
        let planned = wait_condition(scans, ns, "Planned", "True", "Planned").await;
        assert!(planned.contains("shards"), "{planned}");
    }

    for ns in [LABELLED, LATER, PLAIN] {
        let scans: Api<BucketScan> = Api::namespaced(client.clone(), ns);
        scans.delete(ns, &Default::default()).await.unwrap();
        eventually(&format!("the scan in {ns} deleted"), 60, async || {
            scans.get_opt(ns).await.ok()?.is_none().then_some(())
        })
        .await;
    }
    for (ns, mut operator) in [LABELLED, LATER, PLAIN].iter().zip(operators) {
        operator.stop();
        let log = operator.log();
        let refused: Vec<&str> = log.lines().filter(|l| l.contains("forbidden")).collect();
        assert!(
            refused.is_empty(),
            "the chart's RBAC refused the operator in {ns}:\n{}",
            refused.join("\n")
        );
    }
}
