//! Planning: cut the scan's keyspace into shards in Redis (LIST only, with
//! the scan's own credentials), or plan again from the done records in S3
//! when Redis lost a planned scan.

use super::context::{max_failures, Context, Error};
use super::source::s3_for;
use crate::crd::BucketScan;
use crate::desired;
use bucketscan_core::fleet::plan::plan_scan;
use bucketscan_core::fleet::queue::Queue;
use bucketscan_core::fleet::recovery;
use bucketscan_core::fleet::spec::{ScanSpec, DEFAULT_FILE_SIZE};

pub(super) fn spec_of(scan: &BucketScan) -> ScanSpec {
    ScanSpec {
        bucket: scan.spec.source.bucket.clone(),
        prefix: scan.spec.source.prefix.clone(),
        output_bucket: scan.spec.output.bucket.clone(),
        output_prefix: desired::output_prefix(scan),
        gzip: scan.spec.output.gzip,
        only_with_metadata: scan.spec.filters.only_with_metadata,
        max_failures: max_failures(),
        format: scan.spec.output.format.into(),
        layout: scan.spec.output.layout.into(),
        file_size: scan.spec.output.file_size_bytes.unwrap_or(DEFAULT_FILE_SIZE),
    }
}

pub(super) async fn plan(
    scan: &BucketScan,
    ctx: &Context,
    queue: &Queue,
) -> Result<bucketscan_core::fleet::plan::Planned, Error> {
    let s3 = s3_for(scan, ctx).await?;
    let opts = desired::plan_options(scan, &ctx.settings);
    Ok(plan_scan(&s3, &spec_of(scan), &opts, queue).await?)
}

/// Plan again after Redis lost the scan: finished shards are restored from
/// their records in S3, only the rest is queued.
pub(super) async fn replan(scan: &BucketScan, ctx: &Context, queue: &Queue) -> Result<String, Error> {
    let s3 = s3_for(scan, ctx).await?;
    let (restored, queued) = recovery::replan(&s3, &spec_of(scan), queue).await?;
    Ok(format!(
        "Redis had lost the scan: {restored} finished shards restored from S3, {queued} ranges queued again"
    ))
}
