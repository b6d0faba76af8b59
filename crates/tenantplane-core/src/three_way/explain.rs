//! The offline prediction of a two-way pass for every direction and policy
//! (`tenantplane explain-sync -f T --host-object H [--base B]`).

use serde::Serialize;
use serde_json::Value;
use tenantplane_api::sync_policy::{ConflictPolicy, FieldOwnershipRule, SyncDirection};

use super::{FieldOwnership, Fields, Resolution, Side, ThreeWayPlan, WriteReason, plan};

/// What one direction (and, for bidirectional kinds, one conflict policy) would do.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DirectionPlan {
    pub direction: SyncDirection,
    /// Only bidirectional sync has a choice; one-way sync always keeps the source.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub conflict_policy: Option<ConflictPolicy>,
    /// `Update`, `Skip` (an unresolved conflict) or `None` (in sync).
    pub action: &'static str,
    /// One line per write and per conflict.
    pub changes: Vec<String>,
    #[serde(skip)]
    pub plan: ThreeWayPlan,
}

/// Plans the pass for toHost, fromHost, and bidirectional under each policy.
pub fn every_direction(
    base: Option<&Fields>,
    tenant: &Value,
    host: &Value,
    overrides: &[FieldOwnershipRule],
) -> Vec<DirectionPlan> {
    let mut out = Vec::new();
    for (direction, side, policy) in [
        (
            SyncDirection::ToHost,
            Side::Tenant,
            ConflictPolicy::TenantWins,
        ),
        (
            SyncDirection::FromHost,
            Side::Host,
            ConflictPolicy::HostWins,
        ),
    ] {
        let planned = plan(base, tenant, host, &FieldOwnership::one_way(side), policy);
        out.push(row(direction, None, planned));
    }
    let ownership = FieldOwnership::bidirectional_default().with_overrides(overrides);
    for policy in [
        ConflictPolicy::Manual,
        ConflictPolicy::TenantWins,
        ConflictPolicy::HostWins,
    ] {
        let planned = plan(base, tenant, host, &ownership, policy);
        out.push(row(SyncDirection::Bidirectional, Some(policy), planned));
    }
    out
}

fn row(
    direction: SyncDirection,
    conflict_policy: Option<ConflictPolicy>,
    plan: ThreeWayPlan,
) -> DirectionPlan {
    let action = if plan.unresolved().next().is_some() {
        "Skip"
    } else if plan.is_noop() {
        "None"
    } else {
        "Update"
    };
    DirectionPlan {
        direction,
        conflict_policy,
        action,
        changes: summary(&plan),
        plan,
    }
}

/// The plan as sentences, the same words the engine's decisions use.
pub fn summary(plan: &ThreeWayPlan) -> Vec<String> {
    let mut lines = Vec::new();
    for side in [Side::Host, Side::Tenant] {
        for write in plan.writes(side) {
            let what = match &write.value {
                Some(value) => format!("set {} = {}", write.path, short(value)),
                None => format!("remove {}", write.path),
            };
            let why = match write.reason {
                WriteReason::OwnerChanged => format!("the {} changed it", side.other().as_str()),
                WriteReason::Reverted => format!(
                    "the {} owns it; the {}'s change is reverted",
                    side.other().as_str(),
                    side.as_str()
                ),
                WriteReason::ConflictWon => {
                    format!("both changed it; the {} wins", side.other().as_str())
                }
                WriteReason::Initial => format!("first sync from the {}", side.other().as_str()),
            };
            lines.push(format!("{}: {what} ({why})", side.as_str()));
        }
    }
    for conflict in &plan.conflicts {
        let settled = match conflict.resolution {
            Resolution::LeftAlone => "left alone (manual)",
            Resolution::TenantWon => "the tenant's value overwrites the host's",
            Resolution::HostWon => "the host's value overwrites the tenant's",
        };
        lines.push(format!(
            "conflict: {} is {} in the tenant and {} on the host: {settled}",
            conflict.path,
            conflict.tenant.as_ref().map_or("absent".into(), short),
            conflict.host.as_ref().map_or("absent".into(), short),
        ));
    }
    lines
}

/// A value as compact JSON, cut to keep a line readable.
fn short(value: &Value) -> String {
    let text = value.to_string();
    if text.chars().count() > 60 {
        let cut: String = text.chars().take(57).collect();
        format!("{cut}...")
    } else {
        text
    }
}
