//! The Tenant's status: state, members and their conditions, Ready and
//! QuotaExceeded, and the admission webhook's reservations.
//!
//! The status is shared with the webhook, which takes namespace slots in
//! `reservations` by compare-and-swap. This writer plays by the same rule: it writes
//! with the `resourceVersion` it read (`replace_status`), and on 409 Conflict reads
//! again and recomputes, so a reservation taken meanwhile is never dropped. Only
//! reservations that expired or whose namespace is now a member are pruned. Nothing
//! is written when nothing changed.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use kube::api::PostParams;
use kube::{Api, Client, ResourceExt};
use tenantplane_api::{Tenant, TenantNamespaceStatus, TenantState, TenantStatus};

use super::{MemberOutcome, TenantError};
use tenantplane_core::conditions::ConditionSet;

const READY: &str = "Ready";
const QUOTA_EXCEEDED: &str = "QuotaExceeded";
const MAX_ATTEMPTS: usize = 10;

/// Why the tenant's namespaces were not reconciled at all.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verdict {
    pub reason: &'static str,
    pub message: String,
}

impl Verdict {
    pub fn blocked(reason: &'static str, message: String) -> Self {
        Self { reason, message }
    }
}

/// The status `tenant` (as last read) should have.
pub fn desired_status(
    tenant: &Tenant,
    members: &[String],
    outcomes: &Result<Vec<MemberOutcome>, Verdict>,
    now: Timestamp,
) -> TenantStatus {
    let previous = tenant.status.clone().unwrap_or_default();
    let generation = tenant.metadata.generation;
    let state = if tenant.metadata.deletion_timestamp.is_some() {
        TenantState::Terminating
    } else if tenant.spec.cordoned {
        TenantState::Cordoned
    } else {
        TenantState::Active
    };
    let mut names: Vec<String> = members.to_vec();
    names.sort();
    let by_name: BTreeMap<&str, &MemberOutcome> = outcomes
        .as_ref()
        .map(|o| o.iter().map(|m| (m.namespace.as_str(), m)).collect())
        .unwrap_or_default();
    let mut not_ready = Vec::new();
    let namespaces = names
        .iter()
        .map(|name| {
            let earlier = previous
                .namespaces
                .iter()
                .find(|n| &n.name == name)
                .map(|n| n.conditions.as_slice())
                .unwrap_or_default();
            let mut conditions = ConditionSet::new(earlier, generation, now);
            if let Some(outcome) = by_name.get(name.as_str()) {
                let (ok, reason, message) = member_verdict(outcome);
                if !ok {
                    not_ready.push(format!("{name} ({reason})"));
                }
                conditions.set(READY, ok, reason, &message);
            }
            TenantNamespaceStatus {
                name: name.clone(),
                conditions: conditions.into_vec(),
            }
        })
        .collect();
    let mut conditions = ConditionSet::new(&previous.conditions, generation, now);
    match outcomes {
        Err(verdict) => conditions.set(READY, false, verdict.reason, &verdict.message),
        Ok(_) if !not_ready.is_empty() => conditions.set(
            READY,
            false,
            "NamespacesNotReady",
            &format!(
                "not every member namespace holds the Tenant's objects: {}",
                not_ready.join(", ")
            ),
        ),
        Ok(_) => conditions.set(
            READY,
            true,
            "Reconciled",
            &format!(
                "{} member namespace(s) hold the Tenant's objects",
                names.len()
            ),
        ),
    }
    let size = u32::try_from(names.len()).unwrap_or(u32::MAX);
    match tenant.spec.namespace_options.quota {
        Some(quota) if size > quota => conditions.set(
            QUOTA_EXCEEDED,
            true,
            "MembersExceedQuota",
            &format!(
                "{size} namespaces belong to the Tenant but its quota is {quota} (namespaces adopted by an owner reference); none is removed, new ones are refused"
            ),
        ),
        _ => conditions.set(QUOTA_EXCEEDED, false, "WithinQuota", ""),
    }
    let reservations = previous
        .reservations
        .into_iter()
        .filter(|r| r.expires.0 > now && !names.contains(&r.namespace))
        .collect();
    TenantStatus {
        state: Some(state),
        size,
        namespaces,
        reservations,
        conditions: conditions.into_vec(),
    }
}

fn member_verdict(outcome: &MemberOutcome) -> (bool, &'static str, String) {
    if let Some(error) = &outcome.error {
        return (false, "ReconcileFailed", error.clone());
    }
    if !outcome.foreign.is_empty() {
        return (
            false,
            "ForeignObject",
            format!(
                "{} exist(s) but are not labelled as this Tenant's; tenantplane never modifies them: rename or delete them",
                outcome.foreign.join(", ")
            ),
        );
    }
    (
        true,
        "Reconciled",
        "the Tenant's objects are in place".into(),
    )
}

