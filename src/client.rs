//! Kubernetes clients (behaviour.md section 8: every API call has a timeout).
//! Two clients over one kubeconfig: watches stream for minutes and are
//! guarded by the watcher's own idle timeout, so only the client for
//! requests gets a read timeout; a hung request then fails instead of
//! stalling a controller pass or a Lease renewal.
//!
//! Both clients count the product's own API requests by verb, resource and
//! answer code ([`CountRequests`], `eviction_autoscaler_api_requests_total`),
//! so a benchmark can say how many writes a Deployment costs and whether a
//! steady cluster costs any. The layer sits outside kube's retry layer: one
//! API call counts once, with the code of its last attempt.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::http::{Method, Request, Response};
use kube::client::ClientBuilder;
use kube::{Client, Config};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use tower::{BoxError, Layer, Service};

use crate::metrics::ApiRequestLabels;

/// Connecting to the apiserver.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// One request, from the write to the last byte of the answer.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(15);
/// How long the apiserver keeps one watch open (`timeoutSeconds`); the
/// watcher then watches again from where it was. kube's default is 290 s,
/// and its client-side idle bound 5 s more: a watch on a connection that
/// died without a reset went unnoticed for 5 minutes, its cache fresh.
/// At 30 s one goes unnoticed for 35 s, then `WATCH_STALE_AFTER` counts;
/// the cost is one watch request per cache every 30 s, resumed from its
/// resourceVersion (no list).
pub const WATCH_SERVER_TIMEOUT_SECS: u32 = 30;
/// The watch client's read bound: no byte for this long fails the request.
/// Above the watch's own timeout (a quiet watch ends before it), and it
/// bounds what the watcher's list pages had no bound for: a list on a hung
/// connection waited for ever, its cache syncing or stale all that time.
pub const WATCH_READ_TIMEOUT: Duration = Duration::from_secs(45);

#[derive(Clone)]
pub struct Clients {
    /// Gets, lists, patches, creates, deletes: every call bounded.
    pub api: Client,
    /// Watches (reflectors).
    pub watch: Client,
}

/// Both clients from the in-cluster config, else `KUBECONFIG` / `~/.kube/config`.
pub async fn infer() -> Result<Clients, kube::Error> {
    let config = Config::infer().await.map_err(kube::Error::InferConfig)?;
    from_config(config, None)
}

/// [`infer`], with every request counted in `requests`.
pub async fn infer_counted(
    requests: &Family<ApiRequestLabels, Counter>,
) -> Result<Clients, kube::Error> {
    let config = Config::infer().await.map_err(kube::Error::InferConfig)?;
    from_config(config, Some(CountRequests::new(requests.clone())))
}

pub fn from_config(config: Config, count: Option<CountRequests>) -> Result<Clients, kube::Error> {
    let mut api = config.clone();
    api.connect_timeout = Some(CONNECT_TIMEOUT);
    api.read_timeout = Some(REQUEST_TIMEOUT);
    api.write_timeout = Some(REQUEST_TIMEOUT);
    // Count the read timeout from the request, not from when a pooled
    // connection went idle.
    api.reset_reader_on_write = true;
    // No retry inside a call: kube-client's (429/503/504, up to 15 attempts
    // with backoff to minutes) would outlast every caller's bound; each
    // caller retries with its own per-object backoff instead.
    api.default_retry = false;
    let mut watch = config;
    watch.connect_timeout = Some(CONNECT_TIMEOUT);
    watch.read_timeout = Some(WATCH_READ_TIMEOUT);
    watch.reset_reader_on_write = true;
    // The watcher backs off and retries by itself; kube-client's own retry of
    // 429/503/504 (up to 15 attempts, minutes) would hide a failing watch from
    // the cache's health tracking (behaviour.md 4.6).
    watch.default_retry = false;
    let build = |config: Config| -> Result<Client, kube::Error> {
        let builder = ClientBuilder::try_from(config)?;
        Ok(match &count {
            Some(layer) => builder.with_layer(layer).build(),
            None => builder.build(),
        })
    };
    Ok(Clients {
        api: build(api)?,
        watch: build(watch)?,
    })
}

