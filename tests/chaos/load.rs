//! A steady admission load straight to the replicas' HTTPS ports, spread
//! like a Service would: round robin over the replicas whose /readyz
//! answered 200 at the last probe (every 250 ms).
//!
//! The client is kube's (hyper-util's pooled HTTP/1.1 client over rustls).
//! It reconnects when the server closed a kept-alive connection, and it
//! re-sends a request only when the pooled connection was found closed
//! before the request was written (as Go's client does); kube's own retry
//! of 429/503/504 answers is turned off. Every other
//! outcome counts as a failure: a TLS error, a refused or reset connection,
//! a timeout (5 s), a status other than 200, or an answer that is not an
//! allowed AdmissionReview with the request's uid.
//!
//! It runs on a runtime and thread of its own, so the test's blocking calls
//! (curl, kubectl, waiting for a process) never delay a request.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::{Request, Uri};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;

pub struct Target {
    pub port: u16,
    client: kube::Client,
    ready: AtomicBool,
    /// /readyz answered 503 "shutting down": readiness went false while
    /// the replica still served.
    pub saw_draining: AtomicBool,
    pub served: AtomicU64,
}

#[derive(Default)]
struct Counts {
    /// A probe has seen a replica ready: the load has begun (ticks before
    /// that are not counted as "no ready replica").
    begun: AtomicBool,
    sent: AtomicU64,
    ok: AtomicU64,
    no_ready_replica: AtomicU64,
    failures: Mutex<Vec<String>>,
}

pub struct Load {
    pub targets: Vec<Arc<Target>>,
    counts: Arc<Counts>,
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<()>,
}

#[derive(Debug)]
pub struct LoadStats {
    pub sent: u64,
    pub ok: u64,
    pub failures: Vec<String>,
    pub no_ready_replica: u64,
    pub per_target: Vec<u64>,
}

fn client(port: u16, ca_pem: &[u8]) -> kube::Client {
    let ca: Vec<Vec<u8>> = CertificateDer::pem_slice_iter(ca_pem)
        .map(|c| c.expect("CA PEM").to_vec())
        .collect();
    let uri: Uri = format!("https://127.0.0.1:{port}").parse().expect("uri");
    let mut cfg = kube::Config::new(uri);
    cfg.root_cert = Some(ca);
    cfg.connect_timeout = Some(Duration::from_secs(2));
    cfg.read_timeout = Some(Duration::from_secs(5));
    cfg.write_timeout = Some(Duration::from_secs(5));
    // kube retries 429/503/504 by default: every answer must count as it is.
    cfg.default_retry = false;
    kube::Client::try_from(cfg).expect("load client")
}

/// An AdmissionReview for the eviction of a pod no cache holds: allowed.
fn review(uid: &str) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "policy", "version": "v1", "kind": "Eviction"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "subResource": "eviction", "name": "load-pod", "namespace": "chaos-load-none",
            "operation": "CREATE", "userInfo": {"username": "load"},
            "object": {"apiVersion": "policy/v1", "kind": "Eviction",
                       "metadata": {"name": "load-pod", "namespace": "chaos-load-none"}},
            "dryRun": false
        }
    }))
    .expect("review json")
}

async fn send(t: &Target, uid: &str) -> Result<(), String> {
    let req = Request::post("/validate/evictions")
        .header("content-type", "application/json")
        .body(review(uid))
        .map_err(|e| e.to_string())?;
    let text = t.client.request_text(req).await.map_err(|e| {
        let mut s = e.to_string();
        let mut src = std::error::Error::source(&e);
        while let Some(x) = src {
            s.push_str(&format!(": {x}"));
            src = x.source();
        }
        s
    })?;
    let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| format!("{e}: {text}"))?;
    let r = &v["response"];
    if r["uid"] == uid && r["allowed"] == true {
        Ok(())
    } else {
        Err(format!("unexpected answer: {text}"))
    }
}

