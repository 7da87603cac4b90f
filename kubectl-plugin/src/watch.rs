//! `kubectl bucketscan watch`: follow one BucketScan through a watch (not
//! polling) until it completes or fails. On a terminal a live progress bar
//! (indicatif) redraws in place; elsewhere (a pipe, a CI log) each change
//! prints a line of its own, and a status update that changes nothing shown
//! prints nothing.
//!
//! May import: error, fetch, render

use crate::error::Error;
use crate::fetch;
use crate::render::{completed, failure, fraction, progress_details, progress_line, terminal};
use bucketscan_api::crd::{BucketScan, BucketScanStatus, Phase};
use futures::StreamExt;
use kube::runtime::{watcher, WatchStreamExt};
use kube::Client;
use std::io::{IsTerminal, Write};

/// Where progress goes: a live bar on a terminal, lines elsewhere.
enum Screen {
    Live(indicatif::ProgressBar),
    Lines { last: String },
}

/// Steps of the live bar: the share done in tenths of a percent.
const STEPS: u64 = 1000;

impl Screen {
    fn new() -> Screen {
        if !std::io::stdout().is_terminal() {
            return Screen::Lines { last: String::new() };
        }
        let bar =
            indicatif::ProgressBar::with_draw_target(Some(STEPS), indicatif::ProgressDrawTarget::stdout());
        bar.set_style(
            indicatif::ProgressStyle::with_template("{prefix:<8} [{bar:20}] {percent:>3}%  {wide_msg}")
                .expect("a valid template")
                .progress_chars("#>."),
        );
        Screen::Live(bar)
    }

    fn show(&mut self, status: &BucketScanStatus) {
        match self {
            Screen::Live(bar) => {
                bar.set_prefix(format!("{:?}", status.phase));
                bar.set_position((fraction(status).unwrap_or(0.0) * STEPS as f64) as u64);
                bar.set_message(terminal(&progress_details(status)));
            }
            Screen::Lines { last } => {
                let line = terminal(&progress_line(status));
                if line == *last {
                    return;
                }
                let mut out = std::io::stdout().lock();
                let _ = writeln!(out, "{line}");
                let _ = out.flush();
                *last = line;
            }
        }
    }

    fn finish(&mut self) {
        if let Screen::Live(bar) = self {
            bar.abandon();
        }
    }
}

/// Follow `name` until Complete (Ok, with the result's location) or Failed
/// (Err with the Failed condition's reason).
pub async fn watch(client: &Client, namespace: &str, name: &str) -> Result<String, Error> {
    // A plain GET first: a missing object or CRD gets its clear message
    // instead of a watch that waits forever for nothing.
    let first = fetch::get(client, namespace, name).await?;
    let mut screen = Screen::new();
    if let Some(done) = step(&mut screen, &first, name) {
        return done;
    }
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut events = watcher(fetch::api(client, namespace), config)
        .default_backoff()
        .boxed();
    let mut listed = false;
    while let Some(event) = events.next().await {
        let scan = match event {
            Ok(watcher::Event::Apply(scan) | watcher::Event::InitApply(scan)) => {
                listed = true;
                scan
            }
            Ok(watcher::Event::Init) => {
                listed = false;
                continue;
            }
            // A relist without it: deleted while the watch was down.
            Ok(watcher::Event::InitDone) if !listed => return Err(gone(&mut screen, name)),
            Ok(watcher::Event::InitDone) => continue,
            Ok(watcher::Event::Delete(_)) => return Err(gone(&mut screen, name)),
            // The backoff retries: a dropped connection is no reason to stop.
            Err(e) => {
                // The error may quote what the API server sent: shown, not obeyed.
                eprintln!("watch interrupted ({}); retrying", terminal(&e.to_string()));
                continue;
            }
        };
        if let Some(done) = step(&mut screen, &scan, name) {
            return done;
        }
    }
    Err(gone(&mut screen, name))
}

fn gone(screen: &mut Screen, name: &str) -> Error {
    screen.finish();
    Error::Deleted { name: name.into() }
}

/// Show `scan`; the outcome once it is final.
fn step(screen: &mut Screen, scan: &BucketScan, name: &str) -> Option<Result<String, Error>> {
    let status = scan.status.clone().unwrap_or_default();
    screen.show(&status);
    let outcome = match status.phase {
        Phase::Complete => Ok(completed(&status, name)),
        Phase::Failed => Err(Error::Failed {
            name: name.into(),
            reason: failure(&status),
        }),
        _ => return None,
    };
    screen.finish();
    Some(outcome)
}
