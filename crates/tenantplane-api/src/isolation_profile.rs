//! `IsolationProfile`: the explicit boundary a tenant runs inside on the host.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The boundary that holds a tenant on the host: network policy, quota, limits, Pod
/// Security level, runtime class and API fairness. A `level` picks a built-in set
/// of controls; any control set explicitly overrides the level's value.
#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "tenantplane.io",
    version = "v1alpha1",
    kind = "IsolationProfile",
    shortname = "iprof",
    category = "tenantplane",
    doc = "The boundary that holds a tenant on the host.",
    printcolumn(name = "Level", type_ = "string", json_path = ".spec.level"),
    printcolumn(
        name = "PodSecurity",
        type_ = "string",
        json_path = ".spec.controls.podSecurity"
    ),
    printcolumn(
        name = "RuntimeClass",
        type_ = "string",
        json_path = ".spec.controls.runtimeClassName"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct IsolationProfileSpec {
    /// The built-in level whose controls apply unless overridden below.
    #[serde(default)]
    pub level: IsolationLevel,
    /// Explicit controls; each one set here overrides the level's value.
    #[serde(default)]
    pub controls: IsolationControls,
    /// Policy rules for the tenant's objects; the sync engine refuses (does not
    /// sync) a Pod whose images break them, and a Service that breaks the Service
    /// rules or the `metadata.services` key rules (a host copy synced before is kept
    /// as it was). The Ingress and namespace metadata rules are validated only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rules: Option<crate::policy_rules::PolicyRules>,
}

/// Built-in isolation levels.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum IsolationLevel {
    /// Pod Security `baseline`, default-deny network, no hostPath, no privileged.
    Baseline,
    /// Pod Security `restricted` and resource requests required.
    #[default]
    Restricted,
    /// `restricted` plus the `kata-qemu` runtime class on every pod.
    Sandboxed,
}

impl IsolationLevel {
    pub const ALL: [IsolationLevel; 3] = [
        IsolationLevel::Baseline,
        IsolationLevel::Restricted,
        IsolationLevel::Sandboxed,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            IsolationLevel::Baseline => "baseline",
            IsolationLevel::Restricted => "restricted",
            IsolationLevel::Sandboxed => "sandboxed",
        }
    }

    /// Parses a level name as written in a spec or on the command line.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|level| level.as_str() == name)
    }

    /// The controls this level stands for.
    pub fn defaults(self) -> EffectiveControls {
        let baseline = EffectiveControls {
            pod_security: PodSecurityLevel::Baseline,
            default_deny_network_policy: true,
            require_resource_requests: false,
            runtime_class_name: None,
            block_host_path_volumes: true,
            block_privileged_containers: true,
            api_fairness: ApiFairness {
                qps: 50,
                burst: 100,
            },
        };
        match self {
            IsolationLevel::Baseline => baseline,
            IsolationLevel::Restricted => EffectiveControls {
                pod_security: PodSecurityLevel::Restricted,
                require_resource_requests: true,
                api_fairness: ApiFairness { qps: 20, burst: 40 },
                ..baseline
            },
            IsolationLevel::Sandboxed => EffectiveControls {
                runtime_class_name: Some(SANDBOX_RUNTIME_CLASS.to_owned()),
                ..IsolationLevel::Restricted.defaults()
            },
        }
    }
}

/// The runtime class the `sandboxed` level stamps on every pod.
pub const SANDBOX_RUNTIME_CLASS: &str = "kata-qemu";

/// Pod Security Admission levels.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum PodSecurityLevel {
    Privileged,
    Baseline,
    Restricted,
}

impl PodSecurityLevel {
    pub fn as_str(self) -> &'static str {
        match self {
            PodSecurityLevel::Privileged => "privileged",
            PodSecurityLevel::Baseline => "baseline",
            PodSecurityLevel::Restricted => "restricted",
        }
    }
}

/// Explicit overrides of a level's controls. Unset fields take the level's value.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct IsolationControls {
    /// Pod Security Admission level enforced on the tenant's host namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "PodSecurityLevel")]
    pub pod_security: Option<PodSecurityLevel>,
    /// A NetworkPolicy that denies all ingress and egress not explicitly allowed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_deny_network_policy: Option<bool>,
    /// A LimitRange gives every container default requests and limits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub require_resource_requests: Option<bool>,
    /// Runtime class stamped on every synced pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub runtime_class_name: Option<String>,
    /// Refuse pods that mount hostPath volumes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub block_host_path_volumes: Option<bool>,
    /// Refuse privileged containers and hostNetwork/hostPID/hostIPC pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub block_privileged_containers: Option<bool>,
    /// Rate limit on this tenant's writes to the host API server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_fairness: Option<ApiFairness>,
    /// IngressClasses a tenant Ingress may name (`spec.ingressClassName` or the
    /// `kubernetes.io/ingress.class` annotation). Absent allows any; empty, none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_ingress_classes: Option<Vec<String>>,
    /// Host Secrets a SyncPolicy may copy into the tenant (`fromHost` mappings), as
    /// `namespace/name`. Absent or empty: no host Secret is ever exposed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub from_host_secrets: Vec<String>,
}

