//! The surge worker (leader only): finds the Deployments that have displaced
//! pods, an active surge, or a recent signal; asks the pure planner what to do
//! for each; and writes the result. One pass at a time, so there is never more
//! than one writer per Deployment. Markers (baseline and target) go in the
//! same write as the replica change, so a restart at any moment resumes from them.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::PatchParams;
use kube::core::DynamicObject;
use kube::runtime::events::EventType;
use kube::{Api, Client};
use serde_json::json;
use tokio::sync::watch;

use crate::budget::pdb_selects;
use crate::cache::{controller_of, keda_resource, Cache, SlimPod};
use crate::crd::EvictionAutoScaler;
use crate::metrics::{ControllerLabel, Metrics};
use crate::names;
use crate::patch::{annotation_ops, deployment_revert_ops, guarded_set, json_patch};
use crate::pdb::{hpa_for, matching_pdbs};
use crate::reconcile::{by_namespace, object_ref, DegradedReasons, Reconciler};
use crate::surge::plan::{self, Action, Applier, Markers, PodState, Snapshot, SurgeKind};
use crate::surge::signals::SignalBook;

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

fn markers_of(ann: Option<&BTreeMap<String, String>>) -> Option<Markers> {
    Markers::from_annotations(ann)
}

/// The stores as read once at the start of a pass, by namespace.
struct PassView {
    pods: HashMap<String, Vec<Arc<SlimPod>>>,
    pdbs: HashMap<String, Vec<Arc<PodDisruptionBudget>>>,
    eas: HashMap<String, Vec<Arc<EvictionAutoScaler>>>,
}

/// Which object carries the surge for a Deployment.
enum Target {
    Deployment,
    Hpa(Arc<HorizontalPodAutoscaler>),
    Keda(Arc<DynamicObject>),
    Conflict,
}

pub struct Worker {
    pub cache: Cache,
    pub client: Client,
    pub metrics: Arc<Metrics>,
    pub signals: SignalBook,
    pub degraded: DegradedReasons,
    /// For Events (shares the reconciler's recorder and dedup).
    pub events: Arc<Reconciler>,
    started: std::sync::Mutex<BTreeMap<(String, String), Instant>>,
}

impl Worker {
    pub fn new(
        cache: Cache,
        client: Client,
        metrics: Arc<Metrics>,
        signals: SignalBook,
        degraded: DegradedReasons,
        events: Arc<Reconciler>,
    ) -> Self {
        Worker {
            cache,
            client,
            metrics,
            signals,
            degraded,
            events,
            started: std::sync::Mutex::new(BTreeMap::new()),
        }
    }

    pub async fn run(self, mut leader: watch::Receiver<bool>) {
        let mut changed = self.cache.changed.clone();
        let wake = self.signals.wake.clone();
        loop {
            if *leader.borrow() && self.cache.synced() {
                self.pass().await;
            }
            // Waking on every watch event would mean a pass per pod update;
            // 200 ms batches them while keeping the drain fast.
            tokio::time::sleep(Duration::from_millis(200)).await;
            tokio::select! {
                _ = changed.changed() => {},
                _ = wake.notified() => {},
                _ = leader.changed() => {},
                _ = tokio::time::sleep(Duration::from_secs(1)) => {},
            }
        }
    }

    /// (namespace, Deployment) pairs worth planning for now.
    fn candidates(
        &self,
        draining: &BTreeSet<String>,
        pods: &[Arc<SlimPod>],
        eas: &[Arc<EvictionAutoScaler>],
        now: Instant,
    ) -> BTreeSet<(String, String)> {
        let mut out = BTreeSet::new();
        if !draining.is_empty() {
            for pod in pods {
                if pod
                    .spec
                    .node_name
                    .as_ref()
                    .is_some_and(|n| draining.contains(n))
                {
                    if let Some(d) = self.cache.owning_deployment(pod) {
                        if let (Some(ns), Some(name)) =
                            (d.metadata.namespace.clone(), d.metadata.name.clone())
                        {
                            out.insert((ns, name));
                        }
                    }
                }
            }
        }
        let window = self.cache.behaviour.cooldown;
        out.extend(
            self.signals
                .recent(window.max(Duration::from_secs(1)) * 2, now),
        );
        for d in self.cache.deployments.state() {
            let has = markers_of(d.metadata.annotations.as_ref()).is_some();
            if has {
                if let (Some(ns), Some(name)) =
                    (d.metadata.namespace.clone(), d.metadata.name.clone())
                {
                    out.insert((ns, name));
                }
            }
        }
        for h in self.cache.hpas.state() {
            if markers_of(h.metadata.annotations.as_ref()).is_some() {
                if let (Some(ns), Some(s)) = (h.metadata.namespace.clone(), h.spec.as_ref()) {
                    out.insert((ns, s.scale_target_ref.name.clone()));
                }
            }
        }
        // Durable signals written by other replicas.
        for e in eas {
            let recent = e
                .spec
                .last_eviction
                .as_ref()
                .and_then(|l| l.eviction_time.as_ref())
                .is_some_and(|t| age(t) <= window.as_secs() as i64 * 2);
            if recent {
                if let Some(ns) = e.metadata.namespace.clone() {
                    out.insert((ns, e.spec.target_name.clone()));
                }
            }
        }
        out
    }

