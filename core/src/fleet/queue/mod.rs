//! The Redis work queue: shards, not keys, so Redis load stays tiny however
//! large the bucket. Every key of a scan shares the hash tag `{SCAN}`, so a
//! scan lives in one Redis Cluster slot and its functions are atomic there.
//!
//! Keys of scan `S` (see docs/queue-protocol.md):
//! - `bs:{S}:pending`   LIST of shard ids waiting (taken from the right)
//! - `bs:{S}:leases`    ZSET shard id -> lease deadline (ms since the epoch)
//! - `bs:{S}:shard:ID`  HASH range (JSON), state, attempts, token, owner,
//!   checkpoint, failures, last_error
//! - `bs:{S}:parts:ID`  LIST of the shard's output part keys, in key order
//! - `bs:{S}:done`, `bs:{S}:dead`  SETs of finished and dead-lettered ids
//! - `bs:{S}:shards`  SET of every shard id ever enqueued (or split off)
//! - `bs:{S}:idle`    ZSET worker -> deadline: workers waiting for work
//! - `bs:{S}:meta`    HASH spec (JSON), created, merged
//! - `bs:{S}:counters` HASH progress totals; `bs:{S}:workers` HASH worker -> status JSON
//! - `bs:{S}:took`, `bs:{S}:reported` HASHes worker -> its last take and last
//!   counted progress report, so a step re-sent after a lost answer counts once
//!
//! Each transition is one function of the queue's Redis Functions library
//! (see [`library`]), so no crash between two commands can lose or
//! duplicate a shard; every step on a leased shard is fenced by the
//! owner and the lease token (the attempt number), so a worker whose lease
//! expired can no longer touch the shard.
//!
//! May import: `keyspace` only (and its own modules: `patient` connection,
//! `locator` and `sentinel` for where it goes, `library` for its functions).

mod acl;
pub mod durable;
pub mod library;
mod locator;
mod patient;
mod retry_judge;
pub use retry_judge::Retried;
pub mod sentinel;
pub mod view;

use crate::keyspace::shard::Shard;
pub use acl::{password_of, scan_user, scan_user_rules, url_with_user};
use library::{Step, LIBRARY};
use locator::Locator;
use patient::PatientConnection;
use redis::aio::ConnectionManagerConfig;
use redis::AsyncCommands;
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum QueueError {
    // Not a `source`: the message already holds it, and error reports that
    // print the chain would say it twice.
    #[error("redis: {0}")]
    Redis(redis::RedisError),
    #[error(
        "Redis is out of memory (maxmemory reached) and refuses writes: the scan waits and tries \
         again; give Redis more memory or let other scans finish ({0})"
    )]
    OutOfMemory(redis::RedisError),
    #[error("redis did not answer for {} s: {error}", patience.as_secs())]
    Unreachable {
        patience: Duration,
        error: redis::RedisError,
    },
    /// A key of the scan is larger than bucketscan writes: something else
    /// (the scan's own Redis user, by hand) wrote it.
    #[error(
        "Redis key {key} is larger than bucketscan ever writes ({what}): something other than \
         bucketscan wrote it; delete the scan and start it again"
    )]
    Oversized { key: String, what: String },
    #[error("shard {id} has a malformed range: {source}")]
    BadRange { id: String, source: serde_json::Error },
    // Not a `source` either, for the same reason.
    #[error("bad Redis address: {0}")]
    Address(sentinel::AddressError),
    #[error(
        "no sentinel knows a master named {master:?}: check the name after the sentinels in the \
         address (redis+sentinel://HOSTS/MASTER_NAME)"
    )]
    UnknownMaster { master: String },
    #[error("the sentinels refused their credentials (sentinelUser, sentinelPassword in the address): {0}")]
    SentinelAuth(redis::RedisError),
    /// The scan's shard set changed under every one of a few reads of it
    /// (splits still going on): worth reading again later.
    #[error("{what} kept changing while they were read")]
    KeptChanging { what: &'static str },
    /// Redis does not have this program's queue functions and this user
    /// may not load them, for longer than the operator takes to load its
    /// own (at start and on every reconcile, a few seconds apart): this
    /// program is of another release than the operator (its library has
    /// another version), and waiting longer would wait forever. Not
    /// transient, so the scan fails saying so instead of retrying.
    #[error(
        "Redis has not got this program's queue functions (library {library}) and this user may \
         not load them; waited {} s, while the operator loads its own library on every reconcile: \
         this image is of another release than the operator's. Run the scan with the operator's \
         worker image (leave spec.workers.image unset, or give the image of the operator's release)",
        patience.as_secs()
    )]
    FunctionsMissing { library: String, patience: Duration },
    /// Redis refused this connection's user after it had worked (or, for a
    /// scan's own user, from the start): Redis restarted and forgot the
    /// user, which the operator sets again on every reconcile.
    #[error(
        "Redis refused this user past the connection's patience (a restarted Redis forgets the \
         scans' users until the operator sets them again on its next reconcile): {0}"
    )]
    UserUnknown(redis::RedisError),
}

impl QueueError {
    /// Redis did not answer for the whole patience: it may come back, so
    /// the step is worth trying again later (a refusal is not).
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            QueueError::Unreachable { .. }
                // Full now, not for good: a scan that finishes frees its
                // keys, so other tenants' scans wait rather than fail.
                | QueueError::OutOfMemory(_)
                | QueueError::KeptChanging { .. }
                | QueueError::UserUnknown(_)
        )
    }
}

/// Where Redis is: `redis://[[USER]:PASSWORD@]HOST:PORT[/DB]`, or
/// `rediss://...` for TLS (verified against the system's roots, or `ca_pem`;
/// a `#insecure` suffix skips verification), or through Sentinel:
/// `redis+sentinel://[[USER]:PASSWORD@]HOST[:PORT][,HOST[:PORT]...]/MASTER_NAME[/DB]`
/// with optional `?sentinelUser=U&sentinelPassword=P` (see [`sentinel`]).
#[derive(Clone)]
pub struct RedisConfig {
    pub url: String,
    /// PEM of the CA that signed the server's certificate.
    pub ca_pem: Option<Vec<u8>>,
    /// How long a command keeps retrying while Redis is unreachable.
    pub patience: Duration,
}

impl RedisConfig {
    pub fn new(url: impl Into<String>) -> RedisConfig {
        RedisConfig {
            url: url.into(),
            ca_pem: None,
            patience: Duration::from_secs(60),
        }
    }
}

impl std::fmt::Debug for RedisConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The URL may carry the password.
        f.debug_struct("RedisConfig").finish_non_exhaustive()
    }
}

/// A connection to Redis that reconnects and retries through outages; cheap
/// to clone, shared by every [`Queue`] made [`on`](Queue::on) it.
#[derive(Clone)]
pub struct RedisConnection(PatientConnection);

