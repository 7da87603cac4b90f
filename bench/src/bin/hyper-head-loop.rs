//! The physical limit the benchmark compares against: unsigned HEADs of the
//! synthetic keyspace's keys (known from the formula, so no LIST), `--in-flight`
//! at a time over one pooled hyper client, nothing else. Prints one JSON line.

use bucketscan_bench::keyspace::BucketArgs;
use clap::Parser;
use futures_util::stream::{self, StreamExt};
use http_body_util::Empty;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use std::time::Instant;

#[derive(Parser)]
struct Args {
    /// http://HOST:PORT of synthetic-s3.
    endpoint: String,
    #[command(flatten)]
    bucket: BucketArgs,
    #[arg(long, default_value_t = 256)]
    in_flight: usize,
}

#[tokio::main(flavor = "multi_thread")]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let keyspace = args.bucket.keyspace();
    let objects = args.bucket.objects;
    let mut connector = hyper_util::client::legacy::connect::HttpConnector::new();
    connector.set_nodelay(true);
    let client: Client<_, Empty<bytes::Bytes>> = Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(args.in_flight)
        .build(connector);
    let started = Instant::now();
    let ok = stream::iter(0..objects)
        .map(|i| {
            let uri = format!("{}/{}/{}", args.endpoint, args.bucket.bucket, keyspace.key(i));
            let request = hyper::Request::head(uri)
                .body(Empty::new())
                .expect("a valid request");
            let client = client.clone();
            async move {
                client
                    .request(request)
                    .await
                    .is_ok_and(|r| r.status().is_success())
            }
        })
        .buffer_unordered(args.in_flight)
        .filter(|ok| std::future::ready(*ok))
        .count()
        .await;
    println!(
        "{{\"peer\":\"hyper-head-loop\",\"objects\":{ok},\"seconds\":{}}}",
        started.elapsed().as_secs_f64()
    );
    anyhow::ensure!(
        ok as u64 == args.bucket.objects,
        "{} of {} HEADs failed",
        args.bucket.objects - ok as u64,
        args.bucket.objects
    );
    Ok(())
}
