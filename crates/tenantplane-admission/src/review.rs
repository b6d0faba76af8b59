//! AdmissionReview in, AdmissionReview out: the webhook's decisions, without HTTP.

use kube::core::DynamicObject;
use kube::core::Status;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview, Operation};
use serde::de::DeserializeOwned;
use tenantplane_api::{
    IsolationProfile, ResourcePool, ResourcePoolClaim, SyncPolicy, Tenant, TenantCluster,
};
use tenantplane_core::pool;
use tenantplane_core::validation::{self, Violation, introduced};

/// The kinds this webhook validates, as `(kind, resource)`.
pub const VALIDATED: [(&str, &str); 6] = [
    ("TenantCluster", "tenantclusters"),
    ("IsolationProfile", "isolationprofiles"),
    ("SyncPolicy", "syncpolicies"),
    ("ResourcePool", "resourcepools"),
    ("ResourcePoolClaim", "resourcepoolclaims"),
    // CREATE and UPDATE: the policy rules' patterns must compile.
    ("Tenant", "tenants"),
];

/// Reads an AdmissionReview body into its request, or the response that refuses it
/// and says why (never a panic or an HTTP error).
pub fn parse(body: &[u8]) -> Result<AdmissionRequest<DynamicObject>, Box<AdmissionResponse>> {
    let review: AdmissionReview<DynamicObject> = serde_json::from_slice(body).map_err(|err| {
        Box::new(AdmissionResponse::invalid(format!(
            "not an admission.k8s.io/v1 AdmissionReview: {err}"
        )))
    })?;
    review.try_into().map_err(|_| {
        Box::new(AdmissionResponse::invalid(
            "the AdmissionReview has no request",
        ))
    })
}

/// Answers one AdmissionReview body. Never fails: a body that cannot be read is
/// answered with a refusal that says why, never with a panic or an HTTP error.
pub fn review(body: &[u8]) -> AdmissionReview<DynamicObject> {
    match parse(body) {
        Ok(request) => respond(&request).into_review(),
        Err(refusal) => refusal.into_review(),
    }
}

/// The response to one request: allowed, or denied with every violation.
pub fn respond(request: &AdmissionRequest<DynamicObject>) -> AdmissionResponse {
    let response = AdmissionResponse::from(request);
    if let Some(message) = tenant_deletion_refusal(request) {
        let mut denied = response.deny(&message);
        denied.result = Status::failure(&message, "Forbidden").with_code(403);
        return denied;
    }
    match verdict(request) {
        Ok(()) => response,
        Err(message) => {
            let mut denied = response.deny(&message);
            // 422 Invalid, as the API server's own validation answers: clients
            // (kubectl) then say "is invalid" and do not retry.
            denied.result = Status::failure(&message, "Invalid").with_code(422);
            denied
        }
    }
}

/// The kind whose DELETE is validated: a Tenant with `spec.preventDeletion`.
pub const TENANT_KIND: (&str, &str) = ("Tenant", "tenants");

/// The refusal of deleting a Tenant whose `spec.preventDeletion` is true. Read from
/// the raw old object, so a Tenant that no longer decodes is judged by that field
/// alone.
fn tenant_deletion_refusal(request: &AdmissionRequest<DynamicObject>) -> Option<String> {
    let gvk = &request.kind;
    if gvk.group != tenantplane_api::GROUP
        || gvk.kind != TENANT_KIND.0
        || !matches!(request.operation, Operation::Delete)
    {
        return None;
    }
    let prevented = request
        .old_object
        .as_ref()
        .is_some_and(|old| old.data["spec"]["preventDeletion"] == serde_json::Value::Bool(true));
    prevented.then(|| {
        format!(
            "Tenant {} has spec.preventDeletion: set it to false before deleting the Tenant",
            request.name
        )
    })
}

