//! A scan's own Redis user (`fleet::queue::acl`) against the real
//! redis-server: with it the scan's pods run every queue step of their scan,
//! and reach nothing of another scan's, nor the key names or settings of
//! the server. The operator creates it for every scan (see
//! operator/src/controller/redis_user.rs).

use bucketscan_core::fleet::queue::{scan_user, url_with_user, Commit, Finish, Queue, RedisConfig};
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
    let read = "return redis.call('SMEMBERS', KEYS[1])";
    refused(
        run(&["EVAL", read, "1", &their_shards]).await,
        "a script declaring their key",
    );
    let hidden = format!("return redis.call('SMEMBERS', '{their_shards}')");
    refused(run(&["EVAL", &hidden, "0"]).await, "a script naming their key");
    for what in [
        &["KEYS", "*"][..],
        &["SCAN", "0"],
        &["RANDOMKEY"],
        &["FLUSHALL"],
        &["CONFIG", "GET", "requirepass"],
        &["ACL", "LIST"],
        &["SUBSCRIBE", "x"],
        &["CLIENT", "LIST"],
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

    // Gone with the scan: its password opens nothing.
    q.delete_scan().await.unwrap();
    admin.delete_scan_user(&mine).await.unwrap();
    let e = RedisConfig::new(&url)
        .connect()
        .await
        .err()
        .expect("a deleted user");
    assert!(e.to_string().contains("authentication failed"), "{e}");
    their_queue.delete_scan().await.unwrap();
}
