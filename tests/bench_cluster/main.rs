//! `make bench-cluster` (`cargo test --release --test bench_cluster`): the product on the local control plane at scale
//! (issue 9, bench items 3 and 4). Needs a running cluster (`make cluster-up`);
//! starts the server itself (tests/e2e/deploy-local.sh, the binary in EA_BIN).
//!
//! 3. Convergence: BENCH_DEPLOYMENTS (2,000) Deployments created at once across
//!    20 namespaces: time until each has its PDB and EvictionAutoScaler, the
//!    product's API requests per Deployment and CPU seconds; then the time
//!    until their pods run (the controller-manager makes them at its own
//!    pace, each marking its namespace) and the CPU meanwhile; then
//!    BENCH_STEADY seconds (600) of steady state: writes per minute and CPU.
//! 4. Drains: BENCH_DRAIN_DEPLOYMENTS (100) Deployments of 3 replicas on one
//!    node (300 pods); three nodes drained one after another like a managed
//!    upgrade, with the product, and again with the product off and budgets
//!    that never block. Drain time, extra replica-seconds, and the fewest
//!    Ready pods of any Deployment (its PDB's minimum is 3). BENCH_HOLD sets
//!    EVICTION_HOLD; BENCH_MAX_SURGE the Deployments' maxSurge (default 25%:
//!    one extra pod for 3 replicas, so a Deployment's 3 pods leave one at a
//!    time); BENCH_DRAIN_PAUSE the seconds between drains (default 0: the
//!    next drain starts while the last one's surges are still in place).
//!
//! 2. Memory (`memory`): BENCH_PODS (10000,50000,100000) pods created
//!    directly on the bench nodes (nodeName set, no scheduler, no owner), the
//!    server restarted at each level: time from start to /readyz 200 and its
//!    resident memory, and per pod beyond the empty baseline.
//!
//! Prints one line per figure; the Makefile appends them to BENCHMARKS.md.

#[path = "../e2e/support.rs"]
mod support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::{Deployment, DeploymentStrategy, RollingUpdateDeployment};
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{ListParams, PostParams};
use kube::Api;
use serde_json::json;
use support::*;

use eviction_autoscaler::crd::EvictionAutoScaler;

const LABEL: &str = "eviction-autoscaler-bench";
const NODES: [&str; 4] = [
    "bench-node-0",
    "bench-node-1",
    "bench-node-2",
    "bench-node-3",
];

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn say(line: String) {
    println!("{line}");
}

/// utime + stime of a process, in seconds (USER_HZ is 100 on Linux).
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name, which is in parentheses.
    let rest = stat.rsplit_once(") ").map(|(_, r)| r).unwrap_or("");
    let f: Vec<&str> = rest.split_whitespace().collect();
    let tick = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    (tick(11) + tick(12)) / 100.0
}

fn rss_mib(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        .unwrap_or(0.0)
        / 1024.0
}

fn server_pid() -> u32 {
    std::fs::read_to_string(cluster_dir().join("webhook/pid"))
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .expect("the server's pid file")
}

/// The product's API requests: (all, writes other than the leader's Lease
/// renewals, Lease renewals), from its own counter.
/// Namespace jobs the reconciler started, resync and marked alike
/// (`reconcile_namespaces_total`).
fn namespace_jobs(info: &WebhookInfo) -> f64 {
    info.metrics()
        .lines()
        .filter(|l| l.starts_with("eviction_autoscaler_reconcile_namespaces_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// The changes the product's watch caches received, by resource
/// (`eviction_autoscaler_watch_events_total`): those of the spec or
/// metadata of Deployments, PDBs, HPAs, ScaledObjects, records and
/// namespaces (and pods coming, going or relabelled) mark namespaces.
fn watch_events(info: &WebhookInfo) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for l in info.metrics().lines() {
        let Some(rest) = l.strip_prefix("eviction_autoscaler_watch_events_total{resource=\"")
        else {
            continue;
        };
        if let Some((resource, v)) = rest.split_once("\"} ") {
            out.insert(resource.to_string(), v.parse::<f64>().unwrap_or(0.0));
        }
    }
    out
}

fn api_requests(info: &WebhookInfo) -> (f64, f64, f64) {
    let text = info.metrics();
    let mut all = 0.0;
    let mut writes = 0.0;
    let mut lease = 0.0;
    for l in text.lines() {
        if !l.starts_with("eviction_autoscaler_api_requests_total{") {
            continue;
        }
        let v: f64 = l
            .rsplit(' ')
            .next()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0);
        all += v;
        let verb = l
            .split("verb=\"")
            .nth(1)
            .and_then(|r| r.split('"').next())
            .unwrap_or("");
        if matches!(verb, "get" | "list" | "watch") {
            continue;
        }
        if l.contains("resource=\"leases\"") {
            lease += v;
        } else {
            writes += v;
        }
    }
    (all, writes, lease)
}

/// Per-verb/resource request counts, for the report.
fn api_breakdown(info: &WebhookInfo) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for l in info.metrics().lines() {
        let Some(rest) = l.strip_prefix("eviction_autoscaler_api_requests_total{") else {
            continue;
        };
        let Some((labels, v)) = rest.split_once("} ") else {
            continue;
        };
        let get = |k: &str| {
            labels
                .split(&format!("{k}=\""))
                .nth(1)
                .and_then(|r| r.split('"').next())
                .unwrap_or("?")
                .to_string()
        };
        *out.entry(format!("{} {}", get("verb"), get("resource")))
            .or_insert(0.0) += v.parse::<f64>().unwrap_or(0.0);
    }
    out
}

