//! A scan's own Redis user (`fleet::queue::acl`) against the real
//! redis-server: with it the scan's pods run every queue step of their scan,
//! and reach nothing of another scan's, nor the key names or settings of
//! the server. The operator creates it for every scan (see
//! operator/src/controller/redis_user.rs).

use bucketscan_core::fleet::queue::library::LIBRARY;
use bucketscan_core::fleet::queue::{
    scan_user, url_with_user, Commit, Finish, Queue, QueueError, RedisConfig, Retried,
};
use bucketscan_core::keyspace::shard::Shard;
use std::time::Duration;

fn redis_url() -> String {
    std::env::var("BUCKETSCAN_TEST_REDIS_URL")
        .expect("BUCKETSCAN_TEST_REDIS_URL is not set: run the tests with `just test`")
}

fn scan_id(tag: &str) -> String {
    format!("{tag}.{}.{}", std::process::id(), rand::random::<u32>())
}

async fn queue_at(url: &str, scan: &str) -> Queue {
    Queue::connect(&RedisConfig::new(url), scan, "w", Duration::from_secs(30))
        .await
        .unwrap()
}

fn refused(result: redis::RedisResult<redis::Value>, what: &str) {
    let e = result.expect_err(what);
    let text = e.to_string().to_lowercase();
    assert!(
        text.contains("noperm") || text.contains("can't access"),
        "{what}: {e}"
    );
}

