//! `plan`, `run` and `merge`: one scan shared by many worker processes
//! through Redis (see docs/queue-protocol.md).

use crate::{DeletePartsArgs, MergeArgs, OnDeadShards, PlanArgs, QueueArgs, RetryArgs, RunArgs};
use anyhow::{bail, Context};
use bucketscan_core::fleet::merge_ahead::Ahead;
use bucketscan_core::fleet::plan::plan_scan;
use bucketscan_core::fleet::queue::{Queue, RedisConfig};
use bucketscan_core::fleet::run::{RunOptions, Runner};
use bucketscan_core::fleet::spec::{check_output, normalize_output_prefix, ScanSpec};
use bucketscan_core::keyspace::planner::PlanOptions;
use bucketscan_core::s3::head::HeadClient;
use bucketscan_core::scan::engine::{Engine, EngineOptions};
use bucketscan_core::scan::listed::MetadataSource;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

impl QueueArgs {
    async fn connect(&self, owner: &str, lease: Duration) -> anyhow::Result<Queue> {
        let ca_pem = match &self.redis_ca_file {
            Some(path) => Some(
                std::fs::read(path)
                    .with_context(|| format!("cannot read --redis-ca-file {}", path.display()))?,
            ),
            None => None,
        };
        let redis = RedisConfig {
            ca_pem,
            patience: Duration::from_secs(self.redis_patience_secs),
            ..RedisConfig::new(&self.redis)
        };
        Queue::connect(&redis, &self.scan, owner, lease)
            .await
            .with_context(|| format!("cannot reach Redis for scan {:?}", self.scan))
    }
}

async fn spec_of(queue: &Queue, scan: &str) -> anyhow::Result<ScanSpec> {
    queue.spec().await?.with_context(|| {
        format!("scan {scan:?} is not planned in this Redis (run `bucketscan-worker plan` first)")
    })
}

/// The spec of a scan once its plan is complete, `None` when the worker is
/// stopped first. The plan is awaited, not just the spec: a worker that
/// found the queue empty before the last shard was stored would end
/// (`Runner::slot`), and the spec is written only after planning anyway.
async fn planned_spec(
    queue: &Queue,
    scan: &str,
    stop: &CancellationToken,
) -> anyhow::Result<Option<ScanSpec>> {
    let planned = poll_until(stop, |first| async move {
        let mark = queue.plan_complete().await?;
        if mark.is_none() && first {
            tracing::info!(scan, "waiting for the plan");
        }
        Ok(mark)
    })
    .await?;
    match planned {
        Some(_) => spec_of(queue, scan).await.map(Some),
        None => Ok(None),
    }
}

/// `probe` every [`WAIT_POLL`] until it gives a value; `None` when `stop`
/// comes first. `probe` is told whether it is the first look (to say once
/// what is awaited).
// A closure returning a future, not an async closure: the latter's future
// was not `Send` for every lifetime, and `run` is spawned.
async fn poll_until<T, F>(
    stop: &CancellationToken,
    mut probe: impl FnMut(bool) -> F,
) -> anyhow::Result<Option<T>>
where
    F: std::future::Future<Output = anyhow::Result<Option<T>>>,
{
    let mut first = true;
    loop {
        if let Some(value) = probe(first).await? {
            return Ok(Some(value));
        }
        first = false;
        tokio::select! {
            _ = tokio::time::sleep(WAIT_POLL) => {}
            _ = stop.cancelled() => return Ok(None),
        }
    }
}

/// A merge stopped (SIGTERM: its pod evicted, its node drained) while it
/// waited for the last shards: nothing was merged, and a merge run again
/// may succeed, so it exits as transient (75), and the operator merges
/// again rather than failing the scan.
#[derive(Debug)]
pub struct StoppedWaiting;

impl std::fmt::Display for StoppedWaiting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("stopped before the scan's last shard finished: nothing merged")
    }
}

impl std::error::Error for StoppedWaiting {}

/// Wait until the scan is planned and no shard of it is pending or leased
/// (the merge's own conditions, checked again by the merge); false when
/// stopped first. A Redis that lost the scan meanwhile (restarted without
/// persistence) counts no shards: the wait goes on until the operator has
/// planned it again, rather than failing the merge for good.
async fn shards_finished(queue: &Queue, stop: &CancellationToken) -> anyhow::Result<bool> {
    let finished = poll_until(stop, |first| async move {
        let left = queue.counts().await?;
        if left.pending == 0 && left.leased == 0 && queue.plan_complete().await?.is_some() {
            return Ok(Some(()));
        }
        if first {
            tracing::info!(
                pending = left.pending,
                leased = left.leased,
                "waiting for the last shards"
            );
        }
        Ok(None)
    })
    .await?;
    Ok(finished.is_some())
}

/// How often a worker started before its scan's plan looks for it, and a
/// merge started before the last shard ended looks at the shards: a read
/// each, so a thousand waiting workers cost Redis 5,000 reads a second.
const WAIT_POLL: Duration = Duration::from_millis(200);

