//! The engine, planner and output through the library, against the real S3
//! servers. Kept in their own test binary because they set the AWS
//! credential variables the library reads.

mod common;
#[path = "common/fault_proxy.rs"]
mod fault_proxy;

use bucketscan_core::keyspace::planner::{plan, BucketLister, PlanOptions};
use bucketscan_core::keyspace::shard::Shard;
use bucketscan_core::s3::head::{HeadClient, HeadClientKind};
use bucketscan_core::s3::{ListRequest, S3};
use bucketscan_core::scan::engine::{Engine, EngineOptions};
use bucketscan_core::scan::output::{Destination, OutputOptions, RecordWriter};
use bucketscan_core::scan::record::{Record, Status};
use bucketscan_core::scan::single::{scan_shards, ScanOptions};
use common::*;
use fault_proxy::FaultProxy;
use http::request::Parts as RequestParts;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

fn engine(s3: &Arc<S3>, bucket: &str, kind: HeadClientKind) -> Arc<Engine> {
    Engine::new(
        s3.clone(),
        HeadClient::new(kind, s3).unwrap(),
        EngineOptions {
            bucket: bucket.into(),
            concurrency: 32,
            only_with_metadata: false,
            page_size: 1000,
            max_rate: None,
            metadata_source: bucketscan_core::scan::listed::MetadataSource::Head,
            filter: Default::default(),
            columns: Default::default(),
        },
    )
}

