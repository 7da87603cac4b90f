//! The clients for one endpoint ([`S3`]): aws-sdk-s3 (over our transport)
//! for PUT, GET, multipart and deletes, the signed fast path for LIST, one
//! credentials provider for both, one retry policy around every call.
//!
//! May import: everything below it in `s3` (types, codec, error, retry,
//! transport, signed, list); nothing outside `s3`.

use super::clock::SharedClock;
use super::codec::{format_time, retry_after, strip_quotes, url_decode, wire_start_after};
use super::error::S3Error;
use super::list::element;
use super::retry::RetryPolicy;
use super::signed::{Learnt, SignedClient};
use super::transport::SdkHttpClient;
use super::types::{Endpoint, ListPage, ListRequest, ListedObject};
use aws_config::{BehaviorVersion, Region};
use aws_credential_types::provider::SharedCredentialsProvider;
use aws_sdk_s3::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use aws_sdk_s3::types::EncodingType;
use aws_smithy_runtime_api::client::orchestrator::HttpResponse;
use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The clients for one endpoint, shared by every task of a process.
pub struct S3 {
    /// The SDK client for the endpoint's region; [`S3::sdk_for`] gives the
    /// one for a bucket's region.
    pub sdk: aws_sdk_s3::Client,
    /// SDK clients for regions servers redirected us to.
    sdk_by_region: Mutex<HashMap<Arc<str>, aws_sdk_s3::Client>>,
    /// Bucket regions and the clock offset learnt from the servers' answers,
    /// shared with every fast-path client made from this one.
    pub learnt: Learnt,
    /// Signed hyper requests for LIST (see `list`).
    pub(super) fast: SignedClient,
    pub credentials: SharedCredentialsProvider,
    pub endpoint: Endpoint,
    pub retry: RetryPolicy,
    /// Retries made by any call on these clients (for the summary and metrics).
    pub retries: AtomicU64,
}

impl S3 {
    /// Clients with credentials from the standard AWS provider chain.
    pub async fn connect(endpoint: Endpoint) -> Result<Arc<S3>, S3Error> {
        S3::connect_with(endpoint, None).await
    }

    /// Clients with the given static credentials (the operator's, read from a
    /// Kubernetes Secret), or the standard chain when `None`.
    pub async fn connect_with(
        endpoint: Endpoint,
        credentials: Option<aws_credential_types::Credentials>,
    ) -> Result<Arc<S3>, S3Error> {
        endpoint.checked_region()?;
        let http_client = sdk_http_client(&endpoint)?;
        let mut loader = aws_config::defaults(BehaviorVersion::latest())
            .region(Region::new(endpoint.region.clone()))
            .http_client(http_client);
        if let Some(c) = credentials {
            loader = loader.credentials_provider(c);
        }
        let shared = loader.load().await;
        let credentials = shared.credentials_provider().ok_or_else(|| {
            S3Error::Credentials(
                "no AWS credentials provider configured (set AWS_ACCESS_KEY_ID and \
                 AWS_SECRET_ACCESS_KEY, or AWS_PROFILE)"
                    .into(),
            )
        })?;
        let learnt = Learnt::new(&endpoint.region);
        let mut conf = aws_sdk_s3::config::Builder::from(&shared)
            .force_path_style(endpoint.path_style)
            .time_source(SharedClock(learnt.clock.clone()))
            // Our own backoff loop (`retry`) wraps every call: one retry policy.
            .retry_config(aws_sdk_s3::config::retry::RetryConfig::disabled())
            .timeout_config(
                aws_sdk_s3::config::timeout::TimeoutConfig::builder()
                    .connect_timeout(Duration::from_secs(10))
                    .operation_attempt_timeout(Duration::from_secs(120))
                    .build(),
            )
            // Non-AWS stores often lack the newer flexible checksums.
            .request_checksum_calculation(aws_sdk_s3::config::RequestChecksumCalculation::WhenRequired)
            .response_checksum_validation(aws_sdk_s3::config::ResponseChecksumValidation::WhenRequired);
        if let Some(url) = &endpoint.url {
            conf = conf.endpoint_url(url.trim_end_matches('/'));
        }
        Ok(Arc::new(S3 {
            fast: SignedClient::new(&endpoint, credentials.clone(), &learnt)?,
            sdk: aws_sdk_s3::Client::from_conf(conf.build()),
            sdk_by_region: Mutex::new(HashMap::new()),
            learnt,
            credentials,
            endpoint,
            retry: RetryPolicy::default(),
            retries: AtomicU64::new(0),
        }))
    }

