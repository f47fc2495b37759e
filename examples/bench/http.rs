//! Admission over HTTPS (issue 9, bench item 1): the real server, in
//! process, on a warm cache, beside a minimal axum + rustls server that
//! answers a constant AdmissionReview with the same TLS configuration (the
//! stack's limit). The load comes from `h2load` (Debian nghttp2-client), for
//! HTTP/2 and, with `--h1`, HTTP/1.1 keep-alive: throughput at saturation,
//! and latency percentiles at a fixed rate from its per-request log.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::http::header::CONTENT_TYPE;
use axum::routing::post;
use eviction_autoscaler::cache::Cache;
use eviction_autoscaler::metrics::Metrics;
use eviction_autoscaler::server::{self, AppState};
use eviction_autoscaler::tls::{ReloadingCert, TlsSettings};
use eviction_autoscaler::webhook::hold::MAX_HELD;
use eviction_autoscaler::webhook::live::{ApiReader, LIVE_CHECK_TIMEOUT};
use eviction_autoscaler::webhook::Webhooks;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

pub struct Servers {
    pub product: SocketAddr,
    pub bare: SocketAddr,
    /// The product's serve loop (connection limits, timeouts, HTTP settings)
    /// with the bare router: splits the difference into the serve loop's
    /// share and the handler's.
    pub stack: SocketAddr,
    /// The two routers, for the per-request cost without TLS and HTTP framing.
    pub product_app: axum::Router,
    pub bare_app: axum::Router,
    pub body: PathBuf,
    pub metrics: Arc<Metrics>,
    /// The product's EVICTION_HOLD ([`shipped_hold`]).
    pub hold: Duration,
    // Keeps the webhook's signal queue open.
    _signals: tokio::sync::mpsc::Receiver<eviction_autoscaler::webhook::Signal>,
}

#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error("{0}")]
    Setup(String),
    #[error("h2load: {0}")]
    H2load(String),
}

fn setup<E: std::fmt::Display>(what: &str) -> impl FnOnce(E) -> BenchError + '_ {
    move |e| BenchError::Setup(format!("{what}: {e}"))
}

/// A client that fails every request: with budgets that allow, the
/// eviction path never reaches the apiserver.
fn offline_client() -> kube::Client {
    let svc = tower::service_fn(|_req: axum::http::Request<kube::client::Body>| async {
        Err::<axum::http::Response<kube::client::Body>, _>(std::io::Error::other(
            "no apiserver in the benchmark",
        ))
    });
    kube::Client::new(svc, "default")
}

/// The EVICTION_HOLD `serve` runs with, read by the product's own options:
/// its default (6 s), or EVICTION_HOLD from the environment. With a hold,
/// every eviction a budget allows takes its room in the ledger
/// (`webhook::hold::take_room`), so the bench measures that too.
pub fn shipped_hold() -> Result<Duration, BenchError> {
    #[derive(clap::Parser)]
    struct Serve {
        #[command(flatten)]
        s: eviction_autoscaler::config::ServeOpts,
    }
    let args = ["bench", "--tls-cert-file", "c", "--tls-key-file", "k"];
    <Serve as clap::Parser>::try_parse_from(args)
        .map(|c| c.s.eviction_hold)
        .map_err(|e| BenchError::Setup(format!("EVICTION_HOLD: {e}")))
}

