//! The HEAD path's own keep-alive connections (`core/src/s3/connections.rs`)
//! against a real server: kept and reused, a connection the server closed
//! while idle is never used, and an answer with more headers than hyper's
//! default allows (objects with many metadata entries) is read whole.

mod common;

use bucketscan_core::s3::head::{HeadClient, HeadClientKind};
use common::*;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A TCP proxy to `upstream` that closes a client's connection once it has
/// sent nothing for `idle` (as S3 servers close idle keep-alive connections
/// on their own clock), counting the connections it accepted.
async fn idle_closing_proxy(upstream: String, idle: Duration) -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = accepted.clone();
    tokio::spawn(async move {
        loop {
            let (mut client, _) = listener.accept().await.unwrap();
            count.fetch_add(1, Ordering::SeqCst);
            let upstream = upstream.clone();
            tokio::spawn(async move {
                let mut server = TcpStream::connect(&upstream).await.unwrap();
                let (mut from_client, mut to_client) = client.split();
                let (mut from_server, mut to_server) = server.split();
                let requests = async {
                    let mut buf = vec![0u8; 16 * 1024];
                    loop {
                        match tokio::time::timeout(idle, from_client.read(&mut buf)).await {
                            Ok(Ok(n)) if n > 0 => to_server.write_all(&buf[..n]).await.unwrap(),
                            _ => return, // idle too long, or the client closed
                        }
                    }
                };
                let answers = tokio::io::copy(&mut from_server, &mut to_client);
                tokio::select! {
                    _ = requests => {}
                    _ = answers => {}
                }
                // Dropping both streams closes both connections.
            });
        }
    });
    (url, accepted)
}

fn endpoint_of(url: &str) -> String {
    url.trim_start_matches("http://").to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_are_reused_and_one_the_server_closed_is_not_used() {
    let server = versitygw();
    let bucket = server.bucket("conns").await;
    let seeded: BTreeMap<String, Seeded> = (0..3)
        .map(|i| {
            (
                format!("k{i}"),
                Seeded {
                    size: i,
                    metadata: Default::default(),
                },
            )
        })
        .collect();
    server.seed(&bucket, &seeded).await;
    let (proxy, accepted) =
        idle_closing_proxy(endpoint_of(&server.endpoint), Duration::from_millis(300)).await;
    let through_proxy = Server {
        endpoint: proxy,
        access_key: server.access_key.clone(),
        secret_key: server.secret_key.clone(),
    };
    let s3 = through_proxy.s3().await;
    let head = HeadClient::new(HeadClientKind::Fast, &s3).unwrap();

    // One HEAD after another: one connection, kept alive.
    for _ in 0..10 {
        let info = head.head(&bucket, "k1").await.expect("HEAD").expect("the object");
        assert_eq!(info.size, 1);
    }
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        1,
        "a HEAD after a HEAD reuses the connection"
    );

    // The server closes the idle connection: the next HEAD, one attempt (no
    // retry), goes on a new connection instead of failing on the old one.
    tokio::time::sleep(Duration::from_millis(900)).await;
    let info = head
        .head(&bucket, "k2")
        .await
        .expect("a HEAD after the server closed the idle connection");
    assert_eq!(info.expect("the object").size, 2);
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        2,
        "the closed connection was replaced"
    );
}

/// S3 limits user metadata to 2 KB, names and values together: short names
/// fit hundreds of entries, each its own `x-amz-meta-*` header.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_object_with_hundreds_of_metadata_entries_is_read_whole() {
    let server = versitygw();
    let bucket = server.bucket("manymeta").await;
    let metadata: BTreeMap<String, String> =
        (0..150).map(|i| (format!("m{i:03}"), "v".to_string())).collect();
    let seeded = BTreeMap::from([(
        "many".to_string(),
        Seeded {
            size: 1,
            metadata: metadata.clone(),
        },
    )]);
    server.seed(&bucket, &seeded).await;
    let s3 = server.s3().await;
    for kind in [HeadClientKind::Fast, HeadClientKind::Sdk] {
        let head = HeadClient::new(kind, &s3).unwrap();
        let info = head
            .head(&bucket, "many")
            .await
            .unwrap_or_else(|e| panic!("{kind:?}: HEAD of an object with 150 metadata entries: {e}"))
            .expect("the object");
        assert_eq!(info.metadata, metadata, "{kind:?}");
    }
}
