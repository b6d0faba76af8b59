//! A kind's syncer against scripted host and tenant API servers: exactly which
//! requests one sync of a key sends, and what it makes of each answer (a 409
//! re-planned, a 422 recorded once, a 404 on delete taken as done, a host that does
//! not answer waited for only so long).
//!
//! Stays over 500 lines: tests only, one harness and the scenarios that use it.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{ApiResource, DynamicObject};
use kube::runtime::reflector::store::Writer;
use kube::runtime::watcher;
use prometheus_client::registry::Registry;
use serde_json::{Value, json};
use tenantplane_api::{ApiFairness, DecisionAction, DecisionRecord};
use tenantplane_core::kinds::{GroupKind, Scope};
use tenantplane_core::metadata::reverse_mapping;
use tenantplane_core::naming::{SourceName, host_name};
use tenantplane_core::plan::stamp_desired_hash;
use tenantplane_core::pods::status::FINALIZER;
use tenantplane_core::transform::{TenantTarget, to_host_in};
use tokio::sync::mpsc;

use super::{
    ConflictedObjects, Key, KindProgress, KindSyncer, KindTarget, PodSettings,
    ServiceCidrMismatches, SyncContext, SyncedKinds,
};
use crate::decisions::{DecisionSender, Recorded};
use crate::fairness::WriteBudget;
use crate::host_watches::HostWatches;
use crate::metrics::Metrics;
use crate::mock_api::{MockApi, status};

const TENANT: &str = "acme";
const HOST_NAMESPACE: &str = "team-a";

/// One syncer over caches the test fills, talking to two scripted servers.
struct Harness {
    syncer: KindSyncer,
    host: MockApi,
    tenant: MockApi,
    tenant_cache: Writer<DynamicObject>,
    host_cache: Writer<DynamicObject>,
    decisions: mpsc::UnboundedReceiver<Box<Recorded>>,
}

fn target() -> TenantTarget {
    TenantTarget::new(TENANT, HOST_NAMESPACE).unwrap()
}

impl Harness {
    fn new<K: kube::Resource<DynamicType = ()>>(pods: PodSettings) -> Self {
        let resource = ApiResource::erase::<K>(&());
        let group_kind = GroupKind::new(&resource.group, &resource.kind);
        let host = MockApi::new();
        let tenant = MockApi::new();
        let (decisions_tx, decisions) = DecisionSender::channel();
        let ctx = Arc::new(SyncContext {
            target: target(),
            host: host.client(),
            tenant: tenant.client(),
            budget: Arc::new(WriteBudget::new(ApiFairness {
                qps: 10_000,
                burst: 10_000,
            })),
            decisions: decisions_tx,
            metrics: Arc::new(Metrics::new(&mut Registry::default())),
            workers: 1,
            resync: None,
            pods,
            service_cidr: Arc::new(ServiceCidrMismatches::new("Services")),
            conflicts: Arc::new(ConflictedObjects::new("objects")),
            synced: SyncedKinds::default(),
            host_watches: HostWatches::new(host.client()),
            status_alarm: Default::default(),
        });
        let tenant_cache = Writer::new(resource.clone());
        let host_cache = Writer::new(resource.clone());
        let syncer = KindSyncer::new(
            ctx,
            KindTarget {
                api_version: resource.api_version.clone(),
                group_kind,
                tenant_resource: resource.clone(),
                host_resource: resource,
                two_way: None,
            },
            (tenant_cache.as_reader(), host_cache.as_reader()),
            None,
            Arc::new(KindProgress::default()),
        );
        Self {
            syncer,
            host,
            tenant,
            tenant_cache,
            host_cache,
            decisions,
        }
    }

    fn tenant_has(&mut self, object: Value) {
        let object: DynamicObject = serde_json::from_value(object).unwrap();
        self.tenant_cache
            .apply_watcher_event(&watcher::Event::Apply(object));
    }

    fn host_has(&mut self, object: Value) {
        let object: DynamicObject = serde_json::from_value(object).unwrap();
        self.host_cache
            .apply_watcher_event(&watcher::Event::Apply(object));
    }