#[tokio::test]
async fn a_scan_user_runs_its_own_scan_and_reaches_nothing_else() {
    let (mine, theirs) = (scan_id("mine"), scan_id("theirs"));
    let admin = RedisConfig::new(redis_url()).connect().await.unwrap();
    let password = hex::encode(rand::random::<[u8; 16]>());
    admin.set_scan_user(&mine, &password).await.unwrap();
    admin.set_scan_user(&mine, &password).await.unwrap(); // setting it again is harmless
    let url = url_with_user(&redis_url(), &scan_user(&mine), &password).unwrap();
    let their_queue = queue_at(&redis_url(), &theirs).await;
    their_queue.enqueue(&[Shard::prefix("t/")]).await.unwrap();

    // Every step a worker and the merge take, as the scan's user.
    let q = queue_at(&url, &mine).await;
    let shards: Vec<Shard> = (0..3).map(|i| Shard::prefix(format!("p{i}/"))).collect();
    assert_eq!(q.enqueue(&shards).await.unwrap(), 3);
    let mut lease = q.take().await.unwrap().unwrap();
    assert!(q.renew(&lease).await.unwrap());
    let commit = Commit {
        checkpoint: Some("p0/a"),
        part: Some("parts/x/0"),
        changes: None,
        counts: &[("objects", 1)],
    };
    assert!(q.commit(&mut lease, &commit).await.unwrap());
    q.report_progress(rand::random(), &[("heads", 1)], "{}")
        .await
        .unwrap();
    q.govern(Duration::from_secs(1), &[("", 10, 0, 900)])
        .await
        .unwrap();
    assert_eq!(q.finish(&lease, &Finish::Done).await.unwrap(), "done");
    assert_eq!(q.counts().await.unwrap().done, 1);
    assert_eq!(q.shard_records().await.unwrap().len(), 3);
    assert_eq!(q.counters().await.unwrap()["heads"], 1);
    // The merge's reads and waits: one transaction of the whole scan, and
    // ROLE to count the replicas to wait for (which a rule order that
    // denied @dangerous after granting ROLE took away again).
    assert_eq!(q.merge_view().await.unwrap().shards.len(), 3);
    q.wait_durable(Duration::from_millis(100)).await.unwrap();
    let role = redis::cmd("ROLE");
    let client = redis::Client::open(url.as_str()).unwrap();
    let mut own = client.get_multiplexed_async_connection().await.unwrap();
    role.query_async::<redis::Value>(&mut own)
        .await
        .expect("ROLE as the scan's user");

    // Redis forgets the user (as a restart does: ACL users live in memory)
    // and gets it back a moment later: the scan's connection waits it out.
    admin.delete_scan_user(&mine).await.unwrap(); // also drops its connections
    let again = RedisConfig::new(redis_url()).connect().await.unwrap();
    let (scan, pw) = (mine.clone(), password.clone());
    let back = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(1500)).await;
        again.set_scan_user(&scan, &pw).await.unwrap();
    });
    assert_eq!(q.counts().await.unwrap().done, 1, "after the user came back");
    back.await.unwrap();

    // Nothing of theirs, by command, by script or through their queue.
    let client = redis::Client::open(url.as_str()).unwrap();
    let mut con = client.get_multiplexed_async_connection().await.unwrap();
    let their_shards = format!("bs:{{{theirs}}}:shards");
    let mut run = async |args: &[&str]| {
        let mut cmd = redis::cmd(args[0]);
        cmd.arg(&args[1..]);
        cmd.query_async::<redis::Value>(&mut con).await
    };
    refused(run(&["SMEMBERS", &their_shards]).await, "their shards");
    refused(run(&["DEL", &their_shards]).await, "deleting their shards");
    // No code of its own: a script that loops would freeze Redis for every
    // tenant. Not even on its own keys, nor by loading a library.
    let own_shards = format!("bs:{{{mine}}}:shards");
    let read = "return redis.call('SMEMBERS', KEYS[1])";
    let library = "#!lua name=mine\nredis.register_function('mine', function() while true do end end)";
    for what in [
        &["EVAL", read, "1", &own_shards][..],
        &["EVAL", read, "1", &their_shards],
        &["EVAL_RO", read, "1", &own_shards],
        &["EVALSHA", "e0e1f9fabfc9d4800c877a703b823ac0578ff831", "0"],
        &["SCRIPT", "LOAD", read],
        &["SCRIPT", "FLUSH"],
        &["FUNCTION", "LOAD", library],
        &["FUNCTION", "DELETE", &LIBRARY.name],
        &["FUNCTION", "FLUSH"],
        &["FUNCTION", "LIST"],
        &["FCALL_RO", "x", "0"],
        // Raw writes no step needs, on its own keys.
        &["APPEND", &own_shards, "x"],
        &["SETRANGE", &own_shards, "1", "x"],
        &["LSET", &own_shards, "0", "x"],
        &["SUNIONSTORE", &own_shards, &own_shards],
        &["RESTORE", &own_shards, "0", "x"],
        &["EXPIRE", &own_shards, "1"],
        &["RENAME", &own_shards, &format!("bs:{{{mine}}}:y")],
    ] {
        refused(run(what).await, &what.join(" "));
    }
    // A function of the queue with their key: Redis checks the keys its
    // commands touch against the caller.
    let mut take_theirs = LIBRARY.call(
        bucketscan_core::fleet::queue::library::Step::Idle,
        &[their_shards.clone(), their_shards.clone(), their_shards.clone()],
    );
    take_theirs.arg("w").arg(1000);
    let mut step_con = client.get_multiplexed_async_connection().await.unwrap();
    let e = take_theirs
        .query_async::<redis::Value>(&mut step_con)
        .await
        .expect_err("a step on their keys");
    let text = e.to_string().to_lowercase();
    assert!(text.contains("noperm") || text.contains("can't run"), "{e}");
    for what in [
        &["KEYS", "*"][..],
        &["SCAN", "0"],
        &["RANDOMKEY"],
        &["FLUSHALL"],
        &["CONFIG", "GET", "requirepass"],
        &["ACL", "LIST"],
        &["SUBSCRIBE", "x"],
        &["CLIENT", "LIST"],
        // No transactions: a MULTI of a million reads holds Redis for
        // everyone and cannot be killed (the merge's one-instant read is
        // a read-only function, which FUNCTION KILL can stop).
        &["MULTI"],
        &["EXEC"],
        &["DISCARD"],
        // Keys hidden in another database would escape the cleanup.
        &["SELECT", "1"],
        &["MOVE", &format!("bs:{{{mine}}}:shards"), "1"],
        &[
            "COPY",
            &format!("bs:{{{mine}}}:shards"),
            &format!("bs:{{{mine}}}:x"),
            "DB",
            "1",
        ],
    ] {
        refused(run(what).await, &what.join(" "));
    }
    let through_theirs = queue_at(&url, &theirs).await;
    let e = through_theirs.take().await.expect_err("their queue");
    assert!(e.to_string().to_lowercase().contains("noperm"), "{e}");
    assert_eq!(their_queue.counts().await.unwrap().pending, 1, "untouched");

    // Gone with the scan: its password opens nothing. A pod that connects
    // then (Redis restarted and forgot the user; or the scan ended) waits
    // within its patience for the operator to set the user again, then
    // fails transiently (exit 75), not as a failed plan or scan.
    // (As the operator does it: an admin finds the scan's keys by SCAN.)
    queue_at(&redis_url(), &mine).await.delete_scan().await.unwrap();
    admin.delete_scan_user(&mine).await.unwrap();
    let mut config = RedisConfig::new(&url);
    config.patience = Duration::from_secs(1);
    let e = config.connect().await.err().expect("a deleted user");
    assert!(matches!(e, QueueError::UserUnknown(_)), "{e}");
    assert!(e.is_transient(), "{e}");
    assert!(e.to_string().contains("authentication failed"), "{e}");
    their_queue.delete_scan().await.unwrap();
}

