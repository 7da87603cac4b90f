//! Incremental BucketScans through the real operator, apiserver, Redis and
//! MinIO (the workers and the merge run as the test's processes with the
//! pods' exact arguments, as in lifecycle.rs): a scan whose
//! `spec.baseline.scan` names a Complete scan takes unchanged objects from
//! it, and its status says what changed; a baseline that cannot be used
//! fails the scan with the reason. A scan of versions (`spec.columns.versions`)
//! reaches its workers and lists every version, and is refused a baseline.

mod cluster;
#[path = "../../worker/tests/common/mod.rs"]
mod common;
mod kubelet;

use bucketscan_operator::crd::{BucketScan, Phase};
use cluster::*;
use common::*;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use kube::api::{Api, PostParams};
use kubelet::{complete, ended_pod, fail, run_like_pod};
use std::collections::BTreeMap;
use std::time::Duration;

const NS: &str = "incremental";

fn scan_of(name: &str, s3: &Server, bucket: &str, out: &str, baseline: Option<&str>) -> BucketScan {
    let mut spec = serde_json::json!({
        "source": {"endpoint": s3.endpoint, "bucket": bucket, "pathStyle": true,
                   "credentialsSecret": {"name": "s3"}},
        "output": {"bucket": out, "prefix": format!("{name}/"), "layout": "dataset"},
        "workers": {"replicas": 1, "concurrency": 16},
        // A HEAD per object, as on stores that list no metadata (AWS,
        // FlashBlade): with `auto`, MinIO's listing gives the records anyway.
        "metadataSource": "head",
        "sharding": {"targetShards": 3, "minShardObjects": 20}
    });
    if let Some(b) = baseline {
        spec["baseline"] = serde_json::json!({"scan": b});
    }
    serde_json::from_value(serde_json::json!({
        "apiVersion": "bucketscan.dev/v1alpha1", "kind": "BucketScan",
        "metadata": {"name": name}, "spec": spec
    }))
    .unwrap()
}

/// Run the scan's plan Job as its pod would (a scan with a baseline:
/// `desired::plans_by_job`): the pod's exit code and log.
async fn run_plan_job(client: &kube::Client, ns: &str, name: &str) -> (Option<i32>, String) {
    let jobs: Api<Job> = Api::namespaced(client.clone(), ns);
    let plan = eventually("the plan Job", 60, async || {
        jobs.get_opt(&format!("{name}-plan")).await.ok()?
    })
    .await;
    let container = plan.spec.unwrap().template.spec.unwrap().containers[0].clone();
    let args = container.args.clone().unwrap_or_default();
    assert!(args.iter().any(|a| a == "--baseline"), "{args:?}");
    let pod = format!("{name}-plan-x");
    let mut planner = run_like_pod(client, ns, &container, &pod, &[]).await;
    let code = wait_exit(&mut planner, Duration::from_secs(60)).code();
    let log = std::fs::read_to_string(temp_path(&format!("{pod}.log"))).unwrap_or_default();
    (code, log)
}

