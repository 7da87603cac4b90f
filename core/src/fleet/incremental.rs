//! The fleet's side of store checks and incremental scans. Planning checks
//! the store once, its canary written before any worker HEADs anything, and
//! keeps what it found with the scan's parts (`store-check.json`): a plan
//! made again after Redis lost the scan finds it there and never checks
//! later than the first HEAD (a later `started` would let the next
//! incremental scan trust records it must not). The check settles after
//! the plan is marked ([`start_store_check`], [`settle_store_check`]),
//! beside the first HEADs; a worker of a scan with a baseline waits for it
//! before it takes a record from the baseline ([`prepare_engine`]).
//! Planning also loads and checks the baseline, so a bad one is the scan's
//! error, not every worker's. Workers make their engine incremental from
//! the same two; the merge records both in the manifest.
//!
//! May import: `spec`, `scan` and `s3`.

use crate::fleet::spec::ScanSpec;
use crate::s3::error::S3Error;
use crate::s3::S3;
use crate::scan::baseline::{Baseline, BaselineError};
use crate::scan::engine::{Engine, Incremental, Trust};
use crate::scan::store_check::{write_canary, Canary, StoreCheck};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// `store-check.json`: the check, or why it could not be made.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoreCheckRecord {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub check: Option<StoreCheck>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl StoreCheckRecord {
    /// Whether unchanged objects may be taken from a baseline.
    pub fn trusts_last_modified(&self) -> bool {
        self.check.as_ref().is_some_and(|c| c.last_modified_moves)
    }

    /// In words.
    pub fn detail(&self) -> String {
        match (&self.check, &self.error) {
            (Some(c), _) => c.detail.clone(),
            (None, Some(e)) => format!("the store check failed ({e}): every object is HEADed"),
            (None, None) => "no store check: every object is HEADed".into(),
        }
    }
}

/// What `store-check.json` says while a planner settles the check after it
/// marked the plan: a planner stopped before it settled leaves this, and the
/// scan's result cannot be a baseline (its start is known, but not whether
/// the store moves LastModified, and a check made later would start after
/// the scan's first HEADs).
pub const UNSETTLED: &str =
    "the store check did not settle after the plan was marked: its planner stopped, or the store did not answer within 10 s";

/// The first half of a store check ([`start_store_check`]).
pub enum CheckStart {
    /// A check recorded by an earlier planner of this scan, or one that
    /// failed at its canary's write.
    Recorded(StoreCheckRecord),
    /// The canary is written, nothing recorded yet: a planner stopped now
    /// checks again (no shard is queued yet, so no HEAD came). Before the
    /// spec and shards are stored, [`record_unsettled`]; after the mark,
    /// [`settle_store_check`].
    Settling(Canary),
}

/// The store check's start: the scan's canary written (its LastModified is
/// the scan's `started`) unless a check is recorded already. A store that
/// refuses the canary, or fails it past the retries, is recorded as such:
/// the scan goes on, HEADs every object and its result cannot be a
/// baseline. Each attempt has a canary of its own, so two planners never
/// see each other's writes.
pub async fn start_store_check(s3: &S3, spec: &ScanSpec) -> Result<CheckStart, S3Error> {
    if let Some(found) = read_store_check(s3, spec).await? {
        return Ok(CheckStart::Recorded(found));
    }
    let canary = format!(
        "{}store-check.{:016x}.canary",
        spec.parts_prefix(),
        rand::random::<u64>()
    );
    match write_canary(s3, &spec.output_bucket, &canary).await {
        Ok(canary) => Ok(CheckStart::Settling(canary)),
        Err(e) => {
            let failed = check_failed(&e);
            record_store_check(s3, spec, &failed).await?;
            Ok(CheckStart::Recorded(failed))
        }
    }
}

/// Record the check as [`UNSETTLED`], before the spec and shards are
/// stored: from then on HEADs may run, and a check started again would be
/// later than them.
pub async fn record_unsettled(s3: &S3, spec: &ScanSpec) -> Result<(), S3Error> {
    let unsettled = StoreCheckRecord {
        check: None,
        error: Some(UNSETTLED.into()),
    };
    record_store_check(s3, spec, &unsettled).await
}

/// Whether `record` is a check still settling (or whose planner stopped).
pub fn is_unsettled(record: &StoreCheckRecord) -> bool {
    record.check.is_none() && record.error.as_deref() == Some(UNSETTLED)
}

/// How long a planner settles the check after its mark, recording
/// included: the canary's replaces answer within a second or so
/// (LastModified's resolution), and a store that hangs on them must not hold
/// the planner while the scan runs. Past it, the check stays [`UNSETTLED`]
/// (whose words say this bound).
pub const SETTLE_BOUND: std::time::Duration = std::time::Duration::from_secs(10);

/// The recorded check, once its planner settled it: a merge started beside
/// the planner (`merge --wait-for-shards` with `plan`) may find a small
/// scan's shards done within the second the check takes. Waited for at most
/// [`SETTLE_BOUND`] and a little more; still unsettled then, its planner
/// stopped, and the record says so.
pub async fn settled_store_check(s3: &S3, spec: &ScanSpec) -> Result<Option<StoreCheckRecord>, S3Error> {
    let give_up = tokio::time::Instant::now() + SETTLE_BOUND + std::time::Duration::from_secs(5);
    loop {
        let found = read_store_check(s3, spec).await?;
        let settling = found.as_ref().is_some_and(is_unsettled);
        if !settling || tokio::time::Instant::now() >= give_up {
            return Ok(found);
        }
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }
}

