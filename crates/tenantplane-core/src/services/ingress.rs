//! Ingress toHost: the names an Ingress refers to (backend Services, the default
//! backend, TLS Secrets) are the tenant's; on the host they are the host copies'.
//! A host name already served by an Ingress that is not this tenant object's own
//! copy is refused (the first to claim a host name keeps it).

use std::collections::BTreeSet;

use serde_json::Value;

use crate::kinds::GroupKind;
use crate::naming::{SourceName, host_name};
use crate::plan::meta_of;
use crate::provenance::reverse_lookup;

/// Whether `group_kind` is an Ingress (either API group that served one).
pub fn is_ingress(group_kind: &GroupKind) -> bool {
    group_kind.kind == "Ingress"
        && matches!(
            group_kind.group.as_str(),
            "networking.k8s.io" | "extensions"
        )
}

fn to_host_name(name: &str, virtual_namespace: &str, tenant: &str) -> String {
    host_name(&SourceName {
        name,
        virtual_namespace,
        tenant,
    })
    .name
}

/// Renames one backend's Service (v1 `service.name`, v1beta1 `serviceName`).
fn rewrite_backend(backend: &mut Value, virtual_namespace: &str, tenant: &str) {
    for pointer in ["/service/name", "/serviceName"] {
        if let Some(name) = backend.pointer_mut(pointer)
            && let Some(n) = name.as_str()
        {
            *name = Value::String(to_host_name(n, virtual_namespace, tenant));
        }
    }
}

/// Rewrites the names a host Ingress (`host`, already renamed) refers to, to the
/// host copies of the tenant's objects in `virtual_namespace`.
pub fn rewrite_references(host: &mut Value, virtual_namespace: &str, tenant: &str) {
    let Some(spec) = host.get_mut("spec") else {
        return;
    };
    for pointer in ["/defaultBackend", "/backend"] {
        if let Some(backend) = spec.pointer_mut(pointer) {
            rewrite_backend(backend, virtual_namespace, tenant);
        }
    }
    if let Some(rules) = spec.get_mut("rules").and_then(Value::as_array_mut) {
        for path in rules
            .iter_mut()
            .filter_map(|r| r.pointer_mut("/http/paths"))
            .filter_map(Value::as_array_mut)
            .flatten()
        {
            if let Some(backend) = path.get_mut("backend") {
                rewrite_backend(backend, virtual_namespace, tenant);
            }
        }
    }
    if let Some(tls) = spec.get_mut("tls").and_then(Value::as_array_mut) {
        for entry in tls.iter_mut() {
            if let Some(secret) = entry.get_mut("secretName")
                && let Some(n) = secret.as_str()
            {
                *secret = Value::String(to_host_name(n, virtual_namespace, tenant));
            }
        }
    }
}

/// The host names an Ingress serves (its rules' `host`s).
pub fn served_hosts(ingress: &Value) -> BTreeSet<String> {
    ingress
        .pointer("/spec/rules")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|r| r.get("host").and_then(Value::as_str))
        .filter(|h| !h.is_empty())
        .map(str::to_lowercase)
        .collect()
}

/// Who else serves one of `wanted`'s host names among `host_ingresses` (every
/// Ingress on the host), if anyone: a sentence naming the host name and the
/// owner. The tenant object's own copy (`own_host_name` in `own_namespace`) is
/// not someone else.
pub fn host_collision(
    wanted: &Value,
    own_namespace: &str,
    own_host_name: &str,
    host_ingresses: &[Value],
) -> Option<String> {
    let hosts = served_hosts(wanted);
    if hosts.is_empty() {
        return None;
    }
    for other in host_ingresses {
        let namespace = other
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let (name, labels, annotations) = meta_of(other);
        if namespace == own_namespace && name == own_host_name {
            continue;
        }
        let Some(taken) = served_hosts(other).intersection(&hosts).next().cloned() else {
            continue;
        };
        let owner = match reverse_lookup(name, &labels, &annotations) {
            Ok(id) => format!(
                "Ingress {}/{} of TenantCluster {}",
                id.virtual_namespace, id.name, id.tenant
            ),
            Err(_) => format!("host Ingress {namespace}/{name}"),
        };
        return Some(format!("host name {taken} is already served by {owner}"));
    }
    None
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn backends_default_backend_and_tls_secrets_name_the_host_copies() {
        let mut host = json!({"spec": {
            "defaultBackend": {"service": {"name": "fallback", "port": {"number": 80}}},
            "tls": [{"hosts": ["shop.example.com"], "secretName": "shop-tls"}],
            "rules": [{"host": "shop.example.com", "http": {"paths": [
                {"path": "/", "pathType": "Prefix", "backend": {"service": {"name": "web", "port": {"name": "http"}}}},
                {"path": "/r", "pathType": "Prefix", "backend": {"resource": {"kind": "Bucket", "name": "b"}}}]}}]}});
        rewrite_references(&mut host, "shop", "dev");
        let spec = &host["spec"];
        assert_eq!(
            spec["defaultBackend"]["service"]["name"],
            to_host_name("fallback", "shop", "dev")
        );
        assert_eq!(
            spec["tls"][0]["secretName"],
            to_host_name("shop-tls", "shop", "dev")
        );
        assert_eq!(
            spec["rules"][0]["http"]["paths"][0]["backend"]["service"]["name"],
            to_host_name("web", "shop", "dev")
        );
        assert_eq!(
            spec["rules"][0]["http"]["paths"][0]["backend"]["service"]["port"],
            json!({"name": "http"})
        );
        // Not a Service: left alone.
        assert_eq!(
            spec["rules"][0]["http"]["paths"][1]["backend"]["resource"]["name"],
            "b"
        );
        assert_eq!(spec["tls"][0]["hosts"], json!(["shop.example.com"]));

        let mut beta = json!({"spec": {"backend": {"serviceName": "web", "servicePort": 80}}});
        rewrite_references(&mut beta, "shop", "dev");
        assert_eq!(
            beta["spec"]["backend"]["serviceName"],
            to_host_name("web", "shop", "dev")
        );
    }

    #[test]
    fn a_host_name_served_by_someone_else_is_refused_naming_the_owner() {
        let wanted = json!({"spec": {"rules": [{"host": "Shop.example.com"}]}});
        let foreign = json!({"metadata": {"name": "legacy", "namespace": "web"}, "spec": {"rules": [{"host": "shop.example.com"}]}});
        let reason = host_collision(&wanted, "team-dev", "mine", &[foreign]).unwrap();
        assert_eq!(
            reason,
            "host name shop.example.com is already served by host Ingress web/legacy"
        );
        // Its own copy, and Ingresses of other host names, are no collision.
        let own = json!({"metadata": {"name": "mine", "namespace": "team-dev"}, "spec": {"rules": [{"host": "shop.example.com"}]}});
        let other = json!({"metadata": {"name": "x", "namespace": "a"}, "spec": {"rules": [{"host": "blog.example.com"}]}});
        assert_eq!(
            host_collision(&wanted, "team-dev", "mine", &[own, other]),
            None
        );
        // No host name (a catch-all): nothing to collide on.
        assert_eq!(
            host_collision(&json!({"spec": {}}), "team-dev", "mine", &[]),
            None
        );
    }
}
