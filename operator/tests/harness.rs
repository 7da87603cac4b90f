//! The test harness itself (`cluster/`), on the test ground's real
//! kube-apiserver: an operator started through `cluster::Operator` is gone,
//! killed and reaped, once the test that started it has panicked, so a
//! failed test leaves no operator reconciling for the next one.

mod cluster;

use cluster::*;
use std::time::Duration;

const NS: &str = "harness";

/// The state letter of process `pid` in /proc (`R`, `S`, `Z` for a zombie
/// no one has reaped, ...); `None` once it is gone.
fn process_state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // "PID (COMM) STATE ...": the command may hold spaces and parentheses.
    let after_comm = &stat[stat.rfind(')')? + 1..];
    after_comm.trim_start().chars().next()
}

/// The command line of process `pid`, to tell the operator from a process
/// that took its pid afterwards.
fn command_line(pid: u32) -> Option<String> {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    Some(String::from_utf8_lossy(&raw).replace('\0', " "))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_test_that_panics_leaves_no_operator_process() {
    let client = client().await;
    install_crd(&client).await;
    namespace(&client, NS).await;

    // A test body that starts an operator and fails while it runs.
    let (started, pid) = std::sync::mpsc::channel();
    let failed = std::thread::spawn(move || {
        let operator = Operator::watching(NS).start();
        started.send((operator.id(), operator.metrics_port())).unwrap();
        // Held until the test has seen it running.
        std::thread::sleep(Duration::from_secs(3));
        panic!("a failing assertion while the operator {} runs", operator.id());
    });
    let (pid, port) = pid.recv().unwrap();

    // It runs (and serves), so its absence below is the guard's doing.
    eventually("the operator serving /readyz", 30, async || {
        http_get(port, "/readyz").await.map(|_| ())
    })
    .await;
    let running = process_state(pid);
    assert!(
        matches!(running, Some(state) if state != 'Z'),
        "the operator {pid} is not running: {running:?}"
    );

    assert!(failed.join().is_err(), "the test body did not fail");
    // Killed and reaped at once by the guard's drop: no process, not
    // even a zombie, is left (a pid taken again since is another program).
    let left = process_state(pid);
    let command = command_line(pid).unwrap_or_default();
    assert!(
        left.is_none() || (left != Some('Z') && !command.contains("bucketscan-operator")),
        "the operator {pid} outlived the failed test (state {left:?}): {command}"
    );
}
