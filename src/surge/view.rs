//! What the surge step reads: a plain-data snapshot of the cluster, taken
//! from the watch caches once per pass (or built by hand in tests), with the
//! per-namespace indexes the step needs. No client, no clock of its own.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::{Namespace, Node};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::jiff::Timestamp;
use kube::core::DynamicObject;

use crate::budget::pdb_selects;
use crate::cache::{controller_of, SlimPod};
use crate::config::Behaviour;
use crate::crd::EvictionAutoScaler;
use crate::markers::Markers;
use crate::scope;
use crate::surge::step::{ObjKey, ObjKind};
use crate::surge::writer::{leave_out_copy, SurgeTarget};

/// Taints that mean a node is being drained, besides `spec.unschedulable`.
pub const DRAIN_TAINTS: [&str; 3] = [
    "node.kubernetes.io/unschedulable",
    "karpenter.sh/disrupted",
    "ToBeDeletedByClusterAutoscaler",
];

pub fn node_draining(n: &Node) -> bool {
    let spec = n.spec.as_ref();
    spec.and_then(|s| s.unschedulable).unwrap_or(false)
        || spec
            .and_then(|s| s.taints.as_ref())
            .is_some_and(|t| t.iter().any(|t| DRAIN_TAINTS.contains(&t.key.as_str())))
}

/// The cluster as one pass sees it.
#[derive(Clone, Default)]
pub struct ClusterView {
    pub deployments: Vec<Arc<Deployment>>,
    pub hpas: Vec<Arc<HorizontalPodAutoscaler>>,
    pub scaled_objects: Vec<Arc<DynamicObject>>,
    pub pdbs: Vec<Arc<PodDisruptionBudget>>,
    /// Only filled when something may need planning (see the worker).
    pub pods: Vec<Arc<SlimPod>>,
    pub nodes: Vec<Arc<Node>>,
    pub namespaces: Vec<Arc<Namespace>>,
    pub eas: Vec<Arc<EvictionAutoScaler>>,
    pub behaviour: Arc<Behaviour>,
    /// Wall clock, for the durable `lastEviction` timestamps.
    pub wall_now: Option<Timestamp>,
    /// KEDA's API is served but its ScaledObjects are not known (not listed,
    /// or their watch stale): `scaled_objects` may miss some.
    pub keda_unknown: bool,
    /// The EvictionAutoScalers are not listed yet (or their CRD is gone):
    /// a lone surge marker may be the Go project's, its baseline in one of
    /// them (`markers::legacy_surge`), so it is left as it is meanwhile.
    pub eas_unknown: bool,
}

/// One namespace's objects.
#[derive(Default, Clone)]
pub struct NsObjects {
    pub deployments: Vec<Arc<Deployment>>,
    pub hpas: Vec<Arc<HorizontalPodAutoscaler>>,
    pub scaled_objects: Vec<Arc<DynamicObject>>,
    pub pdbs: Vec<Arc<PodDisruptionBudget>>,
    pub pods: Vec<Arc<SlimPod>>,
    pub eas: Vec<Arc<EvictionAutoScaler>>,
    pub in_scope: bool,
    /// See [`ClusterView::keda_unknown`].
    pub keda_unknown: bool,
    /// See [`ClusterView::eas_unknown`].
    pub eas_unknown: bool,
}

/// A [`ClusterView`] indexed by namespace, with the draining nodes.
pub struct Indexed {
    pub namespaces: HashMap<String, NsObjects>,
    pub draining: BTreeSet<String>,
    pub behaviour: Arc<Behaviour>,
    pub wall_now: Option<Timestamp>,
}

