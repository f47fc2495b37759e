//! The eviction decision (behaviour.md section 4), a pure function over a
//! cache snapshot that mirrors `pkg/registry/core/pod/storage/eviction.go`.
//! Safety rule: never deny an eviction that the apiserver would allow. Only
//! where the apiserver itself would answer 429 for the budget may we deny.
//!
//! A 429 is answered only on fresh facts: when the caches say Block, the
//! caller reads the pod and the namespace's PDBs from the apiserver and runs
//! the same decision over them ([`LiveView`], [`confirm`]). Any failure of
//! that read, or any other answer than Block, lets the eviction through.
//! The owner chain and the namespace scope still come from the caches: a
//! stale entry there can only make us allow more (no Deployment, out of scope).

use std::sync::Arc;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetStatus};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::{SignedDuration, Timestamp};

use crate::budget::{pdb_selects, Selector};
use crate::cache::{Cache, PodLabels, Selected, SlimPod};
use crate::markers::Markers;
use crate::names;

/// MaxDisruptedPodSize of eviction.go: past this many `status.disruptedPods`
/// the apiserver answers 403 Forbidden, which must not become a retryable 429.
pub const MAX_DISRUPTED_PODS: usize = 2000;

/// Whether the facts behind a view may be trusted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Freshness {
    /// Some store has not had its first list yet.
    NotSynced,
    /// Some store lost its watch and has not recovered within the bound.
    Stale,
    Fresh,
}

/// What the decision reads: implemented by the watch caches, by live reads
/// ([`LiveView`]), and by plain vectors in tests.
pub trait EvictionView {
    fn freshness(&self) -> Freshness;
    fn pod(&self, ns: &str, name: &str) -> Option<Arc<SlimPod>>;
    fn pdbs_in(&self, ns: &str) -> Vec<Arc<PodDisruptionBudget>>;
    /// The PDB `name` of `ns`.
    fn pdb_named(&self, ns: &str, name: &str) -> Option<Arc<PodDisruptionBudget>> {
        self.pdbs_in(ns)
            .into_iter()
            .find(|p| p.metadata.name.as_deref() == Some(name))
    }
    /// The PDBs of `ns` that protect pods with these labels.
    fn pdbs_selecting(&self, ns: &str, labels: &PodLabels) -> Selected {
        self.pdbs_in(ns)
            .into_iter()
            .filter(|p| pdb_selects(p.spec.as_ref().and_then(|s| s.selector.as_ref()), labels))
            .collect()
    }
    fn owning_deployment(&self, pod: &SlimPod) -> Option<Arc<Deployment>>;
    fn namespace_in_scope(&self, ns: &str) -> bool;
    /// Every pod of `ns` (read only when a PDB's status may lag a
    /// scale-down, see [`recount_pending`]).
    fn pods_in(&self, ns: &str) -> Vec<Arc<SlimPod>>;
    /// The clock that ages `status.disruptedPods` entries.
    fn now(&self) -> Timestamp {
        Timestamp::now()
    }
}

impl EvictionView for Cache {
    fn freshness(&self) -> Freshness {
        if !Cache::synced(self) {
            Freshness::NotSynced
        } else if Cache::stale(self) {
            Freshness::Stale
        } else {
            Freshness::Fresh
        }
    }
    fn pod(&self, ns: &str, name: &str) -> Option<Arc<SlimPod>> {
        Cache::pod(self, ns, name)
    }
    fn pdbs_in(&self, ns: &str) -> Vec<Arc<PodDisruptionBudget>> {
        Cache::pdbs_in(self, ns)
    }
    fn pdbs_selecting(&self, ns: &str, labels: &PodLabels) -> Selected {
        Cache::pdbs_selecting(self, ns, labels)
    }
    fn owning_deployment(&self, pod: &SlimPod) -> Option<Arc<Deployment>> {
        Cache::owning_deployment(self, pod)
    }
    fn namespace_in_scope(&self, ns: &str) -> bool {
        Cache::namespace_in_scope(self, ns)
    }
    fn pods_in(&self, ns: &str) -> Vec<Arc<SlimPod>> {
        self.pods.pods_in(ns)
    }
}

/// Why an eviction is let through; also the `decision` metric label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AllowReason {
    NotSynced,
    /// A watch cache failed and has not recovered (behaviour.md 4.6).
    CacheStale,
    PodNotFound,
    BudgetIgnored,
    NoPdb,
    SeveralPdbs,
    UnhealthyPodPolicy,
    BudgetAllows,
    /// The PDB status is older than its spec, or negative: the apiserver answers itself.
    BudgetNotSettled,
    NotADeployment,
    OutOfScope,
    /// More than [`MAX_DISRUPTED_PODS`] disruptedPods: the apiserver answers 403.
    TooManyDisruptedPods,
    /// The caches said Block; the apiserver's own objects said otherwise (the
    /// reason the live decision gave).
    LiveDisagreed(&'static str),
    /// The caches said Block; the live read failed or timed out.
    LiveCheckFailed,
    /// The PDB's status lags a scale-down ([`Recount`]) but the request may
    /// not wait: EVICTION_HOLD is 0, a dry run, or every hold permit is taken.
    RecountNotHeld,
    /// The PDB's status still lagged when the hold ended; the apiserver
    /// decides on the status it has (fail open).
    RecountTimedOut,
}

impl AllowReason {
    pub fn as_str(self) -> &'static str {
        match self {
            AllowReason::NotSynced => "not_synced",
            AllowReason::CacheStale => "cache_stale",
            AllowReason::PodNotFound => "pod_not_found",
            AllowReason::BudgetIgnored => "budget_ignored",
            AllowReason::NoPdb => "no_pdb",
            AllowReason::SeveralPdbs => "several_pdbs",
            AllowReason::UnhealthyPodPolicy => "unhealthy_pod_policy",
            AllowReason::BudgetAllows => crate::metrics::BUDGET_ALLOWS,
            AllowReason::BudgetNotSettled => "budget_not_settled",
            AllowReason::NotADeployment => "not_a_deployment",
            AllowReason::OutOfScope => "out_of_scope",
            AllowReason::TooManyDisruptedPods => "too_many_disrupted_pods",
            AllowReason::LiveDisagreed(_) => "live_disagreed",
            AllowReason::LiveCheckFailed => "live_check_failed",
            AllowReason::RecountNotHeld => "recount_not_held",
            AllowReason::RecountTimedOut => "recount_timed_out",
        }
    }
}

/// A budget blocks the eviction of a pod of an in-scope Deployment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Blocked {
    pub namespace: String,
    pub pod: String,
    pub pdb: String,
    pub deployment: String,
    pub desired_healthy: i32,
    pub current_healthy: i32,
}

/// The PDB's status allows the eviction, but only because the disruption
/// controller has not yet counted a scale-down of the pod's Deployment (ours
/// after a surge, an HPA's, a rollout's old ReplicaSet): once the
/// ReplicaSet's excess pods are gone, the eviction would leave fewer healthy
/// pods than the budget's minimum. The apiserver checks the status, not the
/// pods, so it would let the eviction through. The webhook holds the request
/// until the status is recounted and decides again; it never refuses on this
/// alone (when the hold ends first, it allows).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recount {
    pub namespace: String,
    pub pod: String,
    pub pdb: String,
    pub deployment: String,
    /// Healthy pods of the PDB once the Deployment has its replicas.
    pub settled_healthy: i32,
    pub desired_healthy: i32,
    /// What the PDB's status counts.
    pub current_healthy: i32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Allow {
        reason: AllowReason,
        warning: Option<String>,
    },
    Block(Blocked),
    /// Wait for the PDB's status to catch up, then decide again.
    Recount(Recount),
}

fn allow(reason: AllowReason) -> Decision {
    Decision::Allow {
        reason,
        warning: None,
    }
}

pub fn decide(view: &impl EvictionView, ns: &str, pod_name: &str) -> Decision {
    decide_inner(view, ns, pod_name, &mut None)
}

/// [`decide`], and for an in-scope [`AllowReason::BudgetAllows`] the PDB
/// whose room the eviction takes (shared out by the caller, see
/// [`RoomLedger`](super::hold::RoomLedger)).
pub fn decide_room(
    view: &impl EvictionView,
    ns: &str,
    pod_name: &str,
) -> (Decision, Option<Arc<PodDisruptionBudget>>) {
    let mut room = None;
    let d = decide_inner(view, ns, pod_name, &mut room);
    (d, room)
}

