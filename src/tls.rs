//! TLS for the webhook server: certificate and key read from files and
//! re-read when they change (cert-manager rotates them in place), so a
//! rotation needs no restart and never fails a request: a handshake always
//! sees either the old or the new pair, and a broken new pair keeps the old one.
//!
//! The optional client CA is re-read the same way. Client certificates are
//! optional at the TLS level (kubelet probes carry none, behaviour.md 8); a
//! certificate that is presented must verify, and the HTTP layer requires
//! one on the webhook paths (see `server::ClientCert`).

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use rustls::crypto::ring::sign::any_supported_type;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use rustls::{RootCertStore, ServerConfig};

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("reading {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: no PEM certificate found")]
    NoCertificate { path: PathBuf },
    #[error("{path}: {message}")]
    Pem { path: PathBuf, message: String },
    #[error("unusable private key in {path}: {message}")]
    Key { path: PathBuf, message: String },
    #[error("client CA {path}: {message}")]
    ClientCa { path: PathBuf, message: String },
    #[error("TLS configuration: {0}")]
    Config(#[from] rustls::Error),
}

/// The contents last loaded, to notice a change without trusting mtimes
/// (Kubernetes secret volumes swap a symlink and keep old mtimes).
#[derive(PartialEq, Eq, Clone)]
struct Loaded {
    cert_pem: Vec<u8>,
    key_pem: Vec<u8>,
}

pub struct ReloadingCert {
    cert_path: PathBuf,
    key_path: PathBuf,
    current: RwLock<(Loaded, Arc<CertifiedKey>)>,
}

impl fmt::Debug for ReloadingCert {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReloadingCert")
            .field("cert_path", &self.cert_path)
            .field("key_path", &self.key_path)
            .finish()
    }
}

fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        path: path.to_path_buf(),
        source,
    })
}

fn parse_certs(pem: &[u8], path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::Pem {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate {
            path: path.to_path_buf(),
        });
    }
    Ok(certs)
}

fn certified_key(
    loaded: &Loaded,
    cert_path: &Path,
    key_path: &Path,
) -> Result<CertifiedKey, TlsError> {
    let certs = parse_certs(&loaded.cert_pem, cert_path)?;
    let key = PrivateKeyDer::from_pem_slice(&loaded.key_pem).map_err(|e| TlsError::Key {
        path: key_path.to_path_buf(),
        message: e.to_string(),
    })?;
    let signing = any_supported_type(&key).map_err(|e| TlsError::Key {
        path: key_path.to_path_buf(),
        message: e.to_string(),
    })?;
    let ck = CertifiedKey::new(certs, signing);
    // A key that does not belong to the certificate would fail every handshake.
    ck.keys_match().map_err(|e| TlsError::Key {
        path: key_path.to_path_buf(),
        message: format!(
            "does not match the certificate in {}: {e}",
            cert_path.display()
        ),
    })?;
    Ok(ck)
}

impl ReloadingCert {
    pub fn load(cert_path: &Path, key_path: &Path) -> Result<Arc<Self>, TlsError> {
        let loaded = Loaded {
            cert_pem: read(cert_path)?,
            key_pem: read(key_path)?,
        };
        let ck = certified_key(&loaded, cert_path, key_path)?;
        Ok(Arc::new(ReloadingCert {
            cert_path: cert_path.to_path_buf(),
            key_path: key_path.to_path_buf(),
            current: RwLock::new((loaded, Arc::new(ck))),
        }))
    }

    /// Re-reads the files; returns Ok(true) when a new pair was installed.
    pub fn reload(&self) -> Result<bool, TlsError> {
        let loaded = Loaded {
            cert_pem: read(&self.cert_path)?,
            key_pem: read(&self.key_path)?,
        };
        if self.current.read().map(|c| c.0 == loaded).unwrap_or(false) {
            return Ok(false);
        }
        let ck = certified_key(&loaded, &self.cert_path, &self.key_path)?;
        match self.current.write() {
            Ok(mut cur) => *cur = (loaded, Arc::new(ck)),
            Err(poisoned) => *poisoned.into_inner() = (loaded, Arc::new(ck)),
        }
        Ok(true)
    }

    /// Polls the files until the process ends.
    pub async fn watch(self: Arc<Self>, every: Duration) {
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let this = self.clone();
            match tokio::task::spawn_blocking(move || this.reload()).await {
                Ok(Ok(true)) => {
                    tracing::info!(cert = %self.cert_path.display(), "serving certificate reloaded")
                }
                Ok(Ok(false)) => {}
                // Mid-rotation the pair can be inconsistent for a moment: keep the old one.
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "serving certificate not reloaded; keeping the previous one")
                }
                Err(e) => tracing::warn!(error = %e, "certificate reload task failed"),
            }
        }
    }
}

