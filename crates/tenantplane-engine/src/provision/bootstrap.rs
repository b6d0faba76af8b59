//! The bootstrap Secret `<tc>-cp-bootstrap`: the credentials and CA generated
//! before the control plane first starts (see the module comment of `provision`),
//! and read back on every pass to compose the kubeconfig.

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::ObjectMeta;
use kube::{Api, ResourceExt};
use rcgen::KeyPair;
use tenantplane_core::control_plane::bootstrap_keys as keys;
use tenantplane_core::control_plane::names::{self, ControlPlaneNames};
use tenantplane_core::control_plane::{k8s, tokens_csv};

use super::certificates::{kubelet_client_cert, random_hex, server_ca};
use super::{ControlPlaneState, ProvisionError, foreign, host_error, post_params};

/// What the kubeconfig is composed from.
pub(super) struct Bootstrap {
    pub(super) ca_pem: String,
    pub(super) admin_token: String,
    /// Absent in bootstrap Secrets made before tenantplane issued one (they are
    /// immutable): such a control plane keeps running without `kubectl logs`.
    pub(super) kubelet_cert_pem: Option<String>,
    /// The CA's key, which signs the `k8s` distro's serving certificate.
    pub(super) ca_key_pem: Option<String>,
    /// The first key the `k8s` distro needs that this bootstrap lacks (one made
    /// by an older tenantplane, for k3s).
    pub(super) missing_for_k8s: Option<&'static str>,
    /// The syncer's token (absent in bootstraps made before it existed).
    pub(super) syncer_token: Option<String>,
}

/// The control-plane Secret `name` as it stands (`None`: absent), or the state to
/// report when someone else's Secret holds the name.
pub(super) async fn read_our_secret(
    api: &Api<Secret>,
    names: &ControlPlaneNames,
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
pub(super) async fn ensure_bootstrap(
    api: &Api<Secret>,
    names: &ControlPlaneNames,
) -> Result<Result<Bootstrap, ControlPlaneState>, ProvisionError> {
    let name = names::bootstrap_name(&names.tenant);
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
        let kubelet_cert_pem = text(keys::KUBELET_CERT)
            .ok()
            .filter(|_| data.contains_key(keys::KUBELET_KEY));
        return Ok(Ok(Bootstrap {
            ca_pem: text(keys::CA_CERT)?,
            admin_token: text(keys::ADMIN_TOKEN)?,
            kubelet_cert_pem,
            ca_key_pem: text(keys::CA_KEY).ok(),
            syncer_token: text(keys::SYNCER_TOKEN).ok(),
            missing_for_k8s: keys::K8S_ONLY
                .into_iter()
                .find(|key| !data.contains_key(*key)),
        }));
    }
    let (ca_pem, ca_key_pem) = server_ca(&names.server_ca_common_name())?;
    let admin_token = random_hex(32)?;
    let (kubelet_cert_pem, kubelet_key_pem) =
        kubelet_client_cert(&names.kubelet_client_common_name())?;
    let controller_manager_token = random_hex(32)?;
    let syncer_token = random_hex(32)?;
    let tokens_csv = tokens_csv(&admin_token, &syncer_token, &controller_manager_token);
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
                (keys::TOKEN, random_hex(32)?),
                (keys::ADMIN_TOKEN, admin_token.clone()),
                (keys::TOKENS_CSV, tokens_csv),
                (keys::CA_CERT, ca_pem.clone()),
                (keys::CA_KEY, ca_key_pem.clone()),
                (keys::KUBELET_CERT, kubelet_cert_pem.clone()),
                (keys::KUBELET_KEY, kubelet_key_pem),
                (keys::SERVICE_ACCOUNT, service_account_key.serialize_pem()),
                (
                    keys::SERVICE_ACCOUNT_PUBLIC,
                    service_account_key.public_key_pem(),
                ),
                (
                    keys::CONTROLLER_MANAGER_KUBECONFIG,
                    k8s::controller_manager_kubeconfig(&controller_manager_token)?,
                ),
                (keys::CONTROLLER_MANAGER_TOKEN, controller_manager_token),
                (keys::SYNCER_TOKEN, syncer_token.clone()),
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
