//! Observe: everything Redis knows about a scan (planned or not, shard
//! counts, progress counters, the live rate of its workers, the manifest).
//! Reads only.

use super::context::Error;
use crate::crd::ShardCounts;
use bucketscan_core::fleet::merge::{of_round, Manifest};
use bucketscan_core::fleet::queue::Queue;
use bucketscan_core::fleet::spec::ScanSpec;

/// Everything known about a scan in Redis.
pub(super) struct Observed {
    /// The plan is complete (spec, every shard and the mark stored).
    pub planned: bool,
    pub shards: ShardCounts,
    pub counters: std::collections::BTreeMap<String, u64>,
    pub rate: f64,
    /// The rate governors' summary (throttles seen, governed partitions).
    pub governor: bucketscan_core::fleet::governor::Summary,
    pub manifest: Option<Manifest>,
}

pub(super) async fn observe(queue: &Queue) -> Result<Observed, Error> {
    // Planned once the plan is whole: a spec and some shards are what a
    // planner that died midway leaves, and planning again completes them.
    let planned = queue.spec::<ScanSpec>().await?.is_some() && queue.plan_complete().await?.is_some();
    let counts = queue.counts().await?;
    let total = queue.shard_count().await?;
    let rate = queue
        .live_rate(time::OffsetDateTime::now_utc().unix_timestamp())
        .await?;
    // Only a manifest of the round Redis records: a merge of an earlier
    // round that outlived a retry may have stored its own since.
    let (manifest, round) = queue.manifest_and_round().await?;
    let manifest = manifest.and_then(|json| of_round(&json, round));
    Ok(Observed {
        planned,
        shards: ShardCounts {
            total,
            pending: counts.pending,
            leased: counts.leased,
            done: counts.done,
            dead: counts.dead,
        },
        counters: queue.counters().await?,
        rate,
        governor: bucketscan_core::fleet::governor::summarise(&queue.governors().await?),
        manifest,
    })
}
