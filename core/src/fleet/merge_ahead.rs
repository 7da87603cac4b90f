//! Merging ahead: a merge started before the last shards end (`merge
//! --wait-for-shards`, which the operator starts in a scan's last seconds)
//! joins finished shards' small parts into staged objects of at least
//! [`SEGMENT_BYTES`] while the last shards run. The merge then copies each
//! staged object into the result on the server, instead of reading and
//! sending again every byte of the parts it holds: parts under 5 MiB cannot
//! be copied (S3's least part), and a 10^6-object result of 2 MB parts was
//! 280 MB read and sent after the last shard (1.5 s of the e2e bench's 31).
//!
//! A staged object holds consecutive parts (in the merge's order) of
//! finished shards, anywhere in the keyspace: the shards of different
//! prefixes are taken in turn, so finished shards form many runs, not one
//! from the start. Each part is read with the ETag the store answers with,
//! and the merge puts a staged object in place of its parts only where its
//! plan has those very parts one after another, each still with the ETag it
//! was read at, and the staged object is listed with the size and ETag it
//! was written with. Anything else is merged from the parts, as without it:
//! the result is the same bytes either way.
//!
//! Only for the single JSONL or CSV result (a dataset's files are cut at
//! part boundaries; Parquet is not joined byte-wise). Staged objects live
//! among the scan's parts (`merge-ahead/`) and go with them.
//!
//! May import: `spec`, `queue`, `merge_plan`, `scan` (the output format) and `s3`.

use crate::fleet::merge_plan::PartIn;
use crate::fleet::queue::view::MergeView;
use crate::fleet::queue::{Queue, QueueError};
use crate::fleet::spec::ScanSpec;
use crate::s3::codec::strip_quotes;
use crate::s3::error::S3Error;
use crate::s3::pages::list_all;
use crate::s3::upload::MIN_PART_SIZE;
use crate::s3::S3;
use crate::scan::format::Layout;
use futures::stream::{self, StreamExt, TryStreamExt};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// The least a staged object holds: twice S3's least part. The merge's
/// plan tops a join it has started (small parts before, a CSV header) up
/// from the head of the next object and copies the rest only if that rest
/// is 5 MiB or more: a staged object of 10 MiB is copied, all but at most
/// 5 MiB of it, wherever it stands.
pub const SEGMENT_BYTES: u64 = 2 * MIN_PART_SIZE as u64;

/// How often the finished shards are looked at, at least: a look at a
/// scan of many shards reads them all from Redis, so the next waits four
/// times as long as the look took (Redis serves it a fifth of the time).
const LOOK_EVERY: Duration = Duration::from_millis(500);

/// Objects staged at once: few, as the workers still run beside it.
const STAGING_CONCURRENCY: usize = 2;

/// Parts read at once for one staged object.
const READS: usize = 8;

/// Why a look at the finished shards staged nothing.
#[derive(Debug, thiserror::Error)]
pub enum AheadError {
    #[error(transparent)]
    Queue(#[from] QueueError),
    #[error(transparent)]
    S3(#[from] S3Error),
}

/// One listed object: its size and ETag (quotes off).
pub type Listed = HashMap<String, (u64, Option<String>)>;

/// A part as it was staged: key, size and the ETag it was read at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StagedPart {
    pub key: String,
    pub size: u64,
    pub etag: String,
}

/// A staged object: the parts it holds, one after another.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Staged {
    pub key: String,
    pub bytes: u64,
    pub etag: String,
    pub parts: Vec<StagedPart>,
}

/// What merging ahead staged.
#[derive(Debug, Default)]
pub struct Ahead {
    staged: Vec<Staged>,
    /// Names staged objects apart from another merger's.
    token: u64,
    /// The number of the next staged object: each name is written once (a
    /// name written again could be listed, or land, with the other bytes).
    next: usize,
    /// Shards done or dead at the last look: no look again until it moves.
    finished: Option<u64>,
}

