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
//! May import: `record`, `format`, `filter`, `column_options`, `parquet`, `dataset`,
//! `store_check`, `keyspace::shard` and `s3`.

use crate::keyspace::shard::Shard;
use crate::s3::error::S3Error;
use crate::s3::types::ListedObject;
use crate::s3::S3;
use crate::scan::column_options::ColumnOptions;
use crate::scan::dataset::{Block, DataFile};
use crate::scan::filter::ObjectFilter;
use crate::scan::format::{is_csv_header, parse_csv_record, take_csv_rows, Format};
use crate::scan::record::{Record, Status, RECORD_FORMAT};
use crate::scan::store_check::{unix_secs, StoreCheck};
use serde::Deserialize;
use std::collections::VecDeque;
use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

/// Bytes of a text file fetched per GET. Every shard in flight holds one,
/// and its records decoded: at 8 MiB, 64 shards held 512 MiB of chunks on
/// pages the kernel zeroed fresh, 12 % of an incremental scan's CPU. At
/// 2 MiB a GET still takes well under a LIST page's share of a shard's
/// time on AWS (some 7,500 keys a GET, against 7.5 pages of 1,000).
pub const CHUNK: u64 = 2 << 20;

/// Records decoded at a time from a chunk of a text file.
const BATCH: usize = 512;

/// The most of a manifest read: a bigger object is not one bucketscan wrote
/// (the manifest of a 10^9-object result, its files and their blocks, is a
/// few MiB). Read with a range, so a planner never holds more.
pub const MAX_MANIFEST_BYTES: u64 = 64 << 20;

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
    /// A fleet merge that left dead shards' ranges out (`merge::Manifest`).
    #[serde(default)]
    partial: bool,
    store_check: Option<StoreCheck>,
    /// A fleet scan's store check that failed or did not settle.
    store_check_error: Option<String>,
    #[serde(default)]
    filter: ObjectFilter,
    /// `None`: a release before the columns of `s3::columns`.
    columns: Option<ColumnOptions>,
    /// The form of its JSON lines; `None`: a release before it.
    record_format: Option<u32>,
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
    #[serde(default)]
    filter: ObjectFilter,
    columns: Option<ColumnOptions>,
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
    /// The filter its scan applied to the listing (`scan::filter`).
    pub filter: ObjectFilter,
    /// The optional columns its scan filled.
    pub columns: ColumnOptions,
    /// Its scan's store check: when it started, in the store's time.
    pub check: StoreCheck,
    /// Unix seconds of `check.started`.
    started: i64,
    /// Bytes of baseline files read so far.
    pub bytes_read: AtomicU64,
    /// Its records are of the form this release writes: a JSON Lines
    /// baseline's unchanged record is written as its line
    /// (`Record::verbatim`; the decoder keeps lines of JSON Lines only).
    keeps_lines: bool,
}

