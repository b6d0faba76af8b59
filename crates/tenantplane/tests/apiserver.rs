//! The Foundation against a real kube-apiserver: the CRDs install, the samples are
//! accepted, invalid specs are refused by the server's schema, and the transform's
//! output for tricky objects is created and read back exactly as predicted.

// Tests assert by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{
    ApiResource, DynamicObject, GroupVersionKind, ObjectMeta, Patch, PatchParams, PostParams,
};
use kube::{Api, Client};
use serde_json::{Value, json};
use tenantplane_core::kinds::{GroupKind, Scope};
use tenantplane_core::naming::{SourceName, host_name};
use tenantplane_core::provenance::reverse_lookup;
use tenantplane_core::transform::{TenantTarget, to_host};
use tenantplane_testenv::PooledServer;

async fn create_namespace(client: &Client, name: &str) {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let ns = Namespace {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        ..Default::default()
    };
    namespaces
        .create(&PostParams::default(), &ns)
        .await
        .expect("namespace");
}

fn api_for(
    client: &Client,
    api_version: &str,
    kind: &str,
    namespace: Option<&str>,
) -> Api<DynamicObject> {
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let mut resource = ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind));
    if kind == "IsolationProfile" || kind == "SyncPolicy" {
        // ApiResource::from_gvk guesses plurals; ours are regular, just confirm.
        assert!(resource.plural.ends_with('s'));
    }
    if kind == "Role" {
        resource.plural = "roles".into();
    }
    match namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
        None => Api::all_with(client.clone(), &resource),
    }
}

async fn create_yaml_documents(client: &Client, yaml: &str) -> Vec<DynamicObject> {
    let mut created = Vec::new();
    let docs: Vec<Value> = serde_saphyr::from_multiple(yaml).expect("sample YAML parses");
    for doc in docs.into_iter().filter(|d| !d.is_null()) {
        let object: DynamicObject = serde_json::from_value(doc).expect("a Kubernetes object");
        let types = object.types.clone().expect("apiVersion and kind");
        let api = api_for(
            client,
            &types.api_version,
            &types.kind,
            object.metadata.namespace.as_deref(),
        );
        created.push(
            api.create(&PostParams::default(), &object)
                .await
                .unwrap_or_else(|e| {
                    panic!("{} {:?} refused: {e}", types.kind, object.metadata.name);
                }),
        );
    }
    created
}

async fn server_with_crds() -> (PooledServer, Client) {
    let server = crate::servers::host_with_crds().await;
    let client = server.client().await.expect("client");
    (server, client)
}

#[tokio::test]
async fn crds_install_and_the_samples_are_accepted() {
    let (_server, client) = server_with_crds().await;
    // The samples create the namespaces they live in.
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../deploy/samples");
    let mut kinds = Vec::new();
    for file in [
        "isolationprofile-restricted.yaml",
        "syncpolicy-default.yaml",
        "tenantcluster-dev.yaml",
        "resourcepool-team-a.yaml",
    ] {
        let yaml = std::fs::read_to_string(format!("{dir}/{file}")).expect("sample");
        for object in create_yaml_documents(&client, &yaml).await {
            kinds.push(object.types.unwrap().kind);
        }
    }
    assert_eq!(
        kinds,
        [
            "IsolationProfile",
            "SyncPolicy",
            "Namespace",
            "TenantCluster",
            "ResourcePool",
            "Namespace",
            "ResourcePoolClaim"
        ]
    );

    // Typed read-back: the server's defaults and our Rust types agree.
    let tcs: Api<tenantplane_api::TenantCluster> = Api::namespaced(client.clone(), "team-dev");
    let dev = tcs.get("dev").await.expect("typed TenantCluster");
    assert_eq!(dev.spec.isolation_profile_ref.name, "restricted");
    assert_eq!(dev.spec.control_plane.replicas, 1);

    // A minimal spec gets the schema's defaults from the server itself.
    let minimal = json!({
        "apiVersion": "tenantplane.io/v1alpha1", "kind": "TenantCluster",
        "metadata": {"name": "minimal", "namespace": "team-dev"},
        "spec": {"isolationProfileRef": {"name": "restricted"}, "syncPolicyRef": {"name": "default"}}
    });
    let api = api_for(
        &client,
        "tenantplane.io/v1alpha1",
        "TenantCluster",
        Some("team-dev"),
    );
    let created = api
        .create(
            &PostParams::default(),
            &serde_json::from_value(minimal).unwrap(),
        )
        .await
        .expect("minimal TenantCluster");
    assert_eq!(created.data["spec"]["mode"], "shared");
    assert_eq!(created.data["spec"]["kubernetesVersion"], "v1.31");
    assert_eq!(
        created.data["spec"]["networking"]["egressPolicy"],
        "allowDNS"
    );
    assert_eq!(
        created.data["spec"]["controlPlane"]["storage"]["size"],
        "5Gi"
    );

    let policies: Api<tenantplane_api::SyncPolicy> = Api::all(client.clone());
    let policy = policies.get("default").await.expect("typed SyncPolicy");
    assert_eq!(
        policy.spec.drift_detection.interval_duration().unwrap(),
        Duration::from_secs(30)
    );
}

