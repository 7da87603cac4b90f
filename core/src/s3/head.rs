//! HEAD: the fast path (a signed request, its answer read from the headers)
//! and the two ways to HEAD an object, selectable so benchmarks can compare
//! them: `fast` (the default) and `sdk` (aws-sdk-s3).
//!
//! May import: everything below it in `s3` (the client included).

use super::client::{sdk_error, S3};
use super::codec::{decode_metadata_value, encode_key, format_time, strip_quotes};
use super::error::S3Error;
use super::signed::SignedClient;
use super::types::{HeadInfo, HeadResult};
use http::{HeaderMap, StatusCode};
use std::str::FromStr;
use std::sync::Arc;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum HeadClientKind {
    #[default]
    Fast,
    Sdk,
}

impl FromStr for HeadClientKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "fast" => Ok(HeadClientKind::Fast),
            "sdk" => Ok(HeadClientKind::Sdk),
            other => Err(format!("unknown HEAD client {other:?}: use fast or sdk")),
        }
    }
}

impl SignedClient {
    /// One HEAD attempt (the caller retries).
    pub async fn head(&self, bucket: &str, key: &str) -> HeadResult {
        let resp = self.send("HEAD", bucket, &encode_key(key), "").await?;
        match resp.status() {
            StatusCode::OK => Ok(Some(head_info(resp.headers()))),
            StatusCode::NOT_FOUND => Ok(None),
            status => Err(S3Error::from_status(status.as_u16(), None, bucket)),
        }
    }
}

/// Read the object's attributes from HEAD response headers.
pub fn head_info(headers: &HeaderMap) -> HeadInfo {
    let text = |name: &str| {
        headers
            .get(name)
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
    };
    let metadata = headers
        .iter()
        .filter_map(|(name, value)| {
            let meta = name.as_str().strip_prefix("x-amz-meta-")?;
            Some((meta.to_string(), decode_metadata_value(value.as_bytes())))
        })
        .collect();
    HeadInfo {
        size: text("content-length").and_then(|v| v.parse().ok()).unwrap_or(0),
        etag: text("etag").map(|e| strip_quotes(&e)),
        last_modified: text("last-modified").and_then(|v| {
            aws_smithy_types::DateTime::from_str(&v, aws_smithy_types::date_time::Format::HttpDate)
                .ok()
                .map(|t| format_time(&t))
        }),
        storage_class: text("x-amz-storage-class"),
        content_type: text("content-type"),
        metadata,
    }
}

pub enum HeadClient {
    Fast(Box<SignedClient>),
    Sdk(Arc<S3>),
}

impl HeadClient {
    pub fn new(kind: HeadClientKind, s3: &Arc<S3>) -> Result<HeadClient, S3Error> {
        Ok(match kind {
            HeadClientKind::Fast => {
                HeadClient::Fast(Box::new(SignedClient::new(&s3.endpoint, s3.credentials.clone())?))
            }
            HeadClientKind::Sdk => HeadClient::Sdk(s3.clone()),
        })
    }

    /// One attempt; retries are the caller's.
    pub async fn head(&self, bucket: &str, key: &str) -> HeadResult {
        match self {
            HeadClient::Fast(fast) => fast.head(bucket, key).await,
            HeadClient::Sdk(s3) => sdk_head(s3, bucket, key).await,
        }
    }
}

async fn sdk_head(s3: &S3, bucket: &str, key: &str) -> HeadResult {
    match s3.sdk.head_object().bucket(bucket).key(key).send().await {
        Ok(out) => Ok(Some(HeadInfo {
            size: out.content_length().unwrap_or(0).max(0) as u64,
            etag: out.e_tag().map(strip_quotes),
            last_modified: out.last_modified().map(format_time),
            storage_class: out.storage_class().map(|s| s.as_str().to_string()),
            content_type: out.content_type().map(str::to_string),
            metadata: out
                .metadata()
                .into_iter()
                .flatten()
                .map(|(k, v)| (k.to_ascii_lowercase(), decode_metadata_value(v.as_bytes())))
                .collect(),
        })),
        Err(e) => {
            // A 404 (modelled as NotFound or not) means the object is gone.
            if e.raw_response().is_some_and(|r| r.status().as_u16() == 404) {
                return Ok(None);
            }
            Err(sdk_error(e, bucket))
        }
    }
}
