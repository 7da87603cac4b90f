//! SigV4 for the fast paths, built on `aws-sigv4`'s key derivation with
//! savings it does not make itself, since every HEAD is signed: the derived
//! signing key is cached per day, region and service, with its HMAC pads
//! already hashed (two SHA-256 blocks less per request); the canonical
//! request of a bodiless request (four headers, the query already canonical)
//! and the string to sign are hashed as they are written, never built as
//! strings. A unit test checks every signature against `aws-sigv4`'s own
//! request signer.
//!
//! May import: `error` only (credentials come from the provider it is given).

use super::error::S3Error;
use aws_credential_types::provider::{ProvideCredentials, SharedCredentialsProvider};
use aws_credential_types::Credentials;
use sha2::{Digest, Sha256};
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

/// SHA-256 of the empty body, the payload hash of every HEAD.
pub(crate) const EMPTY_SHA256: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

/// `x-amz-date`, e.g. `20261122T195400Z`.
pub(crate) fn amz_date(t: SystemTime) -> String {
    let dt = time::OffsetDateTime::from(t);
    fn digits(out: &mut String, n: u32, width: u32) {
        for place in (0..width).rev() {
            out.push(char::from(b'0' + (n / 10u32.pow(place) % 10) as u8));
        }
    }
    let mut out = String::with_capacity(16);
    digits(&mut out, dt.year().clamp(0, 9999) as u32, 4);
    digits(&mut out, dt.month() as u32, 2);
    digits(&mut out, dt.day().into(), 2);
    out.push('T');
    digits(&mut out, dt.hour().into(), 2);
    digits(&mut out, dt.minute().into(), 2);
    digits(&mut out, dt.second().into(), 2);
    out.push('Z');
    out
}

/// HMAC-SHA256 under one key, its two padded key blocks hashed once
/// (RFC 2104): each signature then costs the message's blocks and one more.
#[derive(Clone)]
struct HmacKey {
    inner: Sha256,
    outer: Sha256,
}

impl HmacKey {
    fn new(key: &[u8]) -> HmacKey {
        let mut block = [0u8; 64];
        if key.len() > block.len() {
            block[..32].copy_from_slice(&Sha256::digest(key));
        } else {
            block[..key.len()].copy_from_slice(key);
        }
        let pad = |byte: u8| {
            let padded: Vec<u8> = block.iter().map(|b| b ^ byte).collect();
            let mut h = Sha256::new();
            h.update(&padded);
            h
        };
        HmacKey {
            inner: pad(0x36),
            outer: pad(0x5c),
        }
    }

    /// The MAC of the message `write` feeds to the hasher it is given.
    fn mac(&self, write: impl FnOnce(&mut Sha256)) -> [u8; 32] {
        let mut inner = self.inner.clone();
        write(&mut inner);
        let mut outer = self.outer.clone();
        outer.update(inner.finalize());
        outer.finalize().into()
    }
}

#[cfg(test)]
impl SigningState {
    /// What tells two signing keys apart in tests: a MAC under the key.
    fn key_id(&self) -> [u8; 32] {
        self.hmac.mac(|h| h.update(b"which key"))
    }
}

/// Lower-case hex of 32 bytes, on the stack.
fn hex32(bytes: &[u8; 32]) -> [u8; 64] {
    let mut out = [0u8; 64];
    hex::encode_to_slice(bytes, &mut out).expect("64 bytes hold 32 in hex");
    out
}

/// Credentials and the signing key derived from them for one day and region.
pub(crate) struct SigningState {
    pub(crate) credentials: Credentials,
    /// `YYYYMMDD` the key was derived for.
    day: String,
    region: String,
    hmac: HmacKey,
    /// `AKID/YYYYMMDD/region/s3/aws4_request`
    credential_scope: String,
    /// `YYYYMMDD/region/s3/aws4_request`
    scope: String,
}