fn decide_inner(
    view: &impl EvictionView,
    ns: &str,
    pod_name: &str,
    room: &mut Option<Arc<PodDisruptionBudget>>,
) -> Decision {
    match view.freshness() {
        Freshness::NotSynced => return allow(AllowReason::NotSynced),
        Freshness::Stale => return allow(AllowReason::CacheStale),
        Freshness::Fresh => {}
    }
    let Some(pod) = view.pod(ns, pod_name) else {
        return allow(AllowReason::PodNotFound);
    };
    if pod.budget_ignored() {
        return allow(AllowReason::BudgetIgnored);
    }
    let mut pdbs = view.pdbs_selecting(ns, pod.labels());
    let pdb = match pdbs.len() {
        0 => return allow(AllowReason::NoPdb),
        1 => pdbs.remove(0),
        _ => {
            let mut found: Vec<&str> = pdbs
                .iter()
                .filter_map(|p| p.metadata.name.as_deref())
                .collect();
            found.sort_unstable();
            return Decision::Allow {
                reason: AllowReason::SeveralPdbs,
                warning: Some(format!(
                    "pod {ns}/{pod_name} is selected by more than one PodDisruptionBudget ({}); \
                     the eviction subresource does not support that",
                    found.join(", ")
                )),
            };
        }
    };
    let no_status = PodDisruptionBudgetStatus::default();
    let status = pdb.status.as_ref().unwrap_or(&no_status);
    if !pod.is_ready() {
        let policy = pdb
            .spec
            .as_ref()
            .and_then(|s| s.unhealthy_pod_eviction_policy.as_deref());
        // AlwaysAllow lets unready pods go; the default (IfHealthyBudget, or
        // unset) only while the budget is met and not trivially zero.
        let healthy_budget =
            status.current_healthy >= status.desired_healthy && status.desired_healthy > 0;
        if policy == Some("AlwaysAllow") || healthy_budget {
            return allow(AllowReason::UnhealthyPodPolicy);
        }
    }
    if status.observed_generation.unwrap_or(0) < pdb.metadata.generation.unwrap_or(0)
        || status.disruptions_allowed < 0
    {
        return allow(AllowReason::BudgetNotSettled);
    }
    // Checked by the apiserver before disruptionsAllowed == 0, with 403.
    if status.disrupted_pods.as_ref().map_or(0, |d| d.len()) > MAX_DISRUPTED_PODS {
        return allow(AllowReason::TooManyDisruptedPods);
    }
    if status.disruptions_allowed > 0 {
        // Out of scope, the webhook is invisible: no hold there.
        if view.namespace_in_scope(ns) {
            if let Some(r) = recount_pending(view, &pod, &pdb, status) {
                return Decision::Recount(r);
            }
            *room = Some(pdb.clone());
        }
        return allow(AllowReason::BudgetAllows);
    }
    let Some(dep) = view.owning_deployment(&pod) else {
        return allow(AllowReason::NotADeployment);
    };
    if !view.namespace_in_scope(ns) {
        return allow(AllowReason::OutOfScope);
    }
    Decision::Block(Blocked {
        namespace: ns.to_string(),
        pod: pod_name.to_string(),
        pdb: pdb.metadata.name.clone().unwrap_or_default(),
        deployment: dep.metadata.name.clone().unwrap_or_default(),
        desired_healthy: status.desired_healthy,
        current_healthy: status.current_healthy,
    })
}

/// Whether the budget's `desiredHealthy` stays what it is when its
/// workloads scale down: only for a whole-number `minAvailable` (what we
/// create). With `maxUnavailable` or a percentage it falls with the scale.
fn desired_stays_on_scale_down(
    spec: &k8s_openapi::api::policy::v1::PodDisruptionBudgetSpec,
) -> bool {
    spec.max_unavailable.is_none() && matches!(spec.min_available, Some(IntOrString::Int(_)))
}

/// The extra pods a rolling update of `dep` makes over its `wanted`
/// replicas ([`crate::surge::plan::strategy_surge`]); none for an invalid
/// maxSurge.
fn rollout_surge(dep: &Deployment, wanted: i32) -> i32 {
    let strategy = dep.spec.as_ref().and_then(|s| s.strategy.as_ref());
    let recreate = strategy.and_then(|s| s.type_.as_deref()) == Some("Recreate");
    let max_surge = strategy
        .and_then(|s| s.rolling_update.as_ref())
        .and_then(|r| r.max_surge.as_ref());
    crate::surge::plan::strategy_surge(recreate, max_surge, wanted).unwrap_or(0)
}

/// DeletionTimeout of the disruption controller: a `status.disruptedPods`
/// entry stops counting the pod as leaving after this long.
const DISRUPTED_POD_TIMEOUT: SignedDuration = SignedDuration::from_secs(120);

/// Whether a `disruptedPods` entry of time `at` still counts its pod as
/// leaving. A time so late that adding the timeout overflows (anyone with
/// write access to the status can set one) counts as leaving, as the
/// controller's Go arithmetic has it, and never panics.
fn still_leaving(at: Timestamp, now: Timestamp) -> bool {
    at.checked_add(DISRUPTED_POD_TIMEOUT)
        .map_or(true, |end| end > now)
}

/// Whether the PDB's status allows this eviction only because it has not
/// counted a scale-down of the pod's Deployment yet ([`Recount`]).
///
/// Cheap first: only a Deployment with fewer replicas than the status
/// counts healthy, or more pods than it wants, or a spec its controller has
/// not seen, is looked at further (one Deployment lookup otherwise). Then
/// the PDB's pods are counted the way the disruption controller counts them
/// (Ready, not terminating, not in `disruptedPods`), less the healthy pods
/// the Deployment has beyond its replicas: its ReplicaSets remove those
/// (unready ones go first, so only the excess over the replicas costs
/// healthy pods).
pub fn recount_pending(
    view: &impl EvictionView,
    pod: &SlimPod,
    pdb: &PodDisruptionBudget,
    status: &PodDisruptionBudgetStatus,
) -> Option<Recount> {
    // Evicting an unready pod takes nothing from the healthy count.
    if !pod.is_ready() {
        return None;
    }
    // Otherwise the status's old desiredHealthy would hold evictions that
    // the recount allows (and a scale-down then costs the budget nothing,
    // or next to nothing, for an eviction to race).
    let spec = pdb.spec.as_ref()?;
    if !desired_stays_on_scale_down(spec) {
        return None;
    }
    let dep = view.owning_deployment(pod)?;
    let wanted = dep.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
    let dep_status = dep.status.as_ref();
    let unseen = dep_status.and_then(|s| s.observed_generation).unwrap_or(0)
        < dep.metadata.generation.unwrap_or(0);
    // A paused Deployment keeps a rollout's extra pods until it is resumed
    // (its controller only scales it): they are not leaving, and holding
    // every eviction of it for them would last as long as the pause. Only a
    // change its controller has not seen yet may be a scale-down under way.
    if dep.spec.as_ref().and_then(|s| s.paused) == Some(true) && !unseen {
        return None;
    }
    let in_flux = status.current_healthy > wanted
        || dep_status.and_then(|s| s.replicas).unwrap_or(0) > wanted
        || unseen;
    if !in_flux {
        return None;
    }
    let selector = Selector::compile(pdb.spec.as_ref().and_then(|s| s.selector.as_ref())).ok()?;
    let ns = pod.namespace();
    let (healthy, dep_healthy) = count_healthy(view, ns, &selector, status, Some(dep.as_ref()));
    // A rollout's own extra pods (fewer updated than it has, no more than
    // its maxSurge over its replicas) go only as new ones become available:
    // evicting beside that is the race the apiserver has without us, and
    // holding would turn its allow into a wait. Not when the status counts
    // pods the caches no longer do (a scale-down, a surge of ours reverted
    // mid-rollout), nor when there are more than the rollout makes.
    let rolling = dep_status.and_then(|s| {
        let replicas = s.replicas.unwrap_or(0);
        (s.updated_replicas.unwrap_or(0) < replicas).then_some(replicas)
    });
    if let Some(replicas) = rolling.filter(|_| !unseen) {
        if replicas - wanted <= rollout_surge(&dep, wanted) && status.current_healthy <= healthy {
            return None;
        }
    }
    let settled_healthy = healthy - (dep_healthy - wanted).max(0);
    // The eviction takes one healthy pod; with room for it, nothing lags
    // that matters.
    if settled_healthy.saturating_sub(status.desired_healthy) >= 1 {
        return None;
    }
    Some(Recount {
        namespace: ns.to_string(),
        pod: pod.name().to_string(),
        pdb: pdb.metadata.name.clone().unwrap_or_default(),
        deployment: dep.metadata.name.clone().unwrap_or_default(),
        settled_healthy,
        desired_healthy: status.desired_healthy,
        current_healthy: status.current_healthy,
    })
}

/// The PDB's healthy pods in `ns`, counted the way the disruption
/// controller counts them (Ready, not terminating, not in a current
/// `disruptedPods` entry), and how many of them `dep` owns.
fn count_healthy(
    view: &impl EvictionView,
    ns: &str,
    selector: &Selector,
    status: &PodDisruptionBudgetStatus,
    dep: Option<&Deployment>,
) -> (i32, i32) {
    let now = view.now();
    let leaving = |name: &str| {
        status
            .disrupted_pods
            .as_ref()
            .and_then(|d| d.get(name))
            .is_some_and(|t| still_leaving(t.0, now))
    };
    let (mut healthy, mut dep_healthy) = (0i32, 0i32);
    for p in view.pods_in(ns) {
        if !selector.selects_for_eviction(p.labels())
            || p.is_terminating()
            || leaving(p.name())
            || !p.is_ready()
        {
            continue;
        }
        healthy += 1;
        if dep.is_some_and(|dep| {
            view.owning_deployment(&p)
                .is_some_and(|d| same_object(&d.metadata, &dep.metadata))
        }) {
            dep_healthy += 1;
        }
    }
    (healthy, dep_healthy)
}

