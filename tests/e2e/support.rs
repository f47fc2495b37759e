//! Harness for the end-to-end tests: the local control plane of
//! tests/cluster/up.sh, the server started by tests/e2e/deploy-local.sh, and
//! helpers to make workloads, drain nodes with the real kubectl and watch.
//! A missing cluster is a loud failure, never a skip.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output};
use std::sync::{Arc, LazyLock, Mutex, OnceLock};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::{
    Deployment, DeploymentSpec, DeploymentStrategy, RollingUpdateDeployment,
};
use k8s_openapi::api::autoscaling::v2::{
    CrossVersionObjectReference, HorizontalPodAutoscaler, HorizontalPodAutoscalerSpec,
};
use k8s_openapi::api::core::v1::{
    Container, Namespace, ObjectReference, Pod, PodSpec, PodTemplateSpec, ServiceAccount,
};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    LabelSelector, MicroTime, ObjectMeta, OwnerReference,
};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::Timestamp;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use kube::{Api, Client, Config};

use eviction_autoscaler::surge::writer::{replicas_writer, ReplicasWriter};

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

pub fn cluster_dir() -> PathBuf {
    std::env::var_os("CLUSTER_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join(".cluster"))
}

/// KEY=VALUE pairs of `$CLUSTER_DIR/env` (`export KEY=VALUE` lines).
fn cluster_env() -> &'static BTreeMap<String, String> {
    static ENV: OnceLock<BTreeMap<String, String>> = OnceLock::new();
    ENV.get_or_init(|| {
        let path = cluster_dir().join("env");
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
            panic!(
                "end-to-end tests need the local control plane, but {} is unreadable ({e}). \
                 Run `make cluster-up` (or `make test`, which brings it up).",
                path.display()
            )
        });
        let mut env = BTreeMap::new();
        for line in text.lines() {
            let line = line.trim().trim_start_matches("export ").trim();
            if let Some((k, v)) = line.split_once('=') {
                let v = v.trim().trim_matches('"').trim_matches('\'');
                // PATH lines extend the current PATH.
                let v = v.replace("$PATH", &std::env::var("PATH").unwrap_or_default());
                let v = v.replace("${PATH}", &std::env::var("PATH").unwrap_or_default());
                env.insert(k.to_string(), v);
            }
        }
        env
    })
}

/// Starts the server once per test process (tests/e2e/deploy-local.sh).
fn deployed() -> &'static WebhookInfo {
    static INFO: OnceLock<WebhookInfo> = OnceLock::new();
    INFO.get_or_init(|| {
        let _ = cluster_env();
        let info = start_server(&[]);
        // Namespaces kept from failed earlier runs would share app labels
        // with this run's pods (kubectl drain --pod-selector spans namespaces).
        let _ = kubectl(&[
            "delete",
            "namespace",
            "-l",
            &format!("{E2E_LABEL}=true"),
            "--wait=false",
        ]);
        // Their pods held by the tests' finalizer would keep them forever.
        for _ in 0..120 {
            let left = kubectl(&[
                "get",
                "namespace",
                "-l",
                &format!("{E2E_LABEL}=true"),
                "-o",
                "name",
            ]);
            if String::from_utf8_lossy(&left.stdout).trim().is_empty() {
                break;
            }
            release_held_pods();
            std::thread::sleep(Duration::from_secs(1));
        }
        info
    })
}

/// Label on every namespace the tests make.
pub const E2E_LABEL: &str = "eviction-autoscaler-e2e";

#[derive(Clone)]
pub struct WebhookInfo {
    pub state: PathBuf,
    pub port: u16,
}

impl WebhookInfo {
    pub fn get() -> &'static WebhookInfo {
        deployed()
    }

    /// The server's /metrics text, fetched with curl over its TLS.
    pub fn metrics(&self) -> String {
        let out = Command::new("curl")
            .args(["-fsS", "-m", "10", "--cacert"])
            .arg(self.state.join("ca.crt"))
            .arg(format!("https://127.0.0.1:{}/metrics", self.port))
            .output()
            .expect("curl");
        assert!(
            out.status.success(),
            "metrics: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).to_string()
    }

    /// Sum of the samples of one metric whose labels contain all of `labels`.
    pub fn metric_sum(&self, name: &str, labels: &[&str]) -> f64 {
        self.metrics()
            .lines()
            .filter(|l| l.starts_with(name) && !l.starts_with('#'))
            .filter(|l| labels.iter().all(|x| l.contains(x)))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.state.join("server.log")).unwrap_or_default()
    }
}

pub async fn client() -> Client {
    client_retrying(true).await
}

/// A client that answers what the apiserver answered: kube's own client
/// retries 429, 503 and 504 (`default_retry`), which kubectl does not.
pub async fn client_retrying(retry: bool) -> Client {
    let _ = deployed();
    let path = cluster_dir().join("kubeconfig");
    let kc = Kubeconfig::read_from(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}; run `make cluster-up`", path.display()));
    let mut cfg = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .expect("kubeconfig");
    // kube sets none: a request the apiserver never answers would hang the
    // test. Above the 290 s a watch lasts, so watches are not cut.
    cfg.read_timeout = Some(Duration::from_secs(300));
    cfg.default_retry = retry;
    Client::try_from(cfg).expect("client")
}

/// Runs the cluster's kubectl with the admin kubeconfig, ended (exit 124)
/// 60 s past its own `--timeout=<N>s`, or after 120 s: a request to an
/// apiserver that accepts and never answers must fail the test, not hang it.
pub fn kubectl(args: &[&str]) -> Output {
    let env = cluster_env();
    let own = args.iter().rev().find_map(|a| {
        a.strip_prefix("--timeout=")?
            .strip_suffix('s')?
            .parse::<u64>()
            .ok()
    });
    let deadline = own.map_or(120, |s| s + 60);
    let mut cmd = Command::new("timeout");
    cmd.args(["--kill-after=5", &deadline.to_string(), "kubectl"])
        .args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("run kubectl")
}

