//! A worker's side of the scan-wide rate governor: once a window (about a
//! second) send this worker's HEAD counts to Redis in one command, and set
//! the engine's rate to this worker's share of the governed rate. The worker
//! Redis hands the fleet's window to steps the governors (pure logic in
//! `governor`) and writes them back. A few commands per second per worker,
//! none per request; a scan that is never throttled stays unlimited.
//!
//! Partitions: a HEAD counts in its key's first-level prefix once that
//! partition is tracked (`scan::partition`: after a throttling answer for
//! it, or when the fleet limits it), else in `*`. Each tracked partition is
//! reported apart and paced at its own share, so a throttled prefix slows
//! only itself.
//!
//! May import: `governor`, `queue` and `scan`.

use crate::fleet::governor::{step_all, Governor, GovernorConfig, Governors, Window};
use crate::fleet::queue::{Governed, Queue, QueueError};
use crate::scan::engine::{CountersSnapshot, Engine};
use crate::scan::partition::{PartitionCounts, ALL};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// A worker's counts at one moment: all HEADs, and those of each tracked
/// partition (included in `total`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Sample {
    pub total: CountersSnapshot,
    pub partitions: BTreeMap<String, PartitionCounts>,
}

impl Sample {
    /// The totals first: the engine counts a HEAD in its partition before
    /// the totals, so no partition's count is ahead of the totals read.
    pub fn of(engine: &Engine) -> Sample {
        Sample {
            total: engine.counters.snapshot(),
            partitions: engine
                .partitions
                .all()
                .iter()
                .map(|p| (p.name.to_string(), p.counts()))
                .collect(),
        }
    }

    /// This worker's window from `last` to `self`: (partition, requests,
    /// throttles, latency µs), `*` holding what no tracked partition does.
    pub fn window_since(&self, last: &Sample) -> Vec<(String, u64, u64, u64)> {
        let mut rest = (
            self.total.heads.saturating_sub(last.total.heads),
            self.total.throttles.saturating_sub(last.total.throttles),
            self.total.head_micros.saturating_sub(last.total.head_micros),
        );
        let mut counts = vec![];
        for (name, now) in &self.partitions {
            let before = last.partitions.get(name).copied().unwrap_or_default();
            let d = (
                now.heads.saturating_sub(before.heads),
                now.throttles.saturating_sub(before.throttles),
                now.head_micros.saturating_sub(before.head_micros),
            );
            rest = (
                rest.0.saturating_sub(d.0),
                rest.1.saturating_sub(d.1),
                rest.2.saturating_sub(d.2),
            );
            counts.push((name.clone(), d.0, d.1, d.2));
        }
        counts.insert(0, (ALL.to_string(), rest.0, rest.1, rest.2));
        counts
    }
}

/// What the governors give one worker: its rate for `*` and for each
/// partition the fleet governs (`None`: unlimited).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Rates {
    pub all: Option<f64>,
    pub partitions: Vec<(String, Option<f64>)>,
}

/// Report, step when it is this worker's turn, and apply the shares, every
/// `window`, until the task is dropped.
pub async fn govern(queue: Queue, engine: Arc<Engine>, window: Duration, cfg: GovernorConfig) {
    let mut last = Sample::of(&engine);
    loop {
        tokio::time::sleep(window).await;
        let now = Sample::of(&engine);
        // Every window, calm or not: a step needs the whole fleet's rate (a
        // window holding only the worker that saw a 503 would cut the fleet
        // to that one worker's rate). One command per second per worker.
        match report(&queue, &last, &now, window, &cfg).await {
            Ok(rates) => {
                apply(&engine, &rates);
                last = now;
            }
            // Redis away: keep the rate and the counts for the next window.
            Err(e) => tracing::warn!(error = %e, "rate governor report failed"),
        }
    }
}

/// The governor of a scan in one process (`scan`): the fleet's state
/// machines, stepped here every `window` from this engine's counts alone,
/// without Redis. Runs until the task is dropped.
pub async fn govern_alone(engine: Arc<Engine>, window: Duration, cfg: GovernorConfig) {
    let mut last = (Sample::of(&engine), tokio::time::Instant::now());
    let mut states = Governors::new();
    loop {
        tokio::time::sleep(window).await;
        let now = (Sample::of(&engine), tokio::time::Instant::now());
        let windows = alone_windows(&now.0, &last.0, now.1.duration_since(last.1));
        states = step_all(&states, &windows, &cfg);
        for (partition, w) in &windows {
            tracing::debug!(partition, ?w, governor = ?states.get(partition), "governor window");
        }
        apply(&engine, &rates(&states, &cfg, 1));
        last = now;
    }
}

/// One process's window, as the fleet's would be with it as its only sender.
fn alone_windows(now: &Sample, last: &Sample, elapsed: Duration) -> BTreeMap<String, Window> {
    now.window_since(last)
        .into_iter()
        .map(|(partition, requests, throttles, latency_us)| {
            let senders = u64::from(requests > 0);
            let w = Window {
                secs: elapsed.as_secs_f64(),
                requests,
                throttles,
                latency_us,
                senders,
            };
            (partition, w)
        })
        .collect()
}

