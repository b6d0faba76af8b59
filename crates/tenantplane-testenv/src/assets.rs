//! Where the etcd, kube-apiserver and kube-controller-manager binaries are.

use std::path::{Path, PathBuf};

use crate::{Error, Result};

/// A directory holding `etcd`, `kube-apiserver` and, optionally, `kube-controller-manager`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Assets {
    dir: PathBuf,
}

impl Assets {
    /// `KUBEBUILDER_ASSETS` when it holds `etcd` and `kube-apiserver`; otherwise the
    /// cache `scripts/test-apiserver.sh` fills (`$TENANTPLANE_CACHE` or
    /// `$HOME/.cache/tenantplane`, then `k8s-1.20.2/bin`). Never builds anything: a
    /// test must not silently spend six minutes compiling Kubernetes.
    pub fn locate() -> Result<Self> {
        if let Some(dir) = std::env::var_os("KUBEBUILDER_ASSETS").filter(|d| !d.is_empty()) {
            let assets = Self { dir: dir.into() };
            return match assets.check() {
                Ok(()) => Ok(assets),
                Err(missing) => Err(Error::NoAssets(format!(
                    "KUBEBUILDER_ASSETS={} has no {missing}",
                    assets.dir.display()
                ))),
            };
        }
        let cache = std::env::var_os("TENANTPLANE_CACHE")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cache/tenantplane")))
            .ok_or_else(|| Error::NoAssets("neither KUBEBUILDER_ASSETS nor HOME is set".into()))?;
        let assets = Self {
            dir: cache.join("k8s-1.20.2/bin"),
        };
        match assets.check() {
            Ok(()) => Ok(assets),
            Err(missing) => Err(Error::NoAssets(format!(
                "{} has no {missing}",
                assets.dir.display()
            ))),
        }
    }

    /// Uses the binaries in `dir` as they are.
    pub fn from_dir(dir: impl Into<PathBuf>) -> Self {
        Self { dir: dir.into() }
    }

    fn check(&self) -> std::result::Result<(), &'static str> {
        for (name, what) in [("etcd", "etcd"), ("kube-apiserver", "kube-apiserver")] {
            if !self.dir.join(name).is_file() {
                return Err(what);
            }
        }
        Ok(())
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn etcd(&self) -> PathBuf {
        self.dir.join("etcd")
    }

    pub fn kube_apiserver(&self) -> PathBuf {
        self.dir.join("kube-apiserver")
    }

    pub fn kube_controller_manager(&self) -> Result<PathBuf> {
        let path = self.dir.join("kube-controller-manager");
        if path.is_file() {
            Ok(path)
        } else {
            Err(Error::NoAssets(format!(
                "{} has no kube-controller-manager",
                self.dir.display()
            )))
        }
    }
}
