//! Kubeconfigs as typed documents, serialized to YAML: the tenant's (admin token,
//! CA inline) and the `k8s` distro's controller manager's (CA by file).

use k8s_openapi::ByteString;
use serde::{Deserialize, Serialize};

use super::{ADMIN_USER, CONTROL_PLANE_PORT};

/// The subset of a kubeconfig tenantplane writes: one cluster, one user, one
/// context, all current.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct Kubeconfig {
    #[serde(rename = "apiVersion")]
    pub api_version: String,
    pub kind: String,
    pub clusters: Vec<NamedCluster>,
    pub users: Vec<NamedUser>,
    pub contexts: Vec<NamedContext>,
    pub current_context: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NamedCluster {
    pub name: String,
    pub cluster: Cluster,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct Cluster {
    pub server: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub certificate_authority: Option<String>,
    /// The CA's PEM; a `ByteString` serializes as the base64 kubeconfig expects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub certificate_authority_data: Option<ByteString>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NamedUser {
    pub name: String,
    pub user: User,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct User {
    pub token: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NamedContext {
    pub name: String,
    pub context: Context,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Context {
    pub cluster: String,
    pub user: String,
}

#[derive(Debug, thiserror::Error)]
#[error("serializing a kubeconfig: {0}")]
pub struct KubeconfigError(#[from] serde_saphyr::ser::Error);

impl Kubeconfig {
    /// One cluster `cluster` at `server`, reached as `user` with `token`.
    pub fn single(cluster_name: &str, cluster: Cluster, user: &str, token: &str) -> Self {
        Self {
            api_version: "v1".to_owned(),
            kind: "Config".to_owned(),
            clusters: vec![NamedCluster {
                name: cluster_name.to_owned(),
                cluster,
            }],
            users: vec![NamedUser {
                name: user.to_owned(),
                user: User {
                    token: token.to_owned(),
                },
            }],
            contexts: vec![NamedContext {
                name: cluster_name.to_owned(),
                context: Context {
                    cluster: cluster_name.to_owned(),
                    user: user.to_owned(),
                },
            }],
            current_context: cluster_name.to_owned(),
        }
    }

    pub fn to_yaml(&self) -> Result<String, KubeconfigError> {
        let mut options = serde_saphyr::SerializerOptions::default();
        // The CA's base64 is one long word: a plain scalar, not a folded block.
        options.prefer_block_scalars = false;
        Ok(serde_saphyr::to_string_with_options(self, options)?)
    }
}

/// The tenant's kubeconfig: the admin token against `endpoint`, trusting `ca_pem`.
pub fn tenant_kubeconfig(
    tenant: &str,
    endpoint: &str,
    ca_pem: &str,
    admin_token: &str,
) -> Result<String, KubeconfigError> {
    let cluster = Cluster {
        server: endpoint.to_owned(),
        certificate_authority: None,
        certificate_authority_data: Some(ByteString(ca_pem.as_bytes().to_vec())),
    };
    Kubeconfig::single(tenant, cluster, ADMIN_USER, admin_token).to_yaml()
}

/// The kubeconfig kube-controller-manager reaches its API server with, over the
/// Pod's loopback (the serving certificate is valid for 127.0.0.1), trusting the
/// CA file `ca_file`.
pub fn controller_manager_kubeconfig(
    ca_file: &str,
    token: &str,
) -> Result<String, KubeconfigError> {
    let cluster = Cluster {
        server: format!("https://127.0.0.1:{CONTROL_PLANE_PORT}"),
        certificate_authority: Some(ca_file.to_owned()),
        certificate_authority_data: None,
    };
    Kubeconfig::single("local", cluster, "controller-manager", token).to_yaml()
}

#[cfg(test)]
mod tests {
    use super::*;

    const CA: &str =
        "-----BEGIN CERTIFICATE-----\nMIIBdzCCAR2gAwIBAgIUQ==\n-----END CERTIFICATE-----\n";

    #[test]
    fn the_tenant_kubeconfig_round_trips() {
        let yaml =
            tenant_kubeconfig("dev", "https://dev-cp.team-dev-cp.svc:6443", CA, "0a1b2c").unwrap();
        let config: Kubeconfig = serde_saphyr::from_str(&yaml).unwrap();
        let cluster = &config.clusters[0].cluster;
        assert_eq!(cluster.server, "https://dev-cp.team-dev-cp.svc:6443");
        assert_eq!(
            cluster
                .certificate_authority_data
                .as_ref()
                .map(|b| b.0.as_slice()),
            Some(CA.as_bytes())
        );
        assert_eq!(config.users[0].name, ADMIN_USER);
        assert_eq!(config.users[0].user.token, "0a1b2c");
        assert_eq!(config.current_context, "dev");
        assert_eq!(config.contexts[0].context.cluster, "dev");
        assert_eq!(config.contexts[0].context.user, ADMIN_USER);
    }

    #[test]
    fn the_tenant_kubeconfig_is_the_yaml_tenantplane_always_wrote() {
        // What the hand-written template produced: the bytes in existing Secrets,
        // so an upgrade rewrites none of them.
        let ca = "LS0tLS1CRUdJTg==";
        let yaml = tenant_kubeconfig(
            "dev",
            "https://dev-cp.team-dev-cp.svc:6443",
            "-----BEGIN",
            "0a1b2c",
        )
        .unwrap();
        assert_eq!(
            yaml,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: dev\n  cluster:\n    server: https://dev-cp.team-dev-cp.svc:6443\n    certificate-authority-data: {ca}\nusers:\n- name: tenantplane-admin\n  user:\n    token: 0a1b2c\ncontexts:\n- name: dev\n  context:\n    cluster: dev\n    user: tenantplane-admin\ncurrent-context: dev\n"
            )
        );
    }

    #[test]
    fn a_numeric_looking_token_stays_a_string() {
        let yaml = tenant_kubeconfig("dev", "https://x:6443", CA, "1234").unwrap();
        let config: Kubeconfig = serde_saphyr::from_str(&yaml).unwrap();
        assert_eq!(config.users[0].user.token, "1234");
    }

    #[test]
    fn the_controller_manager_kubeconfig_uses_loopback_and_the_ca_file() {
        let yaml =
            controller_manager_kubeconfig("/etc/tenantplane/bootstrap/server-ca.crt", "abc123")
                .unwrap();
        assert_eq!(
            yaml,
            "apiVersion: v1\nkind: Config\nclusters:\n- name: local\n  cluster:\n    server: https://127.0.0.1:6443\n    certificate-authority: /etc/tenantplane/bootstrap/server-ca.crt\nusers:\n- name: controller-manager\n  user:\n    token: abc123\ncontexts:\n- name: local\n  context:\n    cluster: local\n    user: controller-manager\ncurrent-context: local\n"
        );
    }
}
