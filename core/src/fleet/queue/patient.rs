//! A Redis connection that rides out a Redis restart or failover: it
//! reconnects (the redis crate's ConnectionManager) and retries a command
//! that failed for a transient reason, with capped backoff, for up to
//! `patience`. Every queue step is safe to send twice (see
//! docs/queue-protocol.md), so a step whose answer was lost may be retried.
//!
//! May import: nothing of the crate.

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::{Cmd, ErrorKind, Pipeline, RedisError, RedisFuture, RetryMethod, Value};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(Clone)]
pub struct PatientConnection {
    inner: ConnectionManager,
    /// Which manager `inner` is: 0 the first, then each renewal's number.
    generation: u64,
    patience: Duration,
    /// The newest renewed manager and its number, shared by every clone
    /// (see [`PatientConnection::renew`]).
    renewal: Arc<Mutex<(u64, Option<ConnectionManager>)>>,
    client: redis::Client,
    config: ConnectionManagerConfig,
}

impl PatientConnection {
    pub fn new(
        inner: ConnectionManager,
        patience: Duration,
        client: redis::Client,
        config: ConnectionManagerConfig,
    ) -> PatientConnection {
        PatientConnection {
            inner,
            generation: 0,
            patience,
            renewal: Arc::new(Mutex::new((0, None))),
            client,
            config,
        }
    }

    /// After a refused password. The connection manager reconnects only on
    /// I/O errors and would keep its refused connection for good, so a new
    /// one is made, once for all clones: Redis restarted and forgot the
    /// scan's own user until the operator sets it again.
    async fn renew(&mut self, e: &RedisError) {
        if e.kind() != ErrorKind::AuthenticationFailed {
            return;
        }
        if self.adopt_newer() {
            return;
        }
        let Ok(fresh) = ConnectionManager::new_with_config(self.client.clone(), self.config.clone()).await
        else {
            return;
        };
        {
            let mut renewal = self.renewal.lock().expect("lock");
            if renewal.0 == self.generation {
                *renewal = (self.generation + 1, Some(fresh));
            }
        }
        self.adopt_newer();
    }

    /// Take the newest renewed manager, if newer than ours.
    fn adopt_newer(&mut self) -> bool {
        let renewal = self.renewal.lock().expect("lock");
        match &renewal.1 {
            Some(manager) if renewal.0 > self.generation => {
                self.inner = manager.clone();
                self.generation = renewal.0;
                true
            }
            _ => false,
        }
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
        self.retry_if(is_transient(e), e).await
    }

    /// [`Backoff::retry_after`] on a connection that worked before: a
    /// refused password is waited out too. Redis restarted and forgot the
    /// scan's own user (an ACL user lives in memory) until the operator sets
    /// it again, within seconds.
    async fn retry_after_connected(&mut self, e: &RedisError) -> bool {
        self.retry_if(is_transient(e) || e.kind() == ErrorKind::AuthenticationFailed, e)
            .await
    }

    async fn retry_if(&mut self, worth_it: bool, e: &RedisError) -> bool {
        if !worth_it || Instant::now() + self.pause >= self.deadline {
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
                    Err(e) if backoff.retry_after_connected(&e).await => self.renew(&e).await,
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
                    Err(e) if backoff.retry_after_connected(&e).await => self.renew(&e).await,
                    result => return result,
                }
            }
        })
    }

    fn get_db(&self) -> i64 {
        self.inner.get_db()
    }
}
