//! The synthetic S3 endpoint: one bucket, path-style requests, ListObjectsV2
//! and HEAD Object answered from a [`Keyspace`], changed by a share of its
//! objects where [`Config::changes`] says ([`Bucket`]), after the latency the
//! [`StoreModel`] gives (a timer, not CPU), pushing back the way it says (503
//! SlowDown beyond capacity, resets, 500s), optionally with a further share of
//! 503 SlowDown answers. Signed
//! requests are accepted without checking the signature: this endpoint
//! measures clients, the correctness tests use real S3 servers.
//! `GET /_stats`: requests served by kind; `GET /_changes`: the changed
//! bucket's changes (JSON Lines, key order, the change set's names).

use crate::bucket::{Bucket, Changes, Page, UNCHANGED_LAST_MODIFIED};
use crate::keyspace::Keyspace;
use crate::store::{Admission, Kind, Store, StoreModel};
use bytes::Bytes;
use http_body_util::BodyExt;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use std::collections::HashMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

#[derive(Clone, Debug)]
pub struct Config {
    pub bucket: String,
    pub keyspace: Keyspace,
    /// Service times, capacity and faults of the store.
    pub model: StoreModel,
    /// Share of requests answered 503 SlowDown (0 to 1).
    pub slowdown: f64,
    /// `http://HOST:PORT` of a real S3 server for every other bucket.
    pub forward: Option<String>,
    /// No generated bucket: the requests for `bucket`, once the store model
    /// lets them through, go to `forward` too. The model's latency, limits
    /// and faults stand in front of a real S3 server and its real objects.
    pub passthrough: bool,
    /// Serve the keyspace changed by this share of its objects, the changed
    /// ones modified the second after the server started.
    pub changes: Option<Changes>,
}

impl Config {
    /// The generated bucket `synthetic` of `keyspace` behind `model`, with
    /// nothing injected or forwarded.
    pub fn synthetic(keyspace: Keyspace, model: StoreModel) -> Config {
        Config {
            bucket: "synthetic".into(),
            keyspace,
            model,
            slowdown: 0.0,
            forward: None,
            passthrough: false,
            changes: None,
        }
    }
}

/// Serve `config` on a free loopback port until the runtime ends: its URL
/// and counters (tests and in-process benchmarks).
pub async fn spawn_local(config: Config) -> (String, Arc<Stats>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a free loopback port");
    let url = format!("http://{}", listener.local_addr().expect("bound"));
    let stats = Arc::new(Stats::default());
    tokio::spawn(serve(listener, config, stats.clone()));
    (url, stats)
}

/// Requests served, by kind (for the benchmark's own bookkeeping).
#[derive(Debug, Default)]
pub struct Stats {
    pub requests: AtomicU64,
    pub lists: AtomicU64,
    pub heads: AtomicU64,
    /// 503 SlowDown answers (injected or beyond capacity).
    pub slowdowns: AtomicU64,
    /// Of those, the ones the capacity or a per-prefix limit turned away.
    pub throttled: AtomicU64,
    /// Of those, the ones the model's sporadic share gave (not the load).
    pub sporadic: AtomicU64,
    pub resets: AtomicU64,
    pub internal_errors: AtomicU64,
    /// Requests passed on to `forward` (not counted in `requests`).
    pub forwarded: AtomicU64,
    /// Time the served requests waited in the model's capacity or prefix
    /// queues, in all (how far past its capacity the store was pushed).
    pub queued_micros: AtomicU64,
}

impl Stats {
    pub fn json(&self) -> String {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        format!(
            "{{\"requests\":{},\"lists\":{},\"heads\":{},\"slowdowns\":{},\"throttled\":{},\"sporadic\":{},\"resets\":{},\"internal_errors\":{},\"forwarded\":{},\"queued_us\":{}}}",
            get(&self.requests),
            get(&self.lists),
            get(&self.heads),
            get(&self.slowdowns),
            get(&self.throttled),
            get(&self.sporadic),
            get(&self.resets),
            get(&self.internal_errors),
            get(&self.forwarded),
            get(&self.queued_micros)
        )
    }
}

type Upstream = Client<HttpConnector, Incoming>;

/// What the server answers from: the bucket and its LastModified times as
/// HEAD and LIST write them (the bucket has two: unchanged and changed).
struct Served {
    config: Config,
    bucket: Bucket,
    times: [(i64, String, String); 2],
}

