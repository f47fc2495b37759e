//! `eviction-autoscaler certs`: a CA and a serving certificate for local use
//! (tests, the local control plane, trying the product). Production clusters
//! use cert-manager; see certs/README.md.

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};

#[derive(Debug, thiserror::Error)]
pub enum CertsError {
    #[error("generating certificates: {0}")]
    Generate(#[from] rcgen::Error),
    #[error("writing {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("invalid DNS name {0:?}")]
    DnsName(String),
}

pub struct Generated {
    pub ca_pem: String,
    pub cert_pem: String,
    pub key_pem: String,
}

pub fn generate(dns_names: &[String], ips: &[IpAddr]) -> Result<Generated, CertsError> {
    let ca_key = KeyPair::generate()?;
    let mut ca = CertificateParams::default();
    ca.distinguished_name
        .push(DnType::CommonName, "eviction-autoscaler local CA");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca_cert = ca.self_signed(&ca_key)?;
    let issuer = Issuer::new(ca, ca_key);

    let key = KeyPair::generate()?;
    let mut params = CertificateParams::default();
    let cn = dns_names
        .first()
        .cloned()
        .unwrap_or_else(|| "eviction-autoscaler".to_string());
    params.distinguished_name.push(DnType::CommonName, cn);
    for name in dns_names {
        if !valid_dns_name(name) {
            return Err(CertsError::DnsName(name.clone()));
        }
        let dns = name
            .clone()
            .try_into()
            .map_err(|_| CertsError::DnsName(name.clone()))?;
        params.subject_alt_names.push(SanType::DnsName(dns));
    }
    for ip in ips {
        params.subject_alt_names.push(SanType::IpAddress(*ip));
    }
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let cert = params.signed_by(&key, &issuer)?;
    Ok(Generated {
        ca_pem: ca_cert.pem(),
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    })
}

/// Letters, digits, `-`, `.` and a leading `*.` wildcard; no empty labels.
fn valid_dns_name(name: &str) -> bool {
    let rest = name.strip_prefix("*.").unwrap_or(name);
    !rest.is_empty()
        && name.len() <= 253
        && rest.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
        })
}

/// Writes ca.crt, tls.crt and tls.key (the key readable by the owner only).
pub fn write(out: &Path, g: &Generated) -> Result<(), CertsError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| CertsError::Write { path, source }
    };
    std::fs::create_dir_all(out).map_err(io(out))?;
    for (name, body) in [("ca.crt", &g.ca_pem), ("tls.crt", &g.cert_pem)] {
        let p = out.join(name);
        std::fs::write(&p, body).map_err(io(&p))?;
    }
    let p = out.join("tls.key");
    write_private(&p, g.key_pem.as_bytes()).map_err(io(&p))?;
    Ok(())
}

#[cfg(unix)]
fn write_private(path: &Path, body: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    // Write a new file and rename it over the old, so a watching server never
    // reads half a key.
    let tmp = path.with_extension("key.tmp");
    // A new file, always: the mode applies only to a file created, and a
    // leftover (or planted) tmp would keep its own mode, or be a symlink
    // the key is written through.
    match std::fs::remove_file(&tmp) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    let mut f = std::fs::OpenOptions::new()
        .create_new(true)
        .write(true)
        .mode(0o600)
        .open(&tmp)?;
    f.write_all(body)?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)
}

#[cfg(not(unix))]
fn write_private(path: &Path, body: &[u8]) -> std::io::Result<()> {
    std::fs::write(path, body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tls::ReloadingCert;

    #[test]
    fn generated_pair_loads_and_matches() {
        let dir = std::env::temp_dir().join(format!("ea-certs-{}", std::process::id()));
        let g = generate(&["localhost".into()], &["127.0.0.1".parse().unwrap()]).unwrap();
        write(&dir, &g).unwrap();
        let r = ReloadingCert::load(&dir.join("tls.crt"), &dir.join("tls.key")).unwrap();
        assert!(!r.reload().unwrap(), "unchanged files are not reloaded");
        let g2 = generate(&["localhost".into()], &[]).unwrap();
        write(&dir, &g2).unwrap();
        assert!(r.reload().unwrap(), "new files are picked up");
        // A key that does not match keeps the previous pair.
        std::fs::write(dir.join("tls.key"), g.key_pem.as_bytes()).unwrap();
        assert!(r.reload().is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn bad_dns_name_is_an_error() {
        assert!(generate(&["bad name".into()], &[]).is_err());
        assert!(generate(&["a..b".into()], &[]).is_err());
        assert!(generate(&["svc.ns.svc".into(), "*.example.com".into()], &[]).is_ok());
    }
}
