use std::collections::BTreeMap;

use super::*;
use crate::metadata::{ReverseMapping, reverse_mapping};

type Meta = (String, BTreeMap<String, String>, BTreeMap<String, String>);

/// The name, labels and annotations tenantplane gives the copy of `source`.
fn copy_of(source: &SourceKey<'_>) -> Meta {
    let name = SourceName {
        name: source.name,
        virtual_namespace: source.virtual_namespace,
        tenant: source.tenant,
    };
    let ReverseMapping {
        labels,
        annotations,
    } = reverse_mapping(&name, source.group_kind, Some("uid-1"));
    (host_name(&name).name, labels, annotations)
}

fn is_copy((name, labels, annotations): &Meta, source: &SourceKey<'_>) -> bool {
    is_copy_of(name, labels, annotations, source)
}

fn config_map() -> GroupKind {
    GroupKind::new("", "ConfigMap")
}

/// Tenant acme's object shop/settings of `kind`.
fn acme_settings(kind: &GroupKind) -> SourceKey<'_> {
    SourceKey {
        tenant: "acme",
        virtual_namespace: "shop",
        name: "settings",
        group_kind: kind,
    }
}

#[test]
fn a_copy_is_a_copy_of_its_source_only() {
    let kind = config_map();
    let source = acme_settings(&kind);
    let copy = copy_of(&source);
    assert!(is_copy(&copy, &source));
    let other_name = SourceKey {
        name: "other",
        ..source
    };
    let other_namespace = SourceKey {
        virtual_namespace: "other",
        ..source
    };
    assert!(!is_copy(&copy, &other_name));
    assert!(!is_copy(&copy, &other_namespace));
}

#[test]
fn another_tenant_or_kind_is_not_the_source() {
    let kind = config_map();
    let secret = GroupKind::new("", "Secret");
    let source = acme_settings(&kind);
    let copy = copy_of(&source);
    assert!(!is_copy(
        &copy,
        &SourceKey {
            tenant: "globex",
            ..source
        }
    ));
    assert!(!is_copy(
        &copy,
        &SourceKey {
            group_kind: &secret,
            ..source
        }
    ));
}

#[test]
fn hashed_long_names_are_exact() {
    let kind = config_map();
    let long = "n".repeat(80);
    let longer = "n".repeat(81);
    let source = SourceKey {
        tenant: "acme",
        virtual_namespace: "shop",
        name: &long,
        group_kind: &kind,
    };
    let copy = copy_of(&source);
    assert!(copy.0.len() < long.len(), "the host name is hashed");
    assert!(is_copy(&copy, &source));
    assert!(!is_copy(
        &copy,
        &SourceKey {
            name: &longer,
            ..source
        }
    ));
}

#[test]
fn forged_or_missing_metadata_is_no_copy() {
    let kind = config_map();
    let source = acme_settings(&kind);
    let copy = copy_of(&source);

    // Another tenant's labels on this object: its name is not that tenant's copy.
    let mut forged = copy.clone();
    forged.1.insert(LABEL_TENANT.into(), "globex".into());
    assert!(!is_copy(&forged, &source));
    assert!(!is_copy(
        &forged,
        &SourceKey {
            tenant: "globex",
            ..source
        }
    ));

    // The right metadata copied onto an object of another name.
    let renamed = ("settings-copy".to_owned(), copy.1.clone(), copy.2.clone());
    assert!(!is_copy(&renamed, &source));

    let mut unmanaged = copy.clone();
    unmanaged.1.remove(LABEL_MANAGED_BY);
    assert!(!is_copy(&unmanaged, &source));

    for key in [
        ANNOTATION_VIRTUAL_NAME,
        ANNOTATION_VIRTUAL_NAMESPACE,
        ANNOTATION_VIRTUAL_GROUP_KIND,
    ] {
        let mut missing = copy.clone();
        missing.2.remove(key);
        assert!(!is_copy(&missing, &source), "without {key}");
    }
    let bare = (copy.0.clone(), copy.1.clone(), BTreeMap::new());
    assert!(!is_copy(&bare, &source));
}

#[test]
fn source_in_names_the_source_of_this_tenant_and_kind() {
    let kind = config_map();
    let source = acme_settings(&kind);
    let (name, labels, annotations) = copy_of(&source);
    let found = source_in(&name, &labels, &annotations, "acme", &kind);
    assert_eq!(
        found.as_ref().map(|id| (&*id.virtual_namespace, &*id.name)),
        Some(("shop", "settings"))
    );
    assert_eq!(found.and_then(|id| id.uid), Some("uid-1".to_owned()));
    assert_eq!(
        source_in(&name, &labels, &annotations, "globex", &kind),
        None
    );
    let secret = GroupKind::new("", "Secret");
    assert_eq!(
        source_in(&name, &labels, &annotations, "acme", &secret),
        None
    );
}
