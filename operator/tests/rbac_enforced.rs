//! The chart's RBAC enforced on the real operator. The other tests' operators
//! run as the test ground's admin (system:masters), which the API server
//! never refuses; here the operator binary runs as the chart's own
//! ServiceAccount (a kubeconfig that impersonates it), with the
//! ServiceAccount, roles and bindings of `helm template --set
//! operator.scanNamespaces={TEAM}` applied, so every request it makes is
//! authorized by the chart's RBAC and nothing else:
//! - a scan in a namespace outside scanNamespaces fails (`NamespaceNotAllowed`);
//! - a scan in a namespace the operator is told to serve but the chart did
//!   not bind waits on the API server's own 403 (`Blocked`, `SecretForbidden`)
//!   and is planned once the binding is there;
//! - a scan in the team namespace is planned and gets its worker Deployment,
//!   Redis Secret, events and status, so the chart grants what the normal
//!   path needs (no request of the operator is refused there), with
//!   Deployments, Jobs and pods granted in the scan namespaces only and
//!   watched there only (the operator watching a namespace outside them
//!   asks nothing of those kinds), and the chart's policy on the
//!   operator's Secrets in force;
//! - the same ServiceAccount is refused a Deployment in kube-system and
//!   every cluster-wide list of Deployments, Jobs and pods;
//! - all of them are deleted through the finalizer.

mod cluster;
#[path = "../../worker/tests/common/mod.rs"]
mod common;

use bucketscan_operator::crd::{BucketScan, Phase};
use cluster::*;
use common::*;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DeleteParams, PostParams};
use kube::Client;
use std::path::Path;

const RELEASE: &str = "enforced";
const RELEASE_NS: &str = "enforced-release";
/// In the chart's scanNamespaces: a RoleBinding to read its Secrets.
const TEAM: &str = "enforced-team";
/// Given to the operator (`--scan-namespaces`) but not to the chart: no
/// RoleBinding, so the API server refuses the operator its Secrets.
const UNBOUND: &str = "enforced-unbound";
/// In neither.
const OTHER: &str = "enforced-other";
/// What the operator is told, as the chart's BUCKETSCAN_SCAN_NAMESPACES would.
const SCAN_NAMESPACES: &str = "enforced-team,enforced-unbound";

/// The chart's ServiceAccount, as the API server names it.
fn account() -> String {
    chart_account(RELEASE, RELEASE_NS)
}

/// `helm template` of the chart with `scan_namespaces`; its ServiceAccount,
/// roles and bindings applied (as the admin), and in force: the
/// authorizer reads RBAC from a cache, so a binding just made may not
/// count for a moment, and the operator started then would be refused.
async fn apply_chart_rbac(scan_namespaces: &str, file_name: &str) {
    let rendered = run(
        "helm",
        &[
            "template",
            RELEASE,
            "charts/bucketscan",
            "--namespace",
            RELEASE_NS,
            "--set",
            &format!("operator.scanNamespaces={{{scan_namespaces}}}"),
        ],
    );
    apply_rbac(&rendered, file_name);
    // The policy holding the operator to Opaque Secrets (it matches this
    // release's ServiceAccount only, so other tests are not affected).
    let policies: Vec<serde_json::Value> = rendered
        .split("\n---")
        .filter_map(|doc| serde_saphyr::from_str::<serde_json::Value>(doc).ok())
        .filter(|o| {
            o["metadata"]["name"]
                .as_str()
                .is_some_and(|n| n.ends_with("-operator-secrets"))
        })
        .collect();
    assert_eq!(policies.len(), 2, "the policy and its binding");
    apply_objects(&policies, &format!("policies-{file_name}.json"));
    for ns in scan_namespaces.split(',') {
        eventually(&format!("the chart's binding in {ns} in force"), 30, async || {
            can_i(&account(), &["get", "secrets", "-n", ns]).then_some(())
        })
        .await;
    }
}

