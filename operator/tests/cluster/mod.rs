//! Shared by the tests that talk to the kube-apiserver of the test ground
//! (scripts/with-test-servers.sh with BUCKETSCAN_TEST_KUBE=1, as `just test`
//! runs it): the ground itself (kubeconfig, CRDs, namespaces, the chart's
//! objects) here, and by concern:
//! - `operator`: the operator binary started through a guard that stops it
//!   with the test, also a failed one;
//! - `process`: the guard that stops such a process (also a
//!   kube-controller-manager) with its test;
//! - `secrets`: the Secrets a test writes for its scans;
//! - `clients`: the admin's client, impersonation and RBAC;
//! - `scans`: BucketScans as the tests write them and what they wait for.
//!
//! The plugin's tests include this directory too (`#[path]`).
#![allow(dead_code)]

mod clients;
mod operator;
mod process;
mod scans;
mod secrets;

// Each test file uses some of them.
#[allow(unused_imports)]
pub use {clients::*, operator::*, process::*, scans::*, secrets::*};

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::Client;
use std::time::Duration;

pub fn kubeconfig_path() -> String {
    std::env::var("BUCKETSCAN_TEST_KUBECONFIG")
        .expect("BUCKETSCAN_TEST_KUBECONFIG is not set: run the tests with `just test`")
}

/// Apply crds/ (as `kubectl apply` would) and wait until they are served:
/// BucketScan's and BucketScanSchedule's, as the chart installs both.
pub async fn install_crd(client: &Client) {
    install_crd_named(client, "bucketscans").await;
    install_crd_named(client, "bucketscanschedules").await;
}