/// Starts both servers on 127.0.0.1 with one certificate; `pod` is the
/// (namespace, name) every request evicts.
pub async fn start(cache: Cache, dir: &Path, pod: (&str, &str)) -> Result<Servers, BenchError> {
    let g = eviction_autoscaler::certs::generate(
        &["localhost".to_string()],
        &["127.0.0.1".parse().map_err(setup("ip"))?],
    )
    .map_err(setup("certificates"))?;
    let (crt, key) = (dir.join("tls.crt"), dir.join("tls.key"));
    std::fs::write(&crt, &g.cert_pem).map_err(setup("write tls.crt"))?;
    std::fs::write(&key, &g.key_pem).map_err(setup("write tls.key"))?;
    let cert = ReloadingCert::load(&crt, &key).map_err(setup("load certificate"))?;
    let tls = TlsSettings::load(cert, None).map_err(setup("TLS settings"))?;

    let hold = shipped_hold()?;
    let metrics = Arc::new(Metrics::new());
    let (signals, signal_rx) = tokio::sync::mpsc::channel(1024);
    let client = offline_client();
    let webhooks = Arc::new(Webhooks {
        cache,
        client: client.clone(),
        metrics: metrics.clone(),
        signals,
        write_timeout: Duration::from_secs(5),
        live: ApiReader { client },
        live_timeout: LIVE_CHECK_TIMEOUT,
        hold,
        held: Arc::new(tokio::sync::Semaphore::new(MAX_HELD)),
        room: Default::default(),
    });
    let timeout = Duration::from_secs(10);
    let app = server::router(
        AppState {
            webhooks,
            metrics: metrics.clone(),
            max_body: 3 * 1024 * 1024,
            require_client_cert: false,
            draining: Arc::default(),
        },
        timeout,
    );
    let product = serve_on_loopback(&tls, app.clone(), timeout).await?;

    let (ns, name) = pod;
    let uid = "705ab4f5-6393-11e8-b7cc-42010a800002";
    let review = serde_json::json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": uid, "kind": {"group": "policy", "version": "v1", "kind": "Eviction"},
        "resource": {"group": "", "version": "v1", "resource": "pods"}, "subResource": "eviction",
        "requestKind": {"group": "policy", "version": "v1", "kind": "Eviction"},
        "requestResource": {"group": "", "version": "v1", "resource": "pods"}, "requestSubResource": "eviction",
        "name": name, "namespace": ns, "operation": "CREATE",
        "userInfo": {"username": "system:serviceaccount:kube-system:node-drainer", "groups": ["system:serviceaccounts", "system:authenticated"]},
        "object": {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": ns}},
        "oldObject": null, "dryRun": false,
        "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"}}});
    let body = dir.join("review.json");
    std::fs::write(&body, review.to_string()).map_err(setup("write review.json"))?;

    // The answer the product gives to this request, as a constant.
    let answer = Bytes::from(
        serde_json::json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "response": {"uid": uid, "allowed": true, "status": {"metadata": {}, "code": 200}}})
        .to_string(),
    );
    let bare_app = axum::Router::new().route(
        "/validate/evictions",
        post(move |_body: Bytes| {
            let a = answer.clone();
            async move { ([(CONTENT_TYPE, "application/json")], a) }
        }),
    );
    let bare_listener = TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(setup("bind"))?;
    let bare = bare_listener.local_addr().map_err(setup("address"))?;
    tokio::spawn(bare_serve(
        bare_listener,
        TlsAcceptor::from(tls.current()),
        bare_app.clone(),
    ));

    let stack = serve_on_loopback(&tls, bare_app.clone(), timeout).await?;

    Ok(Servers {
        product,
        bare,
        stack,
        product_app: app,
        bare_app,
        body,
        metrics,
        hold,
        _signals: signal_rx,
    })
}

/// `app` behind the product's serve loop (server::serve) on a free
/// loopback port.
async fn serve_on_loopback(
    tls: &Arc<TlsSettings>,
    app: axum::Router,
    timeout: Duration,
) -> Result<SocketAddr, BenchError> {
    let listener = server::bind(([127, 0, 0, 1], 0).into())
        .await
        .map_err(setup("bind"))?;
    let addr = listener.local_addr().map_err(setup("address"))?;
    tokio::spawn(server::serve(
        listener,
        tls.clone(),
        app,
        timeout,
        std::future::pending(),
    ));
    Ok(addr)
}

/// The least an axum + rustls server does: accept, handshake, serve (with
/// TCP_NODELAY, as `axum::serve` sets it).
async fn bare_serve(listener: TcpListener, acceptor: TlsAcceptor, app: axum::Router) {
    loop {
        let Ok((tcp, _)) = listener.accept().await else {
            continue;
        };
        let _ = tcp.set_nodelay(true);
        let (acceptor, app) = (acceptor.clone(), app.clone());
        tokio::spawn(async move {
            let Ok(tls) = acceptor.accept(tcp).await else {
                return;
            };
            let _ = auto::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(tls), TowerToHyperService::new(app))
                .await;
        });
    }
}

