//! A throwaway CA and serving certificates: for the test API servers, and for webhook
//! servers the test API servers call over TLS.

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DistinguishedName, DnType, IsCa, KeyPair,
    KeyUsagePurpose,
};

/// Certificate generation failed.
#[derive(Debug, thiserror::Error)]
#[error("could not generate a test certificate: {0}")]
pub struct CertError(#[from] rcgen::Error);

/// A self-signed CA that issues serving certificates.
pub struct TestCa {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

/// A PEM certificate and its PEM private key.
#[derive(Clone)]
pub struct IssuedCert {
    pub cert_pem: String,
    pub key_pem: String,
}

impl std::fmt::Debug for IssuedCert {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print key material, even in test output.
        f.debug_struct("IssuedCert").finish_non_exhaustive()
    }
}

impl TestCa {
    pub fn new(common_name: &str) -> Result<Self, CertError> {
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, common_name);
        params.distinguished_name = dn;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let issuer = CertifiedIssuer::self_signed(params, KeyPair::generate()?)?;
        Ok(Self { issuer })
    }

    /// The CA certificate, for a kubeconfig or a webhook's `caBundle`.
    pub fn cert_pem(&self) -> String {
        self.issuer.pem()
    }

    /// A serving certificate for the given DNS names and IP addresses.
    pub fn issue(&self, sans: &[&str]) -> Result<IssuedCert, CertError> {
        let names: Vec<String> = sans.iter().map(|s| (*s).to_owned()).collect();
        let mut params = CertificateParams::new(names)?;
        let mut dn = DistinguishedName::new();
        dn.push(
            DnType::CommonName,
            sans.first().copied().unwrap_or("localhost"),
        );
        params.distinguished_name = dn;
        let key = KeyPair::generate()?;
        let cert = params.signed_by(&key, &self.issuer)?;
        Ok(IssuedCert {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }
}

/// A fresh ECDSA P-256 key pair as (private PEM, public PEM), such as a
/// service-account signing key.
pub(crate) fn signing_key_pair_pem() -> Result<(String, String), CertError> {
    let key = KeyPair::generate()?;
    Ok((key.serialize_pem(), key.public_key_pem()))
}
