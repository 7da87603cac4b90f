//! bucketscan's shared library: shard ranges and the planner, S3 clients (the
//! SDK and the fast HEAD path), the scan engine, the result format, the Redis
//! work queue, the distributed run and the merge. The worker and the operator
//! are thin binaries over it.

pub mod engine;
pub mod error;
pub mod fasthead;
pub mod fastlist;
pub mod head;
pub mod http;
pub mod merge;
pub mod output;
pub mod plan;
pub mod planner;
pub mod queue;
pub mod record;
pub mod recovery;
pub mod retry;
pub mod run;
pub mod s3;
pub mod scan;
pub mod shard;
pub mod spec;
pub mod upload;
