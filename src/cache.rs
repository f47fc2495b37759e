//! Watch caches (kube-rs reflectors) for what the decisions read. Objects are
//! stripped on arrival to what the product uses: at 100k pods, memory per pod
//! matters, so pods are decoded into [`SlimPod`] and never held in full.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::{Namespace, Node};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;
use serde::Deserialize;
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::config::Behaviour;
use crate::crd::EvictionAutoScaler;
use crate::names;
use crate::scope;

/// The fields of a Pod the product reads; everything else is skipped while decoding.
#[derive(Deserialize, Clone, Debug, Default)]
pub struct SlimPod {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: SlimPodSpec,
    #[serde(default)]
    pub status: SlimPodStatus,
}

#[derive(Deserialize, Clone, Debug, Default)]
#[serde(rename_all = "camelCase")]
pub struct SlimPodSpec {
    #[serde(default)]
    pub node_name: Option<String>,
}

#[derive(Deserialize, Clone, Debug, Default)]
pub struct SlimPodStatus {
    #[serde(default)]
    pub phase: Option<String>,
    #[serde(default)]
    pub conditions: Vec<SlimCondition>,
}

#[derive(Deserialize, Clone, Debug, Default)]
pub struct SlimCondition {
    #[serde(rename = "type")]
    pub type_: String,
    pub status: String,
}

impl k8s_openapi::Resource for SlimPod {
    const API_VERSION: &'static str = "v1";
    const GROUP: &'static str = "";
    const KIND: &'static str = "Pod";
    const VERSION: &'static str = "v1";
    const URL_PATH_SEGMENT: &'static str = "pods";
    type Scope = k8s_openapi::NamespaceResourceScope;
}

impl k8s_openapi::Metadata for SlimPod {
    type Ty = ObjectMeta;
    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn metadata_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

impl SlimPod {
    /// `podutil.IsPodReady`: the Ready condition is True.
    pub fn is_ready(&self) -> bool {
        self.status
            .conditions
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True")
    }

    pub fn is_terminating(&self) -> bool {
        self.metadata.deletion_timestamp.is_some()
    }

    /// `canIgnorePDB` of eviction.go: terminal, pending or terminating pods
    /// are deleted without consulting any budget.
    pub fn budget_ignored(&self) -> bool {
        self.is_terminating()
            || matches!(
                self.status.phase.as_deref(),
                Some("Pending" | "Succeeded" | "Failed")
            )
    }

    pub fn labels(&self) -> &BTreeMap<String, String> {
        static EMPTY: BTreeMap<String, String> = BTreeMap::new();
        self.metadata.labels.as_ref().unwrap_or(&EMPTY)
    }
}

/// The controller owner reference of an object, if any.
pub fn controller_of(meta: &ObjectMeta) -> Option<&OwnerReference> {
    meta.owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))
}

/// What a cached pod keeps: labels, owner, node, phase, conditions.
pub fn strip_pod(p: &mut SlimPod) {
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
    // Readiness is the only condition a decision reads.
    p.status.conditions.retain(|c| c.type_ == "Ready");
    p.status.conditions.shrink_to_fit();
}

/// Drop what no decision reads, so the caches stay small.
pub fn strip_meta(meta: &mut ObjectMeta) {
    meta.managed_fields = None;
    if let Some(a) = meta.annotations.as_mut() {
        a.remove("kubectl.kubernetes.io/last-applied-configuration");
    }
}

/// Read access to the caches, shared by webhooks and controllers.
#[derive(Clone)]
pub struct Cache {
    pub pods: Store<SlimPod>,
    pub pdbs: Store<PodDisruptionBudget>,
    pub deployments: Store<Deployment>,
    pub replicasets: Store<ReplicaSet>,
    pub namespaces: Store<Namespace>,
    pub nodes: Store<Node>,
    pub hpas: Store<HorizontalPodAutoscaler>,
    pub eas: Store<EvictionAutoScaler>,
    /// KEDA ScaledObjects, once the KEDA CRD is seen (it may be installed later).
    pub keda: Arc<RwLock<Option<Store<DynamicObject>>>>,
    /// Bumped on every watch event: wakes the controllers.
    pub changed: watch::Receiver<u64>,
    synced: Arc<AtomicBool>,
    pub behaviour: Arc<Behaviour>,
}

/// The stores of a [`Cache`], for caches filled by hand (benchmarks, tests).
pub struct Stores {
    pub pods: Store<SlimPod>,
    pub pdbs: Store<PodDisruptionBudget>,
    pub deployments: Store<Deployment>,
    pub replicasets: Store<ReplicaSet>,
    pub namespaces: Store<Namespace>,
    pub nodes: Store<Node>,
    pub hpas: Store<HorizontalPodAutoscaler>,
    pub eas: Store<EvictionAutoScaler>,
}

