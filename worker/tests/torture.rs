//! The fault-schedule simulator. Each run draws everything from one seed:
//! a bucket (flat, deep and skewed prefixes, odd characters, prefixes of
//! exactly a page of keys and one more, objects with and without metadata),
//! a fleet (`plan`, W workers with several shards in flight, `merge`: the
//! library code the operator's Jobs and pods run, here as tasks of this
//! process, so that a killed worker is a task dropped between any two
//! awaits) and a schedule of faults over a real redis-server and versitygw
//! behind a fault proxy:
//!
//! - workers killed at any step and started again;
//! - Redis killed and restarted from its AOF (`appendfsync everysec`: the
//!   last second of writes may be lost), and Redis put back to a snapshot
//!   taken earlier (a failover to a lagging replica), at any moment,
//!   during the merge too;
//! - the planner and the merge killed at a random moment and run again (as
//!   their Jobs are);
//! - Redis out of memory for a while (`maxmemory` lowered: writes refused);
//! - S3 throttle storms longer than a request's retries, bursts of 500s
//!   past the retries on one key, a 404 for a listed key (a listing ahead
//!   of its objects), a 403 for one object, one node answering an object's
//!   HEAD with 400 and another region's name, connections reset;
//! - listings that misbehave: a key repeated at the start of the next page,
//!   a continuation token repeated (the same page again), two keys out of
//!   order;
//! - the bucket changing: objects created, deleted, their metadata replaced.
//!
//! The invariant, checked after every run (`check`): either the scan is
//! complete and its result holds every key that existed for the whole scan
//! exactly once, in key order, with the metadata a HEAD gives, keys created
//! or deleted during the scan at most once, and no `error` record but for
//! an object-specific answer; or it is not complete, with the reason. No run
//! may outlast its bound (a hang). A failing seed prints the command that
//! runs it again.
//!
//! What a seed does not fix: how tasks interleave (they race as a real
//! fleet's processes do), so a replay runs the same bucket and schedule and
//! usually, not always, the same interleaving. Faults this harness does not
//! inject (their own tests cover them): the client's clock stepped (one
//! process here: `s3_faults.rs` runs the worker under libfaketime, and
//! `core/src/s3/clock.rs`), a bucket whose region changes (versitygw has one
//! region: `s3_faults.rs`), requests that time out (30 s each: `s3_faults.rs`).
//!
//! Incremental seeds (`run_incremental_seed`, on MinIO): the seed's bucket
//! scanned once (the baseline), changed in every way an object can change,
//! then scanned again incrementally under a schedule of the same kinds; the
//! invariant adds that records taken from the baseline are still the
//! objects' (ETag, LastModified) and that the change set is exactly the
//! changes made, for keys neither schedule touched.
//!
//! `just test` runs [`FIXED_SEEDS`] and checks that they inject every kind
//! of fault, and [`INCREMENTAL_SEEDS`]; `just torture N` runs N seeds from
//! a random start (`BUCKETSCAN_TORTURE_INCREMENTAL=1`: incremental seeds)
//! and prints seeds run, faults by kind and violations.

mod common;
#[path = "common/fault_proxy.rs"]
mod fault_proxy;
#[path = "../../core/tests/support/snapshot.rs"]
mod snapshot;

use bucketscan_core::fleet::merge::{merge, Manifest, MergeError};
use bucketscan_core::fleet::plan::plan_scan;
use bucketscan_core::fleet::queue::{Queue, RedisConfig};
use bucketscan_core::fleet::run::{RunOptions, Runner};
use bucketscan_core::fleet::spec::ScanSpec;
use bucketscan_core::keyspace::planner::PlanOptions;
use bucketscan_core::s3::head::{HeadClient, HeadClientKind};
use bucketscan_core::scan::dataset::DataFile;
use bucketscan_core::scan::engine::{Engine, EngineOptions};
use bucketscan_core::scan::format::Layout;
use bucketscan_core::scan::record::{ChangeKind, Record, Status};
use common::*;
use futures::StreamExt;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// Seeds `just test` runs: together they inject every kind of fault (the
/// test checks it). 32: since a result with error records keeps its parts
/// for a retry, the merges of the others end before their kill and delete
/// nothing (no reset of a delete); 32 kills a merge and resets a connection.
const FIXED_SEEDS: [u64; 8] = [2, 3, 5, 6, 9, 10, 12, 32];

/// How long one run may take before it counts as a hang.
const RUN_BOUND: Duration = Duration::from_secs(240);

