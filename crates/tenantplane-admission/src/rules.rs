//! `Tenant.spec.rules` inside tenant namespaces (the `tenant-resources` webhook) and
//! on the namespaces themselves (the `namespaces` webhook).
//!
//! Images and pull policies of Pods (CREATE, UPDATE and the
//! `pods/ephemeralcontainers` subresource), Service types, `externalIPs` and
//! ExternalName targets, Ingress host names (and their cluster-wide uniqueness,
//! [`crate::ingress_claims`]) apply to every writer, admins included: Pods and
//! Services are mostly written by controllers. Label and annotation rules apply to
//! non-admins only, so tenantplane's controller can stamp the Tenant's
//! `additionalMetadata`. On UPDATE the new object is judged, and only what the
//! write adds is refused: an object admitted before a rule existed can still be
//! edited as long as the edit adds no violation.
//!
//! The Tenant's rules are compiled on each request; a rule stored while the
//! validating webhook was down that does not compile refuses the write with the
//! compile error (and never panics).

use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, Operation};
use serde_json::Value;
use tenantplane_api::Tenant;
use tenantplane_core::policy_rules::{Broken, CompiledRules, MetadataTarget, describe, introduced};

use crate::answer::Refusal;

/// One (group, resource, subresource, operations) a handler protects. The webhook
/// configuration must send each of them (a test compares the rendered rules with
/// these lists and the API server's discovery).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Protected {
    pub group: &'static str,
    pub resource: &'static str,
    /// Empty for the resource itself.
    pub subresource: &'static str,
    pub operations: &'static [&'static str],
}

const fn protected(
    group: &'static str,
    resource: &'static str,
    subresource: &'static str,
    operations: &'static [&'static str],
) -> Protected {
    Protected {
        group,
        resource,
        subresource,
        operations,
    }
}

const WRITES: &[&str] = &["CREATE", "UPDATE"];

/// What `POST /tenant-resources` protects: the policy rules' paths and the cordon's
/// ways into a Pod.
pub const TENANT_RESOURCES_PROTECTED: &[Protected] = &[
    protected("", "pods", "", WRITES),
    protected("", "pods", "ephemeralcontainers", &["UPDATE"]),
    protected("", "services", "", WRITES),
    protected("networking.k8s.io", "ingresses", "", WRITES),
    protected("extensions", "ingresses", "", WRITES),
    protected("", "persistentvolumeclaims", "", &["CREATE"]),
    protected("", "pods", "exec", &["CONNECT"]),
    protected("", "pods", "attach", &["CONNECT"]),
    protected("", "pods", "portforward", &["CONNECT"]),
    protected("", "pods", "eviction", &["CREATE"]),
];

/// What `POST /namespaces` protects: every way to write a namespace's metadata.
pub const NAMESPACES_PROTECTED: &[Protected] = &[
    protected("", "namespaces", "", &["CREATE", "UPDATE", "DELETE"]),
    // Subresources are only ever updated; CREATE is rendered with UPDATE in one rule.
    protected("", "namespaces", "status", WRITES),
    protected("", "namespaces", "finalize", WRITES),
];

/// The Tenant's compiled rules, or the refusal that says its stored rules are broken.
pub(crate) fn compiled(tenant: &Tenant) -> Result<Option<CompiledRules>, Refusal> {
    let Some(rules) = &tenant.spec.rules else {
        return Ok(None);
    };
    CompiledRules::compile("spec.rules", rules)
        .map(Some)
        .map_err(|violations| {
            let list: Vec<String> = violations.iter().map(ToString::to_string).collect();
            Refusal::forbidden(format!(
                "Tenant {}'s rules are invalid, so nothing they govern can be admitted until they are fixed: {}",
                tenant.metadata.name.as_deref().unwrap_or_default(),
                list.join("; ")
            ))
        })
}

fn value(object: &DynamicObject) -> Result<Value, Refusal> {
    serde_json::to_value(object)
        .map_err(|err| Refusal::internal(format!("cannot read the object: {err}")))
}

fn refuse(what: &str, request: &AdmissionRequest<DynamicObject>, broken: &[Broken]) -> Refusal {
    Refusal::forbidden(format!(
        "{what} {} breaks the tenant's rules: {}",
        request.name,
        describe(broken)
    ))
}

/// The rules of `tenant` for a write inside one of its namespaces. `admin`
/// exempts metadata rules only.
pub(crate) fn check_tenant_resource(
    tenant: &Tenant,
    admin: bool,
    request: &AdmissionRequest<DynamicObject>,
) -> Result<(), Refusal> {
    if !matches!(request.operation, Operation::Create | Operation::Update) {
        return Ok(());
    }
    let Some(object) = request.object.as_ref() else {
        return Ok(());
    };
    let resource = &request.resource;
    let subresource = request.sub_resource.as_deref().unwrap_or_default();
    let check: fn(&CompiledRules, &Value) -> Vec<Broken> = match (
        resource.group.as_str(),
        resource.resource.as_str(),
        subresource,
    ) {
        ("", "pods", "" | "ephemeralcontainers") => CompiledRules::check_pod,
        ("", "services", "") => CompiledRules::check_service,
        ("networking.k8s.io" | "extensions", "ingresses", "") => CompiledRules::check_ingress,
        _ => return Ok(()),
    };
    let Some(rules) = compiled(tenant)? else {
        return Ok(());
    };
    let new = value(object)?;
    let old = request.old_object.as_ref().map(value).transpose()?;
    let before = old.as_ref().map(|o| check(&rules, o)).unwrap_or_default();
    let mut broken = introduced(&before, check(&rules, &new));
    if !admin && resource.resource == "services" {
        broken.extend(rules.check_metadata(MetadataTarget::Service, old.as_ref(), &new));
    }
    if broken.is_empty() {
        Ok(())
    } else {
        Err(refuse(&request.kind.kind, request, &broken))
    }
}

/// The namespace metadata rules of `tenant` for a non-admin's write of one of its
/// namespaces (the new object's added or changed keys).
pub(crate) fn check_namespace(
    tenant: &Tenant,
    request: &AdmissionRequest<DynamicObject>,
    old: Option<&DynamicObject>,
    new: &DynamicObject,
) -> Result<(), Refusal> {
    let Some(rules) = compiled(tenant)? else {
        return Ok(());
    };
    let new = value(new)?;
    let old = old.map(value).transpose()?;
    let broken = rules.check_metadata(MetadataTarget::Namespace, old.as_ref(), &new);
    if broken.is_empty() {
        Ok(())
    } else {
        Err(refuse("namespace", request, &broken))
    }
}
