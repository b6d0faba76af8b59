//! What flows back from the host to the tenant: Pod and PVC status, and the mapping
//! annotations. Each function returns `None` when the tenant already shows it, so
//! writing the result never causes another write (no update loops).

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use crate::transform::string_map;

/// Tenant-side mapping annotations on a synced tenant object.
pub const ANNOTATION_HOST_NAME: &str = "tenantplane.io/host-name";
pub const ANNOTATION_HOST_NAMESPACE: &str = "tenantplane.io/host-namespace";
pub const ANNOTATION_HOST_UID: &str = "tenantplane.io/host-uid";
/// When the mapping last changed (not every pass: that would be a write each time).
pub const ANNOTATION_LAST_SYNC_TIME: &str = "tenantplane.io/last-sync-time";
/// On a tenant Pod or dependency: its host copy goes before it does.
pub const FINALIZER: &str = "tenantplane.io/host-copy";
/// The reason a tenant Pod fails with when its host Pod is gone.
pub const REASON_PHYSICAL_POD_LOST: &str = "PhysicalPodLost";

/// The Pod status fields the host's kubelet owns and the tenant sees.
const POD_STATUS_FIELDS: &[&str] = &[
    "phase",
    "conditions",
    "message",
    "reason",
    "hostIP",
    "hostIPs",
    "podIP",
    "podIPs",
    "startTime",
    "initContainerStatuses",
    "containerStatuses",
    "ephemeralContainerStatuses",
    "qosClass",
];

/// The tenant Pod status to write for `host_status`, or `None` when it already
/// shows exactly that. Fields the host leaves out are removed from the tenant too.
pub fn pod_status_update(
    tenant_status: Option<&Value>,
    host_status: Option<&Value>,
) -> Option<Value> {
    copy_fields(tenant_status, host_status, POD_STATUS_FIELDS)
}

/// [`pod_status_update`] with the host's address replaced: the tenant Pod's
/// `hostIP` (and `hostIPs`) is `host_ip` (tenantplane's kubelet endpoint) or absent,
/// never the host node's address.
pub fn tenant_pod_status_update(
    tenant_status: Option<&Value>,
    host_status: Option<&Value>,
    host_ip: Option<&str>,
) -> Option<Value> {
    let mut host = host_status.cloned();
    if let Some(status) = host.as_mut().and_then(Value::as_object_mut) {
        let had_host = status
            .get("hostIP")
            .and_then(Value::as_str)
            .is_some_and(|ip| !ip.is_empty());
        status.remove("hostIP");
        status.remove("hostIPs");
        if let Some(ip) = host_ip.filter(|_| had_host) {
            status.insert("hostIP".into(), Value::String(ip.to_owned()));
            status.insert("hostIPs".into(), json!([{"ip": ip}]));
        }
    }
    pod_status_update(tenant_status, host.as_ref())
}

/// The tenant PVC status to write for a Bound host PVC: capacity and conditions
/// only. The phase stays the tenant's own: its PV controller owns it, and fighting
/// it would be a loop.
pub fn pvc_status_update(
    tenant_status: Option<&Value>,
    host_status: Option<&Value>,
) -> Option<Value> {
    if host_status
        .and_then(|s| s.get("phase"))
        .and_then(Value::as_str)
        != Some("Bound")
    {
        return None;
    }
    copy_fields(tenant_status, host_status, &["capacity", "conditions"])
}

/// `tenant_status` with `fields` taken from `host_status` (absent there, absent
/// here), or `None` when that changes nothing.
pub(crate) fn copy_fields(
    tenant_status: Option<&Value>,
    host_status: Option<&Value>,
    fields: &[&str],
) -> Option<Value> {
    let mut wanted: Map<String, Value> = tenant_status
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    for field in fields {
        match host_status.and_then(|s| s.get(*field)) {
            Some(value) if !value.is_null() => {
                wanted.insert((*field).into(), value.clone());
            }
            _ => {
                wanted.remove(*field);
            }
        }
    }
    let wanted = Value::Object(wanted);
    let current = tenant_status.cloned().unwrap_or_else(|| json!({}));
    (wanted != current).then_some(wanted)
}

