//! `--metadata-source`: records made from MinIO's listing (`metadata=true`)
//! are the records HEAD makes, byte for byte; stores that list no metadata
//! are HEADed as before; credentials that may list but not read part of the
//! bucket (MinIO then leaves that metadata out silently) get the same error
//! records as with HEAD; a listing that disagrees with HEAD is caught by
//! `auto`'s sample; the fleet (`plan`/`run`/`merge`) honours the flag;
//! without the flag `scan` and `run` are `auto`, as the CRD.

mod common;
#[path = "common/fault_proxy.rs"]
mod fault_proxy;

use bucketscan_core::scan::record::Status;
use common::*;
use std::collections::BTreeMap;
use std::process::Output;

const SOURCES: [&str; 3] = ["head", "list", "auto"];

/// Odd keys and values (spaces, `=`/`&`, RFC 2047 non-ASCII, empty, many
/// names, mixed case), and enough plain objects for several pages.
fn odd_bucket() -> BTreeMap<String, Seeded> {
    let meta = |pairs: &[(&str, &str)]| Seeded {
        size: 3,
        metadata: pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    };
    let mut objects = BTreeMap::from([
        (
            "odd/with space".to_string(),
            meta(&[("a", "x y"), ("eq", "k=v&k2=v2")]),
        ),
        ("odd/ünï/cødé 💥".to_string(), meta(&[("Mixed-Case", "V")])),
        ("odd/+ % # ? & =".to_string(), meta(&[("empty", "")])),
        (
            "odd/rfc2047".to_string(),
            meta(&[
                ("b", "=?UTF-8?B?R3LDvMOfZQ==?="),
                ("q", "=?UTF-8?Q?Gr=C3=BC=C3=9Fe_x?="),
            ]),
        ),
        ("odd/xml".to_string(), meta(&[("x", "<a>&amp;\"'</a>")])),
        ("odd/plain".to_string(), meta(&[])),
    ]);
    let many: Vec<(String, String)> = (0..40).map(|i| (format!("n{i:02}"), format!("v{i}"))).collect();
    objects.insert(
        "odd/many".into(),
        Seeded {
            size: 1,
            metadata: many.into_iter().collect(),
        },
    );
    for i in 0..2_400 {
        let metadata = if i % 3 == 0 {
            BTreeMap::from([("team".to_string(), format!("t{}", i % 7))])
        } else {
            BTreeMap::new()
        };
        objects.insert(
            format!("bulk/{}/{i:05}", i % 4),
            Seeded {
                size: i % 5,
                metadata,
            },
        );
    }
    objects
}

fn scan_args<'a>(bucket: &'a str, source: &'a str) -> Vec<&'a str> {
    scan_args_shards(bucket, source, "4")
}

fn scan_args_shards<'a>(bucket: &'a str, source: &'a str, shards: &'a str) -> Vec<&'a str> {
    vec![
        "scan",
        "--bucket",
        bucket,
        "--quiet",
        "--concurrency",
        "32",
        "--target-shards",
        shards,
        // One shard at a time: records in key order, outputs comparable
        // byte for byte.
        "--shard-parallelism",
        "1",
        "--metadata-source",
        source,
    ]
}

