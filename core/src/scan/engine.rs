//! The scan engine: LIST one shard page by page and HEAD every key, with a
//! bounded number of HEADs in flight. A lister task runs ahead of the HEADs
//! (the next page is fetched while this page's HEADs run); records leave in
//! key order, so "the last key written" is a valid checkpoint. Where the
//! store lists metadata (`listed`), the listing's entries become records
//! without a HEAD.
//!
//! With `--versions` the listing is of versions (`engine::versions`), and
//! "the last record written" is a key and a version of it.
//!
//! May import: `record`, `listed`, `filter`, `column_options`, `partition`, `keyspace` and `s3`.

use crate::keyspace::shard::Shard;
use crate::s3::error::S3Error;
use crate::s3::HeadClient;
use crate::s3::{BucketLister, ListRequest, ListedObject, Pages, S3};
use crate::s3::{HeadInfo, HeadResult};
use crate::scan::baseline::{thick, Baseline, RangeReader};
use crate::scan::column_options::ColumnOptions;
use crate::scan::filter::ObjectFilter;
use crate::scan::listed::{
    disagreement, record_from_listing, sample_indices, MetadataLister, MetadataSource,
};
use crate::scan::partition::{Partition, Partitions};
use crate::scan::record::{ChangeKind, ObjectColumns, Previous, Record, Status};
use crate::scan::resume::{ResumePolicy, Resumption};
use futures::future::Either;
use futures::StreamExt;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use tokio::sync::{mpsc, Semaphore};

mod versions;

#[derive(Clone, Debug)]
pub struct EngineOptions {
    pub bucket: String,
    /// HEAD requests in flight in this process, across all shards.
    pub concurrency: usize,
    /// Keep only objects that have user metadata (and errors, so nothing is
    /// dropped silently).
    pub only_with_metadata: bool,
    pub page_size: i32,
    /// Ceiling on HEAD requests per second from this process (`None`: none).
    pub max_rate: Option<f64>,
    /// HEAD every object, or take metadata from the listing where the store
    /// gives it (docs/metadata-source.md).
    pub metadata_source: MetadataSource,
    /// Objects to leave out, judged from the listing before any HEAD
    /// (`scan::filter`).
    pub filter: ObjectFilter,
    /// Optional columns: checksums, tags, versions.
    pub columns: ColumnOptions,
}

/// What the consumer does with one listed entry.
enum Task {
    /// HEAD it.
    Head(ListedObject),
    /// HEAD this version of it (`--versions`). Boxed: the variant stays
    /// smaller than a record, so tasks and entries of scans without versions
    /// keep their size.
    HeadVersion(ListedObject, Box<VersionOf>),
    /// Its record is made already: from the listing, by `auto`'s check, or
    /// a delete marker's (boxed, as records are through the engine).
    Made(Box<Record>),
}

impl Task {
    fn key(&self) -> &str {
        match self {
            Task::Head(obj) | Task::HeadVersion(obj, _) => &obj.key,
            Task::Made(record) => &record.key,
        }
    }
}

// A task is no larger than a record: `--versions` costs scans without it no
// byte per listed entry.
const _: () = assert!(std::mem::size_of::<Task>() <= std::mem::size_of::<Record>());

/// Which version of its key a listed entry is (`--versions`).
#[derive(Debug)]
struct VersionOf {
    version_id: String,
    is_latest: bool,
}

impl VersionOf {
    /// The version columns of a record of this version (not a delete marker).
    fn fill(self, columns: &mut ObjectColumns) {
        columns.version_id = Some(self.version_id);
        columns.is_latest = Some(self.is_latest);
        columns.is_delete_marker = Some(false);
    }
}

/// One entry of a shard's scan in key order, as the lister sends it.
// Listed is the common variant, sent once per object: not boxed.
#[allow(clippy::large_enum_variant)]
enum Entry {
    /// A listed object, with its baseline record (incremental scans).
    Listed(Task, Option<Box<Record>>),
    /// A baseline object no longer listed (incremental scans).
    Removed(Box<Record>),
    /// An unchanged object's baseline record, taken as it is: no HEAD and
    /// no change to look for (incremental scans). Moved, not cloned beside
    /// the baseline record as a `Listed` would be: at 10^6 objects the
    /// clones and their comparison were a tenth of an incremental scan's
    /// CPU. Boxed, as every record on its way through the engine: a record
    /// is some 500 bytes, moved a dozen times between the baseline and the
    /// output (channels, the reorder window's heap), and those copies were
    /// a fifth of an incremental scan's CPU.
    Reused(Box<Record>),
}

impl Entry {
    fn key(&self) -> &str {
        match self {
            Entry::Listed(task, _) => task.key(),
            Entry::Removed(old) => &old.key,
            Entry::Reused(record) => &record.key,
        }
    }
}

/// What an incremental scan compares against.
#[derive(Debug)]
pub struct Incremental {
    pub baseline: Arc<Baseline>,
    /// Whether this scan's store check saw LastModified move on a metadata
    /// replace: unchanged objects may be taken from the baseline. Otherwise
    /// every object is HEADed and the baseline only gives the change set.
    pub trust_last_modified: Trust,
}

/// Whether LastModified may be trusted: known at once (a fleet's check,
/// made at planning), or once the store check that runs beside the
/// listing settles (`scan`: up to a second; the first object that could be
/// taken from the baseline waits for it).
#[derive(Debug)]
pub struct Trust {
    answer: tokio::sync::watch::Receiver<Option<bool>>,
    known: std::sync::OnceLock<bool>,
}

impl Trust {
    pub fn known(trust: bool) -> Trust {
        let (_, answer) = tokio::sync::watch::channel(Some(trust));
        Trust {
            answer,
            known: std::sync::OnceLock::from(trust),
        }
    }

