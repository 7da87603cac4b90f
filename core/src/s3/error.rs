//! One error type for everything that talks to S3. The variants say what the
//! user can do about it; `is_retryable` decides the backoff loop. The very
//! bottom of the crate.
//!
//! May import: nothing of the crate.

use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum S3Error {
    #[error("access denied to bucket {bucket:?} ({detail}); check the credentials and their permissions")]
    AccessDenied { bucket: String, detail: String },
    #[error("bucket {bucket:?} does not exist at this endpoint")]
    NoSuchBucket { bucket: String },
    /// `retry_after`: how long the server asked us to wait (`Retry-After`,
    /// `x-amz-retry-after`), honoured by the retry policy within its cap.
    #[error("S3 is throttling (HTTP {status}); retrying with backoff")]
    Throttled {
        status: u16,
        retry_after: Option<Duration>,
    },
    #[error("S3 server error HTTP {status}: {detail}")]
    Server { status: u16, detail: String },
    #[error("S3 answered HTTP {status}: {detail}")]
    Client { status: u16, detail: String },
    #[error("request timed out after {0:?}")]
    Timeout(Duration),
    #[error("connection failed: {0}")]
    Connection(String),
    #[error("could not load credentials: {0}")]
    Credentials(String),
    /// The server says the session token expired (`ExpiredToken`, or the
    /// credentials' own expiry passed and no new ones could be loaded).
    #[error("the session token expired ({detail}); renew the credentials (a new AWS_SESSION_TOKEN, or a profile or web identity that refreshes them) and run again")]
    ExpiredToken { detail: String },
    /// A HEAD refused for this one object. HEAD answers carry no body, so the
    /// status is all the server says; `cause` is what that status usually means.
    #[error("HTTP {status} on HEAD (no body: {cause})")]
    HeadRefused { status: u16, cause: &'static str },
    /// An answer that breaks the protocol (e.g. no valid Content-Length):
    /// used instead of guessing a value.
    #[error("invalid answer from S3: {0}")]
    BadAnswer(String),
    #[error("invalid configuration: {0}")]
    Config(String),
    /// The server says `bucket` is in another region (a redirect); the
    /// region is learnt and the request sent again, signed for it.
    #[error("bucket {bucket:?} is in region {region:?}; sending the request there")]
    WrongRegion { bucket: String, region: String },
    /// The server refused a request whose signing time is off its clock by
    /// more than it allows; the clock was corrected and the request is sent again.
    #[error("this machine's clock is {offset_secs} s off the S3 server's; signing with the server's time")]
    ClockSkew { offset_secs: i64 },
    /// A listing that never gets anywhere (a continuation token that keeps
    /// coming back). Worth another try from the last good record; a store
    /// that does it every time fails the shard with this text.
    #[error("the listing is inconsistent: {0}")]
    BadListing(String),
    /// A listing whose keys went backwards: what it skipped cannot be told,
    /// so no resume can be trusted. Final for the shard (see `fleet::run`).
    #[error("the listing is out of order: {0}")]
    ListingOutOfOrder(String),
    /// A version listing resumed after one version of a key (a `--versions`
    /// checkpoint), and that version was deleted for good since: which of
    /// the key's other versions stood after it cannot be told (see
    /// `s3::versions`). Final for the shard, like an order it cannot trust.
    #[error("the version {version_id:?} of {key:?} this listing resumes after was deleted since it was listed (a `null` one also when replaced by a new `null` entry: a PUT or DELETE under suspended versioning); which of that key's other versions came after it cannot be told, so the range cannot be finished exactly: scan it again from its start")]
    ResumeVersionGone { key: String, version_id: String },
    /// The endpoint's allowlist (the operator's `--allowed-endpoints`)
    /// refused every address its host resolves to: no connection was
    /// opened, no request sent. Final: the same host is refused again.
    #[error("{0}")]
    NotAllowed(String),
    #[error("{0}")]
    Other(String),
}

impl S3Error {
    /// Transient failures worth another attempt: throttling, 5xx, timeouts and
    /// broken connections. Permission and configuration problems are final.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            S3Error::Throttled { .. }
                | S3Error::Server { .. }
                | S3Error::Timeout(_)
                | S3Error::Connection(_)
                | S3Error::WrongRegion { .. }
                | S3Error::ClockSkew { .. }
                | S3Error::BadListing(_)
        )
    }

    /// Retries that fix their cause before the next attempt (the region or
    /// the clock was corrected): sent again at once, without backoff.
    pub fn is_corrected(&self) -> bool {
        matches!(self, S3Error::WrongRegion { .. } | S3Error::ClockSkew { .. })
    }

    /// Errors that are about the client, not one object or one listing:
    /// every other request would fail the same way, so they stop the scan
    /// instead of becoming a record per object.
    pub fn affects_every_request(&self) -> bool {
        matches!(
            self,
            S3Error::Credentials(_)
                | S3Error::ExpiredToken { .. }
                | S3Error::Config(_)
                | S3Error::NotAllowed(_)
        )
    }

    /// The HTTP status the server answered with, when there was one.
    pub fn http_status(&self) -> Option<u16> {
        match self {
            S3Error::Throttled { status, .. }
            | S3Error::Server { status, .. }
            | S3Error::Client { status, .. }
            | S3Error::HeadRefused { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// The wait the server asked for, on a throttling answer.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            S3Error::Throttled { retry_after, .. } => *retry_after,
            _ => None,
        }
    }

    /// Attach the wait the server asked for (see [`super::codec::retry_after`])
    /// to a throttling error; other errors are returned as they are.
    pub fn with_retry_after(mut self, wait: Option<Duration>) -> S3Error {
        if let S3Error::Throttled { retry_after, .. } = &mut self {
            *retry_after = wait;
        }
        self
    }

    /// Map an HTTP status (and the S3 error code, when the response had a body)
    /// to an error, for responses that are not a success.
    pub fn from_status(status: u16, code: Option<&str>, bucket: &str) -> S3Error {
        let detail = code.unwrap_or("no error code").to_string();
        match (status, code) {
            (_, Some("NoSuchBucket")) => S3Error::NoSuchBucket {
                bucket: bucket.to_string(),
            },
            (_, Some(code @ ("ExpiredToken" | "TokenRefreshRequired"))) => S3Error::ExpiredToken {
                detail: format!("HTTP {status} {code}"),
            },
            // The skew refusal whose answer had no usable `Date` (else the
            // clock was corrected before this): worth another attempt, and
            // never an access denial.
            (_, Some("RequestTimeTooSkewed")) => S3Error::Server {
                status,
                detail: "RequestTimeTooSkewed: the request's time is too far from the server's clock; check this machine's clock".into(),
            },
            (403, _) | (401, _) => S3Error::AccessDenied {
                bucket: bucket.to_string(),
                detail,
            },
            (_, Some("SlowDown" | "Throttling" | "ThrottlingException" | "RequestLimitExceeded"))
            | (429, _)
            | (503, _) => S3Error::Throttled {
                status,
                retry_after: None,
            },
            (500..=599, _) => S3Error::Server { status, detail },
            _ => S3Error::Client { status, detail },
        }
    }
}