/// `got` is `want` byte for byte; else the first line that differs.
fn assert_same_output(source: &str, got: &Output, want: &Output) {
    if got.stdout == want.stdout {
        return;
    }
    let lines = |out: &Output| {
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    let (got, want) = (lines(got), lines(want));
    let at = got
        .iter()
        .zip(&want)
        .position(|(g, w)| g != w)
        .unwrap_or(got.len().min(want.len()));
    panic!(
        "{source}: output differs from head's at line {at} ({} vs {} lines):\n  {source}: {:?}\n  head: {:?}",
        got.len(),
        want.len(),
        got.get(at),
        want.get(at)
    );
}

/// HEADs and records from the listing that `scan` reported.
fn requests(out: &Output) -> (u64, u64) {
    let text = stderr(out);
    let number_before = |marker: &str| -> u64 {
        let at = text
            .find(marker)
            .unwrap_or_else(|| panic!("no {marker:?} in {text}"));
        let digits: String = text[..at]
            .chars()
            .rev()
            .take_while(char::is_ascii_digit)
            .collect();
        digits.chars().rev().collect::<String>().parse().unwrap()
    };
    (number_before(" HEADs,"), number_before(" from the listing"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listed_metadata_gives_the_records_head_gives_on_minio() {
    let s3 = minio();
    let bucket = s3.bucket("listmeta").await;
    let seeded = odd_bucket();
    s3.seed(&bucket, &seeded).await;
    let outs: Vec<Output> = SOURCES
        .iter()
        .map(|source| s3.worker(&scan_args(&bucket, source)))
        .collect();
    for out in &outs {
        assert_success(out);
    }
    let records = parse_records(&outs[0].stdout);
    assert_eq!(records.len(), seeded.len());
    assert_eq!(records["odd/rfc2047"].metadata["b"], "Grüße");
    assert_eq!(records["odd/rfc2047"].metadata["q"], "Grüße x");
    assert_eq!(records["odd/xml"].metadata["x"], "<a>&amp;\"'</a>");
    assert_eq!(records["odd/ünï/cødé 💥"].metadata["mixed-case"], "V");
    assert_eq!(records["odd/+ % # ? & ="].metadata["empty"], "");
    assert_eq!(records["odd/many"].metadata.len(), 40);
    for (source, out) in SOURCES.iter().zip(&outs).skip(1) {
        assert_same_output(source, out, &outs[0]);
    }
    let n = seeded.len() as u64;
    assert_eq!(requests(&outs[0]), (n, 0), "head");
    assert_eq!(requests(&outs[1]), (0, n), "list: no HEAD at all");
    let (heads, listed) = requests(&outs[2]);
    assert_eq!(heads + listed, n, "auto");
    assert!(
        heads > 0 && heads <= n / 20,
        "auto HEADs only a sample: {heads} of {n}"
    );
}

/// `scan` without `--metadata-source` is `auto`, as the CRD's default: on
/// MinIO the records come from the listing (all but a sample), and the
/// output is `head`'s byte for byte.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scan_without_the_flag_takes_records_from_minios_listing() {
    let s3 = minio();
    let bucket = s3.bucket("defaultmeta").await;
    let seeded: BTreeMap<String, Seeded> = odd_bucket()
        .into_iter()
        .filter(|(k, _)| k.starts_with("odd/") || k.starts_with("bulk/0/") || k.starts_with("bulk/1/"))
        .collect();
    s3.seed(&bucket, &seeded).await;
    let head = s3.worker(&scan_args(&bucket, "head"));
    assert_success(&head);
    let mut args = scan_args(&bucket, "head");
    let flag = args.iter().position(|a| *a == "--metadata-source").unwrap();
    args.drain(flag..flag + 2);
    let default = s3.worker(&args);
    assert_success(&default);
    assert_same_output("the default", &default, &head);
    let n = seeded.len() as u64;
    assert_eq!(requests(&head), (n, 0), "head");
    let (heads, listed) = requests(&default);
    assert_eq!(heads + listed, n, "the default");
    assert!(
        listed >= n * 9 / 10,
        "the default (auto) takes records from MinIO's listing: {heads} HEADs, {listed} listed of {n}"
    );
}

/// Stores that ignore `metadata=true` (versitygw, moto) still answer, and
/// every object is HEADed as in `head` mode.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stores_without_listed_metadata_are_headed_as_before() {
    for s3 in [versitygw(), moto()] {
        let bucket = s3.bucket("nolistmeta").await;
        let seeded: BTreeMap<String, Seeded> = odd_bucket()
            .into_iter()
            .filter(|(k, _)| k.starts_with("bulk/0/"))
            .collect();
        s3.seed(&bucket, &seeded).await;
        let outs: Vec<Output> = SOURCES
            .iter()
            .map(|source| s3.worker(&scan_args(&bucket, source)))
            .collect();
        for (source, out) in SOURCES.iter().zip(&outs) {
            assert_success(out);
            assert_eq!(
                requests(out),
                (seeded.len() as u64, 0),
                "{} {source}",
                s3.endpoint
            );
            assert_same_output(source, out, &outs[0]);
        }
        assert_matches_seed(&parse_records(&outs[0].stdout), &seeded);
    }
}

/// A store that refuses the unknown parameter (here a proxy in front of
/// versitygw answers 400 InvalidArgument to it): one refused LIST, then the
/// scan lists without it and HEADs every object, as `head` does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_refusing_the_parameter_costs_one_list_not_the_scan() {
    let s3 = versitygw();
    let bucket = s3.bucket("refusemeta").await;
    let seeded: BTreeMap<String, Seeded> = odd_bucket()
        .into_iter()
        .filter(|(k, _)| k.starts_with("bulk/1/"))
        .collect();
    s3.seed(&bucket, &seeded).await;
    let proxy = fault_proxy::start(
        s3.endpoint.clone(),
        |req| {
            let asks = req.uri.query().is_some_and(|q| q.contains("metadata=true"));
            asks.then(|| {
                fault_proxy::error_document(400, "InvalidArgument", "Unknown parameter metadata", &[])
            })
        },
        |_, _| {},
    )
    .await;
    let through = Server {
        endpoint: proxy.url.clone(),
        ..s3.clone()
    };
    let head = through.worker(&scan_args(&bucket, "head"));
    assert_success(&head);
    for source in ["auto", "list"] {
        let before = proxy.requests().len();
        let out = through.worker(&scan_args(&bucket, source));
        assert_success(&out);
        assert_same_output(source, &out, &head);
        assert_eq!(requests(&out), (seeded.len() as u64, 0), "{source}");
        let asked = proxy.requests()[before..]
            .iter()
            .filter(|r| r.target.contains("metadata=true"))
            .count();
        assert_eq!(asked, 1, "{source}: asked once, then never again");
    }
}

/// Temporary credentials from MinIO's STS AssumeRole, restricted by an
/// inline session policy: list `bucket`, read only `readable/*`.
fn restricted_credentials(s3: &Server, bucket: &str) -> [(String, String); 3] {
    use aws_sigv4::http_request::{sign, SignableBody, SignableRequest, SigningSettings};
    use aws_sigv4::sign::v4::SigningParams;
    use percent_encoding::{utf8_percent_encode, NON_ALPHANUMERIC};
    let policy = serde_json::json!({
        "Version": "2012-10-17",
        "Statement": [
            {"Effect": "Allow", "Action": ["s3:ListBucket", "s3:GetBucketLocation"], "Resource": [format!("arn:aws:s3:::{bucket}")]},
            {"Effect": "Allow", "Action": ["s3:GetObject"], "Resource": [format!("arn:aws:s3:::{bucket}/readable/*")]}
        ]
    });
    let body = format!(
        "Action=AssumeRole&DurationSeconds=900&Version=2011-06-15&Policy={}",
        utf8_percent_encode(&policy.to_string(), NON_ALPHANUMERIC)
    );
    let url = format!("{}/", s3.endpoint);
    let host = s3.endpoint.trim_start_matches("http://");
    let headers = [
        ("content-type", "application/x-www-form-urlencoded"),
        ("host", host),
    ];
    let identity =
        aws_credential_types::Credentials::new(&s3.access_key, &s3.secret_key, None, None, "root").into();
    let params = SigningParams::builder()
        .identity(&identity)
        .region("us-east-1")
        .name("sts")
        .time(std::time::SystemTime::now())
        .settings(SigningSettings::default())
        .build()
        .unwrap()
        .into();
    let req = SignableRequest::new(
        "POST",
        &url,
        headers.into_iter(),
        SignableBody::Bytes(body.as_bytes()),
    )
    .unwrap();
    let (instructions, _) = sign(req, &params).unwrap().into_parts();
    let mut curl = std::process::Command::new("curl");
    curl.args(["-sS", "-X", "POST", &url, "--data-binary", &body]);
    for (name, value) in headers.iter().copied().chain(instructions.headers()) {
        curl.args(["-H", &format!("{name}: {value}")]);
    }
    let out = curl.output().expect("curl (scripts/install-deps.sh installs it)");
    let xml = String::from_utf8_lossy(&out.stdout).into_owned();
    let element = |name: &str| -> String {
        let start = xml
            .find(&format!("<{name}>"))
            .unwrap_or_else(|| panic!("AssumeRole answered: {xml}"));
        let rest = &xml[start + name.len() + 2..];
        rest[..rest.find('<').unwrap()].to_string()
    };
    [
        ("AWS_ACCESS_KEY_ID".into(), element("AccessKeyId")),
        ("AWS_SECRET_ACCESS_KEY".into(), element("SecretAccessKey")),
        ("AWS_SESSION_TOKEN".into(), element("SessionToken")),
    ]
}

/// MinIO leaves out the metadata of keys the credentials may not read: no
/// mode may turn that into records with empty metadata. Every mode gives
/// the readable objects their metadata and the others a 403 error record.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_the_credentials_cannot_read_are_errors_in_every_mode_not_empty_metadata() {
    let s3 = minio();
    let bucket = s3.bucket("restricted").await;
    let mut seeded = BTreeMap::new();
    for i in 0..300 {
        let prefix = if i % 2 == 0 { "readable" } else { "secret" };
        let metadata = BTreeMap::from([("n".to_string(), i.to_string())]);
        seeded.insert(format!("{prefix}/{i:04}"), Seeded { size: 2, metadata });
    }
    s3.seed(&bucket, &seeded).await;
    let creds = restricted_credentials(&s3, &bucket);
    let env: Vec<(&str, &str)> = creds.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let outs: Vec<Output> = SOURCES
        .iter()
        .map(|source| s3.worker_env(&scan_args(&bucket, source), &env))
        .collect();
    for (source, out) in SOURCES.iter().zip(&outs) {
        assert_eq!(
            out.status.code(),
            Some(3),
            "{source}: some objects unreadable: {}",
            stderr(out)
        );
        assert_same_output(source, out, &outs[0]);
        assert!(
            !stderr(out).contains(&creds[1].1),
            "{source}: the secret key is in the log"
        );
    }
    let records = parse_records(&outs[0].stdout);
    assert_eq!(records.len(), seeded.len());
    for (key, rec) in &records {
        if key.starts_with("readable/") {
            assert_eq!(rec.status, Status::Ok, "{key}");
            assert_eq!(rec.metadata, seeded[key].metadata, "{key}");
        } else {
            assert_eq!(
                (rec.status, rec.http_status),
                (Status::Error, Some(403)),
                "{key}: {rec:?}"
            );
            assert!(rec.metadata.is_empty());
        }
    }
    assert_eq!(
        requests(&outs[1]),
        (150, 150),
        "list: HEADs exactly the entries without metadata"
    );
    let (heads, listed) = requests(&outs[2]);
    assert!(
        listed > 100 && heads + listed == 300,
        "auto: {heads} HEADs, {listed} listed"
    );
}

