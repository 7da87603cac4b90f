//! The worker and merge pods the operator builds (`desired`) pass the
//! Pod Security Standard `restricted`: the test ground's kube-apiserver
//! (scripts/with-test-servers.sh, BUCKETSCAN_TEST_KUBE=1) enforces Pod
//! Security admission, so their pods are created in a namespace labelled
//! `pod-security.kubernetes.io/enforce=restricted` (server-side dry run: no
//! kubelet needed). A pod without the security context is refused there,
//! which shows the namespace really enforces. The e2e runs real scans in
//! such a namespace.

mod cluster;

use bucketscan_operator::crd::{
    BucketScan, BucketScanSpec, Output, SecretKeyReference, SecretReference, Source, WorkerPodTemplate,
    Workers,
};
use bucketscan_operator::desired::{self, Settings};
use cluster::*;
use k8s_openapi::api::core::v1::{Pod, PodSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, PostParams};

const NS: &str = "restricted-test";

/// A scan using every pod-shaping field: credentials and CA Secrets
/// (volumes), a ServiceAccount, labels.
fn a_scan() -> BucketScan {
    let mut scan = BucketScan::new(
        "photos",
        BucketScanSpec {
            source: Source {
                endpoint: Some("https://s3.example:9000".into()),
                bucket: "photos".into(),
                region: "us-east-1".into(),
                credentials_secret: Some(SecretReference { name: "s3".into() }),
                ca_secret: Some(SecretKeyReference {
                    name: "s3-ca".into(),
                    key: "ca.crt".into(),
                }),
                ..Source::default()
            },
            output: Output {
                bucket: "results".into(),
                ..Output::default()
            },
            workers: Workers {
                replicas: Some(2),
                pod_template: Some(WorkerPodTemplate {
                    service_account_name: Some("scanner".into()),
                    labels: [("team".to_string(), "a".to_string())].into(),
                    ..WorkerPodTemplate::default()
                }),
                ..Workers::default()
            },
            ..Default::default()
        },
    );
    scan.metadata.namespace = Some(NS.into());
    scan.metadata.uid = Some("0f1e2d3c-0000-4000-8000-000000000000".into());
    scan
}

async fn restricted_namespace(client: &kube::Client) {
    let labels = serde_json::json!({
        "pod-security.kubernetes.io/enforce": "restricted",
        "pod-security.kubernetes.io/enforce-version": "latest",
    });
    // The pods name the ServiceAccount, and admission looks it up (no
    // controller-manager here makes ServiceAccounts).
    namespace_with(client, NS, labels, &["scanner"]).await;
}

/// Create a pod with `spec` in the restricted namespace (dry run): the
/// refusal message, or None when admitted.
async fn admit(pods: &Api<Pod>, name: &str, spec: PodSpec) -> Option<String> {
    let pod = Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..ObjectMeta::default()
        },
        spec: Some(spec),
        ..Pod::default()
    };
    let dry = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    match pods.create(&dry, &pod).await {
        Ok(_) => None,
        Err(kube::Error::Api(e)) => Some(e.message),
        Err(e) => panic!("unexpected error: {e}"),
    }
}

#[tokio::test]
async fn worker_and_merge_pods_pass_the_restricted_pod_security_standard() {
    let client = client().await;
    restricted_namespace(&client).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let scan = a_scan();
    let settings = Settings::default();
    for redis_ca in [false, true] {
        let worker = desired::worker_deployment(&scan, &settings, 2, redis_ca);
        let merge = desired::merge_job(&scan, &settings, redis_ca);
        let worker_pod = worker.spec.unwrap().template.spec.unwrap();
        let merge_pod = merge.spec.unwrap().template.spec.unwrap();
        assert_eq!(
            admit(&pods, "worker", worker_pod.clone()).await,
            None,
            "worker pod (redis_ca {redis_ca})"
        );
        assert_eq!(
            admit(&pods, "merge", merge_pod).await,
            None,
            "merge pod (redis_ca {redis_ca})"
        );

        // The control: the same pod without its security context is refused,
        // so the namespace does enforce `restricted`.
        let mut bare = worker_pod;
        bare.security_context = None;
        for c in &mut bare.containers {
            c.security_context = None;
        }
        let refused = admit(&pods, "bare", bare)
            .await
            .expect("a pod without a security context is refused");
        assert!(
            refused.contains("violates PodSecurity \"restricted:latest\""),
            "{refused}"
        );
    }
}
