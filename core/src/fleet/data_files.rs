//! A dataset's `data/` folder: which objects there a merge may replace or
//! delete, and which it must leave. A merge deletes only what bucketscan
//! wrote: its own files from an attempt that died (it says how many before
//! writing any, in its intent record among its parts) and the files the
//! result it replaces lists in its `manifest.json`. Any other object under
//! `data/` belongs to someone else: the merge refuses to write a dataset
//! beside it (readers of `data/` would read it too) and deletes nothing.
//!
//! May import: `spec` and `s3`.

use crate::fleet::spec::ScanSpec;
use crate::s3::error::S3Error;
use crate::s3::types::ListRequest;
use crate::s3::{BucketLister, Pages, S3};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

/// The merge's intent, written before its first data file.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Intent {
    /// Data files `0..data_files` may be this scan's own.
    data_files: usize,
}

/// What a replaced result's manifest says of its files (the fields read):
/// its data files and, of an incremental scan, its change files.
#[derive(Deserialize)]
struct Replaced {
    files: Vec<Located>,
    #[serde(default)]
    incremental: Option<ReplacedChanges>,
}

#[derive(Deserialize)]
struct ReplacedChanges {
    #[serde(default)]
    change_files: Vec<Located>,
}

#[derive(Deserialize)]
struct Located {
    location: String,
}

#[derive(Debug, thiserror::Error)]
pub enum DataFilesError {
    #[error(transparent)]
    S3(#[from] S3Error),
    #[error(
        "s3://{bucket}/{key} is under the dataset's folder s3://{bucket}/{prefix} and bucketscan did not \
         write it: readers of the dataset would read it too, and the scan deletes only what it wrote. \
         Move it, or give the scan an output prefix of its own (spec.output.prefix)"
    )]
    NotOurs {
        bucket: String,
        prefix: String,
        key: String,
    },
}

/// Files of an earlier attempt named for deletion beyond those listed: a
/// listing that lags behind the store's writes may not show them yet, and
/// deleting a key that is not there is no error.
const UNLISTED: usize = 10_000;

/// The most of a manifest or an intent record read: a bigger object is not
/// one bucketscan wrote for a result it could replace (a dataset's manifest
/// is a few hundred bytes a file).
const MAX_RECORD_BYTES: u64 = 64 << 20;

/// Before a dataset merge writes `files` data files: check that `data/`
/// holds nothing but bucketscan's files, record the intent, and return the
/// keys to delete once the new files are written: by name, every earlier
/// file of this scan and of the result it replaces that the new ones do not
/// overwrite, listed or not.
pub async fn prepare(s3: &S3, spec: &ScanSpec, files: usize) -> Result<Vec<String>, DataFilesError> {
    let bucket = spec.output_bucket.as_str();
    let earlier = read_json::<Intent>(s3, bucket, &spec.merge_intent_key())
        .await?
        .unwrap_or_default();
    let replaced = replaced_files(s3, spec).await?;
    let present = ours_only(s3, spec, files.max(earlier.data_files), &replaced).await?;
    let own = files.max(earlier.data_files.min(files + present.len() + UNLISTED));
    let intent = serde_json::to_vec(&Intent { data_files: own }).expect("an intent serializes");
    s3.put(
        bucket,
        &spec.merge_intent_key(),
        "application/json",
        intent.into(),
    )
    .await?;
    let mut stale: BTreeSet<String> = (files..own).map(|n| spec.data_key(n)).collect();
    stale.extend(replaced);
    stale.extend(present);
    let written: BTreeSet<String> = (0..files).map(|n| spec.data_key(n)).collect();
    Ok(stale.into_iter().filter(|k| !written.contains(k)).collect())
}

/// Before planning a dataset scan: its `data/` folder must hold nothing but
/// bucketscan's files, said before any object is read rather than at the
/// merge.
pub async fn check(s3: &S3, spec: &ScanSpec) -> Result<(), DataFilesError> {
    let replaced = replaced_files(s3, spec).await?;
    ours_only(s3, spec, 0, &replaced).await.map(drop)
}

