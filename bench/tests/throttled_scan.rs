//! The single-process `bucketscan-worker scan` against the real store model
//! (synthetic-s3's, in process): a store of capacity C whose short queue
//! turns bursts away and which answers 1 % of all requests 503 SlowDown
//! whatever the load. The scan shares the fleet's governor
//! (`fleet::governed::govern_alone`): the throttled store slows it down to
//! its capacity, never ends it, and the sporadic 503s do not hold it below
//! it. Every object is in the output exactly once, with no error record.

#[path = "../../worker/tests/common/bin.rs"]
mod bin;

use bucketscan_bench::keyspace::{Keyspace, Layout};
use bucketscan_bench::server::{spawn_local, Config};
use bucketscan_bench::store::StoreModel;
use std::collections::BTreeSet;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

const OBJECTS: u64 = 3_000;
/// Requests per second the store serves: low enough that a debug build of
/// the worker on a busy 2-core machine drives it past its capacity without
/// being its own limit (at 1,000/s its HEADs took 6-9 ms of its own CPU
/// time, and its pacing released bursts).
const CAPACITY: f64 = 300.0;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scan_under_sporadic_and_capacity_503s_slows_to_the_store_and_ends_nothing() {
    let keyspace = Keyspace {
        objects: OBJECTS,
        layout: Layout::Flat,
    };
    let mut model = StoreModel::fixed(Duration::from_millis(1));
    model.capacity = Some(CAPACITY);
    // 15 requests' room: 64 HEADs in flight are turned away at once.
    model.queue_limit = Duration::from_millis(50);
    model.throttles = 0.01;
    let (url, stats) = spawn_local(Config::synthetic(keyspace, model)).await;
    let out = std::env::temp_dir().join(format!("throttled-scan-{}.jsonl", std::process::id()));
    let started = Instant::now();
    let mut cmd = std::process::Command::new(bin::worker_bin());
    cmd.args(["scan", "--bucket", "synthetic", "--quiet", "--concurrency", "64"])
        .args(["--endpoint", &url, "--path-style", "--output"])
        .arg(&out)
        .env("AWS_ACCESS_KEY_ID", "synthetic")
        .env("AWS_SECRET_ACCESS_KEY", "synthetic")
        .env("AWS_REGION", "us-east-1")
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .env_remove("AWS_PROFILE")
        .env_remove("AWS_SESSION_TOKEN");
    let output = tokio::task::spawn_blocking(move || cmd.output().expect("run bucketscan-worker"))
        .await
        .unwrap();
    let secs = started.elapsed().as_secs_f64();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains(" 0 errors"), "{stderr}");

    // Every object once, none an error record.
    let text = std::fs::read_to_string(&out).unwrap();
    std::fs::remove_file(&out).unwrap();
    let mut keys = BTreeSet::new();
    for line in text.lines() {
        let record: serde_json::Value = serde_json::from_str(line).unwrap();
        assert_eq!(record["status"], "ok", "{line}");
        assert!(
            keys.insert(record["key"].as_str().unwrap().to_string()),
            "{line} twice"
        );
    }
    let want: BTreeSet<String> = (0..OBJECTS).map(|i| keyspace.key(i)).collect();
    assert_eq!(keys, want);

    // The store pushed back both ways, and the scan was slowed to the store,
    // not below it: at least 0.4 C over the whole run, startup and listing
    // included (a debug build on a machine shared with builds measured
    // 0.49 C; the governor's precise claims are its unit tests'). The
    // governor before issue 29 cut for every sporadic 503 (some 3 a second
    // here) and sank to a fraction of that.
    let sporadic = stats.sporadic.load(Relaxed);
    let throttled = stats.throttled.load(Relaxed);
    let heads = stats.heads.load(Relaxed);
    assert!(sporadic >= 20, "sporadic 503s: {sporadic}");
    assert!(throttled > 0, "the capacity turned some away: {}", stats.json());
    let rate = heads as f64 / secs;
    assert!(
        rate >= 0.4 * CAPACITY,
        "{rate:.0} HEADs/s over {secs:.1} s against a capacity of {CAPACITY}: {}",
        stats.json()
    );
    eprintln!("{rate:.0} HEADs/s over {secs:.1} s: {}", stats.json());
}
