//! What a scan says when shards died for good (`spec.onDeadShards`), the
//! ranges its result misses (`status.missing`), and how a finished scan is
//! asked to scan those again in place (`spec.retry`, which `kubectl
//! bucketscan retry` raises). docs/operations.md, "Partial results and retry".
//!
//! May import: nothing of the workspace.

use crate::conditions::FAILED;
use crate::crd::{BucketScanStatus, Phase};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The reason of the Complete condition of a scan that ended with dead
/// shards under `onDeadShards: Partial`.
pub const PARTIAL: &str = "Partial";
/// The reason of the Failed condition of a scan that ended with dead shards
/// under `onDeadShards: Fail`.
pub const SHARDS_FAILED: &str = "ShardsFailed";

/// The most missing ranges the status lists (`status.missingRanges` counts
/// them all; the manifest's `dead` lists every one).
pub const MISSING_LISTED: usize = 10;

/// What a scan with dead shards says once the rest of it is merged.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum OnDeadShards {
    /// Phase Failed, reason ShardsFailed (the result is written all the same).
    #[default]
    Fail,
    /// Phase Complete, Complete condition reason Partial.
    Partial,
}

/// A key range missing from the result: a shard that died for good.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub struct MissingRange {
    /// The shard's keys, as the manifest words them: `"PREFIX" after "A"
    /// before "E"`.
    #[schemars(length(max = 4096))]
    pub range: String,
    /// Its last error.
    #[schemars(length(max = 1024))]
    pub error: String,
}

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

/// Cut `text` to at most `max` bytes at a character boundary.
pub fn cut(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut end = max.saturating_sub(3);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &text[..end])
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
