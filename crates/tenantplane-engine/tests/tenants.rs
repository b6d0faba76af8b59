//! The namespace-tenant (`Tenant`) controller against a real API server: what it
//! maintains in member namespaces, what it never touches, its status shared with
//! the admission webhook's reservations, zero writes when nothing changed, and a
//! deletion that orphans namespaces with the real garbage collector running.

// Tests assert by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::harness::{eventually, pooled_host};
use k8s_openapi::api::core::v1::{ConfigMap, LimitRange, Namespace, ResourceQuota};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::rbac::v1::{ClusterRole, RoleBinding};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};
use tenantplane_api::{NamespaceReservation, Tenant};
use tenantplane_core::tenancy::owner_reference;
use tenantplane_core::tenant_plan::child_selector;
use tenantplane_engine::metrics::{Metrics, ResultLabels, TENANT_CONTROLLER};
use tenantplane_engine::tenancy::{self, TenantControllerConfig};
use tenantplane_testenv::{
    ApiServer, ApiServerOptions, PooledServer, RequestCounts, TestEnv, TestUser, WRITE_VERBS,
};
use tokio_util::sync::CancellationToken;

struct Running {
    shutdown: CancellationToken,
    task: tokio::task::JoinHandle<()>,
    metrics: Arc<Metrics>,
}

impl Running {
    fn start(host: &Client) -> Running {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_test_writer()
            .try_init();
        let shutdown = CancellationToken::new();
        let metrics = Arc::new(Metrics::unregistered());
        let config = TenantControllerConfig {
            host: host.clone(),
            metrics: Arc::clone(&metrics),
        };
        let task = tokio::spawn(tenancy::run(config, shutdown.clone()));
        Running {
            shutdown,
            task,
            metrics,
        }
    }

    fn reconciles(&self) -> u64 {
        self.metrics
            .reconciles
            .get_or_create(&ResultLabels {
                controller: TENANT_CONTROLLER,
                result: "ok",
            })
            .get()
    }

    async fn stop(self) {
        self.shutdown.cancel();
        self.task.await.unwrap();
    }
}

/// A host with tenantplane's CRDs and token users `users`: with none, one handed on
/// from test to test (see [`pooled_host`]).
async fn server(users: &[&str]) -> (TestEnv, PooledServer, Client) {
    let env = TestEnv::start_shared().await.expect("etcd");
    let server = if users.is_empty() {
        pooled_host().await
    } else {
        let mut options = ApiServerOptions::new("host");
        options.users = users.iter().map(|u| TestUser::new(u, &[])).collect();
        options.crds = tenantplane_api::crds();
        PooledServer::own(env.start_apiserver_with(options).await.expect("apiserver"))
    };
    let client = server.client().await.expect("client");
    (env, server, client)
}

async fn create_tenant(host: &Client, name: &str, spec: Value) -> Tenant {
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

/// A namespace as the webhook would admit it (owner reference and label), or with
/// only one of the two.
async fn namespace(host: &Client, name: &str, owner: Option<&Tenant>, label: Option<&str>) {
    let mut metadata = json!({"name": name});
    if let Some(tenant) = owner {
        metadata["ownerReferences"] = json!([owner_reference(tenant).unwrap()]);
    }
    if let Some(label) = label {
        metadata["labels"] = json!({"tenantplane.io/tenant": label});
    }
    let ns: Namespace = serde_json::from_value(json!({"metadata": metadata})).unwrap();
    Api::<Namespace>::all(host.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
}

async fn tenant_status(host: &Client, name: &str) -> Option<Value> {
    let t = Api::<Tenant>::all(host.clone()).get(name).await.ok()?;
    serde_json::to_value(t.status?).ok()
}

fn condition<'a>(conditions: &'a Value, ty: &str) -> &'a Value {
    conditions
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == ty))
        .unwrap_or(&Value::Null)
}

