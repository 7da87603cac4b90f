//! A fleet scan with a shard forced dead (every LIST of its prefix refused
//! by a fault proxy in front of versitygw) and one object refused (its HEAD
//! answered 403): the merge writes the partial result of the other shards
//! exactly once and names the missing range; `retry` puts the dead shard
//! and the shard holding the error record back, workers (one killed midway)
//! scan them again against the healed store, and the merge ends with the
//! whole bucket, exactly once.

mod common;
#[path = "common/fault_proxy.rs"]
mod fault_proxy;

use common::*;
use std::collections::BTreeMap;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn redis_url() -> String {
    std::env::var("BUCKETSCAN_TEST_REDIS_URL").expect("run the tests with `just test`")
}

struct Fleet {
    endpoint: String,
    s3: Server,
    scan: String,
}

impl Fleet {
    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(worker_bin());
        cmd.args(args)
            .args([
                "--redis",
                &redis_url(),
                "--scan",
                &self.scan,
                "--endpoint",
                &self.endpoint,
                "--path-style",
            ])
            .env("AWS_ACCESS_KEY_ID", &self.s3.access_key)
            .env("AWS_SECRET_ACCESS_KEY", &self.s3.secret_key)
            .env("AWS_REGION", "us-east-1")
            .env("AWS_EC2_METADATA_DISABLED", "true")
            .env("BUCKETSCAN_LOG", "info");
        cmd
    }

    /// `queue` commands (`retry`) take no endpoint.
    fn queue_command(&self, args: &[&str]) -> std::process::Output {
        Command::new(worker_bin())
            .args(args)
            .args(["--redis", &redis_url(), "--scan", &self.scan])
            .output()
            .unwrap()
    }

    fn spawn_worker(&self, name: &str, extra: &[&str]) -> Child {
        let mut args = vec![
            "run",
            "--name",
            name,
            "--lease-secs",
            "3",
            "--part-objects",
            "100",
            "--concurrency",
            "8",
        ];
        args.extend_from_slice(extra);
        let log = std::fs::File::create(temp_path(&format!("{}-{name}.log", self.scan))).unwrap();
        self.command(&args)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap()
    }
}

async fn heads(scan: &str) -> u64 {
    let client = redis::Client::open(redis_url()).unwrap();
    let mut con = client.get_multiplexed_async_connection().await.unwrap();
    let v: Option<u64> = redis::cmd("HGET")
        .arg(format!("bs:{{{scan}}}:counters"))
        .arg("heads")
        .query_async(&mut con)
        .await
        .unwrap();
    v.unwrap_or(0)
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
    let lists_b = req.method == "GET"
        && req
            .uri
            .query()
            .unwrap_or_default()
            .split('&')
            .any(|kv| kv.starts_with("start-after=b."));
    let heads_refused =
        req.method == "HEAD" && fault_proxy::object_key(req).as_deref() == Some(REFUSED_OBJECT);
    (lists_b || heads_refused).then(|| fault_proxy::error_document(403, "AccessDenied", "Access Denied", &[]))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_shard_leaves_a_partial_result_and_a_retry_completes_it_exactly() {
    let s3 = versitygw();
    let bucket = s3.bucket("retry").await;
    let out = s3.bucket("retry-out").await;
    let seeded = three_directories();
    s3.seed(&bucket, &seeded).await;
    let proxy = fault_proxy::start(s3.endpoint.clone(), refuses_b_and_one_object, |_, _| {}).await;
    let scan = format!("retry-{}", std::process::id());
    let healthy = Fleet {
        endpoint: s3.endpoint.clone(),
        s3: s3.clone(),
        scan: scan.clone(),
    };
    let faulty = Fleet {
        endpoint: proxy.url.clone(),
        s3: s3.clone(),
        scan: scan.clone(),
    };
    assert_success(
        &healthy
            .command(&[
                "plan",
                "--bucket",
                &bucket,
                "--output",
                &format!("s3://{out}/s/"),
                "--max-failures",
                "2",
                "--target-shards",
                "3",
                "--min-shard-objects",
                "1000",
            ])
            .output()
            .unwrap(),
    );
    // Not merged yet: nothing to retry.
    let early = healthy.queue_command(&["retry"]);
    assert!(!early.status.success());
    assert!(stderr(&early).contains("is not merged"), "{}", stderr(&early));

    let mut worker = faulty.spawn_worker("w", &[]);
    assert!(wait_exit(&mut worker, Duration::from_secs(120)).success());

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
    let before = heads(&scan).await;
    let mut first = healthy.spawn_worker("r1", &["--max-rate", "300"]);
    let deadline = Instant::now() + Duration::from_secs(60);
    while heads(&scan).await < before + 400 {
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