impl Baseline {
    /// Read and check the manifest at `location` (`s3://bucket/key`).
    pub async fn load(s3: &S3, location: &str) -> Result<Baseline, BaselineError> {
        let (bucket, key) =
            split_location(location).ok_or_else(|| BaselineError::Location(location.into()))?;
        let range = format!("bytes=0-{}", MAX_MANIFEST_BYTES - 1);
        let body = s3
            .get(bucket, key, Some(&range))
            .await
            .map_err(|source| BaselineError::Read {
                location: location.into(),
                source,
            })?;
        if body.len() as u64 >= MAX_MANIFEST_BYTES {
            return Err(BaselineError::NotAManifest {
                location: location.into(),
                reason: format!(
                    "it is {MAX_MANIFEST_BYTES} bytes or more, larger than any manifest bucketscan writes"
                ),
            });
        }
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
        // A reason names the field, never a value: the object may be any
        // answer of the endpoint, and the message goes to the scan's status.
        let view: ManifestView = serde_json::from_slice(body).map_err(|e| {
            not(format!(
                "not the JSON of a manifest (line {}, column {})",
                e.line(),
                e.column()
            ))
        })?;
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
                    .map_err(|_| not("its format is not one bucketscan writes".into()))?,
                view.gzip.unwrap_or(false),
                view.only_with_metadata.unwrap_or(false),
            ),
            (None, None) => return Err(not("it names no bucket".into())),
        };
        if view.partial || view.shards_dead.unwrap_or(0) > 0 {
            return Err(refused(format!(
                "it is a partial result ({} shards dead): objects of their ranges are missing from it, \
                 and an incremental scan would take them as deleted; use a complete scan, or retry that \
                 one (kubectl bucketscan retry) until it is complete",
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
        let check =
            match (view.store_check, view.store_check_error) {
                (Some(check), _) => check,
                // Not quoted: the manifest is the tenant's to write.
                (None, Some(_)) => return Err(refused(
                    "its store check failed or did not settle (its manifest's store_check_error says why): \
                     run a full scan again and use it as the baseline"
                        .into(),
                )),
                (None, None) => {
                    return Err(refused(
                        "it has no store check (written by a release before incremental scans): \
                     run one full scan first and use it as the baseline"
                            .into(),
                    ))
                }
            };
        let started = unix_secs(&check.started)
            .ok_or_else(|| not("its store_check.started is not an RFC 3339 time".into()))?;
        let columns = match &view.spec {
            Some(spec) => spec.columns,
            None => view.columns,
        }
        .ok_or_else(|| {
            refused(
                "it was written by a release before the encryption, checksum, object lock and \
                 replication columns: its records lack them, and records taken from it would too; \
                 run one full scan first and use it as the baseline"
                    .into(),
            )
        })?;
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
            filter: match &view.spec {
                Some(spec) => spec.filter.clone(),
                None => view.filter.clone(),
            },
            columns,
            check,
            started,
            bytes_read: AtomicU64::new(0),
            keeps_lines: view.record_format == Some(RECORD_FORMAT),
        })
    }

    /// Refuse a baseline of another bucket, prefix, format, filter or
    /// optional columns than the scan's.
    pub fn admit(
        &self,
        bucket: &str,
        prefix: &str,
        format: Format,
        filter: &ObjectFilter,
        columns: &ColumnOptions,
    ) -> Result<(), BaselineError> {
        let refused = |reason: String| BaselineError::Refused {
            location: self.location.clone(),
            reason,
        };
        // Only this scan's values are named (see `parse`).
        if self.bucket != bucket {
            return Err(refused(format!(
                "it is a scan of another bucket than this scan's ({bucket:?})"
            )));
        }
        if self.prefix != prefix {
            return Err(refused(format!(
                "it is a scan of another prefix than this scan's ({prefix:?})"
            )));
        }
        if self.format != format {
            return Err(refused(format!(
                "its format is {}, this scan's is {}: the change set and the result keep one format",
                self.format.extension(false),
                format.extension(false)
            )));
        }
        if self.filter != *filter {
            // This scan's filter only (see `parse`).
            let json = serde_json::to_string(filter).unwrap_or_default();
            return Err(refused(format!(
                "its scan's filter is not this scan's ({json}): an object only one of them keeps would \
                 count as added or removed; use a baseline scanned with the same filter"
            )));
        }
        if columns.tags {
            return Err(refused(
                "this scan fills object_tags (--tags, spec.columns.tags), and tags change without moving \
                 an object's ETag or LastModified: records taken from a baseline would keep old tags; \
                 run scans with tags without a baseline"
                    .into(),
            ));
        }
        if columns.versions {
            return Err(refused(
                "this scan lists every version (--versions, spec.columns.versions), and incremental \
                 scans compare one record per key: run scans of versions without a baseline"
                    .into(),
            ));
        }
        if self.columns != *columns {
            return Err(refused(format!(
                "its scan's optional columns ({}) are not this scan's ({}): records taken from it \
                 would lack a column or hold one this scan does not fill; use a baseline scanned \
                 with the same column flags (spec.columns), or run a full scan",
                self.columns.describe(),
                columns.describe()
            )));
        }
        Ok(())
    }

    /// Refuse a baseline that started after this scan did (`started`: this
    /// scan's store check): a time of another clock, or a crafted one,
    /// would let records be trusted that no HEAD ever read.
    pub fn admit_start(&self, started: &str) -> Result<(), BaselineError> {
        match unix_secs(started) {
            Some(now) if self.started > now => Err(BaselineError::Refused {
                location: self.location.clone(),
                reason: "it started after this scan did, by the store's clock: it is not an earlier result"
                    .into(),
            }),
            _ => Ok(()),
        }
    }

    /// The baseline record `old` still describes the listed object `obj`:
    /// a readable record of the same size, ETag and LastModified, whose
    /// LastModified is [`SAFETY_SECS`] older than the baseline scan's start
    /// (so no change after its HEAD can have kept the same second), and
    /// none of the columns that change without moving LastModified: a
    /// replication still `PENDING`, an object lock (its retention may be
    /// extended, its legal hold lifted). Only valid where this scan's store
    /// check saw LastModified move.
    pub fn reusable(&self, old: &Record, obj: &ListedObject) -> bool {
        let listed = obj.last_modified.as_deref().and_then(unix_secs);
        let recorded = old.last_modified.as_deref().and_then(unix_secs);
        // The baseline's own check too: a metadata replace made while the
        // store kept LastModified would not show in the listing now.
        self.check.last_modified_moves
            && old.status == Status::Ok
            && old.missing_metadata.is_none()
            && old.size == obj.size
            && old.etag.is_some()
            && old.etag == obj.etag
            && listed.is_some()
            && listed == recorded
            && listed.is_some_and(|t| t + SAFETY_SECS <= self.started)
            && !moves_in_place(old)
    }

    /// Where the baseline's blocks begin (each file's, where it has none),
    /// and about how many records each holds, by its share of its file's
    /// bytes: a plan for a scan against it
    /// (`keyspace::planner::plan_from_marks`) that needs no LIST, and
    /// whose shards each read their baseline from the block they begin at.
    pub fn marks(&self) -> Vec<(String, u64)> {
        let mut marks = Vec::new();
        for f in &self.files {
            let Some(first) = &f.first_key else { continue };
            if f.blocks.is_empty() || f.bytes == 0 {
                marks.push((first.clone(), f.records));
                continue;
            }
            let ends = f.blocks.iter().skip(1).map(|b| b.offset).chain([f.bytes]);
            for (b, end) in f.blocks.iter().zip(ends) {
                // At most a record a byte: the counts are the manifest's word.
                let bytes = end.saturating_sub(b.offset);
                let share = u128::from(bytes) * u128::from(f.records) / u128::from(f.bytes);
                marks.push((b.first_key.clone(), share.min(u128::from(bytes)) as u64));
            }
        }
        marks
    }

    /// The baseline's records of `shard`'s range, in key order (thin ones
    /// of a JSON Lines baseline: see [`thick`]).
    pub fn range(self: &Arc<Self>, s3: Arc<S3>, shard: &Shard) -> RangeReader {
        let bounds = Bounds::of(shard);
        let files = self
            .files
            .iter()
            .filter(|f| file_meets(f, &bounds))
            .cloned()
            .collect();
        RangeReader {
            baseline: self.clone(),
            s3,
            bounds,
            files,
            buffered: VecDeque::new(),
            open: None,
        }
    }
}

