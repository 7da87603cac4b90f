//! The scan-wide adaptive rate governor, as pure state machines: one per
//! key-range partition, so a hot prefix that the store throttles slows only
//! the requests to it. Fed one window of the whole fleet's requests at a time
//! (about a second, summed in Redis by `queue::govern`), it answers the rate
//! the fleet may send at.
//!
//! After the AWS SDKs' adaptive retry mode (smithy-rs client_rate_limiter,
//! CUBIC; see /work/shared/reference/s3-facts.md), adapted to a fleet whose
//! rate is measured, not guessed: no limit until the first throttling
//! answer. On throttling, the rate the store served (the lower of the
//! measured and the allowed rate) becomes the `peak`, and the rate is cut
//! below it by a factor that follows the share of throttled requests: 0.9
//! when a few were (the fleet just touched the store's capacity), down to
//! 0.7 (the SDKs' factor) when many were (it ran far past it). While
//! requests succeed and latency holds, the rate climbs back fast (half the
//! way to the peak per window), then probes past it by a step that grows
//! while nothing pushes back (the store's capacity may have grown: other
//! tenants left). So the fleet spends most windows near the store's
//! capacity and throttles only in the window that probes past it. Never
//! above the ceiling (`maxRequestsPerSecond`) nor 2 x the measured rate
//! (growth that nobody uses proves nothing), never below the floor. A
//! latency rise (mean over the window above `latency_rise` x the lowest
//! seen) is the store queueing: the rate drops by `latency_beta` before any
//! 503 comes.
//!
//! May import: nothing of this crate.

use std::collections::BTreeMap;

#[derive(Clone, Debug, PartialEq)]
pub struct GovernorConfig {
    /// Requests per second the fleet never exceeds (`None`: no ceiling).
    pub ceiling: Option<f64>,
    /// Requests per second the rate never drops below.
    pub floor: f64,
    /// Factor applied on heavy throttling (0.7 in the SDKs).
    pub throttle_beta: f64,
    /// Factor applied when only a few requests were throttled.
    pub mild_beta: f64,
    /// The cut deepens from `mild_beta` by this much per unit of throttled
    /// share (down to `throttle_beta`).
    pub share_weight: f64,
    /// The first probe past the peak, as a share of it (it grows by half
    /// each calm window above the peak).
    pub probe: f64,
    /// Factor applied on a latency rise.
    pub latency_beta: f64,
    /// A window's mean latency above this many times the lowest seen is a rise.
    pub latency_rise: f64,
    /// Windows with fewer requests say nothing about latency.
    pub min_requests: u64,
    /// Throttling in the first this many windows does not cut: every
    /// worker's first requests arrive at once, the store's queue turns the
    /// burst away, and the backoff that follows makes the rate measured in
    /// such a window a small fraction of what the store serves.
    pub grace_windows: u64,
}

impl Default for GovernorConfig {
    fn default() -> Self {
        GovernorConfig {
            ceiling: None,
            floor: 1.0,
            throttle_beta: 0.7,
            mild_beta: 0.9,
            share_weight: 4.0,
            probe: 0.02,
            latency_beta: 0.9,
            latency_rise: 2.0,
            min_requests: 20,
            grace_windows: 2,
        }
    }
}

/// What the fleet did in one window, for one partition.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Window {
    pub secs: f64,
    pub requests: u64,
    /// 503 SlowDown / 429 / throttling answers among them.
    pub throttles: u64,
    /// Sum of the requests' latencies, in microseconds.
    pub latency_us: u64,
    /// Workers that sent requests to the partition in the window (0: not
    /// counted).
    pub senders: u64,
}

impl Window {
    fn rate(&self) -> f64 {
        self.requests as f64 / self.secs.max(1e-3)
    }

    fn mean_latency_us(&self) -> Option<f64> {
        (self.requests > 0).then(|| self.latency_us as f64 / self.requests as f64)
    }
}

