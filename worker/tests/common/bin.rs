//! Where the `bucketscan-worker` binary is, for tests of any package.

/// The `bucketscan-worker` binary: Cargo names it for the worker's own tests;
/// other packages' tests (the operator's) find it beside their own binary,
/// built by the same `cargo test --workspace`.
pub fn worker_bin() -> std::path::PathBuf {
    if let Some(path) = option_env!("CARGO_BIN_EXE_bucketscan-worker") {
        return path.into();
    }
    let deps = std::env::current_exe().unwrap();
    let path = deps.parent().unwrap().parent().unwrap().join("bucketscan-worker");
    assert!(
        path.exists(),
        "{} is missing: cargo build -p bucketscan-worker",
        path.display()
    );
    path
}