/// The kinds of fault, as counted.
const KINDS: [&str; 18] = [
    "worker killed",
    "planner killed",
    "merge killed",
    "redis out of memory",
    "connection reset",
    "a node naming another region",
    "key repeated in a listing",
    "continuation token repeated",
    "listing out of order",
    "redis restarted (aof everysec)",
    "redis rolled back",
    "rolled back during the merge",
    "throttle storm",
    "500s past the retries",
    "404 for a listed key",
    "403 for an object",
    "object created",
    "object deleted or replaced",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fixed_seeds_keep_the_invariant() {
    let mut faults = BTreeMap::new();
    let mut violations = vec![];
    for seed in FIXED_SEEDS {
        let run = run_seed(seed).await;
        for (kind, n) in &run.faults {
            *faults.entry(*kind).or_insert(0) += n;
        }
        violations.extend(
            run.violation
                .map(|v| format!("seed {seed}: {v}\n  replay: {}", replay(seed))),
        );
    }
    assert!(violations.is_empty(), "{}", violations.join("\n"));
    let missing: Vec<&str> = KINDS
        .iter()
        .filter(|k| !faults.contains_key(*k))
        .copied()
        .collect();
    assert!(
        missing.is_empty(),
        "the fixed seeds no longer inject {missing:?}: {faults:?}"
    );
}

/// Seeds `just test` runs incrementally (`run_incremental_seed`).
const INCREMENTAL_SEEDS: [u64; 3] = [2, 3, 5];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn incremental_seeds_keep_the_invariant() {
    let mut violations = vec![];
    let (mut checked, mut reused) = (0, 0);
    for seed in INCREMENTAL_SEEDS {
        let run = run_incremental_seed(seed).await;
        checked += run.changes_checked;
        reused += run.reused;
        if let Some(reason) = &run.failed {
            eprintln!("seed {seed}: not complete: {reason}");
        }
        violations.extend(
            run.violation
                .map(|v| format!("seed {seed}: {v}\n  replay: {}", replay_incremental(seed))),
        );
    }
    assert!(violations.is_empty(), "{}", violations.join("\n"));
    // A seed whose scans both completed checked its change set: at least
    // one must, or the test checked nothing.
    assert!(checked > 0, "no incremental seed completed both scans");
    // And records were taken from a baseline: the path the seeds are for.
    assert!(reused > 0, "no incremental scan took a record from its baseline");
}

fn replay_incremental(seed: u64) -> String {
    format!("BUCKETSCAN_TORTURE_INCREMENTAL=1 {}", replay(seed))
}

/// `just torture N`: N seeds from `BUCKETSCAN_TORTURE_FIRST` (default: a
/// random start), or the one seed `BUCKETSCAN_TORTURE_SEED`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run by `just torture N`"]
async fn torture() {
    let env = |name: &str| std::env::var(name).ok().and_then(|v| v.parse::<u64>().ok());
    let (first, count) = match env("BUCKETSCAN_TORTURE_SEED") {
        Some(seed) => (seed, 1),
        None => (
            env("BUCKETSCAN_TORTURE_FIRST").unwrap_or_else(|| rand::rng().random_range(1_000..1_000_000_000)),
            env("BUCKETSCAN_TORTURE_SEEDS").unwrap_or(20),
        ),
    };
    // BUCKETSCAN_TORTURE_INCREMENTAL=1: each seed a baseline scan, the
    // bucket changed, and an incremental scan (`run_incremental_seed`).
    let incremental = env("BUCKETSCAN_TORTURE_INCREMENTAL") == Some(1);
    let mut faults: BTreeMap<&str, u64> = BTreeMap::new();
    let mut violations = vec![];
    let mut failed = vec![];
    for seed in first..first + count {
        let started = Instant::now();
        let run = match incremental {
            true => run_incremental_seed(seed).await,
            false => run_seed(seed).await,
        };
        for (kind, n) in &run.faults {
            *faults.entry(*kind).or_insert(0) += n;
        }
        let verdict = match (&run.violation, &run.failed) {
            (Some(v), _) => format!("VIOLATION {v}"),
            (None, Some(reason)) => format!("not complete: {reason}"),
            (None, None) => "complete, exact".to_string(),
        };
        let kinds: Vec<String> = run.faults.iter().map(|(k, n)| format!("{k} x{n}")).collect();
        eprintln!(
            "seed {seed}: {verdict} ({:.0} s; {})",
            started.elapsed().as_secs_f64(),
            kinds.join(", ")
        );
        if let Some(v) = run.violation {
            let again = if incremental {
                replay_incremental(seed)
            } else {
                replay(seed)
            };
            violations.push(format!("seed {seed}: {v}\n  replay: {again}"));
        }
        if let Some(reason) = run.failed {
            failed.push(format!("seed {seed}: {reason}"));
        }
    }
    eprintln!("\nseeds run: {count} (from {first})");
    eprintln!("faults injected by kind:");
    for kind in KINDS {
        eprintln!("  {kind}: {}", faults.get(kind).copied().unwrap_or(0));
    }
    eprintln!("not complete, with a reason: {}", failed.len());
    for f in &failed {
        eprintln!("  {f}");
    }
    eprintln!("violations: {}", violations.len());
    assert!(violations.is_empty(), "{}", violations.join("\n"));
}

fn replay(seed: u64) -> String {
    format!("BUCKETSCAN_TORTURE_SEED={seed} just torture")
}

/// What one seed did.
#[derive(Default)]
struct Run {
    faults: BTreeMap<&'static str, u64>,
    /// The scan ended not complete, and why (allowed by the invariant).
    failed: Option<String>,
    violation: Option<String>,
    /// Incremental seeds: change sets checked (both scans complete), and
    /// records the incremental scan took from its baseline.
    changes_checked: u64,
    reused: u64,
}

/// The proxy's share of the schedule: what it answers instead of versitygw.
#[derive(Default)]
struct ProxyFaults {
    storm_until: Option<Instant>,
    /// Key → HEADs still to answer 500.
    failing: BTreeMap<String, u32>,
    /// Keys whose next HEAD answers 404 (once), and all that were drawn so.
    lagging: BTreeSet<String>,
    lagged: BTreeSet<String>,
    /// Keys whose HEAD always answers 403.
    denied: BTreeSet<String>,
    /// Keys whose HEAD always answers 400 naming another region, bodiless
    /// (one node that believes the bucket lives elsewhere).
    misdirected: BTreeSet<String>,
    /// Until then, every third request's connection is reset.
    resets_until: Option<Instant>,
    requests: u64,
    /// LIST answers seen, and the anomaly to make of the answer with that
    /// number (or of the next one it applies to).
    lists: u64,
    list_faults: BTreeMap<u64, ListFault>,
    /// Per listing (its query without the token): the last page's next
    /// token and last `<Contents>` element, as sent.
    last_page: BTreeMap<String, (String, String)>,
    served: BTreeMap<&'static str, u64>,
}

/// What a listing does wrong, once.
#[derive(Clone, Copy, Debug)]
enum ListFault {
    /// The previous page's last key again, first in the next page.
    RepeatKey,
    /// The next token is the one the page was asked with: the same page
    /// comes again.
    RepeatToken,
    /// Two keys of a page swapped.
    OutOfOrder,
}

impl ProxyFaults {
    fn answer(
        &mut self,
        req: &http::request::Parts,
    ) -> Option<http::Response<http_body_util::Full<bytes::Bytes>>> {
        if self.storm_until.is_some_and(|until| Instant::now() < until) {
            return Some(fault_proxy::slow_down());
        }
        self.requests += 1;
        if self.resets_until.is_some_and(|until| Instant::now() < until) && self.requests.is_multiple_of(3) {
            *self.served.entry("connection reset").or_insert(0) += 1;
            return Some(fault_proxy::reset());
        }
        if req.method != "HEAD" {
            return None;
        }
        let key = fault_proxy::object_key(req)?;
        if self.denied.contains(&key) {
            *self.served.entry("403 for an object").or_insert(0) += 1;
            return Some(fault_proxy::answer(403, &[], ""));
        }
        if self.misdirected.contains(&key) {
            *self.served.entry("a node naming another region").or_insert(0) += 1;
            return Some(fault_proxy::answer(
                400,
                &[("x-amz-bucket-region", "eu-west-1")],
                "",
            ));
        }
        if self.lagging.remove(&key) {
            *self.served.entry("404 for a listed key").or_insert(0) += 1;
            return Some(fault_proxy::answer(404, &[], ""));
        }
        let left = self.failing.get_mut(&key)?;
        if *left == 0 {
            return None;
        }
        *left -= 1;
        *self.served.entry("500s past the retries").or_insert(0) += 1;
        Some(fault_proxy::error_document(500, "InternalError", "emulated", &[]))
    }

    /// Make a LIST answer misbehave, when one is due.
    fn rewrite(&mut self, req: &http::request::Parts, status: http::StatusCode, body: &mut bytes::Bytes) {
        let query = req.uri.query().unwrap_or_default();
        if req.method != "GET" || status != 200 || !query.contains("list-type=2") {
            return;
        }
        let Ok(xml) = std::str::from_utf8(body) else {
            return;
        };
        let mut xml = xml.to_string();
        let mut token = None;
        let mut rest = vec![];
        for pair in query.split('&') {
            match pair.strip_prefix("continuation-token=") {
                Some(t) => {
                    token = Some(
                        percent_encoding::percent_decode_str(t)
                            .decode_utf8_lossy()
                            .into_owned(),
                    )
                }
                None => rest.push(pair),
            }
        }
        let listing = rest.join("&");
        let asked_with = token.as_deref().map(xml_escape);
        let n = self.lists;
        self.lists += 1;
        if let Some(fault) = self.list_faults.remove(&n) {
            let done = match fault {
                ListFault::RepeatKey => {
                    let previous = self.last_page.get(&listing);
                    match (previous, asked_with.as_deref(), xml.find("<Contents>")) {
                        (Some((next, contents)), Some(asked), Some(at)) if next == asked => {
                            xml.insert_str(at, contents);
                            Some("key repeated in a listing")
                        }
                        _ => None,
                    }
                }
                ListFault::RepeatToken => {
                    match (asked_with.as_deref(), element(&xml, "NextContinuationToken")) {
                        (Some(asked), Some(next)) => {
                            xml = xml.replacen(
                                &format!("<NextContinuationToken>{next}</NextContinuationToken>"),
                                &format!("<NextContinuationToken>{asked}</NextContinuationToken>"),
                                1,
                            );
                            Some("continuation token repeated")
                        }
                        _ => None,
                    }
                }
                ListFault::OutOfOrder => {
                    let contents = contents_of(&xml);
                    let adjacent = contents.len() >= 2 && {
                        let at = xml.find(contents[0]).unwrap() + contents[0].len();
                        xml[at..].starts_with(contents[1])
                    };
                    if adjacent {
                        let (a, b) = (contents[0].to_string(), contents[1].to_string());
                        let at = xml.find(&a).unwrap();
                        xml.replace_range(at..at + a.len() + b.len(), &format!("{b}{a}"));
                        Some("listing out of order")
                    } else {
                        None
                    }
                }
            };
            match done {
                Some(kind) => *self.served.entry(kind).or_insert(0) += 1,
                // Not applicable to this page: the next LIST answer.
                None => {
                    self.list_faults.entry(n + 1).or_insert(fault);
                }
            }
        }
        if let (Some(next), Some(last)) = (element(&xml, "NextContinuationToken"), contents_of(&xml).last()) {
            self.last_page
                .insert(listing, (next.to_string(), last.to_string()));
        }
        *body = bytes::Bytes::from(xml);
    }
}

/// The text of the first `<name>` element.
fn element<'a>(xml: &'a str, name: &str) -> Option<&'a str> {
    let open = format!("<{name}>");
    let start = xml.find(&open)? + open.len();
    let end = start + xml[start..].find(&format!("</{name}>"))?;
    Some(&xml[start..end])
}

