//! `bucketscan-operator`: watches BucketScan resources and runs them (see
//! the `controller` module). Connects to the cluster from KUBECONFIG or, in a
//! pod, its service account.

// The reconcile future (one async pipeline of every phase) is deeper than the
// compiler's default query depth of 128 allows when an optimised build (the
// release and e2e profiles) lays it out here; the dev profile builds within
// it. Boxing the pipeline inside the reconcile does not avoid it (tried,
// 2026-11-27), so the limit is what stays and the reconcile holds it inline.
#![recursion_limit = "256"]

mod check;

use bucketscan_core::fleet::queue::RedisConfig;
use bucketscan_operator::controller::labelled_namespaces::LabelledNamespaces;
use bucketscan_operator::controller::{self, Context};
use bucketscan_operator::desired::{self, Settings};
use bucketscan_operator::leader::LeaderElection;
use bucketscan_operator::metrics::{self, Metrics};
use clap::Parser;
use std::sync::Arc;
use std::time::Duration;

#[derive(Parser)]
#[command(
    version,
    about = "bucketscan Kubernetes operator",
    after_help = "`bucketscan-operator check --help`: the install check that `helm test` runs."
)]
struct Args {
    /// Redis for every scan: redis://[[USER]:PASSWORD@]HOST:PORT[/DB],
    /// rediss:// for TLS, or through Sentinel
    /// redis+sentinel://[[USER]:PASSWORD@]HOST[:PORT][,HOST[:PORT]...]/MASTER_NAME[/DB]
    /// (optionally ?sentinelUser=U&sentinelPassword=P for the sentinels).
    #[arg(long, env = "BUCKETSCAN_REDIS_URL", hide_env_values = true)]
    redis: String,
    /// How long a Redis command keeps retrying through an outage before the
    /// reconcile gives up: the scan then shows condition Blocked
    /// (RedisUnavailable) and is tried again later.
    #[arg(long, env = "BUCKETSCAN_REDIS_PATIENCE_SECS", default_value_t = 20)]
    redis_patience_secs: u64,
    /// Give each scan's pods a Redis ACL user of their own, limited to the
    /// scan's keys and the queue's functions (needs a Redis 7+ where the
    /// operator's user may run ACL SETUSER); false: the pods get the
    /// operator's Redis URL (one tenant's pods could then touch every
    /// scan). The chart's `redis.scanUsers` is true too.
    #[arg(long, env = "BUCKETSCAN_REDIS_SCAN_USERS", default_value_t = true, action = clap::ArgAction::Set)]
    redis_scan_users: bool,
    /// A scan that scanned no object for this long shows condition
    /// Progressing=False (reason NoProgress) with what its pods say.
    #[arg(long, env = "BUCKETSCAN_STALL_SECONDS", default_value_t = 300)]
    stall_seconds: u64,
    /// PEM file of the CA that signed Redis's TLS certificate.
    #[arg(long, env = "BUCKETSCAN_REDIS_CA_FILE")]
    redis_ca_file: Option<std::path::PathBuf>,
    /// Image of a scan's pods (workers, plan, merge, delete-parts) when the
    /// scan names none.
    #[arg(long, env = "BUCKETSCAN_WORKER_IMAGE", default_value = desired::DEFAULT_IMAGE)]
    worker_image: String,
    /// Images a BucketScan may name in workers.image, comma-separated: a
    /// repository (any tag or digest of it), a path ending with `/`, or `*`
    /// for any image. Unset: the repository of --worker-image only.
    #[arg(long, env = "BUCKETSCAN_ALLOWED_WORKER_IMAGES", value_delimiter = ',')]
    allowed_worker_images: Vec<String>,
    /// Namespaces whose BucketScans this operator runs (comma-separated; the
    /// chart's RBAC lets it read Secrets in these only). Unset or `*`: any;
    /// a scan elsewhere fails with reason NamespaceNotAllowed.
    #[arg(long, env = "BUCKETSCAN_SCAN_NAMESPACES", value_delimiter = ',')]
    scan_namespaces: Vec<String>,
    /// Namespaces whose BucketScans this operator runs, by label, instead
    /// of --scan-namespaces: a label selector (`bucketscan.dev/scans=true`,
    /// `team in (a,b),!frozen`) matched against the namespaces' labels as
    /// they change. Needs list and watch on Namespaces (the chart's
    /// `operator.scanNamespaceSelector` grants them, and binds the
    /// scan-namespace rights cluster-wide); a scan elsewhere fails with
    /// reason NamespaceNotAllowed.
    #[arg(long, env = "BUCKETSCAN_SCAN_NAMESPACE_SELECTOR")]
    scan_namespace_selector: Option<String>,
    /// Endpoints the operator may send a scan's requests to (planning and
    /// cleanup of scans with a credentialsSecret), comma-separated: host
    /// names, *.DOMAIN, addresses or networks (10.0.0.0/8), each optionally
    /// with :PORT. Unset: any endpoint but loopback, link-local (the
    /// instance metadata service) and unspecified addresses, checked on the
    /// addresses a name resolves to; a scan refused fails with reason
    /// EndpointNotAllowed.
    #[arg(long, env = "BUCKETSCAN_ALLOWED_ENDPOINTS", value_delimiter = ',')]
    allowed_endpoints: Vec<String>,
    /// Scans of one namespace that run at once (planning or later, until
    /// they end); more wait, condition Queued, oldest first. 0: no limit.
    #[arg(long, env = "BUCKETSCAN_MAX_ACTIVE_SCANS_PER_NAMESPACE", default_value_t = 10)]
    max_active_scans_per_namespace: u32,
    /// Workers one scan may run: a scan asking more (replicas, minReplicas,
    /// maxReplicas) fails with reason OverLimit; autoscaling without
    /// maxReplicas stops here.
    #[arg(long, env = "BUCKETSCAN_MAX_WORKERS_PER_SCAN", default_value_t = 100,
          value_parser = clap::value_parser!(i32).range(1..=1000))]
    max_workers_per_scan: i32,
    /// Shards one scan may plan (sharding.targetShards); more: OverLimit.
    #[arg(long, env = "BUCKETSCAN_MAX_TARGET_SHARDS", default_value_t = 10_000,
          value_parser = clap::value_parser!(u32).range(1..=100_000))]
    max_target_shards: u32,
    /// Bytes one scan's keys may hold in Redis (counted about once a
    /// minute); more: the scan's Redis user is switched off and the scan
    /// fails with OverLimit. 0: no limit.
    #[arg(long, env = "BUCKETSCAN_MAX_REDIS_BYTES_PER_SCAN", default_value_t = 64 << 20)]
    max_redis_bytes_per_scan: u64,
    /// Requests a second to the Kubernetes API, on average (client-go's
    /// QPS); beyond the burst, requests wait their turn.
    #[arg(long, env = "BUCKETSCAN_KUBE_API_QPS", default_value_t = 50.0)]
    kube_api_qps: f64,
    /// Requests to the Kubernetes API sent at once after a quiet spell
    /// (client-go's Burst).
    #[arg(long, env = "BUCKETSCAN_KUBE_API_BURST", default_value_t = 100,
          value_parser = clap::value_parser!(u32).range(1..))]
    kube_api_burst: u32,
    /// Container resources of a scan's pods (workers, plan, merge,
    /// delete-parts; JSON ResourceRequirements) for scans that set none. Unset: requests cpu 250m, memory 128Mi; limit
    /// memory 512Mi.
    #[arg(long, env = "BUCKETSCAN_WORKER_RESOURCES")]
    worker_resources: Option<String>,
    /// Image pull policy of worker pods (Always, IfNotPresent, Never).
    #[arg(long, env = "BUCKETSCAN_WORKER_PULL_POLICY")]
    worker_pull_policy: Option<String>,
    /// Seconds a worker's lease lasts.
    #[arg(long, default_value_t = 30)]
    lease_secs: u32,
    /// BucketScans reconciled at the same time.
    #[arg(long, default_value_t = 4)]
    concurrency: u16,
    /// Watch only this namespace (default: all).
    #[arg(long, env = "BUCKETSCAN_NAMESPACE")]
    namespace: Option<String>,
    /// Where /metrics, /healthz and /readyz are served.
    #[arg(long, default_value = "0.0.0.0:8080")]
    metrics_addr: std::net::SocketAddr,
    /// Run leader election through a Lease in this namespace (several
    /// replicas: one works). Unset: no election (a single replica).
    #[arg(long, env = "BUCKETSCAN_LEADER_ELECTION_NAMESPACE")]
    leader_election_namespace: Option<String>,
    /// Seconds a leader's lease lasts without renewal; as in client-go, the
    /// leader renews every 2/15 of it and gives up after 2/3 without one.
    #[arg(long, default_value_t = 15, value_parser = clap::value_parser!(u64).range(1..=3600))]
    leader_lease_secs: u64,
    /// LIST requests planning one scan may spend: about 1.1 x the scan's
    /// targetShards for flat keys, so raise it for targets above a few
    /// thousand shards.
    #[arg(long, env = "BUCKETSCAN_PLAN_LIST_BUDGET",
          default_value_t = bucketscan_core::keyspace::planner::PlanOptions::default().max_requests as u32,
          value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    plan_list_budget: u32,
    /// Seconds the operator may spend planning one scan (scans with a
    /// credentials Secret) in one reconcile. A store that answers slowly or
    /// not at all would otherwise hold a reconcile slot for hours; past the
    /// deadline the scan is Blocked (reason PlanningSlow) and planned again
    /// after the backoff, continuing what was planned.
    #[arg(long, env = "BUCKETSCAN_PLANNING_DEADLINE_SECONDS", default_value_t = 120,
          value_parser = clap::value_parser!(u64).range(1..=86_400))]
    planning_deadline_seconds: u64,
    /// Log format: text or json.
    #[arg(long, env = "BUCKETSCAN_LOG_FORMAT", default_value = "text")]
    log_format: String,
}

