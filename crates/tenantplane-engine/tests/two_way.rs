//! fromHost and bidirectional sync against real API servers: host objects shown
//! read-only in the tenant, a custom resource's spec down and status up, conflicts
//! settled per policy, direction switches that delete nothing, and no write loops.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use crate::harness::*;
use kube::api::{DynamicObject, Patch, PatchParams};
use kube::{Api, Client};
use serde_json::{Value, json};
use tenantplane_api::{ConflictPolicy, ConflictRecord, ConflictResolution, SyncDecision};
use tenantplane_core::three_way::history_of;
use tenantplane_testenv::gadget_crd;

fn resource(api_version: &str, kind: &str, direction: &str) -> Value {
    json!({"apiVersion": api_version, "kind": kind, "direction": direction})
}

fn policy_with(name: &str, conflict_policy: &str, resources: Vec<Value>) -> Value {
    json!({"apiVersion": "tenantplane.io/v1alpha1", "kind": "SyncPolicy", "metadata": {"name": name},
           "spec": {"conflictPolicy": conflict_policy,
                    "driftDetection": {"enabled": true, "interval": "2s"},
                    "explain": {"recordDecisions": true, "retain": 200},
                    "resources": resources}})
}

fn gadgets(client: &Client, ns: &str) -> Api<DynamicObject> {
    dynamic(client, "example.com/v1", "Gadget", Some(ns))
}

async fn set_status(api: &Api<DynamicObject>, name: &str, status: Value) {
    api.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": status})),
    )
    .await
    .unwrap();
}

/// Decisions of TenantCluster `dev` about tenant object `name` whose reason contains `text`.
async fn decisions_about(h: &Harness, name: &str, text: &str) -> Vec<Value> {
    h.decisions("dev")
        .await
        .into_iter()
        .filter(|d| {
            d["tenant"]["name"] == name && d["reason"].as_str().unwrap_or("").contains(text)
        })
        .collect()
}

