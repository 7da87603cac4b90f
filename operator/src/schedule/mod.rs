//! The decisions behind `BucketScanSchedule` (pure; the controller's
//! `controller/schedule.rs` does the I/O):
//!
//! - `cron`: parsing a cron expression and its times in a time zone;
//! - `timing`: what is due now (run, skip past the deadline, hold for
//!   Forbid) and when to look again;
//! - `build`: the BucketScan a run makes, and a schedule's runs read back;
//! - `history`: which finished runs the history limits delete;
//! - `summary`: the schedule's status conditions.
//!
//! May import: `crd`, `status`.

pub mod build;
pub mod cron;
pub mod history;
pub mod summary;
pub mod timing;
