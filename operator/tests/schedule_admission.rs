//! A BucketScanSchedule gives its author nothing they could not create
//! themselves (docs/threat-model.md, T14), asked of the test ground's real
//! kube-apiserver under the chart's own admission policies, as each user
//! (impersonation):
//! - a schedule is admitted only from a user who may create pods in its
//!   namespace, and its scanTemplate only with the listed PriorityClasses
//!   (the BucketScan checks, applied to the template when it is written);
//! - the operator's ServiceAccount, which creates the schedule's scans and
//!   may not create pods, is admitted for BucketScans; another user without
//!   pod rights still is not.

mod cluster;

use bucketscan_api::crd::BucketScan;
use bucketscan_api::schedule::BucketScanSchedule;
use cluster::*;
use kube::api::{Api, PostParams};

const NS: &str = "schedule-admit";
/// The chart's operator ServiceAccount for release `sched` in namespace
/// `bucketscan`, as the policy names it.
const OPERATOR: &str = "system:serviceaccount:bucketscan:sched-bucketscan";

fn schedule(name: &str, pod_template: serde_json::Value) -> BucketScanSchedule {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "bucketscan.dev/v1alpha1", "kind": "BucketScanSchedule",
        "metadata": {"name": name},
        "spec": {"schedule": "@daily", "scanTemplate": {
            "source": {"bucket": "photos"}, "output": {"bucket": "results"},
            "workers": {"podTemplate": pod_template}}}
    }))
    .unwrap()
}

fn scan(name: &str) -> BucketScan {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "bucketscan.dev/v1alpha1", "kind": "BucketScan", "metadata": {"name": name},
        "spec": {"source": {"bucket": "photos"}, "output": {"bucket": "results"}}
    }))
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schedule_is_admitted_only_from_who_may_create_the_pods_of_its_scans() {
    let admin = labelled_namespace(NS).await;
    let chart = chart_objects(
        "sched",
        "bucketscan",
        &["--set=admission.allowedPriorityClasses={batch-low}"],
    );
    apply_objects(&admission_policies(&chart, NS), "schedule-admit-policies.json");
    // alice may write schedules and scans but not create pods; bob may;
    // the operator may write scans and may not create pods.
    grant(
        NS,
        "alice",
        "get,list,create",
        "bucketscanschedules.bucketscan.dev,bucketscans.bucketscan.dev",
    );
    grant(NS, "bob", "get,list,create", "bucketscanschedules.bucketscan.dev");
    grant(NS, "bob", "create", "pods");
    grant(NS, OPERATOR, "get,list,create", "bucketscans.bucketscan.dev");
    let admin_schedules: Api<BucketScanSchedule> = Api::namespaced(admin.clone(), NS);
    let admin_scans: Api<BucketScan> = Api::namespaced(admin.clone(), NS);
    let alice_schedules: Api<BucketScanSchedule> = Api::namespaced(client_as("alice").await, NS);
    let bob_schedules: Api<BucketScanSchedule> = Api::namespaced(client_as("bob").await, NS);

    let message = settled_refusal(
        &alice_schedules,
        &admin_schedules,
        &schedule("alices", serde_json::json!({})),
        "may not create pods",
    )
    .await;
    assert!(
        message.ends_with(&format!(
            "BucketScanSchedules make BucketScans, which run pods in their namespace, and alice may not create \
             pods in namespace {NS}: ask an admin for create on pods there (the standard edit or admin role has it)"
        )),
        "{message}"
    );
    let message = settled_refusal(
        &bob_schedules,
        &admin_schedules,
        &schedule(
            "critical",
            serde_json::json!({"priorityClassName": "system-cluster-critical"}),
        ),
        "is not allowed",
    )
    .await;
    assert!(
        message.ends_with(
            "spec.scanTemplate.workers.podTemplate.priorityClassName system-cluster-critical is not allowed; \
             allowed: batch-low (chart value admission.allowedPriorityClasses)"
        ),
        "{message}"
    );
    eventually("bob's schedule admitted", 30, async || {
        bob_schedules
            .create(
                &PostParams::default(),
                &schedule("bobs", serde_json::json!({"priorityClassName": "batch-low"})),
            )
            .await
            .ok()
    })
    .await;

    // The operator creates the scans of schedules: admitted without pod
    // rights; alice, without them, still is not.
    let operator_scans: Api<BucketScan> = Api::namespaced(client_as(OPERATOR).await, NS);
    eventually("the operator's scan admitted", 30, async || {
        operator_scans
            .create(&PostParams::default(), &scan("bobs-1"))
            .await
            .ok()
    })
    .await;
    let alice_scans: Api<BucketScan> = Api::namespaced(client_as("alice").await, NS);
    let message = settled_refusal(
        &alice_scans,
        &admin_scans,
        &scan("alices-own"),
        "may not create pods",
    )
    .await;
    assert!(
        message.contains("BucketScans run pods in their namespace, and alice may not"),
        "{message}"
    );
}
