//! A worker's side of the scan-wide rate governor: once a window (about a
//! second) send this worker's HEAD counts to Redis in one command, and set
//! the engine's rate to this worker's share of the governed rate. The worker
//! Redis hands the fleet's window to steps the governors (pure logic in
//! `governor`) and writes them back. A few commands per second per worker,
//! none per request; a scan that is never throttled stays unlimited.
//!
//! Partitions: one, `*`, for now (the governor and the Redis state are per
//! partition already; keying HEADs by key range is the next step).
//!
//! May import: `governor`, `queue` and `scan`.

use crate::fleet::governor::{share, step_all, Governor, GovernorConfig, Governors, Window};
use crate::fleet::queue::{Governed, Queue, QueueError};
use crate::scan::engine::{CountersSnapshot, Engine};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// A calm worker reports one window in this many.
const CALM_EVERY: u32 = 10;

/// The partition every HEAD falls in for now.
pub const ALL: &str = "*";

/// Report, step when it is this worker's turn, and apply the share, every
/// `window`, until the task is dropped.
pub async fn govern(queue: Queue, engine: Arc<Engine>, window: Duration, cfg: GovernorConfig) {
    let mut last = engine.counters.snapshot();
    let mut calm_windows = 0;
    loop {
        tokio::time::sleep(window).await;
        let now = engine.counters.snapshot();
        // While nothing is limited and this worker sees no throttling, a
        // report every CALM_EVERY windows is enough to learn that the fleet
        // got limited (Redis commands stay per second of a few, not more).
        let calm = now.throttles == last.throttles && engine.rate() == engine.opts.max_rate;
        calm_windows = if calm { calm_windows + 1 } else { 0 };
        if calm && calm_windows % CALM_EVERY != 0 {
            continue;
        }
        match report(&queue, &last, &now, window, &cfg).await {
            Ok(rate) => {
                engine.set_rate(rate);
                last = now;
            }
            // Redis away: keep the rate and the counts for the next window.
            Err(e) => tracing::warn!(error = %e, "rate governor report failed"),
        }
    }
}

/// One window (counters `last` to `now`): report, maybe step, and answer
/// this worker's rate.
pub async fn report(
    queue: &Queue,
    last: &CountersSnapshot,
    now: &CountersSnapshot,
    window: Duration,
    cfg: &GovernorConfig,
) -> Result<Option<f64>, QueueError> {
    let counts = [(
        ALL,
        now.heads.saturating_sub(last.heads),
        now.throttles.saturating_sub(last.throttles),
        now.head_micros.saturating_sub(last.head_micros),
    )];
    let governed = queue.govern(window, &counts).await?;
    let mut states = parse_states(&governed);
    if let Some((elapsed, fields)) = &governed.window {
        let windows = parse_window(fields, *elapsed);
        let next = step_all(&states, &windows, cfg);
        let json: Vec<(String, String)> = next
            .iter()
            .filter(|(p, g)| states.get(*p) != Some(g))
            .map(|(p, g)| (p.clone(), serde_json::to_string(g).expect("serialisable")))
            .collect();
        queue.set_governors(&json).await?;
        states = next;
    }
    let limit = states.get(ALL).and_then(|g| g.limit(cfg));
    Ok(share(limit, governed.sending))
}

fn parse_states(governed: &Governed) -> Governors {
    governed
        .states
        .iter()
        .filter_map(|(p, json)| Some((p.clone(), serde_json::from_str::<Governor>(json).ok()?)))
        .collect()
}

/// The fleet's window from its `PARTITION|r`, `|t`, `|l` fields.
pub fn parse_window(fields: &[(String, String)], elapsed: Duration) -> BTreeMap<String, Window> {
    let mut windows: BTreeMap<String, Window> = BTreeMap::new();
    for (field, value) in fields {
        let (Some((partition, kind)), Ok(n)) = (field.rsplit_once('|'), value.parse::<u64>()) else {
            continue;
        };
        let w = windows.entry(partition.to_string()).or_insert(Window {
            secs: elapsed.as_secs_f64(),
            ..Window::default()
        });
        match kind {
            "r" => w.requests = n,
            "t" => w.throttles = n,
            "l" => w.latency_us = n,
            _ => {}
        }
    }
    windows
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fleet_window_is_read_by_partition() {
        let fields: Vec<(String, String)> = [("*|r", "900"), ("*|t", "12"), ("*|l", "9000"), ("a|b|r", "5")]
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let w = parse_window(&fields, Duration::from_millis(1500));
        assert_eq!(
            w["*"],
            Window {
                secs: 1.5,
                requests: 900,
                throttles: 12,
                latency_us: 9000
            }
        );
        assert_eq!(w["a|b"].requests, 5, "a partition may hold the separator");
    }
}