impl RedisConfig {
    /// Connect. A Redis that is not up yet (refused, timed out, name not
    /// resolving: pods started together with it) is waited for up to
    /// `patience`; anything else, such as a wrong password or an untrusted
    /// certificate, fails at once.
    pub async fn connect(&self) -> Result<RedisConnection, QueueError> {
        let config = manager_config();
        let locator = self.locator()?;
        let mut backoff = patient::Backoff::new(self.patience);
        loop {
            match locator.connect(&config).await {
                Ok(manager) => {
                    let patient = PatientConnection::new(manager, self.patience, locator, config);
                    return Ok(RedisConnection(patient));
                }
                Err(e) if patient::not_up_yet(&e) => {
                    // A typo in the master's name fails at once, not after
                    // the whole patience.
                    if locator::no_master_now(&e) {
                        if let Some(master) = locator.unknown_master().await {
                            return Err(QueueError::UnknownMaster { master });
                        }
                    }
                    if !backoff.retry_after(&e).await {
                        let patience = self.patience;
                        return Err(QueueError::Unreachable { patience, error: e });
                    }
                }
                // A scan's own user that Redis does not know: Redis
                // restarted and the operator has not set the user again
                // yet (it does on its next reconcile).
                Err(e) if e.kind() == redis::ErrorKind::AuthenticationFailed && self.scan_users_own() => {
                    if !backoff.retry_missing(&e).await {
                        return Err(QueueError::UserUnknown(e));
                    }
                }
                Err(e) => return Err(refusal(&locator, e).await),
            }
        }
    }

    /// Whether the URL names a scan's own user, which the operator sets
    /// (again after a Redis restart), rather than a user of its own.
    fn scan_users_own(&self) -> bool {
        acl::user_of(&self.url).is_some_and(|user| acl::is_scan_user(&user))
    }

    /// A client of the Redis to use now: through Sentinel, the current
    /// master (ask again after a failover).
    pub async fn client(&self) -> Result<redis::Client, QueueError> {
        Ok(self.locator()?.client().await?)
    }

    /// Where connections go: the URL's one server, or the master its
    /// sentinels name.
    fn locator(&self) -> Result<Locator, QueueError> {
        match sentinel::parse(&self.url)? {
            Some(address) => Ok(Locator::sentinel(&address)?),
            None => Ok(Locator::Fixed(Box::new(self.direct_client()?))),
        }
    }

    fn direct_client(&self) -> Result<redis::Client, QueueError> {
        // rustls needs one process-wide crypto provider; the S3 clients use
        // ring too. Installing twice is harmless (the first one stays).
        let _ = rustls::crypto::ring::default_provider().install_default();
        Ok(match &self.ca_pem {
            None => redis::Client::open(self.url.as_str())?,
            Some(pem) => redis::Client::build_with_tls(
                self.url.as_str(),
                redis::TlsCertificates {
                    client_tls: None,
                    root_cert: Some(pem.clone()),
                },
            )?,
        })
    }
}

/// A refusal of the first connection, saying whose when the sentinels
/// refused their own credentials (the master's refusal is Redis's own).
async fn refusal(locator: &Locator, e: redis::RedisError) -> QueueError {
    if e.kind() == redis::ErrorKind::AuthenticationFailed {
        if locator.sentinels_refuse_credentials().await {
            return QueueError::SentinelAuth(e);
        }
        // A wrong password of the caller's own: at once, not transient.
        return QueueError::Redis(e);
    }
    e.into()
}

/// Responses may take up to 10 s (the client's default of 500 ms is too
/// short for a loaded server and turns slow answers into errors).
fn manager_config() -> ConnectionManagerConfig {
    ConnectionManagerConfig::new()
        .set_response_timeout(Some(Duration::from_secs(10)))
        .set_connection_timeout(Some(Duration::from_secs(5)))
        .set_number_of_retries(2)
        .set_max_delay(Duration::from_secs(2))
}

impl From<sentinel::AddressError> for QueueError {
    fn from(e: sentinel::AddressError) -> Self {
        QueueError::Address(e)
    }
}

impl From<redis::RedisError> for QueueError {
    fn from(e: redis::RedisError) -> Self {
        // A pipeline's failure holds its commands' errors only in its text.
        if e.code() == Some("OOM") || e.to_string().contains("\"OOM\"") {
            QueueError::OutOfMemory(e)
        } else if e.kind() == redis::ErrorKind::AuthenticationFailed {
            // Refused after it had worked, past the patience: the user is
            // gone (a restarted Redis), and comes back with the operator.
            QueueError::UserUnknown(e)
        } else {
            QueueError::Redis(e)
        }
    }
}

/// The keys of one scan.
#[derive(Clone, Debug)]
pub struct ScanKeys {
    base: String,
}

impl ScanKeys {
    pub fn new(scan: &str) -> ScanKeys {
        ScanKeys {
            base: format!("bs:{{{scan}}}:"),
        }
    }
    fn key(&self, name: &str) -> String {
        format!("{}{name}", self.base)
    }
    pub fn pending(&self) -> String {
        self.key("pending")
    }
    pub fn leases(&self) -> String {
        self.key("leases")
    }
    pub fn done(&self) -> String {
        self.key("done")
    }
    pub fn dead(&self) -> String {
        self.key("dead")
    }
    pub fn shards(&self) -> String {
        self.key("shards")
    }
    pub fn meta(&self) -> String {
        self.key("meta")
    }
    pub fn counters(&self) -> String {
        self.key("counters")
    }
    pub fn workers(&self) -> String {
        self.key("workers")
    }
    pub fn idle(&self) -> String {
        self.key("idle")
    }
    pub fn took(&self) -> String {
        self.key("took")
    }
    pub fn reported(&self) -> String {
        self.key("reported")
    }
    /// The rate governors' states, by partition (see `fleet::governor`).
    pub fn governor(&self) -> String {
        self.key("governor")
    }
    fn governor_window(&self) -> String {
        self.key("gov-window")
    }
    fn governor_sending(&self) -> String {
        self.key("gov-sending")
    }
    fn governor_lock(&self) -> String {
        self.key("gov-lock")
    }
    /// Part key -> JSON [`PartStats`]: what the merge writes in the manifest
    /// without reading the parts.
    pub fn part_stats(&self) -> String {
        self.key("partstats")
    }
    /// Every key of the scan except the per-shard ones (for cleanup).
    pub fn scan_wide(&self) -> Vec<String> {
        [
            "pending",
            "leases",
            "done",
            "dead",
            "shards",
            "meta",
            "counters",
            "workers",
            "idle",
            "took",
            "reported",
            "governor",
            "gov-window",
            "gov-sending",
            "gov-lock",
            "partstats",
        ]
        .iter()
        .map(|k| self.key(k))
        .collect()
    }
    fn shard_prefix(&self) -> String {
        self.key("shard:")
    }
    pub fn shard(&self, id: &str) -> String {
        self.key(&format!("shard:{id}"))
    }
    pub fn parts(&self, id: &str) -> String {
        self.key(&format!("parts:{id}"))
    }
}

/// What a part holds: its record count and first and last keys. Written by
/// the worker just before it records the part (a part never recorded leaves
/// a harmless entry), read by the merge for the manifest.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PartStats {
    pub records: u64,
    pub first: String,
    pub last: String,
}

/// A shard leased to this worker, as the worker believes Redis holds it: the
/// steps that record progress keep it up to date and send it along, and are
/// refused when Redis disagrees (it lost acknowledged writes).
#[derive(Clone, Debug, PartialEq)]
pub struct Lease {
    pub id: String,
    /// The range the lease covers; a split lowers its end.
    pub shard: Shard,
    /// Last key whose record is in a recorded part, if any: resume after it.
    pub checkpoint: Option<String>,
    /// Fencing token: drawn at random by the take that made this lease, so
    /// no two leases share one, even after Redis rolled back.
    pub token: u64,
}