impl Served {
    fn new(config: Config, started: std::time::SystemTime) -> Served {
        let started = started
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64);
        // The second after the start: later than any scan before it began.
        let changed_at = started + 1;
        let bucket = match config.changes {
            Some(changes) => Bucket::changed(config.keyspace, changes, changed_at),
            None => Bucket::unchanged(config.keyspace),
        };
        let times = [UNCHANGED_LAST_MODIFIED, changed_at].map(|t| {
            let at = time::OffsetDateTime::from_unix_timestamp(t).expect("a time of this era");
            let http = format!(
                "{}, {:02} {} {} {:02}:{:02}:{:02} GMT",
                &at.weekday().to_string()[..3],
                at.day(),
                &at.month().to_string()[..3],
                at.year(),
                at.hour(),
                at.minute(),
                at.second()
            );
            let xml = format!(
                "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.000Z",
                at.year(),
                at.month() as u8,
                at.day(),
                at.hour(),
                at.minute(),
                at.second()
            );
            (t, http, xml)
        });
        Served {
            config,
            bucket,
            times,
        }
    }

    /// (HTTP date, XML time) of unix seconds `t`, one of the bucket's two.
    fn time(&self, t: i64) -> (&str, &str) {
        let (_, http, xml) = self
            .times
            .iter()
            .find(|(at, ..)| *at == t)
            .unwrap_or(&self.times[0]);
        (http, xml)
    }
}

/// Serve on `listener` until the task is dropped.
pub async fn serve(
    listener: tokio::net::TcpListener,
    config: Config,
    stats: Arc<Stats>,
) -> std::io::Result<()> {
    let store = Arc::new(Store::new(config.model.clone()));
    let config = Arc::new(Served::new(config, std::time::SystemTime::now()));
    let upstream: Upstream =
        Client::builder(hyper_util::rt::TokioExecutor::new()).build(HttpConnector::new());
    loop {
        let (stream, _) = listener.accept().await?;
        let _ = stream.set_nodelay(true);
        let (config, stats, upstream, store) =
            (config.clone(), stats.clone(), upstream.clone(), store.clone());
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let (config, stats, upstream, store) =
                    (config.clone(), stats.clone(), upstream.clone(), store.clone());
                // An error from the service makes hyper drop the connection
                // without an answer: the model's connection reset.
                async move { answer(req, &config, &store, &stats, &upstream).await }
            });
            let io = hyper_util::rt::TokioIo::new(stream);
            let _ = hyper::server::conn::http1::Builder::new()
                .keep_alive(true)
                .serve_connection(io, service)
                .await;
        });
    }
}

async fn answer(
    req: Request<Incoming>,
    served: &Served,
    store: &Store,
    stats: &Stats,
    upstream: &Upstream,
) -> Result<Response<Full<Bytes>>, std::io::Error> {
    Ok(match modelled(&req, &served.config, store, stats).await {
        Modelled::Serve => respond(req, served, stats, upstream).await,
        Modelled::Answer(response) => response,
        Modelled::Reset => return Err(std::io::Error::other("connection reset by the store model")),
    })
}

enum Modelled {
    Serve,
    Answer(Response<Full<Bytes>>),
    Reset,
}

/// What the store model does with a request for the synthetic bucket: wait
/// its latency and serve it, or push back.
async fn modelled(req: &Request<Incoming>, config: &Config, store: &Store, stats: &Stats) -> Modelled {
    let path = req.uri().path().trim_start_matches('/');
    let (bucket, key) = path.split_once('/').unwrap_or((path, ""));
    if path == "_stats" || path == "_changes" || bucket != config.bucket {
        return Modelled::Serve;
    }
    let kind = if key.is_empty() { Kind::List } else { Kind::Head };
    match store.admit(kind, key) {
        Admission::Serve { queued, service } => {
            stats
                .queued_micros
                .fetch_add(queued.as_micros() as u64, Ordering::Relaxed);
            let delay = queued + service;
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            Modelled::Serve
        }
        Admission::SlowDown => {
            stats.requests.fetch_add(1, Ordering::Relaxed);
            stats.slowdowns.fetch_add(1, Ordering::Relaxed);
            stats.throttled.fetch_add(1, Ordering::Relaxed);
            Modelled::Answer(slow_down())
        }
        Admission::SporadicSlowDown => {
            stats.requests.fetch_add(1, Ordering::Relaxed);
            stats.slowdowns.fetch_add(1, Ordering::Relaxed);
            stats.sporadic.fetch_add(1, Ordering::Relaxed);
            Modelled::Answer(slow_down())
        }
        Admission::InternalError => {
            stats.requests.fetch_add(1, Ordering::Relaxed);
            stats.internal_errors.fetch_add(1, Ordering::Relaxed);
            Modelled::Answer(error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "InternalError",
                "We encountered an internal error. Please try again.",
            ))
        }
        Admission::Reset => {
            stats.requests.fetch_add(1, Ordering::Relaxed);
            stats.resets.fetch_add(1, Ordering::Relaxed);
            Modelled::Reset
        }
    }
}

