//! Watch caches (kube-rs reflectors) for what the decisions read. Objects are
//! stripped on arrival to what the product uses: at 100k pods, memory per pod
//! matters, so pods are decoded into [`SlimPod`] and never held in full.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, LazyLock, Mutex, RwLock};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::{Namespace, Node};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::utils::{Backoff, ResetTimerBackoff};
use kube::runtime::watcher::Event;
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Api, Client, Resource};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use smallvec::SmallVec;
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::budget::{LabelSet, Selector, SelectorIndex};
use crate::config::Behaviour;
use crate::crd::EvictionAutoScaler;
use crate::dirty::Dirty;
use crate::metrics::StoreLabel;
use crate::names;
use crate::scope;
use crate::supervise::Fatal;

/// A Pod as the watch decodes it: the fields the product reads, everything
/// else skipped. Turned into a [`SlimPod`] on arrival and then dropped.
#[derive(Deserialize, Clone, Debug, Default)]
pub struct PodWire {
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

impl k8s_openapi::Resource for PodWire {
    const API_VERSION: &'static str = "v1";
    const GROUP: &'static str = "";
    const KIND: &'static str = "Pod";
    const VERSION: &'static str = "v1";
    const URL_PATH_SEGMENT: &'static str = "pods";
    type Scope = k8s_openapi::NamespaceResourceScope;
}

impl k8s_openapi::Metadata for PodWire {
    type Ty = ObjectMeta;
    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn metadata_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// A string shared by every cached object that has it (see [`intern`]).
pub type Sym = Arc<str>;

/// The process-wide set of interned strings. Namespaces, nodes, owners and
/// label keys and values repeat across thousands of pods; each distinct value
/// is stored once. Values no pod holds any more (old ReplicaSets' names and
/// pod-template hashes) are dropped whenever the set has doubled since the
/// last sweep, so it stays proportional to what is cached. A crate
/// (lasso, string-interner) would hand out integer keys and never free;
/// `Arc<str>` frees and needs no resolver at the call sites.
struct Interner {
    set: HashSet<Sym>,
    sweep_at: usize,
}

static INTERNER: LazyLock<Mutex<Interner>> = LazyLock::new(|| {
    Mutex::new(Interner {
        set: HashSet::new(),
        sweep_at: 1024,
    })
});

pub fn intern(s: &str) -> Sym {
    let mut g = match INTERNER.lock() {
        Ok(g) => g,
        Err(poisoned) => poisoned.into_inner(),
    };
    if let Some(sym) = g.set.get(s) {
        return sym.clone();
    }
    let sym: Sym = Arc::from(s);
    g.set.insert(sym.clone());
    if g.set.len() >= g.sweep_at {
        g.set.retain(|s| Arc::strong_count(s) > 1);
        g.sweep_at = (g.set.len() * 2).max(1024);
    }
    sym
}

/// A pod's labels, interned, sorted by key.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodLabels(Box<[(Sym, Sym)]>);

impl PodLabels {
    pub fn from_map(map: Option<&BTreeMap<String, String>>) -> PodLabels {
        // BTreeMap iterates in key order: the slice is sorted.
        PodLabels(
            map.into_iter()
                .flatten()
                .map(|(k, v)| (intern(k), intern(v)))
                .collect(),
        )
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(k, v)| (&**k, &**v))
    }
}

impl LabelSet for PodLabels {
    fn label(&self, key: &str) -> Option<&str> {
        self.0
            .binary_search_by(|(k, _)| (**k).cmp(key))
            .ok()
            .map(|i| &*self.0[i].1)
    }
    fn each_label(&self, f: &mut dyn FnMut(&str, &str)) {
        for (k, v) in self.iter() {
            f(k, v);
        }
    }
}

/// The controller reference of a pod (its ReplicaSet, for a Deployment's pods).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodOwner {
    pub kind: Sym,
    pub name: Sym,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    Pending,
    Running,
    Succeeded,
    Failed,
    /// Unknown, or not reported yet.
    Other,
}

/// What the cache keeps of a Pod: what the decisions read, with every
/// repeated string interned. About 200 bytes a pod (`make bench`), against
/// 1,834 for the same pod kept as stripped `ObjectMeta` and status.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlimPod {
    name: Box<str>,
    namespace: Sym,
    node: Option<Sym>,
    owner: Option<PodOwner>,
    labels: PodLabels,
    phase: Phase,
    ready: bool,
    terminating: bool,
}

impl From<&PodWire> for SlimPod {
    fn from(w: &PodWire) -> SlimPod {
        let m = &w.metadata;
        SlimPod {
            name: m.name.as_deref().unwrap_or_default().into(),
            namespace: intern(m.namespace.as_deref().unwrap_or_default()),
            node: w.spec.node_name.as_deref().map(intern),
            owner: controller_of(m).map(|o| PodOwner {
                kind: intern(&o.kind),
                name: intern(&o.name),
            }),
            labels: PodLabels::from_map(m.labels.as_ref()),
            phase: match w.status.phase.as_deref() {
                Some("Pending") => Phase::Pending,
                Some("Running") => Phase::Running,
                Some("Succeeded") => Phase::Succeeded,
                Some("Failed") => Phase::Failed,
                _ => Phase::Other,
            },
            // `podutil.IsPodReady`: the first Ready condition is True (the
            // apiserver does not refuse a status with two).
            ready: w
                .status
                .conditions
                .iter()
                .find(|c| c.type_ == "Ready")
                .is_some_and(|c| c.status == "True"),
            terminating: m.deletion_timestamp.is_some(),
        }
    }
}

impl From<PodWire> for SlimPod {
    fn from(w: PodWire) -> SlimPod {
        SlimPod::from(&w)
    }
}

impl<'de> Deserialize<'de> for SlimPod {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<SlimPod, D::Error> {
        PodWire::deserialize(d).map(SlimPod::from)
    }
}

impl SlimPod {
    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    pub fn node(&self) -> Option<&str> {
        self.node.as_deref()
    }

    pub fn phase(&self) -> Phase {
        self.phase
    }

    /// The controller owner reference, if any.
    pub fn controller(&self) -> Option<&PodOwner> {
        self.owner.as_ref()
    }

    /// Is this pod Deployment `deployment`'s? Its controller is one of its
    /// ReplicaSets (named after it and the pod-template hash): Some(true);
    /// a controller of another kind (a DaemonSet, a StatefulSet, a Job):
    /// Some(false); no controller, or a ReplicaSet of another name: None.
    /// A ReplicaSet's name does not tell whose it is: one orphaned by
    /// `--cascade=orphan` and adopted by a Deployment made again under
    /// another name keeps its first name (the webhook follows the UIDs).
    pub fn of_deployment(&self, deployment: &str) -> Option<bool> {
        let o = self.controller()?;
        if &*o.kind != "ReplicaSet" {
            return Some(false);
        }
        (self.deployment_name()? == deployment).then_some(true)
    }

    /// The Deployment its ReplicaSet is named after (`<deployment>-<pod-template-hash>`),
    /// if its controller is a ReplicaSet named that way (see [`Self::of_deployment`]).
    pub fn deployment_name(&self) -> Option<&str> {
        let o = self.controller().filter(|o| &*o.kind == "ReplicaSet")?;
        let hash = self.labels().label("pod-template-hash")?;
        o.name.strip_suffix(hash).and_then(|n| n.strip_suffix('-'))
    }

    /// Its controller makes its replacement only once it is gone: a
    /// StatefulSet, under the same name; a DaemonSet, on the same node. A
    /// ReplicaSet makes one as soon as it is terminating.
    pub fn replaced_once_gone(&self) -> bool {
        self.controller()
            .is_some_and(|o| matches!(&*o.kind, "StatefulSet" | "DaemonSet"))
    }

    /// A StatefulSet's: made again under the same name once it is gone.
    pub fn made_again_by_name(&self) -> bool {
        self.controller().is_some_and(|o| &*o.kind == "StatefulSet")
    }

    /// `podutil.IsPodReady`: the Ready condition is True.
    pub fn is_ready(&self) -> bool {
        self.ready
    }

    pub fn is_terminating(&self) -> bool {
        self.terminating
    }

    /// Succeeded or Failed.
    pub fn is_completed(&self) -> bool {
        matches!(self.phase, Phase::Succeeded | Phase::Failed)
    }

    /// `canIgnorePDB` of eviction.go: terminal, pending or terminating pods
    /// are deleted without consulting any budget.
    pub fn budget_ignored(&self) -> bool {
        self.terminating
            || matches!(
                self.phase,
                Phase::Pending | Phase::Succeeded | Phase::Failed
            )
    }

    pub fn labels(&self) -> &PodLabels {
        &self.labels
    }
}

/// A pod in a namespace's set, found by its name.
#[derive(Clone)]
struct ByName(Arc<SlimPod>);

impl std::borrow::Borrow<str> for ByName {
    fn borrow(&self) -> &str {
        self.0.name()
    }
}

impl std::hash::Hash for ByName {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        self.0.name().hash(h)
    }
}

impl PartialEq for ByName {
    fn eq(&self, o: &Self) -> bool {
        self.0.name() == o.0.name()
    }
}

impl Eq for ByName {}

/// The maps an eviction looks up (pods by namespace and name, PDBs by
/// namespace and label) hash with foldhash, not std's SipHash: SipHash took
/// about 2% of the eviction path's CPU in a profile. Seeded per process, so
/// names chosen to collide cannot be computed in advance.
type FastMap<K, V> = HashMap<K, V, foldhash::fast::RandomState>;
type FastSet<K> = HashSet<K, foldhash::fast::RandomState>;

type PodMap = FastMap<Sym, FastSet<ByName>>;

/// The pod cache: pods by namespace, then by name. Not a kube `Store`: that
/// keys every object by an `ObjectRef` (name, namespace, resourceVersion and
/// uid as owned strings) and needs the object to carry a whole `ObjectMeta`
/// (344 bytes before any string), which alone is over the 600 bytes a pod
/// may cost. Filled by a [`PodWriter`].
#[derive(Clone)]
pub struct PodStore {
    map: Arc<RwLock<PodMap>>,
    ready: Arc<watch::Sender<bool>>,
    /// Pods gone that their controller makes again under the same name
    /// ([`SlimPod::made_again_by_name`]), for [`LEAVING_FOR`] or until they
    /// are back: see [`PodStore::pods_and_leaving_in`]. Changed
    /// and read only under `map`'s lock (taken first), so that a reader
    /// never sees neither the old pod nor the new one.
    gone: Arc<Mutex<GonePods>>,
}

/// Deleted pods coming back, each with the time it went.
type GonePods = Vec<(Instant, Arc<SlimPod>)>;

/// How long a StatefulSet's deleted pod is taken as still there: its
/// controller makes it again once it has seen it gone, in a second or so.
/// One not made again (scaled down) stops counting then, and its
/// namespace is marked for the reconciler.
pub const LEAVING_FOR: Duration = Duration::from_secs(15);

impl Default for PodStore {
    fn default() -> Self {
        PodStore {
            map: Default::default(),
            ready: Arc::new(watch::channel(false).0),
            gone: Default::default(),
        }
    }
}