impl Cache {
    /// A synced cache over stores that something else fills.
    pub fn from_stores(s: Stores, behaviour: Arc<Behaviour>) -> Cache {
        let (_tx, changed) = watch::channel(0u64);
        Cache {
            pods: s.pods,
            pdbs: s.pdbs,
            deployments: s.deployments,
            replicasets: s.replicasets,
            namespaces: s.namespaces,
            nodes: s.nodes,
            hpas: s.hpas,
            eas: s.eas,
            keda: Arc::new(RwLock::new(None)),
            changed,
            synced: Arc::new(AtomicBool::new(true)),
            behaviour,
        }
    }

    pub fn synced(&self) -> bool {
        self.synced.load(Ordering::Acquire)
    }

    pub fn pod(&self, ns: &str, name: &str) -> Option<Arc<SlimPod>> {
        self.pods.get(&ObjectRef::new(name).within(ns))
    }

    pub fn pdbs_in(&self, ns: &str) -> Vec<Arc<PodDisruptionBudget>> {
        self.pdbs
            .state_filter(|p| p.metadata.namespace.as_deref() == Some(ns))
    }

    pub fn deployment(&self, ns: &str, name: &str) -> Option<Arc<Deployment>> {
        self.deployments.get(&ObjectRef::new(name).within(ns))
    }

    /// Pod → ReplicaSet → Deployment, following controller references.
    pub fn owning_deployment(&self, pod: &SlimPod) -> Option<Arc<Deployment>> {
        let ns = pod.metadata.namespace.as_deref()?;
        let rs_ref = controller_of(&pod.metadata).filter(|o| o.kind == "ReplicaSet")?;
        let rs = self
            .replicasets
            .get(&ObjectRef::new(&rs_ref.name).within(ns))?;
        let dep_ref = controller_of(&rs.metadata).filter(|o| o.kind == "Deployment")?;
        let dep = self.deployment(ns, &dep_ref.name)?;
        (dep.metadata.uid.as_deref() == Some(dep_ref.uid.as_str())).then_some(dep)
    }

    /// The ScaledObjects in a namespace (empty while KEDA is not installed).
    pub fn scaled_objects_in(&self, ns: &str) -> Vec<Arc<DynamicObject>> {
        self.keda
            .read()
            .ok()
            .and_then(|g| g.clone())
            .map(|s| s.state_filter(|o| o.metadata.namespace.as_deref() == Some(ns)))
            .unwrap_or_default()
    }

    pub fn namespace_in_scope(&self, ns: &str) -> bool {
        let nso = self.namespaces.get(&ObjectRef::new(ns));
        let ann = nso.as_ref().and_then(|n| n.metadata.annotations.as_ref());
        scope::namespace_scope(ns, ann, &self.behaviour).enabled
    }
}

/// Starts one reflector per resource. The returned [`Cache`] answers at once
/// (empty) and reports `synced()` once every store has had its initial list.
pub fn start(client: Client, behaviour: Arc<Behaviour>, tasks: &mut JoinSet<()>) -> Cache {
    let cfg = watcher::Config::default();
    let (tx, changed) = watch::channel(0u64);
    let tx = &tx;
    let pods = reflect::<SlimPod>(Api::all(client.clone()), cfg.clone(), tasks, tx, strip_pod);
    let pdbs =
        reflect::<PodDisruptionBudget>(Api::all(client.clone()), cfg.clone(), tasks, tx, |p| {
            strip_meta(&mut p.metadata)
        });
    let deployments =
        reflect::<Deployment>(Api::all(client.clone()), cfg.clone(), tasks, tx, |d| {
            strip_meta(&mut d.metadata);
            if let Some(spec) = d.spec.as_mut() {
                // Pod template labels matter (PDB selectors); containers do not.
                spec.template.spec = None;
            }
        });
    let replicasets =
        reflect::<ReplicaSet>(Api::all(client.clone()), cfg.clone(), tasks, tx, |r| {
            strip_meta(&mut r.metadata);
            r.metadata.annotations = None;
            r.spec = None;
            r.status = None;
        });
    let namespaces = reflect::<Namespace>(Api::all(client.clone()), cfg.clone(), tasks, tx, |n| {
        strip_meta(&mut n.metadata)
    });
    let nodes = reflect::<Node>(Api::all(client.clone()), cfg.clone(), tasks, tx, |n| {
        strip_meta(&mut n.metadata);
        n.metadata.annotations = None;
        n.status = None;
    });
    let hpas =
        reflect::<HorizontalPodAutoscaler>(Api::all(client.clone()), cfg.clone(), tasks, tx, |h| {
            strip_meta(&mut h.metadata);
            h.status = None;
        });
    let eas = reflect::<EvictionAutoScaler>(Api::all(client.clone()), cfg, tasks, tx, |e| {
        strip_meta(&mut e.metadata)
    });
    let keda = Arc::new(RwLock::new(None));
    tasks.spawn(watch_keda_when_installed(client, keda.clone(), tx.clone()));

    let synced = Arc::new(AtomicBool::new(false));
    let cache = Cache {
        pods,
        pdbs,
        deployments,
        replicasets,
        namespaces,
        nodes,
        hpas,
        eas,
        keda,
        changed,
        synced: synced.clone(),
        behaviour,
    };
    let c = cache.clone();
    tasks.spawn(async move {
        let all = futures::future::try_join_all([
            futures::future::Either::Left(c.pods.wait_until_ready()),
            futures::future::Either::Right(c.pdbs.wait_until_ready()),
        ]);
        let rest = futures::future::try_join5(
            c.deployments.wait_until_ready(),
            c.replicasets.wait_until_ready(),
            c.namespaces.wait_until_ready(),
            c.nodes.wait_until_ready(),
            c.hpas.wait_until_ready(),
        );
        let crs = c.eas.wait_until_ready();
        match futures::future::try_join3(all, rest, crs).await {
            Ok(_) => {
                synced.store(true, Ordering::Release);
                tracing::info!("watch caches synced");
            }
            Err(e) => tracing::error!(error = %e, "a watch cache stopped before it synced"),
        }
    });
    cache
}

