//! Streaming result output: JSON Lines or CSV, optionally gzip, or Parquet
//! (its writer only appends, so it streams too), to stdout, a
//! file or an S3 object. Output to S3 goes up as a multipart upload once it
//! outgrows one part, so a result of any size never sits whole in memory; its
//! parts grow as it grows (see [`part_size_for`]) so it never needs more than
//! S3's 10,000 parts.
//!
//! May import: `record`, `format`, `parquet` and `s3` (S3 output is an `Upload`).

use crate::s3::error::S3Error;
use crate::s3::upload::{Upload, MAX_PARTS, MAX_PART_SIZE, MIN_PART_SIZE};
use crate::s3::S3;
use crate::scan::format::Format;
use crate::scan::parquet::ParquetEncoder;
use crate::scan::record::Record;
use flate2::write::GzEncoder;
use std::io::Write;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Arc;
use tokio::io::AsyncWriteExt;

/// Buffer flushed to a local file or stdout at this size.
const LOCAL_FLUSH: usize = 256 * 1024;

/// Parts sent at one size before the size doubles.
const PARTS_PER_DOUBLING: usize = 1000;

/// The size of part number `sent + 1` of a streamed upload that started at
/// `base` bytes: `base` for the first 1,000 parts, doubling every 1,000
/// after, never above S3's 5 GiB. From 8 MiB this covers 8 GiB in the first
/// 1,000 parts (memory stays at one 8 MiB part for the common case) and
/// about 8 TiB within 10,000 parts, where a fixed 8 MiB stopped at 78 GiB.
/// Bigger results are what the dataset layout is for.
pub fn part_size_for(base: usize, sent: usize) -> usize {
    let doublings = (sent / PARTS_PER_DOUBLING).min(20) as u32;
    base.max(MIN_PART_SIZE)
        .saturating_mul(1usize << doublings)
        .min(MAX_PART_SIZE)
}

/// The most bytes a streamed upload starting at `base` can hold.
pub fn streamed_capacity(base: usize) -> u64 {
    (0..MAX_PARTS).map(|n| part_size_for(base, n) as u64).sum()
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Destination {
    Stdout,
    File(PathBuf),
    S3 { bucket: String, key: String },
}

impl FromStr for Destination {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s == "-" {
            return Ok(Destination::Stdout);
        }
        if let Some(rest) = s.strip_prefix("s3://") {
            return match rest.split_once('/') {
                Some((bucket, key)) if !bucket.is_empty() && !key.is_empty() => Ok(Destination::S3 {
                    bucket: bucket.to_string(),
                    key: key.to_string(),
                }),
                _ => Err(format!("{s:?} is not s3://BUCKET/KEY")),
            };
        }
        if s.is_empty() {
            return Err("output path is empty".into());
        }
        Ok(Destination::File(PathBuf::from(s)))
    }
}

impl std::fmt::Display for Destination {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Destination::Stdout => write!(f, "stdout"),
            Destination::File(p) => write!(f, "{}", p.display()),
            Destination::S3 { bucket, key } => write!(f, "s3://{bucket}/{key}"),
        }
    }
}

#[derive(Clone, Debug)]
pub struct OutputOptions {
    pub gzip: bool,
    pub format: Format,
    /// Start with the format's header (a CSV header row). Parts of a
    /// distributed scan have none: the merge puts it at each file's start.
    pub header: bool,
    /// The scanned bucket, a column of CSV rows.
    pub bucket: String,
    /// First multipart part size for S3 output; at least [`MIN_PART_SIZE`].
    pub part_size: usize,
    /// A change set's file: the result's columns and the change columns
    /// (CSV header, Parquet schema).
    pub changes: bool,
}