/// Every `<Contents>...</Contents>` element, adjacent ones as they are sent.
fn contents_of(xml: &str) -> Vec<&str> {
    let mut out = vec![];
    let mut from = 0;
    while let Some(start) = xml[from..].find("<Contents>").map(|s| s + from) {
        let Some(end) = xml[start..]
            .find("</Contents>")
            .map(|e| start + e + "</Contents>".len())
        else {
            break;
        };
        out.push(&xml[start..end]);
        from = end;
    }
    out
}

fn xml_escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&apos;")
}

/// What the schedule does at a moment of the run.
#[derive(Clone, Debug)]
enum Event {
    KillWorker(usize),
    RestartRedis {
        down_ms: u64,
    },
    Snapshot,
    Rollback,
    /// A rollback this long after the merge starts (to the snapshot).
    RollbackDuringMerge {
        delay_ms: u64,
    },
    Storm {
        ms: u64,
    },
    /// Every third request's connection reset, for this long.
    Resets {
        ms: u64,
    },
    /// Redis refuses writes (out of memory) until `OomEnds`.
    Oom,
    OomEnds,
    Create(String, Seeded),
    Delete(String),
    Replace(String, Seeded),
    /// Metadata replaced in place: ETag and size kept (incremental seeds:
    /// the change only LastModified shows, at any moment of the scan, as
    /// in the second of a HEAD of it).
    ReplaceMetadata(String),
}

/// Put the drawn bucket. versitygw's posix backend now and then refuses a
/// put among many at once (`ExistingObjectIsDirectory` for a plain key):
/// those are put again one by one, and a key refused again is not part of
/// this seed's bucket (the run goes on rather than ending every later seed).
async fn seed_tolerantly(
    server: &Server,
    bucket: &str,
    mut seeded: BTreeMap<String, Seeded>,
) -> BTreeMap<String, Seeded> {
    let refused = server.try_seed(bucket, &seeded).await;
    for key in refused.keys() {
        let one = BTreeMap::from([(key.clone(), seeded[key].clone())]);
        if !server.try_seed(bucket, &one).await.is_empty() {
            eprintln!("versitygw refused {key:?} twice: left out of this seed's bucket");
            seeded.remove(key);
        }
    }
    seeded
}

/// The bucket a seed draws.
fn draw_bucket(rng: &mut StdRng, page: usize) -> BTreeMap<String, Seeded> {
    const ODD: [&str; 10] = ["a", "b-", "_c", "d.e", "f g", "h+i", "j=k", "é", "日本", "~z"];
    let mut keys = BTreeMap::new();
    let mut object = |rng: &mut StdRng, key: String| {
        let metadata = if rng.random_bool(0.4) {
            (0..rng.random_range(1..=3))
                .map(|m| {
                    (
                        format!("m{m}"),
                        format!("v{}-{}", rng.random_range(0..1000), ODD[m % 7]),
                    )
                })
                .collect()
        } else {
            BTreeMap::new()
        };
        let seeded = Seeded {
            size: rng.random_range(0..64),
            metadata,
        };
        keys.insert(key, seeded);
    };
    // Files are `f…`, directories `d…/`: versitygw keeps objects as files,
    // and a key cannot also be a directory of other keys.
    let flat = rng.random_range(0..80);
    for i in 0..flat {
        let name = format!("f{i:03}{}", ODD[i % ODD.len()]);
        object(rng, name);
    }
    for d in 0..rng.random_range(1..5) {
        for i in 0..rng.random_range(0..60) {
            let name = format!("d{d}/d{}/f{i:03}{}", i % 3, ODD[(i + d) % ODD.len()]);
            object(rng, name);
        }
    }
    // Skew: one prefix holds most keys.
    let hot = rng.random_range(50..400);
    for i in 0..hot {
        let name = format!("dhot/f{i:04}");
        object(rng, name);
    }
    // A page of keys exactly, and one more.
    for (dir, extra) in [("dpage", 0), ("dpage1", 1)] {
        for i in 0..page + extra {
            let name = format!("{dir}/f{i:04}");
            object(rng, name);
        }
    }
    keys
}

/// A seed's drawn and seeded bucket on `server` and its output bucket
/// (`Ground::new` also gives the seed's generator, ready for the schedule's
/// draws: rand's generators cannot be cloned).
struct Ground {
    seed: u64,
    page: usize,
    server: Server,
    bucket: String,
    output: String,
    seeded: BTreeMap<String, Seeded>,
}

impl Ground {
    async fn new(seed: u64, server: Server, tag: &str) -> (Ground, StdRng) {
        let mut rng = StdRng::seed_from_u64(seed);
        let page = *[7usize, 50, 1000].get(rng.random_range(0..3)).unwrap();
        let seeded = draw_bucket(&mut rng, page.min(60));
        let bucket = server.bucket(&format!("{tag}{seed}")).await;
        let output = server.bucket(&format!("{tag}{seed}-out")).await;
        let seeded = seed_tolerantly(&server, &bucket, seeded).await;
        let ground = Ground {
            seed,
            page,
            server,
            bucket,
            output,
            seeded,
        };
        (ground, rng)
    }

    fn world(&self) -> SeedWorld<'_> {
        SeedWorld {
            seed: self.seed,
            page: self.page,
            server: &self.server,
            bucket: &self.bucket,
            output: &self.output,
        }
    }
}

async fn run_seed(seed: u64) -> Run {
    let (ground, mut rng) = Ground::new(seed, versitygw(), "t").await;
    let how = How {
        scan: format!("t{seed}"),
        output_prefix: "r/".into(),
        layout: Layout::Single,
        baseline: None,
        replace_metadata: false,
    };
    one_scan(&mut rng, &ground.world(), &ground.seeded, &how)
        .await
        .run
}

