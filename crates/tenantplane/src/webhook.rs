//! `tenantplane webhook`: the validating admission webhook server, and with
//! `--namespace-tenancy` the namespace tenancy (mutating) admission too; `/metrics`
//! counts requests and denials by path and their latency.

use std::net::SocketAddr;
use std::path::PathBuf;

use crate::logging::{self, LogFormat};
use anyhow::Context;
use tokio::signal::unix::{SignalKind, signal};

#[derive(Debug, clap::Args)]
pub struct WebhookArgs {
    /// Address to listen on (0.0.0.0:8443 inside a cluster).
    #[arg(long, default_value = "127.0.0.1:8443")]
    pub listen: SocketAddr,
    /// PEM certificate chain the API server verifies against the caBundle.
    #[arg(long)]
    pub tls_cert: PathBuf,
    /// PEM private key of the certificate.
    #[arg(long)]
    pub tls_key: PathBuf,
    /// Also serve the namespace tenancy admission: POST /namespaces (Tenant
    /// membership, the race-free namespace quota, no moves between tenants by
    /// non-admins) and POST /tenant-resources (cordon, allowed classes, node
    /// selectors); it reads Tenants and namespaces and writes Tenant status through
    /// the host cluster's API.
    #[arg(long)]
    pub namespace_tenancy: bool,
    /// Kubeconfig of the host cluster for --namespace-tenancy (default:
    /// KUBECONFIG, then in-cluster).
    #[arg(long, requires = "namespace_tenancy")]
    pub kubeconfig: Option<PathBuf>,
    /// A group whose members are admins of namespace tenancy: they may move
    /// namespaces between tenants and write in cordoned tenants (repeatable).
    /// `system:masters`, `system:` users and kube-system service accounts always
    /// are; tenant owners never are.
    #[arg(
        long = "admin-group",
        value_name = "GROUP",
        requires = "namespace_tenancy"
    )]
    pub admin_groups: Vec<String>,
    /// A user who is an admin of namespace tenancy (repeatable); tenantplane's
    /// controller must be one, so giving any replaces the default.
    #[arg(
        long = "admin-user",
        value_name = "USER",
        default_value = tenantplane_admission::namespaces::DEFAULT_CONTROLLER_USER,
        requires = "namespace_tenancy"
    )]
    pub admin_users: Vec<String>,
    /// Log lines as text or as JSON objects.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
}

/// Serves until SIGTERM or SIGINT (Ctrl-C). Logs go to stderr (`RUST_LOG`, default `info`).
pub fn run(args: WebhookArgs) -> anyhow::Result<()> {
    logging::init(args.log_format, "info")?;
    // Checked before anything listens, so a bad file is an error, not a broken server.
    let tls = tenantplane_admission::tls_config_from_files(&args.tls_cert, &args.tls_key)?;
    let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    runtime.block_on(async {
        // Handlers first: a signal that arrives once we log "serving" must be ours.
        let mut terminate = signal(SignalKind::terminate()).context("handling SIGTERM")?;
        let mut interrupt = signal(SignalKind::interrupt()).context("handling SIGINT")?;
        let shutdown = async move {
            tokio::select! {
                _ = terminate.recv() => tracing::info!("SIGTERM: shutting down"),
                _ = interrupt.recv() => tracing::info!("SIGINT: shutting down"),
            }
        };
        let listener = tokio::net::TcpListener::bind(args.listen)
            .await
            .with_context(|| format!("listening on {}", args.listen))?;
        let addr = listener
            .local_addr()
            .context("reading the listening address")?;
        let app = if args.namespace_tenancy {
            let client = crate::kube_client::connect(args.kubeconfig.as_deref()).await?;
            tracing::info!(listen = %addr, admin_groups = ?args.admin_groups, admin_users = ?args.admin_users,
                "tenantplane webhook serving /validate, /namespaces, /tenant-resources, /metrics and /healthz");
            let admins = tenantplane_admission::Admins {
                groups: args.admin_groups,
                users: args.admin_users,
            };
            tenantplane_admission::router_with_tenancy(client, admins)
        } else {
            tracing::info!(listen = %addr, "tenantplane webhook serving /validate, /metrics and /healthz");
            tenantplane_admission::router()
        };
        // Requests and denials by path, latency, and GET /metrics beside the webhooks.
        let app = crate::webhook_metrics::instrument(app);
        tenantplane_admission::serve_router(listener, tls, app, shutdown).await?;
        tracing::info!("tenantplane webhook stopped");
        Ok(())
    })
}
