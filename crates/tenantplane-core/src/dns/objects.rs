//! The host objects that run one TenantCluster's DNS server: a ServiceAccount,
//! a Role that reads only Services, Endpoints and Pods of the host namespace, its
//! RoleBinding, a Deployment running `tenantplane dns`, its ClusterIP Service, and
//! a NetworkPolicy letting it through the isolation boundary.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Service, ServiceAccount};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use serde_json::json;
use sha2::{Digest, Sha256};

use crate::metadata::{LABEL_COMPONENT, LABEL_MANAGED_BY, LABEL_TENANT, MANAGED_BY_VALUE};

/// `tenantplane.io/component` of the DNS server's objects.
pub const COMPONENT_DNS: &str = "dns";
/// The port the server listens on inside its Pod (unprivileged; the Service maps 53).
pub const CONTAINER_PORT: u16 = 5353;
const PREFIX: &str = "tenantplane-dns-";

/// The name of every DNS object of TenantCluster `tenant`: `tenantplane-dns-<tc>`,
/// or with a hash of the name when that is not a 63-character DNS label.
pub fn dns_object_name(tenant: &str) -> String {
    let plain = format!("{PREFIX}{tenant}");
    if plain.len() <= 63 && !tenant.contains('.') {
        return plain;
    }
    let digest = Sha256::digest(tenant.as_bytes());
    let hex = crate::hex::short_hex(digest, 8);
    format!("{PREFIX}{hex}")
}

/// The labels of the DNS objects (and of the server's Pods).
pub fn dns_labels(tenant: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (LABEL_MANAGED_BY.to_owned(), MANAGED_BY_VALUE.to_owned()),
        (LABEL_TENANT.to_owned(), tenant.to_owned()),
        (LABEL_COMPONENT.to_owned(), COMPONENT_DNS.to_owned()),
    ])
}

/// Whether live labels make an object this tenant's DNS object.
pub fn is_dns_object_of(labels: &BTreeMap<String, String>, tenant: &str) -> bool {
    labels.get(LABEL_MANAGED_BY).map(String::as_str) == Some(MANAGED_BY_VALUE)
        && labels.get(LABEL_TENANT).map(String::as_str) == Some(tenant)
        && labels.get(LABEL_COMPONENT).map(String::as_str) == Some(COMPONENT_DNS)
}

/// What the server needs to run.
#[derive(Clone, Debug)]
pub struct DnsServerSpec<'a> {
    pub namespace: &'a str,
    pub tenant: &'a str,
    pub image: &'a str,
    pub cluster_domain: &'a str,
}

/// The six objects, without owner references (the engine adds them).
#[derive(Clone, Debug)]
pub struct DnsObjects {
    pub service_account: ServiceAccount,
    pub role: Role,
    pub role_binding: RoleBinding,
    pub deployment: Deployment,
    pub service: Service,
    /// Added to the isolation policy (policies are a union): the server reaches the
    /// host API server and the upstream resolver; only the namespace's Pods reach it.
    pub network_policy: NetworkPolicy,
}

