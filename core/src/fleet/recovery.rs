//! Surviving the loss of Redis's state (a Redis restarted without
//! persistence): every finished shard also leaves a small record in S3, next
//! to its parts. Planning again restores those shards as done, with their
//! parts, and queues only the key ranges no record covers.
//!
//! May import: `spec`, `queue`, `keyspace` and `s3`.

use crate::fleet::queue::{Queue, QueueError};
use crate::fleet::spec::ScanSpec;
use crate::keyspace::coverage::{overlapping, uncovered};
use crate::keyspace::shard::Shard;
use crate::s3::error::S3Error;
use crate::s3::{BucketLister, ListRequest, Pages, S3};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A finished shard as S3 remembers it: `{parts}/{id}/done.{token}.json`.
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
    #[error(
        "the scan's parts hold more than {MAX_DONE_BYTES} bytes of done records, or records naming more \
         than {MAX_DONE_PARTS} parts, more than any plan of it writes: they are not all this scan's \
         (delete the scan's parts folder to scan it anew)"
    )]
    TooManyDone,
}

impl RecoveryError {
    /// As [`crate::fleet::plan::PlanError::is_transient`]: worth another try later.
    pub fn is_transient(&self) -> bool {
        match self {
            RecoveryError::S3(e) => e.is_retryable(),
            RecoveryError::Queue(q) => q.is_transient(),
            RecoveryError::Corrupt { .. } | RecoveryError::TooManyDone => false,
        }
    }
}

/// Write the record of lease `token`'s finished shard: under a key of the
/// lease's own, so a lease that lost the shard and finished it anyway can
/// never overwrite the record of the lease that won it.
pub async fn write_done(s3: &S3, spec: &ScanSpec, record: &DoneRecord, token: u64) -> Result<(), S3Error> {
    let body = serde_json::to_vec(record).expect("a done record serializes");
    let key = spec.done_key(&record.id, token);
    s3.put(&spec.output_bucket, &key, "application/json", body.into())
        .await
        .map(drop)
}

/// The shard whose done record `key` is: `PARTS/ID/done.json` (releases
/// before the lease's token was in the name) or `PARTS/ID/done.TOKEN.json`,
/// exactly one level under the scan's parts (deeper keys are not this
/// scan's).
fn done_record_of<'a>(parts: &str, key: &'a str) -> Option<&'a str> {
    let (id, name) = key.strip_prefix(parts)?.split_once('/')?;
    let token = name.strip_prefix("done.")?.strip_suffix("json")?;
    let named = token.is_empty()
        || token
            .strip_suffix('.')
            .is_some_and(|t| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()));
    (named && !id.is_empty()).then_some(id)
}

