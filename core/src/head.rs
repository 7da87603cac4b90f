//! The two ways to HEAD an object, selectable so benchmarks can compare them:
//! `fast` (hand-signed hyper requests, the default) and `sdk` (aws-sdk-s3).

use crate::error::S3Error;
use crate::fasthead::{FastHead, HeadInfo, HeadResult};
use crate::s3::{format_time, sdk_error, strip_quotes, S3};
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

pub enum HeadClient {
    Fast(Box<FastHead>),
    Sdk(Arc<S3>),
}

impl HeadClient {
    pub fn new(kind: HeadClientKind, s3: &Arc<S3>) -> Result<HeadClient, S3Error> {
        Ok(match kind {
            HeadClientKind::Fast => {
                HeadClient::Fast(Box::new(FastHead::new(&s3.endpoint, s3.credentials.clone())?))
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
                .map(|(k, v)| {
                    (
                        k.to_ascii_lowercase(),
                        crate::record::decode_metadata_value(v.as_bytes()),
                    )
                })
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
