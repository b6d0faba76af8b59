//! Reverse-mapping metadata stamped on every host object (vcluster's reverse-mapping labels and annotations, plus the
//! tenant object's UID and group/kind), and the rule that tenant input can never
//! forge it.

use std::collections::BTreeMap;

use crate::kinds::GroupKind;
use crate::naming::SourceName;

/// The domain whose label and annotation keys only tenantplane may write.
pub const DOMAIN: &str = "tenantplane.io";

pub const LABEL_MANAGED_BY: &str = "app.kubernetes.io/managed-by";
pub const MANAGED_BY_VALUE: &str = "tenantplane";
pub const LABEL_TENANT: &str = "tenantplane.io/tenant";
pub const LABEL_VIRTUAL_NAMESPACE: &str = "tenantplane.io/virtual-namespace";
pub const LABEL_KIND: &str = "tenantplane.io/kind";
/// Which part of tenantplane an object belongs to, such as `isolation`.
pub const LABEL_COMPONENT: &str = "tenantplane.io/component";
pub const COMPONENT_ISOLATION: &str = "isolation";
pub const COMPONENT_CONTROL_PLANE: &str = "control-plane";
/// Objects a namespace tenant (`Tenant`) maintains in its member namespaces.
pub const COMPONENT_TENANT: &str = "tenant";
/// On a tenant control-plane namespace: the host namespace whose tenants it serves.
pub const LABEL_CONTROL_PLANE_OF: &str = "tenantplane.io/control-plane-of";

pub const ANNOTATION_VIRTUAL_NAMESPACE: &str = "tenantplane.io/virtual-namespace";
pub const ANNOTATION_VIRTUAL_NAME: &str = "tenantplane.io/virtual-name";
pub const ANNOTATION_VIRTUAL_UID: &str = "tenantplane.io/virtual-uid";
pub const ANNOTATION_VIRTUAL_GROUP_KIND: &str = "tenantplane.io/virtual-group-kind";

/// Tenant-side bookkeeping never copied to the host: `last-applied-configuration`
/// repeats the whole object (for a Secret, its data) and means nothing on the host.
pub const DROPPED_TENANT_ANNOTATIONS: &[&str] =
    &["kubectl.kubernetes.io/last-applied-configuration"];

/// Whether a label or annotation key is reserved to tenantplane: anything under
/// `tenantplane.io/` or a subdomain of it, and `app.kubernetes.io/managed-by`.
pub fn is_reserved_key(key: &str) -> bool {
    if key == LABEL_MANAGED_BY {
        return true;
    }
    match key.split_once('/') {
        Some((prefix, _)) => prefix == DOMAIN || prefix.ends_with(".tenantplane.io"),
        None => false,
    }
}

/// The labels and annotations that make a host object traceable to its source.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReverseMapping {
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
}

/// The reverse-mapping metadata for one tenant object. `uid` is the tenant object's
/// UID when known (the engine always knows it; an offline prediction does not).
pub fn reverse_mapping(
    source: &SourceName<'_>,
    group_kind: &GroupKind,
    uid: Option<&str>,
) -> ReverseMapping {
    let mut labels = BTreeMap::new();
    labels.insert(LABEL_MANAGED_BY.to_owned(), MANAGED_BY_VALUE.to_owned());
    labels.insert(LABEL_TENANT.to_owned(), source.tenant.to_owned());
    labels.insert(
        LABEL_VIRTUAL_NAMESPACE.to_owned(),
        source.virtual_namespace.to_owned(),
    );
    labels.insert(LABEL_KIND.to_owned(), group_kind.kind.clone());

    let mut annotations = BTreeMap::new();
    annotations.insert(
        ANNOTATION_VIRTUAL_NAMESPACE.to_owned(),
        source.virtual_namespace.to_owned(),
    );
    annotations.insert(ANNOTATION_VIRTUAL_NAME.to_owned(), source.name.to_owned());
    annotations.insert(
        ANNOTATION_VIRTUAL_GROUP_KIND.to_owned(),
        group_kind.to_annotation_value(),
    );
    if let Some(uid) = uid.filter(|u| !u.is_empty()) {
        annotations.insert(ANNOTATION_VIRTUAL_UID.to_owned(), uid.to_owned());
    }
    ReverseMapping {
        labels,
        annotations,
    }
}