pub fn kubectl_ok(args: &[&str]) -> String {
    let out = kubectl(args);
    assert!(
        out.status.success(),
        "kubectl {args:?} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).to_string()
}

/// With `E2E_WAITS=1`, each wait's time goes to `$CLUSTER_DIR/waits.txt`
/// (test, seconds, what): where a test's time goes, to make the suites
/// shorter.
pub fn note_wait(what: &str, since: Instant) {
    use std::io::Write;
    if std::env::var_os("E2E_WAITS").is_none() {
        return;
    }
    let test = std::thread::current().name().unwrap_or("?").to_string();
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(cluster_dir().join("waits.txt"))
    {
        let _ = writeln!(f, "{test}\t{:.1}\t{what}", since.elapsed().as_secs_f64());
    }
}

/// Polls `f` until it returns Some, or fails the test after `timeout`.
pub async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let started = Instant::now();
    let deadline = started + timeout;
    loop {
        if let Some(v) = f().await {
            note_wait(what, started);
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Waits until a read of `name` answers "not found" (a failed read is not
/// taken for gone).
pub async fn wait_gone<K>(api: &Api<K>, name: &str, what: &str, timeout: Duration)
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    wait_for(what, timeout, || async {
        matches!(api.get_opt(name).await, Ok(None)).then_some(())
    })
    .await
}

/// Applies a manifest of this repository when dropped, so a test that
/// deleted or trimmed what it holds puts it back however the test ends; for
/// a CRD, also waits until it is Established again.
pub struct ApplyOnDrop {
    path: &'static str,
    crd: Option<&'static str>,
}

impl ApplyOnDrop {
    pub fn manifest(path: &'static str) -> Self {
        ApplyOnDrop { path, crd: None }
    }

    pub fn crd(path: &'static str, name: &'static str) -> Self {
        ApplyOnDrop {
            path,
            crd: Some(name),
        }
    }
}

impl Drop for ApplyOnDrop {
    fn drop(&mut self) {
        let _ = kubectl(&["apply", "-f", &path_str(&repo().join(self.path))]);
        if let Some(crd) = self.crd {
            let _ = kubectl(&[
                "wait",
                "--for=condition=Established",
                &format!("crd/{crd}"),
                "--timeout=60s",
            ]);
        }
    }
}

/// Tests that cordon or drain nodes run one at a time: a cordon is cluster-wide.
pub static NODES: LazyLock<tokio::sync::Mutex<()>> = LazyLock::new(|| tokio::sync::Mutex::new(()));

pub const NODE_NAMES: [&str; 3] = ["kwok-node-0", "kwok-node-1", "kwok-node-2"];

/// Holds the node lock; every node is schedulable when it is taken and again
/// when it is dropped, even if the test failed half-way.
pub struct NodesGuard {
    _g: tokio::sync::MutexGuard<'static, ()>,
}

impl Drop for NodesGuard {
    fn drop(&mut self) {
        reset_nodes();
    }
}

/// Every node schedulable and free of the drain taints tests set.
/// A taint a test puts on a node for a while, to keep new pods off it.
pub const LATER_TAINT: &str = "e2e.eviction-autoscaler.io/later";

fn reset_nodes() {
    for n in NODE_NAMES {
        uncordon(n);
        let _ = kubectl(&["taint", "node", n, "karpenter.sh/disrupted:NoSchedule-"]);
        let _ = kubectl(&["taint", "node", n, &format!("{LATER_TAINT}-")]);
    }
}

/// The drain tests' lock on the nodes: they start schedulable and untainted,
/// and healthy, so one test that hurt the cluster fails alone and says so.
pub async fn nodes_lock() -> NodesGuard {
    let asked = Instant::now();
    let g = NODES.lock().await;
    note_wait("the nodes lock", asked);
    reset_nodes();
    wait_nodes_healthy(Duration::from_secs(150)).await;
    NodesGuard { _g: g }
}

/// Waits until every node is Ready without the node lifecycle controller's
/// taints (kwok's nodes go NotReady when the control plane was away too
/// long); panics with the nodes' state after `timeout`.
pub async fn wait_nodes_healthy(timeout: Duration) {
    let deadline = Instant::now() + timeout;
    loop {
        let out = kubectl(&[
            "get",
            "nodes",
            "-o",
            "jsonpath={range .items[*]}{.metadata.name} ready={.status.conditions[?(@.type==\"Ready\")].status} taints={.spec.taints[*].key}{\"\\n\"}{end}",
        ]);
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let sick: Vec<&str> = text
            .lines()
            .filter(|l| {
                !l.contains(" ready=True ")
                    || l.contains("node.kubernetes.io/not-ready")
                    || l.contains("node.kubernetes.io/unreachable")
            })
            .collect();
        let all_there = NODE_NAMES
            .iter()
            .all(|n| text.lines().any(|l| l.starts_with(&format!("{n} "))));
        if out.status.success() && all_there && sick.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the test cluster's nodes are not healthy after {timeout:?} (an earlier test or the control plane left them so):\n{text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

/// A server log without colour codes (field names are styled even with NO_COLOR).
pub fn strip_ansi(raw: &str) -> String {
    let mut out = String::with_capacity(raw.len());
    let mut chars = raw.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// When a server's log says it started (`leading`) or stopped leading, first
/// after `after`: the server's own clock, not when a test happened to look.
pub fn leadership_logged(log: &str, leading: bool, after: Timestamp) -> Option<Timestamp> {
    let field = format!("leading={leading}");
    strip_ansi(log)
        .lines()
        .filter(|l| l.contains("leadership changed") && l.split_whitespace().any(|w| w == field))
        .filter_map(|l| l.split_whitespace().next()?.parse::<Timestamp>().ok())
        .find(|t| *t > after)
}

/// Appends a measured figure to $CLUSTER_DIR/figures.txt (printed by `make e2e`).
pub fn record_figure(line: String) {
    use std::io::Write;
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(cluster_dir().join("figures.txt"))
    {
        let _ = writeln!(f, "{line}");
    }
}

/// A namespace of its own per test, in scope (annotated enable: "true"),
/// deleted when the test ends.
pub struct TestNs {
    pub name: String,
    pub client: Client,
}

impl TestNs {
    pub async fn new(prefix: &str) -> TestNs {
        Self::with_annotations(prefix, &[("eviction-autoscaler.azure.com/enable", "true")]).await
    }

    pub async fn with_annotations(prefix: &str, annotations: &[(&str, &str)]) -> TestNs {
        let name = format!("{prefix}-{}", std::process::id() % 100_000);
        Self::fixed(&name, annotations).await
    }

    /// A namespace with exactly this name.
    pub async fn fixed(name: &str, annotations: &[(&str, &str)]) -> TestNs {
        let client = client().await;
        let name = name.to_string();
        let api: Api<Namespace> = Api::all(client.clone());
        // A leftover from an aborted run: wait for it to go.
        let _ = api.delete(&name, &DeleteParams::default()).await;
        wait_for("old namespace gone", Duration::from_secs(60), || async {
            api.get_opt(&name)
                .await
                .ok()
                .flatten()
                .is_none()
                .then_some(())
        })
        .await;
        let ns = Namespace {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                labels: Some([(E2E_LABEL.to_string(), "true".to_string())].into()),
                annotations: Some(
                    annotations
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect(),
                ),
                ..Default::default()
            },
            ..Default::default()
        };
        api.create(&PostParams::default(), &ns)
            .await
            .expect("create namespace");
        let sa: Api<ServiceAccount> = Api::namespaced(client.clone(), &name);
        wait_for(
            "default ServiceAccount",
            Duration::from_secs(30),
            || async { sa.get_opt("default").await.ok().flatten().map(|_| ()) },
        )
        .await;
        TestNs { name, client }
    }

    pub fn api<K>(&self) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
    {
        Api::namespaced(self.client.clone(), &self.name)
    }
}

impl Drop for TestNs {
    fn drop(&mut self) {
        // Keep the namespace of a failed test for a look; delete it otherwise.
        if !std::thread::panicking() {
            let _ = kubectl(&["delete", "namespace", &self.name, "--wait=false"]);
        }
    }
}

/// A user PDB (no `ownedBy`) selecting these labels, with `minAvailable`
/// and `maxUnavailable` as given.
pub fn user_pdb_over(
    name: &str,
    labels: &[(&str, &str)],
    min: Option<IntOrString>,
    max: Option<IntOrString>,
) -> PodDisruptionBudget {
    PodDisruptionBudget {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        spec: Some(PodDisruptionBudgetSpec {
            min_available: min,
            max_unavailable: max,
            selector: Some(LabelSelector {
                match_labels: Some(
                    labels
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect(),
                ),
                ..Default::default()
            }),
            ..Default::default()
        }),
        status: None,
    }
}

/// A user PDB over the pods labelled `app=<app>`.
pub fn user_pdb(
    name: &str,
    app: &str,
    min: Option<IntOrString>,
    max: Option<IntOrString>,
) -> PodDisruptionBudget {
    user_pdb_over(name, &[("app", app)], min, max)
}

pub fn labels(app: &str) -> BTreeMap<String, String> {
    [("app".to_string(), app.to_string())].into()
}

/// A Deployment of `replicas` pods that prefer `node` (so a drain of that node
/// displaces all of them, while they can still be rescheduled elsewhere).
pub fn deployment(name: &str, replicas: i32, prefer_node: Option<&str>) -> Deployment {
    let affinity = prefer_node.map(|n| {
        serde_json::from_value(serde_json::json!({
            "nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 100, "preference": {"matchExpressions": [
                    {"key": "kubernetes.io/hostname", "operator": "In", "values": [n]}]}}]}
        }))
        .expect("affinity")
    });
    Deployment {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        spec: Some(DeploymentSpec {
            replicas: Some(replicas),
            selector: LabelSelector {
                match_labels: Some(labels(name)),
                ..Default::default()
            },
            strategy: Some(DeploymentStrategy::default()),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels(name)),
                    ..Default::default()
                }),
                spec: Some(PodSpec {
                    containers: vec![Container {
                        name: "app".into(),
                        image: Some("registry.local/app:1".into()),
                        ..Default::default()
                    }],
                    affinity,
                    termination_grace_period_seconds: Some(0),
                    ..Default::default()
                }),
            },
            ..Default::default()
        }),
        status: None,
    }
}