fn plain(n: usize, prefix: &str) -> BTreeMap<String, Seeded> {
    (0..n)
        .map(|i| {
            (
                format!("{prefix}{i:05}"),
                Seeded {
                    size: i % 13,
                    metadata: Default::default(),
                },
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_deleted_between_list_and_head_are_vanished() {
    let server = moto();
    let bucket = server.bucket("vanish").await;
    let seeded = plain(300, "v/");
    server.seed(&bucket, &seeded).await;
    let s3 = server.s3().await;
    let page = s3
        .list_page(
            &bucket,
            &ListRequest {
                prefix: "v/".into(),
                max_keys: 1000,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(page.objects.len(), 300);
    let deleted: Vec<String> = page.objects.iter().step_by(3).map(|o| o.key.clone()).collect();
    for key in &deleted {
        server.delete(&bucket, key).await;
    }
    for kind in [HeadClientKind::Fast, HeadClientKind::Sdk] {
        let engine = engine(&s3, &bucket, kind);
        for obj in page.objects.clone() {
            let gone = deleted.contains(&obj.key);
            let rec = engine.head_listed(obj.clone()).await.unwrap();
            let want = if gone { Status::Vanished } else { Status::Ok };
            assert_eq!(rec.status, want, "{kind:?} {rec:?}");
            assert_eq!(
                rec.size, obj.size,
                "the listing's size is kept for vanished objects"
            );
        }
        assert_eq!(engine.counters.snapshot().vanished, deleted.len() as u64);
    }
}

/// Results larger than a part go up as a multipart upload, streamed. On
/// versitygw: moto answers CompleteMultipartUpload with a root element the
/// SDK rejects (`CompleteMultipartUploadResponse`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_output_is_a_streamed_multipart_upload() {
    let server = versitygw();
    let bucket = server.bucket("multipart").await;
    let s3 = server.s3().await;
    let mut rng = 0x9E37_79B9_7F4A_7C15u64;
    let records: Vec<Record> = (0..40_000u64)
        .map(|i| Record {
            key: format!("key/{i:08}"),
            status: Status::Ok,
            size: i,
            etag: Some(format!("{:032x}", i.wrapping_mul(0x9E37_79B9_7F4A_7C15))),
            last_modified: Some("2026-01-01T00:00:00Z".into()),
            storage_class: Some("STANDARD".into()),
            content_type: None,
            // Random hex values, so even the gzip output outgrows one part.
            metadata: (0..6).map(|m| (format!("h{m}"), random_hex(&mut rng))).collect(),
            binary_metadata: Vec::new(),
            missing_metadata: None,
            columns: Default::default(),
            error: None,
            http_status: None,
            change: None,
            previous: None,
            verbatim: Default::default(),
        })
        .collect();
    for gzip in [false, true] {
        let key = format!("out/result.jsonl{}", if gzip { ".gz" } else { "" });
        let dest = Destination::S3 {
            bucket: bucket.clone(),
            key: key.clone(),
        };
        let opts = OutputOptions {
            gzip,
            part_size: 0, // 0 = the S3 minimum, 5 MiB
            ..OutputOptions::default()
        };
        let mut writer = RecordWriter::create(&dest, &opts, Some(&s3)).await.unwrap();
        for r in &records {
            writer.write(r).await.unwrap();
        }
        let summary = writer.finish().await.unwrap();
        assert_eq!(summary.records, records.len() as u64);
        assert!(
            summary.parts >= 2,
            "gzip={gzip}: {summary:?} should be a multipart upload"
        );
        let mut body = server.read(&bucket, &key).await;
        assert_eq!(body.len() as u64, summary.bytes);
        if gzip {
            let mut out = Vec::new();
            std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&body[..]), &mut out).unwrap();
            body = out;
        }
        let back = parse_records(&body);
        assert_eq!(back.len(), records.len());
        assert!(records.iter().all(|r| back[&r.key] == *r));
    }
}

/// 64 hex digits from a xorshift generator.
fn random_hex(state: &mut u64) -> String {
    (0..4)
        .map(|_| {
            *state ^= *state << 13;
            *state ^= *state >> 7;
            *state ^= *state << 17;
            format!("{:016x}", *state)
        })
        .collect()
}

fn skewed() -> BTreeMap<String, Seeded> {
    let mut keys = BTreeMap::new();
    for i in 0..2400 {
        keys.insert(format!("hot/{:02}/{i:05}", i % 50), Seeded::default());
    }
    for i in 0..600 {
        keys.insert(format!("cold-{}/{i:05}", i % 12), Seeded::default());
    }
    keys
}

fn hashed() -> BTreeMap<String, Seeded> {
    (0..3000u64)
        .map(|i| {
            (
                format!("{:016x}", i.wrapping_mul(0x9E37_79B9_7F4A_7C15)),
                Seeded::default(),
            )
        })
        .collect()
}

/// Both a skewed bucket (80 % under one prefix) and a flat hashed one plan
/// into balanced shards, and scanning the shards returns every object once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn planner_balances_skewed_and_hashed_buckets() {
    let server = versitygw();
    let s3 = server.s3().await;
    for (name, seeded) in [("skewed", skewed()), ("hashed", hashed())] {
        let bucket = server.bucket(name).await;
        server.seed(&bucket, &seeded).await;
        let opts = PlanOptions {
            target_shards: 8,
            page_size: 100,
            ..PlanOptions::default()
        };
        let shards = plan(
            &BucketLister {
                s3: &s3,
                bucket: &bucket,
            },
            &opts,
        )
        .await
        .unwrap();
        let sizes: Vec<usize> = shards
            .iter()
            .map(|p| seeded.keys().filter(|k| p.shard.contains(k)).count())
            .collect();
        let mean = seeded.len() / sizes.len();
        let max = *sizes.iter().max().unwrap();
        assert!(sizes.len() >= 8, "{name}: {sizes:?}");
        assert!(
            max <= 3 * mean.max(opts.page_size as usize),
            "{name}: unbalanced {sizes:?}"
        );
        for key in seeded.keys() {
            assert_eq!(
                shards.iter().filter(|p| p.shard.contains(key)).count(),
                1,
                "{name}: {key:?}"
            );
        }
        let out = temp_path(&format!("{name}.jsonl"));
        let engine = engine(&s3, &bucket, HeadClientKind::Fast);
        let scan = ScanOptions {
            shard_parallelism: 4,
            output: Destination::File(out.clone()),
            output_opts: OutputOptions::default(),
        };
        let summary = scan_shards(&engine, shards, &scan).await.unwrap();
        assert_eq!(summary.listed, seeded.len() as u64);
        assert_matches_seed(&parse_records(&std::fs::read(&out).unwrap()), &seeded);
    }
}

/// A scan that fails leaves no output behind, not even a partial file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_scan_leaves_no_output() {
    let server = moto();
    let s3 = server.s3().await;
    let engine = engine(&s3, "bucket-that-does-not-exist", HeadClientKind::Fast);
    let out = temp_path("failed.jsonl");
    let scan = ScanOptions {
        shard_parallelism: 1,
        output: Destination::File(out.clone()),
        output_opts: OutputOptions::default(),
    };
    let shard = bucketscan_core::keyspace::planner::PlannedShard {
        shard: Shard::prefix(""),
        estimated_objects: 0,
        exact: true,
    };
    let err = scan_shards(&engine, vec![shard], &scan).await.unwrap_err();
    assert!(
        matches!(err, bucketscan_core::s3::error::S3Error::NoSuchBucket { .. }),
        "{err}"
    );
    assert!(!out.exists());
    assert!(!out.with_extension("jsonl.partial").exists());
}

/// Throttling, server errors and dropped connections are retried with backoff
/// until every object is read. A proxy in front of the real server injects
/// the faults (no S3 server here can be told to throttle).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transient_faults_are_retried_until_done() {
    let server = moto();
    let bucket = server.bucket("faults").await;
    let seeded = plain(400, "f/");
    server.seed(&bucket, &seeded).await;
    let proxy = flaky_proxy(server.endpoint.clone()).await;
    let through_proxy = Server {
        endpoint: proxy.url.clone(),
        ..server.clone()
    };
    let s3 = through_proxy.s3().await;
    for kind in [HeadClientKind::Fast, HeadClientKind::Sdk] {
        let engine = engine(&s3, &bucket, kind);
        let out = temp_path(&format!("faults-{kind:?}.jsonl"));
        let scan = ScanOptions {
            shard_parallelism: 2,
            output: Destination::File(out.clone()),
            output_opts: OutputOptions::default(),
        };
        scan_shards(
            &engine,
            vec![bucketscan_core::keyspace::planner::PlannedShard {
                shard: Shard::prefix("f/"),
                estimated_objects: 0,
                exact: false,
            }],
            &scan,
        )
        .await
        .unwrap();
        assert_matches_seed(&parse_records(&std::fs::read(&out).unwrap()), &seeded);
    }
    let injected = answered_by_rule(&proxy);
    assert!(injected > 50, "only {injected} faults injected");
    assert!(
        s3.retries.load(Ordering::Relaxed) >= injected,
        "every fault was retried"
    );
}

