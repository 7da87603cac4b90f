//! `synthetic-s3`: the benchmarks' S3 endpoint. Serves one bucket of
//! `--objects` generated objects on `--listen`, each answer after
//! `--latency-us` (default 1,000: an all-flash store's HEAD time). Request
//! counts: `GET /_stats`.

use bucketscan_bench::keyspace::BucketArgs;
use bucketscan_bench::server::{serve, Config, Stats};
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
    #[arg(long, default_value_t = 1_000)]
    latency_us: u64,
    /// Share of requests answered 503 SlowDown.
    #[arg(long, default_value_t = 0.0)]
    slowdown: f64,
    /// http://HOST:PORT of a real S3 server that gets the requests for every
    /// other bucket (a fleet scan's output).
    #[arg(long)]
    forward: Option<String>,
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
    runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind(args.listen).await?;
        // The benchmark reads the address from the first line.
        println!("listening on http://{}", listener.local_addr()?);
        let config = Config {
            keyspace: args.bucket.keyspace(),
            bucket: args.bucket.bucket,
            latency: Duration::from_micros(args.latency_us),
            slowdown: args.slowdown,
            forward: args.forward.map(|f| f.trim_end_matches('/').to_string()),
        };
        serve(listener, config, Arc::new(Stats::default())).await?;
        Ok(())
    })
}
