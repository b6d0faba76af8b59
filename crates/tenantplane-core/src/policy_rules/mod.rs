//! The policy rules of `Tenant.spec.rules` and `IsolationProfile.spec.rules`,
//! compiled once per decision and matched against objects as JSON (so any shape an
//! API server sends, including 1.20's `EphemeralContainers` kind, is read without a
//! decode failure).
//!
//! [`CompiledRules::compile`] is both the admission-time validation (every pattern
//! parsed, every regular expression compiled within size limits, each problem a
//! [`Violation`] with its field) and what the enforcing webhooks and the sync engine
//! use. A rule stored while the webhook was down that does not compile makes the
//! enforcer refuse with that message; nothing here panics on any input.

pub mod image;
pub mod patterns;

use std::collections::BTreeMap;
use std::fmt;

use serde_json::Value;
use tenantplane_api::{
    KeyPatterns, MetadataKeyRules, PolicyRules, PullPolicy, ServiceRules, ServiceType,
};

use crate::validation::Violation;
use image::ImageRef;
use patterns::{HostPattern, KeyMatcher, host_patterns};

/// One rule an object breaks: the rule (`images.allowedRegistries`), the object's
/// field (`spec.containers[0].image`) and what is wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Broken {
    pub rule: &'static str,
    pub field: String,
    pub message: String,
}

impl fmt::Display for Broken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {} (rule {})", self.field, self.message, self.rule)
    }
}

