//! The scan's own Redis user (core's `fleet::queue::acl`): its pods reach
//! the scan's keys and the queue's functions and nothing else, so a tenant
//! who reads the scan's Secret can touch no other scan. Created with a
//! random password before the pods start; set again, with the queue's
//! functions, on every reconcile of an active scan ([`refresh`]): a Redis
//! that restarted has forgotten both (users and functions live in memory
//! unless Redis persists them), and the scan's pods wait for them (within
//! their patience, then exit 75 and start again). Deleted when the scan
//! ends and with the scan. Off (`--redis-scan-users=false`, for a Redis
//! whose operator user may not run `ACL SETUSER`): the pods get the
//! operator's own Redis URL.

use super::context::{Context, Error};
use super::owned;
use crate::crd::BucketScan;
use crate::desired;
use bucketscan_core::fleet::queue::{password_of, scan_user, url_with_user};
use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use kube::ResourceExt;

/// Make sure Redis holds what an active scan's pods need, as a Redis that
/// restarted may not: the queue's functions (one look, loaded only when
/// missing) and the scan's user with the password its Secret `NAME-redis`
/// holds (`ACL SETUSER` is idempotent). No Secret yet: no pod has a
/// password, and the Secret is made with the user ([`pods_redis_url`]).
pub(super) async fn refresh(scan: &BucketScan, ctx: &Context) -> Result<(), Error> {
    ctx.connection.load_functions().await?;
    if !ctx.settings.redis_scan_users {
        return Ok(());
    }
    let id = desired::scan_id(scan);
    let known = ctx.redis_passwords.lock().expect("lock").get(&id).cloned();
    let password = match known {
        Some(password) => Some(password),
        None => {
            let secrets: Api<Secret> =
                Api::namespaced(ctx.client.clone(), &scan.namespace().unwrap_or_default());
            let held = match owned::get(&secrets, scan, &desired::redis_secret_name(scan)).await {
                // Secrets of this namespace are out of the operator's reach: it
                // never gave a pod a password here, and the scan says why when it
                // reads its credentials (`SecretForbidden`).
                Err(Error::Kube(kube::Error::Api(e))) if e.code == 403 => return Ok(()),
                other => other?,
            };
            held_password(held.object.as_ref(), &scan_user(&id))
        }
    };
    if let Some(password) = password {
        ctx.connection.set_scan_user(&id, &password).await?;
        ctx.redis_passwords.lock().expect("lock").insert(id, password);
    }
    Ok(())
}

/// The password the scan's Secret gives its user, if any.
fn held_password(secret: Option<&Secret>, user: &str) -> Option<String> {
    secret
        .and_then(|s| s.data.as_ref()?.get("url"))
        .and_then(|url| password_of(&String::from_utf8_lossy(&url.0), user))
}

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
    let password = held_password(held, &user).unwrap_or_else(|| hex::encode(rand::random::<[u8; 24]>()));
    ctx.connection.set_scan_user(&id, &password).await?;
    let url = url_with_user(&ctx.redis.url, &user, &password).map_err(Error::Config);
    ctx.redis_passwords.lock().expect("lock").insert(id, password);
    url
}

/// The scan's pods are gone: so goes their user.
pub(super) async fn delete_scan_user(scan: &BucketScan, ctx: &Context) -> Result<(), Error> {
    if ctx.settings.redis_scan_users {
        let id = desired::scan_id(scan);
        ctx.connection.delete_scan_user(&id).await?;
        ctx.redis_passwords.lock().expect("lock").remove(&id);
    }
    Ok(())
}