/// Set the engine's rates, each within its per-process ceiling.
pub fn apply(engine: &Engine, rates: &Rates) {
    engine.set_rate(rates.all);
    let ceiling = engine.opts.max_rate.filter(|m| *m > 0.0);
    let capped: Vec<(String, Option<f64>)> = rates
        .partitions
        .iter()
        .map(|(p, r)| (p.clone(), r.map(|r| ceiling.map_or(r, |c| r.min(c)))))
        .collect();
    engine.partitions.set_rates(&capped);
}

/// One window (samples `last` to `now`): report, maybe step, and answer
/// this worker's rates.
pub async fn report(
    queue: &Queue,
    last: &Sample,
    now: &Sample,
    window: Duration,
    cfg: &GovernorConfig,
) -> Result<Rates, QueueError> {
    let owned = now.window_since(last);
    let counts: Vec<(&str, u64, u64, u64)> = owned
        .iter()
        .map(|(p, r, t, l)| (p.as_str(), *r, *t, *l))
        .collect();
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
    Ok(rates(&states, cfg, governed.sending))
}

/// Each worker's rates from the governors' states.
pub fn rates(states: &Governors, cfg: &GovernorConfig, sending: u64) -> Rates {
    let all = states.get(ALL).map_or(cfg.ceiling, |g| g.limit(cfg));
    Rates {
        all: crate::fleet::governor::share(all, sending),
        partitions: states
            .iter()
            .filter(|(p, _)| p.as_str() != ALL)
            .map(|(p, g)| (p.clone(), g.share(cfg, sending)))
            .collect(),
    }
}

fn parse_states(governed: &Governed) -> Governors {
    governed
        .states
        .iter()
        .filter_map(|(p, json)| Some((p.clone(), serde_json::from_str::<Governor>(json).ok()?)))
        .collect()
}

/// The fleet's window from its `PARTITION|r`, `|t`, `|l`, `|w` fields.
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
            "w" => w.senders = n,
            _ => {}
        }
    }
    windows
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A store of capacity `capacity` that answers 503 to what goes past it
    /// and to `sporadic` of the rest, driven by a process that wants 10x
    /// that: the in-process governor brings the rate down to the store and
    /// keeps it near its capacity (within the governor's probing).
    #[test]
    fn a_process_alone_settles_at_the_store_s_capacity() {
        let cfg = GovernorConfig::default();
        let capacity = 400.0;
        let mut states = Governors::new();
        let mut served = vec![];
        for window in 0..120u64 {
            let allowed = rates(&states, &cfg, 1).all.unwrap_or(4_000.0).min(4_000.0);
            let answered = allowed.min(capacity);
            let refused = (allowed - answered).round() as u64 + (window % 7 == 0) as u64;
            let sample = |heads: f64, throttles: u64| Sample {
                total: CountersSnapshot {
                    heads: heads as u64,
                    throttles,
                    head_micros: heads as u64 * 1_000,
                    ..CountersSnapshot::default()
                },
                partitions: BTreeMap::new(),
            };
            let windows = alone_windows(
                &sample(answered, refused),
                &sample(0.0, 0),
                Duration::from_secs(1),
            );
            states = step_all(&states, &windows, &cfg);
            served.push(answered);
        }
        let late = &served[60..];
        let mean = late.iter().sum::<f64>() / late.len() as f64;
        assert!(
            mean >= 0.9 * capacity,
            "served {mean:.0}/s of {capacity}: {served:?}"
        );
        let rate = rates(&states, &cfg, 1).all.expect("governed");
        assert!(rate < 1.2 * capacity, "the rate stays near the capacity: {rate}");
    }

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
                latency_us: 9000,
                senders: 0
            }
        );
        assert_eq!(w["a|b"].requests, 5, "a partition may hold the separator");
    }

    #[test]
    fn a_window_reports_each_tracked_partition_and_the_rest_in_the_catch_all() {
        let counts = |heads, throttles, head_micros| PartitionCounts {
            heads,
            throttles,
            head_micros,
        };
        let total = |heads, throttles, head_micros| CountersSnapshot {
            heads,
            throttles,
            head_micros,
            ..CountersSnapshot::default()
        };
        let last = Sample {
            total: total(100, 0, 1_000),
            partitions: BTreeMap::new(),
        };
        let now = Sample {
            total: total(400, 9, 5_000),
            // hot/ was tracked during the window: all its counts are new.
            partitions: BTreeMap::from([("hot/".to_string(), counts(50, 9, 3_000))]),
        };
        assert_eq!(
            now.window_since(&last),
            vec![
                ("*".to_string(), 250, 0, 1_000),
                ("hot/".to_string(), 50, 9, 3_000)
            ]
        );
    }

    #[test]
    fn each_partition_gets_its_own_share_and_the_catch_all_the_ceiling() {
        let cfg = GovernorConfig {
            ceiling: Some(1_000.0),
            ..GovernorConfig::default()
        };
        let hot = Governor {
            rate: Some(300.0),
            senders: 1,
            ..Governor::default()
        };
        let states = Governors::from([
            ("hot/".to_string(), hot),
            ("cold/".to_string(), Governor::default()),
        ]);
        let r = rates(&states, &cfg, 4);
        assert_eq!(r.all, Some(250.0), "no * governor: the ceiling, split by 4");
        assert_eq!(
            r.partitions,
            vec![
                ("cold/".to_string(), Some(250.0)),
                ("hot/".to_string(), Some(300.0))
            ]
        );
        assert_eq!(
            rates(&states, &GovernorConfig::default(), 4).partitions[0].1,
            None
        );
    }
}
