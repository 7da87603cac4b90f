//! Incremental scans (`scan --baseline`) against real servers: a full scan,
//! the bucket changed in every way an object can change (added, deleted,
//! content rewritten, metadata replaced in place), then an incremental scan
//! and a second full scan of the changed bucket. The incremental result must
//! equal the full one record by record, its change set must be exactly the
//! changes made, and only the changed objects may be HEADed.

mod common;
#[path = "common/fault_proxy.rs"]
mod fault_proxy;

use bucketscan_core::scan::dataset::DatasetManifest;
use bucketscan_core::scan::format::{is_csv_header, parse_csv_record};
use bucketscan_core::scan::record::{ChangeKind, Record};
use common::*;
use std::collections::BTreeMap;

/// 240 objects over three prefixes, a third of them with metadata.
fn keyspace() -> BTreeMap<String, Seeded> {
    (0..240)
        .map(|i| {
            let metadata = match i % 3 {
                0 => BTreeMap::from([("owner".to_string(), format!("team-{}", i % 7))]),
                _ => BTreeMap::new(),
            };
            (
                format!("{}/obj-{i:04}", ["a", "b", "c"][i % 3]),
                Seeded {
                    size: i % 50,
                    metadata,
                },
            )
        })
        .collect()
}

/// The changes made to the bucket, by key.
type Changes = BTreeMap<String, ChangeKind>;

async fn change_bucket(s3: &Server, bucket: &str) -> Changes {
    let client = s3.client();
    let mut changes = Changes::new();
    for i in [1, 100, 239] {
        let key = format!("{}/obj-{i:04}", ["a", "b", "c"][i % 3]);
        client
            .delete_object()
            .bucket(bucket)
            .key(&key)
            .send()
            .await
            .unwrap();
        changes.insert(key, ChangeKind::Removed);
    }
    for i in [3, 121, 200] {
        let key = format!("{}/obj-{i:04}", ["a", "b", "c"][i % 3]);
        client
            .put_object()
            .bucket(bucket)
            .key(&key)
            .body(vec![b'y'; 77].into())
            .send()
            .await
            .unwrap();
        changes.insert(key, ChangeKind::ContentChanged);
    }
    for i in [6, 7, 131] {
        let key = format!("{}/obj-{i:04}", ["a", "b", "c"][i % 3]);
        client
            .copy_object()
            .bucket(bucket)
            .key(&key)
            .copy_source(format!("{bucket}/{key}"))
            .metadata_directive(aws_sdk_s3::types::MetadataDirective::Replace)
            .metadata("owner", "someone-else")
            .send()
            .await
            .unwrap();
        changes.insert(key, ChangeKind::MetadataChanged);
    }
    for key in ["a/new-1", "b/obj-0050x", "z/new-prefix"] {
        client
            .put_object()
            .bucket(bucket)
            .key(key)
            .metadata("fresh", "yes")
            .body(vec![b'n'; 5].into())
            .send()
            .await
            .unwrap();
        changes.insert(key.to_string(), ChangeKind::Added);
    }
    changes
}

async fn manifest(s3: &Server, bucket: &str, prefix: &str) -> DatasetManifest {
    serde_json::from_slice(&s3.read(bucket, &format!("{prefix}manifest.json")).await).unwrap()
}

/// The manifest a fleet's merge wrote under `s3://OUT/NAME/`.
async fn fleet_manifest(s3: &Server, out: &str, name: &str) -> bucketscan_core::fleet::merge::Manifest {
    serde_json::from_slice(&s3.read(out, &format!("{name}/manifest.json")).await).unwrap()
}

/// Every record of the files listed, by key (none twice).
async fn records_of(
    s3: &Server,
    files: &[bucketscan_core::scan::dataset::DataFile],
    gzip: bool,
) -> BTreeMap<String, Record> {
    let mut out = BTreeMap::new();
    for f in files {
        let (bucket, key) = f.location.strip_prefix("s3://").unwrap().split_once('/').unwrap();
        let mut body = s3.read(bucket, key).await;
        if gzip {
            let mut plain = Vec::new();
            std::io::Read::read_to_end(&mut flate2::read::MultiGzDecoder::new(&body[..]), &mut plain)
                .unwrap();
            body = plain;
        }
        let records: Vec<Record> = if key.ends_with(".parquet") {
            bucketscan_core::scan::parquet::read_records(body.into())
                .unwrap()
                .flat_map(|batch| batch.unwrap())
                .collect()
        } else if key.contains(".csv") {
            csv_records(&body)
        } else {
            parse_records(&body).into_values().collect()
        };
        for r in records {
            let k = r.key.clone();
            assert!(out.insert(k.clone(), r).is_none(), "{k:?} twice");
        }
    }
    out
}