    /// The decisions recorded since the last call.
    fn decisions(&mut self) -> Vec<DecisionRecord> {
        let mut out = Vec::new();
        while let Ok(recorded) = self.decisions.try_recv() {
            if let Recorded::Decision(record) = *recorded {
                out.push(record);
            }
        }
        out
    }
}

fn key() -> Key {
    ("default".into(), "settings".into())
}

fn host_name_of(key: &Key) -> String {
    host_name(&SourceName {
        name: &key.1,
        virtual_namespace: &key.0,
        tenant: TENANT,
    })
    .name
}

fn config_map(value: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "settings", "namespace": "default", "uid": "tenant-uid", "resourceVersion": "1"},
        "data": {"mode": value},
    })
}

/// Our host copy of `tenant` as a write of it stored it: the desired state, with
/// the server's resourceVersion and UID.
fn stored_copy(tenant: &Value, resource_version: &str) -> Value {
    let (_, mut desired) = to_host_in(
        &target(),
        &GroupKind::new("", "ConfigMap"),
        Scope::Namespaced,
        tenant,
        &Default::default(),
    )
    .unwrap();
    stamp_desired_hash(&mut desired);
    desired["metadata"]["resourceVersion"] = json!(resource_version);
    desired["metadata"]["uid"] = json!("host-uid");
    desired
}

/// The body of the `n`th request, echoed back as the server's answer.
fn echo(n: usize) -> impl FnOnce(&[crate::mock_api::Sent]) -> (u16, Value) + Send {
    move |sent| {
        let mut body = sent[n].body.clone().unwrap();
        body["metadata"]["resourceVersion"] = json!("100");
        body["metadata"]["uid"] = json!("host-uid");
        (200, body)
    }
}

fn configmaps() -> String {
    format!("/api/v1/namespaces/{HOST_NAMESPACE}/configmaps")
}

fn configmap_path() -> String {
    format!("{}/{}", configmaps(), host_name_of(&key()))
}

fn actions(decisions: &[DecisionRecord]) -> Vec<DecisionAction> {
    decisions.iter().map(|d| d.action).collect()
}

// --- 422: refused once, not sent again until the tenant object changes ---------

#[tokio::test]
async fn a_create_the_host_refuses_is_recorded_once_and_not_resent_until_the_object_changes() {
    let mut h = Harness::new::<ConfigMap>(PodSettings::default());
    h.tenant_has(config_map("a"));
    h.host.reply(
        422,
        status(422, "Invalid", "ConfigMap \"x\" is invalid: data: Too long"),
    );
    h.syncer.sync(&key()).await.unwrap();
    assert_eq!(h.host.calls(), [format!("POST {}", configmaps())]);
    let sent = h.host.sent();
    assert!(
        sent[0]
            .query
            .as_deref()
            .is_some_and(|q| q.contains("fieldManager=tenantplane")),
        "{:?}",
        sent[0].query
    );
    let body = sent[0].body.clone().unwrap();
    assert_eq!(body["metadata"]["name"], host_name_of(&key()));
    assert_eq!(body["data"]["mode"], "a");
    let decisions = h.decisions();
    assert_eq!(actions(&decisions), [DecisionAction::Skip]);
    assert!(
        decisions[0].reason.contains("refused it") && decisions[0].reason.contains("Too long"),
        "{}",
        decisions[0].reason
    );

    // Every later pass over the unchanged object: no request, no second Skip.
    for _ in 0..3 {
        h.syncer.sync(&key()).await.unwrap();
    }
    assert_eq!(h.host.calls().len(), 1, "{:?}", h.host.calls());
    assert!(h.decisions().is_empty());

    // The tenant changes it: sent again (and this time taken).
    h.tenant_has(config_map("b"));
    h.host.reply_with(echo(1));
    h.syncer.sync(&key()).await.unwrap();
    assert_eq!(h.host.calls().len(), 2);
    assert_eq!(h.host.sent()[1].body.clone().unwrap()["data"]["mode"], "b");
    assert_eq!(actions(&h.decisions()), [DecisionAction::Create]);
}

