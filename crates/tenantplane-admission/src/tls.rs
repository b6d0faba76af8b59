//! The webhook's TLS: a rustls server config whose certificate, when it comes from
//! files, is re-read when the files change (cert-manager or a Secret update rotates
//! them behind a running webhook; a restart must not be needed). The mechanics are
//! shared with the kubelet endpoint in `tenantplane-https`.

use std::path::Path;
use std::sync::Arc;

use rustls::ServerConfig;
use tenantplane_https::{ClientAuth, server_config, server_config_from_pem};
pub use tenantplane_https::{RELOAD_CHECK, ReloadingCertificate, provider};

use crate::Error;

/// A server config serving the certificate and key given as PEM text.
pub fn tls_config(cert_pem: &[u8], key_pem: &[u8]) -> Result<Arc<ServerConfig>, Error> {
    server_config_from_pem(cert_pem, key_pem, |_| ClientAuth::None)
}

/// A server config serving the certificate in `cert` and `key`, re-read when their
/// content changes (see [`ReloadingCertificate`]). Fails when they do not hold a
/// usable certificate now.
pub fn tls_config_from_files(cert: &Path, key: &Path) -> Result<Arc<ServerConfig>, Error> {
    let provider = provider();
    let resolver = ReloadingCertificate::load(cert, key, Arc::clone(&provider))?;
    server_config(provider, Arc::new(resolver), ClientAuth::None)
}
