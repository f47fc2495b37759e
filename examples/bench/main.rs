//! `make bench`: figures and ratios measured in one run, so a noisy machine
//! compares like with like. Prints them and writes them, with the machine,
//! the command and the date, to the file named by the first argument
//! (`make bench` passes BENCHMARKS.md).
//!
//! 1. Memory per cached pod: a realistic Pod as the apiserver sends it,
//!    decoded into the full k8s-openapi `Pod` versus the cache's stripped
//!    `SlimPod` (bytes allocated and kept, counted by a wrapping allocator).
//! 2. The eviction decision over real reflector stores at 10k and 100k pods:
//!    time per decision and the ratio between the two sizes.
//! 3. The AdmissionReview codec: parse a review and encode the answer.
//! 4. The reconciler's plan of a steady namespace at 100 and 1,000
//!    Deployments ([`plan`]): time per plan and the ratio between them.
//! 5. Admission over HTTPS against the stack's limit ([`http`]).

mod http;
mod plan;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicIsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use eviction_autoscaler::cache::{strip_meta, Cache, PodStore, PodWire, SlimPod, Stores};
use eviction_autoscaler::config::Behaviour;
use eviction_autoscaler::webhook::eviction::decide;
use eviction_autoscaler::webhook::{parse_eviction_review, parse_review};
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::runtime::reflector::{self, store::Writer};
use kube::runtime::watcher::Event;
use serde_json::json;

/// Counts bytes kept and allocations made, only while [`counting`] is on:
/// a shared counter bumped on every allocation would make the two cores
/// fight over one cache line, a cost the shipped binary does not have, and
/// it weighs on the server that allocates more (the HTTPS comparison runs
/// with it off).
struct Counting;
static COUNTING: AtomicBool = AtomicBool::new(false);
static LIVE: AtomicIsize = AtomicIsize::new(0);
static ALLOCS: AtomicIsize = AtomicIsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        if COUNTING.load(Ordering::Relaxed) {
            LIVE.fetch_add(l.size() as isize, Ordering::Relaxed);
            ALLOCS.fetch_add(1, Ordering::Relaxed);
        }
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        if COUNTING.load(Ordering::Relaxed) {
            LIVE.fetch_sub(l.size() as isize, Ordering::Relaxed);
        }
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        if COUNTING.load(Ordering::Relaxed) {
            LIVE.fetch_add(new as isize - l.size() as isize, Ordering::Relaxed);
            ALLOCS.fetch_add(1, Ordering::Relaxed);
        }
        unsafe { System.realloc(p, l, new) }
    }
}

/// Turns the allocator's counting on or off.
fn counting(on: bool) {
    COUNTING.store(on, Ordering::SeqCst);
}

/// Allocations (and reallocations) made while counting.
fn allocations() -> isize {
    ALLOCS.load(Ordering::Relaxed)
}

#[global_allocator]
static A: Counting = Counting;

/// Everything printed, for the report file.
static REPORT: std::sync::Mutex<String> = std::sync::Mutex::new(String::new());

macro_rules! out {
    ($($t:tt)*) => {{
        let line = format!($($t)*);
        println!("{line}");
        if let Ok(mut r) = REPORT.lock() {
            r.push_str(&line);
            r.push('\n');
        }
    }};
}

fn live() -> isize {
    LIVE.load(Ordering::Relaxed)
}

