//! Which kinds tenantplane can sync, and the name rule of each.

use std::fmt;

use crate::name_rules::NameRule;

/// An API group and kind, without version: the identity of a kind across versions.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GroupKind {
    /// Empty for the core group.
    pub group: String,
    pub kind: String,
}

impl GroupKind {
    pub fn new(group: impl Into<String>, kind: impl Into<String>) -> Self {
        Self {
            group: group.into(),
            kind: kind.into(),
        }
    }

    /// Splits `apiVersion` (`v1`, `apps/v1`, `example.com/v1`) and pairs its group with `kind`.
    pub fn from_api_version(api_version: &str, kind: &str) -> Result<Self, KindError> {
        let group = match api_version.split_once('/') {
            Some((group, version))
                if !group.is_empty() && !version.is_empty() && !version.contains('/') =>
            {
                group
            }
            None if !api_version.is_empty() => "",
            _ => {
                return Err(KindError::InvalidApiVersion {
                    api_version: api_version.to_owned(),
                });
            }
        };
        if kind.is_empty()
            || !kind.bytes().all(|b| b.is_ascii_alphanumeric())
            || !kind.as_bytes()[0].is_ascii_uppercase()
        {
            return Err(KindError::InvalidKind {
                kind: kind.to_owned(),
            });
        }
        Ok(Self::new(group, kind))
    }

    /// `Kind` for the core group, `Kind.group` otherwise (as kubectl writes it).
    pub fn to_annotation_value(&self) -> String {
        self.to_string()
    }

    /// Parses what [`GroupKind::to_annotation_value`] wrote.
    pub fn from_annotation_value(value: &str) -> Option<Self> {
        let (kind, group) = value.split_once('.').unwrap_or((value, ""));
        if kind.is_empty() {
            return None;
        }
        Some(Self::new(group, kind))
    }

    /// The rule object names of this kind must follow.
    pub fn name_rule(&self) -> NameRule {
        match (self.group.as_str(), self.kind.as_str()) {
            ("", "Service") => NameRule::Dns1035Label,
            ("", "Namespace") => NameRule::Dns1123Label,
            (
                "rbac.authorization.k8s.io",
                "Role" | "RoleBinding" | "ClusterRole" | "ClusterRoleBinding",
            ) => NameRule::PathSegment,
            _ => NameRule::Dns1123Subdomain,
        }
    }

    /// Whether this is a cluster-scoped kind known without asking the API server.
    /// The engine asks discovery for every other kind; the offline CLI trusts this list.
    pub fn is_known_cluster_scoped(&self) -> bool {
        KNOWN_CLUSTER_SCOPED
            .iter()
            .any(|(group, kind)| *group == self.group && *kind == self.kind)
    }
}

impl fmt::Display for GroupKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.group.is_empty() {
            f.write_str(&self.kind)
        } else {
            write!(f, "{}.{}", self.kind, self.group)
        }
    }
}

/// Built-in cluster-scoped kinds.
const KNOWN_CLUSTER_SCOPED: &[(&str, &str)] = &[
    ("", "Namespace"),
    ("", "Node"),
    ("", "PersistentVolume"),
    ("", "ComponentStatus"),
    ("rbac.authorization.k8s.io", "ClusterRole"),
    ("rbac.authorization.k8s.io", "ClusterRoleBinding"),
    ("storage.k8s.io", "StorageClass"),
    ("storage.k8s.io", "CSIDriver"),
    ("storage.k8s.io", "CSINode"),
    ("storage.k8s.io", "VolumeAttachment"),
    ("scheduling.k8s.io", "PriorityClass"),
    ("node.k8s.io", "RuntimeClass"),
    ("networking.k8s.io", "IngressClass"),
    ("apiextensions.k8s.io", "CustomResourceDefinition"),
    ("apiregistration.k8s.io", "APIService"),
    (
        "admissionregistration.k8s.io",
        "ValidatingWebhookConfiguration",
    ),
    (
        "admissionregistration.k8s.io",
        "MutatingWebhookConfiguration",
    ),
    ("admissionregistration.k8s.io", "ValidatingAdmissionPolicy"),
    (
        "admissionregistration.k8s.io",
        "ValidatingAdmissionPolicyBinding",
    ),
    ("certificates.k8s.io", "CertificateSigningRequest"),
    ("flowcontrol.apiserver.k8s.io", "FlowSchema"),
    ("flowcontrol.apiserver.k8s.io", "PriorityLevelConfiguration"),
    ("policy", "PodSecurityPolicy"),
    ("tenantplane.io", "IsolationProfile"),
    ("tenantplane.io", "SyncPolicy"),
];