    /// A trust that `send`s its answer later; a sender dropped without one
    /// means no trust (every object is HEADed).
    pub fn pending() -> (tokio::sync::watch::Sender<Option<bool>>, Trust) {
        let (tell, answer) = tokio::sync::watch::channel(None);
        (
            tell,
            Trust {
                answer,
                known: std::sync::OnceLock::new(),
            },
        )
    }

    /// The answer, once there is one.
    pub async fn get(&self) -> bool {
        if let Some(known) = self.known.get() {
            return *known;
        }
        let mut answer = self.answer.clone();
        let trust = match answer.wait_for(Option::is_some).await {
            Ok(seen) => seen.unwrap_or(false),
            Err(_) => false,
        };
        *self.known.get_or_init(|| trust)
    }

    /// The answer if there is one yet (`None`: the check has not settled).
    pub fn now(&self) -> Option<bool> {
        self.known.get().copied().or(*self.answer.borrow())
    }
}

/// Live counters, shared with progress reporting.
#[derive(Debug, Default)]
pub struct Counters {
    pub listed: AtomicU64,
    pub heads: AtomicU64,
    pub with_metadata: AtomicU64,
    pub vanished: AtomicU64,
    pub errors: AtomicU64,
    pub bytes: AtomicU64,
    pub pages: AtomicU64,
    /// HEAD answers that were throttling (503 SlowDown, 429), retries included.
    pub throttles: AtomicU64,
    /// Sum of HEAD times, each HEAD's last attempt (µs; the backoff before a
    /// retry is not the store's): the rate governor watches its mean for a
    /// store that starts queueing.
    pub head_micros: AtomicU64,
    /// Records made from the listing's metadata, without a HEAD.
    pub from_listing: AtomicU64,
    /// Shards (or what was left of them) that `auto` HEADed in full because
    /// the listing's metadata disagreed with a HEAD.
    pub listing_distrusted: AtomicU64,
    /// Shard scans resumed after a transient failure (see `resume`).
    pub resumed: AtomicU64,
    /// Incremental scans: records taken from the baseline without a HEAD,
    /// and changes found, by kind.
    pub reused: AtomicU64,
    pub added: AtomicU64,
    pub removed: AtomicU64,
    pub content_changed: AtomicU64,
    pub metadata_changed: AtomicU64,
    /// Listed objects the filter left out: no HEAD, no record, not counted
    /// in `listed`.
    pub filtered: AtomicU64,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct CountersSnapshot {
    pub listed: u64,
    pub heads: u64,
    pub with_metadata: u64,
    pub vanished: u64,
    pub errors: u64,
    pub bytes: u64,
    pub pages: u64,
    pub throttles: u64,
    pub head_micros: u64,
    pub from_listing: u64,
    pub listing_distrusted: u64,
    pub resumed: u64,
    pub reused: u64,
    pub added: u64,
    pub removed: u64,
    pub content_changed: u64,
    pub metadata_changed: u64,
    pub filtered: u64,
    /// Bytes of the baseline read (incremental scans; see
    /// [`Engine::progress_snapshot`]: the baseline counts them, not `Counters`).
    pub baseline_bytes: u64,
}

impl Counters {
    pub fn snapshot(&self) -> CountersSnapshot {
        CountersSnapshot {
            listed: self.listed.load(Relaxed),
            heads: self.heads.load(Relaxed),
            with_metadata: self.with_metadata.load(Relaxed),
            vanished: self.vanished.load(Relaxed),
            errors: self.errors.load(Relaxed),
            bytes: self.bytes.load(Relaxed),
            pages: self.pages.load(Relaxed),
            throttles: self.throttles.load(Relaxed),
            head_micros: self.head_micros.load(Relaxed),
            from_listing: self.from_listing.load(Relaxed),
            listing_distrusted: self.listing_distrusted.load(Relaxed),
            resumed: self.resumed.load(Relaxed),
            reused: self.reused.load(Relaxed),
            added: self.added.load(Relaxed),
            removed: self.removed.load(Relaxed),
            content_changed: self.content_changed.load(Relaxed),
            metadata_changed: self.metadata_changed.load(Relaxed),
            filtered: self.filtered.load(Relaxed),
            baseline_bytes: 0,
        }
    }
}

/// Records of one shard that may wait, finished, for a slower HEAD before
/// them, as a multiple of the HEADs in flight.
const REORDER_SLACK: usize = 4;

pub struct Engine {
    pub s3: Arc<S3>,
    head: HeadClient,
    pub opts: EngineOptions,
    in_flight: Arc<Semaphore>,
    /// HEADs per second allowed now (f64 bits; 0: no limit): `max_rate`, or
    /// what the fleet's rate governor gives this worker (`set_rate`).
    rate: AtomicU64,
    /// Start time of the next HEAD under `rate`.
    next_slot: std::sync::Mutex<tokio::time::Instant>,
    pub counters: Counters,
    /// The store refused `metadata=true` once: list without it from then on.
    listing_metadata_refused: std::sync::atomic::AtomicBool,
    /// Key partitions the rate governor paces apart (see `partition`): the
    /// keys of a tracked partition skip `rate` and wait for its own.
    pub partitions: Partitions,
    /// What a shard scan does after a transient failure (`scan_shard`).
    pub resume: ResumePolicy,
    /// Keys whose HEAD used up its retries on a transient failure, and in
    /// how many passes (see [`HEAD_PASSES`]); `failing` counts them, so a
    /// HEAD that succeeds looks at the map only when it holds something.
    head_failures: std::sync::Mutex<std::collections::HashMap<String, u32>>,
    failing: AtomicU64,
    /// Set once before scanning when the scan is incremental.
    incremental: std::sync::OnceLock<Incremental>,
}

/// Passes of a shard in which one object's HEAD may use up its retries on
/// transient failures before its record says it could not be read. A store
/// that fails for one object only (a gateway's 502 for some names, an object
/// that lost its read quorum) would otherwise end every pass at that key and
/// fail the whole shard: what such an object gets is an `error` record, as
/// any object-specific refusal does.
pub const HEAD_PASSES: u32 = 3;

/// Where a shard's scan must stop, shared with a worker that splits the
/// shard while it is being scanned: lowering the end stops the listing there
/// and drops listed keys past it before they are HEADed.
#[derive(Debug, Default)]
pub struct Frontier {
    end: std::sync::Mutex<Option<String>>,
}

impl Frontier {
    /// Stop before `end` (exclusive). Records already made for keys past it
    /// are the caller's to drop.
    pub fn stop_before(&self, end: &str) {
        let mut current = self.end.lock().expect("lock");
        if current.as_deref().is_none_or(|e| end < e) {
            *current = Some(end.to_string());
        }
    }

