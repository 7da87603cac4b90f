//! What the merge reads of a scan, in one atomic read: the plan's mark,
//! every shard's record and every shard's recorded parts as Redis held them
//! at one instant. Read piece by piece, a Redis that rolls back between two
//! reads (a restart from an AOF, a failover to a lagging replica) could pair
//! a shard's "done" with a shorter list of parts, and the result would lack
//! the records of the parts missing.
//!
//! May import: nothing of the crate but the queue.

use super::library::{Step, LIBRARY};
use super::{shard_record, Queue, QueueError, ShardRecord, PLAN_COMPLETE};
use redis::AsyncCommands;
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// The scan at one instant.
#[derive(Debug)]
pub struct MergeView {
    /// The plan's completion mark (`None`: the plan is not complete).
    pub plan_complete: Option<String>,
    /// The retry round these shards are of (`meta` field `retries`; 0:
    /// never retried): read with them, as a retry changes both at once.
    pub round: u64,
    /// Every shard, in key order.
    pub shards: Vec<ShardRecord>,
    /// Each shard's recorded parts, in key order.
    pub parts: BTreeMap<String, Vec<String>>,
}

/// Reads of the shard set that changed under the read, in a row, before
/// the read gives up (a scan still being split while it is merged).
const ATTEMPTS: u32 = 10;

type Read = (
    Option<String>,
    u64,
    BTreeSet<String>,
    Vec<HashMap<String, String>>,
    Vec<Vec<String>>,
);

impl Queue {
    /// The scan as the merge needs it, read in one read-only function
    /// (`read_keys.lua`: atomic, as a MULTI/EXEC was, which a scan's user
    /// may no longer send). The set of shard ids is read first to know what
    /// to ask; it is read again inside the function, and the read is
    /// repeated if it changed meanwhile.
    pub async fn merge_view(&self) -> Result<MergeView, QueueError> {
        let mut con = self.con.clone();
        let mut ids: BTreeSet<String> = con.smembers(self.keys.shards()).await?;
        for _ in 0..ATTEMPTS {
            let mut keys = vec![self.keys.meta(), self.keys.meta(), self.keys.shards()];
            let mut hows = vec![
                format!("field:{PLAN_COMPLETE}"),
                "field:retries".to_string(),
                "set".to_string(),
            ];
            // Hashes, then parts lists: two groups, read back as two arrays.
            for id in &ids {
                keys.push(self.keys.shard(id));
                hows.push("hash".into());
            }
            for id in &ids {
                keys.push(self.keys.parts(id));
                hows.push("list".into());
            }
            let values: Vec<redis::Value> = self.read_keys(&keys, &hows).await?;
            let (plan_complete, round, now, hashes, parts) = split(values, ids.len())?;
            if now != ids {
                ids = now;
                continue;
            }
            let mut shards = ids
                .iter()
                .cloned()
                .zip(&hashes)
                .map(|(id, h)| shard_record(id, h))
                .collect::<Result<Vec<_>, _>>()?;
            shards.sort_by(|a, b| a.shard.cmp_in_key_order(&b.shard));
            return Ok(MergeView {
                plan_complete,
                round,
                shards,
                parts: ids.into_iter().zip(parts).collect(),
            });
        }
        Err(QueueError::KeptChanging {
            what: "the scan's shards",
        })
    }
}

impl Queue {
    /// `keys` read as `hows` says, at one instant (see `read_keys.lua`).
    pub(super) async fn read_keys(
        &self,
        keys: &[String],
        hows: &[String],
    ) -> Result<Vec<redis::Value>, QueueError> {
        let mut con = self.con.clone();
        let mut call = LIBRARY.call(Step::ReadKeys, keys);
        call.arg(hows);
        self.invoke(&mut con, &call).await
    }
}

/// The function's answers: the mark, the round, the id set, `n` hashes, `n` lists.
fn split(values: Vec<redis::Value>, n: usize) -> Result<Read, QueueError> {
    let mut values = values.into_iter();
    let mut next = || values.next().unwrap_or(redis::Value::Nil);
    let plan_complete: Option<String> = parse(next())?;
    let round: Option<String> = parse(next())?;
    let round = round.and_then(|r| r.parse().ok()).unwrap_or(0);
    let ids: BTreeSet<String> = parse(next())?;
    let hashes = (0..n)
        .map(|_| parse(next()))
        .collect::<Result<Vec<HashMap<String, String>>, _>>()?;
    let parts = (0..n)
        .map(|_| parse(next()))
        .collect::<Result<Vec<Vec<String>>, _>>()?;
    Ok((plan_complete, round, ids, hashes, parts))
}

fn parse<T: redis::FromRedisValue>(value: redis::Value) -> Result<T, QueueError> {
    redis::from_redis_value(value).map_err(|e| QueueError::Redis(e.into()))
}
