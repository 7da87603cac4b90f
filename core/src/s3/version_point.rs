//! Where a `--versions` listing resumes inside a key: after one version of
//! it, named so that the entry found again is the one written.
//!
//! A version id names one entry for good, except `null`: under suspended
//! versioning a PUT or a DELETE of a key removes its `null` version (or
//! `null` delete marker) and puts a new `null` entry on top of the key's
//! versions. Resuming after "`null`" would then find the new entry, above
//! the versions already written after the old one, and list them again. So
//! the point after a `null` entry also carries what tells that entry from a
//! later one: whether it is a delete marker, its LastModified (to the
//! second: a HEAD says no more, a listing may) and its ETag. Every other id
//! is unique within its key and never reused (AWS: a version id is assigned
//! once per PUT, and only `null` is ever given again), so it stays alone.
//!
//! Encoded (the version half of a fleet checkpoint `KEY\0…`, and the engine's
//! `after_version`): an id as it is; a `null` entry as `null`, then its
//! fields, each after a U+0001. No field holds U+0001 or NUL: version ids,
//! times and ETags come in S3's XML, and XML 1.0 cannot carry either (not
//! even as a character reference), so a real id never looks like an encoded
//! `null` entry and a checkpoint's last NUL still ends its key. A bare
//! `null` (checkpoints written before this) matches any `null` entry, as it
//! did.
//!
//! May import: `types` (a listed version).

use super::types::ListedVersion;

/// The version id of an object written while versioning was off or
/// suspended.
pub const NULL_VERSION: &str = "null";

/// Between the fields of an encoded `null` entry.
const FIELD: char = '\u{1}';

/// One version of a key that a listing resumes after.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VersionPoint {
    pub version_id: String,
    /// The `null` version only: which `null` entry (`None`: any, for a
    /// point written before entries were told apart).
    pub null_entry: Option<NullEntry>,
}

/// What tells one `null` entry of a key from a later one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NullEntry {
    pub is_delete_marker: bool,
    /// LastModified to the second (`YYYY-MM-DDTHH:MM:SS`); empty if unknown.
    pub modified: String,
    /// The ETag without quotes; empty for a delete marker or if unknown.
    pub etag: String,
}

impl VersionPoint {
    /// The point after one entry, from what its record says of it.
    pub fn of(
        version_id: &str,
        is_delete_marker: bool,
        last_modified: Option<&str>,
        etag: Option<&str>,
    ) -> Self {
        let null_entry = (version_id == NULL_VERSION).then(|| NullEntry {
            is_delete_marker,
            modified: last_modified.map(to_the_second).unwrap_or_default().to_string(),
            etag: etag.map(unquoted).unwrap_or_default().to_string(),
        });
        VersionPoint {
            version_id: version_id.to_string(),
            null_entry,
        }
    }

    pub fn encode(&self) -> String {
        match &self.null_entry {
            None => self.version_id.clone(),
            Some(e) => {
                let kind = if e.is_delete_marker { "marker" } else { "version" };
                format!(
                    "{}{FIELD}{kind}{FIELD}{}{FIELD}{}",
                    self.version_id, e.modified, e.etag
                )
            }
        }
    }

    /// Read an encoded point. Anything else is taken as an id: one that is
    /// not listed, so the resume fails as for a version gone, never
    /// resuming at a place it cannot name.
    pub fn parse(text: &str) -> Self {
        let as_id = || VersionPoint {
            version_id: text.to_string(),
            null_entry: None,
        };
        let Some(fields) = text
            .strip_prefix(NULL_VERSION)
            .and_then(|rest| rest.strip_prefix(FIELD))
        else {
            return as_id();
        };
        let mut fields = fields.splitn(3, FIELD);
        let (Some(kind), Some(modified), Some(etag)) = (fields.next(), fields.next(), fields.next()) else {
            return as_id();
        };
        let is_delete_marker = match kind {
            "marker" => true,
            "version" => false,
            _ => return as_id(),
        };
        VersionPoint {
            version_id: NULL_VERSION.to_string(),
            null_entry: Some(NullEntry {
                is_delete_marker,
                modified: modified.to_string(),
                etag: etag.to_string(),
            }),
        }
    }

