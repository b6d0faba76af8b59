//! Deterministic host names for tenant objects.
//!
//! The algorithm (also in `docs/naming.md`; the test vectors below pin it):
//!
//! 1. `candidate = <name>-x-<virtual namespace>-x-<tenant>`.
//! 2. If `candidate` is at most 63 bytes and holds the separator `-x-` exactly twice
//!    (overlapping occurrences counted), it is the host name. Exactly two occurrences
//!    mean they must be the two separators, so the three parts can be read back
//!    unambiguously: `("a-x-b","c")` and `("a","b-x-c")`, or `("foo-x","default")` and
//!    `("foo","x-default")`, can never share an unhashed name.
//! 3. Otherwise: keep the first 46 bytes of `candidate`, trim any `-` or `.` left at
//!    the cut, and append `-` and the first 16 hex digits (64 bits) of
//!    `sha256("<name>/<virtual namespace>/<tenant>")`. `/` cannot occur in any of the
//!    three, so the hashed identity is unambiguous. The result is at most 63 bytes.
//!
//! Nothing else is rewritten: tenant names are already valid for their kind, and the
//! output keeps the first character of the name and ends in an alphanumeric, so it is
//! valid for the same kind's rule (DNS-1123 label or subdomain, DNS-1035, path segment).

use sha2::{Digest, Sha256};

use crate::name_rules::MAX_LABEL_LEN;

/// The separator between the parts of an unhashed host name.
pub const SEPARATOR: &str = "-x-";
/// Hex digits of the hash suffix (64 bits).
pub const HASH_HEX_LEN: usize = 16;
/// Bytes of the candidate kept in front of a hash suffix: 63 - 1 - 16.
pub const HASHED_PREFIX_LEN: usize = MAX_LABEL_LEN - 1 - HASH_HEX_LEN;

/// Where a tenant object comes from: the three parts of its host name.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SourceName<'a> {
    /// The object's name in the tenant cluster.
    pub name: &'a str,
    /// Its namespace in the tenant cluster.
    pub virtual_namespace: &'a str,
    /// The TenantCluster's name.
    pub tenant: &'a str,
}

/// A derived host name and how it was derived.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostName {
    pub name: String,
    /// Why the name carries a hash suffix, if it does.
    pub hashed: Option<HashReason>,
}

/// Why a host name was hashed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HashReason {
    /// `<name>-x-<namespace>-x-<tenant>` is longer than 63 characters.
    TooLong,
    /// A part contains or borders `-x-`, which would make the plain name ambiguous.
    AmbiguousSeparator,
}

impl HashReason {
    pub fn describe(self) -> &'static str {
        match self {
            HashReason::TooLong => "the plain name would exceed 63 characters",
            HashReason::AmbiguousSeparator => {
                "a part contains or borders the separator \"-x-\", so the plain name would be ambiguous"
            }
        }
    }
}

/// The host name for a tenant object. Pure and deterministic.
pub fn host_name(source: &SourceName<'_>) -> HostName {
    let candidate = format!(
        "{}{SEPARATOR}{}{SEPARATOR}{}",
        source.name, source.virtual_namespace, source.tenant
    );
    let reason = if candidate.len() > MAX_LABEL_LEN {
        Some(HashReason::TooLong)
    } else if count_overlapping(&candidate, SEPARATOR) != 2 {
        Some(HashReason::AmbiguousSeparator)
    } else {
        None
    };
    match reason {
        None => HostName {
            name: candidate,
            hashed: None,
        },
        Some(reason) => {
            let cut = floor_char_boundary(&candidate, HASHED_PREFIX_LEN);
            let prefix = candidate[..cut].trim_end_matches(['-', '.']);
            HostName {
                name: format!("{prefix}-{}", identity_hash(source)),
                hashed: Some(reason),
            }
        }
    }
}

/// First 16 hex digits of `sha256("<name>/<virtual namespace>/<tenant>")`.
pub fn identity_hash(source: &SourceName<'_>) -> String {
    let mut hasher = Sha256::new();
    hasher.update(source.name.as_bytes());
    hasher.update(b"/");
    hasher.update(source.virtual_namespace.as_bytes());
    hasher.update(b"/");
    hasher.update(source.tenant.as_bytes());
    crate::hex::short_hex(hasher.finalize(), HASH_HEX_LEN / 2)
}

