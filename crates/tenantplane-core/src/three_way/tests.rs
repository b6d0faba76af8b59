use proptest::prelude::*;
use serde_json::{Value, json};
use tenantplane_api::sync_policy::{ConflictPolicy, FieldOwner, FieldOwnershipRule};

use super::*;

fn object(spec: Value, status: Value) -> Value {
    json!({"apiVersion": "example.com/v1", "kind": "Widget",
           "metadata": {"name": "w", "labels": {"team": "a"}},
           "spec": spec, "status": status})
}

fn bidi() -> FieldOwnership {
    FieldOwnership::bidirectional_default()
}

#[test]
fn default_ownership_gives_spec_and_metadata_maps_to_the_tenant_and_status_to_the_host() {
    let o = bidi();
    assert_eq!(o.owner("/spec/replicas"), Some(Side::Tenant));
    assert_eq!(o.owner("/data/key"), Some(Side::Tenant));
    assert_eq!(o.owner("/status/phase"), Some(Side::Host));
    assert_eq!(o.owner("/metadata/labels/team"), Some(Side::Tenant));
    assert_eq!(o.owner("/metadata/annotations/x"), Some(Side::Tenant));
    assert_eq!(o.owner("/metadata/name"), None);
    assert_eq!(o.owner("/metadata/resourceVersion"), None);
    assert_eq!(o.owner("/kind"), None);
    // Whole segments only: /statusReport is not under /status.
    assert_eq!(o.owner("/statusReport"), Some(Side::Tenant));
}

#[test]
fn overrides_take_the_longest_matching_path() {
    let o = bidi().with_overrides(&[
        FieldOwnershipRule {
            path: "/spec/replicas".into(),
            owner: FieldOwner::Host,
        },
        FieldOwnershipRule {
            path: "/status/tenantNote".into(),
            owner: FieldOwner::Tenant,
        },
        FieldOwnershipRule {
            path: "/spec/secretRef".into(),
            owner: FieldOwner::None,
        },
    ]);
    assert_eq!(o.owner("/spec/replicas"), Some(Side::Host));
    assert_eq!(o.owner("/spec/image"), Some(Side::Tenant));
    assert_eq!(o.owner("/status/tenantNote/x"), Some(Side::Tenant));
    assert_eq!(o.owner("/status/phase"), Some(Side::Host));
    assert_eq!(o.owner("/spec/secretRef/name"), None);
}

#[test]
fn tenantplane_keys_never_cross() {
    let mut tenant = object(json!({"a": 1}), json!({}));
    tenant["metadata"]["labels"]["tenantplane.io/forged"] = json!("x");
    let host = object(json!({"a": 1}), json!({}));
    let planned = plan(None, &tenant, &host, &bidi(), ConflictPolicy::TenantWins);
    assert!(planned.is_noop(), "{planned:?}");
    assert!(planned.base.keys().all(|k| !k.contains("tenantplane.io")));
}

#[test]
fn kubectl_last_applied_stays_on_its_own_side() {
    const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";
    let mut tenant = object(json!({"a": 1}), json!({}));
    tenant["metadata"]["annotations"] = json!({LAST_APPLIED: "{\"tenant\": 1}", "note": "n"});
    let mut host = object(json!({"a": 1}), json!({}));
    host["metadata"]["annotations"] = json!({LAST_APPLIED: "{\"host\": 1}", "note": "n"});
    // First pass (no base) and any later one: neither side's copy is written over.
    let planned = plan(None, &tenant, &host, &bidi(), ConflictPolicy::TenantWins);
    assert!(planned.is_noop(), "{planned:?}");
    assert!(planned.base.keys().all(|k| !k.contains("last-applied")));
    let base = planned.base.clone();
    tenant["metadata"]["annotations"][LAST_APPLIED] = json!("{\"tenant\": 2}");
    let planned = plan(Some(&base), &tenant, &host, &bidi(), ConflictPolicy::Manual);
    assert!(planned.is_noop(), "{planned:?}");
    // Other annotations still flow.
    tenant["metadata"]["annotations"]["note"] = json!("changed");
    let planned = plan(Some(&base), &tenant, &host, &bidi(), ConflictPolicy::Manual);
    assert_eq!(planned.host_writes.len(), 1, "{planned:?}");
    assert_eq!(planned.host_writes[0].path, "/metadata/annotations/note");
}

