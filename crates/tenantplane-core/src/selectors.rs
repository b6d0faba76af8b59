//! Selector rewriting: a tenant's label selector, copied to the host, must select
//! only host Pods of the same TenantCluster and the same virtual namespace.
//!
//! Host Pods carry the tenant's labels minus reserved keys, plus
//! `tenantplane.io/tenant` and `tenantplane.io/virtual-namespace` (see
//! [`crate::metadata::reverse_mapping`]). So the host selector is the tenant selector
//! AND those two labels. A tenant selector naming a reserved key is refused: on the
//! host those keys are tenantplane's, and a selector over them would mean something
//! else there than in the tenant.
//!
//! Kinds covered: Service `spec.selector`; NetworkPolicy `podSelector` and its
//! peers (a `namespaceSelector` becomes a selector over the virtual-namespace label
//! within the tenant, evaluated against the tenant's own namespaces); and the
//! selectors and pod templates of PodDisruptionBudgets, Deployments, ReplicaSets,
//! StatefulSets, DaemonSets, ReplicationControllers, Jobs and CronJobs; a Pod's
//! inter-pod affinity and topology spread selectors. Custom resources are left as
//! they are: their selectors mean what their controllers say.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
use serde_json::{Map, Value};

use crate::kinds::GroupKind;
use crate::metadata::{LABEL_TENANT, LABEL_VIRTUAL_NAMESPACE, is_reserved_key};
use crate::selector::matches;

/// The label Kubernetes (1.21+) puts on every namespace; added when missing so
/// `namespaceSelector` over it works against any tenant API server version.
pub const NAMESPACE_NAME_LABEL: &str = "kubernetes.io/metadata.name";

/// The tenant's namespaces and their labels, as the engine last saw them.
pub type TenantNamespaces = BTreeMap<String, BTreeMap<String, String>>;

/// Whose Pods a host selector may match: one TenantCluster, one virtual namespace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SelectorScope<'a> {
    pub tenant: &'a str,
    pub virtual_namespace: &'a str,
}

impl SelectorScope<'_> {
    /// The labels every host Pod of this scope carries.
    pub fn labels(&self) -> BTreeMap<String, String> {
        BTreeMap::from([
            (LABEL_TENANT.to_owned(), self.tenant.to_owned()),
            (
                LABEL_VIRTUAL_NAMESPACE.to_owned(),
                self.virtual_namespace.to_owned(),
            ),
        ])
    }
}

/// A tenant selector tenantplane refuses to copy to the host.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SelectorRewriteError {
    #[error(
        "{field} selects on the reserved label key {key:?}: keys under tenantplane.io/ and \
         app.kubernetes.io/managed-by belong to tenantplane on the host, so such a selector \
         cannot be copied"
    )]
    ReservedKey { field: String, key: String },
    #[error("{field} is not a valid label selector: {reason}")]
    Malformed { field: String, reason: String },
}

/// `selector` AND the scope's labels. Refuses reserved keys and malformed operators.
pub fn host_label_selector(
    field: &str,
    selector: &LabelSelector,
    scope: &SelectorScope<'_>,
) -> Result<LabelSelector, SelectorRewriteError> {
    check_selector(field, selector, true)?;
    let mut host = selector.clone();
    host.match_labels
        .get_or_insert_with(BTreeMap::new)
        .extend(scope.labels());
    Ok(host)
}

/// A Service's (or ReplicationController's) map selector on the host. An empty
/// selector means "no selector" (Endpoints are managed by hand) and stays empty:
/// it must never become a selector over the whole tenant.
pub fn host_map_selector(
    field: &str,
    selector: &BTreeMap<String, String>,
    scope: &SelectorScope<'_>,
) -> Result<BTreeMap<String, String>, SelectorRewriteError> {
    if selector.is_empty() {
        return Ok(BTreeMap::new());
    }
    if let Some(key) = selector.keys().find(|k| is_reserved_key(k)) {
        return Err(reserved(field, key));
    }
    let mut host = selector.clone();
    host.extend(scope.labels());
    Ok(host)
}