#[tokio::test]
async fn a_create_forbidden_by_the_host_is_not_resent_either() {
    let mut h = Harness::new::<ConfigMap>(PodSettings::default());
    h.tenant_has(config_map("a"));
    h.host
        .reply(403, status(403, "Forbidden", "exceeded quota: configmaps"));
    h.syncer.sync(&key()).await.unwrap();
    h.syncer.sync(&key()).await.unwrap();
    assert_eq!(h.host.calls(), [format!("POST {}", configmaps())]);
    assert_eq!(actions(&h.decisions()), [DecisionAction::Skip]);
}

#[tokio::test]
async fn an_update_the_host_refuses_names_the_fields_and_is_not_resent() {
    let mut h = Harness::new::<ConfigMap>(PodSettings::default());
    h.host_has(stored_copy(&config_map("a"), "3"));
    h.tenant_has(config_map("b"));
    let mut invalid = status(422, "Invalid", "ConfigMap is invalid");
    invalid["details"] = json!({"causes": [{"field": "data", "reason": "FieldValueForbidden", "message": "immutable"}]});
    h.host.reply(422, invalid);
    h.syncer.sync(&key()).await.unwrap();
    assert_eq!(h.host.calls(), [format!("PUT {}", configmap_path())]);
    let body = h.host.sent()[0].body.clone().unwrap();
    assert_eq!(body["metadata"]["resourceVersion"], "3");
    assert_eq!(body["data"]["mode"], "b");
    let decisions = h.decisions();
    assert_eq!(actions(&decisions), [DecisionAction::Skip]);
    assert!(
        decisions[0].reason.contains("refused to change data"),
        "{}",
        decisions[0].reason
    );
    h.syncer.sync(&key()).await.unwrap();
    assert_eq!(h.host.calls().len(), 1, "{:?}", h.host.calls());
    assert!(h.decisions().is_empty());
}

#[tokio::test]
async fn a_create_that_fails_otherwise_is_an_error_and_sent_again() {
    let mut h = Harness::new::<ConfigMap>(PodSettings::default());
    h.tenant_has(config_map("a"));
    h.host
        .reply(500, status(500, "InternalError", "etcd timeout"))
        .reply_with(echo(1));
    assert!(h.syncer.sync(&key()).await.is_err());
    h.syncer.sync(&key()).await.unwrap();
    assert_eq!(
        h.host.calls(),
        [
            format!("POST {}", configmaps()),
            format!("POST {}", configmaps())
        ]
    );
    assert_eq!(actions(&h.decisions()), [DecisionAction::Create]);
}

// --- 409: re-read and re-planned ----------------------------------------------

#[tokio::test]
async fn a_create_answered_409_reads_the_name_and_updates_our_own_copy() {
    let mut h = Harness::new::<ConfigMap>(PodSettings::default());
    // Our cache has not seen our own older copy yet.
    h.tenant_has(config_map("b"));
    h.host
        .reply(
            409,
            status(409, "AlreadyExists", "configmaps already exists"),
        )
        .reply(200, stored_copy(&config_map("a"), "8"))
        .reply_with(echo(2));
    h.syncer.sync(&key()).await.unwrap();
    assert_eq!(
        h.host.calls(),
        [
            format!("POST {}", configmaps()),
            format!("GET {}", configmap_path()),
            format!("PUT {}", configmap_path()),
        ]
    );
    let update = h.host.sent()[2].body.clone().unwrap();
    assert_eq!(
        update["metadata"]["resourceVersion"], "8",
        "the version read"
    );
    assert_eq!(update["data"]["mode"], "b");
    assert_eq!(actions(&h.decisions()), [DecisionAction::Update]);
}

#[tokio::test]
async fn a_create_answered_409_by_a_foreign_object_is_a_skip_without_a_write() {
    let mut h = Harness::new::<ConfigMap>(PodSettings::default());
    h.tenant_has(config_map("a"));
    let foreign = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": host_name_of(&key()), "namespace": HOST_NAMESPACE, "resourceVersion": "4", "uid": "theirs"},
        "data": {"mode": "theirs"},
    });
    h.host
        .reply(
            409,
            status(409, "AlreadyExists", "configmaps already exists"),
        )
        .reply(200, foreign);
    h.syncer.sync(&key()).await.unwrap();
    assert_eq!(
        h.host.calls(),
        [
            format!("POST {}", configmaps()),
            format!("GET {}", configmap_path())
        ]
    );
    let decisions = h.decisions();
    assert_eq!(actions(&decisions), [DecisionAction::Skip]);
    assert!(
        decisions[0].reason.contains("not managed by tenantplane"),
        "{}",
        decisions[0].reason
    );
}

