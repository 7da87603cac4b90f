//! Bad input to `bucketscan-worker`, each case one clear line on stderr, a
//! non-zero exit and nothing half-written: endpoints that are unreachable, do
//! not resolve or are not S3 at all, a Redis with the wrong password, out of
//! reach or out of memory, flags out of range, an output bucket that does not
//! exist. The rows of docs/bad-input.md name these tests.

mod common;

use common::*;
use std::io::{Read, Write};
use std::process::{Command, Output};

/// `bucketscan-worker ARGS` with test credentials and nothing else from the
/// environment that could reach a real store.
fn worker(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(worker_bin());
    cmd.args(args)
        .env("AWS_ACCESS_KEY_ID", "bad-input")
        .env("AWS_SECRET_ACCESS_KEY", "bad-input-secret")
        .env("AWS_REGION", "us-east-1")
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .env_remove("AWS_PROFILE")
        .env_remove("BUCKETSCAN_REDIS_URL")
        .env_remove("AWS_ENDPOINT_URL");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

/// The one error line of a failed run.
fn one_error_line(out: &Output) -> String {
    assert!(!out.status.success(), "expected a failure, got {out:?}");
    let err = stderr(out);
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "one line on stderr, got: {err}");
    assert!(lines[0].starts_with("error: "), "{err}");
    lines[0].to_string()
}

/// The error line a failed run ends with; every line before it must be a
/// warning that it is retrying (a Redis that is not up yet is waited for).
fn final_error_line(out: &Output) -> String {
    assert!(!out.status.success(), "expected a failure, got {out:?}");
    let err = stderr(out);
    let mut lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    let last = lines.pop().unwrap_or_default();
    assert!(last.starts_with("error: "), "{err}");
    for l in lines {
        assert!(
            l.contains("WARN") && l.contains("retrying"),
            "only retry warnings before the error: {err}"
        );
    }
    last.to_string()
}

/// `plan` with Redis and the endpoint on closed ports: what it refuses, it
/// refuses before asking either.
const PLAN_UNREACHABLE: [&str; 11] = [
    "plan",
    "--scan",
    "s",
    "--redis",
    "redis://127.0.0.1:1",
    "--endpoint",
    "http://127.0.0.1:1",
    "--bucket",
    "b",
    "--output",
    "s3://o/",
];

fn closed_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[test]
fn an_unreachable_endpoint_is_one_clear_line() {
    let endpoint = format!("http://127.0.0.1:{}", closed_port());
    let out = worker(
        &[
            "scan",
            "--bucket",
            "b",
            "--quiet",
            "--path-style",
            "--endpoint",
            &endpoint,
        ],
        &[],
    );
    let line = one_error_line(&out);
    assert!(
        line.contains("cannot list s3://b") && line.contains("connection failed") && line.contains("refused"),
        "{line}"
    );
    assert!(out.stdout.is_empty(), "no records on a failed scan");
}

#[test]
fn an_endpoint_that_does_not_resolve_is_one_clear_line() {
    // `.invalid` never resolves (RFC 2606).
    let out = worker(
        &[
            "scan",
            "--bucket",
            "b",
            "--quiet",
            "--path-style",
            "--endpoint",
            "http://no-such-store.invalid:9000",
        ],
        &[],
    );
    let line = one_error_line(&out);
    assert!(
        line.contains("cannot list s3://b") && line.contains("no-such-store.invalid"),
        "{line}"
    );
}

