//! `bucketscan-worker merge`: join the recorded parts of every shard, in key
//! order, into the result (one object, or a dataset of bounded files under
//! `data/`), write a manifest beside it and delete the parts.
//!
//! Every output file is one upload of at most 10,000 parts, planned before
//! any request (`merge_plan`): parts of 5 MiB or more are copied on the
//! server (`UploadPartCopy`, no bytes through the merger), smaller ones are
//! read and joined; 16 parts go up at once. Gzip parts concatenate into a
//! valid multi-member gzip stream; a CSV file starts with its header (its own
//! gzip member when compressed). Re-running a finished merge changes nothing;
//! re-running one that died midway writes the same files again (the same
//! bytes: the single result's S3 parts, and so its ETag, depend also on what
//! a merge started early staged, `merge_ahead`).
//!
//! Parquet parts cannot be joined byte-wise: a big part is copied as a file
//! of its own, runs of small ones are read and written again (`rewrite`).
//!
//! May import: `spec`, `queue`, `merge_plan`, `merge_ahead`, `rewrite`, `scan` (the output format), `keyspace` and `s3`.

use crate::fleet::data_files::{self, DataFilesError};
use crate::fleet::merge_ahead::{list_parts, Ahead};
use crate::fleet::merge_plan::{
    files_fit_one_object, plan_copy, plan_files, plan_from_files, plan_parquet_files, plan_single,
    single_size, FilePlan, PartIn, SinglePlan,
};
use crate::fleet::queue::durable::Durability;
use crate::fleet::queue::view::MergeView;
use crate::fleet::queue::PartStats;
use crate::fleet::queue::{cut, Queue, QueueError, ShardRecord, StoredManifest};
use crate::fleet::rewrite::rewrite_parquet;
use crate::fleet::spec::ScanSpec;
use crate::keyspace::coverage::{overlapping, uncovered};
use crate::keyspace::shard::Shard;
use crate::s3::compose::{compose, Composed, Piece, Target};
use crate::s3::delete::{delete_listed, delete_prefix};
use crate::s3::error::S3Error;
use crate::s3::upload::MAX_OBJECT_SIZE;
use crate::s3::S3;
use crate::scan::format::{record_keys, Format, Layout};
use bytes::Bytes;
use futures::stream::{self, StreamExt, TryStreamExt};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::Read;
use std::sync::Arc;

pub use crate::fleet::merge_plan::MERGE_CONCURRENCY;

/// How long the merge waits for Redis to confirm the manifest is durable.
const DURABLE_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// The most bytes of the manifest Redis keeps (`meta` field `manifest`).
/// Every value in Redis stays far below the bundled Redis's
/// `proto-max-bulk-len` (32 MB, so that no client can store one huge
/// value): the one that grows with a scan is the list of dead shards
/// (about 300 bytes each with a short error), cut to fit here.
const MANIFEST_IN_REDIS_BYTES: usize = 8 << 20;

/// The manifest as Redis keeps it (JSON): whole, unless its dead shards
/// would make it larger than [`MANIFEST_IN_REDIS_BYTES`]; then only the
/// first of them, by halves until it fits (`shards_dead` still counts every
/// one, and manifest.json in S3 lists every one).
fn redis_copy(manifest: &Manifest) -> String {
    let mut json = serde_json::to_string_pretty(manifest).expect("a manifest serializes");
    let mut kept = manifest.dead.len();
    while json.len() > MANIFEST_IN_REDIS_BYTES && kept > 1 {
        kept /= 2;
        let cut = Manifest {
            dead: manifest.dead[..kept].to_vec(),
            ..manifest.clone()
        };
        json = serde_json::to_string_pretty(&cut).expect("a manifest serializes");
    }
    json
}

