//! Signed requests: every bodiless request the fast paths send (HEAD, and
//! the GET of a LIST) is signed here with SigV4 ([`super::sign`]) and sent
//! over the pooled hyper client of [`super::transport`]. The SDK spends about
//! 190 µs of CPU per HeadObject, a signed hyper request about 40 µs (see
//! docs/head-path.md); with millions of HEADs per scan that is the difference
//! between CPU-bound and store-bound. `head` and `list` add the two requests.
//!
//! May import: the bottom of `s3` (types, error) and `sign`, `transport`,
//! `connections`.

use super::clock::Clock;
use super::connections::Connections;
use super::error::{connection_failed, S3Error};
use super::regions::{valid_region, BucketRegions};
use super::sign::{amz_date, Signer, EMPTY_SHA256};
use super::transport::{self, HttpsConnector};
use super::types::Endpoint;
use aws_credential_types::provider::SharedCredentialsProvider;
use bytes::Bytes;
use http::Request;
use http_body_util::Empty;
use hyper_util::client::legacy::Client;
use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

type HttpsClient = Client<HttpsConnector, Empty<Bytes>>;

/// A redirect's path and query as SigV4 signs them and S3 expects them: the
/// path encoded once as keys are (`/` kept), the query's pairs encoded as
/// RFC 3986 asks and sorted. A store's `Location` may encode otherwise
/// (`%7E` for `~`, a key without `=`, pairs in another order); signed as
/// written, the request would be refused as badly signed.
fn canonical_target(path: &str, query: &str) -> String {
    use super::codec::QUERY_ENCODE;
    use percent_encoding::{percent_decode_str, utf8_percent_encode};
    let decode = |s: &str| percent_decode_str(s).decode_utf8_lossy().into_owned();
    let path = super::codec::encode_key(&decode(path)).into_owned();
    let mut pairs: Vec<(String, String)> = query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            let encode = |s: &str| utf8_percent_encode(&decode(s), QUERY_ENCODE).to_string();
            (encode(k), encode(v))
        })
        .collect();
    pairs.sort();
    let query: Vec<String> = pairs.into_iter().map(|(k, v)| format!("{k}={v}")).collect();
    match query.is_empty() {
        true => path,
        false => format!("{path}?{}", query.join("&")),
    }
}

/// Where one request goes.
#[derive(Clone, Copy)]
struct Destination<'a> {
    scheme: &'a str,
    host: &'a str,
    path: &'a str,
    query: &'a str,
}

/// Signs and sends the fast paths' requests to one endpoint.
pub struct SignedClient {
    client: HttpsClient,
    /// HEADs only: a HEAD answer has no body, so its connection is free
    /// again as soon as the head is read.
    connections: Connections,
    scheme: String,
    authority: String,
    path_style: bool,
    /// No endpoint URL: AWS, whose host names carry the region.
    aws_regional: bool,
    signer: Signer,
    learnt: Learnt,
    timeout: Duration,
    /// HEADs ask for the object's checksum (`x-amz-checksum-mode: ENABLED`).
    checksum_mode: bool,
    /// Bytes a listing's answer may have: [`MAX_LISTING_BYTES`], or the
    /// endpoint's `max_answer_bytes` when lower.
    max_listing: usize,
    /// Turns to read a listing's answer, for a client whose endpoint caps
    /// answers (the operator's, one client per scan it plans): each answer
    /// may be as long as the cap (and is copied once as it is joined), and
    /// planning sends up to 32 LISTs at once, so a tenant's endless store
    /// would otherwise hold 32 capped answers per scan. Per client, so one
    /// tenant's slow answers never hold another's turns. A real page is
    /// read in milliseconds.
    listing_turns: Option<Arc<tokio::sync::Semaphore>>,
}

/// Listing answers one client whose endpoint caps answers reads at once.
pub const LISTINGS_READ_AT_ONCE: usize = 2;

