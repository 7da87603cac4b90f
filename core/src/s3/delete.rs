//! Deleting every object under a prefix: the parts of a merged or deleted
//! scan, recorded or orphaned.
//!
//! May import: the client, `pages` and the bottom of `s3`.

use super::client::S3;
use super::error::S3Error;
use super::pages::{BucketLister, Pages};
use super::types::ListRequest;
use aws_sdk_s3::types::{Delete, ObjectIdentifier};

/// Delete every object under `prefix` (the parts, recorded or orphaned):
/// one listing, followed to its end, each page's keys deleted before the next
/// page is read. Deleting what was listed does not move a continuation token
/// (it names a place in key order), and an empty page is not the end.
pub async fn delete_prefix(s3: &S3, bucket: &str, prefix: &str) -> Result<u64, S3Error> {
    let req = ListRequest {
        prefix: prefix.to_string(),
        max_keys: 1000,
        ..Default::default()
    };
    let lister = BucketLister { s3, bucket };
    let mut pages = Pages::new(&lister, req);
    let mut deleted = 0;
    while let Some(page) = pages.next().await? {
        let keys: Vec<&str> = page.objects.iter().map(|o| o.key.as_str()).collect();
        delete_keys(s3, bucket, &keys).await?;
        deleted += keys.len() as u64;
    }
    Ok(deleted)
}

/// Delete the objects `keys` (any number; a missing one is no error).
pub async fn delete_listed(s3: &S3, bucket: &str, keys: &[String]) -> Result<(), S3Error> {
    for chunk in keys.chunks(1000) {
        let chunk: Vec<&str> = chunk.iter().map(String::as_str).collect();
        delete_keys(s3, bucket, &chunk).await?;
    }
    Ok(())
}

/// Rounds of DeleteObjects for the keys a round could not delete: a key
/// that still fails after these is reported, never retried forever (an object
/// lock or a deny policy does not go away by asking again).
const DELETE_ROUNDS: u32 = 4;

/// Delete `keys` (at most 1,000; none is no request). DeleteObjects answers
/// 200 even when some keys fail: their errors are in the answer, and those
/// keys are sent again, with backoff, up to [`DELETE_ROUNDS`] times.
async fn delete_keys(s3: &S3, bucket: &str, keys: &[&str]) -> Result<(), S3Error> {
    let mut left: Vec<String> = keys.iter().map(|k| k.to_string()).collect();
    let mut round = 0;
    while !left.is_empty() {
        let failed = delete_once(s3, bucket, &left).await?;
        round += 1;
        if failed.is_empty() {
            return Ok(());
        }
        if round == DELETE_ROUNDS {
            return Err(undeletable(bucket, &failed, keys.len()));
        }
        tracing::warn!(
            bucket,
            failed = failed.len(),
            round,
            "some objects were not deleted; retrying"
        );
        tokio::time::sleep(s3.retry.backoff(round)).await;
        left = failed.into_iter().map(|f| f.key).collect();
    }
    Ok(())
}

/// A key DeleteObjects could not delete, with the S3 error code and message.
struct NotDeleted {
    key: String,
    code: String,
    message: String,
}

/// One DeleteObjects request (quiet: only failures come back).
async fn delete_once(s3: &S3, bucket: &str, keys: &[String]) -> Result<Vec<NotDeleted>, S3Error> {
    let ids: Vec<ObjectIdentifier> = keys
        .iter()
        .map(|k| ObjectIdentifier::builder().key(k).build().expect("key is set"))
        .collect();
    let delete = Delete::builder()
        .set_objects(Some(ids))
        .quiet(true)
        .build()
        .expect("objects are set");
    let out = s3
        .send_retried(bucket, |sdk| {
            sdk.delete_objects().bucket(bucket).delete(delete.clone()).send()
        })
        .await?;
    Ok(out
        .errors()
        .iter()
        .map(|e| NotDeleted {
            key: e.key().unwrap_or_default().to_string(),
            code: e.code().unwrap_or("no code").to_string(),
            message: e.message().unwrap_or_default().to_string(),
        })
        .collect())
}

/// The error for keys that would not go: how many, the first one and why.
fn undeletable(bucket: &str, failed: &[NotDeleted], tried: usize) -> S3Error {
    let first = &failed[0];
    S3Error::Other(format!(
        "could not delete {} of {tried} objects after {DELETE_ROUNDS} tries; first: s3://{bucket}/{} \
         ({}: {}); an object lock, a retention period or a deny policy may keep them",
        failed.len(),
        first.key,
        first.code,
        first.message
    ))
}