/// The status an owned PDB should have now: it still counts healthy pods
/// that are gone (the scale-down of a surge's revert, before the disruption
/// controller recounts), so it allows more disruptions than there is room
/// for. The apiserver checks evictions against that status, not the pods;
/// when the controller is slow (a busy controller-manager takes seconds),
/// an eviction in that window takes a pod below the budget's minimum. The
/// webhook then writes what the controller would write, as the apiserver's
/// own eviction does when it takes a disruption: only ever fewer
/// disruptions, guarded by the resourceVersion read, and the controller's
/// next count overwrites it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatusCatchUp {
    pub pdb: String,
    pub resource_version: String,
    /// What the status counts now.
    pub was_healthy: i32,
    pub was_allowed: i32,
    /// What it should count.
    pub current_healthy: i32,
    pub disruptions_allowed: i32,
    /// Index of the `DisruptionAllowed` condition, set to False when no
    /// disruption is left (as the disruption controller does).
    pub condition: Option<usize>,
    /// The status's `desiredHealthy`, and the index of a `DisruptionAllowed`
    /// condition not False yet (for [`StatusCatchUp::confirmed`]).
    pub desired_healthy: i32,
    pub allowed_condition: Option<usize>,
}

/// [`StatusCatchUp`] for the PDB `pdb` of `ns`, when it is ours (never
/// another's), its status has observed its spec (otherwise the apiserver
/// refuses evictions under it anyway), and the pods the caches see leave
/// fewer disruptions than the status allows.
pub fn status_catch_up(view: &impl EvictionView, ns: &str, pdb: &str) -> Option<StatusCatchUp> {
    let pdb = view.pdb_named(ns, pdb)?;
    if !crate::cache::owned_by_us(&pdb.metadata) {
        return None;
    }
    // The count is written against the status's own `desiredHealthy`; were
    // it to fall with the scale-down, the old value would say fewer
    // disruptions than the controller's recount: the apiserver would refuse
    // evictions it allows.
    let spec = pdb.spec.as_ref()?;
    if !desired_stays_on_scale_down(spec) {
        return None;
    }
    let status = pdb.status.as_ref()?;
    if status.observed_generation.unwrap_or(0) < pdb.metadata.generation.unwrap_or(0) {
        return None;
    }
    let selector = Selector::compile(spec.selector.as_ref()).ok()?;
    let (healthy, _) = count_healthy(view, ns, &selector, status, None);
    let allowed = healthy.saturating_sub(status.desired_healthy).max(0);
    if healthy >= status.current_healthy || status.disruptions_allowed <= allowed {
        return None;
    }
    let allowed_condition = status.conditions.as_ref().and_then(|c| {
        c.iter()
            .position(|c| c.type_ == "DisruptionAllowed" && c.status != "False")
    });
    let condition = if allowed == 0 {
        allowed_condition
    } else {
        None
    };
    Some(StatusCatchUp {
        pdb: pdb.metadata.name.clone().unwrap_or_default(),
        resource_version: pdb.metadata.resource_version.clone()?,
        was_healthy: status.current_healthy,
        was_allowed: status.disruptions_allowed,
        current_healthy: healthy,
        disruptions_allowed: allowed,
        condition,
        desired_healthy: status.desired_healthy,
        allowed_condition,
    })
}

/// The PDB's healthy pods among `pods` (a live list of its namespace),
/// counted as the disruption controller counts them and as
/// [`count_healthy`] counts the cached ones.
pub fn live_healthy(
    pods: &[k8s_openapi::api::core::v1::Pod],
    pdb: &PodDisruptionBudget,
    now: Timestamp,
) -> Option<i32> {
    let selector = Selector::compile(pdb.spec.as_ref().and_then(|s| s.selector.as_ref())).ok()?;
    let disrupted = pdb.status.as_ref().and_then(|s| s.disrupted_pods.as_ref());
    let healthy = pods
        .iter()
        .filter(|p| {
            let labels = p.metadata.labels.clone().unwrap_or_default();
            let name = p.metadata.name.as_deref().unwrap_or_default();
            let leaving = disrupted
                .and_then(|d| d.get(name))
                .is_some_and(|t| still_leaving(t.0, now));
            let ready = p
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
                .is_some_and(|c| c.status == "True");
            selector.selects_for_eviction(&labels)
                && p.metadata.deletion_timestamp.is_none()
                && !leaving
                && ready
        })
        .count();
    i32::try_from(healthy).ok()
}

impl StatusCatchUp {
    /// The write again, with the healthy pods counted from a live list: the
    /// pod cache may lag the PDB's (a Ready it has not seen, a relist in
    /// progress), and the status must never be written below the truth, or
    /// the apiserver would refuse evictions it allows. None when the live
    /// count leaves the room the status says.
    pub fn confirmed(mut self, live_healthy: i32) -> Option<StatusCatchUp> {
        let allowed = live_healthy.saturating_sub(self.desired_healthy).max(0);
        if live_healthy >= self.was_healthy || self.was_allowed <= allowed {
            return None;
        }
        self.current_healthy = live_healthy;
        self.disruptions_allowed = allowed;
        self.condition = if allowed == 0 {
            self.allowed_condition
        } else {
            None
        };
        Some(self)
    }

    /// The JSON patch of the status subresource: the resourceVersion tested
    /// first, so a status anyone wrote since (the controller's recount)
    /// fails it and stays.
    pub fn ops(&self, now: Timestamp) -> Vec<serde_json::Value> {
        use serde_json::json;
        let mut ops = vec![
            json!({"op": "test", "path": "/metadata/resourceVersion", "value": self.resource_version}),
            json!({"op": "add", "path": "/status/currentHealthy", "value": self.current_healthy}),
            json!({"op": "add", "path": "/status/disruptionsAllowed", "value": self.disruptions_allowed}),
        ];
        if let Some(i) = self.condition {
            let at = |f: &str| format!("/status/conditions/{i}/{f}");
            ops.extend([
                json!({"op": "test", "path": at("type"), "value": "DisruptionAllowed"}),
                json!({"op": "replace", "path": at("status"), "value": "False"}),
                json!({"op": "replace", "path": at("reason"), "value": "InsufficientPods"}),
                json!({"op": "replace", "path": at("lastTransitionTime"),
                    "value": now.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()}),
            ]);
        }
        ops
    }
}

fn same_object(
    a: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    b: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) -> bool {
    a.name == b.name && a.namespace == b.namespace && a.uid == b.uid
}

/// Facts read from the apiserver just before a 429: the pod (None when it
/// is gone) and every PDB of its namespace.
#[derive(Debug, Clone, Default)]
pub struct LiveFacts {
    pub pod: Option<SlimPod>,
    pub pdbs: Vec<PodDisruptionBudget>,
}

/// The live pod and PDBs; owner chain and scope from `cache`.
pub struct LiveView<'a, C> {
    pub facts: &'a LiveFacts,
    pub cache: &'a C,
}

impl<C: EvictionView> EvictionView for LiveView<'_, C> {
    fn freshness(&self) -> Freshness {
        Freshness::Fresh
    }
    fn pod(&self, ns: &str, name: &str) -> Option<Arc<SlimPod>> {
        self.facts
            .pod
            .as_ref()
            .filter(|p| p.namespace() == ns && p.name() == name)
            .map(|p| Arc::new(p.clone()))
    }
    fn pdbs_in(&self, ns: &str) -> Vec<Arc<PodDisruptionBudget>> {
        self.facts
            .pdbs
            .iter()
            .filter(|p| p.metadata.namespace.as_deref() == Some(ns))
            .map(|p| Arc::new(p.clone()))
            .collect()
    }
    fn owning_deployment(&self, pod: &SlimPod) -> Option<Arc<Deployment>> {
        self.cache.owning_deployment(pod)
    }
    fn namespace_in_scope(&self, ns: &str) -> bool {
        self.cache.namespace_in_scope(ns)
    }
    fn pods_in(&self, ns: &str) -> Vec<Arc<SlimPod>> {
        self.cache.pods_in(ns)
    }
}

/// The answer once the caches said Block: Block only if the same decision
/// over the live facts says Block too (with the live numbers); otherwise, or
/// when the read failed (`live` is Err), allow.
pub fn confirm<E>(
    cache: &impl EvictionView,
    ns: &str,
    pod_name: &str,
    live: Result<&LiveFacts, E>,
) -> Decision {
    let Ok(facts) = live else {
        return allow(AllowReason::LiveCheckFailed);
    };
    match decide(&LiveView { facts, cache }, ns, pod_name) {
        Decision::Block(b) => Decision::Block(b),
        Decision::Allow { reason, warning } => Decision::Allow {
            reason: AllowReason::LiveDisagreed(reason.as_str()),
            warning,
        },
        // The live status allows it; no 429 on that (the caller holds a
        // Recount only from the caches' own decision).
        Decision::Recount(_) => allow(AllowReason::LiveDisagreed("recount")),
    }
}

/// What the surge worker is doing for a Deployment, for the 429 message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SurgeState {
    /// A surge is in place: replicas from `from` to `to`.
    Active { from: i32, to: i32 },
    /// Someone set the replicas during the surge (markers `n` to `n`, an
    /// adoption): their value stands and no surge of ours adds to it for
    /// the pods already counted, so no room is coming from us.
    Kept { replicas: i32 },
    /// The signal was recorded; the worker will size the surge.
    Requested,
    /// A dry run: a real eviction would have asked for a surge; this one
    /// asked for nothing.
    WouldRequest,
    /// No surge can let the pod go.
    Impossible(String),
}

/// Reads the surge markers on a Deployment (`evictionSurgeReplicas` holds
/// the surged count, `original-min-replicas` the baseline).
pub fn surge_state_from_markers(dep: &Deployment) -> SurgeState {
    // Being deleted: the worker plans no surge for it, so none is coming
    // (a hold would only delay the apiserver's own 429).
    if dep.metadata.deletion_timestamp.is_some() {
        return SurgeState::Impossible("the Deployment is being deleted".into());
    }
    match Markers::from_annotations(dep.metadata.annotations.as_ref()) {
        Some(m) if m.surged_to <= m.baseline => SurgeState::Kept {
            replicas: m.surged_to,
        },
        Some(m) => SurgeState::Active {
            from: m.baseline,
            to: m.surged_to,
        },
        None => SurgeState::Requested,
    }
}