/// A pod as a Deployment's ReplicaSet makes it, with the managed fields,
/// env, volumes and status a real cluster returns.
fn pod_json(ns: &str, i: usize, app: &str, node: &str) -> serde_json::Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": format!("{app}-7d9f8c6b5-{i:05}"), "namespace": ns,
            "generateName": format!("{app}-7d9f8c6b5-"),
            "uid": format!("00000000-0000-0000-0000-{i:012}"), "resourceVersion": "123456",
            "creationTimestamp": "2026-11-29T10:00:00Z",
            "labels": {"app": app, "pod-template-hash": "7d9f8c6b5", "tier": "web"},
            "annotations": {"kubectl.kubernetes.io/restartedAt": "2026-11-29T09:00:00Z", "prometheus.io/scrape": "true"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": format!("{app}-7d9f8c6b5"),
                                 "uid": format!("rs-{app}"), "controller": true, "blockOwnerDeletion": true}],
            "managedFields": [
                {"manager": "kube-controller-manager", "operation": "Update", "apiVersion": "v1", "time": "2026-11-29T10:00:00Z",
                 "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {"f:generateName": {}, "f:labels": {".": {}, "f:app": {}, "f:pod-template-hash": {}}, "f:ownerReferences": {}},
                 "f:spec": {"f:containers": {"k:{\"name\":\"app\"}": {".": {}, "f:env": {}, "f:image": {}, "f:name": {}, "f:ports": {}, "f:resources": {}}}}}},
                {"manager": "kubelet", "operation": "Update", "apiVersion": "v1", "time": "2026-11-29T10:00:05Z", "fieldsType": "FieldsV1",
                 "fieldsV1": {"f:status": {"f:conditions": {}, "f:containerStatuses": {}, "f:hostIP": {}, "f:phase": {}, "f:podIP": {}, "f:startTime": {}}}, "subresource": "status"}
            ]
        },
        "spec": {
            "nodeName": node, "serviceAccountName": "default", "restartPolicy": "Always", "dnsPolicy": "ClusterFirst",
            "containers": [{
                "name": "app", "image": "registry.example.com/team/app:1.2.3", "imagePullPolicy": "IfNotPresent",
                "ports": [{"containerPort": 8080, "protocol": "TCP", "name": "http"}],
                "env": (0..8).map(|k| json!({"name": format!("SETTING_{k}"), "value": format!("value-{k}-for-{app}")})).collect::<Vec<_>>(),
                "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "256Mi"}},
                "readinessProbe": {"httpGet": {"path": "/ready", "port": 8080}, "periodSeconds": 5},
                "volumeMounts": [{"name": "kube-api-access", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "readOnly": true}]
            }],
            "volumes": [{"name": "kube-api-access", "projected": {"sources": [{"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}}]}}],
            "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}]
        },
        "status": {
            "phase": "Running", "hostIP": "10.0.0.1", "podIP": format!("10.1.{}.{}", i / 250 % 250, i % 250),
            "startTime": "2026-11-29T10:00:01Z",
            "conditions": [
                {"type": "Initialized", "status": "True", "lastTransitionTime": "2026-11-29T10:00:01Z"},
                {"type": "Ready", "status": "True", "lastTransitionTime": "2026-11-29T10:00:05Z"},
                {"type": "ContainersReady", "status": "True", "lastTransitionTime": "2026-11-29T10:00:05Z"},
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-11-29T10:00:00Z"}
            ],
            "containerStatuses": [{"name": "app", "ready": true, "restartCount": 0, "image": "registry.example.com/team/app:1.2.3",
                                   "imageID": "registry.example.com/team/app@sha256:0123456789abcdef", "containerID": "containerd://abcdef",
                                   "started": true, "state": {"running": {"startedAt": "2026-11-29T10:00:04Z"}}}]
        }
    })
}

/// The cache's pod form before the interned `SlimPod`: the decoded fields
/// with a stripped `ObjectMeta` (kept here to show the change side by side).
fn strip_wire(p: &mut PodWire) {
    strip_meta(&mut p.metadata);
    let m = &mut p.metadata;
    m.annotations = None;
    m.generate_name = None;
    m.uid = None;
    m.resource_version = None;
    m.creation_timestamp = None;
    if let Some(refs) = m.owner_references.as_mut() {
        refs.retain(|o| o.controller == Some(true));
    }
    p.status.conditions.retain(|c| c.type_ == "Ready");
    p.status.conditions.shrink_to_fit();
}

struct PodMemory {
    full: f64,
    wire: f64,
    slim: f64,
    in_store: f64,
}

/// Bytes kept per pod, from the allocator: the full k8s-openapi Pod, the
/// previous cache form, the `SlimPod`, and a `SlimPod` in the `PodStore`
/// (with the maps' share). Pods of 100 namespaces, 10 Deployments each, on
/// 50 nodes.
fn memory_per_pod(n: usize) -> PodMemory {
    let bodies: Vec<Vec<u8>> = (0..n)
        .map(|i| {
            let ns = format!("ns-{}", i % 100);
            let app = format!("app-{}", (i / 100) % 10);
            let node = format!("node-{}", i % 50);
            serde_json::to_vec(&pod_json(&ns, i, &app, &node)).unwrap_or_default()
        })
        .collect();
    // Counting only from here: what is freed below was allocated below.
    counting(true);
    let per = |before: isize| (live() - before) as f64 / n as f64;
    let before = live();
    let full: Vec<Pod> = bodies
        .iter()
        .filter_map(|b| serde_json::from_slice(b).ok())
        .collect();
    let full_bytes = per(before);
    drop(full);
    let before = live();
    let wire: Vec<PodWire> = bodies
        .iter()
        .filter_map(|b| serde_json::from_slice::<PodWire>(b).ok())
        .map(|mut p| {
            strip_wire(&mut p);
            p
        })
        .collect();
    let wire_bytes = per(before);
    drop(wire);
    let before = live();
    let slim: Vec<SlimPod> = bodies
        .iter()
        .filter_map(|b| serde_json::from_slice::<SlimPod>(b).ok())
        .collect();
    let slim_bytes = per(before);
    assert_eq!(slim.len(), n);
    drop(slim);
    let before = live();
    let store = PodStore::default();
    let mut w = store.writer();
    w.init();
    for b in &bodies {
        if let Ok(p) = serde_json::from_slice::<SlimPod>(b) {
            w.apply_pod(p);
        }
    }
    w.init_done();
    let store_bytes = per(before);
    counting(false);
    assert_eq!(store.len(), n);
    PodMemory {
        full: full_bytes,
        wire: wire_bytes,
        slim: slim_bytes,
        in_store: store_bytes,
    }
}

fn apply<K>(w: &mut Writer<K>, objs: impl IntoIterator<Item = K>)
where
    K: kube::Resource + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone + Default,
{
    w.apply_watcher_event(&Event::Init);
    for o in objs {
        w.apply_watcher_event(&Event::InitApply(o));
    }
    w.apply_watcher_event(&Event::InitDone);
}

/// A cache of `pods` pods in 100 namespaces, `apps` Deployments each, all
/// with PDBs that allow `allowed` disruptions.
fn cache_with(pods: usize, apps: usize, allowed: i32) -> (Cache, Vec<(String, String)>) {
    let pod_store = PodStore::default();
    let mut pod_w = pod_store.writer();
    let (pdb_r, mut pdb_w) = reflector::store::<PodDisruptionBudget>();
    let (dep_r, mut dep_w) = reflector::store::<Deployment>();
    let (rs_r, mut rs_w) = reflector::store::<ReplicaSet>();
    let (ns_r, mut ns_w) = reflector::store::<Namespace>();
    let (node_r, node_w) = reflector::store();
    let (hpa_r, hpa_w) = reflector::store();
    let (eas_r, eas_w) = reflector::store();
    let namespaces = 100;
    let mut keys = Vec::new();
    let mut pod_objs = Vec::with_capacity(pods);
    for i in 0..pods {
        let ns = format!("ns-{}", i % namespaces);
        let app = format!("app-{}", (i / namespaces) % apps);
        let Ok(p) = serde_json::from_value::<SlimPod>(pod_json(&ns, i, &app, "node-1")) else {
            continue;
        };
        keys.push((ns, p.name().to_string()));
        pod_objs.push(p);
    }
    pod_w.init();
    for p in pod_objs {
        pod_w.apply_pod(p);
    }
    pod_w.init_done();
    let mut pdbs = Vec::new();
    let mut deps = Vec::new();
    let mut rss = Vec::new();
    let mut nss = Vec::new();
    for n in 0..namespaces {
        let ns = format!("ns-{n}");
        nss.push(
            serde_json::from_value::<Namespace>(json!({"metadata": {"name": ns,
            "annotations": {"eviction-autoscaler.azure.com/enable": "true"}}}))
            .unwrap_or_default(),
        );
        for a in 0..apps {
            let app = format!("app-{a}");
            pdbs.push(serde_json::from_value::<PodDisruptionBudget>(json!({
                "metadata": {"name": app, "namespace": ns, "generation": 1},
                "spec": {"minAvailable": 3, "selector": {"matchLabels": {"app": app}}},
                "status": {"disruptionsAllowed": allowed, "currentHealthy": 3, "desiredHealthy": 3, "expectedPods": 3, "observedGeneration": 1}
            })).unwrap_or_default());
            let mut d: Deployment = serde_json::from_value(json!({
                "metadata": {"name": app, "namespace": ns, "uid": format!("dep-{app}")},
                "spec": {"replicas": 3, "selector": {"matchLabels": {"app": app}}, "template": {"metadata": {"labels": {"app": app}}}}
            })).unwrap_or_default();
            strip_meta(&mut d.metadata);
            deps.push(d);
            rss.push(serde_json::from_value::<ReplicaSet>(json!({
                "metadata": {"name": format!("{app}-7d9f8c6b5"), "namespace": ns, "ownerReferences": [
                    {"apiVersion": "apps/v1", "kind": "Deployment", "name": app, "uid": format!("dep-{app}"), "controller": true}]},
                "spec": {"selector": {"matchLabels": {"app": app}}}
            })).unwrap_or_default());
        }
    }
    apply(&mut pdb_w, pdbs);
    apply(&mut dep_w, deps);
    apply(&mut rs_w, rss);
    apply(&mut ns_w, nss);
    // Empty but ready stores.
    let mut node_w = node_w;
    apply::<k8s_openapi::api::core::v1::Node>(&mut node_w, vec![]);
    let mut hpa_w = hpa_w;
    apply::<k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler>(&mut hpa_w, vec![]);
    let mut eas_w = eas_w;
    apply::<eviction_autoscaler::crd::EvictionAutoScaler>(&mut eas_w, vec![]);
    let cache = Cache::from_stores(
        Stores {
            pods: pod_store,
            pdbs: pdb_r,
            deployments: dep_r,
            replicasets: rs_r,
            namespaces: ns_r,
            nodes: node_r,
            hpas: hpa_r,
            eas: eas_r,
        },
        Arc::new(Behaviour::default()),
    );
    (cache, keys)
}

fn time_decisions(pods: usize, rounds: usize) -> f64 {
    let (cache, keys) = cache_with(pods, 10, 0);
    let mut blocked = 0usize;
    let start = Instant::now();
    for i in 0..rounds {
        let (ns, name) = &keys[(i * 7919) % keys.len()];
        if matches!(
            decide(&cache, ns, name),
            eviction_autoscaler::webhook::eviction::Decision::Block(_)
        ) {
            blocked += 1;
        }
    }
    let per = start.elapsed().as_secs_f64() / rounds as f64;
    assert_eq!(
        blocked, rounds,
        "every sampled eviction is blocked by its budget"
    );
    per
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|s| s.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let mem = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .next()
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<f64>().ok())
        })
        .map_or_else(String::new, |kb| format!(", {:.0} GiB RAM", kb / 1048576.0));
    format!("{cpu}, {cores} cores{mem}, Linux {}", kernel.trim())
}

