//! `kubectl bucketscan retry` and `rerun`: a finished scan scanned again.
//! `retry` raises spec.retry, which the operator acts on in place (only the
//! dead shards' ranges and the shards holding error records are scanned
//! again, then merged again; docs/operations.md). `rerun` creates a new
//! BucketScan from a finished scan's spec, incremental against it when it is
//! a complete result. The decisions (`retry_to`, `rerun_of`) are pure and
//! unit-tested; `retry` and `rerun` send them.
//!
//! May import: error, fetch

use crate::error::Error;
use crate::fetch;
use bucketscan_api::crd::{Baseline, BucketScan, Phase};
use bucketscan_api::retriable::retriable;
use bucketscan_api::schedule::SCHEDULE_LABEL;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use std::collections::BTreeMap;

/// The annotation of a rerun naming the scan it was made from.
pub const RERUN_OF: &str = "bucketscan.dev/rerun-of";

/// A scan's name is a label value of its pods: 63 characters at most.
const MAX_NAME: usize = 63;

/// The spec.retry that asks for one more retry of `scan`, or why none may
/// be asked for.
pub fn retry_to(scan: &BucketScan) -> Result<u32, String> {
    let st = scan.status.clone().unwrap_or_default();
    let asked = scan.spec.retry.unwrap_or(0);
    if asked > st.retries.unwrap_or(0) {
        return Err(format!(
            "retry {asked} is asked for already and the operator has not acted on it yet"
        ));
    }
    retriable(&st)?;
    Ok(asked.max(st.retries.unwrap_or(0)) + 1)
}

/// Ask the operator to retry the scan in place; the message says what.
pub async fn retry(client: &Client, namespace: &str, name: &str) -> Result<String, Error> {
    let scan = fetch::get(client, namespace, name).await?;
    let round = retry_to(&scan).map_err(|why| Error::Refused {
        name: name.to_string(),
        what: "retry",
        why,
    })?;
    // The resourceVersion makes it a compare-and-set: two retries at once
    // ask for one round, not two.
    let patch = serde_json::json!({
        "metadata": {"resourceVersion": scan.resource_version()},
        "spec": {"retry": round},
    });
    fetch::api(client, namespace)
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    let st = scan.status.unwrap_or_default();
    Ok(format!(
        "bucketscan {name:?}: retry {round} asked for ({} missing key ranges, {} error records): the operator \
         scans them again and merges again; follow it with kubectl bucketscan watch {name}",
        st.missing_ranges.unwrap_or(0),
        st.objects.map_or(0, |o| o.errors)
    ))
}

/// The new scan a rerun of `scan` creates, named `name`, and a note when it
/// cannot be incremental. Refused while `scan` runs.
pub fn rerun_of(scan: &BucketScan, name: &str) -> Result<(BucketScan, Option<String>), String> {
    let st = scan.status.clone().unwrap_or_default();
    let old = scan.name_any();
    if !matches!(st.phase, Phase::Complete | Phase::Failed) {
        return Err(format!(
            "it is {:?}: a rerun starts from a finished scan (wait for it: kubectl bucketscan watch {old})",
            st.phase
        ));
    }
    let mut spec = scan.spec.clone();
    spec.retry = None;
    spec.suspend = false;
    let complete =
        st.phase == Phase::Complete && st.missing_ranges.unwrap_or(0) == 0 && st.manifest.is_some();
    let note = if complete {
        spec.baseline = Some(Baseline {
            scan: Some(old.clone()),
            manifest: None,
        });
        None
    } else {
        spec.baseline = None;
        Some(format!(
            "{old} is not a complete result ({}): the new scan is a full scan, not incremental",
            match st.phase {
                Phase::Complete => "key ranges are missing",
                _ => "it failed",
            }
        ))
    };
    // Its own output prefix, as a schedule's runs have: the baseline's
    // result must stay as it is while the new scan reads it.
    if let Some(prefix) = spec
        .output
        .prefix
        .as_deref()
        .filter(|p| !p.trim_matches('/').is_empty())
    {
        let trimmed = prefix.trim_end_matches('/');
        let parent = match trimmed.rsplit_once('/') {
            Some((parent, last)) if last == old => Some(parent),
            None if trimmed == old => Some(""),
            _ => None,
        };
        spec.output.prefix = Some(match parent {
            Some("") => format!("{name}/"),
            Some(parent) => format!("{parent}/{name}/"),
            None => format!("{trimmed}/{name}/"),
        });
    }
    let labels: BTreeMap<String, String> = scan
        .labels()
        .iter()
        .filter(|(k, _)| k.as_str() != SCHEDULE_LABEL)
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let new = BucketScan {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: scan.namespace(),
            labels: (!labels.is_empty()).then_some(labels),
            annotations: Some(BTreeMap::from([(RERUN_OF.to_string(), old)])),
            ..ObjectMeta::default()
        },
        spec,
        status: None,
    };
    Ok((new, note))
}

