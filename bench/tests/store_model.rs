//! The store model, measured from outside over real TCP: latencies have the
//! configured median and tail, 503 SlowDown comes only beyond capacity (per
//! prefix when a per-prefix limit is set) at the share the overload implies,
//! and resets and 500s come at their configured shares.

use bucketscan_bench::keyspace::{Keyspace, Layout};
use bucketscan_bench::server::{spawn_local, Config, Stats};
use bucketscan_bench::store::{Latency, StoreModel};
use bytes::Bytes;
use http_body_util::Empty;
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

type HttpClient = Client<HttpConnector, Empty<Bytes>>;

const OBJECTS: u64 = 10_000;

/// The tests measure time: one at a time, so they do not load each other.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

async fn endpoint(model: StoreModel, layout: Layout) -> (String, Keyspace, Arc<Stats>) {
    let keyspace = Keyspace {
        objects: OBJECTS,
        layout,
    };
    let (url, stats) = spawn_local(Config::synthetic(keyspace, model)).await;
    (url, keyspace, stats)
}

fn client() -> HttpClient {
    Client::builder(hyper_util::rt::TokioExecutor::new()).build(HttpConnector::new())
}

/// One request: its status (0 when the connection broke) and how long it took.
async fn request(client: &HttpClient, method: hyper::Method, uri: String) -> (u16, Duration) {
    let started = Instant::now();
    let req = hyper::Request::builder()
        .method(method)
        .uri(uri)
        .body(Empty::new())
        .unwrap();
    let status = match client.request(req).await {
        Ok(resp) => {
            use http_body_util::BodyExt;
            let status = resp.status().as_u16();
            let _ = resp.into_body().collect().await;
            status
        }
        Err(_) => 0,
    };
    (status, started.elapsed())
}

/// `n` requests made by `uri(i)`, `in_flight` at a time.
async fn closed_loop(
    method: hyper::Method,
    n: u64,
    in_flight: usize,
    uri: impl Fn(u64) -> String,
) -> Vec<(u16, Duration)> {
    use futures_util::StreamExt;
    let client = client();
    futures_util::stream::iter(0..n)
        .map(|i| request(&client, method.clone(), uri(i)))
        .buffer_unordered(in_flight)
        .collect()
        .await
}

/// Requests sent at `rate` per second for `secs`, whatever the answers
/// (an open loop, as a fleet offers load). Returns the statuses, the rate
/// offered and the time from the first request to the last answer.
async fn open_loop(rate: f64, secs: f64, uri: impl Fn(u64) -> String) -> (Vec<u16>, f64, f64) {
    let client = client();
    let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / rate));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let started = Instant::now();
    let mut tasks = Vec::new();
    let mut i = 0;
    while started.elapsed().as_secs_f64() < secs {
        tick.tick().await;
        let (client, uri) = (client.clone(), uri(i));
        tasks.push(tokio::spawn(async move {
            request(&client, hyper::Method::HEAD, uri).await.0
        }));
        i += 1;
    }
    let offered = i as f64 / started.elapsed().as_secs_f64();
    let mut statuses = Vec::new();
    for t in tasks {
        statuses.push(t.await.unwrap());
    }
    (statuses, offered, started.elapsed().as_secs_f64())
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn quantile(latencies: &mut [f64], q: f64) -> f64 {
    latencies.sort_by(f64::total_cmp);
    latencies[((latencies.len() as f64 * q) as usize).min(latencies.len() - 1)]
}

/// The measured median and p99 are the configured ones plus what the client,
/// the loopback and a shared machine add (never less: the model sleeps at
/// least its sample); that overhead is about the same at both quantiles.
fn within(latencies: &mut [f64], median: f64, p99: f64, what: &str) {
    let (m, t) = (quantile(latencies, 0.5), quantile(latencies, 0.99));
    assert!(
        m >= median * 0.95 && m < median + 8.0,
        "{what} median {m} ms, configured {median}"
    );
    let spread = t - m;
    let want = p99 - median;
    assert!(
        spread > want * 0.7 && spread < want * 1.4 + 8.0,
        "{what} p99 {t} ms over median {m} ms, configured {p99} over {median}"
    );
}

