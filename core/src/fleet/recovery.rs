//! Surviving the loss of Redis's state (a Redis restarted without
//! persistence): every finished shard also leaves a small record in S3, next
//! to its parts. Planning again restores those shards as done, with their
//! parts, and queues only the key ranges no record covers.
//!
//! May import: `spec`, `queue`, `keyspace` and `s3`.

use crate::fleet::queue::{Queue, QueueError};
use crate::fleet::spec::ScanSpec;
use crate::keyspace::coverage::uncovered;
use crate::keyspace::shard::Shard;
use crate::s3::error::S3Error;
use crate::s3::{BucketLister, ListRequest, Pages, S3};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A finished shard as S3 remembers it: `{output_prefix}parts/{id}/done.json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DoneRecord {
    pub id: String,
    /// The range the shard covered in the end (after any splits).
    pub range: Shard,
    /// Its recorded parts, in key order.
    pub parts: Vec<String>,
    /// Exact result counts of those parts.
    pub counts: BTreeMap<String, u64>,
}

#[derive(Debug, thiserror::Error)]
pub enum RecoveryError {
    #[error(transparent)]
    S3(#[from] S3Error),
    #[error(transparent)]
    Queue(#[from] QueueError),
    #[error("done record {key}: {source}")]
    Corrupt { key: String, source: serde_json::Error },
}

impl RecoveryError {
    /// As [`crate::fleet::plan::PlanError::is_transient`]: worth another try later.
    pub fn is_transient(&self) -> bool {
        match self {
            RecoveryError::S3(e) => e.is_retryable(),
            RecoveryError::Queue(q) => q.is_transient(),
            RecoveryError::Corrupt { .. } => false,
        }
    }
}

pub async fn write_done(s3: &S3, spec: &ScanSpec, record: &DoneRecord) -> Result<(), S3Error> {
    let body = serde_json::to_vec(record).expect("a done record serializes");
    let key = spec.done_key(&record.id);
    s3.put(&spec.output_bucket, &key, "application/json", body.into())
        .await
}

/// Every done record under the scan's parts.
pub async fn read_done(s3: &S3, spec: &ScanSpec) -> Result<Vec<DoneRecord>, RecoveryError> {
    let bucket = spec.output_bucket.as_str();
    let req = ListRequest {
        prefix: spec.parts_prefix(),
        max_keys: 1000,
        ..ListRequest::default()
    };
    let lister = BucketLister { s3, bucket };
    let mut pages = Pages::new(&lister, req);
    let mut records = Vec::new();
    while let Some(page) = pages.next().await? {
        for object in page.objects.iter().filter(|o| o.key.ends_with("/done.json")) {
            let body = s3.get(bucket, &object.key, None).await?;
            records.push(
                serde_json::from_slice(&body).map_err(|source| RecoveryError::Corrupt {
                    key: object.key.clone(),
                    source,
                })?,
            );
        }
    }
    Ok(records)
}

/// Plan a scan whose Redis state is gone: restore every finished shard from
/// its done record, queue the ranges none covers. Returns (restored, queued).
///
/// When Redis still holds shards (it lost only the mark, or part of a
/// plan), they stand and only the ranges they leave are queued: restoring
/// done records beside them could overlap them.
pub async fn replan(s3: &S3, spec: &ScanSpec, queue: &Queue) -> Result<(usize, usize), RecoveryError> {
    let stored = queue.shard_ranges().await?;
    if !stored.is_empty() {
        let gaps = uncovered(&spec.prefix, &stored);
        queue.set_spec(spec).await?;
        queue.enqueue(&gaps).await?;
        mark(queue, stored.len() + gaps.len()).await?;
        return Ok((0, gaps.len()));
    }
    let done = read_done(s3, spec).await?;
    for record in &done {
        queue
            .restore_done(&record.id, &record.range, &record.parts, &record.counts)
            .await?;
    }
    let ranges: Vec<Shard> = done.iter().map(|r| r.range.clone()).collect();
    let gaps = uncovered(&spec.prefix, &ranges);
    queue.set_spec(spec).await?;
    queue.enqueue(&gaps).await?;
    mark(queue, done.len() + gaps.len()).await?;
    Ok((done.len(), gaps.len()))
}

/// Mark the plan complete (as `plan::mark_planned` does, in its terms).
async fn mark(queue: &Queue, shards: usize) -> Result<(), QueueError> {
    let summary = serde_json::json!({"shards": shards, "added": 0, "estimated_objects": 0});
    queue.mark_plan_complete(&summary.to_string()).await
}
