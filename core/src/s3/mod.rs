//! Talking to S3, and nothing else: where the endpoint is, the one HTTP stack
//! (hyper over rustls), SigV4 signing, the fast HEAD and LIST paths, the
//! aws-sdk-s3 client for everything else (PUT, GET, multipart, deletes), one
//! error type and one retry policy. The bottom layer of the crate: it knows
//! nothing of shards, records, Redis or scans.
//!
//! Inside, files form layers too (each may import only those listed before
//! it): `error`, `regions`, `clock`; `allowlist`; `codec`; `columns`; `types`; `retry`, `sign`, `transport`; `connections`; `signed`
//! (sign and send a request); `list`; `client` (the [`S3`] handle); `pages`
//! (a listing page by page, and where it ends), `versions` (ListObjectVersions), `head`, `tagging`, `upload`; `delete`.
//!
//! May import: nothing of the crate outside `s3`.

pub mod allowlist;
pub mod client;
pub mod clock;
pub mod codec;
pub mod columns;
pub mod compose;
pub mod connections;
pub mod delete;
pub mod error;
pub mod head;
pub mod list;
pub mod pages;
pub mod regions;
pub mod retry;
pub mod sign;
pub mod signed;
pub mod tagging;
pub mod transport;
pub mod types;
pub mod upload;
pub mod version_point;
pub mod versions;

pub use allowlist::EndpointAllowlist;
pub use client::{resolve_region, S3};
pub use columns::ObjectColumns;
pub use error::S3Error;
pub use head::{HeadClient, HeadClientKind};
pub use pages::{BucketLister, Lister, Pages};
pub use signed::{CAPPED_LISTING_BYTES, MAX_LISTING_BYTES};
pub use types::{
    Endpoint, HeadInfo, HeadResult, ListPage, ListRequest, ListVersionsRequest, ListedMetadata, ListedObject,
    ListedVersion, VersionPage,
};
pub use version_point::{VersionPoint, NULL_VERSION};
pub use versions::{VersionMarker, VersionPages};