/// Run the scan's plan Job (a scan with a baseline), workers and merge as
/// its pods would, until it is done.
async fn run_to_the_end(client: &kube::Client, scans: &Api<BucketScan>, name: &str) -> Phase {
    let ns = scans.namespace().expect("a namespaced Api");
    let jobs: Api<Job> = Api::namespaced(client.clone(), ns);
    if scans.get(name).await.unwrap().spec.baseline.is_some() {
        // Its manifest is read in the scan's own pod, never the operator's.
        let (code, log) = run_plan_job(client, ns, name).await;
        assert_eq!(code, Some(0), "plan failed: {log}");
        complete(&jobs, &format!("{name}-plan")).await;
    }
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), ns);
    let deployment = eventually("the workers", 60, async || {
        deployments.get_opt(&format!("{name}-workers")).await.ok()?
    })
    .await;
    let container = deployment.spec.unwrap().template.spec.unwrap().containers[0].clone();
    let mut worker = run_like_pod(client, ns, &container, &format!("{name}-workers-a"), &[]).await;
    assert!(
        wait_exit(&mut worker, Duration::from_secs(120)).success(),
        "worker failed"
    );
    let job = eventually("the merge Job", 60, async || {
        jobs.get_opt(&format!("{name}-merge")).await.ok()?
    })
    .await;
    let container = job.spec.unwrap().template.spec.unwrap().containers[0].clone();
    let mut merge = run_like_pod(client, ns, &container, &format!("{name}-merge-x"), &[]).await;
    assert!(
        wait_exit(&mut merge, Duration::from_secs(60)).success(),
        "merge failed"
    );
    eventually("the end", 60, async || {
        let phase = scans.get(name).await.ok()?.status?.phase;
        matches!(phase, Phase::Complete | Phase::Failed).then_some(phase)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scan_with_a_baseline_scan_heads_only_what_changed_and_says_what_did() {
    let client = client().await;
    install_crd(&client).await;
    namespace(&client, NS).await;
    let s3 = minio();
    let bucket = s3.bucket("opinc").await;
    let out = s3.bucket("opinc-out").await;
    let seeded: BTreeMap<String, Seeded> = (0..300)
        .map(|i| {
            let metadata = BTreeMap::from([("n".to_string(), format!("{i}"))]);
            (
                format!("p{}/{i:04}", i % 3),
                Seeded {
                    size: i % 9,
                    metadata,
                },
            )
        })
        .collect();
    s3.seed(&bucket, &seeded).await;
    // Safely older than the first scan's start (baseline::SAFETY_SECS).
    tokio::time::sleep(Duration::from_millis(3_100)).await;
    create_s3_secret(&client, NS, "s3", &s3.access_key, &s3.secret_key).await;
    let scans: Api<BucketScan> = Api::namespaced(client.clone(), NS);
    let mut operator = Operator::watching(NS).redis_scan_users().start();

    // A baseline that does not exist: refused, with the reason.
    let missing = scan_of("orphan", &s3, &bucket, &out, Some("never-ran"));
    scans.create(&PostParams::default(), &missing).await.unwrap();
    let refused = eventually("the refusal", 60, async || {
        let st = scans.get("orphan").await.ok()?.status?;
        (st.phase == Phase::Failed).then_some(st)
    })
    .await;
    let failed = refused.conditions.iter().find(|c| c.type_ == "Failed").unwrap();
    assert_eq!(failed.reason, "BaselineRefused");
    assert!(
        failed.message.contains("\"never-ran\" does not exist"),
        "{}",
        failed.message
    );

    scans
        .create(
            &PostParams::default(),
            &scan_of("night-1", &s3, &bucket, &out, None),
        )
        .await
        .unwrap();
    assert_eq!(run_to_the_end(&client, &scans, "night-1").await, Phase::Complete);

    // One object of each kind of change.
    let c = s3.client();
    c.delete_object()
        .bucket(&bucket)
        .key("p0/0000")
        .send()
        .await
        .unwrap();
    c.put_object()
        .bucket(&bucket)
        .key("p1/0001")
        .body(vec![b'z'; 30].into())
        .send()
        .await
        .unwrap();
    c.copy_object()
        .bucket(&bucket)
        .key("p2/0002")
        .copy_source(format!("{bucket}/p2/0002"))
        .metadata_directive(aws_sdk_s3::types::MetadataDirective::Replace)
        .metadata("n", "replaced")
        .send()
        .await
        .unwrap();
    c.put_object()
        .bucket(&bucket)
        .key("p9/new")
        .body(vec![b'n'; 3].into())
        .send()
        .await
        .unwrap();

    // Its credentials Secret missing: Blocked until it comes, as a scan the
    // operator plans itself, not a plan Job whose pod cannot start.
    let mut unready = scan_of("unready", &s3, &bucket, &out, Some("night-1"));
    unready.spec.source.credentials_secret = Some(bucketscan_operator::crd::SecretReference {
        name: "not-yet".into(),
    });
    scans.create(&PostParams::default(), &unready).await.unwrap();
    eventually("unready Blocked", 60, async || {
        let st = scans.get("unready").await.ok()?.status?;
        let blocked = st.conditions.iter().find(|c| c.type_ == "Blocked")?;
        (blocked.status == "True" && blocked.reason == "SecretNotFound").then_some(())
    })
    .await;
    let jobs: Api<Job> = Api::namespaced(client.clone(), NS);
    assert!(jobs.get_opt("unready-plan").await.unwrap().is_none());
    scans.delete("unready", &Default::default()).await.unwrap();

    scans
        .create(
            &PostParams::default(),
            &scan_of("night-2", &s3, &bucket, &out, Some("night-1")),
        )
        .await
        .unwrap();
    assert_eq!(run_to_the_end(&client, &scans, "night-2").await, Phase::Complete);
    let st = scans.get("night-2").await.unwrap().status.unwrap();
    let planned = st.conditions.iter().find(|c| c.type_ == "Planned").unwrap();
    assert!(
        planned.message.contains("planned by Job night-2-plan"),
        "{}",
        planned.message
    );
    assert_eq!(
        st.baseline.as_deref(),
        Some(format!("s3://{out}/night-1/manifest.json").as_str())
    );
    let changes = st.changes.expect("status.changes of an incremental scan");
    assert_eq!(
        (
            changes.added,
            changes.removed,
            changes.content_changed,
            changes.metadata_changed
        ),
        (1, 1, 1, 1)
    );
    let incremental = st.conditions.iter().find(|c| c.type_ == "Incremental").unwrap();
    assert!(changes.reused >= 297, "{changes:?} {incremental:?}");
    assert_eq!(
        (incremental.status.as_str(), incremental.reason.as_str()),
        ("True", "RecordsReused")
    );
    let manifest: bucketscan_core::fleet::merge::Manifest =
        serde_json::from_slice(&s3.read(&out, "night-2/manifest.json").await).unwrap();
    assert_eq!(manifest.counts["objects"], 300);
    assert_eq!(
        manifest
            .incremental
            .unwrap()
            .change_files
            .iter()
            .map(|f| f.records)
            .sum::<u64>(),
        4
    );

    operator.stop();
}

/// `spec.columns.versions` through the operator: the spec its workers read
/// lists versions (each version a record, delete markers too, in the
/// merged dataset), and the same with a baseline is refused with the reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scan_of_versions_lists_every_version_and_is_refused_a_baseline() {
    const VNS: &str = "versions";
    let client = client().await;
    install_crd(&client).await;
    namespace(&client, VNS).await;
    let s3 = minio();
    let bucket = s3.bucket("opver").await;
    let out = s3.bucket("opver-out").await;
    let c = s3.client();
    c.put_bucket_versioning()
        .bucket(&bucket)
        .versioning_configuration(
            aws_sdk_s3::types::VersioningConfiguration::builder()
                .status(aws_sdk_s3::types::BucketVersioningStatus::Enabled)
                .build(),
        )
        .send()
        .await
        .unwrap();
    let mut written = BTreeMap::<String, Vec<String>>::new();
    for i in 0..40 {
        let key = format!("k{i:02}");
        for generation in 0..(1 + i % 3) {
            let put = c
                .put_object()
                .bucket(&bucket)
                .key(&key)
                .body(vec![b'v'; generation + 1].into())
                .send()
                .await
                .unwrap();
            written
                .entry(key.clone())
                .or_default()
                .push(put.version_id().unwrap().into());
        }
        if i % 5 == 0 {
            let deleted = c.delete_object().bucket(&bucket).key(&key).send().await.unwrap();
            written
                .entry(key.clone())
                .or_default()
                .push(deleted.version_id().unwrap().into());
        }
    }
    let versions: usize = written.values().map(Vec::len).sum();
    create_s3_secret(&client, VNS, "s3", &s3.access_key, &s3.secret_key).await;
    let scans: Api<BucketScan> = Api::namespaced(client.clone(), VNS);
    let mut operator = Operator::watching(VNS).start();

    let mut all = scan_of("all-versions", &s3, &bucket, &out, None);
    all.spec.columns.versions = true;
    scans.create(&PostParams::default(), &all).await.unwrap();
    assert_eq!(
        run_to_the_end(&client, &scans, "all-versions").await,
        Phase::Complete
    );
    let manifest: bucketscan_core::fleet::merge::Manifest =
        serde_json::from_slice(&s3.read(&out, "all-versions/manifest.json").await).unwrap();
    assert!(manifest.spec.columns.versions, "the workers' spec lists versions");
    assert_eq!(manifest.counts["objects"], versions as u64);
    let mut listed = BTreeMap::<String, Vec<String>>::new();
    for file in &manifest.files {
        let key = file.location.strip_prefix(&format!("s3://{out}/")).unwrap();
        for line in s3
            .read(&out, key)
            .await
            .split(|b| *b == b'\n')
            .filter(|l| !l.is_empty())
        {
            let record: bucketscan_core::scan::record::Record = serde_json::from_slice(line).unwrap();
            let id = record.columns.version_id.expect("every record names its version");
            listed.entry(record.key).or_default().push(id);
        }
    }
    // Newest first, as written in reverse.
    for ids in written.values_mut() {
        ids.reverse();
    }
    assert_eq!(listed, written);

    let mut with_baseline = scan_of("versions-again", &s3, &bucket, &out, Some("all-versions"));
    with_baseline.spec.columns.versions = true;
    scans
        .create(&PostParams::default(), &with_baseline)
        .await
        .unwrap();
    // Refused in its plan Job's pod, which exits so; the scan says why.
    let (code, log) = run_plan_job(&client, VNS, "versions-again").await;
    assert_eq!(code, Some(65), "{log}");
    ended_pod(
        &client,
        VNS,
        "versions-again-plan-x",
        "versions-again-plan",
        65,
        &log,
    )
    .await;
    let jobs: Api<Job> = Api::namespaced(client.clone(), VNS);
    fail(&jobs, "versions-again-plan").await;
    let refused = eventually("the refusal", 60, async || {
        let st = scans.get("versions-again").await.ok()?.status?;
        (st.phase == Phase::Failed).then_some(st)
    })
    .await;
    let failed = refused.conditions.iter().find(|c| c.type_ == "Failed").unwrap();
    // Refused by planning, which admits the baseline against the spec.
    assert_eq!(failed.reason, "PlanRefused");
    assert!(
        failed
            .message
            .contains("run scans of versions without a baseline"),
        "{}",
        failed.message
    );

    operator.stop();
}
