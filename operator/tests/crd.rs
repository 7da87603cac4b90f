//! The generated CRD against a real kube-apiserver (started by
//! scripts/with-test-servers.sh under `just test`): it installs, a valid
//! BucketScan is stored with its defaults, a bad one is refused with a message
//! a person can act on, and `kubectl` shows the docs and columns.

mod cluster;

use bucketscan_operator::crd::BucketScan;
use cluster::*;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams, PostParams};

fn valid(name: &str) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "bucketscan.dev/v1alpha1",
        "kind": "BucketScan",
        "metadata": {"name": name},
        "spec": {
            "source": {"endpoint": "http://10.0.0.5:9000", "bucket": "photos", "pathStyle": true,
                       "credentialsSecret": {"name": "s3"}},
            "output": {"bucket": "results"},
            "workers": {"minReplicas": 1, "maxReplicas": 8}
        }
    })
}

/// Create `body` as it is (untyped, so the API server is the one to judge
/// it); its refusal message, or None when stored.
async fn create(api: &Api<BucketScan>, body: serde_json::Value) -> Option<String> {
    let raw: Api<DynamicObject> = Api::namespaced_with(
        api.clone().into_client(),
        api.namespace().unwrap(),
        &ApiResource::erase::<BucketScan>(&()),
    );
    let object: DynamicObject = serde_json::from_value(body).unwrap();
    match raw.create(&PostParams::default(), &object).await {
        Ok(_) => None,
        Err(kube::Error::Api(e)) => Some(e.message),
        Err(e) => panic!("unexpected error: {e}"),
    }
}

#[tokio::test]
async fn the_crd_installs_and_the_api_server_enforces_it() {
    let client = client().await;
    install_crd(&client).await;
    namespace(&client, "crd-test").await;
    let api: Api<BucketScan> = Api::namespaced(client.clone(), "crd-test");

    assert_eq!(create(&api, valid("ok")).await, None);
    let stored = api.get("ok").await.unwrap();
    assert_eq!(stored.spec.source.region, "us-east-1", "defaults are applied");
    assert_eq!(stored.spec.output.format, bucketscan_operator::crd::Format::Jsonl);

    let cases: Vec<(&str, serde_json::Value, &str)> = vec![
        (
            "bad-bucket",
            serde_json::json!({"source": {"bucket": "Photos_2026"}}),
            "valid S3 bucket name",
        ),
        ("no-output", serde_json::json!({"output": null}), "output"),
        (
            "both-scales",
            serde_json::json!({"workers": {"replicas": 3, "minReplicas": 1, "maxReplicas": 8}}),
            "either replicas or minReplicas/maxReplicas",
        ),
        (
            "min-over-max",
            serde_json::json!({"workers": {"minReplicas": 9, "maxReplicas": 8}}),
            "minReplicas must not exceed maxReplicas",
        ),
        (
            "zero-replicas",
            serde_json::json!({"workers": {"replicas": 0, "minReplicas": null, "maxReplicas": null}}),
            "replicas must be between 1 and 1000",
        ),
        (
            "endpoint-path",
            serde_json::json!({"source": {"endpoint": "http://s3.local/bucket"}}),
            "without a path",
        ),
        (
            "ca-and-insecure",
            serde_json::json!({"source": {"caSecret": {"name": "ca"}, "insecureSkipTlsVerify": true}}),
            "either caSecret or insecureSkipTlsVerify",
        ),
        (
            "zero-rate",
            serde_json::json!({"maxRequestsPerSecond": 0}),
            "maxRequestsPerSecond must be at least 1",
        ),
        (
            "bad-output-bucket",
            serde_json::json!({"output": {"bucket": "x"}}),
            "valid S3 bucket name",
        ),
        (
            "bad-secret-name",
            serde_json::json!({"source": {"credentialsSecret": {"name": "S3_Creds"}}}),
            "name must be a valid Secret name",
        ),
        (
            "bad-ca-secret-name",
            serde_json::json!({"source": {"caSecret": {"name": "-ca"}}}),
            "name must be a valid Secret name",
        ),
        (
            "many-replicas",
            serde_json::json!({"workers": {"replicas": 1001, "minReplicas": null, "maxReplicas": null}}),
            "replicas must be between 1 and 1000",
        ),
        (
            "zero-min",
            serde_json::json!({"workers": {"minReplicas": 0}}),
            "minReplicas must be between 1 and 1000",
        ),
        (
            "huge-max",
            serde_json::json!({"workers": {"maxReplicas": 1001}}),
            "maxReplicas must be between 1 and 1000",
        ),
        (
            "zero-concurrency",
            serde_json::json!({"workers": {"concurrency": 0}}),
            "concurrency must be between 1 and 10000",
        ),
        (
            "zero-shards",
            serde_json::json!({"sharding": {"targetShards": 0}}),
            "targetShards must be between 1 and 100000",
        ),
        (
            "negative-ttl",
            serde_json::json!({"ttlSecondsAfterFinished": -1}),
            "ttlSecondsAfterFinished must not be negative",
        ),
        (
            "bad-format",
            serde_json::json!({"output": {"format": "xml"}}),
            "Unsupported value: \"xml\"",
        ),
        (
            "bad-layout",
            serde_json::json!({"output": {"layout": "many"}}),
            "Unsupported value: \"many\"",
        ),
        (
            "tiny-files",
            serde_json::json!({"output": {"fileSizeBytes": 1000}}),
            "fileSizeBytes must be between 5242880",
        ),
        (
            "huge-files",
            serde_json::json!({"output": {"fileSizeBytes": 5368709121u64}}),
            "fileSizeBytes must be between 5242880",
        ),
    ];
    for (name, change, message) in cases {
        let mut body = valid(name);
        json_merge(&mut body["spec"], &change);
        let refused = create(&api, body)
            .await
            .unwrap_or_else(|| panic!("{name}: accepted"));
        assert!(refused.contains(message), "{name}: {refused}");
    }

    // The source of an existing scan cannot change.
    let patch = serde_json::json!({"spec": {"source": {"bucket": "other-bucket"}}});
    let err = api
        .patch("ok", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("source and output cannot change"),
        "{err}"
    );
}