/// A server may answer a LIST with a page that holds no keys and is still
/// truncated. A proxy in front of moto answers every other LIST that way
/// (its token leads back to the real listing): planning, scanning and
/// deleting a prefix must each follow such pages to the real end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn empty_truncated_pages_do_not_end_a_listing() {
    let server = moto();
    let bucket = server.bucket("empty-pages").await;
    let seeded = plain(300, "e/");
    server.seed(&bucket, &seeded).await;
    let proxy = empty_page_proxy(server.endpoint.clone()).await;
    let through_proxy = Server {
        endpoint: proxy.url.clone(),
        ..server.clone()
    };
    let s3 = through_proxy.s3().await;
    let opts = PlanOptions {
        prefix: "e/".into(),
        target_shards: 4,
        page_size: 25,
        ..PlanOptions::default()
    };
    let lister = BucketLister {
        s3: &s3,
        bucket: &bucket,
    };
    let shards = plan(&lister, &opts).await.unwrap();
    let engine = Engine::new(
        s3.clone(),
        HeadClient::new(HeadClientKind::Fast, &s3).unwrap(),
        EngineOptions {
            bucket: bucket.clone(),
            concurrency: 8,
            only_with_metadata: false,
            page_size: 25,
            max_rate: None,
            metadata_source: bucketscan_core::scan::listed::MetadataSource::Head,
            filter: Default::default(),
            columns: Default::default(),
        },
    );
    let out = temp_path("empty-pages.jsonl");
    let scan = ScanOptions {
        shard_parallelism: 2,
        output: Destination::File(out.clone()),
        output_opts: OutputOptions::default(),
    };
    scan_shards(&engine, shards, &scan).await.unwrap();
    assert_matches_seed(&parse_records(&std::fs::read(&out).unwrap()), &seeded);

    let deleted = bucketscan_core::s3::delete::delete_prefix(&s3, &bucket, "e/")
        .await
        .unwrap();
    assert_eq!(deleted, 300);
    assert_eq!(server.key_count(&bucket, "e/").await, 0);
    assert!(answered_by_rule(&proxy) > 10, "empty pages were served");
}

/// Forwards to the real server, except that about one request in four is
/// answered with 503 SlowDown, 500, or a dropped connection.
async fn flaky_proxy(upstream: String) -> FaultProxy {
    let requests = AtomicU64::new(0);
    let answer = move |_: &RequestParts| match requests.fetch_add(1, Ordering::Relaxed) % 8 {
        1 => Some(fault_proxy::slow_down()),
        4 => Some(fault_proxy::answer(500, &[], "")),
        6 => Some(fault_proxy::reset()),
        _ => None,
    };
    fault_proxy::start(upstream, answer, |_, _| {}).await
}