impl Ahead {
    /// Parts held by staged objects.
    pub fn parts_staged(&self) -> usize {
        self.staged.iter().map(|s| s.parts.len()).sum()
    }

    /// Stage until `stop`: a look at the shards, then the segments of their
    /// parts not staged yet. A look that fails is logged and only loses the
    /// head start.
    pub async fn run(s3: &Arc<S3>, queue: &Queue, stop: &CancellationToken) -> Ahead {
        let mut ahead = Ahead {
            token: rand::random(),
            ..Ahead::default()
        };
        let mut spec: Option<ScanSpec> = None;
        loop {
            let began = Instant::now();
            if spec.is_none() {
                spec = queue.spec().await.ok().flatten();
            }
            if let Some(spec) = spec.as_ref().filter(|s| goes_ahead(s)) {
                if let Err(e) = ahead.look(s3, queue, spec, stop).await {
                    tracing::warn!(error = %e, "merging ahead: a look at the finished shards failed");
                }
            }
            let pause = LOOK_EVERY.max(began.elapsed() * 4);
            tokio::select! {
                _ = stop.cancelled() => return ahead,
                _ = tokio::time::sleep(pause) => {}
            }
        }
    }

    async fn look(
        &mut self,
        s3: &Arc<S3>,
        queue: &Queue,
        spec: &ScanSpec,
        stop: &CancellationToken,
    ) -> Result<(), AheadError> {
        // Two small reads before the view, which reads every shard.
        let counts = queue.counts().await?;
        let finished = counts.done + counts.dead;
        if self.finished == Some(finished) || queue.plan_complete().await?.is_none() {
            return Ok(());
        }
        let view = queue.merge_view().await?;
        let runs = finished_runs(spec, &view);
        if runs.is_empty() {
            return Ok(());
        }
        let listed = list_parts(s3, spec).await?;
        let staged: HashSet<&str> = self
            .staged
            .iter()
            .flat_map(|s| s.parts.iter().map(|p| p.key.as_str()))
            .collect();
        let segments = new_segments(&runs, &listed, &staged, SEGMENT_BYTES);
        let first = self.next;
        self.next += segments.len();
        let made: Vec<Option<Staged>> = stream::iter(segments.into_iter().enumerate())
            .take_while(|_| std::future::ready(!stop.is_cancelled()))
            .map(|(i, parts)| {
                let key = spec.ahead_key(self.token, first + i);
                stage(s3, spec, key, parts)
            })
            .buffered(STAGING_CONCURRENCY)
            .try_collect()
            .await?;
        let made: Vec<Staged> = made.into_iter().flatten().collect();
        if !made.is_empty() {
            tracing::info!(
                objects = made.len(),
                parts = made.iter().map(|s| s.parts.len()).sum::<usize>(),
                "merging ahead: finished parts staged"
            );
        }
        self.staged.extend(made);
        self.finished = Some(finished);
        Ok(())
    }

    /// `inputs` (the merge's parts in order) with each staged object in
    /// place of the parts it holds, where it still holds them (see the
    /// module doc); `listed` is the parts folder as listed now.
    pub fn in_place_of_parts(&self, inputs: &[PartIn], listed: &Listed) -> Vec<PartIn> {
        let by_first: HashMap<&str, &Staged> = self
            .staged
            .iter()
            .filter(|s| listed.get(&s.key) == Some(&(s.bytes, Some(strip_quotes(&s.etag)))))
            .map(|s| (s.parts[0].key.as_str(), s))
            .collect();
        let mut out = Vec::with_capacity(inputs.len());
        let mut i = 0;
        while i < inputs.len() {
            let holds = by_first.get(inputs[i].key.as_str()).filter(|s| {
                inputs.len() - i >= s.parts.len()
                    && s.parts.iter().zip(&inputs[i..]).all(|(p, input)| {
                        p.key == input.key
                            && p.size == input.size
                            && listed.get(&p.key) == Some(&(p.size, Some(strip_quotes(&p.etag))))
                    })
            });
            match holds {
                Some(staged) => {
                    out.push(PartIn {
                        key: staged.key.clone(),
                        size: staged.bytes,
                    });
                    i += staged.parts.len();
                }
                None => {
                    out.push(inputs[i].clone());
                    i += 1;
                }
            }
        }
        out
    }
}