#[tokio::test]
async fn kubectl_explains_the_fields_and_lists_the_columns() {
    let client = client().await;
    install_crd(&client).await;
    namespace(&client, "kubectl-test").await;
    let api: Api<BucketScan> = Api::namespaced(client.clone(), "kubectl-test");
    assert_eq!(create(&api, valid("listed")).await, None);

    let kubectl = |args: &[&str]| {
        let out = std::process::Command::new("kubectl")
            .args(args)
            .env("KUBECONFIG", kubeconfig_path())
            .output()
            .expect("kubectl (scripts/install-kube.sh builds it)");
        assert!(
            out.status.success(),
            "kubectl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let explained = kubectl(&["explain", "bucketscan.spec.source.credentialsSecret"]);
    assert!(
        explained.contains("AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"),
        "{explained}"
    );
    let listed = kubectl(&["get", "bucketscans", "-n", "kubectl-test"]);
    let header = listed.lines().next().unwrap();
    for column in ["NAME", "PHASE", "PROGRESS", "OBJECTS", "RATE", "AGE"] {
        assert!(header.contains(column), "{listed}");
    }
    assert!(kubectl(&["get", "bscan", "-n", "kubectl-test", "-o", "name"])
        .contains("bucketscan.bucketscan.dev/listed"));
}

/// Merge `change` into `target` (null removes a field), like a JSON merge patch.
fn json_merge(target: &mut serde_json::Value, change: &serde_json::Value) {
    match (target, change) {
        (serde_json::Value::Object(t), serde_json::Value::Object(c)) => {
            for (k, v) in c {
                if v.is_null() {
                    t.remove(k);
                } else {
                    json_merge(t.entry(k.clone()).or_insert(serde_json::Value::Null), v);
                }
            }
        }
        (t, c) => *t = c.clone(),
    }
}
