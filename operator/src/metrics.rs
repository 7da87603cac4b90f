//! Prometheus metrics and the health endpoints, served on one port:
//! `/metrics` (text exposition), `/healthz` (the process runs), `/readyz`
//! (the Kubernetes API answered and Redis answers now).
//!
//! Conventions (Prometheus' naming guide): counters end in `_total` and only
//! grow (a scan's counts are read from Redis, which may have lost some after
//! a restart: a counter never goes back, it waits until the count passes
//! it); no precomputed rates (`rate()` over the counters gives them); units
//! in names; one label per kind of error. A scan's series go with the scan.
//! The chart's dashboard and alerts use only what is exported here
//! (`operator/tests/observability.rs` checks that against a real scrape).

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

/// A scan's shards in one state.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ScanStateLabels {
    pub namespace: String,
    pub scan: String,
    pub state: String,
}

/// A scan in one phase.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ScanPhaseLabels {
    pub namespace: String,
    pub scan: String,
    pub phase: String,
}

type ScanCounter = Family<ScanLabels, Counter<u64, AtomicU64>>;
type ScanGauge = Family<ScanLabels, Gauge<u64, AtomicU64>>;
type ScanStateGauge = Family<ScanStateLabels, Gauge<u64, AtomicU64>>;
type ScanPhaseGauge = Family<ScanPhaseLabels, Gauge<u64, AtomicU64>>;

/// The `error` label values of failed reconciles (`Error::kind`).
pub const ERROR_KINDS: [&str; 8] = [
    "kube",
    "redis",
    "plan",
    "s3",
    "config",
    "recovery",
    "finalizer",
    "conflict",
];

/// What became of a schedule's due run: `started`, `replaced` (started
/// after deleting the active scan), `skipped` (later than
/// startingDeadlineSeconds) and `held` (Forbid: each look that found a scan
/// still active).
pub const SCHEDULE_OUTCOMES: [&str; 4] = ["started", "replaced", "skipped", "held"];

/// The shard states and phases a scan's series are split by.
pub const SHARD_STATES: [&str; 4] = ["pending", "leased", "done", "dead"];
pub const PHASES: [&str; 6] = ["Pending", "Planning", "Scanning", "Merging", "Complete", "Failed"];