fn share(statuses: &[u16], status: u16) -> f64 {
    statuses.iter().filter(|s| **s == status).count() as f64 / statuses.len() as f64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lists_and_heads_take_their_configured_median_and_tail() {
    let _one = ONE_AT_A_TIME.lock().await;
    let model = StoreModel {
        list: Latency {
            median: Duration::from_millis(40),
            p99: Duration::from_millis(120),
        },
        head: Latency {
            median: Duration::from_millis(10),
            p99: Duration::from_millis(40),
        },
        ..StoreModel::fixed(Duration::ZERO)
    };
    let (url, keyspace, stats) = endpoint(model, Layout::Flat).await;
    let heads = closed_loop(hyper::Method::HEAD, 3_000, 16, |i| {
        format!("{url}/synthetic/{}", keyspace.key(i % OBJECTS))
    })
    .await;
    assert!(heads.iter().all(|(s, _)| *s == 200));
    let mut h: Vec<f64> = heads.iter().map(|(_, d)| ms(*d)).collect();
    within(&mut h, 10.0, 40.0, "HEAD");

    let lists = closed_loop(hyper::Method::GET, 1_000, 16, |_| {
        format!("{url}/synthetic?list-type=2&max-keys=10")
    })
    .await;
    assert!(lists.iter().all(|(s, _)| *s == 200));
    let mut l: Vec<f64> = lists.iter().map(|(_, d)| ms(*d)).collect();
    within(&mut l, 40.0, 120.0, "LIST");
    assert_eq!(stats.lists.load(Relaxed), 1_000);
    assert_eq!(stats.throttled.load(Relaxed), 0, "no capacity configured");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slowdown_comes_only_beyond_capacity_at_the_share_the_overload_implies() {
    let _one = ONE_AT_A_TIME.lock().await;
    let model = StoreModel {
        capacity: Some(300.0),
        queue_limit: Duration::from_millis(20),
        ..StoreModel::fixed(Duration::from_millis(1))
    };
    let (url, keyspace, stats) = endpoint(model, Layout::Flat).await;
    let uri = |i: u64| format!("{url}/synthetic/{}", keyspace.key(i % OBJECTS));

    let (below, offered, _) = open_loop(150.0, 1.0, uri).await;
    assert!(offered < 280.0, "offered {offered}/s");
    assert_eq!(share(&below, 503), 0.0, "503 below capacity");
    assert_eq!(stats.throttled.load(Relaxed), 0);

    tokio::time::sleep(Duration::from_millis(100)).await; // the queue drains
    let (beyond, offered, secs) = open_loop(1_000.0, 2.0, uri).await;
    assert!(offered > 700.0, "the test could not offer enough: {offered}/s");
    // The store serves its capacity and turns the rest away (the client's
    // own queueing smooths what arrives, so the share is checked through
    // what was served).
    let served = share(&beyond, 200) * beyond.len() as f64 / secs;
    assert!(
        (220.0..320.0).contains(&served),
        "served {served}/s at capacity 300/s"
    );
    let got = share(&beyond, 503);
    assert!(got > 0.2, "503 share {got} at {offered}/s offered");
    assert_eq!(share(&beyond, 200) + got, 1.0, "nothing but 200 and 503");
    assert_eq!(
        stats.throttled.load(Relaxed),
        beyond.iter().filter(|s| **s == 503).count() as u64
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_prefix_limit_throttles_the_hot_prefix_only() {
    let _one = ONE_AT_A_TIME.lock().await;
    let model = StoreModel {
        prefix_limit: Some(150.0),
        partition_chars: 4, // "hot/" and "z-co": the skewed layout's two partitions
        queue_limit: Duration::from_millis(50),
        ..StoreModel::fixed(Duration::from_millis(1))
    };
    let (url, keyspace, _stats) = endpoint(model, Layout::Skewed).await;
    // Keys below 80 % of the objects are under hot/, the rest under z-cold-NN/.
    let hot = |i: u64| format!("{url}/synthetic/{}", keyspace.key(i % (OBJECTS * 4 / 5)));
    let cold = |i: u64| format!("{url}/synthetic/{}", keyspace.key(OBJECTS * 4 / 5 + i % 1_000));
    let ((hot, hot_offered, secs), (cold, cold_offered, _)) =
        tokio::join!(open_loop(500.0, 2.0, hot), open_loop(60.0, 2.0, cold));
    assert!(
        hot_offered > 350.0 && cold_offered < 130.0,
        "{hot_offered} {cold_offered}"
    );
    let served = share(&hot, 200) * hot.len() as f64 / secs;
    assert!(
        (110.0..160.0).contains(&served),
        "hot served {served}/s at a limit of 150/s"
    );
    assert!(share(&hot, 503) > 0.2, "hot 503 share {}", share(&hot, 503));
    assert_eq!(share(&cold, 503), 0.0, "the cold prefix is under its limit");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resets_and_internal_errors_come_at_their_shares() {
    let _one = ONE_AT_A_TIME.lock().await;
    let model = StoreModel {
        resets: 0.05,
        errors: 0.05,
        ..StoreModel::fixed(Duration::from_millis(1))
    };
    let (url, keyspace, stats) = endpoint(model, Layout::Flat).await;
    let answers = closed_loop(hyper::Method::HEAD, 4_000, 32, |i| {
        format!("{url}/synthetic/{}", keyspace.key(i % OBJECTS))
    })
    .await;
    let statuses: Vec<u16> = answers.iter().map(|(s, _)| *s).collect();
    let (resets, errors) = (share(&statuses, 0), share(&statuses, 500));
    assert!((0.03..0.07).contains(&resets), "reset share {resets}");
    assert!((0.03..0.07).contains(&errors), "500 share {errors}");
    assert_eq!(share(&statuses, 200) + resets + errors, 1.0);
    assert_eq!(
        stats.resets.load(Relaxed),
        statuses.iter().filter(|s| **s == 0).count() as u64
    );
}
