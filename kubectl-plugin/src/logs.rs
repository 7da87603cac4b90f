//! `kubectl bucketscan logs NAME`: what the scan's pods said (workers, plan,
//! replan and merge Jobs, the parts cleanup), each line after its pod's
//! name, pods in the order they started: the one place to look when a scan
//! is stuck, without finding its pods first.
//!
//! May import: error

use crate::error::Error;
use bucketscan_api::crd::BucketScan;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ListParams, LogParams};
use kube::{Api, Client, ResourceExt};
use std::fmt::Write as _;

/// The labels the operator gives every pod of scan `name`.
fn selector(name: &str, component: Option<&str>) -> String {
    let mut selector = format!(
        "app.kubernetes.io/name=bucketscan,app.kubernetes.io/managed-by=bucketscan-operator,app.kubernetes.io/instance={name}"
    );
    if let Some(c) = component {
        let _ = write!(selector, ",app.kubernetes.io/component={c}");
    }
    selector
}

/// The logs of `scan`'s pods (of one `component`), the last `tail` lines of
/// each: the pods carrying the labels the operator gives this scan's pods
/// (a scan's name is unique in its namespace).
pub async fn logs(
    client: &Client,
    scan: &BucketScan,
    component: Option<&str>,
    tail: Option<i64>,
) -> Result<String, Error> {
    let ns = scan.namespace().unwrap_or_default();
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let mut list = pods
        .list(&ListParams::default().labels(&selector(&scan.name_any(), component)))
        .await?
        .items;
    list.sort_by(|a, b| {
        (a.metadata.creation_timestamp.as_ref().map(|t| t.0), a.name_any())
            .cmp(&(b.metadata.creation_timestamp.as_ref().map(|t| t.0), b.name_any()))
    });
    if list.is_empty() {
        return Ok(format!(
            "no pods of bucketscan {:?}{} in namespace {ns:?} (they are gone once the scan is complete, or not started yet)\n",
            scan.name_any(),
            component.map(|c| format!(" ({c})")).unwrap_or_default()
        ));
    }
    let mut out = String::new();
    for pod in list {
        let name = pod.name_any();
        let params = LogParams {
            tail_lines: tail,
            ..LogParams::default()
        };
        match pod_log(&pods, &name, &params).await {
            Ok(bytes) => {
                for line in lossy(&bytes).lines() {
                    let _ = writeln!(out, "[{name}] {line}");
                }
            }
            // A pod not started yet (pulling, pending) has no log: say so
            // and go on with the others.
            Err(kube::Error::Api(status)) if status.code == 400 => {
                let _ = writeln!(out, "[{name}] (no log yet: {})", status.message);
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(out)
}

/// One pod's log as the bytes it wrote: kube's `logs` decodes strictly, so
/// one byte that is not UTF-8 (a worker printing a binary key) failed the
/// whole command.
async fn pod_log(pods: &Api<Pod>, name: &str, params: &LogParams) -> Result<Vec<u8>, kube::Error> {
    use futures::AsyncReadExt;
    let mut stream = pods.log_stream(name, params).await?;
    let mut bytes = Vec::new();
    stream
        .read_to_end(&mut bytes)
        .await
        .map_err(kube::Error::ReadEvents)?;
    Ok(bytes)
}

/// A log as text, each invalid byte sequence shown as U+FFFD (the caller
/// then makes control characters visible, `render::terminal`).
fn lossy(bytes: &[u8]) -> std::borrow::Cow<'_, str> {
    String::from_utf8_lossy(bytes)
}

#[cfg(test)]
mod tests {
    use super::{lossy, selector};

    #[test]
    fn a_byte_that_is_not_utf8_is_shown_not_fatal() {
        let log = b"key a\xff\xfeb listed\nnext line\n";
        let text = lossy(log);
        assert_eq!(
            text.lines().collect::<Vec<_>>(),
            ["key a\u{fffd}\u{fffd}b listed", "next line"]
        );
    }

    #[test]
    fn the_selector_names_the_operator_s_labels_of_the_scan() {
        assert_eq!(
            selector("photos", None),
            "app.kubernetes.io/name=bucketscan,app.kubernetes.io/managed-by=bucketscan-operator,app.kubernetes.io/instance=photos"
        );
        assert!(selector("photos", Some("merge")).ends_with(",app.kubernetes.io/component=merge"));
    }
}
