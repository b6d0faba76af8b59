//! The namespace provisioner guard's decisions: who may create namespaces through
//! tenantplane's ClusterRoleBinding, and when.
//!
//! Owners create namespaces through the ClusterRoleBinding
//! [`PROVISIONER_NAME`] to the ClusterRole of the same name (`create` on
//! namespaces). A namespace without the tenant label goes to a webhook with
//! `failurePolicy: Ignore` (so a webhook outage never stops admins or the namespace
//! controller); an owner's creation must still not pass unseen, so the binding has
//! subjects only while the webhook answers. Kubernetes 1.20 has no
//! `matchConditions`, so this is the only fail-closed gate left for owners.

use std::collections::BTreeMap;

use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::rbac::v1::{ClusterRoleBinding, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use tenantplane_api::Tenant;

use crate::metadata::{LABEL_MANAGED_BY, MANAGED_BY_VALUE};
use crate::tenant_plan::{TenantPlanError, owner_subject};

/// The ClusterRole (shipped in `deploy/install`) and the ClusterRoleBinding (kept
/// by the controller) that let owners create namespaces.
pub const PROVISIONER_NAME: &str = "tenantplane-namespace-provisioner";
/// Consecutive failed probes before the owners lose the grant (at 2 s apart, ~6 s):
/// one lost packet or a rolling restart does not flap the binding.
pub const FAILURES_TO_DOWN: u32 = 3;

const RBAC_GROUP: &str = "rbac.authorization.k8s.io";

/// What one probe of the webhook found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Probe {
    /// `GET /healthz` answered 200 over TLS with the configured CA.
    Answered,
    /// No answer, a TLS failure, another status, or an unusable client config.
    Failed,
    /// The webhook configuration does not exist: the webhook is not installed, so
    /// nothing checks owners' namespaces.
    NotInstalled,
}

/// Whether the namespace webhook is taken to be answering. Starts down: owners
/// get the grant only after a first answer.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WebhookHealth {
    up: bool,
    failures: u32,
}

impl WebhookHealth {
    pub fn is_up(&self) -> bool {
        self.up
    }

    /// Records `probe`; returns the new state when it flips. One answer is enough
    /// to come up, [`FAILURES_TO_DOWN`] failures in a row to go down, and a missing
    /// configuration goes down at once.
    pub fn observe(&mut self, probe: Probe) -> Option<bool> {
        let was = self.up;
        match probe {
            Probe::Answered => {
                self.failures = 0;
                self.up = true;
            }
            Probe::Failed => {
                self.failures = self.failures.saturating_add(1);
                if self.failures >= FAILURES_TO_DOWN {
                    self.up = false;
                }
            }
            Probe::NotInstalled => {
                self.failures = FAILURES_TO_DOWN;
                self.up = false;
            }
        }
        (was != self.up).then_some(self.up)
    }
}

/// An owner tenantplane cannot express as an RBAC subject (it gets no grant).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SkippedOwner {
    pub tenant: String,
    pub error: TenantPlanError,
}

/// Every owner of every Tenant as RBAC subjects, deduplicated and sorted (kind,
/// namespace, name), so the binding is written only when the set changes. Tenants
/// being deleted are left out: their namespaces are being released.
pub fn owner_subjects<'a>(
    tenants: impl IntoIterator<Item = &'a Tenant>,
) -> (Vec<Subject>, Vec<SkippedOwner>) {
    let mut subjects = BTreeMap::new();
    let mut skipped = Vec::new();
    for tenant in tenants {
        if tenant.metadata.deletion_timestamp.is_some() {
            continue;
        }
        for owner in &tenant.spec.owners {
            match owner_subject(owner) {
                Ok(subject) => {
                    let key = (
                        subject.kind.clone(),
                        subject.namespace.clone().unwrap_or_default(),
                        subject.name.clone(),
                    );
                    subjects.insert(key, subject);
                }
                Err(error) => skipped.push(SkippedOwner {
                    tenant: tenant.metadata.name.clone().unwrap_or_default(),
                    error,
                }),
            }
        }
    }
    (subjects.into_values().collect(), skipped)
}

/// The subjects the binding should have: the owners while the webhook answers,
/// nobody otherwise.
pub fn desired_subjects(health: &WebhookHealth, owners: Vec<Subject>) -> Vec<Subject> {
    if health.is_up() { owners } else { Vec::new() }
}

/// The binding tenantplane keeps, with `subjects`.
pub fn provisioner_binding(subjects: Vec<Subject>) -> ClusterRoleBinding {
    ClusterRoleBinding {
        metadata: ObjectMeta {
            name: Some(PROVISIONER_NAME.to_owned()),
            labels: Some([(LABEL_MANAGED_BY.to_owned(), MANAGED_BY_VALUE.to_owned())].into()),
            ..ObjectMeta::default()
        },
        role_ref: RoleRef {
            api_group: RBAC_GROUP.to_owned(),
            kind: "ClusterRole".to_owned(),
            name: PROVISIONER_NAME.to_owned(),
        },
        subjects: Some(subjects),
    }
}

