//! Every ConfigMap, Secret and PersistentVolumeClaim a Pod references, where, and
//! whether the reference is optional. Each reference carries the JSON pointer of
//! the name it read, so the rewrite touches exactly the places extraction found.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::kinds::GroupKind;

/// A kind a Pod can depend on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DependencyKind {
    ConfigMap,
    Secret,
    PersistentVolumeClaim,
}

impl DependencyKind {
    pub fn as_str(self) -> &'static str {
        match self {
            DependencyKind::ConfigMap => "ConfigMap",
            DependencyKind::Secret => "Secret",
            DependencyKind::PersistentVolumeClaim => "PersistentVolumeClaim",
        }
    }

    pub fn group_kind(self) -> GroupKind {
        GroupKind::new("", self.as_str())
    }
}

impl std::fmt::Display for DependencyKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One place in a Pod that names a ConfigMap, Secret or PVC of the Pod's namespace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodReference {
    pub kind: DependencyKind,
    pub name: String,
    /// A missing optional reference does not stop the Pod.
    pub optional: bool,
    /// Where, as a user reads it: `spec.containers[0].env[1].valueFrom.secretKeyRef`.
    pub field: String,
    /// The JSON pointer of the name string, for the rewrite.
    pub pointer: String,
}

/// Volume sources that name a Secret of the Pod's namespace, and the key of the name.
const VOLUME_SECRET_REFS: &[(&str, &str, &str)] = &[
    // (volume source, reference object, name key)
    ("csi", "nodePublishSecretRef", "name"),
    ("cephfs", "secretRef", "name"),
    ("rbd", "secretRef", "name"),
    ("flexVolume", "secretRef", "name"),
    ("iscsi", "secretRef", "name"),
    ("scaleIO", "secretRef", "name"),
    ("storageos", "secretRef", "name"),
];

/// The containers of a Pod: regular, init and ephemeral.
pub const CONTAINER_LISTS: [&str; 3] = ["containers", "initContainers", "ephemeralContainers"];

/// Every reference of `pod` (a Pod as JSON), in spec order. Hostile input never
/// panics: anything not shaped like a reference is ignored here, and a name that is
/// not a string or not a valid name is reported by [`crate::pods::HostPodError`].
pub fn pod_references(pod: &Value) -> Vec<PodReference> {
    let mut out = Vec::new();
    let Some(spec) = pod.get("spec") else {
        return out;
    };
    for (i, volume) in array(spec, "volumes") {
        volume_references(
            volume,
            &format!("spec.volumes[{i}]"),
            &format!("/spec/volumes/{i}"),
            &mut out,
        );
    }
    for list in CONTAINER_LISTS {
        for (j, container) in array(spec, list) {
            let field = format!("spec.{list}[{j}]");
            let pointer = format!("/spec/{list}/{j}");
            for (k, env) in array(container, "env") {
                let Some(from) = env.get("valueFrom") else {
                    continue;
                };
                for (key, kind) in [
                    ("configMapKeyRef", DependencyKind::ConfigMap),
                    ("secretKeyRef", DependencyKind::Secret),
                ] {
                    push(
                        &mut out,
                        kind,
                        from.get(key),
                        &format!("{field}.env[{k}].valueFrom.{key}"),
                        &format!("{pointer}/env/{k}/valueFrom/{key}"),
                        "name",
                        true,
                    );
                }
            }
            for (k, env_from) in array(container, "envFrom") {
                for (key, kind) in [
                    ("configMapRef", DependencyKind::ConfigMap),
                    ("secretRef", DependencyKind::Secret),
                ] {
                    push(
                        &mut out,
                        kind,
                        env_from.get(key),
                        &format!("{field}.envFrom[{k}].{key}"),
                        &format!("{pointer}/envFrom/{k}/{key}"),
                        "name",
                        true,
                    );
                }
            }
        }
    }
    for (i, secret) in array(spec, "imagePullSecrets") {
        // The kubelet pulls without a pull secret that does not exist: optional.
        push_named(
            &mut out,
            DependencyKind::Secret,
            secret,
            &format!("spec.imagePullSecrets[{i}]"),
            &format!("/spec/imagePullSecrets/{i}"),
            "name",
            true,
        );
    }
    out
}

