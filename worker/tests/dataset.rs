//! Result formats and the dataset layout through plan, run and merge against
//! real servers (Redis, MinIO which enforces S3's 5 MiB part minimum and
//! 10,000 parts per upload, versitygw), read back with DuckDB through
//! scripts/read-dataset.py: an engine no one here wrote must see exactly the
//! seeded bucket.

mod common;
#[path = "common/fault_proxy.rs"]
mod fault_proxy;

use bucketscan_core::fleet::merge::Manifest;
use common::*;
use std::collections::BTreeMap;
use std::process::{Command, Output};
use std::time::Duration;

fn redis_url() -> String {
    std::env::var("BUCKETSCAN_TEST_REDIS_URL").expect("run the tests with scripts/with-test-servers.sh")
}

struct Scan {
    s3: Server,
    redis: String,
    scan: String,
}

impl Scan {
    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(worker_bin());
        cmd.args(args)
            .args(["--redis", &self.redis, "--scan", &self.scan])
            .args(["--endpoint", &self.s3.endpoint, "--path-style"])
            .env("AWS_ACCESS_KEY_ID", &self.s3.access_key)
            .env("AWS_SECRET_ACCESS_KEY", &self.s3.secret_key)
            .env("AWS_REGION", "us-east-1")
            .env("AWS_EC2_METADATA_DISABLED", "true")
            .env("BUCKETSCAN_LOG", "warn");
        cmd
    }

    fn run_ok(&self, args: &[&str]) -> Output {
        let out = self.command(args).output().unwrap();
        assert_success(&out);
        out
    }

    /// `workers` processes of `run` until the queue is empty.
    fn run_workers(&self, workers: usize, part_objects: &str) {
        let mut children: Vec<_> = (0..workers)
            .map(|i| {
                let log = std::fs::File::create(temp_path(&format!("{}-{i}.log", self.scan))).unwrap();
                self.command(&["run", "--name", &format!("w{i}"), "--part-objects", part_objects])
                    .stderr(log)
                    .spawn()
                    .unwrap()
            })
            .collect();
        for child in &mut children {
            assert!(wait_exit(child, Duration::from_secs(600)).success());
        }
    }
}

fn s3_key(location: &str, bucket: &str) -> String {
    location
        .strip_prefix(&format!("s3://{bucket}/"))
        .unwrap_or_else(|| panic!("{location} is not in {bucket}"))
        .to_string()
}

/// What DuckDB read from the files.
#[derive(serde::Deserialize)]
struct Read {
    records: BTreeMap<String, ReadRecord>,
    rows: usize,
    per_file: BTreeMap<String, u64>,
    columns: Vec<String>,
    /// Parquet only: each column's Arrow type as pyarrow reads it.
    #[serde(default)]
    types: BTreeMap<String, String>,
}

#[derive(serde::Deserialize)]
struct ReadRecord {
    size: u64,
    status: String,
    user_metadata: BTreeMap<String, String>,
}

/// Download the manifest's files and read them with DuckDB.
async fn read_with_duckdb(
    s3: &Server,
    bucket: &str,
    manifest: &Manifest,
    format: &str,
) -> (Read, Vec<String>) {
    let dir = temp_path(&format!("dataset-{}", manifest.scan));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut paths = Vec::new();
    for file in &manifest.files {
        let key = s3_key(&file.location, bucket);
        let body = s3.read(bucket, &key).await;
        assert_eq!(body.len() as u64, file.bytes, "{key}: manifest bytes");
        let path = dir.join(key.rsplit('/').next().unwrap());
        std::fs::write(&path, body).unwrap();
        paths.push(path.to_string_lossy().into_owned());
    }
    (read_files(format, &paths), paths)
}

/// Read local files with DuckDB (and pyarrow, for Parquet's schema).
fn read_files(format: &str, paths: &[String]) -> Read {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/read-dataset.py");
    let out = Command::new(venv_python())
        .arg(script)
        .arg(format)
        .args(paths)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "read-dataset.py: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn assert_read_matches_seed(read: &Read, seeded: &BTreeMap<String, Seeded>) {
    assert_eq!(read.rows, seeded.len(), "rows");
    assert_eq!(
        read.records.keys().collect::<Vec<_>>(),
        seeded.keys().collect::<Vec<_>>()
    );
    for (key, seed) in seeded {
        let got = &read.records[key];
        assert_eq!(
            (got.size, got.status.as_str()),
            (seed.size as u64, "ok"),
            "{key:?}"
        );
        assert_eq!(got.user_metadata, seed.metadata, "{key:?}");
    }
}

