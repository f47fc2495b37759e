//! The server without any cluster (issue "webhook server"): the real binary,
//! real TLS, a kubeconfig that points at an unreachable apiserver. Uses curl
//! as the client, as an operator would.

#[path = "../fuzz/src/harness.rs"]
#[allow(dead_code)]
mod harness;
#[path = "../fuzz/src/http_kit.rs"]
#[allow(dead_code)]
mod http_kit;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use eviction_autoscaler::server::Limits;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

struct Server {
    child: Child,
    dir: PathBuf,
    port: u16,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_eviction-autoscaler")
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

fn certs(dir: &Path) {
    let ok = Command::new(bin())
        .args(["certs", "--out"])
        .arg(dir)
        .args(["--ip", "127.0.0.1"])
        .status()
        .expect("run certs");
    assert!(ok.success());
}

fn start() -> Server {
    let dir = std::env::temp_dir().join(format!("ea-smoke-{}-{}", std::process::id(), free_port()));
    std::fs::create_dir_all(&dir).unwrap();
    certs(&dir);
    let s = spawn_server(dir, &[]);
    let deadline = Instant::now() + Duration::from_secs(20);
    while curl(&s, &["https://127.0.0.1:PORT/healthz"]).0 != 200 {
        assert!(Instant::now() < deadline, "server did not start");
        std::thread::sleep(Duration::from_millis(100));
    }
    s
}

/// The server on a free port with the certificates in `dir`, a kubeconfig
/// that points at an unreachable apiserver, and `extra` flags.
fn spawn_server(dir: PathBuf, extra: &[&std::ffi::OsStr]) -> Server {
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        "apiVersion: v1\nkind: Config\nclusters: [{name: x, cluster: {server: \"https://127.0.0.1:1\", insecure-skip-tls-verify: true}}]\nusers: [{name: x, user: {token: t}}]\ncontexts: [{name: x, context: {cluster: x, user: x}}]\ncurrent-context: x\n",
    )
    .unwrap();
    let port = free_port();
    // The server's warnings, kept for a failing test to show.
    let log = std::fs::File::create(dir.join("server.log")).expect("server log");
    let child = Command::new(bin())
        .arg("serve")
        .arg("--tls-cert-file")
        .arg(dir.join("tls.crt"))
        .arg("--tls-key-file")
        .arg(dir.join("tls.key"))
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .args(["--cert-reload-interval", "1s"])
        .args(extra)
        .env("KUBECONFIG", &kubeconfig)
        .env("RUST_LOG", "warn")
        .stdout(log.try_clone().expect("server log"))
        .stderr(log)
        .spawn()
        .expect("spawn server");
    Server { child, dir, port }
}

/// Runs curl against the server; returns (HTTP code, body). Code 0 means no HTTP answer.
fn curl(s: &Server, args: &[&str]) -> (u16, String) {
    let args: Vec<String> = args
        .iter()
        .map(|a| a.replace("PORT", &s.port.to_string()))
        .collect();
    let out = Command::new("curl")
        .args(["-s", "-m", "10", "-w", "\n%{http_code}", "--cacert"])
        .arg(s.dir.join("ca.crt"))
        .args(&args)
        .output()
        .expect("curl must be installed");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
    (code.trim().parse().unwrap_or(0), body.to_string())
}

const EVICTION: &str = r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"uid-42","kind":{"group":"policy","version":"v1","kind":"Eviction"},"resource":{"group":"","version":"v1","resource":"pods"},"subResource":"eviction","name":"web-1","namespace":"ns","operation":"CREATE","userInfo":{"username":"admin"},"object":{"apiVersion":"policy/v1","kind":"Eviction","metadata":{"name":"web-1","namespace":"ns"}},"dryRun":false}}"#;

