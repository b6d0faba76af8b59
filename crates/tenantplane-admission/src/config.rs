//! The ValidatingWebhookConfiguration that sends tenantplane's resources to the webhook.

use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhook, MutatingWebhookConfiguration, RuleWithOperations, ServiceReference,
    ValidatingWebhook, ValidatingWebhookConfiguration, WebhookClientConfig,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    LabelSelector, LabelSelectorRequirement, ObjectMeta,
};
use tenantplane_core::metadata::{LABEL_MANAGED_BY, MANAGED_BY_VALUE};
use tenantplane_core::tenant_admission::TENANT_LABEL;

use crate::review::{TENANT_KIND, VALIDATED};
use crate::server::{NAMESPACES_PATH, TENANT_RESOURCES_PATH, VALIDATE_PATH};

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
/// SyncPolicies, ResourcePools, ResourcePoolClaims and Tenants (whose policy rules'
/// patterns must compile) cannot be created or changed
/// (their status subresources, which the controllers write, are not matched) and
/// Tenants cannot be deleted (the `spec.preventDeletion` check), and nothing else
/// in the cluster is affected (namespaces, pods and the webhook's own Deployment never pass through
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
            rules: Some(vec![
                RuleWithOperations {
                    api_groups: Some(strings(&[tenantplane_api::GROUP])),
                    // Every version, so a future version is validated too.
                    api_versions: Some(strings(&["*"])),
                    operations: Some(strings(&["CREATE", "UPDATE"])),
                    resources: Some(VALIDATED.iter().map(|(_, r)| (*r).to_owned()).collect()),
                    scope: Some("*".to_owned()),
                },
                RuleWithOperations {
                    api_groups: Some(strings(&[tenantplane_api::GROUP])),
                    api_versions: Some(strings(&["*"])),
                    operations: Some(strings(&["DELETE"])),
                    resources: Some(strings(&[TENANT_KIND.1])),
                    scope: Some("Cluster".to_owned()),
                },
            ]),
            ..ValidatingWebhook::default()
        }]),
    }
}

