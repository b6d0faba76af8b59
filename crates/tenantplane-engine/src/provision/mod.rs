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

use std::collections::BTreeMap;

use base64::Engine as _;
use k8s_openapi::ByteString;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Namespace, PersistentVolumeClaim, Pod, Secret, Service};
use kube::api::{ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Api, Client, Resource, ResourceExt};
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DistinguishedName, DnType, IsCa, KeyPair,
    KeyUsagePurpose,
};
use ring::rand::SecureRandom;
use serde_json::{Value, json};
use tenantplane_api::{Distro, SecretKeyRef, TenantCluster};
use tenantplane_core::isolation::{POD_SECURITY_MODES, POD_SECURITY_VERSION};
use tenantplane_core::metadata::{
    COMPONENT_CONTROL_PLANE, LABEL_COMPONENT, LABEL_CONTROL_PLANE_OF, LABEL_MANAGED_BY,
    LABEL_TENANT, MANAGED_BY_VALUE,
};
use tenantplane_core::versions::{self, SupportedVersion};

mod k8s;
mod serving;
pub mod tenant_webhook;

use crate::converge::{ConvergeError, ObjectAction, converge, converge_live};
use crate::decisions::MANAGER;
use crate::deletion::exactly;

/// The tenant API server's port (k3s' supervisor and API server).
pub const CONTROL_PLANE_PORT: i32 = 6443;
/// The key of the kubeconfig in the kubeconfig Secret.
pub const KUBECONFIG_KEY: &str = "kubeconfig";
/// Pod Security level of the `-cp` namespace (see the module comment).
pub const CONTROL_PLANE_POD_SECURITY: &str = "baseline";
/// The user the static admin token authenticates as (in `system:masters`).
pub const ADMIN_USER: &str = "tenantplane-admin";

const DATA_DIR: &str = "/var/lib/rancher/k3s";
const TOKENS_FILE: &str = "/etc/tenantplane/tokens.csv";
/// Add-ons a control plane without nodes has no use for.
const DISABLED_COMPONENTS: &str = "traefik,servicelb,metrics-server,local-storage,coredns";

// Keys of the bootstrap Secret.
const KEY_TOKEN: &str = "token";
const KEY_ADMIN_TOKEN: &str = "admin-token";
const KEY_TOKENS_CSV: &str = "tokens.csv";
const KEY_CA_CERT: &str = "server-ca.crt";
const KEY_CA_KEY: &str = "server-ca.key";
const KEY_KUBELET_CERT: &str = "kubelet-client.crt";
const KEY_KUBELET_KEY: &str = "kubelet-client.key";
const KEY_SYNCER_TOKEN: &str = "syncer-token";
/// Where k3s' API server finds the client certificate it presents to kubelets
/// (tenantplane's kubelet endpoint, which knows the tenant by its fingerprint).
const KUBELET_CLIENT_DIR: &str = "/etc/tenantplane/kubelet-client";

/// The control-plane namespace of a TenantCluster namespace.
pub fn control_plane_namespace(tc_namespace: &str) -> String {
    format!("{tc_namespace}-cp")
}

/// The StatefulSet and ClusterIP Service of a TenantCluster's control plane.
pub fn control_plane_name(tenant: &str) -> String {
    format!("{tenant}-cp")
}

/// The Secret (in the TenantCluster's namespace) holding the certificate (only)
/// the provisioned API server presents to tenantplane's kubelet endpoint.
pub fn kubelet_client_secret_name(tenant: &str) -> String {
    format!("{tenant}-kubelet-client")
}

/// The Secret (in the TenantCluster's namespace) holding the tenant's kubeconfig.
pub fn kubeconfig_secret_name(tenant: &str) -> String {
    format!("{tenant}-kubeconfig")
}

/// The in-cluster DNS name of the tenant API server's Service.
pub fn in_cluster_host(tenant: &str, tc_namespace: &str) -> String {
    format!(
        "{}.{}.svc",
        control_plane_name(tenant),
        control_plane_namespace(tc_namespace)
    )
}

/// The URL the host reaches the tenant API server at.
pub fn in_cluster_endpoint(tenant: &str, tc_namespace: &str) -> String {
    format!(
        "https://{}:{CONTROL_PLANE_PORT}",
        in_cluster_host(tenant, tc_namespace)
    )
}

fn headless_name(tenant: &str) -> String {
    format!("{tenant}-cp-headless")
}

fn load_balancer_name(tenant: &str) -> String {
    format!("{tenant}-cp-lb")
}

fn bootstrap_name(tenant: &str) -> String {
    format!("{tenant}-cp-bootstrap")
}

/// The Secret holding the `k8s` distro's serving certificate (re-issued when the
/// names it must be valid for change, unlike the immutable bootstrap).
fn serving_name(tenant: &str) -> String {
    format!("{tenant}-cp-serving")
}

/// On the serving Secret: the names its certificate was issued for.
const ANNOTATION_SERVING_NAMES: &str = "tenantplane.io/serving-names";

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
    #[error("building {kind}: {source}")]
    Build {
        kind: &'static str,
        #[source]
        source: serde_json::Error,
    },
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

/// Everything that names one TenantCluster's control plane.
struct Names {
    tenant: String,
    namespace: String,
    cp_namespace: String,
    cp_name: String,
}

impl Names {
    fn of(tc: &TenantCluster) -> Result<Self, ProvisionError> {
        let tenant = tc
            .metadata
            .name
            .clone()
            .ok_or(ProvisionError::MissingMetadata("name"))?;
        let namespace = tc
            .metadata
            .namespace
            .clone()
            .ok_or(ProvisionError::MissingMetadata("namespace"))?;
        Ok(Self {
            cp_namespace: control_plane_namespace(&namespace),
            cp_name: control_plane_name(&tenant),
            tenant,
            namespace,
        })
    }

    /// The labels of every object of this control plane (and the pod's).
    fn labels(&self) -> BTreeMap<String, String> {
        let mut labels = self.selector();
        labels.insert(LABEL_MANAGED_BY.into(), MANAGED_BY_VALUE.into());
        labels.insert(LABEL_CONTROL_PLANE_OF.into(), self.namespace.clone());
        labels
    }

    /// What the StatefulSet selects (immutable, so only what never changes).
    fn selector(&self) -> BTreeMap<String, String> {
        BTreeMap::from([
            (LABEL_TENANT.to_owned(), self.tenant.clone()),
            (
                LABEL_COMPONENT.to_owned(),
                COMPONENT_CONTROL_PLANE.to_owned(),
            ),
        ])
    }

