//! Result formats and layouts: how a record becomes bytes (JSON Lines, CSV;
//! Parquet is columnar and written by `parquet`) and the names, content types
//! and limits that follow from the choice.
//!
//! CSV follows RFC 4180: a header row, fields quoted when they hold a comma,
//! a quote, CR or LF, quotes doubled; user metadata is one JSON column. Rows
//! end with CRLF as the RFC says; readers (DuckDB, pandas, Excel) accept it.
//!
//! May import: `record`, `parquet`.

use crate::scan::record::{ObjectColumns, Previous, Record};
use serde::{Deserialize, Serialize};
use std::str::FromStr;

/// The encoding of the result's records.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    /// One JSON object per line (the historical and default format).
    #[default]
    Jsonl,
    /// RFC 4180 CSV with a header row; metadata as a JSON column.
    Csv,
    /// Apache Parquet (zstd), metadata as a map<string,string> column.
    Parquet,
}

/// How the result is laid out in the output bucket.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Layout {
    /// One object, `result.{ext}` (the layout of earlier releases, so it stays
    /// the default: an upgrade does not move the result).
    #[default]
    Single,
    /// Files of bounded size under `data/`, listed in `manifest.json`.
    Dataset,
}

impl FromStr for Format {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "jsonl" => Ok(Format::Jsonl),
            "csv" => Ok(Format::Csv),
            "parquet" => Ok(Format::Parquet),
            _ => Err(format!("unknown format {s:?}: use jsonl, csv or parquet")),
        }
    }
}

impl FromStr for Layout {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "single" => Ok(Layout::Single),
            "dataset" => Ok(Layout::Dataset),
            _ => Err(format!("unknown layout {s:?}: use single or dataset")),
        }
    }
}

/// The CSV columns, named after Amazon S3 Metadata tables where they exist:
/// Parquet's, in the same order.
pub const CSV_COLUMNS: [&str; 29] = crate::scan::parquet::COLUMNS;

impl Format {
    /// The file name extension, without the leading dot.
    pub fn extension(self, gzip: bool) -> &'static str {
        match (self, gzip) {
            (Format::Jsonl, false) => "jsonl",
            (Format::Jsonl, true) => "jsonl.gz",
            (Format::Csv, false) => "csv",
            (Format::Csv, true) => "csv.gz",
            // Parquet compresses its pages; gzip is refused with it.
            (Format::Parquet, _) => "parquet",
        }
    }

    pub fn content_type(self, gzip: bool) -> &'static str {
        match (self, gzip) {
            (Format::Parquet, _) => "application/vnd.apache.parquet",
            (_, true) => "application/gzip",
            (Format::Jsonl, false) => "application/x-ndjson",
            (Format::Csv, false) => "text/csv",
        }
    }

    /// The bytes every file of this format starts with (before compression).
    pub fn header(self) -> Vec<u8> {
        match self {
            Format::Jsonl | Format::Parquet => Vec::new(),
            Format::Csv => {
                let mut out = CSV_COLUMNS.join(",").into_bytes();
                out.extend_from_slice(b"\r\n");
                out
            }
        }
    }

    /// The header of a change set's files: the result's columns, then
    /// [`CHANGE_COLUMNS`].
    pub fn change_header(self) -> Vec<u8> {
        match self {
            Format::Jsonl | Format::Parquet => Vec::new(),
            Format::Csv => {
                let mut out = CSV_COLUMNS
                    .iter()
                    .chain(CHANGE_COLUMNS.iter())
                    .copied()
                    .collect::<Vec<_>>()
                    .join(",")
                    .into_bytes();
                out.extend_from_slice(b"\r\n");
                out
            }
        }
    }

    /// A line-based format, written record by record; Parquet is columnar.
    pub fn is_text(self) -> bool {
        self != Format::Parquet
    }

    /// Why `gzip` cannot go with this format, if it cannot.
    pub fn check_gzip(self, gzip: bool) -> Result<(), String> {
        if gzip && self == Format::Parquet {
            return Err("gzip does not apply to parquet: Parquet compresses its columns itself (zstd); drop --gzip (spec.output.gzip)".into());
        }
        Ok(())
    }

    /// Append one record of bucket `bucket` to `out` (text formats; Parquet
    /// records go through `parquet::ParquetEncoder`).
    pub fn write_record(self, record: &Record, bucket: &str, out: &mut Vec<u8>) {
        match self {
            Format::Jsonl => record.write_line(out),
            Format::Csv => write_csv_row(record, bucket, out),
            Format::Parquet => unreachable!("Parquet is not written a line at a time"),
        }
    }
}

