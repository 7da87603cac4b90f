//! What a distributed scan is: stored once in Redis when the scan is planned,
//! read by every worker and by the merge, so workers need only the Redis URL,
//! the scan id and the endpoint.
//!
//! May import: `keyspace` only.

use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ScanSpec {
    pub bucket: String,
    #[serde(default)]
    pub prefix: String,
    /// Where parts and the merged result go: `s3://{output_bucket}/{output_prefix}...`.
    pub output_bucket: String,
    #[serde(default)]
    pub output_prefix: String,
    #[serde(default)]
    pub gzip: bool,
    #[serde(default)]
    pub only_with_metadata: bool,
    /// A shard that failed this many times is dead-lettered.
    pub max_failures: u32,
}

/// An output prefix as the scan uses it: every non-empty prefix ends with `/`,
/// so `s3://results/photos` and `s3://results/photos/` are the same place
/// (the parts go to `photos/parts/`, never to `photosparts/`).
pub fn normalize_output_prefix(prefix: &str) -> String {
    if prefix.is_empty() || prefix.ends_with('/') {
        prefix.to_string()
    } else {
        format!("{prefix}/")
    }
}

/// Whether two key ranges given by their prefixes share any key: one prefix
/// starts with the other (the empty prefix, a whole bucket, shares with all).
pub fn prefixes_overlap(a: &str, b: &str) -> bool {
    a.starts_with(b) || b.starts_with(a)
}

impl ScanSpec {
    fn extension(&self) -> &'static str {
        if self.gzip {
            "jsonl.gz"
        } else {
            "jsonl"
        }
    }

    /// The key of one output part: the part of shard `shard_id` that lease
    /// `token` wrote after `resume_after` (none: from the shard's start). The
    /// same attempt resuming from the same point writes the same key; a part
    /// of an attempt that died before recording it is never read by the merge
    /// (which reads only recorded parts) and is deleted with the rest.
    pub fn part_key(&self, shard_id: &str, token: u64, resume_after: Option<&str>) -> String {
        let segment = match resume_after {
            None => "start".to_string(),
            Some(after) => crate::keyspace::shard::Shard::prefix(after).id(),
        };
        format!(
            "{}parts/{shard_id}/{token}-{segment}.{}",
            self.output_prefix,
            self.extension()
        )
    }

    /// The record of a finished shard (see `recovery`).
    pub fn done_key(&self, shard_id: &str) -> String {
        format!("{}parts/{shard_id}/done.json", self.output_prefix)
    }

    pub fn parts_prefix(&self) -> String {
        format!("{}parts/", self.output_prefix)
    }

    /// The merged result.
    pub fn result_key(&self) -> String {
        format!("{}result.{}", self.output_prefix, self.extension())
    }

    pub fn manifest_key(&self) -> String {
        format!("{}manifest.json", self.output_prefix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_prefixes_end_with_a_slash() {
        assert_eq!(normalize_output_prefix(""), "");
        assert_eq!(normalize_output_prefix("photos"), "photos/");
        assert_eq!(normalize_output_prefix("photos/"), "photos/");
        assert_eq!(normalize_output_prefix("a/b"), "a/b/");
    }

    #[test]
    fn prefixes_overlap_when_one_contains_the_other() {
        assert!(prefixes_overlap("a/", "a/b/"));
        assert!(prefixes_overlap("a/b/", "a/"));
        assert!(prefixes_overlap("", "x/"));
        assert!(prefixes_overlap("a/", "a/"));
        assert!(!prefixes_overlap("a/", "b/"));
        assert!(!prefixes_overlap("a/b/", "a/c/"));
    }

    #[test]
    fn part_keys_are_deterministic_per_resume_point() {
        let spec = ScanSpec {
            bucket: "b".into(),
            prefix: String::new(),
            output_bucket: "o".into(),
            output_prefix: "scans/1/".into(),
            gzip: true,
            only_with_metadata: false,
            max_failures: 3,
        };
        assert_eq!(
            spec.part_key("abc", 1, None),
            "scans/1/parts/abc/1-start.jsonl.gz"
        );
        assert_eq!(
            spec.part_key("abc", 2, Some("k1")),
            spec.part_key("abc", 2, Some("k1"))
        );
        assert_ne!(
            spec.part_key("abc", 2, Some("k1")),
            spec.part_key("abc", 2, Some("k2"))
        );
        assert_ne!(
            spec.part_key("abc", 2, Some("k1")),
            spec.part_key("abc", 3, Some("k1"))
        );
        assert!(spec
            .part_key("abc", 1, Some("k1"))
            .starts_with(&spec.parts_prefix()));
        assert_eq!(spec.result_key(), "scans/1/result.jsonl.gz");
    }
}