    /// One LIST page, retried on transient errors (decoding is not retried). Keys are requested URL
    /// encoded (servers fail on control characters otherwise) and decoded here.
    pub async fn list_page(&self, bucket: &str, req: &ListRequest) -> Result<ListPage, S3Error> {
        self.list_page_via(bucket, req, false).await
    }

    /// [`S3::list_page`] through aws-sdk-s3 instead of the fast path: the
    /// reference the fast path is tested against.
    pub async fn list_page_sdk(&self, bucket: &str, req: &ListRequest) -> Result<ListPage, S3Error> {
        self.list_page_via(bucket, req, true).await
    }

    async fn list_page_via(&self, bucket: &str, req: &ListRequest, sdk: bool) -> Result<ListPage, S3Error> {
        let wire_after = req.start_after.as_deref().and_then(wire_start_after);
        let mut page = if sdk {
            self.list_page_raw(bucket, req, wire_after).await?
        } else {
            self.retry
                .run(&self.retries, || {
                    self.fast.list(bucket, req, wire_after.as_deref())
                })
                .await
                .map_err(|e| match e {
                    S3Error::Credentials(text) => S3Error::Credentials(no_credentials_message(&text)),
                    e => e,
                })?
        };
        if let Some(after) = &req.start_after {
            page.keep_after(after); // the server may have started earlier than asked
        }
        Ok(page)
    }

    async fn list_page_raw(
        &self,
        bucket: &str,
        req: &ListRequest,
        start_after: Option<String>,
    ) -> Result<ListPage, S3Error> {
        let out = self
            .send_retried(bucket, |sdk| {
                sdk.list_objects_v2()
                    .bucket(bucket)
                    .prefix(&req.prefix)
                    .set_start_after(start_after.clone())
                    .set_delimiter(req.delimiter.clone())
                    .set_continuation_token(req.continuation.clone())
                    .max_keys(req.max_keys)
                    .encoding_type(EncodingType::Url)
                    .send()
            })
            .await?;
        let url_encoded = out.encoding_type() == Some(&EncodingType::Url);
        let decode = |s: &str| {
            if url_encoded {
                url_decode(s)
            } else {
                Ok(s.to_string())
            }
        };
        let mut objects = Vec::with_capacity(out.contents().len());
        for o in out.contents() {
            objects.push(ListedObject {
                key: decode(o.key().unwrap_or_default())?,
                size: o.size().filter(|n| *n >= 0).map(|n| n as u64).ok_or_else(|| {
                    S3Error::BadAnswer(format!("LIST entry {:?} without a valid Size", o.key()))
                })?,
                etag: o.e_tag().map(strip_quotes),
                last_modified: o.last_modified().map(format_time),
                storage_class: o.storage_class().map(|s| s.as_str().to_string()),
                checksum_algorithm: o.checksum_algorithm().first().map(|a| a.as_str().to_string()),
                checksum_type: o.checksum_type().map(|t| t.as_str().to_string()),
                // The SDK's lister is for planning and tests: never asked.
                listed_metadata: None,
            });
        }
        let common_prefixes = out
            .common_prefixes()
            .iter()
            .filter_map(|p| p.prefix())
            .map(decode)
            .collect::<Result<_, _>>()?;
        let next = match out.is_truncated() {
            Some(true) => out.next_continuation_token().map(str::to_string),
            _ => None,
        };
        if out.is_truncated() == Some(true) && next.is_none() {
            return Err(S3Error::Other(
                "server said the listing is truncated but sent no continuation token".into(),
            ));
        }
        Ok(ListPage {
            objects,
            common_prefixes,
            next,
        })
    }

    /// Write `body` as object `key`, in one retried PutObject; its ETag as
    /// the store answered it (quoted).
    pub async fn put(
        &self,
        bucket: &str,
        key: &str,
        content_type: &str,
        body: bytes::Bytes,
    ) -> Result<Option<String>, S3Error> {
        let out = self
            .send_retried(bucket, |sdk| {
                sdk.put_object()
                    .bucket(bucket)
                    .key(key)
                    .content_type(content_type)
                    .body(aws_sdk_s3::primitives::ByteStream::from(body.clone()))
                    .send()
            })
            .await?;
        Ok(out.e_tag)
    }

