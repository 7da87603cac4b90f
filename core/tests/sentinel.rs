//! The queue's connection through Redis Sentinel and across failovers,
//! against real redis-servers (support/sentinel.rs): a primary killed, a
//! primary demoted by a forced failover, and a replica that answers
//! READONLY until it is promoted.

#[path = "support/sentinel.rs"]
mod sentinel_ground;

use bucketscan_core::fleet::queue::{Queue, QueueCounts, QueueError, RedisConfig};
use bucketscan_core::keyspace::shard::Shard;
use sentinel_ground::{Auth, SentinelGround};
use std::time::{Duration, Instant};

const PASSWORD: &str = "primary-secret";
const SENTINEL_PASSWORD: &str = "sentinel-secret";

/// The sentinels' user that may only find the master (as
/// docs/operations.md advises for scan pods).
fn auth() -> Auth {
    Auth {
        password: Some(PASSWORD.into()),
        sentinel_password: Some(SENTINEL_PASSWORD.into()),
        sentinel_user: Some("finder".into()),
    }
}

fn shards(n: usize) -> Vec<Shard> {
    (0..n).map(|i| Shard::prefix(format!("p{i:03}/"))).collect()
}

async fn queue(url: &str, scan: &str) -> Queue {
    let config = RedisConfig {
        patience: Duration::from_secs(60),
        ..RedisConfig::new(url)
    };
    Queue::connect(&config, scan, "worker", Duration::from_secs(60))
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sentinel_connection_follows_the_failover_after_its_primary_is_killed() {
    let mut ground = SentinelGround::start(auth());
    let queue = queue(&ground.url(), "killed").await;
    assert_eq!(queue.enqueue(&shards(10)).await.unwrap(), 10);
    ground.wait_replicated();

    ground.kill_primary();
    let killed = Instant::now();
    // The next step waits for the sentinels to promote the replica, then
    // runs there, with what the primary had.
    let lease = queue.take().await.unwrap().expect("a pending shard");
    let took = killed.elapsed();
    assert!(took < Duration::from_secs(30), "took {took:?}");
    assert_eq!(ground.master_port(), Some(ground.replica.port));
    assert!(
        queue.renew(&lease).await.unwrap(),
        "the lease is the promoted replica's"
    );
    let counts = queue.counts().await.unwrap();
    assert_eq!(
        counts,
        QueueCounts {
            pending: 9,
            leased: 1,
            ..QueueCounts::default()
        }
    );
    eprintln!("the step after the kill took {took:?}");
}

/// A forced failover (`SENTINEL FAILOVER`) demotes the running primary to a
/// replica of the new master (and the sentinels cut its clients off): the
/// connection finds the new master and writes go on there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sentinel_connection_follows_a_failover_that_demotes_its_primary() {
    let ground = SentinelGround::start(auth());
    let queue = queue(&ground.url(), "demoted").await;
    assert_eq!(queue.enqueue(&shards(4)).await.unwrap(), 4);
    ground.wait_replicated();

    let mut failover = redis::cmd("SENTINEL");
    failover.arg("FAILOVER").arg(sentinel_ground::MASTER);
    let _: () = ground.on_sentinel(&failover).unwrap();
    let promoted = ground.wait_for_failover(Duration::from_secs(30));
    assert_eq!(promoted, ground.replica.port);
    ground.wait_for_role(ground.primary.port, "slave", Duration::from_secs(30));

    let more: Vec<Shard> = (0..2).map(|i| Shard::prefix(format!("after{i}/"))).collect();
    assert_eq!(queue.enqueue(&more).await.unwrap(), 2);
    let on_new: i64 = ground
        .on_node(promoted, redis::cmd("SCARD").arg("bs:{demoted}:shards"))
        .unwrap();
    assert_eq!(
        on_new, 6,
        "the write after the failover is on the promoted master"
    );
}

/// A server that turned replica answers READONLY to writes: a transient
/// error, retried on a new connection within the patience, here until the
/// replica is promoted by hand (as a failover would). No sentinels: they
/// would turn it back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_answering_readonly_is_waited_out_until_it_is_promoted() {
    let primary = sentinel_ground::data_node("ro-primary", &Auth::default(), None);
    let replica = sentinel_ground::data_node("ro-replica", &Auth::default(), Some(primary.port));
    let url = format!("redis://127.0.0.1:{}", replica.port);
    let config = RedisConfig {
        patience: Duration::from_secs(30),
        ..RedisConfig::new(&url)
    };
    let queue = Queue::connect(&config, "readonly", "worker", Duration::from_secs(60))
        .await
        .unwrap();
    let promote = tokio::task::spawn_blocking(move || {
        std::thread::sleep(Duration::from_secs(2));
        let client = redis::Client::open(url).unwrap();
        let mut con = client.get_connection().unwrap();
        let _: () = redis::cmd("REPLICAOF")
            .arg("NO")
            .arg("ONE")
            .query(&mut con)
            .unwrap();
    });
    let started = Instant::now();
    assert_eq!(queue.enqueue(&shards(3)).await.unwrap(), 3);
    assert!(
        started.elapsed() >= Duration::from_secs(2),
        "written before the promotion?"
    );
    promote.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_name_no_sentinel_knows_is_refused_at_once() {
    let ground = SentinelGround::start(auth());
    let url = ground.url().replace("/mymaster", "/mymastr");
    let started = Instant::now();
    let e = RedisConfig::new(&url).connect().await.err().expect("refused");
    assert!(matches!(e, QueueError::UnknownMaster { .. }), "{e}");
    assert!(e.to_string().contains("\"mymastr\""), "{e}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    for secret in [PASSWORD, SENTINEL_PASSWORD] {
        assert!(!e.to_string().contains(secret), "{e}");
    }
}

/// Scan pods get the sentinels' credentials to find the master: the
/// operator checks they can do nothing more. A user that may only look the
/// master up passes; the sentinels' default user (which may SENTINEL
/// MONITOR, REMOVE, FAILOVER: point every client at a server of a tenant's
/// choosing and take the operator's password) is refused, and so is an
/// address with no sentinel user.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_sentinel_credentials_that_can_only_find_the_master_go_to_pods() {
    use bucketscan_core::fleet::queue::sentinel::{parse, SentinelRightsError};
    let ground = SentinelGround::start(auth());
    let url = ground.url();
    let finder = parse(&url).unwrap().unwrap();
    finder.check_lookup_only().await.unwrap();
    let default = parse(&url.replace("sentinelUser=finder", "sentinelUser=default"))
        .unwrap()
        .unwrap();
    assert!(matches!(
        default.check_lookup_only().await,
        Err(SentinelRightsError::MayReconfigure)
    ));
    let mut anonymous = finder.clone();
    anonymous.sentinel_username = None;
    assert!(matches!(
        anonymous.check_lookup_only().await,
        Err(SentinelRightsError::NoUser)
    ));
}