#[tokio::test]
async fn host_classes_and_a_mapped_configmap_appear_read_only_in_the_tenant() {
    let h = Harness::start().await;
    create_namespace(&h.host, "shared").await;
    create(
        &h.host,
        json!({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
        "metadata": {"name": "fast", "labels": {"tier": "ssd"}},
        "provisioner": "example.com/csi", "parameters": {"type": "ssd"}}),
    )
    .await;
    create(
        &h.host,
        json!({"apiVersion": "networking.k8s.io/v1", "kind": "IngressClass",
        "metadata": {"name": "public"}, "spec": {"controller": "example.com/ingress"}}),
    )
    .await;
    create(
        &h.host,
        configmap("shared", "ca-bundle", json!({"ca.crt": "PEM-1"})),
    )
    .await;
    create(&h.host, json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "registry", "namespace": "shared"}, "stringData": {"token": "s3cret"}})).await;
    let mut configmaps_up = resource("v1", "ConfigMap", "fromHost");
    configmaps_up["mappings"] = json!(["shared/ca-bundle -> default/ca"]);
    let mut secrets_up = resource("v1", "Secret", "fromHost");
    secrets_up["mappings"] = json!(["shared/registry -> default/registry"]);
    create(
        &h.host,
        policy_with(
            "up",
            "manual",
            vec![
                resource("v1", "ConfigMap", "toHost"),
                resource("storage.k8s.io/v1", "StorageClass", "fromHost"),
                resource("networking.k8s.io/v1", "IngressClass", "fromHost"),
                configmaps_up,
                secrets_up,
            ],
        ),
    )
    .await;
    let controller = Controller::start(&h.host).await;
    h.create_dev_with("fast", "up").await;

    // The classes appear under their own names, naming their host source.
    let classes = dynamic(&h.tenant, "storage.k8s.io/v1", "StorageClass", None);
    let fast = wait_for_that(&classes, "fast", "StorageClass fast in the tenant", |_| {
        true
    })
    .await;
    assert_eq!(fast.data["provisioner"], "example.com/csi");
    assert_eq!(fast.metadata.labels.as_ref().unwrap()["tier"], "ssd");
    assert_eq!(
        fast.metadata.annotations.as_ref().unwrap()["tenantplane.io/host-source"],
        "StorageClass.storage.k8s.io fast"
    );
    let ingress_classes = dynamic(&h.tenant, "networking.k8s.io/v1", "IngressClass", None);
    wait_for(&ingress_classes, "public").await;

    // A tenant edit is reverted, a tenant delete undone, and the decision says why.
    classes
        .patch(
            "fast",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"tier": "mine"}}})),
        )
        .await
        .unwrap();
    wait_for_that(&classes, "fast", "the tenant's label edit reverted", |o| {
        o.metadata
            .labels
            .as_ref()
            .is_some_and(|l| l.get("tier").is_some_and(|t| t == "ssd"))
    })
    .await;
    let reverted = eventually("a decision about the revert", || async {
        decisions_about(&h, "fast", "the host wins")
            .await
            .into_iter()
            .next()
    })
    .await;
    assert_eq!(reverted["action"], "Update");
    assert!(
        reverted["reason"].as_str().unwrap().contains("read-only"),
        "{reverted}"
    );
    ingress_classes
        .delete("public", &Default::default())
        .await
        .unwrap();
    eventually("the deleted IngressClass is back", || {
        let api = ingress_classes.clone();
        async move {
            let o = api.get_opt("public").await.ok().flatten()?;
            o.metadata.deletion_timestamp.is_none().then_some(())
        }
    })
    .await;

    // The mapped ConfigMap appears in the tenant namespace and follows the host.
    let tenant_cms = h.tenant_api("v1", "ConfigMap", "default");
    let ca = wait_for_that(&tenant_cms, "ca", "mapped ConfigMap default/ca", |_| true).await;
    assert_eq!(ca.data["data"]["ca.crt"], "PEM-1");
    let host_cms = dynamic(&h.host, "v1", "ConfigMap", Some("shared"));
    host_cms
        .patch(
            "ca-bundle",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"ca.crt": "PEM-2"}})),
        )
        .await
        .unwrap();
    wait_for_that(
        &tenant_cms,
        "ca",
        "the host's new CA reaches the tenant",
        |o| o.data["data"]["ca.crt"] == "PEM-2",
    )
    .await;
    // The copy is the host's: the toHost ConfigMap syncer never sends it back.
    assert!(
        h.host_api("v1", "ConfigMap")
            .get_opt(&predicted("ca", "default", "dev"))
            .await
            .unwrap()
            .is_none(),
        "a fromHost copy was synced back to the host"
    );

    // A host Secret the profile does not name never crosses; the decision says so.
    let skip = eventually("a Skip for the host Secret", || async {
        decisions_about(&h, "registry", "fromHostSecrets")
            .await
            .into_iter()
            .next()
    })
    .await;
    assert_eq!(skip["action"], "Skip");
    assert!(
        h.tenant_api("v1", "Secret", "default")
            .get_opt("registry")
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        !skip.to_string().contains("s3cret"),
        "Secret data in a decision: {skip}"
    );

    // Converged: drift passes write nothing on either side.
    h.wait_synced("dev").await;
    controller.wait_passes("dev", 1).await;
    let host_before = h.host_server.request_counts().await.unwrap();
    let tenant_before = h.tenant_server.request_counts().await.unwrap();
    controller.wait_passes("dev", 3).await;
    let host_writes = h
        .host_server
        .request_counts()
        .await
        .unwrap()
        .since(&host_before);
    let tenant_writes = h
        .tenant_server
        .request_counts()
        .await
        .unwrap()
        .since(&tenant_before);
    for resource in ["storageclasses", "ingressclasses", "configmaps", "secrets"] {
        assert_eq!(
            host_writes.writes(Some(resource)),
            0,
            "host {resource}: {host_writes:?}"
        );
        assert_eq!(
            tenant_writes.writes(Some(resource)),
            0,
            "tenant {resource}: {tenant_writes:?}"
        );
    }

    // The host source goes: so does the copy.
    dynamic(&h.host, "storage.k8s.io/v1", "StorageClass", None)
        .delete("fast", &Default::default())
        .await
        .unwrap();
    wait_gone(&classes, "fast").await;
    controller.stop().await;
}