fn main() {
    let report_path = std::env::args().nth(1);
    out!("# Benchmarks\n");
    out!("Written by `make bench` (`cargo run --release --example bench -- BENCHMARKS.md`).");
    out!("One run; every comparison is a ratio measured side by side in that run.\n");
    out!(
        "- date: {}",
        humantime::format_rfc3339_seconds(std::time::SystemTime::now())
    );
    out!("- machine: {}", machine());
    out!(
        "- load generator: {}",
        http::h2load_version()
            .unwrap_or_else(|| "h2load not found (apt-get install -y nghttp2-client)".into())
    );
    out!(
        "- load average before the run (other work on this machine): {}",
        load_average()
    );
    out!("");
    out!("```");
    if std::env::var_os("BENCH_PLAN_ONLY").is_some() {
        // The reconciler's plan alone (a quick look while changing it).
        plans();
        return;
    }
    if std::env::var_os("BENCH_ROUTER_ONLY").is_none()
        && std::env::var_os("BENCH_ROUTER_PAR").is_none()
        && std::env::var_os("BENCH_CPU_ONLY").is_none()
    {
        in_process();
    }
    out!("```\n");
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            out!("no tokio runtime: {e}");
            std::process::exit(1);
        }
    };
    let ok = match rt.block_on(over_https()) {
        Ok(()) => true,
        Err(e) => {
            out!("\nadmission over HTTPS failed: {e}");
            false
        }
    };
    out!("\nLoad average after the run: {}.", load_average());
    out!(
        "\nh2load comes from Debian's nghttp2-client (`apt-get install -y nghttp2-client` works on \
         this machine; so does `wrk`, not needed: h2load's `--h1` drives HTTP/1.1 keep-alive and its \
         `--log-file` gives the per-request times the percentiles come from). Both servers share the \
         machine's cores with h2load, so the ratios matter more than the absolute figures."
    );
    if let (Some(path), Ok(r)) = (report_path, REPORT.lock()) {
        // The figures of `make bench-cluster` are copied in by hand below
        // this heading; a rewrite keeps them.
        const CLUSTER: &str = "\n## On the local control plane";
        let kept = std::fs::read_to_string(&path)
            .ok()
            .and_then(|old| old.find(CLUSTER).map(|i| old[i..].to_string()))
            .unwrap_or_default();
        if let Err(e) = std::fs::write(&path, format!("{}{kept}", r.as_str())) {
            eprintln!("cannot write {path}: {e}");
            std::process::exit(1);
        }
        eprintln!("wrote {path}");
    }
    if !ok {
        std::process::exit(1);
    }
}

