//! The scan-wide adaptive rate governor, as pure state machines: one per
//! key-range partition, so a hot prefix that the store throttles slows only
//! the requests to it. Fed one window of the whole fleet's requests at a time
//! (about a second, summed in Redis by `queue::govern`), it answers the rate
//! the fleet may send at.
//!
//! After the AWS SDKs' adaptive retry mode (smithy-rs client_rate_limiter,
//! CUBIC; see /work/shared/reference/s3-facts.md), adapted to a fleet whose
//! rate is measured, not guessed: no limit until the store pushes back. On
//! pushback, the rate the store served (the lower of the measured and the
//! allowed rate) becomes the `peak`, and the rate is cut below it by a
//! factor that follows the share of throttled requests: 0.9 when a few were
//! (the fleet just touched the store's capacity), down to 0.7 (the SDKs'
//! factor) when many were (it ran far past it). While requests succeed and
//! latency holds, the rate climbs back fast (half the way to the peak per
//! window), then probes past it by a step that grows while nothing pushes
//! back (the store's capacity may have grown: other tenants left). Never
//! above the ceiling (`maxRequestsPerSecond`) nor 2 x the measured rate
//! (growth that nobody uses proves nothing), never below the floor. A
//! latency rise (mean over the window above `latency_rise` x the lowest
//! seen) is the store queueing: the rate drops by `latency_beta` before any
//! 503 comes.
//!
//! Not every 503 is pushback. A store answers a small share of requests 503
//! whatever the load (a partition splitting, a node restarting, a burst
//! turned away by a short queue): the SDKs cut for each one, and a fleet
//! that does sits at a fraction of the capacity (issue 29: a tenth, at
//! 0.06 % 503s). As TCP tells random loss from congestion (BBRv2 reacts
//! only to a loss share above 2 % a round; Linux undoes a cut the network
//! proves spurious), a window is pushback only when its throttled share is
//! above the `noise` (the share the store answers 503 regardless of load)
//! by `share_margin` and by more than chance (3 binomial sigmas). A cut is
//! then checked: if the next window that ran at the lower rate is throttled
//! as much, the 503s did not follow the rate, so they are noise: the cut is
//! undone and the noise learnt. The noise decays towards quieter windows.
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
    /// Consecutive risen windows that make a latency rise.
    pub latency_windows: u64,
    /// Windows after a cut without another.
    pub recovery_windows: u64,
    /// A window's mean latency above this many times the lowest seen is a rise.
    pub latency_rise: f64,
    /// Windows with fewer requests say nothing about latency.
    pub min_requests: u64,
    /// A latency cut whose next window's latency is still above this share
    /// of the latency first cut for did not make the store answer faster.
    pub latency_followed: f64,
    /// Latency cuts in a row that did not make the store answer faster
    /// (0.9^3: 0.73 of the rate) tell a store slower at every load: they
    /// are undone and its latency becomes the baseline.
    pub latency_cuts_to_undo: u64,
    /// Throttling in the first this many windows does not cut: every
    /// worker's first requests arrive at once, the store's queue turns the
    /// burst away, and the backoff that follows makes the rate measured in
    /// such a window a small fraction of what the store serves.
    pub grace_windows: u64,
    /// A window is pushback when its throttled share is above the noise by
    /// at least this much (and by more than chance).
    pub share_margin: f64,
    /// Weight of a quieter window in the noise (it decays towards it).
    pub noise_decay: f64,
    /// Windows after a cut in which it is checked (the fleet takes up to a
    /// window to apply a new rate).
    pub undo_windows: u64,
    /// A throttled share above this is never noise (a store that refuses
    /// this much at any rate is overloaded, whoever by). 2 %, BBRv2's loss
    /// threshold: at 5 % a store whose short queue refuses more as the rate
    /// grows had the noise ratcheted up, cut after undone cut, to 5.3 %
    /// refused (`a_queue_too_short_for_0_9_c_is_served_at_what_its_refusals_allow`).
    pub max_noise: f64,
    /// A window whose attempts per second are below this share of what the
    /// fleet was served the window before (and of the allowed rate) was not
    /// filled by the fleet (a pause of its own, a tail with few keys left):
    /// a cut for it keeps the peak (BBR keeps its bandwidth estimate through
    /// application-limited samples).
    pub app_limited: f64,
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
            latency_windows: 2,
            recovery_windows: 2,
            latency_rise: 2.0,
            min_requests: 20,
            latency_followed: 0.9,
            latency_cuts_to_undo: 3,
            grace_windows: 2,
            share_margin: 0.005,
            noise_decay: 0.1,
            undo_windows: 3,
            max_noise: 0.02,
            app_limited: 0.6,
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

    /// Attempts: requests answered and the throttled ones.
    fn attempts(&self) -> u64 {
        self.requests + self.throttles
    }

    fn attempt_rate(&self) -> f64 {
        self.attempts() as f64 / self.secs.max(1e-3)
    }

    fn throttled_share(&self) -> f64 {
        self.throttles as f64 / self.attempts().max(1) as f64
    }
}

/// A cut being checked: the state before it, to go back to if the 503s do
/// not follow the rate down.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Cut {
    pub rate: Option<f64>,
    pub peak: Option<f64>,
    pub step: f64,
    /// The rate the store served when it was cut for.
    pub served: f64,
    /// The throttled share of the window cut for.
    pub share: f64,
    /// Requests per second answered (not throttled) in that window.
    #[serde(default)]
    pub answered: f64,
    /// The throttles and attempts of that window (the share's evidence).
    #[serde(default)]
    pub cut_throttles: u64,
    #[serde(default)]
    pub cut_attempts: u64,
    /// Since the cut took effect, summed over the windows checked: the
    /// attempts, the throttles, and the throttles a store at its capacity
    /// would have answered (what is beyond what it answered at the cut).
    #[serde(default)]
    pub attempts: u64,
    #[serde(default)]
    pub throttles: u64,
    #[serde(default)]
    pub at_capacity: f64,
    /// Windows left to check it in.
    pub windows_left: u64,
}

/// Latency cuts being checked: the state before the first, and the latency
/// that made it. A store that queues answers faster once the rate is below
/// its capacity (one cut may not get there: a fleet far past it); one that
/// got slower for every load (a node lost, a disk rebuilding, other
/// tenants) does not, and a cut for it would be followed by another each
/// time the latency is read, down to the floor.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct LatencyCut {
    pub rate: Option<f64>,
    pub peak: Option<f64>,
    pub step: f64,
    /// The rate the store served when it was cut for.
    pub served: f64,
    /// The mean latency of the window first cut for (µs).
    pub latency_us: f64,
    /// Cuts in a row that have not lowered it.
    #[serde(default)]
    pub cuts: u64,
}

