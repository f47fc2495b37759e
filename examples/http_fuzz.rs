//! HTTP-layer fuzz driver (`make fuzz`; stable Rust): the real server
//! (axum router, limits, hyper, rustls) runs in-process over the fuzz
//! harness's handlers, and this throws at it mutated AdmissionReviews over
//! HTTP/2 and HTTP/1.1, garbage request heads, garbage HTTP/2 frames,
//! plaintext bytes, slow bodies, slow heads, oversized heads, 1,000
//! concurrent streams, rapid resets and a connection flood.
//!
//! Every request or connection is bounded by a deadline (request timeout +
//! 3 s); one that outlives it is a hang. A panic anywhere is a crash. The
//! process's resident memory is sampled throughout. Exit status 1 on any
//! crash, hang, 5xx other than 503, or memory growth past 64 MiB.
//!
//! HTTP_FUZZ_INPUTS (default 40000) sets the mutated-body count, the other
//! scenarios scale from it; HTTP_FUZZ_SEED (default 1) the random seed.

#[path = "../fuzz/src/harness.rs"]
#[allow(dead_code)]
mod harness;
#[path = "../fuzz/src/http_kit.rs"]
#[allow(dead_code)]
mod http_kit;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::http::{Method, Request};
use eviction_autoscaler::server::Limits;
use http_kit::{h1, read_status, rss_kib, Running};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const TIMEOUT: Duration = Duration::from_secs(3);
const DEADLINE: Duration = Duration::from_secs(6);

static PANICS: AtomicUsize = AtomicUsize::new(0);
static PEAK_RSS: AtomicU64 = AtomicU64::new(0);

/// xorshift64*: reproducible from the seed, no dependency.
#[derive(Clone)]
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

const TOKENS: &[&[u8]] = &[
    b"{",
    b"}",
    b"[",
    b"]",
    b"\"",
    b",",
    b":",
    b"null",
    b"true",
    b"-1",
    b"1e999",
    b"18446744073709551616",
    b"\"\\u0000\"",
    b"\"\\ud800\"",
    b"\"CREATE\"",
    b"\"eviction\"",
    b"\"pods\"",
    b"\"admission.k8s.io/v1\"",
    b"\"AdmissionReview\"",
    b"\xff\xfe",
];

fn mutate(base: &[u8], rng: &mut Rng) -> Vec<u8> {
    let mut b = base.to_vec();
    for _ in 0..1 + rng.below(4) {
        let at = rng.below(b.len() + 1);
        match rng.below(7) {
            0 if !b.is_empty() => {
                let i = rng.below(b.len());
                b[i] ^= 1 << rng.below(8);
            }
            1 => {
                let t = TOKENS[rng.below(TOKENS.len())];
                b.splice(at..at, t.iter().copied());
            }
            2 if !b.is_empty() => {
                let end = (at + rng.below(32)).min(b.len());
                b.drain(at.min(end)..end);
            }
            3 => b.truncate(at),
            4 => {
                let end = (at + rng.below(64)).min(b.len());
                let chunk = b[at.min(end)..end].to_vec();
                b.splice(at..at, chunk);
            }
            5 => {
                // Deep nesting: serde_json's recursion limit must hold.
                let depth = rng.below(5000);
                let mut nest = vec![b'['; depth];
                nest.extend(vec![b']'; depth]);
                b.splice(at..at, nest);
            }
            _ => {
                let n = 1 + rng.below(8);
                let r = rng.bytes(n);
                b.splice(at..at, r);
            }
        }
    }
    b
}

fn bases() -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for ns in harness::NAMESPACES {
        for pod in harness::PODS {
            out.push(
                harness::eviction_review("u", ns, pod, false)
                    .to_string()
                    .into_bytes(),
            );
        }
        let dep = serde_json::json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "new"},
            "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "new"}},
                     "template": {"metadata": {"labels": {"app": "new"}}}}});
        out.push(
            harness::deployment_review("u", ns, dep, false)
                .to_string()
                .into_bytes(),
        );
    }
    out.push(b"{}".to_vec());
    out
}

const PATHS: &[&str] = &[
    "/validate/evictions",
    "/validate/evictions",
    "/mutate/deployments",
    "/mutate/deployments",
    "/healthz",
    "/readyz",
    "/metrics",
    "/nope",
];

#[derive(Default)]
struct Tally {
    inputs: AtomicUsize,
    hangs: AtomicUsize,
    statuses: Mutex<BTreeMap<String, usize>>,
}