/// Files in key order, ranges not overlapping, counts and ETags as S3 has them.
async fn assert_manifest_describes_files(
    s3: &Server,
    bucket: &str,
    manifest: &Manifest,
    read: &Read,
    paths: &[String],
) {
    let client = s3.client();
    let mut previous_last: Option<&String> = None;
    for (file, path) in manifest.files.iter().zip(paths) {
        let (first, last) = (file.first_key.as_ref().unwrap(), file.last_key.as_ref().unwrap());
        assert!(first <= last);
        if let Some(prev) = previous_last {
            assert!(prev < first, "files overlap: {prev:?} then {first:?}");
        }
        previous_last = Some(last);
        assert_eq!(read.per_file[path], file.records, "{path}: records");
        let in_range = read.records.keys().filter(|k| *k >= first && *k <= last).count() as u64;
        assert_eq!(in_range, file.records, "{path}: only its key range");
        let head = client
            .head_object()
            .bucket(bucket)
            .key(s3_key(&file.location, bucket))
            .send()
            .await
            .unwrap();
        assert_eq!(head.e_tag(), file.etag.as_deref(), "{path}: ETag");
    }
    assert_eq!(manifest.records, read.rows as u64);
}

async fn redis_connection() -> redis::aio::MultiplexedConnection {
    let client = redis::Client::open(redis_url()).unwrap();
    client.get_multiplexed_async_connection().await.unwrap()
}

/// Parts the workers recorded (each writes its stats once; nothing crashed).
async fn part_stats_count(scan: &Scan) -> u64 {
    let key = format!("bs:{{{}}}:partstats", scan.scan);
    let mut redis = redis_connection().await;
    redis::cmd("HLEN")
        .arg(&key)
        .query_async(&mut redis)
        .await
        .unwrap()
}

/// Keys a CSV or JSON reader gets wrong when quoting is wrong.
fn odd_keys() -> Vec<String> {
    [
        "a,b",
        "q\"uote\"",
        "sp ace",
        "ünï/cødé 💥",
        "tab\there",
        "semi;colon",
        "'single'",
    ]
    .iter()
    .map(|k| k.to_string())
    .collect()
}

/// More than 10,000 worker parts (`--part-objects 1`) merged into a CSV
/// dataset of 5 MiB files on MinIO, which refuses parts under 5 MiB and part
/// numbers over 10,000: every object exactly once, read back by DuckDB.
/// Then a second merge changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_10000_parts_merge_into_a_csv_dataset_that_duckdb_reads_exactly() {
    let s3 = minio();
    let bucket = s3.bucket("csv").await;
    let out = s3.bucket("csv-out").await;
    // ~700 bytes of metadata per object: 10,300 records make ~9 MiB of CSV,
    // so two 5 MiB files at least.
    let mut seeded: BTreeMap<String, Seeded> = (0..10_300)
        .map(|i| {
            let metadata = BTreeMap::from([
                ("owner".to_string(), format!("team-{}", i % 7)),
                ("note".to_string(), format!("{i:0>680}")),
            ]);
            (
                format!("d{}/{i:06}", i % 3),
                Seeded {
                    size: i % 5,
                    metadata,
                },
            )
        })
        .collect();
    for key in odd_keys() {
        let metadata = BTreeMap::from([("q".to_string(), "va,l\"ue".to_string())]);
        seeded.insert(key, Seeded { size: 1, metadata });
    }
    let started = std::time::Instant::now();
    s3.seed(&bucket, &seeded).await;
    eprintln!("seed: {:?}", started.elapsed());
    let scan = Scan {
        s3: s3.clone(),
        redis: redis_url(),
        scan: format!("csv-{bucket}"),
    };
    scan.run_ok(&[
        "plan",
        "--bucket",
        &bucket,
        "--output",
        &format!("s3://{out}/r/"),
        "--format",
        "csv",
        "--layout",
        "dataset",
        "--file-size",
        "5242880",
        "--target-shards",
        "8",
        "--min-shard-objects",
        "1",
    ]);
    let started = std::time::Instant::now();
    scan.run_workers(4, "1");
    eprintln!("run: {:?}", started.elapsed());
    let parts = part_stats_count(&scan).await;
    assert!(parts > 10_000, "{parts} parts");
    let started = std::time::Instant::now();
    let merged = scan.run_ok(&["merge"]);
    eprintln!("merge of {parts} parts: {:?}", started.elapsed());
    let manifest: Manifest = serde_json::from_slice(&s3.read(&out, "r/manifest.json").await).unwrap();
    assert!(manifest.files.len() >= 2, "{}", stderr(&merged));
    assert_eq!(manifest.result, format!("s3://{out}/r/data/"));
    for (n, file) in manifest.files.iter().enumerate() {
        assert_eq!(file.location, format!("s3://{out}/r/data/part-00000-{n:04}.csv"));
        assert!(file.bytes <= 5 << 20, "file {n} is {} bytes", file.bytes);
    }
    let (read, paths) = read_with_duckdb(&s3, &out, &manifest, "csv").await;
    assert_eq!(read.columns[..3], ["bucket", "key", "status"]);
    assert_read_matches_seed(&read, &seeded);
    assert_manifest_describes_files(&s3, &out, &manifest, &read, &paths).await;
    assert_eq!(s3.key_count(&out, "r/parts/").await, 0, "parts are removed");

    scan.run_ok(&["merge"]);
    let again: Manifest = serde_json::from_slice(&s3.read(&out, "r/manifest.json").await).unwrap();
    assert_eq!(again.files, manifest.files, "a second merge changes nothing");
}