/// A NetworkPolicy peer on the host. `policy_namespace` is the policy's virtual
/// namespace; `namespaces` the tenant's namespaces. The host peer never has a
/// `namespaceSelector`, so it can only ever match Pods of the host namespace, and
/// always requires the tenant label, so only this tenant's Pods.
pub fn host_peer_selector(
    field: &str,
    pod_selector: Option<&LabelSelector>,
    namespace_selector: Option<&LabelSelector>,
    tenant: &str,
    policy_namespace: &str,
    namespaces: &TenantNamespaces,
) -> Result<LabelSelector, SelectorRewriteError> {
    let mut host = match pod_selector {
        Some(selector) => {
            check_selector(&format!("{field}.podSelector"), selector, true)?;
            selector.clone()
        }
        // A peer with only a namespaceSelector admits every Pod of those namespaces.
        None => LabelSelector::default(),
    };
    host.match_labels
        .get_or_insert_with(BTreeMap::new)
        .insert(LABEL_TENANT.to_owned(), tenant.to_owned());
    let namespace_requirement = match namespace_selector {
        None => NamespaceMatch::Only(policy_namespace.to_owned()),
        Some(selector) if is_empty(selector) => NamespaceMatch::All,
        Some(selector) => {
            let field = format!("{field}.namespaceSelector");
            // Evaluated inside the tenant, against the tenant's own labels: reserved
            // keys are the tenant's to use here and cannot reach beyond it.
            check_selector(&field, selector, false)?;
            let mut names = Vec::new();
            for (name, labels) in namespaces {
                let mut labels = labels.clone();
                labels
                    .entry(NAMESPACE_NAME_LABEL.to_owned())
                    .or_insert_with(|| name.clone());
                if matches(selector, &labels).map_err(|e| malformed(&field, &e.0))? {
                    names.push(name.clone());
                }
            }
            NamespaceMatch::Some(names)
        }
    };
    scope_to_namespaces(&mut host, namespace_requirement);
    Ok(host)
}

/// Adds the virtual-namespace requirement to a selector already holding the tenant label.
fn scope_to_namespaces(host: &mut LabelSelector, namespaces: NamespaceMatch) {
    match namespaces {
        NamespaceMatch::All => {}
        NamespaceMatch::Only(name) => {
            host.match_labels
                .get_or_insert_with(BTreeMap::new)
                .insert(LABEL_VIRTUAL_NAMESPACE.to_owned(), name);
        }
        NamespaceMatch::Some(names) => {
            let requirement = if names.is_empty() {
                // No namespace matches: `tenant=<tc>` and "no tenant label" together
                // match nothing (`In` with no values is not a valid selector).
                LabelSelectorRequirement {
                    key: LABEL_TENANT.to_owned(),
                    operator: "DoesNotExist".to_owned(),
                    values: None,
                }
            } else {
                LabelSelectorRequirement {
                    key: LABEL_VIRTUAL_NAMESPACE.to_owned(),
                    operator: "In".to_owned(),
                    values: Some(names),
                }
            };
            host.match_expressions
                .get_or_insert_with(Vec::new)
                .push(requirement);
        }
    }
}

enum NamespaceMatch {
    All,
    Only(String),
    Some(Vec<String>),
}

fn is_empty(selector: &LabelSelector) -> bool {
    selector
        .match_labels
        .as_ref()
        .is_none_or(BTreeMap::is_empty)
        && selector
            .match_expressions
            .as_ref()
            .is_none_or(Vec::is_empty)
}

fn reserved(field: &str, key: &str) -> SelectorRewriteError {
    SelectorRewriteError::ReservedKey {
        field: field.to_owned(),
        key: key.to_owned(),
    }
}

fn malformed(field: &str, reason: &str) -> SelectorRewriteError {
    SelectorRewriteError::Malformed {
        field: field.to_owned(),
        reason: reason.to_owned(),
    }
}

/// Refuses unknown operators, values where none belong (and none where some do),
/// and, for selectors evaluated on the host, reserved keys.
fn check_selector(
    field: &str,
    selector: &LabelSelector,
    host_evaluated: bool,
) -> Result<(), SelectorRewriteError> {
    if host_evaluated
        && let Some(key) = selector
            .match_labels
            .iter()
            .flatten()
            .map(|(k, _)| k)
            .find(|k| is_reserved_key(k))
    {
        return Err(reserved(&format!("{field}.matchLabels"), key));
    }
    for (i, expression) in selector.match_expressions.iter().flatten().enumerate() {
        let field = format!("{field}.matchExpressions[{i}]");
        if host_evaluated && is_reserved_key(&expression.key) {
            return Err(reserved(&field, &expression.key));
        }
        let has_values = expression.values.as_ref().is_some_and(|v| !v.is_empty());
        match (expression.operator.as_str(), has_values) {
            ("In" | "NotIn", true) | ("Exists" | "DoesNotExist", false) => {}
            ("In" | "NotIn", false) => return Err(malformed(&field, "the operator needs values")),
            ("Exists" | "DoesNotExist", true) => {
                return Err(malformed(&field, "the operator takes no values"));
            }
            (other, _) => return Err(malformed(&field, &format!("unknown operator {other:?}"))),
        }
    }
    Ok(())
}

