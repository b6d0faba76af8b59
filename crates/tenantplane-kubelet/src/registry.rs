//! Which TenantCluster a kubelet-endpoint caller is: the SHA-256 fingerprint of the
//! client certificate its tenant API server presents, mapped to the TenantCluster
//! that registered it. A pure map; the feeder (see [`crate::feeder`]) keeps it
//! current from TenantClusters and their Secrets.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use sha2::{Digest, Sha256};

/// A TenantCluster, by namespace and name.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TenantClusterKey {
    pub namespace: String,
    pub name: String,
}

impl TenantClusterKey {
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            namespace: namespace.into(),
            name: name.into(),
        }
    }
}

impl std::fmt::Display for TenantClusterKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// The lowercase hex SHA-256 of a certificate's DER bytes.
pub fn fingerprint_der(der: &[u8]) -> String {
    let digest = Sha256::digest(der);
    tenantplane_core::hex::short_hex(digest, digest.len())
}

/// Why a PEM text gives no fingerprint.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CertificateError {
    #[error("it is not PEM text: {0}")]
    Pem(String),
    #[error("it holds no certificate")]
    NoCertificate,
}

/// The fingerprint of the first (leaf) certificate of a PEM chain.
pub fn fingerprint_pem(pem: &[u8]) -> Result<String, CertificateError> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let first = CertificateDer::pem_slice_iter(pem)
        .next()
        .ok_or(CertificateError::NoCertificate)?
        .map_err(|e| CertificateError::Pem(e.to_string()))?;
    Ok(fingerprint_der(first.as_ref()))
}

/// A fingerprint registered by two TenantClusters: it names neither (who is
/// calling cannot be told), and every one of them is reported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conflict {
    pub fingerprint: String,
    pub tenants: Vec<TenantClusterKey>,
}

/// Fingerprint → TenantCluster.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KubeletRegistry {
    by_fingerprint: BTreeMap<String, TenantClusterKey>,
    /// Fingerprints more than one TenantCluster named: refused for all of them.
    conflicts: BTreeMap<String, Vec<TenantClusterKey>>,
}

impl KubeletRegistry {
    pub fn new() -> Self {
        Self::default()
    }

    /// A registry from (fingerprint, TenantCluster) pairs. A fingerprint that two
    /// TenantClusters name maps to neither (a copied certificate must not let one
    /// tenant act as the other); the conflicts are returned for reporting.
    pub fn from_entries(
        entries: impl IntoIterator<Item = (String, TenantClusterKey)>,
    ) -> (Self, Vec<Conflict>) {
        let mut all: BTreeMap<String, Vec<TenantClusterKey>> = BTreeMap::new();
        for (fingerprint, key) in entries {
            let keys = all.entry(fingerprint.to_ascii_lowercase()).or_default();
            if !keys.contains(&key) {
                keys.push(key);
            }
        }
        let mut registry = Self::default();
        let mut conflicts = Vec::new();
        for (fingerprint, mut keys) in all {
            if keys.len() == 1 {
                if let Some(key) = keys.pop() {
                    registry.by_fingerprint.insert(fingerprint, key);
                }
            } else {
                keys.sort();
                conflicts.push(Conflict {
                    fingerprint: fingerprint.clone(),
                    tenants: keys.clone(),
                });
                registry.conflicts.insert(fingerprint, keys);
            }
        }
        (registry, conflicts)
    }

    /// The TenantCluster a caller with this certificate fingerprint is.
    pub fn lookup(&self, fingerprint: &str) -> Option<&TenantClusterKey> {
        self.by_fingerprint.get(&fingerprint.to_ascii_lowercase())
    }

