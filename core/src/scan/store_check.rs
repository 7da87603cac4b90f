//! Whether the store moves an object's LastModified when only its metadata
//! is replaced, checked once at the start of every scan, and the store's own
//! time at that start. An incremental scan skips the HEAD of an object whose
//! size, ETag and LastModified match its baseline record; that is exact only
//! where replacing metadata (CopyObject onto itself, `REPLACE`) moves
//! LastModified (AWS does; MinIO does in recent releases and regressed in
//! one; FlashBlade is unknown), so each scan asks its store instead of
//! trusting a list of products.
//!
//! The check writes one canary object under the scan's output (a location
//! the scan may write, on the same endpoint), then replaces its metadata and
//! HEADs it again until its LastModified moved, or until a replace sent more
//! than a second after the write (LastModified has whole seconds) left it
//! where it was. The canary's first LastModified is the store's own time
//! before this scan listed or HEADed anything: what the next incremental
//! scan compares LastModified against (`started`). The canary is deleted.
//!
//! Replaced every `POLL` rather than once after a fixed 1.1 s: a store that
//! moves LastModified shows it at the first replace in the next second of
//! its clock, half a second after the write on average. The fixed wait was
//! a fifth of an incremental scan of 10^6 objects (1.1 of 6.2 s) and half of
//! a fleet scan's planning (1.1 of 2.2 s); a store that keeps LastModified
//! still costs the full second. A fleet scan without a baseline settles the
//! check after its plan is marked, beside its HEADs (`fleet::incremental`).
//!
//! May import: `s3`.

use crate::s3::error::S3Error;
use crate::s3::S3;
use aws_sdk_s3::types::MetadataDirective;
use serde::{Deserialize, Serialize};
use std::time::Duration;
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

/// What the check found, recorded in the manifest.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoreCheck {
    /// The store's time when the scan started (the canary's first
    /// LastModified, RFC 3339, whole seconds): nothing of the scan was
    /// listed or HEADed before it.
    pub started: String,
    /// Replacing the canary's metadata moved its LastModified.
    pub last_modified_moves: bool,
    /// The store's `Server` header (e.g. `AmazonS3`, `MinIO`), if it sent one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
    /// In words, for the manifest's reader and the scan's condition.
    pub detail: String,
}

/// Between the canary's PUT and a copy that settles the check: more than a
/// second, so the copy falls in a later second of the store's clock than
/// the PUT did.
const PAST_A_SECOND: Duration = Duration::from_millis(1_100);
/// Between two replaces of the canary's metadata.
const POLL: Duration = Duration::from_millis(100);

/// What a replace of the canary's metadata, sent `sent_after` the canary's
/// write answered, shows: `Some(true)` when its LastModified moved from
/// `first` to `now` (unix seconds), `Some(false)` when it did not though the
/// replace came more than a second after the write, `None` when it may
/// still be the write's second.
fn verdict(first: i64, now: i64, sent_after: Duration) -> Option<bool> {
    if now > first {
        Some(true)
    } else if sent_after >= PAST_A_SECOND {
        Some(false)
    } else {
        None
    }
}

/// The check's first half: the canary written and its first LastModified
/// read. The scan's start (`started`) is known from here on; whether
/// LastModified moves, once [`Canary::settle`] ends (up to a second
/// later), which a scan may run beside its listing.
pub struct Canary {
    bucket: String,
    key: String,
    /// Keys of the attempts the client gave up on (they may exist).
    abandoned: Vec<String>,
    first: Seen,
    written: tokio::time::Instant,
}

