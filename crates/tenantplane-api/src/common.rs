//! Small types shared by several resources.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A reference by name to a cluster-scoped tenantplane resource.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LocalRef {
    /// Name of the referenced object.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
}

impl LocalRef {
    pub fn new(name: impl Into<String>) -> Self {
        Self { name: name.into() }
    }
}

/// A key inside a Secret in the TenantCluster's own namespace.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecretKeyRef {
    /// Name of the Secret.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// Key in the Secret's data that holds a kubeconfig.
    #[serde(default = "default_kubeconfig_key")]
    #[schemars(length(min = 1, max = 253))]
    pub key: String,
}

fn default_kubeconfig_key() -> String {
    "kubeconfig".to_owned()
}

/// The condition types tenantplane sets on a TenantCluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ConditionType {
    /// The tenant API server is reachable and every part of the tenant is in place.
    Ready,
    /// The last sync pass finished without errors.
    Synced,
    /// The requested `mode` is implemented as requested.
    ModeSupported,
    /// The IsolationProfile's host objects are in place.
    IsolationApplied,
}

impl ConditionType {
    pub const ALL: [ConditionType; 4] = [
        ConditionType::Ready,
        ConditionType::Synced,
        ConditionType::ModeSupported,
        ConditionType::IsolationApplied,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ConditionType::Ready => "Ready",
            ConditionType::Synced => "Synced",
            ConditionType::ModeSupported => "ModeSupported",
            ConditionType::IsolationApplied => "IsolationApplied",
        }
    }
}

impl std::fmt::Display for ConditionType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
