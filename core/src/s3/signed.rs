//! Signed requests: every bodiless request the fast paths send (HEAD, and
//! the GET of a LIST) is signed here with SigV4 ([`super::sign`]) and sent
//! over the pooled hyper client of [`super::transport`]. The SDK spends about
//! 190 µs of CPU per HeadObject, a signed hyper request about 40 µs (see
//! docs/head-path.md); with millions of HEADs per scan that is the difference
//! between CPU-bound and store-bound. `head` and `list` add the two requests.
//!
//! May import: the bottom of `s3` (types, error) and `sign`, `transport`.

use super::error::{error_chain, S3Error};
use super::sign::{amz_date, Signer, EMPTY_SHA256};
use super::transport::{self, HttpsConnector};
use super::types::Endpoint;
use aws_credential_types::provider::SharedCredentialsProvider;
use bytes::Bytes;
use http::Request;
use http_body_util::Empty;
use hyper_util::client::legacy::Client;
use std::time::{Duration, SystemTime};

type HttpsClient = Client<HttpsConnector, Empty<Bytes>>;

/// Signs and sends the fast paths' requests to one endpoint.
pub struct SignedClient {
    client: HttpsClient,
    scheme: String,
    authority: String,
    path_style: bool,
    signer: Signer,
    region: String,
    timeout: Duration,
}

impl SignedClient {
    pub fn new(endpoint: &Endpoint, credentials: SharedCredentialsProvider) -> Result<SignedClient, S3Error> {
        let base: http::Uri = endpoint
            .base_url()
            .parse()
            .map_err(|e| S3Error::Config(format!("endpoint {:?} is not a URL: {e}", endpoint.base_url())))?;
        let scheme = base.scheme_str().unwrap_or("https").to_string();
        let authority = base
            .authority()
            .ok_or_else(|| S3Error::Config(format!("endpoint {:?} has no host", endpoint.base_url())))?
            .to_string();
        let client = transport::client(endpoint)?;
        Ok(SignedClient {
            client,
            scheme,
            authority,
            path_style: endpoint.path_style,
            signer: Signer::new(credentials),
            region: endpoint.region.clone(),
            timeout: Duration::from_secs(30),
        })
    }

    /// Sign and send one bodiless request for `encoded_key` in `bucket` (the
    /// bucket itself when the key is empty) with a canonical `query`.
    pub(crate) async fn send(
        &self,
        method: &str,
        bucket: &str,
        encoded_key: &str,
        query: &str,
    ) -> Result<http::Response<hyper::body::Incoming>, S3Error> {
        let (host, path) = self.address(bucket, encoded_key);
        let now = SystemTime::now();
        let amz_date = amz_date(now);
        let state = self.signer.state(now, &amz_date[..8], &self.region).await?;
        let authorization = state.authorization(method, &host, &path, query, &amz_date);
        let sep = if query.is_empty() { "" } else { "?" };
        let mut req = Request::builder()
            .method(method)
            .uri(format!("{}://{host}{path}{sep}{query}", self.scheme))
            .header("host", &host)
            .header("x-amz-date", &amz_date)
            .header("x-amz-content-sha256", EMPTY_SHA256)
            .header("authorization", authorization);
        if let Some(token) = state.credentials.session_token() {
            req = req.header("x-amz-security-token", token);
        }
        let req = req
            .body(Empty::new())
            .map_err(|e| S3Error::Other(format!("cannot build {method} request: {e}")))?;
        tokio::time::timeout(self.timeout, self.client.request(req))
            .await
            .map_err(|_| S3Error::Timeout(self.timeout))?
            // The chain of a DNS or TLS failure does not name the host.
            .map_err(|e| S3Error::Connection(format!("{}://{host}: {}", self.scheme, error_chain(&e))))
    }

    /// Host and path of a request. Virtual-hosted style puts the bucket in
    /// the host name; over HTTPS a bucket with dots would then not match the
    /// certificate's `*.` wildcard, so such buckets go path style, as the AWS
    /// SDKs address them.
    fn address(&self, bucket: &str, encoded_key: &str) -> (String, String) {
        let dotted_over_tls = bucket.contains('.') && self.scheme == "https";
        match (self.path_style || dotted_over_tls, encoded_key.is_empty()) {
            (true, true) => (self.authority.clone(), format!("/{bucket}")),
            (true, false) => (self.authority.clone(), format!("/{bucket}/{encoded_key}")),
            (false, _) => (format!("{bucket}.{}", self.authority), format!("/{encoded_key}")),
        }
    }

    pub(crate) fn timeout(&self) -> Duration {
        self.timeout
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client(url: &str, path_style: bool) -> SignedClient {
        let endpoint = Endpoint {
            url: Some(url.into()),
            region: "us-east-1".into(),
            path_style,
            ca_pem: None,
            insecure: false,
            pool_size: 1,
        };
        let credentials = aws_credential_types::Credentials::new("A", "S", None, None, "test");
        SignedClient::new(&endpoint, SharedCredentialsProvider::new(credentials)).unwrap()
    }

    #[test]
    fn buckets_with_dots_over_https_are_addressed_path_style() {
        let https = client("https://s3.example.com", false);
        let address = |c: &SignedClient, bucket: &str, key: &str| {
            let (host, path) = c.address(bucket, key);
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
}