    fn is_past_end(&self, key: &str) -> bool {
        self.end
            .lock()
            .expect("lock")
            .as_deref()
            .is_some_and(|e| key >= e)
    }
}

/// What a finished shard scan saw.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ShardOutcome {
    pub listed: u64,
    pub last_key: Option<String>,
    /// `--versions`: the version of `last_key` last sent (the resume point
    /// is that version, not the whole key), as `Record::resume_version` encodes it.
    pub last_version: Option<String>,
}

impl Engine {
    pub fn new(s3: Arc<S3>, head: HeadClient, opts: EngineOptions) -> Arc<Engine> {
        let ceiling = opts.max_rate;
        Arc::new(Engine {
            in_flight: Arc::new(Semaphore::new(opts.concurrency.max(1))),
            next_slot: std::sync::Mutex::new(tokio::time::Instant::now()),
            rate: AtomicU64::new(opts.max_rate.filter(|r| *r > 0.0).map_or(0, f64::to_bits)),
            s3,
            head,
            opts,
            counters: Counters::default(),
            listing_metadata_refused: Default::default(),
            partitions: Partitions::with_ceiling(ceiling),
            resume: ResumePolicy::default(),
            head_failures: Default::default(),
            failing: AtomicU64::new(0),
            incremental: std::sync::OnceLock::new(),
        })
    }

    /// Make the scan incremental against `incremental.baseline` (before the
    /// first shard; later calls are ignored).
    pub fn set_incremental(&self, incremental: Incremental) {
        let _ = self.incremental.set(incremental);
    }

    pub fn incremental(&self) -> Option<&Incremental> {
        self.incremental.get()
    }

    /// The counters, with the baseline's bytes read so far: what a fleet
    /// worker reports, so the merged manifest says what the baseline cost.
    pub fn progress_snapshot(&self) -> CountersSnapshot {
        CountersSnapshot {
            baseline_bytes: self
                .incremental()
                .map_or(0, |i| i.baseline.bytes_read.load(Relaxed)),
            ..self.counters.snapshot()
        }
    }

    /// Scan one shard, sending every record in key order to `out` (writers
    /// drop the ones `keep` rejects; the others still advance checkpoints).
    /// A transient failure pauses the scan and resumes it after the last
    /// record sent (`resume`); only final errors, or no record for the
    /// policy's patience, end it with an error.
    pub async fn scan_shard(
        self: &Arc<Self>,
        shard: &Shard,
        out: &mpsc::Sender<Box<Record>>,
    ) -> Result<ShardOutcome, S3Error> {
        let mut outcome = ShardOutcome::default();
        let mut resumption = Resumption::new(self.resume.clone());
        loop {
            let range = match &outcome.last_key {
                Some(last) => shard.resumed_after(last),
                None => shard.clone(),
            };
            let after_version = outcome.last_version.clone();
            let listed_before = outcome.listed;
            let result = self
                .scan_range(
                    &range,
                    after_version,
                    Arc::new(Frontier::default()),
                    out,
                    &mut outcome,
                )
                .await;
            let e = match result {
                Ok(()) => return Ok(outcome),
                Err(e) if e.is_retryable() => e,
                Err(e) => return Err(e),
            };
            let Some(pause) = resumption.after_failure(outcome.listed > listed_before) else {
                return Err(e);
            };
            self.counters.resumed.fetch_add(1, Relaxed);
            tracing::warn!(
                shard = %shard, resume_after = ?outcome.last_key, error = %e, pause_ms = pause.as_millis() as u64,
                "transient failure: the shard resumes after its last record"
            );
            tokio::time::sleep(pause).await;
        }
    }

    /// One pass over `shard` with an end that can be lowered while the scan
    /// runs (live splitting). A failure ends the pass: the records sent
    /// before it are good, and the caller decides whether to resume.
    /// `after_version` (`--versions`): the pass starts after this version
    /// of the shard's `start_after` key, not after the whole key.
    pub async fn scan_shard_live(
        self: &Arc<Self>,
        shard: &Shard,
        after_version: Option<String>,
        frontier: Arc<Frontier>,
        out: &mpsc::Sender<Box<Record>>,
    ) -> Result<ShardOutcome, S3Error> {
        let mut outcome = ShardOutcome::default();
        self.scan_range(shard, after_version, frontier, out, &mut outcome)
            .await?;
        Ok(outcome)
    }

