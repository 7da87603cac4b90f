//! bucketscan's shared library, in four layers; each module may import only
//! the ones below it (`scripts/check-layers.py` checks it, and that no two
//! files import each other in a circle):
//!
//! ```text
//! fleet     spec, queue (Redis + Lua), plan, run (the worker loop), recovery, merge
//!   │
//! scan      engine, record, output, single (the one-process scan)
//!   │
//! keyspace  shard ranges, planner, coverage
//!   │
//! s3        endpoint and types, codecs, error, retry, transport, signing,
//!           fast HEAD and LIST, the SDK client, uploads, deletes
//! ```
//!
//! The worker and the operator are thin binaries over it.

// The scan pipeline nests async fns deeply (a shard's listing, its HEADs with
// their paced retries, the dataset writer): the default query depth (128)
// overflowed computing its future's layout once the retries were paced.
#![recursion_limit = "256"]

pub mod fleet;
pub mod keyspace;
pub mod s3;
pub mod scan;