/// The largest done record read: one names a shard's range and its parts
/// (a few KB; a shard of a 10^9-object scan has tens of parts). A larger
/// object under that name is not one a worker wrote: its shard is scanned
/// again, which is exact.
pub const MAX_DONE_RECORD_BYTES: u64 = 1 << 20;
/// The most done-record bytes read for one replan (the operator reads them:
/// the objects are in the tenant's output, their number the tenant's).
pub const MAX_DONE_BYTES: u64 = 64 << 20;
/// The most parts all done records of a replan may name (a part is a
/// string once decoded, several times its bytes when empty): a 10^9-object
/// scan has tens of thousands.
pub const MAX_DONE_PARTS: usize = 1_000_000;

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
    let mut read = 0u64;
    let mut parts = 0usize;
    while let Some(page) = pages.next().await? {
        for object in &page.objects {
            let Some(id) = done_record_of(&spec.parts_prefix(), &object.key) else {
                continue;
            };
            if object.size > MAX_DONE_RECORD_BYTES {
                tracing::warn!(key = %object.key, size = object.size, "not a done record a worker wrote: its shard is scanned again");
                continue;
            }
            // Whole (an empty object's range would be refused); in the
            // operator no answer is read past its cap. Counted as read, not
            // as listed: the listing is the endpoint's word.
            let body = s3.get(bucket, &object.key, None).await?;
            if body.len() as u64 > MAX_DONE_RECORD_BYTES {
                continue;
            }
            read += body.len() as u64;
            if read > MAX_DONE_BYTES {
                return Err(RecoveryError::TooManyDone);
            }
            let record: DoneRecord =
                serde_json::from_slice(&body).map_err(|source| RecoveryError::Corrupt {
                    key: object.key.clone(),
                    source,
                })?;
            parts += record.parts.len();
            if parts > MAX_DONE_PARTS {
                return Err(RecoveryError::TooManyDone);
            }
            // A record under another shard's name is not that shard's.
            if record.id == id {
                records.push(record);
            }
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
    let done = disjoint(read_done(s3, spec).await?);
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

/// Records whose ranges do not overlap, chosen in key order. Each record
/// is whole in itself (its parts cover its range), but two may overlap: a
/// lease that lost its shard and still finished it wrote one for the range
/// it had, while the next lease of the shard split part of it off. Any
/// disjoint choice is exact, since what no chosen record covers is queued
/// and scanned again.
///
/// In key order, a record overlaps the chosen ones only if it overlaps the
/// last one chosen (they are disjoint and sorted): one pass, not every pair.
fn disjoint(mut records: Vec<DoneRecord>) -> Vec<DoneRecord> {
    records.sort_by(|a, b| a.range.cmp_in_key_order(&b.range));
    let mut ids = std::collections::HashSet::new();
    let mut chosen: Vec<DoneRecord> = Vec::with_capacity(records.len());
    for record in records {
        let overlaps_last = chosen
            .last()
            .is_some_and(|last| overlapping(&[last.range.clone(), record.range.clone()]).is_some());
        if !overlaps_last && ids.insert(record.id.clone()) {
            chosen.push(record);
        }
    }
    chosen
}

/// Mark the plan complete (as `plan::mark_planned` does, in its terms).
async fn mark(queue: &Queue, shards: usize) -> Result<(), QueueError> {
    let summary = serde_json::json!({"shards": shards, "added": 0, "estimated_objects": 0});
    queue.mark_plan_complete(&summary.to_string()).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(id: &str, start_after: Option<&str>, end: Option<&str>) -> DoneRecord {
        DoneRecord {
            id: id.into(),
            range: Shard {
                prefix: String::new(),
                start_after: start_after.map(str::to_string),
                end: end.map(str::to_string),
            },
            parts: vec![format!("{id}.part")],
            counts: BTreeMap::new(),
        }
    }

    /// A lease that lost shard x finished [a, c) while the next lease of x
    /// split it into x [a, b) and y [b, c), both finished: restoring all
    /// three would hold [b, c) twice. The choice is disjoint, whatever order
    /// the listing gives, and what it leaves out is a gap to scan again.
    #[test]
    fn overlapping_done_records_are_never_restored_together() {
        let zombie = record("x", Some("a"), Some("c"));
        let winner = record("x", Some("a"), Some("b"));
        let sibling = record("y", Some("b"), Some("c"));
        for order in [
            vec![zombie.clone(), winner.clone(), sibling.clone()],
            vec![sibling.clone(), zombie.clone(), winner.clone()],
            vec![zombie.clone(), sibling.clone()],
        ] {
            let chosen = disjoint(order.clone());
            let ranges: Vec<Shard> = chosen.iter().map(|r| r.range.clone()).collect();
            assert_eq!(overlapping(&ranges), None, "{order:?}");
            let ids: std::collections::BTreeSet<&str> = chosen.iter().map(|r| r.id.as_str()).collect();
            assert_eq!(ids.len(), chosen.len(), "one record per shard: {chosen:?}");
        }
        // Nothing overlapping: all of them.
        let apart = vec![record("p", None, Some("m")), record("q", Some("m"), None)];
        assert_eq!(disjoint(apart.clone()), apart);
        // A big scan's records with some zombies among them: all the
        // disjoint ones (in one pass: every pair would take hours).
        let mut many: Vec<DoneRecord> = (0..100_000u32)
            .map(|i| {
                let (lo, hi) = (format!("k{i:06}"), format!("k{:06}", i + 1));
                record(&format!("s{i}"), Some(&lo), Some(&hi))
            })
            .collect();
        many.extend((0..1000u32).map(|i| {
            let (lo, hi) = (format!("k{:06}", i * 50), format!("k{:06}", i * 50 + 3));
            record(&format!("s{}", i * 50), Some(&lo), Some(&hi))
        }));
        let chosen = disjoint(many);
        assert_eq!(chosen.len(), 100_000);
        let ranges: Vec<Shard> = chosen.iter().map(|r| r.range.clone()).collect();
        assert_eq!(overlapping(&ranges), None);
    }

    #[test]
    fn done_records_are_named_by_their_lease() {
        for name in ["parts/s/x/done.json", "parts/s/x/done.12345.json"] {
            assert_eq!(done_record_of("parts/s/", name), Some("x"), "{name}");
        }
        for name in [
            "parts/s/x/done..json",
            "parts/s/x/done.1a.json",
            "parts/s/x/1-start.json",
            // Another scan's, nested under this one's id (`s/b`).
            "parts/s/b/x/done.7.json",
            "parts/t/x/done.7.json",
        ] {
            assert_eq!(done_record_of("parts/s/", name), None, "{name}");
        }
    }
}
