//! What a tenant may do with BucketScans, asked of the test ground's real
//! kube-apiserver under the chart's own admission policies and roles, as
//! the tenant (impersonation), never as the admin:
//! - a BucketScan is admitted only from a user who may create pods in its
//!   namespace, and only with the ServiceAccounts, PriorityClasses and
//!   tolerations the chart lists (each refusal says what and how to fix);
//! - the operator's ServiceAccount may write only Opaque Secrets (no
//!   ServiceAccount token);
//! - users holding the standard `edit` role in a namespace create
//!   BucketScans there, `view` reads them and creates none, through the
//!   chart's aggregated ClusterRoles (aggregated by the real
//!   kube-controller-manager, which the ground does not run otherwise).

mod cluster;
#[path = "../../worker/tests/common/mod.rs"]
mod common;

use bucketscan_operator::crd::BucketScan;
use cluster::*;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::rbac::v1::ClusterRole;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::Client;

/// A BucketScan named `name` whose `workers` are `workers`.
fn scan(name: &str, workers: serde_json::Value) -> BucketScan {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "bucketscan.dev/v1alpha1", "kind": "BucketScan",
        "metadata": {"name": name},
        "spec": {"source": {"bucket": "photos"}, "output": {"bucket": "results"}, "workers": workers}
    }))
    .unwrap()
}

