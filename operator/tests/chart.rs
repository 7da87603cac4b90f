//! The Helm chart: `helm lint`, then every rendered manifest (several value
//! sets) and the example BucketScan checked by kubeconform against schemas
//! taken from the test ground's kube-apiserver (the CRD's included), and by
//! the API server itself in a server-side dry run.

mod cluster;

use cluster::*;
use std::process::Command;

/// Value sets that between them turn every template branch on.
const VALUE_SETS: &[(&str, &[&str])] = &[
    ("default", &[]),
    (
        "external-tls",
        &[
            "--set=redis.bundled=false",
            "--set=redis.external.url=rediss://redis.example:6380",
            "--set=redis.external.passwordSecret=redis-password",
            "--set=redis.external.caSecret=redis-ca",
            "--set=crds.install=false",
        ],
    ),
    (
        "external-sentinel",
        &[
            "--set=redis.bundled=false",
            "--set=redis.external.url=redis+sentinel://s1:26379\\,s2:26379\\,s3:26379/mymaster?sentinelUser=bucketscan&sentinelPassword=$(REDIS_SENTINEL_PASSWORD)",
            "--set=redis.external.passwordSecret=redis-password",
            "--set=redis.external.sentinelPasswordSecret=sentinel-password",
        ],
    ),
    (
        "namespaced",
        &[
            "--set=operator.watchOwnNamespace=true",
            "--set=operator.replicas=2",
            "--set=redis.persistence.enabled=true",
            "--set=metrics.serviceMonitor.enabled=true",
            "--set=metrics.prometheusRule.enabled=true",
            "--set=metrics.grafanaDashboard.enabled=true",
        ],
    ),
    (
        "tenancy",
        &[
            "--set=operator.scanNamespaces={chart-test,default}",
            "--set=worker.allowedImages={*}",
            "--set=admission.allowedServiceAccounts={s3-reader,chart-test/irsa}",
            "--set=admission.allowedPriorityClasses={batch-low}",
            "--set=admission.allowedTolerationKeys={dedicated}",
        ],
    ),
    (
        "no-policies",
        &[
            "--set=admission.policy.enabled=false",
            "--set=rbac.aggregateClusterRoles=false",
        ],
    ),
    (
        "gitops",
        &[
            "--set=redis.auth.existingSecret=redis-auth",
            "--set=redis.auth.existingSecretKey=pw",
            "--set=redis.image.digest=sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
            "--set=redis.networkPolicy.scanNamespaceSelector.matchLabels.scans=allowed",
            "--set=crds.keep=false",
        ],
    ),
    (
        // Every option for real installs on at once (issue 31, 3).
        "install-options",
        &[
            "--set=fullnameOverride=scanner",
            "--set=imagePullSecrets[0].name=regcred",
            "--set=image.digest=sha256:abababababababababababababababababababababababababababababababab",
            "--set=worker.image.digest=sha256:cdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcd",
            "--set-string=operator.podAnnotations.example\\.com/owner=platform",
            "--set=operator.podLabels.team=platform",
            "--set=operator.priorityClassName=system-cluster-critical",
            "--set-string=operator.scanNamespaceSelector.matchLabels.bucketscan\\.dev/scans=true",
            "--set=operator.scanNamespaceSelector.matchExpressions[0].key=team",
            "--set=operator.scanNamespaceSelector.matchExpressions[0].operator=In",
            "--set=operator.scanNamespaceSelector.matchExpressions[0].values={a,b}",
            "--set=operator.networkPolicy.enabled=true",
            "--set=operator.networkPolicy.metricsFrom[0].namespaceSelector.matchLabels.kubernetes\\.io/metadata\\.name=monitoring",
            "--set=operator.networkPolicy.kubeApiServerCidrs={172.18.0.2/32}",
            "--set=operator.networkPolicy.s3Cidrs={10.0.0.0/8,fd00::/8}",
            "--set=operator.networkPolicy.s3Ports={443,9000}",
            "--set=operator.networkPolicy.extraEgress[0].ports[0].port=8443",
            "--set=metrics.podMonitor.enabled=true",
        ],
    ),
];