fn reflect<K>(
    api: Api<K>,
    cfg: watcher::Config,
    tasks: &mut JoinSet<()>,
    changed: &watch::Sender<u64>,
    strip: impl FnMut(&mut K) + Send + 'static,
) -> Store<K>
where
    K: Resource<DynamicType = ()>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let (reader, writer) = reflector::store();
    let kind = K::kind(&()).to_string();
    let changed = changed.clone();
    let stream = watcher(api, cfg)
        .default_backoff()
        .modify(strip)
        .reflect(writer)
        .touched_objects();
    tasks.spawn(async move {
        let mut stream = std::pin::pin!(stream.map_err(|e| e.to_string()));
        while let Some(item) = stream.next().await {
            match item {
                Ok(_) => changed.send_modify(|n| *n = n.wrapping_add(1)),
                // The watcher backs off and retries by itself; say why it is not syncing.
                Err(e) => tracing::warn!(kind = %kind, error = %e, "watch error"),
            }
        }
    });
    reader
}

pub const KEDA_GROUP: &str = "keda.sh";
pub const KEDA_VERSION: &str = "v1alpha1";

pub fn keda_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(KEDA_GROUP, KEDA_VERSION, "ScaledObject"),
        "scaledobjects",
    )
}

/// KEDA may be installed after start-up: look for its API every few seconds
/// and start watching ScaledObjects as soon as it appears.
async fn watch_keda_when_installed(
    client: Client,
    slot: Arc<RwLock<Option<Store<DynamicObject>>>>,
    changed: watch::Sender<u64>,
) {
    let gv = format!("{KEDA_GROUP}/{KEDA_VERSION}");
    loop {
        let present = client
            .list_api_group_resources(&gv)
            .await
            .map(|l| l.resources.iter().any(|r| r.name == "scaledobjects"))
            .unwrap_or(false);
        if present {
            let ar = keda_resource();
            let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
            let (reader, writer) = {
                let w = reflector::store::Writer::new(ar.clone());
                (w.as_reader(), w)
            };
            let stream = watcher(api, watcher::Config::default())
                .default_backoff()
                .reflect(writer)
                .touched_objects();
            if let Ok(mut s) = slot.write() {
                *s = Some(reader);
            }
            tracing::info!("KEDA ScaledObjects found; watching them");
            let mut stream = std::pin::pin!(stream);
            while let Some(item) = stream.next().await {
                match item {
                    Ok(_) => changed.send_modify(|n| *n = n.wrapping_add(1)),
                    Err(e) => tracing::warn!(kind = "ScaledObject", error = %e, "watch error"),
                }
            }
        }
        tokio::time::sleep(Duration::from_secs(5)).await;
    }
}

/// Is this PDB one of ours (annotation `ownedBy: EvictionAutoScaler`)?
pub fn owned_by_us(meta: &ObjectMeta) -> bool {
    meta.annotations
        .as_ref()
        .and_then(|a| a.get(names::OWNED_BY))
        .is_some_and(|v| v == names::OWNED_BY_VALUE)
}
