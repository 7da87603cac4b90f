//! Key partitions for the rate governor: which partition a key's HEAD falls
//! in, and one pacer and set of counters per partition the fleet limits, so a
//! prefix the store throttles slows only the requests to it.
//!
//! A key's partition is its first-level prefix (up to and including the
//! first `/`, at most `MAX_NAME` bytes); keys without one fall in `*`, the
//! catch-all. The rule is the same in every worker (the fleet sums windows by
//! name) and needs no plan: AWS partitions by key prefix too. At most
//! `MAX_PARTITIONS` are tracked per process; past that, keys fall in `*`.
//!
//! Cost: while no partition is tracked (a scan never throttled), a HEAD pays
//! one relaxed atomic load here and nothing else.
//!
//! May import: nothing of this crate.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, RwLock};
use tokio::time::Instant;

/// The catch-all partition: keys without a first-level prefix, and keys of
/// partitions beyond the cap.
pub const ALL: &str = "*";
/// Partitions tracked per process (the Redis state stays as small).
pub const MAX_PARTITIONS: usize = 64;
/// Longest partition name, in bytes: a longer first segment is `*`.
pub const MAX_NAME: usize = 64;

/// The partition a key's HEAD falls in.
pub fn partition_of(key: &str) -> &str {
    match key.find('/') {
        Some(i) if i < MAX_NAME => &key[..=i],
        _ => ALL,
    }
}

/// One tracked partition: its pacer and its counters since the start.
#[derive(Debug)]
pub struct Partition {
    pub name: Box<str>,
    /// HEADs per second allowed (f64 bits; 0: no limit).
    rate: AtomicU64,
    next_slot: Mutex<Instant>,
    pub heads: AtomicU64,
    pub throttles: AtomicU64,
    pub head_micros: AtomicU64,
}

/// A partition's counters at one moment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PartitionCounts {
    pub heads: u64,
    pub throttles: u64,
    pub head_micros: u64,
}

impl Partition {
    fn new(name: &str, ceiling: Option<f64>) -> Partition {
        Partition {
            name: name.into(),
            rate: AtomicU64::new(ceiling.map_or(0, f64::to_bits)),
            next_slot: Mutex::new(Instant::now()),
            heads: AtomicU64::new(0),
            throttles: AtomicU64::new(0),
            head_micros: AtomicU64::new(0),
        }
    }

    pub fn rate(&self) -> Option<f64> {
        let bits = self.rate.load(Relaxed);
        (bits != 0).then(|| f64::from_bits(bits))
    }

    /// Wait for this HEAD's slot under the partition's rate (none: at once).
    pub async fn pace(&self) {
        let Some(rate) = self.rate() else {
            return;
        };
        let slot = {
            let mut next = self.next_slot.lock().expect("lock");
            let slot = (*next).max(Instant::now());
            *next = slot + slot_interval(rate);
            slot
        };
        tokio::time::sleep_until(slot).await;
    }

    pub fn counts(&self) -> PartitionCounts {
        PartitionCounts {
            heads: self.heads.load(Relaxed),
            throttles: self.throttles.load(Relaxed),
            head_micros: self.head_micros.load(Relaxed),
        }
    }
}

/// The tracked partitions of one process.
#[derive(Debug, Default)]
pub struct Partitions {
    /// Any partition tracked: the hot path looks no further while false.
    active: AtomicBool,
    table: RwLock<Vec<Arc<Partition>>>,
    /// The process's rate ceiling (`--max-rate`), which every partition
    /// keeps to, governed or not: without it a prefix tracked after a
    /// throttle was unlimited until a governor limited it, or for good
    /// with `--govern-ms 0`.
    ceiling: Option<f64>,
}

impl Partitions {
    /// No partition tracked yet; every one tracked keeps to `ceiling`
    /// requests per second (`None`: none).
    pub fn with_ceiling(ceiling: Option<f64>) -> Partitions {
        Partitions {
            ceiling: ceiling.filter(|c| *c > 0.0),
            ..Partitions::default()
        }
    }

    /// The tracked partition `key` falls in, if any.
    pub fn find(&self, key: &str) -> Option<Arc<Partition>> {
        if !self.active.load(Relaxed) {
            return None;
        }
        let name = partition_of(key);
        if name == ALL {
            return None;
        }
        let table = self.table.read().expect("lock");
        table.iter().find(|p| &*p.name == name).cloned()
    }

    /// Track the partition `key` falls in (a throttling answer came for it);
    /// `None` for `*` or past the cap.
    pub fn track(&self, key: &str) -> Option<Arc<Partition>> {
        self.track_name(partition_of(key))
    }

    fn track_name(&self, name: &str) -> Option<Arc<Partition>> {
        if name == ALL || name.len() > MAX_NAME {
            return None;
        }
        let mut table = self.table.write().expect("lock");
        if let Some(p) = table.iter().find(|p| &*p.name == name) {
            return Some(p.clone());
        }
        if table.len() >= MAX_PARTITIONS {
            return None;
        }
        let p = Arc::new(Partition::new(name, self.ceiling));
        table.push(p.clone());
        self.active.store(true, Relaxed);
        Some(p)
    }