#[tokio::test]
async fn the_chart_lints_and_renders_valid_manifests() {
    let client = client().await;
    install_crd(&client).await;
    namespace(&client, "chart-test").await;

    run("helm", &["lint", "--strict", "charts/bucketscan"]);
    let refused = Command::new("helm")
        .args(["lint", "charts/bucketscan", "--set=redis.bundled=false"])
        .current_dir(repo())
        .output()
        .unwrap();
    assert!(
        !refused.status.success(),
        "an external Redis without a URL must be refused"
    );

    let schemas = scratch("schemas");
    let openapi = run("kubectl", &["get", "--raw", "/openapi/v2"]);
    let mut convert = Command::new("python3")
        .arg(repo().join("scripts/openapi-to-jsonschema.py"))
        .arg(&schemas)
        .stdin(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    convert
        .stdin
        .take()
        .unwrap()
        .write_all(openapi.as_bytes())
        .unwrap();
    assert!(convert.wait().unwrap().success());
    assert!(schemas.join("bucketscan-bucketscan-v1alpha1.json").exists());

    let location = format!(
        "{}/{{{{ .ResourceKind }}}}{{{{ .KindSuffix }}}}.json",
        schemas.display()
    );
    for (name, values) in VALUE_SETS {
        let mut args = vec!["template", "bs", "charts/bucketscan", "--namespace", "chart-test"];
        args.extend_from_slice(values);
        check_manifests(name, &run("helm", &args), &location);
    }
    let example = std::fs::read_to_string(repo().join("examples/bucketscan.yaml")).unwrap();
    check_manifests("example", &example, &location);
}

/// kubeconform -strict against the schemas at `location`, then the API
/// server's own dry run. ServiceMonitors, PodMonitors and PrometheusRules are left out:
/// their CRDs belong to prometheus-operator, which neither has here (the
/// rules themselves are checked by promtool in observability.rs).
fn check_manifests(name: &str, manifests: &str, location: &str) {
    let checked: String = manifests
        .split("\n---")
        .filter(|doc| {
            !["kind: ServiceMonitor", "kind: PodMonitor", "kind: PrometheusRule"]
                .iter()
                .any(|kind| doc.contains(kind))
        })
        .collect::<Vec<_>>()
        .join("\n---");
    let file = scratch(&format!("{name}.yaml"));
    std::fs::write(&file, &checked).unwrap();
    let file = file.to_str().unwrap();
    run(
        "kubeconform",
        &["-strict", "-summary", "-schema-location", location, file],
    );
    // A Pod (the `helm test` hook) is admitted only when its ServiceAccount
    // exists, which a dry run does not create: the ServiceAccounts go first.
    let accounts: Vec<&str> = manifests
        .split("\n---")
        .filter(|doc| doc.contains("\nkind: ServiceAccount"))
        .collect();
    if !accounts.is_empty() {
        let accounts_file = scratch(&format!("{name}-accounts.yaml"));
        std::fs::write(&accounts_file, accounts.join("\n---")).unwrap();
        run(
            "kubectl",
            &["apply", "-n", "chart-test", "-f", accounts_file.to_str().unwrap()],
        );
    }
    // Objects the chart puts in other namespaces (the Secret RoleBindings of
    // operator.scanNamespaces) are dry-run there.
    let (foreign, home): (Vec<&str>, Vec<&str>) = checked
        .split("\n---")
        .partition(|doc| metadata_namespace(doc).is_some_and(|ns| ns != "chart-test"));
    let home_file = scratch(&format!("{name}-home.yaml"));
    std::fs::write(&home_file, home.join("\n---")).unwrap();
    run(
        "kubectl",
        &[
            "apply",
            "--dry-run=server",
            "-n",
            "chart-test",
            "-f",
            home_file.to_str().unwrap(),
        ],
    );
    for (i, doc) in foreign.iter().enumerate() {
        let ns = metadata_namespace(doc).unwrap();
        let doc_file = scratch(&format!("{name}-foreign-{i}.yaml"));
        std::fs::write(&doc_file, doc).unwrap();
        run(
            "kubectl",
            &[
                "apply",
                "--dry-run=server",
                "-n",
                ns,
                "-f",
                doc_file.to_str().unwrap(),
            ],
        );
    }
}

/// The `metadata.namespace` a rendered manifest names, if any.
fn metadata_namespace(doc: &str) -> Option<&str> {
    doc.lines()
        .find_map(|l| l.strip_prefix("  namespace: "))
        .map(|ns| ns.trim().trim_matches('"'))
}

/// The chart's RBAC as the API server enforces it, asked with `kubectl auth
/// can-i` as the operator's ServiceAccount: BucketScans in every namespace,
/// but Secrets, Deployments, Jobs and pods only in `operator.scanNamespaces`
/// (nothing in kube-system), no list of Secrets anywhere; `["*"]` is
/// cluster-wide, as documented.
#[tokio::test]
async fn the_operator_reaches_secrets_deployments_jobs_and_pods_only_where_scans_run() {
    let client = client().await;
    install_crd(&client).await;
    for ns in ["rbac-release", "rbac-team", "rbac-other"] {
        namespace(&client, ns).await;
    }
    let rendered = run(
        "helm",
        &[
            "template",
            "rbacx",
            "charts/bucketscan",
            "--namespace",
            "rbac-release",
            "--set",
            "operator.scanNamespaces={rbac-team}",
        ],
    );
    apply_rbac(&rendered, "rbac.yaml");
    let can = |args: &[&str]| can_i("system:serviceaccount:rbac-release:rbacx-bucketscan", args);
    for verb in ["get", "create", "patch"] {
        assert!(
            can(&[verb, "secrets", "-n", "rbac-team"]),
            "{verb} secrets in rbac-team"
        );
    }
    for ns in ["rbac-other", "default", "kube-system"] {
        assert!(!can(&["get", "secrets", "-n", ns]), "get secrets in {ns}");
    }
    assert!(!can(&["get", "secrets", "--all-namespaces"]));
    assert!(
        !can(&["list", "secrets", "-n", "rbac-team"]),
        "the operator never lists Secrets"
    );
    assert!(!can(&["watch", "secrets", "-n", "rbac-team"]));
    assert!(can(&["list", "bucketscans.bucketscan.dev", "--all-namespaces"]));
    for (verb, what) in [
        ("create", "deployments.apps"),
        ("watch", "deployments.apps"),
        ("delete", "deployments.apps"),
        ("create", "jobs.batch"),
        ("watch", "jobs.batch"),
        ("list", "pods"),
    ] {
        assert!(
            can(&[verb, what, "-n", "rbac-team"]),
            "{verb} {what} in rbac-team"
        );
        for ns in ["rbac-other", "default", "kube-system"] {
            assert!(!can(&[verb, what, "-n", ns]), "{verb} {what} in {ns}");
        }
        assert!(
            !can(&[verb, what, "--all-namespaces"]),
            "{verb} {what} cluster-wide"
        );
    }
    for (verb, what) in [
        ("get", "pods"),
        ("watch", "pods"),
        ("create", "pods/exec"),
        ("update", "deployments.apps"),
    ] {
        assert!(!can(&[verb, what, "-n", "rbac-team"]), "never {verb} {what}");
    }
    // Only the verbs the code uses on BucketScans.
    let scans = "bucketscans.bucketscan.dev";
    assert!(can(&["patch", scans, "-n", "rbac-team"]));
    assert!(can(&["patch", scans, "-n", "rbac-team", "--subresource=status"]));
    assert!(!can(&["update", scans, "-n", "rbac-team"]), "never replaced");
    assert!(!can(&[
        "update",
        scans,
        "-n",
        "rbac-team",
        "--subresource=status"
    ]));
    assert!(
        can(&["update", scans, "-n", "rbac-team", "--subresource=finalizers"]),
        "blockOwnerDeletion under OwnerReferencesPermissionEnforcement"
    );
}

/// `operator.scanNamespaces=["*"]` binds the same rules cluster-wide (the
/// documented price of "every namespace").
#[tokio::test]
async fn every_namespace_means_cluster_wide() {
    let client = client().await;
    namespace(&client, "rbac-star").await;
    let rendered = run(
        "helm",
        &[
            "template",
            "rbacstar",
            "charts/bucketscan",
            "--namespace",
            "rbac-star",
            "--set",
            "operator.scanNamespaces={*}",
        ],
    );
    apply_rbac(&rendered, "rbac-star.yaml");
    let account = "system:serviceaccount:rbac-star:rbacstar-bucketscan";
    eventually("the ClusterRoleBinding in force", 30, async || {
        can_i(account, &["create", "deployments.apps", "-n", "kube-system"]).then_some(())
    })
    .await;
    for (verb, what) in [("get", "secrets"), ("create", "jobs.batch"), ("list", "pods")] {
        assert!(can_i(account, &[verb, what, "--all-namespaces"]), "{verb} {what}");
    }
}

/// A namespaced install (`operator.watchOwnNamespace`) reaches its own
/// namespace only: Secrets, BucketScans, Deployments and Jobs there, none of
/// them anywhere else.
#[tokio::test]
async fn a_namespaced_install_reaches_its_own_namespace_only() {
    let client = client().await;
    install_crd(&client).await;
    for ns in ["rbac-own", "rbac-elsewhere"] {
        namespace(&client, ns).await;
    }
    let rendered = run(
        "helm",
        &[
            "template",
            "rbacown",
            "charts/bucketscan",
            "--namespace",
            "rbac-own",
            "--set",
            "operator.watchOwnNamespace=true",
        ],
    );
    apply_rbac(&rendered, "rbac-own.yaml");
    let can = |args: &[&str]| can_i("system:serviceaccount:rbac-own:rbacown-bucketscan", args);
    for (verb, what) in [
        ("get", "secrets"),
        ("create", "secrets"),
        ("list", "bucketscans.bucketscan.dev"),
        ("create", "deployments.apps"),
        ("create", "jobs.batch"),
        ("list", "pods"),
    ] {
        assert!(
            can(&[verb, what, "-n", "rbac-own"]),
            "{verb} {what} in its namespace"
        );
        assert!(
            !can(&[verb, what, "-n", "rbac-elsewhere"]),
            "{verb} {what} elsewhere"
        );
    }
    assert!(
        !can(&["list", "secrets", "-n", "rbac-own"]),
        "the operator never lists Secrets"
    );
    assert!(!can(&["list", "bucketscans.bucketscan.dev", "--all-namespaces"]));
}
