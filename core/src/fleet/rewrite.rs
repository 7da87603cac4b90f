//! Parquet files of the result made from several worker parts: Parquet
//! cannot be concatenated byte-wise (each file ends with its own footer), so
//! the parts are read in key order and their records written again as one
//! file. Bytes stream both ways: a few parts are fetched ahead
//! ([`PREFETCH`], each below `merge_plan::PARQUET_COPY_ALONE`), records are
//! decoded a batch at a time, and the output goes up as a multipart upload
//! of row groups, so the merger's memory is bounded whatever the file size.
//! Joining small parts also gives readers row groups of a useful size, where
//! the parts' were as small as the parts.
//!
//! May import: `spec`, `scan` (output, parquet) and `s3`.

use crate::fleet::spec::ScanSpec;
use crate::s3::compose::Composed;
use crate::s3::error::S3Error;
use crate::s3::S3;
use crate::scan::format::Format;
use crate::scan::output::{Destination, OutputOptions, RecordWriter};
use crate::scan::parquet::read_records;
use futures::stream::{self, StreamExt, TryStreamExt};
use std::sync::Arc;

/// Parts fetched ahead of the one being rewritten.
pub const PREFETCH: usize = 4;

/// Write the records of the Parquet parts `parts` (keys in the output
/// bucket, in key order) as one Parquet file `key`. Nothing is visible if it
/// fails (the upload is aborted).
pub async fn rewrite_parquet(
    s3: &Arc<S3>,
    spec: &ScanSpec,
    parts: &[String],
    key: &str,
) -> Result<Composed, S3Error> {
    let opts = OutputOptions {
        format: Format::Parquet,
        header: false,
        bucket: spec.bucket.clone(),
        changes: spec.change_set,
        ..OutputOptions::default()
    };
    let dest = Destination::S3 {
        bucket: spec.output_bucket.clone(),
        key: key.to_string(),
    };
    let mut writer = RecordWriter::create(&dest, &opts, Some(s3)).await?;
    if let Err(e) = copy_records(s3, spec, parts, &mut writer).await {
        writer.abort().await;
        return Err(e);
    }
    let summary = writer.finish().await?;
    let bucket = spec.output_bucket.as_str();
    let head = s3
        .send_retried(bucket, |sdk| sdk.head_object().bucket(bucket).key(key).send())
        .await?;
    Ok(Composed {
        bytes: summary.bytes,
        etag: head.e_tag().map(str::to_string),
        parts: summary.parts as usize,
    })
}

async fn copy_records(
    s3: &Arc<S3>,
    spec: &ScanSpec,
    parts: &[String],
    writer: &mut RecordWriter,
) -> Result<(), S3Error> {
    let bucket = spec.output_bucket.as_str();
    let mut bodies = stream::iter(parts)
        .map(|part| async move { s3.get(bucket, part, None).await.map(|body| (part, body)) })
        .buffered(PREFETCH);
    while let Some((part, body)) = bodies.try_next().await? {
        let bad = |e: crate::scan::parquet::ParquetError| S3Error::Other(format!("part {part}: {e}"));
        for batch in read_records(body).map_err(bad)? {
            for record in batch.map_err(bad)? {
                writer.write(&record).await?;
            }
        }
    }
    Ok(())
}
