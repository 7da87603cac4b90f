//! Deleting every object under a prefix: the parts of a merged or deleted
//! scan, recorded or orphaned.
//!
//! May import: the client and the bottom of `s3`.

use super::client::S3;
use super::error::S3Error;
use super::types::ListRequest;
use aws_sdk_s3::types::{Delete, ObjectIdentifier};

/// Delete every object under `prefix` (the parts, recorded or orphaned).
pub async fn delete_prefix(s3: &S3, bucket: &str, prefix: &str) -> Result<u64, S3Error> {
    let mut deleted = 0;
    loop {
        let page = s3
            .list_page(
                bucket,
                &ListRequest {
                    prefix: prefix.to_string(),
                    max_keys: 1000,
                    ..Default::default()
                },
            )
            .await?;
        if page.objects.is_empty() {
            return Ok(deleted);
        }
        let ids: Vec<ObjectIdentifier> = page
            .objects
            .iter()
            .map(|o| {
                ObjectIdentifier::builder()
                    .key(&o.key)
                    .build()
                    .expect("key is set")
            })
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
        deleted += page.objects.len() as u64;
    }
}
