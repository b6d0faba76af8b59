//! The names and labels of one TenantCluster's control plane.

use std::collections::BTreeMap;

use tenantplane_api::TenantCluster;

use crate::metadata::{
    COMPONENT_CONTROL_PLANE, LABEL_COMPONENT, LABEL_CONTROL_PLANE_OF, LABEL_MANAGED_BY,
    LABEL_TENANT, MANAGED_BY_VALUE,
};

use super::CONTROL_PLANE_PORT;

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

/// `https://<address>:6443`, bracketing an IPv6 address.
pub fn address_url(address: &str) -> String {
    if address.contains(':') {
        format!("https://[{address}]:{CONTROL_PLANE_PORT}")
    } else {
        format!("https://{address}:{CONTROL_PLANE_PORT}")
    }
}

/// The StatefulSet's governing Service.
pub fn headless_name(tenant: &str) -> String {
    format!("{tenant}-cp-headless")
}

/// The optional LoadBalancer Service.
pub fn load_balancer_name(tenant: &str) -> String {
    format!("{tenant}-cp-lb")
}

/// The bootstrap Secret (in the control-plane namespace).
pub fn bootstrap_name(tenant: &str) -> String {
    format!("{tenant}-cp-bootstrap")
}

/// The Secret holding the `k8s` distro's serving certificate (re-issued when the
/// names it must be valid for change, unlike the immutable bootstrap).
pub fn serving_name(tenant: &str) -> String {
    format!("{tenant}-cp-serving")
}

/// On the serving Secret: the names its certificate was issued for.
pub const ANNOTATION_SERVING_NAMES: &str = "tenantplane.io/serving-names";

/// The labels of a control-plane namespace: ours, for `tc_namespace`.
pub fn namespace_labels(tc_namespace: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (LABEL_MANAGED_BY.to_owned(), MANAGED_BY_VALUE.to_owned()),
        (LABEL_CONTROL_PLANE_OF.to_owned(), tc_namespace.to_owned()),
    ])
}

/// Whether a namespace carries our labels for `tc_namespace` (only then is
/// anything created in it, or it deleted).
pub fn namespace_is_ours(labels: &BTreeMap<String, String>, tc_namespace: &str) -> bool {
    labels.get(LABEL_MANAGED_BY).map(String::as_str) == Some(MANAGED_BY_VALUE)
        && labels.get(LABEL_CONTROL_PLANE_OF).map(String::as_str) == Some(tc_namespace)
}

/// A TenantCluster without a name or namespace has no control plane.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("the TenantCluster has no {0}")]
pub struct MissingMetadata(pub &'static str);

/// Everything that names one TenantCluster's control plane.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ControlPlaneNames {
    /// The TenantCluster's name.
    pub tenant: String,
    /// The TenantCluster's namespace.
    pub namespace: String,
    /// The control-plane namespace, `<namespace>-cp`.
    pub cp_namespace: String,
    /// The StatefulSet and ClusterIP Service, `<tenant>-cp`.
    pub cp_name: String,
}

impl ControlPlaneNames {
    pub fn of(tc: &TenantCluster) -> Result<Self, MissingMetadata> {
        let tenant = tc.metadata.name.clone().ok_or(MissingMetadata("name"))?;
        let namespace = tc
            .metadata
            .namespace
            .clone()
            .ok_or(MissingMetadata("namespace"))?;
        Ok(Self::new(&tenant, &namespace))
    }

    pub fn new(tenant: &str, namespace: &str) -> Self {
        Self {
            cp_namespace: control_plane_namespace(namespace),
            cp_name: control_plane_name(tenant),
            tenant: tenant.to_owned(),
            namespace: namespace.to_owned(),
        }
    }

    /// The labels of every object of this control plane (and the pod's).
    pub fn labels(&self) -> BTreeMap<String, String> {
        let mut labels = self.selector();
        labels.insert(LABEL_MANAGED_BY.into(), MANAGED_BY_VALUE.into());
        labels.insert(LABEL_CONTROL_PLANE_OF.into(), self.namespace.clone());
        labels
    }

