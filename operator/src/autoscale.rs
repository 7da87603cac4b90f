//! Throughput-seeking autoscaling, as a pure function: from the scan's rate
//! and throttles now and the state kept since the last step (in status, so
//! a restarted operator continues), how many workers to run and whether the
//! store is saturated.
//!
//! Grow while the last step raised the scan's rate by a meaningful share of
//! what the added workers should bring and the store does not push back.
//! A step that did not is the store's knee only when the store says so:
//! the rate governor holds most of the fleet's requests at the rate where
//! the store pushed back (reason `Governed`), or the store's latency rose
//! above its baseline (reason `LatencyRise`, it queues). A flat rate with
//! neither is not the store (too few requests in flight, a shard hand-off,
//! a slow window): the fleet grows on. Without latency figures the flat
//! rate alone is the knee (reason `RateFlat`). Shrink one step while
//! throttling beyond what the store answers whatever the load persists
//! over a window (reason `Throttling`). Each message gives the figures. Never below the minimum nor
//! above the maximum (the caller passes `desired_replicas`' answer, which
//! counts the work left, as the maximum). A step waits `dwell` after the
//! last one, so the rate measured is the new fleet's, and it does not flap.
//!
//! A step's rate is judged only once its workers have all been ready for
//! `settle` (pods wait for image pulls or new nodes for minutes: their
//! absence must not look like a knee), or after `patience` with the pods
//! that came. A scan at its own `maxRequestsPerSecond` is not the store's
//! knee: it holds without `StoreSaturated`. A knee is probed again with one
//! more worker every `reprobe` (the store's other tenants come and go).
//!
//! May import: `crd`.

use crate::crd::AutoscaleState;

#[derive(Clone, Debug, PartialEq)]
pub struct AutoscaleConfig {
    /// Seconds after a step before the next (the rate must settle).
    pub dwell_secs: i64,
    /// A step that added workers must raise the rate by at least this share
    /// of what they would bring at the per-worker rate before it.
    pub min_gain: f64,
    /// Throttles per second above this share of the rate are persistent
    /// throttling (also needs at least `min_throttles_per_sec`).
    pub throttle_share: f64,
    pub min_throttles_per_sec: f64,
    /// Seconds a step's workers must all have been ready before its rate
    /// is judged.
    pub settle_secs: i64,
    /// Seconds after a step when it is judged even though some of its
    /// workers never became ready.
    pub patience_secs: i64,
    /// Seconds at a knee before one more worker is tried again.
    pub reprobe_secs: i64,
    /// A rate at this share of `maxRequestsPerSecond` is the scan's ceiling.
    pub ceiling_share: f64,
    /// The governor is the fleet's limit when it holds this share of its
    /// requests.
    pub governed_share: f64,
    /// Latency above this many times the baseline is the store queueing.
    pub latency_rise: f64,
    /// A throttled share above this is no store's noise (the governor's
    /// `max_noise`: BBRv2's loss threshold): throttling, whether or not the
    /// governor holds the fleet yet.
    pub noise_ceiling: f64,
}

impl Default for AutoscaleConfig {
    fn default() -> Self {
        AutoscaleConfig {
            dwell_secs: 60,
            min_gain: 0.5,
            throttle_share: 0.01,
            min_throttles_per_sec: 1.0,
            settle_secs: 20,
            patience_secs: 300,
            reprobe_secs: 600,
            ceiling_share: 0.9,
            governed_share: 0.5,
            latency_rise: 1.5,
            noise_ceiling: 0.02,
        }
    }
}

/// What the operator sees now.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Observation {
    pub now_secs: i64,
    /// HEADs per second of all workers.
    pub rate: f64,
    /// Throttling answers seen so far (cumulative).
    pub throttles: u64,
    /// Worker pods ready.
    pub ready: i32,
    /// The scan's `maxRequestsPerSecond`.
    pub ceiling: Option<f64>,
    /// The share of the fleet's requests its rate governor holds at the
    /// rate where the store pushed back (0 to 1), and what the store did.
    pub governed: f64,
    pub governed_by: &'static str,
    /// The share of requests the store answers 503 whatever the load (the
    /// governor's noise): not a capacity signal.
    pub throttle_noise: f64,
    /// The store's mean HEAD latency in the last window and the lowest
    /// seen, in milliseconds (`None`: not measured).
    pub latency_ms: Option<f64>,
    pub baseline_ms: Option<f64>,
}

impl Observation {
    /// An observation of the rate, throttles and ready workers alone.
    pub fn of(now_secs: i64, rate: f64, throttles: u64, ready: i32) -> Observation {
        Observation {
            now_secs,
            rate,
            throttles,
            ready,
            ceiling: None,
            governed: 0.0,
            governed_by: "",
            throttle_noise: 0.0,
            latency_ms: None,
            baseline_ms: None,
        }
    }