fn count_overlapping(haystack: &str, needle: &str) -> usize {
    let (h, n) = (haystack.as_bytes(), needle.as_bytes());
    if n.is_empty() || h.len() < n.len() {
        return 0;
    }
    h.windows(n.len()).filter(|w| *w == n).count()
}

fn floor_char_boundary(s: &str, max: usize) -> usize {
    let mut cut = max.min(s.len());
    while !s.is_char_boundary(cut) {
        cut -= 1;
    }
    cut
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(n: &str, ns: &str, t: &str) -> String {
        host_name(&SourceName {
            name: n,
            virtual_namespace: ns,
            tenant: t,
        })
        .name
    }

    /// Pinned vectors: if any of these change, every host object in every cluster
    /// would be orphaned and recreated. Never update them without a migration.
    #[test]
    fn pinned_vectors() {
        let cases: &[(&str, &str, &str, &str)] = &[
            ("nginx", "default", "dev", "nginx-x-default-x-dev"),
            ("app.config", "default", "dev", "app.config-x-default-x-dev"),
            ("app-config", "default", "dev", "app-config-x-default-x-dev"),
            ("a-x-b", "c", "t", "a-x-b-x-c-x-t-5c0b1191ed88b644"),
            ("a", "b-x-c", "t", "a-x-b-x-c-x-t-be3b181665edf1b8"),
            (
                "foo-x",
                "default",
                "dev",
                "foo-x-x-default-x-dev-52c2cb762d8ae2af",
            ),
            (
                "foo",
                "x-default",
                "dev",
                "foo-x-x-default-x-dev-ab95d34e1037a8f0",
            ),
            (
                "nginx",
                "kube-x-system",
                "dev",
                "nginx-x-kube-x-system-x-dev-a0766bb6575f5d02",
            ),
            (
                "a-very-long-configmap-name-that-goes-on-and-on",
                "default",
                "dev",
                "a-very-long-configmap-name-that-goes-on-and-on-x-default-x-dev",
            ),
            (
                "a-very-long-configmap-name-that-goes-on-and-on-and-on",
                "default",
                "dev",
                "a-very-long-configmap-name-that-goes-on-and-on-cfeb8cc4dbb5a145",
            ),
            (
                "settings.for.the.payment.service.in.production.v2",
                "payments",
                "prod",
                "settings.for.the.payment.service.in.production-025531192bc1bf2f",
            ),
        ];
        let mut failures = Vec::new();
        for (n, ns, t, want) in cases {
            let got = name(n, ns, t);
            if got != *want {
                failures.push(format!(
                    "({n:?}, {ns:?}, {t:?}) => {got:?}, pinned {want:?}"
                ));
            }
        }
        assert!(
            failures.is_empty(),
            "naming changed:\n{}",
            failures.join("\n")
        );
    }

    #[test]
    fn the_seed_example() {
        let got = host_name(&SourceName {
            name: "nginx",
            virtual_namespace: "default",
            tenant: "dev",
        });
        assert_eq!(got.name, "nginx-x-default-x-dev");
        assert_eq!(got.hashed, None);
    }

    #[test]
    fn dots_are_never_rewritten() {
        assert_ne!(
            name("app.config", "default", "dev"),
            name("app-config", "default", "dev")
        );
    }

    #[test]
    fn ambiguous_parts_are_hashed_apart() {
        assert_ne!(name("a-x-b", "c", "t"), name("a", "b-x-c", "t"));
        assert_ne!(
            name("foo-x", "default", "dev"),
            name("foo", "x-default", "dev")
        );
        assert_ne!(name("a", "b", "x-t"), name("a", "b-x", "t"));
    }

    #[test]
    fn a_cut_never_leaves_a_dash_or_dot() {
        // 46th byte of the candidate is '-' or '.'; the cut must trim it.
        let n = format!("{}.{}", "a".repeat(45), "b".repeat(30));
        let got = name(&n, "default", "dev");
        assert_eq!(got.len(), 45 + 1 + HASH_HEX_LEN);
        assert!(got.starts_with(&format!("{}-", "a".repeat(45))), "{got}");
        let n = format!("{}--{}", "a".repeat(44), "b".repeat(30));
        let got = name(&n, "default", "dev");
        assert!(!got.contains("--"), "{got}");
    }

    #[test]
    fn long_names_fit_in_63() {
        for len in [1, 40, 41, 46, 47, 62, 63, 200, 253] {
            let n = "a".repeat(len);
            let got = name(&n, &"b".repeat(63), &"c".repeat(40));
            assert!(got.len() <= 63, "{len}: {got}");
        }
    }
}
