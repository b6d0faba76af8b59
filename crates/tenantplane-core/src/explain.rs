//! The answer to "where will this tenant object land, and why?". `tenantplane
//! explain-sync` prints it offline; the engine's decisions carry the same reason.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::kinds::{GroupKind, Scope};
use crate::selectors::{TenantNamespaces, host_selectors};
use crate::transform::{
    Placement, TenantTarget, TransformError, is_system_namespace, place, to_host_in,
};

/// What `explain-sync` is asked about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExplainRequest {
    pub tenant: String,
    /// The TenantCluster's namespace on the host.
    pub tenant_namespace: String,
    pub virtual_namespace: String,
    pub name: String,
    pub api_version: String,
    pub kind: String,
}

/// The predicted host object, in the shape tenantplane has always printed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Explanation {
    pub tenant_resource: TenantResource,
    /// Absent when the object is skipped.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host_resource: Option<HostResource>,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    /// The host object's label selectors by field, when the tenant object was given
    /// whole (`explain-sync -f`): the same rewrite the engine applies.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub selectors: BTreeMap<String, serde_json::Value>,
    /// `Sync` or `Skip`.
    pub action: &'static str,
    pub reason: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TenantResource {
    pub api_version: String,
    pub kind: String,
    pub namespace: String,
    pub name: String,
    pub tenant: String,
    pub tenant_namespace: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HostResource {
    pub api_version: String,
    pub kind: String,
    pub namespace: String,
    pub name: String,
    pub hashed: bool,
}

/// Explains where a tenant object lands. Offline, the scope of a kind comes from
/// the built-in list of cluster-scoped kinds; the engine asks discovery instead.
pub fn explain(request: &ExplainRequest) -> Result<Explanation, TransformError> {
    let target = TenantTarget::new(&request.tenant, &request.tenant_namespace)?;
    let group_kind = GroupKind::from_api_version(&request.api_version, &request.kind)?;
    let scope = if group_kind.is_known_cluster_scoped() {
        Scope::Cluster
    } else {
        Scope::Namespaced
    };
    let tenant_resource = TenantResource {
        api_version: request.api_version.clone(),
        kind: request.kind.clone(),
        namespace: request.virtual_namespace.clone(),
        name: request.name.clone(),
        tenant: request.tenant.clone(),
        tenant_namespace: request.tenant_namespace.clone(),
    };
    match place(
        &target,
        &group_kind,
        scope,
        &request.virtual_namespace,
        &request.name,
        None,
    ) {
        Ok(placement) => Ok(Explanation {
            reason: sync_reason(&target, &placement),
            host_resource: Some(HostResource {
                api_version: request.api_version.clone(),
                kind: request.kind.clone(),
                namespace: placement.host_namespace.clone(),
                name: placement.host_name.name.clone(),
                hashed: placement.host_name.hashed.is_some(),
            }),
            labels: placement.metadata.labels,
            annotations: placement.metadata.annotations,
            selectors: BTreeMap::new(),
            tenant_resource,
            action: "Sync",
        }),
        // A system namespace is not bad input: the answer is that it is skipped.
        Err(TransformError::SystemNamespace { namespace }) if is_system_namespace(&namespace) => {
            Ok(Explanation {
                tenant_resource,
                host_resource: None,
                labels: BTreeMap::new(),
                annotations: BTreeMap::new(),
                selectors: BTreeMap::new(),
                action: "Skip",
                reason: format!(
                    "{namespace} is a tenant system namespace; its objects are never synced to the host"
                ),
            })
        }
        Err(err) => Err(err),
    }
}

/// [`explain`] for a whole tenant object: also transforms it as the engine would,
/// and reports the host copy's selectors. A selector the engine would refuse makes
/// the answer a `Skip` with the engine's reason. `namespaces` are the tenant's
/// namespaces (offline, usually none: a labelled NetworkPolicy `namespaceSelector`
/// then matches nothing).
pub fn explain_object(
    tenant: &str,
    tenant_namespace: &str,
    object: &serde_json::Value,
    namespaces: &TenantNamespaces,
) -> Result<Explanation, TransformError> {
    let field = |pointer: &str, name: &'static str| {
        object
            .pointer(pointer)
            .and_then(serde_json::Value::as_str)
            .map(str::to_owned)
            .ok_or(TransformError::Malformed { field: name })
    };
    let request = ExplainRequest {
        tenant: tenant.to_owned(),
        tenant_namespace: tenant_namespace.to_owned(),
        virtual_namespace: field("/metadata/namespace", "metadata.namespace")
            .unwrap_or_else(|_| "default".to_owned()),
        name: field("/metadata/name", "metadata.name")?,
        api_version: field("/apiVersion", "apiVersion")?,
        kind: field("/kind", "kind")?,
    };
    let mut explanation = explain(&request)?;
    if explanation.action != "Sync" {
        return Ok(explanation);
    }
    let target = TenantTarget::new(tenant, tenant_namespace)?;
    let group_kind = GroupKind::from_api_version(&request.api_version, &request.kind)?;
    let mut object = object.clone();
    if let Some(meta) = object
        .get_mut("metadata")
        .and_then(serde_json::Value::as_object_mut)
    {
        meta.insert("namespace".into(), request.virtual_namespace.clone().into());
    }
    match to_host_in(&target, &group_kind, Scope::Namespaced, &object, namespaces) {
        Ok((_, host)) => explanation.selectors = host_selectors(&group_kind, &host),
        Err(err @ TransformError::Selector(_)) => {
            explanation.action = "Skip";
            explanation.reason = format!("cannot be synced: {err}");
        }
        Err(err) => return Err(err),
    }
    Ok(explanation)
}

