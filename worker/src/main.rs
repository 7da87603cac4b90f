//! `bucketscan-worker`: scans S3 shards and HEADs every object.

mod column_args;
mod distributed;
mod filter_args;
mod progress;

use anyhow::Context;
use bucketscan_core::fleet::governed;
use bucketscan_core::fleet::governor::GovernorConfig;
use bucketscan_core::fleet::spec::DEFAULT_FILE_SIZE;
use bucketscan_core::keyspace::planner::PlanOptions;
use bucketscan_core::s3::error::S3Error;
use bucketscan_core::s3::head::{HeadClient, HeadClientKind};
use bucketscan_core::s3::{resolve_region, Endpoint, S3};
use bucketscan_core::scan::baseline::Baseline;
use bucketscan_core::scan::dataset::DatasetRoot;
use bucketscan_core::scan::engine::{Engine, EngineOptions, Incremental, Trust};
use bucketscan_core::scan::format::{Format, Layout};
use bucketscan_core::scan::listed::MetadataSource;
use bucketscan_core::scan::output::{Destination, OutputOptions};
use bucketscan_core::scan::single::{plan_bucket, scan_dataset, scan_shards, ScanOptions};
use bucketscan_core::scan::store_check::{write_canary, Canary, StoreCheck};
use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

#[cfg(feature = "mimalloc")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "bucketscan-worker",
    version,
    about = "Reads the user metadata of every object in an S3 bucket"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Scan a bucket in this one process (no Redis, no Kubernetes) and write
    /// one record per object (JSON Lines, CSV or Parquet; one file or a
    /// dataset).
    Scan(ScanArgs),
    /// Plan a distributed scan into Redis: shards, and the scan's spec.
    Plan(PlanArgs),
    /// Take shards of a planned scan from Redis until none is left, then exit 0.
    Run(RunArgs),
    /// Join the parts of a finished scan into one result with a manifest.
    Merge(MergeArgs),
    /// Retry a merged scan in place: its dead shards and the shards holding
    /// `error` records go back to pending; run workers and merge again.
    Retry(RetryArgs),
    /// Delete a scan's parts (its result stays): what the operator runs as a
    /// Job, under the workers' identity, when a scan without a credentials
    /// Secret is deleted.
    DeleteParts(DeletePartsArgs),
}

/// Where the source bucket is. Credentials come from the usual AWS sources
/// (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, AWS_PROFILE, web identity,
/// instance metadata), never from flags.
#[derive(Args)]
struct SourceArgs {
    #[command(flatten)]
    endpoint: EndpointArgs,
    #[arg(long)]
    bucket: String,
    /// Only keys that start with this prefix.
    #[arg(long, default_value = "")]
    prefix: String,
}

/// How to reach the S3 service.
#[derive(Args)]
struct EndpointArgs {
    /// S3 endpoint URL, e.g. http://10.0.0.5:9000; default: AWS S3 in --region.
    #[arg(long, env = "AWS_ENDPOINT_URL")]
    endpoint: Option<String>,
    /// Region to sign for; default: AWS_REGION, AWS_DEFAULT_REGION, the
    /// profile's region (AWS_PROFILE), instance metadata, else us-east-1 (as
    /// the AWS SDKs resolve it).
    #[arg(long)]
    region: Option<String>,
    /// Path-style addressing (endpoint/bucket/key), needed by most non-AWS stores.
    #[arg(long)]
    path_style: bool,
    /// Extra PEM CA certificate(s) to trust for the endpoint.
    #[arg(long)]
    ca_file: Option<PathBuf>,
    /// Do not verify the endpoint's TLS certificate (test stores only).
    #[arg(long, conflicts_with = "ca_file")]
    insecure_skip_tls_verify: bool,
}

