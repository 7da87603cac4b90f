//! synthetic-s3's changed bucket (`Config::changes`) meets the real worker's
//! incremental scan: a full scan of the bucket, the same bucket changed by
//! 1 % (a second server with the changes, as a bucket a day later), an
//! incremental scan against the first result, and a full scan of the changed
//! bucket. The output goes through `forward` to MinIO, so the store check's
//! canary (PUT, CopyObject onto itself with REPLACE, HEAD) passes through
//! synthetic-s3 to a real server. The incremental result must equal the
//! full one record by record, its change set must be the server's own list
//! of changes, and only the added and changed objects may be HEADed.

#[path = "../../worker/tests/common/mod.rs"]
mod common;

use bucketscan_bench::bucket::Changes;
use bucketscan_bench::keyspace::{Keyspace, Layout};
use bucketscan_bench::server::{spawn_local, Config, Stats};
use bucketscan_bench::store::StoreModel;
use bucketscan_core::scan::dataset::{DataFile, DatasetManifest};
use bucketscan_core::scan::record::Record;
use common::{minio, Server};
use std::collections::BTreeMap;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

/// `bucketscan-worker scan ARGS` against synthetic-s3 at `url`, with
/// `server`'s credentials (synthetic-s3 accepts any; the server behind it
/// checks the forwarded requests' signatures): its summary.
fn scan(server: &Server, url: &str, args: &[&str]) -> String {
    let through = Server {
        endpoint: url.to_string(),
        ..server.clone()
    };
    let mut all = vec!["scan", "--bucket", "synthetic", "--layout", "dataset"];
    all.extend(["--target-shards", "4", "--concurrency", "64"]);
    // The HEAD counts below are a HEAD per object scanned, whatever
    // synthetic-s3's listing ever carries.
    all.extend(["--metadata-source", "head"]);
    all.extend(args);
    let out = through.worker(&all);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stderr}");
    stderr
}

async fn endpoint(keyspace: Keyspace, changes: Option<Changes>, forward: &str) -> (String, Arc<Stats>) {
    spawn_local(Config {
        forward: Some(forward.to_string()),
        changes,
        ..Config::synthetic(keyspace, StoreModel::fixed(Duration::ZERO))
    })
    .await
}

async fn manifest(s3: &bucketscan_core::s3::S3, bucket: &str, prefix: &str) -> DatasetManifest {
    let body = s3
        .get(bucket, &format!("{prefix}manifest.json"), None)
        .await
        .unwrap();
    serde_json::from_slice(&body).unwrap()
}

/// Every record of `files` (JSON Lines), by key, none twice.
async fn records(s3: &bucketscan_core::s3::S3, files: &[DataFile]) -> BTreeMap<String, Record> {
    let mut out = BTreeMap::new();
    for f in files {
        let (bucket, key) = f.location.strip_prefix("s3://").unwrap().split_once('/').unwrap();
        let body = s3.get(bucket, key, None).await.unwrap();
        for line in body.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
            let r: Record = serde_json::from_slice(line).unwrap();
            assert!(out.insert(r.key.clone(), r).is_none(), "a key twice");
        }
    }
    out
}

/// `GET /PATH` of synthetic-s3 at `url`: the body.
fn get(url: &str, path: &str) -> String {
    use std::io::{Read, Write};
    let mut conn = std::net::TcpStream::connect(url.trim_start_matches("http://")).unwrap();
    write!(conn, "GET {path} HTTP/1.0\r\n\r\n").unwrap();
    let mut answer = String::new();
    conn.read_to_string(&mut answer).unwrap();
    answer.split_once("\r\n\r\n").unwrap().1.to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_incremental_scan_of_the_changed_bucket_heads_only_the_changes_and_equals_a_full_scan() {
    let server = minio();
    let s3 = server.s3().await;
    let out = server.bucket("changed-out").await;
    let keyspace = Keyspace {
        objects: 20_000,
        layout: Layout::Nested,
    };
    let changes = Changes {
        share: 0.01,
        seed: 11,
    };

    let (before, _) = endpoint(keyspace, None, &server.endpoint).await;
    let full = |url: String, prefix: &'static str| {
        let (server, output) = (server.clone(), format!("s3://{out}/{prefix}"));
        tokio::task::spawn_blocking(move || scan(&server, &url, &["-o", &output]))
    };
    full(before.clone(), "full/").await.unwrap();
    let baseline = manifest(&s3, &out, "full/").await;
    // The canary went through synthetic-s3 to MinIO, which moves
    // LastModified on a metadata replace.
    let check = baseline
        .store_check
        .clone()
        .expect("the store check passed through");
    assert!(check.last_modified_moves, "{check:?}");
    assert_eq!(check.server.as_deref(), Some("MinIO"), "{check:?}");

    // The bucket a day later: a new server (its changed objects modified
    // after it started, so after the baseline's start).
    let (after, after_stats) = endpoint(keyspace, Some(changes), &server.endpoint).await;
    let inc_url = after.clone();
    let baseline_location = format!("s3://{out}/full/manifest.json");
    let inc_out = format!("s3://{out}/inc/");
    let through = server.clone();
    let said = tokio::task::spawn_blocking(move || {
        scan(
            &through,
            &inc_url,
            &["-o", &inc_out, "--baseline", &baseline_location],
        )
    })
    .await
    .unwrap();
    let incremental_heads = after_stats.heads.load(Relaxed);
    full(after.clone(), "full2/").await.unwrap();

    let inc = manifest(&s3, &out, "inc/").await;
    let want = records(&s3, &manifest(&s3, &out, "full2/").await.files).await;
    assert_eq!(want.len(), 20_000, "as many added as deleted");
    let got = records(&s3, &inc.files).await;
    assert_eq!(got.len(), want.len());
    for (key, w) in &want {
        assert_eq!(got.get(key), Some(w), "{key}");
    }

    // The change set is the server's own list of changes.
    let made: BTreeMap<String, String> = get(&after, "/_changes")
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            (
                v["key"].as_str().unwrap().into(),
                v["change"].as_str().unwrap().into(),
            )
        })
        .collect();
    assert_eq!(made.len(), 200);
    let i = inc.incremental.expect("an incremental manifest");
    assert!(i.reused_records, "{}: {said}", i.detail);
    let found: BTreeMap<String, String> = records(&s3, &i.change_files)
        .await
        .into_iter()
        .map(|(k, r)| (k, r.change.expect("a change record").as_str().to_string()))
        .collect();
    assert_eq!(found, made, "the change set must be exactly the changes made");
    let c = &i.counts;
    assert_eq!(
        (c.added, c.removed, c.content_changed, c.metadata_changed),
        (50, 50, 50, 50)
    );
    // Added, rewritten and replaced objects were HEADed, nothing else.
    assert_eq!(incremental_heads, 150, "{said}");
    assert_eq!(c.heads, 150);
    assert_eq!(c.reused, 20_000 - 150);
}
