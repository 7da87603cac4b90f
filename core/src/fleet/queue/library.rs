//! The queue's steps as ONE Redis Functions library (Redis 7.0+), called
//! with `FCALL`, so a scan's own Redis user needs neither `EVAL` nor
//! `SCRIPT` nor `FUNCTION`: it runs the code the operator loaded, never
//! code of its own (a script that loops would freeze Redis for everyone).
//!
//! The library is assembled from the `.lua` files beside this one: the size
//! check (`limits.lua`) and the lease fence (`fenced.lua`) once, then each
//! step's body wrapped as `local function NAME(KEYS, ARGV) ... end` and
//! registered. Its name and its functions' names carry a short hash of its
//! text (`bucketscan_1a2b3c4d`, `bs_1a2b3c4d_take`): an operator and workers
//! of different releases each call their own version during an upgrade,
//! side by side in one Redis, and loading is idempotent (a library of that
//! name holds exactly that text).
//!
//! Who loads it: the operator (admin user) at start and on each reconcile
//! of a scan; any connection whose `FCALL` finds no function loads it once
//! itself (admin, tests, a single-process `scan`). A scan's user may not
//! (NOPERM): after a Redis restart it waits, within its patience, for the
//! operator to load the library again, then gives up with an error that is
//! not transient ([`super::QueueError::FunctionsMissing`]): the operator
//! loads its library every few seconds, so a library still missing after
//! the patience is another release's, which no wait brings.
//!
//! May import: `patient` (the connection and its backoff).

use super::patient::{Backoff, PatientConnection};
use redis::aio::ConnectionLike;
use redis::{Cmd, RedisError};
use sha2::{Digest, Sha256};
use std::sync::LazyLock;
use std::time::Duration;

/// The queue's steps, one function each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    Enqueue,
    Take,
    Renew,
    Split,
    Finish,
    Idle,
    Progress,
    Govern,
    Reap,
    Restore,
    /// Dead shards and shards with error records back to pending (`retry.lua`).
    Retry,
    /// Raise the recorded retry round to a later one, never lower it
    /// (`round.lua`).
    AdoptRound,
    /// Move a merge's staged manifest into `meta` if Redis still records
    /// the merge's round (`manifest.lua`).
    StoreManifest,
    /// Read-only (`no-writes`): a hash read with bounds (see `read_hash.lua`).
    ReadHash,
    /// Read-only (`no-writes`): several keys at one instant (`read_keys.lua`).
    ReadKeys,
}

impl Step {
    const ALL: [Step; 15] = [
        Step::Enqueue,
        Step::Take,
        Step::Renew,
        Step::Split,
        Step::Finish,
        Step::Idle,
        Step::Progress,
        Step::Govern,
        Step::Reap,
        Step::Restore,
        Step::Retry,
        Step::AdoptRound,
        Step::StoreManifest,
        Step::ReadHash,
        Step::ReadKeys,
    ];

    fn name(self) -> &'static str {
        match self {
            Step::Enqueue => "enqueue",
            Step::Take => "take",
            Step::Renew => "renew",
            Step::Split => "split",
            Step::Finish => "finish",
            Step::Idle => "idle",
            Step::Progress => "progress",
            Step::Govern => "govern",
            Step::Reap => "reap",
            Step::Restore => "restore",
            Step::Retry => "retry",
            Step::AdoptRound => "adopt_round",
            Step::StoreManifest => "store_manifest",
            Step::ReadHash => "read_hash",
            Step::ReadKeys => "read_keys",
        }
    }

    fn body(self) -> &'static str {
        match self {
            Step::Enqueue => include_str!("enqueue.lua"),
            Step::Take => include_str!("take.lua"),
            Step::Renew => include_str!("renew.lua"),
            Step::Split => include_str!("split.lua"),
            Step::Finish => include_str!("finish.lua"),
            Step::Idle => include_str!("idle.lua"),
            Step::Progress => include_str!("progress.lua"),
            Step::Govern => include_str!("govern.lua"),
            Step::Reap => include_str!("reap.lua"),
            Step::Restore => include_str!("restore.lua"),
            Step::Retry => include_str!("retry.lua"),
            Step::AdoptRound => include_str!("round.lua"),
            Step::StoreManifest => include_str!("manifest.lua"),
            Step::ReadHash => include_str!("read_hash.lua"),
            Step::ReadKeys => include_str!("read_keys.lua"),
        }
    }

    /// Steps that only read: registered `no-writes`, so Redis runs them
    /// even at maxmemory and on a replica, and they can change nothing.
    fn reads_only(self) -> bool {
        matches!(self, Step::ReadHash | Step::ReadKeys)
    }
}

/// The library: its name, the prefix of its functions' names, its text.
pub struct Library {
    pub name: String,
    prefix: String,
    pub text: String,
}

/// The most bytes one argument of a queue step may have: every value a
/// step stores comes from its arguments, so none is larger. The largest
/// legitimate one is a shard range (JSON of three S3 keys of at most 1,024
/// bytes each: under 20 KiB even with every byte escaped); a worker's
/// status, an error text (cut at [`MAX_ERROR_BYTES`]), a checkpoint or a
/// part key are smaller. Kept in step with `limits.lua`.
pub const MAX_ARGUMENT_BYTES: usize = 65_536;

