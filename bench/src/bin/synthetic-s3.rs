//! `synthetic-s3`: the benchmarks' S3 endpoint. Serves one bucket of
//! `--objects` generated objects on `--listen`, each answer after
//! `--latency-us` (default 1,000: an all-flash store's HEAD time), or as a
//! store model says: `--profile flashblade|aws|minio` and the flags that
//! override its values (docs/store-model.md). With `--passthrough` the model
//! stands in front of a real S3 server instead (the e2e's chaos scan).
//! Request counts: `GET /_stats`. `--change-share S --change-seed K`: the
//! bucket a day later, S of its objects added, deleted, rewritten or with
//! their metadata replaced, in equal parts (`GET /_changes` lists them).

use bucketscan_bench::bucket::Changes;
use bucketscan_bench::keyspace::BucketArgs;
use bucketscan_bench::server::{serve, Config, Stats};
use bucketscan_bench::store::{Latency, StoreModel};
use clap::Parser;
use std::sync::Arc;
use std::time::Duration;

#[derive(Parser)]
#[command(about = "A synthetic S3 endpoint for benchmarks")]
struct Args {
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: std::net::SocketAddr,
    #[command(flatten)]
    bucket: BucketArgs,
    /// Every answer after this long, when no profile or latency flag says
    /// otherwise.
    #[arg(long, default_value_t = 1_000)]
    latency_us: u64,
    #[command(flatten)]
    model: ModelArgs,
    /// Share of requests answered 503 SlowDown.
    #[arg(long, default_value_t = 0.0)]
    slowdown: f64,
    /// http://HOST:PORT of a real S3 server that gets the requests for every
    /// other bucket (a fleet scan's output).
    #[arg(long)]
    forward: Option<String>,
    /// Generate no objects: requests for --bucket, once the store model lets
    /// them through, go to --forward as well (the model's latency, limits
    /// and faults in front of a real S3 server).
    #[arg(long, requires = "forward")]
    passthrough: bool,
    /// Serve the bucket changed by this share of its objects (0 to 1; 0.01:
    /// 1 %), in equal parts added, deleted, content rewritten and metadata
    /// replaced; the changed ones modified the second after the start.
    #[arg(long, requires = "change_seed")]
    change_share: Option<f64>,
    /// Which objects change (the same seed, the same changes).
    #[arg(long, requires = "change_share")]
    change_seed: Option<u64>,
    /// Worker threads (the benchmark pins the endpoint to its own cores).
    #[arg(long, default_value_t = 1)]
    threads: usize,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(args.threads.max(1))
        .enable_all()
        .build()?;
    let changes = match (args.change_share, args.change_seed) {
        (Some(share), Some(seed)) => {
            anyhow::ensure!(
                (0.0..=1.0).contains(&share),
                "--change-share must be between 0 and 1 (0.01: 1 % of the objects), not {share}"
            );
            Some(Changes { share, seed })
        }
        _ => None,
    };
    anyhow::ensure!(
        changes.is_none() || !args.passthrough,
        "--change-share changes the generated bucket; with --passthrough there is none"
    );
    runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind(args.listen).await?;
        // The benchmark reads the address from the first line.
        println!("listening on http://{}", listener.local_addr()?);
        let config = Config {
            keyspace: args.bucket.keyspace(),
            bucket: args.bucket.bucket,
            model: args.model.build(Duration::from_micros(args.latency_us))?,
            slowdown: args.slowdown,
            forward: args.forward.map(|f| f.trim_end_matches('/').to_string()),
            passthrough: args.passthrough,
            changes,
        };
        serve(listener, config, Arc::new(Stats::default())).await?;
        Ok(())
    })
}

/// The store model: a profile, then any value given here on top of it.
#[derive(clap::Args)]
struct ModelArgs {
    /// flashblade, aws or minio (docs/store-model.md)
    #[arg(long)]
    profile: Option<String>,
    #[arg(long)]
    list_median_ms: Option<f64>,
    #[arg(long)]
    list_p99_ms: Option<f64>,
    #[arg(long)]
    head_median_ms: Option<f64>,
    #[arg(long)]
    head_p99_ms: Option<f64>,
    /// Requests per second the store serves; beyond it requests queue, and
    /// those that would wait longer than --queue-limit-ms get 503 SlowDown.
    #[arg(long)]
    capacity: Option<f64>,
    /// HEADs per second per key partition (AWS: 5,500 per prefix).
    #[arg(long)]
    prefix_limit: Option<f64>,
    /// A key's partition: its first this many characters.
    #[arg(long)]
    partition_chars: Option<usize>,
    #[arg(long)]
    queue_limit_ms: Option<f64>,
    /// Share of requests whose connection is reset (0 to 1).
    #[arg(long)]
    reset_share: Option<f64>,
    /// Share of requests answered 500 InternalError (0 to 1).
    #[arg(long)]
    error_share: Option<f64>,
    /// Share of requests answered 503 SlowDown whatever the load (0 to 1):
    /// sporadic throttling, as a store splitting a partition gives. Applies
    /// with --passthrough too.
    #[arg(long)]
    throttle_share: Option<f64>,
}

impl ModelArgs {
    fn build(&self, latency: Duration) -> anyhow::Result<StoreModel> {
        let mut m = match &self.profile {
            Some(name) => StoreModel::profile(name).map_err(anyhow::Error::msg)?,
            None => StoreModel::fixed(latency),
        };
        let ms = |v: f64| Duration::from_secs_f64(v / 1000.0);
        let set = |l: &mut Latency, median: Option<f64>, p99: Option<f64>| {
            if let Some(v) = median {
                l.median = ms(v);
                l.p99 = l.p99.max(l.median);
            }
            if let Some(v) = p99 {
                l.p99 = ms(v);
            }
        };
        set(&mut m.list, self.list_median_ms, self.list_p99_ms);
        set(&mut m.head, self.head_median_ms, self.head_p99_ms);
        m.capacity = self.capacity.or(m.capacity);
        m.prefix_limit = self.prefix_limit.or(m.prefix_limit);
        m.partition_chars = self.partition_chars.unwrap_or(m.partition_chars);
        m.queue_limit = self.queue_limit_ms.map(ms).unwrap_or(m.queue_limit);
        m.resets = self.reset_share.unwrap_or(m.resets);
        m.errors = self.error_share.unwrap_or(m.errors);
        m.throttles = self.throttle_share.unwrap_or(m.throttles);
        for (name, l) in [("list", m.list), ("head", m.head)] {
            anyhow::ensure!(
                l.p99 >= l.median,
                "--{name}-p99-ms must be at least the median ({:?} < {:?})",
                l.p99,
                l.median
            );
        }
        for (flag, share) in [
            ("--reset-share", m.resets),
            ("--error-share", m.errors),
            ("--throttle-share", m.throttles),
        ] {
            anyhow::ensure!(
                (0.0..=1.0).contains(&share),
                "{flag} must be between 0 and 1, not {share}"
            );
        }
        anyhow::ensure!(
            m.resets + m.errors + m.throttles <= 1.0,
            "--reset-share, --error-share and --throttle-share add up to more than 1"
        );
        for (flag, rate) in [("--capacity", m.capacity), ("--prefix-limit", m.prefix_limit)] {
            anyhow::ensure!(
                rate.is_none_or(|r| r > 0.0),
                "{flag} must be above 0 requests per second"
            );
        }
        Ok(m)
    }
}
