//! The sync engine against two real API servers (host and tenant).

// Tests assert by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::harness::*;
use kube::api::{DeleteParams, Patch, PatchParams};
use serde_json::json;

#[tokio::test]
async fn create_update_and_delete_reach_the_host_for_core_kinds_and_a_crd() {
    let h = Harness::start_on_shared_host().await;
    create_namespace(&h.tenant, "web").await;
    let controller = Controller::start_for(&h).await;
    h.create_dev().await;

    create(
        &h.tenant,
        configmap("web", "settings", json!({"color": "blue"})),
    )
    .await;
    create(
        &h.tenant,
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "db", "namespace": "web"},
                             "stringData": {"password": "hunter2"}}),
    )
    .await;
    create(&h.tenant, json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "api", "namespace": "web"},
                             "spec": {"ports": [{"port": 80}], "selector": {"app": "api"}}})).await;
    create(&h.tenant, json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "gizmo", "namespace": "web"},
                             "spec": {"size": 3}})).await;

    for (api_version, kind, name) in [
        ("v1", "ConfigMap", "settings"),
        ("v1", "Secret", "db"),
        ("v1", "Service", "api"),
        ("example.com/v1", "Widget", "gizmo"),
    ] {
        let api = h.host_api(api_version, kind);
        let host_name = predicted(name, "web", "dev");
        let copy = wait_for(&api, &host_name).await;
        let labels = copy.metadata.labels.clone().unwrap();
        assert_eq!(labels["tenantplane.io/tenant"], "dev");
        assert_eq!(labels["tenantplane.io/kind"], kind);
        let annotations = copy.metadata.annotations.clone().unwrap();
        assert_eq!(annotations["tenantplane.io/virtual-name"], name);
        assert!(annotations.contains_key("tenantplane.io/virtual-uid"));
    }
    let widget = h
        .host_api("example.com/v1", "Widget")
        .get(&predicted("gizmo", "web", "dev"))
        .await
        .unwrap();
    assert_eq!(widget.data["spec"]["size"], 3);

    // Update reaches the host.
    h.tenant_api("v1", "ConfigMap", "web")
        .patch(
            "settings",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"color": "green"}})),
        )
        .await
        .unwrap();
    let host_cms = h.host_api("v1", "ConfigMap");
    let host_name = predicted("settings", "web", "dev");
    wait_for_that(&host_cms, &host_name, "updated", |o| {
        o.data["data"]["color"] == "green"
    })
    .await;

    // Delete reaches the host.
    h.tenant_api("v1", "ConfigMap", "web")
        .delete("settings", &DeleteParams::default())
        .await
        .unwrap();
    wait_gone(&host_cms, &host_name).await;

    // Every action is a decision in the SyncDecision, which the TenantCluster owns.
    let sd_api = dynamic(
        &h.host,
        "tenantplane.io/v1alpha1",
        "SyncDecision",
        Some(&h.ns),
    );
    let decisions = eventually("decisions recorded", || {
        let api = sd_api.clone();
        async move {
            let sd = api.get("dev").await.ok()?;
            let d = sd.data["status"]["decisions"].as_array()?.clone();
            (d.iter().any(|d| d["action"] == "Delete")).then_some((sd, d))
        }
    })
    .await;
    let (sd, decisions) = decisions;
    assert_eq!(
        sd.metadata.owner_references.unwrap()[0].kind,
        "TenantCluster"
    );
    let actions: Vec<(String, String)> = decisions
        .iter()
        .map(|d| {
            (
                d["action"].as_str().unwrap().to_owned(),
                d["kind"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    for expected in [
        ("Create", "ConfigMap"),
        ("Create", "Secret"),
        ("Create", "Service"),
        ("Create", "Widget"),
        ("Update", "ConfigMap"),
        ("Delete", "ConfigMap"),
    ] {
        assert!(
            actions.contains(&(expected.0.into(), expected.1.into())),
            "{expected:?} missing from {actions:?}"
        );
    }
    let create = decisions
        .iter()
        .find(|d| d["action"] == "Create" && d["kind"] == "ConfigMap")
        .unwrap();
    assert_eq!(create["tenant"]["namespace"], "web");
    assert_eq!(create["tenant"]["name"], "settings");
    assert!(create["tenant"]["uid"].is_string());
    assert_eq!(create["host"]["namespace"], h.ns);
    assert_eq!(create["host"]["name"], host_name.as_str());
    assert!(create["reason"].as_str().unwrap().contains("synced toHost"));
    // No Secret data in any decision.
    let all = serde_json::to_string(&decisions).unwrap();
    assert!(!all.contains("hunter2"));

    h.wait_synced("dev").await;
    controller.stop().await;
}

#[tokio::test]
async fn a_foreign_object_in_the_target_name_is_skipped_and_never_touched() {
    let h = Harness::start().await;
    let host_name = predicted("taken", "default", "dev");
    let foreign = create(
        &h.host,
        configmap(HOST_NS, &host_name, json!({"owner": "someone else"})),
    )
    .await;
    let controller = Controller::start(&h.host).await;
    h.create_dev().await;
    create(
        &h.tenant,
        configmap("default", "taken", json!({"owner": "tenant"})),
    )
    .await;
    create(&h.tenant, configmap("default", "free", json!({"k": "v"}))).await;

    // The free one is synced; the taken one is a Skip with the reason.
    let cms = h.host_api("v1", "ConfigMap");
    let free = predicted("free", "default", "dev");
    wait_for(&cms, &free).await;
    let sd_api = dynamic(
        &h.host,
        "tenantplane.io/v1alpha1",
        "SyncDecision",
        Some(HOST_NS),
    );
    let skip = eventually("a Skip decision", || {
        let api = sd_api.clone();
        async move {
            let sd = api.get("dev").await.ok()?;
            sd.data["status"]["decisions"]
                .as_array()?
                .iter()
                .find(|d| d["action"] == "Skip")
                .cloned()
        }
    })
    .await;
    assert_eq!(skip["tenant"]["name"], "taken");
    assert!(
        skip["reason"]
            .as_str()
            .unwrap()
            .contains("not managed by tenantplane"),
        "{skip}"
    );

    // Untouched, also after several drift passes (2s interval).
    h.wait_synced("dev").await;
    let before_passes = h.host_server.request_counts().await.unwrap();
    // Two more full passes of all four kinds (2s drift interval).
    controller.wait_passes("dev", 8).await;
    let after = cms.get(&host_name).await.unwrap();
    assert_eq!(
        after.metadata.resource_version,
        foreign.metadata.resource_version
    );
    assert_eq!(after.data["data"]["owner"], "someone else");
    let writes = h
        .host_server
        .request_counts()
        .await
        .unwrap()
        .since(&before_passes);
    assert_eq!(
        writes.writes(Some("configmaps")),
        0,
        "drift passes retried the refused write: {writes:?}"
    );
    let skips = dynamic(
        &h.host,
        "tenantplane.io/v1alpha1",
        "SyncDecision",
        Some(HOST_NS),
    )
    .get("dev")
    .await
    .unwrap()
    .data["status"]["decisions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["action"] == "Skip")
        .count();
    assert_eq!(skips, 1, "a pass with nothing new records nothing");
    controller.stop().await;
}

#[tokio::test]
async fn host_edits_and_deletions_are_restored() {
    let h = Harness::start_on_shared_host().await;
    let controller = Controller::start_for(&h).await;
    h.create_dev().await;
    create(
        &h.tenant,
        configmap("default", "app", json!({"mode": "prod"})),
    )
    .await;
    let cms = h.host_api("v1", "ConfigMap");
    let name = predicted("app", "default", "dev");
    wait_for(&cms, &name).await;

    cms.patch(
        &name,
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"mode": "hacked"}})),
    )
    .await
    .unwrap();
    wait_for_that(&cms, &name, "the host edit reverted", |o| {
        o.data["data"]["mode"] == "prod"
    })
    .await;

    let uid_before = cms.get(&name).await.unwrap().metadata.uid;
    cms.delete(&name, &DeleteParams::default()).await.unwrap();
    let recreated = wait_for(&cms, &name).await;
    assert_ne!(recreated.metadata.uid, uid_before);
    assert_eq!(recreated.data["data"]["mode"], "prod");
    controller.stop().await;
}

