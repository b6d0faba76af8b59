//! TLS for the kubelet endpoint: a serving certificate (given, or generated at
//! start), and a client certificate REQUIRED from every caller. Any chain is
//! accepted at the TLS layer, but the caller must prove it holds the certificate's
//! private key (the handshake signature is verified); who it is, is decided
//! afterwards from the leaf certificate's fingerprint (see [`crate::registry`]).

use std::sync::Arc;

use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::{CertificateDer, UnixTime};
use rustls::server::ResolvesServerCert;
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{DigitallySignedStruct, DistinguishedName, ServerConfig, SignatureScheme};
use tenantplane_https::ClientAuth;

/// Why the TLS configuration could not be built.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error(transparent)]
    Config(#[from] tenantplane_https::TlsError),
    #[error("could not generate a serving certificate: {0}")]
    Generate(#[from] rcgen::Error),
}

/// Accepts any client certificate chain whose leaf signed the handshake.
#[derive(Debug)]
pub struct AnyClientCert {
    algorithms: WebPkiSupportedAlgorithms,
}

impl AnyClientCert {
    pub fn new(provider: &CryptoProvider) -> Self {
        Self {
            algorithms: provider.signature_verification_algorithms,
        }
    }
}

impl ClientCertVerifier for AnyClientCert {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        true
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        // Identity is the fingerprint, looked up per request; the signature checks
        // below prove the caller holds the key.
        Ok(ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

/// A PEM certificate chain and key.
#[derive(Clone)]
pub struct ServingCert {
    pub cert_pem: String,
    pub key_pem: String,
}

impl std::fmt::Debug for ServingCert {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServingCert").finish_non_exhaustive()
    }
}

impl ServingCert {
    /// A self-signed certificate for these names and addresses (the kube-apiserver
    /// does not verify kubelet serving certificates unless it is given
    /// `--kubelet-certificate-authority`).
    pub fn generate(sans: &[String]) -> Result<Self, TlsError> {
        let mut names = vec!["localhost".to_owned(), "127.0.0.1".to_owned()];
        for san in sans {
            if !names.contains(san) {
                names.push(san.clone());
            }
        }
        let generated = rcgen::generate_simple_self_signed(names)?;
        Ok(Self {
            cert_pem: generated.cert.pem(),
            key_pem: generated.signing_key.serialize_pem(),
        })
    }
}

/// The server configuration: ring, TLS 1.2 and 1.3, HTTP/1.1 (upgrades need it),
/// a client certificate required from every caller.
pub fn server_config(serving: &ServingCert) -> Result<Arc<ServerConfig>, TlsError> {
    Ok(tenantplane_https::server_config_from_pem(
        serving.cert_pem.as_bytes(),
        serving.key_pem.as_bytes(),
        |provider| ClientAuth::Required(Arc::new(AnyClientCert::new(provider))),
    )?)
}

/// [`server_config`] with the serving certificate chosen by `resolver` (such as
/// one that picks up rotated certificate files), made for `provider`.
pub fn server_config_with(
    provider: Arc<CryptoProvider>,
    resolver: Arc<dyn ResolvesServerCert>,
) -> Result<Arc<ServerConfig>, TlsError> {
    let verifier = Arc::new(AnyClientCert::new(&provider));
    Ok(tenantplane_https::server_config(
        provider,
        resolver,
        ClientAuth::Required(verifier),
    )?)
}