/// Joins broken rules into one message.
pub fn describe(broken: &[Broken]) -> String {
    broken
        .iter()
        .map(Broken::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// The rules `new` breaks that `old` did not already break: an update may keep a
/// problem the object had before the rule existed, but add none. Messages name the
/// offending value, so changing an offending value to another offending one counts.
pub fn introduced(old: &[Broken], new: Vec<Broken>) -> Vec<Broken> {
    new.into_iter().filter(|b| !old.contains(b)).collect()
}

#[derive(Clone, Debug)]
enum RegistryRule {
    Host(String),
    Prefix(String),
}

#[derive(Clone, Debug, Default)]
struct KeyRules {
    forbidden_labels: Option<KeyMatcher>,
    forbidden_annotations: Option<KeyMatcher>,
    allowed_labels: Option<KeyMatcher>,
    allowed_annotations: Option<KeyMatcher>,
}

/// Which object's metadata rules apply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MetadataTarget {
    Namespace,
    Service,
}

/// [`PolicyRules`] ready to match.
#[derive(Clone, Debug, Default)]
pub struct CompiledRules {
    registries: Option<Vec<RegistryRule>>,
    pull_policies: Option<Vec<PullPolicy>>,
    services: Option<ServiceRules>,
    external_names: Option<Vec<HostPattern>>,
    ingress_hosts: Option<Vec<HostPattern>>,
    namespace_keys: Option<KeyRules>,
    service_keys: Option<KeyRules>,
}

/// The violations of `rules`, with fields under `base` (such as `spec.rules`).
pub fn violations(base: &str, rules: &PolicyRules) -> Vec<Violation> {
    CompiledRules::compile(base, rules)
        .err()
        .unwrap_or_default()
}

impl CompiledRules {
    /// Compiles `rules`, or lists every problem, each under `base`.
    pub fn compile(base: &str, rules: &PolicyRules) -> Result<Self, Vec<Violation>> {
        let mut out = Vec::new();
        let mut compiled = CompiledRules::default();
        if let Some(images) = &rules.images {
            if let Some(registries) = &images.allowed_registries {
                let mut parsed = Vec::new();
                for (i, entry) in registries.iter().enumerate() {
                    let field = format!("{base}.images.allowedRegistries[{i}]");
                    match registry_rule(entry) {
                        Ok(rule) => parsed.push(rule),
                        Err(message) => out.push(Violation::new(field, message)),
                    }
                }
                compiled.registries = Some(parsed);
            }
            compiled.pull_policies = images.allowed_pull_policies.clone();
        }
        if let Some(services) = &rules.services {
            compiled.external_names = hosts(
                &format!("{base}.services.allowedExternalNames"),
                services.allowed_external_names.as_deref(),
                &mut out,
            );
            compiled.services = Some(services.clone());
        }
        if let Some(ingress) = &rules.ingress {
            compiled.ingress_hosts = hosts(
                &format!("{base}.ingress.allowedHostnames"),
                ingress.allowed_hostnames.as_deref(),
                &mut out,
            );
        }
        if let Some(metadata) = &rules.metadata {
            compiled.namespace_keys = metadata
                .namespaces
                .as_ref()
                .map(|k| key_rules(&format!("{base}.metadata.namespaces"), k, &mut out));
            compiled.service_keys = metadata
                .services
                .as_ref()
                .map(|k| key_rules(&format!("{base}.metadata.services"), k, &mut out));
        }
        if out.is_empty() {
            Ok(compiled)
        } else {
            Err(out)
        }
    }

    /// Whether any rule about Ingress host names is set.
    pub fn restricts_ingress(&self) -> bool {
        self.ingress_hosts.is_some()
    }

    /// The image rules against every container of a Pod (`spec.containers`,
    /// `spec.initContainers`, `spec.ephemeralContainers`) or of a 1.20
    /// `EphemeralContainers` object (`ephemeralContainers`).
    pub fn check_pod(&self, object: &Value) -> Vec<Broken> {
        let mut out = Vec::new();
        if self.registries.is_none() && self.pull_policies.is_none() {
            return out;
        }
        let lists = [
            ("/spec/containers", "spec.containers"),
            ("/spec/initContainers", "spec.initContainers"),
            ("/spec/ephemeralContainers", "spec.ephemeralContainers"),
            ("/ephemeralContainers", "ephemeralContainers"),
        ];
        for (pointer, field) in lists {
            let containers = object.pointer(pointer).and_then(Value::as_array);
            for (i, container) in containers.into_iter().flatten().enumerate() {
                self.check_container(&format!("{field}[{i}]"), container, &mut out);
            }
        }
        out
    }

    fn check_container(&self, field: &str, container: &Value, out: &mut Vec<Broken>) {
        let image = container.get("image").and_then(Value::as_str).unwrap_or("");
        let parsed = match ImageRef::parse(image) {
            Ok(parsed) => parsed,
            Err(err) => {
                out.push(Broken {
                    rule: "images",
                    field: format!("{field}.image"),
                    message: err.to_string(),
                });
                return;
            }
        };
        if let Some(registries) = &self.registries {
            let allowed = registries.iter().any(|rule| match rule {
                RegistryRule::Host(host) => parsed.registry == *host,
                RegistryRule::Prefix(prefix) => parsed.path_for_prefix().starts_with(prefix),
            });
            if !allowed {
                out.push(Broken {
                    rule: "images.allowedRegistries",
                    field: format!("{field}.image"),
                    message: format!(
                        "image {image:?} is from registry {} ({parsed}), which the tenant may not use",
                        parsed.registry
                    ),
                });
            }
        }
        if let Some(policies) = &self.pull_policies {
            let policy = container
                .get("imagePullPolicy")
                .and_then(Value::as_str)
                .unwrap_or_else(|| parsed.default_pull_policy());
            if !policies.iter().any(|p| p.as_str() == policy) {
                let names: Vec<_> = policies.iter().map(|p| p.as_str()).collect();
                out.push(Broken {
                    rule: "images.allowedPullPolicies",
                    field: format!("{field}.imagePullPolicy"),
                    message: format!(
                        "imagePullPolicy {policy} of image {image:?} is not allowed: use one of {names:?}"
                    ),
                });
            }
        }
    }

    /// The Service rules against a Service: type, `externalIPs`, ExternalName target.
    pub fn check_service(&self, object: &Value) -> Vec<Broken> {
        let mut out = Vec::new();
        let Some(rules) = &self.services else {
            return out;
        };
        let kind = object
            .pointer("/spec/type")
            .and_then(Value::as_str)
            .unwrap_or("ClusterIP");
        if let Some(types) = &rules.allowed_types
            && !types.iter().any(|t| t.as_str() == kind)
        {
            let names: Vec<_> = types.iter().map(|t| t.as_str()).collect();
            out.push(Broken {
                rule: "services.allowedTypes",
                field: "spec.type".into(),
                message: format!("Service type {kind} is not allowed: use one of {names:?}"),
            });
        }
        let external_ips = object
            .pointer("/spec/externalIPs")
            .and_then(Value::as_array)
            .filter(|ips| !ips.is_empty());
        if let Some(ips) = external_ips
            && !rules.allow_external_ips
        {
            out.push(Broken {
                rule: "services.allowExternalIPs",
                field: "spec.externalIPs".into(),
                message: format!("externalIPs {ips:?} are not allowed"),
            });
        }
        if kind == ServiceType::ExternalName.as_str()
            && let Some(patterns) = &self.external_names
        {
            let name = object
                .pointer("/spec/externalName")
                .and_then(Value::as_str)
                .unwrap_or("");
            if !patterns.iter().any(|p| p.matches(name)) {
                out.push(Broken {
                    rule: "services.allowedExternalNames",
                    field: "spec.externalName".into(),
                    message: format!("externalName {name:?} matches no allowed pattern"),
                });
            }
        }
        out
    }

    /// The host-name rules against an Ingress's rules and TLS hosts.
    pub fn check_ingress(&self, object: &Value) -> Vec<Broken> {
        let Some(patterns) = &self.ingress_hosts else {
            return Vec::new();
        };
        ingress_hosts(object)
            .into_iter()
            .filter(|(_, host)| !patterns.iter().any(|p| p.matches(host)))
            .map(|(field, host)| Broken {
                rule: "ingress.allowedHostnames",
                field,
                message: format!("host {host:?} matches no allowed host name"),
            })
            .collect()
    }

    /// The label and annotation rules of `target` against the keys `new` sets that
    /// `old` did not set to the same value (a key added or changed by this write). The
    /// new object is what is checked: a write that only removes keys breaks nothing.
    pub fn check_metadata(
        &self,
        target: MetadataTarget,
        old: Option<&Value>,
        new: &Value,
    ) -> Vec<Broken> {
        let rules = match target {
            MetadataTarget::Namespace => &self.namespace_keys,
            MetadataTarget::Service => &self.service_keys,
        };
        let Some(rules) = rules else {
            return Vec::new();
        };
        let mut out = Vec::new();
        let checks = [
            ("labels", &rules.forbidden_labels, &rules.allowed_labels),
            (
                "annotations",
                &rules.forbidden_annotations,
                &rules.allowed_annotations,
            ),
        ];
        for (what, forbidden, allowed) in checks {
            let before = map_at(old, what);
            for (key, value) in map_at(Some(new), what) {
                if before.get(&key) == Some(&value) {
                    continue;
                }
                let field = format!("metadata.{what}[{key:?}]");
                if forbidden.as_ref().is_some_and(|m| m.matches(&key)) {
                    out.push(Broken {
                        rule: forbidden_rule(target, what),
                        field,
                        message: format!(
                            "the {} key {key:?} is forbidden",
                            &what[..what.len() - 1]
                        ),
                    });
                } else if allowed.as_ref().is_some_and(|m| !m.matches(&key)) {
                    out.push(Broken {
                        rule: allowed_rule(target, what),
                        field,
                        message: format!(
                            "the {} key {key:?} is not allowed",
                            &what[..what.len() - 1]
                        ),
                    });
                }
            }
        }
        out
    }
}

fn forbidden_rule(target: MetadataTarget, what: &str) -> &'static str {
    match (target, what) {
        (MetadataTarget::Namespace, "labels") => "metadata.namespaces.forbiddenLabels",
        (MetadataTarget::Namespace, _) => "metadata.namespaces.forbiddenAnnotations",
        (MetadataTarget::Service, "labels") => "metadata.services.forbiddenLabels",
        (MetadataTarget::Service, _) => "metadata.services.forbiddenAnnotations",
    }
}