/// [`surge_state_from_markers`], except that someone's value kept on the
/// Deployment while an autoscaler's minimum (`hpas`, `sos`: the namespace's;
/// not a paused ScaledObject whose HPA is gone) stays raised by us is still a surge under way:
/// the autoscaler lifts the Deployment again, so room is coming.
pub fn surge_state_under_autoscalers(
    dep: Option<&Deployment>,
    hpas: &[Arc<k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler>],
    sos: &[Arc<kube::core::DynamicObject>],
) -> SurgeState {
    let Some(dep) = dep else {
        return SurgeState::Requested;
    };
    let state = surge_state_from_markers(dep);
    if !matches!(state, SurgeState::Kept { .. }) {
        return state;
    }
    let name = dep.metadata.name.as_deref();
    let raised = |a: Option<&std::collections::BTreeMap<String, String>>| {
        Markers::from_annotations(a).filter(|m| m.surged_to > m.baseline)
    };
    let hpa = hpas
        .iter()
        .filter(|h| !crate::surge::view::hpa_is_kedas(h))
        .filter(|h| crate::surge::view::hpa_carrier(h).as_deref() == name)
        .find_map(|h| raised(h.metadata.annotations.as_ref()));
    // A paused ScaledObject whose HPA KEDA deleted lifts nothing, nor one
    // KEDA holds at its paused count (its minimum moves nothing).
    let so = || {
        sos.iter()
            .filter(|so| crate::surge::view::scaled_object_carrier(so).as_deref() == name)
            .filter(|so| {
                !crate::surge::view::scaled_object_idle(so, hpas.iter().map(AsRef::as_ref))
            })
            .find_map(|so| raised(so.metadata.annotations.as_ref()))
    };
    match hpa.or_else(so) {
        Some(m) => SurgeState::Active {
            from: m.baseline,
            to: m.surged_to,
        },
        None => state,
    }
}