/// A merge rerun after one that died midway (stale and partial files under
/// `data/`) and after Redis lost the parts' stats (the merge reads those
/// parts instead) writes exactly the result of an undisturbed merge: gzip
/// JSONL dataset on versitygw.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_merge_rerun_after_dying_midway_and_losing_part_stats_is_exact() {
    let s3 = versitygw();
    let bucket = s3.bucket("rerun").await;
    let out = s3.bucket("rerun-out").await;
    let mut seeded: BTreeMap<String, Seeded> = (0..3_000)
        .map(|i| {
            let metadata = BTreeMap::from([("n".to_string(), i.to_string())]);
            (format!("k/{i:05}"), Seeded { size: 2, metadata })
        })
        .collect();
    for key in odd_keys() {
        seeded.insert(key, Seeded::default());
    }
    s3.seed(&bucket, &seeded).await;
    let scan = Scan {
        s3: s3.clone(),
        redis: redis_url(),
        scan: format!("rerun-{bucket}"),
    };
    scan.run_ok(&[
        "plan",
        "--bucket",
        &bucket,
        "--output",
        &format!("s3://{out}/"),
        "--gzip",
        "--layout",
        "dataset",
        "--target-shards",
        "4",
        "--min-shard-objects",
        "1",
    ]);
    scan.run_workers(2, "100");
    // What a merge that died midway leaves: its intent (it meant to write
    // 8 files), a partial file and one that a bigger plan would have had;
    // and files named as releases before one dataset shape named them (a
    // merge that died under such a release, run again after an upgrade).
    let client = s3.client();
    let intent = format!("parts/{}/merge.json", scan.scan);
    for (key, body) in [
        (intent.as_str(), &b"{\"data_files\":8}"[..]),
        ("data/part-00000-0000.jsonl.gz", b"partial"),
        ("data/part-00000-0007.jsonl.gz", b"partial"),
        ("data/000000.jsonl.gz", b"partial"),
        ("data/000003.jsonl.gz", b"partial"),
    ] {
        client
            .put_object()
            .bucket(&out)
            .key(key)
            .body(body.to_vec().into())
            .send()
            .await
            .unwrap();
    }
    let mut redis = redis::Client::open(redis_url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let stats_key = format!("bs:{{{}}}:partstats", scan.scan);
    let stats: u64 = redis::cmd("HLEN")
        .arg(&stats_key)
        .query_async(&mut redis)
        .await
        .unwrap();
    assert!(stats >= 30, "workers recorded the stats of their parts ({stats})");
    redis::cmd("DEL")
        .arg(&stats_key)
        .query_async::<()>(&mut redis)
        .await
        .unwrap();

    scan.run_ok(&["merge"]);
    let manifest: Manifest = serde_json::from_slice(&s3.read(&out, "manifest.json").await).unwrap();
    assert_eq!(manifest.files.len(), 1);
    assert_eq!(
        s3.keys(&out, "data/").await,
        ["data/part-00000-0000.jsonl.gz"],
        "the stale files are gone, those of earlier releases too"
    );
    let (read, paths) = read_with_duckdb(&s3, &out, &manifest, "jsonl").await;
    assert_read_matches_seed(&read, &seeded);
    assert_manifest_describes_files(&s3, &out, &manifest, &read, &paths).await;
}