    /// What the StatefulSet selects (immutable, so only what never changes).
    pub fn selector(&self) -> BTreeMap<String, String> {
        BTreeMap::from([
            (LABEL_TENANT.to_owned(), self.tenant.clone()),
            (
                LABEL_COMPONENT.to_owned(),
                COMPONENT_CONTROL_PLANE.to_owned(),
            ),
        ])
    }

    /// [`Self::selector`] as a label selector string (`k=v,k=v`).
    pub fn selector_string(&self) -> String {
        self.selector()
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(",")
    }

    pub fn is_ours(&self, labels: &BTreeMap<String, String>) -> bool {
        self.labels().iter().all(|(k, v)| labels.get(k) == Some(v))
    }

    /// The kubeconfig Secret lives in the tenant namespace, so it has no
    /// `control-plane-of` label (that label marks a control-plane namespace's objects).
    pub fn kubeconfig_labels(&self) -> BTreeMap<String, String> {
        let mut labels = self.selector();
        labels.insert(LABEL_MANAGED_BY.into(), MANAGED_BY_VALUE.into());
        labels
    }

    pub fn is_our_kubeconfig(&self, labels: &BTreeMap<String, String>) -> bool {
        self.kubeconfig_labels()
            .iter()
            .all(|(k, v)| labels.get(k) == Some(v))
    }

    /// The pod the StatefulSet runs.
    pub fn pod_name(&self) -> String {
        format!("{}-0", self.cp_name)
    }

    /// The common name of this control plane's server CA.
    pub fn server_ca_common_name(&self) -> String {
        format!("tenantplane-{}-{}-server-ca", self.namespace, self.tenant)
    }

    /// The common name of the client certificate the API server presents to kubelets.
    pub fn kubelet_client_common_name(&self) -> String {
        format!(
            "tenantplane-{}-{}-kubelet-client",
            self.namespace, self.tenant
        )
    }

