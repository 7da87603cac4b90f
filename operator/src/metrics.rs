//! Prometheus metrics and the health endpoints, served on one port:
//! `/metrics` (text exposition), `/healthz` (the process runs), `/readyz`
//! (Kubernetes and Redis answered at start).

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Request, Response, StatusCode};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabel {
    pub result: String,
}

/// The kind of a failed reconcile (`Error::kind` in the controller).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabel {
    pub error: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ScanLabels {
    pub namespace: String,
    pub scan: String,
}

pub struct Metrics {
    registry: Registry,
    pub reconciles: Family<ResultLabel, Counter>,
    /// Failed reconciles by the kind of error.
    pub reconcile_failures: Family<ErrorLabel, Counter>,
    pub reconcile_seconds: Histogram,
    /// Objects HEADed per scan (live counter from Redis).
    pub scan_objects: Family<ScanLabels, Gauge<u64, AtomicU64>>,
    /// Current HEAD rate per scan.
    pub scan_rate: Family<ScanLabels, Gauge<u64, AtomicU64>>,
    /// Shards left (pending + leased) per scan.
    pub scan_shards_left: Family<ScanLabels, Gauge<u64, AtomicU64>>,
    pub leader: Gauge,
    pub ready: AtomicBool,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("bucketscan");
        let reconciles = Family::<ResultLabel, Counter>::default();
        let reconcile_failures = Family::<ErrorLabel, Counter>::default();
        let reconcile_seconds = Histogram::new(exponential_buckets(0.005, 2.0, 14));
        let scan_objects = Family::default();
        let scan_rate = Family::default();
        let scan_shards_left = Family::default();
        let leader = Gauge::default();
        registry.register("reconciles", "Reconciles by result", reconciles.clone());
        registry.register(
            "reconcile_failures",
            "Failed reconciles by kind of error",
            reconcile_failures.clone(),
        );
        registry.register(
            "reconcile_duration_seconds",
            "Time per reconcile",
            reconcile_seconds.clone(),
        );
        registry.register(
            "scan_objects_scanned",
            "Objects HEADed so far",
            scan_objects.clone(),
        );
        registry.register(
            "scan_heads_per_second",
            "HEAD rate of all workers",
            scan_rate.clone(),
        );
        registry.register(
            "scan_shards_left",
            "Shards pending or leased",
            scan_shards_left.clone(),
        );
        registry.register("leader", "1 when this replica leads", leader.clone());
        Metrics {
            registry,
            reconciles,
            reconcile_failures,
            reconcile_seconds,
            scan_objects,
            scan_rate,
            scan_shards_left,
            leader,
            ready: AtomicBool::new(false),
        }
    }
}

impl Metrics {
    pub fn encode(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry).expect("writing to a String");
        out
    }

    pub fn forget_scan(&self, labels: &ScanLabels) {
        self.scan_objects.remove(labels);
        self.scan_rate.remove(labels);
        self.scan_shards_left.remove(labels);
    }
}

/// Serve the endpoints on `addr` until the process ends.
pub async fn serve(addr: std::net::SocketAddr, metrics: Arc<Metrics>) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    tracing::info!(%addr, "serving /metrics, /healthz and /readyz");
    loop {
        let (stream, _) = listener.accept().await?;
        let metrics = metrics.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let metrics = metrics.clone();
                async move { Ok::<_, std::convert::Infallible>(route(&req, &metrics)) }
            });
            let io = hyper_util::rt::TokioIo::new(stream);
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(io, service)
                .await;
        });
    }
}

fn route(req: &Request<hyper::body::Incoming>, metrics: &Metrics) -> Response<Full<Bytes>> {
    let (status, body) = match req.uri().path() {
        "/metrics" => (StatusCode::OK, metrics.encode()),
        "/healthz" => (StatusCode::OK, "ok\n".to_string()),
        "/readyz" if metrics.ready.load(Ordering::Relaxed) => (StatusCode::OK, "ok\n".to_string()),
        "/readyz" => (StatusCode::SERVICE_UNAVAILABLE, "starting\n".to_string()),
        _ => (StatusCode::NOT_FOUND, "not found\n".to_string()),
    };
    Response::builder()
        .status(status)
        .header("content-type", "text/plain; version=0.0.4")
        .body(Full::new(Bytes::from(body)))
        .expect("a valid response")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_are_counted_by_kind_of_error() {
        let m = Metrics::default();
        let s3 = ErrorLabel { error: "s3".into() };
        m.reconcile_failures.get_or_create(&s3).inc();
        m.reconcile_failures.get_or_create(&s3).inc();
        let text = m.encode();
        assert!(
            text.contains("bucketscan_reconcile_failures_total{error=\"s3\"} 2"),
            "{text}"
        );
    }
}