impl ResolvesServerCert for ReloadingCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        match self.current.read() {
            Ok(c) => Some(c.1.clone()),
            Err(poisoned) => Some(poisoned.into_inner().1.clone()),
        }
    }
}

/// TLS 1.2 and 1.3 with the ring provider, HTTP/2 and HTTP/1.1 by ALPN.
/// With a client CA, clients may present a certificate signed by it (and
/// one that does not verify fails the handshake); without one they are
/// still served, and the HTTP layer decides per path.
fn build_config(
    resolver: Arc<ReloadingCert>,
    client_ca: Option<(&[u8], &Path)>,
) -> Result<ServerConfig, TlsError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])?;
    let builder = match client_ca {
        None => builder.with_no_client_auth(),
        Some((pem, path)) => {
            let ca_error = |message: String| TlsError::ClientCa {
                path: path.to_path_buf(),
                message,
            };
            let mut roots = RootCertStore::empty();
            for cert in parse_certs(pem, path)? {
                roots.add(cert).map_err(|e| ca_error(e.to_string()))?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .allow_unauthenticated()
                .build()
                .map_err(|e| ca_error(e.to_string()))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut cfg = builder.with_cert_resolver(resolver);
    cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(cfg)
}

/// The TLS configuration for each new connection. The serving certificate
/// is resolved per handshake by [`ReloadingCert`]; a changed client CA file
/// gets a new `ServerConfig`, used from the next connection on (a broken
/// file keeps the previous CA).
pub struct TlsSettings {
    cert: Arc<ReloadingCert>,
    client_ca: Option<ClientCaFile>,
    current: RwLock<Arc<ServerConfig>>,
}

struct ClientCaFile {
    path: PathBuf,
    pem: Mutex<Vec<u8>>,
}

impl TlsSettings {
    pub fn load(
        cert: Arc<ReloadingCert>,
        client_ca: Option<&Path>,
    ) -> Result<Arc<TlsSettings>, TlsError> {
        let (config, client_ca) = match client_ca {
            None => (build_config(cert.clone(), None)?, None),
            Some(path) => {
                let pem = read(path)?;
                let config = build_config(cert.clone(), Some((&pem, path)))?;
                let file = ClientCaFile {
                    path: path.to_path_buf(),
                    pem: Mutex::new(pem),
                };
                (config, Some(file))
            }
        };
        Ok(Arc::new(TlsSettings {
            cert,
            client_ca,
            current: RwLock::new(Arc::new(config)),
        }))
    }

    /// The configuration for a connection accepted now.
    pub fn current(&self) -> Arc<ServerConfig> {
        match self.current.read() {
            Ok(c) => c.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// A client CA is configured: the webhook paths require a client certificate.
    pub fn client_ca_configured(&self) -> bool {
        self.client_ca.is_some()
    }

    /// Re-reads the client CA file; Ok(true) when a new CA was installed.
    pub fn reload_client_ca(&self) -> Result<bool, TlsError> {
        let Some(ca) = &self.client_ca else {
            return Ok(false);
        };
        let pem = read(&ca.path)?;
        let same = ca.pem.lock().map(|p| *p == pem).unwrap_or(false);
        if same {
            return Ok(false);
        }
        let config = build_config(self.cert.clone(), Some((&pem, &ca.path)))?;
        match ca.pem.lock() {
            Ok(mut p) => *p = pem,
            Err(poisoned) => *poisoned.into_inner() = pem,
        }
        match self.current.write() {
            Ok(mut c) => *c = Arc::new(config),
            Err(poisoned) => *poisoned.into_inner() = Arc::new(config),
        }
        Ok(true)
    }

    /// Polls the client CA file until the process ends (no-op without one).
    pub async fn watch_client_ca(self: Arc<Self>, every: Duration) {
        let Some(path) = self.client_ca.as_ref().map(|c| c.path.clone()) else {
            return;
        };
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let this = self.clone();
            match tokio::task::spawn_blocking(move || this.reload_client_ca()).await {
                Ok(Ok(true)) => tracing::info!(client_ca = %path.display(), "client CA reloaded"),
                Ok(Ok(false)) => {}
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "client CA not reloaded; keeping the previous one")
                }
                Err(e) => tracing::warn!(error = %e, "client CA reload task failed"),
            }
        }
    }
}
