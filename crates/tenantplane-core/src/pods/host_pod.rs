//! The host Pod for a tenant Pod: the generic transform, then every reference
//! rewritten to its host copy, the tenant's API server in place of the host's,
//! service-account tokens from a host Secret, and the IsolationProfile enforced.

use std::net::IpAddr;

use serde_json::{Map, Value, json};

use crate::kinds::{GroupKind, Scope};
use crate::metadata::{
    ANNOTATION_VIRTUAL_NAME, ANNOTATION_VIRTUAL_NAMESPACE, ANNOTATION_VIRTUAL_UID,
};
use crate::name_rules::NameError;
use crate::naming::{SourceName, host_name, identity_hash};
use crate::transform::{Placement, TenantTarget, TransformError, to_host};

use super::controls::{PodControls, PodRefusal, check_pod};
use super::dns::{PodDns, apply_pod_dns};
use super::refs::{CONTAINER_LISTS, PodReference, pod_references};

/// The names a Pod uses for its own API server; on the host they point at the tenant's.
pub const KUBERNETES_HOSTNAMES: [&str; 3] =
    ["kubernetes", "kubernetes.default", "kubernetes.default.svc"];

/// Prefix of the host Secret holding a Pod's service-account tokens.
pub const TOKEN_SECRET_PREFIX: &str = "tenantplane-token-";

/// Where Pods reach the tenant's API server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TenantApiEndpoint {
    pub host: String,
    pub port: u16,
}

impl TenantApiEndpoint {
    /// From a URL like `https://10.0.0.7:6443` or `https://dev-cp.ns.svc:6443`
    /// (443 when no port is given). `None` for anything else.
    pub fn from_url(url: &str) -> Option<Self> {
        let rest = url.strip_prefix("https://")?;
        let authority = rest.split('/').next()?;
        if authority.is_empty() || authority.contains('@') {
            return None;
        }
        let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
            let (host, after) = v6.split_once(']')?;
            let port = match after.strip_prefix(':') {
                Some(p) => p.parse().ok()?,
                None if after.is_empty() => 443,
                None => return None,
            };
            (host.to_owned(), port)
        } else {
            match authority.rsplit_once(':') {
                Some((host, port)) => (host.to_owned(), port.parse().ok()?),
                None => (authority.to_owned(), 443),
            }
        };
        (!host.is_empty()).then_some(Self { host, port })
    }

    /// Its address, when the host is an IP: only then can hostAliases name it.
    pub fn ip(&self) -> Option<IpAddr> {
        self.host.parse().ok()
    }
}

/// What the host Pod transform needs besides the Pod.
#[derive(Clone, Debug, Default)]
pub struct HostPodContext {
    pub controls: PodControls,
    /// `None` leaves the host's own API server in place (nothing to point at).
    pub api_endpoint: Option<TenantApiEndpoint>,
    /// How the host Pod resolves names (the tenant's DNS server once it has an IP).
    pub dns: PodDns,
}

/// One projected service-account token the host Pod mounts from its token Secret.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenProjection {
    /// The key in the token Secret.
    pub key: String,
    pub audience: Option<String>,
    pub expiration_seconds: i64,
    /// Where the tenant Pod asked for it.
    pub field: String,
}

/// The host Pod and what it needs on the host before it is created.
#[derive(Clone, Debug)]
pub struct HostPod {
    pub placement: Placement,
    pub object: Value,
    /// Every reference of the tenant Pod (its dependencies).
    pub references: Vec<PodReference>,
    /// Tokens to request from the tenant API server into [`token_secret_name`].
    pub tokens: Vec<TokenProjection>,
    /// The tenant Pod's service account (`default` when unset).
    pub service_account: String,
}

/// Why a tenant Pod cannot become a host Pod.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HostPodError {
    #[error(transparent)]
    Transform(#[from] TransformError),
    #[error("{}", refused_message(.0))]
    Refused(Vec<PodRefusal>),
    #[error("{field} names {name:?}, which is not a valid {kind} name: {error}")]
    InvalidReference {
        field: String,
        kind: &'static str,
        name: String,
        error: NameError,
    },
}

fn refused_message(refusals: &[PodRefusal]) -> String {
    let fields: Vec<String> = refusals
        .iter()
        .map(|r| format!("{} ({})", r.field, r.control))
        .collect();
    format!("refused by the IsolationProfile: {}", fields.join(", "))
}

