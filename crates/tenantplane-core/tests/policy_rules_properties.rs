//! Property tests of the policy rules: hostile patterns and images never panic,
//! regular expressions are anchored, wildcards cover exactly one label, and image
//! references keep their registry and repository.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use proptest::prelude::*;
use serde_json::json;
use tenantplane_api::{KeyPatterns, MetadataKeyRules, MetadataRules, PolicyRules};
use tenantplane_core::policy_rules::image::ImageRef;
use tenantplane_core::policy_rules::patterns::{HostPattern, KeyMatcher};
use tenantplane_core::policy_rules::{CompiledRules, MetadataTarget, violations};

fn label() -> impl Strategy<Value = String> {
    "[a-z0-9]([a-z0-9-]{0,10}[a-z0-9])?"
}

proptest! {
    #[test]
    fn any_pattern_compiles_or_is_a_violation(
        regex in ".{0,40}",
        host in ".{0,40}",
        registry in ".{0,40}",
        image in ".{0,60}",
    ) {
        let rules: PolicyRules = serde_json::from_value(json!({
            "images": {"allowedRegistries": [registry]},
            "ingress": {"allowedHostnames": [host]},
            "metadata": {"namespaces": {"forbiddenAnnotations": {"regex": regex}}},
        })).unwrap();
        match CompiledRules::compile("spec.rules", &rules) {
            Ok(compiled) => {
                let pod = json!({"spec": {"containers": [{"name": "a", "image": image}]}});
                let _ = compiled.check_pod(&pod);
                let ns = json!({"metadata": {"annotations": {image.clone(): "x"}}});
                let _ = compiled.check_metadata(MetadataTarget::Namespace, None, &ns);
            }
            Err(found) => prop_assert!(!found.is_empty()),
        }
        prop_assert_eq!(
            violations("spec.rules", &rules).is_empty(),
            CompiledRules::compile("spec.rules", &rules).is_ok()
        );
    }

    #[test]
    fn regexes_match_whole_keys_only(key in "[a-z./-]{1,20}", extra in "[a-z]{1,5}") {
        let matcher = KeyMatcher::compile(&KeyPatterns {
            exact: vec![],
            regex: Some(regex::escape(&key)),
        }).unwrap();
        prop_assert!(matcher.matches(&key));
        let prefixed = format!("{extra}{key}");
        let suffixed = format!("{key}{extra}");
        prop_assert!(!matcher.matches(&prefixed));
        prop_assert!(!matcher.matches(&suffixed));
    }

    #[test]
    fn a_wildcard_covers_exactly_one_label(
        a in label(), b in label(), domain in prop::collection::vec(label(), 1..4),
    ) {
        let domain = domain.join(".");
        let pattern = HostPattern::parse(&format!("*.{domain}")).unwrap();
        let one = format!("{a}.{domain}");
        let two = format!("{a}.{b}.{domain}");
        let glued = format!("{a}{domain}");
        prop_assert!(pattern.matches(&one));
        prop_assert!(!pattern.matches(&two));
        prop_assert!(!pattern.matches(&domain));
        prop_assert!(!pattern.matches(&glued));
    }

    #[test]
    fn image_references_keep_registry_and_repository(
        host in prop::collection::vec(label(), 2..4),
        port in prop::option::of(1u16..65535),
        path in prop::collection::vec(label(), 1..4),
        tag in prop::option::of("[A-Za-z0-9_][A-Za-z0-9_.-]{0,20}"),
        digest in prop::option::of("[a-f0-9]{8,64}"),
    ) {
        let registry = match port {
            Some(port) => format!("{}:{port}", host.join(".")),
            None => host.join("."),
        };
        let repository = path.join("/");
        let mut reference = format!("{registry}/{repository}");
        if let Some(tag) = &tag { reference.push(':'); reference.push_str(tag); }
        if let Some(digest) = &digest { reference.push_str("@sha256:"); reference.push_str(digest); }
        let parsed = ImageRef::parse(&reference).unwrap();
        let expected_registry = match registry.as_str() {
            "index.docker.io" | "registry-1.docker.io" => "docker.io".to_owned(),
            other => other.to_owned(),
        };
        prop_assert_eq!(parsed.registry, expected_registry);
        prop_assert_eq!(parsed.repository, repository);
        prop_assert_eq!(parsed.tag, tag);
    }

    #[test]
    fn labels_rules_never_judge_annotations(key in "[a-z]{1,10}") {
        let rules = PolicyRules {
            metadata: Some(MetadataRules {
                namespaces: Some(MetadataKeyRules {
                    forbidden_labels: Some(KeyPatterns { exact: vec![], regex: Some(".*".into()) }),
                    ..Default::default()
                }),
                services: None,
            }),
            ..Default::default()
        };
        let compiled = CompiledRules::compile("spec.rules", &rules).unwrap();
        let annotated = json!({"metadata": {"annotations": {key.clone(): "v"}}});
        prop_assert!(compiled.check_metadata(MetadataTarget::Namespace, None, &annotated).is_empty());
        let labelled = json!({"metadata": {"labels": {key: "v"}}});
        prop_assert_eq!(compiled.check_metadata(MetadataTarget::Namespace, None, &labelled).len(), 1);
    }
}
