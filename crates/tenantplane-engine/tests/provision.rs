//! The TenantCluster lifecycle against a real API server: the isolation boundary
//! (apply, no-op, drift, profile change, foreign objects) and the provisioned
//! control plane in both distros (objects, readiness with the test playing the kubelet, kubeconfig,
//! refusals, cleanup with kube-controller-manager's namespace controller).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;

use crate::harness::{
    HOST_NS, create_namespace, eventually, play_statefulset_and_kubelet, pooled_host,
};
use base64::Engine as _;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{
    LimitRange, Namespace, PersistentVolumeClaim, Pod, ResourceQuota, Secret, Service,
};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::{DeleteParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};
use tenantplane_api::{IsolationProfile, TenantCluster};
use tenantplane_core::isolation::compile_for;
use tenantplane_engine::converge::ObjectAction;
use tenantplane_engine::isolation::apply_isolation;
use tenantplane_engine::provision::{
    ControlPlaneState, cleanup_control_plane, ensure_control_plane, in_cluster_endpoint,
};
use tenantplane_testenv::{ApiServer, PooledServer, TestEnv};

const CP_NS: &str = "team-dev-cp";

/// A host with tenantplane's CRDs, handed on from test to test (see [`pooled_host`]).
async fn server() -> (TestEnv, PooledServer, Client) {
    let env = TestEnv::start_shared().await.expect("etcd");
    let server = pooled_host().await;
    let client = server.client().await.expect("client");
    create_namespace(&client, HOST_NS).await;
    (env, server, client)
}

async fn create_tc(host: &Client, name: &str, spec: Value) -> TenantCluster {
    let mut full = json!({
        "isolationProfileRef": {"name": "p"},
        "syncPolicyRef": {"name": "default"},
    });
    full.as_object_mut()
        .unwrap()
        .extend(spec.as_object().unwrap().clone());
    let tc: TenantCluster = serde_json::from_value(json!({
        "apiVersion": "tenantplane.io/v1alpha1", "kind": "TenantCluster",
        // The controller's finalizer: deletion waits for cleanup, as in production.
        "metadata": {"name": name, "namespace": HOST_NS, "finalizers": ["tenantplane.io/cleanup"]},
        "spec": full,
    }))
    .unwrap();
    Api::<TenantCluster>::namespaced(host.clone(), HOST_NS)
        .create(&PostParams::default(), &tc)
        .await
        .expect("TenantCluster")
}

fn profile(level: &str) -> IsolationProfile {
    serde_json::from_value(json!({
        "apiVersion": "tenantplane.io/v1alpha1", "kind": "IsolationProfile",
        "metadata": {"name": "p"}, "spec": {"level": level},
    }))
    .unwrap()
}

fn json_of<T: serde::Serialize>(v: &T) -> Value {
    serde_json::to_value(v).unwrap()
}

fn action(outcome: &tenantplane_engine::isolation::IsolationOutcome, kind: &str) -> ObjectAction {
    outcome
        .objects
        .iter()
        .find(|o| o.kind == kind)
        .unwrap_or_else(|| panic!("{kind} in {outcome}"))
        .action
}

async fn writes(server: &ApiServer, resources: &[&str]) -> u64 {
    let counts = server.request_counts().await.unwrap();
    resources.iter().map(|r| counts.writes(Some(r))).sum()
}

fn owned_by(meta: &ObjectMeta, tc: &TenantCluster) -> bool {
    meta.owner_references.as_ref().is_some_and(|refs| {
        refs.len() == 1
            && refs[0].uid == tc.uid().unwrap()
            && refs[0].kind == "TenantCluster"
            && refs[0].controller == Some(true)
    })
}

