//! Membership changes revoke at once, on a real API server with the namespace,
//! garbage-collector and ClusterRole-aggregation controllers running: a namespace
//! moved to another Tenant, released, or an owner removed from the spec, and the old
//! owners' access is gone within the poll deadline, as `kubectl auth can-i` (the
//! real authorizer, with the aggregated `admin` role) says. Also after a restart of
//! the controller that missed the change, and `onDelete: delete`.

// Tests assert by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use crate::harness::{eventually, eventually_within, pooled_host};
use k8s_openapi::api::core::v1::{LimitRange, Namespace, ResourceQuota};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::rbac::v1::{ClusterRole, RoleBinding};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};
use tenantplane_api::Tenant;
use tenantplane_core::tenancy::owner_reference;
use tenantplane_core::tenant_plan::child_selector;
use tenantplane_engine::metrics::Metrics;
use tenantplane_engine::tenancy::{self, TenantControllerConfig};
use tenantplane_testenv::{ApiServer, ControllerManager, PooledServer, TestEnv};
use tokio_util::sync::CancellationToken;

/// The first grant of each test waits for kube-controller-manager, started with
/// the test, to aggregate the `admin` ClusterRole; on a loaded 2-core CI machine
/// that alone has exceeded the 30 s the revocations themselves are held to.
const FIRST_GRANT_DEADLINE: Duration = Duration::from_secs(90);

