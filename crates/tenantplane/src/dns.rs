//! `tenantplane dns`: one TenantCluster's DNS server, fed by watches on the host
//! API server (see the `tenantplane-dns` crate).

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;
use tenantplane_core::dns::{DEFAULT_CLUSTER_DOMAIN, DnsTenant};
use tenantplane_core::transform::TenantTarget;
use tenantplane_dns::{DnsSettings, Listeners, feed_index, serve, shared_index};
use tokio::signal::unix::{SignalKind, signal};

use crate::logging::{self, LogFormat};

#[derive(Debug, clap::Args)]
pub struct DnsArgs {
    /// Kubeconfig of the host cluster (default: KUBECONFIG, then in-cluster).
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// The TenantCluster whose names to serve, as HOST-NAMESPACE/NAME.
    #[arg(long, value_name = "NS/NAME")]
    pub tenant_cluster: String,
    /// Address to listen on, UDP and TCP (0.0.0.0:53 inside a cluster).
    #[arg(long, default_value = "127.0.0.1:5353")]
    pub listen: SocketAddr,
    /// The tenant's cluster domain.
    #[arg(long, default_value = DEFAULT_CLUSTER_DOMAIN)]
    pub cluster_domain: String,
    /// Resolver for every name outside the cluster domain (default: the first
    /// nameserver of /etc/resolv.conf, port 53).
    #[arg(long, value_name = "IP:PORT")]
    pub upstream: Option<SocketAddr>,
    /// Log lines as text or as JSON objects.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
}

/// `NS/NAME`, both checked as Kubernetes names.
fn tenant_of(arg: &str) -> anyhow::Result<DnsTenant> {
    let (namespace, name) = arg
        .split_once('/')
        .with_context(|| format!("--tenant-cluster {arg:?} is not NAMESPACE/NAME"))?;
    let target =
        TenantTarget::new(name, namespace).with_context(|| format!("--tenant-cluster {arg:?}"))?;
    Ok(DnsTenant {
        host_namespace: target.host_namespace,
        tenant: target.tenant,
    })
}

fn default_upstream() -> anyhow::Result<SocketAddr> {
    let text = std::fs::read_to_string("/etc/resolv.conf")
        .context("reading /etc/resolv.conf for an upstream (or set --upstream)")?;
    tenantplane_dns::upstream_from_resolv_conf(&text)
        .context("/etc/resolv.conf names no nameserver (set --upstream)")
}

/// Serves until SIGTERM or SIGINT. Logs go to stderr (`RUST_LOG`, default `info`).
pub fn run(args: DnsArgs) -> anyhow::Result<()> {
    // hickory logs every request at info.
    logging::init(args.log_format, "info,hickory_server=warn")?;
    let tenant = tenant_of(&args.tenant_cluster)?;
    let upstream = match args.upstream {
        Some(upstream) => upstream,
        None => default_upstream()?,
    };
    let domain = tenantplane_core::dns::normalize(&args.cluster_domain);
    if domain.is_empty() || domain.split('.').any(|l| l.is_empty() || l.len() > 63) {
        anyhow::bail!(
            "--cluster-domain {:?} is not a domain name",
            args.cluster_domain
        );
    }
    let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    runtime.block_on(async {
        let mut terminate = signal(SignalKind::terminate()).context("handling SIGTERM")?;
        let mut interrupt = signal(SignalKind::interrupt()).context("handling SIGINT")?;
        let client = crate::kube_client::connect(args.kubeconfig.as_deref()).await?;
        let listeners = Listeners::bind(args.listen).await?;
        let index = shared_index(tenant.clone());
        let settings = DnsSettings {
            cluster_domain: domain.clone(),
            upstream,
        };
        tracing::info!(
            listen = %listeners.local_addr().unwrap_or(args.listen),
            namespace = %tenant.host_namespace,
            tenant = %tenant.tenant,
            domain = %domain,
            %upstream,
            "serving DNS"
        );
        tokio::select! {
            result = feed_index(client, index.clone()) => result.context("watching the host")?,
            result = serve(index, settings, listeners) => result?,
            _ = terminate.recv() => tracing::info!("SIGTERM: shutting down"),
            _ = interrupt.recv() => tracing::info!("SIGINT: shutting down"),
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tenant_cluster_argument() {
        let t = tenant_of("team-a/dev").unwrap();
        assert_eq!(
            (t.host_namespace.as_str(), t.tenant.as_str()),
            ("team-a", "dev")
        );
        for bad in ["dev", "/dev", "team-a/", "Team/dev", "a/b/c"] {
            assert!(tenant_of(bad).is_err(), "{bad}");
        }
    }
}
