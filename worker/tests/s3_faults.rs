//! What a real store does to some objects and some requests, emulated by a
//! fault proxy (`common/fault_proxy.rs`) in front of versitygw: the bucket,
//! the objects and every signature check are real; the proxy only answers
//! chosen requests itself or rewrites chosen answers, because no server here
//! can be told to deny one object or to behave like AWS. Each test says what
//! the proxy emulates.

mod common;
#[path = "common/fault_proxy.rs"]
mod fault_proxy;

use bucketscan_core::scan::record::{Record, Status};
use common::*;
use fault_proxy::FaultProxy;
use std::collections::BTreeMap;
use std::process::{Command, Output};

/// `n` objects `obj-00000`…, every third with metadata.
fn objects(n: usize) -> BTreeMap<String, Seeded> {
    (0..n)
        .map(|i| {
            let metadata = if i % 3 == 0 {
                BTreeMap::from([("Sample".to_string(), format!("s-{i}"))])
            } else {
                BTreeMap::new()
            };
            (
                format!("obj-{i:05}"),
                Seeded {
                    size: i % 11,
                    metadata,
                },
            )
        })
        .collect()
}

/// `bucketscan-worker ARGS` against `endpoint` with versitygw's credentials.
fn worker_command(endpoint: &str, args: &[&str]) -> Command {
    let vgw = versitygw();
    let mut cmd = Command::new(worker_bin());
    cmd.args(args)
        .args(["--endpoint", endpoint, "--path-style"])
        .env("AWS_ACCESS_KEY_ID", &vgw.access_key)
        .env("AWS_SECRET_ACCESS_KEY", &vgw.secret_key)
        .env("AWS_REGION", "us-east-1")
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .env_remove("AWS_PROFILE")
        .env_remove("AWS_SESSION_TOKEN");
    cmd
}

/// Run a worker without blocking the runtime the proxy serves on.
async fn run(mut cmd: Command) -> Output {
    tokio::task::spawn_blocking(move || cmd.output().expect("run bucketscan-worker"))
        .await
        .unwrap()
}

/// The keys the proxy refuses at HEAD, with the status it answers and the
/// error text the record must carry.
fn refusals() -> BTreeMap<String, (u16, &'static str)> {
    BTreeMap::from([
        (
            "obj-00013".to_string(),
            (403, "HTTP 403 on HEAD (no body: the object's ACL or a policy may deny it)"),
        ),
        (
            "obj-00042".to_string(),
            (
                400,
                "HTTP 400 on HEAD (no body: an SSE-C object needs its customer key, or the server refused the request)",
            ),
        ),
        (
            "obj-00077".to_string(),
            (405, "HTTP 405 on HEAD (no body: the server does not allow HEAD on this object)"),
        ),
        (
            "obj-00150".to_string(),
            (501, "HTTP 501 on HEAD (no body: the server does not implement HEAD for this object)"),
        ),
    ])
}

/// Key whose HEAD answer loses its Content-Length on the way.
const NO_LENGTH: &str = "obj-00099";

/// Emulates per-object refusals (an object ACL, an SSE-C object, a store
/// that refuses HEAD on some objects) and a HEAD answer without a
/// Content-Length; everything else reaches versitygw untouched.
async fn refusing_proxy() -> FaultProxy {
    let refused = refusals();
    fault_proxy::start(
        versitygw().endpoint,
        move |req| {
            let key = fault_proxy::object_key(req)?;
            let (status, _) = refused.get(&key).filter(|_| req.method == "HEAD")?;
            Some(fault_proxy::answer(*status, &[], ""))
        },
        |req, resp| {
            if req.method == "HEAD" && fault_proxy::object_key(req).as_deref() == Some(NO_LENGTH) {
                resp.headers.remove("content-length");
            }
        },
    )
    .await
}

/// Every refused key is an `error` record with its status and reason; every
/// other object is `ok` with exact size and metadata.
fn assert_refusals_recorded(records: &BTreeMap<String, Record>, seeded: &BTreeMap<String, Seeded>) {
    let refused = refusals();
    let mut readable = seeded.clone();
    for (key, (status, text)) in &refused {
        readable.remove(key);
        let rec = &records[key];
        assert_eq!(rec.status, Status::Error, "{rec:?}");
        assert_eq!(rec.http_status, Some(*status), "{rec:?}");
        assert_eq!(rec.error.as_deref(), Some(*text), "{rec:?}");
        assert_eq!(
            rec.size, seeded[key].size as u64,
            "the listed size stays: {rec:?}"
        );
    }
    readable.remove(NO_LENGTH);
    let rec = &records[NO_LENGTH];
    assert_eq!(rec.status, Status::Error, "{rec:?}");
    assert_eq!(
        rec.error.as_deref(),
        Some("invalid answer from S3: HEAD answer without Content-Length"),
        "{rec:?}"
    );
    let rest: BTreeMap<String, Record> = records
        .iter()
        .filter(|(k, _)| readable.contains_key(*k))
        .map(|(k, r)| (k.clone(), r.clone()))
        .collect();
    assert_eq!(rest.len() + refused.len() + 1, records.len(), "no other records");
    assert_matches_seed(&rest, &readable);
}