#[derive(Debug, thiserror::Error)]
pub enum MergeError {
    #[error(transparent)]
    Queue(#[from] QueueError),
    #[error(transparent)]
    S3(#[from] S3Error),
    #[error(transparent)]
    DataFiles(DataFilesError),
    #[error("scan {0:?} is not planned (no spec in Redis)")]
    NotPlanned(String),
    #[error("scan is not finished: {pending} shards pending, {leased} being scanned")]
    NotFinished { pending: u64, leased: u64 },
    #[error("scan {0:?} is not planned completely (its planner stopped before the last shard): plan it again, then merge")]
    PlanIncomplete(String),
    /// The stored shards overlap or leave a gap: a result from them would
    /// hold keys twice or miss some, so none is written.
    #[error("the scan's shards do not tile its keyspace: {0}; nothing was merged")]
    NotTiled(String),
    #[error("recorded part {0} is missing from the output bucket")]
    MissingPart(String),
    #[error("part {key}: {reason}")]
    BadPart { key: String, reason: String },
    #[error("the result needs {files} files of up to {file_size} bytes, more than one object can hold (10,000 parts): plan the scan with layout dataset or a larger file size")]
    TooBigForSingle { files: usize, file_size: u64 },
    #[error("the result would be {bytes} bytes, more than S3's largest object (5 TiB): scan with layout dataset (nothing was written; the parts are kept)")]
    OverMaxObject { bytes: u64 },
    /// A merge that outlived a retry (its pod cut off while the scan was
    /// retried and merged again): what it would write is an earlier round's.
    #[error("this merge is of retry round {round}, and the scan was retried since (round {later}): it stopped without writing more (the later round's merge writes the result)")]
    Superseded { round: u64, later: u64 },
    /// Redis records an earlier retry round than the one this merge
    /// merged (rolled back past the retry while the merge ran).
    #[error("this merge is of retry round {round}, and Redis now records round {held} (rolled back past the retry?): it stored no manifest in Redis (a merge run again adopts the manifest.json of round {round})")]
    RoundLost { round: u64, held: u64 },
}

impl From<DataFilesError> for MergeError {
    fn from(e: DataFilesError) -> Self {
        match e {
            DataFilesError::S3(e) => MergeError::S3(e),
            refused => MergeError::DataFiles(refused),
        }
    }
}

impl MergeError {
    /// A cause that may pass (the scan still running, a plan to complete,
    /// the store or Redis away): merging again later may succeed.
    pub fn is_transient(&self) -> bool {
        match self {
            MergeError::NotFinished { .. } | MergeError::PlanIncomplete(_) => true,
            // Final for a shard (keys skipped before its checkpoint cannot
            // be told), not for the merge: its listings of the output start
            // afresh each time, so another merge may simply list again.
            MergeError::S3(S3Error::ListingOutOfOrder(_)) => true,
            MergeError::S3(e) => e.is_retryable(),
            MergeError::Queue(q) => q.is_transient(),
            _ => false,
        }
    }
}

/// Written as JSON beside the result.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Manifest {
    pub scan: String,
    pub result: String,
    /// The spec's layout, format, gzip and scanned bucket and prefix, also
    /// at the top level, where `scan`'s dataset manifest has them: a reader
    /// of either kind finds them in the same place. `None` in manifests of
    /// earlier releases (`spec` has them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layout: Option<Layout>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub format: Option<Format>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gzip: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bucket: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix: Option<String>,
    pub result_bytes: u64,
    pub shards: u64,
    pub shards_done: u64,
    pub shards_dead: u64,
    /// Leases taken over all shards (shards x 1 when nothing was retried).
    pub attempts: u64,
    pub shards_retried: u64,
    /// Times a shard gave part of its range to an idle worker.
    pub splits: u64,
    /// Exact counts of the result: `objects` listed, `written` to the result
    /// (all of them unless only objects with metadata were asked for),
    /// `with_metadata`, `vanished`, `errors`, `bytes`.
    pub counts: BTreeMap<String, u64>,
    /// The live progress totals: work done, including keys scanned again after
    /// a crash, so they can exceed `counts`.
    pub progress: BTreeMap<String, u64>,
    pub dead: Vec<DeadShard>,
    pub created: Option<String>,
    pub merged: String,
    pub spec: ScanSpec,
    /// The result's files, in key order (one for the single layout). Empty
    /// in manifests of releases before datasets.
    #[serde(default)]
    pub files: Vec<DataFile>,
    /// Records in all files.
    #[serde(default)]
    pub records: u64,
    /// The store check made at planning: the store's time at the scan's
    /// start, and whether LastModified moves on a metadata replace. A result
    /// without it cannot be a baseline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub store_check: Option<crate::scan::store_check::StoreCheck>,
    /// Why there is no `store_check`: the store refused it, or its planner
    /// stopped before it settled (`incremental::UNSETTLED`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub store_check_error: Option<String>,
    /// Incremental scans: the baseline, the change set and its counts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub incremental: Option<IncrementalSummary>,
    /// Shards died (`dead` names each one's range and error): the result
    /// holds every record of the other shards exactly once and none of
    /// their ranges. Never a baseline; `retry` scans them again.
    #[serde(default)]
    pub partial: bool,
    /// The retry round this merge ended (0: the first run; see
    /// `Queue::retry`).
    #[serde(default)]
    pub retries: u64,
    /// The form of its JSON lines (`record::RECORD_FORMAT`); `None` in
    /// manifests of releases before it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub record_format: Option<u32>,
}

impl Manifest {
    /// Records whose object could not be read (`error` records).
    pub fn errors(&self) -> u64 {
        self.counts.get("errors").copied().unwrap_or(0)
    }

    /// A result that a retry may complete: its parts stay in the output
    /// (a retry merges them again with the shards scanned again) until a
    /// merge leaves nothing to retry, or the scan is deleted.
    pub fn keeps_parts(&self) -> bool {
        self.shards_dead > 0 || self.errors() > 0
    }

