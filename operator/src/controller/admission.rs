//! Admission of a scan: the checks of its settings a start passes (and a
//! retry, which starts it again), and, just before it is planned, that it
//! does not write where another running scan writes or reads (the rule is
//! the pure `validate::output_conflict`; this file fetches the other scans).

use super::context::{Context, Error};
use crate::crd::BucketScan;
use crate::validate::output_conflict;
use kube::api::{Api, ListParams};

/// The failure reason when a scan's endpoint is not in the allowlist.
pub(super) const ENDPOINT_NOT_ALLOWED: &str = "EndpointNotAllowed";

/// What a scan must pass against the operator's settings before it starts
/// (`started`: it has, and only its caps are no longer judged: a running
/// scan edited past a cap is held at the cap instead). `Err` holds the
/// failure reason and message.
pub(super) fn start_checks(
    scan: &BucketScan,
    ctx: &Context,
    started: bool,
) -> Result<(), (&'static str, String)> {
    let reason = |reason: &'static str| move |message: String| (reason, message);
    crate::validate::validate(scan).map_err(reason("InvalidSpec"))?;
    ctx.namespace_allows(scan)
        .map_err(reason("NamespaceNotAllowed"))?;
    crate::validate::worker_image(scan, &ctx.settings.allowed_images).map_err(reason("ImageNotAllowed"))?;
    crate::validate::endpoint(scan, &ctx.settings.allowed_endpoints).map_err(reason(ENDPOINT_NOT_ALLOWED))?;
    if !started {
        crate::limits::over_limit(scan, &ctx.settings.limits).map_err(reason("OverLimit"))?;
    }
    Ok(())
}

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
