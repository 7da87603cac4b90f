//! Scanning: the engine that lists one shard and HEADs every key with many
//! requests in flight, the records it produces, the writers that stream them
//! (stdout, a file, an S3 object) and the single-process scan of a whole
//! bucket (`bucketscan-worker scan`). Knows nothing of Redis.
//!
//! May import: `s3` and `keyspace`; never `fleet`.

pub mod baseline;
pub mod column_options;
pub mod dataset;
pub mod engine;
pub mod filter;
pub mod format;
pub mod listed;
pub mod output;
pub mod parquet;
pub mod partition;
pub mod record;
pub mod resume;
pub mod single;
pub mod store_check;

pub use record::{Record, Status};