/// The reason a synced object lands where it does, as decisions and the CLI say it.
pub fn sync_reason(target: &TenantTarget, placement: &Placement) -> String {
    let naming = match placement.host_name.hashed {
        None => "<name>-x-<virtual namespace>-x-<tenant>".to_owned(),
        Some(why) => format!("hashed because {}", why.describe()),
    };
    format!(
        "{} {}/{} of TenantCluster {}/{} is synced toHost as {}/{} ({naming})",
        placement.group_kind,
        placement.virtual_namespace,
        placement.virtual_name,
        target.host_namespace,
        target.tenant,
        placement.host_namespace,
        placement.host_name.name,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(name: &str, ns: &str) -> ExplainRequest {
        ExplainRequest {
            tenant: "dev".into(),
            tenant_namespace: "team-dev".into(),
            virtual_namespace: ns.into(),
            name: name.into(),
            api_version: "v1".into(),
            kind: "Pod".into(),
        }
    }

    #[test]
    fn a_whole_object_shows_its_rewritten_selectors_or_why_not() {
        let svc = serde_json::json!({"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "web", "namespace": "shop"}, "spec": {"selector": {"app": "web"}}});
        let e = explain_object("dev", "team-dev", &svc, &TenantNamespaces::new()).unwrap();
        assert_eq!(e.action, "Sync");
        assert_eq!(
            e.selectors["spec.selector"],
            serde_json::json!({"app": "web", "tenantplane.io/tenant": "dev", "tenantplane.io/virtual-namespace": "shop"})
        );
        let mut forged = svc.clone();
        forged["spec"]["selector"]["tenantplane.io/tenant"] = "prod".into();
        let e = explain_object("dev", "team-dev", &forged, &TenantNamespaces::new()).unwrap();
        assert_eq!(e.action, "Skip");
        assert!(e.reason.contains("spec.selector"), "{}", e.reason);
        assert!(e.selectors.is_empty());
    }

    #[test]
    fn nginx_lands_as_the_seed_says() {
        let e = explain(&request("nginx", "default")).unwrap();
        let host = e.host_resource.unwrap();
        assert_eq!(
            (host.namespace.as_str(), host.name.as_str()),
            ("team-dev", "nginx-x-default-x-dev")
        );
        assert!(!host.hashed);
        assert_eq!(e.action, "Sync");
        assert_eq!(e.labels["tenantplane.io/tenant"], "dev");
        assert_eq!(e.annotations["tenantplane.io/virtual-name"], "nginx");
        assert!(
            e.reason.contains("team-dev/nginx-x-default-x-dev"),
            "{}",
            e.reason
        );
    }

    #[test]
    fn system_namespaces_are_explained_as_skips() {
        let e = explain(&request("coredns", "kube-system")).unwrap();
        assert_eq!(e.action, "Skip");
        assert!(e.host_resource.is_none());
        assert!(e.reason.contains("system namespace"));
    }

    #[test]
    fn hashed_names_say_why() {
        let e = explain(&request(&"a".repeat(60), "default")).unwrap();
        assert!(e.host_resource.unwrap().hashed);
        assert!(e.reason.contains("exceed 63"), "{}", e.reason);
    }

    #[test]
    fn invalid_input_is_an_error() {
        assert!(explain(&request("", "default")).is_err());
        assert!(explain(&request("Nginx", "default")).is_err());
        assert!(explain(&request("nginx", "Default")).is_err());
        let mut r = request("pv", "default");
        r.kind = "PersistentVolume".into();
        assert!(
            explain(&r)
                .unwrap_err()
                .to_string()
                .contains("cluster-scoped")
        );
    }
}
