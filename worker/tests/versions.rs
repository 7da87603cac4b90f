//! `--versions` (spec.columns.versions) on real servers, MinIO and moto: a
//! versioned bucket with several versions per key, each with its own size
//! and metadata, delete markers, a key whose only version is a delete
//! marker, a key deleted and written again. Every version and delete marker
//! must be in the result exactly once, with that version's metadata, in the
//! store's order (keys ascending, a key's versions newest first): from
//! `scan`, from the engine resumed between two versions of one key, and from
//! a fleet whose worker is killed while checkpoints fall between versions of
//! one key (JSONL and Parquet); a pass resumed after a `null` version that
//! was replaced since (its id reused) fails rather than repeat a version.

mod common;
#[path = "common/fault_proxy.rs"]
mod fault_proxy;

use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{BucketVersioningStatus, VersioningConfiguration};
use bucketscan_core::keyspace::shard::Shard;
use bucketscan_core::s3::{HeadClient, HeadClientKind};
use bucketscan_core::scan::column_options::ColumnOptions;
use bucketscan_core::scan::engine::{Engine, EngineOptions, Frontier};
use bucketscan_core::scan::listed::MetadataSource;
use bucketscan_core::scan::record::{Record, Status};
use common::*;
use std::collections::BTreeMap;
use std::sync::atomic::Ordering::SeqCst;
use std::sync::Arc;
use std::time::Duration;

/// One version or delete marker the test wrote, as its record must show it.
#[derive(Clone, Debug, PartialEq)]
struct Version {
    key: String,
    version_id: String,
    delete_marker: bool,
    size: u64,
    metadata: BTreeMap<String, String>,
    is_latest: bool,
}

/// What a key goes through, in order.
#[derive(Clone, Copy)]
enum Op {
    /// Write a version of this size (its metadata says which it is).
    Put(usize),
    /// Delete the key: a delete marker.
    Delete,
    /// Delete the key's oldest version for good (by its id).
    DropOldest,
}

async fn versioned_bucket(s3: &Server, tag: &str) -> String {
    let bucket = s3.bucket(tag).await;
    s3.client()
        .put_bucket_versioning()
        .bucket(&bucket)
        .versioning_configuration(
            VersioningConfiguration::builder()
                .status(BucketVersioningStatus::Enabled)
                .build(),
        )
        .send()
        .await
        .expect("enable versioning");
    bucket
}

/// How far apart a key's writes are made. moto lists times to the second
/// and its versions apart from its delete markers, so the order of a delete
/// marker among versions of the same second is unknown (docs/testing.md):
/// there they are written a second apart.
fn gap(s3: &Server) -> Duration {
    match s3.endpoint == moto().endpoint {
        true => Duration::from_millis(1100),
        false => Duration::from_millis(15),
    }
}

/// Apply `ops` to `key`, one after another (`gap` apart, so every store
/// orders them by time as they were made); the versions left, newest first,
/// as the store must list them.
async fn write_key(s3: &Server, bucket: &str, key: &str, ops: &[Op]) -> Vec<Version> {
    let c = s3.client();
    // Oldest first while writing.
    let mut versions: Vec<Version> = Vec::new();
    for (n, op) in ops.iter().enumerate() {
        let gap = match (op, ops.get(n.wrapping_sub(1))) {
            (Op::Delete, _) | (_, Some(Op::Delete)) => gap(s3),
            _ => Duration::from_millis(15),
        };
        tokio::time::sleep(gap).await;
        match *op {
            Op::Put(size) => {
                let metadata = BTreeMap::from([("generation".to_string(), n.to_string())]);
                let put = c
                    .put_object()
                    .bucket(bucket)
                    .key(key)
                    .body(ByteStream::from(vec![b'v'; size]))
                    .metadata("generation", n.to_string())
                    .send()
                    .await
                    .unwrap_or_else(|e| panic!("put {key}: {e:?}"));
                versions.push(Version {
                    key: key.into(),
                    version_id: put
                        .version_id()
                        .expect("a versioned bucket names the version")
                        .into(),
                    delete_marker: false,
                    size: size as u64,
                    metadata,
                    is_latest: false,
                });
            }
            Op::Delete => {
                let deleted = c.delete_object().bucket(bucket).key(key).send().await.unwrap();
                versions.push(Version {
                    key: key.into(),
                    version_id: deleted.version_id().expect("a delete marker's id").into(),
                    delete_marker: true,
                    size: 0,
                    metadata: BTreeMap::new(),
                    is_latest: false,
                });
            }
            Op::DropOldest => {
                let oldest = versions.remove(0);
                c.delete_object()
                    .bucket(bucket)
                    .key(key)
                    .version_id(&oldest.version_id)
                    .send()
                    .await
                    .unwrap();
            }
        }
    }
    versions.reverse();
    if let Some(latest) = versions.first_mut() {
        latest.is_latest = true;
    }
    versions
}