    /// The missing ranges in words: how many, and the first with its error.
    /// Bounded: the range and the error come from the manifest in Redis,
    /// which the scan's own user may write, and an unbounded message would
    /// make a status too large to write (the scan stuck Merging).
    pub fn missing_message(&self) -> String {
        let first = self.dead.first();
        let range = first.map(|d| d.range.to_string()).unwrap_or_default();
        let error = first
            .and_then(|d| d.last_error.as_deref())
            .unwrap_or("no error recorded");
        format!(
            "{} shard(s) failed for good and their key ranges are missing from the result (the manifest's \"dead\" lists each); first: {} ({})",
            self.shards_dead,
            cut(&range, 1024),
            cut(error, 1024)
        )
    }
}

pub use crate::scan::dataset::{ChangeCounts, IncrementalSummary};

pub use crate::scan::dataset::{Block, DataFile};

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct DeadShard {
    pub range: crate::keyspace::shard::Shard,
    pub failures: u64,
    pub last_error: Option<String>,
}

/// Merge the scan (see the module doc). Not an `async fn` of its own: a
/// level of future less on the stack of whoever polls it.
pub fn merge<'a>(
    scan: &'a str,
    queue: &'a Queue,
    s3: &'a Arc<S3>,
) -> impl std::future::Future<Output = Result<Manifest, MergeError>> + 'a {
    merge_with(scan, queue, s3, Ahead::default())
}

