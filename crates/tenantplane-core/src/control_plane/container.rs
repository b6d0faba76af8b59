//! Container parts both distros' API servers share: the HTTPS port, the readiness
//! probe on `/readyz`, bounded resources and no privilege escalation.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    ContainerPort, HTTPGetAction, Probe, ResourceRequirements, SecurityContext,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::CONTROL_PLANE_PORT;

/// The tenant API server's port, named `https` (the Services target it by number).
pub(super) fn api_server_ports() -> Option<Vec<ContainerPort>> {
    Some(vec![ContainerPort {
        name: Some("https".to_owned()),
        container_port: CONTROL_PLANE_PORT,
        protocol: Some("TCP".to_owned()),
        ..ContainerPort::default()
    }])
}

/// Ready once the API server answers `/readyz` (the controller waits for this).
pub(super) fn api_server_readiness() -> Option<Probe> {
    Some(Probe {
        http_get: Some(HTTPGetAction {
            path: Some("/readyz".to_owned()),
            port: IntOrString::Int(CONTROL_PLANE_PORT),
            scheme: Some("HTTPS".to_owned()),
            ..HTTPGetAction::default()
        }),
        period_seconds: Some(5),
        timeout_seconds: Some(3),
        failure_threshold: Some(3),
        ..Probe::default()
    })
}

fn quantities(pairs: &[(&str, &str)]) -> BTreeMap<String, Quantity> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), Quantity((*v).to_owned())))
        .collect()
}

/// Requests of CPU and memory, and a limit of memory.
pub(super) fn resources(
    request_cpu: &str,
    request_memory: &str,
    limit_memory: &str,
) -> ResourceRequirements {
    ResourceRequirements {
        requests: Some(quantities(&[
            ("cpu", request_cpu),
            ("memory", request_memory),
        ])),
        limits: Some(quantities(&[("memory", limit_memory)])),
        ..ResourceRequirements::default()
    }
}

pub(super) fn no_escalation() -> Option<SecurityContext> {
    Some(SecurityContext {
        allow_privilege_escalation: Some(false),
        ..SecurityContext::default()
    })
}