/// Tenant labels or annotations with every reserved key removed, then tenantplane's
/// own keys added: a forged `tenantplane.io/tenant` can never survive.
pub fn merge_metadata(
    tenant: &BTreeMap<String, String>,
    ours: &BTreeMap<String, String>,
    dropped: &[&str],
) -> BTreeMap<String, String> {
    let mut merged: BTreeMap<String, String> = tenant
        .iter()
        .filter(|(k, _)| !is_reserved_key(k) && !dropped.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    merged.extend(ours.iter().map(|(k, v)| (k.clone(), v.clone())));
    merged
}

/// A label selector (`key=value,...`) for every host object of one tenant and kind.
/// The label selector of every tenant's host copies of `group_kind`: what one
/// watch shared by all TenantClusters selects.
pub fn host_kind_selector(group_kind: &GroupKind) -> String {
    format!(
        "{LABEL_MANAGED_BY}={MANAGED_BY_VALUE},{LABEL_KIND}={}",
        group_kind.kind
    )
}

pub fn host_selector(tenant: &str, group_kind: &GroupKind) -> String {
    format!(
        "{LABEL_MANAGED_BY}={MANAGED_BY_VALUE},{LABEL_TENANT}={tenant},{LABEL_KIND}={}",
        group_kind.kind
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reserved_keys() {
        for key in [
            "tenantplane.io/tenant",
            "tenantplane.io/anything",
            "sub.tenantplane.io/x",
            "app.kubernetes.io/managed-by",
        ] {
            assert!(is_reserved_key(key), "{key}");
        }
        for key in [
            "app",
            "tenantplane.io",
            "nottenantplane.io/x",
            "app.kubernetes.io/name",
            "tenantplane.iox/y",
        ] {
            assert!(!is_reserved_key(key), "{key}");
        }
    }

    #[test]
    fn forged_keys_are_replaced() {
        let source = SourceName {
            name: "web",
            virtual_namespace: "default",
            tenant: "dev",
        };
        let ours = reverse_mapping(&source, &GroupKind::new("", "ConfigMap"), Some("u-1"));
        let mut forged = BTreeMap::new();
        forged.insert("tenantplane.io/tenant".to_owned(), "prod".to_owned());
        forged.insert("tenantplane.io/virtual-uid".to_owned(), "evil".to_owned());
        forged.insert("evil.tenantplane.io/x".to_owned(), "1".to_owned());
        forged.insert("app.kubernetes.io/managed-by".to_owned(), "helm".to_owned());
        forged.insert("app".to_owned(), "web".to_owned());
        let labels = merge_metadata(&forged, &ours.labels, &[]);
        assert_eq!(labels["tenantplane.io/tenant"], "dev");
        assert_eq!(labels["app.kubernetes.io/managed-by"], "tenantplane");
        assert_eq!(labels["app"], "web");
        assert!(!labels.contains_key("evil.tenantplane.io/x"));
        assert!(!labels.contains_key("tenantplane.io/virtual-uid"));
        let annotations = merge_metadata(&forged, &ours.annotations, &[]);
        assert_eq!(annotations["tenantplane.io/virtual-uid"], "u-1");
    }

    #[test]
    fn seed_table_is_complete() {
        let source = SourceName {
            name: "nginx",
            virtual_namespace: "default",
            tenant: "dev",
        };
        let m = reverse_mapping(&source, &GroupKind::new("", "Pod"), None);
        let labels: Vec<_> = m.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
        assert_eq!(
            labels,
            [
                "app.kubernetes.io/managed-by=tenantplane",
                "tenantplane.io/kind=Pod",
                "tenantplane.io/tenant=dev",
                "tenantplane.io/virtual-namespace=default",
            ]
        );
        assert_eq!(m.annotations["tenantplane.io/virtual-namespace"], "default");
        assert_eq!(m.annotations["tenantplane.io/virtual-name"], "nginx");
        assert_eq!(m.annotations["tenantplane.io/virtual-group-kind"], "Pod");
        assert!(!m.annotations.contains_key(ANNOTATION_VIRTUAL_UID));
    }
}
