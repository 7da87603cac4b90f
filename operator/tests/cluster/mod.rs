//! Shared by the tests that talk to the kube-apiserver of the test ground
//! (scripts/with-test-servers.sh with BUCKETSCAN_TEST_KUBE=1, as `just test`
//! runs it).
#![allow(dead_code)]

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use std::time::Duration;

/// The operator binary as a test runs it: watching `ns`, with the test
/// ground's kubeconfig and Redis, its S3 servers allowed, stdout dropped and its log (stderr) in
/// `log`. The caller adds its own flags (at least `--metrics-addr`) and
/// spawns it. A macro: only the operator's own tests have its binary
/// (other crates' tests share this file).
#[macro_export]
macro_rules! operator_command {
    ($ns:expr, $log:expr) => {{
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_bucketscan-operator"));
        command
            .args(["--namespace", $ns])
            .env("KUBECONFIG", $crate::cluster::kubeconfig_path())
            .env(
                "BUCKETSCAN_REDIS_URL",
                std::env::var("BUCKETSCAN_TEST_REDIS_URL").expect("run the tests with `just test`"),
            )
            .env(
                "BUCKETSCAN_ALLOWED_ENDPOINTS",
                $crate::cluster::TEST_GROUND_ENDPOINTS,
            )
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create($log).unwrap());
        command
    }};
}

/// The operator's endpoint allowlist in these tests: the test ground's S3
/// servers listen on loopback, which the default refuses (a tenant must
/// not reach the operator's own host), so every operator a test starts
/// allows it by name, as a platform would list its store.
pub const TEST_GROUND_ENDPOINTS: &str = "127.0.0.1";

/// A copy of the test ground's kubeconfig, written to `path`, whose user
/// impersonates `user` (`as:`, which kube-rs and kubectl send as the
/// `Impersonate-User` header): the API server authorizes every request made
/// with it as `user`, by RBAC, instead of as the ground's admin.
pub fn impersonating_kubeconfig(user: &str, path: &std::path::Path) {
    let mut kc = Kubeconfig::read_from(kubeconfig_path()).unwrap();
    for named in &mut kc.auth_infos {
        named.auth_info.get_or_insert_default().impersonate = Some(user.to_string());
    }
    std::fs::write(path, serde_saphyr::to_string(&kc).unwrap()).unwrap();
}

pub fn kubeconfig_path() -> String {
    std::env::var("BUCKETSCAN_TEST_KUBECONFIG")
        .expect("BUCKETSCAN_TEST_KUBECONFIG is not set: run the tests with `just test`")
}