impl Tally {
    fn status(&self, s: impl Into<String>) {
        self.inputs.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut m) = self.statuses.lock() {
            *m.entry(s.into()).or_default() += 1;
        }
    }
    fn hang(&self, what: &str) {
        self.inputs.fetch_add(1, Ordering::Relaxed);
        self.hangs.fetch_add(1, Ordering::Relaxed);
        eprintln!("HANG: {what}");
    }
    fn bad_5xx(&self) -> usize {
        self.statuses.lock().map_or(0, |m| {
            m.iter()
                .filter(|(k, _)| k.starts_with('5') && !k.starts_with("503"))
                .map(|(_, v)| *v)
                .sum()
        })
    }
}

async fn bounded<T>(t: &Tally, what: &str, f: impl std::future::Future<Output = T>) -> Option<T> {
    match tokio::time::timeout(DEADLINE, f).await {
        Ok(v) => Some(v),
        Err(_) => {
            t.hang(what);
            None
        }
    }
}

/// Waits for a free stream slot (the client queues past the server's
/// max concurrent streams): up to a minute, which is not a server hang yet.
async fn h2_ready(
    t: &Tally,
    send: &h2::client::SendRequest<Bytes>,
) -> Option<h2::client::SendRequest<Bytes>> {
    match tokio::time::timeout(Duration::from_secs(60), send.clone().ready()).await {
        Ok(Ok(s)) => Some(s),
        Ok(Err(_)) => {
            t.status("h2-error");
            None
        }
        Err(_) => {
            t.hang("no HTTP/2 stream slot for a minute");
            None
        }
    }
}

/// Sends one request on a ready HTTP/2 connection and reads the whole answer.
async fn h2_request(
    send: &h2::client::SendRequest<Bytes>,
    method: Method,
    path: &str,
    body: Bytes,
    extra: Option<(&str, String)>,
) -> Result<Answer, String> {
    let mut b = Request::builder()
        .method(method)
        .uri(format!("https://localhost{path}"))
        .header("content-type", "application/json");
    if let Some((k, v)) = extra {
        b = b.header(k, v);
    }
    if !body.is_empty() {
        // As the apiserver's Go client sends it.
        b = b.header("content-length", body.len());
    }
    let req = b.body(()).map_err(|e| e.to_string())?;
    let mut send = send.clone();
    let (resp, mut stream) = send
        .send_request(req, body.is_empty())
        .map_err(|e| e.to_string())?;
    if !body.is_empty() {
        stream.send_data(body, true).map_err(|e| e.to_string())?;
    }
    let resp = resp.await.map_err(|e| e.to_string())?;
    let status = resp.status().as_u16();
    let mut body = resp.into_body();
    let mut text = Vec::new();
    while let Some(chunk) = body.data().await {
        let chunk = chunk.map_err(|e| e.to_string())?;
        let _ = body.flow_control().release_capacity(chunk.len());
        if text.len() < 256 {
            text.extend_from_slice(&chunk);
        }
    }
    Ok(Answer {
        status,
        text: String::from_utf8_lossy(&text).to_string(),
    })
}

struct Answer {
    status: u16,
    text: String,
}

impl Answer {
    /// The status, and for a 503 which limit answered.
    fn label(&self) -> String {
        match self.status {
            503 if self.text.contains("in flight") => "503 busy".into(),
            503 if self.text.contains("timed out") => "503 timed out".into(),
            s => s.to_string(),
        }
    }
}

/// Mutated bodies on random paths over HTTP/2, `conns` connections of 64 concurrent streams.
async fn mutated_h2(run: &Running, t: &Arc<Tally>, n: usize, seed: u64) {
    let bases = Arc::new(bases());
    let conns = 4;
    let mut tasks = Vec::new();
    for c in 0..conns {
        let Ok(send) = run.h2().await else {
            t.status("connect-failed");
            continue;
        };
        for w in 0..32 {
            let (t, bases, send) = (t.clone(), bases.clone(), send.clone());
            let mut rng = Rng(seed ^ ((c * 1000 + w + 1) as u64 * 0x9E37_79B9));
            let per = n / (conns * 32);
            tasks.push(tokio::spawn(async move {
                for _ in 0..per {
                    let base = &bases[rng.below(bases.len())];
                    let body = if rng.below(10) == 0 {
                        base.clone()
                    } else {
                        mutate(base, &mut rng)
                    };
                    let path = PATHS[rng.below(PATHS.len())];
                    let method = if rng.below(8) == 0 {
                        Method::GET
                    } else {
                        Method::POST
                    };
                    match bounded(
                        &t,
                        "h2 mutated body",
                        h2_request(&send, method, path, Bytes::from(body), None),
                    )
                    .await
                    {
                        Some(Ok(a)) => t.status(a.label()),
                        Some(Err(_)) => t.status("h2-error"),
                        None => {}
                    }
                }
            }));
        }
    }
    for task in tasks {
        let _ = task.await;
    }
}

