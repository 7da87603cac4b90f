//! The generated CRD against a real kube-apiserver (started by
//! scripts/with-test-servers.sh under `just test`): it installs, a valid
//! BucketScan is stored with its defaults, a bad one is refused with a message
//! a person can act on, and `kubectl` shows the docs and columns.

mod cluster;

use bucketscan_operator::crd::BucketScan;
use cluster::*;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use kube::CustomResourceExt;

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
            "many-streams",
            serde_json::json!({"workers": {"shardsInFlight": 65}}),
            "shardsInFlight must be between 1 and 64",
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
            "zero-deadline",
            serde_json::json!({"activeDeadlineSeconds": 0}),
            "activeDeadlineSeconds must be at least 1",
        ),
        (
            "long-image",
            serde_json::json!({"workers": {"image": "r/".repeat(600)}}),
            "Too long: may not be",
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
            "bad-metadata-source",
            serde_json::json!({"metadataSource": "heads"}),
            "Unsupported value: \"heads\"",
        ),
        (
            "gzip-parquet",
            serde_json::json!({"output": {"format": "parquet", "gzip": true}}),
            "gzip does not apply to parquet",
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

    let kubectl = |args: &[&str]| run("kubectl", args);
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

/// The schema as `kubectl explain` and tools read it: every field of spec
/// and status has a description, every string of our own has a maxLength
/// (Kubernetes' types under podTemplate and resources keep theirs),
/// conditions are a list map keyed by type, defaulted fields carry their
/// default, and `-o wide` adds the Ready message.
#[test]
fn the_schema_documents_bounds_and_defaults_every_field() {
    let crd = bucketscan_operator::crd::BucketScan::crd();
    let version = &crd.spec.versions[0];
    let schema = serde_json::to_value(&version.schema.as_ref().unwrap().open_api_v3_schema).unwrap();
    let mut undocumented = Vec::new();
    let mut unbounded = Vec::new();
    walk(
        &schema["properties"]["spec"],
        "spec",
        &mut undocumented,
        &mut unbounded,
    );
    walk(
        &schema["properties"]["status"],
        "status",
        &mut undocumented,
        &mut unbounded,
    );
    assert!(
        undocumented.is_empty(),
        "fields without a description: {undocumented:?}"
    );
    assert!(unbounded.is_empty(), "strings without a maxLength: {unbounded:?}");

    let conditions = &schema["properties"]["status"]["properties"]["conditions"];
    assert_eq!(conditions["x-kubernetes-list-type"], "map");
    assert_eq!(
        conditions["x-kubernetes-list-map-keys"],
        serde_json::json!(["type"])
    );
    let spec = &schema["properties"]["spec"]["properties"];
    assert_eq!(spec["sharding"]["properties"]["targetShards"]["default"], 64);
    assert_eq!(
        spec["sharding"]["properties"]["minShardObjects"]["default"],
        10000
    );
    assert_eq!(spec["sharding"]["properties"]["delimiter"]["default"], "/");
    assert_eq!(spec["workers"]["properties"]["concurrency"]["default"], 256);
    assert_eq!(spec["suspend"]["default"], false);
    let status = &schema["properties"]["status"]["properties"];
    for number in ["objectsDone", "objectsEstimate", "ratePerSecond", "etaSeconds"] {
        assert_eq!(status[number]["type"], "integer", "{number}");
    }

    let columns = version.additional_printer_columns.clone().unwrap();
    let column = |name: &str| {
        columns
            .iter()
            .find(|c| c.name == name)
            .unwrap_or_else(|| panic!("no column {name}"))
    };
    assert_eq!(column("ETA").json_path, ".status.eta");
    assert_eq!(column("Workers").json_path, ".status.workersReady");
    let message = column("Message");
    assert_eq!(message.priority, Some(1), "shown with -o wide only");
    assert!(message.json_path.contains("Ready"), "{}", message.json_path);
}

/// An incremental schedule (the default) of a scan of versions is refused
/// when written: each run after the first would be refused its baseline.
/// Not incremental, it is stored.
#[tokio::test]
async fn an_incremental_schedule_of_versions_is_refused() {
    use bucketscan_api::schedule::BucketScanSchedule;
    let client = client().await;
    install_crd(&client).await;
    namespace(&client, "crd-sched-ver").await;
    let raw: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        "crd-sched-ver",
        &ApiResource::erase::<BucketScanSchedule>(&()),
    );
    let schedule = |name: &str, incremental: Option<bool>| {
        let mut template = valid(name)["spec"].clone();
        template["columns"] = serde_json::json!({"versions": true});
        let mut spec = serde_json::json!({"schedule": "@daily", "scanTemplate": template});
        if let Some(incremental) = incremental {
            spec["incremental"] = incremental.into();
        }
        serde_json::from_value::<DynamicObject>(serde_json::json!({
            "apiVersion": "bucketscan.dev/v1alpha1",
            "kind": "BucketScanSchedule",
            "metadata": {"name": name},
            "spec": spec,
        }))
        .unwrap()
    };
    for (name, incremental) in [("by-default", None), ("said", Some(true))] {
        match raw
            .create(&PostParams::default(), &schedule(name, incremental))
            .await
        {
            Err(kube::Error::Api(e)) => assert!(
                e.message.contains("an incremental schedule cannot scan versions")
                    && e.message.contains("set incremental: false"),
                "{name}: {}",
                e.message
            ),
            other => panic!("{name}: stored: {other:?}"),
        }
    }
    raw.create(&PostParams::default(), &schedule("full", Some(false)))
        .await
        .expect("a schedule of full scans of versions is stored");
}

