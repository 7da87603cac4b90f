//! Parquet results: records become Arrow columns written by the `parquet`
//! crate's `ArrowWriter` (zstd), and Parquet bytes become records again (the
//! merge joins small parts by reading them; tests and lost part stats read
//! keys back).
//!
//! Columns follow Amazon S3 Metadata tables' names and the CSV's order:
//! `bucket, key, status, size (int64), last_modified_date (timestamp ms UTC),
//! e_tag, storage_class, content_type, user_metadata (map<string,string>),
//! error, http_status (int32), version_id` (null: scans read the current
//! version; the column keeps one schema for a later versioned scan), then
//! two of our own: `binary_metadata` (list<string>: names whose value is the
//! base64 of bytes that are not UTF-8) and `missing_metadata` (int32: entries
//! the store left out, `x-amz-missing-meta`), then the columns a HEAD or
//! LIST answers (`s3::columns`): `server_side_encryption, kms_key_arn,
//! is_bucket_key_enabled (bool), checksum_algorithm, checksum_type,
//! checksum, is_multipart (bool), part_count (int32), object_lock_mode,
//! object_lock_retain_until_date (timestamp ms UTC),
//! object_lock_legal_hold (bool), replication_status, object_tags
//! (map<string,string>, null unless tags were asked for), is_latest (bool),
//! is_delete_marker (bool)`.
//!
//! Memory: the writer only appends (the footer comes last and needs no
//! seek), so a file streams to stdout or S3 like the text formats. What it
//! holds is the row group being built: encoded, compressed pages until the
//! group closes at [`ROW_GROUP_ROWS`] rows or [`ROW_GROUP_BYTES`] of encoded
//! data, whichever comes first, plus [`BATCH_ROWS`] records not yet encoded.
//!
//! May import: `record`.

use crate::scan::record::{ChangeKind, ObjectColumns, Previous, Record, Status};
use arrow_array::builder::{
    BooleanBuilder, Int32Builder, Int64Builder, ListBuilder, MapBuilder, MapFieldNames, StringBuilder,
    TimestampMillisecondBuilder,
};
use arrow_array::cast::AsArray;
use arrow_array::types::{Int32Type, Int64Type, TimestampMillisecondType};
use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_schema::{DataType, Field, Fields, Schema, SchemaRef, TimeUnit};
use aws_smithy_types::date_time::{DateTime, Format as TimeFormat};
use bytes::Bytes;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::arrow::{ArrowWriter, ProjectionMask};
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;
use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

/// A row group closes after this many rows: with ~100-300 bytes a record
/// that is tens of MiB compressed, the size readers such as DuckDB and Spark
/// parallelize well over.
pub const ROW_GROUP_ROWS: usize = 1 << 20;
/// ...or once its encoded, compressed data reaches this (objects with much
/// metadata): the bound on the writer's memory.
pub const ROW_GROUP_BYTES: usize = 128 << 20;
/// Records gathered before they are encoded as one Arrow batch.
pub const BATCH_ROWS: usize = 8192;

pub const COLUMNS: [&str; 29] = [
    "bucket",
    "key",
    "status",
    "size",
    "last_modified_date",
    "e_tag",
    "storage_class",
    "content_type",
    "user_metadata",
    "error",
    "http_status",
    "version_id",
    "binary_metadata",
    "missing_metadata",
    "server_side_encryption",
    "kms_key_arn",
    "is_bucket_key_enabled",
    "checksum_algorithm",
    "checksum_type",
    "checksum",
    "is_multipart",
    "part_count",
    "object_lock_mode",
    "object_lock_retain_until_date",
    "object_lock_legal_hold",
    "replication_status",
    "object_tags",
    "is_latest",
    "is_delete_marker",
];

/// Index of the first change column in a change set's schema.
const FIRST_CHANGE_COLUMN: usize = COLUMNS.len();