#[test]
fn spec_goes_down_and_status_comes_up() {
    let base = flatten(&object(json!({"size": 1}), json!({"ready": false})));
    let tenant = object(json!({"size": 2}), json!({"ready": false}));
    let host = object(json!({"size": 1}), json!({"ready": true}));
    let planned = plan(Some(&base), &tenant, &host, &bidi(), ConflictPolicy::Manual);
    assert_eq!(
        planned.host_writes,
        vec![FieldWrite {
            path: "/spec/size".into(),
            value: Some(json!(2)),
            reason: WriteReason::OwnerChanged
        }]
    );
    assert_eq!(
        planned.tenant_writes,
        vec![FieldWrite {
            path: "/status/ready".into(),
            value: Some(json!(true)),
            reason: WriteReason::OwnerChanged
        }]
    );
    assert!(planned.conflicts.is_empty());
}

#[test]
fn a_change_by_the_side_that_does_not_own_the_field_is_reverted() {
    let base = flatten(&object(json!({"size": 1}), json!({})));
    let tenant = object(json!({"size": 1}), json!({}));
    let host = object(json!({"size": 9}), json!({}));
    let planned = plan(
        Some(&base),
        &tenant,
        &host,
        &bidi(),
        ConflictPolicy::HostWins,
    );
    assert_eq!(planned.host_writes.len(), 1);
    assert_eq!(planned.host_writes[0].reason, WriteReason::Reverted);
    assert_eq!(planned.host_writes[0].value, Some(json!(1)));
    assert!(planned.tenant_writes.is_empty());
}

#[test]
fn a_field_the_other_side_added_is_left_alone() {
    // The host's defaulting added spec.defaulted: no write, no conflict, not in the base.
    let base = flatten(&object(json!({"size": 1}), json!({})));
    let tenant = object(json!({"size": 1}), json!({}));
    let host = object(json!({"size": 1, "defaulted": true}), json!({}));
    let planned = plan(Some(&base), &tenant, &host, &bidi(), ConflictPolicy::Manual);
    assert!(planned.is_noop(), "{planned:?}");
    assert!(!planned.base.contains_key("/spec/defaulted"));
}

#[test]
fn a_removal_by_the_owner_flows() {
    let base = flatten(&object(json!({"size": 1, "extra": "x"}), json!({})));
    let tenant = object(json!({"size": 1}), json!({}));
    let host = object(json!({"size": 1, "extra": "x"}), json!({}));
    let planned = plan(Some(&base), &tenant, &host, &bidi(), ConflictPolicy::Manual);
    assert_eq!(planned.host_writes[0].value, None);
    let host_after = apply(&host, &planned.host_writes);
    assert_eq!(host_after["spec"], json!({"size": 1}));
}

#[test]
fn conflicts_follow_the_policy() {
    let base = flatten(&object(json!({"size": 1}), json!({})));
    let tenant = object(json!({"size": 2}), json!({}));
    let host = object(json!({"size": 3}), json!({}));

    let manual = plan(Some(&base), &tenant, &host, &bidi(), ConflictPolicy::Manual);
    assert!(manual.is_noop());
    assert_eq!(manual.unresolved().count(), 1);
    assert_eq!(manual.conflicts[0].path, "/spec/size");
    assert_eq!(
        manual.base.get("/spec/size"),
        Some(&json!(1)),
        "manual keeps the base"
    );

    let tenant_wins = plan(
        Some(&base),
        &tenant,
        &host,
        &bidi(),
        ConflictPolicy::TenantWins,
    );
    assert_eq!(tenant_wins.host_writes[0].value, Some(json!(2)));
    assert_eq!(tenant_wins.host_writes[0].reason, WriteReason::ConflictWon);
    assert_eq!(tenant_wins.conflicts[0].resolution, Resolution::TenantWon);
    assert!(tenant_wins.tenant_writes.is_empty());

    let host_wins = plan(
        Some(&base),
        &tenant,
        &host,
        &bidi(),
        ConflictPolicy::HostWins,
    );
    assert_eq!(host_wins.tenant_writes[0].value, Some(json!(3)));
    assert_eq!(host_wins.conflicts[0].resolution, Resolution::HostWon);
    assert!(host_wins.host_writes.is_empty());
}

