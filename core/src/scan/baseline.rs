//! An incremental scan's baseline: an earlier complete result, found by its
//! `manifest.json`, checked to be of the same bucket, prefix and format, and
//! read one shard's key range at a time, in key order, with bounded memory.
//!
//! Reading a range: only the files whose key range meets it; in a file, from
//! the last block (a worker part of a merged file, whose first key and byte
//! offset the manifest lists) that starts at or before the range, in ranged
//! GETs of [`CHUNK`] bytes, until a key past the range. Parquet files are
//! read by row group: the footer first, then only the row groups whose key
//! statistics meet the range. What a range costs in bytes read is counted
//! (`bytes_read`).
//!
//! Which objects may be taken from the baseline without a HEAD: see
//! [`Baseline::reusable`].
//!
//! May import: `record`, `format`, `parquet`, `dataset`, `store_check`,
//! `keyspace::shard` and `s3`.

use crate::keyspace::shard::Shard;
use crate::s3::error::S3Error;
use crate::s3::types::ListedObject;
use crate::s3::S3;
use crate::scan::dataset::DataFile;
use crate::scan::format::{is_csv_header, parse_csv_record, take_csv_rows, Format};
use crate::scan::record::{Record, Status};
use crate::scan::store_check::{unix_secs, StoreCheck};
use serde::Deserialize;
use std::collections::VecDeque;
use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

/// Bytes of a text file fetched per GET.
pub const CHUNK: u64 = 8 << 20;

/// Seconds a LastModified must be older than the baseline scan's start for
/// its record to be trusted without a HEAD: the one-second resolution of
/// LastModified, and one more for clocks of a store's nodes that differ.
pub const SAFETY_SECS: i64 = 2;

#[derive(Debug, thiserror::Error)]
pub enum BaselineError {
    #[error("baseline {0:?} is not s3://BUCKET/KEY of a manifest.json")]
    Location(String),
    #[error("cannot read the baseline manifest {location}: {source}")]
    Read { location: String, source: S3Error },
    #[error("baseline {location} is not a bucketscan manifest: {reason}")]
    NotAManifest { location: String, reason: String },
    #[error("baseline {location} cannot be used: {reason}")]
    Refused { location: String, reason: String },
}

/// The fields of a manifest a baseline needs: a distributed scan's (its
/// `spec`) or a single-process dataset's (top-level fields).
#[derive(Deserialize)]
struct ManifestView {
    spec: Option<SpecView>,
    bucket: Option<String>,
    prefix: Option<String>,
    format: Option<String>,
    gzip: Option<bool>,
    layout: Option<String>,
    only_with_metadata: Option<bool>,
    #[serde(default)]
    files: Vec<DataFile>,
    shards_dead: Option<u64>,
    store_check: Option<StoreCheck>,
}

#[derive(Deserialize)]
struct SpecView {
    bucket: String,
    #[serde(default)]
    prefix: String,
    #[serde(default)]
    format: Format,
    #[serde(default)]
    gzip: bool,
    #[serde(default)]
    only_with_metadata: bool,
}

/// A loaded baseline.
#[derive(Debug)]
pub struct Baseline {
    /// `s3://bucket/key` of its manifest.
    pub location: String,
    pub bucket: String,
    pub prefix: String,
    pub format: Format,
    pub gzip: bool,
    pub files: Vec<DataFile>,
    /// Its scan's store check: when it started, in the store's time.
    pub check: StoreCheck,
    /// Unix seconds of `check.started`.
    started: i64,
    /// Bytes of baseline files read so far.
    pub bytes_read: AtomicU64,
}

impl Baseline {
    /// Read and check the manifest at `location` (`s3://bucket/key`).
    pub async fn load(s3: &S3, location: &str) -> Result<Baseline, BaselineError> {
        let (bucket, key) =
            split_location(location).ok_or_else(|| BaselineError::Location(location.into()))?;
        let body = s3
            .get(bucket, key, None)
            .await
            .map_err(|source| BaselineError::Read {
                location: location.into(),
                source,
            })?;
        Baseline::parse(location, &body)
    }