impl Default for OutputOptions {
    fn default() -> Self {
        OutputOptions {
            gzip: false,
            format: Format::Jsonl,
            header: true,
            bucket: String::new(),
            part_size: 8 * 1024 * 1024,
            changes: false,
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OutputSummary {
    pub records: u64,
    /// Bytes written after compression.
    pub bytes: u64,
    /// Parts uploaded (0 for a single PUT or a local file).
    pub parts: u32,
    /// SHA-256 of the bytes written.
    pub sha256: [u8; 32],
    /// The S3 object's ETag (S3 outputs).
    pub etag: Option<String>,
}

enum Encoder {
    Plain(Vec<u8>),
    Gzip(GzEncoder<Vec<u8>>),
    Parquet(Box<ParquetEncoder>),
}

impl Encoder {
    fn new(opts: &OutputOptions) -> Result<Encoder, S3Error> {
        opts.format.check_gzip(opts.gzip).map_err(S3Error::Config)?;
        Ok(match (opts.format, opts.gzip) {
            (Format::Parquet, _) => Encoder::Parquet(Box::new(
                ParquetEncoder::new(&opts.bucket, opts.changes).map_err(|e| S3Error::Other(e.to_string()))?,
            )),
            (_, true) => Encoder::Gzip(GzEncoder::new(Vec::new(), flate2::Compression::fast())),
            (_, false) => Encoder::Plain(Vec::new()),
        })
    }

    /// Encoded bytes not sent yet.
    fn pending(&mut self) -> &mut Vec<u8> {
        match self {
            Encoder::Plain(v) => v,
            Encoder::Gzip(g) => g.get_mut(),
            Encoder::Parquet(p) => p.output(),
        }
    }

    /// All that is left to send, the end of the stream included.
    fn finish(self) -> Result<Vec<u8>, S3Error> {
        match self {
            Encoder::Plain(v) => Ok(v),
            Encoder::Gzip(g) => g.finish().map_err(|e| S3Error::Other(format!("gzip: {e}"))),
            Encoder::Parquet(p) => p.finish().map_err(|e| S3Error::Other(e.to_string())),
        }
    }
}

enum Sink {
    Stdout(tokio::io::Stdout),
    /// Written to `tmp` (if any), renamed to `path` when complete.
    File {
        file: tokio::fs::File,
        tmp: Option<PathBuf>,
        path: PathBuf,
    },
    S3(MultipartUpload),
}

pub struct RecordWriter {
    encoder: Encoder,
    sink: Sink,
    flush_at: usize,
    /// The first `flush_at`, from which S3 parts grow.
    part_base: usize,
    format: Format,
    bucket: String,
    line: Vec<u8>,
    summary: OutputSummary,
    hasher: sha2::Sha256,
}

impl RecordWriter {
    pub async fn create(
        dest: &Destination,
        opts: &OutputOptions,
        s3: Option<&Arc<S3>>,
    ) -> Result<RecordWriter, S3Error> {
        let (sink, flush_at) = match dest {
            Destination::Stdout => (Sink::Stdout(tokio::io::stdout()), LOCAL_FLUSH),
            Destination::File(path) => {
                // A regular file is written beside and renamed when complete;
                // a device or pipe (/dev/null, a FIFO) is written in place.
                let special = tokio::fs::metadata(path).await.is_ok_and(|m| !m.is_file());
                let tmp = if special {
                    None
                } else {
                    let mut tmp = path.clone().into_os_string();
                    tmp.push(".partial");
                    Some(PathBuf::from(tmp))
                };
                let target = tmp.as_ref().unwrap_or(path);
                let file = tokio::fs::OpenOptions::new()
                    .write(true)
                    .create(true)
                    .truncate(!special)
                    .open(target)
                    .await
                    .map_err(|e| S3Error::Config(format!("cannot create {}: {e}", target.display())))?;
                (
                    Sink::File {
                        file,
                        tmp,
                        path: path.clone(),
                    },
                    LOCAL_FLUSH,
                )
            }
            Destination::S3 { bucket, key } => {
                let s3 = s3.ok_or_else(|| S3Error::Config("S3 output needs an S3 client".into()))?;
                let part_size = opts.part_size.max(MIN_PART_SIZE);
                let content_type = opts.format.content_type(opts.gzip);
                let upload = MultipartUpload::new(s3.clone(), bucket.clone(), key.clone(), content_type);
                (Sink::S3(upload), part_size)
            }
        };
        let encoder = Encoder::new(opts)?;
        let mut writer = RecordWriter {
            encoder,
            sink,
            flush_at,
            part_base: flush_at,
            format: opts.format,
            bucket: opts.bucket.clone(),
            line: Vec::new(),
            summary: OutputSummary::default(),
            hasher: sha2::Sha256::default(),
        };
        if opts.header && opts.format.is_text() {
            writer.line = match opts.changes {
                true => opts.format.change_header(),
                false => opts.format.header(),
            };
            writer.encode_line()?;
        }
        Ok(writer)
    }

    pub async fn write(&mut self, record: &Record) -> Result<(), S3Error> {
        if let Encoder::Parquet(p) = &mut self.encoder {
            p.push(record).map_err(|e| S3Error::Other(e.to_string()))?;
        } else {
            self.line.clear();
            self.format.write_record(record, &self.bucket, &mut self.line);
            self.encode_line()?;
        }
        self.summary.records += 1;
        if self.encoder.pending().len() >= self.flush_at {
            let chunk = std::mem::take(self.encoder.pending());
            self.send(chunk, false).await?;
            if let Sink::S3(upload) = &self.sink {
                self.flush_at = part_size_for(self.part_base, upload.upload.parts());
            }
            // The next chunk's room at once, for the part size now in force
            // (JSON Lines, CSV): grown by doubling, it was copied on every
            // growth.
            if let Encoder::Plain(next) = &mut self.encoder {
                next.reserve(self.flush_at + self.line.len());
            }
        }
        Ok(())
    }

    /// Bytes of the output so far: sent, and encoded but not sent yet
    /// (Parquet: only what its finished row groups hold).
    pub fn bytes_so_far(&mut self) -> u64 {
        self.summary.bytes + self.encoder.pending().len() as u64
    }

    fn encode_line(&mut self) -> Result<(), S3Error> {
        match &mut self.encoder {
            Encoder::Plain(v) => v.extend_from_slice(&self.line),
            Encoder::Gzip(g) => g
                .write_all(&self.line)
                .map_err(|e| S3Error::Other(format!("gzip: {e}")))?,
            Encoder::Parquet(_) => unreachable!("Parquet has no lines"),
        }
        Ok(())
    }

    /// Write what is left and make the output visible (rename the file,
    /// complete the upload). Nothing is visible before this succeeds.
    pub async fn finish(mut self) -> Result<OutputSummary, S3Error> {
        let rest = std::mem::replace(&mut self.encoder, Encoder::Plain(Vec::new())).finish()?;
        self.send(rest, true).await?;
        self.summary.sha256 = sha2::Digest::finalize(std::mem::take(&mut self.hasher)).into();
        match self.sink {
            Sink::Stdout(mut out) => out.flush().await.map_err(io_err)?,
            Sink::File { mut file, tmp, path } => {
                file.flush().await.map_err(io_err)?;
                if let Some(tmp) = tmp {
                    file.sync_all().await.map_err(io_err)?;
                    tokio::fs::rename(&tmp, &path).await.map_err(io_err)?;
                }
            }
            Sink::S3(upload) => (self.summary.parts, self.summary.etag) = upload.complete().await?,
        }
        Ok(self.summary)
    }

    /// Give up: nothing of this output becomes visible (the partial file is
    /// removed, the multipart upload aborted).
    pub async fn abort(self) {
        match self.sink {
            Sink::Stdout(_) => {}
            Sink::File { file, tmp, .. } => {
                drop(file);
                if let Some(tmp) = tmp {
                    let _ = tokio::fs::remove_file(&tmp).await;
                }
            }
            Sink::S3(mut upload) => upload.abort().await,
        }
    }

    async fn send(&mut self, chunk: Vec<u8>, last: bool) -> Result<(), S3Error> {
        self.summary.bytes += chunk.len() as u64;
        sha2::Digest::update(&mut self.hasher, &chunk);
        match &mut self.sink {
            Sink::Stdout(out) => out.write_all(&chunk).await.map_err(io_err),
            Sink::File { file, .. } => file.write_all(&chunk).await.map_err(io_err),
            Sink::S3(upload) => upload.push(chunk, last).await,
        }
    }
}

fn io_err(e: std::io::Error) -> S3Error {
    S3Error::Other(format!("writing output: {e}"))
}

/// The S3 sink: the streamed output's chunks become parts; a chunk that is
/// both the first and the last makes the output a single PutObject.
struct MultipartUpload {
    upload: Upload,
    /// The body of a single-PUT output, held until `complete`.
    small: Vec<u8>,
}

impl MultipartUpload {
    fn new(s3: Arc<S3>, bucket: String, key: String, content_type: &'static str) -> Self {
        MultipartUpload {
            upload: Upload::new(s3, bucket, key, content_type),
            small: Vec::new(),
        }
    }

    async fn push(&mut self, chunk: Vec<u8>, last: bool) -> Result<(), S3Error> {
        if last && !self.upload.is_multipart() {
            self.small = chunk;
            return Ok(());
        }
        if chunk.is_empty() && self.upload.parts() > 0 {
            return Ok(());
        }
        if let Err(e) = self.upload.upload_part(chunk).await {
            self.abort().await;
            return Err(e);
        }
        Ok(())
    }

    /// Returns the number of parts (0 for a single PUT).
    /// Parts uploaded and the object's ETag.
    async fn complete(mut self) -> Result<(u32, Option<String>), S3Error> {
        let etag = self.upload.complete(std::mem::take(&mut self.small)).await?;
        Ok((self.upload.parts() as u32, etag))
    }

    async fn abort(&mut self) {
        self.upload.abort().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scan::record::Status;

    fn record(key: &str) -> Record {
        Record {
            key: key.into(),
            status: Status::Ok,
            size: 1,
            etag: None,
            last_modified: None,
            storage_class: None,
            content_type: None,
            metadata: Default::default(),
            binary_metadata: Vec::new(),
            missing_metadata: None,
            columns: Default::default(),
            error: None,
            http_status: None,
            change: None,
            previous: None,
            verbatim: Default::default(),
        }
    }

    #[tokio::test]
    async fn file_output_appears_only_when_complete() {
        let dir = std::env::temp_dir().join(format!("bucketscan-output-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("out.jsonl");
        let dest = Destination::File(path.clone());
        let mut w = RecordWriter::create(&dest, &OutputOptions::default(), None)
            .await
            .unwrap();
        w.write(&record("a")).await.unwrap();
        assert!(!path.exists(), "not visible before finish");
        w.finish().await.unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap().lines().count(), 1);

        let mut w = RecordWriter::create(&dest, &OutputOptions::default(), None)
            .await
            .unwrap();
        w.write(&record("b")).await.unwrap();
        w.abort().await;
        assert!(
            std::fs::read_to_string(&path).unwrap().contains("\"a\""),
            "abort keeps the old file"
        );
        assert!(!dir.join("out.jsonl.partial").exists());
    }

    /// Writing to /dev/null must write to it, not replace the device.
    #[tokio::test]
    async fn special_files_are_written_in_place() {
        let dest = Destination::File("/dev/null".into());
        let mut w = RecordWriter::create(&dest, &OutputOptions::default(), None)
            .await
            .unwrap();
        w.write(&record("a")).await.unwrap();
        w.finish().await.unwrap();
        let meta = std::fs::metadata("/dev/null").unwrap();
        assert!(!meta.is_file(), "/dev/null is still a device");
    }

    #[test]
    fn streamed_parts_grow_so_10000_hold_tens_of_tebibytes() {
        let base = OutputOptions::default().part_size;
        assert_eq!(part_size_for(base, 0), base);
        assert_eq!(part_size_for(base, 999), base, "small outputs keep small parts");
        assert_eq!(part_size_for(base, 1000), 2 * base);
        assert_eq!(part_size_for(1, 0), MIN_PART_SIZE, "never below S3's minimum");
        for n in 0..MAX_PARTS {
            assert!(part_size_for(base, n) <= MAX_PART_SIZE);
            assert!(part_size_for(base, n + 1) >= part_size_for(base, n));
        }
        // 80 GiB failed before (10,000 x 8 MiB = 78 GiB); now far more fits.
        assert!(streamed_capacity(base) > 7 << 40, "{}", streamed_capacity(base));
        assert!(streamed_capacity(MIN_PART_SIZE) > 4 << 40);
    }

    #[test]
    fn destinations_parse() {
        assert_eq!("-".parse::<Destination>().unwrap(), Destination::Stdout);
        assert_eq!(
            "s3://b/k/x.jsonl".parse::<Destination>().unwrap(),
            Destination::S3 {
                bucket: "b".into(),
                key: "k/x.jsonl".into()
            }
        );
        assert!("s3://b".parse::<Destination>().is_err());
        assert!("s3:///k".parse::<Destination>().is_err());
        assert_eq!(
            "out.jsonl".parse::<Destination>().unwrap(),
            Destination::File("out.jsonl".into())
        );
    }
}
