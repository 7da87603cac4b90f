//! Only what the scan owns. The operator names a scan's children after the
//! scan (`NAME-workers`, `NAME-redis`, `NAME-plan`, `NAME-replan`,
//! `NAME-merge`, `NAME-delete-parts`), and another workload of the namespace
//! may already use such a name (a BucketScan `celery` beside a Deployment
//! `celery-workers`). Every create, patch and delete of a child goes through
//! here: the name is read first, and an object of it that is not the scan's
//! is never written, adopted nor deleted ([`Error::NotOwned`]: the scan says
//! `Conflict`, see `conflict`). A delete carries the uid of the object that
//! was checked as its precondition, so an object that took the name since
//! is not deleted either.
//!
//! May import: `context`, `crd`, `desired`.

use super::context::{apply_params, key_of, Context, Error};
use crate::crd::BucketScan;
use crate::desired::SCAN_UID;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, Patch, Preconditions};
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::fmt::Debug;

/// Who holds a name.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Holder {
    /// The scan: its controller owner reference names the scan's uid, or,
    /// for a child that outlives the scan and so has no owner (the
    /// delete-parts Job), the [`SCAN_UID`] annotation does.
    Scan,
    /// Anyone else: another controller's object, or one without an owner.
    Foreign,
}

/// Whose object `meta` is, for the scan whose uid is `uid`. A controller
/// owner reference decides; without one, the operator's uid annotation.
pub(crate) fn holder(meta: &ObjectMeta, uid: &str) -> Holder {
    let controller = meta
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true));
    let ours = match controller {
        Some(owner) => owner.uid == uid,
        None => meta
            .annotations
            .as_ref()
            .and_then(|a| a.get(SCAN_UID))
            .is_some_and(|v| v == uid),
    };
    if ours && !uid.is_empty() {
        Holder::Scan
    } else {
        Holder::Foreign
    }
}

/// A child's name the scan may write: free, or holding the scan's own
/// object. Only [`get`] makes one, so nothing is applied unchecked.
pub(super) struct Mine<K> {
    name: String,
    /// The scan's object of that name, if there is one.
    pub object: Option<K>,
}

/// The kinds of children (Deployment, Secret, Job).
pub(super) trait Child:
    Resource<DynamicType = ()> + Clone + Debug + DeserializeOwned + Serialize
{
}
impl<K> Child for K where K: Resource<DynamicType = ()> + Clone + Debug + DeserializeOwned + Serialize {}

fn not_owned<K: Child>(scan: &BucketScan, name: &str) -> Error {
    Error::NotOwned {
        kind: K::kind(&()).into_owned(),
        name: name.to_string(),
        namespace: scan.namespace().unwrap_or_default(),
    }
}

/// The scan's child `name`: free, the scan's own, or [`Error::NotOwned`].
pub(super) async fn get<K: Child>(api: &Api<K>, scan: &BucketScan, name: &str) -> Result<Mine<K>, Error> {
    let object = api.get_opt(name).await?;
    if let Some(o) = &object {
        if holder(o.meta(), &scan.uid().unwrap_or_default()) == Holder::Foreign {
            return Err(not_owned::<K>(scan, name));
        }
    }
    Ok(Mine {
        name: name.to_string(),
        object,
    })
}

impl<K: Child> Mine<K> {
    /// Server-side apply `object` under this name (created when free).
    /// Between the read and this write, another workload could create the
    /// name (a free name) or replace the scan's object: a window of one
    /// request that the apply, which has no "must not exist" precondition,
    /// cannot close. Deletes have no such window (see [`delete_owned`]).
    pub(super) async fn apply(&self, api: &Api<K>, object: &K) -> Result<(), Error> {
        api.patch(&self.name, &apply_params(), &Patch::Apply(object))
            .await?;
        Ok(())
    }
}

impl<K: Child> Mine<K> {
    /// [`Mine::apply`], unless the object is exactly as this operator last
    /// applied it: the same desired object, and nobody changed it since
    /// (its version, the generation or else the resourceVersion, is the one
    /// that apply gave it). A reconcile of a scan whose children are as
    /// they should be writes nothing. Returns the object as it is now.
    pub(super) async fn apply_changed(
        &self,
        api: &Api<K>,
        object: &K,
        scan: &BucketScan,
        ctx: &Context,
    ) -> Result<K, Error> {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        serde_json::to_string(object).unwrap_or_default().hash(&mut h);
        let wanted = h.finish();
        let child = format!("{}/{}", K::kind(&()), self.name);
        let version = |o: &K| {
            let meta = o.meta();
            meta.generation
                .map(|g| format!("g{g}"))
                .or_else(|| meta.resource_version.clone())
                .unwrap_or_default()
        };
        if let Some(current) = &self.object {
            let applied = ctx.applied.lock().expect("lock");
            let last = applied.get(&key_of(scan)).and_then(|c| c.get(&child));
            if last == Some(&(wanted, version(current))) {
                return Ok(current.clone());
            }
        }
        let now = api
            .patch(&self.name, &apply_params(), &Patch::Apply(object))
            .await?;
        ctx.applied
            .lock()
            .expect("lock")
            .entry(key_of(scan))
            .or_default()
            .insert(child, (wanted, version(&now)));
        Ok(now)
    }
}