    /// A baseline from its manifest's bytes.
    pub fn parse(location: &str, body: &[u8]) -> Result<Baseline, BaselineError> {
        let not = |reason: String| BaselineError::NotAManifest {
            location: location.into(),
            reason,
        };
        let refused = |reason: String| BaselineError::Refused {
            location: location.into(),
            reason,
        };
        let view: ManifestView = serde_json::from_slice(body).map_err(|e| not(e.to_string()))?;
        let (bucket, prefix, format, gzip, only_with_metadata) = match (&view.spec, &view.bucket) {
            (Some(spec), _) => (
                spec.bucket.clone(),
                spec.prefix.clone(),
                spec.format,
                spec.gzip,
                spec.only_with_metadata,
            ),
            (None, Some(bucket)) => (
                bucket.clone(),
                view.prefix.clone().unwrap_or_default(),
                view.format
                    .as_deref()
                    .unwrap_or("jsonl")
                    .parse::<Format>()
                    .map_err(|_| not(format!("format {:?}", view.format)))?,
                view.gzip.unwrap_or(false),
                view.only_with_metadata.unwrap_or(false),
            ),
            (None, None) => return Err(not("it names no bucket".into())),
        };
        if view.shards_dead.unwrap_or(0) > 0 {
            return Err(refused(format!(
                "its scan is incomplete ({} shards dead): objects of their ranges are missing from it; \
                 use a complete scan, or retry that one",
                view.shards_dead.unwrap_or(0)
            )));
        }
        if only_with_metadata {
            return Err(refused(
                "its scan kept only objects with metadata (onlyWithMetadata), so it does not hold every \
                 object; a baseline must be a scan of every object"
                    .into(),
            ));
        }
        if view.layout.as_deref() == Some("single") && view.spec.is_none() {
            return Err(refused(
                "a single-file result of `scan` is not in key order".into(),
            ));
        }
        let check = view.store_check.ok_or_else(|| {
            refused(
                "it has no store check (written by a release before incremental scans): \
                 run one full scan first and use it as the baseline"
                    .into(),
            )
        })?;
        let started = unix_secs(&check.started)
            .ok_or_else(|| not(format!("store_check.started {:?} is not RFC 3339", check.started)))?;
        if view.files.is_empty() && view.spec.is_some() {
            // Results of releases before datasets list no files.
            return Err(refused("its manifest lists no files".into()));
        }
        Ok(Baseline {
            location: location.into(),
            bucket,
            prefix,
            format,
            gzip,
            files: view.files,
            check,
            started,
            bytes_read: AtomicU64::new(0),
        })
    }

    /// Refuse a baseline of another bucket, prefix or format than the scan's.
    pub fn admit(&self, bucket: &str, prefix: &str, format: Format) -> Result<(), BaselineError> {
        let refused = |reason: String| BaselineError::Refused {
            location: self.location.clone(),
            reason,
        };
        if self.bucket != bucket {
            return Err(refused(format!(
                "it is a scan of bucket {:?}, this scan's is {bucket:?}",
                self.bucket
            )));
        }
        if self.prefix != prefix {
            return Err(refused(format!(
                "it is a scan of prefix {:?}, this scan's is {prefix:?}",
                self.prefix
            )));
        }
        if self.format != format {
            return Err(refused(format!(
                "its format is {}, this scan's is {}: the change set and the result keep one format",
                self.format.extension(false),
                format.extension(false)
            )));
        }
        Ok(())
    }

    /// The baseline record `old` still describes the listed object `obj`:
    /// a readable record of the same size, ETag and LastModified, whose
    /// LastModified is [`SAFETY_SECS`] older than the baseline scan's start
    /// (so no change after its HEAD can have kept the same second). Only
    /// valid where this scan's store check saw LastModified move.
    pub fn reusable(&self, old: &Record, obj: &ListedObject) -> bool {
        let listed = obj.last_modified.as_deref().and_then(unix_secs);
        let recorded = old.last_modified.as_deref().and_then(unix_secs);
        old.status == Status::Ok
            && old.missing_metadata.is_none()
            && old.size == obj.size
            && old.etag.is_some()
            && old.etag == obj.etag
            && listed.is_some()
            && listed == recorded
            && listed.is_some_and(|t| t + SAFETY_SECS <= self.started)
    }

