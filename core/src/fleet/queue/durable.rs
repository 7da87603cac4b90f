//! Waiting for Redis to keep what it acknowledged: before the merge deletes
//! the parts a stored manifest makes redundant, the manifest should survive
//! a Redis restart (its AOF) and a failover (its replicas). `WAITAOF`
//! (Redis 7.2+) blocks until this connection's writes are fsynced locally
//! and acknowledged by replicas; a Redis without an AOF or without the
//! command says so, and the caller goes on (the manifest is in S3 too).
//!
//! May import: nothing of the crate but the queue.

use super::{Queue, QueueError};
use std::time::Duration;

/// What Redis confirmed of the writes sent so far.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Durability {
    /// In the AOF on disk (`local`) and in that many replicas' (`replicas`
    /// of `of`).
    Confirmed { local: bool, replicas: u64, of: u64 },
    /// Redis keeps no AOF and has no replicas: nothing survives a restart
    /// but what a snapshot (RDB) happens to hold.
    NotPersisted,
    /// The server has no `WAITAOF` (before Redis 7.2) and no replicas.
    Unknown,
}

impl Queue {
    /// Wait up to `timeout` for the writes this connection sent to be in the
    /// AOF and in every connected replica's.
    pub async fn wait_durable(&self, timeout: Duration) -> Result<Durability, QueueError> {
        let mut con = self.con.clone();
        // ROLE (allowed to scan users) tells the replicas without INFO.
        // A user without it (made by an older operator) counts none.
        let role = redis::cmd("ROLE").query_async::<redis::Value>(&mut con).await;
        let replicas = match role {
            Ok(redis::Value::Array(items)) => match items.get(2) {
                Some(redis::Value::Array(list)) => list.len() as u64,
                _ => 0,
            },
            _ => 0,
        };
        let millis = timeout.as_millis().max(1) as u64;
        let asked = redis::cmd("WAITAOF")
            .arg(1)
            .arg(replicas)
            .arg(millis)
            .query_async::<(u64, u64)>(&mut con)
            .await;
        match asked {
            Ok((local, acked)) => Ok(Durability::Confirmed {
                local: local >= 1,
                replicas: acked,
                of: replicas,
            }),
            Err(e) if e.to_string().contains("appendonly is disabled") => match replicas {
                0 => Ok(Durability::NotPersisted),
                _ => replicated(self, replicas, millis).await,
            },
            // Before Redis 7.2: the replicas can still be waited for.
            Err(e) if e.to_string().to_ascii_lowercase().contains("unknown command") => match replicas {
                0 => Ok(Durability::Unknown),
                _ => replicated(self, replicas, millis).await,
            },
            Err(e) => Err(e.into()),
        }
    }
}

/// `WAIT`: how many of `replicas` have this connection's writes.
async fn replicated(queue: &Queue, replicas: u64, millis: u64) -> Result<Durability, QueueError> {
    let mut con = queue.con.clone();
    let acked: u64 = redis::cmd("WAIT")
        .arg(replicas)
        .arg(millis)
        .query_async(&mut con)
        .await?;
    Ok(Durability::Confirmed {
        local: false,
        replicas: acked,
        of: replicas,
    })
}