fn ns_of(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> String {
    meta.namespace.clone().unwrap_or_default()
}

impl ClusterView {
    /// Whether a pass may have anything to do: an object carries our
    /// markers (a surge to keep or revert: without this no surge could be
    /// reverted), a blocked eviction was signalled within `window` (in
    /// memory, `signalled`, or durably in an EvictionAutoScaler's
    /// `lastEviction`), or a node is draining. When false the worker skips
    /// the pass and does not read the pods.
    pub fn may_need_a_step(&self, signalled: bool, window: std::time::Duration) -> bool {
        let marked =
            self.deployments
                .iter()
                .any(|d| Markers::any_present(d.metadata.annotations.as_ref()))
                || self.hpas.iter().any(|h| {
                    !hpa_is_kedas(h) && Markers::any_present(h.metadata.annotations.as_ref())
                })
                || self
                    .scaled_objects
                    .iter()
                    .any(|s| Markers::any_present(s.metadata.annotations.as_ref()));
        let wall = self.wall_now.unwrap_or_else(Timestamp::now);
        let recent_durable = self.eas.iter().any(|e| {
            e.spec
                .last_eviction
                .as_ref()
                .and_then(|l| l.eviction_time.as_ref())
                .is_some_and(|t| (wall - t.0).get_seconds() <= window.as_secs() as i64)
        });
        marked || signalled || recent_durable || !self.draining_nodes().is_empty()
    }

    pub fn draining_nodes(&self) -> BTreeSet<String> {
        self.nodes
            .iter()
            .filter(|n| node_draining(n))
            .filter_map(|n| n.metadata.name.clone())
            .collect()
    }

    pub fn index(self) -> Indexed {
        let draining = self.draining_nodes();
        let mut m: HashMap<String, NsObjects> = HashMap::new();
        for d in self.deployments {
            m.entry(ns_of(&d.metadata)).or_default().deployments.push(d);
        }
        for h in self.hpas {
            m.entry(ns_of(&h.metadata)).or_default().hpas.push(h);
        }
        for so in self.scaled_objects {
            m.entry(ns_of(&so.metadata))
                .or_default()
                .scaled_objects
                .push(so);
        }
        for p in self.pdbs {
            m.entry(ns_of(&p.metadata)).or_default().pdbs.push(p);
        }
        for p in self.pods {
            m.entry(p.namespace().to_string()).or_default().pods.push(p);
        }
        for e in self.eas {
            m.entry(ns_of(&e.metadata)).or_default().eas.push(e);
        }
        let annotations: HashMap<String, Arc<Namespace>> = self
            .namespaces
            .into_iter()
            .filter_map(|n| n.metadata.name.clone().map(|name| (name, n)))
            .collect();
        for (name, objs) in m.iter_mut() {
            // A namespace not in the cache yet (its watch lags the others'):
            // its opt-out is unknown, so no new surge until it is there.
            // Surges in place revert whatever the scope.
            objs.in_scope = annotations.get(name).is_some_and(|n| {
                scope::namespace_scope(name, n.metadata.annotations.as_ref(), &self.behaviour)
                    .enabled
            });
            objs.keda_unknown = self.keda_unknown;
            objs.eas_unknown = self.eas_unknown;
        }
        Indexed {
            namespaces: m,
            draining,
            behaviour: self.behaviour,
            wall_now: self.wall_now,
        }
    }
}

/// The Deployment an HPA's `scaleTargetRef` names, if it names one.
pub fn hpa_target(h: &HorizontalPodAutoscaler) -> Option<&str> {
    let t = &h.spec.as_ref()?.scale_target_ref;
    (t.kind == "Deployment").then_some(t.name.as_str())
}

/// The Deployment a ScaledObject's `scaleTargetRef` names (kind defaults to
/// Deployment, any case).
pub fn scaled_object_target(so: &DynamicObject) -> Option<&str> {
    let t = &so.data["spec"]["scaleTargetRef"];
    let kind = t["kind"].as_str().unwrap_or("Deployment");
    if kind.eq_ignore_ascii_case("deployment") {
        t["name"].as_str()
    } else {
        None
    }
}

/// The key under which the surge worker steps an autoscaler: the name of
/// the Deployment it targets, or `Kind/name` when it targets another kind
/// (no Deployment name has a `/`). An autoscaler retargeted away from its
/// Deployment mid-surge is then stepped alone, as for a Deployment that is
/// gone, and its surge is reverted instead of stranded.
pub fn hpa_carrier(h: &HorizontalPodAutoscaler) -> Option<String> {
    let t = &h.spec.as_ref()?.scale_target_ref;
    Some(if t.kind == "Deployment" {
        t.name.clone()
    } else {
        format!("{}/{}", t.kind, t.name)
    })
}

/// [`hpa_carrier`] for a ScaledObject.
pub fn scaled_object_carrier(so: &DynamicObject) -> Option<String> {
    let t = &so.data["spec"]["scaleTargetRef"];
    let name = t["name"].as_str()?;
    Some(match t["kind"].as_str().unwrap_or("Deployment") {
        k if k.eq_ignore_ascii_case("deployment") => name.to_string(),
        k => format!("{k}/{name}"),
    })
}

/// Is this HPA KEDA's own (controlled by a ScaledObject)?
pub fn hpa_is_kedas(h: &HorizontalPodAutoscaler) -> bool {
    controller_of(&h.metadata).is_some_and(|o| o.kind == "ScaledObject")
}

/// Is this ScaledObject paused by its annotations, as KEDA's operator reads
/// them (`NeedToBePausedByAnnotation`)? `paused-replicas` once KEDA has
/// applied it (its status records the count), or `paused` true or not a
/// boolean. Paused, KEDA deletes its HPA and stops scaling: nothing holds
/// the Deployment at the ScaledObject's minimum any more.
pub fn scaled_object_paused(so: &DynamicObject) -> bool {
    let ann = so.metadata.annotations.as_ref();
    let get = |k: &str| ann.and_then(|a| a.get(k));
    if get("autoscaling.keda.sh/paused-replicas").is_some() {
        return !so.data["status"]["pausedReplicaCount"].is_null();
    }
    match get("autoscaling.keda.sh/paused").map(String::as_str) {
        None => false,
        // Go's strconv.ParseBool; anything else pauses too.
        Some("0" | "f" | "F" | "false" | "FALSE" | "False") => false,
        Some(_) => true,
    }
}

/// What KEDA does with a paused ScaledObject's Deployment now
/// ([`scaled_object_hold`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KedaHold {
    /// Not paused, or paused while KEDA's HPA still lifts the Deployment to
    /// a minimum: the ScaledObject's minimum acts (the PDB floor, the
    /// surge's applier).
    Acting,
    /// Paused and KEDA's HPA gone: nothing holds the Deployment anywhere.
    Idle,
    /// Paused with `paused-replicas` and every HPA of KEDA's over it at a
    /// minimum and maximum of that count (at least 1): KEDA holds the
    /// Deployment at exactly this many replicas, whatever minimum is
    /// written, so no surge lasts.
    HeldAt(i32),
}