/// `scan` with one object denied (403), one needing its SSE-C key (400), one
/// refusing HEAD (405), one not implemented (501) and one answer without
/// Content-Length: five `error` records, everything else exact, the result
/// complete, exit code 3 and a warning naming the count. Both HEAD paths.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreadable_objects_are_error_records_and_the_scan_goes_on() {
    let server = versitygw();
    let bucket = server.bucket("refused").await;
    let seeded = objects(240);
    server.seed(&bucket, &seeded).await;
    let proxy = refusing_proxy().await;
    for head_client in ["fast", "sdk"] {
        let out_file = temp_path(&format!("refused-{head_client}.jsonl"));
        let out = run(worker_command(
            &proxy.url,
            &[
                "scan",
                "--bucket",
                &bucket,
                "--quiet",
                "--head-client",
                head_client,
                "--output",
                out_file.to_str().unwrap(),
            ],
        ))
        .await;
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(3), "{head_client}: {err}");
        assert!(err.contains("5 errors"), "{err}");
        assert!(
            err.contains("warning: 5 objects could not be read; their records have status \"error\""),
            "{err}"
        );
        assert!(!err.contains("error:"), "no failure line: {err}");
        let records = parse_records(&std::fs::read(&out_file).unwrap());
        assert_refusals_recorded(&records, &seeded);
    }
}

/// The same refusals through `plan`, `run` and `merge` (Redis and versitygw
/// real, the proxy in front of versitygw): the shard is done, not failed; the
/// merged result holds the error records; the manifest counts them; every
/// command exits 0 (the operator's merge Job must succeed), the merge warns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreadable_objects_do_not_fail_a_distributed_scan() {
    let server = versitygw();
    let bucket = server.bucket("refused-fleet").await;
    let output = server.bucket("refused-out").await;
    let seeded = objects(240);
    server.seed(&bucket, &seeded).await;
    let proxy = refusing_proxy().await;
    let redis = std::env::var("BUCKETSCAN_TEST_REDIS_URL").expect("run the tests with `just test`");
    let scan = format!("refused-{}", std::process::id());
    let fleet = |args: &[&str]| {
        let mut cmd = worker_command(&proxy.url, args);
        cmd.args(["--redis", &redis, "--scan", &scan]);
        cmd
    };
    let out_url = format!("s3://{output}/r/");
    for args in [
        vec!["plan", "--bucket", &bucket, "--output", &out_url],
        vec!["run", "--concurrency", "16"],
        vec!["merge"],
    ] {
        let out = run(fleet(&args)).await;
        assert_success(&out);
        if args[0] == "run" {
            assert!(
                stderr(&out).contains("1 shards done, 0 failed"),
                "{}",
                stderr(&out)
            );
        }
        if args[0] == "merge" {
            assert!(
                stderr(&out).contains("warning: 5 objects could not be read"),
                "{}",
                stderr(&out)
            );
        }
    }
    let records = parse_records(&server.read(&output, "r/result.jsonl").await);
    assert_refusals_recorded(&records, &seeded);
    let manifest: serde_json::Value =
        serde_json::from_slice(&server.read(&output, "r/manifest.json").await).unwrap();
    assert_eq!(manifest["counts"]["errors"], 5, "{manifest}");
    assert_eq!(manifest["shards_dead"], 0, "{manifest}");
}

/// Emulates AWS answering a LIST with an expired session token: the listing
/// works until the proxy starts answering the `ExpiredToken` error document
/// (AWS sends it with 400; some stores with 403) to every page after the
/// first. The scan fails with one line that says the token expired, not
/// "access denied", and writes no result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_session_token_is_one_clear_error() {
    let server = versitygw();
    let bucket = server.bucket("expired").await;
    server.seed(&bucket, &objects(1_200)).await;
    for status in [400, 403] {
        let proxy = fault_proxy::start(
            server.endpoint.clone(),
            move |req| {
                let later_page = req.uri.query().is_some_and(|q| q.contains("continuation-token"));
                later_page.then(|| {
                    fault_proxy::error_document(
                        status,
                        "ExpiredToken",
                        "The provided token has expired.",
                        &[],
                    )
                })
            },
            |_, _| {},
        )
        .await;
        let out_file = temp_path(&format!("expired-{status}.jsonl"));
        let out = run(worker_command(
            &proxy.url,
            &[
                "scan",
                "--bucket",
                &bucket,
                "--quiet",
                "--target-shards",
                "1",
                "--output",
                out_file.to_str().unwrap(),
            ],
        ))
        .await;
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(
            err.contains(&format!(
                "the session token expired (HTTP {status} ExpiredToken: The provided token has expired.); renew the credentials"
            )),
            "{err}"
        );
        assert!(!err.contains("access denied"), "{err}");
        assert_eq!(
            err.lines().filter(|l| l.starts_with("error:")).count(),
            1,
            "{err}"
        );
        assert!(!out_file.exists(), "no result");
        assert!(
            proxy.requests().iter().any(|r| r.answered_by_rule),
            "the proxy answered"
        );
    }
}

