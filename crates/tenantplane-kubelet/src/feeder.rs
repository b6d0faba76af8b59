//! Keeps the [`SharedRegistry`] current: for each TenantCluster, the client
//! certificate its tenant API server presents, read from a Secret in the
//! TenantCluster's namespace (key `tls.crt`; only the certificate is read):
//! `spec.controlPlane.external.kubeletClientCertificateSecretRef` for an external
//! control plane, `<tc>-kubelet-client` for a provisioned one. Rebuilt on every
//! TenantCluster change and every [`RESYNC`] (Secrets change without one).

use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use kube::runtime::watcher;
use kube::{Api, Client, ResourceExt};
use tenantplane_api::TenantCluster;
use tokio_util::sync::CancellationToken;

use crate::registry::{KubeletRegistry, SharedRegistry, TenantClusterKey, fingerprint_pem};
use crate::{CLIENT_CERT_KEY, provisioned_client_secret};

/// How often the registry is rebuilt without a TenantCluster change.
pub const RESYNC: Duration = Duration::from_secs(10);

/// The Secret holding the kubelet client certificate of this TenantCluster.
pub fn client_secret_name(tc: &TenantCluster) -> String {
    match &tc.spec.control_plane.external {
        Some(external) => external
            .kubelet_client_certificate_secret_ref
            .as_ref()
            .map(|r| r.name.clone())
            .unwrap_or_default(),
        None => provisioned_client_secret(&tc.name_any()),
    }
}

/// The registry from the TenantClusters and Secrets on the host, now.
pub async fn build(host: &Client) -> Result<KubeletRegistry, kube::Error> {
    let tcs: Api<TenantCluster> = Api::all(host.clone());
    let mut entries = Vec::new();
    for tc in tcs.list(&Default::default()).await? {
        let Some(namespace) = tc.namespace() else {
            continue;
        };
        if tc.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let secret_name = client_secret_name(&tc);
        if secret_name.is_empty() {
            continue;
        }
        let secrets: Api<Secret> = Api::namespaced(host.clone(), &namespace);
        let Some(secret) = secrets.get_opt(&secret_name).await? else {
            continue;
        };
        let key = TenantClusterKey::new(namespace.clone(), tc.name_any());
        let Some(cert) = secret.data.as_ref().and_then(|d| d.get(CLIENT_CERT_KEY)) else {
            tracing::warn!(tenant = %key, secret = %secret_name, "the kubelet client Secret has no {CLIENT_CERT_KEY}");
            continue;
        };
        match fingerprint_pem(&cert.0) {
            Ok(fingerprint) => entries.push((fingerprint, key)),
            Err(err) => {
                tracing::warn!(tenant = %key, secret = %secret_name, error = %err, "the kubelet client certificate is unusable");
            }
        }
    }
    let (registry, conflicts) = KubeletRegistry::from_entries(entries);
    for conflict in conflicts {
        let tenants: Vec<String> = conflict.tenants.iter().map(ToString::to_string).collect();
        tracing::warn!(
            fingerprint = %conflict.fingerprint,
            tenants = %tenants.join(", "),
            "several TenantClusters name the same kubelet client certificate: it is refused for all of them"
        );
    }
    Ok(registry)
}

/// Rebuilds `registry` until `shutdown` fires.
pub async fn run(host: Client, registry: SharedRegistry, shutdown: CancellationToken) {
    let tcs: Api<TenantCluster> = Api::all(host.clone());
    let mut changes = watcher(tcs, watcher::Config::default()).boxed();
    let mut resync = tokio::time::interval(RESYNC);
    resync.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = resync.tick() => {}
            event = changes.next() => match event {
                Some(Ok(_)) => {}
                Some(Err(err)) => {
                    tracing::debug!(error = %err, "TenantCluster watch failed; it retries");
                    tokio::select! {
                        () = shutdown.cancelled() => return,
                        _ = resync.tick() => {}
                    }
                }
                None => return,
            },
        }
        match build(&host).await {
            Ok(built) => registry.replace(built),
            Err(err) => {
                tracing::warn!(error = %err, "could not rebuild the kubelet registry; keeping the last one")
            }
        }
    }
}
