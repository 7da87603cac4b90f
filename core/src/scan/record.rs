//! The result format: one JSON object per line (JSON Lines). serde_json
//! escapes quotes, newlines and control characters, so any UTF-8 key and any
//! metadata value round-trips.
//!
//! May import: `s3::columns` (the columns a HEAD answers) and
//! `s3::version_point` (where a pass resumes after a version), nothing else of
//! the crate.

pub use crate::s3::columns::ObjectColumns;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// HEAD answered; the record is complete.
    Ok,
    /// Listed, then gone (404) by the time of the HEAD.
    Vanished,
    /// HEAD failed for good; `error` says why.
    Error,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Record {
    pub key: String,
    pub status: Status,
    pub size: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etag: Option<String>,
    /// RFC 3339, UTC.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_modified: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_class: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_type: Option<String>,
    /// User metadata without the `x-amz-meta-` prefix. Names are lower case:
    /// HTTP header names are case-insensitive and S3 stores them lower-cased.
    #[serde(default)]
    pub metadata: BTreeMap<String, String>,
    /// Names in `metadata` whose value was not UTF-8: it is the base64 of
    /// the bytes the store sent, so nothing is lost.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub binary_metadata: Vec<String>,
    /// How many metadata entries the store left out of its answer
    /// (`x-amz-missing-meta`): `metadata` is then incomplete.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub missing_metadata: Option<u32>,
    /// Encryption, checksum, multipart, object lock, replication, version,
    /// tags: fields of the record's JSON object like the others (each left
    /// out when unknown).
    #[serde(flatten)]
    pub columns: ObjectColumns,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The HTTP status of the failed HEAD, for `error` records that had one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http_status: Option<u16>,
    /// Change sets only (`changes/` of an incremental scan): what changed
    /// since the baseline. Never set in a result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub change: Option<ChangeKind>,
    /// Change sets only: the baseline's record of the object (none for an
    /// added one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous: Option<Box<Previous>>,
    /// The JSON line the record was read from (a JSON Lines baseline's), kept
    /// while the record is as it was read: written as it is, not encoded
    /// again. Whoever changes a field of such a record clears it.
    #[serde(skip)]
    pub verbatim: Verbatim,
}

/// The form of a record's JSON line (`Record`'s fields and how they are
/// written): recorded in every manifest, and a baseline's lines are written
/// again as they are only if its manifest says this form. Whoever changes
/// `Record`'s serialized form raises it.
pub const RECORD_FORMAT: u32 = 1;

/// A record's JSON line as it was read (without its newline), if it kept
/// it. Not part of what the record is: two records equal in every field
/// are equal whether either kept its line.
#[derive(Clone, Default)]
pub struct Verbatim {
    line: Option<Box<[u8]>>,
    /// Of a thin record ([`Record::thin_of_line`]): whether its line has
    /// user metadata (the record's `metadata` is not decoded).
    thin: Option<bool>,
}

impl Verbatim {
    pub fn of(line: &[u8]) -> Verbatim {
        Verbatim {
            line: Some(line.into()),
            thin: None,
        }
    }

    pub fn line(&self) -> Option<&[u8]> {
        self.line.as_deref()
    }

    /// Forget the line: the record changed. Never a thin record's: its
    /// line is all it has of its metadata ([`Record::thicken`] first).
    pub fn clear(&mut self) {
        debug_assert!(self.thin.is_none(), "a thin record's line forgotten");
        self.line = None;
    }
}

impl PartialEq for Verbatim {
    fn eq(&self, _: &Verbatim) -> bool {
        true
    }
}

impl std::fmt::Debug for Verbatim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (&self.line, self.thin) {
            (Some(line), None) => write!(f, "Verbatim({} bytes)", line.len()),
            (Some(line), Some(_)) => write!(f, "Verbatim(thin, {} bytes)", line.len()),
            (None, _) => write!(f, "Verbatim(none)"),
        }
    }
}