#[test]
fn without_a_base_the_owner_starts() {
    let tenant = object(json!({"size": 2}), json!({}));
    let host = object(json!({"size": 3, "defaulted": 1}), json!({"ready": true}));
    let planned = plan(None, &tenant, &host, &bidi(), ConflictPolicy::Manual);
    assert_eq!(planned.host_writes.len(), 1);
    assert_eq!(planned.host_writes[0].reason, WriteReason::Initial);
    assert_eq!(planned.tenant_writes.len(), 1);
    assert_eq!(planned.tenant_writes[0].path, "/status/ready");
}

#[test]
fn a_leaf_replacing_an_object_and_back() {
    let base = flatten(&object(json!({"x": {"y": 1}}), json!({})));
    let tenant = object(json!({"x": 5}), json!({}));
    let host = object(json!({"x": {"y": 1}}), json!({}));
    let planned = plan(Some(&base), &tenant, &host, &bidi(), ConflictPolicy::Manual);
    let host_after = apply(&host, &planned.host_writes);
    assert_eq!(host_after["spec"]["x"], json!(5));
    let again = plan(
        Some(&planned.base),
        &tenant,
        &host_after,
        &bidi(),
        ConflictPolicy::Manual,
    );
    assert!(again.is_noop(), "{again:?}");
}

#[test]
fn keys_with_slashes_round_trip() {
    let mut value = json!({});
    set_field(
        &mut value,
        "/metadata/labels/app.kubernetes.io~1name",
        Some(&json!("web")),
    );
    assert_eq!(
        value["metadata"]["labels"]["app.kubernetes.io/name"],
        json!("web")
    );
    assert_eq!(unflatten(&flatten(&value)), value);
}

// ---- properties: random edits on either side ----

const PATHS: &[&str] = &[
    "/spec/a",
    "/spec/b",
    "/spec/nested/c",
    "/spec/list",
    "/status/phase",
    "/status/count",
    "/metadata/labels/team",
    "/metadata/labels/tenantplane.io~1owner",
    "/metadata/annotations/note",
    "/metadata/name",
];

/// An edit of one field: keep it, set it to a small value, or remove it.
#[derive(Clone, Debug)]
enum Edit {
    Keep,
    Set(i64),
    Remove,
}

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        3 => Just(Edit::Keep),
        2 => (0i64..4).prop_map(Edit::Set),
        1 => Just(Edit::Remove),
    ]
}

fn edits() -> impl Strategy<Value = Vec<Edit>> {
    proptest::collection::vec(edit(), PATHS.len())
}

fn edited(start: &Value, edits: &[Edit]) -> Value {
    let mut out = start.clone();
    for (path, edit) in PATHS.iter().zip(edits) {
        match edit {
            Edit::Keep => {}
            Edit::Set(v) if *path == "/spec/list" => set_field(&mut out, path, Some(&json!([v]))),
            Edit::Set(v) => set_field(&mut out, path, Some(&json!(v))),
            Edit::Remove => set_field(&mut out, path, None),
        }
    }
    out
}

fn policy() -> impl Strategy<Value = ConflictPolicy> {
    prop_oneof![
        Just(ConflictPolicy::Manual),
        Just(ConflictPolicy::TenantWins),
        Just(ConflictPolicy::HostWins),
    ]
}

fn ownership() -> impl Strategy<Value = FieldOwnership> {
    prop_oneof![
        Just(bidi()),
        Just(FieldOwnership::one_way(Side::Tenant)),
        Just(FieldOwnership::one_way(Side::Host)),
        Just(bidi().with_overrides(&[FieldOwnershipRule {
            path: "/spec/b".into(),
            owner: FieldOwner::Host
        }])),
    ]
}

fn start() -> Value {
    object(
        json!({"a": 1, "b": 2, "nested": {"c": 3}, "list": [1]}),
        json!({"phase": 0}),
    )
}