/// The BucketScanSchedule's schema as the BucketScan's: every field
/// described, every string of our own bounded, its defaults, and its scan
/// template without the BucketScan's rule that source and output never
/// change (a schedule's template may).
#[test]
fn the_schedule_schema_documents_and_bounds_every_field() {
    let crd = bucketscan_api::schedule::BucketScanSchedule::crd();
    let version = &crd.spec.versions[0];
    let schema = serde_json::to_value(&version.schema.as_ref().unwrap().open_api_v3_schema).unwrap();
    let (mut undocumented, mut unbounded) = (Vec::new(), Vec::new());
    for part in ["spec", "status"] {
        walk(
            &schema["properties"][part],
            part,
            &mut undocumented,
            &mut unbounded,
        );
    }
    assert!(
        undocumented.is_empty(),
        "fields without a description: {undocumented:?}"
    );
    assert!(unbounded.is_empty(), "strings without a maxLength: {unbounded:?}");
    let spec = &schema["properties"]["spec"]["properties"];
    assert_eq!(spec["successfulScansHistoryLimit"]["default"], 3);
    assert_eq!(spec["failedScansHistoryLimit"]["default"], 1);
    assert_eq!(spec["incremental"]["default"], true);
    assert_eq!(
        spec["concurrencyPolicy"]["enum"],
        serde_json::json!(["Forbid", "Replace"])
    );
    assert!(!spec["scanTemplate"].to_string().contains("oldSelf"));
    let columns: Vec<String> = version
        .additional_printer_columns
        .clone()
        .unwrap()
        .into_iter()
        .map(|c| c.name)
        .collect();
    for name in [
        "Schedule",
        "Suspend",
        "Active",
        "Last Schedule",
        "Last Success",
        "Age",
    ] {
        assert!(
            columns.contains(&name.to_string()),
            "no column {name}: {columns:?}"
        );
    }
}