/// A listing whose metadata disagrees with HEAD (here a proxy alters one
/// object's HEAD answers): `auto` notices in its sample and HEADs the whole
/// shard, so its output is HEAD's; `list` trusts the listing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_heads_a_shard_whose_listing_disagrees_with_head() {
    let s3 = minio();
    let bucket = s3.bucket("disagree").await;
    let seeded: BTreeMap<String, Seeded> = (0..50)
        .map(|i| {
            let metadata = BTreeMap::from([("v".to_string(), "listed".to_string())]);
            (format!("k{i:03}"), Seeded { size: 1, metadata })
        })
        .collect();
    s3.seed(&bucket, &seeded).await;
    // The first key of the page is always in the sample.
    let proxy = fault_proxy::start(
        s3.endpoint.clone(),
        |_| None,
        |req, resp| {
            if req.method == "HEAD" && fault_proxy::object_key(req).as_deref() == Some("k000") {
                resp.headers.insert("x-amz-meta-v", "headed".parse().unwrap());
            }
        },
    )
    .await;
    let through = Server {
        endpoint: proxy.url.clone(),
        ..s3.clone()
    };
    let run = |source| {
        let args = scan_args_shards(&bucket, source, "1");
        let out = through.worker_env(&args, &[("BUCKETSCAN_LOG", "warn")]);
        assert_success(&out);
        out
    };
    let (head, list, auto) = (run("head"), run("list"), run("auto"));
    assert_same_output("auto", &auto, &head);
    assert_eq!(parse_records(&head.stdout)["k000"].metadata["v"], "headed");
    assert_eq!(
        parse_records(&list.stdout)["k000"].metadata["v"],
        "listed",
        "list trusts the listing"
    );
    assert_eq!(requests(&auto), (50, 0), "auto HEADs the whole shard");
    let log = stderr(&auto);
    assert!(
        log.contains("disagrees with HEAD") && log.contains("k000"),
        "{log}"
    );
    assert!(
        !log.contains("headed") && !log.contains("\"listed\""),
        "values stay out of logs: {log}"
    );
}