#[tokio::test]
async fn tricky_names_and_forged_labels() {
    let h = Harness::start_on_shared_host().await;
    for ns in ["c", "b-x-c", &"n".repeat(63)] {
        create_namespace(&h.tenant, ns).await;
    }
    let controller = Controller::start_for(&h).await;
    h.create_dev().await;
    let long = "l".repeat(253);
    let cases = [
        ("default", long.as_str()),
        ("default", "app.config"),
        ("default", "app-config"),
        ("c", "a-x-b"),
        ("b-x-c", "a"),
    ];
    for (ns, name) in cases {
        create(
            &h.tenant,
            configmap(ns, name, json!({"who": format!("{ns}/{name}")})),
        )
        .await;
    }
    create(&h.tenant, json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "forger", "namespace": "default",
        "labels": {"tenantplane.io/tenant": "prod", "app.kubernetes.io/managed-by": "helm"},
        "annotations": {"tenantplane.io/virtual-name": "someone-else"}}})).await;
    let long_ns = "n".repeat(63);
    create(&h.tenant, json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": format!("s{}", "v".repeat(62)), "namespace": long_ns},
        "spec": {"ports": [{"port": 80}]}})).await;

    let cms = h.host_api("v1", "ConfigMap");
    for (ns, name) in cases {
        let host_name = predicted(name, ns, "dev");
        assert!(host_name.len() <= 63);
        let copy = wait_for(&cms, &host_name).await;
        assert_eq!(
            copy.data["data"]["who"],
            format!("{ns}/{name}"),
            "each source has its own host object"
        );
    }
    let forger = eventually("forger synced", || {
        let api = cms.clone();
        async move {
            api.get_opt(&predicted("forger", "default", "dev"))
                .await
                .ok()
                .flatten()
        }
    })
    .await;
    let labels = forger.metadata.labels.unwrap();
    assert_eq!(labels["tenantplane.io/tenant"], "dev");
    assert_eq!(labels["app.kubernetes.io/managed-by"], "tenantplane");
    assert_eq!(
        forger.metadata.annotations.unwrap()["tenantplane.io/virtual-name"],
        "forger"
    );
    let svc_name = predicted(&format!("s{}", "v".repeat(62)), &long_ns, "dev");
    let services = h.host_api("v1", "Service");
    wait_for(&services, &svc_name).await;
    controller.stop().await;
}

