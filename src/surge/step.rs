//! One surge step for one Deployment (behaviour.md sections 5 and 6): the
//! objects that can carry a surge (the Deployment, the HPAs and ScaledObjects
//! that target it), the planner's decision for the one that is the applier
//! now, and the guarded JSON patches that carry it out. Pure: the executor
//! (`apply.rs`) sends the writes in order and stops at the first failure.
//!
//! # Why nothing is stranded
//!
//! Every object that carries our annotations is ours to bring back, whatever
//! happened around it; the step never needs the PDB, the scope, the opt-out
//! or the current applier to do that:
//!
//! - The applier now (Deployment, HPA, ScaledObject) is planned by
//!   [`plan::plan`]. Without exactly one PDB, or out of scope, it only carries
//!   an active surge to its end (no start, no top-up).
//! - Every other object with markers (the Deployment an autoscaler surge
//!   raised, an autoscaler that is no longer the applier because another was
//!   added or removed, both under a KEDA + HPA conflict) is reverted once the
//!   drain is over ([`plan::drain_over`]); the Deployment only when scaling
//!   it back is safe ([`plan::safe_to_scale_back`]).
//! - An autoscaler whose Deployment is gone, or that now targets another
//!   kind, is reverted once the cooldown has passed.
//! - Half-written or malformed annotations of ours are removed.
//!
//! Each write tests the value it was planned from, so a concurrent change by
//! someone else fails it and the next step adopts their value instead.
//! A multi-object change (the Deployment, then the autoscaler's minimum)
//! resumes from what is persisted: the Deployment's markers are written
//! first, since the autoscaler lifts a Deployment below its new minimum by
//! itself; a Deployment the autoscaler lifted to our minimum is recorded as
//! ours (`UnderAutoscaler`), and one left below an autoscaler's markers is
//! raised by [`plan::SurgeKind::Resume`].

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::jiff::Timestamp;
use kube::core::DynamicObject;
use serde_json::{json, Value};

use crate::budget::{pdb_selects, IntOrPercent, Selector};
use crate::markers::{self, Markers};
use crate::patch::{annotation_ops, escape, guarded_set, version_guard};
use crate::pdb::{matching_pdbs, pdbs_over_pods};
use crate::surge::plan::{self, Action, Applier, PodState, Snapshot};
use crate::surge::view::{
    hpa_carrier, hpa_is_kedas, kedas_hpa_lags, scaled_object_carrier, scaled_object_hold, KedaHold,
    NsObjects,
};
use crate::surge::writer::{replicas_writer, writer, Field, ReplicasWriter, SurgeTarget};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ObjKind {
    Deployment,
    Hpa,
    ScaledObject,
}

/// An object a write goes to.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjKey {
    pub kind: ObjKind,
    pub namespace: String,
    pub name: String,
}

/// One JSON patch to one object.
#[derive(Debug, Clone, PartialEq)]
pub struct Write {
    pub target: ObjKey,
    pub ops: Vec<Value>,
}

/// A user's value seen on an object, being adopted (a failed adoption is
/// remembered, so the next pass adopts even a value that now equals ours).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Adoption {
    pub key: ObjKey,
    /// The UID of the object it was seen on: one deleted and made again
    /// under the name is another object, with no value of anyone's to adopt
    /// (the new one's surge, taken for it, was kept for good).
    pub uid: Option<String>,
    /// The value seen.
    pub seen: Option<i32>,
}

impl Facts {
    /// The value seen by a failed adoption on object `o` (`Some(None)`: absent).
    fn pending_on(&self, o: &Surgeable) -> Option<Option<i32>> {
        self.adoption_pending
            .as_ref()
            .filter(|a| a.key == o.key && a.uid.as_deref() == o.uid)
            .map(|a| a.seen)
    }
}

/// What the signals say about one Deployment, from this replica's memory.
#[derive(Debug, Clone, Default)]
pub struct Facts {
    /// Since the last blocked eviction or displaced pod seen here.
    pub since_signal: Option<Duration>,
    /// Pods denied an eviction within the cooldown.
    pub denied: BTreeSet<String>,
    /// The object whose adoption of a user's value failed to persist (see
    /// [`Snapshot::adoption_pending`]).
    pub adoption_pending: Option<Adoption>,
    /// The record of a lift to our raised minimum whose write failed (see
    /// [`Step::lifting`]): kept here, the lift is still recorded as ours if
    /// the autoscaler goes before the retry.
    pub lift_pending: Option<Markers>,
    /// The autoscalers' minimum this replica read at earlier passes (see
    /// [`Step::autoscaler_min`]), and how long it has stood since it was
    /// first read; `None` when not read before (or forgotten on restart).
    pub autoscaler_min: Option<(i32, Duration)>,
    /// How long this replica has led: a surge found at start counts as
    /// signalled then, so a restart never cuts a cooldown short.
    pub lead_for: Duration,
}

/// How long the autoscalers' minimum must have stood, as read, before a
/// Deployment under them is scaled back: their controller lifts a Deployment
/// to the minimum it read from its own cache, which may still be the one
/// before (a raised minimum just reverted, or a user's edit); KEDA's
/// operator adds its own step.
pub const SETTLE: Duration = Duration::from_secs(3);

/// Settings the step reads.
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    pub cooldown: Duration,
    pub zero_surge_override: Option<IntOrPercent>,
}

/// The outcome of planning one Deployment.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    pub namespace: String,
    pub deployment: String,
    /// The applier's decision (Events, Degraded, metrics).
    pub action: Action,
    /// In order; the executor stops at the first failure.
    pub writes: Vec<Write>,
    pub displaced: i32,
    /// The single PDB over the Deployment allowed a disruption as read.
    pub budget_open: bool,
    /// The Deployment's pods still on draining nodes (a signal, section 6).
    pub on_draining: i32,
    pub pdb: Option<String>,
    /// The surge in place once the writes are done (metrics).
    pub active: Option<Markers>,
    /// A surge (of any object) is undone by these writes.
    pub reverted: bool,
    /// The objects users' values are adopted on, in the order of their
    /// writes (each the first write to its object).
    pub adopting: Vec<Adoption>,
    /// The markers a Deployment the autoscaler lifted to our minimum is
    /// recorded with, when the step records the lift.
    pub lifting: Option<Markers>,
    /// The highest minimum of the autoscalers over the Deployment, as read.
    pub autoscaler_min: Option<i32>,
    /// Nodes the Deployment's pods run on now (the next pass counts a node
    /// found draining as a signal even if the pods left it in between).
    pub nodes: BTreeSet<String>,
    /// A surge left by the Go project's older versions whose baseline this
    /// step writes beside its lone marker ([`markers::legacy_surge`]).
    pub legacy: Option<Markers>,
    /// Objects whose markers this step removes because they were half
    /// there or not numbers (edited by hand): their value stays as it is,
    /// and the baseline they recorded is lost (a Warning Event says so).
    pub cleaned: Vec<ObjKey>,
}

/// An object that can carry a surge, as read.
struct Surgeable<'a> {
    key: ObjKey,
    /// JSON pointer of the value a surge changes.
    path: &'static str,
    /// The value as stored (`None` when absent).
    raw: Option<i32>,
    /// The value Kubernetes assumes when it is absent.
    default: i32,
    /// The most the value may be (an autoscaler's maximum).
    ceiling: Option<i32>,
    annotations: Option<&'a BTreeMap<String, String>>,
    /// As read: guards the writes that rest on an absence.
    resource_version: Option<&'a str>,
    /// As read: every write is tested against it, so that an object
    /// deleted and made again under the name (`kubectl replace --force`)
    /// before the cache saw it is never given another's markers or value.
    uid: Option<&'a str>,
    /// Who set the value last (managedFields, surge::writer).
    writer: ReplicasWriter,
}

impl Surgeable<'_> {
    fn value(&self) -> i32 {
        self.raw.unwrap_or(self.default)
    }
    fn markers(&self) -> Option<Markers> {
        Markers::from_annotations(self.annotations)
    }
    /// Our surged number written again since, by someone else through the
    /// object itself (managedFields): theirs (an autoscaler's lift of a
    /// Deployment writes through `scale`, and no controller writes an
    /// autoscaler's minimum).
    fn ours_rewritten(&self, m: Markers) -> bool {
        self.writer == ReplicasWriter::Someone
            && self.raw == Some(m.surged_to)
            && m.baseline != m.surged_to
    }
    fn write(&self, ops: Vec<Value>) -> Option<Write> {
        if ops.is_empty() {
            return None;
        }
        let ops = match self.uid {
            Some(uid) => {
                std::iter::once(json!({"op": "test", "path": "/metadata/uid", "value": uid}))
                    .chain(ops)
                    .collect()
            }
            None => ops,
        };
        Some(Write {
            target: self.key.clone(),
            ops,
        })
    }

    /// Value and markers in one patch, guarded on the value read, and on
    /// the version read when no markers were read: our own surge not yet in
    /// the cache, then scaled back by a user to the value read, would
    /// otherwise be written again over their value (its markers overwritten,
    /// not adopted).
    fn surge(&self, baseline: i32, to: i32) -> Option<Write> {
        let mut ops = self.absence_guard(self.raw.is_none() || self.markers().is_none());
        ops.extend(guarded_set(
            self.path,
            self.raw.map(|v| json!(v)),
            json!(to),
        ));
        let m = Markers {
            baseline,
            surged_to: to,
        };
        let [a, b] = m.set_changes();
        ops.extend(annotation_ops(
            self.annotations,
            &[
                a,
                b,
                (markers::ADOPTED_DISPLACED, None),
                (markers::TAKEN_OVER, None),
            ],
        ));
        self.write(ops)
    }

    /// The baseline of a lone marker of the Go project's older versions
    /// ([`markers::legacy_surge`]) written beside it, guarded on the value
    /// and the marker as read: from then on a surge like any of ours.
    fn complete_legacy(&self, m: Markers) -> Option<Write> {
        let mut ops = self.test_value();
        let lone = self
            .annotations
            .and_then(|a| a.get(crate::names::SURGE_REPLICAS))?;
        ops.push(json!({"op": "test", "path": annotation_path(crate::names::SURGE_REPLICAS), "value": lone}));
        ops.extend(annotation_ops(
            self.annotations,
            &[
                (
                    crate::names::ORIGINAL_MIN_REPLICAS,
                    Some(m.baseline.to_string()),
                ),
                (markers::TAKEN_OVER, Some(m.surged_to.to_string())),
            ],
        ));
        self.write(ops)
    }

    /// Their value stays: both markers record it, with the displaced count.
    fn adopt(&self, new_baseline: i32, displaced: i32) -> Option<Write> {
        let mut ops = self.absence_guard(false);
        ops.extend(self.test_value());
        let m = Markers {
            baseline: new_baseline,
            surged_to: new_baseline,
        };
        let [a, b] = m.set_changes();
        ops.extend(annotation_ops(
            self.annotations,
            &[
                a,
                b,
                (markers::ADOPTED_DISPLACED, Some(displaced.to_string())),
                (markers::TAKEN_OVER, None),
            ],
        ));
        self.write(ops)
    }

    /// The value back to `restore` if it is still the one we set, and our
    /// annotations removed. A value someone else set is left alone.
    fn revert(&self, m: Markers, restore: i32) -> Option<Write> {
        let mut ops = Vec::new();
        if self.raw == Some(m.surged_to) && m.surged_to != m.baseline && restore != m.surged_to {
            ops.extend(guarded_set(
                self.path,
                Some(json!(m.surged_to)),
                json!(restore),
            ));
        } else {
            ops.extend(self.test_value());
        }
        ops.extend(annotation_ops(self.annotations, &Markers::CLEAR));
        self.write(ops)
    }

    fn adoption(&self) -> Adoption {
        Adoption {
            key: self.key.clone(),
            uid: self.uid.map(str::to_string),
            seen: self.raw,
        }
    }

    /// Our annotations removed, nothing else (half-written or malformed),
    /// guarded on the version read: markers a pass wrote since are not
    /// stripped on a lagging cache.
    fn clean(&self) -> Option<Write> {
        let ops = annotation_ops(self.annotations, &Markers::CLEAR);
        if ops.is_empty() {
            return None;
        }
        let mut guarded: Vec<Value> = version_guard(self.resource_version).into_iter().collect();
        guarded.extend(ops);
        self.write(guarded)
    }

    /// The version test when this write rests on an absence: the value
    /// (`value_absent`) or the annotation map (markers are added as a new map).
    fn absence_guard(&self, value_absent: bool) -> Vec<Value> {
        if value_absent || self.annotations.is_none() {
            version_guard(self.resource_version).into_iter().collect()
        } else {
            Vec::new()
        }
    }

    fn test_value(&self) -> Vec<Value> {
        self.raw
            .map(|v| vec![json!({"op": "test", "path": self.path, "value": v})])
            .unwrap_or_default()
    }
}

/// A marked Deployment's value under an autoscaler whose minimum we raised
/// to `lifted_to` (the autoscaler lifts the Deployment to it by itself).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum UnderAutoscaler {
    /// At the raised minimum, lifted there from `baseline`: ours, whoever
    /// wrote it, so it goes back to `baseline` (the markers record it).
    Lifted { baseline: i32 },
    /// Back at its recorded baseline, below the raised minimum: someone
    /// lowered it, the autoscaler lifts it again; nothing new to record
    /// (recording it would alternate with the autoscaler: a write loop).
    AtBaseline,
    /// Anything else: the usual rules.
    Other,
}

/// Where a Deployment the autoscaler lifted to our minimum `t` goes back
/// to: where the autoscaler (its own minimum `their_min`) would hold the
/// `recorded` value without the surge; from a value it does not lift (0, or
/// at least `t`), its own minimum.
pub(crate) fn lift_baseline(recorded: i32, their_min: i32, t: i32) -> i32 {
    let from = if recorded > 0 && recorded < t {
        recorded
    } else {
        their_min
    };
    from.max(their_min).max(1).min(t)
}

/// `raised`: the autoscaler's markers (its minimum raised from
/// `raised.baseline` to `raised.surged_to`, which the autoscaler lifts the
/// Deployment to); `pending`: the value a failed adoption saw
/// ([`Facts::pending_on`]); `writer`: who set the Deployment's value.
fn under_autoscaler(
    raw: Option<i32>,
    m: Markers,
    raised: Option<Markers>,
    pending: Option<Option<i32>>,
    writer: ReplicasWriter,
) -> UnderAutoscaler {
    let Some(Markers {
        baseline: their_min,
        surged_to: t,
    }) = raised
    else {
        return UnderAutoscaler::Other;
    };
    // A value the autoscaler does not lift means someone set another value
    // after it, lifted before it was seen.
    let lift = |recorded: i32| UnderAutoscaler::Lifted {
        baseline: lift_baseline(recorded, their_min, t),
    };
    match pending {
        // Someone's value was seen and not yet recorded: lifted from it, if
        // the autoscaler lifts such a value (not 0: scaling disabled), to
        // where the autoscaler holds it without the surge (their minimum
        // lifts a value below it too: kept after the autoscaler goes).
        Some(Some(v)) if raw == Some(t) && v > 0 && v < t => lift(v),
        // A seen value the autoscaler does not lift (0, or at least our
        // minimum), and now our minimum not written by someone through the
        // Deployment: someone set another value after it, lifted before it
        // was seen; the seen value was never recorded, so from the markers.
        // Taken for someone's, the surge would stay forever.
        Some(_) if raw == Some(t) && writer != ReplicasWriter::Someone => lift(m.baseline),
        Some(_) => UnderAutoscaler::Other,
        // Already recorded at the raised minimum: ours (a surge), or theirs
        // (an adoption of that number).
        None if raw == Some(t) && m.surged_to == t && writer != ReplicasWriter::Someone => {
            if m.baseline < t {
                UnderAutoscaler::Lifted {
                    baseline: m.baseline,
                }
            } else {
                UnderAutoscaler::Other
            }
        }
        // Someone wrote our number themselves (managedFields): theirs.
        None if raw == Some(t) && writer == ReplicasWriter::Someone => UnderAutoscaler::Other,
        // The autoscaler lifted it, or no one else is recorded as writing
        // through the Deployment itself (surge::writer): a lift. Taken for
        // someone's value instead, the surge would stay forever.
        None if raw == Some(t) => lift(m.baseline),
        None if m.surged_to == t && raw == Some(m.baseline) && m.baseline < t => {
            UnderAutoscaler::AtBaseline
        }
        None => UnderAutoscaler::Other,
    }
}

fn key(kind: ObjKind, ns: &str, name: Option<&String>) -> ObjKey {
    ObjKey {
        kind,
        namespace: ns.to_string(),
        name: name.cloned().unwrap_or_default(),
    }
}

fn of_deployment<'a>(ns: &str, d: &'a Deployment) -> Surgeable<'a> {
    Surgeable {
        key: key(ObjKind::Deployment, ns, d.metadata.name.as_ref()),
        path: "/spec/replicas",
        raw: d.surge_value().1,
        default: 1,
        ceiling: None,
        annotations: d.metadata.annotations.as_ref(),
        resource_version: d.metadata.resource_version.as_deref(),
        uid: d.metadata.uid.as_deref(),
        writer: deployment_writer(d),
    }
}

/// [`replicas_writer`], except that replicas a surge was taken over at
/// (the take-over note still equal to them) are the surge's: the Go
/// project's client wrote them, and read as someone's they would be adopted
/// as the new baseline and kept for good.
pub fn deployment_writer(d: &Deployment) -> ReplicasWriter {
    let raw = d.spec.as_ref().and_then(|s| s.replicas);
    let taken_over = d
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(markers::TAKEN_OVER))
        .and_then(|v| v.trim().parse::<i32>().ok());
    if raw.is_some() && taken_over == raw {
        ReplicasWriter::Unknown
    } else {
        replicas_writer(&d.metadata)
    }
}

/// KEDA's own HPA is never ours to write: its operator makes it from the
/// ScaledObject, annotations included (`newHPAForScaledObject` copies them),
/// so our markers on a surged ScaledObject reappear on it. Read without
/// annotations, it never counts as marked: a surge under KEDA lives on the
/// ScaledObject, and a copy of its markers is no record of ours to adopt,
/// clean or revert (each such write KEDA would undo: a write loop).
fn of_hpa<'a>(ns: &str, h: &'a HorizontalPodAutoscaler) -> Surgeable<'a> {
    Surgeable {
        key: key(ObjKind::Hpa, ns, h.metadata.name.as_ref()),
        path: "/spec/minReplicas",
        raw: h.surge_value().1,
        default: 1,
        ceiling: h.spec.as_ref().map(|s| s.max_replicas),
        annotations: if hpa_is_kedas(h) {
            None
        } else {
            h.metadata.annotations.as_ref()
        },
        resource_version: h.metadata.resource_version.as_deref(),
        uid: h.metadata.uid.as_deref(),
        writer: writer(&h.metadata, Field::MinReplicas),
    }
}