impl PodStore {
    fn read(&self) -> std::sync::RwLockReadGuard<'_, PodMap> {
        match self.map.read() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, PodMap> {
        match self.map.write() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    pub fn get(&self, ns: &str, name: &str) -> Option<Arc<SlimPod>> {
        self.read().get(ns)?.get(name).map(|p| p.0.clone())
    }

    /// Every cached pod.
    pub fn state(&self) -> Vec<Arc<SlimPod>> {
        self.read()
            .values()
            .flat_map(|s| s.iter().map(|p| p.0.clone()))
            .collect()
    }

    /// The pods of `ns`, and the StatefulSet pods gone in the last
    /// [`LEAVING_FOR`] and not back yet: for the one-PDB-per-pod checks, a
    /// PDB of ours made before the new pod comes would be a second budget
    /// over it.
    pub fn pods_and_leaving_in(&self, ns: &str) -> Vec<Arc<SlimPod>> {
        self.with_leaving(Some(ns), Instant::now())
    }

    /// Every cached pod, and the StatefulSet pods gone and not back yet
    /// (see [`Self::pods_and_leaving_in`]): what the surge worker sizes a
    /// budget with, where such a pod counts until it is made again.
    pub fn state_and_leaving(&self) -> Vec<Arc<SlimPod>> {
        self.with_leaving(None, Instant::now())
    }

    /// The pods of `ns` (of every namespace for None) and its gone ones,
    /// both read under the map's lock (see `PodStore::gone`).
    fn with_leaving(&self, ns: Option<&str>, now: Instant) -> Vec<Arc<SlimPod>> {
        let map = self.read();
        let of = |p: &SlimPod| ns.is_none_or(|ns| &*p.namespace == ns);
        let mut pods: Vec<Arc<SlimPod>> = match ns {
            Some(ns) => map
                .get(ns)
                .into_iter()
                .flatten()
                .map(|p| p.0.clone())
                .collect(),
            None => map.values().flatten().map(|p| p.0.clone()).collect(),
        };
        if let Ok(mut gone) = self.gone.lock() {
            forget_gone(&mut gone, now);
            pods.extend(gone.iter().filter(|(_, p)| of(p)).map(|(_, p)| p.clone()));
        }
        pods
    }

    pub fn pods_in(&self, ns: &str) -> Vec<Arc<SlimPod>> {
        self.read()
            .get(ns)
            .map(|s| s.iter().map(|p| p.0.clone()).collect())
            .unwrap_or_default()
    }

    pub fn len(&self) -> usize {
        self.read().values().map(HashSet::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Resolves once the first complete list is in.
    pub async fn wait_until_ready(&self) {
        let mut rx = self.ready.subscribe();
        // The sender lives as long as this store: no error to handle.
        let _ = rx.wait_for(|r| *r).await;
    }

    /// The writer of this store (one per store: the watch task's).
    pub fn writer(&self) -> PodWriter {
        PodWriter {
            store: self.clone(),
            buffer: None,
            dirty: None,
        }
    }
}

/// Drops the gone pods older than [`LEAVING_FOR`].
fn forget_gone(gone: &mut GonePods, now: Instant) {
    gone.retain(|(at, _)| now.saturating_duration_since(*at) < LEAVING_FOR);
}

/// A pod of that name is here again: no longer leaving. Called with the
/// map's lock held, or on a relist's buffer (see `PodStore::gone`).
fn came_back(gone: &Mutex<GonePods>, pod: &SlimPod) {
    if let Ok(mut gone) = gone.lock() {
        if !gone.is_empty() {
            gone.retain(|(_, p)| p.namespace != pod.namespace || p.name != pod.name);
        }
    }
}

fn insert(map: &mut PodMap, pod: SlimPod) {
    let set = map.entry(pod.namespace.clone()).or_default();
    set.replace(ByName(Arc::new(pod)));
}

/// Applies watch events to a [`PodStore`], with the reflector's semantics: a
/// relist (Init .. InitDone) is built aside and swapped in whole.
pub struct PodWriter {
    store: PodStore,
    buffer: Option<PodMap>,
    /// Marked with a pod's namespace when a pod comes, goes or changes its
    /// labels (which PDBs select it: the reconciler's one-PDB-per-pod rule),
    /// not on status updates.
    dirty: Option<Arc<Dirty>>,
}

impl PodWriter {
    pub fn init(&mut self) {
        self.buffer = Some(PodMap::default());
    }

    pub fn apply_pod(&mut self, pod: SlimPod) {
        match self.buffer.as_mut() {
            Some(b) => {
                came_back(&self.store.gone, &pod);
                insert(b, pod);
            }
            None => {
                let mut map = self.store.write();
                came_back(&self.store.gone, &pod);
                insert(&mut map, pod);
            }
        }
    }

    /// Removes the pod; true when it is kept as leaving (see
    /// `PodStore::gone`).
    pub fn delete(&mut self, ns: &str, name: &str) -> bool {
        let mut map = self.store.write();
        if let Some(set) = map.get_mut(ns) {
            let removed = set.take(name);
            if set.is_empty() {
                map.remove(ns);
            }
            // Under the map's lock (see `PodStore::gone`).
            if let Some(ByName(p)) = removed.filter(|p| p.0.made_again_by_name()) {
                if let Ok(mut gone) = self.store.gone.lock() {
                    let now = Instant::now();
                    forget_gone(&mut gone, now);
                    gone.push((now, p));
                    return true;
                }
            }
        }
        false
    }

    pub fn init_done(&mut self) {
        if let Some(b) = self.buffer.take() {
            *self.store.write() = b;
        }
        self.store.ready.send_replace(true);
        if let Some(d) = &self.dirty {
            d.mark_all();
        }
    }

    /// Marks `dirty` with each pod's namespace as it comes, goes or
    /// changes its labels.
    pub fn marking(mut self, dirty: Arc<Dirty>) -> PodWriter {
        self.dirty = Some(dirty);
        self
    }

    pub fn apply(&mut self, event: &Event<PodWire>) {
        match event {
            Event::Init => self.init(),
            Event::InitApply(p) => self.apply_pod(SlimPod::from(p)),
            Event::InitDone => self.init_done(),
            Event::Apply(p) => {
                let pod = SlimPod::from(p);
                let mut map = self.store.write();
                came_back(&self.store.gone, &pod);
                // What `pdb::protected_pods` reads for the reconciler's
                // overlap check: labels, and whether the pod still counts.
                let relabelled = map
                    .get(&*pod.namespace)
                    .and_then(|s| s.get(pod.name()))
                    .is_none_or(|old| {
                        old.0.labels() != pod.labels()
                            || old.0.is_terminating() != pod.is_terminating()
                            || old.0.is_completed() != pod.is_completed()
                    });
                let ns = pod.namespace.clone();
                insert(&mut map, pod);
                drop(map);
                if let (true, Some(d)) = (relabelled, &self.dirty) {
                    d.mark(&ns);
                }
            }
            Event::Delete(p) => {
                let ns = p.metadata.namespace.as_deref().unwrap_or_default();
                let leaving = self.delete(ns, p.metadata.name.as_deref().unwrap_or_default());
                if let Some(d) = &self.dirty {
                    d.mark(ns);
                    // One not made again (scaled down) stops counting then:
                    // plan its namespace again without waiting for a resync
                    // (our PDB may have waited for it).
                    if leaving {
                        d.mark_after(ns, LEAVING_FOR + Duration::from_millis(100));
                    }
                }
            }
        }
    }
}

/// The controller owner reference of an object, if any.
pub fn controller_of(meta: &ObjectMeta) -> Option<&OwnerReference> {
    meta.owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))
}

/// Drop what no decision reads, so the caches stay small.
/// An object of ours that a manifest declares without `ownedBy` first loses
/// it ([`crate::declared`]): the evidence goes with the managedFields.
pub fn strip_meta(meta: &mut ObjectMeta) {
    crate::declared::strip_declared(meta);
    meta.managed_fields = None;
    if let Some(a) = meta.annotations.as_mut() {
        a.remove(crate::declared::LAST_APPLIED);
    }
}

/// [`strip_meta`], but the owners of the value a surge changes stay: who set
/// it tells our number from someone's (surge::writer). Copies of our surge
/// markers that someone else wrote are left out
/// ([`crate::surge::writer::drop_foreign_markers`]): no reader takes them
/// for a surge.
fn strip_meta_keeping_owners<K: crate::surge::writer::SurgeTarget>(k: &mut K) {
    if crate::surge::writer::leave_out_copy(k) {
        let meta = k.meta();
        tracing::debug!(namespace = ?meta.namespace, name = ?meta.name,
            "surge markers written by someone else, not by a surge of ours: left out");
    }
    let (field, _) = k.surge_value();
    let meta = k.meta_mut();
    crate::surge::writer::keep_owners(meta, field);
    let owners = meta.managed_fields.take();
    strip_meta(meta);
    meta.managed_fields = owners;
}

/// What of a ScaledObject the decisions read: its spec (target, minimum,
/// maximum), annotations (our markers and KEDA's pause), the owners of its
/// minimum, and of its status only `pausedReplicaCount` (a `paused-replicas`
/// pause counts once KEDA recorded it: `surge::view::scaled_object_paused`).
/// KEDA writes the rest of its status (conditions, health, resource names)
/// and every scaler's managedFields, none of which we read.
fn strip_scaled_object(so: &mut DynamicObject) {
    strip_meta_keeping_owners(so);
    if let Some(o) = so.data.as_object_mut() {
        let paused = o
            .get("status")
            .and_then(|s| s.get("pausedReplicaCount"))
            .filter(|v| !v.is_null())
            .cloned();
        o.remove("status");
        if let Some(v) = paused {
            o.insert(
                "status".into(),
                serde_json::json!({ "pausedReplicaCount": v }),
            );
        }
    }
}

/// Default of `WATCH_STALE_AFTER`: how long a store may go without a working
/// list/watch before its contents count as stale. An apiserver restart or a
/// short overload recovers well within it (the watcher retries with a
/// backoff of 0.8 s doubling to 30 s); past it, a 429 could rest on a PDB
/// the user relaxed long ago, so evictions are allowed and /readyz fails.
pub const DEFAULT_STALE_AFTER: Duration = Duration::from_secs(30);

/// Where one store's list/watch stands (behaviour.md 4.6).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreState {
    /// No complete list yet.
    Syncing,
    Fresh,
    /// Failing for this long, still within the bound.
    Failing(Duration),
    /// Failing for this long, past the bound.
    Stale(Duration),
}

/// Health of one store's list/watch: written by its reflector task and its
/// client wrapper, read on every eviction, so atomics only (the error text
/// is for /readyz and logs and is written only on failures).
pub struct StoreHealth {
    pub name: Cow<'static, str>,
    base: Instant,
    listed: AtomicBool,
    /// Clock reading (ms since `base`, plus 1 so that 0 means "not failing")
    /// of the first error since the last sign of a working watch.
    failing_since: AtomicU64,
    /// Errors seen in all: a 2xx counts as recovery only if none follows
    /// within [`RECOVERY_CONFIRM`] (see [`observed_client`]).
    errors: AtomicU64,
    stale_reported: AtomicBool,
    last_error: Mutex<String>,
}

impl StoreHealth {
    pub fn new(name: impl Into<Cow<'static, str>>, base: Instant) -> StoreHealth {
        StoreHealth {
            name: name.into(),
            base,
            listed: AtomicBool::new(false),
            failing_since: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            stale_reported: AtomicBool::new(false),
            last_error: Mutex::new(String::new()),
        }
    }

    /// Failing now (an error since the last sign of a working watch).
    pub fn failing(&self) -> bool {
        self.failing_since.load(Ordering::Acquire) != 0
    }

    /// How many errors this store has seen.
    pub fn errors(&self) -> u64 {
        self.errors.load(Ordering::Acquire)
    }

    fn now(&self) -> u64 {
        u64::try_from(self.base.elapsed().as_millis())
            .unwrap_or(u64::MAX - 1)
            .saturating_add(1)
    }

    /// Back to "not listed, not failing": a store that starts over (KEDA's
    /// ScaledObjects, watched again after their API came back).
    pub fn reset(&self) {
        self.listed.store(false, Ordering::Release);
        self.failing_since.store(0, Ordering::Release);
        self.stale_reported.store(false, Ordering::Relaxed);
        match self.last_error.lock() {
            Ok(mut e) => e.clear(),
            Err(poisoned) => poisoned.into_inner().clear(),
        }
    }

    /// A complete list was swapped in (InitDone).
    pub fn listed(&self) {
        self.listed.store(true, Ordering::Release);
        self.ok();
    }

    /// A sign of a working watch: an event, or a watch request answered 2xx
    /// (resumed from our resourceVersion, so nothing was missed). Returns how
    /// long it had been failing, if it was.
    pub fn ok(&self) -> Option<Duration> {
        // Load first: the common case (healthy) must not write the cache line.
        if self.failing_since.load(Ordering::Relaxed) == 0 {
            return None;
        }
        let since = self.failing_since.swap(0, Ordering::AcqRel);
        self.stale_reported.store(false, Ordering::Relaxed);
        (since != 0).then(|| Duration::from_millis(self.now().saturating_sub(since)))
    }

    /// A failed list or watch; the streak starts at the first one.
    pub fn error(&self, message: String) {
        self.error_at(self.now(), message)
    }

    fn error_at(&self, now: u64, message: String) {
        self.errors.fetch_add(1, Ordering::AcqRel);
        let _ = self
            .failing_since
            .compare_exchange(0, now, Ordering::AcqRel, Ordering::Relaxed);
        match self.last_error.lock() {
            Ok(mut e) => *e = message,
            Err(poisoned) => *poisoned.into_inner() = message,
        }
    }

    pub fn state(&self, stale_after: Duration) -> StoreState {
        self.state_at(self.now(), stale_after)
    }

    /// `state` is Stale; reads the clock only while failing (the hot path).
    pub fn is_stale(&self, stale_after: Duration) -> bool {
        self.failing_since.load(Ordering::Acquire) != 0
            && matches!(self.state(stale_after), StoreState::Stale(_))
    }

    fn state_at(&self, now: u64, stale_after: Duration) -> StoreState {
        if !self.listed.load(Ordering::Acquire) {
            return StoreState::Syncing;
        }
        match self.failing_since.load(Ordering::Acquire) {
            0 => StoreState::Fresh,
            since => {
                let failing = Duration::from_millis(now.saturating_sub(since));
                if failing >= stale_after {
                    StoreState::Stale(failing)
                } else {
                    StoreState::Failing(failing)
                }
            }
        }
    }

    pub fn last_error(&self) -> String {
        match self.last_error.lock() {
            Ok(e) => e.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }
}

/// The health of every store of a [`Cache`].
pub struct CacheHealth {
    pub stale_after: Duration,
    pub stores: Vec<Arc<StoreHealth>>,
}

/// One store that keeps the server from being ready, for /readyz.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unready {
    pub store: Cow<'static, str>,
    pub state: StoreState,
    pub last_error: String,
}

