//! The scan's source and output store as the operator reaches it: S3 clients
//! with the credentials and CA from the Secrets the BucketScan names, read
//! in its own namespace only, that connect only where the operator's endpoint
//! allowlist lets them (`--allowed-endpoints`).

use super::context::{Context, Error};
use crate::crd::BucketScan;
use bucketscan_core::s3::{Endpoint, S3};
use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use kube::ResourceExt;
use std::sync::Arc;

/// The Secret `name` the scan's `field` names, in the scan's namespace; a
/// clear error (the scan waits for it) when it is not there.
async fn named_secret(scan: &BucketScan, ctx: &Context, name: &str, field: &str) -> Result<Secret, Error> {
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), &scan.namespace().unwrap_or_default());
    let ns = scan.namespace().unwrap_or_default();
    match secrets.get_opt(name).await {
        Ok(Some(secret)) => Ok(secret),
        Ok(None) => Err(Error::SecretMissing(format!(
            "Secret {name:?} ({field}) does not exist"
        ))),
        Err(kube::Error::Api(e)) if e.code == 403 => Err(Error::SecretForbidden(format!(
            "the operator may not read Secret {name:?} ({field}) in namespace {ns:?}: add the namespace \
             to the chart value scanNamespaces (a RoleBinding to the ClusterRole RELEASE-scan-namespace)"
        ))),
        Err(e) => Err(e.into()),
    }
}

/// One key of a Secret in the scan's namespace; a clear error when missing.
async fn secret_value(
    scan: &BucketScan,
    ctx: &Context,
    name: &str,
    key: &str,
    field: &str,
) -> Result<Vec<u8>, Error> {
    named_secret(scan, ctx, name, field)
        .await?
        .data
        .and_then(|mut d| d.remove(key))
        .map(|v| v.0)
        .ok_or_else(|| Error::SecretIncomplete(format!("Secret {name:?} ({field}) has no key {key:?}")))
}

/// Bytes any answer of a tenant's endpoint may have in the operator: a LIST
/// page (under 4 MiB, and held to that: `CAPPED_LISTING_BYTES`), a done
/// record (1 MiB at most), the store check's record (64 KiB) and a delete's
/// answer are smaller. The operator's memory serves every namespace, and
/// the endpoint is the tenant's to run: an answer without end is an error,
/// not an OOM. (A baseline's manifest is read in the scan's own plan Job:
/// `desired::plans_by_job`.)
pub const MAX_ANSWER_BYTES: usize = 8 << 20;

/// The scan's credentials from its Secret and its store's CA, if it names
/// one: a Secret missing or incomplete is the error that blocks the scan
/// until it comes.
async fn credentials_and_ca(
    scan: &BucketScan,
    ctx: &Context,
) -> Result<(aws_credential_types::Credentials, Option<Vec<u8>>), Error> {
    let src = &scan.spec.source;
    let credentials = match &src.credentials_secret {
        // The operator's own identity (its pod's role, the instance's) is
        // never lent to a scan: such scans reach the store only from their
        // own pods (`desired::uses_pod_identity`).
        None => {
            return Err(Error::Config(format!(
                "the scan names no credentialsSecret: the operator does not reach {:?} with its own identity",
                src.bucket
            )))
        }
        Some(r) => {
            let secret = named_secret(scan, ctx, &r.name, "spec.source.credentialsSecret").await?;
            let field = |key: &str| {
                secret
                    .data
                    .as_ref()
                    .and_then(|d| d.get(key))
                    .map(|v| String::from_utf8_lossy(&v.0).trim().to_string())
            };
            let (Some(id), Some(key)) = (field("AWS_ACCESS_KEY_ID"), field("AWS_SECRET_ACCESS_KEY")) else {
                return Err(Error::SecretIncomplete(format!(
                    "Secret {:?} needs the keys AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY",
                    r.name
                )));
            };
            aws_credential_types::Credentials::new(
                id,
                key,
                field("AWS_SESSION_TOKEN"),
                None,
                "bucketscan-secret",
            )
        }
    };
    let ca_pem = match &src.ca_secret {
        None => None,
        Some(r) => Some(secret_value(scan, ctx, &r.name, &r.key, "spec.source.caSecret").await?),
    };
    Ok((credentials, ca_pem))
}

/// For a scan with a credentials Secret planned by a Job (it has a
/// baseline): its Secrets are there and whole before the Job's pod needs
/// them, or the scan is Blocked, as when the operator plans it, instead of
/// a pod that cannot start.
pub(super) async fn secrets_ready(scan: &BucketScan, ctx: &Context) -> Result<(), Error> {
    credentials_and_ca(scan, ctx).await.map(drop)
}

/// The scan's S3 clients, with the credentials from its Secret.
pub(super) async fn s3_for(scan: &BucketScan, ctx: &Context) -> Result<Arc<S3>, Error> {
    let src = &scan.spec.source;
    let (credentials, ca_pem) = credentials_and_ca(scan, ctx).await?;
    // Before anything is sent; the connector checks every address again.
    let allowlist = ctx.settings.allowed_endpoints.clone();
    allowlist.check_endpoint(src.endpoint.as_deref())?;
    let endpoint = Endpoint {
        url: src.endpoint.clone(),
        region: src.region.clone(),
        path_style: src.path_style,
        ca_pem,
        insecure: src.insecure_skip_tls_verify,
        pool_size: 16,
        allowlist: Some(allowlist),
        max_answer_bytes: Some(MAX_ANSWER_BYTES),
    };
    Ok(S3::connect_with(endpoint, Some(credentials)).await?)
}