    /// Is `listed` the entry this point names? A field either side does
    /// not know is not held against it.
    pub fn names(&self, listed: &ListedVersion) -> bool {
        if listed.version_id != self.version_id {
            return false;
        }
        let Some(entry) = &self.null_entry else {
            return true;
        };
        let agree = |ours: &str, theirs: &str| ours.is_empty() || theirs.is_empty() || ours == theirs;
        let object = &listed.object;
        entry.is_delete_marker == listed.is_delete_marker
            && agree(
                &entry.modified,
                object
                    .last_modified
                    .as_deref()
                    .map(to_the_second)
                    .unwrap_or_default(),
            )
            && agree(
                &entry.etag,
                object.etag.as_deref().map(unquoted).unwrap_or_default(),
            )
    }
}

/// An RFC 3339 time to the second: a listing may say milliseconds, a HEAD's
/// `Last-Modified` says seconds (both cut, not rounded). Other forms are
/// kept whole.
fn to_the_second(time: &str) -> &str {
    match time.get(..19) {
        Some(second) if time.as_bytes()[10] == b'T' => second,
        _ => time,
    }
}

fn unquoted(etag: &str) -> &str {
    etag.trim_matches('"')
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::s3::types::ListedObject;

    fn listed(version_id: &str, is_delete_marker: bool, modified: &str, etag: Option<&str>) -> ListedVersion {
        ListedVersion {
            object: ListedObject {
                key: "K".into(),
                last_modified: Some(modified.into()),
                etag: etag.map(str::to_string),
                ..ListedObject::default()
            },
            version_id: version_id.into(),
            is_latest: true,
            is_delete_marker,
        }
    }

    #[test]
    fn an_id_other_than_null_is_its_own_point() {
        let p = VersionPoint::of("3HL4kqtJ", false, Some("2026-11-27T14:26:53Z"), Some("\"e\""));
        assert_eq!(p.encode(), "3HL4kqtJ");
        assert_eq!(VersionPoint::parse("3HL4kqtJ"), p);
        assert!(p.names(&listed(
            "3HL4kqtJ",
            false,
            "2020-01-01T00:00:00.000Z",
            Some("other")
        )));
    }

    #[test]
    fn a_null_entry_round_trips_with_what_tells_it_apart() {
        for (marker, etag) in [(false, Some("\"abc-2\"")), (true, None)] {
            let p = VersionPoint::of("null", marker, Some("2026-11-27T14:26:53Z"), etag);
            let text = p.encode();
            assert!(text.starts_with("null\u{1}") && !text.contains('\0'), "{text:?}");
            assert_eq!(VersionPoint::parse(&text), p);
            let entry = p.null_entry.as_ref().unwrap();
            assert_eq!(entry.modified, "2026-11-27T14:26:53");
            assert_eq!(entry.etag, etag.map_or("", |_| "abc-2"));
        }
    }

    #[test]
    fn a_null_entry_names_only_itself() {
        let p = VersionPoint::of("null", false, Some("2026-11-27T14:26:53Z"), Some("\"e1\""));
        // The listing's milliseconds and quotes are not a difference.
        assert!(p.names(&listed("null", false, "2026-11-27T14:26:53.481Z", Some("\"e1\""))));
        assert!(!p.names(&listed("null", false, "2026-11-27T14:26:54.000Z", Some("\"e1\""))));
        assert!(!p.names(&listed("null", false, "2026-11-27T14:26:53.000Z", Some("\"e2\""))));
        assert!(!p.names(&listed("null", true, "2026-11-27T14:26:53.000Z", None)));
        assert!(!p.names(&listed("v1", false, "2026-11-27T14:26:53.000Z", Some("\"e1\""))));
    }

    #[test]
    fn a_bare_null_names_any_null_entry() {
        let p = VersionPoint::parse("null");
        assert_eq!(p.null_entry, None);
        assert!(p.names(&listed("null", true, "2026-11-27T14:26:53.000Z", None)));
    }

    #[test]
    fn a_malformed_null_entry_names_nothing_listed() {
        for text in [
            "null\u{1}",
            "null\u{1}version\u{1}t",
            "null\u{1}other\u{1}t\u{1}e",
        ] {
            let p = VersionPoint::parse(text);
            assert_eq!(p.version_id, text);
            assert!(!p.names(&listed("null", false, "t", Some("e"))), "{text:?}");
        }
    }
}
