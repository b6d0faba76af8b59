//! `SyncPolicy`: which kinds are synced, in which direction, and how conflicts resolve.

use std::time::Duration;

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Which tenant kinds tenantplane syncs, in which direction, how often drift is
/// corrected, and how much of its reasoning it keeps.
#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "tenantplane.io",
    version = "v1alpha1",
    kind = "SyncPolicy",
    shortname = "sp",
    category = "tenantplane",
    doc = "Which tenant kinds are synced to the host, and how.",
    printcolumn(
        name = "Conflicts",
        type_ = "string",
        json_path = ".spec.conflictPolicy"
    ),
    printcolumn(
        name = "Interval",
        type_ = "string",
        json_path = ".spec.driftDetection.interval"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct SyncPolicySpec {
    /// Who wins when the tenant and the host both changed an object.
    #[serde(default)]
    pub conflict_policy: ConflictPolicy,
    #[serde(default)]
    pub drift_detection: DriftDetection,
    #[serde(default)]
    pub explain: ExplainOptions,
    /// The kinds to sync.
    #[serde(default)]
    pub resources: Vec<SyncResource>,
}

/// Conflict resolution between tenant and host.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum ConflictPolicy {
    /// Two-sided conflicts are left alone and recorded as Skip decisions.
    #[default]
    Manual,
    TenantWins,
    HostWins,
}

/// Periodic full convergence passes that correct changes made directly on the host.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DriftDetection {
    #[serde(default = "default_true")]
    pub enabled: bool,
    /// Time between full passes, such as `30s`, `5m` or `1h30m`.
    #[serde(default = "default_interval")]
    #[schemars(regex(pattern = r"^([0-9]+(ms|s|m|h))+$"))]
    pub interval: String,
}

impl Default for DriftDetection {
    fn default() -> Self {
        Self {
            enabled: true,
            interval: default_interval(),
        }
    }
}

fn default_true() -> bool {
    true
}

fn default_interval() -> String {
    "30s".to_owned()
}

/// An interval that is not of the form `30s`, `5m`, `1h30m`, `250ms`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid interval {input:?}: expected a sequence of <number><unit> with unit ms, s, m or h, such as 30s or 1h30m"
)]
pub struct IntervalError {
    pub input: String,
}

impl DriftDetection {
    /// The interval as a duration.
    pub fn interval_duration(&self) -> Result<Duration, IntervalError> {
        parse_interval(&self.interval)
    }
}

/// Parses `30s`, `5m`, `1h30m`, `250ms` (the schema's pattern) into a duration.
pub fn parse_interval(input: &str) -> Result<Duration, IntervalError> {
    let err = || IntervalError {
        input: input.to_owned(),
    };
    let mut total = Duration::ZERO;
    let mut rest = input;
    if rest.is_empty() {
        return Err(err());
    }
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return Err(err());
        }
        let value: u64 = rest[..digits].parse().map_err(|_| err())?;
        rest = &rest[digits..];
        let (unit, len) = if rest.starts_with("ms") {
            (Duration::from_millis(1), 2)
        } else if rest.starts_with('s') {
            (Duration::from_secs(1), 1)
        } else if rest.starts_with('m') {
            (Duration::from_secs(60), 1)
        } else if rest.starts_with('h') {
            (Duration::from_secs(3600), 1)
        } else {
            return Err(err());
        };
        rest = &rest[len..];
        let part = unit
            .checked_mul(u32::try_from(value).map_err(|_| err())?)
            .ok_or_else(err)?;
        total = total.checked_add(part).ok_or_else(err)?;
    }
    Ok(total)
}

/// How much of the engine's reasoning is kept.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExplainOptions {
    /// Append every decision to the TenantCluster's SyncDecision.
    #[serde(default = "default_true")]
    pub record_decisions: bool,
    /// Decisions kept in the SyncDecision; the oldest are evicted first.
    #[serde(default = "default_retain")]
    #[schemars(range(min = 1, max = 1000))]
    pub retain: u32,
}

impl Default for ExplainOptions {
    fn default() -> Self {
        Self {
            record_decisions: true,
            retain: default_retain(),
        }
    }
}

fn default_retain() -> u32 {
    100
}

/// One kind to sync.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SyncResource {
    /// API version of the tenant kind, such as `v1` or `example.com/v1`.
    #[schemars(length(min = 1, max = 316))]
    pub api_version: String,
    /// The kind, such as `ConfigMap`.
    #[schemars(regex(pattern = r"^[A-Z][A-Za-z0-9]*$"))]
    pub kind: String,
    #[serde(default)]
    pub direction: SyncDirection,
    /// For `bidirectional` kinds: who owns which field, overriding the default
    /// (`spec`, labels and annotations belong to the tenant, `status` to the host).
    /// The longest matching path wins.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub field_ownership: Vec<FieldOwnershipRule>,
    /// For `fromHost` cluster-scoped kinds: which host objects are copied (all
    /// when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector>,
    /// For `fromHost` namespaced kinds: the host objects to copy and where they
    /// appear in the tenant, each as `hostNamespace/name -> tenantNamespace/name`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mappings: Vec<String>,
}

/// Who owns the fields under a path of a bidirectionally synced kind.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FieldOwnershipRule {
    /// A JSON pointer into the object, such as `/spec/replicas` or
    /// `/metadata/labels/team` (`~1` stands for `/` in a key).
    #[schemars(regex(pattern = r"^(/[^/]+)+$"), length(max = 1024))]
    pub path: String,
    pub owner: FieldOwner,
}

/// The side whose changes to a field flow to the other side.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum FieldOwner {
    /// Tenant changes flow to the host; host changes are reverted.
    Tenant,
    /// Host changes flow to the tenant; tenant changes are reverted.
    Host,
    /// The field is not synced: each side keeps its own.
    None,
}

/// Which way objects of a kind flow.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum SyncDirection {
    /// Tenant objects are copied to the host.
    #[default]
    ToHost,
    /// The host mirror's content is copied back into the tenant.
    FromHost,
    /// Both ways, with `conflictPolicy` for two-sided changes.
    Bidirectional,
}

impl SyncPolicySpec {
    /// The policy `tenantplane render syncpolicy` and the samples start from: the
    /// kinds most workloads need, synced to the host every 30 seconds at the latest.
    pub fn default_policy() -> Self {
        let to_host = |api_version: &str, kind: &str| SyncResource {
            api_version: api_version.to_owned(),
            kind: kind.to_owned(),
            direction: SyncDirection::ToHost,
            field_ownership: Vec::new(),
            selector: None,
            mappings: Vec::new(),
        };
        Self {
            conflict_policy: ConflictPolicy::Manual,
            drift_detection: DriftDetection::default(),
            explain: ExplainOptions::default(),
            resources: vec![
                to_host("v1", "ConfigMap"),
                to_host("v1", "Secret"),
                to_host("v1", "Service"),
                to_host("v1", "Pod"),
            ],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intervals_parse() {
        assert_eq!(parse_interval("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_interval("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_interval("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_interval("2m5s"), Ok(Duration::from_secs(125)));
    }

    #[test]
    fn bad_intervals_are_errors_not_panics() {
        for bad in [
            "",
            "s",
            "30",
            "30x",
            "-1s",
            "1.5s",
            "99999999999999999999s",
            "5 s",
        ] {
            assert!(parse_interval(bad).is_err(), "{bad:?} should not parse");
        }
    }
}
