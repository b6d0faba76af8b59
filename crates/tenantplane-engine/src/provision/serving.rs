//! The `k8s` distro's serving certificate: k3s issues its own from the CA it is
//! given; kube-apiserver needs one issued for it. It lives in its own Secret, not in
//! the immutable bootstrap, so a change of `spec.controlPlane.extraSANs` re-issues it
//! (the running API server reloads the files).

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::ObjectMeta;
use kube::{Api, ResourceExt};

use tenantplane_core::control_plane::names::{
    ANNOTATION_SERVING_NAMES, ControlPlaneNames, serving_name,
};

use super::bootstrap::read_our_secret;
use super::certificates::serving_cert;
use super::{ControlPlaneState, ProvisionError, host_error, post_params};

/// What became of the serving Secret.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Serving {
    /// Issued for exactly these names already.
    Current,
    /// Created or re-issued now.
    Issued,
}

/// Keeps the serving Secret issued for `sans`. `Err(state)` is a state to report
/// instead (a foreign Secret under the name).
pub(super) async fn ensure_serving_secret(
    api: &Api<Secret>,
    names: &ControlPlaneNames,
    ca_key_pem: &str,
    sans: &[String],
) -> Result<Result<Serving, ControlPlaneState>, ProvisionError> {
    let name = serving_name(&names.tenant);
    let cp_ns = names.cp_namespace.as_str();
    let err = host_error("Secret", cp_ns, &name);
    let wanted = sans.join(",");
    let live = match read_our_secret(api, names, &name).await? {
        Ok(live) => live,
        Err(state) => return Ok(Err(state)),
    };
    if let Some(live) = &live {
        let complete = live
            .data
            .as_ref()
            .is_some_and(|d| d.contains_key("tls.crt") && d.contains_key("tls.key"));
        if complete && live.annotations().get(ANNOTATION_SERVING_NAMES) == Some(&wanted) {
            return Ok(Ok(Serving::Current));
        }
    }
    let (cert, key) = serving_cert(&names.server_ca_common_name(), ca_key_pem, sans)?;
    let mut secret = Secret {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            namespace: Some(cp_ns.to_owned()),
            labels: Some(names.labels()),
            annotations: Some(BTreeMap::from([(
                ANNOTATION_SERVING_NAMES.to_owned(),
                wanted,
            )])),
            ..ObjectMeta::default()
        },
        data: Some(BTreeMap::from([
            ("tls.crt".to_owned(), ByteString(cert.into_bytes())),
            ("tls.key".to_owned(), ByteString(key.into_bytes())),
        ])),
        type_: Some("kubernetes.io/tls".to_owned()),
        ..Secret::default()
    };
    match live {
        None => {
            api.create(&post_params(), &secret)
                .await
                .map_err(|e| err("create", e))?;
        }
        Some(live) => {
            // Replaced at the version read: a concurrent change fails with 409 and
            // the next pass starts over.
            secret.metadata.resource_version = live.resource_version();
            api.replace(&name, &post_params(), &secret)
                .await
                .map_err(|e| err("replace", e))?;
        }
    }
    tracing::info!(tenant = %names.tenant, namespace = %names.namespace, "control plane serving certificate issued");
    Ok(Ok(Serving::Issued))
}
