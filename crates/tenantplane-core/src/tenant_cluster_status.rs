//! A TenantCluster's status, decided: its conditions, phase, endpoints and synced
//! kinds, and when to look again, from what the controller observed. The engine
//! resolves references, starts and stops sync engines and writes the status; what
//! that status says is decided here, so every rule has a unit test without an API
//! server.

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use tenantplane_api::{
    ClusterMode, ConditionType, SyncedResource, TenantClusterPhase, TenantClusterStatus,
};

use crate::conditions::ConditionSet;

/// The condition saying whether tenant Services can carry their host copies'
/// ClusterIPs (the tenant API server serves the host's service CIDR).
pub const SERVICE_CIDR_CONDITION: &str = "ServiceCIDR";

/// The condition saying whether some bidirectionally synced object has a conflict
/// left for a person (`conflictPolicy: manual`).
pub const CONFLICTED_CONDITION: &str = "Conflicted";

/// How soon a blocked TenantCluster is looked at again.
const BLOCKED_REQUEUE: Duration = Duration::from_secs(10);
/// How soon a synced TenantCluster is looked at again.
pub const SYNCED_REQUEUE: Duration = Duration::from_secs(30);
/// How soon a TenantCluster whose engine is still syncing is looked at again.
const SYNCING_REQUEUE: Duration = Duration::from_secs(2);

/// The blocker reason of a tenant API server that does not answer.
const TENANT_UNREACHABLE: &str = "TenantUnreachable";

/// The `IsolationApplied` verdict.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IsolationVerdict {
    pub applied: bool,
    pub reason: &'static str,
    pub message: String,
}

/// A problem that keeps the tenant from syncing: the condition reason and message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Blocker {
    pub reason: &'static str,
    pub message: String,
    /// `Provisioning` while a control plane comes up; `Degraded` otherwise.
    pub provisioning: bool,
}

impl Blocker {
    /// A blocker that degrades the TenantCluster.
    pub fn new(reason: &'static str, message: String) -> Self {
        Self {
            reason,
            message,
            provisioning: false,
        }
    }

    /// The control plane is still coming up.
    pub fn provisioning(message: String) -> Self {
        Self {
            reason: "Provisioning",
            message,
            provisioning: true,
        }
    }

    /// The tenant API server did not answer.
    pub fn tenant_unreachable(message: String) -> Self {
        Self::new(TENANT_UNREACHABLE, message)
    }

    /// Whether a running engine survives this blocker. An unreachable tenant keeps
    /// its engine: its watches retry and it converges as soon as the server answers
    /// again. Anything else stops it.
    pub fn keeps_engine(&self) -> bool {
        self.reason == TENANT_UNREACHABLE
    }
}

/// What the running sync engine reports.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EngineReport {
    /// Every kind has finished a pass and none is unavailable.
    pub synced: bool,
    /// A (re)started engine has not finished its first pass yet.
    pub starting: bool,
    /// Why the engine is not synced, one entry a kind.
    pub problems: Vec<String>,
    /// Some kind of the SyncPolicy cannot be synced at all.
    pub kind_unavailable: bool,
    /// Tenant Services whose host address the tenant API server refused.
    pub service_cidr_mismatch: Option<String>,
    /// Bidirectional objects with a conflict left for a person.
    pub conflicts: Option<String>,
    /// The kinds the engine copies to the host now (deleting the TenantCluster
    /// removes their host copies).
    pub running_kinds: Vec<SyncedResource>,
    /// The in-cluster URL the engine talks to.
    pub endpoint: Option<String>,
}

/// What the controller found this time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Observation {
    /// Something keeps the tenant from syncing.
    Blocked(Blocker),
    /// The tenant API server answers and an engine runs.
    Running {
        engine: EngineReport,
        /// Where the tenant API server is exposed outside the host, if it is.
        external_endpoint: Option<String>,
    },
}

/// Everything a TenantCluster's status is decided from.
#[derive(Clone, Debug)]
pub struct StatusInput<'a> {
    /// The status as last read.
    pub previous: Option<&'a TenantClusterStatus>,
    /// `metadata.generation`.
    pub generation: Option<i64>,
    pub mode: ClusterMode,
    /// `None` until the IsolationProfile is known: the last verdict stays.
    pub isolation: Option<&'a IsolationVerdict>,
    pub observation: Observation,
}

/// The status to write and when to reconcile again.
#[derive(Clone, Debug, PartialEq)]
pub struct StatusDecision {
    pub status: TenantClusterStatus,
    pub requeue: Duration,
}