fn of_scaled_object<'a>(ns: &str, so: &'a DynamicObject) -> Surgeable<'a> {
    Surgeable {
        key: key(ObjKind::ScaledObject, ns, so.metadata.name.as_ref()),
        path: "/spec/minReplicaCount",
        raw: so.surge_value().1,
        default: 0,
        // KEDA's default when unset.
        ceiling: Some(
            so.data["spec"]["maxReplicaCount"]
                .as_i64()
                .and_then(|v| i32::try_from(v).ok())
                .unwrap_or(100),
        ),
        annotations: so.metadata.annotations.as_ref(),
        resource_version: so.metadata.resource_version.as_deref(),
        uid: so.metadata.uid.as_deref(),
        writer: writer(&so.metadata, Field::MinReplicaCount),
    }
}

/// The durable signal: the newest blocked eviction any replica recorded
/// for the Deployment `name` (`lastEviction`): its age and pod. One of
/// another EvictionAutoScaler counts too, within `window`, when the denied
/// pod is this Deployment's, or when the PDB it is named after selects this
/// Deployment's pods: one PDB over several Deployments keeps one record,
/// which a block of another's pod overwrites (and that budget's blocks are
/// this surge's business too).
fn durable_signal(
    objs: &NsObjects,
    name: &str,
    wall_now: Option<Timestamp>,
    window: Duration,
) -> Option<(Duration, String)> {
    let now = wall_now?;
    // The PDBs whose selector takes this Deployment's template.
    let over = objs
        .deployment(name)
        .map(|d| crate::pdb::matching_pdbs(d, &objs.pdbs))
        .unwrap_or_default();
    let covers = |e: &crate::crd::EvictionAutoScaler| {
        over.iter().any(|p| p.metadata.name == e.metadata.name)
    };
    objs.eas
        .iter()
        .filter_map(|e| {
            let le = e.spec.last_eviction.as_ref()?;
            let t = le.eviction_time.as_ref()?;
            let secs = (now - t.0).get_seconds().max(0);
            let age = Duration::from_secs(secs.unsigned_abs());
            let ours = e.spec.target_name.eq_ignore_ascii_case(name)
                || (age <= window
                    && (objs.selecting_denied_pod(e).iter().any(|d| d == name) || covers(e)));
            ours.then(|| (age, le.pod_name.clone()))
        })
        .min_by_key(|(d, _)| *d)
}

fn min_since(a: Option<Duration>, b: Option<Duration>) -> Option<Duration> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// A rollout is in progress: the controller has not caught up with the
/// spec, or not every pod is of the newest ReplicaSet.
fn rolling_out(d: &Deployment) -> bool {
    let Some(st) = d.status.as_ref() else {
        return false;
    };
    st.observed_generation.unwrap_or(0) < d.metadata.generation.unwrap_or(0)
        || st.updated_replicas.unwrap_or(0) < st.replicas.unwrap_or(0)
}

/// The PDBs over a Deployment's pods: matched by its template, else by the
/// pods' own labels (a mesh's injected ones): a 429 under a PDB only the
/// pods' labels meet must still bring a surge, and its revert the budget
/// check.
fn budget_pdbs<'a>(dep: &Deployment, objs: &'a NsObjects) -> Vec<&'a Arc<PodDisruptionBudget>> {
    let pdbs = matching_pdbs(dep, &objs.pdbs);
    if pdbs.is_empty() {
        pdbs_over_pods(dep, &objs.pdbs, &objs.pods)
    } else {
        pdbs
    }
}

/// For a Deployment not stepped this pass (backing off, or in another
/// pass): how many of its running pods are on draining nodes, and the nodes
/// its running pods are on. By its selector (the PDB only read for whether
/// there is one): enough to keep its signal fresh. None without a PDB over
/// its pods: nothing is displaced then (see `plan_step`).
pub fn pods_on_draining(
    objs: &NsObjects,
    draining: &BTreeSet<String>,
    name: &str,
) -> (i32, BTreeSet<String>) {
    let Some(dep) = objs
        .deployments
        .iter()
        .find(|d| d.metadata.name.as_deref() == Some(name))
    else {
        return (0, BTreeSet::new());
    };
    if budget_pdbs(dep, objs).is_empty() {
        return (0, BTreeSet::new());
    }
    let selector = dep.spec.as_ref().map(|s| &s.selector);
    let mut on = 0i32;
    let mut nodes = BTreeSet::new();
    for p in objs
        .pods
        .iter()
        .filter(|p| !p.is_terminating() && !p.is_completed())
        .filter(|p| pdb_selects(selector, p.labels()) && p.of_deployment(name) != Some(false))
    {
        if let Some(n) = p.node() {
            if draining.contains(n) {
                on = on.saturating_add(1);
            }
            nodes.insert(n.to_string());
        }
    }
    (on, nodes)
}

/// Plans one step for the Deployment `name` of namespace `ns` (which may be
/// gone while autoscalers of ours still target it; `Kind/name` for
/// autoscalers of ours retargeted to another kind, see [`hpa_carrier`]).
/// The Deployment's own pods (its selector's, and the PDB's when there is
/// one), how many of them are Ready, and how many pods of other workloads
/// the budget counts (`Snapshot::other_pods`). `pdb_selector`: `None`
/// without a single PDB.
fn budget_pods(
    objs: &NsObjects,
    name: &str,
    dep_selector: Option<&LabelSelector>,
    pdb_selector: Option<Option<&LabelSelector>>,
) -> (Vec<PodState>, i32, i32) {
    // Compiled once for the pass over every pod; one that does not compile selects nothing.
    let dep_sel = Selector::compile(dep_selector).ok();
    let pdb_sel = pdb_selector.and_then(|s| Selector::compile(s).ok());
    let mut own = Vec::new();
    let (mut ready_pods, mut other_pods) = (0i32, 0i32);
    // Live pods of other Deployments, by name: counted among the others,
    // or among our own when our selector covers them (a canary's).
    let mut live_other: BTreeMap<&str, i32> = BTreeMap::new();
    let mut live_in_own: BTreeMap<&str, i32> = BTreeMap::new();
    for p in &objs.pods {
        let labels = p.labels();
        // A pod of another kind of workload the selector also covers (a
        // DaemonSet's of the same chart, left on a cordoned node by `drain
        // --ignore-daemonsets`) is not displaced from this Deployment: else
        // the surge would stay as long as that node stays cordoned.
        let by_dep = dep_sel
            .as_ref()
            .is_some_and(|s| s.selects_for_eviction(labels))
            && p.of_deployment(name) != Some(false);
        let by_pdb = pdb_sel
            .as_ref()
            .is_some_and(|s| s.selects_for_eviction(labels));
        let (completed, terminating) = (p.is_completed(), p.is_terminating());
        let live = !terminating && !completed;
        let other_deployment = p.deployment_name().filter(|d| *d != name);
        if by_dep && (pdb_selector.is_none() || by_pdb) {
            if p.is_ready() && !terminating {
                ready_pods += 1;
            }
            if let Some(d) = other_deployment.filter(|_| live && by_pdb) {
                *live_in_own.entry(d).or_default() += 1;
            }
            own.push(PodState {
                name: p.name().to_string(),
                node: p.node().map(str::to_string),
                terminating,
                completed,
            });
        } else if by_pdb && !by_dep && live {
            other_pods = other_pods.saturating_add(1);
            if let Some(d) = other_deployment {
                *live_other.entry(d).or_default() += 1;
            }
        } else if by_pdb && !by_dep && terminating && !completed {
            // A StatefulSet makes its pod again under the same name only
            // once the old one is gone (its whole grace period): it is
            // still counted, or the budget looks shut meanwhile; so is one
            // gone and not yet back (the view has it, `state_and_leaving`).
            // (A DaemonSet's pod is not evicted by a drain; counted alike.)
            if p.replaced_once_gone() {
                other_pods = other_pods.saturating_add(1);
            }
        }
    }
    // Another Deployment under the same PDB counts at its replicas, not
    // only at the pods it has now: in a drain its evicted pods are
    // replaced, and between an eviction and its replacement a count of pods
    // alone finds the budget shut for good (a false "impossible", seen on
    // CI with two Deployments under one minAvailable). Not when it cannot
    // make them (ReplicaFailure: a quota) or is being deleted.
    let Some(ps) = &pdb_sel else {
        return (own, ready_pods, other_pods);
    };
    for d in &objs.deployments {
        let Some(other) = d.metadata.name.as_deref().filter(|n| *n != name) else {
            continue;
        };
        let template = d
            .spec
            .as_ref()
            .and_then(|s| s.template.metadata.as_ref())
            .and_then(|m| m.labels.as_ref());
        let covered = |sel: Option<&Selector>| {
            template.is_some_and(|t| sel.is_some_and(|s| s.selects_for_eviction(t)))
        };
        if d.metadata.deletion_timestamp.is_some() || !covered(Some(ps)) {
            continue;
        }
        // Its pods our selector covers are in `own`, which the budget's
        // simulation does not count (it takes our replicas).
        let in_own = covered(dep_sel.as_ref());
        let live = if in_own { &live_in_own } else { &live_other };
        let live = live.get(other).copied().unwrap_or(0);
        let failing = d
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| {
                cs.iter()
                    .any(|c| c.type_ == "ReplicaFailure" && c.status == "True")
            });
        let scale = d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
        let expected = if failing { live } else { live.max(scale) };
        let add = if in_own { expected } else { expected - live };
        other_pods = other_pods.saturating_add(add.max(0));
    }
    (own, ready_pods, other_pods)
}

pub fn step(
    ns: &str,
    objs: &NsObjects,
    draining: &BTreeSet<String>,
    name: &str,
    facts: &Facts,
    settings: Settings,
    wall_now: Option<Timestamp>,
) -> Step {
    let mut out = plan_step(ns, objs, draining, name, facts, settings, wall_now);
    let rest = out
        .writes
        .split_off(out.cleaned.len().min(out.writes.len()));
    out.writes = fold_cleans(std::mem::take(&mut out.writes), rest);
    out
}

/// The cleaning of an object that the step writes again goes into that
/// later write: two writes planned from one read, each guarded on its
/// resourceVersion, could never both succeed (the first changes it). The
/// clean's ops come first, so the patch does what the two would in turn,
/// at once; the later write's removals of what the clean removes (the
/// adoption and take-over notes) are dropped, as a `remove` of a path
/// already gone fails the whole patch, on every retry.
fn fold_cleans(cleans: Vec<Write>, mut rest: Vec<Write>) -> Vec<Write> {
    let mut alone = Vec::new();
    for c in cleans {
        match rest.iter_mut().find(|w| w.target == c.target) {
            Some(w) => {
                let removed: Vec<&Value> = c
                    .ops
                    .iter()
                    .filter(|o| o["op"] == "remove")
                    .map(|o| &o["path"])
                    .collect();
                w.ops
                    .retain(|o| !(o["op"] == "remove" && removed.contains(&&o["path"])));
                let mut ops = c.ops;
                ops.append(&mut w.ops);
                w.ops = ops;
            }
            None => alone.push(c),
        }
    }
    // Cleans of objects not written otherwise go last: the executor stops
    // at a failed write, and one refused for good (KEDA's webhook refuses
    // every update of a ScaledObject while another HPA targets its
    // workload) would else hold the surge's own writes back with it.
    rest.extend(alone);
    rest
}