fn engine_for(
    s3: std::sync::Arc<bucketscan_core::s3::S3>,
    head: HeadClient,
    spec: &ScanSpec,
    concurrency: u32,
    max_rate: Option<f64>,
    metadata_source: MetadataSource,
) -> std::sync::Arc<Engine> {
    Engine::new(
        s3,
        head,
        EngineOptions {
            bucket: spec.bucket.clone(),
            concurrency: concurrency as usize,
            only_with_metadata: spec.only_with_metadata,
            page_size: 1000,
            max_rate,
            metadata_source,
            filter: spec.filter.clone(),
            columns: spec.columns,
        },
    )
}

pub async fn plan(args: PlanArgs) -> anyhow::Result<()> {
    let Some((output_bucket, output_prefix)) = parse_output(&args.output) else {
        bail!(
            "--output must be s3://BUCKET/ or s3://BUCKET/PREFIX/, got {:?}",
            args.output
        );
    };
    let filter = args.filters.filter(&args.source.prefix)?;
    let spec = ScanSpec {
        bucket: args.source.bucket.clone(),
        prefix: args.source.prefix.clone(),
        output_bucket,
        output_prefix,
        gzip: args.gzip,
        only_with_metadata: args.only_with_metadata,
        max_failures: args.max_failures,
        format: args.format,
        layout: args.layout,
        file_size: args.file_size,
        scan_id: args.queue.scan.clone(),
        baseline: args.baseline.clone(),
        change_set: false,
        filter,
        columns: args.columns.options(),
    };
    // Before Redis or S3 is asked anything (the estimate comes with planning).
    check_output(spec.format, spec.layout, spec.file_size, spec.gzip, 0).map_err(anyhow::Error::msg)?;
    let s3 = args.source.endpoint.connect(64).await?;
    let opts = PlanOptions {
        delimiter: Some(args.delimiter.clone()).filter(|d| !d.is_empty()),
        target_shards: args.target_shards as usize,
        min_shard_objects: args.min_shard_objects,
        max_requests: args.plan_list_budget as usize,
        ..PlanOptions::default()
    };
    let queue = args.queue.connect("planner", Duration::from_secs(30)).await?;
    if args.replan {
        let (restored, queued) = bucketscan_core::fleet::recovery::replan(&s3, &spec, &queue)
            .await
            .with_context(|| format!("cannot plan scan {:?} again", args.queue.scan))?;
        eprintln!(
            "planned scan {:?} again: {restored} finished shards restored from S3, {queued} ranges queued",
            args.queue.scan
        );
        return Ok(());
    }
    let planned = plan_scan(&s3, &spec, &opts, &queue)
        .await
        .with_context(|| format!("cannot plan scan {:?}", args.queue.scan))?;
    eprintln!(
        "planned scan {:?}: {} shards ({} new)",
        args.queue.scan, planned.shards, planned.added
    );
    Ok(())
}

pub async fn run(args: RunArgs) -> anyhow::Result<()> {
    let owner = args.name.clone().unwrap_or_else(default_name);
    let queue = args
        .queue
        .connect(&owner, Duration::from_secs(args.lease_secs))
        .await?;
    let stop = CancellationToken::new();
    spawn_signal_handler(stop.clone());
    let spec = if args.wait_for_plan {
        let Some(spec) = planned_spec(&queue, &args.queue.scan, &stop).await? else {
            eprintln!("worker {owner}: stopped while waiting for the plan");
            return Ok(());
        };
        spec
    } else {
        spec_of(&queue, &args.queue.scan).await?
    };
    let s3 = args.endpoint.connect(args.concurrency as usize).await?;
    let head = HeadClient::with_checksum_mode(args.head_client, &s3, spec.columns.checksums)?;
    let engine = engine_for(
        s3,
        head,
        &spec,
        args.concurrency,
        args.max_rate,
        args.metadata_source,
    );
    let runner = Runner {
        queue,
        engine: engine.clone(),
        spec,
        opts: RunOptions {
            reap: !args.no_reap,
            part_records: args.part_objects,
            part_age: Duration::from_secs(args.part_secs),
            progress_every: Duration::from_millis(args.progress_ms),
            shards_in_flight: args.shards_in_flight as usize,
            govern_every: (args.govern_ms > 0).then(|| Duration::from_millis(args.govern_ms)),
            ..RunOptions::default()
        },
        stop,
    };
    let summary = runner.run().await?;
    let c = engine.counters.snapshot();
    eprintln!(
        "worker {owner}: {} shards done, {} failed, {} objects ({} HEADs, {} from the listing, {} from the baseline; {} left out by the filter){}",
        summary.shards_done,
        summary.shards_failed,
        c.listed,
        c.heads,
        c.from_listing,
        c.reused,
        c.filtered,
        if summary.stopped {
            "; stopped, shard released"
        } else {
            "; no shards left"
        }
    );
    Ok(())
}