/// Does the record hold a column the store may change without moving the
/// object's LastModified? Replication goes from `PENDING` to `COMPLETED` or
/// `FAILED`; PutObjectRetention and PutObjectLegalHold change an object
/// lock in place.
fn moves_in_place(old: &Record) -> bool {
    let c = &old.columns;
    c.replication_status.as_deref() == Some("PENDING")
        || c.object_lock_mode.is_some()
        || c.object_lock_legal_hold == Some(true)
}

/// `s3://bucket/key` as (bucket, key).
pub fn split_location(location: &str) -> Option<(&str, &str)> {
    let rest = location.strip_prefix("s3://")?;
    let (bucket, key) = rest.split_once('/')?;
    (!bucket.is_empty() && !key.is_empty()).then_some((bucket, key))
}

/// A shard's keys: at or after `from` (its prefix: a shard of one whole
/// prefix has neither a start nor an end, and must not read the whole
/// baseline), after `after` and before `before` where given.
#[derive(Clone)]
struct Bounds {
    from: String,
    after: Option<String>,
    before: Option<String>,
}

impl Bounds {
    fn of(shard: &Shard) -> Bounds {
        let before = match (
            shard.end.clone(),
            crate::keyspace::shard::prefix_end(&shard.prefix),
        ) {
            (Some(e), Some(p)) => Some(e.min(p)),
            (e, p) => e.or(p),
        };
        Bounds {
            from: shard.prefix.clone(),
            after: shard.start_after.clone(),
            before,
        }
    }

    /// No key at or past `key` is in the range.
    fn is_past(&self, key: &str) -> bool {
        self.before.as_deref().is_some_and(|b| key >= b)
    }

    /// `key` comes before the range's first key.
    fn is_before(&self, key: &str) -> bool {
        key < self.from.as_str() || self.after.as_deref().is_some_and(|a| key <= a)
    }

    fn contains(&self, key: &str) -> bool {
        !self.is_before(key) && !self.is_past(key)
    }

    /// A key no later than the range's first (reading may start at the
    /// block that begins at or before it).
    fn lower(&self) -> &str {
        match &self.after {
            Some(a) if a.as_str() > self.from.as_str() => a,
            _ => &self.from,
        }
    }
}

/// Whether file `f`'s keys may meet the range.
fn file_meets(f: &DataFile, bounds: &Bounds) -> bool {
    let (Some(first), Some(last)) = (&f.first_key, &f.last_key) else {
        return false; // an empty file
    };
    let after_start =
        last.as_str() >= bounds.from.as_str() && bounds.after.as_deref().is_none_or(|s| last.as_str() > s);
    after_start && !bounds.is_past(first)
}

/// Reads one range's baseline records.
pub struct RangeReader {
    baseline: Arc<Baseline>,
    s3: Arc<S3>,
    bounds: Bounds,
    /// Files still to read, in key order.
    files: VecDeque<DataFile>,
    /// Records read and not taken yet, in key order (boxed: each is moved
    /// on through the engine's channels, see `engine::Entry::Reused`).
    buffered: VecDeque<Box<Record>>,
    open: Option<OpenFile>,
}

/// Where reading one file got to.
struct OpenFile {
    bucket: String,
    key: String,
    file: DataFile,
    /// Next byte to fetch (text formats), or the row groups left (Parquet).
    next: u64,
    /// Where fetching ends (text formats): the first block past the range,
    /// or the file's end.
    stop: u64,
    row_groups: VecDeque<usize>,
    parquet: Option<crate::scan::parquet::RemoteFile>,
    text: TextDecoder,
    done: bool,
}

impl RangeReader {
    /// The next record, if its key is before `key` (`None`: at the end of
    /// the range): an object no longer listed, so decoded whole ([`thick`]:
    /// it goes to the change set). One at a time: a shard whose objects
    /// were all deleted holds one chunk of its baseline, not all of it.
    pub async fn next_before(&mut self, key: Option<&str>) -> Result<Option<Box<Record>>, S3Error> {
        if self.buffered.is_empty() && !self.fill().await? {
            return Ok(None);
        }
        let next = self.buffered.front().expect("filled");
        if key.is_some_and(|k| next.key.as_str() >= k) {
            return Ok(None);
        }
        self.buffered.pop_front().map(thick).transpose()
    }

    /// The record of `key`, once every record before it was taken
    /// (`next_before`): thin where the baseline is read thin, for the
    /// caller to take unchanged or [`thick`]en.
    pub async fn take(&mut self, key: &str) -> Result<Option<Box<Record>>, S3Error> {
        if self.buffered.is_empty() && !self.fill().await? {
            return Ok(None);
        }
        let next = self.buffered.front().expect("filled");
        Ok((next.key == key).then(|| self.buffered.pop_front()).flatten())
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
            for mut record in records {
                if self.bounds.is_past(&record.key) {
                    past_end = true;
                    break;
                }
                // Listed, then gone by its HEAD: not there at the baseline's end.
                if !self.bounds.contains(&record.key) || record.status == Status::Vanished {
                    continue;
                }
                as_result(&mut record);
                self.buffered.push_back(Box::new(record));
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
            next: start_offset(&file, &self.bounds),
            stop: stop_offset(&file, &self.bounds),
            file,
            row_groups: VecDeque::new(),
            parquet: None,
            text: TextDecoder::new(self.baseline.format, self.baseline.gzip)
                .skipping_before(&self.bounds)
                .keeping_lines(self.baseline.keeps_lines),
            done: false,
        };
        if self.baseline.format == Format::Parquet {
            let remote =
                crate::scan::parquet::RemoteFile::open(&self.s3, &open.bucket, &open.key, open.file.bytes)
                    .await
                    .map_err(|e| S3Error::Other(format!("baseline file {}: {e}", open.file.location)))?;
            open.row_groups = remote
                .row_groups_meeting(Some(self.bounds.lower()), self.bounds.before.as_deref())
                .into();
            self.baseline.bytes_read.fetch_add(remote.bytes_read(), Relaxed);
            open.parquet = Some(remote);
        }
        Ok(open)
    }
}