fn verdict(request: &AdmissionRequest<DynamicObject>) -> Result<(), String> {
    let gvk = &request.kind;
    let known =
        gvk.group == tenantplane_api::GROUP && VALIDATED.iter().any(|(kind, _)| *kind == gvk.kind);
    if !known {
        let group = if gvk.group.is_empty() {
            "core"
        } else {
            &gvk.group
        };
        return Err(format!(
            "tenantplane's webhook validates only tenantplane.io TenantCluster, IsolationProfile, SyncPolicy, ResourcePool, ResourcePoolClaim and Tenant, not {} ({group} group): limit the ValidatingWebhookConfiguration's rules to those resources",
            gvk.kind
        ));
    }
    // Deleting is always allowed (the rules never send it; nothing to validate).
    if matches!(request.operation, Operation::Delete | Operation::Connect) {
        return Ok(());
    }
    let object = request
        .object
        .as_ref()
        .ok_or_else(|| format!("the {} request carries no object", gvk.kind))?;
    let mut violations = violations(&gvk.kind, object)?;
    if let (Operation::Update, Some(old)) = (&request.operation, &request.old_object) {
        // An old object that no longer decodes has no violations to keep.
        let before = violations_of_old(&gvk.kind, old);
        violations = introduced(&before, violations);
        if gvk.kind == "TenantCluster" {
            let old: TenantCluster = decode(old)?;
            let new: TenantCluster = decode(object)?;
            violations.extend(validation::tenant_cluster_update(&old.spec, &new.spec));
        }
        violations.extend(pool_update_violations(&gvk.kind, old, object)?);
    }
    if violations.is_empty() {
        return Ok(());
    }
    let name = object.metadata.name.as_deref().unwrap_or(&request.name);
    let what = match object.metadata.namespace.as_deref() {
        Some(namespace) => format!("{} {namespace}/{name}", gvk.kind),
        None => format!("{} {name}", gvk.kind),
    };
    let list: Vec<String> = violations.iter().map(Violation::to_string).collect();
    Err(format!("{what} is invalid: {}", list.join("; ")))
}

fn violations_of_old(kind: &str, old: &DynamicObject) -> Vec<Violation> {
    violations(kind, old).unwrap_or_default()
}

fn violations(kind: &str, object: &DynamicObject) -> Result<Vec<Violation>, String> {
    Ok(match kind {
        "TenantCluster" => {
            let tc: TenantCluster = decode(object)?;
            let name = tc.metadata.name.as_deref().unwrap_or_default();
            validation::tenant_cluster(name, &tc.spec)
        }
        "IsolationProfile" => {
            validation::isolation_profile(&decode::<IsolationProfile>(object)?.spec)
        }
        "SyncPolicy" => validation::sync_policy(&decode::<SyncPolicy>(object)?.spec),
        "ResourcePool" => pool::pool_violations(&decode::<ResourcePool>(object)?.spec),
        "ResourcePoolClaim" => pool::claim_violations(&decode::<ResourcePoolClaim>(object)?.spec),
        "Tenant" => validation::tenant(&decode::<Tenant>(object)?.spec),
        other => return Err(format!("no rules for kind {other}")),
    })
}

/// A pool may not shrink below what it has granted; a bound claim may not change.
/// Both read the old object's status, which the controller writes after binding.
fn pool_update_violations(
    kind: &str,
    old: &DynamicObject,
    new: &DynamicObject,
) -> Result<Vec<Violation>, String> {
    Ok(match kind {
        "ResourcePool" => {
            let old: ResourcePool = decode(old)?;
            let new: ResourcePool = decode(new)?;
            let granted = old.status.as_ref().map(|s| &s.allocated);
            pool::pool_update_violations(&new.spec, granted)
        }
        "ResourcePoolClaim" => {
            let old: ResourcePoolClaim = decode(old)?;
            let new: ResourcePoolClaim = decode(new)?;
            let bound_to = old.status.as_ref().and_then(|s| s.pool.as_deref());
            pool::claim_update_violations(&old.spec, bound_to, &new.spec)
        }
        _ => Vec::new(),
    })
}

