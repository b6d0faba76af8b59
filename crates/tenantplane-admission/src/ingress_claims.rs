//! Two Tenants never serve the same Ingress host name.
//!
//! Each host an Ingress in a tenant namespace adds is checked twice:
//! 1. against a watch-fed index of every Ingress in the cluster: another tenant's
//!    Ingress that already serves the host refuses the write (this covers Ingresses
//!    that existed before claims did);
//! 2. by a create-if-absent claim: a `coordination.k8s.io/v1` Lease
//!    `ingress-host-<hash>` in the webhook's namespace, holder the tenant's name.
//!    Of two concurrent creations for one host, one creates the Lease and the other
//!    gets 409 Conflict and is refused (unless the holder is its own tenant), so
//!    exactly one tenant wins however the requests interleave.
//!
//! A claim outlives its Ingresses. It is stale when it is older than
//! [`CLAIM_GRACE`] (longer than any admission in flight, so an Ingress being
//! admitted with it is in the index by then) and no Ingress of the holder's
//! namespaces serves the host any more; the webhook deletes a stale claim (with a
//! UID and resourceVersion precondition, so only the claim it judged) when another
//! tenant next asks for the host, and takes it. Claims nobody contests stay, one
//! small Lease per host ever used.
//!
//! A dry run only checks (no claim is written).

use std::collections::BTreeSet;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::networking::v1::Ingress;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{DeleteParams, PostParams, Preconditions};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use serde_json::Value;
use tenantplane_core::metadata::{LABEL_MANAGED_BY, MANAGED_BY_VALUE};
use tenantplane_core::policy_rules::{ingress_claim_name, ingress_hosts};

use crate::answer::Refusal;

/// How long a fresh claim is honoured without looking for its Ingresses.
pub const CLAIM_GRACE: Duration = Duration::from_secs(30);
/// The annotation on a claim that names its host (the Lease name is a hash).
pub const HOST_ANNOTATION: &str = "tenantplane.io/ingress-host";
/// The namespace claims go to when none is configured: tenantplane's own.
pub const DEFAULT_CLAIMS_NAMESPACE: &str = "tenantplane-system";
/// How long a request waits for the index's first list.
const INDEX_WAIT: Duration = Duration::from_secs(5);
/// Create, conflict, delete-stale rounds before giving up.
const MAX_ATTEMPTS: usize = 5;

/// The claims and the index they are judged with.
#[derive(Clone)]
pub struct IngressClaims {
    client: Client,
    namespace: String,
    /// The index, and whether it holds its first list: a watch channel, since
    /// kube's `Store::wait_until_ready` wakes only one of several requests waiting
    /// at once (the others would time out and be refused).
    index: Option<(Store<Ingress>, tokio::sync::watch::Receiver<bool>)>,
}

impl IngressClaims {
    /// Claims in `namespace`, with an index fed by a watch of every Ingress (started
    /// on the current Tokio runtime; without one, host claims are refused).
    pub fn start(client: Client, namespace: String) -> Self {
        let index = tokio::runtime::Handle::try_current().ok().map(|runtime| {
            let (reader, writer) = reflector::store::<Ingress>();
            let stream = reflector::reflector(
                writer,
                watcher(
                    Api::<Ingress>::all(client.clone()),
                    watcher::Config::default(),
                )
                .default_backoff(),
            );
            runtime.spawn(async move {
                stream
                    .for_each(|event| async move {
                        if let Err(err) = event {
                            tracing::warn!(error = %err, "Ingress index watch failed; retrying");
                        }
                    })
                    .await;
            });
            let (ready_tx, ready_rx) = tokio::sync::watch::channel(false);
            let store = reader.clone();
            runtime.spawn(async move {
                if store.wait_until_ready().await.is_ok() {
                    let _ = ready_tx.send(true);
                }
            });
            (reader, ready_rx)
        });
        Self {
            client,
            namespace,
            index,
        }
    }

    /// Claims for `tenant` every host `new` names that `old` did not, or refuses.
    pub(crate) async fn claim(
        &self,
        tenant: &str,
        ingress: (&str, &str),
        new: &Value,
        old: Option<&Value>,
        dry_run: bool,
    ) -> Result<(), Refusal> {
        let before: BTreeSet<String> = old
            .map(ingress_hosts)
            .unwrap_or_default()
            .into_iter()
            .map(|(_, host)| normalise(&host))
            .collect();
        let added: BTreeSet<String> = ingress_hosts(new)
            .into_iter()
            .map(|(_, host)| normalise(&host))
            .filter(|host| !before.contains(host))
            .collect();
        if added.is_empty() {
            return Ok(());
        }
        let index = self.ready_index().await?;
        for host in added {
            // Another tenant's Ingress already serving the host (whether or not it
            // has a claim) refuses the write.
            for (namespace, name) in serving(&index, &host) {
                if (namespace.as_str(), name.as_str()) == ingress {
                    continue;
                }
                let other = crate::tenant_resources::member_tenant(&self.client, &namespace)
                    .await?
                    .and_then(|t| t.metadata.name);
                if other.as_deref().is_some_and(|other| other != tenant) {
                    return Err(taken(&host));
                }
            }
            self.claim_host(tenant, &host, &index, dry_run).await?;
        }
        Ok(())
    }