#[derive(Debug, thiserror::Error)]
pub enum ParquetError {
    #[error("parquet: {0}")]
    Parquet(#[from] parquet::errors::ParquetError),
    #[error("arrow: {0}")]
    Arrow(#[from] arrow_schema::ArrowError),
    #[error("not a bucketscan Parquet file: {0}")]
    Schema(String),
}

fn map_names() -> MapFieldNames {
    // Parquet's own names for a map's repeated group and its fields.
    MapFieldNames {
        entry: "key_value".into(),
        key: "key".into(),
        value: "value".into(),
    }
}

fn metadata_type() -> DataType {
    let names = map_names();
    let entries = Fields::from(vec![
        Field::new(names.key, DataType::Utf8, false),
        Field::new(names.value, DataType::Utf8, true),
    ]);
    DataType::Map(
        Arc::new(Field::new(names.entry, DataType::Struct(entries), false)),
        false,
    )
}

fn names_type() -> DataType {
    DataType::List(Arc::new(Field::new_list_field(DataType::Utf8, false)))
}

/// A change set's Arrow schema: the result's, then the change columns
/// (`format::CHANGE_COLUMNS`).
pub fn change_schema() -> SchemaRef {
    static SCHEMA: OnceLock<SchemaRef> = OnceLock::new();
    SCHEMA
        .get_or_init(|| {
            let mut fields: Vec<Field> = schema().fields().iter().map(|f| f.as_ref().clone()).collect();
            fields.extend([
                Field::new("change", DataType::Utf8, false),
                Field::new("previous_size", DataType::Int64, true),
                Field::new("previous_e_tag", DataType::Utf8, true),
                Field::new(
                    "previous_last_modified",
                    DataType::Timestamp(TimeUnit::Millisecond, Some("UTC".into())),
                    true,
                ),
                Field::new("previous_content_type", DataType::Utf8, true),
                Field::new("previous_user_metadata", metadata_type(), true),
            ]);
            Arc::new(Schema::new(fields))
        })
        .clone()
}

/// The result's Arrow schema.
pub fn schema() -> SchemaRef {
    static SCHEMA: OnceLock<SchemaRef> = OnceLock::new();
    SCHEMA
        .get_or_init(|| {
            let text = |name: &str, nullable| Field::new(name, DataType::Utf8, nullable);
            Arc::new(Schema::new(vec![
                text("bucket", false),
                text("key", false),
                text("status", false),
                Field::new("size", DataType::Int64, false),
                Field::new(
                    "last_modified_date",
                    DataType::Timestamp(TimeUnit::Millisecond, Some("UTC".into())),
                    true,
                ),
                text("e_tag", true),
                text("storage_class", true),
                text("content_type", true),
                Field::new("user_metadata", metadata_type(), false),
                text("error", true),
                Field::new("http_status", DataType::Int32, true),
                text("version_id", true),
                Field::new("binary_metadata", names_type(), false),
                Field::new("missing_metadata", DataType::Int32, true),
                text("server_side_encryption", true),
                text("kms_key_arn", true),
                Field::new("is_bucket_key_enabled", DataType::Boolean, true),
                text("checksum_algorithm", true),
                text("checksum_type", true),
                text("checksum", true),
                Field::new("is_multipart", DataType::Boolean, true),
                Field::new("part_count", DataType::Int32, true),
                text("object_lock_mode", true),
                Field::new(
                    "object_lock_retain_until_date",
                    DataType::Timestamp(TimeUnit::Millisecond, Some("UTC".into())),
                    true,
                ),
                Field::new("object_lock_legal_hold", DataType::Boolean, true),
                text("replication_status", true),
                Field::new("object_tags", metadata_type(), true),
                Field::new("is_latest", DataType::Boolean, true),
                Field::new("is_delete_marker", DataType::Boolean, true),
            ]))
        })
        .clone()
}

/// Column builders for up to [`BATCH_ROWS`] records.
struct Columns {
    bucket: StringBuilder,
    key: StringBuilder,
    status: StringBuilder,
    size: Int64Builder,
    last_modified: TimestampMillisecondBuilder,
    etag: StringBuilder,
    storage_class: StringBuilder,
    content_type: StringBuilder,
    metadata: MapBuilder<StringBuilder, StringBuilder>,
    error: StringBuilder,
    http_status: Int32Builder,
    version_id: StringBuilder,
    binary_metadata: ListBuilder<StringBuilder>,
    missing_metadata: Int32Builder,
    object: ObjectColumnBuilders,
    /// Change sets only.
    changes: Option<ChangeColumns>,
    rows: usize,
}

/// Builders of the `s3::columns` columns.
struct ObjectColumnBuilders {
    server_side_encryption: StringBuilder,
    kms_key_arn: StringBuilder,
    is_bucket_key_enabled: BooleanBuilder,
    checksum_algorithm: StringBuilder,
    checksum_type: StringBuilder,
    checksum: StringBuilder,
    is_multipart: BooleanBuilder,
    part_count: Int32Builder,
    object_lock_mode: StringBuilder,
    object_lock_retain_until_date: TimestampMillisecondBuilder,
    object_lock_legal_hold: BooleanBuilder,
    replication_status: StringBuilder,
    object_tags: MapBuilder<StringBuilder, StringBuilder>,
    is_latest: BooleanBuilder,
    is_delete_marker: BooleanBuilder,
}

impl ObjectColumnBuilders {
    fn new() -> ObjectColumnBuilders {
        ObjectColumnBuilders {
            server_side_encryption: StringBuilder::new(),
            kms_key_arn: StringBuilder::new(),
            is_bucket_key_enabled: BooleanBuilder::new(),
            checksum_algorithm: StringBuilder::new(),
            checksum_type: StringBuilder::new(),
            checksum: StringBuilder::new(),
            is_multipart: BooleanBuilder::new(),
            part_count: Int32Builder::new(),
            object_lock_mode: StringBuilder::new(),
            object_lock_retain_until_date: TimestampMillisecondBuilder::new().with_timezone("UTC"),
            object_lock_legal_hold: BooleanBuilder::new(),
            replication_status: StringBuilder::new(),
            object_tags: metadata_builder(),
            is_latest: BooleanBuilder::new(),
            is_delete_marker: BooleanBuilder::new(),
        }
    }

    fn push(&mut self, c: &ObjectColumns) -> Result<(), ParquetError> {
        self.server_side_encryption
            .append_option(c.server_side_encryption.as_deref());
        self.kms_key_arn.append_option(c.kms_key_arn.as_deref());
        self.is_bucket_key_enabled.append_option(c.is_bucket_key_enabled);
        self.checksum_algorithm
            .append_option(c.checksum_algorithm.as_deref());
        self.checksum_type.append_option(c.checksum_type.as_deref());
        self.checksum.append_option(c.checksum.as_deref());
        self.is_multipart.append_option(c.is_multipart);
        self.part_count
            .append_option(c.part_count.map(|n| i32::try_from(n).unwrap_or(i32::MAX)));
        self.object_lock_mode.append_option(c.object_lock_mode.as_deref());
        // A date the store sent that is not a time stays in JSONL and CSV
        // as sent; a timestamp column can only leave it null.
        self.object_lock_retain_until_date.append_option(
            c.object_lock_retain_until_date
                .as_deref()
                .and_then(|t| millis(t).ok()),
        );
        self.object_lock_legal_hold
            .append_option(c.object_lock_legal_hold);
        self.replication_status
            .append_option(c.replication_status.as_deref());
        match &c.object_tags {
            Some(tags) => {
                for (name, value) in tags {
                    self.object_tags.keys().append_value(name);
                    self.object_tags.values().append_value(value);
                }
                self.object_tags.append(true)?;
            }
            None => self.object_tags.append(false)?,
        }
        self.is_latest.append_option(c.is_latest);
        self.is_delete_marker.append_option(c.is_delete_marker);
        Ok(())
    }

    fn finish(&mut self, columns: &mut Vec<ArrayRef>) {
        columns.push(Arc::new(self.server_side_encryption.finish()));
        columns.push(Arc::new(self.kms_key_arn.finish()));
        columns.push(Arc::new(self.is_bucket_key_enabled.finish()));
        columns.push(Arc::new(self.checksum_algorithm.finish()));
        columns.push(Arc::new(self.checksum_type.finish()));
        columns.push(Arc::new(self.checksum.finish()));
        columns.push(Arc::new(self.is_multipart.finish()));
        columns.push(Arc::new(self.part_count.finish()));
        columns.push(Arc::new(self.object_lock_mode.finish()));
        columns.push(Arc::new(self.object_lock_retain_until_date.finish()));
        columns.push(Arc::new(self.object_lock_legal_hold.finish()));
        columns.push(Arc::new(self.replication_status.finish()));
        columns.push(Arc::new(self.object_tags.finish()));
        columns.push(Arc::new(self.is_latest.finish()));
        columns.push(Arc::new(self.is_delete_marker.finish()));
    }
}

/// The `s3::columns` columns of `row` (a batch of [`schema`]'s columns first).
fn object_columns_at(batch: &RecordBatch, row: usize) -> ObjectColumns {
    let text = |i: usize| {
        let a = batch.column(i).as_string::<i32>();
        a.is_valid(row).then(|| a.value(row).to_string())
    };
    let flag = |i: usize| {
        let a = batch.column(i).as_boolean();
        a.is_valid(row).then(|| a.value(row))
    };
    let parts = batch.column(21).as_primitive::<Int32Type>();
    let until = batch.column(23).as_primitive::<TimestampMillisecondType>();
    let tags = batch.column(26).as_map();
    ObjectColumns {
        version_id: text(11),
        server_side_encryption: text(14),
        kms_key_arn: text(15),
        is_bucket_key_enabled: flag(16),
        checksum_algorithm: text(17),
        checksum_type: text(18),
        checksum: text(19),
        is_multipart: flag(20),
        part_count: parts.is_valid(row).then(|| parts.value(row).max(0) as u32),
        object_lock_mode: text(22),
        object_lock_retain_until_date: until.is_valid(row).then(|| rfc3339(until.value(row))),
        object_lock_legal_hold: flag(24),
        replication_status: text(25),
        object_tags: tags.is_valid(row).then(|| string_map(tags, row)),
        is_latest: flag(27),
        is_delete_marker: flag(28),
    }
}

/// The map<string,string> of `row`.
fn string_map(map: &arrow_array::MapArray, row: usize) -> BTreeMap<String, String> {
    let entries = map.value(row);
    let (names, values) = (
        entries.column(0).as_string::<i32>(),
        entries.column(1).as_string::<i32>(),
    );
    (0..entries.len())
        .map(|i| (names.value(i).to_string(), values.value(i).to_string()))
        .collect()
}

/// The change columns of a change set's rows.
struct ChangeColumns {
    change: StringBuilder,
    size: Int64Builder,
    etag: StringBuilder,
    last_modified: TimestampMillisecondBuilder,
    content_type: StringBuilder,
    metadata: MapBuilder<StringBuilder, StringBuilder>,
}

fn metadata_builder() -> MapBuilder<StringBuilder, StringBuilder> {
    MapBuilder::new(Some(map_names()), StringBuilder::new(), StringBuilder::new())
        .with_keys_field(Arc::new(Field::new("key", DataType::Utf8, false)))
        .with_values_field(Arc::new(Field::new("value", DataType::Utf8, true)))
}

impl ChangeColumns {
    fn new() -> ChangeColumns {
        ChangeColumns {
            change: StringBuilder::new(),
            size: Int64Builder::new(),
            etag: StringBuilder::new(),
            last_modified: TimestampMillisecondBuilder::new().with_timezone("UTC"),
            content_type: StringBuilder::new(),
            metadata: metadata_builder(),
        }
    }

    fn push(&mut self, r: &Record) -> Result<(), ParquetError> {
        let kind = r.change.ok_or_else(|| {
            ParquetError::Schema(format!("record of {:?} in a change set has no change", r.key))
        })?;
        self.change.append_value(kind.as_str());
        let previous = r.previous.as_deref();
        self.size
            .append_option(previous.map(|p| i64::try_from(p.size).unwrap_or(i64::MAX)));
        self.etag.append_option(previous.and_then(|p| p.etag.as_deref()));
        self.last_modified.append_option(
            previous
                .and_then(|p| p.last_modified.as_deref())
                .map(millis)
                .transpose()?,
        );
        self.content_type
            .append_option(previous.and_then(|p| p.content_type.as_deref()));
        match previous {
            Some(p) => {
                for (name, value) in &p.metadata {
                    self.metadata.keys().append_value(name);
                    self.metadata.values().append_value(value);
                }
                self.metadata.append(true)?;
            }
            None => self.metadata.append(false)?,
        }
        Ok(())
    }

    fn finish(&mut self, columns: &mut Vec<ArrayRef>) {
        columns.push(Arc::new(self.change.finish()));
        columns.push(Arc::new(self.size.finish()));
        columns.push(Arc::new(self.etag.finish()));
        columns.push(Arc::new(self.last_modified.finish()));
        columns.push(Arc::new(self.content_type.finish()));
        columns.push(Arc::new(self.metadata.finish()));
    }
}

impl Columns {
    fn new(changes: bool) -> Columns {
        let metadata = metadata_builder();
        Columns {
            bucket: StringBuilder::new(),
            key: StringBuilder::new(),
            status: StringBuilder::new(),
            size: Int64Builder::new(),
            last_modified: TimestampMillisecondBuilder::new().with_timezone("UTC"),
            etag: StringBuilder::new(),
            storage_class: StringBuilder::new(),
            content_type: StringBuilder::new(),
            metadata,
            error: StringBuilder::new(),
            http_status: Int32Builder::new(),
            version_id: StringBuilder::new(),
            binary_metadata: ListBuilder::new(StringBuilder::new())
                .with_field(Arc::new(Field::new_list_field(DataType::Utf8, false))),
            missing_metadata: Int32Builder::new(),
            object: ObjectColumnBuilders::new(),
            changes: changes.then(ChangeColumns::new),
            rows: 0,
        }
    }

    fn push(&mut self, r: &Record, bucket: &str) -> Result<(), ParquetError> {
        debug_assert!(!r.is_thin(), "a thin record encoded as Parquet");
        self.bucket.append_value(bucket);
        self.key.append_value(&r.key);
        self.status.append_value(status_name(r.status));
        self.size.append_value(i64::try_from(r.size).unwrap_or(i64::MAX));
        self.last_modified
            .append_option(r.last_modified.as_deref().map(millis).transpose()?);
        self.etag.append_option(r.etag.as_deref());
        self.storage_class.append_option(r.storage_class.as_deref());
        self.content_type.append_option(r.content_type.as_deref());
        for (name, value) in &r.metadata {
            self.metadata.keys().append_value(name);
            self.metadata.values().append_value(value);
        }
        self.metadata.append(true)?;
        self.error.append_option(r.error.as_deref());
        self.http_status.append_option(r.http_status.map(i32::from));
        self.version_id.append_option(r.columns.version_id.as_deref());
        for name in &r.binary_metadata {
            self.binary_metadata.values().append_value(name);
        }
        self.binary_metadata.append(true);
        self.missing_metadata
            .append_option(r.missing_metadata.map(|n| i32::try_from(n).unwrap_or(i32::MAX)));
        self.object.push(&r.columns)?;
        if let Some(changes) = &mut self.changes {
            changes.push(r)?;
        }
        self.rows += 1;
        Ok(())
    }

    fn finish(&mut self) -> Result<RecordBatch, ParquetError> {
        self.rows = 0;
        let mut columns: Vec<ArrayRef> = vec![
            Arc::new(self.bucket.finish()),
            Arc::new(self.key.finish()),
            Arc::new(self.status.finish()),
            Arc::new(self.size.finish()),
            Arc::new(self.last_modified.finish()),
            Arc::new(self.etag.finish()),
            Arc::new(self.storage_class.finish()),
            Arc::new(self.content_type.finish()),
            Arc::new(self.metadata.finish()),
            Arc::new(self.error.finish()),
            Arc::new(self.http_status.finish()),
            Arc::new(self.version_id.finish()),
            Arc::new(self.binary_metadata.finish()),
            Arc::new(self.missing_metadata.finish()),
        ];
        self.object.finish(&mut columns);
        let schema = match &mut self.changes {
            Some(changes) => {
                changes.finish(&mut columns);
                change_schema()
            }
            None => schema(),
        };
        Ok(RecordBatch::try_new(schema, columns)?)
    }
}

fn status_name(s: Status) -> &'static str {
    match s {
        Status::Ok => "ok",
        Status::Vanished => "vanished",
        Status::Error => "error",
    }
}

/// An RFC 3339 time (as records hold it) in milliseconds since the epoch.
fn millis(rfc3339: &str) -> Result<i64, ParquetError> {
    DateTime::from_str(rfc3339, TimeFormat::DateTime)
        .ok()
        .and_then(|t| t.to_millis().ok())
        .ok_or_else(|| ParquetError::Schema(format!("last modified time {rfc3339:?} is not RFC 3339")))
}

/// Writes records as one Parquet file into memory, from which the caller
/// takes the bytes as they are produced ([`ParquetEncoder::take`]).
pub struct ParquetEncoder {
    writer: ArrowWriter<Vec<u8>>,
    columns: Columns,
    bucket: String,
}

impl ParquetEncoder {
    /// `changes`: a change set's file (the change columns too).
    pub fn new(bucket: &str, changes: bool) -> Result<ParquetEncoder, ParquetError> {
        let props = WriterProperties::builder()
            .set_compression(Compression::ZSTD(ZstdLevel::default()))
            .set_max_row_group_row_count(Some(ROW_GROUP_ROWS))
            .set_max_row_group_bytes(Some(ROW_GROUP_BYTES))
            .build();
        Ok(ParquetEncoder {
            writer: ArrowWriter::try_new(
                Vec::new(),
                if changes { change_schema() } else { schema() },
                Some(props),
            )?,
            columns: Columns::new(changes),
            bucket: bucket.to_string(),
        })
    }