/// A tower layer that counts every request by verb, resource and code.
#[derive(Clone)]
pub struct CountRequests {
    family: Family<ApiRequestLabels, Counter>,
}

impl CountRequests {
    pub fn new(family: Family<ApiRequestLabels, Counter>) -> Self {
        CountRequests { family }
    }
}

impl<S> Layer<S> for CountRequests {
    type Service = Counted<S>;
    fn layer(&self, inner: S) -> Counted<S> {
        Counted {
            inner,
            family: self.family.clone(),
        }
    }
}

#[derive(Clone)]
pub struct Counted<S> {
    inner: S,
    family: Family<ApiRequestLabels, Counter>,
}

impl<S, B, RB> Service<Request<B>> for Counted<S>
where
    S: Service<Request<B>, Response = Response<RB>>,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
{
    type Response = Response<RB>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Response<RB>, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let (verb, resource) = classify(req.method(), req.uri().path(), req.uri().query());
        let family = self.family.clone();
        let fut = self.inner.call(req);
        Box::pin(async move {
            // A watch answers its headers when it starts: counted then.
            let res = fut.await.map_err(Into::into);
            let code = match &res {
                Ok(r) => r.status().as_u16().to_string(),
                Err(e) if is_timeout(e.as_ref()) => "timeout".to_string(),
                Err(_) => "error".to_string(),
            };
            family
                .get_or_create(&ApiRequestLabels {
                    verb,
                    resource,
                    code,
                })
                .inc();
            res
        })
    }
}

/// The Kubernetes verb and resource (with subresource: `pods/eviction`) of
/// a request, from its method, path and query. Paths that name no resource
/// (`/version`, `/apis/keda.sh/v1alpha1`) are `discovery`.
pub fn classify(method: &Method, path: &str, query: Option<&str>) -> (&'static str, String) {
    let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let rest: &[&str] = match segs.first() {
        Some(&"api") => segs.get(2..).unwrap_or_default(),
        Some(&"apis") => segs.get(3..).unwrap_or_default(),
        _ => &[],
    };
    // `namespaces/<ns>/<resource>...` is a namespaced resource;
    // `namespaces` and `namespaces/<ns>` are the Namespace resource itself.
    let rest = match rest {
        ["namespaces", _, tail @ ..] if !tail.is_empty() => tail,
        other => other,
    };
    let (resource, collection) = match rest {
        [] => return (verb_of(method, query, false), "discovery".to_string()),
        [r] => (r.to_string(), true),
        [r, _name] => (r.to_string(), false),
        [r, _name, sub, ..] => (format!("{r}/{sub}"), false),
    };
    (verb_of(method, query, collection), resource)
}

fn verb_of(method: &Method, query: Option<&str>, collection: bool) -> &'static str {
    let watch = query.is_some_and(|q| q.split('&').any(|kv| kv == "watch=true" || kv == "watch=1"));
    match *method {
        Method::GET if watch => "watch",
        Method::GET if collection => "list",
        Method::GET => "get",
        Method::POST => "create",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE if collection => "deletecollection",
        Method::DELETE => "delete",
        Method::HEAD => "head",
        _ => "other",
    }
}

/// A read or connect timeout somewhere in the error's chain.
fn is_timeout(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur = Some(e);
    while let Some(err) = cur {
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            if io.kind() == std::io::ErrorKind::TimedOut {
                return true;
            }
        }
        if err.is::<tokio::time::error::Elapsed>() {
            return true;
        }
        cur = err.source();
    }
    false
}

/// What [`delete_ours`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Deleted {
    /// Deleted (or, in a dry run, would be).
    Done,
    /// Gone already, or another object holds the name now.
    Gone,
    /// Still there under its UID, but no longer ours (`ownedBy` removed or
    /// changed): a user took it over, and it is theirs to keep.
    HandedOver,
}