/// The pod's Ready condition is True.
pub fn pod_is_ready(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

pub async fn ready_pods(ns: &TestNs, app: &str) -> Vec<Pod> {
    let pods: Api<Pod> = ns.api();
    let list = pods
        .list(&ListParams::default().labels(&format!("app={app}")))
        .await
        .map(|l| l.items)
        .unwrap_or_default();
    list.into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter(pod_is_ready)
        .collect()
}

pub async fn wait_ready(ns: &TestNs, app: &str, n: usize) -> Vec<Pod> {
    wait_for(
        &format!("{n} ready pods of {app}"),
        Duration::from_secs(60),
        || async {
            let p = ready_pods(ns, app).await;
            (p.len() == n).then_some(p)
        },
    )
    .await
}

pub async fn wait_pdb<F>(ns: &TestNs, name: &str, what: &str, f: F) -> PodDisruptionBudget
where
    F: Fn(&PodDisruptionBudget) -> bool,
{
    // 120 s: kube-controller-manager's disruption controller requeues a PDB
    // whose status write conflicted with growing backoff; on a loaded CI run
    // its first status took more than 60 s once.
    let api: Api<PodDisruptionBudget> = ns.api();
    let started = Instant::now();
    let deadline = started + Duration::from_secs(120);
    loop {
        let last = api.get_opt(name).await.ok().flatten();
        match last {
            Some(p) if f(&p) => {
                note_wait(what, started);
                return p;
            }
            _ if Instant::now() >= deadline => panic!(
                "timed out after 120s waiting for {what}; PDB {name} last seen with status {:?}",
                last.and_then(|p| p.status)
            ),
            _ => tokio::time::sleep(Duration::from_millis(250)).await,
        }
    }
}

/// Records the fewest Ready pods seen while a drain runs; the availability
/// watcher of every drain test.
pub struct AvailabilityWatcher {
    min_seen: Arc<Mutex<Option<usize>>>,
    stop: tokio::sync::watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl AvailabilityWatcher {
    pub fn start(ns: &TestNs, app: &str) -> AvailabilityWatcher {
        Self::start_selector(ns, &format!("app={app}"))
    }

    /// Stops watching; returns the fewest Ready pods observed.
    pub async fn finish(self) -> usize {
        let _ = self.stop.send(true);
        let _ = self.task.await;
        let v = *self.min_seen.lock().expect("watcher lock");
        v.expect("the watcher saw no pod list at all")
    }
}

/// Which node each pod runs on.
pub fn nodes_of(pods: &[Pod]) -> Vec<String> {
    pods.iter()
        .filter_map(|p| p.spec.as_ref()?.node_name.clone())
        .collect()
}

/// Waits for `n` Ready pods of `app` and returns those on `node`, at
/// least one (the test's pods prefer that node).
pub async fn ready_on_node(ns: &TestNs, app: &str, n: usize, node: &str) -> Vec<Pod> {
    let on: Vec<Pod> = wait_ready(ns, app, n)
        .await
        .into_iter()
        .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node))
        .collect();
    assert!(!on.is_empty(), "pods of {app} prefer {node}");
    on
}

/// The name of a Ready pod of `app`.
pub async fn a_ready_pod(ns: &TestNs, app: &str) -> String {
    ready_pods(ns, app)
        .await
        .into_iter()
        .find_map(|p| p.metadata.name)
        .unwrap_or_else(|| panic!("a Ready pod of {app}"))
}

/// The namespace's pods through a client that answers what the apiserver
/// answered: an eviction's 429 fails the call instead of being retried.
pub async fn pods_without_retry(ns: &TestNs) -> Api<Pod> {
    Api::namespaced(client_retrying(false).await, &ns.name)
}

/// Waits until Deployment `name` is surged above `baseline` with its markers.
pub async fn wait_surged_above(ns: &TestNs, name: &str, baseline: i32, why: &str) {
    wait_for(
        &format!("a surge of {name} above {baseline} ({why})"),
        Duration::from_secs(30),
        || async {
            let (n, markers) = deployment_state(ns, name).await;
            (n > baseline && markers == Some(true)).then_some(())
        },
    )
    .await;
}

pub fn uncordon(node: &str) {
    let _ = kubectl(&["uncordon", node]);
}

/// Uncordons a node when dropped, so a failing test leaves it schedulable.
pub struct UncordonOnDrop(pub &'static str);

impl Drop for UncordonOnDrop {
    fn drop(&mut self) {
        uncordon(self.0);
    }
}

/// A ValidatingAdmissionPolicy and its binding that refuse, in one test
/// namespace, every UPDATE of a resource (`group`, version v1) whose new
/// object fails the CEL `expression`: a write of ours that fails on the
/// real apiserver. Both objects are deleted on drop, however the test ends.
pub struct DenyUpdates {
    name: String,
    ns: String,
}

impl DenyUpdates {
    pub fn apply(ns: &TestNs, group: &str, resource: &str, expression: &str) -> DenyUpdates {
        Self::apply_to(ns, group, resource, "UPDATE", expression)
    }

    /// The same for another `operation` (`CREATE`, `DELETE`).
    pub fn apply_to(
        ns: &TestNs,
        group: &str,
        resource: &str,
        operation: &str,
        expression: &str,
    ) -> DenyUpdates {
        Self::policy(ns, group, resource, operation, expression, None)
    }

    /// Every update of `resource` refused with 403 Forbidden, as a webhook
    /// built on controller-runtime answers a denial (KEDA's refuses every
    /// update of a ScaledObject whose workload another HPA targets). A
    /// policy's own denial is a 422 otherwise.
    pub fn forbid_updates(ns: &TestNs, group: &str, resource: &str) -> DenyUpdates {
        Self::policy(ns, group, resource, "UPDATE", "false", Some("Forbidden"))
    }

    fn policy(
        ns: &TestNs,
        group: &str,
        resource: &str,
        operation: &str,
        expression: &str,
        reason: Option<&str>,
    ) -> DenyUpdates {
        let name = format!("e2e-deny-{resource}-{}", ns.name);
        let mut validation = serde_json::json!({"expression": expression,
            "message": format!("e2e: {resource} {operation} refused")});
        if let Some(r) = reason {
            validation["reason"] = serde_json::json!(r);
        }
        let manifest = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": [
            {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
             "metadata": {"name": name},
             "spec": {"failurePolicy": "Fail",
                      "matchConstraints": {"resourceRules": [{"apiGroups": [group],
                          "apiVersions": ["*"], "operations": [operation],
                          "resources": [resource]}]},
                      "validations": [validation]}},
            {"apiVersion": "admissionregistration.k8s.io/v1",
             "kind": "ValidatingAdmissionPolicyBinding",
             "metadata": {"name": name},
             "spec": {"policyName": name, "validationActions": ["Deny"],
                      "matchResources": {"namespaceSelector": {"matchLabels":
                          {"kubernetes.io/metadata.name": ns.name}}}}}]});
        let file = std::env::temp_dir().join(format!("{name}.json"));
        std::fs::write(&file, manifest.to_string()).expect("write the policy");
        kubectl_ok(&["apply", "-f", &path_str(&file)]);
        let _ = std::fs::remove_file(&file);
        DenyUpdates {
            name,
            ns: ns.name.clone(),
        }
    }

    /// Does a server-side dry-run update of `object` (`kind/name`) pass?
    fn update_passes(&self, object: &str) -> bool {
        self.probe_passes(&["annotate", object, "e2e-probe=1", "--overwrite"])
    }

    /// Does `kubectl <command> -n <ns> --dry-run=server` pass?
    fn probe_passes(&self, command: &[&str]) -> bool {
        let mut all = command.to_vec();
        all.extend_from_slice(&["-n", &self.ns, "--dry-run=server"]);
        kubectl(&all).status.success()
    }

    /// Waits until the apiserver has loaded the policy: an update of
    /// `object` is refused.
    pub async fn wait_refusing(&self, object: &str) {
        wait_for(
            &format!("the policy refusing updates of {object}"),
            Duration::from_secs(30),
            || async { (!self.update_passes(object)).then_some(()) },
        )
        .await;
    }

    /// Waits until the policy refuses `kubectl <command> -n <ns>` (a
    /// server-side dry run): for a policy that refuses some requests only,
    /// or creations.
    pub async fn wait_refusing_command(&self, command: &[&str]) {
        wait_for(
            &format!("the policy refusing kubectl {command:?}"),
            Duration::from_secs(30),
            || async { (!self.probe_passes(command)).then_some(()) },
        )
        .await;
    }

    /// Deletes the policy and waits until an update of `object` passes.
    pub async fn lift(self, object: &str) {
        self.delete();
        wait_for(
            &format!("updates of {object} passing again"),
            Duration::from_secs(30),
            || async { self.update_passes(object).then_some(()) },
        )
        .await;
    }

    /// Deletes the policy and waits until `kubectl <command> -n <ns>`
    /// passes (a server-side dry run).
    pub async fn lift_command(self, command: &[&str]) {
        self.delete();
        wait_for(
            &format!("kubectl {command:?} passing again"),
            Duration::from_secs(30),
            || async { self.probe_passes(command).then_some(()) },
        )
        .await;
    }

    fn delete(&self) {
        let _ = kubectl(&[
            "delete",
            "validatingadmissionpolicybinding,validatingadmissionpolicy",
            &self.name,
            "--ignore-not-found",
        ]);
    }
}

impl Drop for DenyUpdates {
    fn drop(&mut self) {
        self.delete();
    }
}

/// The product's EvictionAutoScaler resource.
pub fn eas_resource() -> kube::core::ApiResource {
    kube::core::ApiResource::from_gvk_with_plural(
        &kube::core::GroupVersionKind::gvk(
            "eviction-autoscaler.azure.com",
            "v1",
            "EvictionAutoScaler",
        ),
        "evictionautoscalers",
    )
}

/// The test namespace's EvictionAutoScalers.
pub fn eas_api(ns: &TestNs) -> Api<kube::core::DynamicObject> {
    Api::namespaced_with(ns.client.clone(), &ns.name, &eas_resource())
}

