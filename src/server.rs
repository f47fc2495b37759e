//! The HTTPS server: routes, body limits, timeouts, and the TLS accept loop.
//! Bad input gets a clear JSON error and the server keeps serving.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes, HttpBody};
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use futures::{FutureExt, StreamExt};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_rustls::TlsAcceptor;

use crate::cache::StoreState;
use crate::metrics::Metrics;
use crate::tls::TlsSettings;

use crate::webhook::{
    parse_deployment_review, parse_eviction_review, Answer, ReviewError, Webhooks,
};

/// Bounds on what one client, or many, can make the server hold. Every
/// request is also bounded in time by the request timeout (TLS handshake,
/// headers, body and answer), so a slow client holds its share only that long.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Open connections at once; past it new ones are closed at accept.
    pub max_connections: usize,
    /// Webhook requests being handled at once, all connections together;
    /// past it the answer is 503 (failurePolicy Ignore: the apiserver then
    /// applies its own PDB check, so this never denies an allowed eviction).
    pub max_in_flight: usize,
    /// Request-body bytes held at once, all webhook requests together (at
    /// least one body of the body limit); past it 503. This, not the
    /// request count, bounds the memory that bodies take.
    pub max_body_bytes_in_flight: usize,
    /// HTTP/2 streams one connection may have open at once.
    pub h2_max_streams: u32,
    /// Request head size (HTTP/1 read buffer, HTTP/2 header list); past it 431.
    pub max_header_bytes: usize,
    /// Header fields in one HTTP/1 request; past it 431.
    pub max_headers: usize,
    /// A connection with no request in flight for this long is closed
    /// (HTTP/2 with a GOAWAY). Longer than the idle timeout of Go's HTTP
    /// client (90 s), so the apiserver normally closes first. The first
    /// request must begin within the request timeout. Else a client that
    /// sends nothing after its handshake, or answers our pings and nothing
    /// more, held its connection slot for good: `max_connections` of those
    /// and every new connection, the kubelet's probes among them, was
    /// closed at accept.
    pub idle: Duration,
}

/// [`Limits::max_in_flight`] by default.
pub const MAX_IN_FLIGHT: usize = 128;

impl Default for Limits {
    /// The apiserver sends small heads and, per replica, a few hundred
    /// reviews a second at most; these leave it ample room.
    fn default() -> Self {
        Limits {
            max_connections: 1024,
            max_in_flight: MAX_IN_FLIGHT,
            max_body_bytes_in_flight: 64 * 1024 * 1024,
            // Go's HTTP/2 client (the apiserver's) assumes 100 until it
            // reads our SETTINGS: fewer would refuse its first burst.
            h2_max_streams: 100,
            max_header_bytes: 64 * 1024,
            max_headers: 100,
            idle: Duration::from_secs(120),
        }
    }
}

/// Requests of one connection in flight, and when the last one ended: what
/// [`idle_for`] closes an idle connection on.
struct Activity {
    started: std::time::Instant,
    in_flight: AtomicUsize,
    /// Milliseconds from `started` to the end of the last request; u64::MAX
    /// before the first request began.
    last_ms: AtomicU64,
}

/// Held while a request of the connection is handled (dropped with its
/// future, answered or not).
struct InFlight(Arc<Activity>);

impl Activity {
    fn new() -> Arc<Self> {
        Arc::new(Activity {
            started: std::time::Instant::now(),
            in_flight: AtomicUsize::new(0),
            last_ms: AtomicU64::new(u64::MAX),
        })
    }