impl CacheHealth {
    /// Some store failed for longer than the bound. Cheap: atomics only.
    pub fn stale(&self) -> bool {
        self.stores.iter().any(|s| s.is_stale(self.stale_after))
    }

    /// Every store that `reader` decides on has listed, and none has failed
    /// for longer than the bound. Per store, not the global `synced`: a
    /// server started while the EvictionAutoScaler CRD is missing must still
    /// revert the surges it finds.
    pub fn ready_for(&self, reader: Reader) -> bool {
        let reads = reader.stores();
        self.stores
            .iter()
            .filter(|s| reads.contains(&s.name))
            .all(|s| {
                matches!(
                    s.state(self.stale_after),
                    StoreState::Fresh | StoreState::Failing(_)
                )
            })
    }

    /// The stores not synced yet or stale.
    /// The store named `name` has listed and has not failed past the bound.
    pub fn store_ready(&self, name: &str) -> bool {
        self.stores.iter().filter(|s| s.name == name).all(|s| {
            matches!(
                s.state(self.stale_after),
                StoreState::Fresh | StoreState::Failing(_)
            )
        })
    }

    /// The store named `name` has listed and its watch is working now (not
    /// even failing within the bound): what it shows is current.
    pub fn store_current(&self, name: &str) -> bool {
        self.stores
            .iter()
            .filter(|s| s.name == name)
            .all(|s| s.state(self.stale_after) == StoreState::Fresh)
    }

    pub fn unready(&self) -> Vec<Unready> {
        self.stores
            .iter()
            .filter_map(|s| {
                let state = s.state(self.stale_after);
                matches!(state, StoreState::Syncing | StoreState::Stale(_)).then(|| Unready {
                    store: s.name.clone(),
                    state,
                    last_error: s.last_error(),
                })
            })
            .collect()
    }
}

/// A controller, by the stores its decisions rest on: a stale store it does
/// not read must not stop it. The surge worker reverts from markers on the
/// Deployment and its autoscalers; an EvictionAutoScaler watch lost for good
/// (its CRD deleted while the server runs) must not strand a surge.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reader {
    /// Everything but ReplicaSets (pods carry their Deployment's selector
    /// labels) and EvictionAutoScalers (only the durable signal, which the
    /// in-process signal and the cordon cover).
    SurgeWorker,
    /// Deployments, PDBs, namespaces and autoscalers; never pods, nodes or
    /// ReplicaSets. EvictionAutoScalers when their store is ready
    /// ([`Cache::eas_ready`]): without it the PDBs are still kept, so a CRD
    /// deleted by mistake does not leave two PDBs over one pod.
    Reconciler,
}

impl Reader {
    pub fn stores(self) -> Vec<Cow<'static, str>> {
        let mut v = vec![
            PodDisruptionBudget::plural(&()),
            Deployment::plural(&()),
            Namespace::plural(&()),
            HorizontalPodAutoscaler::plural(&()),
        ];
        if self == Reader::SurgeWorker {
            v.extend([PodWire::plural(&()), Node::plural(&())]);
        }
        v
    }
}

/// Where the watch of KEDA ScaledObjects stands: KEDA may be installed, or
/// removed, while the server runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KedaState {
    /// No answer from API discovery yet.
    Unknown,
    /// The API is not served.
    Absent,
    /// Served; the first list has not completed.
    Syncing,
    Synced,
}

impl KedaState {
    fn from_u8(v: u8) -> KedaState {
        match v {
            1 => KedaState::Absent,
            2 => KedaState::Syncing,
            3 => KedaState::Synced,
            _ => KedaState::Unknown,
        }
    }

    fn as_u8(self) -> u8 {
        match self {
            KedaState::Unknown => 0,
            KedaState::Absent => 1,
            KedaState::Syncing => 2,
            KedaState::Synced => 3,
        }
    }
}

/// Read access to the caches, shared by webhooks and controllers.
#[derive(Clone)]
pub struct Cache {
    pub pods: PodStore,
    pub pdbs: Store<PodDisruptionBudget>,
    pub deployments: Store<Deployment>,
    pub replicasets: Store<ReplicaSet>,
    pub namespaces: Store<Namespace>,
    pub nodes: Store<Node>,
    pub hpas: Store<HorizontalPodAutoscaler>,
    pub eas: Store<EvictionAutoScaler>,
    /// KEDA ScaledObjects, once the KEDA CRD is seen (it may be installed later).
    pub keda: Arc<RwLock<Option<Store<DynamicObject>>>>,
    /// A [`KedaState`]: while ScaledObjects may exist that the store does
    /// not hold, both controllers leave the Deployments under KEDA's HPAs
    /// alone ([`Cache::keda_known`]).
    keda_state: Arc<AtomicU8>,
    /// The ScaledObject watch's health while KEDA's API is served: /readyz
    /// names it when it cannot list (RBAC, a broken CRD) or goes stale.
    keda_health: Arc<StoreHealth>,
    /// Bumped on every watch event: wakes the surge worker.
    pub changed: watch::Receiver<u64>,
    /// Namespaces whose Deployments, PDBs, autoscalers, EvictionAutoScalers
    /// or annotations changed, or whose pods came, went, changed labels or
    /// began terminating or completed (its overlap check reads those): what
    /// the reconciler plans. Nodes and ReplicaSets do not mark.
    pub ns_dirty: Arc<Dirty>,
    /// Bumped on every PDB event only, after the store has it: wakes held
    /// evictions (EVICTION_HOLD) without the pod churn of `changed`.
    pub pdb_changed: watch::Receiver<u64>,
    /// The PDBs by namespace with compiled selectors, for evictions.
    pub pdb_index: Arc<PdbIndex>,
    synced: Arc<AtomicBool>,
    pub health: Arc<CacheHealth>,
    pub behaviour: Arc<Behaviour>,
}

/// The stores of a [`Cache`], for caches filled by hand (benchmarks, tests).
pub struct Stores {
    pub pods: PodStore,
    pub pdbs: Store<PodDisruptionBudget>,
    pub deployments: Store<Deployment>,
    pub replicasets: Store<ReplicaSet>,
    pub namespaces: Store<Namespace>,
    pub nodes: Store<Node>,
    pub hpas: Store<HorizontalPodAutoscaler>,
    pub eas: Store<EvictionAutoScaler>,
}

impl Cache {
    /// A synced cache over stores that something else fills (the PDB index
    /// is built from the PDB store as it is now).
    pub fn from_stores(s: Stores, behaviour: Arc<Behaviour>) -> Cache {
        let (_tx, changed) = watch::channel(0u64);
        let (_tx, pdb_changed) = watch::channel(0u64);
        let pdb_index = Arc::new(PdbIndex::default());
        pdb_index.rebuild(&s.pdbs);
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
            keda_state: Arc::new(AtomicU8::new(KedaState::Absent.as_u8())),
            keda_health: Arc::new(StoreHealth::new(KEDA_STORE, Instant::now())),
            changed,
            ns_dirty: Arc::new(Dirty::default()),
            pdb_changed,
            pdb_index,
            synced: Arc::new(AtomicBool::new(true)),
            health: Arc::new(CacheHealth {
                stale_after: DEFAULT_STALE_AFTER,
                stores: Vec::new(),
            }),
            behaviour,
        }
    }

    /// Every store has had its first complete list.
    pub fn synced(&self) -> bool {
        self.synced.load(Ordering::Acquire)
    }

    /// Some store lost its watch and has not recovered within the bound.
    pub fn stale(&self) -> bool {
        self.health.stale()
    }

    pub fn keda_state(&self) -> KedaState {
        KedaState::from_u8(self.keda_state.load(Ordering::Acquire))
    }

    /// What `reader` decides on is complete and current: the stores it
    /// reads have listed and none is stale. A frozen or partial snapshot
    /// could make a controller start a surge on the wrong object or see
    /// none to revert. Neither waits for KEDA's ScaledObjects: while they
    /// are unknown ([`Cache::keda_known`]) both leave only the Deployments
    /// under KEDA's HPAs alone, so a ScaledObject watch that cannot list
    /// strands no other surge and keeps no other PDB from its rules.
    pub fn ready_for(&self, reader: Reader) -> bool {
        self.health.ready_for(reader)
    }

    /// Every ScaledObject is known: KEDA's API is not served, or their store
    /// has listed and its watch is not stale.
    pub fn keda_known(&self) -> bool {
        match self.keda_state() {
            KedaState::Absent => true,
            KedaState::Synced => !self.keda_health.is_stale(self.health.stale_after),
            KedaState::Unknown | KedaState::Syncing => false,
        }
    }

    /// The stores that keep the server from being ready, for /readyz: the
    /// watch caches', and the ScaledObjects' while KEDA's API is served or
    /// its discovery has not answered.
    pub fn unready(&self) -> Vec<Unready> {
        let mut out = self.health.unready();
        if self.keda_state() != KedaState::Absent {
            let state = self.keda_health.state(self.health.stale_after);
            if matches!(state, StoreState::Syncing | StoreState::Stale(_)) {
                out.push(Unready {
                    store: self.keda_health.name.clone(),
                    state,
                    last_error: self.keda_health.last_error(),
                });
            }
        }
        out
    }

    /// The EvictionAutoScaler store has listed and is not stale: the
    /// reconciler plans EvictionAutoScalers only then.
    pub fn eas_ready(&self) -> bool {
        self.health.store_ready(&EvictionAutoScaler::plural(&()))
    }

    /// The EvictionAutoScaler store's watch is working now (see
    /// [`crate::surge::clock`]).
    pub fn eas_current(&self) -> bool {
        self.health.store_current(&EvictionAutoScaler::plural(&()))
    }

    /// The pods of `ns`, while the pod store is current; None otherwise.
    pub fn pods_if_ready(&self, ns: &str) -> Option<Vec<Arc<SlimPod>>> {
        self.health
            .store_ready(&PodWire::plural(&()))
            .then(|| self.pods.pods_in(ns))
    }

    /// [`Self::pods_if_ready`] with the pods of `ns` gone but not yet
    /// replaced ([`PodStore::pods_and_leaving_in`]): what the reconciler's
    /// one-PDB-per-pod check reads.
    pub fn pods_and_leaving_if_ready(&self, ns: &str) -> Option<Vec<Arc<SlimPod>>> {
        self.health
            .store_ready(&PodWire::plural(&()))
            .then(|| self.pods.pods_and_leaving_in(ns))
    }

    pub fn pod(&self, ns: &str, name: &str) -> Option<Arc<SlimPod>> {
        self.pods.get(ns, name)
    }

    pub fn pdbs_in(&self, ns: &str) -> Vec<Arc<PodDisruptionBudget>> {
        self.pdb_index
            .get(ns)
            .map(|v| v.pdbs.iter().map(|i| i.pdb.clone()).collect())
            .unwrap_or_default()
    }

    /// The PDBs of `ns` whose selector protects pods with these labels, the
    /// way the eviction subresource decides.
    pub fn pdbs_selecting(&self, ns: &str, labels: &PodLabels) -> Selected {
        self.pdb_index
            .get(ns)
            .map(|v| v.selecting(labels))
            .unwrap_or_default()
    }

    pub fn deployment(&self, ns: &str, name: &str) -> Option<Arc<Deployment>> {
        lookup(&self.deployments, Some(ns), name)
    }

    /// Pod → ReplicaSet → Deployment, following controller references.
    pub fn owning_deployment(&self, pod: &SlimPod) -> Option<Arc<Deployment>> {
        let ns = pod.namespace();
        let rs_ref = pod.controller().filter(|o| &*o.kind == "ReplicaSet")?;
        let rs = lookup(&self.replicasets, Some(ns), &rs_ref.name)?;
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

    /// Whether the namespace cache holds `ns` (its annotations are known).
    pub fn namespace_known(&self, ns: &str) -> bool {
        lookup(&self.namespaces, None, ns).is_some()
    }

    /// A namespace not in the cache (its watch lags the pods') is out of
    /// scope until it is: its opt-out annotation is unknown, and out of
    /// scope the webhook lets the apiserver decide.
    pub fn namespace_in_scope(&self, ns: &str) -> bool {
        lookup(&self.namespaces, None, ns).is_some_and(|n| {
            scope::namespace_scope(ns, n.metadata.annotations.as_ref(), &self.behaviour).enabled
        })
    }
}

thread_local! {
    /// The strings of [`lookup`]'s key, kept between calls.
    static KEY: std::cell::RefCell<(String, String)> =
        const { std::cell::RefCell::new((String::new(), String::new())) };
}