struct Running {
    shutdown: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl Running {
    fn start(host: &Client) -> Running {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_test_writer()
            .try_init();
        let shutdown = CancellationToken::new();
        let config = TenantControllerConfig {
            host: host.clone(),
            metrics: Arc::new(Metrics::unregistered()),
        };
        let task = tokio::spawn(tenancy::run(config, shutdown.clone()));
        Running { shutdown, task }
    }

    async fn stop(self) {
        self.shutdown.cancel();
        self.task.await.unwrap();
    }
}

struct Cluster {
    _env: TestEnv,
    server: PooledServer,
    _kcm: ControllerManager,
    host: Client,
}

async fn cluster() -> Cluster {
    let env = TestEnv::start_shared().await.expect("etcd");
    // Handed on from test to test (see `pooled_host`); a server that
    // kube-controller-manager changed beyond what a reset undoes is not.
    let server = pooled_host().await;
    let host = server.client().await.expect("client");
    let kcm = env
        .start_controller_manager(&server)
        .expect("kube-controller-manager");
    // As shipped in deploy/install/01-rbac.yaml.
    let deleter: ClusterRole = serde_json::from_value(json!({
        "metadata": {"name": "tenantplane-namespace-deleter"},
        "rules": [{"apiGroups": [""], "resources": ["namespaces"], "verbs": ["delete"]}],
    }))
    .unwrap();
    Api::<ClusterRole>::all(host.clone())
        .create(&PostParams::default(), &deleter)
        .await
        .unwrap();
    Cluster {
        _env: env,
        server,
        _kcm: kcm,
        host,
    }
}

/// A Tenant with every kind of child and a label of its own on its namespaces.
fn spec(owners: &[&str]) -> Value {
    let owners: Vec<Value> = owners
        .iter()
        .map(|o| json!({"kind": "User", "name": o}))
        .collect();
    json!({
        "owners": owners,
        "networkPolicies": [{"podSelector": {}, "policyTypes": ["Ingress"]}],
        "limitRanges": [{"limits": [{"type": "Container", "default": {"cpu": "500m"}}]}],
        "resourceQuotas": [{"hard": {"pods": "10"}}],
    })
}

async fn create_tenant(host: &Client, name: &str, mut spec: Value) -> Tenant {
    spec["namespaceOptions"]["additionalMetadata"]["labels"] =
        json!({format!("{name}-label"): "yes"});
    let tenant: Tenant = serde_json::from_value(json!({
        "apiVersion": "tenantplane.io/v1alpha1", "kind": "Tenant",
        "metadata": {"name": name}, "spec": spec,
    }))
    .unwrap();
    Api::<Tenant>::all(host.clone())
        .create(&PostParams::default(), &tenant)
        .await
        .unwrap()
}

/// A namespace as the webhook admits it: owner reference and label.
async fn member(host: &Client, name: &str, tenant: &Tenant) {
    let ns: Namespace = serde_json::from_value(json!({"metadata": {
        "name": name,
        "ownerReferences": [owner_reference(tenant).unwrap()],
        "labels": {"tenantplane.io/tenant": tenant.name_any()},
    }}))
    .unwrap();
    Api::<Namespace>::all(host.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
}

/// What a cluster admin does to a namespace's membership (owner references and
/// tenant label); `None` releases it.
async fn set_membership(host: &Client, ns: &str, to: Option<&Tenant>) {
    let patch = match to {
        Some(t) => json!({"metadata": {
            "ownerReferences": [owner_reference(t).unwrap()],
            "labels": {"tenantplane.io/tenant": t.name_any()},
        }}),
        None => {
            json!({"metadata": {"ownerReferences": null, "labels": {"tenantplane.io/tenant": null}}})
        }
    };
    Api::<Namespace>::all(host.clone())
        .patch(ns, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
}

/// `kubectl auth can-i VERB RESOURCE -n NS --as USER`, asked with the admin's
/// kubeconfig (system:masters may impersonate).
async fn can_i(server: &ApiServer, verb: &str, resource: &str, ns: &str, user: &str) -> bool {
    let kubeconfig = server.kubeconfig_path();
    let args: Vec<String> = [
        "--kubeconfig",
        &kubeconfig.display().to_string(),
        "auth",
        "can-i",
        verb,
        resource,
        "-n",
        ns,
        "--as",
        user,
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new("kubectl")
            .args(&args)
            .output()
            .expect("kubectl runs")
    })
    .await
    .unwrap();
    let answer = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    match answer.as_str() {
        "yes" => true,
        "no" => false,
        other => panic!(
            "kubectl auth can-i answered {other:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        ),
    }
}

/// Whether `user` may write configmaps in `ns` (the aggregated `admin` role).
async fn writes(c: &Cluster, ns: &str, user: &str) -> bool {
    can_i(&c.server, "create", "configmaps", ns, user).await
}

/// The members a Tenant's status lists, once it has a status.
async fn listed(host: &Client, tenant: &str) -> Option<Vec<String>> {
    let status = Api::<Tenant>::all(host.clone())
        .get(tenant)
        .await
        .ok()?
        .status?;
    let names: Vec<String> = status.namespaces.iter().map(|n| n.name.clone()).collect();
    (usize::try_from(status.size).ok() == Some(names.len())).then_some(names)
}

/// Every object `tenant` maintains in `ns`, as `Kind/name`, sorted.
async fn children(host: &Client, ns: &str, tenant: &str) -> Vec<String> {
    let params = ListParams::default().labels(&child_selector(tenant));
    let mut out = Vec::new();
    macro_rules! kind {
        ($k:ty, $label:literal) => {
            for o in Api::<$k>::namespaced(host.clone(), ns)
                .list(&params)
                .await
                .unwrap()
                .items
            {
                out.push(format!("{}/{}", $label, o.name_any()));
            }
        };
    }
    kind!(RoleBinding, "RoleBinding");
    kind!(NetworkPolicy, "NetworkPolicy");
    kind!(LimitRange, "LimitRange");
    kind!(ResourceQuota, "ResourceQuota");
    out.sort();
    out
}

/// What every member of a tenant with one owner holds: two owner bindings (admin
/// and the namespace deleter) and one object of each replicated kind.
const FULL: usize = 5;

async fn labels(host: &Client, ns: &str) -> (Vec<String>, Vec<String>) {
    let ns = Api::<Namespace>::all(host.clone()).get(ns).await.unwrap();
    let keys = |m: &std::collections::BTreeMap<String, String>| {
        m.iter()
            .filter(|(k, _)| k.as_str() != "kubernetes.io/metadata.name")
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
    };
    (keys(ns.labels()), keys(ns.annotations()))
}

#[tokio::test]
async fn a_moved_namespace_is_revoked_from_its_old_tenant_at_once() {
    let c = cluster().await;
    let host = &c.host;
    let t1 = create_tenant(host, "t1", spec(&["alice"])).await;
    let t2 = create_tenant(host, "t2", spec(&["bob"])).await;
    member(host, "x", &t1).await;
    member(host, "t1-stays", &t1).await;
    let controller = Running::start(host);
    eventually_within(
        "alice administers x, bob does not",
        FIRST_GRANT_DEADLINE,
        || async {
            (writes(&c, "x", "alice").await
                && !writes(&c, "x", "bob").await
                && children(host, "x", "t1").await.len() == FULL
                && listed(host, "t1").await? == ["t1-stays", "x"])
            .then_some(())
        },
    )
    .await;

    set_membership(host, "x", Some(&t2)).await;
    eventually(
        "x is t2's alone, in access, objects and both statuses",
        || async {
            (!writes(&c, "x", "alice").await
                && !can_i(&c.server, "delete", "namespace/x", "x", "alice").await
                && writes(&c, "x", "bob").await
                && children(host, "x", "t1").await.is_empty()
                && children(host, "x", "t2").await.len() == FULL
                && listed(host, "t1").await? == ["t1-stays"]
                && listed(host, "t2").await? == ["x"])
            .then_some(())
        },
    )
    .await;
    // The namespace's metadata is t2's: t1's additional label went with the move.
    let (labels, _) = eventually("t2's metadata on x", || async {
        let (l, a) = labels(host, "x").await;
        l.contains(&"t2-label=yes".to_owned()).then_some((l, a))
    })
    .await;
    assert_eq!(labels, ["t2-label=yes", "tenantplane.io/tenant=t2"]);
    // t1 keeps everything in the namespace it still has.
    assert!(writes(&c, "t1-stays", "alice").await);
    assert_eq!(children(host, "t1-stays", "t1").await.len(), FULL);
    controller.stop().await;
}

#[tokio::test]
async fn a_released_namespace_loses_the_tenants_access_and_metadata() {
    let c = cluster().await;
    let host = &c.host;
    let t1 = create_tenant(host, "t1", spec(&["alice"])).await;
    member(host, "x", &t1).await;
    member(host, "t1-stays", &t1).await;
    // An admin's own label on x, which the release must leave alone.
    Api::<Namespace>::all(host.clone())
        .patch(
            "x",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"owner": "ops"}}})),
        )
        .await
        .unwrap();
    let controller = Running::start(host);
    eventually_within("alice administers x", FIRST_GRANT_DEADLINE, || async {
        (writes(&c, "x", "alice").await
            && listed(host, "t1").await? == ["t1-stays", "x"]
            && labels(host, "x")
                .await
                .0
                .contains(&"t1-label=yes".to_owned()))
        .then_some(())
    })
    .await;

    set_membership(host, "x", None).await;
    eventually(
        "x is released: no access, not listed, no objects",
        || async {
            (!writes(&c, "x", "alice").await
                && children(host, "x", "t1").await.is_empty()
                && listed(host, "t1").await? == ["t1-stays"])
            .then_some(())
        },
    )
    .await;
    let (labels, annotations) = eventually("t1's recorded metadata is removed", || async {
        let (l, a) = labels(host, "x").await;
        (!l.contains(&"t1-label=yes".to_owned())).then_some((l, a))
    })
    .await;
    assert_eq!(labels, ["owner=ops"]);
    assert!(
        !annotations.iter().any(|a| a.starts_with("tenantplane.io/")),
        "{annotations:?}"
    );
    assert!(writes(&c, "t1-stays", "alice").await);
    controller.stop().await;
}