/// The region in the credential scope of a SigV4 Authorization header.
fn signed_region(authorization: &str) -> String {
    let scope = authorization
        .split("Credential=")
        .nth(1)
        .and_then(|c| c.split(',').next())
        .unwrap_or_else(|| panic!("no credential scope in {authorization:?}"));
    scope.split('/').nth(2).unwrap().to_string()
}

/// The region signed for comes from `--region`, then AWS_REGION, then
/// AWS_DEFAULT_REGION, then the profile, as the AWS SDKs resolve it (the
/// proxy only records what the worker signs; versitygw answers).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_region_comes_from_the_flag_then_the_environment_then_the_profile() {
    let server = versitygw();
    let bucket = server.bucket("region").await;
    let profile_dir = temp_path("region-profile");
    std::fs::create_dir_all(&profile_dir).unwrap();
    let config = profile_dir.join("config");
    std::fs::write(&config, "[profile scanner]\nregion = ca-central-1\n").unwrap();
    // (case, flags, environment, region signed for)
    type Case<'a> = (&'a str, &'a [&'a str], &'a [(&'a str, &'a str)], &'a str);
    let cases: [Case; 5] = [
        (
            "flag over env",
            &["--region", "ap-south-1"],
            &[("AWS_REGION", "eu-west-3")],
            "ap-south-1",
        ),
        (
            "AWS_REGION",
            &[],
            &[("AWS_REGION", "eu-west-3"), ("AWS_DEFAULT_REGION", "sa-east-1")],
            "eu-west-3",
        ),
        (
            "AWS_DEFAULT_REGION",
            &[],
            &[("AWS_DEFAULT_REGION", "sa-east-1")],
            "sa-east-1",
        ),
        ("profile", &[], &[("AWS_PROFILE", "scanner")], "ca-central-1"),
        ("nothing set", &[], &[], "us-east-1"),
    ];
    for (case, flags, env, want) in cases {
        let proxy = fault_proxy::start(server.endpoint.clone(), |_| None, |_, _| {}).await;
        let mut cmd = worker_command(
            &proxy.url,
            &["scan", "--bucket", &bucket, "--quiet", "-o", "/dev/null"],
        );
        cmd.args(flags)
            .env_remove("AWS_REGION")
            .env_remove("AWS_DEFAULT_REGION")
            .env("AWS_CONFIG_FILE", &config)
            .env("AWS_SHARED_CREDENTIALS_FILE", profile_dir.join("none"));
        for (name, value) in env {
            cmd.env(name, value);
        }
        let out = run(cmd).await;
        let first = proxy
            .requests()
            .into_iter()
            .next()
            .unwrap_or_else(|| panic!("{case}: no request: {}", stderr(&out)));
        assert_eq!(
            signed_region(first.authorization.as_deref().unwrap()),
            want,
            "{case}"
        );
    }
}

/// DeleteObjects answers 200 even when keys fail, with their errors in the
/// answer. A key that keeps failing (an object lock, a deny policy) is sent
/// again a bounded number of times, then named in the error with its code:
/// deleting parts never loops forever and never reports success falsely.
/// (The proxy answers every DeleteObjects itself: no server here has an
/// object lock to refuse with.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_delete_objects_keeps_refusing_are_retried_a_few_times_then_named() {
    let server = versitygw();
    let bucket = server.bucket("undeletable").await;
    let seeded: BTreeMap<String, Seeded> = ["parts/a", "parts/locked", "parts/z"]
        .into_iter()
        .map(|k| (k.to_string(), Seeded::default()))
        .collect();
    server.seed(&bucket, &seeded).await;
    let proxy = fault_proxy::start(
        server.endpoint.clone(),
        |req| {
            let is_delete = req.method == "POST" && req.uri.query().is_some_and(|q| q.contains("delete"));
            is_delete.then(|| {
                let body = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<DeleteResult><Error><Key>parts/locked</Key>\
                            <Code>AccessDenied</Code><Message>Access Denied by object lock</Message></Error></DeleteResult>";
                fault_proxy::answer(200, &[("content-type", "application/xml")], body)
            })
        },
        |_, _| {},
    )
    .await;
    let through_proxy = Server {
        endpoint: proxy.url.clone(),
        ..server.clone()
    };
    let s3 = through_proxy.s3().await;
    let err = bucketscan_core::s3::delete::delete_prefix(&s3, &bucket, "parts/")
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("could not delete 1 of 3 objects after 4 tries")
            && err.contains(&format!(
                "s3://{bucket}/parts/locked (AccessDenied: Access Denied by object lock)"
            )),
        "{err}"
    );
    let deletes = proxy.requests().iter().filter(|r| r.method == "POST").count();
    assert_eq!(deletes, 4, "one DeleteObjects per round, four rounds");
}