#[tokio::test]
async fn invalid_specs_are_refused_by_the_server() {
    let (_server, client) = server_with_crds().await;
    create_namespace(&client, "team-dev").await;
    let tc = |spec: Value| {
        json!({
            "apiVersion": "tenantplane.io/v1alpha1", "kind": "TenantCluster",
            "metadata": {"name": "bad", "namespace": "team-dev"}, "spec": spec
        })
    };
    let refs = json!({"isolationProfileRef": {"name": "restricted"}, "syncPolicyRef": {"name": "default"}});
    let with = |extra: Value| {
        let mut spec = refs.clone();
        spec.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        spec
    };
    let cases: Vec<(&str, &str, Value)> = vec![
        (
            "TenantCluster",
            "unknown mode",
            tc(with(json!({"mode": "hybrid"}))),
        ),
        (
            "TenantCluster",
            "version pattern",
            tc(with(json!({"kubernetesVersion": "1.31"}))),
        ),
        (
            "TenantCluster",
            "replicas type",
            tc(with(json!({"controlPlane": {"replicas": "one"}}))),
        ),
        (
            "TenantCluster",
            "replicas range",
            tc(with(json!({"controlPlane": {"replicas": 3}}))),
        ),
        (
            "TenantCluster",
            "egress enum",
            tc(with(json!({"networking": {"egressPolicy": "open"}}))),
        ),
        (
            "TenantCluster",
            "missing refs",
            tc(json!({"mode": "shared"})),
        ),
        (
            "TenantCluster",
            "empty ref name",
            tc(json!({"isolationProfileRef": {"name": ""}, "syncPolicyRef": {"name": "default"}})),
        ),
        (
            "IsolationProfile",
            "unknown level",
            json!({"apiVersion": "tenantplane.io/v1alpha1", "kind": "IsolationProfile", "metadata": {"name": "bad"}, "spec": {"level": "paranoid"}}),
        ),
        (
            "IsolationProfile",
            "fairness range",
            json!({"apiVersion": "tenantplane.io/v1alpha1", "kind": "IsolationProfile", "metadata": {"name": "bad"},
                   "spec": {"controls": {"apiFairness": {"qps": 0, "burst": 1}}}}),
        ),
        (
            "SyncPolicy",
            "unknown direction",
            json!({"apiVersion": "tenantplane.io/v1alpha1", "kind": "SyncPolicy", "metadata": {"name": "bad"},
                   "spec": {"resources": [{"apiVersion": "v1", "kind": "ConfigMap", "direction": "sideways"}]}}),
        ),
        (
            "SyncPolicy",
            "retain below 1",
            json!({"apiVersion": "tenantplane.io/v1alpha1", "kind": "SyncPolicy", "metadata": {"name": "bad"},
                   "spec": {"explain": {"retain": 0}}}),
        ),
        (
            "SyncPolicy",
            "interval pattern",
            json!({"apiVersion": "tenantplane.io/v1alpha1", "kind": "SyncPolicy", "metadata": {"name": "bad"},
                   "spec": {"driftDetection": {"interval": "soon"}}}),
        ),
        (
            "SyncPolicy",
            "conflict policy enum",
            json!({"apiVersion": "tenantplane.io/v1alpha1", "kind": "SyncPolicy", "metadata": {"name": "bad"},
                   "spec": {"conflictPolicy": "first-wins"}}),
        ),
    ];
    for (kind, what, body) in cases {
        let namespace = (kind == "TenantCluster").then_some("team-dev");
        let api = api_for(&client, "tenantplane.io/v1alpha1", kind, namespace);
        let object: DynamicObject = serde_json::from_value(body).unwrap();
        match api.create(&PostParams::default(), &object).await {
            Err(kube::Error::Api(status)) => assert_eq!(status.code, 422, "{what}: {status:?}"),
            other => panic!("{what}: expected 422 Invalid, got {other:?}"),
        }
    }
}

