//! The Kubernetes versions a TenantCluster may ask for, and the images that run each
//! (k3s, or upstream kube-apiserver, kube-controller-manager and etcd for distro k8s).
//!
//! `spec.kubernetesVersion` pins a minor version (`v1.31`); tenantplane picks the
//! patch release, so a security fix is a change to this table, not to every tenant.

use std::fmt;

/// One supported minor version and the control-plane image that serves it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SupportedVersion {
    /// `v1.MINOR`, as written in `spec.kubernetesVersion`.
    pub version: &'static str,
    /// The k3s server image for this minor version.
    pub k3s_image: &'static str,
    /// The etcd image (distro `k8s`): the etcd release kubeadm pairs with this minor.
    pub etcd_image: &'static str,
}

impl SupportedVersion {
    /// The patch release, `v1.MINOR.PATCH`: the one the k3s image carries, so
    /// both distributions run the same Kubernetes.
    pub fn patch_release(&self) -> &'static str {
        let tag = self
            .k3s_image
            .rsplit_once(':')
            .map_or(self.k3s_image, |(_, tag)| tag);
        tag.split_once('-').map_or(tag, |(release, _)| release)
    }

    /// The upstream kube-apiserver image (distro `k8s`).
    pub fn api_server_image(&self) -> String {
        format!("registry.k8s.io/kube-apiserver:{}", self.patch_release())
    }

    /// The upstream kube-controller-manager image (distro `k8s`).
    pub fn controller_manager_image(&self) -> String {
        format!(
            "registry.k8s.io/kube-controller-manager:{}",
            self.patch_release()
        )
    }
}

/// Oldest first. The tags follow k3s' image scheme (`vX.Y.Z+k3s1` is published as
/// `rancher/k3s:vX.Y.Z-k3s1`, since `+` is not allowed in an image tag). Uncertain:
/// they could not be checked against the registry from here; each was chosen
/// because public projects pin and pull it (v1.28.15 is the last 1.28 release).
/// Check them with `crane ls rancher/k3s` (or `docker pull`) before a release.
pub const SUPPORTED_VERSIONS: &[SupportedVersion] = &[
    SupportedVersion {
        version: "v1.28",
        k3s_image: "rancher/k3s:v1.28.15-k3s1",
        etcd_image: "registry.k8s.io/etcd:3.5.15-0",
    },
    SupportedVersion {
        version: "v1.29",
        k3s_image: "rancher/k3s:v1.29.15-k3s1",
        etcd_image: "registry.k8s.io/etcd:3.5.16-0",
    },
    SupportedVersion {
        version: "v1.30",
        k3s_image: "rancher/k3s:v1.30.10-k3s1",
        etcd_image: "registry.k8s.io/etcd:3.5.15-0",
    },
    SupportedVersion {
        version: "v1.31",
        k3s_image: "rancher/k3s:v1.31.9-k3s1",
        etcd_image: "registry.k8s.io/etcd:3.5.15-0",
    },
    SupportedVersion {
        version: "v1.32",
        k3s_image: "rancher/k3s:v1.32.5-k3s1",
        etcd_image: "registry.k8s.io/etcd:3.5.16-0",
    },
    SupportedVersion {
        version: "v1.33",
        k3s_image: "rancher/k3s:v1.33.4-k3s1",
        etcd_image: "registry.k8s.io/etcd:3.5.21-0",
    },
];

/// A `kubernetesVersion` tenantplane cannot run.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum VersionError {
    #[error(
        "kubernetesVersion {input:?} is not of the form v1.MINOR: use one of {}",
        SupportedList
    )]
    Malformed { input: String },
    #[error(
        "kubernetesVersion {input:?} pins a patch release: write {minor} (tenantplane picks the patch release, {image})"
    )]
    PatchPinned {
        input: String,
        minor: &'static str,
        image: &'static str,
    },
    #[error(
        "kubernetesVersion {input:?} is not supported: use one of {}",
        SupportedList
    )]
    Unsupported { input: String },
}

/// Displays `v1.28, v1.29, ...` from the table, so messages never go stale.
struct SupportedList;

