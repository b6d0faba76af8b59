//! The provisioner guard's writes against a real API server: the binding is
//! created, written only when its subjects differ, emptied, and a binding of the
//! same name that tenantplane does not own is never touched. The probe's failures
//! are errors, never panics. (The whole guard, with the webhook stopped and
//! restarted, is tested through the binary in crates/tenantplane/tests/webhook_outage.rs.)

// Tests assert by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use k8s_openapi::api::rbac::v1::{ClusterRoleBinding, Subject};
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use serde_json::json;
use tenantplane_core::provisioner::{PROVISIONER_NAME, ProbeTarget};
use tenantplane_engine::provisioner::{
    BindingError, BindingWrite, ProbeError, probe_healthz, sync_binding,
};

fn user(name: &str) -> Subject {
    Subject {
        api_group: Some("rbac.authorization.k8s.io".into()),
        kind: "User".into(),
        name: name.into(),
        namespace: None,
    }
}

#[tokio::test]
async fn the_binding_is_written_only_when_it_differs_and_a_foreign_one_never() {
    let server = crate::harness::pooled_host().await;
    let host = server.client().await.unwrap();
    let bindings: Api<ClusterRoleBinding> = Api::all(host.clone());

    assert_eq!(
        sync_binding(&host, vec![user("alice")]).await.unwrap(),
        BindingWrite::Created
    );
    let created = bindings.get(PROVISIONER_NAME).await.unwrap();
    assert_eq!(created.subjects, Some(vec![user("alice")]));
    assert_eq!(created.role_ref.name, PROVISIONER_NAME);
    assert_eq!(
        created.metadata.labels.unwrap()["app.kubernetes.io/managed-by"],
        "tenantplane"
    );
    assert_eq!(
        sync_binding(&host, vec![user("alice")]).await.unwrap(),
        BindingWrite::Kept
    );
    let kept = bindings.get(PROVISIONER_NAME).await.unwrap();
    assert_eq!(
        kept.metadata.resource_version,
        created.metadata.resource_version
    );
    assert_eq!(
        sync_binding(&host, vec![]).await.unwrap(),
        BindingWrite::Updated
    );
    let emptied = bindings.get(PROVISIONER_NAME).await.unwrap();
    assert!(emptied.subjects.unwrap_or_default().is_empty());
    assert_eq!(
        sync_binding(&host, vec![]).await.unwrap(),
        BindingWrite::Kept,
        "an empty list read back as absent is no difference"
    );

    // Someone else's binding of that name: left exactly as it is.
    bindings
        .delete(PROVISIONER_NAME, &DeleteParams::default())
        .await
        .unwrap();
    let foreign: ClusterRoleBinding = serde_json::from_value(json!({
        "metadata": {"name": PROVISIONER_NAME},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": PROVISIONER_NAME},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "bob"}]}))
    .unwrap();
    let foreign = bindings
        .create(&PostParams::default(), &foreign)
        .await
        .unwrap();
    for subjects in [vec![], vec![user("alice")]] {
        assert!(matches!(
            sync_binding(&host, subjects).await,
            Err(BindingError::Foreign { .. })
        ));
    }
    let after = bindings.get(PROVISIONER_NAME).await.unwrap();
    assert_eq!(
        after.metadata.resource_version,
        foreign.metadata.resource_version
    );
    assert_eq!(after.subjects, Some(vec![user("bob")]));
}

#[tokio::test]
async fn a_failed_probe_is_an_error() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let ca = tenantplane_testenv::TestCa::new("probe").unwrap();
    let target = ProbeTarget {
        host: "127.0.0.1".into(),
        port,
        ca_pem: ca.cert_pem().into_bytes(),
    };
    assert!(matches!(
        probe_healthz(&target, Duration::from_secs(2)).await,
        Err(ProbeError::Io { .. })
    ));
    let garbage = ProbeTarget {
        ca_pem: b"not a certificate".to_vec(),
        ..target
    };
    assert!(matches!(
        probe_healthz(&garbage, Duration::from_secs(2)).await,
        Err(ProbeError::CaBundle(_))
    ));
}