/// `client` for the webhook at `path`: a URL is the server's base (a trailing
/// [`NAMESPACES_PATH`], as older configurations gave, is dropped) plus `path`.
fn at(client: &WebhookClient, path: &str) -> WebhookClient {
    match client {
        WebhookClient::Url(url) => {
            let base = url.strip_suffix(NAMESPACES_PATH).unwrap_or(url);
            WebhookClient::Url(format!("{}{path}", base.trim_end_matches('/')))
        }
        service => service.clone(),
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
/// The namespace admission webhook for namespaces without the tenant label
/// (`failurePolicy: Ignore`); its name is the one denials have always quoted (an
/// owner's creation over quota, a non-admin adding a Tenant owner reference).
pub const NAMESPACE_WEBHOOK_NAME: &str = "namespaces.tenantplane.io";
/// The namespace admission webhook for namespaces that have, or had, the tenant
/// label (`failurePolicy: Fail`).
pub const TENANT_NAMESPACE_WEBHOOK_NAME: &str = "tenant-namespaces.tenantplane.io";
/// The webhook for writes inside tenant namespaces.
pub const TENANT_RESOURCES_WEBHOOK_NAME: &str = "tenant-resources.tenantplane.io";
/// The webhook that sees deletions of tenant namespaces (cordon).
pub const NAMESPACE_DELETION_WEBHOOK_NAME: &str = "namespace-deletion.tenantplane.io";
/// Seconds the API server waits for the namespace webhook: it reads Tenants and
/// may retry its compare-and-swap on the Tenant's status under contention.
pub const NAMESPACE_TIMEOUT_SECONDS: i32 = 10;

/// The MutatingWebhookConfiguration of namespace tenancy: four webhooks at
/// `client`, on paths [`NAMESPACES_PATH`] and [`TENANT_RESOURCES_PATH`] (of a
/// Service, or of a URL given as the server's base, such as `https://host:8443`).
///
/// Namespace CREATE and UPDATE (with the `namespaces/status` and
/// `namespaces/finalize` subresources, which can rewrite a namespace's metadata, a
/// known hijack path) go to the same handler through two webhooks split by the
/// namespace's own labels, so that a down webhook stops only what tenancy needs
/// stopped. Kubernetes 1.20 has no `matchConditions`: the configuration cannot
/// tell an owner's request from an admin's, only the object's labels.
///
/// `tenant-namespaces.tenantplane.io`: `objectSelector` `tenantplane.io/tenant` Exists,
/// which the API server matches against the old *or* the new object: moves,
/// strips, forged labels on `kube-system`, cordons and creations naming a tenant by
/// label. `failurePolicy: Fail`: while the webhook is down none of them passes.
///
/// `namespaces.tenantplane.io`: namespaces without the label (`DoesNotExist`).
/// While the webhook is up, the handler does everything it does for any namespace
/// (an owner's new namespace joins its tenant; a non-admin cannot add a Tenant
/// owner reference). `failurePolicy: Ignore`: while it is down, admins create,
/// label and delete plain namespaces and the namespace controller finalizes them.
/// An owner's creation stays fail-closed through RBAC, not here: owners may create
/// namespaces only through the ClusterRoleBinding `tenantplane-namespace-provisioner`,
/// whose subjects the controller empties while this webhook does not answer. Last
/// in the list, so a namespace labelled by an earlier webhook is not sent twice.
/// `sideEffects: NoneOnDryRun` for both: a real request writes a reservation into
/// the Tenant's status; a dry run writes nothing.
///
/// Admins (see `Admins`: `system:masters`, `system:` users, `kube-system` service
/// accounts, the configured groups and users) pass at once while it is up.
///
/// `tenant-resources.tenantplane.io`: CREATE, UPDATE and DELETE of every namespaced
/// resource (and `scale`), `exec`, `attach` and `port-forward` into Pods and their
/// eviction, but only in namespaces labelled `tenantplane.io/tenant`
/// (`namespaceSelector` Exists; Kubernetes 1.20 has no `kubernetes.io/metadata.name`
/// label to exclude namespaces by name, and the label exists on tenant namespaces
/// only: non-admins cannot add it, as above). `kube-system`, `kube-public`,
/// `kube-node-lease` and tenantplane's namespace are not labelled, so never sent,
/// and the handler checks the owner reference's UID before applying anything.
/// `failurePolicy: Fail`, so a down webhook cannot let a cordon or a class
/// restriction be bypassed; it blocks only writes in tenant namespaces (tenant
/// pods are not recreated until it is back), never in system namespaces or its own.
/// `reinvocationPolicy: IfNeeded`: a later webhook's change is checked again.
///
/// `namespace-deletion.tenantplane.io`: DELETE of namespaces labelled
/// `tenantplane.io/tenant` (`objectSelector`, matched against the namespace being
/// deleted), on the namespace path: a cordoned tenant's owners cannot delete its
/// namespaces. A separate webhook so that deleting any other namespace never waits
/// for tenantplane; `failurePolicy: Fail` like the in-namespace webhook, so a down
/// webhook cannot let a cordon be bypassed.
pub fn namespace_webhook_configuration(
    client: WebhookClient,
    ca_bundle: &[u8],
) -> MutatingWebhookConfiguration {
    let rule = |groups: &[&str], operations: &[&str], resources: &[&str], scope: &str| {
        RuleWithOperations {
            api_groups: Some(strings(groups)),
            api_versions: Some(strings(if groups == [""] { &["v1"] } else { &["*"] })),
            operations: Some(strings(operations)),
            resources: Some(strings(resources)),
            scope: Some(scope.to_owned()),
        }
    };
    MutatingWebhookConfiguration {
        metadata: ObjectMeta {
            name: Some(NAMESPACE_CONFIGURATION_NAME.to_owned()),
            labels: Some([(LABEL_MANAGED_BY.to_owned(), MANAGED_BY_VALUE.to_owned())].into()),
            ..ObjectMeta::default()
        },
        webhooks: Some(vec![
            MutatingWebhook {
                object_selector: Some(tenant_label(LABEL_EXISTS)),
                ..namespace_writes(failing_closed(
                    TENANT_NAMESPACE_WEBHOOK_NAME,
                    &client,
                    NAMESPACES_PATH,
                    ca_bundle,
                ))
            },
            MutatingWebhook {
                // Ingress host claims are written on real requests only.
                side_effects: "NoneOnDryRun".to_owned(),
                reinvocation_policy: Some("IfNeeded".to_owned()),
                namespace_selector: Some(tenant_label_exists()),
                rules: Some(vec![
                    rule(
                        &["*"],
                        &["CREATE", "UPDATE", "DELETE"],
                        &["*", "*/scale"],
                        "Namespaced",
                    ),
                    // Getting into a Pod and evicting one are writes a cordon stops too.
                    rule(
                        &[""],
                        &["CONNECT"],
                        &["pods/exec", "pods/attach", "pods/portforward"],
                        "Namespaced",
                    ),
                    rule(&[""], &["CREATE"], &["pods/eviction"], "Namespaced"),
                    // Ephemeral containers' images (the policy rules).
                    rule(
                        &[""],
                        &["UPDATE"],
                        &["pods/ephemeralcontainers"],
                        "Namespaced",
                    ),
                ]),
                ..failing_closed(
                    TENANT_RESOURCES_WEBHOOK_NAME,
                    &client,
                    TENANT_RESOURCES_PATH,
                    ca_bundle,
                )
            },
            MutatingWebhook {
                object_selector: Some(tenant_label_exists()),
                rules: Some(vec![rule(&[""], &["DELETE"], &["namespaces"], "Cluster")]),
                ..failing_closed(
                    NAMESPACE_DELETION_WEBHOOK_NAME,
                    &client,
                    NAMESPACES_PATH,
                    ca_bundle,
                )
            },
            MutatingWebhook {
                object_selector: Some(tenant_label(LABEL_DOES_NOT_EXIST)),
                failure_policy: Some("Ignore".to_owned()),
                ..namespace_writes(failing_closed(
                    NAMESPACE_WEBHOOK_NAME,
                    &client,
                    NAMESPACES_PATH,
                    ca_bundle,
                ))
            },
        ]),
    }
}

/// `webhook` for namespace CREATE and UPDATE, with the `status` and `finalize`
/// subresources; dry runs write no reservation.
fn namespace_writes(webhook: MutatingWebhook) -> MutatingWebhook {
    MutatingWebhook {
        side_effects: "NoneOnDryRun".to_owned(),
        timeout_seconds: Some(NAMESPACE_TIMEOUT_SECONDS),
        rules: Some(vec![RuleWithOperations {
            api_groups: Some(strings(&[""])),
            api_versions: Some(strings(&["v1"])),
            operations: Some(strings(&["CREATE", "UPDATE"])),
            resources: Some(strings(&[
                "namespaces",
                "namespaces/status",
                "namespaces/finalize",
            ])),
            scope: Some("Cluster".to_owned()),
        }]),
        ..webhook
    }
}

/// A namespace-tenancy webhook at `path` of `client`: `failurePolicy: Fail`, no
/// side effects, the default timeout, never reinvoked, no rules yet.
fn failing_closed(
    name: &str,
    client: &WebhookClient,
    path: &str,
    ca_bundle: &[u8],
) -> MutatingWebhook {
    MutatingWebhook {
        name: name.to_owned(),
        admission_review_versions: strings(&["v1"]),
        client_config: client_config(at(client, path), path, ca_bundle),
        failure_policy: Some("Fail".to_owned()),
        side_effects: "None".to_owned(),
        timeout_seconds: Some(TIMEOUT_SECONDS),
        match_policy: Some("Equivalent".to_owned()),
        reinvocation_policy: Some("Never".to_owned()),
        ..MutatingWebhook::default()
    }
}

const LABEL_EXISTS: &str = "Exists";
const LABEL_DOES_NOT_EXIST: &str = "DoesNotExist";

/// Selects objects (namespaces) carrying the `tenantplane.io/tenant` label.
fn tenant_label_exists() -> LabelSelector {
    tenant_label(LABEL_EXISTS)
}

/// Selects objects by whether the `tenantplane.io/tenant` label is there
/// (`operator` is [`LABEL_EXISTS`] or [`LABEL_DOES_NOT_EXIST`]).
fn tenant_label(operator: &str) -> LabelSelector {
    LabelSelector {
        match_expressions: Some(vec![LabelSelectorRequirement {
            key: TENANT_LABEL.to_owned(),
            operator: operator.to_owned(),
            values: None,
        }]),
        match_labels: None,
    }
}

#[cfg(test)]
#[path = "config_tests.rs"]
mod tests;
