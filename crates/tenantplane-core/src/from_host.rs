//! fromHost sync: host objects made visible, read-only, in the tenant.
//!
//! Which host objects may cross is an allow-list: the cluster-scoped kinds a tenant
//! needs to schedule and bind (StorageClass, IngressClass, PriorityClass,
//! RuntimeClass, CSIDriver) and cluster-scoped custom resources, all copied under
//! their own names; namespaced objects only when a SyncPolicy maps them by name,
//! and a Secret only when the tenant's IsolationProfile also names it.

use std::collections::BTreeMap;
use std::fmt;

use serde_json::{Map, Value};

use crate::kinds::GroupKind;
use crate::metadata::{LABEL_MANAGED_BY, MANAGED_BY_VALUE};

/// Marks a tenant object as a fromHost copy (with the managed-by label).
pub const LABEL_FROM_HOST: &str = "tenantplane.io/from-host";
/// Names the host object a tenant copy comes from: `<Kind.group> <namespace>/<name>`
/// (`<Kind.group> <name>` for cluster-scoped kinds).
pub const ANNOTATION_HOST_SOURCE: &str = "tenantplane.io/host-source";

/// Cluster-scoped built-in kinds a tenant may see fromHost.
pub const CLUSTER_SCOPED_ALLOW_LIST: &[(&str, &str)] = &[
    ("storage.k8s.io", "StorageClass"),
    ("networking.k8s.io", "IngressClass"),
    ("scheduling.k8s.io", "PriorityClass"),
    ("node.k8s.io", "RuntimeClass"),
    ("storage.k8s.io", "CSIDriver"),
];

/// Why a kind or a mapping cannot be synced fromHost.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FromHostError {
    #[error(
        "{0} is not on the fromHost allow-list: cluster-scoped kinds may be StorageClass, IngressClass, PriorityClass, RuntimeClass, CSIDriver or a custom resource"
    )]
    NotAllowed(GroupKind),
    #[error(
        "{0} is namespaced: list the host objects to copy in mappings (hostNamespace/name -> tenantNamespace/name)"
    )]
    NeedsMappings(GroupKind),
    #[error("{0} is cluster-scoped: copy it by selector, mappings are for namespaced kinds")]
    MappingsOnClusterScoped(GroupKind),
    #[error("mapping {0:?} is not of the form hostNamespace/name -> tenantNamespace/name")]
    BadMapping(String),
    #[error(
        "host Secret {0} is not listed in the IsolationProfile's controls.fromHostSecrets; host Secrets are never exposed otherwise"
    )]
    SecretNotAllowed(String),
}

/// Whether a group is one of Kubernetes' own (a built-in kind).
fn is_builtin_group(group: &str) -> bool {
    group.is_empty() || group == "k8s.io" || group.ends_with(".k8s.io")
}

/// Checks a fromHost kind: cluster-scoped kinds must be allowed, namespaced ones
/// need mappings.
pub fn check_kind(
    group_kind: &GroupKind,
    cluster_scoped: bool,
    has_mappings: bool,
) -> Result<(), FromHostError> {
    if cluster_scoped {
        let allowed = CLUSTER_SCOPED_ALLOW_LIST
            .iter()
            .any(|(g, k)| *g == group_kind.group && *k == group_kind.kind)
            || !is_builtin_group(&group_kind.group);
        if !allowed {
            return Err(FromHostError::NotAllowed(group_kind.clone()));
        }
        if has_mappings {
            return Err(FromHostError::MappingsOnClusterScoped(group_kind.clone()));
        }
    } else if !has_mappings {
        return Err(FromHostError::NeedsMappings(group_kind.clone()));
    }
    Ok(())
}

/// One namespaced host object and where its copy appears in the tenant.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Mapping {
    pub host_namespace: String,
    pub host_name: String,
    pub tenant_namespace: String,
    pub tenant_name: String,
}

impl fmt::Display for Mapping {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}/{} -> {}/{}",
            self.host_namespace, self.host_name, self.tenant_namespace, self.tenant_name
        )
    }
}

fn dns_label_ok(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
        && !s.starts_with(['-', '.'])
        && !s.ends_with(['-', '.'])
}

/// Parses `hostNamespace/name -> tenantNamespace/name`.
pub fn parse_mapping(text: &str) -> Result<Mapping, FromHostError> {
    let bad = || FromHostError::BadMapping(text.to_owned());
    let (from, to) = text.split_once("->").ok_or_else(bad)?;
    let (host_namespace, host_name) = from.trim().split_once('/').ok_or_else(bad)?;
    let (tenant_namespace, tenant_name) = to.trim().split_once('/').ok_or_else(bad)?;
    let parts = [host_namespace, host_name, tenant_namespace, tenant_name];
    if !parts.iter().all(|p| dns_label_ok(p)) {
        return Err(bad());
    }
    Ok(Mapping {
        host_namespace: host_namespace.to_owned(),
        host_name: host_name.to_owned(),
        tenant_namespace: tenant_namespace.to_owned(),
        tenant_name: tenant_name.to_owned(),
    })
}