/// The operator watching `ns` as the chart's ServiceAccount would run it
/// (its scan namespaces and Redis scan users), authorized as that account.
fn operator_as_chart(ns: &str, kubeconfig: &Path) -> Operator {
    Operator::watching(ns)
        .kubeconfig(kubeconfig)
        // Debug for the controller: a refused watch (Deployments, Jobs) is
        // logged only there ("reconcile ended with an error").
        .env(
            "BUCKETSCAN_LOG",
            "info,kube_runtime=warn,aws_config=error,bucketscan_operator::controller=debug",
        )
        .args(["--scan-namespaces", SCAN_NAMESPACES])
        .redis_scan_users()
        .start()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operator_works_with_the_chart_s_rbac_and_is_refused_the_rest() {
    let client = client().await;
    install_crd(&client).await;
    for ns in [RELEASE_NS, TEAM, UNBOUND, OTHER] {
        namespace(&client, ns).await;
    }
    apply_chart_rbac(TEAM, "enforced-rbac.yaml").await;
    let kubeconfig = scratch("enforced-kubeconfig.yaml");
    impersonating_kubeconfig(&account(), &kubeconfig);
    let s3 = versitygw();
    let (bucket, out) = (s3.bucket("rbac").await, s3.bucket("rbac-out").await);
    let objects = (0..20).map(|i| (format!("k{i:02}"), Seeded::default())).collect();
    s3.seed(&bucket, &objects).await;
    // Every namespace holds the credentials (written by the admin): only
    // RBAC decides whether the operator may read them.
    for ns in [TEAM, UNBOUND, OTHER] {
        create_s3_secret(&client, ns, "s3", &s3.access_key, &s3.secret_key).await;
    }
    // One operator per namespace (`--namespace`, as every test operator
    // runs): one watching all would also take the other tests' scans.
    let operators: Vec<Operator> = [TEAM, UNBOUND, OTHER]
        .iter()
        .map(|ns| operator_as_chart(ns, &kubeconfig))
        .collect();
    for ns in [TEAM, UNBOUND, OTHER] {
        let scans: Api<BucketScan> = Api::namespaced(client.clone(), ns);
        let scan = s3_scan(
            ns,
            &s3.endpoint,
            &bucket,
            &out,
            serde_json::json!({"workers": {"replicas": 1}}),
        );
        scans.create(&PostParams::default(), &scan).await.unwrap();
    }

    refused_beyond_the_scan_namespaces().await;
    not_allowed_elsewhere(&client).await;
    forbidden_until_bound(&client).await;
    planned_in_the_team_namespace(&client).await;
    deleted_through_the_finalizer(&client).await;

    for (ns, mut operator) in [TEAM, UNBOUND, OTHER].iter().zip(operators) {
        operator.stop();
        let log = operator.log();
        // In the unbound namespace its Secret, and the watches of its
        // Deployments and Jobs, were refused before its binding, as they
        // must be; nothing else may be anywhere.
        let expected =
            |l: &str| *ns == UNBOUND && ["secrets", "deployments", "jobs"].iter().any(|k| l.contains(k));
        let refused: Vec<&str> = log
            .lines()
            .filter(|l| l.contains("forbidden") && !expected(l))
            .collect();
        assert!(
            refused.is_empty(),
            "the chart's RBAC refused the operator in {ns}:\n{}",
            refused.join("\n")
        );
    }
}

/// The operator's ServiceAccount, with the chart's RBAC only, may not
/// create a Deployment in kube-system (nor Jobs or pods' lists outside the
/// scan namespaces): the API server refuses it.
async fn refused_beyond_the_scan_namespaces() {
    use k8s_openapi::api::batch::v1::Job;
    use k8s_openapi::api::core::v1::Pod;
    let operator = client_as(&account()).await;
    let deployment: Deployment = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "miner", "labels": {"app": "miner"}},
        "spec": {"selector": {"matchLabels": {"app": "miner"}},
                 "template": {"metadata": {"labels": {"app": "miner"}},
                              "spec": {"containers": [{"name": "m", "image": "miner:1"}]}}}
    }))
    .unwrap();
    let system: Api<Deployment> = Api::namespaced(operator.clone(), "kube-system");
    let (code, message) = refusal(system.create(&PostParams::default(), &deployment).await);
    assert_eq!(code, 403, "{message}");
    assert!(
        message.contains(&format!(
            "User \"{}\" cannot create resource \"deployments\" in API group \"apps\" in the namespace \"kube-system\"",
            account()
        )),
        "{message}"
    );
    let everywhere = kube::api::ListParams::default();
    assert_eq!(
        refusal(Api::<Deployment>::all(operator.clone()).list(&everywhere).await).0,
        403
    );
    assert_eq!(
        refusal(Api::<Job>::all(operator.clone()).list(&everywhere).await).0,
        403
    );
    assert_eq!(
        refusal(Api::<Pod>::all(operator.clone()).list(&everywhere).await).0,
        403
    );
    let other: Api<Pod> = Api::namespaced(operator, OTHER);
    assert_eq!(
        refusal(other.list(&everywhere).await).0,
        403,
        "pods outside scanNamespaces"
    );
}