/// The Parquet schema as pyarrow reads it: S3 Metadata tables' column names,
/// a UTC millisecond timestamp, int64 sizes and a map of strings.
fn assert_parquet_schema(read: &Read) {
    let names: Vec<&str> = read.types.keys().map(String::as_str).collect();
    let mut expected = bucketscan_core::scan::parquet::COLUMNS.to_vec();
    expected.sort();
    assert_eq!(names, expected);
    assert_eq!(read.types["last_modified_date"], "timestamp[ms, tz=UTC]");
    assert_eq!(read.types["size"], "int64");
    assert!(
        read.types["user_metadata"].starts_with("map<string, string"),
        "{}",
        read.types["user_metadata"]
    );
    assert_eq!(read.types["key"], "string");
    assert_eq!(read.types["http_status"], "int32");
}

/// A deterministic string of `n` base-36 digits that zstd cannot shrink
/// much (~5 bits a character, so a few thousand objects make parts of
/// megabytes).
fn noise(seed: u64, n: usize) -> String {
    let mut x = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            char::from_digit(((x >> 32) % 36) as u32, 36).unwrap()
        })
        .collect()
}

/// Keys in order with parts of 2,800 objects: two parts of objects with
/// ~1.9 KB of metadata each (about 3.4 MB of Parquet, past the 2.5 MiB that
/// makes a part a file of its own at 5 MiB files) are copied on the server;
/// the small parts after them (objects without metadata or with several
/// entries, odd keys) are read and joined into one file. DuckDB reads the
/// dataset (`read_parquet` over the files) exactly; pyarrow checks the schema.
/// On versitygw (no part here needs MinIO's limits).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parquet_dataset_of_copied_and_joined_parts_reads_exactly_in_duckdb() {
    let s3 = versitygw();
    let bucket = s3.bucket("pq").await;
    let out = s3.bucket("pq-out").await;
    let mut seeded: BTreeMap<String, Seeded> = (0..5_600u64)
        .map(|i| {
            let metadata = BTreeMap::from([
                ("blob".to_string(), noise(i, 1_900)),
                ("n".to_string(), i.to_string()),
            ]);
            (
                format!("big/{i:05}"),
                Seeded {
                    size: (i % 9) as usize,
                    metadata,
                },
            )
        })
        .collect();
    for i in 0..3_000u64 {
        let metadata: BTreeMap<String, String> = (0..i % 4)
            .map(|m| (format!("m{m}"), format!("v,\"{m}\" ü {i}")))
            .collect();
        seeded.insert(format!("small/{i:05}"), Seeded { size: 1, metadata });
    }
    for key in odd_keys() {
        let metadata = BTreeMap::from([("q".to_string(), "va,l\"ue ü".to_string())]);
        seeded.insert(key, Seeded { size: 3, metadata });
    }
    let started = std::time::Instant::now();
    s3.seed(&bucket, &seeded).await;
    eprintln!("seed: {:?}", started.elapsed());
    let scan = Scan {
        s3: s3.clone(),
        redis: redis_url(),
        scan: format!("pq-{bucket}"),
    };
    scan.run_ok(&[
        "plan",
        "--bucket",
        &bucket,
        "--output",
        &format!("s3://{out}/r/"),
        "--format",
        "parquet",
        "--layout",
        "dataset",
        "--file-size",
        "5242880",
        "--target-shards",
        "1",
        "--delimiter",
        "",
    ]);
    // One worker, one shard: parts of 2,800 objects in key order.
    scan.run_workers(1, "2800");
    let client = s3.client();
    let listed = client
        .list_objects_v2()
        .bucket(&out)
        .prefix("r/parts/")
        .send()
        .await
        .unwrap();
    let parts: BTreeMap<String, (i64, String)> = listed
        .contents()
        .iter()
        .filter(|o| o.key().unwrap().ends_with(".parquet"))
        .map(|o| {
            let etag = o.e_tag().unwrap().to_string();
            (o.key().unwrap().to_string(), (o.size().unwrap(), etag))
        })
        .collect();
    eprintln!("parts: {parts:?}");
    let started = std::time::Instant::now();
    scan.run_ok(&["merge"]);
    eprintln!("merge of {} parts: {:?}", parts.len(), started.elapsed());
    let manifest: Manifest = serde_json::from_slice(&s3.read(&out, "r/manifest.json").await).unwrap();
    assert_eq!(manifest.result, format!("s3://{out}/r/data/"));
    let part_etags: Vec<&String> = parts.values().map(|(_, e)| e).collect();
    let copied = manifest
        .files
        .iter()
        .filter(|f| part_etags.contains(&f.etag.as_ref().unwrap()))
        .count();
    assert!(
        copied >= 2,
        "the big parts are copied whole: {:?} {parts:?}",
        manifest.files
    );
    assert!(
        copied < manifest.files.len(),
        "the small parts are joined: {:?}",
        manifest.files
    );
    for (n, file) in manifest.files.iter().enumerate() {
        assert_eq!(
            file.location,
            format!("s3://{out}/r/data/part-00000-{n:04}.parquet")
        );
        assert!(file.bytes <= 5 << 20, "file {n} is {} bytes", file.bytes);
    }
    let (read, paths) = read_with_duckdb(&s3, &out, &manifest, "parquet").await;
    assert_parquet_schema(&read);
    assert_read_matches_seed(&read, &seeded);
    assert_manifest_describes_files(&s3, &out, &manifest, &read, &paths).await;
    assert_eq!(s3.key_count(&out, "r/parts/").await, 0, "parts are removed");

    scan.run_ok(&["merge"]);
    let again: Manifest = serde_json::from_slice(&s3.read(&out, "r/manifest.json").await).unwrap();
    assert_eq!(again.files, manifest.files, "a second merge changes nothing");
}

