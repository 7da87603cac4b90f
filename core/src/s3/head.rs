//! HEAD: the fast path (a signed request, its answer read from the headers)
//! and the two ways to HEAD an object, selectable so benchmarks can compare
//! them: `fast` (the default) and `sdk` (aws-sdk-s3).
//!
//! May import: everything below it in `s3` (the client included).

use super::client::{sdk_error, S3};
use super::codec::{
    encode_key, format_time, http_date_to_rfc3339, retry_after, strip_quotes, MetadataReader, QUERY_ENCODE,
};
use super::columns::ObjectColumns;
use super::error::S3Error;
use super::signed::SignedClient;
use super::types::{HeadInfo, HeadResult};
use http::{HeaderMap, StatusCode};
use percent_encoding::utf8_percent_encode;
use std::borrow::Cow;
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
        let (resp, _) = self.send("HEAD", bucket, &encode_key(key), "").await?;
        match resp.status() {
            StatusCode::OK => head_info(resp.headers()).map(Some),
            StatusCode::NOT_FOUND => Ok(None),
            status => Err(head_error(status.as_u16(), bucket)
                .with_retry_after(retry_after(|name| resp.headers().get(name)?.to_str().ok()))),
        }
    }

    /// One HEAD attempt of one version of `key` (`--versions`).
    pub async fn head_version(&self, bucket: &str, key: &str, version_id: &str) -> HeadResult {
        let query = format!("versionId={}", utf8_percent_encode(version_id, QUERY_ENCODE));
        let (resp, _) = self.send("HEAD", bucket, &encode_key(key), &query).await?;
        match resp.status() {
            StatusCode::OK => head_info(resp.headers()).map(Some),
            StatusCode::NOT_FOUND => Ok(None),
            status => Err(head_error(status.as_u16(), bucket)
                .with_retry_after(retry_after(|name| resp.headers().get(name)?.to_str().ok()))),
        }
    }
}

/// A HEAD that failed with `status` (not 404). Throttling and server errors
/// stay retryable; a refusal of this one object becomes
/// [`S3Error::HeadRefused`] with what the status usually means, since a HEAD
/// answer has no body to say more.
pub fn head_error(status: u16, bucket: &str) -> S3Error {
    let cause = match status {
        400 => "an SSE-C object needs its customer key, or the server refused the request",
        401 | 403 => "the object's ACL or a policy may deny it",
        405 => "the server does not allow HEAD on this object",
        501 => "the server does not implement HEAD for this object",
        408 | 429 => return S3Error::from_status(status, None, bucket),
        // A redirect not followed (to a host the client does not send to):
        // temporary by its name, so the HEAD is tried again, never recorded
        // on the first answer.
        307 => {
            return S3Error::Server {
                status,
                detail: "a 307 Temporary Redirect that was not followed".into(),
            }
        }
        402..=499 => "the server refused the request for this object",
        _ => return S3Error::from_status(status, None, bucket),
    };
    S3Error::HeadRefused { status, cause }
}

/// Read the object's attributes from HEAD response headers. An answer
/// without a valid Content-Length is an error, never a size of 0.
pub fn head_info(headers: &HeaderMap) -> Result<HeadInfo, S3Error> {
    // Borrowed: each value is copied at most once, into the record.
    let text = |name: &str| headers.get(name).map(|v| String::from_utf8_lossy(v.as_bytes()));
    let mut metadata = MetadataReader::default();
    let mut columns = ObjectColumns::default();
    for (name, value) in headers {
        let Some(amz) = name.as_str().strip_prefix("x-amz-") else {
            continue;
        };
        if let Some(meta) = amz.strip_prefix("meta-") {
            metadata.add(meta, value.as_bytes());
        } else {
            columns.read_header(amz, value.as_bytes());
        }
    }
    let metadata = metadata.finish();
    Ok(HeadInfo {
        size: content_length(text("content-length").as_deref())?,
        etag: text("etag").map(|e| strip_quotes(&e)),
        last_modified: text("last-modified").and_then(|v| http_date_to_rfc3339(&v)),
        storage_class: text("x-amz-storage-class").map(Cow::into_owned),
        content_type: text("content-type").map(Cow::into_owned),
        metadata: metadata.values,
        binary_metadata: metadata.binary,
        missing_metadata: missing_metadata(text("x-amz-missing-meta").as_deref()),
        columns,
    })
}

/// `x-amz-missing-meta`: how many metadata entries the answer left out
/// (S3 omits values that HTTP headers cannot carry). A value that is not a
/// count still says some are missing.
fn missing_metadata(value: Option<&str>) -> Option<u32> {
    let value = value?.trim();
    Some(value.parse().unwrap_or(1)).filter(|n| *n > 0)
}

/// The object's size from a Content-Length header value.
fn content_length(value: Option<&str>) -> Result<u64, S3Error> {
    let value = value.ok_or_else(|| S3Error::BadAnswer("HEAD answer without Content-Length".into()))?;
    value
        .trim()
        .parse()
        .map_err(|_| S3Error::BadAnswer(format!("HEAD answer with Content-Length {value:?}, not a size")))
}