    /// Why the rate stopped following the workers, when the store says so:
    /// the reason and its figures. `None`: the store shows neither signal
    /// (with latency measured), so the fleet is not at the store's knee.
    fn knee_signal(&self, cfg: &AutoscaleConfig, at_step: Option<f64>) -> Option<(&'static str, String)> {
        if self.governed >= cfg.governed_share {
            let by = if self.governed_by.is_empty() {
                "pushback"
            } else {
                self.governed_by
            };
            return Some((
                "Governed",
                format!(
                    "the rate governor holds {:.0} % of the requests where the store pushed back ({by})",
                    self.governed * 100.0
                ),
            ));
        }
        // Risen against the lowest seen and against the latency before the
        // step: a step that did not raise it did not make the store queue.
        let risen = |l: f64, b: f64| b > 0.0 && l >= cfg.latency_rise * b;
        match (self.latency_ms, self.baseline_ms) {
            (Some(l), Some(b)) if risen(l, b) && at_step.is_none_or(|s| risen(l, s)) => Some((
                "LatencyRise",
                format!(
                    "the store's latency rose to {l:.1} ms, {:.1}x its {b:.1} ms baseline{}",
                    l / b,
                    at_step.map_or(String::new(), |s| format!(" ({s:.1} ms before the step)"))
                ),
            )),
            (Some(_), Some(_)) => None,
            _ => Some((
                "RateFlat",
                "the rate stopped growing with the workers".to_string(),
            )),
        }
    }
}

/// Why more workers would not help.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Saturated {
    /// `Governed`, `LatencyRise`, `Throttling` or `RateFlat`.
    pub reason: &'static str,
    pub message: String,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    pub workers: i32,
    pub state: AutoscaleState,
    pub saturated: Option<Saturated>,
    /// Held because the scan runs at its own request ceiling (the message).
    pub at_ceiling: Option<String>,
}

/// The next step. `state`: what the last decision kept (`None`: first
/// time); `min`/`max`: the bounds (max already limited by the work left).
pub fn decide(
    state: Option<&AutoscaleState>,
    obs: &Observation,
    min: i32,
    max: i32,
    cfg: &AutoscaleConfig,
) -> Decision {
    let max = max.max(0);
    let min = min.clamp(0, max);
    let Some(st) = state else {
        return step_to(min.max(1).min(max), None, obs, None);
    };
    let current = st.workers.clamp(min, max);
    let st = &ready_since(st, current, obs);
    let elapsed = obs.now_secs - st.step_time;
    if elapsed < cfg.dwell_secs {
        return hold(st, current, obs);
    }
    let throttled = obs.throttles.saturating_sub(st.throttles_at_step) as f64;
    let throttles_per_sec = throttled / elapsed.max(1) as f64;
    // The share the store answers 503 whatever the load is no capacity
    // signal: only throttling beyond it is, and only while the governor
    // (which tells one from the other window by window) holds the fleet. At
    // a few requests a window it cannot learn a 1 % noise (one 503 in a
    // window says nothing): without the governor's hold, 1 % is not a
    // reason to shrink. Workers that report no latency (older ones) give no
    // governor figures: the share alone, as before.
    // Nor is it needed past what any noise can be (`noise_ceiling`): the
    // governor may be checking a cut then, which holds nothing yet (the
    // family's small store refused 6 % of 800 requests/s at 9 workers while
    // the fleet grew on to 16).
    let share_since = throttled / (obs.rate * elapsed.max(1) as f64).max(1.0);
    let governor_agrees =
        obs.governed >= cfg.governed_share || obs.latency_ms.is_none() || share_since > cfg.noise_ceiling;
    if persistent_throttling(throttled, elapsed, obs, cfg) && governor_agrees {
        let message = format!(
            "the store throttles {:.0}/s ({:.1} % of {:.0} requests/s; {:.1} % answered whatever the load) with {current} workers",
            throttles_per_sec,
            throttles_per_sec / obs.rate.max(1.0) * 100.0,
            obs.rate,
            obs.throttle_noise * 100.0
        );
        let fewer = (current - 1).max(min);
        return step_to(fewer, Some(current), obs, Some(saturated("Throttling", message)))
            .with_knee(Some(fewer))
            .with_knee_reason("Throttling");
    }
    if !judgeable(st, elapsed, obs, cfg) {
        return hold(st, current, obs);
    }
    if let Some(ceiling) = obs.ceiling.filter(|c| obs.rate >= cfg.ceiling_share * c) {
        let message = format!(
            "{:.0} requests/s with {current} workers: the scan runs at its maxRequestsPerSecond ({ceiling:.0}); more workers would not raise it",
            obs.rate
        );
        return hold(st, current, obs).with_at_ceiling(message);
    }
    if let Some(knee) = st.knee {
        let at = knee.clamp(min, max);
        let reason = knee_reason(st.knee_reason.as_deref());
        if elapsed >= cfg.reprobe_secs && at < max {
            let message = format!(
                "{:.0} requests/s with {at} workers: trying {} again",
                obs.rate,
                at + 1
            );
            // At the knee the store's latency may already be risen (its queue
            // full): the probe is judged against the lowest seen alone.
            let mut probe = step_to(at + 1, Some(at), obs, Some(saturated(reason, message)));
            probe.state.latency_at_step = None;
            return probe;
        }
        // The signal shows at the knee's size or only past it.
        let figures = obs.knee_signal(cfg, None).map_or_else(
            || format!("held where more workers met {}", describe(reason)),
            |(_, figures)| figures,
        );
        let message = format!("{:.0} requests/s with {at} workers: {figures}", obs.rate);
        return hold(st, at, obs).with_saturated(saturated(reason, message));
    }
    if let Some(before) = st.workers_before.filter(|b| *b < current) {
        let per_worker = st.rate_before / before.max(1) as f64;
        let expected = per_worker * (current - before) as f64;
        let flat = obs.rate - st.rate_before < cfg.min_gain * expected;
        if let Some((reason, figures)) = obs.knee_signal(cfg, st.latency_at_step).filter(|_| flat) {
            let message = format!(
                "{:.0} requests/s with {current} workers, {:.0}/s with {before}: {figures}",
                obs.rate, st.rate_before
            );
            // The knee: the fewest workers that serve today's rate at the
            // smaller fleet's rate per worker (a step of half the fleet
            // overshoots it; going back all the way would give up what the
            // step did gain).
            let knee = knee_between(before, current, obs.rate, per_worker).clamp(min, max);
            let decision = if knee == current {
                hold(st, current, obs).with_saturated(saturated(reason, message))
            } else {
                step_to(knee, Some(current), obs, Some(saturated(reason, message)))
            };
            return decision.with_knee(Some(knee)).with_knee_reason(reason);
        }
    }
    if current < max {
        let more = (current + (current / 2).max(1)).min(max);
        return step_to(more, Some(current), obs, None);
    }
    hold(st, current, obs)
}

