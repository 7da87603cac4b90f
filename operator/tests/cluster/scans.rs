//! BucketScans as the tests write them (`s3_scan`), and what a test waits
//! for on them: a condition (`wait_condition`), an event's reason, their
//! deletion through the operator's finalizer (`delete_scans`).
//!
//! Imports the API's types, the Kubernetes client and `cluster::eventually`.

use super::eventually;
use bucketscan_api::crd::BucketScan;
use kube::api::{Api, DeleteParams, ListParams};
use kube::Client;

/// BucketScan `name` as the tests write one: `bucket` at `endpoint` (path
/// style) read with the credentials Secret `s3` (`create_s3_secret`), the
/// result in `out` under `NAME/`; each field of `spec` is set over these
/// (workers, sharding, ...).
pub fn s3_scan(name: &str, endpoint: &str, bucket: &str, out: &str, spec: serde_json::Value) -> BucketScan {
    let mut body = serde_json::json!({
        "apiVersion": "bucketscan.dev/v1alpha1", "kind": "BucketScan",
        "metadata": {"name": name},
        "spec": {
            "source": {"endpoint": endpoint, "bucket": bucket, "pathStyle": true,
                       "credentialsSecret": {"name": "s3"}},
            "output": {"bucket": out, "prefix": format!("{name}/")}
        }
    });
    for (k, v) in spec.as_object().unwrap() {
        body["spec"][k] = v.clone();
    }
    serde_json::from_value(body).unwrap()
}

/// Condition `type_` of BucketScan `name`: status, reason and message.
pub async fn condition(scans: &Api<BucketScan>, name: &str, type_: &str) -> Option<(String, String, String)> {
    let st = scans.get(name).await.ok()?.status?;
    let c = st.conditions.into_iter().find(|c| c.type_ == type_)?;
    Some((c.status, c.reason, c.message))
}

/// Waits until condition `type_` of `name` has `status` and `reason`; its
/// message.
pub async fn wait_condition(
    scans: &Api<BucketScan>,
    name: &str,
    type_: &str,
    status: &str,
    reason: &str,
) -> String {
    eventually(&format!("{name}: {type_}={status} ({reason})"), 60, async || {
        let (s, r, message) = condition(scans, name, type_).await?;
        (s == status && r == reason).then_some(message)
    })
    .await
}

/// The reasons of the events in `ns`.
pub async fn event_reasons(client: &Client, ns: &str) -> Vec<String> {
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(client.clone(), ns);
    let list = events.list(&Default::default()).await.unwrap().items;
    list.into_iter().filter_map(|e| e.reason).collect()
}

/// Waits (30 s at most) for an event with `reason` in `ns`: the operator
/// publishes an event after the status write a test has just seen, so a
/// list made at once may not hold it yet.
pub async fn wait_event(client: &Client, ns: &str, reason: &str) {
    event_messages(client, ns, reason).await;
}

/// The messages of the events with `reason` in `ns`, once there is one
/// (30 s at most, as [`wait_event`]).
pub async fn event_messages(client: &Client, ns: &str, reason: &str) -> Vec<String> {
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(client.clone(), ns);
    eventually(&format!("a {reason} event in {ns}"), 30, async || {
        let list = events.list(&Default::default()).await.ok()?.items;
        let messages: Vec<String> = list
            .into_iter()
            .filter(|e| e.reason.as_deref() == Some(reason))
            .map(|e| e.message.unwrap_or_default())
            .collect();
        (!messages.is_empty()).then_some(messages)
    })
    .await
}

/// Deletes the scans `names` and waits until no scan is left in the
/// namespace (the operator's finalizer has cleaned up after each).
pub async fn delete_scans(scans: &Api<BucketScan>, names: &[&str]) {
    for name in names {
        scans.delete(name, &DeleteParams::default()).await.unwrap();
    }
    eventually("every scan deleted", 60, async || {
        let left = scans.list(&ListParams::default()).await.ok()?;
        left.items.is_empty().then_some(())
    })
    .await;
}