    /// Registers one more certificate (an existing entry for another TenantCluster
    /// becomes a conflict and names neither).
    pub fn insert(&mut self, fingerprint: &str, key: TenantClusterKey) {
        let fingerprint = fingerprint.to_ascii_lowercase();
        if let Some(keys) = self.conflicts.get_mut(&fingerprint) {
            if !keys.contains(&key) {
                keys.push(key);
            }
            return;
        }
        match self.by_fingerprint.get(&fingerprint) {
            Some(existing) if *existing != key => {
                let existing = existing.clone();
                self.by_fingerprint.remove(&fingerprint);
                self.conflicts.insert(fingerprint, vec![existing, key]);
            }
            _ => {
                self.by_fingerprint.insert(fingerprint, key);
            }
        }
    }

    pub fn len(&self) -> usize {
        self.by_fingerprint.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_fingerprint.is_empty()
    }
}

/// The registry shared by the server (reads) and the feeder (replaces it whole).
#[derive(Clone, Default)]
pub struct SharedRegistry(Arc<RwLock<KubeletRegistry>>);

impl SharedRegistry {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn replace(&self, registry: KubeletRegistry) {
        match self.0.write() {
            Ok(mut guard) => *guard = registry,
            Err(poisoned) => *poisoned.into_inner() = registry,
        }
    }

    pub fn insert(&self, fingerprint: &str, key: TenantClusterKey) {
        match self.0.write() {
            Ok(mut guard) => guard.insert(fingerprint, key),
            Err(poisoned) => poisoned.into_inner().insert(fingerprint, key),
        }
    }

    pub fn lookup(&self, fingerprint: &str) -> Option<TenantClusterKey> {
        match self.0.read() {
            Ok(guard) => guard.lookup(fingerprint).cloned(),
            Err(poisoned) => poisoned.into_inner().lookup(fingerprint).cloned(),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn key(name: &str) -> TenantClusterKey {
        TenantClusterKey::new("team", name)
    }

    #[test]
    fn a_registered_fingerprint_names_its_tenant_cluster_in_any_case() {
        let (registry, conflicts) = KubeletRegistry::from_entries([
            ("AB12".to_owned(), key("dev")),
            ("cd34".into(), key("prod")),
        ]);
        assert!(conflicts.is_empty());
        assert_eq!(registry.lookup("ab12"), Some(&key("dev")));
        assert_eq!(registry.lookup("CD34"), Some(&key("prod")));
        assert_eq!(registry.lookup("ef56"), None);
        assert_eq!(registry.len(), 2);
    }

    #[test]
    fn a_fingerprint_two_tenant_clusters_name_names_neither() {
        let (registry, conflicts) = KubeletRegistry::from_entries([
            ("ab12".to_owned(), key("dev")),
            ("ab12".to_owned(), key("prod")),
            ("ab12".to_owned(), key("dev")),
        ]);
        assert_eq!(registry.lookup("ab12"), None);
        assert_eq!(
            conflicts,
            vec![Conflict {
                fingerprint: "ab12".into(),
                tenants: vec![key("dev"), key("prod")]
            }]
        );
        let mut registry = KubeletRegistry::new();
        registry.insert("ab12", key("dev"));
        registry.insert("ab12", key("dev"));
        assert_eq!(registry.lookup("ab12"), Some(&key("dev")));
        registry.insert("AB12", key("prod"));
        assert_eq!(registry.lookup("ab12"), None);
        registry.insert("ab12", key("dev"));
        assert_eq!(registry.lookup("ab12"), None, "a conflict stays a conflict");
    }

    #[test]
    fn fingerprints_are_of_the_leaf_certificate() {
        let ca = rcgen::generate_simple_self_signed(vec!["a".into()]).unwrap();
        let other = rcgen::generate_simple_self_signed(vec!["b".into()]).unwrap();
        let chain = format!("{}{}", ca.cert.pem(), other.cert.pem());
        let leaf = fingerprint_pem(chain.as_bytes()).unwrap();
        assert_eq!(leaf, fingerprint_der(ca.cert.der()));
        assert_eq!(leaf.len(), 64);
        assert_ne!(leaf, fingerprint_pem(other.cert.pem().as_bytes()).unwrap());
        assert_eq!(
            fingerprint_pem(b"hello"),
            Err(CertificateError::NoCertificate)
        );
        assert!(fingerprint_pem(b"").is_err());
    }
}
