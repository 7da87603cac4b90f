//! A name taken by another workload. When a reconcile meets an object of one
//! of the scan's child names that is not the scan's ([`Error::NotOwned`],
//! `owned` left it alone), the scan shows condition `Conflict` naming every
//! such object (kind and name in the scan's namespace, nothing of their
//! content) and gets a Warning event `Conflict`; it is looked at again
//! every [`CONFLICT_REQUEUE`], since the other workload's objects are not
//! watched and freeing the name wakes nothing. The first reconcile that gets
//! through clears the condition (reason `Resolved`).
//!
//! May import: `context`, `owned`, `report`, `crd`, `desired`, `status`.

use super::context::{Context, Error};
use super::owned;
use super::report::{current, publish, write_status_now};
use crate::crd::BucketScan;
use crate::desired;
use crate::status::{self, CONFLICT};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::Api;
use kube::runtime::events::EventType;
use kube::ResourceExt;
use std::time::Duration;

/// How often a scan in conflict looks again: slowly (each look reads every
/// name), but soon enough after the other workload moved.
pub(super) const CONFLICT_REQUEUE: Duration = Duration::from_secs(30);

/// Show that `found` (an [`Error::NotOwned`]) holds the scan up, with every
/// other name of the scan's that is taken too.
pub(super) async fn conflict(scan: &BucketScan, ctx: &Context, found: &Error) -> Result<(), Error> {
    let mut names = taken(scan, ctx).await;
    if let Error::NotOwned { kind, name, .. } = found {
        let found = format!("{kind} {name}");
        if !names.contains(&found) {
            names.insert(0, found);
        }
    }
    let message = message(scan, &names);
    let scan = current(scan, ctx).await?;
    let before = scan.status.clone().unwrap_or_default();
    let mut st = before.clone();
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    let generation = scan.metadata.generation;
    let said = before
        .conditions
        .iter()
        .any(|c| c.type_ == CONFLICT && c.status == "True" && c.message == message);
    status::set_condition(
        &mut st.conditions,
        CONFLICT,
        true,
        "Conflict",
        &message,
        generation,
        &now,
    );
    write_status_now(ctx, &scan, &before, &st).await?;
    if !said {
        tracing::warn!(scan = %scan.name_any(), "{message}");
        publish(ctx, &scan, EventType::Warning, "Conflict", &message).await;
    }
    Ok(())
}

/// The reconcile got through: a Conflict the scan showed is over.
pub(super) async fn resolved(scan: &BucketScan, ctx: &Context) -> Result<(), Error> {
    let scan = current(scan, ctx).await?;
    let before = scan.status.clone().unwrap_or_default();
    if !status::is_true(&before.conditions, CONFLICT) {
        return Ok(());
    }
    let mut st = before.clone();
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    let msg = "the names the scan's objects take are free or the scan's own";
    status::set_condition(
        &mut st.conditions,
        CONFLICT,
        false,
        "Resolved",
        msg,
        scan.metadata.generation,
        &now,
    );
    write_status_now(ctx, &scan, &before, &st).await?;
    publish(ctx, &scan, EventType::Normal, "ConflictResolved", msg).await;
    Ok(())
}

/// Whether the scan's status (as the reconcile read it) shows a Conflict.
pub(super) fn shown(scan: &BucketScan) -> bool {
    scan.status
        .as_ref()
        .is_some_and(|st| status::is_true(&st.conditions, CONFLICT))
}

/// `Kind name` of every name the scan uses that holds another workload's
/// object (best effort: a name that cannot be read is left out).
async fn taken(scan: &BucketScan, ctx: &Context) -> Vec<String> {
    let ns = scan.namespace().unwrap_or_default();
    let deployments: Api<Deployment> = Api::namespaced(ctx.client.clone(), &ns);
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), &ns);
    let jobs: Api<Job> = Api::namespaced(ctx.client.clone(), &ns);
    let mut found = Vec::new();
    let mut note = |r: Result<(), Error>| {
        if let Err(Error::NotOwned { kind, name, .. }) = r {
            found.push(format!("{kind} {name}"));
        }
    };
    note(
        owned::get(&deployments, scan, &desired::workers_name(scan))
            .await
            .map(drop),
    );
    note(
        owned::get(&secrets, scan, &desired::redis_secret_name(scan))
            .await
            .map(drop),
    );
    if desired::plans_by_job(scan) {
        for replan in [false, true] {
            note(
                owned::get(&jobs, scan, &desired::plan_job_name(scan, replan))
                    .await
                    .map(drop),
            );
        }
    }
    note(
        owned::get(&jobs, scan, &desired::merge_job_name(scan))
            .await
            .map(drop),
    );
    found
}

/// What the scan says: the objects by kind and name, and what to do.
fn message(scan: &BucketScan, names: &[String]) -> String {
    let (list, verb) = match names {
        [] => ("an object of a name the scan uses".to_string(), "exists"),
        [one] => (one.clone(), "exists"),
        [rest @ .., last] => (format!("{} and {last}", rest.join(", ")), "exist"),
    };
    format!(
        "{list} in namespace {} {verb} and {} not this scan's: the operator leaves {} alone and the scan \
         waits (looked at again every {} s). Rename or remove {}, or create the BucketScan under another name",
        scan.namespace().unwrap_or_default(),
        if names.len() > 1 { "are" } else { "is" },
        if names.len() > 1 { "them" } else { "it" },
        CONFLICT_REQUEUE.as_secs(),
        if names.len() > 1 { "them" } else { "it" },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_message_names_each_taken_object_and_nothing_of_it() {
        let mut scan = BucketScan::new("celery", Default::default());
        scan.metadata.namespace = Some("team-a".into());
        let one = message(&scan, &["Deployment celery-workers".into()]);
        assert!(
            one.starts_with("Deployment celery-workers in namespace team-a exists and is not this scan's: "),
            "{one}"
        );
        assert!(
            one.contains("leaves it alone") && one.contains("every 30 s"),
            "{one}"
        );
        let three = message(
            &scan,
            &[
                "Deployment celery-workers".into(),
                "Secret celery-redis".into(),
                "Job celery-plan".into(),
            ],
        );
        assert!(
            three.starts_with(
                "Deployment celery-workers, Secret celery-redis and Job celery-plan in namespace team-a exist \
                 and are not this scan's: the operator leaves them alone"
            ),
            "{three}"
        );
    }
}
