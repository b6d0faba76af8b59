//! A pooled API server comes back to the next test as it was right after its start,
//! or not at all.

// Tests assert by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod};
use k8s_openapi::api::rbac::v1::ClusterRole;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::api::{DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::discovery::ApiResource;
use serde_json::{Value, json};
use tenantplane_testenv::{ApiServer, Result, ServerPool, TestEnv, gadget_crd};

/// Runs `part` as a test of its own runs: on a thread and runtime that end with it
/// (a pooled server goes back only when the runtime of its test ends).
fn as_a_test<F, Fut, T>(part: F) -> T
where
    F: FnOnce() -> Fut + Send,
    Fut: std::future::Future<Output = T>,
    T: Send,
{
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap()
                    .block_on(part())
            })
            .join()
            .expect("the part passes")
    })
}

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
/// Pod bound to a node that does not exist, a CRD with an object, a cluster-scoped
/// object, and a webhook that fails closed on deletes of ConfigMaps and Pods but
/// whose server is gone (as a webhook test's is when it ends).
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
    create(
        &Api::<ValidatingWebhookConfiguration>::all(client.clone()),
        json!({"metadata": {"name": "gone"}, "webhooks": [{
            "name": "gone.example.com",
            "clientConfig": {"url": "https://127.0.0.1:1/validate"},
            "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["DELETE"],
                "resources": ["configmaps", "pods"]}],
            "failurePolicy": "Fail", "sideEffects": "None",
            "admissionReviewVersions": ["v1"], "timeoutSeconds": 1}]}),
    )
    .await;
    let dry_run = DeleteParams {
        dry_run: true,
        ..DeleteParams::default()
    };
    tenantplane_testenv::until_refused(
        "gone.example.com",
        std::time::Duration::from_secs(30),
        || {
            let api = Api::<ConfigMap>::namespaced(client.clone(), "shop");
            let dry_run = dry_run.clone();
            async move { api.delete("held", &dry_run).await.map(|_| ()) }
        },
    )
    .await;
}

#[test]
fn a_returned_server_comes_back_without_what_the_last_test_made() {
    static POOL: ServerPool = ServerPool::new();
    let pid = as_a_test(|| async {
        let first = POOL.take(start).await.unwrap();
        leave_everything_behind(&first).await;
        first.pid()
    });

    as_a_test(|| async {
        let second = POOL.take(start).await.unwrap();
        assert_eq!(second.pid(), pid, "the same process, reset");
        let client = second.client().await.unwrap();
        let namespaces = Api::<Namespace>::all(client.clone());
        assert!(namespaces.get_opt("shop").await.unwrap().is_none());
        let configmaps = Api::<ConfigMap>::all(client.clone());
        let configmaps = configmaps.list(&ListParams::default()).await.unwrap();
        assert!(
            configmaps
                .items
                .iter()
                .all(|cm| cm.metadata.namespace.as_deref() != Some("shop")),
            "no ConfigMap of the deleted namespace is left in storage"
        );
        let pods = Api::<Pod>::all(client.clone());
        assert!(
            pods.list(&ListParams::default())
                .await
                .unwrap()
                .items
                .is_empty()
        );
        let roles = Api::<ClusterRole>::all(client.clone());
        assert!(roles.get_opt("left-behind").await.unwrap().is_none());
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
    });
}

#[test]
fn a_server_the_test_stopped_changed_or_panicked_with_is_not_lent_again() {
    static POOL: ServerPool = ServerPool::new();
    // Stopped and started again: taken mutably, so never returned.
    let restarted = as_a_test(|| async {
        let mut first = POOL.take(start).await.unwrap();
        first.restart().await.unwrap();
        first.pid()
    });

    // An object it started with changed: no reset can undo that.
    let changed = as_a_test(|| async {
        let second = POOL.take(start).await.unwrap();
        assert_ne!(
            second.pid(),
            restarted,
            "a fresh server, not the restarted one"
        );
        let namespaces: Api<Namespace> = Api::all(second.client().await.unwrap());
        let label = json!({"metadata": {"labels": {"touched": "yes"}}});
        namespaces
            .patch("default", &PatchParams::default(), &Patch::Merge(label))
            .await
            .unwrap();
        second.pid()
    });

    // Held by a task that panicked: whatever it did, it is not lent again.
    let panicked = as_a_test(|| async {
        let third = POOL.take(start).await.unwrap();
        assert_ne!(third.pid(), changed, "a fresh server, not the changed one");
        let namespaces: Api<Namespace> = Api::all(third.client().await.unwrap());
        let default = namespaces.get("default").await.unwrap();
        let labels = default.metadata.labels.unwrap_or_default();
        assert!(!labels.contains_key("touched"));
        let pid = third.pid();
        let task = tokio::spawn(async move {
            let _held = third;
            panic!("the test failed");
        });
        assert!(task.await.is_err());
        pid
    });

    // Untouched, it goes back, but only once the runtime of its test has ended.
    let untouched = as_a_test(|| async {
        let fourth = POOL.take(start).await.unwrap();
        assert_ne!(
            fourth.pid(),
            panicked,
            "a fresh server, not the panicked test's"
        );
        let pid = fourth.pid();
        drop(fourth);
        let same_test = POOL.take(start).await.unwrap();
        assert_ne!(same_test.pid(), pid, "not lent again while its test runs");
        [pid, same_test.pid()]
    });
    as_a_test(|| async {
        let fifth = POOL.take(start).await.unwrap();
        assert!(
            untouched.contains(&fifth.pid()),
            "one of the two, lent again"
        );
    });
}