    pub fn push(&mut self, record: &Record) -> Result<(), ParquetError> {
        self.columns.push(record, &self.bucket)?;
        if self.columns.rows >= BATCH_ROWS {
            self.encode_batch()?;
        }
        Ok(())
    }

    fn encode_batch(&mut self) -> Result<(), ParquetError> {
        if self.columns.rows == 0 {
            return Ok(());
        }
        let batch = self.columns.finish()?;
        self.writer.write(&batch)?;
        // Move what the writer produced out of its buffer into ours.
        self.writer.sync().map_err(parquet::errors::ParquetError::from)?;
        Ok(())
    }

    /// The encoded bytes produced and not taken yet: the caller drains it
    /// (`std::mem::take`) as the text formats' buffers are drained. Safe: the
    /// writer counts the bytes it wrote, not this buffer's length, and keeps
    /// nothing in its own buffer after a batch (`sync`).
    pub fn output(&mut self) -> &mut Vec<u8> {
        self.writer.inner_mut()
    }

    /// Encode the rest and the footer; returns the last bytes.
    pub fn finish(mut self) -> Result<Vec<u8>, ParquetError> {
        self.encode_batch()?;
        Ok(self.writer.into_inner()?)
    }
}

/// The records of a Parquet file this module wrote, `batch` at a time, in
/// file order (the merge joins small parts through this).
pub fn read_records(
    file: Bytes,
) -> Result<impl Iterator<Item = Result<Vec<Record>, ParquetError>>, ParquetError> {
    let reader = ParquetRecordBatchReaderBuilder::try_new(file)?
        .with_batch_size(BATCH_ROWS)
        .build()?;
    Ok(reader.map(|batch| records_of(&batch?)))
}

/// The keys of a Parquet file, in order (only the key column is decoded).
pub fn record_keys(file: Bytes) -> Result<Vec<String>, ParquetError> {
    let builder = ParquetRecordBatchReaderBuilder::try_new(file)?;
    let mask = ProjectionMask::columns(builder.parquet_schema(), ["key"]);
    let mut keys = Vec::new();
    for batch in builder.with_projection(mask).build()? {
        let batch = batch?;
        let column = batch
            .column_by_name("key")
            .and_then(|c| c.as_string_opt::<i32>())
            .ok_or_else(|| ParquetError::Schema("no key column of strings".into()))?;
        keys.extend(column.iter().map(|k| k.unwrap_or_default().to_string()));
    }
    Ok(keys)
}

fn records_of(batch: &RecordBatch) -> Result<Vec<Record>, ParquetError> {
    let changes = batch.schema().fields() == change_schema().fields();
    if batch.schema().fields() != schema().fields() && !changes {
        return Err(ParquetError::Schema(format!("columns {:?}", batch.schema())));
    }
    let text = |i: usize| batch.column(i).as_string::<i32>();
    let (key, status, etag, class, ctype, error) = (text(1), text(2), text(5), text(6), text(7), text(9));
    let size = batch.column(3).as_primitive::<Int64Type>();
    let modified = batch.column(4).as_primitive::<TimestampMillisecondType>();
    let metadata = batch.column(8).as_map();
    let http = batch.column(10).as_primitive::<Int32Type>();
    let binary = batch.column(12).as_list::<i32>();
    let missing = batch.column(13).as_primitive::<Int32Type>();
    let opt = |a: &arrow_array::StringArray, row| a.is_valid(row).then(|| a.value(row).to_string());
    let map_at = string_map;
    let change_at = |row: usize| -> Result<(Option<ChangeKind>, Option<Box<Previous>>), ParquetError> {
        if !changes {
            return Ok((None, None));
        }
        let at = |i: usize| FIRST_CHANGE_COLUMN + i;
        let kind = match text(at(0)).value(row) {
            "added" => ChangeKind::Added,
            "removed" => ChangeKind::Removed,
            "content_changed" => ChangeKind::ContentChanged,
            "metadata_changed" => ChangeKind::MetadataChanged,
            other => return Err(ParquetError::Schema(format!("change {other:?}"))),
        };
        let size = batch.column(at(1)).as_primitive::<Int64Type>();
        let modified = batch.column(at(3)).as_primitive::<TimestampMillisecondType>();
        let previous = size.is_valid(row).then(|| {
            Box::new(Previous {
                size: size.value(row).max(0) as u64,
                etag: opt(text(at(2)), row),
                last_modified: modified.is_valid(row).then(|| rfc3339(modified.value(row))),
                content_type: opt(text(at(4)), row),
                metadata: map_at(batch.column(at(5)).as_map(), row),
            })
        });
        Ok((Some(kind), previous))
    };
    (0..batch.num_rows())
        .map(|row| {
            let metadata = map_at(metadata, row);
            let (change, previous) = change_at(row)?;
            Ok(Record {
                key: key.value(row).to_string(),
                status: match status.value(row) {
                    "ok" => Status::Ok,
                    "vanished" => Status::Vanished,
                    "error" => Status::Error,
                    other => return Err(ParquetError::Schema(format!("status {other:?}"))),
                },
                size: size.value(row).max(0) as u64,
                etag: opt(etag, row),
                last_modified: modified.is_valid(row).then(|| rfc3339(modified.value(row))),
                storage_class: opt(class, row),
                content_type: opt(ctype, row),
                metadata,
                error: opt(error, row),
                http_status: http.is_valid(row).then(|| http.value(row) as u16),
                change,
                previous,
                binary_metadata: binary
                    .value(row)
                    .as_string::<i32>()
                    .iter()
                    .map(|name| name.unwrap_or_default().to_string())
                    .collect(),
                missing_metadata: missing.is_valid(row).then(|| missing.value(row).max(0) as u32),
                columns: object_columns_at(batch, row),
                verbatim: Default::default(),
            })
        })
        .collect()
}

fn rfc3339(millis: i64) -> String {
    DateTime::from_millis(millis)
        .fmt(TimeFormat::DateTime)
        .unwrap_or_default()
}

/// A Parquet file in S3 read one row group at a time with ranged GETs: the
/// footer first, then only the column chunks of the groups asked for (an
/// incremental scan reads the groups whose key statistics meet its range).
pub struct RemoteFile {
    bucket: String,
    key: String,
    len: u64,
    metadata: parquet::arrow::arrow_reader::ArrowReaderMetadata,
    /// Bytes fetched for the footer.
    footer_bytes: u64,
}

/// Bytes of the file's end fetched first: the footer of a file of a few
/// row groups fits.
const TAIL: u64 = 64 << 10;

impl RemoteFile {
    pub async fn open(
        s3: &crate::s3::S3,
        bucket: &str,
        key: &str,
        len: u64,
    ) -> Result<RemoteFile, ParquetError> {
        let get = |from: u64| async move {
            s3.get(bucket, key, Some(&format!("bytes={from}-{}", len - 1)))
                .await
                .map_err(|e| ParquetError::Schema(format!("reading s3://{bucket}/{key}: {e}")))
        };
        if len < 12 {
            return Err(ParquetError::Schema(format!(
                "s3://{bucket}/{key} is too short for Parquet"
            )));
        }
        let mut tail = get(len.saturating_sub(TAIL)).await?;
        let footer = &tail[tail.len() - 8..];
        if &footer[4..] != b"PAR1" {
            return Err(ParquetError::Schema(format!(
                "s3://{bucket}/{key} has no Parquet footer"
            )));
        }
        let meta_len = u32::from_le_bytes(footer[..4].try_into().expect("4 bytes")) as u64;
        if meta_len + 8 > tail.len() as u64 {
            if meta_len + 8 > len {
                return Err(ParquetError::Schema(format!(
                    "s3://{bucket}/{key}: footer longer than the file"
                )));
            }
            tail = get(len - meta_len - 8).await?;
        }
        let end = tail.len() - 8;
        let footer_bytes = tail.len() as u64;
        let metadata = parquet::file::metadata::ParquetMetaDataReader::decode_metadata(
            &tail[end - meta_len as usize..end],
        )?;
        let metadata = parquet::arrow::arrow_reader::ArrowReaderMetadata::try_new(
            Arc::new(metadata),
            parquet::arrow::arrow_reader::ArrowReaderOptions::new(),
        )?;
        Ok(RemoteFile {
            bucket: bucket.into(),
            key: key.into(),
            len,
            metadata,
            footer_bytes,
        })
    }

