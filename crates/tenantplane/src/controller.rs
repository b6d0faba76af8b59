//! `tenantplane controller`: the TenantCluster controller and its sync engines and
//! the namespace-tenant (`Tenant`) controller, side by side under one leader
//! election, with `/metrics`, `/healthz` and `/readyz`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tenantplane_core::pods::KubeletEndpoint;

use anyhow::Context;
use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::get;
use prometheus_client::registry::Registry;
use tenantplane_engine::controller::{self, ControllerConfig};
use tenantplane_engine::leader::{LeaseConfig, run_as_leader};
use tenantplane_engine::metrics::Metrics;
use tenantplane_engine::provisioner::{self, ProvisionerConfig};
use tenantplane_engine::shards::ShardConfig;
use tenantplane_engine::tenancy::{self, TenantControllerConfig};
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

use crate::kube_client;
use crate::logging::{self, LogFormat};

#[derive(Debug, clap::Args)]
pub struct ControllerArgs {
    /// Kubeconfig of the host cluster (default: KUBECONFIG, then in-cluster).
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// Address of /metrics, /healthz and /readyz.
    #[arg(long, default_value = "0.0.0.0:8080")]
    pub listen: SocketAddr,
    /// Run only while holding a Lease, so several replicas never both write.
    #[arg(long)]
    pub leader_elect: bool,
    #[arg(long, default_value = "tenantplane-system")]
    pub lease_namespace: String,
    #[arg(long, default_value = "tenantplane-controller")]
    pub lease_name: String,
    /// This replica's name in the Lease (default: POD_NAME, then the host name).
    #[arg(long, env = "POD_NAME")]
    pub identity: Option<String>,
    /// Divide the TenantClusters into this many shards, each a Lease
    /// `<lease-name>-shard-<n>` that one replica holds: every replica syncs the
    /// TenantClusters of the shards it holds, and the shards are rebalanced as
    /// replicas come and go. The Tenant controller, the provisioner guard and the
    /// ResourcePool loop run on the leader only (`--lease-name`). Use the same
    /// number on every replica; more shards than replicas spread them more evenly.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub shards: Option<u32>,
    /// Seconds a replica's Leases (leader and shards) last without renewal: how
    /// long the others wait before taking over from a replica that died.
    #[arg(long, default_value_t = 15, value_parser = clap::value_parser!(u64).range(3..=300))]
    pub lease_duration_secs: u64,
    /// Concurrent host writers per synced kind.
    #[arg(long, default_value_t = 16)]
    pub workers: usize,
    /// Host writes the whole process has in flight at once, across every
    /// TenantCluster (reads and watches are not counted): the host API server
    /// sees a bounded load however many TenantClusters this replica serves.
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u64).range(1..=4096))]
    pub host_writes_in_flight: u64,
    /// Seconds a tenant Pod or dependency being deleted waits for a host API server
    /// that does not answer before its finalizer is released anyway (garbage
    /// collection removes the host copy once the host answers).
    #[arg(long, default_value_t = tenantplane_engine::kind_sync::DEFAULT_HOST_UNREACHABLE_RELEASE.as_secs(),
          value_parser = clap::value_parser!(u64).range(1..))]
    pub host_unreachable_release_secs: u64,
    /// The MutatingWebhookConfiguration of namespace tenancy: its
    /// `namespaces.tenantplane.io` webhook is probed, and owners may create
    /// namespaces (ClusterRoleBinding `tenantplane-namespace-provisioner`) only
    /// while it answers. Missing = not installed = no owner may.
    #[arg(long, default_value = provisioner::DEFAULT_CONFIGURATION)]
    pub namespace_webhook_configuration: String,
    /// Seconds between probes of the namespace webhook (3 failures in a row take
    /// the owners' grant away, one answer gives it back).
    #[arg(long, default_value_t = provisioner::DEFAULT_PROBE_INTERVAL.as_secs(),
          value_parser = clap::value_parser!(u64).range(1..=60))]
    pub provisioner_probe_secs: u64,
    /// The host's service CIDR (its kube-apiserver's --service-cluster-ip-range).
    /// Provisioned tenant API servers allocate from it, so a tenant Service
    /// carries its host copy's ClusterIP.
    #[arg(long, default_value = tenantplane_engine::provision::DEFAULT_SERVICE_CIDR)]
    pub service_cidr: String,
    /// Image of each TenantCluster's DNS server (`tenantplane dns`): this
    /// controller's own image by default.
    #[arg(long, env = "TENANTPLANE_DNS_IMAGE", default_value = concat!("tenantplane:", env!("CARGO_PKG_VERSION")))]
    pub dns_image: String,
    /// URL of tenantplane's webhook server's `/from-host` as provisioned tenant
    /// control planes reach it (such as
    /// `https://tenantplane-webhook.tenantplane-system.svc/from-host`): registered in
    /// each, it refuses the tenant's writes to fromHost copies. Without it they are
    /// only reverted.
    #[arg(long, requires = "tenant_webhook_ca_file")]
    pub tenant_webhook_url: Option<String>,
    /// PEM CA bundle that signed that webhook's serving certificate.
    #[arg(long, requires = "tenant_webhook_url")]
    pub tenant_webhook_ca_file: Option<PathBuf>,
    /// The tenants' cluster domain, served by their DNS servers.
    #[arg(long, default_value = tenantplane_core::dns::DEFAULT_CLUSTER_DOMAIN)]
    pub cluster_domain: String,
    /// Run no DNS server per TenantCluster: host Pods keep the host's DNS.
    #[arg(long)]
    pub no_tenant_dns: bool,
    #[command(flatten)]
    pub kubelet: crate::kubelet::KubeletArgs,
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
}