/// The status of a tenant Pod whose host Pod disappeared: Failed, never recreated.
/// `None` when it already says so.
pub fn lost_pod_status(tenant_status: Option<&Value>, host_name: &str) -> Option<Value> {
    let already = tenant_status
        .and_then(|s| s.get("reason"))
        .and_then(Value::as_str)
        == Some(REASON_PHYSICAL_POD_LOST);
    if already {
        return None;
    }
    let mut status = tenant_status
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    status.insert("phase".into(), "Failed".into());
    status.insert("reason".into(), REASON_PHYSICAL_POD_LOST.into());
    status.insert(
        "message".into(),
        Value::String(format!(
            "the host Pod {host_name} is gone; tenantplane does not recreate it"
        )),
    );
    // Nothing runs any more: no condition may still say Ready.
    if let Some(conditions) = status.get_mut("conditions").and_then(Value::as_array_mut) {
        for c in conditions.iter_mut() {
            if matches!(
                c.get("type").and_then(Value::as_str),
                Some("Ready" | "ContainersReady")
            ) && let Some(c) = c.as_object_mut()
            {
                c.insert("status".into(), "False".into());
                c.insert("reason".into(), REASON_PHYSICAL_POD_LOST.into());
            }
        }
    }
    Some(Value::Object(status))
}

/// The tenant object's mapping annotations. `None` when the host name, namespace and
/// UID recorded are already these (the sync time then stays as it is).
pub fn mapping_annotations(
    tenant_annotations: Option<&Value>,
    host_name: &str,
    host_namespace: &str,
    host_uid: Option<&str>,
    now: &str,
) -> Option<BTreeMap<String, String>> {
    let current = string_map(tenant_annotations);
    let mut wanted = BTreeMap::new();
    wanted.insert(ANNOTATION_HOST_NAME.to_owned(), host_name.to_owned());
    wanted.insert(
        ANNOTATION_HOST_NAMESPACE.to_owned(),
        host_namespace.to_owned(),
    );
    if let Some(uid) = host_uid.filter(|u| !u.is_empty()) {
        wanted.insert(ANNOTATION_HOST_UID.to_owned(), uid.to_owned());
    }
    let unchanged = wanted.iter().all(|(k, v)| current.get(k) == Some(v))
        && (host_uid.is_some() || !current.contains_key(ANNOTATION_HOST_UID));
    if unchanged {
        return None;
    }
    wanted.insert(ANNOTATION_LAST_SYNC_TIME.to_owned(), now.to_owned());
    Some(wanted)
}