/// What made the governor cut last (the autoscaler and status say it).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Signal {
    #[default]
    None,
    /// A throttled share above the noise.
    Throttling,
    /// Latency above `latency_rise` x the baseline.
    LatencyRise,
}

impl Signal {
    /// In words, for a status message.
    pub fn describe(self) -> &'static str {
        match self {
            Signal::None => "",
            Signal::Throttling => "throttling",
            Signal::LatencyRise => "latency rise",
        }
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
    /// The share of requests the store answers 503 whatever the load
    /// (learnt from cuts it did not respond to; decays towards quieter
    /// windows).
    #[serde(default)]
    pub noise: f64,
    /// The last cut, while it is checked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checking: Option<Cut>,
    /// Cuts undone: the 503s did not follow the rate.
    #[serde(default)]
    pub undone: u64,
    /// What made the last cut.
    #[serde(default)]
    pub signal: Signal,
    /// The last window with requests: its rate, throttled share and mean
    /// latency (µs), for the autoscaler.
    #[serde(default)]
    pub measured: f64,
    #[serde(default)]
    pub share: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_us: Option<f64>,
    /// Windows left after a cut in which no other cut comes: the 503s and
    /// latencies they hold are of requests sent before it (and their
    /// retries), as TCP cuts once per round trip.
    #[serde(default)]
    pub recovering: u64,
    /// Consecutive windows with latency risen (one is noise).
    #[serde(default)]
    pub risen_windows: u64,
    /// Attempts and throttles of the windows that were not pushback, each
    /// window's weight decaying by `noise_decay`: the store's recent share of
    /// 503s at the rates it served without pushing back. The noise decays
    /// towards it (the mean of many windows, not a window below the mean:
    /// one window of a few hundred requests under 1 % noise holds anything
    /// from none to six 503s, and decaying towards each low one pulled the
    /// noise far below the store's).
    #[serde(default)]
    pub quiet_attempts: f64,
    #[serde(default)]
    pub quiet_throttles: f64,
    /// The last latency cut, until the first window read after it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_cut: Option<LatencyCut>,
    /// What the store served in the window of the last throttling cut, when
    /// that cut kept the peak, while the windows after it are held
    /// ([`Governor::past_a_kept_cut`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kept_cut_served: Option<f64>,
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
        let share = w.throttled_share();
        next.windows += 1;
        next.risen_windows = if risen { self.risen_windows + 1 } else { 0 };
        let recovering = self.recovering > 0;
        next.recovering = self.recovering.saturating_sub(1);
        if !recovering {
            // Only the windows right after a kept cut are judged by it.
            next.kept_cut_served = None;
        }
        if w.requests > 0 {
            next.measured = measured;
            next.share = share;
            next.latency_us = mean.or(self.latency_us);
        }
        if let Some(cut) = &self.checking {
            let cut = self.checked(cut, w, cfg);
            match self.check(&cut, cfg) {
                Checked::Undo => {
                    next.undo(&cut);
                    return next;
                }
                Checked::Confirmed => next.checking = None,
                Checked::NotYet => {
                    next.checking = (cut.windows_left > 1).then(|| Cut {
                        windows_left: cut.windows_left - 1,
                        ..cut
                    });
                }
            }
        }
        // A latency cut is judged by the first window read once the fleet
        // runs at the lower rate (down at least half-way to it): latency
        // fallen (or no longer risen), it stands; not fallen after a few
        // cuts in a row, they are undone; else the next cut deepens it.
        if let (Some(cut), Some(m), false) = (&self.latency_cut, mean, recovering) {
            let lowered = self.rate.unwrap_or(cut.served);
            if measured <= (cut.served + lowered) / 2.0 * 1.001 {
                if m < cut.latency_us * cfg.latency_followed || !risen {
                    next.latency_cut = None;
                } else if cut.cuts >= cfg.latency_cuts_to_undo {
                    next.latency_cut = None;
                    next.undo_latency_cut(cut, m);
                    return next;
                }
            }
        }
        let pushback = self.is_pushback(w, cfg);
        if pushback && self.windows < cfg.grace_windows {
            // A startup burst: counted, not cut for.
        } else if (pushback || risen) && recovering && !(pushback && self.past_a_kept_cut(allowed)) {
            // Requests sent before the last cut, and their retries: hold.
        } else if pushback {
            // A window the store answered nothing in measured no capacity
            // (every request refused, or all of them in their retries'
            // backoff): the cut is from what was allowed, as TCP cuts its
            // window on a loss, and the peak stays. Cut from its served
            // rate, 0, the rate fell to the floor and the peak with it.
            let answered_none = w.requests == 0;
            let served = if answered_none {
                allowed.unwrap_or(self.measured)
            } else {
                measured.min(allowed.unwrap_or(f64::INFINITY))
            };
            let excess = (share - self.noise).max(0.0);
            let beta = (1.0 - cfg.share_weight * excess).clamp(cfg.throttle_beta, cfg.mild_beta);
            next.checking = Some(Cut {
                rate: self.rate,
                peak: self.peak,
                step: self.step,
                served,
                share,
                answered: measured,
                cut_throttles: w.throttles,
                cut_attempts: w.attempts(),
                windows_left: cfg.undo_windows,
                ..Cut::default()
            });
            let kept = if answered_none {
                self.peak
            } else {
                self.peak_kept(w, allowed, cfg)
            };
            next.kept_cut_served = kept.map(|_| served);
            next.cut(served, beta, kept, cfg);
            next.signal = Signal::Throttling;
            next.latency_cut = None;
        } else if risen && next.risen_windows >= cfg.latency_windows && self.rate.is_some() {
            let served = measured.min(allowed.unwrap_or(measured));
            next.latency_cut = Some(match &next.latency_cut {
                Some(run) => LatencyCut {
                    served,
                    cuts: run.cuts + 1,
                    ..run.clone()
                },
                None => LatencyCut {
                    rate: self.rate,
                    peak: self.peak,
                    step: self.step,
                    served,
                    latency_us: mean.unwrap_or_default(),
                    cuts: 1,
                },
            });
            next.kept_cut_served = None;
            next.cut(served, cfg.latency_beta, self.peak_kept(w, allowed, cfg), cfg);
            next.signal = Signal::LatencyRise;
        } else if risen {
            // One risen window is noise (a client's own pause): hold.
        } else if let Some(rate) = self.rate {
            let peak = self.peak.unwrap_or(rate);
            let grown = if self.throttled_above(w, cfg.share_margin / 2.0) {
                // Throttled above the noise, not yet pushback: the store is
                // near its capacity. Hold (CUBIC's plateau), do not probe.
                rate
            } else if rate < peak {
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
        // The noise decays towards the quiet windows' share (never rises
        // here: a share that grows with the rate must stay a signal).
        if !pushback {
            let keep = 1.0 - cfg.noise_decay;
            next.quiet_attempts = self.quiet_attempts * keep + w.attempts() as f64;
            next.quiet_throttles = self.quiet_throttles * keep + w.throttles as f64;
            let quiet = next.quiet_throttles / next.quiet_attempts.max(1.0);
            if next.quiet_attempts >= cfg.min_requests as f64 * 10.0 && quiet < self.noise {
                next.noise = self.noise + cfg.noise_decay * (quiet - self.noise);
            }
        }
        // The baseline learns only from calm windows: no rise, and no
        // throttling beyond the noise. (Not "no throttle at all": a store
        // that answers 1 % 503 whatever the load has a 503 in nearly every
        // window of a few hundred requests, and the family's sporadic row
        // never had a baseline, so the autoscaler could not see the store's
        // latency and took a flat rate for its knee.)
        if let (Some(m), false, false) = (mean, self.throttled_above(w, cfg.share_margin / 2.0), risen) {
            next.baseline_us = Some(self.baseline_us.map_or(m, |b| b.min(m)));
        }
        next
    }

    /// Whether window `w`'s throttling is the store pushing back: its
    /// throttled share above the noise by the margin and by more than
    /// chance (3 binomial sigmas of the noise over this many attempts,
    /// and two throttles: one 503 in a quiet window says nothing).
    pub fn is_pushback(&self, w: &Window, cfg: &GovernorConfig) -> bool {
        self.throttled_above(w, cfg.share_margin)
    }

    /// Whether `w`'s throttled share is above the noise by `margin` and by
    /// more than chance.
    fn throttled_above(&self, w: &Window, margin: f64) -> bool {
        if w.throttles == 0 {
            return false;
        }
        let n = w.attempts() as f64;
        let expected = n * (self.noise + margin);
        // Chance: 3 sigmas of a binomial at the noise, or at the margin
        // while no noise is known (a 1 % noise not yet learnt gives 4
        // throttles in a window of 50 once in 500 windows, not once in 70).
        let p = self.noise.max(margin);
        let chance = 3.0 * (n * p * (1.0 - p)).sqrt();
        w.throttles as f64 > expected + chance + 2.0
    }

    /// The cut with window `w` added to its evidence, once the fleet runs
    /// at the lower rate (the measured rate down at least half-way to it).
    fn checked(&self, cut: &Cut, w: &Window, cfg: &GovernorConfig) -> Cut {
        let lowered = self.rate.unwrap_or(cut.served);
        let took_effect = w.rate() <= (cut.served + lowered) / 2.0 * 1.001;
        if !took_effect || w.attempts() < cfg.min_requests {
            return cut.clone();
        }
        // Had the store been at its capacity, it would now answer what it
        // answered at the cut and throttle only what is beyond (none, below
        // it), besides its noise.
        let attempted = w.attempts() as f64 / w.secs.max(1e-3);
        let at_capacity = (1.0 - cut.answered / attempted).max(self.noise);
        Cut {
            attempts: cut.attempts + w.attempts(),
            throttles: cut.throttles + w.throttles,
            at_capacity: cut.at_capacity + at_capacity * w.attempts() as f64,
            ..cut.clone()
        }
    }

    /// Whether the last cut was for noise, from the windows since it took
    /// effect, pooled. Noise throttles the same share at the lower rate; a
    /// store at its capacity throttles only what is beyond it. So the cut
    /// is undone once the 503s since are more than the capacity explains
    /// by more than chance, as many as the cut window's share explains at
    /// its lowest (3 sigmas below it), and at most `max_noise` (a store
    /// refusing more at any rate is overloaded, whoever by); it is
    /// confirmed once they are clearly fewer than that lowest share. Not
    /// against the cut window's share itself: a cut comes when a window's
    /// share is high by chance, so the next windows' are lower whatever the
    /// cause (with 300 requests a window under 1 %
    /// noise, a window of 7 throttles cuts and the next holds 3; compared
    /// with the cut's 2.3 %, the noise was taken for capacity).
    fn check(&self, cut: &Cut, cfg: &GovernorConfig) -> Checked {
        if cut.attempts == 0 {
            return Checked::NotYet;
        }
        let (n, k) = (cut.attempts as f64, cut.throttles as f64);
        if k / n > cfg.max_noise {
            return Checked::Confirmed;
        }
        // As noise: at least the lowest share the cut window's count allows
        // (3 sigmas below it).
        let cut_k = cut.cut_throttles as f64;
        let lowest = ((cut_k - 3.0 * cut_k.sqrt()) / cut.cut_attempts.max(1) as f64).max(0.0);
        let as_noise = n * lowest;
        if as_noise > 0.0 && k < as_noise - 3.0 * as_noise.sqrt() {
            return Checked::Confirmed;
        }
        let at_capacity = cut.at_capacity;
        let beyond_capacity = k > at_capacity + 2.0 * at_capacity.sqrt() + 2.0;
        let as_noise_would = k >= as_noise - 2.0 * as_noise.sqrt();
        if beyond_capacity && as_noise_would {
            return Checked::Undo;
        }
        Checked::NotYet
    }

    /// Back to the state before the cut: what was cut for is the store's
    /// noise, at least the share of the windows checked.
    fn undo(&mut self, cut: &Cut) {
        self.rate = cut.rate;
        self.peak = cut.peak;
        self.step = cut.step;
        let since = cut.throttles as f64 / cut.attempts.max(1) as f64;
        self.noise = self.noise.max(since.min(cut.share));
        self.checking = None;
        self.undone += 1;
        self.signal = Signal::None;
    }

    /// Back to the state before latency cuts that did not lower the
    /// latency: the store answers in `latency_us` at this load and below,
    /// its new baseline (the lowest seen had only ever gone down).
    fn undo_latency_cut(&mut self, cut: &LatencyCut, latency_us: f64) {
        self.rate = cut.rate;
        self.peak = cut.peak;
        self.step = cut.step;
        self.baseline_us = Some(latency_us);
        self.risen_windows = 0;
        self.recovering = 0;
        self.undone += 1;
        self.signal = Signal::None;
    }

    /// The peak a cut for window `w` keeps instead of the served rate: the
    /// current one, when the fleet attempted under `app_limited` x what it
    /// sent in the window before (and x the `allowed` rate). Such a window's
    /// rate is the fleet's, not the store's: a worker that paused (a CI
    /// machine stalled a debug build for half a second) then sent its
    /// backlog at once had the burst turned away by a short queue, and the
    /// cut made the pause's 66 requests/s the peak of a store serving 300;
    /// probing back from there by 2 % steps took the rest of the scan
    /// (`bench/tests/throttled_scan.rs` at 0.39 C).
    ///
    /// Against the window before, not the allowed rate alone: the climb
    /// lets the limit reach twice the served rate, so a fleet whose fixed
    /// demand sits just above a store's dropped capacity never fills it,
    /// and every cut kept the old store's peak: the fleet cycled into 503s
    /// for good (1.4 % refused at 1.02 C in a review's simulation). A fleet
    /// that sends as much as before is not paused: the peak is kept only
    /// while the fleet's attempts fall by over 40 % a window, and the first
    /// cut after they stop falling sets it from what was served. What that
    /// costs (a review's simulation): when the fleet's demand and the
    /// store's capacity fall in the same window, the climb back towards the
    /// kept peak overshoots into the store's refusals for one window
    /// ([`Governor::past_a_kept_cut`]) before the next cut learns the new
    /// capacity.
    fn peak_kept(&self, w: &Window, allowed: Option<f64>, cfg: &GovernorConfig) -> Option<f64> {
        let sent_before = self.measured.min(allowed?);
        if w.attempt_rate() < cfg.app_limited * sent_before {
            self.peak
        } else {
            None
        }
    }

    /// The last cut kept the peak and the fleet has since climbed past the
    /// rate it was served then: pushback now is of requests sent after the
    /// cut, at rates the store was never shown to take, so it is not held
    /// as the cut's echo. Held, a fleet whose demand and store capacity
    /// fell in the same window climbed towards the kept peak into two
    /// windows of 29-44 % 503s (a review's simulation); one now.
    fn past_a_kept_cut(&self, allowed: Option<f64>) -> bool {
        matches!((self.kept_cut_served, allowed), (Some(served), Some(allowed)) if allowed > served)
    }

    /// The store pushed back at `served` requests per second: remember it as
    /// the peak (or keep `kept`, when higher) and go below it by `beta`.
    fn cut(&mut self, served: f64, beta: f64, kept: Option<f64>, cfg: &GovernorConfig) {
        let mut rate = (served * beta).max(cfg.floor);
        if let Some(c) = cfg.ceiling {
            rate = rate.min(c);
        }
        self.rate = Some(rate);
        self.recovering = cfg.recovery_windows;
        let peak = kept.map_or(served, |k| k.max(served)).max(rate);
        self.peak = Some(peak);
        self.step = (peak * cfg.probe).max(cfg.floor);
    }
}

enum Checked {
    Undo,
    Confirmed,
    NotYet,
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

/// What the status and the autoscaler see of a scan's governors.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Summary {
    /// Throttling answers the fleet saw, all partitions.
    pub throttles: u64,
    /// The governed partitions and their rates (requests/s), lowest first.
    pub limited: Vec<(String, f64)>,
    /// Requests per second in the last window, all partitions.
    pub measured: f64,
    /// Of those, the ones to partitions whose governor holds them (they
    /// ran at 90 % of its rate or more, and its last cut is not being
    /// checked: it may be undone as noise), and why it does.
    pub held: f64,
    pub held_by: Signal,
    /// The share of requests the store answers 503 whatever the load
    /// (mean of the partitions', by their requests).
    pub noise: f64,
    /// The busiest partition's mean HEAD latency in its last window and
    /// the lowest seen (µs).
    pub latency_us: Option<f64>,
    pub baseline_us: Option<f64>,
}

/// A governor holds its partition when it ran at this share of its rate.
pub const HELD_AT: f64 = 0.9;

impl Summary {
    /// The share of the fleet's requests its governors hold back.
    pub fn held_share(&self) -> f64 {
        if self.measured > 0.0 {
            (self.held / self.measured).min(1.0)
        } else {
            0.0
        }
    }
}

/// Sum up the governors (states as Redis holds them: JSON by partition;
/// unreadable ones are skipped).
pub fn summarise<'a>(states: impl IntoIterator<Item = (&'a String, &'a String)>) -> Summary {
    let mut summary = Summary::default();
    let mut busiest = 0.0;
    for (partition, json) in states {
        let Ok(g) = serde_json::from_str::<Governor>(json) else {
            continue;
        };
        summary.throttles += g.throttles;
        if let Some(rate) = g.rate {
            summary.limited.push((partition.clone(), rate));
            // A cut still being checked may be the store's noise (undone
            // within a few windows): it holds nothing the autoscaler should
            // read as the store's capacity.
            if g.measured >= HELD_AT * rate && g.measured > 0.0 && g.checking.is_none() {
                summary.held += g.measured;
                if summary.held_by == Signal::None {
                    summary.held_by = g.signal;
                }
            }
        }
        if g.measured > busiest {
            busiest = g.measured;
            summary.latency_us = g.latency_us;
            summary.baseline_us = g.baseline_us;
        }
        summary.measured += g.measured;
        summary.noise += g.noise * g.measured;
    }
    if summary.measured > 0.0 {
        summary.noise /= summary.measured;
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
        let g = g.step(&throttled(5_000.0, 50), &cfg);
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
        let g = g.step(&throttled(5_000.0, 50), &cfg);
        assert_eq!(g.rate, Some(4_500.0));
        assert_eq!(g.peak, Some(5_000.0));
        assert_eq!(g.throttles, 50);
        // The next two windows hold requests sent before the cut and their
        // retries: no second cut for them (TCP: one cut per round trip).
        let g = g
            .step(&throttled(5_000.0, 2_500), &cfg)
            .step(&throttled(5_000.0, 2_500), &cfg);
        assert_eq!(g.rate, Some(4_500.0), "{g:?}");
        // Many throttled after that (2,500 of 7,500): the SDKs' 0.7, and
        // from what was allowed, not measured (the fleet may still be
        // sending faster than allowed for a moment).
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
        g = g.step(&throttled(1_000.0, 20), &cfg);
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
        // (Below some 500/s a window holds too few requests to tell one
        // 503 from pushback: two are needed, 4 % of 50.)
        for capacity in [500.0, 5_000.0, 300_000.0] {
            let (share_of_capacity, throttled) = against_a_store_of_capacity(capacity, 300);
            assert!(share_of_capacity >= 0.9, "{capacity}: {share_of_capacity:.3} C");
            assert!(
                throttled <= 0.01,
                "{capacity}: {:.2} % throttled",
                throttled * 100.0
            );
        }
    }