/// The message of the API server's 403 to creating scan `name` with
/// `podTemplate` through `api`.
async fn refused(api: &Api<BucketScan>, name: &str, pod_template: serde_json::Value) -> String {
    let body = scan(name, serde_json::json!({"podTemplate": pod_template}));
    let (code, message) = refusal(api.create(&PostParams::default(), &body).await);
    assert_eq!(code, 403, "{message}");
    message
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bucketscan_is_admitted_only_from_who_may_create_its_pods_and_within_the_lists() {
    const NS: &str = "tenancy-admit";
    let admin = labelled_namespace(NS).await;
    let chart = chart_objects(
        "tenancy",
        "tenancy-release",
        &[
            &format!(
                "--set=admission.allowedServiceAccounts={{s3-reader,{NS}/irsa,another-tenant/secret-role}}"
            ),
            "--set=admission.allowedPriorityClasses={batch-low}",
            "--set=admission.allowedTolerationKeys={dedicated}",
        ],
    );
    apply_objects(&admission_policies(&chart, NS), "tenancy-admit-policies.json");
    // alice may write BucketScans but not create pods; bob may do both.
    grant(
        NS,
        "alice",
        "get,list,create,update,patch",
        "bucketscans.bucketscan.dev",
    );
    grant(
        NS,
        "bob",
        "get,list,create,update,patch",
        "bucketscans.bucketscan.dev",
    );
    grant(NS, "bob", "create", "pods");
    let alice: Api<BucketScan> = Api::namespaced(client_as("alice").await, NS);
    let bob: Api<BucketScan> = Api::namespaced(client_as("bob").await, NS);

    let admins: Api<BucketScan> = Api::namespaced(admin.clone(), NS);
    let alices = scan("alices", serde_json::json!({}));
    let message = settled_refusal(&alice, &admins, &alices, "may not create pods").await;
    assert!(
        message.ends_with(&format!(
            "BucketScans run pods in their namespace, and alice may not create pods in namespace {NS}: ask an \
             admin for create on pods there (the standard edit or admin role has it)"
        )),
        "{message}"
    );
    eventually("bob's scan admitted", 30, async || {
        bob.create(&PostParams::default(), &scan("bobs", serde_json::json!({})))
            .await
            .ok()
    })
    .await;

    // ServiceAccounts: a listed name, or this namespace's NAMESPACE/NAME.
    for (name, account) in [("plain-name", "s3-reader"), ("namespaced", "irsa")] {
        let body = scan(
            name,
            serde_json::json!({"podTemplate": {"serviceAccountName": account}}),
        );
        bob.create(&PostParams::default(), &body).await.unwrap();
    }
    let message = refused(
        &bob,
        "node-role",
        serde_json::json!({"serviceAccountName": "secret-role"}),
    )
    .await;
    assert!(
        message.ends_with(&format!(
            "spec.workers.podTemplate.serviceAccountName secret-role is not allowed in namespace {NS}; allowed: \
             s3-reader, {NS}/irsa (chart value admission.allowedServiceAccounts); remove it to run as the \
             namespace's default ServiceAccount"
        )),
        "another tenant's entries are neither allowed here nor named: {message}"
    );

    // PriorityClasses and tolerations.
    let message = refused(
        &bob,
        "critical",
        serde_json::json!({"priorityClassName": "system-cluster-critical"}),
    )
    .await;
    assert!(
        message.ends_with(
            "spec.workers.podTemplate.priorityClassName system-cluster-critical is not allowed; allowed: \
             batch-low (chart value admission.allowedPriorityClasses)"
        ),
        "{message}"
    );
    let low = scan(
        "low",
        serde_json::json!({"podTemplate": {"priorityClassName": "batch-low"}}),
    );
    bob.create(&PostParams::default(), &low).await.unwrap();
    for (name, toleration) in [
        ("everything", serde_json::json!({"operator": "Exists"})),
        (
            "control-plane",
            serde_json::json!({"key": "node-role.kubernetes.io/control-plane", "operator": "Exists"}),
        ),
    ] {
        let message = refused(&bob, name, serde_json::json!({"tolerations": [toleration]})).await;
        assert!(
            message
                .contains("spec.workers.podTemplate.tolerations may tolerate only the taint keys dedicated"),
            "{name}: {message}"
        );
    }
    let dedicated = scan(
        "dedicated",
        serde_json::json!({"podTemplate": {"tolerations": [{"key": "dedicated", "operator": "Equal", "value": "scan"}]}}),
    );
    bob.create(&PostParams::default(), &dedicated).await.unwrap();

    // Changing the spec of bob's scan is checked as creating it is; a
    // label (or a finalizer) is not the pods' business.
    let suspend = serde_json::json!({"spec": {"suspend": true}});
    let (_, message) = refusal(
        alice
            .patch("bobs", &PatchParams::default(), &Patch::Merge(&suspend))
            .await,
    );
    assert!(message.contains("alice may not create pods"), "{message}");
    let label = serde_json::json!({"metadata": {"labels": {"team": "a"}}});
    alice
        .patch("bobs", &PatchParams::default(), &Patch::Merge(&label))
        .await
        .unwrap();
    let other_account =
        serde_json::json!({"spec": {"workers": {"podTemplate": {"serviceAccountName": "secret-role"}}}});
    let (_, message) = refusal(
        bob.patch("bobs", &PatchParams::default(), &Patch::Merge(&other_account))
            .await,
    );
    assert!(
        message.contains("serviceAccountName secret-role is not allowed"),
        "{message}"
    );

    // admission.policy.enabled=false renders no policy.
    let off = chart_objects(
        "tenancy",
        "tenancy-release",
        &["--set=admission.policy.enabled=false"],
    );
    assert!(admission_policies(&off, NS).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operator_s_service_account_may_write_only_opaque_secrets() {
    const NS: &str = "tenancy-secrets";
    const RELEASE_NS: &str = "tenancy-secrets-release";
    let admin = client().await;
    for ns in [NS, RELEASE_NS] {
        namespace(&admin, ns).await;
    }
    let chart = chart_objects(
        "opsecrets",
        RELEASE_NS,
        &[&format!("--set=operator.scanNamespaces={{{NS}}}")],
    );
    let rbac: Vec<serde_json::Value> = chart
        .iter()
        .filter(|o| {
            let kind = o["kind"].as_str().unwrap();
            kind == "ServiceAccount" || o["apiVersion"] == "rbac.authorization.k8s.io/v1"
        })
        .cloned()
        .collect();
    apply_objects(&rbac, "tenancy-secrets-rbac.json");
    apply_objects(&admission_policies(&chart, NS), "tenancy-secrets-policies.json");
    let operator = format!("system:serviceaccount:{RELEASE_NS}:opsecrets-bucketscan");
    eventually("the chart's RBAC in force", 30, async || {
        can_i(&operator, &["create", "secrets", "-n", NS]).then_some(())
    })
    .await;
    let secrets: Api<Secret> = Api::namespaced(client_as(&operator).await, NS);
    let token: Secret = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "minted", "annotations": {"kubernetes.io/service-account.name": "default"}},
        "type": "kubernetes.io/service-account-token"
    }))
    .unwrap();
    let admins: Api<Secret> = Api::namespaced(admin.clone(), NS);
    let message = settled_refusal(&secrets, &admins, &token, "Opaque").await;
    assert!(
        message.ends_with(&format!(
            "the bucketscan operator ({operator}) may write only Opaque Secrets, not \
             kubernetes.io/service-account-token (chart policy opsecrets-bucketscan-operator-secrets)"
        )),
        "{message}"
    );
    // What the operator does write: a scan's Redis Secret, Opaque, by
    // server-side apply (created, then changed).
    let redis: Secret = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "scan-redis"},
        "stringData": {"url": "redis://u:p@redis:6379"}
    }))
    .unwrap();
    let apply = PatchParams::apply("bucketscan-operator").force();
    for _ in 0..2 {
        secrets
            .patch("scan-redis", &apply, &Patch::Apply(&redis))
            .await
            .unwrap();
    }
    // A token Secret someone else made cannot be changed through it either.
    let mut theirs = token.clone();
    theirs.metadata.name = Some("theirs".into());
    admins.create(&PostParams::default(), &theirs).await.unwrap();
    let label = serde_json::json!({"metadata": {"labels": {"x": "y"}}});
    let (code, message) = refusal(
        secrets
            .patch("theirs", &PatchParams::default(), &Patch::Merge(&label))
            .await,
    );
    assert!(
        code == 403 && message.contains("may write only Opaque Secrets"),
        "{message}"
    );
}