/// Progress recorded on a leased shard (see [`Queue::commit`]).
#[derive(Clone, Debug, Default)]
pub struct Commit<'a> {
    /// Last key whose record is safely written.
    pub checkpoint: Option<&'a str>,
    /// A finished part holding the records up to the checkpoint.
    pub part: Option<&'a str>,
    /// Incremental scans: the finished change part of the same records.
    pub changes: Option<&'a str>,
    /// Result counts of those records (`objects`, `with_metadata`, ...).
    pub counts: &'a [(&'a str, u64)],
}

/// The `meta` field that marks a plan complete.
const PLAN_COMPLETE: &str = "planned";

/// How a lease ends.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Finish {
    Done,
    /// Graceful stop: back to pending at once, no failure counted.
    Release,
    /// Counted as a failure; dead-lettered after `max_failures`.
    Fail {
        error: String,
        max_failures: u32,
    },
}

/// What became of a split request.
#[derive(Clone, Debug, PartialEq)]
pub enum Split {
    /// The lease now covers `lower`; `upper` is pending for another worker.
    Done { lower: Shard, upper: Shard },
    /// Nobody waits any more (or something is pending): keep scanning.
    NotWanted,
    /// The lease is no longer ours (expired and taken over, or Redis lost
    /// this lease's progress and put the shard back to pending).
    Lost,
}

/// What Redis recorded of a shard (see [`Queue::recorded`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Recorded {
    pub parts: Vec<String>,
    pub counts: std::collections::BTreeMap<String, u64>,
}

const DIVERGED: &str = "Redis lost recorded progress of this shard (restarted from older data or failed over \
                        to a replica that lagged); it goes back to pending and is scanned again from what Redis holds";

impl RedisConnection {
    /// Create or update scan `scan`'s own user (see [`acl`]) with `password`.
    pub async fn set_scan_user(&self, scan: &str, password: &str) -> Result<(), QueueError> {
        let mut con = self.0.clone();
        // The database this connection works in: the scan's, the only one
        // its user may select.
        let info: String = redis::cmd("CLIENT").arg("INFO").query_async(&mut con).await?;
        let db = info
            .split_whitespace()
            .find_map(|field| field.strip_prefix("db="))
            .and_then(|db| db.parse().ok())
            .unwrap_or(0);
        // Naming a command the server lacks fails the whole SETUSER.
        let known: Vec<redis::Value> = redis::cmd("COMMAND")
            .arg("INFO")
            .arg(&acl::SINCE_REDIS_7_2[..])
            .query_async(&mut con)
            .await?;
        let lacking: Vec<&str> = acl::SINCE_REDIS_7_2
            .into_iter()
            .zip(known.iter().chain(std::iter::repeat(&redis::Value::Nil)))
            .filter(|(_, info)| **info == redis::Value::Nil)
            .map(|(command, _)| command)
            .collect();
        redis::cmd("ACL")
            .arg("SETUSER")
            .arg(scan_user(scan))
            .arg(scan_user_rules(&ScanKeys::new(scan).base, password, db, &lacking))
            .query_async::<()>(&mut con)
            .await?;
        Ok(())
    }

    /// Load the queue's function library unless Redis holds it (see
    /// [`library`]): the operator does at start and on each reconcile, as
    /// a Redis that restarted without persistence lost it.
    pub async fn load_functions(&self) -> Result<(), QueueError> {
        let mut con = self.0.clone();
        Ok(LIBRARY.ensure(&mut con).await?)
    }

    /// Redis's memory as `INFO memory` says: bytes used and the
    /// `maxmemory` limit (0: none).
    pub async fn memory(&self) -> Result<Memory, QueueError> {
        let mut con = self.0.clone();
        let info: String = redis::cmd("INFO").arg("memory").query_async(&mut con).await?;
        Ok(Memory::of_info(&info))
    }

    /// Remove scan `scan`'s user (its pods are gone with the scan).
    pub async fn delete_scan_user(&self, scan: &str) -> Result<(), QueueError> {
        let mut con = self.0.clone();
        redis::cmd("ACL")
            .arg("DELUSER")
            .arg(scan_user(scan))
            .query_async::<()>(&mut con)
            .await?;
        Ok(())
    }

    /// Switch a scan's user off and close its connections (a scan over its
    /// Redis budget): it can write nothing more; its keys stay for cleanup.
    pub async fn switch_off_scan_user(&self, scan: &str) -> Result<(), QueueError> {
        let mut con = self.0.clone();
        let user = scan_user(scan);
        redis::cmd("ACL")
            .arg("SETUSER")
            .arg(&user)
            .arg("off")
            .query_async::<()>(&mut con)
            .await?;
        redis::cmd("CLIENT")
            .arg("KILL")
            .arg("USER")
            .arg(&user)
            .query_async::<redis::Value>(&mut con)
            .await?;
        Ok(())
    }
}

/// What a scan holds in Redis (see [`Queue::usage`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    pub keys: u64,
    /// `MEMORY USAGE` summed over those keys.
    pub bytes: u64,
    /// Every key of the scan was counted (false: the count stopped at its
    /// bound, and is a lower bound).
    pub complete: bool,
}

/// Redis's memory (see [`RedisConnection::memory`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Memory {
    pub used: u64,
    /// `maxmemory`; 0 when Redis has no limit.
    pub max: u64,
}

impl Memory {
    /// From the answer to `INFO memory`.
    pub fn of_info(info: &str) -> Memory {
        let field = |name: &str| {
            info.lines()
                .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0)
        };
        Memory {
            used: field("used_memory"),
            max: field("maxmemory"),
        }
    }
}

/// The progress counters a finished shard's exact result counts stand for
/// (every object of its parts was listed and HEADed once): what restoring it
/// adds, so the progress after Redis lost a scan rebuilds from its done
/// records.
pub fn progress_of_counts(counts: &std::collections::BTreeMap<String, u64>) -> [(&'static str, u64); 6] {
    let get = |k: &str| counts.get(k).copied().unwrap_or(0);
    [
        ("listed", get("objects")),
        ("heads", get("objects")),
        ("with_metadata", get("with_metadata")),
        ("vanished", get("vanished")),
        ("errors", get("errors")),
        ("bytes", get("bytes")),
    ]
}

/// `text` cut to at most `most` bytes, at a character's boundary.
pub(crate) fn cut(text: &str, most: usize) -> &str {
    let mut end = text.len().min(most);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

fn json(shard: &Shard) -> String {
    serde_json::to_string(shard).expect("a shard serializes")
}

/// A shard as the queue knows it.
#[derive(Clone, Debug, PartialEq)]
pub struct ShardRecord {
    pub id: String,
    pub shard: Shard,
    pub state: String,
    pub attempts: u64,
    pub failures: u64,
    /// Times the shard gave away the upper part of its range.
    pub splits: u64,
    pub last_error: Option<String>,
    /// Result counts of the shard's recorded parts.
    pub counts: std::collections::BTreeMap<String, u64>,
}

/// What storing a merge's manifest did (see [`Queue::store_manifest`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoredManifest {
    Stored,
    /// Redis records another retry round than the merge's: nothing stored.
    OtherRound {
        held: u64,
    },
}

/// A shard's record from its hash.
fn shard_record(
    id: String,
    h: &std::collections::HashMap<String, String>,
) -> Result<ShardRecord, QueueError> {
    let range = h.get("range").map(String::as_str).unwrap_or("{}");
    let shard = serde_json::from_str(range).map_err(|source| QueueError::BadRange {
        id: id.clone(),
        source,
    })?;
    let num = |k: &str| h.get(k).and_then(|v| v.parse().ok()).unwrap_or(0);
    Ok(ShardRecord {
        shard,
        state: h.get("state").cloned().unwrap_or_default(),
        attempts: num("attempts"),
        failures: num("failures"),
        splits: num("splits"),
        last_error: h.get("last_error").cloned(),
        counts: counts_of(h),
        id,
    })
}

/// Most partitions the governors hold (past it, new ones count in `*`);
/// the `_at` field makes one more.
const MAX_GOVERNED_PARTITIONS: usize = 65;

/// What the governor's shared state says after a worker's report.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Governed {
    /// Workers that reported within the last few windows.
    pub sending: u64,
    /// Governor state (JSON) by partition.
    pub states: Vec<(String, String)>,
    /// For the one worker that steps this window: its length and the fleet's
    /// counts (`PARTITION|r`, `|t`, `|l`, `|w` fields).
    pub window: Option<(Duration, Vec<(String, String)>)>,
}

