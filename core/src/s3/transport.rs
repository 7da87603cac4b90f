//! The one HTTP stack for S3: hyper 1 over rustls (ring), with the system's
//! roots plus an optional extra CA, or no certificate verification at all
//! when asked for (`insecure`, for test stores with throwaway certificates).
//! The fast HEAD path uses it directly; the AWS SDK uses it through
//! [`SdkHttpClient`], so both trust exactly the same servers.
//!
//! Connections of a client whose endpoint carries an allowlist (the
//! operator's) go only to the addresses it allows ([`TcpConnector`]).
//!
//! May import: the bottom of `s3` (types, error, allowlist).

use super::allowlist::EndpointAllowlist;
use super::error::{Refused, S3Error};
use super::types::Endpoint;
use aws_smithy_runtime_api::client::http::{
    HttpClient, HttpConnector, HttpConnectorFuture, HttpConnectorSettings, SharedHttpConnector,
};
use aws_smithy_runtime_api::client::orchestrator::HttpRequest;
use aws_smithy_runtime_api::client::result::ConnectorError;
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_smithy_types::body::SdkBody;
use http_body_util::Limited;
use hyper_util::client::legacy::connect::dns::Name;
use hyper_util::client::legacy::connect::HttpConnector as TcpDialer;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use hyper_util::rt::TokioIo;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

pub type HttpsConnector = hyper_rustls::HttpsConnector<TcpConnector>;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Header lines an answer may have. hyper's default, 100, is too few for S3:
/// each user metadata entry is a header of its own, and 2 KB of metadata
/// (names and values together) holds hundreds of short entries; an answer
/// with more headers than the limit cannot be read at all. AWS caps a PUT's
/// headers at 8 KB, about 480 metadata entries; this leaves room for stores
/// that allow more.
pub const MAX_ANSWER_HEADERS: usize = 1024;

/// A pooled HTTPS (or plain HTTP) connector for `endpoint`.
pub fn connector(endpoint: &Endpoint) -> Result<HttpsConnector, S3Error> {
    let tcp = TcpConnector {
        tcp: configured(TcpDialer::new()),
        allowlist: endpoint.allowlist.clone(),
        aws: endpoint.url.is_none(),
    };
    Ok(hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls_config(endpoint)?)
        .https_or_http()
        .enable_http1()
        .wrap_connector(tcp))
}

fn configured<R>(mut tcp: TcpDialer<R>) -> TcpDialer<R> {
    tcp.enforce_http(false);
    tcp.set_nodelay(true);
    tcp.set_connect_timeout(Some(Duration::from_secs(10)));
    tcp
}

/// TCP connections under TLS: hyper-util's connector as it is, or, when
/// the endpoint has an allowlist, one that resolves the host itself and
/// connects only to the addresses the allowlist allows (to those very
/// addresses: a name that resolves elsewhere a moment later changes
/// nothing). A host none of whose addresses is allowed fails with
/// [`Refused`] before any connection is opened.
#[derive(Clone)]
pub struct TcpConnector {
    tcp: TcpDialer,
    allowlist: Option<Arc<EndpointAllowlist>>,
    aws: bool,
}

impl tower_service::Service<http::Uri> for TcpConnector {
    type Response = TokioIo<tokio::net::TcpStream>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.tcp.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, uri: http::Uri) -> Self::Future {
        match self.allowlist.clone() {
            None => {
                let connecting = self.tcp.call(uri);
                Box::pin(async move { connecting.await.map_err(Into::into) })
            }
            Some(allowlist) => Box::pin(connect_allowed(uri, allowlist, self.aws)),
        }
    }
}

/// Resolve `uri`'s host, keep the addresses `allowlist` allows, and connect
/// to one of them (hyper-util's connector over exactly those).
async fn connect_allowed(
    uri: http::Uri,
    allowlist: Arc<EndpointAllowlist>,
    aws: bool,
) -> Result<TokioIo<tokio::net::TcpStream>, BoxError> {
    let host = uri
        .host()
        .unwrap_or_default()
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    let port = uri
        .port_u16()
        .unwrap_or(if uri.scheme_str() == Some("http") { 80 } else { 443 });
    let resolved: Vec<SocketAddr> = match host.parse::<IpAddr>() {
        Ok(ip) => vec![SocketAddr::new(ip, port)],
        Err(_) => tokio::net::lookup_host((host.as_str(), port)).await?.collect(),
    };
    let mut allowed = Vec::new();
    let mut refusals = Vec::new();
    for addr in resolved {
        match allowlist.check_address(&host, addr, aws) {
            Ok(()) => allowed.push(addr),
            Err(why) => refusals.push(why),
        }
    }
    if allowed.is_empty() {
        refusals.dedup();
        return Err(Box::new(Refused(refusals.join("; "))));
    }
    let mut tcp = configured(TcpDialer::new_with_resolver(Resolved(allowed)));
    tower_service::Service::call(&mut tcp, uri)
        .await
        .map_err(Into::into)
}

