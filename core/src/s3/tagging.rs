//! GetObjectTagging: an object's tags, one request more per object when a
//! scan asks for the `object_tags` column (`--tags`). Through aws-sdk-s3:
//! it is not the hot path, and the answer is a small XML document.
//!
//! May import: `client` (the [`S3`] handle) and `error`.

use super::client::{sdk_error, S3};
use super::error::S3Error;
use aws_sdk_s3::error::ProvideErrorMetadata;
use std::collections::BTreeMap;

/// `None` when the object is gone (404).
pub type TagsResult = Result<Option<BTreeMap<String, String>>, S3Error>;

impl S3 {
    /// One GetObjectTagging attempt (the caller retries, as for a HEAD), of
    /// the current version or of `version_id` (`--versions`).
    pub async fn object_tags(&self, bucket: &str, key: &str, version_id: Option<&str>) -> TagsResult {
        let (sdk, region) = self.sdk_for(bucket);
        let request = sdk
            .get_object_tagging()
            .bucket(bucket)
            .key(key)
            .set_version_id(version_id.map(str::to_string));
        match request.send().await {
            Ok(out) => Ok(Some(
                out.tag_set()
                    .iter()
                    .map(|t| (t.key().to_string(), t.value().to_string()))
                    .collect(),
            )),
            Err(e) => match e.raw_response().map(|r| r.status().as_u16()) {
                _ if let Some(corrected) = self.correction(&e, bucket, &region) => Err(corrected),
                Some(404) if e.code() != Some("NoSuchBucket") => Ok(None),
                _ => Err(sdk_error(e, bucket)),
            },
        }
    }
}