/// Only the single JSONL or CSV result is merged ahead.
pub fn goes_ahead(spec: &ScanSpec) -> bool {
    spec.layout == Layout::Single && spec.format.is_text()
}

/// The scan's parts folder: size and ETag (quotes off) by key.
pub async fn list_parts(s3: &S3, spec: &ScanSpec) -> Result<Listed, S3Error> {
    let objects = list_all(s3, &spec.output_bucket, &spec.parts_prefix()).await?;
    Ok(objects.into_iter().map(|o| (o.key, (o.size, o.etag))).collect())
}

/// The finished shards' result parts in the merge's order, as runs: a run
/// ends at a shard still to finish (a dead shard adds no part, as in the
/// merge, and ends no run). Nothing until the plan is complete: before, a
/// shard may still be added between finished ones.
pub fn finished_runs(spec: &ScanSpec, view: &MergeView) -> Vec<Vec<String>> {
    if view.plan_complete.is_none() {
        return Vec::new();
    }
    let mut runs = vec![Vec::new()];
    for shard in &view.shards {
        match shard.state.as_str() {
            "done" => {
                let parts = view.parts.get(&shard.id).into_iter().flatten();
                let run = runs.last_mut().expect("never empty");
                run.extend(parts.filter(|k| !spec.is_change_part(k)).cloned());
            }
            "dead" => {}
            _ => runs.push(Vec::new()),
        }
    }
    runs.retain(|run| !run.is_empty());
    runs
}

/// What to stage: in each run, consecutive parts not staged yet and under
/// 5 MiB (a bigger part is copied by the merge as it is), gathered until
/// they hold at least `least` bytes. A part not listed yet, a staged or a
/// big one ends a gathering; a gathering short of `least` waits (its run may
/// grow) or is left to the merge.
pub fn new_segments(
    runs: &[Vec<String>],
    listed: &Listed,
    staged: &HashSet<&str>,
    least: u64,
) -> Vec<Vec<StagedPart>> {
    let mut segments = Vec::new();
    for run in runs {
        let mut gathering: Vec<StagedPart> = Vec::new();
        let mut bytes = 0;
        for key in run {
            let part = match listed.get(key) {
                Some((size, Some(etag)))
                    if *size < MIN_PART_SIZE as u64 && !staged.contains(key.as_str()) =>
                {
                    StagedPart {
                        key: key.clone(),
                        size: *size,
                        etag: etag.clone(),
                    }
                }
                _ => {
                    (gathering, bytes) = (Vec::new(), 0);
                    continue;
                }
            };
            bytes += part.size;
            gathering.push(part);
            if bytes >= least {
                segments.push(std::mem::take(&mut gathering));
                bytes = 0;
            }
        }
    }
    segments
}

/// Read `parts` and write them one after another as `key`; `None` when a
/// part changed since it was listed (its read's ETag is another).
async fn stage(
    s3: &Arc<S3>,
    spec: &ScanSpec,
    key: String,
    parts: Vec<StagedPart>,
) -> Result<Option<Staged>, S3Error> {
    let bucket = spec.output_bucket.as_str();
    let reads: Vec<(bytes::Bytes, Option<String>)> = stream::iter(&parts)
        .map(|p| read_tagged(s3, bucket, &p.key))
        .buffered(READS)
        .try_collect()
        .await?;
    let unchanged = parts.iter().zip(&reads).all(|(p, (body, etag))| {
        body.len() as u64 == p.size && etag.as_deref().map(strip_quotes) == Some(p.etag.clone())
    });
    if !unchanged {
        return Ok(None);
    }
    let body: bytes::Bytes = reads
        .iter()
        .map(|(b, _)| &b[..])
        .collect::<Vec<&[u8]>>()
        .concat()
        .into();
    let bytes = body.len() as u64;
    let etag = s3
        .put(bucket, &key, spec.format.content_type(spec.gzip), body)
        .await?
        .unwrap_or_default();
    Ok((!etag.is_empty()).then_some(Staged {
        key,
        bytes,
        etag,
        parts,
    }))
}