/// What KEDA does with `so`'s Deployment ([`KedaHold`]). Paused, KEDA's
/// operator deletes its HPA, but it may lag or be down (a drain evicts it
/// too), and with `paused-replicas: N` it makes its HPA at a minimum and
/// maximum of N first and may leave it standing (controllers/keda/hpa.go
/// `newHPAForScaledObject`, scaledobject_controller.go: once the Deployment
/// is at N it returns before deleting it; kedacore/keda#7663). Any HPA of
/// KEDA's in its namespace that it controls or that targets its Deployment
/// counts. `hpas`: the namespace's, or more (matched by namespace).
pub fn scaled_object_hold<'a>(
    so: &DynamicObject,
    hpas: impl IntoIterator<Item = &'a HorizontalPodAutoscaler>,
) -> KedaHold {
    if !scaled_object_paused(so) {
        return KedaHold::Acting;
    }
    let (ns, name, target) = (
        so.metadata.namespace.as_deref(),
        so.metadata.name.as_deref(),
        scaled_object_target(so),
    );
    let kedas: Vec<&HorizontalPodAutoscaler> = hpas
        .into_iter()
        .filter(|h| {
            h.metadata.namespace.as_deref() == ns
                && hpa_is_kedas(h)
                && (controller_of(&h.metadata).map(|o| o.name.as_str()) == name
                    || (target.is_some() && hpa_target(h) == target))
        })
        .collect();
    if kedas.is_empty() {
        return KedaHold::Idle;
    }
    // KEDA's `GetPausedReplicaCount` (an int32) and its HPA's bounds: a
    // minimum of 0 is invalid on an HPA, so KEDA writes 1. The count asked
    // now, or the one KEDA last applied (its status): a count changed while
    // KEDA's operator is down leaves its HPA at the one before, which holds
    // the Deployment all the same.
    let Some(asked) = paused_replicas(so) else {
        return KedaHold::Acting;
    };
    let applied = so.data["status"]["pausedReplicaCount"]
        .as_i64()
        .and_then(|v| i32::try_from(v).ok());
    let bounds = |h: &HorizontalPodAutoscaler| {
        h.spec
            .as_ref()
            .map(|s| (s.min_replicas.unwrap_or(1), s.max_replicas))
    };
    let Some((min, max)) = bounds(kedas[0]) else {
        return KedaHold::Acting;
    };
    let a_count = |n: i32| n.max(1) == min;
    if min == max
        && (a_count(asked) || applied.is_some_and(a_count))
        && kedas.iter().all(|h| bounds(h) == Some((min, max)))
    {
        KedaHold::HeldAt(min)
    } else {
        KedaHold::Acting
    }
}

