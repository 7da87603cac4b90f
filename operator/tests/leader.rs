//! Two operator replicas against the test ground's kube-apiserver: one leads
//! (holds the Lease, reconciles, says so in /metrics), the other stands by
//! and takes over when the leader dies. A scan with bad input fails with a
//! reason a person can act on, in its status and in an event.

mod cluster;

use bucketscan_operator::crd::{BucketScan, Phase};
use bucketscan_operator::desired::{MANAGED_BY, OPERATOR};
use cluster::*;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, Patch, PatchParams, PostParams};
use std::time::Duration;

const NS: &str = "leader";

struct Replica {
    name: String,
    port: u16,
    operator: Operator,
}

fn log_path(name: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("bucketscan-operator-{name}-{}.log", std::process::id()))
}

fn start(name: &str, log_format: &str) -> Replica {
    spawn_replica(NS, name, 3, log_format)
}

fn spawn_replica(ns: &str, name: &str, lease_secs: u32, log_format: &str) -> Replica {
    let operator = Operator::watching(ns)
        .log(log_path(name))
        .args(["--leader-election-namespace", ns])
        .args(["--leader-lease-secs", &lease_secs.to_string()])
        .args(["--log-format", log_format])
        .env("POD_NAME", name)
        .start();
    Replica {
        name: name.into(),
        port: operator.metrics_port(),
        operator,
    }
}

/// (status code, body) of GET http://127.0.0.1:port/path.
fn leads(metrics: &str) -> bool {
    metrics.lines().any(|l| l.trim() == "bucketscan_leader 1")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_replica_leads_the_other_takes_over_and_bad_input_fails_clearly() {
    let client = client().await;
    install_crd(&client).await;
    namespace(&client, NS).await;
    let mut a = start("replica-a", "text");
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mut b = start("replica-b", "json");

    let leases: Api<Lease> = Api::namespaced(client.clone(), NS);
    let holder = eventually("a leader", 30, async || {
        leases
            .get_opt("bucketscan-operator")
            .await
            .ok()??
            .spec?
            .holder_identity
    })
    .await;
    let (leader, standby) = if holder == a.name {
        (&mut a, &mut b)
    } else {
        (&mut b, &mut a)
    };
    for r in [&*leader, &*standby] {
        let port = r.port;
        eventually("/readyz", 30, async || {
            http_get(port, "/readyz").await.filter(|(code, _)| *code == 200)
        })
        .await;
    }
    let metrics = http_get(leader.port, "/metrics").await.unwrap().1;
    assert!(leads(&metrics), "{metrics}");
    assert!(!leads(&http_get(standby.port, "/metrics").await.unwrap().1));

    // Only the leader reconciles: a scan whose credentials Secret is missing
    // waits for it (GitOps tools may create it a moment later), with the
    // reason in status and in an event; the invalid spec fails.
    let scans: Api<BucketScan> = Api::namespaced(client.clone(), NS);
    let scan: BucketScan = serde_json::from_value(serde_json::json!({
        "apiVersion": "bucketscan.dev/v1alpha1", "kind": "BucketScan",
        "metadata": {"name": "no-secret"},
        "spec": {"source": {"bucket": "photos", "credentialsSecret": {"name": "missing-creds"}},
                 "output": {"bucket": "results"}, "ttlSecondsAfterFinished": 3}
    }))
    .unwrap();
    scans.create(&PostParams::default(), &scan).await.unwrap();
    let blocked = eventually("Blocked", 30, async || {
        let st = scans.get("no-secret").await.ok()?.status?;
        st.conditions
            .into_iter()
            .find(|c| c.type_ == "Blocked" && c.status == "True")
    })
    .await;
    assert_eq!(blocked.reason, "SecretNotFound");
    assert!(
        blocked.message.contains("\"missing-creds\"") && blocked.message.contains("does not exist"),
        "{}",
        blocked.message
    );
    // The event follows the status write.
    let notes = event_messages(&client, NS, "SecretNotFound").await;
    assert!(notes.iter().any(|n| n.contains("missing-creds")), "{notes:?}");
    let mut bad: BucketScan = scan.clone();
    bad.metadata.name = Some("bad-spec".into());
    bad.spec.output.bucket = "photos".into(); // its parts would land in what it scans
    bad.spec.source.credentials_secret = None;
    scans.create(&PostParams::default(), &bad).await.unwrap();
    eventually("Failed", 30, async || {
        let st = scans.get("bad-spec").await.ok()?.status?;
        (st.phase == Phase::Failed).then_some(st)
    })
    .await;
    let metrics = http_get(leader.port, "/metrics").await.unwrap().1;
    assert!(
        metrics.contains("bucketscan_reconciles_total{result=\"ok\"}"),
        "{metrics}"
    );
    // Every reconcile runs in a span that names the scan, so its log lines do.
    let log = std::fs::read_to_string(log_path(&leader.name)).unwrap();
    let plain = strip_ansi(&log);
    assert!(
        plain
            .lines()
            .any(|l| l.contains("phase changed") && l.contains("reconcile{scan=bad-spec namespace=leader}")),
        "{plain}"
    );

    // The leader dies; the standby takes the lease and leads.
    leader.operator.stop();
    let standby_name = standby.name.clone();
    eventually("the standby to lead", 30, async || {
        let h = leases
            .get_opt("bucketscan-operator")
            .await
            .ok()??
            .spec?
            .holder_identity?;
        (h == standby_name).then_some(())
    })
    .await;
    let port = standby.port;
    eventually("leader metric", 10, async || {
        leads(&http_get(port, "/metrics").await?.1).then_some(())
    })
    .await;
    // ttlSecondsAfterFinished: the failed scan is deleted 3 s after it ended
    // (by whichever replica leads by then).
    eventually("TTL deletion", 30, async || {
        scans.get_opt("bad-spec").await.ok()?.is_none().then_some(())
    })
    .await;
    // A blocked scan is deleted at once (its missing Secret does not hold up
    // the cleanup).
    scans.delete("no-secret", &Default::default()).await.unwrap();
    eventually("deletion of the blocked scan", 30, async || {
        scans.get_opt("no-secret").await.ok()?.is_none().then_some(())
    })
    .await;

    standby.operator.stop();

    // `--log-format json`: every line is one JSON object.
    let json_log = std::fs::read_to_string(log_path("replica-b")).unwrap();
    assert!(json_log.lines().count() > 0);
    for line in json_log.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        assert!(
            v["level"].is_string() && v["fields"]["message"].is_string(),
            "{line}"
        );
    }
}