/// Starts the harness with Gadgets on both sides and TenantCluster `dev` on
/// SyncPolicy `gadgets` (Gadget in `direction`, conflicts per `conflict_policy`).
async fn gadget_harness(direction: &str, conflict_policy: &str) -> (Harness, Controller) {
    let h = Harness::start().await;
    install_crds(&h.host, vec![gadget_crd()]).await;
    install_crds(&h.tenant, vec![gadget_crd()]).await;
    create(
        &h.host,
        policy_with(
            "gadgets",
            conflict_policy,
            vec![
                resource("v1", "ConfigMap", "toHost"),
                resource("example.com/v1", "Gadget", direction),
            ],
        ),
    )
    .await;
    let controller = Controller::start(&h.host).await;
    h.create_dev_with("fast", "gadgets").await;
    (h, controller)
}

fn gadget(name: &str, size: i64) -> Value {
    json!({"apiVersion": "example.com/v1", "kind": "Gadget",
           "metadata": {"name": name, "namespace": "default", "labels": {"app": "demo"}},
           "spec": {"size": size}})
}

async fn set_spec(api: &Api<DynamicObject>, name: &str, size: i64) {
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"size": size}})),
    )
    .await
    .unwrap();
}

#[tokio::test]
async fn a_bidirectional_custom_resource_sends_spec_down_and_status_up_without_loops() {
    let (h, controller) = gadget_harness("bidirectional", "manual").await;
    let tenant = gadgets(&h.tenant, "default");
    let host = gadgets(&h.host, HOST_NS);
    let host_name = predicted("g1", "default", "dev");
    create(&h.tenant, gadget("g1", 1)).await;
    wait_for_that(&host, &host_name, "the tenant's Gadget on the host", |o| {
        o.data["spec"]["size"] == 1
    })
    .await;

    // A host operator reconciles: its status reaches the tenant.
    set_status(&host, &host_name, json!({"ready": true, "observedSize": 1})).await;
    wait_for_that(&tenant, "g1", "host status in the tenant", |o| {
        o.data["status"]["ready"] == true
    })
    .await;

    // Tenant spec changes flow down; a host edit of the tenant's spec is reverted.
    set_spec(&tenant, "g1", 2).await;
    wait_for_that(&host, &host_name, "tenant spec 2 on the host", |o| {
        o.data["spec"]["size"] == 2
    })
    .await;
    set_spec(&host, &host_name, 9).await;
    wait_for_that(&host, &host_name, "the host's spec edit reverted", |o| {
        o.data["spec"]["size"] == 2
    })
    .await;
    // A tenant status edit is reverted too: status is the host's.
    set_status(&tenant, "g1", json!({"ready": false})).await;
    wait_for_that(&tenant, "g1", "the tenant's status edit reverted", |o| {
        o.data["status"]["ready"] == true
    })
    .await;

    // Converged: several drift passes write nothing on either side (no ping-pong),
    // and do not even plan: both sides are at the versions of the last quiet pass.
    h.wait_synced("dev").await;
    controller.wait_passes("dev", 1).await;
    let host_before = h.host_server.request_counts().await.unwrap();
    let tenant_before = h.tenant_server.request_counts().await.unwrap();
    let planned_before = controller.metrics.two_way_passes_of("planned");
    let unchanged_before = controller.metrics.two_way_passes_of("unchanged");
    controller.wait_passes("dev", 3).await;
    assert_eq!(
        controller.metrics.two_way_passes_of("planned"),
        planned_before,
        "an unchanged object was planned again"
    );
    assert!(controller.metrics.two_way_passes_of("unchanged") > unchanged_before);
    let host_writes = h
        .host_server
        .request_counts()
        .await
        .unwrap()
        .since(&host_before);
    let tenant_writes = h
        .tenant_server
        .request_counts()
        .await
        .unwrap()
        .since(&tenant_before);
    assert_eq!(host_writes.writes(Some("gadgets")), 0, "{host_writes:?}");
    assert_eq!(
        tenant_writes.writes(Some("gadgets")),
        0,
        "{tenant_writes:?}"
    );

    // The tenant deletes it: the host copy goes too.
    tenant.delete("g1", &Default::default()).await.unwrap();
    wait_gone(&host, &host_name).await;
    controller.stop().await;
}

/// The conflict history of the host Gadget `host_name` in SyncDecision `dev`,
/// selected as `tenantplane why` selects it.
async fn conflict_history(h: &Harness, host_name: &str) -> Vec<ConflictRecord> {
    let status = Api::<SyncDecision>::namespaced(h.host.clone(), HOST_NS)
        .get_opt("dev")
        .await
        .unwrap()
        .and_then(|sd| sd.status)
        .unwrap_or_default();
    history_of(&status.conflicts, "Gadget", host_name)
        .map(|history| history.records.clone())
        .unwrap_or_default()
}