/// Write the canary `key` of `bucket` and read its first LastModified.
/// Each attempt writes a key of its own (`key`, then `key.1`, …): a write
/// the client gave up on may still reach the store later, and on the key
/// the check reads it would move LastModified as a replace never did.
pub async fn write_canary(s3: &S3, bucket: &str, key: &str) -> Result<Canary, S3Error> {
    let attempts = std::sync::atomic::AtomicU32::new(0);
    s3.send_retried(bucket, |sdk| {
        let nth = attempts.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        sdk.put_object()
            .bucket(bucket)
            .key(attempt_key(key, nth))
            .content_type("text/plain")
            .metadata("bucketscan-canary", "1")
            .body(aws_sdk_s3::primitives::ByteStream::from_static(
                b"bucketscan store check\n",
            ))
            .send()
    })
    .await?;
    let last = attempts.into_inner().saturating_sub(1);
    let written_key = attempt_key(key, last);
    let first = head_times(s3, bucket, &written_key).await?;
    Ok(Canary {
        bucket: bucket.to_string(),
        key: written_key,
        abandoned: (0..last).map(|nth| attempt_key(key, nth)).collect(),
        first,
        written: tokio::time::Instant::now(),
    })
}

/// The key of the `nth` attempt at writing canary `key`.
fn attempt_key(key: &str, nth: u32) -> String {
    match nth {
        0 => key.to_string(),
        n => format!("{key}.{n}"),
    }
}

impl Canary {
    pub fn bucket(&self) -> &str {
        &self.bucket
    }

    pub fn key(&self) -> &str {
        &self.key
    }

    /// The store's time when the scan started (RFC 3339, whole seconds).
    pub fn started(&self) -> String {
        rfc3339(self.first.last_modified)
    }

    /// Replace the canary's metadata until the check is settled, delete it.
    pub async fn settle(self, s3: &S3) -> Result<StoreCheck, S3Error> {
        let Canary {
            bucket,
            key,
            abandoned,
            first,
            written,
        } = self;
        let (bucket, key) = (bucket.as_str(), key.as_str());
        let source = format!("{bucket}/{}", percent_encode_key(key));
        let mut replaces = 0u32;
        let (moves, second) = loop {
            let sent_after = written.elapsed();
            // A new value each time: a store may take a replace by the same
            // metadata for no change at all.
            replaces += 1;
            replace_metadata(s3, bucket, key, &source, replaces).await?;
            let second = head_times(s3, bucket, key).await?;
            if let Some(moves) = verdict(first.last_modified, second.last_modified, sent_after) {
                break (moves, second);
            }
            tokio::time::sleep(POLL).await;
        };
        for gone in abandoned.iter().map(String::as_str).chain([key]) {
            let _ = s3
                .send_retried(bucket, |sdk| sdk.delete_object().bucket(bucket).key(gone).send())
                .await;
        }
        let server = second.server.or(first.server);
        let started = rfc3339(first.last_modified);
        let store = server.as_deref().unwrap_or("the store");
        let detail = if moves {
            format!("{store} moves LastModified when an object's metadata is replaced: unchanged objects are taken from the baseline")
        } else {
            format!(
            "{store} kept LastModified when an object's metadata was replaced: an incremental scan cannot tell \
             a metadata change from the listing, so every object is HEADed"
        )
        };
        Ok(StoreCheck {
            started,
            last_modified_moves: moves,
            server,
            detail,
        })
    }
}

/// Unix seconds as RFC 3339 (empty when out of range).
fn rfc3339(secs: i64) -> String {
    OffsetDateTime::from_unix_timestamp(secs)
        .ok()
        .and_then(|t| t.format(&Rfc3339).ok())
        .unwrap_or_default()
}

/// Copy the canary onto itself with new metadata (`REPLACE`).
async fn replace_metadata(s3: &S3, bucket: &str, key: &str, source: &str, nth: u32) -> Result<(), S3Error> {
    let value = (nth + 1).to_string();
    s3.send_retried(bucket, |sdk| {
        sdk.copy_object()
            .bucket(bucket)
            .key(key)
            .copy_source(source)
            .metadata_directive(MetadataDirective::Replace)
            .content_type("text/plain")
            .metadata("bucketscan-canary", &value)
            .send()
    })
    .await?;
    Ok(())
}