#[tokio::test]
async fn an_owner_removed_from_the_spec_loses_access_and_the_others_keep_it() {
    let c = cluster().await;
    let host = &c.host;
    create_tenant(host, "t1", spec(&["alice", "carol"])).await;
    let t1 = Api::<Tenant>::all(host.clone()).get("t1").await.unwrap();
    member(host, "x", &t1).await;
    let controller = Running::start(host);
    eventually_within(
        "alice and carol administer x",
        FIRST_GRANT_DEADLINE,
        || async {
            (writes(&c, "x", "alice").await && writes(&c, "x", "carol").await).then_some(())
        },
    )
    .await;
    Api::<Tenant>::all(host.clone())
        .patch(
            "t1",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"owners": [{"kind": "User", "name": "carol"}]}})),
        )
        .await
        .unwrap();
    eventually("alice loses x, carol keeps it", || async {
        (!writes(&c, "x", "alice").await
            && !can_i(&c.server, "delete", "namespace/x", "x", "alice").await
            && writes(&c, "x", "carol").await
            && children(host, "x", "t1").await.len() == FULL)
            .then_some(())
    })
    .await;
    controller.stop().await;
}

#[tokio::test]
async fn changes_made_while_the_controller_was_down_are_revoked_when_it_starts() {
    let c = cluster().await;
    let host = &c.host;
    let t1 = create_tenant(host, "t1", spec(&["alice"])).await;
    let t2 = create_tenant(host, "t2", spec(&["bob"])).await;
    member(host, "x", &t1).await;
    member(host, "y", &t1).await;
    member(host, "t1-stays", &t1).await;
    let controller = Running::start(host);
    eventually_within(
        "alice administers x and y",
        FIRST_GRANT_DEADLINE,
        || async {
            (writes(&c, "x", "alice").await
                && writes(&c, "y", "alice").await
                && listed(host, "t1").await?.len() == 3)
                .then_some(())
        },
    )
    .await;
    controller.stop().await;

    // While it is down: x moves to t2; y loses only its owner reference (the label
    // stays, which counts for nothing).
    set_membership(host, "x", Some(&t2)).await;
    Api::<Namespace>::all(host.clone())
        .patch(
            "y",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"ownerReferences": null}})),
        )
        .await
        .unwrap();
    assert!(writes(&c, "x", "alice").await, "nothing revoked yet");

    // A fresh controller has no memory of the old memberships.
    let controller = Running::start(host);
    eventually("x and y are revoked from t1", || async {
        (!writes(&c, "x", "alice").await
            && !writes(&c, "y", "alice").await
            && writes(&c, "x", "bob").await
            && children(host, "x", "t1").await.is_empty()
            && children(host, "y", "t1").await.is_empty()
            && listed(host, "t1").await? == ["t1-stays"]
            && listed(host, "t2").await? == ["x"])
        .then_some(())
    })
    .await;
    eventually("y's t1 label and recorded metadata are removed", || async {
        let (l, a) = labels(host, "y").await;
        (l.is_empty() && a.is_empty()).then_some(())
    })
    .await;
    controller.stop().await;
}