/// A step's function refuses a value over its limit, with the limit in the
/// message, before it writes anything.
#[tokio::test]
async fn a_step_refuses_an_oversize_value() {
    use bucketscan_core::fleet::queue::library::MAX_ARGUMENT_BYTES;
    let scan = scan_id("big");
    let q = queue_at(&redis_url(), &scan).await;
    let huge = format!("{{\"status\":\"{}\"}}", "x".repeat(MAX_ARGUMENT_BYTES));
    let e = q
        .report_progress(1, &[("heads", 5)], &huge)
        .await
        .expect_err("an oversize status");
    let text = e.to_string();
    assert!(
        text.contains("progress") && text.contains(&format!("over the limit of {MAX_ARGUMENT_BYTES} bytes")),
        "{text}"
    );
    assert!(!e.is_transient(), "{e}");
    assert!(
        q.counters().await.unwrap().is_empty(),
        "nothing written: {:?}",
        q.counters().await
    );
    assert!(q.workers().await.unwrap().is_empty());
    // The legitimate largest: a range of three keys of 1,024 bytes, each
    // byte a control character JSON escapes as six.
    let key = "\u{1}".repeat(1024);
    let widest = Shard {
        prefix: key.clone(),
        start_after: Some(key.clone()),
        end: Some(key),
    };
    assert!(serde_json::to_string(&widest).unwrap().len() < MAX_ARGUMENT_BYTES / 3);
    assert_eq!(q.enqueue(&[widest]).await.unwrap(), 1);
    q.delete_scan().await.unwrap();
}

/// After a Redis restart without persistence the functions are gone; a
/// scan's user may not load them: its step waits, within its patience, for
/// the operator to load them (as the operator does on every reconcile),
/// and past it fails transiently. An admin connection loads them itself.
/// A redis-server of one test's own, stopped with it: the function library
/// is server-wide, and an admin connection of any test running beside this
/// one would load it again while this one waits for it to be missing.
struct OwnRedis {
    server: std::process::Child,
    url: String,
}