/// Incremental seeds: a first scan of the seed's bucket (dataset layout)
/// is the baseline; then the bucket changes in every way an object can
/// (created, deleted, content rewritten, metadata replaced in place), and a
/// second scan, incremental against the first, runs under a schedule of the
/// same kinds of fault (the bucket changing during it too). On MinIO, which
/// moves LastModified on a metadata replace, so unchanged records are
/// taken from the baseline (versitygw keeps it, and every object would be
/// HEADed). Most seeds let the objects age past the baseline's start by
/// more than `SAFETY_SECS` before the first scan, the others do not (then
/// the rule that HEADs them anyway is what keeps the result exact).
///
/// The invariant of the second scan: `check` (its result against the bucket
/// as it was when it started, for keys the schedule left alone), ETag and
/// LastModified too (`check_fresh`: a record taken from the baseline must
/// still be the object's), and the change set exactly the changes made
/// between the two scans, for keys neither schedule touched nor a fault
/// made unreadable (`check_changes`).
async fn run_incremental_seed(seed: u64) -> Run {
    let (ground, mut rng) = Ground::new(seed, minio(), "ti").await;
    let (server, bucket, output, seeded) = (&ground.server, &ground.bucket, &ground.output, &ground.seeded);
    if rng.random_bool(0.7) {
        tokio::time::sleep(Duration::from_millis(3_100)).await;
    }
    let world = ground.world();
    let how = |n: u32, baseline: Option<String>| How {
        scan: format!("ti{seed}-{n}"),
        output_prefix: format!("r{n}/"),
        layout: Layout::Dataset,
        baseline,
        replace_metadata: true,
    };
    let first = one_scan(&mut rng, &world, seeded, &how(1, None)).await;
    let mut run = first.run;
    if run.violation.is_some() || run.failed.is_some() {
        run.violation = run.violation.map(|v| format!("the baseline scan: {v}"));
        run.failed = run.failed.map(|f| format!("the baseline scan: {f}"));
        return run;
    }
    // The bucket as the first scan's schedule left it, changed, and as it
    // is then: what the second scan starts from.
    let before = bucket_state(server, bucket).await;
    change_between(&mut rng, server, bucket, &before).await;
    let after = bucket_state(server, bucket).await;
    let now: BTreeMap<String, Seeded> = after.iter().map(|(k, t)| (k.clone(), t.seeded.clone())).collect();
    let baseline = format!("s3://{output}/r1/manifest.json");
    let second = one_scan(&mut rng, &world, &now, &how(2, Some(baseline))).await;
    for (kind, n) in second.run.faults {
        *run.faults.entry(kind).or_insert(0) += n;
    }
    run.failed = second.run.failed.map(|f| format!("the incremental scan: {f}"));
    run.violation = second.run.violation.map(|v| format!("the incremental scan: {v}"));
    if let (None, Some(manifest)) = (&run.violation, &second.manifest) {
        let unreadable: BTreeSet<&String> = [&first.refused, &second.refused]
            .into_iter()
            .flat_map(|r| r.keys())
            .chain(first.lagged.iter().chain(&second.lagged))
            .collect();
        let untouched =
            |k: &String| !first.changed.contains(k) && !second.changed.contains(k) && !unreadable.contains(k);
        let result = files_bytes(server, &manifest.files).await;
        let verdict = match check_fresh(&result, &after, &untouched) {
            Ok(()) => check_changes(server, manifest, &before, &after, &untouched).await,
            Err(v) => Err(v),
        };
        run.reused += manifest.incremental.as_ref().map_or(0, |i| i.counts.reused);
        match verdict {
            Ok(()) => run.changes_checked += 1,
            Err(v) => run.violation = Some(format!("the incremental scan: {v}")),
        }
    }
    run
}

/// One object as a HEAD gives it.
#[derive(Clone, Debug)]
struct Truth {
    seeded: Seeded,
    etag: Option<String>,
    /// Unix seconds.
    last_modified: Option<i64>,
}

/// Every object of `bucket` now, read from the server itself (not through
/// the fault proxy): LIST, then a HEAD of each.
async fn bucket_state(server: &Server, bucket: &str) -> BTreeMap<String, Truth> {
    let client = server.client();
    let mut keys = vec![];
    let mut token = None;
    loop {
        let page = client
            .list_objects_v2()
            .bucket(bucket)
            .set_continuation_token(token)
            .send()
            .await
            .expect("list the bucket");
        keys.extend(page.contents().iter().filter_map(|o| o.key().map(str::to_string)));
        match page.next_continuation_token() {
            Some(t) => token = Some(t.to_string()),
            None => break,
        }
    }
    futures::stream::iter(keys)
        .map(|key| {
            let client = client.clone();
            async move {
                let head = client
                    .head_object()
                    .bucket(bucket)
                    .key(&key)
                    .send()
                    .await
                    .unwrap_or_else(|e| panic!("HEAD {key:?}: {e:?}"));
                let truth = Truth {
                    seeded: Seeded {
                        size: head.content_length().unwrap_or(0) as usize,
                        metadata: head.metadata().cloned().unwrap_or_default().into_iter().collect(),
                    },
                    etag: head.e_tag().map(|e| e.trim_matches('"').to_string()),
                    last_modified: head.last_modified().map(|t| t.secs()),
                };
                (key, truth)
            }
        })
        .buffer_unordered(16)
        .collect()
        .await
}

/// Change the bucket between the two scans: objects created (keys between
/// existing ones), deleted, rewritten (another size) and their metadata
/// replaced in place (CopyObject onto itself, `REPLACE`).
async fn change_between(rng: &mut StdRng, server: &Server, bucket: &str, before: &BTreeMap<String, Truth>) {
    let keys: Vec<&String> = before.keys().collect();
    let mut picked = BTreeSet::new();
    let mut pick = |rng: &mut StdRng| loop {
        let key = keys[rng.random_range(0..keys.len())].clone();
        if picked.insert(key.clone()) {
            return key;
        }
    };
    let client = server.client();
    let mut created = BTreeMap::new();
    for i in 0..rng.random_range(1..8) {
        let key = format!("{}n{i}", pick(rng));
        let metadata = BTreeMap::from([("fresh".to_string(), i.to_string())]);
        created.insert(key, Seeded { size: 7, metadata });
    }
    server.try_seed(bucket, &created).await;
    for _ in 0..rng.random_range(1..6) {
        server.delete(bucket, &pick(rng)).await;
    }
    let mut rewritten = BTreeMap::new();
    for i in 0..rng.random_range(1..6) {
        let key = pick(rng);
        // Sizes of the drawn bucket are below 64: another size, other content.
        let size = 64 + i;
        rewritten.insert(
            key.clone(),
            Seeded {
                size,
                metadata: before[&key].seeded.metadata.clone(),
            },
        );
    }
    server.try_seed(bucket, &rewritten).await;
    for i in 0..rng.random_range(1..6) {
        let key = pick(rng);
        replace_metadata(&client, bucket, &key, &format!("between-{i}"))
            .await
            .unwrap_or_else(|e| panic!("replace the metadata of {key:?}: {e}"));
    }
}

