//! What one sync of a tenant Pod does, decided from the tenant Pod and whether its
//! host Pod exists: the engine's dispatch, pure so every case is a unit test.

use serde_json::Value;

use super::status::{REASON_PHYSICAL_POD_LOST, records_host_pod};

/// The step one sync of a tenant Pod takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PodStep {
    /// The tenant Pod is gone (never synced, or its finalizer removed by hand):
    /// delete the host Pod if there is one, then collect unused dependency copies.
    Collect { host_pod: bool },
    /// The tenant Pod is being deleted: remove the host Pod, then the finalizer.
    Finalize,
    /// Already marked lost (its host Pod vanished): nothing more to do.
    Nothing,
    /// The host Pod tenantplane made is gone: mark the tenant Pod lost rather than
    /// silently run it again (a Pod runs once, as on a node that died).
    MarkLost,
    /// No host Pod yet: create it (finalizer first).
    Create,
    /// Both exist: bring the host Pod up to date, then report its status back.
    UpdateAndReport,
}

/// The step for tenant Pod `tenant` (`None`: gone) when its host Pod exists or not.
pub fn pod_step(tenant: Option<&Value>, host_pod: bool) -> PodStep {
    let Some(tenant) = tenant else {
        return PodStep::Collect { host_pod };
    };
    if tenant.pointer("/metadata/deletionTimestamp").is_some() {
        return PodStep::Finalize;
    }
    if tenant.pointer("/status/reason").and_then(Value::as_str) == Some(REASON_PHYSICAL_POD_LOST) {
        return PodStep::Nothing;
    }
    match (
        host_pod,
        records_host_pod(tenant.pointer("/metadata/annotations")),
    ) {
        (true, _) => PodStep::UpdateAndReport,
        (false, Some(_)) => PodStep::MarkLost,
        (false, None) => PodStep::Create,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pods::status::{
        ANNOTATION_HOST_NAME, ANNOTATION_HOST_NAMESPACE, ANNOTATION_HOST_UID,
    };
    use serde_json::json;

    fn pod() -> Value {
        json!({"metadata": {"name": "web", "namespace": "shop"}, "spec": {}})
    }

    fn synced_before() -> Value {
        let mut p = pod();
        p["metadata"]["annotations"] = json!({
            ANNOTATION_HOST_NAME: "web-x-shop-x-dev",
            ANNOTATION_HOST_NAMESPACE: "team-dev",
            ANNOTATION_HOST_UID: "u-1",
        });
        p
    }

    #[test]
    fn a_gone_tenant_pod_collects_its_host_pod_if_any() {
        assert_eq!(pod_step(None, true), PodStep::Collect { host_pod: true });
        assert_eq!(pod_step(None, false), PodStep::Collect { host_pod: false });
    }

    #[test]
    fn a_deleting_tenant_pod_is_finalized_whatever_else_it_says() {
        for mut p in [pod(), synced_before()] {
            p["metadata"]["deletionTimestamp"] = json!("2026-12-02T00:00:00Z");
            p["status"] = json!({"reason": REASON_PHYSICAL_POD_LOST});
            assert_eq!(pod_step(Some(&p), true), PodStep::Finalize);
            assert_eq!(pod_step(Some(&p), false), PodStep::Finalize);
        }
    }

    #[test]
    fn a_pod_marked_lost_is_left_alone() {
        let mut p = synced_before();
        p["status"] = json!({"reason": REASON_PHYSICAL_POD_LOST, "phase": "Failed"});
        assert_eq!(pod_step(Some(&p), false), PodStep::Nothing);
        assert_eq!(pod_step(Some(&p), true), PodStep::Nothing);
    }

    #[test]
    fn a_host_pod_that_vanished_after_a_sync_marks_the_pod_lost() {
        assert_eq!(pod_step(Some(&synced_before()), false), PodStep::MarkLost);
    }

    #[test]
    fn a_never_synced_pod_is_created_and_a_synced_one_updated() {
        assert_eq!(pod_step(Some(&pod()), false), PodStep::Create);
        assert_eq!(pod_step(Some(&pod()), true), PodStep::UpdateAndReport);
        assert_eq!(
            pod_step(Some(&synced_before()), true),
            PodStep::UpdateAndReport
        );
    }

    #[test]
    fn a_partial_record_of_the_host_pod_is_no_record() {
        // Without the UID, the annotations do not prove a host Pod was made.
        let mut p = synced_before();
        p["metadata"]["annotations"]
            .as_object_mut()
            .unwrap()
            .remove(ANNOTATION_HOST_UID);
        assert_eq!(pod_step(Some(&p), false), PodStep::Create);
    }
}
