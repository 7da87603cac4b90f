//! Throughput-seeking autoscaling, as a pure function: from the scan's rate
//! and throttles now and the state kept since the last step (in status, so
//! a restarted operator continues), how many workers to run and whether the
//! store is saturated.
//!
//! Grow while the last step raised the scan's rate by a meaningful share of
//! what the added workers should bring and the store does not push back;
//! hold at the knee (the rate stopped following the workers: condition
//! `StoreSaturated`, reason `RateFlat`); shrink one step while throttling
//! persists over a window (reason `Throttling`). Never below the minimum nor
//! above the maximum (the caller passes `desired_replicas`' answer, which
//! counts the work left, as the maximum). A step waits `dwell` after the
//! last one, so the rate measured is the new fleet's, and it does not flap.
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
}

impl Default for AutoscaleConfig {
    fn default() -> Self {
        AutoscaleConfig {
            dwell_secs: 60,
            min_gain: 0.5,
            throttle_share: 0.01,
            min_throttles_per_sec: 1.0,
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
}

/// Why more workers would not help.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Saturated {
    /// `RateFlat` or `Throttling`.
    pub reason: &'static str,
    pub message: String,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    pub workers: i32,
    pub state: AutoscaleState,
    pub saturated: Option<Saturated>,
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
    let elapsed = obs.now_secs - st.step_time;
    if elapsed < cfg.dwell_secs {
        return hold(st, current, obs);
    }
    let throttles_per_sec = obs.throttles.saturating_sub(st.throttles_at_step) as f64 / elapsed.max(1) as f64;
    if throttles_per_sec > (cfg.throttle_share * obs.rate).max(cfg.min_throttles_per_sec) {
        let message = format!(
            "the store throttles ({:.0}/s) at {:.0} requests/s with {current} workers",
            throttles_per_sec, obs.rate
        );
        let fewer = (current - 1).max(min);
        return step_to(fewer, Some(current), obs, Some(saturated("Throttling", message)))
            .with_knee(Some(fewer));
    }
    if let Some(knee) = st.knee {
        let at = knee.clamp(min, max);
        let message = format!(
            "{:.0} requests/s: the rate stopped growing with the workers at {at}",
            obs.rate
        );
        return hold(st, at, obs).with_saturated(saturated("RateFlat", message));
    }
    if let Some(before) = st.workers_before.filter(|b| *b < current) {
        let per_worker = st.rate_before / before.max(1) as f64;
        let expected = per_worker * (current - before) as f64;
        if obs.rate - st.rate_before < cfg.min_gain * expected {
            let message = format!(
                "{:.0} requests/s with {current} workers, {:.0}/s with {before}: more workers do not raise the rate",
                obs.rate, st.rate_before
            );
            // The knee: the smaller fleet did as well.
            return step_to(
                before.clamp(min, max),
                Some(current),
                obs,
                Some(saturated("RateFlat", message)),
            )
            .with_knee(Some(before.clamp(min, max)));
        }
    }
    if current < max {
        let more = (current + (current / 2).max(1)).min(max);
        return step_to(more, Some(current), obs, None);
    }
    hold(st, current, obs)
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
        },
        saturated,
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
    }
}

impl Decision {
    fn with_knee(mut self, knee: Option<i32>) -> Decision {
        self.state.knee = knee;
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
        Observation {
            now_secs,
            rate,
            throttles,
        }
    }

    /// Run `decide` every 10 s against a store whose rate is `store(workers)`
    /// and whose throttles per second are `throttling(workers)`.
    fn run(
        min: i32,
        max: i32,
        steps: usize,
        store: impl Fn(i32) -> f64,
        throttling: impl Fn(i32) -> u64,
    ) -> (Vec<i32>, Option<Saturated>) {
        let cfg = AutoscaleConfig::default();
        let mut d = decide(None, &obs(0, 0.0, 0), min, max, &cfg);
        let mut seen = vec![d.workers];
        let mut throttles = 0;
        // The last condition set (between steps a knee keeps it as it was).
        let mut saturated = None;
        for i in 1..=steps {
            throttles += 10 * throttling(d.workers);
            d = decide(
                Some(&d.state),
                &obs(10 * i as i64, store(d.workers), throttles),
                min,
                max,
                &cfg,
            );
            if seen.last() != Some(&d.workers) {
                seen.push(d.workers);
            }
            if d.saturated.is_some() || d.state.knee.is_none() {
                saturated = d.saturated.clone();
            }
        }
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
        // Capacity 4,500/s: 5 workers do what 4 do, and no throttling.
        let (seen, d) = run(1, 20, 100, |w| (1_000.0 * w as f64).min(4_500.0), |_| 0);
        assert_eq!(*seen.last().unwrap(), 4, "back to the knee: {seen:?}");
        assert!(seen.len() <= 7, "settles within a few adjustments: {seen:?}");
        let s = d.expect("saturated at the knee");
        assert_eq!(s.reason, "RateFlat");
        assert!(s.message.contains("4000 requests/s"), "{}", s.message);
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
        assert_eq!(
            (d2.workers, &d2.state),
            (1, &d.state),
            "too early: nothing changes"
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
        };
        // Work left allows only 3 now: at once, even within the dwell time.
        assert_eq!(decide(Some(&st), &obs(5, 9_000.0, 0), 1, 3, &cfg).workers, 3);
        // The minimum went up.
        assert_eq!(decide(Some(&st), &obs(5, 9_000.0, 0), 12, 20, &cfg).workers, 12);
        // No work left: none.
        assert_eq!(decide(Some(&st), &obs(500, 9_000.0, 0), 1, 0, &cfg).workers, 0);
        assert_eq!(decide(None, &obs(0, 0.0, 0), 1, 0, &cfg).workers, 0);
    }
}