/// What changed of one object between the baseline and this scan.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChangeKind {
    /// Listed now, not in the baseline.
    Added,
    /// In the baseline, no longer listed (or gone by the time of its HEAD).
    Removed,
    /// Size or ETag differ: new content (its metadata may differ too).
    ContentChanged,
    /// Same content, different user metadata or content type.
    MetadataChanged,
}

impl ChangeKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ChangeKind::Added => "added",
            ChangeKind::Removed => "removed",
            ChangeKind::ContentChanged => "content_changed",
            ChangeKind::MetadataChanged => "metadata_changed",
        }
    }
}

/// The baseline's view of a changed object.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Previous {
    pub size: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etag: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_modified: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_type: Option<String>,
    #[serde(default)]
    pub metadata: BTreeMap<String, String>,
}

impl Previous {
    pub fn of(record: &Record) -> Previous {
        Previous {
            size: record.size,
            etag: record.etag.clone(),
            last_modified: record.last_modified.clone(),
            content_type: record.content_type.clone(),
            metadata: record.metadata.clone(),
        }
    }
}

/// What a thin record decodes of its line: what taking it unchanged from a
/// baseline looks at (`baseline::Baseline::reusable`, the storage class
/// the listing may have moved, the counts), not its user metadata, content
/// type or other columns. Decoding the metadata map of every unchanged
/// record, and dropping it unread, was an eighth of an incremental scan's
/// CPU.
#[derive(Deserialize)]
struct ThinLine {
    key: String,
    status: Status,
    size: u64,
    #[serde(default)]
    etag: Option<String>,
    #[serde(default)]
    last_modified: Option<String>,
    #[serde(default)]
    storage_class: Option<String>,
    #[serde(default)]
    metadata: Presence,
    #[serde(default)]
    missing_metadata: Option<u32>,
    #[serde(default)]
    replication_status: Option<String>,
    #[serde(default)]
    object_lock_mode: Option<String>,
    #[serde(default)]
    object_lock_legal_hold: Option<bool>,
    #[serde(default)]
    change: Option<serde::de::IgnoredAny>,
    #[serde(default)]
    previous: Option<serde::de::IgnoredAny>,
}

/// Whether a JSON object has any entry, read without keeping one.
#[derive(Default)]
struct Presence(bool);

impl<'de> Deserialize<'de> for Presence {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Presence, D::Error> {
        struct Entries;
        impl<'de> serde::de::Visitor<'de> for Entries {
            type Value = Presence;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a map of strings")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Presence, A::Error> {
                let mut any = false;
                while map
                    .next_entry::<serde::de::IgnoredAny, serde::de::IgnoredAny>()?
                    .is_some()
                {
                    any = true;
                }
                Ok(Presence(any))
            }
        }
        d.deserialize_map(Entries)
    }
}

impl Record {
    /// The record of a baseline's JSON line, decoded only as far as taking
    /// it unchanged needs (see `ThinLine`), with its line: written as that
    /// line, its metadata counted by [`Record::has_metadata`]. Anything
    /// else must [`Record::thicken`] it first. A line of a change set
    /// (`change`, `previous`) is decoded whole.
    pub fn thin_of_line(line: &[u8]) -> Result<Record, serde_json::Error> {
        let thin: ThinLine = serde_json::from_slice(line)?;
        if thin.change.is_some() || thin.previous.is_some() {
            let mut record: Record = serde_json::from_slice(line)?;
            record.verbatim = Verbatim::of(line);
            return Ok(record);
        }
        Ok(Record {
            key: thin.key,
            status: thin.status,
            size: thin.size,
            etag: thin.etag,
            last_modified: thin.last_modified,
            storage_class: thin.storage_class,
            content_type: None,
            metadata: BTreeMap::new(),
            binary_metadata: Vec::new(),
            missing_metadata: thin.missing_metadata,
            columns: ObjectColumns {
                replication_status: thin.replication_status,
                object_lock_mode: thin.object_lock_mode,
                object_lock_legal_hold: thin.object_lock_legal_hold,
                ..ObjectColumns::default()
            },
            error: None,
            http_status: None,
            change: None,
            previous: None,
            verbatim: Verbatim {
                line: Some(line.into()),
                thin: Some(thin.metadata.0),
            },
        })
    }