struct Seen {
    /// Unix seconds.
    last_modified: i64,
    server: Option<String>,
}

async fn head_times(s3: &S3, bucket: &str, key: &str) -> Result<Seen, S3Error> {
    let server = std::sync::Arc::new(std::sync::Mutex::new(None));
    let seen = server.clone();
    let head = s3
        .send_retried(bucket, move |sdk| {
            sdk.head_object()
                .bucket(bucket)
                .key(key)
                .customize()
                .interceptor(ServerHeader(seen.clone()))
                .send()
        })
        .await?;
    let last_modified = head
        .last_modified()
        .map(|t| t.secs())
        .ok_or_else(|| S3Error::Other(format!("HEAD of s3://{bucket}/{key} has no Last-Modified")))?;
    let server = server.lock().expect("lock").clone();
    Ok(Seen {
        last_modified,
        server,
    })
}

/// Keeps the `Server` header of the answer (the SDK's output has no field
/// for it).
#[derive(Debug)]
struct ServerHeader(std::sync::Arc<std::sync::Mutex<Option<String>>>);

impl aws_smithy_runtime_api::client::interceptors::Intercept for ServerHeader {
    fn name(&self) -> &'static str {
        "ServerHeader"
    }

    fn read_after_transmit(
        &self,
        context: &aws_smithy_runtime_api::client::interceptors::context::BeforeDeserializationInterceptorContextRef<'_>,
        _: &aws_smithy_runtime_api::client::runtime_components::RuntimeComponents,
        _: &mut aws_smithy_types::config_bag::ConfigBag,
    ) -> Result<(), aws_smithy_runtime_api::box_error::BoxError> {
        if let Some(server) = context.response().headers().get("server") {
            *self.0.lock().expect("lock") = Some(server.chars().take(128).collect());
        }
        Ok(())
    }
}

/// A key as CopySource takes it: percent-encoded, `/` kept.
fn percent_encode_key(key: &str) -> String {
    const KEEP: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
        .remove(b'/')
        .remove(b'-')
        .remove(b'_')
        .remove(b'.')
        .remove(b'~');
    percent_encoding::utf8_percent_encode(key, KEEP).to_string()
}

/// Unix seconds of an RFC 3339 time (fractions dropped).
pub fn unix_secs(rfc3339: &str) -> Option<i64> {
    OffsetDateTime::parse(rfc3339, &Rfc3339)
        .ok()
        .map(OffsetDateTime::unix_timestamp)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_with_and_without_fractions_read_as_whole_seconds() {
        assert_eq!(unix_secs("2026-11-27T03:38:00Z"), Some(1_795_750_680));
        assert_eq!(unix_secs("2026-11-27T03:38:00.999Z"), Some(1_795_750_680));
        assert_eq!(unix_secs("not a time"), None);
    }

    #[test]
    fn a_moved_last_modified_settles_at_once_a_kept_one_only_past_a_second() {
        let ms = Duration::from_millis;
        // Moved: whenever the replace was sent.
        assert_eq!(verdict(100, 101, ms(5)), Some(true));
        assert_eq!(verdict(100, 101, ms(2_000)), Some(true));
        // Kept within the write's second may be that second still.
        assert_eq!(verdict(100, 100, ms(5)), None);
        assert_eq!(verdict(100, 100, ms(1_099)), None);
        // Kept by a replace sent past a second: the store keeps it.
        assert_eq!(verdict(100, 100, PAST_A_SECOND), Some(false));
        assert_eq!(verdict(100, 100, ms(3_000)), Some(false));
        // A clock that went back is no move.
        assert_eq!(verdict(100, 99, ms(5)), None);
        assert_eq!(verdict(100, 99, ms(1_200)), Some(false));
    }

    #[test]
    fn copy_sources_keep_slashes_and_encode_the_rest() {
        assert_eq!(percent_encode_key("a b/c+d.txt"), "a%20b/c%2Bd.txt");
    }
}
