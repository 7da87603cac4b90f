//! One object composed from byte ranges of other objects in the same bucket,
//! server-side where S3 allows it: ranges of 5 MiB or more become
//! `UploadPartCopy` parts (no bytes through this process); smaller ones, and
//! the literal bytes a file starts with (a CSV header), are read and joined
//! until they make a part of at least 5 MiB. Parts go up concurrently
//! (bounded), numbered by their place, so the order is the plan's whatever
//! order they finish in.
//!
//! Planning ([`Planner`]) is pure, so callers can bound an object's parts
//! (S3 allows 10,000) before any request is sent.
//!
//! May import: the client and the bottom of `s3`.

use super::client::{sdk_error, S3};
use super::error::S3Error;
use super::upload::{MAX_PART_SIZE, MIN_PART_SIZE};
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{CompletedMultipartUpload, CompletedPart};
use bytes::Bytes;
use futures::stream::{self, StreamExt, TryStreamExt};
use std::sync::Arc;

/// Bytes `start..end` of object `key`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Source {
    pub key: String,
    pub start: u64,
    pub end: u64,
}

/// A piece of a joined part: literal bytes or a range of an object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Segment {
    Bytes(Bytes),
    Range(Source),
}

/// One part of the composed object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Piece {
    /// Copied server-side.
    Copy(Source),
    /// Read (the ranges) and uploaded.
    Join(Vec<Segment>),
}

impl Piece {
    /// Bytes the piece adds to the object.
    pub fn bytes(&self) -> u64 {
        match self {
            Piece::Copy(s) => s.end - s.start,
            Piece::Join(segments) => segments
                .iter()
                .map(|s| match s {
                    Segment::Bytes(b) => b.len() as u64,
                    Segment::Range(s) => s.end - s.start,
                })
                .sum(),
        }
    }
}

/// Largest range copied as one part: below S3's 5 GiB with room to absorb a
/// tail under 5 MiB into the last chunk.
const COPY_CHUNK: u64 = (MAX_PART_SIZE - MIN_PART_SIZE) as u64;

/// Plans the parts of one object as sources are added in order.
#[derive(Clone, Debug, Default)]
pub struct Planner {
    pieces: Vec<Piece>,
    pending: Vec<Segment>,
    pending_bytes: u64,
    bytes: u64,
}

impl Planner {
    /// A plan whose object starts with `lead` (may be empty).
    pub fn new(lead: Bytes) -> Planner {
        let mut p = Planner::default();
        if !lead.is_empty() {
            p.pending_bytes = lead.len() as u64;
            p.bytes = p.pending_bytes;
            p.pending.push(Segment::Bytes(lead));
        }
        p
    }

    /// The object's size so far.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Parts the object has once finished.
    pub fn parts(&self) -> usize {
        self.pieces.len() + usize::from(!self.pending.is_empty())
    }

    /// Parts that adding a source of `len` bytes can add at most: a top-up of
    /// the pending join, copies, and a new pending tail.
    pub fn parts_added_at_most(len: u64) -> usize {
        2 + len.div_ceil(COPY_CHUNK) as usize
    }

    pub fn add(&mut self, source: Source) {
        let min = MIN_PART_SIZE as u64;
        let Source { key, start, end } = source;
        self.bytes += end - start;
        let mut at = start;
        // Every part but the last must be at least 5 MiB: a small source, or
        // the head of one that tops up a started join, is read.
        if end - start < min || !self.pending.is_empty() {
            let head_end = end.min(at + (min - self.pending_bytes.min(min)));
            self.push_pending(Source {
                key: key.clone(),
                start: at,
                end: head_end,
            });
            at = head_end;
            if self.pending_bytes >= min {
                self.pieces.push(Piece::Join(std::mem::take(&mut self.pending)));
                self.pending_bytes = 0;
            }
        }
        if end - at >= min {
            while at < end {
                let chunk_end = if end - at <= COPY_CHUNK + min {
                    end
                } else {
                    at + COPY_CHUNK
                };
                self.pieces.push(Piece::Copy(Source {
                    key: key.clone(),
                    start: at,
                    end: chunk_end,
                }));
                at = chunk_end;
            }
        } else if at < end {
            self.push_pending(Source { key, start: at, end });
        }
    }

    fn push_pending(&mut self, s: Source) {
        if s.end > s.start {
            self.pending_bytes += s.end - s.start;
            self.pending.push(Segment::Range(s));
        }
    }

    pub fn finish(mut self) -> Vec<Piece> {
        if !self.pending.is_empty() {
            self.pieces.push(Piece::Join(std::mem::take(&mut self.pending)));
        }
        self.pieces
    }
}

