//! Reconciles shared fairly between namespaces. The controller runs a few
//! reconciles at once (`--concurrency`) and takes the scans that are due
//! oldest first; a namespace with hundreds of due scans would take every
//! slot, and another namespace's scan would wait behind all of them. Here a
//! namespace may hold only its share of the slots: an equal share among the
//! namespaces that want reconciles now. The last free slot is kept for a
//! namespace that holds none, however many namespaces are busy: a
//! namespace not seen yet starts at once unless every slot is taken by a
//! namespace of its own, and then it is the first woken. The unit is the
//! namespace: a tenant owning N namespaces gets N shares (limit who may
//! create namespaces, or run one operator per tenant, to bound that).
//! Planning in the operator has a deadline of its own
//! (`--planning-deadline-seconds`), so a slot is never held for long by a
//! store that does not answer. A scan over its namespace's share is
//! put off, which costs no API call, and waits in its namespace's line;
//! each slot that frees wakes the first scan of the namespace that holds
//! the fewest (so the slots never idle while scans wait, and namespaces
//! take turns). [`DEFER`] is the fallback should a wake be lost. Pure: the
//! controller keeps one [`FairShare`] and asks it before each reconcile.
//!
//! May import: nothing of the crate.

use std::collections::{HashMap, HashSet, VecDeque};
use std::time::{Duration, Instant};

/// When a scan put off for fairness is looked at again if no slot woke it.
pub const DEFER: Duration = Duration::from_secs(5);

/// A scan put off longer ago than this is no longer in line (it was
/// deleted, or came back on its own).
const FORGET: Duration = Duration::from_secs(10);

/// Who holds the controller's reconcile slots, and who waits for one.
#[derive(Debug, Default)]
pub struct FairShare {
    slots: usize,
    running: HashMap<String, usize>,
    /// Per namespace, the names of scans put off, first come first.
    waiting: HashMap<String, VecDeque<(String, Instant)>>,
    /// Scans woken for a freed slot (namespace, name), with when they were
    /// put off: their place in line until they start.
    woken: HashMap<(String, String), Instant>,
}

impl FairShare {
    pub fn new(slots: usize) -> FairShare {
        FairShare {
            slots,
            ..FairShare::default()
        }
    }

