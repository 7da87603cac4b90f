//! A Redis connection that rides out a Redis restart or failover: it
//! reconnects (the redis crate's ConnectionManager) and retries a command
//! that failed for a transient reason, with capped backoff, for up to
//! `patience`. Every queue step is safe to send twice (see
//! docs/queue-protocol.md), so a step whose answer was lost may be retried.
//!
//! May import: nothing of the crate.

use redis::aio::{ConnectionLike, ConnectionManager};
use redis::{Cmd, ErrorKind, Pipeline, RedisError, RedisFuture, RetryMethod, Value};
use std::time::{Duration, Instant};

#[derive(Clone)]
pub struct PatientConnection {
    inner: ConnectionManager,
    patience: Duration,
}

impl PatientConnection {
    pub fn new(inner: ConnectionManager, patience: Duration) -> PatientConnection {
        PatientConnection { inner, patience }
    }
}

/// When to try again after a failed command.
pub(crate) struct Backoff {
    deadline: Instant,
    pause: Duration,
}

impl Backoff {
    pub(crate) fn new(patience: Duration) -> Backoff {
        Backoff {
            deadline: Instant::now() + patience,
            pause: Duration::from_millis(100),
        }
    }

    /// Waits and returns true when `e` is worth another try in time.
    pub(crate) async fn retry_after(&mut self, e: &RedisError) -> bool {
        if !is_transient(e) || Instant::now() + self.pause >= self.deadline {
            return false;
        }
        tracing::warn!(error = %e, retry_in = ?self.pause, "Redis unavailable; retrying");
        tokio::time::sleep(self.pause).await;
        self.pause = (self.pause * 2).min(Duration::from_secs(2));
        true
    }
}

/// The first connection failed because Redis is not there yet, rather than
/// because it refused us.
pub(crate) fn not_up_yet(e: &RedisError) -> bool {
    let message = e.to_string();
    e.is_connection_refusal()
        || e.is_timeout()
        || message.contains("failed to lookup address")
        || message.contains("unreachable")
}

/// Worth retrying: the connection broke or timed out, or the server is
/// loading its data or failing over. Not: wrong password, bad command.
fn is_transient(e: &RedisError) -> bool {
    !matches!(e.kind(), ErrorKind::AuthenticationFailed | ErrorKind::Parse)
        && matches!(
            e.retry_method(),
            RetryMethod::Reconnect | RetryMethod::RetryImmediately | RetryMethod::WaitAndRetry
        )
}

impl ConnectionLike for PatientConnection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            let mut backoff = Backoff::new(self.patience);
            loop {
                match self.inner.req_packed_command(cmd).await {
                    Err(e) if backoff.retry_after(&e).await => {}
                    result => return result,
                }
            }
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            let mut backoff = Backoff::new(self.patience);
            loop {
                match self.inner.req_packed_commands(pipeline, offset, count).await {
                    Err(e) if backoff.retry_after(&e).await => {}
                    result => return result,
                }
            }
        })
    }

    fn get_db(&self) -> i64 {
        self.inner.get_db()
    }
}