/// A token bucket for one tenant's host writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApiFairness {
    /// Sustained host writes per second.
    #[schemars(range(min = 1, max = 10000))]
    pub qps: u32,
    /// Writes allowed in a burst above `qps`.
    #[schemars(range(min = 1, max = 100000))]
    pub burst: u32,
}

/// The controls in force once a level's defaults and the explicit overrides are merged.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EffectiveControls {
    pub pod_security: PodSecurityLevel,
    pub default_deny_network_policy: bool,
    pub require_resource_requests: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runtime_class_name: Option<String>,
    pub block_host_path_volumes: bool,
    pub block_privileged_containers: bool,
    pub api_fairness: ApiFairness,
}

impl From<EffectiveControls> for IsolationControls {
    fn from(c: EffectiveControls) -> Self {
        Self {
            pod_security: Some(c.pod_security),
            default_deny_network_policy: Some(c.default_deny_network_policy),
            require_resource_requests: Some(c.require_resource_requests),
            runtime_class_name: c.runtime_class_name,
            block_host_path_volumes: Some(c.block_host_path_volumes),
            block_privileged_containers: Some(c.block_privileged_containers),
            api_fairness: Some(c.api_fairness),
            allowed_ingress_classes: None,
            from_host_secrets: Vec::new(),
        }
    }
}

impl IsolationProfileSpec {
    /// The spec of a built-in level with every control spelled out, so the YAML a
    /// reviewer reads is the boundary that will be enforced.
    pub fn for_level(level: IsolationLevel) -> Self {
        Self {
            level,
            controls: level.defaults().into(),
            rules: None,
        }
    }

    /// Merges the level's defaults with the explicit controls.
    pub fn effective_controls(&self) -> EffectiveControls {
        let defaults = self.level.defaults();
        let c = &self.controls;
        EffectiveControls {
            pod_security: c.pod_security.unwrap_or(defaults.pod_security),
            default_deny_network_policy: c
                .default_deny_network_policy
                .unwrap_or(defaults.default_deny_network_policy),
            require_resource_requests: c
                .require_resource_requests
                .unwrap_or(defaults.require_resource_requests),
            runtime_class_name: c.runtime_class_name.clone().or(defaults.runtime_class_name),
            block_host_path_volumes: c
                .block_host_path_volumes
                .unwrap_or(defaults.block_host_path_volumes),
            block_privileged_containers: c
                .block_privileged_containers
                .unwrap_or(defaults.block_privileged_containers),
            api_fairness: c.api_fairness.unwrap_or(defaults.api_fairness),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_tighten_in_order() {
        let baseline = IsolationLevel::Baseline.defaults();
        let restricted = IsolationLevel::Restricted.defaults();
        let sandboxed = IsolationLevel::Sandboxed.defaults();
        assert_eq!(baseline.pod_security, PodSecurityLevel::Baseline);
        assert_eq!(restricted.pod_security, PodSecurityLevel::Restricted);
        assert!(!baseline.require_resource_requests);
        assert!(restricted.require_resource_requests);
        assert_eq!(restricted.runtime_class_name, None);
        assert_eq!(sandboxed.runtime_class_name.as_deref(), Some("kata-qemu"));
        assert_eq!(sandboxed.pod_security, PodSecurityLevel::Restricted);
    }

    #[test]
    fn explicit_controls_override_the_level() {
        let spec = IsolationProfileSpec {
            level: IsolationLevel::Sandboxed,
            controls: IsolationControls {
                runtime_class_name: Some("gvisor".into()),
                require_resource_requests: Some(false),
                ..Default::default()
            },
            rules: None,
        };
        let eff = spec.effective_controls();
        assert_eq!(eff.runtime_class_name.as_deref(), Some("gvisor"));
        assert!(!eff.require_resource_requests);
        assert!(eff.block_host_path_volumes);
    }

    #[test]
    fn spelled_out_levels_mean_the_same() {
        for level in IsolationLevel::ALL {
            assert_eq!(
                IsolationProfileSpec::for_level(level).effective_controls(),
                level.defaults()
            );
        }
    }

    #[test]
    fn level_names_round_trip() {
        for level in IsolationLevel::ALL {
            assert_eq!(IsolationLevel::parse(level.as_str()), Some(level));
        }
        assert_eq!(IsolationLevel::parse("Restricted"), None);
        assert_eq!(IsolationLevel::parse(""), None);
    }
}
