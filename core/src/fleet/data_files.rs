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
use crate::s3::pages::list_all;
use crate::s3::S3;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

/// The merge's intent, written before its first data file.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Intent {
    /// Data files `0..data_files` may be this scan's own.
    data_files: usize,
}

/// What a replaced result's manifest says of its files (the fields read).
#[derive(Deserialize)]
struct Replaced {
    files: Vec<Located>,
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

/// Before a dataset merge writes `files` data files: check that `data/`
/// holds nothing but bucketscan's files, record the intent, and return the
/// keys to delete once the new files are written (old files the new ones do
/// not overwrite).
pub async fn prepare(s3: &S3, spec: &ScanSpec, files: usize) -> Result<Vec<String>, DataFilesError> {
    let bucket = spec.output_bucket.as_str();
    let earlier = read_json::<Intent>(s3, bucket, &spec.merge_intent_key())
        .await?
        .unwrap_or_default();
    let own = files.max(earlier.data_files);
    let present = ours_only(s3, spec, own).await?;
    let intent = serde_json::to_vec(&Intent { data_files: own }).expect("an intent serializes");
    s3.put(
        bucket,
        &spec.merge_intent_key(),
        "application/json",
        intent.into(),
    )
    .await?;
    let written: BTreeSet<String> = (0..files).map(|n| spec.data_key(n)).collect();
    Ok(present.into_iter().filter(|k| !written.contains(k)).collect())
}

/// Before planning a dataset scan: its `data/` folder must hold nothing but
/// bucketscan's files, said before any object is read rather than at the
/// merge.
pub async fn check(s3: &S3, spec: &ScanSpec) -> Result<(), DataFilesError> {
    ours_only(s3, spec, 0).await.map(drop)
}

/// The keys under `data/`, when every one is a data file of this scan
/// (`0..own`) or of the result it replaces; else the first that is not.
async fn ours_only(s3: &S3, spec: &ScanSpec, own: usize) -> Result<Vec<String>, DataFilesError> {
    let bucket = spec.output_bucket.as_str();
    let mut known: BTreeSet<String> = (0..own).map(|n| spec.data_key(n)).collect();
    known.extend(replaced_files(s3, spec).await?);
    let present = list_keys(s3, bucket, &spec.data_prefix()).await?;
    match present.iter().find(|k| !known.contains(*k)) {
        Some(key) => Err(DataFilesError::NotOurs {
            bucket: bucket.to_string(),
            prefix: spec.data_prefix(),
            key: key.clone(),
        }),
        None => Ok(present),
    }
}

/// The data files the result at this output prefix lists, when there is
/// one: only keys under its `data/` count (a manifest, which a user may
/// edit, never makes the merge touch anything outside the dataset folder).
async fn replaced_files(s3: &S3, spec: &ScanSpec) -> Result<Vec<String>, S3Error> {
    let bucket = spec.output_bucket.as_str();
    let Some(manifest) = read_json::<Replaced>(s3, bucket, &spec.manifest_key()).await? else {
        return Ok(Vec::new());
    };
    let base = format!("s3://{bucket}/");
    let data = spec.data_prefix();
    Ok(manifest
        .files
        .into_iter()
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
    match s3.get(bucket, key, None).await {
        Ok(body) => Ok(serde_json::from_slice(&body).ok()),
        Err(e) if e.http_status() == Some(404) => Ok(None),
        Err(e) => Err(e),
    }
}

async fn list_keys(s3: &S3, bucket: &str, prefix: &str) -> Result<Vec<String>, S3Error> {
    let objects = list_all(s3, bucket, prefix).await?;
    Ok(objects.into_iter().map(|o| o.key).collect())
}
