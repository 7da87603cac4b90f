//! Which parts make which output file, and the S3 parts of each: pure, so
//! the limits are checked before any request. A dataset file is a run of
//! whole worker parts in key order, closed before it would pass the file
//! size bound or S3's 10,000 parts per upload. A single result is one upload
//! of all parts when that fits 10,000 parts; else it is composed in two
//! levels: data files first, then the result from the files (each file at
//! most 5 GiB, so one copied part each).
//!
//! Parquet cannot be concatenated: a Parquet file is a part copied whole, or
//! a run of small parts read and written again ([`plan_parquet_files`]).
//!
//! May import: `s3::compose` and `s3::upload` (its limits).

use crate::s3::compose::{Piece, Planner, Source};
use crate::s3::upload::MAX_PARTS;
use bytes::Bytes;
use std::ops::Range;

/// Parts uploaded or copied at once per output file, and parts read at once
/// when Redis lost their stats.
pub const MERGE_CONCURRENCY: usize = 16;

/// One recorded worker part as the merge sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartIn {
    pub key: String,
    pub size: u64,
}

/// One output file: parts `parts` of the input, written as `pieces`.
#[derive(Clone, Debug)]
pub struct FilePlan {
    pub parts: Range<usize>,
    pub pieces: Vec<Piece>,
}

/// Files of at most `file_size` bytes (a single part bigger than that makes
/// a file of its own), each starting with `lead`.
pub fn plan_files(parts: &[PartIn], lead: &Bytes, file_size: u64) -> Vec<FilePlan> {
    let mut files = Vec::new();
    let mut start = 0;
    let mut planner = Planner::new(lead.clone());
    for (i, part) in parts.iter().enumerate() {
        let fits_size = planner.bytes() + part.size <= file_size;
        let fits_parts = planner.parts() + Planner::parts_added_at_most(part.size) <= MAX_PARTS;
        if i > start && !(fits_size && fits_parts) {
            let done = std::mem::replace(&mut planner, Planner::new(lead.clone()));
            files.push(FilePlan {
                parts: start..i,
                pieces: done.finish(),
            });
            start = i;
        }
        planner.add(whole(part));
    }
    if start < parts.len() || files.is_empty() {
        files.push(FilePlan {
            parts: start..parts.len(),
            pieces: planner.finish(),
        });
    }
    files
}

/// The single result's plan.
#[derive(Clone, Debug)]
pub enum SinglePlan {
    /// One upload straight from the parts.
    Direct(Vec<Piece>),
    /// Data files first, then the result from them.
    TwoLevel(Vec<FilePlan>),
}

/// The single result's size: the lead and every part.
pub fn single_size(parts: &[PartIn], lead: &Bytes) -> u64 {
    parts
        .iter()
        .fold(lead.len() as u64, |sum, p| sum.saturating_add(p.size))
}

pub fn plan_single(parts: &[PartIn], lead: &Bytes, file_size: u64) -> SinglePlan {
    let mut planner = Planner::new(lead.clone());
    for part in parts {
        planner.add(whole(part));
    }
    if planner.parts() <= MAX_PARTS {
        return SinglePlan::Direct(planner.finish());
    }
    SinglePlan::TwoLevel(plan_files(parts, lead, file_size))
}

/// The result's pieces from written data files (`sizes`), each starting with
/// a `lead_len`-byte lead that only the first keeps; `None` when more than
/// 10,000 parts would be needed.
pub fn plan_from_files(keys: &[String], sizes: &[u64], lead: &Bytes) -> Option<Vec<Piece>> {
    let mut planner = Planner::new(Bytes::new());
    for (i, (key, size)) in keys.iter().zip(sizes).enumerate() {
        let skip = if i == 0 { 0 } else { lead.len() as u64 };
        planner.add(Source {
            key: key.clone(),
            start: skip.min(*size),
            end: *size,
        });
    }
    (planner.parts() <= MAX_PARTS).then(|| planner.finish())
}