/// Forwards to the real server, except that every other LIST is answered
/// with an empty page that is still truncated. Its continuation token
/// carries the request's own (hex-encoded): the next request is forwarded
/// with that token put back, so the real listing goes on where it was.
async fn empty_page_proxy(upstream: String) -> FaultProxy {
    const MARK: &str = "bsempty-";
    /// The query with the proxy's own continuation token replaced by the one
    /// it carries (or removed, when the listing was at its start), and that
    /// token as it was sent; `None` for a request that is not a LIST.
    fn restore_token(req: &RequestParts) -> Option<(String, String)> {
        let query = req.uri.query().filter(|q| q.contains("list-type=2"))?;
        let mut token = String::new();
        let params: Vec<String> = query
            .split('&')
            .filter_map(|param| match param.strip_prefix("continuation-token=") {
                Some(value) => {
                    let original = match value.strip_prefix(MARK) {
                        Some(hex) => String::from_utf8(hex::decode(hex).unwrap()).unwrap(),
                        None => value.to_string(),
                    };
                    token = original.clone();
                    (!original.is_empty()).then(|| format!("continuation-token={original}"))
                }
                None => Some(param.to_string()),
            })
            .collect();
        Some((params.join("&"), token))
    }
    let lists = AtomicU64::new(0);
    let answer = move |req: &RequestParts| {
        let (_, token) = restore_token(req)?;
        if !lists.fetch_add(1, Ordering::Relaxed).is_multiple_of(2) {
            return None;
        }
        let page = format!(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?><ListBucketResult><KeyCount>0</KeyCount>\
             <IsTruncated>true</IsTruncated><NextContinuationToken>{MARK}{}</NextContinuationToken>\
             <EncodingType>url</EncodingType></ListBucketResult>",
            hex::encode(token)
        );
        Some(fault_proxy::answer(200, &[], &page))
    };
    let target = |req: &RequestParts| {
        let (query, _) = restore_token(req)?;
        Some(format!("{}?{query}", req.uri.path()))
    };
    let rules = fault_proxy::Rules {
        answer: Some(Box::new(answer)),
        target: Some(Box::new(target)),
        ..fault_proxy::Rules::default()
    };
    fault_proxy::start_with(upstream, rules).await
}

/// How many requests the proxy's rules answered (faults, empty pages).
fn answered_by_rule(proxy: &FaultProxy) -> u64 {
    proxy.requests().iter().filter(|s| s.answered_by_rule).count() as u64
}

/// Put `key` with `size` bytes in `class` (None: the server's default).
async fn put_in_class(server: &Server, bucket: &str, key: &str, size: usize, class: Option<&str>) {
    let mut put = server
        .client()
        .put_object()
        .bucket(bucket)
        .key(key)
        .body(aws_sdk_s3::primitives::ByteStream::from(vec![b'x'; size]));
    if let Some(class) = class {
        put = put.storage_class(class.into());
    }
    put.send().await.unwrap_or_else(|e| panic!("put {key}: {e:?}"));
}

/// The keyspace of the filter tests: `f/old/` written more than a second
/// before `f/new/marker.csv`, the rest more than a second after it. Returns
/// the marker's LastModified as listed.
async fn seed_for_filters(server: &Server, bucket: &str, classes: bool) -> String {
    for i in 0..20 {
        put_in_class(server, bucket, &format!("f/old/{i:03}.csv"), 5, None).await;
    }
    // LastModified has whole seconds on some stores: a second and more
    // apart, the batches are on both sides of the marker's time.
    tokio::time::sleep(std::time::Duration::from_millis(1_100)).await;
    put_in_class(server, bucket, "f/new/marker.csv", 5, None).await;
    let s3 = server.s3().await;
    let req = ListRequest {
        prefix: "f/new/marker.csv".into(),
        max_keys: 1,
        ..Default::default()
    };
    let page = s3.list_page(bucket, &req).await.unwrap();
    let marker_time = page.objects[0].last_modified.clone().unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(1_100)).await;
    for i in 0..30 {
        put_in_class(server, bucket, &format!("f/new/a-{i:02}.csv"), i, None).await;
    }
    for i in 0..10 {
        put_in_class(server, bucket, &format!("f/new/b-{i:02}.json"), 5, None).await;
    }
    for i in 0..5 {
        put_in_class(server, bucket, &format!("f/new/tmp/x-{i:02}.csv"), 5, None).await;
    }
    if classes {
        for i in 0..5 {
            put_in_class(
                server,
                bucket,
                &format!("f/new/ia-{i:02}.csv"),
                5,
                Some("STANDARD_IA"),
            )
            .await;
        }
    }
    marker_time
}