/// Mutated bodies and garbage heads over HTTP/1.1, a fresh connection each.
async fn mutated_h1(run: &Arc<Running>, t: &Arc<Tally>, n: usize, seed: u64) {
    let bases = Arc::new(bases());
    let mut tasks = Vec::new();
    for w in 0..8u64 {
        let (t, bases, run) = (t.clone(), bases.clone(), run.clone());
        let mut rng = Rng(seed ^ ((w + 7) * 0x1234_5678_9ABC));
        tasks.push(tokio::spawn(async move {
            for _ in 0..n / 8 {
                let base = &bases[rng.below(bases.len())];
                let path = PATHS[rng.below(PATHS.len())];
                let head = if rng.below(3) == 0 {
                    // A garbage request line and headers for hyper's parser.
                    let mut h = mutate(
                        format!("POST {path} HTTP/1.1\r\nhost: x\r\nx-a: b").as_bytes(),
                        &mut rng,
                    );
                    h.retain(|c| *c != 0);
                    String::from_utf8_lossy(&h).to_string()
                } else {
                    format!("POST {path} HTTP/1.1\r\nhost: x\r\nconnection: close")
                };
                let body = mutate(base, &mut rng);
                match bounded(&t, "h1 request", h1(&run, &head, &body)).await {
                    Some(Ok(Some(s))) => t.status(s.to_string()),
                    Some(Ok(None)) => t.status("closed"),
                    Some(Err(_)) => t.status("io-error"),
                    None => {}
                }
            }
        }));
    }
    for task in tasks {
        let _ = task.await;
    }
}

/// After the HTTP/2 preface: random bytes, some shaped like frame headers.
async fn garbage_h2_frames(run: &Running, t: &Tally, n: usize, seed: u64) {
    let mut rng = Rng(seed ^ 0xF00D);
    for _ in 0..n {
        let r = bounded(t, "garbage h2 frames", async {
            let mut s = run.tls_h2().await?;
            let mut out = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
            for _ in 0..1 + rng.below(6) {
                let len = rng.below(64);
                if rng.below(2) == 0 {
                    // length (3), type, flags, stream id (4), payload
                    out.extend_from_slice(&(len as u32).to_be_bytes()[1..]);
                    out.push(rng.below(12) as u8);
                    out.push(rng.next() as u8);
                    out.extend_from_slice(&(rng.next() as u32 & 0x7fff_ffff).to_be_bytes());
                }
                out.extend(rng.bytes(len));
            }
            s.write_all(&out).await?;
            // Our side ends: the server must close too, whatever it made of the bytes.
            s.shutdown().await?;
            let mut sink = [0u8; 4096];
            while s.read(&mut sink).await? > 0 {}
            Ok::<_, std::io::Error>(())
        })
        .await;
        match r {
            Some(Ok(())) => t.status("closed"),
            Some(Err(_)) => t.status("io-error"),
            None => {}
        }
    }
}

/// Plaintext random bytes where a TLS ClientHello belongs.
async fn plaintext(run: &Running, t: &Tally, n: usize, seed: u64) {
    let mut rng = Rng(seed ^ 0xBEEF);
    for i in 0..n {
        let r = bounded(t, "plaintext bytes", async {
            let mut s = TcpStream::connect(run.addr).await?;
            let bytes = if i % 2 == 0 {
                b"POST /validate/evictions HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\n\r\n{}"
                    .to_vec()
            } else {
                {
                    let n = 1 + rng.below(512);
                    rng.bytes(n)
                }
            };
            s.write_all(&bytes).await?;
            let mut sink = [0u8; 1024];
            let mut got = Vec::new();
            loop {
                let k = s.read(&mut sink).await?;
                if k == 0 {
                    break;
                }
                got.extend_from_slice(&sink[..k]);
            }
            Ok::<_, std::io::Error>(got)
        })
        .await;
        match r {
            // Never an HTTP answer in plaintext.
            Some(Ok(got)) if got.starts_with(b"HTTP/") => t.status("plaintext-answered"),
            Some(Ok(_)) => t.status("closed"),
            Some(Err(_)) => t.status("io-error"),
            None => {}
        }
    }
}