/// `scan --format parquet` in one process writes one Parquet file to a
/// local file, to S3 and to stdout (the writer only appends); DuckDB reads
/// each exactly, pyarrow sees the schema. The single layout through the
/// merge joins every part into `result.parquet` the same way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scan_and_single_merge_write_one_parquet_file_that_duckdb_reads_exactly() {
    let s3 = versitygw();
    let bucket = s3.bucket("pq1").await;
    let out = s3.bucket("pq1-out").await;
    let mut seeded: BTreeMap<String, Seeded> = (0..600)
        .map(|i| {
            let metadata = (0..i % 3)
                .map(|m| (format!("k{m}"), format!("{i}-{m}")))
                .collect();
            (format!("p{}/{i:04}", i % 4), Seeded { size: i, metadata })
        })
        .collect();
    for key in odd_keys() {
        seeded.insert(key, Seeded::default());
    }
    s3.seed(&bucket, &seeded).await;
    let dir = temp_path(&format!("scan-{bucket}"));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("local.parquet");
    let scan = [
        "scan",
        "--bucket",
        &bucket,
        "--format",
        "parquet",
        "--target-shards",
        "4",
        "--quiet",
    ];
    assert_success(&s3.worker(&[&scan[..], &["-o", file.to_str().unwrap()]].concat()));
    let to_s3 = format!("s3://{out}/one.parquet");
    assert_success(&s3.worker(&[&scan[..], &["-o", &to_s3]].concat()));
    let from_s3 = dir.join("s3.parquet");
    std::fs::write(&from_s3, s3.read(&out, "one.parquet").await).unwrap();
    let stdout = s3.worker(&[&scan[..], &["-o", "-"]].concat());
    assert_success(&stdout);
    let piped = dir.join("stdout.parquet");
    std::fs::write(&piped, &stdout.stdout).unwrap();
    for path in [&file, &from_s3, &piped] {
        let read = read_files("parquet", &[path.to_string_lossy().into_owned()]);
        assert_parquet_schema(&read);
        assert_read_matches_seed(&read, &seeded);
    }

    let scan = Scan {
        s3: s3.clone(),
        redis: redis_url(),
        scan: format!("pq1-{bucket}"),
    };
    let plan = [
        "plan",
        "--bucket",
        &bucket,
        "--format",
        "parquet",
        "--target-shards",
        "4",
    ];
    scan.run_ok(
        &[
            &plan[..],
            &["--output", &format!("s3://{out}/m/"), "--min-shard-objects", "1"],
        ]
        .concat(),
    );
    scan.run_workers(2, "100");
    scan.run_ok(&["merge"]);
    let manifest: Manifest = serde_json::from_slice(&s3.read(&out, "m/manifest.json").await).unwrap();
    assert_eq!(manifest.result, format!("s3://{out}/m/result.parquet"));
    assert_eq!(manifest.files.len(), 1);
    let (read, paths) = read_with_duckdb(&s3, &out, &manifest, "parquet").await;
    assert_parquet_schema(&read);
    assert_read_matches_seed(&read, &seeded);
    assert_manifest_describes_files(&s3, &out, &manifest, &read, &paths).await;
}