#[tokio::test]
async fn restarting_the_controller_with_nothing_changed_makes_zero_host_writes() {
    let h = Harness::start().await;
    let controller = Controller::start(&h.host).await;
    h.create_dev().await;
    for i in 0..30 {
        create(
            &h.tenant,
            configmap("default", &format!("cm-{i}"), json!({"i": i.to_string()})),
        )
        .await;
    }
    create(&h.tenant, json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "svc", "namespace": "default"},
        "spec": {"type": "NodePort", "ports": [{"port": 80}]}})).await;
    create(&h.tenant, json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "namespace": "default"},
        "stringData": {"a": "b"}})).await;
    let cms = h.host_api("v1", "ConfigMap");
    eventually("all synced", || {
        let api = cms.clone();
        async move {
            let list = api.list(&Default::default()).await.ok()?;
            (list
                .items
                .iter()
                .filter(|o| {
                    o.metadata
                        .name
                        .as_deref()
                        .is_some_and(|n| n.starts_with("cm-"))
                })
                .count()
                == 30)
                .then_some(())
        }
    })
    .await;
    // The Service and the Secret were created last: wait for their copies too, or
    // the restarted engine may be the one that creates them.
    wait_for(
        &h.host_api("v1", "Service"),
        &predicted("svc", "default", "dev"),
    )
    .await;
    wait_for(
        &h.host_api("v1", "Secret"),
        &predicted("s", "default", "dev"),
    )
    .await;
    h.wait_synced("dev").await;
    // Stopping flushes the decision log, so nothing is left to write later.
    controller.stop().await;

    let before = h.host_server.request_counts().await.unwrap();
    let mut controller = Controller::start(&h.host).await;
    // The restarted engine lists both sides and completes two full passes of all
    // four kinds (2s drift interval) ...
    controller.wait_passes("dev", 8).await;
    let after = h.host_server.request_counts().await.unwrap();
    let diff = after.since(&before);
    assert_eq!(
        diff.writes(None),
        0,
        "a restart with nothing changed wrote to the host: {diff:?}"
    );
    assert!(
        controller.decisions.try_recv().is_err(),
        "a restart with nothing changed recorded a decision"
    );
    controller.stop().await;
}