/// Collect the paths under `node` without a description, and the strings
/// of our own without a maxLength (enums, formats and Kubernetes' own
/// types excepted).
fn walk(node: &serde_json::Value, path: &str, undocumented: &mut Vec<String>, unbounded: &mut Vec<String>) {
    let ours = ![
        "podTemplate",
        "resources",
        "conditions",
        "startTime",
        "completionTime",
    ]
    .iter()
    .any(|k| path.contains(&format!(".{k}")));
    // A list's items are described by the list field (kubectl explain shows that).
    if node.get("description").is_none() && !path.ends_with("[]") {
        undocumented.push(path.to_string());
    }
    let bounded =
        node.get("maxLength").is_some() || node.get("enum").is_some() || node.get("format").is_some();
    if ours && node["type"] == "string" && !bounded {
        unbounded.push(path.to_string());
    }
    if let Some(props) = node["properties"].as_object() {
        for (k, v) in props {
            walk(v, &format!("{path}.{k}"), undocumented, unbounded);
        }
    }
    if node["items"].is_object() {
        walk(&node["items"], &format!("{path}[]"), undocumented, unbounded);
    }
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

/// `spec.filters` on the real API server: a scan with every filter is
/// stored as written; each bad value the schema can judge is refused with
/// the rule's message (the rest is the operator's, `filters::object_filter`).
#[tokio::test]
async fn the_api_server_judges_the_filters_it_can() {
    let client = client().await;
    install_crd(&client).await;
    namespace(&client, "crd-filters").await;
    let api: Api<BucketScan> = Api::namespaced(client.clone(), "crd-filters");
    let filters = serde_json::json!({
        "onlyWithMetadata": true,
        "modifiedAfter": "2026-05-01T00:00:00Z",
        "modifiedBefore": "2026-06-01T00:00:00+02:00",
        "minSizeBytes": 1,
        "maxSizeBytes": 1073741824u64,
        "include": ["2026/**/*.jpg", "-odd/[a-z]?"],
        "exclude": ["**/thumbs/**"],
        "storageClasses": ["STANDARD", "glacier_ir"]
    });
    let mut body = valid("filtered");
    body["spec"]["filters"] = filters.clone();
    assert_eq!(create(&api, body).await, None);
    let stored = api.get("filtered").await.unwrap();
    assert_eq!(serde_json::to_value(&stored.spec.filters).unwrap(), filters);
    // The workers apply the filters the scan was planned with: they cannot
    // change afterwards.
    let patch = serde_json::json!({"spec": {"filters": {"minSizeBytes": 2}}});
    let err = api
        .patch("filtered", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("filters cannot change once a scan exists"),
        "{err}"
    );
    // Nor its baseline: a scan with one is planned by a Job, one without
    // in the operator, and the two must never plan one scan at once.
    let mut body = valid("with-baseline");
    body["spec"]["baseline"] = serde_json::json!({"scan": "last-night"});
    assert_eq!(create(&api, body).await, None);
    for (name, baseline) in [
        ("filtered", serde_json::json!({"scan": "last-night"})),
        ("with-baseline", serde_json::Value::Null),
        ("with-baseline", serde_json::json!({"scan": "the-night-before"})),
    ] {
        let patch = serde_json::json!({"spec": {"baseline": baseline}});
        let err = api
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap_err();
        assert!(
            err.to_string()
                .contains("baseline cannot change once a scan exists"),
            "{name}: {err}"
        );
    }

    let cases: Vec<(&str, serde_json::Value, &str)> = vec![
        (
            "min-over-max",
            serde_json::json!({"minSizeBytes": 10, "maxSizeBytes": 9}),
            "minSizeBytes must not exceed maxSizeBytes",
        ),
        (
            "empty-window",
            serde_json::json!({"modifiedAfter": "2026-05-02T00:00:00Z", "modifiedBefore": "2026-05-02T01:00:00+01:00"}),
            "modifiedAfter must be before modifiedBefore",
        ),
        (
            "not-a-time",
            serde_json::json!({"modifiedAfter": "yesterday"}),
            "spec.filters.modifiedAfter in body must be of type date-time",
        ),
        (
            "no-offset",
            serde_json::json!({"modifiedBefore": "2026-05-01T00:00:00"}),
            "spec.filters.modifiedBefore in body must be of type date-time",
        ),
        (
            "negative-size",
            serde_json::json!({"minSizeBytes": -1}),
            "should be greater than or equal to 0",
        ),
        (
            "empty-glob",
            serde_json::json!({"include": [""]}),
            "spec.filters.include[0]",
        ),
        (
            "long-glob",
            serde_json::json!({"exclude": ["a".repeat(1025)]}),
            "Too long: may not be",
        ),
        (
            "many-globs",
            serde_json::json!({"include": vec!["a"; 101]}),
            "Too many: 101: must have at most 100 items",
        ),
        (
            "bad-class",
            serde_json::json!({"storageClasses": ["GLACIER IR"]}),
            "spec.filters.storageClasses[0]",
        ),
        (
            "many-classes",
            serde_json::json!({"storageClasses": vec!["STANDARD"; 17]}),
            "must have at most 16 items",
        ),
    ];
    for (name, filters, message) in cases {
        let mut body = valid(name);
        body["spec"]["filters"] = filters;
        let refused = create(&api, body)
            .await
            .unwrap_or_else(|| panic!("{name}: accepted"));
        assert!(refused.contains(message), "{name}: {refused}");
    }
}