/// `scan --layout dataset`: every shard writes its own files in key order,
/// a new one past --file-size; the manifest lists each with its key range,
/// records, bytes and SHA-256, and DuckDB reads exactly the seeded bucket
/// from them, to S3 (CSV, one shard rolled over several files) and to a
/// local directory (Parquet, several shards).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scan_writes_datasets_that_duckdb_reads_exactly() {
    let s3 = versitygw();
    let bucket = s3.bucket("sds").await;
    let out = s3.bucket("sds-out").await;
    // About 2 KB of metadata an object: 3,000 of them make 6 MB of CSV, more
    // than one file of the smallest size (5 MiB).
    let seeded: BTreeMap<String, Seeded> = (0..3000)
        .map(|i| {
            let metadata = BTreeMap::from([("pad".to_string(), format!("{i:05}{}", "x".repeat(1900)))]);
            (
                format!("s{}/{i:05}", i % 3),
                Seeded {
                    size: i % 11,
                    metadata,
                },
            )
        })
        .collect();
    s3.seed(&bucket, &seeded).await;
    let five_mib = (5 * 1024 * 1024).to_string();
    let scan = |layout_args: &[&str]| {
        let args = [
            &["scan", "--bucket", &bucket, "--quiet", "--layout", "dataset"][..],
            layout_args,
        ]
        .concat();
        let out = s3.worker(&args);
        assert_success(&out);
        out
    };

    // CSV to S3, one shard: its records roll over into a second file.
    let to_s3 = format!("s3://{out}/csv");
    scan(&[
        "--format",
        "csv",
        "--target-shards",
        "1",
        "--file-size",
        &five_mib,
        "-o",
        &to_s3,
    ]);
    let manifest: serde_json::Value =
        serde_json::from_slice(&s3.read(&out, "csv/manifest.json").await).unwrap();
    assert_eq!(manifest["result"], format!("s3://{out}/csv/data/"));
    assert_eq!(
        (
            manifest["records"].as_u64(),
            manifest["counts"]["with_metadata"].as_u64()
        ),
        (Some(3000), Some(3000))
    );
    let files = manifest["files"].as_array().unwrap();
    assert!(files.len() >= 2, "one shard of 6 MB rolls over: {manifest}");
    let dir = temp_path(&format!("sds-{bucket}"));
    std::fs::create_dir_all(&dir).unwrap();
    let mut paths = Vec::new();
    for file in files {
        let key = s3_key(file["location"].as_str().unwrap(), &out);
        assert!(
            key.starts_with("csv/data/part-00000-") && key.ends_with(".csv"),
            "{key}"
        );
        let body = s3.read(&out, &key).await;
        assert_eq!(body.len() as u64, file["bytes"].as_u64().unwrap(), "{key}");
        assert!(
            body.len() < 5 * 1024 * 1024 + 4096,
            "{key}: at most a record past the file size"
        );
        let path = dir.join(key.rsplit('/').next().unwrap());
        std::fs::write(&path, body).unwrap();
        assert_eq!(sha256_of(&path), file["sha256"].as_str().unwrap(), "{key}");
        paths.push(path.to_string_lossy().into_owned());
    }
    assert_files_in_key_order(files);
    let read = read_files("csv", &paths);
    assert_read_matches_seed(&read, &seeded);

    // Parquet to a local directory, several shards: one file each, in key order.
    let local = dir.join("local");
    scan(&[
        "--format",
        "parquet",
        "--target-shards",
        "3",
        "-o",
        local.to_str().unwrap(),
    ]);
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(local.join("manifest.json")).unwrap()).unwrap();
    let files = manifest["files"].as_array().unwrap();
    assert!(files.len() >= 2, "{manifest}");
    assert_files_in_key_order(files);
    let paths: Vec<String> = files
        .iter()
        .map(|f| f["location"].as_str().unwrap().to_string())
        .collect();
    for (file, path) in files.iter().zip(&paths) {
        assert_eq!(
            sha256_of(std::path::Path::new(path)),
            file["sha256"].as_str().unwrap()
        );
    }
    let read = read_files("parquet", &paths);
    assert_parquet_schema(&read);
    assert_read_matches_seed(&read, &seeded);

    // No dataset on stdout: said before anything is read.
    let refused = s3.worker(&["scan", "--bucket", &bucket, "--layout", "dataset", "-o", "-"]);
    assert!(!refused.status.success());
    assert!(stderr(&refused).contains("not stdout"), "{}", stderr(&refused));
}

/// Each file's keys come after the previous file's.
fn assert_files_in_key_order(files: &[serde_json::Value]) {
    for pair in files.windows(2) {
        let (last, first) = (
            pair[0]["last_key"].as_str().unwrap(),
            pair[1]["first_key"].as_str().unwrap(),
        );
        assert!(last < first, "{last:?} then {first:?}");
    }
}

fn sha256_of(path: &std::path::Path) -> String {
    let out = Command::new("sha256sum").arg(path).output().unwrap();
    assert!(out.status.success());
    String::from_utf8(out.stdout)
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .to_string()
}