/// `NAME-rerun-XXXXX` (five base-36 characters from the clock), the name
/// cut so the whole fits 63 characters; a rerun of a rerun replaces the
/// suffix instead of adding one.
pub fn rerun_name(old: &str, nanos: u128) -> String {
    let base = match old.rsplit_once("-rerun-") {
        Some((base, tail)) if tail.len() == 5 => base,
        _ => old,
    };
    let mut suffix = String::new();
    let mut n = nanos;
    for _ in 0..5 {
        suffix.push(char::from_digit((n % 36) as u32, 36).expect("below 36"));
        n /= 36;
    }
    let room = MAX_NAME - "-rerun-".len() - suffix.len();
    let base = base[..base.len().min(room)].trim_end_matches(['-', '.']);
    format!("{base}-rerun-{suffix}")
}

/// Create the rerun of scan `name`; returns the new scan's name and a note.
pub async fn rerun(client: &Client, namespace: &str, name: &str) -> Result<(String, Option<String>), Error> {
    let scan = fetch::get(client, namespace, name).await?;
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() / 1000)
        .unwrap_or_default();
    let new_name = rerun_name(name, nanos);
    let (new, note) = rerun_of(&scan, &new_name).map_err(|why| Error::Refused {
        name: name.to_string(),
        what: "rerun",
        why,
    })?;
    fetch::api(client, namespace)
        .create(&PostParams::default(), &new)
        .await?;
    Ok((new_name, note))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scan(status: serde_json::Value, prefix: Option<&str>) -> BucketScan {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "bucketscan.dev/v1alpha1", "kind": "BucketScan",
            "metadata": {"name": "nightly", "namespace": "team", "labels": {"team": "a", SCHEDULE_LABEL: "s"}},
            "spec": {"source": {"bucket": "photos"}, "output": {"bucket": "out", "prefix": prefix}, "retry": 1},
            "status": status,
        }))
        .unwrap()
    }

    #[test]
    fn a_retry_asks_for_the_next_round_of_a_retriable_scan_only() {
        let partial = serde_json::json!({"phase": "Complete", "missingRanges": 2, "retries": 1,
                                         "manifest": "s3://out/m"});
        assert_eq!(retry_to(&scan(partial, None)), Ok(2));
        let asked = serde_json::json!({"phase": "Complete", "missingRanges": 2, "retries": 0});
        assert!(retry_to(&scan(asked, None))
            .unwrap_err()
            .contains("not acted on it yet"));
        let clean = serde_json::json!({"phase": "Complete", "retries": 1});
        assert!(retry_to(&scan(clean, None))
            .unwrap_err()
            .contains("nothing to retry"));
        let running = serde_json::json!({"phase": "Scanning", "retries": 1});
        assert!(retry_to(&scan(running, None))
            .unwrap_err()
            .contains("still running"));
    }

    #[test]
    fn a_rerun_of_a_complete_scan_is_incremental_against_it_with_its_own_prefix() {
        let done = serde_json::json!({"phase": "Complete", "manifest": "s3://out/inv/nightly/manifest.json"});
        let (new, note) = rerun_of(&scan(done.clone(), Some("inv/nightly/")), "nightly-rerun-abcde").unwrap();
        assert_eq!(note, None);
        assert_eq!(
            new.spec.baseline.as_ref().unwrap().scan.as_deref(),
            Some("nightly")
        );
        assert_eq!(
            new.spec.output.prefix.as_deref(),
            Some("inv/nightly-rerun-abcde/")
        );
        assert_eq!(new.spec.retry, None);
        assert_eq!(new.labels().get("team").map(String::as_str), Some("a"));
        assert!(!new.labels().contains_key(SCHEDULE_LABEL));
        assert_eq!(new.annotations()[RERUN_OF], "nightly");
        let (other, _) = rerun_of(&scan(done.clone(), Some("inv")), "n2").unwrap();
        assert_eq!(other.spec.output.prefix.as_deref(), Some("inv/n2/"));
        let (default, _) = rerun_of(&scan(done, None), "n2").unwrap();
        assert_eq!(default.spec.output.prefix, None);
    }

    #[test]
    fn a_rerun_of_a_partial_or_failed_scan_is_a_full_scan_and_of_a_running_one_refused() {
        let partial = serde_json::json!({"phase": "Complete", "missingRanges": 1, "manifest": "s3://o/m"});
        let (new, note) = rerun_of(&scan(partial, None), "n2").unwrap();
        assert_eq!(new.spec.baseline, None);
        assert!(note.unwrap().contains("key ranges are missing"));
        let (_, note) = rerun_of(&scan(serde_json::json!({"phase": "Failed"}), None), "n2").unwrap();
        assert!(note.unwrap().contains("it failed"));
        let e = rerun_of(&scan(serde_json::json!({"phase": "Merging"}), None), "n2").unwrap_err();
        assert!(e.contains("Merging"), "{e}");
    }

    #[test]
    fn rerun_names_fit_a_label_and_do_not_grow() {
        let name = rerun_name("nightly", 0);
        assert_eq!(name, "nightly-rerun-00000");
        assert_eq!(rerun_name(&name, 35), "nightly-rerun-z0000");
        let long = "a".repeat(63);
        assert_eq!(rerun_name(&long, 1).len(), 63);
    }
}
