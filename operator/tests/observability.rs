//! The observability kit against a real operator (the test ground's
//! kube-apiserver and a redis-server of the test's own): every metric the
//! chart's Grafana dashboard and alert rules use is in a real scrape of
//! /metrics, the rules pass `promtool check rules`, readiness and
//! `bucketscan_redis_up` follow Redis going down and coming back, and
//! readiness and `bucketscan_kube_api_up` follow the Kubernetes API (cut off
//! by a TCP gate in front of the real kube-apiserver) going away and back.

mod cluster;
#[path = "../../worker/tests/common/mod.rs"]
mod common;

use bucketscan_operator::crd::BucketScan;
use cluster::*;
use kube::api::{Api, PostParams};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

const NS: &str = "observability";

fn chart_file(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../charts/bucketscan/files")
        .join(name)
}

/// Every sample name a scrape can hold, from its `# TYPE` lines (present
/// even for a family with no series yet): counters end in `_total`,
/// histograms have `_bucket`, `_sum` and `_count`.
fn exported_names(scrape: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for line in scrape.lines() {
        let Some(rest) = line.strip_prefix("# TYPE ") else {
            continue;
        };
        let (name, kind) = rest.split_once(' ').expect("TYPE NAME KIND");
        match kind.trim() {
            "counter" => {
                names.insert(format!("{}_total", name.trim_end_matches("_total")));
            }
            "histogram" => {
                for suffix in ["_bucket", "_sum", "_count"] {
                    names.insert(format!("{name}{suffix}"));
                }
            }
            _ => {
                names.insert(name.to_string());
            }
        }
    }
    names
}

/// The `bucketscan_*` metric names in a PromQL expression.
fn metric_names(expr: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = expr;
    while let Some(at) = rest.find("bucketscan_") {
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        names.push(tail[..end].to_string());
        rest = &tail[end..];
    }
    names
}