/// A create the host API server refuses (here: a quota of no ConfigMaps, 403) is
/// recorded once and
/// not sent again on later drift passes; a change to the tenant object is tried.
#[tokio::test]
async fn a_create_the_host_refuses_is_not_sent_again_until_the_tenant_object_changes() {
    let h = Harness::start().await;
    create(
        &h.host,
        json!({"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "no-configmaps", "namespace": HOST_NS},
               "spec": {"hard": {"count/configmaps": "0"}}}),
    )
    .await;
    // The status a quota controller would compute (none runs here).
    h.host_api("v1", "ResourceQuota")
        .patch_status(
            "no-configmaps",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"hard": {"count/configmaps": "0"}, "used": {"count/configmaps": "0"}}})),
        )
        .await
        .unwrap();
    let controller = Controller::start(&h.host).await;
    h.create_dev().await;
    create(&h.tenant, configmap("default", "app", json!({"k": "v1"}))).await;
    let refused = eventually("the refusal recorded", || async {
        h.decisions("dev").await.into_iter().find(|d| {
            d["tenant"]["name"] == "app"
                && d["action"] == "Skip"
                && d["reason"]
                    .as_str()
                    .is_some_and(|r| r.contains("the host API server refused it"))
        })
    })
    .await;
    assert!(
        refused["reason"].as_str().unwrap().contains("quota"),
        "{refused}"
    );
    let posts = || async {
        h.host_server
            .request_counts()
            .await
            .unwrap()
            .writes(Some("configmaps"))
    };
    let after_refusal = posts().await;
    controller.wait_passes("dev", 3).await;
    assert_eq!(
        posts().await,
        after_refusal,
        "the refused create was sent again on a drift pass"
    );

    // The tenant changes it: one new attempt (refused again, and recorded again).
    merge_patch(
        &h.tenant_api("v1", "ConfigMap", "default"),
        "app",
        json!({"data": {"k": "v2"}}),
    )
    .await;
    eventually("the changed object tried", || async {
        (posts().await > after_refusal).then_some(())
    })
    .await;
    controller.stop().await;
}

/// A host copy whose delete was sent but which stays (someone else's finalizer
/// holds it, terminating) is not deleted again by later events or drift passes;
/// once its holder lets go, it is gone.
#[tokio::test]
async fn a_delete_already_sent_is_not_sent_again_while_the_copy_terminates() {
    let h = Harness::start().await;
    let controller = Controller::start(&h.host).await;
    h.create_dev().await;
    create(&h.tenant, configmap("default", "app", json!({"k": "v"}))).await;
    let copies = h.host_api("v1", "ConfigMap");
    let name = predicted("app", "default", "dev");
    wait_for(&copies, &name).await;
    merge_patch(
        &copies,
        &name,
        json!({"metadata": {"finalizers": ["example.com/hold"]}}),
    )
    .await;
    let deletes = || async {
        h.host_server
            .request_counts()
            .await
            .unwrap()
            .requests("DELETE", "configmaps")
    };
    let before = deletes().await;
    h.tenant_api("v1", "ConfigMap", "default")
        .delete("app", &DeleteParams::default())
        .await
        .unwrap();
    wait_for_that(&copies, &name, "the copy terminating", |o| {
        o.metadata.deletion_timestamp.is_some()
    })
    .await;
    // Its terminating state is a host event, and drift passes follow.
    controller.wait_passes("dev", 3).await;
    assert_eq!(
        deletes().await,
        before + 1,
        "the delete of the terminating copy was sent again"
    );
    let recorded = h
        .decisions("dev")
        .await
        .into_iter()
        .filter(|d| d["action"] == "Delete" && d["host"]["name"] == name.as_str())
        .count();
    assert_eq!(recorded, 1, "one Delete decision for one delete");

    // Its holder lets go: the copy is gone, nothing more sent.
    merge_patch(&copies, &name, json!({"metadata": {"finalizers": null}})).await;
    wait_gone(&copies, &name).await;
    assert_eq!(deletes().await, before + 1);
    controller.stop().await;
}
