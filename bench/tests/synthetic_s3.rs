//! The synthetic endpoint answers the real worker the way S3 does: a scan
//! through it returns every generated object with its metadata, and injected
//! 503 SlowDowns are retried away.

#[path = "../../worker/tests/common/bin.rs"]
mod bin;

use bin::worker_bin;
use bucketscan_bench::keyspace::{Keyspace, Layout};
use bucketscan_bench::server::{spawn_local, Config, Stats};
use bucketscan_bench::store::StoreModel;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

async fn endpoint(keyspace: Keyspace, slowdown: f64) -> (String, Arc<Stats>) {
    endpoint_with("synthetic", keyspace, slowdown, None).await
}

async fn endpoint_with(
    bucket: &str,
    keyspace: Keyspace,
    slowdown: f64,
    forward: Option<String>,
) -> (String, Arc<Stats>) {
    let config = Config {
        bucket: bucket.into(),
        slowdown,
        forward,
        ..Config::synthetic(keyspace, StoreModel::fixed(Duration::from_micros(200)))
    };
    spawn_local(config).await
}

/// `scan` with the CLI's default metadata source (auto): synthetic-s3 lists
/// no metadata, so every object is still HEADed (the harness's figures
/// rely on that; `the_worker_reads_every_generated_object` counts).
fn scan(url: &str) -> BTreeMap<String, serde_json::Value> {
    let out = std::process::Command::new(worker_bin())
        .args([
            "scan",
            "--bucket",
            "synthetic",
            "--path-style",
            "--quiet",
            "--endpoint",
            url,
        ])
        .args(["--concurrency", "64", "--target-shards", "8"])
        .env("AWS_ACCESS_KEY_ID", "bench")
        .env("AWS_SECRET_ACCESS_KEY", "bench")
        .env("AWS_REGION", "us-east-1")
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            (v["key"].as_str().unwrap().to_string(), v)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_worker_reads_every_generated_object() {
    for layout in [Layout::Nested, Layout::Skewed] {
        let keyspace = Keyspace {
            objects: 4_000,
            layout,
        };
        let (url, stats) = endpoint(keyspace, 0.0).await;
        let records = tokio::task::spawn_blocking(move || scan(&url)).await.unwrap();
        assert_eq!(records.len(), 4_000, "{layout:?}");
        let key = keyspace.key(300);
        let r = &records[&key];
        assert_eq!(r["status"], "ok");
        assert_eq!(r["size"], 300);
        assert_eq!(r["metadata"]["index"], "300");
        assert_eq!(r["metadata"]["project"], "p300");
        assert_eq!(r["metadata"]["team"], format!("team-{}", 300 % 7));
        assert_eq!(stats.heads.load(std::sync::atomic::Ordering::Relaxed), 4_000);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slowdowns_are_retried_away() {
    let keyspace = Keyspace {
        objects: 2_000,
        layout: Layout::Flat,
    };
    let (url, stats) = endpoint(keyspace, 0.05).await;
    let records = tokio::task::spawn_blocking(move || scan(&url)).await.unwrap();
    assert_eq!(records.len(), 2_000);
    assert!(records.values().all(|r| r["status"] == "ok"));
    assert!(stats.slowdowns.load(std::sync::atomic::Ordering::Relaxed) > 20);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bare_hyper_loop_heads_every_object() {
    let keyspace = Keyspace {
        objects: 3_000,
        layout: Layout::Skewed,
    };
    let (url, stats) = endpoint(keyspace, 0.0).await;
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(env!("CARGO_BIN_EXE_hyper-head-loop"))
            .args([
                &url,
                "--objects",
                "3000",
                "--layout",
                "skewed",
                "--in-flight",
                "32",
            ])
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let line: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(line["objects"], 3_000);
    assert_eq!(stats.heads.load(std::sync::atomic::Ordering::Relaxed), 3_000);
}

/// With `passthrough` the store model stands in front of another server (the
/// e2e's chaos scan puts it in front of versitygw): a scan through its
/// resets, 500s and 503s beyond capacity still returns every object of the
/// server behind it, and only requests the model let through reach that
/// server, each once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_passthrough_model_puts_its_faults_in_front_of_another_server() {
    let objects = 3_000;
    let (upstream, upstream_stats) = endpoint(
        Keyspace {
            objects,
            layout: Layout::Nested,
        },
        0.0,
    )
    .await;
    let model = StoreModel {
        capacity: Some(2_000.0),
        queue_limit: Duration::from_millis(5),
        errors: 0.03,
        resets: 0.01,
        ..StoreModel::fixed(Duration::from_micros(200))
    };
    // Nothing is generated here: the objects are the upstream's.
    let nothing = Keyspace {
        objects: 0,
        layout: Layout::Flat,
    };
    let config = Config {
        forward: Some(upstream),
        passthrough: true,
        ..Config::synthetic(nothing, model)
    };
    let (front, front_stats) = spawn_local(config).await;

    let records = tokio::task::spawn_blocking(move || scan(&front)).await.unwrap();
    assert_eq!(records.len() as u64, objects);
    assert!(
        records.values().all(|r| r["status"] == "ok"),
        "every fault was retried away"
    );
    let key = Keyspace {
        objects,
        layout: Layout::Nested,
    }
    .key(1_234);
    assert_eq!(records[&key]["metadata"]["index"], "1234");

    let load = |c: &std::sync::atomic::AtomicU64| c.load(std::sync::atomic::Ordering::Relaxed);
    for (fault, n) in [
        ("resets", load(&front_stats.resets)),
        ("500s", load(&front_stats.internal_errors)),
        ("503s beyond capacity", load(&front_stats.throttled)),
    ] {
        assert!(n > 0, "the model injected no {fault}");
    }
    let upstream_served = load(&upstream_stats.lists) + load(&upstream_stats.heads);
    assert_eq!(load(&front_stats.forwarded), upstream_served);
    assert!(load(&upstream_stats.heads) >= objects);
}

/// Other buckets go to the `--forward` server as they came (signed requests
/// included), and `GET /_stats` counts what was served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_buckets_are_forwarded_and_stats_are_served() {
    let keyspace = |objects| Keyspace {
        objects,
        layout: Layout::Flat,
    };
    let (upstream, upstream_stats) = endpoint_with("other", keyspace(1_500), 0.0, None).await;
    let (front, front_stats) = endpoint_with("synthetic", keyspace(10), 0.0, Some(upstream)).await;
    std::env::set_var("AWS_ACCESS_KEY_ID", "bench");
    std::env::set_var("AWS_SECRET_ACCESS_KEY", "bench");
    std::env::set_var("AWS_EC2_METADATA_DISABLED", "true");
    let s3 = bucketscan_core::s3::S3::connect(bucketscan_core::s3::Endpoint {
        url: Some(front.clone()),
        region: "us-east-1".into(),
        path_style: true,
        ca_pem: None,
        insecure: false,
        pool_size: 4,
        allowlist: None,
        max_answer_bytes: None,
    })
    .await
    .unwrap();
    let req = bucketscan_core::s3::ListRequest {
        max_keys: 1000,
        ..Default::default()
    };
    let (mut listed, mut req) = (0, req);
    loop {
        let page = s3.list_page("other", &req).await.unwrap();
        listed += page.objects.len();
        match page.next {
            Some(token) => req.continuation = Some(token),
            None => break,
        }
    }
    assert_eq!(listed, 1_500);
    assert_eq!(
        s3.list_page("synthetic", &req_all()).await.unwrap().objects.len(),
        10
    );
    assert!(matches!(
        s3.list_page("missing", &req_all()).await,
        Err(bucketscan_core::s3::error::S3Error::NoSuchBucket { .. })
    ));
    let load = |c: &std::sync::atomic::AtomicU64| c.load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(load(&front_stats.forwarded), 3);
    assert_eq!(load(&front_stats.lists), 1);
    assert_eq!(load(&upstream_stats.lists), 2);

    let stats = tokio::task::spawn_blocking(move || {
        use std::io::{Read, Write};
        let mut conn = std::net::TcpStream::connect(front.trim_start_matches("http://")).unwrap();
        conn.write_all(b"GET /_stats HTTP/1.0\r\n\r\n").unwrap();
        let mut answer = String::new();
        conn.read_to_string(&mut answer).unwrap();
        answer
    })
    .await
    .unwrap();
    let body: serde_json::Value = serde_json::from_str(stats.split("\r\n\r\n").nth(1).unwrap()).unwrap();
    assert_eq!(body["lists"], 1);
    assert_eq!(body["forwarded"], 3);
}

fn req_all() -> bucketscan_core::s3::ListRequest {
    bucketscan_core::s3::ListRequest {
        max_keys: 1000,
        ..Default::default()
    }
}
