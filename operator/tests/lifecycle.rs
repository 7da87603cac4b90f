//! A BucketScan from `kubectl apply` to Complete and delete, with the real
//! operator binary against the test ground's kube-apiserver, Redis and
//! versitygw. There is no kubelet here, so the test itself runs what the
//! pods would: `bucketscan-worker` with exactly the arguments and
//! environment of the operator's Deployment and Job (Secrets resolved the
//! way the kubelet would).

mod cluster;
#[path = "../../worker/tests/common/mod.rs"]
mod common;
mod kubelet;

use bucketscan_operator::crd::{BucketScan, Phase};
use cluster::*;
use common::*;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use kube::api::{Api, DeleteParams, PostParams};
use kubelet::{complete, ended_pod, fail, run_like_pod};
use std::collections::BTreeMap;
use std::process::Command;
use std::time::Duration;

const NS: &str = "lifecycle";

fn redis_url() -> String {
    std::env::var("BUCKETSCAN_TEST_REDIS_URL").expect("run the tests with `just test`")
}

fn start_operator(tag: &str) -> Operator {
    start_operator_in(NS, tag)
}

fn start_operator_in(ns: &str, tag: &str) -> Operator {
    Operator::watching(ns)
        .log(temp_path(&format!("operator-{tag}.log")))
        .redis_scan_users()
        .lease_secs(5)
        .debug_log()
        .start()
}

async fn phase(api: &Api<BucketScan>, name: &str) -> Option<Phase> {
    api.get(name).await.ok()?.status.map(|s| s.phase)
}

