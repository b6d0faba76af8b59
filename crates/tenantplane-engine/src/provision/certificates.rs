//! The control plane's certificates and random tokens (rcgen and ring: the only
//! randomness of provisioning, kept out of the pure core).

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DistinguishedName, DnType, IsCa, KeyPair,
    KeyUsagePurpose,
};
use ring::rand::SecureRandom;

use super::ProvisionError;

/// A self-signed client certificate for the API server's calls to kubelets, as PEM
/// (cert, key). Self-signed is enough: the kubelet endpoint trusts it by fingerprint.
pub(super) fn kubelet_client_cert(common_name: &str) -> Result<(String, String), rcgen::Error> {
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, common_name);
    params.distinguished_name = dn;
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    let key = KeyPair::generate()?;
    let cert = params.self_signed(&key)?;
    Ok((cert.pem(), key.serialize_pem()))
}

/// The server CA's parameters: its identity (what an issued certificate names as
/// issuer) is only the common name, so the issuer can be rebuilt from the key.
fn server_ca_params(common_name: &str) -> Result<CertificateParams, rcgen::Error> {
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, common_name);
    params.distinguished_name = dn;
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    Ok(params)
}

/// A self-signed ECDSA P-256 CA (what k3s generates for itself), as PEM (cert, key).
pub(super) fn server_ca(common_name: &str) -> Result<(String, String), rcgen::Error> {
    let key = KeyPair::generate()?;
    let key_pem = key.serialize_pem();
    let issuer = CertifiedIssuer::self_signed(server_ca_params(common_name)?, key)?;
    Ok((issuer.pem(), key_pem))
}

/// A serving certificate for `sans` (DNS names and IP addresses) signed by the
/// server CA, as PEM (cert, key).
pub(super) fn serving_cert(
    ca_common_name: &str,
    ca_key_pem: &str,
    sans: &[String],
) -> Result<(String, String), rcgen::Error> {
    let issuer = rcgen::Issuer::new(
        server_ca_params(ca_common_name)?,
        KeyPair::from_pem(ca_key_pem)?,
    );
    let mut params = CertificateParams::new(sans.to_vec())?;
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, "kube-apiserver");
    params.distinguished_name = dn;
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    let key = KeyPair::generate()?;
    let cert = params.signed_by(&key, &issuer)?;
    Ok((cert.pem(), key.serialize_pem()))
}

pub(super) fn random_hex(bytes: usize) -> Result<String, ProvisionError> {
    let mut buf = vec![0u8; bytes];
    ring::rand::SystemRandom::new()
        .fill(&mut buf)
        .map_err(|_| ProvisionError::Random)?;
    Ok(tenantplane_core::hex::short_hex(&buf, bytes))
}
