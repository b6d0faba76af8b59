//! The Secrets a provisioned control plane publishes in the TenantCluster's own
//! namespace (owned by it, so they go with it): the tenant's kubeconfig and the
//! certificate the API server presents to tenantplane's kubelet endpoint.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::ObjectMeta;
use kube::{Api, Client, Resource};
use tenantplane_api::TenantCluster;
use tenantplane_core::control_plane::KUBECONFIG_KEY;
use tenantplane_core::control_plane::names::{
    ControlPlaneNames, kubeconfig_secret_name, kubelet_client_secret_name,
};

use super::{ControlPlaneState, ProvisionError, converge_error, foreign};
use crate::converge::{ObjectAction, converge};

/// Keeps the kubeconfig Secret holding `kubeconfig`. `Some` is a state to report
/// instead (a foreign Secret under the name).
pub(super) async fn ensure_kubeconfig_secret(
    host: &Client,
    names: &ControlPlaneNames,
    tc: &TenantCluster,
    kubeconfig: String,
) -> Result<Option<ControlPlaneState>, ProvisionError> {
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
    Ok((action == ObjectAction::Conflict).then(|| {
        foreign(
            "Secret",
            &names.namespace,
            &secret_name,
            &names.tenant,
            &names.namespace,
        )
    }))
}

/// Publishes the certificate (never the key) the control plane presents to kubelets,
/// in the Secret the kubelet endpoint reads. `Some` is a state to report instead.
pub(super) async fn ensure_kubelet_client_secret(
    host: &Client,
    names: &ControlPlaneNames,
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

#[cfg(test)]
mod tests {
    use base64::Engine as _;

    use tenantplane_core::control_plane::ADMIN_USER;
    use tenantplane_core::control_plane::kubeconfig::tenant_kubeconfig;
    use tenantplane_core::control_plane::names::in_cluster_endpoint;

    use super::super::certificates::{random_hex, server_ca};

    #[test]
    fn the_kubeconfig_parses_with_kubes_reader_and_points_at_the_service() {
        let (ca_pem, _) = server_ca("test").unwrap();
        let token = random_hex(32).unwrap();
        assert_eq!(token.len(), 64);
        assert_ne!(token, random_hex(32).unwrap());
        let yaml = tenant_kubeconfig(
            "dev",
            &in_cluster_endpoint("dev", "team-dev"),
            &ca_pem,
            &token,
        )
        .unwrap();
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
        assert_eq!(config.auth_infos[0].name, ADMIN_USER);
    }

    #[test]
    fn the_controller_managers_kubeconfig_parses_with_kubes_reader() {
        let yaml =
            tenantplane_core::control_plane::k8s::controller_manager_kubeconfig("abc123").unwrap();
        let config = kube::config::Kubeconfig::from_yaml(&yaml).unwrap();
        let cluster = config.clusters[0].cluster.clone().unwrap_or_default();
        assert_eq!(cluster.server.as_deref(), Some("https://127.0.0.1:6443"));
    }
}