    /// One pass, counting what it sent in `outcome` as it goes (so a failed
    /// pass still says where it got to).
    async fn scan_range(
        self: &Arc<Self>,
        shard: &Shard,
        after_version: Option<String>,
        frontier: Arc<Frontier>,
        out: &mpsc::Sender<Box<Record>>,
        outcome: &mut ShardOutcome,
    ) -> Result<(), S3Error> {
        let window = self.opts.concurrency.max(1);
        let page = self.opts.page_size.clamp(1, 1000) as usize;
        let (keys_tx, keys_rx) = mpsc::channel::<Entry>(2 * page);
        let versions = self.opts.columns.versions;
        let lister = match versions {
            false => tokio::spawn(self.clone().list_shard(shard.clone(), frontier.clone(), keys_tx)),
            true => tokio::spawn(self.clone().list_versions(
                shard.clone(),
                after_version,
                frontier.clone(),
                keys_tx,
            )),
        };

        let engine = self.clone();
        let records = tokio_stream_from(keys_rx)
            .filter(move |task| std::future::ready(!frontier.is_past_end(task.key())))
            // One at a time and in key order, each HEAD waits for its
            // in-flight permit before its task exists: the process then
            // holds at most `concurrency` HEAD tasks, not one for every slot
            // of every shard's window waiting for a permit (16 shards of
            // 1,024 slots were 250 MB of task state, and the kernel zeroing
            // its fresh pages was 7 % of the CPU, docs/head-path.md).
            .then(move |entry| engine.clone().entry_future(entry))
            // Records leave in key order, so a HEAD that finished waits for
            // the slower ones before it, and its slot in `buffered` stays
            // taken meanwhile: with only `window` slots a slow HEAD (a tail
            // latency) would hold back the requests after it. The
            // `in_flight` permits bound the requests; these slots only bound
            // the records waiting for their turn.
            .buffered(window.saturating_mul(REORDER_SLACK));
        let mut records = std::pin::pin!(records);
        while let Some(joined) = records.next().await {
            let record = joined.map_err(|e| S3Error::Other(format!("HEAD task failed: {e}")))??;
            if !record.is_removal() {
                outcome.listed += 1;
            }
            // The last key's buffer is reused: one allocation less a record.
            match &mut outcome.last_key {
                Some(last) => {
                    last.clear();
                    last.push_str(&record.key);
                }
                None => outcome.last_key = Some(record.key.clone()),
            }
            if versions {
                outcome.last_version = record.resume_version();
            }
            out.send(record)
                .await
                .map_err(|_| S3Error::Other("output closed".into()))?;
        }
        lister
            .await
            .map_err(|e| S3Error::Other(format!("lister failed: {e}")))??;
        Ok(())
    }

    /// The future of one entry's record, with what changed since the
    /// baseline when the scan is incremental.
    async fn entry_future(
        self: Arc<Self>,
        entry: Entry,
    ) -> impl std::future::Future<Output = Result<Result<Box<Record>, S3Error>, tokio::task::JoinError>> {
        use futures::FutureExt;
        match entry {
            Entry::Removed(old) => {
                self.counters.removed.fetch_add(1, Relaxed);
                Either::Left(std::future::ready(Ok(Ok(removed(old)))))
            }
            Entry::Reused(record) => Either::Left(std::future::ready(Ok(Ok(record)))),
            Entry::Listed(task, old) => {
                let record = self.clone().task_future(task).await;
                let engine = self.clone();
                Either::Right(
                    record.map(move |joined| {
                        joined.map(|made| made.map(|record| engine.with_change(record, old)))
                    }),
                )
            }
        }
    }

    /// `record` with what changed since its baseline record `old`
    /// (incremental scans only; others pass it through).
    fn with_change(&self, mut record: Box<Record>, old: Option<Box<Record>>) -> Box<Record> {
        if self.incremental.get().is_none() {
            return record;
        }
        let Some(kind) = change_of(&record, old.as_deref()) else {
            return record;
        };
        let counter = match kind {
            ChangeKind::Added => &self.counters.added,
            ChangeKind::Removed => &self.counters.removed,
            ChangeKind::ContentChanged => &self.counters.content_changed,
            ChangeKind::MetadataChanged => &self.counters.metadata_changed,
        };
        counter.fetch_add(1, Relaxed);
        record.change = Some(kind);
        record.previous = old.map(|o| Box::new(Previous::of(&o)));
        record
    }

    /// The future of one listed entry's record: a spawned HEAD, started
    /// once it holds its in-flight permit, or the record already made.
    async fn task_future(
        self: Arc<Self>,
        task: Task,
    ) -> impl std::future::Future<Output = Result<Result<Box<Record>, S3Error>, tokio::task::JoinError>> {
        let (obj, version) = match task {
            Task::Head(obj) => (obj, None),
            Task::HeadVersion(obj, version) => (obj, Some(version)),
            Task::Made(record) => return Either::Right(std::future::ready(Ok(Ok(record)))),
        };
        let permit = self
            .in_flight
            .clone()
            .acquire_owned()
            .await
            .expect("never closed");
        // Boxed: the task then holds a pointer, not the whole HEAD state
        // machine, which tokio would otherwise copy through spawn's frames,
        // into its cell and again when it replaces the finished future
        // (docs/head-path.md).
        Either::Left(tokio::spawn(Box::pin(async move {
            let record = self.head_object(obj, version).await;
            drop(permit);
            record.map(Box::new)
        })))
    }

    /// Wait for this HEAD's slot under the request-rate ceiling: slots are
    /// handed out `1/max_rate` apart, so the rate holds across all shards.
    async fn pace(&self) {
        let Some(rate) = self.rate() else {
            return;
        };
        let slot = {
            let mut next = self.next_slot.lock().expect("lock");
            let slot = (*next).max(tokio::time::Instant::now());
            *next = slot + crate::scan::partition::slot_interval(rate);
            slot
        };
        tokio::time::sleep_until(slot).await;
    }

