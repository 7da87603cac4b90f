//! A worker of a distributed scan (`bucketscan-worker run`): take shards from
//! the Redis queue until none is left, scan each with the engine, write its
//! records as parts in S3, and checkpoint after every part.
//!
//! A part is closed (uploaded, then recorded with the checkpoint in one fenced
//! Redis step) every `part_records` records or `part_age`, so a crash costs at
//! most one part of rework. Part keys carry the lease token: a part uploaded by
//! a worker that then died or lost its lease is never recorded, so the merge
//! never reads it, and it is deleted with the other parts.
//!
//! May import: `spec`, `governor`, `governed`, `queue`, `recovery`, `scan`, `keyspace` and `s3`.

use crate::fleet::governed;
use crate::fleet::governor::GovernorConfig;
use crate::fleet::queue::{Commit, Finish, Lease, PartStats, Queue, QueueError, Split};
use crate::fleet::recovery::{write_done, DoneRecord};
use crate::fleet::spec::ScanSpec;
use crate::keyspace::planner::{split_point, BucketLister};
use crate::s3::error::S3Error;
use crate::scan::engine::{CountersSnapshot, Engine, Frontier};
use crate::scan::output::{Destination, OutputOptions, RecordWriter};
use crate::scan::record::Record;
use crate::scan::resume::Resumption;
use futures::FutureExt;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, Notify};
use tokio_util::sync::CancellationToken;

#[derive(Clone, Debug)]
pub struct RunOptions {
    /// Also requeue expired leases (any number of workers may).
    pub reap: bool,
    pub part_records: u64,
    pub part_age: Duration,
    /// How often counters and the live rate go to Redis (and how often a
    /// worker learns that another one waits for a split).
    pub progress_every: Duration,
    /// Split the shard being scanned when another worker is idle.
    pub split: bool,
    /// Shards this worker holds at once. Each is one LIST stream while all
    /// share the engine's HEADs in flight, so a store whose LIST pages are
    /// slow (AWS: about 100 ms for 1,000 keys, one stream: 10,000 keys/s)
    /// does not cap the worker's HEAD rate. The first slot is the worker as
    /// before (idle when nothing is pending, so others split for it); the
    /// others take only pending shards while no worker is idle, and end
    /// when there is none: they never take what another worker waits for.
    pub shards_in_flight: usize,
    /// How often this worker takes part in the scan-wide rate governor
    /// (`None`: it does not; its rate is only `max_rate`).
    pub govern_every: Option<Duration>,
}

/// Shards a worker lists at once by default: enough that LIST pages of
/// 100 ms (AWS, 1,000 keys) keep 256 HEADs of 15 ms busy (17,000 HEAD/s
/// against 10,000 keys/s per stream); see BENCHMARKS.md, "LIST latency".
pub const DEFAULT_SHARDS_IN_FLIGHT: usize = 4;

