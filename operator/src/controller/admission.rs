//! Admission of a new scan, just before it is planned: it must not write
//! where another running scan writes or reads (the rule is the pure
//! `validate::output_conflict`; this file fetches the other scans).

use super::context::{Context, Error};
use crate::crd::BucketScan;
use crate::validate::output_conflict;
use kube::api::{Api, ListParams};

/// `Err(message)` when another running scan in the operator's reach claims
/// the output (or the keyspace it lies in).
pub(super) async fn check_output(scan: &BucketScan, ctx: &Context) -> Result<Result<(), String>, Error> {
    let api: Api<BucketScan> = match &ctx.namespace {
        Some(ns) => Api::namespaced(ctx.client.clone(), ns),
        None => Api::all(ctx.client.clone()),
    };
    let others = api.list(&ListParams::default()).await?.items;
    Ok(output_conflict(scan, &others))
}
