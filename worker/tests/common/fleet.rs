//! A fleet of `bucketscan-worker` processes sharing one scan through
//! Redis, as the fleet tests (worker/tests/fleet.rs) and the Sentinel tests
//! (worker/tests/sentinel.rs) run it: `Fleet` starts its commands and
//! workers and reads its counters; `PacedScan` is the scan both run through
//! a Redis outage (a crash and restart, a failover): seeded, planned, two
//! paced workers, and at the end the result checked against the seed.
//!
//! Included with `#[path]` beside `mod common;`, whose ground (servers,
//! seeding, records) it uses; imports the core crate's Redis config only.
#![allow(dead_code)]

use crate::common::{
    assert_matches_seed, assert_success, parse_records, stderr, temp_path, wait_exit, Seeded, Server,
};
use bucketscan_core::scan::record::Record;
use std::collections::BTreeMap;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// One scan's workers: `bucketscan-worker` against `s3` and the Redis at
/// `redis` (any address the worker takes: a scan user's, Sentinel's).
pub struct Fleet {
    pub s3: Server,
    pub redis: String,
    pub scan: String,
    /// The address given in the environment (`BUCKETSCAN_REDIS_URL`), as
    /// the operator gives it, instead of by `--redis`.
    redis_in_env: bool,
    /// What must appear in none of its output (passwords in the address).
    hidden: Vec<String>,
}

impl Fleet {
    pub fn new(s3: Server, redis: impl Into<String>, scan: impl Into<String>) -> Fleet {
        Fleet {
            s3,
            redis: redis.into(),
            scan: scan.into(),
            redis_in_env: false,
            hidden: Vec::new(),
        }
    }

    /// Gives the address through the environment, as the operator does,
    /// and fails any command or worker whose output shows one of `secrets`.
    pub fn redis_in_env_hiding(mut self, secrets: &[&str]) -> Fleet {
        self.redis_in_env = true;
        self.hidden = secrets.iter().map(|s| s.to_string()).collect();
        self
    }

    /// The same fleet on scan `scan`.
    pub fn on_scan(self, scan: impl Into<String>) -> Fleet {
        Fleet {
            scan: scan.into(),
            ..self
        }
    }

    /// The same fleet through `s3` (e.g. a proxy in front of its server).
    pub fn through(self, s3: Server) -> Fleet {
        Fleet { s3, ..self }
    }

    /// `bucketscan-worker ARGS` on this scan.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut cmd = self.s3.worker_command(&[], args);
        cmd.args(["--scan", &self.scan]).env("BUCKETSCAN_LOG", "info");
        if self.redis_in_env {
            cmd.env("BUCKETSCAN_REDIS_URL", &self.redis);
        } else {
            cmd.args(["--redis", &self.redis]);
        }
        cmd
    }

    /// A command that takes no endpoint (`retry`), run to its end.
    pub fn queue_command(&self, args: &[&str]) -> Output {
        Command::new(crate::common::worker_bin())
            .args(args)
            .args(["--redis", &self.redis, "--scan", &self.scan])
            .output()
            .unwrap()
    }

    /// `bucketscan-worker ARGS` run to a successful end.
    pub fn run_ok(&self, args: &[&str]) -> Output {
        let out = self.command(args).output().unwrap();
        self.assert_hidden(&stderr(&out));
        assert_success(&out);
        out
    }

    /// `plan --bucket BUCKET --output OUTPUT FLAGS` run to a successful end.
    pub fn plan(&self, bucket: &str, output: &str, flags: &[&str]) -> Output {
        let mut args = vec!["plan", "--bucket", bucket, "--output", output];
        args.extend_from_slice(flags);
        self.run_ok(&args)
    }

    /// The log (stderr) of worker `name`.
    pub fn log_path(&self, name: &str) -> std::path::PathBuf {
        temp_path(&format!("{}-{name}.log", self.scan))
    }

    /// Worker `name` (`run`, 3 s leases, parts of 300 objects, 16 HEADs at
    /// a time) with `extra` flags, its log in `log_path(name)`.
    pub fn spawn_worker(&self, name: &str, extra: &[&str]) -> Child {
        let mut args = vec![
            "run",
            "--name",
            name,
            "--lease-secs",
            "3",
            "--part-objects",
            "300",
            "--concurrency",
            "16",
        ];
        args.extend_from_slice(extra);
        let log = std::fs::File::create(self.log_path(name)).unwrap();
        self.command(&args)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap()
    }

    /// Counter `field` of the scan, read from the Redis master of now.
    pub async fn counter(&self, field: &str) -> u64 {
        let config = bucketscan_core::fleet::queue::RedisConfig::new(&self.redis);
        let client = config.client().await.unwrap();
        let mut con = client.get_multiplexed_async_connection().await.unwrap();
        let v: Option<u64> = redis::cmd("HGET")
            .arg(format!("bs:{{{}}}:counters", self.scan))
            .arg(field)
            .query_async(&mut con)
            .await
            .unwrap();
        v.unwrap_or(0)
    }

    /// Waits until the fleet reported `at_least` HEADs; how many it had.
    pub async fn wait_for_heads(&self, at_least: u64) -> u64 {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let heads = self.counter("heads").await;
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

    fn assert_hidden(&self, text: &str) {
        for secret in &self.hidden {
            assert!(!text.contains(secret.as_str()), "a Redis password leaked: {text}");
        }
    }
}

