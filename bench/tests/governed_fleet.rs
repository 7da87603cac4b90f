//! The rate governor per key partition, end to end: two workers (each its
//! own engine, S3 clients and Redis connection, as two pods) scan a skewed
//! bucket served by the store model with a per-prefix limit, sharing one
//! governor state in the real Redis. Only the hot prefix goes past the
//! limit: its governed rate drops, the cold prefixes and the catch-all stay
//! unlimited, and every object is in the output exactly once.

use bucketscan_bench::keyspace::{Keyspace, Layout};
use bucketscan_bench::server::{spawn_local, Config, Stats};
use bucketscan_bench::store::StoreModel;
use bucketscan_core::fleet::governed;
use bucketscan_core::fleet::governor::{Governor, GovernorConfig};
use bucketscan_core::fleet::queue::{Queue, RedisConfig};
use bucketscan_core::keyspace::shard::Shard;
use bucketscan_core::s3::head::{HeadClient, HeadClientKind};
use bucketscan_core::s3::{Endpoint, S3};
use bucketscan_core::scan::engine::{Engine, EngineOptions};
use bucketscan_core::scan::record::{Record, Status};
use std::collections::BTreeMap;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};
use std::time::Duration;

const OBJECTS: u64 = 4_000;
/// HEADs per second per model partition: what two workers send to `hot/`
/// (80 % of the keys) goes past it, what one sends to a cold prefix does not
/// (see the queue limit).
const PREFIX_LIMIT: f64 = 400.0;

fn redis_url() -> String {
    std::env::var("BUCKETSCAN_TEST_REDIS_URL").expect("run the tests with scripts/with-test-servers.sh")
}

async fn store() -> (String, Keyspace, Arc<Stats>) {
    let keyspace = Keyspace {
        objects: OBJECTS,
        layout: Layout::Skewed,
    };
    let mut model = StoreModel::fixed(Duration::from_millis(1));
    model.prefix_limit = Some(PREFIX_LIMIT);
    // "hot/000000" and "z-cold-NN/": the store's partitions are the
    // first-level prefixes, as the governor's.
    model.partition_chars = 10;
    // 24 HEADs in flight (one worker) queue at most 60 ms at the limit, 48
    // (both workers on hot/) 120 ms: only hot/ is turned away. (The limit
    // is low so that a debug build's clients on a busy machine exceed it.)
    model.queue_limit = Duration::from_millis(80);
    let (url, stats) = spawn_local(Config::synthetic(keyspace, model)).await;
    (url, keyspace, stats)
}

async fn engine(url: &str) -> Arc<Engine> {
    let credentials = aws_credential_types::Credentials::new("synthetic", "synthetic", None, None, "test");
    let s3 = S3::connect_with(
        Endpoint {
            url: Some(url.to_string()),
            region: "us-east-1".into(),
            path_style: true,
            ca_pem: None,
            insecure: false,
            pool_size: 32,
            allowlist: None,
            max_answer_bytes: None,
        },
        Some(credentials),
    )
    .await
    .unwrap();
    let head = HeadClient::new(HeadClientKind::Fast, &s3).unwrap();
    Engine::new(
        s3,
        head,
        EngineOptions {
            bucket: "synthetic".into(),
            concurrency: 24,
            only_with_metadata: false,
            page_size: 1000,
            max_rate: None,
            metadata_source: bucketscan_core::scan::listed::MetadataSource::Head,
            filter: Default::default(),
            columns: Default::default(),
        },
    )
}

