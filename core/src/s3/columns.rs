//! The columns of Amazon S3 Metadata's live inventory table that a HEAD
//! answer's headers (or MinIO's listing of them, `<UserMetadata>`) already
//! hold beyond size, ETag, time, class and user metadata: encryption, the
//! KMS key, the bucket key, the checksum, object lock, replication, the
//! version; the multipart part count read from the ETag's `-N`; and the
//! optional columns of their own requests (tags, versions). Every field is
//! an `Option` (or empty): a record of an object without them costs no
//! allocation and no byte of JSON.
//!
//! May import: `codec`.

use super::codec::format_time;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// What a record says of an object beyond its size, ETag, time, class and
/// user metadata. Names follow Amazon S3 Metadata tables (and S3 Inventory's
/// `is_latest`); values are as the store sent them, times in RFC 3339 UTC.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectColumns {
    /// `x-amz-version-id`: the version the HEAD read (versioned buckets), or
    /// the listed version (`--versions`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version_id: Option<String>,
    /// `--versions` only: the current version of its key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub is_latest: Option<bool>,
    /// `--versions` only: a delete marker (no HEAD, no content).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub is_delete_marker: Option<bool>,
    /// `x-amz-server-side-encryption`: `AES256`, `aws:kms`, `aws:kms:dsse`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_side_encryption: Option<String>,
    /// `x-amz-server-side-encryption-aws-kms-key-id`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kms_key_arn: Option<String>,
    /// `x-amz-server-side-encryption-bucket-key-enabled`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub is_bucket_key_enabled: Option<bool>,
    /// `CRC32`, `CRC32C`, `CRC64NVME`, `SHA1`, `SHA256`: from the listing's
    /// `<ChecksumAlgorithm>`, or the checksum header of a HEAD in checksum
    /// mode.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checksum_algorithm: Option<String>,
    /// `FULL_OBJECT` or `COMPOSITE` (listing's `<ChecksumType>`,
    /// `x-amz-checksum-type`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checksum_type: Option<String>,
    /// The checksum's base64 value (`--checksums` only: HEAD in checksum
    /// mode). A `COMPOSITE` one ends in `-PARTS`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checksum: Option<String>,
    /// Uploaded in parts: the ETag ends in `-N`. Set whenever the ETag is
    /// known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub is_multipart: Option<bool>,
    /// N of the ETag's `-N` (multipart objects only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub part_count: Option<u32>,
    /// `x-amz-object-lock-mode`: `GOVERNANCE` or `COMPLIANCE`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object_lock_mode: Option<String>,
    /// `x-amz-object-lock-retain-until-date`, RFC 3339 UTC.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object_lock_retain_until_date: Option<String>,
    /// `x-amz-object-lock-legal-hold`: `ON` is true, `OFF` false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object_lock_legal_hold: Option<bool>,
    /// `x-amz-replication-status`: `PENDING`, `COMPLETED`, `FAILED`,
    /// `REPLICA` (AWS says `COMPLETE` in places; kept as sent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replication_status: Option<String>,
    /// `--tags` only: the object's tags (`GetObjectTagging`, or MinIO's
    /// `<UserTags>` in a listing); an empty map when it has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object_tags: Option<BTreeMap<String, String>>,
}

impl ObjectColumns {
    /// Read one header of a HEAD answer (`name` lower case, without
    /// `x-amz-`); false when it is not one of these columns.
    pub fn read_header(&mut self, name: &str, value: &[u8]) -> bool {
        let text = || String::from_utf8_lossy(value).trim().to_string();
        match name {
            "version-id" => self.version_id = Some(text()),
            "server-side-encryption" => self.server_side_encryption = Some(text()),
            "server-side-encryption-aws-kms-key-id" => self.kms_key_arn = Some(text()),
            "server-side-encryption-bucket-key-enabled" => {
                self.is_bucket_key_enabled = Some(value.trim_ascii().eq_ignore_ascii_case(b"true"))
            }
            "checksum-type" => self.checksum_type = Some(text()),
            "object-lock-mode" => self.object_lock_mode = Some(text()),
            "object-lock-retain-until-date" => self.object_lock_retain_until_date = Some(rfc3339(&text())),
            "object-lock-legal-hold" => {
                self.object_lock_legal_hold = Some(value.trim_ascii().eq_ignore_ascii_case(b"ON"))
            }
            "replication-status" => self.replication_status = Some(text()),
            _ => {
                let Some(algorithm) = name.strip_prefix("checksum-").and_then(checksum_algorithm) else {
                    return false;
                };
                self.checksum_algorithm = Some(algorithm.to_string());
                self.checksum = Some(text());
            }
        }
        true
    }

    /// Set `is_multipart` and `part_count` from the ETag (nothing when it
    /// is unknown).
    pub fn set_multipart(&mut self, etag: Option<&str>) {
        let Some(etag) = etag else { return };
        self.part_count = part_count(etag);
        self.is_multipart = Some(self.part_count.is_some());
    }

