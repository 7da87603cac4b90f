//! ListObjectVersions (`--versions`): every version and delete marker of
//! every key, a page at a time, signed and sent like the fast LIST path.
//! Not the hot path of a scan (each version is HEADed), so its XML is read
//! element by element.
//!
//! A page is read in the store's order: keys ascending, the versions of a
//! key newest first, delete markers among them. That order is what a resume
//! point `(key, version id)` means, so it is held to: AWS and MinIO send
//! `<Version>` and `<DeleteMarker>` interleaved in it, kept as sent; moto
//! (told by its layout) sends all versions first, then all delete markers,
//! each list in its order, and the two are merged back by key and time
//! ([`store_order`]). A key that goes backwards is
//! [`S3Error::ListingOutOfOrder`], a version listed again is dropped, as
//! [`super::pages`] does for keys.
//!
//! Pages follow the store's `NextKeyMarker` and `NextVersionIdMarker`, sent
//! back as given ([`MarkerFrom`]); a truncated page without a version marker
//! goes on after its last entry when that is the key marker's key. A
//! listing that starts after one version of a key first lists that key
//! whole and takes the versions after it ([`versions_of_key`]), so a
//! resume point means one place whatever order a page was put back in; a
//! version deleted since is [`S3Error::ResumeVersionGone`], and so is a
//! `null` entry replaced since by a new `null` (its id is reused: the point
//! names the entry, [`VersionPoint`]).
//! Entries at or before the start are dropped: moto's answer to a
//! `key-marker` alone also lists older versions of that key, and moto
//! 5.2.1 leaves out the first entry after a `key-marker` that names no key
//! (docs/testing.md).
//!
//! May import: `client`, `list` (its XML helpers), `signed`, `pages` (its
//! limit on a stuck listing), `version_point` and the bottom of `s3` (types,
//! codec, error).

use super::client::S3;
use super::codec::{format_time, strip_quotes, wire_start_after};
use super::error::S3Error;
use super::list::{blocks, canonical_query, element, find_tag, key_decoder, listed_size, unescape};
use super::pages::MAX_SAME_TOKEN;
use super::signed::SignedClient;
use super::types::{ListVersionsRequest, ListedObject, ListedVersion, VersionPage};
use super::version_point::VersionPoint;
use std::collections::HashSet;

/// The query of a ListObjectVersions request in canonical form (names
/// sorted, values encoded), markers as they go on the wire.
pub fn versions_query(
    req: &ListVersionsRequest,
    key_marker: Option<&str>,
    version_id_marker: Option<&str>,
) -> String {
    let max_keys = req.max_keys.to_string();
    let mut params: Vec<(&str, &str)> = vec![
        ("encoding-type", "url"),
        ("max-keys", &max_keys),
        ("prefix", &req.prefix),
        ("versions", ""),
    ];
    if let Some(k) = key_marker {
        params.push(("key-marker", k));
    }
    if let Some(v) = version_id_marker {
        params.push(("version-id-marker", v));
    }
    canonical_query(&mut params)
}

impl SignedClient {
    /// One ListObjectVersions attempt (the caller retries).
    pub async fn list_versions(&self, bucket: &str, query: &str) -> Result<VersionPage, S3Error> {
        self.get_listing(bucket, query, "<ListVersionsResult", parse_versions)
            .await
    }
}

/// Read a ListVersionsResult: its versions and delete markers in the
/// store's order, and where the next page starts.
pub fn parse_versions(xml: &str) -> Result<VersionPage, S3Error> {
    let decode = key_decoder(xml);
    let mut entries = Vec::new();
    let mut rest = xml;
    loop {
        let version = find_tag(rest, "<Version>");
        let marker = find_tag(rest, "<DeleteMarker>");
        let (at, is_delete_marker, name) = match (version, marker) {
            (Some(v), Some(m)) if m < v => (m, true, "DeleteMarker"),
            (Some(v), _) => (v, false, "Version"),
            (None, Some(m)) => (m, true, "DeleteMarker"),
            (None, None) => break,
        };
        let block = blocks(&rest[at..], name)
            .next()
            .ok_or_else(|| S3Error::BadAnswer(format!("a ListVersionsResult with an unclosed <{name}>")))?;
        rest = &rest[at + name.len() + 2 + block.len()..];
        entries.push(version_entry(block, is_delete_marker, &decode)?);
    }
    let truncated = element(xml, "IsTruncated").is_some_and(|t| t.trim() == "true");
    let versions = store_order(entries, lists_entries_before_name(xml));
    let next = match truncated {
        false => None,
        true => {
            let key = element(xml, "NextKeyMarker").map(&decode).transpose()?;
            let version = element(xml, "NextVersionIdMarker")
                .map(unescape)
                .filter(|v| !v.is_empty());
            let key = key.unwrap_or_default();
            let version = match version {
                Some(v) => Some(v),
                None => version_marker_of_last(&versions, &key)?,
            };
            Some((key, version))
        }
    };
    Ok(VersionPage { versions, next })
}

