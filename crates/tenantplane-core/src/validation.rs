//! The rules tenantplane's resources must follow beyond their schema. The admission
//! webhook enforces them; the CLI checks the same rules offline. Every violation
//! names its field and says what to change.

use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;
use std::time::Duration;

use tenantplane_api::sync_policy::parse_interval;
use tenantplane_api::{IsolationProfileSpec, SyncDirection, SyncPolicySpec, TenantClusterSpec};

use crate::kinds::{GroupKind, KindError};
use crate::name_rules::{NameRule, validate_tenant_name};
use crate::quantity::validate_non_negative;
use crate::versions;

/// The shortest drift interval: every pass lists every synced kind.
pub const MIN_DRIFT_INTERVAL: Duration = Duration::from_secs(1);

/// One broken rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// The field's path, such as `spec.kubernetesVersion`.
    pub field: String,
    /// What is wrong and what to change.
    pub message: String,
}

impl Violation {
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            message: message.into(),
        }
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

/// The violations of `new` that `old` did not already have. An update may keep a
/// problem the object had before these rules existed (so the controller can still
/// update such an object, such as to remove its finalizer), but add none.
pub fn introduced(old: &[Violation], new: Vec<Violation>) -> Vec<Violation> {
    new.into_iter().filter(|v| !old.contains(v)).collect()
}

fn check_subdomain(field: &str, name: &str, what: &str, out: &mut Vec<Violation>) {
    if let Err(err) = NameRule::Dns1123Subdomain.validate(name) {
        out.push(Violation::new(field, format!("{err}: {what}")));
    }
}

/// A TenantCluster's name and spec.
pub fn tenant_cluster(name: &str, spec: &TenantClusterSpec) -> Vec<Violation> {
    let mut out = Vec::new();
    if let Err(err) = validate_tenant_name(name) {
        out.push(Violation::new(
            "metadata.name",
            format!(
                "{err}; choose a lower-case DNS label of at most 40 characters (the tenant's host objects are named after it)"
            ),
        ));
    }
    if let Err(err) = versions::resolve(&spec.kubernetes_version) {
        out.push(Violation::new("spec.kubernetesVersion", err.to_string()));
    }
    check_subdomain(
        "spec.isolationProfileRef.name",
        &spec.isolation_profile_ref.name,
        "name an IsolationProfile",
        &mut out,
    );
    check_subdomain(
        "spec.syncPolicyRef.name",
        &spec.sync_policy_ref.name,
        "name a SyncPolicy",
        &mut out,
    );
    for (i, san) in spec.control_plane.extra_sans.iter().enumerate() {
        if !is_ip_or_dns_name(san) {
            out.push(Violation::new(
                format!("spec.controlPlane.extraSANs[{i}]"),
                format!(
                    "{san:?} is neither an IP address nor a DNS name: write an IP such as 10.0.0.10 or a lower-case DNS name such as api.example.com"
                ),
            ));
        }
    }
    if let Some(external) = &spec.control_plane.external {
        check_subdomain(
            "spec.controlPlane.external.kubeconfigSecretRef.name",
            &external.kubeconfig_secret_ref.name,
            "name a Secret in the TenantCluster's namespace",
            &mut out,
        );
    }
    if let Some(resources) = &spec.resources {
        for (field, quantity) in [("cpu", &resources.cpu), ("memory", &resources.memory)] {
            if let Some(Err(err)) = quantity.as_ref().map(|q| validate_non_negative(&q.0)) {
                out.push(Violation::new(
                    format!("spec.resources.{field}"),
                    err.to_string(),
                ));
            }
        }
    }
    out
}

/// What may not change between two versions of a TenantCluster.
pub fn tenant_cluster_update(old: &TenantClusterSpec, new: &TenantClusterSpec) -> Vec<Violation> {
    let mut out = Vec::new();
    // The new object's flag counts, so one apply can both allow and make the change;
    // what the rule prevents is a mode change nobody asked for explicitly.
    if old.mode != new.mode && !new.migration.allow_mode_change {
        out.push(Violation::new(
            "spec.mode",
            format!(
                "cannot change from {} to {} after creation: set spec.migration.allowModeChange: true to migrate the tenant, or keep mode: {}",
                old.mode.as_str(),
                new.mode.as_str(),
                old.mode.as_str()
            ),
        ));
    }
    out
}

/// A SAN is an IP address, or a DNS name (optionally a `*.` wildcard, as certificates allow).
fn is_ip_or_dns_name(san: &str) -> bool {
    if san.parse::<IpAddr>().is_ok() {
        return true;
    }
    let name = san.strip_prefix("*.").unwrap_or(san);
    NameRule::Dns1123Subdomain.validate(name).is_ok()
}

