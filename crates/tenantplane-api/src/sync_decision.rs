//! `SyncDecision`: the durable record of what the sync engine did and why.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::sync_policy::ConflictPolicy;

/// The latest decisions of one TenantCluster's sync engine, newest last. One per
/// TenantCluster, with the same name, owned by it.
#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "tenantplane.io",
    version = "v1alpha1",
    kind = "SyncDecision",
    namespaced,
    shortname = "sd",
    category = "tenantplane",
    status = "SyncDecisionStatus",
    doc = "The latest sync decisions of one TenantCluster, newest last.",
    printcolumn(
        name = "TenantCluster",
        type_ = "string",
        json_path = ".spec.tenantCluster"
    ),
    printcolumn(name = "Retained", type_ = "integer", json_path = ".status.retained"),
    printcolumn(name = "Total", type_ = "integer", json_path = ".status.total"),
    printcolumn(name = "Last", type_ = "date", json_path = ".status.lastDecisionTime")
)]
#[serde(rename_all = "camelCase")]
pub struct SyncDecisionSpec {
    /// The TenantCluster (same namespace) whose decisions these are.
    #[schemars(length(min = 1, max = 63))]
    pub tenant_cluster: String,
}

/// The retained decisions.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SyncDecisionStatus {
    /// Oldest first; capped at the SyncPolicy's `explain.retain`.
    #[serde(default)]
    pub decisions: Vec<DecisionRecord>,
    /// How many decisions are retained now.
    #[serde(default)]
    pub retained: u32,
    /// How many decisions were ever recorded, evicted ones included.
    #[serde(default)]
    pub total: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_decision_time: Option<Time>,
    /// Every bidirectional object that conflicted, with its latest conflicts and
    /// how they were settled. Kept apart from `decisions` so they outlive
    /// `explain.retain`; the object least recently in conflict goes first when
    /// there are more than 100.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conflicts: Vec<ConflictHistory>,
}

/// The conflicts of one bidirectional object, oldest first.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConflictHistory {
    /// API version of the synced kind, such as `example.com/v1`.
    pub api_version: String,
    pub kind: String,
    pub tenant: TenantObjectRef,
    pub host: HostTarget,
    /// The latest conflicts and resolutions, newest last (at most 10).
    #[serde(default)]
    pub records: Vec<ConflictRecord>,
}

/// One conflict of a bidirectional object, or the moment a manual one ended.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConflictRecord {
    pub time: Time,
    /// The field paths (JSON pointers) both sides had changed.
    pub fields: Vec<String>,
    /// The SyncPolicy's `conflictPolicy` when it happened.
    pub policy: ConflictPolicy,
    pub resolution: ConflictResolution,
    /// Each side's value, and what was overwritten, in words.
    pub detail: String,
}

/// How a conflict ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum ConflictResolution {
    /// `manual`: both sides were left alone; the TenantCluster is `Conflicted`.
    LeftAlone,
    /// The tenant's value overwrote the host's.
    TenantWon,
    /// The host's value overwrote the tenant's.
    HostWon,
    /// A conflict left alone ended: the sides agree again.
    Resolved,
}

/// One action of the sync engine, with its reason.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DecisionRecord {
    pub action: DecisionAction,
    /// API version of the synced kind, such as `v1`.
    pub api_version: String,
    pub kind: String,
    /// The tenant object the decision is about.
    pub tenant: TenantObjectRef,
    /// The host object the decision acted on, or would have.
    pub host: HostTarget,
    /// Why, in words a person can act on.
    pub reason: String,
    pub time: Time,
}

/// What the engine did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum DecisionAction {
    Create,
    Update,
    Delete,
    Skip,
}

impl DecisionAction {
    pub fn as_str(self) -> &'static str {
        match self {
            DecisionAction::Create => "Create",
            DecisionAction::Update => "Update",
            DecisionAction::Delete => "Delete",
            DecisionAction::Skip => "Skip",
        }
    }
}

/// A tenant object: where it lives in the tenant cluster.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TenantObjectRef {
    /// The virtual namespace.
    pub namespace: String,
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
}

/// A host object: where a tenant object lands.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HostTarget {
    pub namespace: String,
    pub name: String,
}
