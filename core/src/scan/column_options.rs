//! Which optional columns a scan fills, each at a cost: `checksums` (HEADs
//! in checksum mode), `tags` (a `GetObjectTagging` per object) and
//! `versions` (a record per version and delete marker). Recorded in the scan's spec and manifest: a baseline must have
//! been scanned with the same options (`baseline`).
//!
//! May import: nothing of the crate.

use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ColumnOptions {
    /// HEAD with `x-amz-checksum-mode: ENABLED`: the `checksum` column
    /// (and the algorithm and type where the listing did not say them).
    #[serde(default)]
    pub checksums: bool,
    /// `object_tags`: one `GetObjectTagging` more per object (none where
    /// MinIO's listing carries the tags and the metadata source allows it).
    #[serde(default)]
    pub tags: bool,
    /// Every version and delete marker (ListObjectVersions), one record
    /// each, with `version_id`, `is_latest` and `is_delete_marker`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub versions: bool,
}

impl ColumnOptions {
    /// The options as the CLI spells them, for messages: `--checksums
    /// --tags`, or `none`.
    pub fn describe(&self) -> String {
        let flags: Vec<&str> = [
            (self.checksums, "--checksums"),
            (self.tags, "--tags"),
            (self.versions, "--versions"),
        ]
        .into_iter()
        .filter_map(|(on, flag)| on.then_some(flag))
        .collect();
        if flags.is_empty() {
            "none".into()
        } else {
            flags.join(" ")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_read_as_none_when_absent_and_say_their_flags() {
        let none: ColumnOptions = serde_json::from_str("{}").unwrap();
        assert_eq!(none, ColumnOptions::default());
        assert_eq!(none.describe(), "none");
        let some = ColumnOptions {
            checksums: true,
            tags: true,
            versions: true,
        };
        assert_eq!(some.describe(), "--checksums --tags --versions");
        // Absent when off: specs and manifests of scans without versions
        // read as they did.
        assert_eq!(
            serde_json::to_string(&none).unwrap(),
            r#"{"checksums":false,"tags":false}"#
        );
    }
}
