//! A fleet of real `bucketscan-worker run` processes on a planned scan,
//! sized the way the operator sizes it: every tick, the scan's live rate and
//! throttles are read from Redis as the operator reads them and handed to
//! the operator's own autoscaler (`bucketscan_operator::autoscale::decide`),
//! and worker processes are started or stopped (SIGTERM: a stopping worker
//! hands its shard back) to match. With `--fixed N` the fleet is N workers
//! throughout. For the saturation figures of `just bench` (BENCHMARKS.md).
//!
//! Kubernetes is not here: a process stands in for a pod (started at once,
//! ready when started), and the autoscaler's times are shortened (`--dwell-secs`,
//! `--settle-secs`, `--reprobe-secs`) so that a run takes a minute or two instead of an hour.
//! The decisions are the operator's code, unchanged.
//!
//! Prints one JSON object: the time series (workers, rate, throttles) and
//! each decision's StoreSaturated reason.

use anyhow::Context;
use bucketscan_core::fleet::governor::summarise;
use bucketscan_core::fleet::queue::{Queue, RedisConfig};
use bucketscan_operator::autoscale::{self, decide, AutoscaleConfig, Observation};
use bucketscan_operator::crd::{AutoscaleState, Workers};
use bucketscan_operator::desired::desired_replicas;
use clap::Parser;
use std::time::{Duration, Instant};
use tokio::process::{Child, Command};

#[derive(Parser)]
struct Args {
    #[arg(long)]
    redis: String,
    #[arg(long)]
    scan: String,
    /// N workers throughout instead of the autoscaler.
    #[arg(long)]
    fixed: Option<i32>,
    #[arg(long, default_value_t = 1)]
    min: i32,
    #[arg(long, default_value_t = 16)]
    max: i32,
    /// The autoscaler's dwell after a step (the operator's: 60 s).
    #[arg(long, default_value_t = 6)]
    dwell_secs: i64,
    /// How long a step's workers run before its rate is judged (operator: 20 s).
    #[arg(long, default_value_t = 4)]
    settle_secs: i64,
    /// How long a knee is held before one more worker is tried (operator:
    /// 600 s, ten dwells; here ten of these dwells as well).
    #[arg(long, default_value_t = 60)]
    reprobe_secs: i64,
    #[arg(long, default_value_t = 500)]
    tick_ms: u64,
    /// The worker command (`bucketscan-worker run ...`); each process gets
    /// `--name wN` appended.
    #[arg(last = true, required = true)]
    worker: Vec<String>,
}

#[derive(serde::Serialize)]
struct Tick {
    secs: f64,
    workers: usize,
    /// Shards not yet taken (while some are, every worker has work).
    pending: u64,
    rate: f64,
    throttles: u64,
    saturated: Option<&'static str>,
    /// The StoreSaturated message (its figures).
    message: Option<String>,
    /// The share of requests the governor holds, the store's noise share,
    /// and its latency and baseline (ms).
    governed: f64,
    noise: f64,
    latency_ms: Option<f64>,
    baseline_ms: Option<f64>,
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let con = RedisConfig::new(&args.redis).connect().await?;
    let queue = Queue::on(&con, &args.scan, "autoscaled-fleet", Duration::from_secs(30));
    let cfg = AutoscaleConfig {
        dwell_secs: args.dwell_secs,
        settle_secs: args.settle_secs,
        reprobe_secs: args.reprobe_secs,
        ..AutoscaleConfig::default()
    };
    let bounds = Workers {
        replicas: args.fixed,
        min_replicas: Some(args.min),
        max_replicas: Some(args.max),
        ..Workers::default()
    };
    let started = Instant::now();
    // The autoscaler works in whole seconds; scaled time would change its
    // arithmetic, so ticks are real time and the judged windows short.
    let now_secs = || started.elapsed().as_secs() as i64 + 1_000_000;
    let mut fleet = Fleet::new(args.worker.clone());
    let mut state: Option<AutoscaleState> = None;
    let mut ticks = Vec::new();
    loop {
        let counts = queue.counts().await?;
        let left = counts.pending + counts.leased;
        fleet.reap()?;
        if left == 0 && fleet.running() == 0 {
            break;
        }
        let rate = queue
            .live_rate(time::OffsetDateTime::now_utc().unix_timestamp())
            .await?;
        let governor = summarise(&queue.governors().await?);
        let throttles = governor.throttles;
        let bound = desired_replicas(&bounds, Some(left));
        let (want, saturated) = match args.fixed {
            Some(_) => (bound, None::<autoscale::Saturated>),
            None => {
                let obs = Observation {
                    governed: governor.held_share(),
                    governed_by: governor.held_by.describe(),
                    throttle_noise: governor.noise,
                    latency_ms: governor.latency_us.map(|l| l / 1000.0),
                    baseline_ms: governor.baseline_us.map(|l| l / 1000.0),
                    ..Observation::of(now_secs(), rate, throttles, fleet.running() as i32)
                };
                let d = decide(state.as_ref(), &obs, args.min, bound, &cfg);
                state = Some(d.state);
                (d.workers, d.saturated)
            }
        };
        // Workers exit by themselves when the queue drains; none is started
        // for work that is gone.
        if left > 0 {
            fleet.scale_to(want.max(0) as usize)?;
        }
        ticks.push(Tick {
            secs: started.elapsed().as_secs_f64(),
            workers: fleet.running(),
            pending: counts.pending,
            rate,
            throttles,
            saturated: saturated.as_ref().map(|s| s.reason),
            message: saturated.map(|s| s.message),
            governed: governor.held_share(),
            noise: governor.noise,
            latency_ms: governor.latency_us.map(|l| l / 1000.0),
            baseline_ms: governor.baseline_us.map(|l| l / 1000.0),
        });
        tokio::time::sleep(Duration::from_millis(args.tick_ms)).await;
    }
    let out = serde_json::json!({
        "seconds": started.elapsed().as_secs_f64(),
        "started": fleet.started,
        "failed": fleet.failed,
        "ticks": ticks,
    });
    println!("{out}");
    anyhow::ensure!(
        fleet.failed == 0,
        "{} worker(s) failed: {}",
        fleet.failed,
        fleet.failures.join("; ")
    );
    Ok(())
}