/// Mean time per request through `app` alone (no TLS, no HTTP framing):
/// `n` requests one after another on this thread, the answer read whole.
pub async fn router_cost(app: &axum::Router, body: &Bytes, n: u32) -> Result<Duration, BenchError> {
    use tower::ServiceExt;
    let started = std::time::Instant::now();
    for _ in 0..n {
        let req = axum::http::Request::post("/validate/evictions")
            .header(CONTENT_TYPE, "application/json")
            .body(axum::body::Body::from(body.clone()))
            .map_err(setup("request"))?;
        let resp = app.clone().oneshot(req).await.map_err(setup("router"))?;
        if !resp.status().is_success() {
            return Err(BenchError::Setup(format!(
                "router answered {}",
                resp.status()
            )));
        }
        axum::body::to_bytes(resp.into_body(), usize::MAX)
            .await
            .map_err(setup("body"))?;
    }
    Ok(started.elapsed() / n)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Proto {
    H2,
    H1,
}

impl Proto {
    pub fn name(self) -> &'static str {
        match self {
            Proto::H2 => "HTTP/2",
            Proto::H1 => "HTTP/1.1 keep-alive",
        }
    }
}

pub fn h2load_version() -> Option<String> {
    let out = Command::new("h2load").arg("--version").output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn h2load(args: &[String]) -> Result<String, BenchError> {
    let out = Command::new("h2load").args(args).output().map_err(|e| {
        BenchError::H2load(format!(
            "cannot run it ({e}); apt-get install nghttp2-client"
        ))
    })?;
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    if !out.status.success() {
        return Err(BenchError::H2load(format!(
            "{args:?} failed:\n{text}{}",
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    // Every request must have been answered 2xx, or the figure means nothing.
    let field = |prefix: &str, word: &str| -> Option<u64> {
        let line = text.lines().find(|l| l.starts_with(prefix))?;
        let i = line
            .split_whitespace()
            .position(|w| w.trim_end_matches(',') == word)?;
        line.split_whitespace().nth(i.checked_sub(1)?)?.parse().ok()
    };
    // (A timed run stops with requests in flight: done may exceed 2xx by those.)
    let ok = field("status codes:", "2xx").is_some_and(|n| n > 0)
        && ["3xx", "4xx", "5xx"]
            .iter()
            .all(|c| field("status codes:", c) == Some(0))
        && ["failed", "errored", "timeout"]
            .iter()
            .all(|c| field("requests:", c) == Some(0));
    if ok {
        Ok(text)
    } else {
        Err(BenchError::H2load(format!(
            "not every request answered 2xx:\n{text}"
        )))
    }
}

fn common(proto: Proto, body: &Path, addr: SocketAddr) -> Vec<String> {
    let mut a = vec![
        "-d".to_string(),
        body.display().to_string(),
        "-H".into(),
        "content-type: application/json".into(),
    ];
    if proto == Proto::H1 {
        a.push("--h1".into());
    }
    a.push(format!(
        "https://127.0.0.1:{}/validate/evictions",
        addr.port()
    ));
    a
}

/// Requests per second at saturation for `secs` (after a 1 s warm-up).
/// HTTP/2: 4 connections × 16 streams; HTTP/1.1: 32 keep-alive connections.
pub fn saturation(
    proto: Proto,
    body: &Path,
    addr: SocketAddr,
    secs: u32,
) -> Result<f64, BenchError> {
    let mut args = vec![
        "-D".to_string(),
        secs.to_string(),
        "--warm-up-time".into(),
        "1".into(),
        "-t".into(),
        "1".into(),
    ];
    match proto {
        Proto::H2 => args.extend(["-c", "4", "-m", "16"].map(String::from)),
        Proto::H1 => args.extend(["-c", "32", "-m", "1"].map(String::from)),
    }
    args.extend(common(proto, body, addr));
    let text = h2load(&args)?;
    // "finished in 5.00s, 12345.67 req/s, 4.56MB/s"
    text.lines()
        .find(|l| l.starts_with("finished in"))
        .and_then(|l| l.split(", ").nth(1))
        .and_then(|s| s.trim_end_matches(" req/s").parse().ok())
        .ok_or_else(|| BenchError::H2load(format!("no req/s in:\n{text}")))
}

/// Latency percentiles (µs: p50, p99, p99.9) at `rate` requests/s over 4
/// connections for `secs`, from h2load's per-request log; the first second
/// is left out as warm-up.
pub fn at_rate(
    proto: Proto,
    body: &Path,
    addr: SocketAddr,
    rate: u32,
    secs: u32,
    log: &Path,
) -> Result<(f64, f64, f64), BenchError> {
    let clients = 4;
    let mut args = vec![
        "-n".to_string(),
        (rate * (secs + 1)).to_string(),
        "-c".into(),
        clients.to_string(),
        "-m".into(),
        "1".into(),
        "-t".into(),
        "1".into(),
        format!("--rps={}", rate / clients),
        format!("--log-file={}", log.display()),
    ];
    args.extend(common(proto, body, addr));
    h2load(&args)?;
    let text = std::fs::read_to_string(log).map_err(|e| BenchError::H2load(format!("log: {e}")))?;
    // Columns: start (µs since the epoch), status, duration (µs).
    let mut rows: Vec<(u64, u64)> = text
        .lines()
        .filter_map(|l| {
            let mut c = l.split('\t');
            let start = c.next()?.parse().ok()?;
            let _status = c.next()?;
            Some((start, c.next()?.parse().ok()?))
        })
        .collect();
    rows.sort_unstable();
    let first = rows.first().map_or(0, |r| r.0);
    let mut d: Vec<u64> = rows
        .iter()
        .filter(|r| r.0 >= first + 1_000_000)
        .map(|r| r.1)
        .collect();
    if d.len() < 1000 {
        return Err(BenchError::H2load(format!(
            "only {} requests logged",
            d.len()
        )));
    }
    d.sort_unstable();
    let p = |q: f64| d[((d.len() as f64 * q) as usize).min(d.len() - 1)] as f64;
    Ok((p(0.50), p(0.99), p(0.999)))
}

/// CPU time of this process so far, all threads (utime + stime from
/// /proc/self/stat, in clock ticks of `tick`).
fn process_cpu(tick: f64) -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name (which may hold spaces), from field 3.
    let rest = stat.rsplit_once(')')?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let (u, s): (f64, f64) = (f.get(11)?.parse().ok()?, f.get(12)?.parse().ok()?);
    Some((u + s) / tick)
}

/// Clock ticks per second (`getconf CLK_TCK`; 100 on Linux when unknown).
pub fn clock_tick() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|t| t.trim().parse().ok())
        .unwrap_or(100.0)
}

/// The servers' CPU time per request (µs) at `rate` requests/s for `secs`:
/// this process's CPU time over the run (both servers live in it, one at a
/// time under load; h2load is a child and not counted) over the requests
/// answered. Below saturation, so it measures cost, not capacity, and it
/// is not moved by how the cores are shared with h2load.
pub fn cpu_per_request(
    proto: Proto,
    body: &Path,
    addr: SocketAddr,
    rate: u32,
    secs: u32,
    tick: f64,
) -> Result<f64, BenchError> {
    let clients = 16;
    let n = rate * secs;
    let mut args = vec![
        "-n".to_string(),
        n.to_string(),
        "-c".into(),
        clients.to_string(),
        "-m".into(),
        "1".into(),
        "-t".into(),
        "1".into(),
        format!("--rps={}", rate / clients),
    ];
    args.extend(common(proto, body, addr));
    let none = || BenchError::Setup("cannot read /proc/self/stat".into());
    let before = process_cpu(tick).ok_or_else(none)?;
    h2load(&args)?;
    let after = process_cpu(tick).ok_or_else(none)?;
    Ok((after - before) / f64::from(n) * 1e6)
}

/// Mean time inside the eviction handler, from the server's own histogram.
pub fn handler_mean_us(metrics: &Metrics) -> Option<f64> {
    let text = metrics.encode();
    let get = |suffix: &str| -> Option<f64> {
        text.lines()
            .find(|l| {
                l.starts_with(&format!(
                    "eviction_autoscaler_admission_duration_seconds_{suffix}"
                )) && l.contains("webhook=\"evictions\"")
            })?
            .rsplit(' ')
            .next()?
            .parse()
            .ok()
    };
    let (sum, count) = (get("sum")?, get("count")?);
    (count > 0.0).then(|| sum / count * 1e6)
}
