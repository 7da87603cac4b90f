//! The operator's endpoint allowlist (`--allowed-endpoints`, chart value
//! `operator.allowedEndpoints`) with the real operator binary against the
//! test ground's kube-apiserver, Redis and versitygw: a scan with a
//! credentials Secret whose endpoint is the operator's own loopback, named
//! by address or by a name that resolves to it, fails with reason
//! EndpointNotAllowed and the endpoint never sees a connection, neither
//! while planning nor when the scan is deleted; with the allowlist naming
//! the address the same scan is planned through it.

mod cluster;
#[path = "../../worker/tests/common/mod.rs"]
mod common;

use bucketscan_operator::crd::BucketScan;
use cluster::*;
use common::*;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

const NS: &str = "endpoints";

/// A TCP forwarder on 127.0.0.1 to `upstream` (HOST:PORT) that counts the
/// connections it accepts: the endpoint the scans name.
async fn counting_forwarder(upstream: String) -> (u16, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = Arc::new(AtomicUsize::new(0));
    let counter = seen.clone();
    tokio::spawn(async move {
        while let Ok((mut inbound, _)) = listener.accept().await {
            counter.fetch_add(1, Ordering::SeqCst);
            let upstream = upstream.clone();
            tokio::spawn(async move {
                if let Ok(mut outbound) = tokio::net::TcpStream::connect(upstream).await {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                }
            });
        }
    });
    (port, seen)
}

/// The operator with the allowlist `allowed` (`None`: the default).
fn start_operator(tag: &str, allowed: Option<&str>) -> Operator {
    let operator = Operator::watching(NS).log(temp_path(&format!("operator-endpoints-{tag}.log")));
    match allowed {
        Some(list) => operator.env("BUCKETSCAN_ALLOWED_ENDPOINTS", list),
        None => operator.env_remove("BUCKETSCAN_ALLOWED_ENDPOINTS"),
    }
    .start()
}

async fn delete_and_wait(scans: &Api<BucketScan>, name: &str) {
    scans.delete(name, &DeleteParams::default()).await.unwrap();
    eventually(&format!("{name} deleted"), 60, async || {
        scans.get_opt(name).await.unwrap().is_none().then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operator_never_connects_to_an_endpoint_its_allowlist_refuses() {
    let client = client().await;
    install_crd(&client).await;
    namespace(&client, NS).await;
    let s3 = versitygw();
    let bucket = s3.bucket("allow").await;
    let out = s3.bucket("allow-out").await;
    let seeded: BTreeMap<String, Seeded> = (0..20).map(|i| (format!("k{i:03}"), Seeded::default())).collect();
    s3.seed(&bucket, &seeded).await;
    create_s3_secret(&client, NS, "s3", &s3.access_key, &s3.secret_key).await;
    let upstream = s3.endpoint.trim_start_matches("http://").to_string();
    let (port, seen) = counting_forwarder(upstream).await;
    let scans: Api<BucketScan> = Api::namespaced(client.clone(), NS);

    // The default: loopback is refused, by address and by name.
    let mut operator = start_operator("default", None);
    for (name, host) in [("by-address", "127.0.0.1"), ("by-name", "localhost")] {
        let endpoint = format!("http://{host}:{port}");
        let scan = s3_scan(name, &endpoint, &bucket, &out, serde_json::json!({}));
        scans.create(&PostParams::default(), &scan).await.unwrap();
    }
    for name in ["by-address", "by-name"] {
        let (_, _, message) = eventually(&format!("{name} refused"), 60, async || {
            condition(&scans, name, "Failed")
                .await
                .filter(|(status, reason, _)| status == "True" && reason == "EndpointNotAllowed")
        })
        .await;
        assert!(message.contains("loopback"), "{message}");
        assert!(message.contains("operator.allowedEndpoints"), "{message}");
    }
    let (_, _, by_name) = condition(&scans, "by-name", "Failed").await.unwrap();
    assert!(by_name.contains("localhost resolves to 127.0.0.1"), "{by_name}");
    wait_event(&client, NS, "EndpointNotAllowed").await;
    // Deleting them (the finalizer's cleanup of their parts) sends nothing either.
    delete_and_wait(&scans, "by-address").await;
    delete_and_wait(&scans, "by-name").await;
    assert_eq!(
        seen.load(Ordering::SeqCst),
        0,
        "the refused endpoint was connected to"
    );
    operator.stop();

    // Allowed by the platform: the same endpoint, by name, is planned through it.
    let mut operator = start_operator("allowed", Some("127.0.0.1"));
    let endpoint = format!("http://localhost:{port}");
    let scan = s3_scan("allowed", &endpoint, &bucket, &out, serde_json::json!({}));
    scans.create(&PostParams::default(), &scan).await.unwrap();
    eventually("allowed planned", 60, async || {
        condition(&scans, "allowed", "Planned")
            .await
            .filter(|(status, _, _)| status == "True")
    })
    .await;
    assert!(seen.load(Ordering::SeqCst) > 0);
    delete_and_wait(&scans, "allowed").await;
    operator.stop();
}

/// Review F4: a scan with no endpoint (AWS) had its region put raw into
/// `https://s3.{region}.amazonaws.com`, so `x@127.0.0.1:PORT/` sent the
/// operator's signed requests to 127.0.0.1:PORT, past an allowlist that
/// names only other stores. The API server refuses such a region (the CRD's
/// pattern), and the operator, even under a list naming the address, never
/// connects.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_region_that_would_name_another_host_is_refused_before_any_connection() {
    // A namespace of its own: its operator must not judge the other tests' scans.
    const NS: &str = "endpoints-region";
    let client = client().await;
    install_crd(&client).await;
    namespace(&client, NS).await;
    let s3 = versitygw();
    let upstream = s3.endpoint.trim_start_matches("http://").to_string();
    let (port, seen) = counting_forwarder(upstream).await;
    let scans: Api<BucketScan> = Api::namespaced(client.clone(), NS);
    create_s3_secret(&client, NS, "s3", &s3.access_key, &s3.secret_key).await;
    let mut operator = Operator::watching(NS)
        .env("BUCKETSCAN_ALLOWED_ENDPOINTS", "127.0.0.1,minio.storage.svc:9000")
        .start();
    for (name, region) in [
        ("region-at", format!("x@127.0.0.1:{port}/")),
        ("region-query", "us-east-1?x=".to_string()),
        ("region-upper", "US-EAST-1".to_string()),
    ] {
        let mut scan = s3_scan(name, "", "photos", "photos-out", serde_json::json!({}));
        scan.spec.source.endpoint = None;
        scan.spec.source.region = region.clone();
        let refused = scans.create(&PostParams::default(), &scan).await.unwrap_err();
        let kube::Error::Api(status) = refused else {
            panic!("{region}: {refused:?}")
        };
        assert_eq!(status.code, 422, "{region}: {status:?}");
        assert!(
            status.message.contains("region must be 1-64 lower-case letters"),
            "{region}: {}",
            status.message
        );
    }
    // A valid region is admitted (dry run: the scan would reach AWS): the
    // pattern refuses only what it must.
    let mut scan = s3_scan("region-ok", "", "photos", "photos-out", serde_json::json!({}));
    scan.spec.source.endpoint = None;
    scan.spec.source.region = "eu-west-1".into();
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    scans.create(&dry_run, &scan).await.unwrap();
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    assert_eq!(
        seen.load(Ordering::SeqCst),
        0,
        "a region moved the operator's requests to another host"
    );
    operator.stop();
}

/// A TCP server on 127.0.0.1 that accepts connections and never answers:
/// a tenant's tarpit endpoint.
async fn stalling_server() -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((conn, _)) = listener.accept().await {
            held.push(conn);
        }
    });
    port
}