pub struct Metrics {
    registry: Registry,
    pub reconciles: Family<ResultLabel, Counter>,
    /// Failed reconciles by the kind of error.
    pub reconcile_failures: Family<ErrorLabel, Counter>,
    pub reconcile_seconds: Histogram,
    /// Requests sent to the Kubernetes API (`throttle`).
    pub kube_api_requests: Counter,
    /// Objects HEADed per scan (from the workers' reports in Redis).
    pub scan_objects: ScanCounter,
    pub scan_objects_with_metadata: ScanCounter,
    pub scan_objects_vanished: ScanCounter,
    /// Objects listed that the scan's filters left out (no HEAD).
    pub scan_objects_filtered: ScanCounter,
    /// Objects that could not be read (`error` records).
    pub scan_object_errors: ScanCounter,
    pub scan_bytes: ScanCounter,
    /// Shards per state.
    pub scan_shards: ScanStateGauge,
    /// 1 for the scan's current phase, 0 for the others.
    pub scan_phase: ScanPhaseGauge,
    /// Worker replicas the operator asks for.
    pub scan_workers: ScanGauge,
    /// Throttling answers the scan's workers got from the store.
    pub store_throttles: ScanCounter,
    /// Requests per second the rate governor allows the scan (only while
    /// the store pushed back).
    pub scan_governed_rate: ScanGauge,
    pub leader: Gauge,
    /// 1 while Redis answers the operator's PING.
    pub redis_up: Gauge,
    /// Redis's `used_memory` and `maxmemory` (INFO memory; 0: no limit),
    /// as the operator last read them: every tenant's scans share one
    /// Redis, and at `maxmemory` it refuses their writes.
    pub redis_memory_used: Gauge,
    pub redis_memory_max: Gauge,
    /// 1 while the Kubernetes API answers the operator's list of
    /// BucketScans (what its watch needs: reachable and allowed).
    pub kube_api_up: Gauge,
    /// Runs of BucketScanSchedules by outcome ([`SCHEDULE_OUTCOMES`]).
    pub schedule_runs: Family<ResultLabel, Counter>,
    /// The BucketScan watch listed every scan once (the leader's cache is
    /// complete).
    pub watch_synced: AtomicBool,
    /// The Kubernetes API answered at start.
    pub ready: AtomicBool,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("bucketscan");
        let reconciles = Family::<ResultLabel, Counter>::default();
        let reconcile_failures = Family::<ErrorLabel, Counter>::default();
        let reconcile_seconds = Histogram::new(exponential_buckets(0.005, 2.0, 14));
        let kube_api_requests = Counter::default();
        registry.register(
            "kube_api_requests",
            "Requests sent to the Kubernetes API (paced by --kube-api-qps and --kube-api-burst)",
            kube_api_requests.clone(),
        );
        let leader = Gauge::default();
        let redis_up = Gauge::default();
        let redis_memory_used = Gauge::default();
        let redis_memory_max = Gauge::default();
        let kube_api_up = Gauge::default();
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
        let mut counter = |name: &str, help: &str| {
            let family = ScanCounter::default();
            registry.register(name, help, family.clone());
            family
        };
        // prometheus_client appends `_total` to counters.
        let scan_objects = counter("scan_objects", "Objects HEADed by the scan's workers");
        let scan_objects_with_metadata = counter("scan_objects_with_metadata", "Objects with user metadata");
        let scan_objects_vanished = counter("scan_objects_vanished", "Objects listed but gone at HEAD");
        let scan_objects_filtered = counter(
            "scan_objects_filtered",
            "Objects listed that the scan's filters left out (no HEAD)",
        );
        let scan_object_errors = counter(
            "scan_object_errors",
            "Objects that could not be read (error records)",
        );
        let scan_bytes = counter("scan_bytes", "Bytes of the objects HEADed");
        let store_throttles = counter(
            "store_throttles",
            "Throttling answers (503 SlowDown, 429) the scan's workers got from the store",
        );
        let scan_shards = ScanStateGauge::default();
        registry.register("scan_shards", "Shards of the scan by state", scan_shards.clone());
        let scan_phase = ScanPhaseGauge::default();
        registry.register("scan_phase", "1 for the scan's current phase", scan_phase.clone());
        let scan_workers = ScanGauge::default();
        registry.register("scan_workers", "Worker replicas asked for", scan_workers.clone());
        let scan_governed_rate = ScanGauge::default();
        registry.register(
            "scan_governed_requests_per_second",
            "Requests per second the rate governor allows the scan, while the store pushes back",
            scan_governed_rate.clone(),
        );
        registry.register("leader", "1 when this replica leads", leader.clone());
        registry.register("redis_up", "1 while Redis answers the operator", redis_up.clone());
        registry.register(
            "redis_memory_used_bytes",
            "Memory Redis uses (INFO memory used_memory)",
            redis_memory_used.clone(),
        );
        registry.register(
            "redis_memory_max_bytes",
            "Redis's maxmemory, past which it refuses writes (0: no limit)",
            redis_memory_max.clone(),
        );
        registry.register(
            "kube_api_up",
            "1 while the Kubernetes API answers the operator's list of BucketScans",
            kube_api_up.clone(),
        );
        let schedule_runs = Family::<ResultLabel, Counter>::default();
        registry.register(
            "schedule_runs",
            "Due runs of BucketScanSchedules by result: started, replaced, skipped, held",
            schedule_runs.clone(),
        );
        for outcome in SCHEDULE_OUTCOMES {
            let _ = schedule_runs.get_or_create(&ResultLabel {
                result: outcome.into(),
            });
        }
        // Known label values start at 0 (Prometheus' advice), so rate() and
        // alerts see a series before the first event of its kind.
        for result in ["ok", "error"] {
            let _ = reconciles.get_or_create(&ResultLabel {
                result: result.into(),
            });
        }
        for error in ERROR_KINDS {
            let _ = reconcile_failures.get_or_create(&ErrorLabel { error: error.into() });
        }
        Metrics {
            registry,
            reconciles,
            reconcile_failures,
            reconcile_seconds,
            kube_api_requests,
            scan_objects,
            scan_objects_with_metadata,
            scan_objects_vanished,
            scan_objects_filtered,
            scan_object_errors,
            scan_bytes,
            scan_shards,
            scan_phase,
            scan_workers,
            store_throttles,
            scan_governed_rate,
            leader,
            redis_up,
            redis_memory_used,
            redis_memory_max,
            kube_api_up,
            schedule_runs,
            watch_synced: AtomicBool::new(false),
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

    /// Ready: started, Redis and the Kubernetes API answer now, and, on the
    /// leader, the BucketScan watch has listed every scan. A standby (no
    /// watch until it leads) is ready on the first two, so a rolling update
    /// of several replicas is not held up by it.
    pub fn readiness(&self) -> Result<(), &'static str> {
        if !self.ready.load(Ordering::Relaxed) {
            return Err("starting");
        }
        if self.redis_up.get() != 1 {
            return Err("Redis does not answer");
        }
        if self.kube_api_up.get() != 1 {
            return Err("the Kubernetes API does not answer the operator's list of BucketScans");
        }
        if self.leader.get() == 1 && !self.watch_synced.load(Ordering::Relaxed) {
            return Err("the BucketScan watch has not listed every scan yet");
        }
        Ok(())
    }

    pub fn is_ready(&self) -> bool {
        self.readiness().is_ok()
    }

    /// A scan's counts as read from Redis: each counter moves up to it,
    /// never down.
    pub fn observe_counts(&self, labels: &ScanLabels, counts: &crate::crd::ObjectCounts) {
        for (family, value) in [
            (&self.scan_objects, counts.scanned),
            (&self.scan_objects_with_metadata, counts.with_metadata),
            (&self.scan_objects_vanished, counts.vanished),
            (&self.scan_objects_filtered, counts.filtered),
            (&self.scan_object_errors, counts.errors),
            (&self.scan_bytes, counts.bytes),
        ] {
            let counter = family.get_or_create(labels);
            let now = counter.get();
            if value > now {
                counter.inc_by(value - now);
            }
        }
    }

