//! Property tests over names of every valid length and shape, for every name rule.

// Tests assert by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, HashMap};

use proptest::prelude::*;
use serde_json::json;
use tenantplane_core::kinds::{GroupKind, Scope};
use tenantplane_core::name_rules::{MAX_LABEL_LEN, NameRule};
use tenantplane_core::naming::{SourceName, host_name};
use tenantplane_core::provenance::{Provenance, provenance, reverse_lookup};
use tenantplane_core::transform::{TenantTarget, to_host};

/// A DNS-1123 label part of `1..=max` characters, biased towards `-x-` and `x` so
/// separator ambiguities are exercised, not just random letters.
fn label(max: usize) -> impl Strategy<Value = String> {
    let body = prop::collection::vec(
        prop_oneof![
            4 => prop::sample::select(vec!['a', 'b', 'x', '0', '9']),
            2 => Just('-'),
        ],
        0..max.saturating_sub(1),
    );
    (prop::sample::select(vec!['a', 'x', '1']), body).prop_map(move |(first, body)| {
        let mut s: String = std::iter::once(first).chain(body).collect();
        while s.ends_with('-') {
            s.pop();
        }
        if s.is_empty() { "a".to_owned() } else { s }
    })
}

fn dns1035(max: usize) -> impl Strategy<Value = String> {
    label(max).prop_map(|s| {
        if s.as_bytes()[0].is_ascii_digit() {
            format!("a{}", &s[1..])
        } else {
            s
        }
    })
}

fn subdomain() -> impl Strategy<Value = String> {
    prop::collection::vec(label(63), 1..5)
        .prop_map(|parts| {
            let mut s = parts.join(".");
            s.truncate(253);
            while s.ends_with('-') || s.ends_with('.') {
                s.pop();
            }
            s
        })
        .prop_filter("valid subdomain", |s| {
            NameRule::Dns1123Subdomain.validate(s).is_ok()
        })
}

fn path_segment() -> impl Strategy<Value = String> {
    "[A-Za-z0-9:._ -]{1,80}".prop_filter("valid path segment", |s| {
        NameRule::PathSegment.validate(s).is_ok()
    })
}

/// A name valid for `rule`, of any valid length.
fn name_for(rule: NameRule) -> BoxedStrategy<String> {
    match rule {
        NameRule::Dns1123Label => label(MAX_LABEL_LEN).boxed(),
        NameRule::Dns1035Label => dns1035(MAX_LABEL_LEN).boxed(),
        NameRule::Dns1123Subdomain => subdomain().boxed(),
        NameRule::PathSegment => path_segment().boxed(),
    }
}

fn kind_for(rule: NameRule) -> GroupKind {
    match rule {
        NameRule::Dns1123Label | NameRule::Dns1123Subdomain => GroupKind::new("", "ConfigMap"),
        NameRule::Dns1035Label => GroupKind::new("", "Service"),
        NameRule::PathSegment => GroupKind::new("rbac.authorization.k8s.io", "Role"),
    }
}

fn rule() -> impl Strategy<Value = NameRule> {
    prop::sample::select(vec![
        NameRule::Dns1123Label,
        NameRule::Dns1123Subdomain,
        NameRule::Dns1035Label,
        NameRule::PathSegment,
    ])
}

fn case() -> impl Strategy<Value = (NameRule, String, String, String)> {
    rule().prop_flat_map(|rule| (Just(rule), name_for(rule), label(63), label(40)))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn host_names_are_valid_short_and_deterministic((rule, name, ns, tenant) in case()) {
        let source = SourceName { name: &name, virtual_namespace: &ns, tenant: &tenant };
        let first = host_name(&source);
        prop_assert!(first.name.len() <= MAX_LABEL_LEN, "{} is {} long", first.name, first.name.len());
        prop_assert!(rule.validate(&first.name).is_ok(), "{} invalid as {rule}", first.name);
        prop_assert_eq!(&first, &host_name(&source));
    }

    #[test]
    fn reverse_lookup_is_exact((rule, name, ns, tenant) in case(), uid in "[a-f0-9-]{0,36}") {
        let target = TenantTarget::new(tenant.clone(), "host-ns").unwrap();
        let gk = kind_for(rule);
        let api_version = if gk.group.is_empty() { "v1".to_owned() } else { format!("{}/v1", gk.group) };
        let object = json!({
            "apiVersion": api_version, "kind": gk.kind,
            "metadata": {
                "name": name, "namespace": ns, "uid": uid,
                "labels": {"tenantplane.io/tenant": "forged", "app.kubernetes.io/managed-by": "x"},
                "annotations": {"tenantplane.io/virtual-name": "forged"}
            }
        });
        let (placement, host) = to_host(&target, &gk, Scope::Namespaced, &object).unwrap();
        let meta = &host["metadata"];
        let labels: BTreeMap<String, String> = serde_json::from_value(meta["labels"].clone()).unwrap();
        let annotations: BTreeMap<String, String> = serde_json::from_value(meta["annotations"].clone()).unwrap();
        let host_name = meta["name"].as_str().unwrap();
        prop_assert!(rule.validate(host_name).is_ok());
        let identity = reverse_lookup(host_name, &labels, &annotations).unwrap();
        prop_assert_eq!(&identity.name, &name);
        prop_assert_eq!(&identity.virtual_namespace, &ns);
        prop_assert_eq!(&identity.tenant, &tenant);
        prop_assert_eq!(&identity.group_kind, &gk);
        prop_assert_eq!(identity.uid.as_deref(), if uid.is_empty() { None } else { Some(uid.as_str()) });
        let me = placement.source_identity(&tenant, None);
        prop_assert_eq!(provenance(&me, host_name, &labels, &annotations), Provenance::Ours);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 500, ..ProptestConfig::default() })]

    /// Short names built to collide through the separator never do.
    #[test]
    fn separator_games_never_collide(a in label(10), b in label(10), c in label(10), t in label(10)) {
        let joined_left = format!("{a}-x-{b}");
        let joined_right = format!("{b}-x-{c}");
        let left = host_name(&SourceName { name: &joined_left, virtual_namespace: &c, tenant: &t }).name;
        let right = host_name(&SourceName { name: &a, virtual_namespace: &joined_right, tenant: &t }).name;
        prop_assert_ne!(left, right);
    }
}

