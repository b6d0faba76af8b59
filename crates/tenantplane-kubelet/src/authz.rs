//! Which host Pod a kubelet-API path may reach: only the host copy of a synced
//! Pod of the calling TenantCluster, found by the core naming function in the
//! TenantCluster's namespace and checked by reverse lookup of its metadata.

use k8s_openapi::api::core::v1::Pod;
use tenantplane_core::kinds::GroupKind;
use tenantplane_core::name_rules::validate_namespace_name;
use tenantplane_core::naming::{SourceName, host_name};
use tenantplane_core::provenance::{Provenance, SourceIdentity, provenance};

use crate::registry::TenantClusterKey;

/// What a request names: a tenant Pod (and container) of the calling TenantCluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodTarget {
    pub tenant_cluster: TenantClusterKey,
    /// The tenant namespace.
    pub namespace: String,
    /// The tenant Pod.
    pub pod: String,
    pub container: Option<String>,
}

impl PodTarget {
    /// The source identity the host copy must carry.
    pub fn identity(&self) -> SourceIdentity {
        SourceIdentity {
            tenant: self.tenant_cluster.name.clone(),
            virtual_namespace: self.namespace.clone(),
            name: self.pod.clone(),
            group_kind: GroupKind::new("", "Pod"),
            uid: None,
        }
    }

    /// The host Pod's name: what the engine names its copy of this tenant Pod.
    /// `Err` when the names are not valid Kubernetes names (no tenant Pod has them).
    pub fn host_name(&self) -> Result<String, String> {
        validate_namespace_name(&self.namespace)
            .map_err(|e| format!("namespace {:?} is not a valid name: {e}", self.namespace))?;
        GroupKind::new("", "Pod")
            .name_rule()
            .validate(&self.pod)
            .map_err(|e| format!("pod name {:?} is not a valid name: {e}", self.pod))?;
        Ok(host_name(&SourceName {
            name: &self.pod,
            virtual_namespace: &self.namespace,
            tenant: &self.tenant_cluster.name,
        })
        .name)
    }
}

/// Why a host Pod may not be reached for this target (the 403 message).
pub fn check_host_pod(target: &PodTarget, host_name: &str, pod: &Pod) -> Result<(), String> {
    let labels = pod.metadata.labels.clone().unwrap_or_default();
    let annotations = pod.metadata.annotations.clone().unwrap_or_default();
    let actual = pod.metadata.name.as_deref().unwrap_or_default();
    if actual != host_name {
        return Err(format!(
            "the host Pod is named {actual:?}, not {host_name:?}"
        ));
    }
    match provenance(&target.identity(), actual, &labels, &annotations) {
        Provenance::Ours => {}
        other => {
            return Err(other
                .refusal()
                .unwrap_or_else(|| "the host Pod is not this tenant's".to_owned()));
        }
    }
    if let Some(container) = &target.container {
        let spec = pod.spec.as_ref();
        let mut names = spec
            .map(|s| {
                s.containers
                    .iter()
                    .map(|c| c.name.as_str())
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default();
        if let Some(init) = spec.and_then(|s| s.init_containers.as_ref()) {
            names.extend(init.iter().map(|c| c.name.as_str()));
        }
        if let Some(ephemeral) = spec.and_then(|s| s.ephemeral_containers.as_ref()) {
            names.extend(ephemeral.iter().map(|c| c.name.as_str()));
        }
        if !names.contains(&container.as_str()) {
            return Err(format!(
                "the Pod has no container {container:?} (it has {})",
                names.join(", ")
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;
    use tenantplane_core::metadata::{
        ANNOTATION_VIRTUAL_GROUP_KIND, ANNOTATION_VIRTUAL_NAME, ANNOTATION_VIRTUAL_NAMESPACE,
        LABEL_MANAGED_BY, LABEL_TENANT, MANAGED_BY_VALUE,
    };

    fn target(tc: &str, ns: &str, pod: &str, container: Option<&str>) -> PodTarget {
        PodTarget {
            tenant_cluster: TenantClusterKey::new("team", tc),
            namespace: ns.into(),
            pod: pod.into(),
            container: container.map(str::to_owned),
        }
    }

    /// The host copy the engine would make of `ns/pod` of `tc`.
    fn host_pod(tc: &str, ns: &str, pod: &str) -> Pod {
        let name = target(tc, ns, pod, None).host_name().unwrap();
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "team",
                "labels": {LABEL_MANAGED_BY: MANAGED_BY_VALUE, LABEL_TENANT: tc},
                "annotations": {ANNOTATION_VIRTUAL_NAME: pod, ANNOTATION_VIRTUAL_NAMESPACE: ns,
                    ANNOTATION_VIRTUAL_GROUP_KIND: GroupKind::new("", "Pod").to_annotation_value()}},
            "spec": {"containers": [{"name": "app"}], "initContainers": [{"name": "setup"}]}
        }))
        .unwrap()
    }

    #[test]
    fn the_copy_of_this_tenant_pod_is_allowed_with_its_containers() {
        let t = target("dev", "shop", "web", Some("app"));
        let name = t.host_name().unwrap();
        let pod = host_pod("dev", "shop", "web");
        assert_eq!(check_host_pod(&t, &name, &pod), Ok(()));
        let init = target("dev", "shop", "web", Some("setup"));
        assert_eq!(check_host_pod(&init, &name, &pod), Ok(()));
        let other = target("dev", "shop", "web", Some("sidecar"));
        let err = check_host_pod(&other, &name, &pod).unwrap_err();
        assert!(err.contains("no container \"sidecar\""), "{err}");
    }

    #[test]
    fn another_tenants_pod_or_a_foreign_pod_is_refused() {
        // Tenant prod's Pod, asked for by dev under dev's name for it: the name differs.
        let t = target("dev", "shop", "web", None);
        let name = t.host_name().unwrap();
        let prods = host_pod("prod", "shop", "web");
        assert!(check_host_pod(&t, &name, &prods).is_err());
        // prod's copy, renamed to dev's name (labels copied by hand): refused.
        let mut copied = prods.clone();
        copied.metadata.name = Some(name.clone());
        let err = check_host_pod(&t, &name, &copied).unwrap_err();
        assert!(err.contains("host object"), "{err}");
        // The same name without tenantplane's labels: not ours.
        let mut foreign = host_pod("dev", "shop", "web");
        foreign.metadata.labels = None;
        let err = check_host_pod(&t, &name, &foreign).unwrap_err();
        assert!(err.contains("not managed by tenantplane"), "{err}");
        // Another tenant Pod of the same tenant: the metadata names another source.
        let mut other = host_pod("dev", "shop", "api");
        other.metadata.name = Some(name.clone());
        assert!(check_host_pod(&t, &name, &other).is_err());
    }

    #[test]
    fn names_that_are_not_kubernetes_names_have_no_host_pod() {
        for (ns, pod) in [
            ("Shop", "web"),
            ("shop", "../web"),
            ("", "web"),
            ("shop", ""),
        ] {
            assert!(
                target("dev", ns, pod, None).host_name().is_err(),
                "{ns}/{pod}"
            );
        }
    }
}
