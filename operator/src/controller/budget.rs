//! The per-scan Redis budget: a scan's own Redis user can write its keys
//! (values up to Redis's limits), so about once a minute (not on every
//! reconcile) the operator counts the keys and memory of each running scan
//! (bounded work per count); a scan over `--max-redis-bytes-per-scan` has
//! its Redis user switched off and fails with OverLimit naming the budget.
//!
//! May import: the controller's context.

use super::context::{Context, Error};
use bucketscan_core::fleet::queue::Queue;
use std::time::{Duration, Instant};

/// How often a scan's usage is counted.
const EVERY: Duration = Duration::from_secs(60);
/// The most keys one count looks at (a scan has two per shard and a few
/// more); past them the count is a lower bound, which still finds a scan
/// over its budget.
const MAX_KEYS: u64 = 200_000;

/// `Some(message)` when the scan (key `key`, Redis id `scan_id`) holds more
/// than its budget; its user is then switched off. Counts at most once a
/// minute per scan.
pub(super) async fn over_budget(
    ctx: &Context,
    queue: &Queue,
    key: &str,
    scan_id: &str,
) -> Result<Option<String>, Error> {
    let budget = ctx.settings.limits.redis_bytes_per_scan;
    if budget == 0 {
        return Ok(None);
    }
    {
        let mut last = ctx.last_budget.lock().expect("lock");
        if last.get(key).is_some_and(|at| at.elapsed() < EVERY) {
            return Ok(None);
        }
        last.insert(key.to_string(), Instant::now());
    }
    let usage = queue.usage(MAX_KEYS, budget.saturating_add(1)).await?;
    if usage.bytes <= budget {
        return Ok(None);
    }
    if ctx.settings.redis_scan_users {
        ctx.connection.switch_off_scan_user(scan_id).await?;
    }
    Ok(Some(format!(
        "the scan's keys hold {}{} bytes in Redis, over the budget of {budget} bytes a scan may hold \
         (--max-redis-bytes-per-scan, chart value operator.limits.redisBytesPerScan); its Redis user \
         was switched off",
        if usage.complete { "" } else { "at least " },
        usage.bytes
    )))
}