/// An IsolationProfile's spec.
pub fn isolation_profile(spec: &IsolationProfileSpec) -> Vec<Violation> {
    let mut out = Vec::new();
    if let Some(runtime_class) = &spec.controls.runtime_class_name {
        check_subdomain(
            "spec.controls.runtimeClassName",
            runtime_class,
            "name a RuntimeClass that exists on the host",
            &mut out,
        );
    }
    for (i, class) in spec
        .controls
        .allowed_ingress_classes
        .iter()
        .flatten()
        .enumerate()
    {
        check_subdomain(
            &format!("spec.controls.allowedIngressClasses[{i}]"),
            class,
            "name an IngressClass",
            &mut out,
        );
    }
    if let Some(fairness) = &spec.controls.api_fairness
        && fairness.burst < fairness.qps
    {
        out.push(Violation::new(
            "spec.controls.apiFairness.burst",
            format!(
                "burst ({}) must be at least qps ({}): raise burst or lower qps",
                fairness.burst, fairness.qps
            ),
        ));
    }
    if let Some(rules) = &spec.rules {
        out.extend(crate::policy_rules::violations("spec.rules", rules));
    }
    out
}

/// A Tenant's spec: its policy rules' patterns all compile.
pub fn tenant(spec: &tenantplane_api::TenantSpec) -> Vec<Violation> {
    spec.rules
        .as_ref()
        .map(|rules| crate::policy_rules::violations("spec.rules", rules))
        .unwrap_or_default()
}

/// A SyncPolicy's spec.
pub fn sync_policy(spec: &SyncPolicySpec) -> Vec<Violation> {
    let mut out = Vec::new();
    let mut seen: BTreeMap<(GroupKind, bool), usize> = BTreeMap::new();
    for (i, resource) in spec.resources.iter().enumerate() {
        let field = format!("spec.resources[{i}]");
        let group_kind = match GroupKind::from_api_version(&resource.api_version, &resource.kind) {
            Ok(group_kind) => group_kind,
            Err(err) => {
                out.push(Violation::new(field, err.to_string()));
                continue;
            }
        };
        let from_host = resource.direction == SyncDirection::FromHost;
        if group_kind.is_known_cluster_scoped() {
            let refused = if from_host {
                crate::from_host::check_kind(&group_kind, true, !resource.mappings.is_empty())
                    .err()
                    .map(|e| e.to_string())
            } else {
                let err = KindError::ClusterScoped {
                    group_kind: group_kind.clone(),
                };
                Some(format!("{err}; remove it, or sync it fromHost"))
            };
            if let Some(message) = refused {
                out.push(Violation::new(field, message));
                continue;
            }
        }
        // A kind may be listed once per side: toHost or bidirectional, and fromHost
        // (say, the tenant's ConfigMaps down, and a mapped CA bundle up).
        match seen.get(&(group_kind.clone(), from_host)) {
            Some(first) => out.push(Violation::new(
                field,
                format!(
                    "{group_kind} is already listed at spec.resources[{first}]: list each kind once"
                ),
            )),
            None => {
                seen.insert((group_kind, from_host), i);
            }
        }
    }
    for (i, resource) in spec.resources.iter().enumerate() {
        for (j, mapping) in resource.mappings.iter().enumerate() {
            let field = format!("spec.resources[{i}].mappings[{j}]");
            if resource.direction != SyncDirection::FromHost {
                out.push(Violation::new(field, "mappings are for direction fromHost"));
            } else if let Err(err) = crate::from_host::parse_mapping(mapping) {
                out.push(Violation::new(field, err.to_string()));
            }
        }
        if !resource.field_ownership.is_empty()
            && resource.direction != SyncDirection::Bidirectional
        {
            out.push(Violation::new(
                format!("spec.resources[{i}].fieldOwnership"),
                "field ownership is for direction bidirectional",
            ));
        }
    }
    let field = "spec.driftDetection.interval";
    match parse_interval(&spec.drift_detection.interval) {
        Err(err) => out.push(Violation::new(field, err.to_string())),
        Ok(interval) if interval < MIN_DRIFT_INTERVAL => out.push(Violation::new(
            field,
            format!(
                "{:?} is shorter than 1s: every pass lists every synced kind, so use 1s or more, such as 30s",
                spec.drift_detection.interval
            ),
        )),
        Ok(_) => {}
    }
    out
}

#[cfg(test)]
#[path = "validation_tests.rs"]
mod tests;