    fn enter(self: &Arc<Self>) -> InFlight {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        InFlight(self.clone())
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX - 1)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.last_ms.store(self.0.now_ms(), Ordering::Release);
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Resolves once the connection has been idle too long: no request begun
/// within `first` of the handshake, or none in flight for `idle` since the
/// last one ended.
async fn idle_for(a: &Activity, first: Duration, idle: Duration) {
    loop {
        if a.in_flight.load(Ordering::Acquire) > 0 {
            tokio::time::sleep(idle.max(Duration::from_millis(10))).await;
            continue;
        }
        let due = match a.last_ms.load(Ordering::Acquire) {
            u64::MAX => first,
            last => Duration::from_millis(last).saturating_add(idle),
        };
        let now = a.started.elapsed();
        if now >= due {
            return;
        }
        // At the deadline, or after `idle` if sooner (a request that began
        // and ended meanwhile moves it).
        tokio::time::sleep((due - now).min(idle).max(Duration::from_millis(10))).await;
    }
}

/// hyper's HTTP/1 header-count limit when none is set (hyper's
/// `DEFAULT_MAX_HEADERS`, not exported; `oversized_request_heads_get_431`
/// in tests/server_smoke.rs holds it to its word).
const HYPER_DEFAULT_MAX_HEADERS: usize = 100;

#[derive(Clone)]
pub struct AppState {
    pub webhooks: Arc<Webhooks>,
    pub metrics: Arc<Metrics>,
    /// Largest request body accepted.
    pub max_body: usize,
    /// CLIENT_CA_FILE is set: the webhook paths need a verified client certificate.
    pub require_client_cert: bool,
    /// Set on SIGTERM: /readyz fails at once while requests are still served.
    pub draining: Arc<AtomicBool>,
}

/// Set by the accept loop on every request of a connection whose client
/// presented a certificate (rustls has verified it against the client CA,
/// or the handshake would have failed); absent when it presented none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientCert(pub bool);

/// What every webhook request passes before its body is parsed, in one
/// place rather than as middleware layers (each layer boxed and cloned a
/// service per request: a microsecond of the eviction path, per `make bench`).
#[derive(Clone)]
struct Guarded {
    app: AppState,
    /// Webhook requests being handled ([`Limits::max_in_flight`]).
    in_flight: Quota,
    budget: BodyBudget,
    timeout: Duration,
}

/// What is read of a request refused for want of a client certificate
/// before the 401 (so that an HTTP/2 client sees the answer, not a reset).
const UNAUTHORIZED_BODY: usize = 64 * 1024;

/// Held while a webhook request is handled: its slot and its body's bytes.
struct Admitted {
    _slot: Taken,
    _bytes: Option<Taken>,
}

/// A count held against a ceiling (requests, body bytes), only ever taken
/// with a try: past the ceiling the answer is 503, never a queue. So an
/// atomic is enough; a tokio Semaphore also locks its waiter list on every
/// release, twice per webhook request.
#[derive(Clone)]
struct Quota {
    used: Arc<AtomicUsize>,
    max: usize,
}

/// What is taken from a [`Quota`], given back when dropped.
struct Taken {
    used: Arc<AtomicUsize>,
    n: usize,
}

impl Quota {
    fn new(max: usize) -> Self {
        Quota {
            used: Arc::default(),
            max,
        }
    }

    fn try_take(&self, n: usize) -> Option<Taken> {
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |u| {
                u.checked_add(n).filter(|t| *t <= self.max)
            })
            .ok()?;
        Some(Taken {
            used: self.used.clone(),
            n,
        })
    }
}

impl Drop for Taken {
    fn drop(&mut self) {
        self.used.fetch_sub(self.n, Ordering::AcqRel);
    }
}

impl Guarded {
    /// A slot among the requests in flight (else 503 at once: a queue would
    /// only hold more bodies in memory), the client certificate when one is
    /// required, then the body within the size limit and the byte budget.
    async fn admit(&self, req: Request) -> Result<(Bytes, Admitted), Response> {
        let s = &self.app;
        // The webhook paths answer only clients with a verified certificate
        // when a client CA is configured; health endpoints and /metrics never
        // ask for one (kubelet probes and Prometheus scrapes carry none,
        // behaviour.md 8).
        let presented = req.extensions().get::<ClientCert>().is_some_and(|c| c.0);
        if s.require_client_cert && !presented {
            s.metrics.client_cert_missing.inc();
            // Read the body first (up to the limit): answering before it is read
            // makes HTTP/2 clients see a reset stream instead of the 401.
            // Before a slot is taken, and no more than a review's worth:
            // clients without a certificate must not crowd out the
            // apiserver's requests.
            let mut body = req.into_body().into_data_stream();
            let mut read = 0usize;
            while let Some(Ok(chunk)) = body.next().await {
                read += chunk.len();
                if read > UNAUTHORIZED_BODY {
                    break;
                }
            }
            return Err(json_error(
                StatusCode::UNAUTHORIZED,
                "a client certificate signed by the configured client CA is required on this path",
            ));
        }
        let Some(slot) = self.in_flight.try_take(1) else {
            return Err(json_error(
                StatusCode::SERVICE_UNAVAILABLE,
                "too many requests in flight; try again",
            ));
        };
        let (body, bytes) = read_limited(req.into_body(), s.max_body, &self.budget)
            .await
            .map_err(IntoResponse::into_response)?;
        Ok((
            body,
            Admitted {
                _slot: slot,
                _bytes: bytes,
            },
        ))
    }