/// Emulates AWS for buckets that live in other regions than the client
/// assumes: `homes` maps a bucket to its region; a request for it signed for
/// another region is refused as AWS refuses it in its older regions (301
/// PermanentRedirect with `x-amz-bucket-region`); one signed for the right
/// region goes on to moto (which does not check signatures: versitygw would
/// refuse a region other than its own, see the next test).
async fn regional_proxy(homes: BTreeMap<String, &'static str>) -> FaultProxy {
    fault_proxy::start(
        moto().endpoint,
        move |req| {
            let home = *homes.get(fault_proxy::bucket_of(req.uri.path()))?;
            let auth = req.headers.get("authorization")?.to_str().ok()?;
            if signed_region(auth) == home {
                return None;
            }
            let header = [("x-amz-bucket-region", home)];
            Some(if req.method == "HEAD" {
                fault_proxy::answer(301, &header, "")
            } else {
                fault_proxy::error_document(
                    301,
                    "PermanentRedirect",
                    "The bucket you are attempting to access must be addressed using the specified endpoint.",
                    &header,
                )
            })
        },
        |_, _| {},
    )
    .await
}

/// A source bucket in eu-west-1 and an output bucket in ap-south-1, the
/// client told us-east-1: each bucket's region is learnt from the first
/// 301 (`x-amz-bucket-region`), every later request for it is signed for its
/// own region, and the result is exact. Both HEAD paths; LIST on the fast
/// path, the upload through the SDK. Before: the scan failed at its first LIST.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn buckets_in_other_regions_are_found_from_the_redirect_and_signed_for() {
    let server = moto();
    let source = server.bucket("in-eu").await;
    let output = server.bucket("in-ap").await;
    let seeded = objects(180);
    server.seed(&source, &seeded).await;
    let homes = BTreeMap::from([(source.clone(), "eu-west-1"), (output.clone(), "ap-south-1")]);
    for head_client in ["fast", "sdk"] {
        let proxy = regional_proxy(homes.clone()).await;
        let key = format!("result-{head_client}.jsonl");
        let mut cmd = worker_command(
            &proxy.url,
            &[
                "scan",
                "--bucket",
                &source,
                "--quiet",
                "--region",
                "us-east-1",
                "--head-client",
                head_client,
                "--output",
                &format!("s3://{output}/{key}"),
            ],
        );
        cmd.env("AWS_ACCESS_KEY_ID", &server.access_key)
            .env("AWS_SECRET_ACCESS_KEY", &server.secret_key);
        let out = run(cmd).await;
        assert_success(&out);
        assert_matches_seed(&parse_records(&server.read(&output, &key).await), &seeded);
        let seen = proxy.requests();
        let refused = seen.iter().filter(|r| r.answered_by_rule).count();
        // One refusal per bucket teaches the client, never one per object.
        assert!(
            (2..=4).contains(&refused),
            "{head_client}: {refused} refusals of {} requests",
            seen.len()
        );
        for r in seen.iter().filter(|r| !r.answered_by_rule) {
            let bucket = fault_proxy::bucket_of(&r.target);
            assert_eq!(
                signed_region(r.authorization.as_deref().unwrap()),
                homes[bucket],
                "{head_client}: {} {}",
                r.method,
                r.target
            );
        }
    }
}

/// versitygw itself refuses a request signed for a region other than its
/// own as AWS's newer regions do: 400 AuthorizationHeaderMalformed naming
/// the region in the document only. A client told eu-west-1 learns
/// us-east-1 from it and the scan is exact (both HEAD paths, the result
/// uploaded to the same store). Before: `cannot list`, HTTP 400.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_region_is_corrected_from_the_servers_400() {
    let server = versitygw();
    let bucket = server.bucket("wrong-region").await;
    let seeded = objects(90);
    server.seed(&bucket, &seeded).await;
    for head_client in ["fast", "sdk"] {
        let key = format!("region-result-{head_client}.jsonl");
        let out = server.worker(&[
            "scan",
            "--bucket",
            &bucket,
            "--quiet",
            "--region",
            "eu-west-1",
            "--head-client",
            head_client,
            "--output",
            &format!("s3://{bucket}/{key}"),
        ]);
        assert_success(&out);
        let mut records = parse_records(&server.read(&bucket, &key).await);
        records.retain(|k, _| !k.starts_with("region-result"));
        assert_matches_seed(&records, &seeded);
    }
}
/// A machine whose clock is hours off (run under libfaketime) against MinIO,
/// which refuses a request signed more than 15 minutes off its own clock
/// (`RequestTimeTooSkewed` on a LIST, a bare 403 on a HEAD): the client
/// takes the server's time from the refusal's `Date` and the scan is exact,
/// result upload included. Before: `cannot list`, access denied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clock_hours_off_is_corrected_from_the_servers_date() {
    let server = minio();
    let source = server.bucket("skew").await;
    let seeded = objects(120);
    server.seed(&source, &seeded).await;
    for (offset, head_client) in [("+2h", "fast"), ("-3h", "sdk")] {
        let key = format!("skew-result{offset}.jsonl");
        let output = format!("s3://{source}/{key}");
        let args = [
            "scan",
            "--bucket",
            &source,
            "--quiet",
            "--head-client",
            head_client,
            "--output",
            &output,
        ];
        let mut cmd = server.worker_command(&["faketime", "-f", offset], &args);
        let out = match cmd.output() {
            Ok(out) => out,
            Err(e) => panic!("cannot run faketime ({e}): scripts/install-deps.sh installs it"),
        };
        assert_success(&out);
        let mut records = parse_records(&server.read(&source, &key).await);
        records.retain(|k, _| !k.starts_with("skew-result"));
        assert_matches_seed(&records, &seeded);
    }
}

