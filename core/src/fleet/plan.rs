//! Planning a distributed scan: check both buckets, cut the keyspace into
//! shards with LIST only, store the spec and queue the shards. The worker's
//! `plan` command and the operator both do it this way.
//!
//! May import: `spec`, `queue`, `keyspace` and `s3`.

use crate::fleet::queue::{Queue, QueueError};
use crate::fleet::spec::{check_output, ScanSpec};
use crate::keyspace::planner::{plan, BucketLister, PlanOptions};
use crate::s3::error::S3Error;
use crate::s3::S3;

#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    #[error("cannot list s3://{bucket}: {source}")]
    Source { bucket: String, source: S3Error },
    #[error("cannot use output bucket s3://{bucket}: {source}")]
    Output { bucket: String, source: S3Error },
    #[error("planning shards: {0}")]
    Planning(S3Error),
    #[error(transparent)]
    Queue(#[from] QueueError),
    /// The output settings cannot work (file size, a single result too big).
    #[error("{0}")]
    Settings(String),
}

impl PlanError {
    /// A cause that may pass by itself (the store throttling, failing or
    /// unreachable past every retry; Redis unreachable): planning again
    /// later may succeed. Missing buckets, refused access and bad settings
    /// are not.
    pub fn is_transient(&self) -> bool {
        match self {
            PlanError::Source { source, .. } | PlanError::Output { source, .. } => source.is_retryable(),
            PlanError::Planning(e) => e.is_retryable(),
            PlanError::Queue(q) => q.is_transient(),
            PlanError::Settings(_) => false,
        }
    }
}

/// Shards planned, and how many of them were new to the queue (planning
/// again adds nothing twice).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Planned {
    pub shards: usize,
    pub added: usize,
    /// Objects the planner counted (a lower bound where it sampled).
    pub estimated_objects: u64,
}

pub async fn plan_scan(
    s3: &S3,
    spec: &ScanSpec,
    opts: &PlanOptions,
    queue: &Queue,
) -> Result<Planned, PlanError> {
    let check = |objects| {
        check_output(spec.format, spec.layout, spec.file_size, spec.gzip, objects)
            .map_err(PlanError::Settings)
    };
    check(0)?;
    s3.check_bucket(&spec.bucket)
        .await
        .map_err(|source| PlanError::Source {
            bucket: spec.bucket.clone(),
            source,
        })?;
    s3.check_bucket(&spec.output_bucket)
        .await
        .map_err(|source| PlanError::Output {
            bucket: spec.output_bucket.clone(),
            source,
        })?;
    let lister = BucketLister {
        s3,
        bucket: &spec.bucket,
    };
    let opts = PlanOptions {
        prefix: spec.prefix.clone(),
        ..opts.clone()
    };
    let shards = plan(&lister, &opts).await.map_err(PlanError::Planning)?;
    // Refused before anything is stored: a single result that cannot fit
    // would otherwise fail only at the merge, after the whole scan.
    check(shards.iter().map(|s| s.estimated_objects).sum())?;
    queue.set_spec(spec).await?;
    let added = queue
        .enqueue(&shards.iter().map(|p| p.shard.clone()).collect::<Vec<_>>())
        .await?;
    Ok(Planned {
        shards: shards.len(),
        added,
        estimated_objects: shards.iter().map(|p| p.estimated_objects).sum(),
    })
}
