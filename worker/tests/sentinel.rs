//! Redis with Sentinel under a running scan: `bucketscan-worker plan`, two
//! `run` processes and `merge`, all given a `redis+sentinel://` address,
//! against versitygw and a real primary, replica and three sentinels
//! (core/tests/support/sentinel.rs). The primary is killed (SIGKILL) mid-scan:
//! the sentinels promote the replica, the workers follow, and the result
//! holds every key of the bucket exactly once. Also: what a bad Sentinel
//! address says.

mod common;
#[path = "common/fleet.rs"]
mod fleet_harness;
#[path = "../../core/tests/support/sentinel.rs"]
mod sentinel_ground;

use common::*;
use fleet_harness::{Fleet, PacedResult, PacedScan};
use sentinel_ground::{Auth, SentinelGround};
use std::collections::BTreeSet;
use std::process::Command;
use std::time::{Duration, Instant};

const PASSWORD: &str = "primary-secret-7f3a";
const SENTINEL_PASSWORD: &str = "sentinel-secret-91c2";
/// How long the whole scan may take after the kill before it counts as a hang.
const BOUND: Duration = Duration::from_secs(180);

/// HEADs counted on the data node at `port` itself.
fn heads_on(fleet: &Fleet, ground: &SentinelGround, port: u16) -> u64 {
    let heads: Option<u64> = ground
        .on_node(
            port,
            redis::cmd("HGET")
                .arg(format!("bs:{{{}}}:counters", fleet.scan))
                .arg("heads"),
        )
        .unwrap();
    heads.unwrap_or(0)
}

/// Every key of `bucket`, from its listing.
async fn listing(s3: &Server, bucket: &str) -> BTreeSet<String> {
    let mut keys = BTreeSet::new();
    let mut pages = s3
        .client()
        .list_objects_v2()
        .bucket(bucket)
        .into_paginator()
        .send();
    while let Some(page) = pages.next().await {
        keys.extend(
            page.unwrap()
                .contents()
                .iter()
                .filter_map(|o| o.key().map(String::from)),
        );
    }
    keys
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scan_through_sentinel_is_exact_when_its_primary_is_killed_mid_scan() {
    scan_through_a_failover("sentinel", false).await;
}

/// The same with the replica 1.5 s behind when the primary dies: the
/// promoted replica lacks commits, splits, finishes and reports the
/// primary acknowledged, as after a restore of an older snapshot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scan_through_sentinel_is_exact_when_it_fails_over_to_a_lagging_replica() {
    scan_through_a_failover("lagging", true).await;
}

/// Plan, two workers and merge through Sentinel; the primary killed once
/// the fleet has done 1,200 HEADs (`lagging`: after the replica stopped
/// receiving for 1.5 s). The fleet must finish within [`BOUND`] with every
/// key of the bucket exactly once.
async fn scan_through_a_failover(scan: &str, lagging: bool) {
    let auth = Auth {
        password: Some(PASSWORD.into()),
        sentinel_password: Some(SENTINEL_PASSWORD.into()),
        sentinel_user: None,
    };
    let mut ground = if lagging {
        SentinelGround::start_lagging(auth)
    } else {
        SentinelGround::start(auth)
    };
    let s3 = versitygw();
    let fleet =
        Fleet::new(s3.clone(), ground.url(), scan).redis_in_env_hiding(&[PASSWORD, SENTINEL_PASSWORD]);
    let (paced, mut heads) = PacedScan::start(fleet, "s", &["--progress-ms", "300"]).await;
    let fleet = &paced.fleet;
    if lagging {
        ground.hold_replication();
        let held = Instant::now();
        fleet.wait_for_heads(heads + 600).await;
        tokio::time::sleep(Duration::from_millis(1500).saturating_sub(held.elapsed())).await;
        let (primary, replica) = (
            heads_on(fleet, &ground, ground.primary.port),
            heads_on(fleet, &ground, ground.replica.port),
        );
        assert!(
            replica < primary,
            "the replica lags: {replica} HEADs against the primary's {primary}"
        );
        heads = primary;
    }
    assert!(heads < 4000, "killed too late: {heads} HEADs already");
    ground.kill_primary();
    let killed = Instant::now();

    let bucket = paced.bucket.clone();
    let PacedResult {
        records,
        manifest,
        logs,
    } = paced.finish(BOUND).await;
    let took = killed.elapsed();
    assert!(took < BOUND, "{took:?}");
    assert_eq!(
        ground.master_port(),
        Some(ground.replica.port),
        "the replica was promoted"
    );
    let listed = listing(&s3, &bucket).await;
    let scanned: BTreeSet<String> = records.keys().cloned().collect();
    assert_eq!(
        scanned, listed,
        "the result holds the bucket's listing, each key once"
    );
    eprintln!(
        "{scan}: killed at {heads} HEADs; workers and merge done {took:?} after the kill; shards {}, \
         attempts {}, HEADs {} for 4000 objects; {} warnings that Redis lost progress",
        manifest["shards"],
        manifest["attempts"],
        manifest["progress"]["heads"],
        logs.matches("Redis lost recorded progress").count()
    );
}

