use k8s_openapi::api::core::v1::{LimitRangeItem, LimitRangeSpec};
use k8s_openapi::api::networking::v1::NetworkPolicySpec;
use tenantplane_api::{AdditionalRoleBinding, TenantSpec};

use super::*;

fn owner(kind: OwnerKind, name: &str, roles: &[&str]) -> TenantOwner {
    TenantOwner {
        kind,
        name: name.into(),
        cluster_roles: roles.iter().map(|r| (*r).to_owned()).collect(),
    }
}

fn tenant(owners: Vec<TenantOwner>) -> Tenant {
    let spec: TenantSpec = serde_json::from_value(json!({"owners": []})).unwrap();
    let mut t = Tenant::new("acme", TenantSpec { owners, ..spec });
    t.metadata.uid = Some("uid-acme".into());
    t
}

#[test]
fn owners_and_additional_bindings_become_role_bindings() {
    let mut t = tenant(vec![
        owner(
            OwnerKind::User,
            "alice",
            &["admin", "tenantplane-namespace-deleter"],
        ),
        owner(
            OwnerKind::ServiceAccount,
            "system:serviceaccount:ci:deployer",
            &["edit"],
        ),
    ]);
    t.spec.additional_role_bindings = vec![AdditionalRoleBinding {
        cluster_role_name: "view".into(),
        subjects: vec![Subject {
            api_group: Some(RBAC_GROUP.into()),
            kind: "Group".into(),
            name: "auditors".into(),
            namespace: None,
        }],
    }];
    let plan = plan_member(&t, "acme-dev", None).unwrap();
    let bindings = &plan.objects.role_bindings;
    assert_eq!(bindings.len(), 4);
    let roles: BTreeSet<&str> = bindings
        .values()
        .map(|b| b.role_ref.name.as_str())
        .collect();
    assert_eq!(
        roles,
        BTreeSet::from(["admin", "edit", "tenantplane-namespace-deleter", "view"])
    );
    let sa = bindings
        .values()
        .find(|b| b.role_ref.name == "edit")
        .unwrap();
    let subject = &sa.subjects.as_ref().unwrap()[0];
    assert_eq!(
        (
            subject.kind.as_str(),
            subject.name.as_str(),
            subject.namespace.as_deref()
        ),
        ("ServiceAccount", "deployer", Some("ci"))
    );
    for (name, binding) in bindings {
        assert!(name.len() <= 63, "{name}");
        assert_eq!(binding.metadata.namespace.as_deref(), Some("acme-dev"));
        assert!(is_tenant_child(
            binding.metadata.labels.as_ref().unwrap(),
            "acme"
        ));
        assert!(binding.metadata.owner_references.is_none());
    }
    // Reordering the owners renames nothing.
    t.spec.owners.reverse();
    let again = plan_member(&t, "acme-dev", None).unwrap();
    assert_eq!(again.objects.role_bindings, plan.objects.role_bindings);
}

#[test]
fn a_malformed_service_account_owner_is_refused() {
    for name in [
        "deployer",
        "system:serviceaccount:ci",
        "system:serviceaccount::x",
        "system:serviceaccount:a:b:c",
    ] {
        let t = tenant(vec![owner(OwnerKind::ServiceAccount, name, &["admin"])]);
        assert_eq!(
            plan_member(&t, "acme-dev", None),
            Err(TenantPlanError::ServiceAccountName { name: name.into() }),
            "{name}"
        );
    }
}