/// How long a worker that found nothing to do counts as idle (it renews this
/// every poll, at most a second apart).
const IDLE_TTL: Duration = Duration::from_secs(5);
/// LIST requests a worker may spend choosing where to split its shard.
const SPLIT_PROBES: usize = 64;

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            reap: true,
            part_records: 50_000,
            part_age: Duration::from_secs(30),
            progress_every: Duration::from_secs(2),
            split: true,
            shards_in_flight: DEFAULT_SHARDS_IN_FLIGHT,
            govern_every: None,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Queue(#[from] QueueError),
    #[error(transparent)]
    S3(#[from] S3Error),
    #[error("incremental scan: {0}")]
    Incremental(#[from] crate::fleet::incremental::IncrementalError),
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RunSummary {
    pub shards_done: u64,
    pub shards_failed: u64,
    /// True when a stop request ended the run (its shard went back to pending).
    pub stopped: bool,
}

enum Ended {
    Done,
    Failed,
    Released,
    Lost,
}

/// How one pass over a lease's range ended.
enum Pass {
    Ended(Ended),
    /// An S3 failure of the scan, a part upload or `done.json`: the shard
    /// may resume (transient) or fails (final).
    Failed(S3Error),
}

/// An S3 failure becomes the shard's (`Ok(Err)`); a queue failure stays the
/// worker's (`Err`): without Redis no shard can be recorded.
fn s3_failure<T>(r: Result<T, RunError>) -> Result<Result<T, S3Error>, RunError> {
    match r {
        Ok(v) => Ok(Ok(v)),
        Err(RunError::S3(e)) => Ok(Err(e)),
        Err(e) => Err(e),
    }
}

pub struct Runner {
    pub queue: Queue,
    pub engine: Arc<Engine>,
    pub spec: ScanSpec,
    pub opts: RunOptions,
    /// Cancelled on SIGTERM: checkpoint, release the shard, exit.
    pub stop: CancellationToken,
}

impl Runner {
    pub async fn run(self) -> Result<RunSummary, RunError> {
        crate::fleet::incremental::prepare_engine(&self.engine, &self.spec).await?;
        let split_wanted = Arc::new(Notify::new());
        let (stop_reporter, mut reporter) = self.spawn_progress_reporter(split_wanted.clone());
        let _governor = self.opts.govern_every.map(|every| {
            let cfg = GovernorConfig::default();
            AbortOnDrop(tokio::spawn(governed::govern(
                self.queue.clone(),
                self.engine.clone(),
                every,
                cfg,
            )))
        });
        let result = self.take_until_empty(&split_wanted).await;
        stop_reporter.cancel();
        let _ = (&mut reporter.0).await; // its last report makes the totals exact
        result
    }

    /// Every slot takes shards until none is left for it (or the worker
    /// stops).
    async fn take_until_empty(&self, split_wanted: &Notify) -> Result<RunSummary, RunError> {
        let extras: Vec<Runner> = (1..self.opts.shards_in_flight.max(1))
            .map(|slot| Runner {
                queue: self.queue.for_slot(slot),
                engine: self.engine.clone(),
                spec: self.spec.clone(),
                opts: self.opts.clone(),
                stop: self.stop.clone(),
            })
            .collect();
        // How many extra slots still run: the first slot waits for them
        // before it calls itself idle (it would ask its own slots to split).
        let (running, extras_left) = tokio::sync::watch::channel(extras.len());
        let slots =
            std::iter::once(self.first_slot(split_wanted, extras_left)).chain(extras.iter().map(|extra| {
                let running = &running;
                async move {
                    let ended = extra.slot(split_wanted, true, None).await;
                    running.send_modify(|n| *n -= 1);
                    ended
                }
                .boxed()
            }));
        let mut summary = RunSummary::default();
        for s in futures::future::try_join_all(slots).await? {
            summary.shards_done += s.shards_done;
            summary.shards_failed += s.shards_failed;
            summary.stopped |= s.stopped;
        }
        Ok(summary)
    }

    fn first_slot<'a>(
        &'a self,
        split_wanted: &'a Notify,
        extras_left: tokio::sync::watch::Receiver<usize>,
    ) -> futures::future::BoxFuture<'a, Result<RunSummary, RunError>> {
        self.slot(split_wanted, false, Some(extras_left)).boxed()
    }

    /// One shard at a time, until none is left (or the worker stops). An
    /// `extra` slot ends as soon as it finds nothing it may take; the first
    /// slot, finding nothing pending, first waits for the worker's extra
    /// slots (`extras_left`) to end.
    async fn slot(
        &self,
        split_wanted: &Notify,
        extra: bool,
        mut extras_left: Option<tokio::sync::watch::Receiver<usize>>,
    ) -> Result<RunSummary, RunError> {
        let mut summary = RunSummary::default();
        let mut idle = Duration::from_millis(100);
        while !self.stop.is_cancelled() {
            if extra {
                let Some(lease) = self.queue.take_extra().await? else {
                    return Ok(summary);
                };
                if self.process_counted(lease, split_wanted, &mut summary).await? {
                    break;
                }
                continue;
            }
            if self.opts.reap {
                self.queue.reap(self.spec.max_failures).await?;
            }
            let Some(lease) = self.queue.take().await? else {
                if let Some(extras) = extras_left.as_mut().filter(|e| *e.borrow() > 0) {
                    tokio::select! {
                        _ = extras.wait_for(|n| *n == 0) => {}
                        _ = self.stop.cancelled() => {}
                    }
                    continue;
                }
                let left = self.queue.idle(IDLE_TTL).await?;
                if left.pending == 0 && left.leased == 0 {
                    return Ok(summary);
                }
                // Others still hold shards, which may come back or be split
                // for us: wait, backing off so waiting costs Redis little.
                tokio::select! {
                    _ = tokio::time::sleep(idle) => {}
                    _ = self.stop.cancelled() => {}
                }
                idle = (idle * 2).min(Duration::from_secs(1));
                continue;
            };
            idle = Duration::from_millis(100);
            if self.process_counted(lease, split_wanted, &mut summary).await? {
                break;
            }
        }
        summary.stopped = true;
        Ok(summary)
    }

    /// Scan one leased shard and count how it ended; true when the worker
    /// was told to stop (the shard was handed back).
    async fn process_counted(
        &self,
        lease: Lease,
        split_wanted: &Notify,
        summary: &mut RunSummary,
    ) -> Result<bool, RunError> {
        tracing::info!(shard = %lease.shard, token = lease.token, resume = ?lease.checkpoint, "took shard");
        match self.process(lease, split_wanted).await? {
            Ended::Done => summary.shards_done += 1,
            Ended::Failed => summary.shards_failed += 1,
            Ended::Lost => {}
            Ended::Released => return Ok(true),
        }
        Ok(false)
    }

    /// Scan one leased shard. `lease` follows what this worker recorded (its
    /// range after splits, its checkpoint after commits): every step that
    /// records progress sends it, so Redis can refuse when it lost writes.
    ///
    /// A transient S3 failure (throttling past a request's retries, a 5xx, a
    /// reset; of a LIST, a HEAD or a part upload) is not the shard's fault:
    /// the worker keeps the lease, pauses and scans on from the checkpoint.
    /// It counts as the shard's failure only after the resume policy's
    /// patience passed without a new checkpoint.
    async fn process(&self, mut lease: Lease, split_wanted: &Notify) -> Result<Ended, RunError> {
        let lost = CancellationToken::new();
        // It ends with this function, however it ends (`?`, panic).
        let _heartbeat = self.spawn_heartbeat(&lease, lost.clone());
        let mut resumption = Resumption::new(self.engine.resume.clone());
        let mut pass = 0;
        loop {
            let checkpoint = lease.checkpoint.clone();
            let e = match self.pass(&mut lease, pass, split_wanted, &lost).await? {
                Pass::Ended(ended) => return Ok(ended),
                Pass::Failed(e) => e,
            };
            let pause = e
                .is_retryable()
                .then(|| resumption.after_failure(lease.checkpoint != checkpoint))
                .flatten();
            let Some(pause) = pause else {
                tracing::warn!(shard = %lease.shard, error = %e, "shard failed");
                let max_failures = failures_allowed(&e, self.spec.max_failures);
                let fail = Finish::Fail {
                    error: e.to_string(),
                    max_failures,
                };
                self.queue.finish(&lease, &fail).await?;
                return Ok(Ended::Failed);
            };
            self.engine
                .counters
                .resumed
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            tracing::warn!(
                shard = %lease.shard, resume_after = ?lease.checkpoint, error = %e, pause_ms = pause.as_millis() as u64,
                "transient failure: the shard resumes at its checkpoint"
            );
            tokio::select! {
                biased;
                _ = lost.cancelled() => return Ok(Ended::Lost),
                _ = self.stop.cancelled() => {
                    self.queue.finish(&lease, &Finish::Release).await?;
                    return Ok(Ended::Released);
                }
                _ = tokio::time::sleep(pause) => {}
            }
            pass += 1;
        }
    }

    /// One pass over the lease's range from its checkpoint: until the range
    /// is done, the lease is lost or released, or a failure (whose records
    /// before it are committed when they can be).
    async fn pass(
        &self,
        lease: &mut Lease,
        pass: u32,
        split_wanted: &Notify,
        lost: &CancellationToken,
    ) -> Result<Pass, RunError> {
        let (range, after_version) = match &lease.checkpoint {
            Some(c) => {
                let (key, version) = resume_point(c, self.spec.columns.versions);
                (lease.shard.resumed_after(key), version.map(str::to_string))
            }
            None => (lease.shard.clone(), None),
        };
        let (tx, mut rx) = mpsc::channel::<Box<Record>>(4096);
        let frontier = Arc::new(Frontier::default());
        let mut scan = {
            let (engine, frontier) = (self.engine.clone(), frontier.clone());
            AbortOnDrop(tokio::spawn(async move {
                engine.scan_shard_live(&range, after_version, frontier, &tx).await
            }))
        };
        let mut part = Part::new(lease.checkpoint.clone(), pass);
        let mut stopped = false;
        let mut lease_lost = false;
        let mut written = Ok(());
        loop {
            tokio::select! {
                biased;
                _ = lost.cancelled() => { lease_lost = true; break; }
                _ = self.stop.cancelled() => { stopped = true; break; }
                _ = split_wanted.notified(), if self.opts.split => {
                    if !self.split(lease, &frontier, part.written_up_to()).await? {
                        lease_lost = true;
                        break;
                    }
                }
                record = rx.recv() => {
                    let Some(record) = record else { break };
                    if !lease.shard.contains(&record.key) {
                        continue; // listed before a split: the upper part's worker has it
                    }
                    written = part.add(*record, &self.engine, &self.spec, lease).await;
                    if written.is_err() {
                        break;
                    }
                    if part.is_full(&self.opts) {
                        match s3_failure(self.close_part(lease, &mut part).await)? {
                            Ok(true) => {}
                            Ok(false) => { lease_lost = true; break; }
                            Err(e) => { written = Err(e); break; }
                        }
                    }
                }
            }
        }
        drop(rx);
        if lease_lost || stopped || written.is_err() {
            scan.0.abort();
        }
        if lease_lost {
            part.abort().await;
            tracing::warn!(shard = %lease.shard, "lease lost; another worker owns the shard now");
            return Ok(Pass::Ended(Ended::Lost));
        }
        if let Err(e) = written {
            part.abort().await;
            return Ok(Pass::Failed(e));
        }
        if stopped {
            return Ok(Pass::Ended(
                match s3_failure(self.close_part(lease, &mut part).await)? {
                    Ok(true) | Err(_) => {
                        self.queue.finish(lease, &Finish::Release).await?;
                        Ended::Released
                    }
                    Ok(false) => Ended::Lost,
                },
            ));
        }
        let scanned = (&mut scan.0)
            .await
            .unwrap_or_else(|e| Err(S3Error::Other(format!("scan task failed: {e}"))));
        // What was read before a failure is good: keep it.
        let recorded = match s3_failure(self.close_part(lease, &mut part).await)? {
            Ok(recorded) => recorded,
            Err(e) => {
                part.abort().await;
                return Ok(Pass::Failed(e));
            }
        };
        if !recorded {
            return Ok(Pass::Ended(Ended::Lost));
        }
        if let Err(e) = scanned {
            return Ok(Pass::Failed(e));
        }
        if let Err(e) = s3_failure(self.record_done(lease).await)? {
            return Ok(Pass::Failed(e));
        }
        Ok(Pass::Ended(
            match self.queue.finish(lease, &Finish::Done).await?.as_str() {
                "done" => Ended::Done,
                _ => Ended::Lost,
            },
        ))
    }

    /// Leave the finished shard's record in S3, so a scan whose Redis state
    /// is lost can be planned again without redoing it (see `recovery`).
    /// Only when Redis still holds what this lease recorded: anything else
    /// would describe parts that do not cover the range (finishing will then
    /// be refused too).
    async fn record_done(&self, lease: &Lease) -> Result<(), RunError> {
        let Some(recorded) = self.queue.recorded(lease).await? else {
            return Ok(());
        };
        let record = DoneRecord {
            id: lease.id.clone(),
            range: lease.shard.clone(),
            parts: recorded.parts,
            counts: recorded.counts,
        };
        write_done(&self.engine.s3, &self.spec, &record, lease.token).await?;
        Ok(())
    }

    /// Give the upper half of what is left of the lease's range to an idle
    /// worker. Returns false when the lease turned out to be lost.
    ///
    /// Records are written up to `position` (the part's last key, or where
    /// the lease resumed): everything after it can be given away, even keys
    /// already listed (the frontier drops them). The caller passes the
    /// position, not the part: a part's encoder (Parquet) is not `Sync`, and
    /// the worker's slots run on the runtime's threads.
    async fn split(
        &self,
        lease: &mut Lease,
        frontier: &Frontier,
        position: Option<String>,
    ) -> Result<bool, RunError> {
        // A key partly written (`--versions`) stays: the split falls after it.
        let remaining = match position {
            Some(p) => lease
                .shard
                .resumed_after(resume_point(&p, self.spec.columns.versions).0),
            None => lease.shard.clone(),
        };
        let lister = BucketLister {
            s3: &self.engine.s3,
            bucket: &self.spec.bucket,
        };
        let at = match split_point(&lister, &remaining, SPLIT_PROBES).await {
            Ok(Some(at)) => at,
            Ok(None) => return Ok(true),
            // No split this time (the idle worker asks again); the shard's
            // own scan meets the store on its own terms.
            Err(e) => {
                tracing::warn!(shard = %lease.shard, error = %e, "choosing a split point failed; not splitting now");
                return Ok(true);
            }
        };
        match self.queue.split(lease, &at).await? {
            Split::Done { lower, upper } => {
                tracing::info!(kept = %lower, gave = %upper, "split shard for an idle worker");
                if let Some(end) = &lower.end {
                    frontier.stop_before(end);
                }
                Ok(true)
            }
            Split::NotWanted => Ok(true),
            Split::Lost => Ok(false),
        }
    }

    /// Upload the open part and record it with the checkpoint (which moves
    /// the lease's checkpoint on). Returns false when the lease turned out to
    /// be lost (nothing recorded).
    async fn close_part(&self, lease: &mut Lease, part: &mut Part) -> Result<bool, RunError> {
        let Some(checkpoint) = part.last_key.clone() else {
            return Ok(true);
        };
        let (key, changes) = part.finish().await?;
        if let (Some(key), Some(first), Some(last)) = (&key, &part.first_written, &part.last_written) {
            let stats = PartStats {
                records: part.counts.result.written,
                first: first.clone(),
                last: last.clone(),
            };
            self.queue.set_part_stats(key, &stats).await?;
        }
        if let (Some(key), Some(c)) = (&changes, &part.changes) {
            let stats = PartStats {
                records: c.records,
                first: c.first.clone(),
                last: c.last.clone(),
            };
            self.queue.set_part_stats(key, &stats).await?;
        }
        let counts = part.counts.pairs();
        let commit = Commit {
            checkpoint: Some(&checkpoint),
            part: key.as_deref(),
            changes: changes.as_deref(),
            counts: &counts,
        };
        let recorded = self.queue.commit(lease, &commit).await?;
        part.reopen_after(checkpoint);
        Ok(recorded)
    }

    /// Renews the lease every third of its length; cancels `lost` when the
    /// queue says the lease is no longer ours. Stops when the returned guard
    /// is dropped: a heartbeat that outlived its shard would keep a lease
    /// nobody works on alive forever.
    fn spawn_heartbeat(&self, lease: &Lease, lost: CancellationToken) -> AbortOnDrop<()> {
        let (queue, lease, every) = (self.queue.clone(), lease.clone(), self.queue.lease_duration() / 3);
        AbortOnDrop(tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                match queue.renew(&lease).await {
                    Ok(true) => {}
                    Ok(false) => return lost.cancel(),
                    // Redis unreachable: keep trying; the lease may still hold.
                    Err(e) => tracing::warn!(error = %e, "heartbeat failed"),
                }
            }
        }))
    }

    /// Reports counter deltas every `progress_every`, and once more when
    /// cancelled.
    fn spawn_progress_reporter(&self, split_wanted: Arc<Notify>) -> (CancellationToken, AbortOnDrop<()>) {
        let done = CancellationToken::new();
        let (queue, engine, every, stop) = (
            self.queue.clone(),
            self.engine.clone(),
            self.opts.progress_every,
            done.clone(),
        );
        let task = AbortOnDrop(tokio::spawn(async move {
            let mut progress = Progress {
                last: CountersSnapshot::default(),
                at: Instant::now(),
                unconfirmed: None,
            };
            loop {
                let stopping = tokio::select! {
                    _ = stop.cancelled() => true,
                    _ = tokio::time::sleep(every) => false,
                };
                if report_progress(&queue, &engine, &mut progress).await {
                    split_wanted.notify_one();
                }
                if stopping {
                    return;
                }
            }
        }));
        (done, task)
    }
}

