//! Answers that never end (`s3::transport`, `s3::list`, `S3::get`): a LIST
//! page is read up to `MAX_LISTING_BYTES`, a ranged GET up to its range's
//! end, and with `max_answer_bytes` (the operator's) any answer up to that;
//! then the client stops reading and the call fails (or, for the range,
//! has what it asked for). The store here is a stub on 127.0.0.1, because
//! no real server answers without end: a tenant's endpoint may, and the
//! operator's memory serves every tenant.

#[path = "support/client.rs"]
mod support;

use bucketscan_core::s3::{ListRequest, CAPPED_LISTING_BYTES, MAX_LISTING_BYTES, S3};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Where the stub stops by itself, so that a client without limits fails
/// the test instead of filling the machine's memory.
const STUB_STOPS_AT: u64 = 256 << 20;

/// Slack for what the kernel's socket buffers hold beyond what was read.
const BUFFERED: u64 = 16 << 20;

/// A store that answers any request 200 with a chunked body of `x` bytes
/// (and no Content-Range: a range is ignored, as HTTP allows), until the
/// client hangs up or `STUB_STOPS_AT`; the most bytes one answer sent.
async fn endless_store() -> (String, Arc<AtomicU64>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let most = Arc::new(AtomicU64::new(0));
    let seen = most.clone();
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            let seen = seen.clone();
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buf = [0u8; 4096];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match conn.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let start = b"HTTP/1.1 200 OK\r\ncontent-type: application/xml\r\n\
                              transfer-encoding: chunked\r\n\r\n";
                if conn.write_all(start).await.is_err() {
                    return;
                }
                let mut chunk = b"10000\r\n".to_vec();
                chunk.extend(std::iter::repeat_n(b'x', 0x10000));
                chunk.extend_from_slice(b"\r\n");
                let mut sent = 0u64;
                while sent < STUB_STOPS_AT {
                    if conn.write_all(&chunk).await.is_err() {
                        break;
                    }
                    sent += 0x10000;
                    seen.fetch_max(sent, Ordering::SeqCst);
                }
                let _ = conn.write_all(b"0\r\n\r\n").await;
            });
        }
    });
    (url, most)
}

async fn client(url: String, max_answer_bytes: Option<usize>) -> Arc<S3> {
    support::client(url, None, max_answer_bytes).await
}

#[tokio::test]
async fn a_listing_without_end_is_refused_once_longer_than_any_page() {
    let (url, most) = endless_store().await;
    let s3 = client(url, None).await;
    let req = ListRequest {
        max_keys: 1000,
        ..ListRequest::default()
    };
    let err = s3.list_page("b", &req).await.map(drop).unwrap_err();
    assert!(err.to_string().contains("longer than"), "{err}");
    let sent = most.load(Ordering::SeqCst);
    assert!(
        sent <= MAX_LISTING_BYTES as u64 + BUFFERED,
        "the client read on: {sent} bytes sent"
    );
}

#[tokio::test]
async fn a_ranged_get_reads_no_further_than_its_range_from_a_store_that_ignores_ranges() {
    let (url, most) = endless_store().await;
    let s3 = client(url, None).await;
    let body = s3.get("b", "k", Some("bytes=0-65535")).await.unwrap();
    assert_eq!(body.len(), 65536);
    assert!(body.iter().all(|b| *b == b'x'));
    let sent = most.load(Ordering::SeqCst);
    assert!(sent <= BUFFERED, "the client read on: {sent} bytes sent");
}

#[tokio::test]
async fn with_max_answer_bytes_no_answer_is_read_past_it() {
    let (url, most) = endless_store().await;
    let cap = 1 << 20;
    let s3 = client(url, Some(cap)).await;
    let err = s3.get("b", "k", None).await.unwrap_err();
    assert!(err.to_string().contains("reading k"), "{err}");
    // Not the store down: reading again would read as much again.
    assert!(!err.is_retryable(), "{err:?}");
    assert!(
        most.load(Ordering::SeqCst) <= cap as u64 + BUFFERED,
        "GET read on: {} bytes sent",
        most.load(Ordering::SeqCst)
    );
    // The fast path's listing too, below its own limit.
    let req = ListRequest {
        max_keys: 1000,
        ..ListRequest::default()
    };
    let err = s3.list_page("b", &req).await.map(drop).unwrap_err();
    assert!(
        err.to_string().contains(&format!("longer than {cap} bytes")),
        "{err}"
    );
    // With a larger cap (the operator's 8 MiB), a listing is still held to
    // the longest real page's bound.
    let (url, most) = endless_store().await;
    let s3 = client(url, Some(8 << 20)).await;
    let err = s3.list_page("b", &req).await.map(drop).unwrap_err();
    assert!(
        err.to_string()
            .contains(&format!("longer than {CAPPED_LISTING_BYTES} bytes")),
        "{err}"
    );
    assert!(most.load(Ordering::SeqCst) <= CAPPED_LISTING_BYTES as u64 + BUFFERED);
}