    fn is_ours(&self, labels: &BTreeMap<String, String>) -> bool {
        self.labels().iter().all(|(k, v)| labels.get(k) == Some(v))
    }

    /// The kubeconfig Secret lives in the tenant namespace, so it has no
    /// `control-plane-of` label (that label marks a control-plane namespace's objects).
    fn kubeconfig_labels(&self) -> BTreeMap<String, String> {
        let mut labels = self.selector();
        labels.insert(LABEL_MANAGED_BY.into(), MANAGED_BY_VALUE.into());
        labels
    }

    fn is_our_kubeconfig(&self, labels: &BTreeMap<String, String>) -> bool {
        self.kubeconfig_labels()
            .iter()
            .all(|(k, v)| labels.get(k) == Some(v))
    }

    /// The names the `k8s` distro's serving certificate is issued for: the Service's
    /// names, the tenant's own `kubernetes` Service (its names and address, for
    /// in-cluster clients of the tenant), and loopback (the controller manager).
    fn serving_sans(&self, extra: &[String], service_cidr: &str) -> Vec<String> {
        let mut sans = self.tls_sans(extra);
        let mut more: Vec<String> = [
            "kubernetes",
            "kubernetes.default",
            "kubernetes.default.svc",
            "kubernetes.default.svc.cluster.local",
            "localhost",
            "127.0.0.1",
        ]
        .map(str::to_owned)
        .into();
        more.extend(k8s::kubernetes_service_ip(service_cidr));
        for san in more {
            if !sans.contains(&san) {
                sans.push(san);
            }
        }
        sans
    }

    /// The names the API server's certificate must be valid for.
    fn tls_sans(&self, extra: &[String]) -> Vec<String> {
        let service = &self.cp_name;
        let ns = &self.cp_namespace;
        let mut sans = vec![
            service.clone(),
            format!("{service}.{ns}"),
            format!("{service}.{ns}.svc"),
            format!("{service}.{ns}.svc.cluster.local"),
        ];
        for san in extra {
            if !sans.contains(san) {
                sans.push(san.clone());
            }
        }
        sans
    }
}

fn namespace_is_ours(labels: &BTreeMap<String, String>, tc_namespace: &str) -> bool {
    labels.get(LABEL_MANAGED_BY).map(String::as_str) == Some(MANAGED_BY_VALUE)
        && labels.get(LABEL_CONTROL_PLANE_OF).map(String::as_str) == Some(tc_namespace)
}

/// The service CIDR a provisioned tenant API server is started with when none is
/// given: kube-apiserver's own default. It must be the host's, so a tenant Service
/// can carry its host copy's ClusterIP.
pub const DEFAULT_SERVICE_CIDR: &str = "10.0.0.0/24";

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
    let names = Names::of(tc)?;
    if let Some(external) = &tc.spec.control_plane.external {
        // Switched from provisioned to external: remove what was provisioned.
        cleanup_control_plane(host, tc).await?;
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
    if let Some(state) = ensure_namespace(host, &names).await? {
        return Ok(state);
    }
    let cp_ns = names.cp_namespace.as_str();
    let secrets: Api<Secret> = Api::namespaced(host.clone(), cp_ns);
    let bootstrap = match ensure_bootstrap(&secrets, &names).await? {
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
                    bootstrap_name(&names.tenant)
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
        .and_then(live_distro);
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
    let statefulset = build::<StatefulSet>(
        "StatefulSet",
        statefulset(
            &names,
            tc,
            version,
            service_cidr,
            bootstrap.kubelet_cert_pem.is_some(),
        ),
    )?;
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
            headless_name(&names.tenant),
            Some(service(&names, ServiceKind::Headless)?),
        ),
        (
            names.cp_name.clone(),
            Some(service(&names, ServiceKind::ClusterIp)?),
        ),
        (
            load_balancer_name(&names.tenant),
            lb.map(|lb| service(&names, ServiceKind::LoadBalancer(&lb.annotations)))
                .transpose()?,
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

    let pod_name = format!("{}-0", names.cp_name);
    if !pod_ready(host, &names, &pod_name).await? {
        let images = statefulset_images(&statefulset).join(", ");
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
        .map(|ip| {
            if ip.contains(':') {
                format!("https://[{ip}]:{CONTROL_PLANE_PORT}")
            } else {
                format!("https://{ip}:{CONTROL_PLANE_PORT}")
            }
        });

    let endpoint = in_cluster_endpoint(&names.tenant, &names.namespace);
    let kubeconfig = kubeconfig_yaml(&names.tenant, &endpoint, &bootstrap);
    let secret_name = kubeconfig_secret_name(&names.tenant);
    let owner = tc
        .controller_owner_ref(&())
        .ok_or(ProvisionError::MissingMetadata("uid"))?;
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some(secret_name.clone()),
            namespace: Some(names.namespace.clone()),
            labels: Some(names.kubeconfig_labels()),
            owner_references: Some(vec![owner]),
            ..ObjectMeta::default()
        },
        data: Some(BTreeMap::from([(
            KUBECONFIG_KEY.to_owned(),
            ByteString(kubeconfig.into_bytes()),
        )])),
        type_: Some("Opaque".to_owned()),
        ..Secret::default()
    };
    let tenant_secrets: Api<Secret> = Api::namespaced(host.clone(), &names.namespace);
    let action = converge(
        &tenant_secrets,
        &secret_name,
        Some(&secret),
        &|labels| names.is_our_kubeconfig(labels),
        &["/data"],
    )
    .await
    .map_err(converge_error("Secret", &names.namespace, &secret_name))?;
    if action == ObjectAction::Conflict {
        return Ok(foreign(
            "Secret",
            &names.namespace,
            &secret_name,
            &names.tenant,
            &names.namespace,
        ));
    }

    if let Some(cert_pem) = &bootstrap.kubelet_cert_pem
        && let Some(state) = ensure_kubelet_client_secret(host, &names, tc, cert_pem).await?
    {
        return Ok(state);
    }

    let external_endpoint = match lb {
        Some(_) => services
            .get_opt(&load_balancer_name(&names.tenant))
            .await
            .map_err(|e| {
                host_error("Service", cp_ns, &load_balancer_name(&names.tenant))("get", e)
            })?
            .and_then(|s| s.status?.load_balancer?.ingress?.into_iter().next())
            .and_then(|ingress| ingress.hostname.or(ingress.ip))
            .map(|address| format!("https://{address}:{CONTROL_PLANE_PORT}")),
        None => None,
    };
    Ok(ControlPlaneState::Ready {
        kubeconfig_secret: SecretKeyRef {
            name: secret_name,
            key: KUBECONFIG_KEY.to_owned(),
        },
        endpoint,
        external_endpoint,
        service_url,
        syncer_token: bootstrap.syncer_token.map(SyncerToken),
    })
}