/// Nodes of the benchmark's own (kwok keeps them Ready), roomy enough for
/// thousands of pods, so the e2e nodes and their 110-pod limit stay apart.
async fn bench_nodes() {
    let nodes: Api<Node> = Api::all(client().await);
    for n in NODES {
        let node: Node = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": n, "annotations": {"kwok.x-k8s.io/node": "fake"},
                         "labels": {"kubernetes.io/hostname": n, "type": "kwok", LABEL: "true"}},
            "status": {"allocatable": {"cpu": "1000", "memory": "4Ti", "pods": "5000"},
                       "capacity": {"cpu": "1000", "memory": "4Ti", "pods": "5000"}}
        }))
        .expect("node json");
        let _ = nodes.create(&PostParams::default(), &node).await;
        kubectl(&["uncordon", n]);
    }
    wait_for("bench nodes Ready", Duration::from_secs(120), || async {
        let list = nodes
            .list(&ListParams::default().labels(&format!("{LABEL}=true")))
            .await
            .ok()?;
        let ready = list
            .items
            .iter()
            .filter(|n| {
                n.status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
            })
            .count();
        (ready == NODES.len()).then_some(())
    })
    .await;
}

/// A Deployment whose pods run on the bench nodes, preferring `node`.
fn bench_deployment(name: &str, replicas: i32, node: &str) -> Deployment {
    let mut d = deployment(name, replicas, Some(node));
    // BENCH_MAX_SURGE: the Deployments' maxSurge (unset: the default 25%).
    if let Ok(m) = std::env::var("BENCH_MAX_SURGE") {
        let surge = match m.parse::<i32>() {
            Ok(n) => IntOrString::Int(n),
            Err(_) => IntOrString::String(m),
        };
        if let Some(spec) = d.spec.as_mut() {
            spec.strategy = Some(DeploymentStrategy {
                type_: Some("RollingUpdate".into()),
                rolling_update: Some(RollingUpdateDeployment {
                    max_surge: Some(surge),
                    ..Default::default()
                }),
            });
        }
    }
    if let Some(spec) = d.spec.as_mut().and_then(|s| s.template.spec.as_mut()) {
        spec.node_selector = Some([(LABEL.to_string(), "true".to_string())].into());
        spec.termination_grace_period_seconds = Some(0);
    }
    d
}

/// A namespace of the benchmark's, deleted when dropped (the e2e harness's
/// TestNs): in scope or not.
async fn bench_namespace(name: &str, in_scope: bool) -> TestNs {
    let enable: &[(&str, &str)] = &[("eviction-autoscaler.azure.com/enable", "true")];
    TestNs::fixed(name, if in_scope { enable } else { &[] }).await
}

async fn count<K>(api: &Api<K>) -> usize
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.list_metadata(&ListParams::default())
        .await
        .map(|l| l.items.len())
        .unwrap_or(0)
}