/// The scan the Redis outage tests run: 4,000 objects under four prefixes
/// `DIR0/`..`DIR3/` of bucket SCAN, planned in shards of about 500 into
/// `s3://SCAN-out/DIR/`, and workers `a` and `b` paced to 300 HEADs a
/// second so that the outage comes mid-scan.
pub struct PacedScan {
    pub fleet: Fleet,
    pub bucket: String,
    pub out: String,
    pub seeded: BTreeMap<String, Seeded>,
    dir: String,
    workers: [Child; 2],
}

/// What a `PacedScan` ended with.
pub struct PacedResult {
    pub records: BTreeMap<String, Record>,
    pub manifest: serde_json::Value,
    /// Workers `a`'s and `b`'s logs.
    pub logs: String,
}

impl PacedScan {
    /// Seeds and plans the scan of `fleet`, starts its two workers (with
    /// `worker_flags` too) and returns once they did 1,200 HEADs, with the
    /// count then.
    pub async fn start(fleet: Fleet, dir: &str, worker_flags: &[&str]) -> (PacedScan, u64) {
        let s3 = &fleet.s3;
        let bucket = s3.bucket(&fleet.scan).await;
        let out = s3.bucket(&format!("{}-out", fleet.scan)).await;
        let seeded = four_prefixes(dir);
        s3.seed(&bucket, &seeded).await;
        let output = format!("s3://{out}/{dir}/");
        fleet.plan(&bucket, &output, &["--min-shard-objects", "500"]);
        let flags: Vec<&str> = ["--max-rate", "300"]
            .iter()
            .chain(worker_flags)
            .copied()
            .collect();
        let workers = [fleet.spawn_worker("a", &flags), fleet.spawn_worker("b", &flags)];
        let heads = fleet.wait_for_heads(1200).await;
        let scan = PacedScan {
            fleet,
            bucket,
            out,
            seeded,
            dir: dir.to_string(),
            workers,
        };
        (scan, heads)
    }

    /// After the outage: both workers end well within `bound`, the merge
    /// writes every seeded object with its metadata and a manifest of
    /// 4,000, and the workers' logs show they waited for Redis.
    pub async fn finish(mut self, bound: Duration) -> PacedResult {
        for w in &mut self.workers {
            let status = wait_exit(w, bound);
            assert!(status.success(), "worker exit {status:?}");
        }
        self.fleet.run_ok(&["merge"]);
        let s3 = &self.fleet.s3;
        let dir = &self.dir;
        let records = parse_records(&s3.read(&self.out, &format!("{dir}/result.jsonl")).await);
        assert_matches_seed(&records, &self.seeded);
        let manifest: serde_json::Value =
            serde_json::from_slice(&s3.read(&self.out, &format!("{dir}/manifest.json")).await).unwrap();
        assert_eq!(manifest["counts"]["objects"], 4000, "{manifest}");
        let logs: String = ["a", "b"]
            .iter()
            .map(|w| std::fs::read_to_string(self.fleet.log_path(w)).unwrap())
            .collect();
        self.fleet.assert_hidden(&logs);
        assert!(
            logs.contains("Redis unavailable; retrying"),
            "the workers rode out Redis's outage: {logs}"
        );
        PacedResult {
            records,
            manifest,
            logs,
        }
    }
}

/// 4,000 objects, a thousand under each of `DIR0/`..`DIR3/`.
pub fn four_prefixes(dir: &str) -> BTreeMap<String, Seeded> {
    (0..4000)
        .map(|i| (format!("{dir}{}/{i:05}", i % 4), Seeded::default()))
        .collect()
}
