//! The dataset layout of a single-process scan (`scan --layout dataset`):
//! every planned shard writes its own files, in key order, starting a new
//! one once a file reaches the file size, named so that name order is key
//! order (`data/part-SSSSS-FFFF.EXT`: shard, then file within it); then
//! `manifest.json` lists every file with its key range, records, bytes and
//! SHA-256, and the totals. Shards are planned as disjoint key ranges, so
//! files never overlap. Nothing is listed in a manifest before it is whole,
//! and the manifest is written last: a reader that finds it finds a
//! complete dataset.
//!
//! May import: `record`, `format`, `filter`, `column_options`, `output` and `s3`.

use crate::s3::error::S3Error;
use crate::s3::S3;
use crate::scan::column_options::ColumnOptions;
use crate::scan::filter::ObjectFilter;
use crate::scan::output::{Destination, OutputOptions, OutputSummary, RecordWriter};
use crate::scan::record::{Record, Status};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::sync::Arc;

/// One file of a result.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DataFile {
    /// `s3://bucket/key`, or a local path.
    pub location: String,
    /// Key of the first and last record (none for an empty result).
    pub first_key: Option<String>,
    pub last_key: Option<String>,
    pub records: u64,
    pub bytes: u64,
    /// The S3 ETag of the file (an MD5 for one PUT, `md5-of-parts-N` for a
    /// multipart upload): what `HEAD` returns for an unchanged file.
    pub etag: Option<String>,
    /// SHA-256 of the file's bytes, hex, for files written whole by one
    /// process (a file composed on the server by copying parts has none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// Where reading may start in the file: the first key and byte offset
    /// of each block (a worker part of a merged text file, a whole gzip
    /// member), in key order. An incremental scan reads only from the block
    /// before its range (`baseline`). Empty: from the start.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub blocks: Vec<Block>,
}

/// A place in a data file where records, and gzip members, begin.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Block {
    pub first_key: String,
    pub offset: u64,
}

/// Where a dataset goes: an S3 prefix or a local directory (`data/` and
/// `manifest.json` under it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DatasetRoot {
    S3 { bucket: String, prefix: String },
    Dir(PathBuf),
}

impl DatasetRoot {
    /// The dataset under an output given as for the single layout:
    /// `s3://bucket/prefix` (a `/` is added) or a directory; not stdout.
    pub fn of(output: &Destination) -> Result<DatasetRoot, String> {
        match output {
            Destination::Stdout => Err(
                "--layout dataset writes files: give -o s3://BUCKET/PREFIX/ or -o DIRECTORY/, not stdout"
                    .into(),
            ),
            Destination::S3 { bucket, key } => Ok(DatasetRoot::S3 {
                bucket: bucket.clone(),
                prefix: if key.is_empty() || key.ends_with('/') {
                    key.clone()
                } else {
                    format!("{key}/")
                },
            }),
            Destination::File(path) => Ok(DatasetRoot::Dir(path.clone())),
        }
    }

    fn destination(&self, name: &str) -> Destination {
        match self {
            DatasetRoot::S3 { bucket, prefix } => Destination::S3 {
                bucket: bucket.clone(),
                key: format!("{prefix}{name}"),
            },
            DatasetRoot::Dir(dir) => Destination::File(dir.join(name)),
        }
    }

    fn location(&self, name: &str) -> String {
        match self {
            DatasetRoot::S3 { bucket, prefix } => format!("s3://{bucket}/{prefix}{name}"),
            DatasetRoot::Dir(dir) => dir.join(name).display().to_string(),
        }
    }

    /// Where the data files are (what a reader globs).
    pub fn data_location(&self) -> String {
        self.location("data/")
    }

    /// Make the local directories (S3 needs none).
    pub async fn prepare(&self) -> Result<(), S3Error> {
        if let DatasetRoot::Dir(dir) = self {
            for folder in [DATA, CHANGES] {
                tokio::fs::create_dir_all(dir.join(folder)).await.map_err(|e| {
                    S3Error::Config(format!("cannot create {}: {e}", dir.join(folder).display()))
                })?;
            }
        }
        Ok(())
    }

    /// Where an incremental scan's change files are.
    pub fn changes_location(&self) -> String {
        self.location("changes/")
    }
}

/// The folder of a dataset's data files.
pub const DATA: &str = "data";
/// The folder of an incremental scan's change files (same layout).
pub const CHANGES: &str = "changes";

/// The name of file `file` of shard `shard`: name order is key order.
pub fn file_name(shard: usize, file: usize, extension: &str) -> String {
    file_name_in(DATA, shard, file, extension)
}