/// Whether `throttled` throttles over the `elapsed` seconds since the step
/// are throttling beyond what the store answers whatever the load: above
/// `throttle_share` plus the noise of the requests sent, by more than chance
/// (3 sigmas of that count), and at least `min_throttles_per_sec`. Without
/// the chance, a store whose noise the governor has not learnt (too few
/// requests a window to tell it) and that answers 1.06 % of 280 requests a
/// second 503 whatever the load was above 1 % half the time: the family's
/// sporadic row shrank to one worker and sat there.
fn persistent_throttling(throttled: f64, elapsed: i64, obs: &Observation, cfg: &AutoscaleConfig) -> bool {
    let secs = elapsed.max(1) as f64;
    let expected = (cfg.throttle_share + obs.throttle_noise) * obs.rate * secs;
    throttled > expected + 3.0 * expected.sqrt() && throttled > cfg.min_throttles_per_sec * secs
}

/// The fewest workers between `before` and `current` that serve `rate` at
/// `per_worker` requests per second each.
fn knee_between(before: i32, current: i32, rate: f64, per_worker: f64) -> i32 {
    if per_worker <= 0.0 {
        return before;
    }
    let needed = (rate / per_worker).ceil();
    if needed.is_finite() {
        (needed as i32).clamp(before, current)
    } else {
        before
    }
}

/// The state with the time the step's workers were first all seen ready
/// (cleared while some are not).
fn ready_since(st: &AutoscaleState, current: i32, obs: &Observation) -> AutoscaleState {
    let ready_time = match (obs.ready >= current, st.ready_time) {
        (false, _) => None,
        (true, Some(t)) => Some(t),
        (true, None) => Some(obs.now_secs),
    };
    AutoscaleState {
        ready_time,
        ..st.clone()
    }
}

/// Whether the rate now says what the last step did: its workers have been
/// ready long enough to take shards and reach their pace, or the patience
/// ran out.
fn judgeable(st: &AutoscaleState, elapsed: i64, obs: &Observation, cfg: &AutoscaleConfig) -> bool {
    let settled = st.ready_time.is_some_and(|t| obs.now_secs - t >= cfg.settle_secs);
    settled || elapsed >= cfg.patience_secs
}

fn describe(reason: &str) -> &'static str {
    match reason {
        "Governed" => "the store's pushback (the rate governor held the fleet)",
        "LatencyRise" => "the store's latency rising",
        "Throttling" => "throttling",
        _ => "a rate that stopped growing",
    }
}

