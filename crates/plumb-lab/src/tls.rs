//! TLS for the API endpoint and its clients: a lab CA and a serving certificate generated at
//! `lab up` (rcgen, ECDSA P-256), and rustls configurations on the `ring` provider (no
//! OpenSSL). The certificate names every address install-cni or plumb may dial:
//! `10.43.0.1`, the API endpoint IP, `127.0.0.1` and the `kubernetes.default.svc` names.

use std::net::IpAddr;
use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};

use crate::error::LabError;

/// PEM texts of a CA and a serving certificate signed by it.
#[derive(Debug, Clone)]
pub struct Pki {
    /// CA certificate (PEM).
    pub ca_cert: String,
    /// Serving certificate (PEM).
    pub server_cert: String,
    /// Serving key (PKCS#8 PEM).
    pub server_key: String,
}

fn tls_err(e: impl std::fmt::Display) -> LabError {
    LabError::Other(format!("TLS: {e}"))
}

/// Generates the lab CA and the API server's serving certificate.
pub fn generate(ips: &[IpAddr]) -> Result<Pki, LabError> {
    use rcgen::{
        BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
        KeyUsagePurpose, SanType,
    };
    let ca_key = KeyPair::generate().map_err(tls_err)?;
    let mut ca = CertificateParams::default();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(DnType::CommonName, "rke2-server-ca (plumb lab)");
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca_cert = ca.self_signed(&ca_key).map_err(tls_err)?;

    let key = KeyPair::generate().map_err(tls_err)?;
    let mut p = CertificateParams::default();
    p.distinguished_name
        .push(DnType::CommonName, "kube-apiserver");
    let mut sans = Vec::new();
    for name in [
        "kubernetes",
        "kubernetes.default",
        "kubernetes.default.svc",
        "kubernetes.default.svc.cluster.local",
        "localhost",
    ] {
        sans.push(SanType::DnsName(name.try_into().map_err(tls_err)?));
    }
    sans.extend(ips.iter().map(|ip| SanType::IpAddress(*ip)));
    p.subject_alt_names = sans;
    p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let cert = p.signed_by(&key, &ca_cert, &ca_key).map_err(tls_err)?;
    Ok(Pki {
        ca_cert: ca_cert.pem(),
        server_cert: cert.pem(),
        server_key: key.serialize_pem(),
    })
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A server configuration from PEM files.
pub fn server_config(cert: &Path, key: &Path) -> Result<Arc<rustls::ServerConfig>, LabError> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .map_err(tls_err)?
        .collect::<Result<_, _>>()
        .map_err(tls_err)?;
    let key = PrivateKeyDer::from_pem_file(key).map_err(tls_err)?;
    let config = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(tls_err)?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(tls_err)?;
    Ok(Arc::new(config))
}

/// A client configuration trusting only the CA in `ca` (PEM file).
pub fn client_config(ca: &Path) -> Result<Arc<rustls::ClientConfig>, LabError> {
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(ca).map_err(tls_err)? {
        roots.add(c.map_err(tls_err)?).map_err(tls_err)?;
    }
    let config = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(tls_err)?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

/// The server name rustls checks for an IP address.
pub fn server_name(ip: IpAddr) -> ServerName<'static> {
    ServerName::IpAddress(ip.into())
}
