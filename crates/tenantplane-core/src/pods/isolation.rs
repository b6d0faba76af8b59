//! The IsolationProfile applied to one Pod: what it refuses, by field.

use serde_json::Value;
use tenantplane_api::{EffectiveControls, PolicyRules};

use crate::policy_rules::CompiledRules;

use super::refs::CONTAINER_LISTS;

/// The controls of an IsolationProfile that act on each synced Pod.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodControls {
    /// Stamped on every host Pod.
    pub runtime_class_name: Option<String>,
    pub block_host_path_volumes: bool,
    /// Also refuses hostNetwork, hostPID and hostIPC.
    pub block_privileged_containers: bool,
    /// The profile's `spec.rules`: images and pull policies of every container.
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
        rule_refusals(pod, rules, &mut refusals);
    }
    refusals
}

/// The profile's policy rules for one Pod; rules that do not compile (stored while
/// the webhook was down) refuse every Pod rather than let it through unchecked.
fn rule_refusals(pod: &Value, rules: &PolicyRules, refusals: &mut Vec<PodRefusal>) {
    match CompiledRules::compile("spec.rules", rules) {
        Ok(compiled) => {
            refusals.extend(
                compiled
                    .check_pod(pod)
                    .into_iter()
                    .map(|broken| PodRefusal {
                        field: broken.field,
                        control: broken.rule,
                    }),
            )
        }
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