/// How many times [`delete_ours`] reads again after a write raced its delete.
const DELETE_ATTEMPTS: usize = 5;

/// The pause before the second read, doubled before each next one (50, 100,
/// 200, 400 ms): the disruption controller writes a PDB's status several
/// times while the pods of a Deployment just scaled back go, and reads
/// straight after each other all met a newer version (seen in uninstall
/// right after its revert).
const DELETE_PAUSE: std::time::Duration = std::time::Duration::from_millis(50);

/// Deletes the object of this UID only while it is still ours. The plan read
/// it from a cache; a user may have taken it over since (removed `ownedBy`),
/// and a UID precondition alone would delete it anyway. So it is read fresh,
/// checked, and deleted with that read's resourceVersion as precondition: a
/// write in between (a hand-over, or the disruption controller's status)
/// answers 409, and it is read again, up to [`DELETE_ATTEMPTS`] times; the
/// last 409 is returned, for the caller's backoff.
pub async fn delete_ours<K>(
    api: &kube::Api<K>,
    name: &str,
    uid: Option<&str>,
    dry_run: bool,
) -> Result<Deleted, kube::Error>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let mut last = None;
    for attempt in 0..DELETE_ATTEMPTS {
        if attempt > 0 {
            tokio::time::sleep(DELETE_PAUSE * (1 << (attempt - 1))).await;
        }
        let cur = match api.get(name).await {
            Ok(cur) => cur,
            Err(kube::Error::Api(s)) if s.code == 404 => return Ok(Deleted::Gone),
            Err(e) => return Err(e),
        };
        let meta = cur.meta();
        if uid.is_some() && meta.uid.as_deref() != uid {
            return Ok(Deleted::Gone);
        }
        if !crate::cache::owned_by_us(meta) {
            return Ok(Deleted::HandedOver);
        }
        let dp = kube::api::DeleteParams {
            dry_run,
            preconditions: Some(kube::api::Preconditions {
                uid: meta.uid.clone(),
                resource_version: meta.resource_version.clone(),
            }),
            ..Default::default()
        };
        match api.delete(name, &dp).await {
            Ok(_) => return Ok(Deleted::Done),
            Err(kube::Error::Api(s)) if s.code == 404 => return Ok(Deleted::Gone),
            Err(kube::Error::Api(s)) if s.code == 409 => last = Some(kube::Error::Api(s)),
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| api_status_error(409, "delete kept conflicting")))
}

/// A write refused because the object changed since it was read: a 409
/// Conflict, or a JSON patch `test` that failed (422 Invalid with no
/// causes). An admission webhook's or policy's refusal keeps whatever code
/// it gives (422 and 409 too) and says it denied the request: no re-read
/// makes that one pass, so it is not taken for a change (retried every few
/// seconds for as long as the policy stands, and logged as expected).
pub fn changed_since_read(s: &kube::core::Status) -> bool {
    let denied = s.message.contains("denied the request") || s.message.contains("denied request");
    !denied
        && (s.code == 409
            || (s.code == 422 && s.details.as_ref().is_none_or(|d| d.causes.is_empty())))
}

fn api_status_error(code: u16, message: &str) -> kube::Error {
    kube::Error::Api(Box::new(kube::core::Status {
        code,
        message: message.to_string(),
        ..Default::default()
    }))
}

/// An API error answer of this HTTP code, for the tests of what callers do
/// with one.
#[cfg(test)]
pub fn api_status(code: u16) -> kube::Error {
    api_status_error(code, &format!("code {code}"))
}

/// A scripted apiserver for the tests of callers' request sequences.
#[cfg(test)]
pub mod scripted {
    use std::collections::VecDeque;
    use std::sync::{Arc, Mutex};

    use axum::http::{Method, Request, Response};
    use kube::client::ClientBuilder;
    use kube::Client;
    use tower::BoxError;

    /// A scripted apiserver: answers in turn, and the requests it saw
    /// (method, and the body).
    #[derive(Clone, Default)]
    pub struct Script {
        answers: Arc<Mutex<VecDeque<(u16, String)>>>,
        pub seen: Arc<Mutex<Vec<(Method, String)>>>,
    }