    pub async fn pass(&self) {
        let now = Instant::now();
        let draining: BTreeSet<String> = self
            .cache
            .nodes
            .state()
            .iter()
            .filter(|n| node_draining(n))
            .filter_map(|n| n.metadata.name.clone())
            .collect();
        let mut active = 0i64;
        let mut surge_replicas = 0i64;
        // Each store is read once per pass; pods only when a node drains or
        // something is to be planned.
        let eas = self.cache.eas.state();
        let mut pods = if draining.is_empty() {
            Vec::new()
        } else {
            self.cache.pods.state()
        };
        let candidates = self.candidates(&draining, &pods, &eas, now);
        if !candidates.is_empty() && draining.is_empty() {
            pods = self.cache.pods.state();
        }
        let namespaces: BTreeSet<&str> = candidates.iter().map(|(ns, _)| ns.as_str()).collect();
        pods.retain(|p| {
            p.metadata
                .namespace
                .as_deref()
                .is_some_and(|n| namespaces.contains(n))
        });
        let view = PassView {
            pods: by_namespace(pods),
            pdbs: by_namespace(self.cache.pdbs.state()),
            eas: by_namespace(eas),
        };
        for (ns, name) in &candidates {
            let (ns, name) = (ns.clone(), name.clone());
            match self.plan_one(&ns, &name, &draining, now, &view).await {
                Ok(Some(m)) => {
                    active += 1;
                    surge_replicas += i64::from((m.surged_to - m.baseline).max(0));
                }
                Ok(None) => {}
                Err(e) => {
                    self.metrics
                        .reconcile_errors
                        .get_or_create(&ControllerLabel {
                            controller: "surge",
                        })
                        .inc();
                    tracing::warn!(namespace = %ns, deployment = %name, error = %e, "surge step failed; retrying");
                }
            }
        }
        self.metrics.active_surges.set(active);
        self.metrics.surge_replicas.set(surge_replicas);
    }

