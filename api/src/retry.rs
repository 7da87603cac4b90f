//! What a scan says when shards died for good (`spec.onDeadShards`), the
//! ranges its result misses (`status.missing`), and how a finished scan is
//! asked to scan those again in place (`spec.retry`, which `kubectl
//! bucketscan retry` raises). docs/operations.md, "Partial results and retry".
//!
//! Whether a scan may be retried: [`crate::retriable`].
//!
//! May import: nothing of the workspace.

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