    /// The body of object `key`, or the bytes `range` of it (`bytes=A-B`).
    pub async fn get(&self, bucket: &str, key: &str, range: Option<&str>) -> Result<bytes::Bytes, S3Error> {
        let got = self
            .send_retried(bucket, |sdk| {
                sdk.get_object()
                    .bucket(bucket)
                    .key(key)
                    .set_range(range.map(str::to_string))
                    .send()
            })
            .await?;
        let answered_range = got.content_range.clone();
        // A store may answer a range with the whole object (HTTP lets it):
        // what lies past the range's end is not read.
        let needed = range.and_then(range_bounds).map(|(_, end)| end.saturating_add(1));
        let body = read_at_most(got.body, needed)
            .await
            .map_err(|e| match over_cap(&e) {
                // Not the store down: reading again would read as much again.
                true => S3Error::Other(format!("reading {key}: {OVER_CAP}")),
                false => S3Error::Connection(format!("reading {key}: {e}")),
            })?;
        match range {
            Some(asked) => in_range(key, asked, answered_range.as_deref(), body),
            None => Ok(body),
        }
    }

    /// Send an SDK request under the shared retry policy, with its errors
    /// mapped to ours. `send` builds and sends the request again per attempt,
    /// on the client for the bucket's region (which a redirect may change).
    pub async fn send_retried<T, E, F, Fut>(&self, bucket: &str, mut send: F) -> Result<T, S3Error>
    where
        F: FnMut(aws_sdk_s3::Client) -> Fut,
        Fut: std::future::Future<Output = Result<T, SdkError<E, HttpResponse>>>,
        E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    {
        self.retry
            .run(&self.retries, || {
                let (sdk, region) = self.sdk_for(bucket);
                let sent = send(sdk);
                async move {
                    sent.await.map_err(|e| {
                        self.correction(&e, bucket, &region)
                            .unwrap_or_else(|| sdk_error(e, bucket))
                    })
                }
            })
            .await
    }

    /// The SDK client that signs for `bucket`'s region, and that region.
    pub fn sdk_for(&self, bucket: &str) -> (aws_sdk_s3::Client, Arc<str>) {
        let region = self.learnt.regions.of(bucket);
        if *region == *self.endpoint.region {
            return (self.sdk.clone(), region);
        }
        let mut clients = self.sdk_by_region.lock().unwrap();
        let client = clients.entry(region.clone()).or_insert_with(|| {
            let conf = self
                .sdk
                .config()
                .to_builder()
                .region(Region::new(region.to_string()));
            aws_sdk_s3::Client::from_conf(conf.build())
        });
        (client.clone(), region)
    }

    /// A redirect to the bucket's region or a refusal for clock skew in an
    /// SDK answer, learnt (see [`Learnt::correction`]).
    pub fn correction<E>(
        &self,
        err: &SdkError<E, HttpResponse>,
        bucket: &str,
        signed_for: &str,
    ) -> Option<S3Error> {
        let raw = err.raw_response()?;
        let status = raw.status().as_u16();
        let body = raw.body().bytes().map(String::from_utf8_lossy);
        let code = body.as_deref().and_then(|xml| element(xml, "Code"));
        let region_in_body = body.as_deref().and_then(|xml| element(xml, "Region"));
        let header = |name: &str| raw.headers().get(name);
        self.learnt
            .correction(status, header, code, region_in_body, bucket, signed_for, None)
    }

    /// Check that the bucket exists and that we may list it: turns a missing
    /// bucket or bad credentials into one clear error before any work starts.
    pub async fn check_bucket(&self, bucket: &str) -> Result<(), S3Error> {
        let req = ListRequest {
            max_keys: 1,
            ..ListRequest::default()
        };
        self.list_page(bucket, &req).await.map(|_| ())
    }
}

