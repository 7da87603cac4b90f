//! `kubectl-bucketscan`: a kubectl plugin (kubectl runs any `kubectl-NAME`
//! on PATH as `kubectl NAME`) for BucketScans: `status`, `watch` with a
//! live progress bar, and `result`. It reads the BucketScan's status only,
//! through the current kubeconfig context, so it needs no S3 credentials.
//!
//! May import: connect, error, fetch, render, result, watch

mod connect;
mod error;
mod fetch;
mod render;
mod result;
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
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Phase, progress, rate, ETA, workers, shards, conditions and result.
    Status(Target),
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
}

#[derive(Args)]
struct Target {
    /// The BucketScan's name.
    name: String,
    /// Its namespace (default: the kubeconfig context's).
    #[arg(short, long)]
    namespace: Option<String>,
    /// The kubeconfig context to use (default: the current one).
    #[arg(long)]
    context: Option<String>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    match runtime.block_on(run(cli.command)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", render::terminal(&e.to_string()));
            ExitCode::FAILURE
        }
    }
}

async fn run(command: Command) -> Result<(), Error> {
    match command {
        Command::Status(t) => {
            let (client, ns) = connect::connect(t.context.as_deref(), t.namespace.as_deref()).await?;
            let scan = fetch::get(&client, &ns, &t.name).await?;
            print!("{}", render::terminal(&render::status_report(&scan)));
        }
        Command::Watch { target: t, timeout } => {
            let (client, ns) = connect::connect(t.context.as_deref(), t.namespace.as_deref()).await?;
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
            let (client, ns) = connect::connect(t.context.as_deref(), t.namespace.as_deref()).await?;
            let summary = result::summary(&fetch::get(&client, &ns, &t.name).await?)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&summary).expect("plain data"));
            } else {
                print!("{}", render::terminal(&result::text(&summary)));
            }
        }
    }
    Ok(())
}
