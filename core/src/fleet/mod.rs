//! A scan shared by many processes through Redis: the scan's spec, the Redis
//! queue of shards (leases, fenced commits, live splits; Lua scripts in
//! `queue/`), planning into it, the worker loop (`run`), recovery from a
//! Redis that lost the scan, the fleet-wide rate governor, and the merge of every shard's parts into the
//! result. The top layer of the crate; the worker and the operator binaries
//! sit above it.
//!
//! Inside, files form layers: `spec`, `governor`; `queue`; `recovery`, `governed`, `rewrite`, `data_files`, `incremental`; `plan`, `run`,
//! `merge_ahead`; `merge`.
//!
//! May import: `s3`, `keyspace` and `scan`.

pub mod data_files;
pub mod governed;
pub mod governor;
pub mod incremental;
pub mod merge;
pub mod merge_ahead;
pub mod merge_plan;
pub mod plan;
pub mod queue;
pub mod recovery;
pub mod rewrite;
pub mod run;
pub mod spec;