/// Slow bodies on more connections than the in-flight limit: each ends by
/// the request timeout, and meanwhile new webhook requests get 503 at once.
async fn slow_bodies(run: &Arc<Running>, t: &Arc<Tally>, limits: Limits) -> (usize, usize) {
    let mut tasks = Vec::new();
    for _ in 0..limits.max_in_flight + 16 {
        let (run, t) = (run.clone(), t.clone());
        tasks.push(tokio::spawn(async move {
            let r = bounded(&t, "slow body", async {
                let s = run.tls().await?;
                let (mut rd, mut wr) = tokio::io::split(s);
                wr.write_all(b"POST /validate/evictions HTTP/1.1\r\nhost: x\r\ncontent-length: 1000\r\n\r\n{")
                    .await?;
                let trickle = async {
                    loop {
                        tokio::time::sleep(Duration::from_millis(250)).await;
                        if wr.write_all(b" ").await.is_err() {
                            break;
                        }
                    }
                };
                // Ends with the server's answer (or close), else it hangs.
                tokio::select! {
                    status = read_status(&mut rd) => Ok::<_, std::io::Error>(Some(status.ok().flatten().unwrap_or(1))),
                    _ = trickle => Ok(Some(1)),
                    _ = tokio::time::sleep(TIMEOUT + Duration::from_secs(2)) => Ok(Some(0u16)),
                }
            })
            .await;
            match r {
                Some(Ok(Some(0))) => t.hang("slow body not ended by the request timeout"),
                Some(_) => t.status("slow-body-ended"),
                None => {}
            }
        }));
    }
    // While they hold every permit: new webhook requests are turned away.
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let (mut busy, mut other) = (0, 0);
    for _ in 0..20 {
        let body = harness::eviction_review("u", "ns", "web-0", false).to_string();
        match bounded(
            t,
            "request during slow bodies",
            h1(
                run,
                "POST /validate/evictions HTTP/1.1\r\nhost: x",
                body.as_bytes(),
            ),
        )
        .await
        {
            Some(Ok(Some(503))) => busy += 1,
            _ => other += 1,
        }
        t.inputs.fetch_add(1, Ordering::Relaxed);
    }
    for task in tasks {
        let _ = task.await;
    }
    (busy, other)
}

