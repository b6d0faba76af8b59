//! The IsolationProfile applied to one Pod (or, for its `spec.rules`, one Service):
//! what it refuses, by field.

use serde_json::Value;
use tenantplane_api::{EffectiveControls, PolicyRules};

use crate::policy_rules::{Broken, CompiledRules, MetadataTarget};

use super::refs::CONTAINER_LISTS;

/// The controls of an IsolationProfile that act on each synced Pod.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodControls {
    /// Stamped on every host Pod.
    pub runtime_class_name: Option<String>,
    pub block_host_path_volumes: bool,
    /// Also refuses hostNetwork, hostPID and hostIPC.
    pub block_privileged_containers: bool,
    /// The profile's `spec.rules`: images and pull policies of every container here;
    /// the Service and `metadata.services` rules in [`check_service`].
    pub rules: Option<PolicyRules>,
}

impl From<&EffectiveControls> for PodControls {
    fn from(c: &EffectiveControls) -> Self {
        Self {
            runtime_class_name: c.runtime_class_name.clone(),
            block_host_path_volumes: c.block_host_path_volumes,
            block_privileged_containers: c.block_privileged_containers,
            rules: None,
        }
    }
}

/// One field of a Pod its IsolationProfile does not allow.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{field} is refused by the IsolationProfile ({control})")]
pub struct PodRefusal {
    /// `spec.volumes[0].hostPath`, `spec.containers[1].securityContext.privileged`, ...
    pub field: String,
    /// The control that refuses it.
    pub control: &'static str,
}

/// Every field of `pod` that `controls` refuse, in spec order; empty when allowed.
pub fn check_pod(pod: &Value, controls: &PodControls) -> Vec<PodRefusal> {
    let mut refusals = Vec::new();
    let Some(spec) = pod.get("spec") else {
        return refusals;
    };
    if controls.block_host_path_volumes {
        let volumes = spec
            .get("volumes")
            .and_then(Value::as_array)
            .into_iter()
            .flatten();
        for (i, volume) in volumes.enumerate() {
            if volume.get("hostPath").is_some() {
                refusals.push(PodRefusal {
                    field: format!("spec.volumes[{i}].hostPath"),
                    control: "blockHostPathVolumes",
                });
            }
        }
    }
    if controls.block_privileged_containers {
        for field in ["hostNetwork", "hostPID", "hostIPC"] {
            if spec.get(field).and_then(Value::as_bool) == Some(true) {
                refusals.push(PodRefusal {
                    field: format!("spec.{field}"),
                    control: "blockPrivilegedContainers",
                });
            }
        }
        for list in CONTAINER_LISTS {
            let containers = spec
                .get(list)
                .and_then(Value::as_array)
                .into_iter()
                .flatten();
            for (j, container) in containers.enumerate() {
                if container
                    .pointer("/securityContext/privileged")
                    .and_then(Value::as_bool)
                    == Some(true)
                {
                    refusals.push(PodRefusal {
                        field: format!("spec.{list}[{j}].securityContext.privileged"),
                        control: "blockPrivilegedContainers",
                    });
                }
            }
        }
    }
    if let Some(rules) = &controls.rules {
        rule_refusals(rules, |c| c.check_pod(pod), &mut refusals);
    }
    refusals
}

/// Every field of a tenant Service that the profile's `spec.rules` refuse: the
/// Service rules (type, `externalIPs`, ExternalName target) and the
/// `metadata.services` key rules. Every label and annotation key the tenant Service
/// carries is checked (the engine has no "before" to compare with, unlike an
/// admission UPDATE), so a key set before the rule existed is refused too.
pub fn check_service(service: &Value, rules: Option<&PolicyRules>) -> Vec<PodRefusal> {
    let mut refusals = Vec::new();
    if let Some(rules) = rules {
        rule_refusals(
            rules,
            |c| {
                let mut broken = c.check_service(service);
                broken.extend(c.check_metadata(MetadataTarget::Service, None, service));
                broken
            },
            &mut refusals,
        );
    }
    refusals
}