/// CopyObject of `key` onto itself with new metadata (`MetadataDirective`
/// `REPLACE`): same content, same ETag, a new LastModified.
async fn replace_metadata(
    client: &aws_sdk_s3::Client,
    bucket: &str,
    key: &str,
    value: &str,
) -> Result<(), String> {
    // Every byte but letters and digits encoded (`/` as %2F too).
    let encoded = percent_encoding::utf8_percent_encode(key, percent_encoding::NON_ALPHANUMERIC);
    client
        .copy_object()
        .bucket(bucket)
        .key(key)
        .copy_source(format!("{bucket}/{encoded}"))
        .metadata_directive(aws_sdk_s3::types::MetadataDirective::Replace)
        .metadata("replaced", value)
        .send()
        .await
        .map(|_| ())
        .map_err(|e| format!("{e:?}"))
}

/// Every record of a key the schedules left alone has the ETag and
/// LastModified of the object (a record taken from the baseline must still
/// be the object's, not only of its size and metadata).
fn check_fresh(
    result: &[u8],
    truth: &BTreeMap<String, Truth>,
    untouched: &impl Fn(&String) -> bool,
) -> Result<(), String> {
    for line in result.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
        let record: Record =
            serde_json::from_slice(line).map_err(|e| format!("a result line is no record ({e})"))?;
        let Some(t) = truth.get(&record.key).filter(|_| untouched(&record.key)) else {
            continue;
        };
        let last_modified = record
            .last_modified
            .as_deref()
            .and_then(bucketscan_core::scan::store_check::unix_secs);
        if record.etag != t.etag || last_modified != t.last_modified {
            return Err(format!(
                "{:?}: the object has ETag {:?}, LastModified {:?}; recorded {record:?}",
                record.key, t.etag, t.last_modified
            ));
        }
    }
    Ok(())
}

/// The change set holds exactly the changes made between `before` (the
/// baseline's bucket) and `after`, for the keys `untouched` keeps.
async fn check_changes(
    server: &Server,
    manifest: &Manifest,
    before: &BTreeMap<String, Truth>,
    after: &BTreeMap<String, Truth>,
    untouched: &impl Fn(&String) -> bool,
) -> Result<(), String> {
    let summary = manifest
        .incremental
        .as_ref()
        .ok_or("an incremental scan's manifest has no `incremental`")?;
    let mut found = BTreeMap::new();
    for line in files_bytes(server, &summary.change_files)
        .await
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
    {
        let record: Record =
            serde_json::from_slice(line).map_err(|e| format!("a change line is no record ({e})"))?;
        let change = record
            .change
            .ok_or_else(|| format!("{:?}: a change record without a change", record.key))?;
        if found.insert(record.key.clone(), change).is_some() {
            return Err(format!("{:?} twice in the change set", record.key));
        }
    }
    found.retain(|k, _| untouched(k));
    let mut want = BTreeMap::new();
    for key in before.keys().chain(after.keys()).filter(|k| untouched(k)) {
        let change = match (before.get(key), after.get(key)) {
            (None, Some(_)) => Some(ChangeKind::Added),
            (Some(_), None) => Some(ChangeKind::Removed),
            (Some(b), Some(a)) if b.etag != a.etag || b.seeded.size != a.seeded.size => {
                Some(ChangeKind::ContentChanged)
            }
            (Some(b), Some(a)) if lowercase(&b.seeded.metadata) != lowercase(&a.seeded.metadata) => {
                Some(ChangeKind::MetadataChanged)
            }
            _ => None,
        };
        if let Some(change) = change {
            want.insert(key.clone(), change);
        }
    }
    if found != want {
        let wrong: Vec<_> = found
            .iter()
            .filter(|(k, c)| want.get(*k) != Some(c))
            .take(5)
            .collect();
        let missing: Vec<_> = want
            .iter()
            .filter(|(k, c)| found.get(*k) != Some(c))
            .take(5)
            .collect();
        return Err(format!(
            "the change set is not the changes made: found and not made {wrong:?}; made and not found {missing:?}"
        ));
    }
    Ok(())
}

/// Where a seed's scans run: its bucket, its output and its page size.
struct SeedWorld<'a> {
    seed: u64,
    page: usize,
    server: &'a Server,
    bucket: &'a str,
    output: &'a str,
}

/// How one scan of a seed is made: its id, where its result goes, and its
/// baseline (an incremental scan).
struct How {
    scan: String,
    output_prefix: String,
    layout: Layout,
    baseline: Option<String>,
    /// Draw metadata replaces in place into the schedule too (after every
    /// other draw, so the other seeds' schedules stay what they were).
    replace_metadata: bool,
}

/// What one scan of a seed did, for the checks after it.
#[derive(Default)]
struct Scanned {
    run: Run,
    /// Keys the schedule created, deleted or replaced while the scan ran.
    changed: BTreeSet<String>,
    /// Keys HEAD refused for good, and the status it answered.
    refused: BTreeMap<String, u16>,
    /// Keys whose HEAD answered 404 once while listed.
    lagged: BTreeSet<String>,
    /// The merged manifest, when the scan completed.
    manifest: Option<Manifest>,
}

