//! Distro `k8s`: upstream kube-apiserver, kube-controller-manager and etcd, one
//! container each in the control plane's one Pod (as vcluster's `k8s` distro runs
//! them), instead of one k3s process.
//!
//! - etcd listens only on the Pod's loopback (plain HTTP: nothing outside the Pod
//!   can reach it) and keeps its data on the PVC.
//! - kube-apiserver serves on [`CONTROL_PLANE_PORT`] with a certificate from the
//!   serving Secret (re-issued by the controller when the names it must be valid for
//!   change; the Secret is mounted as a directory, so the new files reach the running
//!   server, which reloads them), authenticates the admin and the controller manager
//!   by the static tokens of the bootstrap Secret, and signs ServiceAccount tokens
//!   with its key. It advertises the Pod's IP: Pods may have no default route.
//! - kube-controller-manager runs what a control plane without nodes needs:
//!   namespaces, garbage collection, ServiceAccounts and their tokens, workload
//!   controllers. Not node, volume or endpoint controllers: nodes and volumes are
//!   the host's, and Endpoints come from the host copies (as for k3s).
//!
//! Every binary is found on its image's PATH, so the upstream images
//! (`registry.k8s.io/kube-apiserver:v1.X.Y`, ...) and a locally built image holding
//! all three work alike.

use k8s_openapi::api::core::v1::{
    Container, EnvVar, EnvVarSource, ObjectFieldSelector, SecretVolumeSource, Volume, VolumeMount,
};
use tenantplane_api::TenantCluster;

use super::CONTROL_PLANE_PORT;
use super::bootstrap_keys::{
    CA_CERT as KEY_CA_CERT, CONTROLLER_MANAGER_KUBECONFIG as KEY_CONTROLLER_MANAGER_KUBECONFIG,
    KUBELET_CERT as KEY_KUBELET_CERT, KUBELET_KEY as KEY_KUBELET_KEY,
    SERVICE_ACCOUNT as KEY_SERVICE_ACCOUNT, SERVICE_ACCOUNT_PUBLIC as KEY_SERVICE_ACCOUNT_PUBLIC,
    TOKENS_CSV as KEY_TOKENS_CSV,
};
use super::container::{api_server_ports, api_server_readiness, no_escalation, resources};
use super::kubeconfig::{self, KubeconfigError};
use crate::versions::SupportedVersion;

/// Where the data PVC is mounted; etcd keeps its data below it.
pub const DATA_DIR: &str = "/var/lib/tenantplane";
/// Where the bootstrap Secret is mounted (whole: it never changes).
pub const BOOTSTRAP_DIR: &str = "/etc/tenantplane/bootstrap";
/// Where the serving Secret is mounted (whole, so a re-issued certificate arrives).
pub const SERVING_DIR: &str = "/etc/tenantplane/serving";
/// The user the controller manager authenticates as: the one Kubernetes' default
/// RBAC grants what the controller manager needs.
pub const CONTROLLER_MANAGER_USER: &str = "system:kube-controller-manager";
/// What a control plane without nodes runs: everything but node, volume and
/// endpoint controllers (see the module comment). kube-controller-manager accepts
/// these names from 1.19 on (later releases keep them as aliases).
pub const CONTROLLERS: &str = "*,-nodeipam,-nodelifecycle,-cloud-node-lifecycle,-ttl,\
                                      -attachdetach,-persistentvolume-binder,\
                                      -persistentvolume-expander,-endpoint,-endpointslice,\
                                      -endpointslicemirroring";
const ETCD_URL: &str = "http://127.0.0.1:2379";
const BOOTSTRAP_VOLUME: &str = "bootstrap";
const SERVING_VOLUME: &str = "serving";

/// The images this TenantCluster runs: its overrides, else the version's defaults.
pub struct Images {
    pub api_server: String,
    pub controller_manager: String,
    pub etcd: String,
}

impl Images {
    pub fn of(tc: &TenantCluster, version: &SupportedVersion) -> Self {
        let images = &tc.spec.control_plane.images;
        Self {
            api_server: images
                .api_server
                .clone()
                .unwrap_or_else(|| version.api_server_image()),
            controller_manager: images
                .controller_manager
                .clone()
                .unwrap_or_else(|| version.controller_manager_image()),
            etcd: images
                .etcd
                .clone()
                .unwrap_or_else(|| version.etcd_image.to_owned()),
        }
    }
}

fn bootstrap_file(key: &str) -> String {
    format!("{BOOTSTRAP_DIR}/{key}")
}

fn mount(volume: &str, path: &str) -> VolumeMount {
    VolumeMount {
        name: volume.to_owned(),
        mount_path: path.to_owned(),
        // Only `true` is written: the API server drops `false`, and a field it drops
        // would look like drift on every pass.
        read_only: (volume != "data").then_some(true),
        ..VolumeMount::default()
    }
}