    /// Run a governed request about `key` (a HEAD, a GetObjectTagging) with
    /// its retries: every attempt waits for its slot under the key's
    /// partition's rate (or the engine's), and every throttling answer is
    /// counted when it comes. Returns the result, the last attempt's
    /// latency in µs (not the backoff before it, which is ours: with it,
    /// every throttled window looked like a latency rise to the governor
    /// too) and the key's partition, if tracked.
    ///
    /// Retries paced: sent as soon as their jittered backoff ended, a
    /// throttled fleet's retries came back in clumps that a store's short
    /// queue turned away. Throttles counted when they come: counted when
    /// the request ended, one refused for seconds before the governor's cut
    /// put all its refusals in the window it was served in. Both echoes cut
    /// the rate again at half the store's capacity, which the governor then
    /// kept (bench/tests/throttled_scan.rs at 0.37 C).
    async fn governed<T, F, Fut>(&self, key: &str, op: F) -> (Result<T, S3Error>, u64, Option<Arc<Partition>>)
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Result<T, S3Error>>,
    {
        let partition = self.partitions.find(key);
        // Tracked from its first throttling answer on (slow path:
        // throttling answers are rare next to HEADs).
        let tracked_since = std::sync::OnceLock::<Arc<Partition>>::new();
        let last_attempt_micros = AtomicU64::new(0);
        let pace = || async {
            match partition.as_ref().or(tracked_since.get()) {
                Some(p) => p.pace().await,
                None => self.pace().await,
            }
        };
        let result = self
            .s3
            .retry
            .run_paced(&self.s3.retries, pace, || {
                let (op, partition, tracked_since, micros) =
                    (&op, &partition, &tracked_since, &last_attempt_micros);
                // The attempt is made inside the block, not captured by it:
                // a future captured, then awaited, is held twice (the
                // capture and the await's own slot), and a HEAD's nested
                // futures doubled at every such layer.
                async move {
                    let started = std::time::Instant::now();
                    let r = op().await;
                    micros.store(started.elapsed().as_micros() as u64, Relaxed);
                    if matches!(r, Err(S3Error::Throttled { .. })) {
                        self.count_throttle(key, partition.as_ref(), tracked_since);
                    }
                    r
                }
            })
            .await;
        let partition = partition.or(tracked_since.into_inner());
        (result, last_attempt_micros.into_inner(), partition)
    }

    /// Count a throttling answer about `key` in its partition (tracking it
    /// from now on) and in the totals. The partition first: the governor
    /// reads the totals first, so the catch-all (totals less partitions)
    /// never gets a partition's throttles.
    fn count_throttle(
        &self,
        key: &str,
        partition: Option<&Arc<Partition>>,
        tracked_since: &std::sync::OnceLock<Arc<Partition>>,
    ) {
        let p = partition.or_else(|| {
            if tracked_since.get().is_none() {
                if let Some(p) = self.partitions.track(key) {
                    let _ = tracked_since.set(p);
                }
            }
            tracked_since.get()
        });
        if let Some(p) = p {
            p.throttles.fetch_add(1, Relaxed);
        }
        self.counters.throttles.fetch_add(1, Relaxed);
    }

    /// HEADs per second allowed now, if limited.
    pub fn rate(&self) -> Option<f64> {
        let bits = self.rate.load(Relaxed);
        (bits != 0).then(|| f64::from_bits(bits))
    }

    /// Limit HEADs to `rate` per second from now on, never above `max_rate`
    /// (`None`: only `max_rate`).
    pub fn set_rate(&self, rate: Option<f64>) {
        let rate = match (rate.filter(|r| *r > 0.0), self.opts.max_rate.filter(|r| *r > 0.0)) {
            (Some(r), Some(m)) => Some(r.min(m)),
            (r, m) => r.or(m),
        };
        self.rate.store(rate.map_or(0, f64::to_bits), Relaxed);
    }

    /// Does the record belong in the output? (`--only-with-metadata` keeps
    /// objects with metadata, and errors, so nothing is dropped silently.)
    pub fn keep(&self, record: &Record) -> bool {
        !self.opts.only_with_metadata
            || record.status == Status::Error
            || (record.status == Status::Ok && record.has_metadata())
    }