/// A small deterministic generator, so the large-set check is fast and repeatable.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// A valid DNS-1123 subdomain (or, with `dots` false, label) of 1..=max bytes over
    /// a tiny alphabet heavy in `-` and `x`, so near-misses of `-x-` are common.
    fn name(&mut self, max: usize, dots: bool) -> String {
        const ALNUM: &[u8] = b"ax0";
        let len = 1 + self.below(max);
        let mut s = String::with_capacity(len);
        for i in 0..len {
            let edge = i == 0 || i == len - 1;
            let prev_sep = s.ends_with('.') || s.ends_with('-');
            let c = match self.below(6) {
                0 | 1 if !edge && !s.ends_with('.') => '-',
                2 if dots && !edge && !prev_sep => '.',
                _ => ALNUM[self.below(ALNUM.len())] as char,
            };
            s.push(c);
        }
        s
    }
}

/// No two distinct identities in a large random set share a host name: 200,000
/// identities, short ones (plain names, separator games) and long ones (hashed).
#[test]
fn no_collisions_in_large_sets() {
    let mut rng = XorShift(0x9e37_79b9_7f4a_7c15);
    let mut seen: HashMap<String, (String, String, String)> = HashMap::new();
    let mut hashed = 0;
    for i in 0..200_000 {
        let max = if i % 2 == 0 { 8 } else { 120 };
        let name = rng.name(max, true);
        let ns = rng.name(if i % 2 == 0 { 6 } else { 63 }, false);
        let tenant = rng.name(if i % 2 == 0 { 4 } else { 40 }, false);
        for part in [&name, &ns, &tenant] {
            assert!(
                NameRule::Dns1123Subdomain.validate(part).is_ok(),
                "generator made {part:?}"
            );
        }
        let host = host_name(&SourceName {
            name: &name,
            virtual_namespace: &ns,
            tenant: &tenant,
        });
        hashed += usize::from(host.hashed.is_some());
        let identity = (name, ns, tenant);
        if let Some(other) = seen.insert(host.name.clone(), identity.clone()) {
            assert_eq!(other, identity, "{} from two identities", host.name);
        }
    }
    assert!(
        seen.len() > 150_000,
        "too many duplicate identities generated: {}",
        seen.len()
    );
    assert!(
        hashed > 50_000 && hashed < seen.len(),
        "both paths exercised: {hashed} hashed"
    );
}

#[test]
fn another_tenants_object_is_not_ours() {
    let gk = GroupKind::new("", "ConfigMap");
    let object = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg", "namespace": "default"}});
    let dev = TenantTarget::new("dev", "shared").unwrap();
    let prod = TenantTarget::new("prod", "shared").unwrap();
    let (_, host) = to_host(&dev, &gk, Scope::Namespaced, &object).unwrap();
    let labels: BTreeMap<String, String> =
        serde_json::from_value(host["metadata"]["labels"].clone()).unwrap();
    let annotations: BTreeMap<String, String> =
        serde_json::from_value(host["metadata"]["annotations"].clone()).unwrap();
    let name = host["metadata"]["name"].as_str().unwrap();
    let (prod_placement, _) = to_host(&prod, &gk, Scope::Namespaced, &object).unwrap();
    let verdict = provenance(
        &prod_placement.source_identity("prod", None),
        name,
        &labels,
        &annotations,
    );
    assert!(matches!(verdict, Provenance::OtherSource(_)), "{verdict:?}");
    assert!(verdict.refusal().unwrap().contains("tenant dev"));

    let mut unlabelled = labels.clone();
    unlabelled.remove("app.kubernetes.io/managed-by");
    let verdict = provenance(
        &prod_placement.source_identity("prod", None),
        name,
        &unlabelled,
        &annotations,
    );
    assert!(matches!(verdict, Provenance::Foreign(_)), "{verdict:?}");

    // Correct labels on a host object whose name does not match them: copied by hand.
    let dev_identity = reverse_lookup(name, &labels, &annotations).unwrap();
    let verdict = provenance(&dev_identity, "renamed-copy", &labels, &annotations);
    assert!(matches!(verdict, Provenance::Foreign(_)), "{verdict:?}");
    assert!(verdict.refusal().unwrap().contains("copied or edited"));
}