/// `scan --quiet` of `bucket` through `endpoint` into the file `NAME.jsonl`,
/// with `extra` arguments.
async fn scan_to_file(
    endpoint: &str,
    bucket: &str,
    name: &str,
    extra: &[&str],
) -> (Output, std::path::PathBuf) {
    let out_file = temp_path(&format!("{name}.jsonl"));
    let mut args = vec![
        "scan",
        "--bucket",
        bucket,
        "--quiet",
        "--output",
        out_file.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    (run(worker_command(endpoint, &args)).await, out_file)
}

/// Answers the first `times` requests that `matches` picks with an S3 error
/// document of `status` and `code`, then lets them through: a failure that
/// lasts longer than one request's retries, then passes.
fn failing_for_a_while(
    times: usize,
    status: u16,
    code: &'static str,
    matches: impl Fn(&http::request::Parts) -> bool + Send + Sync + 'static,
) -> impl Fn(&http::request::Parts) -> Option<http::Response<http_body_util::Full<bytes::Bytes>>> + Send + Sync
{
    let left = std::sync::atomic::AtomicUsize::new(times);
    move |req| {
        if !matches(req) {
            return None;
        }
        let take = |n: usize| n.checked_sub(1);
        left.fetch_update(
            std::sync::atomic::Ordering::SeqCst,
            std::sync::atomic::Ordering::SeqCst,
            take,
        )
        .ok()
        .map(|_| fault_proxy::error_document(status, code, "emulated by the fault proxy", &[]))
    }
}

/// The HEAD of one key, matched by the proxy.
fn head_of(key: &'static str) -> impl Fn(&http::request::Parts) -> bool + Send + Sync {
    move |req| req.method == "HEAD" && fault_proxy::object_key(req).as_deref() == Some(key)
}

/// A passing fault is no fact about an object. Emulated: one object's HEAD
/// answers 500 InternalError eleven times in a row and another's 503
/// SlowDown eleven times, both more than a request's ten attempts. `scan`
/// waits the throttling out and resumes the shard after the 500s: every
/// object is exact, no `error` record, exit 0 (before: two error records
/// and exit 3).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failure_that_outlasts_the_retries_resumes_the_shard_and_marks_no_object() {
    let server = versitygw();
    let bucket = server.bucket("passing").await;
    let seeded = objects(300);
    server.seed(&bucket, &seeded).await;
    let server_error = failing_for_a_while(11, 500, "InternalError", head_of("obj-00017"));
    let throttle = failing_for_a_while(11, 503, "SlowDown", head_of("obj-00200"));
    let proxy = fault_proxy::start(
        versitygw().endpoint,
        move |req| server_error(req).or_else(|| throttle(req)),
        |_, _| {},
    )
    .await;
    let (out, out_file) = scan_to_file(&proxy.url, &bucket, "passing", &[]).await;
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.contains(" 0 errors"), "{err}");
    let answered = proxy.requests().iter().filter(|r| r.answered_by_rule).count();
    assert_eq!(answered, 22, "both faults were served in full");
    assert_matches_seed(&parse_records(&std::fs::read(&out_file).unwrap()), &seeded);
}

/// The same through `plan`, `run` and `merge`, with the part upload failing
/// too (500 on its first eleven requests, more than an upload's retries):
/// the worker keeps its lease, resumes the shard at its checkpoint and
/// completes it; no shard failed, no error record, the result exact (before:
/// an error record for the HEAD, and the upload's failure ended the worker).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_distributed_scan_resumes_its_shard_after_passing_failures() {
    let server = versitygw();
    let bucket = server.bucket("passing-fleet").await;
    let output = server.bucket("passing-out").await;
    let seeded = objects(300);
    server.seed(&bucket, &seeded).await;
    let head = failing_for_a_while(11, 500, "InternalError", head_of("obj-00123"));
    let out_bucket = output.clone();
    let upload = failing_for_a_while(11, 500, "InternalError", move |req| {
        let target = req.uri.path();
        matches!(req.method.as_str(), "PUT" | "POST")
            && fault_proxy::bucket_of(target) == out_bucket
            && target.contains("/parts/")
            && !target.ends_with("done.json")
            // The store check at planning writes among the parts too: the
            // faults here are the workers' part uploads.
            && !target.contains("/store-check")
    });
    let proxy = fault_proxy::start(
        versitygw().endpoint,
        move |req| head(req).or_else(|| upload(req)),
        |_, _| {},
    )
    .await;
    let redis = std::env::var("BUCKETSCAN_TEST_REDIS_URL").expect("run the tests with `just test`");
    let scan = format!("passing-{}", std::process::id());
    let fleet = |args: &[&str]| {
        let mut cmd = worker_command(&proxy.url, args);
        cmd.args(["--redis", &redis, "--scan", &scan]);
        cmd
    };
    let out_url = format!("s3://{output}/r/");
    for args in [
        vec!["plan", "--bucket", &bucket, "--output", &out_url],
        vec!["run", "--concurrency", "16"],
        vec!["merge"],
    ] {
        let out = run(fleet(&args)).await;
        assert_success(&out);
        if args[0] == "run" {
            let err = stderr(&out);
            assert!(err.contains("1 shards done, 0 failed"), "{err}");
            assert!(
                err.contains("resumes at its checkpoint"),
                "the pass was resumed: {err}"
            );
        }
    }
    let answered = proxy.requests().iter().filter(|r| r.answered_by_rule).count();
    assert_eq!(answered, 22, "both faults were served in full");
    let records = parse_records(&server.read(&output, "r/result.jsonl").await);
    assert_matches_seed(&records, &seeded);
    let manifest: serde_json::Value =
        serde_json::from_slice(&server.read(&output, "r/manifest.json").await).unwrap();
    assert_eq!(
        manifest["counts"]["errors"].as_u64().unwrap_or(0),
        0,
        "{manifest}"
    );
}