/// A resolver that answers the addresses already resolved and allowed.
#[derive(Clone)]
struct Resolved(Vec<SocketAddr>);

impl tower_service::Service<Name> for Resolved {
    type Response = std::vec::IntoIter<SocketAddr>;
    type Error = std::io::Error;
    type Future = std::future::Ready<Result<Self::Response, std::io::Error>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), std::io::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: Name) -> Self::Future {
        std::future::ready(Ok(self.0.clone().into_iter()))
    }
}

/// A pooled client over [`connector`].
pub fn client<B>(endpoint: &Endpoint) -> Result<Client<HttpsConnector, B>, S3Error>
where
    B: http_body::Body + Send + 'static,
    B::Data: Send,
{
    Ok(pooled(endpoint, connector(endpoint)?))
}

/// A pooled client over `connector` (made for `endpoint`), for a caller that
/// opens connections of its own through the same connector too (its TLS
/// set-up reads the system's certificates: once is enough).
pub fn pooled<B>(endpoint: &Endpoint, connector: HttpsConnector) -> Client<HttpsConnector, B>
where
    B: http_body::Body + Send + 'static,
    B::Data: Send,
{
    Client::builder(TokioExecutor::new())
        .http1_max_headers(MAX_ANSWER_HEADERS)
        .pool_max_idle_per_host(endpoint.pool_size.max(8))
        .pool_idle_timeout(Duration::from_secs(60))
        .build(connector)
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn tls_config(endpoint: &Endpoint) -> Result<rustls::ClientConfig, S3Error> {
    use rustls::pki_types::pem::PemObject;
    let builder = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| S3Error::Config(format!("TLS setup: {e}")))?;
    if endpoint.insecure {
        return Ok(builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(NoVerification(provider())))
            .with_no_client_auth());
    }
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_native_certs::load_native_certs().certs {
        // A broken system certificate is not a reason to refuse to start.
        let _ = roots.add(cert);
    }
    if let Some(pem) = &endpoint.ca_pem {
        let certs = CertificateDer::pem_slice_iter(pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| S3Error::Config(format!("cannot read the CA bundle: {e}")))?;
        for cert in certs {
            roots
                .add(cert)
                .map_err(|e| S3Error::Config(format!("bad certificate in the CA bundle: {e}")))?;
        }
    }
    Ok(builder.with_root_certificates(roots).with_no_client_auth())
}

/// Accepts any server certificate (`insecure`). Handshake signatures are
/// still checked, so the connection is at least to whoever holds the key.
#[derive(Debug)]
struct NoVerification(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for NoVerification {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// The AWS SDK's HTTP client, over our stack.
#[derive(Clone, Debug)]
pub struct SdkHttpClient {
    client: Client<HttpsConnector, SdkBody>,
    /// The endpoint's `max_answer_bytes` (`usize::MAX`: none).
    max_answer: usize,
}

impl SdkHttpClient {
    pub fn new(endpoint: &Endpoint) -> Result<SdkHttpClient, S3Error> {
        Ok(SdkHttpClient {
            client: client(endpoint)?,
            max_answer: endpoint.max_answer_bytes.unwrap_or(usize::MAX),
        })
    }
}

impl HttpClient for SdkHttpClient {
    fn http_connector(
        &self,
        _settings: &HttpConnectorSettings,
        _components: &RuntimeComponents,
    ) -> SharedHttpConnector {
        SharedHttpConnector::new(self.clone())
    }
}

impl HttpConnector for SdkHttpClient {
    fn call(&self, request: HttpRequest) -> HttpConnectorFuture {
        let client = self.client.clone();
        let max_answer = self.max_answer;
        HttpConnectorFuture::new(async move {
            let request = request
                .try_into_http1x()
                .map_err(|e| ConnectorError::other(e.into(), None))?;
            // Every failure here is the transport's: retryable like any I/O error.
            let response = client
                .request(request)
                .await
                .map_err(|e| ConnectorError::io(e.into()))?;
            // Every SDK call's answer, read by the SDK or by our caller, ends
            // in an error past the cap instead of growing without end.
            let response = response.map(|body| SdkBody::from_body_1_x(Limited::new(body, max_answer)));
            aws_smithy_runtime_api::http::Response::try_from(response)
                .map_err(|e| ConnectorError::other(e.into(), None))
        })
    }
}
