//! `deploy/install/` against a real kube-apiserver: every object is accepted, the
//! controller's RBAC allows what the lifecycle needs and nothing it must not have,
//! and the Deployments are locked down. (No kubelet: the Deployments' pods are
//! never created, so only their specs are checked.)

// Tests assert by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{DynamicObject, GroupVersionKind, PostParams};
use kube::discovery::{Scope, pinned_kind};
use kube::{Api, Client};
use serde_json::{Value, json};

const SA: &str = "system:serviceaccount:tenantplane-system:tenantplane";

/// cert-manager is not installed on the test server: a schemaless stand-in for its
/// two kinds, so the install's Issuer and Certificate are checked for their
/// apiVersion, kind, scope and namespace (cert-manager validates their content).
fn cert_manager_stand_in(kind: &str, plural: &str) -> CustomResourceDefinition {
    serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.cert-manager.io")},
        "spec": {
            "group": "cert-manager.io", "scope": "Namespaced",
            "names": {"plural": plural, "singular": kind.to_lowercase(), "kind": kind},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]
        }
    }))
    .unwrap()
}

/// deploy/install's objects (not its kustomization.yaml), then the cert-manager
/// overlay's certificate: what `kubectl apply -k deploy/overlays/cert-manager` applies.
fn install_documents() -> Vec<(String, Value)> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../deploy/install");
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .filter(|p| !p.ends_with("kustomization.yaml"))
        .collect();
    files.sort();
    files.push(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../deploy/overlays/cert-manager/certificate.yaml"),
    );
    let mut docs = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let parsed: Vec<Value> = serde_saphyr::from_multiple(&text)
            .unwrap_or_else(|e| panic!("{} does not parse: {e}", file.display()));
        let name = file.file_name().unwrap().to_string_lossy().into_owned();
        docs.extend(
            parsed
                .into_iter()
                .filter(|d| !d.is_null())
                .map(|d| (name.clone(), d)),
        );
    }
    docs
}

async fn allowed(client: &Client, attributes: Value) -> bool {
    allowed_for(client, SA, attributes).await
}

async fn allowed_for(client: &Client, service_account: &str, attributes: Value) -> bool {
    let review = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(service_account.to_owned()),
            groups: Some(vec![
                "system:serviceaccounts".into(),
                "system:serviceaccounts:tenantplane-system".into(),
                "system:authenticated".into(),
            ]),
            resource_attributes: Some(
                serde_json::from_value::<ResourceAttributes>(attributes).unwrap(),
            ),
            ..SubjectAccessReviewSpec::default()
        },
        ..SubjectAccessReview::default()
    };
    Api::<SubjectAccessReview>::all(client.clone())
        .create(&PostParams::default(), &review)
        .await
        .unwrap()
        .status
        .unwrap()
        .allowed
}