    /// The store as a pure function of the rate sent at it in a window of
    /// one second: it serves `capacity` a second; its queue holds
    /// `queue_limit_ms` of work, and a request that would wait longer is
    /// answered 503 at once; and it answers `random` of all requests 503
    /// whatever the load. The refused share is a finite queue's (M/M/1/K,
    /// K the requests the queue holds, ten times that for the fleet's paced
    /// arrivals, a tenth as bursty as Poisson): a short queue turns bursts
    /// away well below C, a long one barely before C; past C it refuses
    /// what is beyond. HEAD service 1 ms, plus the queue's wait.
    #[derive(Clone, Copy)]
    struct PureStore {
        capacity: f64,
        queue_limit_ms: f64,
        random: f64,
    }

    /// A seeded xorshift: the tests are deterministic.
    struct Rng(u64);

    impl Rng {
        fn unit(&mut self) -> f64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            (self.0 >> 11) as f64 / (1u64 << 53) as f64
        }

        /// Binomial(n, p) by its normal approximation (n is large), or
        /// draw by draw when it is small.
        fn binomial(&mut self, n: f64, p: f64) -> f64 {
            if n * p < 20.0 {
                // Poisson(np), Knuth's way.
                let (limit, mut product, mut k) = ((-n * p).exp(), self.unit(), 0.0f64);
                while product > limit {
                    product *= self.unit();
                    k += 1.0;
                }
                return k.min(n);
            }
            let z = (-2.0 * self.unit().max(1e-12).ln()).sqrt() * (std::f64::consts::TAU * self.unit()).cos();
            (n * p + z * (n * p * (1.0 - p)).sqrt()).round().clamp(0.0, n)
        }
    }

    impl PureStore {
        /// The window of `sent` requests in one second.
        fn answer(&self, sent: f64, rng: &mut Rng) -> Window {
            let random = rng.binomial(sent, self.random);
            let rest = sent - random;
            let u = rest / self.capacity;
            let k = 10.0 * self.capacity * self.queue_limit_ms / 1000.0;
            let refused_share = if (u - 1.0).abs() < 1e-9 {
                1.0 / (k + 1.0)
            } else if u < 1.0 {
                (1.0 - u) * u.powf(k) / (1.0 - u.powf(k + 1.0))
            } else {
                (u - 1.0) / (u - u.powf(-k))
            };
            let wait_ms = if u < 0.999 {
                (0.1 * u / (2.0 * (1.0 - u)) / self.capacity * 1000.0).min(self.queue_limit_ms)
            } else {
                self.queue_limit_ms
            };
            let refused = rng.binomial(rest, refused_share.clamp(0.0, 1.0));
            let served = rest - refused;
            Window {
                secs: 1.0,
                requests: served as u64,
                throttles: (random + refused) as u64,
                latency_us: (served * (1_000.0 + wait_ms * 1_000.0)) as u64,
                senders: 0,
            }
        }
    }

    /// A fleet whose own pace (workers, requests in flight) starts at
    /// `start` x C and grows 10 % a window up to 2 C, governed, against
    /// `store` for `windows` windows: the share of C served over the last
    /// half, the share of attempts answered 503 then, and the governor.
    /// `g` after `windows` windows of a fleet sending `demand`/s, or its
    /// limit when lower, to `store`.
    fn run_at(mut g: Governor, store: &PureStore, demand: f64, windows: usize, rng: &mut Rng) -> Governor {
        let cfg = GovernorConfig::default();
        for _ in 0..windows {
            let sent = g.limit(&cfg).map_or(demand, |l| l.min(demand));
            g = g.step(&store.answer(sent, rng), &cfg);
        }
        g
    }

    fn governed_against(store: PureStore, start: f64, windows: usize, seed: u64) -> (f64, f64, Governor) {
        let cfg = GovernorConfig::default();
        let mut rng = Rng(seed);
        let mut g = Governor::default();
        let mut pace = start * store.capacity;
        let (mut served, mut throttled) = (0.0, 0.0);
        for i in 0..windows {
            pace = (pace * 1.1).min(2.0 * store.capacity);
            let sent = g.limit(&cfg).map_or(pace, |l| l.min(pace));
            let w = store.answer(sent, &mut rng);
            if i >= windows / 2 {
                served += w.requests as f64;
                throttled += w.throttles as f64;
            }
            g = g.step(&w, &cfg);
        }
        let late = (windows - windows / 2) as f64;
        (
            served / late / store.capacity,
            throttled / (served + throttled),
            g,
        )
    }

    #[test]
    fn sporadic_503s_at_low_utilisation_do_not_limit_the_fleet() {
        // Issue 29: 0.06 % 503s held a fleet at a tenth of the capacity.
        // A fleet at a tenth of C, pacing itself, under 0.1 % and 1 %
        // random 503s: never cut (1 %: cut once, undone, learnt).
        for random in [0.001, 0.01] {
            let store = PureStore {
                capacity: 50_000.0,
                queue_limit_ms: 50.0,
                random,
            };
            let cfg = GovernorConfig::default();
            let mut rng = Rng(7);
            let mut g = Governor::default();
            for _ in 0..200 {
                let sent = g.limit(&cfg).map_or(5_000.0, |l| l.min(5_000.0));
                g = g.step(&store.answer(sent, &mut rng), &cfg);
            }
            assert!(g.limit(&cfg).is_none_or(|l| l >= 5_000.0), "{random}: {g:?}");
            assert!(g.undone <= 2, "{random}: {g:?}");
            if random >= 0.01 {
                assert!((0.005..=0.0125).contains(&g.noise), "the noise is learnt: {g:?}");
            }
        }
    }

    #[test]
    fn a_few_hundred_requests_a_window_under_sporadic_503s_are_rarely_held() {
        // The family's sporadic rows (issue 29): one worker sends some 300
        // requests a window, so a 1 % noise gives 0 to 7 503s a window. A
        // window of 7 cuts; the next ones hold about 3, fewer than the cut
        // window's share, more than a store at its capacity would answer
        // below it. The cut must be undone and the noise learnt, or the
        // fleet sits held (the autoscaler read it as the store's knee, and
        // as throttling to shrink for, at 0.06 C).
        for (random, seed) in [(0.001, 3u64), (0.01, 5), (0.01, 17), (0.01, 29)] {
            let store = PureStore {
                capacity: 5_000.0,
                queue_limit_ms: 5.0,
                random,
            };
            let cfg = GovernorConfig::default();
            let mut rng = Rng(seed);
            let mut g = Governor::default();
            let pace = 300.0;
            let (mut held, windows) = (0, 1_200);
            for _ in 0..windows {
                let sent = g.limit(&cfg).map_or(pace, |l| l.min(pace));
                let w = store.answer(sent, &mut rng);
                g = g.step(&w, &cfg);
                let json = serde_json::to_string(&g).unwrap();
                let summary = summarise([(&"*".to_string(), &json)]);
                if summary.held_share() > 0.0 {
                    held += 1;
                }
            }
            let what = format!("{random} random, seed {seed}: {g:?}");
            assert!(
                held * 100 <= windows * 2,
                "held {held} of {windows} windows; {what}"
            );
            assert!(g.limit(&cfg).is_none_or(|l| l >= pace), "{what}");
            assert!(g.baseline_us.is_some(), "the store's latency is known: {what}");
            if random >= 0.01 {
                assert!(
                    (0.005..=0.015).contains(&g.noise),
                    "the noise is learnt and kept: {what}"
                );
            }
        }
    }

    #[test]
    fn a_fleet_under_sporadic_503s_climbs_to_the_store_s_capacity() {
        // Capacities 1,000 to 100,000/s, queues from the shortest that
        // lets a client near C (4 requests: 0.8 ms at 5,000/s, 4 ms at
        // 1,000/s; bursts turned away below C) to tens of milliseconds,
        // random 503s at 0, 0.1 % and 1 %: at least 0.9 C served, and at
        // most 1 % of the attempts answered 503 beyond the random ones.
        for capacity in [1_000.0f64, 5_000.0, 100_000.0] {
            for queue_limit_ms in [(4_000.0 / capacity).max(0.5), 5.0, 50.0] {
                for random in [0.0, 0.001, 0.01] {
                    let store = PureStore {
                        capacity,
                        queue_limit_ms,
                        random,
                    };
                    let (share_of_c, throttled, g) = governed_against(store, 0.05, 400, capacity as u64);
                    let what = format!("C {capacity}, queue {queue_limit_ms} ms, {random} random");
                    assert!(share_of_c >= 0.9, "{what}: {share_of_c:.3} C, {g:?}");
                    assert!(
                        throttled <= random + 0.01,
                        "{what}: {:.2} % throttled, {g:?}",
                        throttled * 100.0
                    );
                }
            }
        }
    }

    #[test]
    fn a_store_that_saturates_holds_the_fleet_near_its_capacity() {
        // No random 503s: every 503 is the store's capacity. The fleet is
        // held near C (not above it), at most 1 % answered 503.
        for queue_limit_ms in [1.0, 50.0] {
            let store = PureStore {
                capacity: 5_000.0,
                queue_limit_ms,
                random: 0.0,
            };
            let (share_of_c, throttled, g) = governed_against(store, 2.0, 300, 3);
            assert!((0.9..=1.0).contains(&share_of_c), "{share_of_c:.3} C, {g:?}");
            assert!(throttled <= 0.01, "{:.2} % throttled", throttled * 100.0);
            assert!(g.rate.unwrap() <= 1.1 * 5_000.0, "{g:?}");
            assert_eq!(g.noise, 0.0, "nothing learnt as noise: {g:?}");
        }
    }

    #[test]
    fn a_pushback_in_a_window_the_fleet_did_not_fill_keeps_the_peak() {
        // The fleet settles at a short-queue store's capacity; then one
        // window of its own pause: it sends 0.4 of its limit, in a burst the
        // queue turns a fifth of away (bench/tests/throttled_scan.rs in CI:
        // 85 attempts, 19 refused, at a limit of 179/s). The cut is real,
        // but the pause's rate is not the store's capacity: the fleet is
        // back within a few windows, not after the rest of the scan's
        // probing up from the pause's rate (13 windows before this rule).
        let store = PureStore {
            capacity: 5_000.0,
            queue_limit_ms: 5.0,
            random: 0.0,
        };
        let cfg = GovernorConfig::default();
        let mut rng = Rng(41);
        let mut g = Governor::default();
        let mut before = vec![];
        for _ in 0..200 {
            let sent = g
                .limit(&cfg)
                .map_or(2.0 * store.capacity, |l| l.min(2.0 * store.capacity));
            let w = store.answer(sent, &mut rng);
            before.push(w.requests as f64);
            g = g.step(&w, &cfg);
        }
        let settled = before[150..].iter().sum::<f64>() / 50.0;
        assert!(settled >= 0.9 * store.capacity, "{settled}: {g:?}");
        let paused = 0.4 * g.limit(&cfg).unwrap();
        let stall = Window {
            secs: 1.0,
            requests: (0.8 * paused) as u64,
            throttles: (0.2 * paused) as u64,
            latency_us: (0.8 * paused) as u64 * 1_000,
            senders: 0,
        };
        g = g.step(&stall, &cfg);
        assert_eq!(g.signal, Signal::Throttling, "the burst's refusals cut: {g:?}");
        assert!(g.peak.unwrap() >= 0.9 * settled, "the peak is kept: {g:?}");
        let back = (1..=30)
            .find(|_| {
                let sent = g
                    .limit(&cfg)
                    .map_or(2.0 * store.capacity, |l| l.min(2.0 * store.capacity));
                let w = store.answer(sent, &mut rng);
                g = g.step(&w, &cfg);
                w.requests as f64 >= 0.9 * settled
            })
            .unwrap_or(usize::MAX);
        assert!(
            back <= 6,
            "back at 0.9 of the settled rate after {back} windows: {g:?}"
        );
        // A fleet that fills its limit is cut from what the store served,
        // as before: the capacity dropped.
        let filled = Window {
            secs: 1.0,
            requests: 2_000,
            throttles: 3_000,
            latency_us: 2_000_000,
            senders: 0,
        };
        let g = g.step(&filled, &cfg).step(&filled, &cfg).step(&filled, &cfg);
        assert!(g.peak.unwrap() <= 2_000.0, "{g:?}");
    }

    #[test]
    fn a_window_the_store_answered_nothing_in_cuts_from_the_allowed_rate() {
        // Settled at a store's capacity, then one window in which every
        // request was refused or waited in its retry's backoff: 500
        // throttles and no answer. Cut from its served rate (0), the rate
        // and the peak fell to the floor (1/s) and the fleet climbed back by
        // doubling for a dozen windows; the window measured no capacity.
        let store = PureStore {
            capacity: 5_000.0,
            queue_limit_ms: 5.0,
            random: 0.0,
        };
        let cfg = GovernorConfig::default();
        let mut rng = Rng(3);
        let mut g = run_at(Governor::default(), &store, 10_000.0, 200, &mut rng);
        let settled = g.limit(&cfg).unwrap();
        let refused = Window {
            secs: 1.0,
            requests: 0,
            throttles: 500,
            latency_us: 0,
            senders: 0,
        };
        g = g.step(&refused, &cfg);
        assert_eq!(g.signal, Signal::Throttling, "{g:?}");
        assert!(
            g.limit(&cfg).unwrap() >= 0.6 * settled,
            "cut from the allowed rate: {g:?}"
        );
        assert!(g.peak.unwrap() >= 0.9 * store.capacity, "the peak is kept: {g:?}");
        let back = (1..=30)
            .find(|_| {
                let sent = g.limit(&cfg).map_or(10_000.0, |l| l.min(10_000.0));
                let w = store.answer(sent, &mut rng);
                g = g.step(&w, &cfg);
                w.requests as f64 >= 0.9 * store.capacity
            })
            .unwrap_or(usize::MAX);
        assert!(back <= 6, "back at 0.9 C after {back} windows: {g:?}");
        // A store that refuses everything for good is still backed off:
        // each cut is from the rate allowed before it.
        let before = g.limit(&cfg).unwrap();
        for _ in 0..30 {
            let sent = g.limit(&cfg).unwrap();
            let all_refused = Window {
                secs: 1.0,
                requests: 0,
                throttles: sent as u64,
                latency_us: 0,
                senders: 0,
            };
            g = g.step(&all_refused, &cfg);
        }
        assert!(g.limit(&cfg).unwrap() <= 0.1 * before, "{before} -> {g:?}");
    }

    #[test]
    fn demand_and_capacity_falling_together_overshoot_for_one_window_at_most() {
        // Settled at 5,000/s; then, in one window, the fleet's demand falls
        // to 1,030/s (its keys ran short, or its HEADs waited in backoff)
        // and the store's capacity to 1,000/s; then the demand is back at
        // 5,250/s. The window is not filled, so its cut keeps the peak and
        // the climb heads back towards 5,000: the first window past the
        // cut's served rate that the store refuses is cut for at once, not
        // held as an echo of the cut (two windows of 41 % 503s before).
        let cfg = GovernorConfig::default();
        let mut rng = Rng(11);
        let big = PureStore {
            capacity: 5_000.0,
            queue_limit_ms: 5.0,
            random: 0.0,
        };
        let mut g = run_at(Governor::default(), &big, 10_000.0, 200, &mut rng);
        let small = PureStore {
            capacity: 1_000.0,
            queue_limit_ms: 5.0,
            random: 0.0,
        };
        let mut overshoots = 0;
        for i in 0..40 {
            let demand = if i == 0 { 1_030.0 } else { 5_250.0 };
            let sent = g.limit(&cfg).map_or(demand, |l| l.min(demand));
            let w = small.answer(sent, &mut rng);
            if i > 0 && w.throttled_share() > 0.05 {
                overshoots += 1;
            }
            g = g.step(&w, &cfg);
        }
        assert!(overshoots <= 1, "{overshoots} windows over 5 % refused: {g:?}");
        assert!(g.peak.unwrap() <= 1.2 * small.capacity, "{g:?}");
    }

    #[test]
    fn a_kept_peak_does_not_outlive_a_capacity_drop_below_a_fixed_demand() {
        // A store of 50,000/s falls to 5,000/s under a fleet whose demand is
        // fixed just above the new capacity (1.02 C: its HEADs in flight,
        // not the governor, bound it). The climb lets the limit reach twice
        // the served rate, so the fleet never fills it: were every cut to
        // keep the peak (50,000), the fleet would cycle into the store's
        // 503s for good (1.4 % refused in a review's simulation; 0.1 %
        // before the peak was kept at all). Judged against what the fleet
        // sent the window before, the next cut learns the new capacity.
        let cfg = GovernorConfig::default();
        let mut rng = Rng(7);
        let big = PureStore {
            capacity: 50_000.0,
            queue_limit_ms: 5.0,
            random: 0.0,
        };
        let mut g = run_at(Governor::default(), &big, 100_000.0, 100, &mut rng);
        assert!(g.peak.unwrap() >= 40_000.0, "{g:?}");
        let small = PureStore {
            capacity: 5_000.0,
            queue_limit_ms: 5.0,
            random: 0.0,
        };
        let demand = 1.02 * small.capacity;
        let (mut attempts, mut throttles) = (0, 0);
        for i in 0..400 {
            let sent = g.limit(&cfg).map_or(demand, |l| l.min(demand));
            let w = small.answer(sent, &mut rng);
            if i >= 50 {
                attempts += w.attempts();
                throttles += w.throttles;
            }
            g = g.step(&w, &cfg);
        }
        let refused = throttles as f64 / attempts as f64;
        assert!(
            refused <= 0.005,
            "{:.2} % refused after the drop: {g:?}",
            refused * 100.0
        );
        assert!(
            g.peak.unwrap() <= 1.1 * small.capacity,
            "the old store's peak is gone: {g:?}"
        );
    }

    #[test]
    fn a_queue_too_short_for_0_9_c_is_served_at_what_its_refusals_allow() {
        // Half a request's room at 1,000/s: even paced arrivals overlap,
        // and the store turns a share away that grows with the rate from
        // far below C. The fleet settles where that share stays small.
        let store = PureStore {
            capacity: 1_000.0,
            queue_limit_ms: 0.5,
            random: 0.0,
        };
        // Refusing 1.6 % at half its capacity, this store cannot give 0.9 C
        // with 1 % 503s to any client. The share that a cut does not lower
        // is taken as noise (never above 2 %): the fleet serves at least
        // 0.5 C at most 4 % refused, rather than a tenth of C.
        let (share_of_c, throttled, g) = governed_against(store, 0.05, 400, 11);
        assert!(throttled <= 0.04, "{:.2} % throttled, {g:?}", throttled * 100.0);
        assert!(share_of_c >= 0.5, "{share_of_c:.3} C, {g:?}");
        assert!(g.noise <= GovernorConfig::default().max_noise, "{g:?}");
    }

    #[test]
    fn a_cut_the_503s_did_not_follow_is_undone() {
        let cfg = no_grace();
        let g = Governor::default().step(&calm(5_000.0, 1_000), &cfg);
        // 1 % throttled: above the margin over no known noise, a cut.
        let g = g.step(&throttled(5_000.0, 50), &cfg);
        assert_eq!(g.rate, Some(4_500.0));
        assert_eq!(g.signal, Signal::Throttling);
        // At the lower rate, still 1 %: the 503s did not follow the rate.
        let g = g.step(&throttled(4_500.0, 45), &cfg);
        assert_eq!(g.rate, None, "back to unlimited: {g:?}");
        assert_eq!((g.undone, g.checking.is_none()), (1, true), "{g:?}");
        assert!((g.noise - 45.0 / 4_545.0).abs() < 1e-9, "{g:?}");
        // A cut the 503s did follow stays.
        let g2 = Governor::default().step(&throttled(5_000.0, 200), &cfg);
        let cut = g2.rate.unwrap();
        assert!(
            (cut - 5_000.0 * (1.0 - 4.0 * 200.0 / 5_200.0)).abs() < 1e-6,
            "{g2:?}"
        );
        let g2 = g2.step(&throttled(cut, 2), &cfg);
        assert_eq!((g2.undone, g2.checking.is_none()), (0, true), "{g2:?}");
        assert!(
            g2.rate.unwrap() > cut && g2.rate.unwrap() < 5_000.0,
            "climbing back: {g2:?}"
        );
        // Far past the capacity a cut leaves much throttled, but less: the
        // store answers what it did (1,000/s of 2,000), and the 503s follow.
        let g3 = Governor::default().step(
            &Window {
                throttles: 1_000,
                ..calm(1_000.0, 1_000)
            },
            &cfg,
        );
        assert_eq!(g3.rate, Some(700.0), "measured 1,000 answered, 0.7");
        let g3 = Governor {
            rate: Some(1_400.0),
            ..g3
        };
        let g3 = g3.step(
            &Window {
                throttles: 400,
                ..calm(1_000.0, 1_000)
            },
            &cfg,
        );
        assert_eq!((g3.undone, g3.noise), (0, 0.0), "{g3:?}");
    }

    #[test]
    fn a_cut_is_checked_only_once_the_fleet_runs_at_the_lower_rate() {
        let cfg = no_grace();
        let g = Governor::default().step(&throttled(5_000.0, 200), &cfg);
        assert!(g.rate.unwrap() < 4_500.0, "{g:?}");
        // The workers have not applied it yet: still 5,000/s, not judged
        // (and cut again for the same pushback: it is real).
        let g = g.step(&throttled(5_000.0, 2), &cfg);
        assert!(g.checking.is_some(), "{g:?}");
        assert!(g.is_pushback(&throttled(5_000.0, 200), &cfg));
        assert!(!g.is_pushback(&throttled(5_000.0, 5), &cfg), "0.1 % is not");
        assert!(
            !g.is_pushback(&throttled(50.0, 2), &cfg),
            "nor two 503s in a quiet window"
        );
    }

    #[test]
    fn a_latency_rise_cuts_before_any_throttle() {
        let cfg = no_grace();
        let mut g = Governor::default().step(&calm(1_000.0, 1_000), &cfg);
        g = g.step(&throttled(1_000.0, 20), &cfg);
        g = g.step(&calm(900.0, 1_000), &cfg);
        g = g.step(&calm(g.rate.unwrap(), 1_000), &cfg);
        let before = g.rate.unwrap();
        // Latency 2.5x the lowest seen: the store is queueing. One window
        // could be a pause of the client's own: held; the second cuts.
        let g1 = g.step(&calm(before, 2_500), &cfg);
        assert_eq!(g1.rate, Some(before), "{g1:?}");
        let g2 = g1.step(&calm(before, 2_500), &cfg);
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

    /// A fleet that could send `demand` a window, governed, against a store
    /// whose mean latency in window `i` at rate `sent` is `latency(i, sent)`
    /// (µs), after one throttling cut (so the rate is governed): the mean
    /// rate sent over the last 20 of `windows`, and the governor.
    fn against_latency(demand: f64, windows: usize, latency: impl Fn(usize, f64) -> u64) -> (f64, Governor) {
        let cfg = no_grace();
        let mut g = Governor::default().step(&calm(demand, 1_000), &cfg);
        g = g.step(&throttled(demand, 100), &cfg);
        let mut late = 0.0;
        for i in 0..windows {
            let sent = g.limit(&cfg).map_or(demand, |l| l.min(demand));
            g = g.step(&calm(sent, latency(i, sent)), &cfg);
            if i + 20 >= windows {
                late += sent;
            }
        }
        (late / 20.0, g)
    }

    #[test]
    fn a_store_slower_at_every_load_is_a_new_baseline_not_a_knee() {
        // From window 10 on, every answer takes 2.5 ms whatever the rate (a
        // node lost, a disk rebuilding): the latency cut does not lower it,
        // so it is undone and 2.5 ms is the store's latency now. (Before:
        // a cut each time the latency was read, to some 20 requests/s.)
        let (late, g) = against_latency(5_000.0, 100, |i, _| if i < 10 { 1_000 } else { 2_500 });
        assert!(late >= 0.9 * 5_000.0, "held at {late:.0}/s: {g:?}");
        assert_eq!(g.baseline_us, Some(2_500.0), "{g:?}");
        assert_eq!(g.undone, 1, "{g:?}");
        // Slower again later: the same, from the new baseline.
        let (late, g) = against_latency(5_000.0, 150, |i, _| match i {
            0..10 => 1_000,
            10..60 => 2_500,
            _ => 6_000,
        });
        assert!(late >= 0.9 * 5_000.0, "held at {late:.0}/s: {g:?}");
        assert_eq!((g.baseline_us, g.undone), (Some(6_000.0), 2), "{g:?}");
    }

    #[test]
    fn a_store_that_queues_past_its_capacity_keeps_its_latency_cuts() {
        // Above 4,000/s the store queues (3 ms), below it answers in 1 ms:
        // each latency cut lowers the latency, so it stands.
        let (late, g) = against_latency(5_000.0, 200, |_, sent| if sent > 4_000.0 { 3_000 } else { 1_000 });
        assert!((3_400.0..=4_300.0).contains(&late), "{late:.0}/s: {g:?}");
        assert_eq!((g.baseline_us, g.undone), (Some(1_000.0), 0), "{g:?}");
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
        let mut g = Governor::default().step(&throttled(2_000.0, 30), &cfg);
        assert_eq!(g.rate, Some(720.0), "0.9 x the ceiling, not the measured rate");
        for _ in 0..100 {
            let sent = g.limit(&cfg).unwrap();
            g = g.step(&calm(sent, 1_000), &cfg);
            assert!(g.limit(&cfg).unwrap() <= 800.0);
        }
        assert_eq!(g.limit(&cfg), Some(800.0));
        for _ in 0..100 {
            // A store that serves 10/s and refuses the rest.
            let sent = g.limit(&cfg).unwrap();
            g = g.step(
                &Window {
                    throttles: (sent - 10.0) as u64,
                    ..calm(10.0, 1_000)
                },
                &cfg,
            );
            assert!(g.rate.unwrap() >= 50.0);
        }
        assert_eq!(g.rate, Some(50.0));
    }

    #[test]
    fn unused_rate_does_not_grow() {
        let cfg = no_grace();
        let mut g = Governor::default().step(&throttled(1_000.0, 20), &cfg);
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
            ..throttled(1_000.0, 20)
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