/// A knee's reason as kept in status (older states kept none: `RateFlat`).
fn knee_reason(kept: Option<&str>) -> &'static str {
    match kept {
        Some("Governed") => "Governed",
        Some("LatencyRise") => "LatencyRise",
        Some("Throttling") => "Throttling",
        _ => "RateFlat",
    }
}

fn saturated(reason: &'static str, message: String) -> Saturated {
    Saturated { reason, message }
}

/// A step to `workers` now, from `before`.
fn step_to(workers: i32, before: Option<i32>, obs: &Observation, saturated: Option<Saturated>) -> Decision {
    Decision {
        workers,
        state: AutoscaleState {
            step_time: obs.now_secs,
            workers,
            workers_before: before,
            rate_before: obs.rate,
            throttles_at_step: obs.throttles,
            knee: None,
            knee_reason: None,
            latency_at_step: obs.latency_ms,
            ready_time: None,
        },
        saturated,
        at_ceiling: None,
    }
}

/// No step: the state stays (its clock too), the workers within bounds.
fn hold(st: &AutoscaleState, workers: i32, _obs: &Observation) -> Decision {
    Decision {
        workers,
        state: AutoscaleState {
            workers,
            ..st.clone()
        },
        saturated: None,
        at_ceiling: None,
    }
}

impl Decision {
    fn with_at_ceiling(mut self, message: String) -> Decision {
        self.at_ceiling = Some(message);
        self
    }

    fn with_knee(mut self, knee: Option<i32>) -> Decision {
        self.state.knee = knee;
        self
    }

    fn with_knee_reason(mut self, reason: &str) -> Decision {
        self.state.knee_reason = Some(reason.to_string());
        self
    }

