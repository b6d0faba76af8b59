//! A pooled API server comes back to the next test as it was right after its start,
//! or not at all.

// Tests assert by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod};
use k8s_openapi::api::rbac::v1::ClusterRole;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::api::{DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::discovery::ApiResource;
use serde_json::{Value, json};
use tenantplane_testenv::{ApiServer, Result, ServerPool, TestEnv, gadget_crd};

async fn start() -> Result<(TestEnv, ApiServer)> {
    let env = TestEnv::start_shared().await?;
    let server = env.start_apiserver("pooled").await?;
    Ok((env, server))
}

async fn create<K>(api: &Api<K>, object: Value) -> K
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let object: K = serde_json::from_value(object).unwrap();
    api.create(&PostParams::default(), &object).await.unwrap()
}

fn gadgets(client: &kube::Client, ns: &str) -> Api<DynamicObject> {
    let crd = gadget_crd();
    let resource = ApiResource {
        group: crd.spec.group.clone(),
        version: crd.spec.versions[0].name.clone(),
        api_version: format!("{}/{}", crd.spec.group, crd.spec.versions[0].name),
        kind: crd.spec.names.kind.clone(),
        plural: crd.spec.names.plural.clone(),
    };
    Api::namespaced_with(client.clone(), ns, &resource)
}

/// What one test leaves behind: a namespace holding a ConfigMap with a finalizer, a
/// Pod bound to a node that does not exist, a CRD with an object, and a
/// cluster-scoped object.
async fn leave_everything_behind(server: &ApiServer) {
    let client = server.client().await.unwrap();
    create(
        &Api::<Namespace>::all(client.clone()),
        json!({"metadata": {"name": "shop"}}),
    )
    .await;
    create(
        &Api::<ConfigMap>::namespaced(client.clone(), "shop"),
        json!({"metadata": {"name": "held", "finalizers": ["example.com/hold"]}, "data": {"a": "1"}}),
    )
    .await;
    create(
        &Api::<Pod>::namespaced(client.clone(), "shop"),
        json!({"metadata": {"name": "web"}, "spec": {"nodeName": "gone", "containers": [{"name": "c", "image": "x"}]}}),
    )
    .await;
    create(
        &Api::<ClusterRole>::all(client.clone()),
        json!({"metadata": {"name": "left-behind"}}),
    )
    .await;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.create(&PostParams::default(), &gadget_crd())
        .await
        .unwrap();
    let gadget =
        json!({"apiVersion": "example.com/v1", "kind": "Gadget", "metadata": {"name": "g"}});
    tenantplane_testenv::eventually(
        "the Gadget CRD serves",
        std::time::Duration::from_secs(30),
        || {
            let api = gadgets(&client, "shop");
            let gadget: DynamicObject = serde_json::from_value(gadget.clone()).unwrap();
            async move { api.create(&PostParams::default(), &gadget).await }
        },
    )
    .await;
}

#[tokio::test]
async fn a_returned_server_comes_back_without_what_the_last_test_made() {
    static POOL: ServerPool = ServerPool::new();
    let first = POOL.take(start).await.unwrap();
    let pid = first.pid();
    leave_everything_behind(&first).await;
    drop(first);

    let second = POOL.take(start).await.unwrap();
    assert_eq!(second.pid(), pid, "the same process, reset");
    let client = second.client().await.unwrap();
    assert!(
        Api::<Namespace>::all(client.clone())
            .get_opt("shop")
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        Api::<ConfigMap>::all(client.clone())
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .iter()
            .all(|cm| cm.metadata.namespace.as_deref() != Some("shop")),
        "no ConfigMap of the deleted namespace is left in storage"
    );
    assert!(
        Api::<Pod>::all(client.clone())
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
    assert!(
        Api::<ClusterRole>::all(client.clone())
            .get_opt("left-behind")
            .await
            .unwrap()
            .is_none()
    );
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    assert!(crds.get_opt("gadgets.example.com").await.unwrap().is_none());

    // The next test can make the same things again, and finds no old Gadget when
    // the CRD comes back.
    leave_everything_behind(&second).await;
    let left = gadgets(&client, "shop")
        .list(&ListParams::default())
        .await
        .unwrap();
    assert_eq!(left.items.len(), 1, "only the Gadget this test made");
}

#[tokio::test]
async fn a_server_the_test_stopped_or_changed_is_not_lent_again() {
    static POOL: ServerPool = ServerPool::new();
    // Stopped and started again: taken mutably, so never returned.
    let mut first = POOL.take(start).await.unwrap();
    first.restart().await.unwrap();
    let restarted = first.pid();
    drop(first);
    let second = POOL.take(start).await.unwrap();
    assert_ne!(
        second.pid(),
        restarted,
        "a fresh server, not the restarted one"
    );

    // An object it started with changed: no reset can undo that.
    let changed = second.pid();
    let namespaces: Api<Namespace> = Api::all(second.client().await.unwrap());
    namespaces
        .patch(
            "default",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"touched": "yes"}}})),
        )
        .await
        .unwrap();
    drop(second);
    let third = POOL.take(start).await.unwrap();
    assert_ne!(third.pid(), changed, "a fresh server, not the changed one");
    let namespaces: Api<Namespace> = Api::all(third.client().await.unwrap());
    let default = namespaces.get("default").await.unwrap();
    assert!(
        !default
            .metadata
            .labels
            .unwrap_or_default()
            .contains_key("touched")
    );

    // Held by a test that panicked: whatever it did, it is not lent again.
    let panicked = third.pid();
    let task = tokio::spawn(async move {
        let _held = third;
        panic!("the test failed");
    });
    assert!(task.await.is_err());
    let fourth = POOL.take(start).await.unwrap();
    assert_ne!(
        fourth.pid(),
        panicked,
        "a fresh server, not the panicked test's"
    );

    // And one returned untouched is lent again.
    let untouched = fourth.pid();
    drop(fourth);
    assert_eq!(POOL.take(start).await.unwrap().pid(), untouched);
}
