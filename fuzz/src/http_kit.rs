//! The real HTTPS server (router, limits, rustls) run in-process over the
//! fuzz harness's handlers, and raw clients to attack it. Included with
//! `#[path]` by examples/http_fuzz.rs and tests/server_smoke.rs (stable
//! Rust, the product's own dependencies plus `h2`); needs `mod harness;`
//! beside it.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use eviction_autoscaler::metrics::Metrics;
use eviction_autoscaler::server::{self, AppState, Limits};
use eviction_autoscaler::tls::{ReloadingCert, TlsSettings};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

pub struct Running {
    pub addr: SocketAddr,
    pub dir: std::path::PathBuf,
    pub connector: TlsConnector,
    pub h2_connector: TlsConnector,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(s) = self.shutdown.take() {
            let _ = s.send(());
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn connector(ca_pem: &str, alpn: &[u8]) -> TlsConnector {
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(ca_pem.as_bytes()).flatten() {
        let _ = roots.add(c);
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    cfg.alpn_protocols = vec![alpn.to_vec()];
    TlsConnector::from(Arc::new(cfg))
}

/// Starts the server on 127.0.0.1 with a fresh certificate, these limits and
/// this request timeout; stops when the returned value is dropped.
pub async fn start(limits: Limits, timeout: Duration) -> Running {
    // One directory per server: two tests started in the same clock tick
    // (the clock's resolution is coarse on some machines) wrote one key
    // file at once, and one of them failed.
    static STARTED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let dir = std::env::temp_dir().join(format!(
        "ea-http-{}-{}-{}",
        std::process::id(),
        STARTED.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0)
    ));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let g = eviction_autoscaler::certs::generate(
        &["localhost".into()],
        &["127.0.0.1".parse().expect("ip")],
    )
    .expect("certificates");
    eviction_autoscaler::certs::write(&dir, &g).expect("write certificates");
    let cert = ReloadingCert::load(&dir.join("tls.crt"), &dir.join("tls.key")).expect("load cert");
    let tls = TlsSettings::load(cert, None).expect("TLS settings");
    let (webhooks, _writes, rx) = crate::harness::webhooks(true);
    // Keep the signal queue drained so a long run never fills it.
    tokio::spawn(async move {
        let mut rx = rx;
        while rx.recv().await.is_some() {}
    });
    let app = server::router_with_limits(
        AppState {
            webhooks,
            metrics: Arc::new(Metrics::new()),
            max_body: 3 * 1024 * 1024,
            require_client_cert: false,
            draining: Arc::default(),
        },
        timeout,
        limits,
    );
    let listener = server::bind("127.0.0.1:0".parse().expect("addr"))
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("local addr");
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(server::serve_with_limits(
        listener,
        tls,
        app,
        timeout,
        limits,
        async move {
            let _ = rx.await;
        },
    ));
    Running {
        addr,
        dir,
        connector: connector(&g.ca_pem, b"http/1.1"),
        h2_connector: connector(&g.ca_pem, b"h2"),
        shutdown: Some(tx),
    }
}

impl Running {
    pub async fn tls(&self) -> std::io::Result<TlsStream<TcpStream>> {
        let tcp = TcpStream::connect(self.addr).await?;
        self.connector
            .connect(ServerName::try_from("localhost").expect("name"), tcp)
            .await
    }

    pub async fn tls_h2(&self) -> std::io::Result<TlsStream<TcpStream>> {
        let tcp = TcpStream::connect(self.addr).await?;
        self.h2_connector
            .connect(ServerName::try_from("localhost").expect("name"), tcp)
            .await
    }

    /// An HTTP/2 client connection; its driver task runs in the background.
    pub async fn h2(&self) -> Result<h2::client::SendRequest<Bytes>, String> {
        let io = self.tls_h2().await.map_err(|e| e.to_string())?;
        let (send, conn) = h2::client::handshake(io).await.map_err(|e| e.to_string())?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        Ok(send)
    }
}

/// One HTTP/1.1 request with `head` (request line and headers, no final
/// blank line) and `body` on a fresh connection; the status code, or None
/// when the connection ended without an answer.
pub async fn h1(run: &Running, head: &str, body: &[u8]) -> std::io::Result<Option<u16>> {
    let mut s = run.tls().await?;
    s.write_all(format!("{head}\r\ncontent-length: {}\r\n\r\n", body.len()).as_bytes())
        .await?;
    s.write_all(body).await?;
    read_status(&mut s).await
}

/// Reads until the end of a response head (or EOF): its status code.
pub async fn read_status<S: tokio::io::AsyncRead + Unpin>(
    s: &mut S,
) -> std::io::Result<Option<u16>> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let n = match s.read(&mut chunk).await {
            Ok(n) => n,
            // A reset or a TLS close without notify: no answer.
            Err(_) if buf.is_empty() => return Ok(None),
            Err(e) => return Err(e),
        };
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
        if buf.windows(4).any(|w| w == b"\r\n\r\n") {
            break;
        }
    }
    let text = String::from_utf8_lossy(&buf);
    Ok(text
        .strip_prefix("HTTP/1.1 ")
        .and_then(|r| r.get(..3))
        .and_then(|c| c.parse().ok()))
}

/// Resident memory of this process, in KiB (Linux).
pub fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}
