//! The ValidatingWebhookConfiguration that sends tenantplane's resources to the webhook.

use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhook, MutatingWebhookConfiguration, RuleWithOperations, ServiceReference,
    ValidatingWebhook, ValidatingWebhookConfiguration, WebhookClientConfig,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use tenantplane_core::metadata::{LABEL_MANAGED_BY, MANAGED_BY_VALUE};

use crate::review::VALIDATED;
use crate::server::{NAMESPACES_PATH, VALIDATE_PATH};

/// The configuration object's name.
pub const CONFIGURATION_NAME: &str = "tenantplane-validation";
/// The webhook's name (the API server quotes it in every denial).
pub const WEBHOOK_NAME: &str = "validate.tenantplane.io";
/// Seconds the API server waits for an answer.
pub const TIMEOUT_SECONDS: i32 = 5;

/// Where the API server reaches the webhook.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WebhookClient {
    /// A Service in the cluster; the path is [`VALIDATE_PATH`].
    Service {
        namespace: String,
        name: String,
        /// Defaults to 443 on the API server's side.
        port: Option<i32>,
    },
    /// A full URL, such as `https://127.0.0.1:8443/validate`.
    Url(String),
}

/// The configuration for `client`, trusting `ca_bundle` (PEM) for its certificate.
///
/// `failurePolicy: Fail` is safe here because the rules match only tenantplane's own
/// resources: while the webhook is down, TenantClusters, IsolationProfiles,
/// SyncPolicies, ResourcePools and ResourcePoolClaims cannot be created or changed
/// (their status subresources, which the controller writes, are not matched), and
/// nothing else in the cluster is
/// affected (namespaces, pods and the webhook's own Deployment never pass through
/// it), so a down webhook can never deadlock the cluster or its own recovery.
pub fn webhook_configuration(
    client: WebhookClient,
    ca_bundle: &[u8],
) -> ValidatingWebhookConfiguration {
    ValidatingWebhookConfiguration {
        metadata: ObjectMeta {
            name: Some(CONFIGURATION_NAME.to_owned()),
            labels: Some([(LABEL_MANAGED_BY.to_owned(), MANAGED_BY_VALUE.to_owned())].into()),
            ..ObjectMeta::default()
        },
        webhooks: Some(vec![ValidatingWebhook {
            name: WEBHOOK_NAME.to_owned(),
            admission_review_versions: strings(&["v1"]),
            client_config: client_config(client, VALIDATE_PATH, ca_bundle),
            failure_policy: Some("Fail".to_owned()),
            side_effects: "None".to_owned(),
            timeout_seconds: Some(TIMEOUT_SECONDS),
            match_policy: Some("Equivalent".to_owned()),
            rules: Some(vec![RuleWithOperations {
                api_groups: Some(strings(&[tenantplane_api::GROUP])),
                // Every version, so a future version is validated too.
                api_versions: Some(strings(&["*"])),
                operations: Some(strings(&["CREATE", "UPDATE"])),
                resources: Some(VALIDATED.iter().map(|(_, r)| (*r).to_owned()).collect()),
                scope: Some("*".to_owned()),
            }]),
            ..ValidatingWebhook::default()
        }]),
    }
}

/// How the API server reaches the webhook at `path`, trusting `ca_bundle`.
fn client_config(client: WebhookClient, path: &str, ca_bundle: &[u8]) -> WebhookClientConfig {
    let (service, url) = match client {
        WebhookClient::Service {
            namespace,
            name,
            port,
        } => (
            Some(ServiceReference {
                namespace,
                name,
                path: Some(path.to_owned()),
                port,
            }),
            None,
        ),
        WebhookClient::Url(url) => (None, Some(url)),
    };
    WebhookClientConfig {
        ca_bundle: Some(ByteString(ca_bundle.to_vec())),
        service,
        url,
    }
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}

/// The namespace admission configuration's name.
pub const NAMESPACE_CONFIGURATION_NAME: &str = "tenantplane-namespaces";
/// The namespace admission webhook's name.
pub const NAMESPACE_WEBHOOK_NAME: &str = "namespaces.tenantplane.io";
/// Seconds the API server waits for the namespace webhook: it reads Tenants and
/// may retry its compare-and-swap on the Tenant's status under contention.
pub const NAMESPACE_TIMEOUT_SECONDS: i32 = 10;