    async fn ready_index(&self) -> Result<Store<Ingress>, Refusal> {
        let index = self.index.clone().ok_or_else(|| {
            Refusal::internal(
                "the Ingress host index is not running: retry once the webhook has started",
            )
        })?;
        let (index, mut ready) = index;
        match tokio::time::timeout(INDEX_WAIT, ready.wait_for(|ready| *ready)).await {
            Ok(Ok(_)) => Ok(index),
            _ => Err(Refusal::internal(
                "the Ingress host index has not finished its first list: retry",
            )),
        }
    }

    async fn claim_host(
        &self,
        tenant: &str,
        host: &str,
        index: &Store<Ingress>,
        dry_run: bool,
    ) -> Result<(), Refusal> {
        let leases: Api<Lease> = Api::namespaced(self.client.clone(), &self.namespace);
        let name = ingress_claim_name(host);
        for _ in 0..MAX_ATTEMPTS {
            if !dry_run {
                match leases
                    .create(&PostParams::default(), &claim(&name, host, tenant))
                    .await
                {
                    Ok(_) => return Ok(()),
                    Err(kube::Error::Api(status)) if status.code == 409 => {}
                    Err(err) => {
                        return Err(Refusal::internal(format!(
                            "cannot claim Ingress host {host:?}: {err}"
                        )));
                    }
                }
            }
            let existing = leases.get_opt(&name).await.map_err(|err| {
                Refusal::internal(format!(
                    "cannot read the claim of Ingress host {host:?}: {err}"
                ))
            })?;
            let Some(existing) = existing else {
                if dry_run {
                    return Ok(());
                }
                continue; // Deleted meanwhile: create again.
            };
            let spec = existing.spec.clone().unwrap_or_default();
            let holder = spec.holder_identity.as_deref().unwrap_or_default();
            if holder == tenant {
                return Ok(());
            }
            if !self.stale(&spec, holder, host, index).await? {
                return Err(taken(host));
            }
            if dry_run {
                return Ok(());
            }
            tracing::info!(
                host,
                holder,
                claimant = tenant,
                "removing a stale Ingress host claim"
            );
            let preconditions = Preconditions {
                uid: existing.metadata.uid.clone(),
                resource_version: existing.metadata.resource_version.clone(),
            };
            let params = DeleteParams {
                preconditions: Some(preconditions),
                ..DeleteParams::default()
            };
            match leases.delete(&name, &params).await {
                Ok(_) => {}
                // Gone or changed meanwhile: judge again.
                Err(kube::Error::Api(status)) if matches!(status.code, 404 | 409) => {}
                Err(err) => {
                    return Err(Refusal::internal(format!(
                        "cannot remove the stale claim of Ingress host {host:?}: {err}"
                    )));
                }
            }
        }
        Err(Refusal::internal(format!(
            "could not claim Ingress host {host:?} after {MAX_ATTEMPTS} conflicting attempts: try again"
        )))
    }

    /// A claim is stale once it is older than [`CLAIM_GRACE`] and no Ingress of the
    /// holder serves the host.
    async fn stale(
        &self,
        spec: &LeaseSpec,
        holder: &str,
        host: &str,
        index: &Store<Ingress>,
    ) -> Result<bool, Refusal> {
        let taken_at = spec
            .renew_time
            .as_ref()
            .or(spec.acquire_time.as_ref())
            .map(|t| t.0);
        let grace = k8s_openapi::jiff::SignedDuration::try_from(CLAIM_GRACE).unwrap_or_default();
        let fresh = taken_at.is_none_or(|at| Timestamp::now().duration_since(at) < grace);
        if fresh {
            return Ok(false);
        }
        for (namespace, _) in serving(index, host) {
            let owner = crate::tenant_resources::member_tenant(&self.client, &namespace)
                .await?
                .and_then(|t| t.metadata.name);
            if owner.as_deref() == Some(holder) {
                return Ok(false);
            }
        }
        Ok(true)
    }
}

fn normalise(host: &str) -> String {
    host.strip_suffix('.').unwrap_or(host).to_ascii_lowercase()
}

fn taken(host: &str) -> Refusal {
    Refusal::forbidden(format!(
        "Ingress host {host:?} is already served by another tenant: two tenants never share a host name"
    ))
}

/// `(namespace, name)` of every indexed Ingress that names `host`.
fn serving(index: &Store<Ingress>, host: &str) -> Vec<(String, String)> {
    index
        .state()
        .iter()
        .filter(|ingress| {
            serde_json::to_value(ingress.as_ref())
                .map(|value| {
                    ingress_hosts(&value)
                        .iter()
                        .any(|(_, h)| normalise(h) == host)
                })
                .unwrap_or(false)
        })
        .map(|ingress| {
            (
                ingress.metadata.namespace.clone().unwrap_or_default(),
                ingress.metadata.name.clone().unwrap_or_default(),
            )
        })
        .collect()
}

fn claim(name: &str, host: &str, tenant: &str) -> Lease {
    let now = MicroTime(Timestamp::now());
    Lease {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            labels: Some([(LABEL_MANAGED_BY.to_owned(), MANAGED_BY_VALUE.to_owned())].into()),
            annotations: Some([(HOST_ANNOTATION.to_owned(), host.to_owned())].into()),
            ..ObjectMeta::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(tenant.to_owned()),
            acquire_time: Some(now.clone()),
            renew_time: Some(now),
            ..LeaseSpec::default()
        }),
    }
}