/// One partition's governor.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Governor {
    /// Allowed requests per second (`None`: not limited yet, or only by the
    /// ceiling: no throttling seen).
    pub rate: Option<f64>,
    /// Added per calm window once the rate is back at the peak (grows while
    /// the store takes it).
    pub step: f64,
    /// The rate the store served when it last pushed back (throttling or a
    /// latency rise): where the capacity was.
    #[serde(default)]
    pub peak: Option<f64>,
    /// Lowest mean latency seen (µs): the store unloaded.
    pub baseline_us: Option<f64>,
    /// Throttling answers seen, in all.
    pub throttles: u64,
    /// Workers that sent to this partition in the last window with requests
    /// (they share its rate; 0: not known, all workers share it).
    #[serde(default)]
    pub senders: u64,
    /// Windows stepped so far.
    #[serde(default)]
    pub windows: u64,
}

impl Governor {
    /// The rate to send at: the governed one, within the ceiling.
    pub fn limit(&self, cfg: &GovernorConfig) -> Option<f64> {
        match (self.rate, cfg.ceiling) {
            (Some(r), Some(c)) => Some(r.min(c)),
            (r, c) => r.or(c),
        }
    }

    /// The next state after window `w`.
    pub fn step(&self, w: &Window, cfg: &GovernorConfig) -> Governor {
        let mut next = self.clone();
        next.throttles += w.throttles;
        if w.senders > 0 {
            next.senders = w.senders;
        }
        let measured = w.rate();
        let mean = w.mean_latency_us().filter(|_| w.requests >= cfg.min_requests);
        let risen = match (mean, self.baseline_us) {
            (Some(m), Some(b)) => m > b * cfg.latency_rise,
            _ => false,
        };
        let allowed = self.limit(cfg);
        next.windows += 1;
        if w.throttles > 0 && self.windows < cfg.grace_windows {
            // A startup burst: counted, not cut for.
        } else if w.throttles > 0 {
            let served = measured.min(allowed.unwrap_or(f64::INFINITY));
            let share = w.throttles as f64 / (w.requests + w.throttles) as f64;
            let beta = (1.0 - cfg.share_weight * share).clamp(cfg.throttle_beta, cfg.mild_beta);
            next.cut(served, beta, cfg);
        } else if risen && self.rate.is_some() {
            next.cut(measured.min(allowed.unwrap_or(measured)), cfg.latency_beta, cfg);
        } else if let Some(rate) = self.rate {
            let peak = self.peak.unwrap_or(rate);
            let grown = if rate < peak {
                // Back to where the store last pushed back, half the way a window.
                (rate + ((peak - rate) / 2.0).max(peak * cfg.probe / 2.0)).min(peak)
            } else {
                // Probing past it: a step that grows while the store takes it
                // (at most by half the rate a window).
                next.step = (self.step * 1.5).min(rate / 2.0);
                rate + self.step
            };
            let mut cap = (2.0 * measured).max(rate);
            if let Some(c) = cfg.ceiling {
                cap = cap.min(c);
            }
            next.rate = Some(grown.min(cap).max(cfg.floor));
        }
        // The baseline learns only from calm windows (no throttling, no rise).
        if let (Some(m), 0, false) = (mean, w.throttles, risen) {
            next.baseline_us = Some(self.baseline_us.map_or(m, |b| b.min(m)));
        }
        next
    }

    /// The store pushed back at `served` requests per second: remember it as
    /// the peak and go below it by `beta`.
    fn cut(&mut self, served: f64, beta: f64, cfg: &GovernorConfig) {
        let mut rate = (served * beta).max(cfg.floor);
        if let Some(c) = cfg.ceiling {
            rate = rate.min(c);
        }
        self.rate = Some(rate);
        self.peak = Some(served.max(rate));
        self.step = (served * cfg.probe).max(cfg.floor);
    }
}

/// The governors of all partitions of a scan.
pub type Governors = BTreeMap<String, Governor>;

/// Step every partition that had a window; partitions without one keep
/// their state.
pub fn step_all(
    governors: &Governors,
    windows: &BTreeMap<String, Window>,
    cfg: &GovernorConfig,
) -> Governors {
    let mut next = governors.clone();
    for (partition, w) in windows {
        let g = governors.get(partition).cloned().unwrap_or_default();
        next.insert(partition.clone(), g.step(w, cfg));
    }
    next
}

