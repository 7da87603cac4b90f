//! The columns a HEAD or LIST answers (encryption, KMS key, checksum,
//! multipart, object lock, legal hold, version) on real servers: MinIO
//! (with its built-in KMS key, an object-lock bucket) and moto. Objects are
//! written with each feature through aws-sdk-s3; `scan` must give every
//! column in JSONL, CSV and Parquet alike, and a fleet's merged Parquet
//! dataset must hold them as DuckDB reads it.

mod common;

use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{
    CompletedMultipartUpload, CompletedPart, ObjectLockLegalHoldStatus, ObjectLockMode, ServerSideEncryption,
};
use bucketscan_core::scan::record::Record;
use common::*;
use std::collections::BTreeMap;

/// When the retention of the locked object ends (far enough to outlive
/// the test, which cannot delete it before).
const RETAIN_UNTIL: &str = "2031-01-02T03:04:05Z";
/// CRC32 and CRC32C of `hello`, base64.
const CRC32_HELLO: &str = "NhCmhg==";
const CRC32C_HELLO: &str = "mnG7TA==";

/// What each seeded object must show; `None`: the column is absent.
#[derive(Debug)]
struct Expected {
    key: &'static str,
    server_side_encryption: Option<&'static str>,
    kms_key: bool,
    /// Algorithm.
    checksum: Option<&'static str>,
    part_count: Option<u32>,
    lock_mode: Option<&'static str>,
    legal_hold: Option<bool>,
}

/// Seed one object of each kind into `bucket` (created with object lock
/// when `lock`), and say what each must show on this server.
async fn seed(s3: &Server, bucket: &str, kms_key: Option<&str>, lock: bool) -> Vec<Expected> {
    let c = s3.client();
    let put = |key: &str| {
        c.put_object()
            .bucket(bucket)
            .key(key)
            .body(ByteStream::from_static(b"hello"))
    };
    put("plain").send().await.unwrap();
    put("sse-s3")
        .server_side_encryption(ServerSideEncryption::Aes256)
        .send()
        .await
        .unwrap();
    if let Some(key) = kms_key {
        put("sse-kms")
            .server_side_encryption(ServerSideEncryption::AwsKms)
            .ssekms_key_id(key)
            .send()
            .await
            .unwrap();
    }
    // The value given as a header (MinIO stores it) and the algorithm
    // named (moto stores only a checksum it computes for the named one).
    put("checksum")
        .checksum_algorithm(aws_sdk_s3::types::ChecksumAlgorithm::Crc32C)
        .checksum_crc32_c(CRC32C_HELLO)
        .send()
        .await
        .unwrap_or_else(|e| panic!("PUT with a checksum: {e:?}"));
    // Two parts: 5 MiB (S3's smallest non-last part) and a small last one.
    let upload = c
        .create_multipart_upload()
        .bucket(bucket)
        .key("multipart")
        .send()
        .await
        .unwrap();
    let id = upload.upload_id().unwrap();
    let mut parts = Vec::new();
    for (n, body) in [(1, vec![b'a'; 5 << 20]), (2, b"tail".to_vec())] {
        let part = c
            .upload_part()
            .bucket(bucket)
            .key("multipart")
            .upload_id(id)
            .part_number(n)
            .body(ByteStream::from(body))
            .send()
            .await
            .unwrap();
        parts.push(
            CompletedPart::builder()
                .part_number(n)
                .e_tag(part.e_tag().unwrap())
                .build(),
        );
    }
    let completed = c
        .complete_multipart_upload()
        .bucket(bucket)
        .key("multipart")
        .upload_id(id)
        .multipart_upload(CompletedMultipartUpload::builder().set_parts(Some(parts)).build())
        .send()
        .await;
    // moto answers 200 with a root element the SDK refuses
    // (CompleteMultipartUploadResponse): the upload is complete all the same.
    if let Err(e) = completed {
        let status = e.raw_response().map(|r| r.status().as_u16());
        assert_eq!(status, Some(200), "complete the multipart upload: {e:?}");
    }
    if lock {
        let until = aws_sdk_s3::primitives::DateTime::from_str(
            RETAIN_UNTIL,
            aws_sdk_s3::primitives::DateTimeFormat::DateTime,
        )
        .unwrap();
        // moto wants Content-MD5 (or a checksum algorithm) with a retention.
        put("locked")
            .content_md5("XUFAKrxLKna5cZ2REBfFkg==")
            .checksum_algorithm(aws_sdk_s3::types::ChecksumAlgorithm::Crc32)
            .checksum_crc32(CRC32_HELLO)
            .object_lock_mode(ObjectLockMode::Governance)
            .object_lock_retain_until_date(until)
            .object_lock_legal_hold_status(ObjectLockLegalHoldStatus::On)
            .send()
            .await
            .unwrap_or_else(|e| panic!("PUT with object lock: {e:?}"));
    }
    let none = |key| Expected {
        key,
        server_side_encryption: None,
        kms_key: false,
        checksum: None,
        part_count: None,
        lock_mode: None,
        legal_hold: None,
    };
    let mut expected = vec![
        none("plain"),
        Expected {
            server_side_encryption: Some("AES256"),
            ..none("sse-s3")
        },
        Expected {
            checksum: Some("CRC32C"),
            ..none("checksum")
        },
        Expected {
            part_count: Some(2),
            ..none("multipart")
        },
    ];
    if kms_key.is_some() {
        expected.push(Expected {
            server_side_encryption: Some("aws:kms"),
            kms_key: true,
            ..none("sse-kms")
        });
    }
    if lock {
        expected.push(Expected {
            lock_mode: Some("GOVERNANCE"),
            legal_hold: Some(true),
            checksum: Some("CRC32"),
            ..none("locked")
        });
    }
    expected
}

