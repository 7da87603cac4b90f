//! The queue protocol against a real redis-server (started by
//! scripts/with-test-servers.sh, as `just test` does).

use bucketscan_core::fleet::queue::{Commit, Finish, Queue, QueueCounts, RedisConfig};
use bucketscan_core::keyspace::shard::Shard;
use std::time::Duration;

mod support;
use support::snapshot::Snapshot;
use support::ReplyCutter;

fn redis_url() -> String {
    std::env::var("BUCKETSCAN_TEST_REDIS_URL")
        .expect("BUCKETSCAN_TEST_REDIS_URL is not set: run the tests with `just test`")
}

async fn queue(scan: &str, owner: &str, lease: Duration) -> Queue {
    queue_at(&redis_url(), scan, owner, lease).await
}

async fn queue_at(url: &str, scan: &str, owner: &str, lease: Duration) -> Queue {
    Queue::connect(&RedisConfig::new(url), scan, owner, lease)
        .await
        .unwrap()
}

fn scan_id(tag: &str) -> String {
    format!("{tag}-{}-{:?}", std::process::id(), std::time::SystemTime::now())
}

fn shards(n: usize) -> Vec<Shard> {
    (0..n).map(|i| Shard::prefix(format!("p{i:03}/"))).collect()
}

#[tokio::test]
async fn every_shard_is_taken_once_and_completing_twice_is_harmless() {
    let scan = scan_id("once");
    let a = queue(&scan, "worker-a", Duration::from_secs(30)).await;
    let b = queue(&scan, "worker-b", Duration::from_secs(30)).await;
    assert_eq!(a.enqueue(&shards(20)).await.unwrap(), 20);
    assert_eq!(
        b.enqueue(&shards(20)).await.unwrap(),
        0,
        "re-planning adds nothing twice"
    );

    let mut seen = std::collections::HashSet::new();
    loop {
        let (la, lb) = (a.take().await.unwrap(), b.take().await.unwrap());
        if la.is_none() && lb.is_none() {
            break;
        }
        for (q, lease) in [(&a, la), (&b, lb)] {
            if let Some(lease) = lease {
                assert!(seen.insert(lease.shard.clone()), "{:?} taken twice", lease.shard);
                assert_eq!(q.finish(&lease, &Finish::Done).await.unwrap(), "done");
                assert_eq!(
                    q.finish(&lease, &Finish::Done).await.unwrap(),
                    "done",
                    "idempotent"
                );
            }
        }
    }
    assert_eq!(seen.len(), 20);
    assert_eq!(
        a.counts().await.unwrap(),
        QueueCounts {
            pending: 0,
            leased: 0,
            done: 20,
            dead: 0
        }
    );
}

#[tokio::test]
async fn expired_lease_is_requeued_and_the_old_holder_is_fenced_off() {
    let scan = scan_id("reap");
    let slow = queue(&scan, "slow", Duration::from_millis(200)).await;
    let fast = queue(&scan, "fast", Duration::from_secs(30)).await;
    slow.enqueue(&shards(1)).await.unwrap();
    let mut old = slow.take().await.unwrap().unwrap();
    let first = Commit {
        checkpoint: Some("p000/k1"),
        part: Some("parts/a"),
        changes: None,
        counts: &[("objects", 2), ("with_metadata", 1)],
    };
    assert!(slow.commit(&mut old, &first).await.unwrap());
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(fast.reap(3).await.unwrap(), (1, 0));

    let new = fast.take().await.unwrap().unwrap();
    assert_eq!(new.shard, old.shard);
    assert_eq!(
        new.checkpoint.as_deref(),
        Some("p000/k1"),
        "resumes from the checkpoint"
    );
    assert_ne!(new.token, old.token);
    assert!(
        !slow
            .commit(
                &mut old,
                &Commit {
                    checkpoint: Some("p000/k9"),
                    counts: &[("objects", 7)],
                    ..Commit::default()
                }
            )
            .await
            .unwrap(),
        "stale holder cannot checkpoint"
    );
    assert_eq!(
        slow.finish(&old, &Finish::Done).await.unwrap(),
        "lost",
        "stale holder cannot complete"
    );
    assert_eq!(fast.finish(&new, &Finish::Done).await.unwrap(), "done");
    assert_eq!(fast.parts(&new.id).await.unwrap(), vec!["parts/a".to_string()]);
    let record = &fast.shard_records().await.unwrap()[0];
    assert_eq!(
        record.counts,
        std::collections::BTreeMap::from([("objects".to_string(), 2), ("with_metadata".to_string(), 1)]),
        "only the recorded part is counted"
    );
}

#[tokio::test]
async fn release_requeues_at_once_without_a_failure() {
    let scan = scan_id("release");
    let q = queue(&scan, "w", Duration::from_secs(30)).await;
    q.enqueue(&shards(3)).await.unwrap();
    let lease = q.take().await.unwrap().unwrap();
    assert_eq!(q.finish(&lease, &Finish::Release).await.unwrap(), "pending");
    let again = q.take().await.unwrap().unwrap();
    assert_eq!(again.shard, lease.shard, "a released shard is taken next");
    assert_eq!(q.last_error(&again.id).await.unwrap(), None);
}