/// Bench item 3.
async fn convergence(info: &WebhookInfo) {
    let total = env_usize("BENCH_DEPLOYMENTS", 2000);
    let spaces = 20usize;
    let steady = env_usize("BENCH_STEADY", 600);
    let c = client().await;
    let mut namespaces = Vec::new();
    for i in 0..spaces {
        namespaces.push(bench_namespace(&format!("bench-conv-{i}"), true).await);
    }
    let pid = server_pid();
    let (req0, _, _) = api_requests(info);
    let cpu0 = cpu_seconds(pid);
    let started = Instant::now();
    let jobs: Vec<(String, String)> = (0..total)
        .map(|k| (format!("bench-conv-{}", k % spaces), format!("app-{k}")))
        .collect();
    futures::stream::iter(jobs)
        .map(|(ns, name)| {
            let c = c.clone();
            async move {
                let api: Api<Deployment> = Api::namespaced(c, &ns);
                let d = bench_deployment(&name, 1, NODES[0]);
                api.create(&PostParams::default(), &d).await.map(|_| ())
            }
        })
        .buffer_unordered(32)
        .try_collect::<Vec<()>>()
        .await
        .expect("create the Deployments");
    let created = started.elapsed();
    let pdbs: Api<PodDisruptionBudget> = Api::all(c.clone());
    let eas: Api<EvictionAutoScaler> = Api::all(c.clone());
    let (mut p, mut e) = (0, 0);
    let deadline = Instant::now() + Duration::from_secs(900);
    while Instant::now() < deadline {
        p = count(&pdbs).await;
        e = count(&eas).await;
        if p >= total && e >= total {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let converged = started.elapsed();
    let (req1, w_conv, _) = api_requests(info);
    let cpu1 = cpu_seconds(pid);
    say(format!(
        "convergence: {total} Deployments in {spaces} namespaces created in {:.1}s; every PDB \
         and EvictionAutoScaler after {:.1}s ({p} PDBs, {e} EvictionAutoScalers); {:.2} API \
         requests per Deployment; {:.1} CPU seconds; RSS {:.0} MiB",
        created.as_secs_f64(),
        converged.as_secs_f64(),
        (req1 - req0) / total as f64,
        cpu1 - cpu0,
        rss_mib(pid)
    ));
    assert!(
        p >= total && e >= total,
        "not converged within 900 s: {p} PDBs, {e} EvictionAutoScalers of {total}"
    );
    // The controller-manager makes the pods at its own pace (at its default
    // limits, minutes after the PDBs): each pod made or gone marks its
    // namespace, so that churn is not the steady state. Its cost is given
    // apart, then the pods settle (status) before the steady window.
    let pods: Api<Pod> = Api::all(c.clone());
    let running = ListParams::default().fields("status.phase=Running");
    let mut up = 0;
    while Instant::now() < deadline {
        up = pods
            .list_metadata(&running)
            .await
            .map(|l| {
                l.items
                    .iter()
                    .filter(|p| {
                        p.metadata
                            .namespace
                            .as_deref()
                            .is_some_and(|n| n.starts_with("bench-conv-"))
                    })
                    .count()
            })
            .unwrap_or(0);
        if up >= total {
            break;
        }
        tokio::time::sleep(Duration::from_secs(5)).await;
    }
    let cpu_pods = cpu_seconds(pid);
    let (_, wp, _) = api_requests(info);
    say(format!(
        "pods: {up} of {total} running after {:.1}s; meanwhile {:.1} CPU seconds ({:.2} per \
         minute) and {:.0} writes since convergence",
        started.elapsed().as_secs_f64(),
        cpu_pods - cpu1,
        (cpu_pods - cpu1) * 60.0 / (started.elapsed() - converged).as_secs_f64().max(1.0),
        wp - w_conv,
    ));
    assert!(
        up >= total,
        "pods not running within 900 s: {up} of {total}"
    );
    tokio::time::sleep(Duration::from_secs(30)).await;
    let before = api_breakdown(info);
    let (_, w0, l0) = api_requests(info);
    let jobs0 = namespace_jobs(info);
    let events0 = watch_events(info);
    let cpu2 = cpu_seconds(pid);
    tokio::time::sleep(Duration::from_secs(steady as u64)).await;
    let (_, w1, l1) = api_requests(info);
    let jobs1 = namespace_jobs(info);
    let events1 = watch_events(info);
    let cpu3 = cpu_seconds(pid);
    let after = api_breakdown(info);
    let moved: Vec<String> = after
        .iter()
        .filter(|(k, v)| **v != before.get(*k).copied().unwrap_or(0.0))
        .map(|(k, v)| format!("{k} +{}", v - before.get(k).copied().unwrap_or(0.0)))
        .collect();
    let changes: Vec<String> = events1
        .iter()
        .map(|(k, v)| (k, v - events0.get(k).copied().unwrap_or(0.0)))
        .filter(|(_, d)| *d > 0.0)
        .map(|(k, d)| format!("{k} {:.1}", d * 60.0 / steady as f64))
        .collect();
    say(format!(
        "steady state: {steady}s with {total} Deployments: {:.2} writes per minute besides \
         {:.1} Lease renewals per minute, {:.2} CPU seconds per minute, {:.1} namespace \
         plans per minute; changes the watches received per minute: {}; requests in the \
         window: {}",
        (w1 - w0) * 60.0 / steady as f64,
        (l1 - l0) * 60.0 / steady as f64,
        (cpu3 - cpu2) * 60.0 / steady as f64,
        (jobs1 - jobs0) * 60.0 / steady as f64,
        if changes.is_empty() {
            "none".to_string()
        } else {
            changes.join(", ")
        },
        if moved.is_empty() {
            "none".to_string()
        } else {
            moved.join(", ")
        }
    ));
    drop(namespaces); // TestNs deletes them
}

#[derive(Default)]
struct DrainFigures {
    took: Vec<f64>,
    /// Pods on each node when its drain started.
    pods: Vec<usize>,
    extra_replica_seconds: f64,
    min_ready: usize,
    /// Evictions per drain whose hold ended before their room came: the
    /// replacement pods were not Ready within the hold, the drain target's
    /// condition.
    expired: Vec<f64>,
}

/// The peaks, sampled every 500 ms while a drain runs, of the evictions the
/// product holds open and of the apiserver's executing seats by API Priority
/// and Fairness level: a held eviction keeps its seat in the drainer's level.
struct SeatSampler {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: std::thread::JoinHandle<(f64, BTreeMap<String, f64>)>,
}

impl SeatSampler {
    fn start(info: Option<WebhookInfo>) -> SeatSampler {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut held_peak = 0.0f64;
            let mut seats_peak: BTreeMap<String, f64> = BTreeMap::new();
            while !stopped.load(std::sync::atomic::Ordering::Relaxed) {
                if let Some(i) = &info {
                    let v = i
                        .metrics()
                        .lines()
                        .find_map(|l| l.strip_prefix("eviction_autoscaler_evictions_held "))
                        .and_then(|v| v.trim().parse::<f64>().ok())
                        .unwrap_or(0.0);
                    held_peak = held_peak.max(v);
                }
                let out = kubectl(&["get", "--raw", "/metrics"]);
                let mut now: BTreeMap<String, f64> = BTreeMap::new();
                for l in String::from_utf8_lossy(&out.stdout).lines() {
                    let Some(rest) =
                        l.strip_prefix("apiserver_flowcontrol_current_executing_seats{")
                    else {
                        continue;
                    };
                    let level = rest
                        .split("priority_level=\"")
                        .nth(1)
                        .and_then(|r| r.split('"').next())
                        .unwrap_or("?")
                        .to_string();
                    let v: f64 = l
                        .rsplit(' ')
                        .next()
                        .and_then(|v| v.parse().ok())
                        .unwrap_or(0.0);
                    *now.entry(level).or_default() += v;
                }
                for (k, v) in now {
                    let e = seats_peak.entry(k).or_default();
                    *e = e.max(v);
                }
                std::thread::sleep(Duration::from_millis(500));
            }
            (held_peak, seats_peak)
        });
        SeatSampler { stop, thread }
    }

    fn finish(self) -> String {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let (held, seats) = self.thread.join().unwrap_or_default();
        let seats: Vec<String> = seats
            .iter()
            .filter(|(_, v)| **v > 0.0)
            .map(|(k, v)| format!("{k} {v:.0}"))
            .collect();
        format!(
            "peak evictions held by the product {held:.0}; peak executing seats in the apiserver by priority level: {}",
            seats.join(", ")
        )
    }
}

