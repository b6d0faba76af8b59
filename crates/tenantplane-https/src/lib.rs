//! HTTPS serving shared by tenantplane's two servers, the admission webhook and the
//! kubelet endpoint: one rustls (ring) configuration builder, a certificate that is
//! re-read when its files rotate (cert-manager renews behind a running server), and
//! one accept loop that shuts down gracefully. Each server brings its own routes and,
//! for the kubelet endpoint, its client-certificate verifier.

pub mod serve;
pub mod tls;

pub use serve::{serve, serve_router};
pub use tls::{
    ClientAuth, RELOAD_CHECK, ReloadingCertificate, TlsError, certified_key, provider,
    server_config, server_config_from_pem,
};
