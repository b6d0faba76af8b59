//! A provisioned tenant control plane: one k3s server per TenantCluster whose
//! `spec.controlPlane.external` is absent, and a kubeconfig Secret for it.
//!
//! # Where it runs
//! In the control-plane namespace `<TenantCluster namespace>-cp`, shared by every
//! TenantCluster of that namespace and labelled `tenantplane.io/control-plane-of:
//! <namespace>` (the label the tenant's default-deny NetworkPolicy exempts). Per
//! TenantCluster `<tc>`: a StatefulSet `<tc>-cp` (one k3s server, agent and add-ons
//! off, SQLite on a PVC from `controlPlane.storage`), a headless Service
//! `<tc>-cp-headless` (the StatefulSet's governing Service), a ClusterIP Service
//! `<tc>-cp` (the in-cluster endpoint `https://<tc>-cp.<ns>-cp.svc:6443`), an optional
//! LoadBalancer Service `<tc>-cp-lb`, and a bootstrap Secret `<tc>-cp-bootstrap`.
//!
//! The control plane lives outside the tenant namespace so that namespace can run at
//! Pod Security `restricted`: the stock k3s image runs as root (UID 0) and writes its
//! data directory as root, which `restricted` forbids (`runAsNonRoot`). The `-cp`
//! namespace enforces **`baseline`**, not `privileged`: with `--disable-agent` there is
//! no kubelet or containerd inside the pod, so it needs no privileged mode, host
//! namespaces or hostPath volumes, and `baseline` keeps those blocked.
//!
//! # Ownership and cleanup
//! Owner references cannot cross namespaces: a namespaced dependent whose owner is
//! not in its own namespace is treated by the garbage collector as having an absent
//! owner and is *deleted*, and a cluster-scoped object (the `-cp` namespace) cannot be
//! owned by a namespaced one at all. So nothing in the `-cp` namespace has an owner
//! reference; it is tenantplane's by labels (`app.kubernetes.io/managed-by`,
//! `tenantplane.io/tenant`, `tenantplane.io/component: control-plane`,
//! `tenantplane.io/control-plane-of`), and [`cleanup_control_plane`], which the
//! controller's finalizer calls, deletes it: this TenantCluster's objects there
//! (and its PVCs, which a StatefulSet never deletes), then the namespace itself once
//! no other live TenantCluster of the namespace still needs a provisioned control
//! plane, and only when the namespace carries our labels for that namespace. The
//! kubeconfig Secret lives in the TenantCluster's namespace and is owned by it.
//!
//! # Credentials: a bootstrap generated up front, not `exec`
//! Reading `/etc/rancher/k3s/k3s.yaml` by exec needs `create pods/exec`, which a
//! ClusterRole can only grant cluster-wide (the `-cp` namespaces come and go): a
//! shell in every pod of the host. Instead the controller generates, before k3s first
//! starts, the k3s server token, a static admin bearer token and the server CA
//! (certificate and key), stores them in the bootstrap Secret, and k3s starts with
//! them: the token by `K3S_TOKEN`, the admin token by the API server's
//! `--token-auth-file`, and the CA by being pre-placed where k3s looks for it
//! (`server/tls/server-ca.{crt,key}`: k3s generates each CA only when its files are
//! missing, and signs its serving certificate with ours). The kubeconfig is then
//! composed, not extracted, and the only signal needed is the pod's readiness. The
//! controller needs nothing beyond the Secrets it already writes.
//!
//! Trade-offs: the admin credential is a static token (no expiry; rotating it means a
//! new bootstrap Secret and a restart), and the server CA's key exists in a host
//! Secret as well as on the PVC; both are as sensitive as the kubeconfig itself.
//! Exec would keep k3s' own client certificate but need the privilege above, and could
//! not be tested without a kubelet; here tests play the kubelet by marking the pod
//! Ready. Not checked against a running k3s here (no images can be pulled): the CA
//! pre-placement and flags follow k3s' documented behaviour.
//!
//! `mode: dedicated|private` need nothing here (the controller reports
//! `ModeSupported=False`).
//!
//! Stays a little over 500 lines: `ensure_control_plane_with` is one convergence
//! sequence whose steps depend on the ones before; its parts are already the
//! submodules below.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Pod, Secret, Service};
use kube::api::{PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use tenantplane_api::{Distro, SecretKeyRef, TenantCluster};
use tenantplane_core::control_plane::kubeconfig::{KubeconfigError, tenant_kubeconfig};
use tenantplane_core::control_plane::names::{
    self, ControlPlaneNames, MissingMetadata, address_url,
};
use tenantplane_core::control_plane::objects::{self, ServiceKind, service};
use tenantplane_core::versions;

mod bootstrap;
mod certificates;
mod cleanup;
mod namespace;
mod serving;
mod tenant_secrets;
pub mod tenant_webhook;

pub use cleanup::{CleanupOutcome, cleanup_control_plane};
pub use tenantplane_core::control_plane::names::{
    control_plane_name, control_plane_namespace, in_cluster_endpoint, in_cluster_host,
    kubeconfig_secret_name, kubelet_client_secret_name,
};
pub use tenantplane_core::control_plane::{
    ADMIN_USER, CONTROL_PLANE_POD_SECURITY, CONTROL_PLANE_PORT, DEFAULT_SERVICE_CIDR,
    KUBECONFIG_KEY,
};

use crate::converge::{ConvergeError, ObjectAction, converge, converge_live};
use crate::decisions::MANAGER;

/// Where a TenantCluster's control plane stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ControlPlaneState {
    /// tenantplane will not provision it until the spec (or a foreign object) changes.
    Refused {
        reason: &'static str,
        message: String,
    },
    /// Created or being updated; the API server is not Ready yet.
    Provisioning { message: String },
    /// The API server is Ready and its kubeconfig is in `kubeconfig_secret`.
    Ready {
        kubeconfig_secret: SecretKeyRef,
        /// The in-cluster URL, as written into the kubeconfig.
        endpoint: String,
        /// The LoadBalancer's address, once it has one.
        external_endpoint: Option<String>,
        /// `https://<ClusterIP>:6443` of the control plane's Service: where the
        /// controller connects, presenting [`in_cluster_host`] for TLS, so it needs no
        /// cluster DNS (it may run outside the cluster, or while the host's DNS is
        /// down). `None` until the Service has its address.
        service_url: Option<String>,
        /// The syncer's own credential for this control plane ([`SYNCER_USER`]), so the
        /// tenant's admission can tell tenantplane's writes from the tenant's.
        /// `None` in bootstraps made before it existed: the syncer then uses the
        /// admin token of the kubeconfig, and no fromHost webhook is registered.
        syncer_token: Option<SyncerToken>,
    },
    /// `spec.controlPlane.external` is set: nothing is provisioned (and what was
    /// provisioned before is removed).
    External { kubeconfig_secret: SecretKeyRef },
}

