//! The synthetic endpoint answers the real worker the way S3 does: a scan
//! through it returns every generated object with its metadata, and injected
//! 503 SlowDowns are retried away.

#[path = "../../worker/tests/common/bin.rs"]
mod bin;

use bin::worker_bin;
use bucketscan_bench::keyspace::{Keyspace, Layout};
use bucketscan_bench::server::{serve, Config, Stats};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

async fn endpoint(keyspace: Keyspace, slowdown: f64) -> (String, Arc<Stats>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let stats = Arc::new(Stats::default());
    let config = Config {
        bucket: "synthetic".into(),
        keyspace,
        latency: Duration::from_micros(200),
        slowdown,
        forward: None,
    };
    tokio::spawn(serve(listener, config, stats.clone()));
    (url, stats)
}

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
