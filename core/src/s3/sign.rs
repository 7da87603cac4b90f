//! SigV4 for the fast paths, built on `aws-sigv4`'s primitives with two
//! savings it does not make itself: the derived signing key is cached per
//! day, region and service, and the canonical request of a bodiless request
//! (four headers, the query already canonical) is built directly. A unit test
//! checks every signature against `aws-sigv4`'s own request signer.
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
    format!(
        "{:04}{:02}{:02}T{:02}{:02}{:02}Z",
        dt.year(),
        dt.month() as u8,
        dt.day(),
        dt.hour(),
        dt.minute(),
        dt.second()
    )
}

/// Credentials and the signing key derived from them for one day.
pub(crate) struct SigningState {
    pub(crate) credentials: Credentials,
    /// `YYYYMMDD` the key was derived for.
    day: String,
    signing_key: Vec<u8>,
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
    ) -> String {
        let token = self.credentials.session_token();
        let signed_headers = if token.is_some() {
            "host;x-amz-content-sha256;x-amz-date;x-amz-security-token"
        } else {
            "host;x-amz-content-sha256;x-amz-date"
        };
        let mut canonical = String::with_capacity(256 + path.len() + query.len());
        canonical.push_str(method);
        canonical.push('\n');
        canonical.push_str(path);
        canonical.push('\n');
        canonical.push_str(query);
        canonical.push_str("\nhost:");
        canonical.push_str(host);
        canonical.push_str("\nx-amz-content-sha256:");
        canonical.push_str(EMPTY_SHA256);
        canonical.push_str("\nx-amz-date:");
        canonical.push_str(amz_date);
        if let Some(t) = token {
            canonical.push_str("\nx-amz-security-token:");
            canonical.push_str(t.trim());
        }
        canonical.push_str("\n\n");
        canonical.push_str(signed_headers);
        canonical.push('\n');
        canonical.push_str(EMPTY_SHA256);
        let string_to_sign = format!(
            "AWS4-HMAC-SHA256\n{amz_date}\n{}\n{}",
            self.scope,
            hex::encode(Sha256::digest(canonical.as_bytes()))
        );
        let signature =
            aws_sigv4::sign::v4::calculate_signature(&self.signing_key, string_to_sign.as_bytes());
        format!(
            "AWS4-HMAC-SHA256 Credential={}, SignedHeaders={signed_headers}, Signature={signature}",
            self.credential_scope
        )
    }
}

/// Hands out the current signing state, refreshing credentials before they
/// expire and the signing key when the UTC day changes.
pub(crate) struct Signer {
    provider: SharedCredentialsProvider,
    current: RwLock<Option<Arc<SigningState>>>,
    refresh: tokio::sync::Mutex<()>,
    region: String,
}

impl Signer {
    pub(crate) fn new(provider: SharedCredentialsProvider, region: String) -> Signer {
        Signer {
            provider,
            current: RwLock::new(None),
            refresh: tokio::sync::Mutex::new(()),
            region,
        }
    }

    /// `day` is the `YYYYMMDD` of `now`, which the caller has formatted already.
    pub(crate) async fn state(&self, now: SystemTime, day: &str) -> Result<Arc<SigningState>, S3Error> {
        if let Some(s) = self.usable(now, day) {
            return Ok(s);
        }
        // One task refreshes; the others wait and then reuse its result.
        let _guard = self.refresh.lock().await;
        if let Some(s) = self.usable(now, day) {
            return Ok(s);
        }
        let credentials = self
            .provider
            .provide_credentials()
            .await
            .map_err(|e| S3Error::Credentials(aws_sdk_s3::error::DisplayErrorContext(&e).to_string()))?;
        let state = Arc::new(derive_state(credentials, now, &self.region));
        *self.current.write().expect("lock") = Some(state.clone());
        Ok(state)
    }

    fn usable(&self, now: SystemTime, day: &str) -> Option<Arc<SigningState>> {
        let current = self.current.read().expect("lock");
        let s = current.as_ref()?;
        let fresh = s
            .credentials
            .expiry()
            .is_none_or(|exp| exp > now + Duration::from_secs(60));
        (fresh && s.day == day).then(|| s.clone())
    }
}

fn derive_state(credentials: Credentials, now: SystemTime, region: &str) -> SigningState {
    let day = amz_date(now)[..8].to_string();
    let signing_key =
        aws_sigv4::sign::v4::generate_signing_key(credentials.secret_access_key(), now, region, "s3")
            .as_ref()
            .to_vec();
    let scope = format!("{day}/{region}/s3/aws4_request");
    SigningState {
        credential_scope: format!("{}/{scope}", credentials.access_key_id()),
        credentials,
        day,
        signing_key,
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
        let req = SignableRequest::new(method, &url, std::iter::empty(), SignableBody::Bytes(&[])).unwrap();
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
                let ours = state.authorization("HEAD", "127.0.0.1:9000", &path, "", &amz_date(now));
                assert_eq!(
                    ours,
                    reference_authorization(&creds, "HEAD", "127.0.0.1:9000", &path, now),
                    "key {key:?}"
                );
                // The same string as a LIST's prefix and start-after.
                let req = crate::s3::types::ListRequest {
                    prefix: key.to_string(),
                    start_after: Some(format!("{key}~")),
                    delimiter: Some("/".into()),
                    continuation: Some("tok/en+=".into()),
                    max_keys: 1000,
                };
                let query = crate::s3::list::list_query(&req, req.start_after.as_deref());
                let ours = state.authorization("GET", "127.0.0.1:9000", "/bucket", &query, &amz_date(now));
                assert_eq!(
                    ours,
                    reference_authorization(
                        &creds,
                        "GET",
                        "127.0.0.1:9000",
                        &format!("/bucket?{query}"),
                        now
                    ),
                    "prefix {key:?}"
                );
            }
        }
    }

    #[test]
    fn signing_state_is_reused_within_a_day() {
        let day1 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_795_000_000);
        let creds = Credentials::new("AKID", "SECRET", None, None, "test");
        let a = derive_state(creds.clone(), day1, "r");
        let b = derive_state(creds, day1 + Duration::from_secs(86_400), "r");
        assert_ne!(a.signing_key, b.signing_key);
        assert_ne!(a.day, b.day);
    }
}
