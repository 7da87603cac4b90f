//! Planning a distributed scan: check both buckets, cut the keyspace into
//! shards with LIST only, store the spec and queue the shards, and last mark
//! the plan complete. The worker's `plan` command and the operator both do
//! it this way.
//!
//! A plan is made once. Shards go in by batches, so a planner that dies
//! midway leaves some; planning again then does not tile the keyspace anew
//! (a changed bucket tiles differently, and new shards would overlap the
//! stored ones: keys twice in the result) but queues exactly the ranges the
//! stored shards leave uncovered. Only the mark says the plan is whole: the
//! merge refuses without it (see `merge`).
//!
//! May import: `spec`, `queue`, `keyspace` and `s3`.

use crate::fleet::data_files::{self, DataFilesError};
use crate::fleet::incremental::{
    load_baseline, record_unsettled, settle_store_check, start_store_check, CheckStart, SETTLE_BOUND,
};
use crate::fleet::queue::{Queue, QueueError};
use crate::fleet::spec::{check_output, ScanSpec};
use crate::keyspace::coverage::uncovered;
use crate::keyspace::planner::{plan, plan_from_marks, BucketLister, PlanOptions};
use crate::keyspace::shard::Shard;
use crate::s3::error::S3Error;
use crate::s3::S3;
use crate::scan::baseline::{Baseline, BaselineError};
use crate::scan::format::Layout;
use crate::scan::partition::partition_of;
use crate::scan::store_check::Canary;
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    #[error("cannot list s3://{bucket}: {source}")]
    Source { bucket: String, source: S3Error },
    #[error("cannot use output bucket s3://{bucket}: {source}")]
    Output { bucket: String, source: S3Error },
    #[error("planning shards: {0}")]
    Planning(S3Error),
    #[error(transparent)]
    Queue(#[from] QueueError),
    /// The output settings cannot work (file size, a single result too big).
    #[error("{0}")]
    Settings(String),
}

impl PlanError {
    /// A cause that may pass by itself (the store throttling, failing or
    /// unreachable past every retry; Redis unreachable): planning again
    /// later may succeed. Missing buckets, refused access and bad settings
    /// are not.
    pub fn is_transient(&self) -> bool {
        match self {
            PlanError::Source { source, .. } | PlanError::Output { source, .. } => source.is_retryable(),
            PlanError::Planning(e) => e.is_retryable(),
            PlanError::Queue(q) => q.is_transient(),
            PlanError::Settings(_) => false,
        }
    }
}

/// Shards planned, and how many of them were new to the queue (planning
/// again adds nothing twice).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Planned {
    pub shards: usize,
    pub added: usize,
    /// Objects the planner counted (a lower bound where it sampled).
    pub estimated_objects: u64,
}

pub async fn plan_scan(
    s3: &S3,
    spec: &ScanSpec,
    opts: &PlanOptions,
    queue: &Queue,
) -> Result<Planned, PlanError> {
    let (planned, pending) = Box::pin(plan_marked(s3, spec, opts, queue)).await?;
    if let Some(pending) = pending {
        pending.settle(s3, spec).await;
    }
    Ok(planned)
}

/// A store check still settling after its plan was marked (a scan without
/// a baseline): settle it beside the scan's first HEADs.
pub struct PendingCheck(Canary);

impl PendingCheck {
    /// Settle and record the check within [`SETTLE_BOUND`]: a store that
    /// does not answer the canary's replaces by then leaves it unsettled,
    /// which costs only the result's use as a baseline (its manifest says
    /// why), not the scan. Not within a planning deadline: the plan is
    /// made.
    pub async fn settle(self, s3: &S3, spec: &ScanSpec) {
        match tokio::time::timeout(SETTLE_BOUND, Box::pin(settle_store_check(s3, spec, self.0))).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "recording the store check failed: this scan's result cannot be a baseline")
            }
            Err(_) => tracing::warn!(
                bound_s = SETTLE_BOUND.as_secs(),
                "the store check did not settle in time: this scan's result cannot be a baseline"
            ),
        }
    }
}

