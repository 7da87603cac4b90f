//! The plain types every S3 call shares: where the endpoint is, what a LIST
//! asks and answers, what a HEAD answers. The bottom of `s3`.
//!
//! May import: `error`, `allowlist`, `regions` and `columns` only.

use super::allowlist::EndpointAllowlist;
use super::columns::ObjectColumns;
use super::error::S3Error;
use super::regions::valid_region;
use std::sync::Arc;

/// Where the S3 service is and how to talk to it. Credentials are not here:
/// they come from the standard AWS provider chain (environment, profile, web
/// identity, instance metadata), so they never pass through our own config.
#[derive(Clone, Debug)]
pub struct Endpoint {
    /// e.g. `http://127.0.0.1:9000`; `None` means AWS S3 in `region`.
    pub url: Option<String>,
    pub region: String,
    /// Address buckets as `endpoint/bucket/key` instead of `bucket.endpoint/key`.
    pub path_style: bool,
    /// Extra PEM CA bundle to trust (private object stores).
    pub ca_pem: Option<Vec<u8>>,
    /// Skip TLS certificate verification (test stores only).
    pub insecure: bool,
    /// Connections kept open per host; at least the number of requests in flight.
    pub pool_size: usize,
    /// Connect only to the addresses this allows (the operator's
    /// `--allowed-endpoints`, for requests it sends to a tenant's endpoint);
    /// `None`: no check (the worker, the CLI: they reach the store the user
    /// running them names).
    pub allowlist: Option<Arc<EndpointAllowlist>>,
    /// Bytes an answer's body may have; a longer one is an error, read no
    /// further. The operator's (`--allowed-endpoints` goes with it): its
    /// memory serves every scan, and a tenant's endpoint may answer without
    /// end. `None`: each call's own bound (a LIST page's, a GET's range).
    pub max_answer_bytes: Option<usize>,
}

impl Endpoint {
    /// The region, when it is a region name (lower-case letters, digits and
    /// dashes): it is signed into every request and, on AWS, is part of the
    /// host name, where `x@10.0.3.7:8443/admin?` would move the request to
    /// another server. Every client checks it before it is built.
    pub fn checked_region(&self) -> Result<&str, S3Error> {
        valid_region(&self.region)
            .filter(|r| *r == self.region)
            .ok_or_else(|| {
                S3Error::Config(format!(
                    "region {:?} is not a region name: use lower-case letters, digits and dashes \
                     (at most 64), such as us-east-1",
                    self.region
                ))
            })
    }

    /// The base URL requests go to, with no trailing slash.
    pub fn base_url(&self) -> String {
        match &self.url {
            Some(u) => u.trim_end_matches('/').to_string(),
            None => format!("https://s3.{}.amazonaws.com", self.region),
        }
    }
}

/// One ListObjectsV2 request.
#[derive(Clone, Debug, Default)]
pub struct ListRequest {
    pub prefix: String,
    pub start_after: Option<String>,
    pub delimiter: Option<String>,
    pub continuation: Option<String>,
    pub max_keys: i32,
    /// Ask for each object's user metadata in the listing (MinIO's
    /// `metadata=true`; other stores ignore it). See docs/metadata-source.md.
    pub with_metadata: bool,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct ListedObject {
    pub key: String,
    pub size: u64,
    pub etag: Option<String>,
    pub last_modified: Option<String>,
    pub storage_class: Option<String>,
    /// `<ChecksumAlgorithm>` (S3 since 2022; `None` when the store says
    /// none) and `<ChecksumType>` (`FULL_OBJECT`, `COMPOSITE`).
    pub checksum_algorithm: Option<String>,
    pub checksum_type: Option<String>,
    /// What the listing said of the object's metadata, when it said anything
    /// (`None` does not mean "no metadata": see [`ListedMetadata`]).
    /// Boxed: an object's entry is moved several times on its way to its
    /// HEAD, and this, rarely there, was most of its size.
    pub listed_metadata: Option<Box<ListedMetadata>>,
}

/// An entry's `<UserMetadata>` (MinIO with `metadata=true`), read like a
/// HEAD answer's headers. MinIO leaves the element out when the credentials
/// may not GetObject the key, and when the object has nothing to show, so
/// only its presence means anything.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ListedMetadata {
    /// `x-amz-meta-*` names, lower case, without the prefix (as from HEAD).
    pub metadata: std::collections::BTreeMap<String, String>,
    pub content_type: Option<String>,
    /// The headers of [`ObjectColumns`] MinIO lists beside the metadata
    /// (encryption, object lock, ...), and its `<UserTags>`.
    pub columns: ObjectColumns,
}

#[derive(Clone, Debug, Default)]
pub struct ListPage {
    pub objects: Vec<ListedObject>,
    pub common_prefixes: Vec<String>,
    /// Continuation token of the next page, if there is one.
    pub next: Option<String>,
}

impl ListPage {
    /// Drop what sorts at or before `start_after`: the keys a server listed
    /// because the `StartAfter` it was sent was cut earlier
    /// (`codec::wire_start_after`). A common prefix stays when `start_after`
    /// lies inside it (its keys after `start_after` are still to come).
    pub fn keep_after(&mut self, start_after: &str) {
        self.objects.retain(|o| o.key.as_str() > start_after);
        self.common_prefixes
            .retain(|p| p.as_str() > start_after || start_after.starts_with(p.as_str()));
    }
}

/// One ListObjectVersions request (`--versions`): the versions after
/// `key_marker` (all of its versions when `version_id_marker` is `None`;
/// those listed after that version otherwise).
#[derive(Clone, Debug, Default)]
pub struct ListVersionsRequest {
    pub prefix: String,
    pub key_marker: Option<String>,
    pub version_id_marker: Option<String>,
    pub max_keys: i32,
}

/// One version or delete marker of a ListObjectVersions answer. A delete
/// marker has no size, ETag nor storage class (`object` holds 0 and `None`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ListedVersion {
    pub object: ListedObject,
    /// `null` for an object written before versioning was enabled.
    pub version_id: String,
    pub is_latest: bool,
    pub is_delete_marker: bool,
}

#[derive(Clone, Debug, Default)]
pub struct VersionPage {
    /// In the store's order: keys ascending, a key's versions newest first.
    pub versions: Vec<ListedVersion>,
    /// Where the next page starts (`NextKeyMarker`, `NextVersionIdMarker`),
    /// if there is one.
    pub next: Option<(String, Option<String>)>,
}

/// What a HEAD tells us about an object, whichever client asked.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HeadInfo {
    pub size: u64,
    pub etag: Option<String>,
    pub last_modified: Option<String>,
    pub storage_class: Option<String>,
    pub content_type: Option<String>,
    pub metadata: std::collections::BTreeMap<String, String>,
    /// Names in `metadata` whose value is the base64 of bytes that are not
    /// UTF-8.
    pub binary_metadata: Vec<String>,
    /// `x-amz-missing-meta`: entries the answer could not carry.
    pub missing_metadata: Option<u32>,
    /// Encryption, checksum, object lock, replication, version.
    pub columns: ObjectColumns,
}

/// `None` when the object is gone (404).
pub type HeadResult = Result<Option<HeadInfo>, S3Error>;