/// Bytes a listing's answer may have for a client whose endpoint caps
/// answers (the operator's): the longest page of ListObjectsV2 (1000 keys
/// of 1024 bytes, URL-encoded at 3 bytes a byte, with their ETags, sizes,
/// dates and classes; no metadata, which the operator never lists) is
/// about 3.4 MB.
pub const CAPPED_LISTING_BYTES: usize = 4 << 20;

/// Bytes a LIST answer may have. A page of 1000 keys of 1024 bytes each,
/// URL-encoded (3 bytes a byte at worst) with their ETags, sizes, dates and
/// owners is under 4 MiB; a longer answer is no page of S3's, and reading it
/// on would only fill memory.
pub const MAX_LISTING_BYTES: usize = 16 << 20;

/// Where a bucket lives and what time it is, shared by every client of one
/// endpoint so what one request learns holds for all.
#[derive(Clone, Debug)]
pub struct Learnt {
    pub regions: Arc<BucketRegions>,
    pub clock: Arc<Clock>,
}

impl Learnt {
    pub fn new(default_region: &str) -> Learnt {
        Learnt {
            regions: Arc::new(BucketRegions::new(default_region)),
            clock: Arc::new(Clock::default()),
        }
    }

    /// A refusal that names the bucket's region (other than the one the
    /// request was signed for) or shows a skewed clock: learn it and return
    /// the error that makes the caller send the request again. `header` reads
    /// the answer's headers; `code` is the S3 error code of its document and
    /// `region_in_body` the document's `<Region>`, when it had them.
    /// `signed_at`: when the refused request was signed, if known.
    ///
    /// A region is learnt only from a refusal whose S3 error code says the
    /// request went to the wrong region ([`REGION_CODES`]): a header alone,
    /// from one node or a proxy, is not enough (a bodiless HEAD answer is
    /// confirmed with HeadBucket instead, see `SignedClient::send`). A region
    /// already learnt is a retry at once: the request was signed before it
    /// was learnt.
    #[allow(clippy::too_many_arguments)]
    pub fn correction<'a>(
        &self,
        status: u16,
        header: impl Fn(&str) -> Option<&'a str>,
        code: Option<&str>,
        region_in_body: Option<&str>,
        bucket: &str,
        signed_for: &str,
        signed_at: Option<std::time::SystemTime>,
    ) -> Option<S3Error> {
        // Not 403: AWS names the region on an access denial too, which no
        // other region would grant.
        if matches!(status, 301 | 307 | 400) {
            let named = header("x-amz-bucket-region")
                .or(region_in_body)
                .and_then(valid_region);
            if let Some(region) = named.filter(|r| *r != signed_for) {
                let known = *self.regions.of(bucket) == *region;
                let told = code.is_some_and(|c| REGION_CODES.contains(&c));
                if known || told {
                    self.regions.learn(bucket, region);
                    return Some(S3Error::WrongRegion {
                        bucket: bucket.to_string(),
                        region: region.to_string(),
                    });
                }
            }
        }
        if status == 403 {
            let offset_secs = self.clock.correct_from(header("date")?, signed_at)?;
            return Some(S3Error::ClockSkew { offset_secs });
        }
        None
    }
}

/// S3 error codes that say a request went to the wrong region.
pub const REGION_CODES: [&str; 4] = [
    "PermanentRedirect",
    "TemporaryRedirect",
    "AuthorizationHeaderMalformed",
    "IllegalLocationConstraintException",
];