/// Keys of every shape, in key order, with the versions each must show.
async fn seed_versions(s3: &Server, bucket: &str, plain_keys: usize) -> Vec<Version> {
    use Op::*;
    let mut shapes: Vec<(String, Vec<Op>)> = vec![
        ("a-many".into(), vec![Put(1), Put(22), Put(333), Put(4)]),
        ("b-deleted".into(), vec![Put(5), Delete]),
        // The put dropped for good: a delete marker is all that is left.
        ("c-only-marker".into(), vec![Put(6), Delete, DropOldest]),
        ("d-reborn".into(), vec![Put(7), Delete, Put(8)]),
        ("e-single".into(), vec![Put(9)]),
    ];
    for i in 0..plain_keys {
        let ops = match i % 3 {
            0 => vec![Put(i % 7), Put(i % 5 + 1), Put(3)],
            1 => vec![Put(i % 11), Delete, Put(2), Put(1)],
            _ => vec![Put(i % 13)],
        };
        shapes.push((format!("k/{i:04}"), ops));
    }
    let writes = shapes.iter().map(|(key, ops)| write_key(s3, bucket, key, ops));
    let mut all = Vec::new();
    for versions in futures::stream::iter(writes)
        .buffered(16)
        .collect::<Vec<_>>()
        .await
    {
        all.extend(versions);
    }
    all.sort_by(|a, b| a.key.cmp(&b.key)); // stable: a key's versions stay newest first
    all
}

use futures::StreamExt;

/// Every record is one of the versions written, each exactly once, in the
/// store's order, with that version's size, metadata and flags.
fn assert_versions(records: &[Record], want: &[Version], what: &str) {
    let got: Vec<(&str, &str)> = records
        .iter()
        .map(|r| {
            (
                r.key.as_str(),
                r.columns.version_id.as_deref().unwrap_or("<none>"),
            )
        })
        .collect();
    let expected: Vec<(&str, &str)> = want
        .iter()
        .map(|v| (v.key.as_str(), v.version_id.as_str()))
        .collect();
    if got != expected {
        let mut seen = std::collections::BTreeSet::new();
        let twice: Vec<_> = got.iter().filter(|g| !seen.insert(**g)).take(5).collect();
        let missing: Vec<_> = expected.iter().filter(|e| !got.contains(e)).take(5).collect();
        panic!(
            "{what}: {} records for {} versions; twice {twice:?}; missing {missing:?}; got {got:?}",
            got.len(),
            expected.len()
        );
    }
    for (r, v) in records.iter().zip(want) {
        let at = format!("{what}: {}@{}: {r:?}", v.key, v.version_id);
        assert_eq!(r.status, Status::Ok, "{at}");
        assert_eq!(r.columns.is_delete_marker, Some(v.delete_marker), "{at}");
        assert_eq!(r.columns.is_latest, Some(v.is_latest), "{at}");
        assert_eq!(r.size, v.size, "{at}");
        assert_eq!(r.metadata, v.metadata, "{at}");
        assert!(r.last_modified.is_some(), "{at}");
        if v.delete_marker {
            assert_eq!((&r.etag, &r.storage_class), (&None, &None), "{at}");
        } else {
            assert!(r.etag.is_some(), "{at}");
        }
    }
}

/// JSON Lines records in file order (a key may repeat: one per version).
fn parse_lines(jsonl: &[u8]) -> Vec<Record> {
    jsonl
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_slice(l).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(l))))
        .collect()
}

fn parquet_records(body: Vec<u8>) -> Vec<Record> {
    bucketscan_core::scan::parquet::read_records(bytes::Bytes::from(body))
        .unwrap()
        .flat_map(|batch| batch.unwrap())
        .collect()
}

