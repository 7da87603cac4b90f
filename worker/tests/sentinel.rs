//! Redis with Sentinel under a running scan: `bucketscan-worker plan`, two
//! `run` processes and `merge`, all given a `redis+sentinel://` address,
//! against versitygw and a real primary, replica and three sentinels
//! (core/tests/support/sentinel.rs). The primary is killed (SIGKILL) mid-scan:
//! the sentinels promote the replica, the workers follow, and the result
//! holds every key of the bucket exactly once. Also: what a bad Sentinel
//! address says.

mod common;
#[path = "../../core/tests/support/sentinel.rs"]
mod sentinel_ground;

use common::*;
use sentinel_ground::{Auth, SentinelGround};
use std::collections::{BTreeMap, BTreeSet};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const PASSWORD: &str = "primary-secret-7f3a";
const SENTINEL_PASSWORD: &str = "sentinel-secret-91c2";
/// How long the whole scan may take after the kill before it counts as a hang.
const BOUND: Duration = Duration::from_secs(180);

struct Fleet {
    s3: Server,
    url: String,
    scan: String,
}

impl Fleet {
    /// `bucketscan-worker ARGS` on this scan; the address (with its
    /// passwords) goes through the environment, as the operator gives it.
    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = self.s3.worker_command(&[], args);
        cmd.args(["--scan", &self.scan])
            .env("BUCKETSCAN_REDIS_URL", &self.url)
            .env("BUCKETSCAN_LOG", "info");
        cmd
    }

    fn run_ok(&self, args: &[&str]) -> Output {
        let out = self.command(args).output().unwrap();
        assert_no_secret(&stderr(&out));
        assert_success(&out);
        out
    }

    fn log_path(&self, name: &str) -> std::path::PathBuf {
        temp_path(&format!("{}-{name}.log", self.scan))
    }

    fn spawn_worker(&self, name: &str) -> Child {
        let args = [
            "run",
            "--name",
            name,
            "--lease-secs",
            "3",
            "--part-objects",
            "300",
            "--concurrency",
            "16",
            "--max-rate",
            "300",
            "--progress-ms",
            "300",
        ];
        let log = std::fs::File::create(self.log_path(name)).unwrap();
        self.command(&args)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap()
    }

    /// HEADs the fleet reported, read from the master of now.
    async fn heads(&self) -> u64 {
        let config = bucketscan_core::fleet::queue::RedisConfig::new(&self.url);
        let client = config.client().await.unwrap();
        let mut con = client.get_multiplexed_async_connection().await.unwrap();
        let heads: Option<u64> = redis::cmd("HGET")
            .arg(format!("bs:{{{}}}:counters", self.scan))
            .arg("heads")
            .query_async(&mut con)
            .await
            .unwrap();
        heads.unwrap_or(0)
    }

    /// Wait until the fleet reported `at_least` HEADs; returns how many.
    async fn wait_for_heads(&self, at_least: u64) -> u64 {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let heads = self.heads().await;
            if heads >= at_least {
                return heads;
            }
            assert!(
                Instant::now() < deadline,
                "the scan did not reach {at_least} HEADs"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// HEADs counted on the data node at `port` itself.
    fn heads_on(&self, ground: &SentinelGround, port: u16) -> u64 {
        let heads: Option<u64> = ground
            .on_node(
                port,
                redis::cmd("HGET")
                    .arg(format!("bs:{{{}}}:counters", self.scan))
                    .arg("heads"),
            )
            .unwrap();
        heads.unwrap_or(0)
    }
}

fn assert_no_secret(text: &str) {
    for secret in [PASSWORD, SENTINEL_PASSWORD] {
        assert!(!text.contains(secret), "a Redis password leaked: {text}");
    }
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
    let bucket = s3.bucket(scan).await;
    let out = s3.bucket(&format!("{scan}-out")).await;
    let seeded: BTreeMap<String, Seeded> = (0..4000)
        .map(|i| (format!("s{}/{i:05}", i % 4), Seeded::default()))
        .collect();
    s3.seed(&bucket, &seeded).await;
    let fleet = Fleet {
        s3: s3.clone(),
        url: ground.url(),
        scan: scan.into(),
    };
    let output = format!("s3://{out}/s/");
    fleet.run_ok(&[
        "plan",
        "--bucket",
        &bucket,
        "--output",
        &output,
        "--min-shard-objects",
        "500",
    ]);
    let mut workers = [fleet.spawn_worker("a"), fleet.spawn_worker("b")];

    let mut heads = fleet.wait_for_heads(1200).await;
    if lagging {
        ground.hold_replication();
        let held = Instant::now();
        fleet.wait_for_heads(heads + 600).await;
        tokio::time::sleep(Duration::from_millis(1500).saturating_sub(held.elapsed())).await;
        let (primary, replica) = (
            fleet.heads_on(&ground, ground.primary.port),
            fleet.heads_on(&ground, ground.replica.port),
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

    for w in &mut workers {
        let status = wait_exit(w, BOUND);
        assert!(status.success(), "worker exit {status:?}");
    }
    fleet.run_ok(&["merge"]);
    let took = killed.elapsed();
    assert!(took < BOUND, "{took:?}");
    assert_eq!(
        ground.master_port(),
        Some(ground.replica.port),
        "the replica was promoted"
    );

    let records = parse_records(&s3.read(&out, "s/result.jsonl").await);
    let listed = listing(&s3, &bucket).await;
    let scanned: BTreeSet<String> = records.keys().cloned().collect();
    assert_eq!(
        scanned, listed,
        "the result holds the bucket's listing, each key once"
    );
    assert_matches_seed(&records, &seeded);
    let manifest: serde_json::Value =
        serde_json::from_slice(&s3.read(&out, "s/manifest.json").await).unwrap();
    assert_eq!(manifest["counts"]["objects"], 4000, "{manifest}");

    let logs: String = ["a", "b"]
        .iter()
        .map(|w| std::fs::read_to_string(fleet.log_path(w)).unwrap())
        .collect();
    assert_no_secret(&logs);
    assert!(
        logs.contains("Redis unavailable; retrying"),
        "the workers rode out the failover: {logs}"
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
