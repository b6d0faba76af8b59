//! The two kinds of pattern a tenant's rules hold: host-name patterns (exact or
//! `*.domain`) and key patterns (exact names or one regular expression).

use regex::{Regex, RegexBuilder};
use tenantplane_api::KeyPatterns;

use crate::name_rules::NameRule;

/// Most bytes a compiled regular expression may take; a larger one is refused when
/// the Tenant is admitted (the `regex` crate matches in linear time within it).
const REGEX_SIZE_LIMIT: usize = 1 << 20;
/// Longest regular expression accepted, in bytes.
pub const MAX_REGEX_LEN: usize = 1024;

/// Why a pattern is refused.
#[derive(Debug, thiserror::Error)]
pub enum PatternError {
    #[error("{pattern:?} is not a host name or `*.` followed by a domain: {reason}")]
    Host { pattern: String, reason: String },
    #[error("invalid regular expression: {0}")]
    Regex(String),
    #[error("the regular expression is longer than {MAX_REGEX_LEN} bytes")]
    RegexTooLong,
    #[error("{0:?} is empty or holds white space")]
    Key(String),
}

/// A host-name pattern: `acme.example.com` matches only itself; `*.acme.example.com`
/// matches exactly one more label (`a.acme.example.com`, not `acme.example.com` nor
/// `a.b.acme.example.com`), and the wildcard host `*.acme.example.com` itself.
/// Case-insensitive; a single trailing dot on the host is ignored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HostPattern {
    Exact(String),
    Wildcard { suffix: String },
}

impl HostPattern {
    pub fn parse(pattern: &str) -> Result<Self, PatternError> {
        let host_error = |reason: String| PatternError::Host {
            pattern: pattern.to_owned(),
            reason,
        };
        let lower = pattern.to_ascii_lowercase();
        let (domain, wildcard) = match lower.strip_prefix("*.") {
            Some(domain) => (domain, true),
            None => (lower.as_str(), false),
        };
        NameRule::Dns1123Subdomain
            .validate(domain)
            .map_err(|err| host_error(err.to_string()))?;
        Ok(if wildcard {
            HostPattern::Wildcard {
                suffix: format!(".{domain}"),
            }
        } else {
            HostPattern::Exact(domain.to_owned())
        })
    }

    pub fn matches(&self, host: &str) -> bool {
        let host = host.strip_suffix('.').unwrap_or(host).to_ascii_lowercase();
        match self {
            HostPattern::Exact(exact) => host == *exact,
            HostPattern::Wildcard { suffix } => match host.strip_suffix(suffix.as_str()) {
                Some("*") => true,
                Some(label) => !label.is_empty() && !label.contains(['.', '*']),
                None => false,
            },
        }
    }
}

/// Parses every pattern, or says which ones are wrong (by index).
pub fn host_patterns(patterns: &[String]) -> Result<Vec<HostPattern>, Vec<(usize, PatternError)>> {
    let mut parsed = Vec::new();
    let mut errors = Vec::new();
    for (i, pattern) in patterns.iter().enumerate() {
        match HostPattern::parse(pattern) {
            Ok(p) => parsed.push(p),
            Err(err) => errors.push((i, err)),
        }
    }
    if errors.is_empty() {
        Ok(parsed)
    } else {
        Err(errors)
    }
}

/// Compiles `regex` anchored as `^(?:REGEX)$`, within the size limits.
pub fn anchored_regex(regex: &str) -> Result<Regex, PatternError> {
    if regex.len() > MAX_REGEX_LEN {
        return Err(PatternError::RegexTooLong);
    }
    RegexBuilder::new(&format!("^(?:{regex})$"))
        .size_limit(REGEX_SIZE_LIMIT)
        .dfa_size_limit(REGEX_SIZE_LIMIT)
        .build()
        .map_err(|err| PatternError::Regex(err.to_string()))
}

/// Compiled [`KeyPatterns`]: a key matches if it is one of the exact names or the
/// whole key matches the regular expression.
#[derive(Clone, Debug)]
pub struct KeyMatcher {
    exact: Vec<String>,
    regex: Option<Regex>,
}

/// Where in a [`KeyPatterns`] a problem is: `exact[i]` or `regex`.
pub type KeyPatternErrors = Vec<(String, PatternError)>;

impl KeyMatcher {
    pub fn compile(patterns: &KeyPatterns) -> Result<Self, KeyPatternErrors> {
        let mut errors = Vec::new();
        for (i, key) in patterns.exact.iter().enumerate() {
            if key.is_empty() || key.chars().any(char::is_whitespace) {
                errors.push((format!("exact[{i}]"), PatternError::Key(key.clone())));
            }
        }
        let regex = match patterns.regex.as_deref().map(anchored_regex).transpose() {
            Ok(regex) => regex,
            Err(err) => {
                errors.push(("regex".to_owned(), err));
                None
            }
        };
        if !errors.is_empty() {
            return Err(errors);
        }
        Ok(Self {
            exact: patterns.exact.clone(),
            regex,
        })
    }

    pub fn matches(&self, key: &str) -> bool {
        self.exact.iter().any(|k| k == key) || self.regex.as_ref().is_some_and(|r| r.is_match(key))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wildcard_matches_exactly_one_label() {
        let p = HostPattern::parse("*.acme.example.com").unwrap();
        assert!(p.matches("a.acme.example.com"));
        assert!(p.matches("A.Acme.example.com."));
        assert!(p.matches("*.acme.example.com"));
        assert!(!p.matches("acme.example.com"));
        assert!(!p.matches("a.b.acme.example.com"));
        assert!(!p.matches("evilacme.example.com"));
        assert!(!p.matches(".acme.example.com"));
        let exact = HostPattern::parse("acme.example.com").unwrap();
        assert!(exact.matches("acme.example.com"));
        assert!(!exact.matches("a.acme.example.com"));
    }

    #[test]
    fn bad_host_patterns_are_refused() {
        for bad in [
            "", "*", "*.", "a.*.com", "**.a.com", "a b.com", "-a.com", "*a.com",
        ] {
            assert!(HostPattern::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn regexes_are_anchored_and_limited() {
        let r = anchored_regex("team|owner").unwrap();
        assert!(r.is_match("team"));
        assert!(!r.is_match("steam"), "anchored at both ends");
        assert!(!r.is_match("teams"));
        assert!(anchored_regex("(").is_err());
        assert!(anchored_regex(&"a".repeat(MAX_REGEX_LEN + 1)).is_err());
        // Compiles past the size limit are refused, not built.
        assert!(anchored_regex("(?:a{100}){100}{100}").is_err());
    }

    #[test]
    fn key_matchers_report_each_bad_entry() {
        let errors = KeyMatcher::compile(&KeyPatterns {
            exact: vec!["ok".into(), "".into()],
            regex: Some("[".into()),
        })
        .unwrap_err();
        let places: Vec<_> = errors.iter().map(|(p, _)| p.as_str()).collect();
        assert_eq!(places, ["exact[1]", "regex"]);
        let m = KeyMatcher::compile(&KeyPatterns {
            exact: vec!["a/b".into()],
            regex: Some("x-.*".into()),
        })
        .unwrap();
        assert!(m.matches("a/b") && m.matches("x-1") && !m.matches("y-x-1"));
    }
}