async fn lock_bucket(s3: &Server, tag: &str) -> String {
    let name = format!("bs-{tag}-{}", std::process::id());
    s3.client()
        .create_bucket()
        .bucket(&name)
        .object_lock_enabled_for_bucket(true)
        .send()
        .await
        .unwrap_or_else(|e| panic!("create an object-lock bucket: {e:?}"));
    name
}

/// The columns of `records` against what was seeded. `checksums`: the scan
/// ran with `--checksums`, so checksums' values are there too (and their
/// algorithm, which without it only a store that lists it says: moto does,
/// as AWS; MinIO does not).
fn assert_columns(
    records: &BTreeMap<String, Record>,
    expected: &[Expected],
    checksums: bool,
    lists_checksums: bool,
    versioned: bool,
) {
    assert_eq!(records.len(), expected.len(), "{:?}", records.keys());
    for e in expected {
        let r = &records[e.key];
        let c = &r.columns;
        let what = format!("{}: {c:?}", e.key);
        assert_eq!(
            c.server_side_encryption.as_deref(),
            e.server_side_encryption,
            "{what}"
        );
        assert_eq!(
            c.kms_key_arn
                .as_ref()
                .is_some_and(|k| k.contains("bucketscan-key")),
            e.kms_key,
            "{what}"
        );
        assert_eq!(c.is_multipart, Some(e.part_count.is_some()), "{what}");
        assert_eq!(c.part_count, e.part_count, "{what}");
        assert_eq!(c.object_lock_mode.as_deref(), e.lock_mode, "{what}");
        assert_eq!(
            c.object_lock_retain_until_date.as_deref(),
            e.lock_mode.map(|_| RETAIN_UNTIL),
            "{what}"
        );
        assert_eq!(c.object_lock_legal_hold, e.legal_hold, "{what}");
        match e.checksum {
            Some(algorithm) => {
                let known = checksums || lists_checksums;
                assert_eq!(
                    c.checksum_algorithm.as_deref(),
                    known.then_some(algorithm),
                    "{what}"
                );
                assert_eq!(c.checksum.is_some(), checksums, "{what}");
            }
            None => assert_eq!((&c.checksum_algorithm, &c.checksum), (&None, &None), "{what}"),
        }
        assert_eq!(c.version_id.is_some(), versioned, "{what}");
        assert_eq!(
            (c.is_latest, c.is_delete_marker, &c.object_tags),
            (None, None, &None),
            "{what}"
        );
    }
}