/// `autoscaling.keda.sh/paused-replicas` as KEDA's `GetPausedReplicaCount`
/// reads it (an int32); `None` when absent or not a number.
pub fn paused_replicas(so: &DynamicObject) -> Option<i32> {
    so.metadata
        .annotations
        .as_ref()?
        .get("autoscaling.keda.sh/paused-replicas")?
        .parse()
        .ok()
}

/// The PDB floor ScaledObject `so` sets for its Deployment: its minimum
/// (the recorded baseline while surged), up to the count KEDA holds the
/// Deployment at; none once idle, when the Deployment's own replicas are
/// ([`scaled_object_hold`]). A minimum that is no int32 (KEDA's schema
/// refuses one) counts as 0.
pub fn scaled_object_floor<'a>(
    so: &DynamicObject,
    hpas: impl IntoIterator<Item = &'a HorizontalPodAutoscaler>,
) -> Option<i32> {
    let held = match scaled_object_hold(so, hpas) {
        KedaHold::Idle => return None,
        KedaHold::HeldAt(n) => Some(n),
        KedaHold::Acting => None,
    };
    let raw = so.data["spec"]["minReplicaCount"]
        .as_i64()
        .and_then(|v| i32::try_from(v).ok())
        .unwrap_or(0);
    let min = Markers::baseline_or(so.metadata.annotations.as_ref(), raw);
    Some(held.map_or(min, |n| min.min(n)))
}

/// A ScaledObject whose minimum lifts nothing ([`scaled_object_hold`] not
/// `Acting`): paused with its HPA gone, or held by KEDA at its paused
/// count. Its minimum is then no applier and no baseline for the
/// Deployment; as a PDB floor it counts not at all once idle, and only up
/// to the count while held ([`scaled_object_floor`]).
pub fn scaled_object_idle<'a>(
    so: &DynamicObject,
    hpas: impl IntoIterator<Item = &'a HorizontalPodAutoscaler>,
) -> bool {
    scaled_object_hold(so, hpas) != KedaHold::Acting
}

/// KEDA's HPA has not yet followed its ScaledObject: its minimum is not
/// the ScaledObject's (KEDA writes at least 1). KEDA's operator copies a
/// reverted minimum over late; lowering the Deployment before it has, the
/// HPA controller lifts it straight back. Read by the worker's revert and
/// by `uninstall`.
pub fn kedas_hpa_lags(hpa_min: i64, so_min: i64) -> bool {
    hpa_min != so_min.max(1)
}

/// ScaledObject `name` in `ns` over Deployment `target` at minimum `min`. A
/// fixture of the tests of the worker, the reconciler, the webhook and doctor.
#[cfg(test)]
pub fn scaled_object_of(ns: &str, name: &str, target: &str, min: i64) -> DynamicObject {
    let mut so = DynamicObject::new(name, &crate::cache::keda_resource()).within(ns);
    so.data =
        serde_json::json!({"spec": {"minReplicaCount": min, "scaleTargetRef": {"name": target}}});
    so
}

/// `so` paused with `autoscaling.keda.sh/paused-replicas: count`, applied by
/// KEDA (the count in its status). A fixture of the tests.
#[cfg(test)]
pub fn paused_at(mut so: DynamicObject, count: i32) -> DynamicObject {
    so.metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(
            "autoscaling.keda.sh/paused-replicas".to_string(),
            count.to_string(),
        );
    so.data["status"] = serde_json::json!({ "pausedReplicaCount": count });
    so
}