/// The version marker of a truncated page that sent none (or an empty
/// one). A key marker alone goes on after the whole key it names, so one
/// that names the key of the page's last entry (as it is, or with MinIO's
/// `[minio_cache:…]` after it) would skip that key's versions not yet
/// listed: the last entry is where the page ended, the marker the store
/// should have sent. A key marker that names another key cannot be placed
/// against the entries listed (it could skip a key never seen): an error
/// rather than a guess. A page without entries goes on as the store says.
fn version_marker_of_last(versions: &[ListedVersion], key_marker: &str) -> Result<Option<String>, S3Error> {
    let Some(last) = versions.last() else {
        return Ok(None);
    };
    let names_last = key_marker
        .strip_prefix(last.object.key.as_str())
        .is_some_and(|rest| rest.is_empty() || rest.starts_with("[minio_cache:"));
    match names_last {
        true => Ok(Some(last.version_id.clone())),
        false => Err(S3Error::BadAnswer(format!(
            "a truncated version listing sent no NextVersionIdMarker and a NextKeyMarker {key_marker:?} that is not its last entry's key {:?}: where the next page starts cannot be told",
            last.object.key
        ))),
    }
}

/// One `<Version>` or `<DeleteMarker>`, with its time for [`store_order`].
fn version_entry(
    block: &str,
    is_delete_marker: bool,
    decode: &dyn Fn(&str) -> Result<String, S3Error>,
) -> Result<(ListedVersion, Option<aws_smithy_types::DateTime>), S3Error> {
    let key = decode(
        element(block, "Key").ok_or_else(|| S3Error::BadAnswer("a listed version without a Key".into()))?,
    )?;
    let version_id = element(block, "VersionId")
        .map(unescape)
        .filter(|v| !v.is_empty())
        .ok_or_else(|| S3Error::BadAnswer(format!("listed version of {key:?} without a VersionId")))?;
    let time = element(block, "LastModified").and_then(|raw| {
        aws_smithy_types::DateTime::from_str(raw.trim(), aws_smithy_types::date_time::Format::DateTime).ok()
    });
    let size = match is_delete_marker {
        true => 0,
        false => listed_size(element(block, "Size"), &key)?,
    };
    let object = ListedObject {
        size,
        etag: element(block, "ETag").map(|e| strip_quotes(&unescape(e))),
        last_modified: time.as_ref().map(format_time),
        storage_class: element(block, "StorageClass").map(unescape),
        checksum_algorithm: element(block, "ChecksumAlgorithm").map(unescape),
        checksum_type: element(block, "ChecksumType").map(unescape),
        listed_metadata: None,
        key,
    };
    let version = ListedVersion {
        object,
        version_id,
        is_latest: element(block, "IsLatest").is_some_and(|v| v.trim() == "true"),
        is_delete_marker,
    };
    Ok((version, time))
}

/// moto's layout of a ListVersionsResult: its entries come before
/// `<Name>` (AWS, MinIO and the S3 schema put `<Name>` first). A property of
/// the store, not of one page, so every page of a listing (and every
/// listing of one key) is put in order the same way.
fn lists_entries_before_name(xml: &str) -> bool {
    let first = [find_tag(xml, "<Version>"), find_tag(xml, "<DeleteMarker>")]
        .into_iter()
        .flatten()
        .min();
    match (first, find_tag(xml, "<Name>")) {
        (Some(entry), Some(name)) => entry < name,
        _ => false,
    }
}

