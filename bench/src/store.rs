//! The store model: how long synthetic-s3 takes to answer and when it pushes
//! back. LIST pages and HEADs have their own log-normal service times (from a
//! median and a p99); beyond a capacity in requests per second requests queue
//! (latency grows with the queue) and a request that would wait longer than
//! the queue limit is answered 503 SlowDown at once; an optional per-prefix
//! limit does the same per key partition (AWS: 5,500 GET/HEAD per second per
//! partitioned prefix); connection resets, 500s and sporadic 503 SlowDown
//! answers (whatever the load: a partition splitting, a node restarting)
//! come at given shares.
//! Profiles and their sources: docs/store-model.md.
//!
//! Cheap on purpose (tens of thousands of requests per second on 2 cores):
//! one atomic compare-and-swap for the capacity queue, one short lock for a
//! per-prefix queue, a few multiplications for a latency sample.
//!
//! May import: nothing of this crate.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A log-normal service time given by its median and its 99th percentile.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Latency {
    pub median: Duration,
    pub p99: Duration,
}

/// z of the 99th percentile of the standard normal distribution.
const Z99: f64 = 2.326_347_874;

impl Latency {
    pub fn fixed(d: Duration) -> Latency {
        Latency { median: d, p99: d }
    }

    /// The service time at standard-normal quantile `z`.
    fn at(&self, z: f64) -> Duration {
        let median = self.median.as_secs_f64();
        if median <= 0.0 {
            return Duration::ZERO;
        }
        let sigma = (self.p99.as_secs_f64().max(median) / median).ln() / Z99;
        Duration::from_secs_f64(median * (sigma * z).exp())
    }
}

/// What kind of request arrived (they have their own latencies and limits).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    List,
    Head,
}

#[derive(Clone, Debug, PartialEq)]
pub struct StoreModel {
    pub list: Latency,
    pub head: Latency,
    /// Requests per second the whole store serves (`None`: unbounded).
    pub capacity: Option<f64>,
    /// HEADs per second per key partition (`None`: no per-prefix limit).
    pub prefix_limit: Option<f64>,
    /// A key's partition is its first `partition_chars` characters.
    pub partition_chars: usize,
    /// A request that would queue longer than this is answered 503 SlowDown.
    pub queue_limit: Duration,
    /// Share of requests whose connection is reset without an answer.
    pub resets: f64,
    /// Share of requests answered 500 InternalError.
    pub errors: f64,
    /// Share of requests answered 503 SlowDown whatever the load.
    pub throttles: f64,
}

impl StoreModel {
    /// Every answer after exactly `latency`, no limits (the old endpoint).
    pub fn fixed(latency: Duration) -> StoreModel {
        StoreModel {
            list: Latency::fixed(latency),
            head: Latency::fixed(latency),
            capacity: None,
            prefix_limit: None,
            partition_chars: 1,
            queue_limit: Duration::from_millis(100),
            resets: 0.0,
            errors: 0.0,
            throttles: 0.0,
        }
    }

    /// A named profile (docs/store-model.md gives the sources).
    pub fn profile(name: &str) -> Result<StoreModel, String> {
        let ms = |m: f64| Duration::from_secs_f64(m / 1000.0);
        let base = StoreModel::fixed(Duration::ZERO);
        match name {
            "flashblade" => Ok(StoreModel {
                list: Latency {
                    median: ms(10.0),
                    p99: ms(40.0),
                },
                head: Latency {
                    median: ms(0.7),
                    p99: ms(3.0),
                },
                capacity: Some(15_000.0),
                ..base
            }),
            "aws" => Ok(StoreModel {
                list: Latency {
                    median: ms(100.0),
                    p99: ms(300.0),
                },
                head: Latency {
                    median: ms(14.0),
                    p99: ms(80.0),
                },
                prefix_limit: Some(5_500.0),
                ..base
            }),
            "minio" => Ok(StoreModel {
                list: Latency {
                    median: ms(30.0),
                    p99: ms(120.0),
                },
                head: Latency {
                    median: ms(2.0),
                    p99: ms(15.0),
                },
                capacity: Some(8_000.0),
                ..base
            }),
            _ => Err(format!(
                "unknown store profile {name:?}: flashblade, aws or minio"
            )),
        }
    }
}

/// What the store does with one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admission {
    /// Answer normally after queueing this long, then the service time.
    Serve { queued: Duration, service: Duration },
    /// 503 SlowDown, at once: the capacity or a per-prefix limit.
    SlowDown,
    /// 503 SlowDown, at once, at the sporadic share (not the load).
    SporadicSlowDown,
    /// 500 InternalError.
    InternalError,
    /// Close the connection without an answer.
    Reset,
}

/// The model's running state: the capacity queue and the per-prefix ones.
pub struct Store {
    model: StoreModel,
    epoch: Instant,
    /// Nanoseconds after `epoch` when the capacity queue is next free.
    next_free: AtomicU64,
    prefixes: Mutex<HashMap<Box<str>, u64>>,
    draws: AtomicU64,
}

impl Store {
    pub fn new(model: StoreModel) -> Store {
        Store {
            model,
            epoch: Instant::now(),
            next_free: AtomicU64::new(0),
            prefixes: Mutex::new(HashMap::new()),
            draws: AtomicU64::new(0),
        }
    }

    pub fn model(&self) -> &StoreModel {
        &self.model
    }

