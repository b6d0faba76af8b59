//! Kubernetes name rules, checked exactly as the API server checks them.
//!
//! Tenant input is validated here before anything is derived from it, so a bad name
//! is a clear error instead of a host object the API server refuses later.

use std::fmt;

/// Longest DNS-1123 label, DNS-1035 label, and every host name tenantplane derives.
pub const MAX_LABEL_LEN: usize = 63;
/// Longest DNS-1123 subdomain.
pub const MAX_SUBDOMAIN_LEN: usize = 253;
/// Longest TenantCluster name. Host names never need it (they are hashed when long),
/// but objects named after the tenant do: `<tenant>-cp` StatefulSet pods and their
/// `controller-revision-hash` labels must stay within 63 characters.
pub const MAX_TENANT_NAME_LEN: usize = 40;

/// The rule a kind's object names must follow.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NameRule {
    /// `[a-z0-9]([-a-z0-9]*[a-z0-9])?`, at most 63 characters (Namespace).
    Dns1123Label,
    /// Dot-separated DNS-1123 labels, at most 253 characters (most kinds).
    Dns1123Subdomain,
    /// `[a-z]([-a-z0-9]*[a-z0-9])?`, at most 63 characters (Service).
    Dns1035Label,
    /// Anything but `.`, `..`, `/` and `%` (RBAC kinds).
    PathSegment,
}

impl NameRule {
    pub fn as_str(self) -> &'static str {
        match self {
            NameRule::Dns1123Label => "DNS-1123 label",
            NameRule::Dns1123Subdomain => "DNS-1123 subdomain",
            NameRule::Dns1035Label => "DNS-1035 label",
            NameRule::PathSegment => "path segment",
        }
    }

    /// Checks `name` against the rule.
    pub fn validate(self, name: &str) -> Result<(), NameError> {
        let problem = match self {
            NameRule::Dns1123Label => dns1123_label_problem(name),
            NameRule::Dns1123Subdomain => dns1123_subdomain_problem(name),
            NameRule::Dns1035Label => dns1035_label_problem(name),
            NameRule::PathSegment => path_segment_problem(name),
        };
        match problem {
            None => Ok(()),
            Some(problem) => Err(NameError {
                name: name.to_owned(),
                rule: self,
                problem,
            }),
        }
    }
}

impl fmt::Display for NameRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A name that breaks its rule.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{name:?} is not a valid {rule}: {problem}")]
pub struct NameError {
    pub name: String,
    pub rule: NameRule,
    pub problem: &'static str,
}

fn is_lower_alnum(b: u8) -> bool {
    b.is_ascii_lowercase() || b.is_ascii_digit()
}

fn label_body_problem(label: &str) -> Option<&'static str> {
    let bytes = label.as_bytes();
    let (first, last) = match (bytes.first(), bytes.last()) {
        (Some(f), Some(l)) => (*f, *l),
        _ => return Some("must not be empty"),
    };
    if !bytes.iter().all(|&b| is_lower_alnum(b) || b == b'-') {
        return Some("must consist of lower case alphanumeric characters or '-'");
    }
    if !is_lower_alnum(first) || !is_lower_alnum(last) {
        return Some("must start and end with an alphanumeric character");
    }
    None
}

fn dns1123_label_problem(name: &str) -> Option<&'static str> {
    if name.len() > MAX_LABEL_LEN {
        return Some("must be no more than 63 characters");
    }
    label_body_problem(name)
}

fn dns1123_subdomain_problem(name: &str) -> Option<&'static str> {
    if name.is_empty() {
        return Some("must not be empty");
    }
    if name.len() > MAX_SUBDOMAIN_LEN {
        return Some("must be no more than 253 characters");
    }
    for part in name.split('.') {
        if let Some(problem) = label_body_problem(part) {
            return Some(match problem {
                "must not be empty" => "must not contain empty dot-separated parts",
                "must consist of lower case alphanumeric characters or '-'" => {
                    "must consist of lower case alphanumeric characters, '-' or '.'"
                }
                _ => "every dot-separated part must start and end with an alphanumeric character",
            });
        }
    }
    None
}

fn dns1035_label_problem(name: &str) -> Option<&'static str> {
    if name.len() > MAX_LABEL_LEN {
        return Some("must be no more than 63 characters");
    }
    if let Some(problem) = label_body_problem(name) {
        return Some(problem);
    }
    if !name.as_bytes()[0].is_ascii_lowercase() {
        return Some("must start with a lower case letter");
    }
    None
}

fn path_segment_problem(name: &str) -> Option<&'static str> {
    if name.is_empty() {
        return Some("must not be empty");
    }
    if name == "." || name == ".." {
        return Some("must not be '.' or '..'");
    }
    if name.contains('/') || name.contains('%') {
        return Some("must not contain '/' or '%'");
    }
    None
}

/// Checks a TenantCluster name: a DNS-1123 label of at most [`MAX_TENANT_NAME_LEN`].
pub fn validate_tenant_name(name: &str) -> Result<(), NameError> {
    NameRule::Dns1123Label.validate(name)?;
    if name.len() > MAX_TENANT_NAME_LEN {
        return Err(NameError {
            name: name.to_owned(),
            rule: NameRule::Dns1123Label,
            problem: "a TenantCluster name must be no more than 40 characters",
        });
    }
    Ok(())
}

/// Checks a namespace name (virtual or host): a DNS-1123 label.
pub fn validate_namespace_name(name: &str) -> Result<(), NameError> {
    NameRule::Dns1123Label.validate(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels() {
        for ok in ["a", "0", "a-b", "abc123", &"a".repeat(63)] {
            assert_eq!(NameRule::Dns1123Label.validate(ok), Ok(()), "{ok}");
        }
        for bad in ["", "-a", "a-", "A", "a.b", "a_b", &"a".repeat(64), "é"] {
            assert!(NameRule::Dns1123Label.validate(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn subdomains() {
        for ok in ["a", "a.b", "app.config", "a-b.c-d", &"a".repeat(253)] {
            assert_eq!(NameRule::Dns1123Subdomain.validate(ok), Ok(()), "{ok}");
        }
        for bad in [
            "",
            ".a",
            "a.",
            "a..b",
            "a.-b",
            "a-.b",
            "A.b",
            &"a".repeat(254),
        ] {
            assert!(NameRule::Dns1123Subdomain.validate(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn dns1035() {
        assert_eq!(NameRule::Dns1035Label.validate("svc-1"), Ok(()));
        for bad in ["1svc", "", "svc.a", "svc-", &"a".repeat(64)] {
            assert!(NameRule::Dns1035Label.validate(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn path_segments() {
        for ok in ["system:controller", "Upper", "a b", "..."] {
            assert_eq!(NameRule::PathSegment.validate(ok), Ok(()), "{ok}");
        }
        for bad in ["", ".", "..", "a/b", "a%b"] {
            assert!(NameRule::PathSegment.validate(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn tenant_names_are_short_labels() {
        assert!(validate_tenant_name("dev").is_ok());
        assert!(validate_tenant_name(&"a".repeat(40)).is_ok());
        let err = validate_tenant_name(&"a".repeat(41)).unwrap_err();
        assert!(err.to_string().contains("40 characters"), "{err}");
        assert!(validate_tenant_name("Dev").is_err());
        assert!(validate_tenant_name("").is_err());
    }
}
