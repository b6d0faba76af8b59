//! `Tenant`: a group of host namespaces owned by a team (namespace tenancy).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{LimitRangeSpec, ResourceQuotaSpec};
use k8s_openapi::api::networking::v1::NetworkPolicySpec;
use k8s_openapi::api::rbac::v1::Subject;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::common::LocalRef;
use crate::policy_rules::PolicyRules;

/// A group of host namespaces with owners, a namespace quota, replicated policies and
/// allowed classes. A namespace belongs to a Tenant only through an owner reference
/// whose kind, API group and UID match it.
#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "tenantplane.io",
    version = "v1alpha1",
    kind = "Tenant",
    shortname = "tnt",
    category = "tenantplane",
    status = "TenantStatus",
    doc = "A group of host namespaces owned by a team.",
    printcolumn(name = "State", type_ = "string", json_path = ".status.state"),
    printcolumn(
        name = "Namespace quota",
        type_ = "integer",
        json_path = ".spec.namespaceOptions.quota"
    ),
    printcolumn(
        name = "Namespace count",
        type_ = "integer",
        json_path = ".status.size"
    ),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct TenantSpec {
    /// Who may create namespaces in this tenant and administer them.
    #[schemars(length(min = 1))]
    pub owners: Vec<TenantOwner>,
    #[serde(default)]
    pub namespace_options: NamespaceOptions,
    /// An IsolationProfile compiled into every member namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub isolation_profile_ref: Option<LocalRef>,
    /// NetworkPolicies replicated into every member namespace.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub network_policies: Vec<NetworkPolicySpec>,
    /// LimitRanges replicated into every member namespace.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub limit_ranges: Vec<LimitRangeSpec>,
    /// ResourceQuotas replicated into every member namespace (each namespace gets
    /// the whole quota; use a ResourcePool to share one quota between namespaces).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resource_quotas: Vec<ResourceQuotaSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_classes: Option<AllowedClasses>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_classes: Option<AllowedClasses>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_classes: Option<AllowedClasses>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ingress_classes: Option<AllowedClasses>,
    /// Extra RoleBindings in every member namespace.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub additional_role_bindings: Vec<AdditionalRoleBinding>,
    /// Node selector enforced on the tenant's pods.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,
    /// A cordoned tenant refuses writes in its namespaces.
    #[serde(default)]
    pub cordoned: bool,
    /// Refuse deleting the Tenant while set.
    #[serde(default)]
    pub prevent_deletion: bool,
    /// Images, Services, Ingress hosts and metadata the tenant may use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rules: Option<PolicyRules>,
}

/// A tenant owner: a user, group or service account.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TenantOwner {
    pub kind: OwnerKind,
    /// User or group name; for a ServiceAccount `system:serviceaccount:NS:NAME`.
    #[schemars(length(min = 1))]
    pub name: String,
    /// ClusterRoles bound to the owner in every member namespace.
    #[serde(default = "default_owner_roles")]
    pub cluster_roles: Vec<String>,
}

/// The ClusterRole that lets owners delete their namespaces (and nothing else).
pub const NAMESPACE_DELETER_ROLE: &str = "tenantplane-namespace-deleter";

fn default_owner_roles() -> Vec<String> {
    vec!["admin".into(), NAMESPACE_DELETER_ROLE.into()]
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum OwnerKind {
    User,
    Group,
    ServiceAccount,
}

/// How namespaces join the tenant.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NamespaceOptions {
    /// Most namespaces the tenant may have; unset means no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 10000))]
    pub quota: Option<u32>,
    /// Namespace names must start with `<tenant>-`.
    #[serde(default)]
    pub force_tenant_prefix: bool,
    /// Labels and annotations put on every member namespace.
    #[serde(default)]
    pub additional_metadata: AdditionalMetadata,
    /// What deleting the Tenant does to its member namespaces.
    #[serde(default)]
    pub on_delete: OnDelete,
}

/// What deleting a Tenant does to its member namespaces.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum OnDelete {
    // Plain comments, not doc comments: documented variants would make the schema
    // a `oneOf`, which a CRD's structural schema does not take.
    // Keep them, without the Tenant's owner reference, label, RoleBindings and
    // policies (the default).
    #[default]
    Orphan,
    // Delete them (with everything in them) before the Tenant goes.
    Delete,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AdditionalMetadata {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// Classes (storage, priority, runtime, ingress) the tenant may use.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AllowedClasses {
    /// Allowed class names; empty allows only the default.
    #[serde(default)]
    pub allowed: Vec<String>,
    /// Injected when an object names no class; always allowed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AdditionalRoleBinding {
    pub cluster_role_name: String,
    pub subjects: Vec<Subject>,
}

/// Observed state of a Tenant.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TenantStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "TenantState")]
    pub state: Option<TenantState>,
    /// Member namespaces.
    #[serde(default)]
    pub size: u32,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub namespaces: Vec<TenantNamespaceStatus>,
    /// Namespace slots taken by admitted creations not yet seen as members. The
    /// admission webhook takes a slot with a compare-and-swap on this list, so
    /// concurrent creations can never exceed the quota.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reservations: Vec<NamespaceReservation>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum TenantState {
    Active,
    Cordoned,
    Terminating,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TenantNamespaceStatus {
    pub name: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NamespaceReservation {
    pub namespace: String,
    /// The slot is released if the namespace has not appeared by then.
    pub expires: Time,
}
