//! `kubectl-bucketscan`: a kubectl plugin (kubectl runs any `kubectl-NAME`
//! on PATH as `kubectl NAME`) for BucketScans: `status` (of one scan, or a
//! table of them), `watch` with a live progress bar, `result`, and `logs` of
//! the scan's pods; `schedule` for BucketScanSchedules and their runs;
//! `retry` (in place) and `rerun` (a new scan) of a finished scan. It reads
//! BucketScans, BucketScanSchedules and pod logs, patches a scan's
//! spec.retry and creates reruns, through the kubeconfig kubectl would use,
//! so it needs no S3 credentials.
//!
//! May import: again, connect, error, fetch, logs, render, result, schedule, watch

mod again;
mod connect;
mod error;
mod fetch;
mod logs;
mod render;
mod result;
mod schedule;
mod watch;

use clap::{Args, Parser, Subcommand};
use error::Error;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "kubectl bucketscan",
    version,
    about = "Progress and results of bucketscan scans (BucketScan resources)"
)]
struct Cli {
    #[command(flatten)]
    cluster: Cluster,
    #[command(subcommand)]
    command: Command,
}

/// Which cluster, as kubectl's own flags say it.
#[derive(Args)]
struct Cluster {
    /// The kubeconfig file (default: KUBECONFIG, else ~/.kube/config).
    #[arg(long, global = true)]
    kubeconfig: Option<std::path::PathBuf>,
    /// The kubeconfig context to use (default: the current one).
    #[arg(long, global = true)]
    context: Option<String>,
}

