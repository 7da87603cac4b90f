//! A process a test starts beside the test ground (the operator, a
//! kube-controller-manager), killed and reaped when its guard is dropped,
//! also while a failed test unwinds, so that none outlives its test.
//!
//! Imports only std.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};

/// A started process and its log (stderr).
pub struct Guarded {
    child: Child,
    log: PathBuf,
    /// Its exit once waited for: nothing is left to kill or reap.
    reaped: Option<ExitStatus>,
}

impl Guarded {
    /// Starts `command` with stdout dropped and stderr to `log`; `what`
    /// names it if it cannot start.
    pub fn spawn(mut command: Command, log: &Path, what: &str) -> Guarded {
        let file = std::fs::File::create(log)
            .unwrap_or_else(|e| panic!("the log of {what}, {}: {e}", log.display()));
        let child = command
            .stdout(Stdio::null())
            .stderr(file)
            .spawn()
            .unwrap_or_else(|e| panic!("{what} does not start: {e}"));
        Guarded {
            child,
            log: log.to_path_buf(),
            reaped: None,
        }
    }

    pub fn id(&self) -> u32 {
        self.child.id()
    }

    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// What it has logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_else(|e| panic!("the log {}: {e}", self.log.display()))
    }

    /// Its exit status if it has ended (reaped then), without waiting.
    pub fn try_wait(&mut self) -> Option<ExitStatus> {
        if self.reaped.is_none() {
            self.reaped = self.child.try_wait().expect("the process's status");
        }
        self.reaped
    }

    /// Waits for it to end (after a signal the test sent it).
    pub fn wait(&mut self) -> ExitStatus {
        if let Some(status) = self.reaped {
            return status;
        }
        let status = self.child.wait().expect("the process's exit");
        self.reaped = Some(status);
        status
    }

    /// Kills it and waits for its end: what dropping it does, at a point
    /// the test chooses (e.g. before reading its whole log).
    pub fn stop(&mut self) {
        if self.reaped.is_none() {
            // One that ended by itself cannot be killed any more; the wait
            // reaps it either way. No panic here: this runs in `drop`
            // while a failed test unwinds.
            let _ = self.child.kill();
            self.reaped = self.child.wait().ok();
        }
    }
}

impl Drop for Guarded {
    fn drop(&mut self) {
        self.stop();
        if std::thread::panicking() {
            eprintln!("its log: {}", self.log.display());
        }
    }
}

/// kube-controller-manager running only `controllers` against the
/// ground's API server (no serving port, no leader election), with
/// `flags` too: the controllers a test needs that the ground does not run.
pub fn controller_manager(controllers: &str, flags: &[&str], log: &Path) -> Guarded {
    let mut command = Command::new("kube-controller-manager");
    command
        .args(["--kubeconfig", &super::kubeconfig_path()])
        .arg(format!("--controllers={controllers}"))
        .args(["--leader-elect=false", "--secure-port=0"])
        .args(flags);
    Guarded::spawn(
        command,
        log,
        "kube-controller-manager (scripts/install-kube.sh installs it)",
    )
}