    /// Admits the request, then answers its body with `handle` (given the
    /// state back), all within the request time limit; the slot and the
    /// body's bytes are held until the answer is made. A plain function that
    /// returns one future owning the state, not `async fn`s nested in the
    /// handlers: each of those keeps its arguments beside the future it
    /// awaits, and the whole state is moved when the request is boxed.
    fn serve<F, Fut>(
        self: Arc<Self>,
        req: Request,
        handle: F,
    ) -> impl std::future::Future<Output = Response>
    where
        F: FnOnce(Arc<Self>, Bytes) -> Fut,
        Fut: std::future::Future<Output = Response>,
    {
        let limit = self.timeout;
        within(limit, async move {
            match self.admit(req).await {
                Ok((body, _held)) => handle(self, body).await,
                Err(answer) => answer,
            }
        })
    }
}

/// `work` within the request time limit, else 503. Not an `async fn`: that
/// would keep `work` twice in its state, once as the argument and once
/// inside the timeout (1.3 KB more per webhook request, copied when the
/// request's future is boxed; memmove was among the top costs in a profile
/// of `make bench`).
fn within(
    limit: Duration,
    work: impl std::future::Future<Output = Response>,
) -> impl std::future::Future<Output = Response> {
    tokio::time::timeout(limit, work).map(|r| {
        r.unwrap_or_else(|_| json_error(StatusCode::SERVICE_UNAVAILABLE, "request timed out"))
    })
}

fn json_error(code: StatusCode, message: impl Into<String>) -> Response {
    (code, Json(serde_json::json!({ "error": message.into() }))).into_response()
}

fn answer(a: Answer) -> Response {
    match a.review.to_json() {
        Ok(body) => (
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            )],
            body,
        )
            .into_response(),
        Err(e) => json_error(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("cannot write the AdmissionReview: {e}"),
        ),
    }
}

/// Input the server cannot handle: too large, unreadable, not a review;
/// or, for now, more body bytes than the budget has left.
enum BadInput {
    TooLarge(usize),
    Busy,
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
            BadInput::Busy => json_error(
                StatusCode::SERVICE_UNAVAILABLE,
                "too many request bytes in flight; try again",
            ),
            BadInput::Unreadable(e) => json_error(
                StatusCode::BAD_REQUEST,
                format!("cannot read the request body: {e}"),
            ),
            BadInput::Review(e) => json_error(StatusCode::BAD_REQUEST, e.to_string()),
        }
    }
}

/// The shared budget of request-body bytes ([`Limits::max_body_bytes_in_flight`]).
#[derive(Clone)]
struct BodyBudget(Quota);

impl BodyBudget {
    /// Extends `held` to cover `want` bytes, or Busy when the budget is spent.
    fn cover(&self, held: &mut Option<Taken>, want: usize) -> Result<(), BadInput> {
        let have = held.as_ref().map_or(0, |t| t.n);
        if want <= have {
            return Ok(());
        }
        let mut more = self.0.try_take(want - have).ok_or(BadInput::Busy)?;
        match held {
            // One count given back on drop: the held one now covers both.
            Some(h) => h.n += std::mem::take(&mut more.n),
            None => *held = Some(more),
        }
        Ok(())
    }
}

