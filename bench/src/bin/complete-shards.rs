//! A planned scan completed without scanning it: every shard goes through
//! the queue's real steps (take, record each part with its stats and counts
//! as the worker's `close_part` does, finish), with part records made up
//! from the synthetic keyspace's arithmetic instead of HEADs: the exact keys
//! and object count of each shard (from its range), one part per
//! `--part-objects` objects (the worker's default closes a part at 50,000),
//! `--record-bytes` bytes per record. Then the merge's Redis reads (shard
//! records, part lists, part stats) and its whole plan (`merge_plan`), with
//! no S3 request. For the 10^9-key figures of `just bench` (BENCHMARKS.md):
//! Redis memory with every shard completed and the merge plan's limits.
//!
//! Fails unless the shards hold every object of the keyspace exactly once
//! (their counts sum to `--objects`: the plan tiles the keyspace).
//! Prints one JSON object.

use anyhow::{ensure, Context};
use bucketscan_bench::keyspace::{BucketArgs, Keyspace};
use bucketscan_core::fleet::merge_plan::{plan_files, plan_from_files, plan_single, PartIn, SinglePlan};
use bucketscan_core::fleet::queue::{Commit, Finish, Lease, PartStats, Queue, RedisConfig};
use bucketscan_core::fleet::spec::ScanSpec;
use bucketscan_core::s3::compose::Piece;
use bucketscan_core::s3::upload::MAX_PARTS;
use bytes::Bytes;
use clap::Parser;
use std::time::{Duration, Instant};

#[derive(Parser)]
struct Args {
    /// redis://HOST:PORT holding the planned scan.
    #[arg(long)]
    redis: String,
    #[arg(long)]
    scan: String,
    /// The keyspace the scan was planned from (as synthetic-s3 served it).
    #[command(flatten)]
    bucket: BucketArgs,
    #[arg(long, default_value_t = 50_000)]
    part_objects: u64,
    /// Bytes of one output record (a measured scan's result bytes / records).
    #[arg(long, default_value_t = 200)]
    record_bytes: u64,
    /// Shards completed at once (one simulated worker each).
    #[arg(long, default_value_t = 64)]
    parallel: usize,
}

/// What the simulated workers recorded.
#[derive(Default)]
struct Totals {
    shards: u64,
    parts: u64,
    objects: u64,
}

#[tokio::main(flavor = "multi_thread")]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let con = RedisConfig::new(&args.redis).connect().await?;
    let lease = Duration::from_secs(600);
    let planner = Queue::on(&con, &args.scan, "bench", lease);
    let spec: ScanSpec = planner
        .spec()
        .await?
        .context("the scan is not planned in this Redis")?;
    let keyspace = args.bucket.keyspace();
    let started = Instant::now();
    let tasks: Vec<_> = (0..args.parallel)
        .map(|i| {
            let queue = Queue::on(&con, &args.scan, &format!("bench-{i}"), lease);
            let (spec, part_objects) = (spec.clone(), args.part_objects);
            tokio::spawn(async move { complete_all(&queue, &spec, keyspace, part_objects).await })
        })
        .collect();
    let mut totals = Totals::default();
    for task in tasks {
        let t = task.await??;
        totals.shards += t.shards;
        totals.parts += t.parts;
        totals.objects += t.objects;
    }
    let completed_s = started.elapsed().as_secs_f64();
    let counts = planner.counts().await?;
    ensure!(
        counts.pending == 0 && counts.leased == 0 && counts.done == totals.shards,
        "not every shard is done: {counts:?}"
    );
    ensure!(
        totals.objects == keyspace.objects,
        "the shards hold {} objects, the keyspace {}: the plan does not tile it",
        totals.objects,
        keyspace.objects
    );
    let merge = merge_figures(&planner, &spec, args.record_bytes).await?;
    // Numbers and fixed words only: JSON without a JSON crate (the bench's
    // other binaries print theirs the same way).
    println!(
        "{{\"shards\": {}, \"parts\": {}, \"objects\": {}, \"complete_s\": {completed_s:.3}, \"merge\": {merge}}}",
        totals.shards, totals.parts, totals.objects
    );
    Ok(())
}

/// Take shards until none is pending, completing each.
async fn complete_all(
    queue: &Queue,
    spec: &ScanSpec,
    keyspace: Keyspace,
    part_objects: u64,
) -> anyhow::Result<Totals> {
    let mut totals = Totals::default();
    while let Some(mut lease) = queue.take().await? {
        let (parts, objects) = complete(queue, spec, keyspace, &mut lease, part_objects).await?;
        totals.shards += 1;
        totals.parts += parts;
        totals.objects += objects;
    }
    Ok(totals)
}

