//! The keyspace of a bucket and how it is cut: a [`Shard`] is a key range
//! (`prefix`, exclusive `start_after`, exclusive `end`) with exact range
//! arithmetic, the planner cuts a prefix into shards using LIST requests
//! only, and `coverage` finds the ranges a set of shards leaves out.
//!
//! May import: `s3` (the planner lists through it); never `scan` or `fleet`.

pub mod coverage;
pub mod planner;
pub mod shard;

pub use shard::Shard;