/// `scan` of `bucket` in `format` to a file, its records read back.
fn scan_records(s3: &Server, bucket: &str, format: &str, extra: &[&str]) -> BTreeMap<String, Record> {
    let path = temp_path(&format!("columns-{bucket}.{format}"));
    let path_text = path.to_string_lossy().into_owned();
    let mut args = vec![
        "scan", "--bucket", bucket, "--format", format, "-o", &path_text, "--quiet",
    ];
    args.extend(extra);
    let out = s3.worker(&args);
    assert_success(&out);
    let body = std::fs::read(&path).unwrap();
    let records: Vec<Record> = match format {
        "jsonl" => parse_records(&body).into_values().collect(),
        "csv" => bucketscan_core::scan::format::parse_csv(&body)
            .unwrap()
            .into_iter()
            .skip(1)
            .map(|row| bucketscan_core::scan::format::parse_csv_record(&row).unwrap())
            .collect(),
        "parquet" => bucketscan_core::scan::parquet::read_records(bytes::Bytes::from(body))
            .unwrap()
            .flat_map(|batch| batch.unwrap())
            .collect(),
        other => panic!("format {other}"),
    };
    records.into_iter().map(|r| (r.key.clone(), r)).collect()
}

/// Every format holds the same columns, and they are what was seeded.
async fn every_format_holds_the_columns(
    s3: Server,
    kms_key: Option<&str>,
    lock: bool,
    lists_checksums: bool,
) {
    let bucket = if lock {
        lock_bucket(&s3, "cols").await
    } else {
        s3.bucket("cols").await
    };
    let expected = seed(&s3, &bucket, kms_key, lock).await;
    for checksums in [false, true] {
        let extra: &[&str] = if checksums { &["--checksums"] } else { &[] };
        let jsonl = scan_records(&s3, &bucket, "jsonl", extra);
        // The server stored each checksum (as the SDK's own HEAD says: moto
        // computes its own value, not CRC32C's), and the scan read it.
        for e in expected.iter().filter(|e| e.checksum.is_some()) {
            let head = s3
                .client()
                .head_object()
                .bucket(&bucket)
                .key(e.key)
                .checksum_mode(aws_sdk_s3::types::ChecksumMode::Enabled)
                .send()
                .await
                .unwrap();
            let stored = head.checksum_crc32().or(head.checksum_crc32_c());
            assert!(stored.is_some(), "{}: the server kept no checksum", e.key);
            if checksums {
                assert_eq!(jsonl[e.key].columns.checksum.as_deref(), stored, "{}", e.key);
            }
        }
        assert_columns(&jsonl, &expected, checksums, lists_checksums, lock);
        for format in ["csv", "parquet"] {
            let other = scan_records(&s3, &bucket, format, extra);
            assert_eq!(other, jsonl, "{format} holds what JSONL holds");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn minio_objects_show_encryption_checksum_multipart_and_lock_columns() {
    every_format_holds_the_columns(minio(), Some("bucketscan-key"), true, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn moto_objects_show_encryption_checksum_multipart_and_lock_columns() {
    every_format_holds_the_columns(moto(), Some("bucketscan-key"), true, true).await;
}

/// A fleet's scan (plan, two workers, merge) into a `format` dataset, its
/// files read with DuckDB: every key's columns by name.
async fn fleet_dataset(
    s3: &Server,
    bucket: &str,
    format: &str,
) -> BTreeMap<String, BTreeMap<String, serde_json::Value>> {
    let out = s3.bucket("cols-out").await;
    let scan_id = format!("cols-{bucket}-{format}");
    let redis =
        std::env::var("BUCKETSCAN_TEST_REDIS_URL").expect("run the tests with scripts/with-test-servers.sh");
    let queue = ["--redis", redis.as_str(), "--scan", scan_id.as_str()];
    let output = format!("s3://{out}/m/");
    let plan = [
        "plan",
        "--bucket",
        bucket,
        "--format",
        format,
        "--layout",
        "dataset",
        "--checksums",
        "--target-shards",
        "3",
        "--min-shard-objects",
        "1",
        "--output",
        &output,
    ];
    assert_success(&s3.worker(&[&plan[..], &queue[..]].concat()));
    for name in ["w0", "w1"] {
        assert_success(
            &s3.worker(&[&["run", "--name", name, "--part-objects", "2"][..], &queue[..]].concat()),
        );
    }
    assert_success(&s3.worker(&[&["merge"][..], &queue[..]].concat()));
    let manifest: bucketscan_core::fleet::merge::Manifest =
        serde_json::from_slice(&s3.read(&out, "m/manifest.json").await).unwrap();
    assert!(
        manifest.spec.columns.checksums,
        "the manifest records the column options"
    );
    let dir = temp_path(&format!("columns-{scan_id}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut paths = Vec::new();
    for file in &manifest.files {
        let key = file.location.strip_prefix(&format!("s3://{out}/")).unwrap();
        let path = dir.join(key.rsplit('/').next().unwrap());
        std::fs::write(&path, s3.read(&out, key).await).unwrap();
        paths.push(path.to_string_lossy().into_owned());
    }
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/read-columns.py");
    let read = std::process::Command::new(venv_python())
        .arg(script)
        .arg(format)
        .args(&paths)
        .output()
        .unwrap();
    assert!(read.status.success(), "read-columns.py: {}", stderr(&read));
    serde_json::from_slice(&read.stdout).unwrap()
}

/// The merged dataset of a fleet holds the columns as DuckDB reads them:
/// typed in Parquet (booleans, an int32 part count, a UTC timestamp), text
/// in JSONL, whatever shard and part each record came from.
async fn a_fleet_dataset_holds_the_columns(s3: Server, format: &str) {
    let bucket = lock_bucket(&s3, &format!("fleet-{format}")).await;
    let expected = seed(&s3, &bucket, Some("bucketscan-key"), true).await;
    let read = fleet_dataset(&s3, &bucket, format).await;
    assert_eq!(read.len(), expected.len(), "{:?}", read.keys());
    let text = |v: Option<&str>| v.map_or(serde_json::Value::Null, serde_json::Value::from);
    for e in &expected {
        let row = &read[e.key];
        let what = format!("{}: {row:?}", e.key);
        assert_eq!(
            row["server_side_encryption"],
            text(e.server_side_encryption),
            "{what}"
        );
        assert_eq!(
            row["kms_key_arn"]
                .as_str()
                .is_some_and(|k| k.contains("bucketscan-key")),
            e.kms_key,
            "{what}"
        );
        assert_eq!(
            row["is_multipart"],
            serde_json::Value::from(e.part_count.is_some()),
            "{what}"
        );
        assert_eq!(row["part_count"], serde_json::json!(e.part_count), "{what}");
        assert_eq!(row["object_lock_mode"], text(e.lock_mode), "{what}");
        assert_eq!(
            row["object_lock_retain_until_date"],
            text(e.lock_mode.map(|_| RETAIN_UNTIL)),
            "{what}"
        );
        assert_eq!(
            row["object_lock_legal_hold"],
            serde_json::json!(e.legal_hold),
            "{what}"
        );
        assert_eq!(row["checksum_algorithm"], text(e.checksum), "{what}");
        assert_eq!(row["checksum"].is_string(), e.checksum.is_some(), "{what}");
        assert!(row["version_id"].is_string(), "{what}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_minio_fleet_parquet_dataset_holds_the_columns() {
    a_fleet_dataset_holds_the_columns(minio(), "parquet").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_moto_fleet_jsonl_dataset_holds_the_columns() {
    a_fleet_dataset_holds_the_columns(moto(), "jsonl").await;
}

/// `--tags`: every record gets its object's tags (an empty map for none),
/// through GetObjectTagging; without it the column stays empty. On MinIO
/// the listing's `<UserTags>` give the same without a request
/// (`--metadata-source list`: no HEAD, no GetObjectTagging).
async fn tags_fill_object_tags(s3: Server, lists_tags: bool) {
    let bucket = s3.bucket("tags").await;
    let c = s3.client();
    for key in ["tagged", "untagged"] {
        let put = c
            .put_object()
            .bucket(&bucket)
            .key(key)
            .body(ByteStream::from_static(b"x"));
        let put = match key {
            "tagged" => put.tagging("team=data+eng&k%3Ax=v%3D1%2B2"),
            _ => put,
        };
        put.send().await.unwrap();
    }
    let expected: BTreeMap<String, String> = [("team", "data eng"), ("k:x", "v=1+2")]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let assert_tags = |records: &BTreeMap<String, Record>, what: &str| {
        assert_eq!(
            records["tagged"].columns.object_tags.as_ref(),
            Some(&expected),
            "{what}"
        );
        assert_eq!(
            records["untagged"].columns.object_tags,
            Some(BTreeMap::new()),
            "{what}"
        );
    };
    for format in ["jsonl", "csv", "parquet"] {
        assert_tags(&scan_records(&s3, &bucket, format, &["--tags"]), format);
    }
    let without = scan_records(&s3, &bucket, "jsonl", &[]);
    assert!(
        without.values().all(|r| r.columns.object_tags.is_none()),
        "{without:?}"
    );
    if lists_tags {
        let out = s3.worker(&[
            "scan",
            "--bucket",
            &bucket,
            "--tags",
            "--metadata-source",
            "list",
            "--quiet",
        ]);
        assert_success(&out);
        assert_tags(&parse_records(&out.stdout), "from the listing");
        assert!(stderr(&out).contains("(0 HEADs"), "{}", stderr(&out));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn minio_tags_come_from_get_object_tagging_or_the_listing() {
    tags_fill_object_tags(minio(), true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn moto_tags_come_from_get_object_tagging() {
    tags_fill_object_tags(moto(), false).await;
}

/// A baseline scanned with other column options is refused before any
/// HEAD, and so is `--tags` with any baseline (docs/bad-input.md, rows 180
/// and 182): records taken from it would lack a column, or keep old tags.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_baseline_of_other_columns_or_tags_with_a_baseline_is_refused() {
    let s3 = moto();
    let bucket = s3.bucket("cols-base").await;
    let out = s3.bucket("cols-base-out").await;
    s3.client()
        .put_object()
        .bucket(&bucket)
        .key("k")
        .body(ByteStream::from_static(b"x"))
        .send()
        .await
        .unwrap();
    let scan = |prefix: &str, extra: &[&str]| {
        let output = format!("s3://{out}/{prefix}/");
        let mut args = vec![
            "scan", "--bucket", &bucket, "--layout", "dataset", "-o", &output, "--quiet",
        ];
        args.extend(extra);
        s3.worker(&args)
    };
    assert_success(&scan("base", &[]));
    let baseline = format!("s3://{out}/base/manifest.json");
    let refused = scan("checksums", &["--checksums", "--baseline", &baseline]);
    assert!(!refused.status.success());
    assert!(
        stderr(&refused).contains("its scan's optional columns (none) are not this scan's (--checksums)"),
        "{}",
        stderr(&refused)
    );
    let refused = scan("tags", &["--tags", "--baseline", &baseline]);
    assert!(!refused.status.success());
    assert!(
        stderr(&refused).contains("run scans with tags without a baseline"),
        "{}",
        stderr(&refused)
    );
    assert_success(&scan("same", &["--baseline", &baseline]));
}