    /// Plans and applies one step for a Deployment; returns its markers if a
    /// surge is (still) active afterwards.
    async fn plan_one(
        &self,
        ns: &str,
        name: &str,
        draining: &BTreeSet<String>,
        now: Instant,
        view: &PassView,
    ) -> Result<Option<Markers>, kube::Error> {
        let Some(dep) = self.cache.deployment(ns, name) else {
            return Ok(None);
        };
        let pdbs = view.pdbs.get(ns).cloned().unwrap_or_default();
        let matching = matching_pdbs(&dep, &pdbs);
        let [pdb] = matching[..] else {
            return Ok(None); // none, or several (the apiserver refuses those evictions itself)
        };
        let in_scope = self.cache.namespace_in_scope(ns);
        let target = self.target_of(&dep, ns);
        let (applier, markers) = match &target {
            Target::Deployment => (
                Applier::Deployment,
                markers_of(dep.metadata.annotations.as_ref()),
            ),
            Target::Hpa(h) => (
                Applier::Hpa {
                    min: h.spec.as_ref().and_then(|s| s.min_replicas).unwrap_or(1),
                },
                markers_of(h.metadata.annotations.as_ref()),
            ),
            Target::Keda(so) => (
                Applier::Keda {
                    min: so.data["spec"]["minReplicaCount"].as_i64().unwrap_or(0) as i32,
                },
                markers_of(so.metadata.annotations.as_ref()),
            ),
            Target::Conflict => (Applier::Conflict, None),
        };
        if !in_scope && markers.is_none() {
            return Ok(None); // out of scope means invisible
        }
        let cooldown = self.cache.behaviour.cooldown;
        let (mut since, mut denied) = self.signals.get(ns, name, cooldown, now);
        // The durable signal, from whichever replica answered the eviction.
        if let Some(e) = view
            .eas
            .get(ns)
            .and_then(|l| l.iter().find(|e| e.spec.target_name == name))
        {
            if let Some(le) = &e.spec.last_eviction {
                if let Some(t) = &le.eviction_time {
                    let d = Duration::from_secs(age(t).max(0) as u64);
                    since = Some(since.map_or(d, |s| s.min(d)));
                    if d <= cooldown && !le.pod_name.is_empty() && !denied.contains(&le.pod_name) {
                        denied.push(le.pod_name.clone());
                    }
                }
            }
        }
        let selector = pdb.spec.as_ref().and_then(|s| s.selector.as_ref());
        let pods: Vec<PodState> = view
            .pods
            .get(ns)
            .map(Vec::as_slice)
            .unwrap_or_default()
            .iter()
            .filter(|p| pdb_selects(selector, p.labels()))
            .map(|p| PodState {
                name: p.metadata.name.clone().unwrap_or_default(),
                node: p.spec.node_name.clone(),
                terminating: p.is_terminating(),
                completed: matches!(p.status.phase.as_deref(), Some("Succeeded" | "Failed")),
            })
            .collect();
        let spec = dep.spec.clone().unwrap_or_default();
        let strategy = spec.strategy.clone().unwrap_or_default();
        let recreate = strategy.type_.as_deref() == Some("Recreate");
        let max_surge = strategy.rolling_update.and_then(|r| r.max_surge);
        let pdb_spec = pdb.spec.clone().unwrap_or_default();
        let snapshot = Snapshot {
            pdb_spec: &pdb_spec,
            pdb_disruptions_allowed: pdb.status.as_ref().map_or(0, |s| s.disruptions_allowed),
            replicas: spec.replicas.unwrap_or(1),
            max_surge,
            recreate,
            applier,
            markers,
            pods,
            draining_nodes: draining.clone(),
            denied_pods: denied.into_iter().collect(),
            since_last_signal: since,
            zero_surge_override: self.cache.behaviour.zero_surge_override,
            cooldown,
        };
        let action = plan::plan(&snapshot);
        self.apply(ns, &dep, pdb, &target, action, markers).await
    }

    fn target_of(&self, dep: &Deployment, ns: &str) -> Target {
        let hpas = self.cache.hpas.state();
        let hpa = hpa_for(dep, &hpas).cloned();
        let name = dep.metadata.name.as_deref().unwrap_or_default();
        let keda = self.cache.scaled_objects_in(ns).into_iter().find(|so| {
            let t = &so.data["spec"]["scaleTargetRef"];
            t["name"].as_str() == Some(name)
                && t["kind"]
                    .as_str()
                    .unwrap_or("Deployment")
                    .eq_ignore_ascii_case("deployment")
        });
        // KEDA manages its own HPA (owned by the ScaledObject): only a second,
        // standalone HPA is a conflict.
        let standalone_hpa =
            hpa.filter(|h| controller_of(&h.metadata).is_none_or(|o| o.kind != "ScaledObject"));
        match (keda, standalone_hpa) {
            (Some(_), Some(_)) => Target::Conflict,
            (Some(so), None) => Target::Keda(so),
            (None, Some(h)) => Target::Hpa(h),
            (None, None) => Target::Deployment,
        }
    }