/// Replicas of every Deployment in `ns`, and the fewest Ready pods of any,
/// sampled every 500 ms until stopped.
struct Sampler {
    stop: tokio::sync::watch::Sender<bool>,
    task: tokio::task::JoinHandle<(f64, usize)>,
}

impl Sampler {
    fn start(ns: &str, baseline: i32) -> Sampler {
        let ns = ns.to_string();
        let (stop, mut stopped) = tokio::sync::watch::channel(false);
        let task = tokio::spawn(async move {
            let c = client().await;
            let deps: Api<Deployment> = Api::namespaced(c.clone(), &ns);
            let pods: Api<Pod> = Api::namespaced(c, &ns);
            let mut extra = 0.0;
            let mut min_ready = usize::MAX;
            let mut last = Instant::now();
            let mut last_extra = 0i64;
            loop {
                if let Ok(list) = deps.list(&ListParams::default()).await {
                    let now = Instant::now();
                    extra += last_extra as f64 * (now - last).as_secs_f64();
                    last = now;
                    last_extra = list
                        .items
                        .iter()
                        .map(|d| {
                            i64::from(
                                d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1) - baseline,
                            )
                            .max(0)
                        })
                        .sum();
                }
                if let Ok(list) = pods.list(&ListParams::default()).await {
                    let mut ready: BTreeMap<String, usize> = BTreeMap::new();
                    for p in &list.items {
                        let app = p
                            .metadata
                            .labels
                            .as_ref()
                            .and_then(|l| l.get("app"))
                            .cloned()
                            .unwrap_or_default();
                        let is_ready = p.metadata.deletion_timestamp.is_none() && pod_is_ready(p);
                        *ready.entry(app).or_insert(0) += usize::from(is_ready);
                    }
                    if let Some(m) = ready.values().min() {
                        min_ready = min_ready.min(*m);
                    }
                    // Which Deployment went below the PDB minimum, and
                    // when: to read against the server's log.
                    for (app, n) in &ready {
                        if *n < baseline as usize {
                            say(format!(
                                "  below the PDB minimum: {app} had {n} Ready pods at {}",
                                k8s_openapi::jiff::Timestamp::now()
                            ));
                        }
                    }
                }
                tokio::select! {
                    _ = stopped.changed() => break,
                    _ = tokio::time::sleep(Duration::from_millis(500)) => {}
                }
            }
            (extra, min_ready)
        });
        Sampler { stop, task }
    }

    async fn finish(self) -> (f64, usize) {
        let _ = self.stop.send(true);
        self.task.await.unwrap_or((0.0, 0))
    }
}