/// The store check's end: whether the canary's LastModified moves,
/// recorded (in place of [`UNSETTLED`]).
pub async fn settle_store_check(
    s3: &S3,
    spec: &ScanSpec,
    canary: Canary,
) -> Result<StoreCheckRecord, S3Error> {
    let record = match canary.settle(s3).await {
        Ok(check) => StoreCheckRecord {
            check: Some(check),
            error: None,
        },
        Err(e) => check_failed(&e),
    };
    record_store_check(s3, spec, &record).await?;
    Ok(record)
}

fn check_failed(e: &S3Error) -> StoreCheckRecord {
    tracing::warn!(error = %e, "the store check failed: this scan HEADs every object and cannot be a baseline");
    StoreCheckRecord {
        check: None,
        error: Some(e.to_string()),
    }
}

async fn record_store_check(s3: &S3, spec: &ScanSpec, record: &StoreCheckRecord) -> Result<(), S3Error> {
    let json = serde_json::to_vec(record).expect("a check serializes");
    s3.put(
        &spec.output_bucket,
        &spec.store_check_key(),
        "application/json",
        json.into(),
    )
    .await
    .map(drop)
}

/// The most of `store-check.json` read (it is a few hundred bytes).
const MAX_CHECK_BYTES: u64 = 64 << 10;

/// The recorded store check, if planning made one. Read with a bound (the
/// scan's output is the tenant's to write), and never taken as absent when
/// it is there but unreadable: a check made now would be later than the
/// scan's first HEADs.
pub async fn read_store_check(s3: &S3, spec: &ScanSpec) -> Result<Option<StoreCheckRecord>, S3Error> {
    let range = format!("bytes=0-{}", MAX_CHECK_BYTES - 1);
    match s3
        .get(&spec.output_bucket, &spec.store_check_key(), Some(&range))
        .await
    {
        Ok(body) if (body.len() as u64) < MAX_CHECK_BYTES => {
            Ok(Some(serde_json::from_slice(&body).unwrap_or(StoreCheckRecord {
                check: None,
                error: Some("store-check.json is not what bucketscan wrote".into()),
            })))
        }
        Ok(_) => Ok(Some(StoreCheckRecord {
            check: None,
            error: Some("store-check.json is larger than bucketscan writes".into()),
        })),
        Err(e) if matches!(e.http_status(), Some(404 | 416)) => Ok(None),
        Err(e) => Err(e),
    }
}

/// The scan's baseline, loaded and checked against the scan and its start
/// (its store check's `started`, where known; none for a full scan).
pub async fn load_baseline(
    s3: &S3,
    spec: &ScanSpec,
    started: Option<&str>,
) -> Result<Option<Arc<Baseline>>, BaselineError> {
    let Some(location) = &spec.baseline else {
        return Ok(None);
    };
    let baseline = Baseline::load(s3, location).await?;
    baseline.admit(
        &spec.bucket,
        &spec.prefix,
        spec.format,
        &spec.filter,
        &spec.columns,
    )?;
    if let Some(started) = started {
        baseline.admit_start(started)?;
    }
    Ok(Some(Arc::new(baseline)))
}

#[derive(Debug, thiserror::Error)]
pub enum IncrementalError {
    #[error(transparent)]
    Baseline(#[from] BaselineError),
    #[error("reading the scan's store check: {0}")]
    S3(#[from] S3Error),
}

impl IncrementalError {
    pub fn is_transient(&self) -> bool {
        match self {
            IncrementalError::Baseline(BaselineError::Read { source, .. }) | IncrementalError::S3(source) => {
                source.is_retryable()
            }
            IncrementalError::Baseline(_) => false,
        }
    }
}

/// Make a worker's engine incremental when its scan has a baseline. A
/// worker that finds the store check still settling (its planner marked
/// the plan first) lists and reads the baseline meanwhile; the first object
/// that could be taken from the baseline waits for the check
/// ([`settled_store_check`]), and one that never settles means every object
/// is HEADed, which is exact whatever the store does.
pub async fn prepare_engine(engine: &Engine, spec: &ScanSpec) -> Result<(), IncrementalError> {
    if spec.baseline.is_none() {
        return Ok(());
    }
    let check = read_store_check(&engine.s3, spec).await?.unwrap_or_default();
    let started = check.check.as_ref().map(|c| c.started.as_str());
    let Some(baseline) = load_baseline(&engine.s3, spec, started).await? else {
        return Ok(());
    };
    let trust_last_modified = if is_unsettled(&check) {
        let (tell, trust) = Trust::pending();
        let (s3, spec, baseline) = (engine.s3.clone(), spec.clone(), baseline.clone());
        // Detached, and ends within the wait's bound: dropped without an
        // answer (a read that failed), the sender means no trust. The
        // baseline is checked against the scan's start as planning did,
        // now that it is known here.
        tokio::spawn(async move {
            if let Ok(found) = settled_store_check(&s3, &spec).await {
                let trusts = found
                    .and_then(|c| c.check)
                    .is_some_and(|c| c.last_modified_moves && baseline.admit_start(&c.started).is_ok());
                let _ = tell.send(Some(trusts));
            }
        });
        trust
    } else {
        Trust::known(check.trusts_last_modified())
    };
    engine.set_incremental(Incremental {
        baseline,
        trust_last_modified,
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unsettled_record_says_the_bound_and_is_told_from_a_failed_check() {
        assert!(UNSETTLED.contains(&format!("within {} s", SETTLE_BOUND.as_secs())));
        let unsettled = StoreCheckRecord {
            check: None,
            error: Some(UNSETTLED.into()),
        };
        assert!(is_unsettled(&unsettled));
        assert!(!unsettled.trusts_last_modified());
        let failed = StoreCheckRecord {
            check: None,
            error: Some("403 AccessDenied".into()),
        };
        assert!(!is_unsettled(&failed));
    }
}
