//! Namespaces that may run scans chosen by label (`--scan-namespace-selector`,
//! chart value `operator.scanNamespaceSelector`): a metadata-only watch of
//! the Namespaces the selector matches, whose cache says whether a scan's
//! namespace matches now. A namespace labelled after the install cannot
//! hold a RoleBinding made before it, so the chart grants the operator its
//! scan-namespace rights cluster-wide for a selector: this check is what
//! keeps scans elsewhere out (reason `NamespaceNotAllowed`).
//!
//! May import: nothing of the crate (the bottom of the controller, below
//! `context`).

use futures::StreamExt;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, ListParams};
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{watcher, WatchStreamExt};

/// Why the operator cannot honour a selector: it refuses to start with it.
#[derive(Debug, thiserror::Error)]
pub enum SelectorError {
    #[error(
        "--scan-namespace-selector (BUCKETSCAN_SCAN_NAMESPACE_SELECTOR) {selector:?} is refused by the API \
         server ({message}): write a Kubernetes label selector, such as `bucketscan.dev/scans=true` or \
         `team in (a,b),!frozen`"
    )]
    Invalid { selector: String, message: String },
    #[error(
        "--scan-namespace-selector needs list and watch on Namespaces, which the operator may not do \
         ({message}): the chart grants both with operator.scanNamespaceSelector; an install of your own \
         needs a ClusterRole with them, and the scan-namespace rules bound cluster-wide"
    )]
    Forbidden { message: String },
    #[error("--scan-namespace-selector: cannot list Namespaces: {0}")]
    Kube(#[source] kube::Error),
    #[error("--scan-namespace-selector: the watch of Namespaces ended before it listed them")]
    NeverListed,
}

/// The Namespaces a label selector matches, kept current by a watch.
#[derive(Clone)]
pub struct LabelledNamespaces {
    selector: String,
    matching: Store<PartialObjectMeta<Namespace>>,
}

impl LabelledNamespaces {
    /// Watch the Namespaces `selector` matches; returns once they are
    /// listed, so that no scan is judged against an empty cache. A selector
    /// the API server refuses, or RBAC that does not reach Namespaces,
    /// fails here at once (a watch would retry it forever).
    pub async fn watch(client: kube::Client, selector: &str) -> Result<Self, SelectorError> {
        let namespaces: Api<Namespace> = Api::all(client.clone());
        let probe = ListParams::default().labels(selector).limit(1);
        namespaces.list_metadata(&probe).await.map_err(|e| match e {
            kube::Error::Api(status) if status.code == 400 => SelectorError::Invalid {
                selector: selector.to_string(),
                message: status.message.clone(),
            },
            kube::Error::Api(status) if status.code == 403 => SelectorError::Forbidden {
                message: status.message.clone(),
            },
            e => SelectorError::Kube(e),
        })?;
        let (matching, writer) = reflector::store();
        // Metadata only: the labels are all it needs.
        let metadata: Api<PartialObjectMeta<Namespace>> = Api::all(client);
        let changes = watcher(metadata, watcher::Config::default().labels(selector))
            .default_backoff()
            .reflect(writer)
            .for_each(|event| async move {
                if let Err(e) = event {
                    tracing::warn!(error = %e, "the watch of scan namespaces (by label) failed; retrying");
                }
            });
        tokio::spawn(changes);
        matching
            .wait_until_ready()
            .await
            .map_err(|_| SelectorError::NeverListed)?;
        Ok(Self {
            selector: selector.to_string(),
            matching,
        })
    }

    /// Whether scans may run in `namespace`: it carries the labels now.
    pub fn allows(&self, namespace: &str) -> Result<(), String> {
        if self.matching.get(&ObjectRef::new(namespace)).is_some() {
            return Ok(());
        }
        Err(format!(
            "namespace {namespace:?} may not run BucketScans: this operator runs them only in namespaces \
             whose labels match {:?} (chart value operator.scanNamespaceSelector); label the namespace, \
             then create the scan again",
            self.selector
        ))
    }
}
