//! Container image references, normalised as the container runtime reads them:
//! `busybox` is `docker.io/library/busybox`, `host:5000/x` is on `host:5000`,
//! `localhost/x` on `localhost`, and `@sha256:…` digests and `:tag`s are split off.

use std::fmt;

/// The registry images without a host come from.
pub const DEFAULT_REGISTRY: &str = "docker.io";

/// A parsed image reference.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImageRef {
    /// Lower-case host, with its port if any (`docker.io`, `host:5000`).
    pub registry: String,
    /// The repository path (`library/busybox`, `acme/app`).
    pub repository: String,
    pub tag: Option<String>,
    pub digest: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ImageError {
    #[error("the image reference is empty")]
    Empty,
    #[error("image {image:?} is not a valid reference: {reason}")]
    Invalid { image: String, reason: &'static str },
}

impl ImageRef {
    /// Parses `reference` like the Docker reference grammar, strictly: anything it
    /// cannot place is an error, never a guess.
    pub fn parse(reference: &str) -> Result<Self, ImageError> {
        let invalid = |reason| ImageError::Invalid {
            image: reference.to_owned(),
            reason,
        };
        if reference.is_empty() {
            return Err(ImageError::Empty);
        }
        if reference
            .chars()
            .any(|c| c.is_whitespace() || c.is_control())
        {
            return Err(invalid("it contains white space"));
        }
        let (name_tag, digest) = match reference.split_once('@') {
            Some((name, digest)) => {
                let well_formed = digest
                    .split_once(':')
                    .is_some_and(|(algo, hex)| !algo.is_empty() && !hex.is_empty());
                if !well_formed {
                    return Err(invalid("the digest is not ALGORITHM:HEX"));
                }
                (name, Some(digest.to_owned()))
            }
            None => (reference, None),
        };
        // A tag is after the last ':' that follows the last '/' (a ':' before it is a port).
        let last_slash = name_tag.rfind('/').map_or(0, |i| i + 1);
        let (name, tag) = match name_tag[last_slash..].rfind(':') {
            Some(i) => {
                let at = last_slash + i;
                let tag = &name_tag[at + 1..];
                if tag.is_empty()
                    || tag.len() > 128
                    || !tag
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
                {
                    return Err(invalid("the tag is not [A-Za-z0-9_.-]{1,128}"));
                }
                (&name_tag[..at], Some(tag.to_owned()))
            }
            None => (name_tag, None),
        };
        let (registry, repository) = match name.split_once('/') {
            Some((first, rest))
                if first.contains('.') || first.contains(':') || first == "localhost" =>
            {
                (first.to_ascii_lowercase(), rest.to_owned())
            }
            _ if name.contains('/') => (DEFAULT_REGISTRY.to_owned(), name.to_owned()),
            _ => (DEFAULT_REGISTRY.to_owned(), format!("library/{name}")),
        };
        if registry.is_empty()
            || !registry
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':' | '[' | ']'))
        {
            return Err(invalid("the registry host is not a host name or address"));
        }
        let component_ok = |c: &str| {
            !c.is_empty()
                && c.chars().all(|ch| {
                    ch.is_ascii_lowercase() || ch.is_ascii_digit() || matches!(ch, '.' | '_' | '-')
                })
        };
        if !repository.split('/').all(component_ok) {
            return Err(invalid(
                "the repository path is not lower-case components separated by '/'",
            ));
        }
        // Docker's own aliases of its registry.
        let registry = match registry.as_str() {
            "index.docker.io" | "registry-1.docker.io" => DEFAULT_REGISTRY.to_owned(),
            _ => registry,
        };
        Ok(Self {
            registry,
            repository,
            tag,
            digest,
        })
    }

    /// `registry/repository/`: what repository-prefix rules are matched against (the
    /// trailing `/` lets a prefix such as `ghcr.io/acme/` match `ghcr.io/acme` images
    /// below it but never `ghcr.io/acme-evil/x`).
    pub fn path_for_prefix(&self) -> String {
        format!("{}/{}/", self.registry, self.repository)
    }

    /// The pull policy Kubernetes defaults to for this image when none is given:
    /// `Always` for `:latest` or no tag (without a digest), else `IfNotPresent`.
    pub fn default_pull_policy(&self) -> &'static str {
        match (&self.tag, &self.digest) {
            (_, Some(_)) => "IfNotPresent",
            (Some(tag), None) if tag != "latest" => "IfNotPresent",
            _ => "Always",
        }
    }
}

impl fmt::Display for ImageRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.registry, self.repository)?;
        if let Some(tag) = &self.tag {
            write!(f, ":{tag}")?;
        }
        if let Some(digest) = &self.digest {
            write!(f, "@{digest}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(reference: &str) -> (String, String, Option<String>, Option<String>) {
        let r = ImageRef::parse(reference).unwrap();
        (r.registry, r.repository, r.tag, r.digest)
    }

    #[test]
    fn references_are_normalised_like_the_runtime_does() {
        assert_eq!(
            parsed("busybox"),
            ("docker.io".into(), "library/busybox".into(), None, None)
        );
        assert_eq!(
            parsed("acme/app:1.0"),
            (
                "docker.io".into(),
                "acme/app".into(),
                Some("1.0".into()),
                None
            )
        );
        assert_eq!(
            parsed("host:5000/x"),
            ("host:5000".into(), "x".into(), None, None)
        );
        assert_eq!(
            parsed("localhost/x:2"),
            ("localhost".into(), "x".into(), Some("2".into()), None)
        );
        assert_eq!(
            parsed("Registry.Example.com/a/b@sha256:abc"),
            (
                "registry.example.com".into(),
                "a/b".into(),
                None,
                Some("sha256:abc".into())
            )
        );
        assert_eq!(
            parsed("index.docker.io/library/nginx:1").0,
            "docker.io".to_owned()
        );
        assert_eq!(
            parsed("host:5000/x:y@sha256:1").2,
            Some("y".to_owned()),
            "a port is not a tag"
        );
    }

    #[test]
    fn malformed_references_are_errors() {
        for bad in [
            "",
            " busybox",
            "a//b",
            "UPPER/case",
            "x:",
            "x@sha256",
            "x@:1",
            "/x",
            "host:5000/",
            "x:tag/with/slash:",
        ] {
            assert!(ImageRef::parse(bad).is_err(), "{bad:?} parsed");
        }
    }

    #[test]
    fn the_default_pull_policy_follows_kubernetes() {
        let policy = |r: &str| ImageRef::parse(r).unwrap().default_pull_policy();
        assert_eq!(policy("busybox"), "Always");
        assert_eq!(policy("busybox:latest"), "Always");
        assert_eq!(policy("busybox:1"), "IfNotPresent");
        assert_eq!(policy("busybox@sha256:1"), "IfNotPresent");
    }
}
