//! The StatefulSet that runs a control plane and the Services in front of it.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{StatefulSet, StatefulSetSpec};
use k8s_openapi::api::core::v1::{
    Container, PersistentVolumeClaim, PersistentVolumeClaimSpec, PodSecurityContext, PodSpec,
    PodTemplateSpec, SeccompProfile, Service, ServicePort, ServiceSpec, Volume,
    VolumeResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use tenantplane_api::{Distro, TenantCluster};

use super::names::{
    ControlPlaneNames, bootstrap_name, headless_name, load_balancer_name, serving_name,
};
use super::{CONTROL_PLANE_PORT, k3s, k8s};
use crate::versions::SupportedVersion;

/// The control plane's StatefulSet for its distro. `kubelet_client`: the
/// bootstrap holds a kubelet client certificate (older ones do not).
pub fn statefulset(
    names: &ControlPlaneNames,
    tc: &TenantCluster,
    version: &SupportedVersion,
    service_cidr: &str,
    kubelet_client: bool,
) -> StatefulSet {
    let (containers, volumes) = match tc.spec.control_plane.distro {
        Distro::K3s => k3s::pod_parts(names, tc, version, service_cidr, kubelet_client),
        Distro::K8s => k8s::pod_parts(
            &k8s::Images::of(tc, version),
            service_cidr,
            kubelet_client,
            &bootstrap_name(&names.tenant),
            &serving_name(&names.tenant),
        ),
    };
    statefulset_with(names, tc, containers, volumes)
}

/// The StatefulSet around a distro's containers and volumes: one replica, its
/// data on a PVC from `controlPlane.storage`.
fn statefulset_with(
    names: &ControlPlaneNames,
    tc: &TenantCluster,
    containers: Vec<Container>,
    volumes: Vec<Volume>,
) -> StatefulSet {
    let storage = &tc.spec.control_plane.storage;
    let labelled = |name: Option<String>, namespace: Option<String>| ObjectMeta {
        name,
        namespace,
        labels: Some(names.labels()),
        ..ObjectMeta::default()
    };
    StatefulSet {
        metadata: labelled(
            Some(names.cp_name.clone()),
            Some(names.cp_namespace.clone()),
        ),
        spec: Some(StatefulSetSpec {
            // A k3s server on SQLite, or one etcd member, runs exactly one replica.
            replicas: Some(1),
            service_name: Some(headless_name(&names.tenant)),
            selector: LabelSelector {
                match_labels: Some(names.selector()),
                ..LabelSelector::default()
            },
            template: PodTemplateSpec {
                metadata: Some(labelled(None, None)),
                spec: Some(PodSpec {
                    // The control plane never talks to the host's API server.
                    automount_service_account_token: Some(false),
                    enable_service_links: Some(false),
                    security_context: Some(PodSecurityContext {
                        seccomp_profile: Some(SeccompProfile {
                            type_: "RuntimeDefault".to_owned(),
                            ..SeccompProfile::default()
                        }),
                        ..PodSecurityContext::default()
                    }),
                    containers,
                    volumes: Some(volumes),
                    ..PodSpec::default()
                }),
            },
            volume_claim_templates: Some(vec![PersistentVolumeClaim {
                metadata: labelled(Some("data".to_owned()), None),
                spec: Some(PersistentVolumeClaimSpec {
                    access_modes: Some(vec!["ReadWriteOnce".to_owned()]),
                    resources: Some(VolumeResourceRequirements {
                        requests: Some(BTreeMap::from([(
                            "storage".to_owned(),
                            storage.size.clone(),
                        )])),
                        ..VolumeResourceRequirements::default()
                    }),
                    storage_class_name: storage.storage_class_name.clone(),
                    ..PersistentVolumeClaimSpec::default()
                }),
                ..PersistentVolumeClaim::default()
            }]),
            ..StatefulSetSpec::default()
        }),
        ..StatefulSet::default()
    }
}

/// The images a StatefulSet runs, in container order (for status messages).
pub fn statefulset_images(sts: &StatefulSet) -> Vec<String> {
    sts.spec
        .iter()
        .filter_map(|s| s.template.spec.as_ref())
        .flat_map(|p| p.containers.iter())
        .filter_map(|c| c.image.clone())
        .collect()
}

/// The distro a live StatefulSet of ours runs, by its first container.
pub fn live_distro(live: &StatefulSet) -> Option<Distro> {
    let first = live
        .spec
        .as_ref()?
        .template
        .spec
        .as_ref()?
        .containers
        .first()?;
    Some(match first.name.as_str() {
        "k3s" => Distro::K3s,
        _ => Distro::K8s,
    })
}

/// The Services of a control plane.
#[derive(Clone, Copy, Debug)]
pub enum ServiceKind<'a> {
    /// The StatefulSet's governing Service.
    Headless,
    /// The in-cluster endpoint.
    ClusterIp,
    /// The optional external endpoint, with the user's annotations.
    LoadBalancer(&'a BTreeMap<String, String>),
}

pub fn service(names: &ControlPlaneNames, kind: ServiceKind<'_>) -> Service {
    let (name, annotations, spec) = match kind {
        ServiceKind::Headless => (
            headless_name(&names.tenant),
            None,
            ServiceSpec {
                cluster_ip: Some("None".to_owned()),
                // Its DNS must resolve while k3s starts (the StatefulSet's identity).
                publish_not_ready_addresses: Some(true),
                ..ServiceSpec::default()
            },
        ),
        ServiceKind::ClusterIp => (
            names.cp_name.clone(),
            None,
            ServiceSpec {
                type_: Some("ClusterIP".to_owned()),
                ..ServiceSpec::default()
            },
        ),
        ServiceKind::LoadBalancer(annotations) => (
            load_balancer_name(&names.tenant),
            Some(annotations.clone()),
            ServiceSpec {
                type_: Some("LoadBalancer".to_owned()),
                ..ServiceSpec::default()
            },
        ),
    };
    Service {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: Some(names.cp_namespace.clone()),
            labels: Some(names.labels()),
            annotations,
            ..ObjectMeta::default()
        },
        spec: Some(ServiceSpec {
            selector: Some(names.selector()),
            ports: Some(vec![ServicePort {
                name: Some("https".to_owned()),
                port: CONTROL_PLANE_PORT,
                target_port: Some(IntOrString::Int(CONTROL_PLANE_PORT)),
                protocol: Some("TCP".to_owned()),
                ..ServicePort::default()
            }]),
            ..spec
        }),
        ..Service::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::versions;

    use super::super::test_tenant_cluster as tc;

    #[test]
    fn the_statefulset_runs_one_replica_with_its_data_on_a_pvc() {
        let tc = tc(serde_json::json!({
            "kubernetesVersion": "v1.31",
            "controlPlane": {"storage": {"storageClassName": "fast", "size": "10Gi"}},
        }));
        let names = ControlPlaneNames::of(&tc).unwrap();
        let version = versions::resolve("v1.31").unwrap();
        let v =
            serde_json::to_value(statefulset(&names, &tc, version, "10.0.0.0/24", true)).unwrap();
        assert_eq!(v["apiVersion"], "apps/v1");
        assert_eq!(v["kind"], "StatefulSet");
        assert_eq!(v["metadata"]["name"], "dev-cp");
        assert_eq!(v["metadata"]["namespace"], "team-dev-cp");
        let spec = &v["spec"];
        assert_eq!(spec["replicas"], 1);
        assert_eq!(spec["serviceName"], "dev-cp-headless");
        assert_eq!(
            spec["selector"]["matchLabels"],
            serde_json::json!(names.selector())
        );
        assert_eq!(
            spec["template"]["metadata"]["labels"],
            serde_json::json!(names.labels())
        );
        let pod = &spec["template"]["spec"];
        assert_eq!(pod["automountServiceAccountToken"], false);
        assert_eq!(pod["enableServiceLinks"], false);
        assert_eq!(
            pod["securityContext"]["seccompProfile"]["type"],
            "RuntimeDefault"
        );
        assert_eq!(pod["containers"][0]["image"], version.k3s_image);
        assert_eq!(
            pod["containers"][0]["securityContext"]["allowPrivilegeEscalation"],
            false
        );
        assert_eq!(
            pod["containers"][0]["readinessProbe"]["httpGet"]["port"],
            6443
        );
        let claim = &spec["volumeClaimTemplates"][0];
        assert_eq!(claim["metadata"]["name"], "data");
        assert_eq!(
            claim["spec"]["accessModes"],
            serde_json::json!(["ReadWriteOnce"])
        );
        assert_eq!(claim["spec"]["storageClassName"], "fast");
        assert_eq!(claim["spec"]["resources"]["requests"]["storage"], "10Gi");

        let default = super::tests::tc(serde_json::json!({}));
        let v = serde_json::to_value(statefulset(&names, &default, version, "10.0.0.0/24", true))
            .unwrap();
        assert!(
            v["spec"]["volumeClaimTemplates"][0]["spec"]
                .get("storageClassName")
                .is_none()
        );
    }

    #[test]
    fn the_distro_is_told_by_the_first_container() {
        let version = versions::resolve("v1.31").unwrap();
        for (distro, spec) in [
            (Distro::K3s, serde_json::json!({})),
            (
                Distro::K8s,
                serde_json::json!({"controlPlane": {"distro": "k8s"}}),
            ),
        ] {
            let tc = tc(spec);
            let names = ControlPlaneNames::of(&tc).unwrap();
            let sts = statefulset(&names, &tc, version, "10.0.0.0/24", false);
            assert_eq!(live_distro(&sts), Some(distro));
            let images = statefulset_images(&sts);
            assert_eq!(images.len(), if distro == Distro::K3s { 1 } else { 3 });
        }
        assert_eq!(live_distro(&StatefulSet::default()), None);
    }

    #[test]
    fn every_service_serves_6443_to_the_control_plane_pod() {
        let names = ControlPlaneNames::new("dev", "team-dev");
        let annotations = BTreeMap::from([("cloud/lb".to_owned(), "internal".to_owned())]);
        for (kind, name, type_) in [
            (ServiceKind::Headless, "dev-cp-headless", None),
            (ServiceKind::ClusterIp, "dev-cp", Some("ClusterIP")),
            (
                ServiceKind::LoadBalancer(&annotations),
                "dev-cp-lb",
                Some("LoadBalancer"),
            ),
        ] {
            let svc = service(&names, kind);
            assert_eq!(svc.metadata.name.as_deref(), Some(name));
            assert_eq!(svc.metadata.namespace.as_deref(), Some("team-dev-cp"));
            assert_eq!(svc.metadata.labels, Some(names.labels()));
            let spec = svc.spec.unwrap_or_default();
            assert_eq!(spec.type_.as_deref(), type_);
            assert_eq!(spec.selector, Some(names.selector()));
            let port = &spec.ports.unwrap_or_default()[0];
            assert_eq!(port.port, 6443);
            assert_eq!(port.target_port, Some(IntOrString::Int(6443)));
            let headless = matches!(kind, ServiceKind::Headless);
            assert_eq!(spec.cluster_ip.as_deref() == Some("None"), headless);
            assert_eq!(spec.publish_not_ready_addresses == Some(true), headless);
            let lb = matches!(kind, ServiceKind::LoadBalancer(_));
            assert_eq!(svc.metadata.annotations == Some(annotations.clone()), lb);
        }
    }
}
