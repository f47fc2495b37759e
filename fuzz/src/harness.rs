//! The real webhook handlers over a fixed cluster snapshot and a fake
//! apiserver, without a cluster. Shared by the fuzz targets (fuzz/) and the
//! stable HTTP driver and tests (`#[path]` includes this file), so it uses
//! only the product's own dependencies.
//!
//! Snapshot, namespace `ns` (in scope), node `node-1`:
//! - Deployment `web` (3 replicas) with PDB `web` (minAvailable 3,
//!   disruptionsAllowed 0): evictions of its pods `web-0..2` are blocked.
//! - Deployment `free` with PDB `free` allowing 1: pods `free-0..1` go.
//! - Pod `pending` (phase Pending); pod `stateful-0` owned by a StatefulSet;
//!   pod `double-0` selected by two PDBs.
//!
//! Namespace `off` is out of scope (no annotation, not actioned) and holds
//! the same `web` Deployment and PDB: nothing there may ever be denied.
//!
//! The fake apiserver answers the webhook's live reads from the snapshot,
//! echoes PDB creates with 201, and counts every write.

use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::http::{Method, Request, Response, StatusCode};
use eviction_autoscaler::cache::{Cache, PodStore, SlimPod, Stores};
use eviction_autoscaler::config::Behaviour;
use eviction_autoscaler::metrics::Metrics;
use eviction_autoscaler::webhook::live::ApiReader;
use eviction_autoscaler::webhook::{Signal, Webhooks};
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::runtime::reflector::{self, store::Writer};
use kube::runtime::watcher::Event;
use serde_json::{json, Value};
use tokio::sync::mpsc;

/// Namespaces of the snapshot: in scope, out of scope.
pub const NAMESPACES: [&str; 2] = ["ns", "off"];
/// Pods present in each namespace of the snapshot.
pub const PODS: [&str; 8] = [
    "web-0",
    "web-1",
    "web-2",
    "free-0",
    "free-1",
    "pending",
    "stateful-0",
    "double-0",
];

fn pod(ns: &str, name: &str, app: &str, owner: Value, phase: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "uid": format!("uid-{ns}-{name}"),
                     "labels": {"app": app}, "ownerReferences": [owner]},
        "spec": {"nodeName": "node-1"},
        "status": {"phase": phase, "conditions": [{"type": "Ready", "status": "True"}]}
    })
}

fn rs_owner(app: &str) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": format!("{app}-rs"),
           "uid": format!("rs-{app}"), "controller": true})
}

fn pdb(ns: &str, name: &str, selector: Value, allowed: i32, healthy: i32) -> Value {
    json!({
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": ns, "generation": 1, "uid": format!("pdb-{ns}-{name}")},
        "spec": {"minAvailable": healthy, "selector": selector},
        "status": {"disruptionsAllowed": allowed, "currentHealthy": healthy, "desiredHealthy": healthy,
                   "expectedPods": healthy, "observedGeneration": 1}
    })
}

/// Pods and PDBs of one namespace, as the apiserver would send them.
pub fn namespace_objects(ns: &str) -> (Vec<Value>, Vec<Value>) {
    let mut pods = Vec::new();
    for i in 0..3 {
        pods.push(pod(
            ns,
            &format!("web-{i}"),
            "web",
            rs_owner("web"),
            "Running",
        ));
    }
    for i in 0..2 {
        pods.push(pod(
            ns,
            &format!("free-{i}"),
            "free",
            rs_owner("free"),
            "Running",
        ));
    }
    pods.push(pod(ns, "pending", "web", rs_owner("web"), "Pending"));
    pods.push(pod(
        ns,
        "stateful-0",
        "db",
        json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "db", "uid": "sts-db", "controller": true}),
        "Running",
    ));
    pods.push(pod(ns, "double-0", "double", rs_owner("double"), "Running"));
    let pdbs = vec![
        pdb(ns, "web", json!({"matchLabels": {"app": "web"}}), 0, 3),
        pdb(ns, "free", json!({"matchLabels": {"app": "free"}}), 1, 2),
        pdb(ns, "db", json!({"matchLabels": {"app": "db"}}), 0, 1),
        pdb(
            ns,
            "double-a",
            json!({"matchLabels": {"app": "double"}}),
            0,
            1,
        ),
        pdb(
            ns,
            "double-b",
            json!({"matchExpressions": [{"key": "app", "operator": "In", "values": ["double"]}]}),
            0,
            1,
        ),
    ];
    (pods, pdbs)
}

