//! The scan's own Redis user (core's `fleet::queue::acl`): its pods reach
//! the scan's keys and nothing else, so a tenant who reads the scan's Secret
//! can touch no other scan. Created with a random password before the pods
//! start; set again on every reconcile that runs pods, as a Redis that
//! restarted has forgotten it; deleted when the scan ends and with the scan.
//! Off (`--redis-scan-users=false`, for a Redis whose operator user may not
//! run `ACL SETUSER`): the pods get the operator's own Redis URL.

use super::context::{Context, Error};
use crate::crd::BucketScan;
use crate::desired;
use bucketscan_core::fleet::queue::{password_of, scan_user, url_with_user};
use k8s_openapi::api::core::v1::Secret;

/// The Redis URL the scan's pods get, with its user set in Redis. `held`:
/// the scan's own Secret `NAME-redis` as it is now (`owned` checked it is
/// the scan's), whose password the pods already hold.
pub(super) async fn pods_redis_url(
    scan: &BucketScan,
    ctx: &Context,
    held: Option<&Secret>,
) -> Result<String, Error> {
    if !ctx.settings.redis_scan_users {
        return Ok(ctx.redis.url.clone());
    }
    let id = desired::scan_id(scan);
    let user = scan_user(&id);
    // The password the pods already hold, so a running pod keeps working.
    let held = held
        .and_then(|s| s.data.as_ref()?.get("url"))
        .and_then(|url| password_of(&String::from_utf8_lossy(&url.0), &user));
    let password = held.unwrap_or_else(|| hex::encode(rand::random::<[u8; 24]>()));
    ctx.connection.set_scan_user(&id, &password).await?;
    url_with_user(&ctx.redis.url, &user, &password).map_err(Error::Config)
}

/// The scan's pods are gone: so goes their user.
pub(super) async fn delete_scan_user(scan: &BucketScan, ctx: &Context) -> Result<(), Error> {
    if ctx.settings.redis_scan_users {
        ctx.connection.delete_scan_user(&desired::scan_id(scan)).await?;
    }
    Ok(())
}