/// A spawned task tied to the scope holding this guard: aborted when the guard
/// is dropped, so it ends on every way out of that scope, errors and panics
/// included.
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// What was last reported, to send deltas.
struct Progress {
    /// The counters as of the last report Redis confirmed.
    last: CountersSnapshot,
    /// When `last` was taken.
    at: Instant,
    /// A report whose answer never came (Redis away longer than the
    /// connection's patience): it may have counted, so it is sent again,
    /// under its id, before anything new.
    unconfirmed: Option<Report>,
}

/// One progress report: its id and the counters it reports up to.
struct Report {
    id: u64,
    counters: CountersSnapshot,
    taken: Instant,
}

impl Progress {
    /// Counter deltas since the last report and the HEAD rate over the same
    /// interval: both measured between the two snapshots, so a report that
    /// took long (Redis restarting) cannot inflate the next rate.
    fn since_last(&self, now: &CountersSnapshot, taken: Instant) -> ([(&'static str, u64); 10], f64) {
        let d = |f: fn(&CountersSnapshot) -> u64| f(now).saturating_sub(f(&self.last));
        let deltas = [
            ("listed", d(|c| c.listed)),
            ("heads", d(|c| c.heads)),
            ("with_metadata", d(|c| c.with_metadata)),
            ("vanished", d(|c| c.vanished)),
            ("errors", d(|c| c.errors)),
            ("bytes", d(|c| c.bytes)),
            // Records made from the listing's metadata, without a HEAD
            // (docs/metadata-source.md): objects scanned all the same.
            ("from_listing", d(|c| c.from_listing)),
            // Incremental scans: records taken from the baseline.
            ("reused", d(|c| c.reused)),
            // Listed objects the spec's filter left out (no HEAD, no
            // record): not scanned, counted apart.
            ("filtered", d(|c| c.filtered)),
            // Incremental scans: bytes of the baseline read.
            ("baseline_bytes", d(|c| c.baseline_bytes)),
        ];
        let secs = taken.duration_since(self.at).as_secs_f64().max(1e-3);
        (deltas, (deltas[1].1 as f64 / secs).round())
    }
}

/// Returns true when another worker waits for a split.
async fn report_progress(queue: &Queue, engine: &Engine, progress: &mut Progress) -> bool {
    let report = progress.unconfirmed.take().unwrap_or_else(|| Report {
        id: rand::random(),
        counters: engine.progress_snapshot(),
        taken: Instant::now(),
    });
    let (deltas, rate) = progress.since_last(&report.counters, report.taken);
    let status = serde_json::json!({
        "heads": report.counters.heads,
        "rate": rate,
        "updated": time::OffsetDateTime::now_utc().unix_timestamp(),
    });
    match queue
        .report_progress(report.id, &deltas, &status.to_string())
        .await
    {
        Ok(split_wanted) => {
            progress.last = report.counters;
            progress.at = report.taken;
            split_wanted
        }
        Err(e) => {
            tracing::warn!(error = %e, "could not report progress");
            progress.unconfirmed = Some(report);
            false
        }
    }
}

/// Result counts of one part's records: recorded with the part, so the
/// manifest counts every object once even when a crash made a worker scan
/// some keys twice (the live progress counters count that rework).
#[derive(Clone, Debug, Default)]
struct PartCounts {
    /// The result's counts, as `scan`'s dataset counts them (one meaning in
    /// both manifests; `filtered` stays 0: a fleet counts it in progress).
    result: crate::scan::dataset::DatasetCounts,
    /// Incremental scans: changes since the baseline, by kind.
    changes: crate::scan::dataset::ChangeCounts,
}

impl PartCounts {
    fn pairs(&self) -> [(&'static str, u64); 10] {
        [
            ("objects", self.result.objects),
            ("written", self.result.written),
            ("with_metadata", self.result.with_metadata),
            ("vanished", self.result.vanished),
            ("errors", self.result.errors),
            ("bytes", self.result.bytes),
            ("added", self.changes.added),
            ("removed", self.changes.removed),
            ("content_changed", self.changes.content_changed),
            ("metadata_changed", self.changes.metadata_changed),
        ]
    }
}

/// `--versions`: the checkpoint after one version of `key` is the key and
/// the version joined by a NUL, which no key holds (`Shard::split_after`
/// relies on it too): it sorts after the key and before every key after it.
/// The version is as `Record::resume_version` encodes it: its id, or for `null`
/// the id with what tells that entry from a later `null` (the one id a store
/// gives again). No version holds a NUL, so the last one ends the key.
fn versioned_checkpoint(key: &str, version: Option<&str>) -> String {
    match version {
        Some(v) => format!("{key}\0{v}"),
        None => key.to_string(),
    }
}

/// Where a pass resumes: after this key, or (`--versions`) after this
/// version of it (encoded, see [`versioned_checkpoint`]).
fn resume_point(checkpoint: &str, versions: bool) -> (&str, Option<&str>) {
    match checkpoint.rsplit_once('\0') {
        Some((key, version)) if versions => (key, Some(version)),
        _ => (checkpoint, None),
    }
}

/// The part being written: records after `resume_after`, up to `last_key`
/// (with `--versions`, a key and a version: see [`versioned_checkpoint`]).
struct Part {
    resume_after: Option<String>,
    /// The lease's pass over its shard (see `ScanSpec::part_key`).
    pass: u32,
    writer: Option<RecordWriter>,
    key: Option<String>,
    last_key: Option<String>,
    /// The first and last keys written (kept), for the part's stats.
    first_written: Option<String>,
    last_written: Option<String>,
    counts: PartCounts,
    opened: Instant,
    /// Incremental scans: the change part beside this part.
    changes: Option<ChangePart>,
}

/// The changes of a part's records (incremental scans).
struct ChangePart {
    key: String,
    /// None once finished.
    writer: Option<RecordWriter>,
    records: u64,
    first: String,
    last: String,
}

impl Part {
    /// Where the shard's records are written up to: the last key written,
    /// or where the lease resumed.
    fn written_up_to(&self) -> Option<String> {
        self.last_key.clone().or_else(|| self.resume_after.clone())
    }

    fn new(resume_after: Option<String>, pass: u32) -> Part {
        Part {
            resume_after,
            pass,
            writer: None,
            key: None,
            last_key: None,
            first_written: None,
            last_written: None,
            counts: PartCounts::default(),
            opened: Instant::now(),
            changes: None,
        }
    }

    /// Add one record of the engine's (an incremental scan's record may
    /// carry a change, or be only a change: a baseline object gone).
    async fn add(
        &mut self,
        record: Record,
        engine: &Engine,
        spec: &ScanSpec,
        lease: &Lease,
    ) -> Result<(), S3Error> {
        let key = match spec.columns.versions {
            false => record.key.clone(),
            true => versioned_checkpoint(&record.key, record.resume_version().as_deref()),
        };
        let (result, change) = record.split_change();
        if let Some(change) = change {
            self.add_change(change, spec, lease, &engine.s3).await?;
        }
        if let Some(result) = result {
            let keep = engine.keep(&result);
            self.add_result(result, keep, spec, lease, &engine.s3).await?;
        }
        self.last_key = Some(key);
        Ok(())
    }

    async fn add_change(
        &mut self,
        change: Record,
        spec: &ScanSpec,
        lease: &Lease,
        s3: &Arc<crate::s3::S3>,
    ) -> Result<(), S3Error> {
        if self.changes.is_none() {
            let part = spec.part_key(&lease.id, lease.token, self.pass, self.resume_after.as_deref());
            let key = spec.change_part_key(&part);
            let opts = OutputOptions {
                changes: true,
                ..part_options(spec)
            };
            let dest = Destination::S3 {
                bucket: spec.output_bucket.clone(),
                key: key.clone(),
            };
            self.changes = Some(ChangePart {
                key,
                writer: Some(RecordWriter::create(&dest, &opts, Some(s3)).await?),
                records: 0,
                first: change.key.clone(),
                last: String::new(),
            });
        }
        let part = self.changes.as_mut().expect("opened above");
        let writer = part
            .writer
            .as_mut()
            .ok_or_else(|| S3Error::Other("change part written after it was finished".into()))?;
        writer.write(&change).await?;
        part.records += 1;
        part.last = change.key.clone();
        self.counts.changes.add(change.change);
        Ok(())
    }

    async fn add_result(
        &mut self,
        record: Record,
        keep: bool,
        spec: &ScanSpec,
        lease: &Lease,
        s3: &Arc<crate::s3::S3>,
    ) -> Result<(), S3Error> {
        if keep {
            if self.writer.is_none() {
                let key = spec.part_key(&lease.id, lease.token, self.pass, self.resume_after.as_deref());
                let dest = Destination::S3 {
                    bucket: spec.output_bucket.clone(),
                    key: key.clone(),
                };
                self.writer = Some(RecordWriter::create(&dest, &part_options(spec), Some(s3)).await?);
                self.key = Some(key);
            }
            self.writer.as_mut().expect("just created").write(&record).await?;
            if self.first_written.is_none() {
                self.first_written = Some(record.key.clone());
            }
            self.last_written = Some(record.key.clone());
        }
        self.counts.result.add(&record, keep);
        Ok(())
    }

    fn is_full(&self, opts: &RunOptions) -> bool {
        let records = self.counts.result.objects + self.changes.as_ref().map_or(0, |c| c.records);
        records >= opts.part_records || (records > 0 && self.opened.elapsed() >= opts.part_age)
    }

    /// Complete the uploads; returns the part's key (`None` when no record
    /// was kept: the checkpoint still advances) and its change part's.
    async fn finish(&mut self) -> Result<(Option<String>, Option<String>), S3Error> {
        if let Some(w) = self.writer.take() {
            w.finish().await?;
        }
        let changes = match &mut self.changes {
            Some(c) => {
                if let Some(writer) = c.writer.take() {
                    writer.finish().await?;
                }
                Some(c.key.clone())
            }
            None => None,
        };
        Ok((self.key.take(), changes))
    }

    fn reopen_after(&mut self, checkpoint: String) {
        *self = Part::new(Some(checkpoint), self.pass);
    }

    async fn abort(&mut self) {
        if let Some(w) = self.writer.take() {
            w.abort().await;
        }
        if let Some(w) = self.changes.take().and_then(|c| c.writer) {
            w.abort().await;
        }
    }
}

/// How a part is written: the scan's format, no header (the merge puts it
/// at each file's start).
fn part_options(spec: &ScanSpec) -> OutputOptions {
    OutputOptions {
        gzip: spec.gzip,
        format: spec.format,
        header: false,
        bucket: spec.bucket.clone(),
        ..OutputOptions::default()
    }
}

/// How many failures the shard may have after this one. A listing out of
/// order may have skipped keys before the checkpoint, and a checkpoint whose
/// version was deleted cannot be placed again: no later attempt (they all
/// resume there) can do better, so the shard is dead at once and the scan
/// cannot say Complete.
fn failures_allowed(e: &S3Error, max_failures: u32) -> u32 {
    match e {
        S3Error::ListingOutOfOrder(_) | S3Error::ResumeVersionGone { .. } => 1,
        _ => max_failures,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scan::record::Status;

    #[test]
    fn the_rate_covers_the_interval_between_snapshots() {
        let start = Instant::now();
        let progress = Progress {
            last: CountersSnapshot {
                heads: 1_000,
                ..CountersSnapshot::default()
            },
            at: start,
            unconfirmed: None,
        };
        // 3,000 HEADs in the 10 s between snapshots: 300/s, however long
        // the previous report took to reach Redis.
        let now = CountersSnapshot {
            heads: 4_000,
            listed: 3_500,
            ..CountersSnapshot::default()
        };
        let (deltas, rate) = progress.since_last(&now, start + Duration::from_secs(10));
        assert_eq!(rate, 300.0);
        assert_eq!(deltas[1], ("heads", 3_000));
        assert_eq!(deltas[0], ("listed", 3_500));
    }

    /// A resume point that cannot be trusted or placed (a version deleted
    /// since) fails the shard for good, whatever `maxFailures` says.
    #[test]
    fn a_checkpoint_that_cannot_be_resumed_kills_the_shard_at_once() {
        let gone = S3Error::ResumeVersionGone {
            key: "K".into(),
            version_id: "dm3".into(),
        };
        assert!(!gone.is_retryable());
        assert_eq!(failures_allowed(&gone, 3), 1);
        assert_eq!(
            failures_allowed(&S3Error::ListingOutOfOrder("b after c".into()), 3),
            1
        );
        assert_eq!(failures_allowed(&S3Error::BadAnswer("x".into()), 3), 3);
    }

    /// `--versions`: a checkpoint between two versions of one key resumes
    /// after that version; without versions a checkpoint is the key as it
    /// was, whatever it holds.
    #[test]
    fn a_versioned_checkpoint_is_a_key_and_a_version_and_sorts_between_keys() {
        let c = versioned_checkpoint("a/b", Some("3HL4kqtJ"));
        assert_eq!(resume_point(&c, true), ("a/b", Some("3HL4kqtJ")));
        assert_eq!(resume_point("a/b", true), ("a/b", None));
        assert_eq!(resume_point("a/b", false), ("a/b", None));
        assert_eq!(versioned_checkpoint("a/b", None), "a/b");
        // After its key, before every key after it: a split point after the
        // key keeps the key's remaining versions in this shard.
        assert!(c.as_str() > "a/b" && c.as_str() < "a/b!" && c.as_str() < "a/c");
    }

    /// The checkpoint after a `null` entry names that entry (its id is
    /// reused by a later PUT or DELETE under suspended versioning), reads
    /// back whatever the key holds, and one written before (`KEY\0null`)
    /// still reads as the `null` version.
    #[test]
    fn a_checkpoint_after_a_null_entry_round_trips_what_names_it() {
        use crate::s3::VersionPoint;
        for (key, marker, etag) in [("a/b", false, Some("\"e1\"")), ("odd\0key", true, None)] {
            let record = Record {
                key: key.into(),
                status: Status::Ok,
                size: 0,
                etag: etag.map(str::to_string),
                last_modified: Some("2026-11-27T14:26:53Z".into()),
                storage_class: None,
                content_type: None,
                metadata: Default::default(),
                binary_metadata: Vec::new(),
                missing_metadata: None,
                columns: crate::scan::record::ObjectColumns {
                    version_id: Some("null".into()),
                    is_delete_marker: Some(marker),
                    ..Default::default()
                },
                error: None,
                http_status: None,
                change: None,
                previous: None,
                verbatim: Default::default(),
            };
            let c = versioned_checkpoint(key, record.resume_version().as_deref());
            let (at, version) = resume_point(&c, true);
            assert_eq!(at, key, "{c:?}");
            assert_eq!(
                VersionPoint::parse(version.unwrap()),
                VersionPoint::of("null", marker, Some("2026-11-27T14:26:53.000Z"), etag),
                "{c:?}"
            );
            assert!(c.as_str() > key && c.as_str() < &format!("{key}!")[..]);
        }
        let (key, version) = resume_point("K\0null", true);
        assert_eq!(
            (key, VersionPoint::parse(version.unwrap()).null_entry),
            ("K", None)
        );
    }
}