/// A size the SDK read (`None` when the header was missing), or an error
/// saying which answer lacked it.
pub fn sdk_size(length: Option<i64>, what: &str) -> Result<u64, S3Error> {
    match length {
        Some(n) if n >= 0 => Ok(n as u64),
        Some(n) => Err(S3Error::BadAnswer(format!(
            "{what}: Content-Length {n}, not a size"
        ))),
        None => Err(S3Error::BadAnswer(format!("{what} without Content-Length"))),
    }
}

pub enum HeadClient {
    Fast(Box<SignedClient>),
    /// The SDK client, and whether its HEADs are in checksum mode.
    Sdk(Arc<S3>, bool),
}

impl HeadClient {
    pub fn new(kind: HeadClientKind, s3: &Arc<S3>) -> Result<HeadClient, S3Error> {
        HeadClient::with_checksum_mode(kind, s3, false)
    }

    /// A client whose HEADs ask for the object's checksum when
    /// `checksum_mode` (`--checksums`).
    pub fn with_checksum_mode(
        kind: HeadClientKind,
        s3: &Arc<S3>,
        checksum_mode: bool,
    ) -> Result<HeadClient, S3Error> {
        Ok(match kind {
            HeadClientKind::Fast => HeadClient::Fast(Box::new(
                SignedClient::new(&s3.endpoint, s3.credentials.clone(), &s3.learnt)?
                    .with_checksum_mode(checksum_mode),
            )),
            HeadClientKind::Sdk => HeadClient::Sdk(s3.clone(), checksum_mode),
        })
    }

    /// One attempt; retries are the caller's.
    pub async fn head(&self, bucket: &str, key: &str) -> HeadResult {
        match self {
            HeadClient::Fast(fast) => fast.head(bucket, key).await,
            // Boxed: the SDK's future is many times the fast path's, and a
            // HEAD's future is moved into a box of its own per object.
            HeadClient::Sdk(s3, checksum_mode) => {
                Box::pin(sdk_head(s3, bucket, key, None, *checksum_mode)).await
            }
        }
    }

    /// One attempt at one version of `key` (`--versions`).
    pub async fn head_version(&self, bucket: &str, key: &str, version_id: &str) -> HeadResult {
        match self {
            HeadClient::Fast(fast) => fast.head_version(bucket, key, version_id).await,
            HeadClient::Sdk(s3, checksum_mode) => {
                Box::pin(sdk_head(s3, bucket, key, Some(version_id), *checksum_mode)).await
            }
        }
    }
}

async fn sdk_head(
    s3: &S3,
    bucket: &str,
    key: &str,
    version_id: Option<&str>,
    checksum_mode: bool,
) -> HeadResult {
    let (sdk, region) = s3.sdk_for(bucket);
    let mode = checksum_mode.then_some(aws_sdk_s3::types::ChecksumMode::Enabled);
    match sdk
        .head_object()
        .bucket(bucket)
        .key(key)
        .set_version_id(version_id.map(str::to_string))
        .set_checksum_mode(mode)
        .send()
        .await
    {
        Ok(out) => Ok(Some(HeadInfo {
            size: sdk_size(out.content_length(), "HEAD answer")?,
            etag: out.e_tag().map(strip_quotes),
            last_modified: out.last_modified().map(format_time),
            storage_class: out.storage_class().map(|s| s.as_str().to_string()),
            content_type: out.content_type().map(str::to_string),
            missing_metadata: missing_metadata(out.missing_meta().map(|n| n.to_string()).as_deref()),
            columns: sdk_columns(&out),
            ..sdk_metadata(out.metadata())
        })),
        Err(e) => match e.raw_response().map(|r| r.status().as_u16()) {
            _ if let Some(corrected) = s3.correction(&e, bucket, &region) => Err(corrected),
            // A 404 (modelled as NotFound or not) means the object is gone.
            Some(404) => Ok(None),
            // The same errors as the fast path: a HEAD answer has no body,
            // so the status is all there is.
            Some(status) if !(200..300).contains(&status) => {
                let headers = e.raw_response().map(|r| r.headers());
                let wait = retry_after(|name| headers?.get(name));
                Err(head_error(status, bucket).with_retry_after(wait))
            }
            _ => Err(sdk_error(e, bucket)),
        },
    }
}