/// Reads at most `max` bytes, each one covered by the budget (the declared
/// length up front, so one allocation and an early 503). Past `max` the rest
/// is read and dropped rather than buffered, so that HTTP/2 clients get the
/// 413 instead of a reset stream; the request timeout bounds how long that
/// can take. The permit goes with the bytes: hold it while they live.
async fn read_limited(
    body: Body,
    max: usize,
    budget: &BodyBudget,
) -> Result<(Bytes, Option<Taken>), BadInput> {
    let declared = usize::try_from(body.size_hint().lower()).unwrap_or(usize::MAX);
    let mut held = None;
    if declared <= max {
        budget.cover(&mut held, declared)?;
    }
    let mut stream = body.into_data_stream();
    // The common body comes in one chunk: keep it as it is, no copy.
    let first = match stream.next().await {
        None => return Ok((Bytes::new(), held)),
        Some(chunk) => chunk.map_err(|e| BadInput::Unreadable(e.to_string()))?,
    };
    if stream.is_end_stream() && first.len() <= max {
        budget.cover(&mut held, first.len())?;
        return Ok((first, held));
    }
    let mut buf = Vec::new();
    if declared <= max {
        buf.reserve_exact(declared);
    }
    let mut too_large = false;
    let mut stream = futures::stream::iter([Ok(first)]).chain(stream);
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| BadInput::Unreadable(e.to_string()))?;
        if too_large || buf.len() + chunk.len() > max {
            too_large = true;
            buf = Vec::new();
            held = None;
            continue;
        }
        budget.cover(&mut held, buf.len() + chunk.len())?;
        buf.extend_from_slice(&chunk);
    }
    if too_large {
        return Err(BadInput::TooLarge(max));
    }
    Ok((Bytes::from(buf), held))
}

fn validate_evictions(
    State(g): State<Arc<Guarded>>,
    req: Request,
) -> impl std::future::Future<Output = Response> {
    g.serve(req, |g, body| async move {
        match parse_eviction_review(&body) {
            Ok(review) => answer(g.app.webhooks.evictions(review).await),
            Err(e) => BadInput::Review(e).into_response(),
        }
    })
}

fn mutate_deployments(
    State(g): State<Arc<Guarded>>,
    req: Request,
) -> impl std::future::Future<Output = Response> {
    g.serve(req, |g, body| async move {
        match parse_deployment_review(&body) {
            Ok(review) => answer(g.app.webhooks.deployments(review).await),
            Err(e) => BadInput::Review(e).into_response(),
        }
    })
}

/// Ready once every watch cache has synced, and while none is stale; the
/// body names the stores that keep it from being ready.
async fn readyz(State(s): State<AppState>) -> Response {
    if s.draining.load(Ordering::Relaxed) {
        return (StatusCode::SERVICE_UNAVAILABLE, "shutting down\n").into_response();
    }
    let cache = &s.webhooks.cache;
    let unready = cache.unready();
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
    router_with_limits(state, request_timeout, Limits::default())
}

