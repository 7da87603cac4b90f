//! Outputs never collide, with the real operator binary against the test
//! ground's kube-apiserver, Redis and versitygw: the default output prefix
//! holds the scan's uid, a prefix without a trailing slash gets one, a scan
//! whose output overlaps a running scan's output is refused, and so is one
//! whose scanned keys lie inside its own output (both ways of overlap).

mod cluster;
#[path = "../../worker/tests/common/mod.rs"]
mod common;

use bucketscan_operator::crd::{BucketScan, Phase};
use cluster::*;
use common::*;
use k8s_openapi::api::core::v1::Event;
use kube::api::{Api, ListParams, PostParams};
use kube::Client;

const NS: &str = "admission";

fn start_operator() -> Operator {
    Operator::watching(NS).start()
}

async fn create(scans: &Api<BucketScan>, name: &str, source: serde_json::Value, output: serde_json::Value) {
    let scan: BucketScan = serde_json::from_value(serde_json::json!({
        "apiVersion": "bucketscan.dev/v1alpha1", "kind": "BucketScan",
        "metadata": {"name": name},
        "spec": {"source": source, "output": output, "workers": {"replicas": 1}}
    }))
    .unwrap();
    scans.create(&PostParams::default(), &scan).await.unwrap();
}

/// The phase a scan settles in, waiting until it is planned or failed.
async fn settled(scans: &Api<BucketScan>, name: &str) -> BucketScan {
    eventually(&format!("{name} planned or failed"), 60, async || {
        let scan = scans.get(name).await.ok()?;
        matches!(scan.status.as_ref()?.phase, Phase::Scanning | Phase::Failed).then_some(scan)
    })
    .await
}

fn failure(scan: &BucketScan) -> (String, String) {
    let st = scan.status.as_ref().unwrap();
    assert_eq!(st.phase, Phase::Failed, "{st:?}");
    let c = st.conditions.iter().find(|c| c.type_ == "Failed").unwrap();
    (c.reason.clone(), c.message.clone())
}

/// The output prefix of the scan's spec as stored in Redis by planning.
async fn planned_output_prefix(scan: &BucketScan) -> String {
    planned_spec(scan).await["output_prefix"]
        .as_str()
        .unwrap()
        .to_string()
}

/// The scan's spec as planning stored it in Redis, where workers read it.
async fn planned_spec(scan: &BucketScan) -> serde_json::Value {
    let id = bucketscan_operator::desired::scan_id(scan);
    let client = redis::Client::open(std::env::var("BUCKETSCAN_TEST_REDIS_URL").unwrap()).unwrap();
    let mut con = client.get_multiplexed_async_connection().await.unwrap();
    let spec: String = redis::cmd("HGET")
        .arg(format!("bs:{{{id}}}:meta"))
        .arg("spec")
        .query_async(&mut con)
        .await
        .unwrap();
    serde_json::from_str(&spec).unwrap()
}

async fn warning_notes(client: &Client, reason: &str) -> Vec<String> {
    let events: Api<Event> = Api::namespaced(client.clone(), NS);
    events
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some(reason))
        .filter_map(|e| e.message)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outputs_never_collide() {
    let client = client().await;
    install_crd(&client).await;
    namespace(&client, NS).await;
    let s3 = versitygw();
    let bucket = s3.bucket("adm").await;
    let out = s3.bucket("adm-out").await;
    s3.seed(
        &bucket,
        &(0..20).map(|i| (format!("k{i:02}"), Seeded::default())).collect(),
    )
    .await;
    create_s3_secret(&client, NS, "s3", &s3.access_key, &s3.secret_key).await;
    let source = |prefix: &str, b: &str| {
        serde_json::json!({"endpoint": s3.endpoint, "bucket": b, "prefix": prefix, "pathStyle": true,
                           "credentialsSecret": {"name": "s3"}})
    };
    let scans: Api<BucketScan> = Api::namespaced(client.clone(), NS);
    let mut operator = start_operator();

    // The default output prefix is NAMESPACE/NAME/UID/.
    create(
        &scans,
        "first",
        source("", &bucket),
        serde_json::json!({"bucket": out}),
    )
    .await;
    let first = settled(&scans, "first").await;
    assert_eq!(first.status.as_ref().unwrap().phase, Phase::Scanning);
    let uid = first.metadata.uid.clone().unwrap();
    assert_eq!(planned_output_prefix(&first).await, format!("{NS}/first/{uid}/"));

    // A prefix without its slash is normalised, and does not collide with
    // `first` (whose prefix holds the uid).
    create(
        &scans,
        "plain",
        source("", &bucket),
        serde_json::json!({"bucket": out, "prefix": "plain"}),
    )
    .await;
    let plain = settled(&scans, "plain").await;
    assert_eq!(plain.status.as_ref().unwrap().phase, Phase::Scanning);
    assert_eq!(planned_output_prefix(&plain).await, "plain/");

    // An output containing a running scan's output is refused before planning.
    create(
        &scans,
        "second",
        source("", &bucket),
        serde_json::json!({"bucket": out, "prefix": NS}),
    )
    .await;
    let (reason, message) = failure(&settled(&scans, "second").await);
    assert_eq!(reason, "OutputConflict");
    assert!(
        message.contains(&format!(
            "overlaps the output s3://{out}/{NS}/first/{uid}/ of BucketScan {NS}/first"
        )) && message.contains("still running"),
        "{message}"
    );
    // The event follows the status write.
    eventually("the OutputConflict event", 10, async || {
        let notes = warning_notes(&client, "OutputConflict").await;
        notes
            .iter()
            .any(|n| n.contains("BucketScan admission/first"))
            .then_some(())
    })
    .await;

    // So is an output inside a running scan's keyspace (`first` scans all of
    // `bucket`): the other scan's result would contain this one's parts.
    create(
        &scans,
        "into",
        source("", &out),
        serde_json::json!({"bucket": bucket, "prefix": "x/"}),
    )
    .await;
    let (reason, message) = failure(&settled(&scans, "into").await);
    assert_eq!(reason, "OutputConflict");
    assert!(
        message.contains(&format!(
            "inside the keyspace s3://{bucket}/ that BucketScan {NS}/first"
        )),
        "{message}"
    );

    // The scanned keys may not lie inside the scan's own output either (its
    // parts are written and deleted there).
    create(
        &scans,
        "inside",
        source("res/parts/", &out),
        serde_json::json!({"bucket": out, "prefix": "res"}),
    )
    .await;
    let (reason, message) = failure(&settled(&scans, "inside").await);
    assert_eq!(reason, "InvalidSpec");
    assert!(
        message.contains(&format!(
            "the scanned keyspace s3://{out}/res/parts/ lies inside the output s3://{out}/res/"
        )),
        "{message}"
    );

    // A credentials Secret without the keys is named in the failure.
    create_secret(&client, NS, "keyless", serde_json::json!({"token": "x"})).await;
    let mut src = source("", &bucket);
    src["credentialsSecret"]["name"] = "keyless".into();
    create(
        &scans,
        "keyless",
        src,
        serde_json::json!({"bucket": out, "prefix": "keyless/"}),
    )
    .await;
    // The Secret may still be fixed (the scan waits, blocked, and is
    // retried), so it does not fail the scan.
    let blocked = eventually("keyless blocked", 60, async || {
        let st = scans.get("keyless").await.ok()?.status?;
        let c = st
            .conditions
            .into_iter()
            .find(|c| c.type_ == "Blocked" && c.status == "True")?;
        assert_ne!(st.phase, Phase::Failed);
        Some((c.reason, c.message))
    })
    .await;
    assert_eq!(blocked.0, "SecretIncomplete");
    assert!(
        blocked.1.starts_with(
            "Secret \"keyless\" needs the keys AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY; retrying in "
        ),
        "{}",
        blocked.1
    );

    delete_scans(&scans, &["first", "plain", "second", "into", "inside", "keyless"]).await;
    operator.stop();
}