/// [`file_name`] in `folder` (`data` or `changes`).
pub fn file_name_in(folder: &str, shard: usize, file: usize, extension: &str) -> String {
    format!("{folder}/{}.{extension}", part_name(shard, file))
}

/// The stem of a data file's name, the same for every writer of a dataset:
/// `part-GGGGG-FFFF`, file `file` of writer `group`, where a writer writes
/// its files in key order and writers hold disjoint key ranges in the
/// order of their numbers. `scan` has a writer per planned shard; a fleet
/// scan's merge is one writer (group 0). Name order is key order.
pub fn part_name(group: usize, file: usize) -> String {
    format!("part-{}-{}", sortable(group, 5), sortable(file, 4))
}

/// The `(group, file)` a stem names, when it is exactly [`part_name`]'s.
pub fn parse_part_name(stem: &str) -> Option<(usize, usize)> {
    let (group, file) = stem.strip_prefix("part-")?.split_once('-')?;
    let (group, file) = (parse_sortable(group, 5)?, parse_sortable(file, 4)?);
    (part_name(group, file) == stem).then_some((group, file))
}

/// The number `name` stands for, when it is exactly [`sortable`]`(n, width)`.
pub fn parse_sortable(name: &str, width: usize) -> Option<usize> {
    let digits = match name.strip_prefix('~') {
        Some(long) => long.get(2..)?,
        None => name,
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n = digits.parse().ok()?;
    (sortable(n, width) == name).then_some(n)
}

/// `n` as a name that sorts in numeric order: zero-padded to `width`
/// digits, and past them `~`, the digit count (two digits) and the digits:
/// `~` sorts after every digit, and a longer number after a shorter one.
/// (`{n:06}` alone put file 1,000,000 before file 999,999.)
pub fn sortable(n: usize, width: usize) -> String {
    let digits = n.to_string();
    if digits.len() <= width {
        format!("{n:0width$}")
    } else {
        format!("~{:02}{digits}", digits.len())
    }
}

/// The files of one shard, in key order, each closed once it reaches
/// `file_size` bytes (checked after each record, so a file ends at most one
/// record's encoding, or for Parquet one row group, past it).
pub struct ShardFiles {
    root: DatasetRoot,
    opts: OutputOptions,
    s3: Option<Arc<S3>>,
    shard: usize,
    file_size: u64,
    folder: &'static str,
    open: Option<OpenFile>,
    done: Vec<DataFile>,
}

struct OpenFile {
    name: String,
    writer: RecordWriter,
    first_key: Option<String>,
    last_key: Option<String>,
}

impl ShardFiles {
    pub fn new(
        root: DatasetRoot,
        opts: OutputOptions,
        s3: Option<Arc<S3>>,
        shard: usize,
        file_size: u64,
    ) -> Self {
        ShardFiles {
            root,
            opts,
            s3,
            shard,
            file_size,
            folder: DATA,
            open: None,
            done: Vec::new(),
        }
    }

    /// The same for an incremental scan's change files (under `changes/`,
    /// with the change columns).
    pub fn changes(mut self) -> Self {
        self.folder = CHANGES;
        self.opts.changes = true;
        self
    }

    pub async fn write(&mut self, record: &Record) -> Result<(), S3Error> {
        if self.open.is_none() {
            let name = file_name_in(
                self.folder,
                self.shard,
                self.done.len(),
                self.opts.format.extension(self.opts.gzip),
            );
            let writer =
                RecordWriter::create(&self.root.destination(&name), &self.opts, self.s3.as_ref()).await?;
            self.open = Some(OpenFile {
                name,
                writer,
                first_key: None,
                last_key: None,
            });
        }
        let open = self.open.as_mut().expect("opened above");
        open.writer.write(record).await?;
        open.first_key.get_or_insert_with(|| record.key.clone());
        open.last_key = Some(record.key.clone());
        if open.writer.bytes_so_far() >= self.file_size {
            self.close().await?;
        }
        Ok(())
    }

    async fn close(&mut self) -> Result<(), S3Error> {
        let Some(open) = self.open.take() else {
            return Ok(());
        };
        let summary = open.writer.finish().await?;
        self.done.push(DataFile {
            location: self.root.location(&open.name),
            first_key: open.first_key,
            last_key: open.last_key,
            records: summary.records,
            bytes: summary.bytes,
            etag: summary.etag,
            sha256: Some(hex::encode(summary.sha256)),
            blocks: Vec::new(),
        });
        Ok(())
    }

    /// Close the open file; the shard's files in key order.
    pub async fn finish(mut self) -> Result<Vec<DataFile>, S3Error> {
        self.close().await?;
        Ok(self.done)
    }

    /// Give up: the open file never appears (files already closed stay,
    /// listed in no manifest).
    pub async fn abort(self) {
        if let Some(open) = self.open {
            open.writer.abort().await;
        }
    }
}

/// Counts of a dataset's objects, by status: the same fields, with the
/// same meaning, as a fleet manifest's `counts`. `objects` are the listed
/// objects the filter let through, `written` those in the result (fewer
/// with `only_with_metadata`), `bytes` the Ok objects' sizes.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DatasetCounts {
    pub objects: u64,
    /// Manifests from before `written` read as 0.
    #[serde(default)]
    pub written: u64,
    pub with_metadata: u64,
    pub vanished: u64,
    pub errors: u64,
    /// Manifests from before `bytes` read as 0.
    #[serde(default)]
    pub bytes: u64,
    /// Listed objects the filter left out, not among `objects` (a shard
    /// resumed after a transient failure counts those it lists again
    /// twice). Manifests from before filters read as 0.
    #[serde(default)]
    pub filtered: u64,
}