pub fn etcd_args() -> Vec<String> {
    vec![
        "--name=default".to_owned(),
        format!("--data-dir={DATA_DIR}/etcd"),
        format!("--listen-client-urls={ETCD_URL}"),
        format!("--advertise-client-urls={ETCD_URL}"),
        "--listen-peer-urls=http://127.0.0.1:2380".to_owned(),
        "--initial-advertise-peer-urls=http://127.0.0.1:2380".to_owned(),
        "--initial-cluster=default=http://127.0.0.1:2380".to_owned(),
    ]
}

pub fn api_server_args(service_cidr: &str, kubelet_client: bool) -> Vec<String> {
    let mut args = vec![
        format!("--etcd-servers={ETCD_URL}"),
        format!("--secure-port={CONTROL_PLANE_PORT}"),
        // Pods may have no default route to pick an address from.
        "--advertise-address=$(POD_IP)".to_owned(),
        format!("--tls-cert-file={SERVING_DIR}/tls.crt"),
        format!("--tls-private-key-file={SERVING_DIR}/tls.key"),
        format!("--client-ca-file={}", bootstrap_file(KEY_CA_CERT)),
        format!("--token-auth-file={}", bootstrap_file(KEY_TOKENS_CSV)),
        format!(
            "--service-account-key-file={}",
            bootstrap_file(KEY_SERVICE_ACCOUNT_PUBLIC)
        ),
        format!(
            "--service-account-signing-key-file={}",
            bootstrap_file(KEY_SERVICE_ACCOUNT)
        ),
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local".to_owned(),
        // The host's range: a tenant Service is given its host copy's ClusterIP.
        format!("--service-cluster-ip-range={service_cidr}"),
        "--authorization-mode=RBAC".to_owned(),
        // The readiness probe carries no credentials; RBAC lets unauthenticated
        // users read only /healthz, /livez, /readyz and /version.
        "--anonymous-auth=true".to_owned(),
        // What may run is the IsolationProfile's decision, made by the syncer and
        // the host; as with k3s, the tenant API server does not pre-empt it.
        "--allow-privileged=true".to_owned(),
    ];
    if kubelet_client {
        args.push(format!(
            "--kubelet-client-certificate={}",
            bootstrap_file(KEY_KUBELET_CERT)
        ));
        args.push(format!(
            "--kubelet-client-key={}",
            bootstrap_file(KEY_KUBELET_KEY)
        ));
    }
    args
}

pub fn controller_manager_args() -> Vec<String> {
    vec![
        format!(
            "--kubeconfig={}",
            bootstrap_file(KEY_CONTROLLER_MANAGER_KUBECONFIG)
        ),
        // One replica: nothing to elect.
        "--leader-elect=false".to_owned(),
        "--use-service-account-credentials=true".to_owned(),
        format!(
            "--service-account-private-key-file={}",
            bootstrap_file(KEY_SERVICE_ACCOUNT)
        ),
        format!("--root-ca-file={}", bootstrap_file(KEY_CA_CERT)),
        format!("--controllers={CONTROLLERS}"),
        // No serving: nothing outside the Pod reads its metrics or health.
        "--secure-port=0".to_owned(),
    ]
}

/// The kubeconfig kube-controller-manager reaches its API server with, over the
/// Pod's loopback, trusting the CA in the bootstrap Secret.
pub fn controller_manager_kubeconfig(token: &str) -> Result<String, KubeconfigError> {
    kubeconfig::controller_manager_kubeconfig(&bootstrap_file(KEY_CA_CERT), token)
}

