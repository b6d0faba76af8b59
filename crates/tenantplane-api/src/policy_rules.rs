//! `PolicyRules`: what a tenant may put in its Pods, Services, Ingresses and
//! metadata. One type, used by `Tenant.spec.rules` (enforced by the namespace-tenant
//! webhooks) and `IsolationProfile.spec.rules` (enforced by the sync engine on a
//! virtual tenant's Pods and Services).
//!
//! Every list is optional: absent means "no restriction", an empty list allows
//! nothing. Patterns are checked when the Tenant or IsolationProfile is admitted;
//! the matching rules are in `tenantplane_core::policy_rules`.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PolicyRules {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub images: Option<ImageRules>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub services: Option<ServiceRules>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ingress: Option<IngressRules>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<MetadataRules>,
}

/// Rules for every container image (containers, initContainers, ephemeralContainers).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImageRules {
    /// Registries images may come from: an exact host (`registry.example.com`,
    /// `host:5000`; `docker.io` for `busybox`) or a repository prefix ending in `/`
    /// (`ghcr.io/acme/`), matched against the normalised reference.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_registries: Option<Vec<String>>,
    /// `imagePullPolicy` values containers must use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_pull_policies: Option<Vec<PullPolicy>>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum PullPolicy {
    Always,
    IfNotPresent,
    Never,
}

impl PullPolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            PullPolicy::Always => "Always",
            PullPolicy::IfNotPresent => "IfNotPresent",
            PullPolicy::Never => "Never",
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServiceRules {
    /// Service types allowed (`ClusterIP`, `NodePort`, `LoadBalancer`, `ExternalName`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_types: Option<Vec<ServiceType>>,
    /// `spec.externalIPs` is refused unless this is true.
    #[serde(default, rename = "allowExternalIPs")]
    pub allow_external_ips: bool,
    /// Host-name patterns an ExternalName Service may point at (exact, or `*.`
    /// followed by a domain: exactly one more label).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_external_names: Option<Vec<String>>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum ServiceType {
    ClusterIP,
    NodePort,
    LoadBalancer,
    ExternalName,
}

impl ServiceType {
    pub fn as_str(self) -> &'static str {
        match self {
            ServiceType::ClusterIP => "ClusterIP",
            ServiceType::NodePort => "NodePort",
            ServiceType::LoadBalancer => "LoadBalancer",
            ServiceType::ExternalName => "ExternalName",
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct IngressRules {
    /// Host-name patterns Ingress rules and TLS entries may use (exact, or `*.`
    /// followed by a domain: exactly one more label).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_hostnames: Option<Vec<String>>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MetadataRules {
    /// Keys tenant owners may not set on their namespaces.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespaces: Option<MetadataKeyRules>,
    /// Keys tenant owners may not set on their Services.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub services: Option<MetadataKeyRules>,
}

/// Label and annotation keys, each checked with its own rule.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MetadataKeyRules {
    /// Label keys that may not be set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forbidden_labels: Option<KeyPatterns>,
    /// Annotation keys that may not be set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forbidden_annotations: Option<KeyPatterns>,
    /// When set, the only label keys that may be set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_labels: Option<KeyPatterns>,
    /// When set, the only annotation keys that may be set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_annotations: Option<KeyPatterns>,
}

/// Keys by exact name or by a regular expression (RE2 syntax, matched against the
/// whole key: it is anchored as `^(?:REGEX)$`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KeyPatterns {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exact: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024))]
    pub regex: Option<String>,
}