impl DatasetCounts {
    /// Count one object's record; `kept`: it is written to the result.
    pub fn add(&mut self, record: &Record, kept: bool) {
        self.objects += 1;
        self.written += kept as u64;
        match record.status {
            Status::Ok => {
                self.with_metadata += record.has_metadata() as u64;
                self.bytes += record.size;
            }
            Status::Vanished => self.vanished += 1,
            Status::Error => self.errors += 1,
        }
    }

    /// Add another shard's counts.
    pub fn absorb(&mut self, other: &DatasetCounts) {
        self.objects += other.objects;
        self.written += other.written;
        self.with_metadata += other.with_metadata;
        self.vanished += other.vanished;
        self.errors += other.errors;
        self.bytes += other.bytes;
    }
}

/// `manifest.json` of a single-process scan's dataset.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct DatasetManifest {
    /// Where the data files are: `.../data/`.
    pub result: String,
    pub layout: String,
    pub format: String,
    pub gzip: bool,
    /// The scanned bucket and prefix.
    pub bucket: String,
    pub prefix: String,
    pub files: Vec<DataFile>,
    pub records: u64,
    pub result_bytes: u64,
    pub counts: DatasetCounts,
    pub shards: usize,
    /// RFC 3339, when the manifest was written.
    pub created: String,
    /// Only objects with metadata were kept (such a result cannot be a
    /// baseline: it does not hold every object).
    #[serde(default)]
    pub only_with_metadata: bool,
    /// The store check at the scan's start (S3 outputs): its time and
    /// whether LastModified moves on a metadata replace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub store_check: Option<crate::scan::store_check::StoreCheck>,
    /// Incremental scans: the baseline's manifest, what the scan did with
    /// it, and the change set's files.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub incremental: Option<IncrementalSummary>,
    /// The filter the scan applied to its listing (`{}`: none).
    #[serde(default)]
    pub filter: ObjectFilter,
    /// The optional columns it filled; `None` in manifests of releases
    /// before the columns of `s3::columns` (a baseline needs them).
    #[serde(default)]
    pub columns: Option<ColumnOptions>,
    /// The form of its JSON lines (`record::RECORD_FORMAT`); `None` in
    /// manifests of releases before it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub record_format: Option<u32>,
}

/// What an incremental scan did against its baseline.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IncrementalSummary {
    /// `s3://bucket/key` of the baseline's manifest.
    pub baseline: String,
    /// Unchanged objects were taken from the baseline (the store check saw
    /// LastModified move, and a fleet's workers took some); otherwise every
    /// object was HEADed.
    pub reused_records: bool,
    /// Why, in words.
    pub detail: String,
    /// Where the change set is, its files (in key order) and counts.
    pub changes: String,
    pub change_files: Vec<DataFile>,
    pub counts: ChangeCounts,
    /// Bytes of the baseline read.
    pub baseline_bytes_read: u64,
}

/// Changes by kind (exact: counted as written), and records taken without
/// a HEAD and HEADs sent (live counters: work redone after a failure counts
/// again).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChangeCounts {
    pub added: u64,
    pub removed: u64,
    pub content_changed: u64,
    pub metadata_changed: u64,
    pub reused: u64,
    pub heads: u64,
}

impl ChangeCounts {
    /// Count one change record.
    pub fn add(&mut self, kind: Option<crate::scan::record::ChangeKind>) {
        use crate::scan::record::ChangeKind;
        match kind {
            Some(ChangeKind::Added) => self.added += 1,
            Some(ChangeKind::Removed) => self.removed += 1,
            Some(ChangeKind::ContentChanged) => self.content_changed += 1,
            Some(ChangeKind::MetadataChanged) => self.metadata_changed += 1,
            None => {}
        }
    }

