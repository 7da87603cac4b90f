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

/// One DeleteObjects request (at most 1,000 keys; none is no request).
async fn delete_keys(s3: &S3, bucket: &str, keys: &[&str]) -> Result<(), S3Error> {
    if keys.is_empty() {
        return Ok(());
    }
    let ids: Vec<ObjectIdentifier> = keys
        .iter()
        .map(|k| ObjectIdentifier::builder().key(*k).build().expect("key is set"))
        .collect();
    let delete = Delete::builder()
        .set_objects(Some(ids))
        .quiet(true)
        .build()
        .expect("objects are set");
    s3.send_retried(bucket, || {
        s3.sdk
            .delete_objects()
            .bucket(bucket)
            .delete(delete.clone())
            .send()
    })
    .await?;
    Ok(())
}