/// `store`'s object `name` in `ns` (None: cluster-scoped). kube's
/// `ObjectRef` owns its strings, so a new key per lookup is two allocations,
/// and an eviction makes up to three lookups; this key's strings are kept
/// per thread instead.
fn lookup<K>(store: &Store<K>, ns: Option<&str>, name: &str) -> Option<Arc<K>>
where
    K: kube::runtime::reflector::Lookup + Clone + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
{
    KEY.with(|cell| {
        let Ok(mut bufs) = cell.try_borrow_mut() else {
            // Not reached (a lookup runs no code that looks up), but never a panic.
            let key = ObjectRef::<K>::new(name);
            return store.get(&match ns {
                Some(ns) => key.within(ns),
                None => key,
            });
        };
        let (n, s) = &mut *bufs;
        n.clear();
        n.push_str(name);
        // An empty name allocates nothing.
        let mut key = ObjectRef::<K>::new("");
        key.name = std::mem::take(n);
        if let Some(ns) = ns {
            s.clear();
            s.push_str(ns);
            key.namespace = Some(std::mem::take(s));
        }
        let found = store.get(&key);
        *n = key.name;
        if let Some(v) = key.namespace {
            *s = v;
        }
        found
    })
}

/// The PDBs over one pod: one nearly always, more only for a warning. Kept
/// inline, so the eviction path allocates nothing for them.
pub type Selected = SmallVec<[Arc<PodDisruptionBudget>; 2]>;

/// One PDB with its selector compiled (None: invalid, protects nothing).
pub struct IndexedPdb {
    pub pdb: Arc<PodDisruptionBudget>,
    pub selector: Option<Selector>,
}

/// PDBs by namespace, each selector compiled once per PDB version: an
/// eviction looks at its own namespace's PDBs only, without compiling. Kept
/// by the PDB reflector (a namespace is rebuilt from the store on each of
/// its PDB events; everything on a relist).
#[derive(Default)]
pub struct PdbIndex {
    by_ns: RwLock<FastMap<String, Arc<NsPdbs>>>,
}

/// The PDBs of one namespace, and which of them a pod's labels can reach:
/// an eviction tests the selectors that key on one of its pod's labels (and
/// the few that key on none) instead of every selector of the namespace.
pub struct NsPdbs {
    pub pdbs: Vec<IndexedPdb>,
    index: SelectorIndex,
}

impl NsPdbs {
    fn new(pdbs: Vec<IndexedPdb>) -> NsPdbs {
        let index = SelectorIndex::new(pdbs.iter().map(|p| p.selector.as_ref()));
        NsPdbs { pdbs, index }
    }

    /// The PDBs whose selector protects a pod with these labels (the
    /// eviction subresource's test), in the namespace's order.
    pub fn selecting(&self, labels: &PodLabels) -> Selected {
        self.index
            .candidates(labels)
            .into_iter()
            .map(|i| &self.pdbs[i])
            .filter(|i| {
                i.selector
                    .as_ref()
                    .is_some_and(|s| s.selects_for_eviction(labels))
            })
            .map(|i| i.pdb.clone())
            .collect()
    }
}

impl PdbIndex {
    fn indexed(p: Arc<PodDisruptionBudget>) -> IndexedPdb {
        let selector = Selector::compile(p.spec.as_ref().and_then(|s| s.selector.as_ref())).ok();
        IndexedPdb { pdb: p, selector }
    }

    pub fn get(&self, ns: &str) -> Option<Arc<NsPdbs>> {
        match self.by_ns.read() {
            Ok(m) => m.get(ns).cloned(),
            Err(poisoned) => poisoned.into_inner().get(ns).cloned(),
        }
    }

    /// Every namespace again from `store`.
    pub fn rebuild(&self, store: &Store<PodDisruptionBudget>) {
        let mut grouped: HashMap<String, Vec<IndexedPdb>> = HashMap::new();
        for p in store.state() {
            let ns = p.metadata.namespace.clone().unwrap_or_default();
            grouped.entry(ns).or_default().push(Self::indexed(p));
        }
        let map = grouped
            .into_iter()
            .map(|(k, v)| (k, Arc::new(NsPdbs::new(v))))
            .collect();
        match self.by_ns.write() {
            Ok(mut m) => *m = map,
            Err(poisoned) => *poisoned.into_inner() = map,
        }
    }

    /// One namespace again from `store`.
    pub fn rebuild_ns(&self, store: &Store<PodDisruptionBudget>, ns: &str) {
        let v: Vec<IndexedPdb> = store
            .state_filter(|p| p.metadata.namespace.as_deref() == Some(ns))
            .into_iter()
            .map(Self::indexed)
            .collect();
        let mut m = match self.by_ns.write() {
            Ok(m) => m,
            Err(poisoned) => poisoned.into_inner(),
        };
        if v.is_empty() {
            m.remove(ns);
        } else {
            m.insert(ns.to_string(), Arc::new(NsPdbs::new(v)));
        }
    }
}

/// Starts one reflector per resource. The returned [`Cache`] answers at once
/// (empty) and reports `synced()` once every store has had its initial list,
/// and `stale()` while a store's watch has failed for `stale_after` or longer.
pub fn start(
    client: Client,
    behaviour: Arc<Behaviour>,
    stale_after: Duration,
    watch_events: &Family<StoreLabel, Counter>,
    tasks: &mut JoinSet<()>,
    fatal: &Fatal,
) -> Cache {
    let cfg = watch_config();
    let (tx, changed) = watch::channel(0u64);
    let ns_dirty = Arc::new(Dirty::default());
    let base = Instant::now();
    let mut stores = Vec::new();
    let mut r = Reflectors {
        client: &client,
        cfg: &cfg,
        tasks,
        fatal,
        changed: &tx,
        dirty: None,
        base,
        stale_after,
        health: &mut stores,
        events: watch_events,
    };
    r.dirty = Some(ns_dirty.clone());
    let pods = r.reflect_pods();
    let (pdb_tx, pdb_changed) = watch::channel(0u64);
    let pdb_index = Arc::new(PdbIndex::default());
    let index = pdb_index.clone();
    let pdbs = r.reflect_notifying::<PodDisruptionBudget>(
        None,
        |p| strip_meta(&mut p.metadata),
        Some(pdb_tx),
        Some(Box::new(move |store, ev| match ev {
            Event::Apply(p) | Event::Delete(p) => {
                index.rebuild_ns(store, p.metadata.namespace.as_deref().unwrap_or_default())
            }
            Event::InitDone => index.rebuild(store),
            Event::Init | Event::InitApply(_) => {}
        })),
        // Its status is read (the EvictionAutoScaler's status shows it).
        None,
    );
    // The controller-manager updates a Deployment's status with each of its
    // pods' changes: the reconciler reads none of it (the webhook does, from
    // the store), so such an update marks nothing.
    let deployments = r.reflect_notifying::<Deployment>(
        None,
        |d| {
            strip_meta_keeping_owners(d);
            if let Some(spec) = d.spec.as_mut() {
                // Pod template labels matter (PDB selectors); containers do not.
                spec.template.spec = None;
            }
        },
        None,
        None,
        Some(deployment_plans_read_the_same),
    );
    r.dirty = None;
    let replicasets = r.reflect::<ReplicaSet>(None, |r| {
        strip_meta(&mut r.metadata);
        r.metadata.annotations = None;
        r.spec = None;
        r.status = None;
    });
    r.dirty = Some(ns_dirty.clone());
    let namespaces = r.reflect::<Namespace>(None, |n| strip_meta(&mut n.metadata));
    r.dirty = None;
    let nodes = r.reflect::<Node>(None, |n| {
        strip_meta(&mut n.metadata);
        n.metadata.annotations = None;
        n.status = None;
    });
    r.dirty = Some(ns_dirty.clone());
    // Its status (stripped) changes with every metrics sync.
    let hpas = r.reflect_notifying::<HorizontalPodAutoscaler>(
        None,
        |h| {
            strip_meta_keeping_owners(h);
            h.status = None;
        },
        None,
        None,
        Some(|old, new| old.spec == new.spec && same_but_version(&old.metadata, &new.metadata)),
    );
    let eas = r.reflect::<EvictionAutoScaler>(Some(CRD_MISSING), |e| strip_meta(&mut e.metadata));
    let keda = Arc::new(RwLock::new(None));
    let keda_state = Arc::new(AtomicU8::new(KedaState::Unknown.as_u8()));
    let keda_health = Arc::new(StoreHealth::new(KEDA_STORE, Instant::now()));
    tasks.spawn(fatal.must_run(
        "the watch of KEDA ScaledObjects",
        watch_keda_when_installed(
            client.clone(),
            Keda {
                slot: keda.clone(),
                state: keda_state.clone(),
                health: keda_health.clone(),
                stale_after,
                events: store_events(watch_events, KEDA_STORE),
            },
            tx.clone(),
            ns_dirty.clone(),
        ),
    ));

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
        keda_state,
        keda_health,
        changed,
        ns_dirty,
        pdb_changed,
        pdb_index,
        synced: synced.clone(),
        health: Arc::new(CacheHealth {
            stale_after,
            stores,
        }),
        behaviour,
    };
    let c = cache.clone();
    tasks.spawn(async move {
        c.pods.wait_until_ready().await;
        let all = c.pdbs.wait_until_ready();
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

/// Said once, at error level, when the product's own CRD is not installed:
/// nothing else tells an operator why the server never becomes ready.
const CRD_MISSING: &str =
    "the EvictionAutoScaler CRD (evictionautoscalers.eviction-autoscaler.azure.com) \
     is not installed, so the server cannot become ready. Install it with \
     `kubectl apply -f manifests/crd.yaml` or `eviction-autoscaler crd | kubectl apply -f -`; \
     retrying until it appears";

/// Called with a store and each of its events, once the store has it.
type StoreHook<K> = Box<dyn FnMut(&Store<K>, &Event<K>) + Send>;

/// What every reflector of [`start`] shares.
struct Reflectors<'a> {
    client: &'a Client,
    cfg: &'a watcher::Config,
    tasks: &'a mut JoinSet<()>,
    /// A watch task that ends (a panic) stops the process: its store would
    /// otherwise stay frozen while reported fresh.
    fatal: &'a Fatal,
    changed: &'a watch::Sender<u64>,
    /// Where the next reflector's events mark their namespace (None: they do not).
    dirty: Option<Arc<Dirty>>,
    base: Instant,
    stale_after: Duration,
    health: &'a mut Vec<Arc<StoreHealth>>,
    /// `eviction_autoscaler_watch_events_total`, by store.
    events: &'a Family<StoreLabel, Counter>,
}

/// What a reflector store can hold.
trait Watched:
    Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static
{
}

impl<K> Watched for K where
    K: Resource<DynamicType = ()>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static
{
}

impl Reflectors<'_> {
    /// A store of every `K` in the cluster, kept by a watcher whose health
    /// lands in `self.health`. `missing` is logged once if the resource's
    /// API is not served (404).
    fn reflect<K>(
        &mut self,
        missing: Option<&'static str>,
        strip: impl FnMut(&mut K) + Send + 'static,
    ) -> Store<K>
    where
        K: Watched,
    {
        self.reflect_notifying(missing, strip, None, None, None)
    }

    /// [`Self::reflect`], also calling `on_event` with the store and each
    /// event once the store has it, then bumping `notify`. An update for
    /// which `plans_read_the_same(old, new)` holds (both stripped) marks no
    /// namespace: the reconciler would plan what it planned before. Without
    /// it, every update marks (and no event is compared).
    fn reflect_notifying<K>(
        &mut self,
        missing: Option<&'static str>,
        strip: impl FnMut(&mut K) + Send + 'static,
        notify: Option<watch::Sender<u64>>,
        mut on_event: Option<StoreHook<K>>,
        plans_read_the_same: Option<fn(&K, &K) -> bool>,
    ) -> Store<K>
    where
        K: Watched,
    {
        let health = Arc::new(StoreHealth::new(K::plural(&()), self.base));
        self.health.push(health.clone());
        let (reader, writer) = reflector::store();
        let api: Api<K> = Api::all(observed_client(self.client, health.clone()));
        let store = reader.clone();
        let dirty = self.dirty.clone();
        let (unchanged, compare) = Unchanged::compare(reader.clone(), (), plans_read_the_same);
        let stream = watcher(api, self.cfg.clone())
            .backoff(watch_backoff())
            .modify(strip)
            .inspect(compare)
            .reflect(writer)
            .inspect(move |ev| {
                if let Ok(ev) = ev {
                    if let Some(d) = &dirty {
                        if !unchanged.last() {
                            mark_namespace(d, ev);
                        }
                    }
                    if let Some(f) = on_event.as_mut() {
                        f(&store, ev);
                    }
                }
            });
        self.follow(stream, health, missing, notify);
        reader
    }

    /// The pod store: pods are turned into [`SlimPod`]s as they arrive.
    fn reflect_pods(&mut self) -> PodStore {
        let health = Arc::new(StoreHealth::new(PodWire::plural(&()), self.base));
        self.health.push(health.clone());
        let store = PodStore::default();
        let mut writer = match &self.dirty {
            Some(d) => store.writer().marking(d.clone()),
            None => store.writer(),
        };
        let api: Api<PodWire> = Api::all(observed_client(self.client, health.clone()));
        let stream = watcher(api, self.cfg.clone())
            .backoff(watch_backoff())
            .inspect(move |ev| {
                if let Ok(ev) = ev {
                    writer.apply(ev);
                }
            });
        self.follow(stream, health, None, None);
        store
    }

    /// Runs a store's watch stream: its health, the change notifiers, logs.
    fn follow<K: Send + 'static>(
        &mut self,
        stream: impl futures::Stream<Item = Result<Event<K>, watcher::Error>> + Send + 'static,
        health: Arc<StoreHealth>,
        missing: Option<&'static str>,
        notify: Option<watch::Sender<u64>>,
    ) {
        let name = health.name.clone();
        let events = store_events(self.events, &name);
        let changed = self.changed.clone();
        let stale_after = self.stale_after;
        let task = format!("the watch of {name}");
        self.tasks.spawn(self.fatal.must_run(&task, async move {
            let mut stream = std::pin::pin!(stream);
            let mut said_missing = false;
            while let Some(item) = stream.next().await {
                match item {
                    Ok(Event::Apply(_) | Event::Delete(_)) => {
                        events.inc();
                        note_recovery(&health, health.ok());
                        changed.send_modify(|n| *n = n.wrapping_add(1));
                        if let Some(n) = &notify {
                            n.send_modify(|n| *n = n.wrapping_add(1));
                        }
                    }
                    Ok(Event::InitDone) => {
                        let was_listed = health.listed.load(Ordering::Acquire);
                        let recovered = health.ok();
                        health.listed();
                        if !was_listed {
                            if said_missing {
                                tracing::info!(store = %name, "the API is served now; watching it");
                            }
                        } else {
                            note_recovery(&health, recovered);
                        }
                        changed.send_modify(|n| *n = n.wrapping_add(1));
                        if let Some(n) = &notify {
                            n.send_modify(|n| *n = n.wrapping_add(1));
                        }
                    }
                    // Init precedes the list request and proves nothing; a
                    // relist's objects count once InitDone swaps them in.
                    Ok(Event::Init | Event::InitApply(_)) => {}
                    Err(e) => {
                        let first = health.failing_since.load(Ordering::Relaxed) == 0;
                        health.error(e.to_string());
                        match missing {
                            Some(hint) if is_not_found(&e) => {
                                if !said_missing {
                                    tracing::error!(store = %name, "{hint}");
                                    said_missing = true;
                                } else {
                                    tracing::debug!(store = %name, error = %e, "still not served");
                                }
                            }
                            // The watcher backs off and retries by itself.
                            _ if first => tracing::warn!(store = %name, error = %e, "watch error"),
                            _ => tracing::debug!(store = %name, error = %e, "watch error"),
                        }
                        if let StoreState::Stale(d) = health.state(stale_after) {
                            if !health.stale_reported.swap(true, Ordering::Relaxed) {
                                tracing::error!(store = %name, failing_for = ?d, error = %e,
                                    "watch cache stale: evictions are allowed unchecked and \
                                     /readyz fails until its watch recovers");
                            }
                        }
                    }
                }
            }
        }));
    }
}