fn volume_references(volume: &Value, field: &str, pointer: &str, out: &mut Vec<PodReference>) {
    push(
        out,
        DependencyKind::ConfigMap,
        volume.get("configMap"),
        &format!("{field}.configMap"),
        &format!("{pointer}/configMap"),
        "name",
        true,
    );
    push(
        out,
        DependencyKind::Secret,
        volume.get("secret"),
        &format!("{field}.secret"),
        &format!("{pointer}/secret"),
        "secretName",
        true,
    );
    push(
        out,
        DependencyKind::PersistentVolumeClaim,
        volume.get("persistentVolumeClaim"),
        &format!("{field}.persistentVolumeClaim"),
        &format!("{pointer}/persistentVolumeClaim"),
        "claimName",
        false,
    );
    if let Some(projected) = volume.get("projected") {
        for (s, source) in array(projected, "sources") {
            for (key, kind) in [
                ("configMap", DependencyKind::ConfigMap),
                ("secret", DependencyKind::Secret),
            ] {
                push(
                    out,
                    kind,
                    source.get(key),
                    &format!("{field}.projected.sources[{s}].{key}"),
                    &format!("{pointer}/projected/sources/{s}/{key}"),
                    "name",
                    true,
                );
            }
        }
    }
    for (source, reference, key) in VOLUME_SECRET_REFS {
        let Some(r) = volume.get(*source).and_then(|s| s.get(*reference)) else {
            continue;
        };
        push_named(
            out,
            DependencyKind::Secret,
            r,
            &format!("{field}.{source}.{reference}"),
            &format!("{pointer}/{source}/{reference}"),
            key,
            false,
        );
    }
    // azureFile names its Secret directly in the volume source.
    if let Some(azure) = volume.get("azureFile") {
        push_named(
            out,
            DependencyKind::Secret,
            azure,
            &format!("{field}.azureFile"),
            &format!("{pointer}/azureFile"),
            "secretName",
            false,
        );
    }
}

/// A reference object that may say `optional: true`.
fn push(
    out: &mut Vec<PodReference>,
    kind: DependencyKind,
    reference: Option<&Value>,
    field: &str,
    pointer: &str,
    key: &str,
    can_be_optional: bool,
) {
    let Some(reference) = reference else { return };
    let optional =
        can_be_optional && reference.get("optional").and_then(Value::as_bool) == Some(true);
    push_named(out, kind, reference, field, pointer, key, optional);
}

#[allow(clippy::too_many_arguments)]
fn push_named(
    out: &mut Vec<PodReference>,
    kind: DependencyKind,
    reference: &Value,
    field: &str,
    pointer: &str,
    key: &str,
    optional: bool,
) {
    let Some(name) = reference.get(key) else {
        return;
    };
    out.push(PodReference {
        kind,
        // A non-string name is kept as its JSON text, so validation refuses it by name.
        name: name
            .as_str()
            .map_or_else(|| name.to_string(), str::to_owned),
        optional,
        field: format!("{field}.{key}"),
        pointer: format!("{pointer}/{}", escape_pointer(key)),
    });
}

fn escape_pointer(token: &str) -> String {
    token.replace('~', "~0").replace('/', "~1")
}

fn array<'a>(value: &'a Value, key: &str) -> impl Iterator<Item = (usize, &'a Value)> {
    value
        .get(key)
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
}

/// One dependency of a Pod: a kind and a name in the Pod's namespace, required when
/// any reference to it is not optional.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Dependency {
    pub kind: DependencyKind,
    pub name: String,
}

