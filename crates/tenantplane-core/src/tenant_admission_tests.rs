use super::*;

fn tenant() -> Tenant {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "tenantplane.io/v1alpha1", "kind": "Tenant",
        "metadata": {"name": "acme", "uid": "uid-acme"}, "spec": {"owners": []},
    }))
    .unwrap()
}

fn reference(name: &str, uid: &str, api_version: &str) -> OwnerReference {
    OwnerReference {
        api_version: api_version.into(),
        kind: "Tenant".into(),
        name: name.into(),
        uid: uid.into(),
        controller: None,
        block_owner_deletion: None,
    }
}

fn identity(refs: &[OwnerReference], label: Option<&str>) -> TenantIdentity {
    let labels: BTreeMap<String, String> = label
        .map(|l| [(TENANT_LABEL.to_owned(), l.to_owned())].into())
        .unwrap_or_default();
    TenantIdentity::of(Some(refs), Some(&labels))
}

#[test]
fn admins_are_system_users_masters_and_the_configured_ones_never_owners() {
    let admins = Admins {
        groups: vec!["platform".into()],
        users: vec!["ops".into()],
    };
    let ask = |user: &'static str, groups: &'static [&'static str]| {
        let groups: Vec<String> = groups.iter().map(|g| (*g).to_owned()).collect();
        admins.contains(&Requester {
            username: user,
            groups: &groups,
        })
    };
    assert!(ask("system:kube-controller-manager", &[]));
    assert!(ask(
        "system:serviceaccount:kube-system:namespace-controller",
        &[]
    ));
    assert!(ask("anyone", &["system:masters"]));
    assert!(ask("anyone", &["platform"]));
    assert!(ask("ops", &[]));
    assert!(!ask("alice", &["system:authenticated", "devs"]));
    assert!(!ask("system:serviceaccount:acme-1:ci", &[]));
    assert!(!ask(
        "system:serviceaccount:tenantplane-system:tenantplane",
        &[]
    ));
    assert!(Admins::default().contains(&Requester {
        username: DEFAULT_CONTROLLER_USER,
        groups: &[],
    }));
}

#[test]
fn any_change_of_tenant_references_or_label_is_a_move() {
    let acme = reference("acme", "uid-acme", "tenantplane.io/v1alpha1");
    let member = identity(std::slice::from_ref(&acme), Some("acme"));
    assert_eq!(unchanged_identity(&member, &member), Ok(()));
    // Another API version of the same reference is the same identity.
    let v2 = identity(
        &[reference("acme", "uid-acme", "tenantplane.io/v2")],
        Some("acme"),
    );
    assert_eq!(unchanged_identity(&member, &v2), Ok(()));
    // Any other owner could take the namespace with it when deleted.
    let other = OwnerReference {
        kind: "Namespace".into(),
        api_version: "v1".into(),
        ..acme.clone()
    };
    let with_other = identity(&[acme.clone(), other], Some("acme"));
    assert_eq!(
        unchanged_identity(&member, &with_other),
        Err(IdentityChange::OtherOwners)
    );
    assert_eq!(unchanged_identity(&with_other, &with_other), Ok(()));

    for (what, new) in [
        ("stripped", identity(&[], Some("acme"))),
        (
            "forged uid",
            identity(
                &[reference("acme", "forged", "tenantplane.io/v1alpha1")],
                Some("acme"),
            ),
        ),
        (
            "moved",
            identity(
                &[reference("beta", "uid-beta", "tenantplane.io/v1alpha1")],
                Some("beta"),
            ),
        ),
    ] {
        assert!(
            matches!(
                unchanged_identity(&member, &new),
                Err(IdentityChange::References { .. })
            ),
            "{what}"
        );
    }
    let unlabelled = identity(std::slice::from_ref(&acme), None);
    let err = unchanged_identity(&member, &unlabelled).unwrap_err();
    assert!(err.to_string().contains("\"acme\" -> (none)"), "{err}");
    let relabelled = identity(std::slice::from_ref(&acme), Some("beta"));
    assert!(matches!(
        unchanged_identity(&member, &relabelled),
        Err(IdentityChange::Label { .. })
    ));
    // Claiming an unowned namespace (kube-system).
    let unowned = identity(&[], None);
    assert!(unchanged_identity(&unowned, &member).is_err());
    assert!(unchanged_identity(&unowned, &identity(&[], Some("acme"))).is_err());
}