/// One worker's share of a partition's limit when `workers` send to it.
pub fn share(limit: Option<f64>, workers: u64) -> Option<f64> {
    limit.map(|l| l / workers.max(1) as f64)
}

impl Governor {
    /// One worker's share of this partition's limit: split among the workers
    /// that sent to it in the last window, or all `sending` when not known
    /// (a hot prefix scanned by one worker of ten gets the whole rate).
    pub fn share(&self, cfg: &GovernorConfig, sending: u64) -> Option<f64> {
        let workers = if self.senders > 0 {
            self.senders.min(sending.max(1))
        } else {
            sending
        };
        share(self.limit(cfg), workers)
    }
}

/// What the status shows of a scan's governors.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Summary {
    /// Throttling answers the fleet saw, all partitions.
    pub throttles: u64,
    /// The governed partitions and their rates (requests/s), lowest first.
    pub limited: Vec<(String, f64)>,
}

/// Sum up the governors (states as Redis holds them: JSON by partition;
/// unreadable ones are skipped).
pub fn summarise<'a>(states: impl IntoIterator<Item = (&'a String, &'a String)>) -> Summary {
    let mut summary = Summary::default();
    for (partition, json) in states {
        let Ok(g) = serde_json::from_str::<Governor>(json) else {
            continue;
        };
        summary.throttles += g.throttles;
        if let Some(rate) = g.rate {
            summary.limited.push((partition.clone(), rate));
        }
    }
    summary
        .limited
        .sort_by(|a, b| a.1.total_cmp(&b.1).then_with(|| a.0.cmp(&b.0)));
    summary
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Most tests are about what comes after the startup grace.
    fn no_grace() -> GovernorConfig {
        GovernorConfig {
            grace_windows: 0,
            ..GovernorConfig::default()
        }
    }

    #[test]
    fn a_startup_burst_is_counted_not_cut_for() {
        let cfg = GovernorConfig::default();
        // Every worker's first requests at once: the store turns many away
        // and the backoff leaves little measured.
        let burst = throttled(150.0, 280);
        let g = Governor::default().step(&burst, &cfg).step(&burst, &cfg);
        assert_eq!(g.limit(&cfg), None, "{g:?}");
        assert_eq!(g.throttles, 560);
        // Past the grace, throttling cuts.
        let g = g.step(&throttled(5_000.0, 40), &cfg);
        assert_eq!(g.rate, Some(4_500.0));
    }

    fn calm(rate: f64, latency_us: u64) -> Window {
        let requests = rate as u64;
        Window {
            secs: 1.0,
            requests,
            throttles: 0,
            latency_us: latency_us * requests,
            senders: 0,
        }
    }

    fn throttled(rate: f64, throttles: u64) -> Window {
        Window {
            throttles,
            ..calm(rate, 1_000)
        }
    }

    #[test]
    fn no_limit_until_the_first_throttle_then_a_cut_that_follows_the_throttled_share() {
        let cfg = no_grace();
        let g = Governor::default().step(&calm(5_000.0, 1_000), &cfg);
        assert_eq!(g.limit(&cfg), None, "calm windows leave the scan unlimited");
        // A few throttled: the fleet touched the capacity, a mild cut.
        let g = g.step(&throttled(5_000.0, 40), &cfg);
        assert_eq!(g.rate, Some(4_500.0));
        assert_eq!(g.peak, Some(5_000.0));
        assert_eq!(g.throttles, 40);
        // Many throttled (2,000 of 6,000 requests): the SDKs' 0.7, and from
        // what was allowed, not measured (the fleet may still be sending
        // faster than allowed for a moment).
        let g = g.step(&throttled(5_000.0, 2_500), &cfg);
        assert_eq!(g.rate, Some(4_500.0 * 0.7));
        assert_eq!(g.peak, Some(4_500.0));
        // In between, in between: 5 % throttled cuts by 0.8.
        let g = Governor::default().step(&throttled(950.0, 50), &cfg);
        assert!((g.rate.unwrap() - 950.0 * 0.8).abs() < 1e-9, "{g:?}");
    }

    #[test]
    fn the_rate_climbs_back_to_the_peak_then_probes_past_it_faster_and_faster() {
        let cfg = no_grace();
        let mut g = Governor::default().step(&calm(1_000.0, 1_000), &cfg);
        g = g.step(&throttled(1_000.0, 5), &cfg);
        assert_eq!((g.rate, g.peak), (Some(900.0), Some(1_000.0)));
        let mut rates = vec![];
        for _ in 0..8 {
            let sent = g.rate.unwrap();
            g = g.step(&calm(sent, 1_000), &cfg);
            rates.push(g.rate.unwrap());
        }
        // Half the way to the peak a window (at least 1 % of it), then
        // +2 % of the peak, growing by half each window.
        assert_eq!(
            rates,
            vec![950.0, 975.0, 987.5, 997.5, 1_000.0, 1_020.0, 1_050.0, 1_095.0]
        );
    }

    /// A fleet that could send twice the store's capacity C, governed: the
    /// store serves up to C a window and throttles the rest.
    fn against_a_store_of_capacity(capacity: f64, windows: usize) -> (f64, f64) {
        let cfg = no_grace();
        let mut g = Governor::default();
        let (mut served_all, mut throttled_all) = (0.0, 0.0);
        for _ in 0..windows {
            let sent = g.limit(&cfg).unwrap_or(2.0 * capacity).min(2.0 * capacity);
            let served = sent.min(capacity);
            let throttles = (sent - capacity).max(0.0);
            g = g.step(
                &Window {
                    secs: 1.0,
                    requests: served as u64,
                    throttles: throttles as u64,
                    latency_us: served as u64 * 1_000,
                    senders: 0,
                },
                &cfg,
            );
            served_all += served;
            throttled_all += throttles;
        }
        (
            served_all / windows as f64 / capacity,
            throttled_all / (served_all + throttled_all),
        )
    }

    #[test]
    fn a_fleet_settles_near_the_store_capacity_with_few_throttles() {
        for capacity in [50.0, 5_000.0, 300_000.0] {
            let (share_of_capacity, throttled) = against_a_store_of_capacity(capacity, 300);
            assert!(share_of_capacity >= 0.9, "{capacity}: {share_of_capacity:.3} C");
            assert!(
                throttled <= 0.01,
                "{capacity}: {:.2} % throttled",
                throttled * 100.0
            );
        }
    }

    #[test]
    fn a_latency_rise_cuts_before_any_throttle() {
        let cfg = no_grace();
        let mut g = Governor::default().step(&calm(1_000.0, 1_000), &cfg);
        g = g.step(&throttled(1_000.0, 1), &cfg);
        g = g.step(&calm(900.0, 1_000), &cfg);
        let before = g.rate.unwrap();
        // Latency 2.5x the lowest seen: the store is queueing.
        let g2 = g.step(&calm(before, 2_500), &cfg);
        assert!(g2.rate.unwrap() < before, "{g2:?}");
        assert_eq!(g2.rate, Some(before * 0.9));
        assert_eq!(g2.peak, Some(before), "where the latency rose is the new peak");
        assert_eq!(g2.baseline_us, Some(1_000.0), "a risen window is not a baseline");
        // 1.5x is within the noise allowed: growth goes on.
        assert!(g.step(&calm(before, 1_500), &cfg).rate.unwrap() > before);
        // Too few requests say nothing about latency.
        let few = Window {
            secs: 1.0,
            requests: 5,
            throttles: 0,
            latency_us: 5 * 10_000,
            senders: 0,
        };
        assert!(g.step(&few, &cfg).rate.unwrap() >= g.rate.unwrap().min(10.0));
    }

    #[test]
    fn never_above_the_ceiling_nor_below_the_floor() {
        let cfg = GovernorConfig {
            ceiling: Some(800.0),
            floor: 50.0,
            ..no_grace()
        };
        assert_eq!(
            Governor::default().limit(&cfg),
            Some(800.0),
            "the ceiling holds from the start"
        );
        let mut g = Governor::default().step(&throttled(2_000.0, 9), &cfg);
        assert_eq!(g.rate, Some(720.0), "0.9 x the ceiling, not the measured rate");
        for _ in 0..100 {
            let sent = g.limit(&cfg).unwrap();
            g = g.step(&calm(sent, 1_000), &cfg);
            assert!(g.limit(&cfg).unwrap() <= 800.0);
        }
        assert_eq!(g.limit(&cfg), Some(800.0));
        for _ in 0..100 {
            g = g.step(&throttled(g.limit(&cfg).unwrap(), 3), &cfg);
            assert!(g.rate.unwrap() >= 50.0);
        }
        assert_eq!(g.rate, Some(50.0));
    }

    #[test]
    fn unused_rate_does_not_grow() {
        let cfg = no_grace();
        let mut g = Governor::default().step(&throttled(1_000.0, 1), &cfg);
        for _ in 0..50 {
            g = g.step(&calm(100.0, 1_000), &cfg); // the fleet sends only 100/s
        }
        assert_eq!(g.rate, Some(900.0), "{g:?}");
        // Probing past the peak stops at twice what is sent too.
        let mut g = Governor {
            rate: Some(1_000.0),
            peak: Some(1_000.0),
            step: 20.0,
            ..Governor::default()
        };
        for _ in 0..50 {
            g = g.step(&calm(1_100.0, 1_000), &cfg);
        }
        assert_eq!(g.rate, Some(2_200.0), "{g:?}");
    }

    #[test]
    fn partitions_are_governed_apart() {
        let cfg = no_grace();
        let mut govs = Governors::new();
        let windows = |hot: Window, cold: Window| {
            BTreeMap::from([("hot/".to_string(), hot), ("cold/".to_string(), cold)])
        };
        govs = step_all(
            &govs,
            &windows(throttled(5_500.0, 2_400), calm(3_000.0, 1_000)),
            &cfg,
        );
        assert_eq!(govs["hot/"].rate, Some(5_500.0 * 0.7));
        assert_eq!(govs["cold/"].limit(&cfg), None, "the cold prefix is not slowed");
        // A partition without a window this time keeps its state.
        let only_cold = BTreeMap::from([("cold/".to_string(), calm(3_000.0, 1_000))]);
        assert_eq!(step_all(&govs, &only_cold, &cfg)["hot/"], govs["hot/"]);
        assert_eq!(share(govs["hot/"].limit(&cfg), 4), Some(5_500.0 * 0.7 / 4.0));
        assert_eq!(share(None, 4), None);
    }

    #[test]
    fn the_summary_adds_up_throttles_and_lists_governed_partitions_lowest_first() {
        let json = |g: Governor| serde_json::to_string(&g).unwrap();
        let states = BTreeMap::from([
            (
                "*".to_string(),
                json(Governor {
                    throttles: 2,
                    ..Governor::default()
                }),
            ),
            (
                "a/".to_string(),
                json(Governor {
                    rate: Some(900.0),
                    throttles: 5,
                    ..Governor::default()
                }),
            ),
            (
                "b/".to_string(),
                json(Governor {
                    rate: Some(300.0),
                    throttles: 40,
                    ..Governor::default()
                }),
            ),
            ("bad/".to_string(), "not json".to_string()),
        ]);
        let s = summarise(&states);
        assert_eq!(s.throttles, 47);
        assert_eq!(
            s.limited,
            vec![("b/".to_string(), 300.0), ("a/".to_string(), 900.0)]
        );
        assert_eq!(summarise(&BTreeMap::new()), Summary::default());
    }

    #[test]
    fn a_partition_is_shared_by_the_workers_that_send_to_it() {
        let cfg = no_grace();
        let w = Window {
            senders: 2,
            ..throttled(1_000.0, 10)
        };
        let g = Governor::default().step(&w, &cfg);
        assert_eq!(g.senders, 2);
        assert_eq!(
            g.share(&cfg, 8),
            Some(900.0 / 2.0),
            "2 of the 8 workers send to it"
        );
        // A window without the count keeps the last one known.
        assert_eq!(g.step(&calm(900.0, 1_000), &cfg).senders, 2);
        // Never more senders than workers sending at all.
        assert_eq!(g.share(&cfg, 1), Some(900.0));
        // Unknown: all workers share it.
        assert_eq!(Governor { senders: 0, ..g }.share(&cfg, 4), Some(900.0 / 4.0));
    }
}