#[tokio::test]
async fn a_shard_that_keeps_failing_is_dead_lettered_with_its_error() {
    let scan = scan_id("dead");
    let q = queue(&scan, "w", Duration::from_secs(30)).await;
    q.enqueue(&shards(1)).await.unwrap();
    let fail = Finish::Fail {
        error: "HTTP 400 InvalidArgument".into(),
        max_failures: 3,
    };
    let mut states = Vec::new();
    while let Some(lease) = q.take().await.unwrap() {
        states.push(q.finish(&lease, &fail).await.unwrap());
    }
    assert_eq!(states, ["pending", "pending", "dead"]);
    let counts = q.counts().await.unwrap();
    assert_eq!((counts.pending, counts.dead), (0, 1));
    let id = Shard::prefix("p000/").id();
    assert_eq!(
        q.last_error(&id).await.unwrap().as_deref(),
        Some("HTTP 400 InvalidArgument")
    );
}

/// A worker's further slots take only what no worker waits for: nothing
/// while another worker is idle, and each slot holds its own lease.
#[tokio::test]
async fn extra_slots_take_nothing_while_a_worker_is_idle() {
    let scan = scan_id("extra");
    let busy = queue(&scan, "busy", Duration::from_secs(30)).await;
    let waiting = queue(&scan, "waiting", Duration::from_secs(30)).await;
    busy.enqueue(&shards(3)).await.unwrap();
    let first = busy.take().await.unwrap().unwrap();
    // A worker marks itself idle (a lease is out, so it waits for work).
    waiting.idle(Duration::from_secs(30)).await.unwrap();
    let slot = busy.for_slot(1);
    assert!(
        slot.take_extra().await.unwrap().is_none(),
        "the idle worker's to take"
    );
    assert!(
        waiting.take().await.unwrap().is_some(),
        "taking ends its idleness"
    );
    let extra = slot.take_extra().await.unwrap().expect("no one waits now");
    assert!(slot.renew(&extra).await.unwrap(), "the slot holds its own lease");
    assert!(!busy.renew(&extra).await.unwrap(), "not the first slot's");
    assert!(busy.renew(&first).await.unwrap());
    assert!(slot.take_extra().await.unwrap().is_none(), "nothing pending");
}

#[tokio::test]
async fn a_split_serves_one_idle_worker_and_is_fenced() {
    use bucketscan_core::fleet::queue::Split;
    let scan = scan_id("split");
    let busy = queue(&scan, "busy", Duration::from_secs(30)).await;
    let idle = queue(&scan, "idle", Duration::from_secs(30)).await;
    busy.enqueue(&shards(1)).await.unwrap();
    let mut lease = busy.take().await.unwrap().unwrap();
    let before_split = lease.clone();
    assert_eq!(
        busy.split(&mut lease, "p000/m").await.unwrap(),
        Split::NotWanted,
        "nobody is idle"
    );

    let left = idle.idle(Duration::from_secs(5)).await.unwrap();
    assert_eq!((left.pending, left.leased), (0, 1));
    assert!(
        busy.report_progress(rand::random(), &[], "{}").await.unwrap(),
        "the holder is asked to split"
    );
    let mut stale = bucketscan_core::fleet::queue::Lease {
        token: lease.token.wrapping_add(1),
        ..lease.clone()
    };
    assert_eq!(busy.split(&mut stale, "p000/m").await.unwrap(), Split::Lost);

    let (lower, upper) = lease.shard.split_after("p000/m");
    let done = Split::Done {
        lower: lower.clone(),
        upper: upper.clone(),
    };
    assert_eq!(busy.split(&mut lease, "p000/m").await.unwrap(), done);
    assert_eq!(lease.shard, lower, "the lease covers the lower part now");
    assert_eq!(
        busy.split(&mut before_split.clone(), "p000/m").await.unwrap(),
        done,
        "a retried split changes nothing"
    );
    assert!(
        !busy.report_progress(rand::random(), &[], "{}").await.unwrap(),
        "served"
    );

    let taken = idle.take().await.unwrap().unwrap();
    assert_eq!(taken.shard, upper);
    assert_eq!(idle.take().await.unwrap(), None, "one split, one new shard");
    // The holder's lease now covers the lower part: a retry resumes there.
    let records = busy.shard_records().await.unwrap();
    assert_eq!(records.len(), 2);
    assert_eq!(records[0].shard, lower);
    assert_eq!(records[0].splits, 1);
}

/// Run `step` with the reply to its command (the first one holding `needle`)
/// cut once after Redis ran it: the step must still succeed, by sending the
/// command again.
async fn with_reply_cut<T>(
    proxy: &ReplyCutter,
    needle: &str,
    step: impl std::future::Future<Output = T>,
) -> T {
    let before = proxy.cuts();
    proxy.cut_next_reply(needle);
    let out = step.await;
    assert_eq!(proxy.cuts(), before + 1, "the reply was cut once");
    out
}

