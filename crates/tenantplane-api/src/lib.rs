//! The `tenantplane.io/v1alpha1` API.
//!
//! Every CRD tenantplane installs is generated from the Rust types in this crate, so
//! the schema the API server enforces and the structs the controllers read cannot
//! drift apart. [`crds`] lists them in install order; [`crds_yaml`] renders the one
//! YAML stream that is committed under `deploy/crds/`.

// kube's `printcolumn(...)` repeats `type_ = "string"` by design; clippy reads the
// repetition as duplicated attributes.
#![allow(clippy::duplicated_attributes)]

pub mod common;
pub mod isolation_profile;
pub mod policy_rules;
pub mod resource_pool;
pub mod sync_decision;
pub mod sync_policy;
pub mod tenant;
pub mod tenant_cluster;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

pub use common::{ConditionType, LocalRef, SecretKeyRef};
pub use isolation_profile::{
    ApiFairness, EffectiveControls, IsolationControls, IsolationLevel, IsolationProfile,
    IsolationProfileSpec, PodSecurityLevel,
};
pub use policy_rules::{
    ImageRules, IngressRules, KeyPatterns, MetadataKeyRules, MetadataRules, PolicyRules,
    PullPolicy, ServiceRules, ServiceType,
};
pub use resource_pool::{
    PoolAllocation, ResourceAmounts, ResourcePool, ResourcePoolClaim, ResourcePoolClaimSpec,
    ResourcePoolClaimStatus, ResourcePoolSpec, ResourcePoolStatus,
};
pub use sync_decision::{
    ConflictHistory, ConflictRecord, ConflictResolution, DecisionAction, DecisionRecord,
    HostTarget, SyncDecision, SyncDecisionSpec, SyncDecisionStatus, TenantObjectRef,
};
pub use sync_policy::{
    ConflictPolicy, DriftDetection, ExplainOptions, FieldOwner, FieldOwnershipRule, SyncDirection,
    SyncPolicy, SyncPolicySpec, SyncResource,
};
pub use tenant::{
    AdditionalMetadata, AdditionalRoleBinding, AllowedClasses, NAMESPACE_DELETER_ROLE,
    NamespaceOptions, NamespaceReservation, OnDelete, OwnerKind, Tenant, TenantNamespaceStatus,
    TenantOwner, TenantSpec, TenantState, TenantStatus,
};
pub use tenant_cluster::{
    ClusterMode, ControlPlane, ControlPlaneImages, Datastore, Distro, EgressPolicy, Expose,
    ExternalControlPlane, LoadBalancer, Migration, Networking, NodeMode, Nodes, ResourceLimits,
    Storage, SyncedResource, TenantCluster, TenantClusterPhase, TenantClusterSpec,
    TenantClusterStatus,
};

/// The API group of every tenantplane resource.
pub const GROUP: &str = "tenantplane.io";
/// The one served and stored version.
pub const VERSION: &str = "v1alpha1";

/// All CRDs, in the order they should be installed.
pub fn crds() -> Vec<CustomResourceDefinition> {
    vec![
        TenantCluster::crd(),
        IsolationProfile::crd(),
        SyncPolicy::crd(),
        SyncDecision::crd(),
        Tenant::crd(),
        ResourcePool::crd(),
        ResourcePoolClaim::crd(),
    ]
}

/// Why the CRDs could not be rendered.
#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    #[error("could not render CRD {name} as YAML: {source}")]
    Yaml {
        name: String,
        #[source]
        source: serde_saphyr::ser_error::Error,
    },
}

/// All CRDs as one YAML stream (`---` separated): what `tenantplane crds` prints and
/// what `deploy/crds/tenantplane.io.yaml` holds.
pub fn crds_yaml() -> Result<String, RenderError> {
    let mut out = String::new();
    for crd in crds() {
        let name = crd.metadata.name.clone().unwrap_or_default();
        let doc =
            serde_saphyr::to_string(&crd).map_err(|source| RenderError::Yaml { name, source })?;
        out.push_str("---\n");
        out.push_str(&doc);
        if !doc.ends_with('\n') {
            out.push('\n');
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_crd_is_in_the_tenantplane_group_with_a_short_name() {
        let crds = crds();
        assert_eq!(crds.len(), 7);
        for crd in &crds {
            assert_eq!(crd.spec.group, GROUP);
            assert_eq!(crd.spec.versions.len(), 1);
            assert_eq!(crd.spec.versions[0].name, VERSION);
            let short = crd.spec.names.short_names.clone().unwrap_or_default();
            assert_eq!(short.len(), 1, "{:?}", crd.metadata.name);
        }
        let scopes: Vec<_> = crds
            .iter()
            .map(|c| (c.spec.names.kind.as_str(), c.spec.scope.as_str()))
            .collect();
        assert_eq!(
            scopes,
            [
                ("TenantCluster", "Namespaced"),
                ("IsolationProfile", "Cluster"),
                ("SyncPolicy", "Cluster"),
                ("SyncDecision", "Namespaced"),
                ("Tenant", "Cluster"),
                ("ResourcePool", "Cluster"),
                ("ResourcePoolClaim", "Namespaced"),
            ]
        );
    }

    /// Walks a schema for constructs the oldest supported API server (1.20) rejects
    /// or decodes wrongly: `null` in an enum, and non-structural combinators.
    fn schema_problems(path: &str, value: &serde_json::Value, problems: &mut Vec<String>) {
        match value {
            serde_json::Value::Object(map) => {
                if let Some(serde_json::Value::Array(items)) = map.get("enum")
                    && items.iter().any(serde_json::Value::is_null)
                {
                    problems.push(format!("{path}: null in enum"));
                }
                for key in ["anyOf", "oneOf", "allOf", "$ref", "not"] {
                    if map.contains_key(key) {
                        problems.push(format!("{path}: {key}"));
                    }
                }
                for (key, child) in map {
                    schema_problems(&format!("{path}.{key}"), child, problems);
                }
            }
            serde_json::Value::Array(items) => {
                for (i, child) in items.iter().enumerate() {
                    schema_problems(&format!("{path}[{i}]"), child, problems);
                }
            }
            _ => {}
        }
    }

    #[test]
    fn schemas_are_structural_for_old_api_servers() {
        let mut problems = Vec::new();
        for crd in crds() {
            let name = crd.metadata.name.clone().unwrap_or_default();
            let value = serde_json::to_value(&crd.spec.versions[0].schema).expect("schema as JSON");
            schema_problems(&name, &value, &mut problems);
        }
        assert!(problems.is_empty(), "{problems:#?}");
    }

    #[test]
    fn crds_render_as_one_yaml_stream() {
        let yaml = crds_yaml().expect("render");
        assert_eq!(yaml.matches("---\n").count(), 7);
        std::fs::write(std::env::temp_dir().join("tenantplane-crds.yaml"), &yaml).ok();
    }
}