/// CSV rows of a result or a change set (whose extra columns are read here
/// as the test's own view of them).
fn csv_records(body: &[u8]) -> Vec<Record> {
    let rows = bucketscan_core::scan::format::parse_csv_rows(body).unwrap();
    let n = bucketscan_core::scan::format::CSV_COLUMNS.len();
    rows.into_iter()
        .filter(|r| !is_csv_header(&r[..n]))
        .map(|r| {
            let mut record = parse_csv_record(&r[..n]).unwrap();
            if r.len() > n {
                record.change = Some(match r[n].as_str() {
                    "added" => ChangeKind::Added,
                    "removed" => ChangeKind::Removed,
                    "content_changed" => ChangeKind::ContentChanged,
                    "metadata_changed" => ChangeKind::MetadataChanged,
                    other => panic!("change {other:?}"),
                });
            }
            record
        })
        .collect()
}

/// Full scan, change, incremental scan, full scan again; compare.
async fn incremental_equals_full(s3: &Server, format: &str, gzip: bool) {
    let bucket = s3.bucket(&format!("inc-{format}")).await;
    let out = s3.bucket(&format!("inc-out-{format}")).await;
    let seeded = keyspace();
    s3.seed(&bucket, &seeded).await;
    // The baseline's start must be safely after the objects' LastModified
    // (two seconds: see baseline::SAFETY_SECS) for them to be reused.
    tokio::time::sleep(std::time::Duration::from_millis(3_100)).await;

    let scan = |prefix: &str, baseline: Option<String>| {
        let output = format!("s3://{out}/{prefix}");
        let mut args: Vec<String> = [
            "scan", "--bucket", &bucket, "--layout", "dataset", "--format", format,
        ]
        .iter()
        .map(|s| s.to_string())
        .chain(["--target-shards".into(), "5".into(), "-o".into(), output])
        // A HEAD per object scanned: the HEAD count below is the changes
        // (the default, auto, takes records from MinIO's listing).
        .chain(["--metadata-source".into(), "head".into()])
        .collect();
        if gzip {
            args.push("--gzip".into());
        }
        if let Some(b) = baseline {
            args.extend(["--baseline".into(), b]);
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let run = s3.worker(&args);
        assert_success(&run);
        stderr(&run)
    };
    scan("full/", None);
    let full = manifest(s3, &out, "full/").await;
    let check = full
        .store_check
        .clone()
        .expect("a dataset in S3 records its store check");
    assert!(check.last_modified_moves, "{check:?}");

    let made = change_bucket(s3, &bucket).await;
    let summary = scan("inc/", Some(format!("s3://{out}/full/manifest.json")));
    scan("full2/", None);

    let inc = manifest(s3, &out, "inc/").await;
    let full2 = manifest(s3, &out, "full2/").await;
    let got = records_of(s3, &inc.files, gzip).await;
    let want = records_of(s3, &full2.files, gzip).await;
    assert_eq!(got.len(), want.len());
    for (key, w) in &want {
        let g = &got[key];
        // Storage class and all fields the HEAD gives, record by record.
        assert_eq!(g, w, "{key:?}");
    }
    let i = inc.incremental.as_ref().expect("an incremental manifest");
    assert!(i.reused_records, "{i:?}");
    let changes = records_of(s3, &i.change_files, gzip).await;
    let found: Changes = changes
        .iter()
        .map(|(k, r)| (k.clone(), r.change.unwrap()))
        .collect();
    assert_eq!(found, made, "the change set must be exactly the changes made");
    let c = &i.counts;
    assert_eq!(
        (c.added, c.removed, c.content_changed, c.metadata_changed),
        (3, 3, 3, 3)
    );
    // Only new and changed objects were HEADed; every other record came
    // from the baseline.
    assert_eq!(c.heads, 9, "{summary}");
    assert_eq!(c.reused, seeded.len() as u64 - 9, "{summary}");
    assert!(i.baseline_bytes_read > 0);
    assert!(
        summary.contains("3 added, 3 removed, 3 content changed, 3 metadata changed"),
        "{summary}"
    );
    // The summary says where the records came from: HEADs, the baseline,
    // and none from the listing (it counted the baseline's as the listing's).
    assert!(
        summary.contains(&format!(
            "; 0 from the listing, {} from the baseline;",
            seeded.len() - 9
        )),
        "{summary}"
    );
    // The change set carries the old metadata beside the new.
    if format != "csv" {
        let replaced = &changes["a/obj-0006"];
        assert_eq!(
            replaced.metadata.get("owner").map(String::as_str),
            Some("someone-else")
        );
        assert_eq!(
            replaced
                .previous
                .as_ref()
                .unwrap()
                .metadata
                .get("owner")
                .map(String::as_str),
            Some("team-6")
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_incremental_scan_equals_a_full_one_and_heads_only_the_changes_on_minio() {
    incremental_equals_full(&minio(), "jsonl", false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_incremental_scan_of_parquet_equals_a_full_one_on_minio() {
    incremental_equals_full(&minio(), "parquet", false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_incremental_scan_of_gzip_csv_equals_a_full_one_on_moto() {
    incremental_equals_full(&moto(), "csv", true).await;
}

/// versitygw (posix backend) keeps an object's LastModified when its
/// metadata is replaced in place: the store check must see that, and the
/// scan must HEAD every object, still exact, with the exact change set.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_that_keeps_last_modified_on_a_metadata_replace_gets_every_object_headed() {
    let s3 = versitygw();
    let bucket = s3.bucket("inc-keeps").await;
    let out = s3.bucket("inc-keeps-out").await;
    let seeded = keyspace();
    s3.seed(&bucket, &seeded).await;
    tokio::time::sleep(std::time::Duration::from_millis(3_100)).await;
    let scan = |prefix: &str, baseline: Option<String>| {
        let output = format!("s3://{out}/{prefix}");
        let mut args = vec!["scan", "--bucket", &bucket, "--layout", "dataset", "-o", &output];
        let baseline = baseline.unwrap_or_default();
        if !baseline.is_empty() {
            args.extend(["--baseline", &baseline]);
        }
        let run = s3.worker(&args);
        assert_success(&run);
        stderr(&run)
    };
    scan("full/", None);
    let made = change_bucket(&s3, &bucket).await;
    let said = scan("inc/", Some(format!("s3://{out}/full/manifest.json")));
    scan("full2/", None);
    let inc = manifest(&s3, &out, "inc/").await;
    let check = inc.store_check.clone().expect("a store check");
    assert!(!check.last_modified_moves, "{check:?}");
    assert!(said.contains("kept LastModified"), "{said}");
    let i = inc.incremental.clone().unwrap();
    assert!(!i.reused_records);
    assert_eq!(i.counts.reused, 0);
    let want = records_of(&s3, &manifest(&s3, &out, "full2/").await.files, false).await;
    assert_eq!(i.counts.heads, want.len() as u64, "every object HEADed");
    assert_eq!(records_of(&s3, &inc.files, false).await, want);
    let changes = records_of(&s3, &i.change_files, false).await;
    let found: Changes = changes
        .iter()
        .map(|(k, r)| (k.clone(), r.change.unwrap()))
        .collect();
    assert_eq!(found, made);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn baselines_of_another_prefix_or_without_every_object_are_refused() {
    let s3 = minio();
    let bucket = s3.bucket("inc-refused").await;
    let out = s3.bucket("inc-refused-out").await;
    s3.seed(&bucket, &keyspace()).await;
    let dataset = |prefix: &str, extra: &[&str]| {
        let output = format!("s3://{out}/{prefix}");
        let mut args = vec!["scan", "--bucket", &bucket, "--layout", "dataset", "-o", &output];
        args.extend_from_slice(extra);
        s3.worker(&args)
    };
    assert_success(&dataset("all/", &[]));
    assert_success(&dataset("some/", &["--only-with-metadata"]));
    let baseline = |name: &str| format!("s3://{out}/{name}/manifest.json");

    let run = dataset("x/", &["--prefix", "a/", "--baseline", &baseline("all")]);
    assert!(!run.status.success());
    assert!(
        stderr(&run).contains("it is a scan of another prefix than this scan's (\"a/\")"),
        "{}",
        stderr(&run)
    );

    let run = dataset("x/", &["--baseline", &baseline("some")]);
    assert!(!run.status.success());
    assert!(stderr(&run).contains("onlyWithMetadata"), "{}", stderr(&run));

    let run = dataset("x/", &["--format", "csv", "--baseline", &baseline("all")]);
    assert!(!run.status.success());
    assert!(
        stderr(&run).contains("its format is jsonl, this scan's is csv"),
        "{}",
        stderr(&run)
    );

    let run = dataset("x/", &["--baseline", &baseline("missing")]);
    assert!(!run.status.success());
    assert!(
        stderr(&run).contains("cannot read the baseline manifest"),
        "{}",
        stderr(&run)
    );

    let run = s3.worker(&["scan", "--bucket", &bucket, "--baseline", &baseline("all")]);
    assert!(!run.status.success());
    assert!(
        stderr(&run).contains("--baseline needs --layout dataset"),
        "{}",
        stderr(&run)
    );
}

/// `bucketscan-worker ARGS` of one distributed scan.
fn fleet_command(s3: &Server, scan: &str, args: &[&str]) -> std::process::Command {
    let redis =
        std::env::var("BUCKETSCAN_TEST_REDIS_URL").expect("run the tests with scripts/with-test-servers.sh");
    let mut cmd = s3.worker_command(&[], args);
    cmd.args(["--redis", &redis, "--scan", scan]);
    cmd
}

/// Plan, run two workers with small parts, merge.
fn fleet_scan(s3: &Server, scan: &str, plan: &[&str]) -> String {
    let mut args = vec!["plan", "--target-shards", "6", "--min-shard-objects", "10"];
    args.extend_from_slice(plan);
    assert_success(&fleet_command(s3, scan, &args).output().unwrap());
    run_and_merge(s3, scan)
}

/// Two workers with small parts, then the merge, of a planned scan.
fn run_and_merge(s3: &Server, scan: &str) -> String {
    let mut workers: Vec<_> = ["w1", "w2"]
        .iter()
        .map(|name| {
            // `head`: the HEAD count checked is the changes (the default,
            // auto, takes records from MinIO's listing).
            let args = [
                "run",
                "--name",
                name,
                "--part-objects",
                "20",
                "--metadata-source",
                "head",
                "--wait-for-plan",
            ];
            fleet_command(s3, scan, &args)
                .stderr(std::process::Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    for w in &mut workers {
        assert!(wait_exit(w, std::time::Duration::from_secs(120)).success());
    }
    let out = fleet_command(s3, scan, &["merge"]).output().unwrap();
    assert_success(&out);
    stderr(&out)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_distributed_incremental_scan_equals_a_full_one_with_the_exact_change_set() {
    let s3 = minio();
    let bucket = s3.bucket("inc-fleet").await;
    let out = s3.bucket("inc-fleet-out").await;
    let seeded = keyspace();
    s3.seed(&bucket, &seeded).await;
    tokio::time::sleep(std::time::Duration::from_millis(3_100)).await;
    let id = |name: &str| format!("{name}-{bucket}");
    let output = |name: &str| format!("s3://{out}/{name}/");
    let common = |name: &str| {
        let mut args = vec![
            "--bucket".to_string(),
            bucket.clone(),
            "--output".into(),
            output(name),
        ];
        args.extend(["--layout", "dataset", "--gzip"].map(String::from));
        args
    };
    let args = common("full");
    fleet_scan(
        &s3,
        &id("full"),
        &args.iter().map(String::as_str).collect::<Vec<_>>(),
    );

    let made = change_bucket(&s3, &bucket).await;
    let mut args = common("inc");
    args.extend(["--baseline".to_string(), format!("s3://{out}/full/manifest.json")]);
    fleet_scan(
        &s3,
        &id("inc"),
        &args.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    let args = common("full2");
    fleet_scan(
        &s3,
        &id("full2"),
        &args.iter().map(String::as_str).collect::<Vec<_>>(),
    );

    let full = fleet_manifest(&s3, &out, "full").await;
    assert!(
        full.store_check.as_ref().is_some_and(|c| c.last_modified_moves),
        "{:?}",
        full.store_check
    );
    let inc = fleet_manifest(&s3, &out, "inc").await;
    let full2 = fleet_manifest(&s3, &out, "full2").await;
    let got = records_of(&s3, &inc.files, true).await;
    let want = records_of(&s3, &full2.files, true).await;
    assert_eq!(
        got, want,
        "the incremental result equals a full scan, record by record"
    );
    let i = inc.incremental.expect("an incremental manifest");
    assert!(i.reused_records, "{i:?}");
    let changes = records_of(&s3, &i.change_files, true).await;
    let found: Changes = changes
        .iter()
        .map(|(k, r)| (k.clone(), r.change.unwrap()))
        .collect();
    assert_eq!(found, made);
    let c = &i.counts;
    assert_eq!(
        (c.added, c.removed, c.content_changed, c.metadata_changed),
        (3, 3, 3, 3)
    );
    assert_eq!(inc.counts["objects"], want.len() as u64);
    assert_eq!(c.heads, 9, "only the new and changed objects are HEADed: {i:?}");
    // What reading the baseline cost, summed over the workers' reports
    // (it was 0 in every fleet manifest before they reported it).
    assert!(
        i.baseline_bytes_read > 0,
        "the manifest says what the baseline cost: {i:?}"
    );
    // Planned from the baseline's blocks, each shard reads from the block
    // it begins at: no byte twice (a plan by LIST, or a shard that began
    // reading at the block before its own, read up to a block more each).
    let baseline_bytes: u64 = full.files.iter().map(|f| f.bytes).sum();
    assert!(
        i.baseline_bytes_read <= baseline_bytes,
        "{} bytes read of a baseline of {baseline_bytes}",
        i.baseline_bytes_read
    );
    assert_eq!(
        s3.key_count(&out, "inc/parts/").await,
        0,
        "parts are removed after the merge"
    );
}

/// A filtered incremental scan is against a baseline scanned with the same
/// filter: one of another filter is refused (every object only one of the
/// two keeps would be an added or a removed change), and with the same one
/// the change set holds the changes to the objects the filter keeps, no
/// others.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_filtered_incremental_scan_needs_a_baseline_of_the_same_filter() {
    let s3 = minio();
    let bucket = s3.bucket("inc-filter").await;
    let out = s3.bucket("inc-filter-out").await;
    s3.seed(&bucket, &keyspace()).await;
    tokio::time::sleep(std::time::Duration::from_millis(3_100)).await;
    let dataset = |prefix: &str, extra: &[&str]| {
        let output = format!("s3://{out}/{prefix}");
        let mut args = vec!["scan", "--bucket", &bucket, "--layout", "dataset", "-o", &output];
        args.extend_from_slice(extra);
        s3.worker(&args)
    };
    let only_a = ["--include", "a/**"];
    assert_success(&dataset("all/", &[]));
    assert_success(&dataset("only-a/", &only_a));
    let made = change_bucket(&s3, &bucket).await;
    let baseline = |name: &str| format!("s3://{out}/{name}/manifest.json");

    let run = dataset("x/", &[&only_a[..], &["--baseline", &baseline("all")]].concat());
    assert!(!run.status.success());
    assert!(
        stderr(&run).contains("its scan's filter is not this scan's ({\"include\":[\"a/**\"]})"),
        "{}",
        stderr(&run)
    );

    assert_success(&dataset(
        "inc/",
        &[&only_a[..], &["--baseline", &baseline("only-a")]].concat(),
    ));
    let inc = manifest(&s3, &out, "inc/").await;
    let changes = records_of(&s3, &inc.incremental.unwrap().change_files, false).await;
    let found: Changes = changes
        .iter()
        .map(|(k, r)| (k.clone(), r.change.unwrap()))
        .collect();
    let want: Changes = made.into_iter().filter(|(k, _)| k.starts_with("a/")).collect();
    assert_eq!(found, want);
}

/// The scan's proxied server: the store check's replaces of its canary held
/// `hold_copies` each, and the planner's LISTs of `refused_bucket` (not the
/// bucket check's single key) held 3 s (the canary is written meanwhile)
/// and refused while `refusing` is set.
async fn planning_proxy(
    s3: &Server,
    hold_copies: std::time::Duration,
    refused_bucket: String,
    refusing: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> (fault_proxy::FaultProxy, Server) {
    use std::sync::atomic::Ordering::SeqCst;
    let lists = {
        let (refusing, bucket) = (refusing.clone(), refused_bucket.clone());
        move |req: &http::request::Parts| {
            let query = req.uri.query().unwrap_or_default();
            refusing.load(SeqCst)
                && fault_proxy::bucket_of(req.uri.path()) == bucket
                && query.contains("list-type=2")
                && !query.split('&').any(|p| p == "max-keys=1")
        }
    };
    let is_list = lists.clone();
    let rules = fault_proxy::Rules {
        answer: Some(Box::new(move |req| {
            is_list(req).then(|| fault_proxy::error_document(403, "AccessDenied", "refused by the test", &[]))
        })),
        delay: Some(Box::new(move |req| {
            let canary_copy = req
                .headers
                .get("x-amz-copy-source")
                .is_some_and(|v| v.to_str().unwrap_or_default().contains("store-check."));
            if canary_copy {
                Some(hold_copies)
            } else {
                lists(req).then_some(std::time::Duration::from_secs(3))
            }
        })),
        ..fault_proxy::Rules::default()
    };
    let proxy = fault_proxy::start_with(s3.endpoint.clone(), rules).await;
    let through = Server {
        endpoint: proxy.url.clone(),
        ..s3.clone()
    };
    (proxy, through)
}

/// `store-check.json` of a fleet scan whose output is `s3://OUT/PREFIX`.
async fn recorded_check(
    s3: &Server,
    out: &str,
    prefix: &str,
) -> bucketscan_core::fleet::incremental::StoreCheckRecord {
    let keys = s3.keys(out, prefix).await;
    let key = keys
        .iter()
        .find(|k| k.ends_with("store-check.json"))
        .unwrap_or_else(|| panic!("no store-check.json among {keys:?}"));
    serde_json::from_slice(&s3.read(out, key).await).unwrap()
}

fn plan_args<'a>(bucket: &'a str, output: &'a str) -> Vec<&'a str> {
    vec![
        "plan",
        "--bucket",
        bucket,
        "--output",
        output,
        "--layout",
        "dataset",
        "--target-shards",
        "6",
        "--min-shard-objects",
        "10",
    ]
}

/// A planner that failed before its mark (here the planner's LISTs refused
/// after its canary was written) recorded no check: planned again, the scan
/// checks its store anew (no HEAD came before the mark) and its result may
/// be a baseline. Were an unsettled check recorded with the canary, every
/// retry of planning (a LIST past its retries, the planning deadline, an
/// operator restart) would keep it, and a schedule's next run would refuse
/// its baseline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_that_failed_before_its_mark_checks_the_store_again() {
    let s3 = versitygw();
    let bucket = s3.bucket("inc-replanned").await;
    let out = s3.bucket("inc-replanned-out").await;
    s3.seed(&bucket, &keyspace()).await;
    let refusing = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let (_proxy, through) = planning_proxy(&s3, Default::default(), bucket.clone(), refusing.clone()).await;
    let scan = format!("replanned-{bucket}");
    let output = format!("s3://{out}/full/");
    let failed = fleet_command(&through, &scan, &plan_args(&bucket, &output))
        .output()
        .unwrap();
    assert!(!failed.status.success(), "{}", stderr(&failed));
    refusing.store(false, std::sync::atomic::Ordering::SeqCst);
    assert_success(
        &fleet_command(&through, &scan, &plan_args(&bucket, &output))
            .output()
            .unwrap(),
    );
    let record = recorded_check(&s3, &out, "full/").await;
    assert!(record.check.is_some(), "{record:?}");
}

/// A planner of a new scan of `keyspace()` on versitygw (its output
/// `s3://OUT/full/`), started through a proxy that holds each of the store
/// check's replaces of its canary `hold`.
struct HeldPlanner {
    s3: Server,
    bucket: String,
    out: String,
    scan: String,
    output: String,
    planner: std::process::Child,
    _proxy: fault_proxy::FaultProxy,
}

async fn spawn_held_planner(tag: &str, hold: std::time::Duration) -> HeldPlanner {
    let s3 = versitygw();
    let bucket = s3.bucket(tag).await;
    let out = s3.bucket(&format!("{tag}-out")).await;
    s3.seed(&bucket, &keyspace()).await;
    let never = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (proxy, through) = planning_proxy(&s3, hold, bucket.clone(), never).await;
    let scan = format!("{tag}-{bucket}");
    let output = format!("s3://{out}/full/");
    let planner = fleet_command(&through, &scan, &plan_args(&bucket, &output))
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    HeldPlanner {
        s3,
        bucket,
        out,
        scan,
        output,
        planner,
        _proxy: proxy,
    }
}

/// A canary write that lands after its sender gave up on it is no sign
/// that LastModified moves. versitygw keeps LastModified on a metadata
/// replace; the proxy answers the first canary PUT with a reset and
/// forwards it 2 s later (the client has written the canary again and read
/// its LastModified meanwhile), and holds the first replace 3 s, so the
/// late write lands, a second or more after the one read, before the
/// replace is read back. Each attempt writes a key of its own, so the late
/// write moves nothing the check reads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_canary_write_that_lands_late_does_not_make_the_check_say_last_modified_moves() {
    use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
    use std::sync::Arc;
    let s3 = versitygw();
    let bucket = s3.bucket("inc-late-canary").await;
    let out = s3.bucket("inc-late-canary-out").await;
    s3.seed(&bucket, &keyspace()).await;
    let (put_seen, copy_seen) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicBool::new(false)));
    let copies = |req: &http::request::Parts| {
        req.headers
            .get("x-amz-copy-source")
            .map(|v| v.to_str().unwrap_or_default().contains("store-check"))
    };
    let rules = fault_proxy::Rules {
        late: Some(Box::new(move |req| {
            let canary_put = req.method == http::Method::PUT
                && req.uri.path().contains("store-check")
                && copies(req).is_none();
            (canary_put && !put_seen.swap(true, SeqCst)).then_some(std::time::Duration::from_secs(2))
        })),
        delay: Some(Box::new(move |req| {
            (copies(req) == Some(true) && !copy_seen.swap(true, SeqCst))
                .then_some(std::time::Duration::from_secs(3))
        })),
        ..fault_proxy::Rules::default()
    };
    let proxy = fault_proxy::start_with(s3.endpoint.clone(), rules).await;
    let through = Server {
        endpoint: proxy.url.clone(),
        ..s3.clone()
    };
    let output = format!("s3://{out}/full/");
    let run = through.worker(&["scan", "--bucket", &bucket, "--layout", "dataset", "-o", &output]);
    assert_success(&run);
    let canary_puts = proxy
        .requests()
        .iter()
        .filter(|r| r.method == "PUT" && r.target.contains("store-check") && r.copy_source.is_none())
        .count();
    assert!(canary_puts >= 2, "the canary was written again after the reset");
    let check = manifest(&s3, &out, "full/")
        .await
        .store_check
        .expect("a store check");
    assert!(
        !check.last_modified_moves,
        "versitygw keeps LastModified; the late write was taken for a move: {check:?}"
    );
}

/// Until `scan`'s plan is marked in Redis (its shards queued).
async fn wait_for_mark(scan: &str) {
    use bucketscan_core::fleet::queue::{Queue, RedisConfig};
    let redis = std::env::var("BUCKETSCAN_TEST_REDIS_URL").unwrap();
    let queue = Queue::connect(
        &RedisConfig::new(&redis),
        scan,
        "test",
        std::time::Duration::from_secs(30),
    )
    .await
    .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while queue.plan_complete().await.unwrap().is_none() {
        assert!(std::time::Instant::now() < deadline, "the plan was never marked");
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
}

/// A fleet scan without a baseline queues its shards once the store check's
/// canary is written, and settles the check beside the HEADs: the check
/// takes up to a second (LastModified's resolution), which the first HEAD
/// waited for. A planner stopped before the check settled leaves it
/// unsettled: the scan completes, and its result is refused as a baseline,
/// saying why. The canary's replaces are held 3 s each, so the planner is
/// stopped within the settling whatever the machine's load.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_plan_is_marked_before_its_store_check_settles() {
    use bucketscan_core::fleet::incremental::UNSETTLED;
    let HeldPlanner {
        s3,
        bucket,
        out,
        scan,
        output,
        mut planner,
        _proxy,
    } = spawn_held_planner("inc-unsettled", std::time::Duration::from_secs(3)).await;
    wait_for_mark(&scan).await;
    let record = recorded_check(&s3, &out, "full/").await;
    planner.kill().unwrap();
    planner.wait().unwrap();
    assert_eq!(
        record.check, None,
        "settled before the plan was marked: {record:?}"
    );
    assert_eq!(record.error.as_deref(), Some(UNSETTLED));

    run_and_merge(&s3, &scan);
    let manifest = fleet_manifest(&s3, &out, "full").await;
    assert_eq!(manifest.store_check, None);
    assert_eq!(manifest.store_check_error.as_deref(), Some(UNSETTLED));
    assert_eq!(
        records_of(&s3, &manifest.files, false).await.len(),
        keyspace().len(),
        "the scan itself is whole"
    );

    let inc = s3.worker(&[
        "scan",
        "--bucket",
        &bucket,
        "--layout",
        "dataset",
        "-o",
        &format!("s3://{out}/inc/"),
        "--baseline",
        &format!("{output}manifest.json"),
    ]);
    assert!(!inc.status.success());
    assert!(
        stderr(&inc).contains("its store check failed or did not settle"),
        "{}",
        stderr(&inc)
    );
}

/// A merge run beside its planner (`plan`, workers and `merge` started
/// together) can find a small scan's shards done before the planner settled
/// the store check: it waits for the check rather than writing an unsettled
/// one into the manifest (and deleting the parts folder the planner still
/// writes `store-check.json` to).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_merge_beside_its_planner_waits_for_the_store_check_to_settle() {
    // Two replaces held 2 s each (versitygw keeps LastModified: the check
    // ends at the first replace sent over a second after the canary), well
    // within the planner's 10 s, and longer than this small scan takes.
    let HeldPlanner {
        s3,
        out,
        scan,
        mut planner,
        _proxy,
        ..
    } = spawn_held_planner("inc-settling", std::time::Duration::from_secs(2)).await;
    // Workers wait for the plan's mark by themselves; the merge for the
    // shards, and then for the check.
    let merged = run_and_merge(&s3, &scan);
    assert!(wait_exit(&mut planner, std::time::Duration::from_secs(60)).success());
    let manifest = fleet_manifest(&s3, &out, "full").await;
    let check = manifest.store_check.unwrap_or_else(|| {
        panic!(
            "merged before the check settled ({:?}): {merged}",
            manifest.store_check_error
        )
    });
    assert!(
        !check.last_modified_moves,
        "versitygw keeps LastModified: {check:?}"
    );
    assert_eq!(manifest.store_check_error, None);
}

/// A fleet scan with a baseline marks its plan before its store check
/// settles too (the check takes up to a second, which its first HEAD
/// waited for): its workers list and read the baseline meanwhile, and take
/// no record from the baseline before the check says LastModified moves.
/// A planner stopped before the check settled leaves workers that wait for
/// it a while, then HEAD every object: exact whatever the store does. On
/// MinIO (which moves LastModified), the canary's replaces held 2 s each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_incremental_fleet_scan_takes_baseline_records_only_once_its_store_check_settled() {
    use bucketscan_core::fleet::incremental::UNSETTLED;
    let s3 = minio();
    let bucket = s3.bucket("inc-held").await;
    let out = s3.bucket("inc-held-out").await;
    s3.seed(&bucket, &keyspace()).await;
    tokio::time::sleep(std::time::Duration::from_millis(3_100)).await;
    let full = format!("s3://{out}/full/");
    let layout = ["--layout", "dataset"];
    fleet_scan(
        &s3,
        &format!("full-{bucket}"),
        &[&["--bucket", &bucket, "--output", &full][..], &layout].concat(),
    );
    let made = change_bucket(&s3, &bucket).await;
    let full2 = format!("s3://{out}/full2/");
    fleet_scan(
        &s3,
        &format!("full2-{bucket}"),
        &[&["--bucket", &bucket, "--output", &full2][..], &layout].concat(),
    );
    let want = records_of(&s3, &fleet_manifest(&s3, &out, "full2").await.files, false).await;
    let baseline = format!("{full}manifest.json");

    for (name, stopped) in [("stopped", true), ("settled", false)] {
        let never = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (_proxy, through) =
            planning_proxy(&s3, std::time::Duration::from_secs(2), bucket.clone(), never).await;
        let scan = format!("{name}-{bucket}");
        let output = format!("s3://{out}/{name}/");
        let mut args = plan_args(&bucket, &output);
        args.extend(["--baseline", &baseline]);
        let mut planner = fleet_command(&through, &scan, &args)
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        wait_for_mark(&scan).await;
        let record = recorded_check(&s3, &out, &format!("{name}/")).await;
        assert_eq!(
            record.error.as_deref(),
            Some(UNSETTLED),
            "{name}: settled before the mark: {record:?}"
        );
        if stopped {
            planner.kill().unwrap();
        }
        run_and_merge(&s3, &scan);
        let ended = wait_exit(&mut planner, std::time::Duration::from_secs(60));
        assert_eq!(ended.success(), !stopped, "{name}: the planner ended {ended:?}");
        let manifest = fleet_manifest(&s3, &out, name).await;
        assert_eq!(
            records_of(&s3, &manifest.files, false).await,
            want,
            "{name}: equal to a full scan"
        );
        let inc = manifest.incremental.expect("an incremental manifest");
        let found: Changes = records_of(&s3, &inc.change_files, false)
            .await
            .iter()
            .map(|(k, r)| (k.clone(), r.change.unwrap()))
            .collect();
        assert_eq!(found, made, "{name}: the change set");
        if stopped {
            assert!(!inc.reused_records, "{inc:?}");
            assert_eq!(
                inc.counts.heads,
                want.len() as u64,
                "every object HEADed: {inc:?}"
            );
            assert_eq!(manifest.store_check_error.as_deref(), Some(UNSETTLED));
        } else {
            assert!(inc.reused_records, "{inc:?}");
            assert_eq!(
                inc.counts.heads, 9,
                "only the new and changed objects are HEADed: {inc:?}"
            );
            assert!(manifest.store_check.is_some_and(|c| c.last_modified_moves));
        }
    }
}

/// Objects with metadata deleted after the last key listed of their range
/// (here the bucket's last keys, and a whole prefix) are removals taken
/// from the baseline at the range's end: their change records hold their
/// whole baseline record (its metadata and content type), not the part
/// of it that deciding whether to take a record unchanged reads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_deleted_at_the_end_of_a_range_keep_their_whole_record_in_the_change_set() {
    let s3 = minio();
    let bucket = s3.bucket("inc-tail").await;
    let out = s3.bucket("inc-tail-out").await;
    let seeded: BTreeMap<String, Seeded> = ["a/1", "a/2", "b/1", "b/2", "b/3"]
        .iter()
        .map(|k| {
            let metadata = BTreeMap::from([("owner".to_string(), format!("of-{k}"))]);
            (k.to_string(), Seeded { size: 3, metadata })
        })
        .collect();
    s3.seed(&bucket, &seeded).await;
    tokio::time::sleep(std::time::Duration::from_millis(3_100)).await;
    let scan = |prefix: &str, baseline: Option<String>| {
        let output = format!("s3://{out}/{prefix}");
        let mut args = vec!["scan", "--bucket", &bucket, "--layout", "dataset", "-o", &output];
        args.extend(["--metadata-source", "head"]);
        let baseline = baseline.unwrap_or_default();
        if !baseline.is_empty() {
            args.extend(["--baseline", &baseline]);
        }
        assert_success(&s3.worker(&args));
    };
    scan("full/", None);
    for key in ["a/2", "b/2", "b/3"] {
        s3.client()
            .delete_object()
            .bucket(&bucket)
            .key(key)
            .send()
            .await
            .unwrap();
    }
    scan("inc/", Some(format!("s3://{out}/full/manifest.json")));
    let inc = manifest(&s3, &out, "inc/").await;
    let i = inc.incremental.expect("an incremental manifest");
    let changes = records_of(&s3, &i.change_files, false).await;
    assert_eq!(changes.keys().collect::<Vec<_>>(), ["a/2", "b/2", "b/3"]);
    for (key, change) in &changes {
        assert_eq!(change.change, Some(ChangeKind::Removed));
        let owner = format!("of-{key}");
        assert_eq!(change.metadata["owner"], owner, "{change:?}");
        let previous = change.previous.as_ref().expect("the baseline's record");
        assert_eq!(previous.metadata["owner"], owner, "{change:?}");
        assert!(previous.content_type.is_some(), "{change:?}");
    }
    assert_eq!(records_of(&s3, &inc.files, false).await.len(), 2);
}