/// [`merge`], copying what `ahead` staged before the last shard ended in
/// place of the parts it holds, where it still holds them (`merge_ahead`).
pub async fn merge_with(
    scan: &str,
    queue: &Queue,
    s3: &Arc<S3>,
    ahead: Ahead,
) -> Result<Manifest, MergeError> {
    let spec: ScanSpec = queue
        .spec()
        .await?
        .ok_or_else(|| MergeError::NotPlanned(scan.to_string()))?;
    let written = written_manifest(scan, queue, s3, &spec).await?;
    let (recorded, held) = queue.manifest_and_round().await?;
    if let Some(later) = written.as_ref().filter(|m| m.retries > held) {
        // A merge of a later round wrote manifest.json, and Redis was
        // rolled back past that round since (a failover to a replica that
        // lagged, an older snapshot): its result stands, and the parts its
        // merge deleted are gone, so merging from the earlier round's
        // records would miss them. Rounds only grow: adopt it, round and all.
        tracing::warn!(
            round = later.retries,
            held,
            "Redis was rolled back past a retry round; adopting that round's manifest.json from S3"
        );
        queue.set_meta_field("manifest", &redis_copy(later)).await?;
        queue.adopt_round(later.retries).await?;
        delete_parts_unless_kept(s3, &spec, later).await?;
        return Ok(later.clone());
    }
    if let Some(manifest) = recorded.and_then(|json| of_round(&json, held)) {
        // Already merged: the recorded manifest stands. Deleting the parts
        // again finishes a merge that died while deleting them.
        tracing::info!("scan already merged");
        delete_parts_unless_kept(s3, &spec, &manifest).await?;
        return Ok(manifest);
    }
    if let Some(manifest) = written.filter(|m| m.retries == held) {
        // Merged before, and Redis lost the manifest since (a restart, a
        // rollback): the parts may be gone, but the result and its
        // manifest are whole. Adopt them. (A manifest of an earlier round
        // is the result a retry replaces.)
        tracing::warn!("Redis lost this scan's manifest; adopting manifest.json from S3");
        store_of_round(queue, held, &manifest).await?;
        delete_parts_unless_kept(s3, &spec, &manifest).await?;
        return Ok(manifest);
    }
    let counts = queue.counts().await?;
    if counts.pending > 0 || counts.leased > 0 {
        return Err(MergeError::NotFinished {
            pending: counts.pending,
            leased: counts.leased,
        });
    }
    // The mark, the round, the shards and their parts as Redis held them at
    // one instant: a rollback between reads cannot pair a "done" with fewer
    // parts, nor one round's shards with another round.
    let MergeView {
        plan_complete,
        round: retries,
        shards,
        mut parts,
    } = queue.merge_view().await?;
    if plan_complete.is_none() {
        return Err(MergeError::PlanIncomplete(scan.to_string()));
    }
    check_finished(&shards)?;
    check_tiling(&spec.prefix, &shards)?;
    // A dead shard's parts stay out: its range is missing as a whole (a
    // listing that went backwards may have skipped keys before its
    // checkpoint), and a retry scans it again from its start.
    let (shards, dead_shards): (Vec<ShardRecord>, Vec<ShardRecord>) =
        shards.into_iter().partition(|s| s.state == "done");
    let mut keys = Vec::new();
    for shard in &shards {
        keys.extend(parts.remove(&shard.id).unwrap_or_default());
    }
    let (change_keys, keys): (Vec<String>, Vec<String>) =
        keys.into_iter().partition(|k| spec.is_change_part(k));
    let parts = describe_parts(s3, queue, &spec, keys).await?;
    // A merge that outlived a retry (its pod on a partitioned node) writes
    // nothing over the later round's result.
    still_latest(scan, queue, s3, &spec, retries).await?;
    let files = write_result(s3, &spec, &parts, &ahead).await?;
    let checked = Box::pin(crate::fleet::incremental::settled_store_check(s3, &spec)).await?;
    let counts = sum_counts(&shards);
    let progress = queue.counters().await?;
    let incremental = match &spec.baseline {
        Some(baseline) => {
            let changes = spec.for_changes();
            let change_parts = describe_parts(s3, queue, &changes, change_keys).await?;
            let change_files = write_result(s3, &changes, &change_parts, &Ahead::default()).await?;
            let count = |name: &str| counts.get(name).copied().unwrap_or(0);
            let checked = checked.clone().unwrap_or_default();
            Some(IncrementalSummary {
                baseline: baseline.clone(),
                // And taken: a worker that gave up waiting for the check
                // HEADed every object, whatever the check said later.
                reused_records: checked.trusts_last_modified()
                    && progress.get("reused").is_some_and(|n| *n > 0),
                detail: checked.detail(),
                changes: match spec.layout {
                    Layout::Single => format!("s3://{}/{}", spec.output_bucket, changes.result_key()),
                    Layout::Dataset => format!("s3://{}/{}", spec.output_bucket, changes.data_prefix()),
                },
                change_files,
                counts: ChangeCounts {
                    added: count("added"),
                    removed: count("removed"),
                    content_changed: count("content_changed"),
                    metadata_changed: count("metadata_changed"),
                    reused: progress.get("reused").copied().unwrap_or(0),
                    heads: progress.get("heads").copied().unwrap_or(0),
                },
                baseline_bytes_read: progress.get("baseline_bytes").copied().unwrap_or(0),
            })
        }
        None => None,
    };
    let dead: Vec<DeadShard> = dead_shards
        .iter()
        .map(|s| DeadShard {
            range: s.shard.clone(),
            failures: s.failures,
            last_error: s.last_error.clone(),
        })
        .collect();
    let manifest = Manifest {
        scan: scan.to_string(),
        result: match spec.layout {
            Layout::Single => format!("s3://{}/{}", spec.output_bucket, spec.result_key()),
            Layout::Dataset => format!("s3://{}/{}", spec.output_bucket, spec.data_prefix()),
        },
        layout: Some(spec.layout),
        format: Some(spec.format),
        gzip: Some(spec.gzip),
        bucket: Some(spec.bucket.clone()),
        prefix: Some(spec.prefix.clone()),
        result_bytes: files.iter().map(|f| f.bytes).sum(),
        records: files.iter().map(|f| f.records).sum(),
        files,
        shards: (shards.len() + dead_shards.len()) as u64,
        shards_done: shards.len() as u64,
        shards_dead: dead.len() as u64,
        attempts: shards.iter().chain(&dead_shards).map(|s| s.attempts).sum(),
        shards_retried: shards
            .iter()
            .chain(&dead_shards)
            .filter(|s| s.attempts > 1)
            .count() as u64,
        splits: shards.iter().chain(&dead_shards).map(|s| s.splits).sum(),
        counts,
        progress,
        dead,
        created: queue.meta_field("created").await?,
        merged: time::OffsetDateTime::now_utc()
            .format(&time::format_description::well_known::Rfc3339)
            .unwrap_or_default(),
        spec: spec.clone(),
        store_check_error: checked
            .as_ref()
            .filter(|c| c.check.is_none())
            .and_then(|c| c.error.clone()),
        store_check: checked.and_then(|c| c.check),
        incremental,
        partial: !dead_shards.is_empty(),
        retries,
        record_format: Some(crate::scan::record::RECORD_FORMAT),
    };
    let json = serde_json::to_vec_pretty(&manifest).expect("a manifest serializes");
    let bucket = spec.output_bucket.as_str();
    still_latest(scan, queue, s3, &spec, retries).await?;
    s3.put(bucket, &spec.manifest_key(), "application/json", json.into())
        .await?;
    // Stored in Redis only if Redis still records this merge's round (one
    // step): a merge that outlived a retry writes nothing there, and fails
    // saying why. (manifest.json above is a check, then a write: see
    // docs/operations.md, "A merge of an earlier round that outlives a
    // whole retry".)
    store_of_round(queue, retries, &manifest).await?;
    still_latest(scan, queue, s3, &spec, retries).await?;
    // The parts go only once Redis keeps the manifest (its AOF, its
    // replicas) as far as it can say; were it lost anyway, manifest.json is
    // adopted from S3 (`written_manifest`).
    match queue.wait_durable(DURABLE_WAIT).await? {
        Durability::Confirmed { local, replicas, of } if local || of > 0 => {
            if replicas < of {
                tracing::warn!(
                    replicas,
                    of,
                    "not every Redis replica confirmed the manifest in time"
                );
            }
        }
        other => tracing::info!(
            ?other,
            "Redis cannot confirm the manifest is durable; manifest.json in S3 is the copy that stays"
        ),
    }
    delete_parts_unless_kept(s3, &spec, &manifest).await?;
    Ok(manifest)
}

/// Delete the scan's parts once merged, unless a retry may still need them
/// ([`Manifest::keeps_parts`]).
async fn delete_parts_unless_kept(s3: &S3, spec: &ScanSpec, manifest: &Manifest) -> Result<(), S3Error> {
    if manifest.keeps_parts() {
        // What merges staged ahead is no part: it would pile up, a copy of
        // the small parts per merge, until the scan is deleted.
        delete_prefix(s3, &spec.output_bucket, &spec.ahead_prefix()).await?;
        tracing::info!(
            dead = manifest.shards_dead,
            errors = manifest.errors(),
            "parts kept for a retry (deleted with the scan, or by the merge after a retry)"
        );
        return Ok(());
    }
    delete_prefix(s3, &spec.output_bucket, &spec.parts_prefix())
        .await
        .map(drop)
}

