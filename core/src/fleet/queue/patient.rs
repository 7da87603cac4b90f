//! A Redis connection that rides out a Redis restart or failover: it
//! reconnects (the redis crate's ConnectionManager) and retries a command
//! that failed for a transient reason, with capped backoff, for up to
//! `patience`. Every queue step is safe to send twice (see
//! docs/queue-protocol.md), so a step whose answer was lost may be retried.
//! Where the manager's own reconnect cannot help (a refused password, a
//! server that turned replica, a Sentinel master that went away), a new
//! manager is made on the server the [`Locator`] names now.
//!
//! May import: `locator` (where a new connection goes).

use super::locator::Locator;
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::{Cmd, ErrorKind, Pipeline, RedisError, RedisFuture, RetryMethod, ServerErrorKind, Value};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Clone)]
pub struct PatientConnection {
    inner: ConnectionManager,
    /// Which manager `inner` is: 0 the first, then each renewal's number.
    generation: u64,
    patience: Duration,
    /// The newest renewed manager and its number, shared by every clone
    /// (see [`PatientConnection::renew`]).
    renewal: Arc<tokio::sync::Mutex<(u64, Option<ConnectionManager>)>>,
    locator: Locator,
    config: ConnectionManagerConfig,
}

impl PatientConnection {
    pub fn new(
        inner: ConnectionManager,
        patience: Duration,
        locator: Locator,
        config: ConnectionManagerConfig,
    ) -> PatientConnection {
        PatientConnection {
            inner,
            generation: 0,
            patience,
            renewal: Arc::new(tokio::sync::Mutex::new((0, None))),
            locator,
            config,
        }
    }

    /// How long a command keeps trying.
    pub fn patience(&self) -> Duration {
        self.patience
    }

    /// After an error that a new connection may cure (see
    /// [`needs_new_connection`]): a new manager on the server the locator
    /// names now, made once for all clones. A clone whose manager failed
    /// after another clone renewed takes that one instead; the lock keeps
    /// clones failing together from asking the sentinels once each.
    async fn renew(&mut self, e: &RedisError) {
        if !needs_new_connection(e, self.locator.follows_failover()) {
            return;
        }
        let mut renewal = self.renewal.lock().await;
        if renewal.0 == self.generation {
            let Ok(fresh) = self.locator.connect(&self.config).await else {
                return; // not up yet: the next retry asks again
            };
            *renewal = (renewal.0 + 1, Some(fresh));
        }
        if let Some(manager) = &renewal.1 {
            self.inner = manager.clone();
            self.generation = renewal.0;
        }
    }
}

/// Errors the connection manager's own reconnect does not cure:
/// - a refused password: it keeps its refused connection for good, while
///   Redis restarted (or failed over) and forgot the scan's own user until
///   the operator sets it again;
/// - READONLY or MASTERDOWN: the server is a replica now (demoted by a
///   failover); the master is elsewhere, or behind the same name again;
/// - with Sentinel, a broken or silent connection: the manager would redial
///   the old master's address, the sentinels name the new one.
fn needs_new_connection(e: &RedisError, follows_failover: bool) -> bool {
    match e.kind() {
        ErrorKind::AuthenticationFailed => true,
        ErrorKind::Server(ServerErrorKind::ReadOnly | ServerErrorKind::MasterDown) => true,
        ErrorKind::Io => follows_failover,
        _ => false,
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

    /// After an `FCALL` of a function Redis does not have, which this
    /// user may not load: Redis restarted (functions live in memory unless
    /// it persists) and the operator loads them again within seconds.
    pub(crate) async fn retry_missing(&mut self, e: &RedisError) -> bool {
        self.retry_if(true, e).await
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
/// because it refused us. With Sentinel: no sentinel answered, or they name
/// no master that is up (one is failing over).
pub(crate) fn not_up_yet(e: &RedisError) -> bool {
    let message = e.to_string();
    e.is_connection_refusal()
        || e.is_timeout()
        || message.contains("failed to lookup address")
        || message.contains("unreachable")
        || super::locator::no_master_now(e)
}

/// Worth retrying: the connection broke or timed out, or the server is
/// loading its data or failing over, or it turned replica (READONLY: a
/// failover demoted it, and a new connection finds the master). Not: wrong
/// password, bad command.
fn is_transient(e: &RedisError) -> bool {
    !matches!(e.kind(), ErrorKind::AuthenticationFailed | ErrorKind::Parse)
        && (e.kind() == ErrorKind::Server(ServerErrorKind::ReadOnly)
            || matches!(
                e.retry_method(),
                RetryMethod::Reconnect | RetryMethod::RetryImmediately | RetryMethod::WaitAndRetry
            ))
}

/// An answer that is a refusal a failover or restart explains, under which
/// the command did not run: READONLY (a replica now; a script stops at its
/// first write, so it wrote nothing), MASTERDOWN, LOADING. The connection
/// hands server errors on as values, for the caller to raise; these are
/// raised here instead, to be retried like a broken connection. A pipeline
/// holding one is sent again whole: the queue's pipelines are reads and
/// HSETNX, which change nothing more the second time.
fn refusal_for_now(value: &Value) -> Option<RedisError> {
    match value {
        Value::ServerError(e)
            if matches!(
                e.kind(),
                Some(ServerErrorKind::ReadOnly | ServerErrorKind::MasterDown | ServerErrorKind::BusyLoading)
            ) =>
        {
            Some(e.clone().into())
        }
        _ => None,
    }
}

impl ConnectionLike for PatientConnection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            let mut backoff = Backoff::new(self.patience);
            loop {
                let answer = self.inner.req_packed_command(cmd).await;
                match answer.and_then(|value| refusal_for_now(&value).map_or(Ok(value), Err)) {
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
                let answers = self.inner.req_packed_commands(pipeline, offset, count).await;
                let first_refusal = |values: &Vec<Value>| values.iter().find_map(refusal_for_now);
                match answers.and_then(|values| first_refusal(&values).map_or(Ok(values), Err)) {
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