fn write_csv_row(r: &Record, bucket: &str, out: &mut Vec<u8>) {
    // Thin records come of JSON Lines baselines, for JSON Lines results.
    debug_assert!(!r.is_thin(), "a thin record encoded as CSV");
    let metadata = serde_json::to_string(&r.metadata).expect("a map serializes");
    let status = serde_json::to_value(r.status).expect("a status serializes");
    let binary = match r.binary_metadata.is_empty() {
        true => String::new(),
        false => serde_json::to_string(&r.binary_metadata).expect("names serialize"),
    };
    let c = &r.columns;
    let flag = |b: Option<bool>| match b {
        Some(true) => "true",
        Some(false) => "false",
        None => "",
    };
    let tags = match &c.object_tags {
        Some(tags) => serde_json::to_string(tags).expect("a map serializes"),
        None => String::new(),
    };
    let part_count = c.part_count.map(|n| n.to_string()).unwrap_or_default();
    let fields: [&str; 29] = [
        bucket,
        &r.key,
        status.as_str().unwrap_or_default(),
        &r.size.to_string(),
        r.last_modified.as_deref().unwrap_or(""),
        r.etag.as_deref().unwrap_or(""),
        r.storage_class.as_deref().unwrap_or(""),
        r.content_type.as_deref().unwrap_or(""),
        &metadata,
        r.error.as_deref().unwrap_or(""),
        &r.http_status.map(|s| s.to_string()).unwrap_or_default(),
        c.version_id.as_deref().unwrap_or(""),
        &binary,
        &r.missing_metadata.map(|n| n.to_string()).unwrap_or_default(),
        c.server_side_encryption.as_deref().unwrap_or(""),
        c.kms_key_arn.as_deref().unwrap_or(""),
        flag(c.is_bucket_key_enabled),
        c.checksum_algorithm.as_deref().unwrap_or(""),
        c.checksum_type.as_deref().unwrap_or(""),
        c.checksum.as_deref().unwrap_or(""),
        flag(c.is_multipart),
        &part_count,
        c.object_lock_mode.as_deref().unwrap_or(""),
        c.object_lock_retain_until_date.as_deref().unwrap_or(""),
        flag(c.object_lock_legal_hold),
        c.replication_status.as_deref().unwrap_or(""),
        &tags,
        flag(c.is_latest),
        flag(c.is_delete_marker),
    ];
    for (i, field) in fields.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_csv_field(field, out);
    }
    if let Some(kind) = r.change {
        write_change_fields(kind, r.previous.as_deref(), out);
    }
    out.extend_from_slice(b"\r\n");
}

/// Columns a change set adds after the result's: the kind of change and
/// the baseline's record of the object (empty for an added one).
pub const CHANGE_COLUMNS: [&str; 6] = [
    "change",
    "previous_size",
    "previous_e_tag",
    "previous_last_modified",
    "previous_content_type",
    "previous_user_metadata",
];

fn write_change_fields(
    kind: crate::scan::record::ChangeKind,
    previous: Option<&Previous>,
    out: &mut Vec<u8>,
) {
    let (size, etag, modified, content_type, metadata) = match previous {
        Some(p) => (
            p.size.to_string(),
            p.etag.clone().unwrap_or_default(),
            p.last_modified.clone().unwrap_or_default(),
            p.content_type.clone().unwrap_or_default(),
            serde_json::to_string(&p.metadata).expect("a map serializes"),
        ),
        None => Default::default(),
    };
    for field in [kind.as_str(), &size, &etag, &modified, &content_type, &metadata] {
        out.push(b',');
        write_csv_field(field, out);
    }
}

fn write_csv_field(field: &str, out: &mut Vec<u8>) {
    if !field.contains([',', '"', '\r', '\n']) {
        out.extend_from_slice(field.as_bytes());
        return;
    }
    out.push(b'"');
    out.extend_from_slice(field.replace('"', "\"\"").as_bytes());
    out.push(b'"');
}

/// The keys of the records in `body` (one file or part, uncompressed, without
/// a header), in order: how the merge learns a part's key range when Redis
/// lost the part's statistics.
pub fn record_keys(format: Format, body: &[u8]) -> Result<Vec<String>, String> {
    match format {
        Format::Jsonl => body
            .split(|b| *b == b'\n')
            .filter(|l| !l.is_empty())
            .map(|l| {
                serde_json::from_slice::<Record>(l)
                    .map(|r| r.key)
                    .map_err(|e| format!("bad JSON line: {e}"))
            })
            .collect(),
        Format::Csv => Ok(parse_csv_rows(body)?
            .into_iter()
            .map(|mut row| row.swap_remove(1))
            .collect()),
        Format::Parquet => {
            crate::scan::parquet::record_keys(bytes::Bytes::copy_from_slice(body)).map_err(|e| e.to_string())
        }
    }
}