/// The `manifest.json` a merge of this very scan wrote, if there is one, of
/// any retry round: same scan, same spec, and made from the plan Redis
/// still holds (its `created` time), so a result of an earlier scan of the
/// same name and output is never taken for this one's. A manifest is
/// written only once every shard finished, so one found is whole.
async fn written_manifest(
    scan: &str,
    queue: &Queue,
    s3: &S3,
    spec: &ScanSpec,
) -> Result<Option<Manifest>, MergeError> {
    let body = match s3.get(&spec.output_bucket, &spec.manifest_key(), None).await {
        Ok(body) => body,
        Err(e) if e.http_status() == Some(404) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let Ok(manifest) = serde_json::from_slice::<Manifest>(&body) else {
        return Ok(None);
    };
    let created = queue.meta_field("created").await?;
    let ours =
        manifest.scan == scan && manifest.spec == *spec && created.is_some() && manifest.created == created;
    Ok(ours.then_some(manifest))
}

/// The manifest Redis holds, when it is of the round Redis records: a merge
/// of an earlier round that outlived a retry may store its manifest after
/// the retry took it out, and that one says nothing of this round.
pub fn of_round(json: &str, round: u64) -> Option<Manifest> {
    serde_json::from_str::<Manifest>(json)
        .ok()
        .filter(|m| m.retries == round)
}

/// The merge of round `round` is still the latest: Redis records no later
/// round, and manifest.json in S3 is not of a later round of this scan.
/// Checked before each write that a later round's merge would have made
/// (the result, manifest.json, the manifest in Redis).
/// The manifest into Redis's `meta`, only if Redis still records `round`
/// ([`Queue::store_manifest`]); otherwise the merge stops saying which
/// round Redis records.
async fn store_of_round(queue: &Queue, round: u64, manifest: &Manifest) -> Result<(), MergeError> {
    match queue.store_manifest(round, &redis_copy(manifest)).await? {
        StoredManifest::Stored => Ok(()),
        StoredManifest::OtherRound { held } if held > round => {
            Err(MergeError::Superseded { round, later: held })
        }
        StoredManifest::OtherRound { held } => Err(MergeError::RoundLost { round, held }),
    }
}

async fn still_latest(
    scan: &str,
    queue: &Queue,
    s3: &S3,
    spec: &ScanSpec,
    round: u64,
) -> Result<(), MergeError> {
    let held = queue.retry_round().await?;
    let written = written_manifest(scan, queue, s3, spec)
        .await?
        .map_or(0, |m| m.retries);
    let later = held.max(written);
    if later > round {
        return Err(MergeError::Superseded { round, later });
    }
    Ok(())
}

/// Every shard done or dead (the counts above come from other keys than
/// the shards' own states, which a Redis that lost writes may disagree with).
fn check_finished(shards: &[ShardRecord]) -> Result<(), MergeError> {
    let count = |pick: &dyn Fn(&str) -> bool| shards.iter().filter(|s| pick(&s.state)).count() as u64;
    let leased = count(&|state| state == "leased");
    let pending = count(&|state| !matches!(state, "done" | "dead" | "leased"));
    if pending + leased > 0 {
        return Err(MergeError::NotFinished { pending, leased });
    }
    Ok(())
}

/// The shards must tile the scan's keyspace: pairwise disjoint, and their
/// union the whole prefix.
fn check_tiling(prefix: &str, shards: &[ShardRecord]) -> Result<(), MergeError> {
    let ranges: Vec<Shard> = shards.iter().map(|s| s.shard.clone()).collect();
    if let Some((a, b)) = overlapping(&ranges) {
        return Err(MergeError::NotTiled(format!(
            "shards {a} and {b} overlap (keys in both would be in the result twice)"
        )));
    }
    if let Some(gap) = uncovered(prefix, &ranges).first() {
        return Err(MergeError::NotTiled(format!(
            "no shard covers {gap} (its keys would be missing)"
        )));
    }
    Ok(())
}

/// A recorded part with its size (from one LIST of the parts, not a HEAD
/// each) and what it holds.
struct Described {
    part: PartIn,
    stats: PartStats,
}

async fn describe_parts(
    s3: &Arc<S3>,
    queue: &Queue,
    spec: &ScanSpec,
    keys: Vec<String>,
) -> Result<Vec<Described>, MergeError> {
    let listed = list_parts(s3, spec).await?;
    let stats = queue.part_stats(&keys).await?;
    stream::iter(keys.into_iter().zip(stats))
        .map(|(key, stats)| {
            let size = listed.get(&key).map(|(size, _)| *size);
            async move {
                let size = match size {
                    Some(size) => size,
                    // A listing may lag behind the store's writes: asked
                    // by name before the part counts as missing.
                    None => size_of(s3, &spec.output_bucket, &key)
                        .await?
                        .ok_or_else(|| MergeError::MissingPart(key.clone()))?,
                };
                let stats = match stats {
                    Some(s) => s,
                    None => read_stats(s3, spec, &key).await?,
                };
                Ok::<_, MergeError>(Described {
                    part: PartIn { key, size },
                    stats,
                })
            }
        })
        .buffered(MERGE_CONCURRENCY)
        .try_collect()
        .await
}

/// An object's size, `None` when it is not there (HEAD 404).
async fn size_of(s3: &S3, bucket: &str, key: &str) -> Result<Option<u64>, S3Error> {
    let head = s3
        .send_retried(bucket, |sdk| sdk.head_object().bucket(bucket).key(key).send())
        .await;
    match head {
        Ok(head) => Ok(Some(head.content_length().unwrap_or(0).max(0) as u64)),
        Err(e) if e.http_status() == Some(404) => Ok(None),
        Err(e) => Err(e),
    }
}

/// A part's stats from its content: for parts Redis has none for (it lost
/// them, or an older worker wrote the part).
async fn read_stats(s3: &S3, spec: &ScanSpec, key: &str) -> Result<PartStats, MergeError> {
    let bad = |reason: String| MergeError::BadPart {
        key: key.to_string(),
        reason,
    };
    let raw = s3.get(&spec.output_bucket, key, None).await?;
    let body = if spec.gzip {
        let mut out = Vec::new();
        flate2::read::MultiGzDecoder::new(&raw[..])
            .read_to_end(&mut out)
            .map_err(|e| bad(format!("gzip: {e}")))?;
        bytes::Bytes::from(out)
    } else {
        raw
    };
    let keys = record_keys(spec.format, &body).map_err(bad)?;
    Ok(PartStats {
        records: keys.len() as u64,
        first: keys.first().cloned().unwrap_or_default(),
        last: keys.last().cloned().unwrap_or_default(),
    })
}

async fn write_result(
    s3: &Arc<S3>,
    spec: &ScanSpec,
    parts: &[Described],
    ahead: &Ahead,
) -> Result<Vec<DataFile>, MergeError> {
    let inputs: Vec<PartIn> = parts.iter().map(|d| d.part.clone()).collect();
    let lead = spec.lead();
    if spec.layout == Layout::Single {
        // Said before anything is written (the up-front check could only
        // assume the least a record takes).
        single_fits(&inputs, &lead)?;
    }
    match (spec.format, spec.layout) {
        (Format::Parquet, Layout::Dataset) => {
            let groups = plan_parquet_files(&inputs, spec.file_size);
            replacing(s3, spec, groups.len(), write_parquet(s3, spec, parts, groups)).await
        }
        (Format::Parquet, Layout::Single) => {
            write_parquet(s3, spec, parts, std::iter::once(0..parts.len()).collect()).await
        }
        (_, Layout::Dataset) => {
            let plans = plan_files(&inputs, &lead, spec.file_size);
            let count = plans.len();
            let write = write_files(s3, spec, parts, plans, |n| spec.data_key(n));
            replacing(s3, spec, count, write).await
        }
        (_, Layout::Single) => write_single(s3, spec, parts, &inputs, &lead, ahead).await,
    }
}

/// Write a dataset of `files` files under `data/` (`write`), then delete
/// the files there that the new ones did not replace: only bucketscan's
/// (see `data_files`).
async fn replacing(
    s3: &S3,
    spec: &ScanSpec,
    files: usize,
    write: impl std::future::Future<Output = Result<Vec<DataFile>, MergeError>>,
) -> Result<Vec<DataFile>, MergeError> {
    let stale = data_files::prepare(s3, spec, files).await?;
    let written = write.await?;
    delete_listed(s3, &spec.output_bucket, &stale).await?;
    Ok(written)
}

/// The single result: straight from the parts, or from data files first.
async fn write_single(
    s3: &Arc<S3>,
    spec: &ScanSpec,
    parts: &[Described],
    inputs: &[PartIn],
    lead: &Bytes,
    ahead: &Ahead,
) -> Result<Vec<DataFile>, MergeError> {
    match plan_single(inputs, lead, spec.file_size) {
        SinglePlan::Direct(pieces) => {
            let pieces = match ahead.parts_staged() {
                0 => pieces,
                // Boxed: the rare path stays off the merge's future.
                _ => Box::pin(with_staged(s3, spec, inputs, lead, ahead))
                    .await?
                    .unwrap_or(pieces),
            };
            let composed = put_file(s3, spec, &spec.result_key(), pieces).await?;
            Ok(vec![describe_file(spec, &spec.result_key(), parts, composed)])
        }
        SinglePlan::TwoLevel(plans) => {
            if !files_fit_one_object(&plans, lead, |i| spec.staging_key(i)) {
                return Err(MergeError::TooBigForSingle {
                    files: plans.len(),
                    file_size: spec.file_size,
                });
            }
            // Staged among the scan's parts, deleted with them.
            let files = write_files(s3, spec, parts, plans, |n| spec.staging_key(n)).await?;
            let keys: Vec<String> = (0..files.len()).map(|i| spec.staging_key(i)).collect();
            let sizes: Vec<u64> = files.iter().map(|f| f.bytes).collect();
            let pieces = plan_from_files(&keys, &sizes, lead).ok_or(MergeError::TooBigForSingle {
                files: files.len(),
                file_size: spec.file_size,
            })?;
            let composed = put_file(s3, spec, &spec.result_key(), pieces).await?;
            Ok(vec![describe_file(spec, &spec.result_key(), parts, composed)])
        }
    }
}

/// The single result's direct plan with what merging ahead staged in place
/// of the parts it holds (the same bytes); `None` when nothing holds.
async fn with_staged(
    s3: &Arc<S3>,
    spec: &ScanSpec,
    inputs: &[PartIn],
    lead: &Bytes,
    ahead: &Ahead,
) -> Result<Option<Vec<Piece>>, S3Error> {
    let listed = list_parts(s3, spec).await?;
    let staged = ahead.in_place_of_parts(inputs, &listed);
    if staged.len() == inputs.len() {
        return Ok(None);
    }
    match plan_single(&staged, lead, spec.file_size) {
        SinglePlan::Direct(pieces) => {
            tracing::info!(
                parts = inputs.len(),
                sources = staged.len(),
                copied = pieces.iter().filter(|p| matches!(p, Piece::Copy(_))).count(),
                of = pieces.len(),
                "merging ahead: staged objects are copied in place of their parts"
            );
            Ok(Some(pieces))
        }
        SinglePlan::TwoLevel(_) => Ok(None),
    }
}

/// A single result must be an object S3 accepts: 5 TiB at most.
fn single_fits(inputs: &[PartIn], lead: &Bytes) -> Result<(), MergeError> {
    let bytes = single_size(inputs, lead);
    if bytes > MAX_OBJECT_SIZE {
        return Err(MergeError::OverMaxObject { bytes });
    }
    Ok(())
}

/// Parquet: each file one part copied, or several rewritten; the single
/// result is one file of every part.
async fn write_parquet(
    s3: &Arc<S3>,
    spec: &ScanSpec,
    parts: &[Described],
    groups: Vec<std::ops::Range<usize>>,
) -> Result<Vec<DataFile>, MergeError> {
    let mut files = Vec::with_capacity(groups.len());
    for (n, group) in groups.into_iter().enumerate() {
        let key = match spec.layout {
            Layout::Dataset => spec.data_key(n),
            Layout::Single => spec.result_key(),
        };
        let members = &parts[group];
        let composed = match members {
            [one] => put_file(s3, spec, &key, plan_copy(&one.part)).await?,
            _ => {
                let keys: Vec<String> = members.iter().map(|d| d.part.key.clone()).collect();
                rewrite_parquet(s3, spec, &keys, &key).await?
            }
        };
        files.push(describe_file(spec, &key, members, composed));
    }
    Ok(files)
}

async fn write_files(
    s3: &Arc<S3>,
    spec: &ScanSpec,
    parts: &[Described],
    plans: Vec<FilePlan>,
    key_of: impl Fn(usize) -> String,
) -> Result<Vec<DataFile>, MergeError> {
    let mut files = Vec::with_capacity(plans.len());
    for (n, plan) in plans.into_iter().enumerate() {
        let key = key_of(n);
        let composed = put_file(s3, spec, &key, plan.pieces).await?;
        files.push(describe_file(spec, &key, &parts[plan.parts], composed));
    }
    Ok(files)
}

async fn put_file(s3: &Arc<S3>, spec: &ScanSpec, key: &str, pieces: Vec<Piece>) -> Result<Composed, S3Error> {
    let target = Target {
        s3,
        bucket: &spec.output_bucket,
        key,
        content_type: spec.format.content_type(spec.gzip),
        concurrency: MERGE_CONCURRENCY,
    };
    compose(&target, pieces).await
}

fn describe_file(spec: &ScanSpec, key: &str, parts: &[Described], composed: Composed) -> DataFile {
    let blocks = blocks_of(spec, parts, composed.bytes);
    DataFile {
        location: format!("s3://{}/{key}", spec.output_bucket),
        first_key: parts.first().map(|d| d.stats.first.clone()),
        last_key: parts.last().map(|d| d.stats.last.clone()),
        records: parts.iter().map(|d| d.stats.records).sum(),
        bytes: composed.bytes,
        etag: composed.etag,
        sha256: None,
        blocks,
    }
}

/// Where each part begins in a text file that is the format's header and
/// the parts one after another (a gzip part is whole members): what an
/// incremental scan seeks to. None when the file is not exactly that (a
/// Parquet file, a single result composed in two levels).
fn blocks_of(spec: &ScanSpec, parts: &[Described], file_bytes: u64) -> Vec<Block> {
    if !spec.format.is_text() {
        return Vec::new();
    }
    let header = spec.lead().len() as u64;
    let mut offset = header;
    let mut blocks = Vec::with_capacity(parts.len());
    for d in parts.iter().filter(|d| d.stats.records > 0) {
        blocks.push(Block {
            first_key: d.stats.first.clone(),
            offset,
        });
        offset += d.part.size;
    }
    if offset != file_bytes {
        return Vec::new();
    }
    blocks
}

/// The counts every dataset manifest has (`scan`'s `DatasetCounts`), present
/// even when 0: Redis keeps only the counts a part added to.
pub const RESULT_COUNTS: [&str; 6] = [
    "objects",
    "written",
    "with_metadata",
    "vanished",
    "errors",
    "bytes",
];

fn sum_counts(shards: &[ShardRecord]) -> BTreeMap<String, u64> {
    let mut total: BTreeMap<String, u64> = RESULT_COUNTS.iter().map(|k| (k.to_string(), 0)).collect();
    for (field, n) in shards.iter().flat_map(|s| &s.counts) {
        *total.entry(field.clone()).or_default() += n;
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listing_of_the_output_out_of_order_fails_one_merge_not_the_scan() {
        let e = MergeError::S3(S3Error::ListingOutOfOrder("b after c".into()));
        assert!(e.is_transient());
        assert!(!MergeError::MissingPart("p".into()).is_transient());
    }

    #[test]
    fn a_single_result_over_5_tib_is_refused_before_anything_is_written() {
        let part = |size| PartIn {
            key: "p".into(),
            size,
        };
        let lead = Bytes::from_static(b"key,size\n");
        let at_most = vec![part(MAX_OBJECT_SIZE - lead.len() as u64)];
        assert!(single_fits(&at_most, &lead).is_ok());
        let over = vec![part(MAX_OBJECT_SIZE / 2), part(MAX_OBJECT_SIZE / 2), part(1)];
        let err = single_fits(&over, &lead).unwrap_err().to_string();
        assert!(err.contains("5 TiB") && err.contains("layout dataset"), "{err}");
    }

    #[test]
    fn the_missing_ranges_message_is_bounded() {
        let mut m = manifest_of(3);
        m.dead[0].range = crate::keyspace::shard::Shard::prefix("k".repeat(1 << 20));
        m.dead[0].last_error = Some("e".repeat(2 << 20));
        let message = m.missing_message();
        assert!(message.len() < 2_600, "{} bytes", message.len());
        assert!(message.starts_with("3 shard(s) failed for good"), "{message}");
        let short = manifest_of(1).missing_message();
        assert!(
            short.ends_with(r#"first: "p/" (AccessDenied: Access Denied (HTTP 403))"#),
            "{short}"
        );
    }

    /// A manifest of `n` shards, all dead.
    fn manifest_of(n: usize) -> Manifest {
        let dead = DeadShard {
            range: crate::keyspace::shard::Shard::prefix("p/"),
            failures: 5,
            last_error: Some("AccessDenied: Access Denied (HTTP 403)".into()),
        };
        let spec: ScanSpec = serde_json::from_value(serde_json::json!({
            "bucket": "b", "prefix": "", "output_bucket": "o", "output_prefix": "r/",
            "gzip": false, "only_with_metadata": false, "max_failures": 5, "scan_id": "s"
        }))
        .unwrap();
        Manifest {
            scan: "s".into(),
            result: "s3://o/r/result.jsonl".into(),
            layout: None,
            format: None,
            gzip: None,
            bucket: None,
            prefix: None,
            result_bytes: 0,
            shards: n as u64,
            shards_done: 0,
            shards_dead: n as u64,
            attempts: 0,
            shards_retried: 0,
            splits: 0,
            counts: BTreeMap::new(),
            progress: BTreeMap::new(),
            dead: vec![dead; n],
            created: None,
            merged: String::new(),
            spec,
            files: vec![],
            records: 0,
            store_check: None,
            store_check_error: None,
            incremental: None,
            partial: true,
            retries: 0,
            record_format: None,
        }
    }

    #[test]
    fn a_manifest_of_another_round_is_not_this_rounds() {
        let json = serde_json::to_string(&manifest_of(1)).unwrap();
        assert!(of_round(&json, 0).is_some());
        assert!(of_round(&json, 1).is_none(), "a stale merge's manifest");
    }

    #[test]
    fn redis_keeps_a_manifest_of_bounded_size() {
        let manifest = manifest_of;
        // A few dead shards: whole.
        let small = manifest(10);
        assert_eq!(redis_copy(&small), serde_json::to_string_pretty(&small).unwrap());
        // Every one of 100,000 shards (targetShards' most) dead: cut, and
        // still naming the first and counting them all.
        let copy = redis_copy(&manifest(100_000));
        assert!(copy.len() <= MANIFEST_IN_REDIS_BYTES, "{}", copy.len());
        let back: Manifest = serde_json::from_str(&copy).unwrap();
        assert_eq!(back.shards_dead, 100_000);
        assert!(!back.dead.is_empty() && back.dead.len() < 100_000);
        let per_dead = serde_json::to_string_pretty(&manifest(1000)).unwrap().len() / 1000;
        eprintln!("about {per_dead} bytes per dead shard in a manifest");
    }
}
