//! Namespace tenancy rules, pure: who owns a namespace, which tenant a new namespace
//! joins, and the namespace quota's slot arithmetic.
//!
//! Ownership is an owner reference whose kind, API group **and UID** match the
//! Tenant (Capsule's `IsTenantOwnerReference`, made stricter: a forged reference to
//! a Tenant's name, or to a deleted Tenant recreated under the same name, does not
//! count). The quota is enforced by reserving a slot in the Tenant's status with a
//! compare-and-swap before a namespace is admitted, so concurrent creations can
//! never take more slots than the quota holds.

use std::collections::BTreeSet;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use tenantplane_api::{NamespaceReservation, OwnerKind, Tenant, TenantStatus};

/// Whether `reference` makes its object a member of `tenant`.
pub fn is_tenant_owner_reference(reference: &OwnerReference, tenant: &Tenant) -> bool {
    let group = reference.api_version.split_once('/').map(|(g, _)| g);
    reference.kind == "Tenant"
        && group == Some(tenantplane_api::GROUP)
        && tenant
            .metadata
            .uid
            .as_deref()
            .is_some_and(|uid| uid == reference.uid)
        && tenant.metadata.name.as_deref() == Some(reference.name.as_str())
}

/// The tenant that owns a namespace with these owner references, if any.
pub fn owning_tenant<'a>(
    references: &[OwnerReference],
    tenants: &'a [Tenant],
) -> Option<&'a Tenant> {
    tenants.iter().find(|tenant| {
        references
            .iter()
            .any(|r| is_tenant_owner_reference(r, tenant))
    })
}

/// The owner reference that makes a namespace a member of `tenant`.
pub fn owner_reference(tenant: &Tenant) -> Option<OwnerReference> {
    Some(OwnerReference {
        api_version: format!("{}/{}", tenantplane_api::GROUP, tenantplane_api::VERSION),
        kind: "Tenant".into(),
        name: tenant.metadata.name.clone()?,
        uid: tenant.metadata.uid.clone()?,
        // Not a controller reference, and no blocking: deleting a namespace must
        // never wait on the Tenant, and the Tenant's deletion policy is ours to
        // decide (see docs), not the garbage collector's.
        controller: None,
        block_owner_deletion: None,
    })
}

/// Who is asking, as the API server authenticated them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Requester<'a> {
    pub username: &'a str,
    pub groups: &'a [String],
}

/// Whether `requester` is an owner of `tenant`.
pub fn is_owner(requester: &Requester<'_>, tenant: &Tenant) -> bool {
    tenant.spec.owners.iter().any(|owner| match owner.kind {
        OwnerKind::User | OwnerKind::ServiceAccount => owner.name == requester.username,
        OwnerKind::Group => requester.groups.contains(&owner.name),
    })
}

/// Why a namespace cannot join a tenant.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AssignError {
    #[error("{user} owns no Tenant, so cannot create namespaces")]
    NotAnOwner { user: String },
    #[error("namespace {namespace:?} must start with \"{tenant}-\" (the tenant forces its prefix)")]
    PrefixRequired { namespace: String, tenant: String },
    #[error(
        "{user} owns several Tenants ({tenants}) and {namespace:?} does not start with exactly one \
         longest \"<tenant>-\" prefix: name it after the tenant it belongs to"
    )]
    Ambiguous {
        user: String,
        namespace: String,
        tenants: String,
    },
}

/// The tenant a new namespace named `namespace`, created by `requester`, joins: the
/// only tenant they own, or among several the one whose `<tenant>-` prefix is the
/// longest match (a tie is refused). `forceTenantPrefix` is enforced.
pub fn assign_tenant<'a>(
    requester: &Requester<'_>,
    namespace: &str,
    tenants: &'a [Tenant],
) -> Result<&'a Tenant, AssignError> {
    let owned: Vec<&Tenant> = tenants.iter().filter(|t| is_owner(requester, t)).collect();
    let name_of = |t: &Tenant| t.metadata.name.clone().unwrap_or_default();
    let chosen = match owned.as_slice() {
        [] => {
            return Err(AssignError::NotAnOwner {
                user: requester.username.to_owned(),
            });
        }
        [only] => *only,
        several => {
            let mut matches: Vec<(usize, &Tenant)> = several
                .iter()
                .filter(|t| namespace.starts_with(&format!("{}-", name_of(t))))
                .map(|t| (name_of(t).len(), *t))
                .collect();
            matches.sort_by_key(|m| std::cmp::Reverse(m.0));
            match matches.as_slice() {
                [(len, best), rest @ ..] if rest.first().is_none_or(|(l, _)| l < len) => *best,
                _ => {
                    let names: BTreeSet<String> = several.iter().map(|t| name_of(t)).collect();
                    return Err(AssignError::Ambiguous {
                        user: requester.username.to_owned(),
                        namespace: namespace.to_owned(),
                        tenants: names.into_iter().collect::<Vec<_>>().join(", "),
                    });
                }
            }
        }
    };
    let tenant_name = name_of(chosen);
    if chosen.spec.namespace_options.force_tenant_prefix
        && !namespace.starts_with(&format!("{tenant_name}-"))
    {
        return Err(AssignError::PrefixRequired {
            namespace: namespace.to_owned(),
            tenant: tenant_name,
        });
    }
    Ok(chosen)
}