async fn names<K>(host: &Client, ns: &str, selector: Option<&str>) -> Vec<String>
where
    K: kube::Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let mut params = ListParams::default();
    if let Some(s) = selector {
        params = params.labels(s);
    }
    let mut names: Vec<String> = Api::<K>::namespaced(host.clone(), ns)
        .list(&params)
        .await
        .unwrap()
        .items
        .iter()
        .map(|o| o.name_any())
        .collect();
    names.sort();
    names
}

fn acme_spec() -> Value {
    json!({
        "owners": [
            {"kind": "User", "name": "alice"},
            {"kind": "Group", "name": "devs", "clusterRoles": ["view"]},
        ],
        "namespaceOptions": {"quota": 1, "additionalMetadata": {"labels": {"team": "a", "tenantplane.io/tenant": "forged"}}},
        "additionalRoleBindings": [{"clusterRoleName": "view", "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "auditors"}]}],
        "networkPolicies": [{"podSelector": {}, "policyTypes": ["Ingress"]}],
        "limitRanges": [{"limits": [{"type": "Container", "default": {"cpu": "500m"}}]}],
        "resourceQuotas": [{"hard": {"pods": "10"}}],
    })
}

/// Every write the API server counted since `before`, by (verb, resource).
async fn writes_since(
    server: &ApiServer,
    before: &RequestCounts,
) -> BTreeMap<(String, String), u64> {
    let now = server.request_counts().await.unwrap();
    now.since(before)
        .by_verb_resource
        .into_iter()
        .filter(|((verb, _), _)| WRITE_VERBS.contains(&verb.as_str()))
        .collect()
}

#[tokio::test]
async fn a_tenant_keeps_its_member_namespaces_and_touches_nothing_else() {
    let (_env, server, host) = server(&[]).await;
    let acme = create_tenant(&host, "acme", acme_spec()).await;
    let selector = child_selector("acme");
    // Admitted by the webhook; adopted by an admin (owner reference only); a
    // forged label without an owner reference.
    namespace(&host, "acme-a", Some(&acme), Some("acme")).await;
    namespace(&host, "acme-b", Some(&acme), None).await;
    namespace(&host, "forged", None, Some("acme")).await;
    // Someone else's object under a name the tenant will want in acme-b.
    let foreign: NetworkPolicy = serde_json::from_value(json!({
        "metadata": {"name": "tenantplane-networkpolicy-0", "labels": {"owner": "ops"}},
        "spec": {"podSelector": {"matchLabels": {"app": "ops"}}},
    }))
    .unwrap();
    let np_b: Api<NetworkPolicy> = Api::namespaced(host.clone(), "acme-b");
    np_b.create(&PostParams::default(), &foreign).await.unwrap();
    // Reservations the webhook took: one for a namespace now a member, one live,
    // one expired.
    let now = Timestamp::now();
    let reservation = |ns: &str, secs: i64| NamespaceReservation {
        namespace: ns.into(),
        expires: Time(now.checked_add(SignedDuration::from_secs(secs)).unwrap()),
    };
    let tenants: Api<Tenant> = Api::all(host.clone());
    let mut with_slots = tenants.get("acme").await.unwrap();
    with_slots.status = Some(tenantplane_api::TenantStatus {
        reservations: vec![
            reservation("acme-a", 600),
            reservation("acme-c", 600),
            reservation("acme-old", -5),
        ],
        ..Default::default()
    });
    tenants
        .replace_status("acme", &PostParams::default(), &with_slots)
        .await
        .unwrap();

    let controller = Running::start(&host);

    let status = eventually("acme's status lists both members", || async {
        let s = tenant_status(&host, "acme").await?;
        (s["size"] == 2 && condition(&s["conditions"], "QuotaExceeded")["status"] == "True")
            .then_some(s)
    })
    .await;
    assert_eq!(status["state"], "Active");
    let members: Vec<&str> = status["namespaces"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        members,
        ["acme-a", "acme-b"],
        "the forged namespace is no member"
    );
    let ready = condition(&status["conditions"], "Ready");
    assert_eq!(ready["status"], "False", "{status}");
    assert!(
        ready["message"]
            .as_str()
            .unwrap()
            .contains("acme-b (ForeignObject)"),
        "{ready}"
    );
    let b = &status["namespaces"][1]["conditions"][0];
    assert_eq!(b["reason"], "ForeignObject");
    assert!(
        b["message"]
            .as_str()
            .unwrap()
            .contains("NetworkPolicy tenantplane-networkpolicy-0"),
        "{b}"
    );
    let slots: Vec<&str> = status["reservations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["namespace"].as_str().unwrap())
        .collect();
    assert_eq!(
        slots,
        ["acme-c"],
        "the live reservation stays, the others go"
    );

    // Both members hold every object; alice's two roles, devs' view, auditors.
    for ns in ["acme-a", "acme-b"] {
        let bindings: Vec<RoleBinding> = Api::<RoleBinding>::namespaced(host.clone(), ns)
            .list(&ListParams::default().labels(&selector))
            .await
            .unwrap()
            .items;
        let mut grants: Vec<String> = bindings
            .iter()
            .map(|b| {
                let s = &b.subjects.as_ref().unwrap()[0];
                format!("{}:{}->{}", s.kind, s.name, b.role_ref.name)
            })
            .collect();
        grants.sort();
        assert_eq!(
            grants,
            [
                "Group:auditors->view",
                "Group:devs->view",
                "User:alice->admin",
                "User:alice->tenantplane-namespace-deleter",
            ],
            "{ns}"
        );
        assert_eq!(
            names::<LimitRange>(&host, ns, Some(&selector)).await,
            ["tenantplane-limitrange-0"]
        );
        assert_eq!(
            names::<ResourceQuota>(&host, ns, Some(&selector)).await,
            ["tenantplane-resourcequota-0"]
        );
        let labels = Api::<Namespace>::all(host.clone())
            .get(ns)
            .await
            .unwrap()
            .labels()
            .clone();
        assert_eq!(labels["tenantplane.io/tenant"], "acme", "{ns} repaired");
        assert_eq!(labels["team"], "a");
    }
    assert_eq!(
        names::<NetworkPolicy>(&host, "acme-a", Some(&selector)).await,
        ["tenantplane-networkpolicy-0"]
    );
    // The foreign policy is exactly as it was.
    let untouched = np_b.get("tenantplane-networkpolicy-0").await.unwrap();
    assert_eq!(
        untouched.labels().get("owner").map(String::as_str),
        Some("ops")
    );
    assert!(!untouched.labels().contains_key("tenantplane.io/tenant"));
    assert_eq!(
        untouched
            .spec
            .unwrap()
            .pod_selector
            .unwrap()
            .match_labels
            .unwrap()["app"],
        "ops"
    );
    // The forged namespace got nothing and kept its labels as they were.
    assert!(names::<RoleBinding>(&host, "forged", None).await.is_empty());
    let forged = Api::<Namespace>::all(host.clone())
        .get("forged")
        .await
        .unwrap();
    assert!(!forged.labels().contains_key("team"));

    // Drift: a deleted RoleBinding and an edited quota are restored.
    let rb_a: Api<RoleBinding> = Api::namespaced(host.clone(), "acme-a");
    let victim = names::<RoleBinding>(&host, "acme-a", Some(&selector)).await[0].clone();
    rb_a.delete(&victim, &DeleteParams::default())
        .await
        .unwrap();
    let rq_a: Api<ResourceQuota> = Api::namespaced(host.clone(), "acme-a");
    rq_a.patch(
        "tenantplane-resourcequota-0",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"hard": {"pods": "99", "secrets": "1"}}})),
    )
    .await
    .unwrap();
    eventually("drift is restored", || async {
        let restored = rb_a.get_opt(&victim).await.ok()??;
        let hard = rq_a
            .get("tenantplane-resourcequota-0")
            .await
            .ok()?
            .spec?
            .hard?;
        let keys: Vec<&String> = hard.keys().collect();
        (!restored.role_ref.name.is_empty() && hard["pods"].0 == "10" && keys == ["pods"])
            .then_some(())
    })
    .await;

    // A spec change: the policy and the extra label go, the quota changes,
    // the tenant is cordoned.
    tenants
        .patch(
            "acme",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {
                "networkPolicies": null,
                "resourceQuotas": [{"hard": {"pods": "5"}}],
                "namespaceOptions": {"additionalMetadata": {"labels": null}},
                "cordoned": true,
            }})),
        )
        .await
        .unwrap();
    eventually("the spec change is applied and pruned", || async {
        let policies = names::<NetworkPolicy>(&host, "acme-a", Some(&selector)).await;
        let quota = rq_a.get("tenantplane-resourcequota-0").await.ok()?;
        let ns = Api::<Namespace>::all(host.clone())
            .get("acme-a")
            .await
            .ok()?;
        let s = tenant_status(&host, "acme").await?;
        (policies.is_empty()
            && quota.spec?.hard?["pods"].0 == "5"
            && !ns.labels().contains_key("team")
            && ns.labels().get("tenantplane.io/tenant").map(String::as_str) == Some("acme")
            && s["state"] == "Cordoned")
            .then_some(())
    })
    .await;
    // The foreign policy was not pruned with ours.
    assert!(
        np_b.get_opt("tenantplane-networkpolicy-0")
            .await
            .unwrap()
            .is_some()
    );

    // No-op: a fresh controller's passes over the converged tenant write nothing.
    // With NetworkPolicy 0 no longer wanted, the foreign one is no conflict.
    eventually("the status settles: Ready", || async {
        let s = tenant_status(&host, "acme").await?;
        let slots = s["reservations"].as_array().map_or(0, Vec::len);
        (slots == 1 && condition(&s["conditions"], "Ready")["status"] == "True").then_some(())
    })
    .await;
    controller.stop().await;
    let before = server.request_counts().await.unwrap();
    let controller = Running::start(&host);
    eventually("a full pass of the restarted controller", || async {
        (controller.reconciles() >= 1).then_some(())
    })
    .await;
    // One more event for the tenant, from a write the test makes and counts: a
    // namespace with a forged label (never a member).
    let passes = controller.reconciles();
    namespace(&host, "forged-2", None, Some("acme")).await;
    eventually("a pass after the forged namespace", || async {
        (controller.reconciles() > passes).then_some(())
    })
    .await;
    // Nothing else writes to this API server (no kube-controller-manager, no
    // endpoint reconciler): every write counted is the controller's or the test's.
    let expected = BTreeMap::from([(("POST".to_owned(), "namespaces".to_owned()), 1)]);
    assert_eq!(
        writes_since(&server, &before).await,
        expected,
        "passes over an unchanged tenant write nothing (only the test's namespace)"
    );
    controller.stop().await;
}