/// [`plan_scan`] up to its mark: the check of a scan without a baseline is
/// left to settle ([`PendingCheck::settle`]), by a caller that may bound
/// planning and not the settling.
pub async fn plan_marked(
    s3: &S3,
    spec: &ScanSpec,
    opts: &PlanOptions,
    queue: &Queue,
) -> Result<(Planned, Option<PendingCheck>), PlanError> {
    let check = |objects| {
        check_output(spec.format, spec.layout, spec.file_size, spec.gzip, objects)
            .map_err(PlanError::Settings)
    };
    check(0)?;
    s3.check_bucket(&spec.bucket)
        .await
        .map_err(|source| PlanError::Source {
            bucket: spec.bucket.clone(),
            source,
        })?;
    s3.check_bucket(&spec.output_bucket)
        .await
        .map_err(|source| PlanError::Output {
            bucket: spec.output_bucket.clone(),
            source,
        })?;
    if spec.layout == Layout::Dataset {
        data_files::check(s3, spec).await.map_err(|e| match e {
            DataFilesError::S3(source) => PlanError::Output {
                bucket: spec.output_bucket.clone(),
                source,
            },
            refused => PlanError::Settings(refused.to_string()),
        })?;
    }
    if let Some(done) = plan_of(queue).await? {
        return Ok((Planned { added: 0, ..done }, None));
    }
    // Before any shard is queued, so before any HEAD: the store check's
    // canary (the scan's start), and the baseline, whose faults are the
    // scan's, said once.
    // Boxed: these futures (SDK calls) are large, and a caller's stack may be
    // a runtime worker's.
    // Both go beside the planner's LISTs, which need neither, unless the
    // scan is planned from its baseline (then after them, with no LIST).
    // No HEAD starts before the spec is stored, after both, so the canary's
    // write still comes before every HEAD. Whether the store moves LastModified takes
    // up to a second more (LastModified's resolution), and no worker waits
    // for it: the check settles after the mark, beside the first LISTs and
    // HEADs. A scan without a baseline needs the answer only in its
    // manifest; a worker of one with a baseline takes no record from the
    // baseline before it (`incremental::prepare_engine`).
    let output_error = |source| PlanError::Output {
        bucket: spec.output_bucket.clone(),
        source,
    };
    let prepared = async {
        let (started, settling) = match Box::pin(start_store_check(s3, spec))
            .await
            .map_err(output_error)?
        {
            CheckStart::Settling(canary) => (Some(canary.started()), Some(canary)),
            CheckStart::Recorded(record) => (record.check.map(|c| c.started), None),
        };
        let baseline = Box::pin(load_baseline(s3, spec, started.as_deref()))
            .await
            .map_err(|e| match e {
                BaselineError::Read { source, .. } if source.is_retryable() => output_error(source),
                refused => PlanError::Settings(refused.to_string()),
            })?;
        Ok::<_, PlanError>((settling, baseline))
    };
    let stored = queue.shard_ranges().await?;
    let stored = &stored;
    // A scan with a baseline is planned from its blocks where they are
    // enough (`plan_from_marks`): no LIST, and each shard reads its
    // baseline from the block it begins at.
    let cut = |baseline: Option<Arc<Baseline>>| async move {
        if !stored.is_empty() {
            tracing::warn!(
                stored = stored.len(),
                "a plan that did not finish: queueing the ranges its shards leave"
            );
            return Ok((uncovered(&spec.prefix, stored), 0));
        }
        let lister = BucketLister {
            s3,
            bucket: &spec.bucket,
        };
        let opts = PlanOptions {
            prefix: spec.prefix.clone(),
            ..opts.clone()
        };
        let planned = match baseline.and_then(|b| plan_from_marks(&opts, b.marks())) {
            Some(planned) => planned,
            None => plan(&lister, &opts).await.map_err(PlanError::Planning)?,
        };
        let estimated: u64 = planned.iter().map(|s| s.estimated_objects).sum();
        check(estimated)?;
        Ok::<_, PlanError>((
            planned.into_iter().map(|p| p.shard).collect::<Vec<_>>(),
            estimated,
        ))
    };
    let (settling, (shards, estimated_objects)) = if spec.baseline.is_some() && stored.is_empty() {
        let (settling, baseline) = Box::pin(prepared).await?;
        (settling, Box::pin(cut(baseline)).await?)
    } else {
        let ((settling, _), cut) = tokio::try_join!(prepared, Box::pin(cut(None)))?;
        (settling, cut)
    };
    // Recorded before the spec is stored: a worker started without
    // `--wait-for-plan` takes shards as they are queued, and a planner that
    // stops from here on must leave a record (a check started again would be
    // later than those HEADs).
    if settling.is_some() {
        record_unsettled(s3, spec).await.map_err(output_error)?;
    }
    queue.set_spec(spec).await?;
    let shards = spread_across_partitions(shards);
    let mut added = queue.enqueue(&shards).await?;
    added += fill_gaps(spec, queue).await?;
    let planned = Planned {
        shards: stored.len() + shards.len(),
        added,
        estimated_objects,
    };
    mark_planned(queue, &planned).await?;
    Ok((planned, settling.map(PendingCheck)))
}