    /// LIST the shard into `keys`, stopping at its end key (or the
    /// frontier's, if lowered).
    async fn list_shard(
        self: Arc<Self>,
        shard: Shard,
        frontier: Arc<Frontier>,
        keys: mpsc::Sender<Entry>,
    ) -> Result<(), S3Error> {
        let mut baseline = self
            .incremental
            .get()
            .map(|i| i.baseline.range(self.s3.clone(), &shard));
        // A listing holds no checksum values: with `checksums` every object
        // is HEADed, whatever the metadata source.
        let source = match self.opts.columns.checksums {
            true => MetadataSource::Head,
            false => self.opts.metadata_source,
        };
        let req = ListRequest {
            prefix: shard.prefix.clone(),
            start_after: shard.start_after.clone(),
            max_keys: self.opts.page_size,
            with_metadata: source.asks_listing(),
            ..ListRequest::default()
        };
        let lister = MetadataLister {
            inner: BucketLister {
                s3: &self.s3,
                bucket: &self.opts.bucket,
            },
            refused: &self.listing_metadata_refused,
        };
        let mut pages = Pages::new(&lister, req);
        // `auto` stops trusting the listing for the rest of the shard at the
        // first disagreement.
        let mut trusted = source.asks_listing();
        while let Some(page) = pages.next().await? {
            self.counters.pages.fetch_add(1, Relaxed);
            let mut objects = page.objects;
            let end = objects
                .iter()
                .position(|o| shard.is_past_end(&o.key) || frontier.is_past_end(&o.key));
            if let Some(end) = end {
                objects.truncate(end);
            }
            self.drop_filtered(&mut objects);
            // Sent as they are made, not gathered first: a page's tasks in a
            // new vector of their own were a large allocation per page, on
            // pages the kernel had to zero again (docs/head-path.md).
            let tasks: Box<dyn Iterator<Item = Task> + Send + '_> = if !trusted {
                Box::new(objects.into_iter().map(Task::Head))
            } else if source == MetadataSource::Auto {
                let (tasks, agreed) = self.checked_tasks(objects).await?;
                trusted = agreed;
                Box::new(tasks.into_iter())
            } else {
                Box::new(objects.into_iter().map(|o| self.listed_task(o)))
            };
            for task in tasks {
                self.counters.listed.fetch_add(1, Relaxed);
                if !self.send_paired(task, baseline.as_mut(), &keys).await? {
                    return Ok(()); // the consumer stopped (it has an error to report)
                }
            }
            if end.is_some() {
                break;
            }
        }
        // Baseline objects of the range past the last one listed are gone,
        // up to where the scan stops (a split gave the rest away).
        if let Some(baseline) = baseline.as_mut() {
            while let Some(old) = baseline.next_before(None).await? {
                if frontier.is_past_end(&old.key) {
                    break;
                }
                if keys.send(Entry::Removed(old)).await.is_err() {
                    return Ok(());
                }
            }
        }
        Ok(())
    }

    /// Send one listed entry, after the baseline objects before it that are
    /// no longer listed, paired with its own baseline record; one whose
    /// record still holds is not HEADed. False: the consumer stopped.
    async fn send_paired(
        &self,
        task: Task,
        baseline: Option<&mut RangeReader>,
        keys: &mpsc::Sender<Entry>,
    ) -> Result<bool, S3Error> {
        let Some(baseline) = baseline else {
            return Ok(keys.send(Entry::Listed(task, None)).await.is_ok());
        };
        while let Some(gone) = baseline.next_before(Some(task.key())).await? {
            if keys.send(Entry::Removed(gone)).await.is_err() {
                return Ok(false);
            }
        }
        let old = baseline.take(task.key()).await?;
        let trusted = match (&task, &old, self.incremental.get()) {
            (Task::Head(_), Some(_), Some(i)) => i.trust_last_modified.get().await,
            _ => false,
        };
        let entry = match (task, old) {
            (Task::Head(obj), Some(old)) if trusted && self.may_reuse(&old, &obj) => {
                // Counted as reused, not as from the listing: summaries and
                // progress say where each record came from.
                self.counters.reused.fetch_add(1, Relaxed);
                self.count_record(&old);
                Entry::Reused(reused(old, &obj)?)
            }
            (task, old) => Entry::Listed(task, old.map(thick).transpose()?),
        };
        Ok(keys.send(entry).await.is_ok())
    }

    fn may_reuse(&self, old: &Record, obj: &ListedObject) -> bool {
        self.incremental
            .get()
            .is_some_and(|i| i.baseline.reusable(old, obj))
    }

    /// The entry's record from the listing when it carries metadata, else a
    /// HEAD (no `<UserMetadata>` may mean the credentials may not read it).
    fn listed_task(&self, obj: ListedObject) -> Task {
        match record_from_listing(&obj, self.opts.columns.tags) {
            Some(record) => {
                self.count_listed_record(&record);
                Task::Made(Box::new(record))
            }
            None => Task::Head(obj),
        }
    }

    fn count_listed_record(&self, record: &Record) {
        self.counters.from_listing.fetch_add(1, Relaxed);
        self.count_record(record);
    }

    /// A record made without a HEAD: its bytes and whether it has metadata.
    fn count_record(&self, record: &Record) {
        self.counters.bytes.fetch_add(record.size, Relaxed);
        if record.has_metadata() {
            self.counters.with_metadata.fetch_add(1, Relaxed);
        }
    }

    /// `auto` on one page: HEAD a sample of the entries that carry metadata
    /// and compare. When all agree, the page's records come from the listing
    /// (the sample's from its HEADs); at the first disagreement every entry
    /// of the page is HEADed, and `false` says to trust no more pages.
    async fn checked_tasks(&self, objects: Vec<ListedObject>) -> Result<(Vec<Task>, bool), S3Error> {
        let with_listing: Vec<usize> = (0..objects.len())
            .filter(|i| objects[*i].listed_metadata.is_some())
            .collect();
        let sample: Vec<usize> = sample_indices(with_listing.len())
            .into_iter()
            .map(|i| with_listing[i])
            .collect();
        let heads = futures::future::join_all(sample.iter().map(|i| self.head_listed(objects[*i].clone())))
            .await
            .into_iter()
            .collect::<Result<Vec<Record>, S3Error>>()?;
        let mismatch = sample.iter().zip(&heads).find_map(|(i, head)| {
            let listed = record_from_listing(&objects[*i], self.opts.columns.tags)?;
            let fields = disagreement(&listed, head);
            (!fields.is_empty()).then(|| (objects[*i].key.clone(), fields))
        });
        if let Some((key, fields)) = mismatch {
            self.counters.listing_distrusted.fetch_add(1, Relaxed);
            tracing::warn!(
                bucket = %self.opts.bucket, key = %key, fields = ?fields,
                "the listing's metadata disagrees with HEAD: this shard is HEADed object by object from here"
            );
            let mut heads = sample
                .into_iter()
                .zip(heads)
                .collect::<std::collections::BTreeMap<_, _>>();
            let tasks = objects
                .into_iter()
                .enumerate()
                .map(|(i, o)| {
                    heads
                        .remove(&i)
                        .map_or(Task::Head(o), |r| Task::Made(Box::new(r)))
                })
                .collect();
            return Ok((tasks, false));
        }
        let mut heads = sample
            .into_iter()
            .zip(heads)
            .collect::<std::collections::BTreeMap<_, _>>();
        let tasks = objects
            .into_iter()
            .enumerate()
            .map(|(i, o)| match heads.remove(&i) {
                Some(record) => Task::Made(Box::new(record)),
                None => self.listed_task(o),
            })
            .collect();
        Ok((tasks, true))
    }

    /// HEAD one listed object into a record. An answer about this one object
    /// (refused: 403, 400, 405, 501; an answer that breaks the protocol)
    /// becomes an `error` record and the scan goes on. Everything else ends
    /// the shard's pass instead of marking the object: errors about the
    /// client (credentials, configuration), which every HEAD would meet,
    /// and transient failures that outlasted the retries (throttling, 5xx,
    /// timeouts, resets), after which the shard resumes at this key.
    pub async fn head_listed(&self, obj: ListedObject) -> Result<Record, S3Error> {
        let _permit = self.in_flight.acquire().await.expect("semaphore never closed");
        self.head_object(obj, None).await
    }

    /// [`Engine::head_listed`] for a caller that holds an in-flight permit;
    /// of one version of the object when `version` says which.
    async fn head_object(
        &self,
        obj: ListedObject,
        version: Option<Box<VersionOf>>,
    ) -> Result<Record, S3Error> {
        let (result, micros, partition): (HeadResult, _, _) = self
            .governed(&obj.key, || async {
                match &version {
                    None => self.head.head(&self.opts.bucket, &obj.key).await,
                    // Boxed, as every rare path here: see `a_head_s_future_stays_small`.
                    Some(v) => Box::pin(self.head_of_version(&obj.key, v)).await,
                }
            })
            .await;
        if let Some(p) = &partition {
            p.heads.fetch_add(1, Relaxed);
            p.head_micros.fetch_add(micros, Relaxed);
        }
        self.counters.head_micros.fetch_add(micros, Relaxed);
        self.counters.heads.fetch_add(1, Relaxed);
        let result = match result {
            Ok(Some(info)) if self.opts.columns.tags => {
                let version_id = version.as_ref().map(|v| v.version_id.as_str());
                Box::pin(self.with_tags(&obj.key, version_id, info)).await
            }
            other => other,
        };
        let record = match result {
            Ok(Some(info)) => {
                self.head_read(&obj.key);
                self.counters.bytes.fetch_add(info.size, Relaxed);
                if !info.metadata.is_empty() {
                    self.counters.with_metadata.fetch_add(1, Relaxed);
                }
                let etag = info.etag.or(obj.etag);
                let mut columns = info.columns;
                columns.fill_from_listing(obj.checksum_algorithm, obj.checksum_type);
                columns.set_multipart(etag.as_deref());
                Record {
                    key: obj.key,
                    status: Status::Ok,
                    size: info.size,
                    etag,
                    last_modified: info.last_modified.or(obj.last_modified),
                    storage_class: info
                        .storage_class
                        .or(obj.storage_class)
                        .or(Some("STANDARD".into())),
                    content_type: info.content_type,
                    metadata: info.metadata,
                    binary_metadata: info.binary_metadata,
                    missing_metadata: info.missing_metadata,
                    columns,
                    error: None,
                    http_status: None,
                    change: None,
                    previous: None,
                    verbatim: Default::default(),
                }
            }
            Ok(None) if Box::pin(self.still_listed(&obj.key, version.as_deref())).await? => {
                self.counters.errors.fetch_add(1, Relaxed);
                Record {
                    error: Some("listed but HEAD answered 404: the listing still shows the key".into()),
                    http_status: Some(404),
                    ..listed_record(obj, Status::Error)
                }
            }
            Ok(None) => {
                self.counters.vanished.fetch_add(1, Relaxed);
                listed_record(obj, Status::Vanished)
            }
            Err(e) if e.affects_every_request() => return Err(e),
            Err(e) if e.is_retryable() => {
                let passes = self.head_failed(&obj.key);
                if passes < HEAD_PASSES {
                    return Err(e); // the shard's pass ends; it resumes at this key
                }
                self.counters.errors.fetch_add(1, Relaxed);
                Record {
                    error: Some(format!(
                        "{e} (this object's HEAD used up its retries in {passes} passes of its shard)"
                    )),
                    http_status: e.http_status(),
                    ..listed_record(obj, Status::Error)
                }
            }
            Err(e) => {
                self.counters.errors.fetch_add(1, Relaxed);
                Record {
                    error: Some(e.to_string()),
                    http_status: e.http_status(),
                    ..listed_record(obj, Status::Error)
                }
            }
        };
        Ok(match version {
            None => record,
            Some(version) => {
                let mut record = record;
                (*version).fill(&mut record.columns);
                record
            }
        })
    }
}