#[derive(Subcommand)]
enum Command {
    /// One scan: phase, progress, rate, ETA, workers, shards, conditions and
    /// result. Without a name: a line per scan of the namespace (`-A`: of
    /// every namespace).
    Status {
        /// The BucketScan's name (none: every scan).
        name: Option<String>,
        /// Its namespace (default: the kubeconfig context's).
        #[arg(short, long)]
        namespace: Option<String>,
        /// Every namespace's scans.
        #[arg(short = 'A', long, conflicts_with_all = ["name", "namespace"])]
        all_namespaces: bool,
    },
    /// One BucketScanSchedule: its schedule, last and next run, last
    /// success, conditions, and its runs (newest first) with phase, objects
    /// and changes. Without a name: a line per schedule (`-A`: of every
    /// namespace).
    Schedule {
        /// The BucketScanSchedule's name (none: every schedule).
        name: Option<String>,
        /// Its namespace (default: the kubeconfig context's).
        #[arg(short, long)]
        namespace: Option<String>,
        /// Every namespace's schedules.
        #[arg(short = 'A', long, conflicts_with_all = ["name", "namespace"])]
        all_namespaces: bool,
    },
    /// Follow the scan with a live progress bar until it ends: exit 0 when
    /// it completes, 1 (with the reason) when it fails.
    Watch {
        #[command(flatten)]
        target: Target,
        /// Give up (exit 1) after this many seconds, like `kubectl wait --timeout`.
        #[arg(long)]
        timeout: Option<u64>,
    },
    /// Where the result and its manifest are, and the totals.
    Result {
        #[command(flatten)]
        target: Target,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Retry a finished scan in place: only its missing key ranges (dead
    /// shards) and the shards holding error records are scanned again, then
    /// merged again (sets spec.retry, which the operator acts on). Refused
    /// while the scan runs, or when it has nothing to retry.
    Retry {
        #[command(flatten)]
        target: Target,
    },
    /// Create a new BucketScan from a finished scan's spec, incremental
    /// against it (spec.baseline.scan) when it is a complete result, with its
    /// own output prefix; prints the new scan's name.
    Rerun {
        #[command(flatten)]
        target: Target,
    },
    /// The logs of the scan's pods (workers, plan and merge Jobs), each line
    /// after its pod's name, pods in the order they started.
    Logs {
        #[command(flatten)]
        target: Target,
        /// Only the pods of this part of the scan.
        #[arg(long, value_parser = ["worker", "plan", "replan", "merge", "delete-parts"])]
        component: Option<String>,
        /// The last this many lines of each pod (default: all).
        #[arg(long)]
        tail: Option<i64>,
    },
}

#[derive(Args)]
struct Target {
    /// The BucketScan's name.
    name: String,
    /// Its namespace (default: the kubeconfig context's).
    #[arg(short, long)]
    namespace: Option<String>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    match runtime.block_on(run(&cli.cluster, cli.command)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", render::terminal(&e.to_string()));
            ExitCode::FAILURE
        }
    }
}

async fn run(cluster: &Cluster, command: Command) -> Result<(), Error> {
    let connect = |namespace: Option<String>| {
        connect::connect(
            cluster.kubeconfig.as_deref(),
            cluster.context.as_deref(),
            namespace,
        )
    };
    match command {
        Command::Status {
            name: Some(name),
            namespace,
            ..
        } => {
            let (client, ns) = connect(namespace).await?;
            let scan = fetch::get(&client, &ns, &name).await?;
            print!("{}", render::terminal(&render::status_report(&scan)));
        }
        Command::Status {
            name: None,
            namespace,
            all_namespaces,
        } => {
            let (client, ns) = connect(namespace).await?;
            let scope = (!all_namespaces).then_some(ns.as_str());
            let scans = fetch::list(&client, scope).await?;
            print!(
                "{}",
                render::terminal(&render::status_table(&scans, all_namespaces))
            );
        }
        Command::Schedule {
            name: Some(name),
            namespace,
            ..
        } => {
            let (client, ns) = connect(namespace).await?;
            let found = schedule::get(&client, &ns, &name).await?;
            let runs = schedule::runs(&client, &found).await?;
            print!("{}", render::terminal(&schedule::report(&found, &runs)));
        }
        Command::Schedule {
            name: None,
            namespace,
            all_namespaces,
        } => {
            let (client, ns) = connect(namespace).await?;
            let scope = (!all_namespaces).then_some(ns.as_str());
            let found = schedule::list(&client, scope).await?;
            print!("{}", render::terminal(&schedule::table(&found, all_namespaces)));
        }
        Command::Watch { target: t, timeout } => {
            let (client, ns) = connect(t.namespace).await?;
            let watched = watch::watch(&client, &ns, &t.name);
            let output = match timeout {
                Some(secs) => tokio::time::timeout(std::time::Duration::from_secs(secs), watched)
                    .await
                    .map_err(|_| Error::Timeout {
                        name: t.name.clone(),
                        secs,
                    })??,
                None => watched.await?,
            };
            println!("complete: {}", render::terminal(&output));
        }
        Command::Result { target: t, json } => {
            let (client, ns) = connect(t.namespace).await?;
            let summary = result::summary(&fetch::get(&client, &ns, &t.name).await?)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&summary).expect("plain data"));
            } else {
                print!("{}", render::terminal(&result::text(&summary)));
            }
        }
        Command::Retry { target: t } => {
            let (client, ns) = connect(t.namespace).await?;
            let said = again::retry(&client, &ns, &t.name).await?;
            println!("{}", render::terminal(&said));
        }
        Command::Rerun { target: t } => {
            let (client, ns) = connect(t.namespace).await?;
            let (name, note) = again::rerun(&client, &ns, &t.name).await?;
            if let Some(note) = note {
                eprintln!("note: {}", render::terminal(&note));
            }
            println!("{name}");
        }
        Command::Logs {
            target: t,
            component,
            tail,
        } => {
            let (client, ns) = connect(t.namespace).await?;
            let scan = fetch::get(&client, &ns, &t.name).await?;
            print!(
                "{}",
                render::terminal(&logs::logs(&client, &scan, component.as_deref(), tail).await?)
            );
        }
    }
    Ok(())
}