    async fn apply(
        &self,
        ns: &str,
        dep: &Deployment,
        pdb: &PodDisruptionBudget,
        target: &Target,
        action: Action,
        markers: Option<Markers>,
    ) -> Result<Option<Markers>, kube::Error> {
        let name = dep.metadata.name.clone().unwrap_or_default();
        let key = (ns.to_string(), name.clone());
        let dep_ref = object_ref(dep);
        match action {
            Action::Surge {
                baseline,
                target: to,
                kind,
            } => {
                self.write_surge(ns, dep, target, baseline, to).await?;
                self.degraded.clear(ns, &name);
                let pdb_name = pdb.metadata.name.clone().unwrap_or_default();
                let event = match kind {
                    SurgeKind::TopUp => Some(("SurgeToppedUp", format!("surge topped up to {to} replicas (baseline {baseline}): more pods displaced; PDB {pdb_name}"))),
                    SurgeKind::Start => {
                        if let Ok(mut s) = self.started.lock() {
                            s.insert(key.clone(), Instant::now());
                        }
                        Some(("SurgeStarted", format!("surging from {baseline} to {to} replicas so that PDB {pdb_name} lets displaced pods go")))
                    }
                    SurgeKind::Resume => None,
                };
                tracing::info!(namespace = ns, deployment = %name, baseline, target = to, ?kind, "surge");
                if let Some((reason, note)) = event {
                    self.events
                        .event(&dep_ref, EventType::Normal, reason, note)
                        .await;
                }
                Ok(Some(Markers {
                    baseline,
                    surged_to: to,
                }))
            }
            Action::AdoptUserChange { new_baseline } => {
                self.adopt(ns, dep, target, new_baseline).await?;
                tracing::info!(namespace = ns, deployment = %name, new_baseline, "replicas changed by someone else during the surge: their value is the new baseline");
                self.events
                    .event(
                        &dep_ref,
                        EventType::Normal,
                        "SurgeBaselineChanged",
                        format!("replicas changed during the surge; {new_baseline} is kept as the new baseline"),
                    )
                    .await;
                Ok(markers.map(|m| Markers {
                    baseline: new_baseline,
                    ..m
                }))
            }
            Action::Revert { baseline } => {
                self.write_revert(ns, dep, target, baseline).await?;
                self.signals.forget(ns, &name);
                if let Some(t) = self.started.lock().ok().and_then(|mut s| s.remove(&key)) {
                    self.metrics
                        .surge_duration
                        .observe(t.elapsed().as_secs_f64());
                }
                tracing::info!(namespace = ns, deployment = %name, baseline, "surge reverted");
                self.events
                    .event(
                        &dep_ref,
                        EventType::Normal,
                        "SurgeReverted",
                        format!("drain over and cooldown passed: restored {baseline} replicas"),
                    )
                    .await;
                Ok(None)
            }
            Action::Impossible { reason } => {
                let fresh = self.degraded.get(ns, &name).map(|(_, m)| m) != Some(reason.clone());
                self.degraded.set(ns, &name, "SurgeImpossible", &reason);
                if fresh {
                    tracing::warn!(namespace = ns, deployment = %name, %reason, "no surge can help");
                    self.events
                        .event(&dep_ref, EventType::Warning, "SurgeImpossible", reason)
                        .await;
                }
                Ok(markers)
            }
            _ => Ok(markers),
        }
    }

    /// The one write each step makes: the applier's value, guarded on the
    /// value we planned from, and its annotations, in one JSON patch.
    async fn write_applier(
        &self,
        ns: &str,
        dep: &Deployment,
        target: &Target,
        value: Option<i32>,
        changes: &[(&str, Option<String>)],
    ) -> Result<(), kube::Error> {
        let (path, current, annotations) = match target {
            Target::Deployment | Target::Conflict => (
                "/spec/replicas",
                dep.spec.as_ref().and_then(|s| s.replicas).map(|c| json!(c)),
                dep.metadata.annotations.as_ref(),
            ),
            Target::Hpa(h) => (
                "/spec/minReplicas",
                h.spec
                    .as_ref()
                    .and_then(|s| s.min_replicas)
                    .map(|c| json!(c)),
                h.metadata.annotations.as_ref(),
            ),
            Target::Keda(so) => (
                "/spec/minReplicaCount",
                so.data["spec"].get("minReplicaCount").cloned(),
                so.metadata.annotations.as_ref(),
            ),
        };
        let mut ops = value.map_or_else(Vec::new, |v| guarded_set(path, current, json!(v)));
        ops.extend(annotation_ops(annotations, changes));
        let patch = json_patch(ops)?;
        let pp = PatchParams::default();
        match target {
            Target::Deployment | Target::Conflict => {
                self.deployments(ns)
                    .patch(&name_of(&dep.metadata), &pp, &patch)
                    .await?;
            }
            Target::Hpa(h) => {
                self.hpas(ns)
                    .patch(&name_of(&h.metadata), &pp, &patch)
                    .await?;
            }
            Target::Keda(so) => {
                self.scaled_objects(ns)
                    .patch(&name_of(&so.metadata), &pp, &patch)
                    .await?;
            }
        }
        Ok(())
    }

    /// Markers and value in one write: a concurrent change of the value fails
    /// it and is re-planned. An autoscaler's Deployment is raised as well.
    async fn write_surge(
        &self,
        ns: &str,
        dep: &Deployment,
        target: &Target,
        baseline: i32,
        to: i32,
    ) -> Result<(), kube::Error> {
        let markers = [
            (names::SURGE_REPLICAS, Some(to.to_string())),
            (names::ORIGINAL_MIN_REPLICAS, Some(baseline.to_string())),
        ];
        self.write_applier(ns, dep, target, Some(to), &markers)
            .await?;
        if matches!(target, Target::Hpa(_) | Target::Keda(_)) {
            self.raise_replicas(ns, dep, to).await?;
        }
        Ok(())
    }

