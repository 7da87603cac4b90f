//! The HEAD path's keep-alive connections: HTTP/1 connections of hyper's
//! connection level, each carrying one request at a time, taken from an idle
//! list and put back as soon as the answer's head is read (a HEAD answer has
//! no body). hyper-util's pooled client does the same job for every other
//! request, at a cost that shows per HEAD: a pool checkout, and a task
//! spawned per request to put the connection back when it is ready again. On
//! the bare HEAD loop of the benchmarks, connections used this way cost 0.6x
//! the CPU per HEAD of the pooled client (docs/head-path.md).
//!
//! May import: the bottom of `s3` (error, types) and `transport`.

use super::error::{connection_failed, S3Error};
use super::transport::{HttpsConnector, MAX_ANSWER_HEADERS};
use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Empty;
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Connections idle longer than this are closed rather than used: servers
/// close idle keep-alive connections on their own clock (as hyper-util's
/// pool, whose idle timeout the other requests use).
const IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// Idle connections to the hosts of one endpoint.
pub struct Connections {
    connector: HttpsConnector,
    scheme: String,
    idle: Mutex<Vec<Idle>>,
    max_idle: usize,
}

struct Idle {
    host: String,
    sender: SendRequest<Empty<Bytes>>,
    since: Instant,
}

impl Connections {
    /// Keeps at most `max_idle` connections open between requests.
    pub fn new(connector: HttpsConnector, scheme: &str, max_idle: usize) -> Connections {
        Connections {
            connector,
            scheme: scheme.to_string(),
            idle: Mutex::new(Vec::new()),
            max_idle: max_idle.max(1),
        }
    }

    /// Send `req` (its URI in origin form: path and query) to `host`, on an
    /// idle connection if one is open, else on a new one. A request an idle
    /// connection could not take (the server closed it meanwhile) goes on a
    /// new connection; once sent, a failure is the caller's to retry.
    pub async fn send(&self, host: &str, req: Request<Empty<Bytes>>) -> Result<Response<Incoming>, S3Error> {
        let mut req = req;
        while let Some(mut conn) = self.take_idle(host) {
            if conn.sender.ready().await.is_err() {
                continue; // closed while idle
            }
            match conn.sender.try_send_request(req).await {
                Ok(resp) => {
                    self.put_back(conn.host, conn.sender);
                    return Ok(resp);
                }
                Err(mut e) => match e.take_message() {
                    Some(unsent) => req = unsent,
                    None => return Err(connection_failed(&self.scheme, host, e.error())),
                },
            }
        }
        // Boxed: connecting (TLS included) is rare next to the requests
        // sent on a kept connection, and its future is most of this one's.
        let mut sender = Box::pin(self.connect(host)).await?;
        let resp = sender
            .send_request(req)
            .await
            .map_err(|e| connection_failed(&self.scheme, host, &e))?;
        self.put_back(host.to_string(), sender);
        Ok(resp)
    }

    /// The most recently used idle connection to `host` (warm in every
    /// cache), unless it has been idle too long. Only that one's age is
    /// read: reading every idle connection's was 5 % of a scan's CPU.
    fn take_idle(&self, host: &str) -> Option<Idle> {
        let mut idle = self.idle.lock().expect("lock");
        while let Some(at) = idle.iter().rposition(|c| c.host == host) {
            let conn = idle.swap_remove(at);
            if conn.since.elapsed() < IDLE_TIMEOUT && !conn.sender.is_closed() {
                return Some(conn);
            }
        }
        None
    }

    /// Keep a connection to `host` for the next request, unless enough are
    /// kept; the one idle longest goes if it has been idle too long (the
    /// most recently used are taken first, so the oldest would otherwise
    /// stay forever).
    fn put_back(&self, host: String, sender: SendRequest<Empty<Bytes>>) {
        let now = Instant::now();
        let mut idle = self.idle.lock().expect("lock");
        if idle
            .first()
            .is_some_and(|oldest| now - oldest.since >= IDLE_TIMEOUT)
        {
            idle.remove(0);
        }
        if idle.len() < self.max_idle {
            idle.push(Idle {
                host,
                sender,
                since: now,
            });
        }
    }

    /// A new connection to `host` (TLS when the endpoint is https), served
    /// by its own task until either side closes it.
    async fn connect(&self, host: &str) -> Result<SendRequest<Empty<Bytes>>, S3Error> {
        use tower_service::Service;
        let uri: http::Uri = format!("{}://{host}", self.scheme)
            .parse()
            .map_err(|e| S3Error::Config(format!("{}://{host} is not a URL: {e}", self.scheme)))?;
        let mut connector = self.connector.clone();
        let io = connector
            .call(uri)
            .await
            .map_err(|e| connection_failed(&self.scheme, host, e.as_ref()))?;
        let (sender, connection) = hyper::client::conn::http1::Builder::new()
            .max_headers(MAX_ANSWER_HEADERS)
            .handshake(io)
            .await
            .map_err(|e| connection_failed(&self.scheme, host, &e))?;
        tokio::spawn(async move {
            // Its end (the server closed it, or every sender is gone) is
            // seen by the next request that would use it.
            let _ = connection.await;
        });
        Ok(sender)
    }
}