/// The distro a live StatefulSet of ours runs, by its first container.
fn live_distro(live: &StatefulSet) -> Option<Distro> {
    let first = live
        .spec
        .as_ref()?
        .template
        .spec
        .as_ref()?
        .containers
        .first()?;
    Some(match first.name.as_str() {
        "k3s" => Distro::K3s,
        _ => Distro::K8s,
    })
}

fn statefulset_images(sts: &StatefulSet) -> Vec<String> {
    sts.spec
        .iter()
        .filter_map(|s| s.template.spec.as_ref())
        .flat_map(|p| p.containers.iter())
        .filter_map(|c| c.image.clone())
        .collect()
}

/// Publishes the certificate (never the key) the control plane presents to kubelets,
/// in the Secret the kubelet endpoint reads. `Some` is a state to report instead.
async fn ensure_kubelet_client_secret(
    host: &Client,
    names: &Names,
    tc: &TenantCluster,
    cert_pem: &str,
) -> Result<Option<ControlPlaneState>, ProvisionError> {
    let name = kubelet_client_secret_name(&names.tenant);
    let owner = tc
        .controller_owner_ref(&())
        .ok_or(ProvisionError::MissingMetadata("uid"))?;
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            namespace: Some(names.namespace.clone()),
            labels: Some(names.kubeconfig_labels()),
            owner_references: Some(vec![owner]),
            ..ObjectMeta::default()
        },
        data: Some(BTreeMap::from([(
            "tls.crt".to_owned(),
            ByteString(cert_pem.as_bytes().to_vec()),
        )])),
        type_: Some("Opaque".to_owned()),
        ..Secret::default()
    };
    let api: Api<Secret> = Api::namespaced(host.clone(), &names.namespace);
    let action = converge(
        &api,
        &name,
        Some(&secret),
        &|labels| names.is_our_kubeconfig(labels),
        &["/data"],
    )
    .await
    .map_err(converge_error("Secret", &names.namespace, &name))?;
    Ok((action == ObjectAction::Conflict).then(|| {
        foreign(
            "Secret",
            &names.namespace,
            &name,
            &names.tenant,
            &names.namespace,
        )
    }))
}

/// Creates the `-cp` namespace or checks it; `Some` is a state to report instead of
/// going on.
async fn ensure_namespace(
    host: &Client,
    names: &Names,
) -> Result<Option<ControlPlaneState>, ProvisionError> {
    let api: Api<Namespace> = Api::all(host.clone());
    let cp_ns = &names.cp_namespace;
    let err = host_error("Namespace", "", cp_ns);
    let mut labels = BTreeMap::from([
        (LABEL_MANAGED_BY.to_owned(), MANAGED_BY_VALUE.to_owned()),
        (LABEL_CONTROL_PLANE_OF.to_owned(), names.namespace.clone()),
    ]);
    for mode in POD_SECURITY_MODES {
        labels.insert(mode.to_owned(), CONTROL_PLANE_POD_SECURITY.to_owned());
        labels.insert(format!("{mode}-version"), POD_SECURITY_VERSION.to_owned());
    }
    match api.get_opt(cp_ns).await.map_err(|e| err("get", e))? {
        None => {
            let ns = Namespace {
                metadata: ObjectMeta {
                    name: Some(cp_ns.clone()),
                    labels: Some(labels),
                    ..ObjectMeta::default()
                },
                ..Namespace::default()
            };
            match api.create(&post_params(), &ns).await {
                Ok(_) => Ok(None),
                // Another TenantCluster of the namespace created it meanwhile: check it
                // on the next reconcile.
                Err(kube::Error::Api(s)) if s.code == 409 => {
                    Ok(Some(ControlPlaneState::Provisioning {
                        message: format!("namespace {cp_ns} is being created"),
                    }))
                }
                Err(e) => Err(err("create", e)),
            }
        }
        Some(live) => {
            if !namespace_is_ours(live.labels(), &names.namespace) {
                return Ok(Some(foreign(
                    "Namespace",
                    "",
                    cp_ns,
                    &names.tenant,
                    &names.namespace,
                )));
            }
            if live.metadata.deletion_timestamp.is_some() {
                return Ok(Some(ControlPlaneState::Provisioning {
                    message: format!(
                        "namespace {cp_ns} is still terminating from an earlier control plane; \
                         it is recreated once it is gone"
                    ),
                }));
            }
            let missing: BTreeMap<&String, &String> = labels
                .iter()
                .filter(|(k, v)| live.labels().get(*k) != Some(*v))
                .collect();
            if !missing.is_empty() {
                api.patch(
                    cp_ns,
                    &patch_params(),
                    &Patch::Merge(json!({"metadata": {"labels": missing}})),
                )
                .await
                .map_err(|e| err("patch", e))?;
            }
            Ok(None)
        }
    }
}

/// What the kubeconfig is composed from.
struct Bootstrap {
    ca_pem: String,
    admin_token: String,
    /// Absent in bootstrap Secrets made before tenantplane issued one (they are
    /// immutable): such a control plane keeps running without `kubectl logs`.
    kubelet_cert_pem: Option<String>,
    /// The CA's key, which signs the `k8s` distro's serving certificate.
    ca_key_pem: Option<String>,
    /// The first key the `k8s` distro needs that this bootstrap lacks (one made
    /// by an older tenantplane, for k3s).
    missing_for_k8s: Option<&'static str>,
    /// The syncer's token (absent in bootstraps made before it existed).
    syncer_token: Option<String>,
}

/// The keys the `k8s` distro reads from the bootstrap Secret besides k3s' ones.
const K8S_BOOTSTRAP_KEYS: [&str; 4] = [
    KEY_CA_KEY,
    k8s::KEY_SERVICE_ACCOUNT,
    k8s::KEY_SERVICE_ACCOUNT_PUBLIC,
    k8s::KEY_CONTROLLER_MANAGER_KUBECONFIG,
];

/// The control-plane Secret `name` as it stands (`None`: absent), or the state to
/// report when someone else's Secret holds the name.
async fn read_our_secret(
    api: &Api<Secret>,
    names: &Names,
    name: &str,
) -> Result<Result<Option<Secret>, ControlPlaneState>, ProvisionError> {
    let cp_ns = names.cp_namespace.as_str();
    let live = api
        .get_opt(name)
        .await
        .map_err(|e| host_error("Secret", cp_ns, name)("get", e))?;
    match live {
        Some(live) if !names.is_ours(live.labels()) => Ok(Err(foreign(
            "Secret",
            cp_ns,
            name,
            &names.tenant,
            &names.namespace,
        ))),
        live => Ok(Ok(live)),
    }
}