/// The signal `scale_to` stops a worker with.
const SIGTERM: i32 = 15;

/// The worker processes: started newest last, stopped newest first.
struct Fleet {
    command: Vec<String>,
    /// Each with its name (`--name`).
    running: Vec<(String, Child)>,
    stopping: Vec<(String, Child)>,
    started: u32,
    failed: u32,
    /// How each failed worker exited, by name.
    failures: Vec<String>,
}

impl Fleet {
    fn new(command: Vec<String>) -> Fleet {
        Fleet {
            command,
            running: Vec::new(),
            stopping: Vec::new(),
            started: 0,
            failed: 0,
            failures: Vec::new(),
        }
    }

    fn running(&self) -> usize {
        self.running.len()
    }

    fn scale_to(&mut self, n: usize) -> anyhow::Result<()> {
        while self.running.len() < n {
            let name = format!("w{}", self.started);
            let child = Command::new(&self.command[0])
                .args(&self.command[1..])
                .args(["--name", &name])
                .kill_on_drop(true)
                .spawn()
                .with_context(|| format!("starting {}", self.command[0]))?;
            self.started += 1;
            self.running.push((name, child));
        }
        while self.running.len() > n {
            let (name, child) = self.running.pop().expect("more than n");
            if let Some(pid) = child.id() {
                // SIGTERM: the worker hands its shards back and exits.
                std::process::Command::new("kill")
                    .args(["-TERM", &pid.to_string()])
                    .status()?;
            }
            self.stopping.push((name, child));
        }
        Ok(())
    }

    /// Forget the workers that exited; count the ones that failed. A
    /// worker this fleet stopped that died of the SIGTERM itself was
    /// stopped before it set up its handler, which it does before taking
    /// its first shard: it held nothing, so it did not fail. (On a loaded
    /// machine a worker started and stopped within a tick or two is one.)
    fn reap(&mut self) -> anyhow::Result<()> {
        use std::os::unix::process::ExitStatusExt;
        for (stopped_here, list) in [(false, &mut self.running), (true, &mut self.stopping)] {
            let mut kept = Vec::new();
            for (name, mut child) in list.drain(..) {
                match child.try_wait()? {
                    Some(status) if stopped_here && status.signal() == Some(SIGTERM) => {}
                    Some(status) if !status.success() => {
                        self.failed += 1;
                        self.failures.push(format!("{name}: {status}"));
                    }
                    Some(_) => {}
                    None => kept.push((name, child)),
                }
            }
            *list = kept;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A worker: `sh -c SCRIPT` (the `--name wN` the fleet adds are the
    /// script's `$0` and `$1`).
    fn fleet_of(script: &str) -> Fleet {
        Fleet::new(vec!["sh".into(), "-c".into(), script.into()])
    }

    /// Reaps until every worker has exited (at most 10 s).
    async fn reap_all(fleet: &mut Fleet) {
        for _ in 0..200 {
            fleet.reap().unwrap();
            if fleet.running.is_empty() && fleet.stopping.is_empty() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("the workers did not exit");
    }

    #[tokio::test]
    async fn a_worker_stopped_before_its_handler_is_not_a_failure_and_others_are() {
        // Stopped by the fleet, dead of the SIGTERM (no handler yet).
        let mut stopped = fleet_of("exec sleep 30");
        stopped.scale_to(1).unwrap();
        stopped.scale_to(0).unwrap();
        reap_all(&mut stopped).await;
        assert_eq!(
            (stopped.started, stopped.failed),
            (1, 0),
            "{:?}",
            stopped.failures
        );

        // A worker that exits with an error fails, said with its name.
        let mut erring = fleet_of("exit 3");
        erring.scale_to(1).unwrap();
        reap_all(&mut erring).await;
        assert_eq!(erring.failed, 1);
        assert_eq!(erring.failures, ["w0: exit status: 3"]);

        // A SIGTERM the fleet did not send is a failure too.
        let mut killed = fleet_of("kill -TERM $$; sleep 30");
        killed.scale_to(1).unwrap();
        reap_all(&mut killed).await;
        assert_eq!(killed.failed, 1);
        assert_eq!(killed.failures, ["w0: signal: 15 (SIGTERM)"]);
    }
}
