//! ResourcePools on a real API server: parallel claims never overshoot the pool, a
//! release lets a waiting claim in, a namespace leaving the pool gives back its
//! share, a foreign quota is never touched, and a restart with nothing to do writes
//! nothing.

// Tests assert by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use crate::harness::pooled_host;
use k8s_openapi::api::core::v1::{Namespace, ResourceQuota};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;
use tenantplane_api::{ResourcePool, ResourcePoolClaim};
use tenantplane_core::pool::{POOL_LABEL, quota_name};
use tenantplane_core::quantity::exact_nanos;
use tenantplane_engine::metrics::{Metrics, POOL_CONTROLLER, ResultLabels};
use tenantplane_engine::pools;
use tenantplane_testenv::{PooledServer, TestEnv};
use tokio_util::sync::CancellationToken;

const DEADLINE: Duration = Duration::from_secs(30);

struct Running {
    shutdown: CancellationToken,
    task: tokio::task::JoinHandle<()>,
    metrics: Arc<Metrics>,
}

impl Running {
    fn start(client: &Client) -> Self {
        let shutdown = CancellationToken::new();
        let metrics = Arc::new(Metrics::unregistered());
        let task = tokio::spawn(pools::run(
            client.clone(),
            Arc::clone(&metrics),
            shutdown.clone(),
        ));
        Self {
            shutdown,
            task,
            metrics,
        }
    }

    fn reconciles(&self) -> u64 {
        self.metrics
            .reconciles
            .get_or_create(&ResultLabels {
                controller: POOL_CONTROLLER,
                result: "ok",
            })
            .get()
    }

    async fn stop(self) {
        self.shutdown.cancel();
        self.task.await.unwrap();
    }
}

async fn wait_until<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let mut check = move || {
        let answer = check();
        async move { answer.await.then_some(()) }
    };
    tenantplane_testenv::eventually(what, DEADLINE, &mut check).await;
}

async fn namespace(client: &Client, name: &str, pool: Option<&str>) {
    let api: Api<Namespace> = Api::all(client.clone());
    let labels = pool.map(|p| json!({ "pool": p })).unwrap_or(json!({}));
    let ns = serde_json::from_value(json!({
        "metadata": { "name": name, "labels": labels }
    }))
    .unwrap();
    api.create(&PostParams::default(), &ns).await.unwrap();
}

async fn pool(client: &Client, name: &str, hard: serde_json::Value, defaults: serde_json::Value) {
    let api: Api<ResourcePool> = Api::all(client.clone());
    let pool = serde_json::from_value(json!({
        "apiVersion": "tenantplane.io/v1alpha1", "kind": "ResourcePool",
        "metadata": { "name": name },
        "spec": {
            "namespaceSelector": { "matchLabels": { "pool": name } },
            "quota": { "hard": hard },
            "defaults": defaults,
        }
    }))
    .unwrap();
    api.create(&PostParams::default(), &pool).await.unwrap();
}

fn claim_body(name: &str, pool: &str, claim: serde_json::Value) -> ResourcePoolClaim {
    serde_json::from_value(json!({
        "apiVersion": "tenantplane.io/v1alpha1", "kind": "ResourcePoolClaim",
        "metadata": { "name": name },
        "spec": { "pool": pool, "claim": claim }
    }))
    .unwrap()
}

/// The claims' Bound verdicts: (namespace, name) → (status, reason).
async fn verdicts(client: &Client) -> BTreeMap<(String, String), (String, String)> {
    let api: Api<ResourcePoolClaim> = Api::all(client.clone());
    api.list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|c| {
            let bound = c
                .status
                .as_ref()?
                .conditions
                .iter()
                .find(|k| k.type_ == "Bound")?
                .clone();
            Some((
                (c.namespace().unwrap(), c.name_any()),
                (bound.status, bound.reason),
            ))
        })
        .collect()
}

/// Sum over the pool's ResourceQuotas of `resource`, in nano-units.
async fn quota_total(client: &Client, pool: &str, resource: &str) -> i128 {
    let api: Api<ResourceQuota> = Api::all(client.clone());
    api.list(&ListParams::default().labels(&format!("{POOL_LABEL}={pool}")))
        .await
        .unwrap()
        .items
        .iter()
        .filter_map(|q| q.spec.as_ref()?.hard.as_ref()?.get(resource).cloned())
        .map(|q| exact_nanos(&q.0).unwrap())
        .sum()
}