/// Counts of a scan's shards by state.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct QueueCounts {
    pub pending: u64,
    pub leased: u64,
    pub done: u64,
    pub dead: u64,
}

#[derive(Clone)]
pub struct Queue {
    con: PatientConnection,
    keys: ScanKeys,
    owner: String,
    lease: Duration,
}

impl Queue {
    /// Connect to Redis for scan `scan`; `owner` names this worker in leases
    /// (pod name, or host and pid). The first connection must succeed; after
    /// that, a command retries through a Redis outage for up to
    /// `redis.patience`. Responses may take up to 10 s (the client's default
    /// of 500 ms is too short for a loaded server and turns slow answers into
    /// errors).
    pub async fn connect(
        redis: &RedisConfig,
        scan: &str,
        owner: &str,
        lease: Duration,
    ) -> Result<Queue, QueueError> {
        Ok(Queue::on(&redis.connect().await?, scan, owner, lease))
    }

    /// A queue over a connection the caller keeps (the operator shares one
    /// across all scans instead of connecting per reconcile).
    pub fn on(con: &RedisConnection, scan: &str, owner: &str, lease: Duration) -> Queue {
        Queue {
            con: con.0.clone(),
            keys: ScanKeys::new(scan),
            owner: owner.to_string(),
            lease,
        }
    }

    pub fn keys(&self) -> &ScanKeys {
        &self.keys
    }

    /// Run a step's function (see [`library`]).
    async fn invoke<T: redis::FromRedisValue>(
        &self,
        con: &mut PatientConnection,
        call: &redis::Cmd,
    ) -> Result<T, QueueError> {
        let patience = con.patience();
        library::invoke(con, call, patience).await.map_err(|e| match e {
            library::CallError::Redis(e) => e.into(),
            library::CallError::Missing { patience } => QueueError::FunctionsMissing {
                library: LIBRARY.name.clone(),
                patience,
            },
        })
    }

    pub fn lease_duration(&self) -> Duration {
        self.lease
    }

    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// Add shards as pending. Idempotent: a shard id that exists is skipped, so
    /// re-planning never duplicates work. Returns how many were added.
    pub async fn enqueue(&self, shards: &[Shard]) -> Result<usize, QueueError> {
        let mut con = self.con.clone();
        let mut added = 0;
        // Batches keep each script short; each batch is atomic on its own and
        // a crash between batches leaves the rest to the next enqueue.
        for batch in shards.chunks(500) {
            let keys = [self.keys.pending(), self.keys.shard_prefix(), self.keys.shards()];
            let mut call = LIBRARY.call(Step::Enqueue, &keys);
            for shard in batch {
                call.arg(shard.id())
                    .arg(serde_json::to_string(shard).expect("a shard serializes"));
            }
            let n: usize = self.invoke(&mut con, &call).await?;
            added += n;
        }
        Ok(added)
    }

    /// Lease the next pending shard, or `None` when nothing is pending.
    pub async fn take(&self) -> Result<Option<Lease>, QueueError> {
        self.take_as("").await
    }

    /// Lease a pending shard for another LIST stream of a worker that holds
    /// one already: `None` also while any worker waits for work (it is
    /// theirs to take, or to be split for them).
    pub async fn take_extra(&self) -> Result<Option<Lease>, QueueError> {
        self.take_as("extra").await
    }

    /// This queue for slot `slot` of the worker (slot 0 is the worker
    /// itself): each slot holds its own leases and its own re-sent takes
    /// under `OWNER/slot`.
    pub fn for_slot(&self, slot: usize) -> Queue {
        let mut queue = self.clone();
        if slot > 0 {
            queue.owner = format!("{}/{slot}", self.owner);
        }
        queue
    }

    async fn take_as(&self, kind: &str) -> Result<Option<Lease>, QueueError> {
        let mut con = self.con.clone();
        let token: u64 = rand::random();
        let keys = [
            self.keys.pending(),
            self.keys.leases(),
            self.keys.shard_prefix(),
            self.keys.idle(),
            self.keys.took(),
        ];
        let mut call = LIBRARY.call(Step::Take, &keys);
        call.arg(&self.owner)
            .arg(self.lease.as_millis() as u64)
            .arg(token)
            .arg(kind);
        let taken: Option<(String, String, String, u64)> = self.invoke(&mut con, &call).await?;
        let Some((id, range, checkpoint, token)) = taken else {
            return Ok(None);
        };
        let shard = serde_json::from_str(&range).map_err(|source| QueueError::BadRange {
            id: id.clone(),
            source,
        })?;
        Ok(Some(Lease {
            id,
            shard,
            checkpoint: Some(checkpoint).filter(|c| !c.is_empty()),
            token,
        }))
    }

    /// Extend the lease (a heartbeat). Returns false when the lease is lost:
    /// stop working on the shard. Checks nothing but the lease, so a copy of
    /// the lease made when it was taken will do.
    pub async fn renew(&self, lease: &Lease) -> Result<bool, QueueError> {
        Ok(self.renew_or_commit(lease, &Commit::default(), false).await? == 1)
    }

    /// Extend the lease and record progress: the checkpoint, the finished part
    /// and the part's counts, in one fenced step, and move `lease.checkpoint`
    /// on. Returns false when the lease is lost (nothing recorded), including
    /// when Redis no longer holds the lease's range and checkpoint: then it
    /// lost writes, and the shard goes back to pending.
    pub async fn commit(&self, lease: &mut Lease, commit: &Commit<'_>) -> Result<bool, QueueError> {
        match self.renew_or_commit(lease, commit, true).await? {
            1 => {
                if let Some(checkpoint) = commit.checkpoint {
                    lease.checkpoint = Some(checkpoint.to_string());
                }
                Ok(true)
            }
            2 => {
                tracing::warn!(shard = %lease.shard, "{DIVERGED}");
                Ok(false)
            }
            _ => Ok(false),
        }
    }