    /// The governor's throttles seen (the counter moves up to it) and its
    /// rate (`None`: not limited, no series).
    pub fn observe_governor(&self, labels: &ScanLabels, throttles: u64, rate: Option<u64>) {
        let counter = self.store_throttles.get_or_create(labels);
        let now = counter.get();
        if throttles > now {
            counter.inc_by(throttles - now);
        }
        match rate {
            Some(r) => {
                self.scan_governed_rate.get_or_create(labels).set(r);
            }
            None => {
                self.scan_governed_rate.remove(labels);
            }
        }
    }

    /// Shards per state, as `(state, count)`.
    pub fn observe_shards(&self, labels: &ScanLabels, by_state: [(&str, u64); 4]) {
        for (state, n) in by_state {
            self.scan_shards
                .get_or_create(&state_labels(labels, state))
                .set(n);
        }
    }

    pub fn observe_phase(&self, labels: &ScanLabels, phase: &str) {
        for p in PHASES {
            let value = u64::from(p == phase);
            self.scan_phase.get_or_create(&phase_labels(labels, p)).set(value);
        }
    }

    /// Remove every series of a deleted scan.
    pub fn forget_scan(&self, labels: &ScanLabels) {
        for family in [
            &self.scan_objects,
            &self.scan_objects_with_metadata,
            &self.scan_objects_vanished,
            &self.scan_objects_filtered,
            &self.scan_object_errors,
            &self.scan_bytes,
            &self.store_throttles,
        ] {
            family.remove(labels);
        }
        self.scan_workers.remove(labels);
        self.scan_governed_rate.remove(labels);
        for state in SHARD_STATES {
            self.scan_shards.remove(&state_labels(labels, state));
        }
        for phase in PHASES {
            self.scan_phase.remove(&phase_labels(labels, phase));
        }
    }
}

fn state_labels(labels: &ScanLabels, state: &str) -> ScanStateLabels {
    ScanStateLabels {
        namespace: labels.namespace.clone(),
        scan: labels.scan.clone(),
        state: state.to_string(),
    }
}

fn phase_labels(labels: &ScanLabels, phase: &str) -> ScanPhaseLabels {
    ScanPhaseLabels {
        namespace: labels.namespace.clone(),
        scan: labels.scan.clone(),
        phase: phase.to_string(),
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
        "/readyz" => match metrics.readiness() {
            Ok(()) => (StatusCode::OK, "ok\n".to_string()),
            Err(why) => (StatusCode::SERVICE_UNAVAILABLE, format!("{why}\n")),
        },
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

    #[test]
    fn scan_counts_only_grow_and_go_with_the_scan() {
        let m = Metrics::default();
        let labels = ScanLabels {
            namespace: "team-a".into(),
            scan: "photos".into(),
        };
        let counts = |scanned| crate::crd::ObjectCounts {
            scanned,
            ..Default::default()
        };
        m.observe_counts(&labels, &counts(500));
        // Redis lost some reports: the counter waits instead of going back.
        m.observe_counts(&labels, &counts(300));
        m.observe_phase(&labels, "Scanning");
        m.observe_shards(&labels, [("pending", 3), ("leased", 1), ("done", 2), ("dead", 0)]);
        let text = m.encode();
        let series = r#"bucketscan_scan_objects_total{namespace="team-a",scan="photos"}"#;
        assert!(text.contains(&format!("{series} 500")), "{text}");
        assert!(
            text.contains(r#"bucketscan_scan_phase{namespace="team-a",scan="photos",phase="Scanning"} 1"#)
        );
        assert!(text.contains(r#"bucketscan_scan_phase{namespace="team-a",scan="photos",phase="Failed"} 0"#));
        assert!(
            text.contains(r#"bucketscan_scan_shards{namespace="team-a",scan="photos",state="pending"} 3"#)
        );
        m.observe_counts(&labels, &counts(800));
        assert!(m.encode().contains(&format!("{series} 800")));
        m.forget_scan(&labels);
        assert!(!m.encode().contains("photos"), "{}", m.encode());
    }

    #[test]
    fn ready_needs_redis_and_the_api_answering_now_and_the_leader_s_watch_synced() {
        let m = Metrics::default();
        assert_eq!(m.readiness(), Err("starting"));
        m.ready.store(true, Ordering::Relaxed);
        assert!(!m.is_ready(), "Redis not yet seen");
        m.redis_up.set(1);
        assert!(!m.is_ready(), "the API not yet seen");
        m.kube_api_up.set(1);
        assert!(m.is_ready(), "a standby needs no watch");
        m.leader.set(1);
        assert_eq!(
            m.readiness(),
            Err("the BucketScan watch has not listed every scan yet")
        );
        m.watch_synced.store(true, Ordering::Relaxed);
        assert!(m.is_ready());
        m.kube_api_up.set(0);
        assert!(!m.is_ready());
        m.kube_api_up.set(1);
        m.redis_up.set(0);
        assert_eq!(m.readiness(), Err("Redis does not answer"));
    }
}