/// (a) A namespace outside scanNamespaces: the scan fails at once, saying
/// which namespaces may run scans and how to add one.
async fn not_allowed_elsewhere(client: &Client) {
    let scans: Api<BucketScan> = Api::namespaced(client.clone(), OTHER);
    let message = wait_condition(&scans, OTHER, "Failed", "True", "NamespaceNotAllowed").await;
    assert_eq!(
        message,
        "namespace \"enforced-other\" may not run BucketScans: this operator runs them only in \
         enforced-team, enforced-unbound (chart value scanNamespaces; each listed namespace gets a \
         RoleBinding to read its Secrets)"
    );
    wait_event(client, OTHER, "NamespaceNotAllowed").await;
}

/// (b) A namespace the operator serves but the chart did not bind: reading
/// the scan's Secret gets the API server's 403, and the scan waits (Blocked,
/// not Failed) with what to do; once the chart binds the namespace, the scan
/// is planned.
async fn forbidden_until_bound(client: &Client) {
    let scans: Api<BucketScan> = Api::namespaced(client.clone(), UNBOUND);
    let message = wait_condition(&scans, UNBOUND, "Blocked", "True", "SecretForbidden").await;
    assert!(
        message.starts_with(
            "the operator may not read Secret \"s3\" (spec.source.credentialsSecret) in namespace \
             \"enforced-unbound\": add the namespace to the chart value scanNamespaces (a \
             RoleBinding to the ClusterRole RELEASE-scan-namespace); retrying in "
        ),
        "{message}"
    );
    wait_event(client, UNBOUND, "SecretForbidden").await;
    let phase = scans.get(UNBOUND).await.unwrap().status.unwrap().phase;
    assert_ne!(
        phase,
        Phase::Failed,
        "a missing binding may be added: the scan waits"
    );

    apply_chart_rbac(SCAN_NAMESPACES, "enforced-rbac-both.yaml").await;
    // The first retry comes 5 s after the refusal, the next 10 s later.
    wait_condition(&scans, UNBOUND, "Planned", "True", "Planned").await;
    wait_condition(&scans, UNBOUND, "Blocked", "False", "Unblocked").await;
}

/// (c) The team namespace: the operator reads the credentials, plans the
/// scan, creates its Redis Secret and worker Deployment, writes its status
/// and events, all under the chart's RBAC.
async fn planned_in_the_team_namespace(client: &Client) {
    let scans: Api<BucketScan> = Api::namespaced(client.clone(), TEAM);
    let message = wait_condition(&scans, TEAM, "Planned", "True", "Planned").await;
    assert!(message.contains("shards"), "{message}");
    let scan = eventually("the team scan scanning", 30, async || {
        let scan = scans.get(TEAM).await.ok()?;
        (scan.status.as_ref()?.phase == Phase::Scanning).then_some(scan)
    })
    .await;
    let blocked = condition(&scans, TEAM, "Blocked").await;
    assert!(
        blocked.as_ref().is_none_or(|(status, ..)| status != "True"),
        "{blocked:?}"
    );
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), TEAM);
    let secrets: Api<Secret> = Api::namespaced(client.clone(), TEAM);
    let workers = bucketscan_operator::desired::workers_name(&scan);
    let redis = bucketscan_operator::desired::redis_secret_name(&scan);
    eventually("the team scan's worker Deployment", 30, async || {
        deployments.get_opt(&workers).await.ok()?
    })
    .await;
    assert!(secrets.get_opt(&redis).await.unwrap().is_some(), "{redis}");
    wait_event(client, TEAM, "Planned").await;
}

/// Deleting each scan runs the finalizer's cleanup under the same RBAC
/// (the scan outside scanNamespaces skips its Secrets).
async fn deleted_through_the_finalizer(client: &Client) {
    for ns in [TEAM, UNBOUND, OTHER] {
        let scans: Api<BucketScan> = Api::namespaced(client.clone(), ns);
        scans.delete(ns, &DeleteParams::default()).await.unwrap();
    }
    for ns in [TEAM, UNBOUND, OTHER] {
        let scans: Api<BucketScan> = Api::namespaced(client.clone(), ns);
        eventually(&format!("the scan in {ns} deleted"), 60, async || {
            scans.get_opt(ns).await.ok()?.is_none().then_some(())
        })
        .await;
    }
}