#[tokio::test]
async fn isolation_is_applied_once_corrected_changed_and_never_clobbers_foreign_objects() {
    let (_env, server, host) = server().await;
    // A label of the namespace's owner, which the boundary must leave alone.
    Api::<Namespace>::all(host.clone())
        .patch(
            HOST_NS,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"team": "dev"}}})),
        )
        .await
        .unwrap();
    let mut tc = create_tc(
        &host,
        "dev",
        json!({"controlPlane": {"external": {"kubeconfigSecretRef": {"name": "x"}}},
               "resources": {"cpu": "2", "memory": "4Gi"}}),
    )
    .await;
    let restricted = profile("restricted");
    let compiled = compile_for(&tc, &restricted.spec).unwrap();

    // First apply: the namespace labels and all three objects.
    let outcome = apply_isolation(&host, &tc, &restricted).await.unwrap();
    assert_eq!(outcome.writes, 4, "{outcome}");
    assert!(outcome.is_applied());
    assert_eq!(
        outcome.summary(),
        "Pod Security restricted; NetworkPolicy tenantplane-isolation-dev, ResourceQuota tenantplane-quota-dev, LimitRange tenantplane-limits-dev"
    );
    let ns = Api::<Namespace>::all(host.clone())
        .get(HOST_NS)
        .await
        .unwrap();
    let labels = ns.labels();
    assert_eq!(labels["team"], "dev");
    for mode in ["enforce", "audit", "warn"] {
        assert_eq!(
            labels[&format!("pod-security.kubernetes.io/{mode}")],
            "restricted"
        );
        assert_eq!(
            labels[&format!("pod-security.kubernetes.io/{mode}-version")],
            "latest"
        );
    }
    assert!(
        ns.metadata.owner_references.is_none(),
        "the namespace is not ours"
    );
    let nps: Api<NetworkPolicy> = Api::namespaced(host.clone(), HOST_NS);
    let np = nps.get("tenantplane-isolation-dev").await.unwrap();
    assert!(owned_by(&np.metadata, &tc));
    assert_eq!(
        json_of(&np.spec),
        json_of(&compiled.network_policy.as_ref().unwrap().spec)
    );
    assert_eq!(np.labels()["tenantplane.io/component"], "isolation");
    let quotas: Api<ResourceQuota> = Api::namespaced(host.clone(), HOST_NS);
    let quota = quotas.get("tenantplane-quota-dev").await.unwrap();
    assert!(owned_by(&quota.metadata, &tc));
    assert_eq!(
        json_of(&quota.spec.as_ref().unwrap().hard),
        json!({"limits.cpu": "2", "limits.memory": "4Gi", "requests.cpu": "2", "requests.memory": "4Gi"})
    );
    let limits: Api<LimitRange> = Api::namespaced(host.clone(), HOST_NS);
    let lr = limits.get("tenantplane-limits-dev").await.unwrap();
    assert!(owned_by(&lr.metadata, &tc));
    assert_eq!(
        json_of(&lr.spec.as_ref().unwrap().limits[0].default),
        json!({"cpu": "1", "memory": "512Mi"})
    );

    // Nothing changed: reads only, zero writes, as the server counts them.
    let before = server.request_counts().await.unwrap();
    let again = apply_isolation(&host, &tc, &restricted).await.unwrap();
    let after = server.request_counts().await.unwrap();
    assert_eq!(again.writes, 0, "{again}");
    assert_eq!(
        after.since(&before).writes(None),
        0,
        "{:?}",
        after.since(&before)
    );
    assert_eq!(again.summary(), outcome.summary());

    // Drift: someone opens all egress; the next apply puts the policy back.
    nps.patch(
        "tenantplane-isolation-dev",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"egress": [{}]}})),
    )
    .await
    .unwrap();
    let corrected = apply_isolation(&host, &tc, &restricted).await.unwrap();
    assert_eq!(action(&corrected, "NetworkPolicy"), ObjectAction::Updated);
    assert_eq!(corrected.writes, 1, "{corrected}");
    let np = nps.get("tenantplane-isolation-dev").await.unwrap();
    assert_eq!(
        json_of(&np.spec),
        json_of(&compiled.network_policy.as_ref().unwrap().spec)
    );

    // restricted -> baseline, and the memory cap removed: the LimitRange goes, the
    // Pod Security labels change, the quota loses its memory keys.
    tc.spec.resources.as_mut().unwrap().memory = None;
    let baseline = profile("baseline");
    let changed = apply_isolation(&host, &tc, &baseline).await.unwrap();
    assert_eq!(action(&changed, "Namespace"), ObjectAction::Updated);
    assert_eq!(action(&changed, "NetworkPolicy"), ObjectAction::Unchanged);
    assert_eq!(action(&changed, "ResourceQuota"), ObjectAction::Updated);
    assert_eq!(action(&changed, "LimitRange"), ObjectAction::Deleted);
    assert_eq!(changed.writes, 3, "{changed}");
    assert!(
        limits
            .get_opt("tenantplane-limits-dev")
            .await
            .unwrap()
            .is_none()
    );
    let ns = Api::<Namespace>::all(host.clone())
        .get(HOST_NS)
        .await
        .unwrap();
    assert_eq!(
        ns.labels()["pod-security.kubernetes.io/enforce"],
        "baseline"
    );
    assert_eq!(ns.labels()["team"], "dev");
    let quota = quotas.get("tenantplane-quota-dev").await.unwrap();
    assert_eq!(
        json_of(&quota.spec.as_ref().unwrap().hard),
        json!({"limits.cpu": "2", "requests.cpu": "2"})
    );
    assert_eq!(
        apply_isolation(&host, &tc, &baseline).await.unwrap().writes,
        0
    );

    // A foreign LimitRange under our name blocks that part of the boundary and is
    // never overwritten; with no caps left, our quota is deleted.
    let foreign: LimitRange = serde_json::from_value(json!({
        "metadata": {"name": "tenantplane-limits-dev", "labels": {"app.kubernetes.io/managed-by": "someone-else"}},
        "spec": {"limits": [{"type": "Container", "default": {"cpu": "3"}}]},
    }))
    .unwrap();
    limits
        .create(&PostParams::default(), &foreign)
        .await
        .unwrap();
    tc.spec.resources = None;
    let blocked = apply_isolation(&host, &tc, &restricted).await.unwrap();
    assert_eq!(action(&blocked, "LimitRange"), ObjectAction::Conflict);
    assert_eq!(action(&blocked, "ResourceQuota"), ObjectAction::Deleted);
    assert!(!blocked.is_applied());
    assert_eq!(blocked.reason(), "ForeignObject");
    assert!(
        blocked
            .summary()
            .contains("LimitRange tenantplane-limits-dev"),
        "{}",
        blocked.summary()
    );
    let lr = limits.get("tenantplane-limits-dev").await.unwrap();
    assert_eq!(
        json_of(&lr.spec.unwrap().limits[0].default),
        json!({"cpu": "3"})
    );
    assert!(lr.metadata.owner_references.is_none());
    assert!(
        quotas
            .get_opt("tenantplane-quota-dev")
            .await
            .unwrap()
            .is_none()
    );
}