    /// The baseline's records of `shard`'s range, in key order.
    pub fn range(self: &Arc<Self>, s3: Arc<S3>, shard: &Shard) -> RangeReader {
        let files = self
            .files
            .iter()
            .filter(|f| file_meets(f, shard))
            .cloned()
            .collect();
        RangeReader {
            baseline: self.clone(),
            s3,
            shard: shard.clone(),
            files,
            buffered: VecDeque::new(),
            open: None,
        }
    }
}

/// `s3://bucket/key` as (bucket, key).
pub fn split_location(location: &str) -> Option<(&str, &str)> {
    let rest = location.strip_prefix("s3://")?;
    let (bucket, key) = rest.split_once('/')?;
    (!bucket.is_empty() && !key.is_empty()).then_some((bucket, key))
}

/// Whether file `f`'s keys may meet the shard's range.
fn file_meets(f: &DataFile, shard: &Shard) -> bool {
    let (Some(first), Some(last)) = (&f.first_key, &f.last_key) else {
        return false; // an empty file
    };
    let after_start = shard.start_after.as_deref().is_none_or(|s| last.as_str() > s);
    let before_end = shard.end.as_deref().is_none_or(|e| first.as_str() < e);
    after_start && before_end
}

/// Reads one range's baseline records.
pub struct RangeReader {
    baseline: Arc<Baseline>,
    s3: Arc<S3>,
    shard: Shard,
    /// Files still to read, in key order.
    files: VecDeque<DataFile>,
    /// Records read and not taken yet, in key order.
    buffered: VecDeque<Record>,
    open: Option<OpenFile>,
}

/// Where reading one file got to.
struct OpenFile {
    bucket: String,
    key: String,
    file: DataFile,
    /// Next byte to fetch (text formats), or the row groups left (Parquet).
    next: u64,
    row_groups: VecDeque<usize>,
    parquet: Option<crate::scan::parquet::RemoteFile>,
    text: TextDecoder,
    done: bool,
}

impl RangeReader {
    /// Records with keys before `key`, then the record of `key` itself if
    /// there is one.
    pub async fn up_to(&mut self, key: &str) -> Result<(Vec<Record>, Option<Record>), S3Error> {
        let mut before = Vec::new();
        loop {
            if self.buffered.is_empty() && !self.fill().await? {
                return Ok((before, None));
            }
            let next = self.buffered.front().expect("filled");
            match next.key.as_str().cmp(key) {
                std::cmp::Ordering::Less => before.push(self.buffered.pop_front().expect("front")),
                std::cmp::Ordering::Equal => return Ok((before, self.buffered.pop_front())),
                std::cmp::Ordering::Greater => return Ok((before, None)),
            }
        }
    }

    /// Every record left in the range.
    pub async fn rest(&mut self) -> Result<Vec<Record>, S3Error> {
        let mut rest = Vec::new();
        while !self.buffered.is_empty() || self.fill().await? {
            rest.extend(self.buffered.drain(..));
        }
        Ok(rest)
    }

    /// Read more records of the range into `buffered`; false at its end.
    async fn fill(&mut self) -> Result<bool, S3Error> {
        loop {
            if self.open.is_none() {
                let Some(file) = self.files.pop_front() else {
                    return Ok(false);
                };
                self.open = Some(self.open_file(file).await?);
            }
            let open = self.open.as_mut().expect("opened");
            let records = if open.done {
                Vec::new()
            } else {
                read_more(&self.s3, &self.baseline, open).await?
            };
            let mut past_end = false;
            for record in records {
                if self
                    .shard
                    .start_after
                    .as_deref()
                    .is_some_and(|s| record.key.as_str() <= s)
                    || !record.key.starts_with(&self.shard.prefix)
                {
                    continue;
                }
                if self.shard.is_past_end(&record.key) {
                    past_end = true;
                    break;
                }
                // Listed, then gone by its HEAD: not there at the baseline's end.
                if record.status != Status::Vanished {
                    self.buffered.push_back(record);
                }
            }
            if past_end {
                // Later files start later still.
                self.files.clear();
                open.done = true;
            }
            if open.done {
                self.open = None;
            }
            if !self.buffered.is_empty() {
                return Ok(true);
            }
            if past_end {
                return Ok(false);
            }
        }
    }