impl Load {
    /// `rate` requests per second in all, from `workers` concurrent senders.
    pub fn start(ports: &[u16], ca_pem: &[u8], rate: u32, workers: u32) -> Load {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("load runtime");
        let _enter = rt.enter();
        let targets: Vec<Arc<Target>> = ports
            .iter()
            .map(|&port| {
                Arc::new(Target {
                    port,
                    client: client(port, ca_pem),
                    ready: AtomicBool::new(false),
                    saw_draining: AtomicBool::new(false),
                    served: AtomicU64::new(0),
                })
            })
            .collect();
        let counts = Arc::new(Counts::default());
        let stop = Arc::new(AtomicBool::new(false));
        let mut tasks = Vec::new();
        // Readiness probes, with a client of their own.
        for t in &targets {
            let probe = client(t.port, ca_pem);
            let (t, stop, counts) = (t.clone(), stop.clone(), counts.clone());
            tasks.push(tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    let req = Request::get("/readyz").body(Vec::new()).expect("req");
                    let r = tokio::time::timeout(
                        Duration::from_secs(1),
                        probe.send(req.map(Into::into)),
                    )
                    .await;
                    let ready = match r {
                        Ok(Ok(resp)) => {
                            let code = resp.status().as_u16();
                            if code == 503 {
                                let body = probe_body(resp).await;
                                if body.contains("shutting down") {
                                    t.saw_draining.store(true, Ordering::Relaxed);
                                }
                            }
                            code == 200
                        }
                        _ => false,
                    };
                    t.ready.store(ready, Ordering::Relaxed);
                    if ready {
                        counts.begun.store(true, Ordering::Relaxed);
                    }
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
            }));
        }
        let period = Duration::from_secs_f64(f64::from(workers) / f64::from(rate));
        for w in 0..workers {
            let (targets, counts, stop) = (targets.clone(), counts.clone(), stop.clone());
            tasks.push(tokio::spawn(async move {
                let mut next = w as usize;
                let mut tick = tokio::time::interval(period);
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    tick.tick().await;
                    let ready: Vec<&Arc<Target>> = targets
                        .iter()
                        .filter(|t| t.ready.load(Ordering::Relaxed))
                        .collect();
                    if ready.is_empty() {
                        if counts.begun.load(Ordering::Relaxed) {
                            counts.no_ready_replica.fetch_add(1, Ordering::Relaxed);
                        }
                        continue;
                    }
                    next += 1;
                    let t = ready[next % ready.len()];
                    n += 1;
                    let uid = format!("load-{w}-{n}");
                    counts.sent.fetch_add(1, Ordering::Relaxed);
                    match send(t, &uid).await {
                        Ok(()) => {
                            counts.ok.fetch_add(1, Ordering::Relaxed);
                            t.served.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(e) => counts
                            .failures
                            .lock()
                            .expect("failures")
                            .push(format!("port {}: {e}", t.port)),
                    }
                }
            }));
        }
        let thread = std::thread::spawn(move || {
            rt.block_on(async move {
                for t in tasks {
                    let _ = t.await;
                }
            })
        });
        Load {
            targets,
            counts,
            stop,
            thread,
        }
    }

    pub fn sent(&self) -> u64 {
        self.counts.sent.load(Ordering::Relaxed)
    }

    pub async fn finish(self) -> LoadStats {
        self.stop.store(true, Ordering::Relaxed);
        let thread = self.thread;
        let _ = tokio::task::spawn_blocking(move || thread.join()).await;
        let c = &self.counts;
        LoadStats {
            sent: c.sent.load(Ordering::Relaxed),
            ok: c.ok.load(Ordering::Relaxed),
            failures: c.failures.lock().expect("failures").clone(),
            no_ready_replica: c.no_ready_replica.load(Ordering::Relaxed),
            per_target: self
                .targets
                .iter()
                .map(|t| t.served.load(Ordering::Relaxed))
                .collect(),
        }
    }
}

async fn probe_body(resp: axum::http::Response<kube::client::Body>) -> String {
    axum::body::to_bytes(axum::body::Body::new(resp.into_body()), 1 << 16)
        .await
        .map(|b| String::from_utf8_lossy(&b).to_string())
        .unwrap_or_default()
}
