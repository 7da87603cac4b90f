//! The optional-column flags of `scan` and `plan`
//! (`bucketscan_core::scan::column_options`): each costs requests, so each
//! is asked for by name.
//!
//! May import: `bucketscan_core::scan::column_options`.

use bucketscan_core::scan::column_options::ColumnOptions;
use clap::Args;

#[derive(Args, Clone, Debug, Default)]
pub struct ColumnArgs {
    /// HEAD in checksum mode (`x-amz-checksum-mode: ENABLED`): each record
    /// gets the object's `checksum` (base64) beside its algorithm and type.
    /// Same number of requests; stores that keep no checksum leave it empty.
    #[arg(long)]
    pub checksums: bool,
    /// Fill `object_tags`: a GetObjectTagging per object HEADed (paced and
    /// retried as HEADs are, and counted with them). MinIO lists tags beside
    /// the metadata: with --metadata-source list or auto they cost nothing
    /// there. Not with --baseline (tags change without moving LastModified).
    #[arg(long)]
    pub tags: bool,
    /// Every version and delete marker (ListObjectVersions), one record
    /// each with `version_id`, `is_latest` and `is_delete_marker`: each
    /// version is HEADed by its version id (with --tags, tagged by it too);
    /// a delete marker is a record of its own, without a HEAD. Every version
    /// is HEADed whatever --metadata-source says. Not with --baseline.
    #[arg(long)]
    pub versions: bool,
}

impl ColumnArgs {
    pub fn options(&self) -> ColumnOptions {
        ColumnOptions {
            checksums: self.checksums,
            tags: self.tags,
            versions: self.versions,
        }
    }
}