#[tokio::test]
async fn every_install_object_is_accepted_and_the_controller_gets_only_what_it_needs() {
    let server = crate::servers::host().await;
    let client = server.client().await.unwrap();
    let mut crds = tenantplane_api::crds();
    crds.push(cert_manager_stand_in("Issuer", "issuers"));
    crds.push(cert_manager_stand_in("Certificate", "certificates"));
    server.install_crds(crds).await.expect("CRDs");

    let mut created = Vec::new();
    for (file, doc) in install_documents() {
        let object: DynamicObject = serde_json::from_value(doc.clone()).unwrap();
        let types = object.types.clone().expect("apiVersion and kind");
        let (group, version) = types
            .api_version
            .split_once('/')
            .unwrap_or(("", types.api_version.as_str()));
        let gvk = GroupVersionKind::gvk(group, version, &types.kind);
        let (resource, caps) = pinned_kind(&client, &gvk)
            .await
            .unwrap_or_else(|e| panic!("{file}: {} is not served: {e}", types.kind));
        let api: Api<DynamicObject> = match caps.scope {
            Scope::Namespaced => {
                let ns = object.metadata.namespace.as_deref().unwrap_or_else(|| {
                    panic!("{file}: namespaced {} without a namespace", types.kind)
                });
                Api::namespaced_with(client.clone(), ns, &resource)
            }
            Scope::Cluster => {
                assert!(
                    object.metadata.namespace.is_none(),
                    "{file}: {}",
                    types.kind
                );
                Api::all_with(client.clone(), &resource)
            }
        };
        api.create(&PostParams::default(), &object)
            .await
            .unwrap_or_else(|e| {
                panic!(
                    "{file}: {} {:?} refused: {e}",
                    types.kind, object.metadata.name
                )
            });
        created.push((types.kind.clone(), doc));
    }
    let kinds: Vec<&str> = created.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(
        kinds,
        [
            "Namespace",
            "ServiceAccount",
            "ClusterRole",
            "ClusterRole",
            "ClusterRole",
            "ClusterRoleBinding",
            "ClusterRoleBinding",
            "Role",
            "RoleBinding",
            "Deployment",
            "ServiceAccount",
            "ClusterRole",
            "ClusterRoleBinding",
            "Role",
            "RoleBinding",
            "Deployment",
            "PodDisruptionBudget",
            "Service",
            "ValidatingWebhookConfiguration",
            "MutatingWebhookConfiguration",
            "Issuer",
            "Certificate",
        ]
    );

    // What the lifecycle and the syncer need.
    for (what, attributes) in [
        (
            "patch TenantClusters",
            json!({"group": "tenantplane.io", "resource": "tenantclusters", "verb": "patch", "namespace": "team-dev"}),
        ),
        (
            "write TenantCluster status",
            json!({"group": "tenantplane.io", "resource": "tenantclusters", "subresource": "status", "verb": "patch", "namespace": "team-dev"}),
        ),
        (
            "set blockOwnerDeletion",
            json!({"group": "tenantplane.io", "resource": "tenantclusters", "subresource": "finalizers", "verb": "update", "namespace": "team-dev"}),
        ),
        (
            "read a kubeconfig Secret",
            json!({"resource": "secrets", "verb": "get", "namespace": "team-dev"}),
        ),
        (
            "create the -cp namespace",
            json!({"resource": "namespaces", "verb": "create"}),
        ),
        (
            "merge Pod Security labels",
            json!({"resource": "namespaces", "verb": "patch", "name": "team-dev"}),
        ),
        (
            "apply a NetworkPolicy",
            json!({"group": "networking.k8s.io", "resource": "networkpolicies", "verb": "patch", "namespace": "team-dev"}),
        ),
        (
            "create a LimitRange",
            json!({"resource": "limitranges", "verb": "create", "namespace": "team-dev"}),
        ),
        (
            "create the k3s StatefulSet",
            json!({"group": "apps", "resource": "statefulsets", "verb": "create", "namespace": "team-dev-cp"}),
        ),
        (
            "create its Service",
            json!({"resource": "services", "verb": "create", "namespace": "team-dev-cp"}),
        ),
        (
            "read its pod's readiness",
            json!({"resource": "pods", "verb": "get", "namespace": "team-dev-cp"}),
        ),
        (
            "delete its PVCs",
            json!({"resource": "persistentvolumeclaims", "verb": "delete", "namespace": "team-dev-cp"}),
        ),
        (
            "sync a ConfigMap",
            json!({"resource": "configmaps", "verb": "create", "namespace": "team-dev"}),
        ),
        (
            "watch the Endpoints of synced Services' host copies",
            json!({"resource": "endpoints", "verb": "watch", "namespace": "team-dev"}),
        ),
        (
            "emit an Event",
            json!({"group": "events.k8s.io", "resource": "events", "verb": "create", "namespace": "team-dev"}),
        ),
        (
            "write a ResourcePool's ledger",
            json!({"group": "tenantplane.io", "resource": "resourcepools", "subresource": "status", "verb": "update"}),
        ),
        (
            "resize a pool's ResourceQuota",
            json!({"resource": "resourcequotas", "verb": "update", "namespace": "team-dev"}),
        ),
        (
            "finalize Tenants",
            json!({"group": "tenantplane.io", "resource": "tenants", "verb": "patch"}),
        ),
        (
            "write Tenant status",
            json!({"group": "tenantplane.io", "resource": "tenants", "subresource": "status", "verb": "update"}),
        ),
        (
            "bind owners in a member namespace",
            json!({"group": "rbac.authorization.k8s.io", "resource": "rolebindings", "verb": "create", "namespace": "acme-dev"}),
        ),
        (
            "bind admin",
            json!({"group": "rbac.authorization.k8s.io", "resource": "clusterroles", "verb": "bind", "name": "admin"}),
        ),
        (
            "bind the namespace deleter",
            json!({"group": "rbac.authorization.k8s.io", "resource": "clusterroles", "verb": "bind", "name": "tenantplane-namespace-deleter"}),
        ),
        (
            "copy a synced Pod's claim",
            json!({"resource": "persistentvolumeclaims", "verb": "create", "namespace": "team-dev"}),
        ),
        (
            "find a deleted TenantCluster's volume copies",
            json!({"resource": "persistentvolumes", "verb": "list"}),
        ),
        (
            "copy the volume bound to it",
            json!({"resource": "persistentvolumes", "verb": "create"}),
        ),
        (
            "read the node a synced Pod runs on",
            json!({"resource": "nodes", "verb": "get", "name": "node-a"}),
        ),
        (
            "list host nodes (scheduled node mode)",
            json!({"resource": "nodes", "verb": "list"}),
        ),
        (
            "watch host Events about synced Pods",
            json!({"resource": "events", "verb": "watch", "namespace": "team-dev"}),
        ),
        (
            "read the provisioner binding",
            json!({"group": "rbac.authorization.k8s.io", "resource": "clusterrolebindings", "verb": "get", "name": "tenantplane-namespace-provisioner"}),
        ),
        (
            "set the provisioner binding's subjects",
            json!({"group": "rbac.authorization.k8s.io", "resource": "clusterrolebindings", "verb": "update", "name": "tenantplane-namespace-provisioner"}),
        ),
        (
            "bind the namespace provisioner",
            json!({"group": "rbac.authorization.k8s.io", "resource": "clusterroles", "verb": "bind", "name": "tenantplane-namespace-provisioner"}),
        ),
        (
            "read where the namespace webhook is",
            json!({"group": "admissionregistration.k8s.io", "resource": "mutatingwebhookconfigurations", "verb": "get", "name": "tenantplane-namespaces"}),
        ),
        (
            "run a tenant DNS server",
            json!({"group": "apps", "resource": "deployments", "verb": "patch", "namespace": "team-dev"}),
        ),
        (
            "give it a service account",
            json!({"resource": "serviceaccounts", "verb": "create", "namespace": "team-dev"}),
        ),
        (
            "give it a role",
            json!({"group": "rbac.authorization.k8s.io", "resource": "roles", "verb": "create", "namespace": "team-dev"}),
        ),
        (
            "hold what the tenant DNS role grants",
            json!({"resource": "endpoints", "verb": "watch", "namespace": "team-dev"}),
        ),
        (
            "hold its lease",
            json!({"group": "coordination.k8s.io", "resource": "leases", "verb": "update", "namespace": "tenantplane-system"}),
        ),
    ] {
        assert!(
            allowed(&client, attributes).await,
            "the controller may {what}"
        );
    }
    // What it must not have.
    for (what, attributes) in [
        (
            "exec into pods",
            json!({"resource": "pods", "subresource": "exec", "verb": "create", "namespace": "team-dev-cp"}),
        ),
        (
            "take other leases",
            json!({"group": "coordination.k8s.io", "resource": "leases", "verb": "update", "namespace": "kube-system"}),
        ),
        (
            "write RBAC",
            json!({"group": "rbac.authorization.k8s.io", "resource": "clusterrolebindings", "verb": "create"}),
        ),
        (
            "write IsolationProfiles",
            json!({"group": "tenantplane.io", "resource": "isolationprofiles", "verb": "update"}),
        ),
        (
            "edit ResourcePoolClaims",
            json!({"group": "tenantplane.io", "resource": "resourcepoolclaims", "verb": "update", "namespace": "team-dev"}),
        ),
        (
            "bind cluster-admin",
            json!({"group": "rbac.authorization.k8s.io", "resource": "clusterroles", "verb": "bind", "name": "cluster-admin"}),
        ),
        (
            "escalate ClusterRoles",
            json!({"group": "rbac.authorization.k8s.io", "resource": "clusterroles", "verb": "escalate", "name": "admin"}),
        ),
        (
            "write host Endpoints (they are only read)",
            json!({"resource": "endpoints", "verb": "update", "namespace": "team-dev"}),
        ),
        (
            "write nodes",
            json!({"resource": "nodes", "verb": "update", "name": "node-a"}),
        ),
        (
            "update another ClusterRoleBinding",
            json!({"group": "rbac.authorization.k8s.io", "resource": "clusterrolebindings", "verb": "update", "name": "cluster-admin"}),
        ),
        (
            "delete the provisioner binding",
            json!({"group": "rbac.authorization.k8s.io", "resource": "clusterrolebindings", "verb": "delete", "name": "tenantplane-namespace-provisioner"}),
        ),
        (
            "read other webhook configurations",
            json!({"group": "admissionregistration.k8s.io", "resource": "mutatingwebhookconfigurations", "verb": "get", "name": "other"}),
        ),
        (
            "change the namespace webhook configuration",
            json!({"group": "admissionregistration.k8s.io", "resource": "mutatingwebhookconfigurations", "verb": "update", "name": "tenantplane-namespaces"}),
        ),
        (
            "update a volume",
            json!({"resource": "persistentvolumes", "verb": "update", "name": "pv-1"}),
        ),
    ] {
        assert!(
            !allowed(&client, attributes).await,
            "the controller must not {what}"
        );
    }

    // The provisioner binding ships empty and managed by tenantplane: nobody may
    // create namespaces through it until the controller has seen the webhook answer.
    let provisioner = created
        .iter()
        .find(|(k, d)| {
            k == "ClusterRoleBinding"
                && d["metadata"]["name"] == "tenantplane-namespace-provisioner"
        })
        .map(|(_, d)| d)
        .unwrap();
    assert_eq!(
        provisioner["metadata"]["labels"]["app.kubernetes.io/managed-by"],
        "tenantplane"
    );
    assert_eq!(
        provisioner["roleRef"]["name"],
        "tenantplane-namespace-provisioner"
    );
    assert_eq!(provisioner["subjects"], json!([]));

    // The webhook: Tenants, namespaces and Ingresses read, only the Tenants' status
    // and its own Ingress host claims written.
    let webhook_sa = "system:serviceaccount:tenantplane-system:tenantplane-webhook";
    for (what, attributes, expected) in [
        (
            "list Tenants",
            json!({"group": "tenantplane.io", "resource": "tenants", "verb": "list"}),
            true,
        ),
        (
            "reserve a namespace slot",
            json!({"group": "tenantplane.io", "resource": "tenants", "subresource": "status", "verb": "update", "name": "acme"}),
            true,
        ),
        (
            "read a namespace",
            json!({"resource": "namespaces", "verb": "get", "name": "acme-1"}),
            true,
        ),
        (
            "watch Ingresses (the host index)",
            json!({"group": "networking.k8s.io", "resource": "ingresses", "verb": "watch"}),
            true,
        ),
        (
            "claim an Ingress host",
            json!({"group": "coordination.k8s.io", "resource": "leases", "verb": "create", "namespace": "tenantplane-system"}),
            true,
        ),
        (
            "write Leases elsewhere",
            json!({"group": "coordination.k8s.io", "resource": "leases", "verb": "create", "namespace": "kube-system"}),
            false,
        ),
        (
            "change an Ingress",
            json!({"group": "networking.k8s.io", "resource": "ingresses", "verb": "update", "namespace": "acme-1"}),
            false,
        ),
        (
            "change a Tenant's spec",
            json!({"group": "tenantplane.io", "resource": "tenants", "verb": "update"}),
            false,
        ),
        (
            "change a namespace",
            json!({"resource": "namespaces", "verb": "patch", "name": "acme-1"}),
            false,
        ),
        (
            "read Secrets",
            json!({"resource": "secrets", "verb": "get", "namespace": "acme-1"}),
            false,
        ),
    ] {
        assert_eq!(
            allowed_for(&client, webhook_sa, attributes).await,
            expected,
            "the webhook may {what}: {expected}"
        );
    }

    // The Deployments: non-root, read-only root file system, no privilege escalation,
    // resources bounded, probed where the processes serve.
    for (_, doc) in created.iter().filter(|(k, _)| k == "Deployment") {
        let name = doc["metadata"]["name"].as_str().unwrap();
        let pod = &doc["spec"]["template"]["spec"];
        assert_eq!(pod["securityContext"]["runAsNonRoot"], true, "{name}");
        let container = &pod["containers"][0];
        assert_eq!(pod["containers"].as_array().unwrap().len(), 1, "{name}");
        let sc = &container["securityContext"];
        assert_eq!(sc["readOnlyRootFilesystem"], true, "{name}");
        assert_eq!(sc["allowPrivilegeEscalation"], false, "{name}");
        assert_eq!(sc["capabilities"]["drop"], json!(["ALL"]), "{name}");
        assert!(
            container["resources"]["requests"]["cpu"].is_string(),
            "{name}"
        );
        assert!(
            container["resources"]["limits"]["memory"].is_string(),
            "{name}"
        );
        let probes = (
            &container["livenessProbe"]["httpGet"],
            &container["readinessProbe"]["httpGet"],
        );
        match name {
            "tenantplane-controller" => {
                assert_eq!(
                    container["args"],
                    json!([
                        "controller",
                        "--leader-elect",
                        "--log-format=json",
                        "--tenant-webhook-url=https://tenantplane-webhook.tenantplane-system.svc:443/from-host",
                        "--tenant-webhook-ca-file=/webhook-ca/ca.crt"
                    ])
                );
                // The webhook's CA reaches the controller, its key never does.
                assert_eq!(
                    pod["volumes"],
                    json!([{"name": "webhook-ca", "secret": {"secretName": "tenantplane-webhook-tls",
                            "items": [{"key": "ca.crt", "path": "ca.crt"}]}}])
                );
                assert_eq!(container["volumeMounts"][0]["mountPath"], "/webhook-ca");
                assert_eq!(probes.0["path"], "/healthz");
                assert_eq!(probes.1["path"], "/readyz");
                assert_eq!(container["ports"][0]["containerPort"], 8080);
                assert_eq!(pod["serviceAccountName"], "tenantplane");
            }
            "tenantplane-webhook" => {
                assert_eq!(container["args"][0], "webhook");
                let args = container["args"].as_array().unwrap();
                assert!(args.contains(&json!("--namespace-tenancy")), "{args:?}");
                assert!(
                    args.contains(&json!(format!("--admin-user={SA}"))),
                    "the controller is exempt: {args:?}"
                );
                assert_eq!(probes.0["path"], "/healthz");
                assert_eq!(probes.0["scheme"], "HTTPS");
                // Ready only once its certificate is loaded (see /readyz).
                assert_eq!(probes.1["path"], "/readyz");
                assert_eq!(probes.1["scheme"], "HTTPS");
                assert_eq!(container["ports"][0]["containerPort"], 8443);
                // Highly available: two replicas, spread by host, one always up.
                assert_eq!(doc["spec"]["replicas"], 2);
                let spread = &pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
                    [0]["podAffinityTerm"];
                assert_eq!(spread["topologyKey"], "kubernetes.io/hostname");
                assert_eq!(
                    spread["labelSelector"]["matchLabels"],
                    doc["spec"]["selector"]["matchLabels"]
                );
                let budget = created
                    .iter()
                    .find(|(k, _)| k == "PodDisruptionBudget")
                    .map(|(_, d)| d)
                    .unwrap();
                assert_eq!(budget["spec"]["minAvailable"], 1);
                assert_eq!(
                    budget["spec"]["selector"]["matchLabels"],
                    doc["spec"]["selector"]["matchLabels"]
                );
                // Its own identity, not the controller's.
                assert_eq!(pod["serviceAccountName"], "tenantplane-webhook");
            }
            other => panic!("unexpected Deployment {other}"),
        }
    }
}