/// A plain HTTP server that answers every request with an HTML page, as a
/// web server or a load balancer's error page would.
fn html_server() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming().take(64) {
            let Ok(mut s) = stream else { continue };
            let mut buf = [0u8; 4096];
            let _ = s.read(&mut buf);
            let body = "<!DOCTYPE html><html><body><h1>Welcome to nginx!</h1></body></html>";
            let _ = write!(
                s,
                "HTTP/1.1 200 OK\r\ncontent-type: text/html\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    port
}

#[test]
fn an_endpoint_that_is_not_s3_is_one_clear_line() {
    let endpoint = format!("http://127.0.0.1:{}", html_server());
    let out = worker(
        &[
            "scan",
            "--bucket",
            "b",
            "--quiet",
            "--path-style",
            "--endpoint",
            &endpoint,
        ],
        &[],
    );
    let line = one_error_line(&out);
    assert!(
        line.contains("cannot list s3://b")
            && line.contains("answered a LIST with text/html (")
            && line.contains("instead of an S3 ListBucketResult"),
        "{line}"
    );
    // The answer is never quoted: the operator shows these errors in a
    // tenant's status, and quoting would read back any internal URL.
    assert!(!line.contains("Welcome to nginx"), "{line}");
}

#[test]
fn flags_out_of_range_are_refused_before_any_request() {
    for (flag, value) in [
        ("--concurrency", "0"),
        ("--concurrency", "10001"),
        ("--target-shards", "0"),
        ("--shard-parallelism", "0"),
    ] {
        let out = worker(
            &[
                "scan",
                "--bucket",
                "b",
                "--endpoint",
                "http://127.0.0.1:1",
                flag,
                value,
            ],
            &[],
        );
        assert_eq!(out.status.code(), Some(2), "{flag} {value}: usage error");
        let err = stderr(&out);
        assert!(
            err.contains(&format!("invalid value '{value}' for '{flag}")) && err.contains("not in"),
            "{flag} {value}: {err}"
        );
    }
    // A rate ceiling of 0 or below read as "no ceiling" in the engine: the
    // opposite of what it says.
    for value in ["0", "-5", "NaN", "inf", "fast"] {
        let flag = format!("--max-rate={value}");
        let out = worker(
            &["scan", "--bucket", "b", "--endpoint", "http://127.0.0.1:1", &flag],
            &[],
        );
        assert_eq!(out.status.code(), Some(2), "--max-rate {value}: usage error");
        let err = stderr(&out);
        assert!(
            err.contains("is not a rate: give requests per second above 0"),
            "--max-rate {value}: {err}"
        );
    }
    let plan = [
        "plan",
        "--scan",
        "s",
        "--redis",
        "redis://127.0.0.1:1",
        "--bucket",
        "b",
        "--endpoint",
        "http://127.0.0.1:1",
        "--output",
        "s3://o/",
    ];
    for value in ["0", "1000001"] {
        let out = worker(&[&plan[..], &["--plan-list-budget", value]].concat(), &[]);
        assert_eq!(
            out.status.code(),
            Some(2),
            "--plan-list-budget {value}: usage error"
        );
        let err = stderr(&out);
        assert!(
            err.contains(&format!("invalid value '{value}' for '--plan-list-budget"))
                && err.contains("not in"),
            "--plan-list-budget {value}: {err}"
        );
    }
}

/// A scan id names a folder of the output and a Redis hash tag: one with a
/// `/` (whose folder would hold another scan's), braces or nothing at all is
/// a usage error, for every command that takes one.
#[test]
fn a_scan_id_that_is_no_folder_name_is_refused() {
    for id in ["a/b", "", "x{y}", "..\\z"] {
        for command in [
            &["plan", "--bucket", "b", "--output", "s3://o/"][..],
            &["delete-parts", "--output", "s3://o/"],
        ] {
            let args = [command, &["--scan", id, "--redis", "redis://127.0.0.1:1"]].concat();
            let args: Vec<&str> = args
                .into_iter()
                .filter(|a| command[0] == "plan" || *a != "--redis" && *a != "redis://127.0.0.1:1")
                .collect();
            let out = worker(&args, &[]);
            assert_eq!(
                out.status.code(),
                Some(2),
                "{command:?} --scan {id:?}: usage error"
            );
            assert!(stderr(&out).contains("is not a scan id"), "{}", stderr(&out));
        }
    }
}

/// An unknown format or layout is a usage error; a data file size S3 cannot
/// compose is refused before Redis or S3 is asked anything (both unreachable
/// here).
#[test]
fn output_settings_that_cannot_work_are_refused_before_any_request() {
    let scan = ["scan", "--bucket", "b", "--endpoint", "http://127.0.0.1:1"];
    let out = worker(&[&scan[..], &["--format", "xml"]].concat(), &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("unknown format \"xml\": use jsonl, csv or parquet"),
        "{}",
        stderr(&out)
    );
    let plan = PLAN_UNREACHABLE;
    let out = worker(&[&plan[..], &["--layout", "many"]].concat(), &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("use single or dataset"), "{}", stderr(&out));
    for size in ["1000", "5368709121"] {
        let out = worker(
            &[&plan[..], &["--layout", "dataset", "--file-size", size]].concat(),
            &[],
        );
        let line = one_error_line(&out);
        assert!(
            line.contains(&format!("file size {size} is out of range")) && line.contains("5 MiB"),
            "{line}"
        );
    }
    // Parquet compresses itself: --gzip with it is refused by scan and plan
    // before anything is asked (the endpoint and Redis are closed ports).
    let gzip = ["--format", "parquet", "--gzip"];
    for args in [&scan[..], &plan[..]] {
        let line = one_error_line(&worker(&[args, &gzip[..]].concat(), &[]));
        assert!(
            line.contains("gzip does not apply to parquet") && line.contains("drop --gzip"),
            "{line}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_output_bucket_is_refused_before_planning() {
    let s3 = versitygw();
    let bucket = s3.bucket("bad-out").await;
    s3.seed(&bucket, &[("k".to_string(), Seeded::default())].into())
        .await;
    let redis = std::env::var("BUCKETSCAN_TEST_REDIS_URL").unwrap();
    let out = s3.worker_env(
        &[
            "plan",
            "--scan",
            &format!("bad-out-{}", std::process::id()),
            "--bucket",
            &bucket,
            "--output",
            "s3://no-such-output-bucket/x/",
        ],
        &[("BUCKETSCAN_REDIS_URL", &redis)],
    );
    let line = one_error_line(&out);
    assert!(
        line.contains("no-such-output-bucket") && line.contains("does not exist"),
        "{line}"
    );
}

/// A plan against `redis_url` (given up on after 2 s): the line it fails with.
fn plan_error(redis_url: &str) -> String {
    let out = worker(
        &[
            "plan",
            "--scan",
            "bad-redis",
            "--endpoint",
            "http://127.0.0.1:1",
            "--path-style",
            "--bucket",
            "b",
            "--output",
            "s3://o/",
        ],
        &[
            ("BUCKETSCAN_REDIS_URL", redis_url),
            ("BUCKETSCAN_REDIS_PATIENCE_SECS", "2"),
        ],
    );
    final_error_line(&out)
}

#[test]
fn redis_with_a_wrong_password_is_one_clear_line_without_the_password() {
    let redis = PrivateRedis::start_with(|port| {
        ["--port", &port.to_string(), "--requirepass", "right-password"]
            .map(String::from)
            .to_vec()
    });
    let port = redis.port;
    let line = plan_error(&format!("redis://:wrong-password@127.0.0.1:{port}"));
    assert!(
        line.contains("cannot reach Redis") && line.to_lowercase().contains("password"),
        "{line}"
    );
    assert!(
        !line.contains("wrong-password") && !line.contains("right-password"),
        "{line}"
    );
}

#[test]
fn an_unreachable_redis_is_one_clear_line() {
    let line = plan_error(&format!("redis://127.0.0.1:{}", closed_port()));
    assert!(
        line.contains("cannot reach Redis") && line.contains("refused"),
        "{line}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
/// A full Redis is full now, not for good (other scans finish and free
/// their keys): the plan exits 75, which the operator retries (Blocked), so
/// one tenant filling Redis makes others wait rather than fail.
async fn a_redis_out_of_memory_fails_the_plan_clearly_as_transient_and_leaves_no_half_plan() {
    let s3 = versitygw();
    let bucket = s3.bucket("oom").await;
    let out = s3.bucket("oom-out").await;
    s3.seed(
        &bucket,
        &(0..3000)
            .map(|i| (format!("p{}/{i:05}", i % 30), Seeded::default()))
            .collect(),
    )
    .await;
    // The connection works, every write is refused: the limit is below what
    // an empty Redis uses already.
    let redis = PrivateRedis::start();
    let url = redis.url();
    let mut con = redis::Client::open(url.as_str())
        .unwrap()
        .get_connection()
        .unwrap();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg("1")
        .query(&mut con)
        .unwrap();
    let planned = s3.worker_env(
        &[
            "plan",
            "--scan",
            "oom",
            "--bucket",
            &bucket,
            "--output",
            &format!("s3://{out}/x/"),
            "--target-shards",
            "8",
        ],
        &[("BUCKETSCAN_REDIS_URL", &url)],
    );
    let line = one_error_line(&planned);
    assert!(
        line.contains("Redis") && line.contains("OOM") && line.contains("maxmemory"),
        "{line}"
    );
    assert!(
        line.contains("waits and tries again") && line.contains("transient"),
        "{line}"
    );
    assert_eq!(planned.status.code(), Some(75), "EX_TEMPFAIL: {line}");
    let keys: Vec<String> = redis::cmd("KEYS").arg("bs:{oom}:*").query(&mut con).unwrap();
    assert!(keys.is_empty(), "a refused plan leaves nothing: {keys:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_credentials_at_all_is_one_clear_line_saying_what_to_set() {
    let s3 = versitygw();
    let mut cmd = Command::new(worker_bin());
    let out = cmd
        .args([
            "scan",
            "--bucket",
            "b",
            "--quiet",
            "--path-style",
            "--endpoint",
            &s3.endpoint,
        ])
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap())
        .env("HOME", temp_path("no-home"))
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .output()
        .unwrap();
    let line = one_error_line(&out);
    assert!(
        line.contains(
            "could not load credentials: none found; set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"
        ) && line.contains("instance metadata is off (AWS_EC2_METADATA_DISABLED=true)"),
        "{line}"
    );
}

#[test]
fn a_plan_output_that_is_not_an_s3_url_is_refused() {
    let out = worker(
        &["plan", "--scan", "x", "--bucket", "b", "--output", "results/"],
        &[("BUCKETSCAN_REDIS_URL", "redis://127.0.0.1:1")],
    );
    let line = one_error_line(&out);
    assert_eq!(
        line,
        "error: --output must be s3://BUCKET/ or s3://BUCKET/PREFIX/, got \"results/\""
    );
}

#[test]
fn an_unknown_metadata_source_is_a_usage_error() {
    for command in [
        &["scan", "--bucket", "b"][..],
        &["run", "--redis", "redis://127.0.0.1:1", "--scan", "s"],
    ] {
        let mut args = command.to_vec();
        args.extend(["--metadata-source", "heads"]);
        let out = worker(&args, &[]);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(
            stderr(&out).contains("invalid value 'heads' for '--metadata-source <METADATA_SOURCE>': unknown metadata source \"heads\": use auto, head or list (see docs/metadata-source.md)"),
            "{args:?}: {}",
            stderr(&out)
        );
    }
}

#[test]
fn an_unknown_head_client_is_a_usage_error() {
    let out = worker(&["scan", "--bucket", "b", "--head-client", "turbo"], &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("invalid value 'turbo' for '--head-client <HEAD_CLIENT>': unknown HEAD client \"turbo\": use fast or sdk"),
        "{}",
        stderr(&out)
    );
}

/// Each bad value of a filter flag, for `scan` and `plan`: one clear line
/// naming the flag and what to write instead, a usage error (2) for a value
/// bad in itself, a failure (1) for flags that together keep nothing, all
/// before the store or Redis is asked anything (both are closed ports).
#[test]
fn bad_filter_flags_are_refused_before_any_request() {
    let scan = ["scan", "--bucket", "b", "--endpoint", "http://127.0.0.1:1"];
    let plan = PLAN_UNREACHABLE;
    let usage: [(&[&str], &str); 8] = [
        (
            &["--modified-after", "yesterday"],
            "invalid value 'yesterday' for '--modified-after <TIME>': is neither an RFC 3339 time",
        ),
        (
            &["--modified-before", "2026-05-01 00:00"],
            "invalid value '2026-05-01 00:00' for '--modified-before <TIME>': is neither an RFC 3339 time",
        ),
        (
            &["--min-size", "10MiB"],
            "invalid value '10MiB' for '--min-size <BYTES>': \"10MiB\" is not a size in bytes: write a whole number",
        ),
        (
            &["--max-size=-1"],
            "invalid value '-1' for '--max-size <BYTES>': \"-1\" is not a size in bytes",
        ),
        (
            &["--include", "logs/[0-9"],
            "invalid value 'logs/[0-9' for '--include <GLOB>': the '[' at character 6 has no closing ']'",
        ),
        (
            &["--exclude", "tmp\\"],
            "invalid value 'tmp\\' for '--exclude <GLOB>': it ends with a lone '\\'",
        ),
        (
            &["--include", ""],
            "invalid value '' for '--include <GLOB>': a glob cannot be empty",
        ),
        (
            &["--storage-class", "GLACIER IR"],
            "invalid value 'GLACIER IR' for '--storage-class <CLASS>': \"GLACIER IR\" is not a storage class name",
        ),
    ];
    let refused: [(&[&str], &str); 3] = [
        (
            &["--min-size", "10", "--max-size", "9"],
            "error: invalid filter flags: the minimum size 10 is above the maximum size 9 (bytes): no object can match",
        ),
        (
            &["--modified-after", "2026-05-02", "--modified-before", "2026-05-01T23:00:00-01:00"],
            "error: invalid filter flags: the modified-after time 2026-05-02T00:00:00Z is not before the modified-before time 2026-05-02T00:00:00Z",
        ),
        (
            &["--prefix", "logs/", "--include", "*.csv"],
            "error: include glob \"*.csv\" can never match a key under the prefix \"logs/\": a glob matches the whole key, prefix included, and '*' and '?' stop at '/' (did you mean \"logs/*.csv\"?)",
        ),
    ];
    for command in [&scan[..], &plan[..]] {
        for (flags, message) in usage {
            let out = worker(&[command, flags].concat(), &[]);
            assert_eq!(out.status.code(), Some(2), "{flags:?}: usage error");
            assert!(stderr(&out).contains(message), "{flags:?}: {}", stderr(&out));
        }
        for (flags, message) in refused {
            let line = one_error_line(&worker(&[command, flags].concat(), &[]));
            assert!(line.starts_with(message), "{flags:?}: {line}");
        }
    }
}