    async fn open_file(&self, file: DataFile) -> Result<OpenFile, S3Error> {
        let (bucket, key) = split_location(&file.location)
            .map(|(b, k)| (b.to_string(), k.to_string()))
            .ok_or_else(|| S3Error::Other(format!("baseline file {:?} is not in S3", file.location)))?;
        let mut open = OpenFile {
            bucket,
            key,
            next: start_offset(&file, &self.shard),
            file,
            row_groups: VecDeque::new(),
            parquet: None,
            text: TextDecoder::new(self.baseline.format, self.baseline.gzip),
            done: false,
        };
        if self.baseline.format == Format::Parquet {
            let remote =
                crate::scan::parquet::RemoteFile::open(&self.s3, &open.bucket, &open.key, open.file.bytes)
                    .await
                    .map_err(|e| S3Error::Other(format!("baseline file {}: {e}", open.file.location)))?;
            open.row_groups = remote
                .row_groups_meeting(self.shard.start_after.as_deref(), self.shard.end.as_deref())
                .into();
            self.baseline.bytes_read.fetch_add(remote.bytes_read(), Relaxed);
            open.parquet = Some(remote);
        }
        Ok(open)
    }
}

/// Where to start reading `file` for `shard`: the last block starting at or
/// before the range (keys before it cannot be in the range).
fn start_offset(file: &DataFile, shard: &Shard) -> u64 {
    let Some(start) = shard.start_after.as_deref() else {
        return 0;
    };
    file.blocks
        .iter()
        .take_while(|b| b.first_key.as_str() <= start)
        .last()
        .map_or(0, |b| b.offset)
}

/// The next records of an open file.
async fn read_more(s3: &S3, baseline: &Baseline, open: &mut OpenFile) -> Result<Vec<Record>, S3Error> {
    if let Some(remote) = &open.parquet {
        let Some(group) = open.row_groups.pop_front() else {
            open.done = true;
            return Ok(Vec::new());
        };
        let (records, bytes) = remote
            .read_row_group(s3, group)
            .await
            .map_err(|e| S3Error::Other(format!("baseline file {}: {e}", open.file.location)))?;
        baseline.bytes_read.fetch_add(bytes, Relaxed);
        if open.row_groups.is_empty() {
            open.done = true;
        }
        return Ok(records);
    }
    if open.next >= open.file.bytes {
        open.done = true;
        return open.text.finish().map_err(|e| bad_file(open, e));
    }
    let end = (open.next + CHUNK).min(open.file.bytes) - 1;
    let chunk = s3
        .get(
            &open.bucket,
            &open.key,
            Some(&format!("bytes={}-{end}", open.next)),
        )
        .await?;
    baseline.bytes_read.fetch_add(chunk.len() as u64, Relaxed);
    if chunk.is_empty() {
        open.done = true;
        return open.text.finish().map_err(|e| bad_file(open, e));
    }
    open.next += chunk.len() as u64;
    open.text.push(&chunk).map_err(|e| bad_file(open, e))
}

fn bad_file(open: &OpenFile, reason: String) -> S3Error {
    S3Error::Other(format!("baseline file {}: {reason}", open.file.location))
}

/// Turns a text file's bytes, fetched in chunks, into records.
struct TextDecoder {
    format: Format,
    gunzip: Option<flate2::write::MultiGzDecoder<Vec<u8>>>,
    /// Decoded bytes not yet a whole record.
    pending: Vec<u8>,
}

impl TextDecoder {
    fn new(format: Format, gzip: bool) -> TextDecoder {
        TextDecoder {
            format,
            gunzip: gzip.then(|| flate2::write::MultiGzDecoder::new(Vec::new())),
            pending: Vec::new(),
        }
    }

    fn push(&mut self, chunk: &[u8]) -> Result<Vec<Record>, String> {
        match &mut self.gunzip {
            Some(gz) => {
                gz.write_all(chunk).map_err(|e| format!("gzip: {e}"))?;
                self.pending.append(gz.get_mut());
            }
            None => self.pending.extend_from_slice(chunk),
        }
        self.records(false)
    }

