//! One S3 object written in pieces: a multipart upload that is created only
//! when the first part is sent, so an object that turns out small is a single
//! PutObject. Both the streamed output and the merge write through it.
//!
//! May import: the client and the bottom of `s3`.

use super::client::{sdk_error, S3};
use super::error::S3Error;
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{CompletedMultipartUpload, CompletedPart};
use std::sync::Arc;

/// S3 refuses multipart parts under 5 MiB (except the last).
pub const MIN_PART_SIZE: usize = 5 * 1024 * 1024;
/// S3 refuses parts (and copied part ranges) over 5 GiB.
pub const MAX_PART_SIZE: usize = 5 * 1024 * 1024 * 1024;
/// S3 refuses part numbers above 10,000.
pub const MAX_PARTS: usize = 10_000;
/// S3 refuses objects over 5 TiB (10,000 parts of 5 GiB would be more).
pub const MAX_OBJECT_SIZE: u64 = 5 << 40;

pub struct Upload {
    s3: Arc<S3>,
    bucket: String,
    key: String,
    content_type: &'static str,
    upload_id: Option<String>,
    parts: Vec<CompletedPart>,
}

impl Upload {
    pub fn new(s3: Arc<S3>, bucket: String, key: String, content_type: &'static str) -> Upload {
        Upload {
            s3,
            bucket,
            key,
            content_type,
            upload_id: None,
            parts: Vec::new(),
        }
    }

    /// True once a part was sent (so `complete` finishes a multipart upload).
    pub fn is_multipart(&self) -> bool {
        self.upload_id.is_some()
    }

    pub fn parts(&self) -> usize {
        self.parts.len()
    }

    async fn upload_id(&mut self) -> Result<String, S3Error> {
        if let Some(id) = &self.upload_id {
            return Ok(id.clone());
        }
        let (s3, bucket, key) = (&self.s3, self.bucket.as_str(), self.key.as_str());
        let created = s3
            .send_retried(bucket, |sdk| {
                sdk.create_multipart_upload()
                    .bucket(bucket)
                    .key(key)
                    .content_type(self.content_type)
                    .send()
            })
            .await?;
        let id = created
            .upload_id()
            .ok_or_else(|| S3Error::Other("CreateMultipartUpload returned no upload id".into()))?
            .to_string();
        self.upload_id = Some(id.clone());
        Ok(id)
    }

    /// Send `chunk` as the next part (every part but the last must be at
    /// least 5 MiB; the caller sizes them).
    pub async fn upload_part(&mut self, chunk: Vec<u8>) -> Result<(), S3Error> {
        let id = self.upload_id().await?;
        let number = self.parts.len() as i32 + 1;
        let body = bytes::Bytes::from(chunk);
        let (s3, bucket, key) = (&self.s3, self.bucket.as_str(), self.key.as_str());
        let out = s3
            .send_retried(bucket, |sdk| {
                sdk.upload_part()
                    .bucket(bucket)
                    .key(key)
                    .upload_id(&id)
                    .part_number(number)
                    .body(ByteStream::from(body.clone()))
                    .send()
            })
            .await?;
        self.push_part(number, out.e_tag());
        Ok(())
    }

    fn push_part(&mut self, number: i32, etag: Option<&str>) {
        self.parts.push(
            CompletedPart::builder()
                .part_number(number)
                .set_e_tag(etag.map(str::to_string))
                .build(),
        );
    }

    /// Finish the object. `rest` is its last bytes: the whole body when no
    /// part was sent (one PutObject), else the last part (skipped if empty).
    /// On failure the upload is aborted. The object's ETag, as the store
    /// answered it.
    pub async fn complete(&mut self, rest: Vec<u8>) -> Result<Option<String>, S3Error> {
        let result = self.complete_inner(rest).await;
        if result.is_err() {
            self.abort().await;
        }
        result
    }

    async fn complete_inner(&mut self, rest: Vec<u8>) -> Result<Option<String>, S3Error> {
        let (s3, bucket, key) = (self.s3.clone(), self.bucket.clone(), self.key.clone());
        if !self.is_multipart() {
            return s3.put(&bucket, &key, self.content_type, rest.into()).await;
        }
        if !rest.is_empty() {
            self.upload_part(rest).await?;
        }
        let id = self.upload_id.clone().unwrap_or_default();
        let parts = CompletedMultipartUpload::builder()
            .set_parts(Some(self.parts.clone()))
            .build();
        let out = s3
            .send_retried(&bucket, |sdk| {
                sdk.complete_multipart_upload()
                    .bucket(&bucket)
                    .key(&key)
                    .upload_id(&id)
                    .multipart_upload(parts.clone())
                    .send()
            })
            .await?;
        self.upload_id = None;
        Ok(out.e_tag)
    }

    /// Best effort: an unfinished upload only costs storage until a lifecycle
    /// rule or the next abort removes it.
    pub async fn abort(&mut self) {
        if let Some(id) = self.upload_id.take() {
            let r = self
                .s3
                .sdk_for(&self.bucket)
                .0
                .abort_multipart_upload()
                .bucket(&self.bucket)
                .key(&self.key)
                .upload_id(id)
                .send()
                .await;
            if let Err(e) = r {
                tracing::warn!(error = %sdk_error(e, &self.bucket), "could not abort multipart upload");
            }
        }
    }
}