/// Parts of 5 MiB and more are copied on the server, never read through the
/// merger: on MinIO (which refuses a non-last part under 5 MiB, shown
/// first), a scan of ~12 MB in parts of ~6 MB is merged through a recording
/// proxy; every part became an UploadPartCopy and no part was downloaded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parts_of_5_mib_and_more_are_copied_on_the_server_not_read() {
    let s3 = minio();
    let bucket = s3.bucket("copy").await;
    let out = s3.bucket("copy-out").await;
    assert_minio_refuses_small_parts(&s3, &out).await;
    let seeded: BTreeMap<String, Seeded> = (0..6000)
        .map(|i| {
            let metadata = BTreeMap::from([("pad".to_string(), format!("{i:05}{}", "y".repeat(1950)))]);
            (
                format!("c/{i:05}"),
                Seeded {
                    size: i % 3,
                    metadata,
                },
            )
        })
        .collect();
    s3.seed(&bucket, &seeded).await;
    let scan = Scan {
        s3: s3.clone(),
        redis: redis_url(),
        scan: format!("copy-{bucket}"),
    };
    scan.run_ok(&[
        "plan",
        "--bucket",
        &bucket,
        "--output",
        &format!("s3://{out}/r/"),
        "--target-shards",
        "1",
    ]);
    scan.run_workers(1, "3000");
    let parts = part_stats_count(&scan).await;
    assert_eq!(parts, 2, "two parts of ~6 MB");

    let proxy = fault_proxy::start(s3.endpoint.clone(), |_| None, |_, _| {}).await;
    let through_proxy = Scan {
        s3: Server {
            endpoint: proxy.url.clone(),
            ..s3.clone()
        },
        redis: redis_url(),
        scan: scan.scan.clone(),
    };
    through_proxy.run_ok(&["merge"]);
    let seen = proxy.requests();
    let downloads: Vec<_> = seen
        .iter()
        // The store check is recorded among the parts; the merge reads it.
        .filter(|r| {
            r.method == "GET" && r.target.contains("/r/parts/") && !r.target.contains("/store-check.json")
        })
        .collect();
    assert!(
        downloads.is_empty(),
        "parts read through the merger: {downloads:?}"
    );
    let copies = seen
        .iter()
        .filter(|r| r.method == "PUT" && r.copy_source.as_deref().is_some_and(|c| c.contains("/r/parts/")))
        .count();
    assert_eq!(copies, 2, "each part one UploadPartCopy: {seen:?}");
    assert_matches_seed(&parse_records(&s3.read(&out, "r/result.jsonl").await), &seeded);
}

/// MinIO enforces S3's 5 MiB minimum for every part but the last, so a test
/// on it would fail if the merge sent smaller ones.
async fn assert_minio_refuses_small_parts(s3: &Server, bucket: &str) {
    let client = s3.client();
    let key = "small-parts";
    let upload = client
        .create_multipart_upload()
        .bucket(bucket)
        .key(key)
        .send()
        .await
        .unwrap();
    let id = upload.upload_id().unwrap();
    let mut done = Vec::new();
    for n in 1..=2 {
        let part = client
            .upload_part()
            .bucket(bucket)
            .key(key)
            .upload_id(id)
            .part_number(n)
            .body(vec![b'x'; 1024 * 1024].into())
            .send()
            .await
            .unwrap();
        done.push(
            aws_sdk_s3::types::CompletedPart::builder()
                .part_number(n)
                .e_tag(part.e_tag().unwrap())
                .build(),
        );
    }
    let refused = client
        .complete_multipart_upload()
        .bucket(bucket)
        .key(key)
        .upload_id(id)
        .multipart_upload(
            aws_sdk_s3::types::CompletedMultipartUpload::builder()
                .set_parts(Some(done))
                .build(),
        )
        .send()
        .await
        .expect_err("a 1 MiB first part must be refused");
    let text = format!("{refused:?}");
    assert!(text.contains("EntityTooSmall"), "{text}");
}