struct HttpState {
    registry: Registry,
    ready: AtomicBool,
}

/// Runs until SIGTERM or SIGINT.
pub fn run(args: ControllerArgs) -> anyhow::Result<()> {
    logging::init(args.log_format, "info")?;
    let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    runtime.block_on(serve(args))
}

async fn serve(args: ControllerArgs) -> anyhow::Result<()> {
    let shutdown = CancellationToken::new();
    let mut terminate = signal(SignalKind::terminate()).context("handling SIGTERM")?;
    let mut interrupt = signal(SignalKind::interrupt()).context("handling SIGINT")?;
    {
        let shutdown = shutdown.clone();
        tokio::spawn(async move {
            tokio::select! {
                _ = terminate.recv() => tracing::info!("SIGTERM: shutting down"),
                _ = interrupt.recv() => tracing::info!("SIGINT: shutting down"),
            }
            shutdown.cancel();
        });
    }
    let host = tenantplane_engine::write_limit::write_limited_client(
        kube_client::config_with(args.kubeconfig.as_deref(), None).await?,
        usize::try_from(args.host_writes_in_flight).unwrap_or(usize::MAX),
    )
    .context("building the host client")?;
    let version = host
        .apiserver_version()
        .await
        .context("reaching the host API server")?;
    tracing::info!(version = %version.git_version, "connected to the host API server");

    let mut registry = Registry::default();
    let metrics = Arc::new(Metrics::new(&mut registry));
    let state = Arc::new(HttpState {
        registry,
        ready: AtomicBool::new(false),
    });
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("listening on {}", args.listen))?;
    let app = Router::new()
        .route("/metrics", get(metrics_text))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .with_state(Arc::clone(&state));
    let http_shutdown = shutdown.clone();
    let http = tokio::spawn(async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(async move { http_shutdown.cancelled().await })
            .await
    });
    tracing::info!(listen = %args.listen, "serving /metrics, /healthz, /readyz");

    let instance = args
        .identity
        .clone()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "tenantplane".into());
    // The kubelet endpoint's refusals are recorded by the engines' recorders.
    let routes = tenantplane_engine::decisions::DecisionRoutes::new();
    let kubelet = match args.kubelet.kubelet_listen {
        Some(listen) => Some(
            crate::kubelet::start(
                host.clone(),
                listen,
                args.kubelet.kubelet_advertise_address.clone(),
                args.kubelet
                    .kubelet_tls_cert_file
                    .clone()
                    .zip(args.kubelet.kubelet_tls_key_file.clone()),
                routes.clone(),
                shutdown.clone(),
            )
            .await?,
        ),
        None => None,
    };
    // Tenant Nodes advertise the endpoint, so the tenant API servers call it.
    let kubelet_endpoint = kubelet.as_ref().map(|k| KubeletEndpoint {
        address: k.advertise_address.clone(),
        port: k.address.port(),
    });
    let tenant_webhook = match (&args.tenant_webhook_url, &args.tenant_webhook_ca_file) {
        (Some(url), Some(ca_file)) => {
            let ca_bundle = std::fs::read(ca_file).with_context(|| {
                format!("reading --tenant-webhook-ca-file {}", ca_file.display())
            })?;
            Some(
                tenantplane_engine::provision::tenant_webhook::TenantWebhook {
                    url: url.clone(),
                    ca_bundle,
                },
            )
        }
        _ => None,
    };
    // Decisions are logged by the engines; nothing else listens here.
    let (decisions, _) = broadcast::channel(1024);
    let make_config = {
        let (host, metrics, instance, workers) = (
            host.clone(),
            Arc::clone(&metrics),
            instance.clone(),
            args.workers,
        );
        let host_unreachable_release = Duration::from_secs(args.host_unreachable_release_secs);
        let service_cidr = args.service_cidr.clone();
        let tenant_webhook = tenant_webhook.clone();
        let dns = (!args.no_tenant_dns).then(|| tenantplane_engine::tenant_dns::DnsDeployment {
            image: args.dns_image.clone(),
            cluster_domain: tenantplane_core::dns::normalize(&args.cluster_domain),
        });
        let shards = args.shards.map(|count| ShardConfig {
            lease_duration: Duration::from_secs(args.lease_duration_secs),
            ..ShardConfig::new(
                &args.lease_namespace,
                &format!("{}-shard", args.lease_name),
                &instance,
                count,
            )
        });
        move || ControllerConfig {
            shards: shards.clone(),
            namespace: None,
            host: host.clone(),
            metrics: Arc::clone(&metrics),
            decisions: decisions.clone(),
            instance: instance.clone(),
            workers,
            host_unreachable_release,
            service_cidr: service_cidr.clone(),
            dns: dns.clone(),
            kubelet_endpoint: kubelet_endpoint.clone(),
            tenant_webhook: tenant_webhook.clone(),
        }
    };
    let make_tenant_config = {
        let (host, metrics) = (host.clone(), Arc::clone(&metrics));
        move || TenantControllerConfig {
            host: host.clone(),
            metrics: Arc::clone(&metrics),
        }
    };
    let make_provisioner_config = {
        let (host, metrics) = (host.clone(), Arc::clone(&metrics));
        let webhook_configuration = args.namespace_webhook_configuration.clone();
        let probe_interval = Duration::from_secs(args.provisioner_probe_secs);
        move || ProvisionerConfig {
            host: host.clone(),
            metrics: Arc::clone(&metrics),
            webhook_configuration: webhook_configuration.clone(),
            probe_interval,
        }
    };
    let lease = LeaseConfig::new(&args.lease_namespace, &args.lease_name, &instance)
        .with_duration(Duration::from_secs(args.lease_duration_secs));
    // Ready once connected: a standby replica is ready too, it just does not write.
    state.ready.store(true, Ordering::Relaxed);
    if args.shards.is_some() {
        // Every replica syncs its shards' TenantClusters; what is not divided
        // runs on the leader only.
        let pools_host = host.clone();
        let pools_metrics = Arc::clone(&metrics);
        let singletons = move |stop: CancellationToken| {
            let (tenants, guard) = (make_tenant_config(), make_provisioner_config());
            let pools = tenantplane_engine::pools::run(
                pools_host.clone(),
                Arc::clone(&pools_metrics),
                stop.clone(),
            );
            async move {
                tokio::join!(
                    tenancy::run(tenants, stop.clone()),
                    provisioner::run(guard, stop),
                    pools
                );
            }
        };
        tokio::join!(
            controller::run_with_routes(make_config(), routes, shutdown.clone()),
            run_as_leader(host, lease, shutdown.clone(), singletons)
        );
    } else {
        // The controllers and the provisioner guard write only while this replica
        // leads, and stop together.
        let run_both = move |stop: CancellationToken| {
            let (clusters, tenants, guard) = (
                make_config(),
                make_tenant_config(),
                make_provisioner_config(),
            );
            let routes = routes.clone();
            async move {
                tokio::join!(
                    controller::run_with_routes(clusters, routes, stop.clone()),
                    tenancy::run(tenants, stop.clone()),
                    provisioner::run(guard, stop)
                );
            }
        };
        if args.leader_elect {
            run_as_leader(host, lease, shutdown.clone(), run_both).await;
        } else {
            run_both(shutdown.clone()).await;
        }
    }
    shutdown.cancel();
    if let Some(kubelet) = kubelet {
        let _ = kubelet.server.await;
        let _ = kubelet.feeder.await;
    }
    http.await
        .context("the HTTP server task")?
        .context("the HTTP server")?;
    Ok(())
}

async fn metrics_text(State(state): State<Arc<HttpState>>) -> impl IntoResponse {
    let mut text = String::new();
    match prometheus_client::encoding::text::encode(&mut text, &state.registry) {
        Ok(()) => (
            StatusCode::OK,
            [(
                "content-type",
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            text,
        ),
        Err(err) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            [("content-type", "text/plain")],
            format!("encoding metrics: {err}"),
        ),
    }
}

async fn readyz(State(state): State<Arc<HttpState>>) -> impl IntoResponse {
    if state.ready.load(Ordering::Relaxed) {
        (StatusCode::OK, "ok")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "starting")
    }
}