#[tokio::test]
async fn a_second_409_after_the_re_plan_is_an_error_not_a_loop() {
    let mut h = Harness::new::<ConfigMap>(PodSettings::default());
    h.tenant_has(config_map("a"));
    // Gone again when read: the re-plan creates, and that create conflicts too.
    h.host
        .reply(
            409,
            status(409, "AlreadyExists", "configmaps already exists"),
        )
        .reply(404, status(404, "NotFound", "not found"))
        .reply(
            409,
            status(409, "AlreadyExists", "configmaps already exists"),
        );
    assert!(h.syncer.sync(&key()).await.is_err());
    assert_eq!(
        h.host.calls(),
        [
            format!("POST {}", configmaps()),
            format!("GET {}", configmap_path()),
            format!("POST {}", configmaps()),
        ]
    );
    assert!(h.decisions().is_empty());
}

// --- delete: a 404 is done, and a delete is sent once --------------------------

#[tokio::test]
async fn a_delete_answered_404_counts_as_done_and_is_not_sent_again() {
    let mut h = Harness::new::<ConfigMap>(PodSettings::default());
    // The tenant object is gone; the host cache still shows our copy.
    h.host_has(stored_copy(&config_map("a"), "3"));
    h.host.reply(404, status(404, "NotFound", "not found"));
    h.syncer.sync(&key()).await.unwrap();
    assert_eq!(h.host.calls(), [format!("DELETE {}", configmap_path())]);
    let body = h.host.sent()[0].body.clone().unwrap();
    assert_eq!(
        body["preconditions"]["uid"], "host-uid",
        "exactly the copy read"
    );
    // Nothing was deleted by us: no decision.
    assert!(h.decisions().is_empty());
    // The watch has not caught up: the next pass does not ask again.
    h.syncer.sync(&key()).await.unwrap();
    assert_eq!(h.host.calls().len(), 1, "{:?}", h.host.calls());
}

#[tokio::test]
async fn a_delete_is_recorded_once_and_not_sent_again_while_the_copy_terminates() {
    let mut h = Harness::new::<ConfigMap>(PodSettings::default());
    h.host_has(stored_copy(&config_map("a"), "3"));
    h.host.reply(200, status(200, "Success", ""));
    h.syncer.sync(&key()).await.unwrap();
    h.syncer.sync(&key()).await.unwrap();
    assert_eq!(h.host.calls(), [format!("DELETE {}", configmap_path())]);
    assert_eq!(actions(&h.decisions()), [DecisionAction::Delete]);
}

#[tokio::test]
async fn a_delete_that_fails_is_an_error_and_sent_again() {
    let mut h = Harness::new::<ConfigMap>(PodSettings::default());
    h.host_has(stored_copy(&config_map("a"), "3"));
    h.host
        .reply(500, status(500, "InternalError", "etcd timeout"))
        .reply(404, status(404, "NotFound", "not found"));
    assert!(h.syncer.sync(&key()).await.is_err());
    h.syncer.sync(&key()).await.unwrap();
    h.syncer.sync(&key()).await.unwrap();
    assert_eq!(
        h.host.calls(),
        [
            format!("DELETE {}", configmap_path()),
            format!("DELETE {}", configmap_path())
        ]
    );
    assert!(h.decisions().is_empty());
}

// --- outage bound: a host that does not answer holds a tenant Pod so long ------

fn pod_key() -> Key {
    ("default".into(), "web".into())
}

fn terminating_pod() -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": "web", "namespace": "default", "uid": "pod-uid", "resourceVersion": "5",
            "finalizers": [FINALIZER, "example.com/other"],
            "deletionTimestamp": "2026-01-01T00:00:00Z",
            "deletionGracePeriodSeconds": 30,
        },
        "spec": {"containers": [{"name": "app", "image": "nginx"}]},
    })
}