/// A bearer token that never appears in logs or `Debug` output.
#[derive(Clone, PartialEq, Eq)]
pub struct SyncerToken(String);

impl SyncerToken {
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for SyncerToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SyncerToken(<redacted>)")
    }
}

pub use tenantplane_core::from_host_admission::SYNCER_USER;

/// Failures talking to the host or building objects; each is retried.
#[derive(Debug, thiserror::Error)]
pub enum ProvisionError {
    #[error("the TenantCluster has no {0}")]
    MissingMetadata(&'static str),
    #[error("{verb} {kind} {namespace}/{name}: {source}")]
    Host {
        verb: &'static str,
        kind: &'static str,
        namespace: String,
        name: String,
        // Boxed: kube's error is large, and this is on every fallible path.
        #[source]
        source: Box<kube::Error>,
    },
    /// The desired object could not be serialized for the host.
    #[error("building {kind}: {source}")]
    Build {
        kind: &'static str,
        #[source]
        source: serde_json::Error,
    },
    #[error(transparent)]
    Kubeconfig(#[from] KubeconfigError),
    #[error("generating the control plane's server CA: {0}")]
    Certificate(#[from] rcgen::Error),
    #[error("the system random number generator failed")]
    Random,
    #[error(
        "bootstrap Secret {namespace}/{name} has no key {key:?}: delete it to have it regenerated \
         (the control plane's data was made with it; expect to recreate the tenant)"
    )]
    BootstrapInvalid {
        namespace: String,
        name: String,
        key: &'static str,
    },
}

impl From<MissingMetadata> for ProvisionError {
    fn from(missing: MissingMetadata) -> Self {
        Self::MissingMetadata(missing.0)
    }
}

fn host_error(
    kind: &'static str,
    namespace: &str,
    name: &str,
) -> impl Fn(&'static str, kube::Error) -> ProvisionError {
    let (namespace, name) = (namespace.to_owned(), name.to_owned());
    move |verb, source| ProvisionError::Host {
        verb,
        kind,
        namespace: namespace.clone(),
        name: name.clone(),
        source: Box::new(source),
    }
}

fn converge_error(
    kind: &'static str,
    namespace: &str,
    name: &str,
) -> impl Fn(ConvergeError) -> ProvisionError {
    let host = host_error(kind, namespace, name);
    move |e| match e {
        ConvergeError::Host { verb, source } => host(verb, source),
        ConvergeError::Serialize(source) => ProvisionError::Build { kind, source },
    }
}

fn foreign(
    kind: &str,
    namespace: &str,
    name: &str,
    tc: &str,
    tc_namespace: &str,
) -> ControlPlaneState {
    ControlPlaneState::Refused {
        reason: "ForeignObject",
        message: format!(
            "{kind} {namespace}/{name} exists but is not tenantplane's control plane of \
             TenantCluster {tc_namespace}/{tc}; tenantplane never takes over objects it did not \
             create: rename or delete it"
        ),
    }
}

/// Reconciles the control plane of `tc` and reports where it stands (tenant API
/// server on [`DEFAULT_SERVICE_CIDR`]).
pub async fn ensure_control_plane(
    host: &Client,
    tc: &TenantCluster,
) -> Result<ControlPlaneState, ProvisionError> {
    ensure_control_plane_with(host, tc, DEFAULT_SERVICE_CIDR).await
}

/// [`ensure_control_plane`] with the host's service CIDR, which the tenant API
/// server allocates Service addresses from.
pub async fn ensure_control_plane_with(
    host: &Client,
    tc: &TenantCluster,
    service_cidr: &str,
) -> Result<ControlPlaneState, ProvisionError> {
    let names = ControlPlaneNames::of(tc)?;
    if let Some(external) = &tc.spec.control_plane.external {
        // Switched from provisioned to external: remove what was provisioned.
        cleanup::cleanup_control_plane(host, tc).await?;
        return Ok(ControlPlaneState::External {
            kubeconfig_secret: external.kubeconfig_secret_ref.clone(),
        });
    }
    let version = match versions::resolve(&tc.spec.kubernetes_version) {
        Ok(v) => v,
        Err(e) => {
            return Ok(ControlPlaneState::Refused {
                reason: "UnsupportedKubernetesVersion",
                message: format!("{e}; change spec.kubernetesVersion"),
            });
        }
    };
    if names.cp_namespace.len() > 63 {
        return Ok(ControlPlaneState::Refused {
            reason: "NamespaceTooLong",
            message: format!(
                "the control-plane namespace {:?} would exceed 63 characters: provisioned \
                 control planes need a TenantCluster namespace of at most 60 characters",
                names.cp_namespace
            ),
        });
    }
    if let Some(state) = namespace::ensure_namespace(host, &names).await? {
        return Ok(state);
    }
    let cp_ns = names.cp_namespace.as_str();
    let secrets: Api<Secret> = Api::namespaced(host.clone(), cp_ns);
    let bootstrap = match bootstrap::ensure_bootstrap(&secrets, &names).await? {
        Ok(b) => b,
        Err(state) => return Ok(state),
    };
    let distro = tc.spec.control_plane.distro;
    if distro == Distro::K8s {
        if let Some(key) = bootstrap.missing_for_k8s {
            return Ok(ControlPlaneState::Refused {
                reason: "BootstrapOutdated",
                message: format!(
                    "bootstrap Secret {cp_ns}/{} was made for k3s by an older tenantplane and \
                     has no key {key:?}, which distro k8s needs: keep distro k3s, or recreate the \
                     TenantCluster",
                    names::bootstrap_name(&names.tenant)
                ),
            });
        }
        let ca_key = bootstrap.ca_key_pem.as_deref().unwrap_or_default();
        let sans = names.serving_sans(&tc.spec.control_plane.extra_sans, service_cidr);
        if let Err(state) = serving::ensure_serving_secret(&secrets, &names, ca_key, &sans).await? {
            return Ok(state);
        }
    }

    let ours = |labels: &BTreeMap<String, String>| names.is_ours(labels);
    let sts_api: Api<StatefulSet> = Api::namespaced(host.clone(), cp_ns);
    // Read once: the distro check looks at it, then it is converged from it.
    let live_sts = sts_api
        .get_opt(&names.cp_name)
        .await
        .map_err(|e| host_error("StatefulSet", cp_ns, &names.cp_name)("get", e))?;
    let live_distro = live_sts
        .as_ref()
        .filter(|live| names.is_ours(live.labels()))
        .and_then(objects::live_distro);
    if let Some(live) = live_distro.filter(|live| *live != distro) {
        return Ok(ControlPlaneState::Refused {
            reason: "DistroChangeRefused",
            message: format!(
                "the control plane runs distro {}, and its data on the PVC is in that \
                 distro's format: spec.controlPlane.distro cannot change to {} once the control \
                 plane exists; restore it (to change distro, recreate the TenantCluster)",
                live.as_str(),
                distro.as_str()
            ),
        });
    }
    let statefulset = objects::statefulset(
        &names,
        tc,
        version,
        service_cidr,
        bootstrap.kubelet_cert_pem.is_some(),
    );
    let sts_action = match converge_live(
        &sts_api,
        &names.cp_name,
        live_sts,
        Some(&statefulset),
        &ours,
        &[],
    )
    .await
    {
        Err(ConvergeError::Host {
            verb: "update",
            source: kube::Error::Api(s),
        }) if s.code == 422 => {
            return Ok(ControlPlaneState::Refused {
                reason: "ControlPlaneChangeRejected",
                message: format!(
                    "StatefulSet {cp_ns}/{} cannot be updated: {}; spec.controlPlane.storage \
                     cannot change once the control plane exists (volumeClaimTemplates are \
                     immutable): restore it",
                    names.cp_name, s.message
                ),
            });
        }
        other => other.map_err(converge_error("StatefulSet", cp_ns, &names.cp_name))?,
    };
    let mut actions = vec![("StatefulSet", names.cp_name.clone(), sts_action)];

    let services: Api<Service> = Api::namespaced(host.clone(), cp_ns);
    let lb = tc
        .spec
        .control_plane
        .expose
        .load_balancer
        .as_ref()
        .filter(|lb| lb.enabled);
    let wanted = [
        (
            names::headless_name(&names.tenant),
            Some(service(&names, ServiceKind::Headless)),
        ),
        (
            names.cp_name.clone(),
            Some(service(&names, ServiceKind::ClusterIp)),
        ),
        (
            names::load_balancer_name(&names.tenant),
            lb.map(|lb| service(&names, ServiceKind::LoadBalancer(&lb.annotations))),
        ),
    ];
    for (name, desired) in &wanted {
        // The user's LoadBalancer annotations are compared exactly, so one they remove
        // is removed from the Service too.
        let exact: &[&str] = if name.ends_with("-lb") {
            &["/metadata/annotations"]
        } else {
            &[]
        };
        let action = converge(&services, name, desired.as_ref(), &ours, exact)
            .await
            .map_err(converge_error("Service", cp_ns, name))?;
        actions.push(("Service", name.clone(), action));
    }
    if let Some((kind, name, _)) = actions
        .iter()
        .find(|(_, _, a)| *a == ObjectAction::Conflict)
    {
        return Ok(foreign(kind, cp_ns, name, &names.tenant, &names.namespace));
    }
    tracing::debug!(tenant = %names.tenant, namespace = %names.namespace, ?actions, "control plane reconciled");

    let pod_name = names.pod_name();
    if !pod_ready(host, &names, &pod_name).await? {
        let images = objects::statefulset_images(&statefulset).join(", ");
        return Ok(ControlPlaneState::Provisioning {
            message: format!(
                "waiting for the {} control plane pod {cp_ns}/{pod_name} ({images}) to become \
                 Ready",
                distro.as_str()
            ),
        });
    }
    let service_url = services
        .get_opt(&names.cp_name)
        .await
        .map_err(|e| host_error("Service", cp_ns, &names.cp_name)("get", e))?
        .and_then(|s| s.spec?.cluster_ip)
        .filter(|ip| !ip.is_empty() && ip != "None")
        .map(|ip| address_url(&ip));

    let endpoint = in_cluster_endpoint(&names.tenant, &names.namespace);
    let kubeconfig = tenant_kubeconfig(
        &names.tenant,
        &endpoint,
        &bootstrap.ca_pem,
        &bootstrap.admin_token,
    )?;
    if let Some(state) =
        tenant_secrets::ensure_kubeconfig_secret(host, &names, tc, kubeconfig).await?
    {
        return Ok(state);
    }
    if let Some(cert_pem) = &bootstrap.kubelet_cert_pem
        && let Some(state) =
            tenant_secrets::ensure_kubelet_client_secret(host, &names, tc, cert_pem).await?
    {
        return Ok(state);
    }

    let external_endpoint = match lb {
        Some(_) => services
            .get_opt(&names::load_balancer_name(&names.tenant))
            .await
            .map_err(|e| {
                host_error("Service", cp_ns, &names::load_balancer_name(&names.tenant))("get", e)
            })?
            .and_then(|s| s.status?.load_balancer?.ingress?.into_iter().next())
            .and_then(|ingress| ingress.hostname.or(ingress.ip))
            .map(|address| format!("https://{address}:{CONTROL_PLANE_PORT}")),
        None => None,
    };
    Ok(ControlPlaneState::Ready {
        kubeconfig_secret: SecretKeyRef {
            name: kubeconfig_secret_name(&names.tenant),
            key: KUBECONFIG_KEY.to_owned(),
        },
        endpoint,
        external_endpoint,
        service_url,
        syncer_token: bootstrap.syncer_token.map(SyncerToken),
    })
}

async fn pod_ready(
    host: &Client,
    names: &ControlPlaneNames,
    pod_name: &str,
) -> Result<bool, ProvisionError> {
    let pods: Api<Pod> = Api::namespaced(host.clone(), &names.cp_namespace);
    let pod = pods
        .get_opt(pod_name)
        .await
        .map_err(|e| host_error("Pod", &names.cp_namespace, pod_name)("get", e))?;
    // Only our StatefulSet's pod counts: one someone else put under the name
    // (without our labels) must never make the tenant look Ready.
    Ok(pod
        .filter(|p| names.is_ours(p.labels()) && p.metadata.deletion_timestamp.is_none())
        .and_then(|p| p.status?.conditions)
        .is_some_and(|conditions| {
            conditions
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True")
        }))
}

fn post_params() -> PostParams {
    PostParams {
        field_manager: Some(MANAGER.to_owned()),
        ..PostParams::default()
    }
}

fn patch_params() -> PatchParams {
    PatchParams {
        field_manager: Some(MANAGER.to_owned()),
        ..PatchParams::default()
    }
}