fn plan_step(
    ns: &str,
    objs: &NsObjects,
    draining: &BTreeSet<String>,
    name: &str,
    facts: &Facts,
    settings: Settings,
    wall_now: Option<Timestamp>,
) -> Step {
    let dep = objs.deployment(name);
    let hpas: Vec<&Arc<HorizontalPodAutoscaler>> = objs
        .hpas
        .iter()
        .filter(|h| hpa_carrier(h).as_deref() == Some(name))
        .collect();
    let sos: Vec<&Arc<DynamicObject>> = objs
        .scaled_objects
        .iter()
        .filter(|so| scaled_object_carrier(so).as_deref() == Some(name))
        .collect();
    let dep_s = dep.map(|d| of_deployment(ns, d));
    let hpa_s: Vec<Surgeable> = hpas.iter().map(|h| of_hpa(ns, h)).collect();
    let so_s: Vec<Surgeable> = sos.iter().map(|so| of_scaled_object(ns, so)).collect();
    // The ScaledObjects KEDA still acts through: not one paused whose HPA
    // KEDA deleted, which lifts nothing, nor one KEDA holds at its paused
    // count, whose minimum moves nothing (`scaled_object_hold`).
    let holds: Vec<KedaHold> = sos
        .iter()
        .map(|so| scaled_object_hold(so, objs.hpas.iter().map(AsRef::as_ref)))
        .collect();
    let acting_sos: Vec<&Surgeable> = so_s
        .iter()
        .zip(&holds)
        .filter(|(_, h)| **h == KedaHold::Acting)
        .map(|(s, _)| s)
        .collect();
    // One held by KEDA at its paused count: the HPA controller takes any
    // surge above that back (KEDA's HPA at that maximum), so none is made.
    let keda_held_at = holds
        .iter()
        .filter_map(|h| match h {
            KedaHold::HeldAt(n) => Some(*n),
            _ => None,
        })
        .min();
    let all: Vec<&Surgeable> = dep_s.iter().chain(&hpa_s).chain(&so_s).collect();

    // A plain Deployment's surge left by the Go project's older versions:
    // its baseline is written beside the lone marker (not cleaned away).
    let legacy = dep_s
        .as_ref()
        .filter(|_| hpas.is_empty() && sos.is_empty())
        .and_then(|d| markers::legacy_surge(name, d.annotations, d.raw, &objs.eas).map(|m| (d, m)));
    // The EvictionAutoScalers not listed yet: a lone marker may be one of
    // those surges, its baseline in a record not read; left as it is.
    let maybe_legacy = objs.eas_unknown
        && hpas.is_empty()
        && sos.is_empty()
        && dep_s
            .as_ref()
            .is_some_and(|d| markers::lone_marker_at(d.annotations, d.raw).is_some());
    // A ScaledObject beside a standalone HPA over the same Deployment: KEDA's
    // webhook refuses every update of it while that lasts, so its clean
    // waits (tried, it would fail the step, and the step's backoff would
    // slow every surge and revert of the Deployment).
    let so_frozen = !sos.is_empty() && hpas.iter().any(|h| !hpa_is_kedas(h));
    let (mut writes, cleaned): (Vec<Write>, Vec<ObjKey>) = all
        .iter()
        .filter(|o| Markers::any_present(o.annotations) && o.markers().is_none())
        .filter(|o| !((legacy.is_some() || maybe_legacy) && o.key.kind == ObjKind::Deployment))
        .filter(|o| !(so_frozen && o.key.kind == ObjKind::ScaledObject))
        .filter_map(|o| o.clean().map(|w| (w, o.key.clone())))
        .unzip();

    let marked = all.iter().any(|o| o.markers().is_some());
    let durable = durable_signal(objs, name, wall_now, settings.cooldown);
    let mut since = min_since(facts.since_signal, durable.as_ref().map(|(d, _)| *d));
    if marked {
        since = min_since(since, Some(facts.lead_for));
    }
    let mut denied = facts.denied.clone();
    if let Some((age, pod)) = durable {
        if age <= settings.cooldown && !pod.is_empty() {
            denied.insert(pod);
        }
    }
    let mut out = Step {
        namespace: ns.to_string(),
        deployment: name.to_string(),
        action: Action::None,
        writes: Vec::new(),
        displaced: 0,
        budget_open: false,
        on_draining: 0,
        pdb: None,
        active: None,
        reverted: false,
        adopting: Vec::new(),
        lifting: None,
        // KEDA's HPA left out: a copy its operator makes of the
        // ScaledObject's minimum, late (see `keda_lags`). So is a paused
        // ScaledObject's once KEDA deleted its HPA or holds the Deployment
        // at its paused count: nothing lifts the Deployment to it, and the
        // revert goes to the exact baseline.
        autoscaler_min: hpa_s
            .iter()
            .zip(&hpas)
            .filter(|(_, h)| !hpa_is_kedas(h))
            .map(|(o, _)| o.value())
            .chain(acting_sos.iter().map(|o| o.value()))
            .max(),
        nodes: BTreeSet::new(),
        legacy: None,
        cleaned,
    };

    // The early returns below still report the Deployment's pods on
    // draining nodes: a drain that goes on meanwhile keeps its signal fresh
    // (else the surge could go back with no cooldown once the step goes on).
    if maybe_legacy {
        out.writes = writes;
        (out.on_draining, out.nodes) = pods_on_draining(objs, draining, name);
        return out;
    }
    if let Some((d, m)) = legacy {
        writes.extend(d.complete_legacy(m));
        out.writes = writes;
        out.active = Some(m);
        out.legacy = Some(m);
        (out.on_draining, out.nodes) = pods_on_draining(objs, draining, name);
        return out;
    }

    // KEDA's ScaledObjects unknown (their watch cannot list, or is stale):
    // a Deployment under KEDA's HPA may carry its surge on a ScaledObject
    // not seen, and raising its replicas instead would fight KEDA. It waits
    // for the ScaledObjects, with its markers as they are; every other
    // Deployment goes on (one watch never strands every surge).
    if objs.keda_unknown && hpas.iter().any(|h| hpa_is_kedas(h)) {
        out.active = all.iter().find_map(|o| o.markers());
        (out.on_draining, out.nodes) = pods_on_draining(objs, draining, name);
        return out;
    }

    let (Some(dep), Some(dep_s)) = (dep, dep_s.as_ref()) else {
        // The Deployment is gone: its autoscalers' surges end after the cooldown.
        let quiet = since.is_none_or(|d| d >= settings.cooldown);
        for o in &all {
            if let Some(m) = o.markers() {
                if quiet {
                    writes.extend(o.revert(m, m.baseline.max(0)));
                    out.reverted = true;
                    out.action = Action::Revert {
                        baseline: m.baseline.max(0),
                    };
                } else {
                    out.active = Some(m);
                }
            }
        }
        out.writes = writes;
        return out;
    };

    // The budget: exactly one PDB over the Deployment's pods, or none to size for.
    let pdbs = budget_pdbs(dep, objs);
    let pdb: Option<&Arc<PodDisruptionBudget>> = match pdbs[..] {
        [p] => Some(p),
        _ => None,
    };
    out.pdb = pdb.and_then(|p| p.metadata.name.clone());
    // Displaced pods are those a PDB selects (section 5): with no PDB over
    // the Deployment's pods (the user's deleted, or ours gone with the
    // namespace's scope or the opt-out), nothing is displaced, so a node
    // left cordoned holds no surge and keeps no signal fresh: it goes back
    // once the cooldown has passed.
    // The nodes of its pods are left out too: the next pass would take a
    // node found draining that held them as a signal.
    let unbudgeted = pdbs.is_empty();
    let no_budget = BTreeSet::new();
    let draining = if unbudgeted { &no_budget } else { draining };
    if unbudgeted {
        denied.clear();
    }
    let default_spec = PodDisruptionBudgetSpec::default();
    let pdb_spec = pdb.map(|p| p.spec.as_ref().unwrap_or(&default_spec));
    let pdb_selector = pdb.and_then(|p| p.spec.as_ref().and_then(|s| s.selector.as_ref()));
    let dep_selector = dep.spec.as_ref().map(|s| &s.selector);
    let (own, ready_pods, other_pods) =
        budget_pods(objs, name, dep_selector, pdb.map(|_| pdb_selector));

    // The applier now: KEDA, else a standalone HPA, else the Deployment.
    // Not a paused ScaledObject whose HPA KEDA deleted or that KEDA holds
    // at its paused count (`acting_sos`): its minimum lifts nothing and is no baseline
    // for the Deployment (a Deployment held at 1 under a minimum of 3 was
    // surged to 4 to let one pod go). Markers a surge left on it before the
    // pause are reverted as another object's, below. While KEDA's HPA is
    // still there it lifts the Deployment, so the ScaledObject stays the
    // applier and the Deployment waits for that HPA (`keda_lags`).
    let keda = acting_sos.first().copied();
    let mut standalones = hpa_s.iter().zip(&hpas).filter(|(_, h)| !hpa_is_kedas(h));
    let standalone = standalones.next();
    // Two standalone HPAs: the HPA controller scales neither on metrics
    // (AmbiguousSelector), and which minimum to raise would hang on the
    // cache's order. A conflict, as a standalone HPA beside one KEDA holds:
    // each still bounds the Deployment.
    let second_hpa = standalones.next().is_some();
    let (applier, primary): (Applier, Option<&Surgeable>) = match (keda, standalone) {
        _ if second_hpa => (Applier::Conflict, None),
        (Some(_), Some(_)) => (Applier::Conflict, None),
        (None, Some(_)) if keda_held_at.is_some() => (Applier::Conflict, None),
        (Some(so), None) => (Applier::Keda { min: so.value() }, Some(so)),
        (None, Some((h, _))) => (Applier::Hpa { min: h.value() }, Some(h)),
        (None, None) => (Applier::Deployment, Some(dep_s)),
    };
    let spec = dep.spec.clone().unwrap_or_default();
    let strategy = spec.strategy.clone().unwrap_or_default();
    let mut snapshot = Snapshot {
        pdb_spec,
        pdb_disruptions_allowed: pdb
            .and_then(|p| p.status.as_ref())
            .map_or(0, |s| s.disruptions_allowed),
        replicas: dep_s.value(),
        max_surge: strategy.rolling_update.and_then(|r| r.max_surge),
        recreate: strategy.type_.as_deref() == Some("Recreate"),
        applier,
        applier_max: primary.and_then(|p| p.ceiling),
        keda_held_at,
        markers: primary.and_then(|p| p.markers()),
        // The note of an adoption on any object of this Deployment: the
        // episode is not surged again through another applier either (an
        // autoscaler's raised minimum would raise the Deployment itself).
        adopted_displaced: all
            .iter()
            .filter(|o| o.markers().is_some())
            .filter_map(|o| markers::adopted_displaced(o.annotations))
            .max(),
        adoption_pending: primary.is_some_and(|p| facts.pending_on(p).is_some()),
        set_by_someone: primary.is_some_and(|p| p.writer == ReplicasWriter::Someone),
        may_surge: objs.in_scope,
        pods: own,
        other_pods,
        ready_pods,
        rolling_out: rolling_out(dep),
        draining_nodes: draining.clone(),
        denied_pods: denied,
        since_last_signal: since,
        zero_surge_override: settings.zero_surge_override,
        cooldown: settings.cooldown,
    };
    let autoscaled = matches!(applier, Applier::Hpa { .. } | Applier::Keda { .. });
    // The minimum we raised, which the autoscaler lifts the Deployment to.
    // With KEDA and an HPA at once there is no applier, but a minimum
    // raised before the second came may have lifted the Deployment: the
    // one it stands at (else the highest). Without it the lift would be
    // adopted as someone's value and the surge's replicas kept for good.
    // Only when the HPA controller wrote the value: with both, neither
    // scales any more, so another writer (`kubectl scale`) set its own.
    // With no owner of the value (a scale from 0 leaves none, and a lift
    // through the scale subresource then records none either), only at
    // exactly a raised minimum: taken for someone's value, the lift would
    // be kept for good; a user's scale to exactly that number is the known
    // limit, as under one autoscaler.
    let conflict = matches!(applier, Applier::Conflict);
    let minimums = || {
        all.iter()
            .filter(|o| o.key.kind != ObjKind::Deployment)
            .filter_map(|o| o.markers())
    };
    // With both, the HPA controller lifts the Deployment to the higher
    // minimum (KEDA's HPA at the ScaledObject's raised one).
    let highest_raised = minimums().max_by_key(|m| m.surged_to).filter(|_| conflict);
    let raised = if autoscaled {
        snapshot.markers
    } else if conflict && dep_s.writer == ReplicasWriter::Autoscaler {
        minimums()
            .find(|m| dep_s.raw == Some(m.surged_to))
            .or(highest_raised)
    } else if conflict && dep_s.writer == ReplicasWriter::Unknown {
        minimums()
            .filter(|m| m.surged_to > m.baseline)
            .find(|m| dep_s.raw == Some(m.surged_to))
    } else {
        None
    };
    let lifted_to = raised.map(|m| m.surged_to);
    let dep_pending = facts.pending_on(dep_s);
    // The Deployment's markers, and how its value stands under them.
    let dep_state = dep_s.markers().map(|m| {
        (
            m,
            under_autoscaler(dep_s.raw, m, raised, dep_pending, dep_s.writer),
        )
    });
    // Someone else changed the replicas of a Deployment marked under an
    // autoscaler: its value is adopted in this step, so the episode is not
    // surged again through the autoscaler for as many displaced pods (a
    // raised minimum would lift the Deployment past their value).
    let someone_elses = dep_state.is_some_and(|(m, state)| {
        (dep_pending.is_some() || dep_s.raw != Some(m.surged_to) || dep_s.ours_rewritten(m))
            && state == UnderAutoscaler::Other
    });
    if autoscaled && (someone_elses || (dep_pending.is_some() && dep_state.is_none())) {
        let n = plan::displaced_count(&snapshot);
        snapshot.adopted_displaced = snapshot.adopted_displaced.max(Some(n));
    }
    // A surge cut between its two writes (the Deployment's done, the
    // autoscaler's failed, or a restart or a new leader in between; or an
    // autoscaler made mid-surge) while the budget blocks: the Deployment
    // runs our surge, which nothing holds. Planned from what it runs without
    // it, the autoscaler's minimum is raised too; planned from the surge,
    // nothing was, and an HPA acting on metrics could take the Deployment
    // down mid-drain, a value then adopted as someone's. Only the plan
    // reads it so: the scale-back's budget check below reads the replicas
    // that run (an HPA reverted, the Deployment waiting for SETTLE, is in
    // this state too).
    let cut = dep_state.map(|(m, _)| m).filter(|m| {
        autoscaled
            && snapshot.markers.is_none()
            && dep_s.raw == Some(m.surged_to)
            && m.plausible()
            && m.surged_to > m.baseline
            && dep_pending.is_none()
            && !dep_s.ours_rewritten(*m)
    });
    let running = snapshot.replicas;
    if let Some(m) = cut {
        snapshot.replicas = m.baseline.max(0);
    }
    // Copies of our markers someone else wrote (a manifest taken mid-surge,
    // applied again by its tool): a surge would be overwritten by the copy
    // at the tool's next sync and made again, a write loop. Said instead,
    // as a surge that cannot help.
    let foreign = all
        .iter()
        .find_map(|o| markers::foreign_writers(o.annotations));
    let action = match (plan::plan(&snapshot), foreign) {
        (Action::Surge { .. }, Some(by)) => Action::Impossible {
            reason: format!(
                "its surge markers were written by someone else ({by}), not by a surge of ours \
                 (a manifest taken during a surge?): no surge while they are there; remove them \
                 from what sets them"
            ),
        },
        (a, _) => a,
    };
    snapshot.replicas = running;
    out.displaced = plan::displaced_count(&snapshot);
    out.budget_open = snapshot.pdb_disruptions_allowed > 0;
    out.on_draining = snapshot
        .pods
        .iter()
        .filter(|p| !p.terminating && !p.completed)
        .filter(|p| p.node.as_ref().is_some_and(|n| draining.contains(n)))
        .count()
        .try_into()
        .unwrap_or(i32::MAX);
    if !unbudgeted {
        out.nodes = snapshot
            .pods
            .iter()
            .filter(|p| !p.terminating && !p.completed)
            .filter_map(|p| p.node.clone())
            .collect();
    }
    out.active = snapshot.markers;
    // A Deployment the autoscaler lifted to our raised minimum (also one
    // whose adoption of a lower value failed) is recorded as ours from its
    // baseline before anything else of this Deployment is written: a top-up
    // would otherwise adopt the lift as someone's value, and a revert of the
    // autoscaler leave the Deployment lifted with no baseline to go back to.
    let lifted = dep_state.and_then(|(m, state)| match (state, lifted_to) {
        (UnderAutoscaler::Lifted { baseline }, Some(t)) => {
            let l = Markers {
                baseline,
                surged_to: t,
            };
            (m != l || dep_pending.is_some()).then_some(l)
        }
        _ => None,
    });
    // A lift seen under a raised minimum whose record failed, and the
    // autoscaler (or its markers) gone before the retry: the value is still
    // the lift (no one wrote it through the Deployment since), so it is
    // recorded now; taken for someone's value, the surge's extra replicas
    // would stay. Only this replica's memory knows it (lost on restart).
    let lifted = lifted.or_else(|| {
        let l = facts.lift_pending?;
        (raised.is_none()
            && dep_s.raw == Some(l.surged_to)
            && dep_s.writer != ReplicasWriter::Someone
            && dep_s.markers().is_some_and(|m| m != l))
        .then_some(l)
    });
    // A Deployment with no markers below our raised minimum: made again
    // mid-surge (its markers went with the old object), or an autoscaler
    // retargeted to it. The autoscaler would lift it to our minimum within
    // its sync period, a lift no HPA without metrics ever takes back and
    // one that, once made, cannot be told from the HPA holding the
    // Deployment at our minimum on metrics (docs/how-it-works.md). So its
    // own value is recorded first and the lift made by us, unless the
    // minimum goes back in this step (a surge writes the Deployment itself).
    let lifted = lifted.or_else(|| {
        let r = raised.filter(|_| autoscaled).or(highest_raised)?;
        let v = dep_s.value();
        (dep_state.is_none()
            && dep_pending.is_none()
            && r.plausible()
            && 0 < v
            && v < r.surged_to
            && !matches!(
                action,
                Action::Revert { .. } | Action::AdoptUserChange { .. } | Action::Surge { .. }
            ))
        .then_some(Markers {
            baseline: v,
            surged_to: r.surged_to,
        })
    });
    // A surged Deployment the HPA controller took down to the maxReplicas
    // of an HPA over it (one made or edited mid-surge), still above its
    // baseline: the autoscaler's bound, not someone's value. Recorded as
    // our surge at that number, so it goes back to its baseline after the
    // drain; adopted, the clamp would be kept for good (no HPA without
    // metrics takes it down). Only at a maximum: a scale-down on metrics
    // is the HPA's own number, which lowering would only take away for a
    // sync. In a KEDA + HPA conflict too: the HPA controller still checks
    // the bounds (a lift to a raised minimum is read above). Its writer is
    // read as for a lift: not someone through the Deployment itself (after
    // a scale to 0, no owner of the value is recorded at all).
    let lifted = lifted.or_else(|| {
        let (m, _) = dep_state?;
        let v = dep_s.raw?;
        let maxima = hpas
            .iter()
            .filter_map(|h| h.spec.as_ref().map(|s| s.max_replicas));
        (dep_pending.is_none() && m.clamped_at(v, dep_s.writer != ReplicasWriter::Someone, maxima))
            .then_some(Markers {
                baseline: m.baseline,
                surged_to: v,
            })
    });
    if let Some(l) = lifted {
        writes.extend(dep_s.surge(l.baseline, l.surged_to));
        out.lifting = Some(l);
        out.writes = writes;
        return out;
    }
    let mut dep_written = false;
    if let Some(p) = primary {
        match action {
            Action::Surge {
                baseline,
                target,
                kind,
            } => {
                // An autoscaler without metrics does not scale on load, so
                // raise the Deployment too, unless someone else holds its
                // replicas (a GitOps tool): their value is adopted, once.
                // The Deployment is written first: once the new minimum is
                // in place the autoscaler raises the Deployment itself, and
                // a raise done by it, not by us, would carry no baseline to
                // go back to (the executor stops at a failed write, so a cut
                // surge leaves a marked Deployment, reverted like any other).
                if autoscaled && dep_s.value() < target {
                    let adopted = markers::adopted_displaced(dep_s.annotations);
                    let pending = dep_pending.is_some();
                    match dep_state {
                        Some((_, UnderAutoscaler::AtBaseline)) => {}
                        Some((m, _))
                            if dep_s.raw != Some(m.surged_to)
                                || pending
                                || dep_s.ours_rewritten(m) =>
                        {
                            writes.extend(dep_s.adopt(dep_s.value(), out.displaced));
                            out.adopting.push(dep_s.adoption());
                        }
                        Some((m, _)) if adopted.is_none_or(|n| out.displaced > n) => {
                            writes.extend(dep_s.surge(m.baseline, target));
                        }
                        Some(_) => {}
                        None => writes.extend(dep_s.surge(dep_s.value(), target)),
                    }
                }
                // A resume finds the applier's value and markers in place.
                if kind != plan::SurgeKind::Resume {
                    writes.extend(p.surge(baseline, target));
                }
                dep_written = autoscaled;
                out.active = Some(Markers {
                    baseline,
                    surged_to: target,
                });
            }
            Action::AdoptUserChange {
                new_baseline,
                displaced,
            } => {
                writes.extend(p.adopt(new_baseline, displaced));
                out.adopting.push(p.adoption());
                out.active = Some(Markers {
                    baseline: new_baseline,
                    surged_to: new_baseline,
                });
            }
            Action::Revert { baseline } => {
                if let Some(m) = p.markers() {
                    writes.extend(p.revert(m, baseline));
                    out.reverted = true;
                }
                out.active = None;
            }
            _ => {}
        }
    }

    // Every other object with markers: back once the drain is over.
    let primary_key = primary.map(|p| &p.key);
    let over = plan::drain_over(&snapshot) || matches!(action, Action::Revert { .. });
    // The Deployment's scale-back, decided once every autoscaler's write is known.
    let mut lower = None;
    for o in &all {
        if Some(&o.key) == primary_key || (dep_written && o.key == dep_s.key) {
            continue;
        }
        let Some(m) = o.markers() else { continue };
        // A user's change seen here whose adoption did not persist.
        let seen = facts.pending_on(o);
        let pending = seen.is_some();
        if pending && over {
            writes.extend(o.clean());
            out.reverted = true;
            continue;
        }
        if !over {
            let state = match o.key.kind {
                ObjKind::Deployment => under_autoscaler(o.raw, m, raised, seen, o.writer),
                _ => UnderAutoscaler::Other,
            };
            if state == UnderAutoscaler::AtBaseline {
                out.active = out.active.or(Some(m));
                continue;
            }
            if o.raw != Some(m.surged_to) || pending || o.ours_rewritten(m) {
                out.adopting.push(o.adoption());
                // Someone else's value: persist it as the baseline now, so a
                // later return to our number is not mistaken for ours.
                writes.extend(o.adopt(o.value(), out.displaced));
            }
            out.active = out.active.or(Some(m));
            continue;
        }
        if o.ours_rewritten(m) {
            // Their value: kept, only our markers go.
            writes.extend(o.clean());
            out.reverted = true;
        } else if o.key.kind == ObjKind::Deployment {
            // Exactly the recorded baseline (section 6), never 0 by us; an
            // autoscaler above it raises the Deployment itself.
            let restore = m.baseline.max(1);
            // The gate guards a scale-down; removing markers from a value
            // someone else set lowers nothing.
            let lowers = o.raw == Some(m.surged_to) && restore < m.surged_to;
            if !lowers && out.autoscaler_min.is_none() {
                writes.extend(o.revert(m, restore));
                out.reverted = true;
            } else if !lowers {
                // Only the markers go, but under an autoscaler not in the
                // step that reverts its minimum, nor before that minimum has
                // stood: until then it may lift the Deployment to our old
                // minimum, and with no markers left nothing would lower it.
                lower = Some((o, m, restore));
            } else if plan::safe_to_scale_back(&snapshot, m.surged_to, restore) {
                lower = Some((o, m, restore));
            } else {
                out.active = out.active.or(Some(m));
            }
        } else {
            writes.extend(o.revert(m, m.baseline.max(0)));
            out.reverted = true;
        }
    }
    if let Some((o, m, restore)) = lower {
        // Under autoscalers, only once their minimum has stood (SETTLE),
        // with none of them written in this step.
        let written = writes.iter().any(|w| w.target.kind != ObjKind::Deployment);
        // KEDA's operator has not yet copied the ScaledObject's minimum onto
        // its HPA: the HPA controller would lift the Deployment back to the
        // old one (with no markers left to lower it again). Not one KEDA
        // holds at its paused count: that HPA never follows the minimum.
        let keda_lags = acting_sos.first().is_some_and(|so| {
            hpa_s.iter().zip(&hpas).any(|(o, h)| {
                hpa_is_kedas(h) && kedas_hpa_lags(i64::from(o.value()), i64::from(so.value()))
            })
        });
        let stood = out.autoscaler_min.is_none_or(|min| {
            !written
                && !keda_lags
                && facts
                    .autoscaler_min
                    .is_some_and(|(v, d)| v == min && d >= SETTLE)
        });
        if stood {
            // Not below the autoscaler's own minimum once none of ours is
            // raised (someone's, adopted): it would lift the Deployment
            // straight back, a pod deleted and made again for nothing. Not
            // from 0 (an autoscaler leaves a Deployment at 0 alone). With
            // KEDA and an HPA at once neither scales on metrics, but each
            // HPA still lifts the Deployment to its minimum (the HPA
            // controller checks the bounds before the selector it finds
            // ambiguous): KEDA's HPA counts too.
            let floor = match raised {
                _ if conflict && m.baseline > 0 => hpa_s
                    .iter()
                    .map(|h| h.value())
                    .max()
                    .unwrap_or(0)
                    .min(m.surged_to),
                None if autoscaled && m.baseline > 0 => {
                    out.autoscaler_min.unwrap_or(0).min(m.surged_to)
                }
                _ => 0,
            };
            writes.extend(o.revert(m, restore.max(floor)));
            out.reverted = true;
        } else {
            out.active = out.active.or(Some(m));
        }
    }
    out.action = action;
    out.writes = writes;
    out
}