    /// renew.lua: 1 done, 0 lease lost, 2 Redis disagrees with `lease`.
    async fn renew_or_commit(
        &self,
        lease: &Lease,
        commit: &Commit<'_>,
        check: bool,
    ) -> Result<i64, QueueError> {
        let mut con = self.con.clone();
        let keys = [
            self.keys.shard(&lease.id),
            self.keys.leases(),
            self.keys.parts(&lease.id),
            self.keys.pending(),
        ];
        let mut call = LIBRARY.call(Step::Renew, &keys);
        call.arg(&lease.id)
            .arg(&self.owner)
            .arg(lease.token)
            .arg(self.lease.as_millis() as u64)
            .arg(commit.checkpoint.unwrap_or(""))
            .arg(commit.part.unwrap_or(""))
            .arg(if check { json(&lease.shard) } else { String::new() })
            .arg(lease.checkpoint.as_deref().unwrap_or(""))
            .arg(commit.changes.unwrap_or(""));
        for (field, delta) in commit.counts.iter().filter(|(_, d)| *d > 0) {
            call.arg(*field).arg(*delta);
        }
        self.invoke(&mut con, &call).await
    }

    /// Split a leased shard at `at` (see [`Shard::split_after`]): this lease
    /// keeps the lower part of its range (`lease.shard` becomes it), the upper
    /// part is queued as a new shard. Only while a worker is idle and nothing
    /// is pending. An error leaves it unknown whether the split happened; the
    /// queue's range is what counts.
    pub async fn split(&self, lease: &mut Lease, at: &str) -> Result<Split, QueueError> {
        let mut con = self.con.clone();
        let (lower, upper) = lease.shard.split_after(at);
        let upper_id = upper.id();
        let keys = [
            self.keys.shard(&lease.id),
            self.keys.pending(),
            self.keys.shards(),
            self.keys.idle(),
            self.keys.shard(&upper_id),
            self.keys.leases(),
        ];
        let mut call = LIBRARY.call(Step::Split, &keys);
        call.arg(&lease.id)
            .arg(&self.owner)
            .arg(lease.token)
            .arg(json(&lease.shard))
            .arg(json(&lower))
            .arg(&upper_id)
            .arg(json(&upper));
        let answer: i64 = self.invoke(&mut con, &call).await?;
        Ok(match answer {
            1 => {
                lease.shard = lower.clone();
                Split::Done { lower, upper }
            }
            2 => Split::NotWanted,
            3 => {
                tracing::warn!(shard = %lease.shard, "{DIVERGED}");
                Split::Lost
            }
            _ => Split::Lost,
        })
    }

    /// Note this worker as idle (it found nothing pending) for `ttl`, which
    /// asks lease holders to split; returns what is pending and leased.
    pub async fn idle(&self, ttl: Duration) -> Result<QueueCounts, QueueError> {
        let mut con = self.con.clone();
        let keys = [self.keys.idle(), self.keys.pending(), self.keys.leases()];
        let mut call = LIBRARY.call(Step::Idle, &keys);
        call.arg(&self.owner).arg(ttl.as_millis() as u64);
        let (pending, leased): (u64, u64) = self.invoke(&mut con, &call).await?;
        Ok(QueueCounts {
            pending,
            leased,
            ..QueueCounts::default()
        })
    }

    /// End the lease. Returns the shard's state afterwards (`done`, `pending`,
    /// `dead`), `lost` when the lease was no longer ours, or `diverged` when
    /// Redis no longer holds the lease's range and checkpoint (it lost writes;
    /// `done` is refused and the shard is pending again).
    pub async fn finish(&self, lease: &Lease, how: &Finish) -> Result<String, QueueError> {
        let mut con = self.con.clone();
        let (mode, error, max) = match how {
            Finish::Done => ("done", "", 0),
            Finish::Release => ("release", "", 0),
            Finish::Fail { error, max_failures } => ("fail", error.as_str(), *max_failures),
        };
        let keys = [
            self.keys.shard(&lease.id),
            self.keys.leases(),
            self.keys.pending(),
            self.keys.done(),
            self.keys.dead(),
        ];
        let mut call = LIBRARY.call(Step::Finish, &keys);
        call.arg(&lease.id)
            .arg(&self.owner)
            .arg(lease.token)
            .arg(mode)
            .arg(cut(error, library::MAX_ERROR_BYTES))
            .arg(max)
            .arg(json(&lease.shard))
            .arg(lease.checkpoint.as_deref().unwrap_or(""));
        let state: String = self.invoke(&mut con, &call).await?;
        if state == "diverged" {
            tracing::warn!(shard = %lease.shard, "{DIVERGED}");
        }
        Ok(state)
    }

    /// The parts and counts Redis recorded for `lease`'s shard, read at one
    /// instant (one read-only function), or `None` unless the shard is still leased to `lease` with
    /// its range and checkpoint: only then do they cover exactly the range up
    /// to the checkpoint.
    pub async fn recorded(&self, lease: &Lease) -> Result<Option<Recorded>, QueueError> {
        let keys = [self.keys.shard(&lease.id), self.keys.parts(&lease.id)];
        let read = self.read_keys(&keys, &["hash".into(), "list".into()]).await?;
        let (hash, parts): (std::collections::HashMap<String, String>, Vec<String>) =
            redis::from_redis_value(redis::Value::Array(read)).map_err(|e| QueueError::Redis(e.into()))?;
        let field = |k: &str| hash.get(k).map(String::as_str);
        let token = lease.token.to_string();
        let range = json(&lease.shard);
        let held = field("state") == Some("leased")
            && field("owner") == Some(self.owner.as_str())
            && field("token") == Some(token.as_str())
            && field("range") == Some(range.as_str())
            && field("checkpoint") == lease.checkpoint.as_deref();
        Ok(held.then(|| Recorded {
            parts,
            counts: counts_of(&hash),
        }))
    }

    /// Requeue shards whose lease expired, at most [`REAP_BATCH`] of them
    /// (the oldest; the next call takes the next ones); returns (requeued,
    /// dead-lettered).
    pub async fn reap(&self, max_failures: u32) -> Result<(u64, u64), QueueError> {
        let mut con = self.con.clone();
        let keys = [
            self.keys.leases(),
            self.keys.pending(),
            self.keys.dead(),
            self.keys.shard_prefix(),
        ];
        let mut call = LIBRARY.call(Step::Reap, &keys);
        call.arg(max_failures).arg(REAP_BATCH);
        self.invoke(&mut con, &call).await
    }

    /// Retry a merged scan in place, as round `round` (1, 2, ...): every
    /// dead shard and every done shard with `error` records back to pending,
    /// from scratch, and the manifest out of `meta` (`retry.lua`). Safe to
    /// send twice: a round Redis holds already changes nothing. The manifest
    /// is judged here (`retry_judge`: Redis decodes no JSON the scan's user
    /// can write); the step writes only if the round and the manifest are
    /// still those judged, else they are read again.
    pub async fn retry(&self, round: u64) -> Result<Retried, QueueError> {
        let mut con = self.con.clone();
        for _ in 0..RETRY_READS {
            let read = self
                .read_hash(&self.keys.meta(), 2, MAX_META_BYTES, &["manifest", "retries"])
                .await?;
            if read.skipped > 0 {
                return Ok(Retried::TooLarge);
            }
            let held = match read.entries.get("retries") {
                Some(r) => match r.parse() {
                    Ok(held) => held,
                    Err(_) => return Ok(Retried::TooLarge),
                },
                None => 0,
            };
            let manifest = read.entries.get("manifest").map(String::as_str);
            let (held, manifest_sha1) = match retry_judge::judge(round, held, manifest) {
                retry_judge::Judged::Answer(answer) => return Ok(answer),
                retry_judge::Judged::Walk { held, manifest_sha1 } => (held, manifest_sha1),
            };
            let keys = [
                self.keys.meta(),
                self.keys.pending(),
                self.keys.shards(),
                self.keys.done(),
                self.keys.dead(),
                self.keys.shard_prefix(),
                self.keys.key("parts:"),
            ];
            let mut call = LIBRARY.call(Step::Retry, &keys);
            call.arg(round).arg(held).arg(manifest_sha1);
            let (requeued, held): (i64, u64) = self.invoke(&mut con, &call).await?;
            return Ok(match requeued {
                -5 => continue,
                -1 => Retried::Applied { round: held },
                -2 => Retried::NotMerged,
                0 => Retried::NothingToRetry,
                -3 => Retried::TooLarge,
                n => Retried::Requeued {
                    shards: n.max(0) as u64,
                },
            });
        }
        Err(QueueError::KeptChanging {
            what: "the scan's merged manifest and retry round",
        })
    }

