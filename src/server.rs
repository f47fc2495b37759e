//! The HTTPS server: routes, body limits, timeouts, and the TLS accept loop.
//! Bad input gets a clear JSON error and the server keeps serving.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use futures::StreamExt;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

use crate::cache::StoreState;
use crate::metrics::Metrics;
use crate::tls::TlsSettings;
use kube::core::admission::AdmissionRequest;
use kube::core::DynamicObject;

use crate::webhook::{parse_review, Answer, ReviewError, Webhooks};

#[derive(Clone)]
pub struct AppState {
    pub webhooks: Arc<Webhooks>,
    pub metrics: Arc<Metrics>,
    /// Largest request body accepted.
    pub max_body: usize,
    /// CLIENT_CA_FILE is set: the webhook paths need a verified client certificate.
    pub require_client_cert: bool,
}

/// Set on every request by the accept loop: whether the connection's client
/// presented a certificate (rustls has verified it against the client CA,
/// or the handshake would have failed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientCert(pub bool);

/// The webhook paths answer only clients with a verified certificate when a
/// client CA is configured; health endpoints and /metrics never ask for one
/// (kubelet probes and Prometheus scrapes carry none, behaviour.md 8).
async fn require_client_cert(State(s): State<AppState>, req: Request, next: Next) -> Response {
    let presented = req.extensions().get::<ClientCert>().is_some_and(|c| c.0);
    if s.require_client_cert && !presented {
        s.metrics.client_cert_missing.inc();
        // Read the body first (up to the limit): answering before it is read
        // makes HTTP/2 clients see a reset stream instead of the 401.
        let mut body = req.into_body().into_data_stream();
        let mut read = 0usize;
        while let Some(Ok(chunk)) = body.next().await {
            read += chunk.len();
            if read > s.max_body {
                break;
            }
        }
        return json_error(
            StatusCode::UNAUTHORIZED,
            "a client certificate signed by the configured client CA is required on this path",
        );
    }
    next.run(req).await
}

fn json_error(code: StatusCode, message: impl Into<String>) -> Response {
    (code, Json(serde_json::json!({ "error": message.into() }))).into_response()
}

fn answer(a: Answer) -> Response {
    Json(a.review).into_response()
}

/// Input the server cannot handle: too large, unreadable, not a review.
enum BadInput {
    TooLarge(usize),
    Unreadable(String),
    Review(ReviewError),
}

impl IntoResponse for BadInput {
    fn into_response(self) -> Response {
        match self {
            BadInput::TooLarge(max) => json_error(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("request body is larger than the limit of {max} bytes"),
            ),
            BadInput::Unreadable(e) => json_error(
                StatusCode::BAD_REQUEST,
                format!("cannot read the request body: {e}"),
            ),
            BadInput::Review(e) => json_error(StatusCode::BAD_REQUEST, e.to_string()),
        }
    }
}

/// Reads at most `max` bytes. Past that the rest is read and dropped rather
/// than buffered, so that HTTP/2 clients get the 413 instead of a reset
/// stream; the request timeout bounds how long that can take.
async fn read_limited(body: Body, max: usize) -> Result<Bytes, BadInput> {
    let mut stream = body.into_data_stream();
    let mut buf = Vec::new();
    let mut too_large = false;
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| BadInput::Unreadable(e.to_string()))?;
        if too_large || buf.len() + chunk.len() > max {
            too_large = true;
            buf = Vec::new();
            continue;
        }
        buf.extend_from_slice(&chunk);
    }
    if too_large {
        return Err(BadInput::TooLarge(max));
    }
    Ok(Bytes::from(buf))
}

async fn read_review(
    s: &AppState,
    body: Body,
) -> Result<AdmissionRequest<DynamicObject>, BadInput> {
    let body = read_limited(body, s.max_body).await?;
    parse_review(&body).map_err(BadInput::Review)
}

async fn validate_evictions(State(s): State<AppState>, body: Body) -> Response {
    match read_review(&s, body).await {
        Ok(req) => answer(s.webhooks.evictions(req).await),
        Err(e) => e.into_response(),
    }
}

async fn mutate_deployments(State(s): State<AppState>, body: Body) -> Response {
    match read_review(&s, body).await {
        Ok(req) => answer(s.webhooks.deployments(req).await),
        Err(e) => e.into_response(),
    }
}

