//! The Secrets a test writes for its scans: S3 credentials as a
//! BucketScan's `credentialsSecret` reads them, and any other Secret by its
//! `stringData` (e.g. one that lacks the keys, to see it refused).
//!
//! Imports only the Kubernetes client and its types.

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, PostParams};
use kube::Client;

/// Secret `name` in `ns` holding S3 credentials as a BucketScan's
/// `credentialsSecret` expects them.
pub async fn create_s3_secret(client: &Client, ns: &str, name: &str, access_key: &str, secret_key: &str) {
    create_secret(
        client,
        ns,
        name,
        serde_json::json!({"AWS_ACCESS_KEY_ID": access_key, "AWS_SECRET_ACCESS_KEY": secret_key}),
    )
    .await;
}

/// Secret `name` in `ns` with `string_data` (an object of strings); a
/// refusal by the API server fails the test.
pub async fn create_secret(client: &Client, ns: &str, name: &str, string_data: serde_json::Value) {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    let secret: Secret = serde_json::from_value(serde_json::json!({
        "metadata": {"name": name},
        "stringData": string_data
    }))
    .unwrap();
    secrets
        .create(&PostParams::default(), &secret)
        .await
        .unwrap_or_else(|e| panic!("Secret {ns}/{name}: {e}"));
}