fn allowed_rule(target: MetadataTarget, what: &str) -> &'static str {
    match (target, what) {
        (MetadataTarget::Namespace, "labels") => "metadata.namespaces.allowedLabels",
        (MetadataTarget::Namespace, _) => "metadata.namespaces.allowedAnnotations",
        (MetadataTarget::Service, "labels") => "metadata.services.allowedLabels",
        (MetadataTarget::Service, _) => "metadata.services.allowedAnnotations",
    }
}

fn map_at(object: Option<&Value>, what: &str) -> BTreeMap<String, Value> {
    object
        .and_then(|o| o.get("metadata"))
        .and_then(|m| m.get(what))
        .and_then(Value::as_object)
        .map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
        .unwrap_or_default()
}

/// Every host an Ingress (`networking.k8s.io` or `extensions`) names, with its
/// field: `spec.rules[i].host` and `spec.tls[i].hosts[j]`.
pub fn ingress_hosts(object: &Value) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let rules = object.pointer("/spec/rules").and_then(Value::as_array);
    for (i, rule) in rules.into_iter().flatten().enumerate() {
        if let Some(host) = rule
            .get("host")
            .and_then(Value::as_str)
            .filter(|h| !h.is_empty())
        {
            out.push((format!("spec.rules[{i}].host"), host.to_owned()));
        }
    }
    let tls = object.pointer("/spec/tls").and_then(Value::as_array);
    for (i, entry) in tls.into_iter().flatten().enumerate() {
        let hosts = entry.get("hosts").and_then(Value::as_array);
        for (j, host) in hosts.into_iter().flatten().enumerate() {
            if let Some(host) = host.as_str().filter(|h| !h.is_empty()) {
                out.push((format!("spec.tls[{i}].hosts[{j}]"), host.to_owned()));
            }
        }
    }
    out
}