/// A file tests/tools/build.sh builds (`make tools`), by the variable its
/// `--print-env` names it with (`HELM_BIN`, `FAKETIME_LIB`); panics with
/// the command that builds it when it is missing.
pub fn built_tool(var: &str, tool: &str) -> PathBuf {
    let out = Command::new(repo().join("tests/tools/build.sh"))
        .arg("--print-env")
        .output()
        .expect("run tests/tools/build.sh --print-env");
    let env = String::from_utf8_lossy(&out.stdout);
    let prefix = format!("{var}=");
    let path = env
        .lines()
        .find_map(|l| l.strip_prefix(prefix.as_str()))
        .map(|p| PathBuf::from(p.trim_matches('\'')))
        .unwrap_or_else(|| panic!("build.sh prints {var}"));
    assert!(
        path.is_file(),
        "{tool} is not built ({}): run `make tools` (tests/tools/build.sh {tool})",
        path.display()
    );
    path
}

pub fn path_str(p: &Path) -> String {
    p.display().to_string()
}

/// Restarts the server with extra settings (tests/e2e/deploy-local.sh), for
/// tests that need another configuration or a crash. Returns its info.
pub fn restart_server(env: &[(&str, &str)]) -> WebhookInfo {
    let _ = deployed();
    start_server(env)
}

impl WebhookInfo {
    /// Another `serve` process with this server's certificate and
    /// ServiceAccount kubeconfig, on a free port, named `name` (its POD_NAME
    /// and log `<state>/<name>.log`, stdout and stderr). `env` adds settings.
    pub fn spawn_extra(&self, name: &str, env: &[(&str, &str)]) -> (Child, u16, PathBuf) {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let log_path = self.state.join(format!("{name}.log"));
        let log = std::fs::File::create(&log_path).expect("server log");
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_eviction-autoscaler"));
        cmd.args(["serve", "--listen", &format!("127.0.0.1:{port}")])
            .arg("--tls-cert-file")
            .arg(self.state.join("tls.crt"))
            .arg("--tls-key-file")
            .arg(self.state.join("tls.key"))
            .env("KUBECONFIG", self.state.join("kubeconfig"))
            .env("POD_NAMESPACE", "eviction-autoscaler")
            .env("POD_NAME", name)
            .env("NO_COLOR", "1")
            .stdout(log.try_clone().expect("server log"))
            .stderr(log);
        for (k, v) in env {
            cmd.env(k, v);
        }
        (cmd.spawn().expect("spawn the server"), port, log_path)
    }
}

/// tests/e2e/deploy-local.sh start, with these settings.
fn start_server(env: &[(&str, &str)]) -> WebhookInfo {
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_eviction-autoscaler"));
    let mut cmd = Command::new(repo().join("tests/e2e/deploy-local.sh"));
    cmd.arg("start")
        .env("CLUSTER_DIR", cluster_dir())
        .env("EA_BIN", &bin);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run deploy-local.sh");
    assert!(
        out.status.success(),
        "deploy-local.sh failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let state = cluster_dir().join("webhook");
    let port = std::fs::read_to_string(state.join("port"))
        .expect("port file")
        .trim()
        .parse()
        .expect("port");
    WebhookInfo { state, port }
}

/// `kill -<sig> <pid>` (`0` only asks whether the process is there);
/// whether it succeeded.
pub fn signal(pid: &str, sig: &str) -> bool {
    Command::new("kill")
        .args([&format!("-{sig}"), pid])
        .status()
        .is_ok_and(|s| s.success())
}

/// SIGTERM, then SIGKILL if the process still runs after 10 s: a replica
/// holding the Lease releases it, so the next server need not wait for it
/// to expire.
pub fn terminate(c: &mut Child) {
    signal(&c.id().to_string(), "TERM");
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if let Ok(Some(_)) = c.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = c.kill();
    let _ = c.wait();
}

/// Stops the server and removes the webhook configurations.
pub fn stop_server() {
    let out = Command::new(repo().join("tests/e2e/deploy-local.sh"))
        .arg("stop")
        .env("CLUSTER_DIR", cluster_dir())
        .output()
        .expect("run deploy-local.sh stop");
    assert!(out.status.success());
}

impl WebhookInfo {
    pub fn pid(&self) -> u32 {
        std::fs::read_to_string(self.state.join("pid"))
            .expect("pid file")
            .trim()
            .parse()
            .expect("pid")
    }
}

/// Events of one reason in a namespace.
pub fn event_count(ns: &str, reason: &str) -> usize {
    let out = kubectl_ok(&[
        "get",
        "events.events.k8s.io",
        "-n",
        ns,
        "-o",
        "jsonpath={range .items[*]}{.reason}{\"\\n\"}{end}",
    ]);
    out.lines().filter(|l| *l == reason).count()
}

/// An HPA (autoscaling/v2) for a Deployment.
pub fn hpa(name: &str, target: &str, min: i32) -> HorizontalPodAutoscaler {
    HorizontalPodAutoscaler {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        spec: Some(HorizontalPodAutoscalerSpec {
            min_replicas: Some(min),
            max_replicas: 10,
            scale_target_ref: CrossVersionObjectReference {
                api_version: Some("apps/v1".into()),
                kind: "Deployment".into(),
                name: target.into(),
            },
            ..Default::default()
        }),
        status: None,
    }
}

// ---- Helpers of the surge-safety tests (tests/e2e/surge_safety.rs and
// ---- tests/e2e_modes/surge_upgrade.rs); both test targets share this file.

/// Surge marker annotations (behaviour.md section 1).
pub const SURGE_MARKER: &str = "evictionSurgeReplicas";
pub const BASELINE_MARKER: &str = "eviction-autoscaler.azure.com/original-min-replicas";
/// Annotation on PDBs and EvictionAutoScalers the product owns.
pub const OWNED_BY: &str = "ownedBy";

/// Both surge markers are absent from these annotations; `Some(true)` when
/// both are present, `None` when only one is (a state the tests reject).
pub fn markers_present(ann: Option<&BTreeMap<String, String>>) -> Option<bool> {
    let s = ann.is_some_and(|a| a.contains_key(SURGE_MARKER));
    let b = ann.is_some_and(|a| a.contains_key(BASELINE_MARKER));
    (s == b).then_some(s)
}

/// Waits until HPA `name` is at minReplicas `min` with both surge markers
/// present (`Some(true)`), both absent (`Some(false)`), or either (`None`).
pub async fn wait_hpa_min(
    hpas: &Api<HorizontalPodAutoscaler>,
    name: &str,
    min: i32,
    markers: Option<bool>,
    timeout: Duration,
) {
    let with = match markers {
        Some(true) => " with markers",
        Some(false) => " without markers",
        None => "",
    };
    let what = format!("HPA {name} at minReplicas {min}{with}");
    wait_for(&what, timeout, || async {
        let h = hpas.get(name).await.ok()?;
        let at = h.spec.as_ref().and_then(|s| s.min_replicas) == Some(min);
        let marked = markers_present(h.metadata.annotations.as_ref());
        (at && markers.is_none_or(|want| marked == Some(want))).then_some(())
    })
    .await;
}

/// `kubectl patch` of `object`'s (`kind/name`) `spec.<field>` to each of
/// `values` in turn, through the object itself, as a user would.
pub fn patch_spec(ns: &TestNs, object: &str, field: &str, values: &[i32]) {
    for v in values {
        kubectl_ok(&[
            "patch",
            object,
            "-n",
            &ns.name,
            "--type=merge",
            "-p",
            &format!(r#"{{"spec":{{"{field}":{v}}}}}"#),
        ]);
    }
}

/// [`patch_spec`] of Deployment `name`'s replicas; then who the apiserver
/// records as having written them (`surge::writer`).
pub async fn patch_replicas(ns: &TestNs, name: &str, values: &[i32]) -> ReplicasWriter {
    patch_spec(ns, &format!("deployment/{name}"), "replicas", values);
    let deps: Api<Deployment> = ns.api();
    let d = deps.get(name).await.expect("Deployment");
    let writer = replicas_writer(&d.metadata);
    eprintln!(
        "{name} written by {writer:?}: {:?}",
        d.metadata.managed_fields
    );
    writer
}

/// A RollingUpdate strategy with this maxSurge (and maxUnavailable 0).
pub fn rolling_max_surge(mut d: Deployment, max_surge: IntOrString) -> Deployment {
    if let Some(spec) = d.spec.as_mut() {
        spec.strategy = Some(DeploymentStrategy {
            type_: Some("RollingUpdate".into()),
            rolling_update: Some(RollingUpdateDeployment {
                max_surge: Some(max_surge),
                max_unavailable: Some(IntOrString::Int(0)),
            }),
        });
    }
    d
}

/// Pods spread over the nodes (maxSkew 1 by hostname) instead of preferring one.
pub fn spread_one_per_node(mut d: Deployment) -> Deployment {
    let app = d.metadata.name.clone().unwrap_or_default();
    if let Some(spec) = d.spec.as_mut().and_then(|s| s.template.spec.as_mut()) {
        spec.affinity = None;
        spec.topology_spread_constraints = Some(vec![serde_json::from_value(serde_json::json!({
            "maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
            "whenUnsatisfiable": "ScheduleAnyway",
            "labelSelector": {"matchLabels": {"app": app}}
        }))
        .expect("spread")]);
    }
    d
}

/// Pods on exactly `node` (a nodeSelector), whatever the scheduler prefers.
pub fn pinned_to(mut d: Deployment, node: &str) -> Deployment {
    if let Some(spec) = d.spec.as_mut().and_then(|s| s.template.spec.as_mut()) {
        spec.node_selector = Some([("kubernetes.io/hostname".into(), node.into())].into());
    }
    d
}

/// `spec.replicas` (default 1) and whether the surge markers are on the Deployment.
pub async fn deployment_state(ns: &TestNs, name: &str) -> (i32, Option<bool>) {
    let deps: Api<Deployment> = ns.api();
    let d = deps
        .get(name)
        .await
        .unwrap_or_else(|e| panic!("get deployment {name}: {e}"));
    (
        d.spec.and_then(|s| s.replicas).unwrap_or(1),
        markers_present(d.metadata.annotations.as_ref()),
    )
}

/// Waits until the Deployment has `want` replicas and the markers are (or are not) on it.
pub async fn wait_deployment(ns: &TestNs, name: &str, want: i32, markers: bool, timeout: Duration) {
    wait_for(
        &format!("Deployment {name} at {want} replicas with markers {markers}"),
        timeout,
        || async { (deployment_state(ns, name).await == (want, Some(markers))).then_some(()) },
    )
    .await;
}

/// Deployment `name` (3 replicas, maxSurge 100%, its pods on `node`)
/// surged by a cordon of `node` (left cordoned). Returns the surge, and a
/// GitOps tool's manifest taken from the live object: its spec with the
/// surged replicas and both markers as we wrote them.
pub async fn surged_and_a_copy(ns: &TestNs, name: &str, node: &str) -> (i32, Deployment) {
    use eviction_autoscaler::names::{ORIGINAL_MIN_REPLICAS, SURGE_REPLICAS};
    let deps: Api<Deployment> = ns.api();
    let spec = |replicas: i32| {
        rolling_max_surge(
            deployment(name, replicas, Some(node)),
            IntOrString::String("100%".into()),
        )
    };
    deps.create(&PostParams::default(), &spec(3))
        .await
        .expect("create Deployment");
    let on_node = ready_on_node(ns, name, 3, node).await.len() as i32;
    wait_pdb_blocking(ns, name, 3).await;
    kubectl_ok(&["cordon", node]);
    let t = 3 + on_node;
    wait_deployment(ns, name, t, true, Duration::from_secs(30)).await;
    let live = deps.get(name).await.expect("the surged Deployment");
    let ours = live.metadata.annotations.unwrap_or_default();
    let marker = |k: &str| ours.get(k).cloned().expect("our marker on the live object");
    assert_eq!(
        (marker(ORIGINAL_MIN_REPLICAS), marker(SURGE_REPLICAS)),
        ("3".to_string(), t.to_string()),
        "our markers"
    );
    let mut copy = spec(t);
    copy.metadata.annotations = Some(
        [ORIGINAL_MIN_REPLICAS, SURGE_REPLICAS]
            .into_iter()
            .map(|k| (k.to_string(), marker(k)))
            .collect(),
    );
    (t, copy)
}

/// The Deployment is at `baseline` without markers, and still is after more
/// than another cooldown (5 s in e2e): the revert happened once and stuck.
pub async fn assert_settled_at(ns: &TestNs, name: &str, baseline: i32, timeout: Duration) {
    wait_deployment(ns, name, baseline, false, timeout).await;
    let stays = Instant::now();
    tokio::time::sleep(Duration::from_secs(7)).await;
    note_wait("baseline kept 7 s", stays);
    assert_eq!(
        deployment_state(ns, name).await,
        (baseline, Some(false)),
        "Deployment {name} did not stay at its baseline {baseline} without markers"
    );
}

/// Waits until PDB `name` has `minAvailable: want` (an int); returns it.
pub async fn wait_min(ns: &TestNs, name: &str, want: i32) -> PodDisruptionBudget {
    wait_pdb(
        ns,
        name,
        &format!("PDB {name} at minAvailable {want}"),
        |p| p.spec.as_ref().and_then(|s| s.min_available.clone()) == Some(IntOrString::Int(want)),
    )
    .await
}

/// The PDB's status is current and it allows no disruption with `healthy` pods.
pub async fn wait_pdb_blocking(ns: &TestNs, name: &str, healthy: i32) -> PodDisruptionBudget {
    wait_pdb(
        ns,
        name,
        &format!("PDB {name} settled at {healthy} healthy with no disruption allowed"),
        |p| {
            p.status.as_ref().is_some_and(|s| {
                s.observed_generation == p.metadata.generation
                    && s.current_healthy == healthy
                    && s.disruptions_allowed == 0
            })
        },
    )
    .await
}

/// Whether Deployment `deployment` is the PDB's controller (our reference).
pub fn controlled_by(p: &PodDisruptionBudget, deployment: &str) -> bool {
    p.metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.kind == "Deployment" && o.name == deployment && o.controller == Some(true))
}

/// Whether the PDB carries `ownedBy: EvictionAutoScaler` (one of ours).
pub fn is_owned(p: &PodDisruptionBudget) -> bool {
    p.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(OWNED_BY))
        .is_some_and(|v| v == "EvictionAutoScaler")
}