/// The region to sign for: `flag` (`--region`) when given, else what the
/// AWS SDKs would use (AWS_REGION, AWS_DEFAULT_REGION, the profile's region,
/// instance metadata, asked over `endpoint`'s HTTP stack), else us-east-1.
pub async fn resolve_region(flag: Option<String>, endpoint: &Endpoint) -> Result<String, S3Error> {
    use aws_config::meta::region::RegionProviderChain;
    if let Some(region) = flag.filter(|r| !r.is_empty()) {
        return Ok(region);
    }
    let config = aws_config::provider_config::ProviderConfig::without_region()
        .with_http_client(SdkHttpClient::new(endpoint)?);
    let chain =
        RegionProviderChain::first_try(aws_config::environment::EnvironmentVariableRegionProvider::new())
            .or_else(
                aws_config::profile::ProfileFileRegionProvider::builder()
                    .configure(&config)
                    .build(),
            )
            .or_else(
                aws_config::imds::region::ImdsRegionProvider::builder()
                    .configure(&config)
                    .build(),
            );
    Ok(chain
        .region()
        .await
        .map(|r| r.to_string())
        .unwrap_or_else(|| "us-east-1".to_string()))
}

/// The HTTP client the SDK uses: the same stack as the fast HEAD path.
fn sdk_http_client(
    endpoint: &Endpoint,
) -> Result<aws_smithy_runtime_api::client::http::SharedHttpClient, S3Error> {
    Ok(aws_smithy_runtime_api::client::http::SharedHttpClient::new(
        SdkHttpClient::new(endpoint)?,
    ))
}

/// Turn an SDK error into ours, keeping the HTTP status and S3 error code.
pub fn sdk_error<E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static>(
    err: SdkError<E, HttpResponse>,
    bucket: &str,
) -> S3Error {
    if let Some(refused) = super::error::refusal_in(&err) {
        return S3Error::NotAllowed(refused.0.clone());
    }
    if over_cap(&err) {
        return S3Error::Other(OVER_CAP.into());
    }
    let text = DisplayErrorContext(&err).to_string();
    if matches!(
        err,
        SdkError::DispatchFailure(_) | SdkError::ConstructionFailure(_)
    ) && text.contains("credentials")
    {
        return S3Error::Credentials(no_credentials_message(&text));
    }
    match &err {
        SdkError::ServiceError(se) => {
            let status = se.raw().status().as_u16();
            let code = se.err().code().map(str::to_string);
            let headers = se.raw().headers();
            let mut mapped = S3Error::from_status(status, code.as_deref(), bucket)
                .with_retry_after(retry_after(|name| headers.get(name)));
            if code.is_none() {
                // No S3 error code: the body was not an S3 error document,
                // and is never quoted (see `list::not_s3`).
                if let S3Error::Client { detail, .. } | S3Error::Server { detail, .. } = &mut mapped {
                    *detail = format!("HTTP {status} with an answer that is not an S3 error document");
                }
            }
            if let (
                S3Error::Client { detail, .. }
                | S3Error::Server { detail, .. }
                | S3Error::ExpiredToken { detail },
                Some(m),
            ) = (&mut mapped, se.err().message())
            {
                detail.push_str(": ");
                detail.push_str(m);
            }
            mapped
        }
        SdkError::TimeoutError(_) => S3Error::Timeout(Duration::from_secs(120)),
        SdkError::DispatchFailure(d) if d.is_timeout() => S3Error::Timeout(Duration::from_secs(10)),
        SdkError::DispatchFailure(_) | SdkError::ResponseError(_) => S3Error::Connection(text),
        _ => S3Error::Other(text),
    }
}

/// The credential chain's own error is a page of nested debug output; the
/// user needs one line saying what to set.
fn no_credentials_message(chain_error: &str) -> String {
    let first = chain_error
        .split([' ', '\n'])
        .take(12)
        .collect::<Vec<_>>()
        .join(" ");
    // A BucketScan's pods without a ServiceAccount of their own get
    // instance metadata turned off (the node's role is every tenant's).
    let metadata_off =
        std::env::var("AWS_EC2_METADATA_DISABLED").is_ok_and(|v| v.eq_ignore_ascii_case("true"));
    let imds = if metadata_off {
        "; instance metadata is off (AWS_EC2_METADATA_DISABLED=true)"
    } else {
        ""
    };
    format!(
        "none found; set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE, \
         or a web identity token{imds} ({first} ...)"
    )
}

