//! The operator binary as the operator's tests run it: `Operator::watching(ns)`
//! gives a builder with the test ground's defaults (its kubeconfig, Redis
//! and loopback S3 servers, a metrics port of its own, stderr to a log
//! file), the test adds what it needs, and `start` returns a guard that
//! kills and reaps the process when it is dropped, also when the test
//! panics, so that a failed test leaves no operator reconciling behind it.
//!
//! Imports only std and the rest of `cluster` (`process::Guarded` stops it). Other crates' tests include
//! `cluster/` too (the plugin's): they have no operator binary, which only
//! `start` and `output` need, so its path is read with `option_env!`.

use super::process::Guarded;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Output};
use std::sync::atomic::{AtomicUsize, Ordering};

/// The operator's endpoint allowlist in these tests: the test ground's S3
/// servers listen on loopback, which the default refuses (a tenant must
/// not reach the operator's own host), so every operator a test starts
/// allows it by name, as a platform would list its store.
pub const TEST_GROUND_ENDPOINTS: &str = "127.0.0.1";

/// The log filter of the tests that read the operator's reconciles in its
/// log (`BUCKETSCAN_LOG`).
pub const DEBUG_LOG: &str = "info,bucketscan_operator=debug";

fn binary() -> &'static str {
    match option_env!("CARGO_BIN_EXE_bucketscan-operator") {
        Some(path) => path,
        None => panic!("only the operator's own tests have its binary (cluster::Operator)"),
    }
}

/// How to start an operator; `Operator::watching` makes one.
pub struct OperatorBuilder {
    command: Command,
    metrics_port: u16,
    log: PathBuf,
}

impl OperatorBuilder {
    /// Adds `args` to its command line.
    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<std::ffi::OsStr>,
    {
        self.command.args(args);
        self
    }

    /// Sets `key` in its environment (over the ground's defaults).
    pub fn env(mut self, key: &str, value: impl AsRef<std::ffi::OsStr>) -> Self {
        self.command.env(key, value);
        self
    }

    /// Leaves `key` out of its environment (e.g. the endpoint allowlist,
    /// for the operator's default).
    pub fn env_remove(mut self, key: &str) -> Self {
        self.command.env_remove(key);
        self
    }

    /// Talks to the API server through `kubeconfig` (e.g. one that
    /// impersonates the chart's ServiceAccount) instead of as the admin.
    pub fn kubeconfig(self, kubeconfig: impl AsRef<Path>) -> Self {
        self.env("KUBECONFIG", kubeconfig.as_ref())
    }

    /// Uses the Redis at `url` instead of the ground's shared one.
    pub fn redis(self, url: &str) -> Self {
        self.env("BUCKETSCAN_REDIS_URL", url)
    }

    /// Gives each scan a Redis user of its own (`--redis-scan-users=true`).
    pub fn redis_scan_users(self) -> Self {
        self.args(["--redis-scan-users=true"])
    }

    /// Requeues every scan at least every `secs` seconds (`--lease-secs`).
    pub fn lease_secs(self, secs: u32) -> Self {
        self.args(["--lease-secs", &secs.to_string()])
    }

    /// Logs its reconciles (`DEBUG_LOG`).
    pub fn debug_log(self) -> Self {
        self.env("BUCKETSCAN_LOG", DEBUG_LOG)
    }

    /// Serves /metrics and /readyz on `port` (default: a free one).
    pub fn metrics_port(mut self, port: u16) -> Self {
        self.metrics_port = port;
        self
    }

    /// Writes its log (stderr) to `path` (default: a file of its own in
    /// the test's scratch directory, named after its namespace).
    pub fn log(mut self, path: impl Into<PathBuf>) -> Self {
        self.log = path.into();
        self
    }

    /// Starts it; the guard stops it.
    pub fn start(mut self) -> Operator {
        self.command
            .args(["--metrics-addr", &format!("127.0.0.1:{}", self.metrics_port)]);
        Operator {
            process: Guarded::spawn(self.command, &self.log, "the operator binary"),
            metrics_port: self.metrics_port,
        }
    }
}

/// A running operator, killed and reaped when dropped (`Guarded`).
pub struct Operator {
    process: Guarded,
    metrics_port: u16,
}

impl Operator {
    /// The operator watching namespace `ns` (`--namespace`) with the test
    /// ground's kubeconfig, Redis (`BUCKETSCAN_TEST_REDIS_URL`) and S3
    /// servers allowed, stdout dropped.
    pub fn watching(ns: &str) -> OperatorBuilder {
        static STARTED: AtomicUsize = AtomicUsize::new(0);
        let n = STARTED.fetch_add(1, Ordering::Relaxed);
        let mut command = Command::new(binary());
        command
            .args(["--namespace", ns])
            .env("KUBECONFIG", super::kubeconfig_path())
            .env(
                "BUCKETSCAN_REDIS_URL",
                std::env::var("BUCKETSCAN_TEST_REDIS_URL").expect("run the tests with `just test`"),
            )
            .env("BUCKETSCAN_ALLOWED_ENDPOINTS", TEST_GROUND_ENDPOINTS);
        OperatorBuilder {
            command,
            metrics_port: super::free_port(),
            log: super::scratch(&format!("operator-{ns}-{n}.log")),
        }
    }

    /// The operator binary run to its end with `args` and `env` only (no
    /// ground defaults): for the checks that stop it at start, and its
    /// `check` subcommand.
    pub fn output(args: &[&str], env: &[(&str, &str)]) -> Output {
        Command::new(binary())
            .args(args)
            .envs(env.iter().copied())
            .output()
            .expect("the operator binary runs")
    }

    pub fn metrics_port(&self) -> u16 {
        self.metrics_port
    }

    pub fn id(&self) -> u32 {
        self.process.id()
    }

    pub fn log_path(&self) -> &Path {
        self.process.log_path()
    }

    /// What it has logged so far.
    pub fn log(&self) -> String {
        self.process.log()
    }

    /// Its exit status if it has ended, without waiting.
    pub fn try_wait(&mut self) -> Option<ExitStatus> {
        self.process.try_wait()
    }

    /// Waits for it to end (after a signal the test sent it).
    pub fn wait(&mut self) -> ExitStatus {
        self.process.wait()
    }

    /// Kills it and waits for its end: what dropping it does, at a point
    /// the test chooses (e.g. before reading its whole log).
    pub fn stop(&mut self) {
        self.process.stop();
    }
}
