//! The tenant-side admission of fromHost copies: in a control plane tenantplane
//! provisions, a webhook refuses the tenant's writes to a fromHost copy (and objects
//! forged to look like one) with a message naming the host source, instead of
//! letting the write through to be reverted on the next event.
//!
//! It is a guard-rail with a clear error, not the boundary: the tenant administers
//! its own API server (it could remove the webhook, which the controller puts back),
//! the host is never written by fromHost sync, and the revert stays the guarantee.
//! The webhook fails open (`failurePolicy: Ignore`) for the same reason: an outage
//! of tenantplane's webhook must not stop the tenant's writes.

use serde_json::Value;

use crate::from_host::{LABEL_FROM_HOST, source_of};

/// The user tenantplane's syncer authenticates as in a provisioned control plane
/// (a static token of its own, separate from the admin's the tenant uses).
pub const SYNCER_USER: &str = "tenantplane-syncer";

/// Identities of the tenant control plane's own controllers, which must still be
/// able to delete what a deleted namespace holds.
const CONTROL_PLANE_USERS: [&str; 2] = ["system:kube-controller-manager", "system:apiserver"];
const KUBE_SYSTEM_SERVICE_ACCOUNTS: &str = "system:serviceaccount:kube-system:";

fn is_copy(object: Option<&Value>) -> bool {
    object
        .and_then(|o| {
            o.pointer(&format!(
                "/metadata/labels/{}",
                LABEL_FROM_HOST.replace('/', "~1")
            ))
        })
        .and_then(Value::as_str)
        == Some("true")
}

fn describe(object: &Value) -> String {
    let kind = object
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or("object");
    let meta = object.get("metadata");
    let field = |f: &str| meta.and_then(|m| m.get(f)).and_then(Value::as_str);
    match (field("namespace"), field("name")) {
        (Some(ns), Some(name)) => format!("{kind} {ns}/{name}"),
        (None, Some(name)) => format!("{kind} {name}"),
        _ => kind.to_owned(),
    }
}

/// The refusal of `username`'s `operation` (`CREATE`, `UPDATE`, `DELETE`) on an
/// object whose old and new states are given, or `None` to allow. Only objects
/// labelled as fromHost copies (before or after the write) are refused, and never
/// for the syncer or the tenant control plane's own controllers.
pub fn refusal(
    username: &str,
    operation: &str,
    old: Option<&Value>,
    new: Option<&Value>,
) -> Option<String> {
    if username == SYNCER_USER
        || CONTROL_PLANE_USERS.contains(&username)
        || username.starts_with(KUBE_SYSTEM_SERVICE_ACCOUNTS)
    {
        return None;
    }
    let (was, is) = (is_copy(old), is_copy(new));
    if !was && !is {
        return None;
    }
    // What the tenant sees: the copy as it stands (the old object), else what it
    // tried to create.
    let object = old.filter(|_| was).or(new)?;
    let what = describe(object);
    let message = match (operation, was) {
        ("CREATE", _) | (_, false) => format!(
            "{what}: the label {LABEL_FROM_HOST} marks tenantplane's read-only copies of host \
             objects; only tenantplane sets it"
        ),
        _ => match source_of(object) {
            Some(source) => format!(
                "{what} is a read-only copy of host {source} (synced fromHost by tenantplane): \
                 change it on the host; a change here would be reverted"
            ),
            None => format!(
                "{what} is a read-only fromHost copy made by tenantplane: change it on the host; \
                 a change here would be reverted"
            ),
        },
    };
    Some(message)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn copy() -> Value {
        json!({"kind": "StorageClass", "metadata": {"name": "fast",
            "labels": {"tenantplane.io/from-host": "true", "app.kubernetes.io/managed-by": "tenantplane"},
            "annotations": {"tenantplane.io/host-source": "StorageClass.storage.k8s.io fast"}}})
    }

    fn plain() -> Value {
        json!({"kind": "ConfigMap", "metadata": {"name": "mine", "namespace": "default"}})
    }

    #[test]
    fn the_tenant_may_not_change_or_delete_a_copy() {
        let mut edited = copy();
        edited["metadata"]["labels"]["x"] = json!("y");
        for (op, new) in [("UPDATE", Some(&edited)), ("DELETE", None)] {
            let message = refusal("admin", op, Some(&copy()), new).unwrap();
            assert!(
                message.contains(
                    "StorageClass fast is a read-only copy of host StorageClass.storage.k8s.io fast"
                ),
                "{message}"
            );
        }
        // Removing the label is still a write to a copy.
        let unlabelled = json!({"kind": "StorageClass", "metadata": {"name": "fast"}});
        assert!(refusal("admin", "UPDATE", Some(&copy()), Some(&unlabelled)).is_some());
    }

    #[test]
    fn forged_copies_are_refused() {
        let mut forged = plain();
        forged["metadata"]["labels"] = json!({"tenantplane.io/from-host": "true"});
        for (op, old) in [("CREATE", None), ("UPDATE", Some(&plain()))] {
            let message = refusal("admin", op, old, Some(&forged)).unwrap();
            assert!(
                message.starts_with("ConfigMap default/mine: the label"),
                "{message}"
            );
        }
        // "false" or another value is not the mark.
        forged["metadata"]["labels"]["tenantplane.io/from-host"] = json!("false");
        assert_eq!(refusal("admin", "CREATE", None, Some(&forged)), None);
    }

    #[test]
    fn the_syncer_and_the_control_plane_pass_and_other_objects_are_not_judged() {
        for user in [
            SYNCER_USER,
            "system:kube-controller-manager",
            "system:serviceaccount:kube-system:namespace-controller",
        ] {
            assert_eq!(refusal(user, "DELETE", Some(&copy()), None), None, "{user}");
        }
        assert!(
            refusal(
                "system:serviceaccount:default:app",
                "DELETE",
                Some(&copy()),
                None
            )
            .is_some()
        );
        assert_eq!(
            refusal("admin", "UPDATE", Some(&plain()), Some(&plain())),
            None
        );
        assert_eq!(refusal("admin", "DELETE", None, None), None);
    }
}
