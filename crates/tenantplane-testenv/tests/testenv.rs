//! The test control plane itself: real processes, isolated servers, restarts.

// Tests assert by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{ObjectMeta, PostParams};
use tenantplane_testenv::{ApiServerOptions, TestEnv, TestUser};

fn configmap(name: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        ..Default::default()
    }
}

#[tokio::test]
async fn two_servers_on_one_etcd_are_isolated_and_restartable() {
    let env = TestEnv::start_shared().await.expect("etcd");
    let host = env.start_apiserver("host").await.expect("host apiserver");
    let mut tenant = env
        .start_apiserver("tenant")
        .await
        .expect("tenant apiserver");
    assert_ne!(host.port(), tenant.port());

    let host_cms: Api<ConfigMap> = Api::namespaced(host.client().await.unwrap(), "default");
    let tenant_cms: Api<ConfigMap> = Api::namespaced(tenant.client().await.unwrap(), "default");

    let before = host.request_counts().await.unwrap();
    host_cms
        .create(&PostParams::default(), &configmap("only-on-host"))
        .await
        .unwrap();
    let after = host.request_counts().await.unwrap();
    assert_eq!(
        after.since(&before).writes(Some("configmaps")),
        1,
        "one POST counted by the server"
    );

    // Separate etcd prefixes: the tenant server does not see the host's object.
    assert!(tenant_cms.get_opt("only-on-host").await.unwrap().is_none());

    tenant_cms
        .create(&PostParams::default(), &configmap("survives"))
        .await
        .unwrap();
    let pid = tenant.pid();
    tenant.stop();
    assert!(
        tenant_cms.get_opt("survives").await.is_err(),
        "a stopped server answers nothing"
    );
    tenant.start().await.expect("restart");
    assert_ne!(tenant.pid(), pid);
    let tenant_cms: Api<ConfigMap> = Api::namespaced(tenant.client().await.unwrap(), "default");
    assert!(
        tenant_cms.get_opt("survives").await.unwrap().is_some(),
        "data kept in etcd across restarts"
    );
}

#[tokio::test]
async fn users_are_authenticated_and_subject_to_rbac() {
    let env = TestEnv::start_shared().await.expect("etcd");
    let alice = TestUser::new("alice", &["developers"]);
    let mut options = ApiServerOptions::new("rbac");
    options.users.push(alice);
    let server = env.start_apiserver_with(options).await.expect("apiserver");
    let as_alice: Api<ConfigMap> =
        Api::namespaced(server.client_as("alice").await.unwrap(), "default");
    let err = as_alice.list(&Default::default()).await.unwrap_err();
    assert!(
        matches!(&err, kube::Error::Api(status) if status.code == 403),
        "alice has no RBAC grants: {err:?}"
    );
    assert!(
        server.client_as("mallory").await.is_err(),
        "unknown users have no kubeconfig"
    );
}

#[tokio::test]
async fn an_idle_server_writes_nothing() {
    let env = TestEnv::start_shared().await.expect("etcd");
    let server = env.start_apiserver("idle").await.expect("apiserver");
    let before = server.request_counts().await.unwrap();
    // The server's own periodic loops run every 10s; watch a little longer than that.
    tokio::time::sleep(std::time::Duration::from_secs(12)).await; // asserting that nothing happens
    let after = server.request_counts().await.unwrap();
    let writes = after.since(&before);
    assert_eq!(writes.writes(None), 0, "the idle server wrote: {writes:?}");
}

/// The second server with the same CRDs starts on a copy of the first one's storage:
/// it serves the CRD at once, and what either writes afterwards stays its own.
#[tokio::test]
async fn a_server_started_from_a_copy_has_the_crds_and_storage_of_its_own() {
    use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
    let env = TestEnv::start_shared().await.expect("etcd");
    let crds = vec![tenantplane_testenv::gadget_crd()];
    let first = env
        .start_apiserver_with_crds("first", crds.clone())
        .await
        .expect("first apiserver");
    let first_client = first.client().await.unwrap();
    Api::<ConfigMap>::namespaced(first_client.clone(), "default")
        .create(&PostParams::default(), &configmap("only-first"))
        .await
        .unwrap();
    let second = env
        .start_apiserver_with_crds("second", crds)
        .await
        .expect("second apiserver");
    let second_client = second.client().await.unwrap();
    let gadgets = ApiResource::from_gvk(&GroupVersionKind::gvk("example.com", "v1", "Gadget"));
    let mut gadget = DynamicObject::new("g", &gadgets);
    gadget.data = serde_json::json!({"spec": {"size": 1}});
    Api::<DynamicObject>::namespaced_with(second_client.clone(), "default", &gadgets)
        .create(&PostParams::default(), &gadget)
        .await
        .expect("the CRD is served right after start");
    let second_cms = Api::<ConfigMap>::namespaced(second_client, "default");
    assert!(
        second_cms.get_opt("only-first").await.unwrap().is_none(),
        "the first server's later writes are not in the copy"
    );
    let first_gadgets = Api::<DynamicObject>::namespaced_with(first_client, "default", &gadgets);
    assert!(
        first_gadgets.get_opt("g").await.unwrap().is_none(),
        "the second server's writes stay its own"
    );
}
