//! Where a new Redis connection goes: the one server a `redis://` or
//! `rediss://` URL names, or the master the sentinels of a
//! `redis+sentinel://` address name now. The patient connection asks again
//! for every connection it makes, so after a failover it finds the promoted
//! replica instead of redialling the dead master.
//!
//! May import: `sentinel` (the address and its client).

use super::sentinel::SentinelAddress;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::sentinel::SentinelClient;
use redis::{ErrorKind, RedisError, RedisResult};
use std::sync::Arc;
use std::time::Duration;

/// How long one lookup through the sentinels may take: sentinels that do
/// not answer must not hold a retry for longer than a command would.
const LOOKUP_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Clone)]
pub enum Locator {
    /// One server: every connection goes there (boxed: a client is large).
    Fixed(Box<redis::Client>),
    /// The master the sentinels name at the time of each connection.
    Sentinel {
        // The crate's client asks with `&mut self` (it caches its
        // connections to the sentinels), so clones share it behind a lock.
        client: Arc<tokio::sync::Mutex<SentinelClient>>,
        master: String,
    },
}

impl Locator {
    pub fn sentinel(address: &SentinelAddress) -> RedisResult<Locator> {
        Ok(Locator::Sentinel {
            client: Arc::new(tokio::sync::Mutex::new(address.client()?)),
            master: address.master.clone(),
        })
    }

    /// Whether the server behind this locator can move (a failover): then a
    /// connection that broke is replaced by one to wherever it went.
    pub fn follows_failover(&self) -> bool {
        matches!(self, Locator::Sentinel { .. })
    }

    /// A client for the server to use now.
    pub async fn client(&self) -> RedisResult<redis::Client> {
        match self {
            Locator::Fixed(client) => Ok(client.as_ref().clone()),
            Locator::Sentinel { client, .. } => {
                let lookup = async { client.lock().await.async_get_client().await };
                tokio::time::timeout(LOOKUP_TIMEOUT, lookup)
                    .await
                    .unwrap_or_else(|_| Err(lookup_timed_out()))
            }
        }
    }

    /// A connection manager on the server to use now.
    pub async fn connect(&self, config: &ConnectionManagerConfig) -> RedisResult<ConnectionManager> {
        ConnectionManager::new_with_config(self.client().await?, config.clone()).await
    }

    /// After the sentinels named no master: the master's name when a
    /// sentinel says it knows no master by that name at all, rather than
    /// one that is down or failing over now. `None` too when no sentinel
    /// could be asked, and for one server.
    pub async fn unknown_master(&self) -> Option<String> {
        let Locator::Sentinel { client, master } = self else {
            return None;
        };
        let ask = async {
            let sentinel = client.lock().await.async_get_sentinel_client().await?;
            let mut con = sentinel.get_multiplexed_async_connection().await?;
            let address: Option<(String, u16)> = redis::cmd("SENTINEL")
                .arg("GET-MASTER-ADDR-BY-NAME")
                .arg(master)
                .query_async(&mut con)
                .await?;
            Ok::<_, RedisError>(address.is_none())
        };
        let unknown = tokio::time::timeout(LOOKUP_TIMEOUT, ask).await.ok()?.ok()?;
        unknown.then(|| master.clone())
    }

    /// After a refused password: whether the sentinels refused theirs (the
    /// address's `sentinelUser`/`sentinelPassword`), rather than the master.
    pub async fn sentinels_refuse_credentials(&self) -> bool {
        let Locator::Sentinel { client, .. } = self else {
            return false;
        };
        let ask = async { client.lock().await.async_get_sentinel_client().await };
        matches!(
            tokio::time::timeout(LOOKUP_TIMEOUT, ask).await,
            Ok(Err(e)) if e.kind() == ErrorKind::AuthenticationFailed
        )
    }
}

/// A timeout, so that it counts as "not up yet" and is waited out.
fn lookup_timed_out() -> RedisError {
    let timeout = std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        "the sentinels did not name a master in time",
    );
    RedisError::from(timeout)
}

/// The sentinels named no master, or one that is down (`s_down`/`o_down`):
/// during a failover that passes.
pub fn no_master_now(e: &RedisError) -> bool {
    e.kind() == ErrorKind::MasterNameNotFoundBySentinel
}