fn ready_state(state: &ControlPlaneState) -> (&str, &str, Option<&str>) {
    match state {
        ControlPlaneState::Ready {
            kubeconfig_secret,
            endpoint,
            external_endpoint,
            ..
        } => (
            kubeconfig_secret.name.as_str(),
            endpoint.as_str(),
            external_endpoint.as_deref(),
        ),
        other => panic!("expected Ready, got {other:?}"),
    }
}

#[tokio::test]
async fn a_control_plane_is_provisioned_becomes_ready_and_is_cleaned_up() {
    let (env, server, host) = server().await;
    let _kcm = env
        .start_controller_manager(&server)
        .expect("kube-controller-manager");
    let spec = json!({
        "kubernetesVersion": "v1.31",
        "controlPlane": {
            "storage": {"storageClassName": "fast", "size": "10Gi"},
            "extraSANs": ["api.dev.example.com"],
            "expose": {"loadBalancer": {"enabled": true, "annotations": {"lb.example.com/internal": "true"}}},
        },
    });
    let tc = create_tc(&host, "dev", spec).await;

    let state = ensure_control_plane(&host, &tc).await.unwrap();
    let ControlPlaneState::Provisioning { message } = &state else {
        panic!("expected Provisioning, got {state:?}");
    };
    assert!(message.contains("team-dev-cp/dev-cp-0"), "{message}");

    // The namespace: ours, for team-dev, Pod Security baseline.
    let ns = Api::<Namespace>::all(host.clone())
        .get(CP_NS)
        .await
        .unwrap();
    let labels = ns.labels();
    assert_eq!(labels["tenantplane.io/control-plane-of"], HOST_NS);
    assert_eq!(labels["app.kubernetes.io/managed-by"], "tenantplane");
    for mode in ["enforce", "audit", "warn"] {
        assert_eq!(
            labels[&format!("pod-security.kubernetes.io/{mode}")],
            "baseline"
        );
    }

    // The StatefulSet.
    let sts_api: Api<StatefulSet> = Api::namespaced(host.clone(), CP_NS);
    let sts = sts_api.get("dev-cp").await.unwrap();
    let expected_labels: BTreeMap<String, String> = [
        ("app.kubernetes.io/managed-by", "tenantplane"),
        ("tenantplane.io/component", "control-plane"),
        ("tenantplane.io/control-plane-of", HOST_NS),
        ("tenantplane.io/tenant", "dev"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    assert_eq!(sts.labels(), &expected_labels);
    assert!(
        sts.metadata.owner_references.is_none(),
        "no cross-namespace owner"
    );
    let s = json_of(sts.spec.as_ref().unwrap());
    assert_eq!(s["replicas"], 1);
    assert_eq!(s["serviceName"], "dev-cp-headless");
    assert_eq!(
        s["template"]["metadata"]["labels"],
        json_of(&expected_labels)
    );
    let container = &s["template"]["spec"]["containers"][0];
    assert_eq!(container["image"], "rancher/k3s:v1.31.9-k3s1");
    let args: Vec<&str> = container["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert_eq!(args[0], "server");
    for expected in [
        "--disable-agent",
        "--disable=traefik,servicelb,metrics-server,local-storage,coredns",
        "--tls-san=dev-cp.team-dev-cp.svc",
        "--tls-san=api.dev.example.com",
        "--kube-apiserver-arg=token-auth-file=/etc/tenantplane/tokens.csv",
    ] {
        assert!(args.contains(&expected), "{expected} in {args:?}");
    }
    assert_eq!(
        container["readinessProbe"]["httpGet"],
        json!({"path": "/readyz", "port": 6443, "scheme": "HTTPS"})
    );
    let vct = &s["volumeClaimTemplates"][0];
    assert_eq!(vct["metadata"]["name"], "data");
    assert_eq!(vct["spec"]["storageClassName"], "fast");
    assert_eq!(vct["spec"]["resources"]["requests"]["storage"], "10Gi");
    assert_eq!(vct["spec"]["accessModes"], json!(["ReadWriteOnce"]));

    // The Services.
    let services: Api<Service> = Api::namespaced(host.clone(), CP_NS);
    let headless = services.get("dev-cp-headless").await.unwrap().spec.unwrap();
    assert_eq!(headless.cluster_ip.as_deref(), Some("None"));
    let cluster_ip = services.get("dev-cp").await.unwrap().spec.unwrap();
    assert_eq!(cluster_ip.type_.as_deref(), Some("ClusterIP"));
    assert_eq!(cluster_ip.ports.as_ref().unwrap()[0].port, 6443);
    assert_eq!(
        json_of(&cluster_ip.selector),
        json!({"tenantplane.io/component": "control-plane", "tenantplane.io/tenant": "dev"})
    );
    let lb = services.get("dev-cp-lb").await.unwrap();
    assert_eq!(lb.annotations()["lb.example.com/internal"], "true");
    assert_eq!(
        lb.spec.as_ref().unwrap().type_.as_deref(),
        Some("LoadBalancer")
    );

    // Unchanged: no writes to anything it manages.
    let managed = ["namespaces", "statefulsets", "services", "secrets"];
    let before = writes(&server, &managed).await;
    let state = ensure_control_plane(&host, &tc).await.unwrap();
    assert!(
        matches!(state, ControlPlaneState::Provisioning { .. }),
        "{state:?}"
    );
    assert_eq!(writes(&server, &managed).await, before);

    // The test plays the StatefulSet controller and the kubelet: pod Ready.
    play_statefulset_and_kubelet(&host, &sts).await;
    services
        .patch_status(
            "dev-cp-lb",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.10"}]}}}),
            ),
        )
        .await
        .unwrap();
    let state = ensure_control_plane(&host, &tc).await.unwrap();
    let (secret_name, endpoint, external) = ready_state(&state);
    assert_eq!(secret_name, "dev-kubeconfig");
    assert_eq!(endpoint, "https://dev-cp.team-dev-cp.svc:6443");
    assert_eq!(endpoint, in_cluster_endpoint("dev", HOST_NS));
    assert_eq!(external, Some("https://203.0.113.10:6443"));

    // The kubeconfig: the in-cluster Service, the CA k3s is started with, and the
    // admin token its API server is given.
    let secret = Api::<Secret>::namespaced(host.clone(), HOST_NS)
        .get("dev-kubeconfig")
        .await
        .unwrap();
    assert!(owned_by(&secret.metadata, &tc));
    let text = String::from_utf8(secret.data.as_ref().unwrap()["kubeconfig"].0.clone()).unwrap();
    let config = kube::config::Kubeconfig::from_yaml(&text).unwrap();
    let cluster = config.clusters[0].cluster.as_ref().unwrap();
    assert_eq!(cluster.server.as_deref(), Some(endpoint));
    let bootstrap = Api::<Secret>::namespaced(host.clone(), CP_NS)
        .get("dev-cp-bootstrap")
        .await
        .unwrap();
    let data = bootstrap.data.unwrap();
    let ca = base64::engine::general_purpose::STANDARD
        .decode(cluster.certificate_authority_data.as_ref().unwrap())
        .unwrap();
    assert_eq!(ca, data["server-ca.crt"].0);
    let token = String::from_utf8(data["admin-token"].0.clone()).unwrap();
    assert!(text.contains(&format!("token: {token}")));
    let tokens_csv = String::from_utf8(data["tokens.csv"].0.clone()).unwrap();
    // The admin, the syncer (its own identity, which the tenant's fromHost webhook
    // lets through), and the controller manager of distro k8s (default RBAC's user).
    let manager_token = String::from_utf8(data["controller-manager-token"].0.clone()).unwrap();
    let syncer_token = String::from_utf8(data["syncer-token"].0.clone()).unwrap();
    assert_ne!(manager_token, token);
    assert_ne!(syncer_token, token);
    assert_eq!(
        tokens_csv,
        format!(
            "{token},tenantplane-admin,tenantplane-admin,\"system:masters\"\n\
             {syncer_token},tenantplane-syncer,tenantplane-syncer,\"system:masters\"\n\
             {manager_token},system:kube-controller-manager,system:kube-controller-manager\n"
        )
    );
    assert_eq!(token.len(), 64);

    // The kubelet client certificate the API server presents to tenantplane's
    // kubelet endpoint: its key only in the bootstrap Secret (mounted into k3s), the
    // certificate alone in `dev-kubelet-client`, where the endpoint reads it.
    let kubelet_client = Api::<Secret>::namespaced(host.clone(), HOST_NS)
        .get("dev-kubelet-client")
        .await
        .unwrap();
    assert!(owned_by(&kubelet_client.metadata, &tc));
    let published = kubelet_client.data.unwrap();
    assert_eq!(
        published.keys().collect::<Vec<_>>(),
        ["tls.crt"],
        "only the certificate"
    );
    assert_eq!(published["tls.crt"].0, data["kubelet-client.crt"].0);
    assert!(String::from_utf8_lossy(&data["kubelet-client.key"].0).contains("PRIVATE KEY"));
    for expected in [
        "--kube-apiserver-arg=kubelet-client-certificate=/etc/tenantplane/kubelet-client/kubelet-client.crt",
        "--kube-apiserver-arg=kubelet-client-key=/etc/tenantplane/kubelet-client/kubelet-client.key",
    ] {
        assert!(args.contains(&expected), "{expected} in {args:?}");
    }

    // Ready and unchanged: still zero writes.
    let before = writes(&server, &managed).await;
    ready_state(&ensure_control_plane(&host, &tc).await.unwrap());
    assert_eq!(writes(&server, &managed).await, before);

    // A second tenant of the namespace shares the -cp namespace; cleaning up dev
    // removes dev's objects and keeps the namespace for qa.
    let qa = create_tc(&host, "qa", json!({})).await;
    ensure_control_plane(&host, &qa).await.unwrap();
    let tcs: Api<TenantCluster> = Api::namespaced(host.clone(), HOST_NS);
    tcs.delete("dev", &DeleteParams::default()).await.unwrap();
    let deleting = tcs.get("dev").await.unwrap();
    assert!(deleting.metadata.deletion_timestamp.is_some());
    let cleaned = cleanup_control_plane(&host, &deleting).await.unwrap();
    assert!(!cleaned.namespace_deleted, "{cleaned:?}");
    for gone in [
        "StatefulSet team-dev-cp/dev-cp",
        "Service team-dev-cp/dev-cp-headless",
        "Service team-dev-cp/dev-cp",
        "Service team-dev-cp/dev-cp-lb",
        "Secret team-dev-cp/dev-cp-bootstrap",
        "Secret team-dev/dev-kubeconfig",
        "PersistentVolumeClaim team-dev-cp/data-dev-cp-0",
    ] {
        assert!(
            cleaned.deleted.iter().any(|d| d == gone),
            "{gone} in {cleaned:?}"
        );
    }
    assert!(sts_api.get_opt("dev-cp").await.unwrap().is_none());
    // The claim waits on `kubernetes.io/pvc-protection` until no pod uses it; the
    // test plays the pvc-protection controller (not started here), after the pod
    // the StatefulSet controller would have deleted is gone.
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(host.clone(), CP_NS);
    let claim = claims.get("data-dev-cp-0").await.unwrap();
    assert!(
        claim.metadata.deletion_timestamp.is_some(),
        "the claim is being deleted"
    );
    Api::<Pod>::namespaced(host.clone(), CP_NS)
        .delete("dev-cp-0", &DeleteParams::default())
        .await
        .unwrap();
    claims
        .patch(
            "data-dev-cp-0",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await
        .unwrap();
    assert!(sts_api.get_opt("qa-cp").await.unwrap().is_some());

    // The last one out deletes the namespace; the namespace controller removes it.
    tcs.delete("qa", &DeleteParams::default()).await.unwrap();
    let deleting = tcs.get("qa").await.unwrap();
    let cleaned = cleanup_control_plane(&host, &deleting).await.unwrap();
    assert!(cleaned.namespace_deleted, "{cleaned:?}");
    let namespaces: Api<Namespace> = Api::all(host.clone());
    eventually("namespace team-dev-cp is gone", || {
        let namespaces = namespaces.clone();
        async move {
            namespaces
                .get_opt(CP_NS)
                .await
                .unwrap()
                .is_none()
                .then_some(())
        }
    })
    .await;
    // Repeating the cleanup (a finalizer retry) is harmless.
    let again = cleanup_control_plane(&host, &deleting).await.unwrap();
    assert_eq!(again.deleted, Vec::<String>::new());
    assert!(!again.namespace_deleted);
}

#[tokio::test]
async fn unsupported_versions_and_foreign_objects_are_refused_with_what_to_change() {
    let (_env, _server, host) = server().await;
    let old = create_tc(&host, "old", json!({"kubernetesVersion": "v1.27"})).await;
    let state = ensure_control_plane(&host, &old).await.unwrap();
    let ControlPlaneState::Refused { reason, message } = &state else {
        panic!("expected Refused, got {state:?}");
    };
    assert_eq!(*reason, "UnsupportedKubernetesVersion");
    assert!(
        message.contains("use one of v1.28, v1.29, v1.30, v1.31, v1.32, v1.33")
            && message.contains("change spec.kubernetesVersion"),
        "{message}"
    );
    // Nothing was created for a refused tenant.
    assert!(
        Api::<Namespace>::all(host.clone())
            .get_opt(CP_NS)
            .await
            .unwrap()
            .is_none()
    );

    // Someone else's Service under the control plane's name is never taken over.
    let web = create_tc(&host, "web", json!({})).await;
    let state = ensure_control_plane(&host, &web).await.unwrap();
    assert!(
        matches!(state, ControlPlaneState::Provisioning { .. }),
        "{state:?}"
    );
    let services: Api<Service> = Api::namespaced(host.clone(), CP_NS);
    services
        .delete("web-cp", &DeleteParams::default())
        .await
        .unwrap();
    let theirs: Service = serde_json::from_value(json!({
        "metadata": {"name": "web-cp"},
        "spec": {"ports": [{"port": 80}], "selector": {"app": "theirs"}},
    }))
    .unwrap();
    services
        .create(&PostParams::default(), &theirs)
        .await
        .unwrap();
    let state = ensure_control_plane(&host, &web).await.unwrap();
    let ControlPlaneState::Refused { reason, message } = &state else {
        panic!("expected Refused, got {state:?}");
    };
    assert_eq!(*reason, "ForeignObject");
    assert!(message.contains("Service team-dev-cp/web-cp"), "{message}");
    let live = services.get("web-cp").await.unwrap().spec.unwrap();
    assert_eq!(live.ports.unwrap()[0].port, 80);
    assert_eq!(json_of(&live.selector), json!({"app": "theirs"}));

    // Switching to an external control plane removes what was provisioned.
    let mut external = web.clone();
    external.spec.control_plane.external =
        serde_json::from_value(json!({"kubeconfigSecretRef": {"name": "web-external"}})).unwrap();
    let state = ensure_control_plane(&host, &external).await.unwrap();
    assert!(
        matches!(state, ControlPlaneState::External { .. }),
        "{state:?}"
    );
    let sts: Api<StatefulSet> = Api::namespaced(host.clone(), CP_NS);
    assert!(sts.get_opt("web-cp").await.unwrap().is_none());
    assert!(
        services.get_opt("web-cp").await.unwrap().is_some(),
        "theirs stays"
    );
}

/// Distro `k8s` without a node: three containers from the overridden images, a
/// serving Secret issued for the Service's names and re-issued (only) when
/// `extraSANs` change, no write when nothing changed, and a distro switch refused
/// with nothing touched.
#[tokio::test]
async fn the_k8s_distro_issues_its_serving_certificate_and_refuses_a_distro_switch() {
    let (_env, server, host) = server().await;
    let mut tc = create_tc(
        &host,
        "dev",
        json!({"controlPlane": {"distro": "k8s", "images": {"apiServer": "local/k:1", "etcd": "local/e:1"}}}),
    )
    .await;
    let state = ensure_control_plane(&host, &tc).await.unwrap();
    assert!(
        matches!(&state, ControlPlaneState::Provisioning { message } if message.contains("k8s control plane")),
        "{state:?}"
    );
    let sts: StatefulSet = Api::namespaced(host.clone(), CP_NS)
        .get("dev-cp")
        .await
        .unwrap();
    let pod = sts.spec.clone().unwrap().template.spec.unwrap();
    let images: Vec<(&str, &str)> = pod
        .containers
        .iter()
        .map(|c| (c.name.as_str(), c.image.as_deref().unwrap()))
        .collect();
    // The controller manager's image was not overridden: the version's default.
    assert_eq!(
        images,
        [
            ("etcd", "local/e:1"),
            ("kube-apiserver", "local/k:1"),
            (
                "kube-controller-manager",
                "registry.k8s.io/kube-controller-manager:v1.31.9"
            ),
        ]
    );
    let secrets: Api<Secret> = Api::namespaced(host.clone(), CP_NS);
    let serving = secrets.get("dev-cp-serving").await.unwrap();
    assert_eq!(serving.type_.as_deref(), Some("kubernetes.io/tls"));
    let names = serving.annotations()["tenantplane.io/serving-names"].clone();
    for name in [
        "dev-cp.team-dev-cp.svc",
        "kubernetes.default.svc",
        "127.0.0.1",
        "10.0.0.1",
    ] {
        assert!(names.split(',').any(|n| n == name), "{name} in {names}");
    }
    let bootstrap = secrets.get("dev-cp-bootstrap").await.unwrap();
    let keys: Vec<&String> = bootstrap.data.as_ref().unwrap().keys().collect();
    for key in [
        "service-account.key",
        "service-account.pub",
        "controller-manager.kubeconfig",
        "tokens.csv",
    ] {
        assert!(keys.iter().any(|k| *k == key), "{key} in {keys:?}");
    }

    // Nothing changed: no write to Secrets or the StatefulSet.
    let before = writes(&server, &["secrets", "statefulsets"]).await;
    ensure_control_plane(&host, &tc).await.unwrap();
    assert_eq!(writes(&server, &["secrets", "statefulsets"]).await, before);
    assert_eq!(
        secrets
            .get("dev-cp-serving")
            .await
            .unwrap()
            .resource_version(),
        serving.resource_version()
    );

    // A new name: the certificate is re-issued for it.
    tc = Api::<TenantCluster>::namespaced(host.clone(), HOST_NS)
        .patch(
            "dev",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"spec": {"controlPlane": {"extraSANs": ["api.dev.example.com"]}}}),
            ),
        )
        .await
        .unwrap();
    ensure_control_plane(&host, &tc).await.unwrap();
    let reissued = secrets.get("dev-cp-serving").await.unwrap();
    assert!(
        reissued.annotations()["tenantplane.io/serving-names"]
            .split(',')
            .any(|n| n == "api.dev.example.com")
    );
    assert_ne!(
        reissued.data.as_ref().unwrap()["tls.crt"],
        serving.data.as_ref().unwrap()["tls.crt"]
    );

    // Back to k3s: refused, and the StatefulSet is left as it was.
    tc = Api::<TenantCluster>::namespaced(host.clone(), HOST_NS)
        .patch(
            "dev",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"controlPlane": {"distro": "k3s"}}})),
        )
        .await
        .unwrap();
    let refused = ensure_control_plane(&host, &tc).await.unwrap();
    match &refused {
        ControlPlaneState::Refused { reason, message } => {
            assert_eq!(*reason, "DistroChangeRefused");
            assert!(
                message.contains("k8s") && message.contains("k3s"),
                "{message}"
            );
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    let after: StatefulSet = Api::namespaced(host.clone(), CP_NS)
        .get("dev-cp")
        .await
        .unwrap();
    assert_eq!(after.resource_version(), sts.resource_version());

    // Cleanup removes the serving Secret with the rest.
    let outcome = cleanup_control_plane(&host, &tc).await.unwrap();
    assert!(
        outcome
            .deleted
            .contains(&format!("Secret {CP_NS}/dev-cp-serving")),
        "{outcome:?}"
    );
}
