//! The HTTPS server: routes, body limits, timeouts, and the TLS accept loop.
//! Bad input gets a clear JSON error and the server keeps serving.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

use crate::metrics::Metrics;
use kube::core::admission::AdmissionRequest;
use kube::core::DynamicObject;

use crate::webhook::{parse_review, Answer, ReviewError, Webhooks};

#[derive(Clone)]
pub struct AppState {
    pub webhooks: Arc<Webhooks>,
    pub metrics: Arc<Metrics>,
}

fn json_error(code: StatusCode, message: impl Into<String>) -> Response {
    (code, Json(serde_json::json!({ "error": message.into() }))).into_response()
}

fn answer(a: Answer) -> Response {
    Json(a.review).into_response()
}

/// Input the server cannot handle: too large, unreadable, not a review.
enum BadInput {
    Body(BytesRejection),
    Review(ReviewError),
}

impl IntoResponse for BadInput {
    fn into_response(self) -> Response {
        match self {
            BadInput::Body(rej) => json_error(rej.status(), rej.body_text()),
            BadInput::Review(e) => json_error(StatusCode::BAD_REQUEST, e.to_string()),
        }
    }
}

fn read_review(
    body: Result<Bytes, BytesRejection>,
) -> Result<AdmissionRequest<DynamicObject>, BadInput> {
    let body = body.map_err(BadInput::Body)?;
    parse_review(&body).map_err(BadInput::Review)
}

async fn validate_evictions(
    State(s): State<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    match read_review(body) {
        Ok(req) => answer(s.webhooks.evictions(req)),
        Err(e) => e.into_response(),
    }
}

async fn mutate_deployments(
    State(s): State<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    match read_review(body) {
        Ok(req) => answer(s.webhooks.deployments(req).await),
        Err(e) => e.into_response(),
    }
}

async fn readyz(State(s): State<AppState>) -> Response {
    if s.webhooks.cache.synced() {
        (StatusCode::OK, "ok\n").into_response()
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "watch caches not synced\n").into_response()
    }
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

pub fn router(state: AppState, max_body: usize, request_timeout: Duration) -> Router {
    Router::new()
        .route("/validate/evictions", post(validate_evictions))
        .route("/mutate/deployments", post(mutate_deployments))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .fallback(|| async { json_error(StatusCode::NOT_FOUND, "no such endpoint") })
        .layer(DefaultBodyLimit::max(max_body))
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
    tls: Arc<rustls::ServerConfig>,
    app: Router,
    timeout: Duration,
    shutdown: impl std::future::Future<Output = ()>,
) {
    let acceptor = TlsAcceptor::from(tls);
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
        let acceptor = acceptor.clone();
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