    /// The names the API server's certificate must be valid for.
    pub fn tls_sans(&self, extra: &[String]) -> Vec<String> {
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

    /// The names the `k8s` distro's serving certificate is issued for: the Service's
    /// names, the tenant's own `kubernetes` Service (its names and address, for
    /// in-cluster clients of the tenant), and loopback (the controller manager).
    pub fn serving_sans(&self, extra: &[String], service_cidr: &str) -> Vec<String> {
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
        more.extend(kubernetes_service_ip(service_cidr));
        for san in more {
            if !sans.contains(&san) {
                sans.push(san);
            }
        }
        sans
    }
}

/// The first address of `service_cidr`: the tenant's `kubernetes` Service, which
/// the serving certificate must be valid for. `None` when it does not parse.
pub fn kubernetes_service_ip(service_cidr: &str) -> Option<String> {
    let (network, bits) = service_cidr.split_once('/')?;
    let _: u8 = bits.parse().ok()?;
    match network.parse::<std::net::IpAddr>().ok()? {
        std::net::IpAddr::V4(v4) => {
            Some(std::net::Ipv4Addr::from(u32::from(v4).checked_add(1)?).to_string())
        }
        std::net::IpAddr::V6(v6) => {
            Some(std::net::Ipv6Addr::from(u128::from(v6).checked_add(1)?).to_string())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names() -> ControlPlaneNames {
        ControlPlaneNames::new("dev", "team-dev")
    }

    #[test]
    fn names_follow_the_tenant_and_its_namespace() {
        assert_eq!(control_plane_namespace("team-dev"), "team-dev-cp");
        assert_eq!(kubeconfig_secret_name("dev"), "dev-kubeconfig");
        assert_eq!(kubelet_client_secret_name("dev"), "dev-kubelet-client");
        assert_eq!(headless_name("dev"), "dev-cp-headless");
        assert_eq!(load_balancer_name("dev"), "dev-cp-lb");
        assert_eq!(bootstrap_name("dev"), "dev-cp-bootstrap");
        assert_eq!(serving_name("dev"), "dev-cp-serving");
        assert_eq!(in_cluster_host("dev", "team-dev"), "dev-cp.team-dev-cp.svc");
        assert_eq!(
            in_cluster_endpoint("dev", "team-dev"),
            "https://dev-cp.team-dev-cp.svc:6443"
        );
        let n = names();
        assert_eq!(
            (n.cp_name.as_str(), n.cp_namespace.as_str()),
            ("dev-cp", "team-dev-cp")
        );
        assert_eq!(n.pod_name(), "dev-cp-0");
        assert_eq!(
            n.server_ca_common_name(),
            "tenantplane-team-dev-dev-server-ca"
        );
    }

    #[test]
    fn a_tenant_cluster_without_name_or_namespace_has_no_names() {
        let mut tc = TenantCluster::new(
            "dev",
            serde_json::from_value(serde_json::json!({
                "isolationProfileRef": {"name": "restricted"},
                "syncPolicyRef": {"name": "default"},
            }))
            .unwrap(),
        );
        assert_eq!(
            ControlPlaneNames::of(&tc),
            Err(MissingMetadata("namespace"))
        );
        tc.metadata.namespace = Some("team-dev".into());
        assert_eq!(ControlPlaneNames::of(&tc), Ok(names()));
    }

    #[test]
    fn the_selector_is_the_stable_part_of_the_labels() {
        let n = names();
        let selector = n.selector();
        assert_eq!(
            selector,
            BTreeMap::from([
                (LABEL_TENANT.to_owned(), "dev".to_owned()),
                (
                    LABEL_COMPONENT.to_owned(),
                    COMPONENT_CONTROL_PLANE.to_owned()
                ),
            ])
        );
        assert_eq!(
            n.selector_string(),
            format!("{LABEL_COMPONENT}={COMPONENT_CONTROL_PLANE},{LABEL_TENANT}=dev")
        );
        let labels = n.labels();
        assert!(selector.iter().all(|(k, v)| labels.get(k) == Some(v)));
        assert_eq!(
            labels.get(LABEL_CONTROL_PLANE_OF).map(String::as_str),
            Some("team-dev")
        );
        assert_eq!(
            labels.get(LABEL_MANAGED_BY).map(String::as_str),
            Some(MANAGED_BY_VALUE)
        );
        assert!(n.is_ours(&labels));
        assert!(!n.is_ours(&selector));
        // The kubeconfig Secret is in the tenant namespace: no control-plane-of label.
        assert!(!n.kubeconfig_labels().contains_key(LABEL_CONTROL_PLANE_OF));
        assert!(n.is_our_kubeconfig(&labels));
        assert!(!ControlPlaneNames::new("other", "team-dev").is_ours(&labels));
    }

    #[test]
    fn only_our_labels_for_the_namespace_make_a_namespace_ours() {
        let labels = namespace_labels("team-dev");
        assert!(namespace_is_ours(&labels, "team-dev"));
        assert!(!namespace_is_ours(&labels, "team-prod"));
        assert!(!namespace_is_ours(&BTreeMap::new(), "team-dev"));
    }

    #[test]
    fn sans_cover_the_service_then_the_extras_once() {
        let n = names();
        let sans = n.tls_sans(&["api.dev.example.com".into(), "dev-cp".into()]);
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
        let serving = n.serving_sans(&[], "10.96.0.0/16");
        assert!(serving.ends_with(&["localhost".into(), "127.0.0.1".into(), "10.96.0.1".into()]));
        assert!(serving.contains(&"kubernetes.default.svc".to_owned()));
    }

    #[test]
    fn the_first_service_address_is_the_kubernetes_service() {
        assert_eq!(
            kubernetes_service_ip("10.96.0.0/16").as_deref(),
            Some("10.96.0.1")
        );
        assert_eq!(
            kubernetes_service_ip("fd00:10:96::/112").as_deref(),
            Some("fd00:10:96::1")
        );
        for bad in ["10.96.0.0", "x/16", "10.96.0.0/x", "255.255.255.255/32"] {
            assert_eq!(kubernetes_service_ip(bad), None, "{bad}");
        }
    }

    #[test]
    fn ipv6_addresses_are_bracketed_in_urls() {
        assert_eq!(address_url("10.0.0.5"), "https://10.0.0.5:6443");
        assert_eq!(address_url("fd00::5"), "https://[fd00::5]:6443");
    }
}
