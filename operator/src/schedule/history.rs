//! Which of a schedule's finished scans its history limits delete: all
//! but the newest `successful` Complete and `failed` Failed ones. Never a
//! scan another run still needs: with incremental runs the last Complete
//! one and the newest no run was refused (the next run's baseline, even
//! at a limit of 0), a run that was refused a baseline still there (the
//! refusal is what passes over it), and the baseline of an active run.
//! Pure.
//!
//! May import: `schedule::build`.

use super::build::{baseline_among_any, last_successful, Run};
use crate::crd::Phase;

/// Names of the scans to delete, oldest first.
pub fn to_prune(runs: &[Run], successful: i32, failed: i32, incremental: bool) -> Vec<String> {
    let mut keep: Vec<&str> = runs
        .iter()
        .filter(|r| r.is_active())
        .filter_map(|r| r.baseline.as_deref())
        .collect();
    if incremental {
        keep.extend(last_successful(runs).map(|r| r.name.as_str()));
        // And the newest that no run was refused as its baseline: the one
        // the next run names when the newest was refused.
        keep.extend(baseline_among_any(runs).map(|r| r.name.as_str()));
        // A run refused its baseline is what keeps that baseline from being
        // named again (`build::baseline_for`): kept while the baseline is.
        keep.extend(
            runs.iter()
                .filter(|r| r.refused_baseline)
                .filter(|r| {
                    r.baseline
                        .as_deref()
                        .is_some_and(|b| runs.iter().any(|x| x.name == b))
                })
                .map(|r| r.name.as_str()),
        );
    }
    let mut out: Vec<&Run> = Vec::new();
    for (phase, limit) in [(Phase::Complete, successful), (Phase::Failed, failed)] {
        let mut ended: Vec<&Run> = runs.iter().filter(|r| r.phase == phase).collect();
        // Newest first (by when made: see `Run::age`).
        ended.sort_by(|a, b| b.age().cmp(&a.age()));
        out.extend(
            ended
                .into_iter()
                .skip(limit.max(0) as usize)
                .filter(|r| !keep.contains(&r.name.as_str())),
        );
    }
    out.sort_by(|a, b| a.age().cmp(&b.age()));
    out.into_iter().map(|r| r.name.clone()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(name: &str, phase: Phase, minute: i64, baseline: Option<&str>) -> Run {
        let t = jiff::Timestamp::from_second(minute * 60).unwrap();
        Run {
            name: name.into(),
            phase,
            created: Some(t),
            finished: (phase == Phase::Complete || phase == Phase::Failed).then_some(t),
            baseline: baseline.map(str::to_string),
            shape: String::new(),
            partial: false,
            refused_baseline: false,
        }
    }

    #[test]
    fn a_run_refused_its_baseline_is_kept_while_that_baseline_is() {
        let mut refused = run("s-3", Phase::Failed, 3, Some("s-2"));
        refused.refused_baseline = true;
        let runs = vec![
            run("s-1", Phase::Complete, 1, None),
            run("s-2", Phase::Complete, 2, Some("s-1")),
            refused.clone(),
            run("s-4", Phase::Failed, 4, Some("s-1")),
        ];
        // Pruned, the refusal would be forgotten and s-2 named again; s-1,
        // the baseline the next run names instead, stays too.
        assert_eq!(to_prune(&runs, 0, 0, true), vec!["s-4"]);
        let found = super::super::build::baseline_among(&runs, "");
        assert_eq!(found.map(|r| r.name.as_str()), Some("s-1"));
        // Once s-2 is gone, so may the refusal go.
        let later = vec![run("s-5", Phase::Complete, 5, None), refused];
        assert_eq!(to_prune(&later, 1, 0, true), vec!["s-3"]);
    }

    #[test]
    fn a_run_retried_after_a_newer_one_ended_is_not_the_newest() {
        // s-1 made first, retried in place, ended after s-2.
        let mut retried = run("s-1", Phase::Complete, 1, None);
        retried.finished = jiff::Timestamp::from_second(10 * 60).ok();
        let runs = vec![retried, run("s-2", Phase::Complete, 2, Some("s-1"))];
        assert_eq!(last_successful(&runs).map(|r| r.name.as_str()), Some("s-2"));
        assert_eq!(to_prune(&runs, 1, 1, false), vec!["s-1"]);
    }

    #[test]
    fn the_newest_of_each_kind_are_kept() {
        let runs = vec![
            run("s-1", Phase::Complete, 1, None),
            run("s-2", Phase::Failed, 2, None),
            run("s-3", Phase::Complete, 3, None),
            run("s-4", Phase::Failed, 4, None),
            run("s-5", Phase::Complete, 5, None),
            run("s-6", Phase::Scanning, 6, None),
        ];
        assert_eq!(to_prune(&runs, 2, 1, false), vec!["s-1", "s-2"]);
        assert_eq!(to_prune(&runs, 3, 2, false), Vec::<String>::new());
        assert_eq!(
            to_prune(&runs, 0, 0, false),
            vec!["s-1", "s-2", "s-3", "s-4", "s-5"]
        );
    }

    #[test]
    fn the_baseline_of_the_next_run_and_of_an_active_run_are_never_pruned() {
        let runs = vec![
            run("s-1", Phase::Complete, 1, None),
            run("s-2", Phase::Complete, 2, Some("s-1")),
            run("s-3", Phase::Scanning, 3, Some("s-1")),
        ];
        // s-2 is the last Complete (the next baseline), s-1 the running one's.
        assert_eq!(to_prune(&runs, 0, 0, true), Vec::<String>::new());
        assert_eq!(to_prune(&runs, 0, 0, false), vec!["s-2"]);
    }
}