/// `scan --layout dataset` and a fleet (plan, two workers in small parts,
/// merge) over the same bucket write the same dataset: the same file names,
/// byte for byte the same files, and manifests that agree on every field
/// they share (`docs/results.md`, "One dataset shape"). Both name each
/// file's ETag as the store answers a HEAD; `scan`, which saw every byte,
/// adds its SHA-256. Some objects have metadata and some not, with
/// `--only-with-metadata`, so `objects` and `written` differ.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scan_and_a_fleet_write_the_same_dataset() {
    let s3 = versitygw();
    let bucket = s3.bucket("shape").await;
    let out = s3.bucket("shape-out").await;
    let mut seeded: BTreeMap<String, Seeded> = (0..400)
        .map(|i| {
            let metadata = match i % 3 {
                0 => BTreeMap::new(),
                _ => BTreeMap::from([("team".to_string(), format!("t{}", i % 5))]),
            };
            (
                format!("p{}/{i:04}", i % 4),
                Seeded {
                    size: i % 13,
                    metadata,
                },
            )
        })
        .collect();
    for key in odd_keys() {
        seeded.insert(key, Seeded::default());
    }
    s3.seed(&bucket, &seeded).await;
    let with_metadata = seeded.values().filter(|s| !s.metadata.is_empty()).count() as u64;
    for format in ["jsonl", "csv"] {
        let common = ["--format", format, "--layout", "dataset", "--only-with-metadata"];
        let cli_prefix = format!("cli-{format}/");
        assert_success(
            &s3.worker(
                &[
                    &["scan", "--bucket", &bucket, "--quiet", "--target-shards", "1"][..],
                    &common,
                    &["-o", &format!("s3://{out}/{cli_prefix}")],
                ]
                .concat(),
            ),
        );
        let fleet_prefix = format!("fleet-{format}/");
        let scan = Scan {
            s3: s3.clone(),
            redis: redis_url(),
            scan: format!("shape-{format}-{bucket}"),
        };
        scan.run_ok(
            &[
                &["plan", "--bucket", &bucket, "--target-shards", "4"][..],
                &[
                    "--min-shard-objects",
                    "1",
                    "--output",
                    &format!("s3://{out}/{fleet_prefix}"),
                ],
                &common,
            ]
            .concat(),
        );
        scan.run_workers(2, "30");
        scan.run_ok(&["merge"]);

        let names = |prefix: String| {
            let s3 = s3.clone();
            let out = out.clone();
            async move {
                let mut keys = s3.keys(&out, &format!("{prefix}data/")).await;
                keys.sort();
                keys.iter()
                    .map(|k| k.strip_prefix(&prefix).unwrap().to_string())
                    .collect::<Vec<_>>()
            }
        };
        let (cli_files, fleet_files) = (names(cli_prefix.clone()).await, names(fleet_prefix.clone()).await);
        assert_eq!(cli_files, [format!("data/part-00000-0000.{format}")], "{format}");
        assert_eq!(fleet_files, cli_files, "{format}: the same names");
        let (cli_body, fleet_body) = (
            s3.read(&out, &format!("{cli_prefix}{}", cli_files[0])).await,
            s3.read(&out, &format!("{fleet_prefix}{}", fleet_files[0])).await,
        );
        assert!(cli_body == fleet_body, "{format}: the same bytes");

        let manifest = |prefix: String| {
            let s3 = s3.clone();
            let out = out.clone();
            async move {
                serde_json::from_slice::<serde_json::Value>(
                    &s3.read(&out, &format!("{prefix}manifest.json")).await,
                )
                .unwrap()
            }
        };
        let (cli, fleet) = (
            manifest(cli_prefix.clone()).await,
            manifest(fleet_prefix.clone()).await,
        );
        for field in [
            "layout",
            "format",
            "gzip",
            "bucket",
            "prefix",
            "records",
            "result_bytes",
        ] {
            assert!(!cli[field].is_null(), "{format}: {field} in {cli}");
            assert_eq!(cli[field], fleet[field], "{format}: {field}");
        }
        for count in bucketscan_core::fleet::merge::RESULT_COUNTS {
            assert_eq!(
                cli["counts"][count], fleet["counts"][count],
                "{format}: counts.{count}"
            );
        }
        assert_eq!(
            (
                cli["counts"]["objects"].as_u64(),
                cli["counts"]["written"].as_u64()
            ),
            (Some(seeded.len() as u64), Some(with_metadata)),
            "{format}: {cli}"
        );
        let (cli_file, fleet_file) = (&cli["files"][0], &fleet["files"][0]);
        for field in ["first_key", "last_key", "records", "bytes"] {
            assert_eq!(cli_file[field], fleet_file[field], "{format}: files[0].{field}");
        }
        for (file, prefix) in [(cli_file, &cli_prefix), (fleet_file, &fleet_prefix)] {
            let head = s3
                .client()
                .head_object()
                .bucket(&out)
                .key(format!("{prefix}{}", cli_files[0]))
                .send()
                .await
                .unwrap();
            assert_eq!(file["etag"].as_str(), head.e_tag(), "{format} {prefix}: ETag");
        }
        let local = temp_path(&format!("shape-{format}-{bucket}"));
        std::fs::write(&local, &cli_body).unwrap();
        assert_eq!(cli_file["sha256"].as_str(), Some(sha256_of(&local).as_str()));
    }
}