/// One fleet scan of `seeded` under a schedule of faults drawn from `rng`,
/// checked against the invariant when it completes.
async fn one_scan(
    rng: &mut StdRng,
    world: &SeedWorld<'_>,
    seeded: &BTreeMap<String, Seeded>,
    how: &How,
) -> Scanned {
    let SeedWorld {
        seed,
        page,
        server,
        bucket,
        output,
    } = *world;
    let (bucket, output) = (bucket.to_string(), output.to_string());
    let rng = &mut *rng;

    // The proxy's faults, on keys drawn now.
    let keys: Vec<String> = seeded.keys().cloned().collect();
    let mut faults = ProxyFaults::default();
    let pick = |rng: &mut StdRng| keys[rng.random_range(0..keys.len())].clone();
    if rng.random_bool(0.5) {
        for _ in 0..rng.random_range(1..3) {
            faults.failing.insert(pick(rng), rng.random_range(11..14));
        }
    }
    if rng.random_bool(0.4) {
        let key = pick(rng);
        faults.lagging.insert(key.clone());
        faults.lagged.insert(key);
    }
    if rng.random_bool(0.4) {
        faults.denied.insert(pick(rng));
    }
    if rng.random_bool(0.25) {
        faults.misdirected.insert(pick(rng));
    }
    for (p, fault) in [
        (0.35, ListFault::RepeatKey),
        (0.35, ListFault::RepeatToken),
        (0.1, ListFault::OutOfOrder),
    ] {
        if rng.random_bool(p) {
            let at = rng.random_range(0..30);
            faults.list_faults.entry(at).or_insert(fault);
        }
    }
    let proxy_faults = Arc::new(Mutex::new(faults));
    let proxy = {
        let (faults, lists) = (proxy_faults.clone(), proxy_faults.clone());
        fault_proxy::start_rewriting(
            server.endpoint.clone(),
            move |req| faults.lock().unwrap().answer(req),
            move |req, resp, body| lists.lock().unwrap().rewrite(req, resp.status, body),
        )
        .await
    };
    let via_proxy = Server {
        endpoint: proxy.url.clone(),
        ..server.clone()
    };
    let s3 = via_proxy.s3().await;

    // The schedule, in milliseconds from the first worker's start.
    let workers = rng.random_range(1..=3usize);
    let mut schedule: Vec<(u64, Event)> = vec![];
    for _ in 0..rng.random_range(0..4) {
        schedule.push((
            rng.random_range(0..6_000),
            Event::KillWorker(rng.random_range(0..workers)),
        ));
    }
    if rng.random_bool(0.4) {
        schedule.push((
            rng.random_range(200..6_000),
            Event::RestartRedis {
                down_ms: rng.random_range(0..1_500),
            },
        ));
    }
    if rng.random_bool(0.6) {
        let at = rng.random_range(0..5_000);
        schedule.push((at, Event::Snapshot));
        let rollback = if rng.random_bool(0.5) {
            Event::Rollback
        } else {
            Event::RollbackDuringMerge {
                delay_ms: rng.random_range(0..400),
            }
        };
        schedule.push((at + rng.random_range(300..8_000), rollback));
    }
    if rng.random_bool(0.5) {
        schedule.push((
            rng.random_range(0..5_000),
            Event::Storm {
                ms: rng.random_range(1_000..4_000),
            },
        ));
    }
    if rng.random_bool(0.35) {
        schedule.push((
            rng.random_range(0..5_000),
            Event::Resets {
                ms: rng.random_range(200..2_000),
            },
        ));
    }
    if rng.random_bool(0.2) {
        let at = rng.random_range(0..5_000);
        schedule.push((at, Event::Oom));
        schedule.push((at + rng.random_range(100..1_500), Event::OomEnds));
    }
    let kill_plan_after = rng.random_bool(0.3).then(|| rng.random_range(0..40));
    let kill_merge_after = rng.random_bool(0.3).then(|| rng.random_range(0..300));
    let mut changed = BTreeSet::new();
    if rng.random_bool(0.5) {
        for i in 0..rng.random_range(1..20) {
            let key = format!("dhot/fnew{seed}-{i:03}");
            changed.insert(key.clone());
            let obj = Seeded {
                size: 3,
                metadata: BTreeMap::from([("new".to_string(), "1".to_string())]),
            };
            schedule.push((rng.random_range(0..5_000), Event::Create(key, obj)));
        }
        for _ in 0..rng.random_range(1..10) {
            let key = pick(rng);
            changed.insert(key.clone());
            let event = if rng.random_bool(0.5) {
                Event::Delete(key)
            } else {
                let obj = Seeded {
                    size: 5,
                    metadata: BTreeMap::from([("replaced".to_string(), "yes".to_string())]),
                };
                Event::Replace(key, obj)
            };
            schedule.push((rng.random_range(0..5_000), event));
        }
    }
    if how.replace_metadata {
        for _ in 0..rng.random_range(1..6) {
            let key = pick(rng);
            changed.insert(key.clone());
            schedule.push((rng.random_range(0..3_000), Event::ReplaceMetadata(key)));
        }
    }
    schedule.sort_by_key(|(at, _)| *at);

    let redis_dir = temp_path(&format!("torture-redis-{seed}-{}", std::process::id()));
    std::fs::create_dir_all(&redis_dir).unwrap();
    let redis = PrivateRedis::start_with(|port| {
        vec![
            "--port".into(),
            port.to_string(),
            "--appendonly".into(),
            "yes".into(),
            "--appendfsync".into(),
            "everysec".into(),
            "--dir".into(),
            redis_dir.to_str().unwrap().into(),
        ]
    });
    let url = redis.url();
    let redis = Arc::new(Mutex::new(redis));
    let scan = how.scan.clone();
    let spec = ScanSpec {
        bucket: bucket.clone(),
        prefix: String::new(),
        output_bucket: output.clone(),
        output_prefix: how.output_prefix.clone(),
        gzip: false,
        only_with_metadata: false,
        max_failures: 5,
        format: Default::default(),
        layout: how.layout,
        file_size: bucketscan_core::fleet::spec::DEFAULT_FILE_SIZE,
        scan_id: scan.clone(),
        baseline: how.baseline.clone(),
        change_set: false,
        filter: Default::default(),
        columns: Default::default(),
    };
    let fleet = Fleet {
        url: url.clone(),
        scan: scan.clone(),
        spec: spec.clone(),
        s3: s3.clone(),
        page: page as i32,
        part_records: rng.random_range(5..200),
        shards_in_flight: rng.random_range(1..=3),
        kill_plan_after,
        kill_merge_after,
    };

    let mut scanned = Scanned::default();
    let run = &mut scanned.run;
    let outcome = tokio::time::timeout(
        RUN_BOUND,
        drive(
            &fleet,
            workers,
            schedule,
            server,
            &bucket,
            redis.clone(),
            &proxy_faults,
            run,
        ),
    )
    .await;
    run.faults
        .extend(proxy_faults.lock().unwrap().served.iter().map(|(k, n)| (*k, *n)));
    // Keys HEAD refuses for good, and the status it answers: 403 wins
    // where a key drew both (the proxy asks it first).
    let refused: BTreeMap<String, u16> = {
        let faults = proxy_faults.lock().unwrap();
        let misdirected = faults.misdirected.iter().map(|k| (k.clone(), 400));
        misdirected
            .chain(faults.denied.iter().map(|k| (k.clone(), 403)))
            .collect()
    };
    let lagged = proxy_faults.lock().unwrap().lagged.clone();
    match outcome {
        Err(_) => {
            run.violation = Some(format!("no end within {RUN_BOUND:?} (a hang)"));
        }
        Ok(Err(reason)) => run.failed = Some(reason),
        Ok(Ok(())) => {
            let (result, manifest) = read_result(server, &output, how).await;
            let reused = how.baseline.is_some();
            if let Err(v) = check(&result, seeded, &changed, &refused, &lagged, reused) {
                run.violation = Some(v);
            }
            scanned.manifest = manifest;
        }
    }
    std::fs::remove_dir_all(&redis_dir).ok();
    Scanned {
        changed,
        refused,
        lagged,
        ..scanned
    }
}

/// A complete scan's records (JSON Lines, in key order) and, for a
/// dataset, its manifest.
async fn read_result(server: &Server, output: &str, how: &How) -> (Vec<u8>, Option<Manifest>) {
    if how.layout == Layout::Single {
        let key = format!("{}result.jsonl", how.output_prefix);
        return (server.read(output, &key).await, None);
    }
    let key = format!("{}manifest.json", how.output_prefix);
    let manifest: Manifest = serde_json::from_slice(&server.read(output, &key).await).expect("a manifest");
    let result = files_bytes(server, &manifest.files).await;
    (result, Some(manifest))
}

/// The bytes of data files, one after the other.
async fn files_bytes(server: &Server, files: &[DataFile]) -> Vec<u8> {
    let mut all = vec![];
    for f in files {
        let (bucket, key) = f.location.strip_prefix("s3://").unwrap().split_once('/').unwrap();
        all.extend(server.read(bucket, key).await);
    }
    all
}

/// A fleet's settings for one seed.
struct Fleet {
    url: String,
    scan: String,
    spec: ScanSpec,
    s3: Arc<bucketscan_core::s3::S3>,
    page: i32,
    part_records: u64,
    shards_in_flight: usize,
    /// Kill the first plan this many milliseconds after it starts.
    kill_plan_after: Option<u64>,
    /// Kill the first merge this many milliseconds after it starts.
    kill_merge_after: Option<u64>,
}

impl Fleet {
    async fn queue(&self, owner: &str) -> Result<Queue, String> {
        connect(&self.url, &self.scan, owner).await
    }

