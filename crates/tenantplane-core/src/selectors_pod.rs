//! Pod scheduling selectors (inter-pod affinity, topology spread) under the same
//! rule as every other selector; see the parent module.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use serde_json::{Map, Value};

use super::{
    NamespaceMatch, SelectorRewriteError, SelectorScope, check_selector, is_empty, malformed,
    parse, rewrite_selector_at, scope_to_namespaces, to_value,
};
use crate::metadata::LABEL_TENANT;

/// A Pod's inter-pod affinity and topology spread selectors: on the host they would
/// count (or, with a `namespaceSelector`, look into) other tenants' Pods. They get
/// the same rule as any selector; a term's `namespaces` become the virtual-namespace
/// label, `namespaceSelector: {}` the whole tenant, and a labelled
/// `namespaceSelector` (the Pod path knows no namespace labels) no namespace.
pub(super) fn rewrite_pod_scheduling(
    spec: &mut Map<String, Value>,
    scope: &SelectorScope<'_>,
) -> Result<(), SelectorRewriteError> {
    for kind in ["podAffinity", "podAntiAffinity"] {
        let Some(affinity) = spec
            .get_mut("affinity")
            .and_then(|a| a.get_mut(kind))
            .and_then(Value::as_object_mut)
        else {
            continue;
        };
        let required = "requiredDuringSchedulingIgnoredDuringExecution";
        if let Some(terms) = affinity.get_mut(required).and_then(Value::as_array_mut) {
            for (i, term) in terms.iter_mut().enumerate() {
                let field = format!("spec.affinity.{kind}.{required}[{i}]");
                rewrite_affinity_term(term, &field, scope)?;
            }
        }
        let preferred = "preferredDuringSchedulingIgnoredDuringExecution";
        if let Some(terms) = affinity.get_mut(preferred).and_then(Value::as_array_mut) {
            for (i, weighted) in terms.iter_mut().enumerate() {
                if let Some(term) = weighted.get_mut("podAffinityTerm") {
                    let field = format!("spec.affinity.{kind}.{preferred}[{i}].podAffinityTerm");
                    rewrite_affinity_term(term, &field, scope)?;
                }
            }
        }
    }
    if let Some(constraints) = spec
        .get_mut("topologySpreadConstraints")
        .and_then(Value::as_array_mut)
    {
        for (i, constraint) in constraints.iter_mut().enumerate() {
            if let Some(constraint) = constraint.as_object_mut() {
                let field = format!("spec.topologySpreadConstraints[{i}].labelSelector");
                rewrite_selector_at(constraint, "labelSelector", &field, scope)?;
            }
        }
    }
    Ok(())
}

fn rewrite_affinity_term(
    term: &mut Value,
    field: &str,
    scope: &SelectorScope<'_>,
) -> Result<(), SelectorRewriteError> {
    let Some(term) = term.as_object_mut() else {
        return Err(malformed(field, "an affinity term must be an object"));
    };
    // Host namespaces mean nothing to the tenant: both fields go, whatever follows.
    let listed: Vec<String> = match term.remove("namespaces").filter(|v| !v.is_null()) {
        Some(value) => parse(&format!("{field}.namespaces"), &value)?,
        None => Vec::new(),
    };
    let namespace_selector: Option<LabelSelector> = term
        .remove("namespaceSelector")
        .filter(|v| !v.is_null())
        .map(|v| parse(&format!("{field}.namespaceSelector"), &v))
        .transpose()?;
    // A null labelSelector selects no Pod: nothing to scope.
    let Some(value) = term.get_mut("labelSelector").filter(|v| !v.is_null()) else {
        return Ok(());
    };
    let selector_field = format!("{field}.labelSelector");
    let selector: LabelSelector = parse(&selector_field, value)?;
    check_selector(&selector_field, &selector, true)?;
    let namespaces = match &namespace_selector {
        Some(selector) if is_empty(selector) => NamespaceMatch::All,
        None if listed.is_empty() => NamespaceMatch::Only(scope.virtual_namespace.to_owned()),
        _ => NamespaceMatch::Some(listed),
    };
    let mut host = selector;
    host.match_labels
        .get_or_insert_with(BTreeMap::new)
        .insert(LABEL_TENANT.to_owned(), scope.tenant.to_owned());
    scope_to_namespaces(&mut host, namespaces);
    *value = to_value(&selector_field, &host)?;
    Ok(())
}