/// The profile's policy rules for one object; rules that do not compile (stored
/// while the webhook was down) refuse every object rather than let it through
/// unchecked.
fn rule_refusals(
    rules: &PolicyRules,
    check: impl FnOnce(&CompiledRules) -> Vec<Broken>,
    refusals: &mut Vec<PodRefusal>,
) {
    match CompiledRules::compile("spec.rules", rules) {
        Ok(compiled) => refusals.extend(check(&compiled).into_iter().map(|broken| PodRefusal {
            field: broken.field,
            control: broken.rule,
        })),
        Err(_) => refusals.push(PodRefusal {
            field: "spec".to_owned(),
            control: "rules (the IsolationProfile's spec.rules do not compile)",
        }),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn blocking() -> PodControls {
        PodControls {
            runtime_class_name: None,
            block_host_path_volumes: true,
            block_privileged_containers: true,
            rules: None,
        }
    }

    #[test]
    fn the_profiles_image_rules_refuse_by_field_and_rule() {
        let controls = PodControls {
            rules: Some(
                serde_json::from_value(json!({"images": {"allowedRegistries": ["docker.io"]}}))
                    .unwrap(),
            ),
            ..PodControls::default()
        };
        let pod = json!({"spec": {"containers": [{"name": "a", "image": "nginx"},
            {"name": "b", "image": "quay.io/x:1"}]}});
        assert_eq!(
            check_pod(&pod, &controls),
            [PodRefusal {
                field: "spec.containers[1].image".into(),
                control: "images.allowedRegistries",
            }]
        );
        let broken = PodControls {
            rules: Some(
                serde_json::from_value(
                    json!({"metadata": {"services": {"forbiddenLabels": {"regex": "("}}}}),
                )
                .unwrap(),
            ),
            ..PodControls::default()
        };
        assert_eq!(
            check_pod(&pod, &broken).len(),
            1,
            "broken rules refuse, never panic"
        );
    }

    fn rules(value: serde_json::Value) -> PolicyRules {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn the_profiles_service_rules_refuse_by_field_and_rule() {
        let rules = rules(json!({
            "services": {"allowedTypes": ["ClusterIP", "ExternalName"],
                         "allowedExternalNames": ["*.svc.example.com"]},
            "metadata": {"services": {"forbiddenAnnotations": {"exact": ["lb.example.com/expose"]},
                                      "allowedLabels": {"regex": "app"}}}
        }));
        let refused = |service: serde_json::Value| -> Vec<(String, &'static str)> {
            check_service(&service, Some(&rules))
                .into_iter()
                .map(|r| (r.field, r.control))
                .collect()
        };
        assert!(refused(json!({"metadata": {"labels": {"app": "a"}}, "spec": {}})).is_empty());
        assert!(
            refused(
                json!({"spec": {"type": "ExternalName", "externalName": "db.svc.example.com"}})
            )
            .is_empty()
        );
        assert_eq!(
            refused(json!({"spec": {"type": "NodePort"}})),
            [("spec.type".to_owned(), "services.allowedTypes")]
        );
        assert_eq!(
            refused(json!({"spec": {"type": "ExternalName", "externalName": "evil.example.org"}})),
            [(
                "spec.externalName".to_owned(),
                "services.allowedExternalNames"
            )]
        );
        assert_eq!(
            refused(json!({"spec": {"externalIPs": ["1.2.3.4"]}})),
            [("spec.externalIPs".to_owned(), "services.allowExternalIPs")]
        );
        assert_eq!(
            refused(json!({"metadata": {"labels": {"tier": "x"},
                "annotations": {"lb.example.com/expose": "yes"}}, "spec": {}})),
            [
                (
                    r#"metadata.labels["tier"]"#.to_owned(),
                    "metadata.services.allowedLabels"
                ),
                (
                    r#"metadata.annotations["lb.example.com/expose"]"#.to_owned(),
                    "metadata.services.forbiddenAnnotations"
                ),
            ]
        );
        let service = json!({"spec": {"type": "LoadBalancer", "externalIPs": ["1.2.3.4"]}});
        assert!(
            check_service(&service, None).is_empty(),
            "no rules, nothing refused"
        );
        assert!(
            check_service(&service, Some(&PolicyRules::default())).is_empty(),
            "absent rules restrict nothing"
        );
        let broken = rules_broken();
        assert_eq!(
            check_service(&json!({"spec": {}}), Some(&broken)).len(),
            1,
            "rules that do not compile refuse every Service, never panic"
        );
    }

    fn rules_broken() -> PolicyRules {
        rules(json!({"metadata": {"services": {"forbiddenLabels": {"regex": "("}}}}))
    }

    #[test]
    fn each_refused_field_is_named() {
        let pod = json!({"spec": {
            "hostNetwork": true, "hostPID": true, "hostIPC": false,
            "volumes": [{"name": "ok", "emptyDir": {}}, {"name": "root", "hostPath": {"path": "/"}}],
            "containers": [{"name": "a"}, {"name": "b", "securityContext": {"privileged": true}}],
            "initContainers": [{"name": "i", "securityContext": {"privileged": true}}],
            "ephemeralContainers": [{"name": "e", "securityContext": {"privileged": true}}]
        }});
        let fields: Vec<String> = check_pod(&pod, &blocking())
            .into_iter()
            .map(|r| r.field)
            .collect();
        assert_eq!(
            fields,
            [
                "spec.volumes[1].hostPath",
                "spec.hostNetwork",
                "spec.hostPID",
                "spec.containers[1].securityContext.privileged",
                "spec.initContainers[0].securityContext.privileged",
                "spec.ephemeralContainers[0].securityContext.privileged",
            ]
        );
        assert!(
            check_pod(&pod, &PodControls::default()).is_empty(),
            "nothing blocked, nothing refused"
        );
    }

    #[test]
    fn the_message_names_field_and_control() {
        let pod = json!({"spec": {"volumes": [{"name": "root", "hostPath": {"path": "/"}}]}});
        let refusal = &check_pod(&pod, &blocking())[0];
        assert_eq!(
            refusal.to_string(),
            "spec.volumes[0].hostPath is refused by the IsolationProfile (blockHostPathVolumes)"
        );
    }
}
