//! A whole-bucket scan in one process: plan shards, scan several at once,
//! write every record to one output, or to a dataset of files with a
//! manifest (`dataset`). This is `bucketscan-worker scan`.
//!
//! May import: the rest of `scan`, `keyspace` and `s3`.

use crate::keyspace::planner::{plan, plan_from_marks, BucketLister, PlanOptions, PlannedShard};
use crate::s3::error::S3Error;
use crate::scan::dataset::{
    ChangeCounts, DataFile, DatasetCounts, DatasetManifest, DatasetRoot, IncrementalSummary, ShardFiles,
};
use crate::scan::engine::{Engine, ShardOutcome};
use crate::scan::output::{Destination, OutputOptions, OutputSummary, RecordWriter};
use crate::scan::record::Record;
use crate::scan::store_check::StoreCheck;
use futures::stream::{self, StreamExt, TryStreamExt};
use futures::FutureExt;
use std::sync::Arc;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

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

/// Plan the shards of the engine's bucket: an incremental engine's from
/// its baseline's blocks, where they are enough (no LIST, and each shard
/// reads its baseline from the block it begins at), else by LIST.
pub async fn plan_bucket(engine: &Engine, opts: &PlanOptions) -> Result<Vec<PlannedShard>, S3Error> {
    if let Some(planned) = engine
        .incremental()
        .and_then(|inc| plan_from_marks(opts, inc.baseline.marks()))
    {
        return Ok(planned);
    }
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
    let (tx, rx) = mpsc::channel::<Box<Record>>(4096);
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
    let mut received = Received { engine, rx, scanning };
    let written = async {
        // A single output has no change set (`--baseline` needs a dataset).
        while let Some((record, kept, _change)) = received.next().await {
            if let (Some(record), true) = (record, kept) {
                writer.write(&record).await?;
            }
        }
        Ok(())
    }
    .await;
    let outcomes = match received.finish(written).await {
        Ok(outcomes) => outcomes,
        Err(e) => {
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

/// What a dataset scan wrote.
#[derive(Clone, Debug)]
pub struct DatasetSummary {
    pub shards: usize,
    pub listed: u64,
    pub manifest: DatasetManifest,
}

/// Scan `shards` into a dataset under `root`: each shard writes its own
/// files of at most about `file_size` bytes, in key order; the manifest,
/// written once every shard succeeded, lists them all. `prefix`: the
/// scanned prefix, for the manifest. `check`: the store check begun before
/// the scan, settled beside it (recorded, so the dataset can be a later
/// scan's baseline). An incremental engine also writes the change set
/// under `changes/`.
pub async fn scan_dataset(
    engine: &Arc<Engine>,
    shards: Vec<PlannedShard>,
    opts: &ScanOptions,
    root: &DatasetRoot,
    file_size: u64,
    prefix: &str,
    check: impl std::future::Future<Output = Option<StoreCheck>>,
) -> Result<DatasetSummary, S3Error> {
    root.prepare().await?;
    let shard_count = shards.len();
    let incremental = engine.incremental().is_some();
    let per_shard: Vec<(usize, ShardWritten)> = stream::iter(shards.into_iter().enumerate())
        .map(|(i, p)| {
            let files = ShardFiles::new(
                root.clone(),
                opts.output_opts.clone(),
                Some(engine.s3.clone()),
                i,
                file_size,
            );
            let changes = incremental.then(|| {
                ShardFiles::new(
                    root.clone(),
                    opts.output_opts.clone(),
                    Some(engine.s3.clone()),
                    i,
                    file_size,
                )
                .changes()
            });
            shard_to_files(engine.clone(), p, files, changes).map(move |r| r.map(|written| (i, written)))
        })
        .buffer_unordered(opts.shard_parallelism.max(1))
        .try_collect()
        .await?;
    let mut per_shard = per_shard;
    per_shard.sort_by_key(|(i, _)| *i);
    let mut counts = DatasetCounts::default();
    let mut files = Vec::new();
    let mut change_files = Vec::new();
    let mut changed = ChangeCounts::default();
    let mut listed = 0;
    for (_, written) in per_shard {
        changed.absorb(&written.changed);
        listed += written.outcome.listed;
        counts.absorb(&written.counts);
        files.extend(written.files);
        change_files.extend(written.changes);
    }
    let check = check.await;
    let trusted = match engine.incremental() {
        Some(inc) => inc.trust_last_modified.get().await,
        None => false,
    };
    let incremental = engine.incremental().map(|inc| {
        let c = engine.counters.snapshot();
        IncrementalSummary {
            baseline: inc.baseline.location.clone(),
            reused_records: trusted,
            detail: check.as_ref().map(|c| c.detail.clone()).unwrap_or_else(|| {
                "no store check (the output is not in S3): every object was HEADed".into()
            }),
            changes: root.changes_location(),
            change_files,
            counts: ChangeCounts {
                reused: c.reused,
                heads: c.heads,
                ..changed.clone()
            },
            baseline_bytes_read: inc.baseline.bytes_read.load(std::sync::atomic::Ordering::Relaxed),
        }
    });
    counts.filtered = engine
        .counters
        .filtered
        .load(std::sync::atomic::Ordering::Relaxed);
    let format = &opts.output_opts;
    let manifest = DatasetManifest {
        result: root.data_location(),
        layout: "dataset".into(),
        format: format.format.extension(false).into(),
        gzip: format.gzip,
        bucket: format.bucket.clone(),
        prefix: prefix.to_string(),
        records: files.iter().map(|f| f.records).sum(),
        result_bytes: files.iter().map(|f| f.bytes).sum(),
        files,
        counts,
        shards: shard_count,
        created: time::OffsetDateTime::now_utc()
            .format(&time::format_description::well_known::Rfc3339)
            .unwrap_or_default(),
        only_with_metadata: engine.opts.only_with_metadata,
        store_check: check,
        incremental,
        filter: engine.opts.filter.clone(),
        columns: Some(engine.opts.columns),
        record_format: Some(crate::scan::record::RECORD_FORMAT),
    };
    manifest.write(root, Some(&engine.s3)).await?;
    Ok(DatasetSummary {
        shards: shard_count,
        listed,
        manifest,
    })
}

/// What one shard wrote.
struct ShardWritten {
    outcome: ShardOutcome,
    files: Vec<DataFile>,
    changes: Vec<DataFile>,
    counts: DatasetCounts,
    /// Of the change records written (exact: a pass resumed after a failure
    /// counts nothing twice, as the engine's live counters may).
    changed: ChangeCounts,
}

/// One shard's records into its own files, in key order, and its changes
/// into its change files (incremental scans).
async fn shard_to_files(
    engine: Arc<Engine>,
    planned: PlannedShard,
    mut files: ShardFiles,
    mut changes: Option<ShardFiles>,
) -> Result<ShardWritten, S3Error> {
    let (tx, rx) = mpsc::channel::<Box<Record>>(4096);
    let scanning = {
        let engine = engine.clone();
        tokio::spawn(async move { engine.scan_shard(&planned.shard, &tx).await })
    };
    let mut counts = DatasetCounts::default();
    let mut changed = ChangeCounts::default();
    let mut received = Received {
        engine: &engine,
        rx,
        scanning,
    };
    let written = async {
        while let Some((record, kept, change)) = received.next().await {
            if let (Some(change), Some(changes)) = (change, changes.as_mut()) {
                changed.add(change.change);
                changes.write(&change).await?;
            }
            if let Some(record) = record {
                counts.add(&record, kept);
                if kept {
                    files.write(&record).await?;
                }
            }
        }
        Ok(())
    }
    .await;
    match received.finish(written).await {
        Ok(outcome) => Ok(ShardWritten {
            outcome,
            files: files.finish().await?,
            changes: match changes {
                Some(c) => c.finish().await?,
                None => Vec::new(),
            },
            counts,
            changed,
        }),
        Err(e) => {
            files.abort().await;
            if let Some(c) = changes {
                c.abort().await;
            }
            Err(e)
        }
    }
}

/// The receive and keep half of both kinds of scan's loop: the records the
/// `scanning` task sends on `rx`, each split into its result, if the engine
/// keeps it (`--only-with-metadata`), and its change; then the
/// scan's outcome.
struct Received<'a, T> {
    engine: &'a Engine,
    rx: mpsc::Receiver<Box<Record>>,
    scanning: JoinHandle<Result<T, S3Error>>,
}

impl<T> Received<'_, T> {
    /// The next record's result, whether the output keeps it, and its
    /// change; `None` once the scan sent everything.
    async fn next(&mut self) -> Option<(Option<Record>, bool, Option<Record>)> {
        let (result, change) = self.rx.recv().await?.split_change();
        let kept = result.as_ref().is_some_and(|r| self.engine.keep(r));
        Some((result, kept, change))
    }

    /// The scan's outcome once the caller stopped receiving: a failed write
    /// (`written`) comes first, as dropping `rx` after it stops the scan.
    async fn finish(self, written: Result<(), S3Error>) -> Result<T, S3Error> {
        drop(self.rx); // a failed writer stops the shards too
        let scanned = self
            .scanning
            .await
            .map_err(|e| S3Error::Other(format!("scan task failed: {e}")))
            .and_then(|r| r);
        written.and(scanned)
    }
}