#[tokio::test]
async fn a_take_whose_reply_is_lost_leases_one_shard() {
    let scan = scan_id("lost-take");
    let proxy = ReplyCutter::start(&redis_url()).await;
    let cut = queue_at(&proxy.url, &scan, "w", Duration::from_secs(30)).await;
    let direct = queue(&scan, "observer", Duration::from_secs(30)).await;
    direct.enqueue(&shards(3)).await.unwrap();

    let lease = with_reply_cut(&proxy, "FCALL", cut.take())
        .await
        .unwrap()
        .unwrap();
    let counts = direct.counts().await.unwrap();
    assert_eq!(
        (counts.pending, counts.leased),
        (2, 1),
        "the re-sent take leased no second shard"
    );
    let record = direct.shard_record(&lease.id).await.unwrap().unwrap();
    assert_eq!((record.state.as_str(), record.attempts), ("leased", 1));
    assert_eq!(
        cut.finish(&lease, &Finish::Done).await.unwrap(),
        "done",
        "the lease returned is the one held"
    );
}

#[tokio::test]
async fn a_progress_report_whose_reply_is_lost_counts_once() {
    let scan = scan_id("lost-progress");
    let proxy = ReplyCutter::start(&redis_url()).await;
    let cut = queue_at(&proxy.url, &scan, "w", Duration::from_secs(30)).await;
    let direct = queue(&scan, "observer", Duration::from_secs(30)).await;
    let report = rand::random();
    with_reply_cut(
        &proxy,
        "FCALL",
        cut.report_progress(report, &[("heads", 7)], "{}"),
    )
    .await
    .unwrap();
    assert_eq!(direct.counters().await.unwrap()["heads"], 7);
    cut.report_progress(rand::random(), &[("heads", 3)], "{}")
        .await
        .unwrap();
    assert_eq!(
        direct.counters().await.unwrap()["heads"],
        10,
        "the next report counts"
    );
}

/// Every other step, each with its reply lost once: the queue ends as if
/// each had run once.
#[tokio::test]
async fn every_step_whose_reply_is_lost_takes_effect_once() {
    use bucketscan_core::fleet::queue::Split;
    let scan = scan_id("lost-steps");
    let proxy = ReplyCutter::start(&redis_url()).await;
    let busy = queue_at(&proxy.url, &scan, "busy", Duration::from_secs(30)).await;
    let waiter = queue_at(&proxy.url, &scan, "waiter", Duration::from_secs(30)).await;
    let short = queue_at(&proxy.url, &scan, "short", Duration::from_millis(300)).await;
    let direct = queue(&scan, "observer", Duration::from_secs(30)).await;
    macro_rules! cut {
        ($step:expr) => {
            with_reply_cut(&proxy, "FCALL", $step).await
        };
    }

    cut!(busy.enqueue(&shards(1))).unwrap();
    assert_eq!(
        (
            direct.counts().await.unwrap().pending,
            direct.shard_count().await.unwrap()
        ),
        (1, 1)
    );

    let mut lease = busy.take().await.unwrap().unwrap();
    let commit = Commit {
        checkpoint: Some("p000/k1"),
        part: Some("parts/one"),
        changes: None,
        counts: &[("objects", 5)],
    };
    assert!(cut!(busy.commit(&mut lease, &commit)).unwrap());
    assert_eq!(
        direct.parts(&lease.id).await.unwrap(),
        ["parts/one"],
        "the part is recorded once"
    );
    assert_eq!(
        direct.shard_record(&lease.id).await.unwrap().unwrap().counts["objects"],
        5
    );
    assert!(cut!(busy.renew(&lease)).unwrap());

    let left = cut!(waiter.idle(Duration::from_secs(30))).unwrap();
    assert_eq!((left.pending, left.leased), (0, 1));
    let split = cut!(busy.split(&mut lease, "p000/m")).unwrap();
    assert!(matches!(split, Split::Done { .. }), "{split:?}");
    assert_eq!(
        (
            direct.counts().await.unwrap().pending,
            direct.shard_count().await.unwrap()
        ),
        (1, 2)
    );

    // The upper part: released, failed, then its lease runs out and is reaped.
    let upper = waiter.take().await.unwrap().unwrap();
    cut!(waiter.finish(&upper, &Finish::Release)).unwrap();
    assert_eq!(direct.counts().await.unwrap().pending, 1, "released once");
    let upper = waiter.take().await.unwrap().unwrap();
    let fail = Finish::Fail {
        error: "boom".into(),
        max_failures: 5,
    };
    cut!(waiter.finish(&upper, &fail)).unwrap();
    assert_eq!(
        direct.shard_record(&upper.id).await.unwrap().unwrap().failures,
        1,
        "failed once"
    );
    assert_eq!(direct.counts().await.unwrap().pending, 1);
    let upper = short.take().await.unwrap().unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await;
    cut!(short.reap(5)).unwrap();
    let record = direct.shard_record(&upper.id).await.unwrap().unwrap();
    assert_eq!(
        (record.state.as_str(), record.failures),
        ("pending", 2),
        "reaped once"
    );
    assert_eq!(direct.counts().await.unwrap().pending, 1);

    assert_eq!(cut!(busy.finish(&lease, &Finish::Done)).unwrap(), "done");
    assert_eq!(direct.counts().await.unwrap().done, 1);

    let restored = Shard::prefix("q/");
    let parts = ["parts/a".to_string(), "parts/b".to_string()];
    let counts = std::collections::BTreeMap::from([
        ("objects".to_string(), 9),
        ("with_metadata".to_string(), 4),
        ("bytes".to_string(), 900),
    ]);
    let heads_before = direct
        .counters()
        .await
        .unwrap()
        .get("heads")
        .copied()
        .unwrap_or(0);
    with_reply_cut(
        &proxy,
        "FCALL",
        busy.restore_done(&restored.id(), &restored, &parts, &counts),
    )
    .await
    .unwrap();
    assert_eq!(
        direct.parts(&restored.id()).await.unwrap(),
        parts,
        "restored once"
    );
    assert_eq!(direct.counts().await.unwrap().done, 2);
    // Its counts rebuilt the progress counters, once: a second restore (a
    // second replan) adds nothing.
    assert!(!direct
        .restore_done(&restored.id(), &restored, &parts, &counts)
        .await
        .unwrap());
    let counters = direct.counters().await.unwrap();
    assert_eq!(
        counters.get("heads").copied().unwrap_or(0),
        heads_before + 9,
        "{counters:?}"
    );
    assert_eq!(
        (counters["with_metadata"], counters["bytes"]),
        (4, 900),
        "{counters:?}"
    );
    let record = direct.shard_record(&restored.id()).await.unwrap().unwrap();
    assert_eq!(
        (record.state.as_str(), record.counts.get("objects")),
        ("done", Some(&9))
    );
}