    /// A worker as a task: `run` until nothing is left (its result), or
    /// until the task is aborted (killed).
    fn spawn_worker(&self, name: String) -> tokio::task::JoinHandle<Result<(), String>> {
        let (s3, spec, page) = (self.s3.clone(), self.spec.clone(), self.page);
        let opts = RunOptions {
            reap: true,
            part_records: self.part_records,
            part_age: Duration::from_millis(700),
            progress_every: Duration::from_millis(300),
            split: true,
            shards_in_flight: self.shards_in_flight,
            govern_every: Some(Duration::from_millis(500)),
        };
        let (url, scan) = (self.url.clone(), self.scan.clone());
        tokio::spawn(async move {
            let queue = connect(&url, &scan, &name).await?;
            let head = HeadClient::new(HeadClientKind::Fast, &s3).map_err(|e| e.to_string())?;
            let engine = Engine::new(
                s3,
                head,
                EngineOptions {
                    bucket: spec.bucket.clone(),
                    concurrency: 16,
                    only_with_metadata: false,
                    page_size: page,
                    max_rate: None,
                    metadata_source: bucketscan_core::scan::listed::MetadataSource::Head,
                    filter: Default::default(),
                    columns: Default::default(),
                },
            );
            let runner = Runner {
                queue,
                engine,
                spec,
                opts,
                stop: CancellationToken::new(),
            };
            Box::pin(runner.run())
                .await
                .map(|_| ())
                .map_err(|e| e.to_string())
        })
    }
}

async fn connect(url: &str, scan: &str, owner: &str) -> Result<Queue, String> {
    let config = RedisConfig {
        patience: Duration::from_secs(20),
        ..RedisConfig::new(url)
    };
    Queue::connect(&config, scan, owner, Duration::from_secs(2))
        .await
        .map_err(|e| e.to_string())
}