    impl Script {
        pub fn new(answers: &[(u16, String)]) -> Self {
            let s = Script::default();
            s.answers.lock().unwrap().extend(answers.iter().cloned());
            s
        }

        pub fn client(&self) -> Client {
            let s = self.clone();
            let mock = tower::service_fn(move |req: Request<kube::client::Body>| {
                let s = s.clone();
                async move {
                    let method = req.method().clone();
                    let body = req.into_body().collect_bytes().await?;
                    s.seen
                        .lock()
                        .unwrap()
                        .push((method, String::from_utf8_lossy(&body).into_owned()));
                    let (code, body) = s.answers.lock().unwrap().pop_front().ok_or("unscripted")?;
                    Response::builder()
                        .status(code)
                        .body(kube::client::Body::from(body.into_bytes()))
                        .map_err(BoxError::from)
                }
            });
            ClientBuilder::new(mock, "default").build()
        }

        pub fn methods(&self) -> Vec<Method> {
            self.seen
                .lock()
                .unwrap()
                .iter()
                .map(|(m, _)| m.clone())
                .collect()
        }
    }

    /// A Status answer of this code, with the apiserver's reason for it.
    pub fn status(code: u16) -> (u16, String) {
        let reason = match code {
            404 => "NotFound",
            409 => "Conflict",
            _ => "InternalError",
        };
        let body = format!(
            r#"{{"kind":"Status","apiVersion":"v1","status":"Failure","message":"m","reason":"{reason}","code":{code}}}"#
        );
        (code, body)
    }
}

#[cfg(test)]
mod tests {
    use super::scripted::{status, Script};
    use super::*;
    use crate::metrics::Metrics;
    use k8s_openapi::api::core::v1::Pod;
    use k8s_openapi::api::policy::v1::PodDisruptionBudget;
    use kube::api::{EvictParams, ListParams, PostParams, WatchParams};
    use kube::Api;

    #[test]
    fn verbs_and_resources_from_requests() {
        let g = Method::GET;
        for (method, path, query, verb, resource) in [
            (&g, "/api/v1/pods", None, "list", "pods"),
            (&g, "/api/v1/pods", Some("watch=true&resourceVersion=5"), "watch", "pods"),
            (&g, "/api/v1/namespaces/ns/pods/p", None, "get", "pods"),
            (&Method::POST, "/api/v1/namespaces/ns/pods/p/eviction", None, "create", "pods/eviction"),
            (&g, "/api/v1/namespaces", None, "list", "namespaces"),
            (&g, "/api/v1/namespaces/ns", None, "get", "namespaces"),
            (&Method::POST, "/apis/policy/v1/namespaces/ns/poddisruptionbudgets", None, "create", "poddisruptionbudgets"),
            (&Method::PATCH, "/apis/apps/v1/namespaces/ns/deployments/web", None, "patch", "deployments"),
            (&Method::PUT, "/apis/coordination.k8s.io/v1/namespaces/ea/leases/ea", None, "update", "leases"),
            (&Method::PATCH, "/apis/eviction-autoscaler.azure.com/v1/namespaces/ns/evictionautoscalers/web/status", None, "patch", "evictionautoscalers/status"),
            (&Method::DELETE, "/apis/policy/v1/namespaces/ns/poddisruptionbudgets/web", None, "delete", "poddisruptionbudgets"),
            (&Method::DELETE, "/apis/policy/v1/namespaces/ns/poddisruptionbudgets", None, "deletecollection", "poddisruptionbudgets"),
            (&g, "/apis/keda.sh/v1alpha1", None, "get", "discovery"),
            (&g, "/version", None, "get", "discovery"),
        ] {
            assert_eq!(
                classify(method, path, query),
                (verb, resource.to_string()),
                "{method} {path}"
            );
        }
    }