/// Review F5: planning in the operator had no total deadline, so a store
/// that accepts connections and never answers (each request waits 30 s and
/// is retried) held a reconcile slot for hours, and the scans behind it
/// waited. With `--planning-deadline-seconds` the tarpit scans are Blocked
/// (reason PlanningSlow, retried with backoff) and another scan is planned
/// meanwhile, with two reconcile slots of which one namespace may hold one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_that_never_answers_does_not_hold_the_operator_s_slots() {
    const NS: &str = "endpoints-tarpit";
    let client = client().await;
    install_crd(&client).await;
    namespace(&client, NS).await;
    let s3 = versitygw();
    let bucket = s3.bucket("tarpit").await;
    let out = s3.bucket("tarpit-out").await;
    let seeded: BTreeMap<String, Seeded> = (0..5).map(|i| (format!("k{i:03}"), Seeded::default())).collect();
    s3.seed(&bucket, &seeded).await;
    create_s3_secret(&client, NS, "s3", &s3.access_key, &s3.secret_key).await;
    let tarpit = format!("http://127.0.0.1:{}", stalling_server().await);
    let scans: Api<BucketScan> = Api::namespaced(client.clone(), NS);
    let mut operator = Operator::watching(NS)
        .args(["--concurrency", "2", "--planning-deadline-seconds", "4"])
        .start();
    for name in ["tarpit-1", "tarpit-2"] {
        let scan = s3_scan(name, &tarpit, "photos", "photos-out", serde_json::json!({}));
        scans.create(&PostParams::default(), &scan).await.unwrap();
    }
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    let good = s3_scan("good", &s3.endpoint, &bucket, &out, serde_json::json!({}));
    scans.create(&PostParams::default(), &good).await.unwrap();
    let started = std::time::Instant::now();
    eventually("good planned", 60, async || {
        condition(&scans, "good", "Planned")
            .await
            .filter(|(status, _, _)| status == "True")
    })
    .await;
    for name in ["tarpit-1", "tarpit-2"] {
        let (_, _, message) = eventually(&format!("{name} blocked"), 60, async || {
            condition(&scans, name, "Blocked")
                .await
                .filter(|(status, reason, _)| status == "True" && reason == "PlanningSlow")
        })
        .await;
        assert!(message.contains("--planning-deadline-seconds"), "{message}");
    }
    // Each request to the tarpit alone waits 30 s: planned well before.
    assert!(
        started.elapsed() < std::time::Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );
    operator.stop();
    // Gone without the operator's cleanup (which would wait for the tarpit).
    let unfinalized = serde_json::json!({"metadata": {"finalizers": null}});
    for name in ["tarpit-1", "tarpit-2", "good"] {
        scans
            .patch(name, &PatchParams::default(), &Patch::Merge(&unfinalized))
            .await
            .unwrap();
        delete_and_wait(&scans, name).await;
    }
}