/// Where a shard's error text is cut before it is stored: enough for any
/// S3 error with its key, far under [`MAX_ARGUMENT_BYTES`].
pub const MAX_ERROR_BYTES: usize = 4_096;

pub static LIBRARY: LazyLock<Library> = LazyLock::new(|| {
    // The hash is of the text with an empty version, so it names the code
    // and not itself.
    let hash = hex::encode(Sha256::digest(assemble("").as_bytes()));
    let version = &hash[..8];
    Library {
        name: format!("bucketscan_{version}"),
        prefix: format!("bs_{version}_"),
        text: assemble(version),
    }
});

fn assemble(version: &str) -> String {
    let mut text = format!(
        "#!lua name=bucketscan_{version}\n\
         -- The bucketscan queue (core/src/fleet/queue/library.rs assembles it from\n\
         -- the .lua files beside it; docs/queue-protocol.md).\n"
    );
    text.push_str(include_str!("limits.lua"));
    text.push_str(include_str!("fenced.lua"));
    for step in Step::ALL {
        let name = step.name();
        let flags = if step.reads_only() { "'no-writes'" } else { "" };
        text.push_str(&format!(
            "\nlocal function {name}(KEYS, ARGV)\nbounded('{name}', ARGV)\n{}end\n\
             redis.register_function{{function_name = 'bs_{version}_{name}', callback = {name}, \
             flags = {{{flags}}}}}\n",
            step.body()
        ));
    }
    text
}

impl Library {
    /// `FCALL` of `step` on `keys`; the caller adds the arguments.
    pub fn call(&self, step: Step, keys: &[String]) -> Cmd {
        let mut cmd = redis::cmd("FCALL");
        cmd.arg(format!("{}{}", self.prefix, step.name()))
            .arg(keys.len())
            .arg(keys);
        cmd
    }

    /// Load the library unless Redis holds it already (the name is the
    /// hash of the text, so a library of that name is this one).
    pub async fn load(&self, con: &mut impl ConnectionLike) -> Result<(), RedisError> {
        let loaded = redis::cmd("FUNCTION")
            .arg("LOAD")
            .arg(&self.text)
            .query_async::<String>(con)
            .await;
        match loaded {
            Err(e) if e.to_string().contains("already exists") => Ok(()),
            other => other.map(drop),
        }
    }
}

impl Library {
    /// Load the library when Redis lacks it: a look at its name first
    /// (a short answer), so the text goes to Redis only after a restart.
    pub async fn ensure(&self, con: &mut impl ConnectionLike) -> Result<(), RedisError> {
        let held: Vec<redis::Value> = redis::cmd("FUNCTION")
            .arg("LIST")
            .arg("LIBRARYNAME")
            .arg(&self.name)
            .query_async(con)
            .await?;
        if held.is_empty() {
            self.load(con).await?;
        }
        Ok(())
    }
}

/// Why a step could not run its function.
pub enum CallError {
    Redis(RedisError),
    /// Redis has no such function, and this user may not load it; it did
    /// not come within `patience`.
    Missing {
        patience: Duration,
    },
}

/// Run `cmd` (made by [`Library::call`]); when Redis has no such function
/// (restarted, or flushed its functions), load the library once and run it
/// again; a user that may not load it waits for the operator to.
pub async fn invoke<T: redis::FromRedisValue>(
    con: &mut PatientConnection,
    cmd: &Cmd,
    patience: Duration,
) -> Result<T, CallError> {
    let mut tried_loading = false;
    let mut backoff = Backoff::new(patience);
    loop {
        let e = match cmd.query_async::<T>(con).await {
            Err(e) if is_missing(&e) => e,
            other => return other.map_err(CallError::Redis),
        };
        if !tried_loading {
            tried_loading = true;
            match LIBRARY.load(con).await {
                Ok(()) => continue,
                Err(refused) if refused.code() == Some("NOPERM") => {}
                Err(other) => return Err(CallError::Redis(other)),
            }
        }
        if !backoff.retry_missing(&e).await {
            return Err(CallError::Missing { patience });
        }
    }
}

/// `FCALL` of a function Redis does not have.
fn is_missing(e: &RedisError) -> bool {
    e.to_string().contains("Function not found")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_library_is_named_after_its_text() {
        let library = &*LIBRARY;
        assert!(library
            .text
            .starts_with(&format!("#!lua name={}\n", library.name)));
        let version = library.name.strip_prefix("bucketscan_").unwrap();
        assert_eq!(version.len(), 8);
        assert_eq!(assemble(version), library.text);
        for step in Step::ALL {
            let name = format!("function_name = 'bs_{version}_{}'", step.name());
            assert!(library.text.contains(&name), "{name} registered");
        }
        let call = library.call(Step::Take, &["k".into()]);
        assert_eq!(
            call.args_iter().count(),
            4,
            "FCALL, the function, one key's count and the key"
        );
    }

    #[test]
    fn the_lua_limit_is_the_rust_one() {
        assert!(include_str!("limits.lua").contains(&format!("MAX_ARGUMENT_BYTES = {MAX_ARGUMENT_BYTES}")));
        const { assert!(MAX_ERROR_BYTES < MAX_ARGUMENT_BYTES) };
    }
}