async fn quota_hard(client: &Client, ns: &str, pool: &str) -> Option<BTreeMap<String, String>> {
    let api: Api<ResourceQuota> = Api::namespaced(client.clone(), ns);
    let q = api.get_opt(&quota_name(pool)).await.unwrap()?;
    Some(q.spec?.hard?.into_iter().map(|(k, v)| (k, v.0)).collect())
}

/// A host with tenantplane's CRDs, handed on from test to test (see [`pooled_host`]).
async fn start() -> (TestEnv, PooledServer, Client) {
    let env = TestEnv::start_shared().await.unwrap();
    let server = pooled_host().await;
    let client = server.client().await.unwrap();
    (env, server, client)
}

const UNIT: i128 = 1_000_000_000;

#[tokio::test]
async fn parallel_claims_never_overshoot_and_a_release_lets_a_waiting_claim_in() {
    let (_env, server, client) = start().await;
    for ns in ["team-a", "team-b", "team-c"] {
        namespace(&client, ns, Some("shared")).await;
    }
    namespace(&client, "outsider", None).await;
    pool(
        &client,
        "shared",
        json!({ "cpu": "10", "memory": "10Gi" }),
        json!({}),
    )
    .await;
    let controller = Running::start(&client);

    // 30 claims of one CPU each, all at once, for a pool of 10.
    let mut creations = Vec::new();
    for i in 0..30 {
        let ns = ["team-a", "team-b", "team-c"][i % 3];
        let api: Api<ResourcePoolClaim> = Api::namespaced(client.clone(), ns);
        let body = claim_body(
            &format!("claim-{i}"),
            "shared",
            json!({ "cpu": "1", "memory": "100Mi" }),
        );
        creations.push(tokio::spawn(async move {
            api.create(&PostParams::default(), &body).await.unwrap();
        }));
    }
    // And one from a namespace outside the pool.
    let outsider: Api<ResourcePoolClaim> = Api::namespaced(client.clone(), "outsider");
    outsider
        .create(
            &PostParams::default(),
            &claim_body("sneaky", "shared", json!({ "cpu": "1" })),
        )
        .await
        .unwrap();
    for c in creations {
        c.await.unwrap();
    }
    wait_until("every claim to have a verdict", || async {
        verdicts(&client).await.len() == 31
    })
    .await;
    let all = verdicts(&client).await;
    let bound: Vec<_> = all.iter().filter(|(_, (s, _))| s == "True").collect();
    assert_eq!(bound.len(), 10, "{all:#?}");
    for (key, (status, reason)) in &all {
        if status == "False" {
            let expected = if key.0 == "outsider" {
                "NamespaceNotSelected"
            } else {
                "PoolExhausted"
            };
            assert_eq!(reason, expected, "{key:?}");
        }
    }
    wait_until("the quotas to add up to the grants", || async {
        quota_total(&client, "shared", "cpu").await == 10 * UNIT
    })
    .await;
    assert_eq!(
        quota_total(&client, "shared", "memory").await,
        10 * 100 * 1024 * 1024 * UNIT
    );
    assert_eq!(quota_hard(&client, "outsider", "shared").await, None);
    let pools: Api<ResourcePool> = Api::all(client.clone());
    let status = pools.get("shared").await.unwrap().status.unwrap();
    assert_eq!(status.size, 3);
    assert_eq!(status.claim_count, 10);
    assert_eq!(exact_nanos(&status.allocated["cpu"].0), Some(10 * UNIT));

    // Release one bound claim: exactly one waiting claim takes its place.
    let ((freed_ns, freed_name), _) = bound[0];
    let api: Api<ResourcePoolClaim> = Api::namespaced(client.clone(), freed_ns.as_str());
    api.delete(freed_name.as_str(), &DeleteParams::default())
        .await
        .unwrap();
    wait_until("a waiting claim to bind", || async {
        let now = verdicts(&client).await;
        now.len() == 30 && now.values().filter(|(s, _)| s == "True").count() == 10
    })
    .await;
    assert_eq!(quota_total(&client, "shared", "cpu").await, 10 * UNIT);

    // A bound claim edited to take more holds what it was bound with.
    let (edited_ns, edited_name) = verdicts(&client)
        .await
        .into_iter()
        .find(|(_, (s, _))| s == "True")
        .unwrap()
        .0;
    let api: Api<ResourcePoolClaim> = Api::namespaced(client.clone(), &edited_ns);
    api.patch(
        &edited_name,
        &PatchParams::default(),
        &Patch::Merge(json!({ "spec": { "claim": { "cpu": "8" } } })),
    )
    .await
    .unwrap();
    wait_until("the edit to be reported as ineffective", || async {
        verdicts(&client)
            .await
            .get(&(edited_ns.clone(), edited_name.clone()))
            .is_some_and(|v| v.1 == "BoundUnchanged")
    })
    .await;
    assert_eq!(quota_total(&client, "shared", "cpu").await, 10 * UNIT);
    let held = api.get(&edited_name).await.unwrap().status.unwrap().bound;
    assert_eq!(held["cpu"].0, "1");

    drop(server);
    controller.stop().await;
}