    /// Fill what the listing said and the HEAD did not (its checksum
    /// algorithm and type: a HEAD says them only in checksum mode).
    pub fn fill_from_listing(&mut self, algorithm: Option<String>, checksum_type: Option<String>) {
        if self.checksum_algorithm.is_none() {
            self.checksum_algorithm = algorithm;
        }
        if self.checksum_type.is_none() {
            self.checksum_type = checksum_type;
        }
    }
}

/// The algorithm of a `x-amz-checksum-ALGORITHM` header, as S3 names it.
fn checksum_algorithm(suffix: &str) -> Option<&'static str> {
    Some(match suffix {
        "crc32" => "CRC32",
        "crc32c" => "CRC32C",
        "crc64nvme" => "CRC64NVME",
        "sha1" => "SHA1",
        "sha256" => "SHA256",
        _ => return None,
    })
}

/// N of a multipart upload's ETag `HEX-N`; `None` for any other ETag.
pub fn part_count(etag: &str) -> Option<u32> {
    let (hash, parts) = etag.rsplit_once('-')?;
    let all_digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    (!hash.is_empty() && all_digits(parts))
        .then(|| parts.parse().ok())
        .flatten()
}

/// A time as records hold them (RFC 3339 UTC, whole seconds as a HEAD's
/// are), or the text as sent when it is not a time.
fn rfc3339(text: &str) -> String {
    use aws_smithy_types::date_time::{DateTime, Format};
    match DateTime::from_str(text, Format::DateTime) {
        Ok(t) => format_time(&t),
        Err(_) => text.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_part_count_is_the_etags_dash_suffix_and_nothing_else() {
        assert_eq!(part_count("9b2cf535f27731c974343645a3985328-3"), Some(3));
        assert_eq!(part_count("9b2cf535f27731c974343645a3985328-10000"), Some(10000));
        for single in ["9b2cf535f27731c974343645a3985328", "-3", "abc-", "abc-1x", ""] {
            assert_eq!(part_count(single), None, "{single:?}");
        }
        let mut columns = ObjectColumns::default();
        columns.set_multipart(None);
        assert_eq!((columns.is_multipart, columns.part_count), (None, None));
        columns.set_multipart(Some("abc"));
        assert_eq!((columns.is_multipart, columns.part_count), (Some(false), None));
        columns.set_multipart(Some("abc-2"));
        assert_eq!((columns.is_multipart, columns.part_count), (Some(true), Some(2)));
    }

    #[test]
    fn head_headers_become_columns() {
        let mut c = ObjectColumns::default();
        for (name, value) in [
            ("server-side-encryption", "aws:kms"),
            (
                "server-side-encryption-aws-kms-key-id",
                "arn:aws:kms:us-east-1:1:key/k",
            ),
            ("server-side-encryption-bucket-key-enabled", "true"),
            ("checksum-crc32c", "yZRlqg=="),
            ("checksum-type", "FULL_OBJECT"),
            ("object-lock-mode", "COMPLIANCE"),
            ("object-lock-retain-until-date", "2031-01-02T03:04:05.000Z"),
            ("object-lock-legal-hold", "ON"),
            ("replication-status", "PENDING"),
            ("version-id", "v1"),
        ] {
            assert!(c.read_header(name, value.as_bytes()), "{name}");
        }
        assert!(!c.read_header("request-id", b"x"));
        assert!(!c.read_header("checksum-md5", b"x"));
        assert_eq!(c.server_side_encryption.as_deref(), Some("aws:kms"));
        assert_eq!(c.kms_key_arn.as_deref(), Some("arn:aws:kms:us-east-1:1:key/k"));
        assert_eq!(c.is_bucket_key_enabled, Some(true));
        assert_eq!(c.checksum_algorithm.as_deref(), Some("CRC32C"));
        assert_eq!(c.checksum.as_deref(), Some("yZRlqg=="));
        assert_eq!(c.checksum_type.as_deref(), Some("FULL_OBJECT"));
        assert_eq!(c.object_lock_mode.as_deref(), Some("COMPLIANCE"));
        assert_eq!(
            c.object_lock_retain_until_date.as_deref(),
            Some("2031-01-02T03:04:05Z")
        );
        assert_eq!(c.object_lock_legal_hold, Some(true));
        assert_eq!(c.replication_status.as_deref(), Some("PENDING"));
        assert_eq!(c.version_id.as_deref(), Some("v1"));
        // The listing fills only what the HEAD left empty.
        c.fill_from_listing(Some("CRC32".into()), Some("COMPOSITE".into()));
        assert_eq!(c.checksum_algorithm.as_deref(), Some("CRC32C"));
        let mut empty = ObjectColumns::default();
        empty.fill_from_listing(Some("CRC32".into()), None);
        assert_eq!(empty.checksum_algorithm.as_deref(), Some("CRC32"));
        // Nothing set, nothing written.
        assert_eq!(serde_json::to_string(&ObjectColumns::default()).unwrap(), "{}");
    }
}