/// The entries in the store's order: as sent, which is the order the
/// store's own markers (`NextKeyMarker`, `NextVersionIdMarker`) and a resume
/// point count in. Times cannot decide it: AWS dates a multipart version at
/// its upload's start, so a newer version may carry an older time.
///
/// Only moto's layout (`moto`) is put back together: it sends every version,
/// then every delete marker, each list in its store's order, which sorts by
/// key and time. The two lists are merged by key and, within a key, newest
/// first; versions keep their order among themselves, delete markers too,
/// and at the same time a version comes first. Decided by the layout, not by
/// what one page holds, so a key's versions are in one order on every page.
fn store_order(
    entries: Vec<(ListedVersion, Option<aws_smithy_types::DateTime>)>,
    moto_layout: bool,
) -> Vec<ListedVersion> {
    if !moto_layout {
        return entries.into_iter().map(|(v, _)| v).collect();
    }
    let time =
        |t: &Option<aws_smithy_types::DateTime>| t.map_or((i64::MIN, 0), |t| (t.secs(), t.subsec_nanos()));
    let (markers, versions): (Vec<_>, Vec<_>) = entries.into_iter().partition(|(v, _)| v.is_delete_marker);
    let mut markers = markers.into_iter().peekable();
    let mut versions = versions.into_iter().peekable();
    let mut merged = Vec::with_capacity(markers.len() + versions.len());
    loop {
        let marker_first = match (markers.peek(), versions.peek()) {
            (Some(m), Some(v)) => {
                (m.0.object.key.as_str(), std::cmp::Reverse(time(&m.1)))
                    < (v.0.object.key.as_str(), std::cmp::Reverse(time(&v.1)))
            }
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (None, None) => break,
        };
        let next = match marker_first {
            true => markers.next(),
            false => versions.next(),
        };
        merged.extend(next.map(|(v, _)| v));
    }
    merged
}

/// Who chose a request's markers, which decides how they are sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MarkerFrom {
    /// The caller's start (a shard's bound, a checkpoint): cut for the wire
    /// ([`wire_markers`]), the entries before it dropped by the caller.
    Caller,
    /// The store's own `NextKeyMarker` and `NextVersionIdMarker`, sent back
    /// as given: cut, they would start the next page before entries already
    /// listed, and a page that ends inside a run of such keys longer than a
    /// page would be asked again for ever (the store echoes them URL-encoded,
    /// `encoding-type=url`, so their characters travel).
    Store,
}

impl S3 {
    /// One ListObjectVersions page, retried on transient errors, from the
    /// request's markers as they go on the wire (see [`MarkerFrom`]).
    pub async fn list_versions_page(
        &self,
        bucket: &str,
        req: &ListVersionsRequest,
        from: MarkerFrom,
    ) -> Result<VersionPage, S3Error> {
        let (key, version) = match from {
            MarkerFrom::Caller => wire_markers(req),
            MarkerFrom::Store => (req.key_marker.clone(), req.version_id_marker.as_deref()),
        };
        let query = versions_query(req, key.as_deref(), version);
        self.retry
            .run(&self.retries, || self.fast.list_versions(bucket, &query))
            .await
    }
}

/// The markers as sent: the key marker cut where servers refuse its
/// characters (`wire_start_after`); a cut one starts earlier, and its
/// version marker, which names a version of another key, is left out (the
/// caller skips up to it instead).
fn wire_markers(req: &ListVersionsRequest) -> (Option<String>, Option<&str>) {
    let key = req.key_marker.as_deref().and_then(wire_start_after);
    let cut = key.as_deref() != req.key_marker.as_deref().filter(|k| !k.is_empty());
    let version = req.version_id_marker.as_deref().filter(|_| !cut && key.is_some());
    (key, version)
}

/// Where a version listing is: after this key (all its versions), or after
/// this version of it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VersionMarker {
    pub key: Option<String>,
    /// An encoded [`VersionPoint`]: the version id, or for `null` the id
    /// with what names the entry.
    pub version_id: Option<String>,
}