/// The name of the Lease that claims Ingress host `host` for one tenant:
/// `ingress-host-` and the first 20 hex digits of the SHA-256 of the lower-case host
/// (a trailing dot dropped), so every spelling of one host has one claim.
pub fn ingress_claim_name(host: &str) -> String {
    use sha2::{Digest, Sha256};
    let host = host.strip_suffix('.').unwrap_or(host).to_ascii_lowercase();
    let digest = Sha256::digest(host.as_bytes());
    let hex = crate::hex::short_hex(digest, 10);
    format!("ingress-host-{hex}")
}

fn registry_rule(entry: &str) -> Result<RegistryRule, String> {
    let lower = entry.to_ascii_lowercase();
    if lower.is_empty() || lower.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!("{entry:?} is empty or holds white space"));
    }
    match lower.split_once('/') {
        None => {
            let host_ok = lower
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':' | '[' | ']'));
            if host_ok {
                Ok(RegistryRule::Host(lower))
            } else {
                Err(format!(
                    "{entry:?} is not a registry host (such as registry.example.com or host:5000)"
                ))
            }
        }
        Some(_) if !lower.ends_with('/') => Err(format!(
            "{entry:?} is a repository prefix and must end with '/' (so that it cannot match a longer name: {entry}/)"
        )),
        Some((host, path)) if path.trim_end_matches('/').is_empty() => {
            // `host/`: everything on that registry, as the host rule.
            registry_rule(host)
        }
        Some(_) => {
            // Parsed as an image, so the prefix is normalised exactly as images are
            // (`acme/app/` is `docker.io/acme/app/`).
            let parsed = ImageRef::parse(lower.trim_end_matches('/'))
                .map_err(|err| format!("{entry:?} is not a repository prefix: {err}"))?;
            if parsed.tag.is_some() || parsed.digest.is_some() {
                return Err(format!(
                    "{entry:?} is a repository prefix: it takes no tag or digest"
                ));
            }
            Ok(RegistryRule::Prefix(parsed.path_for_prefix()))
        }
    }
}

fn hosts(
    field: &str,
    patterns: Option<&[String]>,
    out: &mut Vec<Violation>,
) -> Option<Vec<HostPattern>> {
    let patterns = patterns?;
    match host_patterns(patterns) {
        Ok(parsed) => Some(parsed),
        Err(errors) => {
            for (i, err) in errors {
                out.push(Violation::new(format!("{field}[{i}]"), err.to_string()));
            }
            Some(Vec::new())
        }
    }
}

fn key_rules(base: &str, rules: &MetadataKeyRules, out: &mut Vec<Violation>) -> KeyRules {
    let mut compile = |name: &str, patterns: &Option<KeyPatterns>| {
        let patterns = patterns.as_ref()?;
        match KeyMatcher::compile(patterns) {
            Ok(matcher) => Some(matcher),
            Err(errors) => {
                for (place, err) in errors {
                    out.push(Violation::new(
                        format!("{base}.{name}.{place}"),
                        err.to_string(),
                    ));
                }
                None
            }
        }
    };
    // Each key kind is compiled from its own field (never the labels rule for
    // annotations).
    KeyRules {
        forbidden_labels: compile("forbiddenLabels", &rules.forbidden_labels),
        forbidden_annotations: compile("forbiddenAnnotations", &rules.forbidden_annotations),
        allowed_labels: compile("allowedLabels", &rules.allowed_labels),
        allowed_annotations: compile("allowedAnnotations", &rules.allowed_annotations),
    }
}

#[cfg(test)]
mod tests;