    /// Raise the retry round Redis records to `round` (a later round's
    /// manifest adopted from S3 after a rollback; `round.lua`): never
    /// lowers it. Returns the round Redis records now.
    pub async fn adopt_round(&self, round: u64) -> Result<u64, QueueError> {
        let mut con = self.con.clone();
        let mut call = LIBRARY.call(Step::AdoptRound, &[self.keys.meta()]);
        call.arg(round);
        self.invoke(&mut con, &call).await
    }

    /// Store a merge's manifest in `meta` only if Redis still records the
    /// merge's retry round `round` (`manifest.lua`): staged in the field
    /// `manifest@ROUND`, then moved in one step, so a merge that outlived a
    /// retry writes nothing over the later round. The manifest is larger
    /// than a step's argument may be, hence the staging.
    pub async fn store_manifest(&self, round: u64, manifest: &str) -> Result<StoredManifest, QueueError> {
        let mut con = self.con.clone();
        let meta = self.keys.meta();
        con.hset::<_, _, _, ()>(&meta, format!("manifest@{round}"), manifest)
            .await?;
        let mut call = LIBRARY.call(Step::StoreManifest, std::slice::from_ref(&meta));
        call.arg(round);
        let (stored, held): (i64, u64) = self.invoke(&mut con, &call).await?;
        match stored {
            // -1, nothing staged: another merge of the same round staged
            // its copy over this one and moved it first.
            1 | -1 => Ok(StoredManifest::Stored),
            0 => Ok(StoredManifest::OtherRound { held }),
            _ => Err(QueueError::Oversized {
                key: meta,
                what: format!("field \"manifest@{round}\" or \"retries\" is over what a merge writes"),
            }),
        }
    }

    /// The manifest Redis holds (`meta` field `manifest`) and the retry
    /// round it records, read at one instant (a rollback between two reads
    /// could pair a round with another round's manifest).
    pub async fn manifest_and_round(&self) -> Result<(Option<String>, u64), QueueError> {
        let read = self
            .read_hash(&self.keys.meta(), 2, MAX_META_BYTES, &["manifest", "retries"])
            .await?;
        if read.skipped > 0 {
            return Err(QueueError::Oversized {
                key: self.keys.meta(),
                what: format!("field \"manifest\" or \"retries\" is over {MAX_META_BYTES} bytes"),
            });
        }
        let mut entries = read.entries;
        let round = entries.get("retries").and_then(|r| r.parse().ok()).unwrap_or(0);
        Ok((entries.remove("manifest"), round))
    }

    /// The retry round Redis holds (0: never retried).
    pub async fn retry_round(&self) -> Result<u64, QueueError> {
        Ok(self
            .meta_field("retries")
            .await?
            .and_then(|r| r.parse().ok())
            .unwrap_or(0))
    }

    pub async fn counts(&self) -> Result<QueueCounts, QueueError> {
        let mut con = self.con.clone();
        let (pending, leased, done, dead): (u64, u64, u64, u64) = redis::pipe()
            .llen(self.keys.pending())
            .zcard(self.keys.leases())
            .scard(self.keys.done())
            .scard(self.keys.dead())
            .query_async(&mut con)
            .await?;
        Ok(QueueCounts {
            pending,
            leased,
            done,
            dead,
        })
    }

    /// Put back a finished shard from its record in S3 (after Redis lost the
    /// scan), with its parts and counts, in one script; its counts also
    /// rebuild the scan's progress counters (see [`progress_of_counts`]). A
    /// shard already done is left alone. Returns whether it was restored.
    pub async fn restore_done(
        &self,
        id: &str,
        range: &Shard,
        parts: &[String],
        counts: &std::collections::BTreeMap<String, u64>,
    ) -> Result<bool, QueueError> {
        let mut con = self.con.clone();
        let keys = [
            self.keys.shard(id),
            self.keys.parts(id),
            self.keys.shards(),
            self.keys.done(),
            self.keys.counters(),
        ];
        let mut call = LIBRARY.call(Step::Restore, &keys);
        call.arg(id)
            .arg(json(range))
            .arg(parts.len())
            .arg(parts)
            .arg(counts.len());
        for (field, n) in counts {
            call.arg(field).arg(*n);
        }
        for (counter, n) in progress_of_counts(counts) {
            call.arg(counter).arg(n);
        }
        Ok(self.invoke::<i64>(&mut con, &call).await? == 1)
    }

    /// One shard as the queue knows it.
    pub async fn shard_record(&self, id: &str) -> Result<Option<ShardRecord>, QueueError> {
        Ok(self.shard_records_of(vec![id.to_string()]).await?.pop())
    }

    /// How many shards the scan has (planned and split off).
    pub async fn shard_count(&self) -> Result<u64, QueueError> {
        let mut con = self.con.clone();
        Ok(con.scard(self.keys.shards()).await?)
    }

    pub async fn set_part_stats(&self, part: &str, stats: &PartStats) -> Result<(), QueueError> {
        let mut con = self.con.clone();
        let json = serde_json::to_string(stats).expect("stats serialize");
        con.hset::<_, _, _, ()>(self.keys.part_stats(), part, json)
            .await?;
        Ok(())
    }

    /// The stats of `parts`, `None` where Redis has none (it lost them, or
    /// the part was written by a release that did not record them).
    pub async fn part_stats(&self, parts: &[String]) -> Result<Vec<Option<PartStats>>, QueueError> {
        let mut con = self.con.clone();
        let mut out = Vec::with_capacity(parts.len());
        for chunk in parts.chunks(1000) {
            let got: Vec<Option<String>> = redis::cmd("HMGET")
                .arg(self.keys.part_stats())
                .arg(chunk)
                .query_async(&mut con)
                .await?;
            out.extend(
                got.into_iter()
                    .map(|j| j.and_then(|j| serde_json::from_str(&j).ok())),
            );
        }
        Ok(out)
    }

    /// The part keys a shard recorded, in order.
    pub async fn parts(&self, id: &str) -> Result<Vec<String>, QueueError> {
        let mut con = self.con.clone();
        Ok(con.lrange(self.keys.parts(id), 0, -1).await?)
    }

    /// Store the scan's spec (first writer wins, so re-planning keeps it).
    pub async fn set_spec<T: serde::Serialize>(&self, spec: &T) -> Result<(), QueueError> {
        let mut con = self.con.clone();
        let json = serde_json::to_string(spec).expect("a spec serializes");
        let now = time::OffsetDateTime::now_utc()
            .format(&time::format_description::well_known::Rfc3339)
            .unwrap_or_default();
        redis::pipe()
            .hset_nx(self.keys.meta(), "spec", json)
            .ignore()
            .hset_nx(self.keys.meta(), "created", now)
            .ignore()
            .query_async::<()>(&mut con)
            .await?;
        Ok(())
    }