/// One version listing, read a page at a time after a marker, held to the
/// store's order (see the module doc).
pub struct VersionPages<'a> {
    s3: &'a S3,
    bucket: &'a str,
    req: ListVersionsRequest,
    /// A start after a version of a key: that key's versions after it come
    /// first (read by [`versions_of_key`]).
    after_version: Option<(String, VersionPoint)>,
    ended: bool,
    /// The key of the last entry listed and its versions listed so far.
    last_key: Option<String>,
    versions_of_last: HashSet<String>,
    same_marker: u32,
    /// Who chose `req`'s markers: the caller until the first page is read.
    marker_from: MarkerFrom,
    /// The caller's start key, until an entry after it comes: entries of it
    /// and before it are dropped (a server may start early: a marker cut
    /// for the wire, moto's answer to a `key-marker` alone). Only this key
    /// is judged so: the store's own markers may not be keys at all
    /// (MinIO's `NextKeyMarker` holds its listing cache's id).
    skip_through: Option<String>,
}

impl<'a> VersionPages<'a> {
    pub fn new(s3: &'a S3, bucket: &'a str, prefix: &str, after: VersionMarker, max_keys: i32) -> Self {
        let key = after.key.filter(|k| !k.is_empty());
        VersionPages {
            s3,
            bucket,
            after_version: key
                .clone()
                .zip(after.version_id.as_deref().map(VersionPoint::parse)),
            req: ListVersionsRequest {
                prefix: prefix.to_string(),
                key_marker: key.clone(),
                version_id_marker: None,
                max_keys,
            },
            ended: false,
            last_key: key.clone(),
            versions_of_last: HashSet::new(),
            same_marker: 0,
            marker_from: MarkerFrom::Caller,
            skip_through: key,
        }
    }

    /// The entries of a page past the start, each version once; a key that
    /// goes backwards is [`S3Error::ListingOutOfOrder`] (the versions a page
    /// that jumped ahead skipped cannot be told). Several versions of one key
    /// are the rule here, not a repeat.
    fn in_order(&mut self, page: Vec<ListedVersion>) -> Result<Vec<ListedVersion>, S3Error> {
        let mut versions = Vec::with_capacity(page.len());
        for v in page {
            if let Some(start) = &self.skip_through {
                if v.object.key <= *start {
                    continue;
                }
                self.skip_through = None;
            }
            let key = &v.object.key;
            match self.last_key.as_deref().map(|l| key.as_str().cmp(l)) {
                Some(std::cmp::Ordering::Less) => {
                    return Err(S3Error::ListingOutOfOrder(format!(
                        "key {key:?} was listed after {:?}; S3 lists versions by key in UTF-8 byte order, and versions this listing skipped cannot be told",
                        self.last_key.as_deref().unwrap_or_default()
                    )));
                }
                Some(std::cmp::Ordering::Equal) => {
                    if !self.versions_of_last.insert(v.version_id.clone()) {
                        continue; // listed again
                    }
                }
                _ => {
                    self.last_key = Some(key.clone());
                    self.versions_of_last.clear();
                    self.versions_of_last.insert(v.version_id.clone());
                }
            }
            versions.push(v);
        }
        Ok(versions)
    }

    /// The next page (possibly empty), or `None` after the last one.
    pub async fn next(&mut self) -> Result<Option<Vec<ListedVersion>>, S3Error> {
        if let Some((key, point)) = self.after_version.take() {
            let all = versions_of_key(self.s3, self.bucket, &key).await?;
            self.versions_of_last = all.iter().map(|v| v.version_id.clone()).collect();
            // A version gone since (deleted for good) cannot be placed among
            // the others again: a version id says nothing of order, and a
            // time would not do either (AWS dates a multipart version at its
            // upload's start; two versions may share a time). Resuming
            // after the whole key would lose its older versions, resuming at
            // its start would repeat the newer ones already written: both
            // would still end Complete. The listing fails instead, final for
            // the shard (`fleet::run`), so the scan says what it could not
            // do. A `null` entry replaced since (by a PUT or DELETE under
            // suspended versioning) is gone too, though a `null` is listed:
            // the new one is on top, above versions written already.
            let Some(at) = all.iter().position(|v| point.names(v)) else {
                return Err(S3Error::ResumeVersionGone {
                    key,
                    version_id: point.version_id,
                });
            };
            return Ok(Some(all[at + 1..].to_vec()));
        }
        if self.ended {
            return Ok(None);
        }
        let page = self
            .s3
            .list_versions_page(self.bucket, &self.req, self.marker_from)
            .await?;
        self.marker_from = MarkerFrom::Store;
        let versions = self.in_order(page.versions)?;
        let Some((next_key, next_version)) = page.next else {
            self.ended = true;
            return Ok(Some(versions));
        };
        if next_key.is_empty() {
            return Err(S3Error::BadAnswer(
                "a version listing said it is truncated but sent no NextKeyMarker".into(),
            ));
        }
        // The store's own markers: they follow its order, whatever order
        // this page was put back in (`store_order`).
        let marker = (Some(next_key), next_version);
        if (&marker.0, &marker.1) == (&self.req.key_marker, &self.req.version_id_marker) {
            self.same_marker += 1;
            if self.same_marker >= MAX_SAME_TOKEN {
                return Err(S3Error::BadListing(format!(
                    "the version listing gave nothing new after {:?} {MAX_SAME_TOKEN} times in a row: it would never end",
                    marker.0.as_deref().unwrap_or_default()
                )));
            }
        } else {
            self.same_marker = 0;
        }
        (self.req.key_marker, self.req.version_id_marker) = marker;
        Ok(Some(versions))
    }
}