/// The shards in the order they are queued (and so taken): one from each
/// key partition in turn (the governor's partitions, first-level prefixes),
/// each partition's in key order. Taken in key order, a fleet scans one or
/// two prefixes at a time, and a store that limits each prefix (AWS: 5,500
/// HEAD/s per partitioned prefix) caps the whole fleet at that limit: the
/// family's per-prefix row reached 0.48 C (issue 29). The merge orders the
/// parts by key, so the order of taking changes nothing in the result.
pub fn spread_across_partitions(shards: Vec<Shard>) -> Vec<Shard> {
    // Partitions in the order their first shard comes, by index.
    let mut index: HashMap<String, usize> = HashMap::new();
    let mut partitions: Vec<VecDeque<Shard>> = Vec::new();
    let total = shards.len();
    for shard in shards {
        let name = partition_of(shard.lower_bound()).to_owned();
        let i = *index.entry(name).or_insert_with(|| {
            partitions.push(VecDeque::new());
            partitions.len() - 1
        });
        partitions[i].push_back(shard);
    }
    let mut spread = Vec::with_capacity(total);
    while !partitions.is_empty() {
        for queued in partitions.iter_mut() {
            spread.extend(queued.pop_front());
        }
        partitions.retain(|queued| !queued.is_empty());
    }
    spread
}

/// Rounds of [`fill_gaps`] before the plan is marked anyway (the merge's
/// tiling check still refuses a plan with a gap).
const GAP_ROUNDS: usize = 5;

/// Queue the ranges the stored shards leave, until they leave none: a
/// Redis that lost an earlier batch of this plan but kept a later one (a
/// primary cut off and written to, then replaced) would otherwise be
/// marked complete with a hole the merge refuses. Returns shards added.
pub async fn fill_gaps(spec: &ScanSpec, queue: &Queue) -> Result<usize, QueueError> {
    let mut added = 0;
    for _ in 0..GAP_ROUNDS {
        let gaps = uncovered(&spec.prefix, &queue.shard_ranges().await?);
        if gaps.is_empty() {
            break;
        }
        tracing::warn!(
            gaps = gaps.len(),
            "shards stored by this plan are gone: queueing their ranges again"
        );
        added += queue.enqueue(&gaps).await?;
    }
    Ok(added)
}

/// The plan of a scan whose plan is complete, `None` before that.
pub async fn plan_of(queue: &Queue) -> Result<Option<Planned>, QueueError> {
    let Some(json) = queue.plan_complete().await? else {
        return Ok(None);
    };
    // A mark that does not parse still marks the plan complete.
    let unknown = Planned {
        shards: 0,
        added: 0,
        estimated_objects: 0,
    };
    Ok(Some(serde_json::from_str(&json).unwrap_or(unknown)))
}

/// Mark the plan complete: every shard is stored.
pub async fn mark_planned(queue: &Queue, planned: &Planned) -> Result<(), QueueError> {
    let json = serde_json::to_string(planned).expect("serialisable");
    queue.mark_plan_complete(&json).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn range(start_after: Option<&str>, end: Option<&str>) -> Shard {
        Shard {
            prefix: String::new(),
            start_after: start_after.map(str::to_owned),
            end: end.map(str::to_owned),
        }
    }

    fn starts(shards: &[Shard]) -> Vec<&str> {
        shards.iter().map(|s| s.lower_bound()).collect()
    }

    #[test]
    fn shards_are_queued_one_partition_at_a_time_in_turn() {
        let shards = vec![
            Shard::prefix("a/"),
            range(Some("a/5"), Some("b/")),
            range(Some("b/"), Some("b/5")),
            range(Some("b/5"), Some("c/")),
            range(Some("c/"), Some("c/1")),
            range(Some("c/1"), Some("c/2")),
            range(Some("c/2"), Some("d")),
            range(Some("d"), None),
        ];
        let spread = spread_across_partitions(shards.clone());
        assert_eq!(
            starts(&spread),
            ["a/", "b/", "c/", "d", "a/5", "b/5", "c/1", "c/2"]
        );
        // Each partition's shards still in key order, and every shard once.
        let mut back = spread.clone();
        back.sort_by(|a, b| a.cmp_in_key_order(b));
        assert_eq!(back, shards);
    }

    #[test]
    fn keys_without_a_first_level_prefix_share_one_partition() {
        let shards = vec![
            range(None, Some("k")),
            range(Some("k"), Some("x/")),
            range(Some("x/"), None),
        ];
        let spread = spread_across_partitions(shards);
        assert_eq!(starts(&spread), ["", "x/", "k"]);
    }
}