#[tokio::test]
async fn namespaces_joining_and_leaving_and_foreign_quotas() {
    let (_env, server, client) = start().await;
    namespace(&client, "p-one", Some("small")).await;
    namespace(&client, "p-two", Some("small")).await;
    // A quota someone else made in the pool's name is never touched.
    let foreign: Api<ResourceQuota> = Api::namespaced(client.clone(), "p-two");
    foreign
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": { "name": quota_name("small") },
                "spec": { "hard": { "pods": "99" } }
            }))
            .unwrap(),
        )
        .await
        .unwrap();
    pool(
        &client,
        "small",
        json!({ "pods": "8" }),
        json!({ "pods": "2" }),
    )
    .await;
    let controller = Running::start(&client);

    wait_until("defaults in p-one", || async {
        quota_hard(&client, "p-one", "small").await
            == Some([("pods".to_owned(), "2".to_owned())].into())
    })
    .await;
    let claims: Api<ResourcePoolClaim> = Api::namespaced(client.clone(), "p-one");
    claims
        .create(
            &PostParams::default(),
            &claim_body("more", "small", json!({ "pods": "3" })),
        )
        .await
        .unwrap();
    wait_until("the claim to bind", || async {
        quota_hard(&client, "p-one", "small").await
            == Some([("pods".to_owned(), "5".to_owned())].into())
    })
    .await;
    // p-two got its defaults in the ledger (7 of 8 granted) but its quota is foreign.
    let foreign_now = foreign.get(&quota_name("small")).await.unwrap();
    assert!(foreign_now.labels().get(POOL_LABEL).is_none());
    assert_eq!(foreign_now.spec.unwrap().hard.unwrap()["pods"].0, "99");
    let pools: Api<ResourcePool> = Api::all(client.clone());
    wait_until("the pool to report the conflict", || async {
        let status = pools.get("small").await.unwrap().status.unwrap_or_default();
        status.conditions.iter().any(|c| {
            c.type_ == "Ready" && c.reason == "QuotaConflict" && c.message.contains("p-two")
        })
    })
    .await;

    // A third namespace joins: nothing left for its defaults, so its quota is zero.
    namespace(&client, "p-three", Some("small")).await;
    wait_until("a zero quota in p-three", || async {
        quota_hard(&client, "p-three", "small").await
            == Some([("pods".to_owned(), "0".to_owned())].into())
    })
    .await;
    // p-one leaves the pool: its quota goes, its claim waits, p-three gets defaults.
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces
        .patch(
            "p-one",
            &PatchParams::default(),
            &Patch::Merge(json!({ "metadata": { "labels": { "pool": null } } })),
        )
        .await
        .unwrap();
    wait_until("p-one's quota to go and p-three's defaults", || async {
        quota_hard(&client, "p-one", "small").await.is_none()
            && quota_hard(&client, "p-three", "small").await
                == Some([("pods".to_owned(), "2".to_owned())].into())
    })
    .await;
    wait_until("the claim to wait", || async {
        verdicts(&client)
            .await
            .get(&("p-one".to_owned(), "more".to_owned()))
            .is_some_and(|v| v.1 == "NamespaceNotSelected")
    })
    .await;

    // Restart with nothing changed: the first reconcile writes nothing.
    controller.stop().await;
    let before = server.request_counts().await.unwrap();
    let controller = Running::start(&client);
    wait_until("a reconcile after the restart", || async {
        controller.reconciles() >= 1
    })
    .await;
    let writes = server.request_counts().await.unwrap().since(&before);
    assert_eq!(writes.writes(None), 0, "{writes:?}");
    controller.stop().await;
}