pub async fn delete_parts(args: DeletePartsArgs) -> anyhow::Result<()> {
    let Some((bucket, prefix)) = parse_output(&args.output) else {
        bail!(
            "--output must be s3://BUCKET/ or s3://BUCKET/PREFIX/, got {:?}",
            args.output
        );
    };
    let parts = bucketscan_core::fleet::spec::parts_prefix_of(&prefix, &args.scan);
    let s3 = args.endpoint.connect(16).await?;
    bucketscan_core::s3::delete::delete_prefix(&s3, &bucket, &parts)
        .await
        .with_context(|| format!("cannot delete s3://{bucket}/{parts}"))?;
    eprintln!("deleted s3://{bucket}/{parts}");
    Ok(())
}

pub async fn merge(args: MergeArgs) -> anyhow::Result<()> {
    let queue = args.queue.connect("merger", Duration::from_secs(30)).await?;
    let s3 = args.endpoint.connect(16).await?;
    let mut ahead = Ahead::default();
    if args.wait_for_shards {
        // While the last shards run, the finished shards' small parts are
        // joined into objects the merge copies on the server (`merge_ahead`).
        let stop = CancellationToken::new();
        spawn_signal_handler(stop.clone());
        let sending = stop.child_token();
        let (finished, sent) = tokio::join!(
            async {
                let finished = shards_finished(&queue, &stop).await;
                sending.cancel();
                finished
            },
            Ahead::run(&s3, &queue, &sending)
        );
        ahead = sent;
        if !finished? {
            return Err(StoppedWaiting.into());
        }
        tracing::info!(staged = ahead.parts_staged(), "the last shards ended; merging");
    }
    let spec = spec_of(&queue, &args.queue.scan).await?;
    let manifest = bucketscan_core::fleet::merge::merge_with(&args.queue.scan, &queue, &s3, ahead).await?;
    eprintln!(
        "merged {} shards into {} ({} bytes, {} records in {} files); manifest s3://{}/{}",
        manifest.shards_done,
        manifest.result,
        manifest.result_bytes,
        manifest.records,
        manifest.files.len(),
        spec.output_bucket,
        spec.manifest_key()
    );
    let unreadable = manifest.counts.get("errors").copied().unwrap_or(0);
    if unreadable > 0 {
        // Not a failed merge: the result is complete, with those objects as
        // `error` records (the operator's merge Job must succeed).
        eprintln!(
            "warning: {unreadable} objects could not be read; their records have status \"error\" with the reason"
        );
    }
    if manifest.shards_dead > 0 {
        let missing = manifest.missing_message();
        match args.on_dead_shards {
            OnDeadShards::Fail => bail!("{missing}; `bucketscan-worker retry` scans them again"),
            OnDeadShards::Partial => eprintln!("warning: partial result: {missing}"),
        }
    }
    Ok(())
}

pub async fn retry(args: RetryArgs) -> anyhow::Result<()> {
    use bucketscan_core::fleet::queue::Retried;
    let queue = args.queue.connect("retry", Duration::from_secs(30)).await?;
    spec_of(&queue, &args.queue.scan).await?;
    let round = match args.round {
        Some(round) => round,
        None => queue.retry_round().await? + 1,
    };
    match queue.retry(round).await? {
        Retried::Requeued { shards } => {
            eprintln!("retry {round}: {shards} shard(s) pending again; run workers, then merge")
        }
        Retried::Applied { round: held } => {
            eprintln!("retry {round}: Redis holds round {held} already; nothing changed")
        }
        Retried::NotMerged => bail!(
            "scan {:?} is not merged: a retry is for a finished scan (let it finish and merge, or merge it)",
            args.queue.scan
        ),
        Retried::NothingToRetry => bail!(
            "scan {:?} has no dead shard and no error record: nothing to retry",
            args.queue.scan
        ),
        Retried::PartsGone => bail!(
            "scan {:?} was merged by a release before retries, which deleted its parts: scan again with a new scan",
            args.queue.scan
        ),
        Retried::TooLarge => bail!(
            "scan {:?} holds more shards or shard fields in Redis than a retry walks (200,000 shards, \
             256 fields each): scan again with a new scan",
            args.queue.scan
        ),
    }
    Ok(())
}

/// SIGTERM (Kubernetes stopping the pod) or Ctrl-C: stop taking shards,
/// checkpoint, release the current shard, exit.
fn spawn_signal_handler(stop: CancellationToken) {
    tokio::spawn(async move {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("SIGTERM handler");
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
        tracing::info!("stop requested");
        stop.cancel();
    });
}

/// `s3://BUCKET[/PREFIX]` into bucket and key prefix (may be empty; a
/// prefix without a trailing `/` gets one).
fn parse_output(url: &str) -> Option<(String, String)> {
    let rest = url.strip_prefix("s3://")?;
    let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
    (!bucket.is_empty()).then(|| (bucket.to_string(), normalize_output_prefix(prefix)))
}

fn default_name() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_else(|_| "worker".into());
    format!("{}-{}", host.trim(), std::process::id())
}