/// kube-controller-manager against the test ground, running only the
/// controller that folds `aggregate-to-*` ClusterRoles into the standard
/// roles (a cluster runs it always; the ground runs none).
fn aggregation_controller() -> Guarded {
    controller_manager(
        "clusterrole-aggregation",
        &[],
        &common::temp_path("kube-controller-manager.log"),
    )
}

async fn rules_grant(client: &Client, role: &str, verb: &str) -> bool {
    let roles: Api<ClusterRole> = Api::all(client.clone());
    let Ok(role) = roles.get(role).await else {
        return false;
    };
    role.rules.unwrap_or_default().iter().any(|r| {
        r.api_groups.iter().flatten().any(|g| g == "bucketscan.dev")
            && r.resources.iter().flatten().any(|x| x == "bucketscans")
            && r.verbs.iter().any(|v| v == verb)
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenants_with_the_standard_roles_create_and_read_bucketscans() {
    const NS: &str = "tenancy-roles";
    let admin = labelled_namespace(NS).await;
    let chart = chart_objects("roles", "tenancy-roles-release", &[]);
    let aggregated: Vec<serde_json::Value> = chart
        .iter()
        .filter(|o| {
            o["kind"] == "ClusterRole"
                && o["metadata"]["labels"]
                    .as_object()
                    .unwrap()
                    .keys()
                    .any(|k| k.starts_with("rbac.authorization.k8s.io/aggregate-to-"))
        })
        .cloned()
        .collect();
    assert_eq!(aggregated.len(), 2, "an edit and a view role");
    apply_objects(&aggregated, "tenancy-roles.json");
    apply_objects(&admission_policies(&chart, NS), "tenancy-roles-policies.json");
    let mut controller = aggregation_controller();
    eventually("edit and view aggregated", 60, async || {
        (rules_grant(&admin, "edit", "create").await
            && rules_grant(&admin, "admin", "create").await
            && rules_grant(&admin, "view", "list").await
            && !rules_grant(&admin, "view", "create").await)
            .then_some(())
    })
    .await;
    controller.stop();

    run(
        "kubectl",
        &[
            "-n",
            NS,
            "create",
            "rolebinding",
            "carol-edit",
            "--clusterrole=edit",
            "--user=carol",
        ],
    );
    run(
        "kubectl",
        &[
            "-n",
            NS,
            "create",
            "rolebinding",
            "dave-view",
            "--clusterrole=view",
            "--user=dave",
        ],
    );
    let carol: Api<BucketScan> = Api::namespaced(client_as("carol").await, NS);
    let dave: Api<BucketScan> = Api::namespaced(client_as("dave").await, NS);
    // edit includes create on pods: the admission policy admits carol's scan.
    eventually("carol's scan admitted", 30, async || {
        carol
            .create(&PostParams::default(), &scan("carols", serde_json::json!({})))
            .await
            .ok()
    })
    .await;
    assert_eq!(
        dave.get("carols").await.unwrap().metadata.name.as_deref(),
        Some("carols")
    );
    assert_eq!(dave.list(&Default::default()).await.unwrap().items.len(), 1);
    let (code, message) = refusal(
        dave.create(&PostParams::default(), &scan("daves", serde_json::json!({})))
            .await,
    );
    assert_eq!(code, 403, "{message}");
    assert!(
        message.contains("User \"dave\" cannot create resource \"bucketscans\""),
        "refused by RBAC: {message}"
    );
    carol.delete("carols", &Default::default()).await.unwrap();
}
