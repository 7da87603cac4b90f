//! What a distributed scan is: stored once in Redis when the scan is planned,
//! read by every worker and by the merge, so workers need only the Redis URL,
//! the scan id and the endpoint.
//!
//! May import: `keyspace`, `scan::format`, `scan::filter`, `scan::column_options`, `scan::dataset` (file names) and `s3::upload` (its limits).

use crate::s3::upload::{MAX_OBJECT_SIZE, MAX_PARTS};
use crate::scan::column_options::ColumnOptions;
use crate::scan::filter::ObjectFilter;
use crate::scan::format::{Format, Layout};
use serde::{Deserialize, Serialize};

/// Default bound on a dataset file: big enough that readers are not slowed
/// by many small files, small enough that a file is one unit of parallelism.
pub const DEFAULT_FILE_SIZE: u64 = 1 << 30;
/// Files of the dataset are at least 5 MiB (S3's smallest multipart part:
/// the single layout copies whole files as parts) and at most 5 GiB (the
/// largest part S3 copies).
pub const MIN_FILE_SIZE: u64 = 5 << 20;
pub const MAX_FILE_SIZE: u64 = 5 << 30;

fn default_file_size() -> u64 {
    DEFAULT_FILE_SIZE
}

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
    /// Specs written before these fields existed read as JSONL, single.
    #[serde(default)]
    pub format: Format,
    #[serde(default)]
    pub layout: Layout,
    /// Bound on one data file of the result, in bytes (compressed size).
    #[serde(default = "default_file_size")]
    pub file_size: u64,
    /// The scan's id: its parts and the merge's own files go under a
    /// prefix of their own (`parts/ID/`), so what the scan deletes is only
    /// what it wrote, whatever else shares the output prefix. Empty in specs
    /// stored by releases before it (their parts are under `parts/`).
    #[serde(default)]
    pub scan_id: String,
    /// Incremental scans: `s3://bucket/key` of the baseline's manifest.json.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baseline: Option<String>,
    /// This spec names the scan's change set, not its result: the merge
    /// writes it with the change parts under `changes/` (`for_changes`).
    #[serde(skip)]
    pub change_set: bool,
    /// Objects every worker leaves out, judged from the listing before any
    /// HEAD (`scan::filter`). Specs stored before filters read as none.
    #[serde(default, skip_serializing_if = "ObjectFilter::is_empty")]
    pub filter: ObjectFilter,
    /// Optional columns every worker fills (checksums, tags, versions).
    /// Always written: a manifest whose spec lacks it is of a release before
    /// the HEAD columns, and cannot be a baseline. Specs stored before it
    /// read as none.
    #[serde(default)]
    pub columns: ColumnOptions,
}

/// The fewest bytes a record takes in the result: a JSONL record of an
/// object with a one-letter key and nothing else is about 50 bytes, and gzip
/// shrinks such near-identical lines about six-fold. Used only to refuse a
/// single-object result that surely cannot fit.
fn min_record_bytes(gzip: bool) -> u64 {
    if gzip {
        8
    } else {
        48
    }
}

