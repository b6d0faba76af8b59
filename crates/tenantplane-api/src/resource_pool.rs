//! `ResourcePool` and `ResourcePoolClaim`: one ResourceQuota shared by several
//! namespaces, handed out in slices so that together they never exceed it.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ResourceQuotaSpec;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Resource name → amount, as in a ResourceQuota's `hard`.
pub type ResourceAmounts = BTreeMap<String, Quantity>;

/// A quota shared by the namespaces its selector picks. Each picked namespace gets
/// one ResourceQuota (`tenantplane-pool-<pool>`) equal to its defaults plus its bound
/// claims; the pool's status is the ledger of everything handed out.
#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "tenantplane.io",
    version = "v1alpha1",
    kind = "ResourcePool",
    shortname = "rpool",
    category = "tenantplane",
    status = "ResourcePoolStatus",
    doc = "A quota shared by several namespaces without overshoot.",
    printcolumn(name = "Namespaces", type_ = "integer", json_path = ".status.size"),
    printcolumn(name = "Claims", type_ = "integer", json_path = ".status.claimCount"),
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
pub struct ResourcePoolSpec {
    /// The namespaces that share the pool.
    pub namespace_selector: LabelSelector,
    /// The pool's total (`hard`), and the scopes every namespace's quota carries.
    pub quota: ResourceQuotaSpec,
    /// Granted to every selected namespace without a claim, while the pool has room;
    /// counts against the pool like a claim.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub defaults: ResourceAmounts,
}

/// The pool's ledger: what is handed out, to whom.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourcePoolStatus {
    /// Selected namespaces.
    #[serde(default)]
    pub size: u32,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub namespaces: Vec<String>,
    /// Bound claims (not defaults).
    #[serde(default)]
    pub claim_count: u32,
    /// Every grant, defaults and claims. The amounts are those at binding time: a
    /// claim edited afterwards does not change what it holds.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allocations: Vec<PoolAllocation>,
    /// Sum of `allocations` per resource.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub allocated: ResourceAmounts,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}

/// One grant from a pool to a namespace.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PoolAllocation {
    pub namespace: String,
    /// The ResourcePoolClaim's name; absent for the namespace's defaults.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claim: Option<String>,
    /// The claim's UID, so a claim deleted and recreated under the same name is a
    /// new claim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
    pub resources: ResourceAmounts,
}

/// A slice of a ResourcePool for this namespace. Claims bind oldest first while the
/// pool has room; a bound claim keeps what it was bound with.
#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "tenantplane.io",
    version = "v1alpha1",
    kind = "ResourcePoolClaim",
    namespaced,
    shortname = "rpc",
    category = "tenantplane",
    status = "ResourcePoolClaimStatus",
    doc = "A slice of a ResourcePool for one namespace.",
    printcolumn(name = "Pool", type_ = "string", json_path = ".spec.pool"),
    printcolumn(
        name = "Bound",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Bound\")].status"
    ),
    printcolumn(
        name = "Reason",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Bound\")].reason"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct ResourcePoolClaimSpec {
    /// The ResourcePool to claim from.
    #[schemars(length(min = 1, max = 253))]
    pub pool: String,
    /// What to take from it; every resource must be in the pool's `hard`.
    pub claim: ResourceAmounts,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourcePoolClaimStatus {
    /// The pool the claim is bound to, once bound.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool: Option<String>,
    /// What the claim holds (the amounts at binding time).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub bound: ResourceAmounts,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}