/// Can the data files `files` will write be joined into one object (at most
/// 10,000 parts)? Known from their plans, so a result that cannot fit is
/// refused before any file is written.
pub fn files_fit_one_object(files: &[FilePlan], lead: &Bytes, key: impl Fn(usize) -> String) -> bool {
    let keys: Vec<String> = (0..files.len()).map(key).collect();
    let sizes: Vec<u64> = files
        .iter()
        .map(|f| f.pieces.iter().map(Piece::bytes).sum())
        .collect();
    plan_from_files(&keys, &sizes, lead).is_some()
}

/// A Parquet part at least this big (or half the file size, if less) is a
/// dataset file of its own, copied on the server: big enough for readers, and
/// the merger reads no byte of it. It also bounds what the merger holds per
/// part it reads.
pub const PARQUET_COPY_ALONE: u64 = 64 << 20;

/// The parts of each Parquet file, in key order: a part of at least
/// [`PARQUET_COPY_ALONE`] (or `file_size / 2`) alone, runs of smaller parts
/// joined up to `file_size` bytes of parts. A file of one part is copied;
/// one of several is rewritten (`fleet::rewrite`). No parts: one empty file.
pub fn plan_parquet_files(parts: &[PartIn], file_size: u64) -> Vec<Range<usize>> {
    let alone = (file_size / 2).min(PARQUET_COPY_ALONE);
    let mut files = Vec::new();
    let (mut start, mut bytes) = (0, 0u64);
    for (i, part) in parts.iter().enumerate() {
        let big = part.size >= alone;
        if i > start && (big || bytes + part.size > file_size) {
            files.push(start..i);
            (start, bytes) = (i, 0);
        }
        bytes += part.size;
        if big {
            files.push(i..i + 1);
            (start, bytes) = (i + 1, 0);
        }
    }
    if start < parts.len() || files.is_empty() {
        files.push(start..parts.len());
    }
    files
}

/// One part copied whole as an object of its own.
pub fn plan_copy(part: &PartIn) -> Vec<Piece> {
    let mut planner = Planner::new(Bytes::new());
    planner.add(whole(part));
    planner.finish()
}