#[derive(Args)]
struct ScanArgs {
    #[command(flatten)]
    source: SourceArgs,
    /// HEAD requests in flight.
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    concurrency: u32,
    /// Where the records go: -, a file, or s3://bucket/key.
    #[arg(long, short, default_value = "-")]
    output: Destination,
    /// Compress the output with gzip.
    #[arg(long)]
    gzip: bool,
    /// Record format: jsonl, csv (RFC 4180, with a header row) or parquet
    /// (zstd; not with --gzip).
    #[arg(long, default_value = "jsonl")]
    format: Format,
    /// single: one output (-o); dataset: files of at most --file-size under
    /// OUTPUT/data/ (an S3 prefix or a directory), each in key order, listed
    /// with their key ranges, counts and SHA-256 in OUTPUT/manifest.json.
    #[arg(long, default_value = "single")]
    layout: Layout,
    /// Bound on one data file of the dataset layout, in bytes (5 MiB to 5 GiB).
    #[arg(long, default_value_t = DEFAULT_FILE_SIZE)]
    file_size: u64,
    /// Keep only objects that have user metadata (errors are always kept).
    #[arg(long)]
    only_with_metadata: bool,
    #[command(flatten)]
    filters: filter_args::FilterArgs,
    #[command(flatten)]
    columns: column_args::ColumnArgs,
    /// HEAD implementation: fast (signed hyper requests) or sdk (aws-sdk-s3).
    #[arg(long, default_value = "fast")]
    head_client: HeadClientKind,
    /// Where metadata comes from: head (a HEAD per object), list (the
    /// listing's, where the store lists it: MinIO; HEAD for entries without)
    /// or auto (the listing's, checked against HEADs of a sample of every
    /// page; any disagreement and the shard is HEADed). The default, as the
    /// CRD's: on a store that lists no metadata it costs what head costs.
    /// docs/metadata-source.md.
    #[arg(long, default_value = "auto")]
    metadata_source: MetadataSource,
    /// Shards to plan (more shards, more LIST streams in parallel).
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    target_shards: u32,
    /// Split the keyspace at this delimiter first; empty for key ranges only.
    #[arg(long, default_value = "/")]
    delimiter: String,
    /// Shards listed at the same time.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=1024))]
    shard_parallelism: u32,
    /// No progress bar, even on a terminal.
    #[arg(long)]
    quiet: bool,
    /// Adapt the HEAD rate every this many milliseconds (0: off): it drops
    /// when the store throttles and grows back while the store keeps up,
    /// as a fleet's governor does (docs/governor.md).
    #[arg(long, default_value_t = 1_000, value_parser = clap::value_parser!(u64).range(0..=60_000))]
    govern_ms: u64,
    /// Ceiling on HEAD requests per second, retries included (the governor
    /// never raises the rate past it).
    #[arg(long, value_parser = positive_rate)]
    max_rate: Option<f64>,
    /// Incremental scan: s3://BUCKET/KEY of an earlier dataset's
    /// manifest.json (same bucket, prefix and format). Objects whose size,
    /// ETag and LastModified match its records are not HEADed again, and
    /// the changes since it are written under OUTPUT/changes/. Needs
    /// --layout dataset and an s3:// output. docs/incremental.md.
    #[arg(long)]
    baseline: Option<String>,
}

/// Which scan in which Redis.
#[derive(Args)]
struct QueueArgs {
    /// Redis URL: redis://[[USER]:PASSWORD@]HOST:PORT[/DB], rediss:// for
    /// TLS, or through Sentinel
    /// redis+sentinel://[[USER]:PASSWORD@]HOST[:PORT][,HOST[:PORT]...]/MASTER_NAME[/DB]
    /// (optionally ?sentinelUser=U&sentinelPassword=P for the sentinels).
    /// Prefer the environment variable: it keeps the password out of the
    /// process list.
    #[arg(long, env = "BUCKETSCAN_REDIS_URL", hide_env_values = true)]
    redis: String,
    /// PEM file of the CA that signed Redis's TLS certificate (default: the
    /// system's trusted roots).
    #[arg(long, env = "BUCKETSCAN_REDIS_CA_FILE")]
    redis_ca_file: Option<std::path::PathBuf>,
    /// How long to wait for a Redis that does not answer (not up yet,
    /// restarting, failing over) before giving up.
    #[arg(long, env = "BUCKETSCAN_REDIS_PATIENCE_SECS", default_value_t = 60,
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    redis_patience_secs: u64,
    /// Scan id (the namespace of its keys in Redis, and of its parts in S3):
    /// letters, digits, `.`, `_` and `-`.
    #[arg(long, env = "BUCKETSCAN_SCAN", value_parser = scan_id)]
    scan: String,
}

