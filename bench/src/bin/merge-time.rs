//! Merge wall time against the number of recorded parts, on a real S3
//! server and Redis (run it under scripts/with-test-servers.sh: versitygw or
//! MinIO, and redis-server; or set the variables below by hand).
//!
//! For each part count N the parts are made through the real queue steps a
//! worker takes (the scan's spec stored, one shard enqueued and leased, each
//! part uploaded, its stats written and committed with a checkpoint, the
//! shard finished), then `fleet::merge::merge` runs and is timed. Parts are
//! small (`RECORDS` JSONL records, under 1 KiB, or a Parquet file of them):
//! the case where the merger reads and joins every byte, the slowest per
//! part. Setup is not timed.
//!
//! Environment: MERGE_TIME_SERVER (VGW, the default, or MINIO) picks
//! BUCKETSCAN_TEST_{SERVER}_ENDPOINT, ..._ACCESS_KEY, ..._SECRET_KEY;
//! BUCKETSCAN_TEST_REDIS_URL. Arguments: `[jsonl|parquet] [N...]` (default
//! jsonl 1000 10000 20000). Prints one JSON line per N:
//! {"server", "format", "parts", "files", "merge_s", "ms_per_part", "setup_s"}.

use anyhow::{bail, Context};
use bucketscan_core::fleet::merge::merge;
use bucketscan_core::fleet::queue::{Commit, Finish, PartStats, Queue, RedisConfig};
use bucketscan_core::fleet::spec::ScanSpec;
use bucketscan_core::keyspace::shard::Shard;
use bucketscan_core::s3::types::Endpoint;
use bucketscan_core::s3::S3;
use bucketscan_core::scan::format::{Format, Layout};
use bucketscan_core::scan::output::{Destination, OutputOptions, RecordWriter};
use bucketscan_core::scan::{Record, Status};
use futures_util::stream::{self, StreamExt, TryStreamExt};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Records per part.
const RECORDS: usize = 4;
/// Parts uploaded at once during setup.
const SETUP_CONCURRENCY: usize = 32;

fn env(name: &str) -> anyhow::Result<String> {
    std::env::var(name).with_context(|| format!("{name} is not set: run under scripts/with-test-servers.sh"))
}

fn record(part: usize, n: usize) -> Record {
    Record {
        key: format!("k/{part:08}/{n}"),
        status: Status::Ok,
        size: 1234,
        etag: Some("\"0123456789abcdef0123456789abcdef\"".into()),
        last_modified: Some("2026-11-23T12:00:00Z".into()),
        storage_class: Some("STANDARD".into()),
        content_type: Some("application/octet-stream".into()),
        metadata: [("owner".to_string(), format!("team-{}", part % 7))].into(),
        binary_metadata: Vec::new(),
        missing_metadata: None,
        columns: Default::default(),
        error: None,
        http_status: None,
        change: None,
        previous: None,
        verbatim: Default::default(),
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1).peekable();
    let format: Format = match args.peek().map(|a| a.parse::<Format>()) {
        Some(Ok(f)) => {
            args.next();
            f
        }
        _ => Format::Jsonl,
    };
    let counts: Vec<usize> = args.map(|a| a.parse()).collect::<Result<_, _>>()?;
    let counts = if counts.is_empty() {
        vec![1_000, 10_000, 20_000]
    } else {
        counts
    };
    let server = std::env::var("MERGE_TIME_SERVER").unwrap_or_else(|_| "VGW".into());
    let var = |what: &str| env(&format!("BUCKETSCAN_TEST_{server}_{what}"));
    std::env::set_var("AWS_ACCESS_KEY_ID", var("ACCESS_KEY")?);
    std::env::set_var("AWS_SECRET_ACCESS_KEY", var("SECRET_KEY")?);
    std::env::set_var("AWS_REGION", "us-east-1");
    let s3 = S3::connect(Endpoint {
        url: Some(var("ENDPOINT")?),
        region: "us-east-1".into(),
        path_style: true,
        ca_pem: None,
        insecure: false,
        pool_size: 64,
        allowlist: None,
        max_answer_bytes: None,
    })
    .await?;
    let redis = RedisConfig::new(env("BUCKETSCAN_TEST_REDIS_URL")?);
    for n in counts {
        let scan = format!("merge-time-{}-{n}", std::process::id());
        let spec = ScanSpec {
            bucket: "source".into(),
            prefix: String::new(),
            output_bucket: scan.clone(),
            output_prefix: "r/".into(),
            gzip: false,
            only_with_metadata: false,
            max_failures: 3,
            format,
            layout: Layout::Dataset,
            file_size: 1 << 30,
            scan_id: scan.clone(),
            baseline: None,
            change_set: false,
            filter: Default::default(),
            columns: Default::default(),
        };
        s3.send_retried(&scan, |sdk| sdk.create_bucket().bucket(&scan).send())
            .await?;
        let queue = Queue::connect(&redis, &scan, "bench", Duration::from_secs(3600)).await?;
        let started = Instant::now();
        record_parts(&s3, &queue, &spec, n).await?;
        let setup = started.elapsed().as_secs_f64();
        let started = Instant::now();
        let manifest = merge(&scan, &queue, &s3).await?;
        let secs = started.elapsed().as_secs_f64();
        if manifest.records != (n * RECORDS) as u64 {
            bail!("merged {} records, not {}", manifest.records, n * RECORDS);
        }
        println!(
            "{{\"server\": \"{server}\", \"format\": \"{}\", \"parts\": {n}, \"files\": {}, \"merge_s\": {secs:.2}, \"ms_per_part\": {:.3}, \"setup_s\": {setup:.1}}}",
            format.extension(false),
            manifest.files.len(),
            secs * 1e3 / n as f64
        );
    }
    Ok(())
}

