//! A fault proxy for the queue tests: a TCP proxy in front of the real
//! redis-server that, when armed, forwards the next command holding a given
//! needle, lets Redis run it, and cuts the connection instead of passing the
//! reply on. The client sees its connection die with the step's outcome
//! unknown, and the patient connection sends the step again.

pub mod snapshot;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

#[derive(Default)]
struct Shared {
    /// The needle the next command to cut must contain, while armed.
    armed: Mutex<Option<Vec<u8>>>,
    cuts: AtomicU64,
}

impl Shared {
    /// When `request` is the command to cut: disarms, returns the needle.
    fn trigger(&self, request: &[u8]) -> Option<Vec<u8>> {
        let mut armed = self.armed.lock().unwrap();
        let needle = armed.as_deref()?;
        if request.windows(needle.len()).any(|w| w == needle) {
            armed.take()
        } else {
            None
        }
    }

    fn rearm(&self, needle: Vec<u8>) {
        *self.armed.lock().unwrap() = Some(needle);
    }
}

pub struct ReplyCutter {
    pub url: String,
    shared: Arc<Shared>,
}

impl ReplyCutter {
    /// A proxy to the Redis at `upstream` (`redis://HOST:PORT`).
    pub async fn start(upstream: &str) -> ReplyCutter {
        let target = upstream
            .strip_prefix("redis://")
            .expect("a plain redis:// URL")
            .trim_end_matches('/')
            .to_string();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("redis://{}", listener.local_addr().unwrap());
        let shared = Arc::new(Shared::default());
        let accepting = shared.clone();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let server = TcpStream::connect(&target).await.unwrap();
                tokio::spawn(relay(client, server, accepting.clone()));
            }
        });
        ReplyCutter { url, shared }
    }

    /// Cut the reply of the next command whose bytes contain `needle`
    /// (`FCALL` for a queue step's function, `EXEC` for a transaction).
    pub fn cut_next_reply(&self, needle: &str) {
        self.shared.rearm(needle.as_bytes().to_vec());
    }

    /// Replies cut so far.
    pub fn cuts(&self) -> u64 {
        self.shared.cuts.load(Ordering::SeqCst)
    }
}

/// Pass bytes both ways until either side closes, or until the reply to a
/// triggering command arrives: then drop both connections. The queue sends
/// one command at a time in these tests, so the first bytes back after the
/// trigger are its reply.
async fn relay(client: TcpStream, server: TcpStream, shared: Arc<Shared>) {
    let (mut from_client, mut to_client) = client.into_split();
    let (mut from_server, mut to_server) = server.into_split();
    let (mut up, mut down) = (vec![0u8; 1 << 16], vec![0u8; 1 << 16]);
    let mut cutting: Option<Vec<u8>> = None;
    loop {
        tokio::select! {
            n = from_client.read(&mut up) => {
                let Ok(n @ 1..) = n else { return };
                let request = &up[..n];
                if cutting.is_none() {
                    cutting = shared.trigger(request);
                }
                if to_server.write_all(request).await.is_err() { return }
            }
            n = from_server.read(&mut down) => {
                let Ok(n @ 1..) = n else { return };
                let reply = &down[..n];
                if let Some(needle) = cutting.take() {
                    if reply.starts_with(b"-ERR Function not found") {
                        // The function did not run: the client loads the
                        // library and calls again, and that is the one to cut.
                        shared.rearm(needle);
                    } else {
                        shared.cuts.fetch_add(1, Ordering::SeqCst);
                        return;
                    }
                }
                if to_client.write_all(reply).await.is_err() { return }
            }
        }
    }
}