/// A store that serves `rate` requests per second and turns the rest away
/// with 503 SlowDown (a token bucket holding a twentieth of a second of
/// requests: bursts are refused, not queued).
async fn rate_limited_proxy(rate: f64) -> FaultProxy {
    let bucket = std::sync::Mutex::new((rate / 20.0, std::time::Instant::now()));
    fault_proxy::start(
        versitygw().endpoint,
        move |_| {
            let mut b = bucket.lock().unwrap();
            let now = std::time::Instant::now();
            b.0 = (b.0 + now.duration_since(b.1).as_secs_f64() * rate).min(rate / 20.0);
            b.1 = now;
            if b.0 >= 1.0 {
                b.0 -= 1.0;
                return None;
            }
            Some(fault_proxy::slow_down())
        },
        |_, _| {},
    )
    .await
}

/// A store that serves 300 requests/s, scanned with 256 HEADs in flight:
/// the scan slows down to the store (throttled requests wait, the in-process
/// governor lowers the rate) and completes exact, with no error record
/// (before: it gave up within seconds, exit 75, or marked objects).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_that_refuses_what_passes_its_rate_slows_the_scan_down_and_ends_nothing() {
    let server = versitygw();
    let bucket = server.bucket("slowdown").await;
    let seeded = objects(1_500);
    server.seed(&bucket, &seeded).await;
    let proxy = rate_limited_proxy(300.0).await;
    let (out, out_file) = scan_to_file(&proxy.url, &bucket, "slowdown", &["--concurrency", "256"]).await;
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.contains(" 0 errors"), "{err}");
    let refused = proxy.requests().iter().filter(|r| r.answered_by_rule).count();
    assert!(refused > 0, "the store pushed back");
    assert_matches_seed(&parse_records(&std::fs::read(&out_file).unwrap()), &seeded);
}

/// Emulates a store that answers the first attempt of every HEAD 503
/// SlowDown: the retries wait for their slot under the rate as first
/// attempts do, so a scan held to --max-rate R sends R HEAD attempts a
/// second, retries included. Before, a retry went out as soon as its
/// jittered backoff ended: here 2R a second, and a throttled fleet's
/// retries came back in clumps that a store with a short queue refused at
/// half the governed rate, which the governor then took for the store's
/// capacity (bench/tests/throttled_scan.rs at 0.37 C). The governor is off,
/// so that the ceiling alone paces the scan.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_wait_for_their_slot_under_the_rate_ceiling() {
    const OBJECTS: usize = 100;
    const RATE: f64 = 100.0;
    let server = versitygw();
    let bucket = server.bucket("paced-retries").await;
    let seeded = objects(OBJECTS);
    server.seed(&bucket, &seeded).await;
    let heads = std::sync::Arc::new(std::sync::Mutex::new(Vec::<(String, std::time::Instant)>::new()));
    let seen = heads.clone();
    let proxy = fault_proxy::start(
        versitygw().endpoint,
        move |req| {
            if req.method != "HEAD" {
                return None;
            }
            let key = fault_proxy::object_key(req)?;
            let mut seen = seen.lock().unwrap();
            let first = !seen.iter().any(|(k, _)| *k == key);
            seen.push((key, std::time::Instant::now()));
            first.then(fault_proxy::slow_down)
        },
        |_, _| {},
    )
    .await;
    let rate = RATE.to_string();
    let extra = [
        "--max-rate",
        &rate,
        "--govern-ms",
        "0",
        "--metadata-source",
        "head",
    ];
    let (out, out_file) = scan_to_file(&proxy.url, &bucket, "paced-retries", &extra).await;
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert_matches_seed(&parse_records(&std::fs::read(&out_file).unwrap()), &seeded);
    let heads = heads.lock().unwrap().clone();
    assert_eq!(
        heads.len(),
        2 * OBJECTS,
        "a refused and a served attempt per object"
    );
    // Slots are handed out 1/R apart and a timer never fires early: the
    // 2N attempts span at least (2N - 1)/R (unpaced retries: about N/R).
    let span = heads.last().unwrap().1.duration_since(heads[0].1).as_secs_f64();
    let paced = (2 * OBJECTS - 1) as f64 / RATE;
    assert!(
        span >= 0.95 * paced,
        "{} HEAD attempts in {span:.2} s at --max-rate {RATE}: at least {paced:.2} s when retries are paced",
        heads.len()
    );
}