/// A Secret mapping is allowed only when the profile names the host Secret.
pub fn check_secret(
    group_kind: &GroupKind,
    mapping: &Mapping,
    allowed: &[String],
) -> Result<(), FromHostError> {
    if *group_kind != GroupKind::new("", "Secret") {
        return Ok(());
    }
    let name = format!("{}/{}", mapping.host_namespace, mapping.host_name);
    if allowed.contains(&name) {
        Ok(())
    } else {
        Err(FromHostError::SecretNotAllowed(name))
    }
}

/// The `host-source` annotation's value for a host object.
pub fn host_source(group_kind: &GroupKind, namespace: Option<&str>, name: &str) -> String {
    match namespace {
        Some(ns) => format!("{group_kind} {ns}/{name}"),
        None => format!("{group_kind} {name}"),
    }
}

/// Fields of the host object that are the host's own and never copied.
const HOST_ONLY_TOP_LEVEL: &[&str] = &["metadata", "status"];

/// The tenant copy of a host object: its data (everything but metadata and
/// status), its labels and annotations (tenantplane's own and kubectl's
/// last-applied left out), stamped as a fromHost copy of `source`.
pub fn tenant_copy(
    host: &Value,
    api_version: &str,
    kind: &str,
    tenant_namespace: Option<&str>,
    tenant_name: &str,
    source: &str,
) -> Value {
    let mut out = Map::new();
    if let Some(fields) = host.as_object() {
        for (key, value) in fields {
            if !HOST_ONLY_TOP_LEVEL.contains(&key.as_str()) {
                out.insert(key.clone(), value.clone());
            }
        }
    }
    out.insert("apiVersion".into(), Value::String(api_version.to_owned()));
    out.insert("kind".into(), Value::String(kind.to_owned()));
    let copy_map = |pointer: &str| -> BTreeMap<String, Value> {
        host.pointer(pointer)
            .and_then(Value::as_object)
            .map(|m| {
                m.iter()
                    .filter(|(k, _)| {
                        !k.starts_with("tenantplane.io/")
                            && k.as_str() != "kubectl.kubernetes.io/last-applied-configuration"
                    })
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect()
            })
            .unwrap_or_default()
    };
    let mut labels = copy_map("/metadata/labels");
    labels.insert(
        LABEL_MANAGED_BY.into(),
        Value::String(MANAGED_BY_VALUE.into()),
    );
    labels.insert(LABEL_FROM_HOST.into(), Value::String("true".into()));
    let mut annotations = copy_map("/metadata/annotations");
    annotations.insert(
        ANNOTATION_HOST_SOURCE.into(),
        Value::String(source.to_owned()),
    );
    let mut metadata = Map::new();
    metadata.insert("name".into(), Value::String(tenant_name.to_owned()));
    if let Some(ns) = tenant_namespace {
        metadata.insert("namespace".into(), Value::String(ns.to_owned()));
    }
    metadata.insert(
        "labels".into(),
        serde_json::to_value(labels).unwrap_or_default(),
    );
    metadata.insert(
        "annotations".into(),
        serde_json::to_value(annotations).unwrap_or_default(),
    );
    out.insert("metadata".into(), Value::Object(metadata));
    Value::Object(out)
}

/// The host source a tenant fromHost copy names, if it names one.
pub fn source_of(tenant: &Value) -> Option<&str> {
    tenant
        .pointer(&format!(
            "/metadata/annotations/{}",
            ANNOTATION_HOST_SOURCE.replace('/', "~1")
        ))
        .and_then(Value::as_str)
}

/// Whether a tenant object is a fromHost copy of `source`.
pub fn is_copy_of(tenant: &Value, source: &str) -> bool {
    source_of(tenant) == Some(source)
}