/// Reads the bootstrap Secret, or generates and creates it. Never updated: k3s'
/// data on the PVC was made with these credentials.
async fn ensure_bootstrap(
    api: &Api<Secret>,
    names: &Names,
) -> Result<Result<Bootstrap, ControlPlaneState>, ProvisionError> {
    let name = bootstrap_name(&names.tenant);
    let cp_ns = names.cp_namespace.as_str();
    let err = host_error("Secret", cp_ns, &name);
    let live = match read_our_secret(api, names, &name).await? {
        Ok(live) => live,
        Err(state) => return Ok(Err(state)),
    };
    if let Some(live) = live {
        let data = live.data.unwrap_or_default();
        let text = |key: &'static str| {
            data.get(key)
                .and_then(|b| String::from_utf8(b.0.clone()).ok())
                .ok_or_else(|| ProvisionError::BootstrapInvalid {
                    namespace: cp_ns.to_owned(),
                    name: name.clone(),
                    key,
                })
        };
        let kubelet_cert_pem = text(KEY_KUBELET_CERT)
            .ok()
            .filter(|_| data.contains_key(KEY_KUBELET_KEY));
        return Ok(Ok(Bootstrap {
            ca_pem: text(KEY_CA_CERT)?,
            admin_token: text(KEY_ADMIN_TOKEN)?,
            kubelet_cert_pem,
            ca_key_pem: text(KEY_CA_KEY).ok(),
            syncer_token: text(KEY_SYNCER_TOKEN).ok(),
            missing_for_k8s: K8S_BOOTSTRAP_KEYS
                .into_iter()
                .find(|key| !data.contains_key(*key)),
        }));
    }
    let (ca_pem, ca_key_pem) = server_ca(&server_ca_common_name(names))?;
    let admin_token = random_hex(32)?;
    let (kubelet_cert_pem, kubelet_key_pem) = kubelet_client_cert(&format!(
        "tenantplane-{}-{}-kubelet-client",
        names.namespace, names.tenant
    ))?;
    let controller_manager_token = random_hex(32)?;
    let syncer_token = random_hex(32)?;
    // token,user,uid[,"groups"]: the admin and the syncer are in system:masters;
    // the controller manager (distro k8s) gets what default RBAC grants its user.
    let tokens_csv = format!(
        "{admin_token},{ADMIN_USER},{ADMIN_USER},\"system:masters\"\n\
         {syncer_token},{SYNCER_USER},{SYNCER_USER},\"system:masters\"\n\
         {controller_manager_token},{user},{user}\n",
        user = k8s::CONTROLLER_MANAGER_USER
    );
    let service_account_key = KeyPair::generate()?;
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            namespace: Some(cp_ns.to_owned()),
            labels: Some(names.labels()),
            ..ObjectMeta::default()
        },
        // Immutable: an edit could only break the control plane, and the kubelet
        // need not watch it.
        immutable: Some(true),
        data: Some(
            [
                (KEY_TOKEN, random_hex(32)?),
                (KEY_ADMIN_TOKEN, admin_token.clone()),
                (KEY_TOKENS_CSV, tokens_csv),
                (KEY_CA_CERT, ca_pem.clone()),
                (KEY_CA_KEY, ca_key_pem.clone()),
                (KEY_KUBELET_CERT, kubelet_cert_pem.clone()),
                (KEY_KUBELET_KEY, kubelet_key_pem),
                (
                    k8s::KEY_SERVICE_ACCOUNT,
                    service_account_key.serialize_pem(),
                ),
                (
                    k8s::KEY_SERVICE_ACCOUNT_PUBLIC,
                    service_account_key.public_key_pem(),
                ),
                (
                    k8s::KEY_CONTROLLER_MANAGER_KUBECONFIG,
                    k8s::controller_manager_kubeconfig(&controller_manager_token),
                ),
                (k8s::KEY_CONTROLLER_MANAGER_TOKEN, controller_manager_token),
                (KEY_SYNCER_TOKEN, syncer_token.clone()),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), ByteString(v.into_bytes())))
            .collect(),
        ),
        type_: Some("Opaque".to_owned()),
        ..Secret::default()
    };
    api.create(&post_params(), &secret)
        .await
        .map_err(|e| err("create", e))?;
    Ok(Ok(Bootstrap {
        ca_pem,
        admin_token,
        kubelet_cert_pem: Some(kubelet_cert_pem),
        ca_key_pem: Some(ca_key_pem),
        missing_for_k8s: None,
        syncer_token: Some(syncer_token),
    }))
}

/// A self-signed client certificate for the API server's calls to kubelets, as PEM
/// (cert, key). Self-signed is enough: the kubelet endpoint trusts it by fingerprint.
fn kubelet_client_cert(common_name: &str) -> Result<(String, String), rcgen::Error> {
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, common_name);
    params.distinguished_name = dn;
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    let key = KeyPair::generate()?;
    let cert = params.self_signed(&key)?;
    Ok((cert.pem(), key.serialize_pem()))
}

fn server_ca_common_name(names: &Names) -> String {
    format!("tenantplane-{}-{}-server-ca", names.namespace, names.tenant)
}

/// The server CA's parameters: its identity (what an issued certificate names as
/// issuer) is only the common name, so the issuer can be rebuilt from the key.
fn server_ca_params(common_name: &str) -> Result<CertificateParams, rcgen::Error> {
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, common_name);
    params.distinguished_name = dn;
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    Ok(params)
}

/// A self-signed ECDSA P-256 CA (what k3s generates for itself), as PEM (cert, key).
fn server_ca(common_name: &str) -> Result<(String, String), rcgen::Error> {
    let key = KeyPair::generate()?;
    let key_pem = key.serialize_pem();
    let issuer = CertifiedIssuer::self_signed(server_ca_params(common_name)?, key)?;
    Ok((issuer.pem(), key_pem))
}

/// A serving certificate for `sans` (DNS names and IP addresses) signed by the
/// server CA, as PEM (cert, key).
fn serving_cert(
    ca_common_name: &str,
    ca_key_pem: &str,
    sans: &[String],
) -> Result<(String, String), rcgen::Error> {
    let issuer = rcgen::Issuer::new(
        server_ca_params(ca_common_name)?,
        KeyPair::from_pem(ca_key_pem)?,
    );
    let mut params = CertificateParams::new(sans.to_vec())?;
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, "kube-apiserver");
    params.distinguished_name = dn;
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    let key = KeyPair::generate()?;
    let cert = params.signed_by(&key, &issuer)?;
    Ok((cert.pem(), key.serialize_pem()))
}

