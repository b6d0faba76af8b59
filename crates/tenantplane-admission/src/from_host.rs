//! `POST /from-host`: the webhook a provisioned tenant control plane calls for writes
//! to fromHost copies (see `tenantplane_core::from_host_admission`).

use kube::core::DynamicObject;
use kube::core::admission::{AdmissionResponse, AdmissionReview, Operation};
use serde_json::Value;
use tenantplane_core::from_host_admission::refusal;

use crate::answer::{Refusal, deny};
use crate::review::parse;

/// Answers one AdmissionReview body; never fails (an unreadable body is refused
/// with the reason).
pub fn review(body: &[u8]) -> AdmissionReview<DynamicObject> {
    let request = match parse(body) {
        Ok(request) => request,
        Err(refusal) => return refusal.into_review(),
    };
    let response = AdmissionResponse::from(&request);
    let operation = match request.operation {
        Operation::Create => "CREATE",
        Operation::Update => "UPDATE",
        Operation::Delete => "DELETE",
        Operation::Connect => "CONNECT",
    };
    let value = |o: &Option<DynamicObject>| o.as_ref().and_then(|o| serde_json::to_value(o).ok());
    let (old, new): (Option<Value>, Option<Value>) =
        (value(&request.old_object), value(&request.object));
    let username = request.user_info.username.as_deref().unwrap_or_default();
    match refusal(username, operation, old.as_ref(), new.as_ref()) {
        None => response.into_review(),
        Some(message) => deny(response, Refusal::forbidden(message)).into_review(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn body(user: &str, operation: &str, old: Value) -> Vec<u8> {
        serde_json::to_vec(&json!({
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {
                "uid": "u-1",
                "kind": {"group": "storage.k8s.io", "version": "v1", "kind": "StorageClass"},
                "resource": {"group": "storage.k8s.io", "version": "v1", "resource": "storageclasses"},
                "name": "fast", "operation": operation,
                "userInfo": {"username": user},
                "object": null, "oldObject": old, "dryRun": false,
            }
        }))
        .unwrap()
    }

    fn copy() -> Value {
        json!({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
               "metadata": {"name": "fast", "labels": {"tenantplane.io/from-host": "true"},
                            "annotations": {"tenantplane.io/host-source": "StorageClass.storage.k8s.io fast"}},
               "provisioner": "example.com/csi"})
    }

    #[test]
    fn a_tenant_delete_of_a_copy_is_forbidden_and_the_syncer_is_allowed() {
        let refused = review(&body("admin", "DELETE", copy())).response.unwrap();
        assert!(!refused.allowed);
        assert_eq!(refused.uid, "u-1");
        assert_eq!(refused.result.code, 403);
        assert!(
            refused.result.message.contains("read-only copy of host"),
            "{}",
            refused.result.message
        );
        let allowed = review(&body("tenantplane-syncer", "DELETE", copy()))
            .response
            .unwrap();
        assert!(allowed.allowed);
    }

    #[test]
    fn an_unreadable_body_is_refused_not_a_panic() {
        let answer = review(b"{not json").response.unwrap();
        assert!(!answer.allowed);
    }
}