/// Every PromQL expression of the dashboard: panel targets and variable queries.
fn dashboard_exprs(dashboard: &serde_json::Value) -> Vec<String> {
    let mut exprs = Vec::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        for target in panel["targets"].as_array().into_iter().flatten() {
            exprs.push(target["expr"].as_str().expect("a target's expr").to_string());
        }
    }
    for var in dashboard["templating"]["list"].as_array().into_iter().flatten() {
        if let Some(q) = var["query"]["query"].as_str() {
            exprs.push(q.to_string());
        }
    }
    exprs
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_and_alerts_use_exported_metrics_and_readiness_follows_redis_and_the_api() {
    let client = client().await;
    install_crd(&client).await;
    namespace(&client, NS).await;
    let mut redis = common::PrivateRedis::start_with(|port| {
        ["--port", &port.to_string(), "--maxmemory", "64mb"]
            .map(String::from)
            .to_vec()
    });
    let mut operator = Operator::watching(NS)
        .redis(&redis.url())
        .log(common::temp_path("operator-observability.log"))
        .start();
    let port = operator.metrics_port();
    let ready = async |want: u16| {
        http_get(port, "/readyz")
            .await
            .filter(|(code, _)| *code == want)
            .map(|_| ())
    };
    eventually("the operator is ready", 60, async || ready(200).await).await;

    // A scan planned on a real bucket, so its per-scan series exist (no
    // kubelet here: its workers never start, it stays Scanning).
    let s3 = common::versitygw();
    let bucket = s3.bucket("observed").await;
    let output = s3.bucket("observed-out").await;
    let seeded: std::collections::BTreeMap<String, common::Seeded> = (0..50)
        .map(|i| (format!("k{i:03}"), common::Seeded::default()))
        .collect();
    s3.seed(&bucket, &seeded).await;
    create_s3_secret(&client, NS, "s3", &s3.access_key, &s3.secret_key).await;
    let scans: Api<BucketScan> = Api::namespaced(client.clone(), NS);
    let scan: BucketScan = serde_json::from_value(serde_json::json!({
        "apiVersion": "bucketscan.dev/v1alpha1",
        "kind": "BucketScan",
        "metadata": {"name": "observed"},
        "spec": {
            "source": {"endpoint": s3.endpoint, "bucket": bucket, "pathStyle": true,
                       "credentialsSecret": {"name": "s3"}},
            "output": {"bucket": output}
        }
    }))
    .unwrap();
    scans.create(&PostParams::default(), &scan).await.unwrap();
    eventually("the scan is planned and its series scraped", 60, async || {
        let scrape = http_get(port, "/metrics").await?.1;
        scrape
            .contains(r#"bucketscan_scan_shards{namespace="observability",scan="observed",state="pending"}"#)
            .then_some(())
    })
    .await;

    // The dashboard and the rules use only what a scrape shows.
    let scrape = http_get(port, "/metrics").await.unwrap().1;
    let exported = exported_names(&scrape);
    assert!(exported.contains("bucketscan_scan_objects_total"), "{exported:?}");
    let dashboard: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(chart_file("grafana-dashboard.json")).unwrap())
            .unwrap();
    let exprs = dashboard_exprs(&dashboard);
    assert!(exprs.len() >= 10, "{exprs:?}");
    let rules = std::fs::read_to_string(chart_file("prometheus-rules.yaml")).unwrap();
    let rule_lines: String = rules
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .collect();
    let mut used = BTreeSet::new();
    for expr in exprs.iter().map(String::as_str).chain([rule_lines.as_str()]) {
        used.extend(metric_names(expr));
    }
    let unknown: Vec<_> = used.difference(&exported).collect();
    assert!(
        unknown.is_empty(),
        "not exported: {unknown:?}; the scrape has {exported:?}"
    );
    assert!(used.len() >= 8, "{used:?}");

    // promtool validates the rules file the chart turns into a PrometheusRule.
    let checked = Command::new("promtool")
        .args(["check", "rules"])
        .arg(chart_file("prometheus-rules.yaml"))
        .output()
        .unwrap_or_else(|e| panic!("promtool: {e} (scripts/install-deps.sh installs it)"));
    assert!(
        checked.status.success(),
        "{}{}",
        String::from_utf8_lossy(&checked.stdout),
        String::from_utf8_lossy(&checked.stderr)
    );

    // The alerts fire when they should, and only then.
    let tested = Command::new("promtool")
        .args(["test", "rules", "prometheus-rules.test.yaml"])
        .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data"))
        .output()
        .unwrap();
    assert!(
        tested.status.success(),
        "{}{}",
        String::from_utf8_lossy(&tested.stdout),
        String::from_utf8_lossy(&tested.stderr)
    );

    // Redis's memory and its limit, for the alert before Redis refuses
    // every tenant's writes.
    let gauge = |scrape: &str, name: &str| -> u64 {
        scrape
            .lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
            .unwrap_or(0)
    };
    assert_eq!(
        gauge(&scrape, "bucketscan_redis_memory_max_bytes"),
        64 << 20,
        "{scrape}"
    );
    assert!(
        gauge(&scrape, "bucketscan_redis_memory_used_bytes") > 100_000,
        "{scrape}"
    );

    // Redis down: not ready, `bucketscan_redis_up 0`; back: ready again.
    let down = tokio::task::spawn_blocking(move || {
        redis.crash_and_restart(Duration::from_secs(25));
        redis
    });
    eventually("not ready while Redis is down", 20, async || ready(503).await).await;
    let scrape = http_get(port, "/metrics").await.unwrap().1;
    assert!(scrape.lines().any(|l| l == "bucketscan_redis_up 0"), "{scrape}");
    let redis = down.await.unwrap();
    eventually("ready again once Redis answers", 30, async || ready(200).await).await;

    // The kube-apiserver behind a closed gate: not ready, `kube_api_up 0`;
    // the gate opens: ready again.
    let scrape = http_get(port, "/metrics").await.unwrap().1;
    assert!(
        scrape.lines().any(|l| l == "bucketscan_kube_api_up 1"),
        "{scrape}"
    );
    let api_port = port_of_apiserver();
    let gate = Gate::start(api_port).await;
    let gated_config = common::temp_path("kubeconfig-gated");
    std::fs::write(
        &gated_config,
        std::fs::read_to_string(kubeconfig_path()).unwrap().replace(
            &format!("127.0.0.1:{api_port}"),
            &format!("127.0.0.1:{}", gate.port),
        ),
    )
    .unwrap();
    // A second operator through the gate, with no namespace of its own
    // scans to act on (the first one holds this namespace's): it only
    // watches.
    let mut gated = Operator::watching("observability-gated")
        .kubeconfig(&gated_config)
        .redis(&redis.url())
        .log(common::temp_path("operator-observability-gated.log"))
        .start();
    let gated_port = gated.metrics_port();
    let gated_ready = async |want: u16, why: &str| {
        http_get(gated_port, "/readyz")
            .await
            .filter(|(code, body)| *code == want && body.contains(why))
            .map(|_| ())
    };
    eventually("the gated operator is ready", 60, async || {
        gated_ready(200, "ok").await
    })
    .await;
    gate.close();
    eventually("not ready while the API is cut off", 30, async || {
        gated_ready(503, "the Kubernetes API does not answer").await
    })
    .await;
    let scrape = http_get(gated_port, "/metrics").await.unwrap().1;
    assert!(
        scrape.lines().any(|l| l == "bucketscan_kube_api_up 0"),
        "{scrape}"
    );
    gate.open();
    eventually("ready again once the API answers", 60, async || {
        gated_ready(200, "ok").await
    })
    .await;
    gated.stop();

    // A deleted scan's series go with it.
    scans.delete("observed", &Default::default()).await.unwrap();
    eventually("the scan's series are removed", 60, async || {
        let scrape = http_get(port, "/metrics").await?.1;
        (!scrape.contains(r#"scan="observed""#)).then_some(())
    })
    .await;
    operator.stop();
}

/// The port of the test ground's kube-apiserver, from its kubeconfig.
fn port_of_apiserver() -> u16 {
    let config = std::fs::read_to_string(kubeconfig_path()).unwrap();
    let server = config
        .lines()
        .find_map(|l| l.trim().strip_prefix("server: https://127.0.0.1:"))
        .expect("a loopback server in the test kubeconfig");
    server.trim().parse().unwrap()
}

/// A TCP forwarder to a local port that can be closed (every open
/// connection cut, new ones refused at once) and opened again: the
/// apiserver going away and coming back, TLS and all passing through.
struct Gate {
    port: u16,
    open: std::sync::Arc<tokio::sync::watch::Sender<bool>>,
}

impl Gate {
    async fn start(target: u16) -> Gate {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let open = std::sync::Arc::new(tokio::sync::watch::channel(true).0);
        let state = open.clone();
        tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                if !*state.borrow() {
                    continue; // dropped: refused at once
                }
                let mut closed = state.subscribe();
                tokio::spawn(async move {
                    let Ok(mut server) = tokio::net::TcpStream::connect(("127.0.0.1", target)).await else {
                        return;
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
                        _ = closed.wait_for(|open| !*open) => {}
                    }
                });
            }
        });
        Gate { port, open }
    }

    fn close(&self) {
        self.open.send_replace(false);
    }

    fn open(&self) {
        self.open.send_replace(true);
    }
}