async fn scan_lists_every_version_once(s3: Server) {
    let bucket = versioned_bucket(&s3, "ver").await;
    let want = seed_versions(&s3, &bucket, 12).await;
    assert!(want.iter().any(|v| v.key == "c-only-marker" && v.delete_marker));
    assert_eq!(want.iter().filter(|v| v.key == "c-only-marker").count(), 1);
    let out = s3.worker(&["scan", "--bucket", &bucket, "--versions", "--quiet"]);
    assert_success(&out);
    assert_versions(&parse_lines(&out.stdout), &want, "scan --versions");
    // Without the flag: one record per key that has a current version.
    let out = s3.worker(&["scan", "--bucket", &bucket, "--quiet"]);
    assert_success(&out);
    let current = parse_records(&out.stdout);
    let live: Vec<&str> = want
        .iter()
        .filter(|v| v.is_latest && !v.delete_marker)
        .map(|v| v.key.as_str())
        .collect();
    assert_eq!(current.keys().map(String::as_str).collect::<Vec<_>>(), live);
    assert!(current.values().all(|r| r.columns.is_delete_marker.is_none()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scan_lists_every_version_once_on_minio() {
    scan_lists_every_version_once(minio()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scan_lists_every_version_once_on_moto() {
    scan_lists_every_version_once(moto()).await;
}

fn engine(s3: &Arc<bucketscan_core::s3::S3>, bucket: &str, page_size: i32) -> Arc<Engine> {
    Engine::new(
        s3.clone(),
        HeadClient::new(HeadClientKind::Fast, s3).unwrap(),
        EngineOptions {
            bucket: bucket.into(),
            concurrency: 8,
            only_with_metadata: false,
            page_size,
            max_rate: None,
            metadata_source: MetadataSource::Head,
            filter: Default::default(),
            columns: ColumnOptions {
                versions: true,
                ..ColumnOptions::default()
            },
        },
    )
}

/// The engine talking to `s3` through `proxy`.
async fn engine_through(
    s3: &Server,
    proxy: &fault_proxy::FaultProxy,
    bucket: &str,
    page_size: i32,
) -> Arc<Engine> {
    let through = Server {
        endpoint: proxy.url.clone(),
        ..s3.clone()
    };
    engine(&through.s3().await, bucket, page_size)
}

/// One pass of `shard`, from after `after_version` of its start key.
async fn pass(engine: &Arc<Engine>, shard: &Shard, after_version: Option<String>) -> Vec<Record> {
    let (records, ended) = try_pass(engine, shard, after_version).await;
    ended.unwrap();
    records
}

/// As [`pass`], with how the pass ended.
async fn try_pass(
    engine: &Arc<Engine>,
    shard: &Shard,
    after_version: Option<String>,
) -> (Vec<Record>, Result<(), bucketscan_core::s3::S3Error>) {
    let (tx, mut rx) = tokio::sync::mpsc::channel(4096);
    let scan = {
        let (engine, shard) = (engine.clone(), shard.clone());
        tokio::spawn(async move {
            engine
                .scan_shard_live(&shard, after_version, Arc::new(Frontier::default()), &tx)
                .await
        })
    };
    let mut records = Vec::new();
    while let Some(r) = rx.recv().await {
        records.push(*r);
    }
    (records, scan.await.unwrap().map(|_| ()))
}

/// Pages of two entries split keys between pages; a pass resumed after any
/// one record (a key, and with versions a version of it) gives exactly the
/// records after it: resumed between two versions of one key, it neither
/// repeats nor loses one.
async fn a_pass_resumed_after_any_version_gives_exactly_the_rest(s3: Server) {
    let bucket = versioned_bucket(&s3, "ver-resume").await;
    let want = seed_versions(&s3, &bucket, 6).await;
    let client = s3.s3().await;
    let engine = engine(&client, &bucket, 2);
    let whole = pass(&engine, &Shard::default(), None).await;
    assert_versions(&whole, &want, "pages of 2");
    for (at, record) in whole.iter().enumerate() {
        let resumed = Shard::default().resumed_after(&record.key);
        let rest = pass(&engine, &resumed, record.columns.version_id.clone()).await;
        assert_versions(&rest, &want[at + 1..], &format!("resumed after record {at}"));
    }
    // After a key whole (no version): its versions are all before.
    let rest = pass(&engine, &Shard::default().resumed_after("a-many"), None).await;
    let after: Vec<Version> = want
        .iter()
        .filter(|v| v.key.as_str() > "a-many")
        .cloned()
        .collect();
    assert_versions(&rest, &after, "after the key a-many");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pass_resumed_after_any_version_gives_exactly_the_rest_on_minio() {
    a_pass_resumed_after_any_version_gives_exactly_the_rest(minio()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pass_resumed_after_any_version_gives_exactly_the_rest_on_moto() {
    a_pass_resumed_after_any_version_gives_exactly_the_rest(moto()).await;
}

/// A HEAD of one version that keeps failing (500 InternalError, more times than
/// a request's retries) ends `scan`'s pass between two versions of one key;
/// the pass resumes after the version before it (listing that key whole
/// first) and every version is in the result once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scan_resumed_between_two_versions_of_a_key_lists_each_once() {
    let s3 = minio();
    let bucket = versioned_bucket(&s3, "ver-fault").await;
    let want = seed_versions(&s3, &bucket, 4).await;
    let failing = want[1].clone();
    assert_eq!((failing.key.as_str(), want[0].key.as_str()), ("a-many", "a-many"));
    let left = std::sync::atomic::AtomicU32::new(11);
    let query = format!("versionId={}", failing.version_id);
    let proxy = fault_proxy::start(
        s3.endpoint.clone(),
        move |req| {
            let hit = req.method == "HEAD"
                && fault_proxy::object_key(req).as_deref() == Some("a-many")
                && req.uri.query() == Some(query.as_str());
            let take = |n: u32| n.checked_sub(1);
            (hit && left.fetch_update(SeqCst, SeqCst, take).is_ok()).then(|| {
                fault_proxy::error_document(500, "InternalError", "emulated by the fault proxy", &[])
            })
        },
        |_, _| {},
    )
    .await;
    let through = Server {
        endpoint: proxy.url.clone(),
        ..s3.clone()
    };
    let out = through.worker(&["scan", "--bucket", &bucket, "--versions", "--quiet"]);
    assert_success(&out);
    assert_versions(&parse_lines(&out.stdout), &want, "scan resumed between versions");
    let seen = proxy.requests();
    assert_eq!(
        seen.iter().filter(|r| r.answered_by_rule).count(),
        11,
        "the fault was served in full"
    );
    // The resume listed the key whole: its versions after the one written.
    assert!(
        seen.iter()
            .any(|r| r.target.contains("versions") && r.target.contains("prefix=a-many")),
        "{:?}",
        seen.iter().map(|r| &r.target).collect::<Vec<_>>()
    );
}

/// A bucket that never had versioning: one version per object, which
/// MinIO and moto both call `null`, HEADed as such.
async fn an_unversioned_bucket_lists_one_null_version_per_object(s3: Server) {
    let bucket = s3.bucket("unver").await;
    let seeded: BTreeMap<String, Seeded> = (0..5)
        .map(|i| {
            let metadata = BTreeMap::from([("n".to_string(), i.to_string())]);
            (format!("o{i}"), Seeded { size: i, metadata })
        })
        .collect();
    s3.seed(&bucket, &seeded).await;
    let out = s3.worker(&["scan", "--bucket", &bucket, "--versions", "--quiet"]);
    assert_success(&out);
    let want: Vec<Version> = seeded
        .iter()
        .map(|(key, s)| Version {
            key: key.clone(),
            version_id: "null".into(),
            delete_marker: false,
            size: s.size as u64,
            metadata: s.metadata.clone(),
            is_latest: true,
        })
        .collect();
    assert_versions(&parse_lines(&out.stdout), &want, "unversioned bucket");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unversioned_bucket_lists_one_null_version_per_object_on_minio() {
    an_unversioned_bucket_lists_one_null_version_per_object(minio()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unversioned_bucket_lists_one_null_version_per_object_on_moto() {
    an_unversioned_bucket_lists_one_null_version_per_object(moto()).await;
}

/// Filters judge each version on its own: `--min-size 10` keeps the
/// versions of 10 bytes or more and drops delete markers (size 0);
/// `--only-with-metadata` drops delete markers and keeps every version
/// (each has metadata).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn filters_judge_each_version() {
    let s3 = minio();
    let bucket = versioned_bucket(&s3, "ver-filter").await;
    let want = seed_versions(&s3, &bucket, 3).await;
    let out = s3.worker(&[
        "scan",
        "--bucket",
        &bucket,
        "--versions",
        "--min-size",
        "10",
        "--quiet",
    ]);
    assert_success(&out);
    let big: Vec<Version> = want.iter().filter(|v| v.size >= 10).cloned().collect();
    assert!(big.len() >= 2 && big.len() < want.len(), "{big:?}");
    assert_versions(&parse_lines(&out.stdout), &big, "--min-size 10");
    let out = s3.worker(&[
        "scan",
        "--bucket",
        &bucket,
        "--versions",
        "--only-with-metadata",
        "--quiet",
    ]);
    assert_success(&out);
    let with_metadata: Vec<Version> = want.iter().filter(|v| !v.delete_marker).cloned().collect();
    assert_versions(&parse_lines(&out.stdout), &with_metadata, "--only-with-metadata");
}

/// `--versions` with `--baseline` is refused before any HEAD.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn versions_with_a_baseline_are_refused() {
    let s3 = minio();
    let bucket = s3.bucket("ver-base").await;
    let out = s3.bucket("ver-base-out").await;
    s3.seed(&bucket, &BTreeMap::from([("x".to_string(), Seeded::default())]))
        .await;
    let dataset = format!("s3://{out}/base/");
    let first = s3.worker(&[
        "scan", "--bucket", &bucket, "--layout", "dataset", "-o", &dataset, "--quiet",
    ]);
    assert_success(&first);
    let manifest = format!("{dataset}manifest.json");
    let next = format!("s3://{out}/next/");
    let again = s3.worker(&[
        "scan",
        "--bucket",
        &bucket,
        "--versions",
        "--baseline",
        &manifest,
        "--layout",
        "dataset",
        "-o",
        &next,
        "--quiet",
    ]);
    assert!(!again.status.success());
    assert!(
        stderr(&again).contains("run scans of versions without a baseline"),
        "{}",
        stderr(&again)
    );
}

fn redis_url() -> String {
    std::env::var("BUCKETSCAN_TEST_REDIS_URL").expect("run the tests with scripts/with-test-servers.sh")
}

/// The checkpoints Redis holds for the scan's shards.
async fn checkpoints(scan: &str) -> Vec<String> {
    let client = redis::Client::open(redis_url()).unwrap();
    let mut con = client.get_multiplexed_async_connection().await.unwrap();
    let ids: Vec<String> = redis::cmd("SMEMBERS")
        .arg(format!("bs:{{{scan}}}:shards"))
        .query_async(&mut con)
        .await
        .unwrap();
    let mut out = Vec::new();
    for id in ids {
        let c: Option<String> = redis::cmd("HGET")
            .arg(format!("bs:{{{scan}}}:shard:{id}"))
            .arg("checkpoint")
            .query_async(&mut con)
            .await
            .unwrap();
        out.extend(c);
    }
    out
}

/// plan + run + merge with versions: parts of 7 records over keys of 3 and
/// 4 versions put checkpoints between versions of one key; the first worker
/// is killed (SIGKILL) once such a checkpoint is recorded, its lease runs
/// out and the second worker resumes there. Every version once, in order,
/// in a single result or a dataset (whose parts and blocks then begin and
/// end inside a key).
async fn a_fleet_killed_between_versions_of_a_key_lists_each_once(s3: Server, format: &str, layout: &str) {
    let bucket = versioned_bucket(&s3, &format!("ver-fleet-{format}")).await;
    let out = s3.bucket(&format!("ver-fleet-out-{format}")).await;
    let want = seed_versions(&s3, &bucket, 90).await;
    let scan = format!("ver-{bucket}");
    let redis = redis_url();
    let queue = ["--redis", redis.as_str(), "--scan", scan.as_str()];
    let output = format!("s3://{out}/v/");
    let plan = [
        "plan",
        "--bucket",
        &bucket,
        "--versions",
        "--format",
        format,
        "--layout",
        layout,
        "--target-shards",
        "2",
        "--min-shard-objects",
        "1",
        "--output",
        &output,
    ];
    assert_success(&s3.worker(&[&plan[..], &queue[..]].concat()));
    let run = |name: &'static str, rate: &'static str| {
        let args = [
            "run",
            "--name",
            name,
            "--part-objects",
            "7",
            "--lease-secs",
            "3",
            "--max-rate",
            rate,
            "--concurrency",
            "4",
            "--shards-in-flight",
            "1",
        ];
        s3.worker_command(&[], &[&args[..], &queue[..]].concat())
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(temp_path(&format!("{scan}-{name}.log"))).unwrap())
            .spawn()
            .unwrap()
    };
    let mut first = run("killed", "40");
    // Frozen (SIGSTOP) while its checkpoints are read, so what is read is
    // what it leaves: killed only while one falls between two versions of
    // one key (after a version that is not its key's oldest).
    let between = |c: &str| {
        let (key, version) = c
            .rsplit_once('\0')
            .expect("a versioned checkpoint is KEY NUL VERSION");
        let of_key: Vec<&Version> = want.iter().filter(|v| v.key == key).collect();
        of_key.last().is_some_and(|oldest| oldest.version_id != version)
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        assert!(
            std::time::Instant::now() < deadline,
            "no checkpoint between versions of a key"
        );
        assert!(
            first.try_wait().unwrap().is_none(),
            "the first worker ended before it was killed"
        );
        unsafe { libc_kill(first.id() as i32, SIGSTOP) };
        if checkpoints(&scan).await.iter().any(|c| between(c)) {
            break;
        }
        unsafe { libc_kill(first.id() as i32, SIGCONT) };
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    first.kill().unwrap();
    first.wait().unwrap();
    let mut second = run("survivor", "2000");
    let status = wait_exit(&mut second, Duration::from_secs(120));
    assert!(status.success(), "{status:?}");
    assert_success(&s3.worker(&[&["merge"][..], &queue[..]].concat()));
    let manifest: serde_json::Value =
        serde_json::from_slice(&s3.read(&out, "v/manifest.json").await).unwrap();
    assert_eq!(manifest["counts"]["objects"], want.len(), "{manifest}");
    assert_eq!(manifest["spec"]["columns"]["versions"], true, "{manifest}");
    assert!(manifest["shards_retried"].as_u64().unwrap() >= 1, "{manifest}");
    let mut records = Vec::new();
    for file in manifest["files"].as_array().unwrap() {
        let location = file["location"].as_str().unwrap();
        let key = location.strip_prefix(&format!("s3://{out}/")).unwrap();
        let body = s3.read(&out, key).await;
        records.extend(match format {
            "parquet" => parquet_records(body),
            _ => parse_lines(&body),
        });
    }
    if layout == "single" {
        assert_eq!(manifest["files"].as_array().unwrap().len(), 1, "{manifest}");
    }
    assert_versions(&records, &want, &format!("fleet ({format})"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_killed_between_versions_of_a_key_lists_each_once_jsonl_on_minio() {
    a_fleet_killed_between_versions_of_a_key_lists_each_once(minio(), "jsonl", "single").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_killed_between_versions_of_a_key_lists_each_once_parquet_dataset_on_minio() {
    a_fleet_killed_between_versions_of_a_key_lists_each_once(minio(), "parquet", "dataset").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_killed_between_versions_of_a_key_lists_each_once_jsonl_dataset_on_moto() {
    a_fleet_killed_between_versions_of_a_key_lists_each_once(moto(), "jsonl", "dataset").await;
}

/// The version a checkpoint names deleted for good before the pass that
/// resumes there (K: v1, v2, then a delete marker; the part ended after the
/// marker, which is then deleted by its id): where K's older versions stood
/// against it cannot be told, so the pass fails with that, instead of
/// resuming after the whole key and ending without v2 and v1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pass_resumed_after_a_version_deleted_since_fails_instead_of_skipping_the_key() {
    use Op::*;
    let s3 = minio();
    let bucket = versioned_bucket(&s3, "ver-gone").await;
    let written = write_key(&s3, &bucket, "K", &[Put(1), Put(2), Delete]).await;
    let marker = written[0].version_id.clone();
    assert!(written[0].delete_marker);
    s3.client()
        .delete_object()
        .bucket(&bucket)
        .key("K")
        .version_id(&marker)
        .send()
        .await
        .unwrap();
    let client = s3.s3().await;
    let engine = engine(&client, &bucket, 2);
    assert_resume_gone(&engine, marker.clone(), &marker).await;
    // The versions left are all listed from the shard's start.
    let mut left = written[1..].to_vec();
    left[0].is_latest = true;
    assert_versions(
        &pass(&engine, &Shard::default(), None).await,
        &left,
        "from the start",
    );
}

/// Pages with their `NextVersionIdMarker` left out (as a store may
/// on a page that ends inside a key): pages of 2 end between versions of
/// one key, and every version is still listed once (the page's last entry
/// is where the next page starts).
async fn pages_without_a_version_marker_resume_inside_the_key(s3: Server) {
    let bucket = versioned_bucket(&s3, "ver-novidm").await;
    let want = seed_versions(&s3, &bucket, 6).await;
    let proxy = fault_proxy::start_rewriting(
        s3.endpoint.clone(),
        |_| None,
        |req, _, body| {
            if !req.uri.query().unwrap_or_default().contains("versions") {
                return;
            }
            let text = String::from_utf8_lossy(body).into_owned();
            let blanked = match (
                text.find("<NextVersionIdMarker>"),
                text.find("</NextVersionIdMarker>"),
            ) {
                (Some(at), Some(end)) => {
                    format!("{}{}", &text[..at], &text[end + "</NextVersionIdMarker>".len()..])
                }
                _ => return,
            };
            *body = bytes::Bytes::from(blanked);
        },
    )
    .await;
    let engine = engine_through(&s3, &proxy, &bucket, 2).await;
    assert_versions(
        &pass(&engine, &Shard::default(), None).await,
        &want,
        "no version markers",
    );
    let blanked = proxy
        .requests()
        .iter()
        .filter(|r| r.target.contains("version-id-marker="))
        .count();
    assert!(blanked >= 3, "pages went on from a version: {blanked}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages_without_a_version_marker_resume_inside_the_key_on_moto() {
    pages_without_a_version_marker_resume_inside_the_key(moto()).await;
}

/// MinIO's `NextKeyMarker` is the key with its listing cache's id after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages_without_a_version_marker_resume_inside_the_key_on_minio() {
    pages_without_a_version_marker_resume_inside_the_key(minio()).await;
}

/// Keys with a control character (`p\x01…`, held by moto) over many pages
/// of 2: the store's own markers name them and are sent back as given, so
/// the listing goes on past them instead of starting before keys already
/// listed (which failed every attempt as out of order).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn versions_of_keys_with_control_characters_page_on() {
    use Op::*;
    let s3 = moto();
    let bucket = versioned_bucket(&s3, "ver-ctl").await;
    let mut want = Vec::new();
    for key in ["o", "p\u{1}a", "p\u{1}b", "p\u{7f}", "p\u{ffff}", "q"] {
        want.extend(write_key(&s3, &bucket, key, &[Put(1), Put(2), Put(3)]).await);
    }
    let client = s3.s3().await;
    let engine = engine(&client, &bucket, 2);
    assert_versions(
        &pass(&engine, &Shard::default(), None).await,
        &want,
        "control characters",
    );
    // Resumed after any one of them: that key listed whole (its name as
    // the prefix), the rest after it.
    let whole = pass(&engine, &Shard::default(), None).await;
    for (at, record) in whole.iter().enumerate() {
        let resumed = Shard::default().resumed_after(&record.key);
        let rest = pass(&engine, &resumed, record.columns.version_id.clone()).await;
        assert_versions(&rest, &want[at + 1..], &format!("resumed after record {at}"));
    }
    let out = s3.worker(&["scan", "--bucket", &bucket, "--versions", "--quiet"]);
    assert_success(&out);
    assert_versions(&parse_lines(&out.stdout), &want, "scan --versions");
}

/// A store that answers the listing of one key's versions (a pass resumed
/// inside the key lists it whole) with the same truncated page for ever:
/// the pass fails after so many repeats, it does not hang (which would
/// renew a fleet worker's lease for ever).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_whose_version_listing_never_ends_fails_the_pass() {
    let s3 = minio();
    let bucket = versioned_bucket(&s3, "ver-loop").await;
    let written = write_key(&s3, &bucket, "K", &[Op::Put(1), Op::Put(2)]).await;
    let page = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<ListVersionsResult><Name>{bucket}</Name><Prefix>K</Prefix><KeyMarker></KeyMarker><VersionIdMarker></VersionIdMarker><NextKeyMarker>K</NextKeyMarker><NextVersionIdMarker>{v}</NextVersionIdMarker><MaxKeys>1000</MaxKeys><EncodingType>url</EncodingType><IsTruncated>true</IsTruncated><Version><Key>K</Key><VersionId>{v}</VersionId><IsLatest>true</IsLatest><LastModified>2026-01-01T00:00:01.000Z</LastModified><ETag>&quot;e&quot;</ETag><Size>2</Size><StorageClass>STANDARD</StorageClass></Version></ListVersionsResult>",
        v = written[0].version_id
    );
    let proxy = fault_proxy::start(
        s3.endpoint.clone(),
        move |req| {
            let query = req.uri.query().unwrap_or_default();
            (query.contains("versions") && query.contains("prefix=K"))
                .then(|| fault_proxy::answer(200, &[("content-type", "application/xml")], &page))
        },
        |_, _| {},
    )
    .await;
    let engine = engine_through(&s3, &proxy, &bucket, 2).await;
    let resumed = Shard::default().resumed_after("K");
    let ended = tokio::time::timeout(
        Duration::from_secs(60),
        try_pass(&engine, &resumed, Some(written[0].version_id.clone())),
    )
    .await
    .expect("the pass hung on a listing that never ends");
    assert!(
        matches!(ended.1, Err(bucketscan_core::s3::S3Error::BadListing(_))),
        "{:?}",
        ended.1
    );
}

/// A pass whose listing is the one taken before the key `K` is deleted (a
/// fault proxy serves that page again), the HEADs and checks after it: a
/// version deleted during the scan, as the engine meets it.
async fn pass_with_k_deleted_after_its_listing(s3: &Server, bucket: &str) -> Vec<Record> {
    let stale: Arc<std::sync::Mutex<Option<bytes::Bytes>>> = Arc::default();
    let whole_listing = |req: &http::request::Parts| {
        let query = req.uri.query().unwrap_or_default();
        query.contains("versions") && !query.contains("prefix=K")
    };
    let proxy = {
        let (kept, served) = (stale.clone(), stale.clone());
        fault_proxy::start_rewriting(
            s3.endpoint.clone(),
            move |req| {
                let body = served.lock().unwrap().clone()?;
                whole_listing(req).then(|| {
                    fault_proxy::answer(
                        200,
                        &[("content-type", "application/xml")],
                        &String::from_utf8_lossy(&body),
                    )
                })
            },
            move |req, _, body| {
                if whole_listing(req) {
                    kept.lock().unwrap().get_or_insert_with(|| body.clone());
                }
            },
        )
        .await
    };
    let engine = engine_through(s3, &proxy, bucket, 1000).await;
    pass(&engine, &Shard::default(), None).await;
    assert!(stale.lock().unwrap().is_some());
    s3.client()
        .delete_object()
        .bucket(bucket)
        .key("K")
        .send()
        .await
        .unwrap();
    pass(&engine, &Shard::default(), None).await
}

async fn set_versioning(s3: &Server, bucket: &str, status: BucketVersioningStatus) {
    s3.client()
        .put_bucket_versioning()
        .bucket(bucket)
        .versioning_configuration(VersioningConfiguration::builder().status(status).build())
        .send()
        .await
        .unwrap();
}

/// Under suspended versioning a DELETE replaces the `null` version with a
/// `null` delete marker: the version listed before is gone (`vanished`),
/// not an error because a marker of the same id is listed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_null_version_replaced_by_a_null_delete_marker_vanished() {
    let s3 = minio();
    let bucket = s3.bucket("ver-susp").await;
    s3.seed(&bucket, &BTreeMap::from([("K".to_string(), Seeded::default())]))
        .await;
    set_versioning(&s3, &bucket, BucketVersioningStatus::Suspended).await;
    let records = pass_with_k_deleted_after_its_listing(&s3, &bucket).await;
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(
        (records[0].key.as_str(), &records[0].status),
        ("K", &Status::Vanished),
        "{records:?}"
    );
}

/// The current `null` version listed, then the key deleted (a delete
/// marker on top): the version is still there, by id, and is read so,
/// not called an error because the HEAD of the current one found nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_null_version_no_longer_current_is_read_by_id() {
    let s3 = minio();
    let bucket = s3.bucket("ver-nulldel").await;
    let metadata = BTreeMap::from([("n".to_string(), "1".to_string())]);
    s3.seed(
        &bucket,
        &BTreeMap::from([(
            "K".to_string(),
            Seeded {
                size: 3,
                metadata: metadata.clone(),
            },
        )]),
    )
    .await;
    set_versioning(&s3, &bucket, BucketVersioningStatus::Enabled).await;
    let records = pass_with_k_deleted_after_its_listing(&s3, &bucket).await;
    assert_eq!(records.len(), 1, "{records:?}");
    let r = &records[0];
    assert_eq!(
        (r.key.as_str(), &r.status, r.size),
        ("K", &Status::Ok, 3),
        "{r:?}"
    );
    assert_eq!(r.columns.version_id.as_deref(), Some("null"), "{r:?}");
    assert_eq!(r.metadata, metadata, "{r:?}");
}

const SIGSTOP: i32 = 19;
const SIGCONT: i32 = 18;

extern "C" {
    #[link_name = "kill"]
    fn libc_kill(pid: i32, sig: i32) -> i32;
}

/// A `null` version's id is reused: under suspended versioning a PUT or a
/// DELETE of the key replaces its `null` version with a new current `null`
/// entry on top. K lists [v3, null]; a pass resumed after that `null` (v3
/// written before it) must not find the new `null` on top and list v3
/// again: the entry it resumes after is gone, and the pass says so.
async fn a_pass_resumed_after_a_null_version_replaced_since_fails(replace: Op) {
    let s3 = minio();
    let bucket = s3.bucket("ver-nullre").await;
    put(&s3, &bucket, "K", b"first").await;
    set_versioning(&s3, &bucket, BucketVersioningStatus::Enabled).await;
    let v3 = put(&s3, &bucket, "K", b"v3").await.expect("a version id");
    set_versioning(&s3, &bucket, BucketVersioningStatus::Suspended).await;
    let client = s3.s3().await;
    let engine = engine(&client, &bucket, 2);
    let whole = pass(&engine, &Shard::default(), None).await;
    let ids: Vec<_> = whole
        .iter()
        .map(|r| r.columns.version_id.clone().unwrap())
        .collect();
    assert_eq!(ids, [v3.as_str(), "null"], "{whole:?}");
    let resume_at = null_resume_point(&whole[1]);
    // Unchanged, the point is found: nothing after it.
    let (records, ended) = try_pass(
        &engine,
        &Shard::default().resumed_after("K"),
        Some(resume_at.clone()),
    )
    .await;
    assert!(records.is_empty() && ended.is_ok(), "{records:?} {ended:?}");
    // LastModified tells the new `null` from the old one (same body: same ETag).
    tokio::time::sleep(Duration::from_millis(1100)).await;
    match replace {
        Op::Put(_) => {
            put(&s3, &bucket, "K", b"first").await;
        }
        _ => {
            s3.client()
                .delete_object()
                .bucket(&bucket)
                .key("K")
                .send()
                .await
                .unwrap();
        }
    }
    assert_resume_gone(&engine, resume_at, "null").await;
}

/// A pass resumed after `point` of `K` lists nothing (no version again)
/// and fails with that version gone.
async fn assert_resume_gone(engine: &Arc<Engine>, point: String, version: &str) {
    let (records, ended) = try_pass(engine, &Shard::default().resumed_after("K"), Some(point)).await;
    assert!(records.is_empty(), "listed again: {records:?}");
    match ended {
        Err(bucketscan_core::s3::S3Error::ResumeVersionGone { key, version_id }) => {
            assert_eq!((key.as_str(), version_id.as_str()), ("K", version));
        }
        other => panic!("the pass should fail with the version gone: {other:?}"),
    }
}

/// PUT `body` at `key`: the version id the store gave it, if any.
async fn put(s3: &Server, bucket: &str, key: &str, body: &'static [u8]) -> Option<String> {
    let put = s3
        .client()
        .put_object()
        .bucket(bucket)
        .key(key)
        .body(ByteStream::from_static(body))
        .send()
        .await
        .unwrap_or_else(|e| panic!("put {key}: {e:?}"));
    put.version_id().map(str::to_string)
}

/// Where a pass resumes after `record`, as the engine and a fleet's
/// checkpoint name it.
fn null_resume_point(record: &Record) -> String {
    record.resume_version().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pass_resumed_after_a_null_version_overwritten_since_fails() {
    a_pass_resumed_after_a_null_version_replaced_since_fails(Op::Put(0)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pass_resumed_after_a_null_version_deleted_since_fails() {
    a_pass_resumed_after_a_null_version_replaced_since_fails(Op::Delete).await;
}

/// A pass resumed after the current `null` version (versioning suspended
/// over an older version) lists exactly the versions below it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pass_resumed_after_a_current_null_version_gives_the_older_ones() {
    let s3 = minio();
    let bucket = versioned_bucket(&s3, "ver-nulltop").await;
    let v1 = put(&s3, &bucket, "K", b"v1").await.expect("a version id");
    set_versioning(&s3, &bucket, BucketVersioningStatus::Suspended).await;
    put(&s3, &bucket, "K", b"null").await;
    put(&s3, &bucket, "L", b"other").await;
    let client = s3.s3().await;
    let engine = engine(&client, &bucket, 2);
    let whole = pass(&engine, &Shard::default(), None).await;
    let ids: Vec<_> = whole
        .iter()
        .map(|r| (r.key.as_str(), r.columns.version_id.as_deref().unwrap()))
        .collect();
    assert_eq!(
        ids,
        [("K", "null"), ("K", v1.as_str()), ("L", "null")],
        "{whole:?}"
    );
    let rest = pass(
        &engine,
        &Shard::default().resumed_after("K"),
        Some(null_resume_point(&whole[0])),
    )
    .await;
    assert_eq!(rest, whole[1..], "resumed after K's null");
}