impl SigningState {
    /// The Authorization header of a bodiless request; `query` is already
    /// canonical (sorted, encoded: see [`super::list::list_query`]).
    pub(crate) fn authorization(
        &self,
        method: &str,
        host: &str,
        path: &str,
        query: &str,
        amz_date: &str,
        checksum_mode: bool,
    ) -> String {
        let token = self.credentials.session_token();
        // Names in order, as SigV4 wants them: `x-amz-checksum-mode` (a HEAD
        // in checksum mode) sorts before `x-amz-content-sha256`.
        let signed_headers = match (checksum_mode, token.is_some()) {
            (false, true) => "host;x-amz-content-sha256;x-amz-date;x-amz-security-token",
            (false, false) => "host;x-amz-content-sha256;x-amz-date",
            (true, true) => "host;x-amz-checksum-mode;x-amz-content-sha256;x-amz-date;x-amz-security-token",
            (true, false) => "host;x-amz-checksum-mode;x-amz-content-sha256;x-amz-date",
        };
        // The canonical request, hashed as it is written.
        let mut canonical = Sha256::new();
        for part in [method, "\n", path, "\n", query, "\nhost:", host] {
            canonical.update(part);
        }
        if checksum_mode {
            canonical.update("\nx-amz-checksum-mode:ENABLED");
        }
        for part in ["\nx-amz-content-sha256:", EMPTY_SHA256, "\nx-amz-date:", amz_date] {
            canonical.update(part);
        }
        if let Some(t) = token {
            canonical.update("\nx-amz-security-token:");
            canonical.update(t.trim());
        }
        for part in ["\n\n", signed_headers, "\n", EMPTY_SHA256] {
            canonical.update(part);
        }
        let canonical_hash = hex32(&canonical.finalize().into());
        let signature = hex32(&self.hmac.mac(|to_sign| {
            for part in ["AWS4-HMAC-SHA256\n", amz_date, "\n", &self.scope, "\n"] {
                to_sign.update(part);
            }
            to_sign.update(canonical_hash);
        }));
        const CREDENTIAL: &str = "AWS4-HMAC-SHA256 Credential=";
        let mut out = String::with_capacity(
            CREDENTIAL.len() + self.credential_scope.len() + signed_headers.len() + 40 + 64,
        );
        for part in [
            CREDENTIAL,
            &self.credential_scope,
            ", SignedHeaders=",
            signed_headers,
            ", Signature=",
        ] {
            out.push_str(part);
        }
        out.push_str(std::str::from_utf8(&signature).expect("hex is ASCII"));
        out
    }
}

/// Credentials are refreshed this long before they expire.
const REFRESH_BEFORE_EXPIRY: Duration = Duration::from_secs(60);
/// After a failed refresh, the next attempt waits this long (the current
/// credentials are used meanwhile, as long as they are valid).
const REFRESH_RETRY_AFTER: Duration = Duration::from_secs(10);

/// Hands out the current signing state, refreshing credentials before they
/// expire and the signing key when the UTC day or the region changes.
pub(crate) struct Signer {
    provider: SharedCredentialsProvider,
    current: RwLock<Option<Arc<SigningState>>>,
    refresh: tokio::sync::Mutex<()>,
    /// Set after a failed refresh: no new attempt before this time.
    refresh_not_before: RwLock<Option<SystemTime>>,
}

impl Signer {
    pub(crate) fn new(provider: SharedCredentialsProvider) -> Signer {
        Signer {
            provider,
            current: RwLock::new(None),
            refresh: tokio::sync::Mutex::new(()),
            refresh_not_before: RwLock::new(None),
        }
    }

    /// The state to sign for `region` at `now`; `day` is the `YYYYMMDD` of
    /// `now`, which the caller has formatted already.
    pub(crate) async fn state(
        &self,
        now: SystemTime,
        day: &str,
        region: &str,
    ) -> Result<Arc<SigningState>, S3Error> {
        if let Some(s) = self.usable(now, day, region) {
            return Ok(s);
        }
        // Boxed: the refresh (the credentials provider's futures) is rare,
        // and every request's future would otherwise hold its size.
        Box::pin(self.refresh_state(now, day, region)).await
    }

    async fn refresh_state(
        &self,
        now: SystemTime,
        day: &str,
        region: &str,
    ) -> Result<Arc<SigningState>, S3Error> {
        // One task refreshes; the others wait and then reuse its result.
        let _guard = self.refresh.lock().await;
        if let Some(s) = self.usable(now, day, region) {
            return Ok(s);
        }
        let current = self.current.read().expect("lock").clone();
        let credentials = match current {
            Some(s) if self.may_keep(&s.credentials, now) => s.credentials.clone(),
            current => self.refreshed(current, now).await?,
        };
        let state = Arc::new(derive_state(credentials, now, region));
        *self.current.write().expect("lock") = Some(state.clone());
        Ok(state)
    }