#[derive(Args)]
struct PlanArgs {
    #[command(flatten)]
    queue: QueueArgs,
    #[command(flatten)]
    source: SourceArgs,
    /// Where parts and the merged result go: s3://BUCKET/PREFIX/.
    #[arg(long)]
    output: String,
    #[arg(long)]
    gzip: bool,
    /// Record format: jsonl, csv (RFC 4180, with a header row) or parquet
    /// (zstd; not with --gzip).
    #[arg(long, default_value = "jsonl")]
    format: Format,
    /// single: one object, PREFIX/result.EXT; dataset: files of at most
    /// --file-size under PREFIX/data/, listed in PREFIX/manifest.json.
    #[arg(long, default_value = "single")]
    layout: Layout,
    /// Bound on one data file, in bytes (5 MiB to 5 GiB).
    #[arg(long, default_value_t = DEFAULT_FILE_SIZE)]
    file_size: u64,
    #[arg(long)]
    only_with_metadata: bool,
    #[command(flatten)]
    filters: filter_args::FilterArgs,
    #[command(flatten)]
    columns: column_args::ColumnArgs,
    /// Shards to plan (more appear while the scan runs: idle workers get
    /// the rest of a busy worker's shard split off for them).
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    target_shards: u32,
    /// LIST requests planning may spend: a keyspace of flat keys needs about
    /// 1.1 x --target-shards of them to reach the target (16 LISTs split a
    /// node into its 16 hex children), so raise this with a target above a
    /// few thousand shards.
    #[arg(long, default_value_t = PlanOptions::default().max_requests as u32,
          value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    plan_list_budget: u32,
    /// Fewer, bigger shards rather than shards below this many objects: each
    /// shard costs a few dozen Redis operations.
    #[arg(long, default_value_t = 10_000)]
    min_shard_objects: u64,
    #[arg(long, default_value = "/")]
    delimiter: String,
    /// Dead-letter a shard after this many failed attempts.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=100))]
    max_failures: u32,
    /// Redis lost this planned scan: restore its finished shards from their
    /// done records in S3 and queue only the rest.
    #[arg(long)]
    replan: bool,
    /// Incremental scan: s3://BUCKET/KEY of an earlier complete result's
    /// manifest.json (same bucket, prefix and format). Unchanged objects are
    /// not HEADed again, and the merge writes the changes since it under
    /// OUTPUT/changes/. docs/incremental.md.
    #[arg(long)]
    baseline: Option<String>,
}

#[derive(Args)]
struct DeletePartsArgs {
    #[command(flatten)]
    endpoint: EndpointArgs,
    /// The scan's output: s3://BUCKET/PREFIX/ (its parts are under
    /// PREFIX/parts/SCAN/).
    #[arg(long)]
    output: String,
    /// The scan's id (as `plan --scan`): only its own parts are deleted.
    #[arg(long, value_parser = scan_id)]
    scan: String,
}

/// A scan id: it names a folder of the output (`parts/ID/`) and the hash
/// tag of its Redis keys, so no `/` (one scan's folder would hold another's)
/// nor braces, and never empty.
fn scan_id(id: &str) -> Result<String, String> {
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
    if id.is_empty() || id.len() > 200 || !id.chars().all(allowed) {
        return Err(format!(
            "{id:?} is not a scan id: use 1 to 200 letters, digits, '.', '_' or '-'"
        ));
    }
    Ok(id.to_string())
}

/// A rate ceiling: requests per second, a finite number above 0 (0 or
/// below was taken for "no ceiling" before, the opposite of what it says).
fn positive_rate(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(r) if r.is_finite() && r > 0.0 => Ok(r),
        _ => Err(format!(
            "{text:?} is not a rate: give requests per second above 0 (leave the flag out for no ceiling)"
        )),
    }
}