async fn direct_connection() -> redis::aio::MultiplexedConnection {
    redis::Client::open(redis_url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

fn commit<'a>(checkpoint: &'a str, part: &'a str) -> Commit<'a> {
    Commit {
        checkpoint: Some(checkpoint),
        part: Some(part),
        changes: None,
        counts: &[("objects", 1)],
    }
}

/// Redis loses a commit the holder saw acknowledged: the holder's next
/// commit, recorded on top, would leave the lost part's keys out of the
/// result. It is refused, the shard goes back to pending and is scanned
/// again from the checkpoint Redis kept.
#[tokio::test]
async fn a_commit_on_top_of_progress_redis_lost_is_refused() {
    let scan = scan_id("rollback-commit");
    let mut redis = direct_connection().await;
    let holder = queue(&scan, "holder", Duration::from_secs(30)).await;
    holder.enqueue(&shards(1)).await.unwrap();
    let mut lease = holder.take().await.unwrap().unwrap();
    assert!(holder
        .commit(&mut lease, &commit("p000/k1", "parts/1"))
        .await
        .unwrap());
    let snapshot = Snapshot::take(&mut redis, &scan).await;
    assert!(holder
        .commit(&mut lease, &commit("p000/k2", "parts/2"))
        .await
        .unwrap());
    snapshot.restore(&mut redis).await;

    assert!(
        !holder
            .commit(&mut lease, &commit("p000/k3", "parts/3"))
            .await
            .unwrap(),
        "refused: Redis lost parts/2"
    );
    assert_eq!(holder.parts(&lease.id).await.unwrap(), ["parts/1"]);
    let record = holder.shard_record(&lease.id).await.unwrap().unwrap();
    assert_eq!((record.state.as_str(), record.failures), ("pending", 0));
    assert_eq!(record.counts["objects"], 1);
    let again = queue(&scan, "next", Duration::from_secs(30))
        .await
        .take()
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        again.checkpoint.as_deref(),
        Some("p000/k1"),
        "scanned again from what Redis kept"
    );
}

/// Finishing is refused the same way: a shard whose last commit Redis lost
/// must not become done.
#[tokio::test]
async fn finishing_a_shard_whose_last_commit_redis_lost_is_refused() {
    let scan = scan_id("rollback-finish");
    let mut redis = direct_connection().await;
    let holder = queue(&scan, "holder", Duration::from_secs(30)).await;
    holder.enqueue(&shards(1)).await.unwrap();
    let mut lease = holder.take().await.unwrap().unwrap();
    let snapshot = Snapshot::take(&mut redis, &scan).await;
    assert!(holder
        .commit(&mut lease, &commit("p000/k9", "parts/1"))
        .await
        .unwrap());
    snapshot.restore(&mut redis).await;

    assert_eq!(holder.finish(&lease, &Finish::Done).await.unwrap(), "diverged");
    assert_eq!(
        holder.recorded(&lease).await.unwrap(),
        None,
        "nothing to record as done"
    );
    let counts = holder.counts().await.unwrap();
    assert_eq!((counts.pending, counts.done), (1, 0));
}

/// Redis loses a split: the upper part's shard is gone and the holder's
/// shard covers the whole range again. The holder (which scans only the
/// lower part) may not complete it, and the upper part's holder is fenced.
#[tokio::test]
async fn a_split_redis_lost_fences_both_parts_and_the_whole_range_comes_back() {
    let scan = scan_id("rollback-split");
    let mut redis = direct_connection().await;
    let holder = queue(&scan, "holder", Duration::from_secs(30)).await;
    let waiter = queue(&scan, "waiter", Duration::from_secs(30)).await;
    holder.enqueue(&shards(1)).await.unwrap();
    let mut lease = holder.take().await.unwrap().unwrap();
    let whole = lease.shard.clone();
    waiter.idle(Duration::from_secs(30)).await.unwrap();
    let snapshot = Snapshot::take(&mut redis, &scan).await;
    assert!(matches!(
        holder.split(&mut lease, "p000/m").await.unwrap(),
        bucketscan_core::fleet::queue::Split::Done { .. }
    ));
    let mut upper = waiter.take().await.unwrap().unwrap();
    snapshot.restore(&mut redis).await;

    assert!(!waiter
        .commit(&mut upper, &commit("p000/z", "parts/u"))
        .await
        .unwrap());
    assert_eq!(holder.finish(&lease, &Finish::Done).await.unwrap(), "diverged");
    let again = waiter.take().await.unwrap().unwrap();
    assert_eq!((again.shard, again.checkpoint), (whole, None));
    assert_eq!(holder.shard_count().await.unwrap(), 1);
}

/// Attempt numbers go back with Redis; lease tokens must not, or a lease
/// taken after the loss would write the same part keys as the lost one,
/// whose holder may still be uploading them.
#[tokio::test]
async fn a_lease_taken_after_redis_lost_writes_has_a_new_token() {
    let scan = scan_id("rollback-token");
    let mut redis = direct_connection().await;
    let first = queue(&scan, "first", Duration::from_secs(30)).await;
    first.enqueue(&shards(1)).await.unwrap();
    let snapshot = Snapshot::take(&mut redis, &scan).await;
    let mut old = first.take().await.unwrap().unwrap();
    snapshot.restore(&mut redis).await;
    let new = first.take().await.unwrap().unwrap();
    assert_eq!(new.id, old.id);
    assert_ne!(new.token, old.token);
    assert_eq!(
        first.shard_record(&new.id).await.unwrap().unwrap().attempts,
        1,
        "attempts went back"
    );
    assert!(
        !first
            .commit(&mut old, &commit("p000/k", "parts/old"))
            .await
            .unwrap(),
        "the lost lease is fenced, even under the same worker name"
    );
}

/// Shard records come in key order even when two shards begin at the same
/// key: the shard holding only `p/` and its sibling that starts after `p/`
/// tied on their lower bound, and the merge took them in the order Redis
/// kept them (here: the sibling first), writing `p/` after `p/a`.
#[tokio::test]
async fn shard_records_are_in_key_order_when_lower_bounds_tie() {
    let q = queue(&scan_id("tie"), "w", Duration::from_secs(30)).await;
    let only_p = Shard {
        prefix: "p/".into(),
        start_after: None,
        end: Some("p/\0".into()),
    };
    let after_p = Shard {
        prefix: "p/".into(),
        start_after: Some("p/".into()),
        end: None,
    };
    assert_eq!(only_p.lower_bound(), after_p.lower_bound(), "the tie");
    q.enqueue(&[after_p.clone(), only_p.clone()]).await.unwrap();
    let order: Vec<Shard> = q
        .shard_records()
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.shard)
        .collect();
    assert_eq!(order, vec![only_p, after_p]);
    q.delete_scan().await.unwrap();
}