/// What to do with the binding found under [`PROVISIONER_NAME`].
#[derive(Clone, Debug, PartialEq)]
pub enum BindingAction {
    /// None exists: create it.
    Create(ClusterRoleBinding),
    /// Ours, with other subjects: replace it (carries the observed resourceVersion).
    Update(ClusterRoleBinding),
    /// Ours and as wanted.
    Keep,
    /// Not labelled as tenantplane's, or bound to another role: never touched.
    Foreign { reason: String },
}

/// Compares `existing` with the binding for `subjects`.
pub fn plan_binding(
    existing: Option<&ClusterRoleBinding>,
    subjects: Vec<Subject>,
) -> BindingAction {
    let desired = provisioner_binding(subjects);
    let Some(existing) = existing else {
        return BindingAction::Create(desired);
    };
    let ours = existing
        .metadata
        .labels
        .as_ref()
        .and_then(|labels| labels.get(LABEL_MANAGED_BY))
        .is_some_and(|value| value == MANAGED_BY_VALUE);
    if !ours {
        return BindingAction::Foreign {
            reason: format!("it is not labelled {LABEL_MANAGED_BY}={MANAGED_BY_VALUE}"),
        };
    }
    if existing.role_ref != desired.role_ref {
        return BindingAction::Foreign {
            reason: format!(
                "it binds {} {}, not ClusterRole {PROVISIONER_NAME}",
                existing.role_ref.kind, existing.role_ref.name
            ),
        };
    }
    let current = existing.subjects.as_deref().unwrap_or_default();
    if current == desired.subjects.as_deref().unwrap_or_default() {
        return BindingAction::Keep;
    }
    let mut updated = existing.clone();
    updated.subjects = desired.subjects;
    BindingAction::Update(updated)
}

/// Where and how to probe the webhook.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProbeTarget {
    /// Host name or IP address to connect to (no brackets around IPv6).
    pub host: String,
    pub port: u16,
    /// The CA bundle (PEM) the API server trusts for the webhook.
    pub ca_pem: Vec<u8>,
}

/// Why a webhook configuration gives nothing to probe.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ProbeTargetError {
    #[error("webhook {webhook} is not in the configuration")]
    NoWebhook { webhook: String },
    #[error("webhook {webhook} has no caBundle")]
    NoCaBundle { webhook: String },
    #[error("webhook {webhook} has neither a url nor a service")]
    NoClient { webhook: String },
    #[error("webhook {webhook}: url {url:?} is not https://HOST[:PORT][/PATH]")]
    BadUrl { webhook: String, url: String },
}

/// The probe target of `webhook` in `config`: its `url`'s host and port (443 by
/// default), or `<service>.<namespace>.svc` and the service port (443 by default),
/// trusting its `caBundle`.
pub fn probe_target(
    config: &MutatingWebhookConfiguration,
    webhook: &str,
) -> Result<ProbeTarget, ProbeTargetError> {
    let found = config
        .webhooks
        .iter()
        .flatten()
        .find(|w| w.name == webhook)
        .ok_or_else(|| ProbeTargetError::NoWebhook {
            webhook: webhook.to_owned(),
        })?;
    let client = &found.client_config;
    let ca_pem = client
        .ca_bundle
        .as_ref()
        .map(|b| b.0.clone())
        .filter(|b| !b.is_empty())
        .ok_or_else(|| ProbeTargetError::NoCaBundle {
            webhook: webhook.to_owned(),
        })?;
    let (host, port) = if let Some(url) = &client.url {
        parse_https_url(url).ok_or_else(|| ProbeTargetError::BadUrl {
            webhook: webhook.to_owned(),
            url: url.clone(),
        })?
    } else if let Some(service) = &client.service {
        let port = service
            .port
            .and_then(|p| u16::try_from(p).ok())
            .unwrap_or(443);
        (format!("{}.{}.svc", service.name, service.namespace), port)
    } else {
        return Err(ProbeTargetError::NoClient {
            webhook: webhook.to_owned(),
        });
    };
    Ok(ProbeTarget { host, port, ca_pem })
}

/// `https://HOST[:PORT][/PATH]` → (HOST, PORT); `[::1]` for IPv6. No user info,
/// query or fragment (the API server refuses them in a webhook URL too).
fn parse_https_url(url: &str) -> Option<(String, u16)> {
    let rest = url.strip_prefix("https://")?;
    let authority = rest.split('/').next()?;
    if authority.is_empty() || authority.contains(['@', '?', '#']) {
        return None;
    }
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        let (host, after) = v6.split_once(']')?;
        let port = match after {
            "" => None,
            p => Some(p.strip_prefix(':')?),
        };
        (host, port)
    } else {
        match authority.split_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        }
    };
    if host.is_empty() {
        return None;
    }
    let port = match port {
        Some(p) => p.parse::<u16>().ok().filter(|p| *p != 0)?,
        None => 443,
    };
    Some((host.to_owned(), port))
}

#[cfg(test)]
#[path = "provisioner_tests.rs"]
mod tests;