impl fmt::Display for SupportedList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, v) in SUPPORTED_VERSIONS.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            f.write_str(v.version)?;
        }
        Ok(())
    }
}

/// The supported version `input` names, or why it cannot be run.
pub fn resolve(input: &str) -> Result<&'static SupportedVersion, VersionError> {
    let numeric = |p: &str| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit());
    let malformed = || VersionError::Malformed {
        input: input.to_owned(),
    };
    let rest = input.strip_prefix("v1.").ok_or_else(malformed)?;
    let (minor, patch) = match rest.split_once('.') {
        Some((minor, patch)) => (minor, Some(patch)),
        None => (rest, None),
    };
    if !numeric(minor) || patch.is_some_and(|p| !numeric(p)) {
        return Err(malformed());
    }
    let Some(supported) = SUPPORTED_VERSIONS
        .iter()
        .find(|v| v.version.strip_prefix("v1.") == Some(minor))
    else {
        return Err(VersionError::Unsupported {
            input: input.to_owned(),
        });
    };
    if patch.is_some() {
        return Err(VersionError::PatchPinned {
            input: input.to_owned(),
            minor: supported.version,
            image: supported.k3s_image,
        });
    }
    Ok(supported)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_supported_minor_resolves_to_its_own_k3s_release() {
        let minors: Vec<_> = SUPPORTED_VERSIONS.iter().map(|v| v.version).collect();
        assert_eq!(
            minors,
            ["v1.28", "v1.29", "v1.30", "v1.31", "v1.32", "v1.33"]
        );
        for v in SUPPORTED_VERSIONS {
            assert_eq!(resolve(v.version), Ok(v));
            // The image's Kubernetes release is the same minor, as a k3s tag.
            let tag = v.k3s_image.strip_prefix("rancher/k3s:").unwrap();
            assert!(tag.starts_with(&format!("{}.", v.version)), "{tag}");
            assert!(tag.ends_with("-k3s1"), "{tag}");
            assert!(!tag.contains('+'), "{tag}");
            // The k8s distribution runs the same patch release as the k3s image.
            let release = v.patch_release();
            assert!(tag.starts_with(&format!("{release}-")), "{tag} {release}");
            assert_eq!(release.matches('.').count(), 2, "{release}");
            assert_eq!(
                v.api_server_image(),
                format!("registry.k8s.io/kube-apiserver:{release}")
            );
            assert_eq!(
                v.controller_manager_image(),
                format!("registry.k8s.io/kube-controller-manager:{release}")
            );
            assert!(
                v.etcd_image.starts_with("registry.k8s.io/etcd:3.5."),
                "{}",
                v.etcd_image
            );
        }
    }

    #[test]
    fn unsupported_versions_name_the_supported_ones() {
        for old in ["v1.27", "v1.34", "v1.0", "v1.280"] {
            let err = resolve(old).unwrap_err();
            assert!(matches!(err, VersionError::Unsupported { .. }), "{old}");
            assert!(
                err.to_string()
                    .ends_with("use one of v1.28, v1.29, v1.30, v1.31, v1.32, v1.33"),
                "{err}"
            );
        }
    }

    #[test]
    fn patch_pins_say_which_minor_to_write() {
        let err = resolve("v1.31.2").unwrap_err();
        assert_eq!(
            err.to_string(),
            "kubernetesVersion \"v1.31.2\" pins a patch release: write v1.31 (tenantplane picks the patch release, rancher/k3s:v1.31.9-k3s1)"
        );
        assert!(matches!(
            resolve("v1.27.3"),
            Err(VersionError::Unsupported { .. })
        ));
    }

    #[test]
    fn malformed_versions_are_errors_not_panics() {
        for bad in [
            "",
            "1.31",
            "v1.",
            "v1.x",
            "v2.31",
            "v1.31.",
            "v1.31.1.1",
            "v1.-1",
        ] {
            assert!(
                matches!(resolve(bad), Err(VersionError::Malformed { .. })),
                "{bad:?}"
            );
        }
    }
}