/// The namespace quota is full.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "Tenant {tenant} may have at most {quota} namespaces and has {used} (members and admissions in flight)"
)]
pub struct QuotaExceeded {
    pub tenant: String,
    pub quota: u32,
    pub used: u32,
}

/// How long an admitted namespace holds its slot before it must exist.
pub const RESERVATION_TTL: SignedDuration = SignedDuration::from_secs(60);

/// The status with a slot reserved for `namespace`, or `None` when nothing needs to
/// change (the namespace is already a member or already holds a live slot). Expired
/// reservations are dropped. The caller writes the result with the status's
/// `resourceVersion` as a precondition and retries on conflict: that
/// compare-and-swap is what makes the quota race-free.
pub fn reserve_slot(
    tenant: &Tenant,
    namespace: &str,
    now: Timestamp,
) -> Result<Option<TenantStatus>, QuotaExceeded> {
    let mut status = tenant.status.clone().unwrap_or_default();
    let members: BTreeSet<&str> = status.namespaces.iter().map(|n| n.name.as_str()).collect();
    if members.contains(namespace) {
        return Ok(None);
    }
    let before = status.reservations.len();
    status
        .reservations
        .retain(|r| r.expires.0 > now && !members.contains(r.namespace.as_str()));
    let pruned = status.reservations.len() != before;
    if status.reservations.iter().any(|r| r.namespace == namespace) {
        return Ok(pruned.then_some(status));
    }
    let used = u32::try_from(members.len() + status.reservations.len()).unwrap_or(u32::MAX);
    if let Some(quota) = tenant.spec.namespace_options.quota
        && used >= quota
    {
        return Err(QuotaExceeded {
            tenant: tenant.metadata.name.clone().unwrap_or_default(),
            quota,
            used,
        });
    }
    status.reservations.push(NamespaceReservation {
        namespace: namespace.to_owned(),
        expires: Time(now.checked_add(RESERVATION_TTL).unwrap_or(now)),
    });
    Ok(Some(status))
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use tenantplane_api::{NamespaceOptions, TenantNamespaceStatus, TenantOwner, TenantSpec};

    use super::*;

    fn tenant(
        name: &str,
        owners: &[(OwnerKind, &str)],
        quota: Option<u32>,
        force_prefix: bool,
    ) -> Tenant {
        Tenant {
            metadata: ObjectMeta {
                name: Some(name.into()),
                uid: Some(format!("uid-{name}")),
                ..Default::default()
            },
            spec: TenantSpec {
                owners: owners
                    .iter()
                    .map(|(kind, n)| TenantOwner {
                        kind: *kind,
                        name: (*n).into(),
                        cluster_roles: vec!["admin".into()],
                    })
                    .collect(),
                namespace_options: NamespaceOptions {
                    quota,
                    force_tenant_prefix: force_prefix,
                    ..Default::default()
                },
                isolation_profile_ref: None,
                network_policies: vec![],
                limit_ranges: vec![],
                resource_quotas: vec![],
                storage_classes: None,
                priority_classes: None,
                runtime_classes: None,
                ingress_classes: None,
                additional_role_bindings: vec![],
                node_selector: Default::default(),
                cordoned: false,
                prevent_deletion: false,
                rules: None,
            },
            status: None,
        }
    }

    fn reference(name: &str, uid: &str, api_version: &str, kind: &str) -> OwnerReference {
        OwnerReference {
            api_version: api_version.into(),
            kind: kind.into(),
            name: name.into(),
            uid: uid.into(),
            controller: None,
            block_owner_deletion: None,
        }
    }

    #[test]
    fn ownership_needs_kind_group_name_and_uid() {
        let t = tenant("acme", &[], None, false);
        assert!(is_tenant_owner_reference(
            &reference("acme", "uid-acme", "tenantplane.io/v1alpha1", "Tenant"),
            &t
        ));
        assert!(is_tenant_owner_reference(
            &reference("acme", "uid-acme", "tenantplane.io/v2", "Tenant"),
            &t
        ));
        for (name, uid, api_version, kind) in [
            ("acme", "forged", "tenantplane.io/v1alpha1", "Tenant"),
            ("acme", "uid-acme", "evil.io/v1", "Tenant"),
            ("acme", "uid-acme", "v1", "Tenant"),
            (
                "acme",
                "uid-acme",
                "tenantplane.io/v1alpha1",
                "TenantCluster",
            ),
            ("other", "uid-acme", "tenantplane.io/v1alpha1", "Tenant"),
        ] {
            assert!(
                !is_tenant_owner_reference(&reference(name, uid, api_version, kind), &t),
                "{name} {uid} {api_version} {kind}"
            );
        }
        let tenants = [tenant("a", &[], None, false), t.clone()];
        let owner = owning_tenant(
            &[reference(
                "acme",
                "uid-acme",
                "tenantplane.io/v1alpha1",
                "Tenant",
            )],
            &tenants,
        );
        assert_eq!(owner.and_then(|t| t.metadata.name.as_deref()), Some("acme"));
        assert!(owning_tenant(&[], &tenants).is_none());
    }

    #[test]
    fn a_new_namespace_joins_the_longest_prefix_tenant() {
        let groups = vec!["devs".to_owned()];
        let alice = Requester {
            username: "alice",
            groups: &groups,
        };
        let tenants = [
            tenant("team", &[(OwnerKind::User, "alice")], None, false),
            tenant("team-a", &[(OwnerKind::Group, "devs")], None, false),
            tenant("other", &[(OwnerKind::User, "bob")], None, false),
        ];
        let name = |r: Result<&Tenant, AssignError>| r.map(|t| t.metadata.name.clone().unwrap());
        assert_eq!(
            name(assign_tenant(&alice, "team-a-web", &tenants)),
            Ok("team-a".into())
        );
        assert_eq!(
            name(assign_tenant(&alice, "team-web", &tenants)),
            Ok("team".into())
        );
        assert!(matches!(
            assign_tenant(&alice, "web", &tenants),
            Err(AssignError::Ambiguous { .. })
        ));
        let bob = Requester {
            username: "bob",
            groups: &[],
        };
        assert_eq!(
            name(assign_tenant(&bob, "anything", &tenants)),
            Ok("other".into())
        );
        let mallory = Requester {
            username: "mallory",
            groups: &[],
        };
        assert!(matches!(
            assign_tenant(&mallory, "team-x", &tenants),
            Err(AssignError::NotAnOwner { .. })
        ));
    }

    #[test]
    fn a_forced_prefix_is_enforced() {
        let tenants = [tenant("acme", &[(OwnerKind::User, "alice")], None, true)];
        let alice = Requester {
            username: "alice",
            groups: &[],
        };
        assert!(assign_tenant(&alice, "acme-web", &tenants).is_ok());
        let err = assign_tenant(&alice, "web", &tenants).unwrap_err();
        assert!(
            err.to_string().contains("must start with \"acme-\""),
            "{err}"
        );
    }

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + secs).unwrap()
    }

    #[test]
    fn slots_are_reserved_up_to_the_quota() {
        let mut t = tenant("acme", &[], Some(2), false);
        t.status = Some(TenantStatus {
            namespaces: vec![TenantNamespaceStatus {
                name: "acme-1".into(),
                conditions: vec![],
            }],
            ..Default::default()
        });
        assert_eq!(
            reserve_slot(&t, "acme-1", at(0)),
            Ok(None),
            "a member needs no slot"
        );
        let status = reserve_slot(&t, "acme-2", at(0)).unwrap().unwrap();
        assert_eq!(status.reservations.len(), 1);
        t.status = Some(status);
        assert_eq!(
            reserve_slot(&t, "acme-2", at(1)),
            Ok(None),
            "the same admission again is idempotent"
        );
        let full = reserve_slot(&t, "acme-3", at(1)).unwrap_err();
        assert_eq!(full.used, 2);
        assert!(full.to_string().contains("at most 2 namespaces"));
        // The reservation expires if the namespace never appeared.
        let later = at(RESERVATION_TTL.as_secs() + 1);
        let status = reserve_slot(&t, "acme-3", later).unwrap().unwrap();
        assert_eq!(
            status
                .reservations
                .iter()
                .map(|r| r.namespace.as_str())
                .collect::<Vec<_>>(),
            ["acme-3"]
        );
    }

    #[test]
    fn no_interleaving_of_compare_and_swap_admissions_exceeds_the_quota() {
        // Simulate N admissions racing on one status: each reads a version, computes
        // its slot, and writes only if the version is unchanged (as the API server's
        // resourceVersion precondition does), retrying otherwise.
        for quota in 0..6u32 {
            let mut t = tenant("acme", &[], Some(quota), false);
            let mut version = 0u64;
            let mut admitted = 0u32;
            let mut pending: Vec<String> = (0..20).map(|i| format!("acme-{i}")).collect();
            let mut reads: Vec<(String, u64, Tenant)> = Vec::new();
            while !pending.is_empty() || !reads.is_empty() {
                // Everyone pending reads the current state, then writes in turn.
                reads.extend(pending.drain(..).map(|ns| (ns, version, t.clone())));
                let batch: Vec<_> = std::mem::take(&mut reads);
                for (ns, read_version, snapshot) in batch {
                    match reserve_slot(&snapshot, &ns, at(0)) {
                        Err(_) => {}
                        Ok(None) => panic!("{ns} was neither a member nor reserved"),
                        Ok(Some(status)) if read_version == version => {
                            t.status = Some(status);
                            version += 1;
                            admitted += 1;
                        }
                        // Conflict: read again and retry.
                        Ok(Some(_)) => pending.push(ns),
                    }
                }
            }
            assert_eq!(admitted, quota.min(20), "quota {quota}");
        }
    }
}