/// Writes the status (compare-and-swap, retried on conflict) when it changed;
/// returns the status now stored.
pub async fn write(
    host: &Client,
    tenant: &Tenant,
    members: &[String],
    outcomes: Result<Vec<MemberOutcome>, Verdict>,
    now: Timestamp,
) -> Result<TenantStatus, TenantError> {
    let name = tenant.name_any();
    let api: Api<Tenant> = Api::all(host.clone());
    let mut current = tenant.clone();
    for _ in 0..MAX_ATTEMPTS {
        let status = desired_status(&current, members, &outcomes, now);
        if current.status.as_ref() == Some(&status) {
            return Ok(status);
        }
        current.status = Some(status.clone());
        match api
            .replace_status(&name, &PostParams::default(), &current)
            .await
        {
            Ok(_) => return Ok(status),
            // Gone: nothing to report to.
            Err(kube::Error::Api(s)) if s.code == 404 => return Ok(status),
            // Someone (the webhook taking a slot) wrote first: read and recompute.
            Err(kube::Error::Api(s)) if s.code == 409 => {
                current = match api
                    .get_opt(&name)
                    .await
                    .map_err(TenantError::host("get", format!("Tenant {name}")))?
                {
                    Some(fresh) => fresh,
                    None => return Ok(status),
                };
            }
            Err(e) => {
                return Err(TenantError::host(
                    "replace status of",
                    format!("Tenant {name}"),
                )(e));
            }
        }
    }
    Err(TenantError::StatusContention {
        tenant: name,
        attempts: MAX_ATTEMPTS,
    })
}

/// When the next reservation expires (and should be pruned), if any.
pub fn requeue_after(status: &TenantStatus, now: Timestamp) -> Option<Duration> {
    status
        .reservations
        .iter()
        .map(|r| r.expires.0.duration_since(now).as_secs().max(0))
        .min()
        .map(|secs| Duration::from_secs(u64::try_from(secs).unwrap_or(0) + 1))
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use k8s_openapi::jiff::SignedDuration;
    use serde_json::json;
    use tenantplane_api::NamespaceReservation;

    use super::*;

    fn tenant(quota: Option<u32>, reservations: &[(&str, i64)], now: Timestamp) -> Tenant {
        let mut t: Tenant = serde_json::from_value(json!({
            "apiVersion": "tenantplane.io/v1alpha1", "kind": "Tenant",
            "metadata": {"name": "acme", "uid": "u", "generation": 3},
            "spec": {"owners": [{"kind": "User", "name": "alice"}], "namespaceOptions": {"quota": quota}},
        }))
        .unwrap();
        t.status = Some(TenantStatus {
            reservations: reservations
                .iter()
                .map(|(ns, secs)| NamespaceReservation {
                    namespace: (*ns).into(),
                    expires: Time(now.checked_add(SignedDuration::from_secs(*secs)).unwrap()),
                })
                .collect(),
            ..TenantStatus::default()
        });
        t
    }

    fn member(ns: &str) -> MemberOutcome {
        MemberOutcome {
            namespace: ns.into(),
            ..MemberOutcome::default()
        }
    }

    #[test]
    fn reservations_are_kept_unless_expired_or_now_members() {
        let now = Timestamp::from_second(1_800_000_000).unwrap();
        let t = tenant(None, &[("acme-a", 30), ("acme-b", 30), ("acme-c", -1)], now);
        let members = ["acme-a".to_owned()];
        let status = desired_status(&t, &members, &Ok(vec![member("acme-a")]), now);
        let kept: Vec<&str> = status
            .reservations
            .iter()
            .map(|r| r.namespace.as_str())
            .collect();
        assert_eq!(kept, ["acme-b"]);
        assert_eq!(status.size, 1);
        assert_eq!(requeue_after(&status, now), Some(Duration::from_secs(31)));
    }

    #[test]
    fn state_ready_and_quota_follow_the_spec_and_the_members() {
        let now = Timestamp::from_second(1_800_000_000).unwrap();
        let mut t = tenant(Some(1), &[], now);
        t.spec.cordoned = true;
        let members = ["acme-a".to_owned(), "acme-b".to_owned()];
        let mut foreign = member("acme-b");
        foreign
            .foreign
            .push("RoleBinding tenantplane-owner-x".into());
        let status = desired_status(&t, &members, &Ok(vec![member("acme-a"), foreign]), now);
        assert_eq!(status.state, Some(TenantState::Cordoned));
        let get = |ty: &str| {
            status
                .conditions
                .iter()
                .find(|c| c.type_ == ty)
                .unwrap()
                .clone()
        };
        assert_eq!(get("Ready").status, "False");
        assert!(get("Ready").message.contains("acme-b (ForeignObject)"));
        assert_eq!(get("Ready").observed_generation, Some(3));
        assert_eq!(get("QuotaExceeded").status, "True");
        assert_eq!(status.namespaces[1].conditions[0].reason, "ForeignObject");
        // Computing again from the written status changes nothing (no write).
        t.status = Some(status.clone());
        let again = desired_status(
            &t,
            &members,
            &Ok(vec![member("acme-a"), {
                let mut f = member("acme-b");
                f.foreign.push("RoleBinding tenantplane-owner-x".into());
                f
            }]),
            now,
        );
        assert_eq!(again, status);
    }
}