#[test]
fn serves_without_a_cluster_and_survives_bad_input() {
    let s = start();
    assert_eq!(curl(&s, &["https://127.0.0.1:PORT/healthz"]).0, 200);
    assert_eq!(curl(&s, &["https://127.0.0.1:PORT/readyz"]).0, 503);

    let (code, body) = curl(
        &s,
        &[
            "-H",
            "content-type: application/json",
            "--data-binary",
            EVICTION,
            "https://127.0.0.1:PORT/validate/evictions",
        ],
    );
    assert_eq!(code, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["response"]["uid"], "uid-42");
    assert_eq!(v["response"]["allowed"], true);
    assert_eq!(v["apiVersion"], "admission.k8s.io/v1");

    let (code, body) = curl(
        &s,
        &[
            "--data-binary",
            "garbage",
            "https://127.0.0.1:PORT/validate/evictions",
        ],
    );
    assert_eq!(code, 400);
    let v: serde_json::Value = serde_json::from_str(&body).expect("JSON error body");
    assert!(v["error"]
        .as_str()
        .unwrap()
        .contains("not an AdmissionReview"));

    let (code, _) = curl(
        &s,
        &[
            "--data-binary",
            "{}",
            "https://127.0.0.1:PORT/mutate/deployments",
        ],
    );
    assert_eq!(code, 400);

    let big = s.dir.join("big.bin");
    std::fs::write(&big, vec![b'x'; 4 * 1024 * 1024]).unwrap();
    let at_big = format!("@{}", big.display());
    for proto in ["--http2", "--http1.1"] {
        let (code, _) = curl(
            &s,
            &[
                proto,
                "--data-binary",
                &at_big,
                "https://127.0.0.1:PORT/validate/evictions",
            ],
        );
        assert_eq!(code, 413, "{proto}");
    }

    // Plain HTTP gets no HTTP answer.
    let out = Command::new("curl")
        .args(["-s", "-m", "5", "-o", "/dev/null", "-w", "%{http_code}"])
        .arg(format!("http://127.0.0.1:{}/healthz", s.port))
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "000");

    // Unknown paths and the metrics endpoint.
    assert_eq!(curl(&s, &["https://127.0.0.1:PORT/nope"]).0, 404);
    let (code, metrics) = curl(&s, &["https://127.0.0.1:PORT/metrics"]);
    assert_eq!(code, 200);
    assert!(metrics.contains(
        "eviction_autoscaler_admission_requests_total{webhook=\"evictions\",decision=\"not_synced\",code=\"200\"} 1"
    ), "{metrics}");

    // A review under MAX_BODY_BYTES (3 MiB) but past axum's own default
    // body limit (2 MiB) is answered: no layer of axum's limits it.
    let padded = EVICTION.replacen(
        r#""request":{"#,
        &format!(
            r#""request":{{"pad":"{}","#,
            "x".repeat(2 * 1024 * 1024 + 512 * 1024)
        ),
        1,
    );
    let at_padded = s.dir.join("padded.json");
    std::fs::write(&at_padded, padded).unwrap();
    let at_padded = format!("@{}", at_padded.display());
    for proto in ["--http2", "--http1.1"] {
        let (code, body) = curl(
            &s,
            &[
                proto,
                "--data-binary",
                &at_padded,
                "https://127.0.0.1:PORT/validate/evictions",
            ],
        );
        assert_eq!(code, 200, "{proto}: {body}");
        assert!(body.contains(r#""allowed":true"#), "{proto}: {body}");
    }

    // Still serving after all of that.
    assert_eq!(curl(&s, &["https://127.0.0.1:PORT/healthz"]).0, 200);
}

#[test]
fn replaced_certificates_are_picked_up() {
    let s = start();
    let fresh = s.dir.join("fresh");
    certs(&fresh);
    // Before: the new CA does not trust the server.
    let with_new_ca = |s: &Server| {
        Command::new("curl")
            .args([
                "-s",
                "-m",
                "5",
                "-o",
                "/dev/null",
                "-w",
                "%{http_code}",
                "--cacert",
            ])
            .arg(fresh.join("ca.crt"))
            .arg(format!("https://127.0.0.1:{}/healthz", s.port))
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).to_string())
            .unwrap_or_default()
    };
    assert_eq!(with_new_ca(&s), "000");
    for f in ["tls.key", "tls.crt"] {
        std::fs::copy(fresh.join(f), s.dir.join(format!("{f}.new"))).unwrap();
        std::fs::rename(s.dir.join(format!("{f}.new")), s.dir.join(f)).unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while with_new_ca(&s) != "200" {
        assert!(
            Instant::now() < deadline,
            "new certificate not served within 10s; the server said of it:\n{}",
            std::fs::read_to_string(s.dir.join("server.log"))
                .unwrap_or_default()
                .lines()
                .filter(|l| l.contains("certificate"))
                .collect::<Vec<_>>()
                .join("\n")
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(
        curl(&s, &["https://127.0.0.1:PORT/healthz"]).0,
        0,
        "old CA no longer trusted"
    );
}

#[test]
fn invalid_configuration_names_the_setting() {
    let out = Command::new(bin())
        .args(["serve", "--tls-cert-file", "x", "--tls-key-file", "y"])
        .env("COOLDOWN", "soon")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("COOLDOWN") && err.contains("soon"), "{err}");

    let out = Command::new(bin())
        .args([
            "serve",
            "--tls-cert-file",
            "/nonexistent/tls.crt",
            "--tls-key-file",
            "/nonexistent/tls.key",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("/nonexistent/tls.crt"), "{err}");
}

/// Makes a client CA `<name>-ca.crt` and a client certificate
/// `<name>.crt`/`<name>.key` (clientAuth) signed by it, with openssl.
fn client_pki(dir: &Path, name: &str) {
    let sh = |script: String| {
        let ok = Command::new("sh")
            .arg("-c")
            .arg(&script)
            .current_dir(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("openssl");
        assert!(ok.success(), "{script}");
    };
    sh(format!("openssl req -x509 -newkey rsa:2048 -nodes -keyout {name}-ca.key -out {name}-ca.crt -days 1 -subj /CN={name}-ca"));
    sh(format!("openssl req -newkey rsa:2048 -nodes -keyout {name}.key -out {name}.csr -subj /CN=kube-apiserver"));
    sh(format!("printf 'extendedKeyUsage=clientAuth\\n' > {name}.ext && openssl x509 -req -in {name}.csr -CA {name}-ca.crt -CAkey {name}-ca.key -CAcreateserial -out {name}.crt -days 1 -extfile {name}.ext"));
}

/// `--client-ca-file`: health endpoints and /metrics answer without a client
/// certificate (kubelet probes carry none); the webhook paths answer 401
/// without one and serve a client whose certificate the CA signed; a
/// certificate from another CA fails the handshake; a replaced CA file is
/// picked up without a restart.
#[test]
fn client_certificates_are_required_on_webhook_paths_only() {
    let dir = std::env::temp_dir().join(format!("ea-mtls-{}-{}", std::process::id(), free_port()));
    std::fs::create_dir_all(&dir).unwrap();
    certs(&dir);
    client_pki(&dir, "client");
    client_pki(&dir, "other");
    let ca = dir.join("client-ca.pem");
    std::fs::copy(dir.join("client-ca.crt"), &ca).unwrap();
    let s = spawn_server(dir.clone(), &["--client-ca-file".as_ref(), ca.as_os_str()]);
    // (HTTP code, body) with the client certificate `cert` (or none).
    let call = |cert: Option<&str>, path: &str, body: Option<&str>| {
        let mut args: Vec<String> = Vec::new();
        if let Some(c) = cert {
            args.extend([
                "--cert".into(),
                s.dir.join(format!("{c}.crt")).display().to_string(),
                "--key".into(),
                s.dir.join(format!("{c}.key")).display().to_string(),
            ]);
        }
        if let Some(b) = body {
            args.extend([
                "-H".into(),
                "content-type: application/json".into(),
                "--data-binary".into(),
                b.into(),
            ]);
        }
        args.push(format!("https://127.0.0.1:PORT{path}"));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        curl(&s, &args)
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while call(None, "/healthz", None).0 != 200 {
        assert!(
            Instant::now() < deadline,
            "server with client CA did not answer /healthz without a client certificate"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // What the kubelet asks: no client certificate, an HTTP answer.
    assert_eq!(call(None, "/readyz", None).0, 503, "no cluster: not ready");
    assert_eq!(call(None, "/metrics", None).0, 200);
    for path in ["/validate/evictions", "/mutate/deployments"] {
        let (code, body) = call(None, path, Some(EVICTION));
        assert_eq!(code, 401, "{path}: {body}");
        let v: serde_json::Value = serde_json::from_str(&body).expect("JSON error body");
        assert!(
            v["error"].as_str().unwrap().contains("client certificate"),
            "{body}"
        );
    }
    let (code, body) = call(Some("client"), "/validate/evictions", Some(EVICTION));
    assert_eq!(code, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["response"]["allowed"], true);
    assert_eq!(call(Some("client"), "/healthz", None).0, 200);
    // A certificate the CA did not sign: no TLS session at all.
    assert_eq!(call(Some("other"), "/healthz", None).0, 0);

    // Rotate the client CA: the other CA's clients are served, the old ones refused.
    std::fs::copy(dir.join("other-ca.crt"), dir.join("client-ca.pem.new")).unwrap();
    std::fs::rename(dir.join("client-ca.pem.new"), &ca).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while call(Some("other"), "/validate/evictions", Some(EVICTION)).0 != 200 {
        assert!(
            Instant::now() < deadline,
            "new client CA not used within 10s"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(
        call(Some("client"), "/healthz", None).0,
        0,
        "old CA no longer trusted"
    );
    assert_eq!(call(None, "/healthz", None).0, 200);
}

/// `openssl s_client` against the server: (handshake completed, output).
fn s_client(s: &Server, args: &[&str]) -> (bool, String) {
    let out = Command::new("openssl")
        .args(["s_client", "-connect", &format!("127.0.0.1:{}", s.port)])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("openssl must be installed");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let done =
        out.status.success() && (text.contains("Cipher is ") || text.contains("Ciphersuite: "));
    (done, text)
}

/// behaviour.md 8, "HTTPS only (rustls, TLS 1.2+)": no plaintext answer;
/// TLS 1.0 and 1.1 refused by the server (a protocol_version alert, with a
/// client that would accept them); TLS 1.2 suites without ECDHE or without
/// AEAD refused (a handshake_failure alert, each one offered by this
/// OpenSSL); TLS 1.2 ECDHE with AES-GCM or ChaCha20 and TLS 1.3 accepted.
/// (3DES and RC4 cannot be offered by OpenSSL 3's default build; rustls
/// implements neither.)
#[test]
fn tls_refuses_plaintext_old_versions_and_weak_suites() {
    let s = start();
    // Plaintext HTTP: no HTTP answer, the connection is closed.
    let mut tcp = std::net::TcpStream::connect(("127.0.0.1", s.port)).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    std::io::Write::write_all(&mut tcp, b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n").unwrap();
    let mut got = Vec::new();
    let _ = std::io::Read::read_to_end(&mut tcp, &mut got);
    assert!(
        !got.starts_with(b"HTTP/"),
        "plaintext answered: {:?}",
        String::from_utf8_lossy(&got)
    );

    for v in ["-tls1", "-tls1_1"] {
        let (done, out) = s_client(&s, &[v, "-cipher", "DEFAULT:@SECLEVEL=0"]);
        assert!(!done, "{v} accepted:\n{out}");
        // An alert from the server (rustls answers handshake_failure).
        assert!(
            out.contains("SSL alert number"),
            "{v}: refused by the server, not the client:\n{out}"
        );
    }
    for suite in [
        "AES128-SHA",
        "AES256-SHA256",
        "AES128-GCM-SHA256",
        "ECDHE-ECDSA-AES128-SHA",
        "ECDHE-ECDSA-AES256-SHA384",
        "ECDHE-RSA-AES128-SHA",
    ] {
        let offered = Command::new("openssl")
            .args(["ciphers", "-tls1_2", &format!("{suite}:@SECLEVEL=0")])
            .output()
            .unwrap();
        assert!(
            offered.status.success(),
            "this OpenSSL cannot offer {suite}"
        );
        let (done, out) = s_client(&s, &["-tls1_2", "-cipher", &format!("{suite}:@SECLEVEL=0")]);
        assert!(!done, "{suite} accepted:\n{out}");
        assert!(
            out.contains("SSL alert number"),
            "{suite}: refused by the server:\n{out}"
        );
    }
    for suite in [
        "ECDHE-ECDSA-AES128-GCM-SHA256",
        "ECDHE-ECDSA-AES256-GCM-SHA384",
        "ECDHE-ECDSA-CHACHA20-POLY1305",
    ] {
        let (done, out) = s_client(&s, &["-tls1_2", "-cipher", suite]);
        assert!(done, "{suite} refused:\n{out}");
        assert!(out.contains(suite), "{out}");
    }
    let (done, out) = s_client(&s, &["-tls1_3"]);
    assert!(done && out.contains("TLSv1.3"), "TLS 1.3 refused:\n{out}");
}

/// A request head over the limit: 431 on HTTP/1.1 (size and header count)
/// and HTTP/2 (header list size); the server goes on serving.
#[tokio::test]
async fn oversized_request_heads_get_431() {
    let run = http_kit::start(Limits::default(), Duration::from_secs(5)).await;
    let big = "a".repeat(100 * 1024);
    let code = http_kit::h1(
        &run,
        &format!("GET /healthz HTTP/1.1\r\nhost: x\r\nx-big: {big}"),
        b"",
    )
    .await
    .unwrap();
    assert_eq!(code, Some(431), "HTTP/1.1 100 KiB header");
    // Too many header fields: 431. The limit is exactly Limits::max_headers
    // (the server leaves hyper's own limit in place when they agree): host,
    // content-length (h1 adds it) and 98 more pass, one more is refused.
    let limit = Limits::default().max_headers;
    for (fields, want) in [(150, 431), (limit, 200), (limit + 1, 431)] {
        let more: String = (2..fields).map(|i| format!("\r\nx-h{i}: v")).collect();
        let code = http_kit::h1(
            &run,
            &format!("GET /healthz HTTP/1.1\r\nhost: x{more}"),
            b"",
        )
        .await
        .unwrap();
        assert_eq!(code, Some(want), "HTTP/1.1 {fields} header fields");
    }
    let send = run.h2().await.unwrap().ready().await.unwrap();
    let req = axum::http::Request::get("https://localhost/healthz")
        .header("x-big", big)
        .body(())
        .unwrap();
    let (resp, _) = send.clone().send_request(req, true).unwrap();
    let status = resp.await.map(|r| r.status().as_u16());
    assert!(
        matches!(status, Ok(431) | Err(_)),
        "HTTP/2 100 KiB header list: {status:?}"
    );
    assert_eq!(status.ok(), Some(431));
    let code = http_kit::h1(&run, "GET /healthz HTTP/1.1\r\nhost: x", b"")
        .await
        .unwrap();
    assert_eq!(code, Some(200));
}

/// Sends a webhook request head declaring `len` body bytes and one byte of
/// it, then holds the connection open (returned) without sending the rest.
async fn held_request(
    run: &http_kit::Running,
    len: usize,
) -> tokio_rustls::client::TlsStream<tokio::net::TcpStream> {
    let mut s = run.tls().await.unwrap();
    s.write_all(
        format!("POST /validate/evictions HTTP/1.1\r\nhost: x\r\ncontent-length: {len}\r\n\r\n{{")
            .as_bytes(),
    )
    .await
    .unwrap();
    s.flush().await.unwrap();
    s
}

/// Webhook requests past `max_in_flight` get 503 at once; health probes are
/// not counted; a slow body ends with 503 at the request timeout.
#[tokio::test]
async fn webhook_requests_past_the_in_flight_limit_get_503() {
    let limits = Limits {
        max_in_flight: 2,
        ..Limits::default()
    };
    let run = http_kit::start(limits, Duration::from_secs(3)).await;
    let mut held = vec![held_request(&run, 100).await, held_request(&run, 100).await];
    tokio::time::sleep(Duration::from_millis(300)).await;
    let review = harness::eviction_review("u", "ns", "free-0", false).to_string();
    let started = Instant::now();
    let code = http_kit::h1(
        &run,
        "POST /validate/evictions HTTP/1.1\r\nhost: x",
        review.as_bytes(),
    )
    .await
    .unwrap();
    assert_eq!(code, Some(503), "third request while two are in flight");
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "503 at once, not queued"
    );
    let code = http_kit::h1(&run, "GET /healthz HTTP/1.1\r\nhost: x", b"")
        .await
        .unwrap();
    assert_eq!(code, Some(200), "health probes are outside the limit");
    // The held requests end by the request timeout.
    for s in &mut held {
        let code = tokio::time::timeout(Duration::from_secs(6), http_kit::read_status(s))
            .await
            .expect("slow body ended by the request timeout")
            .unwrap();
        assert_eq!(code, Some(503));
    }
    let code = http_kit::h1(
        &run,
        "POST /validate/evictions HTTP/1.1\r\nhost: x",
        review.as_bytes(),
    )
    .await
    .unwrap();
    assert_eq!(code, Some(200), "served again once they are gone");
}

/// Declared body bytes past the shared budget get 503 before being read.
#[tokio::test]
async fn body_bytes_past_the_budget_get_503() {
    // The budget is at least one body of the limit (3 MiB here).
    let limits = Limits {
        max_body_bytes_in_flight: 1,
        ..Limits::default()
    };
    let run = http_kit::start(limits, Duration::from_secs(5)).await;
    let _held = held_request(&run, 2 * 1024 * 1024).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut s = held_request(&run, 2 * 1024 * 1024).await;
    let code = tokio::time::timeout(Duration::from_secs(2), http_kit::read_status(&mut s))
        .await
        .expect("answered at once")
        .unwrap();
    assert_eq!(code, Some(503), "4 MiB declared against a 3 MiB budget");
    let review = harness::eviction_review("u", "ns", "free-0", false).to_string();
    let code = http_kit::h1(
        &run,
        "POST /validate/evictions HTTP/1.1\r\nhost: x",
        review.as_bytes(),
    )
    .await
    .unwrap();
    assert_eq!(code, Some(200), "a small body still fits");
}

/// The server announces its HTTP/2 stream limit, and 200 requests at once
/// on one connection are all answered (the client queues past the limit).
#[tokio::test]
async fn http2_streams_per_connection_are_limited() {
    let limits = Limits {
        h2_max_streams: 8,
        ..Limits::default()
    };
    let run = http_kit::start(limits, Duration::from_secs(10)).await;
    let send = run.h2().await.unwrap();
    // One request first: the client learns the limit from the server's
    // SETTINGS (before them, a burst past it is refused, retryably).
    let mut first = send.clone().ready().await.unwrap();
    let (resp, _) = first
        .send_request(
            axum::http::Request::get("https://localhost/healthz")
                .body(())
                .unwrap(),
            true,
        )
        .unwrap();
    assert_eq!(resp.await.unwrap().status().as_u16(), 200);
    let mut tasks = Vec::new();
    for i in 0..200 {
        let send = send.clone();
        tasks.push(tokio::spawn(async move {
            let mut send = send.ready().await.map_err(|e| format!("ready {e}"))?;
            let body = harness::eviction_review(&format!("u{i}"), "ns", "free-0", true).to_string();
            let req = axum::http::Request::post("https://localhost/validate/evictions")
                .header("content-length", body.len())
                .body(())
                .map_err(|e| e.to_string())?;
            let (resp, mut stream) = send
                .send_request(req, false)
                .map_err(|e| format!("send {e}"))?;
            stream
                .send_data(body.into(), true)
                .map_err(|e| format!("data {e}"))?;
            resp.await
                .map(|r| r.status().as_u16())
                .map_err(|e| format!("resp {e}"))
        }));
    }
    let mut answers = std::collections::BTreeMap::<String, usize>::new();
    for t in tasks {
        let a = match t.await {
            Ok(Ok(code)) => code.to_string(),
            Ok(Err(e)) => e,
            Err(e) => e.to_string(),
        };
        *answers.entry(a).or_default() += 1;
    }
    assert_eq!(answers.get("200"), Some(&200), "{answers:?}");
    assert_eq!(send.current_max_send_streams(), 8);
}

/// Connections past `max_connections` are closed at accept; the ones within
/// the limit that never start TLS are closed by the handshake timeout.
#[tokio::test]
async fn connections_past_the_limit_are_closed() {
    let limits = Limits {
        max_connections: 4,
        ..Limits::default()
    };
    let run = http_kit::start(limits, Duration::from_secs(2)).await;
    let mut idle = Vec::new();
    for _ in 0..4 {
        idle.push(tokio::net::TcpStream::connect(run.addr).await.unwrap());
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut extra = tokio::net::TcpStream::connect(run.addr).await.unwrap();
    let mut b = [0u8; 8];
    let n = tokio::time::timeout(Duration::from_millis(1000), extra.read(&mut b))
        .await
        .expect("the fifth connection is closed at once");
    assert!(matches!(n, Ok(0) | Err(_)), "{n:?}");
    for c in &mut idle {
        let n = tokio::time::timeout(Duration::from_secs(5), c.read(&mut b))
            .await
            .expect("closed by the handshake timeout");
        assert!(matches!(n, Ok(0) | Err(_)), "{n:?}");
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let code = http_kit::h1(&run, "GET /healthz HTTP/1.1\r\nhost: x", b"")
        .await
        .unwrap();
    assert_eq!(code, Some(200));
}

/// Reads one HTTP/1.1 response whole (head, then `content-length` bytes of
/// body): its status, or None when the connection ended first.
async fn read_response<S: tokio::io::AsyncRead + Unpin>(s: &mut S) -> Option<u16> {
    let mut buf = Vec::new();
    let mut byte = [0u8; 1];
    while !buf.ends_with(b"\r\n\r\n") {
        match s.read(&mut byte).await {
            Ok(1) => buf.push(byte[0]),
            _ => return None,
        }
    }
    let head = String::from_utf8_lossy(&buf).to_ascii_lowercase();
    let len: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    let mut body = vec![0u8; len];
    s.read_exact(&mut body).await.ok()?;
    head.strip_prefix("http/1.1 ")?.get(..3)?.parse().ok()
}

/// Trickles a request head one byte per 100 ms until the server closes the
/// connection; how long that took (None: still open after 8 s).
async fn trickle_until_closed<S>(s: S) -> Option<Duration>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let started = Instant::now();
    let (mut rd, mut wr) = tokio::io::split(s);
    let trickle = async {
        for b in b"POST /validate/evictions HTTP/1.1\r\nhost: x\r\nx-slow: "
            .iter()
            .cycle()
        {
            if wr.write_all(&[*b]).await.is_err() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        std::future::pending::<()>().await
    };
    let closed = async {
        let mut buf = [0u8; 256];
        while let Ok(n) = rd.read(&mut buf).await {
            if n == 0 {
                break;
            }
        }
    };
    tokio::select! {
        _ = closed => Some(started.elapsed()),
        _ = trickle => None,
        _ = tokio::time::sleep(Duration::from_secs(8)) => None,
    }
}

/// The slow-loris defence (hyper's header read timeout, on one timer per
/// connection, src/header_timer.rs): a head trickled in is cut at the
/// request timeout on a fresh connection and on a kept-alive one after it
/// served requests; a kept-alive connection idle for less than the timeout
/// serves again.
#[tokio::test]
async fn slow_request_heads_are_cut_at_the_timeout_on_every_request() {
    let timeout = Duration::from_secs(2);
    let run = http_kit::start(Limits::default(), timeout).await;
    let fresh = trickle_until_closed(run.tls().await.unwrap()).await;
    let mut s = run.tls().await.unwrap();
    for pause_ms in [0u64, 1200, 1200] {
        tokio::time::sleep(Duration::from_millis(pause_ms)).await;
        s.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
            .await
            .unwrap();
        assert_eq!(
            read_response(&mut s).await,
            Some(200),
            "kept alive after {pause_ms} ms idle"
        );
    }
    let kept_alive = trickle_until_closed(s).await;
    for (what, took) in [("fresh", fresh), ("kept-alive", kept_alive)] {
        let took = took.unwrap_or_else(|| panic!("{what}: a slow head was not cut within 8 s"));
        // Not before the timeout: a deadline left over from an earlier
        // request of the connection would cut it short.
        assert!(
            took >= timeout - Duration::from_millis(300),
            "{what}: cut after {took:?}, before the {timeout:?} timeout"
        );
    }
}

/// Reads until the peer closes (or errors); how long that took, or None
/// when it was still open after `within`.
async fn closed_within<S: tokio::io::AsyncRead + Unpin>(
    s: &mut S,
    within: Duration,
) -> Option<Duration> {
    let started = std::time::Instant::now();
    let mut b = [0u8; 256];
    tokio::time::timeout(within, async {
        loop {
            match s.read(&mut b).await {
                Ok(0) | Err(_) => return started.elapsed(),
                Ok(_) => {}
            }
        }
    })
    .await
    .ok()
}

/// A client that completes its handshake and then sends nothing, or only
/// part of the HTTP/2 preface, is closed at the request timeout: before,
/// it held its connection slot for good.
#[tokio::test]
async fn a_connection_that_sends_no_request_is_closed_at_the_timeout() {
    let timeout = Duration::from_secs(2);
    let run = http_kit::start(Limits::default(), timeout).await;
    let opened = std::time::Instant::now();
    let mut silent = run.tls().await.unwrap();
    let mut partial = run.tls_h2().await.unwrap();
    partial
        .write_all(&b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"[..23])
        .await
        .unwrap();
    for (what, s) in [("silent", &mut silent), ("partial preface", &mut partial)] {
        closed_within(s, Duration::from_secs(8))
            .await
            .unwrap_or_else(|| panic!("{what}: still open after 8 s"));
        let took = opened.elapsed();
        assert!(
            took >= timeout - Duration::from_millis(300),
            "{what}: closed after {took:?}, before the {timeout:?} timeout"
        );
    }
}

/// A kept-alive connection with no request in flight for the idle time is
/// closed (HTTP/1.1 and HTTP/2); one that keeps asking stays open.
#[tokio::test]
async fn an_idle_connection_is_closed_and_a_busy_one_is_not() {
    let limits = Limits {
        idle: Duration::from_secs(1),
        ..Limits::default()
    };
    let run = http_kit::start(limits, Duration::from_secs(5)).await;
    let mut busy = run.tls().await.unwrap();
    let mut idle = run.tls().await.unwrap();
    let get = b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n";
    idle.write_all(get).await.unwrap();
    assert_eq!(read_response(&mut idle).await, Some(200));
    for _ in 0..6 {
        busy.write_all(get).await.unwrap();
        assert_eq!(read_response(&mut busy).await, Some(200), "still open");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let took = closed_within(&mut idle, Duration::from_millis(100))
        .await
        .expect("the idle HTTP/1.1 connection closed by now");
    assert!(took < Duration::from_millis(100));
    // HTTP/2: one request, then idle.
    let mut h2 = run.h2().await.unwrap();
    let req = axum::http::Request::get("https://x/healthz")
        .body(())
        .unwrap();
    let (answer, _) = h2.send_request(req, true).unwrap();
    assert_eq!(answer.await.unwrap().status(), 200);
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let again = axum::http::Request::get("https://x/healthz")
        .body(())
        .unwrap();
    let refused = match h2.send_request(again, true) {
        Err(_) => true,
        Ok((answer, _)) => answer.await.is_err(),
    };
    assert!(
        refused,
        "the idle HTTP/2 connection was closed with a GOAWAY"
    );
}