impl SignedClient {
    pub fn new(
        endpoint: &Endpoint,
        credentials: SharedCredentialsProvider,
        learnt: &Learnt,
    ) -> Result<SignedClient, S3Error> {
        endpoint.checked_region()?;
        let base: http::Uri = endpoint
            .base_url()
            .parse()
            .map_err(|e| S3Error::Config(format!("endpoint {:?} is not a URL: {e}", endpoint.base_url())))?;
        let scheme = base.scheme_str().unwrap_or("https").to_string();
        let authority = base
            .authority()
            .ok_or_else(|| S3Error::Config(format!("endpoint {:?} has no host", endpoint.base_url())))?
            .to_string();
        let connector = transport::connector(endpoint)?;
        let client = transport::pooled(endpoint, connector.clone());
        let connections = Connections::new(connector, &scheme, endpoint.pool_size.max(8));
        Ok(SignedClient {
            client,
            connections,
            scheme,
            authority,
            path_style: endpoint.path_style,
            aws_regional: endpoint.url.is_none(),
            signer: Signer::new(credentials),
            learnt: learnt.clone(),
            timeout: Duration::from_secs(30),
            checksum_mode: false,
            max_listing: endpoint
                .max_answer_bytes
                .map_or(MAX_LISTING_BYTES, |m| m.min(CAPPED_LISTING_BYTES)),
            listing_turns: endpoint
                .max_answer_bytes
                .map(|_| Arc::new(tokio::sync::Semaphore::new(LISTINGS_READ_AT_ONCE))),
        })
    }

    /// HEADs in checksum mode: answers carry `x-amz-checksum-*` (one more
    /// signed header per HEAD; nothing else changes).
    pub fn with_checksum_mode(mut self, on: bool) -> SignedClient {
        self.checksum_mode = on;
        self
    }

    /// Sign and send one bodiless request for `encoded_key` in `bucket` (the
    /// bucket itself when the key is empty) with a canonical `query`, for the
    /// bucket's region (returned with the answer). A 307 is followed once
    /// (see [`SignedClient::redirect`]). A redirect to another region or a
    /// refusal for clock skew is learnt and returned as the error that makes
    /// the caller's retry loop send the request again at once.
    pub(crate) async fn send(
        &self,
        method: &str,
        bucket: &str,
        encoded_key: &str,
        query: &str,
    ) -> Result<(http::Response<hyper::body::Incoming>, Arc<str>), S3Error> {
        let region = self.learnt.regions.of(bucket);
        let (host, path) = self.address(bucket, encoded_key, &region)?;
        let to = Destination {
            scheme: &self.scheme,
            host: &host,
            path: &path,
            query,
        };
        let (mut resp, mut signed_at) = self.sign_and_send(method, &to, &region).await?;
        if let Some((scheme, host, path_and_query)) = self.redirect(&resp) {
            let (path, query) = path_and_query.split_once('?').unwrap_or((&path_and_query, ""));
            let to = Destination {
                scheme: &scheme,
                host: &host,
                path,
                query,
            };
            // Boxed, as every rare path of a HEAD (engine's `head_object`).
            (resp, signed_at) = Box::pin(self.sign_and_send(method, &to, &region)).await?;
        }
        let status = resp.status().as_u16();
        if matches!(status, 301 | 307 | 400 | 403) {
            let header = |name: &str| resp.headers().get(name)?.to_str().ok();
            if let Some(e) =
                self.learnt
                    .correction(status, header, None, None, bucket, &region, Some(signed_at))
            {
                return Err(e);
            }
            if method == "HEAD" {
                if let Some(e) = Box::pin(self.confirmed_region(status, header, bucket, &region)).await {
                    return Err(e);
                }
            }
        }
        Ok((resp, region))
    }