#[tokio::test]
async fn on_delete_delete_deletes_the_members_and_nothing_else() {
    let c = cluster().await;
    let host = &c.host;
    let mut with_delete = spec(&["alice"]);
    with_delete["namespaceOptions"] = json!({"onDelete": "delete"});
    let t1 = create_tenant(host, "t1", with_delete).await;
    assert_eq!(
        t1.spec.namespace_options.on_delete,
        tenantplane_api::OnDelete::Delete
    );
    let t2 = create_tenant(host, "t2", spec(&["bob"])).await;
    member(host, "a", &t1).await;
    member(host, "b", &t1).await;
    member(host, "t2-ns", &t2).await;
    // Not a member: labelled for t1 only (a stale owner reference cannot stand in
    // here: the garbage collector would delete that namespace itself).
    let namespaces: Api<Namespace> = Api::all(host.clone());
    let forged: Namespace = serde_json::from_value(json!({"metadata": {
        "name": "labelled", "labels": {"tenantplane.io/tenant": "t1"}}}))
    .unwrap();
    namespaces
        .create(&PostParams::default(), &forged)
        .await
        .unwrap();
    let controller = Running::start(host);
    eventually("t1 lists a and b", || async {
        (listed(host, "t1").await? == ["a", "b"]).then_some(())
    })
    .await;

    let tenants: Api<Tenant> = Api::all(host.clone());
    tenants
        .delete("t1", &DeleteParams::default())
        .await
        .unwrap();
    eventually("t1 and its members are gone", || async {
        let gone = |n: &'static str| {
            let namespaces = namespaces.clone();
            async move { namespaces.get_opt(n).await.ok()?.is_none().then_some(()) }
        };
        tenants.get_opt("t1").await.ok()?.is_none().then_some(())?;
        gone("a").await?;
        gone("b").await
    })
    .await;
    for survivor in ["labelled", "t2-ns"] {
        let ns = namespaces.get(survivor).await.unwrap();
        assert!(
            ns.metadata.deletion_timestamp.is_none(),
            "{survivor} is no member and must not be deleted"
        );
    }
    controller.stop().await;
}