/// The counter of `resource`'s changes, made once per watch (a
/// [`Counter`] clone shares its value).
fn store_events(family: &Family<StoreLabel, Counter>, resource: &str) -> Counter {
    family
        .get_or_create(&StoreLabel {
            resource: resource.to_string(),
        })
        .clone()
}

/// Whether a watch's last update left what the reconciler reads as it was.
/// Set for each event before the store takes it (the old object is still
/// there), read after: a mark must come once the store holds the change, or
/// the reconciler could plan the old object and lose the mark. A watch
/// stream runs one event at a time through both.
#[derive(Clone, Default)]
struct Unchanged(Arc<AtomicBool>);

impl Unchanged {
    /// The flag, and the step that sets it (to put before `.reflect`):
    /// an update is unchanged when `same(old, new)` holds for the object
    /// `before` (the store) still has. Without `same`, never (no lookup).
    fn compare<K>(
        before: Store<K>,
        dyntype: K::DynamicType,
        same: Option<fn(&K, &K) -> bool>,
    ) -> (Unchanged, impl FnMut(&Result<Event<K>, watcher::Error>))
    where
        K: Resource + Clone + 'static,
        K::DynamicType: Clone + Eq + std::hash::Hash,
    {
        let flag = Unchanged::default();
        let set = flag.clone();
        let step = move |ev: &Result<Event<K>, watcher::Error>| {
            let Some(same) = same else { return };
            let unchanged = match ev {
                Ok(Event::Apply(new)) => before
                    .get(&ObjectRef::from_obj_with(new, dyntype.clone()))
                    .is_some_and(|old| same(&old, new)),
                _ => false,
            };
            set.0.store(unchanged, Ordering::Relaxed);
        };
        (flag, step)
    }

    fn last(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

/// What the reconciler reads of a Deployment is the same in both versions:
/// spec and metadata (not the status the controller-manager keeps current).
fn deployment_plans_read_the_same(old: &Deployment, new: &Deployment) -> bool {
    old.spec == new.spec && same_but_version(&old.metadata, &new.metadata)
}

/// Two versions of an object's (stripped) metadata differ in their
/// resourceVersion at most. Every other field is compared, by name, so a
/// field added to `ObjectMeta` does not go unnoticed here.
fn same_but_version(a: &ObjectMeta, b: &ObjectMeta) -> bool {
    let ObjectMeta {
        annotations,
        creation_timestamp,
        deletion_grace_period_seconds,
        deletion_timestamp,
        finalizers,
        generate_name,
        generation,
        labels,
        managed_fields,
        name,
        namespace,
        owner_references,
        resource_version: _,
        self_link,
        uid,
    } = a;
    *annotations == b.annotations
        && *creation_timestamp == b.creation_timestamp
        && *deletion_grace_period_seconds == b.deletion_grace_period_seconds
        && *deletion_timestamp == b.deletion_timestamp
        && *finalizers == b.finalizers
        && *generate_name == b.generate_name
        && *generation == b.generation
        && *labels == b.labels
        && *managed_fields == b.managed_fields
        && *name == b.name
        && *namespace == b.namespace
        && *owner_references == b.owner_references
        && *self_link == b.self_link
        && *uid == b.uid
}

/// Marks the namespace an event is about: namespaced objects mark their
/// namespace, a Namespace marks itself; a relist (which may have missed
/// deletions) marks everything.
fn mark_namespace<K: Resource>(dirty: &Dirty, ev: &Event<K>) {
    match ev {
        Event::Apply(obj) | Event::Delete(obj) => {
            let meta = obj.meta();
            match meta.namespace.as_deref().or(meta.name.as_deref()) {
                Some(ns) => dirty.mark(ns),
                None => dirty.mark_all(),
            }
        }
        Event::InitDone => dirty.mark_all(),
        Event::Init | Event::InitApply(_) => {}
    }
}

/// Retry delays of the watch caches: 0.8 s doubling up to 5 s, with jitter,
/// back to 0.8 s after a minute without failures. kube's default goes up to
/// 30 s: after an outage a store stays stale until it lists again, and while
/// stale evictions go unchecked, so coming back soon matters more than the
/// few requests per second a failing apiserver gets from 8 stores.
fn watch_backoff() -> ResetTimerBackoff<WatchBackoff> {
    ResetTimerBackoff::new(WatchBackoff::default(), Duration::from_secs(60))
}

const BACKOFF_MIN: Duration = Duration::from_millis(800);
const BACKOFF_MAX: Duration = Duration::from_secs(5);

struct WatchBackoff {
    next: Duration,
    seed: std::collections::hash_map::RandomState,
    count: u64,
}

impl Default for WatchBackoff {
    fn default() -> Self {
        WatchBackoff {
            next: BACKOFF_MIN,
            seed: Default::default(),
            count: 0,
        }
    }
}

impl Iterator for WatchBackoff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        use std::hash::BuildHasher;
        let d = self.next;
        self.next = (self.next * 2).min(BACKOFF_MAX);
        self.count = self.count.wrapping_add(1);
        // 75% to 125%, so the stores of several replicas do not retry in step.
        let permille = 750 + self.seed.hash_one(self.count) % 500;
        Some(d * u32::try_from(permille).unwrap_or(1000) / 1000)
    }
}

impl Backoff for WatchBackoff {
    fn reset(&mut self) {
        self.next = BACKOFF_MIN;
    }
}

fn note_recovery(health: &StoreHealth, recovered: Option<Duration>) {
    if let Some(d) = recovered {
        tracing::info!(store = %health.name, failing_for = ?d, "watch recovered");
    }
}

/// A 404 from the list or watch: the resource's API is not served (CRD missing).
fn is_not_found(e: &watcher::Error) -> bool {
    match e {
        watcher::Error::InitialListFailed(kube::Error::Api(s))
        | watcher::Error::WatchStartFailed(kube::Error::Api(s))
        | watcher::Error::WatchFailed(kube::Error::Api(s)) => s.code == 404,
        watcher::Error::WatchError(s) => s.code == 404,
        _ => false,
    }
}

/// Every watch cache's watcher settings: the apiserver ends each watch after
/// `WATCH_SERVER_TIMEOUT_SECS`, so a dead one is noticed within 35 s.
fn watch_config() -> watcher::Config {
    watcher::Config::default().timeout(crate::client::WATCH_SERVER_TIMEOUT_SECS)
}

/// How long a watch answered 2xx after failures must go without an error
/// to count as recovered: a watch resumed after an outage is answered 200
/// and then, at once, `410 Gone` when its resourceVersion has expired.
/// Taken as recovered at the 200, the store holding the outage's old
/// objects counted as fresh until the relist ended (another whole
/// `WATCH_STALE_AFTER` while the relist failed or was slow).
pub const RECOVERY_CONFIRM: Duration = Duration::from_secs(1);

/// Marks `health` recovered if no error came in the `RECOVERY_CONFIRM`
/// after a 2xx that found it failing with `errors_then` errors seen.
async fn confirm_recovery(health: Arc<StoreHealth>, errors_then: u64) {
    tokio::time::sleep(RECOVERY_CONFIRM).await;
    if health.errors() == errors_then {
        note_recovery(&health, health.ok());
    }
}

/// A client over `client` that marks `health` ok whenever a watch request
/// is answered 2xx (once no error follows: [`RECOVERY_CONFIRM`]). A watch
/// that resumes from our resourceVersion after an outage yields no event
/// until something changes, so without this a quiet store would look
/// failed long after it recovered.
fn observed_client(client: &Client, health: Arc<StoreHealth>) -> Client {
    let inner = client.clone();
    let svc = tower::service_fn(move |req: axum::http::Request<kube::client::Body>| {
        let inner = inner.clone();
        let health = health.clone();
        async move {
            let watch = req
                .uri()
                .query()
                .is_some_and(|q| q.split('&').any(|kv| kv == "watch=true"));
            let resp = inner.send(req).await?;
            if watch && resp.status().is_success() && health.failing() {
                tokio::spawn(confirm_recovery(health.clone(), health.errors()));
            }
            Ok::<_, kube::Error>(resp)
        }
    });
    Client::new(svc, client.default_namespace().to_string())
}

pub const KEDA_GROUP: &str = "keda.sh";
/// The ScaledObject store's name in /readyz and logs.
const KEDA_STORE: &str = "scaledobjects";
pub const KEDA_VERSION: &str = "v1alpha1";

pub fn keda_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(KEDA_GROUP, KEDA_VERSION, "ScaledObject"),
        "scaledobjects",
    )
}

/// Where the ScaledObjects go, and how their watch stands.
struct Keda {
    slot: Arc<RwLock<Option<Store<DynamicObject>>>>,
    state: Arc<AtomicU8>,
    health: Arc<StoreHealth>,
    stale_after: Duration,
    /// Its changes in `eviction_autoscaler_watch_events_total`.
    events: Counter,
}

impl Keda {
    fn set(&self, s: KedaState) {
        self.state.store(s.as_u8(), Ordering::Release);
    }
}

/// KEDA may be installed after start-up, or removed: look for its API every
/// few seconds, watch ScaledObjects while it is served, and empty the store
/// when it goes (a store frozen on deleted ScaledObjects would keep the
/// surge worker patching objects that no longer exist).
async fn watch_keda_when_installed(
    client: Client,
    keda: Keda,
    changed: watch::Sender<u64>,
    dirty: Arc<Dirty>,
) {
    let gv = format!("{KEDA_GROUP}/{KEDA_VERSION}");
    loop {
        match client.list_api_group_resources(&gv).await {
            Ok(l) if l.resources.iter().any(|r| r.name == "scaledobjects") => {
                keda.health.reset();
                keda.set(KedaState::Syncing);
                follow_scaled_objects(&client, &keda, &changed, &dirty).await;
                if let Ok(mut s) = keda.slot.write() {
                    *s = None;
                }
                keda.set(KedaState::Absent);
                keda.health.reset();
                dirty.mark_all();
                changed.send_modify(|n| *n = n.wrapping_add(1));
                tracing::info!("KEDA ScaledObjects are no longer served; stopped watching them");
            }
            Ok(_) => keda.set(KedaState::Absent),
            Err(kube::Error::Api(s)) if s.code == 404 => keda.set(KedaState::Absent),
            // Unknown stays unknown (the Deployments under KEDA's HPAs wait,
            // and /readyz shows the error); an answer seen before stays.
            Err(e) => {
                if keda.state.load(Ordering::Acquire) == KedaState::Unknown.as_u8() {
                    keda.health.error(format!("KEDA API discovery: {e}"));
                }
                tracing::debug!(error = %e, "KEDA API discovery failed; retrying");
            }
        }
        tokio::time::sleep(Duration::from_secs(5)).await;
    }
}