/// The keys under `data/`, when every one is a data file of this scan
/// (numbered below `own`) or of the result it replaces (`replaced`); else
/// the first that is not, found as the listing goes (never more of it).
async fn ours_only(
    s3: &S3,
    spec: &ScanSpec,
    own: usize,
    replaced: &BTreeSet<String>,
) -> Result<Vec<String>, DataFilesError> {
    let bucket = spec.output_bucket.as_str();
    let req = ListRequest {
        prefix: spec.data_prefix(),
        max_keys: 1000,
        ..ListRequest::default()
    };
    let lister = BucketLister { s3, bucket };
    let mut pages = Pages::new(&lister, req);
    let mut present = Vec::new();
    while let Some(page) = pages.next().await? {
        for key in page.objects.into_iter().map(|o| o.key) {
            let ours = data_index(spec, &key).is_some_and(|n| n < own) || replaced.contains(&key);
            if !ours {
                return Err(DataFilesError::NotOurs {
                    bucket: bucket.to_string(),
                    prefix: spec.data_prefix(),
                    key,
                });
            }
            present.push(key);
        }
    }
    Ok(present)
}

/// The number `n` of a key named as data file `n`: `spec.data_key(n)`, or
/// the name releases before one dataset shape gave it (`000000.EXT`, ...),
/// so that a merge that died under such a release and runs again under this
/// one takes its files as its own (and deletes them) rather than refusing
/// the scan's own output.
fn data_index(spec: &ScanSpec, key: &str) -> Option<usize> {
    use crate::scan::dataset::{parse_part_name, parse_sortable};
    let stem = key
        .strip_prefix(&spec.data_prefix())?
        .strip_suffix(spec.extension())?
        .strip_suffix('.')?;
    match parse_part_name(stem) {
        Some((0, n)) => Some(n),
        Some(_) => None,
        None => parse_sortable(stem, 6),
    }
}

/// The data files the result at this output prefix lists, when there is
/// one: only keys under its `data/` count (a manifest, which a user may
/// edit, never makes the merge touch anything outside the dataset folder).
async fn replaced_files(s3: &S3, spec: &ScanSpec) -> Result<BTreeSet<String>, S3Error> {
    let bucket = spec.output_bucket.as_str();
    let Some(manifest) = read_json::<Replaced>(s3, bucket, &spec.manifest_key()).await? else {
        return Ok(BTreeSet::new());
    };
    let base = format!("s3://{bucket}/");
    let data = spec.data_prefix();
    let changes = manifest.incremental.map(|i| i.change_files).unwrap_or_default();
    Ok(manifest
        .files
        .into_iter()
        .chain(changes)
        .filter_map(|f| f.location.strip_prefix(&base).map(str::to_string))
        .filter(|key| key.starts_with(&data))
        .collect())
}

/// An object's JSON, `None` when it is missing or not that JSON.
async fn read_json<T: serde::de::DeserializeOwned>(
    s3: &S3,
    bucket: &str,
    key: &str,
) -> Result<Option<T>, S3Error> {
    let range = format!("bytes=0-{}", MAX_RECORD_BYTES - 1);
    match s3.get(bucket, key, Some(&range)).await {
        // As big as the bound or bigger: not ours (read no further).
        Ok(body) if body.len() as u64 >= MAX_RECORD_BYTES => Ok(None),
        Ok(body) => Ok(serde_json::from_slice(&body).ok()),
        // Missing, or empty (a range of nothing is refused: 416).
        Err(e) if matches!(e.http_status(), Some(404 | 416)) => Ok(None),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_files_are_known_by_their_number() {
        let spec = ScanSpec {
            bucket: "b".into(),
            prefix: String::new(),
            output_bucket: "o".into(),
            output_prefix: "r/".into(),
            gzip: true,
            only_with_metadata: false,
            max_failures: 3,
            format: Default::default(),
            layout: crate::scan::format::Layout::Dataset,
            file_size: crate::fleet::spec::DEFAULT_FILE_SIZE,
            scan_id: "s".into(),
            baseline: None,
            change_set: false,
            filter: Default::default(),
            columns: Default::default(),
        };
        for n in [0, 7, 999_999, 1_000_000, 123_456_789] {
            assert_eq!(data_index(&spec, &spec.data_key(n)), Some(n));
        }
        for n in [0, 7, 999_999, 1_000_000] {
            let legacy = format!("r/data/{}.jsonl.gz", crate::scan::dataset::sortable(n, 6));
            assert_eq!(
                data_index(&spec, &legacy),
                Some(n),
                "{legacy}: a name of earlier releases"
            );
        }
        for other in [
            "r/data/7.jsonl.gz",
            "r/data/0000007.jsonl.gz",
            "r/data/000007.jsonl",
            "r/data/x/000007.jsonl.gz",
            "r/data/part-00001-0007.jsonl.gz",
            "r/data/part-00000-007.jsonl.gz",
            "r/data/part-00000-0007.csv",
            "r/data/000007.csv",
            "r/data/x",
            "r/other/000001.jsonl.gz",
        ] {
            assert_eq!(data_index(&spec, other), None, "{other}");
        }
    }
}