    /// Admit a request of `kind` (for `key` when a HEAD) arriving now.
    pub fn admit(&self, kind: Kind, key: &str) -> Admission {
        let n = self.draws.fetch_add(1, Ordering::Relaxed);
        let fault = unit(n, 1);
        if fault < self.model.resets {
            return Admission::Reset;
        }
        if fault < self.model.resets + self.model.errors {
            return Admission::InternalError;
        }
        if fault < self.model.resets + self.model.errors + self.model.throttles {
            return Admission::SporadicSlowDown;
        }
        let now = self.epoch.elapsed().as_nanos() as u64;
        let limit = self.model.queue_limit.as_nanos() as u64;
        let mut wait = 0;
        if let Some(rate) = self.model.capacity {
            match queue(&self.next_free, now, rate, limit) {
                Some(w) => wait = w,
                None => return Admission::SlowDown,
            }
        }
        if let (Kind::Head, Some(rate)) = (kind, self.model.prefix_limit) {
            match self.prefix_queue(key, now, rate, limit) {
                Some(w) => wait = wait.max(w),
                None => return Admission::SlowDown,
            }
        }
        let latency = match kind {
            Kind::List => self.model.list,
            Kind::Head => self.model.head,
        };
        let service = latency.at(normal(unit(n, 2), unit(n, 3)));
        Admission::Serve {
            queued: Duration::from_nanos(wait),
            service,
        }
    }

    fn prefix_queue(&self, key: &str, now: u64, rate: f64, limit: u64) -> Option<u64> {
        let end = key
            .char_indices()
            .nth(self.model.partition_chars)
            .map_or(key.len(), |(i, _)| i);
        let mut prefixes = self.prefixes.lock().expect("lock");
        let next_free = prefixes.entry(key[..end].into()).or_insert(0);
        let start = (*next_free).max(now);
        if start - now > limit {
            return None;
        }
        *next_free = start + interval(rate);
        Some(start - now)
    }
}

/// Take a slot in a queue served `rate` per second: the wait, or `None` when
/// it would be longer than `limit` (the slot is not taken: a request turned
/// away costs the store nothing).
fn queue(next_free: &AtomicU64, now: u64, rate: f64, limit: u64) -> Option<u64> {
    let mut current = next_free.load(Ordering::Relaxed);
    loop {
        let start = current.max(now);
        if start - now > limit {
            return None;
        }
        match next_free.compare_exchange_weak(
            current,
            start + interval(rate),
            Ordering::Relaxed,
            Ordering::Relaxed,
        ) {
            Ok(_) => return Some(start - now),
            Err(seen) => current = seen,
        }
    }
}

fn interval(rate: f64) -> u64 {
    (1e9 / rate.max(1e-3)) as u64
}

/// A well-spread number in (0, 1) from a counter and a stream number
/// (deterministic, no RNG state shared between threads).
pub fn unit(n: u64, stream: u64) -> f64 {
    let mut x = n ^ stream.wrapping_mul(0xD1B5_4A32_D192_ED03);
    // splitmix64's finaliser
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^= x >> 31;
    ((x >> 11) as f64 + 0.5) / (1u64 << 53) as f64
}

/// A standard-normal sample from two uniform ones (Box-Muller).
fn normal(u1: f64, u2: f64) -> f64 {
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_have_the_configured_median_and_p99() {
        let l = Latency {
            median: Duration::from_millis(14),
            p99: Duration::from_millis(80),
        };
        let mut s: Vec<f64> = (0..100_000)
            .map(|n| l.at(normal(unit(n, 2), unit(n, 3))).as_secs_f64() * 1000.0)
            .collect();
        s.sort_by(f64::total_cmp);
        let (median, p99) = (s[50_000], s[99_000]);
        assert!((median - 14.0).abs() < 0.5, "{median}");
        assert!((p99 - 80.0).abs() < 5.0, "{p99}");
    }

    #[test]
    fn the_capacity_queue_turns_away_only_what_would_wait_too_long() {
        let next = AtomicU64::new(0);
        // 1,000/s: slots 1 ms apart; a 10 ms limit admits 11 at one instant.
        let admitted = (0..20)
            .filter(|_| queue(&next, 0, 1000.0, 10_000_000).is_some())
            .count();
        assert_eq!(admitted, 11);
        // 50 ms later the queue has drained.
        assert_eq!(queue(&next, 50_000_000, 1000.0, 10_000_000), Some(0));
    }

    #[test]
    fn sporadic_slowdowns_come_at_their_share_whatever_the_load() {
        let mut model = StoreModel::fixed(Duration::ZERO);
        model.throttles = 0.01;
        let store = Store::new(model);
        let sporadic = (0..100_000)
            .filter(|i| store.admit(Kind::Head, &format!("k{i}")) == Admission::SporadicSlowDown)
            .count();
        assert!((900..=1_100).contains(&sporadic), "{sporadic}");
    }

    #[test]
    fn profiles_are_known_by_name() {
        assert_eq!(StoreModel::profile("aws").unwrap().prefix_limit, Some(5_500.0));
        assert!(StoreModel::profile("flashblade").unwrap().capacity.is_some());
        assert!(StoreModel::profile("minio").is_ok());
        assert!(StoreModel::profile("ceph")
            .unwrap_err()
            .contains("flashblade, aws or minio"));
    }
}
