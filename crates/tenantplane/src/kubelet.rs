//! The kubelet endpoint of `tenantplane controller` and `tenantplane up`: one
//! HTTPS server for every TenantCluster (see the tenantplane-kubelet crate).

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;
use kube::Client;
use tenantplane_engine::decisions::DecisionRoutes;
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
    let serving = match tls {
        Some((cert, key)) => ServingCert::from_files(&cert, &key)?,
        None => ServingCert::generate(std::slice::from_ref(&advertise_address))?,
    };
    let config = tenantplane_kubelet::server_config(&serving)?;
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
