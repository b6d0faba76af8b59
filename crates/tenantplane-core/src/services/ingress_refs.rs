//! What a tenant Ingress needs before its host copy is written: the TLS Secrets
//! it names (copied like Pod dependencies) and an IngressClass the tenant's
//! IsolationProfile allows.

use std::collections::BTreeSet;

use serde_json::Value;

use crate::pods::refcount::DependencyKey;
use crate::pods::refs::DependencyKind;

/// The annotation older Ingresses name their class with.
pub const ANNOTATION_INGRESS_CLASS: &str = "kubernetes.io/ingress.class";

/// Each TLS Secret an Ingress names, with the field that names it.
pub fn tls_secrets(ingress: &Value) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    let entries = ingress.pointer("/spec/tls").and_then(Value::as_array);
    for (i, entry) in entries.into_iter().flatten().enumerate() {
        if let Some(name) = entry
            .get("secretName")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
            && !out.iter().any(|(n, _)| n == name)
        {
            out.push((name.to_owned(), format!("spec.tls[{i}].secretName")));
        }
    }
    out
}

/// Every Secret the given tenant Ingresses name, as dependency keys, so reference
/// counting keeps a copy an Ingress (and no Pod) uses.
pub fn needed_by_ingresses<'a>(
    ingresses: impl IntoIterator<Item = &'a Value>,
) -> BTreeSet<DependencyKey> {
    let mut needed = BTreeSet::new();
    for ingress in ingresses {
        let Some(namespace) = ingress
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
        else {
            continue;
        };
        for (name, _) in tls_secrets(ingress) {
            needed.insert(DependencyKey {
                kind: DependencyKind::Secret,
                namespace: namespace.to_owned(),
                name,
            });
        }
    }
    needed
}

/// The class an Ingress names and the field naming it (`spec.ingressClassName`
/// wins over the annotation, as in Kubernetes).
pub fn ingress_class(ingress: &Value) -> Option<(String, &'static str)> {
    if let Some(class) = ingress
        .pointer("/spec/ingressClassName")
        .and_then(Value::as_str)
    {
        return Some((class.to_owned(), "spec.ingressClassName"));
    }
    ingress
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(ANNOTATION_INGRESS_CLASS))
        .and_then(Value::as_str)
        .map(|c| {
            (
                c.to_owned(),
                "metadata.annotations[kubernetes.io/ingress.class]",
            )
        })
}

/// Why the profile's `allowedIngressClasses` refuses this Ingress, or `None`.
/// Absent allows any class; otherwise the class must be listed, and an Ingress
/// naming no class is refused (the host's default class would serve it).
pub fn class_refusal(ingress: &Value, allowed: Option<&[String]>) -> Option<String> {
    let allowed = allowed?;
    match ingress_class(ingress) {
        Some((class, _)) if allowed.contains(&class) => None,
        Some((class, field)) => Some(format!(
            "IngressClass {class:?} ({field}) is not in the IsolationProfile's controls.allowedIngressClasses"
        )),
        None => Some(
            "it names no IngressClass (spec.ingressClassName) and the IsolationProfile's controls.allowedIngressClasses is set"
                .into(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn tls_secrets_are_named_once_with_their_field() {
        let ingress = json!({"metadata": {"namespace": "a"}, "spec": {"tls": [
            {"secretName": "one"}, {"hosts": ["x"]}, {"secretName": "two"}, {"secretName": "one"}, {"secretName": ""}]}});
        assert_eq!(
            tls_secrets(&ingress),
            [
                ("one".to_owned(), "spec.tls[0].secretName".to_owned()),
                ("two".to_owned(), "spec.tls[2].secretName".to_owned())
            ]
        );
        let needed = needed_by_ingresses([
            &ingress,
            &json!({"spec": {"tls": [{"secretName": "no-namespace"}]}}),
        ]);
        let names: Vec<_> = needed
            .iter()
            .map(|k| (k.namespace.as_str(), k.name.as_str()))
            .collect();
        assert_eq!(names, [("a", "one"), ("a", "two")]);
        assert!(needed.iter().all(|k| k.kind == DependencyKind::Secret));
        assert!(tls_secrets(&json!({"spec": {"tls": "garbage"}})).is_empty());
    }

    #[test]
    fn the_class_comes_from_the_field_then_the_annotation() {
        let both = json!({"metadata": {"annotations": {ANNOTATION_INGRESS_CLASS: "old"}},
                          "spec": {"ingressClassName": "new"}});
        assert_eq!(
            ingress_class(&both),
            Some(("new".into(), "spec.ingressClassName"))
        );
        let annotated = json!({"metadata": {"annotations": {ANNOTATION_INGRESS_CLASS: "old"}}});
        assert_eq!(ingress_class(&annotated).map(|c| c.0), Some("old".into()));
        assert_eq!(ingress_class(&json!({"spec": {}})), None);
    }

    #[test]
    fn absent_allows_any_empty_allows_none_and_a_list_allows_its_classes() {
        let nginx = json!({"spec": {"ingressClassName": "nginx"}});
        let none = json!({"spec": {}});
        assert_eq!(class_refusal(&nginx, None), None);
        assert_eq!(class_refusal(&none, None), None);
        let reason = class_refusal(&nginx, Some(&[])).unwrap_or_default();
        assert!(
            reason.contains("\"nginx\"") && reason.contains("spec.ingressClassName"),
            "{reason}"
        );
        let list = ["internal".to_owned(), "nginx".to_owned()];
        assert_eq!(class_refusal(&nginx, Some(&list)), None);
        assert!(
            class_refusal(
                &json!({"spec": {"ingressClassName": "public"}}),
                Some(&list)
            )
            .is_some()
        );
        // Case matters: class names are object names.
        assert!(
            class_refusal(&json!({"spec": {"ingressClassName": "NGINX"}}), Some(&list)).is_some()
        );
        assert!(class_refusal(&none, Some(&list)).is_some());
    }
}
