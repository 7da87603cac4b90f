//! Whether a finished scan may be retried in place (`spec.retry`): the one
//! rule the operator acts on and the kubectl plugin checks before it asks.
//!
//! May import: `crd`, `conditions`, `retry`.

use crate::conditions::FAILED;
use crate::crd::{BucketScanStatus, Phase};
use crate::retry::SHARDS_FAILED;

/// Whether a finished scan's status allows a retry: merged, with missing
/// ranges or error records.
pub fn retriable(st: &BucketScanStatus) -> Result<(), String> {
    let reason = |type_: &str| {
        st.conditions
            .iter()
            .find(|c| c.type_ == type_ && c.status == "True")
            .map(|c| c.reason.clone())
    };
    let missing = st.missing_ranges.unwrap_or(0);
    let errors = st.objects.as_ref().map_or(0, |o| o.errors);
    match st.phase {
        Phase::Failed if reason(FAILED).as_deref() == Some(SHARDS_FAILED) => Ok(()),
        Phase::Failed => Err(format!(
            "the scan failed with reason {} before a result was merged; a retry scans again only dead shards \
             and error records of a merged scan: fix the cause and create a new scan (kubectl bucketscan rerun)",
            reason(FAILED).unwrap_or_else(|| "unknown".into())
        )),
        Phase::Complete if missing > 0 || errors > 0 => Ok(()),
        Phase::Complete => Err("the scan is Complete without missing ranges or error records: nothing to retry".into()),
        _ => Err("the scan is still running: a retry is for a finished scan".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::ObjectCounts;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

    fn ended(phase: Phase, failed_reason: Option<&str>, missing: u64, errors: u64) -> BucketScanStatus {
        BucketScanStatus {
            phase,
            missing_ranges: (missing > 0).then_some(missing),
            objects: Some(ObjectCounts {
                errors,
                ..Default::default()
            }),
            conditions: failed_reason
                .map(|reason| Condition {
                    type_: FAILED.into(),
                    status: "True".into(),
                    reason: reason.into(),
                    message: String::new(),
                    last_transition_time: Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH),
                    observed_generation: None,
                })
                .into_iter()
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn only_a_merged_scan_with_missing_ranges_or_error_records_may_be_retried() {
        assert!(retriable(&ended(Phase::Failed, Some(SHARDS_FAILED), 2, 0)).is_ok());
        assert!(retriable(&ended(Phase::Complete, None, 1, 0)).is_ok());
        assert!(retriable(&ended(Phase::Complete, None, 0, 3)).is_ok());
        for (st, words) in [
            (ended(Phase::Complete, None, 0, 0), "nothing to retry"),
            (ended(Phase::Scanning, None, 0, 0), "still running"),
            (ended(Phase::Merging, None, 0, 0), "still running"),
            (
                ended(Phase::Failed, Some("DeadlineExceeded"), 0, 0),
                "reason DeadlineExceeded",
            ),
        ] {
            let e = retriable(&st).unwrap_err();
            assert!(e.contains(words), "{e}");
        }
    }
}