/// Waits until the history has `n` records and returns them.
async fn wait_history(h: &Harness, host_name: &str, n: usize) -> Vec<ConflictRecord> {
    eventually(&format!("{n} conflict records for {host_name}"), || async {
        let records = conflict_history(h, host_name).await;
        (records.len() >= n).then_some(records)
    })
    .await
}

/// Edits both sides while no controller runs, so both changed since the base.
async fn conflicting_edits(h: &Harness, controller: Controller, tenant_size: i64, host_size: i64) {
    controller.stop().await;
    set_spec(&gadgets(&h.tenant, "default"), "g1", tenant_size).await;
    set_spec(
        &gadgets(&h.host, HOST_NS),
        &predicted("g1", "default", "dev"),
        host_size,
    )
    .await;
}

#[tokio::test]
async fn conflicts_are_left_alone_under_manual_and_settled_under_tenant_wins() {
    let (h, controller) = gadget_harness("bidirectional", "manual").await;
    let tenant = gadgets(&h.tenant, "default");
    let host = gadgets(&h.host, HOST_NS);
    let host_name = predicted("g1", "default", "dev");
    create(&h.tenant, gadget("g1", 1)).await;
    wait_for_that(
        &host,
        &host_name,
        "the Gadget on the host with its base",
        |o| {
            o.metadata
                .annotations
                .as_ref()
                .is_some_and(|a| a.contains_key("tenantplane.io/sync-base"))
        },
    )
    .await;

    conflicting_edits(&h, controller, 3, 4).await;
    let controller = Controller::start(&h.host).await;
    let message = h
        .wait_condition(
            "dev",
            "Conflicted",
            "True",
            "Conflict",
            Duration::from_secs(30),
        )
        .await;
    assert!(message.contains("/spec/size"), "{message}");
    let skip = eventually("a Conflict decision", || async {
        decisions_about(&h, "g1", "Conflict:")
            .await
            .into_iter()
            .next()
    })
    .await;
    assert_eq!(skip["action"], "Skip");
    assert!(
        skip["reason"]
            .as_str()
            .unwrap()
            .contains("/spec/size is 3 in the tenant and 4 on the host"),
        "{skip}"
    );
    // The history keeps the conflict with both values.
    let history = wait_history(&h, &host_name, 1).await;
    assert_eq!(history[0].resolution, ConflictResolution::LeftAlone);
    assert_eq!(history[0].policy, ConflictPolicy::Manual);
    assert_eq!(history[0].fields, ["/spec/size"]);
    assert!(
        history[0]
            .detail
            .contains("/spec/size is 3 in the tenant and 4 on the host"),
        "{history:?}"
    );
    // Both sides keep their value over drift passes, and the repeats of the same
    // conflict add nothing to the history.
    controller.wait_passes("dev", 2).await;
    assert_eq!(tenant.get("g1").await.unwrap().data["spec"]["size"], 3);
    assert_eq!(host.get(&host_name).await.unwrap().data["spec"]["size"], 4);
    assert_eq!(conflict_history(&h, &host_name).await, history);

    // The tenant gives way: agreement again, the condition clears, well inside the
    // 30 s a synced TenantCluster waits for its next look (the engine wakes it).
    set_spec(&tenant, "g1", 4).await;
    h.wait_condition(
        "dev",
        "Conflicted",
        "False",
        "NoConflicts",
        Duration::from_secs(10),
    )
    .await;
    let history = wait_history(&h, &host_name, 2).await;
    assert_eq!(history[1].resolution, ConflictResolution::Resolved);
    assert_eq!(history[1].fields, ["/spec/size"]);

    // Under tenant-wins (a policy change restarts the engine, not the controller)
    // the tenant's value overwrites the host's, and the decision names what it overwrote.
    Api::<DynamicObject>::all_with(
        h.host.clone(),
        &kube::api::ApiResource::from_gvk(&kube::api::GroupVersionKind::gvk(
            "tenantplane.io",
            "v1alpha1",
            "SyncPolicy",
        )),
    )
    .patch(
        "gadgets",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"conflictPolicy": "tenant-wins"}})),
    )
    .await
    .unwrap();
    controller.wait_passes("dev", 2).await;
    conflicting_edits(&h, controller, 7, 8).await;
    let controller = Controller::start(&h.host).await;
    wait_for_that(&host, &host_name, "the tenant's 7 wins on the host", |o| {
        o.data["spec"]["size"] == 7
    })
    .await;
    let update = eventually("an Update naming the overwritten value", || async {
        decisions_about(&h, "g1", "the tenant's value overwrites the host's")
            .await
            .into_iter()
            .next()
    })
    .await;
    assert_eq!(update["action"], "Update");
    assert!(
        update["reason"]
            .as_str()
            .unwrap()
            .contains("/spec/size is 7 in the tenant and 8 on the host"),
        "{update}"
    );
    assert_eq!(tenant.get("g1").await.unwrap().data["spec"]["size"], 7);
    // The history has all three, newest last; the clean passes since add nothing.
    let history = wait_history(&h, &host_name, 3).await;
    controller.wait_passes("dev", 2).await;
    assert_eq!(conflict_history(&h, &host_name).await, history);
    let outcomes: Vec<_> = history.iter().map(|r| (r.resolution, r.policy)).collect();
    assert_eq!(
        outcomes,
        [
            (ConflictResolution::LeftAlone, ConflictPolicy::Manual),
            (ConflictResolution::Resolved, ConflictPolicy::Manual),
            (ConflictResolution::TenantWon, ConflictPolicy::TenantWins),
        ]
    );
    assert!(
        history[2]
            .detail
            .contains("/spec/size is 7 in the tenant and 8 on the host: the tenant's value overwrites the host's"),
        "{history:?}"
    );
    assert!(history[0].time.0 <= history[1].time.0 && history[1].time.0 <= history[2].time.0);
    // What `tenantplane why` prints for the object (kept for the README's example).
    println!("{}", serde_json::to_string_pretty(&history).unwrap());
    controller.stop().await;
}