    fn deployments(&self, ns: &str) -> Api<Deployment> {
        Api::namespaced(self.client.clone(), ns)
    }

    fn hpas(&self, ns: &str) -> Api<HorizontalPodAutoscaler> {
        Api::namespaced(self.client.clone(), ns)
    }

    fn scaled_objects(&self, ns: &str) -> Api<DynamicObject> {
        Api::namespaced_with(self.client.clone(), ns, &keda_resource())
    }

    /// An autoscaler without metrics does not act on a new minimum: set the
    /// Deployment's replicas too (never lowering them). Its own markers keep
    /// the replicas it had, so the revert restores them.
    async fn raise_replicas(&self, ns: &str, dep: &Deployment, to: i32) -> Result<(), kube::Error> {
        let current = dep.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
        if current >= to {
            return Ok(());
        }
        let original =
            markers_of(dep.metadata.annotations.as_ref()).map_or(current, |m| m.baseline);
        let markers = [
            (names::SURGE_REPLICAS, Some(to.to_string())),
            (names::ORIGINAL_MIN_REPLICAS, Some(original.to_string())),
        ];
        self.write_applier(ns, dep, &Target::Deployment, Some(to), &markers)
            .await
    }

    /// Someone else's value stays: the markers now record it as both the
    /// baseline and the surged value, so nothing is undone later.
    async fn adopt(
        &self,
        ns: &str,
        dep: &Deployment,
        target: &Target,
        new_baseline: i32,
    ) -> Result<(), kube::Error> {
        let v = new_baseline.to_string();
        let changes = [
            (names::ORIGINAL_MIN_REPLICAS, Some(v.clone())),
            (names::SURGE_REPLICAS, Some(v)),
        ];
        self.write_applier(ns, dep, target, None, &changes).await
    }

    async fn write_revert(
        &self,
        ns: &str,
        dep: &Deployment,
        target: &Target,
        baseline: i32,
    ) -> Result<(), kube::Error> {
        let clear = [
            (names::SURGE_REPLICAS, None),
            (names::ORIGINAL_MIN_REPLICAS, None),
        ];
        match target {
            // Never scale a Deployment to 0 ourselves.
            Target::Deployment | Target::Conflict => {
                self.write_applier(ns, dep, target, Some(baseline.max(1)), &clear)
                    .await
            }
            Target::Hpa(_) | Target::Keda(_) => {
                self.write_applier(ns, dep, target, Some(baseline), &clear)
                    .await?;
                self.restore_replicas(ns, dep).await
            }
        }
    }

    /// After an autoscaler surge: the Deployment's own pre-surge replicas,
    /// unless someone changed them meanwhile.
    async fn restore_replicas(&self, ns: &str, dep: &Deployment) -> Result<(), kube::Error> {
        let Some(ops) = deployment_revert_ops(dep) else {
            return Ok(());
        };
        self.deployments(ns)
            .patch(
                &name_of(&dep.metadata),
                &PatchParams::default(),
                &json_patch(ops)?,
            )
            .await?;
        Ok(())
    }
}

fn name_of(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> String {
    meta.name.clone().unwrap_or_default()
}

fn age(t: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time) -> i64 {
    (k8s_openapi::jiff::Timestamp::now() - t.0).get_seconds()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{NodeSpec, Taint};

    #[test]
    fn drain_signals_of_nodes() {
        let mut n = Node::default();
        assert!(!node_draining(&n));
        n.spec = Some(NodeSpec {
            unschedulable: Some(true),
            ..Default::default()
        });
        assert!(node_draining(&n));
        for key in DRAIN_TAINTS {
            n.spec = Some(NodeSpec {
                taints: Some(vec![Taint {
                    key: key.into(),
                    effect: "NoSchedule".into(),
                    ..Default::default()
                }]),
                ..Default::default()
            });
            assert!(node_draining(&n), "{key}");
        }
        n.spec = Some(NodeSpec {
            taints: Some(vec![Taint {
                key: "dedicated".into(),
                effect: "NoSchedule".into(),
                ..Default::default()
            }]),
            ..Default::default()
        });
        assert!(!node_draining(&n));
    }

    #[test]
    fn markers_parse() {
        let a: BTreeMap<String, String> = [
            (names::SURGE_REPLICAS.to_string(), "6".to_string()),
            (names::ORIGINAL_MIN_REPLICAS.to_string(), "3".to_string()),
        ]
        .into();
        assert_eq!(
            markers_of(Some(&a)),
            Some(Markers {
                baseline: 3,
                surged_to: 6
            })
        );
        assert_eq!(markers_of(None), None);
    }
}