/// Default token lifetime the API server gives a projected token without one.
const DEFAULT_TOKEN_SECONDS: i64 = 3600;

/// The name of the host Secret holding the tokens of tenant Pod `namespace/name`.
/// An unhashed host name never takes this form (it holds `-x-` twice), a hashed one
/// only through a 64-bit hash collision; the engine checks the Secret's metadata
/// before every write anyway.
pub fn token_secret_name(target: &TenantTarget, namespace: &str, pod: &str) -> String {
    let hash = identity_hash(&SourceName {
        name: pod,
        virtual_namespace: namespace,
        tenant: &target.tenant,
    });
    format!("{TOKEN_SECRET_PREFIX}{hash}")
}

/// The host name of a dependency of a Pod in `namespace`.
pub fn dependency_host_name(target: &TenantTarget, namespace: &str, name: &str) -> String {
    host_name(&SourceName {
        name,
        virtual_namespace: namespace,
        tenant: &target.tenant,
    })
    .name
}

/// The host Pod for `tenant_pod`. Pure; every refusal is a typed error.
pub fn to_host_pod(
    target: &TenantTarget,
    tenant_pod: &Value,
    ctx: &HostPodContext,
) -> Result<HostPod, HostPodError> {
    let refusals = check_pod(tenant_pod, &ctx.controls);
    if !refusals.is_empty() {
        return Err(HostPodError::Refused(refusals));
    }
    let (placement, mut object) = to_host(
        target,
        &GroupKind::new("", "Pod"),
        Scope::Namespaced,
        tenant_pod,
    )?;
    let references = pod_references(tenant_pod);
    for r in &references {
        r.kind
            .group_kind()
            .name_rule()
            .validate(&r.name)
            .map_err(|error| HostPodError::InvalidReference {
                field: r.field.clone(),
                kind: r.kind.as_str(),
                name: r.name.clone(),
                error,
            })?;
        if let Some(slot) = object.pointer_mut(&r.pointer) {
            *slot = Value::String(dependency_host_name(
                target,
                &placement.virtual_namespace,
                &r.name,
            ));
        }
    }
    let service_account = tenant_pod
        .pointer("/spec/serviceAccountName")
        .or_else(|| tenant_pod.pointer("/spec/serviceAccount"))
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .unwrap_or("default")
        .to_owned();
    let secret = token_secret_name(
        target,
        &placement.virtual_namespace,
        &placement.virtual_name,
    );
    let Some(spec) = object.get_mut("spec").and_then(Value::as_object_mut) else {
        return Err(TransformError::Malformed { field: "spec" }.into());
    };
    let tokens = translate_tokens(spec, &secret);
    redirect_downward_api(spec);
    // The host's service account and its token mean nothing to the tenant: the Pod
    // runs as the host namespace's default account with nothing mounted, and the
    // host namespace's Services are not announced in its environment.
    spec.remove("serviceAccountName");
    spec.remove("serviceAccount");
    spec.insert("automountServiceAccountToken".into(), Value::Bool(false));
    spec.insert("enableServiceLinks".into(), Value::Bool(false));
    // Ephemeral containers can only be added through their subresource, never at creation.
    spec.remove("ephemeralContainers");
    if let Some(class) = &ctx.controls.runtime_class_name {
        spec.insert("runtimeClassName".into(), Value::String(class.clone()));
    }
    if let Some(endpoint) = &ctx.api_endpoint {
        point_at_tenant_api(spec, endpoint);
    }
    apply_pod_dns(spec, &placement.virtual_namespace, &ctx.dns);
    Ok(HostPod {
        placement,
        object,
        references,
        tokens,
        service_account,
    })
}

/// Replaces each projected `serviceAccountToken` source by the matching key of the
/// token Secret (same path and mode), and returns what to request.
fn translate_tokens(spec: &mut Map<String, Value>, secret: &str) -> Vec<TokenProjection> {
    let mut tokens = Vec::new();
    let Some(volumes) = spec.get_mut("volumes").and_then(Value::as_array_mut) else {
        return tokens;
    };
    for (i, volume) in volumes.iter_mut().enumerate() {
        let Some(sources) = volume
            .pointer_mut("/projected/sources")
            .and_then(Value::as_array_mut)
        else {
            continue;
        };
        for (s, source) in sources.iter_mut().enumerate() {
            let Some(token) = source.get("serviceAccountToken") else {
                continue;
            };
            let key = format!("token-{i}-{s}");
            let path = token
                .get("path")
                .and_then(Value::as_str)
                .unwrap_or("token")
                .to_owned();
            tokens.push(TokenProjection {
                key: key.clone(),
                audience: token
                    .get("audience")
                    .and_then(Value::as_str)
                    .map(str::to_owned),
                expiration_seconds: token
                    .get("expirationSeconds")
                    .and_then(Value::as_i64)
                    .unwrap_or(DEFAULT_TOKEN_SECONDS),
                field: format!("spec.volumes[{i}].projected.sources[{s}].serviceAccountToken"),
            });
            *source = json!({"secret": {"name": secret, "items": [{"key": key, "path": path}]}});
        }
    }
    tokens
}