/// N parts of one shard, recorded as a worker records them.
async fn record_parts(s3: &Arc<S3>, queue: &Queue, spec: &ScanSpec, n: usize) -> anyhow::Result<()> {
    queue.set_spec(spec).await?;
    queue.enqueue(&[Shard::prefix("")]).await?;
    queue.mark_plan_complete("{}").await?;
    let Some(mut lease) = queue.take().await? else {
        bail!("the shard just enqueued was not leased");
    };
    let (id, token) = (lease.id.clone(), lease.token);
    // Part i resumes after the last key of part i-1, as a worker's would.
    let keys: Vec<String> = (0..n)
        .map(|i| {
            let after = (i > 0).then(|| record(i - 1, RECORDS - 1).key);
            spec.part_key(&id, token, 0, after.as_deref())
        })
        .collect();
    stream::iter(keys.iter().enumerate())
        .map(|(i, key)| write_part(s3, spec, key, i))
        .buffer_unordered(SETUP_CONCURRENCY)
        .try_collect::<Vec<()>>()
        .await?;
    for (i, key) in keys.iter().enumerate() {
        let last = record(i, RECORDS - 1).key;
        let stats = PartStats {
            records: RECORDS as u64,
            first: record(i, 0).key,
            last: last.clone(),
        };
        queue.set_part_stats(key, &stats).await?;
        let counts = [("objects", RECORDS as u64), ("written", RECORDS as u64)];
        let commit = Commit {
            checkpoint: Some(&last),
            part: Some(key),
            changes: None,
            counts: &counts,
        };
        if !queue.commit(&mut lease, &commit).await? {
            bail!("commit of part {i} refused");
        }
    }
    let state = queue.finish(&lease, &Finish::Done).await?;
    if state != "done" {
        bail!("the shard ended {state}, not done");
    }
    Ok(())
}

async fn write_part(s3: &Arc<S3>, spec: &ScanSpec, key: &str, part: usize) -> anyhow::Result<()> {
    let dest = Destination::S3 {
        bucket: spec.output_bucket.clone(),
        key: key.to_string(),
    };
    let opts = OutputOptions {
        format: spec.format,
        header: false,
        bucket: spec.bucket.clone(),
        ..OutputOptions::default()
    };
    let mut writer = RecordWriter::create(&dest, &opts, Some(s3)).await?;
    for n in 0..RECORDS {
        writer.write(&record(part, n)).await?;
    }
    writer.finish().await?;
    Ok(())
}