/// Bench item 4, one side: `with_product` or the product off and budgets
/// that never block (maxUnavailable equal to the replicas).
const HOLDS: &str = "eviction_autoscaler_eviction_holds_total";
const HOLD_BUCKETS: &str = "eviction_autoscaler_eviction_hold_seconds_bucket";

/// Cumulative counts of the holds that ended allowed, by bucket bound (s):
/// from the request's arrival, how long room took to come.
fn allowed_hold_buckets(metrics: &str) -> BTreeMap<String, f64> {
    let mut by_le: BTreeMap<String, f64> = BTreeMap::new();
    for l in metrics
        .lines()
        .filter(|l| l.starts_with(HOLD_BUCKETS) && l.contains("outcome=\"allowed\""))
    {
        let Some(le) = l.split("le=\"").nth(1).and_then(|r| r.split('"').next()) else {
            continue;
        };
        let Some(v) = l.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()) else {
            continue;
        };
        *by_le.entry(le.to_string()).or_default() += v;
    }
    by_le
}

/// "within 1 s: 4, 2 s: 7, ...": cumulative counts of one drain's allowed
/// holds (the difference of two scrapes), up to the bound that holds them all.
fn hold_times(before: &BTreeMap<String, f64>, after: &BTreeMap<String, f64>) -> String {
    let mut rows: Vec<(f64, String, f64)> = after
        .iter()
        .filter_map(|(le, a)| {
            let bound = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().ok()?
            };
            Some((
                bound,
                le.clone(),
                a - before.get(le).copied().unwrap_or(0.0),
            ))
        })
        .collect();
    rows.sort_by(|a, b| a.0.total_cmp(&b.0));
    let total = rows.last().map_or(0.0, |r| r.2);
    let mut out = Vec::new();
    for (_, le, n) in rows {
        out.push(format!("{le} s: {n}"));
        if n >= total {
            break;
        }
    }
    format!("{total} in all; within {}", out.join(", "))
}