/// Record the shard's parts as a worker would, then finish it: (parts, objects).
async fn complete(
    queue: &Queue,
    spec: &ScanSpec,
    keyspace: Keyspace,
    lease: &mut Lease,
    part_objects: u64,
) -> anyhow::Result<(u64, u64)> {
    let (after, before) = lease.shard.exclusive_bounds();
    let range = keyspace.between(after.as_deref(), before.as_deref());
    let mut parts = 0;
    let mut start = range.start;
    while start < range.end {
        let end = (start + part_objects).min(range.end);
        let key = spec.part_key(&lease.id, lease.token, 0, lease.checkpoint.as_deref());
        let (first, last) = (keyspace.key(start), keyspace.key(end - 1));
        let records = end - start;
        let stats = PartStats {
            records,
            first,
            last: last.clone(),
        };
        queue.set_part_stats(&key, &stats).await?;
        let bytes = keyspace.bytes(start..end);
        let counts = [
            ("objects", records),
            ("written", records),
            ("with_metadata", records),
            ("bytes", bytes),
        ];
        let commit = Commit {
            checkpoint: Some(&last),
            part: Some(&key),
            changes: None,
            counts: &counts,
        };
        ensure!(
            queue.commit(lease, &commit).await?,
            "lost the lease of {}",
            lease.id
        );
        parts += 1;
        start = end;
    }
    let state = queue.finish(lease, &Finish::Done).await?;
    ensure!(state == "done", "shard {} ended {state}", lease.id);
    Ok((parts, range.end - range.start))
}

/// The merge's reads from Redis, timed, and its plans for both layouts.
async fn merge_figures(queue: &Queue, spec: &ScanSpec, record_bytes: u64) -> anyhow::Result<String> {
    let started = Instant::now();
    let shards = queue.shard_records().await?;
    let mut keys = Vec::new();
    for shard in &shards {
        keys.extend(queue.parts(&shard.id).await?);
    }
    let stats = queue.part_stats(&keys).await?;
    let read_s = started.elapsed().as_secs_f64();
    let inputs: Vec<PartIn> = keys
        .into_iter()
        .zip(stats)
        .map(|(key, s)| {
            let records = s.map_or(0, |s| s.records);
            PartIn {
                key,
                size: records * record_bytes,
            }
        })
        .collect();
    ensure!(inputs.iter().all(|p| p.size > 0), "a recorded part has no stats");
    let lead = Bytes::from(spec.format.header());
    let planned = Instant::now();
    let files = plan_files(&inputs, &lead, spec.file_size);
    let single = plan_single(&inputs, &lead, spec.file_size);
    let plan_s = planned.elapsed().as_secs_f64();
    let max_pieces = files.iter().map(|f| f.pieces.len()).max().unwrap_or(0);
    let file_bytes = |f: &bucketscan_core::fleet::merge_plan::FilePlan| -> u64 {
        inputs[f.parts.clone()].iter().map(|p| p.size).sum()
    };
    let (single_kind, single_parts) = match &single {
        SinglePlan::Direct(pieces) => ("direct", pieces.len()),
        SinglePlan::TwoLevel(plans) => {
            let keys: Vec<String> = (0..plans.len()).map(|i| spec.data_key(i)).collect();
            let sizes: Vec<u64> = plans.iter().map(file_bytes).collect();
            let top = plan_from_files(&keys, &sizes, &lead).map_or(usize::MAX, |p| p.len());
            ("two-level", top)
        }
    };
    let copied = files
        .iter()
        .flat_map(|f| &f.pieces)
        .filter(|p| matches!(p, Piece::Copy(_)))
        .count();
    Ok(format!(
        "{{\"parts\": {}, \"bytes\": {}, \"redis_read_s\": {read_s:.3}, \"plan_s\": {plan_s:.4}, \
         \"file_size\": {}, \"dataset_files\": {}, \"dataset_max_parts_per_upload\": {max_pieces}, \
         \"dataset_max_file_bytes\": {}, \"dataset_copied_parts\": {copied}, \"single\": \"{single_kind}\", \
         \"single_parts_per_upload\": {single_parts}, \"max_parts\": {MAX_PARTS}}}",
        inputs.len(),
        inputs.iter().map(|p| p.size).sum::<u64>(),
        spec.file_size,
        files.len(),
        files.iter().map(file_bytes).max().unwrap_or(0),
    ))
}
