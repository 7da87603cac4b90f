//! Many `bucketscan-worker run` processes sharing one scan through a real
//! Redis, against a real S3 server (versitygw, which also completes the
//! merge's multipart upload), with workers killed, stopped and added.

mod common;
#[path = "common/fault_proxy.rs"]
mod fault_proxy;
#[path = "common/fleet.rs"]
mod fleet_harness;
#[path = "../../core/tests/support/snapshot.rs"]
mod snapshot;

use common::*;
use fleet_harness::{Fleet, PacedScan};
use std::collections::BTreeMap;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

fn redis_url() -> String {
    std::env::var("BUCKETSCAN_TEST_REDIS_URL").expect("run the tests with `just test`")
}

/// What only these tests ask of a fleet.
impl Fleet {
    /// The owners of the scan's leased shards, polled every 50 ms until
    /// `worker` exits (successfully).
    async fn lease_holders_until_exit(&self, worker: &mut std::process::Child) -> Vec<Vec<String>> {
        let client = redis::Client::open(self.redis.as_str()).unwrap();
        let mut con = client.get_multiplexed_async_connection().await.unwrap();
        let mut seen = Vec::new();
        let deadline = std::time::Instant::now() + Duration::from_secs(120);
        loop {
            if let Some(status) = worker.try_wait().unwrap() {
                assert!(status.success(), "{status}");
                return seen;
            }
            assert!(std::time::Instant::now() < deadline, "the worker did not finish");
            let ids: Vec<String> = redis::cmd("ZRANGE")
                .arg(format!("bs:{{{}}}:leases", self.scan))
                .arg(0)
                .arg(-1)
                .query_async(&mut con)
                .await
                .unwrap();
            let mut owners = Vec::new();
            for id in ids {
                let owner: Option<String> = redis::cmd("HGET")
                    .arg(format!("bs:{{{}}}:shard:{id}", self.scan))
                    .arg("owner")
                    .query_async(&mut con)
                    .await
                    .unwrap();
                owners.extend(owner);
            }
            seen.push(owners);
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// HEADs each worker reported, by worker name.
    async fn heads_by_worker(&self) -> BTreeMap<String, u64> {
        let client = redis::Client::open(self.redis.as_str()).unwrap();
        let mut con = client.get_multiplexed_async_connection().await.unwrap();
        let status: BTreeMap<String, String> = redis::cmd("HGETALL")
            .arg(format!("bs:{{{}}}:workers", self.scan))
            .query_async(&mut con)
            .await
            .unwrap();
        status
            .into_iter()
            .map(|(name, json)| {
                let v: serde_json::Value = serde_json::from_str(&json).unwrap();
                (name, v["heads"].as_u64().unwrap())
            })
            .collect()
    }
}

/// The spec the planner stores for a scan of all of `bucket` into
/// `s3://OUTPUT_BUCKET/OUTPUT_PREFIX`, as the tests that plan again build it.
fn scan_spec(
    bucket: &str,
    output_bucket: &str,
    output_prefix: &str,
    scan: &str,
) -> bucketscan_core::fleet::spec::ScanSpec {
    bucketscan_core::fleet::spec::ScanSpec {
        bucket: bucket.to_string(),
        prefix: String::new(),
        output_bucket: output_bucket.to_string(),
        output_prefix: output_prefix.to_string(),
        gzip: false,
        only_with_metadata: false,
        max_failures: 5,
        format: Default::default(),
        layout: Default::default(),
        file_size: bucketscan_core::fleet::spec::DEFAULT_FILE_SIZE,
        scan_id: scan.to_string(),
        baseline: None,
        change_set: false,
        filter: Default::default(),
        columns: Default::default(),
    }
}

/// 20,000 objects, 80 % of them under one prefix; every fifth has metadata.
fn skewed_bucket() -> BTreeMap<String, Seeded> {
    (0..20_000)
        .map(|i| {
            let key = if i % 5 != 0 {
                format!("hot/{:03}/{i:06}", i % 97)
            } else {
                format!("cold-{}/{i:06}", i % 10)
            };
            let metadata = if i % 5 == 1 {
                BTreeMap::from([("Owner".to_string(), format!("team-{}", i % 7))])
            } else {
                BTreeMap::new()
            };
            (
                key,
                Seeded {
                    size: i % 50,
                    metadata,
                },
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fleet_survives_kill_stop_and_join_with_exact_output() {
    fleet_survives_chaos_on(versitygw()).await;
}

/// The same on MinIO: "works on MinIO" is tested, not claimed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fleet_survives_kill_stop_and_join_with_exact_output_on_minio() {
    fleet_survives_chaos_on(minio()).await;
}

async fn fleet_survives_chaos_on(s3: Server) {
    let bucket = s3.bucket("fleet").await;
    let out = s3.bucket("fleet-out").await;
    let seeded = skewed_bucket();
    s3.seed(&bucket, &seeded).await;
    let fleet = Fleet::new(s3.clone(), redis_url(), format!("scan-{bucket}"));
    fleet.plan(
        &bucket,
        &format!("s3://{out}/scan/"),
        &["--target-shards", "12", "--min-shard-objects", "500"],
    );

    // Paced so the chaos lands mid-scan: 3 x 400 HEAD/s, a HEAD per object
    // (the default, auto, takes MinIO's records from the listing, unpaced
    // and uncounted by `wait_for_heads`).
    let pace = ["--max-rate", "400", "--metadata-source", "head"];
    let mut killed = fleet.spawn_worker("a", &pace);
    let mut stopped = fleet.spawn_worker("b", &pace);
    let mut steady = fleet.spawn_worker("c", &pace);

    fleet.wait_for_heads(3000).await;
    killed.kill().unwrap(); // SIGKILL in the middle of a shard
    killed.wait().unwrap();

    fleet.wait_for_heads(6000).await;
    let sigterm = Instant::now();
    unsafe { libc_kill(stopped.id() as i32, 15) };
    let status = wait_exit(&mut stopped, Duration::from_secs(20));
    assert!(status.success(), "SIGTERM exit {status:?}");
    assert!(
        sigterm.elapsed() < Duration::from_secs(10),
        "graceful stop took {:?}",
        sigterm.elapsed()
    );

    let mut joined = fleet.spawn_worker("d", &pace);
    for w in [&mut steady, &mut joined] {
        let status = wait_exit(w, Duration::from_secs(180));
        assert!(status.success(), "worker exit {status:?}");
    }

    let merged = fleet.run_ok(&["merge"]);
    assert!(stderr(&merged).contains("merged"), "{}", stderr(&merged));
    assert_matches_seed(&parse_records(&s3.read(&out, "scan/result.jsonl").await), &seeded);

    let manifest: serde_json::Value =
        serde_json::from_slice(&s3.read(&out, "scan/manifest.json").await).unwrap();
    assert_eq!(manifest["shards_dead"], 0, "{manifest}");
    assert!(
        manifest["shards_retried"].as_u64().unwrap() >= 1,
        "the killed worker's shard was retried: {manifest}"
    );
    let counts = &manifest["counts"];
    assert_eq!(counts["objects"], 20_000, "{manifest}");
    assert_eq!(counts["written"], 20_000, "{manifest}");
    assert_eq!(counts["with_metadata"], 4000, "{manifest}");
    let seeded_bytes: u64 = seeded.values().map(|s| s.size as u64).sum();
    assert_eq!(counts["bytes"], seeded_bytes, "{manifest}");
    // Live progress is approximate: rework after the crash adds to it, the
    // killed worker's last unreported seconds are missing from it.
    let heads = manifest["progress"]["heads"].as_u64().unwrap();
    assert!((15_000..25_000).contains(&heads), "{manifest}");
    assert_eq!(
        s3.key_count(&out, "scan/parts/").await,
        0,
        "parts are removed after the merge"
    );

    // A second merge changes nothing.
    let again = fleet.run_ok(&["merge"]);
    assert!(stderr(&again).contains("merged"), "{}", stderr(&again));
    assert_matches_seed(&parse_records(&s3.read(&out, "scan/result.jsonl").await), &seeded);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shard_that_keeps_failing_is_dead_lettered_and_reported() {
    let s3 = versitygw();
    let bucket = s3.bucket("doomed").await;
    let out = s3.bucket("doomed-out").await;
    let seeded: BTreeMap<String, Seeded> = (0..20).map(|i| (format!("k{i:02}"), Seeded::default())).collect();
    s3.seed(&bucket, &seeded).await;
    let fleet = Fleet::new(s3.clone(), redis_url(), format!("doomed-{}", std::process::id()));
    fleet.plan(&bucket, &format!("s3://{out}/s/"), &["--max-failures", "2"]);
    // The bucket disappears after planning: every attempt fails.
    for key in seeded.keys() {
        s3.delete(&bucket, key).await;
    }
    s3.client().delete_bucket().bucket(&bucket).send().await.unwrap();

    let mut worker = fleet.spawn_worker("w", &[]);
    assert!(
        wait_exit(&mut worker, Duration::from_secs(60)).success(),
        "run exits 0 when no shard is left"
    );
    let merged = fleet.command(&["merge"]).output().unwrap();
    assert!(!merged.status.success());
    let err = stderr(&merged);
    assert!(
        err.contains("failed for good") && err.contains("does not exist"),
        "{err}"
    );
    let manifest: serde_json::Value =
        serde_json::from_slice(&s3.read(&out, "s/manifest.json").await).unwrap();
    assert_eq!(manifest["shards_dead"], 1);
    assert!(manifest["dead"][0]["last_error"]
        .as_str()
        .unwrap()
        .contains("does not exist"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_huge_shard_is_split_live_until_every_worker_is_busy() {
    let s3 = versitygw();
    let bucket = s3.bucket("huge").await;
    let out = s3.bucket("huge-out").await;
    let seeded: BTreeMap<String, Seeded> = (0..6000)
        .map(|i| (format!("big/{:02}/{i:05}", i % 40), Seeded::default()))
        .collect();
    s3.seed(&bucket, &seeded).await;
    let fleet = Fleet::new(s3.clone(), redis_url(), format!("huge-{}", std::process::id()));
    let output = format!("s3://{out}/split/");
    let plan = fleet.plan(&bucket, &output, &["--target-shards", "1"]);
    assert!(stderr(&plan).contains(": 1 shards"), "{}", stderr(&plan));

    // Paced, so one worker alone would take 20 s: the others must get work
    // by splitting the one shard while it is being scanned. Each must do at
    // least an eighth (an even share is a third; other tests share the CPU).
    let names = ["a", "b", "c"];
    let mut workers: Vec<Child> = names
        .iter()
        .map(|n| fleet.spawn_worker(n, &["--max-rate", "300", "--progress-ms", "500"]))
        .collect();
    for w in &mut workers {
        assert!(wait_exit(w, Duration::from_secs(120)).success());
    }
    fleet.run_ok(&["merge"]);
    assert_matches_seed(
        &parse_records(&s3.read(&out, "split/result.jsonl").await),
        &seeded,
    );
    let manifest: serde_json::Value =
        serde_json::from_slice(&s3.read(&out, "split/manifest.json").await).unwrap();
    assert!(manifest["splits"].as_u64().unwrap() >= 2, "{manifest}");
    assert_eq!(manifest["counts"]["objects"], 6000, "{manifest}");
    let heads = fleet.heads_by_worker().await;
    for name in names {
        assert!(
            heads[name] * 8 >= 6000,
            "worker {name} did too little of the one shard: {heads:?}"
        );
    }
}

/// One worker holds several shards at once (one LIST stream each, so slow
/// LIST pages do not cap it): with 8 planned shards and 4 slots, Redis shows
/// it leasing 4 at a time, each slot under its own name, and the output
/// stays exact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_worker_lists_several_pending_shards_at_once() {
    let s3 = versitygw();
    let bucket = s3.bucket("slots").await;
    let out = s3.bucket("slots-out").await;
    let seeded: BTreeMap<String, Seeded> = (0..4000)
        .map(|i| (format!("s/{:02}/{i:05}", i % 20), Seeded::default()))
        .collect();
    s3.seed(&bucket, &seeded).await;
    let fleet = Fleet::new(s3.clone(), redis_url(), format!("slots-{}", std::process::id()));
    let output = format!("s3://{out}/slots/");
    fleet.plan(
        &bucket,
        &output,
        &["--target-shards", "8", "--min-shard-objects", "100"],
    );
    let mut worker = fleet.spawn_worker(
        "solo",
        &[
            "--max-rate",
            "300",
            "--progress-ms",
            "500",
            "--shards-in-flight",
            "4",
        ],
    );
    let holders = fleet.lease_holders_until_exit(&mut worker).await;
    fleet.run_ok(&["merge"]);
    assert_matches_seed(
        &parse_records(&s3.read(&out, "slots/result.jsonl").await),
        &seeded,
    );
    let most = holders.iter().map(|h| h.len()).max().unwrap_or(0);
    assert_eq!(most, 4, "4 shards leased at once: {holders:?}");
    let names: std::collections::BTreeSet<&String> = holders.iter().flatten().collect();
    for slot in ["solo", "solo/1", "solo/2", "solo/3"] {
        assert!(names.iter().any(|n| *n == slot), "{slot} in {names:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_carries_shards_not_keys() {
    let redis = PrivateRedis::start();
    let url = redis.url();
    let s3 = versitygw();
    let bucket = s3.bucket("ops").await;
    let out = s3.bucket("ops-out").await;
    let objects = 20_000;
    let seeded: BTreeMap<String, Seeded> = (0..objects)
        .map(|i| (format!("d{}/{i:06}", i % 4), Seeded::default()))
        .collect();
    s3.seed(&bucket, &seeded).await;
    let fleet = Fleet::new(s3.clone(), url.clone(), "ops");
    let before = redis.commands_processed(&url);
    fleet.plan(&bucket, &format!("s3://{out}/"), &[]);
    let planned = redis.commands_processed(&url);
    let log = std::fs::File::create(temp_path("ops-solo.log")).unwrap();
    // The periodic reports (progress, the rate governor's window, the lease's
    // renewal, a part's commit by age) cost commands per second of running,
    // not per object, and a loaded machine runs slowly (the tests run side by
    // side: at 10 s and 5 s a run of 140 s cost 0.0112 per object): at their
    // longest periods they leave the per-object and per-shard costs this test
    // is about.
    let mut worker = fleet
        .command(&[
            "run",
            "--name",
            "solo",
            "--progress-ms",
            "60000",
            "--govern-ms",
            "60000",
            "--lease-secs",
            "600",
            "--part-secs",
            "3600",
        ])
        .stderr(log)
        .spawn()
        .unwrap();
    // A guard against a hang: the run took 140 s with tests side by side.
    assert!(wait_exit(&mut worker, Duration::from_secs(600)).success());
    let ran = redis.commands_processed(&url);
    let merged = fleet.run_ok(&["merge"]);
    eprintln!(
        "plan {} run {} merge: {}",
        planned - before,
        ran - planned,
        stderr(&merged)
    );
    // Plan and run, with the commands inside the queue's functions: what
    // grows with the objects. The merge's are a cost per scan and per shard
    // (read the shards, stage and store the manifest, the durability wait),
    // bounded apart, so that a step added to it is not read as a cost per
    // object.
    let scanning = ran - before;
    let per_object = scanning as f64 / objects as f64;
    let merging = redis.commands_processed(&url) - ran - 1;
    eprintln!("{scanning} Redis commands for {objects} objects: {per_object:.4} per object; merge {merging}");
    assert!(
        per_object < 0.01,
        "{scanning} Redis commands for {objects} objects"
    );
    assert!(merging < 100, "{merging} Redis commands to merge 2 shards");
    assert_matches_seed(&parse_records(&s3.read(&out, "result.jsonl").await), &seeded);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_crash_and_restart_mid_scan_loses_nothing() {
    let aof = temp_path("aof");
    std::fs::create_dir_all(&aof).unwrap();
    let dir = aof.to_str().unwrap().to_string();
    // Persistence as the Helm chart sets it up: every write is in the AOF
    // before Redis answers.
    let mut redis = PrivateRedis::start_with(move |port| {
        [
            "--port",
            &port.to_string(),
            "--appendonly",
            "yes",
            "--appendfsync",
            "always",
            "--dir",
            &dir,
        ]
        .map(String::from)
        .to_vec()
    });
    let fleet = Fleet::new(versitygw(), redis.url(), "restart");
    let (scan, _) = PacedScan::start(fleet, "r", &[]).await;
    // Down for longer than a lease: every lease expires meanwhile.
    redis.crash_and_restart(Duration::from_secs(4));
    scan.finish(Duration::from_secs(120)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scan_whose_redis_state_is_lost_is_replanned_without_redoing_finished_shards() {
    use bucketscan_core::fleet::queue::{Queue, RedisConfig};
    let redis = PrivateRedis::start();
    let url = redis.url();
    let s3 = versitygw();
    let bucket = s3.bucket("lost").await;
    let out = s3.bucket("lost-out").await;
    let seeded: BTreeMap<String, Seeded> = (0..3000)
        .map(|i| (format!("l{}/{i:05}", i % 6), Seeded::default()))
        .collect();
    s3.seed(&bucket, &seeded).await;
    let fleet = Fleet::new(s3.clone(), url.clone(), "lost");
    let output = format!("s3://{out}/lost/");
    fleet.plan(&bucket, &output, &["--min-shard-objects", "400"]);
    // One shard at a time, so that some are done and some not when it dies.
    let mut first = fleet.spawn_worker("first", &["--max-rate", "600", "--shards-in-flight", "1"]);
    let client = redis::Client::open(url.as_str()).unwrap();
    let mut con = client.get_multiplexed_async_connection().await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let done: u64 = redis::cmd("SCARD")
            .arg("bs:{lost}:done")
            .query_async(&mut con)
            .await
            .unwrap();
        if done >= 2 {
            break;
        }
        assert!(Instant::now() < deadline, "no shard finished");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    first.kill().unwrap();
    first.wait().unwrap();
    // Redis restarts empty.
    redis::cmd("FLUSHALL").query_async::<()>(&mut con).await.unwrap();

    let spec = scan_spec(&bucket, &out, "lost/", "lost");
    let client_s3 = s3.s3().await;
    let queue = Queue::connect(&RedisConfig::new(&url), "lost", "test", Duration::from_secs(30))
        .await
        .unwrap();
    let (restored, queued) = bucketscan_core::fleet::recovery::replan(&client_s3, &spec, &queue)
        .await
        .unwrap();
    assert!(
        restored >= 2 && queued >= 1,
        "restored {restored}, queued {queued}"
    );

    let mut second = fleet.spawn_worker("second", &[]);
    assert!(wait_exit(&mut second, Duration::from_secs(120)).success());
    fleet.run_ok(&["merge"]);
    assert_matches_seed(&parse_records(&s3.read(&out, "lost/result.jsonl").await), &seeded);
    let manifest: serde_json::Value =
        serde_json::from_slice(&s3.read(&out, "lost/manifest.json").await).unwrap();
    assert_eq!(manifest["counts"]["objects"], 3000, "{manifest}");
    // The progress counters were rebuilt from the done records (the lost
    // work of halfway shards is not counted): a finished shard scanned again
    // would count its objects twice.
    let heads = manifest["progress"]["heads"].as_u64().unwrap();
    assert!(heads <= 3000, "finished shards were scanned again: {manifest}");
}

/// Done records read for a replan are bounded (the operator reads them from
/// the tenant's output, where anyone who may write there can add more): one
/// listed over 1 MiB is skipped (its shard is scanned again: exact), and more
/// than 64 MiB of them fail the replan instead of filling memory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn done_records_read_for_a_replan_are_bounded() {
    use bucketscan_core::fleet::recovery::{
        read_done, DoneRecord, RecoveryError, MAX_DONE_BYTES, MAX_DONE_RECORD_BYTES,
    };
    let s3 = versitygw();
    let out = s3.bucket("done-bounds").await;
    let spec = scan_spec("src", &out, "b/", "bounds");
    let parts = spec.parts_prefix();
    let c = s3.client();
    // A record of shard `id`, padded with spaces to `size` bytes.
    let put = async |id: &str, size: u64| {
        let record = DoneRecord {
            id: id.to_string(),
            range: bucketscan_core::keyspace::shard::Shard::prefix("b/"),
            parts: Vec::new(),
            counts: BTreeMap::new(),
        };
        let mut body = serde_json::to_vec(&record).unwrap();
        body.resize(size as usize, b' ');
        c.put_object()
            .bucket(&out)
            .key(format!("{parts}{id}/done.json"))
            .body(body.into())
            .send()
            .await
            .unwrap();
    };
    let client_s3 = s3.s3().await;
    put("big", MAX_DONE_RECORD_BYTES + 1).await;
    put("small", 100).await;
    let read = read_done(&client_s3, &spec).await.unwrap();
    assert_eq!(
        read.iter().map(|r| r.id.as_str()).collect::<Vec<_>>(),
        ["small"],
        "the oversized record is skipped"
    );
    for i in 0..MAX_DONE_BYTES / MAX_DONE_RECORD_BYTES {
        put(&format!("s{i:03}"), MAX_DONE_RECORD_BYTES).await;
    }
    assert!(
        matches!(
            read_done(&client_s3, &spec).await,
            Err(RecoveryError::TooManyDone)
        ),
        "more than {MAX_DONE_BYTES} bytes of done records are refused"
    );
}

/// plan, run and merge over prefixes holding `\t`, `\u{1}` and `\u{7f}`
/// with more than two pages of keys each: on moto, the one server here that
/// stores them (its small result is a single PutObject, so the merge does not
/// need the multipart upload moto answers in a form the SDK rejects).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_character_prefixes_of_several_pages_are_planned_run_and_merged_whole() {
    let s3 = moto();
    let bucket = s3.bucket("ctl-fleet").await;
    let out = s3.bucket("ctl-fleet-out").await;
    let seeded = control_character_keyspace();
    s3.seed(&bucket, &seeded).await;
    let fleet = Fleet::new(s3.clone(), redis_url(), format!("ctl-{}", std::process::id()));
    fleet.plan(
        &bucket,
        &format!("s3://{out}/ctl/"),
        &["--target-shards", "16", "--min-shard-objects", "500"],
    );
    let mut worker = fleet.spawn_worker("only", &[]);
    // A guard against a hang, not a speed check: moto is one Python process
    // that the other moto tests share, and a cold run's worker needed more
    // than 120 s here.
    assert!(wait_exit(&mut worker, Duration::from_secs(600)).success());
    fleet.run_ok(&["merge"]);
    assert_matches_seed(&parse_records(&s3.read(&out, "ctl/result.jsonl").await), &seeded);
    let manifest: serde_json::Value =
        serde_json::from_slice(&s3.read(&out, "ctl/manifest.json").await).unwrap();
    assert_eq!(manifest["counts"]["objects"], seeded.len(), "{manifest}");
}

/// Redis loses acknowledged writes while workers run: the scan's keys are
/// put back to a snapshot taken seconds earlier (as a Redis restarted from an
/// AOF written every second, or a failover to a lagging replica, would hold
/// them). Commits made since are gone, finished shards are leased or pending
/// again, split parts vanish; the workers go on and the result is exact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_losing_acknowledged_writes_mid_scan_leaves_no_hole() {
    let redis = PrivateRedis::start();
    let s3 = versitygw();
    let bucket = s3.bucket("rollback").await;
    let out = s3.bucket("rollback-out").await;
    let seeded: BTreeMap<String, Seeded> = (0..5000)
        .map(|i| (format!("w{}/{i:05}", i % 5), Seeded::default()))
        .collect();
    s3.seed(&bucket, &seeded).await;
    let fleet = Fleet::new(s3.clone(), redis.url(), "rollback");
    fleet.plan(&bucket, &format!("s3://{out}/rb/"), &["--target-shards", "2"]);
    // A part every 300 objects (a commit a second), fewer shards than
    // workers (splits).
    let opts = ["--max-rate", "300", "--progress-ms", "300"];
    let mut workers: Vec<Child> = ["a", "b", "c"]
        .iter()
        .map(|n| fleet.spawn_worker(n, &opts))
        .collect();
    let mut con = redis::Client::open(redis.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    fleet.wait_for_heads(1000).await;
    let before = snapshot::Snapshot::take(&mut con, &fleet.scan).await;
    fleet.wait_for_heads(2500).await;
    before.restore(&mut con).await;
    for w in &mut workers {
        assert!(wait_exit(w, Duration::from_secs(180)).success());
    }
    fleet.run_ok(&["merge"]);
    assert_matches_seed(&parse_records(&s3.read(&out, "rb/result.jsonl").await), &seeded);
    let manifest: serde_json::Value =
        serde_json::from_slice(&s3.read(&out, "rb/manifest.json").await).unwrap();
    assert_eq!(manifest["counts"]["objects"], 5000, "{manifest}");
}

/// A part that cannot be uploaded for good (the output bucket is gone) fails
/// its shard, counted, until the shard is dead with the error: the worker
/// goes on (it used to exit, losing its other slots' shards' time). Each
/// attempt ends with its lease and its heartbeat, or the lease would be
/// renewed for ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_part_upload_that_fails_for_good_fails_its_shard_not_the_worker() {
    use bucketscan_core::fleet::queue::{Queue, RedisConfig};
    use bucketscan_core::fleet::run::{RunOptions, Runner};
    use bucketscan_core::s3::head::{HeadClient, HeadClientKind};
    use bucketscan_core::scan::engine::{Engine, EngineOptions};
    let s3 = versitygw();
    let bucket = s3.bucket("beat").await;
    let seeded: BTreeMap<String, Seeded> = (0..50).map(|i| (format!("b{i:02}"), Seeded::default())).collect();
    s3.seed(&bucket, &seeded).await;
    let scan = format!("beat-{}", std::process::id());
    let spec = scan_spec(&bucket, &format!("{bucket}-missing"), "o/", &scan);
    let lease = Duration::from_millis(900);
    let queue = Queue::connect(&RedisConfig::new(redis_url()), &scan, "w", lease)
        .await
        .unwrap();
    queue.set_spec(&spec).await.unwrap();
    queue
        .enqueue(&[bucketscan_core::keyspace::shard::Shard::prefix("")])
        .await
        .unwrap();
    let client = s3.s3().await;
    let engine = Engine::new(
        client.clone(),
        HeadClient::new(HeadClientKind::Sdk, &client).unwrap(),
        EngineOptions {
            bucket,
            concurrency: 8,
            only_with_metadata: false,
            page_size: 1000,
            max_rate: None,
            metadata_source: bucketscan_core::scan::listed::MetadataSource::Head,
            filter: Default::default(),
            columns: Default::default(),
        },
    );
    let runner = Runner {
        queue: queue.clone(),
        engine,
        spec,
        opts: RunOptions {
            reap: false,
            ..RunOptions::default()
        },
        stop: tokio_util::sync::CancellationToken::new(),
    };
    let summary = runner
        .run()
        .await
        .expect("an upload that fails for good fails its shard, not the worker");
    assert_eq!(
        (summary.shards_done, summary.shards_failed),
        (0, 5),
        "{summary:?}"
    );
    let record = &queue.shard_records().await.unwrap()[0];
    assert_eq!(record.state, "dead", "{record:?}");
    assert!(
        record
            .last_error
            .as_deref()
            .unwrap_or_default()
            .contains("does not exist"),
        "{record:?}"
    );
    // Each attempt ended with its lease: none is left held (or renewed).
    tokio::time::sleep(lease * 2).await;
    assert_eq!(queue.counts().await.unwrap().leased, 0);
    assert_eq!(queue.reap(5).await.unwrap(), (0, 0));
}

extern "C" {
    #[link_name = "kill"]
    fn libc_kill(pid: i32, sig: i32) -> i32;
}

/// The rate governor's report tests: queues of `names` on one scan, a
/// config without the startup grace (the second window's throttling cuts at
/// once), and a sample of `heads` HEADs of 2 ms with `throttles` among them.
mod governing {
    use bucketscan_core::fleet::governed::Sample;
    use bucketscan_core::fleet::governor::GovernorConfig;
    use bucketscan_core::fleet::queue::{Queue, RedisConfig};
    use bucketscan_core::scan::engine::CountersSnapshot;
    use std::time::Duration;

    pub async fn queues<const N: usize>(scan: &str, names: [&str; N]) -> [Queue; N] {
        let mut queues = Vec::new();
        for name in names {
            let config = RedisConfig::new(super::redis_url());
            queues.push(
                Queue::connect(&config, scan, name, Duration::from_secs(30))
                    .await
                    .unwrap(),
            );
        }
        queues.try_into().map_err(|_| ()).unwrap()
    }

    pub fn no_grace() -> GovernorConfig {
        GovernorConfig {
            grace_windows: 0,
            ..GovernorConfig::default()
        }
    }

    pub fn heads(heads: u64, throttles: u64) -> Sample {
        Sample {
            total: CountersSnapshot {
                heads,
                throttles,
                head_micros: heads * 2_000,
                ..CountersSnapshot::default()
            },
            partitions: Default::default(),
        }
    }
}

/// The rate governor's shared state in the real Redis: the fleet's window is
/// summed from every worker's report, exactly one worker per window steps
/// it, throttling cuts the scan's rate, and each worker gets its share.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn throttling_reported_by_the_fleet_cuts_the_shared_rate_and_splits_it() {
    use bucketscan_core::fleet::governed::{report, Sample};
    use bucketscan_core::fleet::governor::Governor;
    use governing::heads;
    let scan = format!("govern-{}", std::process::id());
    let [a, b] = governing::queues(&scan, ["a", "b"]).await;
    let cfg = governing::no_grace();
    let window = Duration::from_secs(2); // long: a loaded machine must not end it early
    let zero = Sample::default();
    let all = |rates: bucketscan_core::fleet::governed::Rates| rates.all;
    // a's first report steps the (empty) first window; b's reports, calm
    // then throttled, land in the window that follows.
    assert_eq!(
        all(report(&a, &zero, &heads(400, 0), window, &cfg).await.unwrap()),
        None
    );
    assert_eq!(
        all(report(&b, &zero, &heads(400, 0), window, &cfg).await.unwrap()),
        None
    );
    assert_eq!(
        all(report(&b, &heads(400, 0), &heads(800, 30), window, &cfg)
            .await
            .unwrap()),
        None
    );
    tokio::time::sleep(window).await;
    // a, throttled too, is first in the next window: it steps the fleet's.
    let share = all(report(&a, &heads(400, 0), &heads(800, 10), window, &cfg)
        .await
        .unwrap());
    let state: Governor = serde_json::from_str(&a.governors().await.unwrap()["*"]).unwrap();
    assert_eq!(
        state.throttles, 40,
        "both workers' throttles counted once: {state:?}"
    );
    let rate = state.rate.expect("throttling limits the scan");
    // Below what the fleet sent (1,200 HEADs over a window of 2 s or more;
    // 40 of 1,240 requests throttled: cut by 0.87).
    assert!(rate > 50.0 && rate <= 0.9 * 1_200.0 / 2.0, "{rate}");
    // (JSON may round the last bit of a rate.)
    let close = |a: Option<f64>, b: f64| a.is_some_and(|a| (a - b).abs() < 1e-6 * b);
    assert!(close(share, rate / 2.0), "two workers share the rate: {share:?}");
    // Within the same window nobody steps again; b gets its share too.
    let b_share = all(report(&b, &heads(800, 30), &heads(900, 30), window, &cfg)
        .await
        .unwrap());
    assert!(close(b_share, rate / 2.0), "{b_share:?}");
    let again: Governor = serde_json::from_str(&a.governors().await.unwrap()["*"]).unwrap();
    assert_eq!(again, state);
    a.delete_scan().await.unwrap();
}

/// A worker waiting for a shard (it sent nothing in its window) takes no
/// share of the governed rate: the workers that send split it among
/// themselves. (Before, every report counted its worker as sending, so an
/// idle worker halved the busy one's rate.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_worker_takes_no_share_of_the_governed_rate() {
    use bucketscan_core::fleet::governed::{report, Sample};
    use bucketscan_core::fleet::governor::Governor;
    use governing::heads;
    let scan = format!("idle-share-{}", std::process::id());
    let [busy, idle] = governing::queues(&scan, ["busy", "idle"]).await;
    let cfg = governing::no_grace();
    let window = Duration::from_secs(2);
    let zero = Sample::default();
    // The first report steps the (empty) first window; the throttled one,
    // a window later, steps it and limits the scan.
    report(&busy, &zero, &heads(400, 0), window, &cfg).await.unwrap();
    tokio::time::sleep(window).await;
    report(&busy, &heads(400, 0), &heads(800, 40), window, &cfg)
        .await
        .unwrap();
    // Each share against the scan's rate when it was answered (a slow
    // machine may let a new window be stepped between the reports).
    let limit = || async {
        let state: Governor = serde_json::from_str(&busy.governors().await.unwrap()["*"]).unwrap();
        state.rate.expect("throttling limits the scan")
    };
    let whole = |share: Option<f64>, rate: f64| share.is_some_and(|s| (s - rate).abs() < 1e-6 * rate);
    // The idle worker reports a window without requests: it gets the whole
    // rate as its share, and so does the busy one (one worker sends).
    let idle_share = report(&idle, &zero, &zero, window, &cfg).await.unwrap().all;
    let rate = limit().await;
    assert!(whole(idle_share, rate), "{idle_share:?} of {rate}");
    let busy_share = report(&busy, &heads(800, 40), &heads(900, 40), window, &cfg)
        .await
        .unwrap()
        .all;
    let rate = limit().await;
    assert!(
        whole(busy_share, rate),
        "the idle worker took a share: {busy_share:?} of {rate}"
    );
    busy.delete_scan().await.unwrap();
}

/// A planner that died while it stored its shards (emulated the way such a
/// crash leaves Redis: the spec and some of a real plan's shards, no mark
/// that the plan is complete). The merge refuses with exit 75 ("plan it
/// again"), where it merged the partial plan and called it complete.
/// Planning again, after the bucket changed, queues exactly the ranges the
/// stored shards leave, where it tiled the changed bucket anew and added
/// shards overlapping the stored ones (keys twice in the result). The scan
/// then completes exact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_that_died_midway_is_completed_not_tiled_again() {
    use bucketscan_core::fleet::queue::{Queue, RedisConfig};
    use bucketscan_core::keyspace::coverage::{overlapping, uncovered};
    let s3 = versitygw();
    let bucket = s3.bucket("halfplan").await;
    let out = s3.bucket("halfplan-out").await;
    let seeded: BTreeMap<String, Seeded> = (0..2000)
        .map(|i| (format!("h{}/{i:05}", i % 8), Seeded::default()))
        .collect();
    s3.seed(&bucket, &seeded).await;
    let scan = format!("halfplan-{}", std::process::id());
    let fleet = Fleet::new(s3.clone(), redis_url(), scan.clone());
    let output = format!("s3://{out}/r/");
    let plan = [
        "plan",
        "--bucket",
        &bucket,
        "--output",
        &output,
        "--min-shard-objects",
        "100",
    ];
    fleet.run_ok(&plan);
    let queue = Queue::connect(
        &RedisConfig::new(redis_url()),
        &scan,
        "test",
        Duration::from_secs(30),
    )
    .await
    .unwrap();
    let planned = queue.shard_records().await.unwrap();
    assert!(planned.len() >= 2, "{} shards", planned.len());
    // The crash: every other shard never stored, nor the mark.
    let client = redis::Client::open(redis_url()).unwrap();
    let mut con = client.get_multiplexed_async_connection().await.unwrap();
    let key = |name: &str| format!("bs:{{{scan}}}:{name}");
    for lost in planned.iter().skip(1).step_by(2) {
        redis::pipe()
            .del(key(&format!("shard:{}", lost.id)))
            .srem(key("shards"), &lost.id)
            .lrem(key("pending"), 0, &lost.id)
            .query_async::<()>(&mut con)
            .await
            .unwrap();
    }
    redis::cmd("HDEL")
        .arg(key("meta"))
        .arg("planned")
        .query_async::<()>(&mut con)
        .await
        .unwrap();

    let mut worker = fleet.spawn_worker("half", &[]);
    assert!(wait_exit(&mut worker, Duration::from_secs(120)).success());
    let refused = fleet.command(&["merge"]).output().unwrap();
    assert_eq!(refused.status.code(), Some(75), "{}", stderr(&refused));
    assert!(
        stderr(&refused).contains("is not planned completely"),
        "{}",
        stderr(&refused)
    );

    // The bucket changes, then the plan is made again.
    let added: BTreeMap<String, Seeded> = (0..300)
        .map(|i| (format!("h{}/x{i:04}", i % 3), Seeded::default()))
        .chain((0..200).map(|i| (format!("n/{i:04}"), Seeded::default())))
        .collect();
    s3.seed(&bucket, &added).await;
    fleet.run_ok(&plan);
    let ranges: Vec<_> = queue
        .shard_records()
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.shard)
        .collect();
    assert_eq!(overlapping(&ranges), None, "no shard overlaps a stored one");
    assert!(uncovered("", &ranges).is_empty(), "the shards cover the bucket");
    let mut worker = fleet.spawn_worker("rest", &[]);
    assert!(wait_exit(&mut worker, Duration::from_secs(120)).success());
    fleet.run_ok(&["merge"]);
    // Objects there for the whole scan: each exactly once; objects created
    // during it: at most once (those in ranges done before are not seen).
    let result = s3.read(&out, "r/result.jsonl").await;
    let keys: Vec<String> = String::from_utf8(result.clone())
        .unwrap()
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["key"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert!(keys.windows(2).all(|w| w[0] < w[1]), "in key order, none twice");
    let mut records = parse_records(&result);
    assert!(records
        .keys()
        .all(|k| seeded.contains_key(k) || added.contains_key(k)));
    records.retain(|k, _| seeded.contains_key(k));
    assert_matches_seed(&records, &seeded);
}

/// A scan writing at the root of a bucket (`--output s3://OUT/`, the CRD's
/// `output.prefix: ""`) that also holds the user's own `data/` and `parts/`:
/// the merge deletes only what the scan wrote (its parts are under
/// `parts/SCAN/`); a dataset beside objects bucketscan did not write is
/// refused before any object is read, and nothing is deleted. Before the
/// fix, the merge deleted everything under `parts/` and the dataset merge
/// everything under `data/`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scan_at_the_root_of_a_shared_bucket_deletes_only_what_it_wrote() {
    let s3 = versitygw();
    let bucket = s3.bucket("root-src").await;
    let out = s3.bucket("root-out").await;
    let seeded: BTreeMap<String, Seeded> = (0..300)
        .map(|i| (format!("k/{i:04}"), Seeded::default()))
        .collect();
    s3.seed(&bucket, &seeded).await;
    let theirs: BTreeMap<String, Seeded> = ["data/mine.csv", "parts/mine.txt", "parts/s1/done.json"]
        .into_iter()
        .map(|k| {
            (
                k.to_string(),
                Seeded {
                    size: 5,
                    ..Seeded::default()
                },
            )
        })
        .collect();
    s3.seed(&out, &theirs).await;
    let fleet = Fleet::new(s3.clone(), redis_url(), format!("root-{}", std::process::id()));
    let root = format!("s3://{out}/");
    fleet.plan(&bucket, &root, &["--target-shards", "4"]);
    let mut worker = fleet.spawn_worker("only", &[]);
    assert!(wait_exit(&mut worker, Duration::from_secs(300)).success());
    fleet.run_ok(&["merge"]);
    assert_matches_seed(&parse_records(&s3.read(&out, "result.jsonl").await), &seeded);
    for key in theirs.keys() {
        assert_eq!(s3.read(&out, key).await.len(), 5, "{key} is the user's: kept");
    }
    assert_eq!(s3.key_count(&out, &format!("parts/{}/", fleet.scan)).await, 0);

    // A dataset at the root would mix its files with data/mine.csv.
    let dataset = fleet.on_scan(format!("root-ds-{}", std::process::id()));
    let refused = dataset
        .command(&[
            "plan", "--bucket", &bucket, "--output", &root, "--layout", "dataset",
        ])
        .output()
        .unwrap();
    assert!(!refused.status.success());
    let said = stderr(&refused);
    assert!(
        said.contains("data/mine.csv") && said.contains("bucketscan did not write it"),
        "{said}"
    );
    for key in theirs.keys() {
        assert_eq!(s3.read(&out, key).await.len(), 5, "{key} is the user's: kept");
    }
}

/// A dataset scan written where an earlier scan's dataset is: the new files
/// replace the old, and the old files the new ones do not overwrite (named
/// in the earlier result's manifest) are deleted, so readers of `data/` see
/// only the new result; an object there that no bucketscan result names
/// stops the merge before it writes anything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dataset_replaces_an_earlier_result_and_nothing_else() {
    let s3 = versitygw();
    let bucket = s3.bucket("repl-src").await;
    let out = s3.bucket("repl-out").await;
    let seeded: BTreeMap<String, Seeded> = (0..200)
        .map(|i| (format!("k{i:04}"), Seeded::default()))
        .collect();
    s3.seed(&bucket, &seeded).await;
    // An earlier result of 4 files (the new one has 1).
    let earlier: BTreeMap<String, Seeded> = (0..4)
        .map(|n| {
            (
                format!("ds/data/{n:06}.jsonl"),
                Seeded {
                    size: 3,
                    ..Seeded::default()
                },
            )
        })
        .collect();
    s3.seed(&out, &earlier).await;
    let files: Vec<serde_json::Value> = earlier
        .keys()
        .map(|k| serde_json::json!({ "location": format!("s3://{out}/{k}") }))
        .collect();
    let manifest = serde_json::json!({ "scan": "earlier", "files": files });
    let client = s3.client();
    let put =
        |key: &'static str, body: Vec<u8>| client.put_object().bucket(&out).key(key).body(body.into()).send();
    put("ds/manifest.json", serde_json::to_vec(&manifest).unwrap())
        .await
        .unwrap();
    let fleet = Fleet::new(s3.clone(), redis_url(), format!("repl-{}", std::process::id()));
    let to = format!("s3://{out}/ds/");
    let plan = [
        "plan", "--bucket", &bucket, "--output", &to, "--layout", "dataset",
    ];
    fleet.run_ok(&plan);
    let mut worker = fleet.spawn_worker("only", &[]);
    assert!(wait_exit(&mut worker, Duration::from_secs(300)).success());
    // Someone puts a file of their own there before the merge: refused,
    // nothing deleted.
    put("ds/data/theirs.jsonl", b"{}\n".to_vec()).await.unwrap();
    let refused = fleet.command(&["merge"]).output().unwrap();
    assert!(!refused.status.success());
    assert!(
        stderr(&refused).contains("ds/data/theirs.jsonl"),
        "{}",
        stderr(&refused)
    );
    assert_eq!(s3.key_count(&out, "ds/data/").await, 5);
    s3.delete(&out, "ds/data/theirs.jsonl").await;
    fleet.run_ok(&["merge"]);
    let manifest: serde_json::Value =
        serde_json::from_slice(&s3.read(&out, "ds/manifest.json").await).unwrap();
    let files = manifest["files"].as_array().unwrap();
    assert_eq!(files.len(), 1, "{manifest}");
    assert_eq!(
        s3.key_count(&out, "ds/data/").await,
        1,
        "the earlier result's other files are gone"
    );
    assert_matches_seed(
        &parse_records(&s3.read(&out, "ds/data/part-00000-0000.jsonl").await),
        &seeded,
    );
}

/// The merge finds each recorded part's size in one LIST of the parts; a
/// store whose LIST lags behind its writes leaves one out. The part is asked
/// for by name before it counts as missing, and the result is exact.
/// Before: `recorded part ... is missing`, and the scan failed for good.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_part_the_listing_does_not_show_yet_is_found_by_name() {
    let s3 = versitygw();
    let bucket = s3.bucket("lagging-list").await;
    let out = s3.bucket("lagging-list-out").await;
    let seeded: BTreeMap<String, Seeded> = (0..400)
        .map(|i| (format!("k{i:04}"), Seeded::default()))
        .collect();
    s3.seed(&bucket, &seeded).await;
    let fleet = Fleet::new(s3.clone(), redis_url(), format!("lag-{}", std::process::id()));
    let to = format!("s3://{out}/r/");
    fleet.plan(&bucket, &to, &["--target-shards", "2"]);
    let mut worker = fleet.spawn_worker("only", &[]);
    assert!(wait_exit(&mut worker, Duration::from_secs(300)).success());
    // Every LIST of the parts leaves out the first part it would show.
    let hid = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let hiding = hid.clone();
    let proxy = fault_proxy::start_rewriting(
        s3.endpoint.clone(),
        |_| None,
        move |req, _, body| {
            let lists_parts = req.method == "GET"
                && req
                    .uri
                    .query()
                    .is_some_and(|q| q.contains("list-type=2") && q.contains("parts"));
            let text = String::from_utf8_lossy(body).into_owned();
            let (Some(start), Some(end)) = (text.find("<Contents>"), text.find("</Contents>")) else {
                return;
            };
            if lists_parts && text[start..end].contains(".jsonl") {
                let hidden = format!("{}{}", &text[..start], &text[end + "</Contents>".len()..]);
                *body = bytes::Bytes::from(hidden);
                hiding.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
        },
    )
    .await;
    let merger = fleet.through(Server {
        endpoint: proxy.url.clone(),
        ..s3.clone()
    });
    merger.run_ok(&["merge"]);
    assert!(
        hid.load(std::sync::atomic::Ordering::SeqCst) > 0,
        "a part was hidden"
    );
    assert_matches_seed(&parse_records(&s3.read(&out, "r/result.jsonl").await), &seeded);
}

/// What the operator does for an active scan on every reconcile, against
/// the test's Redis (operator/src/controller/redis_user.rs `refresh`, and
/// `apply`'s replan): load the queue's functions when Redis lacks them,
/// set the scan's user again (a restarted Redis forgot both), and plan
/// again from S3 when Redis lost a planned scan. Every `every` until
/// `stop`; errors (Redis down) are tried again next time, as reconciles are.
async fn operator_reconciles(
    redis: String,
    scan: String,
    password: String,
    spec: Option<bucketscan_core::fleet::spec::ScanSpec>,
    s3: std::sync::Arc<bucketscan_core::s3::S3>,
    every: Duration,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> u32 {
    use bucketscan_core::fleet::queue::{Queue, RedisConfig};
    let mut config = RedisConfig::new(&redis);
    config.patience = Duration::from_secs(1);
    let (mut replans, mut planned) = (0, false);
    while !stop.load(std::sync::atomic::Ordering::SeqCst) {
        tokio::time::sleep(every).await;
        let Ok(admin) = config.connect().await else {
            continue;
        };
        if admin.load_functions().await.is_err() || admin.set_scan_user(&scan, &password).await.is_err() {
            continue;
        }
        let Some(spec) = &spec else { continue };
        // Planned before (the scan's Planned condition), and Redis has no
        // plan now: it lost the scan.
        let queue = Queue::on(&admin, &scan, "operator", Duration::from_secs(30));
        match queue.plan_complete().await {
            Ok(Some(_)) => planned = true,
            Ok(None) if planned => {
                let replanned = bucketscan_core::fleet::recovery::replan(&s3, spec, &queue).await;
                replans += u32::from(replanned.is_ok());
            }
            _ => {}
        }
    }
    replans
}

/// A scan run by its own Redis user (FCALL only, as the operator's pods
/// are) through a Redis crash while the plan runs and one mid-scan: Redis
/// comes back without the user (and, without persistence, without the
/// functions and the scan); the planner and the workers wait for the
/// operator to set them again (WRONGPASS and missing functions are
/// transient), the operator plans again what Redis lost, and the result
/// is exact.
async fn a_redis_restart_with_scan_users_ends_exact(persist: bool) {
    use bucketscan_core::fleet::queue::{scan_user, url_with_user, RedisConfig};
    let tag = if persist { "su-aof" } else { "su-mem" };
    let dir = temp_path(&format!("{tag}-aof"));
    std::fs::create_dir_all(&dir).unwrap();
    let dir = dir.to_str().unwrap().to_string();
    let mut redis = PrivateRedis::start_with(move |port| {
        let mut args = vec!["--port".to_string(), port.to_string()];
        if persist {
            args.extend(["--appendonly", "yes", "--appendfsync", "always", "--dir", &dir].map(String::from));
        }
        args
    });
    let s3 = versitygw();
    let bucket = s3.bucket(tag).await;
    let out = s3.bucket(&format!("{tag}-out")).await;
    let seeded: BTreeMap<String, Seeded> = (0..4000)
        .map(|i| (format!("s{}/{i:05}", i % 4), Seeded::default()))
        .collect();
    s3.seed(&bucket, &seeded).await;

    // The operator sets the scan's user and loads the functions before
    // any pod starts.
    let scan = tag.to_string();
    let password = hex::encode(rand::random::<[u8; 16]>());
    let admin = RedisConfig::new(redis.url()).connect().await.unwrap();
    admin.load_functions().await.unwrap();
    admin.set_scan_user(&scan, &password).await.unwrap();
    let url = url_with_user(&redis.url(), &scan_user(&scan), &password).unwrap();
    let fleet = Fleet::new(s3.clone(), url.clone(), scan.clone());
    let spec = scan_spec(&bucket, &out, "r/", &scan);
    // Redis goes down as the plan starts, and comes back without the
    // scan's user (and without functions, unless it persists).
    redis.crash();
    let output = format!("s3://{out}/r/");
    let plan_log = temp_path(&format!("{tag}-plan.log"));
    let mut planner = fleet
        .command(&[
            "plan",
            "--bucket",
            &bucket,
            "--output",
            &output,
            "--min-shard-objects",
            "500",
        ])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&plan_log).unwrap())
        .spawn()
        .unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    redis.restart();
    // The operator's next reconcile comes a while later: meanwhile the
    // planner is refused (WRONGPASS) and waits.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reconciles = tokio::spawn(operator_reconciles(
        redis.url(),
        scan.clone(),
        password.clone(),
        Some(spec),
        s3.s3().await,
        Duration::from_millis(1500),
        stop.clone(),
    ));

    let planned = wait_exit(&mut planner, Duration::from_secs(90));
    let plan_log = std::fs::read_to_string(&plan_log).unwrap();
    assert!(planned.success(), "the plan: {planned:?}\n{plan_log}");

    // Mid-scan: the workers (restarted when they exit, as the Deployment's
    // pods are) ride out a crash that again takes the user away.
    let pace = ["--max-rate", "300"];
    let mut spawned = 0;
    let mut spawn = |fleet: &Fleet| {
        spawned += 1;
        fleet.spawn_worker(&format!("w{spawned}"), &pace)
    };
    let mut workers = vec![spawn(&fleet), spawn(&fleet)];
    fleet.wait_for_heads(1200).await;
    redis.crash_and_restart(Duration::from_secs(2));
    let mut admin_config = RedisConfig::new(redis.url());
    admin_config.patience = Duration::from_secs(1);
    let finished = async || {
        let Ok(admin) = admin_config.connect().await else {
            return false;
        };
        let queue = bucketscan_core::fleet::queue::Queue::on(&admin, &scan, "t", Duration::from_secs(30));
        let (Ok(Some(_)), Ok(counts)) = (queue.plan_complete().await, queue.counts().await) else {
            return false;
        };
        counts.pending + counts.leased == 0 && counts.done > 0
    };
    let deadline = Instant::now() + Duration::from_secs(180);
    let mut exits = Vec::new();
    loop {
        for w in &mut workers {
            if let Some(status) = w.try_wait().unwrap() {
                exits.push(status);
                if !finished().await {
                    *w = spawn(&fleet);
                }
            }
        }
        if finished().await {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the scan did not finish; worker exits {exits:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    for w in &mut workers {
        let status = wait_exit(w, Duration::from_secs(60));
        assert!(status.success() || status.code() == Some(75), "{status:?}");
    }
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let replans = reconciles.await.unwrap();
    assert_eq!(replans > 0, !persist, "replanned only what Redis lost: {replans}");
    assert!(
        exits.iter().all(|s| s.success() || s.code() == Some(75)),
        "a worker failed for good: {exits:?}"
    );

    fleet.run_ok(&["merge"]);
    assert_matches_seed(&parse_records(&s3.read(&out, "r/result.jsonl").await), &seeded);
    let manifest: serde_json::Value =
        serde_json::from_slice(&s3.read(&out, "r/manifest.json").await).unwrap();
    assert_eq!(manifest["counts"]["objects"], 4000, "{manifest}");
    assert!(
        plan_log.contains("WRONGPASS") || plan_log.contains("authentication failed"),
        "the planner waited for its user: {plan_log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_restart_without_persistence_with_scan_users_ends_exact() {
    a_redis_restart_with_scan_users_ends_exact(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_restart_with_persistence_with_scan_users_ends_exact() {
    a_redis_restart_with_scan_users_ends_exact(true).await;
}

/// `plan` stores the filter in the scan's spec; every worker applies it to
/// its listing (no HEAD for what it leaves out), the live counters count
/// those apart as `filtered`, and the manifest records the filter (in its
/// spec) with the count.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_filtered_scan_is_planned_run_and_merged_with_its_filter() {
    let s3 = moto();
    let bucket = s3.bucket("filter-fleet").await;
    let out = s3.bucket("filter-fleet-out").await;
    let seeded: BTreeMap<String, Seeded> = (0..600)
        .map(|i| {
            let key = format!(
                "d/{:02}/{i:04}.{}",
                i % 7,
                if i % 3 == 0 { "csv" } else { "json" }
            );
            (
                key,
                Seeded {
                    size: i % 10,
                    metadata: Default::default(),
                },
            )
        })
        .collect();
    s3.seed(&bucket, &seeded).await;
    let fleet = Fleet::new(s3.clone(), redis_url(), format!("filters-{}", std::process::id()));
    fleet.plan(
        &bucket,
        &format!("s3://{out}/f/"),
        &[
            "--target-shards",
            "4",
            "--min-shard-objects",
            "50",
            "--include",
            "d/*/*.csv",
            "--exclude",
            "d/00/**",
            "--min-size",
            "1",
        ],
    );
    let mut worker = fleet.spawn_worker("only", &[]);
    assert!(wait_exit(&mut worker, Duration::from_secs(600)).success());
    fleet.run_ok(&["merge"]);
    let kept: BTreeMap<String, Seeded> = seeded
        .into_iter()
        .filter(|(k, o)| k.ends_with(".csv") && !k.starts_with("d/00/") && o.size >= 1)
        .collect();
    assert_matches_seed(&parse_records(&s3.read(&out, "f/result.jsonl").await), &kept);
    let manifest: serde_json::Value =
        serde_json::from_slice(&s3.read(&out, "f/manifest.json").await).unwrap();
    assert_eq!(
        manifest["spec"]["filter"],
        serde_json::json!({"min_size": 1, "include": ["d/*/*.csv"], "exclude": ["d/00/**"]})
    );
    assert_eq!(manifest["counts"]["objects"], kept.len(), "{manifest}");
    assert_eq!(manifest["progress"]["filtered"], 600 - kept.len(), "{manifest}");
    assert_eq!(
        fleet.counter("heads").await,
        kept.len() as u64,
        "no HEAD for what was left out"
    );
}

/// Three directories of 1,200 objects: the planner makes each one a shard.
fn three_directories() -> BTreeMap<String, Seeded> {
    ["a", "b", "c"]
        .iter()
        .flat_map(|dir| (0..1200).map(move |i| format!("{dir}/{i:04}")))
        .map(|key| (key, Seeded::default()))
        .collect()
}

const REFUSED_OBJECT: &str = "c/0007";

/// The LIST that starts the shard of `b/` (after `key_before("b/")`) is
/// refused for good (403), and so is the HEAD of one object: the shard of
/// `b/` dies, `c/0007` is an error record.
fn refuses_b_and_one_object(
    req: &http::request::Parts,
) -> Option<http::Response<http_body_util::Full<bytes::Bytes>>> {
    let heads_refused =
        req.method == "HEAD" && fault_proxy::object_key(req).as_deref() == Some(REFUSED_OBJECT);
    (fault_proxy::lists_after(req, "b.") || heads_refused)
        .then(|| fault_proxy::error_document(403, "AccessDenied", "Access Denied", &[]))
}

/// A fleet scan with a shard forced dead (a fault proxy refuses its LIST)
/// and one object refused: the merge writes the partial result of the other
/// shards exactly once and names the missing range; `retry` puts the dead
/// shard and the shard holding the error record back, workers (one killed
/// midway) scan them again against the healed store, and the merge ends
/// with the whole bucket, exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_shard_leaves_a_partial_result_and_a_retry_completes_it_exactly() {
    let FirstRound {
        s3,
        out,
        seeded,
        scan,
        healthy,
        _proxy,
        ..
    } = first_round("retry", refuses_b_and_one_object).await;
    // Not merged yet: nothing to retry.
    let early = healthy.queue_command(&["retry"]);
    assert!(!early.status.success());
    assert!(stderr(&early).contains("is not merged"), "{}", stderr(&early));

    // The default: the merge fails, naming the range, yet writes the result.
    let merged = healthy.command(&["merge"]).output().unwrap();
    assert!(!merged.status.success(), "{}", stderr(&merged));
    let err = stderr(&merged);
    assert!(
        err.contains("missing from the result") && err.contains("retry") && err.contains("access denied"),
        "{err}"
    );
    let manifest: serde_json::Value =
        serde_json::from_slice(&s3.read(&out, "s/manifest.json").await).unwrap();
    assert_eq!(manifest["partial"], true, "{manifest}");
    assert_eq!(manifest["shards_dead"], 1, "{manifest}");
    let missing = &manifest["dead"][0];
    assert!(
        missing["range"]["start_after"]
            .as_str()
            .unwrap()
            .starts_with("b.")
            && missing["last_error"].as_str().unwrap().contains("access denied"),
        "{manifest}"
    );
    let records = parse_records(&s3.read(&out, "s/result.jsonl").await);
    let live: Vec<&String> = seeded.keys().filter(|k| !k.starts_with("b/")).collect();
    assert_eq!(
        records.keys().collect::<Vec<_>>(),
        live,
        "every live record once, none of b/"
    );
    assert_eq!(manifest["counts"]["objects"], 2400, "{manifest}");
    assert_eq!(manifest["counts"]["errors"], 1, "{manifest}");
    assert!(
        records[REFUSED_OBJECT].error.is_some(),
        "{:?}",
        records[REFUSED_OBJECT]
    );
    // What a partial merge says is the caller's: exit 0 with a warning.
    let partial = healthy
        .command(&["merge", "--on-dead-shards", "partial"])
        .output()
        .unwrap();
    assert_success(&partial);
    assert!(
        stderr(&partial).contains("partial result"),
        "{}",
        stderr(&partial)
    );
    // The parts stay for the retry.
    assert!(s3.key_count(&out, &format!("s/parts/{scan}/")).await > 0);

    // Retry in place: the dead shard and the shard of the error record.
    let retried = healthy.queue_command(&["retry"]);
    assert_success(&retried);
    assert!(
        stderr(&retried).contains("retry 1: 2 shard(s) pending again"),
        "{}",
        stderr(&retried)
    );
    // Sent twice (a lost answer): one retry.
    let again = healthy.queue_command(&["retry", "--round", "1"]);
    assert_success(&again);
    assert!(stderr(&again).contains("nothing changed"), "{}", stderr(&again));

    // The store healed; one worker killed midway, two more finish.
    let before = healthy.counter("heads").await;
    let mut first = healthy.spawn_worker("r1", &["--max-rate", "300"]);
    let deadline = Instant::now() + Duration::from_secs(60);
    while healthy.counter("heads").await < before + 400 {
        assert!(Instant::now() < deadline, "the retry did not start");
        assert!(
            first.try_wait().unwrap().is_none(),
            "r1 ended before it was killed"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    first.kill().unwrap();
    first.wait().unwrap();
    let mut rest = [healthy.spawn_worker("r2", &[]), healthy.spawn_worker("r3", &[])];
    for w in &mut rest {
        assert!(wait_exit(w, Duration::from_secs(120)).success());
    }
    assert_success(&healthy.command(&["merge"]).output().unwrap());
    let manifest: serde_json::Value =
        serde_json::from_slice(&s3.read(&out, "s/manifest.json").await).unwrap();
    assert_eq!(manifest["partial"], false, "{manifest}");
    assert_eq!(manifest["retries"], 1, "{manifest}");
    assert_eq!(manifest["shards_dead"], 0, "{manifest}");
    assert_eq!(manifest["counts"]["objects"], 3600, "{manifest}");
    assert_eq!(
        manifest["counts"]["errors"].as_u64().unwrap_or(0),
        0,
        "{manifest}"
    );
    assert_matches_seed(&parse_records(&s3.read(&out, "s/result.jsonl").await), &seeded);
    // Complete without errors: the parts go, and there is nothing to retry.
    assert_eq!(s3.key_count(&out, &format!("s/parts/{scan}/")).await, 0);
    let nothing = healthy.queue_command(&["retry"]);
    assert!(!nothing.status.success());
    assert!(
        stderr(&nothing).contains("nothing to retry"),
        "{}",
        stderr(&nothing)
    );
}

/// The scan's `meta` field `field`, read as the admin.
async fn meta_field(scan: &str, field: &str) -> Option<String> {
    let client = redis::Client::open(redis_url()).unwrap();
    let mut con = client.get_multiplexed_async_connection().await.unwrap();
    redis::cmd("HGET")
        .arg(format!("bs:{{{scan}}}:meta"))
        .arg(field)
        .query_async(&mut con)
        .await
        .unwrap()
}

/// A scan of `a/`, `b/` and `c/` (three shards, two failures to die, output
/// under `s3://OUT/s/`) whose first round ran: one worker through a fault
/// proxy that answers as `answer` says.
struct FirstRound {
    s3: Server,
    out: String,
    seeded: BTreeMap<String, Seeded>,
    scan: String,
    /// Straight to the store, and through the proxy.
    healthy: Fleet,
    faulty: Fleet,
    _proxy: fault_proxy::FaultProxy,
}

async fn first_round(
    name: &str,
    answer: impl Fn(&http::request::Parts) -> Option<http::Response<http_body_util::Full<bytes::Bytes>>>
        + Send
        + Sync
        + 'static,
) -> FirstRound {
    let s3 = versitygw();
    let bucket = s3.bucket(name).await;
    let out = s3.bucket(&format!("{name}-out")).await;
    let seeded = three_directories();
    s3.seed(&bucket, &seeded).await;
    let proxy = fault_proxy::start(s3.endpoint.clone(), answer, |_, _| {}).await;
    let scan = format!("{name}-{}", std::process::id());
    let healthy = Fleet::new(s3.clone(), redis_url(), scan.clone());
    let faulty = Fleet::new(
        Server {
            endpoint: proxy.url.clone(),
            ..s3.clone()
        },
        redis_url(),
        scan.clone(),
    );
    healthy.plan(
        &bucket,
        &format!("s3://{out}/s/"),
        &[
            "--max-failures",
            "2",
            "--target-shards",
            "3",
            "--min-shard-objects",
            "1000",
        ],
    );
    let mut worker = faulty.spawn_worker("w", &[]);
    assert!(wait_exit(&mut worker, Duration::from_secs(120)).success());
    FirstRound {
        s3,
        out,
        seeded,
        scan,
        healthy,
        faulty,
        _proxy: proxy,
    }
}

/// Redis rolled back past a retry round after that round's merge (a
/// failover to a replica that lagged the retry): it holds the earlier
/// round's partial manifest and shard records again, while manifest.json in
/// S3 is the later, complete round's and that merge deleted the parts. The
/// next merge adopts the later round (rounds only grow), so nothing ends on
/// the earlier result, and a retry of the earlier round's dead shard (which
/// would need the deleted parts) is not taken: nothing is left to retry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_rolled_back_past_a_merged_retry_round_adopts_that_round() {
    let FirstRound {
        s3,
        out,
        seeded,
        scan,
        healthy,
        _proxy,
        ..
    } = first_round("rolled-round", |req| {
        fault_proxy::lists_after(req, "b.")
            .then(|| fault_proxy::error_document(403, "AccessDenied", "Access Denied", &[]))
    })
    .await;
    healthy.run_ok(&["merge", "--on-dead-shards", "partial"]);
    let mut con = redis::Client::open(redis_url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let round_0 = snapshot::Snapshot::take(&mut con, &scan).await;

    // Round 1 scans b/ again and merges the whole bucket; its parts go.
    assert_success(&healthy.queue_command(&["retry"]));
    let mut worker = healthy.spawn_worker("r", &[]);
    assert!(wait_exit(&mut worker, Duration::from_secs(120)).success());
    healthy.run_ok(&["merge"]);
    assert_eq!(s3.key_count(&out, &format!("s/parts/{scan}/")).await, 0);

    // Redis back at round 0, merged and partial.
    round_0.restore(&mut con).await;
    assert_eq!(meta_field(&scan, "retries").await, None);
    let merged = healthy.run_ok(&["merge"]);
    assert!(
        !stderr(&merged).contains("partial result"),
        "ended on the earlier round: {}",
        stderr(&merged)
    );
    assert_eq!(meta_field(&scan, "retries").await.as_deref(), Some("1"));
    let recorded: serde_json::Value =
        serde_json::from_str(&meta_field(&scan, "manifest").await.unwrap()).unwrap();
    assert_eq!(
        (recorded["retries"].clone(), recorded["partial"].clone()),
        (1.into(), false.into())
    );
    let nothing = healthy.queue_command(&["retry"]);
    assert!(
        !nothing.status.success() && stderr(&nothing).contains("nothing to retry"),
        "{}",
        stderr(&nothing)
    );
    let manifest: serde_json::Value =
        serde_json::from_slice(&s3.read(&out, "s/manifest.json").await).unwrap();
    assert_eq!(manifest["retries"], 1, "{manifest}");
    assert_matches_seed(&parse_records(&s3.read(&out, "s/result.jsonl").await), &seeded);
}

/// What a merge of round 0 stopped midway did once let go, after another
/// merge of round 0 ended the scan, a retry scanned again and round 1
/// merged (see [`outlived_merge`]).
struct Outlived {
    first: FirstRound,
    /// Round 1's result, before the stale merge went on.
    round_1: Vec<u8>,
    /// The stale merge's exit and stderr.
    succeeded: bool,
    err: String,
}

/// A merge of round 0 stopped (its pod on a partitioned node) at the first
/// request `hold` picks, while another merge of round 0 ends the scan, a
/// retry scans again and round 1 merges (keeping its parts: one object is
/// still refused); then let go.
async fn outlived_merge(
    name: &str,
    hold: impl Fn(&http::request::Parts) -> bool + Send + Sync + 'static,
) -> Outlived {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let refusing_b = Arc::new(AtomicBool::new(true));
    let holding_next = Arc::new(AtomicBool::new(false));
    let holding = Arc::new(AtomicBool::new(false));
    let first = first_round(name, {
        let (refusing_b, holding_next, holding) = (refusing_b.clone(), holding_next.clone(), holding.clone());
        move |req| {
            if hold(req) && holding_next.swap(false, Ordering::SeqCst) {
                // Time for the test to stop the merge that asked.
                holding.store(true, Ordering::SeqCst);
                std::thread::sleep(Duration::from_secs(2));
                return None;
            }
            let refused_b = refusing_b.load(Ordering::SeqCst) && fault_proxy::lists_after(req, "b.");
            let refused_head =
                req.method == "HEAD" && fault_proxy::object_key(req).as_deref() == Some(REFUSED_OBJECT);
            (refused_b || refused_head)
                .then(|| fault_proxy::error_document(403, "AccessDenied", "Access Denied", &[]))
        }
    })
    .await;

    holding_next.store(true, Ordering::SeqCst);
    let mut stale = first
        .faulty
        .command(&["merge", "--on-dead-shards", "partial"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !holding.load(Ordering::SeqCst) {
        assert!(Instant::now() < deadline, "the merge never sent the request held");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    unsafe { libc_kill(stale.id() as i32, 19) }; // SIGSTOP
                                                 // Past the proxy's hold: the request held is through.
    tokio::time::sleep(Duration::from_secs(3)).await;

    first.healthy.run_ok(&["merge", "--on-dead-shards", "partial"]);
    refusing_b.store(false, Ordering::SeqCst);
    assert_success(&first.healthy.queue_command(&["retry"]));
    let mut worker = first.faulty.spawn_worker("r", &[]);
    assert!(wait_exit(&mut worker, Duration::from_secs(120)).success());
    first.faulty.run_ok(&["merge"]);
    let round_1 = first.s3.read(&first.out, "s/result.jsonl").await;
    let manifest: serde_json::Value =
        serde_json::from_slice(&first.s3.read(&first.out, "s/manifest.json").await).unwrap();
    assert_eq!(
        (manifest["retries"].clone(), manifest["partial"].clone()),
        (1.into(), false.into())
    );

    unsafe { libc_kill(stale.id() as i32, 18) }; // SIGCONT
    let status = wait_exit(&mut stale, Duration::from_secs(60));
    let mut err = String::new();
    std::io::Read::read_to_string(&mut stale.stderr.take().unwrap(), &mut err).unwrap();
    Outlived {
        first,
        round_1,
        succeeded: status.success(),
        err,
    }
}

/// Stopped while it lists the parts, the round-0 merge writes nothing once
/// let go: round 1's result, manifest.json and manifest in Redis stay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_merge_that_outlives_a_retry_writes_nothing_over_the_later_round() {
    let Outlived {
        first,
        round_1,
        succeeded,
        err,
    } = outlived_merge("stale-merge", |req| {
        req.method == "GET" && req.uri.query().unwrap_or_default().contains("parts")
    })
    .await;
    let FirstRound { s3, out, scan, .. } = &first;
    assert!(!succeeded, "the stale merge succeeded: {err}");
    assert!(err.contains("retried since (round 1)"), "{err}");
    let manifest: serde_json::Value = serde_json::from_slice(&s3.read(out, "s/manifest.json").await).unwrap();
    assert_eq!(manifest["retries"], 1, "{manifest}");
    assert_eq!(
        s3.read(out, "s/result.jsonl").await,
        round_1,
        "the result was overwritten"
    );
    let records = parse_records(&round_1);
    assert!(records.keys().any(|k| k.starts_with("b/")), "round 1 holds b/");
    let recorded: serde_json::Value =
        serde_json::from_str(&meta_field(scan, "manifest").await.unwrap()).unwrap();
    assert_eq!(recorded["retries"], 1, "{recorded}");
}

/// Stopped past its last check, while its manifest.json is written, the
/// round-0 merge stores nothing in Redis once let go: the step that stores
/// the manifest there refuses a round Redis no longer records, so the
/// manifest Redis holds stays round 1's. (manifest.json itself is a check,
/// then a write: docs/operations.md says what is left there.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_merge_stopped_past_its_check_stores_no_manifest_over_the_later_round() {
    let Outlived {
        first,
        succeeded,
        err,
        ..
    } = outlived_merge("stale-store", |req| {
        req.method == "PUT" && req.uri.path().ends_with("manifest.json")
    })
    .await;
    assert!(!succeeded, "the stale merge succeeded: {err}");
    assert!(err.contains("retried since (round 1)"), "{err}");
    let recorded: serde_json::Value =
        serde_json::from_str(&meta_field(&first.scan, "manifest").await.unwrap()).unwrap();
    assert_eq!(
        recorded["retries"], 1,
        "the stale merge stored its manifest: {recorded}"
    );
    assert_eq!(
        meta_field(&first.scan, "manifest@0").await,
        None,
        "the stale merge's staged copy is gone"
    );
}

/// Workers started before their scan is planned (the operator makes them
/// while it plans) wait for the plan and then scan it whole, and a merge
/// started before the last shard ends waits for it; without
/// `--wait-for-plan` a worker refuses a scan that is not planned, and a
/// waiting worker told to stop ends at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_and_a_merge_started_early_wait_for_the_plan_and_the_shards() {
    let s3 = versitygw();
    let bucket = s3.bucket("early").await;
    let out = s3.bucket("early-out").await;
    let seeded: BTreeMap<String, Seeded> = (0..1500)
        .map(|i| (format!("e/{:02}/{i:05}", i % 10), Seeded::default()))
        .collect();
    s3.seed(&bucket, &seeded).await;
    let fleet = Fleet::new(s3.clone(), redis_url(), format!("early-{}", std::process::id()));

    let refused = fleet.command(&["run", "--name", "eager"]).output().unwrap();
    assert!(!refused.status.success());
    assert!(
        stderr(&refused).contains("is not planned in this Redis"),
        "{}",
        stderr(&refused)
    );

    let mut stopped = fleet.spawn_worker("stopped", &["--wait-for-plan"]);
    let mut early: Vec<Child> = ["early-a", "early-b"]
        .iter()
        .map(|name| {
            let paced = ["--wait-for-plan", "--progress-ms", "500", "--max-rate", "400"];
            fleet.spawn_worker(name, &paced)
        })
        .collect();
    // Long enough for a worker that does not wait to have found an empty
    // queue and ended.
    tokio::time::sleep(Duration::from_secs(2)).await;
    for worker in early.iter_mut().chain([&mut stopped]) {
        assert!(
            worker.try_wait().unwrap().is_none(),
            "a worker ended before the plan"
        );
    }
    unsafe { libc_kill(stopped.id() as i32, 15) };
    assert!(wait_exit(&mut stopped, Duration::from_secs(10)).success());
    let log = std::fs::read_to_string(fleet.log_path("stopped")).unwrap();
    assert!(log.contains("stopped while waiting for the plan"), "{log}");
    // A waiting merge told to stop (its pod evicted) merged nothing and
    // says so as transient (75): the operator merges again, the scan does
    // not fail.
    let mut evicted = fleet
        .command(&["merge", "--wait-for-shards"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    unsafe { libc_kill(evicted.id() as i32, 15) };
    assert_eq!(wait_exit(&mut evicted, Duration::from_secs(10)).code(), Some(75));

    let output = format!("s3://{out}/early/");
    fleet.plan(
        &bucket,
        &output,
        &["--target-shards", "6", "--min-shard-objects", "100"],
    );
    // A merge that does not wait refuses the unfinished scan, for a while
    // (75: try again later); one that waits merges once the shards end.
    let refused = fleet.command(&["merge"]).output().unwrap();
    assert_eq!(refused.status.code(), Some(75), "{}", stderr(&refused));
    let merge_log = fleet.log_path("merge");
    let mut merge = fleet
        .command(&["merge", "--wait-for-shards"])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&merge_log).unwrap())
        .spawn()
        .unwrap();
    for worker in early.iter_mut() {
        assert!(wait_exit(worker, Duration::from_secs(120)).success());
    }
    assert!(wait_exit(&mut merge, Duration::from_secs(60)).success());
    let log = std::fs::read_to_string(&merge_log).unwrap();
    assert!(log.contains("waiting for the last shards"), "{log}");
    let logs: Vec<String> = ["early-a", "early-b"]
        .iter()
        .map(|name| std::fs::read_to_string(fleet.log_path(name)).unwrap())
        .collect();
    assert!(
        logs.iter().all(|l| l.contains("waiting for the plan")),
        "{logs:?}"
    );
    assert!(logs.iter().all(|l| l.contains("shards done")), "{logs:?}");
    assert_matches_seed(
        &parse_records(&s3.read(&out, "early/result.jsonl").await),
        &seeded,
    );
}

/// `n` objects whose records are about 2 KB (a long metadata value), so that
/// a few thousand make parts the merge joins into 5 MiB ones.
fn wide_bucket(n: usize) -> BTreeMap<String, Seeded> {
    (0..n)
        .map(|i| {
            let note = format!("{i:05}-{}", "n".repeat(1800));
            let seeded = Seeded {
                size: 1,
                metadata: BTreeMap::from([("Note".to_string(), note)]),
            };
            (format!("w/{:02}/{i:05}", i % 16), seeded)
        })
        .collect()
}

/// The number logged as tracing field `field` (colours or not).
fn logged_number(log: &str, field: &str) -> Option<u64> {
    let at = log.find(field)? + field.len();
    log[at..]
        .chars()
        .skip_while(|c| !c.is_ascii_digit())
        .take_while(char::is_ascii_digit)
        .collect::<String>()
        .parse()
        .ok()
}

async fn multipart_uploads_left(s3: &Server, bucket: &str) -> usize {
    let listed = s3
        .client()
        .list_multipart_uploads()
        .bucket(bucket)
        .send()
        .await
        .unwrap();
    listed.uploads().len()
}

/// A merge started while the shards run (as the operator starts it in a
/// scan's last seconds) joins the finished shards' small parts into staged
/// objects, and copies those into the result in place of their parts once
/// the last shard ends: the same exact result, no upload left behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_merge_started_early_stages_finished_parts_and_copies_them() {
    let s3 = versitygw();
    let bucket = s3.bucket("ahead").await;
    let out = s3.bucket("ahead-out").await;
    let seeded = wide_bucket(12_000);
    s3.seed(&bucket, &seeded).await;
    let fleet = Fleet::new(s3.clone(), redis_url(), format!("ahead-{}", std::process::id()));
    fleet.plan(
        &bucket,
        &format!("s3://{out}/ahead/"),
        &["--target-shards", "16", "--min-shard-objects", "100"],
    );
    let merge_log = fleet.log_path("merge");
    let mut merge = fleet
        .command(&["merge", "--wait-for-shards"])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&merge_log).unwrap())
        .spawn()
        .unwrap();
    // Paced, a shard at a time: the scan lasts many of the merge's looks at
    // the shards, which end two at a time.
    let mut workers: Vec<Child> = ["ahead-a", "ahead-b"]
        .iter()
        .map(|name| fleet.spawn_worker(name, &["--max-rate", "400", "--shards-in-flight", "1"]))
        .collect();
    for worker in workers.iter_mut() {
        assert!(wait_exit(worker, Duration::from_secs(120)).success());
    }
    assert!(wait_exit(&mut merge, Duration::from_secs(60)).success());
    let log = std::fs::read_to_string(&merge_log).unwrap();
    assert!(log.contains("finished parts staged"), "{log}");
    let copied = log
        .find("staged objects are copied in place of their parts")
        .unwrap_or_else(|| panic!("nothing staged was taken: {log}"));
    let (parts, sources) = (
        logged_number(&log[copied..], "parts"),
        logged_number(&log[copied..], "sources"),
    );
    assert!(sources < parts, "{log}");
    // Copied on the server, not read again.
    assert!(logged_number(&log[copied..], "copied") >= Some(1), "{log}");
    assert_matches_seed(
        &parse_records(&s3.read(&out, "ahead/result.jsonl").await),
        &seeded,
    );
    assert_eq!(multipart_uploads_left(&s3, &out).await, 0);
    assert!(
        s3.keys(&out, "ahead/parts/").await.is_empty(),
        "staged objects go with the parts"
    );
}

/// A part object written again after it was staged (same size) is merged
/// from the part: the result is the parts as they are at the merge, byte
/// for byte.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_part_rewritten_after_it_was_staged_is_merged_from_the_part() {
    use bucketscan_core::fleet::merge::merge_with;
    use bucketscan_core::fleet::merge_ahead::{finished_runs, Ahead};
    use bucketscan_core::fleet::spec::ScanSpec;
    use tokio_util::sync::CancellationToken;

    let s3 = versitygw();
    let bucket = s3.bucket("rewritten").await;
    let out = s3.bucket("rewritten-out").await;
    s3.seed(&bucket, &wide_bucket(5000)).await;
    let fleet = Fleet::new(
        s3.clone(),
        redis_url(),
        format!("rewritten-{}", std::process::id()),
    );
    fleet.plan(
        &bucket,
        &format!("s3://{out}/r/"),
        &["--target-shards", "4", "--min-shard-objects", "100"],
    );
    let mut worker = fleet.spawn_worker("rewritten", &[]);
    assert!(wait_exit(&mut worker, Duration::from_secs(120)).success());

    let core = s3.s3().await;
    let [queue] = governing::queues(&fleet.scan, ["merger"]).await;
    let stop = CancellationToken::new();
    let (ahead, ()) = tokio::join!(Box::pin(Ahead::run(&core, &queue, &stop)), async {
        tokio::time::sleep(Duration::from_secs(3)).await;
        stop.cancel();
    });
    assert!(ahead.parts_staged() >= 2, "9.5 MB of small parts stage some");

    // The first part in key order is the first of the first staged object:
    // one byte of it changes, its size does not.
    let spec: ScanSpec = queue.spec().await.unwrap().unwrap();
    let keys: Vec<String> = finished_runs(&spec, &queue.merge_view().await.unwrap()).concat();
    let mut first = s3.read(&out, &keys[0]).await;
    let at = first.iter().position(|&b| b == b'n').unwrap();
    first[at] = b'N';
    s3.client()
        .put_object()
        .bucket(&out)
        .key(&keys[0])
        .body(first.into())
        .send()
        .await
        .unwrap();
    let mut expected = Vec::new();
    for key in &keys {
        expected.extend(s3.read(&out, key).await);
    }
    // On a thread of its own: the merge's future, unoptimised, is more
    // than a test thread's stack holds.
    let scan = fleet.scan.clone();
    std::thread::Builder::new()
        .stack_size(64 << 20)
        .spawn(move || {
            let runtime = tokio::runtime::Runtime::new().unwrap();
            runtime.block_on(async move {
                let [queue] = governing::queues(&scan, ["merger"]).await;
                Box::pin(merge_with(&scan, &queue, &core, ahead)).await.unwrap();
            })
        })
        .unwrap()
        .join()
        .unwrap();
    let result = s3.read(&out, "r/result.jsonl").await;
    assert!(result.len() > 5 << 20);
    assert!(
        result == expected,
        "the result is not the parts as they are at the merge"
    );
}
