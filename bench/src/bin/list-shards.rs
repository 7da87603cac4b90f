//! LIST throughput: the synthetic bucket cut into `--shards` equal key
//! ranges (the boundaries come from the keyspace's formula), each listed by
//! its own stream through bucketscan-core's S3 LIST call, all at once.
//! Prints one JSON line: {"peer", "shards", "objects", "pages", "seconds"}.

use bucketscan_bench::keyspace::BucketArgs;
use bucketscan_core::s3::{Endpoint, ListRequest, S3};
use clap::Parser;
use std::time::Instant;

#[derive(Parser)]
struct Args {
    /// http://HOST:PORT of synthetic-s3.
    endpoint: String,
    #[command(flatten)]
    bucket: BucketArgs,
    /// LIST streams in parallel, one per key range.
    #[arg(long, default_value_t = 1)]
    shards: u64,
}

#[tokio::main(flavor = "multi_thread")]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let keyspace = args.bucket.keyspace();
    let n = args.bucket.objects;
    let s3 = S3::connect(Endpoint {
        url: Some(args.endpoint.clone()),
        region: "us-east-1".into(),
        path_style: true,
        ca_pem: None,
        insecure: false,
        pool_size: args.shards as usize,
        allowlist: None,
        max_answer_bytes: None,
    })
    .await?;
    let started = Instant::now();
    let streams = (0..args.shards).map(|s| {
        let (lo, hi) = (s * n / args.shards, (s + 1) * n / args.shards);
        let start_after = lo.checked_sub(1).map(|i| keyspace.key(i));
        let end = (hi < n).then(|| keyspace.key(hi));
        let (s3, bucket) = (s3.clone(), args.bucket.bucket.clone());
        tokio::spawn(async move {
            let mut req = ListRequest {
                start_after,
                max_keys: 1000,
                ..ListRequest::default()
            };
            let (mut keys, mut pages) = (0u64, 0u64);
            loop {
                let page = s3.list_page(&bucket, &req).await?;
                pages += 1;
                let before_end = |k: &str| end.as_deref().is_none_or(|e| k < e);
                keys += page.objects.iter().filter(|o| before_end(&o.key)).count() as u64;
                let past_end = page.objects.last().is_some_and(|o| !before_end(&o.key));
                match page.next {
                    Some(token) if !past_end => req.continuation = Some(token),
                    _ => break,
                }
            }
            anyhow::Ok((keys, pages))
        })
    });
    let (mut objects, mut pages) = (0, 0);
    for stream in streams.collect::<Vec<_>>() {
        let (k, p) = stream.await??;
        objects += k;
        pages += p;
    }
    println!(
        "{{\"peer\":\"list-shards\",\"shards\":{},\"objects\":{objects},\"pages\":{pages},\"seconds\":{}}}",
        args.shards,
        started.elapsed().as_secs_f64()
    );
    anyhow::ensure!(objects == n, "listed {objects} of {n} objects");
    Ok(())
}