fn random_hex(bytes: usize) -> Result<String, ProvisionError> {
    let mut buf = vec![0u8; bytes];
    ring::rand::SystemRandom::new()
        .fill(&mut buf)
        .map_err(|_| ProvisionError::Random)?;
    Ok(tenantplane_core::hex::short_hex(&buf, bytes))
}

/// The tenant's kubeconfig (YAML), for the in-cluster endpoint.
fn kubeconfig_yaml(tenant: &str, endpoint: &str, bootstrap: &Bootstrap) -> String {
    let ca = base64::engine::general_purpose::STANDARD.encode(bootstrap.ca_pem.as_bytes());
    // Every value is a DNS name, URL, base64 or hex: nothing needs YAML quoting.
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: {tenant}\n  cluster:\n    server: {endpoint}\n    certificate-authority-data: {ca}\nusers:\n- name: {ADMIN_USER}\n  user:\n    token: {}\ncontexts:\n- name: {tenant}\n  context:\n    cluster: {tenant}\n    user: {ADMIN_USER}\ncurrent-context: {tenant}\n",
        bootstrap.admin_token
    )
}

async fn pod_ready(host: &Client, names: &Names, pod_name: &str) -> Result<bool, ProvisionError> {
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

fn build<K: serde::de::DeserializeOwned>(
    kind: &'static str,
    value: Value,
) -> Result<K, ProvisionError> {
    serde_json::from_value(value).map_err(|source| ProvisionError::Build { kind, source })
}

/// The k3s server's arguments.
fn k3s_args(names: &Names, extra_sans: &[String], service_cidr: &str) -> Vec<String> {
    let mut args = vec![
        "server".to_owned(),
        // No kubelet or containerd: tenant pods run on the host through the syncer.
        "--disable-agent".to_owned(),
        format!("--disable={DISABLED_COMPONENTS}"),
        "--disable-helm-controller".to_owned(),
        // Without agents there is no tunnel: the API server reaches tenant webhooks
        // (pods on the host) directly.
        "--egress-selector-mode=disabled".to_owned(),
        // No --datastore-endpoint: without --cluster-init, SQLite under the data
        // directory (on the PVC) is k3s' default datastore.
        // The host's service CIDR: a tenant Service is given its host copy's ClusterIP.
        format!("--service-cidr={service_cidr}"),
        // Endpoints come from the host (the host copy's, with tenant Pod names); the
        // tenant's own endpoint controllers would overwrite them with nothing, as no
        // tenant Pod runs on a tenant node.
        "--kube-controller-manager-arg=controllers=*,-endpoint,-endpointslice,-endpointslicemirroring"
            .to_owned(),
    ];
    for san in names.tls_sans(extra_sans) {
        args.push(format!("--tls-san={san}"));
    }
    // The static admin credential (see the module comment).
    args.push(format!(
        "--kube-apiserver-arg=token-auth-file={TOKENS_FILE}"
    ));
    // k3s turns anonymous requests off; the kubelet's HTTPS readiness probe carries no
    // credentials, and with anonymous on, RBAC still lets unauthenticated users read
    // only /healthz, /livez, /readyz and /version (system:public-info-viewer).
    args.push("--kube-apiserver-arg=anonymous-auth=true".to_owned());
    args
}

/// The control plane's StatefulSet for its distro.
fn statefulset(
    names: &Names,
    tc: &TenantCluster,
    version: &SupportedVersion,
    service_cidr: &str,
    kubelet_client: bool,
) -> Value {
    let (containers, volumes) = match tc.spec.control_plane.distro {
        Distro::K3s => k3s_pod_parts(names, tc, version, service_cidr, kubelet_client),
        Distro::K8s => {
            let (containers, volumes) = k8s::pod_parts(
                &k8s::Images::of(tc, version),
                service_cidr,
                kubelet_client,
                &bootstrap_name(&names.tenant),
                &serving_name(&names.tenant),
            );
            (json!(containers), json!(volumes))
        }
    };
    statefulset_with(names, tc, containers, volumes)
}

/// The k3s server's container and volumes.
fn k3s_pod_parts(
    names: &Names,
    tc: &TenantCluster,
    version: &SupportedVersion,
    service_cidr: &str,
    kubelet_client: bool,
) -> (Value, Value) {
    let bootstrap = bootstrap_name(&names.tenant);
    let tls_dir = format!("{DATA_DIR}/server/tls");
    let mut args = k3s_args(names, &tc.spec.control_plane.extra_sans, service_cidr);
    let mut mounts = vec![
        json!({"name": "data", "mountPath": DATA_DIR}),
        json!({"name": "bootstrap", "mountPath": format!("{tls_dir}/{KEY_CA_CERT}"), "subPath": KEY_CA_CERT, "readOnly": true}),
        json!({"name": "bootstrap", "mountPath": format!("{tls_dir}/{KEY_CA_KEY}"), "subPath": KEY_CA_KEY, "readOnly": true}),
        json!({"name": "bootstrap", "mountPath": TOKENS_FILE, "subPath": KEY_TOKENS_CSV, "readOnly": true}),
    ];
    if kubelet_client {
        for (flag, key) in [
            ("kubelet-client-certificate", KEY_KUBELET_CERT),
            ("kubelet-client-key", KEY_KUBELET_KEY),
        ] {
            let path = format!("{KUBELET_CLIENT_DIR}/{key}");
            args.push(format!("--kube-apiserver-arg={flag}={path}"));
            mounts.push(
                json!({"name": "bootstrap", "mountPath": path, "subPath": key, "readOnly": true}),
            );
        }
    }
    let image = tc
        .spec
        .control_plane
        .images
        .k3s
        .as_deref()
        .unwrap_or(version.k3s_image);
    let containers = json!([{
        "name": "k3s",
        "image": image,
        "args": args,
        "env": [{"name": "K3S_TOKEN", "valueFrom": {"secretKeyRef": {"name": bootstrap, "key": KEY_TOKEN}}}],
        "ports": [{"name": "https", "containerPort": CONTROL_PLANE_PORT, "protocol": "TCP"}],
        "readinessProbe": {
            "httpGet": {"path": "/readyz", "port": CONTROL_PLANE_PORT, "scheme": "HTTPS"},
            "periodSeconds": 5,
            "timeoutSeconds": 3,
            "failureThreshold": 3,
        },
        // An API server with SQLite and no nodes: modest, but bounded
        // so one tenant cannot starve its neighbours' control planes.
        "resources": {
            "requests": {"cpu": "100m", "memory": "256Mi"},
            "limits": {"memory": "2Gi"},
        },
        "securityContext": {"allowPrivilegeEscalation": false},
        "volumeMounts": mounts,
    }]);
    let volumes =
        json!([{"name": "bootstrap", "secret": {"secretName": bootstrap, "defaultMode": 0o400}}]);
    (containers, volumes)
}

/// The StatefulSet around a distro's containers and volumes: one replica, its
/// data on a PVC from `controlPlane.storage`.
fn statefulset_with(names: &Names, tc: &TenantCluster, containers: Value, volumes: Value) -> Value {
    let storage = &tc.spec.control_plane.storage;
    let mut claim_spec = json!({
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": storage.size}},
    });
    if let Some(class) = &storage.storage_class_name {
        claim_spec["storageClassName"] = json!(class);
    }
    json!({
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": names.cp_name, "namespace": names.cp_namespace, "labels": names.labels()},
        "spec": {
            // A k3s server on SQLite, or one etcd member, runs exactly one replica.
            "replicas": 1,
            "serviceName": headless_name(&names.tenant),
            "selector": {"matchLabels": names.selector()},
            "template": {
                "metadata": {"labels": names.labels()},
                "spec": {
                    // The control plane never talks to the host's API server.
                    "automountServiceAccountToken": false,
                    "enableServiceLinks": false,
                    "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
                    "containers": containers,
                    "volumes": volumes,
                },
            },
            "volumeClaimTemplates": [{
                "metadata": {"name": "data", "labels": names.labels()},
                "spec": claim_spec,
            }],
        },
    })
}

enum ServiceKind<'a> {
    Headless,
    ClusterIp,
    LoadBalancer(&'a BTreeMap<String, String>),
}

fn service(names: &Names, kind: ServiceKind<'_>) -> Result<Service, ProvisionError> {
    let ports = json!([{"name": "https", "port": CONTROL_PLANE_PORT, "targetPort": CONTROL_PLANE_PORT, "protocol": "TCP"}]);
    let mut metadata = json!({"namespace": names.cp_namespace, "labels": names.labels()});
    let spec = match kind {
        ServiceKind::Headless => {
            metadata["name"] = json!(headless_name(&names.tenant));
            // Its DNS must resolve while k3s starts (the StatefulSet's identity).
            json!({"clusterIP": "None", "publishNotReadyAddresses": true, "selector": names.selector(), "ports": ports})
        }
        ServiceKind::ClusterIp => {
            metadata["name"] = json!(names.cp_name);
            json!({"type": "ClusterIP", "selector": names.selector(), "ports": ports})
        }
        ServiceKind::LoadBalancer(annotations) => {
            metadata["name"] = json!(load_balancer_name(&names.tenant));
            metadata["annotations"] = json!(annotations);
            json!({"type": "LoadBalancer", "selector": names.selector(), "ports": ports})
        }
    };
    build(
        "Service",
        json!({"apiVersion": "v1", "kind": "Service", "metadata": metadata, "spec": spec}),
    )
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

/// What [`cleanup_control_plane`] removed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CleanupOutcome {
    /// `Kind namespace/name` of every object deleted.
    pub deleted: Vec<String>,
    /// Whether the `-cp` namespace was deleted (the namespace controller finishes it).
    pub namespace_deleted: bool,
}

/// Removes what [`ensure_control_plane`] provisioned for `tc`: its objects in the
/// `-cp` namespace (only those labelled as its control plane), its PVCs, its
/// kubeconfig Secret, and the `-cp` namespace once no other live TenantCluster of
/// the namespace needs a provisioned control plane. Called by the controller's
/// finalizer; safe to call repeatedly and when nothing was ever provisioned.
pub async fn cleanup_control_plane(
    host: &Client,
    tc: &TenantCluster,
) -> Result<CleanupOutcome, ProvisionError> {
    let names = Names::of(tc)?;
    let cp_ns = names.cp_namespace.as_str();
    let mut outcome = CleanupOutcome::default();

    // The kubeconfig Secret is owned by the TenantCluster (GC removes it when the
    // TenantCluster goes), but a switch to `external` keeps the TenantCluster. Never
    // the Secret the external control plane is read from.
    let secret_name = kubeconfig_secret_name(&names.tenant);
    let external_secret = tc
        .spec
        .control_plane
        .external
        .as_ref()
        .map(|e| e.kubeconfig_secret_ref.name.as_str());
    if external_secret != Some(secret_name.as_str()) {
        let api: Api<Secret> = Api::namespaced(host.clone(), &names.namespace);
        let action = converge::<Secret>(
            &api,
            &secret_name,
            None,
            &|l| names.is_our_kubeconfig(l),
            &[],
        )
        .await
        .map_err(converge_error("Secret", &names.namespace, &secret_name))?;
        if action == ObjectAction::Deleted {
            outcome
                .deleted
                .push(format!("Secret {}/{secret_name}", names.namespace));
        }
    }

    let namespaces: Api<Namespace> = Api::all(host.clone());
    let ns_err = host_error("Namespace", "", cp_ns);
    let Some(namespace) = namespaces
        .get_opt(cp_ns)
        .await
        .map_err(|e| ns_err("get", e))?
    else {
        return Ok(outcome);
    };
    // We never create anything in a namespace that is not ours.
    if !namespace_is_ours(namespace.labels(), &names.namespace) {
        return Ok(outcome);
    }

    let ours = |labels: &BTreeMap<String, String>| names.is_ours(labels);
    let sts_api: Api<StatefulSet> = Api::namespaced(host.clone(), cp_ns);
    if converge::<StatefulSet>(&sts_api, &names.cp_name, None, &ours, &[])
        .await
        .map_err(converge_error("StatefulSet", cp_ns, &names.cp_name))?
        == ObjectAction::Deleted
    {
        outcome
            .deleted
            .push(format!("StatefulSet {cp_ns}/{}", names.cp_name));
    }
    let services: Api<Service> = Api::namespaced(host.clone(), cp_ns);
    for name in [
        headless_name(&names.tenant),
        names.cp_name.clone(),
        load_balancer_name(&names.tenant),
    ] {
        if converge::<Service>(&services, &name, None, &ours, &[])
            .await
            .map_err(converge_error("Service", cp_ns, &name))?
            == ObjectAction::Deleted
        {
            outcome.deleted.push(format!("Service {cp_ns}/{name}"));
        }
    }
    let secrets: Api<Secret> = Api::namespaced(host.clone(), cp_ns);
    for name in [bootstrap_name(&names.tenant), serving_name(&names.tenant)] {
        if converge::<Secret>(&secrets, &name, None, &ours, &[])
            .await
            .map_err(converge_error("Secret", cp_ns, &name))?
            == ObjectAction::Deleted
        {
            outcome.deleted.push(format!("Secret {cp_ns}/{name}"));
        }
    }
    // A StatefulSet leaves its PVCs behind (the retention policy that could delete
    // them is newer than the servers we support).
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(host.clone(), cp_ns);
    let selector = names
        .selector()
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",");
    let list = claims
        .list(&ListParams::default().labels(&selector))
        .await
        .map_err(|e| host_error("PersistentVolumeClaim", cp_ns, "")("list", e))?;
    for claim in list.items.iter().filter(|c| names.is_ours(c.labels())) {
        let name = claim.name_any();
        match claims.delete(&name, &exactly(claim.uid())).await {
            Ok(_) => outcome
                .deleted
                .push(format!("PersistentVolumeClaim {cp_ns}/{name}")),
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
            Err(e) => {
                return Err(host_error("PersistentVolumeClaim", cp_ns, &name)(
                    "delete", e,
                ));
            }
        }
    }

    // The namespace is shared by the TenantClusters of one namespace: it goes with the
    // last one that needs it. TenantClusters being deleted do not count, or two
    // deleted together would each wait for the other.
    let tcs: Api<TenantCluster> = Api::namespaced(host.clone(), &names.namespace);
    let others_need_it = tcs
        .list(&ListParams::default())
        .await
        .map_err(|e| host_error("TenantCluster", &names.namespace, "")("list", e))?
        .items
        .iter()
        .any(|other| {
            other.metadata.name.as_deref() != Some(names.tenant.as_str())
                && other.metadata.deletion_timestamp.is_none()
                && other.spec.control_plane.external.is_none()
        });
    let this_needs_it =
        tc.metadata.deletion_timestamp.is_none() && tc.spec.control_plane.external.is_none();
    if !others_need_it && !this_needs_it && namespace.metadata.deletion_timestamp.is_none() {
        match namespaces.delete(cp_ns, &exactly(namespace.uid())).await {
            Ok(_) => outcome.namespace_deleted = true,
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
            Err(e) => return Err(ns_err("delete", e)),
        }
    }
    tracing::info!(tenant = %names.tenant, namespace = %names.namespace, ?outcome, "control plane cleaned up");
    Ok(outcome)
}

