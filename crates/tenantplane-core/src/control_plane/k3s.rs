//! Distro `k3s`: one k3s server, agent and add-ons off, SQLite on the PVC, the
//! server CA and tokens pre-placed from the bootstrap Secret.

use k8s_openapi::api::core::v1::{
    Container, EnvVar, EnvVarSource, SecretKeySelector, SecretVolumeSource, Volume, VolumeMount,
};
use tenantplane_api::TenantCluster;

use super::bootstrap_keys::{CA_CERT, CA_KEY, KUBELET_CERT, KUBELET_KEY, TOKEN, TOKENS_CSV};
use super::container::{api_server_ports, api_server_readiness, no_escalation, resources};
use super::names::{ControlPlaneNames, bootstrap_name};
use crate::versions::SupportedVersion;

/// k3s' data directory, on the PVC.
pub const DATA_DIR: &str = "/var/lib/rancher/k3s";
/// Where the API server reads its static tokens from.
pub const TOKENS_FILE: &str = "/etc/tenantplane/tokens.csv";
/// Add-ons a control plane without nodes has no use for.
pub const DISABLED_COMPONENTS: &str = "traefik,servicelb,metrics-server,local-storage,coredns";
/// Where k3s' API server finds the client certificate it presents to kubelets
/// (tenantplane's kubelet endpoint, which knows the tenant by its fingerprint).
pub const KUBELET_CLIENT_DIR: &str = "/etc/tenantplane/kubelet-client";
const BOOTSTRAP_VOLUME: &str = "bootstrap";

/// The k3s server's arguments.
pub fn args(names: &ControlPlaneNames, extra_sans: &[String], service_cidr: &str) -> Vec<String> {
    let mut args = vec![
        "server".to_owned(),
        // No kubelet or containerd: tenant pods run on the host through the syncer.
        "--disable-agent".to_owned(),
        format!("--disable={DISABLED_COMPONENTS}"),
        "--disable-helm-controller".to_owned(),
        // Without agents there is no tunnel: the API server reaches tenant webhooks
        // (pods on the host) directly.
        "--egress-selector-mode=disabled".to_owned(),
        // No --datastore-endpoint: without --cluster-init, SQLite under the data
        // directory (on the PVC) is k3s' default datastore.
        // The host's service CIDR: a tenant Service is given its host copy's ClusterIP.
        format!("--service-cidr={service_cidr}"),
        // Endpoints come from the host (the host copy's, with tenant Pod names); the
        // tenant's own endpoint controllers would overwrite them with nothing, as no
        // tenant Pod runs on a tenant node.
        "--kube-controller-manager-arg=controllers=*,-endpoint,-endpointslice,-endpointslicemirroring"
            .to_owned(),
    ];
    for san in names.tls_sans(extra_sans) {
        args.push(format!("--tls-san={san}"));
    }
    // The static admin credential (see the engine's provision module).
    args.push(format!(
        "--kube-apiserver-arg=token-auth-file={TOKENS_FILE}"
    ));
    // k3s turns anonymous requests off; the kubelet's HTTPS readiness probe carries no
    // credentials, and with anonymous on, RBAC still lets unauthenticated users read
    // only /healthz, /livez, /readyz and /version (system:public-info-viewer).
    args.push("--kube-apiserver-arg=anonymous-auth=true".to_owned());
    args
}

/// A read-only file of the bootstrap Secret at `path`.
fn bootstrap_file(path: String, key: &str) -> VolumeMount {
    VolumeMount {
        name: BOOTSTRAP_VOLUME.to_owned(),
        mount_path: path,
        sub_path: Some(key.to_owned()),
        read_only: Some(true),
        ..VolumeMount::default()
    }
}