/// The distinct dependencies of a Pod, each with whether it is required and the
/// first field that requires (or names) it.
pub fn dependencies(references: &[PodReference]) -> BTreeMap<Dependency, (bool, String)> {
    let mut out: BTreeMap<Dependency, (bool, String)> = BTreeMap::new();
    for r in references {
        let key = Dependency {
            kind: r.kind,
            name: r.name.clone(),
        };
        match out.get_mut(&key) {
            Some((required, field)) => {
                if !r.optional && !*required {
                    *required = true;
                    field.clone_from(&r.field);
                }
            }
            None => {
                out.insert(key, (!r.optional, r.field.clone()));
            }
        }
    }
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use serde_json::json;

    use super::*;

    /// A Pod with one reference of every type, each named after where it is.
    pub(crate) fn every_reference_pod() -> Value {
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web", "namespace": "shop", "uid": "pod-uid"},
            "spec": {
                "volumes": [
                    {"name": "v-cm", "configMap": {"name": "vol-cm"}},
                    {"name": "v-secret", "secret": {"secretName": "vol-secret", "optional": true}},
                    {"name": "v-pvc", "persistentVolumeClaim": {"claimName": "data"}},
                    {"name": "v-proj", "projected": {"sources": [
                        {"configMap": {"name": "proj-cm"}},
                        {"secret": {"name": "proj-secret", "optional": false}},
                        {"downwardAPI": {"items": []}}
                    ]}},
                    {"name": "v-csi", "csi": {"driver": "x.csi", "nodePublishSecretRef": {"name": "csi-secret"}}},
                    {"name": "v-ceph", "cephfs": {"monitors": ["m"], "secretRef": {"name": "ceph-secret"}}},
                    {"name": "v-azure", "azureFile": {"secretName": "azure-secret", "shareName": "s"}},
                    {"name": "v-empty", "emptyDir": {}}
                ],
                "containers": [{
                    "name": "app", "image": "nginx",
                    "env": [
                        {"name": "A", "value": "plain"},
                        {"name": "B", "valueFrom": {"configMapKeyRef": {"name": "env-cm", "key": "k"}}},
                        {"name": "C", "valueFrom": {"secretKeyRef": {"name": "env-secret", "key": "k", "optional": true}}},
                        {"name": "D", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}
                    ],
                    "envFrom": [{"configMapRef": {"name": "envfrom-cm"}}, {"secretRef": {"name": "envfrom-secret"}}]
                }],
                "initContainers": [{"name": "init", "image": "busybox",
                    "envFrom": [{"configMapRef": {"name": "init-cm", "optional": true}}]}],
                "ephemeralContainers": [{"name": "debug", "image": "busybox",
                    "env": [{"name": "E", "valueFrom": {"secretKeyRef": {"name": "eph-secret", "key": "k"}}}]}],
                "imagePullSecrets": [{"name": "pull-secret"}]
            }
        })
    }

    #[test]
    fn every_reference_type_is_found_with_its_field_and_optional_flag() {
        let refs = pod_references(&every_reference_pod());
        let got: Vec<(DependencyKind, &str, bool, &str)> = refs
            .iter()
            .map(|r| (r.kind, r.name.as_str(), r.optional, r.field.as_str()))
            .collect();
        use DependencyKind::*;
        assert_eq!(
            got,
            vec![
                (ConfigMap, "vol-cm", false, "spec.volumes[0].configMap.name"),
                (
                    Secret,
                    "vol-secret",
                    true,
                    "spec.volumes[1].secret.secretName"
                ),
                (
                    PersistentVolumeClaim,
                    "data",
                    false,
                    "spec.volumes[2].persistentVolumeClaim.claimName"
                ),
                (
                    ConfigMap,
                    "proj-cm",
                    false,
                    "spec.volumes[3].projected.sources[0].configMap.name"
                ),
                (
                    Secret,
                    "proj-secret",
                    false,
                    "spec.volumes[3].projected.sources[1].secret.name"
                ),
                (
                    Secret,
                    "csi-secret",
                    false,
                    "spec.volumes[4].csi.nodePublishSecretRef.name"
                ),
                (
                    Secret,
                    "ceph-secret",
                    false,
                    "spec.volumes[5].cephfs.secretRef.name"
                ),
                (
                    Secret,
                    "azure-secret",
                    false,
                    "spec.volumes[6].azureFile.secretName"
                ),
                (
                    ConfigMap,
                    "env-cm",
                    false,
                    "spec.containers[0].env[1].valueFrom.configMapKeyRef.name"
                ),
                (
                    Secret,
                    "env-secret",
                    true,
                    "spec.containers[0].env[2].valueFrom.secretKeyRef.name"
                ),
                (
                    ConfigMap,
                    "envfrom-cm",
                    false,
                    "spec.containers[0].envFrom[0].configMapRef.name"
                ),
                (
                    Secret,
                    "envfrom-secret",
                    false,
                    "spec.containers[0].envFrom[1].secretRef.name"
                ),
                (
                    ConfigMap,
                    "init-cm",
                    true,
                    "spec.initContainers[0].envFrom[0].configMapRef.name"
                ),
                (
                    Secret,
                    "eph-secret",
                    false,
                    "spec.ephemeralContainers[0].env[0].valueFrom.secretKeyRef.name"
                ),
                (Secret, "pull-secret", true, "spec.imagePullSecrets[0].name"),
            ]
        );
        let pod = every_reference_pod();
        for r in &refs {
            assert_eq!(
                pod.pointer(&r.pointer).and_then(Value::as_str),
                Some(r.name.as_str()),
                "{}",
                r.field
            );
        }
    }

    #[test]
    fn a_dependency_is_required_when_any_reference_requires_it() {
        let pod = json!({"spec": {
            "volumes": [{"name": "a", "configMap": {"name": "shared", "optional": true}}],
            "containers": [{"name": "c", "envFrom": [{"configMapRef": {"name": "shared"}}]}]
        }});
        let deps = dependencies(&pod_references(&pod));
        let (required, field) = &deps[&Dependency {
            kind: DependencyKind::ConfigMap,
            name: "shared".into(),
        }];
        assert!(*required);
        assert_eq!(field, "spec.containers[0].envFrom[0].configMapRef.name");
    }

    #[test]
    fn garbage_is_ignored_not_a_panic() {
        for pod in [
            json!(null),
            json!({"spec": 3}),
            json!({"spec": {"volumes": "x", "containers": [1, null, {"env": 2}]}}),
            json!({"spec": {"volumes": [{"configMap": 5}], "containers": [{"env": [{"valueFrom": {"secretKeyRef": []}}]}]}}),
        ] {
            let _ = pod_references(&pod);
        }
        let refs = pod_references(&json!({"spec": {"volumes": [{"configMap": {"name": 7}}]}}));
        assert_eq!(refs[0].name, "7");
    }
}