/// Rewrites every selector of a host object in place (see the module docs for the
/// kinds). `host` is the already transformed object; `scope` its tenant and virtual
/// namespace; `namespaces` the tenant's namespaces (for NetworkPolicy peers; an
/// empty map makes every labelled `namespaceSelector` match nothing).
pub fn rewrite_selectors(
    group_kind: &GroupKind,
    host: &mut Value,
    scope: &SelectorScope<'_>,
    namespaces: &TenantNamespaces,
) -> Result<(), SelectorRewriteError> {
    let Some(spec) = host.get_mut("spec").and_then(Value::as_object_mut) else {
        return Ok(());
    };
    match (group_kind.group.as_str(), group_kind.kind.as_str()) {
        ("", "Service") => rewrite_map_at(spec, "selector", "spec.selector", scope),
        ("", "Pod") => pod::rewrite_pod_scheduling(spec, scope),
        ("", "ReplicationController") => {
            rewrite_map_at(spec, "selector", "spec.selector", scope)?;
            label_template(spec, "template", scope);
            Ok(())
        }
        ("networking.k8s.io", "NetworkPolicy") => rewrite_network_policy(spec, scope, namespaces),
        ("policy", "PodDisruptionBudget") => {
            rewrite_selector_at(spec, "selector", "spec.selector", scope)
        }
        ("apps", "Deployment" | "ReplicaSet" | "StatefulSet" | "DaemonSet") | ("batch", "Job") => {
            rewrite_selector_at(spec, "selector", "spec.selector", scope)?;
            label_template(spec, "template", scope);
            Ok(())
        }
        ("batch", "CronJob") => {
            let Some(job) = spec
                .get_mut("jobTemplate")
                .and_then(|t| t.get_mut("spec"))
                .and_then(Value::as_object_mut)
            else {
                return Ok(());
            };
            rewrite_selector_at(job, "selector", "spec.jobTemplate.spec.selector", scope)?;
            label_template(job, "template", scope);
            Ok(())
        }
        _ => Ok(()),
    }
}

fn parse<T: serde::de::DeserializeOwned>(
    field: &str,
    value: &Value,
) -> Result<T, SelectorRewriteError> {
    serde_json::from_value(value.clone()).map_err(|e| malformed(field, &e.to_string()))
}

fn to_value<T: serde::Serialize>(field: &str, value: &T) -> Result<Value, SelectorRewriteError> {
    serde_json::to_value(value).map_err(|e| malformed(field, &e.to_string()))
}

fn rewrite_map_at(
    spec: &mut Map<String, Value>,
    key: &str,
    field: &str,
    scope: &SelectorScope<'_>,
) -> Result<(), SelectorRewriteError> {
    let Some(value) = spec.get_mut(key).filter(|v| !v.is_null()) else {
        return Ok(());
    };
    let selector: BTreeMap<String, String> = parse(field, value)?;
    *value = to_value(field, &host_map_selector(field, &selector, scope)?)?;
    Ok(())
}

fn rewrite_selector_at(
    spec: &mut Map<String, Value>,
    key: &str,
    field: &str,
    scope: &SelectorScope<'_>,
) -> Result<(), SelectorRewriteError> {
    // Absent stays absent: a PodDisruptionBudget without a selector selects no Pod,
    // and a Job without one gets a generated, UID-unique one on the host.
    let Some(value) = spec.get_mut(key).filter(|v| !v.is_null()) else {
        return Ok(());
    };
    let selector: LabelSelector = parse(field, value)?;
    *value = to_value(field, &host_label_selector(field, &selector, scope)?)?;
    Ok(())
}