/// Object `key`, with the ETag the store answered with: which version of
/// it the bytes are of.
async fn read_tagged(s3: &S3, bucket: &str, key: &str) -> Result<(bytes::Bytes, Option<String>), S3Error> {
    let got = s3
        .send_retried(bucket, |sdk| sdk.get_object().bucket(bucket).key(key).send())
        .await?;
    let etag = got.e_tag.clone();
    let body = got
        .body
        .collect()
        .await
        .map_err(|e| S3Error::Connection(format!("reading {key}: {e}")))?;
    Ok((body.into_bytes(), etag))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fleet::queue::ShardRecord;
    use crate::keyspace::shard::Shard;
    use std::collections::BTreeMap;

    const MIB: u64 = 1 << 20;

    fn spec() -> ScanSpec {
        ScanSpec {
            bucket: "b".into(),
            prefix: String::new(),
            output_bucket: "o".into(),
            output_prefix: "r/".into(),
            gzip: false,
            only_with_metadata: false,
            max_failures: 3,
            format: Default::default(),
            layout: Layout::Single,
            file_size: crate::fleet::spec::DEFAULT_FILE_SIZE,
            scan_id: "s".into(),
            baseline: None,
            change_set: false,
            filter: Default::default(),
            columns: Default::default(),
        }
    }

    /// Shards `a`, `b`, ... in key order, in the states given, each with a
    /// result part and a change-set part.
    fn view(states: &[&str], complete: bool) -> MergeView {
        let spec = spec();
        let mut shards = Vec::new();
        let mut parts = BTreeMap::new();
        for (i, state) in states.iter().enumerate() {
            let id = format!("{}", (b'a' + i as u8) as char);
            shards.push(ShardRecord {
                id: id.clone(),
                shard: Shard::prefix(id.clone()),
                state: state.to_string(),
                attempts: 1,
                failures: 0,
                splits: 0,
                last_error: None,
                counts: BTreeMap::new(),
            });
            let result = spec.part_key(&id, 7, 0, None);
            let changes = result.replace(".jsonl", ".changes.jsonl");
            assert!(spec.is_change_part(&changes));
            parts.insert(id, vec![result, changes]);
        }
        MergeView {
            plan_complete: complete.then(|| "1".to_string()),
            round: 0,
            shards,
            parts,
        }
    }

    fn shards_of(run: &[String]) -> String {
        run.iter()
            .map(|k| k.trim_start_matches("r/parts/s/").split('/').next().unwrap())
            .collect()
    }

    #[test]
    fn finished_shards_make_runs_that_unfinished_ones_end() {
        let spec = spec();
        let runs = finished_runs(
            &spec,
            &view(
                &["done", "dead", "done", "leased", "done", "pending", "pending"],
                true,
            ),
        );
        // A dead shard adds nothing (as in the merge) and ends no run.
        let runs: Vec<String> = runs.iter().map(|r| shards_of(r)).collect();
        assert_eq!(runs, ["ac", "e"]);
        let runs = finished_runs(&spec, &view(&["done", "done"], true));
        assert!(runs.iter().flatten().all(|k| !spec.is_change_part(k)));
        // A plan not complete yet may still add a shard between finished ones.
        assert!(finished_runs(&spec, &view(&["done", "done"], false)).is_empty());
    }

    fn listed(parts: &[(&str, u64)]) -> Listed {
        parts
            .iter()
            .map(|(k, size)| (k.to_string(), (*size, Some(format!("e-{k}")))))
            .collect()
    }

    fn keys(segments: &[Vec<StagedPart>]) -> Vec<String> {
        segments
            .iter()
            .map(|s| s.iter().map(|p| p.key.as_str()).collect::<Vec<_>>().join("+"))
            .collect()
    }

    #[test]
    fn small_consecutive_parts_are_gathered_to_the_least_size() {
        let runs = vec![
            ["a", "b", "c", "d", "e", "f"].map(String::from).to_vec(),
            ["g", "h"].map(String::from).to_vec(),
        ];
        let mut sizes = listed(&[
            ("a", 3 * MIB),
            ("b", 3 * MIB),
            ("c", 3 * MIB),
            ("d", 6 * MIB),
            ("e", 4 * MIB),
        ]);
        sizes.extend(listed(&[("f", 5 * MIB - 1), ("g", 4 * MIB), ("h", 4 * MIB)]));
        let none = HashSet::new();
        // d is copied as it is; e+f reach 8 MiB; runs are gathered apart.
        assert_eq!(
            keys(&new_segments(&runs, &sizes, &none, 8 * MIB)),
            ["a+b+c", "e+f", "g+h"]
        );
        // Staged parts, parts not listed yet and parts without an ETag end a gathering.
        let staged: HashSet<&str> = ["b"].into();
        sizes.remove("g");
        sizes.insert("e".into(), (4 * MIB, None));
        assert_eq!(
            keys(&new_segments(&runs, &sizes, &staged, 6 * MIB)),
            Vec::<String>::new()
        );
        assert_eq!(
            keys(&new_segments(&runs, &sizes, &staged, 3 * MIB)),
            ["a", "c", "f", "h"]
        );
    }

    fn part(key: &str, size: u64) -> PartIn {
        PartIn {
            key: key.into(),
            size,
        }
    }

    fn staged(key: &str, parts: &[(&str, u64)]) -> Staged {
        Staged {
            key: key.into(),
            bytes: parts.iter().map(|p| p.1).sum(),
            etag: format!("\"e-{key}\""),
            parts: parts
                .iter()
                .map(|(k, size)| StagedPart {
                    key: k.to_string(),
                    size: *size,
                    etag: format!("e-{k}"),
                })
                .collect(),
        }
    }

    #[test]
    fn a_staged_object_stands_for_its_parts_only_while_all_of_them_are_unchanged() {
        let ahead = Ahead {
            staged: vec![
                staged("s1", &[("b", 2), ("c", 3)]),
                staged("s2", &[("e", 2), ("f", 2)]),
                staged("s3", &[("g", 1)]),
                staged("s4", &[("i", 1), ("j", 1)]),
            ],
            ..Ahead::default()
        };
        let sizes = [
            ("a", 1),
            ("b", 2),
            ("c", 3),
            ("d", 1),
            ("e", 2),
            ("f", 2),
            ("g", 1),
            ("h", 1),
            ("i", 1),
        ];
        let inputs: Vec<PartIn> = sizes.iter().map(|(k, s)| part(k, *s)).collect();
        let mut now = listed(&sizes);
        now.extend(listed(&[("j", 1)]));
        now.extend(listed(&[("s1", 5), ("s2", 4), ("s4", 2)]));
        // f was written again since it was staged; s3 is not listed; s4's
        // parts are not all in the merge (j is not).
        now.insert("f".into(), (2, Some("e-f-again".into())));
        let keys: Vec<String> = ahead
            .in_place_of_parts(&inputs, &now)
            .into_iter()
            .map(|p| p.key)
            .collect();
        assert_eq!(keys, ["a", "s1", "d", "e", "f", "g", "h", "i"]);
        // The same bytes: the staged object's size is its parts'.
        let size = |ps: &[PartIn]| ps.iter().map(|p| p.size).sum::<u64>();
        assert_eq!(size(&ahead.in_place_of_parts(&inputs, &now)), size(&inputs));
        // A staged object rewritten (another ETag) stands for nothing.
        now.insert("s1".into(), (5, Some("other".into())));
        assert_eq!(ahead.in_place_of_parts(&inputs, &now), inputs);
    }
}
