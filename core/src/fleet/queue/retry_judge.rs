//! Judging a retry step in Rust, before `retry.lua` writes: the manifest
//! the scan's merge stored in `meta` says whether it is of the round Redis
//! holds, of a release with retries, and whether anything is left to scan
//! again (dead shards, error records). The scan's own Redis user can write
//! that manifest and call the step's function, so no JSON is decoded in
//! Redis (a crafted document of megabytes would hold the server and its
//! memory for every tenant; docs/threat-model.md T16): it is parsed here,
//! into a few numbers (every other field skipped, nothing of it kept), and
//! the step only compares the round and the manifest's SHA-1 with what was
//! judged.
//!
//! Owns [`Retried`], what a retry did (re-exported by `queue`).
//!
//! May import: nothing of `queue` (it imports this).

use serde::Deserialize;
use sha1::{Digest, Sha1};

/// What a retry did (see `Queue::retry`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Retried {
    /// These shards are pending again; the scan is not merged any more.
    Requeued { shards: u64 },
    /// Redis holds this round (or a later one) already: nothing changed.
    Applied { round: u64 },
    /// The scan has no manifest in Redis: it is not merged (still running,
    /// or Redis lost it).
    NotMerged,
    /// No shard is dead or holds error records: nothing to scan again.
    NothingToRetry,
    /// The scan's state in Redis is beyond what one retry step walks (more
    /// shards, or shard records with more fields, than any plan makes):
    /// nothing changed.
    TooLarge,
    /// Merged by a release before retries, whose merge deleted every part:
    /// a new merge could not read the other shards' records.
    PartsGone,
}

/// The fields of a merge's manifest a retry looks at; the others are
/// skipped unread by the parser (no tree of them is built).
#[derive(Deserialize)]
struct RetryView {
    #[serde(default)]
    retries: u64,
    #[serde(default)]
    shards_dead: u64,
    #[serde(default)]
    counts: CountsView,
}

#[derive(Default, Deserialize)]
struct CountsView {
    #[serde(default)]
    errors: u64,
}

/// What a retry to `round` does, judged from the manifest and the round
/// Redis held at one instant: an answer (nothing to write), or `Walk`, the
/// step's arguments for `retry.lua` to requeue the shards.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Judged {
    Answer(Retried),
    Walk { held: u64, manifest_sha1: String },
}

pub(super) fn judge(round: u64, held: u64, manifest: Option<&str>) -> Judged {
    if held >= round {
        return Judged::Answer(Retried::Applied { round: held });
    }
    let Some(manifest) = manifest.filter(|m| !m.is_empty()) else {
        return Judged::Answer(Retried::NotMerged);
    };
    // Manifests of a release before retries have no such field (their
    // merge deleted every part, so a new merge could not read the others).
    if !manifest.contains("\"retries\":") {
        return Judged::Answer(Retried::PartsGone);
    }
    let Ok(view) = serde_json::from_str::<RetryView>(manifest) else {
        return Judged::Answer(Retried::NotMerged);
    };
    // A manifest an earlier round's merge wrote after a retry: not this
    // round's merged state.
    if view.retries != held {
        return Judged::Answer(Retried::NotMerged);
    }
    // Judged by the manifest too: one of a later round adopted from S3
    // after a rollback says nothing is left while the shards' records are
    // the earlier round's.
    if view.shards_dead == 0 && view.counts.errors == 0 {
        return Judged::Answer(Retried::NothingToRetry);
    }
    Judged::Walk {
        held,
        manifest_sha1: hex::encode(Sha1::digest(manifest.as_bytes())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn walks(judged: Judged) -> bool {
        matches!(judged, Judged::Walk { .. })
    }

    #[test]
    fn a_manifest_of_the_held_round_with_dead_shards_or_errors_is_walked() {
        let dead = r#"{"retries": 1, "shards_dead": 2, "counts": {"objects": 5}}"#;
        let errors = r#"{"retries": 1, "shards_dead": 0, "counts": {"errors": 3}}"#;
        assert!(walks(judge(2, 1, Some(dead))));
        assert!(walks(judge(2, 1, Some(errors))));
        let Judged::Walk { manifest_sha1, .. } = judge(2, 1, Some(dead)) else {
            unreachable!()
        };
        // What Redis's redis.sha1hex gives for the same text.
        assert_eq!(manifest_sha1.len(), 40);
        assert_eq!(
            hex::encode(Sha1::digest(b"abc")),
            "a9993e364706816aba3e25717850c26c9cd0d89d"
        );
    }

    #[test]
    fn everything_else_is_answered_without_a_write() {
        let clean = r#"{"retries": 0, "shards_dead": 0, "counts": {"errors": 0}}"#;
        let earlier = r#"{"retries": 0, "shards_dead": 1}"#;
        let old = r#"{"shards_dead": 1}"#;
        assert_eq!(
            judge(1, 1, Some(clean)),
            Judged::Answer(Retried::Applied { round: 1 })
        );
        assert_eq!(judge(1, 0, None), Judged::Answer(Retried::NotMerged));
        assert_eq!(judge(1, 0, Some("")), Judged::Answer(Retried::NotMerged));
        assert_eq!(judge(1, 0, Some(clean)), Judged::Answer(Retried::NothingToRetry));
        assert_eq!(judge(2, 1, Some(earlier)), Judged::Answer(Retried::NotMerged));
        assert_eq!(judge(1, 0, Some(old)), Judged::Answer(Retried::PartsGone));
        assert_eq!(
            judge(1, 0, Some(r#"{"retries": 0, "shards_dead": [1]}"#)),
            Judged::Answer(Retried::NotMerged)
        );
    }

    /// The padding a hostile tenant would send Redis's decoder is skipped
    /// here, quickly and without building it.
    #[test]
    fn padding_is_skipped() {
        let pad = "[],".repeat(2_000_000);
        let manifest = format!(r#"{{"retries":0,"pad":[{pad}[]],"shards_dead":1}}"#);
        let started = std::time::Instant::now();
        assert!(walks(judge(1, 0, Some(&manifest))));
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
    }
}