/// The k3s server's container and volumes (the PVC `data` comes from the
/// StatefulSet). `kubelet_client`: the bootstrap holds a kubelet client
/// certificate (older ones do not).
pub fn pod_parts(
    names: &ControlPlaneNames,
    tc: &TenantCluster,
    version: &SupportedVersion,
    service_cidr: &str,
    kubelet_client: bool,
) -> (Vec<Container>, Vec<Volume>) {
    let bootstrap = bootstrap_name(&names.tenant);
    let tls_dir = format!("{DATA_DIR}/server/tls");
    let mut args = args(names, &tc.spec.control_plane.extra_sans, service_cidr);
    let mut mounts = vec![
        VolumeMount {
            name: "data".to_owned(),
            mount_path: DATA_DIR.to_owned(),
            ..VolumeMount::default()
        },
        // k3s generates a CA only when its files are missing: it signs with ours.
        bootstrap_file(format!("{tls_dir}/{CA_CERT}"), CA_CERT),
        bootstrap_file(format!("{tls_dir}/{CA_KEY}"), CA_KEY),
        bootstrap_file(TOKENS_FILE.to_owned(), TOKENS_CSV),
    ];
    if kubelet_client {
        for (flag, key) in [
            ("kubelet-client-certificate", KUBELET_CERT),
            ("kubelet-client-key", KUBELET_KEY),
        ] {
            let path = format!("{KUBELET_CLIENT_DIR}/{key}");
            args.push(format!("--kube-apiserver-arg={flag}={path}"));
            mounts.push(bootstrap_file(path, key));
        }
    }
    let image = tc
        .spec
        .control_plane
        .images
        .k3s
        .as_deref()
        .unwrap_or(version.k3s_image);
    let container = Container {
        name: "k3s".to_owned(),
        image: Some(image.to_owned()),
        args: Some(args),
        env: Some(vec![EnvVar {
            name: "K3S_TOKEN".to_owned(),
            value_from: Some(EnvVarSource {
                secret_key_ref: Some(SecretKeySelector {
                    name: bootstrap.clone(),
                    key: TOKEN.to_owned(),
                    ..SecretKeySelector::default()
                }),
                ..EnvVarSource::default()
            }),
            ..EnvVar::default()
        }]),
        ports: api_server_ports(),
        readiness_probe: api_server_readiness(),
        // An API server with SQLite and no nodes: modest, but bounded so one tenant
        // cannot starve its neighbours' control planes.
        resources: Some(resources("100m", "256Mi", "2Gi")),
        security_context: no_escalation(),
        volume_mounts: Some(mounts),
        ..Container::default()
    };
    let volume = Volume {
        name: BOOTSTRAP_VOLUME.to_owned(),
        secret: Some(SecretVolumeSource {
            secret_name: Some(bootstrap),
            default_mode: Some(0o400),
            ..SecretVolumeSource::default()
        }),
        ..Volume::default()
    };
    (vec![container], vec![volume])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::versions;

    use super::super::test_tenant_cluster as tc;

    #[test]
    fn k3s_runs_without_agent_or_add_ons_and_serves_every_name() {
        let names = ControlPlaneNames::new("dev", "team-dev");
        let extra = ["api.dev.example.com".to_owned(), "dev-cp".to_owned()];
        let args = args(&names, &extra, "10.96.0.0/12");
        assert_eq!(args[0], "server");
        assert!(args.contains(&"--service-cidr=10.96.0.0/12".to_owned()));
        assert!(args.contains(
            &"--kube-controller-manager-arg=controllers=*,-endpoint,-endpointslice,-endpointslicemirroring"
                .to_owned()
        ));
        assert!(args.contains(&"--disable-agent".to_owned()));
        assert!(args.contains(
            &"--disable=traefik,servicelb,metrics-server,local-storage,coredns".to_owned()
        ));
        assert!(args.contains(
            &"--kube-apiserver-arg=token-auth-file=/etc/tenantplane/tokens.csv".to_owned()
        ));
        assert!(
            !args
                .iter()
                .any(|a| a.starts_with("--datastore-endpoint") || a == "--cluster-init")
        );
        let sans: Vec<&str> = args
            .iter()
            .filter_map(|a| a.strip_prefix("--tls-san="))
            .collect();
        assert_eq!(
            sans,
            [
                "dev-cp",
                "dev-cp.team-dev-cp",
                "dev-cp.team-dev-cp.svc",
                "dev-cp.team-dev-cp.svc.cluster.local",
                "api.dev.example.com",
            ]
        );
    }

    #[test]
    fn the_bootstrap_is_mounted_read_only_and_the_kubelet_client_only_when_issued() {
        let tc = tc(serde_json::json!({"controlPlane": {"images": {"k3s": "my/k3s:1"}}}));
        let names = ControlPlaneNames::of(&tc).unwrap();
        let version = versions::resolve("v1.31").unwrap();
        let (containers, volumes) = pod_parts(&names, &tc, version, "10.0.0.0/24", true);
        let c = &containers[0];
        assert_eq!(c.image.as_deref(), Some("my/k3s:1"));
        let mounts = c.volume_mounts.clone().unwrap_or_default();
        let paths: Vec<(&str, Option<&str>, Option<bool>)> = mounts
            .iter()
            .map(|m| (m.mount_path.as_str(), m.sub_path.as_deref(), m.read_only))
            .collect();
        assert_eq!(
            paths,
            [
                ("/var/lib/rancher/k3s", None, None),
                (
                    "/var/lib/rancher/k3s/server/tls/server-ca.crt",
                    Some("server-ca.crt"),
                    Some(true)
                ),
                (
                    "/var/lib/rancher/k3s/server/tls/server-ca.key",
                    Some("server-ca.key"),
                    Some(true)
                ),
                (
                    "/etc/tenantplane/tokens.csv",
                    Some("tokens.csv"),
                    Some(true)
                ),
                (
                    "/etc/tenantplane/kubelet-client/kubelet-client.crt",
                    Some("kubelet-client.crt"),
                    Some(true)
                ),
                (
                    "/etc/tenantplane/kubelet-client/kubelet-client.key",
                    Some("kubelet-client.key"),
                    Some(true)
                ),
            ]
        );
        let args = c.args.clone().unwrap_or_default();
        assert!(args.contains(&"--kube-apiserver-arg=kubelet-client-key=/etc/tenantplane/kubelet-client/kubelet-client.key".to_owned()));
        let env = &c.env.clone().unwrap_or_default()[0];
        let token = env
            .value_from
            .as_ref()
            .and_then(|v| v.secret_key_ref.as_ref())
            .unwrap();
        assert_eq!(
            (env.name.as_str(), token.name.as_str(), token.key.as_str()),
            ("K3S_TOKEN", "dev-cp-bootstrap", "token")
        );
        let secret = volumes[0].secret.as_ref().unwrap();
        assert_eq!(secret.secret_name.as_deref(), Some("dev-cp-bootstrap"));
        assert_eq!(secret.default_mode, Some(0o400));

        let (without, _) = pod_parts(&names, &tc, version, "10.0.0.0/24", false);
        let text = serde_json::to_string(&without[0]).unwrap();
        assert!(!text.contains("kubelet-client"), "{text}");
        let default_image = pod_parts(
            &names,
            &super::tests::tc(serde_json::json!({})),
            version,
            "10.0.0.0/24",
            false,
        )
        .0;
        assert_eq!(default_image[0].image.as_deref(), Some(version.k3s_image));
    }
}