#[tokio::test]
async fn switching_a_kinds_direction_takes_effect_at_once_and_deletes_nothing() {
    let (h, controller) = gadget_harness("toHost", "manual").await;
    let tenant = gadgets(&h.tenant, "default");
    let host = gadgets(&h.host, HOST_NS);
    let host_name = predicted("g1", "default", "dev");
    create(&h.tenant, gadget("g1", 1)).await;
    let copy = wait_for(&host, &host_name).await;
    set_status(&host, &host_name, json!({"ready": true})).await;
    let policies = dynamic(&h.host, "tenantplane.io/v1alpha1", "SyncPolicy", None);
    let switch = |direction: &'static str| {
        let policies = policies.clone();
        async move {
            policies
                .patch(
                    "gadgets",
                    &PatchParams::default(),
                    &Patch::Merge(json!({"spec": {"resources": [
                    {"apiVersion": "v1", "kind": "ConfigMap", "direction": "toHost"},
                    {"apiVersion": "example.com/v1", "kind": "Gadget", "direction": direction}]}})),
                )
                .await
                .unwrap();
        }
    };

    // toHost -> bidirectional: the existing copy is adopted, its status comes up.
    switch("bidirectional").await;
    wait_for_that(
        &tenant,
        "g1",
        "status in the tenant after the switch",
        |o| o.data["status"]["ready"] == true,
    )
    .await;
    // bidirectional -> toHost -> fromHost without mappings (refused by the engine):
    // the copy and the tenant object stay, whatever the direction.
    switch("toHost").await;
    controller.wait_passes("dev", 2).await;
    switch("fromHost").await;
    let message = h
        .wait_condition(
            "dev",
            "Synced",
            "False",
            "KindUnavailable",
            Duration::from_secs(30),
        )
        .await;
    assert!(message.contains("mappings"), "{message}");
    for _ in 0..2 {
        // Give the engine time to act wrongly, measured in passes of the ConfigMap kind.
        controller.wait_passes("dev", 1).await;
    }
    let still = host.get(&host_name).await.unwrap();
    assert_eq!(
        still.metadata.uid, copy.metadata.uid,
        "the host copy was deleted by a switch"
    );
    assert!(
        tenant.get_opt("g1").await.unwrap().is_some(),
        "the tenant object was deleted by a switch"
    );
    controller.stop().await;
}