/// A dozen tenant objects chosen to break naive syncers.
fn tricky_objects() -> Vec<Value> {
    let cm = |name: &str, ns: &str| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": ns}, "data": {"k": "v"}});
    vec![
        cm("nginx", "default"),
        cm("app.config", "default"),
        cm("app-config", "default"),
        cm(&"a".repeat(253), "default"),
        cm("a-x-b", "c"),
        cm("a", "b-x-c"),
        cm(&format!("{}.{}", "d".repeat(45), "e".repeat(20)), "default"),
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "creds", "namespace": "default",
               "labels": {"tenantplane.io/tenant": "prod", "app.kubernetes.io/managed-by": "helm", "app": "db"},
               "annotations": {"tenantplane.io/virtual-name": "forged", "kubectl.kubernetes.io/last-applied-configuration": "{\"data\":\"secret\"}"}},
               "stringData": {"password": "hunter2"}}),
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web", "namespace": "default", "uid": "tenant-uid-1"},
               "spec": {"type": "NodePort", "clusterIP": "10.43.0.10", "clusterIPs": ["10.43.0.10"],
                        "ports": [{"port": 80, "nodePort": 31999}]}}),
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "db-headless", "namespace": "default"},
               "spec": {"clusterIP": "None", "ports": [{"port": 5432}]}}),
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": format!("s{}", "v".repeat(62)), "namespace": "n".repeat(63)},
               "spec": {"ports": [{"port": 80}]}}),
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "worker", "namespace": "default"},
               "spec": {"nodeName": "tenant-node-1", "containers": [{"name": "c", "image": "busybox"}]}}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "system:reader", "namespace": "default"},
               "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]}),
        json!({"apiVersion": "tenantplane.io/v1alpha1", "kind": "SyncDecision", "metadata": {"name": "custom-kind", "namespace": "default"},
               "spec": {"tenantCluster": "dev"}}),
    ]
}

fn string_map(value: &Value) -> BTreeMap<String, String> {
    serde_json::from_value(value.clone()).unwrap_or_default()
}