/// Request heads sent one byte at a time: closed by the header read timeout.
async fn slow_heads(run: &Arc<Running>, t: &Arc<Tally>, n: usize) {
    let mut tasks = Vec::new();
    for _ in 0..n {
        let (run, t) = (run.clone(), t.clone());
        tasks.push(tokio::spawn(async move {
            let r = bounded(&t, "slow head", async {
                let mut s = run.tls().await?;
                for b in b"POST /validate/evictions HTTP/1.1\r\nhost: x\r\nx-slow: "
                    .iter()
                    .cycle()
                {
                    if s.write_all(&[*b]).await.is_err() {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Ok::<_, std::io::Error>(())
            })
            .await;
            if r.is_some() {
                t.status("slow-head-closed");
            }
        }));
    }
    for task in tasks {
        let _ = task.await;
    }
}

/// Heads past the limits: HTTP/1 431; HTTP/2 refused; the server goes on.
async fn oversized_heads(run: &Arc<Running>, t: &Tally) -> Vec<String> {
    let mut out = Vec::new();
    let big = "a".repeat(100 * 1024);
    let r = bounded(
        t,
        "h1 big header",
        h1(
            run,
            &format!("GET /healthz HTTP/1.1\r\nhost: x\r\nx-big: {big}"),
            b"",
        ),
    )
    .await;
    out.push(format!("h1 100 KiB header: {r:?}"));
    t.status(format!("{r:?}"));
    let many: String = (0..200).map(|i| format!("\r\nx-h{i}: v")).collect();
    let r = bounded(
        t,
        "h1 many headers",
        h1(run, &format!("GET /healthz HTTP/1.1\r\nhost: x{many}"), b""),
    )
    .await;
    out.push(format!("h1 200 headers: {r:?}"));
    t.status(format!("{r:?}"));
    let r = bounded(t, "h2 big header", async {
        let send = run.h2().await?;
        h2_request(
            &send,
            Method::GET,
            "/healthz",
            Bytes::new(),
            Some(("x-big", big.clone())),
        )
        .await
    })
    .await;
    let r = r.map(|a| a.map(|a| a.status));
    out.push(format!("h2 100 KiB header: {r:?}"));
    t.status("h2-big-header");
    out
}

/// A valid HTTP/2 preface and SETTINGS, then silence (pings unanswered):
/// the server's keep-alive closes it within two request timeouts.
async fn silent_h2(run: &Running, t: &Tally) -> Option<f64> {
    let started = Instant::now();
    let r = tokio::time::timeout(Duration::from_secs(15), async {
        let mut s = run.tls_h2().await?;
        s.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00")
            .await?;
        let mut sink = [0u8; 4096];
        while s.read(&mut sink).await? > 0 {}
        Ok::<_, std::io::Error>(())
    })
    .await;
    if r.is_err() {
        t.hang("silent HTTP/2 connection never closed");
        return None;
    }
    t.status("silent-h2-closed");
    Some(started.elapsed().as_secs_f64())
}

/// Bodies of the largest accepted size, more at once than the in-flight
/// limit, on three connections: memory stays bounded, and past the limit 503.
async fn big_bodies(run: &Running, t: &Arc<Tally>, limits: Limits) -> BTreeMap<String, usize> {
    let pad = "x".repeat(3 * 1024 * 1024 - 2048);
    let mut review = harness::eviction_review("big", "ns", "web-0", true);
    review["request"]["object"]["metadata"]["annotations"] = serde_json::json!({"pad": pad});
    let body = Bytes::from(review.to_string().into_bytes());
    let mut tasks = Vec::new();
    for _ in 0..3 {
        let Ok(send) = run.h2().await else { continue };
        for _ in 0..(limits.max_in_flight + 16) / 3 {
            let (send, t, body) = (send.clone(), t.clone(), body.clone());
            tasks.push(tokio::spawn(async move {
                let send = h2_ready(&t, &send).await?;
                let r = bounded(
                    &t,
                    "big body",
                    h2_request(&send, Method::POST, "/validate/evictions", body, None),
                )
                .await;
                let s = match r {
                    Some(Ok(a)) => a.label(),
                    Some(Err(_)) => "h2-error".to_string(),
                    None => return None,
                };
                t.status(s.clone());
                Some(s)
            }));
        }
    }
    let mut out = BTreeMap::new();
    for task in tasks {
        if let Ok(Some(s)) = task.await {
            *out.entry(s).or_default() += 1;
        }
    }
    out
}

/// 1,000 requests at once on one HTTP/2 connection.
async fn many_streams(run: &Running, t: &Arc<Tally>) -> (usize, usize, usize) {
    let Ok(send) = run.h2().await else {
        t.status("connect-failed");
        return (0, 0, 0);
    };
    let mut tasks = Vec::new();
    for i in 0..1000 {
        let (send, t) = (send.clone(), t.clone());
        tasks.push(tokio::spawn(async move {
            let body = harness::eviction_review(&format!("u{i}"), "ns", harness::PODS[i % 8], true)
                .to_string()
                .into_bytes();
            let send = h2_ready(&t, &send).await?;
            match bounded(
                &t,
                "one of 1000 streams",
                h2_request(
                    &send,
                    Method::POST,
                    "/validate/evictions",
                    Bytes::from(body),
                    None,
                ),
            )
            .await
            {
                Some(Ok(a)) => {
                    t.status(a.label());
                    Some(a.status == 200)
                }
                _ => Some(false),
            }
        }));
    }
    let mut ok = 0;
    for task in tasks {
        ok += usize::from(task.await.ok().flatten().unwrap_or(false));
    }
    (ok, 1000, send.current_max_send_streams())
}

/// Streams opened and cancelled at once (HTTP/2 rapid reset).
async fn rapid_reset(run: &Running, t: &Tally, n: usize) -> String {
    let r = bounded(t, "rapid reset", async {
        let Ok(send) = run.h2().await else {
            return "connect failed".to_string();
        };
        let mut sent = 0;
        for _ in 0..n {
            let Ok(mut s) = send.clone().ready().await else {
                break;
            };
            let req = Request::post("https://localhost/validate/evictions")
                .body(())
                .map_err(|e| e.to_string());
            let Ok(req) = req else { break };
            match s.send_request(req, false) {
                Ok((resp, mut stream)) => {
                    stream.send_reset(h2::Reason::CANCEL);
                    drop(resp);
                    sent += 1;
                }
                Err(_) => break,
            }
        }
        format!("{sent} of {n} streams opened and reset before the connection ended")
    })
    .await;
    t.inputs.fetch_add(n, Ordering::Relaxed);
    r.unwrap_or_else(|| "hung".into())
}

/// More idle TCP connections than the limit: the extra ones are closed at
/// once, the rest by the handshake timeout.
async fn connection_flood(run: &Running, t: &Tally, limits: Limits) -> (usize, usize) {
    let mut conns = Vec::new();
    for _ in 0..limits.max_connections + 64 {
        if let Ok(c) = TcpStream::connect(run.addr).await {
            conns.push(c);
        }
    }
    let started = Instant::now();
    let mut closed_fast = 0;
    let mut tasks = Vec::new();
    for mut c in conns {
        tasks.push(tokio::spawn(async move {
            let mut b = [0u8; 16];
            let r = tokio::time::timeout(DEADLINE, c.read(&mut b)).await;
            (r.is_ok(), started.elapsed())
        }));
    }
    let mut hung = 0;
    for task in tasks {
        match task.await {
            Ok((true, took)) if took < Duration::from_secs(1) => closed_fast += 1,
            Ok((true, _)) => {}
            _ => hung += 1,
        }
        t.inputs.fetch_add(1, Ordering::Relaxed);
    }
    for _ in 0..hung {
        t.hang("idle connection not closed");
    }
    (closed_fast, hung)
}

async fn healthz(run: &Running) -> Option<u16> {
    h1(run, "GET /healthz HTTP/1.1\r\nhost: x", b"")
        .await
        .ok()
        .flatten()
}

fn main() -> std::process::ExitCode {
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        PANICS.fetch_add(1, Ordering::Relaxed);
        default_hook(info);
    }));
    let inputs: usize = std::env::var("HTTP_FUZZ_INPUTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(40_000);
    let seed: u64 = std::env::var("HTTP_FUZZ_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    rt.block_on(async move {
        // Defaults, except fewer connections so the flood fits the fd limit.
        let limits = Limits { max_connections: 256, ..Limits::default() };
        let run = Arc::new(http_kit::start(limits, TIMEOUT).await);
        let sampler = tokio::spawn(async {
            loop {
                PEAK_RSS.fetch_max(rss_kib(), Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        });
        let t = Arc::new(Tally::default());
        let started = Instant::now();
        // Warm-up, then the baseline.
        mutated_h2(&run, &t, 2_000, seed ^ 99).await;
        let base_rss = rss_kib();
        let mut report = Vec::new();
        let step = |name: &str, t: &Tally, since: Instant, before: usize| {
            format!("{name}: {} inputs in {:.1}s", t.inputs.load(Ordering::Relaxed) - before, since.elapsed().as_secs_f64())
        };
        let (s, b) = (Instant::now(), t.inputs.load(Ordering::Relaxed));
        mutated_h2(&run, &t, inputs, seed).await;
        report.push(step("mutated bodies over HTTP/2 (128 concurrent streams)", &t, s, b));
        let (s, b) = (Instant::now(), t.inputs.load(Ordering::Relaxed));
        mutated_h1(&run, &t, inputs / 10, seed).await;
        report.push(step("mutated bodies and garbage heads over HTTP/1.1", &t, s, b));
        let (s, b) = (Instant::now(), t.inputs.load(Ordering::Relaxed));
        garbage_h2_frames(&run, &t, inputs / 40, seed).await;
        report.push(step("garbage HTTP/2 frames after the preface", &t, s, b));
        let (s, b) = (Instant::now(), t.inputs.load(Ordering::Relaxed));
        plaintext(&run, &t, inputs / 100, seed).await;
        report.push(step("plaintext HTTP and random bytes instead of TLS", &t, s, b));
        let (s, b) = (Instant::now(), t.inputs.load(Ordering::Relaxed));
        let (busy, other) = slow_bodies(&run, &t, limits).await;
        report.push(format!("{}; during them {busy} of 20 new webhook requests got 503 at once ({other} other)", step(&format!("slow bodies on {} connections", limits.max_in_flight + 16), &t, s, b)));
        let (s, b) = (Instant::now(), t.inputs.load(Ordering::Relaxed));
        slow_heads(&run, &t, 64).await;
        report.push(step("slow request heads (64 connections)", &t, s, b));
        let (s, b) = (Instant::now(), t.inputs.load(Ordering::Relaxed));
        let heads = oversized_heads(&run, &t).await;
        report.push(format!("{}: {}", step("oversized heads", &t, s, b), heads.join("; ")));
        let (s, b) = (Instant::now(), t.inputs.load(Ordering::Relaxed));
        let silent = silent_h2(&run, &t).await;
        report.push(format!("{}: closed after {silent:?} s", step("silent HTTP/2 connection", &t, s, b)));
        let (s, b) = (Instant::now(), t.inputs.load(Ordering::Relaxed));
        let rss_before_big = rss_kib();
        let big = big_bodies(&run, &t, limits).await;
        let rss_big = PEAK_RSS.load(Ordering::Relaxed);
        report.push(format!("{}: {big:?}; RSS {} MiB before, peak so far {} MiB", step(&format!("{} bodies of 3 MiB at once", (limits.max_in_flight + 16) / 3 * 3), &t, s, b), rss_before_big / 1024, rss_big / 1024));
        let (s, b) = (Instant::now(), t.inputs.load(Ordering::Relaxed));
        let (ok, total, max_streams) = many_streams(&run, &t).await;
        report.push(format!("{}: {ok} of {total} answered 200; server's max concurrent streams {max_streams}", step("1000 concurrent streams on one connection", &t, s, b)));
        let (s, b) = (Instant::now(), t.inputs.load(Ordering::Relaxed));
        let rr = rapid_reset(&run, &t, 10_000).await;
        report.push(format!("{}: {rr}", step("rapid reset", &t, s, b)));
        let (s, b) = (Instant::now(), t.inputs.load(Ordering::Relaxed));
        let (fast, hung) = connection_flood(&run, &t, limits).await;
        report.push(format!("{}: {fast} closed within 1s (over the limit of {}), {hung} never closed", step(&format!("connection flood ({} idle TCP connections)", limits.max_connections + 64), &t, s, b), limits.max_connections));
        tokio::time::sleep(Duration::from_secs(1)).await;
        let alive = healthz(&run).await;
        let end_rss = rss_kib();
        sampler.abort();
        let peak = PEAK_RSS.load(Ordering::Relaxed);
        for line in &report {
            println!("http_fuzz: {line}");
        }
        let statuses = t.statuses.lock().map(|m| format!("{m:?}")).unwrap_or_default();
        let total = t.inputs.load(Ordering::Relaxed);
        let hangs = t.hangs.load(Ordering::Relaxed);
        let panics = PANICS.load(Ordering::Relaxed);
        let bad = t.bad_5xx();
        let plaintext_answered = t.statuses.lock().map_or(0, |m| m.get("plaintext-answered").copied().unwrap_or(0));
        println!("http_fuzz: outcomes {statuses}");
        println!(
            "http_fuzz: {total} inputs in {:.1}s, seed {seed}: {panics} panics, {hangs} hangs, {bad} 5xx other than 503; \
             RSS baseline {} MiB, peak {} MiB, end {} MiB; /healthz after: {alive:?}",
            started.elapsed().as_secs_f64(),
            base_rss / 1024,
            peak / 1024,
            end_rss / 1024
        );
        let grew = end_rss.saturating_sub(base_rss);
        let mut failed = Vec::new();
        if panics > 0 { failed.push("panics"); }
        if hangs > 0 { failed.push("hangs"); }
        if bad > 0 { failed.push("5xx other than 503"); }
        if plaintext_answered > 0 { failed.push("an HTTP answer over plaintext"); }
        if grew > 64 * 1024 { failed.push("memory grew by more than 64 MiB"); }
        if alive != Some(200) { failed.push("/healthz does not answer 200 after the run"); }
        if max_streams != limits.h2_max_streams as usize { failed.push("HTTP/2 max concurrent streams not as configured"); }
        if busy == 0 { failed.push("no 503 while the in-flight limit was reached"); }
        if failed.is_empty() {
            println!("http_fuzz: PASS");
            std::process::ExitCode::SUCCESS
        } else {
            println!("http_fuzz: FAIL: {}", failed.join(", "));
            std::process::ExitCode::FAILURE
        }
    })
}
