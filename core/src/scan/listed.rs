//! Where a record's metadata comes from: a HEAD per object (`head`), or the
//! listing when the store puts it there (MinIO's `metadata=true`), trusted
//! (`list`) or checked against HEADs of a sample of every page (`auto`).
//! What each mode does, and why, is in docs/metadata-source.md.
//!
//! May import: `record` and `s3` (types, codec).

use crate::s3::codec::format_time;
use crate::s3::error::S3Error;
use crate::s3::{ListPage, ListRequest, ListedObject, Lister};
use crate::scan::record::{Record, Status};
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};

/// `--metadata-source`. No `Default`: the CLI and the CRD both default to
/// `Auto` (their own declarations say so); code that builds an engine by
/// hand says which source it wants.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MetadataSource {
    /// Ask for metadata in the listing; use it for a shard only while HEADs
    /// of a sample of each page agree with it.
    Auto,
    /// A HEAD per object, whatever the store offers.
    Head,
    /// Trust the listing's metadata wherever an entry carries it; HEAD only
    /// the entries that carry none.
    List,
}

impl FromStr for MetadataSource {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "auto" => Ok(MetadataSource::Auto),
            "head" => Ok(MetadataSource::Head),
            "list" => Ok(MetadataSource::List),
            other => Err(format!(
                "unknown metadata source {other:?}: use auto, head or list (see docs/metadata-source.md)"
            )),
        }
    }
}

impl MetadataSource {
    pub fn as_str(self) -> &'static str {
        match self {
            MetadataSource::Auto => "auto",
            MetadataSource::Head => "head",
            MetadataSource::List => "list",
        }
    }

    /// Does a listing ask the store for metadata?
    pub fn asks_listing(self) -> bool {
        self != MetadataSource::Head
    }
}

/// HEADs checked against the listing per page in `auto`: a page of 1,000
/// keys costs 8 HEADs instead of 1,000.
pub const SAMPLE_PER_PAGE: usize = 8;

/// Which of a page's `n` entries `auto` HEADs: the first, then spread
/// evenly over the page, at most `SAMPLE_PER_PAGE`, no index twice.
pub fn sample_indices(n: usize) -> Vec<usize> {
    let k = n.min(SAMPLE_PER_PAGE);
    let mut picked: Vec<usize> = (0..k).map(|i| i * n / k).collect();
    picked.dedup();
    picked
}

/// The record a HEAD would make of `obj`, from the listing alone, or `None`
/// when the entry carries no metadata (then only a HEAD can tell). `tags`:
/// the scan fills `object_tags` (MinIO lists them beside the metadata).
pub fn record_from_listing(obj: &ListedObject, tags: bool) -> Option<Record> {
    let listed = obj.listed_metadata.as_ref()?;
    let mut columns = listed.columns.clone();
    if !tags {
        columns.object_tags = None;
    }
    columns.fill_from_listing(obj.checksum_algorithm.clone(), obj.checksum_type.clone());
    columns.set_multipart(obj.etag.as_deref());
    Some(Record {
        key: obj.key.clone(),
        status: Status::Ok,
        size: obj.size,
        etag: obj.etag.clone(),
        // HEAD's Last-Modified is an HTTP date, whole seconds; the listing's
        // has milliseconds.
        last_modified: obj.last_modified.as_deref().map(whole_seconds),
        storage_class: obj.storage_class.clone().or(Some("STANDARD".into())),
        content_type: listed.content_type.clone(),
        metadata: listed.metadata.clone(),
        binary_metadata: Vec::new(),
        missing_metadata: None,
        columns,
        error: None,
        http_status: None,
        change: None,
        previous: None,
        verbatim: Default::default(),
    })
}

/// An RFC 3339 time without its fraction of a second, formatted as a HEAD's
/// time is (the text as it came if it is not a time).
fn whole_seconds(time: &str) -> String {
    use aws_smithy_types::date_time::{DateTime, Format};
    match DateTime::from_str(time, Format::DateTime) {
        Ok(t) => format_time(&DateTime::from_secs(t.secs())),
        Err(_) => time.to_string(),
    }
}