    /// Decoded only in part ([`Record::thin_of_line`]).
    pub fn is_thin(&self) -> bool {
        self.verbatim.thin.is_some()
    }

    /// Decode the rest of a thin record from its line (its line kept).
    pub fn thicken(&mut self) -> Result<(), serde_json::Error> {
        if !self.is_thin() {
            return Ok(());
        }
        let line = self.verbatim.line.take().expect("a thin record has its line");
        *self = serde_json::from_slice(&line)?;
        self.verbatim = Verbatim {
            line: Some(line),
            thin: None,
        };
        Ok(())
    }

    /// Whether the object has user metadata, thin or not.
    pub fn has_metadata(&self) -> bool {
        !self.metadata.is_empty() || self.verbatim.thin == Some(true)
    }

    /// A change-set entry of a baseline object no longer listed: it has no
    /// place in the result. (An object listed and gone by its HEAD is in the
    /// result as `vanished`, and in the change set as removed too.)
    pub fn is_removal(&self) -> bool {
        self.change == Some(ChangeKind::Removed) && self.status != Status::Vanished
    }

    /// The record for the result (none for a removal) and for the change
    /// set (when something changed).
    pub fn split_change(self) -> (Option<Record>, Option<Record>) {
        if self.change.is_none() {
            return (Some(self), None);
        }
        if self.is_removal() {
            return (None, Some(self));
        }
        let result = Record {
            change: None,
            previous: None,
            ..self.clone()
        };
        (Some(result), Some(self))
    }

    /// Append the record and a newline to `out`: the line it was read from,
    /// if it kept it (an unchanged record of an incremental scan: encoding
    /// it again was a tenth of such a scan's CPU).
    pub fn write_line(&self, out: &mut Vec<u8>) {
        match self.verbatim.line() {
            Some(line) => out.extend_from_slice(line),
            None => {
                debug_assert!(!self.is_thin(), "a thin record encoded");
                serde_json::to_writer(&mut *out, self).expect("a record always serializes")
            }
        }
        out.push(b'\n');
    }
}

