//! The namespace provisioner guard: owners may create namespaces only while the
//! namespace webhook answers.
//!
//! Every probe interval it probes the namespace webhook's `GET /healthz` over TLS,
//! at the address and with the CA of the `namespaces.tenantplane.io` webhook in
//! the MutatingWebhookConfiguration, and keeps the ClusterRoleBinding
//! `tenantplane-namespace-provisioner` with every Tenant owner as subject while it
//! answers and none otherwise (decisions in `tenantplane_core::provisioner`). A
//! namespace without the tenant label goes to a webhook with `failurePolicy:
//! Ignore`, so without this guard an owner's creation would pass unchecked (no
//! tenant, no quota) while the webhook is down.

use std::sync::Arc;
use std::time::Duration;

use futures::{FutureExt, StreamExt};
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::rbac::v1::{ClusterRoleBinding, Subject};
use kube::api::PostParams;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use tenantplane_api::Tenant;
use tenantplane_core::provisioner::{
    BindingAction, PROVISIONER_NAME, Probe, ProbeTarget, WebhookHealth, desired_subjects,
    owner_subjects, plan_binding, probe_target,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_util::sync::CancellationToken;

use crate::metrics::Metrics;

/// The webhook whose client config is probed (the namespace webhooks share one server).
pub const PROBED_WEBHOOK: &str = "namespaces.tenantplane.io";
/// The configuration `tenantplane render webhookconfiguration --namespaces` names.
pub const DEFAULT_CONFIGURATION: &str = "tenantplane-namespaces";
/// How often the webhook is probed by default.
pub const DEFAULT_PROBE_INTERVAL: Duration = Duration::from_secs(2);
/// A status line is short; anything longer is not our server.
const MAX_STATUS_LINE: usize = 256;

/// What the guard is run with.
pub struct ProvisionerConfig {
    pub host: Client,
    pub metrics: Arc<Metrics>,
    /// The MutatingWebhookConfiguration holding [`PROBED_WEBHOOK`].
    pub webhook_configuration: String,
    pub probe_interval: Duration,
}

/// Why a probe failed.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error("reading the webhook configuration {name}: {source}")]
    Configuration {
        name: String,
        #[source]
        source: Box<kube::Error>,
    },
    #[error(transparent)]
    Target(#[from] tenantplane_core::provisioner::ProbeTargetError),
    #[error("the caBundle holds no usable certificate: {0}")]
    CaBundle(String),
    #[error("{host} is not a valid TLS server name")]
    ServerName { host: String },
    #[error("TLS setup: {0}")]
    Tls(#[from] rustls::Error),
    #[error("{what} {host}:{port}: {source}")]
    Io {
        what: &'static str,
        host: String,
        port: u16,
        #[source]
        source: std::io::Error,
    },
    #[error("no answer from {host}:{port} within {timeout:?}")]
    Timeout {
        host: String,
        port: u16,
        timeout: Duration,
    },
    #[error("GET /healthz answered {status:?}")]
    Status { status: String },
}

/// Runs the guard until `shutdown` fires.
pub async fn run(config: ProvisionerConfig, shutdown: CancellationToken) {
    let (tenants, writer) = reflector::store();
    let feed = watcher(
        Api::<Tenant>::all(config.host.clone()),
        watcher::Config::default(),
    )
    .default_backoff()
    .reflect(writer)
    .for_each(|_| futures::future::ready(()));
    tokio::select! {
        () = shutdown.cancelled() => {}
        () = feed => {}
        () = guard(&config, &tenants, &shutdown) => {}
    }
}

async fn guard(config: &ProvisionerConfig, tenants: &Store<Tenant>, shutdown: &CancellationToken) {
    let mut health = WebhookHealth::default();
    config.metrics.namespace_webhook_up.set(0);
    let mut interval = tokio::time::interval(config.probe_interval);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // Logged when they change, not on every tick.
    let mut last_probe: Option<String> = None;
    let mut last_binding_problem: Option<String> = None;
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = interval.tick() => {}
        }
        let timeout = config.probe_interval.min(Duration::from_secs(2));
        let (probe, detail) = match probe(config, timeout).await {
            Ok(()) => (Probe::Answered, "answered".to_owned()),
            Err(None) => (Probe::NotInstalled, "not installed".to_owned()),
            Err(Some(err)) => (Probe::Failed, err.to_string()),
        };
        if last_probe.as_deref() != Some(detail.as_str()) {
            tracing::info!(
                configuration = %config.webhook_configuration,
                webhook = PROBED_WEBHOOK,
                probe = %detail,
                "namespace webhook probe"
            );
            last_probe = Some(detail.clone());
        }
        if let Some(up) = health.observe(probe) {
            config.metrics.namespace_webhook_up.set(i64::from(up));
            if up {
                tracing::info!(
                    configuration = %config.webhook_configuration,
                    up,
                    "the namespace webhook answers: owners may create namespaces again"
                );
            } else {
                tracing::warn!(
                    configuration = %config.webhook_configuration,
                    up,
                    reason = %detail,
                    "the namespace webhook does not answer: owners may not create namespaces until it does"
                );
            }
        }
        // While up, never write owners from a Tenant list not yet complete.
        if health.is_up() && tenants.wait_until_ready().now_or_never().is_none() {
            continue;
        }
        let owners = if health.is_up() {
            let state = tenants.state();
            owner_subjects(state.iter().map(AsRef::as_ref)).0
        } else {
            Vec::new()
        };
        let problem = sync_binding(&config.host, desired_subjects(&health, owners))
            .await
            .err()
            .map(|e| e.to_string());
        if problem != last_binding_problem {
            if let Some(problem) = &problem {
                tracing::warn!(binding = PROVISIONER_NAME, problem = %problem, "provisioner binding");
            }
            last_binding_problem = problem;
        }
    }
}