/// A private redis-server with these extra arguments, killed on drop.
struct OwnRedis(std::process::Child, String, std::path::PathBuf);

impl OwnRedis {
    fn start(extra: &[&str]) -> OwnRedis {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let dir = std::env::temp_dir().join(format!("bs-durable-{port}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let child = std::process::Command::new("redis-server")
            .args(["--bind", "127.0.0.1", "--port", &port.to_string(), "--save", ""])
            .arg("--dir")
            .arg(&dir)
            .args(extra)
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("redis-server must be installed (scripts/install-deps.sh)");
        OwnRedis(child, format!("redis://127.0.0.1:{port}"), dir)
    }
}

impl Drop for OwnRedis {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
        let _ = std::fs::remove_dir_all(&self.2);
    }
}

/// The version of the redis-server at `url`, as (major, minor).
async fn server_version(url: &str) -> (u32, u32) {
    let client = redis::Client::open(url).unwrap();
    let mut con = client.get_multiplexed_async_connection().await.unwrap();
    let info: String = redis::cmd("INFO")
        .arg("server")
        .query_async(&mut con)
        .await
        .unwrap();
    let version = info
        .lines()
        .find_map(|l| l.strip_prefix("redis_version:"))
        .unwrap()
        .trim()
        .to_string();
    let mut parts = version.split('.').map(|p| p.parse::<u32>().unwrap());
    (parts.next().unwrap(), parts.next().unwrap())
}

async fn durable_queue(url: &str) -> Queue {
    let config = bucketscan_core::fleet::queue::RedisConfig {
        patience: Duration::from_secs(10),
        ..bucketscan_core::fleet::queue::RedisConfig::new(url)
    };
    Queue::connect(&config, &scan_id("durable"), "merger", Duration::from_secs(5))
        .await
        .unwrap()
}

/// The merge waits for Redis to say the manifest is kept before it deletes
/// the parts. With an AOF, Redis 7.2+ confirms the write is on disk; without
/// an AOF or replicas it says it cannot keep it; an older Redis without
/// replicas cannot say (the merge then relies on manifest.json in S3); with
/// a replica, every version confirms the replica has it.
#[tokio::test]
async fn redis_says_whether_what_it_acknowledged_is_durable() {
    use bucketscan_core::fleet::queue::durable::Durability;
    for aof in ["yes", "no"] {
        let redis = OwnRedis::start(&["--appendonly", aof, "--appendfsync", "everysec"]);
        let queue = durable_queue(&redis.1).await;
        queue.set_meta_field("manifest", "{}").await.unwrap();
        let said = queue.wait_durable(Duration::from_secs(2)).await.unwrap();
        let expected = match (server_version(&redis.1).await >= (7, 2), aof) {
            (true, "yes") => Durability::Confirmed {
                local: true,
                replicas: 0,
                of: 0,
            },
            (true, _) => Durability::NotPersisted,
            (false, _) => Durability::Unknown,
        };
        assert_eq!(said, expected, "appendonly {aof}");
    }

    let primary = OwnRedis::start(&["--appendonly", "no"]);
    let port = primary.1.rsplit(':').next().unwrap().to_string();
    let _replica = OwnRedis::start(&["--appendonly", "no", "--replicaof", "127.0.0.1", &port]);
    let queue = durable_queue(&primary.1).await;
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        queue.set_meta_field("manifest", "{}").await.unwrap();
        let said = queue.wait_durable(Duration::from_secs(1)).await.unwrap();
        let synced = Durability::Confirmed {
            local: false,
            replicas: 1,
            of: 1,
        };
        if said == synced {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the replica never confirmed: {said:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The merge reads the scan in one transaction: while another client flips
/// a shard between "done with two parts" and "leased with one part" (as a
/// rollback to a snapshot and forth would), every view pairs a state with
/// its own parts. Read piece by piece (states, then parts), a view could
/// pair "done" with one part: a result missing the second part's records.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_merge_reads_states_and_parts_at_one_instant() {
    use bucketscan_core::fleet::queue::ScanKeys;
    let scan = scan_id("view");
    let keys = ScanKeys::new(&scan);
    let q = queue(&scan, "merger", Duration::from_secs(5)).await;
    let client = redis::Client::open(redis_url()).unwrap();
    let mut con = client.get_multiplexed_async_connection().await.unwrap();
    redis::pipe()
        .sadd(keys.shards(), "s1")
        .hset(keys.shard("s1"), "range", "{}")
        .query_async::<()>(&mut con)
        .await
        .unwrap();
    let flipping = {
        let (mut con, keys) = (con.clone(), keys.clone());
        tokio::spawn(async move {
            for i in 0..3000u32 {
                let (state, parts) = if i % 2 == 0 {
                    ("done", &["p1", "p2"][..])
                } else {
                    ("leased", &["p1"][..])
                };
                redis::pipe()
                    .atomic()
                    .del(keys.parts("s1"))
                    .rpush(keys.parts("s1"), parts)
                    .hset(keys.shard("s1"), "state", state)
                    .query_async::<()>(&mut con)
                    .await
                    .unwrap();
            }
        })
    };
    let mut views = 0;
    while !flipping.is_finished() {
        let view = q.merge_view().await.unwrap();
        let state = view.shards[0].state.as_str();
        let parts = view.parts["s1"].len();
        assert!(
            matches!((state, parts), ("done", 2) | ("leased", 1) | ("", 0)),
            "a view pairs {state:?} with {parts} parts"
        );
        views += 1;
    }
    assert!(views > 10, "only {views} views while the shard flipped");
    flipping.await.unwrap();
}

/// A plan whose Redis lost one of its stored shards before the mark (a
/// primary cut off and written to, then replaced: a loss that is not the
/// last writes) queues the range again before it marks the plan complete,
/// instead of marking a plan with a hole the merge would refuse.
#[tokio::test]
async fn a_plan_queues_again_what_its_redis_lost_before_the_mark() {
    use bucketscan_core::keyspace::coverage::uncovered;
    let scan = scan_id("gaps");
    let q = queue(&scan, "planner", Duration::from_secs(5)).await;
    let spec = bucketscan_core::fleet::spec::ScanSpec {
        bucket: "b".into(),
        prefix: String::new(),
        output_bucket: "o".into(),
        output_prefix: String::new(),
        gzip: false,
        only_with_metadata: false,
        max_failures: 3,
        format: Default::default(),
        layout: Default::default(),
        file_size: bucketscan_core::fleet::spec::DEFAULT_FILE_SIZE,
        scan_id: scan.clone(),
        baseline: None,
        change_set: false,
        filter: Default::default(),
        columns: Default::default(),
    };
    let tiles = uncovered("", &[Shard::prefix("m/")]);
    let mut all = tiles.clone();
    all.push(Shard::prefix("m/"));
    q.enqueue(&all).await.unwrap();
    let lost = q.shard_records().await.unwrap()[1].id.clone();
    let client = redis::Client::open(redis_url()).unwrap();
    let mut con = client.get_multiplexed_async_connection().await.unwrap();
    redis::pipe()
        .del(format!("bs:{{{scan}}}:shard:{lost}"))
        .srem(format!("bs:{{{scan}}}:shards"), &lost)
        .query_async::<()>(&mut con)
        .await
        .unwrap();
    assert!(!uncovered("", &q.shard_ranges().await.unwrap()).is_empty());
    let added = bucketscan_core::fleet::plan::fill_gaps(&spec, &q).await.unwrap();
    assert_eq!(added, 1);
    assert!(uncovered("", &q.shard_ranges().await.unwrap()).is_empty());
}

/// A re-sent commit is known by its part key, not by its checkpoint: a new
/// part that ends at the stored checkpoint is recorded (before: taken for a
/// re-sent commit and dropped, its records missing from the result), and
/// the same commit sent twice records its part once.
#[tokio::test]
async fn a_commit_is_known_as_resent_by_its_part_not_its_checkpoint() {
    let scan = scan_id("resent");
    let holder = queue(&scan, "holder", Duration::from_secs(30)).await;
    holder.enqueue(&shards(1)).await.unwrap();
    let mut lease = holder.take().await.unwrap().unwrap();
    let first = commit("p000/k1", "parts/1");
    assert!(holder.commit(&mut lease, &first).await.unwrap());
    // The same commit again (its answer lost): recorded once.
    let mut again = lease.clone();
    again.checkpoint = None;
    assert!(holder.commit(&mut again, &first).await.unwrap());
    assert_eq!(holder.parts(&lease.id).await.unwrap(), ["parts/1"]);
    // Another part ending at the same key.
    assert!(holder
        .commit(&mut lease, &commit("p000/k1", "parts/2"))
        .await
        .unwrap());
    assert_eq!(holder.parts(&lease.id).await.unwrap(), ["parts/1", "parts/2"]);
}

/// A scan of one shard, which died (its LIST refused).
async fn one_dead_shard(scan: &str) -> Queue {
    let q = queue(scan, "w", Duration::from_secs(30)).await;
    q.enqueue(&shards(1)).await.unwrap();
    let fail = Finish::Fail {
        error: "HTTP 403 AccessDenied".into(),
        max_failures: 1,
    };
    let lease = q.take().await.unwrap().unwrap();
    assert_eq!(q.finish(&lease, &fail).await.unwrap(), "dead");
    q
}

/// A retry walks the scan's state in one Redis step, which Redis cannot
/// stop once it wrote and which the scan's own user can grow: it refuses,
/// changing nothing, a state larger than any plan makes (shard ids, or
/// fields of a shard it would clear), and a manifest of a release before
/// retries (whose merge deleted the parts a new merge would read).
#[tokio::test]
async fn a_retry_refuses_a_state_it_cannot_walk_safely() {
    use bucketscan_core::fleet::queue::Retried;
    let scan = scan_id("retry-bounds");
    let q = one_dead_shard(&scan).await;
    let mut con = direct_connection().await;
    let meta = q.keys().meta();
    let set_manifest = |json: &'static str| redis::cmd("HSET").arg(&meta).arg("manifest").arg(json).clone();

    let _: () = set_manifest(r#"{"scan":"s","shards_dead":1}"#)
        .query_async(&mut con)
        .await
        .unwrap();
    assert_eq!(q.retry(1).await.unwrap(), Retried::PartsGone);

    let _: () = set_manifest(r#"{"scan":"s","shards_dead":1,"partial":true,"retries":0}"#)
        .query_async(&mut con)
        .await
        .unwrap();
    let dead = q.keys().shard(&Shard::prefix("p000/").id());
    let mut fields = redis::cmd("HSET");
    fields.arg(&dead);
    for i in 0..300 {
        fields.arg(format!("n:x{i}")).arg(1);
    }
    let _: () = fields.query_async(&mut con).await.unwrap();
    assert_eq!(
        q.retry(1).await.unwrap(),
        Retried::TooLarge,
        "a shard of 300 fields"
    );
    let _: () = redis::cmd("HDEL")
        .arg(&dead)
        .arg((0..300).map(|i| format!("n:x{i}")).collect::<Vec<_>>())
        .query_async(&mut con)
        .await
        .unwrap();

    let set = q.keys().shards();
    for chunk in 0..201 {
        let ids: Vec<String> = (0..1000).map(|i| format!("fake{chunk}-{i}")).collect();
        let _: () = redis::cmd("SADD")
            .arg(&set)
            .arg(ids)
            .query_async(&mut con)
            .await
            .unwrap();
    }
    assert_eq!(q.retry(1).await.unwrap(), Retried::TooLarge, "201,001 shard ids");
    assert_eq!(q.counts().await.unwrap().dead, 1, "nothing changed");
    let _: () = redis::cmd("SREM")
        .arg(&set)
        .arg(
            (0..201)
                .flat_map(|c| (0..1000).map(move |i| format!("fake{c}-{i}")))
                .collect::<Vec<_>>(),
        )
        .query_async(&mut con)
        .await
        .unwrap();

    assert_eq!(q.retry(1).await.unwrap(), Retried::Requeued { shards: 1 });
    assert_eq!(q.counts().await.unwrap().pending, 1);
}

/// Rounds only grow, and a manifest counts only for the round Redis
/// records: a manifest a merge of an earlier round stored after a retry is
/// not a merged state to retry; a manifest that says nothing is missing (a
/// later round's, adopted from S3 after Redis was rolled back past it, over
/// the earlier round's shard records) leaves nothing to retry; adopting a
/// round never lowers the one Redis records.
#[tokio::test]
async fn a_retry_judges_the_manifest_of_the_round_redis_records() {
    use bucketscan_core::fleet::queue::Retried;
    let scan = scan_id("retry-rounds");
    let q = one_dead_shard(&scan).await;
    let mut con = direct_connection().await;
    let meta = q.keys().meta();
    let set = |field: &'static str, value: &'static str| {
        redis::cmd("HSET").arg(&meta).arg(field).arg(value).clone()
    };

    // Redis at round 2; a stale merge's manifest of round 1.
    let _: () = set("retries", "2").query_async(&mut con).await.unwrap();
    let _: () = set("manifest", r#"{"shards_dead":1,"partial":true,"retries":1}"#)
        .query_async(&mut con)
        .await
        .unwrap();
    assert_eq!(q.retry(3).await.unwrap(), Retried::NotMerged);
    assert_eq!(q.manifest_and_round().await.unwrap().1, 2);
    // Round 2's manifest, complete: the dead shard record is an earlier
    // round's, and nothing is retried.
    let _: () = set(
        "manifest",
        r#"{"shards_dead":0,"counts":{"objects":5},"retries":2}"#,
    )
    .query_async(&mut con)
    .await
    .unwrap();
    assert_eq!(q.retry(3).await.unwrap(), Retried::NothingToRetry);
    assert_eq!(q.counts().await.unwrap().dead, 1, "nothing changed");
    // Adopting: up, never down.
    assert_eq!(q.adopt_round(1).await.unwrap(), 2);
    assert_eq!(q.adopt_round(4).await.unwrap(), 4);
    assert_eq!(q.manifest_and_round().await.unwrap().1, 4);
    // Round 4's manifest with errors: retried.
    let _: () = set(
        "manifest",
        r#"{"shards_dead":0,"counts":{"errors":1},"retries":4}"#,
    )
    .query_async(&mut con)
    .await
    .unwrap();
    assert_eq!(q.retry(5).await.unwrap(), Retried::Requeued { shards: 1 });
    assert_eq!(q.manifest_and_round().await.unwrap(), (None, 5));
}

/// A merge stores its manifest only for the round Redis records, and takes
/// with it the copies that merges of other rounds staged and never moved (a
/// merge killed between its staging HSET and the step): none of those
/// rounds merges again, so nothing else would ever delete them.
#[tokio::test]
async fn storing_a_manifest_sweeps_copies_staged_by_other_rounds() {
    use bucketscan_core::fleet::queue::StoredManifest;
    let scan = scan_id("store-manifest");
    let q = one_dead_shard(&scan).await;
    let mut con = direct_connection().await;
    let meta = q.keys().meta();
    let _: () = redis::cmd("HSET")
        .arg(&meta)
        .arg("retries")
        .arg("2")
        .arg("manifest@0")
        .arg("{\"stale\":0}")
        .arg("manifest@1")
        .arg("{\"stale\":1}")
        .query_async(&mut con)
        .await
        .unwrap();
    // Round 1's merge, late: nothing stored, its own copy gone.
    assert_eq!(
        q.store_manifest(1, "{\"retries\":1}").await.unwrap(),
        StoredManifest::OtherRound { held: 2 }
    );
    let fields: Vec<String> = redis::cmd("HKEYS")
        .arg(&meta)
        .query_async(&mut con)
        .await
        .unwrap();
    assert!(fields.contains(&"manifest@0".to_string()), "{fields:?}");
    assert!(!fields.contains(&"manifest@1".to_string()), "{fields:?}");
    // Round 2's merge: stored, and round 0's leftover swept.
    assert_eq!(
        q.store_manifest(2, "{\"retries\":2}").await.unwrap(),
        StoredManifest::Stored
    );
    let fields: Vec<String> = redis::cmd("HKEYS")
        .arg(&meta)
        .query_async(&mut con)
        .await
        .unwrap();
    assert!(!fields.iter().any(|f| f.starts_with("manifest@")), "{fields:?}");
    let stored: String = redis::cmd("HGET")
        .arg(&meta)
        .arg("manifest")
        .query_async(&mut con)
        .await
        .unwrap();
    assert_eq!(stored, "{\"retries\":2}");
}