/// Whether a tenant Pod records a host Pod (all three mapping annotations): if that
/// host Pod is gone, the Pod was lost, not merely never created.
pub fn records_host_pod(tenant_annotations: Option<&Value>) -> Option<String> {
    let a = string_map(tenant_annotations);
    a.contains_key(ANNOTATION_HOST_NAME)
        .then_some(())
        .filter(|()| a.contains_key(ANNOTATION_HOST_NAMESPACE))
        .and_then(|()| a.get(ANNOTATION_HOST_UID).cloned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host_status() -> Value {
        json!({"phase": "Running", "hostIP": "10.1.0.4", "podIP": "10.2.0.9", "podIPs": [{"ip": "10.2.0.9"}],
               "startTime": "2026-01-01T00:00:00Z", "qosClass": "BestEffort",
               "conditions": [{"type": "Ready", "status": "True"}],
               "containerStatuses": [{"name": "c", "ready": true, "restartCount": 0, "image": "nginx", "imageID": "", "state": {"running": {}}}],
               "initContainerStatuses": [{"name": "i", "ready": true, "restartCount": 0, "image": "b", "imageID": "", "state": {"terminated": {"exitCode": 0}}}],
               "nominatedNodeName": "host-only"})
    }

    #[test]
    fn status_is_copied_once_then_nothing_to_write() {
        let tenant = json!({"phase": "Pending", "qosClass": "BestEffort"});
        let update = pod_status_update(Some(&tenant), Some(&host_status())).unwrap();
        for field in [
            "phase",
            "hostIP",
            "podIP",
            "podIPs",
            "startTime",
            "conditions",
            "containerStatuses",
            "initContainerStatuses",
        ] {
            assert_eq!(update[field], host_status()[field], "{field}");
        }
        assert!(
            update.get("nominatedNodeName").is_none(),
            "a host scheduling detail stays on the host"
        );
        assert_eq!(
            pod_status_update(Some(&update), Some(&host_status())),
            None,
            "no loop"
        );
    }

    #[test]
    fn the_host_address_never_reaches_the_tenant() {
        let hidden = tenant_pod_status_update(None, Some(&host_status()), None).unwrap();
        assert!(hidden.get("hostIP").is_none() && hidden.get("hostIPs").is_none());
        assert_eq!(hidden["podIP"], "10.2.0.9");
        let shown =
            tenant_pod_status_update(None, Some(&host_status()), Some("127.0.0.1")).unwrap();
        assert_eq!(shown["hostIP"], "127.0.0.1");
        assert_eq!(shown["hostIPs"], json!([{"ip": "127.0.0.1"}]));
        assert_eq!(
            tenant_pod_status_update(Some(&shown), Some(&host_status()), Some("127.0.0.1")),
            None,
            "no loop"
        );
        // Not on a node yet: no address at all.
        let pending = json!({"phase": "Pending"});
        let update = tenant_pod_status_update(None, Some(&pending), Some("127.0.0.1")).unwrap();
        assert!(update.get("hostIP").is_none());
    }

    #[test]
    fn fields_the_host_drops_are_dropped() {
        let tenant = json!({"phase": "Running", "podIP": "10.2.0.9", "message": "old"});
        let update =
            pod_status_update(Some(&tenant), Some(&json!({"phase": "Succeeded"}))).unwrap();
        assert_eq!(update, json!({"phase": "Succeeded"}));
        assert_eq!(pod_status_update(None, None), None);
    }

    #[test]
    fn pvc_status_copies_capacity_only_when_bound() {
        let host = json!({"phase": "Bound", "capacity": {"storage": "2Gi"}});
        let tenant = json!({"phase": "Bound", "capacity": {"storage": "1Gi"}});
        assert_eq!(
            pvc_status_update(Some(&tenant), Some(&host)),
            Some(json!({"phase": "Bound", "capacity": {"storage": "2Gi"}}))
        );
        assert_eq!(
            pvc_status_update(Some(&tenant), Some(&json!({"phase": "Pending"}))),
            None
        );
        let updated = pvc_status_update(Some(&tenant), Some(&host)).unwrap();
        assert_eq!(pvc_status_update(Some(&updated), Some(&host)), None);
    }

    #[test]
    fn a_lost_pod_fails_once() {
        let running =
            json!({"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]});
        let lost = lost_pod_status(Some(&running), "web-x-shop-x-dev").unwrap();
        assert_eq!(lost["phase"], "Failed");
        assert_eq!(lost["reason"], "PhysicalPodLost");
        assert_eq!(lost["conditions"][0]["status"], "False");
        assert!(
            lost["message"]
                .as_str()
                .unwrap()
                .contains("web-x-shop-x-dev")
        );
        assert_eq!(lost_pod_status(Some(&lost), "web-x-shop-x-dev"), None);
    }

    #[test]
    fn mapping_annotations_change_only_with_the_mapping() {
        let first = mapping_annotations(None, "h", "ns", None, "t1").unwrap();
        assert_eq!(first[ANNOTATION_LAST_SYNC_TIME], "t1");
        assert!(!first.contains_key(ANNOTATION_HOST_UID));
        let stored = serde_json::to_value(&first).unwrap();
        assert_eq!(
            mapping_annotations(Some(&stored), "h", "ns", None, "t2"),
            None
        );
        let with_uid = mapping_annotations(Some(&stored), "h", "ns", Some("u"), "t3").unwrap();
        assert_eq!(with_uid[ANNOTATION_HOST_UID], "u");
        let stored = serde_json::to_value(&with_uid).unwrap();
        assert_eq!(
            mapping_annotations(Some(&stored), "h", "ns", Some("u"), "t4"),
            None
        );
        assert_eq!(records_host_pod(Some(&stored)), Some("u".into()));
        assert_eq!(
            records_host_pod(Some(&json!({ANNOTATION_HOST_UID: "u"}))),
            None
        );
    }
}