fn fill<K>(w: &mut Writer<K>, objs: Vec<Value>)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone + Default,
{
    w.apply_watcher_event(&Event::Init);
    for o in objs {
        if let Ok(k) = serde_json::from_value::<K>(o) {
            w.apply_watcher_event(&Event::InitApply(k));
        }
    }
    w.apply_watcher_event(&Event::InitDone);
}

fn snapshot(behaviour: Behaviour) -> Cache {
    let pod_store = PodStore::default();
    let mut pod_w = pod_store.writer();
    let (pdb_r, mut pdb_w) = reflector::store::<PodDisruptionBudget>();
    let (dep_r, mut dep_w) = reflector::store::<Deployment>();
    let (rs_r, mut rs_w) = reflector::store::<ReplicaSet>();
    let (ns_r, mut ns_w) = reflector::store::<Namespace>();
    let (node_r, mut node_w) = reflector::store();
    let (hpa_r, mut hpa_w) = reflector::store();
    let (eas_r, mut eas_w) = reflector::store();
    let (mut pods, mut pdbs, mut deps, mut rss, mut nss) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for ns in NAMESPACES {
        let (p, b) = namespace_objects(ns);
        pods.extend(p);
        pdbs.extend(b);
        let ann = if ns == "ns" {
            json!({"eviction-autoscaler.azure.com/enable": "true"})
        } else {
            json!({})
        };
        nss.push(json!({"metadata": {"name": ns, "annotations": ann}}));
        for (app, replicas) in [("web", 3), ("free", 2), ("double", 1)] {
            deps.push(json!({
                "metadata": {"name": app, "namespace": ns, "uid": format!("dep-{ns}-{app}")},
                "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": app}},
                         "template": {"metadata": {"labels": {"app": app}}}}
            }));
            rss.push(json!({
                "metadata": {"name": format!("{app}-rs"), "namespace": ns, "uid": format!("rs-{app}"),
                    "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": app,
                                         "uid": format!("dep-{ns}-{app}"), "controller": true}]},
                "spec": {"selector": {"matchLabels": {"app": app}}}
            }));
        }
    }
    pod_w.init();
    for p in pods {
        if let Ok(p) = serde_json::from_value::<SlimPod>(p) {
            pod_w.apply_pod(p);
        }
    }
    pod_w.init_done();
    fill(&mut pdb_w, pdbs);
    fill(&mut dep_w, deps);
    fill(&mut rs_w, rss);
    fill(&mut ns_w, nss);
    fill::<k8s_openapi::api::core::v1::Node>(&mut node_w, vec![]);
    fill::<k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler>(&mut hpa_w, vec![]);
    fill::<eviction_autoscaler::crd::EvictionAutoScaler>(&mut eas_w, vec![]);
    Cache::from_stores(
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
        Arc::new(behaviour),
    )
}

/// Writes the fake apiserver received (PDB creates).
#[derive(Default)]
pub struct Writes(AtomicUsize);

impl Writes {
    pub fn count(&self) -> usize {
        self.0.load(Ordering::Relaxed)
    }
}

fn reply(code: StatusCode, body: Value) -> Response<kube::client::Body> {
    let mut r = Response::new(kube::client::Body::from(body.to_string().into_bytes()));
    *r.status_mut() = code;
    r.headers_mut().insert(
        axum::http::header::CONTENT_TYPE,
        axum::http::HeaderValue::from_static("application/json"),
    );
    r
}

fn not_found() -> Response<kube::client::Body> {
    reply(
        StatusCode::NOT_FOUND,
        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404, "message": "not found"}),
    )
}