/// Where to start reading `file` for the range: the last block starting at
/// or before its lower bound (keys before it cannot be in the range), or
/// the next one where no key lies between the range's exclusive start and
/// that block's first key. A range planned to begin at key `K` starts
/// after `key_before(K)`, below `K`: a shard planned from the baseline's
/// blocks (`planner::plan_from_marks`) read the whole block before its own.
fn start_offset(file: &DataFile, bounds: &Bounds) -> u64 {
    let start = bounds.lower();
    let at_or_before = file
        .blocks
        .iter()
        .take_while(|b| b.first_key.as_str() <= start)
        .count();
    let begins_the_range = |b: &Block| {
        bounds.after.as_deref().is_some_and(|after| {
            crate::keyspace::shard::key_before(&b.first_key).is_some_and(|k| k.as_str() <= after)
        })
    };
    match file.blocks.get(at_or_before) {
        Some(next) if begins_the_range(next) => next.offset,
        _ => at_or_before.checked_sub(1).map_or(0, |i| file.blocks[i].offset),
    }
}

/// Where reading `file` for the range may end: the first block that starts
/// at or past the range's end (its keys, and every later one, are past it),
/// else the file's end. Without it a shard's last GET read a whole chunk
/// past its range: a merged result read by more shards than it was written
/// by cost up to a chunk ([`CHUNK`]) more per shard.
fn stop_offset(file: &DataFile, bounds: &Bounds) -> u64 {
    bounds
        .before
        .as_deref()
        .and_then(|before| file.blocks.iter().find(|b| b.first_key.as_str() >= before))
        .map_or(file.bytes, |b| b.offset.min(file.bytes))
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
    // Records already fetched first, a batch at a time: a chunk held some
    // 30,000 at 8 MiB (7,500 now), and decoding all of them at once made a
    // vector (and the queue it went to) of ~10 MB per shard, on fresh
    // pages each time: the kernel's page clearing alone was 13 % of an
    // incremental scan's CPU.
    let batch = open.text.batch(BATCH).map_err(|e| bad_file(open, e))?;
    if !batch.is_empty() {
        return Ok(batch);
    }
    if open.next >= open.stop {
        open.done = true;
        return open.text.finish().map_err(|e| bad_file(open, e));
    }
    let end = (open.next + CHUNK).min(open.stop) - 1;
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
    open.text.push(&chunk).map_err(|e| bad_file(open, e))?;
    open.text.batch(BATCH).map_err(|e| bad_file(open, e))
}

fn bad_file(open: &OpenFile, reason: String) -> S3Error {
    S3Error::Other(format!("baseline file {}: {reason}", open.file.location))
}

/// Turns a text file's bytes, fetched in chunks, into records.
struct TextDecoder {
    format: Format,
    gunzip: Option<flate2::write::MultiGzDecoder<Vec<u8>>>,
    /// Decoded bytes not yet records, from `start` on.
    pending: Vec<u8>,
    start: usize,
    /// JSON Lines before the range, until its first: only their key is
    /// read (`Skip`).
    skip: Option<Skip>,
    /// Keep each JSON line with its record (`Record::verbatim`).
    keep_lines: bool,
}

/// The keys before a range, which reading a file from the block before it
/// passes first. A block is a worker's part (50,000 records by default),
/// so a shard of a fleet's result read some half a part before its range:
/// decoded in full, those records were most of an incremental shard's
/// decoding. Their key alone is read (no allocation), and nothing else.
struct Skip(Bounds);

impl Skip {
    /// Is this JSON line's record before the range?
    fn passes(&self, line: &[u8]) -> Result<bool, String> {
        #[derive(Deserialize)]
        struct KeyOnly<'a> {
            #[serde(borrow)]
            key: std::borrow::Cow<'a, str>,
        }
        let key = serde_json::from_slice::<KeyOnly>(line)
            .map_err(|e| format!("bad JSON line: {e}"))?
            .key;
        Ok(self.0.is_before(&key))
    }
}

/// The record of one JSON line, unless it is before the range (`skip`,
/// cleared at the first line in it: keys are in order).
fn json_line(skip: &mut Option<Skip>, keep: bool, line: &[u8]) -> Result<Option<Record>, String> {
    if let Some(s) = skip {
        if s.passes(line)? {
            return Ok(None);
        }
        *skip = None;
    }
    json_record(line, keep).map(Some)
}

impl TextDecoder {
    fn new(format: Format, gzip: bool) -> TextDecoder {
        TextDecoder {
            format,
            gunzip: gzip.then(|| flate2::write::MultiGzDecoder::new(Vec::new())),
            pending: Vec::new(),
            start: 0,
            skip: None,
            keep_lines: false,
        }
    }

    /// Keep each JSON line with its record (`keep`: the baseline's lines
    /// are of the form this release writes).
    fn keeping_lines(mut self, keep: bool) -> TextDecoder {
        self.keep_lines = keep && self.format == Format::Jsonl;
        self
    }

    /// Read the records before `bounds`'s range by their key alone.
    fn skipping_before(mut self, bounds: &Bounds) -> TextDecoder {
        self.skip = Some(Skip(bounds.clone()));
        self
    }