/// The columns the SDK read from the same headers the fast path reads.
fn sdk_columns(out: &aws_sdk_s3::operation::head_object::HeadObjectOutput) -> ObjectColumns {
    let mut columns = ObjectColumns::default();
    let mut set = |name: &str, value: Option<&str>| {
        if let Some(v) = value {
            columns.read_header(name, v.as_bytes());
        }
    };
    set("version-id", out.version_id());
    set(
        "server-side-encryption",
        out.server_side_encryption().map(|v| v.as_str()),
    );
    set("server-side-encryption-aws-kms-key-id", out.ssekms_key_id());
    let bucket_key = out.bucket_key_enabled().map(|b| b.to_string());
    set("server-side-encryption-bucket-key-enabled", bucket_key.as_deref());
    set("checksum-type", out.checksum_type().map(|v| v.as_str()));
    set("checksum-crc32", out.checksum_crc32());
    set("checksum-crc32c", out.checksum_crc32_c());
    set("checksum-crc64nvme", out.checksum_crc64_nvme());
    set("checksum-sha1", out.checksum_sha1());
    set("checksum-sha256", out.checksum_sha256());
    set("object-lock-mode", out.object_lock_mode().map(|v| v.as_str()));
    let until = out.object_lock_retain_until_date().map(format_time);
    set("object-lock-retain-until-date", until.as_deref());
    set(
        "object-lock-legal-hold",
        out.object_lock_legal_hold_status().map(|v| v.as_str()),
    );
    set("replication-status", out.replication_status().map(|v| v.as_str()));
    columns
}

/// The SDK's metadata map read as the fast path reads headers (the SDK
/// has already joined repeated headers and refused bytes that are not UTF-8).
fn sdk_metadata(map: Option<&std::collections::HashMap<String, String>>) -> HeadInfo {
    let mut metadata = MetadataReader::default();
    for (name, value) in map.into_iter().flatten() {
        metadata.add(&name.to_ascii_lowercase(), value.as_bytes());
    }
    let metadata = metadata.finish();
    HeadInfo {
        metadata: metadata.values,
        binary_metadata: metadata.binary,
        ..HeadInfo::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        pairs
            .iter()
            .map(|(name, value)| (http::HeaderName::from_static(name), value.parse().unwrap()))
            .collect()
    }

    #[test]
    fn a_head_answer_without_a_valid_content_length_is_an_error_not_zero() {
        let with = |length: Option<&str>| {
            let mut pairs = vec![("etag", "\"e\""), ("x-amz-meta-a", "b")];
            pairs.extend(length.map(|l| ("content-length", l)));
            head_info(&headers(&pairs))
        };
        assert_eq!(with(Some("17")).unwrap().size, 17);
        assert_eq!(with(Some("0")).unwrap().size, 0);
        for bad in [None, Some(""), Some("-1"), Some("12 bytes")] {
            let e = with(bad).unwrap_err();
            assert!(
                matches!(e, S3Error::BadAnswer(_)) && !e.is_retryable(),
                "{bad:?}: {e}"
            );
            assert!(e.to_string().contains("Content-Length"), "{e}");
        }
        assert!(sdk_size(None, "HEAD answer").is_err());
        assert!(sdk_size(Some(-3), "HEAD answer").is_err());
        assert_eq!(sdk_size(Some(5), "HEAD answer").unwrap(), 5);
    }

    /// What a HEAD answer says of its metadata reaches the record whole:
    /// repeated headers, bytes that are not UTF-8, entries it left out.
    #[test]
    fn a_head_answer_keeps_all_its_metadata_and_says_what_it_left_out() {
        let mut map = headers(&[("content-length", "3"), ("x-amz-meta-tag", "one")]);
        map.append("x-amz-meta-tag", "two".parse().unwrap());
        map.append(
            "x-amz-meta-raw",
            http::HeaderValue::from_bytes(b"caf\xe9").unwrap(),
        );
        let info = head_info(&map).unwrap();
        assert_eq!(info.metadata["tag"], "one,two");
        assert_eq!(info.binary_metadata, ["raw"]);
        assert_eq!(info.missing_metadata, None);
        map.insert("x-amz-missing-meta", "2".parse().unwrap());
        assert_eq!(head_info(&map).unwrap().missing_metadata, Some(2));
        map.insert("x-amz-missing-meta", "some".parse().unwrap());
        assert_eq!(head_info(&map).unwrap().missing_metadata, Some(1));
        map.insert("x-amz-missing-meta", "0".parse().unwrap());
        assert_eq!(head_info(&map).unwrap().missing_metadata, None);
    }

    #[test]
    fn refusals_of_one_object_are_final_and_say_why() {
        for (status, cause) in [
            (403, "the object's ACL or a policy may deny it"),
            (400, "an SSE-C object needs its customer key"),
            (405, "does not allow HEAD"),
            (501, "does not implement HEAD"),
        ] {
            let e = head_error(status, "b");
            assert!(!e.is_retryable() && !e.affects_every_request(), "{status}");
            assert_eq!(e.http_status(), Some(status));
            let text = e.to_string();
            assert!(
                text.starts_with(&format!("HTTP {status} on HEAD (no body: ")),
                "{text}"
            );
            assert!(text.contains(cause), "{text}");
        }
        // A redirect not followed is temporary too.
        for status in [307, 429, 500, 502, 503] {
            assert!(head_error(status, "b").is_retryable(), "{status}");
        }
    }
}