fn assert_no_secret(text: &str) {
    for secret in [PASSWORD, SENTINEL_PASSWORD] {
        assert!(!text.contains(secret), "a Redis password leaked: {text}");
    }
}

/// `plan` with `url` as its Redis (given up on after 5 s): the line it fails
/// with, and how long it took.
fn plan_error(url: &str) -> (String, Duration) {
    let started = Instant::now();
    let out = Command::new(worker_bin())
        .args([
            "plan",
            "--scan",
            "bad-sentinel",
            "--endpoint",
            "http://127.0.0.1:1",
            "--path-style",
        ])
        .args(["--bucket", "b", "--output", "s3://o/"])
        .env("BUCKETSCAN_REDIS_URL", url)
        .env("BUCKETSCAN_REDIS_PATIENCE_SECS", "5")
        .env("AWS_ACCESS_KEY_ID", "bad-input")
        .env("AWS_SECRET_ACCESS_KEY", "bad-input-secret")
        .env("AWS_REGION", "us-east-1")
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .output()
        .unwrap();
    assert!(!out.status.success(), "{out:?}");
    let err = stderr(&out);
    assert_no_secret(&err);
    let last = err.lines().rfind(|l| !l.trim().is_empty()).unwrap_or_default();
    assert!(last.starts_with("error: cannot reach Redis"), "{err}");
    (last.to_string(), started.elapsed())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_sentinel_address_is_one_clear_line_at_once() {
    let ground = SentinelGround::start(Auth {
        password: Some(PASSWORD.into()),
        sentinel_password: Some(SENTINEL_PASSWORD.into()),
        sentinel_user: None,
    });
    let good = ground.url();
    let cases = [
        (
            good.replace("/mymaster", "/mymastr"),
            "no sentinel knows a master named \"mymastr\"",
        ),
        (
            good.replace("redis+sentinel", "rediss+sentinel"),
            "not supported yet",
        ),
        (good.replace("/mymaster", ""), "names no master"),
        (good.replace(SENTINEL_PASSWORD, "wrong"), "the sentinels refused"),
        (good.replace(PASSWORD, "wrong"), "authentication failed"),
        // The primary's address, which is no sentinel.
        (
            format!(
                "redis+sentinel://:{PASSWORD}@127.0.0.1:{}/mymaster?sentinelPassword={PASSWORD}",
                ground.primary.port
            ),
            "does not point to a sentinel",
        ),
    ];
    for (url, says) in cases {
        let (line, took) = plan_error(&url);
        assert!(
            line.to_lowercase().contains(&says.to_lowercase()),
            "{says:?} not in {line}"
        );
        assert!(took < Duration::from_secs(5), "{line}: took {took:?}");
        eprintln!("{line}");
    }
}