    pub fn absorb(&mut self, other: &ChangeCounts) {
        self.added += other.added;
        self.removed += other.removed;
        self.content_changed += other.content_changed;
        self.metadata_changed += other.metadata_changed;
        self.reused += other.reused;
        self.heads += other.heads;
    }
}

impl DatasetManifest {
    /// Write it as `manifest.json` under `root` (last: its presence means
    /// the dataset is whole).
    pub async fn write(&self, root: &DatasetRoot, s3: Option<&Arc<S3>>) -> Result<OutputSummary, S3Error> {
        let json = serde_json::to_vec_pretty(self).map_err(|e| S3Error::Other(e.to_string()))?;
        match root {
            DatasetRoot::S3 { bucket, prefix } => {
                let s3 = s3.ok_or_else(|| S3Error::Config("S3 output needs an S3 client".into()))?;
                let key = format!("{prefix}manifest.json");
                s3.put(bucket, &key, "application/json", json.clone().into())
                    .await?;
            }
            DatasetRoot::Dir(dir) => {
                let path = dir.join("manifest.json");
                tokio::fs::write(&path, &json)
                    .await
                    .map_err(|e| S3Error::Other(format!("writing {}: {e}", path.display())))?;
            }
        }
        Ok(OutputSummary {
            records: self.records,
            bytes: json.len() as u64,
            ..OutputSummary::default()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_sort_in_number_order_past_their_width() {
        let ns = [
            0,
            1,
            9,
            10,
            9_999,
            10_000,
            10_001,
            99_999,
            100_000,
            999_999,
            1_000_000,
            12_345_678,
            usize::MAX,
        ];
        for width in [4, 5, 6] {
            let names: Vec<String> = ns.iter().map(|n| sortable(*n, width)).collect();
            assert!(names.windows(2).all(|w| w[0] < w[1]), "{names:?}");
        }
        assert_eq!(sortable(7, 6), "000007", "names as before within the width");
        let files: Vec<String> = [
            (0, 0),
            (0, 9_999),
            (0, 10_000),
            (99_999, 0),
            (100_000, 0),
            (100_000, 12_000),
        ]
        .iter()
        .map(|(s, f)| file_name(*s, *f, "jsonl"))
        .collect();
        assert!(files.windows(2).all(|w| w[0] < w[1]), "{files:?}");
    }

    #[test]
    fn a_part_name_reads_back_as_its_numbers_and_nothing_else_does() {
        for (g, f) in [(0, 0), (0, 9_999), (0, 10_000), (3, 12), (100_000, 123_456_789)] {
            assert_eq!(parse_part_name(&part_name(g, f)), Some((g, f)), "{g} {f}");
        }
        for other in [
            "part-0-0",
            "part-00000-000",
            "part-00000-00001",
            "part-00000-~041000",
            "part-00000-~05x0000",
            "part-00000",
            "part-00000-0000-0000",
            "000000",
            "part-+0000-0000",
        ] {
            assert_eq!(parse_part_name(other), None, "{other}");
        }
    }

    #[test]
    fn file_names_sort_in_key_order() {
        let mut names: Vec<String> = [(10, 0), (2, 11), (2, 3), (0, 0)]
            .iter()
            .map(|(s, f)| file_name(*s, *f, "parquet"))
            .collect();
        names.sort();
        assert_eq!(
            names,
            [
                "data/part-00000-0000.parquet",
                "data/part-00002-0003.parquet",
                "data/part-00002-0011.parquet",
                "data/part-00010-0000.parquet"
            ]
        );
    }

    #[test]
    fn a_dataset_goes_under_a_prefix_or_a_directory_never_stdout() {
        let s3 = DatasetRoot::of(&Destination::S3 {
            bucket: "b".into(),
            key: "scans/x".into(),
        })
        .unwrap();
        assert_eq!(s3.data_location(), "s3://b/scans/x/data/");
        let root = DatasetRoot::of(&Destination::S3 {
            bucket: "b".into(),
            key: String::new(),
        })
        .unwrap();
        assert_eq!(root.location("manifest.json"), "s3://b/manifest.json");
        assert!(DatasetRoot::of(&Destination::Stdout)
            .unwrap_err()
            .contains("not stdout"));
        let dir = DatasetRoot::of(&Destination::File("out".into())).unwrap();
        assert_eq!(
            dir.destination("data/a.csv"),
            Destination::File("out/data/a.csv".into())
        );
    }
}
