//! A fault proxy in front of a real S3 server: every request is forwarded
//! unchanged (the Host header included, so versitygw still verifies the
//! client's signature), except that its rules may answer a chosen request
//! itself, forward it with another path and query, or rewrite the server's
//! answer. It emulates what no server here does by itself: per-object
//! refusals, throttling, dropped connections, empty pages, AWS-only headers
//! and error documents. The worker and operator tests' one HTTP proxy.

#![allow(dead_code)]

use bytes::Bytes;
use http::request::Parts as RequestParts;
use http::response::Parts as ResponseParts;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use std::sync::{Arc, Mutex};

/// What the proxy saw of one request.
#[derive(Clone, Debug)]
pub struct Seen {
    pub method: String,
    /// Path and query, as sent.
    pub target: String,
    pub authorization: Option<String>,
    /// The `x-amz-copy-source` header: a server-side copy (UploadPartCopy,
    /// CopyObject).
    pub copy_source: Option<String>,
    /// `true` when a rule answered instead of the server.
    pub answered_by_rule: bool,
}

/// Answer a request without asking the server (`None`: forward it).
pub type Answer = dyn Fn(&RequestParts) -> Option<Response<Full<Bytes>>> + Send + Sync;
/// Rewrite the server's answer to a request (its head and body).
pub type Rewrite = dyn Fn(&RequestParts, &mut ResponseParts, &mut Bytes) + Send + Sync;
/// The path and query to forward a request with (`None`: as sent).
pub type Target = dyn Fn(&RequestParts) -> Option<String> + Send + Sync;
/// How long to hold a request before anything else is done with it.
pub type Delay = dyn Fn(&RequestParts) -> Option<std::time::Duration> + Send + Sync;

/// What the proxy does besides forwarding; each rule is optional.
#[derive(Default)]
pub struct Rules {
    pub answer: Option<Box<Answer>>,
    pub target: Option<Box<Target>>,
    pub rewrite: Option<Box<Rewrite>>,
    pub delay: Option<Box<Delay>>,
    /// Answer the request with a reset at once and forward it only after
    /// this long, its answer dropped: a write that reaches the store after
    /// its sender gave up on it (and wrote again).
    pub late: Option<Box<Delay>>,
}

/// Marks an answer of the rules as "close the connection instead": the
/// client sees the connection reset before any answer.
#[derive(Clone, Copy, Debug)]
pub struct ResetConnection;

/// An answer that is no answer: the connection is dropped.
pub fn reset() -> Response<Full<Bytes>> {
    let mut resp = Response::new(Full::new(Bytes::new()));
    resp.extensions_mut().insert(ResetConnection);
    resp
}

pub struct FaultProxy {
    pub url: String,
    pub seen: Arc<Mutex<Vec<Seen>>>,
}