/// Delete the scan's child `name` if there is one. `Ok(false)`: the name
/// was free. A foreign object is [`Error::NotOwned`] and stays.
pub(super) async fn delete<K: Child>(
    api: &Api<K>,
    scan: &BucketScan,
    name: &str,
    params: &DeleteParams,
) -> Result<bool, Error> {
    match get(api, scan, name).await?.object {
        Some(object) => delete_owned(api, scan, &object, params).await,
        None => Ok(false),
    }
}

/// Delete `object`, read a moment ago, when it is the scan's: only that very
/// object (its uid is the delete's precondition). `Ok(false)`: it was gone
/// already. An object that took its name since stays ([`Error::NotOwned`]).
pub(super) async fn delete_owned<K: Child>(
    api: &Api<K>,
    scan: &BucketScan,
    object: &K,
    params: &DeleteParams,
) -> Result<bool, Error> {
    let name = object.name_any();
    let uid = object.uid();
    if holder(object.meta(), &scan.uid().unwrap_or_default()) == Holder::Foreign || uid.is_none() {
        return Err(not_owned::<K>(scan, &name));
    }
    let params = params.clone().preconditions(Preconditions {
        uid,
        resource_version: None,
    });
    match api.delete(&name, &params).await {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(false),
        // The precondition failed: the name holds another object now.
        Err(kube::Error::Api(e)) if e.code == 409 => Err(not_owned::<K>(scan, &name)),
        Err(e) => Err(e.into()),
    }
}

/// For teardown (a scan that ended): a name another workload holds is no
/// concern of a scan that no longer needs it, so it is left as it is.
pub(super) fn unless_foreign<T: Default>(scan: &BucketScan, result: Result<T, Error>) -> Result<T, Error> {
    match result {
        Err(Error::NotOwned { kind, name, .. }) => {
            tracing::debug!(scan = %scan.name_any(), %kind, %name, "not the scan's: left alone");
            Ok(T::default())
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
    use std::collections::BTreeMap;

    fn owner(uid: &str, controller: Option<bool>) -> OwnerReference {
        OwnerReference {
            api_version: "bucketscan.dev/v1alpha1".into(),
            kind: "BucketScan".into(),
            name: "celery".into(),
            uid: uid.into(),
            controller,
            block_owner_deletion: Some(true),
        }
    }

    fn meta(owners: Vec<OwnerReference>, annotated: Option<&str>) -> ObjectMeta {
        ObjectMeta {
            name: Some("celery-workers".into()),
            owner_references: Some(owners).filter(|o| !o.is_empty()),
            annotations: annotated.map(|uid| BTreeMap::from([(SCAN_UID.to_string(), uid.to_string())])),
            ..ObjectMeta::default()
        }
    }

    #[test]
    fn only_the_scan_s_own_objects_are_its() {
        let uid = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0";
        // What the operator makes: a controller reference to the scan.
        assert_eq!(
            holder(&meta(vec![owner(uid, Some(true))], None), uid),
            Holder::Scan
        );
        // The delete-parts Job outlives the scan: no owner, its annotation.
        assert_eq!(holder(&meta(vec![], Some(uid)), uid), Holder::Scan);
        // Another team's Deployment of that name, without any owner.
        assert_eq!(holder(&meta(vec![], None), uid), Holder::Foreign);
        // Another controller's object, or an earlier scan of the same name.
        assert_eq!(
            holder(&meta(vec![owner("other", Some(true))], None), uid),
            Holder::Foreign
        );
        assert_eq!(holder(&meta(vec![], Some("earlier")), uid), Holder::Foreign);
        // A controller reference decides over the annotation, and a
        // reference that is not the controller's claims nothing.
        assert_eq!(
            holder(&meta(vec![owner("other", Some(true))], Some(uid)), uid),
            Holder::Foreign
        );
        assert_eq!(holder(&meta(vec![owner(uid, None)], None), uid), Holder::Foreign);
        assert_eq!(
            holder(&meta(vec![owner(uid, Some(false))], None), uid),
            Holder::Foreign
        );
        // A scan the API server gave no uid yet owns nothing.
        assert_eq!(
            holder(&meta(vec![owner("", Some(true))], None), ""),
            Holder::Foreign
        );
    }

    #[test]
    fn a_foreign_object_is_named_by_kind_name_and_the_scan_s_namespace_only() {
        let mut scan = BucketScan::new("celery", Default::default());
        scan.metadata.namespace = Some("team-a".into());
        let e = not_owned::<k8s_openapi::api::apps::v1::Deployment>(&scan, "celery-workers");
        assert_eq!(e.kind(), "conflict");
        assert_eq!(
            e.to_string(),
            "Deployment celery-workers in namespace team-a exists and is not this scan's"
        );
        let left: Result<bool, Error> = unless_foreign(&scan, Err(e));
        assert!(!left.unwrap());
    }
}