async fn redis_keys(scan_id: &str) -> Vec<String> {
    let client = redis::Client::open(redis_url().as_str()).unwrap();
    let mut con = client.get_multiplexed_async_connection().await.unwrap();
    redis::cmd("KEYS")
        .arg(format!("bs:{{{scan_id}}}:*"))
        .query_async(&mut con)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scan_runs_from_apply_to_complete_and_delete() {
    let client = client().await;
    install_crd(&client).await;
    namespace(&client, NS).await;
    let s3 = versitygw();
    let bucket = s3.bucket("op").await;
    let out = s3.bucket("op-out").await;
    let seeded: BTreeMap<String, Seeded> = (0..3000)
        .map(|i| (format!("p{}/{i:05}", i % 6), Seeded::default()))
        .collect();
    s3.seed(&bucket, &seeded).await;

    create_s3_secret(&client, NS, "s3", &s3.access_key, &s3.secret_key).await;
    let scans: Api<BucketScan> = Api::namespaced(client.clone(), NS);
    let scan: BucketScan = serde_json::from_value(serde_json::json!({
        "apiVersion": "bucketscan.dev/v1alpha1",
        "kind": "BucketScan",
        "metadata": {"name": "photos"},
        "spec": {
            "source": {"endpoint": s3.endpoint, "bucket": bucket, "pathStyle": true,
                       "credentialsSecret": {"name": "s3"}},
            "output": {"bucket": out, "prefix": "scan/"},
            "workers": {"minReplicas": 1, "maxReplicas": 3, "concurrency": 16},
            "sharding": {"targetShards": 6, "minShardObjects": 300}
        }
    }))
    .unwrap();
    scans.create(&PostParams::default(), &scan).await.unwrap();

    let mut operator = start_operator("first");
    eventually("Scanning", 60, async || {
        (phase(&scans, "photos").await == Some(Phase::Scanning)).then_some(())
    })
    .await;
    let created = scans.get("photos").await.unwrap();
    let scan_id = bucketscan_operator::desired::scan_id(&created);
    let status = created.status.clone().unwrap();
    assert!(status.shards.as_ref().unwrap().total >= 3, "{status:?}");
    assert!(status
        .conditions
        .iter()
        .any(|c| c.type_ == "Planned" && c.status == "True"));

    let deployments: Api<Deployment> = Api::namespaced(client.clone(), NS);
    let deployment = deployments.get("photos-workers").await.unwrap();
    let owner = &deployment.metadata.owner_references.clone().unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str()),
        ("BucketScan", "photos")
    );
    let replicas = deployment.spec.as_ref().unwrap().replicas.unwrap();
    assert!(
        (1..=3).contains(&replicas),
        "replicas follow the shards left: {replicas}"
    );
    let container = deployment.spec.unwrap().template.spec.unwrap().containers[0].clone();

    // Two "pods", paced so the operator restart lands mid-scan.
    let pace = ["--max-rate", "250", "--part-objects", "200"];
    let mut workers = vec![
        run_like_pod(&client, NS, &container, "photos-workers-a", &pace).await,
        run_like_pod(&client, NS, &container, "photos-workers-b", &pace).await,
    ];
    eventually("progress", 60, async || {
        let objects = scans.get("photos").await.ok()?.status?.objects?.scanned;
        (objects >= 800).then_some(())
    })
    .await;
    operator.stop();
    let mut operator = start_operator("second");

    // Redis loses the scan (a restart without persistence) once some shards
    // are done: the operator plans again, restoring finished shards from S3.
    eventually("a finished shard", 60, async || {
        let done = scans.get("photos").await.ok()?.status?.shards?.done;
        (done >= 1).then_some(())
    })
    .await;
    for w in &mut workers {
        w.kill().unwrap();
        w.wait().unwrap();
    }
    // What the status showed before the loss: it must never go back.
    let shown = scans
        .get("photos")
        .await
        .unwrap()
        .status
        .unwrap()
        .objects
        .unwrap()
        .scanned;
    let keys = redis_keys(&scan_id).await;
    let client_redis = redis::Client::open(redis_url().as_str()).unwrap();
    let mut con = client_redis.get_multiplexed_async_connection().await.unwrap();
    redis::cmd("DEL")
        .arg(&keys)
        .query_async::<()>(&mut con)
        .await
        .unwrap();
    let replanned = eventually("Replanned", 60, async || {
        let st = scans.get("photos").await.ok()?.status?;
        let planned = st.conditions.iter().find(|c| c.type_ == "Planned")?;
        (planned.reason == "Replanned").then(|| planned.message.clone())
    })
    .await;
    assert!(!replanned.contains(" 0 finished shards restored"), "{replanned}");
    // No worker runs yet: the progress counters were rebuilt from the done
    // records, and the status kept what it showed.
    let heads: Option<u64> = redis::cmd("HGET")
        .arg(format!("bs:{{{scan_id}}}:counters"))
        .arg("heads")
        .query_async(&mut con)
        .await
        .unwrap();
    assert!(
        heads.unwrap_or(0) > 0,
        "counters not rebuilt from the done records"
    );
    let kept = eventually("status after the replan", 30, async || {
        let st = scans.get("photos").await.ok()?.status?;
        let planned = st.conditions.iter().find(|c| c.type_ == "Planned")?;
        (planned.reason == "Replanned" && st.shards.as_ref()?.done >= 1).then_some(st.objects?.scanned)
    })
    .await;
    assert!(
        kept >= shown,
        "objects scanned went back from {shown} to {kept} after Redis lost the scan"
    );
    let mut workers = vec![
        run_like_pod(&client, NS, &container, "photos-workers-c", &pace).await,
        run_like_pod(&client, NS, &container, "photos-workers-d", &pace).await,
    ];
    for w in &mut workers {
        assert!(wait_exit(w, Duration::from_secs(120)).success(), "worker failed");
    }
    eventually("Merging", 60, async || {
        (phase(&scans, "photos").await == Some(Phase::Merging)).then_some(())
    })
    .await;
    let jobs: Api<Job> = Api::namespaced(client.clone(), NS);
    // The job controller reports the merge Job done, yet Redis holds no
    // manifest (as when Redis lost it since): the operator merges again
    // instead of waiting in Merging for ever.
    let first = jobs.get("photos-merge").await.unwrap();
    complete(&jobs, "photos-merge").await;
    let second = eventually("a new merge Job", 60, async || {
        let job = jobs.get_opt("photos-merge").await.ok()??;
        (job.metadata.uid != first.metadata.uid).then_some(job)
    })
    .await;
    // Its pod exits 75, a cause that may pass (here: a merge that found
    // shards brought back by a rollback): merged again after a pause, and
    // the scan does not fail.
    let not_finished = "error: scan is not finished: 1 shards pending, 0 being scanned";
    ended_pod(&client, NS, "photos-merge-y", "photos-merge", 75, not_finished).await;
    fail(&jobs, "photos-merge").await;
    let job = eventually("a third merge Job", 60, async || {
        let job = jobs.get_opt("photos-merge").await.ok()??;
        (job.metadata.uid != second.metadata.uid).then_some(job)
    })
    .await;
    assert_eq!(phase(&scans, "photos").await, Some(Phase::Merging));
    let merge_container = job.spec.unwrap().template.spec.unwrap().containers[0].clone();
    let mut merge = run_like_pod(&client, NS, &merge_container, "photos-merge-x", &[]).await;
    assert!(
        wait_exit(&mut merge, Duration::from_secs(60)).success(),
        "merge failed"
    );

    // `kubectl wait` is how a person or a pipeline waits for the result.
    let waited = Command::new("kubectl")
        .args([
            "wait",
            "--for=condition=Complete",
            "bucketscan/photos",
            "-n",
            NS,
            "--timeout=60s",
        ])
        .env("KUBECONFIG", kubeconfig_path())
        .output()
        .unwrap();
    assert!(
        waited.status.success(),
        "{}",
        String::from_utf8_lossy(&waited.stderr)
    );
    let done = scans.get("photos").await.unwrap().status.unwrap();
    assert_eq!(done.phase, Phase::Complete);
    assert_eq!(
        done.output.as_deref(),
        Some(format!("s3://{out}/scan/result.jsonl").as_str())
    );
    assert!(done.completion_time.is_some() && done.start_time.is_some());
    assert_matches_seed(&parse_records(&s3.read(&out, "scan/result.jsonl").await), &seeded);
    let manifest: serde_json::Value =
        serde_json::from_slice(&s3.read(&out, "scan/manifest.json").await).unwrap();
    assert_eq!(manifest["counts"]["objects"], 3000, "{manifest}");
    // The progress counters were rebuilt from the done records (the halfway
    // shards' lost work is not counted): scanning a finished shard again
    // would count its objects twice.
    assert!(
        manifest["progress"]["heads"].as_u64().unwrap() <= 3000,
        "finished shards were not scanned again after the replan: {manifest}"
    );
    eventually("workers removed", 30, async || {
        deployments
            .get_opt("photos-workers")
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;

    // Each event follows a status write (the last just seen).
    for reason in ["Planned", "Merging", "MergeRetrying", "Complete"] {
        wait_event(&client, NS, reason).await;
    }

    // Delete: the finalizer removes the Redis keys and the parts; the result stays.
    assert!(!redis_keys(&scan_id).await.is_empty());
    scans.delete("photos", &DeleteParams::default()).await.unwrap();
    eventually("deletion", 60, async || {
        scans.get_opt("photos").await.unwrap().is_none().then_some(())
    })
    .await;
    assert_eq!(redis_keys(&scan_id).await, Vec::<String>::new());
    assert_eq!(s3.key_count(&out, "scan/parts/").await, 0);
    assert!(!s3.read(&out, "scan/result.jsonl").await.is_empty());
    operator.stop();
}

/// A Parquet dataset through the operator: the status points at the
/// dataset's `data/` prefix and its manifest, and DuckDB, reading the files
/// the manifest lists, finds every object with its metadata exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parquet_dataset_scan_ends_with_its_data_prefix_in_the_status() {
    const DS: &str = "lifecycle-dataset";
    let client = client().await;
    install_crd(&client).await;
    namespace(&client, DS).await;
    let s3 = versitygw();
    let bucket = s3.bucket("ds").await;
    let out = s3.bucket("ds-out").await;
    let seeded: BTreeMap<String, Seeded> = (0..1200)
        .map(|i| {
            let metadata = BTreeMap::from([("n".to_string(), format!("{i}"))]);
            (
                format!("d{}/{i:05}", i % 4),
                Seeded {
                    size: i % 7,
                    metadata,
                },
            )
        })
        .collect();
    s3.seed(&bucket, &seeded).await;
    create_s3_secret(&client, DS, "s3", &s3.access_key, &s3.secret_key).await;
    let scans: Api<BucketScan> = Api::namespaced(client.clone(), DS);
    let scan: BucketScan = serde_json::from_value(serde_json::json!({
        "apiVersion": "bucketscan.dev/v1alpha1", "kind": "BucketScan",
        "metadata": {"name": "tables"},
        "spec": {
            "source": {"endpoint": s3.endpoint, "bucket": bucket, "pathStyle": true,
                       "credentialsSecret": {"name": "s3"}},
            "output": {"bucket": out, "prefix": "ds/", "format": "parquet", "layout": "dataset"},
            "workers": {"replicas": 1, "concurrency": 16},
            "sharding": {"targetShards": 4, "minShardObjects": 200}
        }
    }))
    .unwrap();
    scans.create(&PostParams::default(), &scan).await.unwrap();
    let mut operator = start_operator_in(DS, "dataset");
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), DS);
    let deployment = eventually("the workers", 60, async || {
        deployments.get_opt("tables-workers").await.ok()?
    })
    .await;
    let container = deployment.spec.unwrap().template.spec.unwrap().containers[0].clone();
    let mut worker = run_like_pod(&client, DS, &container, "tables-workers-a", &[]).await;
    assert!(
        wait_exit(&mut worker, Duration::from_secs(120)).success(),
        "worker failed"
    );
    let jobs: Api<Job> = Api::namespaced(client.clone(), DS);
    let job = eventually("the merge Job", 60, async || {
        jobs.get_opt("tables-merge").await.ok()?
    })
    .await;
    let merge_container = job.spec.unwrap().template.spec.unwrap().containers[0].clone();
    let mut merge = run_like_pod(&client, DS, &merge_container, "tables-merge-x", &[]).await;
    assert!(
        wait_exit(&mut merge, Duration::from_secs(60)).success(),
        "merge failed"
    );
    let done = eventually("Complete", 60, async || {
        let st = scans.get("tables").await.ok()?.status?;
        (st.phase == Phase::Complete).then_some(st)
    })
    .await;
    assert_eq!(
        done.output.as_deref(),
        Some(format!("s3://{out}/ds/data/").as_str())
    );
    assert_eq!(
        done.manifest.as_deref(),
        Some(format!("s3://{out}/ds/manifest.json").as_str())
    );

    let manifest: serde_json::Value =
        serde_json::from_slice(&s3.read(&out, "ds/manifest.json").await).unwrap();
    assert_eq!(manifest["counts"]["objects"], 1200, "{manifest}");
    let dir = temp_path("lifecycle-dataset");
    std::fs::create_dir_all(&dir).unwrap();
    let mut files = Vec::new();
    for file in manifest["files"].as_array().unwrap() {
        let location = file["location"].as_str().unwrap();
        let key = location.strip_prefix(&format!("s3://{out}/")).unwrap();
        assert!(key.starts_with("ds/data/") && key.ends_with(".parquet"), "{key}");
        let path = dir.join(key.rsplit('/').next().unwrap());
        std::fs::write(&path, s3.read(&out, key).await).unwrap();
        files.push(path);
    }
    let read = Command::new(format!(
        "{}/.cache/bucketscan/venv/bin/python",
        std::env::var("HOME").unwrap()
    ))
    .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/read-dataset.py"))
    .arg("parquet")
    .args(&files)
    .output()
    .expect("the venv's python (scripts/install-deps.sh installs duckdb and pyarrow)");
    assert!(read.status.success(), "{}", String::from_utf8_lossy(&read.stderr));
    let read: serde_json::Value = serde_json::from_slice(&read.stdout).unwrap();
    assert_eq!(read["rows"], 1200);
    for (key, seed) in &seeded {
        let got = &read["records"][key];
        assert_eq!(got["status"], "ok", "{key}");
        assert_eq!(got["size"], seed.size as u64, "{key}");
        assert_eq!(got["user_metadata"]["n"], seed.metadata["n"], "{key}");
    }
    operator.stop();
}