    /// Take in the next bytes of the file (records come out by `batch`).
    fn push(&mut self, chunk: &[u8]) -> Result<(), String> {
        // What was decoded goes first: the buffer holds at most one chunk
        // and the start of a record.
        self.pending.drain(..self.start);
        self.start = 0;
        match &mut self.gunzip {
            Some(gz) => {
                gz.write_all(chunk).map_err(|e| format!("gzip: {e}"))?;
                self.pending.append(gz.get_mut());
            }
            None => self.pending.extend_from_slice(chunk),
        }
        Ok(())
    }

    /// At most `max` whole records of the bytes taken in (CSV: all of them).
    fn batch(&mut self, max: usize) -> Result<Vec<Record>, String> {
        match self.format {
            Format::Jsonl => {
                let mut out = Vec::with_capacity(max.min(1024));
                while out.len() < max {
                    let rest = &self.pending[self.start..];
                    let Some(end) = memchr::memchr(b'\n', rest) else {
                        break;
                    };
                    self.start += end + 1;
                    let line = &rest[..end];
                    if !line.is_empty() {
                        out.extend(json_line(&mut self.skip, self.keep_lines, line)?);
                    }
                }
                Ok(out)
            }
            _ => self.records(false),
        }
    }

    /// The rest of the records, at the end of the file (the last may lack
    /// its newline).
    fn finish(&mut self) -> Result<Vec<Record>, String> {
        if let Some(gz) = &mut self.gunzip {
            gz.try_finish().map_err(|e| format!("gzip: {e}"))?;
            self.pending.append(gz.get_mut());
        }
        self.records(true)
    }

    /// The whole records in `pending` (all of it at the end of the file;
    /// JSON Lines only there).
    fn records(&mut self, end: bool) -> Result<Vec<Record>, String> {
        self.pending.drain(..self.start);
        self.start = 0;
        match self.format {
            // Only at the end: before it, JSON Lines come out by `batch`.
            Format::Jsonl => {
                let (skip, keep) = (&mut self.skip, self.keep_lines);
                let records = self
                    .pending
                    .split(|b| *b == b'\n')
                    .filter(|l| !l.is_empty())
                    .filter_map(|l| json_line(skip, keep, l).transpose())
                    .collect();
                self.pending.clear();
                records
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

/// A result's record never carries a change: one that does is read as a
/// result, and written anew, not as its line.
fn as_result(record: &mut Record) {
    if record.change.is_some() || record.previous.is_some() {
        record.change = None;
        record.previous = None;
        record.verbatim.clear();
    }
}

/// The record of a JSON line, keeping the line if `keep`
/// (`Record::verbatim`): an unchanged record is written as it was read.
fn json_record(line: &[u8], keep: bool) -> Result<Record, String> {
    let record = if keep {
        // Thin: most records are taken unchanged, as their line.
        Record::thin_of_line(line)
    } else {
        serde_json::from_slice::<Record>(line)
    };
    record.map_err(|e| format!("bad JSON line: {e}"))
}

/// A baseline record decoded whole ([`Record::thicken`]): one that is not
/// taken unchanged (a removed or changed object's, or one whose storage
/// class moved) goes to the change set or is written anew.
pub fn thick(mut record: Box<Record>) -> Result<Box<Record>, S3Error> {
    record
        .thicken()
        .map_err(|e| S3Error::Other(format!("baseline record of {:?}: bad JSON line: {e}", record.key)))?;
    Ok(record)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest(extra: &str) -> String {
        format!(
            r#"{{"result":"s3://out/x/data/","layout":"dataset","format":"jsonl","gzip":false,
            "bucket":"photos","prefix":"a/","files":[{{"location":"s3://out/x/data/part-00000-0000.jsonl",
            "first_key":"a/1","last_key":"a/9","records":9,"bytes":900,"etag":null}}],"records":9,
            "result_bytes":900,"counts":{{"objects":9,"with_metadata":0,"vanished":0,"errors":0}},
            "shards":1,"created":"2026-11-27T00:00:00Z"{extra}}}"#
        )
    }

    const CHECK: &str = r#","store_check":{"started":"2026-11-27T00:00:10Z","last_modified_moves":true,"detail":"x"},"columns":{}"#;

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
            columns: Default::default(),
            error: None,
            http_status: None,
            change: None,
            previous: None,
            verbatim: Default::default(),
        }
    }

    /// Why `b` is refused for an unfiltered JSONL scan of photos/a/ with
    /// `columns`.
    fn refusal(b: &Baseline, columns: &ColumnOptions) -> String {
        let scan = b.admit("photos", "a/", Format::Jsonl, &ObjectFilter::default(), columns);
        scan.unwrap_err().to_string()
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
        let none = ObjectFilter::default();
        b.admit("photos", "a/", Format::Jsonl, &none, &ColumnOptions::default())
            .unwrap();
        for (bucket, prefix, format, word) in [
            ("other", "a/", Format::Jsonl, "bucket"),
            ("photos", "b/", Format::Jsonl, "prefix"),
            ("photos", "a/", Format::Csv, "format"),
        ] {
            let e = b
                .admit(bucket, prefix, format, &none, &ColumnOptions::default())
                .unwrap_err()
                .to_string();
            assert!(e.contains(word), "{e}");
        }
    }