proptest! {
    #[test]
    fn one_pass_converges(
        base_edits in edits(), tenant_edits in edits(), host_edits in edits(),
        with_base in any::<bool>(), policy in policy(), ownership in ownership(),
    ) {
        let base_object = edited(&start(), &base_edits);
        let base = flatten(&base_object);
        let base = with_base.then_some(&base);
        let tenant = edited(&base_object, &tenant_edits);
        let host = edited(&base_object, &host_edits);
        let first = plan(base, &tenant, &host, &ownership, policy);
        let tenant_after = apply(&tenant, &first.tenant_writes);
        let host_after = apply(&host, &first.host_writes);
        // The engine's own writes never cause another write (no ping-pong), and
        // manual conflicts stay reported until someone settles them.
        let second = plan(Some(&first.base), &tenant_after, &host_after, &ownership, policy);
        prop_assert!(second.is_noop(), "second pass writes: {:?}", second);
        prop_assert_eq!(second.unresolved().count(), first.unresolved().count());
    }

    #[test]
    fn nothing_changed_means_nothing_written(
        base_edits in edits(), policy in policy(), ownership in ownership(),
    ) {
        let object = edited(&start(), &base_edits);
        let base = flatten(&object);
        let planned = plan(Some(&base), &object, &object, &ownership, policy);
        prop_assert!(planned.is_noop());
        prop_assert!(planned.conflicts.is_empty());
    }

    #[test]
    fn a_winning_change_is_never_lost_and_a_losing_one_is_reverted(
        base_edits in edits(), tenant_edits in edits(), host_edits in edits(),
        policy in policy(), ownership in ownership(),
    ) {
        let base_object = edited(&start(), &base_edits);
        let base = flatten(&base_object);
        let tenant = edited(&base_object, &tenant_edits);
        let host = edited(&base_object, &host_edits);
        let planned = plan(Some(&base), &tenant, &host, &ownership, policy);
        let tenant_after = flatten(&apply(&tenant, &planned.tenant_writes));
        let host_after = flatten(&apply(&host, &planned.host_writes));
        let (t, h) = (flatten(&tenant), flatten(&host));
        for path in PATHS {
            let Some(owner) = ownership.owner(path) else { continue };
            if path.contains("tenantplane.io") { continue; }
            let (b, tv, hv) = (base.get(*path), t.get(*path), h.get(*path));
            let (mine, theirs) = match owner { Side::Tenant => (tv, hv), Side::Host => (hv, tv) };
            let only_owner_changed = mine != b && theirs == b;
            // Only the other side changed it (not an addition): reverted to the owner's.
            let only_other_changed = mine == b && theirs != b && b.is_some();
            let winner = if only_owner_changed || only_other_changed {
                Some(mine)
            } else if mine != b && theirs != b && mine != theirs {
                match policy {                   // both changed it
                    ConflictPolicy::TenantWins => Some(tv),
                    ConflictPolicy::HostWins => Some(hv),
                    ConflictPolicy::Manual => None,
                }
            } else {
                None
            };
            if let Some(expected) = winner {
                prop_assert_eq!(tenant_after.get(*path), expected, "tenant at {}", path);
                prop_assert_eq!(host_after.get(*path), expected, "host at {}", path);
            }
        }
    }
}

#[test]
fn the_base_round_trips_through_its_annotation_and_bad_ones_are_errors() {
    let base = flatten(&object(
        json!({"size": 1, "x/y": [1, 2]}),
        json!({"ready": true}),
    ));
    let text = encode_base(&base).unwrap();
    let mut host = object(json!({}), json!({}));
    set_base(&mut host, &text);
    assert_eq!(
        host["metadata"]["annotations"][BASE_ANNOTATION],
        json!(text)
    );
    assert_eq!(stored_base_text(&host), Some(text.as_str()));
    assert_eq!(stored_base(&host).unwrap(), Some(base));
    assert_eq!(stored_base(&object(json!({}), json!({}))).unwrap(), None);
    host["metadata"]["annotations"][BASE_ANNOTATION] = json!("{not json");
    assert!(matches!(stored_base(&host), Err(BaseError::Invalid(_))));
    let huge = flatten(&json!({"spec": {"blob": "x".repeat(MAX_BASE_BYTES)}}));
    assert!(matches!(
        encode_base(&huge),
        Err(BaseError::TooLarge { .. })
    ));
}

#[test]
fn status_writes_go_to_the_subresource() {
    let write = |path: &str| FieldWrite {
        path: path.into(),
        value: None,
        reason: WriteReason::OwnerChanged,
    };
    let (main, status) =
        split_status(&[write("/spec/a"), write("/status/ready"), write("/statusx")]);
    assert_eq!(main, vec![write("/spec/a"), write("/statusx")]);
    assert_eq!(status, vec![write("/status/ready")]);
}