/// KEDA's HPA for Deployment `dep` in namespace `ns`, as KEDA's operator
/// makes it: controlled by the ScaledObject of the same name. A fixture of
/// the tests of the worker, the reconciler and the model.
#[cfg(test)]
pub fn kedas_hpa(ns: &str, dep: &str, min: i32, max: i32) -> HorizontalPodAutoscaler {
    use k8s_openapi::api::autoscaling::v2::{
        CrossVersionObjectReference, HorizontalPodAutoscalerSpec,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
    HorizontalPodAutoscaler {
        metadata: ObjectMeta {
            name: Some(format!("keda-hpa-{dep}")),
            namespace: Some(ns.into()),
            owner_references: Some(vec![OwnerReference {
                api_version: "keda.sh/v1alpha1".into(),
                kind: "ScaledObject".into(),
                name: dep.into(),
                uid: format!("so-uid-{dep}"),
                controller: Some(true),
                ..Default::default()
            }]),
            ..Default::default()
        },
        spec: Some(HorizontalPodAutoscalerSpec {
            min_replicas: Some(min),
            max_replicas: max,
            scale_target_ref: CrossVersionObjectReference {
                api_version: Some("apps/v1".into()),
                kind: "Deployment".into(),
                name: dep.into(),
            },
            ..Default::default()
        }),
        status: None,
    }
}

impl NsObjects {
    /// Deployments worth a step now: pods on draining nodes, a recent
    /// signal, or any object of ours carrying surge annotations (also an
    /// autoscaler whose Deployment is gone, so nothing is stranded).
    pub fn candidates(
        &self,
        draining: &BTreeSet<String>,
        signalled: &BTreeSet<String>,
        durable: Option<(Timestamp, std::time::Duration)>,
    ) -> BTreeSet<String> {
        let mut out: BTreeSet<String> = signalled.clone();
        // Blocked evictions answered by any replica (the durable signal).
        if let Some((now, window)) = durable {
            for e in &self.eas {
                let recent = e
                    .spec
                    .last_eviction
                    .as_ref()
                    .and_then(|l| l.eviction_time.as_ref())
                    .is_some_and(|t| (now - t.0).get_seconds() <= window.as_secs() as i64);
                if recent {
                    out.insert(e.spec.target_name.clone());
                    out.extend(self.selecting_denied_pod(e));
                }
            }
        }
        for d in &self.deployments {
            let Some(name) = d.metadata.name.as_deref() else {
                continue;
            };
            if Markers::any_present(d.metadata.annotations.as_ref()) {
                out.insert(name.to_string());
            }
        }
        // KEDA's HPA carries copies of its ScaledObject's markers (step.rs).
        for h in self.hpas.iter().filter(|h| !hpa_is_kedas(h)) {
            if Markers::any_present(h.metadata.annotations.as_ref()) {
                out.extend(hpa_carrier(h));
            }
        }
        for so in &self.scaled_objects {
            if Markers::any_present(so.metadata.annotations.as_ref()) {
                out.extend(scaled_object_carrier(so));
            }
        }
        if !draining.is_empty() {
            let on_draining: Vec<&SlimPod> = self
                .pods
                .iter()
                .filter(|p| p.node().is_some_and(|n| draining.contains(n)))
                .map(|p| p.as_ref())
                .collect();
            if !on_draining.is_empty() {
                for d in &self.deployments {
                    let sel = d.spec.as_ref().map(|s| &s.selector);
                    if on_draining
                        .iter()
                        .any(|p| crate::budget::pdb_selects(sel, p.labels()))
                    {
                        if let Some(name) = d.metadata.name.clone() {
                            out.insert(name);
                        }
                    }
                }
            }
        }
        out
    }

    /// Puts a freshly read object (JSON as the apiserver sent it) in place
    /// of the cached one; `None` removes it (gone). An object that does not
    /// decode is left as cached. Copies of our markers someone else wrote
    /// are left out, as the caches leave them out.
    pub fn replace(&mut self, key: &ObjKey, fresh: Option<serde_json::Value>) {
        fn swap<K: serde::de::DeserializeOwned + SurgeTarget>(
            list: &mut Vec<Arc<K>>,
            name: &str,
            name_of: impl Fn(&K) -> Option<&str>,
            fresh: Option<serde_json::Value>,
        ) {
            let decoded = match fresh {
                None => None,
                Some(v) => match serde_json::from_value::<K>(v) {
                    Ok(mut k) => {
                        leave_out_copy(&mut k);
                        Some(k)
                    }
                    Err(_) => return,
                },
            };
            list.retain(|o| name_of(o) != Some(name));
            if let Some(k) = decoded {
                list.push(Arc::new(k));
            }
        }
        match key.kind {
            ObjKind::Deployment => swap(
                &mut self.deployments,
                &key.name,
                |d: &Deployment| d.metadata.name.as_deref(),
                fresh,
            ),
            ObjKind::Hpa => swap(
                &mut self.hpas,
                &key.name,
                |h: &HorizontalPodAutoscaler| h.metadata.name.as_deref(),
                fresh,
            ),
            ObjKind::ScaledObject => swap(
                &mut self.scaled_objects,
                &key.name,
                |o: &DynamicObject| o.metadata.name.as_deref(),
                fresh,
            ),
        }
    }

    /// The Deployments whose selector selects the pod of an
    /// EvictionAutoScaler's `lastEviction`. A PDB over several Deployments
    /// has one EvictionAutoScaler, which targets one of them; the denied pod
    /// may be another's.
    pub fn selecting_denied_pod(&self, e: &EvictionAutoScaler) -> Vec<String> {
        let Some(le) = e.spec.last_eviction.as_ref() else {
            return Vec::new();
        };
        let Some(pod) = self.pods.iter().find(|p| p.name() == le.pod_name) else {
            // Gone (evicted since): a Deployment's pod is named
            // `<deployment>-<template hash>-<suffix>`, so its signal keeps
            // counting for the cooldown after the pod left.
            let mut parts = le.pod_name.rsplitn(3, '-');
            let dep = parts.nth(2).filter(|d| self.deployment(d).is_some());
            return dep.map(|d| vec![d.to_string()]).unwrap_or_default();
        };
        self.deployments
            .iter()
            .filter(|d| pdb_selects(d.spec.as_ref().map(|s| &s.selector), pod.labels()))
            .filter_map(|d| d.metadata.name.clone())
            .collect()
    }

    pub fn deployment(&self, name: &str) -> Option<&Arc<Deployment>> {
        self.deployments
            .iter()
            .find(|d| d.metadata.name.as_deref() == Some(name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::names;
    use serde_json::json;
    use std::time::Duration;

    fn obj<T: serde::de::DeserializeOwned>(v: serde_json::Value) -> Arc<T> {
        Arc::new(serde_json::from_value(v).expect("test object"))
    }

    fn marked(kind: &str, api: &str) -> serde_json::Value {
        json!({"apiVersion": api, "kind": kind, "metadata": {"name": "web", "namespace": "ns",
               "annotations": {names::SURGE_REPLICAS: "4"}}})
    }

    fn ea(seconds_ago: i64, now: Timestamp) -> Arc<EvictionAutoScaler> {
        let t = now - k8s_openapi::jiff::SignedDuration::from_secs(seconds_ago);
        obj(
            json!({"apiVersion": "eviction-autoscaler.azure.com/v1", "kind": "EvictionAutoScaler",
            "metadata": {"name": "web", "namespace": "ns"},
            "spec": {"targetName": "web", "lastEviction": {"podName": "web-1", "evictionTime": t.to_string()}}}),
        )
    }

    /// A fresh read after a conflict (the tool's sync just wrote its copy
    /// of our markers) is read as the caches read it: the copy left out,
    /// the note in its place; our own markers stay.
    #[test]
    fn a_fresh_read_leaves_out_a_copy_of_our_markers_as_the_caches_do() {
        let deployment = |manager: &str| {
            json!({"apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "web", "namespace": "ns",
                    "annotations": {names::SURGE_REPLICAS: "4", names::ORIGINAL_MIN_REPLICAS: "3"},
                    "managedFields": [{"manager": manager, "operation": "Apply",
                        "fieldsType": "FieldsV1", "fieldsV1": {
                            "f:metadata": {"f:annotations": {
                                format!("f:{}", names::SURGE_REPLICAS): {},
                                format!("f:{}", names::ORIGINAL_MIN_REPLICAS): {}}},
                            "f:spec": {"f:replicas": {}}}}]},
                "spec": {"replicas": 4, "selector": {}, "template": {}}})
        };
        let key = ObjKey {
            kind: ObjKind::Deployment,
            namespace: "ns".into(),
            name: "web".into(),
        };
        let mut objs = NsObjects::default();
        let mut read = |manager: &str| {
            objs.replace(&key, Some(deployment(manager)));
            assert_eq!(objs.deployments.len(), 1);
            let a = objs.deployments[0].metadata.annotations.clone();
            let a = a.unwrap_or_default();
            (
                Markers::from_annotations(Some(&a)),
                a.get(crate::markers::FOREIGN).cloned(),
            )
        };
        assert_eq!(read("gitops"), (None, Some("gitops".to_string())));
        let ours = Markers {
            baseline: 3,
            surged_to: 4,
        };
        assert_eq!(read(names::MANAGER), (Some(ours), None));
    }

    /// What KEDA does with a ScaledObject's Deployment, from its pause
    /// annotations and KEDA's HPAs over it.
    #[test]
    fn a_paused_scaled_object_is_idle_held_at_its_count_or_still_acting() {
        let so = |annotations: &[(&str, &str)], paused_count: Option<i64>| {
            let mut so = scaled_object_of("ns", "web", "web", 3);
            so.metadata.annotations = Some(
                annotations
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            );
            if let Some(n) = paused_count {
                so.data["status"] = serde_json::json!({"pausedReplicaCount": n});
            }
            so
        };
        let replicas = |n: &'static str| [("autoscaling.keda.sh/paused-replicas", n)];
        let paused = [("autoscaling.keda.sh/paused", "true")];
        let mut elsewhere = kedas_hpa("ns", "web", 2, 2);
        elsewhere.metadata.namespace = Some("other".into());
        let mut standalone = kedas_hpa("ns", "web", 2, 2);
        standalone.metadata.owner_references = None;
        let mut by_target = kedas_hpa("ns", "web", 2, 2);
        by_target
            .metadata
            .owner_references
            .iter_mut()
            .flatten()
            .for_each(|o| {
                o.name = "renamed".into();
            });
        for (so, hpas, want, why) in [
            (
                so(&[], None),
                vec![kedas_hpa("ns", "web", 3, 9)],
                KedaHold::Acting,
                "not paused",
            ),
            (
                so(&paused, None),
                vec![],
                KedaHold::Idle,
                "paused, HPA gone",
            ),
            (
                so(&paused, None),
                vec![kedas_hpa("ns", "web", 3, 9)],
                KedaHold::Acting,
                "paused, KEDA's HPA not deleted yet",
            ),
            (
                so(&paused, None),
                vec![kedas_hpa("ns", "web", 2, 2)],
                KedaHold::Acting,
                "paused alone makes no hold at a count",
            ),
            (
                so(&replicas("2"), Some(2)),
                vec![kedas_hpa("ns", "web", 2, 2)],
                KedaHold::HeldAt(2),
                "paused-replicas 2, KEDA's HPA at 2 and 2",
            ),
            (
                so(&replicas("0"), Some(0)),
                vec![kedas_hpa("ns", "web", 1, 1)],
                KedaHold::HeldAt(1),
                "paused-replicas 0: KEDA's HPA at 1 (its least minimum)",
            ),
            (
                so(&replicas("2"), Some(2)),
                vec![kedas_hpa("ns", "web", 3, 9)],
                KedaHold::Acting,
                "KEDA's HPA not made at the count yet",
            ),
            (
                so(&replicas("2"), Some(2)),
                vec![kedas_hpa("ns", "web", 2, 2), kedas_hpa("ns", "web", 3, 9)],
                KedaHold::Acting,
                "one of KEDA's HPAs still lifts to 3",
            ),
            (
                so(&replicas("2"), None),
                vec![kedas_hpa("ns", "web", 2, 2)],
                KedaHold::Acting,
                "paused-replicas KEDA has not applied",
            ),
            (
                so(&replicas("5"), Some(2)),
                vec![kedas_hpa("ns", "web", 2, 2)],
                KedaHold::HeldAt(2),
                "the count changed to 5 while KEDA's operator is down: still held at 2",
            ),
            (
                so(&replicas("5"), Some(2)),
                vec![kedas_hpa("ns", "web", 3, 3)],
                KedaHold::Acting,
                "KEDA's HPA at neither count",
            ),
            (
                so(&replicas("2"), Some(2)),
                vec![kedas_hpa("ns", "web", 2, 2), kedas_hpa("ns", "web", 5, 5)],
                KedaHold::Acting,
                "two HPAs of KEDA's at different counts",
            ),
            (
                so(&replicas("two"), Some(2)),
                vec![kedas_hpa("ns", "web", 2, 2)],
                KedaHold::Acting,
                "not a number: KEDA makes no HPA at it",
            ),
            (
                so(&replicas("2"), Some(2)),
                vec![by_target],
                KedaHold::HeldAt(2),
                "KEDA's HPA over its Deployment",
            ),
            (
                so(&replicas("2"), Some(2)),
                vec![elsewhere, standalone],
                KedaHold::Idle,
                "another namespace's, and a standalone HPA, are not KEDA's HPA",
            ),
        ] {
            let got = scaled_object_hold(&so, &hpas);
            assert_eq!(got, want, "{why}");
            assert_eq!(
                scaled_object_idle(&so, &hpas),
                want != KedaHold::Acting,
                "{why}"
            );
        }
    }

    /// A namespace whose objects are cached before the namespace itself
    /// may surge only once it is there (it may carry the opt-out).
    #[test]
    fn a_namespace_not_cached_yet_may_not_surge() {
        let view = |namespaces: Vec<Arc<Namespace>>| ClusterView {
            deployments: vec![obj(json!({"metadata": {"name": "web", "namespace": "ns"}}))],
            namespaces,
            behaviour: Arc::new(Behaviour {
                enabled_by_default: true,
                ..Behaviour::default()
            }),
            ..Default::default()
        };
        assert!(!view(vec![]).index().namespaces["ns"].in_scope);
        let ns = obj(json!({"metadata": {"name": "ns"}}));
        assert!(view(vec![ns]).index().namespaces["ns"].in_scope);
        let out = obj(json!({"metadata": {"name": "ns",
            "annotations": {names::ENABLE: "false"}}}));
        assert!(!view(vec![out]).index().namespaces["ns"].in_scope);
    }

    /// The worker's idle skip: a pass runs whenever a surge could exist or
    /// be needed. Missing any of these would strand a surge (markers) or
    /// ignore a drain (signals, nodes).
    #[test]
    fn a_pass_is_skipped_only_when_nothing_is_marked_signalled_or_draining() {
        let now = Timestamp::now();
        let window = Duration::from_secs(120);
        let idle = ClusterView {
            deployments: vec![obj(json!({"metadata": {"name": "web", "namespace": "ns",
                "annotations": {"unrelated": "1"}}}))],
            nodes: vec![obj(json!({"metadata": {"name": "n1"}}))],
            eas: vec![ea(600, now)],
            wall_now: Some(now),
            ..Default::default()
        };
        assert!(!idle.may_need_a_step(false, window), "nothing to do");
        assert!(idle.may_need_a_step(true, window), "a signal in memory");

        let cases: Vec<(&str, ClusterView)> = vec![
            (
                "marked Deployment",
                ClusterView {
                    deployments: vec![obj(marked("Deployment", "apps/v1"))],
                    ..idle.clone()
                },
            ),
            (
                "marked HPA",
                ClusterView {
                    hpas: vec![obj(marked("HorizontalPodAutoscaler", "autoscaling/v2"))],
                    ..idle.clone()
                },
            ),
            (
                "marked ScaledObject",
                ClusterView {
                    scaled_objects: vec![obj(marked("ScaledObject", "keda.sh/v1alpha1"))],
                    ..idle.clone()
                },
            ),
            (
                "durable signal inside the window",
                ClusterView {
                    eas: vec![ea(30, now)],
                    ..idle.clone()
                },
            ),
            (
                "cordoned node",
                ClusterView {
                    nodes: vec![obj(
                        json!({"metadata": {"name": "n1"}, "spec": {"unschedulable": true}}),
                    )],
                    ..idle.clone()
                },
            ),
            (
                "drain taint",
                ClusterView {
                    nodes: vec![obj(json!({"metadata": {"name": "n1"}, "spec": {"taints": [
                    {"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}]}}))],
                    ..idle.clone()
                },
            ),
        ];
        for (what, v) in cases {
            assert!(v.may_need_a_step(false, window), "{what}");
        }
        // Only the adoption note left (a marker the revert also clears).
        let adopted = ClusterView {
            deployments: vec![obj(json!({"metadata": {"name": "web", "namespace": "ns",
                "annotations": {Markers::CLEAR[2].0: "3"}}}))],
            ..idle.clone()
        };
        assert!(adopted.may_need_a_step(false, window), "adoption note");
    }
}