/// The MutatingWebhookConfiguration that sends namespace CREATEs (and nothing else)
/// to `POST /namespaces` at `client` (a Service's path is [`NAMESPACES_PATH`]).
///
/// `failurePolicy: Fail`, deliberately: with `Ignore`, a down or slow webhook would
/// admit namespaces without a quota slot, owner reference or label, so the quota
/// (the point of this webhook) would silently not hold. Failing closed is
/// acceptable because it affects only namespace *creation*: never updates, deletes
/// or anything inside namespaces, so `kube-system` and every existing workload,
/// the webhook's own Deployment included, keep running and can recover. While the
/// webhook is up, system users (`system:masters`, `system:` users) and users who
/// own no Tenant are let through unchanged by the handler; while it is down, nobody
/// creates namespaces until it is back. `sideEffects: NoneOnDryRun`: a real request
/// writes a reservation into the Tenant's status; a dry run writes nothing.
pub fn namespace_webhook_configuration(
    client: WebhookClient,
    ca_bundle: &[u8],
) -> MutatingWebhookConfiguration {
    MutatingWebhookConfiguration {
        metadata: ObjectMeta {
            name: Some(NAMESPACE_CONFIGURATION_NAME.to_owned()),
            labels: Some([(LABEL_MANAGED_BY.to_owned(), MANAGED_BY_VALUE.to_owned())].into()),
            ..ObjectMeta::default()
        },
        webhooks: Some(vec![MutatingWebhook {
            name: NAMESPACE_WEBHOOK_NAME.to_owned(),
            admission_review_versions: strings(&["v1"]),
            client_config: client_config(client, NAMESPACES_PATH, ca_bundle),
            failure_policy: Some("Fail".to_owned()),
            side_effects: "NoneOnDryRun".to_owned(),
            timeout_seconds: Some(NAMESPACE_TIMEOUT_SECONDS),
            match_policy: Some("Equivalent".to_owned()),
            reinvocation_policy: Some("Never".to_owned()),
            rules: Some(vec![RuleWithOperations {
                api_groups: Some(strings(&[""])),
                api_versions: Some(strings(&["v1"])),
                operations: Some(strings(&["CREATE"])),
                resources: Some(strings(&["namespaces"])),
                scope: Some("Cluster".to_owned()),
            }]),
            // Namespace and object selectors mean nothing for a namespace that does
            // not exist yet; system users are exempted by the handler.
            ..MutatingWebhook::default()
        }]),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_namespace_webhook_matches_only_namespace_creation() {
        let config = namespace_webhook_configuration(
            WebhookClient::Service {
                namespace: "tenantplane-system".into(),
                name: "tenantplane-webhook".into(),
                port: None,
            },
            b"PEM",
        );
        let value = serde_json::to_value(&config).unwrap();
        assert_eq!(value["kind"], "MutatingWebhookConfiguration");
        let webhook = &value["webhooks"][0];
        assert_eq!(
            webhook["rules"],
            serde_json::json!([{"apiGroups": [""], "apiVersions": ["v1"],
                "operations": ["CREATE"], "resources": ["namespaces"], "scope": "Cluster"}])
        );
        assert_eq!(webhook["failurePolicy"], "Fail");
        assert_eq!(webhook["sideEffects"], "NoneOnDryRun");
        assert_eq!(webhook["clientConfig"]["service"]["path"], "/namespaces");
    }

    use super::*;

    #[test]
    fn only_tenantplanes_resources_are_matched_and_failure_closes() {
        let config = webhook_configuration(
            WebhookClient::Url("https://127.0.0.1:8443/validate".into()),
            b"PEM",
        );
        let value = serde_json::to_value(&config).unwrap();
        assert_eq!(value["apiVersion"], "admissionregistration.k8s.io/v1");
        assert_eq!(value["kind"], "ValidatingWebhookConfiguration");
        assert_eq!(value["metadata"]["name"], "tenantplane-validation");
        let webhook = &value["webhooks"][0];
        assert_eq!(value["webhooks"].as_array().unwrap().len(), 1);
        assert_eq!(webhook["name"], "validate.tenantplane.io");
        assert_eq!(
            webhook["rules"],
            serde_json::json!([{
                "apiGroups": ["tenantplane.io"],
                "apiVersions": ["*"],
                "operations": ["CREATE", "UPDATE"],
                "resources": ["tenantclusters", "isolationprofiles", "syncpolicies", "resourcepools", "resourcepoolclaims"],
                "scope": "*",
            }])
        );
        assert_eq!(webhook["failurePolicy"], "Fail");
        assert_eq!(webhook["sideEffects"], "None");
        assert_eq!(
            webhook["admissionReviewVersions"],
            serde_json::json!(["v1"])
        );
        assert_eq!(webhook["timeoutSeconds"], 5);
        assert_eq!(
            webhook["clientConfig"],
            // caBundle is base64 on the wire.
            serde_json::json!({"url": "https://127.0.0.1:8443/validate", "caBundle": "UEVN"})
        );
        assert!(webhook.get("namespaceSelector").is_none());
        assert!(webhook.get("objectSelector").is_none());
    }

    #[test]
    fn a_service_reference_uses_the_validate_path() {
        let config = webhook_configuration(
            WebhookClient::Service {
                namespace: "tenantplane-system".into(),
                name: "tenantplane-webhook".into(),
                port: Some(8443),
            },
            b"PEM",
        );
        let value = serde_json::to_value(&config).unwrap();
        assert_eq!(
            value["webhooks"][0]["clientConfig"]["service"],
            serde_json::json!({"namespace": "tenantplane-system", "name": "tenantplane-webhook",
                               "path": "/validate", "port": 8443})
        );
        assert!(value["webhooks"][0]["clientConfig"].get("url").is_none());
    }
}