impl Engine {
    /// `info` with the object's tags (`--tags`): a GetObjectTagging paced,
    /// retried and counted as a HEAD is (`heads` counts it, its throttling
    /// answers reach the governor). Gone by then: `None`, as a HEAD's 404.
    async fn with_tags(&self, key: &str, version_id: Option<&str>, mut info: HeadInfo) -> HeadResult {
        let (tags, _, partition) = self
            .governed(key, || self.s3.object_tags(&self.opts.bucket, key, version_id))
            .await;
        if let Some(p) = &partition {
            p.heads.fetch_add(1, Relaxed);
        }
        self.counters.heads.fetch_add(1, Relaxed);
        Ok(tags?.map(|tags| {
            info.columns.object_tags = Some(tags);
            info
        }))
    }

    /// Leave out the listed objects the filter rejects, before they become
    /// tasks: they cost no HEAD and make no record.
    fn drop_filtered(&self, objects: &mut Vec<ListedObject>) {
        if self.opts.filter.is_empty() {
            return;
        }
        let listed = objects.len();
        objects.retain(|o| self.opts.filter.admits(o));
        self.counters
            .filtered
            .fetch_add((listed - objects.len()) as u64, Relaxed);
    }

    /// Count a pass in which `key`'s HEAD used up its retries; returns the
    /// passes so far.
    fn head_failed(&self, key: &str) -> u32 {
        let mut failures = self.head_failures.lock().expect("lock");
        let passes = {
            let passes = failures.entry(key.to_string()).or_insert(0);
            *passes += 1;
            *passes
        };
        self.failing.store(failures.len() as u64, Relaxed);
        passes
    }

    /// `key` was read: its failed passes no longer count.
    fn head_read(&self, key: &str) {
        if self.failing.load(Relaxed) == 0 {
            return;
        }
        let mut failures = self.head_failures.lock().expect("lock");
        failures.remove(key);
        self.failing.store(failures.len() as u64, Relaxed);
    }

