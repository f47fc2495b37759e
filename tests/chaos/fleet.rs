//! Replicas of the product as plain processes (several `serve`s with the
//! ServiceAccount kubeconfig of tests/e2e/deploy-local.sh), the webhook
//! registration pointed at any port, and the leader Lease.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::PostParams;
use kube::Api;

use crate::support::*;

pub const LEASE_NS: &str = "eviction-autoscaler";
pub const LEASE: &str = "eviction-autoscaler";

#[derive(Clone)]
pub struct ReplicaSpec {
    pub kubeconfig: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
    pub ca: PathBuf,
    pub log_dir: PathBuf,
    pub env: Vec<(String, String)>,
}

impl ReplicaSpec {
    /// deploy-local.sh's certificate and kubeconfig, the e2e settings.
    pub fn from_deployed(wh: &WebhookInfo) -> ReplicaSpec {
        let log_dir = wh.state.join("chaos");
        std::fs::create_dir_all(&log_dir).expect("log dir");
        ReplicaSpec {
            kubeconfig: wh.state.join("kubeconfig"),
            cert: wh.state.join("tls.crt"),
            key: wh.state.join("tls.key"),
            ca: wh.state.join("ca.crt"),
            log_dir,
            env: [
                ("PDB_CREATE", "true"),
                ("ACTIONED_NAMESPACES", "kube-system,e2e-actioned"),
                ("COOLDOWN", "5s"),
                ("RUST_LOG", "info,kube_runtime=warn"),
                ("CERT_RELOAD_INTERVAL", "1s"),
            ]
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        }
    }
}

/// One replica in a fixed slot (port and log file); restarts reuse the port.
pub struct Replica {
    pub slot: String,
    pub name: String,
    pub port: u16,
    spec: ReplicaSpec,
    child: Option<Child>,
}

impl Drop for Replica {
    /// SIGTERM first: a replica holding the Lease releases it, so the
    /// shared server started after the test need not wait for it to expire.
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            terminate(&mut c);
        }
    }
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

impl Replica {
    pub fn start(spec: &ReplicaSpec, slot: &str) -> Replica {
        let mut r = Replica {
            slot: slot.into(),
            name: slot.into(),
            port: free_port(),
            spec: spec.clone(),
            child: None,
        };
        r.spawn();
        r
    }

    pub fn log_path(&self) -> PathBuf {
        self.spec.log_dir.join(format!("{}.log", self.slot))
    }

    fn spawn(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())
            .expect("replica log");
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_eviction-autoscaler"));
        cmd.args(["serve", "--listen", &format!("127.0.0.1:{}", self.port)])
            .arg("--tls-cert-file")
            .arg(&self.spec.cert)
            .arg("--tls-key-file")
            .arg(&self.spec.key)
            .env("KUBECONFIG", &self.spec.kubeconfig)
            .env("POD_NAMESPACE", LEASE_NS)
            .env("POD_NAME", &self.name)
            .env("NO_COLOR", "1")
            .stdout(log.try_clone().expect("log"))
            .stderr(log);
        for (k, v) in &self.spec.env {
            cmd.env(k, v);
        }
        self.child = Some(cmd.spawn().expect("spawn a replica"));
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Sends a signal (`-KILL`, `-TERM`) to the process.
    pub fn signal(&self, sig: &str) {
        if let Some(pid) = self.pid() {
            let _ = Command::new("kill").args([sig, &pid.to_string()]).status();
        }
    }