fn slow_down() -> Response<Full<Bytes>> {
    error(
        StatusCode::SERVICE_UNAVAILABLE,
        "SlowDown",
        "Please reduce your request rate.",
    )
}

async fn respond(
    req: Request<Incoming>,
    served: &Served,
    stats: &Stats,
    upstream: &Upstream,
) -> Response<Full<Bytes>> {
    let config = &served.config;
    let path = req.uri().path().trim_start_matches('/');
    let (bucket, key) = path.split_once('/').unwrap_or((path, ""));
    if path == "_stats" {
        return Response::builder()
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(stats.json())))
            .expect("valid");
    }
    if path == "_changes" {
        return changes(served);
    }
    if let Some(base) = config
        .forward
        .as_deref()
        .filter(|_| config.passthrough || bucket != config.bucket)
    {
        stats.forwarded.fetch_add(1, Ordering::Relaxed);
        return forward(req, base, upstream).await;
    }
    let n = stats.requests.fetch_add(1, Ordering::Relaxed);
    if config.slowdown > 0.0 && unit(n) < config.slowdown {
        stats.slowdowns.fetch_add(1, Ordering::Relaxed);
        return slow_down();
    }
    if bucket != config.bucket {
        return error(
            StatusCode::NOT_FOUND,
            "NoSuchBucket",
            "The specified bucket does not exist",
        );
    }
    match (req.method(), key.is_empty()) {
        (&Method::GET, true) => {
            stats.lists.fetch_add(1, Ordering::Relaxed);
            list(&req, served)
        }
        (&Method::HEAD, true) => empty(StatusCode::OK),
        (&Method::HEAD, false) => {
            stats.heads.fetch_add(1, Ordering::Relaxed);
            head(key, served)
        }
        _ => error(
            StatusCode::NOT_IMPLEMENTED,
            "NotImplemented",
            "Only LIST and HEAD are served",
        ),
    }
}

/// Pass `req` on to the server at `base` as it came (its Host header, so its
/// signature, unchanged) and relay the answer.
async fn forward(req: Request<Incoming>, base: &str, upstream: &Upstream) -> Response<Full<Bytes>> {
    let target = req.uri().path_and_query().map_or("/", |p| p.as_str());
    let uri = match format!("{base}{target}").parse::<hyper::Uri>() {
        Ok(uri) => uri,
        Err(e) => return error(StatusCode::BAD_GATEWAY, "BadGateway", &e.to_string()),
    };
    let (mut parts, body) = req.into_parts();
    parts.uri = uri;
    let head = parts.method == Method::HEAD;
    let answer = match upstream.request(Request::from_parts(parts, body)).await {
        Ok(answer) => answer,
        Err(e) => return error(StatusCode::BAD_GATEWAY, "BadGateway", &e.to_string()),
    };
    let (mut parts, body) = answer.into_parts();
    let body = match body.collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) => return error(StatusCode::BAD_GATEWAY, "BadGateway", &e.to_string()),
    };
    // The body is relayed whole: its length is known again here (a HEAD
    // answer keeps the object's).
    parts.headers.remove(hyper::header::TRANSFER_ENCODING);
    parts.headers.remove(hyper::header::CONNECTION);
    if !head {
        parts.headers.remove(hyper::header::CONTENT_LENGTH);
    }
    Response::from_parts(parts, Full::new(body))
}

/// A well-spread number in [0, 1) from a counter (deterministic SlowDowns).
fn unit(n: u64) -> f64 {
    let x = n.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 11;
    x as f64 / (1u64 << 53) as f64
}

/// The changed bucket's changes, one JSON object a line, in key order
/// (empty for an unchanged bucket): what a benchmark checks a change set
/// against.
fn changes(served: &Served) -> Response<Full<Bytes>> {
    let mut body = String::new();
    for (key, kind) in served.bucket.changes() {
        let _ = writeln!(
            body,
            "{{\"key\":\"{key}\",\"change\":\"{}\"}}",
            kind.change_set_name()
        );
    }
    Response::builder()
        .header("content-type", "application/x-ndjson")
        .body(Full::new(Bytes::from(body)))
        .expect("valid")
}