    fn finish(&mut self) -> Result<Vec<Record>, String> {
        if let Some(gz) = &mut self.gunzip {
            gz.try_finish().map_err(|e| format!("gzip: {e}"))?;
            self.pending.append(gz.get_mut());
        }
        self.records(true)
    }

    /// The whole records in `pending` (all of it at the end of the file).
    fn records(&mut self, end: bool) -> Result<Vec<Record>, String> {
        match self.format {
            Format::Jsonl => {
                let cut = match end {
                    true => self.pending.len(),
                    false => self
                        .pending
                        .iter()
                        .rposition(|b| *b == b'\n')
                        .map_or(0, |i| i + 1),
                };
                let whole: Vec<u8> = self.pending.drain(..cut).collect();
                whole
                    .split(|b| *b == b'\n')
                    .filter(|l| !l.is_empty())
                    .map(|l| serde_json::from_slice::<Record>(l).map_err(|e| format!("bad JSON line: {e}")))
                    .collect()
            }
            Format::Csv => {
                let rows = take_csv_rows(&mut self.pending, end)?;
                rows.into_iter()
                    .filter(|row| !is_csv_header(row))
                    .map(|row| parse_csv_record(&row))
                    .collect()
            }
            Format::Parquet => Err("a Parquet file is read by row group".into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scan::dataset::Block;

    fn manifest(extra: &str) -> String {
        format!(
            r#"{{"result":"s3://out/x/data/","layout":"dataset","format":"jsonl","gzip":false,
            "bucket":"photos","prefix":"a/","files":[{{"location":"s3://out/x/data/part-00000-0000.jsonl",
            "first_key":"a/1","last_key":"a/9","records":9,"bytes":900,"etag":null}}],"records":9,
            "result_bytes":900,"counts":{{"objects":9,"with_metadata":0,"vanished":0,"errors":0}},
            "shards":1,"created":"2026-11-27T00:00:00Z"{extra}}}"#
        )
    }

    const CHECK: &str =
        r#","store_check":{"started":"2026-11-27T00:00:10Z","last_modified_moves":true,"detail":"x"}"#;

    fn record(key: &str, size: u64, etag: &str, lm: &str) -> Record {
        Record {
            key: key.into(),
            status: Status::Ok,
            size,
            etag: Some(etag.into()),
            last_modified: Some(lm.into()),
            storage_class: None,
            content_type: None,
            metadata: Default::default(),
            binary_metadata: Vec::new(),
            missing_metadata: None,
            error: None,
            http_status: None,
            change: None,
            previous: None,
        }
    }

    fn listed(key: &str, size: u64, etag: &str, lm: &str) -> ListedObject {
        ListedObject {
            key: key.into(),
            size,
            etag: Some(etag.into()),
            last_modified: Some(lm.into()),
            ..ListedObject::default()
        }
    }

    #[test]
    fn a_dataset_manifest_with_a_store_check_is_a_baseline() {
        let b = Baseline::parse("s3://out/x/manifest.json", manifest(CHECK).as_bytes()).unwrap();
        assert_eq!(
            (b.bucket.as_str(), b.prefix.as_str(), b.format),
            ("photos", "a/", Format::Jsonl)
        );
        b.admit("photos", "a/", Format::Jsonl).unwrap();
        for (bucket, prefix, format, word) in [
            ("other", "a/", Format::Jsonl, "bucket"),
            ("photos", "b/", Format::Jsonl, "prefix"),
            ("photos", "a/", Format::Csv, "format"),
        ] {
            let e = b.admit(bucket, prefix, format).unwrap_err().to_string();
            assert!(e.contains(word), "{e}");
        }
    }

    #[test]
    fn baselines_that_cannot_be_trusted_are_refused_with_the_reason() {
        let e = Baseline::parse("s3://out/x/manifest.json", manifest("").as_bytes())
            .unwrap_err()
            .to_string();
        assert!(e.contains("no store check"), "{e}");
        let e = Baseline::parse(
            "s3://out/x/manifest.json",
            manifest(&format!("{CHECK},\"only_with_metadata\":true")).as_bytes(),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("onlyWithMetadata"), "{e}");
        let e = Baseline::parse(
            "s3://out/x/manifest.json",
            manifest(&format!("{CHECK},\"shards_dead\":2")).as_bytes(),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("incomplete"), "{e}");
        let e = Baseline::parse("s3://out/x/manifest.json", b"[1,2]")
            .unwrap_err()
            .to_string();
        assert!(e.contains("not a bucketscan manifest"), "{e}");
    }

    #[test]
    fn only_records_older_than_the_start_by_the_margin_are_reused() {
        let b = Baseline::parse("s3://out/x/manifest.json", manifest(CHECK).as_bytes()).unwrap();
        let old = record("a/1", 5, "\"e\"", "2026-11-27T00:00:08Z");
        assert!(b.reusable(&old, &listed("a/1", 5, "\"e\"", "2026-11-27T00:00:08.000Z")));
        // Size, ETag or LastModified moved: HEAD.
        assert!(!b.reusable(&old, &listed("a/1", 6, "\"e\"", "2026-11-27T00:00:08Z")));
        assert!(!b.reusable(&old, &listed("a/1", 5, "\"f\"", "2026-11-27T00:00:08Z")));
        assert!(!b.reusable(&old, &listed("a/1", 5, "\"e\"", "2026-11-27T00:00:20Z")));
        // Within the margin of the baseline's start: its HEAD may have seen an
        // earlier state of the same second.
        let recent = record("a/1", 5, "\"e\"", "2026-11-27T00:00:09Z");
        assert!(!b.reusable(&recent, &listed("a/1", 5, "\"e\"", "2026-11-27T00:00:09Z")));
        // A record that is not a full reading is never reused.
        let mut failed = old.clone();
        failed.status = Status::Error;
        assert!(!b.reusable(&failed, &listed("a/1", 5, "\"e\"", "2026-11-27T00:00:08Z")));
        let mut partial = old.clone();
        partial.missing_metadata = Some(1);
        assert!(!b.reusable(&partial, &listed("a/1", 5, "\"e\"", "2026-11-27T00:00:08Z")));
    }

    #[test]
    fn reading_starts_at_the_last_block_before_the_range() {
        let mut f: DataFile = serde_json::from_str(
            r#"{"location":"s3://o/d","first_key":"a","last_key":"z","records":3,"bytes":300,"etag":null}"#,
        )
        .unwrap();
        f.blocks = vec![
            Block {
                first_key: "a".into(),
                offset: 0,
            },
            Block {
                first_key: "h".into(),
                offset: 100,
            },
            Block {
                first_key: "p".into(),
                offset: 200,
            },
        ];
        let shard = |start: Option<&str>| Shard {
            prefix: String::new(),
            start_after: start.map(String::from),
            end: None,
        };
        assert_eq!(start_offset(&f, &shard(None)), 0);
        assert_eq!(start_offset(&f, &shard(Some("g"))), 0);
        assert_eq!(start_offset(&f, &shard(Some("h"))), 100);
        assert_eq!(start_offset(&f, &shard(Some("q"))), 200);
    }

    #[test]
    fn jsonl_records_split_across_chunks_and_gzip_members_come_out_whole() {
        let mut body = Vec::new();
        for i in 0..50 {
            record(&format!("k{i:02}"), i, "\"e\"", "2026-11-27T00:00:00Z").write_line(&mut body);
        }
        // Two gzip members, as concatenated parts are.
        let (a, b) = body.split_at(body.len() / 3);
        let mut gz = Vec::new();
        for half in [a, b] {
            let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            e.write_all(half).unwrap();
            gz.extend(e.finish().unwrap());
        }
        for (bytes, gzip) in [(&body, false), (&gz, true)] {
            let mut d = TextDecoder::new(Format::Jsonl, gzip);
            let mut keys = Vec::new();
            for chunk in bytes.chunks(37) {
                keys.extend(d.push(chunk).unwrap().into_iter().map(|r| r.key));
            }
            keys.extend(d.finish().unwrap().into_iter().map(|r| r.key));
            assert_eq!(keys, (0..50).map(|i| format!("k{i:02}")).collect::<Vec<_>>());
        }
    }
}