    /// Fresh credentials from the provider. When the provider fails while
    /// the current credentials are still valid, those are kept and the
    /// refresh is tried again later: a passing outage of the credentials
    /// source must not fail requests that can still be signed.
    async fn refreshed(
        &self,
        current: Option<Arc<SigningState>>,
        now: SystemTime,
    ) -> Result<Credentials, S3Error> {
        let failure = match self.provider.provide_credentials().await {
            Ok(credentials) => {
                *self.refresh_not_before.write().expect("lock") = None;
                return Ok(credentials);
            }
            Err(e) => aws_sdk_s3::error::DisplayErrorContext(&e).to_string(),
        };
        let Some(current) = current else {
            return Err(S3Error::Credentials(failure));
        };
        match current.credentials.expiry() {
            Some(expiry) if expiry > now => {
                tracing::warn!(
                    error = %failure,
                    expires_in_secs = expiry.duration_since(now).unwrap_or_default().as_secs(),
                    "refreshing the credentials failed; using the current ones, which are still valid, and retrying later"
                );
                *self.refresh_not_before.write().expect("lock") = Some(now + REFRESH_RETRY_AFTER);
                Ok(current.credentials.clone())
            }
            Some(expiry) => Err(S3Error::ExpiredToken {
                detail: format!(
                    "the credentials expired at {} and refreshing them failed: {failure}",
                    time::OffsetDateTime::from(expiry)
                        .format(&time::format_description::well_known::Rfc3339)
                        .unwrap_or_default()
                ),
            }),
            None => Err(S3Error::Credentials(failure)),
        }
    }

    /// May `credentials` still sign at `now` without asking the provider?
    /// Yes while they are more than a minute from expiry, and after a failed
    /// refresh until they expire or the retry is due.
    fn may_keep(&self, credentials: &Credentials, now: SystemTime) -> bool {
        let Some(expiry) = credentials.expiry() else {
            return true;
        };
        if expiry > now + REFRESH_BEFORE_EXPIRY {
            return true;
        }
        let retry_due = self
            .refresh_not_before
            .read()
            .expect("lock")
            .is_none_or(|at| now >= at);
        expiry > now && !retry_due
    }

    fn usable(&self, now: SystemTime, day: &str, region: &str) -> Option<Arc<SigningState>> {
        let current = self.current.read().expect("lock");
        let s = current.as_ref()?;
        (s.day == day && s.region == region && self.may_keep(&s.credentials, now)).then(|| s.clone())
    }
}

