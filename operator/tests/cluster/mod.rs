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
/// ground's kubeconfig and Redis, stdout dropped and its log (stderr) in
/// `log`. The caller adds its own flags (at least `--metrics-addr`) and
/// spawns it.
pub fn operator_command(ns: &str, log: &std::path::Path) -> std::process::Command {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_bucketscan-operator"));
    command
        .args(["--namespace", ns])
        .env("KUBECONFIG", kubeconfig_path())
        .env(
            "BUCKETSCAN_REDIS_URL",
            std::env::var("BUCKETSCAN_TEST_REDIS_URL").expect("run the tests with `just test`"),
        )
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(log).unwrap());
    command
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

/// Apply crds/ (as `kubectl apply` would) and wait until it is served.
pub async fn install_crd(client: &Client) {
    let yaml = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../crds/bucketscans.bucketscan.dev.yaml"
    ))
    .unwrap();
    let crd: CustomResourceDefinition = serde_saphyr::from_str(&yaml).unwrap();
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    api.patch(
        "bucketscans.bucketscan.dev",
        &PatchParams::apply("bucketscan-test").force(),
        &Patch::Apply(&crd),
    )
    .await
    .unwrap();
    for _ in 0..100 {
        let got = api.get("bucketscans.bucketscan.dev").await.unwrap();
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

pub async fn namespace(client: &Client, name: &str) {
    let api: Api<Namespace> = Api::all(client.clone());
    let ns: Namespace = serde_json::from_value(serde_json::json!({"metadata": {"name": name}})).unwrap();
    let _ = api.create(&PostParams::default(), &ns).await;
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
