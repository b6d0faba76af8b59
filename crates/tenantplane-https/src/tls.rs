//! rustls server configurations (ring, TLS 1.2 and 1.3, HTTP/1.1) and a serving
//! certificate that, when it comes from files, is re-read when the files change.

use std::path::{Path, PathBuf};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::{Duration, Instant};

use rustls::ServerConfig;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::danger::ClientCertVerifier;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::{CertifiedKey, SingleCertAndKey};

/// How often, at most, a handshake checks the files for a new certificate.
pub const RELOAD_CHECK: Duration = Duration::from_secs(1);

/// Why a serving certificate or a TLS configuration could not be had. Each message
/// leaves its cause to `source()`, so `{:#}` prints the chain once.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("could not read {}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("invalid PEM {what}")]
    Pem {
        what: &'static str,
        #[source]
        source: rustls::pki_types::pem::Error,
    },
    #[error("the certificate file holds no PEM certificate")]
    NoCertificate,
    #[error("TLS configuration refused")]
    Tls(#[source] rustls::Error),
}

/// The provider is explicit, so a config never depends on a process default.
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The certificate chain, then the private key (PKCS#8, PKCS#1 or SEC1), as a
/// signing key whose public half matches the certificate.
pub fn certified_key(
    cert_pem: &[u8],
    key_pem: &[u8],
    provider: &CryptoProvider,
) -> Result<CertifiedKey, TlsError> {
    let certs = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|source| TlsError::Pem {
            what: "certificate",
            source,
        })?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate);
    }
    let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|source| TlsError::Pem {
        what: "private key",
        source,
    })?;
    // Also checks that the key is the certificate's.
    CertifiedKey::from_der(certs, key, provider).map_err(TlsError::Tls)
}

/// Who must present a client certificate.
pub enum ClientAuth {
    /// Nobody (the webhook: the API server authenticates the server, not itself).
    None,
    /// Every caller, checked by this verifier (the kubelet endpoint).
    Required(Arc<dyn ClientCertVerifier>),
}

/// A server configuration for `provider` serving the certificate `resolver` picks,
/// over HTTP/1.1 (the kubelet's streaming upgrades need it).
pub fn server_config(
    provider: Arc<CryptoProvider>,
    resolver: Arc<dyn ResolvesServerCert>,
    client_auth: ClientAuth,
) -> Result<Arc<ServerConfig>, TlsError> {
    let builder = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(TlsError::Tls)?;
    let builder = match client_auth {
        ClientAuth::None => builder.with_no_client_auth(),
        ClientAuth::Required(verifier) => builder.with_client_cert_verifier(verifier),
    };
    let mut config = builder.with_cert_resolver(resolver);
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// [`server_config`] serving the certificate and key given as PEM text.
pub fn server_config_from_pem(
    cert_pem: &[u8],
    key_pem: &[u8],
    client_auth: impl FnOnce(&CryptoProvider) -> ClientAuth,
) -> Result<Arc<ServerConfig>, TlsError> {
    let provider = provider();
    let key = certified_key(cert_pem, key_pem, &provider)?;
    let client_auth = client_auth(&provider);
    server_config(provider, Arc::new(SingleCertAndKey::from(key)), client_auth)
}

fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        path: path.to_owned(),
        source,
    })
}

/// What was last loaded, and when the files were last looked at.
struct Loaded {
    key: Arc<CertifiedKey>,
    cert_pem: Vec<u8>,
    key_pem: Vec<u8>,
    checked: Instant,
}

/// The certificate in two files. A handshake looks at the files at most once per
/// [`RELOAD_CHECK`] and, when their content changed, serves the new pair from then
/// on. A pair that cannot be read or used (half written, key not matching) keeps
/// the last good certificate and is logged; it is tried again at the next check.
pub struct ReloadingCertificate {
    cert: PathBuf,
    key: PathBuf,
    provider: Arc<CryptoProvider>,
    loaded: RwLock<Loaded>,
}

impl std::fmt::Debug for ReloadingCertificate {
    // Never the key material.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReloadingCertificate")
            .field("cert", &self.cert)
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

impl ReloadingCertificate {
    /// Fails when the files do not hold a usable certificate now.
    pub fn load(cert: &Path, key: &Path, provider: Arc<CryptoProvider>) -> Result<Self, TlsError> {
        let (cert_pem, key_pem) = (read(cert)?, read(key)?);
        let certified = certified_key(&cert_pem, &key_pem, &provider)?;
        Ok(Self {
            cert: cert.to_owned(),
            key: key.to_owned(),
            provider,
            loaded: RwLock::new(Loaded {
                key: Arc::new(certified),
                cert_pem,
                key_pem,
                checked: Instant::now(),
            }),
        })
    }

    /// Re-reads the files if the last look is older than [`RELOAD_CHECK`].
    fn refresh(&self) {
        let now = Instant::now();
        {
            let loaded = self.loaded.read().unwrap_or_else(PoisonError::into_inner);
            if now.duration_since(loaded.checked) < RELOAD_CHECK {
                return;
            }
        }
        let mut loaded = self.loaded.write().unwrap_or_else(PoisonError::into_inner);
        if now.duration_since(loaded.checked) < RELOAD_CHECK {
            return; // another handshake looked meanwhile
        }
        loaded.checked = now;
        let files = read(&self.cert).and_then(|c| Ok((c, read(&self.key)?)));
        let (cert_pem, key_pem) = match files {
            Ok(files) => files,
            Err(err) => {
                tracing::warn!(error = %err, "cannot read the serving certificate; still serving the last one");
                return;
            }
        };
        if cert_pem == loaded.cert_pem && key_pem == loaded.key_pem {
            return;
        }
        match certified_key(&cert_pem, &key_pem, &self.provider) {
            Ok(certified) => {
                loaded.key = Arc::new(certified);
                loaded.cert_pem = cert_pem;
                loaded.key_pem = key_pem;
                tracing::info!(cert = %self.cert.display(), "serving the rotated certificate");
            }
            Err(err) => {
                tracing::warn!(cert = %self.cert.display(), error = %err,
                    "the new certificate files are not usable (yet); still serving the last one");
            }
        }
    }
}

impl ResolvesServerCert for ReloadingCertificate {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.refresh();
        let loaded = self.loaded.read().unwrap_or_else(PoisonError::into_inner);
        Some(Arc::clone(&loaded.key))
    }
}