impl Record {
    /// Where a pass resumes after this record (`--versions`): its version,
    /// encoded as a `VersionPoint` (a `null` one with what tells that entry
    /// from a later `null`, from the record's own fields). `None` for a
    /// record without a version.
    pub fn resume_version(&self) -> Option<String> {
        let version_id = self.columns.version_id.as_deref()?;
        let point = crate::s3::version_point::VersionPoint::of(
            version_id,
            self.columns.is_delete_marker.unwrap_or(false),
            self.last_modified.as_deref(),
            self.etag.as_deref(),
        );
        Some(point.encode())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn odd_keys_round_trip() {
        for key in [
            "a\"b",
            "line\nbreak",
            "\u{1}\u{1f}ctl",
            "ünï/cødé 💥",
            "\\back",
            "+ % # ? & =",
        ] {
            let mut rec = Record {
                key: key.into(),
                status: Status::Ok,
                size: 3,
                etag: Some("abc".into()),
                last_modified: None,
                storage_class: None,
                content_type: None,
                metadata: BTreeMap::from([("Name".into(), "välue\n\"x\"".into())]),
                binary_metadata: Vec::new(),
                missing_metadata: None,
                columns: ObjectColumns {
                    is_multipart: Some(true),
                    part_count: Some(2),
                    server_side_encryption: Some("AES256".into()),
                    object_tags: Some(BTreeMap::from([("t".into(), "v,\"w\"".into())])),
                    ..ObjectColumns::default()
                },
                error: None,
                http_status: None,
                change: None,
                previous: None,
                verbatim: Default::default(),
            };
            let mut line = Vec::new();
            rec.write_line(&mut line);
            assert_eq!(
                line.iter().filter(|b| **b == b'\n').count(),
                1,
                "one line per record"
            );
            let back: Record = serde_json::from_slice(&line).unwrap();
            assert_eq!(back, rec);
            rec.status = Status::Vanished;
            assert!(serde_json::to_string(&rec).unwrap().contains("\"vanished\""));
        }
    }

    /// A thin record has what taking it unchanged looks at, equal to the
    /// whole record's, says whether it has metadata without decoding it,
    /// is written as its line, and decodes whole on demand; a change-set
    /// line is decoded whole at once.
    #[test]
    fn a_thin_record_has_what_reuse_looks_at_and_thickens_to_the_whole() {
        let line = br#"{"key":"d\u00e9j\u00e0 \"vu\"","status":"ok","size":7,"etag":"\"e\"","last_modified":"2026-01-02T03:04:05Z","storage_class":"STANDARD","content_type":"text/plain","metadata":{"a":"1","b":"2"},"missing_metadata":1,"replication_status":"PENDING","object_lock_legal_hold":true,"is_multipart":false,"error":null}"#;
        let whole: Record = serde_json::from_slice(line).unwrap();
        let mut thin = Record::thin_of_line(line).unwrap();
        assert!(thin.is_thin() && thin.has_metadata());
        assert!(
            thin.metadata.is_empty() && thin.content_type.is_none(),
            "not decoded"
        );
        let seen = |r: &Record| {
            (
                r.key.clone(),
                r.status,
                r.size,
                r.etag.clone(),
                r.last_modified.clone(),
                r.storage_class.clone(),
                r.missing_metadata,
                r.columns.replication_status.clone(),
                r.columns.object_lock_legal_hold,
            )
        };
        assert_eq!(seen(&thin), seen(&whole));
        let mut out = Vec::new();
        thin.write_line(&mut out);
        assert_eq!(out, [&line[..], b"\n"].concat());
        thin.thicken().unwrap();
        assert!(!thin.is_thin());
        assert_eq!(thin, whole);
        assert_eq!(thin.verbatim.line(), Some(&line[..]));

        let bare =
            Record::thin_of_line(br#"{"key":"k","status":"vanished","size":0,"metadata":{}}"#).unwrap();
        assert!(!bare.has_metadata() && bare.status == Status::Vanished);
        let change = br#"{"key":"k","status":"ok","size":0,"metadata":{"a":"b"},"change":"added"}"#;
        let read = Record::thin_of_line(change).unwrap();
        assert!(!read.is_thin());
        assert_eq!(read.metadata["a"], "b");
        assert!(Record::thin_of_line(br#"{"key":"k","status":"ok","size":0,"metadata":7}"#).is_err());
    }

    /// A record read from a line is written as that line, byte for byte
    /// (another order of fields, another escaping: still the same record),
    /// and is equal to the same record decoded anew.
    #[test]
    fn a_record_kept_with_its_line_is_written_as_that_line() {
        let line = br#"{"status":"ok","key":"k\u00e9","size":3,"metadata":{"a":"b"}}"#;
        let mut record: Record = serde_json::from_slice(line).unwrap();
        let plain = record.clone();
        record.verbatim = Verbatim::of(line);
        let mut out = Vec::new();
        record.write_line(&mut out);
        assert_eq!(out, [&line[..], b"\n"].concat());
        assert_eq!(record, plain);
        let mut anew = Vec::new();
        plain.write_line(&mut anew);
        assert_ne!(anew, out, "without its line the record is encoded again");
        assert_eq!(serde_json::from_slice::<Record>(&anew).unwrap(), plain);
    }
}