    /// A HEAD answer has no body, so no S3 error code says a region it
    /// names is the bucket's: a single node may name a wrong one. HeadBucket,
    /// the call S3 documents for a bucket's region, confirms it before it is
    /// learnt; unconfirmed, the answer stands as it is.
    async fn confirmed_region<'a>(
        &self,
        status: u16,
        header: impl Fn(&str) -> Option<&'a str>,
        bucket: &str,
        signed_for: &str,
    ) -> Option<S3Error> {
        if !matches!(status, 301 | 307 | 400) {
            return None;
        }
        let named = header("x-amz-bucket-region").and_then(valid_region)?;
        if named == signed_for {
            return None;
        }
        let (host, path) = self.address(bucket, "", signed_for).ok()?;
        let to = Destination {
            scheme: &self.scheme,
            host: &host,
            path: &path,
            query: "",
        };
        let answer = match self.sign_and_send("HEAD", &to, signed_for).await {
            Ok((answer, _)) => answer,
            // Unconfirmed for now, not refuted: the HEAD is tried again
            // rather than its 400 taken as the object's answer.
            Err(e) if e.is_retryable() => return Some(e),
            Err(_) => return None,
        };
        let home = answer.headers().get("x-amz-bucket-region")?.to_str().ok();
        if home.and_then(valid_region) != Some(named) {
            tracing::warn!(
                bucket,
                named,
                home,
                "a HEAD answer named a region HeadBucket does not confirm: not learnt"
            );
            return None;
        }
        self.learnt.regions.learn(bucket, named);
        Some(S3Error::WrongRegion {
            bucket: bucket.to_string(),
            region: named.to_string(),
        })
    }

    /// Where a 307 Temporary Redirect sends the request: its `Location`,
    /// when that is this endpoint's host (any port) or an AWS S3 host; a
    /// redirect elsewhere is not followed (signed requests stay on the
    /// store the user named). Returns scheme, host and path with query.
    fn redirect(&self, resp: &http::Response<hyper::body::Incoming>) -> Option<(String, String, String)> {
        if resp.status() != http::StatusCode::TEMPORARY_REDIRECT {
            return None;
        }
        let location: http::Uri = resp
            .headers()
            .get(http::header::LOCATION)?
            .to_str()
            .ok()?
            .parse()
            .ok()?;
        let scheme = location.scheme_str()?.to_string();
        let authority = location.authority()?;
        let ours = self
            .authority
            .rsplit_once(':')
            .map_or(self.authority.as_str(), |(h, _)| h);
        let host = authority.host();
        let allowed = host == ours
            || host.ends_with(&format!(".{ours}"))
            || (self.aws_regional && host.ends_with(".amazonaws.com") && scheme == "https");
        if !allowed || (scheme == "http" && self.scheme == "https") {
            tracing::warn!(location = %location, "a 307 to another host is not followed");
            return None;
        }
        let target = location.path_and_query()?;
        let path_and_query = canonical_target(target.path(), target.query().unwrap_or_default());
        Some((scheme, authority.as_str().to_string(), path_and_query))
    }

    /// Sign one request for `region` and send it; returns the answer and
    /// when the request was signed.
    async fn sign_and_send(
        &self,
        method: &str,
        to: &Destination<'_>,
        region: &str,
    ) -> Result<(http::Response<hyper::body::Incoming>, std::time::SystemTime), S3Error> {
        let Destination {
            scheme,
            host,
            path,
            query,
        } = *to;
        let now = self.learnt.clock.now();
        let amz_date = amz_date(now);
        let state = self.signer.state(now, &amz_date[..8], region).await?;
        let checksum_mode = self.checksum_mode && method == "HEAD";
        let authorization = state.authorization(method, host, path, query, &amz_date, checksum_mode);
        let sep = if query.is_empty() { "" } else { "?" };
        // HEADs go on the client's own connections (`connections`, one
        // scheme), which take the URI in origin form; the pooled client
        // wants it absolute.
        let own = method == "HEAD" && scheme == self.scheme;
        let mut uri = String::with_capacity(scheme.len() + 4 + host.len() + path.len() + query.len());
        if !own {
            for part in [scheme, "://", host] {
                uri.push_str(part);
            }
        }
        for part in [path, sep, query] {
            uri.push_str(part);
        }
        // Built in place rather than through `Request::builder`, which
        // moves its parts on every call; header values from owned bytes are
        // not copied again.
        let bad = |e: &dyn std::fmt::Display| S3Error::Other(format!("cannot build {method} request: {e}"));
        let value =
            |text: String| http::HeaderValue::from_maybe_shared(Bytes::from(text)).map_err(|e| bad(&e));
        let mut req = Request::new(Empty::new());
        *req.method_mut() = http::Method::from_bytes(method.as_bytes()).map_err(|e| bad(&e))?;
        *req.uri_mut() = http::Uri::try_from(uri).map_err(|e| bad(&e))?;
        let headers = req.headers_mut();
        headers.reserve(5);
        headers.insert(
            http::header::HOST,
            http::HeaderValue::from_str(host).map_err(|e| bad(&e))?,
        );
        headers.insert("x-amz-date", value(amz_date)?);
        headers.insert(
            "x-amz-content-sha256",
            http::HeaderValue::from_static(EMPTY_SHA256),
        );
        headers.insert(http::header::AUTHORIZATION, value(authorization)?);
        if checksum_mode {
            headers.insert("x-amz-checksum-mode", http::HeaderValue::from_static("ENABLED"));
        }
        if let Some(token) = state.credentials.session_token() {
            headers.insert(
                "x-amz-security-token",
                http::HeaderValue::from_str(token).map_err(|e| bad(&e))?,
            );
        }
        let sent = async {
            if own {
                return self.connections.send(host, req).await;
            }
            self.client
                .request(req)
                .await
                .map_err(|e| connection_failed(scheme, host, &e))
        };
        let resp = tokio::time::timeout(self.timeout, sent)
            .await
            .map_err(|_| S3Error::Timeout(self.timeout))??;
        Ok((resp, now))
    }

    /// What this client learnt, for a caller that reads a refusal's body.
    pub(crate) fn learnt(&self) -> &Learnt {
        &self.learnt
    }

    /// Host and path of a request. Virtual-hosted style puts the bucket in
    /// the host name; over HTTPS a bucket with dots would then not match the
    /// certificate's `*.` wildcard, so such buckets go path style, as the AWS
    /// SDKs address them.
    /// On AWS (no endpoint URL) the host names the bucket's region.
    ///
    /// The bucket and the region are refused unless they are made of the
    /// characters of a host name: an `@`, `/`, `?`, `#` or `:` in them would
    /// move the request to another server (`x@10.0.3.7:8443/`).
    fn address(
        &self,
        bucket: &str,
        encoded_key: &str,
        region: &str,
    ) -> Result<(Cow<'_, str>, String), S3Error> {
        let authority: Cow<'_, str> = if self.aws_regional {
            let region = valid_region(region)
                .filter(|r| *r == region)
                .ok_or_else(|| S3Error::Config(format!("region {region:?} is not a region name")))?;
            Cow::Owned(format!("s3.{region}.amazonaws.com"))
        } else {
            Cow::Borrowed(&self.authority)
        };
        if !host_safe_bucket(bucket) {
            return Err(S3Error::Config(format!(
                "bucket {bucket:?} is not a bucket name: use letters, digits, dots, dashes and underscores"
            )));
        }
        let dotted_over_tls = bucket.contains('.') && self.scheme == "https";
        Ok(
            match (self.path_style || dotted_over_tls, encoded_key.is_empty()) {
                (true, true) => (authority, format!("/{bucket}")),
                (true, false) => (authority, format!("/{bucket}/{encoded_key}")),
                (false, _) => (
                    Cow::Owned(format!("{bucket}.{authority}")),
                    format!("/{encoded_key}"),
                ),
            },
        )
    }

    pub(crate) fn timeout(&self) -> Duration {
        self.timeout
    }

    pub(crate) fn max_listing(&self) -> usize {
        self.max_listing
    }

    /// A turn to read a listing's answer: always for a client whose endpoint
    /// does not cap answers, one of [`LISTINGS_READ_AT_ONCE`] otherwise.
    pub(crate) async fn listing_turn(&self) -> Option<tokio::sync::OwnedSemaphorePermit> {
        self.listing_turns.clone()?.acquire_owned().await.ok()
    }
}