fn decode<T: DeserializeOwned>(object: &DynamicObject) -> Result<T, String> {
    let kind = object.types.as_ref().map_or("object", |t| t.kind.as_str());
    serde_json::to_value(object)
        .and_then(serde_json::from_value)
        .map_err(|err| format!("malformed {kind}: {err}"))
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    fn body(operation: &str, kind: &str, object: Value, old: Value) -> Vec<u8> {
        let (group, resource) = match kind {
            "ConfigMap" => ("", "configmaps"),
            _ => (
                "tenantplane.io",
                VALIDATED.iter().find(|(k, _)| *k == kind).unwrap().1,
            ),
        };
        let source = if object.is_null() { &old } else { &object };
        let (name, namespace) = (
            source["metadata"]["name"].clone(),
            source["metadata"]["namespace"].clone(),
        );
        serde_json::to_vec(&json!({
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "req-1",
                "kind": {"group": group, "version": "v1alpha1", "kind": kind},
                "resource": {"group": group, "version": "v1alpha1", "resource": resource},
                "name": name,
                "namespace": namespace,
                "operation": operation,
                "userInfo": {"username": "admin"},
                "object": object,
                "oldObject": old,
            }
        }))
        .unwrap()
    }

    fn tc(name: &str, spec: Value) -> Value {
        let mut full = json!({"isolationProfileRef": {"name": "restricted"}, "syncPolicyRef": {"name": "default"}});
        full.as_object_mut()
            .unwrap()
            .extend(spec.as_object().unwrap().clone());
        json!({"apiVersion": "tenantplane.io/v1alpha1", "kind": "TenantCluster",
               "metadata": {"name": name, "namespace": "team-dev"}, "spec": full})
    }

    fn answer(body: &[u8]) -> AdmissionResponse {
        review(body).response.expect("a response")
    }

    #[test]
    fn a_valid_tenant_cluster_is_allowed_with_its_uid() {
        let response = answer(&body(
            "CREATE",
            "TenantCluster",
            tc("dev", json!({})),
            Value::Null,
        ));
        assert!(response.allowed, "{response:?}");
        assert_eq!(response.uid, "req-1");
        let wire = serde_json::to_value(review(&body(
            "CREATE",
            "TenantCluster",
            tc("dev", json!({})),
            Value::Null,
        )))
        .unwrap();
        assert_eq!(wire["apiVersion"], "admission.k8s.io/v1");
        assert_eq!(wire["kind"], "AdmissionReview");
        assert_eq!(wire["response"]["uid"], "req-1");
    }

    #[test]
    fn every_violation_is_in_one_message() {
        let long = "a".repeat(41);
        let response = answer(&body(
            "CREATE",
            "TenantCluster",
            tc(&long, json!({"kubernetesVersion": "v1.27"})),
            Value::Null,
        ));
        assert!(!response.allowed);
        assert_eq!(response.uid, "req-1");
        assert_eq!(response.result.code, 422);
        assert_eq!(response.result.reason, "Invalid");
        let message = &response.result.message;
        assert!(
            message.starts_with(&format!(
                "TenantCluster team-dev/{long} is invalid: metadata.name: "
            )),
            "{message}"
        );
        assert!(message.contains("; spec.kubernetesVersion: "), "{message}");
        assert!(message.contains("use one of v1.28"), "{message}");
    }

    #[test]
    fn mode_changes_are_refused_unless_allowed() {
        let old = tc("dev", json!({"mode": "shared"}));
        let new = tc("dev", json!({"mode": "dedicated"}));
        let response = answer(&body("UPDATE", "TenantCluster", new, old.clone()));
        assert!(!response.allowed);
        assert!(
            response
                .result
                .message
                .contains("spec.migration.allowModeChange")
        );
        let allowed = tc(
            "dev",
            json!({"mode": "dedicated", "migration": {"allowModeChange": true}}),
        );
        assert!(answer(&body("UPDATE", "TenantCluster", allowed, old)).allowed);
    }

    #[test]
    fn updates_keep_old_problems_but_may_not_add_new_ones() {
        let old = tc("dev", json!({"kubernetesVersion": "v1.27"}));
        let relabelled = tc(
            "dev",
            json!({"kubernetesVersion": "v1.27", "resources": {"cpu": "2"}}),
        );
        assert!(answer(&body("UPDATE", "TenantCluster", relabelled, old.clone())).allowed);
        let worse = tc(
            "dev",
            json!({"kubernetesVersion": "v1.27", "resources": {"cpu": "lots"}}),
        );
        let response = answer(&body("UPDATE", "TenantCluster", worse, old));
        assert!(!response.allowed);
        assert!(response.result.message.contains("spec.resources.cpu"));
        assert!(!response.result.message.contains("kubernetesVersion"));
    }

    #[test]
    fn isolation_profiles_and_sync_policies() {
        let profile = json!({"apiVersion": "tenantplane.io/v1alpha1", "kind": "IsolationProfile",
            "metadata": {"name": "p"}, "spec": {"controls": {"apiFairness": {"qps": 5, "burst": 1}}}});
        let response = answer(&body("CREATE", "IsolationProfile", profile, Value::Null));
        assert_eq!(
            response.result.message,
            "IsolationProfile p is invalid: spec.controls.apiFairness.burst: burst (1) must be at least qps (5): raise burst or lower qps"
        );
        let policy = json!({"apiVersion": "tenantplane.io/v1alpha1", "kind": "SyncPolicy",
            "metadata": {"name": "s"}, "spec": {"resources": [
                {"apiVersion": "v1", "kind": "ConfigMap"}, {"apiVersion": "v1", "kind": "Node"}]}});
        let response = answer(&body("CREATE", "SyncPolicy", policy, Value::Null));
        assert!(!response.allowed);
        assert!(
            response
                .result
                .message
                .contains("spec.resources[1]: Node is cluster-scoped")
        );
    }

    #[test]
    fn unknown_kinds_and_malformed_bodies_are_refused_not_panics() {
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "n"}});
        let response = answer(&body("CREATE", "ConfigMap", cm, Value::Null));
        assert!(!response.allowed);
        assert!(
            response
                .result
                .message
                .contains("not ConfigMap (core group)")
        );

        let malformed = tc("dev", json!({"mode": "hybrid"}));
        let response = answer(&body("CREATE", "TenantCluster", malformed, Value::Null));
        assert!(!response.allowed);
        assert!(
            response
                .result
                .message
                .starts_with("malformed TenantCluster: "),
            "{}",
            response.result.message
        );

        for garbage in [
            &b""[..],
            b"{",
            b"[]",
            b"{\"request\": 5}",
            b"{\"kind\": \"AdmissionReview\", \"apiVersion\": \"admission.k8s.io/v1\"}",
        ] {
            let response = answer(garbage);
            assert!(!response.allowed);
            assert!(!response.result.message.is_empty());
        }
    }

    #[test]
    fn tenants_preventing_deletion_are_not_deleted() {
        let tenant = |prevent: bool| {
            json!({"apiVersion": "tenantplane.io/v1alpha1", "kind": "Tenant",
                   "metadata": {"name": "acme"},
                   "spec": {"owners": [], "preventDeletion": prevent}})
        };
        let request = |old: Value| {
            serde_json::to_vec(&json!({
                "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                "request": {"uid": "req-1",
                    "kind": {"group": "tenantplane.io", "version": "v1alpha1", "kind": "Tenant"},
                    "resource": {"group": "tenantplane.io", "version": "v1alpha1", "resource": "tenants"},
                    "name": "acme", "operation": "DELETE", "userInfo": {"username": "admin"},
                    "object": null, "oldObject": old}
            }))
            .unwrap()
        };
        let response = answer(&request(tenant(true)));
        assert!(!response.allowed);
        assert_eq!(response.result.code, 403);
        assert!(response.result.message.contains("spec.preventDeletion"));
        assert!(answer(&request(tenant(false))).allowed);
    }

    #[test]
    fn deletes_are_allowed() {
        let object = tc(&"a".repeat(41), json!({}));
        assert!(answer(&body("DELETE", "TenantCluster", Value::Null, object)).allowed);
    }
}