async fn fake_apiserver(
    req: Request<kube::client::Body>,
    writes: Arc<Writes>,
) -> Response<kube::client::Body> {
    let path = req.uri().path().to_string();
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    match (req.method().clone(), parts.as_slice()) {
        (Method::GET, ["api", "v1", "namespaces", ns, "pods", name]) => {
            let (pods, _) = namespace_objects(ns);
            pods.into_iter()
                .find(|p| p["metadata"]["name"] == *name)
                .map_or_else(not_found, |p| reply(StatusCode::OK, p))
        }
        (Method::GET, ["apis", "policy", "v1", "namespaces", ns, "poddisruptionbudgets"]) => {
            let (_, pdbs) = namespace_objects(ns);
            reply(
                StatusCode::OK,
                json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudgetList",
                       "metadata": {"resourceVersion": "1"}, "items": pdbs}),
            )
        }
        (Method::POST, ["apis", "policy", "v1", "namespaces", _, "poddisruptionbudgets"]) => {
            writes.0.fetch_add(1, Ordering::Relaxed);
            let body = axum::body::to_bytes(axum::body::Body::new(req.into_body()), 4 << 20)
                .await
                .unwrap_or_default();
            let v: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
            reply(StatusCode::CREATED, v)
        }
        _ => not_found(),
    }
}

/// The handlers over the snapshot; build inside a Tokio runtime (the kube
/// client spawns its buffer task). `pdb_create` as the PDB_CREATE setting.
pub fn webhooks(pdb_create: bool) -> (Arc<Webhooks>, Arc<Writes>, mpsc::Receiver<Signal>) {
    let writes = Arc::new(Writes::default());
    let w = writes.clone();
    let svc = tower::service_fn(move |req: Request<kube::client::Body>| {
        let w = w.clone();
        async move { Ok::<_, Infallible>(fake_apiserver(req, w).await) }
    });
    let client = kube::Client::new(svc, "default");
    let (signals, rx) = mpsc::channel(1024);
    let behaviour = Behaviour {
        pdb_create,
        ..Behaviour::default()
    };
    let hooks = Webhooks {
        cache: snapshot(behaviour),
        live: ApiReader {
            client: client.clone(),
        },
        live_timeout: Duration::from_secs(2),
        client,
        metrics: Arc::new(Metrics::new()),
        signals,
        write_timeout: Duration::from_secs(2),
        // No hold: each input is answered at once.
        hold: Duration::ZERO,
        held: Arc::new(tokio::sync::Semaphore::new(
            eviction_autoscaler::webhook::hold::MAX_HELD,
        )),
        room: Default::default(),
    };
    (Arc::new(hooks), writes, rx)
}

/// An eviction AdmissionReview for `ns/pod`.
pub fn eviction_review(uid: &str, ns: &str, pod: &str, dry_run: bool) -> Value {
    json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "policy", "version": "v1", "kind": "Eviction"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "subResource": "eviction",
            "requestKind": {"group": "policy", "version": "v1", "kind": "Eviction"},
            "requestResource": {"group": "", "version": "v1", "resource": "pods"},
            "requestSubResource": "eviction",
            "name": pod, "namespace": ns, "operation": "CREATE",
            "userInfo": {"username": "system:serviceaccount:kube-system:drainer"},
            "object": {"apiVersion": "policy/v1", "kind": "Eviction",
                       "metadata": {"name": pod, "namespace": ns}},
            "oldObject": null, "dryRun": dry_run,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"}
        }
    })
}

/// A Deployment CREATE AdmissionReview carrying `deployment`.
pub fn deployment_review(uid: &str, ns: &str, deployment: Value, dry_run: bool) -> Value {
    let name = deployment["metadata"]["name"].clone();
    json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "apps", "version": "v1", "kind": "Deployment"},
            "resource": {"group": "apps", "version": "v1", "resource": "deployments"},
            "requestKind": {"group": "apps", "version": "v1", "kind": "Deployment"},
            "requestResource": {"group": "apps", "version": "v1", "resource": "deployments"},
            "name": name, "namespace": ns, "operation": "CREATE",
            "userInfo": {"username": "alice"},
            "object": deployment, "oldObject": null, "dryRun": dry_run,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"}
        }
    })
}