async fn install_crd_named(client: &Client, plural: &str) {
    let name = format!("{plural}.bucketscan.dev");
    let yaml =
        std::fs::read_to_string(format!("{}/../crds/{name}.yaml", env!("CARGO_MANIFEST_DIR"))).unwrap();
    let crd: CustomResourceDefinition = serde_saphyr::from_str(&yaml).unwrap();
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    api.patch(
        &name,
        &PatchParams::apply("bucketscan-test").force(),
        &Patch::Apply(&crd),
    )
    .await
    .unwrap();
    for _ in 0..100 {
        let got = api.get(&name).await.unwrap();
        let established = got
            .status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .iter()
            .any(|c| c.type_ == "Established" && c.status == "True");
        if established {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the CRD was not established");
}

/// Namespace `name` with its `default` ServiceAccount, which a cluster's
/// controller-manager would make (the test ground has none) and without
/// which the API server refuses pods.
pub async fn namespace(client: &Client, name: &str) {
    namespace_with(client, name, serde_json::json!({}), &["default"]).await;
}

/// Namespace `name` created with `labels` (a JSON object of strings), and
/// the ServiceAccounts `accounts` in it. Either may be there already (a
/// test run again, or another test's namespace): that is not an error.
pub async fn namespace_with(client: &Client, name: &str, labels: serde_json::Value, accounts: &[&str]) {
    let api: Api<Namespace> = Api::all(client.clone());
    let ns: Namespace =
        serde_json::from_value(serde_json::json!({"metadata": {"name": name, "labels": labels}})).unwrap();
    let _ = api.create(&PostParams::default(), &ns).await;
    let service_accounts: Api<k8s_openapi::api::core::v1::ServiceAccount> =
        Api::namespaced(client.clone(), name);
    for account in accounts {
        let body = serde_json::from_value(serde_json::json!({"metadata": {"name": account}})).unwrap();
        let _ = service_accounts.create(&PostParams::default(), &body).await;
    }
}

/// A port free on 127.0.0.1 right now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Poll `probe` until it returns a value, at most `secs` seconds.
pub async fn eventually<T>(what: &str, secs: u64, mut probe: impl AsyncFnMut() -> Option<T>) -> T {
    let deadline = std::time::Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = probe().await {
            return v;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// GET `path` from 127.0.0.1:`port` (the operator's /metrics, /readyz):
/// status and body, `None` while nothing answers.
pub async fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.ok()?;
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes())
        .await
        .ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).await.ok()?;
    let code = text.split_whitespace().nth(1)?.parse().ok()?;
    Some((
        code,
        text.split("\r\n\r\n").nth(1).unwrap_or_default().to_string(),
    ))
}

/// The repository's root (`helm` and `kubectl` run there: `charts/...`).
pub fn repo() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// `program ARGS` in the repository with the ground's kubeconfig: its
/// stdout; a failure panics with its output.
pub fn run(program: &str, args: &[&str]) -> String {
    let out = std::process::Command::new(program)
        .args(args)
        .current_dir(repo())
        .env("KUBECONFIG", kubeconfig_path())
        .output()
        .unwrap_or_else(|e| panic!("{program}: {e} (scripts/install-kube.sh installs it)"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{program} {args:?} failed:\n{text}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A path for file `name` in this test process's own scratch directory.
pub fn scratch(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("bucketscan-chart-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

/// Applies the ServiceAccounts, roles and bindings of a rendered chart.
pub fn apply_rbac(rendered: &str, file_name: &str) {
    let rbac: Vec<&str> = rendered
        .split("\n---")
        .filter(|doc| {
            [
                "ServiceAccount",
                "ClusterRole",
                "ClusterRoleBinding",
                "Role",
                "RoleBinding",
            ]
            .iter()
            .any(|k| doc.contains(&format!("\nkind: {k}\n")))
        })
        .collect();
    let file = scratch(file_name);
    std::fs::write(&file, rbac.join("\n---")).unwrap();
    run("kubectl", &["apply", "-f", file.to_str().unwrap()]);
}

/// The chart's ServiceAccount of release `release` in `namespace`, as the
/// API server names it (`helm template RELEASE`, no fullnameOverride).
pub fn chart_account(release: &str, namespace: &str) -> String {
    format!("system:serviceaccount:{namespace}:{release}-bucketscan")
}

/// `helm template RELEASE charts/bucketscan -n NAMESPACE VALUES...` as
/// objects (comments and empty documents dropped).
pub fn chart_objects(release: &str, namespace: &str, values: &[&str]) -> Vec<serde_json::Value> {
    let mut args = vec!["template", release, "charts/bucketscan", "--namespace", namespace];
    args.extend_from_slice(values);
    run("helm", &args)
        .split("\n---")
        .filter_map(|doc| serde_saphyr::from_str::<serde_json::Value>(doc).ok())
        .filter(|v| v.is_object())
        .collect()
}

/// `kubectl apply` of `objects` (as the admin), through a file `file_name`.
pub fn apply_objects(objects: &[serde_json::Value], file_name: &str) {
    let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": objects});
    let file = scratch(file_name);
    std::fs::write(&file, list.to_string()).unwrap();
    run("kubectl", &["apply", "-f", file.to_str().unwrap()]);
}

/// The chart's ValidatingAdmissionPolicies and their bindings, the
/// BucketScan and BucketScanSchedule ones limited to namespaces labelled `bucketscan.dev/test=LABEL`:
/// the test ground's API server is shared by tests running at the same
/// time, whose scans (created as the admin, with ServiceAccounts and
/// PriorityClasses of their own) the lists of another test must not refuse.
pub fn admission_policies(objects: &[serde_json::Value], label: &str) -> Vec<serde_json::Value> {
    objects
        .iter()
        .filter(|o| {
            o["apiVersion"] == "admissionregistration.k8s.io/v1"
                && o["kind"]
                    .as_str()
                    .unwrap()
                    .starts_with("ValidatingAdmissionPolicy")
        })
        .cloned()
        .map(|mut o| {
            let name = o["metadata"]["name"].as_str().unwrap();
            let bucketscans = name.ends_with("-bucketscans") || name.ends_with("-bucketscanschedules");
            if o["kind"] == "ValidatingAdmissionPolicyBinding" && bucketscans {
                o["spec"]["matchResources"] = serde_json::json!({
                    "namespaceSelector": {"matchLabels": {"bucketscan.dev/test": label}}
                });
            }
            o
        })
        .collect()
}

/// Label namespace `ns` with `bucketscan.dev/test=LABEL` (see
/// `admission_policies`).
pub async fn label_namespace(client: &Client, ns: &str, label: &str) {
    set_namespace_label(client, ns, "bucketscan.dev/test", label).await;
}

/// Sets label `key=value` on namespace `ns`.
pub async fn set_namespace_label(client: &Client, ns: &str, key: &str, value: &str) {
    let api: Api<Namespace> = Api::all(client.clone());
    let patch = serde_json::json!({"metadata": {"labels": {key: value}}});
    api.patch(ns, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
}

/// The admin's client, with the CRDs and namespace `ns` labelled so that
/// the policies `admission_policies` applies (with label `ns`) check scans
/// there.
pub async fn labelled_namespace(ns: &str) -> Client {
    let admin = client().await;
    install_crd(&admin).await;
    namespace(&admin, ns).await;
    label_namespace(&admin, ns, ns).await;
    admin
}
