//! The control-plane namespace `<namespace>-cp`, shared by the TenantClusters of
//! one namespace, at Pod Security `baseline` (see the module comment of `provision`).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{ObjectMeta, Patch};
use kube::{Api, Client, ResourceExt};
use serde_json::json;
use tenantplane_core::control_plane::CONTROL_PLANE_POD_SECURITY;
use tenantplane_core::control_plane::names::{
    ControlPlaneNames, namespace_is_ours, namespace_labels,
};
use tenantplane_core::isolation::{POD_SECURITY_MODES, POD_SECURITY_VERSION};

use super::{ControlPlaneState, ProvisionError, foreign, host_error, patch_params, post_params};

/// Creates the `-cp` namespace or checks it; `Some` is a state to report instead of
/// going on.
pub(super) async fn ensure_namespace(
    host: &Client,
    names: &ControlPlaneNames,
) -> Result<Option<ControlPlaneState>, ProvisionError> {
    let api: Api<Namespace> = Api::all(host.clone());
    let cp_ns = &names.cp_namespace;
    let err = host_error("Namespace", "", cp_ns);
    let mut labels = namespace_labels(&names.namespace);
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