#[test]
fn policies_are_replicated_by_index_and_the_profile_is_compiled() {
    let mut t = tenant(vec![owner(OwnerKind::User, "alice", &["admin"])]);
    t.spec.network_policies = vec![NetworkPolicySpec::default(), NetworkPolicySpec::default()];
    t.spec.limit_ranges = vec![LimitRangeSpec {
        limits: vec![LimitRangeItem {
            type_: "Container".into(),
            ..Default::default()
        }],
    }];
    let profile: IsolationProfileSpec =
        serde_json::from_value(json!({"level": "restricted"})).unwrap();
    let plan = plan_member(&t, "acme-dev", Some(&profile)).unwrap();
    let names: Vec<&str> = plan
        .objects
        .network_policies
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        names,
        [
            "tenantplane-isolation-acme",
            "tenantplane-networkpolicy-0",
            "tenantplane-networkpolicy-1"
        ]
    );
    assert!(
        plan.objects
            .limit_ranges
            .contains_key("tenantplane-limitrange-0")
    );
    assert!(
        plan.objects
            .limit_ranges
            .contains_key("tenantplane-limits-acme")
    );
    let isolation = &plan.objects.network_policies["tenantplane-isolation-acme"];
    assert!(is_tenant_child(
        isolation.metadata.labels.as_ref().unwrap(),
        "acme"
    ));
    assert_eq!(
        plan.metadata.labels["pod-security.kubernetes.io/enforce"],
        "restricted"
    );
    assert_eq!(plan.metadata.labels[LABEL_TENANT], "acme");
}

#[test]
fn additional_metadata_never_sets_reserved_keys_and_the_profile_wins() {
    let mut t = tenant(vec![owner(OwnerKind::User, "alice", &["admin"])]);
    let extra = &mut t.spec.namespace_options.additional_metadata;
    for key in [
        "tenantplane.io/tenant",
        "app.kubernetes.io/managed-by",
        NAMESPACE_NAME_LABEL,
        "pod-security.kubernetes.io/enforce",
        "team",
    ] {
        extra.labels.insert(key.into(), "forged".into());
    }
    extra
        .annotations
        .insert(ANNOTATION_MANAGED_LABELS.into(), "x".into());
    extra.annotations.insert("contact".into(), "ops".into());
    let profile: IsolationProfileSpec =
        serde_json::from_value(json!({"level": "baseline"})).unwrap();
    let plan = plan_member(&t, "acme-dev", Some(&profile)).unwrap();
    let labels = &plan.metadata.labels;
    assert_eq!(labels["tenantplane.io/tenant"], "acme");
    assert_eq!(labels["team"], "forged");
    assert_eq!(labels["pod-security.kubernetes.io/enforce"], "baseline");
    assert!(!labels.contains_key("app.kubernetes.io/managed-by"));
    assert!(!labels.contains_key(NAMESPACE_NAME_LABEL));
    assert_eq!(plan.metadata.annotations["contact"], "ops");
    assert!(
        !plan.metadata.annotations[ANNOTATION_MANAGED_LABELS].contains("tenantplane.io/tenant")
    );
    assert!(plan.metadata.annotations[ANNOTATION_MANAGED_LABELS].contains("team"));
}

#[test]
fn the_metadata_patch_adds_updates_removes_ours_only_and_then_is_none() {
    let mut t = tenant(vec![owner(OwnerKind::User, "alice", &["admin"])]);
    t.spec
        .namespace_options
        .additional_metadata
        .labels
        .insert("team".into(), "a".into());
    let plan = plan_member(&t, "acme-dev", None).unwrap();
    let mut labels = BTreeMap::from([
        (NAMESPACE_NAME_LABEL.to_owned(), "acme-dev".to_owned()),
        ("mine".to_owned(), "x".to_owned()),
    ]);
    let mut annotations = BTreeMap::new();
    let patch = namespace_metadata_patch(&plan.metadata, &labels, &annotations).unwrap();
    assert_eq!(patch["metadata"]["labels"]["team"], "a");
    assert_eq!(patch["metadata"]["labels"]["tenantplane.io/tenant"], "acme");
    apply(&patch, &mut labels, &mut annotations);
    assert_eq!(
        namespace_metadata_patch(&plan.metadata, &labels, &annotations),
        None
    );
    // The key leaves the spec: it is removed, the user's `mine` stays.
    t.spec.namespace_options.additional_metadata.labels.clear();
    let plan = plan_member(&t, "acme-dev", None).unwrap();
    let patch = namespace_metadata_patch(&plan.metadata, &labels, &annotations).unwrap();
    assert_eq!(patch["metadata"]["labels"]["team"], Value::Null);
    assert!(patch["metadata"]["labels"].get("mine").is_none());
    apply(&patch, &mut labels, &mut annotations);
    assert_eq!(
        namespace_metadata_patch(&plan.metadata, &labels, &annotations),
        None
    );
    assert_eq!(labels["mine"], "x");
}