/// The message of the 429: the apiserver's own words first, so tools that
/// match on them keep working, then what the product is doing about it.
pub fn blocked_message(b: &Blocked, surge: &SurgeState) -> String {
    let what = match surge {
        SurgeState::Active { from, to } => format!(
            "eviction-autoscaler is surging Deployment {} from {from} to {to} replicas; retry shortly.",
            b.deployment
        ),
        SurgeState::Kept { replicas } => format!(
            "Deployment {} keeps the {replicas} replicas someone set during its surge; \
             eviction-autoscaler adds none for the pods it already counted.",
            b.deployment
        ),
        SurgeState::Requested => format!(
            "eviction-autoscaler has asked for a surge of Deployment {}; retry shortly.",
            b.deployment
        ),
        SurgeState::WouldRequest => format!(
            "eviction-autoscaler would ask for a surge of Deployment {} (dry run: nothing was asked).",
            b.deployment
        ),
        SurgeState::Impossible(why) => format!(
            "eviction-autoscaler cannot surge Deployment {}: {why}",
            b.deployment
        ),
    };
    format!(
        "{} The disruption budget {} needs {} healthy pods and has {} currently. {what}",
        names::APISERVER_PDB_MESSAGE,
        b.pdb,
        b.desired_healthy,
        b.current_healthy
    )
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::cache::{PodWire, SlimCondition, SlimPodSpec, SlimPodStatus};
    use k8s_openapi::api::policy::v1::{PodDisruptionBudgetSpec, PodDisruptionBudgetStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, Time};
    use std::collections::BTreeMap;

    pub struct Fixture {
        pub freshness: Freshness,
        pub pods: Vec<SlimPod>,
        pub pdbs: Vec<PodDisruptionBudget>,
        pub deployment_of: BTreeMap<String, Deployment>,
        pub in_scope: bool,
    }

    impl EvictionView for Fixture {
        fn freshness(&self) -> Freshness {
            self.freshness
        }
        fn pod(&self, ns: &str, name: &str) -> Option<Arc<SlimPod>> {
            self.pods
                .iter()
                .find(|p| p.namespace() == ns && p.name() == name)
                .cloned()
                .map(Arc::new)
        }
        fn pdbs_in(&self, ns: &str) -> Vec<Arc<PodDisruptionBudget>> {
            self.pdbs
                .iter()
                .filter(|p| p.metadata.namespace.as_deref() == Some(ns))
                .cloned()
                .map(Arc::new)
                .collect()
        }
        fn owning_deployment(&self, pod: &SlimPod) -> Option<Arc<Deployment>> {
            let name = pod.name().to_string();
            self.deployment_of.get(&name).cloned().map(Arc::new)
        }
        fn namespace_in_scope(&self, _ns: &str) -> bool {
            self.in_scope
        }
        fn pods_in(&self, ns: &str) -> Vec<Arc<SlimPod>> {
            self.pods
                .iter()
                .filter(|p| p.namespace() == ns)
                .cloned()
                .map(Arc::new)
                .collect()
        }
        fn now(&self) -> Timestamp {
            // A fixed clock: disruptedPods entries are aged against it.
            Timestamp::from_second(1_000_000).unwrap_or_default()
        }
    }

    fn labels() -> BTreeMap<String, String> {
        [("app".to_string(), "web".to_string())].into()
    }

    pub fn pod(name: &str, phase: &str, ready: bool) -> SlimPod {
        SlimPod::from(pod_wire(name, phase, ready))
    }

    /// A pod as the apiserver sends it, for tests that change a field.
    pub fn pod_wire(name: &str, phase: &str, ready: bool) -> PodWire {
        PodWire {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                labels: Some(labels()),
                ..Default::default()
            },
            spec: SlimPodSpec {
                node_name: Some("n1".into()),
            },
            status: SlimPodStatus {
                phase: Some(phase.into()),
                conditions: vec![SlimCondition {
                    type_: "Ready".into(),
                    status: if ready { "True" } else { "False" }.into(),
                }],
            },
        }
    }

    /// A pod of Deployment ns/web, surged to 4, whose PDB allows nothing
    /// yet: the eviction is blocked on fresh facts.
    pub fn blocking() -> Fixture {
        let mut dep = deployment();
        if let Some(s) = dep.spec.as_mut() {
            s.replicas = Some(4);
        }
        Fixture {
            freshness: Freshness::Fresh,
            pods: vec![pod("p", "Running", true)],
            pdbs: vec![pdb("web", 0, 3, 3)],
            deployment_of: [("p".to_string(), dep)].into(),
            in_scope: true,
        }
    }

    pub fn pdb(name: &str, allowed: i32, desired: i32, current: i32) -> PodDisruptionBudget {
        PodDisruptionBudget {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                generation: Some(1),
                ..Default::default()
            },
            spec: Some(PodDisruptionBudgetSpec {
                selector: Some(LabelSelector {
                    match_labels: Some(labels()),
                    ..Default::default()
                }),
                min_available: Some(IntOrString::Int(desired)),
                ..Default::default()
            }),
            status: Some(PodDisruptionBudgetStatus {
                disruptions_allowed: allowed,
                desired_healthy: desired,
                current_healthy: current,
                expected_pods: current,
                observed_generation: Some(1),
                ..Default::default()
            }),
        }
    }

    pub fn deployment() -> Deployment {
        Deployment {
            metadata: ObjectMeta {
                name: Some("web".into()),
                namespace: Some("ns".into()),
                ..Default::default()
            },
            spec: Some(k8s_openapi::api::apps::v1::DeploymentSpec {
                replicas: Some(3),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn base() -> Fixture {
        Fixture {
            freshness: Freshness::Fresh,
            pods: vec![pod("p", "Running", true)],
            pdbs: vec![pdb("web", 0, 3, 3)],
            deployment_of: [("p".to_string(), deployment())].into(),
            in_scope: true,
        }
    }

    fn reason(d: Decision) -> Option<AllowReason> {
        match d {
            Decision::Allow { reason, .. } => Some(reason),
            Decision::Block(_) | Decision::Recount(_) => None,
        }
    }

    #[test]
    fn blocked_when_budget_exhausted_in_scope() {
        let d = decide(&base(), "ns", "p");
        assert_eq!(
            d,
            Decision::Block(Blocked {
                namespace: "ns".into(),
                pod: "p".into(),
                pdb: "web".into(),
                deployment: "web".into(),
                desired_healthy: 3,
                current_healthy: 3,
            })
        );
    }

    /// policy/v1: a PDB whose selector is `{}` protects every pod of its
    /// namespace, so it blocks as the same PDB with a selector does.
    #[test]
    fn an_empty_selector_protects_the_pod() {
        let mut f = base();
        f.pdbs[0].spec.as_mut().unwrap().selector = Some(LabelSelector::default());
        assert_eq!(decide(&f, "ns", "p"), decide(&base(), "ns", "p"));
        assert!(reason(decide(&f, "ns", "p")).is_none(), "blocked");
    }

    #[test]
    fn every_allow_row_of_section_4() {
        type Tweak = fn(&mut Fixture);
        let rows: Vec<(&str, Tweak, AllowReason)> = vec![
            (
                "caches not synced",
                |f| f.freshness = Freshness::NotSynced,
                AllowReason::NotSynced,
            ),
            (
                "a cache lost its watch",
                |f| f.freshness = Freshness::Stale,
                AllowReason::CacheStale,
            ),
            (
                "more than 2000 disruptedPods: the apiserver answers 403",
                |f| f.pdbs[0].status.as_mut().unwrap().disrupted_pods = Some(disrupted(2001)),
                AllowReason::TooManyDisruptedPods,
            ),
            (
                "pod not in cache",
                |f| f.pods.clear(),
                AllowReason::PodNotFound,
            ),
            (
                "terminating",
                |f| {
                    let mut w = pod_wire("p", "Running", true);
                    w.metadata.deletion_timestamp = Some(Time(Default::default()));
                    f.pods[0] = SlimPod::from(w);
                },
                AllowReason::BudgetIgnored,
            ),
            (
                "pending",
                |f| f.pods[0] = pod("p", "Pending", false),
                AllowReason::BudgetIgnored,
            ),
            (
                "succeeded",
                |f| f.pods[0] = pod("p", "Succeeded", false),
                AllowReason::BudgetIgnored,
            ),
            (
                "failed",
                |f| f.pods[0] = pod("p", "Failed", false),
                AllowReason::BudgetIgnored,
            ),
            ("no pdb", |f| f.pdbs.clear(), AllowReason::NoPdb),
            (
                "pdb in another namespace",
                |f| f.pdbs[0].metadata.namespace = Some("other".into()),
                AllowReason::NoPdb,
            ),
            (
                "nil selector protects nothing",
                |f| f.pdbs[0].spec.as_mut().unwrap().selector = None,
                AllowReason::NoPdb,
            ),
            (
                "an empty selector and another PDB: two over the pod",
                |f| {
                    let mut all = pdb("all", 1, 3, 3);
                    all.spec.as_mut().unwrap().selector = Some(LabelSelector::default());
                    f.pdbs.push(all);
                },
                AllowReason::SeveralPdbs,
            ),
            (
                "several pdbs",
                |f| f.pdbs.push(pdb("other", 0, 3, 3)),
                AllowReason::SeveralPdbs,
            ),
            (
                "unready, AlwaysAllow",
                |f| {
                    f.pods[0] = pod("p", "Running", false);
                    f.pdbs[0] = pdb("web", 0, 3, 2);
                    f.pdbs[0]
                        .spec
                        .as_mut()
                        .unwrap()
                        .unhealthy_pod_eviction_policy = Some("AlwaysAllow".into());
                },
                AllowReason::UnhealthyPodPolicy,
            ),
            (
                "unready, default policy, healthy budget",
                |f| {
                    f.pods[0] = pod("p", "Running", false);
                    f.pdbs[0] = pdb("web", 0, 3, 3);
                },
                AllowReason::UnhealthyPodPolicy,
            ),
            (
                "unready, IfHealthyBudget, healthy budget",
                |f| {
                    f.pods[0] = pod("p", "Running", false);
                    f.pdbs[0] = pdb("web", 0, 2, 3);
                    f.pdbs[0]
                        .spec
                        .as_mut()
                        .unwrap()
                        .unhealthy_pod_eviction_policy = Some("IfHealthyBudget".into());
                },
                AllowReason::UnhealthyPodPolicy,
            ),
            (
                "budget allows",
                |f| f.pdbs[0] = pdb("web", 1, 2, 3),
                AllowReason::BudgetAllows,
            ),
            (
                "pdb status stale",
                |f| f.pdbs[0].metadata.generation = Some(2),
                AllowReason::BudgetNotSettled,
            ),
            (
                "negative disruptions",
                |f| f.pdbs[0] = pdb("web", -1, 3, 3),
                AllowReason::BudgetNotSettled,
            ),
            (
                "not a deployment",
                |f| f.deployment_of.clear(),
                AllowReason::NotADeployment,
            ),
            (
                "out of scope",
                |f| f.in_scope = false,
                AllowReason::OutOfScope,
            ),
        ];
        for (name, tweak, want) in rows {
            let mut f = base();
            tweak(&mut f);
            assert_eq!(reason(decide(&f, "ns", "p")), Some(want), "{name}");
        }
    }

    #[test]
    fn unready_pod_is_blocked_when_budget_is_not_healthy() {
        // IfHealthyBudget with currentHealthy < desiredHealthy: the apiserver
        // goes on to checkAndDecrement, which answers 429.
        let mut f = base();
        f.pods[0] = pod("p", "Running", false);
        f.pdbs[0] = pdb("web", 0, 3, 2);
        assert!(matches!(decide(&f, "ns", "p"), Decision::Block(_)));
        // desiredHealthy 0 is not a "healthy budget" either.
        f.pdbs[0] = pdb("web", 0, 0, 0);
        assert!(matches!(decide(&f, "ns", "p"), Decision::Block(_)));
    }

    #[test]
    fn several_pdbs_warning_names_them() {
        let mut f = base();
        f.pdbs.push(pdb("b-other", 0, 3, 3));
        match decide(&f, "ns", "p") {
            Decision::Allow {
                warning: Some(w), ..
            } => assert!(w.contains("b-other, web"), "{w}"),
            d => panic!("unexpected {d:?}"),
        }
    }

    #[test]
    fn message_starts_with_the_apiservers_words() {
        let b = Blocked {
            namespace: "ns".into(),
            pod: "p".into(),
            pdb: "web-pdb".into(),
            deployment: "web".into(),
            desired_healthy: 3,
            current_healthy: 3,
        };
        let m = blocked_message(&b, &SurgeState::Active { from: 3, to: 6 });
        assert!(m.starts_with(names::APISERVER_PDB_MESSAGE));
        assert!(m.contains("web-pdb") && m.contains("Deployment web") && m.contains("from 3 to 6"));
        let m = blocked_message(&b, &SurgeState::Kept { replicas: 3 });
        assert!(m.contains("keeps the 3 replicas someone set"), "{m}");
        let m = blocked_message(&b, &SurgeState::WouldRequest);
        assert!(m.contains("dry run: nothing was asked"), "{m}");
        let m = blocked_message(&b, &SurgeState::Impossible("maxUnavailable is 0".into()));
        assert!(m.contains("cannot surge") && m.contains("maxUnavailable is 0"));
    }

    #[test]
    fn surge_markers_are_read() {
        let mut d = deployment();
        assert_eq!(surge_state_from_markers(&d), SurgeState::Requested);
        d.metadata.annotations = Some(
            [
                (names::ORIGINAL_MIN_REPLICAS.to_string(), "3".to_string()),
                (names::SURGE_REPLICAS.to_string(), "6".to_string()),
            ]
            .into(),
        );
        assert_eq!(
            surge_state_from_markers(&d),
            SurgeState::Active { from: 3, to: 6 }
        );
        // Being deleted: no surge is coming, so no hold either.
        let mut going = d.clone();
        going.metadata.deletion_timestamp = Some(Time(Default::default()));
        assert!(matches!(
            surge_state_from_markers(&going),
            SurgeState::Impossible(why) if why.contains("being deleted")
        ));
        // Adopted: someone's 4 is the baseline and the surged number.
        d.metadata.annotations = Some(
            [
                (names::ORIGINAL_MIN_REPLICAS.to_string(), "4".to_string()),
                (names::SURGE_REPLICAS.to_string(), "4".to_string()),
            ]
            .into(),
        );
        assert_eq!(
            surge_state_from_markers(&d),
            SurgeState::Kept { replicas: 4 }
        );
        // Kept on the Deployment, but its HPA's minimum stays raised by us
        // (2 to 5): the HPA lifts it again, room is coming.
        d.metadata.name = Some("web".into());
        let mut h = crate::surge::view::kedas_hpa("ns", "web", 5, 9);
        h.metadata.owner_references = None;
        h.metadata.annotations = Some(
            [
                (names::ORIGINAL_MIN_REPLICAS.to_string(), "2".to_string()),
                (names::SURGE_REPLICAS.to_string(), "5".to_string()),
            ]
            .into(),
        );
        let standalone = [Arc::new(h.clone())];
        assert_eq!(
            surge_state_under_autoscalers(Some(&d), &standalone, &[]),
            SurgeState::Active { from: 2, to: 5 }
        );
        // KEDA's own HPA carries copies only: still kept.
        let kedas = [Arc::new(crate::surge::view::kedas_hpa("ns", "web", 5, 9))];
        let mut kedas_marked = (*kedas[0]).clone();
        kedas_marked.metadata.annotations = h.metadata.annotations.clone();
        assert_eq!(
            surge_state_under_autoscalers(Some(&d), &[Arc::new(kedas_marked)], &[]),
            SurgeState::Kept { replicas: 4 }
        );
        // Another Deployment's HPA: still kept.
        let mut other = h;
        other.spec.as_mut().unwrap().scale_target_ref.name = "api".into();
        assert_eq!(
            surge_state_under_autoscalers(Some(&d), &[Arc::new(other)], &[]),
            SurgeState::Kept { replicas: 4 }
        );
        assert_eq!(
            surge_state_under_autoscalers(None, &standalone, &[]),
            SurgeState::Requested
        );
        // A ScaledObject raised by us: room is coming, unless it is paused
        // (KEDA deleted its HPA, nothing lifts the Deployment).
        let so = |paused: bool| {
            let mut so = crate::surge::view::scaled_object_of("ns", "web", "web", 5);
            let mut a: BTreeMap<String, String> = [
                (names::ORIGINAL_MIN_REPLICAS.to_string(), "2".to_string()),
                (names::SURGE_REPLICAS.to_string(), "5".to_string()),
            ]
            .into();
            if paused {
                a.insert("autoscaling.keda.sh/paused".into(), "true".into());
            }
            so.metadata.annotations = Some(a);
            [Arc::new(so)]
        };
        assert_eq!(
            surge_state_under_autoscalers(Some(&d), &[], &so(false)),
            SurgeState::Active { from: 2, to: 5 }
        );
        assert_eq!(
            surge_state_under_autoscalers(Some(&d), &[], &so(true)),
            SurgeState::Kept { replicas: 4 }
        );
    }

    fn disrupted(n: usize) -> BTreeMap<String, Time> {
        (0..n)
            .map(|i| (format!("gone-{i}"), Time(Default::default())))
            .collect()
    }

    #[test]
    fn two_thousand_disrupted_pods_still_block() {
        // The apiserver's condition is `len > MaxDisruptedPodSize`: at 2000 it
        // still answers 429 for an exhausted budget.
        let mut f = base();
        f.pdbs[0].status.as_mut().unwrap().disrupted_pods = Some(disrupted(MAX_DISRUPTED_PODS));
        assert!(matches!(decide(&f, "ns", "p"), Decision::Block(_)));
        f.pdbs[0].status.as_mut().unwrap().disrupted_pods = Some(disrupted(MAX_DISRUPTED_PODS + 1));
        assert_eq!(
            reason(decide(&f, "ns", "p")),
            Some(AllowReason::TooManyDisruptedPods)
        );
    }

    fn live_of(f: &Fixture) -> LiveFacts {
        LiveFacts {
            pod: f.pods.first().cloned(),
            pdbs: f.pdbs.clone(),
        }
    }

    /// The caches say Block; what the apiserver's own objects say decides.
    #[test]
    fn a_block_needs_the_live_facts_to_agree() {
        type Tweak = fn(&mut LiveFacts);
        let stale_cases: Vec<(&str, Tweak, &str)> = vec![
            (
                "the PDB has just opened",
                |l| l.pdbs[0] = pdb("web", 1, 2, 3),
                "budget_allows",
            ),
            ("the user deleted the PDB", |l| l.pdbs.clear(), "no_pdb"),
            (
                "the user relaxed the PDB (status not yet recomputed)",
                |l| l.pdbs[0].metadata.generation = Some(2),
                "budget_not_settled",
            ),
            (
                "the user relaxed the PDB to minAvailable 0",
                |l| l.pdbs[0] = pdb("web", 3, 0, 3),
                "budget_allows",
            ),
            (
                "the pod is already terminating",
                |l| {
                    let mut w = pod_wire("p", "Running", true);
                    w.metadata.deletion_timestamp = Some(Time(Default::default()));
                    l.pod = Some(SlimPod::from(w));
                },
                "budget_ignored",
            ),
            (
                "the pod became unready (healthy budget)",
                |l| l.pod = Some(pod("p", "Running", false)),
                "unhealthy_pod_policy",
            ),
            (
                "the pod was relabelled out of the selector",
                |l| {
                    let mut w = pod_wire("p", "Running", true);
                    w.metadata.labels = Some([("app".to_string(), "other".to_string())].into());
                    l.pod = Some(SlimPod::from(w));
                },
                "no_pdb",
            ),
            ("the pod is gone", |l| l.pod = None, "pod_not_found"),
            (
                "a second PDB appeared",
                |l| l.pdbs.push(pdb("web-2", 0, 3, 3)),
                "several_pdbs",
            ),
            (
                "the PDB has more than 2000 disruptedPods",
                |l| {
                    l.pdbs[0].status.as_mut().unwrap().disrupted_pods =
                        Some(disrupted(MAX_DISRUPTED_PODS + 1))
                },
                "too_many_disrupted_pods",
            ),
        ];
        let cache = base();
        assert!(matches!(decide(&cache, "ns", "p"), Decision::Block(_)));
        for (name, tweak, live_reason) in stale_cases {
            let mut live = live_of(&cache);
            tweak(&mut live);
            let d = confirm::<()>(&cache, "ns", "p", Ok(&live));
            assert_eq!(
                reason(d),
                Some(AllowReason::LiveDisagreed(live_reason)),
                "{name}"
            );
        }
    }

    #[test]
    fn a_failed_live_read_allows() {
        let cache = base();
        assert_eq!(
            reason(confirm(&cache, "ns", "p", Err("timed out"))),
            Some(AllowReason::LiveCheckFailed)
        );
    }

    #[test]
    fn a_live_block_is_answered_with_the_live_numbers() {
        let cache = base();
        let mut live = live_of(&cache);
        live.pdbs[0] = pdb("web", 0, 3, 2);
        match confirm::<()>(&cache, "ns", "p", Ok(&live)) {
            Decision::Block(b) => {
                assert_eq!((b.desired_healthy, b.current_healthy), (3, 2));
                assert_eq!(b.deployment, "web");
            }
            d => panic!("expected Block, got {d:?}"),
        }
    }

    #[test]
    fn the_live_view_keeps_owner_and_scope_from_the_caches() {
        // Out of scope or not a Deployment in the caches: allow even if live says block.
        let mut cache = base();
        let live = live_of(&cache);
        cache.in_scope = false;
        assert_eq!(
            reason(confirm::<()>(&cache, "ns", "p", Ok(&live))),
            Some(AllowReason::LiveDisagreed("out_of_scope"))
        );
        let mut cache = base();
        cache.deployment_of.clear();
        assert_eq!(
            reason(confirm::<()>(&cache, "ns", "p", Ok(&live))),
            Some(AllowReason::LiveDisagreed("not_a_deployment"))
        );
    }

    /// A Deployment scaled from 4 to 3 (a surge reverted, an HPA, a
    /// rollout's old ReplicaSet) under a PDB with minAvailable 3, before
    /// the disruption controller recounts: its status still says 4 healthy
    /// and one disruption allowed.
    fn scaled_down() -> Fixture {
        let mut f = base();
        f.pods = ["p", "q", "r", "s"]
            .iter()
            .map(|n| pod(n, "Running", true))
            .collect();
        f.deployment_of = f
            .pods
            .iter()
            .map(|p| (p.name().to_string(), deployment()))
            .collect();
        f.pdbs = vec![pdb("web", 1, 3, 4)];
        f
    }

    /// Anyone who may write a PDB's status can write any number there: the
    /// arithmetic on it saturates (a debug build, the e2e server's, would
    /// panic on an overflow; a release one would wrap and could write
    /// `disruptionsAllowed: 0` to one of ours).
    #[test]
    fn absurd_status_numbers_neither_panic_nor_wrap() {
        for desired in [i32::MIN, i32::MIN + 1, i32::MAX] {
            let mut f = scaled_down();
            f.pods.pop();
            f.pdbs[0] = owned(pdb("web", 1, desired, 4));
            let _ = decide(&f, "ns", "p");
            if let Some(c) = status_catch_up(&f, "ns", "web") {
                assert!(c.disruptions_allowed >= 0, "{desired}: {c:?}");
                assert!(c.disruptions_allowed <= c.was_allowed, "{desired}: {c:?}");
                let _ = c.confirmed(i32::MAX);
            }
        }
        // desiredHealthy i32::MIN: every pod counts as room, nothing lowered.
        let mut f = scaled_down();
        f.pods.pop();
        f.pdbs[0] = owned(pdb("web", 1, i32::MIN, 4));
        assert_eq!(status_catch_up(&f, "ns", "web"), None);
    }

    /// A Deployment status its controller wrote for the spec it has.
    fn rollout_status(replicas: i32, updated: i32) -> k8s_openapi::api::apps::v1::DeploymentStatus {
        k8s_openapi::api::apps::v1::DeploymentStatus {
            replicas: Some(replicas),
            updated_replicas: Some(updated),
            ready_replicas: Some(replicas),
            observed_generation: Some(1),
            ..Default::default()
        }
    }

    fn recount(d: Decision) -> Option<(i32, i32, i32)> {
        match d {
            Decision::Recount(r) => Some((r.settled_healthy, r.desired_healthy, r.current_healthy)),
            _ => None,
        }
    }

    #[test]
    fn a_status_that_has_not_counted_a_scale_down_is_recounted_first() {
        type Tweak = fn(&mut Fixture);
        // Ok((settled healthy, desired, status healthy)) for a Recount;
        // Err(reason) for an allow.
        type Want = Result<(i32, i32, i32), AllowReason>;
        use AllowReason::*;
        let rows: Vec<(&str, Tweak, Want)> = vec![
            (
                "scaled to 3, the ReplicaSet has not removed a pod yet",
                |_| {},
                Ok((3, 3, 4)),
            ),
            (
                "the ReplicaSet removed one pod; the status still counts it",
                |f| {
                    f.pods.pop();
                },
                Ok((3, 3, 4)),
            ),
            (
                "the pod it removes is terminating",
                |f| {
                    let mut w = pod_wire("s", "Running", true);
                    w.metadata.deletion_timestamp = Some(Time(Default::default()));
                    f.pods[3] = SlimPod::from(w);
                },
                Ok((3, 3, 4)),
            ),
            (
                "a minimum of 2 leaves room after the scale-down",
                |f| f.pdbs[0] = pdb("web", 2, 2, 4),
                Err(BudgetAllows),
            ),
            (
                "out of scope: the webhook is invisible there (no hold, no write)",
                |f| f.in_scope = false,
                Err(BudgetAllows),
            ),
            (
                "steady: the Deployment wants the 4 the status counts",
                |f| {
                    for v in f.deployment_of.values_mut() {
                        v.spec.as_mut().unwrap().replicas = Some(4);
                    }
                },
                Err(BudgetAllows),
            ),
            (
                "an unready pod takes nothing from the healthy count",
                |f| f.pods[0] = pod("p", "Running", false),
                Err(UnhealthyPodPolicy),
            ),
            (
                "a pod of another Deployment under the same PDB is healthy, not excess",
                |f| f.pods.push(pod("other", "Running", true)),
                Err(BudgetAllows),
            ),
            (
                "a fresh disruptedPods entry no longer counts as healthy",
                |f| {
                    f.pods.push(pod("other", "Running", true));
                    // Evicted 60 s before the fixture's clock.
                    let at = Timestamp::from_second(1_000_000 - 60).unwrap();
                    f.pdbs[0].status.as_mut().unwrap().disrupted_pods =
                        Some([("other".to_string(), Time(at))].into());
                },
                Ok((3, 3, 4)),
            ),
            (
                "a disruptedPods entry older than 2 minutes counts again",
                |f| {
                    f.pods.push(pod("other", "Running", true));
                    let at = Timestamp::from_second(1_000_000 - 121).unwrap();
                    f.pdbs[0].status.as_mut().unwrap().disrupted_pods =
                        Some([("other".to_string(), Time(at))].into());
                },
                Err(BudgetAllows),
            ),
            (
                "paused mid-rollout: its extra pods stay until it is resumed",
                |f| {
                    for v in f.deployment_of.values_mut() {
                        v.spec.as_mut().unwrap().paused = Some(true);
                    }
                },
                Err(BudgetAllows),
            ),
            (
                "paused, and scaled down in a change its controller has not seen",
                |f| {
                    for v in f.deployment_of.values_mut() {
                        v.spec.as_mut().unwrap().paused = Some(true);
                        v.metadata.generation = Some(9);
                    }
                },
                Ok((3, 3, 4)),
            ),
            (
                "mid-rollout (2 of 4 pods updated): the rollout's race, as without us",
                |f| {
                    for v in f.deployment_of.values_mut() {
                        v.status = Some(rollout_status(4, 2));
                    }
                },
                Err(BudgetAllows),
            ),
            (
                "mid-rollout, a surge of ours reverted: more than the rollout makes",
                |f| {
                    for v in f.deployment_of.values_mut() {
                        v.status = Some(rollout_status(6, 2));
                    }
                },
                Ok((3, 3, 4)),
            ),
            (
                "mid-rollout, the status counts a pod the caches no longer do",
                |f| {
                    f.pods.pop();
                    for v in f.deployment_of.values_mut() {
                        v.status = Some(rollout_status(4, 2));
                    }
                },
                Ok((3, 3, 4)),
            ),
            (
                "mid-rollout with maxSurge 0: no extra pods are the rollout's",
                |f| {
                    for v in f.deployment_of.values_mut() {
                        v.status = Some(rollout_status(4, 2));
                        v.spec.as_mut().unwrap().strategy =
                            Some(k8s_openapi::api::apps::v1::DeploymentStrategy {
                                rolling_update: Some(
                                    k8s_openapi::api::apps::v1::RollingUpdateDeployment {
                                        max_surge: Some(IntOrString::Int(0)),
                                        ..Default::default()
                                    },
                                ),
                                ..Default::default()
                            });
                    }
                },
                Ok((3, 3, 4)),
            ),
            (
                "mid-rollout, and scaled down in a change its controller has not seen",
                |f| {
                    for v in f.deployment_of.values_mut() {
                        v.status = Some(rollout_status(4, 2));
                        v.metadata.generation = Some(9);
                    }
                },
                Ok((3, 3, 4)),
            ),
            (
                "every pod updated: a scale-down (a surge reverted), recounted first",
                |f| {
                    for v in f.deployment_of.values_mut() {
                        v.status = Some(rollout_status(4, 4));
                    }
                },
                Ok((3, 3, 4)),
            ),
            (
                "maxUnavailable: the scale-down lowers desiredHealthy too",
                |f| {
                    f.pdbs[0].spec.as_mut().unwrap().min_available = None;
                    f.pdbs[0].spec.as_mut().unwrap().max_unavailable = Some(IntOrString::Int(1));
                },
                Err(BudgetAllows),
            ),
            (
                "a percentage minAvailable: its desiredHealthy falls with the scale",
                |f| {
                    f.pdbs[0].spec.as_mut().unwrap().min_available =
                        Some(IntOrString::String("75%".into()));
                },
                Err(BudgetAllows),
            ),
            (
                "a pod the PDB does not select counts for nothing",
                |f| {
                    let mut w = pod_wire("x", "Running", true);
                    w.metadata.labels = Some([("app".to_string(), "api".to_string())].into());
                    f.pods.push(SlimPod::from(w));
                },
                Ok((3, 3, 4)),
            ),
        ];
        for (name, tweak, want) in rows {
            let mut f = scaled_down();
            tweak(&mut f);
            let d = decide(&f, "ns", "p");
            let got = match &d {
                Decision::Recount(r) => {
                    Ok((r.settled_healthy, r.desired_healthy, r.current_healthy))
                }
                Decision::Allow { reason, .. } => Err(*reason),
                Decision::Block(_) => panic!("{name}: a Block from a status that allows"),
            };
            assert_eq!(got, want, "{name}");
        }
    }

    /// An owned PDB whose status still counts a pod that is gone: what the
    /// webhook writes, and when it writes nothing.
    #[test]
    fn an_owned_status_that_counts_pods_gone_is_brought_down() {
        type Tweak = fn(&mut Fixture);
        // Some((healthy, allowed, condition index)) when a write is due.
        type Want = Option<(i32, i32, Option<usize>)>;
        let rows: Vec<(&str, Tweak, Want)> = vec![
            (
                "the ReplicaSet removed one pod; the status still counts 4",
                |f| {
                    f.pods.pop();
                },
                Some((3, 0, None)),
            ),
            (
                "the condition says True: it goes to False with the last disruption",
                |f| {
                    f.pods.pop();
                    f.pdbs[0].status.as_mut().unwrap().conditions = Some(vec![
                        condition("Other", "True"),
                        condition("DisruptionAllowed", "True"),
                    ]);
                },
                Some((3, 0, Some(1))),
            ),
            (
                "the pod it removes is terminating",
                |f| {
                    let mut w = pod_wire("s", "Running", true);
                    w.metadata.deletion_timestamp = Some(Time(Default::default()));
                    f.pods[3] = SlimPod::from(w);
                },
                Some((3, 0, None)),
            ),
            (
                "two gone under a minimum of 1: one disruption is left, not three",
                |f| {
                    f.pods.truncate(2);
                    f.pdbs[0] = owned(pdb("web", 3, 1, 4));
                },
                Some((2, 1, None)),
            ),
            (
                "the pods are all there (the ReplicaSet has not acted): nothing to write",
                |_| {},
                None,
            ),
            (
                "the status already allows no more than the pods leave room for",
                |f| {
                    f.pods.pop();
                    f.pdbs[0] = owned(pdb("web", 0, 3, 4));
                },
                None,
            ),
            (
                "not ours: never written",
                |f| {
                    f.pods.pop();
                    f.pdbs[0] = pdb("web", 1, 3, 4);
                },
                None,
            ),
            (
                "maxUnavailable: desiredHealthy falls with the scale-down, never written",
                |f| {
                    f.pods.pop();
                    let spec = f.pdbs[0].spec.as_mut().unwrap();
                    spec.min_available = None;
                    spec.max_unavailable = Some(IntOrString::Int(1));
                },
                None,
            ),
            (
                "a percentage of minAvailable: the same",
                |f| {
                    f.pods.pop();
                    f.pdbs[0].spec.as_mut().unwrap().min_available =
                        Some(IntOrString::String("75%".into()));
                },
                None,
            ),
            (
                "a spec the controller has not observed: the apiserver refuses anyway",
                |f| {
                    f.pods.pop();
                    f.pdbs[0].metadata.generation = Some(2);
                },
                None,
            ),
            (
                "an unready pod does not count as healthy",
                |f| f.pods[3] = pod("s", "Running", false),
                Some((3, 0, None)),
            ),
        ];
        for (name, tweak, want) in rows {
            let mut f = scaled_down();
            f.pdbs[0] = owned(f.pdbs[0].clone());
            tweak(&mut f);
            let got = status_catch_up(&f, "ns", "web");
            assert_eq!(
                got.as_ref()
                    .map(|c| (c.current_healthy, c.disruptions_allowed, c.condition)),
                want,
                "{name}"
            );
            if let Some(c) = got {
                assert_eq!(
                    (c.was_healthy, c.resource_version.as_str()),
                    (4, "7"),
                    "{name}"
                );
            }
        }
        assert_eq!(status_catch_up(&scaled_down(), "ns", "nope"), None);
    }

    /// The write is confirmed by a live list of the PDB's pods: the pod
    /// cache may lag (a Ready not seen yet, a relist in progress), and the
    /// status is never written below what the pods read now leave.
    #[test]
    fn the_status_write_counts_the_pods_read_live() {
        use k8s_openapi::api::core::v1::{Pod, PodCondition, PodStatus};
        let live = |name: &str, ready: bool| Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                labels: Some(labels()),
                ..Default::default()
            },
            spec: None,
            status: Some(PodStatus {
                phase: Some("Running".into()),
                conditions: Some(vec![PodCondition {
                    type_: "Ready".into(),
                    status: if ready { "True" } else { "False" }.into(),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
        };
        // The cache shows 3 Ready pods of 4 (one unready there), the status
        // 4 healthy, 1 allowed, minimum 3: a write of 3/0 is proposed.
        let mut f = scaled_down();
        f.pods[3] = pod("s", "Running", false);
        let mut p = owned(pdb("web", 1, 3, 4));
        p.status.as_mut().unwrap().conditions = Some(vec![condition("DisruptionAllowed", "True")]);
        f.pdbs = vec![p.clone()];
        let proposed = status_catch_up(&f, "ns", "web").expect("the caches propose a write");
        assert_eq!(
            (proposed.current_healthy, proposed.disruptions_allowed),
            (3, 0)
        );
        let now = Timestamp::from_second(1_000_000).unwrap();
        let all_ready: Vec<Pod> = ["p", "q", "r", "s"].iter().map(|n| live(n, true)).collect();
        // Read now, s is Ready: the status is right, nothing is written.
        let healthy = live_healthy(&all_ready, &p, now).unwrap();
        assert_eq!(healthy, 4);
        assert_eq!(proposed.clone().confirmed(healthy), None);
        // Read now, s is unready too: written as proposed, condition and all.
        let mut pods = all_ready.clone();
        pods[3] = live("s", false);
        let c = proposed
            .clone()
            .confirmed(live_healthy(&pods, &p, now).unwrap())
            .expect("the live count agrees");
        assert_eq!(
            (c.current_healthy, c.disruptions_allowed, c.condition),
            (3, 0, Some(0))
        );
        // Terminating, in disruptedPods (for less than 2 minutes) or not
        // selected: not healthy, as the disruption controller counts.
        let mut pods = all_ready.clone();
        pods[0].metadata.deletion_timestamp = Some(Time(now));
        pods[1].metadata.labels = Some([("app".to_string(), "other".to_string())].into());
        let mut leaving = p.clone();
        leaving.status.as_mut().unwrap().disrupted_pods =
            Some([("r".to_string(), Time(now - SignedDuration::from_secs(60)))].into());
        assert_eq!(live_healthy(&pods, &leaving, now), Some(1));
        // An old entry no longer counts the pod as leaving.
        leaving.status.as_mut().unwrap().disrupted_pods =
            Some([("r".to_string(), Time(now - SignedDuration::from_secs(180)))].into());
        assert_eq!(live_healthy(&pods, &leaving, now), Some(2));
        // An entry at the last instant a timestamp holds (year 9999): leaving,
        // as Go's arithmetic has it, and no overflow panic.
        leaving.status.as_mut().unwrap().disrupted_pods =
            Some([("r".to_string(), Time(Timestamp::MAX))].into());
        assert_eq!(live_healthy(&pods, &leaving, now), Some(1));
        // Under a minimum of 1 (status 4 healthy, 3 allowed): 3 read now
        // leave 2 disruptions, and the condition stays.
        let mut low_minimum = proposed.clone();
        low_minimum.desired_healthy = 1;
        low_minimum.was_allowed = 3;
        let c = low_minimum
            .clone()
            .confirmed(3)
            .expect("fewer than the status");
        assert_eq!(
            (c.current_healthy, c.disruptions_allowed, c.condition),
            (3, 2, None)
        );
        // Fewer than the caches counted: the live count is what is written.
        let c = low_minimum.confirmed(1).expect("fewer than the status");
        assert_eq!((c.current_healthy, c.disruptions_allowed), (1, 0));
    }

    #[test]
    fn the_status_write_is_guarded_by_the_version_read() {
        let mut f = scaled_down();
        f.pods.pop();
        let mut p = owned(pdb("web", 1, 3, 4));
        p.status.as_mut().unwrap().conditions = Some(vec![condition("DisruptionAllowed", "True")]);
        f.pdbs = vec![p];
        let c = status_catch_up(&f, "ns", "web").expect("a write is due");
        let ops = c.ops(Timestamp::from_second(1_000_000).unwrap());
        assert_eq!(
            ops,
            vec![
                serde_json::json!({"op": "test", "path": "/metadata/resourceVersion", "value": "7"}),
                serde_json::json!({"op": "add", "path": "/status/currentHealthy", "value": 3}),
                serde_json::json!({"op": "add", "path": "/status/disruptionsAllowed", "value": 0}),
                serde_json::json!({"op": "test", "path": "/status/conditions/0/type", "value": "DisruptionAllowed"}),
                serde_json::json!({"op": "replace", "path": "/status/conditions/0/status", "value": "False"}),
                serde_json::json!({"op": "replace", "path": "/status/conditions/0/reason", "value": "InsufficientPods"}),
                serde_json::json!({"op": "replace", "path": "/status/conditions/0/lastTransitionTime", "value": "1970-01-12T13:46:40Z"}),
            ]
        );
        // Applied to the PDB as read, the patch gives the status the
        // disruption controller would write.
        let mut doc = serde_json::to_value(&f.pdbs[0]).unwrap();
        let patch: json_patch::Patch =
            serde_json::from_value(serde_json::Value::Array(ops)).unwrap();
        json_patch::patch(&mut doc, &patch).expect("the patch applies");
        let after: PodDisruptionBudget = serde_json::from_value(doc).unwrap();
        let st = after.status.unwrap();
        assert_eq!((st.current_healthy, st.disruptions_allowed), (3, 0));
        assert_eq!(st.conditions.unwrap()[0].reason, "InsufficientPods");
        // Written meanwhile (the controller's recount, a spec edit): the
        // patch fails as a whole and the newer status stays.
        let mut newer = f.pdbs[0].clone();
        newer.metadata.resource_version = Some("8".into());
        let newer = serde_json::to_value(&newer).unwrap();
        let mut doc = newer.clone();
        assert!(json_patch::patch(&mut doc, &patch).is_err());
        assert_eq!(doc, newer);
    }

    /// `p` as we make it: ours, `minAvailable` its status's `desiredHealthy`.
    fn owned(mut p: PodDisruptionBudget) -> PodDisruptionBudget {
        let desired = p.status.as_ref().map_or(0, |s| s.desired_healthy);
        if let Some(spec) = p.spec.as_mut() {
            spec.min_available = Some(IntOrString::Int(desired));
        }
        p.metadata.annotations = Some(
            [(
                names::OWNED_BY.to_string(),
                names::OWNED_BY_VALUE.to_string(),
            )]
            .into(),
        );
        p.metadata.resource_version = Some("7".into());
        p
    }

    fn condition(
        type_: &str,
        status: &str,
    ) -> k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
        k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
            type_: type_.into(),
            status: status.into(),
            reason: "SufficientPods".into(),
            message: String::new(),
            observed_generation: None,
            last_transition_time: Time(Timestamp::from_second(0).unwrap()),
        }
    }

    /// Only a Deployment whose status or spec is in flux is counted: the
    /// common allow costs one Deployment lookup.
    #[test]
    fn a_deployment_its_controller_has_not_caught_up_with_is_counted_too() {
        // The status counts 3 healthy (no lag there), but the Deployment
        // was just scaled to 2 and its controller has not seen it yet.
        let mut f = scaled_down();
        f.pods.pop();
        f.pdbs = vec![pdb("web", 1, 2, 3)];
        let mut d = deployment();
        d.spec.as_mut().unwrap().replicas = Some(3);
        d.metadata.generation = Some(2);
        d.status = Some(k8s_openapi::api::apps::v1::DeploymentStatus {
            observed_generation: Some(1),
            replicas: Some(3),
            updated_replicas: Some(3),
            ..Default::default()
        });
        for v in f.deployment_of.values_mut() {
            *v = d.clone();
        }
        // Still wants 3: room for one; counted, not held.
        assert_eq!(
            reason(decide(&f, "ns", "p")),
            Some(AllowReason::BudgetAllows)
        );
        // Scaled to 2, not seen yet by its controller: 3 pods, 1 of them excess.
        for v in f.deployment_of.values_mut() {
            v.spec.as_mut().unwrap().replicas = Some(2);
        }
        assert_eq!(recount(decide(&f, "ns", "p")), Some((2, 2, 3)));
        // Its status shows more pods than it wants: same.
        for v in f.deployment_of.values_mut() {
            v.metadata.generation = Some(1);
        }
        assert_eq!(recount(decide(&f, "ns", "p")), Some((2, 2, 3)));
    }

    #[test]
    fn a_recount_is_never_a_block_and_the_recounted_status_decides() {
        let mut f = scaled_down();
        f.pods.pop();
        assert!(recount(decide(&f, "ns", "p")).is_some());
        // The disruption controller recounted: 3 healthy, none allowed. Now
        // it is a Block like any other (live-confirmed, surge, maybe 429).
        f.pdbs[0] = pdb("web", 0, 3, 3);
        assert!(matches!(decide(&f, "ns", "p"), Decision::Block(_)));
        // A live read that still shows the lagging status allows: the 429
        // needs a status that blocks.
        let cache = f;
        let mut live = live_of(&cache);
        live.pdbs[0] = pdb("web", 1, 3, 4);
        assert_eq!(
            reason(confirm::<()>(&cache, "ns", "p", Ok(&live))),
            Some(AllowReason::LiveDisagreed("recount"))
        );
    }
}