/// Bench item 1 of issue 9.
/// Saturation rounds per protocol and server: the machines are noisy
/// (single rounds vary by 10%), so the ratio is of means over several.
const HTTPS_ROUNDS: usize = 5;

async fn over_https() -> Result<(), http::BenchError> {
    use http::Proto;
    let (pods, apps) = (10_000, 20);
    let (cache, keys) = cache_with(pods, apps, 1);
    let bcache = cache.clone();
    let pod = keys[keys.len() / 2].clone();
    let dir = std::env::temp_dir().join(format!("ea-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| http::BenchError::Setup(e.to_string()))?;
    let s = http::start(cache, &dir, (&pod.0, &pod.1)).await?;
    out!("## Admission over HTTPS\n");
    out!(
        "The real server (router, TLS accept loop, handler, decision) in process on a warm cache of \
         {pods} pods and {} PDBs (100 namespaces), every request the eviction of a pod whose budget \
         allows it (the hot path: no apiserver call), with EVICTION_HOLD {:?} (with a hold, each \
         such eviction takes its room in the ledger of evictions let through). Beside it, a minimal \
         axum + rustls server answering a constant AdmissionReview with the same rustls \
         configuration: the stack's limit. Load from h2load on the same machine (HTTP/2: 4 \
         connections x 16 streams; HTTP/1.1: 32 keep-alive connections), runs interleaved product \
         / bare, {HTTPS_ROUNDS} rounds of 4 s each.\n",
        100 * apps,
        s.hold
    );
    let body = s.body.clone();
    // Where the difference comes from: the same request through each router
    // alone, no TLS and no HTTP framing (one thread, one request at a time).
    let raw = axum::body::Bytes::from(
        std::fs::read(&body).map_err(|e| http::BenchError::Setup(e.to_string()))?,
    );
    let n = 100_000;
    // Allocations per request, counted in a separate untimed pass.
    let mut allocs = [0.0; 2];
    for (a, app) in allocs.iter_mut().zip([&s.product_app, &s.bare_app]) {
        let m = 1_000;
        counting(true);
        let before = allocations();
        http::router_cost(app, &raw, m).await?;
        *a = (allocations() - before) as f64 / f64::from(m);
        counting(false);
    }
    // Both routers on every worker at once: what sharing state across cores
    // costs (cache lines that move between cores on every request), beside
    // one request at a time.
    if std::env::var_os("BENCH_ROUTER_PAR").is_some() {
        let workers = std::thread::available_parallelism().map_or(2, |n| n.get());
        for (name, app) in [("product", &s.product_app), ("bare", &s.bare_app)] {
            for _ in 0..3 {
                let one = http::router_cost(app, &raw, n).await?;
                let tasks: Vec<_> = (0..workers)
                    .map(|_| {
                        let (app, raw) = (app.clone(), raw.clone());
                        tokio::spawn(async move { http::router_cost(&app, &raw, n).await })
                    })
                    .collect();
                let mut par = Vec::new();
                for t in tasks {
                    par.push(
                        t.await
                            .map_err(|e| http::BenchError::Setup(e.to_string()))??,
                    );
                }
                let mean = par.iter().sum::<Duration>() / par.len() as u32;
                out!(
                    "{name} router: one at a time {:.2} us/request, {workers} at once {:.2} us/request each",
                    one.as_secs_f64() * 1e6,
                    mean.as_secs_f64() * 1e6
                );
            }
        }
        return Ok(());
    }
    // For a profiler: the product's router alone, for a while, then stop.
    if std::env::var_os("BENCH_ROUTER_ONLY").is_some() {
        out!(
            "allocations per request: product {:.1}, bare {:.1}",
            allocs[0],
            allocs[1]
        );
        alloc_breakdown(&bcache, &pod.0, &pod.1, &raw);
        for _ in 0..10 {
            let t = http::router_cost(&s.product_app, &raw, n).await?;
            out!("product router: {:.2} us/request", t.as_secs_f64() * 1e6);
        }
        return Ok(());
    }
    // For a profiler: h2load against the product alone, then stop
    // (BENCH_PRODUCT_ONLY=h1 for HTTP/1.1, anything else HTTP/2;
    // BENCH_SERVER=bare aims it at the bare server instead, for a profile
    // to compare with).
    if let Some(p) = std::env::var_os("BENCH_PRODUCT_ONLY") {
        let proto = if p == "h1" { Proto::H1 } else { Proto::H2 };
        let (name, addr) = match std::env::var("BENCH_SERVER").as_deref() {
            Ok("bare") => ("bare", s.bare),
            Ok("stack") => ("stack", s.stack),
            _ => ("product", s.product),
        };
        // BENCH_RATE: at that fixed rate instead (CPU per request).
        if let Some(rate) = std::env::var("BENCH_RATE")
            .ok()
            .and_then(|r| r.parse().ok())
        {
            let tick = http::clock_tick();
            for _ in 0..3 {
                let req = body.clone();
                let us = blocking(move || http::cpu_per_request(proto, &req, addr, rate, 4, tick))
                    .await?;
                out!(
                    "{name} over {} at {rate}/s: {us:.1} us CPU/request",
                    proto.name()
                );
            }
            return Ok(());
        }
        for _ in 0..4 {
            let req = body.clone();
            let r = blocking(move || http::saturation(proto, &req, addr, 4)).await?;
            out!("{name} over {}: {r:.0} req/s", proto.name());
        }
        return Ok(());
    }
    let (mut pr, mut br) = (Vec::new(), Vec::new());
    for _ in 0..3 {
        pr.push(http::router_cost(&s.product_app, &raw, n).await?);
        br.push(http::router_cost(&s.bare_app, &raw, n).await?);
    }
    let best = |v: &[Duration]| v.iter().min().copied().unwrap_or_default().as_secs_f64() * 1e6;
    out!(
        "Per request through the router alone (no TLS, no HTTP framing; {n} requests one at a time, best of 3): \
         product {:.2} us, bare {:.2} us, difference {:.2} us; allocations per request (the bench's \
         own request and answer included): product {:.1}, bare {:.1}.\n",
        best(&pr),
        best(&br),
        best(&pr) - best(&br),
        allocs[0],
        allocs[1]
    );
    // For comparing changes: the CPU per request alone (below), then stop.
    let cpu_only = std::env::var_os("BENCH_CPU_ONLY").is_some();
    let rounds = HTTPS_ROUNDS;
    out!("| protocol | product req/s (rounds) | bare req/s (rounds) | ratio of means | target | product's serve loop, bare handler: req/s, ratio |");
    out!("|---|---|---|---|---|---|");
    for proto in [Proto::H2, Proto::H1].into_iter().filter(|_| !cpu_only) {
        let (mut p, mut b, mut st) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..rounds {
            let (req, addr) = (body.clone(), s.product);
            p.push(blocking(move || http::saturation(proto, &req, addr, 4)).await?);
            let (req, addr) = (body.clone(), s.bare);
            b.push(blocking(move || http::saturation(proto, &req, addr, 4)).await?);
            let (req, addr) = (body.clone(), s.stack);
            st.push(blocking(move || http::saturation(proto, &req, addr, 4)).await?);
        }
        let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
        let list = |v: &[f64]| {
            v.iter()
                .map(|x| format!("{x:.0}"))
                .collect::<Vec<_>>()
                .join(" / ")
        };
        out!(
            "| {} | {:.0} ({}) | {:.0} ({}) | {:.2} | >= 0.8 | {:.0}, {:.2} |",
            proto.name(),
            mean(&p),
            list(&p),
            mean(&b),
            list(&b),
            mean(&p) / mean(&b),
            mean(&st),
            mean(&st) / mean(&b)
        );
    }
    out!("");
    // Cost rather than capacity: CPU per request below saturation, where
    // sharing the two cores with h2load does not move the figure.
    let (rate, secs, tick) = (8000, 4, http::clock_tick());
    out!("Server CPU time per request at a fixed {rate} requests/s ({secs} s, 16 connections; this process's CPU time over the run divided by the requests, h2load not counted; median of 3 interleaved rounds):\n");
    out!("| protocol | product | bare | product's serve loop, bare handler | product / bare |");
    out!("|---|---|---|---|---|");
    for proto in [Proto::H2, Proto::H1] {
        let mut runs = [Vec::new(), Vec::new(), Vec::new()];
        for _ in 0..3 {
            for (i, addr) in [s.product, s.bare, s.stack].into_iter().enumerate() {
                let req = body.clone();
                runs[i].push(
                    blocking(move || http::cpu_per_request(proto, &req, addr, rate, secs, tick))
                        .await?,
                );
            }
        }
        let [p, b, st] = runs.map(|mut v| {
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        });
        out!(
            "| {} | {p:.1} us | {b:.1} us | {st:.1} us | {:.2} |",
            proto.name(),
            p / b
        );
    }
    out!("");
    if cpu_only {
        return Ok(());
    }
    let rate = 2000;
    out!("Latency at a fixed rate of {rate} requests/s (4 connections, 5 s after 1 s of warm-up; h2load's per-request log):\n");
    out!("| protocol | server | p50 | p99 | p99.9 | target |");
    out!("|---|---|---|---|---|---|");
    for proto in [Proto::H2, Proto::H1] {
        for (name, addr) in [("product", s.product), ("bare", s.bare)] {
            let (req, log) = (body.clone(), dir.join("latency.log"));
            let (p50, p99, p999) =
                blocking(move || http::at_rate(proto, &req, addr, rate, 5, &log)).await?;
            out!(
                "| {} | {name} | {:.0} us | {:.0} us | {:.0} us | {} |",
                proto.name(),
                p50,
                p99,
                p999,
                if name == "product" {
                    "p99 < 1000 us"
                } else {
                    ""
                }
            );
        }
    }
    out!("");
    if let Some(us) = http::handler_mean_us(&s.metrics) {
        out!("Mean time inside the eviction handler over the whole run (admission_duration_seconds): {us:.1} us.");
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, http::BenchError> + Send + 'static,
) -> Result<T, http::BenchError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| http::BenchError::Setup(e.to_string()))?
}

fn in_process() {
    let n = 20_000;
    let m = memory_per_pod(n);
    out!("memory per cached pod ({n} realistic pods, 100 namespaces, 50 nodes):");
    out!(
        "  full k8s-openapi Pod              : {:>8.0} bytes",
        m.full
    );
    out!(
        "  stripped ObjectMeta (before)      : {:>8.0} bytes",
        m.wire
    );
    out!(
        "  SlimPod, interned (cache)         : {:>8.0} bytes",
        m.slim
    );
    out!(
        "  SlimPod in the PodStore (w/ maps) : {:>8.0} bytes",
        m.in_store
    );
    out!(
        "  ratio full / slim                 : {:>8.1}x",
        m.full / m.slim
    );
    out!(
        "  100k pods in cache                : {:>8.1} MiB (full would be {:.1} MiB)\n",
        m.in_store * 1e5 / 1048576.0,
        m.full * 1e5 / 1048576.0
    );

    let rounds = 20_000;
    let small = time_decisions(10_000, rounds);
    let large = time_decisions(100_000, rounds);
    out!("eviction decision over reflector stores (1000 PDBs, {rounds} decisions each):");
    out!("  10k pods  : {:>8.2} us/decision", small * 1e6);
    out!("  100k pods : {:>8.2} us/decision", large * 1e6);
    out!(
        "  ratio 100k / 10k : {:>5.2}x (1.0 = independent of the pod count)\n",
        large / small
    );

    let review = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "u", "kind": {"group": "policy", "version": "v1", "kind": "Eviction"},
        "resource": {"group": "", "version": "v1", "resource": "pods"}, "subResource": "eviction",
        "name": "p", "namespace": "ns", "operation": "CREATE", "userInfo": {"username": "admin"},
        "object": {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "p", "namespace": "ns"}}, "dryRun": false}});
    let body = serde_json::to_vec(&review).unwrap_or_default();
    let k = 100_000;
    let time = |parse: &dyn Fn(&[u8]) -> bool| {
        let start = Instant::now();
        let ok = (0..k).filter(|_| parse(&body)).count();
        assert_eq!(ok, k);
        start.elapsed().as_secs_f64() / k as f64 * 1e6
    };
    let typed = time(&|b| parse_review(b).is_ok());
    let fast = time(&|b| parse_eviction_review(b).is_ok());
    out!("AdmissionReview parse, typed (kube AdmissionRequest, the mutating webhook): {typed:.2} us/request");
    out!("AdmissionReview parse, eviction fields only (the eviction webhook):       {fast:.2} us/request");
    plans();
}