#[cfg(test)]
mod tests {
    use tenantplane_api::TenantClusterSpec;

    use super::*;

    fn tc(extra: Value) -> TenantCluster {
        let mut spec = json!({
            "isolationProfileRef": {"name": "restricted"},
            "syncPolicyRef": {"name": "default"},
        });
        if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra.as_object()) {
            spec.extend(extra.clone());
        }
        let spec: TenantClusterSpec = serde_json::from_value(spec).unwrap();
        let mut tc = TenantCluster::new("dev", spec);
        tc.metadata.namespace = Some("team-dev".into());
        tc
    }

    #[test]
    fn names_follow_the_tenant_and_its_namespace() {
        assert_eq!(control_plane_namespace("team-dev"), "team-dev-cp");
        assert_eq!(kubeconfig_secret_name("dev"), "dev-kubeconfig");
        assert_eq!(
            in_cluster_endpoint("dev", "team-dev"),
            "https://dev-cp.team-dev-cp.svc:6443"
        );
    }

    #[test]
    fn k3s_runs_without_agent_or_add_ons_and_serves_every_name() {
        let tc = tc(json!({"controlPlane": {"extraSANs": ["api.dev.example.com", "dev-cp"]}}));
        let names = Names::of(&tc).unwrap();
        let args = k3s_args(&names, &tc.spec.control_plane.extra_sans, "10.96.0.0/12");
        assert_eq!(args[0], "server");
        assert!(args.contains(&"--service-cidr=10.96.0.0/12".to_owned()));
        assert!(args.contains(
            &"--kube-controller-manager-arg=controllers=*,-endpoint,-endpointslice,-endpointslicemirroring"
                .to_owned()
        ));
        assert!(args.contains(&"--disable-agent".to_owned()));
        assert!(args.contains(
            &"--disable=traefik,servicelb,metrics-server,local-storage,coredns".to_owned()
        ));
        assert!(
            !args
                .iter()
                .any(|a| a.starts_with("--datastore-endpoint") || a == "--cluster-init")
        );
        let sans: Vec<&str> = args
            .iter()
            .filter_map(|a| a.strip_prefix("--tls-san="))
            .collect();
        assert_eq!(
            sans,
            [
                "dev-cp",
                "dev-cp.team-dev-cp",
                "dev-cp.team-dev-cp.svc",
                "dev-cp.team-dev-cp.svc.cluster.local",
                "api.dev.example.com",
            ]
        );
    }

    #[test]
    fn the_statefulset_and_services_are_well_formed() {
        let tc = tc(
            json!({"kubernetesVersion": "v1.31", "controlPlane": {"storage": {"storageClassName": "fast", "size": "10Gi"}}}),
        );
        let names = Names::of(&tc).unwrap();
        let version = versions::resolve("v1.31").unwrap();
        let sts: StatefulSet = build(
            "StatefulSet",
            statefulset(&names, &tc, version, "10.0.0.0/24", true),
        )
        .unwrap();
        let v = serde_json::to_value(&sts).unwrap();
        assert_eq!(
            v["spec"]["template"]["spec"]["containers"][0]["image"],
            version.k3s_image
        );
        assert_eq!(
            v["spec"]["volumeClaimTemplates"][0]["spec"]["storageClassName"],
            "fast"
        );
        assert_eq!(
            v["spec"]["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]["storage"],
            "10Gi"
        );
        // The API server presents the issued client certificate to kubelets (the
        // kubelet endpoint), mounted from the bootstrap Secret; older bootstraps
        // without one start without the flags.
        let container = &v["spec"]["template"]["spec"]["containers"][0];
        let args: Vec<&str> = container["args"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap())
            .collect();
        assert!(args.contains(&"--kube-apiserver-arg=kubelet-client-certificate=/etc/tenantplane/kubelet-client/kubelet-client.crt"), "{args:?}");
        assert!(args.contains(&"--kube-apiserver-arg=kubelet-client-key=/etc/tenantplane/kubelet-client/kubelet-client.key"), "{args:?}");
        let mounts = container["volumeMounts"].as_array().unwrap();
        assert!(
            mounts
                .iter()
                .any(|m| m["subPath"] == KEY_KUBELET_KEY && m["readOnly"] == true)
        );
        let without = serde_json::to_value(
            build::<StatefulSet>(
                "StatefulSet",
                statefulset(&names, &tc, version, "10.0.0.0/24", false),
            )
            .unwrap(),
        )
        .unwrap();
        let container = &without["spec"]["template"]["spec"]["containers"][0];
        assert!(
            !container.to_string().contains("kubelet-client"),
            "{container}"
        );
        for s in [ServiceKind::Headless, ServiceKind::ClusterIp] {
            let svc = service(&names, s).unwrap();
            assert_eq!(svc.spec.unwrap().ports.unwrap()[0].port, 6443);
        }
    }

    #[test]
    fn the_kubeconfig_parses_and_points_at_the_service() {
        let (ca_pem, _) = server_ca("test").unwrap();
        let token = random_hex(32).unwrap();
        assert_eq!(token.len(), 64);
        assert_ne!(token, random_hex(32).unwrap());
        let yaml = kubeconfig_yaml(
            "dev",
            &in_cluster_endpoint("dev", "team-dev"),
            &Bootstrap {
                ca_pem: ca_pem.clone(),
                admin_token: token.clone(),
                kubelet_cert_pem: None,
                ca_key_pem: None,
                missing_for_k8s: None,
                syncer_token: None,
            },
        );
        let config = kube::config::Kubeconfig::from_yaml(&yaml).unwrap();
        let cluster = config.clusters[0].cluster.as_ref().unwrap();
        assert_eq!(
            cluster.server.as_deref(),
            Some("https://dev-cp.team-dev-cp.svc:6443")
        );
        let ca = base64::engine::general_purpose::STANDARD
            .decode(cluster.certificate_authority_data.as_ref().unwrap())
            .unwrap();
        assert_eq!(ca, ca_pem.as_bytes());
        assert_eq!(config.current_context.as_deref(), Some("dev"));
    }
}