/// The downward API reads the host Pod; its name, namespace and UID are the host's.
/// The tenant's values are in the host Pod's annotations, so read those instead.
fn redirect_downward_api(spec: &mut Map<String, Value>) {
    let redirect = |field_ref: &mut Value| {
        let Some(path) = field_ref.get_mut("fieldPath") else {
            return;
        };
        let annotation = match path.as_str() {
            Some("metadata.name") => ANNOTATION_VIRTUAL_NAME,
            Some("metadata.namespace") => ANNOTATION_VIRTUAL_NAMESPACE,
            Some("metadata.uid") => ANNOTATION_VIRTUAL_UID,
            _ => return,
        };
        *path = Value::String(format!("metadata.annotations['{annotation}']"));
    };
    for list in CONTAINER_LISTS {
        for container in spec
            .get_mut(list)
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
        {
            for env in container
                .get_mut("env")
                .and_then(Value::as_array_mut)
                .into_iter()
                .flatten()
            {
                if let Some(field_ref) = env.pointer_mut("/valueFrom/fieldRef") {
                    redirect(field_ref);
                }
            }
        }
    }
    for volume in spec
        .get_mut("volumes")
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
    {
        let mut item_lists: Vec<&mut Value> = Vec::new();
        if let Some(volume) = volume.as_object_mut() {
            for (key, value) in volume.iter_mut() {
                match key.as_str() {
                    "downwardAPI" => item_lists.extend(value.get_mut("items")),
                    "projected" => {
                        for source in value
                            .get_mut("sources")
                            .and_then(Value::as_array_mut)
                            .into_iter()
                            .flatten()
                        {
                            item_lists.extend(source.pointer_mut("/downwardAPI/items"));
                        }
                    }
                    _ => {}
                }
            }
        }
        for items in item_lists {
            for item in items.as_array_mut().into_iter().flatten() {
                if let Some(field_ref) = item.get_mut("fieldRef") {
                    redirect(field_ref);
                }
            }
        }
    }
}

/// `KUBERNETES_SERVICE_HOST/PORT` in every container, and the `kubernetes` names
/// resolved to the tenant's API server when its address is an IP.
fn point_at_tenant_api(spec: &mut Map<String, Value>, endpoint: &TenantApiEndpoint) {
    let ours = [
        ("KUBERNETES_SERVICE_HOST", endpoint.host.clone()),
        ("KUBERNETES_SERVICE_PORT", endpoint.port.to_string()),
    ];
    for list in ["containers", "initContainers"] {
        for container in spec
            .get_mut(list)
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
        {
            let Some(container) = container.as_object_mut() else {
                continue;
            };
            let env = container
                .entry("env")
                .or_insert_with(|| Value::Array(Vec::new()));
            if !env.is_array() {
                *env = Value::Array(Vec::new());
            }
            if let Some(env) = env.as_array_mut() {
                env.retain(|e| {
                    !ours
                        .iter()
                        .any(|(name, _)| e.get("name").and_then(Value::as_str) == Some(*name))
                });
                env.extend(
                    ours.iter()
                        .map(|(name, value)| json!({"name": name, "value": value})),
                );
            }
        }
    }
    if let Some(ip) = endpoint.ip() {
        let aliases = spec
            .entry("hostAliases")
            .or_insert_with(|| Value::Array(Vec::new()));
        if !aliases.is_array() {
            *aliases = Value::Array(Vec::new());
        }
        if let Some(aliases) = aliases.as_array_mut() {
            aliases.push(json!({"ip": ip.to_string(), "hostnames": KUBERNETES_HOSTNAMES}));
        }
    }
}

#[cfg(test)]
#[path = "host_pod_tests.rs"]
mod tests;
