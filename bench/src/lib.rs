//! Benchmarks of bucketscan against its peers (issue: `just bench`). This
//! crate holds the synthetic S3 endpoint they all run against: a generated
//! keyspace served over HTTP with a configurable per-request latency.

pub mod keyspace;
pub mod server;