/// An answer cut at the endpoint's `max_answer_bytes`.
const OVER_CAP: &str =
    "the store's answer is longer than any answer may be here (the operator reads at most \
                        8 MiB of one): the endpoint is not an S3 store, or misbehaves";

/// Whether `e`'s chain holds an answer cut at the endpoint's
/// `max_answer_bytes` (`transport`): an error of what was sent, not of the
/// store being down, so never retried.
fn over_cap(e: &(dyn std::error::Error + 'static)) -> bool {
    super::error::found_in::<http_body_util::LengthLimitError>(e).is_some()
}

/// The first and last byte of a range `bytes=A-B`.
fn range_bounds(range: &str) -> Option<(usize, usize)> {
    let (a, b) = range.strip_prefix("bytes=")?.split_once('-')?;
    Some((a.parse().ok()?, b.parse().ok()?))
}

/// An answer's body, of at most `limit` bytes (the rest is not read).
async fn read_at_most(
    mut body: aws_sdk_s3::primitives::ByteStream,
    limit: Option<usize>,
) -> Result<bytes::Bytes, aws_sdk_s3::primitives::ByteStreamError> {
    let Some(limit) = limit else {
        // Bytes, not a Vec: a baseline's 8 MiB chunks were copied once more here.
        return Ok(body.collect().await?.into_bytes());
    };
    let mut chunks: Vec<bytes::Bytes> = Vec::new();
    let mut have = 0usize;
    while have < limit {
        let Some(chunk) = body.try_next().await? else {
            break;
        };
        let chunk = chunk.slice(..chunk.len().min(limit - have));
        have += chunk.len();
        chunks.push(chunk);
    }
    // One chunk (the usual answer of a small range) is not copied.
    Ok(match chunks.len() {
        1 => chunks.pop().unwrap_or_default(),
        _ => chunks.concat().into(),
    })
}

/// The bytes `asked` (`bytes=A-B`) of `key` from a GET's answer. A store
/// that ignores Range answers 200 with the whole object and no
/// Content-Range: the range is cut from it here, or a merge that reads the
/// tail of a part would write the whole part again (records twice). A
/// Content-Range that starts elsewhere is refused.
fn in_range(
    key: &str,
    asked: &str,
    answered: Option<&str>,
    body: bytes::Bytes,
) -> Result<bytes::Bytes, S3Error> {
    let Some((start, end)) = range_bounds(asked) else {
        return Ok(body);
    };
    match answered {
        None => Ok(body.slice(start.min(body.len())..(end + 1).min(body.len()))),
        Some(cr) => {
            let from = cr
                .trim()
                .strip_prefix("bytes ")
                .and_then(|r| r.split_once('-'))
                .and_then(|(a, _)| a.parse::<usize>().ok());
            if from == Some(start) {
                // No more than asked for, whatever the store sent.
                Ok(body.slice(..body.len().min(end.saturating_sub(start).saturating_add(1))))
            } else {
                Err(S3Error::Other(format!(
                    "GET {key} asked for {asked} and the store answered Content-Range {cr:?}"
                )))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::in_range;
    use bytes::Bytes;

    #[test]
    fn a_store_that_ignores_range_has_the_range_cut_from_the_whole_object() {
        let whole = Bytes::from_static(b"0123456789");
        assert_eq!(
            &in_range("k", "bytes=3-5", None, whole.clone()).unwrap()[..],
            b"345"
        );
        // Past the object's end: what there is, as a 206 would give.
        assert_eq!(
            &in_range("k", "bytes=8-20", None, whole.clone()).unwrap()[..],
            b"89"
        );
        assert!(in_range("k", "bytes=12-20", None, whole).unwrap().is_empty());
    }

    #[test]
    fn a_partial_answer_is_taken_as_it_is_and_one_from_elsewhere_refused() {
        let part = Bytes::from_static(b"345");
        let got = in_range("k", "bytes=3-5", Some("bytes 3-5/10"), part.clone()).unwrap();
        assert_eq!(&got[..], b"345");
        let err = in_range("k", "bytes=3-5", Some("bytes 0-2/10"), part).unwrap_err();
        assert!(err.to_string().contains("Content-Range"), "{err}");
    }
}