/// An error with its sources, one line.
pub(crate) fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}

/// A request to `scheme://host` that got no answer. The chain of a DNS or
/// TLS failure does not name the host, so this does. A connection the
/// endpoint allowlist refused is [`S3Error::NotAllowed`], whatever wraps it.
pub(crate) fn connection_failed(scheme: &str, host: &str, e: &(dyn std::error::Error + 'static)) -> S3Error {
    if let Some(refused) = refusal_in(e) {
        return S3Error::NotAllowed(refused.0.clone());
    }
    S3Error::Connection(format!("{scheme}://{host}: {}", error_chain(e)))
}

/// The error the connector gives when the endpoint allowlist refuses every
/// address of a host (see `allowlist`): it travels up through hyper's and
/// the SDK's errors as a source, and is found again by [`refusal_in`].
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Refused(pub String);

/// The allowlist's refusal among `e` and its sources, if that is what failed.
pub(crate) fn refusal_in<'a>(e: &'a (dyn std::error::Error + 'static)) -> Option<&'a Refused> {
    found_in::<Refused>(e)
}

/// The first error of type `T` in `e`'s chain of sources.
pub(crate) fn found_in<'a, T: std::error::Error + 'static>(
    e: &'a (dyn std::error::Error + 'static),
) -> Option<&'a T> {
    let mut next = Some(e);
    while let Some(e) = next {
        if let Some(found) = e.downcast_ref::<T>() {
            return Some(found);
        }
        next = e.source();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classification() {
        assert!(S3Error::from_status(503, Some("SlowDown"), "b").is_retryable());
        assert!(S3Error::from_status(500, None, "b").is_retryable());
        assert!(!S3Error::from_status(403, Some("AccessDenied"), "b").is_retryable());
        assert!(S3Error::from_status(403, Some("RequestTimeTooSkewed"), "b").is_retryable());
        assert!(matches!(
            S3Error::from_status(404, Some("NoSuchBucket"), "b"),
            S3Error::NoSuchBucket { .. }
        ));
        assert!(!S3Error::from_status(400, Some("InvalidArgument"), "b").is_retryable());
    }
}