#[test]
fn a_forged_bookkeeping_annotation_cannot_remove_protected_keys() {
    let t = tenant(vec![owner(OwnerKind::User, "alice", &["admin"])]);
    let plan = plan_member(&t, "acme-dev", None).unwrap();
    let labels = BTreeMap::from([
        (NAMESPACE_NAME_LABEL.to_owned(), "acme-dev".to_owned()),
        ("tenantplane.io/other".to_owned(), "x".to_owned()),
    ]);
    let annotations = BTreeMap::from([(
        ANNOTATION_MANAGED_LABELS.to_owned(),
        format!("{NAMESPACE_NAME_LABEL},tenantplane.io/other"),
    )]);
    let patch = namespace_metadata_patch(&plan.metadata, &labels, &annotations).unwrap();
    assert!(
        patch["metadata"]["labels"]
            .get(NAMESPACE_NAME_LABEL)
            .is_none()
    );
    assert!(
        patch["metadata"]["labels"]
            .get("tenantplane.io/other")
            .is_none()
    );
}

#[test]
fn releasing_drops_our_owner_reference_label_and_keys() {
    let t = tenant(vec![owner(OwnerKind::User, "alice", &["admin"])]);
    let ours = crate::tenancy::owner_reference(&t).unwrap();
    let theirs = OwnerReference {
        uid: "other".into(),
        name: "keep".into(),
        kind: "ConfigMap".into(),
        api_version: "v1".into(),
        ..Default::default()
    };
    let labels = BTreeMap::from([
        (LABEL_TENANT.to_owned(), "acme".to_owned()),
        ("team".to_owned(), "a".to_owned()),
        ("mine".to_owned(), "x".to_owned()),
    ]);
    let annotations = BTreeMap::from([
        (ANNOTATION_MANAGED_LABELS.to_owned(), "team".to_owned()),
        (ANNOTATION_MANAGED_ANNOTATIONS.to_owned(), String::new()),
    ]);
    let patch = release_patch(&[ours, theirs.clone()], "uid-acme", &labels, &annotations).unwrap();
    let metadata = &patch["metadata"];
    assert_eq!(metadata["ownerReferences"], json!([theirs]));
    assert_eq!(metadata["labels"][LABEL_TENANT], Value::Null);
    assert_eq!(metadata["labels"]["team"], Value::Null);
    assert!(metadata["labels"].get("mine").is_none());
    assert_eq!(
        metadata["annotations"][ANNOTATION_MANAGED_LABELS],
        Value::Null
    );
    assert_eq!(
        release_patch(&[], "uid-acme", &BTreeMap::new(), &BTreeMap::new()),
        None
    );
}

#[test]
fn only_this_tenants_labelled_objects_are_orphans() {
    let ours = child_labels("acme");
    let other = child_labels("other");
    let mut unlabelled = ours.clone();
    unlabelled.remove(LABEL_MANAGED_BY);
    let wanted = BTreeSet::from(["keep".to_owned()]);
    let live = [
        ("keep", &ours),
        ("stale", &ours),
        ("theirs", &other),
        ("foreign", &unlabelled),
    ];
    assert_eq!(orphans("acme", &wanted, live), ["stale"]);
}

/// Applies a merge patch of `metadata.labels`/`annotations` to the maps.
fn apply(
    patch: &Value,
    labels: &mut BTreeMap<String, String>,
    annotations: &mut BTreeMap<String, String>,
) {
    for (field, map) in [("labels", labels), ("annotations", annotations)] {
        if let Some(Value::Object(changes)) = patch["metadata"].get(field) {
            for (k, v) in changes {
                match v {
                    Value::String(s) => {
                        map.insert(k.clone(), s.clone());
                    }
                    _ => {
                        map.remove(k);
                    }
                }
            }
        }
    }
}