/// The text log without its colour escapes (`ESC [ ... m`).
fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for d in chars.by_ref() {
                if d.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

const CLOCK_NS: &str = "leader-clock";

fn start_in(ns: &str, name: &str, lease_secs: u32) -> Replica {
    spawn_replica(ns, name, lease_secs, "text")
}

async fn holder(leases: &Api<Lease>) -> Option<String> {
    leases
        .get_opt("bucketscan-operator")
        .await
        .ok()??
        .spec?
        .holder_identity
}

/// Sum of `bucketscan_reconciles_total` over its labels.
async fn reconciles(port: u16) -> Option<f64> {
    let metrics = http_get(port, "/metrics").await?.1;
    Some(
        metrics
            .lines()
            .filter(|l| l.starts_with("bucketscan_reconciles_total{"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum(),
    )
}

/// The reconcile count once it stood still for three seconds.
async fn settled_reconciles(port: u16) -> f64 {
    let mut last = reconciles(port).await.unwrap();
    for _ in 0..30 {
        tokio::time::sleep(Duration::from_secs(3)).await;
        let now = reconciles(port).await.unwrap();
        if now == last {
            return now;
        }
        last = now;
    }
    panic!("reconciles never settled: {last}");
}

/// client-go's rules, on the real apiserver: a standby trusts its own clock,
/// not the holder's `renewTime`; a leader that is told to stop releases the
/// lease so a standby takes over at once. And only user changes wake a
/// reconcile, not status writes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_are_judged_by_the_local_clock_released_on_shutdown_and_status_writes_wake_nothing() {
    use k8s_openapi::api::coordination::v1::LeaseSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
    use k8s_openapi::jiff::{SignedDuration, Timestamp};
    let client = client().await;
    install_crd(&client).await;
    namespace(&client, CLOCK_NS).await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), CLOCK_NS);

    // A holder whose clock is an hour slow keeps renewing a 3 s lease: its
    // renewTime is always an hour old, yet the lease is held.
    let behind = Timestamp::now() - SignedDuration::from_hours(1);
    let spec = |renewed: Timestamp| LeaseSpec {
        holder_identity: Some("slow-clock".into()),
        lease_duration_seconds: Some(3),
        acquire_time: Some(MicroTime(behind)),
        renew_time: Some(MicroTime(renewed)),
        ..LeaseSpec::default()
    };
    let lease = Lease {
        metadata: kube::api::ObjectMeta {
            name: Some("bucketscan-operator".into()),
            ..Default::default()
        },
        spec: Some(spec(behind)),
    };
    leases.create(&PostParams::default(), &lease).await.unwrap();
    let mut a = start_in(CLOCK_NS, "clock-a", 30);
    for s in 1..=10 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let mut l = leases.get("bucketscan-operator").await.unwrap();
        assert_eq!(
            l.spec.as_ref().unwrap().holder_identity.as_deref(),
            Some("slow-clock"),
            "the lease was taken from a holder that renews it (after {s} s)"
        );
        l.spec = Some(spec(behind + SignedDuration::from_secs(s)));
        leases
            .replace("bucketscan-operator", &PostParams::default(), &l)
            .await
            .unwrap();
    }
    // The holder stops renewing: taken once its record stood still for 3 s.
    eventually("clock-a to take the lease", 20, async || {
        (holder(&leases).await? == "clock-a").then_some(())
    })
    .await;

    // Only user changes wake a reconcile. A scan that fails at once, then a
    // status write by someone else: no reconcile; an annotation: one.
    let port = a.port;
    eventually("leader metric", 20, async || {
        leads(&http_get(port, "/metrics").await?.1).then_some(())
    })
    .await;
    let scans: Api<BucketScan> = Api::namespaced(client.clone(), CLOCK_NS);
    let scan: BucketScan = serde_json::from_value(serde_json::json!({
        "apiVersion": "bucketscan.dev/v1alpha1", "kind": "BucketScan",
        "metadata": {"name": "same-bucket"},
        "spec": {"source": {"bucket": "photos"}, "output": {"bucket": "photos"}}
    }))
    .unwrap();
    scans.create(&PostParams::default(), &scan).await.unwrap();
    eventually("Failed", 30, async || {
        let st = scans.get("same-bucket").await.ok()?.status?;
        (st.phase == Phase::Failed).then_some(())
    })
    .await;
    let before = settled_reconciles(port).await;
    let status_patch = serde_json::json!({"status": {"eta": "written by someone else"}});
    scans
        .patch_status(
            "same-bucket",
            &PatchParams::default(),
            &Patch::Merge(&status_patch),
        )
        .await
        .unwrap();
    assert_eq!(
        settled_reconciles(port).await,
        before,
        "a status write woke a reconcile"
    );
    let annotate = serde_json::json!({"metadata": {"annotations": {"team": "a"}}});
    scans
        .patch("same-bucket", &PatchParams::default(), &Patch::Merge(&annotate))
        .await
        .unwrap();
    eventually("a reconcile after the annotation", 20, async || {
        (reconciles(port).await? > before).then_some(())
    })
    .await;

    // The watches are label-selected: a Deployment that names the scan as
    // its owner but that the operator did not make (no managed-by label)
    // wakes nothing; the same Deployment with the label does.
    let owner = scans.get("same-bucket").await.unwrap();
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), CLOCK_NS);
    let foreign: Deployment = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "not-ours", "ownerReferences": [{
            "apiVersion": "bucketscan.dev/v1alpha1", "kind": "BucketScan", "name": "same-bucket",
            "uid": owner.metadata.uid, "controller": true}]},
        "spec": {"selector": {"matchLabels": {"app": "x"}},
                 "template": {"metadata": {"labels": {"app": "x"}},
                              "spec": {"containers": [{"name": "x", "image": "x"}]}}}
    }))
    .unwrap();
    let before = settled_reconciles(port).await;
    deployments
        .create(&PostParams::default(), &foreign)
        .await
        .unwrap();
    assert_eq!(
        settled_reconciles(port).await,
        before,
        "a Deployment the operator did not make woke a reconcile"
    );
    let ours = serde_json::json!({"metadata": {"labels": {MANAGED_BY: OPERATOR}}});
    deployments
        .patch("not-ours", &PatchParams::default(), &Patch::Merge(&ours))
        .await
        .unwrap();
    eventually(
        "a reconcile once the Deployment is labelled as the operator's",
        20,
        async || (reconciles(port).await? > before).then_some(()),
    )
    .await;
    deployments.delete("not-ours", &Default::default()).await.unwrap();

    // A standby, then the leader is told to stop: it releases the 30 s
    // lease, and the standby leads long before the lease would run out.
    let mut b = start_in(CLOCK_NS, "clock-b", 30);
    let port_b = b.port;
    eventually("clock-b ready", 30, async || {
        http_get(port_b, "/readyz").await.filter(|(code, _)| *code == 200)
    })
    .await;
    let stopped = std::process::Command::new("kill")
        .args(["-TERM", &a.operator.id().to_string()])
        .status()
        .unwrap();
    assert!(stopped.success());
    let exit = a.operator.wait();
    assert!(exit.success(), "the leader exits cleanly on SIGTERM: {exit}");
    let released_at = std::time::Instant::now();
    eventually("clock-b to lead", 15, async || {
        (holder(&leases).await? == "clock-b").then_some(())
    })
    .await;
    assert!(
        released_at.elapsed() < Duration::from_secs(20),
        "taken over after {:?}",
        released_at.elapsed()
    );
    scans.delete("same-bucket", &Default::default()).await.unwrap();
    eventually("deletion", 30, async || {
        scans.get_opt("same-bucket").await.ok()?.is_none().then_some(())
    })
    .await;
    b.operator.stop();
}