pub async fn client() -> Client {
    let kc = Kubeconfig::read_from(kubeconfig_path()).unwrap();
    let config = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .unwrap();
    Client::try_from(config).unwrap()
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
    let api: Api<Namespace> = Api::all(client.clone());
    let ns: Namespace = serde_json::from_value(serde_json::json!({"metadata": {"name": name}})).unwrap();
    let _ = api.create(&PostParams::default(), &ns).await;
    let accounts: Api<k8s_openapi::api::core::v1::ServiceAccount> = Api::namespaced(client.clone(), name);
    let default = serde_json::from_value(serde_json::json!({"metadata": {"name": "default"}})).unwrap();
    let _ = accounts.create(&PostParams::default(), &default).await;
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

/// Secret `name` in `ns` holding S3 credentials as a BucketScan's
/// `credentialsSecret` expects them.
pub async fn create_s3_secret(client: &Client, ns: &str, name: &str, access_key: &str, secret_key: &str) {
    use k8s_openapi::api::core::v1::Secret;
    let secrets: kube::Api<Secret> = kube::Api::namespaced(client.clone(), ns);
    let creds: Secret = serde_json::from_value(serde_json::json!({
        "metadata": {"name": name},
        "stringData": {"AWS_ACCESS_KEY_ID": access_key, "AWS_SECRET_ACCESS_KEY": secret_key}
    }))
    .unwrap();
    secrets.create(&Default::default(), &creds).await.unwrap();
}

/// BucketScan `name` as the tests write one: `bucket` at `endpoint` (path
/// style) read with the credentials Secret `s3` (`create_s3_secret`), the
/// result in `out` under `NAME/`; each field of `spec` is set over these
/// (workers, sharding, ...).
pub fn s3_scan(
    name: &str,
    endpoint: &str,
    bucket: &str,
    out: &str,
    spec: serde_json::Value,
) -> bucketscan_api::crd::BucketScan {
    let mut body = serde_json::json!({
        "apiVersion": "bucketscan.dev/v1alpha1", "kind": "BucketScan",
        "metadata": {"name": name},
        "spec": {
            "source": {"endpoint": endpoint, "bucket": bucket, "pathStyle": true,
                       "credentialsSecret": {"name": "s3"}},
            "output": {"bucket": out, "prefix": format!("{name}/")}
        }
    });
    for (k, v) in spec.as_object().unwrap() {
        body["spec"][k] = v.clone();
    }
    serde_json::from_value(body).unwrap()
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

/// Condition `type_` of BucketScan `name`: status, reason and message.
pub async fn condition(
    scans: &Api<bucketscan_api::crd::BucketScan>,
    name: &str,
    type_: &str,
) -> Option<(String, String, String)> {
    let st = scans.get(name).await.ok()?.status?;
    let c = st.conditions.into_iter().find(|c| c.type_ == type_)?;
    Some((c.status, c.reason, c.message))
}

/// Waits until condition `type_` of `name` has `status` and `reason`; its
/// message.
pub async fn wait_condition(
    scans: &Api<bucketscan_api::crd::BucketScan>,
    name: &str,
    type_: &str,
    status: &str,
    reason: &str,
) -> String {
    eventually(&format!("{name}: {type_}={status} ({reason})"), 60, async || {
        let (s, r, message) = condition(scans, name, type_).await?;
        (s == status && r == reason).then_some(message)
    })
    .await
}

/// The chart's ServiceAccount of release `release` in `namespace`, as the
/// API server names it (`helm template RELEASE`, no fullnameOverride).
pub fn chart_account(release: &str, namespace: &str) -> String {
    format!("system:serviceaccount:{namespace}:{release}-bucketscan")
}

/// The reasons of the events in `ns`.
pub async fn event_reasons(client: &Client, ns: &str) -> Vec<String> {
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(client.clone(), ns);
    let list = events.list(&Default::default()).await.unwrap().items;
    list.into_iter().filter_map(|e| e.reason).collect()
}

/// `kubectl auth can-i ARGS` as `user`, answered by the API server.
pub fn can_i(user: &str, args: &[&str]) -> bool {
    let out = std::process::Command::new("kubectl")
        .args(["auth", "can-i", &format!("--as={user}")])
        .args(args)
        .env("KUBECONFIG", kubeconfig_path())
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim() == "yes"
}

/// A client of the test ground that the API server authorizes as `user`
/// (impersonation: the `Impersonate-User` header), by RBAC and the
/// admission policies, instead of as the ground's admin.
pub async fn client_as(user: &str) -> Client {
    let kc = Kubeconfig::read_from(kubeconfig_path()).unwrap();
    let mut config = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .unwrap();
    config.auth_info.impersonate = Some(user.to_string());
    Client::try_from(config).unwrap()
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
    let api: Api<Namespace> = Api::all(client.clone());
    let patch = serde_json::json!({"metadata": {"labels": {"bucketscan.dev/test": label}}});
    api.patch(ns, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
}

/// The API server's refusal of `result`: its HTTP code and message.
pub fn refusal<T: std::fmt::Debug>(result: Result<T, kube::Error>) -> (u16, String) {
    match result {
        Err(kube::Error::Api(e)) => (e.code, e.message),
        other => panic!("expected a refusal, got {other:?}"),
    }
}
