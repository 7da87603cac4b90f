//! `bucketscan-worker scan` end to end against real S3 servers.

mod common;

use common::*;
use std::collections::BTreeMap;

fn meta(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Scan with the fast and the SDK HEAD path; both must return the seed exactly.
fn scan_with_both_head_paths(s3: &Server, bucket: &str, shards: &str, seeded: &BTreeMap<String, Seeded>) {
    for head in ["fast", "sdk"] {
        let run = s3.worker(&[
            "scan",
            "--bucket",
            bucket,
            "--head-client",
            head,
            "--target-shards",
            shards,
        ]);
        assert_success(&run);
        assert_matches_seed(&parse_records(&run.stdout), seeded);
    }
}

/// The fast LIST path reads every page as aws-sdk-s3 does: the same keys,
/// sizes, ETags, times, prefixes and continuation, with and without a
/// delimiter, a prefix and a StartAfter, page after page.
async fn assert_fast_list_matches_sdk(s3: &Server, bucket: &str, max_keys: i32, prefixes: &[&str]) {
    use bucketscan_core::s3::ListRequest;
    let client = s3.s3().await;
    let keys: Vec<String> = client
        .list_page_sdk(
            bucket,
            &ListRequest {
                max_keys: 1000,
                ..ListRequest::default()
            },
        )
        .await
        .unwrap()
        .objects
        .into_iter()
        .map(|o| o.key)
        .collect();
    let mut starts = vec![None];
    starts.extend(keys.iter().step_by((keys.len() / 4).max(1)).cloned().map(Some));
    let mut pages = 0;
    for prefix in prefixes {
        for delimiter in [None, Some("/".to_string())] {
            for start_after in &starts {
                let mut req = ListRequest {
                    prefix: prefix.to_string(),
                    start_after: start_after.clone(),
                    delimiter: delimiter.clone(),
                    max_keys,
                    ..ListRequest::default()
                };
                loop {
                    let fast = client.list_page(bucket, &req).await.unwrap();
                    let sdk = client.list_page_sdk(bucket, &req).await.unwrap();
                    assert_eq!(fast.objects, sdk.objects, "{req:?}");
                    assert_eq!(fast.common_prefixes, sdk.common_prefixes, "{req:?}");
                    // Tokens are opaque (MinIO's hold a per-request cache id):
                    // both must say whether a page follows.
                    assert_eq!(fast.next.is_some(), sdk.next.is_some(), "{req:?}");
                    pages += 1;
                    match fast.next {
                        Some(token) => req.continuation = Some(token),
                        None => break,
                    }
                }
            }
        }
    }
    assert!(pages > 10, "{pages} pages compared");
}

/// 5,200 objects under nested prefixes, every third with metadata.
fn nested_keyspace() -> BTreeMap<String, Seeded> {
    (0..5200)
        .map(|i| {
            let key = format!("region-{}/day-{:02}/obj-{i:05}.bin", i % 3, i % 17);
            let metadata = if i % 3 == 0 {
                meta(&[
                    ("Owner", &format!("team-{}", i % 5)),
                    ("Checksum-Sha", &format!("{i:x}")),
                ])
            } else {
                BTreeMap::new()
            };
            (
                key,
                Seeded {
                    size: i % 40,
                    metadata,
                },
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scan_returns_every_object_with_exact_metadata() {
    let s3 = versitygw();
    let bucket = s3.bucket("nested").await;
    let seeded = nested_keyspace();
    s3.seed(&bucket, &seeded).await;

    let out = temp_path("nested.jsonl");
    let run = s3.worker(&[
        "scan",
        "--bucket",
        &bucket,
        "--target-shards",
        "12",
        "--concurrency",
        "64",
        "-o",
        out.to_str().unwrap(),
    ]);
    assert_success(&run);
    let records = parse_records(&std::fs::read(&out).unwrap());
    assert_matches_seed(&records, &seeded);
    let summary = stderr(&run);
    assert!(summary.contains("scanned 5200 objects"), "{summary}");

    // Only objects with metadata, through the SDK HEAD path, gzip on stdout.
    let run = s3.worker(&[
        "scan",
        "--bucket",
        &bucket,
        "--only-with-metadata",
        "--head-client",
        "sdk",
        "--gzip",
        "--delimiter",
        "",
    ]);
    assert_success(&run);
    let mut plain = Vec::new();
    std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&run.stdout[..]), &mut plain).unwrap();
    let with_meta: BTreeMap<String, Seeded> = seeded
        .into_iter()
        .filter(|(_, o)| !o.metadata.is_empty())
        .collect();
    assert_matches_seed(&parse_records(&plain), &with_meta);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scan_of_a_prefix_stays_inside_it() {
    let s3 = versitygw();
    let bucket = s3.bucket("prefix").await;
    let seeded = nested_keyspace();
    s3.seed(&bucket, &seeded).await;
    let run = s3.worker(&["scan", "--bucket", &bucket, "--prefix", "region-1/"]);
    assert_success(&run);
    let inside: BTreeMap<String, Seeded> = seeded
        .into_iter()
        .filter(|(k, _)| k.starts_with("region-1/"))
        .collect();
    assert_matches_seed(&parse_records(&run.stdout), &inside);
}

/// Keys that trip up listings and URL handling, with metadata that trips up
/// headers.
fn odd_keyspace() -> BTreeMap<String, Seeded> {
    let long_key = format!("long/{}", "k".repeat(1024 - 5));
    let unicode_long = format!("ü/{}", "é".repeat((1024 - 3) / 2));
    let mut keys = vec![
        "with space".to_string(),
        "plus+sign".into(),
        "percent%20literal".into(),
        "hash#tag".into(),
        "question?mark".into(),
        "amp&equals=".into(),
        "a//double//slash".into(),
        "/leading-slash".into(),
        "trailing-slash/".into(),
        "ctl-\u{1}-\u{1f}-\u{7f}".into(),
        // No "\n": moto's router (Werkzeug) answers 404 to a path holding
        // %0A. JSON escaping of newlines is covered by the record unit tests.
        "tab\there".into(),
        "quote\"and'apostrophe".into(),
        "backslash\\".into(),
        "ünïcödé/日本語/emoji-💥".into(),
        "a".into(),
        "a/b".into(),
        "a/b/c".into(),
        long_key,
        unicode_long,
    ];
    for k in &keys {
        assert!(k.len() <= 1024, "{k:?}");
    }
    keys.sort();
    keys.into_iter()
        .enumerate()
        .map(|(i, k)| {
            let metadata = meta(&[
                ("Mixed-Case-Name", "value"),
                ("UTF8-Value", "Grüße, 世界 ✓"),
                ("n", &i.to_string()),
            ]);
            (k, Seeded { size: i, metadata })
        })
        .collect()
}

/// Seed the odd keys on `s3`, check that it refuses exactly the keys
/// `refuses` says (its documented limits, docs/testing.md), and scan the rest
/// exactly.
async fn odd_keys_round_trip_on(
    s3: &Server,
    mut seeded: BTreeMap<String, Seeded>,
    refuses: fn(&str) -> bool,
) {
    let bucket = s3.bucket("odd").await;
    let rejected = s3.try_seed(&bucket, &seeded).await;
    let expected: Vec<&String> = seeded.keys().filter(|k| refuses(k)).collect();
    assert_eq!(
        rejected.keys().collect::<Vec<_>>(),
        expected,
        "the server refused other keys than documented: {rejected:?}"
    );
    seeded.retain(|k, _| !rejected.contains_key(k));
    scan_with_both_head_paths(s3, &bucket, "4", &seeded);
    assert_fast_list_matches_sdk(s3, &bucket, 3, &["", "a", "ü"]).await;
}

/// moto stores every odd key faithfully.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn odd_keys_and_metadata_round_trip() {
    odd_keys_round_trip_on(&moto(), odd_keyspace(), |_| false).await;
}

/// MinIO verifies signatures and holds most odd keys; what it refuses is its
/// own rule, listed in docs/testing.md.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn odd_keys_and_metadata_round_trip_on_minio() {
    // Two more of its rules make keys other than asked, so they are not
    // seeded there: it stores `/x` as `x`, and it cannot hold both `a` and
    // `a/b` (an object and a "directory" of one name).
    let mut seeded = odd_keyspace();
    let keys: Vec<String> = seeded.keys().cloned().collect();
    seeded.retain(|k, _| !k.starts_with('/') && !keys.iter().any(|o| o.starts_with(&format!("{k}/"))));
    odd_keys_round_trip_on(&minio(), seeded, minio_refuses).await;
}

/// MinIO stores an object as a directory path: it answers
/// XMinioInvalidObjectName to a key with an empty path segment (`//`) or a
/// segment longer than 255 bytes (a file name's limit).
fn minio_refuses(key: &str) -> bool {
    key.contains("//") || key.split('/').any(|segment| segment.len() > 255)
}

/// Prefixes holding `\t`, `\u{1}` and `\u{7f}` with more than two pages of
/// keys each: the planner and the engine must follow the listing through the
/// empty pages that the client-side StartAfter filter leaves (with and
/// without a delimiter, as one shard and as many).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_character_prefixes_of_several_pages_are_scanned_whole() {
    let s3 = moto();
    let bucket = s3.bucket("ctl-pages").await;
    let seeded = control_character_keyspace();
    s3.seed(&bucket, &seeded).await;
    for (shards, delimiter) in [("1", "/"), ("16", "/"), ("16", "")] {
        let run = s3.worker(&[
            "scan",
            "--bucket",
            &bucket,
            "--target-shards",
            shards,
            "--delimiter",
            delimiter,
        ]);
        assert_success(&run);
        assert_matches_seed(&parse_records(&run.stdout), &seeded);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn empty_bucket_gives_empty_output() {
    let s3 = moto();
    let bucket = s3.bucket("empty").await;
    let run = s3.worker(&["scan", "--bucket", &bucket]);
    assert_success(&run);
    assert!(run.stdout.is_empty());
    assert!(stderr(&run).contains("scanned 0 objects"), "{}", stderr(&run));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_bucket_is_one_clear_line() {
    let s3 = moto();
    let run = s3.worker(&["scan", "--bucket", "no-such-bucket-here"]);
    assert!(!run.status.success());
    let err = stderr(&run);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(
        err.starts_with("error:") && err.contains("no-such-bucket-here") && err.contains("does not exist"),
        "{err}"
    );
}

/// The fast HEAD path signs its own requests: prove it against a server that
/// verifies SigV4, and that bad credentials give one clear line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signed_fast_path_against_a_verifying_server() {
    let s3 = versitygw();
    let bucket = s3.bucket("signed").await;
    let seeded: BTreeMap<String, Seeded> = (0..1500)
        .map(|i| {
            let key = match i % 4 {
                0 => format!("plain/{i}"),
                1 => format!("with space/and+plus {i}"),
                2 => format!("ünïcödé/日本/{i}"),
                _ => format!("sym=&bols/{i}"),
            };
            let metadata = if i % 2 == 0 {
                meta(&[("Color", "Blau"), ("Idx", &i.to_string())])
            } else {
                BTreeMap::new()
            };
            (
                key,
                Seeded {
                    size: i % 7,
                    metadata,
                },
            )
        })
        .collect();
    s3.seed(&bucket, &seeded).await;
    scan_with_both_head_paths(&s3, &bucket, "8", &seeded);
    assert_fast_list_matches_sdk(&s3, &bucket, 400, &["", "with space/"]).await;

    let run = s3.worker_with_secret(&["scan", "--bucket", &bucket], "not-the-secret");
    assert!(!run.status.success());
    let err = stderr(&run);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("access denied") && err.contains(&bucket), "{err}");
    assert!(
        !err.contains("not-the-secret"),
        "secrets never appear in errors: {err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn output_to_s3_is_one_object() {
    let s3 = versitygw();
    let bucket = s3.bucket("src").await;
    let out_bucket = s3.bucket("out").await;
    let seeded = nested_keyspace();
    s3.seed(&bucket, &seeded).await;
    let dest = format!("s3://{out_bucket}/results/scan.jsonl.gz");
    let run = s3.worker(&["scan", "--bucket", &bucket, "--gzip", "-o", &dest]);
    assert_success(&run);
    let body = s3.read(&out_bucket, "results/scan.jsonl.gz").await;
    let mut plain = Vec::new();
    std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&body[..]), &mut plain).unwrap();
    assert_matches_seed(&parse_records(&plain), &seeded);
}

/// The keyspace of the filter flags' tests (moto: it keeps storage classes).
async fn seed_for_filter_flags(s3: &Server, bucket: &str) {
    let client = s3.client();
    let mut objects: Vec<(String, usize, Option<&str>)> = (0..10)
        .map(|i| (format!("logs/2026/a-{i}.csv"), i, None))
        .collect();
    objects.extend([
        ("logs/2026/b.json".to_string(), 5, None),
        ("logs/tmp/c.csv".to_string(), 5, None),
        ("logs/2026/ia.csv".to_string(), 5, Some("STANDARD_IA")),
        ("other/d.csv".to_string(), 5, None),
    ]);
    for (key, size, class) in objects {
        let mut put = client
            .put_object()
            .bucket(bucket)
            .key(&key)
            .body(vec![b'x'; size].into());
        if let Some(class) = class {
            put = put.storage_class(class.into());
        }
        put.send().await.unwrap_or_else(|e| panic!("put {key}: {e:?}"));
    }
}

fn keys_of(out: &std::process::Output) -> Vec<String> {
    parse_records(&out.stdout).into_keys().collect()
}

/// Each filter flag of `scan`, alone and together: only what they keep is
/// in the result, and the summary counts what they left out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scan_filter_flags_keep_only_what_they_match() {
    let s3 = moto();
    let bucket = s3.bucket("filter-flags").await;
    seed_for_filter_flags(&s3, &bucket).await;
    let scan = |extra: &[&str]| {
        let out = s3.worker(&[&["scan", "--bucket", &bucket, "--quiet"][..], extra].concat());
        assert_success(&out);
        out
    };
    let all = scan(&[
        "--prefix",
        "logs/",
        "--include",
        "logs/**/*.csv",
        "--exclude",
        "logs/tmp/**",
        "--min-size",
        "2",
        "--max-size",
        "8",
        "--storage-class",
        "STANDARD",
        "--modified-after",
        "2000-01-01",
        "--modified-before",
        "2100-01-01T00:00:00Z",
    ]);
    let want: Vec<String> = (2..=8).map(|i| format!("logs/2026/a-{i}.csv")).collect();
    assert_eq!(keys_of(&all), want);
    // a-0, a-1, a-9, b.json, tmp/c.csv and ia.csv; other/ is not listed.
    assert!(
        stderr(&all).contains("6 left out by the filter"),
        "{}",
        stderr(&all)
    );

    let cases: [(&[&str], &[&str]); 7] = [
        (&["--modified-before", "2000-01-01"], &[]),
        (&["--modified-after", "2100-01-01"], &[]),
        (&["--min-size", "9"], &["logs/2026/a-9.csv"]),
        (&["--max-size", "0"], &["logs/2026/a-0.csv"]),
        (&["--storage-class", "standard_ia"], &["logs/2026/ia.csv"]),
        (
            &["--include", "*/*.csv", "--include", "logs/*/b.*"],
            &["logs/2026/b.json", "other/d.csv"],
        ),
        (
            &["--exclude", "logs/2026/**", "--exclude", "**/d.csv"],
            &["logs/tmp/c.csv"],
        ),
    ];
    for (flags, want) in cases {
        assert_eq!(keys_of(&scan(flags)), want, "{flags:?}");
    }
}

