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
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn tenant(name: &str, owners: serde_json::Value) -> Tenant {
        serde_json::from_value(
            json!({"apiVersion": "tenantplane.io/v1alpha1", "kind": "Tenant",
            "metadata": {"name": name}, "spec": {"owners": owners}}),
        )
        .unwrap()
    }

    fn user(name: &str) -> Subject {
        Subject {
            api_group: Some(RBAC_GROUP.into()),
            kind: "User".into(),
            name: name.into(),
            namespace: None,
        }
    }

    #[test]
    fn one_answer_brings_the_grant_three_failures_take_it() {
        let mut health = WebhookHealth::default();
        assert!(!health.is_up(), "starts down");
        assert_eq!(health.observe(Probe::Failed), None);
        assert_eq!(health.observe(Probe::Answered), Some(true));
        assert_eq!(health.observe(Probe::Answered), None);
        assert_eq!(health.observe(Probe::Failed), None);
        assert_eq!(health.observe(Probe::Failed), None);
        assert!(health.is_up(), "two failures are not an outage");
        assert_eq!(health.observe(Probe::Answered), None);
        assert_eq!(health.observe(Probe::Failed), None);
        assert_eq!(health.observe(Probe::Failed), None);
        assert_eq!(health.observe(Probe::Failed), Some(false));
        assert_eq!(health.observe(Probe::Failed), None);
        assert_eq!(health.observe(Probe::Answered), Some(true));
        assert_eq!(health.observe(Probe::NotInstalled), Some(false), "at once");
        assert_eq!(health.observe(Probe::NotInstalled), None);
    }

    #[test]
    fn owners_become_sorted_distinct_subjects_and_only_while_up() {
        let tenants = [
            tenant(
                "b",
                json!([{"kind": "User", "name": "zoe"}, {"kind": "Group", "name": "devs"},
                       {"kind": "ServiceAccount", "name": "system:serviceaccount:ci:bot"}]),
            ),
            tenant(
                "a",
                json!([{"kind": "User", "name": "alice"}, {"kind": "User", "name": "zoe"},
                       {"kind": "ServiceAccount", "name": "not-a-service-account"}]),
            ),
        ];
        let (subjects, skipped) = owner_subjects(&tenants);
        let names: Vec<_> = subjects
            .iter()
            .map(|s| {
                format!(
                    "{}/{}/{}",
                    s.kind,
                    s.namespace.as_deref().unwrap_or(""),
                    s.name
                )
            })
            .collect();
        assert_eq!(
            names,
            [
                "Group//devs",
                "ServiceAccount/ci/bot",
                "User//alice",
                "User//zoe"
            ]
        );
        assert_eq!(skipped.len(), 1);
        assert_eq!(skipped[0].tenant, "a");

        let mut health = WebhookHealth::default();
        assert!(desired_subjects(&health, subjects.clone()).is_empty());
        health.observe(Probe::Answered);
        assert_eq!(desired_subjects(&health, subjects.clone()), subjects);

        let mut deleted = tenants[1].clone();
        deleted.metadata.deletion_timestamp =
            Some(serde_json::from_value(json!("2026-01-01T00:00:00Z")).unwrap());
        let (subjects, _) = owner_subjects([&tenants[0], &deleted]);
        assert!(
            !subjects.contains(&user("alice")),
            "a deleted Tenant grants nothing"
        );
    }

    #[test]
    fn the_binding_is_written_only_when_it_differs_and_never_when_foreign() {
        assert!(matches!(
            plan_binding(None, vec![user("a")]),
            BindingAction::Create(b) if b.subjects == Some(vec![user("a")])
                && b.role_ref.name == PROVISIONER_NAME
                && b.metadata.labels.as_ref().unwrap()[LABEL_MANAGED_BY] == MANAGED_BY_VALUE
        ));
        let mut ours = provisioner_binding(vec![user("a")]);
        ours.metadata.resource_version = Some("7".into());
        assert_eq!(
            plan_binding(Some(&ours), vec![user("a")]),
            BindingAction::Keep
        );
        let BindingAction::Update(updated) = plan_binding(Some(&ours), vec![]) else {
            panic!("not an update")
        };
        assert_eq!(updated.subjects, Some(vec![]));
        assert_eq!(updated.metadata.resource_version.as_deref(), Some("7"));
        // `subjects` absent and empty are the same.
        let mut empty = provisioner_binding(vec![]);
        empty.subjects = None;
        assert_eq!(plan_binding(Some(&empty), vec![]), BindingAction::Keep);

        let mut foreign = provisioner_binding(vec![]);
        foreign.metadata.labels = None;
        assert!(matches!(
            plan_binding(Some(&foreign), vec![user("a")]),
            BindingAction::Foreign { .. }
        ));
        let mut other_role = provisioner_binding(vec![]);
        other_role.role_ref.name = "cluster-admin".into();
        assert!(matches!(
            plan_binding(Some(&other_role), vec![user("a")]),
            BindingAction::Foreign { reason } if reason.contains("cluster-admin")
        ));
    }

    fn config(client: serde_json::Value) -> MutatingWebhookConfiguration {
        serde_json::from_value(json!({"metadata": {"name": "tenantplane-namespaces"},
            "webhooks": [{"name": "namespaces.tenantplane.io", "clientConfig": client,
                "admissionReviewVersions": ["v1"], "sideEffects": "None"}]}))
        .unwrap()
    }

    #[test]
    fn the_probe_target_comes_from_the_client_config() {
        let target = |client| probe_target(&config(client), "namespaces.tenantplane.io");
        assert_eq!(
            target(json!({"url": "https://127.0.0.1:8443/namespaces", "caBundle": "UEVN"})),
            Ok(ProbeTarget {
                host: "127.0.0.1".into(),
                port: 8443,
                ca_pem: b"PEM".to_vec()
            })
        );
        let target_of = |client| target(client).map(|t| (t.host, t.port));
        assert_eq!(
            target_of(json!({"url": "https://[::1]:9443", "caBundle": "UEVN"})),
            Ok(("::1".into(), 9443))
        );
        assert_eq!(
            target_of(json!({"url": "https://webhook.example/x", "caBundle": "UEVN"})),
            Ok(("webhook.example".into(), 443))
        );
        assert_eq!(
            target_of(json!({"service": {"namespace": "tenantplane-system",
                "name": "tenantplane-webhook", "path": "/namespaces"}, "caBundle": "UEVN"})),
            Ok(("tenantplane-webhook.tenantplane-system.svc".into(), 443))
        );
        assert_eq!(
            target_of(
                json!({"service": {"namespace": "n", "name": "w", "port": 8443},
                "caBundle": "UEVN"})
            ),
            Ok(("w.n.svc".into(), 8443))
        );
        for url in [
            "http://h:80",
            "https://",
            "https://:443",
            "https://h:0",
            "https://h:99999",
            "https://u@h",
            "https://[::1",
            "https://[::1]x",
        ] {
            assert!(
                matches!(
                    target(json!({"url": url, "caBundle": "UEVN"})),
                    Err(ProbeTargetError::BadUrl { .. })
                ),
                "{url}"
            );
        }
        assert!(matches!(
            target(json!({"url": "https://h"})),
            Err(ProbeTargetError::NoCaBundle { .. })
        ));
        assert!(matches!(
            probe_target(
                &config(json!({"url": "https://h", "caBundle": "UEVN"})),
                "other"
            ),
            Err(ProbeTargetError::NoWebhook { .. })
        ));
    }

    proptest! {
        /// The subjects do not depend on the order of Tenants or owners, so
        /// reordering never rewrites the binding.
        #[test]
        fn subjects_ignore_order(names in proptest::collection::vec("[a-c]{1,2}", 0..8), split in 0usize..8) {
            let owners: Vec<_> = names.iter().map(|n| json!({"kind": "User", "name": n})).collect();
            let split = split.min(owners.len());
            let forward = [tenant("x", json!(owners[..split])), tenant("y", json!(owners[split..]))];
            let mut reversed_owners = owners.clone();
            reversed_owners.reverse();
            let backward = [tenant("y", json!(reversed_owners))];
            let (a, _) = owner_subjects(&forward);
            let (b, _) = owner_subjects(&backward);
            prop_assert_eq!(&a, &b);
            let mut distinct = names.clone();
            distinct.sort();
            distinct.dedup();
            prop_assert_eq!(a.iter().map(|s| s.name.clone()).collect::<Vec<_>>(), distinct);
        }
    }
}