    fn with_saturated(mut self, s: Saturated) -> Decision {
        self.saturated = Some(s);
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obs(now_secs: i64, rate: f64, throttles: u64) -> Observation {
        Observation::of(now_secs, rate, throttles, i32::MAX)
    }

    /// What a simulated store and cluster show at one reconcile.
    #[derive(Default)]
    struct Seen {
        rate: f64,
        throttles_per_sec: u64,
        ready: i32,
        /// The governor's held share and the store's noise.
        governed: f64,
        noise: f64,
        /// Latency and its baseline (ms).
        latency: Option<(f64, f64)>,
    }

    /// Run `decide` every 10 s; `world(now, workers, secs since the
    /// workers changed)` says what the operator sees. The worker counts
    /// taken and the last condition.
    fn simulate(
        min: i32,
        max: i32,
        steps: usize,
        ceiling: Option<f64>,
        mut world: impl FnMut(i64, i32, i64) -> Seen,
    ) -> (Vec<i32>, Option<Saturated>, Option<String>) {
        let cfg = AutoscaleConfig::default();
        let mut d = decide(None, &obs(0, 0.0, 0), min, max, &cfg);
        let (mut seen, mut throttles, mut changed_at) = (vec![d.workers], 0, 0);
        let (mut saturated, mut at_ceiling) = (None, None);
        for i in 1..=steps {
            let now = 10 * i as i64;
            let w = world(now, d.workers, now - changed_at);
            throttles += 10 * w.throttles_per_sec;
            let o = Observation {
                ceiling,
                governed: w.governed,
                governed_by: "throttling",
                throttle_noise: w.noise,
                latency_ms: w.latency.map(|l| l.0),
                baseline_ms: w.latency.map(|l| l.1),
                ..Observation::of(now, w.rate, throttles, w.ready)
            };
            d = decide(Some(&d.state), &o, min, max, &cfg);
            if seen.last() != Some(&d.workers) {
                seen.push(d.workers);
                changed_at = now;
            }
            // As apply.rs: the condition changes with a judgement, not
            // while a step waits.
            if d.saturated.is_some() || d.state.step_time == now {
                saturated = d.saturated.clone();
            }
            at_ceiling = d.at_ceiling.clone();
        }
        (seen, saturated, at_ceiling)
    }

    /// Run `decide` every 10 s against a store whose rate is `store(workers)`
    /// and whose throttles per second are `throttling(workers)`, every
    /// worker ready at once.
    fn run(
        min: i32,
        max: i32,
        steps: usize,
        store: impl Fn(i32) -> f64,
        throttling: impl Fn(i32) -> u64,
    ) -> (Vec<i32>, Option<Saturated>) {
        let (seen, saturated, _) = simulate(min, max, steps, None, |_, workers, _| Seen {
            rate: store(workers),
            throttles_per_sec: throttling(workers),
            ready: workers,
            ..Seen::default()
        });
        (seen, saturated)
    }

    #[test]
    fn grows_while_each_step_raises_the_rate_up_to_the_maximum() {
        // Linear store: every worker adds 1,000/s.
        let (seen, d) = run(1, 10, 60, |w| 1_000.0 * w as f64, |_| 0);
        assert_eq!(seen, vec![1, 2, 3, 4, 6, 9, 10]);
        assert_eq!(d, None, "the maximum is not saturation");
    }

    #[test]
    fn holds_at_the_knee_with_store_saturated_rate_flat() {
        // Capacity 4,200/s: 5 workers do hardly more than 4, and no
        // throttling.
        let (seen, d) = run(1, 20, 100, |w| (1_000.0 * w as f64).min(4_200.0), |_| 0);
        // Back to the fewest that serve 4,200/s at 1,000/s each: 5. (Later,
        // a probe of 6 comes back to 5.)
        assert!(
            seen.starts_with(&[1, 2, 3, 4, 6, 5]),
            "back to the knee: {seen:?}"
        );
        assert!((5..=6).contains(seen.last().unwrap()), "{seen:?}");
        let s = d.expect("saturated at the knee");
        assert_eq!(s.reason, "RateFlat");
        assert!(s.message.contains("4200"), "{}", s.message);
    }

    #[test]
    fn a_step_past_the_knee_keeps_the_workers_its_gain_needs() {
        // 450/s a worker up to 4,600/s: 9 workers serve 4,050/s, 13 only
        // 4,600/s (less than half of what 4 more would bring), but going
        // back to 9 would give up 550/s. 11 serve it.
        let (seen, d) = run(1, 16, 100, |w| (450.0 * w as f64).min(4_600.0), |_| 0);
        assert!(seen.starts_with(&[1, 2, 3, 4, 6, 9, 13, 11]), "{seen:?}");
        assert!((11..=12).contains(seen.last().unwrap()), "{seen:?}");
        assert_eq!(d.expect("saturated at the knee").reason, "RateFlat");
        assert_eq!(knee_between(4, 6, 4_000.0, 1_000.0), 4, "flat: the smaller fleet");
        assert_eq!(knee_between(4, 6, 9_000.0, 1_000.0), 6, "never past the step");
        assert_eq!(knee_between(4, 6, 5_000.0, 0.0), 4, "no rate per worker known");
    }

    #[test]
    fn shrinks_one_step_while_throttling_persists_and_never_below_the_minimum() {
        // Throttling at any size above 3 workers.
        let (seen, d) = run(2, 8, 200, |w| 1_000.0 * w as f64, |w| if w > 3 { 100 } else { 0 });
        assert_eq!(*seen.last().unwrap(), 3, "{seen:?}");
        assert!(d.is_some());
        // Throttling at every size: down to the minimum, and it stays there.
        let (seen, d) = run(2, 8, 200, |w| 1_000.0 * w as f64, |_| 100);
        assert_eq!(*seen.last().unwrap(), 2, "{seen:?}");
        assert_eq!(d.unwrap().reason, "Throttling");
        assert!(seen.iter().all(|w| (2..=8).contains(w)), "{seen:?}");
    }

    #[test]
    fn a_few_throttles_are_not_persistent_throttling() {
        // 2/s against 5,000 requests/s: under 1 %.
        let (seen, _) = run(1, 5, 60, |w| 1_000.0 * w as f64, |_| 2);
        assert_eq!(*seen.last().unwrap(), 5, "{seen:?}");
    }

    #[test]
    fn waits_the_dwell_time_between_steps() {
        let cfg = AutoscaleConfig::default();
        let d = decide(None, &obs(0, 0.0, 0), 1, 10, &cfg);
        assert_eq!(d.workers, 1);
        let d2 = decide(Some(&d.state), &obs(30, 900.0, 0), 1, 10, &cfg);
        let unchanged = AutoscaleState {
            ready_time: Some(30),
            ..d.state.clone()
        };
        assert_eq!(
            (d2.workers, &d2.state),
            (1, &unchanged),
            "too early: nothing changes but the time the workers were seen ready"
        );
        let d3 = decide(Some(&d2.state), &obs(60, 1_000.0, 0), 1, 10, &cfg);
        assert_eq!(d3.workers, 2);
        assert_eq!(d3.state.rate_before, 1_000.0);
        assert_eq!(d3.state.workers_before, Some(1));
    }

    #[test]
    fn bounds_win_over_the_state() {
        let cfg = AutoscaleConfig::default();
        let st = AutoscaleState {
            step_time: 0,
            workers: 9,
            workers_before: Some(6),
            rate_before: 6_000.0,
            throttles_at_step: 0,
            knee: None,
            knee_reason: None,
            latency_at_step: None,
            ready_time: None,
        };
        // Work left allows only 3 now: at once, even within the dwell time.
        assert_eq!(decide(Some(&st), &obs(5, 9_000.0, 0), 1, 3, &cfg).workers, 3);
        // The minimum went up.
        assert_eq!(decide(Some(&st), &obs(5, 9_000.0, 0), 12, 20, &cfg).workers, 12);
        // No work left: none.
        assert_eq!(decide(Some(&st), &obs(500, 9_000.0, 0), 1, 0, &cfg).workers, 0);
        assert_eq!(decide(None, &obs(0, 0.0, 0), 1, 0, &cfg).workers, 0);
    }

    #[test]
    fn workers_still_starting_are_not_a_knee() {
        // Pods take 150 s to become ready (image pulls, new nodes); the
        // rate counts only ready workers, 1,000/s each.
        let (seen, d, _) = simulate(1, 8, 200, None, |_, workers, since| {
            let ready = if since >= 150 { workers } else { workers.min(1) };
            Seen {
                rate: 1_000.0 * ready as f64,
                throttles_per_sec: 0,
                ready,
                ..Seen::default()
            }
        });
        assert_eq!(*seen.last().unwrap(), 8, "grows to the maximum: {seen:?}");
        assert_eq!(d, None, "no knee while pods start");
    }

    #[test]
    fn workers_that_never_start_are_judged_after_the_patience() {
        // A quota admits 3 worker pods: the 4th never runs.
        let (seen, d, _) = simulate(1, 8, 200, None, |_, workers, _| {
            let ready = workers.min(3);
            Seen {
                rate: 1_000.0 * ready as f64,
                throttles_per_sec: 0,
                ready,
                ..Seen::default()
            }
        });
        // Judged after the patience: 4 did no better than 3. Probes of 4
        // come back to 3 every time.
        assert!(seen.starts_with(&[1, 2, 3, 4, 3]), "{seen:?}");
        assert!(seen[4..].iter().all(|w| (3..=4).contains(w)), "{seen:?}");
        assert_eq!(d.expect("a knee").reason, "RateFlat");
    }

    #[test]
    fn the_scans_own_request_ceiling_is_no_store_saturation() {
        // maxRequestsPerSecond 2,500: the governor holds the fleet there.
        let (seen, d, at_ceiling) = simulate(1, 8, 100, Some(2_500.0), |_, workers, _| Seen {
            rate: (1_000.0 * workers as f64).min(2_500.0),
            throttles_per_sec: 0,
            ready: workers,
            ..Seen::default()
        });
        assert_eq!(*seen.last().unwrap(), 3, "{seen:?}");
        assert_eq!(d, None, "the store is not saturated");
        let message = at_ceiling.expect("held at the ceiling");
        assert!(message.contains("maxRequestsPerSecond (2500)"), "{message}");
    }

    #[test]
    fn a_knee_is_probed_again_and_followed_when_the_store_frees_up() {
        // Capacity 4,200/s until t = 1,500 s, then 7,200/s (another tenant
        // left).
        let mut most_at_the_knee = 0;
        let (seen, d, _) = simulate(1, 10, 400, None, |now, workers, _| {
            let capacity = if now < 1_500 { 4_200.0 } else { 7_200.0 };
            if (1_000..1_500).contains(&now) {
                most_at_the_knee = most_at_the_knee.max(workers);
            }
            Seen {
                rate: (1_000.0 * workers as f64).min(capacity),
                throttles_per_sec: 0,
                ready: workers,
                ..Seen::default()
            }
        });
        assert!(
            most_at_the_knee <= 6 && seen.windows(3).any(|w| w == [5, 6, 5]),
            "at the first knee only one more worker is tried: {seen:?}"
        );
        let last = *seen.last().unwrap();
        assert!(
            (7..=8).contains(&last),
            "the fleet follows the store to its new capacity: {seen:?}"
        );
        assert_eq!(d.expect("saturated again").reason, "RateFlat");
    }

    /// A store of capacity 4,200/s, 1,000/s a worker, whose latency (2 ms
    /// unloaded) grows as requests queue past the capacity.
    fn queueing(workers: i32) -> Seen {
        let offered = 1_000.0 * workers as f64;
        // Past the capacity the queue fills: its 5 ms on every request.
        let latency = if offered > 4_200.0 { 7.0 } else { 2.0 };
        Seen {
            rate: offered.min(4_200.0),
            ready: workers,
            latency: Some((latency, 2.0)),
            ..Seen::default()
        }
    }

    #[test]
    fn a_store_that_queues_is_the_knee_with_its_latency_figures() {
        let (seen, d, _) = simulate(1, 20, 100, None, |_, workers, _| queueing(workers));
        assert!(seen.starts_with(&[1, 2, 3, 4, 6, 5]), "{seen:?}");
        let s = d.expect("saturated at the knee");
        assert_eq!(s.reason, "LatencyRise", "{s:?}");
        assert!(s.message.contains("3.5x its 2.0 ms baseline"), "{}", s.message);
    }

    #[test]
    fn a_step_that_made_the_store_queue_says_so() {
        let st = AutoscaleState {
            step_time: 0,
            workers: 6,
            workers_before: Some(4),
            rate_before: 4_000.0,
            latency_at_step: Some(2.0),
            ready_time: Some(0),
            ..AutoscaleState::default()
        };
        let o = Observation {
            latency_ms: Some(7.0),
            baseline_ms: Some(2.0),
            ..Observation::of(100, 4_200.0, 0, 6)
        };
        let d = decide(Some(&st), &o, 1, 20, &AutoscaleConfig::default());
        let s = d.saturated.expect("the knee");
        assert_eq!((d.workers, s.reason), (5, "LatencyRise"));
        assert_eq!(
            s.message,
            "4200 requests/s with 6 workers, 4000/s with 4: the store's latency rose to 7.0 ms, 3.5x its 2.0 ms baseline (2.0 ms before the step)"
        );
    }

    #[test]
    fn a_flat_step_while_the_store_s_latency_holds_is_no_knee() {
        // The rate stalls at 3 and 4 workers for a reason of the fleet's own
        // (too few requests in flight: a shard hand-off), the store's
        // latency flat: not the store. (Before: StoreSaturated, RateFlat,
        // held at 3.)
        let (seen, d, _) = simulate(1, 12, 120, None, |_, workers, _| Seen {
            rate: if (3..=4).contains(&workers) {
                2_100.0
            } else {
                1_000.0 * workers as f64
            },
            ready: workers,
            latency: Some((2.0, 2.0)),
            ..Seen::default()
        });
        assert_eq!(*seen.last().unwrap(), 12, "{seen:?}");
        assert_eq!(d, None);
    }

    #[test]
    fn latency_that_the_step_did_not_raise_is_no_knee() {
        // 4 ms at every size, twice the lowest window ever seen (a noisy
        // baseline, or the clients' own time): a flat step that did not
        // raise it did not make the store queue. (Measured in a quick
        // family run: LatencyRise at 0.3 C.)
        let (seen, d, _) = simulate(1, 10, 120, None, |_, workers, _| Seen {
            rate: if (3..=4).contains(&workers) {
                2_100.0
            } else {
                1_000.0 * workers as f64
            },
            ready: workers,
            latency: Some((4.0, 2.0)),
            ..Seen::default()
        });
        assert_eq!(*seen.last().unwrap(), 10, "{seen:?}");
        assert_eq!(d, None);
    }

    #[test]
    fn the_governor_holding_the_fleet_is_the_knee_and_says_so() {
        // Past 3,000/s the store throttles and the governor holds the fleet
        // there; latency is flat (a short queue refuses rather than waits).
        let (seen, d, _) = simulate(1, 12, 120, None, |_, workers, _| {
            let offered = 1_000.0 * workers as f64;
            Seen {
                rate: offered.min(3_000.0),
                ready: workers,
                governed: if offered > 3_000.0 { 1.0 } else { 0.0 },
                latency: Some((2.0, 2.0)),
                ..Seen::default()
            }
        });
        assert!((3..=4).contains(seen.last().unwrap()), "{seen:?}");
        let s = d.expect("saturated");
        assert_eq!(s.reason, "Governed");
        assert!(
            s.message.contains("the rate governor held the fleet"),
            "{}",
            s.message
        );
        // When judged, with the figures.
        let st = AutoscaleState {
            step_time: 0,
            workers: 6,
            workers_before: Some(4),
            rate_before: 3_000.0,
            ready_time: Some(0),
            ..AutoscaleState::default()
        };
        let o = Observation {
            governed: 0.97,
            governed_by: "throttling",
            latency_ms: Some(2.0),
            baseline_ms: Some(2.0),
            ..Observation::of(100, 3_050.0, 0, 6)
        };
        let d = decide(Some(&st), &o, 1, 12, &AutoscaleConfig::default());
        let s = d.saturated.expect("the knee");
        assert_eq!(
            (d.workers, s.reason),
            (5, "Governed"),
            "the fewest that serve 3,050/s at 750/s each"
        );
        assert!(
            s.message
                .contains("holds 97 % of the requests where the store pushed back (throttling)"),
            "{}",
            s.message
        );
    }

    #[test]
    fn sporadic_throttling_is_not_persistent_throttling() {
        // The store answers 1 % of requests 503 whatever the load, and the
        // fleet sees 1.5 %: within 1 % of the noise. (Before: Throttling, the
        // fleet shrunk to the minimum.)
        let (seen, d, _) = simulate(1, 8, 120, None, |_, workers, _| Seen {
            rate: 1_000.0 * workers as f64,
            throttles_per_sec: 15 * workers as u64,
            ready: workers,
            noise: 0.01,
            latency: Some((2.0, 2.0)),
            ..Seen::default()
        });
        assert_eq!(*seen.last().unwrap(), 8, "{seen:?}");
        assert_eq!(d, None);
        // Nor is 1.1 % when the governor, at a few requests a window, has
        // learnt no noise and does not hold the fleet. (Measured in a quick
        // family run: Throttling, 1 worker, 0.08 C.)
        let (seen, d, _) = simulate(1, 8, 120, None, |_, workers, _| Seen {
            rate: 70.0 * workers as f64,
            throttles_per_sec: (0.77 * workers as f64).ceil() as u64,
            ready: workers,
            latency: Some((40.0, 40.0)),
            ..Seen::default()
        });
        assert_eq!(*seen.last().unwrap(), 8, "{seen:?}");
        assert_eq!(d, None);
        // Nor 1.06 % of 280 requests/s when the governor holds the fleet
        // (its cut for a window of 7 503s) and has learnt no noise: within
        // chance of 1 % over the step (the family's sporadic row, one
        // worker, shrank to the minimum and held there). 3 % is throttling.
        let st = AutoscaleState {
            step_time: 0,
            workers: 2,
            ready_time: Some(0),
            ..AutoscaleState::default()
        };
        for (share, shrinks) in [(0.0106, false), (0.03, true)] {
            let o = Observation {
                governed: 1.0,
                latency_ms: Some(5.0),
                baseline_ms: Some(5.0),
                ..Observation::of(60, 280.0, (280.0 * 60.0 * share) as u64, 2)
            };
            let d = decide(Some(&st), &o, 1, 8, &AutoscaleConfig::default());
            let reason = d.saturated.as_ref().map(|s| s.reason);
            assert_eq!(reason == Some("Throttling"), shrinks, "{share}: {d:?}");
        }
        // 6 % while the governor checks its cut (it holds nothing yet) is
        // throttling all the same: past any store's noise.
        let o = Observation {
            governed: 0.0,
            latency_ms: Some(17.0),
            baseline_ms: Some(15.5),
            ..Observation::of(60, 800.0, (800.0 * 60.0 * 0.06) as u64, 2)
        };
        let d = decide(Some(&st), &o, 1, 8, &AutoscaleConfig::default());
        assert_eq!(d.saturated.map(|s| s.reason), Some("Throttling"), "{:?}", d.state);
        assert_eq!(d.workers, 1);
        // 3 % with the governor holding the fleet is persistent throttling,
        // and says how much.
        let (seen, d, _) = simulate(1, 8, 120, None, |_, workers, _| Seen {
            rate: 1_000.0 * workers as f64,
            throttles_per_sec: if workers > 2 { 30 * workers as u64 } else { 0 },
            governed: if workers > 2 { 1.0 } else { 0.0 },
            ready: workers,
            noise: 0.01,
            latency: Some((2.0, 2.0)),
        });
        assert!(*seen.last().unwrap() <= 3, "{seen:?}");
        assert_eq!(d.expect("throttling").reason, "Throttling");
        let st = AutoscaleState {
            step_time: 0,
            workers: 4,
            ..AutoscaleState::default()
        };
        let o = Observation {
            throttle_noise: 0.01,
            ..Observation::of(100, 4_000.0, 12_000, 4)
        };
        let s = decide(Some(&st), &o, 1, 8, &AutoscaleConfig::default())
            .saturated
            .unwrap();
        assert_eq!(
            s.message,
            "the store throttles 120/s (3.0 % of 4000 requests/s; 1.0 % answered whatever the load) with 4 workers"
        );
    }

    #[test]
    fn a_knee_keeps_its_reason_while_held() {
        let cfg = AutoscaleConfig::default();
        let st = AutoscaleState {
            step_time: 0,
            workers: 5,
            knee: Some(5),
            knee_reason: Some("LatencyRise".into()),
            ready_time: Some(0),
            ..AutoscaleState::default()
        };
        let o = Observation {
            latency_ms: Some(5.0),
            baseline_ms: Some(2.0),
            ..Observation::of(100, 4_200.0, 0, 5)
        };
        let s = decide(Some(&st), &o, 1, 20, &cfg)
            .saturated
            .expect("held at the knee");
        assert_eq!(s.reason, "LatencyRise");
        assert!(s.message.contains("2.5x its 2.0 ms baseline"), "{}", s.message);
        assert_eq!(knee_reason(None), "RateFlat", "a state kept before reasons were");
    }
}