    /// Take a slot for a reconcile of scan `name` of `ns`, unless the
    /// namespace holds its share already: then it waits in line (and is
    /// looked at again when [`FairShare::finish`] wakes it, or after
    /// [`DEFER`]).
    pub fn try_start(&mut self, ns: &str, name: &str, now: Instant) -> bool {
        self.waiting.retain(|_, line| {
            line.retain(|(_, at)| now.saturating_duration_since(*at) < FORGET);
            !line.is_empty()
        });
        self.woken
            .retain(|_, at| now.saturating_duration_since(*at) < FORGET);
        let holds = self.running.get(ns).copied().unwrap_or(0);
        let line = self.waiting.entry(ns.to_string()).or_default();
        let queued = line
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, at)| *at)
            .or_else(|| self.woken.remove(&(ns.to_string(), name.to_string())))
            .unwrap_or(now);
        line.retain(|(n, _)| n != name);
        if !self.may_take(ns, holds) || self.behind_in_line(ns, holds) {
            // Its place in line is kept (`queued`), not taken again at the back.
            let line = self.waiting.entry(ns.to_string()).or_default();
            let at = line.partition_point(|(_, t)| *t <= queued);
            line.insert(at, (name.to_string(), queued));
            return false;
        }
        if self.waiting.get(ns).is_some_and(VecDeque::is_empty) {
            self.waiting.remove(ns);
        }
        *self.running.entry(ns.to_string()).or_default() += 1;
        true
    }

    /// The reconcile of a scan of `ns` ended: its slot is free. Returns the
    /// scan to wake for it (namespace, name): the first in line of the
    /// waiting namespace that holds the fewest slots.
    pub fn finish(&mut self, ns: &str) -> Option<(String, String)> {
        if let Some(n) = self.running.get_mut(ns) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.running.remove(ns);
            }
        }
        let next = self
            .waiting
            .iter()
            .filter(|(ns, line)| {
                !line.is_empty() && self.may_take(ns, self.running.get(*ns).copied().unwrap_or(0))
            })
            .min_by_key(|(ns, line)| (self.running.get(*ns).copied().unwrap_or(0), line[0].1))
            .map(|(ns, _)| ns.clone())?;
        let line = self.waiting.get_mut(&next)?;
        let (name, at) = line.pop_front()?;
        if line.is_empty() {
            self.waiting.remove(&next);
        }
        self.woken.insert((next.clone(), name.clone()), at);
        Some((next, name))
    }

    /// Whether `ns`, holding `holds` slots, may take one more: below its
    /// share, and, when it holds one already, not the last free slot (that
    /// one is for a namespace holding none).
    fn may_take(&self, ns: &str, holds: usize) -> bool {
        let taken: usize = self.running.values().sum();
        let last_free = self.slots > 1 && taken + 1 >= self.slots;
        holds < self.share(ns) && !(holds > 0 && last_free)
    }

    /// Whether a namespace holding slots would take one that a namespace
    /// holding fewer is owed (one in line, or woken for a freed slot and
    /// not started yet). With the last slot kept free, two busy namespaces
    /// share one slot less than they would split evenly, and without this
    /// the one with more scans due would keep the extra one.
    fn behind_in_line(&self, ns: &str, holds: usize) -> bool {
        let owed = |other: &str| {
            let theirs = self.running.get(other).copied().unwrap_or(0);
            other != ns && theirs < holds && self.may_take(other, theirs)
        };
        self.waiting
            .iter()
            .any(|(other, line)| !line.is_empty() && owed(other))
            || self.woken.keys().any(|(other, _)| owed(other))
    }

    /// The slots `ns` may hold: the slots divided among the namespaces that
    /// want them (`ns`, those running a reconcile and those with scans in
    /// line), rounded up, and with more than one slot, never all. A
    /// namespace with nothing due takes no share from the others.
    fn share(&self, ns: &str) -> usize {
        let wanting = self
            .waiting
            .iter()
            .filter(|(_, line)| !line.is_empty())
            .map(|(ns, _)| ns.as_str())
            .chain(self.running.keys().map(String::as_str))
            .chain([ns])
            .collect::<HashSet<_>>()
            .len();
        let most = if self.slots > 1 { self.slots - 1 } else { 1 };
        self.slots.div_ceil(wanting).clamp(1, most)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;

    /// The controller's runner, simulated: `slots` reconciles at once, the
    /// due scan with the earliest time first (a scan scheduled again at an
    /// earlier time moves up, as in kube's scheduler); a reconcile takes
    /// `work`, then the scan is due again after `requeue`; a scan put off
    /// takes no time and is due again after DEFER, or when a slot wakes it.
    /// Returns, per namespace, when its reconciles started.
    fn run(
        scans: &[(&str, Duration)],
        slots: usize,
        fair: bool,
        work: Duration,
        requeue: Duration,
        until: Duration,
    ) -> HashMap<String, Vec<Duration>> {
        let start = Instant::now();
        let mut share = FairShare::new(slots);
        let mut at: Vec<Duration> = scans.iter().map(|(_, t)| *t).collect();
        let mut due: BinaryHeap<Reverse<(Duration, usize)>> =
            at.iter().enumerate().map(|(i, t)| Reverse((*t, i))).collect();
        let mut running: Vec<(Duration, usize)> = Vec::new();
        let mut started: HashMap<String, Vec<Duration>> = HashMap::new();
        let mut now = Duration::ZERO;
        let schedule = |due: &mut BinaryHeap<_>, at: &mut Vec<Duration>, i: usize, t: Duration| {
            at[i] = t;
            due.push(Reverse((t, i)));
        };
        while now < until {
            // Finished reconciles free their slots and requeue their scan;
            // a freed slot may wake a scan put off.
            let (ended, still): (Vec<_>, Vec<_>) = running.iter().partition(|(end, _)| *end <= now);
            running = still;
            for (_, i) in ended {
                schedule(&mut due, &mut at, i, now + requeue);
                if let Some((_, name)) = share.finish(scans[i].0) {
                    let woken: usize = name.parse().unwrap();
                    if now < at[woken] {
                        schedule(&mut due, &mut at, woken, now);
                    }
                }
            }
            match due.peek().copied() {
                // A stale entry: the scan was scheduled again since.
                Some(Reverse((t, i))) if t != at[i] => {
                    due.pop();
                }
                Some(Reverse((t, i))) if t <= now && running.len() < slots => {
                    due.pop();
                    let ns = scans[i].0;
                    if !fair || share.try_start(ns, &i.to_string(), start + now) {
                        started.entry(ns.to_string()).or_default().push(now);
                        running.push((now + work, i));
                        at[i] = Duration::MAX;
                    } else {
                        schedule(&mut due, &mut at, i, now + DEFER);
                    }
                }
                // Nothing to start now: to the next event.
                _ => {
                    let next_end = running.iter().map(|(e, _)| *e).min();
                    let next_due = due.peek().map(|Reverse((t, _))| *t).filter(|t| *t > now);
                    let step = [next_end, next_due].into_iter().flatten().min();
                    now = step.unwrap_or(until).max(now + Duration::from_micros(1));
                }
            }
        }
        started
    }

    #[test]
    fn a_namespace_with_many_due_scans_does_not_delay_another_s() {
        let ms = Duration::from_millis;
        // 400 scans of one namespace due at once, then one of another.
        let mut scans: Vec<(&str, Duration)> = (0..400).map(|_| ("busy", Duration::ZERO)).collect();
        scans.push(("quiet", ms(1)));
        let until = Duration::from_secs(30);
        let unfair = run(&scans, 4, false, ms(100), Duration::from_secs(3), until);
        let fair = run(&scans, 4, true, ms(100), Duration::from_secs(3), until);
        // First-come: the quiet scan waits for 400 reconciles, 4 at a time.
        assert!(
            unfair["quiet"][0] >= Duration::from_secs(9),
            "{:?}",
            unfair["quiet"][0]
        );
        // Fair: at most one busy reconcile long.
        assert!(fair["quiet"][0] <= ms(101), "{:?}", fair["quiet"][0]);
        // The busy namespace still uses the slots it is left: 3 of 4.
        let busy = fair["busy"].len() as f64;
        let all = unfair["busy"].len() as f64;
        assert!(busy >= all * 0.7, "{busy} of {all}");
    }

    #[test]
    fn two_busy_namespaces_get_equal_shares() {
        let scans: Vec<(&str, Duration)> = (0..400)
            .map(|i| (if i < 300 { "big" } else { "small" }, Duration::ZERO))
            .collect();
        let ms = Duration::from_millis;
        let fair = run(&scans, 4, true, ms(100), ms(500), Duration::from_secs(20));
        let (big, small) = (fair["big"].len(), fair["small"].len());
        // 300 scans against 100, yet the same number of reconciles each.
        assert!(big.abs_diff(small) <= big / 10, "big {big}, small {small}");
    }

    #[test]
    fn a_slot_is_taken_given_back_and_wakes_the_next_in_line() {
        // As the runner calls it: never more reconciles than slots.
        let now = Instant::now();
        let mut share = FairShare::new(4);
        for name in ["a1", "a2", "a3"] {
            assert!(share.try_start("a", name, now));
        }
        let later = now + Duration::from_millis(1);
        assert!(!share.try_start("a", "a4", later), "one slot stays for others");
        assert!(share.try_start("b", "b1", now));
        // Two namespaces want slots: 2 each. a frees one and holds 2:
        // nobody to wake; b, holding one, may not take the last free slot.
        assert_eq!(share.finish("a"), None);
        assert!(!share.try_start("b", "b2", now), "the last free slot");
        // a frees another: two free. b waited first: b2 is woken.
        assert_eq!(share.finish("a"), Some(("b".into(), "b2".into())));
        assert!(share.try_start("b", "b2", later));
        assert!(
            !share.try_start("b", "b3", later + Duration::from_millis(2)),
            "b holds its share of 2"
        );
        // b frees one: a4's turn.
        assert_eq!(share.finish("b"), Some(("a".into(), "a4".into())));
        assert!(share.try_start("a", "a4", later));
        // b frees its last: b3's turn.
        assert_eq!(share.finish("b"), Some(("b".into(), "b3".into())));
        assert!(share.try_start("b", "b3", later));
        // All done and nobody waits: a may take 3 again.
        share.finish("a");
        share.finish("a");
        share.finish("b");
        for name in ["a5", "a6", "a7"] {
            assert!(share.try_start("a", name, now), "{name}");
        }
        assert_eq!(share.running["a"], 3);
        // A scan in line for long is forgotten (deleted, or back by itself).
        assert!(!share.try_start("a", "a8", now));
        assert!(share.try_start("c", "c1", now + FORGET));
        assert!(!share.waiting.contains_key("a"));
        assert_eq!(FairShare::new(1).share("a"), 1);
    }

    #[test]
    fn busy_namespaces_never_take_the_last_free_slot() {
        // Review F5: with 4 slots, two busy namespaces (one tenant's two
        // namespaces) took 2 each and a third waited for a reconcile to end,
        // which against a store that never answers was hours.
        let now = Instant::now();
        let mut share = FairShare::new(4);
        assert!(share.try_start("t1", "a", now));
        assert!(share.try_start("t2", "b", now));
        assert!(share.try_start("t1", "c", now));
        assert!(!share.try_start("t2", "d", now), "t2 would take the last slot");
        assert!(!share.try_start("t1", "e", now + Duration::from_millis(1)));
        assert!(share.try_start("other", "x", now), "a newcomer starts at once");
        // A slot frees: the busy namespaces waiting are not woken for it,
        // it stays for the next newcomer.
        assert_eq!(share.finish("t1"), None);
        assert!(!share.try_start("t2", "d", now + Duration::from_millis(1)));
        assert!(share.try_start("late", "y", now));
        // Once the busy ones have freed more, they take turns again.
        assert_eq!(share.finish("other"), None);
        assert_eq!(share.finish("late"), Some(("t2".into(), "d".into())));
        // One slot: kept free for nobody, it is taken in turn.
        let mut one = FairShare::new(1);
        assert!(one.try_start("a", "a", now));
        one.finish("a");
        assert!(one.try_start("b", "b", now));
    }
}