/// The Pod's containers and volumes (the PVC `data` comes from the StatefulSet).
pub fn pod_parts(
    images: &Images,
    service_cidr: &str,
    kubelet_client: bool,
    bootstrap_secret: &str,
    serving_secret: &str,
) -> (Vec<Container>, Vec<Volume>) {
    let etcd = Container {
        name: "etcd".to_owned(),
        image: Some(images.etcd.clone()),
        command: Some(vec!["etcd".to_owned()]),
        args: Some(etcd_args()),
        resources: Some(resources("50m", "64Mi", "1Gi")),
        security_context: no_escalation(),
        volume_mounts: Some(vec![mount("data", DATA_DIR)]),
        ..Container::default()
    };
    let api_server = Container {
        name: "kube-apiserver".to_owned(),
        image: Some(images.api_server.clone()),
        command: Some(vec!["kube-apiserver".to_owned()]),
        args: Some(api_server_args(service_cidr, kubelet_client)),
        env: Some(vec![EnvVar {
            name: "POD_IP".to_owned(),
            value_from: Some(EnvVarSource {
                field_ref: Some(ObjectFieldSelector {
                    field_path: "status.podIP".to_owned(),
                    ..ObjectFieldSelector::default()
                }),
                ..EnvVarSource::default()
            }),
            ..EnvVar::default()
        }]),
        ports: api_server_ports(),
        readiness_probe: api_server_readiness(),
        // Bounded so one tenant cannot starve its neighbours' control planes.
        resources: Some(resources("100m", "256Mi", "2Gi")),
        security_context: no_escalation(),
        volume_mounts: Some(vec![
            mount(BOOTSTRAP_VOLUME, BOOTSTRAP_DIR),
            mount(SERVING_VOLUME, SERVING_DIR),
        ]),
        ..Container::default()
    };
    let controller_manager = Container {
        name: "kube-controller-manager".to_owned(),
        image: Some(images.controller_manager.clone()),
        command: Some(vec!["kube-controller-manager".to_owned()]),
        args: Some(controller_manager_args()),
        resources: Some(resources("50m", "64Mi", "512Mi")),
        security_context: no_escalation(),
        volume_mounts: Some(vec![mount(BOOTSTRAP_VOLUME, BOOTSTRAP_DIR)]),
        ..Container::default()
    };
    let secret_volume = |name: &str, secret: &str| Volume {
        name: name.to_owned(),
        secret: Some(SecretVolumeSource {
            secret_name: Some(secret.to_owned()),
            default_mode: Some(0o400),
            ..SecretVolumeSource::default()
        }),
        ..Volume::default()
    };
    (
        vec![etcd, api_server, controller_manager],
        vec![
            secret_volume(BOOTSTRAP_VOLUME, bootstrap_secret),
            secret_volume(SERVING_VOLUME, serving_secret),
        ],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn etcd_is_reachable_only_inside_the_pod() {
        for arg in etcd_args() {
            if let Some((_, value)) = arg.split_once("-urls=") {
                assert!(value.starts_with("http://127.0.0.1:"), "{arg}");
            }
        }
        assert!(
            api_server_args("10.96.0.0/16", false).contains(&format!("--etcd-servers={ETCD_URL}"))
        );
    }

    #[test]
    fn the_api_server_uses_the_bootstrap_credentials_and_the_host_service_range() {
        let args = api_server_args("10.96.0.0/16", true);
        for expected in [
            "--service-cluster-ip-range=10.96.0.0/16",
            "--token-auth-file=/etc/tenantplane/bootstrap/tokens.csv",
            "--tls-cert-file=/etc/tenantplane/serving/tls.crt",
            "--service-account-signing-key-file=/etc/tenantplane/bootstrap/service-account.key",
            "--service-account-key-file=/etc/tenantplane/bootstrap/service-account.pub",
            "--advertise-address=$(POD_IP)",
            "--kubelet-client-certificate=/etc/tenantplane/bootstrap/kubelet-client.crt",
        ] {
            assert!(args.iter().any(|a| a == expected), "{expected} in {args:?}");
        }
        let without = api_server_args("10.96.0.0/16", false);
        assert!(!without.iter().any(|a| a.contains("kubelet-client")));
    }

    #[test]
    fn the_controller_manager_runs_no_node_volume_or_endpoint_controller() {
        let args = controller_manager_args();
        let controllers = args
            .iter()
            .find_map(|a| a.strip_prefix("--controllers="))
            .unwrap_or_default();
        let list: Vec<&str> = controllers.split(',').collect();
        assert_eq!(list[0], "*");
        for off in [
            "nodeipam",
            "nodelifecycle",
            "persistentvolume-binder",
            "attachdetach",
            "endpoint",
            "endpointslice",
        ] {
            assert!(list.contains(&format!("-{off}").as_str()), "{off}");
        }
        assert!(list.iter().all(|c| !c.contains(' ')), "{list:?}");
        let yaml = controller_manager_kubeconfig("abc123").unwrap();
        let parsed: kubeconfig::Kubeconfig = serde_saphyr::from_str(&yaml).unwrap();
        let cluster = &parsed.clusters[0].cluster;
        assert_eq!(cluster.server, "https://127.0.0.1:6443");
        assert_eq!(
            cluster.certificate_authority.as_deref(),
            Some("/etc/tenantplane/bootstrap/server-ca.crt")
        );
    }

    #[test]
    fn each_container_runs_its_binary_from_its_image() {
        let images = Images {
            api_server: "a:1".into(),
            controller_manager: "c:1".into(),
            etcd: "e:1".into(),
        };
        let (containers, volumes) = pod_parts(&images, "10.96.0.0/16", false, "b", "s");
        let summary: Vec<(String, Option<String>, Option<Vec<String>>)> = containers
            .iter()
            .map(|c| (c.name.clone(), c.image.clone(), c.command.clone()))
            .collect();
        assert_eq!(
            summary,
            [
                ("etcd".into(), Some("e:1".into()), Some(vec!["etcd".into()])),
                (
                    "kube-apiserver".into(),
                    Some("a:1".into()),
                    Some(vec!["kube-apiserver".into()])
                ),
                (
                    "kube-controller-manager".into(),
                    Some("c:1".into()),
                    Some(vec!["kube-controller-manager".into()])
                ),
            ]
        );
        let secrets: Vec<Option<String>> = volumes
            .iter()
            .map(|v| v.secret.as_ref().and_then(|s| s.secret_name.clone()))
            .collect();
        assert_eq!(secrets, [Some("b".into()), Some("s".into())]);
        // Only etcd writes, and only to the PVC.
        for c in &containers {
            for m in c.volume_mounts.iter().flatten() {
                assert_eq!(
                    m.read_only.unwrap_or(false),
                    m.name != "data",
                    "{} {}",
                    c.name,
                    m.name
                );
            }
        }
    }
}