/// The names of the namespace's PDBs, sorted.
pub async fn pdb_names(pdbs: &Api<PodDisruptionBudget>) -> Vec<String> {
    let l = pdbs.list(&Default::default()).await.expect("list").items;
    let mut n: Vec<String> = l.into_iter().filter_map(|p| p.metadata.name).collect();
    n.sort();
    n
}

/// Polls the namespace's PDBs every 100 ms until `want` is the only one
/// (60 s at most); fails at once if two ever exist together (the
/// namespace's pods are all under one selector family in the tests using
/// it: two PDBs there are two budgets over a pod).
pub async fn wait_sole_pdb(ns: &TestNs, want: &str) {
    let pdbs: Api<PodDisruptionBudget> = ns.api();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let names = pdb_names(&pdbs).await;
        assert!(names.len() <= 1, "two PDBs at once: {names:?}");
        if names == [want] {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{want} the only PDB: {names:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Names of the PDBs in the namespace that carry `ownedBy: EvictionAutoScaler`.
pub async fn owned_pdbs(ns: &TestNs) -> Vec<String> {
    let api: Api<PodDisruptionBudget> = ns.api();
    api.list(&ListParams::default())
        .await
        .expect("list PDBs")
        .items
        .into_iter()
        .filter(is_owned)
        .filter_map(|p| p.metadata.name)
        .collect()
}

/// `kubectl get` of the EvictionAutoScaler `name` in `ns`, `-o <output>`
/// (`yaml`, `jsonpath=...`); the raw output, so a missing one is seen.
pub fn eas_get(ns: &str, name: &str, output: &str) -> Output {
    kubectl(&[
        "-n",
        ns,
        "get",
        "evictionautoscalers.eviction-autoscaler.azure.com",
        name,
        "-o",
        output,
    ])
}

/// Names of the EvictionAutoScalers in the namespace.
pub fn eviction_autoscalers(ns: &str) -> Vec<String> {
    kubectl_ok(&[
        "get",
        "evictionautoscalers.eviction-autoscaler.azure.com",
        "-n",
        ns,
        "-o",
        "jsonpath={range .items[*]}{.metadata.name}{\"\\n\"}{end}",
    ])
    .lines()
    .map(str::to_string)
    .filter(|l| !l.is_empty())
    .collect()
}

/// How many times Events of this reason were emitted in the namespace: an
/// events.k8s.io Event repeated with the same note is one object whose
/// `series.count` grows, so counting objects would miss repeats.
pub fn event_total(ns: &str, reason: &str) -> usize {
    let out = kubectl_ok(&[
        "get",
        "events.events.k8s.io",
        "-n",
        ns,
        "-o",
        "jsonpath={range .items[*]}{.reason}{\"\\t\"}{.series.count}{\"\\n\"}{end}",
    ]);
    out.lines()
        .filter_map(|l| {
            let (r, count) = l.split_once('\t').unwrap_or((l, ""));
            (r == reason).then(|| count.trim().parse::<usize>().unwrap_or(1).max(1))
        })
        .sum()
}

/// Waits up to `within` for an Event of `reason` in `ns`, then 3 s more,
/// and asserts there is exactly one: said, and said once.
pub async fn assert_event_once(ns: &str, reason: &str, within: Duration) {
    wait_for(&format!("a {reason} Event"), within, || async {
        (event_total(ns, reason) > 0).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(event_total(ns, reason), 1, "said once: {}", event_log(ns));
}

/// Reason and note of every Event in the namespace, for failure messages.
pub fn event_log(ns: &str) -> String {
    kubectl_ok(&[
        "get",
        "events.events.k8s.io",
        "-n",
        ns,
        "-o",
        "jsonpath={range .items[*]}{.type} {.reason} x{.series.count}: {.note}{\"\\n\"}{end}",
    ])
}

/// One `kubectl drain` run.
pub struct DrainRun {
    pub ok: bool,
    pub output: String,
    pub took: Duration,
}

/// `kubectl drain` of one node for the pods matching `selector` (150 s
/// timeout unless `extra` sets another; the last flag wins).
pub async fn drain_node(node: &str, selector: &str, extra: &[&str]) -> DrainRun {
    let mut args: Vec<String> = vec![
        "drain".into(),
        node.into(),
        format!("--pod-selector={selector}"),
        "--ignore-daemonsets".into(),
        "--delete-emptydir-data".into(),
        "--timeout=150s".into(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    let started = Instant::now();
    let out = tokio::task::spawn_blocking(move || {
        let a: Vec<&str> = args.iter().map(String::as_str).collect();
        kubectl(&a)
    })
    .await
    .expect("drain task");
    note_wait("kubectl drain", started);
    DrainRun {
        ok: out.status.success(),
        output: format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
        took: started.elapsed(),
    }
}

/// `kubectl drain` of `node` with the other nodes tainted until `blocked`
/// says the webhook blocked or held an eviction. The drain's cordon alone
/// starts the surge; were kubectl slow to send its evictions (a loaded
/// machine), the surge's pods could be Ready before them and nothing would
/// be blocked. The taints keep the surge's pods Pending until then.
pub async fn drain_blocked_first(
    node: &'static str,
    selector: &'static str,
    blocked: impl Fn() -> bool,
) -> DrainRun {
    let others: Vec<&str> = NODE_NAMES.iter().copied().filter(|n| *n != node).collect();
    let taint = format!("{LATER_TAINT}=1:NoSchedule");
    for n in &others {
        kubectl_ok(&["taint", "node", n, &taint]);
    }
    let drain = tokio::spawn(drain_node(node, selector, &[]));
    wait_for(
        "an eviction blocked or held by the webhook",
        Duration::from_secs(60),
        || async { blocked().then_some(()) },
    )
    .await;
    for n in &others {
        kubectl_ok(&["taint", "node", n, &format!("{LATER_TAINT}-")]);
    }
    drain.await.expect("drain task")
}

/// Samples a Deployment's `spec.replicas` every 100 ms.
pub struct ReplicaSampler {
    stop: tokio::sync::watch::Sender<bool>,
    task: tokio::task::JoinHandle<Vec<(Instant, i32)>>,
}

impl ReplicaSampler {
    pub fn start(ns: &TestNs, name: &str) -> ReplicaSampler {
        let deps: Api<Deployment> = ns.api();
        let name = name.to_string();
        let (stop, mut stopped) = tokio::sync::watch::channel(false);
        let task = tokio::spawn(async move {
            let mut samples = Vec::new();
            // One last sample after the stop: what the caller just waited
            // for is then always in the trace.
            loop {
                if let Ok(d) = deps.get(&name).await {
                    samples.push((Instant::now(), d.spec.and_then(|s| s.replicas).unwrap_or(1)));
                }
                if *stopped.borrow() {
                    break;
                }
                tokio::select! {
                    _ = stopped.changed() => {}
                    _ = tokio::time::sleep(Duration::from_millis(100)) => {}
                }
            }
            samples
        });
        ReplicaSampler { stop, task }
    }

    pub async fn finish(self) -> Vec<(Instant, i32)> {
        let _ = self.stop.send(true);
        self.task.await.unwrap_or_default()
    }
}

/// Replica-seconds above `baseline` over the samples.
pub fn extra_replica_seconds(samples: &[(Instant, i32)], baseline: i32) -> f64 {
    samples
        .windows(2)
        .map(|w| f64::from((w[0].1 - baseline).max(0)) * (w[1].0 - w[0].0).as_secs_f64())
        .sum()
}

impl AvailabilityWatcher {
    /// Like [`AvailabilityWatcher::start`], for any label selector (pods of
    /// several Deployments under one PDB).
    pub fn start_selector(ns: &TestNs, selector: &str) -> AvailabilityWatcher {
        let min_seen = Arc::new(Mutex::new(None));
        let (stop, mut stopped) = tokio::sync::watch::channel(false);
        let pods: Api<Pod> = ns.api();
        let sel = selector.to_string();
        let m = min_seen.clone();
        let task = tokio::spawn(async move {
            loop {
                if let Ok(list) = pods.list(&ListParams::default().labels(&sel)).await {
                    let ready = list.items.iter().filter(|p| pod_is_ready(p)).count();
                    if let Ok(mut g) = m.lock() {
                        *g = Some(g.map_or(ready, |v: usize| v.min(ready)));
                    }
                }
                tokio::select! {
                    _ = stopped.changed() => break,
                    _ = tokio::time::sleep(Duration::from_millis(100)) => {}
                }
            }
        });
        AvailabilityWatcher {
            min_seen,
            stop,
            task,
        }
    }
}

/// The finalizer tests put on pods to keep them Terminating.
pub const HOLD_FINALIZER: &str = "e2e.eviction-autoscaler.test/hold";

/// Takes [`HOLD_FINALIZER`] off every pod of the cluster that carries it
/// (pods of namespaces kept by failed runs, deleted at the next start).
fn release_held_pods() {
    let out = kubectl(&[
        "get",
        "pods",
        "-A",
        "-o",
        "jsonpath={range .items[*]}{.metadata.namespace} {.metadata.name} {.metadata.finalizers}{\"\\n\"}{end}",
    ]);
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let mut parts = line.splitn(3, ' ');
        let (Some(ns), Some(name), Some(finalizers)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        if finalizers.contains(HOLD_FINALIZER) {
            drop_finalizers(ns, &format!("pod/{name}"));
        }
    }
}

/// Removes every finalizer of `object` (`pod/<name>`) in `ns`.
fn drop_finalizers(ns: &str, object: &str) {
    let _ = kubectl(&[
        "-n",
        ns,
        "patch",
        object,
        "--type=merge",
        "-p",
        r#"{"metadata":{"finalizers":null}}"#,
    ]);
}

/// Takes the test's finalizer off every pod of the namespace on drop, so
/// the namespace can go whatever the test did.
pub struct ReleasePods(pub String);

impl Drop for ReleasePods {
    fn drop(&mut self) {
        let out = kubectl(&["-n", &self.0, "get", "pods", "-o", "name"]);
        for pod in String::from_utf8_lossy(&out.stdout).lines() {
            drop_finalizers(&self.0, pod);
        }
    }
}

/// A ValidatingWebhookConfiguration on one resource of one namespace,
/// pointing at a port that accepts connections and never answers: every
/// matching request takes its timeoutSeconds, then passes (failurePolicy
/// Ignore) or fails with a 500 (Fail). Deleted on drop.
pub struct SlowEvents {
    name: String,
    _hole: std::net::TcpListener,
}

/// [`SlowEvents`] for any resource.
pub type HungWebhook = SlowEvents;

impl SlowEvents {
    /// Installed, and an Event in `ns` seen taking about `delay` (whole
    /// seconds: the webhook's timeoutSeconds), else this test could not fail.
    pub async fn install(test_ns: &TestNs, delay: Duration) -> SlowEvents {
        let slow = Self::apply(
            test_ns,
            &["", "events.k8s.io"],
            "events",
            &["CREATE", "UPDATE"],
            "Ignore",
            delay,
        );
        let mut took = Duration::ZERO;
        for n in 0..20 {
            took = time_one_event(test_ns, n).await;
            if took >= delay - Duration::from_millis(500) {
                return slow;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        panic!("the webhook on Events does not slow them: {took:?}");
    }

    /// The webhook on `resource` of `groups` for `operations`; the caller
    /// checks that it is in force.
    pub fn apply(
        test_ns: &TestNs,
        groups: &[&str],
        resource: &str,
        operations: &[&str],
        failure_policy: &str,
        delay: Duration,
    ) -> SlowEvents {
        let ns = test_ns.name.as_str();
        // Bound and never accepted: the kernel completes the TCP handshake
        // (backlog), the TLS handshake never comes.
        let hole = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = hole.local_addr().expect("addr").port();
        let name = format!("e2e-slow-{resource}-{ns}");
        let config = serde_json::json!({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": name},
            "webhooks": [{
                "name": "slow.e2e.local",
                "clientConfig": {"url": format!("https://127.0.0.1:{port}/")},
                "rules": [{
                    "apiGroups": groups, "apiVersions": ["v1"],
                    "operations": operations, "resources": [resource]
                }],
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}},
                "failurePolicy": failure_policy,
                "sideEffects": "None",
                "admissionReviewVersions": ["v1"],
                "timeoutSeconds": delay.as_secs()
            }]
        });
        let path = std::env::temp_dir().join(format!("{name}.json"));
        std::fs::write(&path, config.to_string()).expect("write webhook config");
        kubectl_ok(&["apply", "-f", &path_str(&path)]);
        let _ = std::fs::remove_file(&path);
        SlowEvents { name, _hole: hole }
    }
}

impl Drop for SlowEvents {
    fn drop(&mut self) {
        let _ = kubectl(&[
            "delete",
            "validatingwebhookconfiguration",
            &self.name,
            "--ignore-not-found",
        ]);
    }
}

/// Creates an Event in `ns` and returns how long the apiserver took.
async fn time_one_event(ns: &TestNs, n: usize) -> Duration {
    let api: Api<Event> = ns.api();
    let ev = Event {
        metadata: ObjectMeta {
            name: Some(format!("probe-{n}")),
            ..Default::default()
        },
        event_time: Some(MicroTime(k8s_openapi::jiff::Timestamp::now())),
        regarding: Some(ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Pod".into()),
            name: Some("probe".into()),
            namespace: Some(ns.name.clone()),
            ..Default::default()
        }),
        reporting_controller: Some("e2e/probe".into()),
        reporting_instance: Some("e2e".into()),
        action: Some("Probe".into()),
        reason: Some("Probe".into()),
        type_: Some("Normal".into()),
        ..Default::default()
    };
    let t = Instant::now();
    api.create(&PostParams::default(), &ev)
        .await
        .expect("create probe Event");
    t.elapsed()
}

/// KEDA's CRD (tests/e2e/keda-crd.yaml, no operator) applied and Established.
pub fn install_keda_crd() {
    // One at a time: two tests applying it at once on a fresh cluster both
    // create, and one fails with AlreadyExists (seen in session 50).
    static ONE: Mutex<()> = Mutex::new(());
    let _one = ONE.lock().unwrap_or_else(|e| e.into_inner());
    kubectl_ok(&[
        "apply",
        "-f",
        &path_str(&repo().join("tests/e2e/keda-crd.yaml")),
    ]);
    kubectl_ok(&[
        "wait",
        "--for=condition=Established",
        "crd/scaledobjects.keda.sh",
        "--timeout=60s",
    ]);
}

/// Waits until the server `wh` watches ScaledObjects (it looks for KEDA's
/// API every 5 s): a drain before that would not see them.
pub async fn wait_keda_watched(wh: &WebhookInfo) {
    wait_for(
        "the server watches ScaledObjects",
        Duration::from_secs(30),
        || async { wh.log().contains("KEDA ScaledObjects found").then_some(()) },
    )
    .await;
}

/// The `app` label a PDB's selector matches, if any.
pub fn selector_app(p: &PodDisruptionBudget) -> Option<&str> {
    p.spec
        .as_ref()
        .and_then(|s| s.selector.as_ref())
        .and_then(|s| s.match_labels.as_ref())
        .and_then(|l| l.get("app"))
        .map(String::as_str)
}

pub fn keda_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("keda.sh", "v1alpha1", "ScaledObject"),
        "scaledobjects",
    )
}

/// The ScaledObjects of `ns`.
pub fn so_api(ns: &TestNs) -> Api<DynamicObject> {
    Api::namespaced_with(ns.client.clone(), &ns.name, &keda_resource())
}

/// A ScaledObject `name` (minimum `min`, maximum 10, a CPU trigger)
/// targeting the Deployment of that name.
pub fn scaled_object(name: &str, min: i64) -> DynamicObject {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject",
        "metadata": {"name": name},
        "spec": {"scaleTargetRef": {"name": name}, "minReplicaCount": min, "maxReplicaCount": 10,
                 "triggers": [{"type": "cpu", "metadata": {"value": "50"}}]}
    }))
    .expect("scaled object")
}

/// Waits until ScaledObject `name` is back at minReplicaCount `min` without markers.
pub async fn wait_so_restored(so_api: &Api<DynamicObject>, name: &str, min: i64) {
    wait_for(
        &format!("{name}'s minReplicaCount back at {min}, markers removed"),
        Duration::from_secs(60),
        || async {
            let so = so_api.get(name).await.ok()?;
            let marked = so
                .metadata
                .annotations
                .as_ref()
                .is_some_and(|a| a.contains_key(SURGE_MARKER));
            (so.data["spec"]["minReplicaCount"].as_i64() == Some(min) && !marked).then_some(())
        },
    )
    .await;
}

/// [`scaled_object`] created in `ns`; the API of ScaledObjects in `ns`.
pub async fn create_scaled_object(ns: &TestNs, name: &str, min: i64) -> Api<DynamicObject> {
    let api = so_api(ns);
    api.create(&PostParams::default(), &scaled_object(name, min))
        .await
        .expect("create ScaledObject");
    api
}

/// KEDA's operator as far as its HPA goes (kedacore/keda,
/// controllers/keda/hpa.go): `keda-hpa-<name>`, controlled by the
/// ScaledObject, made from it with its annotations copied and its minimum
/// (at least 1), updated whenever they differ; deleted while the
/// ScaledObject is paused by `autoscaling.keda.sh/paused` or
/// `paused-replicas` (KEDA stops its scale loop and deletes its HPA,
/// controllers/keda/scaledobject_controller.go). With `paused-replicas: N`
/// it scales the Deployment to N (the scale subresource) and records N in
/// the status, and scales it to N again at each later change of the
/// ScaledObject's spec that finds it elsewhere
/// (`checkIfTargetResourceReachPausedCount`); the record goes with the
/// annotation. Simpler than KEDA ([`KedaOperator::start`]): it deletes its
/// HPA at once, where KEDA first sets it to a minimum and maximum of N and
/// may leave it there (kedacore/keda#7663); [`KedaOperator::start_holding`]
/// does that (with `paused-replicas`, its HPA kept at a minimum and maximum
/// of N, at least 1; `paused` alone still deletes it). Records every field manager
/// other than its own that wrote the HPA (not its status, which the HPA
/// controller writes): writes of someone else, such as ours.
pub struct KedaOperator {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    paused: std::sync::Arc<std::sync::atomic::AtomicBool>,
    task: tokio::task::JoinHandle<(usize, Vec<String>)>,
}

pub const KEDA_MANAGER: &str = "keda-operator";

impl KedaOperator {
    pub fn start(ns: &TestNs, name: &str) -> KedaOperator {
        Self::spawn(ns, name, false)
    }

    /// With `paused-replicas: N`, its HPA kept at a minimum and maximum of N
    /// (at least 1), as KEDA leaves it once the Deployment is at N.
    pub fn start_holding(ns: &TestNs, name: &str) -> KedaOperator {
        Self::spawn(ns, name, true)
    }

    fn spawn(ns: &TestNs, name: &str, hold: bool) -> KedaOperator {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let paused = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let held = paused.clone();
        let so_api = so_api(ns);
        let hpas: Api<HorizontalPodAutoscaler> = ns.api();
        let deps: Api<Deployment> = ns.api();
        let (name, hpa_name) = (name.to_string(), format!("keda-hpa-{name}"));
        let flag = stop.clone();
        let task = tokio::spawn(async move {
            let pp = PostParams {
                field_manager: Some(KEDA_MANAGER.into()),
                ..Default::default()
            };
            let patch_params = PatchParams {
                field_manager: Some(KEDA_MANAGER.into()),
                ..Default::default()
            };
            let (mut writes, mut foreign) = (0usize, Vec::new());
            // The ScaledObject's generation KEDA last reconciled.
            let mut last_generation: Option<Option<i64>> = None;
            while !flag.load(std::sync::atomic::Ordering::SeqCst) {
                tokio::time::sleep(Duration::from_millis(200)).await;
                if held.load(std::sync::atomic::Ordering::SeqCst) {
                    continue;
                }
                let Ok(so) = so_api.get(&name).await else {
                    continue;
                };
                // Go's strconv.ParseBool false; anything else pauses.
                let paused = so
                    .metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get("autoscaling.keda.sh/paused"))
                    .is_some_and(|v| {
                        !matches!(v.as_str(), "0" | "f" | "F" | "false" | "FALSE" | "False")
                    });
                let paused_replicas = so
                    .metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get("autoscaling.keda.sh/paused-replicas"))
                    .and_then(|v| v.parse::<i32>().ok());
                let generation = so.metadata.generation;
                let reconciled = last_generation.replace(generation) != Some(generation);
                if let Some(n) = paused_replicas {
                    let recorded = so.data["status"]["pausedReplicaCount"].as_i64();
                    let replicas = deps.get(&name).await.ok().and_then(|d| d.spec?.replicas);
                    let at_count = replicas == Some(n);
                    if (recorded != Some(i64::from(n)) || reconciled) && !at_count {
                        let scale = serde_json::json!({"spec": {"replicas": n}});
                        if deps
                            .patch_scale(&name, &patch_params, &Patch::Merge(&scale))
                            .await
                            .is_ok()
                        {
                            writes += 1;
                        }
                    }
                    if recorded != Some(i64::from(n)) {
                        let status = serde_json::json!({"status": {"pausedReplicaCount": n}});
                        let _ = so_api
                            .patch_status(&name, &patch_params, &Patch::Merge(&status))
                            .await;
                    }
                }
                if paused_replicas.is_none() && !so.data["status"]["pausedReplicaCount"].is_null() {
                    // KEDA's removePausedStatus.
                    let status = serde_json::json!({"status": {"pausedReplicaCount": null}});
                    let _ = so_api
                        .patch_status(&name, &patch_params, &Patch::Merge(&status))
                        .await;
                }
                // KEDA's `newHPAForScaledObject`: at the paused count, both bounds.
                let hold_at = paused_replicas.filter(|_| hold).map(|n| n.max(1));
                if (paused || paused_replicas.is_some()) && hold_at.is_none() {
                    if matches!(hpas.get_opt(&hpa_name).await, Ok(Some(_)))
                        && hpas
                            .delete(&hpa_name, &DeleteParams::default())
                            .await
                            .is_ok()
                    {
                        writes += 1;
                    }
                    continue;
                }
                let min = so.data["spec"]["minReplicaCount"]
                    .as_i64()
                    .unwrap_or(0)
                    .max(1) as i32;
                let max = hpa(&hpa_name, &name, min)
                    .spec
                    .map_or(10, |s| s.max_replicas);
                let (min, max) = hold_at.map_or((min, max), |n| (n, n));
                let annotations = so.metadata.annotations.clone();
                let Ok(current) = hpas.get_opt(&hpa_name).await else {
                    continue;
                };
                let Some(mut h) = current else {
                    let mut h = hpa(&hpa_name, &name, min);
                    if let Some(s) = h.spec.as_mut() {
                        s.max_replicas = max;
                    }
                    h.metadata.annotations = annotations;
                    h.metadata.owner_references = Some(vec![OwnerReference {
                        api_version: "keda.sh/v1alpha1".into(),
                        kind: "ScaledObject".into(),
                        name: name.clone(),
                        uid: so.metadata.uid.clone().unwrap_or_default(),
                        controller: Some(true),
                        block_owner_deletion: Some(true),
                    }]);
                    if hpas.create(&pp, &h).await.is_ok() {
                        writes += 1;
                    }
                    continue;
                };
                for m in h.metadata.managed_fields.iter().flatten() {
                    let manager = m.manager.clone().unwrap_or_default();
                    if manager != KEDA_MANAGER
                        && m.subresource.as_deref() != Some("status")
                        && !foreign.contains(&manager)
                    {
                        foreign.push(manager);
                    }
                }
                let spec_min = h.spec.as_ref().and_then(|s| s.min_replicas);
                let spec_max = h.spec.as_ref().map(|s| s.max_replicas);
                if spec_min != Some(min)
                    || spec_max != Some(max)
                    || h.metadata.annotations != annotations
                {
                    h.metadata.annotations = annotations;
                    if let Some(s) = h.spec.as_mut() {
                        s.min_replicas = Some(min);
                        s.max_replicas = max;
                    }
                    if hpas.replace(&hpa_name, &pp, &h).await.is_ok() {
                        writes += 1;
                    }
                }
            }
            (writes, foreign)
        });
        KedaOperator { stop, paused, task }
    }

    /// Stops (true) or resumes (false) its work: an operator that lags.
    pub fn pause(&self, paused: bool) {
        self.paused
            .store(paused, std::sync::atomic::Ordering::SeqCst);
    }

    /// Its writes, and the other field managers seen on the HPA.
    pub async fn finish(self) -> (usize, Vec<String>) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        self.task.await.expect("KEDA operator task")
    }
}

