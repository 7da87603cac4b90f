//! `bucketscan-worker merge`: join the recorded parts of every shard, in key
//! order, into one object, write a manifest beside it and delete the parts.
//!
//! The result is a multipart upload: parts of 5 MiB or more are copied on the
//! server (`UploadPartCopy`, no bytes through the merger); smaller ones are
//! read and concatenated until they make a part. Gzip parts concatenate into a
//! valid multi-member gzip stream. Re-running a finished merge changes nothing.
//!
//! May import: `spec`, `queue`, `scan` (the output format) and `s3`.

use crate::fleet::queue::{Queue, QueueError, ShardRecord};
use crate::fleet::spec::ScanSpec;
use crate::s3::delete::delete_prefix;
use crate::s3::error::S3Error;
use crate::s3::head::sdk_size;
use crate::s3::upload::{Upload, MIN_PART_SIZE};
use crate::s3::S3;
use crate::scan::output::content_type;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Arc;

#[derive(Debug, thiserror::Error)]
pub enum MergeError {
    #[error(transparent)]
    Queue(#[from] QueueError),
    #[error(transparent)]
    S3(#[from] S3Error),
    #[error("scan {0:?} is not planned (no spec in Redis)")]
    NotPlanned(String),
    #[error("scan is not finished: {pending} shards pending, {leased} being scanned")]
    NotFinished { pending: u64, leased: u64 },
}

/// Written as JSON beside the result.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Manifest {
    pub scan: String,
    pub result: String,
    pub result_bytes: u64,
    pub shards: u64,
    pub shards_done: u64,
    pub shards_dead: u64,
    /// Leases taken over all shards (shards x 1 when nothing was retried).
    pub attempts: u64,
    pub shards_retried: u64,
    /// Times a shard gave part of its range to an idle worker.
    pub splits: u64,
    /// Exact counts of the result: `objects` listed, `written` to the result
    /// (all of them unless only objects with metadata were asked for),
    /// `with_metadata`, `vanished`, `errors`, `bytes`.
    pub counts: BTreeMap<String, u64>,
    /// The live progress totals: work done, including keys scanned again after
    /// a crash, so they can exceed `counts`.
    pub progress: BTreeMap<String, u64>,
    pub dead: Vec<DeadShard>,
    pub created: Option<String>,
    pub merged: String,
    pub spec: ScanSpec,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct DeadShard {
    pub range: crate::keyspace::shard::Shard,
    pub failures: u64,
    pub last_error: Option<String>,
}

pub async fn merge(scan: &str, queue: &Queue, s3: &Arc<S3>) -> Result<Manifest, MergeError> {
    let spec: ScanSpec = queue
        .spec()
        .await?
        .ok_or_else(|| MergeError::NotPlanned(scan.to_string()))?;
    let counts = queue.counts().await?;
    if counts.pending > 0 || counts.leased > 0 {
        return Err(MergeError::NotFinished {
            pending: counts.pending,
            leased: counts.leased,
        });
    }
    if let Some(manifest) = queue.meta_field("manifest").await? {
        // Already merged: the recorded manifest stands. Deleting the parts
        // again finishes a merge that died while deleting them.
        tracing::info!("scan already merged");
        delete_prefix(s3, &spec.output_bucket, &spec.parts_prefix()).await?;
        return Ok(
            serde_json::from_str(&manifest).map_err(|e| S3Error::Other(format!("stored manifest: {e}")))?
        );
    }
    let shards = queue.shard_records().await?;
    let mut parts = Vec::new();
    for shard in &shards {
        parts.extend(queue.parts(&shard.id).await?);
    }
    let bytes = concatenate(s3, &spec, &parts).await?;
    let dead: Vec<DeadShard> = shards
        .iter()
        .filter(|s| s.state == "dead")
        .map(|s| DeadShard {
            range: s.shard.clone(),
            failures: s.failures,
            last_error: s.last_error.clone(),
        })
        .collect();
    let manifest = Manifest {
        scan: scan.to_string(),
        result: format!("s3://{}/{}", spec.output_bucket, spec.result_key()),
        result_bytes: bytes,
        shards: shards.len() as u64,
        shards_done: shards.iter().filter(|s| s.state == "done").count() as u64,
        shards_dead: dead.len() as u64,
        attempts: shards.iter().map(|s| s.attempts).sum(),
        shards_retried: shards.iter().filter(|s| s.attempts > 1).count() as u64,
        splits: shards.iter().map(|s| s.splits).sum(),
        counts: sum_counts(&shards),
        progress: queue.counters().await?,
        dead,
        created: queue.meta_field("created").await?,
        merged: time::OffsetDateTime::now_utc()
            .format(&time::format_description::well_known::Rfc3339)
            .unwrap_or_default(),
        spec: spec.clone(),
    };
    let json = serde_json::to_vec_pretty(&manifest).expect("a manifest serializes");
    let bucket = spec.output_bucket.as_str();
    s3.put(
        bucket,
        &spec.manifest_key(),
        "application/json",
        json.clone().into(),
    )
    .await?;
    queue
        .set_meta_field("manifest", &String::from_utf8_lossy(&json))
        .await?;
    delete_prefix(s3, bucket, &spec.parts_prefix()).await?;
    Ok(manifest)
}

fn sum_counts(shards: &[ShardRecord]) -> BTreeMap<String, u64> {
    let mut total = BTreeMap::new();
    for (field, n) in shards.iter().flat_map(|s| &s.counts) {
        *total.entry(field.clone()).or_default() += n;
    }
    total
}

/// Build the result from `parts` (keys in the output bucket); returns its size.
async fn concatenate(s3: &Arc<S3>, spec: &ScanSpec, parts: &[String]) -> Result<u64, S3Error> {
    let mut out = Composer::new(
        s3.clone(),
        spec.output_bucket.clone(),
        spec.result_key(),
        spec.gzip,
    );
    let result = async {
        for key in parts {
            out.append(key).await?;
        }
        out.complete().await
    }
    .await;
    if result.is_err() {
        out.abort().await;
    }
    result
}

/// The result, assembled from the parts: big runs are copied server-side,
/// small parts are read and concatenated into parts of at least 5 MiB.
struct Composer {
    s3: Arc<S3>,
    bucket: String,
    upload: Upload,
    buffer: Vec<u8>,
    total: u64,
}

impl Composer {
    fn new(s3: Arc<S3>, bucket: String, key: String, gzip: bool) -> Composer {
        Composer {
            upload: Upload::new(s3.clone(), bucket.clone(), key, content_type(gzip)),
            s3,
            bucket,
            buffer: Vec::new(),
            total: 0,
        }
    }

    async fn append(&mut self, source: &str) -> Result<(), S3Error> {
        let size = self.size_of(source).await?;
        self.total += size;
        let min = MIN_PART_SIZE as u64;
        let mut offset = 0;
        // Every part but the last must be at least 5 MiB: a small source, or
        // the head of a big one that tops up a started buffer, is read.
        if size < min || !self.buffer.is_empty() {
            offset = size.min(min - self.buffer.len() as u64);
            let head = self.read(source, 0, offset).await?;
            self.buffer.extend_from_slice(&head);
            if self.buffer.len() as u64 >= min {
                let chunk = std::mem::take(&mut self.buffer);
                self.upload.upload_part(chunk).await?;
            }
        }
        let rest = size - offset;
        if rest == 0 {
            return Ok(());
        }
        if rest >= min {
            self.upload.copy_part(source, offset, size - 1).await
        } else {
            let bytes = self.read(source, offset, rest).await?;
            self.buffer.extend_from_slice(&bytes);
            Ok(())
        }
    }

    async fn size_of(&self, source: &str) -> Result<u64, S3Error> {
        let (s3, bucket) = (&self.s3, self.bucket.as_str());
        let head = s3
            .send_retried(bucket, |sdk| sdk.head_object().bucket(bucket).key(source).send())
            .await?;
        // A part's size decides what is read and copied: guessing 0 would
        // silently leave the part out of the result.
        sdk_size(head.content_length(), &format!("HEAD answer for part {source}"))
    }

    /// `len` bytes of `source` from `offset`.
    async fn read(&self, source: &str, offset: u64, len: u64) -> Result<Vec<u8>, S3Error> {
        if len == 0 {
            return Ok(Vec::new());
        }
        let range = format!("bytes={offset}-{}", offset + len - 1);
        self.s3.get(&self.bucket, source, Some(&range)).await
    }

    /// Returns the result's size.
    async fn complete(&mut self) -> Result<u64, S3Error> {
        let rest = std::mem::take(&mut self.buffer);
        self.upload.complete(rest).await?;
        Ok(self.total)
    }

    async fn abort(&mut self) {
        self.upload.abort().await
    }
}