/// Why a spec's output settings cannot work: said before any work starts.
/// `estimated_objects` is the planner's estimate of the keyspace's size.
pub fn check_output(
    format: Format,
    layout: Layout,
    file_size: u64,
    gzip: bool,
    estimated_objects: u64,
) -> Result<(), String> {
    format.check_gzip(gzip)?;
    if !(MIN_FILE_SIZE..=MAX_FILE_SIZE).contains(&file_size) {
        return Err(format!(
            "file size {file_size} is out of range: a data file is between {MIN_FILE_SIZE} (5 MiB, S3's smallest part) and {MAX_FILE_SIZE} (5 GiB, S3's largest copied part) bytes"
        ));
    }
    // The single object is one multipart upload of at most 10,000 data files,
    // and never more than S3's largest object.
    let files = file_size.saturating_mul(MAX_PARTS as u64);
    let capacity = files.min(MAX_OBJECT_SIZE);
    let least = estimated_objects.saturating_mul(min_record_bytes(gzip));
    if layout == Layout::Single && least > capacity {
        let (why, fix) = if files > MAX_OBJECT_SIZE {
            (
                format!("S3 refuses objects over 5 TiB ({MAX_OBJECT_SIZE} bytes)"),
                "use the dataset layout",
            )
        } else {
            (
                format!("it holds at most 10,000 files of {file_size} bytes ({capacity} bytes)"),
                "use the dataset layout or a larger file size",
            )
        };
        return Err(format!(
            "about {estimated_objects} objects cannot fit one result object: {why} and these records need at least {least}; {fix}"
        ));
    }
    Ok(())
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
    /// The bytes every output file starts with: the header, compressed as a
    /// gzip member of its own so the single layout can skip it in all but
    /// the first.
    pub fn lead(&self) -> bytes::Bytes {
        let header = match self.change_set {
            true => self.format.change_header(),
            false => self.format.header(),
        };
        if header.is_empty() || !self.gzip {
            return header.into();
        }
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        std::io::Write::write_all(&mut gz, &header).expect("writing to memory");
        gz.finish().expect("writing to memory").into()
    }

    /// The data files' extension (`jsonl.gz`, `parquet`, ...).
    pub fn extension(&self) -> &'static str {
        self.format.extension(self.gzip)
    }

    /// Where the dataset's files go (and, for the single layout, where the
    /// merge stages them before joining them).
    pub fn data_prefix(&self) -> String {
        match self.change_set {
            false => format!("{}data/", self.output_prefix),
            true => format!("{}changes/", self.output_prefix),
        }
    }

    /// The same scan's change set: its files, staging and intent keys.
    pub fn for_changes(&self) -> ScanSpec {
        ScanSpec {
            change_set: true,
            ..self.clone()
        }
    }

    /// The key of a part's change part (incremental scans): beside the part,
    /// `.changes` before the extension.
    pub fn change_part_key(&self, part_key: &str) -> String {
        let ext = format!(".{}", self.extension());
        let stem = part_key.strip_suffix(&ext).unwrap_or(part_key);
        format!("{stem}.changes{ext}")
    }

    /// Whether a recorded part is a change part.
    pub fn is_change_part(&self, key: &str) -> bool {
        key.ends_with(&format!(".changes.{}", self.extension()))
    }

    /// What the store check at planning found (see `scan::store_check`):
    /// written once, before any HEAD, and kept with the parts.
    pub fn store_check_key(&self) -> String {
        format!("{}store-check.json", self.parts_prefix())
    }

    /// Data file number `n` (from 0), named as `scan`'s dataset names its
    /// files, the merge being its one writer: `part-00000-0000`, ...,
    /// `part-00000-9999`, then `part-00000-~0510000`, ... (name order is key
    /// order).
    pub fn data_key(&self, n: usize) -> String {
        let name = crate::scan::dataset::part_name(0, n);
        format!("{}{name}.{}", self.data_prefix(), self.extension())
    }

    /// The key of one output part: the part of shard `shard_id` that lease
    /// `token` wrote in its pass `pass` over the shard (0: the first; a lease
    /// makes another after a transient failure) after `resume_after` (none:
    /// from the shard's start). Each pass writes keys of its own: an upload of
    /// a pass that failed, applied late by the store, can then never land on
    /// a part a later pass recorded. A part of an attempt that died before
    /// recording it is never read by the merge (which reads only recorded
    /// parts) and is deleted with the rest.
    pub fn part_key(&self, shard_id: &str, token: u64, pass: u32, resume_after: Option<&str>) -> String {
        let segment = match resume_after {
            None => "start".to_string(),
            Some(after) => crate::keyspace::shard::Shard::prefix(after).id(),
        };
        let attempt = match pass {
            0 => token.to_string(),
            n => format!("{token}.{n}"),
        };
        format!(
            "{}{shard_id}/{attempt}-{segment}.{}",
            self.parts_prefix(),
            self.extension()
        )
    }

    /// The record of shard `shard_id` finished by lease `token` (see
    /// `recovery`).
    pub fn done_key(&self, shard_id: &str, token: u64) -> String {
        format!("{}{shard_id}/done.{token}.json", self.parts_prefix())
    }

    pub fn parts_prefix(&self) -> String {
        parts_prefix_of(&self.output_prefix, &self.scan_id)
    }

    /// Object `n` a merge staged ahead (`merge_ahead`) under `token`: among
    /// the scan's parts, deleted with them.
    pub fn ahead_key(&self, token: u64, n: usize) -> String {
        format!("{}{token:016x}-{n:06}.{}", self.ahead_prefix(), self.extension())
    }

    /// Where merges stage ahead (`merge_ahead`).
    pub fn ahead_prefix(&self) -> String {
        format!("{}merge-ahead/", self.parts_prefix())
    }

    /// Staged file `n` of a single result made in two steps (data files
    /// first, then joined): among the scan's parts, deleted with them.
    pub fn staging_key(&self, n: usize) -> String {
        let name = crate::scan::dataset::sortable(n, 6);
        let folder = if self.change_set { "merge-changes" } else { "merge" };
        format!("{}{folder}/{name}.{}", self.parts_prefix(), self.extension())
    }

    /// What the merge says it is about to write (see `fleet::merge`), so an
    /// attempt after one that died knows which data files were its own.
    pub fn merge_intent_key(&self) -> String {
        let name = if self.change_set { "merge-changes" } else { "merge" };
        format!("{}{name}.json", self.parts_prefix())
    }

    /// The merged result (or change set).
    pub fn result_key(&self) -> String {
        let name = if self.change_set { "changes" } else { "result" };
        format!("{}{name}.{}", self.output_prefix, self.extension())
    }

    pub fn manifest_key(&self) -> String {
        format!("{}manifest.json", self.output_prefix)
    }
}

