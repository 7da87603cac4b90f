//! The filter flags of `scan` and `plan` (`bucketscan_core::scan::filter`):
//! each value is checked as clap reads it, so a bad one is refused naming
//! its flag; what only the flags together can tell (an empty window, a
//! glob no key under `--prefix` can match) is checked by [`FilterArgs::filter`]
//! before the bucket is asked anything.
//!
//! May import: `bucketscan_core::scan::filter`.

use anyhow::Context;
use bucketscan_core::scan::filter::{canonical_time, check_storage_class, FilterSpec, KeyGlob, ObjectFilter};
use clap::Args;

/// Which listed objects the scan keeps: judged from the LIST entry, so an
/// object left out costs no HEAD and is not in the result.
#[derive(Args, Clone, Debug, Default)]
pub struct FilterArgs {
    /// Keep only objects last modified at or after this time: RFC 3339
    /// (2026-05-01T00:00:00Z) or a date (2026-05-01, midnight UTC).
    #[arg(long, value_name = "TIME", value_parser = time_bound)]
    pub modified_after: Option<String>,
    /// Keep only objects last modified before this time (excluded, so one
    /// run's --modified-before can be the next one's --modified-after).
    #[arg(long, value_name = "TIME", value_parser = time_bound)]
    pub modified_before: Option<String>,
    /// Keep only objects of at least this many bytes.
    #[arg(long, value_name = "BYTES", value_parser = bytes)]
    pub min_size: Option<u64>,
    /// Keep only objects of at most this many bytes.
    #[arg(long, value_name = "BYTES", value_parser = bytes)]
    pub max_size: Option<u64>,
    /// Keep only keys that match this glob (repeat for any of several). A
    /// glob matches the whole key, --prefix included: `*` and `?` stop at
    /// `/`, `**` crosses it, `[a-z]`, `[!a-z]`, `\` escapes.
    #[arg(long = "include", value_name = "GLOB", value_parser = glob)]
    pub include: Vec<String>,
    /// Leave out keys that match this glob (repeatable; wins over --include).
    #[arg(long = "exclude", value_name = "GLOB", value_parser = glob)]
    pub exclude: Vec<String>,
    /// Keep only objects of this storage class, such as STANDARD or
    /// GLACIER_IR (repeat for any of several; case does not matter).
    #[arg(long = "storage-class", value_name = "CLASS", value_parser = storage_class)]
    pub storage_classes: Vec<String>,
}

impl FilterArgs {
    /// The filter the flags make, checked against the scanned `prefix`.
    pub fn filter(&self, prefix: &str) -> anyhow::Result<ObjectFilter> {
        let filter = ObjectFilter::new(FilterSpec {
            modified_after: self.modified_after.clone(),
            modified_before: self.modified_before.clone(),
            min_size: self.min_size,
            max_size: self.max_size,
            include: self.include.clone(),
            exclude: self.exclude.clone(),
            storage_classes: self.storage_classes.clone(),
        })
        .context("invalid filter flags")?;
        filter.check_prefix(prefix)?;
        Ok(filter)
    }
}

fn time_bound(text: &str) -> Result<String, String> {
    canonical_time(text).map_err(|e| e.to_string())
}

/// A whole number of bytes. Units (10MiB) are refused rather than guessed:
/// nothing in the tree parses them, and 10MB read as 10 MiB would filter
/// the wrong objects.
fn bytes(text: &str) -> Result<u64, String> {
    text.parse().map_err(|_| {
        format!(
            "{text:?} is not a size in bytes: write a whole number, such as 10485760 for 10 MiB (no units)"
        )
    })
}

fn glob(text: &str) -> Result<String, String> {
    KeyGlob::new(text)
        .map(|_| text.to_string())
        .map_err(|e| e.to_string())
}

fn storage_class(text: &str) -> Result<String, String> {
    check_storage_class(text)
        .map(|()| text.to_string())
        .map_err(|e| e.to_string())
}