/// Two scans writing to one output prefix: the newer is refused with
/// `OutputConflict`, then deleted. Its finalizer deletes only its own parts
/// (`parts/SCAN_ID/`): the running scan's parts stay. Before: parts shared
/// `PREFIX/parts/`, and deleting the refused scan deleted the live one's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_refused_scan_leaves_the_live_scan_s_parts() {
    const NS: &str = "shared-output";
    let client = client().await;
    install_crd(&client).await;
    namespace(&client, NS).await;
    let s3 = versitygw();
    let bucket = s3.bucket("shared-src").await;
    let out = s3.bucket("shared-out").await;
    let seeded: BTreeMap<String, Seeded> = (0..200)
        .map(|i| (format!("k{i:04}"), Seeded::default()))
        .collect();
    s3.seed(&bucket, &seeded).await;
    create_s3_secret(&client, NS, "s3", &s3.access_key, &s3.secret_key).await;
    let scans: Api<BucketScan> = Api::namespaced(client.clone(), NS);
    let scan = |name: &str| -> BucketScan {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "bucketscan.dev/v1alpha1",
            "kind": "BucketScan",
            "metadata": {"name": name},
            "spec": {
                "source": {"endpoint": s3.endpoint, "bucket": bucket, "pathStyle": true,
                           "credentialsSecret": {"name": "s3"}},
                "output": {"bucket": out, "prefix": "shared/"},
                "workers": {"minReplicas": 1, "maxReplicas": 1}
            }
        }))
        .unwrap()
    };
    scans.create(&PostParams::default(), &scan("live")).await.unwrap();
    let mut operator = start_operator_in(NS, "shared-output");
    eventually("live planned", 60, async || {
        (phase(&scans, "live").await == Some(Phase::Scanning)).then_some(())
    })
    .await;
    // A part as the live scan's worker leaves it.
    let live_id = bucketscan_operator::desired::scan_id(&scans.get("live").await.unwrap());
    let part = format!("shared/parts/{live_id}/x/1-start.jsonl");
    s3.client()
        .put_object()
        .bucket(&out)
        .key(&part)
        .body(b"{}\n".to_vec().into())
        .send()
        .await
        .unwrap();

    scans.create(&PostParams::default(), &scan("late")).await.unwrap();
    eventually("late refused", 60, async || {
        let status = scans.get("late").await.ok()?.status?;
        status
            .conditions
            .iter()
            .any(|c| c.reason == "OutputConflict")
            .then_some(())
    })
    .await;
    scans.delete("late", &DeleteParams::default()).await.unwrap();
    eventually("late deleted", 60, async || {
        scans.get_opt("late").await.unwrap().is_none().then_some(())
    })
    .await;
    assert_eq!(s3.read(&out, &part).await, b"{}\n", "the live scan's part stays");
    operator.stop();
}