/// Pods made from a host template carry the scope's labels too, so the rewritten
/// selector still matches them (reserved keys were stripped by the transform).
fn label_template(spec: &mut Map<String, Value>, key: &str, scope: &SelectorScope<'_>) {
    let Some(template) = spec.get_mut(key).and_then(Value::as_object_mut) else {
        return;
    };
    let meta = template
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    let Some(meta) = meta.as_object_mut() else {
        return;
    };
    let labels = meta
        .entry("labels")
        .or_insert_with(|| Value::Object(Map::new()));
    if !labels.is_object() {
        *labels = Value::Object(Map::new());
    }
    if let Some(labels) = labels.as_object_mut() {
        for (k, v) in scope.labels() {
            labels.insert(k, Value::String(v));
        }
    }
}

fn rewrite_network_policy(
    spec: &mut Map<String, Value>,
    scope: &SelectorScope<'_>,
    namespaces: &TenantNamespaces,
) -> Result<(), SelectorRewriteError> {
    // An absent podSelector is `{}`: every Pod of the policy's namespace.
    let pod_selector: LabelSelector = match spec.get("podSelector").filter(|v| !v.is_null()) {
        Some(value) => parse("spec.podSelector", value)?,
        None => LabelSelector::default(),
    };
    spec.insert(
        "podSelector".into(),
        to_value(
            "spec.podSelector",
            &host_label_selector("spec.podSelector", &pod_selector, scope)?,
        )?,
    );
    for (direction, peers_key) in [("ingress", "from"), ("egress", "to")] {
        let Some(rules) = spec.get_mut(direction).and_then(Value::as_array_mut) else {
            continue;
        };
        for (i, rule) in rules.iter_mut().enumerate() {
            let Some(peers) = rule.get_mut(peers_key).and_then(Value::as_array_mut) else {
                continue;
            };
            for (j, peer) in peers.iter_mut().enumerate() {
                let field = format!("spec.{direction}[{i}].{peers_key}[{j}]");
                let Some(peer) = peer.as_object_mut() else {
                    return Err(malformed(&field, "a peer must be an object"));
                };
                let pods = peer.remove("podSelector").filter(|v| !v.is_null());
                let namespaces_selector = peer.remove("namespaceSelector").filter(|v| !v.is_null());
                if pods.is_none() && namespaces_selector.is_none() {
                    continue; // an ipBlock peer: kept as it is
                }
                let pods: Option<LabelSelector> = pods
                    .map(|v| parse(&format!("{field}.podSelector"), &v))
                    .transpose()?;
                let namespace_selector: Option<LabelSelector> = namespaces_selector
                    .map(|v| parse(&format!("{field}.namespaceSelector"), &v))
                    .transpose()?;
                let host = host_peer_selector(
                    &field,
                    pods.as_ref(),
                    namespace_selector.as_ref(),
                    scope.tenant,
                    scope.virtual_namespace,
                    namespaces,
                )?;
                peer.insert("podSelector".into(), to_value(&field, &host)?);
            }
        }
    }
    Ok(())
}

/// The selectors of a host object by field path (`spec.selector`,
/// `spec.ingress[0].from[1].podSelector`, ...), for `explain-sync` and `why`: what
/// the host copy actually selects.
pub fn host_selectors(group_kind: &GroupKind, host: &Value) -> BTreeMap<String, Value> {
    let mut out = BTreeMap::new();
    let Some(spec) = host.get("spec") else {
        return out;
    };
    let mut take = |field: String, value: Option<&Value>| {
        if let Some(value) = value.filter(|v| !v.is_null()) {
            out.insert(field, value.clone());
        }
    };
    match (group_kind.group.as_str(), group_kind.kind.as_str()) {
        ("networking.k8s.io", "NetworkPolicy") => {
            take("spec.podSelector".into(), spec.get("podSelector"));
            for (direction, peers_key) in [("ingress", "from"), ("egress", "to")] {
                let rules = spec.get(direction).and_then(Value::as_array);
                for (i, rule) in rules.into_iter().flatten().enumerate() {
                    let peers = rule.get(peers_key).and_then(Value::as_array);
                    for (j, peer) in peers.into_iter().flatten().enumerate() {
                        for key in ["podSelector", "namespaceSelector"] {
                            take(
                                format!("spec.{direction}[{i}].{peers_key}[{j}].{key}"),
                                peer.get(key),
                            );
                        }
                    }
                }
            }
        }
        ("batch", "CronJob") => take(
            "spec.jobTemplate.spec.selector".into(),
            spec.pointer("/jobTemplate/spec/selector"),
        ),
        _ => take("spec.selector".into(), spec.get("selector")),
    }
    out
}

#[path = "selectors_pod.rs"]
mod pod;

#[cfg(test)]
#[path = "selectors_tests.rs"]
mod tests;
