//! The endpoint allowlist at connect time (`s3::allowlist`, `transport`):
//! a client whose endpoint carries one (the operator's) opens no connection
//! to an address it refuses, whether the endpoint names the address or a
//! host name resolving to it, on the fast path (LIST) and through the AWS
//! SDK (PUT) alike; a client without one (the worker's) is unchanged.

#[path = "support/client.rs"]
mod support;

use bucketscan_core::s3::{Endpoint, EndpointAllowlist, ListRequest, S3Error, S3};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// A server on 127.0.0.1 that counts the connections it accepts and
/// answers each request 503 (so the client retries and counts more).
async fn counting_server() -> (u16, Arc<AtomicUsize>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = Arc::new(AtomicUsize::new(0));
    let counter = seen.clone();
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            counter.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                let _ = conn.read(&mut buf).await;
                let _ = conn
                    .write_all(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
                    .await;
            });
        }
    });
    (port, seen)
}

async fn client(url: String, allowlist: Option<EndpointAllowlist>) -> Arc<S3> {
    support::client(url, allowlist, None).await
}

async fn list(s3: &S3) -> Result<(), S3Error> {
    let req = ListRequest {
        max_keys: 1,
        ..ListRequest::default()
    };
    s3.list_page("b", &req).await.map(|_| ())
}

#[tokio::test]
async fn a_refused_address_is_never_connected_to_by_address_or_by_name() {
    let (port, seen) = counting_server().await;
    for url in [
        format!("http://127.0.0.1:{port}"),
        format!("http://localhost:{port}"),
    ] {
        let s3 = client(url.clone(), Some(EndpointAllowlist::default())).await;
        let listed = list(&s3).await.unwrap_err();
        assert!(matches!(listed, S3Error::NotAllowed(_)), "{url}: {listed:?}");
        assert!(listed.to_string().contains("loopback"), "{listed}");
        assert!(!listed.is_retryable());
        let put = s3
            .put("b", "k", "text/plain", bytes::Bytes::from_static(b"x"))
            .await
            .unwrap_err();
        assert!(matches!(put, S3Error::NotAllowed(_)), "{url}: {put:?}");
    }
    assert_eq!(seen.load(Ordering::SeqCst), 0, "the server was connected to");
}

#[tokio::test]
async fn an_address_the_allowlist_names_is_reached_and_no_list_means_no_check() {
    let (port, seen) = counting_server().await;
    let named = EndpointAllowlist::parse(&["127.0.0.1"]).unwrap();
    let s3 = client(format!("http://localhost:{port}"), Some(named)).await;
    let listed = list(&s3).await.unwrap_err();
    assert!(!matches!(listed, S3Error::NotAllowed(_)), "{listed:?}");
    let after_allowed = seen.load(Ordering::SeqCst);
    assert!(after_allowed > 0);
    // The worker's client (no allowlist) connects as it always did.
    let s3 = client(format!("http://127.0.0.1:{port}"), None).await;
    list(&s3).await.unwrap_err();
    assert!(seen.load(Ordering::SeqCst) > after_allowed);
}

/// Review F4: with no endpoint URL (AWS) the region is part of the host
/// name; `x@127.0.0.1:PORT/` made it `127.0.0.1:PORT`. No client is built
/// for such a region, with or without an allowlist (the CLI has none).
#[tokio::test]
async fn a_region_that_names_another_host_builds_no_client() {
    let (port, seen) = counting_server().await;
    for allowlist in [None, Some(EndpointAllowlist::parse(&["127.0.0.1"]).unwrap())] {
        let endpoint = Endpoint {
            url: None,
            region: format!("x@127.0.0.1:{port}/"),
            path_style: false,
            ca_pem: None,
            insecure: true,
            pool_size: 4,
            allowlist: allowlist.map(Arc::new),
            max_answer_bytes: None,
        };
        let credentials = aws_credential_types::Credentials::new("id", "secret", None, None, "test");
        let refused = S3::connect_with(endpoint, Some(credentials)).await.err().unwrap();
        assert!(matches!(refused, S3Error::Config(_)), "{refused:?}");
        assert!(refused.to_string().contains("is not a region name"), "{refused}");
    }
    assert_eq!(seen.load(Ordering::SeqCst), 0, "the server was connected to");
}