/// Watches ScaledObjects into a new store in `keda.slot` until their API is
/// not served any more (404), keeping `keda.health` as the other stores do.
async fn follow_scaled_objects(
    client: &Client,
    keda: &Keda,
    changed: &watch::Sender<u64>,
    dirty: &Dirty,
) {
    let ar = keda_resource();
    let api: Api<DynamicObject> = Api::all_with(observed_client(client, keda.health.clone()), &ar);
    let writer = reflector::store::Writer::new(ar.clone());
    let before = writer.as_reader();
    if let Ok(mut s) = keda.slot.write() {
        *s = Some(writer.as_reader());
    }
    tracing::info!("KEDA ScaledObjects found; watching them");
    // KEDA writes a ScaledObject's status (stripped) with each of its
    // checks: such an update marks nothing, as in `reflect_notifying`.
    let (unchanged, compare) = Unchanged::compare(
        before,
        ar,
        Some(|old: &DynamicObject, new: &DynamicObject| {
            old.data == new.data && same_but_version(&old.metadata, &new.metadata)
        }),
    );
    let stream = watcher(api, watch_config())
        .backoff(watch_backoff())
        .modify(strip_scaled_object)
        .inspect(compare)
        .reflect(writer);
    let mut stream = std::pin::pin!(stream);
    while let Some(item) = stream.next().await {
        match item {
            Ok(ev) => {
                if !unchanged.last() {
                    mark_namespace(dirty, &ev);
                }
                match ev {
                    Event::InitDone => {
                        let recovered = keda.health.ok();
                        keda.health.listed();
                        note_recovery(&keda.health, recovered);
                        keda.set(KedaState::Synced);
                    }
                    Event::Apply(_) | Event::Delete(_) => {
                        keda.events.inc();
                        note_recovery(&keda.health, keda.health.ok());
                    }
                    Event::Init | Event::InitApply(_) => continue,
                }
                changed.send_modify(|n| *n = n.wrapping_add(1));
            }
            Err(e) if is_not_found(&e) => return,
            Err(e) => {
                let first = keda.health.failing_since.load(Ordering::Relaxed) == 0;
                keda.health.error(e.to_string());
                if first {
                    tracing::warn!(kind = "ScaledObject", error = %e,
                        "watch error; Deployments under KEDA's HPAs are not surged or reverted until ScaledObjects list");
                } else {
                    tracing::debug!(kind = "ScaledObject", error = %e, "watch error");
                }
                if let StoreState::Stale(d) = keda.health.state(keda.stale_after) {
                    if !keda.health.stale_reported.swap(true, Ordering::Relaxed) {
                        tracing::error!(store = KEDA_STORE, failing_for = ?d, error = %e,
                            "ScaledObject watch stale: /readyz fails until it recovers");
                    }
                }
            }
        }
    }
}

/// Is this PDB (or EvictionAutoScaler) one of ours: annotation `ownedBy:
/// EvictionAutoScaler`, and no manifest that leaves it out declares it
/// ([`crate::declared`]; the caches' copies carry no such evidence, and no
/// `ownedBy` when there was).
pub fn owned_by_us(meta: &ObjectMeta) -> bool {
    carries_owned_by(meta) && crate::declared::declared_by(meta).is_none()
}

/// Carries `ownedBy: EvictionAutoScaler`, whoever wrote it.
pub fn carries_owned_by(meta: &ObjectMeta) -> bool {
    meta.annotations
        .as_ref()
        .and_then(|a| a.get(names::OWNED_BY))
        .is_some_and(|v| v == names::OWNED_BY_VALUE)
}

#[cfg(test)]
mod tests {
    use super::*;

    const BOUND: Duration = Duration::from_secs(30);

    fn health() -> StoreHealth {
        StoreHealth::new("pods", Instant::now())
    }

    fn empty_cache() -> Cache {
        Cache::from_stores(
            Stores {
                pods: PodStore::default(),
                pdbs: reflector::store().0,
                deployments: reflector::store().0,
                replicasets: reflector::store().0,
                namespaces: reflector::store().0,
                nodes: reflector::store().0,
                hpas: reflector::store().0,
                eas: reflector::store().0,
            },
            Arc::new(Behaviour::default()),
        )
    }

    /// ScaledObjects that cannot list (KEDA served, RBAC missing): /readyz
    /// names them; neither controller waits (each leaves only the
    /// Deployments under KEDA's HPAs alone, see step.rs and reconcile/plan.rs).
    #[test]
    fn scaled_objects_unknown_show_in_readyz_and_stop_no_controller() {
        let mut c = empty_cache();
        assert!(c.keda_known() && c.ready_for(Reader::Reconciler) && c.unready().is_empty());
        // Discovery not answered yet: unknown, and /readyz says so.
        c.keda_state
            .store(KedaState::Unknown.as_u8(), Ordering::Release);
        assert!(!c.keda_known());
        assert!(
            matches!(&c.unready()[..], [u] if u.store == KEDA_STORE && u.state == StoreState::Syncing)
        );
        // Served, the list refused.
        let base = Instant::now()
            .checked_sub(Duration::from_secs(120))
            .unwrap_or_else(Instant::now);
        c.keda_health = Arc::new(StoreHealth::new(KEDA_STORE, base));
        c.keda_state
            .store(KedaState::Syncing.as_u8(), Ordering::Release);
        c.keda_health.error("scaledobjects is forbidden".into());
        assert!(!c.keda_known());
        assert!(c.ready_for(Reader::SurgeWorker) && c.ready_for(Reader::Reconciler));
        assert_eq!(
            c.unready(),
            vec![Unready {
                store: KEDA_STORE.into(),
                state: StoreState::Syncing,
                last_error: "scaledobjects is forbidden".into(),
            }]
        );
        // Listed: known, ready.
        c.keda_health.listed();
        c.keda_state
            .store(KedaState::Synced.as_u8(), Ordering::Release);
        assert!(c.keda_known() && c.ready_for(Reader::Reconciler) && c.unready().is_empty());
        // Failing within the bound: still known; past it: unknown again.
        c.keda_health
            .error_at(c.keda_health.now(), "watch failed".into());
        assert!(c.keda_known(), "{:?}", c.unready());
        c.keda_health.ok();
        c.keda_health.error_at(1, "watch failed".into());
        assert!(!c.keda_known() && c.ready_for(Reader::SurgeWorker));
        assert!(matches!(&c.unready()[..], [u] if matches!(u.state, StoreState::Stale(_))));
        // KEDA gone: known (there are none), its old health forgotten.
        c.keda_state
            .store(KedaState::Absent.as_u8(), Ordering::Release);
        c.keda_health.reset();
        assert!(c.keda_known() && c.unready().is_empty());
        assert_eq!(c.keda_health.state(BOUND), StoreState::Syncing);
    }