/// Emulates a store whose HEAD answers 404 for a key its listing shows (a
/// listing that runs ahead of the objects, or a broken node): the 404 is
/// checked with a LIST of the key, which still shows it, so the record is
/// an `error` saying so, not `vanished` (before: `vanished`, exit 0, the
/// object silently missing from the result). A key really deleted during
/// the scan stays `vanished`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_404_for_a_key_still_listed_is_an_error_record_not_vanished() {
    let server = versitygw();
    let bucket = server.bucket("listed-404").await;
    let seeded = objects(60);
    server.seed(&bucket, &seeded).await;
    let proxy = fault_proxy::start(
        versitygw().endpoint,
        |req| {
            let key = fault_proxy::object_key(req)?;
            (req.method == "HEAD" && key == "obj-00005").then(|| fault_proxy::answer(404, &[], ""))
        },
        |_, _| {},
    )
    .await;
    let (out, out_file) = scan_to_file(&proxy.url, &bucket, "listed-404", &[]).await;
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(3), "{err}");
    let records = parse_records(&std::fs::read(&out_file).unwrap());
    let rec = &records["obj-00005"];
    assert_eq!(rec.status, Status::Error, "{rec:?}");
    assert_eq!(rec.http_status, Some(404), "{rec:?}");
    assert!(
        rec.error
            .as_deref()
            .unwrap()
            .contains("listing still shows the key"),
        "{rec:?}"
    );
    assert_eq!(records.len(), seeded.len());
}

/// Emulates a store whose listing is not UTF-8 (a key stored with a byte
/// that is no character): the scan refuses it with a clear error, where a
/// lossy decoding made the key another key whose HEAD answered 404 and the
/// object was recorded `vanished` (exit 0).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listing_that_is_not_utf8_is_refused() {
    let server = versitygw();
    let bucket = server.bucket("not-utf8").await;
    server.seed(&bucket, &objects(3)).await;
    let proxy = fault_proxy::start(
        versitygw().endpoint,
        |req| {
            let listing = req.method == "GET" && req.uri.query().is_some_and(|q| q.contains("list-type=2"));
            if !listing {
                return None;
            }
            let mut body = b"<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<ListBucketResult><Name>b</Name><Prefix></Prefix>\
                <KeyCount>1</KeyCount><MaxKeys>1000</MaxKeys><IsTruncated>false</IsTruncated><Contents><Key>bad"
                .to_vec();
            body.push(0xff);
            body.extend_from_slice(
                b"</Key><LastModified>2026-01-01T00:00:00.000Z</LastModified><ETag>\"x\"</ETag><Size>1</Size>\
                  <StorageClass>STANDARD</StorageClass></Contents></ListBucketResult>",
            );
            let resp = http::Response::builder()
                .status(200)
                .header("content-type", "application/xml")
                .body(http_body_util::Full::new(bytes::Bytes::from(body)))
                .unwrap();
            Some(resp)
        },
        |_, _| {},
    )
    .await;
    let (out, _) = scan_to_file(&proxy.url, &bucket, "not-utf8", &[]).await;
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("a listing that is not valid UTF-8"), "{err}");
}

/// Emulates a store that fails one object's HEAD for good (a gateway's 502
/// for some names, an object that lost its read quorum) with 500s: the
/// shard's passes end at that key, and after three of them the object is
/// an `error` record and the scan completes (exit 3) with everything else
/// exact, where ending every pass there would have failed the whole shard.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_object_whose_head_always_fails_is_an_error_record_after_three_passes() {
    let server = versitygw();
    let bucket = server.bucket("always-500").await;
    let seeded = objects(120);
    server.seed(&bucket, &seeded).await;
    let broken = failing_for_a_while(usize::MAX, 500, "InternalError", head_of("obj-00042"));
    let proxy = fault_proxy::start(versitygw().endpoint, broken, |_, _| {}).await;
    let (out, out_file) = scan_to_file(&proxy.url, &bucket, "always-500", &[]).await;
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(3), "{err}");
    let mut records = parse_records(&std::fs::read(&out_file).unwrap());
    let rec = records.remove("obj-00042").unwrap();
    assert_eq!(
        (rec.status, rec.http_status),
        (Status::Error, Some(500)),
        "{rec:?}"
    );
    assert!(
        rec.error.as_deref().unwrap().contains("in 3 passes of its shard"),
        "{rec:?}"
    );
    let mut rest = seeded.clone();
    rest.remove("obj-00042");
    assert_matches_seed(&records, &rest);
}