    /// A baseline holds the objects its filter kept: one scanned with
    /// another filter would make every object only one of them keeps an
    /// added or a removed change.
    #[test]
    fn a_baseline_of_another_filter_is_refused() {
        use crate::scan::filter::FilterSpec;
        let filtered = ObjectFilter::new(FilterSpec {
            include: vec!["a/**/*.csv".into()],
            ..FilterSpec::default()
        })
        .unwrap();
        let with_filter = manifest(&format!("{CHECK},\"filter\":{{\"include\":[\"a/**/*.csv\"]}}"));
        let b = Baseline::parse("s3://out/x/manifest.json", with_filter.as_bytes()).unwrap();
        assert_eq!(b.filter, filtered);
        b.admit(
            "photos",
            "a/",
            Format::Jsonl,
            &filtered,
            &ColumnOptions::default(),
        )
        .unwrap();
        let e = refusal(&b, &ColumnOptions::default());
        assert!(
            e.contains("its scan's filter is not this scan's ({})") && !e.contains("*.csv"),
            "{e}"
        );
        let unfiltered = Baseline::parse("s3://out/x/manifest.json", manifest(CHECK).as_bytes()).unwrap();
        assert!(unfiltered
            .admit(
                "photos",
                "a/",
                Format::Jsonl,
                &filtered,
                &ColumnOptions::default()
            )
            .is_err());
    }

    /// Records taken from a baseline hold the columns its scan filled: one
    /// of a release before the columns, or scanned with other column
    /// flags, would give records unlike this scan's HEADs.
    #[test]
    fn a_baseline_of_other_columns_is_refused() {
        let old_release = manifest(&CHECK.replace(",\"columns\":{}", ""));
        let e = Baseline::parse("s3://out/x/manifest.json", old_release.as_bytes())
            .unwrap_err()
            .to_string();
        assert!(e.contains("release before the encryption, checksum"), "{e}");
        let with_checksums = manifest(&CHECK.replace("{}", "{\"checksums\":true}"));
        let b = Baseline::parse("s3://out/x/manifest.json", with_checksums.as_bytes()).unwrap();
        let checksums = ColumnOptions {
            checksums: true,
            ..ColumnOptions::default()
        };
        let admitted = b.admit(
            "photos",
            "a/",
            Format::Jsonl,
            &ObjectFilter::default(),
            &checksums,
        );
        assert!(admitted.is_ok(), "{admitted:?}");
        let e = refusal(&b, &ColumnOptions::default());
        assert!(
            e.contains("optional columns (--checksums) are not this scan's (none)"),
            "{e}"
        );
        let tags = ColumnOptions {
            checksums: true,
            tags: true,
            ..ColumnOptions::default()
        };
        let e = refusal(&b, &tags);
        assert!(e.contains("run scans with tags without a baseline"), "{e}");
        // A baseline scanned with versions too: refused all the same.
        let versions = ColumnOptions {
            checksums: true,
            versions: true,
            ..ColumnOptions::default()
        };
        let e = refusal(&b, &versions);
        assert!(e.contains("run scans of versions without a baseline"), "{e}");
    }