fn host_pod() -> Value {
    let key = pod_key();
    let name = host_name_of(&key);
    let mapping = reverse_mapping(
        &SourceName {
            name: &key.1,
            virtual_namespace: &key.0,
            tenant: TENANT,
        },
        &GroupKind::new("", "Pod"),
        Some("pod-uid"),
    );
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": name, "namespace": HOST_NAMESPACE, "uid": "host-pod-uid",
            "labels": mapping.labels, "annotations": mapping.annotations,
        },
        "spec": {"containers": [{"name": "app", "image": "nginx"}]},
    })
}

#[tokio::test(start_paused = true)]
async fn a_pod_waits_for_an_unreachable_host_only_up_to_the_bound() {
    let bound = Duration::from_secs(120);
    let mut h = Harness::new::<Pod>(PodSettings {
        host_unreachable_release: bound,
        ..PodSettings::default()
    });
    h.tenant_has(terminating_pod());
    h.host_has(host_pod());
    let host_pod_path = format!(
        "/api/v1/namespaces/{HOST_NAMESPACE}/pods/{}",
        host_name_of(&pod_key())
    );
    h.host.unreachable().unreachable().unreachable();
    // The host does not answer: the tenant Pod keeps its finalizer (an error, retried).
    assert!(h.syncer.sync(&pod_key()).await.is_err());
    tokio::time::advance(bound - Duration::from_secs(1)).await;
    assert!(h.syncer.sync(&pod_key()).await.is_err());
    assert!(h.tenant.calls().is_empty(), "{:?}", h.tenant.calls());
    // Past the bound: released without its host copy, and said so.
    tokio::time::advance(Duration::from_secs(1)).await;
    h.tenant.reply(200, terminating_pod());
    h.syncer.sync(&pod_key()).await.unwrap();
    assert_eq!(h.host.calls(), vec![format!("DELETE {host_pod_path}"); 3]);
    let delete = h.host.sent()[0].body.clone().unwrap();
    assert_eq!(delete["preconditions"]["uid"], "host-pod-uid");
    assert_eq!(delete["gracePeriodSeconds"], 30);
    assert_eq!(
        h.tenant.calls(),
        ["PATCH /api/v1/namespaces/default/pods/web"]
    );
    let patch = h.tenant.sent()[0].body.clone().unwrap();
    assert_eq!(
        patch["metadata"]["finalizers"],
        json!(["example.com/other"]),
        "only our finalizer goes"
    );
    let decisions = h.decisions();
    assert_eq!(actions(&decisions), [DecisionAction::Skip]);
    assert!(
        decisions[0]
            .reason
            .contains("has not answered for 120s (bound 120s)"),
        "{}",
        decisions[0].reason
    );
}

#[tokio::test(start_paused = true)]
async fn a_host_that_answers_again_starts_the_bound_afresh() {
    let bound = Duration::from_secs(120);
    let mut h = Harness::new::<Pod>(PodSettings {
        host_unreachable_release: bound,
        ..PodSettings::default()
    });
    h.tenant_has(terminating_pod());
    h.host_has(host_pod());
    h.host
        .unreachable()
        .reply(500, status(500, "InternalError", "etcd timeout"))
        // It answers: the host Pod is deleted (terminating).
        .reply(200, host_pod())
        .unreachable();
    assert!(h.syncer.sync(&pod_key()).await.is_err());
    tokio::time::advance(Duration::from_secs(100)).await;
    // A 5xx is the host not answering too.
    assert!(h.syncer.sync(&pod_key()).await.is_err());
    tokio::time::advance(Duration::from_secs(10)).await;
    h.syncer.sync(&pod_key()).await.unwrap();
    assert_eq!(actions(&h.decisions()), [DecisionAction::Delete]);
    // Down again 20 s later: 130 s since it first failed, but only just since it
    // last answered, so the tenant Pod is kept.
    tokio::time::advance(Duration::from_secs(20)).await;
    assert!(h.syncer.sync(&pod_key()).await.is_err());
    assert!(h.tenant.calls().is_empty(), "{:?}", h.tenant.calls());
    assert_eq!(h.host.calls().len(), 4);
}