impl FaultProxy {
    pub fn requests(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

/// An answer with a status, headers and body.
pub fn answer(status: u16, headers: &[(&str, &str)], body: &str) -> Response<Full<Bytes>> {
    let mut resp = Response::builder().status(status);
    for (name, value) in headers {
        resp = resp.header(*name, *value);
    }
    resp.body(Full::new(Bytes::from(body.to_string()))).unwrap()
}

/// S3's throttling answer: 503 SlowDown.
pub fn slow_down() -> Response<Full<Bytes>> {
    error_document(503, "SlowDown", "Please reduce your request rate.", &[])
}

/// An S3 error document.
pub fn error_document(
    status: u16,
    code: &str,
    message: &str,
    headers: &[(&str, &str)],
) -> Response<Full<Bytes>> {
    let body = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>{code}</Code><Message>{message}</Message><RequestId>fault-proxy</RequestId></Error>"
    );
    let mut headers = headers.to_vec();
    headers.push(("content-type", "application/xml"));
    answer(status, &headers, &body)
}

/// The bucket a path-style request target (`/bucket/key?query`) names.
pub fn bucket_of(target: &str) -> &str {
    target
        .trim_start_matches('/')
        .split(['/', '?'])
        .next()
        .unwrap_or_default()
}

/// A LIST whose `start-after` begins with `start`: how a fleet test picks
/// the first LIST of one planned shard (a shard's range starts after
/// `key_before` of its first key, `b.` and U+10FFFF... for `b/`).
pub fn lists_after(req: &RequestParts, start: &str) -> bool {
    req.method == "GET"
        && req.uri.query().unwrap_or_default().split('&').any(|kv| {
            kv.strip_prefix("start-after=")
                .is_some_and(|v| v.starts_with(start))
        })
}

/// The object key a path-style request names (`/bucket/key` → `key`,
/// percent-decoded), `None` for bucket-level requests.
pub fn object_key(req: &RequestParts) -> Option<String> {
    let path = req.uri.path().trim_start_matches('/');
    let (_, key) = path.split_once('/')?;
    (!key.is_empty()).then(|| {
        percent_encoding::percent_decode_str(key)
            .decode_utf8_lossy()
            .into_owned()
    })
}

pub async fn start(
    upstream: String,
    answer: impl Fn(&RequestParts) -> Option<Response<Full<Bytes>>> + Send + Sync + 'static,
    rewrite: impl Fn(&RequestParts, &mut ResponseParts) + Send + Sync + 'static,
) -> FaultProxy {
    start_rewriting(upstream, answer, move |req, resp, _| rewrite(req, resp)).await
}

/// As [`start`], with a rewrite that may change the answer's body too.
pub async fn start_rewriting(
    upstream: String,
    answer: impl Fn(&RequestParts) -> Option<Response<Full<Bytes>>> + Send + Sync + 'static,
    rewrite: impl Fn(&RequestParts, &mut ResponseParts, &mut Bytes) + Send + Sync + 'static,
) -> FaultProxy {
    let rules = Rules {
        answer: Some(Box::new(answer)),
        rewrite: Some(Box::new(rewrite)),
        ..Rules::default()
    };
    start_with(upstream, rules).await
}

/// The proxy with `rules`.
pub async fn start_with(upstream: String, rules: Rules) -> FaultProxy {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let state = Arc::new((client, upstream, seen.clone(), rules));
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            let state = state.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                    let state = state.clone();
                    async move {
                        let (client, upstream, seen, rules) = &*state;
                        let (mut parts, body) = req.into_parts();
                        if let Some(held) = rules.delay.as_ref().and_then(|delay| delay(&parts)) {
                            tokio::time::sleep(held).await;
                        }
                        let late = rules.late.as_ref().and_then(|late| late(&parts));
                        let ruled = match late {
                            Some(_) => None,
                            None => rules.answer.as_ref().and_then(|answer| answer(&parts)),
                        };
                        seen.lock().unwrap().push(Seen {
                            method: parts.method.to_string(),
                            target: parts
                                .uri
                                .path_and_query()
                                .map(|p| p.to_string())
                                .unwrap_or_default(),
                            authorization: parts
                                .headers
                                .get("authorization")
                                .map(|v| v.to_str().unwrap_or_default().to_string()),
                            copy_source: parts
                                .headers
                                .get("x-amz-copy-source")
                                .map(|v| v.to_str().unwrap_or_default().to_string()),
                            answered_by_rule: ruled.is_some() || late.is_some(),
                        });
                        if let Some(late) = late {
                            let body = body.collect().await.map_err(|e| e.to_string())?.to_bytes();
                            let target = parts
                                .uri
                                .path_and_query()
                                .map(|p| p.to_string())
                                .unwrap_or_default();
                            let mut late_parts = parts.clone();
                            late_parts.uri = format!("{upstream}{target}").parse().unwrap();
                            let client = client.clone();
                            tokio::spawn(async move {
                                tokio::time::sleep(late).await;
                                let _ = client
                                    .request(Request::from_parts(late_parts, Full::new(body)))
                                    .await;
                            });
                            return Err(
                                "connection reset by the fault proxy (the request goes on later)".to_string()
                            );
                        }
                        if let Some(resp) = ruled {
                            if resp.extensions().get::<ResetConnection>().is_some() {
                                return Err("connection reset by the fault proxy".to_string());
                            }
                            return Ok::<_, String>(resp);
                        }
                        let body = body.collect().await.map_err(|e| e.to_string())?.to_bytes();
                        let original = parts.clone();
                        let target = rules.target.as_ref().and_then(|target| target(&original));
                        let target = target
                            .as_deref()
                            .unwrap_or_else(|| parts.uri.path_and_query().map(|p| p.as_str()).unwrap_or("/"));
                        parts.uri = format!("{upstream}{target}").parse().unwrap();
                        let resp = client
                            .request(Request::from_parts(parts, Full::new(body)))
                            .await
                            .map_err(|e| e.to_string())?;
                        let (mut resp_parts, body) = resp.into_parts();
                        let mut body = body.collect().await.map_err(|e| e.to_string())?.to_bytes();
                        let sent = body.clone();
                        if let Some(rewrite) = &rules.rewrite {
                            rewrite(&original, &mut resp_parts, &mut body);
                        }
                        // A HEAD answer's length is the object's: kept unless
                        // the rewrite changed the body.
                        if body != sent {
                            let length = http::HeaderValue::from(body.len());
                            resp_parts.headers.insert(http::header::CONTENT_LENGTH, length);
                        }
                        Ok(Response::from_parts(resp_parts, Full::new(body)))
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    FaultProxy { url, seen }
}
