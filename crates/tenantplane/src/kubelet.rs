//! The kubelet endpoint of `tenantplane controller` and `tenantplane up`: one
//! HTTPS server for every TenantCluster (see the tenantplane-kubelet crate).

use std::net::SocketAddr;
use std::path::PathBuf;

use std::sync::Arc;

use anyhow::Context;
use kube::Client;
use tenantplane_engine::decisions::DecisionRoutes;
use tenantplane_https::ReloadingCertificate;
use tenantplane_kubelet::{KubeletState, ServingCert, SharedRegistry, feeder};
use tokio_util::sync::CancellationToken;

/// The kubelet endpoint's flags.
#[derive(Debug, Clone, clap::Args)]
pub struct KubeletArgs {
    /// Serve the kubelet API for tenant Nodes here (HTTPS; the tenant API servers
    /// call it for `kubectl logs`, `exec` and `attach`). Off when unset.
    #[arg(long)]
    pub kubelet_listen: Option<SocketAddr>,
    /// The address tenant Nodes advertise for the kubelet endpoint: what the tenant
    /// API servers reach (a Service or Pod IP in a cluster, 127.0.0.1 in tests).
    #[arg(long, requires = "kubelet_listen")]
    pub kubelet_advertise_address: Option<String>,
    /// The endpoint's serving certificate (PEM); generated at start when unset.
    #[arg(long, requires_all = ["kubelet_listen", "kubelet_tls_key_file"])]
    pub kubelet_tls_cert_file: Option<PathBuf>,
    #[arg(long, requires_all = ["kubelet_listen", "kubelet_tls_cert_file"])]
    pub kubelet_tls_key_file: Option<PathBuf>,
}

/// A running kubelet endpoint.
pub struct Endpoint {
    pub address: SocketAddr,
    pub advertise_address: String,
    pub server: tokio::task::JoinHandle<()>,
    pub feeder: tokio::task::JoinHandle<()>,
}

/// Binds and starts the endpoint and the registry feeder; both stop on `shutdown`.
pub async fn start(
    host: Client,
    listen: SocketAddr,
    advertise_address: Option<String>,
    tls: Option<(PathBuf, PathBuf)>,
    routes: DecisionRoutes,
    shutdown: CancellationToken,
) -> anyhow::Result<Endpoint> {
    let advertise_address = advertise_address.unwrap_or_else(|| listen.ip().to_string());
    let config = match tls {
        // Files (cert-manager's Secret): a rotated certificate is served without a restart.
        Some((cert, key)) => {
            let provider = tenantplane_https::provider();
            let resolver = ReloadingCertificate::load(&cert, &key, Arc::clone(&provider))
                .with_context(|| {
                    format!("kubelet endpoint: serving certificate {}", cert.display())
                })?;
            tenantplane_kubelet::server_config_with(provider, Arc::new(resolver))?
        }
        None => tenantplane_kubelet::server_config(&ServingCert::generate(std::slice::from_ref(
            &advertise_address,
        ))?)?,
    };
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("kubelet endpoint: listening on {listen}"))?;
    let address = listener.local_addr()?;
    let registry = SharedRegistry::new();
    let app = tenantplane_kubelet::router(KubeletState {
        host: host.clone(),
        registry: registry.clone(),
        decisions: routes,
    });
    let stop = shutdown.clone();
    let server = tokio::spawn(tenantplane_kubelet::serve(
        listener,
        config,
        app,
        async move { stop.cancelled().await },
    ));
    let feeder = tokio::spawn(feeder::run(host, registry.clone(), shutdown));
    tracing::info!(listen = %address, advertise = %advertise_address, "serving the kubelet endpoint");
    Ok(Endpoint {
        address,
        advertise_address,
        server,
        feeder,
    })
}

#[cfg(test)]
mod tests {
    // Tests assert by panicking.
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::time::{Duration, Instant};

    use tenantplane_testenv::{TestCa, TestEnv, tls_handshake};

    use super::*;

    /// The endpoint serves certificate files as they are now: a rotation (another CA)
    /// is picked up without a restart.
    #[tokio::test]
    async fn the_endpoint_serves_a_rotated_certificate_without_a_restart() {
        let env = TestEnv::start().await.expect("etcd");
        let server = env.start_apiserver("host").await.expect("apiserver");
        let host = server.client().await.expect("client");
        let dir = env.root().join("kubelet-tls");
        std::fs::create_dir_all(&dir).unwrap();
        let (cert, key) = (dir.join("tls.crt"), dir.join("tls.key"));
        let first = env.ca().issue(&["127.0.0.1"]).unwrap();
        std::fs::write(&cert, &first.cert_pem).unwrap();
        std::fs::write(&key, &first.key_pem).unwrap();
        let shutdown = CancellationToken::new();
        let endpoint = start(
            host,
            SocketAddr::from(([127, 0, 0, 1], 0)),
            None,
            Some((cert.clone(), key.clone())),
            DecisionRoutes::new(),
            shutdown.clone(),
        )
        .await
        .expect("kubelet endpoint");
        let port = endpoint.address.port();
        assert_eq!(tls_handshake(port, &env.ca().cert_pem()).await, Ok(()));

        let rotated_ca = TestCa::new("rotated").unwrap();
        let second = rotated_ca.issue(&["127.0.0.1"]).unwrap();
        std::fs::write(&key, &second.key_pem).unwrap();
        std::fs::write(&cert, &second.cert_pem).unwrap();
        let start = Instant::now();
        while tls_handshake(port, &rotated_ca.cert_pem()).await.is_err() {
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "the rotated certificate was not served"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(tls_handshake(port, &env.ca().cert_pem()).await.is_err());
        shutdown.cancel();
    }
}