/// Rows of RFC 4180 CSV (every row must have all columns).
pub fn parse_csv(body: &[u8]) -> Result<Vec<Vec<String>>, String> {
    let rows = parse_csv_rows(body)?;
    if let Some(bad) = rows.iter().find(|r| r.len() != CSV_COLUMNS.len()) {
        return Err(format!(
            "CSV row has {} fields, not {}",
            bad.len(),
            CSV_COLUMNS.len()
        ));
    }
    Ok(rows)
}

/// Rows of RFC 4180 CSV, of any number of fields (a change set's rows have
/// [`CHANGE_COLUMNS`] too).
pub fn parse_csv_rows(body: &[u8]) -> Result<Vec<Vec<String>>, String> {
    let text = std::str::from_utf8(body).map_err(|e| format!("CSV is not UTF-8: {e}"))?;
    let mut rows = Vec::new();
    let (mut row, mut field) = (Vec::new(), String::new());
    let mut chars = text.chars().peekable();
    let mut quoted = false;
    while let Some(c) = chars.next() {
        match (quoted, c) {
            (true, '"') if chars.peek() == Some(&'"') => {
                chars.next();
                field.push('"');
            }
            (true, '"') => quoted = false,
            (true, c) => field.push(c),
            (false, '"') => quoted = true,
            (false, ',') => row.push(std::mem::take(&mut field)),
            (false, '\r') if chars.peek() == Some(&'\n') => {}
            (false, '\n') => {
                row.push(std::mem::take(&mut field));
                rows.push(std::mem::take(&mut row));
            }
            (false, c) => field.push(c),
        }
    }
    if quoted {
        return Err("CSV ends inside a quoted field".into());
    }
    Ok(rows)
}

/// Whether a parsed CSV row is the header row.
pub fn is_csv_header(row: &[String]) -> bool {
    row.iter().map(String::as_str).eq(CSV_COLUMNS)
}

/// The whole rows at the start of `pending` (all of it when `end`), taken
/// out of it: a row ends at a line break outside quotes.
pub fn take_csv_rows(pending: &mut Vec<u8>, end: bool) -> Result<Vec<Vec<String>>, String> {
    let cut = if end {
        pending.len()
    } else {
        let mut quoted = false;
        let mut cut = 0;
        for (i, b) in pending.iter().enumerate() {
            match b {
                b'"' => quoted = !quoted,
                b'\n' if !quoted => cut = i + 1,
                _ => {}
            }
        }
        cut
    };
    let rows = parse_csv(&pending[..cut])?;
    pending.drain(..cut);
    Ok(rows)
}

