//! Reading one BucketScan, with a 404 told apart: no such object, or no
//! such API at all (the CRD is not installed).
//!
//! May import: error

use crate::error::Error;
use bucketscan_api::crd::BucketScan;
use kube::{Api, Client};

/// The API of BucketScans in `namespace`.
pub fn api(client: &Client, namespace: &str) -> Api<BucketScan> {
    Api::namespaced(client.clone(), namespace)
}

/// The BucketScan `name`, or a not-found error that says which of the two
/// things is missing.
pub async fn get(client: &Client, namespace: &str, name: &str) -> Result<BucketScan, Error> {
    match api(client, namespace).get(name).await {
        Ok(scan) => Ok(scan),
        Err(kube::Error::Api(status)) if status.is_not_found() => Err(missing(client, namespace, name).await),
        Err(e @ (kube::Error::HyperError(_) | kube::Error::Service(_))) => {
            Err(Error::Unreachable(e.to_string()))
        }
        Err(e) => Err(e.into()),
    }
}

/// The BucketScans of `namespace`, or of every namespace, by namespace
/// and name.
pub async fn list(client: &Client, namespace: Option<&str>) -> Result<Vec<BucketScan>, Error> {
    let api: Api<BucketScan> = match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    match api.list(&Default::default()).await {
        Ok(list) => {
            let mut scans = list.items;
            scans.sort_by(|a, b| {
                (&a.metadata.namespace, &a.metadata.name).cmp(&(&b.metadata.namespace, &b.metadata.name))
            });
            Ok(scans)
        }
        Err(kube::Error::Api(status)) if status.is_not_found() => Err(Error::NoCrd),
        Err(e @ (kube::Error::HyperError(_) | kube::Error::Service(_))) => {
            Err(Error::Unreachable(e.to_string()))
        }
        Err(e) => Err(e.into()),
    }
}

/// Why a GET answered 404: the resource type is unknown, or the object is.
pub async fn missing(client: &Client, namespace: &str, name: &str) -> Error {
    let served = client
        .list_api_group_resources("bucketscan.dev/v1alpha1")
        .await
        .map(|list| list.resources.iter().any(|r| r.name == "bucketscans"));
    match served {
        Ok(true) => Error::NotFound {
            name: name.to_string(),
            namespace: namespace.to_string(),
        },
        _ => Error::NoCrd,
    }
}