    #[test]
    fn a_cached_scaled_object_keeps_what_the_decisions_read() {
        use crate::surge::writer::{writer, Field};
        let fields =
            |f: serde_json::Value| serde_json::json!({"fieldsType": "FieldsV1", "fieldsV1": f});
        let mut owners = Vec::new();
        for (manager, f) in [
            (
                "kubectl-client-side-apply",
                serde_json::json!({"f:spec": {"f:minReplicaCount": {}, "f:triggers": {}}}),
            ),
            (
                "keda",
                serde_json::json!({"f:status": {"f:conditions": {}, "f:hpaName": {}}}),
            ),
            (
                "eviction-autoscaler",
                serde_json::json!({"f:metadata": {"f:annotations": {}}}),
            ),
        ] {
            let mut e = fields(f);
            e["manager"] = manager.into();
            e["operation"] = "Update".into();
            owners.push(e);
        }
        let so: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject",
            "metadata": {"name": "web", "namespace": "a", "resourceVersion": "7",
                "annotations": {
                    "kubectl.kubernetes.io/last-applied-configuration": "{\"big\": true}",
                    "keep": "me"},
                "managedFields": owners},
            "spec": {"scaleTargetRef": {"name": "web"}, "minReplicaCount": 2, "maxReplicaCount": 9,
                "triggers": [{"type": "cpu", "metadata": {"value": "50"}}]},
            "status": {"hpaName": "keda-hpa-web", "conditions": [{"type": "Ready", "status": "True"}]}
        }))
        .unwrap();
        let mut cached = so.clone();
        strip_scaled_object(&mut cached);
        assert_eq!(cached.data["spec"], so.data["spec"]);
        assert!(cached.data.get("status").is_none());
        // KEDA's record of a `paused-replicas` pause stays (and only it):
        // without it the pause never counted (found by an e2e test).
        let mut recorded = so.clone();
        recorded.data["status"]["pausedReplicaCount"] = serde_json::json!(1);
        strip_scaled_object(&mut recorded);
        assert_eq!(
            recorded.data["status"],
            serde_json::json!({"pausedReplicaCount": 1})
        );
        let ann = cached.metadata.annotations.clone().unwrap();
        assert_eq!(ann.keys().collect::<Vec<_>>(), ["keep"]);
        assert_eq!(cached.metadata.resource_version.as_deref(), Some("7"));
        // Only the owner of the minimum is left, and it reads the same.
        let kept = cached.metadata.managed_fields.clone().unwrap();
        assert_eq!(kept.len(), 1);
        assert_eq!(
            kept[0].manager.as_deref(),
            Some("kubectl-client-side-apply")
        );
        assert_eq!(
            writer(&cached.metadata, Field::MinReplicaCount),
            writer(&so.metadata, Field::MinReplicaCount)
        );
        assert!(
            serde_json::to_vec(&cached).unwrap().len() < serde_json::to_vec(&so).unwrap().len()
        );
    }

    /// A namespace the cache has not seen is out of scope until it has,
    /// even where the settings put every namespace in: it may carry the
    /// opt-out annotation. Known, the settings and annotation decide.
    #[test]
    fn a_namespace_not_cached_yet_is_out_of_scope() {
        let (nss, mut nw) = reflector::store::<Namespace>();
        let mut c = empty_cache();
        c.namespaces = nss;
        c.behaviour = Arc::new(Behaviour {
            enabled_by_default: true,
            ..Behaviour::default()
        });
        assert!(!c.namespace_in_scope("team"));
        for (ann, want) in [(None, true), (Some("false"), false)] {
            nw.apply_watcher_event(&Event::Apply(Namespace {
                metadata: ObjectMeta {
                    name: Some("team".into()),
                    annotations: ann
                        .map(|v: &str| [(names::ENABLE.to_string(), v.to_string())].into()),
                    ..Default::default()
                },
                ..Default::default()
            }));
            assert_eq!(c.namespace_in_scope("team"), want, "{ann:?}");
        }
    }

    #[test]
    fn a_lookup_with_the_kept_key_finds_what_a_new_key_finds() {
        let (deps, mut w) = reflector::store::<Deployment>();
        let (nss, mut nw) = reflector::store::<Namespace>();
        let meta = |ns: Option<&str>, name: &str| ObjectMeta {
            name: Some(name.into()),
            namespace: ns.map(Into::into),
            ..Default::default()
        };
        for (ns, name) in [("a", "web"), ("b", "web"), ("a", "longer-name-than-before")] {
            w.apply_watcher_event(&Event::Apply(Deployment {
                metadata: meta(Some(ns), name),
                ..Default::default()
            }));
        }
        nw.apply_watcher_event(&Event::Apply(Namespace {
            metadata: meta(None, "a"),
            ..Default::default()
        }));
        // Interleaved, so that each key is filled over the one before.
        let cases = [
            (Some("a"), "longer-name-than-before"),
            (Some("b"), "web"),
            (Some("c"), "web"),
            (Some("a"), "we"),
            (None, "web"),
            (Some("a"), "web"),
        ];
        for (ns, name) in cases {
            let fresh = ObjectRef::<Deployment>::new(name);
            let want = deps.get(&match ns {
                Some(ns) => fresh.within(ns),
                None => fresh,
            });
            let got = lookup(&deps, ns, name);
            assert_eq!(
                got.map(|d| d.metadata.clone()),
                want.map(|d| d.metadata.clone()),
                "{ns:?}/{name}"
            );
            // A cluster-scoped lookup right after carries no namespace over.
            assert!(lookup(&nss, None, "a").is_some());
            assert!(lookup(&nss, None, name).is_none() || name == "a");
        }
        assert!(lookup(&deps, Some("b"), "web").is_some());
        assert!(lookup(&deps, None, "web").is_none());
    }

    #[test]
    fn a_stale_or_unlisted_store_stops_only_the_controllers_that_read_it() {
        // The stores as `start` names them, and whether each stops
        // (surge worker, reconciler) when it alone is stale, or has not
        // listed yet (a server started while the CRD is missing).
        let table: [(Cow<'static, str>, bool, bool); 8] = [
            (PodWire::plural(&()), true, false),
            (PodDisruptionBudget::plural(&()), true, true),
            (Deployment::plural(&()), true, true),
            (ReplicaSet::plural(&()), false, false),
            (Namespace::plural(&()), true, true),
            (Node::plural(&()), true, false),
            (HorizontalPodAutoscaler::plural(&()), true, true),
            // The CRD deleted mid-surge: the worker still reverts, and the
            // reconciler keeps the PDBs (without EvictionAutoScalers).
            (EvictionAutoScaler::plural(&()), false, false),
        ];
        for stale in [true, false] {
            for (i, (name, worker, reconciler)) in table.iter().enumerate() {
                let stores: Vec<Arc<StoreHealth>> = table
                    .iter()
                    .enumerate()
                    .map(|(j, (n, _, _))| {
                        let h = Arc::new(StoreHealth::new(n.clone(), Instant::now()));
                        if j != i || stale {
                            h.listed();
                        }
                        h
                    })
                    .collect();
                if stale {
                    stores[i].error("gone".into());
                }
                let health = CacheHealth {
                    stale_after: Duration::ZERO,
                    stores,
                };
                assert!(!health.unready().is_empty(), "{name}");
                assert_eq!(
                    !health.ready_for(Reader::SurgeWorker),
                    *worker,
                    "{name} (stale {stale}): worker"
                );
                assert_eq!(
                    !health.ready_for(Reader::Reconciler),
                    *reconciler,
                    "{name} (stale {stale}): reconciler"
                );
            }
        }
    }

    #[test]
    fn a_store_goes_stale_only_after_failing_for_the_bound() {
        let h = health();
        assert_eq!(h.state_at(1, BOUND), StoreState::Syncing);
        h.listed();
        assert_eq!(h.state_at(1_000, BOUND), StoreState::Fresh);
        // First error at t=10 s; later errors keep the start of the streak.
        h.error_at(10_000, "connection refused".into());
        h.error_at(25_000, "403 forbidden".into());
        assert_eq!(
            h.state_at(39_999, BOUND),
            StoreState::Failing(Duration::from_millis(29_999))
        );
        assert_eq!(
            h.state_at(40_000, BOUND),
            StoreState::Stale(Duration::from_secs(30))
        );
        assert_eq!(h.last_error(), "403 forbidden");
        // Any sign of a working watch ends the streak.
        assert!(h.ok().is_some());
        assert_eq!(h.state_at(41_000, BOUND), StoreState::Fresh);
        assert_eq!(h.ok(), None, "no second recovery");
        // A new streak starts from its own first error.
        h.error_at(50_000, "eof".into());
        assert_eq!(
            h.state_at(60_000, BOUND),
            StoreState::Failing(Duration::from_secs(10))
        );
    }

    #[test]
    fn errors_before_the_first_list_leave_it_syncing() {
        let h = health();
        h.error_at(5, "404 not found".into());
        assert_eq!(h.state_at(100_000, BOUND), StoreState::Syncing);
        h.listed();
        assert_eq!(h.state_at(100_001, BOUND), StoreState::Fresh);
    }

    #[test]
    fn the_cache_is_stale_while_any_store_is() {
        let base = Instant::now();
        let stores: Vec<_> = ["pods", "poddisruptionbudgets"]
            .into_iter()
            .map(|n| Arc::new(StoreHealth::new(n, base)))
            .collect();
        for s in &stores {
            s.listed();
        }
        let h = CacheHealth {
            stale_after: Duration::ZERO,
            stores: stores.clone(),
        };
        assert!(!h.stale());
        assert!(h.unready().is_empty());
        stores[1].error("403 forbidden".into());
        assert!(h.stale());
        let u = h.unready();
        assert_eq!(u.len(), 1);
        assert_eq!(u[0].store, "poddisruptionbudgets");
        assert_eq!(u[0].last_error, "403 forbidden");
        stores[1].ok();
        assert!(!h.stale());
        // A longer bound: failing but not stale yet.
        let h = CacheHealth {
            stale_after: BOUND,
            stores: stores.clone(),
        };
        stores[0].error("eof".into());
        assert!(!h.stale());
        assert!(h.unready().is_empty());
    }

    /// A watch that resumes after an outage yields no event until something
    /// changes; its 2xx answer, with no error in the second after it, is
    /// what says the store is current again. A 410 right after the 200 (the
    /// resourceVersion expired in the outage) keeps the streak: the store
    /// still holds the outage's objects until the relist.
    #[tokio::test(start_paused = true)]
    async fn a_watch_answered_2xx_ends_a_failing_streak() {
        use axum::http::{Request, Response};
        use k8s_openapi::api::core::v1::Pod;
        let inner = Client::new(
            tower::service_fn(|req: Request<kube::client::Body>| async move {
                let watch = req.uri().query().is_some_and(|q| q.contains("watch=true"));
                let code = if watch { 200 } else { 500 };
                Response::builder()
                    .status(code)
                    .body(kube::client::Body::from(Vec::new()))
            }),
            "default",
        );
        // A clock base a minute back: the streak's start below (1 ms after
        // it) is far from any error this test makes now.
        let base = Instant::now()
            .checked_sub(Duration::from_secs(60))
            .unwrap_or_else(Instant::now);
        let h = Arc::new(StoreHealth::new("pods", base));
        h.listed();
        h.error("connection refused".into());
        let api: Api<Pod> = Api::all(observed_client(&inner, h.clone()));
        // Another request answered with an error does not count.
        assert!(api.list(&Default::default()).await.is_err());
        assert!(matches!(h.state(Duration::ZERO), StoreState::Stale(_)));
        // A watch the apiserver accepts does, once no error follows.
        let _ = api.watch(&Default::default(), "1").await;
        assert!(h.failing(), "not before the confirmation");
        tokio::time::sleep(RECOVERY_CONFIRM + Duration::from_millis(10)).await;
        assert_eq!(h.state(Duration::ZERO), StoreState::Fresh);
        // Failing since the outage began; a 200, then 410 Gone at once: the
        // streak goes on from the outage, not from the 410.
        h.error_at(1, "connection refused".into());
        let _ = api.watch(&Default::default(), "1").await;
        tokio::time::sleep(Duration::from_millis(5)).await;
        h.error("410 Gone: too old resource version".into());
        tokio::time::sleep(RECOVERY_CONFIRM * 2).await;
        assert_eq!(
            h.failing_since.load(Ordering::Acquire),
            1,
            "a 200 followed by an error is no recovery"
        );
        // The relist ends it.
        h.listed();
        assert_eq!(h.state(Duration::ZERO), StoreState::Fresh);
    }

    fn wire(ns: &str, name: &str, app: &str) -> PodWire {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": ns,
                "labels": {"app": app, "pod-template-hash": "7d9f8c6b5"},
                "annotations": {"a": "b"},
                "ownerReferences": [
                    {"apiVersion": "v1", "kind": "Node", "name": "n", "uid": "1"},
                    {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": format!("{app}-7d9f8c6b5"),
                     "uid": "2", "controller": true}]},
            "spec": {"nodeName": "node-1"},
            "status": {"phase": "Running", "conditions": [
                {"type": "PodScheduled", "status": "True"}, {"type": "Ready", "status": "True"}]}
        }))
        .unwrap()
    }

    /// Two Ready conditions (the apiserver accepts such a status): the
    /// first one decides, as `podutil.IsPodReady` reads it.
    #[test]
    fn the_first_ready_condition_decides() {
        let mut w = wire("ns", "web-1", "web");
        let cond = |status: &str| -> SlimCondition {
            serde_json::from_value(serde_json::json!({"type": "Ready", "status": status})).unwrap()
        };
        w.status.conditions = vec![cond("False"), cond("True")];
        assert!(!SlimPod::from(&w).is_ready());
        w.status.conditions = vec![cond("True"), cond("False")];
        assert!(SlimPod::from(&w).is_ready());
    }

    #[test]
    fn a_slim_pod_keeps_what_the_decisions_read() {
        let mut w = wire("ns", "web-1", "web");
        let p = SlimPod::from(&w);
        assert_eq!(
            (p.namespace(), p.name(), p.node()),
            ("ns", "web-1", Some("node-1"))
        );
        assert_eq!(p.phase(), Phase::Running);
        assert!(p.is_ready() && !p.is_terminating() && !p.budget_ignored());
        let o = p.controller().unwrap();
        assert_eq!((&*o.kind, &*o.name), ("ReplicaSet", "web-7d9f8c6b5"));
        assert_eq!(p.labels().label("app"), Some("web"));
        assert_eq!(p.labels().label("pod-template-hash"), Some("7d9f8c6b5"));
        assert_eq!(p.labels().label("tier"), None);
        assert_eq!(p.labels().iter().count(), 2);
        w.status.conditions[1].status = "False".into();
        w.status.phase = Some("Pending".into());
        w.metadata.owner_references = None;
        let p = SlimPod::from(&w);
        assert!(!p.is_ready() && p.budget_ignored() && p.controller().is_none());
        w.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            Default::default(),
        ));
        w.status.phase = Some("Succeeded".into());
        let p = SlimPod::from(&w);
        assert!(p.is_terminating() && p.is_completed());
    }

    #[test]
    fn repeated_strings_are_stored_once() {
        let a = SlimPod::from(&wire("ns-intern", "web-1", "web"));
        let b = SlimPod::from(&wire("ns-intern", "web-2", "web"));
        assert!(Arc::ptr_eq(&a.namespace, &b.namespace));
        assert!(Arc::ptr_eq(
            a.node.as_ref().unwrap(),
            b.node.as_ref().unwrap()
        ));
        assert!(Arc::ptr_eq(&a.labels.0[0].1, &b.labels.0[0].1));
        assert!(Arc::ptr_eq(
            &a.owner.as_ref().unwrap().name,
            &b.owner.as_ref().unwrap().name
        ));
    }

    #[test]
    fn the_interner_forgets_values_no_one_holds() {
        let kept = intern("kept-value-for-the-sweep-test");
        for i in 0..5000 {
            let _ = intern(&format!("transient-{i}"));
        }
        let n = INTERNER.lock().unwrap().set.len();
        assert!(n < 5000, "swept: {n} left");
        assert!(Arc::ptr_eq(&kept, &intern("kept-value-for-the-sweep-test")));
    }

    /// The reconciler's overlap check reads pods' labels and whether they
    /// still count (not terminating, not completed): a pod event marks its
    /// namespace when one of those changes, and not for a readiness flip.
    #[test]
    fn pod_events_mark_the_namespace_when_the_overlap_check_would_change() {
        let dirty = Arc::new(crate::dirty::Dirty::default());
        let store = PodStore::default();
        let mut w = store.writer().marking(dirty.clone());
        let marked = |w: &mut PodWriter, pod: PodWire| {
            dirty.take();
            w.apply(&Event::Apply(pod));
            dirty.take().covers("ns")
        };
        let base = wire("ns", "p1", "web");
        assert!(marked(&mut w, base.clone()), "a new pod");
        assert!(!marked(&mut w, base.clone()), "the same pod again");
        let mut unready = base.clone();
        unready.status.conditions[1].status = "False".into();
        assert!(!marked(&mut w, unready), "a readiness flip");
        assert!(marked(&mut w, wire("ns", "p1", "api")), "relabelled");
        let mut leaving = wire("ns", "p1", "api");
        leaving.metadata.deletion_timestamp = Some(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Default::default()),
        );
        assert!(marked(&mut w, leaving), "terminating");
        let mut done = wire("ns", "p1", "api");
        done.status.phase = Some("Succeeded".into());
        assert!(marked(&mut w, done), "completed");
    }

    /// A StatefulSet's pod deleted is coming back under its name: the
    /// overlap checks and the surge's budget still see it until it is back
    /// (or for LEAVING_FOR); a ReplicaSet's or a DaemonSet's is not (made
    /// again under another name).
    #[test]
    fn a_statefulsets_deleted_pod_is_leaving_until_it_is_back() {
        let store = PodStore::default();
        let mut w = store.writer();
        w.apply(&Event::Init);
        w.apply(&Event::InitDone);
        let owned = |name: &str, kind: &str| {
            let mut p = wire("ns", name, "db");
            p.metadata.owner_references = Some(vec![OwnerReference {
                kind: kind.into(),
                name: "db".into(),
                controller: Some(true),
                ..Default::default()
            }]);
            p
        };
        for (name, kind) in [
            ("db-0", "StatefulSet"),
            ("web-x", "ReplicaSet"),
            ("agent-x", "DaemonSet"),
        ] {
            w.apply(&Event::Apply(owned(name, kind)));
            w.apply(&Event::Delete(owned(name, kind)));
        }
        let names = |s: &PodStore, now: Instant| -> Vec<String> {
            s.with_leaving(Some("ns"), now)
                .iter()
                .map(|p| p.name().to_string())
                .collect()
        };
        assert_eq!(names(&store, Instant::now()), ["db-0"]);
        assert_eq!(store.state_and_leaving().len(), 1);
        assert!(store.pods_and_leaving_in("other").is_empty());
        assert!(store.get("ns", "db-0").is_none(), "not among the pods");
        w.apply(&Event::Apply(owned("db-0", "StatefulSet")));
        assert_eq!(names(&store, Instant::now()), ["db-0"], "back, once");
        // Gone for longer than LEAVING_FOR: no longer counted.
        w.apply(&Event::Delete(owned("db-0", "StatefulSet")));
        assert!(
            names(&store, Instant::now() + LEAVING_FOR).is_empty(),
            "expired"
        );
        // Back through a relist: no longer leaving either.
        w.apply(&Event::Delete(owned("db-0", "StatefulSet")));
        w.apply(&Event::Init);
        w.apply(&Event::InitApply(owned("db-0", "StatefulSet")));
        w.apply(&Event::InitDone);
        assert_eq!(names(&store, Instant::now()), ["db-0"], "relisted, once");
    }

    /// A StatefulSet pod that is not made again (scaled down) stops
    /// counting after LEAVING_FOR: its namespace is marked then, so the
    /// reconciler does not wait for its resync to make the PDB it held back.
    #[tokio::test(start_paused = true)]
    async fn a_leaving_pod_marks_its_namespace_again_once_it_stops_counting() {
        let store = PodStore::default();
        let dirty = Arc::new(Dirty::default());
        let mut w = store.writer().marking(dirty.clone());
        w.apply(&Event::Init);
        w.apply(&Event::InitDone);
        let mut sts = wire("ns", "db-1", "db");
        sts.metadata.owner_references = Some(vec![OwnerReference {
            kind: "StatefulSet".into(),
            name: "db".into(),
            controller: Some(true),
            ..Default::default()
        }]);
        w.apply(&Event::Apply(sts.clone()));
        let _ = dirty.take();
        w.apply(&Event::Delete(sts));
        assert!(dirty.take().covers("ns"), "marked as it goes");
        tokio::time::sleep(LEAVING_FOR - Duration::from_secs(1)).await;
        assert!(dirty.take().is_empty(), "nothing while it still counts");
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert!(dirty.take().covers("ns"), "marked once it stops counting");
        // A ReplicaSet's pod is not leaving: no mark later.
        w.apply(&Event::Delete(wire("ns", "web-x", "web")));
        let _ = dirty.take();
        tokio::time::sleep(LEAVING_FOR * 2).await;
        assert!(dirty.take().is_empty());
    }

    #[tokio::test]
    async fn the_pod_store_follows_watch_events_and_swaps_relists_whole() {
        let store = PodStore::default();
        let mut w = store.writer();
        let waiting = tokio::spawn({
            let s = store.clone();
            async move { s.wait_until_ready().await }
        });
        w.apply(&Event::Init);
        w.apply(&Event::InitApply(wire("a", "p1", "web")));
        w.apply(&Event::InitApply(wire("b", "p2", "web")));
        assert!(store.is_empty(), "a list is swapped in at InitDone");
        w.apply(&Event::InitDone);
        waiting.await.unwrap();
        assert_eq!(store.len(), 2);
        assert_eq!(store.get("a", "p1").unwrap().name(), "p1");
        assert!(store.get("a", "p2").is_none());
        w.apply(&Event::Apply(wire("a", "p3", "api")));
        assert_eq!(store.pods_in("a").len(), 2);
        let mut gone = wire("a", "p1", "web");
        gone.status.phase = Some("Failed".into());
        w.apply(&Event::Apply(gone));
        assert_eq!(
            store.get("a", "p1").unwrap().phase(),
            Phase::Failed,
            "replaced"
        );
        w.apply(&Event::Delete(wire("a", "p1", "web")));
        assert!(store.get("a", "p1").is_none());
        // A relist drops what it no longer lists.
        w.apply(&Event::Init);
        w.apply(&Event::InitApply(wire("b", "p2", "web")));
        w.apply(&Event::InitDone);
        assert_eq!(store.len(), 1);
        assert!(store.get("a", "p3").is_none());
        assert_eq!(store.state().len(), 1);
    }

    fn pdb_obj(ns: &str, name: &str, app: &str) -> PodDisruptionBudget {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": ns},
            "spec": {"selector": {"matchLabels": {"app": app}}}
        }))
        .unwrap()
    }

    #[test]
    fn the_pdb_index_follows_its_store_per_namespace() {
        let (store, mut w) = reflector::store::<PodDisruptionBudget>();
        let index = PdbIndex::default();
        w.apply_watcher_event(&Event::Init);
        w.apply_watcher_event(&Event::InitApply(pdb_obj("a", "web", "web")));
        w.apply_watcher_event(&Event::InitApply(pdb_obj("b", "web", "web")));
        w.apply_watcher_event(&Event::InitDone);
        index.rebuild(&store);
        let pod = SlimPod::from(&wire("a", "web-1", "web"));
        let names = |v: Vec<Arc<PodDisruptionBudget>>| -> Vec<String> {
            v.iter().filter_map(|p| p.metadata.name.clone()).collect()
        };
        let cache_view = |ns: &str| -> Vec<Arc<PodDisruptionBudget>> {
            index
                .get(ns)
                .map(|v| v.selecting(pod.labels()))
                .unwrap_or_default()
                .into_vec()
        };
        assert_eq!(names(cache_view("a")), ["web"]);
        // A second PDB in "a" with another selector: indexed, not selecting.
        let other = pdb_obj("a", "api", "api");
        w.apply_watcher_event(&Event::Apply(other.clone()));
        index.rebuild_ns(&store, "a");
        assert_eq!(index.get("a").unwrap().pdbs.len(), 2);
        assert_eq!(names(cache_view("a")), ["web"]);
        w.apply_watcher_event(&Event::Delete(pdb_obj("a", "web", "web")));
        index.rebuild_ns(&store, "a");
        assert!(cache_view("a").is_empty());
        w.apply_watcher_event(&Event::Delete(other));
        index.rebuild_ns(&store, "a");
        assert!(index.get("a").is_none(), "empty namespaces are dropped");
        assert_eq!(
            index.get("b").unwrap().pdbs.len(),
            1,
            "other namespaces untouched"
        );
    }

    /// The label index finds exactly what testing every selector finds, in
    /// the same order, for every kind of selector.
    #[test]
    fn the_label_index_selects_what_a_full_scan_selects() {
        let selectors = [
            serde_json::json!({"matchLabels": {"app": "web"}}),
            serde_json::json!({"matchLabels": {"app": "web", "tier": "front"}}),
            serde_json::json!({"matchLabels": {"tier": "front"}}),
            serde_json::json!({"matchExpressions": [{"key": "app", "operator": "In", "values": ["web", "api"]}]}),
            serde_json::json!({"matchExpressions": [{"key": "app", "operator": "In", "values": ["api"]}]}),
            serde_json::json!({"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["db"]}]}),
            serde_json::json!({"matchExpressions": [{"key": "tier", "operator": "Exists"}]}),
            serde_json::json!({"matchExpressions": [{"key": "tier", "operator": "DoesNotExist"}]}),
            serde_json::json!({"matchLabels": {"app": "web"},
                "matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["back"]}]}),
            serde_json::json!({}),
            serde_json::json!(null),
            serde_json::json!({"matchExpressions": [{"key": "app", "operator": "Bogus"}]}),
        ];
        let pdbs: Vec<IndexedPdb> = selectors
            .iter()
            .enumerate()
            .map(|(i, sel)| {
                let p: PodDisruptionBudget = serde_json::from_value(serde_json::json!({
                    "metadata": {"name": format!("p{i}"), "namespace": "ns"},
                    "spec": {"selector": sel}
                }))
                .unwrap();
                PdbIndex::indexed(Arc::new(p))
            })
            .collect();
        let full_scan = |labels: &PodLabels| -> Vec<String> {
            pdbs.iter()
                .filter(|i| {
                    i.selector
                        .as_ref()
                        .is_some_and(|s| s.selects_for_eviction(labels))
                })
                .filter_map(|i| i.pdb.metadata.name.clone())
                .collect()
        };
        let index = NsPdbs::new(
            pdbs.iter()
                .map(|i| IndexedPdb {
                    pdb: i.pdb.clone(),
                    selector: i.selector.clone(),
                })
                .collect(),
        );
        let pods = [
            vec![("app", "web")],
            vec![("app", "web"), ("tier", "front")],
            vec![("app", "web"), ("tier", "back")],
            vec![("app", "api"), ("tier", "front")],
            vec![("app", "db")],
            vec![("tier", "front")],
            vec![],
        ];
        for labels in pods {
            let map: BTreeMap<String, String> = labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            let l = PodLabels::from_map(Some(&map));
            let indexed: Vec<String> = index
                .selecting(&l)
                .iter()
                .filter_map(|p| p.metadata.name.clone())
                .collect();
            assert_eq!(indexed, full_scan(&l), "pod labels {labels:?}");
        }
        // Sanity: the pods above do hit several selectors each (with `{}`,
        // which selects every pod).
        let web_front: BTreeMap<String, String> = [
            ("app".into(), "web".into()),
            ("tier".into(), "front".into()),
        ]
        .into();
        assert_eq!(
            index
                .selecting(&PodLabels::from_map(Some(&web_front)))
                .len(),
            8
        );
    }

    #[test]
    fn a_deployment_status_update_marks_nothing_and_any_spec_or_metadata_change_does() {
        use k8s_openapi::api::apps::v1::{DeploymentSpec, DeploymentStatus};
        let old = Deployment {
            metadata: ObjectMeta {
                name: Some("web".into()),
                namespace: Some("ns".into()),
                resource_version: Some("1".into()),
                generation: Some(1),
                ..Default::default()
            },
            spec: Some(DeploymentSpec {
                replicas: Some(3),
                ..Default::default()
            }),
            status: None,
        };
        let changed = |f: &dyn Fn(&mut Deployment)| {
            let mut new = old.clone();
            new.metadata.resource_version = Some("2".into());
            f(&mut new);
            !deployment_plans_read_the_same(&old, &new)
        };
        assert!(!changed(&|d| {
            d.status = Some(DeploymentStatus {
                ready_replicas: Some(3),
                ..Default::default()
            })
        }));
        assert!(!changed(&|_| {}), "a resourceVersion alone");
        assert!(changed(&|d| d.spec.as_mut().unwrap().replicas = Some(4)));
        assert!(changed(&|d| d.metadata.generation = Some(2)));
        assert!(changed(&|d| {
            d.metadata.annotations = Some([("a".to_string(), "b".to_string())].into())
        }));
        assert!(changed(&|d| d.metadata.labels = Some(Default::default())));
        assert!(changed(&|d| d.metadata.deletion_timestamp = Some(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Default::default())
        )));
        assert!(changed(&|d| d.metadata.managed_fields =
            Some(vec![crate::surge::writer::replicas_entry(
                "kubectl", None
            )])));
    }

    /// The flag is judged against what the store holds before it takes the
    /// event: an update like the stored object is unchanged, anything else
    /// (new object, other spec, a deletion, a relist) is not.
    #[test]
    fn an_update_is_unchanged_only_against_the_object_the_store_still_holds() {
        use k8s_openapi::api::apps::v1::{DeploymentSpec, DeploymentStatus};
        let (reader, mut writer) = reflector::store::<Deployment>();
        let (flag, mut step) = Unchanged::compare(reader, (), Some(deployment_plans_read_the_same));
        let web = |rv: &str, replicas: i32, ready: i32| Deployment {
            metadata: ObjectMeta {
                name: Some("web".into()),
                namespace: Some("ns".into()),
                resource_version: Some(rv.into()),
                ..Default::default()
            },
            spec: Some(DeploymentSpec {
                replicas: Some(replicas),
                ..Default::default()
            }),
            status: Some(DeploymentStatus {
                ready_replicas: Some(ready),
                ..Default::default()
            }),
        };
        let mut feed = |ev: Event<Deployment>| {
            let ev = Ok(ev);
            step(&ev);
            let judged = flag.last();
            if let Ok(ev) = &ev {
                writer.apply_watcher_event(ev);
            }
            judged
        };
        assert!(!feed(Event::Apply(web("1", 3, 0))), "new to the store");
        assert!(feed(Event::Apply(web("2", 3, 3))), "status only");
        assert!(!feed(Event::Apply(web("3", 4, 3))), "spec");
        assert!(feed(Event::Apply(web("4", 4, 4))), "status only again");
        assert!(!feed(Event::Delete(web("5", 4, 4))), "a deletion");
        assert!(!feed(Event::Apply(web("6", 4, 4))), "made again");
        assert!(!feed(Event::InitDone), "a relist");
    }

    #[test]
    fn watch_retries_back_off_to_five_seconds_and_reset() {
        let mut b = WatchBackoff::default();
        let d: Vec<Duration> = (&mut b).take(6).collect();
        for (got, base) in d.iter().zip([800u64, 1600, 3200, 5000, 5000, 5000]) {
            let base = Duration::from_millis(base);
            assert!(
                *got >= base * 3 / 4 && *got < base * 5 / 4,
                "{got:?} vs {base:?}"
            );
        }
        b.reset();
        assert!(b.next().unwrap() < Duration::from_secs(1));
    }
}
