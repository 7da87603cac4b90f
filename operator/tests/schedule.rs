//! BucketScanSchedule (issue 30, item 1) with the real operator binary
//! against the test ground's kube-apiserver: a schedule every minute makes
//! a scan at the minute (named by it, owned, labelled, its own output
//! prefix); Forbid holds the next run while that one is active, suspend
//! stops it and resuming starts the held run at once (the one catch-up);
//! Replace deletes the active scan for the new one; the failed history
//! limit holds (and leaves a scan that only carries the label alone); a bad
//! cron expression or time zone is said in the status, and
//! deleteResultsWithHistory: true is refused by the API server.
//! The runs' scans are suspended (they stay active without any S3), or ask
//! for more workers than the operator allows (they fail at once).

mod cluster;

use bucketscan_api::crd::{BucketScan, Phase};
use bucketscan_api::schedule::{BucketScanSchedule, SCHEDULE_LABEL};
use cluster::*;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::ResourceExt;
use std::time::Duration;

fn start_operator(ns: &str, flags: &[&str]) -> Operator {
    Operator::watching(ns).args(flags).debug_log().start()
}

/// The CRDs, namespace `ns`, and the APIs of its schedules and scans.
async fn ground(ns: &str) -> (kube::Client, Api<BucketScanSchedule>, Api<BucketScan>) {
    let client = client().await;
    install_crd(&client).await;
    namespace(&client, ns).await;
    (
        client.clone(),
        Api::namespaced(client.clone(), ns),
        Api::namespaced(client, ns),
    )
}

/// A schedule whose runs are suspended scans (active until deleted).
fn schedule(name: &str, cron: &str, spec: serde_json::Value) -> BucketScanSchedule {
    let mut body = serde_json::json!({
        "apiVersion": "bucketscan.dev/v1alpha1", "kind": "BucketScanSchedule",
        "metadata": {"name": name},
        "spec": {
            "schedule": cron,
            "scanTemplate": {
                "source": {"endpoint": "http://127.0.0.1:9", "bucket": "photos", "pathStyle": true},
                "output": {"bucket": "inventory", "prefix": "runs"},
                "suspend": true
            }
        }
    });
    for (k, v) in spec.as_object().unwrap() {
        body["spec"][k] = v.clone();
    }
    serde_json::from_value(body).unwrap()
}

async fn runs(scans: &Api<BucketScan>, schedule: &str) -> Vec<BucketScan> {
    let mut items = scans
        .list(&ListParams::default().labels(&format!("{SCHEDULE_LABEL}={schedule}")))
        .await
        .unwrap()
        .items;
    items.sort_by_key(|s| s.name_any());
    items
}

/// Ready's status, reason and message.
async fn ready(schedules: &Api<BucketScanSchedule>, name: &str) -> Option<(String, String, String)> {
    let st = schedules.get(name).await.ok()?.status?;
    let c = st.conditions.into_iter().find(|c| c.type_ == "Ready")?;
    Some((c.status, c.reason, c.message))
}

