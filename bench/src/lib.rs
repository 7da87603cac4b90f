//! Benchmarks of bucketscan against its peers (issue: `just bench`). This
//! crate holds the synthetic S3 endpoint they all run against: a generated
//! keyspace (optionally changed by a share of its objects) served over HTTP by a model of a store (latencies, capacity,
//! throttling, faults).

pub mod bucket;
pub mod keyspace;
pub mod server;
pub mod store;
