//! S3 clients for the tests' loopback stubs (no TLS, static credentials):
//! the endpoint's operator-only bounds as the test asks.

use bucketscan_core::s3::{Endpoint, EndpointAllowlist, S3};
use std::sync::Arc;

/// Clients for `url`, with the operator's `allowlist` and
/// `max_answer_bytes` where given.
pub async fn client(
    url: String,
    allowlist: Option<EndpointAllowlist>,
    max_answer_bytes: Option<usize>,
) -> Arc<S3> {
    let endpoint = Endpoint {
        url: Some(url),
        region: "us-east-1".into(),
        path_style: true,
        ca_pem: None,
        insecure: false,
        pool_size: 4,
        allowlist: allowlist.map(Arc::new),
        max_answer_bytes,
    };
    let credentials = aws_credential_types::Credentials::new("id", "secret", None, None, "test");
    S3::connect_with(endpoint, Some(credentials)).await.unwrap()
}