/// What a composed object ended up as.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Composed {
    pub bytes: u64,
    /// The object's ETag as S3 returned it.
    pub etag: Option<String>,
    pub parts: usize,
}

/// Where the composed object goes.
pub struct Target<'a> {
    pub s3: &'a Arc<S3>,
    pub bucket: &'a str,
    pub key: &'a str,
    pub content_type: &'a str,
    /// Parts in flight at once.
    pub concurrency: usize,
}

/// Write `pieces` as object `target.key`. A plan of one joined piece (or
/// none) is a single PutObject; anything else a multipart upload, aborted on
/// failure so nothing partial becomes visible.
pub async fn compose(target: &Target<'_>, pieces: Vec<Piece>) -> Result<Composed, S3Error> {
    if pieces.len() <= 1 && !matches!(pieces.first(), Some(Piece::Copy(_))) {
        let body = match pieces.into_iter().next() {
            Some(Piece::Join(segments)) => read_segments(target, &segments).await?,
            _ => Vec::new(),
        };
        let bytes = body.len() as u64;
        let (s3, bucket) = (target.s3, target.bucket);
        let body = Bytes::from(body);
        let out = s3
            .send_retried(bucket, |sdk| {
                sdk.put_object()
                    .bucket(bucket)
                    .key(target.key)
                    .content_type(target.content_type)
                    .body(ByteStream::from(body.clone()))
                    .send()
            })
            .await?;
        return Ok(Composed {
            bytes,
            etag: out.e_tag().map(str::to_string),
            parts: 0,
        });
    }
    let id = create(target).await?;
    let result = upload_all(target, &id, pieces).await;
    if result.is_err() {
        abort(target, &id).await;
    }
    result
}

async fn upload_all(target: &Target<'_>, id: &str, pieces: Vec<Piece>) -> Result<Composed, S3Error> {
    let count = pieces.len();
    let done: Vec<(CompletedPart, u64)> = stream::iter(pieces.into_iter().enumerate())
        .map(|(i, piece)| send_piece(target, id, i as i32 + 1, piece))
        .buffered(target.concurrency.max(1))
        .try_collect()
        .await?;
    let bytes = done.iter().map(|(_, n)| n).sum();
    let parts = CompletedMultipartUpload::builder()
        .set_parts(Some(done.into_iter().map(|(p, _)| p).collect()))
        .build();
    let (s3, bucket) = (target.s3, target.bucket);
    let out = s3
        .send_retried(bucket, |sdk| {
            sdk.complete_multipart_upload()
                .bucket(bucket)
                .key(target.key)
                .upload_id(id)
                .multipart_upload(parts.clone())
                .send()
        })
        .await?;
    Ok(Composed {
        bytes,
        etag: out.e_tag().map(str::to_string),
        parts: count,
    })
}

async fn send_piece(
    target: &Target<'_>,
    id: &str,
    number: i32,
    piece: Piece,
) -> Result<(CompletedPart, u64), S3Error> {
    let (s3, bucket, key) = (target.s3, target.bucket, target.key);
    let (etag, len) = match piece {
        Piece::Copy(src) => {
            let copy_source = format!("{bucket}/{}", super::codec::encode_key(&src.key));
            let range = format!("bytes={}-{}", src.start, src.end - 1);
            let out = s3
                .send_retried(bucket, |sdk| {
                    sdk.upload_part_copy()
                        .bucket(bucket)
                        .key(key)
                        .upload_id(id)
                        .part_number(number)
                        .copy_source(&copy_source)
                        .copy_source_range(&range)
                        .send()
                })
                .await?;
            let etag = out.copy_part_result().and_then(|r| r.e_tag()).map(str::to_string);
            (etag, src.end - src.start)
        }
        Piece::Join(segments) => {
            let body = Bytes::from(read_segments(target, &segments).await?);
            let len = body.len() as u64;
            let out = s3
                .send_retried(bucket, |sdk| {
                    sdk.upload_part()
                        .bucket(bucket)
                        .key(key)
                        .upload_id(id)
                        .part_number(number)
                        .body(ByteStream::from(body.clone()))
                        .send()
                })
                .await?;
            (out.e_tag().map(str::to_string), len)
        }
    };
    let part = CompletedPart::builder()
        .part_number(number)
        .set_e_tag(etag)
        .build();
    Ok((part, len))
}

