//! The fromHost-copy webhook registered in each provisioned tenant control plane
//! (see `tenantplane_core::from_host_admission`): tenantplane's webhook server's
//! `/from-host`, for objects labelled as fromHost copies, failing open.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    RuleWithOperations, ValidatingWebhook, ValidatingWebhookConfiguration, WebhookClientConfig,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::api::ObjectMeta;
use kube::{Api, Client};
use tenantplane_core::from_host::LABEL_FROM_HOST;
use tenantplane_core::metadata::{LABEL_MANAGED_BY, MANAGED_BY_VALUE};

use crate::converge::{ConvergeError, ObjectAction, converge};

/// The configuration's name in the tenant API server.
pub const CONFIGURATION_NAME: &str = "tenantplane-from-host";

/// Where tenant API servers reach the webhook: its URL (tenantplane's webhook
/// server, path `/from-host`) and the CA that signed its certificate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TenantWebhook {
    pub url: String,
    pub ca_bundle: Vec<u8>,
}

fn labels() -> BTreeMap<String, String> {
    BTreeMap::from([(LABEL_MANAGED_BY.to_owned(), MANAGED_BY_VALUE.to_owned())])
}

/// The configuration: every resource, only objects labelled as fromHost copies
/// (for a DELETE or an UPDATE removing the label, the old object's labels count).
pub fn configuration(webhook: &TenantWebhook) -> ValidatingWebhookConfiguration {
    let all = || Some(vec!["*".to_owned()]);
    ValidatingWebhookConfiguration {
        metadata: ObjectMeta {
            name: Some(CONFIGURATION_NAME.to_owned()),
            labels: Some(labels()),
            ..ObjectMeta::default()
        },
        webhooks: Some(vec![ValidatingWebhook {
            name: "from-host.tenantplane.io".to_owned(),
            client_config: WebhookClientConfig {
                url: Some(webhook.url.clone()),
                ca_bundle: Some(ByteString(webhook.ca_bundle.clone())),
                ..WebhookClientConfig::default()
            },
            rules: Some(vec![RuleWithOperations {
                api_groups: all(),
                api_versions: all(),
                resources: all(),
                operations: Some(vec!["CREATE".into(), "UPDATE".into(), "DELETE".into()]),
                scope: Some("*".to_owned()),
            }]),
            object_selector: Some(LabelSelector {
                match_labels: Some(BTreeMap::from([(
                    LABEL_FROM_HOST.to_owned(),
                    "true".to_owned(),
                )])),
                ..LabelSelector::default()
            }),
            // A guard-rail, not the boundary (the revert is): an outage of the
            // webhook must not stop the tenant's writes.
            failure_policy: Some("Ignore".to_owned()),
            side_effects: "None".to_owned(),
            admission_review_versions: vec!["v1".to_owned()],
            timeout_seconds: Some(5),
            match_policy: Some("Equivalent".to_owned()),
            ..ValidatingWebhook::default()
        }]),
    }
}

/// Puts the configuration in the tenant API server (again, if the tenant removed
/// it), never over one tenantplane did not create.
pub(crate) async fn ensure(
    tenant: &Client,
    webhook: &TenantWebhook,
) -> Result<ObjectAction, ConvergeError> {
    let api: Api<ValidatingWebhookConfiguration> = Api::all(tenant.clone());
    let ours = |l: &BTreeMap<String, String>| {
        l.get(LABEL_MANAGED_BY).map(String::as_str) == Some(MANAGED_BY_VALUE)
    };
    converge(
        &api,
        CONFIGURATION_NAME,
        Some(&configuration(webhook)),
        &ours,
        &[],
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_labelled_objects_go_to_the_webhook_and_it_fails_open() {
        let config = configuration(&TenantWebhook {
            url: "https://webhook.example:8443/from-host".into(),
            ca_bundle: b"PEM".to_vec(),
        });
        let hook = &config.webhooks.as_ref().unwrap()[0];
        assert_eq!(hook.failure_policy.as_deref(), Some("Ignore"));
        assert_eq!(
            hook.object_selector
                .as_ref()
                .unwrap()
                .match_labels
                .as_ref()
                .unwrap()[LABEL_FROM_HOST],
            "true"
        );
        assert_eq!(
            hook.client_config.url.as_deref(),
            Some("https://webhook.example:8443/from-host")
        );
    }
}