/// Writes as the Go project's client does: its binary, `/manager`, names
/// its User-Agent, which the apiserver records as the field manager.
pub fn go_client() -> PostParams {
    PostParams {
        field_manager: Some("manager".into()),
        ..Default::default()
    }
}

/// What the Go project's older versions leave mid-surge (made while this
/// product is not running): Deployment `name` at `surged` with their lone
/// marker, written by their client (field manager `manager`, its binary's
/// name, so the number reads as someone's); their PDB (ownedBy, minimum
/// `baseline`); their EvictionAutoScaler with the baseline in
/// `status.minReplicas`.
pub async fn legacy_go_surge(ns: &TestNs, name: &str, surged: i32, baseline: i32) {
    let deps: Api<Deployment> = ns.api();
    let mut d = deployment(name, surged, None);
    d.metadata.annotations = Some([(SURGE_MARKER.to_string(), surged.to_string())].into());
    deps.create(&go_client(), &d)
        .await
        .expect("create Deployment");
    let mut pdb = user_pdb(name, name, Some(IntOrString::Int(baseline)), None);
    pdb.metadata.annotations = Some(
        [
            (OWNED_BY.to_string(), "EvictionAutoScaler".to_string()),
            ("target".to_string(), name.to_string()),
        ]
        .into(),
    );
    let pdbs: Api<PodDisruptionBudget> = ns.api();
    pdbs.create(&PostParams::default(), &pdb)
        .await
        .expect("create the Go project's PDB");
    let eas = serde_json::json!({
        "apiVersion": "eviction-autoscaler.azure.com/v1", "kind": "EvictionAutoScaler",
        "metadata": {"name": name, "namespace": ns.name,
                     "annotations": {OWNED_BY: "EvictionAutoScaler", "target": name}},
        "spec": {"targetName": name, "targetKind": "deployment"}
    });
    let path =
        std::env::temp_dir().join(format!("e2e-legacy-eas-{}-{name}.json", std::process::id()));
    std::fs::write(&path, eas.to_string()).expect("write EvictionAutoScaler");
    kubectl_ok(&["apply", "-f", &path_str(&path)]);
    let _ = std::fs::remove_file(&path);
    kubectl_ok(&[
        "-n",
        &ns.name,
        "patch",
        "evictionautoscalers.eviction-autoscaler.azure.com",
        name,
        "--subresource=status",
        "--type=merge",
        "-p",
        &format!(r#"{{"status":{{"minReplicas":{baseline}}}}}"#),
    ]);
}

/// Samples the `minAvailable` of PDB `name` every 100 ms until
/// [`PdbSampler::finish`], which returns the set of values seen.
pub struct PdbSampler {
    stop: Arc<std::sync::atomic::AtomicBool>,
    task: tokio::task::JoinHandle<std::collections::BTreeSet<i32>>,
}

impl PdbSampler {
    pub fn start(ns: &TestNs, name: &str) -> PdbSampler {
        let pdbs: Api<PodDisruptionBudget> = ns.api();
        let name = name.to_string();
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = stop.clone();
        let task = tokio::spawn(async move {
            let mut seen = std::collections::BTreeSet::new();
            while !flag.load(std::sync::atomic::Ordering::SeqCst) {
                if let Ok(p) = pdbs.get(&name).await {
                    if let Some(IntOrString::Int(m)) = p.spec.and_then(|s| s.min_available) {
                        seen.insert(m);
                    }
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            seen
        });
        PdbSampler { stop, task }
    }

    pub async fn finish(self) -> std::collections::BTreeSet<i32> {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        self.task.await.expect("PDB sampler task")
    }
}

/// A bare pod (no Deployment) with these labels, run by kwok like any other.
pub fn bare_pod(name: &str, labels: &[(&str, &str)]) -> k8s_openapi::api::core::v1::Pod {
    let mut template = deployment("x", 1, None).spec.expect("spec").template;
    if let Some(m) = template.metadata.as_mut() {
        m.labels = Some(
            labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        );
        m.name = Some(name.into());
    }
    k8s_openapi::api::core::v1::Pod {
        metadata: template.metadata.unwrap_or_default(),
        spec: template.spec,
        status: None,
    }
}

/// A Deployment with these selector and template labels.
pub fn labelled(name: &str, selector: &[(&str, &str)], template: &[(&str, &str)]) -> Deployment {
    let map = |kv: &[(&str, &str)]| -> std::collections::BTreeMap<String, String> {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    let mut d = deployment(name, 2, None);
    if let Some(spec) = d.spec.as_mut() {
        spec.selector.match_labels = Some(map(selector));
        if let Some(m) = spec.template.metadata.as_mut() {
            m.labels = Some(map(template));
        }
    }
    d
}

/// Takes the finalizers off these pods when dropped, however a test ends: a
/// pod a test holds terminating with one would keep its namespace from
/// being deleted, for good.
pub struct Unhold {
    pub namespace: String,
    pub pods: &'static [&'static str],
}

impl Drop for Unhold {
    fn drop(&mut self) {
        for pod in self.pods {
            let _ = kubectl(&[
                "patch",
                "pod",
                pod,
                "-n",
                &self.namespace,
                "--type=merge",
                "-p",
                r#"{"metadata":{"finalizers":null}}"#,
            ]);
        }
    }
}
