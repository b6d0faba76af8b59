//! `tenantplane webhook`: the validating admission webhook server.

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
        tracing::info!(listen = %addr, "tenantplane webhook serving /validate and /healthz");
        tenantplane_admission::serve(listener, tls, shutdown).await?;
        tracing::info!("tenantplane webhook stopped");
        Ok(())
    })
}