    /// Set each named partition's rate (`None`: unlimited), tracking the
    /// ones the fleet limits that this process has not met yet; tracked
    /// partitions not named become unlimited. Never above the ceiling.
    pub fn set_rates(&self, rates: &[(String, Option<f64>)]) {
        for (name, rate) in rates {
            if rate.is_some() {
                self.track_name(name);
            }
        }
        for p in self.table.read().expect("lock").iter() {
            let rate = rates
                .iter()
                .find(|(n, _)| **n == *p.name)
                .and_then(|(_, r)| *r)
                .filter(|r| *r > 0.0);
            let rate = match (rate, self.ceiling) {
                (Some(r), Some(c)) => Some(r.min(c)),
                (r, c) => r.or(c),
            };
            p.rate.store(rate.map_or(0, f64::to_bits), Relaxed);
        }
    }

    /// Every tracked partition (for reports).
    pub fn all(&self) -> Vec<Arc<Partition>> {
        self.table.read().expect("lock").clone()
    }
}

/// The most time between two requests under a rate: the governor never goes
/// below one a second, and a rate below one a minute is no rate anyone
/// meant (a scan's own workers can write any number to its Redis keys).
const MAX_SLOT_INTERVAL: std::time::Duration = std::time::Duration::from_secs(60);

/// The time between two requests at `rate` a second. `1 / rate` for a tiny
/// rate, zero or not a number did not fit a Duration, and a worker panicked.
pub fn slot_interval(rate: f64) -> std::time::Duration {
    std::time::Duration::try_from_secs_f64(1.0 / rate)
        .unwrap_or(MAX_SLOT_INTERVAL)
        .min(MAX_SLOT_INTERVAL)
}

#[cfg(test)]
mod tests {
    #[test]
    fn any_rate_gives_a_slot_interval_and_none_panics() {
        use super::slot_interval;
        use std::time::Duration;
        assert_eq!(slot_interval(4.0), Duration::from_millis(250));
        for odd in [1e-30, 0.0, -1.0, f64::NAN, f64::INFINITY, f64::MIN_POSITIVE] {
            assert!(slot_interval(odd) <= Duration::from_secs(60), "{odd}");
        }
        assert_eq!(slot_interval(f64::INFINITY), Duration::ZERO);
    }

    use super::*;

    fn any_limited(parts: &Partitions) -> bool {
        parts.all().iter().any(|p| p.rate().is_some())
    }

    #[test]
    fn a_key_falls_in_its_first_level_prefix_or_the_catch_all() {
        assert_eq!(partition_of("hot/a/b"), "hot/");
        assert_eq!(partition_of("cold-07/x"), "cold-07/");
        assert_eq!(partition_of("flat-key"), "*");
        assert_eq!(partition_of("/leading"), "/");
        let long = format!("{}/x", "a".repeat(MAX_NAME));
        assert_eq!(partition_of(&long), "*", "a name past MAX_NAME is the catch-all");
        let fits = format!("{}/x", "a".repeat(MAX_NAME - 1));
        assert_eq!(partition_of(&fits).len(), MAX_NAME);
        // Multi-byte characters: the cut is at the '/', a char boundary.
        assert_eq!(partition_of("données/x"), "données/");
    }

    #[test]
    fn nothing_is_tracked_until_a_throttle_or_a_fleet_limit() {
        let parts = Partitions::default();
        assert!(parts.find("hot/1").is_none());
        assert!(parts.track("flat").is_none(), "the catch-all is never tracked");
        let hot = parts.track("hot/1").unwrap();
        assert!(Arc::ptr_eq(&parts.find("hot/2").unwrap(), &hot));
        assert!(parts.find("cold/1").is_none());
        assert!(!any_limited(&parts));
        // The fleet limits cold/ too: tracked from now on, at its rate.
        parts.set_rates(&[("cold/".into(), Some(50.0)), ("hot/".into(), None)]);
        assert_eq!(parts.find("cold/9").unwrap().rate(), Some(50.0));
        assert_eq!(hot.rate(), None);
        assert!(any_limited(&parts));
        // Not named any more: unlimited, still tracked (its counts go on).
        parts.set_rates(&[]);
        assert!(!any_limited(&parts));
        assert_eq!(parts.all().len(), 2);
    }

    #[test]
    fn a_tracked_partition_keeps_to_the_process_ceiling_governed_or_not() {
        // `scan --max-rate 100 --govern-ms 0`: a prefix tracked after a
        // throttle was unlimited for good (its retries and every later HEAD
        // under it went past the ceiling).
        let parts = Partitions::with_ceiling(Some(100.0));
        let hot = parts.track("hot/1").unwrap();
        assert_eq!(hot.rate(), Some(100.0));
        parts.set_rates(&[("hot/".into(), None), ("cold/".into(), Some(500.0))]);
        assert_eq!(hot.rate(), Some(100.0), "unlimited by the governor: the ceiling");
        assert_eq!(
            parts.find("cold/1").unwrap().rate(),
            Some(100.0),
            "never above it"
        );
        parts.set_rates(&[("hot/".into(), Some(40.0))]);
        assert_eq!(hot.rate(), Some(40.0), "below it: the governed rate");
        parts.set_rates(&[]);
        assert_eq!(hot.rate(), Some(100.0));
        assert_eq!(Partitions::with_ceiling(None).track("a/1").unwrap().rate(), None);
    }

    #[test]
    fn at_most_max_partitions_are_tracked() {
        let parts = Partitions::default();
        for i in 0..MAX_PARTITIONS {
            assert!(parts.track(&format!("p{i}/k")).is_some());
        }
        assert!(parts.track("one-more/k").is_none());
        assert!(
            parts.find("one-more/k").is_none(),
            "its keys fall in the catch-all"
        );
        assert!(parts.track("p3/again").is_some(), "a tracked one is still found");
        assert_eq!(parts.all().len(), MAX_PARTITIONS);
    }
}