/// Stack of the runtime's worker threads (see `main`).
const WORKER_STACK: usize = 16 << 20;

fn main() -> std::process::ExitCode {
    // `bucketscan-operator check ...`: the chart's `helm test` (see check.rs).
    if std::env::args().nth(1).as_deref() == Some("check") {
        return run_check();
    }
    let args = Args::parse();
    init_logging(&args.log_format);
    // Reconciles run on the workers' stacks, and a reconcile builds the AWS
    // SDK's request futures (planning, the store check, the baseline), which
    // take hundreds of KiB each in a build without optimisation: 2 MiB, the
    // default, overflowed. The stack is reserved, not used, until touched.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_stack_size(WORKER_STACK)
        .build()
        .expect("tokio runtime");
    match runtime.block_on(run(args)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run_check() -> std::process::ExitCode {
    let args = check::Args::parse_from(std::env::args().skip(1));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    match runtime.block_on(check::run(args)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("check failed: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn init_logging(format: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("BUCKETSCAN_LOG")
        .unwrap_or_else(|_| "info,kube_runtime=warn,aws_config=error".into());
    let builder = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(filter);
    if format == "json" {
        builder.json().init();
    } else {
        builder.init();
    }
}

async fn run(args: Args) -> anyhow::Result<()> {
    use anyhow::Context as _;
    let ca_pem = match &args.redis_ca_file {
        Some(path) => Some(
            std::fs::read(path).with_context(|| format!("cannot read --redis-ca-file {}", path.display()))?,
        ),
        None => None,
    };
    // Settings first: a bad value fails at once, before any connection.
    let worker_resources = match &args.worker_resources {
        Some(json) => serde_json::from_str(json)
            .context("--worker-resources (BUCKETSCAN_WORKER_RESOURCES) is not a JSON ResourceRequirements, such as {\"requests\":{\"cpu\":\"1\"}}")?,
        None => desired::default_worker_resources(),
    };
    let allowed_endpoints = bucketscan_core::s3::EndpointAllowlist::parse(&args.allowed_endpoints)
        .map_err(|e| anyhow::anyhow!("--allowed-endpoints (BUCKETSCAN_ALLOWED_ENDPOINTS): {e}"))?;
    if args.redis_scan_users {
        refuse_master_password_for_sentinels(&args.redis)?;
        if let Ok(Some(address)) = bucketscan_core::fleet::queue::sentinel::parse(&args.redis) {
            address.check_lookup_only().await?;
        }
    }
    let redis = RedisConfig {
        ca_pem,
        patience: Duration::from_secs(args.redis_patience_secs),
        ..RedisConfig::new(&args.redis)
    };
    if args.kube_api_qps.is_nan() || args.kube_api_qps <= 0.0 {
        anyhow::bail!("--kube-api-qps (BUCKETSCAN_KUBE_API_QPS) must be above 0");
    }
    let scan_namespace_selector = scan_namespace_selector(&args)?;
    let metrics = Arc::new(Metrics::default());
    let config = kube::Config::infer()
        .await
        .context("cannot reach the Kubernetes API (KUBECONFIG, or the pod's service account)")?;
    let throttle = bucketscan_operator::throttle::Throttle {
        qps: args.kube_api_qps,
        burst: args.kube_api_burst,
        sent: metrics.kube_api_requests.clone(),
    };
    let client = kube::client::ClientBuilder::try_from(config)
        .context("cannot set up the Kubernetes API client")?
        .with_layer(&throttle)
        .build();
    let settings = Settings {
        worker_image: args.worker_image.clone(),
        image_pull_policy: args.worker_pull_policy,
        lease_secs: args.lease_secs,
        allowed_images: allowed_images(args.allowed_worker_images, &args.worker_image),
        worker_resources,
        scan_namespaces: args
            .scan_namespaces
            .into_iter()
            .filter(|n| !n.is_empty())
            .collect(),
        redis_scan_users: args.redis_scan_users,
        stall_after: Duration::from_secs(args.stall_seconds),
        plan_list_budget: args.plan_list_budget as usize,
        planning_deadline: Duration::from_secs(args.planning_deadline_seconds),
        allowed_endpoints: Arc::new(allowed_endpoints),
        limits: bucketscan_operator::limits::Limits {
            active_scans_per_namespace: args.max_active_scans_per_namespace,
            workers_per_scan: args.max_workers_per_scan,
            target_shards: args.max_target_shards,
            redis_bytes_per_scan: args.max_redis_bytes_per_scan,
        },
        ..Settings::default()
    };
    let instance = std::env::var("POD_NAME").unwrap_or_else(|_| format!("pid-{}", std::process::id()));
    tracing::info!(instance, "bucketscan-operator starting");
    let server = tokio::spawn(metrics::serve(args.metrics_addr, metrics.clone()));

    // Ready once both the API server and Redis answer.
    client
        .apiserver_version()
        .await
        .context("the Kubernetes API does not answer")?;
    // The labelled namespaces listed before any scan is judged; a selector
    // the operator cannot honour stops it here, with the reason.
    let labelled = match &scan_namespace_selector {
        Some(selector) => Some(LabelledNamespaces::watch(client.clone(), selector).await?),
        None => None,
    };
    let connection = connect_redis(&redis).await?;
    // The queue's functions, before any scan's pod calls them (and again
    // on every reconcile: a Redis that restarted lost them).
    connection.load_functions().await.context(
        "cannot load the queue's Redis functions (FUNCTION LOAD): Redis 7.0+ is needed, and the \
         operator's Redis user must be allowed FUNCTION LOAD and LIST",
    )?;
    metrics.redis_up.set(1);
    metrics.ready.store(true, std::sync::atomic::Ordering::Relaxed);
    tokio::spawn(watch_redis(redis.clone(), metrics.clone()));
    tokio::spawn(watch_kube_api(
        client.clone(),
        args.namespace.clone(),
        metrics.clone(),
    ));

    let election = args.leader_election_namespace.as_deref().map(|ns| {
        LeaderElection::new(
            client.clone(),
            ns,
            "bucketscan-operator",
            &instance,
            Duration::from_secs(args.leader_lease_secs),
        )
    });
    if let Some(election) = &election {
        election.acquire().await;
    }
    metrics.leader.set(1);
    let ctx = Context::new(
        client,
        settings,
        redis,
        connection,
        instance,
        metrics,
        args.namespace.clone(),
    );
    if let Some(labelled) = labelled {
        ctx.run_scans_in(labelled);
    }
    // The schedules that make BucketScans, under the same lease: a task of
    // its own (inside the BucketScan controller's future it made that
    // future deep enough to overflow the main thread's stack).
    let schedules = {
        let (ctx, namespace) = (ctx.clone(), args.namespace.clone());
        tokio::spawn(async move { controller::run_schedules(ctx, namespace.as_deref()).await })
    };
    let controller = async {
        controller::run(ctx, args.concurrency, args.namespace.as_deref()).await;
        schedules.abort();
    };
    tokio::select! {
        // Shut down by a signal: a standby takes over at once.
        _ = controller => {
            if let Some(election) = &election {
                election.release().await;
            }
            Ok(())
        }
        _ = async { election.as_ref().expect("checked").hold().await }, if election.is_some() => {
            anyhow::bail!("lost the leader lease; exiting so that only one replica reconciles")
        }
        served = server => match served {
            Ok(Err(e)) => Err(e).context(format!("cannot serve metrics on {}", args.metrics_addr)),
            _ => Ok(()),
        },
    }
}

/// The label selector that chooses scan namespaces, if given: never
/// together with a list of them (which one would hold is a guess).
fn scan_namespace_selector(args: &Args) -> anyhow::Result<Option<String>> {
    let selector = args
        .scan_namespace_selector
        .as_deref()
        .map(str::trim)
        .filter(|s| !s.is_empty());
    let listed = args.scan_namespaces.iter().any(|n| !n.is_empty());
    if selector.is_some() && listed {
        anyhow::bail!(
            "--scan-namespace-selector (BUCKETSCAN_SCAN_NAMESPACE_SELECTOR) and --scan-namespaces \
             (BUCKETSCAN_SCAN_NAMESPACES) are both given: choose the namespaces by label or by name, not both"
        );
    }
    Ok(selector.map(str::to_string))
}

/// The images scans may name: the list given, or else the repository of
/// the default worker image (a BucketScan creates pods, so "any image" is
/// a choice: `*`).
fn allowed_images(given: Vec<String>, worker_image: &str) -> Vec<String> {
    let given: Vec<String> = given.into_iter().filter(|i| !i.is_empty()).collect();
    if given.is_empty() {
        return vec![desired::image_repository(worker_image).to_string()];
    }
    given
}

/// Each scan's pods get the Redis address with a user of their own, but
/// the sentinels' credentials as they are (the pods must find the master
/// too): a Sentinel address whose sentinel password is the master's would
/// hand every tenant the operator's password.
fn refuse_master_password_for_sentinels(url: &str) -> anyhow::Result<()> {
    use bucketscan_core::fleet::queue::sentinel;
    let Ok(Some(address)) = sentinel::parse(url) else {
        return Ok(()); // not Sentinel; a bad address fails with its reason at connect
    };
    if address.sentinel_password.is_some() && address.sentinel_password == address.password {
        anyhow::bail!(
            "the Redis address gives the sentinels the master's password (sentinelPassword): every scan's \
             pods get the sentinels' credentials with their own Redis user, and so would get it. Give the \
             sentinels a user that may only look up the master (sentinelUser, sentinelPassword), or turn \
             scan users off (--redis-scan-users=false)"
        );
    }
    Ok(())
}

/// Reach Redis, waiting as long as it takes while it is unreachable (the
/// bundled Redis may start after the operator); not ready until then. A
/// refusal that waiting cannot fix (a wrong password, an untrusted
/// certificate) stops the operator with its reason.
async fn connect_redis(
    redis: &RedisConfig,
) -> anyhow::Result<bucketscan_core::fleet::queue::RedisConnection> {
    loop {
        match redis.connect().await {
            Ok(connection) => return Ok(connection),
            Err(e @ bucketscan_core::fleet::queue::QueueError::Unreachable { .. }) => {
                tracing::warn!(error = %e, "Redis is unreachable; still waiting for it");
            }
            Err(e) => return Err(anyhow::Error::new(e).context("cannot use Redis")),
        }
    }
}

/// Keep `bucketscan_redis_up` (and so /readyz) true to whether Redis answers
/// a PING now, on a connection of its own: the reconciles' connection waits
/// patiently through a Redis restart, which is right for them and wrong for
/// a health check.
/// Whether the Kubernetes API answers what the controller's watch needs (a
/// list of BucketScans, where it watches), every 5 s: readiness and
/// `bucketscan_kube_api_up` follow. A watch that fails while this answers
/// is retried by the watcher with backoff.
async fn watch_kube_api(client: kube::Client, namespace: Option<String>, metrics: Arc<Metrics>) {
    const EVERY: Duration = Duration::from_secs(5);
    let scans: kube::Api<bucketscan_operator::crd::BucketScan> = match &namespace {
        Some(ns) => kube::Api::namespaced(client, ns),
        None => kube::Api::all(client),
    };
    let probe = kube::api::ListParams::default().limit(1);
    loop {
        let answered = matches!(
            tokio::time::timeout(EVERY, scans.list_metadata(&probe)).await,
            Ok(Ok(_))
        );
        let was = metrics.kube_api_up.get() == 1;
        if was != answered {
            tracing::warn!(kube_api_up = answered, "Kubernetes API health changed");
        }
        metrics.kube_api_up.set(i64::from(answered));
        tokio::time::sleep(EVERY).await;
    }
}

async fn watch_redis(redis: RedisConfig, metrics: Arc<Metrics>) {
    const EVERY: Duration = Duration::from_secs(5);
    let mut connection = None;
    loop {
        let answered = tokio::time::timeout(EVERY, async {
            if connection.is_none() {
                // Through Sentinel: the master now (asked again after
                // every failed PING, so a failover is followed).
                let client = redis.client().await.ok()?;
                connection = client.get_multiplexed_async_connection().await.ok();
            }
            let con = connection.as_mut()?;
            redis::cmd("PING").query_async::<String>(con).await.ok()?;
            // Memory, for the alert before Redis refuses every tenant's
            // writes at maxmemory; a user without INFO just exports none.
            if let Ok(info) = redis::cmd("INFO").arg("memory").query_async::<String>(con).await {
                let memory = bucketscan_core::fleet::queue::Memory::of_info(&info);
                metrics.redis_memory_used.set(memory.used as i64);
                metrics.redis_memory_max.set(memory.max as i64);
            }
            Some(())
        })
        .await
        .ok()
        .flatten()
        .is_some();
        if !answered {
            connection = None;
        }
        let was = metrics.redis_up.get() == 1;
        if was != answered {
            tracing::warn!(redis_up = answered, "Redis health changed");
        }
        metrics.redis_up.set(i64::from(answered));
        tokio::time::sleep(EVERY).await;
    }
}

#[cfg(test)]
mod tests {
    use super::refuse_master_password_for_sentinels as refuse;

    #[test]
    fn the_master_s_password_is_never_the_sentinels_while_pods_get_the_address() {
        let shared = refuse("redis+sentinel://:pw1@s1,s2/m?sentinelPassword=pw1").unwrap_err();
        assert!(!shared.to_string().contains("pw1"), "{shared}");
        assert!(refuse("redis+sentinel://:pw1@s1/m?sentinelUser=w&sentinelPassword=pw2").is_ok());
        assert!(refuse("redis+sentinel://:pw1@s1/m").is_ok());
        assert!(refuse("redis://:pw1@r:6379").is_ok());
    }
}