/// The bytes of a joined part: small ranges are many, so they are read
/// concurrently (bounded) and put together in order.
async fn read_segments(target: &Target<'_>, segments: &[Segment]) -> Result<Vec<u8>, S3Error> {
    let chunks: Vec<Bytes> = stream::iter(segments)
        .map(|segment| async move {
            match segment {
                Segment::Bytes(b) => Ok(b.clone()),
                Segment::Range(s) => {
                    let range = format!("bytes={}-{}", s.start, s.end - 1);
                    let got = target.s3.get(target.bucket, &s.key, Some(&range)).await?;
                    Ok::<_, S3Error>(got)
                }
            }
        })
        .buffered(target.concurrency.max(1))
        .try_collect()
        .await?;
    Ok(chunks.concat())
}

async fn create(target: &Target<'_>) -> Result<String, S3Error> {
    let (s3, bucket) = (target.s3, target.bucket);
    let created = s3
        .send_retried(bucket, |sdk| {
            sdk.create_multipart_upload()
                .bucket(bucket)
                .key(target.key)
                .content_type(target.content_type)
                .send()
        })
        .await?;
    created
        .upload_id()
        .map(str::to_string)
        .ok_or_else(|| S3Error::Other("CreateMultipartUpload returned no upload id".into()))
}

/// Best effort: an unfinished upload only costs storage until a lifecycle
/// rule removes it.
async fn abort(target: &Target<'_>, id: &str) {
    let r = target
        .s3
        .sdk_for(target.bucket)
        .0
        .abort_multipart_upload()
        .bucket(target.bucket)
        .key(target.key)
        .upload_id(id)
        .send()
        .await;
    if let Err(e) = r {
        tracing::warn!(error = %sdk_error(e, target.bucket), "could not abort multipart upload");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    fn src(key: &str, len: u64) -> Source {
        Source {
            key: key.into(),
            start: 0,
            end: len,
        }
    }

    fn len(piece: &Piece) -> u64 {
        piece.bytes()
    }

    /// Every byte once, in order; every part but the last at least 5 MiB and
    /// none above 5 GiB.
    fn check(pieces: &[Piece], sources: &[Source], lead: u64) {
        let mut ranges = Vec::new();
        for p in pieces {
            match p {
                Piece::Copy(s) => ranges.push(s.clone()),
                Piece::Join(segs) => ranges.extend(segs.iter().filter_map(|s| match s {
                    Segment::Range(s) => Some(s.clone()),
                    Segment::Bytes(_) => None,
                })),
            }
        }
        let mut expected = Vec::new();
        for s in sources.iter().filter(|s| s.end > s.start) {
            expected.push(s.clone());
        }
        // Adjacent ranges of one source join back into the source.
        let mut joined: Vec<Source> = Vec::new();
        for r in ranges {
            match joined.last_mut() {
                Some(last) if last.key == r.key && last.end == r.start => last.end = r.end,
                _ => joined.push(r),
            }
        }
        assert_eq!(joined, expected);
        let total: u64 = pieces.iter().map(len).sum();
        assert_eq!(total, lead + sources.iter().map(|s| s.end - s.start).sum::<u64>());
        for (i, p) in pieces.iter().enumerate() {
            assert!(len(p) <= MAX_PART_SIZE as u64);
            if i + 1 < pieces.len() {
                assert!(len(p) >= MIN_PART_SIZE as u64, "part {i} is {}", len(p));
            }
        }
    }

    #[test]
    fn big_sources_are_copied_small_ones_joined() {
        let sources = vec![
            src("a", 3 * MIB),
            src("b", 20 * MIB),
            src("c", MIB),
            src("d", 0),
            src("e", 9 * MIB),
        ];
        let mut p = Planner::new(Bytes::from_static(b"h,e,a,d\r\n"));
        for s in &sources {
            p.add(s.clone());
        }
        let parts = p.parts();
        let pieces = p.finish();
        assert_eq!(pieces.len(), parts);
        check(&pieces, &sources, 9);
        assert!(pieces.iter().any(|p| matches!(p, Piece::Copy(s) if s.key == "b")));
    }

    #[test]
    fn a_source_over_5_gib_is_copied_in_chunks() {
        let sources = vec![src("a", 12 << 30), src("b", (5 << 30) + 1)];
        let mut p = Planner::new(Bytes::new());
        for s in &sources {
            p.add(s.clone());
        }
        let pieces = p.finish();
        check(&pieces, &sources, 0);
        assert!(pieces.len() >= 5);
    }

    #[test]
    fn parts_added_bound_holds() {
        for sizes in [
            [1u64, 7 * MIB, 3 * MIB],
            [6 * MIB, 6 * MIB, 6 * MIB],
            [11 << 30, MIB, 0],
        ] {
            let mut p = Planner::new(Bytes::from_static(b"x"));
            for (i, n) in sizes.iter().enumerate() {
                let before = p.parts();
                p.add(src(&i.to_string(), *n));
                assert!(p.parts() - before <= Planner::parts_added_at_most(*n));
            }
        }
    }
}