fn whole(part: &PartIn) -> Source {
    Source {
        key: part.key.clone(),
        start: 0,
        end: part.size,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    fn parts(sizes: impl IntoIterator<Item = u64>) -> Vec<PartIn> {
        sizes
            .into_iter()
            .enumerate()
            .map(|(i, size)| PartIn {
                key: format!("p{i:06}"),
                size,
            })
            .collect()
    }

    fn check_files(files: &[FilePlan], n: usize, file_size: u64, input: &[PartIn]) {
        let mut next = 0;
        for f in files {
            assert_eq!(f.parts.start, next, "files follow each other in key order");
            assert!(!f.parts.is_empty());
            next = f.parts.end;
            assert!(f.pieces.len() <= MAX_PARTS);
            let bytes: u64 = input[f.parts.clone()].iter().map(|p| p.size).sum();
            assert!(bytes <= file_size || f.parts.len() == 1, "{bytes}");
        }
        assert_eq!(next, n, "every part in exactly one file");
    }

    #[test]
    fn files_are_bounded_and_cover_every_part_once() {
        let input = parts((0..25_000).map(|i| (i % 7) * MIB + 1));
        let files = plan_files(&input, &Bytes::from_static(b"h\r\n"), 64 * MIB);
        check_files(&files, input.len(), 64 * MIB, &input);
        assert!(files.len() > 1000);
        let one = plan_files(&parts([200 * MIB]), &Bytes::new(), 64 * MIB);
        check_files(&one, 1, 64 * MIB, &parts([200 * MIB]));
        assert_eq!(
            plan_files(&[], &Bytes::new(), MIB).len(),
            1,
            "no parts: one empty file"
        );
    }

    /// 12,000 parts of 6 MiB need 12,000 copied parts: more than one upload
    /// holds, so the single result goes through data files.
    #[test]
    fn a_single_result_over_10000_parts_is_composed_in_two_levels() {
        let input = parts(vec![6 * MIB; 12_000]);
        let SinglePlan::TwoLevel(files) = plan_single(&input, &Bytes::new(), 1 << 30) else {
            panic!("12,000 copied parts cannot be one upload");
        };
        check_files(&files, input.len(), 1 << 30, &input);
        let keys: Vec<String> = (0..files.len()).map(|i| format!("d{i}")).collect();
        let sizes: Vec<u64> = files
            .iter()
            .map(|f| input[f.parts.clone()].iter().map(|p| p.size).sum())
            .collect();
        let pieces = plan_from_files(&keys, &sizes, &Bytes::new()).unwrap();
        assert_eq!(pieces.len(), files.len(), "one copied part per file");
        let small = parts(vec![100; 20_000]);
        assert!(matches!(plan_single(&small, &Bytes::new(), 1 << 30), SinglePlan::Direct(p) if p.len() == 1));
    }

    #[test]
    fn parquet_files_copy_big_parts_and_join_runs_of_small_ones() {
        let sizes = [
            MIB,
            2 * MIB,
            70 * MIB,
            3 * MIB,
            30 * MIB,
            40 * MIB,
            MIB,
            200 * MIB,
        ];
        let input = parts(sizes);
        let files = plan_parquet_files(&input, 1 << 30);
        assert_eq!(files, vec![0..2, 2..3, 3..7, 7..8], "64 MiB parts alone");
        let small = plan_parquet_files(&input, 8 * MIB);
        let mut next = 0;
        for f in &small {
            assert_eq!(f.start, next, "every part once, in order");
            next = f.end;
            let bytes: u64 = input[f.clone()].iter().map(|p| p.size).sum();
            assert!(f.len() == 1 || bytes <= 8 * MIB, "{f:?}: {bytes}");
        }
        assert_eq!(next, input.len());
        assert_eq!(small[..3], [0..2, 2..3, 3..4], "4 MiB parts alone at 8 MiB files");
        assert_eq!(
            plan_parquet_files(&[], 1 << 30),
            vec![0..0],
            "no parts: one empty file"
        );
        assert!(matches!(plan_copy(&input[2])[..], [Piece::Copy(_)]));
    }

    #[test]
    fn more_than_10000_files_do_not_make_one_result() {
        let keys: Vec<String> = (0..10_001).map(|i| i.to_string()).collect();
        assert!(plan_from_files(&keys, &vec![6 * MIB; 10_001], &Bytes::new()).is_none());
        assert!(plan_from_files(&keys[..10_000], &vec![6 * MIB; 10_000], &Bytes::new()).is_some());
    }

    /// The two-level single result is judged from the files' plans, before
    /// a file is written (it was judged from the written files, so a result
    /// that could not fit left up to 10,001 files behind).
    #[test]
    fn whether_the_files_fit_one_object_is_known_before_writing_them() {
        let lead = Bytes::new();
        // 10,001 parts of 6 MiB at a 6 MiB file size: 10,001 files, one too many.
        let input = parts(std::iter::repeat_n(6 * MIB, 10_001));
        let SinglePlan::TwoLevel(files) = plan_single(&input, &lead, 6 * MIB) else {
            panic!("two levels");
        };
        assert_eq!(files.len(), 10_001);
        assert!(!files_fit_one_object(&files, &lead, |i| format!("data/{i}")));
        let input = parts(std::iter::repeat_n(6 * MIB, 10_001));
        let SinglePlan::TwoLevel(files) = plan_single(&input, &lead, 12 * MIB) else {
            panic!("two levels");
        };
        assert!(files_fit_one_object(&files, &lead, |i| format!("data/{i}")));
    }
}