    fn counted(
        metrics: &Metrics,
        answer: fn(&Request<kube::client::Body>) -> Result<u16, BoxError>,
    ) -> Client {
        let mock = tower::service_fn(move |req: Request<kube::client::Body>| async move {
            let code = answer(&req)?;
            let body = if code < 300 {
                br#"{"apiVersion":"v1","kind":"List","metadata":{},"items":[]}"#.to_vec()
            } else {
                br#"{"kind":"Status","apiVersion":"v1","status":"Failure","message":"no","reason":"TooManyRequests","code":429}"#.to_vec()
            };
            Response::builder()
                .status(code)
                .body(kube::client::Body::from(body))
                .map_err(BoxError::from)
        });
        ClientBuilder::new(mock, "default")
            .with_layer(&CountRequests::new(metrics.api_requests.clone()))
            .build()
    }

    fn count(m: &Metrics, verb: &'static str, resource: &str, code: &str) -> u64 {
        m.api_requests
            .get_or_create(&ApiRequestLabels {
                verb,
                resource: resource.into(),
                code: code.into(),
            })
            .get()
    }

    #[tokio::test]
    async fn every_request_is_counted_with_its_code() {
        let m = Metrics::new();
        let client = counted(&m, |req| {
            Ok(if req.method() == Method::POST {
                if req.uri().path().ends_with("eviction") {
                    429
                } else {
                    201
                }
            } else {
                200
            })
        });
        let pods: Api<Pod> = Api::namespaced(client.clone(), "ns");
        let pdbs: Api<PodDisruptionBudget> = Api::namespaced(client, "ns");
        let _ = pods.list(&ListParams::default()).await;
        let _ = pods.list(&ListParams::default()).await;
        let _ = pdbs
            .create(&PostParams::default(), &PodDisruptionBudget::default())
            .await;
        assert!(pods.evict("p", &EvictParams::default()).await.is_err());
        // A watch counts once, when the apiserver accepts it.
        let _ = pods.watch(&WatchParams::default(), "1").await;
        assert_eq!(count(&m, "list", "pods", "200"), 2);
        assert_eq!(count(&m, "create", "poddisruptionbudgets", "201"), 1);
        assert_eq!(count(&m, "create", "pods/eviction", "429"), 1);
        assert_eq!(count(&m, "watch", "pods", "200"), 1);
        let text = m.encode();
        assert!(
            text.contains(
                "eviction_autoscaler_api_requests_total{verb=\"create\",resource=\"poddisruptionbudgets\",code=\"201\"} 1"
            ),
            "{text}"
        );
    }