    /// Bytes fetched to open the file.
    pub fn bytes_read(&self) -> u64 {
        self.footer_bytes
    }

    /// The row groups whose keys may lie in `(start_after, end)`, in order.
    pub fn row_groups_meeting(&self, start_after: Option<&str>, end: Option<&str>) -> Vec<usize> {
        let meta = self.metadata.metadata();
        let key_column = meta
            .file_metadata()
            .schema_descr()
            .columns()
            .iter()
            .position(|c| c.name() == "key");
        (0..meta.num_row_groups())
            .filter(|g| {
                let stats = key_column.and_then(|c| meta.row_group(*g).column(c).statistics());
                let Some(parquet::file::statistics::Statistics::ByteArray(stats)) = stats else {
                    return true; // no statistics: read it
                };
                let after_start = match (start_after, stats.max_opt()) {
                    (Some(s), Some(max)) => max.data() > s.as_bytes(),
                    _ => true,
                };
                let before_end = match (end, stats.min_opt()) {
                    (Some(e), Some(min)) => min.data() < e.as_bytes(),
                    _ => true,
                };
                after_start && before_end
            })
            .collect()
    }

    /// The records of row group `group`, and the bytes fetched for them.
    pub async fn read_row_group(
        &self,
        s3: &crate::s3::S3,
        group: usize,
    ) -> Result<(Vec<Record>, u64), ParquetError> {
        let rg = self.metadata.metadata().row_group(group);
        let (start, end) = rg
            .columns()
            .iter()
            .map(|c| c.byte_range())
            .fold((u64::MAX, 0u64), |(lo, hi), (from, len)| {
                (lo.min(from), hi.max(from + len))
            });
        if start >= end {
            return Ok((Vec::new(), 0));
        }
        let body = s3
            .get(
                &self.bucket,
                &self.key,
                Some(&format!("bytes={start}-{}", end - 1)),
            )
            .await
            .map_err(|e| ParquetError::Schema(format!("reading s3://{}/{}: {e}", self.bucket, self.key)))?;
        let fetched = body.len() as u64;
        let window = Window {
            len: self.len,
            offset: start,
            bytes: body,
        };
        let reader = ParquetRecordBatchReaderBuilder::new_with_metadata(window, self.metadata.clone())
            .with_row_groups(vec![group])
            .with_batch_size(BATCH_ROWS)
            .build()?;
        let mut records = Vec::with_capacity(rg.num_rows().max(0) as usize);
        for batch in reader {
            records.extend(records_of(&batch?)?);
        }
        Ok((records, fetched))
    }
}

/// The bytes of one row group at their place in the file.
struct Window {
    len: u64,
    offset: u64,
    bytes: Bytes,
}

impl parquet::file::reader::Length for Window {
    fn len(&self) -> u64 {
        self.len
    }
}

impl parquet::file::reader::ChunkReader for Window {
    type T = bytes::buf::Reader<Bytes>;