/// RFC 6902 path of an annotation (for tests and the model).
pub fn annotation_path(key: &str) -> String {
    format!("/metadata/annotations/{}", escape(key))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::SlimPod;
    use crate::cache::{PodWire, SlimCondition, SlimPodSpec, SlimPodStatus};
    use k8s_openapi::api::apps::v1::DeploymentSpec;
    use k8s_openapi::api::autoscaling::v2::{
        CrossVersionObjectReference, HorizontalPodAutoscalerSpec,
    };
    use k8s_openapi::api::core::v1::PodTemplateSpec;
    use k8s_openapi::api::policy::v1::PodDisruptionBudgetStatus;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

    fn sel() -> LabelSelector {
        LabelSelector {
            match_labels: Some([("app".to_string(), "web".to_string())].into()),
            ..Default::default()
        }
    }
    fn ann(m: Option<(i32, i32)>) -> Option<BTreeMap<String, String>> {
        m.map(|(b, s)| {
            Markers {
                baseline: b,
                surged_to: s,
            }
            .to_annotations()
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect()
        })
    }
    fn dep(replicas: i32, markers: Option<(i32, i32)>) -> Arc<Deployment> {
        Arc::new(Deployment {
            metadata: ObjectMeta {
                name: Some("web".into()),
                namespace: Some("ns".into()),
                annotations: ann(markers),
                ..Default::default()
            },
            spec: Some(DeploymentSpec {
                replicas: Some(replicas),
                selector: sel(),
                template: PodTemplateSpec {
                    metadata: Some(ObjectMeta {
                        labels: sel().match_labels,
                        ..Default::default()
                    }),
                    spec: None,
                },
                ..Default::default()
            }),
            status: None,
        })
    }
    fn pods(n: usize, node: &str) -> Vec<Arc<SlimPod>> {
        (0..n)
            .map(|i| ready_pod(&format!("web-{i}"), node, web_labels(None), None))
            .collect()
    }
    fn blocking_pdb(min: i32) -> Arc<PodDisruptionBudget> {
        Arc::new(PodDisruptionBudget {
            metadata: ObjectMeta {
                name: Some("web".into()),
                namespace: Some("ns".into()),
                ..Default::default()
            },
            spec: Some(PodDisruptionBudgetSpec {
                min_available: Some(IntOrString::Int(min)),
                selector: Some(sel()),
                ..Default::default()
            }),
            status: Some(PodDisruptionBudgetStatus {
                disruptions_allowed: 0,
                ..Default::default()
            }),
        })
    }
    fn scaled_object(min: i64, markers: Option<(i32, i32)>) -> Arc<DynamicObject> {
        let mut so = crate::surge::view::scaled_object_of("ns", "web", "web", min);
        so.metadata.annotations = ann(markers);
        Arc::new(so)
    }
    fn hpa() -> Arc<HorizontalPodAutoscaler> {
        Arc::new(HorizontalPodAutoscaler {
            metadata: ObjectMeta {
                name: Some("web-hpa".into()),
                namespace: Some("ns".into()),
                ..Default::default()
            },
            spec: Some(HorizontalPodAutoscalerSpec {
                min_replicas: Some(2),
                max_replicas: 9,
                scale_target_ref: CrossVersionObjectReference {
                    kind: "Deployment".into(),
                    name: "web".into(),
                    api_version: None,
                },
                ..Default::default()
            }),
            status: None,
        })
    }
    /// The drain is over and the cooldown long passed.
    fn quiet() -> Facts {
        Facts {
            since_signal: Some(Duration::from_secs(600)),
            lead_for: Duration::from_secs(600),
            ..Default::default()
        }
    }
    /// The drain over, the autoscaler's minimum `min` stood for SETTLE.
    fn stood_at(min: i32) -> Facts {
        Facts {
            autoscaler_min: Some((min, SETTLE)),
            ..quiet()
        }
    }
    /// In the cooldown: a signal 5 s ago.
    fn cooling() -> Facts {
        Facts {
            since_signal: Some(Duration::from_secs(5)),
            ..quiet()
        }
    }
    /// `d` (its replicas' worth of Ready pods on n1) under `hpas`, its PDB
    /// at minAvailable `min`.
    fn world_of(d: Deployment, hpas: Vec<Arc<HorizontalPodAutoscaler>>, min: i32) -> NsObjects {
        let n = d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
        NsObjects {
            deployments: vec![Arc::new(d)],
            hpas,
            pods: pods(usize::try_from(n).unwrap_or(0), "n1"),
            pdbs: vec![blocking_pdb(min)],
            in_scope: true,
            ..Default::default()
        }
    }
    fn run(objs: &NsObjects, draining: &[&str], facts: &Facts) -> Step {
        let draining: BTreeSet<String> = draining.iter().map(|s| s.to_string()).collect();
        let settings = Settings {
            cooldown: Duration::from_secs(60),
            zero_surge_override: None,
        };
        step("ns", objs, &draining, "web", facts, settings, None)
    }
    /// `hpa()` with its minimum raised by us from `from` to `to`.
    fn raised_hpa(from: i32, to: i32) -> Arc<HorizontalPodAutoscaler> {
        let mut h = (*hpa()).clone();
        h.metadata.annotations = ann(Some((from, to)));
        if let Some(spec) = h.spec.as_mut() {
            spec.min_replicas = Some(to);
        }
        Arc::new(h)
    }
    fn targets(s: &Step) -> Vec<(ObjKind, String)> {
        s.writes
            .iter()
            .map(|w| (w.target.kind, w.target.name.clone()))
            .collect()
    }
    fn op_value(w: &Write, op: &str, path: &str) -> Option<Value> {
        w.ops
            .iter()
            .find(|o| o["op"] == op && o["path"] == path)
            .map(|o| o["value"].clone())
    }
    /// The ScaledObject's minimum and the Deployment's replicas a step sets.
    fn so_and_deployment_set_to(s: &Step) -> (Option<Value>, Option<Value>) {
        let value = |kind: ObjKind, path: &str| {
            s.writes
                .iter()
                .find(|w| w.target.kind == kind)
                .and_then(|w| op_value(w, "replace", path))
        };
        (
            value(ObjKind::ScaledObject, "/spec/minReplicaCount"),
            value(ObjKind::Deployment, "/spec/replicas"),
        )
    }

    /// A user's PDB over a label the pods carry and their template lacks (a
    /// service mesh injects one): the apiserver blocks evictions under it,
    /// so the step sizes the surge by it, and the revert checks it.
    #[test]
    fn a_pdb_over_labels_only_the_pods_carry_is_the_deployments_budget() {
        // A pod of `owner` (kind, name) with the mesh's label.
        let of = |p: &Arc<SlimPod>, owner: (&str, &str)| {
            let labels = [
                ("app", "web"),
                ("mesh", "web"),
                ("pod-template-hash", "5d8f"),
            ]
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .into();
            ready_pod(p.name(), p.node().unwrap_or_default(), labels, Some(owner))
        };
        let mesh = |p: &Arc<SlimPod>| of(p, ("ReplicaSet", "web-5d8f"));
        let mut user = (*blocking_pdb(3)).clone();
        user.metadata.name = Some("mesh-budget".into());
        user.spec.as_mut().unwrap().selector = Some(LabelSelector {
            match_labels: Some([("mesh".to_string(), "web".to_string())].into()),
            ..Default::default()
        });
        let user = Arc::new(user);
        let objs = NsObjects {
            deployments: vec![dep(3, None)],
            pods: pods(3, "n1").iter().map(mesh).collect(),
            pdbs: vec![user.clone()],
            in_scope: true,
            ..Default::default()
        };
        let s = run(&objs, &["n1"], &Facts::default());
        assert_eq!(s.pdb.as_deref(), Some("mesh-budget"));
        assert!(matches!(s.action, Action::Surge { .. }), "{:?}", s.action);

        // The same labels on another workload's pods (a StatefulSet of the
        // same chart, which the Deployment's selector covers too): that PDB
        // is not the Deployment's.
        let other = NsObjects {
            deployments: vec![dep(3, None)],
            pods: pods(3, "n1")
                .iter()
                .map(|p| of(p, ("StatefulSet", "web")))
                .collect(),
            pdbs: vec![user.clone()],
            in_scope: true,
            ..Default::default()
        };
        assert_eq!(run(&other, &["n1"], &Facts::default()).pdb, None);
        // Mid-surge the same PDB is the one the revert's budget check reads.
        let objs = NsObjects {
            deployments: vec![dep(6, Some((3, 6)))],
            pods: pods(6, "n2").iter().map(mesh).collect(),
            pdbs: vec![user],
            in_scope: true,
            ..Default::default()
        };
        assert_eq!(
            run(&objs, &[], &quiet()).pdb.as_deref(),
            Some("mesh-budget")
        );
    }

    /// A surge cut between its writes (maxSurge 25% of the HPA's minimum 2:
    /// to 3): the Deployment's (first) done, the HPA's not. The next step
    /// raises the HPA's minimum to the surge, so that an HPA acting on
    /// metrics does not take the Deployment down mid-drain; the Deployment
    /// is not written again.
    #[test]
    fn a_surge_cut_after_the_deployments_write_raises_the_minimum_next() {
        let objs = NsObjects {
            deployments: vec![dep(3, Some((2, 3)))],
            hpas: vec![hpa()],
            pods: pods(3, "n1"),
            pdbs: vec![blocking_pdb(2)],
            in_scope: true,
            ..Default::default()
        };
        let s = run(&objs, &["n1"], &Facts::default());
        assert!(
            matches!(
                s.action,
                Action::Surge {
                    baseline: 2,
                    target: 3,
                    ..
                }
            ),
            "{:?}",
            s.action
        );
        assert_eq!(targets(&s), vec![(ObjKind::Hpa, "web-hpa".into())]);
        let w = &s.writes[0];
        assert_eq!(op_value(w, "replace", "/spec/minReplicas"), Some(json!(3)));
        // The next step: both in place, nothing more to write.
        let objs = NsObjects {
            hpas: vec![raised_hpa(2, 3)],
            ..objs
        };
        let s = run(&objs, &["n1"], &Facts::default());
        assert!(s.writes.is_empty(), "{:?}", targets(&s));
        // The surge's pods Ready already, the budget with room: nothing
        // more is needed (and a tool that strips our markers from the HPA
        // with each sync is not fought).
        let mut room = (*blocking_pdb(2)).clone();
        room.status.as_mut().unwrap().disruptions_allowed = 1;
        let cut = NsObjects {
            hpas: vec![hpa()],
            pdbs: vec![Arc::new(room)],
            ..objs.clone()
        };
        assert!(run(&cut, &["n1"], &Facts::default()).writes.is_empty());
        // Drain over: the minimum goes back first; the Deployment after.
        let s = run(&objs, &[], &quiet());
        assert_eq!(s.action, Action::Revert { baseline: 2 });
        assert_eq!(targets(&s), vec![(ObjKind::Hpa, "web-hpa".into())]);
    }

    /// The HPA reverted, the Deployment (marked at its surge) waiting for
    /// SETTLE: the state of a cut surge, but its scale-back still checks the
    /// budget against the replicas that run. A rollout in progress with
    /// fewer Ready pods than the baseline and no disruption allowed: the
    /// Deployment is not lowered yet.
    #[test]
    fn the_lower_after_an_autoscalers_revert_checks_the_budget() {
        let mut rolling = (*dep(3, Some((2, 3)))).clone();
        rolling.metadata.generation = Some(2);
        rolling.status = Some(k8s_openapi::api::apps::v1::DeploymentStatus {
            observed_generation: Some(2),
            replicas: Some(3),
            updated_replicas: Some(1),
            ..Default::default()
        });
        let objs = NsObjects {
            deployments: vec![Arc::new(rolling)],
            hpas: vec![hpa()],
            pods: pods(1, "n2"),
            pdbs: vec![blocking_pdb(2)],
            in_scope: true,
            ..Default::default()
        };
        let facts = stood_at(2);
        let s = run(&objs, &[], &facts);
        assert!(s.writes.is_empty(), "{:?}", targets(&s));
        assert!(s.active.is_some());
        // The rollout done: lowered.
        let objs = NsObjects {
            deployments: vec![dep(3, Some((2, 3)))],
            ..objs
        };
        let s = run(&objs, &[], &facts);
        assert_eq!(targets(&s), vec![(ObjKind::Deployment, "web".into())]);
    }

    #[test]
    fn pdb_deleted_mid_surge_is_reverted() {
        let objs = NsObjects {
            deployments: vec![dep(6, Some((3, 6)))],
            pods: pods(6, "n1"),
            in_scope: true,
            ..Default::default()
        };
        let s = run(&objs, &[], &quiet());
        assert_eq!(s.action, Action::Revert { baseline: 3 });
        assert_eq!(targets(&s), vec![(ObjKind::Deployment, "web".into())]);
        let w = &s.writes[0];
        assert_eq!(op_value(w, "test", "/spec/replicas"), Some(json!(6)));
        assert_eq!(op_value(w, "replace", "/spec/replicas"), Some(json!(3)));
    }

    /// Displaced pods are those a PDB selects: with the PDB gone, a node
    /// left cordoned (quarantined, a stuck autoscaler's taint) holds no
    /// surge and keeps no signal fresh; with it, the surge waits.
    /// A Deployment whose markers the caches found to be someone else's
    /// copy (they leave the note instead): its pods on a cordoned node
    /// would surge it, but the copy would overwrite the surge at the tool's
    /// next sync. No write; said as a surge that cannot help, naming who.
    #[test]
    fn copies_of_our_markers_written_by_someone_else_hold_the_surge_and_say_why() {
        let mut d = Deployment::clone(&dep(3, None));
        d.metadata
            .annotations
            .get_or_insert_with(BTreeMap::new)
            .insert(markers::FOREIGN.into(), "argocd-controller".into());
        let objs = NsObjects {
            deployments: vec![Arc::new(d)],
            pods: pods(3, "n1"),
            pdbs: vec![blocking_pdb(3)],
            in_scope: true,
            ..Default::default()
        };
        let s = run(&objs, &["n1"], &quiet());
        assert!(s.writes.is_empty(), "{:?}", s.writes);
        match &s.action {
            Action::Impossible { reason } => assert!(
                reason.contains("written by someone else (argocd-controller)"),
                "{reason}"
            ),
            other => panic!("want Impossible, got {other:?}"),
        }
        assert_eq!(s.on_draining, 3, "the drain's signal is still counted");
        // Without the note, the same Deployment surges.
        let objs = NsObjects {
            deployments: vec![dep(3, None)],
            ..objs
        };
        assert!(matches!(
            run(&objs, &["n1"], &quiet()).action,
            Action::Surge { .. }
        ));
    }

    #[test]
    fn a_node_left_cordoned_holds_no_surge_without_a_pdb() {
        let mut objs = NsObjects {
            deployments: vec![dep(6, Some((3, 6)))],
            pods: pods(6, "n1"),
            pdbs: vec![blocking_pdb(3)],
            in_scope: true,
            ..Default::default()
        };
        let held = run(&objs, &["n1"], &quiet());
        let draining = ["n1".to_string()].into();
        assert_eq!(pods_on_draining(&objs, &draining, "web").0, 6);
        assert!(
            matches!(
                held.action,
                Action::Wait(plan::Wait::Draining { displaced: 6 })
            ),
            "{:?}",
            held.action
        );
        assert_eq!(
            held.on_draining, 6,
            "the cordoned node keeps the signal fresh"
        );
        assert_eq!(held.nodes, ["n1".to_string()].into());
        objs.pdbs.clear();
        let mut facts = quiet();
        facts.denied = ["web-0".to_string()].into();
        let s = run(&objs, &["n1"], &facts);
        assert_eq!(s.action, Action::Revert { baseline: 3 });
        assert_eq!((s.displaced, s.on_draining), (0, 0));
        // Nor does the next pass take the cordoned node as a signal for it,
        // nor a pass that skips it (backing off after a failed write).
        assert!(s.nodes.is_empty(), "{:?}", s.nodes);
        let draining = ["n1".to_string()].into();
        assert_eq!(
            pods_on_draining(&objs, &draining, "web"),
            (0, BTreeSet::new())
        );
        // Within the cooldown it still waits for it.
        let recent = Facts {
            since_signal: Some(Duration::from_secs(5)),
            ..facts.clone()
        };
        assert!(matches!(
            run(&objs, &["n1"], &recent).action,
            Action::Wait(plan::Wait::Cooldown { .. })
        ));
        // Restarted (or a new leader) at that step, no signal in memory:
        // its markers count as a signal at the lead's start, so it waits a
        // cooldown from there, then goes back all the same.
        let restarted = Facts {
            since_signal: None,
            lead_for: Duration::from_secs(2),
            ..facts.clone()
        };
        assert!(matches!(
            run(&objs, &["n1"], &restarted).action,
            Action::Wait(plan::Wait::Cooldown { .. })
        ));
        let later = Facts {
            since_signal: None,
            lead_for: Duration::from_secs(61),
            ..facts
        };
        assert_eq!(
            run(&objs, &["n1"], &later).action,
            Action::Revert { baseline: 3 }
        );
    }

    /// Our surged number written by someone else through the Deployment
    /// (changed away and back between two of our reads) is theirs: adopted,
    /// not reverted. Written by us, or by an earlier build of ours (no
    /// User-Agent: "unknown"), or through the scale subresource, it is ours.
    #[test]
    fn our_number_written_by_someone_else_is_theirs() {
        use crate::surge::writer::replicas_entry;
        let world = |manager: &str, sub: Option<&str>| {
            let mut d = (*dep(6, Some((3, 6)))).clone();
            d.metadata.managed_fields = Some(vec![replicas_entry(manager, sub)]);
            NsObjects {
                deployments: vec![Arc::new(d)],
                pods: pods(6, "n1"),
                in_scope: true,
                ..Default::default()
            }
        };
        let s = run(&world("kubectl-patch", None), &[], &quiet());
        assert_eq!(
            s.action,
            Action::AdoptUserChange {
                new_baseline: 6,
                displaced: 0
            }
        );
        for (manager, sub) in [
            (crate::names::MANAGER, None),
            ("unknown", None),
            ("kubectl", Some("scale")),
        ] {
            let s = run(&world(manager, sub), &[], &quiet());
            assert_eq!(s.action, Action::Revert { baseline: 3 }, "{manager}");
        }
    }

    #[test]
    fn namespace_out_of_scope_mid_surge_is_reverted() {
        let objs = NsObjects {
            deployments: vec![dep(6, Some((3, 6)))],
            pods: pods(6, "n1"),
            pdbs: vec![blocking_pdb(3)],
            in_scope: false,
            ..Default::default()
        };
        assert_eq!(
            run(&objs, &[], &quiet()).action,
            Action::Revert { baseline: 3 }
        );
        // ...but not while pods are still displaced, and nothing new starts.
        assert_eq!(
            run(&objs, &["n1"], &quiet()).action,
            Action::Wait(plan::Wait::Draining { displaced: 6 })
        );
        let idle = NsObjects {
            deployments: vec![dep(3, None)],
            ..objs
        };
        assert!(run(&idle, &["n1"], &quiet()).writes.is_empty());
    }

    #[test]
    fn keda_plus_hpa_keeps_the_markers_and_reverts_them() {
        // A KEDA surge in place when a standalone HPA appears (a conflict).
        let objs = NsObjects {
            deployments: vec![dep(4, Some((2, 4)))],
            scaled_objects: vec![scaled_object(4, Some((2, 4)))],
            hpas: vec![hpa()],
            pods: pods(4, "n1"),
            pdbs: vec![blocking_pdb(2)],
            in_scope: true,
            ..Default::default()
        };
        let draining = run(&objs, &["n1"], &quiet());
        assert!(matches!(draining.action, Action::Impossible { .. }));
        assert!(draining.writes.is_empty(), "markers kept while displaced");
        assert!(draining.active.is_some());
        // The drain over: the ScaledObject first (KEDA's webhook may refuse
        // it while the conflict lasts: then everything waits, as KEDA's
        // HPA, at the raised minimum, would lift the Deployment back).
        let over = run(&objs, &[], &quiet());
        assert_eq!(targets(&over), vec![(ObjKind::ScaledObject, "web".into())]);
        assert!(over.reverted);
        // The Deployment once the minimum (the higher of the two) has stood.
        let reverted = NsObjects {
            scaled_objects: vec![scaled_object(2, None)],
            ..objs.clone()
        };
        let facts = stood_at(2);
        let over = run(&reverted, &[], &facts);
        assert_eq!(targets(&over), vec![(ObjKind::Deployment, "web".into())]);
        assert_eq!(
            op_value(&over.writes[0], "replace", "/spec/replicas"),
            Some(json!(2))
        );
        assert!(over.reverted && over.active.is_none());
        // Not below an HPA's own minimum (someone's 3 on the standalone
        // one): each still lifts the Deployment to its minimum in a
        // conflict, KEDA's too (at the ScaledObject's 2 here).
        let mut theirs = (*hpa()).clone();
        if let Some(spec) = theirs.spec.as_mut() {
            spec.min_replicas = Some(3);
        }
        let floored = NsObjects {
            hpas: vec![
                Arc::new(theirs),
                Arc::new(crate::surge::view::kedas_hpa("ns", "web", 2, 9)),
            ],
            ..reverted
        };
        let facts = stood_at(3);
        let over = run(&floored, &[], &facts);
        assert_eq!(
            op_value(&over.writes[0], "replace", "/spec/replicas"),
            Some(json!(3)),
            "{over:?}"
        );
    }

    /// KEDA and an HPA at once, the HPA's minimum raised by us 5 -> 7;
    /// someone's 0 adopted, then a scale to 1 that the HPA controller lifts
    /// to 7 before a pass sees it. Scales from 0 leave no owner of the
    /// value: at exactly a raised minimum it is read as the lift (`make
    /// model-long`, session 43: adopted, web kept at 7, want 5).
    #[test]
    fn an_unowned_value_at_a_raised_minimum_in_a_conflict_is_a_lift() {
        use crate::surge::writer::replicas_entry;
        let world = |replicas: i32, owner: Option<&str>| {
            let mut d = (*dep(replicas, Some((0, 0)))).clone();
            if let Some(a) = d.metadata.annotations.as_mut() {
                a.insert(markers::ADOPTED_DISPLACED.into(), "0".into());
            }
            d.metadata.managed_fields = owner.map(|m| vec![replicas_entry(m, None)]);
            let mut h = (*raised_hpa(5, 7)).clone();
            if let Some(spec) = h.spec.as_mut() {
                spec.max_replicas = 10;
            }
            NsObjects {
                scaled_objects: vec![scaled_object(0, None)],
                ..world_of(d, vec![Arc::new(h)], 1)
            }
        };
        let marked = |w: &Write, k: &str| {
            w.ops
                .iter()
                .find(|o| o["path"].as_str().is_some_and(|p| p.ends_with(k)))
                .map(|o| o["value"].clone())
        };
        let lifted = run(&world(7, None), &["n9"], &cooling());
        assert_eq!(
            lifted.lifting,
            Some(Markers {
                baseline: 5,
                surged_to: 7
            }),
            "{lifted:?}"
        );
        assert_eq!(targets(&lifted), vec![(ObjKind::Deployment, "web".into())]);
        assert_eq!(
            marked(&lifted.writes[0], "original-min-replicas"),
            Some(json!("5"))
        );
        // Someone's own 7 (an owner through the Deployment), or a value
        // that is no raised minimum: theirs, adopted.
        for (replicas, owner) in [(7, Some("kubectl-patch")), (6, None)] {
            let s = run(&world(replicas, owner), &["n9"], &cooling());
            assert_eq!(s.lifting, None, "{replicas} {owner:?}");
            assert_eq!(s.adopting.len(), 1, "{replicas} {owner:?}: {s:?}");
            let w = &s.writes[0];
            assert_eq!(
                marked(w, "original-min-replicas"),
                Some(json!(replicas.to_string()))
            );
        }
    }

    /// An HPA surge in place when a ScaledObject carrying half a marker (a
    /// manifest's copy) comes: a conflict, in which KEDA's webhook refuses
    /// every update of the ScaledObject. Its clean waits for the conflict to
    /// end, and the HPA's revert goes on (reviews of session 44: the clean
    /// came first and its refusal held every write back).
    #[test]
    fn a_clean_refused_for_good_holds_back_no_revert() {
        let so = scaled_object(0, None);
        let mut so = (*so).clone();
        so.metadata.annotations =
            Some([(crate::names::SURGE_REPLICAS.to_string(), "4".to_string())].into());
        let objs = NsObjects {
            scaled_objects: vec![Arc::new(so)],
            ..world_of((*dep(4, Some((2, 4)))).clone(), vec![raised_hpa(2, 4)], 2)
        };
        let over = run(&objs, &[], &quiet());
        assert_eq!(
            targets(&over),
            vec![(ObjKind::Hpa, "web-hpa".into())],
            "{over:?}"
        );
        // The conflict over (the HPA deleted): the clean goes.
        let alone = NsObjects {
            hpas: vec![],
            ..objs
        };
        let s = run(&alone, &[], &quiet());
        assert!(
            targets(&s).contains(&(ObjKind::ScaledObject, "web".into())),
            "{s:?}"
        );
    }

    #[test]
    fn with_scaled_objects_unknown_only_deployments_under_kedas_hpa_wait() {
        // A KEDA surge in place, the ScaledObjects not listed: nothing is
        // written, not on the Deployment either (raising or reverting its
        // replicas beside KEDA would fight it), and the surge stays active.
        let objs = NsObjects {
            deployments: vec![dep(4, Some((2, 4)))],
            hpas: vec![Arc::new(crate::surge::view::kedas_hpa("ns", "web", 2, 9))],
            pods: pods(4, "n1"),
            pdbs: vec![blocking_pdb(2)],
            in_scope: true,
            keda_unknown: true,
            ..Default::default()
        };
        for draining in [&["n1"][..], &[]] {
            let s = run(&objs, draining, &quiet());
            assert!(s.writes.is_empty(), "{draining:?}: {s:?}");
            assert_eq!(s.action, Action::None);
            assert_eq!(s.active.map(|m| (m.baseline, m.surged_to)), Some((2, 4)));
            // Its pods on a draining node still keep the signal fresh.
            assert_eq!(s.on_draining, 4 * draining.len() as i32, "{draining:?}");
            assert_eq!(s.nodes, ["n1".to_string()].into());
        }
        // Not surged either, however blocked.
        let idle = NsObjects {
            deployments: vec![dep(2, None)],
            pods: pods(2, "n1"),
            ..objs.clone()
        };
        let s = run(&idle, &["n1"], &quiet());
        assert!(s.writes.is_empty() && s.active.is_none(), "{s:?}");
        // Once they are known, the same Deployment is stepped.
        let known = NsObjects {
            keda_unknown: false,
            ..idle.clone()
        };
        assert!(!run(&known, &["n1"], &quiet()).writes.is_empty());
        // A Deployment with no HPA of KEDA's (none, or a standalone one) is
        // stepped while they are unknown: its surge is reverted.
        for hpas in [vec![], vec![raised_hpa(2, 4)]] {
            let plain = NsObjects {
                hpas,
                ..objs.clone()
            };
            let s = run(&plain, &[], &quiet());
            assert!(s.reverted, "{s:?}");
        }
    }

    #[test]
    fn an_interrupted_keda_surge_resumes_from_its_markers() {
        // The ScaledObject was raised (markers written with it), the
        // Deployment's write never landed.
        let objs = NsObjects {
            deployments: vec![dep(2, None)],
            scaled_objects: vec![scaled_object(4, Some((2, 4)))],
            pods: pods(2, "n1"),
            pdbs: vec![blocking_pdb(2)],
            in_scope: true,
            ..Default::default()
        };
        let s = run(&objs, &["n1"], &quiet());
        assert!(matches!(
            s.action,
            Action::Surge {
                kind: plan::SurgeKind::Resume,
                ..
            }
        ));
        assert_eq!(targets(&s), vec![(ObjKind::Deployment, "web".into())]);
        assert_eq!(
            op_value(&s.writes[0], "replace", "/spec/replicas"),
            Some(json!(4))
        );
    }

    #[test]
    fn kedas_hpa_carrying_copies_of_our_markers_is_never_written() {
        // KEDA's operator copies the ScaledObject's annotations onto its HPA:
        // our markers appear there too, with its minimum at our raised one.
        let mut kedas = crate::surge::view::kedas_hpa("ns", "web", 4, 9);
        kedas.metadata.annotations = ann(Some((2, 4)));
        kedas.metadata.managed_fields = Some(vec![crate::surge::writer::field_entry(
            crate::surge::writer::Field::MinReplicas,
            "keda-operator",
            None,
        )]);
        let objs = NsObjects {
            deployments: vec![dep(4, Some((2, 4)))],
            scaled_objects: vec![scaled_object(4, Some((2, 4)))],
            hpas: vec![Arc::new(kedas)],
            pods: pods(4, "n1"),
            pdbs: vec![blocking_pdb(2)],
            in_scope: true,
            ..Default::default()
        };
        let never_kedas = |s: &Step| {
            assert!(
                !targets(s).iter().any(|(k, _)| *k == ObjKind::Hpa),
                "{:?}",
                s.writes
            );
        };
        // Mid-drain: not taken for someone's value to adopt (no write).
        let mid = run(&objs, &["n1"], &quiet());
        never_kedas(&mid);
        assert_eq!(
            mid.active,
            Some(Markers {
                baseline: 2,
                surged_to: 4
            })
        );
        // Drain over: the ScaledObject goes back, KEDA's HPA is left to KEDA.
        let back = run(&objs, &[], &quiet());
        never_kedas(&back);
        assert!(targets(&back).contains(&(ObjKind::ScaledObject, "web".into())));
        // The ScaledObject back at 2, KEDA's operator not yet: its HPA still
        // at 4 (markers gone). The Deployment waits, however long the
        // ScaledObject's 2 has stood: lowered now, the HPA controller would
        // lift it back to 4 with no markers left (and taken for the floor,
        // as it was, 4 was kept: seen on the local cluster).
        let mut lagging = crate::surge::view::kedas_hpa("ns", "web", 4, 9);
        lagging.metadata.annotations = None;
        let reverted_so = NsObjects {
            scaled_objects: vec![scaled_object(2, None)],
            hpas: vec![Arc::new(lagging)],
            ..objs.clone()
        };
        let stood_long = Facts {
            autoscaler_min: Some((2, Duration::from_secs(600))),
            ..quiet()
        };
        let waits = run(&reverted_so, &[], &stood_long);
        assert!(waits.writes.is_empty(), "{:?}", waits.writes);
        // Right after a restart (nothing remembered of earlier passes): waits too.
        let restarted = run(&reverted_so, &[], &quiet());
        assert!(restarted.writes.is_empty(), "{:?}", restarted.writes);
        assert_eq!(
            waits.active,
            Some(Markers {
                baseline: 2,
                surged_to: 4
            })
        );
        // Caught up (its HPA at 2) and stood: the Deployment back to 2.
        let synced = NsObjects {
            hpas: vec![Arc::new(crate::surge::view::kedas_hpa("ns", "web", 2, 9))],
            ..reverted_so.clone()
        };
        let stood = stood_at(2);
        let down = run(&synced, &[], &stood);
        assert_eq!(
            op_value(&down.writes[0], "replace", "/spec/replicas"),
            Some(json!(2)),
            "{:?}",
            down.writes
        );
    }

    /// A ScaledObject paused (KEDA deleted its HPA and stopped scaling) at
    /// minimum 3, its Deployment scaled to 1 by hand, then surged to 4. The
    /// ScaledObject goes back to 3, and the Deployment to exactly 1: no HPA
    /// would lift it to 3, so 3 is no floor (it stayed at 3 before).
    #[test]
    fn under_a_paused_scaled_object_the_deployment_goes_back_to_its_exact_baseline() {
        let paused = |key: &str, value: &str, status: serde_json::Value| {
            let mut so = (*scaled_object(3, None)).clone();
            so.metadata.annotations = Some([(key.to_string(), value.to_string())].into());
            so.data["status"] = status;
            Arc::new(so)
        };
        let objs = |so: Arc<DynamicObject>| NsObjects {
            scaled_objects: vec![so],
            ..world_of((*dep(4, Some((1, 4)))).clone(), vec![], 3)
        };
        let down_to = |so: Arc<DynamicObject>, facts: &Facts| {
            let s = run(&objs(so), &[], facts);
            s.writes
                .iter()
                .find(|w| w.target.kind == ObjKind::Deployment)
                .and_then(|w| op_value(w, "replace", "/spec/replicas"))
        };
        let none = json!(null);
        for (so, why) in [
            (
                paused("autoscaling.keda.sh/paused", "true", none.clone()),
                "paused",
            ),
            (
                paused("autoscaling.keda.sh/paused", "yes", none.clone()),
                "not a boolean",
            ),
            (
                paused(
                    "autoscaling.keda.sh/paused-replicas",
                    "1",
                    json!({"pausedReplicaCount": 1}),
                ),
                "paused-replicas applied",
            ),
        ] {
            assert!(crate::surge::view::scaled_object_paused(&so), "{why}");
            assert_eq!(down_to(so, &quiet()), Some(json!(1)), "{why}");
        }
        // Not paused (or paused-replicas KEDA has not applied yet): its HPA
        // holds the Deployment at 3, which stays the floor.
        for so in [
            scaled_object(3, None),
            paused("autoscaling.keda.sh/paused", "false", none.clone()),
            paused("autoscaling.keda.sh/paused-replicas", "1", none),
        ] {
            assert!(!crate::surge::view::scaled_object_paused(&so));
            assert_eq!(down_to(so, &stood_at(3)), Some(json!(3)));
        }
    }

    /// Under a paused ScaledObject the Deployment is the applier: a blocked
    /// eviction surges its replicas from what they are (1, the PDB following
    /// them), not from the ScaledObject's minimum (3), which is not written.
    /// A surge made on the ScaledObject before the pause goes back on both.
    #[test]
    fn under_a_paused_scaled_object_the_deployment_is_surged_alone() {
        let paused = |min: i64, markers: Option<(i32, i32)>| {
            let mut so = (*scaled_object(min, markers)).clone();
            let mut a = so.metadata.annotations.take().unwrap_or_default();
            a.insert("autoscaling.keda.sh/paused".into(), "true".into());
            so.metadata.annotations = Some(a);
            Arc::new(so)
        };
        let objs = NsObjects {
            scaled_objects: vec![paused(3, None)],
            ..world_of((*dep(1, None)).clone(), vec![], 1)
        };
        let s = run(&objs, &["n1"], &quiet());
        assert_eq!(
            s.action,
            Action::Surge {
                baseline: 1,
                target: 2,
                kind: plan::SurgeKind::Start
            },
            "{:?}",
            s.writes
        );
        assert_eq!(targets(&s), vec![(ObjKind::Deployment, "web".into())]);
        assert_eq!(
            op_value(&s.writes[0], "replace", "/spec/replicas"),
            Some(json!(2))
        );
        // Not paused: KEDA's minimum is the baseline, as before.
        let unpaused = NsObjects {
            scaled_objects: vec![scaled_object(3, None)],
            ..objs.clone()
        };
        let s = run(&unpaused, &["n1"], &quiet());
        assert!(
            matches!(s.action, Action::Surge { baseline: 3, .. }),
            "{:?}",
            s.action
        );

        // Surged on the ScaledObject (3 to 4, the Deployment with it), then
        // paused: held while the drain lasts, then both back to 3.
        let surged = NsObjects {
            scaled_objects: vec![paused(4, Some((3, 4)))],
            ..world_of((*dep(4, Some((3, 4)))).clone(), vec![], 3)
        };
        let held = run(&surged, &["n1"], &cooling());
        assert!(held.writes.is_empty(), "{:?}", held.writes);
        assert_eq!(
            held.active,
            Some(Markers {
                baseline: 3,
                surged_to: 4
            })
        );
        let back = run(&surged, &[], &quiet());
        assert_eq!(
            so_and_deployment_set_to(&back),
            (Some(json!(3)), Some(json!(3))),
            "{:?}",
            back.writes
        );

        // Paused, but KEDA's operator has not deleted its HPA yet (it lags,
        // or the drain evicted it): that HPA, at our raised 4, lifts the
        // Deployment, so the pause does not count yet. The ScaledObject goes
        // back first and the Deployment waits; lowered now, the HPA would
        // lift it back to 4 with no markers left to lower it.
        let lingering = NsObjects {
            hpas: vec![Arc::new(crate::surge::view::kedas_hpa("ns", "web", 4, 9))],
            ..surged.clone()
        };
        let first = run(&lingering, &[], &quiet());
        assert_eq!(
            targets(&first),
            vec![(ObjKind::ScaledObject, "web".into())],
            "{:?}",
            first.writes
        );
        // The ScaledObject back at 3, KEDA's HPA still at 4: the Deployment
        // keeps its surge, however long the minimum has stood.
        let so_back = NsObjects {
            scaled_objects: vec![paused(3, None)],
            ..lingering.clone()
        };
        let waits = run(&so_back, &[], &stood_at(3));
        assert!(waits.writes.is_empty(), "{:?}", waits.writes);
        // KEDA deleted its HPA: the Deployment goes back to exactly 3.
        let gone = NsObjects {
            hpas: vec![],
            ..so_back
        };
        let down = run(&gone, &[], &quiet());
        assert_eq!(
            op_value(&down.writes[0], "replace", "/spec/replicas"),
            Some(json!(3)),
            "{:?}",
            down.writes
        );
    }

    /// A failed adoption remembered for a Deployment then deleted and made
    /// again under its name, and surged: the new object's value is our
    /// surge, not someone's to adopt (taken for theirs, it was kept for
    /// good; found by the surge model, 50,000 histories).
    #[test]
    fn a_failed_adoption_is_not_carried_to_a_deployment_made_again() {
        let mut d = (*dep(4, Some((3, 4)))).clone();
        d.metadata.uid = Some("new".into());
        let objs = world_of(d, vec![], 3);
        let facts = |uid: &str| Facts {
            adoption_pending: Some(Adoption {
                key: ObjKey {
                    kind: ObjKind::Deployment,
                    namespace: "ns".into(),
                    name: "web".into(),
                },
                uid: Some(uid.into()),
                seen: Some(3),
            }),
            ..cooling()
        };
        // On the same object: the value in place is adopted, even ours.
        let same = run(&objs, &["n1"], &facts("new"));
        assert!(
            matches!(
                same.action,
                Action::AdoptUserChange {
                    new_baseline: 4,
                    ..
                }
            ),
            "{:?}",
            same.action
        );
        // Seen on the old object: the surge is ours, held while the drain lasts.
        let other = run(&objs, &["n1"], &facts("old"));
        assert!(
            !matches!(other.action, Action::AdoptUserChange { .. }),
            "{:?}",
            other.action
        );
        assert_eq!(
            other.active,
            Some(Markers {
                baseline: 3,
                surged_to: 4
            })
        );
    }

    /// Two standalone HPAs over one Deployment (the HPA controller scales
    /// neither on metrics): which minimum to raise would hang on the
    /// caches' order, so no surge is made and the step says why; a surge
    /// carried on one of them from before the second came goes back.
    #[test]
    fn two_standalone_hpas_are_a_conflict() {
        let second = |markers: Option<(i32, i32)>| {
            let mut h = (*hpa()).clone();
            h.metadata.name = Some("web-hpa-2".into());
            h.metadata.annotations = ann(markers);
            if let (Some((_, to)), Some(sp)) = (markers, h.spec.as_mut()) {
                sp.min_replicas = Some(to);
            }
            Arc::new(h)
        };
        let objs = world_of((*dep(3, None)).clone(), vec![hpa(), second(None)], 3);
        let s = run(&objs, &["n1"], &quiet());
        match &s.action {
            Action::Impossible { reason } => {
                assert!(reason.contains("or two HPAs) both target"), "{reason}")
            }
            a => panic!("{a:?}"),
        }
        assert!(s.writes.is_empty(), "{:?}", s.writes);
        // The surge raised web-hpa-2 and recorded the Deployment's lift.
        let carried = world_of(
            (*dep(4, Some((3, 4)))).clone(),
            vec![hpa(), second(Some((3, 4)))],
            3,
        );
        let s = run(&carried, &[], &stood_at(4));
        assert!(s.reverted, "{s:?}");
        assert!(
            s.writes.iter().any(|w| w.target.name == "web-hpa-2"),
            "{:?}",
            s.writes
        );
    }

    /// `paused-replicas: 2` applied, and KEDA's HPA left at a minimum and
    /// maximum of 2 (KEDA leaves it once the Deployment is there): the HPA
    /// controller takes any surge above 2 back, so none is made and the
    /// step says why; the ScaledObject's minimum, which moves nothing, is
    /// not written. A surge carried from before goes back to its exact
    /// baseline, as under a pause with KEDA's HPA gone.
    #[test]
    fn under_paused_replicas_held_by_kedas_hpa_no_surge_is_made() {
        let held = |min: i64, markers: Option<(i32, i32)>| {
            let so = (*scaled_object(min, markers)).clone();
            Arc::new(crate::surge::view::paused_at(so, 2))
        };
        let kedas = |min, max| Arc::new(crate::surge::view::kedas_hpa("ns", "web", min, max));
        let objs = NsObjects {
            scaled_objects: vec![held(3, None)],
            ..world_of((*dep(2, None)).clone(), vec![kedas(2, 2)], 2)
        };
        let s = run(&objs, &["n1"], &quiet());
        match &s.action {
            Action::Impossible { reason } => assert!(
                reason.contains("KEDA holds it at 2 replicas")
                    && reason.contains("paused-replicas"),
                "{reason}"
            ),
            a => panic!("{a:?}"),
        }
        assert!(s.writes.is_empty(), "{:?}", s.writes);
        // A standalone HPA beside it: two HPAs over the Deployment, no
        // single minimum to raise, as with KEDA acting.
        let beside = NsObjects {
            hpas: vec![kedas(2, 2), hpa()],
            ..objs.clone()
        };
        let s = run(&beside, &["n1"], &quiet());
        match &s.action {
            Action::Impossible { reason } => assert!(reason.contains("both target"), "{reason}"),
            a => panic!("{a:?}"),
        }
        assert!(s.writes.is_empty(), "{:?}", s.writes);
        // KEDA's HPA at other bounds lifts the Deployment to the
        // ScaledObject's minimum: that minimum is the applier, as before.
        let lifting = NsObjects {
            hpas: vec![kedas(3, 9)],
            ..objs.clone()
        };
        let s = run(&lifting, &["n1"], &quiet());
        assert!(
            matches!(s.action, Action::Surge { baseline: 3, .. }),
            "{:?}",
            s.action
        );

        // The Deployment surged from 2 to 3 (while KEDA's HPA was gone),
        // the ScaledObject still marked from a surge before the pause, then
        // KEDA's HPA made at 2 and 2: the drain over, both go back exactly.
        let surged = NsObjects {
            scaled_objects: vec![held(4, Some((3, 4)))],
            ..world_of((*dep(3, Some((2, 3)))).clone(), vec![kedas(2, 2)], 2)
        };
        let cooling_down = run(&surged, &["n1"], &cooling());
        assert!(cooling_down.writes.is_empty(), "{:?}", cooling_down.writes);
        let back = run(&surged, &[], &quiet());
        assert_eq!(
            so_and_deployment_set_to(&back),
            (Some(json!(3)), Some(json!(2))),
            "{:?}",
            back.writes
        );
    }

    #[test]
    fn an_autoscaler_surge_writes_the_deployment_first() {
        // Once the minimum is raised the autoscaler lifts the Deployment
        // itself; written first, the Deployment carries its baseline then.
        let objs = NsObjects {
            deployments: vec![dep(2, None)],
            hpas: vec![hpa()],
            pods: pods(2, "n1"),
            pdbs: vec![blocking_pdb(2)],
            in_scope: true,
            ..Default::default()
        };
        let s = run(&objs, &["n1"], &quiet());
        assert_eq!(
            targets(&s),
            vec![
                (ObjKind::Deployment, "web".into()),
                (ObjKind::Hpa, "web-hpa".into())
            ]
        );
    }

    #[test]
    fn a_deployment_lifted_by_its_autoscaler_to_our_minimum_goes_back_to_its_baseline() {
        // A user's 3 was adopted on the Deployment mid-surge; the HPA, its
        // minimum raised to 4 by us, lifted it to 4.
        let h = raised_hpa(2, 4);
        let objs = NsObjects {
            deployments: vec![dep(4, Some((3, 3)))],
            hpas: vec![h],
            pods: pods(4, "n1"),
            pdbs: vec![blocking_pdb(2)],
            in_scope: true,
            ..Default::default()
        };
        // Mid-drain: recorded as ours from 3, not adopted as someone's 4.
        assert_lift_recorded(&run(&objs, &["n1"], &quiet()));
        // Someone lowers it back to 3 under the raised minimum: nothing is
        // written (the HPA lifts it again; no loop with it).
        let low = NsObjects {
            deployments: vec![dep(3, Some((3, 4)))],
            ..objs.clone()
        };
        assert!(run(&low, &["n1"], &quiet()).writes.is_empty());
    }

    /// How a marked Deployment stands under an autoscaler whose minimum we
    /// raised from 3 to 6, by value, markers, failed adoption and writer.
    #[test]
    fn who_wrote_the_raised_minimum_decides_whose_it_is() {
        use ReplicasWriter::{Autoscaler, Someone, Unknown};
        use UnderAutoscaler::{AtBaseline, Lifted, Other};
        let mk = |baseline, surged_to| Markers {
            baseline,
            surged_to,
        };
        let raised = Some(mk(3, 6));
        type Case = (
            Option<i32>,
            Markers,
            Option<Option<i32>>,
            ReplicasWriter,
            UnderAutoscaler,
        );
        #[rustfmt::skip]
        let cases: Vec<Case> = vec![
            // Our surge of the Deployment; our number written again by
            // someone through the Deployment itself is theirs.
            (Some(6), mk(3, 6), None, Unknown, Lifted { baseline: 3 }),
            (Some(6), mk(3, 6), None, Someone, Other),
            // Lifted by the HPA from a recorded 4 or 2: where the HPA would
            // hold it without the surge (also with no owner recorded).
            (Some(6), mk(4, 4), None, Autoscaler, Lifted { baseline: 4 }),
            (Some(6), mk(2, 2), None, Autoscaler, Lifted { baseline: 3 }),
            (Some(6), mk(2, 2), None, Unknown, Lifted { baseline: 3 }),
            // An adopted 6 stays theirs.
            (Some(6), mk(6, 6), None, Autoscaler, Other),
            // `kubectl scale --replicas=6` over a recorded 2 or 0: theirs.
            (Some(6), mk(2, 2), None, Someone, Other),
            (Some(6), mk(0, 0), None, Someone, Other),
            // Lifted from an unseen value set after a recorded 0 or 7 (the
            // HPA lifts neither): back to the HPA's own minimum.
            (Some(6), mk(0, 0), None, Autoscaler, Lifted { baseline: 3 }),
            (Some(6), mk(7, 7), None, Autoscaler, Lifted { baseline: 3 }),
            (Some(6), mk(0, 0), None, Unknown, Lifted { baseline: 3 }),
            (Some(6), mk(7, 7), None, Unknown, Lifted { baseline: 3 }),
            // A failed adoption of 2 or 4, then the lift: where the HPA
            // holds that value without the surge (2 goes to its minimum 3).
            (Some(6), mk(3, 6), Some(Some(2)), Autoscaler, Lifted { baseline: 3 }),
            (Some(6), mk(3, 6), Some(Some(4)), Autoscaler, Lifted { baseline: 4 }),
            // A failed adoption of 0, then a lift of an unseen value.
            (Some(6), mk(3, 6), Some(Some(0)), Autoscaler, Lifted { baseline: 3 }),
            (Some(6), mk(5, 6), Some(Some(0)), Unknown, Lifted { baseline: 5 }),
            (Some(6), mk(3, 6), Some(Some(0)), Someone, Other),
            (Some(4), mk(3, 6), Some(Some(0)), Autoscaler, Other),
            // Lowered back to the baseline under our minimum.
            (Some(3), mk(3, 6), None, Someone, AtBaseline),
            (Some(4), mk(3, 6), None, Someone, Other),
        ];
        for (raw, m, pending, writer, want) in cases {
            assert_eq!(
                under_autoscaler(raw, m, raised, pending, writer),
                want,
                "{raw:?} {m:?} {pending:?} {writer:?}"
            );
        }
        assert_eq!(
            under_autoscaler(Some(6), mk(0, 0), None, None, Autoscaler),
            Other,
            "no autoscaler surge"
        );
        // KEDA's minimum 0: the HPA KEDA makes lifts to at least 1.
        assert_eq!(
            under_autoscaler(Some(2), mk(0, 0), Some(mk(0, 2)), None, Autoscaler),
            Lifted { baseline: 1 }
        );
    }

    /// The HPA (ours: 2 -> 4) lifted a Deployment whose user's 3 was adopted.
    fn lifted_world() -> NsObjects {
        let h = raised_hpa(2, 4);
        let mut d = (*dep(4, Some((3, 3)))).clone();
        if let Some(a) = d.metadata.annotations.as_mut() {
            a.insert(markers::ADOPTED_DISPLACED.into(), "1".into());
        }
        if let Some(spec) = d.spec.as_mut() {
            spec.strategy = Some(k8s_openapi::api::apps::v1::DeploymentStrategy {
                rolling_update: Some(k8s_openapi::api::apps::v1::RollingUpdateDeployment {
                    max_surge: Some(IntOrString::String("300%".into())),
                    ..Default::default()
                }),
                ..Default::default()
            });
        }
        NsObjects {
            deployments: vec![Arc::new(d)],
            hpas: vec![h],
            pods: pods(4, "n1"),
            pdbs: vec![blocking_pdb(2)],
            in_scope: true,
            ..Default::default()
        }
    }

    /// Only the Deployment's markers, from its baseline 3 to the lift.
    fn assert_lift_recorded(s: &Step) {
        assert_eq!(
            targets(s),
            vec![(ObjKind::Deployment, "web".into())],
            "{s:?}"
        );
        let w = &s.writes[0];
        assert_eq!(op_value(w, "replace", "/spec/replicas"), Some(json!(4)));
        assert_eq!(op_value(w, "test", "/spec/replicas"), Some(json!(4)));
        let marked = |k: &str| {
            w.ops
                .iter()
                .find(|o| o["path"].as_str().is_some_and(|p| p.ends_with(k)))
                .map(|o| o["value"].clone())
        };
        assert_eq!(marked("original-min-replicas"), Some(json!("3")));
        assert_eq!(marked("evictionSurgeReplicas"), Some(json!("4")));
    }

    /// The Deployment made again mid-surge (its markers went with the old
    /// object) under the HPA whose minimum we raised from 2 to 4. Before
    /// the HPA lifts it, its own 3 is recorded and the lift made by us, so
    /// the revert brings it back to 3; nothing while the minimum goes back
    /// in this step.
    #[test]
    fn an_unmarked_deployment_under_our_minimum_is_recorded() {
        use crate::surge::writer::{replicas_entry, AUTOSCALER_MANAGER};
        let world = |replicas: i32, manager: &str, sub: Option<&str>| {
            let mut d = (*dep(replicas, None)).clone();
            d.metadata.managed_fields = Some(vec![replicas_entry(manager, sub)]);
            world_of(d, vec![raised_hpa(2, 4)], 2)
        };
        // In the cooldown: the minimum stays raised.
        let cooling = cooling();
        let before = world(3, "kubectl-create", None);
        let s = run(&before, &[], &cooling);
        assert_eq!(
            targets(&s),
            vec![(ObjKind::Deployment, "web".into())],
            "{s:?}"
        );
        let w = &s.writes[0];
        assert_eq!(op_value(w, "test", "/spec/replicas"), Some(json!(3)));
        assert_eq!(op_value(w, "replace", "/spec/replicas"), Some(json!(4)));
        // No annotations yet: the markers are added as one object.
        assert_eq!(
            op_value(w, "add", "/metadata/annotations"),
            Some(json!({
                "eviction-autoscaler.azure.com/original-min-replicas": "3",
                "evictionSurgeReplicas": "4"
            })),
            "{w:?}"
        );
        // The drain over: the HPA goes back alone, the Deployment stays 3.
        let s = run(&before, &[], &quiet());
        assert_eq!(s.action, Action::Revert { baseline: 2 });
        assert_eq!(targets(&s), vec![(ObjKind::Hpa, "web-hpa".into())]);

        // Once at our minimum, whoever set it, it is left alone: the HPA
        // may hold it there on metrics (the documented limit).
        for (manager, sub) in [
            (AUTOSCALER_MANAGER, Some("scale")),
            ("kubectl-patch", None),
            ("kubectl", Some("scale")),
        ] {
            let s = run(&world(4, manager, sub), &[], &cooling);
            assert!(
                s.writes
                    .iter()
                    .all(|w| w.target.kind != ObjKind::Deployment),
                "{manager} {sub:?}: {s:?}"
            );
        }
    }

    /// A surged Deployment (3 -> 6) under an HPA made mid-surge with
    /// maxReplicas 4: the HPA controller takes it to 4 through `scale`.
    /// Recorded as our surge at 4 (not adopted as someone's value), so the
    /// drain's end lowers it to its baseline 3. The same number written by
    /// someone through the Deployment is theirs, and one at or below the
    /// baseline is left as the autoscaler set it.
    #[test]
    fn a_surge_an_hpa_clamped_to_its_maximum_is_recorded_and_goes_back() {
        use crate::surge::writer::{replicas_entry, AUTOSCALER_MANAGER};
        let world = |replicas: i32, markers: (i32, i32), manager: &str, sub: Option<&str>| {
            let mut d = (*dep(replicas, Some(markers))).clone();
            d.metadata.managed_fields = Some(vec![replicas_entry(manager, sub)]);
            let mut h = (*hpa()).clone();
            if let Some(spec) = h.spec.as_mut() {
                spec.max_replicas = 4;
            }
            world_of(d, vec![Arc::new(h)], 2)
        };
        let cooling = cooling();
        let clamped = world(4, (3, 6), AUTOSCALER_MANAGER, Some("scale"));
        // Decided from the cluster alone: the same after a restart (or a
        // record write that failed), with nothing in memory.
        let restarted = Facts {
            lead_for: Duration::from_secs(1),
            ..Facts::default()
        };
        for facts in [&cooling, &quiet(), &restarted] {
            let s = run(&clamped, &[], facts);
            assert_eq!(
                s.lifting,
                Some(Markers {
                    baseline: 3,
                    surged_to: 4
                }),
                "{s:?}"
            );
            assert_eq!(
                targets(&s),
                vec![(ObjKind::Deployment, "web".into())],
                "{s:?}"
            );
            let w = &s.writes[0];
            assert_eq!(op_value(w, "test", "/spec/replicas"), Some(json!(4)));
            assert!(s.adopting.is_empty(), "not someone's value: {s:?}");
        }
        // Recorded: once the drain is over and the HPA's minimum (2, never
        // raised) has stood, the Deployment goes back to 3.
        let recorded = world(4, (3, 4), AUTOSCALER_MANAGER, Some("scale"));
        let stood = stood_at(2);
        let s = run(&recorded, &[], &stood);
        let w = s
            .writes
            .iter()
            .find(|w| w.target.kind == ObjKind::Deployment)
            .unwrap_or_else(|| panic!("the Deployment goes back: {s:?}"));
        assert_eq!(op_value(w, "replace", "/spec/replicas"), Some(json!(3)));
        // Someone's 4 through the Deployment: adopted, kept.
        let s = run(&world(4, (3, 6), "kubectl-patch", None), &[], &cooling);
        assert!(s.lifting.is_none(), "{s:?}");
        assert_eq!(s.adopting.len(), 1, "{s:?}");
        // The autoscaler's 3 (at the baseline): nothing of ours to take back.
        let s = run(
            &world(3, (3, 6), AUTOSCALER_MANAGER, Some("scale")),
            &[],
            &cooling,
        );
        assert!(s.lifting.is_none(), "{s:?}");
        // An HPA whose maximum is 9 scaling it down to 5 on metrics: the
        // HPA's own number, not a clamp (lowered, it would come back).
        let mut on_metrics = world(5, (3, 6), AUTOSCALER_MANAGER, Some("scale"));
        on_metrics.hpas = vec![hpa()];
        let s = run(&on_metrics, &[], &cooling);
        assert!(s.lifting.is_none(), "{s:?}");
    }

    /// The drain over, the HPA's minimum raised by us (3 -> 6) goes back
    /// while its Deployment stands at someone's 4 with our markers. Those
    /// markers go only once the HPA's minimum has stood at 3: in the same
    /// step, a failed HPA write (or a sync of the HPA controller before it
    /// lands) would lift the Deployment to 6 with nothing left to lower it.
    #[test]
    fn a_deployments_markers_go_only_once_its_autoscalers_minimum_has_stood() {
        use crate::surge::writer::replicas_entry;
        let world = |h: Arc<HorizontalPodAutoscaler>| {
            let mut d = (*dep(4, Some((3, 6)))).clone();
            d.metadata.managed_fields = Some(vec![replicas_entry("kubectl-patch", None)]);
            world_of(d, vec![h], 3)
        };
        let s = run(&world(raised_hpa(3, 6)), &[], &quiet());
        assert_eq!(s.action, Action::Revert { baseline: 3 }, "{s:?}");
        assert_eq!(targets(&s), vec![(ObjKind::Hpa, "web-hpa".into())], "{s:?}");
        let mut back = (*hpa()).clone();
        if let Some(spec) = back.spec.as_mut() {
            spec.min_replicas = Some(3);
        }
        let back = world(Arc::new(back));
        for secs in [0, 1] {
            let settling = Facts {
                autoscaler_min: Some((3, Duration::from_secs(secs))),
                ..quiet()
            };
            let s = run(&back, &[], &settling);
            assert!(s.writes.is_empty(), "{secs} s: {s:?}");
            assert_eq!(
                s.active,
                Some(Markers {
                    baseline: 3,
                    surged_to: 6
                })
            );
        }
        let stood = stood_at(3);
        let s = run(&back, &[], &stood);
        assert_eq!(
            targets(&s),
            vec![(ObjKind::Deployment, "web".into())],
            "{s:?}"
        );
        let w = &s.writes[0];
        assert_eq!(op_value(w, "test", "/spec/replicas"), Some(json!(4)));
        assert_eq!(op_value(w, "replace", "/spec/replicas"), None, "{w:?}");
        assert!(s.reverted);
    }

    /// One PDB over `web` and `api` keeps one record, on the
    /// EvictionAutoScaler named after it (targeting `api`); a block of
    /// `api`'s pod overwrites one of `web`'s. It still counts for `web`,
    /// whose pods that PDB selects, not for a Deployment it does not.
    #[test]
    fn a_shared_pdbs_record_counts_for_every_deployment_under_it() {
        let named = |name: &str, app: &str| {
            let mut d = (*dep(3, None)).clone();
            d.metadata.name = Some(name.into());
            if let Some(spec) = d.spec.as_mut() {
                let labels: BTreeMap<String, String> = [
                    ("app".to_string(), app.to_string()),
                    ("tier".to_string(), "front".to_string()),
                ]
                .into();
                spec.selector.match_labels = Some(labels.clone());
                if let Some(m) = spec.template.metadata.as_mut() {
                    m.labels = Some(labels);
                }
            }
            Arc::new(d)
        };
        let mut shared = (*blocking_pdb(4)).clone();
        shared.metadata.name = Some("front".into());
        if let Some(spec) = shared.spec.as_mut() {
            spec.selector = Some(LabelSelector {
                match_labels: Some([("tier".to_string(), "front".to_string())].into()),
                ..Default::default()
            });
        }
        let now = Timestamp::from_second(1_000_000).unwrap_or_default();
        let eas = crate::crd::EvictionAutoScaler {
            metadata: ObjectMeta {
                name: Some("front".into()),
                namespace: Some("ns".into()),
                ..Default::default()
            },
            spec: crate::crd::EvictionAutoScalerSpec {
                target_name: "api".into(),
                target_kind: "deployment".into(),
                last_eviction: Some(crate::crd::LastEviction {
                    pod_name: "api-5d8f7c-x2x9q".into(),
                    eviction_time: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                        Timestamp::from_second(1_000_000 - 3).unwrap_or_default(),
                    )),
                }),
            },
            status: None,
        };
        let objs = NsObjects {
            deployments: vec![named("web", "web"), named("api", "api"), named("db", "db")],
            pdbs: vec![Arc::new(shared)],
            eas: vec![Arc::new(eas)],
            in_scope: true,
            ..Default::default()
        };
        let window = Duration::from_secs(120);
        let got = |name: &str| durable_signal(&objs, name, Some(now), window);
        let three = Some((Duration::from_secs(3), "api-5d8f7c-x2x9q".to_string()));
        assert_eq!(got("api"), three, "its target");
        assert_eq!(got("web"), three, "under the same PDB");
        // db's template has tier=front too: selected.
        assert_eq!(got("db"), three);
        let late = durable_signal(&objs, "web", Some(now), Duration::from_secs(2));
        assert_eq!(late, None, "older than the window");
        let mut other = objs.clone();
        other.deployments = vec![named("api", "api"), {
            let mut d = (*named("web", "web")).clone();
            if let Some(m) = d.spec.as_mut().and_then(|s| s.template.metadata.as_mut()) {
                m.labels = Some([("app".to_string(), "web".to_string())].into());
            }
            Arc::new(d)
        }];
        assert_eq!(
            durable_signal(&other, "web", Some(now), window),
            None,
            "a Deployment the PDB does not select"
        );
    }

    #[test]
    fn a_lift_is_recorded_before_a_top_up() {
        // More pods displaced than when the 3 was adopted: a top-up is
        // planned; the lift to 4 is recorded first, not adopted.
        let objs = lifted_world();
        let s = run(&objs, &["n1"], &quiet());
        assert_lift_recorded(&s);
        // Recorded: the top-up goes on from the Deployment's baseline 3.
        let mut d = (*dep(4, Some((3, 4)))).clone();
        d.spec = objs.deployments[0].spec.clone();
        let next = NsObjects {
            deployments: vec![Arc::new(d)],
            ..objs
        };
        let s = run(&next, &["n1"], &quiet());
        assert!(
            matches!(
                s.action,
                Action::Surge {
                    kind: plan::SurgeKind::TopUp,
                    ..
                }
            ),
            "{:?}",
            s.action
        );
        let w = &s.writes[0];
        assert_eq!(w.target.kind, ObjKind::Deployment);
        assert!(w.ops.iter().any(|o| o["value"] == json!("3")), "{w:?}");
    }

    #[test]
    fn a_lift_is_recorded_before_the_autoscaler_is_reverted() {
        // The drain is over in the pass that first sees the lift: the HPA
        // waits a pass, so the Deployment is never left lifted unrecorded.
        let s = run(&lifted_world(), &[], &quiet());
        assert_lift_recorded(&s);
    }

    #[test]
    fn a_deployment_is_lowered_only_once_its_autoscalers_minimum_has_stood() {
        // HPA minimum 2 raised to 3, the Deployment 2 -> 3; the drain is over.
        let h = raised_hpa(2, 3);
        let surged = NsObjects {
            deployments: vec![dep(3, Some((2, 3)))],
            hpas: vec![h],
            pods: pods(3, "n1"),
            pdbs: vec![blocking_pdb(3)],
            in_scope: true,
            ..Default::default()
        };
        let stood = |min: i32, secs: u64| Facts {
            autoscaler_min: Some((min, Duration::from_secs(secs))),
            ..quiet()
        };
        // The HPA's revert goes alone, however long its minimum stood.
        let s = run(&surged, &[], &stood(3, 600));
        assert_eq!(s.action, Action::Revert { baseline: 2 });
        assert_eq!(targets(&s), vec![(ObjKind::Hpa, "web-hpa".into())]);
        assert_eq!(s.autoscaler_min, Some(3));
        let m = Markers {
            baseline: 2,
            surged_to: 3,
        };
        assert_eq!(
            s.active,
            Some(m),
            "the Deployment's surge is still in place"
        );
        // The HPA as that write left it: its new minimum must stand first
        // (unknown after a restart, or read as another before).
        let reverted = NsObjects {
            hpas: vec![hpa()],
            ..surged
        };
        let just_read = stood(2, SETTLE.as_secs() - 1);
        for facts in [quiet(), stood(3, 600), just_read] {
            let s = run(&reverted, &[], &facts);
            assert!(s.writes.is_empty(), "{facts:?}: {s:?}");
            assert_eq!((s.active, s.autoscaler_min), (Some(m), Some(2)));
        }
        let s = run(&reverted, &[], &stood(2, SETTLE.as_secs()));
        assert_eq!(targets(&s), vec![(ObjKind::Deployment, "web".into())]);
        assert_eq!(
            op_value(&s.writes[0], "replace", "/spec/replicas"),
            Some(json!(2))
        );
        assert!(s.reverted && s.active.is_none(), "{s:?}");
    }

    #[test]
    fn our_number_written_by_someone_under_an_autoscaler_is_theirs() {
        // HPA minimum 2 raised to 3, the Deployment 2 -> 3, and then someone
        // wrote 3 through the Deployment itself (away and back unseen).
        let h = raised_hpa(2, 3);
        let mut d = (*dep(3, Some((2, 3)))).clone();
        d.metadata.managed_fields = Some(vec![crate::surge::writer::replicas_entry(
            "kubectl-patch",
            None,
        )]);
        let objs = NsObjects {
            deployments: vec![Arc::new(d)],
            hpas: vec![h],
            pods: pods(3, "n1"),
            pdbs: vec![blocking_pdb(3)],
            in_scope: true,
            ..Default::default()
        };
        let baseline_of = |w: &Write| {
            w.ops
                .iter()
                .find(|o| {
                    o["path"]
                        .as_str()
                        .is_some_and(|p| p.ends_with("original-min-replicas"))
                })
                .map(|o| o["value"].clone())
        };
        // While draining: adopted as the Deployment's baseline, not changed.
        let s = run(&objs, &["n1"], &quiet());
        let w = s
            .writes
            .iter()
            .find(|w| w.target.kind == ObjKind::Deployment);
        let w = w.unwrap_or_else(|| panic!("an adoption: {s:?}"));
        assert_eq!(op_value(w, "replace", "/spec/replicas"), None, "{w:?}");
        assert_eq!(baseline_of(w), Some(json!("3")), "{w:?}");
        // Once over: the HPA goes back, the Deployment keeps their 3.
        let s = run(&objs, &[], &quiet());
        assert_eq!(s.action, Action::Revert { baseline: 2 });
        let w = s
            .writes
            .iter()
            .find(|w| w.target.kind == ObjKind::Deployment);
        let w = w.unwrap_or_else(|| panic!("markers removed: {s:?}"));
        assert_eq!(op_value(w, "replace", "/spec/replicas"), None, "{w:?}");
        assert!(s.reverted && s.active.is_none(), "{s:?}");
    }

    #[test]
    fn our_minimum_written_by_someone_is_theirs() {
        // HPA minimum 2 raised to 3 (the Deployment lifted 2 -> 3 with it),
        // then someone wrote 3 to the HPA itself (away and back unseen).
        let mut h = (*raised_hpa(2, 3)).clone();
        h.metadata.managed_fields = Some(vec![crate::surge::writer::field_entry(
            crate::surge::writer::Field::MinReplicas,
            "kubectl-patch",
            None,
        )]);
        let objs = NsObjects {
            deployments: vec![dep(3, Some((2, 3)))],
            hpas: vec![Arc::new(h.clone())],
            pods: pods(3, "n1"),
            pdbs: vec![blocking_pdb(3)],
            in_scope: true,
            ..Default::default()
        };
        // While draining: adopted as the HPA's baseline, not changed.
        let s = run(&objs, &["n1"], &quiet());
        assert!(
            matches!(
                s.action,
                Action::AdoptUserChange {
                    new_baseline: 3,
                    ..
                }
            ),
            "{s:?}"
        );
        let hw = s.writes.iter().find(|w| w.target.kind == ObjKind::Hpa);
        let hw = hw.unwrap_or_else(|| panic!("an adoption: {s:?}"));
        assert_eq!(op_value(hw, "replace", "/spec/minReplicas"), None, "{hw:?}");
        // Once over, before that adoption persisted: adopted again, the
        // value untouched.
        let s = run(&objs, &[], &quiet());
        let hw = s.writes.iter().find(|w| w.target.kind == ObjKind::Hpa);
        let hw = hw.unwrap_or_else(|| panic!("markers removed: {s:?}"));
        assert_eq!(op_value(hw, "replace", "/spec/minReplicas"), None, "{hw:?}");
        // After the adoption persisted (markers {3, 3}): only our markers
        // go from the HPA, their 3 stays.
        h.metadata.annotations = ann(Some((3, 3)));
        let adopted = NsObjects {
            hpas: vec![Arc::new(h)],
            ..objs
        };
        let s = run(&adopted, &[], &quiet());
        assert_eq!(s.action, Action::Revert { baseline: 3 });
        let hw = s.writes.iter().find(|w| w.target.kind == ObjKind::Hpa);
        let hw = hw.unwrap_or_else(|| panic!("markers removed: {s:?}"));
        assert_eq!(op_value(hw, "replace", "/spec/minReplicas"), None, "{hw:?}");
        // The Deployment waits for the minimum to stand, and then is not
        // lowered below their 3 (the HPA would lift it straight back).
        assert!(
            !targets(&s).iter().any(|t| t.0 == ObjKind::Deployment),
            "{s:?}"
        );
        let mut plain = (*hpa()).clone();
        if let Some(spec) = plain.spec.as_mut() {
            spec.min_replicas = Some(3);
        }
        let stood = NsObjects {
            hpas: vec![Arc::new(plain)],
            ..adopted
        };
        let facts = stood_at(3);
        let s = run(&stood, &[], &facts);
        let dw = s
            .writes
            .iter()
            .find(|w| w.target.kind == ObjKind::Deployment);
        let dw = dw.unwrap_or_else(|| panic!("markers removed: {s:?}"));
        assert_eq!(op_value(dw, "replace", "/spec/replicas"), None, "{dw:?}");
        assert!(s.reverted && s.active.is_none(), "{s:?}");
    }

    #[test]
    fn a_failed_lift_record_is_kept_when_the_autoscaler_goes() {
        let s = run(&lifted_world(), &[], &quiet());
        let l = Markers {
            baseline: 3,
            surged_to: 4,
        };
        assert_eq!(s.lifting, Some(l));
        // That write failed, and the HPA was deleted before the retry.
        let gone = NsObjects {
            hpas: vec![],
            ..lifted_world()
        };
        // Without the memory (a restart), the lift reads as someone's 4.
        let s = run(&gone, &[], &quiet());
        assert!(
            matches!(
                s.action,
                Action::AdoptUserChange {
                    new_baseline: 4,
                    ..
                }
            ),
            "{s:?}"
        );
        // With it, the lift is recorded as ours first ...
        let facts = Facts {
            lift_pending: Some(l),
            ..quiet()
        };
        let s = run(&gone, &[], &facts);
        assert_lift_recorded(&s);
        assert_eq!(s.lifting, Some(l));
        // ... but not over a value someone wrote through the Deployment.
        let mut d = (*gone.deployments[0]).clone();
        d.metadata.managed_fields = Some(vec![crate::surge::writer::replicas_entry(
            "kubectl-patch",
            None,
        )]);
        let theirs = NsObjects {
            deployments: vec![Arc::new(d)],
            ..gone.clone()
        };
        assert!(run(&theirs, &[], &facts).lifting.is_none());
        // Recorded, the Deployment goes back to 3 once the drain is over.
        let mut d = (*dep(4, Some((3, 4)))).clone();
        d.spec = gone.deployments[0].spec.clone();
        let recorded = NsObjects {
            deployments: vec![Arc::new(d)],
            ..gone
        };
        let s = run(&recorded, &[], &facts);
        assert_eq!(s.action, Action::Revert { baseline: 3 }, "{s:?}");
        assert!(s.lifting.is_none());
    }

    /// The EvictionAutoScaler of a PDB over `web` and `api`, targeting
    /// `api`, where a follower recorded the denied eviction of `pod` 5 s ago.
    fn follower_signal(pod: &str, now: Timestamp) -> Arc<crate::crd::EvictionAutoScaler> {
        let t = now - k8s_openapi::jiff::SignedDuration::from_secs(5);
        Arc::new(
            serde_json::from_value(json!({
                "apiVersion": "eviction-autoscaler.azure.com/v1", "kind": "EvictionAutoScaler",
                "metadata": {"name": "tier", "namespace": "ns"},
                "spec": {"targetName": "api",
                         "lastEviction": {"podName": pod, "evictionTime": t.to_string()}}
            }))
            .expect("EvictionAutoScaler"),
        )
    }

    #[test]
    fn a_follower_signal_for_a_pod_gone_since_still_counts() {
        // The denied pod of `web` has been evicted since: its name still
        // says whose it was, so web's cooldown runs from the denial.
        let now = Timestamp::now();
        let eas = follower_signal("web-7d9f8c6b4-x2k9q", now);
        let objs = NsObjects {
            deployments: vec![dep(3, Some((2, 3)))],
            pods: pods(3, "n1"),
            pdbs: vec![blocking_pdb(2)],
            eas: vec![eas],
            in_scope: true,
            ..Default::default()
        };
        let settings = Settings {
            cooldown: Duration::from_secs(60),
            zero_surge_override: None,
        };
        let draining = BTreeSet::new();
        let s = step("ns", &objs, &draining, "web", &quiet(), settings, Some(now));
        assert!(
            matches!(s.action, Action::Wait(plan::Wait::Cooldown { .. })),
            "{:?}",
            s.action
        );
        assert!(s.writes.is_empty());
    }

    #[test]
    fn a_follower_signal_counts_for_the_deployment_of_the_denied_pod() {
        // One PDB over `web` and `api`: its one EvictionAutoScaler targets
        // `api`, and a follower recorded there the denied eviction of a
        // `web` pod (no node draining: this is the only signal).
        let now = Timestamp::now();
        let eas = follower_signal("web-1", now);
        let objs = NsObjects {
            deployments: vec![dep(2, None)],
            pods: pods(2, "n1"),
            pdbs: vec![blocking_pdb(2)],
            eas: vec![eas],
            in_scope: true,
            ..Default::default()
        };
        let draining = BTreeSet::new();
        let window = Duration::from_secs(60);
        let keys = objs.candidates(&draining, &BTreeSet::new(), Some((now, window)));
        assert!(keys.contains("web"), "{keys:?}");
        let settings = Settings {
            cooldown: window,
            zero_surge_override: None,
        };
        let s = step(
            "ns",
            &objs,
            &draining,
            "web",
            &Facts::default(),
            settings,
            Some(now),
        );
        assert!(
            matches!(s.action, Action::Surge { baseline: 2, .. }),
            "{:?}",
            s.action
        );
    }

    #[test]
    fn an_autoscaler_whose_deployment_is_gone_is_reverted() {
        let objs = NsObjects {
            scaled_objects: vec![scaled_object(4, Some((2, 4)))],
            in_scope: true,
            ..Default::default()
        };
        let s = run(&objs, &[], &quiet());
        assert_eq!(targets(&s), vec![(ObjKind::ScaledObject, "web".into())]);
        assert_eq!(
            op_value(&s.writes[0], "replace", "/spec/minReplicaCount"),
            Some(json!(2))
        );
        // Within the cooldown of a restart it waits.
        let fresh = Facts {
            lead_for: Duration::from_secs(5),
            ..Default::default()
        };
        assert!(run(&objs, &[], &fresh).writes.is_empty());
    }

    #[test]
    fn an_autoscaler_retargeted_to_another_kind_mid_surge_is_reverted() {
        // The HPA of a surge (min 2 -> 4) now scales a StatefulSet of the
        // same name; the Deployment it raised keeps its own markers.
        let mut h = (*hpa()).clone();
        h.metadata.annotations = ann(Some((2, 4)));
        if let Some(spec) = h.spec.as_mut() {
            spec.min_replicas = Some(4);
            spec.scale_target_ref.kind = "StatefulSet".into();
        }
        let objs = NsObjects {
            deployments: vec![dep(4, Some((2, 4)))],
            hpas: vec![Arc::new(h)],
            in_scope: true,
            ..Default::default()
        };
        let draining = BTreeSet::new();
        let keys = objs.candidates(&draining, &BTreeSet::new(), None);
        assert_eq!(
            keys.iter().map(String::as_str).collect::<Vec<_>>(),
            vec!["StatefulSet/web", "web"]
        );
        let settings = Settings {
            cooldown: Duration::from_secs(60),
            zero_surge_override: None,
        };
        let s = step(
            "ns",
            &objs,
            &draining,
            "StatefulSet/web",
            &quiet(),
            settings,
            None,
        );
        assert_eq!(targets(&s), vec![(ObjKind::Hpa, "web-hpa".into())]);
        assert_eq!(
            op_value(&s.writes[0], "replace", "/spec/minReplicas"),
            Some(json!(2))
        );
        // The Deployment's own step no longer sees the HPA.
        let s = run(&objs, &[], &quiet());
        assert_eq!(targets(&s), vec![(ObjKind::Deployment, "web".into())]);
    }

    #[test]
    fn a_surge_started_from_no_markers_tests_the_version_read() {
        // No annotations in the cache: the markers go in as a new map, which
        // would replace annotations a user added since; the resourceVersion
        // read guards that. With a map, only the value is tested.
        let plan = |annotations: Option<BTreeMap<String, String>>| {
            let mut d = (*dep(3, None)).clone();
            d.metadata.resource_version = Some("7".into());
            d.metadata.annotations = annotations;
            let objs = NsObjects {
                deployments: vec![Arc::new(d.clone())],
                pods: pods(3, "n1"),
                pdbs: vec![blocking_pdb(3)],
                in_scope: true,
                ..Default::default()
            };
            (d, run(&objs, &["n1"], &quiet()))
        };
        let (d, s) = plan(None);
        assert_eq!(targets(&s), vec![(ObjKind::Deployment, "web".into())]);
        assert_eq!(
            op_value(&s.writes[0], "test", "/metadata/resourceVersion"),
            Some(json!("7"))
        );
        let apply = |doc: &Deployment| {
            let mut v = serde_json::to_value(doc).unwrap_or_default();
            let p: json_patch::Patch =
                serde_json::from_value(Value::Array(s.writes[0].ops.clone())).expect("patch");
            json_patch::patch(&mut v, &p).map(|_| v)
        };
        let surged = apply(&d).expect("applies to the object read");
        assert_eq!(surged["spec"]["replicas"], json!(4));
        // A user's annotation came in between: the write fails, theirs stays.
        let mut theirs = d.clone();
        theirs.metadata.resource_version = Some("8".into());
        theirs.metadata.annotations = Some([("team".to_string(), "a".to_string())].into());
        assert!(apply(&theirs).is_err());

        // With a map but no markers read, the version read too: markers
        // of ours written since (and a user's scale back) are not overwritten.
        let (_, s) = plan(Some([("team".to_string(), "a".to_string())].into()));
        assert_eq!(
            op_value(&s.writes[0], "test", "/metadata/resourceVersion"),
            Some(json!("7"))
        );
        assert_eq!(
            op_value(&s.writes[0], "test", "/spec/replicas"),
            Some(json!(3))
        );
    }

    /// Every write tests the uid read: a Deployment deleted and made again
    /// under its name (`kubectl replace --force`) before the cache saw it
    /// is never given the old one's markers or value.
    #[test]
    fn every_write_tests_the_uid_read() {
        let mut d = (*dep(4, Some((3, 4)))).clone();
        d.metadata.uid = Some("old".into());
        let objs = NsObjects {
            deployments: vec![Arc::new(d.clone())],
            pods: pods(4, "n1"),
            pdbs: vec![blocking_pdb(3)],
            in_scope: true,
            ..Default::default()
        };
        let s = run(&objs, &[], &quiet());
        assert!(matches!(s.action, Action::Revert { .. }), "{:?}", s.action);
        assert!(!s.writes.is_empty());
        for w in &s.writes {
            assert_eq!(
                w.ops[0],
                json!({"op": "test", "path": "/metadata/uid", "value": "old"})
            );
        }
        let apply = |doc: &Deployment| {
            let mut v = serde_json::to_value(doc).unwrap_or_default();
            let p: json_patch::Patch =
                serde_json::from_value(Value::Array(s.writes[0].ops.clone())).expect("patch");
            json_patch::patch(&mut v, &p).map(|_| v)
        };
        assert_eq!(
            apply(&d).expect("the object read")["spec"]["replicas"],
            json!(3)
        );
        // Made again with the same replicas and markers (a manifest exported
        // mid-surge): not the object read, the write fails.
        let mut again = d.clone();
        again.metadata.uid = Some("new".into());
        assert!(apply(&again).is_err());
    }

    #[test]
    fn a_surge_left_by_the_go_project_gets_its_baseline_and_goes_back() {
        // Its older versions wrote `evictionSurgeReplicas` alone and kept the
        // baseline in the EvictionAutoScaler's status.
        let mut d = (*dep(5, None)).clone();
        d.metadata.annotations =
            Some([(crate::names::SURGE_REPLICAS.to_string(), "5".to_string())].into());
        let objs = NsObjects {
            deployments: vec![Arc::new(d)],
            eas: vec![crate::markers::tests::record("web", 3, false)],
            pods: pods(5, "n1"),
            pdbs: vec![blocking_pdb(3)],
            in_scope: true,
            ..Default::default()
        };
        let s = run(&objs, &[], &quiet());
        assert_eq!(targets(&s), vec![(ObjKind::Deployment, "web".into())]);
        let w = &s.writes[0];
        assert_eq!(op_value(w, "test", "/spec/replicas"), Some(json!(5)));
        let surge = annotation_path(crate::names::SURGE_REPLICAS);
        let original = annotation_path(crate::names::ORIGINAL_MIN_REPLICAS);
        assert_eq!(op_value(w, "test", &surge), Some(json!("5")));
        assert_eq!(op_value(w, "add", &original), Some(json!("3")));
        assert!(
            w.ops.iter().all(|o| o["op"] != "remove"),
            "not cleaned: {w:?}"
        );
        // Completed, it is a surge like ours: back to 3 once quiet.
        let completed = NsObjects {
            deployments: vec![dep(5, Some((3, 5)))],
            ..objs.clone()
        };
        let back = run(&completed, &[], &quiet());
        assert_eq!(
            op_value(&back.writes[0], "replace", "/spec/replicas"),
            Some(json!(3))
        );
        // A record this product wrote is not the Go project's: cleaned as
        // before (the surged number stays; nothing tells the baseline).
        let ours = NsObjects {
            eas: vec![crate::markers::tests::record("web", 3, true)],
            ..objs.clone()
        };
        let s = run(&ours, &[], &quiet());
        assert!(s.writes[0].ops.iter().all(|o| o["op"] == "remove"));
    }

    /// A Ready pod on `node` with `labels`, which `controller` (kind,
    /// name) controls when given.
    fn ready_pod(
        name: &str,
        node: &str,
        labels: BTreeMap<String, String>,
        controller: Option<(&str, &str)>,
    ) -> Arc<SlimPod> {
        Arc::new(SlimPod::from(&pod_wire(name, node, labels, controller)))
    }

    /// [`ready_pod`], being deleted.
    fn terminating_pod(
        name: &str,
        node: &str,
        labels: BTreeMap<String, String>,
        controller: Option<(&str, &str)>,
    ) -> Arc<SlimPod> {
        let mut w = pod_wire(name, node, labels, controller);
        w.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            Timestamp::UNIX_EPOCH,
        ));
        Arc::new(SlimPod::from(&w))
    }

    fn pod_wire(
        name: &str,
        node: &str,
        labels: BTreeMap<String, String>,
        controller: Option<(&str, &str)>,
    ) -> PodWire {
        PodWire {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                labels: Some(labels),
                owner_references: controller.map(|(kind, name)| {
                    vec![
                        k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
                            kind: kind.into(),
                            name: name.into(),
                            controller: Some(true),
                            ..Default::default()
                        },
                    ]
                }),
                ..Default::default()
            },
            spec: SlimPodSpec {
                node_name: Some(node.into()),
            },
            status: SlimPodStatus {
                phase: Some("Running".into()),
                conditions: vec![SlimCondition {
                    type_: "Ready".into(),
                    status: "True".into(),
                }],
            },
        }
    }

    /// Web's labels, with `pod-template-hash` when given.
    fn web_labels(hash: Option<&str>) -> BTreeMap<String, String> {
        let mut labels = sel().match_labels.unwrap_or_default();
        if let Some(h) = hash {
            labels.insert("pod-template-hash".into(), h.into());
        }
        labels
    }

    /// Another workload's pod that web's selector also covers (a
    /// DaemonSet's of the same chart, left on a node kept cordoned by
    /// `drain --ignore-daemonsets`) is not displaced from web: the surge
    /// goes back once quiet. One of web's own ReplicaSets there still is.
    #[test]
    fn another_workloads_pod_on_a_draining_node_holds_no_surge() {
        let mut ps = pods(4, "n1");
        ps.push(ready_pod(
            "agent-x",
            "n2",
            web_labels(None),
            Some(("DaemonSet", "agent")),
        ));
        let objs = NsObjects {
            deployments: vec![dep(4, Some((3, 4)))],
            pods: ps.clone(),
            pdbs: vec![blocking_pdb(3)],
            in_scope: true,
            ..Default::default()
        };
        let s = run(&objs, &["n2"], &quiet());
        assert_eq!(s.action, Action::Revert { baseline: 3 }, "{s:?}");
        assert_eq!(
            pods_on_draining(&objs, &["n2".to_string()].into(), "web").0,
            0
        );
        // A ReplicaSet of another name (one orphaned and adopted, say) may
        // still be web's: its pod counts.
        let mut adopted = ps.clone();
        adopted.push(ready_pod(
            "old-5d8f-a",
            "n2",
            web_labels(Some("5d8f")),
            Some(("ReplicaSet", "old-5d8f")),
        ));
        let with_adopted = NsObjects {
            pods: adopted,
            ..objs.clone()
        };
        assert!(matches!(
            run(&with_adopted, &["n2"], &quiet()).action,
            Action::Wait(_)
        ));
        // Web's own pod (its ReplicaSet web-5d8f) on n2: displaced.
        ps.push(ready_pod(
            "web-5d8f-a",
            "n2",
            web_labels(Some("5d8f")),
            Some(("ReplicaSet", "web-5d8f")),
        ));
        let objs = NsObjects { pods: ps, ..objs };
        let s = run(&objs, &["n2"], &quiet());
        assert!(matches!(s.action, Action::Wait(_)), "{s:?}");
        assert_eq!(
            pods_on_draining(&objs, &["n2".to_string()].into(), "web").0,
            1
        );
    }

    /// One PDB (tier=web, minAvailable 5) over web (2 replicas, both on the
    /// drained node) and api (surged to 4, two of its pods evicted and not
    /// yet replaced): api counts at its 4, so web surging to 3 opens the
    /// budget (7 pods). Counted by its 2 pods alone it was a false
    /// "impossible" (5 pods at most), as CI saw mid-drain.
    #[test]
    fn another_deployment_under_the_pdb_counts_at_its_scale() {
        let tier = |app: &str| -> BTreeMap<String, String> {
            [("app", app), ("tier", "web"), ("pod-template-hash", "h")]
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let with_tier = |d: Arc<Deployment>, app: &str, replicas: i32| {
            let mut d = (*d).clone();
            d.metadata.name = Some(app.into());
            let spec = d.spec.as_mut().expect("spec");
            spec.replicas = Some(replicas);
            spec.selector.match_labels = Some([("app".to_string(), app.to_string())].into());
            spec.template.metadata = Some(ObjectMeta {
                labels: Some(tier(app)),
                ..Default::default()
            });
            Arc::new(d)
        };
        let mut pdb = (*blocking_pdb(5)).clone();
        if let Some(spec) = pdb.spec.as_mut() {
            spec.selector = Some(LabelSelector {
                match_labels: Some([("tier".to_string(), "web".to_string())].into()),
                ..Default::default()
            });
        }
        let api = with_tier(dep(4, Some((3, 4))), "api", 4);
        let mut ps: Vec<_> = (0..2)
            .map(|i| {
                ready_pod(
                    &format!("web-h-{i}"),
                    "n1",
                    tier("web"),
                    Some(("ReplicaSet", "web-h")),
                )
            })
            .collect();
        let api_pods: Vec<_> = (0..2)
            .map(|i| {
                ready_pod(
                    &format!("api-h-{i}"),
                    "n2",
                    tier("api"),
                    Some(("ReplicaSet", "api-h")),
                )
            })
            .collect();
        ps.extend(api_pods);
        let objs = NsObjects {
            deployments: vec![with_tier(dep(2, None), "web", 2), api.clone()],
            pods: ps,
            pdbs: vec![Arc::new(pdb)],
            in_scope: true,
            ..Default::default()
        };
        let s = run(&objs, &["n1"], &quiet());
        assert!(
            matches!(
                s.action,
                Action::Surge {
                    baseline: 2,
                    target: 3,
                    ..
                }
            ),
            "{s:?}"
        );
        // api being deleted counts by its pods only: 2 + 3 < 6, no room.
        let mut gone = (*api).clone();
        gone.metadata.deletion_timestamp = Some(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Timestamp::UNIX_EPOCH),
        );
        let deleted = NsObjects {
            deployments: vec![objs.deployments[0].clone(), Arc::new(gone)],
            ..objs.clone()
        };
        let s = run(&deleted, &["n1"], &quiet());
        assert!(matches!(s.action, Action::Impossible { .. }), "{s:?}");
        // So is one that cannot make its pods (a quota: ReplicaFailure).
        let mut failing = (*api).clone();
        failing.status = Some(k8s_openapi::api::apps::v1::DeploymentStatus {
            conditions: Some(vec![k8s_openapi::api::apps::v1::DeploymentCondition {
                type_: "ReplicaFailure".into(),
                status: "True".into(),
                ..Default::default()
            }]),
            ..Default::default()
        });
        let quota = NsObjects {
            deployments: vec![objs.deployments[0].clone(), Arc::new(failing)],
            ..objs.clone()
        };
        let s = run(&quota, &["n1"], &quiet());
        assert!(matches!(s.action, Action::Impossible { .. }), "{s:?}");
        // A StatefulSet's pod under the PDB, terminating: it comes back
        // under its name once gone, and counts meanwhile (2 + 1 + 3 = 6).
        let mut with_db = deleted.clone();
        with_db.pods.push(terminating_pod(
            "db-0",
            "n2",
            tier("db"),
            Some(("StatefulSet", "db")),
        ));
        let s = run(&with_db, &["n1"], &quiet());
        assert!(matches!(s.action, Action::Surge { target: 3, .. }), "{s:?}");
        // A canary whose pods web's selector also covers (app=web,
        // track=canary, 4 replicas, 1 pod so far): its pods are among web's
        // own, and it still counts at its scale in the budget (2 + 3 + 4).
        let mut canary = (*with_tier(dep(4, None), "canary", 4)).clone();
        if let Some(spec) = canary.spec.as_mut() {
            let mut labels = tier("web");
            labels.insert("track".into(), "canary".into());
            spec.selector.match_labels = Some(labels.clone());
            spec.template.metadata = Some(ObjectMeta {
                labels: Some(labels),
                ..Default::default()
            });
        }
        let mut canary_pod = tier("web");
        canary_pod.insert("track".into(), "canary".into());
        let mut with_canary = deleted;
        with_canary.deployments[1] = Arc::new(canary);
        with_canary.pods = with_canary
            .pods
            .iter()
            .filter(|p| !p.name().starts_with("api"))
            .cloned()
            .collect();
        with_canary.pods.push(ready_pod(
            "canary-h-0",
            "n2",
            canary_pod,
            Some(("ReplicaSet", "canary-h")),
        ));
        let s = run(&with_canary, &["n1"], &quiet());
        assert!(matches!(s.action, Action::Surge { target: 3, .. }), "{s:?}");
    }

    /// A lone marker (its baseline removed by hand) on a Deployment that
    /// needs a surge: the clean and the surge are one patch, which the
    /// apiserver applies in order (the surge's markers added after the lone
    /// one's removal).
    #[test]
    fn a_clean_and_the_surge_after_it_are_one_write() {
        let mut d = (*dep(6, None)).clone();
        d.metadata.resource_version = Some("7".into());
        // The adoption note of an earlier episode, which the surge's write
        // removes too: removed once.
        d.metadata.annotations = Some(
            [
                (crate::names::SURGE_REPLICAS.to_string(), "6".to_string()),
                (markers::ADOPTED_DISPLACED.to_string(), "2".to_string()),
            ]
            .into(),
        );
        let mut ps = pods(3, "n1");
        ps.extend(pods(3, "n2"));
        let objs = NsObjects {
            deployments: vec![Arc::new(d.clone())],
            pods: ps,
            pdbs: vec![blocking_pdb(6)],
            in_scope: true,
            ..Default::default()
        };
        let s = run(&objs, &["n1"], &quiet());
        assert_eq!(targets(&s), vec![(ObjKind::Deployment, "web".into())]);
        assert_eq!(s.cleaned, vec![s.writes[0].target.clone()]);
        let mut doc = serde_json::to_value(&d).expect("json");
        let p: json_patch::Patch =
            serde_json::from_value(Value::Array(s.writes[0].ops.clone())).expect("a patch");
        json_patch::patch(&mut doc, &p).expect("applies");
        let after: Deployment = serde_json::from_value(doc).expect("a Deployment");
        let m = Markers::from_annotations(after.metadata.annotations.as_ref());
        assert_eq!(m.map(|m| (m.baseline, m.surged_to)), Some((6, 8)));
        assert_eq!(after.spec.and_then(|s| s.replicas), Some(8));
        assert_eq!(
            markers::adopted_displaced(after.metadata.annotations.as_ref()),
            None
        );
        // A clean with no later write to its object stays a write of its
        // own, after the others (refused for good, it holds none back).
        let other = Write {
            target: ObjKey {
                kind: ObjKind::Hpa,
                namespace: "ns".into(),
                name: "web".into(),
            },
            ops: vec![json!({"op": "remove", "path": "/metadata/annotations/x"})],
        };
        let dep_write = Write {
            target: s.writes[0].target.clone(),
            ops: vec![json!({"op": "remove", "path": "/metadata/annotations/x"})],
        };
        assert_eq!(
            fold_cleans(vec![other.clone()], vec![dep_write.clone()]),
            vec![dep_write, other],
            "nothing to fold into"
        );
    }

    #[test]
    fn malformed_markers_of_ours_are_removed_and_nothing_else() {
        let mut d = (*dep(5, None)).clone();
        d.metadata.annotations =
            Some([(crate::names::SURGE_REPLICAS.to_string(), "x".to_string())].into());
        let objs = NsObjects {
            deployments: vec![Arc::new(d)],
            in_scope: true,
            ..Default::default()
        };
        let s = run(&objs, &[], &quiet());
        assert_eq!(s.writes.len(), 1);
        assert!(s.writes[0].ops.iter().all(|o| o["op"] == "remove"));
        // Named, for the Warning Event: the baseline they held is lost.
        assert_eq!(s.cleaned, vec![s.writes[0].target.clone()]);
        // Whole markers are nothing to clean.
        let whole = NsObjects {
            deployments: vec![dep(5, Some((3, 5)))],
            ..objs
        };
        assert!(run(&whole, &[], &quiet()).cleaned.is_empty());
    }
}