/// What differs between the desired copy and the tenant's object: data fields
/// and labels/annotations, by name. Empty means up to date.
pub fn drift(desired: &Value, actual: &Value) -> Vec<String> {
    let mut out = Vec::new();
    let empty = Map::new();
    let d = desired.as_object().unwrap_or(&empty);
    let a = actual.as_object().unwrap_or(&empty);
    let mut keys: Vec<&String> = d.keys().chain(a.keys()).collect();
    keys.sort();
    keys.dedup();
    for key in keys {
        if HOST_ONLY_TOP_LEVEL.contains(&key.as_str()) || key == "apiVersion" || key == "kind" {
            continue;
        }
        if d.get(key) != a.get(key) {
            out.push(key.clone());
        }
    }
    for (map, pointer) in [
        ("labels", "/metadata/labels"),
        ("annotations", "/metadata/annotations"),
    ] {
        let want = desired
            .pointer(pointer)
            .cloned()
            .unwrap_or(Value::Object(Map::new()));
        let have = actual
            .pointer(pointer)
            .cloned()
            .unwrap_or(Value::Object(Map::new()));
        if want != have {
            out.push(format!("metadata.{map}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_allow_list_decides_which_cluster_scoped_kinds_cross() {
        let sc = GroupKind::new("storage.k8s.io", "StorageClass");
        assert_eq!(check_kind(&sc, true, false), Ok(()));
        let custom = GroupKind::new("example.com", "Flavor");
        assert_eq!(check_kind(&custom, true, false), Ok(()));
        for denied in [
            GroupKind::new("rbac.authorization.k8s.io", "ClusterRole"),
            GroupKind::new("", "Node"),
            GroupKind::new("", "Namespace"),
            GroupKind::new("apiextensions.k8s.io", "CustomResourceDefinition"),
            GroupKind::new(
                "admissionregistration.k8s.io",
                "ValidatingWebhookConfiguration",
            ),
        ] {
            assert!(
                matches!(
                    check_kind(&denied, true, false),
                    Err(FromHostError::NotAllowed(_))
                ),
                "{denied}"
            );
        }
        let cm = GroupKind::new("", "ConfigMap");
        assert_eq!(
            check_kind(&cm, false, false),
            Err(FromHostError::NeedsMappings(cm.clone()))
        );
        assert_eq!(check_kind(&cm, false, true), Ok(()));
        assert!(check_kind(&sc, true, true).is_err());
    }

    #[test]
    fn mappings_parse_and_bad_ones_are_errors() {
        assert_eq!(
            parse_mapping("shared/ca-bundle -> default/ca").unwrap(),
            Mapping {
                host_namespace: "shared".into(),
                host_name: "ca-bundle".into(),
                tenant_namespace: "default".into(),
                tenant_name: "ca".into()
            }
        );
        for bad in [
            "",
            "a/b",
            "a -> b/c",
            "a/b -> c",
            "A/b -> c/d",
            "a/b/c -> d/e",
            "a/ -> c/d",
            "../x -> a/b",
        ] {
            assert!(parse_mapping(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_host_secret_crosses_only_when_the_profile_names_it() {
        let secret = GroupKind::new("", "Secret");
        let m = parse_mapping("shared/registry -> default/registry").unwrap();
        assert!(matches!(
            check_secret(&secret, &m, &[]),
            Err(FromHostError::SecretNotAllowed(_))
        ));
        assert!(check_secret(&secret, &m, &["shared/other".into()]).is_err());
        assert_eq!(
            check_secret(&secret, &m, &["shared/registry".into()]),
            Ok(())
        );
        assert_eq!(
            check_secret(&GroupKind::new("", "ConfigMap"), &m, &[]),
            Ok(())
        );
    }

    #[test]
    fn the_copy_keeps_data_and_user_metadata_and_names_its_source() {
        let host = json!({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
            "metadata": {"name": "fast", "uid": "u1", "resourceVersion": "7",
                "labels": {"tier": "ssd", "tenantplane.io/tenant": "x"},
                "annotations": {"storageclass.kubernetes.io/is-default-class": "true",
                    "kubectl.kubernetes.io/last-applied-configuration": "{}"}},
            "provisioner": "example.com/csi", "parameters": {"type": "ssd"}, "reclaimPolicy": "Delete"});
        let source = host_source(
            &GroupKind::new("storage.k8s.io", "StorageClass"),
            None,
            "fast",
        );
        let copy = tenant_copy(
            &host,
            "storage.k8s.io/v1",
            "StorageClass",
            None,
            "fast",
            &source,
        );
        assert_eq!(copy["provisioner"], "example.com/csi");
        assert_eq!(copy["metadata"]["name"], "fast");
        assert!(copy["metadata"].get("uid").is_none());
        assert!(copy["metadata"].get("resourceVersion").is_none());
        assert_eq!(copy["metadata"]["labels"]["tier"], "ssd");
        assert!(
            copy["metadata"]["labels"]
                .get("tenantplane.io/tenant")
                .is_none()
        );
        assert_eq!(copy["metadata"]["labels"][LABEL_FROM_HOST], "true");
        assert_eq!(
            copy["metadata"]["annotations"][ANNOTATION_HOST_SOURCE],
            "StorageClass.storage.k8s.io fast"
        );
        assert!(
            copy["metadata"]["annotations"]
                .get("kubectl.kubernetes.io/last-applied-configuration")
                .is_none()
        );
        assert!(is_copy_of(&copy, &source));
        assert_eq!(source_of(&copy), Some(source.as_str()));
        assert_eq!(source_of(&host), None);
        assert!(drift(&copy, &copy).is_empty());

        // A tenant edit shows up as drift (the server's own fields do not).
        let mut edited = copy.clone();
        edited["parameters"]["type"] = json!("hdd");
        edited["metadata"]["uid"] = json!("t1");
        edited["metadata"]["labels"]["mine"] = json!("x");
        assert_eq!(drift(&copy, &edited), vec!["parameters", "metadata.labels"]);
    }
}