/// A dataset's manifest records the filter and what it left out; include
/// globs that share a start make the listing start there (nothing before
/// it is listed, so nothing is left out).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_filtered_dataset_records_its_filter_in_the_manifest() {
    let s3 = moto();
    let bucket = s3.bucket("filter-manifest").await;
    seed_for_filter_flags(&s3, &bucket).await;
    let dir = temp_path("filter-manifest");
    let _ = std::fs::remove_dir_all(&dir);
    let run = |extra: &[&str]| {
        let args = [
            &["scan", "--bucket", &bucket, "--quiet", "--layout", "dataset"][..],
            &["-o", dir.to_str().unwrap()],
            extra,
        ]
        .concat();
        let out = s3.worker(&args);
        assert_success(&out);
        serde_json::from_slice::<serde_json::Value>(&std::fs::read(dir.join("manifest.json")).unwrap())
            .unwrap()
    };
    let manifest = run(&["--include", "logs/2026/a-?.csv", "--modified-after", "2026-01-01"]);
    assert_eq!(
        manifest["filter"],
        serde_json::json!({"modified_after": "2026-01-01T00:00:00Z", "include": ["logs/2026/a-?.csv"]})
    );
    assert_eq!(manifest["records"], 10, "{manifest}");
    assert_eq!(
        manifest["counts"]["filtered"], 0,
        "listed from logs/2026/a- on: {manifest}"
    );

    let _ = std::fs::remove_dir_all(&dir);
    let manifest = run(&["--max-size", "4"]);
    assert_eq!(manifest["filter"], serde_json::json!({"max_size": 4}));
    assert_eq!(manifest["records"], 5, "a-0 to a-4: {manifest}");
    assert_eq!(manifest["counts"]["filtered"], 9, "{manifest}");

    let _ = std::fs::remove_dir_all(&dir);
    let manifest = run(&[]);
    assert_eq!(manifest["filter"], serde_json::json!({}), "no filter");
    assert_eq!(manifest["counts"]["filtered"], 0);
}