#[derive(Args)]
struct RunArgs {
    #[command(flatten)]
    queue: QueueArgs,
    #[command(flatten)]
    endpoint: EndpointArgs,
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    concurrency: u32,
    #[arg(long, default_value = "fast")]
    head_client: HeadClientKind,
    /// Where metadata comes from: head (a HEAD per object), list (the
    /// listing's, where the store lists it: MinIO; HEAD for entries without)
    /// or auto (the listing's, checked against HEADs of a sample of every
    /// page; any disagreement and the shard is HEADed). The default, as the
    /// CRD's: on a store that lists no metadata it costs what head costs.
    /// docs/metadata-source.md.
    #[arg(long, default_value = "auto")]
    metadata_source: MetadataSource,
    /// Ceiling on HEAD requests per second from this worker, retries
    /// included.
    #[arg(long, value_parser = positive_rate)]
    max_rate: Option<f64>,
    /// This worker's name in leases (default: POD_NAME, else host and pid).
    #[arg(long, env = "POD_NAME")]
    name: Option<String>,
    /// Lease length; a worker that stops renewing loses its shard after this.
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(2..=3600))]
    lease_secs: u64,
    /// Close a part and checkpoint after this many objects...
    #[arg(long, default_value_t = 50_000, value_parser = clap::value_parser!(u64).range(1..))]
    part_objects: u64,
    /// ...or after this many seconds.
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..))]
    part_secs: u64,
    /// Do not requeue expired leases (when the operator runs the reaper).
    #[arg(long)]
    no_reap: bool,
    /// How often progress goes to Redis, in milliseconds (also how soon this
    /// worker hears that an idle one wants a split).
    #[arg(long, default_value_t = 2_000, value_parser = clap::value_parser!(u64).range(100..=60_000))]
    progress_ms: u64,
    /// Shards held at once: one LIST stream each, all sharing --concurrency
    /// HEADs, so slow LIST pages do not cap the HEAD rate (BENCHMARKS.md,
    /// "LIST latency"). The slots past the first take only pending shards
    /// while no worker is idle, and end when there are none.
    #[arg(long, default_value_t = bucketscan_core::fleet::run::DEFAULT_SHARDS_IN_FLIGHT as u32,
          value_parser = clap::value_parser!(u32).range(1..=64))]
    shards_in_flight: u32,
    /// Take part in the scan-wide adaptive rate governor every this many
    /// milliseconds (0: off): the fleet's HEAD rate drops on throttling and
    /// grows back while the store keeps up; --max-rate stays the ceiling.
    #[arg(long, default_value_t = 1_000, value_parser = clap::value_parser!(u64).range(0..=60_000))]
    govern_ms: u64,
    /// Wait for the scan's plan instead of refusing a scan that is not
    /// planned yet: the operator starts its workers while it plans, so that
    /// their pods are up when the first shard is queued.
    #[arg(long)]
    wait_for_plan: bool,
}

#[derive(Args)]
struct MergeArgs {
    #[command(flatten)]
    queue: QueueArgs,
    #[command(flatten)]
    endpoint: EndpointArgs,
    /// What a merge with dead shards says: `fail` (exit 1) or `partial`
    /// (exit 0 with a warning). Either way the result of every other shard
    /// is written and manifest.json names the missing ranges.
    #[arg(long, value_enum, default_value = "fail")]
    on_dead_shards: OnDeadShards,
    /// Wait until no shard is pending or leased, then merge, instead of
    /// refusing a scan that is not finished: the operator starts the merge
    /// Job in a scan's last seconds, so its pod is up when the last shard
    /// ends.
    #[arg(long)]
    wait_for_shards: bool,
}

/// What a merge that leaves ranges out says.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum OnDeadShards {
    Fail,
    Partial,
}