async fn drains(with_product: bool) -> DrainFigures {
    let deployments = env_usize("BENCH_DRAIN_DEPLOYMENTS", 100);
    // The server's log of this side, kept as server-drains.log for reading.
    let mut log_copy = None;
    let mut product = None;
    let ns = if with_product {
        "bench-drain-on"
    } else {
        "bench-drain-off"
    };
    if with_product {
        // BENCH_HOLD: another EVICTION_HOLD than the default.
        let hold = std::env::var("BENCH_HOLD").ok();
        let mut env = vec![("COOLDOWN", "10s")];
        if let Some(h) = hold.as_deref() {
            env.push(("EVICTION_HOLD", h));
        }
        let info = restart_server(&env);
        log_copy = Some(info.state.join("server.log"));
        product = Some(info);
    } else {
        stop_server();
    }
    for n in NODES {
        kubectl(&["uncordon", n]);
    }
    // The other side's namespace is deleted when its drains end, and its
    // pods go with it only later: until they are gone they are on the
    // nodes this side drains (kubectl drain takes every namespace), and
    // their evictions fail with 429 (namespace terminating). Wait them out.
    let c = client().await;
    let namespaces: Api<Namespace> = Api::all(c.clone());
    wait_for(
        "the other side's namespace gone",
        Duration::from_secs(600),
        || async {
            let mut gone = true;
            for other in ["bench-drain-on", "bench-drain-off"] {
                if other != ns && namespaces.get_opt(other).await.ok()?.is_some() {
                    gone = false;
                }
            }
            gone.then_some(())
        },
    )
    .await;
    let _namespace = bench_namespace(ns, with_product).await;
    let deps: Api<Deployment> = Api::namespaced(c.clone(), ns);
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(c.clone(), ns);
    // Every pod on bench-node-0 first: cordon the others while creating.
    for n in &NODES[1..] {
        kubectl(&["cordon", n]);
    }
    for k in 0..deployments {
        let name = format!("app-{k}");
        deps.create(
            &PostParams::default(),
            &bench_deployment(&name, 3, NODES[0]),
        )
        .await
        .expect("create Deployment");
        if !with_product {
            let pdb = PodDisruptionBudget {
                metadata: ObjectMeta {
                    name: Some(name.clone()),
                    ..Default::default()
                },
                spec: Some(PodDisruptionBudgetSpec {
                    max_unavailable: Some(IntOrString::Int(3)),
                    selector: Some(LabelSelector {
                        match_labels: Some(labels(&name)),
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            };
            pdbs.create(&PostParams::default(), &pdb)
                .await
                .expect("create PDB");
        }
    }
    let pods: Api<Pod> = Api::namespaced(c.clone(), ns);
    let want = deployments * 3;
    wait_for("every pod Ready", Duration::from_secs(600), || async {
        let list = pods.list(&ListParams::default()).await.ok()?;
        let ready = list.items.iter().filter(|p| pod_is_ready(p)).count();
        (ready >= want).then_some(())
    })
    .await;
    // Every PDB counted by the disruption controller (3 healthy pods) before
    // the drain: a PDB without status blocks every eviction, product or not.
    wait_for("every PDB's status", Duration::from_secs(300), || async {
        let list = pdbs.list(&ListParams::default()).await.ok()?;
        let counted = list
            .items
            .iter()
            .filter(|p| {
                p.status.as_ref().is_some_and(|s| {
                    s.observed_generation.is_some()
                        && s.observed_generation == p.metadata.generation
                        && s.current_healthy == 3
                })
            })
            .count();
        (counted >= deployments).then_some(())
    })
    .await;
    for n in &NODES[1..] {
        kubectl(&["uncordon", n]);
    }
    let sampler = Sampler::start(ns, 3);
    let mut took = Vec::new();
    let mut pods_before = Vec::new();
    let mut expired = Vec::new();
    // A managed upgrade: each node drained, then back (upgraded).
    // Evictions held, by what they waited for (room during a surge, a PDB
    // recount after a scale-down, room already taken by evictions let
    // through) and outcome.
    const WAITS: [&str; 3] = ["room", "recount", "taken"];
    const OUTCOMES: [&str; 4] = ["allowed", "blocked", "expired", "busy"];
    let holds = |info: &WebhookInfo| -> Vec<f64> {
        WAITS
            .iter()
            .flat_map(|w| OUTCOMES.iter().map(move |o| (w, o)))
            .map(|(w, o)| {
                let (wait, outcome) = (format!("wait=\"{w}\""), format!("outcome=\"{o}\""));
                info.metric_sum(HOLDS, &[&wait, &outcome])
            })
            .collect()
    };
    for n in &NODES[..3] {
        // Where the pods are when the drain starts: a drain's time follows
        // the count on its node (kubectl's rate limit), and the two sides'
        // placements differ after the first drain (surge pods, scale-downs).
        if let Ok(list) = pods.list(&ListParams::default()).await {
            let mut per_node: BTreeMap<String, usize> = BTreeMap::new();
            for p in list
                .items
                .iter()
                .filter(|p| p.metadata.deletion_timestamp.is_none())
            {
                let node = p.spec.as_ref().and_then(|s| s.node_name.clone());
                *per_node
                    .entry(node.unwrap_or_else(|| "-".into()))
                    .or_default() += 1;
            }
            let on_it = per_node.get(*n).copied().unwrap_or(0);
            say(format!(
                "  before the drain of {n}: {on_it} pods on it, per node {per_node:?}"
            ));
            pods_before.push(on_it);
        }
        let seats = SeatSampler::start(product.clone());
        let before = product.as_ref().map(holds);
        let times_before = product.as_ref().map(|i| allowed_hold_buckets(&i.metrics()));
        // -v=6: kubectl logs every request, for the count below.
        let run = drain_node(n, "app", &["--timeout=900s", "-v=6"]).await;
        say(format!("  drain of {n}: {}", seats.finish()));
        if let (Some(info), Some(before)) = (product.as_ref(), before) {
            let d: Vec<f64> = holds(info)
                .iter()
                .zip(&before)
                .map(|(a, b)| a - b)
                .collect();
            let per_wait: Vec<String> = WAITS
                .iter()
                .zip(d.chunks(OUTCOMES.len()))
                .map(|(w, c)| {
                    let by: Vec<String> = OUTCOMES
                        .iter()
                        .zip(c)
                        .map(|(o, v)| format!("{v} {o}"))
                        .collect();
                    format!("{w}: {}", by.join(", "))
                })
                .collect();
            say(format!(
                "  drain of {n}: evictions held, by what for and how it ended: {}",
                per_wait.join("; ")
            ));
            if let Some(tb) = &times_before {
                say(format!(
                    "  drain of {n}: holds that ended allowed, by time from the eviction's arrival: {}",
                    hold_times(tb, &allowed_hold_buckets(&info.metrics()))
                ));
            }
            expired.push(
                d.chunks(OUTCOMES.len())
                    .filter_map(|c| c.get(2))
                    .sum::<f64>(),
            );
        }
        // kubectl's own log, kept for reading (a drain's timeline per pod).
        let _ = std::fs::write(
            support::cluster_dir().join(format!("kubectl-drain-{ns}-{n}.log")),
            &run.output,
        );
        assert!(run.ok, "drain of {n} failed: {}", run.output);
        took.push(run.took.as_secs_f64());
        // Why each 429 came (the apiserver's message, pod names left out):
        // a budget that never blocks can still answer 429 while its status
        // lags its generation.
        let mut why: BTreeMap<String, usize> = BTreeMap::new();
        for line in run
            .output
            .lines()
            .filter(|l| l.contains("will retry after 5s"))
        {
            let msg = line.rsplit("): ").next().unwrap_or(line);
            *why.entry(msg.chars().take(160).collect()).or_default() += 1;
        }
        if !why.is_empty() {
            say(format!("  drain of {n}: 429s by message {why:?}"));
        }
        say(format!("  drain of {n}: {}", kubectl_requests(&run.output)));
        // kubectl waits 5 s after each 429 before it asks again.
        say(format!(
            "  drain of {n} ({}): {:.1}s, {} evictions answered 429 (kubectl retried after 5 s)",
            if with_product { "product" } else { "off" },
            run.took.as_secs_f64(),
            run.output.matches("will retry after 5s").count()
        ));
        kubectl(&["uncordon", n]);
        // BENCH_DRAIN_PAUSE (seconds, default 0): time between drains, as a
        // managed upgrade spends re-imaging a node before the next drain.
        let pause = env_usize("BENCH_DRAIN_PAUSE", 0);
        if pause > 0 && Some(n) != NODES[..3].last() {
            tokio::time::sleep(Duration::from_secs(pause as u64)).await;
        }
    }
    if with_product {
        // Scale back after the cooldown, inside the sampled window.
        wait_for("every surge reverted", Duration::from_secs(600), || async {
            let list = deps.list(&ListParams::default()).await.ok()?;
            list.items
                .iter()
                .all(|d| d.spec.as_ref().and_then(|s| s.replicas) == Some(3))
                .then_some(())
        })
        .await;
    }
    let (extra_replica_seconds, min_ready) = sampler.finish().await;
    if let Some(log) = log_copy {
        let _ = std::fs::copy(&log, log.with_file_name("server-drains.log"));
    }
    DrainFigures {
        took,
        pods: pods_before,
        extra_replica_seconds,
        min_ready,
        expired,
    }
}

/// What kubectl asked in a drain, from its `-v=6` log: its client allows 5
/// requests a second (burst 10), so a drain's time follows the count. Per
/// kind of request and answer, and when the last eviction was accepted and
/// the last request answered, from the first request.
fn kubectl_requests(log: &str) -> String {
    // klog: "I1202 06:24:51.066103 ... "Response" verb="POST" url="…" status="201 Created""
    let field = |l: &str, key: &str| -> Option<String> {
        let start = l.find(key)? + key.len();
        let rest = &l[start..];
        Some(rest[..rest.find('"')?].to_string())
    };
    let secs = |l: &str| -> Option<f64> {
        let t = l.split_whitespace().nth(1)?;
        let mut p = t.split(':');
        let (h, m, s) = (p.next()?, p.next()?, p.next()?);
        Some(
            h.parse::<f64>().ok()? * 3600.0
                + m.parse::<f64>().ok()? * 60.0
                + s.parse::<f64>().ok()?,
        )
    };
    let mut by: BTreeMap<String, usize> = BTreeMap::new();
    let (mut first, mut last, mut last_evicted) = (None::<f64>, 0.0f64, 0.0f64);
    for l in log.lines().filter(|l| l.contains("\"Response\"")) {
        let (Some(verb), Some(url), Some(status)) = (
            field(l, "verb=\""),
            field(l, "url=\""),
            field(l, "status=\""),
        ) else {
            continue;
        };
        let what = if url.ends_with("/eviction") {
            "eviction"
        } else if url.contains("/pods/") {
            "pod"
        } else {
            "other"
        };
        let code = status.split_whitespace().next().unwrap_or("?").to_string();
        *by.entry(format!("{verb} {what} {code}")).or_default() += 1;
        if let Some(t) = secs(l) {
            let t0 = *first.get_or_insert(t);
            last = last.max(t - t0);
            if what == "eviction" && code == "201" {
                last_evicted = last_evicted.max(t - t0);
            }
        }
    }
    let total: usize = by.values().sum();
    let list: Vec<String> = by.iter().map(|(k, v)| format!("{k} x{v}")).collect();
    format!(
        "kubectl's requests: {total} ({}); last eviction accepted at {last_evicted:.1}s, last answer at {last:.1}s",
        list.join(", ")
    )
}

/// Bench item 2: the server's memory and start-up time against the pod count.
async fn memory() {
    let levels: Vec<usize> = std::env::var("BENCH_PODS")
        .unwrap_or_else(|_| "10000,50000,100000".into())
        .split(',')
        .filter_map(|v| v.trim().parse().ok())
        .collect();
    let ns = "bench-memory";
    let _namespace = bench_namespace(ns, false).await;
    let pods: Api<Pod> = Api::namespaced(client().await, ns);
    let measure = |n: usize| async move {
        stop_server();
        let t = Instant::now();
        // 100,000 pods take minutes to list (paged, 500 at a time).
        let _ = restart_server(&[("READY_WAIT", "900")]);
        let ready = t.elapsed().as_secs_f64();
        // Let the first lists' garbage go before reading the resident size.
        tokio::time::sleep(Duration::from_secs(10)).await;
        (n, ready, rss_mib(server_pid()))
    };
    let (_, ready0, base) = measure(0).await;
    say(format!(
        "memory: no bench pods: ready after {ready0:.1}s, RSS {base:.1} MiB"
    ));
    let mut made = 0usize;
    for want in levels {
        let t = Instant::now();
        futures::stream::iter(made..want)
            .map(|i| {
                let pods = pods.clone();
                async move {
                    let pod: Pod = serde_json::from_value(json!({
                        "apiVersion": "v1", "kind": "Pod",
                        "metadata": {"name": format!("mem-{i}"), "labels": {"app": format!("mem-{}", i % 500), "bench": "memory"}},
                        "spec": {"nodeName": NODES[i % NODES.len()],
                                 "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}],
                                 "tolerations": [{"operator": "Exists"}]}
                    }))
                    .expect("pod");
                    for _ in 0..5 {
                        match pods.create(&PostParams::default(), &pod).await {
                            Ok(_) => return,
                            Err(kube::Error::Api(e)) if e.code == 409 => return,
                            Err(_) => tokio::time::sleep(Duration::from_secs(1)).await,
                        }
                    }
                    panic!("could not create pod mem-{i}");
                }
            })
            .buffer_unordered(32)
            .collect::<Vec<()>>()
            .await;
        let created = t.elapsed().as_secs_f64();
        made = want;
        let (n, ready, rss) = measure(want).await;
        say(format!(
            "memory: {n} bench pods (created in {created:.0}s): ready after {ready:.1}s, RSS {rss:.1} MiB, \
             {:.0} bytes per pod beyond the empty baseline",
            (rss - base) * 1048576.0 / n as f64
        ));
    }
}

#[tokio::main]
async fn main() {
    let what = std::env::args().nth(1).unwrap_or_else(|| "all".into());
    let info = restart_server(&[]);
    bench_nodes().await;
    if what == "memory" {
        memory().await;
    }
    if what == "all" || what == "convergence" {
        convergence(&info).await;
    }
    if what == "all" || what == "drains" {
        // BENCH_SIDES=on (or off): one side only, to look into it.
        let sides = std::env::var("BENCH_SIDES").unwrap_or_default();
        let on = if sides != "off" {
            drains(true).await
        } else {
            DrainFigures::default()
        };
        let off = if sides != "on" {
            drains(false).await
        } else {
            DrainFigures::default()
        };
        let fmt = |t: &[f64]| {
            t.iter()
                .map(|s| format!("{s:.1}s"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let sum = |t: &[f64]| t.iter().sum::<f64>();
        say(format!(
            "drains of 3 nodes one after another, {} Deployments x 3 replicas on the first: \
             with the product {} (total {:.1}s, {:.0} extra replica-seconds, fewest Ready pods \
             of a Deployment {} (PDB minimum 3)); product off, budgets that never block {} \
             (total {:.1}s, fewest Ready {}); ratio {:.2}",
            env_usize("BENCH_DRAIN_DEPLOYMENTS", 100),
            fmt(&on.took),
            sum(&on.took),
            on.extra_replica_seconds,
            on.min_ready,
            fmt(&off.took),
            sum(&off.took),
            off.min_ready,
            sum(&on.took) / sum(&off.took).max(0.001)
        ));
        // Per drain: the difference, and the time per pod of each side (the
        // product's surge pods still in place when the next drain starts are
        // pods that drain has to move too).
        for (i, n) in NODES[..3].iter().enumerate() {
            let (Some(a), Some(b)) = (on.took.get(i), off.took.get(i)) else {
                continue;
            };
            let (pa, pb) = (
                on.pods.get(i).copied().unwrap_or(0),
                off.pods.get(i).copied().unwrap_or(0),
            );
            // The target: within 1 s of the drain that never blocks, as long
            // as replacement pods are Ready within the hold (no hold expired).
            let expired = on.expired.get(i).copied().unwrap_or(0.0);
            let verdict = match (a - b <= 1.0, expired == 0.0) {
                (true, _) => "within 1 s: target met".to_string(),
                (false, true) => "over 1 s with no hold expired: target missed".to_string(),
                (false, false) => format!(
                    "over 1 s; {expired:.0} holds expired (replacement pods not Ready within \
                     the hold: outside the target's condition)"
                ),
            };
            say(format!(
                "  {n}: product {a:.1}s for {pa} pods ({:.3} s/pod), off {b:.1}s for {pb} pods \
                 ({:.3} s/pod); difference {:+.1}s, {verdict}",
                a / pa.max(1) as f64,
                b / pb.max(1) as f64,
                a - b
            ));
        }
        let _ = restart_server(&[]);
    }
    for n in NODES {
        kubectl(&["delete", "node", n, "--wait=false"]);
    }
}