    /// Waits for the process to exit; None when it is still running after `timeout`.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        let c = self.child.as_mut()?;
        loop {
            if let Ok(Some(s)) = c.try_wait() {
                self.child = None;
                return Some(s);
            }
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts again on the same port under `name` (its Lease identity).
    pub fn restart_as(&mut self, name: &str) {
        assert!(self.child.is_none(), "{} still running", self.slot);
        self.name = name.into();
        self.spawn();
    }

    /// HTTP status and body of a GET over TLS (curl, 2 s limit); 0 when no answer.
    pub fn get(&self, path: &str) -> (u16, String) {
        https_get(&self.spec.ca, self.port, path)
    }

    pub fn ready(&self) -> bool {
        self.get("/readyz").0 == 200
    }

    pub fn wait_ready(&self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        while !self.ready() {
            assert!(
                Instant::now() < deadline,
                "{} not ready after {timeout:?}:\n{}",
                self.name,
                tail(&self.log(), 30)
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Sum of one metric's samples; None when the replica does not answer.
    pub fn metric(&self, name: &str) -> Option<f64> {
        let (code, text) = self.get("/metrics");
        (code == 200).then(|| {
            text.lines()
                .filter(|l| l.starts_with(name) && !l.starts_with('#'))
                .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                .sum()
        })
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }
}

pub fn tail(s: &str, n: usize) -> String {
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

pub fn https_get(ca: &Path, port: u16, path: &str) -> (u16, String) {
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "2", "-w", "\n%{http_code}", "--cacert"])
        .arg(ca)
        .arg(format!("https://127.0.0.1:{port}{path}"))
        .output()
        .expect("curl");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
    (code.trim().parse().unwrap_or(0), body.to_string())
}

/// Points both webhook configurations at https://127.0.0.1:<port> (the
/// configurations deploy-local.sh registered last, same caBundle). They
/// name the port of the last server deploy-local.sh started, which a
/// restart by an earlier test changed: the `WebhookInfo` of the process's
/// first start names an older one, and replacing that replaced nothing
/// (the webhooks kept pointing at a stopped server, failing open).
pub fn register_webhooks(wh: &WebhookInfo, port: u16) {
    let text = std::fs::read_to_string(wh.state.join("webhooks.json")).expect("webhooks.json");
    let last = std::fs::read_to_string(wh.state.join("port"))
        .ok()
        .and_then(|p| p.trim().parse::<u16>().ok())
        .unwrap_or(wh.port);
    let from = format!("https://127.0.0.1:{last}/");
    assert!(
        text.contains(&from),
        "webhooks.json does not point at {from}: {text}"
    );
    let text = text.replace(&from, &format!("https://127.0.0.1:{port}/"));
    let path = wh.state.join(format!("webhooks-{port}.json"));
    std::fs::write(&path, text).expect("write webhooks");
    kubectl_ok(&["apply", "-f", &path_str(&path)]);
}

/// A replica started in `slot`, ready, and holding the Lease (the first of
/// a test's replicas, with no other to take it).
pub async fn start_leading(client: &kube::Client, spec: &ReplicaSpec, slot: &str) -> Replica {
    let r = Replica::start(spec, slot);
    r.wait_ready(Duration::from_secs(30));
    wait_leader(
        client,
        std::slice::from_ref(&r.name),
        Duration::from_secs(30),
    )
    .await;
    r
}

/// Holder and renewTime of the leader Lease.
pub async fn lease(client: &kube::Client) -> (String, Option<k8s_openapi::jiff::Timestamp>) {
    let leases: Api<Lease> = Api::namespaced(client.clone(), LEASE_NS);
    match leases.get_opt(LEASE).await {
        Ok(Some(l)) => {
            let spec = l.spec.unwrap_or_default();
            (
                spec.holder_identity.unwrap_or_default(),
                spec.renew_time.map(|t| t.0),
            )
        }
        _ => (String::new(), None),
    }
}

/// Waits until one of `names` holds the Lease; returns it.
pub async fn wait_leader(client: &kube::Client, names: &[String], timeout: Duration) -> String {
    wait_for("a replica holds the Lease", timeout, || async {
        let (h, _) = lease(client).await;
        names.contains(&h).then_some(h)
    })
    .await
}

/// The Deployment every chaos test surges: 3 replicas (maxSurge 100%) whose
/// pods prefer `node`, Ready, and held by its PDB (no disruption allowed).
/// Returns its pods on `node` (at least one).
pub async fn blocked_on_node(ns: &TestNs, name: &str, node: &str) -> Vec<Pod> {
    let deps: Api<Deployment> = ns.api();
    let d = rolling_max_surge(
        deployment(name, 3, Some(node)),
        IntOrString::String("100%".into()),
    );
    deps.create(&PostParams::default(), &d)
        .await
        .unwrap_or_else(|e| panic!("create Deployment {name}: {e}"));
    let on_node = ready_on_node(ns, name, 3, node).await;
    wait_pdb_blocking(ns, name, 3).await;
    on_node
}