    #[tokio::test]
    async fn failures_and_timeouts_are_counted_apart() {
        let m = Metrics::new();
        let client = counted(&m, |req| {
            if req.uri().path().ends_with("/slow") {
                Err(Box::new(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "read timed out",
                )))
            } else {
                Err("connection refused".into())
            }
        });
        let pods: Api<Pod> = Api::namespaced(client, "ns");
        assert!(pods.get("slow").await.is_err());
        assert!(pods.get("other").await.is_err());
        assert_eq!(count(&m, "get", "pods", "timeout"), 1);
        assert_eq!(count(&m, "get", "pods", "error"), 1);
    }

    fn pdb_json(uid: &str, rv: &str, ours: bool) -> (u16, String) {
        let ann = if ours {
            format!(
                r#""annotations":{{"{}":"{}"}},"#,
                crate::names::OWNED_BY,
                crate::names::OWNED_BY_VALUE
            )
        } else {
            String::new()
        };
        let body = format!(
            r#"{{"apiVersion":"policy/v1","kind":"PodDisruptionBudget","metadata":{{"name":"web","namespace":"ns",{ann}"uid":"{uid}","resourceVersion":"{rv}"}}}}"#
        );
        (200, body)
    }

    async fn run(answers: &[(u16, String)]) -> (Result<Deleted, kube::Error>, Script) {
        let script = Script::new(answers);
        let api: Api<PodDisruptionBudget> = Api::namespaced(script.client(), "ns");
        let r = delete_ours(&api, "web", Some("u1"), false).await;
        (r, script)
    }

    #[tokio::test]
    async fn delete_ours_deletes_with_the_fresh_read_as_precondition() {
        let (r, s) = run(&[pdb_json("u1", "7", true), pdb_json("u1", "7", true)]).await;
        assert_eq!(r.ok(), Some(Deleted::Done));
        assert_eq!(s.methods(), vec![Method::GET, Method::DELETE]);
        let seen = s.seen.lock().unwrap();
        let body: serde_json::Value = serde_json::from_str(&seen[1].1).expect("delete body");
        assert_eq!(body["preconditions"]["uid"], "u1");
        assert_eq!(body["preconditions"]["resourceVersion"], "7");
    }

    #[tokio::test]
    async fn delete_ours_leaves_what_is_gone_replaced_or_handed_over() {
        let (r, s) = run(&[status(404)]).await;
        assert_eq!(r.ok(), Some(Deleted::Gone));
        assert_eq!(s.methods(), vec![Method::GET]);
        let (r, s) = run(&[pdb_json("u2", "7", true)]).await;
        assert_eq!(r.ok(), Some(Deleted::Gone), "another PDB under the name");
        assert_eq!(s.methods(), vec![Method::GET]);
        let (r, s) = run(&[pdb_json("u1", "8", false)]).await;
        assert_eq!(r.ok(), Some(Deleted::HandedOver));
        assert_eq!(s.methods(), vec![Method::GET]);
    }

    #[tokio::test]
    async fn a_write_between_read_and_delete_is_read_again() {
        // A status write lands first: read again, still ours, deleted.
        let (r, s) = run(&[
            pdb_json("u1", "7", true),
            status(409),
            pdb_json("u1", "8", true),
            pdb_json("u1", "8", true),
        ])
        .await;
        assert_eq!(r.ok(), Some(Deleted::Done));
        assert_eq!(s.methods().len(), 4);
        // A hand-over lands first: read again, kept.
        let (r, s) = run(&[
            pdb_json("u1", "7", true),
            status(409),
            pdb_json("u1", "8", false),
        ])
        .await;
        assert_eq!(r.ok(), Some(Deleted::HandedOver));
        assert_eq!(s.methods(), vec![Method::GET, Method::DELETE, Method::GET]);
        // Conflicts every time: given up after three, with the 409.
        let mut answers = Vec::new();
        for _ in 0..DELETE_ATTEMPTS {
            answers.extend([pdb_json("u1", "7", true), status(409)]);
        }
        let (r, s) = run(&answers).await;
        assert!(
            matches!(r, Err(kube::Error::Api(ref st)) if st.code == 409),
            "{r:?}"
        );
        assert_eq!(s.methods().len(), 2 * DELETE_ATTEMPTS);
    }

    /// A list on a connection whose peer never answers fails after the
    /// watch client's read bound (kube's watcher lists through it, with no
    /// bound of its own). Paused clock: the runtime moves it on while the
    /// client waits on the socket.
    #[tokio::test(start_paused = true)]
    async fn a_list_on_a_hung_connection_fails_after_the_read_bound() {
        let hole = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let url = format!("http://{}", hole.local_addr().expect("addr"));
        let held = tokio::spawn(async move {
            let mut conns = Vec::new();
            while let Ok((c, _)) = hole.accept().await {
                conns.push(c); // accepted, never answered
            }
        });
        let config = Config::new(url.parse().expect("url"));
        let clients = from_config(config, None).expect("clients");
        let pods: Api<Pod> = Api::namespaced(clients.watch, "ns");
        let started = tokio::time::Instant::now();
        let r =
            tokio::time::timeout(WATCH_READ_TIMEOUT * 2, pods.list(&ListParams::default())).await;
        let took = started.elapsed();
        held.abort();
        let r = r.expect("the list ended within twice the read bound");
        assert!(r.is_err(), "{r:?}");
        assert!(took >= WATCH_READ_TIMEOUT, "{took:?}");
    }
}