#[derive(Args)]
struct RetryArgs {
    #[command(flatten)]
    queue: QueueArgs,
    /// The retry round (default: the round Redis holds plus one). Sending
    /// the same round twice retries once.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    round: Option<u64>,
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("BUCKETSCAN_LOG")
                .unwrap_or_else(|_| "warn,aws_config=error".into()),
        )
        .init();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let result = runtime.block_on(async {
        match cli.command {
            // The scans run as tasks on the runtime's threads, not as
            // `block_on`'s future on this one: the main thread is a third
            // thread next to the workers, and every record the writer took
            // from them woke it through a futex (6 % of a scan's CPU).
            Command::Scan(args) => tokio::spawn(scan(args))
                .await
                .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic())),
            Command::Plan(args) => distributed::plan(args).await.map(|()| Finished::Clean),
            Command::Run(args) => tokio::spawn(distributed::run(args))
                .await
                .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()))
                .map(|()| Finished::Clean),
            Command::Merge(args) => distributed::merge(args).await.map(|()| Finished::Clean),
            Command::Retry(args) => distributed::retry(args).await.map(|()| Finished::Clean),
            Command::DeleteParts(args) => distributed::delete_parts(args).await.map(|()| Finished::Clean),
        }
    });
    match result {
        Ok(Finished::Clean) => std::process::ExitCode::SUCCESS,
        Ok(Finished::SomeObjectsUnreadable) => std::process::ExitCode::from(EXIT_SOME_OBJECTS_UNREADABLE),
        Err(e) if is_transient(&e) => {
            eprintln!("error: {e:#} (transient: running again later may succeed)");
            std::process::ExitCode::from(EXIT_TRANSIENT)
        }
        Err(e) if is_refused(&e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::from(EXIT_REFUSED)
        }
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// The exit code of a command that failed for a cause that may pass by
/// itself: the store throttling, failing or unreachable past every retry,
/// Redis unreachable. The operator runs a plan Job whose pod exited so
/// again later instead of failing the scan. 75 is EX_TEMPFAIL (sysexits.h).
const EXIT_TRANSIENT: u8 = 75;

/// The exit code of a plan refused for good by what the scan asks (a
/// baseline it cannot use, an output that is not its own): the operator
/// fails the scan with reason `PlanRefused` and this error's line, as when
/// it plans in its own process. 65 is EX_DATAERR (sysexits.h).
const EXIT_REFUSED: u8 = 65;

fn is_refused(e: &anyhow::Error) -> bool {
    use bucketscan_core::fleet::plan::PlanError;
    e.chain()
        .any(|cause| matches!(cause.downcast_ref::<PlanError>(), Some(PlanError::Settings(_))))
}

fn is_transient(e: &anyhow::Error) -> bool {
    use bucketscan_core::fleet::plan::PlanError;
    use bucketscan_core::fleet::queue::QueueError;
    use bucketscan_core::fleet::recovery::RecoveryError;
    e.chain().any(|cause| {
        cause.downcast_ref::<S3Error>().is_some_and(S3Error::is_retryable)
            || cause
                .downcast_ref::<PlanError>()
                .is_some_and(PlanError::is_transient)
            || cause
                .downcast_ref::<RecoveryError>()
                .is_some_and(RecoveryError::is_transient)
            || cause
                .downcast_ref::<QueueError>()
                .is_some_and(QueueError::is_transient)
            || cause
                .downcast_ref::<bucketscan_core::fleet::merge::MergeError>()
                .is_some_and(bucketscan_core::fleet::merge::MergeError::is_transient)
            || cause.is::<distributed::StoppedWaiting>()
    })
}

/// `scan`'s exit code when the result is complete but holds `error` records
/// (objects that could not be read): 1 means no result at all, 2 is clap's
/// for bad usage, so a script can tell the three apart.
const EXIT_SOME_OBJECTS_UNREADABLE: u8 = 3;

/// How a command that did not fail ended.
enum Finished {
    Clean,
    /// The whole result was written, but some objects are `error` records.
    SomeObjectsUnreadable,
}

impl EndpointArgs {
    async fn connect(&self, pool_size: usize) -> anyhow::Result<std::sync::Arc<S3>> {
        let mut endpoint = Endpoint {
            url: self.endpoint.clone(),
            region: String::new(),
            path_style: self.path_style,
            ca_pem: match &self.ca_file {
                Some(path) => Some(
                    std::fs::read(path)
                        .with_context(|| format!("cannot read --ca-file {}", path.display()))?,
                ),
                None => None,
            },
            insecure: self.insecure_skip_tls_verify,
            pool_size,
            allowlist: None,
            max_answer_bytes: None,
        };
        endpoint.region = resolve_region(self.region.clone(), &endpoint).await?;
        Ok(S3::connect(endpoint).await?)
    }
}

async fn scan(args: ScanArgs) -> anyhow::Result<Finished> {
    let started = Instant::now();
    // Before the bucket is asked anything.
    args.format.check_gzip(args.gzip).map_err(anyhow::Error::msg)?;
    let dataset = match args.layout {
        Layout::Single => None,
        Layout::Dataset => {
            bucketscan_core::fleet::spec::check_output(
                args.format,
                args.layout,
                args.file_size,
                args.gzip,
                0,
            )
            .map_err(anyhow::Error::msg)?;
            Some(DatasetRoot::of(&args.output).map_err(anyhow::Error::msg)?)
        }
    };
    if args.baseline.is_some() && !matches!(dataset, Some(DatasetRoot::S3 { .. })) {
        anyhow::bail!("--baseline needs --layout dataset and an S3 output (-o s3://BUCKET/PREFIX/): the change set is a dataset beside the result, and the store check writes a canary object there");
    }
    let src = &args.source;
    let filter = args.filters.filter(&src.prefix)?;
    let s3 = src.endpoint.connect(args.concurrency as usize).await?;
    s3.check_bucket(&src.bucket)
        .await
        .context(format!("cannot list s3://{}", src.bucket))?;
    let baseline = match &args.baseline {
        Some(location) => {
            let baseline = Baseline::load(&s3, location).await?;
            baseline.admit(
                &src.bucket,
                &src.prefix,
                args.format,
                &filter,
                &args.columns.options(),
            )?;
            Some(Arc::new(baseline))
        }
        None => None,
    };
    // The canary first (the scan's start, by the store's clock), then the
    // rest of the check beside planning and listing: it waits for the
    // store's clock to pass a second, up to a fifth of an incremental scan
    // of 10^6 objects when it ran first. The first object that could be
    // taken from the baseline waits for its answer.
    let canary = match &dataset {
        Some(DatasetRoot::S3 { bucket, prefix }) => write_canary_under(&s3, bucket, prefix).await,
        _ => None,
    };
    if let (Some(baseline), Some(canary)) = (&baseline, &canary) {
        baseline.admit_start(&canary.started())?;
    }
    let (tell_trust, trust) = Trust::pending();
    let check = tokio::spawn({
        let s3 = s3.clone();
        async move {
            let check = settle_check(&s3, canary?).await?;
            let _ = tell_trust.send(Some(check.last_modified_moves));
            Some(check)
        }
    });
    let head = HeadClient::with_checksum_mode(args.head_client, &s3, args.columns.checksums)?;
    let engine = Engine::new(
        s3,
        head,
        EngineOptions {
            bucket: src.bucket.clone(),
            concurrency: args.concurrency as usize,
            only_with_metadata: args.only_with_metadata,
            page_size: 1000,
            max_rate: args.max_rate,
            metadata_source: args.metadata_source,
            filter: filter.clone(),
            columns: args.columns.options(),
        },
    );
    if let Some(baseline) = baseline {
        engine.set_incremental(Incremental {
            baseline,
            trust_last_modified: trust,
        });
    }
    let plan_opts = PlanOptions {
        // Where the include globs all start, if narrower: nothing before
        // it can be kept, so nothing before it is listed.
        prefix: filter.listing_prefix(&src.prefix),
        delimiter: Some(args.delimiter.clone()).filter(|d| !d.is_empty()),
        target_shards: args.target_shards as usize,
        ..PlanOptions::default()
    };
    let shards = plan_bucket(&engine, &plan_opts)
        .await
        .context("planning shards")?;
    let estimate: u64 = shards.iter().map(|s| s.estimated_objects).sum();
    let exact = shards.iter().all(|s| s.exact);
    let progress = progress::Progress::start(engine.clone(), estimate, exact, args.quiet);
    let _governor = (args.govern_ms > 0).then(|| {
        let every = Duration::from_millis(args.govern_ms);
        let cfg = GovernorConfig {
            ceiling: args.max_rate,
            ..GovernorConfig::default()
        };
        let governing = governed::govern_alone(engine.clone(), every, cfg);
        StopOnDrop(tokio::spawn(governing))
    });
    let opts = ScanOptions {
        shard_parallelism: args.shard_parallelism as usize,
        output: args.output.clone(),
        output_opts: OutputOptions {
            gzip: args.gzip,
            format: args.format,
            bucket: src.bucket.clone(),
            ..OutputOptions::default()
        },
    };
    let (shard_count, records, bytes) = match &dataset {
        None => {
            let result = scan_shards(&engine, shards, &opts).await;
            progress.stop();
            let summary = result.with_context(|| format!("scanning s3://{}", src.bucket))?;
            (summary.shards, summary.output.records, summary.output.bytes)
        }
        Some(root) => {
            let check = async {
                let check = check.await.ok().flatten();
                let trusted = check.as_ref().is_some_and(|c| c.last_modified_moves);
                if engine.incremental().is_some() && !trusted {
                    let why = check
                        .as_ref()
                        .map_or("no store check: every object was HEADed", |c| c.detail.as_str());
                    eprintln!("warning: {why}");
                }
                check
            };
            let result = scan_dataset(&engine, shards, &opts, root, args.file_size, &src.prefix, check).await;
            progress.stop();
            let summary = result.with_context(|| format!("scanning s3://{}", src.bucket))?;
            let m = &summary.manifest;
            eprintln!(
                "dataset: {} files under {}, manifest beside data/",
                m.files.len(),
                m.result
            );
            if let Some(inc) = &m.incremental {
                let c = &inc.counts;
                eprintln!(
                    "changes since {}: {} added, {} removed, {} content changed, {} metadata changed ({} records taken from the baseline, {} bytes of it read); change set under {}",
                    inc.baseline, c.added, c.removed, c.content_changed, c.metadata_changed, c.reused, inc.baseline_bytes_read, inc.changes
                );
            }
            (summary.shards, m.records, m.result_bytes)
        }
    };
    let c = engine.counters.snapshot();
    let secs = started.elapsed().as_secs_f64();
    eprintln!(
        "scanned {} objects in {} shards in {:.1}s ({} HEADs, {:.0} HEAD/s; {} from the listing, {} from the baseline; {} left out by the filter): {} with metadata, {} vanished, {} errors, {} retries; wrote {} records ({} bytes) to {}",
        c.listed,
        shard_count,
        secs,
        c.heads,
        c.heads as f64 / secs.max(1e-9),
        c.from_listing,
        c.reused,
        c.filtered,
        c.with_metadata,
        c.vanished,
        c.errors,
        engine.s3.retries.load(std::sync::atomic::Ordering::Relaxed),
        records,
        bytes,
        args.output,
    );
    if c.errors > 0 {
        eprintln!(
            "warning: {} objects could not be read; their records have status \"error\" with the reason (exit code {EXIT_SOME_OBJECTS_UNREADABLE})",
            c.errors
        );
        return Ok(Finished::SomeObjectsUnreadable);
    }
    Ok(Finished::Clean)
}

/// The store check's canary under a dataset's S3 prefix: `None`, with a
/// warning, when the store refuses it (the dataset then cannot be a
/// baseline).
async fn write_canary_under(s3: &Arc<S3>, bucket: &str, prefix: &str) -> Option<Canary> {
    // A canary of this run's own: another run on the same output never
    // sees its writes, nor it theirs.
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let key = format!("{prefix}.bucketscan-store-check-{}-{nanos}", std::process::id());
    match write_canary(s3, bucket, &key).await {
        Ok(canary) => Some(canary),
        Err(e) => {
            check_failed(bucket, &key, &e);
            None
        }
    }
}

/// The rest of the store check: `None`, with a warning, when the store
/// refuses it.
async fn settle_check(s3: &S3, canary: Canary) -> Option<StoreCheck> {
    let (bucket, key) = (canary.bucket().to_string(), canary.key().to_string());
    match canary.settle(s3).await {
        Ok(check) => Some(check),
        Err(e) => {
            check_failed(&bucket, &key, &e);
            None
        }
    }
}

fn check_failed(bucket: &str, key: &str, e: &S3Error) {
    eprintln!("warning: the store check (s3://{bucket}/{key}) failed: {e}; this dataset cannot be a baseline, and an incremental scan HEADs every object");
}

/// A background task that ends with the scope holding this guard.
struct StopOnDrop(tokio::task::JoinHandle<()>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