/// Whether a kind's objects live in namespaces.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Scope {
    Namespaced,
    Cluster,
}

/// A kind that cannot be synced, or is not a kind at all.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum KindError {
    #[error(
        "invalid apiVersion {api_version:?}: expected VERSION or GROUP/VERSION, such as v1 or apps/v1"
    )]
    InvalidApiVersion { api_version: String },
    #[error("invalid kind {kind:?}: expected a CamelCase kind such as ConfigMap")]
    InvalidKind { kind: String },
    #[error(
        "{group_kind} is cluster-scoped: tenantplane syncs namespaced kinds only, because a \
         cluster-scoped host object would be shared by every tenant (see docs/naming.md)"
    )]
    ClusterScoped { group_kind: GroupKind },
}

/// Refuses kinds tenantplane cannot sync. Cluster-scoped kinds are refused: a host
/// object outside the tenant's namespace would escape every namespace boundary.
pub fn check_syncable(group_kind: &GroupKind, scope: Scope) -> Result<(), KindError> {
    match scope {
        Scope::Namespaced => Ok(()),
        Scope::Cluster => Err(KindError::ClusterScoped {
            group_kind: group_kind.clone(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_versions_split_into_groups() {
        assert_eq!(
            GroupKind::from_api_version("v1", "Pod").unwrap(),
            GroupKind::new("", "Pod")
        );
        assert_eq!(
            GroupKind::from_api_version("apps/v1", "Deployment").unwrap(),
            GroupKind::new("apps", "Deployment")
        );
        for bad in ["", "/v1", "apps/", "a/b/c"] {
            assert!(GroupKind::from_api_version(bad, "Pod").is_err(), "{bad:?}");
        }
        for bad in ["", "pod", "Pod-x", "Po d"] {
            assert!(GroupKind::from_api_version("v1", bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn annotation_values_round_trip() {
        for gk in [
            GroupKind::new("", "ConfigMap"),
            GroupKind::new("example.com", "Widget"),
        ] {
            assert_eq!(
                GroupKind::from_annotation_value(&gk.to_annotation_value()),
                Some(gk)
            );
        }
        assert_eq!(
            GroupKind::new("apps", "Deployment").to_string(),
            "Deployment.apps"
        );
    }

    #[test]
    fn name_rules_follow_the_api_server() {
        assert_eq!(
            GroupKind::new("", "Service").name_rule(),
            NameRule::Dns1035Label
        );
        assert_eq!(
            GroupKind::new("", "ConfigMap").name_rule(),
            NameRule::Dns1123Subdomain
        );
        assert_eq!(
            GroupKind::new("rbac.authorization.k8s.io", "Role").name_rule(),
            NameRule::PathSegment
        );
    }

    #[test]
    fn cluster_scoped_kinds_are_refused() {
        let pv = GroupKind::new("", "PersistentVolume");
        assert!(pv.is_known_cluster_scoped());
        let err = check_syncable(&pv, Scope::Cluster).unwrap_err();
        assert!(err.to_string().contains("cluster-scoped"), "{err}");
        assert!(check_syncable(&GroupKind::new("", "ConfigMap"), Scope::Namespaced).is_ok());
    }
}
