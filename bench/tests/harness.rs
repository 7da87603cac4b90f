//! The benchmark harness (bench/run.py): its pure logic's unit tests, and a
//! quick run on tiny N against the real synthetic-s3 with our worker and the
//! hyper loop, which must produce a table with every object counted. The
//! quick run's fleet sections (saturation: three fleets, the autoscaled one
//! driven by `autoscaled-fleet`; LIST latency: four single-worker scans of 5
//! and 100 ms LIST pages, 1 and 4 shards in flight) are small benchmarks, not
//! checks: that test is ignored by `just test` and run by `just bench` before
//! it measures (docs/testing.md, "What moved out of just test"). Fails,
//! saying why, when the benchmark's Python venv is missing: a skipped harness
//! test would pass without testing anything.

#[path = "../../worker/tests/common/bin.rs"]
mod bin;

use std::path::{Path, PathBuf};
use std::process::Command;

fn venv_python() -> PathBuf {
    let cache = std::env::var_os("BUCKETSCAN_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").unwrap()).join(".cache/bucketscan"));
    let python = cache.join("venv/bin/python");
    assert!(
        python.exists(),
        "no Python venv at {}: run scripts/install-deps.sh",
        python.display()
    );
    python
}

fn bench_dir() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn harness_logic_unit_tests_pass() {
    let out = Command::new(venv_python())
        .arg(bench_dir().join("test_run.py"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

/// run.py with tiny N and the sections named by `sections` (the rest off),
/// with `extra` arguments: the results JSON and the Markdown it wrote.
fn quick_run(tag: &str, sections: &[&str], extra: &[&str]) -> (serde_json::Value, String) {
    let python = venv_python();
    let dir = std::env::temp_dir().join(format!("bucketscan-harness-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bin_dir = Path::new(env!("CARGO_BIN_EXE_synthetic-s3")).parent().unwrap();
    let mut command = Command::new(python);
    command
        .arg(bench_dir().join("run.py"))
        .args(["--mode", "quick", "--objects", "1500"])
        .args(["--clients", "ours-fast,hyper-loop"])
        .arg("--bin-dir")
        .arg(bin_dir)
        .arg("--worker")
        .arg(bin::worker_bin())
        .arg("--e2e")
        .arg(dir.join("no-e2e.json"))
        .arg("--json")
        .arg(dir.join("results.json"))
        .arg("--markdown")
        .arg(dir.join("BENCHMARKS.md"));
    if sections.is_empty() {
        command.args([
            "--no-fleet",
            "--no-scale",
            "--no-billion",
            "--no-saturation",
            "--no-list-latency",
            "--no-incremental",
        ]);
    } else {
        command.arg("--only").arg(sections.join(","));
    }
    command.args(extra);
    let out = command.output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let results = serde_json::from_slice(&std::fs::read(dir.join("results.json")).unwrap()).unwrap();
    let md = std::fs::read_to_string(dir.join("BENCHMARKS.md")).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    (results, md)
}

#[test]
fn a_quick_run_counts_every_object() {
    let (results, md) = quick_run("clients", &[], &[]);
    for client in ["ours-fast", "hyper-loop"] {
        let c = &results["clients"][client];
        assert_eq!(c["objects"], 1500.0, "{client}: {c}");
        assert!(c["heads_served"].as_f64().unwrap() >= 1500.0, "{client}: {c}");
        assert!(c["head_per_s"].as_f64().unwrap() > 0.0, "{client}: {c}");
    }
    assert_eq!(results["list"]["objects"], 1500);
    assert!(md.contains("| bucketscan, --head-client fast | 1,500 |"), "{md}");
    assert!(
        md.contains("| bare hyper HEAD loop (physical limit) | 1,500 |"),
        "{md}"
    );
    assert!(
        md.contains("not measured in this run (`e2e/run.sh bench` writes it"),
        "{md}"
    );
}

/// The incremental section on tiny N (1,500 objects, 16 of them changed):
/// the incremental scan's result equals the full scan of the changed bucket
/// record by record, its change set is synthetic-s3's list of changes, and
/// it HEADs only the added and changed objects. A small benchmark too (three
/// scans and a MinIO): `just bench` runs it, `just test` does not.
#[test]
#[ignore = "a small benchmark of the incremental section: `just bench` runs it (docs/testing.md)"]
fn the_quick_run_s_incremental_section_is_exact() {
    let (results, md) = quick_run("incremental", &["incremental"], &[]);
    let rows = results["incremental"]["rows"]
        .as_array()
        .expect("the incremental section");
    assert_eq!(rows.len(), 1);
    let r = &rows[0];
    assert_eq!(r["objects"], 1500, "{r}");
    assert_eq!(r["full"]["heads"], 1500, "{r}");
    assert_eq!(r["changes_made"], 16, "{r}");
    // 4 added, 4 rewritten, 4 replaced: HEADed; 4 deleted: not listed.
    assert_eq!(r["incremental"]["heads"], 12, "{r}");
    assert_eq!(r["records_equal"], true, "{r}");
    assert_eq!(r["changes_exact"], true, "{r}");
    assert!(md.contains("## Incremental scans: 1 % changed"), "{md}");
}

/// The 10^9 section's steps on 100,000 keys (`--billion-keys`): the real
/// `bucketscan-worker plan` into a private Redis with its output bucket on a
/// versitygw behind synthetic-s3's `--forward` (planning writes its store
/// check there), every shard completed by `complete-shards`, the merge
/// planned. Until the section had an output store, `plan` failed on the
/// source bucket as its output (synthetic-s3 serves only LIST and HEAD),
/// and only the long run of `just bench` said so. A few seconds, but a
/// benchmark section: `just bench` runs it before measuring, `just test`
/// does not.
#[test]
#[ignore = "a small run of the 10^9 section: `just bench` runs it (docs/testing.md)"]
fn the_quick_run_s_billion_section_plans_into_a_real_output_store_and_completes_every_shard() {
    let keys = 100_000;
    let (results, md) = quick_run("billion", &["billion"], &["--billion-keys", &keys.to_string()]);
    let section = &results["billion"];
    assert_eq!(section["keys"], keys, "{section}");
    assert_eq!(section["output_store"], "versitygw", "{section}");
    let rows = section["rows"].as_array().expect("the 10^9 section's rows");
    assert_eq!(rows.len(), 1, "quick mode plans the flat layout only: {section}");
    let r = &rows[0];
    assert_eq!(r["layout"], "flat", "{r}");
    // complete-shards fails unless the shards hold every key once.
    assert_eq!(r["objects"], keys, "{r}");
    let shards = r["shards"].as_u64().unwrap();
    assert!(shards >= 1 && r["parts"].as_u64().unwrap() >= shards, "{r}");
    // synthetic-s3 counted the planner's LISTs and the source bucket's
    // check; the output bucket's requests went on to the versitygw.
    let (lists, served) = (r["lists"].as_u64().unwrap(), r["lists_served"].as_u64().unwrap());
    assert!(lists >= 1 && served == lists + 1, "{r}");
    // The store check planning recorded in store-check.json on the
    // versitygw, made (either verdict names LastModified), not failed.
    let check = r["store_check"].as_str().expect("the recorded store check");
    assert!(
        check.contains("LastModified") && !check.contains("failed"),
        "{check}"
    );
    assert!(
        md.contains("## 10^9 keys: planning, every shard completed"),
        "{md}"
    );
    assert!(
        md.contains("its output bucket on a versitygw behind synthetic-s3's `--forward`"),
        "{md}"
    );
    assert!(
        md.contains("This run served 100,000 keys per layout, not 10^9"),
        "{md}"
    );
}

/// A small benchmark (about four minutes of 2 cores): `just bench` runs it
/// before measuring, `just test` does not.
#[test]
#[ignore = "a small benchmark of the fleet sections: `just bench` runs it (docs/testing.md)"]
fn the_quick_run_s_fleet_sections_scan_every_object() {
    let (results, md) = quick_run("fleets", &["saturation", "list_latency"], &[]);
    // Each fleet scanned every object (fleet_once checks the manifest).
    let fleets = results["saturation"]["rows"]
        .as_array()
        .expect("the saturation section");
    let labels: Vec<_> = fleets.iter().map(|r| r["label"].as_str().unwrap()).collect();
    assert_eq!(labels, ["too few", "too many", "autoscaled"]);
    for r in fleets {
        assert_eq!(r["objects"], 1500, "{r}");
        assert!(r["requests"].as_u64().unwrap() >= 1500, "{r}");
    }
    assert!(fleets[2]["started"].as_u64().unwrap() >= 1, "{}", fleets[2]);
    // Each LIST latency row scanned every object (fleet_once checks the
    // manifest) through one worker with its shards in flight.
    let rows = results["list_latency"]["rows"]
        .as_array()
        .expect("the LIST latency section");
    let kinds: Vec<_> = rows
        .iter()
        .map(|r| {
            (
                r["list_median_ms"].as_f64().unwrap(),
                r["shards_in_flight"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(kinds, [(5.0, 1), (5.0, 4), (100.0, 1), (100.0, 4)]);
    for r in rows {
        assert_eq!(r["objects"], 1500, "{r}");
        assert!(r["heads"].as_u64().unwrap() >= 1500, "{r}");
        assert!(r["objects_per_s"].as_f64().unwrap() > 0.0, "{r}");
    }
    assert!(
        md.contains("## LIST latency: shards in flight (issue 14, item 2)"),
        "{md}"
    );
}