/// Plan, run the workers through the schedule, merge: `Ok` when the scan
/// completed, `Err(reason)` when it ended not complete. Events keep coming
/// while the merge runs, as they would against a real merge Job.
#[allow(clippy::too_many_arguments)]
async fn drive(
    fleet: &Fleet,
    workers: usize,
    schedule: Vec<(u64, Event)>,
    server: &Server,
    bucket: &str,
    redis: Arc<Mutex<PrivateRedis>>,
    proxy: &Arc<Mutex<ProxyFaults>>,
    run: &mut Run,
) -> Result<(), String> {
    let planner = fleet.queue("planner").await?;
    let opts = PlanOptions {
        target_shards: 8,
        min_shard_objects: 20,
        page_size: fleet.page,
        ..PlanOptions::default()
    };
    if let Some(after) = fleet.kill_plan_after {
        let (s3, spec, opts, planner) = (
            fleet.s3.clone(),
            fleet.spec.clone(),
            opts.clone(),
            planner.clone(),
        );
        let runtime = tokio::runtime::Handle::current();
        let plan = tokio::task::spawn_blocking(move || {
            runtime.block_on(async move {
                tokio::select! {
                    _ = Box::pin(plan_scan(&s3, &spec, &opts, &planner)) => false,
                    _ = tokio::time::sleep(Duration::from_millis(after)) => true,
                }
            })
        });
        if plan.await.map_err(|e| format!("plan task: {e}"))? {
            *run.faults.entry("planner killed").or_insert(0) += 1;
        }
    }
    let mut tries = 0;
    loop {
        match plan_scan(&fleet.s3, &fleet.spec, &opts, &planner).await {
            Ok(_) => break,
            Err(e) if e.is_transient() && tries < 20 => {
                tries += 1;
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(e) => return Err(format!("plan: {e}")),
        }
    }
    let mut names = 0usize;
    let mut next_name = move || {
        names += 1;
        format!("w{names}")
    };
    let mut tasks: Vec<Task> = (0..workers).map(|_| fleet.spawn_worker(next_name())).collect();
    let start = Instant::now();
    let mut events = schedule.into_iter().peekable();
    let mut world = World {
        server,
        bucket,
        redis,
        proxy,
        client: redis::Client::open(fleet.url.as_str()).unwrap(),
        snapshot: None,
        oom: false,
    };
    // `None` from the task: the merge was killed.
    let mut merging: Option<tokio::task::JoinHandle<Option<Result<Manifest, MergeError>>>> = None;
    let mut merges = 0;
    // A rollback held for the merge, and when the merge started.
    let mut at_merge: Option<u64> = None;
    let mut merge_started: Option<Instant> = None;
    loop {
        while let Some((at, _)) = events.peek() {
            if start.elapsed() < Duration::from_millis(*at) {
                break;
            }
            let (_, event) = events.next().unwrap();
            if let Event::RollbackDuringMerge { delay_ms } = event {
                at_merge = Some(delay_ms);
                continue;
            }
            world
                .apply(event, fleet, &mut tasks, &mut next_name, merging.is_some(), run)
                .await;
        }
        if let (Some(started), Some(delay_ms)) = (merge_started.filter(|_| merging.is_some()), at_merge) {
            if started.elapsed() >= Duration::from_millis(delay_ms) {
                at_merge = None;
                world
                    .apply(Event::Rollback, fleet, &mut tasks, &mut next_name, true, run)
                    .await;
            }
        }
        if let Some(task) = merging.as_ref().filter(|t| t.is_finished()) {
            let _ = task;
            let merged = merging
                .take()
                .unwrap()
                .await
                .map_err(|e| format!("merge task: {e}"))?;
            let Some(merged) = merged else {
                // Killed: its Job runs it again (the loop starts a merge
                // once no worker runs).
                *run.faults.entry("merge killed").or_insert(0) += 1;
                continue;
            };
            match merged {
                Ok(m) if m.shards_dead > 0 => {
                    let first = &m.dead[0];
                    return Err(format!(
                        "{} shards dead; first {} ({:?})",
                        m.shards_dead, first.range, first.last_error
                    ));
                }
                // Merged before the schedule ran out: the rest of it (a
                // rollback after the merge) still runs, then the scan is
                // looked at again, as the operator would.
                Ok(_) if events.peek().is_some() || at_merge.is_some() => {
                    if at_merge.take().is_some() {
                        // The merge ended before the held rollback: it
                        // comes now, after it.
                        world
                            .apply(Event::Rollback, fleet, &mut tasks, &mut next_name, false, run)
                            .await;
                    }
                    tasks.push(fleet.spawn_worker(next_name()))
                }
                Ok(_) => return Ok(()),
                // Not finished (a rollback brought shards back): the
                // operator keeps workers running.
                Err(e) if e.is_transient() && merges < 50 => tasks.push(fleet.spawn_worker(next_name())),
                Err(e) => return Err(format!("merge: {e}")),
            }
        } else if merging.is_none() && tasks.iter().all(|t| t.is_finished()) {
            let results = futures::future::join_all(tasks.drain(..)).await;
            if results.iter().any(|r| !matches!(r, Ok(Ok(())))) {
                // A worker that failed is started again, as its pod would be.
                tasks.push(fleet.spawn_worker(next_name()));
            } else {
                merges += 1;
                let (scan, s3) = (fleet.scan.clone(), fleet.s3.clone());
                let merger = fleet.queue("merger").await?;
                // On a thread of its own, as the merge Job is a process of
                // its own (and its future is not `Send`).
                let runtime = tokio::runtime::Handle::current();
                // The first merge may be killed at any await: between its
                // data files, its manifest and the deletion of the parts.
                let kill_after = fleet.kill_merge_after.filter(|_| merges == 1);
                merging = Some(tokio::task::spawn_blocking(move || {
                    runtime.block_on(async move {
                        // Boxed: a debug build's merge future is bigger
                        // than a blocking thread's stack holds.
                        let merged = Box::pin(merge(&scan, &merger, &s3));
                        match kill_after {
                            Some(ms) => tokio::select! {
                                m = merged => Some(m),
                                _ = tokio::time::sleep(Duration::from_millis(ms)) => None,
                            },
                            None => Some(merged.await),
                        }
                    })
                }));
                merge_started = Some(Instant::now());
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

type Task = tokio::task::JoinHandle<Result<(), String>>;

/// What the schedule acts on.
struct World<'a> {
    server: &'a Server,
    bucket: &'a str,
    redis: Arc<Mutex<PrivateRedis>>,
    proxy: &'a Arc<Mutex<ProxyFaults>>,
    client: redis::Client,
    snapshot: Option<snapshot::Snapshot>,
    /// Redis refuses writes now (out of memory).
    oom: bool,
}

impl World<'_> {
    async fn apply(
        &mut self,
        event: Event,
        fleet: &Fleet,
        tasks: &mut Vec<Task>,
        next_name: &mut impl FnMut() -> String,
        merging: bool,
        run: &mut Run,
    ) {
        let mut count = |kind: &'static str| *run.faults.entry(kind).or_insert(0) += 1;
        match event {
            Event::KillWorker(i) => {
                let live: Vec<usize> = (0..tasks.len()).filter(|t| !tasks[*t].is_finished()).collect();
                if let Some(t) = live.get(i % live.len().max(1)) {
                    tasks[*t].abort();
                    count("worker killed");
                    tasks.push(fleet.spawn_worker(next_name()));
                }
            }
            Event::RollbackDuringMerge { .. } => unreachable!("held until the merge starts"),
            Event::RestartRedis { down_ms } => {
                let redis = self.redis.clone();
                tokio::task::spawn_blocking(move || {
                    redis
                        .lock()
                        .unwrap()
                        .crash_and_restart(Duration::from_millis(down_ms));
                })
                .await
                .unwrap();
                // Restarted with its own settings: no longer out of memory.
                self.oom = false;
                count("redis restarted (aof everysec)");
            }
            Event::Oom => {
                if self.set_maxmemory("1").await {
                    self.oom = true;
                    count("redis out of memory");
                }
            }
            Event::OomEnds => {
                if self.oom && self.set_maxmemory("0").await {
                    self.oom = false;
                }
            }
            Event::Resets { ms } => {
                self.proxy.lock().unwrap().resets_until = Some(Instant::now() + Duration::from_millis(ms));
            }
            Event::Snapshot => {
                if let Ok(mut con) = self.client.get_multiplexed_async_connection().await {
                    self.snapshot = Some(snapshot::Snapshot::take(&mut con, &fleet.scan).await);
                }
            }
            // A snapshot cannot be written back while Redis refuses writes.
            Event::Rollback if self.oom => {}
            Event::Rollback => {
                let con = self.client.get_multiplexed_async_connection().await;
                if let (Some(s), Ok(mut con)) = (self.snapshot.take(), con) {
                    s.restore(&mut con).await;
                    count("redis rolled back");
                    if merging {
                        count("rolled back during the merge");
                    }
                }
            }
            Event::Storm { ms } => {
                self.proxy.lock().unwrap().storm_until = Some(Instant::now() + Duration::from_millis(ms));
                count("throttle storm");
            }
            Event::Create(key, obj) => {
                // A put the store refuses (versitygw's posix backend, now
                // and then, under many puts at once) changes nothing: the
                // key is among `changed`, which the check allows either way.
                self.server
                    .try_seed(self.bucket, &BTreeMap::from([(key, obj)]))
                    .await;
                count("object created");
            }
            Event::Delete(key) => {
                self.server.delete(self.bucket, &key).await;
                count("object deleted or replaced");
            }
            Event::Replace(key, obj) => {
                self.server
                    .try_seed(self.bucket, &BTreeMap::from([(key, obj)]))
                    .await;
                count("object deleted or replaced");
            }
            Event::ReplaceMetadata(key) => {
                // A key deleted before it is no longer there: nothing changes.
                let _ = replace_metadata(&self.server.client(), self.bucket, &key, "in-scan").await;
                count("object deleted or replaced");
            }
        }
    }
}

impl World<'_> {
    /// `CONFIG SET maxmemory`: whether Redis took it.
    async fn set_maxmemory(&self, bytes: &str) -> bool {
        let Ok(mut con) = self.client.get_multiplexed_async_connection().await else {
            return false;
        };
        redis::cmd("CONFIG")
            .arg("SET")
            .arg("maxmemory")
            .arg(bytes)
            .query_async::<()>(&mut con)
            .await
            .is_ok()
    }
}

/// The invariant on a complete scan's result. `reused`: an incremental
/// scan, whose records of unchanged objects come from its baseline without
/// a HEAD, so a key whose HEAD the proxy refuses may hold its baseline
/// reading instead of the error (what a HEAD alone shows, such as a denied
/// read, is not seen without one: docs/incremental.md); that reading must
/// still be the object's.
fn check(
    result: &[u8],
    seeded: &BTreeMap<String, Seeded>,
    changed: &BTreeSet<String>,
    refused: &BTreeMap<String, u16>,
    lagging: &BTreeSet<String>,
    reused: bool,
) -> Result<(), String> {
    let mut records: Vec<Record> = vec![];
    for line in result.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
        let record: Record =
            serde_json::from_slice(line).map_err(|e| format!("a result line is no record ({e})"))?;
        records.push(record);
    }
    if let Some(w) = records.windows(2).find(|w| w[0].key >= w[1].key) {
        return Err(format!(
            "{:?} then {:?}: twice or out of key order",
            w[0].key, w[1].key
        ));
    }
    let by_key: BTreeMap<&str, &Record> = records.iter().map(|r| (r.key.as_str(), r)).collect();
    for (key, seed) in seeded.iter().filter(|(k, _)| !changed.contains(*k)) {
        let Some(record) = by_key.get(key.as_str()) else {
            return Err(format!("{key:?} is missing"));
        };
        let readable = record.status == Status::Ok
            && record.size == seed.size as u64
            && record.metadata == lowercase(&seed.metadata);
        if let Some(status) = refused.get(key) {
            let error = record.status == Status::Error && record.http_status == Some(*status);
            // An incremental scan may have kept the baseline's reading.
            let kept = reused && readable;
            if !(error || kept) {
                return Err(format!("{key:?} was refused ({status}), recorded {record:?}"));
            }
            continue;
        }
        if lagging.contains(key) && record.status == Status::Error && record.http_status == Some(404) {
            continue; // the listing showed it while HEAD answered 404
        }
        if !readable {
            return Err(format!("{key:?}: seeded {seed:?}, recorded {record:?}"));
        }
    }
    for record in &records {
        let known = seeded.contains_key(&record.key) || changed.contains(&record.key);
        if !known {
            return Err(format!(
                "{:?} is in the result but never was in the bucket",
                record.key
            ));
        }
        let object_specific = refused.contains_key(&record.key) || lagging.contains(&record.key);
        if record.status == Status::Error && !object_specific {
            return Err(format!("an error record for a passing fault: {record:?}"));
        }
    }
    Ok(())
}

fn lowercase(metadata: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    metadata
        .iter()
        .map(|(k, v)| (k.to_ascii_lowercase(), v.clone()))
        .collect()
}
