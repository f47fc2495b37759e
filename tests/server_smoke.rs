//! The server without any cluster (issue "webhook server"): the real binary,
//! real TLS, a kubeconfig that points at an unreachable apiserver. Uses curl
//! as the client, as an operator would.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

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
        .stdout(Stdio::null())
        .stderr(Stdio::null())
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
            "new certificate not served within 10s"
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