/// Which fields of the listing's record differ from the HEAD's (names only:
/// values may be anything, and logs are no place for them). Empty when they
/// agree. A vanished object agrees: it says nothing of the listing.
pub fn disagreement(from_listing: &Record, from_head: &Record) -> Vec<&'static str> {
    if from_head.status == Status::Vanished {
        return Vec::new();
    }
    let mut fields = Vec::new();
    let mut differs = |name, same: bool| {
        if !same {
            fields.push(name);
        }
    };
    differs("status", from_head.status == Status::Ok);
    differs("size", from_listing.size == from_head.size);
    differs("etag", from_listing.etag == from_head.etag);
    differs(
        "last_modified",
        from_listing.last_modified == from_head.last_modified,
    );
    differs(
        "storage_class",
        from_listing.storage_class == from_head.storage_class,
    );
    differs(
        "content_type",
        from_listing.content_type == from_head.content_type,
    );
    differs("metadata", from_listing.metadata == from_head.metadata);
    // Encryption, object lock, replication, version: a listing that leaves
    // one out would make records unlike a HEAD's.
    differs("columns", from_listing.columns == from_head.columns);
    fields
}

/// A lister that asks for metadata until the store refuses the parameter,
/// then lists without it for the rest of the process. No store known to us
/// refuses it (AWS, Ceph, versitygw and moto ignore it), but a gateway that
/// validates query parameters could, and `auto` is the operator's default:
/// such a store must cost one refused LIST, not a failed scan.
pub struct MetadataLister<'a, L> {
    pub inner: L,
    /// Shared by every shard of the process: once refused, never asked again.
    pub refused: &'a AtomicBool,
}

impl<L: Lister> Lister for MetadataLister<'_, L> {
    fn list(&self, req: &ListRequest) -> impl std::future::Future<Output = Result<ListPage, S3Error>> + Send {
        let req = req.clone();
        async move {
            if req.with_metadata && !self.refused.load(Relaxed) {
                match self.inner.list(&req).await {
                    Err(e) if refuses_parameter(&e) => {
                        if !self.refused.swap(true, Relaxed) {
                            tracing::warn!(error = %e, "the store refused a LIST with metadata=true: listing without it, a HEAD per object");
                        }
                    }
                    answer => return answer,
                }
            }
            let plain = ListRequest {
                with_metadata: false,
                ..req
            };
            self.inner.list(&plain).await
        }
    }
}

/// An answer that may be about the unknown parameter: a request refused
/// as such (4xx other than the ones about credentials, the bucket or load,
/// which `S3Error` names apart), or 501 Not Implemented. Asking again
/// without it tells: a refusal about something else comes back.
fn refuses_parameter(e: &S3Error) -> bool {
    matches!(e, S3Error::Client { .. } | S3Error::Server { status: 501, .. })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::s3::ListedMetadata;

    #[test]
    fn the_sample_starts_at_the_first_entry_and_spreads() {
        assert_eq!(sample_indices(0), Vec::<usize>::new());
        assert_eq!(sample_indices(3), vec![0, 1, 2]);
        assert_eq!(sample_indices(1000), vec![0, 125, 250, 375, 500, 625, 750, 875]);
        for n in 1..50 {
            let s = sample_indices(n);
            assert!(s.len() <= SAMPLE_PER_PAGE && s[0] == 0 && s.windows(2).all(|w| w[0] < w[1]));
            assert!(*s.last().unwrap() < n);
        }
    }

    #[test]
    fn a_listed_record_reads_like_a_head_record() {
        let mut obj = ListedObject {
            key: "k".into(),
            size: 3,
            etag: Some("e".into()),
            last_modified: Some("2026-11-23T20:51:42.815Z".into()),
            storage_class: None,
            checksum_algorithm: None,
            checksum_type: None,
            listed_metadata: None,
        };
        assert_eq!(record_from_listing(&obj, false), None, "no element, no record");
        obj.listed_metadata = Some(Box::new(ListedMetadata {
            metadata: [("a".to_string(), "b".to_string())].into(),
            content_type: Some("text/plain".into()),
            columns: Default::default(),
        }));
        let rec = record_from_listing(&obj, false).unwrap();
        assert_eq!(rec.last_modified.as_deref(), Some("2026-11-23T20:51:42Z"));
        assert_eq!(rec.storage_class.as_deref(), Some("STANDARD"));
        let mut head = rec.clone();
        assert!(disagreement(&rec, &head).is_empty());
        head.metadata.clear();
        head.content_type = None;
        assert_eq!(disagreement(&rec, &head), vec!["content_type", "metadata"]);
        head.status = Status::Vanished;
        assert!(disagreement(&rec, &head).is_empty());
        head.status = Status::Error;
        assert_eq!(disagreement(&rec, &head)[0], "status");
    }

    #[test]
    fn unknown_sources_are_refused_with_the_choices() {
        let e = "heads".parse::<MetadataSource>().unwrap_err();
        assert!(e.contains("auto, head or list"), "{e}");
        assert_eq!("list".parse::<MetadataSource>(), Ok(MetadataSource::List));
    }
}