/// One worker: take shards from `shards` until none is left.
async fn worker(engine: Arc<Engine>, shards: Arc<Mutex<Vec<Shard>>>) -> Vec<Record> {
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Box<Record>>(1024);
    let collect = tokio::spawn(async move {
        let mut records = vec![];
        while let Some(r) = rx.recv().await {
            records.push(*r);
        }
        records
    });
    loop {
        let Some(shard) = shards.lock().unwrap().pop() else {
            break;
        };
        engine.scan_shard(&shard, &tx).await.unwrap();
    }
    drop(tx);
    collect.await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_throttled_prefix_is_governed_alone_and_the_output_is_exact() {
    let (url, keyspace, stats) = store().await;
    let scan = format!("partitions-{}", std::process::id());
    // Shard ends are exclusive: the second hot shard starts after the key
    // before `middle`, so `middle` is in it.
    let middle = keyspace.key(OBJECTS * 2 / 5);
    let before_middle = keyspace.key(OBJECTS * 2 / 5 - 1);
    // Cold shard first (popped last) so the hot ones are throttled while it runs too.
    let shards = Arc::new(Mutex::new(vec![
        Shard {
            prefix: "z-cold-".into(),
            ..Shard::default()
        },
        Shard {
            prefix: "hot/".into(),
            start_after: Some(before_middle),
            ..Shard::default()
        },
        Shard {
            prefix: "hot/".into(),
            end: Some(middle.clone()),
            ..Shard::default()
        },
    ]));
    let cfg = GovernorConfig::default();
    let mut runs = vec![];
    let mut queues = vec![];
    for name in ["a", "b"] {
        let queue = Queue::connect(
            &RedisConfig::new(redis_url()),
            &scan,
            name,
            Duration::from_secs(30),
        )
        .await
        .unwrap();
        let engine = engine(&url).await;
        let shards = shards.clone();
        let governor = tokio::spawn(governed::govern(
            queue.clone(),
            engine.clone(),
            Duration::from_millis(200),
            cfg.clone(),
        ));
        queues.push(queue);
        runs.push(tokio::spawn(async move {
            let records = worker(engine, shards).await;
            governor.abort();
            records
        }));
    }
    let mut seen: BTreeMap<String, Record> = BTreeMap::new();
    for run in runs {
        for r in run.await.unwrap() {
            assert_eq!(r.status, Status::Ok, "{r:?}");
            let key = r.key.clone();
            assert!(seen.insert(key.clone(), r).is_none(), "{key} twice");
        }
    }
    let missing: Vec<String> = (0..OBJECTS)
        .map(|i| keyspace.key(i))
        .filter(|k| !seen.contains_key(k))
        .collect();
    assert!(
        missing.is_empty(),
        "missing {} keys: {:?}",
        missing.len(),
        &missing[..missing.len().min(5)]
    );
    assert_eq!(seen.len() as u64, OBJECTS, "no key outside the bucket");

    let states: BTreeMap<String, Governor> = queues[0]
        .governors()
        .await
        .unwrap()
        .into_iter()
        .map(|(p, json)| (p, serde_json::from_str(&json).unwrap()))
        .collect();
    assert!(stats.throttled.load(Relaxed) > 0, "the store model pushed back");
    let hot = &states["hot/"];
    assert!(hot.throttles > 0, "{states:?}");
    let rate = hot.rate.expect("the hot prefix is governed");
    assert!(
        rate < 4.0 * PREFIX_LIMIT,
        "governed near the store's limit: {rate}"
    );
    for (partition, g) in &states {
        if partition != "hot/" {
            assert_eq!(g.rate, None, "{partition} was slowed: {states:?}");
            assert_eq!(g.throttles, 0, "{partition}: {states:?}");
        }
    }
    queues[0].delete_scan().await.unwrap();
}

/// Every worker reports every window, calm or not. (Until 2026-11-25 a calm
/// worker reported one window in ten, so the window that met the fleet's
/// first 503 held only the worker that got it, and the whole fleet was cut
/// to that one worker's rate: 16 workers on a store of 5,000/s crawled at
/// 1,100/s.) A calm worker's ten windows each reach Redis and are stepped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_calm_worker_reports_every_window() {
    let (url, _, _) = store().await;
    let scan = format!("calm-{}", std::process::id());
    let queue = Queue::connect(
        &RedisConfig::new(redis_url()),
        &scan,
        "calm",
        Duration::from_secs(30),
    )
    .await
    .unwrap();
    let engine = engine(&url).await;
    let window = Duration::from_millis(100);
    let governor = tokio::spawn(governed::govern(
        queue.clone(),
        engine.clone(),
        window,
        GovernorConfig::default(),
    ));
    // 100 HEADs of 1 ms a window, never a throttle.
    for _ in 0..15 {
        engine.counters.heads.fetch_add(100, Relaxed);
        engine.counters.head_micros.fetch_add(100_000, Relaxed);
        tokio::time::sleep(window).await;
    }
    governor.abort();
    let state: Governor = serde_json::from_str(&queue.governors().await.unwrap()["*"]).unwrap();
    assert!(
        state.windows >= 7,
        "15 calm windows of 100 ms, {} stepped: {state:?}",
        state.windows
    );
    assert_eq!(state.rate, None, "calm: not limited");
    assert_eq!(state.senders, 1);
    queue.delete_scan().await.unwrap();
}