fn head(raw_key: &str, served: &Served) -> Response<Full<Bytes>> {
    let key = percent_encoding::percent_decode_str(raw_key).decode_utf8_lossy();
    let Some((object, last_modified)) = served.bucket.head(&key) else {
        return empty(StatusCode::NOT_FOUND);
    };
    let mut resp = Response::builder()
        .status(StatusCode::OK)
        .header("content-length", object.size)
        .header("etag", format!("\"{}\"", object.etag))
        .header("last-modified", served.time(last_modified).0)
        .header("content-type", "application/octet-stream");
    for (name, value) in &object.metadata {
        resp = resp.header(format!("x-amz-meta-{name}"), value);
    }
    // A HEAD answer has no body; its content-length is the object's size.
    resp.body(Full::new(Bytes::new())).expect("valid headers")
}

fn list(req: &Request<Incoming>, served: &Served) -> Response<Full<Bytes>> {
    let config = &served.config;
    let query: HashMap<String, String> = req
        .uri()
        .query()
        .unwrap_or("")
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            let decode = |s: &str| {
                percent_encoding::percent_decode_str(&s.replace('+', " "))
                    .decode_utf8_lossy()
                    .into_owned()
            };
            (decode(k), decode(v))
        })
        .collect();
    let get = |k: &str| query.get(k).map(String::as_str);
    let prefix = get("prefix").unwrap_or("");
    let max = get("max-keys")
        .and_then(|m| m.parse().ok())
        .unwrap_or(1000usize)
        .clamp(1, 1000);
    let from = match get("continuation-token") {
        Some(token) => match token.parse() {
            Ok(i) => Some(i),
            Err(_) => {
                return error(
                    StatusCode::BAD_REQUEST,
                    "InvalidArgument",
                    "bad continuation token",
                )
            }
        },
        None => None,
    };
    let delimiter = get("delimiter").filter(|d| !d.is_empty());
    let page = served
        .bucket
        .list(prefix, get("start-after"), from, delimiter, max);
    let body = list_xml(
        served,
        &config.bucket,
        prefix,
        delimiter,
        max,
        get("encoding-type"),
        &page,
    );
    Response::builder()
        .status(StatusCode::OK)
        .header("content-type", "application/xml")
        .body(Full::new(Bytes::from(body)))
        .expect("valid headers")
}

fn list_xml(
    served: &Served,
    bucket: &str,
    prefix: &str,
    delimiter: Option<&str>,
    max: usize,
    encoding: Option<&str>,
    page: &Page,
) -> String {
    // Generated keys are plain ASCII without XML specials; no escaping needed.
    let mut x = String::with_capacity(200 + page.entries.len() * 250);
    x.push_str("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<ListBucketResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">");
    let _ = write!(
        x,
        "<Name>{bucket}</Name><Prefix>{prefix}</Prefix><MaxKeys>{max}</MaxKeys>"
    );
    let _ = write!(
        x,
        "<KeyCount>{}</KeyCount>",
        page.entries.len() + page.common_prefixes.len()
    );
    if let Some(d) = delimiter {
        let _ = write!(x, "<Delimiter>{d}</Delimiter>");
    }
    if let Some(e) = encoding {
        let _ = write!(x, "<EncodingType>{e}</EncodingType>");
    }
    let _ = write!(x, "<IsTruncated>{}</IsTruncated>", page.next.is_some());
    if let Some(next) = page.next {
        let _ = write!(x, "<NextContinuationToken>{next}</NextContinuationToken>");
    }
    for e in &page.entries {
        let _ = write!(
            x,
            "<Contents><Key>{}</Key><LastModified>{}</LastModified><ETag>&quot;{}&quot;</ETag><Size>{}</Size><StorageClass>STANDARD</StorageClass></Contents>",
            e.key,
            served.time(e.last_modified).1,
            e.etag,
            e.size
        );
    }
    for p in &page.common_prefixes {
        let _ = write!(x, "<CommonPrefixes><Prefix>{p}</Prefix></CommonPrefixes>");
    }
    x.push_str("</ListBucketResult>");
    x
}

fn empty(status: StatusCode) -> Response<Full<Bytes>> {
    Response::builder()
        .status(status)
        .body(Full::new(Bytes::new()))
        .expect("valid")
}

fn error(status: StatusCode, code: &str, message: &str) -> Response<Full<Bytes>> {
    let body = format!("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>{code}</Code><Message>{message}</Message></Error>");
    Response::builder()
        .status(status)
        .header("content-type", "application/xml")
        .body(Full::new(Bytes::from(body)))
        .expect("valid")
}
