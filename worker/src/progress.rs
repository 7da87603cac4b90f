//! A progress bar on stderr while a scan runs, only when stderr is a terminal
//! (logs and pipes stay clean).

use bucketscan_core::scan::engine::Engine;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub struct Progress {
    task: Option<tokio::task::JoinHandle<()>>,
    bar: Option<ProgressBar>,
}

impl Progress {
    /// `estimate` is the planner's object count (a lower bound unless `exact`).
    pub fn start(engine: Arc<Engine>, estimate: u64, exact: bool, quiet: bool) -> Progress {
        if quiet || !std::io::stderr().is_terminal() {
            return Progress {
                task: None,
                bar: None,
            };
        }
        let bar = ProgressBar::with_draw_target(Some(estimate), ProgressDrawTarget::stderr());
        bar.set_style(ProgressStyle::with_template("{bar:30} {pos}/{len}{msg}").expect("valid template"));
        let started = Instant::now();
        let task = {
            let bar = bar.clone();
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(Duration::from_millis(250)).await;
                    let c = engine.counters.snapshot();
                    let secs = started.elapsed().as_secs_f64().max(1e-3);
                    // Objects done: HEADed, read from the listing's
                    // metadata (--metadata-source) or taken from the
                    // baseline (--baseline).
                    let done = c.heads + c.from_listing + c.reused;
                    let rate = done as f64 / secs;
                    let total = if exact { estimate } else { estimate.max(c.listed) };
                    bar.set_length(total);
                    bar.set_position(done);
                    let eta = if rate > 0.0 {
                        (total.saturating_sub(done)) as f64 / rate
                    } else {
                        0.0
                    };
                    let approx = if exact { "" } else { "≥" };
                    bar.set_message(format!(
                        " objects ({approx}{total} planned)  {rate:.0} objects/s  {} errors  ETA {eta:.0}s",
                        c.errors
                    ));
                }
            })
        };
        Progress {
            task: Some(task),
            bar: Some(bar),
        }
    }

    pub fn stop(self) {
        if let Some(t) = self.task {
            t.abort();
        }
        if let Some(b) = self.bar {
            b.finish_and_clear();
        }
    }
}