/// Probes the webhook once: `Err(None)` when its configuration does not exist.
async fn probe(config: &ProvisionerConfig, timeout: Duration) -> Result<(), Option<ProbeError>> {
    let name = &config.webhook_configuration;
    let configuration = Api::<MutatingWebhookConfiguration>::all(config.host.clone())
        .get_opt(name)
        .await
        .map_err(|source| {
            Some(ProbeError::Configuration {
                name: name.clone(),
                source: Box::new(source),
            })
        })?
        .ok_or(None)?;
    let target = probe_target(&configuration, PROBED_WEBHOOK).map_err(|e| Some(e.into()))?;
    probe_healthz(&target, timeout).await.map_err(Some)
}

/// `GET /healthz` at `target` over TLS, trusting only its CA bundle; Ok on 200.
pub async fn probe_healthz(target: &ProbeTarget, timeout: Duration) -> Result<(), ProbeError> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&target.ca_pem) {
        let cert = cert.map_err(|e| ProbeError::CaBundle(e.to_string()))?;
        roots
            .add(cert)
            .map_err(|e| ProbeError::CaBundle(e.to_string()))?;
    }
    if roots.is_empty() {
        return Err(ProbeError::CaBundle("no certificate".into()));
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let server_name =
        ServerName::try_from(target.host.clone()).map_err(|_| ProbeError::ServerName {
            host: target.host.clone(),
        })?;
    let (host, port) = (target.host.as_str(), target.port);
    let io = |what| {
        move |source| ProbeError::Io {
            what,
            host: host.to_owned(),
            port,
            source,
        }
    };
    let exchange = async {
        let tcp = TcpStream::connect((host, port))
            .await
            .map_err(io("connecting to"))?;
        let mut stream = TlsConnector::from(Arc::new(tls))
            .connect(server_name, tcp)
            .await
            .map_err(io("TLS handshake with"))?;
        let authority = if host.contains(':') {
            format!("[{host}]:{port}")
        } else {
            format!("{host}:{port}")
        };
        let request =
            format!("GET /healthz HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\n\r\n");
        stream
            .write_all(request.as_bytes())
            .await
            .map_err(io("writing to"))?;
        let mut status = Vec::new();
        let mut byte = [0u8; 1];
        while status.len() < MAX_STATUS_LINE && !status.ends_with(b"\r\n") {
            if stream.read(&mut byte).await.map_err(io("reading from"))? == 0 {
                break;
            }
            status.push(byte[0]);
        }
        let status = String::from_utf8_lossy(&status).trim_end().to_owned();
        let code = status.split(' ').nth(1);
        if status.starts_with("HTTP/1.") && code == Some("200") {
            Ok(())
        } else {
            Err(ProbeError::Status { status })
        }
    };
    tokio::time::timeout(timeout, exchange)
        .await
        .map_err(|_| ProbeError::Timeout {
            host: host.to_owned(),
            port,
            timeout,
        })?
}

/// Why the binding could not be brought to what the guard wants.
#[derive(Debug, thiserror::Error)]
pub enum BindingError {
    #[error("ClusterRoleBinding {PROVISIONER_NAME} is left alone: {reason}")]
    Foreign { reason: String },
    #[error("{verb} ClusterRoleBinding {PROVISIONER_NAME}: {source}")]
    Api {
        verb: &'static str,
        #[source]
        source: Box<kube::Error>,
    },
}

/// What [`sync_binding`] wrote.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BindingWrite {
    Kept,
    Created,
    Updated,
}

/// Brings the binding to `subjects` (read first, written only when it differs); a
/// binding tenantplane does not own is never touched.
pub async fn sync_binding(
    host: &Client,
    subjects: Vec<Subject>,
) -> Result<BindingWrite, BindingError> {
    let api = Api::<ClusterRoleBinding>::all(host.clone());
    let failed = |verb| {
        move |source| BindingError::Api {
            verb,
            source: Box::new(source),
        }
    };
    let existing = api
        .get_opt(PROVISIONER_NAME)
        .await
        .map_err(failed("reading"))?;
    let count = subjects.len();
    match plan_binding(existing.as_ref(), subjects) {
        BindingAction::Keep => Ok(BindingWrite::Kept),
        BindingAction::Foreign { reason } => Err(BindingError::Foreign { reason }),
        BindingAction::Create(binding) => {
            api.create(&PostParams::default(), &binding)
                .await
                .map_err(failed("creating"))?;
            tracing::info!(
                binding = PROVISIONER_NAME,
                subjects = count,
                "provisioner binding created"
            );
            Ok(BindingWrite::Created)
        }
        BindingAction::Update(binding) => {
            let before = existing
                .as_ref()
                .and_then(|b| b.subjects.as_ref())
                .map_or(0, Vec::len);
            api.replace(PROVISIONER_NAME, &PostParams::default(), &binding)
                .await
                .map_err(failed("updating"))?;
            tracing::info!(
                binding = PROVISIONER_NAME,
                subjects = count,
                previously = before,
                "provisioner binding updated"
            );
            Ok(BindingWrite::Updated)
        }
    }
}