    #[test]
    fn baselines_that_cannot_be_trusted_are_refused_with_the_reason() {
        let e = Baseline::parse("s3://out/x/manifest.json", manifest("").as_bytes())
            .unwrap_err()
            .to_string();
        assert!(e.contains("no store check"), "{e}");
        // A check that failed or never settled (its planner stopped): said
        // so, without quoting the manifest's words.
        let e = Baseline::parse(
            "s3://out/x/manifest.json",
            manifest(r#","store_check_error":"secret words","columns":{}"#).as_bytes(),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("its store check failed or did not settle"), "{e}");
        assert!(
            !e.contains("secret words") && !e.contains("release before"),
            "{e}"
        );
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
        assert!(e.contains("partial result"), "{e}");
        // A partial manifest says so even where its dead shards' count
        // was cut or lost.
        let e = Baseline::parse(
            "s3://out/x/manifest.json",
            manifest(&format!("{CHECK},\"partial\":true")).as_bytes(),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("partial result") && e.contains("retry"), "{e}");
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
        // Columns that change in place, LastModified unmoved: HEAD again.
        let same = listed("a/1", 5, "\"e\"", "2026-11-27T00:00:08Z");
        let with = |set: &dyn Fn(&mut Record)| {
            let mut r = old.clone();
            set(&mut r);
            b.reusable(&r, &same)
        };
        assert!(!with(&|r| r.columns.replication_status = Some("PENDING".into())));
        assert!(with(&|r| r.columns.replication_status = Some("COMPLETED".into())));
        assert!(!with(&|r| r.columns.object_lock_mode = Some("GOVERNANCE".into())));
        assert!(!with(&|r| r.columns.object_lock_legal_hold = Some(true)));
        assert!(with(&|r| r.columns.object_lock_legal_hold = Some(false)));
        assert!(with(&|r| r.columns.server_side_encryption = Some("AES256".into())));
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
        assert_eq!(start_offset(&f, &Bounds::of(&shard(None))), 0);
        assert_eq!(start_offset(&f, &Bounds::of(&shard(Some("g")))), 0);
        assert_eq!(start_offset(&f, &Bounds::of(&shard(Some("h")))), 100);
        assert_eq!(start_offset(&f, &Bounds::of(&shard(Some("q")))), 200);
        // A range planned to begin at "h" starts after the greatest key
        // below it: no key between, so no byte of the block before.
        let before_h = crate::keyspace::shard::key_before("h").unwrap();
        assert_eq!(start_offset(&f, &Bounds::of(&shard(Some(&before_h)))), 100);
        let before_p = crate::keyspace::shard::key_before("p").unwrap();
        assert_eq!(start_offset(&f, &Bounds::of(&shard(Some(&before_p)))), 200);
        // Just below that: keys between may be in the block before.
        let below = crate::keyspace::shard::key_before(&before_h).unwrap();
        assert_eq!(start_offset(&f, &Bounds::of(&shard(Some(&below)))), 0);
    }

    #[test]
    fn marks_are_where_blocks_begin_with_their_share_of_the_records() {
        let file = |json: &str| -> DataFile { serde_json::from_str(json).unwrap() };
        let mut blocked = file(
            r#"{"location":"s3://o/1","first_key":"a","last_key":"t","records":30,"bytes":400,"etag":null}"#,
        );
        blocked.blocks = [("a", 100), ("h", 200), ("p", 250)]
            .map(|(k, offset)| Block {
                first_key: k.into(),
                offset,
            })
            .to_vec();
        let whole = file(
            r#"{"location":"s3://o/2","first_key":"u","last_key":"z","records":7,"bytes":90,"etag":null}"#,
        );
        let empty = file(
            r#"{"location":"s3://o/3","first_key":null,"last_key":null,"records":0,"bytes":0,"etag":null}"#,
        );
        let mut b = Baseline::parse("s3://o/m/manifest.json", manifest(CHECK).as_bytes()).unwrap();
        b.files = vec![blocked, whole, empty];
        // 100 + 50 + 150 of the first file's 400 bytes (its header before the
        // first block holds no record); the second file whole.
        assert_eq!(
            b.marks(),
            [("a", 7), ("h", 3), ("p", 11), ("u", 7)]
                .map(|(k, n)| (k.to_string(), n))
                .to_vec()
        );
    }

    #[test]
    fn reading_stops_at_the_first_block_past_the_range() {
        let mut f: DataFile = serde_json::from_str(
            r#"{"location":"s3://o/d","first_key":"a","last_key":"z","records":3,"bytes":300,"etag":null}"#,
        )
        .unwrap();
        f.blocks = ["a", "h", "p"]
            .iter()
            .zip([0, 100, 200])
            .map(|(k, offset)| Block {
                first_key: (*k).into(),
                offset,
            })
            .collect();
        let shard = |end: Option<&str>| Shard {
            prefix: String::new(),
            start_after: None,
            end: end.map(String::from),
        };
        assert_eq!(stop_offset(&f, &Bounds::of(&shard(None))), 300);
        // Keys before "h" end in the first block; "h" itself is past.
        assert_eq!(stop_offset(&f, &Bounds::of(&shard(Some("h")))), 100);
        assert_eq!(stop_offset(&f, &Bounds::of(&shard(Some("i")))), 200);
        assert_eq!(stop_offset(&f, &Bounds::of(&shard(Some("zz")))), 300);
        // Without blocks, the whole file.
        f.blocks.clear();
        assert_eq!(stop_offset(&f, &Bounds::of(&shard(Some("h")))), 300);
    }

    #[test]
    fn a_shard_of_one_prefix_reads_only_the_files_and_blocks_of_that_prefix() {
        let file = |first: &str, last: &str| DataFile {
            location: "s3://o/d".into(),
            first_key: Some(first.into()),
            last_key: Some(last.into()),
            records: 1,
            bytes: 1,
            etag: None,
            sha256: None,
            blocks: vec![
                Block {
                    first_key: first.into(),
                    offset: 0,
                },
                Block {
                    first_key: "b/5".into(),
                    offset: 50,
                },
            ],
        };
        // The planner's shard of a whole prefix: no start, no end.
        let b = Bounds::of(&Shard {
            prefix: "b/".into(),
            start_after: None,
            end: None,
        });
        assert!(!file_meets(&file("a/0", "a/9"), &b));
        assert!(!file_meets(&file("c/0", "c/9"), &b));
        assert!(file_meets(&file("a/0", "c/9"), &b));
        assert!(b.is_past("c/0") && !b.is_past("b/zzz") && !b.contains("a/9") && b.contains("b/1"));
        assert_eq!(start_offset(&file("a/0", "c/9"), &b), 0);
        let after = Bounds::of(&Shard {
            prefix: "b/".into(),
            start_after: Some("b/6".into()),
            end: None,
        });
        assert_eq!(start_offset(&file("a/0", "c/9"), &after), 50);
    }

    #[test]
    fn a_baseline_whose_store_kept_last_modified_gives_no_record_without_a_head() {
        let kept = CHECK.replace("\"last_modified_moves\":true", "\"last_modified_moves\":false");
        let b = Baseline::parse("s3://out/x/manifest.json", manifest(&kept).as_bytes()).unwrap();
        let old = record("a/1", 5, "\"e\"", "2026-11-27T00:00:08Z");
        assert!(!b.reusable(&old, &listed("a/1", 5, "\"e\"", "2026-11-27T00:00:08Z")));
    }

    #[test]
    fn a_baseline_that_started_after_this_scan_is_refused() {
        let b = Baseline::parse("s3://out/x/manifest.json", manifest(CHECK).as_bytes()).unwrap();
        b.admit_start("2026-11-28T00:00:00Z").unwrap();
        let e = b.admit_start("2026-11-26T00:00:00Z").unwrap_err().to_string();
        assert!(e.contains("started after this scan"), "{e}");
    }

    #[test]
    fn refusals_never_quote_what_the_manifest_says() {
        let secret = manifest(CHECK).replace("\"photos\"", "\"SECRET-1\"");
        let b = Baseline::parse("s3://out/x/manifest.json", secret.as_bytes()).unwrap();
        let e = refusal(&b, &ColumnOptions::default());
        assert!(!e.contains("SECRET-1") && e.contains("another bucket"), "{e}");
        let e = Baseline::parse(
            "s3://out/x/manifest.json",
            br#"{"bucket": "b", "format": "SECRET-2"}"#,
        )
        .unwrap_err()
        .to_string();
        assert!(!e.contains("SECRET-2"), "{e}");
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
            // Chunks of 37 bytes and batches of 3 records: a record split
            // across chunks, and records left from one chunk when the next
            // comes.
            for chunk in bytes.chunks(37) {
                d.push(chunk).unwrap();
                keys.extend(d.batch(3).unwrap().into_iter().map(|r| r.key));
            }
            loop {
                let batch = d.batch(3).unwrap();
                if batch.is_empty() {
                    break;
                }
                keys.extend(batch.into_iter().map(|r| r.key));
            }
            keys.extend(d.finish().unwrap().into_iter().map(|r| r.key));
            assert_eq!(keys, (0..50).map(|i| format!("k{i:02}")).collect::<Vec<_>>());
        }
    }

    #[test]
    fn lines_before_the_range_are_passed_by_their_key_and_the_rest_decoded() {
        // Keys that JSON escapes too: the key read alone must compare as
        // the decoded one does.
        let keys: Vec<String> = (0..40)
            .map(|i| format!("p/{}{i:02}", if i % 3 == 0 { "\"q\u{e9}" } else { "" }))
            .collect();
        let mut sorted = keys.clone();
        sorted.sort();
        let mut body = Vec::new();
        for k in &sorted {
            record(k, 1, "\"e\"", "2026-11-27T00:00:00Z").write_line(&mut body);
        }
        for (from, after) in [
            ("p/", Some(sorted[17].clone())),
            ("p/1", None),
            ("p/\"", Some("p/\"q".to_string())),
        ] {
            let bounds = Bounds {
                from: from.into(),
                after: after.clone(),
                before: None,
            };
            let mut d = TextDecoder::new(Format::Jsonl, false).skipping_before(&bounds);
            let mut got = Vec::new();
            for chunk in body.chunks(53) {
                d.push(chunk).unwrap();
                got.extend(d.batch(4).unwrap().into_iter().map(|r| r.key));
            }
            got.extend(d.finish().unwrap().into_iter().map(|r| r.key));
            let first = sorted.iter().position(|k| bounds.contains(k)).unwrap();
            assert_eq!(got, sorted[first..], "from {from:?} after {after:?}");
        }
        // A line that is not JSON is still an error, skipped or not.
        let mut d = TextDecoder::new(Format::Jsonl, false).skipping_before(&Bounds {
            from: "z".into(),
            after: None,
            before: None,
        });
        d.push(b"{\"key\": 3}\n").unwrap();
        assert!(d.batch(4).is_err());
    }

    #[test]
    fn a_batch_is_at_most_its_size_and_the_last_line_needs_no_newline() {
        let mut body = Vec::new();
        for i in 0..10 {
            record(&format!("k{i}"), i, "\"e\"", "2026-11-27T00:00:00Z").write_line(&mut body);
        }
        body.pop(); // the last record without its newline
        let mut d = TextDecoder::new(Format::Jsonl, false);
        d.push(&body).unwrap();
        assert_eq!(d.batch(4).unwrap().len(), 4);
        assert_eq!(d.batch(4).unwrap().len(), 4);
        assert_eq!(
            d.batch(4).unwrap().len(),
            1,
            "the last line is not whole until the end"
        );
        assert!(d.batch(4).unwrap().is_empty());
        let last = d.finish().unwrap();
        assert_eq!(last.iter().map(|r| r.key.as_str()).collect::<Vec<_>>(), ["k9"]);
    }

    #[test]
    fn a_chunk_of_more_records_than_a_batch_comes_out_whole_in_order() {
        let mut body = Vec::new();
        for i in 0..(3 * BATCH + 7) {
            record(&format!("k{i:05}"), i as u64, "\"e\"", "2026-11-27T00:00:00Z").write_line(&mut body);
        }
        body.pop();
        let mut d = TextDecoder::new(Format::Jsonl, false);
        d.push(&body).unwrap();
        let mut keys = Vec::new();
        loop {
            let batch = d.batch(BATCH).unwrap();
            assert!(batch.len() <= BATCH);
            if batch.is_empty() {
                break;
            }
            keys.extend(batch.into_iter().map(|r| r.key));
        }
        keys.extend(d.finish().unwrap().into_iter().map(|r| r.key));
        let expected: Vec<String> = (0..(3 * BATCH + 7)).map(|i| format!("k{i:05}")).collect();
        assert_eq!(keys, expected);
    }

    /// A JSON Lines baseline's records keep their lines (written as they
    /// are when reused); one that carries a change (a change set read as a
    /// baseline) is read as a result and loses it.
    #[test]
    fn json_lines_records_keep_their_line_unless_read_as_a_result_anew() {
        let kept = br#"{"key":"a","status":"ok","size":1,"metadata":{}}"#;
        let changed = br#"{"key":"b","status":"ok","size":1,"metadata":{},"change":"added"}"#;
        let record = json_record(kept, true).unwrap();
        assert_eq!(record.verbatim.line(), Some(&kept[..]));
        assert!(json_record(kept, false).unwrap().verbatim.line().is_none());
        let mut record = json_record(kept, true).unwrap();
        as_result(&mut record);
        assert!(record.verbatim.line().is_some());
        let mut record = json_record(changed, true).unwrap();
        as_result(&mut record);
        assert_eq!((record.change, record.verbatim.line().is_some()), (None, false));
        let mut out = Vec::new();
        record.write_line(&mut out);
        assert!(!String::from_utf8(out).unwrap().contains("added"));
    }

    /// Lines are written again as they are only from a baseline whose
    /// manifest says they are of the form this release writes: one of
    /// another release (no form, or another) is decoded and encoded anew.
    #[test]
    fn only_a_baseline_of_this_record_form_keeps_its_lines() {
        let form = |extra: &str| {
            let b = Baseline::parse(
                "s3://out/x/manifest.json",
                manifest(&format!("{CHECK}{extra}")).as_bytes(),
            );
            b.unwrap().keeps_lines
        };
        assert!(form(&format!(r#","record_format":{RECORD_FORMAT}"#)));
        assert!(!form(""));
        assert!(!form(&format!(r#","record_format":{}"#, RECORD_FORMAT + 1)));
    }
}
