//! What a provisioned tenant control plane is made of, decided without I/O: its
//! names and labels ([`names`]), the StatefulSet and Services that run it
//! ([`objects`]), each distro's containers ([`k3s`], [`k8s`]) and the kubeconfigs
//! that reach it ([`kubeconfig`]). The engine generates the credentials and talks
//! to the host; why things are shaped this way is told in the engine's `provision`.

mod container;
pub mod k3s;
pub mod k8s;
pub mod kubeconfig;
pub mod names;
pub mod objects;

/// The tenant API server's port (k3s' supervisor and API server).
pub const CONTROL_PLANE_PORT: i32 = 6443;
/// The key of the kubeconfig in the kubeconfig Secret.
pub const KUBECONFIG_KEY: &str = "kubeconfig";
/// Pod Security level of the `-cp` namespace: the control plane needs no privilege,
/// host namespaces or hostPath, and `baseline` keeps those blocked.
pub const CONTROL_PLANE_POD_SECURITY: &str = "baseline";
/// The user the static admin token authenticates as (in `system:masters`).
pub const ADMIN_USER: &str = "tenantplane-admin";
/// The service CIDR a provisioned tenant API server is started with when none is
/// given: kube-apiserver's own default. It must be the host's, so a tenant Service
/// can carry its host copy's ClusterIP.
pub const DEFAULT_SERVICE_CIDR: &str = "10.0.0.0/24";

/// Keys of the bootstrap Secret (generated once, before the control plane starts).
pub mod bootstrap_keys {
    pub const TOKEN: &str = "token";
    pub const ADMIN_TOKEN: &str = "admin-token";
    pub const TOKENS_CSV: &str = "tokens.csv";
    pub const CA_CERT: &str = "server-ca.crt";
    pub const CA_KEY: &str = "server-ca.key";
    pub const KUBELET_CERT: &str = "kubelet-client.crt";
    pub const KUBELET_KEY: &str = "kubelet-client.key";
    pub const SYNCER_TOKEN: &str = "syncer-token";
    /// The ServiceAccount signing key of distro `k8s` (private, PKCS#8 PEM).
    pub const SERVICE_ACCOUNT: &str = "service-account.key";
    /// Its public half, which the API server verifies tokens with (kube-apiserver
    /// 1.20 reads no public key out of a PKCS#8 private key).
    pub const SERVICE_ACCOUNT_PUBLIC: &str = "service-account.pub";
    /// The controller manager's kubeconfig (distro `k8s`).
    pub const CONTROLLER_MANAGER_KUBECONFIG: &str = "controller-manager.kubeconfig";
    /// The controller manager's token (distro `k8s`).
    pub const CONTROLLER_MANAGER_TOKEN: &str = "controller-manager-token";

    /// The keys distro `k8s` reads besides k3s' ones (a bootstrap made for k3s by
    /// an older tenantplane may lack them).
    pub const K8S_ONLY: [&str; 4] = [
        CA_KEY,
        SERVICE_ACCOUNT,
        SERVICE_ACCOUNT_PUBLIC,
        CONTROLLER_MANAGER_KUBECONFIG,
    ];
}

/// The API server's `--token-auth-file` (`token,user,uid[,"groups"]`): the admin
/// and the syncer are in `system:masters`; the controller manager (distro `k8s`)
/// gets what default RBAC grants its user.
pub fn tokens_csv(admin_token: &str, syncer_token: &str, controller_manager_token: &str) -> String {
    use crate::from_host_admission::SYNCER_USER;
    format!(
        "{admin_token},{ADMIN_USER},{ADMIN_USER},\"system:masters\"\n\
         {syncer_token},{SYNCER_USER},{SYNCER_USER},\"system:masters\"\n\
         {controller_manager_token},{user},{user}\n",
        user = k8s::CONTROLLER_MANAGER_USER
    )
}

/// TenantCluster `team-dev/dev` with `extra` merged into its spec, for the tests of
/// every module here.
#[cfg(test)]
#[allow(clippy::unwrap_used)]
fn test_tenant_cluster(extra: serde_json::Value) -> tenantplane_api::TenantCluster {
    let mut spec = serde_json::json!({
        "isolationProfileRef": {"name": "restricted"},
        "syncPolicyRef": {"name": "default"},
    });
    if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra.as_object()) {
        spec.extend(extra.clone());
    }
    let mut tc = tenantplane_api::TenantCluster::new("dev", serde_json::from_value(spec).unwrap());
    tc.metadata.namespace = Some("team-dev".into());
    tc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_csv_has_one_line_per_user() {
        let csv = tokens_csv("a1", "s1", "c1");
        let lines: Vec<&str> = csv.lines().collect();
        assert_eq!(
            lines,
            [
                "a1,tenantplane-admin,tenantplane-admin,\"system:masters\"",
                &format!(
                    "s1,{u},{u},\"system:masters\"",
                    u = crate::from_host_admission::SYNCER_USER
                ),
                "c1,system:kube-controller-manager,system:kube-controller-manager",
            ]
        );
    }
}
