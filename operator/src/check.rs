//! `bucketscan-operator check`: what the chart's `helm test` pod runs (the
//! image has no kubectl or curl). It passes when the operator answers ready
//! on /readyz and the API server serves BucketScans (the CRD is installed and
//! established) to this pod's ServiceAccount.
//!
//! A module of the binary, not the library. May import: (the library's crd)

use bucketscan_operator::crd::BucketScan;
use bytes::Bytes;
use clap::Parser;
use http_body_util::Empty;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use std::future::Future;
use std::time::{Duration, Instant};

#[derive(Parser)]
#[command(
    name = "bucketscan-operator check",
    about = "Check an installed bucketscan: operator ready, CRD served"
)]
pub struct Args {
    /// The operator's readiness URL, such as http://RELEASE-bucketscan-metrics.NS.svc:8080/readyz.
    #[arg(long)]
    readyz: Option<String>,
    /// Namespace to list BucketScans in (default: this pod's, or the kubeconfig context's).
    #[arg(long)]
    namespace: Option<String>,
    /// Seconds to keep retrying a check that fails (an operator restarting).
    #[arg(long, default_value_t = 60)]
    wait_secs: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    #[error("{url} is not a valid URL: {source}")]
    Url {
        url: String,
        source: hyper::http::uri::InvalidUri,
    },
    #[error("the operator is not ready: {url} answered {status}")]
    NotReady { url: String, status: u16 },
    #[error("the operator does not answer on {url}: {detail}")]
    Unreachable { url: String, detail: String },
    #[error("cannot reach the Kubernetes API: {0}")]
    Kube(String),
    #[error(
        "BucketScans are not served in namespace {namespace:?} ({detail}): is the CRD installed \
         (crds.install) and established?"
    )]
    NotServed { namespace: String, detail: String },
}

/// Run the checks; prints what passed.
pub async fn run(args: Args) -> Result<(), CheckError> {
    let deadline = Instant::now() + Duration::from_secs(args.wait_secs);
    if let Some(url) = &args.readyz {
        retry(deadline, || readyz(url)).await?;
        println!("operator ready: {url}");
    }
    let config = kube::Config::infer()
        .await
        .map_err(|e| CheckError::Kube(e.to_string()))?;
    let namespace = args.namespace.unwrap_or_else(|| config.default_namespace.clone());
    let client = kube::Client::try_from(config).map_err(|e| CheckError::Kube(e.to_string()))?;
    let count = retry(deadline, || served(&client, &namespace)).await?;
    println!("BucketScans served: {count} in namespace {namespace}");
    Ok(())
}

/// `probe` until it passes or the deadline is past (then its last error).
async fn retry<T, F: Future<Output = Result<T, CheckError>>>(
    deadline: Instant,
    mut probe: impl FnMut() -> F,
) -> Result<T, CheckError> {
    loop {
        match probe().await {
            Ok(v) => return Ok(v),
            Err(e) if Instant::now() >= deadline => return Err(e),
            Err(e) => eprintln!("{e}; retrying"),
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

async fn readyz(url: &str) -> Result<(), CheckError> {
    let uri: hyper::Uri = url.parse().map_err(|source| CheckError::Url {
        url: url.into(),
        source,
    })?;
    let client = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
    let answer = tokio::time::timeout(Duration::from_secs(5), client.get(uri)).await;
    let unreachable = |detail: String| CheckError::Unreachable {
        url: url.into(),
        detail,
    };
    match answer {
        Ok(Ok(response)) if response.status().is_success() => Ok(()),
        Ok(Ok(response)) => Err(CheckError::NotReady {
            url: url.into(),
            status: response.status().as_u16(),
        }),
        Ok(Err(e)) => Err(unreachable(e.to_string())),
        Err(_) => Err(unreachable("no answer in 5 s".into())),
    }
}

/// How many BucketScans a LIST in `namespace` returns: proof the API is served.
async fn served(client: &kube::Client, namespace: &str) -> Result<usize, CheckError> {
    let api: kube::Api<BucketScan> = kube::Api::namespaced(client.clone(), namespace);
    api.list(&Default::default())
        .await
        .map(|list| list.items.len())
        .map_err(|e| CheckError::NotServed {
            namespace: namespace.into(),
            detail: e.to_string(),
        })
}