/// Where the parts of scan `scan_id` writing under `output_prefix` go.
pub fn parts_prefix_of(output_prefix: &str, scan_id: &str) -> String {
    match scan_id {
        "" => format!("{output_prefix}parts/"),
        id => format!("{output_prefix}parts/{id}/"),
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
            format: Format::Jsonl,
            layout: Layout::Single,
            file_size: DEFAULT_FILE_SIZE,
            scan_id: "ns.s.1234".into(),
            baseline: None,
            change_set: false,
            filter: Default::default(),
            columns: Default::default(),
        };
        assert_eq!(
            spec.part_key("abc", 1, 0, None),
            "scans/1/parts/ns.s.1234/abc/1-start.jsonl.gz"
        );
        assert_eq!(
            spec.part_key("abc", 2, 0, Some("k1")),
            spec.part_key("abc", 2, 0, Some("k1"))
        );
        assert_ne!(
            spec.part_key("abc", 2, 0, Some("k1")),
            spec.part_key("abc", 2, 0, Some("k2"))
        );
        assert_ne!(
            spec.part_key("abc", 2, 0, Some("k1")),
            spec.part_key("abc", 3, 0, Some("k1"))
        );
        assert!(spec
            .part_key("abc", 1, 0, Some("k1"))
            .starts_with(&spec.parts_prefix()));
        // Each pass of a lease writes keys of its own.
        assert_ne!(
            spec.part_key("abc", 2, 0, Some("k1")),
            spec.part_key("abc", 2, 1, Some("k1"))
        );
        assert_eq!(
            spec.part_key("abc", 2, 1, None),
            "scans/1/parts/ns.s.1234/abc/2.1-start.jsonl.gz"
        );
        assert_eq!(spec.result_key(), "scans/1/result.jsonl.gz");
        assert_eq!(spec.data_key(3), "scans/1/data/part-00000-0003.jsonl.gz");
        // What the scan writes besides its result is under its own prefix.
        for own in [
            spec.done_key("abc", 7),
            spec.staging_key(2),
            spec.merge_intent_key(),
        ] {
            assert!(own.starts_with("scans/1/parts/ns.s.1234/"), "{own}");
        }
    }

    #[test]
    fn specs_from_before_formats_read_as_jsonl_single() {
        let old = r#"{"bucket":"b","output_bucket":"o","max_failures":3}"#;
        let spec: ScanSpec = serde_json::from_str(old).unwrap();
        assert_eq!((spec.format, spec.layout), (Format::Jsonl, Layout::Single));
        assert_eq!(spec.file_size, DEFAULT_FILE_SIZE);
        assert_eq!(spec.result_key(), "result.jsonl");
        // Parts stay where that release put them.
        assert_eq!(spec.parts_prefix(), "parts/");
        assert_eq!(spec.done_key("x", 5), "parts/x/done.5.json");
    }

    #[test]
    fn file_sizes_outside_what_s3_can_compose_are_refused() {
        assert!(check_output(Format::Jsonl, Layout::Dataset, MIN_FILE_SIZE, false, 0).is_ok());
        assert!(check_output(Format::Jsonl, Layout::Single, MAX_FILE_SIZE, false, 0).is_ok());
        assert!(
            check_output(Format::Jsonl, Layout::Dataset, MIN_FILE_SIZE - 1, false, 0)
                .unwrap_err()
                .contains("5 MiB")
        );
        assert!(
            check_output(Format::Jsonl, Layout::Dataset, MAX_FILE_SIZE + 1, false, 0)
                .unwrap_err()
                .contains("5 GiB")
        );
    }

    #[test]
    fn a_single_result_that_cannot_fit_10000_files_is_refused() {
        // 2·10^9 records of at least 48 bytes are more than 10,000 x 5 MiB.
        let err =
            check_output(Format::Jsonl, Layout::Single, MIN_FILE_SIZE, false, 2_000_000_000).unwrap_err();
        assert!(err.contains("use the dataset layout"), "{err}");
        assert!(check_output(
            Format::Jsonl,
            Layout::Dataset,
            MIN_FILE_SIZE,
            false,
            2_000_000_000
        )
        .is_ok());
        assert!(check_output(
            Format::Jsonl,
            Layout::Single,
            DEFAULT_FILE_SIZE,
            false,
            2_000_000_000
        )
        .is_ok());
        assert!(check_output(Format::Jsonl, Layout::Single, MIN_FILE_SIZE, true, 2_000_000_000).is_ok());
    }

    #[test]
    fn a_single_result_over_5_tib_is_refused_whatever_the_file_size() {
        // 10^12 records of at least 48 bytes: 48 TB, within 10,000 files of
        // 5 GiB (53.7 TB) but over S3's largest object.
        let err = check_output(
            Format::Jsonl,
            Layout::Single,
            MAX_FILE_SIZE,
            false,
            1_000_000_000_000,
        )
        .unwrap_err();
        assert!(err.contains("S3 refuses objects over 5 TiB"), "{err}");
        assert!(!err.contains("larger file size"), "no file size helps: {err}");
        assert!(check_output(
            Format::Jsonl,
            Layout::Dataset,
            MAX_FILE_SIZE,
            false,
            1_000_000_000_000
        )
        .is_ok());
        // Just under 5 TiB at the least record size: allowed.
        let under = MAX_OBJECT_SIZE / 48 - 1;
        assert!(check_output(Format::Jsonl, Layout::Single, MAX_FILE_SIZE, false, under).is_ok());
    }

    #[test]
    fn gzip_with_parquet_is_refused() {
        let err = check_output(Format::Parquet, Layout::Dataset, DEFAULT_FILE_SIZE, true, 0).unwrap_err();
        assert!(err.contains("drop --gzip"), "{err}");
        assert!(check_output(Format::Parquet, Layout::Single, DEFAULT_FILE_SIZE, false, 0).is_ok());
    }
}