/// Every version of `key`, in the order a listing from its start gives
/// them: listed under `key` as a prefix until another key comes. A pass
/// resumed after one of them takes the ones after it from here, so the
/// resume point means the same place whatever the store's markers do.
pub async fn versions_of_key(s3: &S3, bucket: &str, key: &str) -> Result<Vec<ListedVersion>, S3Error> {
    let mut req = ListVersionsRequest {
        prefix: key.to_string(),
        max_keys: 1000,
        ..ListVersionsRequest::default()
    };
    let mut all: Vec<ListedVersion> = Vec::new();
    let mut same_marker = 0;
    loop {
        let page = s3.list_versions_page(bucket, &req, MarkerFrom::Store).await?;
        let past = page.versions.iter().any(|v| v.object.key.as_str() > key);
        for v in page.versions {
            if v.object.key == key && !all.iter().any(|seen| seen.version_id == v.version_id) {
                all.push(v);
            }
        }
        match page.next {
            Some((next_key, next_version)) if !past && !next_key.is_empty() => {
                // A store that sends the same markers again would be asked
                // for ever (and a worker's lease renewed for ever): as
                // `VersionPages` does, give up after so many.
                let marker = (Some(next_key), next_version);
                if (&marker.0, &marker.1) == (&req.key_marker, &req.version_id_marker) {
                    same_marker += 1;
                    if same_marker >= MAX_SAME_TOKEN {
                        return Err(S3Error::BadListing(format!(
                            "the versions of {key:?} were listed after the same marker {MAX_SAME_TOKEN} times in a row: the listing would never end"
                        )));
                    }
                } else {
                    same_marker = 0;
                }
                (req.key_marker, req.version_id_marker) = marker;
            }
            _ => return Ok(all),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const INTERLEAVED: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<ListVersionsResult><Name>b</Name><Prefix></Prefix><KeyMarker></KeyMarker><VersionIdMarker></VersionIdMarker>
<NextKeyMarker>b%20c</NextKeyMarker><NextVersionIdMarker>v1</NextVersionIdMarker><MaxKeys>4</MaxKeys><EncodingType>url</EncodingType><IsTruncated>true</IsTruncated>
<DeleteMarker><Key>a</Key><VersionId>d3</VersionId><IsLatest>true</IsLatest><LastModified>2026-01-01T00:00:03.000Z</LastModified></DeleteMarker>
<Version><Key>a</Key><VersionId>v2</VersionId><IsLatest>false</IsLatest><LastModified>2026-01-01T00:00:02.000Z</LastModified><ETag>&quot;e2&quot;</ETag><Size>2</Size><StorageClass>STANDARD</StorageClass></Version>
<Version><Key>b%20c</Key><VersionId>v1</VersionId><IsLatest>true</IsLatest><LastModified>2026-01-01T00:00:01.000Z</LastModified><ETag>&quot;e1&quot;</ETag><Size>1</Size><StorageClass>STANDARD</StorageClass></Version>
</ListVersionsResult>"#;

    #[test]
    fn an_interleaved_page_keeps_its_order_and_decodes_keys() {
        let page = parse_versions(INTERLEAVED).unwrap();
        let got: Vec<(&str, &str, bool, bool)> = page
            .versions
            .iter()
            .map(|v| {
                (
                    v.object.key.as_str(),
                    v.version_id.as_str(),
                    v.is_latest,
                    v.is_delete_marker,
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                ("a", "d3", true, true),
                ("a", "v2", false, false),
                ("b c", "v1", true, false)
            ]
        );
        assert_eq!(page.versions[1].object.etag.as_deref(), Some("e2"));
        assert_eq!(page.versions[1].object.size, 2);
        assert_eq!(page.versions[0].object.size, 0);
        assert_eq!(page.next, Some(("b c".into(), Some("v1".into()))));
    }

    /// moto's answer: all versions, then all delete markers.
    #[test]
    fn a_page_of_versions_then_delete_markers_is_merged_by_key_and_time() {
        let xml = r#"<ListVersionsResult><IsTruncated>false</IsTruncated><KeyMarker/>
<Version><Key>a</Key><VersionId>v2</VersionId><IsLatest>false</IsLatest><LastModified>2026-01-01T00:00:02.500Z</LastModified><Size>2</Size></Version>
<Version><Key>a</Key><VersionId>v1</VersionId><IsLatest>false</IsLatest><LastModified>2026-01-01T00:00:01.000Z</LastModified><Size>1</Size></Version>
<Version><Key>c</Key><VersionId>null</VersionId><IsLatest>true</IsLatest><LastModified>2026-01-01T00:00:01.000Z</LastModified><Size>1</Size></Version>
<DeleteMarker><Key>a</Key><VersionId>d3</VersionId><IsLatest>true</IsLatest><LastModified>2026-01-01T00:00:03.000Z</LastModified></DeleteMarker>
<DeleteMarker><Key>b</Key><VersionId>d1</VersionId><IsLatest>true</IsLatest><LastModified>2026-01-01T00:00:09.000Z</LastModified></DeleteMarker>
<Name>b</Name><Prefix/><MaxKeys>1000</MaxKeys></ListVersionsResult>"#;
        let page = parse_versions(xml).unwrap();
        let ids: Vec<&str> = page.versions.iter().map(|v| v.version_id.as_str()).collect();
        assert_eq!(ids, ["d3", "v2", "v1", "d1", "null"]);
        assert_eq!(page.next, None);
    }

    /// The store's order is kept whatever the times say (a multipart
    /// version dated at its upload's start, older than the version before
    /// it and than a delete marker after it), and whatever else the page
    /// holds: the versions of `a` are in one order alone on a page, with a
    /// delete marker before a version of another key, or split over pages.
    #[test]
    fn a_page_in_the_stores_layout_keeps_its_order_whatever_the_times() {
        let entry = |kind: &str, key: &str, id: &str, secs: u32| {
            let size = if kind == "Version" { "<Size>1</Size>" } else { "" };
            format!("<{kind}><Key>{key}</Key><VersionId>{id}</VersionId><LastModified>2026-01-01T00:00:{secs:02}.000Z</LastModified>{size}</{kind}>")
        };
        let page = |entries: &[String], next: Option<(&str, &str)>| {
            let (truncated, markers) = match next {
                Some((k, v)) => (
                    "true",
                    format!(
                        "<NextKeyMarker>{k}</NextKeyMarker><NextVersionIdMarker>{v}</NextVersionIdMarker>"
                    ),
                ),
                None => ("false", String::new()),
            };
            let xml = format!(
                "<ListVersionsResult><Name>b</Name><Prefix/>{markers}<IsTruncated>{truncated}</IsTruncated>{}</ListVersionsResult>",
                entries.concat()
            );
            parse_versions(&xml)
                .unwrap()
                .versions
                .into_iter()
                .map(|v| v.version_id)
                .collect::<Vec<_>>()
        };
        let a = [
            entry("Version", "a", "v3", 1),
            entry("Version", "a", "v2", 2),
            entry("DeleteMarker", "a", "d1", 3),
        ];
        assert_eq!(page(&a, None), ["v3", "v2", "d1"]);
        let with_other = [
            entry("DeleteMarker", "0", "d0", 9),
            a[0].clone(),
            a[1].clone(),
            a[2].clone(),
        ];
        assert_eq!(page(&with_other, None), ["d0", "v3", "v2", "d1"]);
        let mut split = page(&a[..2], Some(("a", "v2")));
        split.extend(page(&a[2..], None));
        assert_eq!(split, ["v3", "v2", "d1"]);
    }

    /// A truncated page without a version marker (or with an empty one)
    /// whose key marker is its last entry's key goes on from that entry.
    #[test]
    fn a_missing_version_marker_is_the_last_entry_of_its_key() {
        let xml = |marker: &str| {
            format!("<ListVersionsResult><Name>b</Name><NextKeyMarker>a</NextKeyMarker>{marker}<IsTruncated>true</IsTruncated><Version><Key>a</Key><VersionId>v2</VersionId><Size>1</Size></Version></ListVersionsResult>")
        };
        for marker in ["", "<NextVersionIdMarker></NextVersionIdMarker>"] {
            let page = parse_versions(&xml(marker)).unwrap();
            assert_eq!(page.next, Some(("a".into(), Some("v2".into()))), "{marker:?}");
        }
        let minio = xml("").replace("<NextKeyMarker>a<", "<NextKeyMarker>a[minio_cache:v2,p:0]<");
        assert_eq!(
            parse_versions(&minio).unwrap().next,
            Some(("a[minio_cache:v2,p:0]".into(), Some("v2".into())))
        );
        let other_key = xml("").replace("<NextKeyMarker>a<", "<NextKeyMarker>b<");
        assert!(matches!(parse_versions(&other_key), Err(S3Error::BadAnswer(_))));
    }

    fn listed(key: &str, id: &str) -> ListedVersion {
        ListedVersion {
            object: ListedObject {
                key: key.into(),
                ..ListedObject::default()
            },
            version_id: id.into(),
            ..ListedVersion::default()
        }
    }

    /// Several versions of one key pass; one listed again (a page served
    /// twice) is dropped; a key that goes backwards fails the listing, also
    /// across pages; what lies at or before the start is dropped.
    #[tokio::test]
    async fn versions_of_one_key_pass_repeats_drop_and_disorder_fails() {
        let s3 = S3::connect_with(
            crate::s3::Endpoint {
                url: Some("http://127.0.0.1:9".into()),
                region: "us-east-1".into(),
                path_style: true,
                ca_pem: None,
                insecure: false,
                pool_size: 1,
                allowlist: None,
                max_answer_bytes: None,
            },
            Some(aws_credential_types::Credentials::new(
                "a", "b", None, None, "test",
            )),
        )
        .await
        .unwrap();
        let start = VersionMarker {
            key: Some("b".into()),
            version_id: None,
        };
        let mut pages = VersionPages::new(&s3, "bucket", "", start, 10);
        let ids = |page: Vec<ListedVersion>| page.into_iter().map(|v| v.version_id).collect::<Vec<_>>();
        let page = vec![
            listed("a", "x"),
            listed("b", "y"),
            listed("c", "3"),
            listed("c", "2"),
        ];
        assert_eq!(ids(pages.in_order(page).unwrap()), ["3", "2"]);
        let again = vec![listed("c", "2"), listed("c", "1"), listed("d", "1")];
        assert_eq!(ids(pages.in_order(again).unwrap()), ["1", "1"]);
        let backwards = vec![listed("d", "0"), listed("c", "0")];
        assert!(matches!(
            pages.in_order(backwards),
            Err(S3Error::ListingOutOfOrder(_))
        ));
        let mut pages = VersionPages::new(&s3, "bucket", "", VersionMarker::default(), 10);
        assert!(matches!(
            pages.in_order(vec![listed("b", "1"), listed("a", "1")]),
            Err(S3Error::ListingOutOfOrder(_))
        ));
    }

    #[test]
    fn a_version_without_an_id_or_size_is_an_error() {
        let no_id = "<ListVersionsResult><Version><Key>a</Key><Size>1</Size></Version></ListVersionsResult>";
        assert!(matches!(parse_versions(no_id), Err(S3Error::BadAnswer(_))));
        let no_size = "<ListVersionsResult><Version><Key>a</Key><VersionId>v</VersionId></Version></ListVersionsResult>";
        assert!(parse_versions(no_size).is_err());
    }

    #[test]
    fn the_query_is_canonical() {
        let req = ListVersionsRequest {
            prefix: "p/".into(),
            max_keys: 2,
            ..Default::default()
        };
        assert_eq!(
            versions_query(&req, Some("a b"), Some("v/1")),
            "encoding-type=url&key-marker=a%20b&max-keys=2&prefix=p%2F&version-id-marker=v%2F1&versions="
        );
    }
}