impl OwnRedis {
    async fn start() -> OwnRedis {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let server = std::process::Command::new("redis-server")
            .args([
                "--port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("redis-server (scripts/install-deps.sh installs it)");
        let url = format!("redis://127.0.0.1:{port}");
        let client = redis::Client::open(url.as_str()).unwrap();
        for _ in 0..100 {
            if let Ok(mut c) = client.get_multiplexed_async_connection().await {
                if redis::cmd("PING").query_async::<String>(&mut c).await.is_ok() {
                    return OwnRedis { server, url };
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let mut server = server;
        let _ = server.kill();
        let _ = server.wait();
        panic!("redis-server on port {port} did not start");
    }
}

impl Drop for OwnRedis {
    fn drop(&mut self) {
        let _ = self.server.kill();
        let _ = self.server.wait();
    }
}

#[tokio::test]
async fn a_scan_user_waits_for_the_operator_to_load_the_functions() {
    let own_redis = OwnRedis::start().await;
    let redis_url = || own_redis.url.clone();
    let scan = scan_id("fn");
    let admin = RedisConfig::new(redis_url()).connect().await.unwrap();
    // As the operator does at start.
    admin.load_functions().await.unwrap();
    let password = hex::encode(rand::random::<[u8; 16]>());
    admin.set_scan_user(&scan, &password).await.unwrap();
    let url = url_with_user(&redis_url(), &scan_user(&scan), &password).unwrap();
    let mut config = RedisConfig::new(&url);
    config.patience = Duration::from_secs(20);
    let q = Queue::connect(&config, &scan, "w", Duration::from_secs(30))
        .await
        .unwrap();
    q.enqueue(&[Shard::prefix("a/")]).await.unwrap();

    let client = redis::Client::open(redis_url()).unwrap();
    let mut root = client.get_multiplexed_async_connection().await.unwrap();
    let unload = redis::cmd("FUNCTION").arg("DELETE").arg(&LIBRARY.name).clone();
    unload.query_async::<()>(&mut root).await.unwrap();
    let operator = admin.clone();
    let loads = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(1500)).await;
        operator.load_functions().await.unwrap();
        operator.load_functions().await.unwrap(); // loading again is harmless
    });
    let started = std::time::Instant::now();
    let lease = q
        .take()
        .await
        .unwrap()
        .expect("the shard, once the functions are back");
    assert!(started.elapsed() >= Duration::from_millis(1000), "it waited");
    loads.await.unwrap();
    assert_eq!(q.finish(&lease, &Finish::Done).await.unwrap(), "done");

    // Never loaded within the patience (the operator loads its own library
    // every few seconds: this one is another release's): an error that is
    // not transient, naming the library and what to do, so the scan fails
    // instead of waiting forever.
    unload.query_async::<()>(&mut root).await.unwrap();
    config.patience = Duration::from_secs(1);
    let impatient = Queue::connect(&config, &scan, "w", Duration::from_secs(30))
        .await
        .unwrap();
    let e = impatient.take().await.expect_err("no functions");
    assert!(matches!(e, QueueError::FunctionsMissing { .. }), "{e}");
    assert!(!e.is_transient(), "{e}");
    assert!(
        e.to_string().contains(&LIBRARY.name) && e.to_string().contains("operator's worker image"),
        "{e}"
    );

    // An admin connection (the operator's, a single-process scan) loads
    // them itself on the first step that misses them.
    let own = queue_at(&redis_url(), &scan).await;
    assert_eq!(own.counts().await.unwrap().done, 1);
    assert!(own.take().await.unwrap().is_none());
    own.delete_scan().await.unwrap();
    admin.delete_scan_user(&scan).await.unwrap();
}

/// What a scan's own user writes into its keys does not become the
/// operator's memory nor a function that holds Redis: a 25 MB worker status,
/// a manifest of 25 MB, counters of a thousand times more fields than any
/// scan has, and a million expired leases. The operator's reads leave out
/// (or refuse, for what the scan cannot go on without) what is over their
/// bounds, and its reap requeues at most a batch per call.
#[tokio::test]
async fn the_operators_reads_stay_small_whatever_a_scan_user_writes() {
    use bucketscan_core::fleet::queue::{MAX_HASH_FIELDS, REAP_BATCH};
    let scan = scan_id("hostile");
    let admin = RedisConfig::new(redis_url()).connect().await.unwrap();
    let password = hex::encode(rand::random::<[u8; 16]>());
    admin.set_scan_user(&scan, &password).await.unwrap();
    let url = url_with_user(&redis_url(), &scan_user(&scan), &password).unwrap();
    let client = redis::Client::open(url.as_str()).unwrap();
    let slow = redis::AsyncConnectionConfig::new().set_response_timeout(Some(Duration::from_secs(60)));
    let mut tenant = client
        .get_multiplexed_async_connection_with_config(&slow)
        .await
        .unwrap();
    let operator = queue_at(&redis_url(), &scan).await;
    let keys = operator.keys();

    let huge = format!("[{}0]", "0,".repeat(12_500_000)); // 25 MB of JSON
    let now = time::OffsetDateTime::now_utc().unix_timestamp();
    let honest = format!("{{\"updated\":{now},\"rate\":5.0}}");
    let mut raw = redis::pipe();
    raw.hset(keys.workers(), "big", &huge)
        .hset(keys.workers(), "honest", &honest)
        .hset(keys.meta(), "manifest", &huge)
        .hset(keys.governor(), "p", &huge)
        .set(keys.meta().replace(":meta", ":junk"), "a key no step writes");
    for i in 0..MAX_HASH_FIELDS * 2 {
        raw.hset(keys.counters(), format!("junk{i}"), 1);
    }
    raw.query_async::<()>(&mut tenant)
        .await
        .expect("the scan's user may write these");
    for chunk in 0..100 {
        let mut zadd = redis::cmd("ZADD");
        zadd.arg(keys.leases());
        for i in 0..10_000 {
            zadd.arg(1).arg(format!("fake{chunk}-{i}"));
        }
        zadd.query_async::<()>(&mut tenant).await.unwrap();
    }

    let workers = operator.workers().await.unwrap();
    assert_eq!(
        workers.keys().collect::<Vec<_>>(),
        ["honest"],
        "the 25 MB status is left out"
    );
    assert_eq!(operator.live_rate(now).await.unwrap(), 5.0);
    assert!(operator.governors().await.unwrap().is_empty());
    assert!(
        operator.counters().await.unwrap().is_empty(),
        "counters of more fields than the bound are not read"
    );
    let e = operator
        .meta_field("manifest")
        .await
        .expect_err("a 25 MB manifest");
    assert!(matches!(e, QueueError::Oversized { .. }), "{e}");
    assert!(
        e.to_string().contains("larger than bucketscan ever writes"),
        "{e}"
    );

    let started = std::time::Instant::now();
    let (requeued, dead) = operator.reap(3).await.unwrap();
    assert_eq!(requeued + dead, REAP_BATCH as u64, "one batch per call");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(
        operator.counts().await.unwrap().leased,
        1_000_000 - REAP_BATCH as u64
    );
    operator.delete_scan().await.unwrap();
    admin.delete_scan_user(&scan).await.unwrap();
}

/// The operator's per-scan budget, on the real Redis: it counts every key
/// of the scan's name (junk its user wrote too) and their memory, in
/// bounded steps, and switching the user off ends what it can write.
#[tokio::test]
async fn a_scans_redis_usage_is_counted_and_its_user_switched_off() {
    let scan = scan_id("budget");
    let admin = RedisConfig::new(redis_url()).connect().await.unwrap();
    let password = hex::encode(rand::random::<[u8; 16]>());
    admin.set_scan_user(&scan, &password).await.unwrap();
    let url = url_with_user(&redis_url(), &scan_user(&scan), &password).unwrap();
    let mut config = RedisConfig::new(&url);
    config.patience = Duration::from_secs(1);
    let q = Queue::connect(&config, &scan, "w", Duration::from_secs(30))
        .await
        .unwrap();
    q.enqueue(&[Shard::prefix("a/")]).await.unwrap();
    let client = redis::Client::open(url.as_str()).unwrap();
    let mut tenant = client.get_multiplexed_async_connection().await.unwrap();
    let junk = |i: usize| q.keys().meta().replace(":meta", &format!(":junk{i}"));
    for i in 0..3 {
        redis::cmd("SET")
            .arg(junk(i))
            .arg("x".repeat(1 << 20))
            .query_async::<()>(&mut tenant)
            .await
            .unwrap();
    }
    let operator = queue_at(&redis_url(), &scan).await;
    let usage = operator.usage(200_000, u64::MAX).await.unwrap();
    assert!(usage.complete, "{usage:?}");
    assert!(
        usage.keys >= 3 + 3,
        "junk, meta, pending, shards, shard: {usage:?}"
    );
    assert!(usage.bytes >= 3 << 20, "{usage:?}");
    // Bounded: it stops once past what it was asked to find.
    let early = operator.usage(200_000, 1).await.unwrap();
    assert!(early.bytes >= 1, "{early:?}");

    admin.switch_off_scan_user(&scan).await.unwrap();
    let e = redis::cmd("SET")
        .arg(junk(9))
        .arg("more")
        .query_async::<()>(&mut tenant)
        .await
        .expect_err("a switched-off user writes nothing");
    let _ = e;
    let e = config.connect().await.err().expect("a switched-off user");
    assert!(matches!(e, QueueError::UserUnknown(_)), "{e}");
    operator.delete_scan().await.unwrap();
    admin.delete_scan_user(&scan).await.unwrap();
}

/// A connection that waits for slow answers (the test times them itself).
async fn patient(client: &redis::Client) -> redis::aio::MultiplexedConnection {
    let config = redis::AsyncConnectionConfig::new().set_response_timeout(None);
    client
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .unwrap()
}

/// Redis's memory as far as a hostile function call could grow it: the
/// functions' Lua heap (`used_memory_vm_functions`, outside maxmemory) and
/// the server's resident set (the same machine runs it).
async fn redis_memory(admin: &mut redis::aio::MultiplexedConnection, pid: u32) -> (u64, u64) {
    let info: String = redis::cmd("INFO").arg("memory").query_async(admin).await.unwrap();
    let lua = info
        .lines()
        .find_map(|l| l.strip_prefix("used_memory_vm_functions:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("INFO memory has used_memory_vm_functions (Redis 7)");
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let rss_kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0);
    (lua, rss_kib << 10)
}

/// A scan's user can write its manifest in `meta` and call the retry
/// step's function with any arguments. A manifest of megabytes of nested
/// padding (cheap to send, costly to decode) must cost Redis no more than
/// a copy of it: the step decodes no JSON, so neither Redis's memory (its
/// Lua heap is outside maxmemory) nor its answers to every other tenant
/// suffer, however often the scan's user calls it (docs/threat-model.md
/// T16).
#[tokio::test]
async fn a_scans_padded_manifest_neither_grows_redis_nor_holds_it() {
    use sha1::{Digest, Sha1};
    // A server of its own: its resident set is then this test's alone.
    let own_redis = OwnRedis::start().await;
    let redis_url = || own_redis.url.clone();
    let scan = scan_id("padded");
    let admin = RedisConfig::new(redis_url()).connect().await.unwrap();
    admin.load_functions().await.unwrap();
    let password = hex::encode(rand::random::<[u8; 16]>());
    admin.set_scan_user(&scan, &password).await.unwrap();
    let url = url_with_user(&redis_url(), &scan_user(&scan), &password).unwrap();
    let q = queue_at(&url, &scan).await;
    q.enqueue(&[Shard::prefix("a/")]).await.unwrap();
    let client = redis::Client::open(url.as_str()).unwrap();
    let mut tenant = patient(&client).await;
    let admin_client = redis::Client::open(redis_url()).unwrap();
    let mut watcher = patient(&admin_client).await;
    let info: String = redis::cmd("INFO")
        .arg("server")
        .query_async(&mut watcher)
        .await
        .unwrap();
    let pid: u32 = info
        .lines()
        .find_map(|l| l.strip_prefix("process_id:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap();

    // Under the 8 MiB a manifest may have: millions of empty arrays.
    let pad = "[],".repeat((8 << 20) / 3 - 64);
    let manifest = format!(r#"{{"retries":0,"pad":[{pad}[]]}}"#);
    assert!(manifest.len() <= 8 << 20);
    let meta = q.keys().meta();
    redis::cmd("HSET")
        .arg(&meta)
        .arg("manifest")
        .arg(&manifest)
        .query_async::<()>(&mut tenant)
        .await
        .unwrap();
    let sha = hex::encode(Sha1::digest(manifest.as_bytes()));
    let function = format!("bs_{}_retry", LIBRARY.name.trim_start_matches("bucketscan_"));
    let keys: Vec<String> = ["pending", "shards", "done", "dead", "shard:", "parts:"]
        .iter()
        .map(|k| meta.replace(":meta", &format!(":{k}")))
        .collect();

    let (lua_before, rss_before) = redis_memory(&mut watcher, pid).await;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stopped = stop.clone();
    let mut pinger = patient(&redis::Client::open(redis_url()).unwrap()).await;
    // An admin's PINGs meanwhile, and Redis's memory at each.
    let watching = tokio::spawn(async move {
        let (mut lua_most, mut rss_most, mut slowest) = (0u64, 0u64, Duration::ZERO);
        while !stopped.load(std::sync::atomic::Ordering::Relaxed) {
            let sent = std::time::Instant::now();
            let pong: String = redis::cmd("PING")
                .query_async(&mut pinger)
                .await
                .expect("Redis answers a PING while a scan's user sends the retry step");
            assert_eq!(pong, "PONG");
            slowest = slowest.max(sent.elapsed());
            let (lua, rss) = redis_memory(&mut watcher, pid).await;
            lua_most = lua_most.max(lua);
            rss_most = rss_most.max(rss);
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        (lua_most, rss_most, slowest)
    });
    // The retry step, as the scan's user may send it: round 1 over a
    // manifest of round 0 (the round Redis holds), which writes nothing,
    // so it can be sent again and again.
    for _ in 0..20 {
        let answer: Vec<i64> = redis::cmd("FCALL")
            .arg(&function)
            .arg(1 + keys.len())
            .arg(&meta)
            .arg(&keys)
            .arg(1)
            .arg(0)
            .arg(&sha)
            .query_async(&mut tenant)
            .await
            .unwrap();
        assert_eq!(answer, [0, 0], "nothing to scan again, nothing written");
    }
    // And as the operator and `bucketscan-worker retry` send it.
    assert_eq!(q.retry(1).await.unwrap(), Retried::NothingToRetry);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (lua_most, rss_most, slowest) = watching.await.unwrap();
    let grown = |most: u64, before: u64| most.saturating_sub(before) >> 20;
    assert!(
        grown(lua_most, lua_before) < 32 && grown(rss_most, rss_before) < 32,
        "Redis grew by {} MiB of Lua heap and {} MiB resident",
        grown(lua_most, lua_before),
        grown(rss_most, rss_before)
    );
    eprintln!(
        "grew by {} MiB of Lua heap, {} MiB resident; slowest PING {slowest:?}",
        grown(lua_most, lua_before),
        grown(rss_most, rss_before)
    );
    // Generous: the step copies the manifest once and hashes it (tens of
    // ms, more on a loaded machine); decoding it took a second and more.
    assert!(slowest < Duration::from_millis(800), "a PING waited {slowest:?}");
    queue_at(&redis_url(), &scan).await.delete_scan().await.unwrap();
    admin.delete_scan_user(&scan).await.unwrap();
}
