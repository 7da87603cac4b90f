//! A whole-bucket scan in one process: plan shards, scan several at once,
//! write every record to one output. This is `bucketscan-worker scan`.
//!
//! May import: the rest of `scan`, `keyspace` and `s3`.

use crate::keyspace::planner::{plan, BucketLister, PlanOptions, PlannedShard};
use crate::s3::error::S3Error;
use crate::scan::engine::{Engine, ShardOutcome};
use crate::scan::output::{Destination, OutputOptions, OutputSummary, RecordWriter};
use crate::scan::record::Record;
use futures::stream::{self, StreamExt, TryStreamExt};
use std::sync::Arc;
use tokio::sync::mpsc;

#[derive(Clone, Debug)]
pub struct ScanOptions {
    /// Shards listed at the same time.
    pub shard_parallelism: usize,
    pub output: Destination,
    pub output_opts: OutputOptions,
}

#[derive(Clone, Debug)]
pub struct ScanSummary {
    pub shards: usize,
    pub listed: u64,
    pub output: OutputSummary,
}

/// Plan the shards of the engine's bucket.
pub async fn plan_bucket(engine: &Engine, opts: &PlanOptions) -> Result<Vec<PlannedShard>, S3Error> {
    let lister = BucketLister {
        s3: &engine.s3,
        bucket: &engine.opts.bucket,
    };
    plan(&lister, opts).await
}

/// Scan `shards` into one output. The output only becomes visible when every
/// shard succeeded.
pub async fn scan_shards(
    engine: &Arc<Engine>,
    shards: Vec<PlannedShard>,
    opts: &ScanOptions,
) -> Result<ScanSummary, S3Error> {
    let mut writer = RecordWriter::create(&opts.output, &opts.output_opts, Some(&engine.s3)).await?;
    let (tx, mut rx) = mpsc::channel::<Record>(4096);
    let shard_count = shards.len();
    let scanning = {
        let engine = engine.clone();
        let parallelism = opts.shard_parallelism.max(1);
        tokio::spawn(async move {
            let outcomes: Vec<ShardOutcome> = stream::iter(shards)
                .map(|p| {
                    let engine = engine.clone();
                    let tx = tx.clone();
                    async move { engine.scan_shard(&p.shard, &tx).await }
                })
                .buffer_unordered(parallelism)
                .try_collect()
                .await?;
            Ok::<_, S3Error>(outcomes)
        })
    };
    let mut write_error = None;
    while let Some(record) = rx.recv().await {
        if !engine.keep(&record) {
            continue;
        }
        if let Err(e) = writer.write(&record).await {
            write_error = Some(e);
            break;
        }
    }
    drop(rx); // a failed writer stops the shards too
    let scanned = scanning
        .await
        .map_err(|e| S3Error::Other(format!("scan task failed: {e}")))
        .and_then(|r| r);
    let outcomes = match (write_error, scanned) {
        (None, Ok(outcomes)) => outcomes,
        (Some(e), _) | (None, Err(e)) => {
            writer.abort().await;
            return Err(e);
        }
    };
    let output = writer.finish().await?;
    Ok(ScanSummary {
        shards: shard_count,
        listed: outcomes.iter().map(|o| o.listed).sum(),
        output,
    })
}