#[tokio::test]
async fn transformed_objects_are_created_with_the_predicted_names_and_metadata() {
    let (_server, client) = server_with_crds().await;
    create_namespace(&client, "team-dev").await;
    let target = TenantTarget::new("dev", "team-dev").unwrap();
    let objects = tricky_objects();
    assert!(objects.len() >= 12);
    let mut host_names = std::collections::BTreeSet::new();
    for tenant_object in objects {
        let api_version = tenant_object["apiVersion"].as_str().unwrap();
        let kind = tenant_object["kind"].as_str().unwrap();
        let gk = GroupKind::from_api_version(api_version, kind).unwrap();
        let (placement, host_object) =
            to_host(&target, &gk, Scope::Namespaced, &tenant_object).unwrap();
        let predicted = host_name(&SourceName {
            name: tenant_object["metadata"]["name"].as_str().unwrap(),
            virtual_namespace: tenant_object["metadata"]["namespace"].as_str().unwrap(),
            tenant: "dev",
        });
        assert_eq!(
            placement.host_name, predicted,
            "the engine and the CLI share one naming function"
        );
        assert!(
            host_names.insert(predicted.name.clone()),
            "{} collides",
            predicted.name
        );

        let api = api_for(&client, api_version, kind, Some("team-dev"));
        let object: DynamicObject = serde_json::from_value(host_object).unwrap();
        api.create(&PostParams::default(), &object)
            .await
            .unwrap_or_else(|e| panic!("{kind} {} refused by the server: {e}", predicted.name));
        let live = api
            .get(&predicted.name)
            .await
            .expect("read back by the predicted name");
        let live = serde_json::to_value(&live).unwrap();
        let labels = string_map(&live["metadata"]["labels"]);
        let annotations = string_map(&live["metadata"]["annotations"]);
        let identity =
            reverse_lookup(&predicted.name, &labels, &annotations).expect("reverse lookup");
        assert_eq!(
            identity.name,
            tenant_object["metadata"]["name"].as_str().unwrap()
        );
        assert_eq!(
            identity.virtual_namespace,
            tenant_object["metadata"]["namespace"].as_str().unwrap()
        );
        assert_eq!(identity.tenant, "dev");
        assert_eq!(identity.group_kind, gk);
        assert_eq!(labels["tenantplane.io/kind"], kind);
        assert_eq!(live["metadata"]["namespace"], "team-dev");
        for (key, value) in &placement.metadata.labels {
            assert_eq!(labels.get(key), Some(value), "{kind}: label {key}");
        }
        for (key, value) in &placement.metadata.annotations {
            assert_eq!(
                annotations.get(key),
                Some(value),
                "{kind}: annotation {key}"
            );
        }
        if kind == "Secret" {
            assert_eq!(
                labels["tenantplane.io/tenant"], "dev",
                "forged tenant label replaced"
            );
            assert_eq!(labels["app.kubernetes.io/managed-by"], "tenantplane");
            assert_eq!(labels["app"], "db", "the tenant's own labels are kept");
            assert_eq!(annotations["tenantplane.io/virtual-name"], "creds");
            assert!(!annotations.contains_key("kubectl.kubernetes.io/last-applied-configuration"));
        }
        if kind == "Service" && identity.name == "web" {
            assert_ne!(
                live["spec"]["clusterIP"], "10.43.0.10",
                "the host allocates its own IP"
            );
            assert_eq!(annotations["tenantplane.io/virtual-uid"], "tenant-uid-1");
        }
        if identity.name == "db-headless" {
            assert_eq!(live["spec"]["clusterIP"], "None");
        }
        if kind == "Pod" {
            assert!(live["spec"].get("nodeName").is_none(), "the host schedules");
        }
    }
}

#[tokio::test]
async fn rendered_isolation_objects_apply_to_the_api_server() {
    let server = crate::servers::host().await;
    let client = server.client().await.expect("client");
    create_namespace(&client, "team-dev").await;
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tenantplane"))
        .args([
            "render",
            "isolation",
            "--profile",
            "restricted",
            "-n",
            "team-dev",
            "--tenant",
            "dev",
            "--cpu",
            "4",
            "--memory",
            "8Gi",
        ])
        .output()
        .expect("run tenantplane");
    assert!(out.status.success(), "{out:?}");
    let docs: Vec<Value> =
        serde_saphyr::from_multiple(&String::from_utf8(out.stdout).unwrap()).expect("YAML");
    assert_eq!(docs.len(), 4);
    // What `kubectl apply --server-side -f -` does with the stream.
    for doc in &docs {
        let api = api_for(
            &client,
            doc["apiVersion"].as_str().unwrap(),
            doc["kind"].as_str().unwrap(),
            doc["metadata"]["namespace"].as_str(),
        );
        let name = doc["metadata"]["name"].as_str().unwrap();
        let live = api
            .patch(
                name,
                &PatchParams::apply("tenantplane-test"),
                &Patch::Apply(doc),
            )
            .await
            .unwrap_or_else(|e| panic!("{} {name} refused: {e}", doc["kind"]));
        let live = serde_json::to_value(&live).unwrap();
        for (key, value) in doc["metadata"]["labels"].as_object().unwrap() {
            assert_eq!(
                &live["metadata"]["labels"][key], value,
                "{}: {key}",
                doc["kind"]
            );
        }
        if doc["kind"] != "Namespace" {
            // The server keeps the spec exactly as compiled (nothing dropped or defaulted away).
            assert_eq!(live["spec"], doc["spec"], "{}", doc["kind"]);
        }
    }
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let ns = namespaces.get("team-dev").await.unwrap();
    let labels = ns.metadata.labels.unwrap();
    assert_eq!(labels["pod-security.kubernetes.io/enforce"], "restricted");
    assert_eq!(labels["pod-security.kubernetes.io/warn-version"], "latest");
}