/// The reconciler's plan of one steady namespace (3 pods per Deployment):
/// planned at each change in it, so it should cost in proportion.
fn plans() {
    let (small, large) = (100, 1000);
    let timed =
        plan::time_plan(small, 2000.0).and_then(|s| Ok((s, plan::time_plan(large, 4000.0)?)));
    match timed {
        Ok((s, l)) => {
            out!("\nreconciler plan of one steady namespace (PDB, record and 3 pods per Deployment):");
            out!("  {small:>5} Deployments : {s:>9.3} ms/plan");
            out!("  {large:>5} Deployments : {l:>9.3} ms/plan");
            out!(
                "  ratio {large} / {small}   : {:>8.1}x (10 = in proportion, 100 = quadratic)",
                l / s
            );
        }
        Err(e) => {
            out!("reconciler plan bench failed: {e}");
            std::process::exit(1);
        }
    }
}

/// Allocations per stage of the eviction path (printed with
/// BENCH_ROUTER_ONLY, for a profile): where the product allocates more than
/// the bare server.
pub fn alloc_breakdown(cache: &Cache, ns: &str, name: &str, body: &[u8]) {
    use eviction_autoscaler::webhook::eviction::decide_room;
    let m = 1000;
    let count = |label: &str, f: &dyn Fn()| {
        counting(true);
        let before = allocations();
        for _ in 0..m {
            f();
        }
        let a = (allocations() - before) as f64 / m as f64;
        counting(false);
        out!("  {label}: {a:.1} allocations");
    };
    count("parse", &|| {
        std::hint::black_box(parse_eviction_review(body).ok());
    });
    count("decide_room", &|| {
        std::hint::black_box(decide_room(cache, ns, name));
    });
    count("pod", &|| {
        std::hint::black_box(cache.pod(ns, name));
    });
    count("namespace_in_scope", &|| {
        std::hint::black_box(cache.namespace_in_scope(ns));
    });
    count("owning_deployment", &|| {
        let p = cache.pod(ns, name);
        std::hint::black_box(p.and_then(|p| cache.owning_deployment(&p)));
    });
}