pub fn router_with_limits(state: AppState, request_timeout: Duration, limits: Limits) -> Router {
    let guarded = Guarded {
        in_flight: Quota::new(limits.max_in_flight),
        budget: BodyBudget(Quota::new(
            limits.max_body_bytes_in_flight.max(state.max_body),
        )),
        timeout: request_timeout,
        app: state.clone(),
    };
    // Health probes stay outside the in-flight limit: an overloaded replica
    // is not a dead one, and a failed liveness probe would restart it.
    let webhooks = Router::new()
        .route("/validate/evictions", post(validate_evictions))
        .route("/mutate/deployments", post(mutate_deployments))
        // One Arc: axum clones the state for every request.
        .with_state(Arc::new(guarded));
    Router::new()
        // Never depends on the apiserver: answers as soon as the listener is up.
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .fallback(|| async { json_error(StatusCode::NOT_FOUND, "no such endpoint") })
        .layer(middleware::from_fn(move |req: Request, next: Next| {
            within(request_timeout, next.run(req))
        }))
        .with_state(state)
        // Webhook bodies are limited by read_limited, per request. No
        // DefaultBodyLimit layer: the handlers take the raw `Request`, which
        // axum never limits, and a layer would box every route and insert
        // an extension (an allocation) into every request.
        .merge(webhooks)
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
///
/// Then closes the listener and shuts every open connection down gracefully
/// (HTTP/2 GOAWAY, HTTP/1 close after the response in progress), waiting up
/// to `timeout` (the request time limit) for requests in flight to finish:
/// returning earlier would end the process under them.
pub async fn serve(
    listener: TcpListener,
    tls: Arc<TlsSettings>,
    app: Router,
    timeout: Duration,
    shutdown: impl std::future::Future<Output = ()>,
) {
    serve_with_limits(listener, tls, app, timeout, Limits::default(), shutdown).await
}

/// [`serve`] with explicit [`Limits`] (tests and the HTTP fuzz driver use small ones).
pub async fn serve_with_limits(
    listener: TcpListener,
    tls: Arc<TlsSettings>,
    app: Router,
    timeout: Duration,
    limits: Limits,
    shutdown: impl std::future::Future<Output = ()>,
) {
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let mut shutdown = std::pin::pin!(shutdown);
    let (closing_tx, closing) = tokio::sync::watch::channel(false);
    let mut connections = tokio::task::JoinSet::new();
    loop {
        // Reap finished connections so the set does not grow.
        while connections.try_join_next().is_some() {}
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
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            tracing::debug!(%peer, "connection limit reached; closing the new connection");
            continue;
        };
        // The current configuration: a reloaded client CA applies from the next connection.
        let acceptor = TlsAcceptor::from(tls.current());
        // Small answers go out at once: with Nagle, a response split in two
        // writes waits for the peer's delayed ACK (40 ms, seen at p99.9).
        let _ = tcp.set_nodelay(true);
        let app = app.clone();
        let mut closing = closing.clone();
        connections.spawn(async move {
            let _slot = slot;
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
            // Marked only when a certificate was presented: the handler reads
            // a missing mark as none, and inserting the first extension
            // allocates, on every request of the connection.
            let app = tower::ServiceExt::map_request(app, move |mut req: Request<_>| {
                if presented {
                    req.extensions_mut().insert(ClientCert(true));
                }
                req
            });
            let activity = Activity::new();
            let a = activity.clone();
            let app = tower::ServiceExt::map_future(app, move |answer| {
                let held = a.enter();
                async move {
                    let r = answer.await;
                    drop(held);
                    r
                }
            });
            let svc = TowerToHyperService::new(app);
            let mut builder = auto::Builder::new(TokioExecutor::new());
            builder
                .http1()
                .timer(crate::header_timer::ConnTimer::new())
                .header_read_timeout(timeout)
                // Floor of hyper's buffer is 8 KiB; a longer head is answered 431.
                .max_buf_size(limits.max_header_bytes.max(8192));
            // hyper's own limit is 100 header fields, kept on the stack; a
            // limit set explicitly, even the same, costs a 100-entry copy per
            // request (1.3% of the eviction path's CPU in a profile).
            if limits.max_headers != HYPER_DEFAULT_MAX_HEADERS {
                builder.http1().max_headers(limits.max_headers);
            }
            builder
                .http2()
                .timer(TokioTimer::new())
                .max_concurrent_streams(limits.h2_max_streams)
                .max_header_list_size(u32::try_from(limits.max_header_bytes).unwrap_or(u32::MAX))
                // Rapid reset (CVE-2023-44487) and streams the server had to reset.
                .max_pending_accept_reset_streams(limits.h2_max_streams as usize)
                .max_local_error_reset_streams(Some(1024))
                // A peer that stops answering pings is gone: free its slot.
                .keep_alive_interval(Some(timeout))
                .keep_alive_timeout(timeout);
            let conn = builder.serve_connection(TokioIo::new(tls), svc);
            let mut conn = std::pin::pin!(conn);
            let result = tokio::select! {
                r = conn.as_mut() => r,
                // Also true at once for a connection accepted just before the shutdown.
                _ = async { closing.wait_for(|c| *c).await.map(|_| ()) } => {
                    conn.as_mut().graceful_shutdown();
                    conn.await
                }
                _ = idle_for(&activity, timeout, limits.idle) => {
                    tracing::debug!(%peer, "idle connection closed");
                    conn.as_mut().graceful_shutdown();
                    // A peer that never answers the GOAWAY is dropped.
                    tokio::time::timeout(timeout, conn).await.unwrap_or(Ok(()))
                }
            };
            if let Err(e) = result {
                tracing::debug!(%peer, error = %e, "connection ended with an error");
            }
        });
    }
    drop(listener);
    let open = connections.len();
    let _ = closing_tx.send(true);
    let drained = tokio::time::timeout(timeout, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    match drained {
        Ok(()) => tracing::info!(connections = open, "open connections drained"),
        Err(_) => tracing::warn!(
            left = connections.len(),
            "connections still open after the request timeout; closing them"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budget(bytes: usize) -> BodyBudget {
        BodyBudget(Quota::new(bytes))
    }

    /// A body in several chunks and of unknown length (like HTTP/1.1
    /// chunked encoding or several HTTP/2 DATA frames).
    fn chunked(parts: &[&'static [u8]]) -> Body {
        let chunks: Vec<Result<Bytes, std::io::Error>> =
            parts.iter().map(|p| Ok(Bytes::from_static(p))).collect();
        Body::from_stream(futures::stream::iter(chunks))
    }

    /// One chunk, its end known, its length not declared (an HTTP/2
    /// request without content-length in one DATA frame).
    struct Undeclared(Option<Bytes>);

    impl HttpBody for Undeclared {
        type Data = Bytes;
        type Error = std::io::Error;
        fn poll_frame(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, std::io::Error>>> {
            std::task::Poll::Ready(self.0.take().map(|b| Ok(hyper::body::Frame::data(b))))
        }
        fn is_end_stream(&self) -> bool {
            self.0.is_none()
        }
    }

    fn undeclared(b: &'static [u8]) -> Body {
        Body::new(Undeclared(Some(Bytes::from_static(b))))
    }

    async fn read(body: Body, max: usize, bytes: usize) -> Result<(Bytes, usize), BadInput> {
        let (got, held) = read_limited(body, max, &budget(bytes)).await?;
        Ok((got, held.map_or(0, |t| t.n)))
    }

    #[tokio::test]
    async fn a_body_in_one_chunk_is_kept_and_one_in_several_is_joined() {
        let one = Bytes::from_static(b"{\"one\":1}");
        let Ok((got, held)) = read(Body::from(one.clone()), 100, 100).await else {
            panic!("one chunk refused");
        };
        assert_eq!(got, one);
        assert_eq!(got.as_ptr(), one.as_ptr(), "kept, not copied");
        assert_eq!(held, one.len(), "its bytes are covered by the budget");
        let Ok((got, held)) = read(chunked(&[b"ab", b"cd", b"ef"]), 100, 100).await else {
            panic!("three chunks refused");
        };
        assert_eq!(&got[..], b"abcdef");
        assert_eq!(held, 6);
        let Ok((got, _)) = read(chunked(&[]), 100, 100).await else {
            panic!("no chunk refused");
        };
        assert!(got.is_empty());
        let Ok((got, held)) = read(undeclared(b"abcdef"), 100, 100).await else {
            panic!("one undeclared chunk refused");
        };
        assert_eq!((&got[..], held), (&b"abcdef"[..], 6));
    }

    #[test]
    fn a_quota_refuses_past_its_ceiling_and_gets_back_what_is_dropped() {
        let q = Quota::new(10);
        let used = || q.used.load(Ordering::Acquire);
        let a = q.try_take(6);
        assert!(a.is_some() && q.try_take(5).is_none(), "6 + 5 > 10");
        assert_eq!(used(), 6, "a refused take holds nothing");
        let b = BodyBudget(q.clone());
        let mut held = None;
        assert!(b.cover(&mut held, 3).is_ok() && b.cover(&mut held, 4).is_ok());
        assert_eq!((used(), held.as_ref().map(|t| t.n)), (10, Some(4)));
        assert!(matches!(b.cover(&mut held, 5), Err(BadInput::Busy)));
        drop(held);
        drop(a);
        assert_eq!(used(), 0, "all given back");
    }

    #[tokio::test]
    async fn a_body_past_the_limit_or_the_budget_is_refused() {
        // (size limit, budget, what is passed): 6 bytes each time.
        for (max, bytes, past) in [(5, 100, "the limit"), (100, 4, "the budget")] {
            for (body, what) in [
                (Body::from("abcdef"), "one chunk"),
                (chunked(&[b"abc", b"def"]), "two chunks"),
                (undeclared(b"abcdef"), "one undeclared chunk"),
            ] {
                let refused = match read(body, max, bytes).await {
                    Err(BadInput::TooLarge(m)) => max == 5 && m == 5,
                    Err(BadInput::Busy) => bytes == 4,
                    _ => false,
                };
                assert!(refused, "{what} past {past}");
            }
        }
    }
}