    fn get_read(&self, start: u64) -> parquet::errors::Result<Self::T> {
        use bytes::Buf;
        Ok(self
            .get_bytes(start, (self.offset + self.bytes.len() as u64 - start) as usize)?
            .reader())
    }

    fn get_bytes(&self, start: u64, length: usize) -> parquet::errors::Result<Bytes> {
        let from = start
            .checked_sub(self.offset)
            .filter(|from| from + length as u64 <= self.bytes.len() as u64)
            .ok_or_else(|| {
                parquet::errors::ParquetError::General(format!(
                    "bytes {start}+{length} are outside the row group fetched"
                ))
            })? as usize;
        Ok(self.bytes.slice(from..from + length))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(i: usize, key: &str) -> Record {
        Record {
            key: key.into(),
            status: [Status::Ok, Status::Vanished, Status::Error][i % 3],
            size: (i as u64) << 33,
            etag: i.is_multiple_of(2).then(|| format!("\"{i:x}\"")),
            last_modified: (i % 4 != 3).then(|| format!("2024-01-02T03:04:{:02}Z", i % 60)),
            storage_class: i.is_multiple_of(5).then(|| "GLACIER".into()),
            content_type: Some("text/plain; charset=utf-8".into()),
            metadata: (0..i % 4)
                .map(|n| (format!("m{n}"), format!("v,\"{n}\"\r\n\t ü")))
                .collect(),
            binary_metadata: (i % 4 >= 2).then(|| "m1".to_string()).into_iter().collect(),
            missing_metadata: (i % 7 == 3).then_some(i as u32 % 5 + 1),
            columns: ObjectColumns {
                version_id: (i % 6 == 1).then(|| format!("v{i}")),
                is_latest: (i % 6 == 1).then_some(i % 12 == 1),
                is_delete_marker: (i % 6 == 1).then_some(false),
                server_side_encryption: i.is_multiple_of(3).then(|| "aws:kms".into()),
                kms_key_arn: i
                    .is_multiple_of(3)
                    .then(|| format!("arn:aws:kms:us-east-1:1:key/{i}")),
                is_bucket_key_enabled: i.is_multiple_of(3).then_some(i.is_multiple_of(2)),
                checksum_algorithm: (i % 4 == 1).then(|| "CRC32C".into()),
                checksum_type: (i % 4 == 1).then(|| "FULL_OBJECT".into()),
                checksum: (i % 8 == 1).then(|| "yZRlqg==".into()),
                is_multipart: Some(i % 5 == 2),
                part_count: (i % 5 == 2).then_some(i as u32 % 10_000 + 1),
                object_lock_mode: i.is_multiple_of(7).then(|| "GOVERNANCE".into()),
                object_lock_retain_until_date: i.is_multiple_of(7).then(|| "2031-02-03T04:05:06Z".into()),
                object_lock_legal_hold: (i % 7 < 2).then_some(i % 7 == 1),
                replication_status: i.is_multiple_of(9).then(|| "COMPLETED".into()),
                object_tags: (!i.is_multiple_of(4))
                    .then(|| (0..i % 4).map(|n| (format!("t{n}"), format!("x=&{n}"))).collect()),
            },
            error: (i % 3 == 2).then(|| "AccessDenied".into()),
            http_status: (i % 3 == 2).then_some(403),
            change: None,
            previous: None,
            verbatim: Default::default(),
        }
    }

    /// Every field of every record comes back, across several batches, and
    /// the bytes taken as they are produced make one valid file.
    #[test]
    fn records_round_trip_through_a_streamed_file() {
        let odd = ["a,b", "q\"uote", "line\nbreak", "tab\there", "ünï 💥", ""];
        let records: Vec<Record> = (0..BATCH_ROWS * 2 + 17)
            .map(|i| record(i, &format!("{}{i:06}", odd[i % odd.len()])))
            .collect();
        let mut enc = ParquetEncoder::new("bkt", false).unwrap();
        let mut file = Vec::new();
        for r in &records {
            enc.push(r).unwrap();
            file.append(enc.output());
        }
        assert!(!file.is_empty(), "bytes stream out before the end");
        file.extend(enc.finish().unwrap());
        let back: Vec<Record> = read_records(Bytes::from(file.clone()))
            .unwrap()
            .flat_map(|b| b.unwrap())
            .collect();
        assert_eq!(back, records);
        let keys = record_keys(Bytes::from(file)).unwrap();
        assert_eq!(keys, records.iter().map(|r| r.key.clone()).collect::<Vec<_>>());
    }

    #[test]
    fn an_empty_file_is_valid_and_has_the_schema() {
        let file = ParquetEncoder::new("b", false).unwrap().finish().unwrap();
        let builder = ParquetRecordBatchReaderBuilder::try_new(Bytes::from(file)).unwrap();
        assert_eq!(builder.schema().fields(), schema().fields());
        let names: Vec<String> = schema().fields().iter().map(|f| f.name().clone()).collect();
        assert_eq!(names, COLUMNS);
        assert_eq!(builder.metadata().file_metadata().num_rows(), 0);
    }

    #[test]
    fn a_file_that_is_not_parquet_is_an_error() {
        assert!(record_keys(Bytes::from_static(b"{\"key\":\"a\"}\n")).is_err());
        assert!(millis("yesterday").is_err());
    }
}