fn derive_state(credentials: Credentials, now: SystemTime, region: &str) -> SigningState {
    let day = amz_date(now)[..8].to_string();
    let signing_key =
        aws_sigv4::sign::v4::generate_signing_key(credentials.secret_access_key(), now, region, "s3");
    let scope = format!("{day}/{region}/s3/aws4_request");
    SigningState {
        credential_scope: format!("{}/{scope}", credentials.access_key_id()),
        credentials,
        day,
        region: region.to_string(),
        hmac: HmacKey::new(signing_key.as_ref()),
        scope,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sigv4::http_request::{
        sign, PayloadChecksumKind, PercentEncodingMode, SignableBody, SignableRequest, SigningSettings,
        UriPathNormalizationMode,
    };
    use aws_sigv4::sign::v4::SigningParams;

    /// Our HEAD signature must equal what aws-sigv4's general signer produces.
    fn reference_authorization(
        creds: &Credentials,
        method: &str,
        host: &str,
        path_and_query: &str,
        now: SystemTime,
        checksum_mode: bool,
    ) -> String {
        let mut settings = SigningSettings::default();
        settings.percent_encoding_mode = PercentEncodingMode::Single;
        settings.payload_checksum_kind = PayloadChecksumKind::XAmzSha256;
        settings.uri_path_normalization_mode = UriPathNormalizationMode::Disabled;
        let identity = creds.clone().into();
        let params = SigningParams::builder()
            .identity(&identity)
            .region("eu-central-1")
            .name("s3")
            .time(now)
            .settings(settings)
            .build()
            .unwrap()
            .into();
        let url = format!("http://{host}{path_and_query}");
        let headers = checksum_mode.then_some(("x-amz-checksum-mode", "ENABLED"));
        let req = SignableRequest::new(method, &url, headers.into_iter(), SignableBody::Bytes(&[])).unwrap();
        let (instructions, _) = sign(req, &params).unwrap().into_parts();
        let authorization = instructions
            .headers()
            .find(|(n, _)| *n == "authorization")
            .map(|(_, v)| v.to_string())
            .unwrap();
        authorization
    }

    #[test]
    fn signature_matches_aws_sigv4() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_795_000_000);
        for token in [None, Some("session-token".to_string())] {
            let creds = Credentials::new(
                "AKIDEXAMPLE",
                "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
                token,
                None,
                "test",
            );
            let state = derive_state(creds.clone(), now, "eu-central-1");
            for key in [
                "plain.txt",
                "dir/sub/file",
                "sp ace+plus%pct#hash?q&a=b",
                "ünï/💥",
                "//double//",
                "/lead",
                "ctl\u{1}\n",
                "~tilde_-.",
            ] {
                let path = format!("/bucket/{}", super::super::codec::encode_key(key));
                for checksum_mode in [false, true] {
                    let ours = state.authorization(
                        "HEAD",
                        "127.0.0.1:9000",
                        &path,
                        "",
                        &amz_date(now),
                        checksum_mode,
                    );
                    assert_eq!(
                        ours,
                        reference_authorization(&creds, "HEAD", "127.0.0.1:9000", &path, now, checksum_mode),
                        "key {key:?}, checksum mode {checksum_mode}"
                    );
                }
                // The same string as a LIST's prefix and start-after.
                let req = crate::s3::types::ListRequest {
                    prefix: key.to_string(),
                    start_after: Some(format!("{key}~")),
                    delimiter: Some("/".into()),
                    continuation: Some("tok/en+=".into()),
                    max_keys: 1000,
                    with_metadata: true,
                };
                let query = crate::s3::list::list_query(&req, req.start_after.as_deref());
                let ours =
                    state.authorization("GET", "127.0.0.1:9000", "/bucket", &query, &amz_date(now), false);
                assert_eq!(
                    ours,
                    reference_authorization(
                        &creds,
                        "GET",
                        "127.0.0.1:9000",
                        &format!("/bucket?{query}"),
                        now,
                        false
                    ),
                    "prefix {key:?}"
                );
            }
        }
    }

    /// A credentials source that answers from a script: a test double,
    /// since the real sources (STS, IMDS, SSO) cannot run here.
    #[derive(Debug)]
    struct Scripted {
        answers: std::sync::Mutex<std::collections::VecDeque<Result<Credentials, String>>>,
        calls: Arc<std::sync::atomic::AtomicU32>,
    }

    impl ProvideCredentials for Scripted {
        fn provide_credentials<'a>(&'a self) -> aws_credential_types::provider::future::ProvideCredentials<'a>
        where
            Self: 'a,
        {
            self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let answer = self
                .answers
                .lock()
                .unwrap()
                .pop_front()
                .expect("no more scripted answers");
            aws_credential_types::provider::future::ProvideCredentials::ready(
                answer.map_err(aws_credential_types::provider::error::CredentialsError::provider_error),
            )
        }
    }

    fn scripted(answers: Vec<Result<Credentials, String>>) -> (Signer, Arc<std::sync::atomic::AtomicU32>) {
        let calls = Arc::new(std::sync::atomic::AtomicU32::new(0));
        let provider = Scripted {
            answers: std::sync::Mutex::new(answers.into()),
            calls: calls.clone(),
        };
        (Signer::new(SharedCredentialsProvider::new(provider)), calls)
    }

    fn session(key: &str, expiry: SystemTime) -> Credentials {
        Credentials::new(
            key,
            "s3cr3t-value",
            Some("t0ken-value".into()),
            Some(expiry),
            "test",
        )
    }

    #[tokio::test]
    async fn a_failed_refresh_keeps_valid_credentials_and_retries_later() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_795_000_000);
        let at = |secs: u64| t0 + Duration::from_secs(secs);
        let (signer, provider) = scripted(vec![
            Ok(session("FIRST", at(100))),
            Err("the credentials endpoint is down".into()),
            Ok(session("SECOND", at(1000))),
        ]);
        let calls = || provider.load(std::sync::atomic::Ordering::SeqCst);
        let key_at = |secs: u64| {
            let signer = &signer;
            async move {
                let now = at(secs);
                let day = amz_date(now)[..8].to_string();
                signer
                    .state(now, &day, "r")
                    .await
                    .map(|s| s.credentials.access_key_id().to_string())
            }
        };
        assert_eq!(key_at(0).await.unwrap(), "FIRST");
        assert_eq!(key_at(30).await.unwrap(), "FIRST");
        assert_eq!(calls(), 1, "far from expiry: no refresh");
        // Within a minute of expiry the refresh fails: the current ones stay.
        assert_eq!(key_at(50).await.unwrap(), "FIRST");
        assert_eq!(calls(), 2);
        assert_eq!(key_at(55).await.unwrap(), "FIRST");
        assert_eq!(calls(), 2, "no new attempt before the retry is due");
        assert_eq!(key_at(61).await.unwrap(), "SECOND");
        assert_eq!(calls(), 3);
    }

    #[tokio::test]
    async fn expired_credentials_that_cannot_be_refreshed_say_so() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_795_000_000);
        let (signer, _) = scripted(vec![
            Ok(session("FIRST", t0 + Duration::from_secs(100))),
            Err("the credentials endpoint is down".into()),
        ]);
        let day = amz_date(t0)[..8].to_string();
        signer.state(t0, &day, "r").await.unwrap();
        let later = t0 + Duration::from_secs(150);
        let e = signer.state(later, &day, "r").await.err().unwrap();
        assert!(
            matches!(e, S3Error::ExpiredToken { .. }) && e.affects_every_request(),
            "{e}"
        );
        let text = e.to_string();
        assert!(
            text.starts_with("the session token expired (the credentials expired at "),
            "{text}"
        );
        assert!(text.contains("the credentials endpoint is down"), "{text}");
        assert!(
            !text.contains("s3cr3t-value") && !text.contains("t0ken-value"),
            "{text}"
        );
    }

    #[tokio::test]
    async fn a_new_day_or_region_derives_a_new_key_without_asking_the_provider() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_795_000_000);
        let (signer, provider) = scripted(vec![Ok(Credentials::new("AKID", "SECRET", None, None, "t"))]);
        let day0 = amz_date(t0)[..8].to_string();
        let a = signer.state(t0, &day0, "us-east-1").await.unwrap();
        let b = signer.state(t0, &day0, "eu-west-1").await.unwrap();
        assert_ne!(a.key_id(), b.key_id());
        assert!(b.scope.contains("/eu-west-1/"), "{}", b.scope);
        let t1 = t0 + Duration::from_secs(86_400);
        let c = signer.state(t1, &amz_date(t1)[..8], "eu-west-1").await.unwrap();
        assert_ne!(b.day, c.day);
        assert_eq!(provider.load(std::sync::atomic::Ordering::SeqCst), 1);
    }

    #[test]
    fn amz_date_is_the_utc_second() {
        let t = SystemTime::UNIX_EPOCH + Duration::from_secs(1_795_000_000);
        assert_eq!(amz_date(t), "20261118T110640Z");
        assert_eq!(amz_date(SystemTime::UNIX_EPOCH), "19700101T000000Z");
        let t = SystemTime::UNIX_EPOCH + Duration::from_millis(951_782_399_999);
        assert_eq!(amz_date(t), "20000228T235959Z");
    }

    #[test]
    fn the_precomputed_hmac_is_hmac_sha256() {
        use hmac::{KeyInit, Mac};
        for key in [&b""[..], b"k", &[7u8; 32], &[9u8; 64], &[1u8; 65]] {
            let ours = HmacKey::new(key).mac(|h| h.update(b"what is signed"));
            let mut reference = hmac::Hmac::<Sha256>::new_from_slice(key).unwrap();
            reference.update(b"what is signed");
            assert_eq!(
                ours[..],
                reference.finalize().into_bytes()[..],
                "key of {} bytes",
                key.len()
            );
        }
    }

    #[test]
    fn signing_state_is_reused_within_a_day() {
        let day1 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_795_000_000);
        let creds = Credentials::new("AKID", "SECRET", None, None, "test");
        let a = derive_state(creds.clone(), day1, "r");
        let b = derive_state(creds, day1 + Duration::from_secs(86_400), "r");
        assert_ne!(a.key_id(), b.key_id());
        assert_ne!(a.day, b.day);
    }
}