/// `plan`/`run`/`merge` on MinIO with `run`'s default metadata source
/// (`auto`, as the CRD's): the result is exact and the workers took records
/// from the listing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_taking_metadata_from_the_listing_ends_exact() {
    let s3 = minio();
    let bucket = s3.bucket("fleetmeta").await;
    let out_bucket = s3.bucket("fleetmeta-out").await;
    let seeded: BTreeMap<String, Seeded> = odd_bucket()
        .into_iter()
        .filter(|(k, _)| k.starts_with("bulk/"))
        .collect();
    s3.seed(&bucket, &seeded).await;
    let redis = std::env::var("BUCKETSCAN_TEST_REDIS_URL").expect("run the tests with `just test`");
    let scan = format!("scan-{bucket}");
    let queue = ["--redis", redis.as_str(), "--scan", scan.as_str()];
    let with_queue = |args: &[&str]| {
        let mut all = args.to_vec();
        all.extend(queue);
        let out = s3.worker(&all);
        assert_success(&out);
        out
    };
    let output = format!("s3://{out_bucket}/scan/");
    with_queue(&[
        "plan",
        "--bucket",
        &bucket,
        "--output",
        &output,
        "--target-shards",
        "4",
        "--min-shard-objects",
        "100",
    ]);
    let workers: Vec<Output> = (0..2)
        .map(|i| {
            let name = format!("w{i}");
            with_queue(&["run", "--name", &name, "--concurrency", "16"])
        })
        .collect();
    let listed: u64 = workers
        .iter()
        .map(|out| {
            let text = stderr(out);
            let at = text.find(" from the listing").unwrap_or_else(|| panic!("{text}"));
            let digits: String = text[..at]
                .chars()
                .rev()
                .take_while(char::is_ascii_digit)
                .collect();
            digits.chars().rev().collect::<String>().parse::<u64>().unwrap()
        })
        .sum();
    assert!(
        listed > seeded.len() as u64 * 9 / 10,
        "most records came from the listing: {listed}"
    );
    with_queue(&["merge"]);
    assert_matches_seed(
        &parse_records(&s3.read(&out_bucket, "scan/result.jsonl").await),
        &seeded,
    );
}