/// The status a TenantCluster should have after `input`, conditions that flip
/// stamped with `now`.
pub fn decide(input: StatusInput<'_>, now: Timestamp) -> StatusDecision {
    let mut status = input.previous.cloned().unwrap_or_default();
    let mut conditions = ConditionSet::new(&status.conditions, input.generation, now);
    if let Some(isolation) = input.isolation {
        conditions.set(
            ConditionType::IsolationApplied.as_str(),
            isolation.applied,
            isolation.reason,
            &isolation.message,
        );
    }
    match input.mode {
        ClusterMode::Shared => conditions.set(
            ConditionType::ModeSupported.as_str(),
            true,
            "Shared",
            "mode shared is implemented",
        ),
        other => conditions.set(
            ConditionType::ModeSupported.as_str(),
            false,
            "ReconciledAsShared",
            &format!(
                "mode {} is not implemented yet; the tenant is reconciled as shared",
                other.as_str()
            ),
        ),
    }
    let requeue = match input.observation {
        Observation::Blocked(blocker) => {
            blocked(&mut status, &mut conditions, &blocker);
            BLOCKED_REQUEUE
        }
        Observation::Running {
            engine,
            external_endpoint,
        } => {
            status.external_endpoint = external_endpoint;
            running(&mut status, &mut conditions, engine)
        }
    };
    status.observed_generation = input.generation;
    status.conditions = conditions.into_vec();
    StatusDecision { status, requeue }
}

/// Ready and Synced False for the blocker's reason. The endpoints and the synced
/// kinds stay: nothing new is known about them.
fn blocked(status: &mut TenantClusterStatus, conditions: &mut ConditionSet, blocker: &Blocker) {
    status.phase = Some(if blocker.provisioning {
        TenantClusterPhase::Provisioning
    } else {
        TenantClusterPhase::Degraded
    });
    for condition in [ConditionType::Ready, ConditionType::Synced] {
        conditions.set(condition.as_str(), false, blocker.reason, &blocker.message);
    }
}

fn running(
    status: &mut TenantClusterStatus,
    conditions: &mut ConditionSet,
    engine: EngineReport,
) -> Duration {
    let synced_condition = ConditionType::Synced.as_str();
    let was_synced = conditions.is(synced_condition, true);
    status.endpoint = engine.endpoint;
    conditions.set(
        ConditionType::Ready.as_str(),
        true,
        "TenantReachable",
        "the tenant API server answers and its engine runs",
    );
    if engine.starting && was_synced {
        // A restarted engine that has not finished its first pass knows nothing
        // new: keep the last verdict (and phase) rather than flap (and write).
    } else if engine.synced {
        conditions.set(
            synced_condition,
            true,
            "Synced",
            "every kind of the SyncPolicy is in sync",
        );
        status.phase = Some(TenantClusterPhase::Ready);
    } else {
        let (reason, phase) = if engine.kind_unavailable {
            ("KindUnavailable", TenantClusterPhase::Degraded)
        } else {
            ("Syncing", TenantClusterPhase::Provisioning)
        };
        conditions.set(synced_condition, false, reason, &engine.problems.join("; "));
        status.phase = Some(phase);
    }
    // A tenant Service refused its host address: said once, never retried in a
    // loop. The condition appears only then, and stays (True) after.
    match engine.service_cidr_mismatch {
        Some(message) => conditions.set(
            SERVICE_CIDR_CONDITION,
            false,
            "ServiceCIDRMismatch",
            &message,
        ),
        None if conditions.is(SERVICE_CIDR_CONDITION, false) => conditions.set(
            SERVICE_CIDR_CONDITION,
            true,
            "ServiceCIDRMatches",
            "every synced Service carries its host copy's ClusterIP",
        ),
        None => {}
    }
    // Two-way conflicts left for a person (conflictPolicy manual); True while any
    // object has one, False once every one is settled.
    match engine.conflicts {
        Some(message) => conditions.set(CONFLICTED_CONDITION, true, "Conflict", &message),
        None if conditions.is(CONFLICTED_CONDITION, true) => conditions.set(
            CONFLICTED_CONDITION,
            false,
            "NoConflicts",
            "every bidirectional object agrees with its host copy",
        ),
        None => {}
    }
    // Every kind ever synced stays listed, so deleting the TenantCluster finds the
    // host copies of a kind that has since left the SyncPolicy.
    let kinds: BTreeSet<SyncedResource> = std::mem::take(&mut status.synced_resources)
        .into_iter()
        .chain(engine.running_kinds)
        .collect();
    status.synced_resources = kinds.into_iter().collect();
    if engine.synced {
        SYNCED_REQUEUE
    } else {
        SYNCING_REQUEUE
    }
}

#[cfg(test)]
#[path = "tenant_cluster_status_tests.rs"]
mod tests;