/// Ready once every watch cache has synced, and while none is stale; the
/// body names the stores that keep it from being ready.
async fn readyz(State(s): State<AppState>) -> Response {
    let cache = &s.webhooks.cache;
    let unready = cache.health.unready();
    if cache.synced() && unready.is_empty() {
        return (StatusCode::OK, "ok\n").into_response();
    }
    let mut body = String::from(if cache.synced() {
        "watch caches stale\n"
    } else {
        "watch caches not synced\n"
    });
    for u in unready {
        let what = match u.state {
            StoreState::Syncing => "not listed yet".to_string(),
            StoreState::Stale(d) => format!("stale: watch failing for {}s", d.as_secs()),
            StoreState::Fresh | StoreState::Failing(_) => continue,
        };
        body.push_str(&format!("{}: {what}", u.store));
        if !u.last_error.is_empty() {
            body.push_str(&format!(" (last error: {})", u.last_error));
        }
        body.push('\n');
    }
    (StatusCode::SERVICE_UNAVAILABLE, body).into_response()
}

async fn metrics(State(s): State<AppState>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        s.metrics.encode(),
    )
        .into_response()
}

pub fn router(state: AppState, request_timeout: Duration) -> Router {
    let webhooks = Router::new()
        .route("/validate/evictions", post(validate_evictions))
        .route("/mutate/deployments", post(mutate_deployments))
        .route_layer(middleware::from_fn_with_state(
            state.clone(),
            require_client_cert,
        ));
    Router::new()
        .merge(webhooks)
        // Never depends on the apiserver: answers as soon as the listener is up.
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .fallback(|| async { json_error(StatusCode::NOT_FOUND, "no such endpoint") })
        // Bodies are limited by read_limited, per handler.
        .layer(DefaultBodyLimit::disable())
        .layer(middleware::from_fn(
            move |req: Request, next: Next| async move {
                match tokio::time::timeout(request_timeout, next.run(req)).await {
                    Ok(r) => r,
                    Err(_) => json_error(StatusCode::SERVICE_UNAVAILABLE, "request timed out"),
                }
            },
        ))
        .with_state(state)
}

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
}

pub async fn bind(addr: SocketAddr) -> Result<TcpListener, ServeError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| ServeError::Bind { addr, source })
}

/// Accepts TLS connections until `shutdown` resolves. A failed handshake
/// (plain HTTP, wrong client certificate, slow client) closes that
/// connection and nothing else.
pub async fn serve(
    listener: TcpListener,
    tls: Arc<TlsSettings>,
    app: Router,
    timeout: Duration,
    shutdown: impl std::future::Future<Output = ()>,
) {
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let (tcp, peer) = tokio::select! {
            _ = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(c) => c,
                Err(e) => {
                    // EMFILE and friends: wait a little instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        // The current configuration: a reloaded client CA applies from the next connection.
        let acceptor = TlsAcceptor::from(tls.current());
        // Small answers go out at once: with Nagle, a response split in two
        // writes waits for the peer's delayed ACK (40 ms, seen at p99.9).
        let _ = tcp.set_nodelay(true);
        let app = app.clone();
        tokio::spawn(async move {
            let tls = match tokio::time::timeout(timeout, acceptor.accept(tcp)).await {
                Ok(Ok(s)) => s,
                Ok(Err(e)) => {
                    tracing::debug!(%peer, error = %e, "TLS handshake failed");
                    return;
                }
                Err(_) => {
                    tracing::debug!(%peer, "TLS handshake timed out");
                    return;
                }
            };
            let presented = tls
                .get_ref()
                .1
                .peer_certificates()
                .is_some_and(|c| !c.is_empty());
            let app = tower::ServiceExt::map_request(app, move |mut req: Request<_>| {
                req.extensions_mut().insert(ClientCert(presented));
                req
            });
            let svc = TowerToHyperService::new(app);
            let mut builder = auto::Builder::new(TokioExecutor::new());
            builder
                .http1()
                .timer(TokioTimer::new())
                .header_read_timeout(timeout);
            if let Err(e) = builder.serve_connection(TokioIo::new(tls), svc).await {
                tracing::debug!(%peer, error = %e, "connection ended with an error");
            }
        });
    }
}