/// Pins core's typed builders to the json! ones they replace (removed with them).
#[cfg(test)]
mod equivalence {
    use tenantplane_core::control_plane as core_cp;

    use super::*;

    fn tc(extra: Value) -> TenantCluster {
        let mut spec = json!({
            "isolationProfileRef": {"name": "restricted"},
            "syncPolicyRef": {"name": "default"},
        });
        if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra.as_object()) {
            spec.extend(extra.clone());
        }
        let mut tc = TenantCluster::new("dev", serde_json::from_value(spec).unwrap());
        tc.metadata.namespace = Some("team-dev".into());
        tc
    }

    #[test]
    fn core_builds_what_the_json_builders_built() {
        let specs = [
            json!({}),
            json!({"controlPlane": {"extraSANs": ["api.dev.example.com", "dev-cp"]}}),
            json!({"kubernetesVersion": "v1.31", "controlPlane": {"storage": {"storageClassName": "fast", "size": "10Gi"}}}),
            json!({"controlPlane": {"distro": "k8s", "extraSANs": ["x.example.com"]}}),
            json!({"controlPlane": {"distro": "k8s", "images": {"apiServer": "a:1", "etcd": "e:1", "controllerManager": "c:1"}}}),
            json!({"controlPlane": {"images": {"k3s": "my/k3s:1"}, "expose": {"loadBalancer": {"enabled": true, "annotations": {"a": "b"}}}}}),
            json!({"controlPlane": {"expose": {"loadBalancer": {"enabled": true}}}}),
        ];
        for spec in specs {
            let tc = tc(spec.clone());
            let names = Names::of(&tc).unwrap();
            let core_names = core_cp::names::ControlPlaneNames::of(&tc).unwrap();
            let version = versions::resolve(&tc.spec.kubernetes_version).unwrap();
            for cidr in ["10.0.0.0/24", "10.96.0.0/12"] {
                for kubelet_client in [true, false] {
                    let old: StatefulSet =
                        build("StatefulSet", statefulset(&names, &tc, version, cidr, kubelet_client)).unwrap();
                    let new = core_cp::objects::statefulset(&core_names, &tc, version, cidr, kubelet_client);
                    assert_eq!(serde_json::to_value(&new).unwrap(), serde_json::to_value(&old).unwrap(), "{spec}");
                }
                assert_eq!(names.serving_sans(&tc.spec.control_plane.extra_sans, cidr), core_names.serving_sans(&tc.spec.control_plane.extra_sans, cidr));
            }
            let annotations = tc.spec.control_plane.expose.load_balancer.clone().unwrap_or_default().annotations;
            for (old, new) in [
                (ServiceKind::Headless, core_cp::objects::ServiceKind::Headless),
                (ServiceKind::ClusterIp, core_cp::objects::ServiceKind::ClusterIp),
                (ServiceKind::LoadBalancer(&annotations), core_cp::objects::ServiceKind::LoadBalancer(&annotations)),
            ] {
                let old = service(&names, old).unwrap();
                let new = core_cp::objects::service(&core_names, new);
                assert_eq!(serde_json::to_value(&new).unwrap(), serde_json::to_value(&old).unwrap(), "{spec}");
            }
            assert_eq!(names.labels(), core_names.labels());
            assert_eq!(names.kubeconfig_labels(), core_names.kubeconfig_labels());
        }
        let (ca_pem, _) = server_ca("test").unwrap();
        let token = random_hex(32).unwrap();
        let bootstrap = Bootstrap { ca_pem: ca_pem.clone(), admin_token: token.clone(), kubelet_cert_pem: None, ca_key_pem: None, missing_for_k8s: None, syncer_token: None };
        let endpoint = in_cluster_endpoint("dev", "team-dev");
        assert_eq!(
            core_cp::kubeconfig::tenant_kubeconfig("dev", &endpoint, &ca_pem, &token).unwrap(),
            kubeconfig_yaml("dev", &endpoint, &bootstrap)
        );
        assert_eq!(
            core_cp::k8s::controller_manager_kubeconfig(&token).unwrap(),
            k8s::controller_manager_kubeconfig(&token)
        );
        assert_eq!(
            core_cp::tokens_csv("a", "s", "c"),
            format!("a,{ADMIN_USER},{ADMIN_USER},\"system:masters\"\ns,{SYNCER_USER},{SYNCER_USER},\"system:masters\"\nc,{u},{u}\n", u = k8s::CONTROLLER_MANAGER_USER)
        );
    }
}