/// Builds the objects; `Err` only if the fixed shapes below stop deserialising.
pub fn dns_objects(spec: &DnsServerSpec<'_>) -> Result<DnsObjects, serde_json::Error> {
    let name = dns_object_name(spec.tenant);
    let labels = dns_labels(spec.tenant);
    let meta = json!({"name": name, "namespace": spec.namespace, "labels": labels});
    let service_account = serde_json::from_value(json!({
        "metadata": meta,
        "automountServiceAccountToken": false,
    }))?;
    let role = serde_json::from_value(json!({
        "metadata": meta,
        "rules": [{"apiGroups": [""], "resources": ["services", "endpoints", "pods"],
                   "verbs": ["get", "list", "watch"]}],
    }))?;
    let role_binding = serde_json::from_value(json!({
        "metadata": meta,
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": spec.namespace}],
    }))?;
    let args = [
        "dns".to_owned(),
        "--tenant-cluster".to_owned(),
        format!("{}/{}", spec.namespace, spec.tenant),
        "--listen".to_owned(),
        format!("0.0.0.0:{CONTAINER_PORT}"),
        "--cluster-domain".to_owned(),
        spec.cluster_domain.to_owned(),
        "--log-format=json".to_owned(),
    ];
    let ports = json!([
        {"name": "dns", "containerPort": CONTAINER_PORT, "protocol": "UDP"},
        {"name": "dns-tcp", "containerPort": CONTAINER_PORT, "protocol": "TCP"},
    ]);
    let deployment = serde_json::from_value(json!({
        "metadata": meta,
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "serviceAccountName": name,
                    // In-cluster config reads the token; only this Pod mounts it.
                    "automountServiceAccountToken": true,
                    "enableServiceLinks": false,
                    "securityContext": {"runAsNonRoot": true, "runAsUser": 65532,
                        "runAsGroup": 65532, "seccompProfile": {"type": "RuntimeDefault"}},
                    "containers": [{
                        "name": "dns",
                        "image": spec.image,
                        "args": args,
                        "ports": ports,
                        "resources": {"requests": {"cpu": "10m", "memory": "32Mi"},
                                      "limits": {"memory": "128Mi"}},
                        "securityContext": {"allowPrivilegeEscalation": false,
                            "readOnlyRootFilesystem": true, "capabilities": {"drop": ["ALL"]}},
                    }],
                },
            },
        },
    }))?;
    let service = serde_json::from_value(json!({
        "metadata": meta,
        "spec": {
            "type": "ClusterIP",
            "selector": labels,
            "ports": [
                {"name": "dns", "port": 53, "targetPort": CONTAINER_PORT, "protocol": "UDP"},
                {"name": "dns-tcp", "port": 53, "targetPort": CONTAINER_PORT, "protocol": "TCP"},
            ],
        },
    }))?;
    let network_policy = serde_json::from_value(json!({
        "metadata": meta,
        "spec": {
            "podSelector": {"matchLabels": labels},
            "policyTypes": ["Ingress", "Egress"],
            // Only this tenant's host Pods (labels tenants cannot forge) may ask.
            "ingress": [{"from": [{"podSelector": {"matchLabels": {
                LABEL_MANAGED_BY: MANAGED_BY_VALUE, LABEL_TENANT: spec.tenant}}}], "ports": [
                {"port": CONTAINER_PORT, "protocol": "UDP"},
                {"port": CONTAINER_PORT, "protocol": "TCP"}]}],
            "egress": [{}],
        },
    }))?;
    Ok(DnsObjects {
        network_policy,
        service_account,
        role,
        role_binding,
        deployment,
        service,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_fit_a_dns_label() {
        assert_eq!(dns_object_name("dev"), "tenantplane-dns-dev");
        let long = "a".repeat(63);
        let hashed = dns_object_name(&long);
        assert!(hashed.len() <= 63 && hashed.starts_with(PREFIX), "{hashed}");
        assert_ne!(hashed, dns_object_name(&"b".repeat(63)));
        assert!(!dns_object_name("a.b").contains('.'));
    }

    #[test]
    fn the_role_reads_only_what_the_server_watches() {
        let objects = dns_objects(&DnsServerSpec {
            namespace: "team",
            tenant: "dev",
            image: "tenantplane:0.1.0",
            cluster_domain: "cluster.local",
        })
        .unwrap();
        let rules = objects.role.rules.unwrap();
        assert_eq!(rules.len(), 1);
        assert_eq!(rules[0].verbs, ["get", "list", "watch"]);
        assert_eq!(
            rules[0].resources.as_deref(),
            Some(&["services".to_owned(), "endpoints".into(), "pods".into()][..])
        );
        let pod = objects.deployment.spec.unwrap().template.spec.unwrap();
        let args = pod.containers[0].args.clone().unwrap();
        assert!(
            args.windows(2)
                .any(|w| w == ["--tenant-cluster", "team/dev"])
        );
        assert!(is_dns_object_of(
            objects.service.metadata.labels.as_ref().unwrap(),
            "dev"
        ));
        assert!(!is_dns_object_of(
            objects.service.metadata.labels.as_ref().unwrap(),
            "other"
        ));
    }
}