async fn set_suspend(schedules: &Api<BucketScanSchedule>, name: &str, suspend: bool) {
    let patch = serde_json::json!({"spec": {"suspend": suspend}});
    schedules
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_minute_makes_a_scan_forbid_holds_the_next_and_suspend_stops_it() {
    const NS: &str = "schedule-forbid";
    let (client, schedules, scans) = ground(NS).await;
    let operator = start_operator(NS, &[]);
    let made = schedules
        .create(
            &PostParams::default(),
            &schedule("nightly", "* * * * *", serde_json::json!({})),
        )
        .await
        .unwrap();

    // The first minute: one scan, named by its minute, owned and labelled,
    // writing under its own prefix; the status names it.
    let first = eventually("the first run", 75, async || {
        runs(&scans, "nightly").await.into_iter().next()
    })
    .await;
    let at: k8s_openapi::jiff::Timestamp = first.annotations()["bucketscan.dev/scheduled-at"]
        .parse()
        .unwrap();
    assert_eq!(at.as_second() % 60, 0, "a whole minute");
    assert_eq!(first.name_any(), format!("nightly-{}", at.as_second() / 60));
    let owner = &first.owner_references()[0];
    assert_eq!(
        (owner.kind.as_str(), &owner.uid),
        ("BucketScanSchedule", made.metadata.uid.as_ref().unwrap())
    );
    assert_eq!(
        first.spec.output.prefix,
        Some(format!("runs/{}/", first.name_any()))
    );
    assert_eq!(first.spec.baseline, None, "no Complete run yet: a full scan");
    let st = eventually("status of the first run", 20, async || {
        let st = schedules.get("nightly").await.ok()?.status?;
        (st.active == vec![first.name_any()]).then_some(st)
    })
    .await;
    assert_eq!(st.active_count, 1);
    assert_eq!(st.last_schedule_time.as_ref().map(|t| t.0), Some(at));
    assert_eq!(
        st.next_schedule_time.as_ref().map(|t| t.0.as_second()),
        Some(at.as_second() + 60)
    );
    let (status, reason, _) = ready(&schedules, "nightly").await.unwrap();
    assert_eq!((status.as_str(), reason.as_str()), ("True", "Scheduled"));

    // The next minute: Forbid holds the run while the first is active.
    let held = eventually("the next run held", 75, async || {
        let st = schedules.get("nightly").await.ok()?.status?;
        st.last_skip.filter(|m| m.contains("concurrencyPolicy is Forbid"))
    })
    .await;
    assert!(held.contains(&first.name_any()), "{held}");
    assert_eq!(
        runs(&scans, "nightly").await.len(),
        1,
        "no second scan while the first runs"
    );
    wait_event(&client, NS, "RunHeld").await;

    // Suspended, the held run does not start even once the first is gone.
    set_suspend(&schedules, "nightly", true).await;
    eventually("Ready=False Suspended", 20, async || {
        ready(&schedules, "nightly")
            .await
            .filter(|(s, r, _)| s == "False" && r == "Suspended")
    })
    .await;
    scans
        .delete(&first.name_any(), &DeleteParams::default())
        .await
        .unwrap();
    eventually("the first run gone", 60, async || {
        runs(&scans, "nightly").await.is_empty().then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(
        runs(&scans, "nightly").await.is_empty(),
        "a suspended schedule started a run"
    );
    assert_eq!(
        schedules
            .get("nightly")
            .await
            .unwrap()
            .status
            .unwrap()
            .next_schedule_time,
        None
    );

    // Resumed: the held (latest missed) run starts at once: one catch-up.
    set_suspend(&schedules, "nightly", false).await;
    let catch_up = eventually("the catch-up run", 20, async || {
        runs(&scans, "nightly").await.into_iter().next()
    })
    .await;
    assert_ne!(catch_up.name_any(), first.name_any());
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(runs(&scans, "nightly").await.len(), 1, "only one catch-up run");
    drop(operator);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replace_deletes_the_active_scan_for_the_next_run() {
    const NS: &str = "schedule-replace";
    let (client, schedules, scans) = ground(NS).await;
    let operator = start_operator(NS, &[]);
    let body = schedule(
        "hourly",
        "* * * * *",
        serde_json::json!({"concurrencyPolicy": "Replace"}),
    );
    schedules.create(&PostParams::default(), &body).await.unwrap();
    let first = eventually("the first run", 75, async || {
        runs(&scans, "hourly").await.into_iter().next()
    })
    .await;
    let second = eventually("the second run", 75, async || {
        runs(&scans, "hourly")
            .await
            .into_iter()
            .find(|s| s.name_any() != first.name_any())
    })
    .await;
    // The first is deleted (its finalizer may hold it a moment).
    eventually("the first run deleted", 60, async || {
        match scans.get(&first.name_any()).await {
            Err(_) => Some(()),
            Ok(s) => s.metadata.deletion_timestamp.map(|_| ()),
        }
    })
    .await;
    let st = eventually("status names the second run", 20, async || {
        let st = schedules.get("hourly").await.ok()?.status?;
        (st.active == vec![second.name_any()]).then_some(st)
    })
    .await;
    assert_eq!(st.active_count, 1);
    wait_event(&client, NS, "RunReplaced").await;
    drop(operator);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_failed_history_limit_holds_and_bad_schedules_say_why() {
    const NS: &str = "schedule-history";
    let (client, schedules, scans) = ground(NS).await;
    // Scans asking 5 workers fail at once (OverLimit).
    let operator = start_operator(NS, &["--max-workers-per-scan=2"]);
    let body = schedule(
        "yearly",
        "0 0 1 1 *",
        serde_json::json!({"failedScansHistoryLimit": 1}),
    );
    let made = schedules.create(&PostParams::default(), &body).await.unwrap();
    // Three failed runs (made here, as the schedule would: labelled and
    // owned), one after the other; and one that only carries the label.
    let scan = |name: &str, owned: bool| -> BucketScan {
        let mut meta = serde_json::json!({"name": name, "labels": {SCHEDULE_LABEL: "yearly"}});
        if owned {
            meta["ownerReferences"] = serde_json::json!([{
                "apiVersion": "bucketscan.dev/v1alpha1", "kind": "BucketScanSchedule",
                "name": "yearly", "uid": made.metadata.uid.clone().unwrap(), "controller": true
            }]);
        }
        serde_json::from_value(serde_json::json!({
            "apiVersion": "bucketscan.dev/v1alpha1", "kind": "BucketScan", "metadata": meta,
            "spec": {"source": {"endpoint": "http://127.0.0.1:9", "bucket": "photos", "pathStyle": true},
                     "output": {"bucket": "inventory", "prefix": format!("runs/{name}/")},
                     "workers": {"replicas": 5}}
        }))
        .unwrap()
    };
    scans
        .create(&PostParams::default(), &scan("stranger", false))
        .await
        .unwrap();
    for name in ["yearly-1", "yearly-2", "yearly-3"] {
        scans
            .create(&PostParams::default(), &scan(name, true))
            .await
            .unwrap();
        eventually(&format!("{name} Failed"), 30, async || {
            let phase = scans.get(name).await.ok()?.status?.phase;
            (phase == Phase::Failed).then_some(())
        })
        .await;
        // Completion times a second apart: the order of history.
        tokio::time::sleep(Duration::from_millis(1100)).await;
    }
    eventually("only the newest failed run kept", 60, async || {
        let names: Vec<String> = runs(&scans, "yearly")
            .await
            .iter()
            .map(|s| s.name_any())
            .collect();
        (names == ["stranger", "yearly-3"]).then_some(())
    })
    .await;
    wait_event(&client, NS, "HistoryPruned").await;

    // A bad cron expression and a bad time zone: Ready=False, Stalled, the
    // reason and what to fix.
    for (name, cron, zone, want_reason, want_message) in [
        (
            "bad-cron",
            "61 * * * *",
            None,
            "InvalidSchedule",
            "minute field: 61 is out of range 0-59",
        ),
        (
            "bad-zone",
            "@daily",
            Some("Mars/Olympus_Mons"),
            "InvalidTimeZone",
            "\"Mars/Olympus_Mons\" is not an IANA time zone",
        ),
    ] {
        let bad = schedule(name, cron, serde_json::json!({"timeZone": zone}));
        schedules.create(&PostParams::default(), &bad).await.unwrap();
        let (_, reason, message) = eventually(&format!("{name} refused"), 30, async || {
            ready(&schedules, name).await.filter(|(s, _, _)| s == "False")
        })
        .await;
        assert_eq!(reason, want_reason);
        assert!(message.contains(want_message), "{message}");
        let st = schedules.get(name).await.unwrap().status.unwrap();
        assert!(st
            .conditions
            .iter()
            .any(|c| c.type_ == "Stalled" && c.status == "True"));
        assert_eq!(st.next_schedule_time, None);
    }
    // Mended: it runs.
    let fix = serde_json::json!({"spec": {"timeZone": "Europe/Berlin"}});
    schedules
        .patch("bad-zone", &PatchParams::default(), &Patch::Merge(&fix))
        .await
        .unwrap();
    eventually("bad-zone mended", 30, async || {
        ready(&schedules, "bad-zone")
            .await
            .filter(|(s, r, _)| s == "True" && r == "Scheduled")
    })
    .await;

    // What is not implemented is refused when written, with the way out.
    let deleting = schedule(
        "deleting",
        "@daily",
        serde_json::json!({"deleteResultsWithHistory": true}),
    );
    let (code, message) = refusal(schedules.create(&PostParams::default(), &deleting).await);
    assert_eq!(code, 422);
    assert!(
        message.contains("deleteResultsWithHistory: true is not implemented yet"),
        "{message}"
    );
    drop(operator);
}

/// A scan that holds the name of a run and is not the schedule's is left
/// alone: the run is skipped, and the schedule says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_whose_name_another_scan_holds_is_skipped_and_the_scan_left_alone() {
    const NS: &str = "schedule-taken";
    let (client, schedules, scans) = ground(NS).await;
    let operator = start_operator(NS, &[]);
    // Replace, not the default Forbid: a schedule created in the last
    // seconds of a minute (or an operator slow to start) runs that minute
    // before the test reads the next time, and Forbid would then hold the
    // next run behind it rather than try the taken name (CI saw this).
    let body = schedule(
        "taken",
        "* * * * *",
        serde_json::json!({"concurrencyPolicy": "Replace"}),
    );
    schedules.create(&PostParams::default(), &body).await.unwrap();
    let next = eventually("the next run's time", 30, async || {
        schedules.get("taken").await.ok()?.status?.next_schedule_time
    })
    .await;
    let name = format!("taken-{}", next.0.as_second() / 60);
    let foreign: BucketScan = serde_json::from_value(serde_json::json!({
        "apiVersion": "bucketscan.dev/v1alpha1", "kind": "BucketScan", "metadata": {"name": name},
        "spec": {"source": {"endpoint": "http://127.0.0.1:9", "bucket": "photos", "pathStyle": true},
                 "output": {"bucket": "inventory", "prefix": "mine/"}, "suspend": true}
    }))
    .unwrap();
    scans.create(&PostParams::default(), &foreign).await.unwrap();
    let st = eventually("the run skipped", 75, async || {
        let st = schedules.get("taken").await.ok()?.status?;
        (st.skipped_runs == 1).then_some(st)
    })
    .await;
    let why = st.last_skip.unwrap();
    assert!(
        why.contains(&format!("BucketScan {name} exists and is not this schedule's")),
        "{why}"
    );
    assert!(st.active.is_empty(), "{:?}", st.active);
    let left = scans.get(&name).await.unwrap();
    assert!(
        left.owner_references().is_empty(),
        "the foreign scan was not taken over"
    );
    assert_eq!(left.spec.output.prefix.as_deref(), Some("mine/"));
    wait_event(&client, NS, "RunNameTaken").await;
    drop(operator);
}

/// A schedule where the operator may not run scans starts none and says
/// why, by the rule scans follow (`--scan-namespaces`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schedule_outside_the_scan_namespaces_starts_nothing_and_says_why() {
    const NS: &str = "schedule-elsewhere";
    let (_client, schedules, scans) = ground(NS).await;
    let operator = start_operator(NS, &["--scan-namespaces=team-only"]);
    let body = schedule("nightly", "* * * * *", serde_json::json!({}));
    schedules.create(&PostParams::default(), &body).await.unwrap();
    let (_, reason, message) = eventually("refused", 30, async || {
        ready(&schedules, "nightly")
            .await
            .filter(|(s, _, _)| s == "False")
    })
    .await;
    assert_eq!(reason, "NamespaceNotAllowed");
    assert!(
        message.contains(&format!("namespace \"{NS}\" may not run BucketScans")),
        "{message}"
    );
    assert!(message.contains("team-only"), "{message}");
    assert!(runs(&scans, "nightly").await.is_empty());
    drop(operator);
}