    /// The scan's spec, or `None` when the scan is not planned (or Redis lost it).
    pub async fn spec<T: serde::de::DeserializeOwned>(&self) -> Result<Option<T>, QueueError> {
        let json = self.meta_field("spec").await?;
        json.map(|j| serde_json::from_str(&j))
            .transpose()
            .map_err(|source| QueueError::BadRange {
                id: "spec".into(),
                source,
            })
    }

    /// What the planner recorded when its plan was complete (every shard
    /// stored; see `plan`), `None` before that.
    pub async fn plan_complete(&self) -> Result<Option<String>, QueueError> {
        self.meta_field(PLAN_COMPLETE).await
    }

    /// Mark the plan complete, with the planner's summary (JSON). Written
    /// after the last shard.
    pub async fn mark_plan_complete(&self, summary_json: &str) -> Result<(), QueueError> {
        self.set_meta_field(PLAN_COMPLETE, summary_json).await
    }

    /// A meta field (`created`, `merged`, ...), refused when it is larger
    /// than bucketscan ever writes ([`MAX_META_BYTES`]): the scan's own user
    /// may write there, and the operator reads it.
    pub async fn meta_field(&self, field: &str) -> Result<Option<String>, QueueError> {
        let read = self
            .read_hash(&self.keys.meta(), 1, MAX_META_BYTES, &[field])
            .await?;
        if read.skipped > 0 {
            return Err(QueueError::Oversized {
                key: self.keys.meta(),
                what: format!("field {field:?} is over {MAX_META_BYTES} bytes"),
            });
        }
        Ok(read.entries.into_values().next())
    }

    /// A hash of the scan read with bounds, in one read-only function (see
    /// `read_hash.lua`): at most `max_fields` fields (none when `fields` is
    /// empty and the hash has more), none whose name or value is over
    /// `max_bytes`. What it leaves out it counts, and logs.
    pub async fn read_hash(
        &self,
        key: &str,
        max_fields: usize,
        max_bytes: usize,
        fields: &[&str],
    ) -> Result<BoundedHash, QueueError> {
        let mut con = self.con.clone();
        let mut call = LIBRARY.call(Step::ReadHash, &[key.to_string()]);
        call.arg(max_fields).arg(max_bytes).arg(fields);
        let answer: Vec<redis::Value> = self.invoke(&mut con, &call).await?;
        let read = BoundedHash::of_answer(&answer);
        if read.left_out(max_fields, fields.is_empty()) {
            tracing::warn!(
                key,
                fields = read.fields,
                too_large = read.skipped,
                max_fields,
                max_bytes,
                "a hash of the scan is larger than bucketscan writes (did something else write \
                 it?): read only what is within the bounds"
            );
        }
        Ok(read)
    }

    pub async fn set_meta_field(&self, field: &str, value: &str) -> Result<(), QueueError> {
        let mut con = self.con.clone();
        con.hset::<_, _, _, ()>(self.keys.meta(), field, value).await?;
        Ok(())
    }

    /// Add counter deltas and this worker's status, in one command. Returns
    /// true when an idle worker waits while nothing is pending: split.
    /// `report` identifies the deltas: sending the same report again (its
    /// answer was lost) does not count them twice, as long as no other
    /// report of this worker came in between.
    pub async fn report_progress(
        &self,
        report: u64,
        deltas: &[(&str, u64)],
        status_json: &str,
    ) -> Result<bool, QueueError> {
        let mut con = self.con.clone();
        let keys = [
            self.keys.counters(),
            self.keys.workers(),
            self.keys.pending(),
            self.keys.idle(),
            self.keys.reported(),
        ];
        let mut call = LIBRARY.call(Step::Progress, &keys);
        call.arg(&self.owner).arg(status_json).arg(report);
        for (field, delta) in deltas.iter().filter(|(_, d)| *d > 0) {
            call.arg(*field).arg(*delta);
        }
        let split_wanted: i64 = self.invoke(&mut con, &call).await?;
        Ok(split_wanted == 1)
    }

    /// Report this worker's window of requests for the rate governor (one
    /// command; see govern.lua). `counts`: partition, requests, throttles,
    /// latency µs.
    pub async fn govern(
        &self,
        window: Duration,
        counts: &[(&str, u64, u64, u64)],
    ) -> Result<Governed, QueueError> {
        let mut con = self.con.clone();
        let keys = [
            self.keys.governor(),
            self.keys.governor_window(),
            self.keys.governor_sending(),
            self.keys.governor_lock(),
        ];
        let mut call = LIBRARY.call(Step::Govern, &keys);
        call.arg(&self.owner)
            .arg(window.as_millis().max(1) as u64)
            .arg(MAX_GOVERNED_PARTITIONS);
        for (partition, requests, throttles, latency_us) in counts {
            call.arg(*partition)
                .arg(*requests)
                .arg(*throttles)
                .arg(*latency_us);
        }
        let (sending, elapsed_ms, states, window): (u64, i64, Vec<String>, Vec<String>) =
            self.invoke(&mut con, &call).await?;
        let pairs = |v: Vec<String>| -> Vec<(String, String)> {
            v.chunks_exact(2).map(|c| (c[0].clone(), c[1].clone())).collect()
        };
        Ok(Governed {
            sending,
            states: pairs(states)
                .into_iter()
                .filter(|(k, _)| !k.starts_with('_'))
                .collect(),
            window: (elapsed_ms >= 0).then(|| (Duration::from_millis(elapsed_ms as u64), pairs(window))),
        })
    }

    /// Write the governors' states after a step (by the worker that got the window).
    pub async fn set_governors(&self, states: &[(String, String)]) -> Result<(), QueueError> {
        if states.is_empty() {
            return Ok(());
        }
        let mut con = self.con.clone();
        con.hset_multiple::<_, _, _, ()>(self.keys.governor(), states)
            .await?;
        Ok(())
    }

    /// The governors' states (JSON by partition), for status (bounded:
    /// see [`Queue::read_hash`]).
    pub async fn governors(&self) -> Result<std::collections::BTreeMap<String, String>, QueueError> {
        let mut all = self
            .read_hash(&self.keys.governor(), MAX_HASH_FIELDS, MAX_STATUS_BYTES, &[])
            .await?
            .entries;
        all.retain(|k, _| !k.starts_with('_'));
        Ok(all)
    }

    /// Each worker's last reported status (JSON), by name (bounded: see
    /// [`Queue::read_hash`]).
    pub async fn workers(&self) -> Result<std::collections::BTreeMap<String, String>, QueueError> {
        Ok(self
            .read_hash(&self.keys.workers(), MAX_HASH_FIELDS, MAX_STATUS_BYTES, &[])
            .await?
            .entries)
    }

    /// The scan's HEADs per second now: the sum of the rates its workers
    /// reported in the last `LIVE_SECS` (a worker that stopped reporting
    /// has stopped or is stuck: its last rate is not the scan's).
    pub async fn live_rate(&self, now_unix: i64) -> Result<f64, QueueError> {
        const LIVE_SECS: i64 = 10;
        Ok(self
            .workers()
            .await?
            .values()
            .filter_map(|json| serde_json::from_str::<LiveRate>(json).ok())
            .filter(|v| v.updated.is_some_and(|t| now_unix - t <= LIVE_SECS))
            .filter_map(|v| v.rate)
            .filter(|r| r.is_finite() && *r >= 0.0)
            .sum())
    }