#[test]
fn a_new_namespace_names_only_the_tenant_it_joins() {
    let acme = reference("acme", "uid-acme", "tenantplane.io/v1alpha1");
    let joins = Some(("acme", "uid-acme"));
    assert_eq!(creation_identity(&identity(&[], None), joins), Ok(()));
    assert_eq!(creation_identity(&identity(&[], None), None), Ok(()));
    assert_eq!(
        creation_identity(&identity(std::slice::from_ref(&acme), Some("acme")), joins),
        Ok(())
    );
    let err = creation_identity(&identity(std::slice::from_ref(&acme), None), None).unwrap_err();
    assert_eq!(err.joins, "no tenant");
    assert!(
        err.to_string().contains("Tenant acme (uid uid-acme)"),
        "{err}"
    );
    assert!(creation_identity(&identity(&[], Some("beta")), joins).is_err());
    assert!(
        creation_identity(
            &identity(&[reference("acme", "forged", "tenantplane.io/v1")], None),
            joins
        )
        .is_err()
    );
}

#[test]
fn classes_default_allow_and_refuse() {
    let mut t = tenant();
    assert_eq!(check_class(&t, ClassKind::Storage, Some("any")), Ok(None));
    t.spec.storage_classes = Some(AllowedClasses {
        allowed: vec!["fast".into()],
        default: Some("standard".into()),
    });
    assert_eq!(
        check_class(&t, ClassKind::Storage, None),
        Ok(Some("standard".into()))
    );
    assert_eq!(
        check_class(&t, ClassKind::Storage, Some("")),
        Ok(Some("standard".into()))
    );
    assert_eq!(check_class(&t, ClassKind::Storage, Some("fast")), Ok(None));
    assert_eq!(
        check_class(&t, ClassKind::Storage, Some("standard")),
        Ok(None)
    );
    let err = check_class(&t, ClassKind::Storage, Some("gold")).unwrap_err();
    assert_eq!(
        err.to_string(),
        "Tenant acme does not allow Storage class \"gold\" (spec.storageClasses): use one of fast, standard"
    );
    t.spec.runtime_classes = Some(AllowedClasses::default());
    assert_eq!(check_class(&t, ClassKind::Runtime, None), Ok(None));
    let err = check_class(&t, ClassKind::Runtime, Some("runc")).unwrap_err();
    assert!(err.to_string().contains("none (name no class)"), "{err}");
}

#[test]
fn node_selectors_are_injected_or_conflict() {
    let mut t = tenant();
    t.spec.node_selector = [("pool".to_owned(), "acme".to_owned())].into();
    let none = BTreeMap::new();
    assert_eq!(
        missing_node_selector(&t, &none),
        Ok([("pool".to_owned(), "acme".to_owned())].into())
    );
    let same: BTreeMap<String, String> = [
        ("pool".to_owned(), "acme".to_owned()),
        ("zone".to_owned(), "a".to_owned()),
    ]
    .into();
    assert_eq!(missing_node_selector(&t, &same), Ok(BTreeMap::new()));
    let other: BTreeMap<String, String> = [("pool".to_owned(), "shared".to_owned())].into();
    let err = missing_node_selector(&t, &other).unwrap_err();
    assert!(err.to_string().contains("pool=\"acme\""), "{err}");
}

#[test]
fn a_cordoned_tenant_refuses() {
    let mut t = tenant();
    assert_eq!(cordon_refusal(&t, "acme-1"), None);
    t.spec.cordoned = true;
    assert!(cordon_refusal(&t, "acme-1").unwrap().contains("cordoned"));
}