/// A bucket name that cannot leave the host name or the first path segment
/// it is put in. Stricter names are the store's to refuse (older AWS
/// buckets and other stores allow capitals and underscores).
fn host_safe_bucket(bucket: &str) -> bool {
    !bucket.is_empty()
        && bucket.len() <= 255
        && !bucket.starts_with('.')
        && bucket
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client(url: &str, path_style: bool) -> SignedClient {
        client_for(Some(url), "us-east-1", path_style).unwrap()
    }

    fn aws_client(region: &str) -> Result<SignedClient, S3Error> {
        client_for(None, region, false)
    }

    fn client_for(url: Option<&str>, region: &str, path_style: bool) -> Result<SignedClient, S3Error> {
        let endpoint = Endpoint {
            url: url.map(String::from),
            region: region.into(),
            path_style,
            ca_pem: None,
            insecure: false,
            pool_size: 1,
            allowlist: None,
            max_answer_bytes: None,
        };
        let credentials = aws_credential_types::Credentials::new("A", "S", None, None, "test");
        SignedClient::new(
            &endpoint,
            SharedCredentialsProvider::new(credentials),
            &Learnt::new(region),
        )
    }

    #[test]
    fn a_region_or_bucket_never_moves_a_request_to_another_host() {
        // Review F4: `s3.{region}.amazonaws.com` with this region was
        // https://10.0.3.7:8443/admin/api.
        for region in [
            "x@10.0.3.7:8443/admin/api?",
            "a:1",
            "a?b",
            "a#b",
            "a/b",
            "EU",
            "",
            " us-east-1",
        ] {
            let refusal = aws_client(region).err().expect(region).to_string();
            assert!(refusal.contains("is not a region name"), "{region}: {refusal}");
        }
        let aws = aws_client("eu-west-1").unwrap();
        let (host, path) = aws.address("photos", "k", "eu-west-1").unwrap();
        assert_eq!(format!("{host}{path}"), "photos.s3.eu-west-1.amazonaws.com/k");
        // A region that reached the client some other way is refused too.
        assert!(aws.address("photos", "k", "x@10.0.3.7:8443/").is_err());
        for bucket in ["a@10.0.3.7:8443", "a/b", "a?b", "a#b", "a:1", "", ".."] {
            assert!(aws.address(bucket, "k", "eu-west-1").is_err(), "{bucket:?}");
        }
    }

    #[test]
    fn buckets_with_dots_over_https_are_addressed_path_style() {
        let https = client("https://s3.example.com", false);
        let address = |c: &SignedClient, bucket: &str, key: &str| {
            let (host, path) = c.address(bucket, key, "us-east-1").unwrap();
            format!("{host}{path}")
        };
        assert_eq!(address(&https, "photos", "k/1"), "photos.s3.example.com/k/1");
        assert_eq!(
            address(&https, "photos.2026", "k/1"),
            "s3.example.com/photos.2026/k/1"
        );
        assert_eq!(address(&https, "photos.2026", ""), "s3.example.com/photos.2026");
        // Plain HTTP has no certificate to match: virtual-hosted as asked.
        let http = client("http://s3.example.com", false);
        assert_eq!(address(&http, "photos.2026", "k"), "photos.2026.s3.example.com/k");
        let path_style = client("https://s3.example.com", true);
        assert_eq!(address(&path_style, "photos", "k"), "s3.example.com/photos/k");
    }

    #[test]
    fn a_refusal_naming_another_region_is_learnt_once() {
        let learnt = Learnt::new("us-east-1");
        let eu = |name: &str| (name == "x-amz-bucket-region").then_some("eu-west-1");
        let redirect = Some("PermanentRedirect");
        let e = learnt
            .correction(301, eu, redirect, None, "b", "us-east-1", None)
            .unwrap();
        assert!(matches!(&e, S3Error::WrongRegion { region, .. } if region == "eu-west-1"));
        assert!(e.is_retryable() && e.is_corrected());
        assert_eq!(&*learnt.regions.of("b"), "eu-west-1");
        // The server names the region the request was signed for: a real refusal.
        assert!(learnt
            .correction(301, eu, redirect, None, "b", "eu-west-1", None)
            .is_none());
        // A request signed before the region was learnt: sent again, with
        // or without a code (a bodiless HEAD answer).
        assert!(learnt
            .correction(301, eu, None, None, "b", "us-east-1", None)
            .is_some());
        // The region may come in the document only (400 AuthorizationHeaderMalformed).
        let none = |_: &str| None;
        let malformed = Some("AuthorizationHeaderMalformed");
        let e = learnt
            .correction(400, none, malformed, Some("ap-south-1"), "c", "us-east-1", None)
            .unwrap();
        assert!(matches!(e, S3Error::WrongRegion { .. }));
        assert_eq!(&*learnt.regions.of("c"), "ap-south-1");
        // Success or other statuses teach nothing; a garbled name is ignored.
        assert!(learnt
            .correction(200, eu, redirect, None, "d", "us-east-1", None)
            .is_none());
        let garbled = |_: &str| Some("EU WEST");
        assert!(learnt
            .correction(301, garbled, redirect, None, "d", "us-east-1", None)
            .is_none());
        assert_eq!(&*learnt.regions.of("d"), "us-east-1");
    }

    #[test]
    fn a_redirect_target_is_signed_in_canonical_form() {
        assert_eq!(
            canonical_target("/b/a%7Eb%20c", "prefix=x%2Fy&list-type=2&encoding-type"),
            "/b/a~b%20c?encoding-type=&list-type=2&prefix=x%2Fy"
        );
        assert_eq!(canonical_target("/b/k", ""), "/b/k");
    }

    /// A header alone does not move a bucket: a 400 for one object (an
    /// SSE-C key missing, say) from a node or proxy that adds another
    /// region's `x-amz-bucket-region`, or a refusal whose code is about
    /// something else, is the answer it is.
    #[test]
    fn a_region_named_without_a_region_code_is_not_learnt() {
        let learnt = Learnt::new("us-east-1");
        let eu = |name: &str| (name == "x-amz-bucket-region").then_some("eu-west-1");
        for code in [None, Some("InvalidRequest"), Some("AccessDenied")] {
            for status in [301, 307, 400] {
                assert!(
                    learnt
                        .correction(status, eu, code, None, "b", "us-east-1", None)
                        .is_none(),
                    "{status} {code:?}"
                );
            }
        }
        assert_eq!(&*learnt.regions.of("b"), "us-east-1");
    }

    #[test]
    fn a_403_dated_hours_away_is_clock_skew_and_corrects_the_clock() {
        let learnt = Learnt::new("us-east-1");
        let later =
            aws_smithy_types::DateTime::from(std::time::SystemTime::now() + Duration::from_secs(7200))
                .fmt(aws_smithy_types::date_time::Format::HttpDate)
                .unwrap();
        let dated = |name: &str| (name == "date").then_some(later.as_str());
        let e = learnt
            .correction(403, dated, None, None, "b", "us-east-1", None)
            .unwrap();
        assert!(matches!(e, S3Error::ClockSkew { .. }) && e.is_corrected());
        // Corrected: the same refusal again is a real one (an ACL, a policy).
        assert!(learnt
            .correction(403, dated, None, None, "b", "us-east-1", None)
            .is_none());
        let now = aws_smithy_types::DateTime::from(std::time::SystemTime::now())
            .fmt(aws_smithy_types::date_time::Format::HttpDate)
            .unwrap();
        let fresh = Learnt::new("us-east-1");
        assert!(fresh
            .correction(
                403,
                |n| (n == "date").then_some(now.as_str()),
                None,
                None,
                "b",
                "us-east-1",
                None
            )
            .is_none());
    }
}