fn deleter_role() -> ClusterRole {
    // As shipped in deploy/install/01-rbac.yaml.
    serde_json::from_value(json!({
        "metadata": {"name": "tenantplane-namespace-deleter"},
        "rules": [{"apiGroups": [""], "resources": ["namespaces"], "verbs": ["delete"]}],
    }))
    .unwrap()
}

async fn allowed_to_create_configmap(client: &Client, ns: &str, name: &str) -> Result<(), u16> {
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
    match Api::<ConfigMap>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &cm)
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) => Err(s.code),
        Err(e) => panic!("{e}"),
    }
}

#[tokio::test]
async fn owners_administer_only_their_namespaces_and_deleting_the_tenant_orphans_them() {
    let (env, server, host) = server(&["alice", "bob"]).await;
    let _kcm = env
        .start_controller_manager(&server)
        .expect("kube-controller-manager");
    Api::<ClusterRole>::all(host.clone())
        .create(&PostParams::default(), &deleter_role())
        .await
        .unwrap();
    let owner = |user: &str| json!({"owners": [{"kind": "User", "name": user}]});
    let acme = create_tenant(&host, "acme", owner("alice")).await;
    let other = create_tenant(&host, "other", owner("bob")).await;
    namespace(&host, "acme-1", Some(&acme), Some("acme")).await;
    namespace(&host, "acme-2", Some(&acme), Some("acme")).await;
    namespace(&host, "other-1", Some(&other), Some("other")).await;
    let controller = Running::start(&host);

    let alice = server.client_as("alice").await.unwrap();
    // The `admin` binding grants what the aggregated ClusterRole grants.
    eventually("alice administers acme-1", || async {
        allowed_to_create_configmap(&alice, "acme-1", "by-alice")
            .await
            .ok()
    })
    .await;
    assert_eq!(
        allowed_to_create_configmap(&alice, "other-1", "by-alice").await,
        Err(403),
        "not another tenant's namespace"
    );
    let namespaces_as_alice: Api<Namespace> = Api::all(alice.clone());
    match namespaces_as_alice
        .delete("other-1", &DeleteParams::default())
        .await
    {
        Err(kube::Error::Api(s)) => assert_eq!(s.code, 403),
        other => panic!("alice deleted bob's namespace: {other:?}"),
    }
    eventually("alice deletes her own namespace acme-2", || async {
        namespaces_as_alice
            .delete("acme-2", &DeleteParams::default())
            .await
            .ok()
    })
    .await;

    // A witness that the garbage collector really runs: owned by the Tenant, it
    // must go when the Tenant goes.
    let witness: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "gc-witness", "ownerReferences": [owner_reference(&acme).unwrap()]},
    }))
    .unwrap();
    let default_cms: Api<ConfigMap> = Api::namespaced(host.clone(), "default");
    default_cms
        .create(&PostParams::default(), &witness)
        .await
        .unwrap();

    let tenants: Api<Tenant> = Api::all(host.clone());
    tenants
        .delete("acme", &DeleteParams::default())
        .await
        .unwrap();
    eventually(
        "the Tenant is gone and the GC removed its witness",
        || async {
            let gone = tenants.get_opt("acme").await.ok()?.is_none();
            let witness_gone = default_cms.get_opt("gc-witness").await.ok()?.is_none();
            (gone && witness_gone).then_some(())
        },
    )
    .await;
    let namespaces: Api<Namespace> = Api::all(host.clone());
    let orphan = namespaces.get("acme-1").await.expect("acme-1 survives");
    assert!(orphan.metadata.deletion_timestamp.is_none());
    assert!(orphan.owner_references().is_empty());
    assert!(!orphan.labels().contains_key("tenantplane.io/tenant"));
    assert!(
        names::<RoleBinding>(&host, "acme-1", Some(&child_selector("acme")))
            .await
            .is_empty(),
        "ex-owners lose access"
    );
    assert_eq!(
        allowed_to_create_configmap(&alice, "acme-1", "after").await,
        Err(403)
    );
    // bob's tenant is untouched.
    assert_eq!(
        names::<RoleBinding>(&host, "other-1", Some(&child_selector("other")))
            .await
            .len(),
        2
    );

    // A Tenant of the same name: the orphan is neither deleted nor re-adopted.
    create_tenant(&host, "acme", owner("alice")).await;
    let status = eventually("the new acme reports", || async {
        let s = tenant_status(&host, "acme").await?;
        (condition(&s["conditions"], "Ready")["status"] == "True").then_some(s)
    })
    .await;
    assert_eq!(status["size"], 0);
    let orphan = namespaces.get("acme-1").await.expect("acme-1 still exists");
    assert!(orphan.metadata.deletion_timestamp.is_none());
    assert!(orphan.owner_references().is_empty());
    assert!(names::<RoleBinding>(&host, "acme-1", None).await.is_empty());
    controller.stop().await;
}