/// `spec.filters` the schema lets through but the workers could not use
/// (glob syntax, an include glob no key under the prefix can match) fail
/// the scan with InvalidSpec naming the field; good filters reach the spec
/// that planning stores for the workers, normalised.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn filters_reach_the_planned_spec_or_fail_the_scan() {
    const FNS: &str = "admission-filters";
    let client = client().await;
    install_crd(&client).await;
    namespace(&client, FNS).await;
    let s3 = versitygw();
    let bucket = s3.bucket("adm-filters").await;
    let out = s3.bucket("adm-filters-out").await;
    s3.seed(
        &bucket,
        &(0..20)
            .map(|i| (format!("logs/k{i:02}.csv"), Seeded::default()))
            .collect(),
    )
    .await;
    create_s3_secret(&client, FNS, "s3", &s3.access_key, &s3.secret_key).await;
    let scans: Api<BucketScan> = Api::namespaced(client.clone(), FNS);
    let mut operator = Operator::watching(FNS).start();
    let create = |name: &'static str, prefix: &'static str, filters: serde_json::Value| {
        let scan: BucketScan = serde_json::from_value(serde_json::json!({
            "apiVersion": "bucketscan.dev/v1alpha1", "kind": "BucketScan",
            "metadata": {"name": name},
            "spec": {
                "source": {"endpoint": s3.endpoint, "bucket": bucket, "prefix": prefix, "pathStyle": true,
                           "credentialsSecret": {"name": "s3"}},
                "output": {"bucket": out, "prefix": format!("{name}/")},
                "workers": {"replicas": 1},
                "filters": filters,
            }
        }))
        .unwrap();
        let scans = scans.clone();
        async move { scans.create(&PostParams::default(), &scan).await.unwrap() }
    };

    create(
        "filtered",
        "logs/",
        serde_json::json!({"modifiedAfter": "2026-05-01T02:00:00+02:00", "maxSizeBytes": 100,
                           "include": ["logs/**/*.csv"], "exclude": ["logs/tmp/**"],
                           "storageClasses": ["STANDARD"]}),
    )
    .await;
    let filtered = settled(&scans, "filtered").await;
    assert_eq!(
        filtered.status.as_ref().unwrap().phase,
        Phase::Scanning,
        "{filtered:?}"
    );
    assert_eq!(
        planned_spec(&filtered).await["filter"],
        serde_json::json!({"modified_after": "2026-05-01T00:00:00Z", "max_size": 100,
                           "include": ["logs/**/*.csv"], "exclude": ["logs/tmp/**"],
                           "storage_classes": ["STANDARD"]})
    );

    create("bad-glob", "", serde_json::json!({"include": ["logs/[0-9"]})).await;
    let (reason, message) = failure(&settled(&scans, "bad-glob").await);
    assert_eq!(reason, "InvalidSpec");
    assert!(
        message.starts_with(
            "spec.filters: include glob \"logs/[0-9\": the '[' at character 6 has no closing ']'"
        ),
        "{message}"
    );

    create("relative", "logs/", serde_json::json!({"include": ["*.csv"]})).await;
    let (reason, message) = failure(&settled(&scans, "relative").await);
    assert_eq!(reason, "InvalidSpec");
    assert!(
        message.contains("can never match a key under the prefix \"logs/\"")
            && message.contains("did you mean \"logs/*.csv\"?"),
        "{message}"
    );

    delete_scans(&scans, &["filtered", "bad-glob", "relative"]).await;
    operator.stop();
}