/// One node (or a proxy) answers one object's HEAD with 400 and another
/// region's `x-amz-bucket-region`, without a body: no S3 error code says
/// the bucket moved, and HeadBucket does not confirm it, so nothing is
/// learnt: every request stays signed for the bucket's own region, the
/// object is an error record (HTTP 400) and every other object is read.
/// Before: the header alone taught the client eu-west-1, and requests were
/// signed for it until the store refused them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_region_named_by_one_bodiless_answer_is_not_learnt() {
    let server = versitygw();
    let bucket = server.bucket("lone-node").await;
    let seeded = objects(60);
    server.seed(&bucket, &seeded).await;
    let odd = seeded.keys().nth(13).unwrap().clone();
    let refused = odd.clone();
    let proxy = fault_proxy::start(
        server.endpoint.clone(),
        move |req| {
            let refuse = req.method == "HEAD" && fault_proxy::object_key(req).as_deref() == Some(&refused);
            refuse.then(|| fault_proxy::answer(400, &[("x-amz-bucket-region", "eu-west-1")], ""))
        },
        |_, _| {},
    )
    .await;
    let out = run(worker_command(
        &proxy.url,
        &["scan", "--bucket", &bucket, "--quiet"],
    ))
    .await;
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let records = parse_records(&out.stdout);
    assert_eq!(records.len(), seeded.len());
    for (key, record) in &records {
        if *key == odd {
            assert_eq!((record.status, record.http_status), (Status::Error, Some(400)));
        } else {
            assert_eq!(record.status, Status::Ok, "{key}");
        }
    }
    for seen in proxy.requests() {
        let region = signed_region(seen.authorization.as_deref().unwrap());
        assert_eq!(region, "us-east-1", "{} {}", seen.method, seen.target);
    }
}

/// A store that answers a LIST and a HEAD with 307 Temporary Redirect to
/// another address of itself (as AWS's global endpoint does for a bucket
/// created moments ago): the request is sent again there, signed for the
/// new host, and the result is exact. Before: the listing failed (HTTP 307).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_temporary_redirect_is_followed() {
    let server = versitygw();
    let bucket = server.bucket("moved-for-now").await;
    let seeded = objects(40);
    server.seed(&bucket, &seeded).await;
    let real = server.endpoint.clone();
    let redirected = std::sync::Arc::new(std::sync::Mutex::new(std::collections::BTreeSet::new()));
    let seen = redirected.clone();
    let proxy = fault_proxy::start(
        server.endpoint.clone(),
        move |req| {
            // Each kind of request once: the first LIST and the first HEAD.
            let kind = req.method.to_string();
            let object = fault_proxy::object_key(req).is_some();
            let first = (req.method == "GET" && !object) || req.method == "HEAD" && object;
            if !first || !seen.lock().unwrap().insert(kind) {
                return None;
            }
            let target = req.uri.path_and_query().map(|p| p.as_str()).unwrap_or("/");
            let location = format!("{real}{target}");
            Some(fault_proxy::answer(307, &[("location", location.as_str())], ""))
        },
        |_, _| {},
    )
    .await;
    let out = run(worker_command(
        &proxy.url,
        &["scan", "--bucket", &bucket, "--quiet"],
    ))
    .await;
    assert_success(&out);
    assert_matches_seed(&parse_records(&out.stdout), &seeded);
    let followed = redirected.lock().unwrap().clone();
    assert_eq!(
        followed.len(),
        2,
        "a LIST and a HEAD were redirected: {followed:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_that_ignores_range_still_gives_a_ranged_get_only_its_range() {
    // Emulated: a store that answers a ranged GET with 200 and the whole
    // object (no Content-Range), as stores without Range support do. A
    // merge reading the tail of a part, or a baseline read from the middle
    // of a file, took the whole object for the range asked.
    let server = versitygw();
    let bucket = server.bucket("norange").await;
    let body: String = (0..1000).map(|i| format!("line {i:04}\n")).collect();
    server
        .client()
        .put_object()
        .bucket(&bucket)
        .key("part")
        .body(body.clone().into_bytes().into())
        .send()
        .await
        .expect("put");
    let whole = body.clone();
    let proxy = fault_proxy::start(
        server.endpoint.clone(),
        move |req| {
            (req.method == "GET" && req.headers.contains_key("range") && req.uri.path().ends_with("/part"))
                .then(|| fault_proxy::answer(200, &[], &whole))
        },
        |_, _| {},
    )
    .await;
    let through = Server {
        endpoint: proxy.url.clone(),
        ..versitygw()
    };
    let s3 = through.s3().await;
    let got = s3
        .get(&bucket, "part", Some("bytes=100-199"))
        .await
        .expect("ranged GET");
    assert_eq!(&got[..], &body.as_bytes()[100..200]);
    let tail = s3
        .get(&bucket, "part", Some("bytes=9990-20000"))
        .await
        .expect("ranged GET");
    assert_eq!(&tail[..], &body.as_bytes()[9990..]);
    assert!(
        proxy.requests().iter().any(|r| r.answered_by_rule),
        "the proxy answered the ranged GETs with the whole object"
    );
}