    /// The scan's progress totals (bounded: see [`Queue::read_hash`];
    /// a counter that is not a number is left out).
    pub async fn counters(&self) -> Result<std::collections::BTreeMap<String, u64>, QueueError> {
        Ok(self
            .read_hash(&self.keys.counters(), MAX_HASH_FIELDS, 64, &[])
            .await?
            .entries
            .into_iter()
            .filter_map(|(k, v)| Some((k, v.parse().ok()?)))
            .collect())
    }

    /// Every shard of the scan with its state, for merging and reports.
    pub async fn shard_records(&self) -> Result<Vec<ShardRecord>, QueueError> {
        let mut con = self.con.clone();
        let ids: Vec<String> = con.smembers(self.keys.shards()).await?;
        self.shard_records_of(ids).await
    }

    /// The ranges of every shard stored, in key order.
    pub async fn shard_ranges(&self) -> Result<Vec<Shard>, QueueError> {
        Ok(self.shard_records().await?.into_iter().map(|r| r.shard).collect())
    }

    async fn shard_records_of(&self, ids: Vec<String>) -> Result<Vec<ShardRecord>, QueueError> {
        if ids.is_empty() {
            return Ok(vec![]); // an empty pipeline is no command to Redis
        }
        let mut con = self.con.clone();
        let mut pipe = redis::pipe();
        for id in &ids {
            pipe.hgetall(self.keys.shard(id));
        }
        let hashes: Vec<std::collections::HashMap<String, String>> = pipe.query_async(&mut con).await?;
        let mut out = ids
            .into_iter()
            .zip(hashes)
            .map(|(id, h)| shard_record(id, &h))
            .collect::<Result<Vec<_>, _>>()?;
        out.sort_by(|a, b| a.shard.cmp_in_key_order(&b.shard));
        Ok(out)
    }

    /// One `SCAN cursor MATCH pattern COUNT 1000` page: the next cursor (0
    /// at the end) and the keys found (an admin's command).
    async fn scan_keys_page(&self, pattern: &str, cursor: u64) -> Result<(u64, Vec<String>), QueueError> {
        let mut con = self.con.clone();
        Ok(redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(pattern)
            .arg("COUNT")
            .arg(1000)
            .query_async(&mut con)
            .await?)
    }

    /// Remove every key of the scan: every key named `bs:{S}:*`, found by
    /// `SCAN` (so keys its own user wrote beside the queue's go too; needs
    /// an admin connection), in batches of about a thousand.
    pub async fn delete_scan(&self) -> Result<(), QueueError> {
        let mut con = self.con.clone();
        let pattern = format!("{}*", glob_escaped(&self.keys.base));
        let mut cursor: u64 = 0;
        loop {
            let (next, keys) = self.scan_keys_page(&pattern, cursor).await?;
            if !keys.is_empty() {
                // UNLINK: a large value is freed in the background, not
                // while Redis answers no one else.
                redis::cmd("UNLINK")
                    .arg(&keys)
                    .query_async::<()>(&mut con)
                    .await?;
            }
            if next == 0 {
                return Ok(());
            }
            cursor = next;
        }
    }

    /// The keys of the scan and the memory they hold, counted by `SCAN
    /// MATCH bs:{S}:* COUNT 1000` and `MEMORY USAGE` of each (an admin's
    /// commands), stopping after about `max_keys` keys (bounded work per
    /// call) and as soon as `stop_at` bytes are reached.
    pub async fn usage(&self, max_keys: u64, stop_at: u64) -> Result<Usage, QueueError> {
        let mut con = self.con.clone();
        let pattern = format!("{}*", glob_escaped(&self.keys.base));
        let mut usage = Usage::default();
        let mut cursor: u64 = 0;
        loop {
            let (next, keys) = self.scan_keys_page(&pattern, cursor).await?;
            if !keys.is_empty() {
                let mut pipe = redis::pipe();
                for key in &keys {
                    pipe.cmd("MEMORY").arg("USAGE").arg(key);
                }
                let sizes: Vec<Option<u64>> = pipe.query_async(&mut con).await?;
                usage.keys += keys.len() as u64;
                usage.bytes += sizes.into_iter().flatten().sum::<u64>();
            }
            if next == 0 {
                usage.complete = true;
                return Ok(usage);
            }
            if usage.keys >= max_keys || usage.bytes >= stop_at {
                return Ok(usage);
            }
            cursor = next;
        }
    }

    /// The last error of a shard (for dead letters).
    pub async fn last_error(&self, id: &str) -> Result<Option<String>, QueueError> {
        let mut con = self.con.clone();
        Ok(con.hget(self.keys.shard(id), "last_error").await?)
    }
}

/// `text` matched literally in a `SCAN MATCH` pattern.
fn glob_escaped(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// The most expired leases one reap requeues (see `reap.lua`).
pub const REAP_BATCH: usize = 500;
/// The most fields the operator reads of a scan's status hashes (workers,
/// governors, counters): more workers than any scan may have replicas.
pub const MAX_HASH_FIELDS: usize = 4_096;
/// The most bytes of a worker's status or a governor's state read (they
/// are a few hundred).
pub const MAX_STATUS_BYTES: usize = 4_096;
/// The most bytes of a meta field read (the spec is under 64 KiB; the
/// merge manifest lists dead shards with their errors cut at 4 KiB).
pub const MAX_META_BYTES: usize = 8 << 20;

/// Reads of the manifest and round a retry judges before it gives up
/// (each read after the step found them changed: a merge or another retry
/// wrote between).
const RETRY_READS: usize = 5;

/// What [`Queue::read_hash`] read.
#[derive(Debug, Default)]
pub struct BoundedHash {
    pub entries: std::collections::BTreeMap<String, String>,
    /// Fields the hash has in all.
    pub fields: u64,
    /// Fields left out because a name or value was over the bound.
    pub skipped: u64,
}

impl BoundedHash {
    fn of_answer(answer: &[redis::Value]) -> BoundedHash {
        let int = |v: Option<&redis::Value>| match v {
            Some(redis::Value::Int(n)) => *n as u64,
            _ => 0,
        };
        let text = |v: &redis::Value| match v {
            redis::Value::BulkString(b) => String::from_utf8(b.clone()).ok(),
            _ => None,
        };
        BoundedHash {
            fields: int(answer.first()),
            skipped: int(answer.get(1)),
            entries: answer
                .get(2..)
                .unwrap_or_default()
                .chunks_exact(2)
                .filter_map(|c| Some((text(&c[0])?, text(&c[1])?)))
                .collect(),
        }
    }

    /// Something was left out: fields over the bound, or (reading all) a
    /// hash with too many fields to read.
    fn left_out(&self, max_fields: usize, all: bool) -> bool {
        self.skipped > 0 || (all && self.fields > max_fields as u64)
    }
}

/// The two fields of a worker's status the live rate needs (a small typed
/// parse: a status is not trusted to be what a worker wrote).
#[derive(serde::Deserialize)]
struct LiveRate {
    updated: Option<i64>,
    rate: Option<f64>,
}

/// The result counts (`n:FIELD`) of a shard hash.
fn counts_of(hash: &std::collections::HashMap<String, String>) -> std::collections::BTreeMap<String, u64> {
    hash.iter()
        .filter_map(|(k, v)| Some((k.strip_prefix("n:")?.to_string(), v.parse().ok()?)))
        .collect()
}