/// Scan the whole bucket with `filter` through `scan_shards`: the records
/// written and the engine's counters.
async fn scan_filtered(
    server: &Server,
    bucket: &str,
    filter: bucketscan_core::scan::filter::ObjectFilter,
    metadata_source: bucketscan_core::scan::listed::MetadataSource,
    name: &str,
) -> (
    BTreeMap<String, Record>,
    bucketscan_core::scan::engine::CountersSnapshot,
) {
    let s3 = server.s3().await;
    let lister = BucketLister { s3: &s3, bucket };
    let opts = PlanOptions {
        target_shards: 3,
        page_size: 7,
        ..PlanOptions::default()
    };
    let shards = plan(&lister, &opts).await.unwrap();
    let engine = Engine::new(
        s3.clone(),
        HeadClient::new(HeadClientKind::Fast, &s3).unwrap(),
        EngineOptions {
            bucket: bucket.into(),
            concurrency: 8,
            only_with_metadata: false,
            page_size: 7,
            max_rate: None,
            metadata_source,
            filter,
            columns: Default::default(),
        },
    );
    let out = temp_path(name);
    let scan = ScanOptions {
        shard_parallelism: 2,
        output: Destination::File(out.clone()),
        output_opts: OutputOptions::default(),
    };
    scan_shards(&engine, shards, &scan).await.unwrap();
    let records = parse_records(&std::fs::read(&out).unwrap());
    (records, engine.counters.snapshot())
}

/// Filters are judged from the listing: what they leave out gets no HEAD,
/// no record, and is counted as `filtered`, not as listed. Every kind of
/// filter at once, each bound at its edge: the marker, modified exactly at
/// `modified_after`, is kept; sizes 1 and 20 are kept, 0 and 21 are not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn filtered_objects_get_no_head_and_no_record() {
    use bucketscan_core::scan::filter::{FilterSpec, ObjectFilter};
    let server = moto();
    let bucket = server.bucket("filters").await;
    let marker_time = seed_for_filters(&server, &bucket, true).await;
    let filter = ObjectFilter::new(FilterSpec {
        modified_after: Some(marker_time.clone()),
        modified_before: Some("2100-01-01".into()),
        min_size: Some(1),
        max_size: Some(20),
        include: vec!["f/**/*.csv".into()],
        exclude: vec!["f/new/tmp/**".into()],
        storage_classes: vec!["standard".into()],
    })
    .unwrap();
    let (records, counters) = scan_filtered(
        &server,
        &bucket,
        filter,
        bucketscan_core::scan::listed::MetadataSource::Head,
        "filters.jsonl",
    )
    .await;
    let mut want: Vec<String> = (1..=20).map(|i| format!("f/new/a-{i:02}.csv")).collect();
    want.push("f/new/marker.csv".into());
    want.sort();
    assert_eq!(
        records.keys().cloned().collect::<Vec<_>>(),
        want,
        "marker at {marker_time}"
    );
    // 20 old + a-00 (empty) + a-21..a-29 (too big) + 10 json + 5 tmp + 5 IA.
    assert_eq!(counters.filtered, 50);
    assert_eq!(
        counters.heads, 21,
        "a HEAD for each object kept, none for the others"
    );
    assert_eq!(counters.listed, 21);
}

/// With metadata from the listing (MinIO), filtered objects are not made
/// into records either: `from_listing` counts only the objects kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn filters_apply_to_records_made_from_the_listing() {
    use bucketscan_core::scan::filter::{FilterSpec, ObjectFilter};
    use bucketscan_core::scan::listed::MetadataSource;
    let server = minio();
    let bucket = server.bucket("filters-listed").await;
    seed_for_filters(&server, &bucket, false).await;
    let filter = ObjectFilter::new(FilterSpec {
        max_size: Some(3),
        include: vec!["f/new/*.csv".into()],
        ..FilterSpec::default()
    })
    .unwrap();
    for source in [MetadataSource::List, MetadataSource::Auto] {
        let (records, counters) =
            scan_filtered(&server, &bucket, filter.clone(), source, "filters-listed.jsonl").await;
        let want: Vec<String> = (0..=3).map(|i| format!("f/new/a-{i:02}.csv")).collect();
        assert_eq!(records.keys().cloned().collect::<Vec<_>>(), want, "{source:?}");
        // 66 objects in all: 4 kept.
        assert_eq!(counters.filtered, 62, "{source:?}");
        assert_eq!(counters.listed, 4, "{source:?}");
        assert_eq!(
            counters.heads + counters.from_listing,
            4,
            "{source:?}: {counters:?}"
        );
        if source == MetadataSource::List {
            assert_eq!(counters.heads, 0, "all four from the listing");
        }
    }
}