/// A record from a CSV row of a result (the columns [`CSV_COLUMNS`]).
pub fn parse_csv_record(row: &[String]) -> Result<Record, String> {
    let text = |i: usize| Some(row[i].clone()).filter(|v| !v.is_empty());
    let number = |i: usize, what: &str| -> Result<Option<u64>, String> {
        text(i)
            .map(|v| v.parse::<u64>().map_err(|e| format!("{what} {v:?}: {e}")))
            .transpose()
    };
    if row.len() < CSV_COLUMNS.len() {
        return Err(format!(
            "a row of {} fields, not {}: not a result of this release",
            row.len(),
            CSV_COLUMNS.len()
        ));
    }
    let flag = |i: usize, what: &str| -> Result<Option<bool>, String> {
        match row[i].as_str() {
            "" => Ok(None),
            "true" => Ok(Some(true)),
            "false" => Ok(Some(false)),
            other => Err(format!("{what} {other:?}: not true or false")),
        }
    };
    let status: crate::scan::record::Status =
        serde_json::from_value(serde_json::Value::String(row[2].clone()))
            .map_err(|e| format!("status: {e}"))?;
    Ok(Record {
        key: row[1].clone(),
        status,
        size: number(3, "size")?.unwrap_or(0),
        last_modified: text(4),
        etag: text(5),
        storage_class: text(6),
        content_type: text(7),
        metadata: serde_json::from_str(&row[8]).map_err(|e| format!("user_metadata: {e}"))?,
        error: text(9),
        http_status: number(10, "http_status")?.map(|n| n as u16),
        binary_metadata: match text(12) {
            Some(v) => serde_json::from_str(&v).map_err(|e| format!("binary_metadata: {e}"))?,
            None => Vec::new(),
        },
        missing_metadata: number(13, "missing_metadata")?.map(|n| n as u32),
        columns: ObjectColumns {
            version_id: text(11),
            server_side_encryption: text(14),
            kms_key_arn: text(15),
            is_bucket_key_enabled: flag(16, "is_bucket_key_enabled")?,
            checksum_algorithm: text(17),
            checksum_type: text(18),
            checksum: text(19),
            is_multipart: flag(20, "is_multipart")?,
            part_count: number(21, "part_count")?.map(|n| n as u32),
            object_lock_mode: text(22),
            object_lock_retain_until_date: text(23),
            object_lock_legal_hold: flag(24, "object_lock_legal_hold")?,
            replication_status: text(25),
            object_tags: text(26)
                .map(|v| serde_json::from_str(&v).map_err(|e| format!("object_tags: {e}")))
                .transpose()?,
            is_latest: flag(27, "is_latest")?,
            is_delete_marker: flag(28, "is_delete_marker")?,
        },
        change: None,
        previous: None,
        verbatim: Default::default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scan::record::Status;
    use std::collections::BTreeMap;

    fn record(key: &str) -> Record {
        Record {
            key: key.into(),
            status: Status::Ok,
            size: 7,
            etag: Some("\"abc\"".into()),
            last_modified: Some("2024-01-02T03:04:05Z".into()),
            storage_class: None,
            content_type: None,
            metadata: BTreeMap::from([("k".into(), "v,\"x\"\r\n".into())]),
            binary_metadata: vec!["k".into()],
            missing_metadata: Some(2),
            columns: ObjectColumns {
                version_id: Some("3HL4kqtJlcpXroDTDmJ+rmSpXd3dIbrHY".into()),
                server_side_encryption: Some("aws:kms".into()),
                kms_key_arn: Some("arn:aws:kms:us-east-1:1:key/k".into()),
                is_bucket_key_enabled: Some(false),
                checksum_algorithm: Some("CRC32".into()),
                checksum_type: Some("COMPOSITE".into()),
                checksum: Some("AAAA-2".into()),
                is_multipart: Some(true),
                part_count: Some(2),
                object_lock_mode: Some("COMPLIANCE".into()),
                object_lock_retain_until_date: Some("2031-01-01T00:00:00Z".into()),
                object_lock_legal_hold: Some(true),
                replication_status: Some("PENDING".into()),
                object_tags: Some(BTreeMap::from([("a,b".into(), "\"c\"".into())])),
                is_latest: Some(true),
                is_delete_marker: Some(false),
            },
            error: None,
            http_status: None,
            change: None,
            previous: None,
            verbatim: Default::default(),
        }
    }

    #[test]
    fn csv_rows_quote_what_needs_quoting_and_parse_back() {
        let keys = ["plain", "a,b", "q\"uote", "line\nbreak", "cr\rret", "ünï 💥", ""];
        let mut body = Vec::new();
        for k in keys {
            Format::Csv.write_record(&record(k), "bkt", &mut body);
        }
        let rows = parse_csv(&body).unwrap();
        assert_eq!(rows.len(), keys.len());
        for (row, k) in rows.iter().zip(keys) {
            assert_eq!(row[0], "bkt");
            assert_eq!(row[1], k);
            assert_eq!(row[2], "ok");
            assert_eq!(row[3], "7");
            assert_eq!(row[5], "\"abc\"");
            let meta: BTreeMap<String, String> = serde_json::from_str(&row[8]).unwrap();
            assert_eq!(meta["k"], "v,\"x\"\r\n");
            assert_eq!(row[12], "[\"k\"]");
            assert_eq!(row[13], "2");
            assert_eq!(row[16], "false");
            assert_eq!(row[20], "true");
            assert_eq!(row[21], "2");
            assert_eq!(row[26], "{\"a,b\":\"\\\"c\\\"\"}");
            assert_eq!(
                parse_csv_record(row).unwrap(),
                record(k),
                "every column reads back"
            );
        }
        let mut bare = record("bare");
        bare.columns = ObjectColumns::default();
        let mut line = Vec::new();
        Format::Csv.write_record(&bare, "bkt", &mut line);
        let row = &parse_csv(&line).unwrap()[0];
        assert!(row[14..].iter().all(String::is_empty), "{row:?}");
        assert_eq!(parse_csv_record(row).unwrap(), bare);
        assert!(parse_csv_record(&row[..14])
            .unwrap_err()
            .contains("not a result of this release"));
        assert_eq!(record_keys(Format::Csv, &body).unwrap(), keys);
        let header = Format::Csv.header();
        assert_eq!(parse_csv(&header).unwrap()[0], CSV_COLUMNS);
    }

    #[test]
    fn formats_and_layouts_parse_or_say_what_is_allowed() {
        assert_eq!("csv".parse::<Format>().unwrap(), Format::Csv);
        assert!("xml"
            .parse::<Format>()
            .unwrap_err()
            .contains("jsonl, csv or parquet"));
        assert_eq!("parquet".parse::<Format>().unwrap(), Format::Parquet);
        assert!(Format::Parquet
            .check_gzip(true)
            .unwrap_err()
            .contains("drop --gzip"));
        assert!(Format::Csv.check_gzip(true).is_ok());
        assert_eq!("dataset".parse::<Layout>().unwrap(), Layout::Dataset);
        assert!("many"
            .parse::<Layout>()
            .unwrap_err()
            .contains("single or dataset"));
    }
}