    /// Does a LIST still show `key`? A HEAD's 404 for a listed key is
    /// checked so: gone from the listing too, the object was deleted during
    /// the scan (`vanished`); still listed, the store disagrees with itself
    /// and the record says so (an `error`, not an object quietly dropped).
    async fn still_listed(&self, key: &str, version: Option<&VersionOf>) -> Result<bool, S3Error> {
        if let Some(version) = version {
            return self.version_still_listed(key, &version.version_id).await;
        }
        let req = ListRequest {
            prefix: key.to_string(),
            max_keys: 1,
            ..ListRequest::default()
        };
        let page = self.s3.list_page(&self.opts.bucket, &req).await?;
        Ok(page.objects.first().is_some_and(|o| o.key == key))
    }
}

/// What changed between the baseline record `old` and this scan's `new`.
/// Metadata is compared only when both were read in full.
fn change_of(new: &Record, old: Option<&Record>) -> Option<ChangeKind> {
    let Some(old) = old else {
        return (new.status != Status::Vanished).then_some(ChangeKind::Added);
    };
    if new.status == Status::Vanished {
        return Some(ChangeKind::Removed);
    }
    if new.size != old.size || new.etag != old.etag {
        return Some(ChangeKind::ContentChanged);
    }
    let both_read = new.status == Status::Ok && old.status == Status::Ok;
    let differs = new.metadata != old.metadata
        || new.binary_metadata != old.binary_metadata
        || new.content_type != old.content_type;
    (both_read && differs).then_some(ChangeKind::MetadataChanged)
}

/// The change record of a baseline object no longer listed.
fn removed(mut old: Box<Record>) -> Box<Record> {
    old.previous = Some(Box::new(Previous::of(&old)));
    old.change = Some(ChangeKind::Removed);
    old.verbatim.clear();
    old
}

/// The baseline's record of an unchanged object, with what the listing
/// says now of its storage class (a lifecycle transition moves neither its
/// ETag nor its LastModified): then decoded whole and written anew.
fn reused(mut old: Box<Record>, obj: &ListedObject) -> Result<Box<Record>, S3Error> {
    // The baseline reader reads every record as a result (`as_result`): a
    // change kept here would go to the change set as its old line.
    debug_assert!(old.change.is_none() && old.previous.is_none());
    if obj.storage_class.is_some() && obj.storage_class != old.storage_class {
        old = thick(old)?;
        old.storage_class = obj.storage_class.clone();
        old.verbatim.clear();
    }
    Ok(old)
}

/// A record from what the listing said, for objects the HEAD could not read.
fn listed_record(obj: ListedObject, status: Status) -> Record {
    let mut columns = ObjectColumns::default();
    columns.fill_from_listing(obj.checksum_algorithm, obj.checksum_type);
    columns.set_multipart(obj.etag.as_deref());
    Record {
        key: obj.key,
        status,
        size: obj.size,
        etag: obj.etag,
        last_modified: obj.last_modified,
        storage_class: obj.storage_class,
        content_type: None,
        metadata: Default::default(),
        binary_metadata: Vec::new(),
        missing_metadata: None,
        columns,
        error: None,
        http_status: None,
        change: None,
        previous: None,
        verbatim: Default::default(),
    }
}

fn tokio_stream_from<T: Send + 'static>(mut rx: mpsc::Receiver<T>) -> impl futures::Stream<Item = T> {
    futures::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

#[cfg(test)]
mod tests {
    use super::Trust;
    use std::time::Duration;

    #[tokio::test]
    async fn a_pending_trust_is_waited_for_and_a_check_that_gave_none_is_no_trust() {
        assert!(Trust::known(true).get().await);
        assert!(!Trust::known(false).get().await);

        let (tell, trust) = Trust::pending();
        assert_eq!(trust.now(), None);
        let asking = tokio::spawn(async move { (trust.get().await, trust) });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(
            !asking.is_finished(),
            "no answer yet: the first reusable object waits"
        );
        tell.send(Some(true)).unwrap();
        let (answer, trust) = asking.await.unwrap();
        assert!(answer);
        assert_eq!(trust.now(), Some(true));

        // The check failed: its sender went without an answer.
        let (tell, trust) = Trust::pending();
        drop(tell);
        assert!(!trust.get().await, "no store check: every object is HEADed");
    }

    /// A baseline record is written as its line only while it is as it was
    /// read: a storage class the listing now says otherwise, or a removal
    /// (its change and previous record added), is encoded anew, from the
    /// whole record (a thin one is decoded whole first: its metadata is
    /// kept).
    #[test]
    fn a_reused_or_removed_record_keeps_its_line_only_while_unchanged() {
        use super::{removed, reused, thick};
        use crate::s3::types::ListedObject;
        use crate::scan::record::{ChangeKind, Record};
        let line = br#"{"key":"k","status":"ok","size":1,"etag":"e","storage_class":"STANDARD","metadata":{"m":"v"}}"#;
        let read = || Box::new(Record::thin_of_line(line).unwrap());
        let listed = |class: Option<&str>| ListedObject {
            key: "k".into(),
            size: 1,
            storage_class: class.map(str::to_string),
            ..ListedObject::default()
        };
        let kept = reused(read(), &listed(Some("STANDARD"))).unwrap();
        assert!(kept.is_thin() && kept.has_metadata() && kept.verbatim.line().is_some());
        assert!(reused(read(), &listed(None)).unwrap().verbatim.line().is_some());
        let moved = reused(read(), &listed(Some("GLACIER"))).unwrap();
        let mut out = Vec::new();
        moved.write_line(&mut out);
        let back: Record = serde_json::from_slice(&out).unwrap();
        assert_eq!(back.storage_class.as_deref(), Some("GLACIER"));
        assert_eq!(
            back.metadata["m"], "v",
            "decoded whole before it was written anew"
        );
        let gone = removed(thick(read()).unwrap());
        let mut out = Vec::new();
        gone.write_line(&mut out);
        let back: Record = serde_json::from_slice(&out).unwrap();
        assert_eq!(back.change, Some(ChangeKind::Removed));
        assert_eq!(back.previous.unwrap().metadata["m"], "v");
    }
}