/// Emulates a store that refuses one object's HEAD with 503 SlowDown until
/// told to serve it: its refusals reach the engine's counters (the
/// governor's windows) and its key's partition as they come, while the HEAD
/// still retries. Before, they were counted when the HEAD ended: a HEAD
/// refused for seconds before the governor's cut put all its refusals in
/// the window it was served in, and the governor cut again at half the
/// store's capacity for that echo (bench/tests/throttled_scan.rs at
/// 0.37 C).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn throttles_are_counted_when_they_come_not_when_the_head_ends() {
    let server = moto();
    let bucket = server.bucket("counted-throttles").await;
    let seeded = plain(1, "hot/");
    server.seed(&bucket, &seeded).await;
    let listed = server
        .s3()
        .await
        .list_page(
            &bucket,
            &ListRequest {
                prefix: "hot/".into(),
                max_keys: 10,
                ..Default::default()
            },
        )
        .await
        .unwrap()
        .objects;
    let serve = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let refused = Arc::new(AtomicU64::new(0));
    let (serve_now, refusals) = (serve.clone(), refused.clone());
    let proxy = fault_proxy::start(
        server.endpoint.clone(),
        move |req| {
            if req.method != "HEAD" || serve_now.load(Ordering::SeqCst) {
                return None;
            }
            refusals.fetch_add(1, Ordering::SeqCst);
            Some(fault_proxy::slow_down())
        },
        |_, _| {},
    )
    .await;
    let through_proxy = Server {
        endpoint: proxy.url.clone(),
        ..server.clone()
    };
    let engine = engine(&through_proxy.s3().await, &bucket, HeadClientKind::Fast);
    let heading = tokio::spawn({
        let engine = engine.clone();
        let obj = listed[0].clone();
        async move { engine.head_listed(obj).await }
    });
    // The proxy counts a refusal when it answers; the engine when the
    // answer reaches it, a moment later: wait for the engine's count.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while engine.counters.throttles.load(Ordering::SeqCst) < 3 {
        assert!(
            std::time::Instant::now() < deadline,
            "{} throttles counted while {} came",
            engine.counters.throttles.load(Ordering::SeqCst),
            refused.load(Ordering::SeqCst)
        );
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    // Still retrying (the store has not served it): the refusals so far are
    // counted, in the totals and in the partition the first one tracked.
    assert!(!heading.is_finished());
    let hot = engine
        .partitions
        .find("hot/x")
        .expect("hot/ is tracked from its first refusal");
    assert!(hot.counts().throttles >= 3, "{:?}", hot.counts());
    assert_eq!(
        engine.counters.heads.load(Ordering::SeqCst),
        0,
        "no HEAD ended yet"
    );
    serve.store(true, Ordering::SeqCst);
    let record = heading.await.unwrap().unwrap();
    assert_eq!(record.status, Status::Ok, "{record:?}");
    let all = refused.load(Ordering::SeqCst);
    assert_eq!(
        engine.counters.throttles.load(Ordering::SeqCst),
        all,
        "each refusal once"
    );
    assert_eq!(hot.counts().throttles, all);
    assert_eq!(hot.counts().heads, 1);
    assert_eq!(engine.counters.heads.load(Ordering::SeqCst), 1);
}

/// A HEAD's future is moved into a box of its own for every object
/// (`tokio::spawn`): its size is copied, and its memory zeroed by the
/// kernel when fresh, once per HEAD. The rare paths (the SDK's HEAD,
/// tags, versions, the LIST of a 404) are boxed apart, so the common one
/// stays small; perf showed the copy and the fresh pages as a fifth of a
/// scan's CPU while they were inline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_head_s_future_stays_small() {
    let server = moto();
    let s3 = server.s3().await;
    for kind in [HeadClientKind::Fast, HeadClientKind::Sdk] {
        let engine = engine(&s3, "b", kind);
        let obj = bucketscan_core::s3::types::ListedObject {
            key: "k".into(),
            size: 1,
            ..Default::default()
        };
        let head = engine.head_listed(obj);
        let size = std::mem::size_of_val(&head);
        eprintln!("{kind:?}: the HEAD future holds {size} bytes");
        assert!(size <= 8192, "{kind:?}: the HEAD future holds {size} bytes");
    }
}
