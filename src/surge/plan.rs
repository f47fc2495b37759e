//! The surge planner (behaviour.md sections 5, 6 and 9): a pure function from
//! what the worker observed about one Deployment to the one thing to do next.
//! No I/O, no async, no clock: elapsed time is passed in.
//!
//! # Contract with the worker
//!
//! The worker (`step.rs`) calls [`plan`] once per Deployment per wake-up for
//! the object a surge changes now (the applier) and carries out the
//! [`Action`]; every other object carrying markers is handled there. Nothing
//! is remembered between calls except what is persisted on the applier
//! object (the [`Markers`] and the adoption note), so a restart at any
//! moment, or planning twice on the same snapshot, gives the same decision;
//! and once an action is applied, the next snapshot does not ask for it again.
//!
//! - The value (replicas or autoscaler minimum) and the markers are on the same
//!   object and are written in ONE patch. That is what lets the planner read
//!   "value != surged count" as "someone else changed it".
//! - `Surge`: write markers `(baseline, target)` and the value `target`; for
//!   [`Applier::Hpa`] and [`Applier::Keda`] also raise the Deployment's
//!   replicas to at least `target` (an autoscaler without metrics does not act).
//! - `AdoptUserChange`: leave the value alone, set both markers to
//!   `new_baseline` and record `displaced` (the adoption note). The episode
//!   goes on as a surge of zero, topped up only if more pods are displaced
//!   than that (no write loop with a GitOps tool), and ends with a `Revert`
//!   to `new_baseline` (a no-op on the value).
//! - `Revert`: write the value `baseline` and remove the markers.
//!
//! # Decisions where behaviour.md is silent
//!
//! - A new surge starts only while the PDB's `disruptionsAllowed` is 0: that is
//!   the spec's signal condition, and with room the drain proceeds on its own
//!   (the webhook denies nothing). Top-ups of an active surge are not gated.
//! - Sizing simulates the budget with every pod healthy (budget.rs arithmetic).
//!   When no target within the cap lets all displaced pods leave at once, the
//!   smallest target giving the most room the cap allows is chosen: any room
//!   lets a drain progress (each evicted pod is replaced elsewhere), more room
//!   makes it faster, and extra replicas beyond that buy nothing.
//! - For an integer `minAvailable` the spec's "baseline + displaced" is kept as
//!   a lower bound (one spare pod per displaced pod, as the owned PDB pins the
//!   floor at the baseline), raised when a user PDB's floor is above it.
//! - HPA or KEDA: if the markers and minimum are in place but the
//!   Deployment's replicas are below the surge (an interrupted second write),
//!   the surge is re-applied as [`SurgeKind::Resume`].
//! - An autoscaler may keep the Deployment above its minimum; the simulation
//!   uses the larger of the two, and a surge that would not raise the running
//!   scale is not made (no useless write, no false "impossible").
//! - Surge is impossible when, at the larger of the cap and the surge already
//!   in place, the budget allows no disruption even with every pod healthy.
//! - A Deployment at 0 replicas is never surged (whatever the applier: under
//!   an autoscaler, 0 is how it is switched off), and a Deployment is
//!   reverted to at least 1; a 0 recorded on an HPA or ScaledObject is honoured.
//! - After a user change is adopted no surge happens in that episode unless
//!   more pods are displaced than when it was adopted; their value itself is
//!   never undone.
//! - Without exactly one PDB, or out of scope, nothing starts or grows; an
//!   active surge still ends (section 6: nothing may strand it).
//! - Markers we cannot have written (negative, or surge below baseline) are
//!   treated as a user change.
//! - Scale-back is decided before any "impossible" check (section 9). It is
//!   safe ([`safe_to_scale_back`]) when nothing goes down, the PDB is gone or
//!   not single, it allows a disruption, the baseline's worth is Ready, no
//!   rollout is in progress (one ReplicaSet removes unready pods first), or
//!   the budget could not allow a disruption even at the surged scale:
//!   waiting would strand the surge.
//! - With [`Applier::Conflict`] there is no single value to compare; the
//!   markers of every object are reverted by `step.rs` once the drain is over.
//! - Readiness does not matter for displacement: a not-ready pod on a draining
//!   node must still leave (the spec excludes only terminating and completed).

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::api::policy::v1::PodDisruptionBudgetSpec;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::budget::{disruptions_allowed, IntOrPercent, Rule};

/// A pod selected by the Deployment's PDB.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodState {
    pub name: String,
    /// `spec.nodeName`; `None` while unscheduled.
    pub node: Option<String>,
    /// `metadata.deletionTimestamp` is set.
    pub terminating: bool,
    /// Phase `Succeeded` or `Failed`.
    pub completed: bool,
}

/// What the surge changes (behaviour.md section 5, "Applier").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Applier {
    /// The Deployment's `spec.replicas`.
    Deployment,
    /// An HPA's `minReplicas` (its current value).
    Hpa { min: i32 },
    /// A KEDA ScaledObject's `minReplicaCount` (its current value).
    Keda { min: i32 },
    /// KEDA and a standalone HPA on one Deployment, or two standalone HPAs:
    /// no surge.
    Conflict,
}

impl Applier {
    /// The value a surge changes, as it is now.
    pub fn current(self, replicas: i32) -> Option<i32> {
        match self {
            Applier::Deployment => Some(replicas),
            Applier::Hpa { min } | Applier::Keda { min } => Some(min),
            Applier::Conflict => None,
        }
    }
}

pub use crate::markers::Markers;

/// Everything the planner looks at, for one Deployment and its PDB.
#[derive(Debug, Clone)]
pub struct Snapshot<'a> {
    /// The one PDB that selects the Deployment's pods; `None` when there is
    /// none or several (then only an active surge is carried to its end).
    pub pdb_spec: Option<&'a PodDisruptionBudgetSpec>,
    /// `status.disruptionsAllowed` (0 when the status is absent).
    pub pdb_disruptions_allowed: i32,
    /// The Deployment's `spec.replicas` now (default 1 resolved by the caller).
    pub replicas: i32,
    /// `spec.strategy.rollingUpdate.maxSurge`; `None` = unset (25%).
    pub max_surge: Option<IntOrString>,
    /// `spec.strategy.type == Recreate`.
    pub recreate: bool,
    pub applier: Applier,
    /// The autoscaler's maximum (HPA `maxReplicas`, ScaledObject
    /// `maxReplicaCount`): the apiserver refuses a minimum above it, so a
    /// surge never goes past it. `None` for a Deployment.
    pub applier_max: Option<i32>,
    /// KEDA holds the Deployment at exactly this many replicas (a
    /// ScaledObject paused with `paused-replicas`, its HPA at a minimum and
    /// maximum of it: [`crate::surge::view::KedaHold::HeldAt`]): the HPA
    /// controller takes any surge above it back, whatever the applier.
    pub keda_held_at: Option<i32>,
    /// Parsed from the applier object's annotations ([`Markers::from_annotations`]).
    pub markers: Option<Markers>,
    /// Displaced pods counted when a user's change was adopted in this
    /// episode ([`crate::markers::adopted_displaced`]): no new surge until more are displaced.
    pub adopted_displaced: Option<i32>,
    /// A user's change was seen and its adoption not yet persisted (the
    /// write failed): adopt the current value even if it equals the surge.
    pub adoption_pending: bool,
    /// The applier's value was last written through the object itself by
    /// someone other than this product (a Deployment's managedFields,
    /// [`crate::surge::writer`]): a value equal to the surge is theirs.
    pub set_by_someone: bool,
    /// May a surge start or grow? False out of scope (section 2: invisible);
    /// an active surge is still carried to its end (section 6).
    pub may_surge: bool,
    /// The Deployment's own pods (selected by its selector and, when there is
    /// one, by the PDB).
    pub pods: Vec<PodState>,
    /// Pods the PDB selects that belong to something else (another
    /// Deployment, a StatefulSet): they count in the budget (section 5, last
    /// rule). Another Deployment whose template the PDB selects counts at
    /// least at its replicas (its evicted pods are being replaced).
    pub other_pods: i32,
    /// The Deployment's Ready, non-terminating pods (the scale-back gate).
    pub ready_pods: i32,
    /// A rollout is in progress (more than one ReplicaSet holds pods).
    pub rolling_out: bool,
    /// Cordoned or drain-tainted nodes.
    pub draining_nodes: BTreeSet<String>,
    /// Pods whose eviction was denied within the cooldown window.
    pub denied_pods: BTreeSet<String>,
    /// Time since the last signal for this Deployment (a blocked eviction,
    /// displaced pods seen, or this leader's start while a surge is active);
    /// `None` = never.
    pub since_last_signal: Option<Duration>,
    pub zero_surge_override: Option<IntOrPercent>,
    pub cooldown: Duration,
}

/// The one thing to do next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// No surge is active and none is needed.
    None,
    /// Set the value to `target` and the markers to `(baseline, target)`.
    Surge {
        baseline: i32,
        target: i32,
        kind: SurgeKind,
    },
    /// Someone else changed the value during a surge: keep their value, which
    /// is the new baseline; set both markers to `new_baseline` and record
    /// `displaced` (no new surge in this episode unless more are displaced).
    AdoptUserChange { new_baseline: i32, displaced: i32 },
    /// Set the value to `baseline` and remove the markers.
    Revert { baseline: i32 },
    /// A surge is needed and cannot help: Degraded, an Event, the 429 message.
    /// `reason` reads after "cannot surge Deployment x: ".
    Impossible { reason: String },
    /// A surge is active and stays as it is.
    Wait(Wait),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SurgeKind {
    /// A new surge (Event "surge started").
    Start,
    /// More pods displaced: a larger surge (Event "surge topped up").
    TopUp,
    /// HPA only: the markers and minimum are in place but the Deployment's
    /// replicas lag (an interrupted second write). Re-apply; no Event.
    Resume,
}

/// Why an active surge is kept (for requeueing and status).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// Pods still have to leave draining nodes.
    Draining { displaced: i32 },
    /// Requeue after `remaining`.
    Cooldown { remaining: Duration },
    /// The PDB allows no disruption yet (surge pods not ready).
    NoDisruptionAllowed,
}

const CONFLICT: &str = "a KEDA ScaledObject and an HPA (or two HPAs) both target this \
    Deployment, so there is no single minimum to raise; remove one of them";

/// Decide what to do for one Deployment now.
pub fn plan(s: &Snapshot) -> Action {
    let displaced = displaced_count(s);
    let current = s.applier.current(s.replicas);
    match s.markers {
        None => plan_idle(s, displaced, current),
        Some(m) => plan_active(s, m, displaced, current),
    }
}

/// Pods that must leave: on a draining node, or denied an eviction within the
/// cooldown; terminating and completed pods are already leaving.
pub fn displaced_count(s: &Snapshot) -> i32 {
    let n = s
        .pods
        .iter()
        .filter(|p| !p.terminating && !p.completed)
        .filter(|p| {
            p.node
                .as_ref()
                .is_some_and(|n| s.draining_nodes.contains(n))
                || s.denied_pods.contains(&p.name)
        })
        .count();
    i32::try_from(n).unwrap_or(i32::MAX)
}

fn plan_idle(s: &Snapshot, displaced: i32, current: Option<i32>) -> Action {
    // Nothing has to leave, or the budget already lets pods go.
    if displaced == 0 || s.pdb_disruptions_allowed > 0 {
        return Action::None;
    }
    // Out of scope, or no single PDB to size for: nothing new starts.
    let Some(spec) = s.pdb_spec.filter(|_| s.may_surge) else {
        return Action::None;
    };
    // A user's value was adopted in this episode (on the Deployment, before
    // an autoscaler became the applier): no new surge for as many displaced.
    if s.adopted_displaced.is_some_and(|n| displaced <= n) {
        return Action::None;
    }
    let Some(current) = current else {
        return Action::Impossible {
            reason: CONFLICT.into(),
        };
    };
    // Someone scaled the Deployment to 0 (under an autoscaler too: the
    // usual way to switch it off): its pods are going anyway, and a surge
    // would bring it back, at 1 at least after the revert.
    // (For a Deployment applier `current` is these replicas.)
    if s.replicas <= 0 {
        return Action::None;
    }
    let baseline = current.max(0);
    match size(s, spec, baseline, None, displaced) {
        Err(reason) => Action::Impossible { reason },
        Ok(target) if target > baseline => Action::Surge {
            baseline,
            target,
            kind: SurgeKind::Start,
        },
        // The budget lets the pods go once they are healthy; a surge cannot speed it up.
        Ok(_) => Action::None,
    }
}

fn plan_active(s: &Snapshot, m: Markers, displaced: i32, current: Option<i32>) -> Action {
    if let Some(current) = current {
        let ours = m.plausible();
        // We write value and markers together, so a different value is
        // someone else's; so is our number written by someone else after
        // our surge (changed away and back between two of our reads).
        let theirs = s.set_by_someone && m.surged_to != m.baseline;
        if !ours || current != m.surged_to || s.adoption_pending || theirs {
            return Action::AdoptUserChange {
                new_baseline: current,
                displaced,
            };
        }
    }
    // Scale back comes before any "impossible" check, so nothing strands a surge.
    if displaced == 0 {
        if let Some(remaining) = cooldown_remaining(s) {
            return Action::Wait(Wait::Cooldown { remaining });
        }
        let restore = restore_value(s.applier, m.baseline);
        if safe_to_scale_back(s, m.surged_to, deployment_after(s, restore)) {
            return Action::Revert { baseline: restore };
        }
        return Action::Wait(Wait::NoDisruptionAllowed);
    }
    if s.applier == Applier::Conflict {
        return Action::Impossible {
            reason: CONFLICT.into(),
        };
    }
    // The episode goes on as it is: out of scope, no single PDB, or a
    // user's value adopted for this many displaced pods (no write loop).
    let Some(spec) = s.pdb_spec.filter(|_| s.may_surge) else {
        return Action::Wait(Wait::Draining { displaced });
    };
    if s.adopted_displaced.is_some_and(|n| displaced <= n) {
        return Action::Wait(Wait::Draining { displaced });
    }
    // Someone scaled the Deployment to 0 (adopted as the baseline): its pods
    // are going anyway, as in `plan_idle`; a top-up would make it 1, and a
    // Deployment is never reverted to 0 by us.
    // So is a Deployment at 0 under an autoscaler: neither a top-up nor a
    // resume writes it up from the user's 0.
    if (s.applier == Applier::Deployment && m.baseline <= 0) || s.replicas <= 0 {
        return Action::Wait(Wait::Draining { displaced });
    }
    match size(s, spec, m.baseline, Some(m.surged_to), displaced) {
        Err(reason) => Action::Impossible { reason },
        // Never shrink mid-drain: only a larger target is written.
        Ok(want) if want > m.surged_to => Action::Surge {
            baseline: m.baseline,
            target: want,
            kind: SurgeKind::TopUp,
        },
        Ok(_)
            if matches!(s.applier, Applier::Hpa { .. } | Applier::Keda { .. })
                && s.replicas < m.surged_to =>
        {
            Action::Surge {
                baseline: m.baseline,
                target: m.surged_to,
                kind: SurgeKind::Resume,
            }
        }
        Ok(_) => Action::Wait(Wait::Draining { displaced }),
    }
}

/// No displaced pods and the cooldown has passed: the first two conditions
/// of a scale back (section 6), shared with the other marked objects.
pub fn drain_over(s: &Snapshot) -> bool {
    displaced_count(s) == 0 && cooldown_remaining(s).is_none()
}

/// The Deployment's replicas once the applier is restored to `restore`.
fn deployment_after(s: &Snapshot, restore: i32) -> i32 {
    match s.applier {
        Applier::Deployment | Applier::Conflict => restore,
        // An autoscaler keeps the Deployment at its minimum at least.
        Applier::Hpa { .. } | Applier::Keda { .. } => restore.max(0),
    }
}

/// Scaling the Deployment back to `replicas_after` cannot break the budget
/// (section 6): the PDB is gone or not single; it allows a disruption; at
/// least `replicas_after` pods are Ready; or no rollout is in progress, so
/// one ReplicaSet scales down and removes unscheduled and unready pods before
/// Ready ones (with fewer Ready pods than `replicas_after`, none is removed:
/// waiting for them, as when a pod crash-loops or surge pods cannot
/// schedule, would strand the surge). During a rollout scaling is
/// proportional across ReplicaSets, Ready pods included: then we wait, unless
/// the budget could not allow a disruption even at the surged scale.
pub fn safe_to_scale_back(s: &Snapshot, surged_to: i32, replicas_after: i32) -> bool {
    // Nothing goes down: nothing to guard.
    if s.replicas <= replicas_after {
        return true;
    }
    let Some(spec) = s.pdb_spec else {
        return true;
    };
    s.pdb_disruptions_allowed > 0
        || s.ready_pods >= replicas_after
        || !s.rolling_out
        || !budget_can_open(s, spec, surged_to)
}

/// `Some(time left)` while the cooldown since the last signal runs.
fn cooldown_remaining(s: &Snapshot) -> Option<Duration> {
    s.since_last_signal
        .and_then(|since| s.cooldown.checked_sub(since))
        .filter(|r| !r.is_zero())
}

/// The value a revert writes: a Deployment is never scaled to 0 by us (under
/// a conflict we cannot tell which object it is, so we take the safe side).
fn restore_value(applier: Applier, baseline: i32) -> i32 {
    match applier {
        Applier::Hpa { .. } | Applier::Keda { .. } => baseline.max(0),
        Applier::Deployment | Applier::Conflict => baseline.max(1),
    }
}

/// Could the budget allow a disruption at this scale with every pod healthy?
fn budget_can_open(s: &Snapshot, spec: &PodDisruptionBudgetSpec, replicas: i32) -> bool {
    Rule::from_spec(spec).is_ok_and(|r| allowed_at(r, replicas, running_floor(s), s.other_pods) > 0)
}

/// Replicas the Deployment runs regardless of our surge: an autoscaler may
/// keep it above its minimum. While our surge holds it, nothing is known
/// beyond the surge, so 0.
fn running_floor(s: &Snapshot) -> i32 {
    match s.markers {
        Some(m) if s.replicas <= m.surged_to => 0,
        _ => s.replicas.max(0),
    }
}

/// `disruptionsAllowed` the PDB would compute with the applier at `replicas`,
/// `others` pods of other workloads under the same PDB, and every pod
/// healthy. Non-decreasing in `replicas` for every rule.
fn allowed_at(rule: Rule, replicas: i32, floor: i32, others: i32) -> i32 {
    let scale = replicas.max(floor).max(0).saturating_add(others.max(0));
    let (expected, desired) = rule.expected_and_desired(scale, scale);
    disruptions_allowed(scale, desired, expected)
}

/// The value to surge to, in `[baseline, baseline + cap]` (a surge already in
/// place is never lowered by the caller), or why no surge can help.
fn size(
    s: &Snapshot,
    spec: &PodDisruptionBudgetSpec,
    baseline: i32,
    surged_to: Option<i32>,
    displaced: i32,
) -> Result<i32, String> {
    let rule = Rule::from_spec(spec).map_err(|e| format!("the PDB's budget is invalid: {e}"))?;
    let cap = surge_cap(s, baseline)?;
    let cap_target = baseline.saturating_add(cap.replicas);
    let floor = running_floor(s);
    let allowed = |t: i32| allowed_at(rule, t, floor, s.other_pods);

    let highest = surged_to.map_or(cap_target, |m| m.max(cap_target));
    if allowed(highest) == 0 {
        return Err(impossible_reason(rule, cap, baseline, highest.max(floor)));
    }
    // All displaced pods at once if the cap allows it, else as many as it can.
    let need = displaced.min(allowed(cap_target));
    let mut want = smallest_reaching(baseline, cap_target, need, allowed);
    if let Rule::MinAvailable(IntOrPercent::Int(_)) = rule {
        // A pinned floor: one extra pod per displaced pod (behaviour.md section 5).
        want = want.max(baseline.saturating_add(displaced)).min(cap_target);
    }
    // Raising the value below what already runs changes nothing.
    if want <= floor {
        want = baseline;
    }
    Ok(want)
}

/// The smallest `t` in `[lo, hi]` with `f(t) >= need`, for `f` non-decreasing
/// and `f(hi) >= need` (binary search: the cap can be large).
fn smallest_reaching(lo: i32, hi: i32, need: i32, f: impl Fn(i32) -> i32) -> i32 {
    let (mut lo, mut hi) = (i64::from(lo), i64::from(hi));
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        // mid lies between two i32 values.
        let mid32 = i32::try_from(mid).unwrap_or(i32::MAX);
        if f(mid32) >= need {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    i32::try_from(lo).unwrap_or(i32::MAX)
}

/// How many replicas above the baseline a surge may add, and where that came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Cap {
    replicas: i32,
    source: CapSource,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CapSource {
    MaxSurge(IntOrPercent),
    /// Unset strategy: Kubernetes' default maxSurge of 25%.
    Default,
    Recreate,
    ExplicitZero,
    Override(IntOrPercent),
    /// The autoscaler's maximum is lower than the baseline plus maxSurge.
    AutoscalerMax(i32),
    /// KEDA holds the Deployment at this count ([`Snapshot::keda_held_at`]).
    KedaHeld(i32),
}

/// What the Deployment's own strategy says of surging.
fn strategy_source(recreate: bool, max_surge: Option<&IntOrString>) -> Result<CapSource, String> {
    if recreate {
        return Ok(CapSource::Recreate);
    }
    Ok(match max_surge {
        None => CapSource::Default,
        Some(v) => match IntOrPercent::from_k8s(v) {
            Ok(IntOrPercent::Int(0) | IntOrPercent::Percent(0)) => CapSource::ExplicitZero,
            Ok(v) => CapSource::MaxSurge(v),
            Err(e) => return Err(format!("the Deployment's maxSurge is invalid: {e}")),
        },
    })
}

/// The extra pods the Deployment's strategy lets a rollout make over
/// `replicas`: maxSurge (25% when unset), rounded up as the Deployment
/// controller does; none for Recreate or an explicit 0.
pub fn strategy_surge(
    recreate: bool,
    max_surge: Option<&IntOrString>,
    replicas: i32,
) -> Result<i32, String> {
    let scaled = |v: IntOrPercent| v.scaled(replicas.max(0), true).max(0);
    Ok(match strategy_source(recreate, max_surge)? {
        CapSource::Default => scaled(IntOrPercent::Percent(25)),
        CapSource::MaxSurge(v) => scaled(v),
        _ => 0,
    })
}

fn surge_cap(s: &Snapshot, baseline: i32) -> Result<Cap, String> {
    let scaled = |v: IntOrPercent| v.scaled(baseline.max(0), true).max(0);
    let source = strategy_source(s.recreate, s.max_surge.as_ref())?;
    let cap = match (source, s.zero_surge_override) {
        (CapSource::Recreate | CapSource::ExplicitZero, Some(o)) => Cap {
            replicas: scaled(o),
            source: CapSource::Override(o),
        },
        (CapSource::Recreate | CapSource::ExplicitZero, None) => Cap {
            replicas: 0,
            source,
        },
        (CapSource::Default, _) => Cap {
            replicas: scaled(IntOrPercent::Percent(25)),
            source,
        },
        (CapSource::MaxSurge(v), _) => Cap {
            replicas: scaled(v),
            source,
        },
        (CapSource::Override(o), _) => Cap {
            replicas: scaled(o),
            source,
        },
        (CapSource::AutoscalerMax(_) | CapSource::KedaHeld(_), _) => Cap {
            replicas: 0,
            source,
        },
    };
    // A minimum above the maximum is invalid: the apiserver would refuse the
    // write on every pass.
    let cap = match s.applier_max {
        Some(max) if max.saturating_sub(baseline).max(0) < cap.replicas => Cap {
            replicas: max.saturating_sub(baseline).max(0),
            source: CapSource::AutoscalerMax(max),
        },
        _ => cap,
    };
    // Replicas above KEDA's hold last one HPA sync at most.
    Ok(match s.keda_held_at {
        Some(held) if held.saturating_sub(baseline).max(0) < cap.replicas => Cap {
            replicas: held.saturating_sub(baseline).max(0),
            source: CapSource::KedaHeld(held),
        },
        _ => cap,
    })
}

fn impossible_reason(rule: Rule, cap: Cap, baseline: i32, highest: i32) -> String {
    let never = "so no number of replicas lets a pod be evicted";
    match rule {
        Rule::MaxUnavailable(m @ (IntOrPercent::Int(0) | IntOrPercent::Percent(0))) => {
            return format!("the PDB's maxUnavailable is {m}, {never}")
        }
        Rule::MinAvailable(IntOrPercent::Percent(p)) if p >= 100 => {
            return format!("the PDB's minAvailable is {p}%, {never}")
        }
        Rule::None => {
            return format!("the PDB sets neither minAvailable nor maxUnavailable, {never}")
        }
        _ => {}
    }
    match cap.source {
        CapSource::Recreate if cap.replicas == 0 => {
            "the Deployment's strategy is Recreate, which allows no surge, \
             and ZERO_SURGE_OVERRIDE is not set"
                .into()
        }
        CapSource::ExplicitZero if cap.replicas == 0 => {
            "the Deployment's maxSurge is 0 and ZERO_SURGE_OVERRIDE is not set".into()
        }
        CapSource::AutoscalerMax(max) if cap.replicas == 0 => format!(
            "the autoscaler's maximum of {max} replicas leaves no room above the baseline of \
             {baseline}, so no surge can raise its minimum"
        ),
        CapSource::KedaHeld(held) if cap.replicas == 0 => format!(
            "KEDA holds it at {held} replicas (its ScaledObject is paused with \
             autoscaling.keda.sh/paused-replicas and KEDA's HPA has a minimum and maximum of \
             {held}), so no surge can add a pod: evictions go on only as the budget allows; \
             lift the pause to let a surge help"
        ),
        _ => {
            let budget = match rule {
                Rule::MinAvailable(v) => format!("minAvailable {v}"),
                Rule::MaxUnavailable(v) => format!("maxUnavailable {v}"),
                Rule::None => "budget".into(),
            };
            let limit = match cap.source {
                CapSource::Override(o) => format!("ZERO_SURGE_OVERRIDE {o}"),
                CapSource::Default => "maxSurge 25% (default)".into(),
                CapSource::MaxSurge(v) => format!("maxSurge {v}"),
                CapSource::Recreate | CapSource::ExplicitZero => "maxSurge 0".into(),
                CapSource::AutoscalerMax(max) => format!("the autoscaler's maximum of {max}"),
                CapSource::KedaHeld(held) => format!("KEDA's paused-replicas hold at {held}"),
            };
            format!(
                "even at the largest surge allowed ({limit}: {} above the baseline of {baseline}, \
                 {highest} replicas) the PDB's {budget} allows no disruption",
                cap.replicas
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn int(n: i32) -> IntOrString {
        IntOrString::Int(n)
    }
    fn pct(s: &str) -> IntOrString {
        IntOrString::String(s.into())
    }
    fn min_available(v: IntOrString) -> PodDisruptionBudgetSpec {
        PodDisruptionBudgetSpec {
            min_available: Some(v),
            ..Default::default()
        }
    }
    fn max_unavailable(v: IntOrString) -> PodDisruptionBudgetSpec {
        PodDisruptionBudgetSpec {
            max_unavailable: Some(v),
            ..Default::default()
        }
    }
    fn pod(name: &str, node: &str) -> PodState {
        PodState {
            name: name.into(),
            node: Some(node.into()),
            terminating: false,
            completed: false,
        }
    }

    /// Three replicas, pods p0..p2 on nodes n0..n2, nothing draining, budget blocked.
    fn snap(spec: &PodDisruptionBudgetSpec) -> Snapshot<'_> {
        Snapshot {
            pdb_spec: Some(spec),
            pdb_disruptions_allowed: 0,
            replicas: 3,
            max_surge: None,
            recreate: false,
            applier: Applier::Deployment,
            applier_max: None,
            keda_held_at: None,
            markers: None,
            adopted_displaced: None,
            adoption_pending: false,
            set_by_someone: false,
            may_surge: true,
            pods: (0..3)
                .map(|i| pod(&format!("p{i}"), &format!("n{i}")))
                .collect(),
            other_pods: 0,
            ready_pods: 0,
            rolling_out: true,
            draining_nodes: BTreeSet::new(),
            denied_pods: BTreeSet::new(),
            since_last_signal: None,
            zero_surge_override: None,
            cooldown: Duration::from_secs(60),
        }
    }

    fn drain(s: &mut Snapshot, node: &str) {
        s.draining_nodes.insert(node.into());
    }
    /// n pods on node "a" (draining), the rest elsewhere, `replicas` in all.
    fn on_draining_node(s: &mut Snapshot, replicas: i32, n: i32) {
        s.replicas = replicas;
        s.pods = (0..replicas)
            .map(|i| pod(&format!("p{i}"), if i < n { "a" } else { "b" }))
            .collect();
        drain(s, "a");
    }
    fn surge(baseline: i32, target: i32, kind: SurgeKind) -> Action {
        Action::Surge {
            baseline,
            target,
            kind,
        }
    }
    fn start(baseline: i32, target: i32) -> Action {
        surge(baseline, target, SurgeKind::Start)
    }
    fn secs(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    enum Want {
        Is(Action),
        Impossible(&'static str),
    }

    type Setup = fn(&mut Snapshot);
    type Row = (&'static str, PodDisruptionBudgetSpec, Setup, Want);

    /// A table row; the function gives the closure its type.
    fn row(name: &'static str, spec: PodDisruptionBudgetSpec, setup: Setup, want: Want) -> Row {
        (name, spec, setup, want)
    }

    fn check(rows: Vec<Row>) {
        for (name, spec, setup, want) in rows {
            let mut s = snap(&spec);
            setup(&mut s);
            let got = plan(&s);
            assert_eq!(plan(&s), got, "{name}: deterministic");
            match want {
                Want::Is(a) => assert_eq!(got, a, "{name}"),
                Want::Impossible(words) => match &got {
                    Action::Impossible { reason } => {
                        assert!(reason.contains(words), "{name}: {reason:?} lacks {words:?}")
                    }
                    other => panic!("{name}: want Impossible({words:?}), got {other:?}"),
                },
            }
        }
    }

    #[test]
    fn displaced_pods() {
        let spec = min_available(int(3));
        let mut s = snap(&spec);
        assert_eq!(displaced_count(&s), 0);
        drain(&mut s, "n0");
        assert_eq!(displaced_count(&s), 1);
        s.denied_pods.insert("p1".into());
        assert_eq!(displaced_count(&s), 2, "denied counts wherever it runs");
        s.denied_pods.insert("gone".into());
        assert_eq!(displaced_count(&s), 2, "a denied pod that no longer exists");
        s.pods[0].terminating = true;
        assert_eq!(displaced_count(&s), 1, "terminating does not count");
        s.pods[1].completed = true;
        assert_eq!(displaced_count(&s), 0, "completed does not count");
        s.pods.push(PodState {
            name: "pending".into(),
            node: None,
            terminating: false,
            completed: false,
        });
        assert_eq!(displaced_count(&s), 0, "unscheduled pods are on no node");
        drain(&mut s, "n2");
        assert_eq!(displaced_count(&s), 1);
    }

    #[test]
    fn starting_a_surge() {
        check(vec![
            row(
                "nothing displaced",
                min_available(int(3)),
                |_| {},
                Want::Is(Action::None),
            ),
            row(
                "a draining node with no pods of ours",
                min_available(int(3)),
                |s| drain(s, "elsewhere"),
                Want::Is(Action::None),
            ),
            row(
                "budget has room: the drain proceeds alone",
                min_available(int(3)),
                |s| {
                    drain(s, "n0");
                    s.pdb_disruptions_allowed = 1;
                },
                Want::Is(Action::None),
            ),
            row(
                "owned PDB, one pod displaced",
                min_available(int(3)),
                |s| drain(s, "n0"),
                Want::Is(start(3, 4)),
            ),
            row(
                "a denied eviction alone",
                min_available(int(3)),
                |s| {
                    s.denied_pods.insert("p2".into());
                },
                Want::Is(start(3, 4)),
            ),
            row(
                "two displaced, default 25% of 3 caps at 1",
                min_available(int(3)),
                |s| {
                    drain(s, "n0");
                    drain(s, "n1");
                },
                Want::Is(start(3, 4)),
            ),
            row(
                "Deployment scaled to 0 with stale pods",
                min_available(int(0)),
                |s| {
                    s.replicas = 0;
                    drain(s, "n0");
                },
                Want::Is(Action::None),
            ),
            row(
                "signals without displaced pods do nothing",
                min_available(int(3)),
                |s| s.since_last_signal = Some(secs(1)),
                Want::Is(Action::None),
            ),
        ]);
    }

    /// The apiserver refuses an HPA whose minimum exceeds its maximum (KEDA's
    /// webhook a ScaledObject's): a surge stops at the maximum, and with no
    /// room at all it is Impossible instead of a write refused on every pass.
    #[test]
    fn autoscaler_maximum_caps_the_surge() {
        check(vec![
            row(
                "HPA max 3 = min: no room",
                min_available(int(3)),
                |s| {
                    on_draining_node(s, 3, 3);
                    s.applier = Applier::Hpa { min: 3 };
                    s.applier_max = Some(3);
                    s.max_surge = Some(int(3));
                },
                Want::Impossible("maximum of 3 replicas leaves no room above the baseline of 3"),
            ),
            row(
                "KEDA max 4: one above the baseline of 3, maxSurge 3",
                min_available(int(3)),
                |s| {
                    on_draining_node(s, 3, 3);
                    s.applier = Applier::Keda { min: 3 };
                    s.applier_max = Some(4);
                    s.max_surge = Some(int(3));
                },
                Want::Is(start(3, 4)),
            ),
            row(
                "HPA max 20: maxSurge binds",
                min_available(int(3)),
                |s| {
                    on_draining_node(s, 3, 3);
                    s.applier = Applier::Hpa { min: 3 };
                    s.applier_max = Some(20);
                    s.max_surge = Some(int(2));
                },
                Want::Is(start(3, 5)),
            ),
            row(
                "HPA max 4, minAvailable 100% cannot open at 4 either",
                min_available(pct("100%")),
                |s| {
                    on_draining_node(s, 3, 1);
                    s.applier = Applier::Hpa { min: 3 };
                    s.applier_max = Some(4);
                },
                Want::Impossible("minAvailable is 100%"),
            ),
            row(
                "maxUnavailable 0 and max = min: the budget's reason comes first",
                max_unavailable(int(0)),
                |s| {
                    on_draining_node(s, 3, 1);
                    s.applier = Applier::Hpa { min: 3 };
                    s.applier_max = Some(3);
                },
                Want::Impossible("maxUnavailable is 0"),
            ),
        ]);
    }

    #[test]
    fn max_surge_and_zero_surge_override() {
        check(vec![
            row(
                "unset: 25% of 8 = 2",
                min_available(int(8)),
                |s| on_draining_node(s, 8, 3),
                Want::Is(start(8, 10)),
            ),
            row(
                "int 2",
                min_available(int(3)),
                |s| {
                    on_draining_node(s, 3, 2);
                    s.max_surge = Some(int(2));
                },
                Want::Is(start(3, 5)),
            ),
            row(
                "int 5 larger than needed",
                min_available(int(3)),
                |s| {
                    on_draining_node(s, 3, 2);
                    s.max_surge = Some(int(5));
                },
                Want::Is(start(3, 5)),
            ),
            row(
                "50% of 3 rounds up to 2",
                min_available(int(3)),
                |s| {
                    on_draining_node(s, 3, 3);
                    s.max_surge = Some(pct("50%"));
                },
                Want::Is(start(3, 5)),
            ),
            row(
                "10% of 3 rounds up to 1",
                min_available(int(3)),
                |s| {
                    on_draining_node(s, 3, 3);
                    s.max_surge = Some(pct("10%"));
                },
                Want::Is(start(3, 4)),
            ),
            row(
                "Recreate without override",
                min_available(int(3)),
                |s| {
                    drain(s, "n0");
                    s.recreate = true;
                },
                Want::Impossible("Recreate"),
            ),
            row(
                "Recreate ignores a stale maxSurge",
                min_available(int(3)),
                |s| {
                    drain(s, "n0");
                    s.recreate = true;
                    s.max_surge = Some(int(3));
                },
                Want::Impossible("ZERO_SURGE_OVERRIDE is not set"),
            ),
            row(
                "explicit maxSurge 0",
                min_available(int(3)),
                |s| {
                    drain(s, "n0");
                    s.max_surge = Some(int(0));
                },
                Want::Impossible("maxSurge is 0"),
            ),
            row(
                "explicit maxSurge 0%",
                min_available(int(3)),
                |s| {
                    drain(s, "n0");
                    s.max_surge = Some(pct("0%"));
                },
                Want::Impossible("maxSurge is 0"),
            ),
            row(
                "Recreate with override 2",
                min_available(int(3)),
                |s| {
                    on_draining_node(s, 3, 3);
                    s.recreate = true;
                    s.zero_surge_override = Some(IntOrPercent::Int(2));
                },
                Want::Is(start(3, 5)),
            ),
            row(
                "explicit 0 with override 50% of 3 = 2",
                min_available(int(3)),
                |s| {
                    on_draining_node(s, 3, 3);
                    s.max_surge = Some(int(0));
                    s.zero_surge_override = Some(IntOrPercent::Percent(50));
                },
                Want::Is(start(3, 5)),
            ),
            row(
                "override 0 is still no surge",
                min_available(int(3)),
                |s| {
                    drain(s, "n0");
                    s.recreate = true;
                    s.zero_surge_override = Some(IntOrPercent::Int(0));
                },
                Want::Impossible("ZERO_SURGE_OVERRIDE 0"),
            ),
            row(
                "override does not apply to a non-zero maxSurge",
                min_available(int(3)),
                |s| {
                    on_draining_node(s, 3, 3);
                    s.max_surge = Some(int(1));
                    s.zero_surge_override = Some(IntOrPercent::Int(3));
                },
                Want::Is(start(3, 4)),
            ),
            row(
                "invalid maxSurge",
                min_available(int(3)),
                |s| {
                    drain(s, "n0");
                    s.max_surge = Some(pct("lots"));
                },
                Want::Impossible("maxSurge is invalid"),
            ),
        ]);
    }

    #[test]
    fn budgets_that_scale() {
        check(vec![
            row(
                // 80% of 5 = 4 healthy needed: 5 replicas let one pod go.
                "minAvailable 80% on 3, maxSurge 2",
                min_available(pct("80%")),
                |s| {
                    drain(s, "n0");
                    s.max_surge = Some(int(2));
                },
                Want::Is(start(3, 5)),
            ),
            row(
                // 80% of 4 rounds up to 4: no room within the default cap.
                "minAvailable 80% on 3, default cap",
                min_available(pct("80%")),
                |s| drain(s, "n0"),
                Want::Impossible("minAvailable 80%"),
            ),
            row(
                // Two cannot go at once below 10; within 100% the most is one, first at 5.
                "minAvailable 80%, two displaced, maxSurge 100%",
                min_available(pct("80%")),
                |s| {
                    on_draining_node(s, 3, 2);
                    s.max_surge = Some(pct("100%"));
                },
                Want::Is(start(3, 5)),
            ),
            row(
                "minAvailable 80%, two displaced, maxSurge 10",
                min_available(pct("80%")),
                |s| {
                    on_draining_node(s, 3, 2);
                    s.max_surge = Some(int(10));
                },
                Want::Is(start(3, 10)),
            ),
            row(
                "minAvailable 50% on 4 already has room at full health",
                min_available(pct("50%")),
                |s| on_draining_node(s, 4, 1),
                Want::Is(Action::None),
            ),
            row(
                "minAvailable 50% on 4, three displaced",
                min_available(pct("50%")),
                |s| {
                    on_draining_node(s, 4, 3);
                    s.max_surge = Some(int(4));
                },
                Want::Is(start(4, 6)),
            ),
            row(
                "minAvailable 100%",
                min_available(pct("100%")),
                |s| drain(s, "n0"),
                Want::Impossible("minAvailable is 100%"),
            ),
            row(
                "maxUnavailable 0",
                max_unavailable(int(0)),
                |s| drain(s, "n0"),
                Want::Impossible("maxUnavailable is 0"),
            ),
            row(
                "maxUnavailable 0%",
                max_unavailable(pct("0%")),
                |s| drain(s, "n0"),
                Want::Impossible("maxUnavailable is 0"),
            ),
            row(
                "maxUnavailable 1: a surge cannot add room",
                max_unavailable(int(1)),
                |s| on_draining_node(s, 3, 2),
                Want::Is(Action::None),
            ),
            row(
                "maxUnavailable 10% on 3 = 1 already lets one go",
                max_unavailable(pct("10%")),
                |s| drain(s, "n0"),
                Want::Is(Action::None),
            ),
            row(
                // ceil(25% of 5) = 2.
                "maxUnavailable 25%, two displaced, maxSurge 100%",
                max_unavailable(pct("25%")),
                |s| {
                    on_draining_node(s, 3, 2);
                    s.max_surge = Some(pct("100%"));
                },
                Want::Is(start(3, 5)),
            ),
            row(
                "neither field",
                PodDisruptionBudgetSpec::default(),
                |s| drain(s, "n0"),
                Want::Impossible("neither minAvailable nor maxUnavailable"),
            ),
            row(
                "invalid budget",
                min_available(pct("many")),
                |s| drain(s, "n0"),
                Want::Impossible("budget is invalid"),
            ),
        ]);
    }

    #[test]
    fn int_min_available_on_user_pdbs() {
        check(vec![
            row(
                "floor above the baseline: surge past it",
                min_available(int(5)),
                |s| {
                    drain(s, "n0");
                    s.max_surge = Some(int(3));
                },
                Want::Is(start(3, 6)),
            ),
            row(
                "floor above the baseline, default cap",
                min_available(int(5)),
                |s| drain(s, "n0"),
                Want::Impossible("minAvailable 5"),
            ),
            row(
                "floor below the baseline: still one per displaced pod",
                min_available(int(1)),
                |s| drain(s, "n0"),
                Want::Is(start(3, 4)),
            ),
            row(
                "floor below the baseline with no cap: room remains",
                min_available(int(1)),
                |s| {
                    drain(s, "n0");
                    s.recreate = true;
                },
                Want::Is(Action::None),
            ),
        ]);
    }

    #[test]
    fn appliers() {
        check(vec![
            row(
                "HPA: baseline is its minimum",
                min_available(int(2)),
                |s| {
                    on_draining_node(s, 2, 1);
                    s.applier = Applier::Hpa { min: 2 };
                },
                Want::Is(start(2, 3)),
            ),
            row(
                "HPA above its minimum, budget has room at that scale",
                min_available(pct("80%")),
                |s| {
                    on_draining_node(s, 5, 1);
                    s.applier = Applier::Hpa { min: 2 };
                },
                Want::Is(Action::None),
            ),
            row(
                "HPA above its minimum, raising the minimum changes nothing",
                min_available(int(2)),
                |s| {
                    on_draining_node(s, 5, 1);
                    s.applier = Applier::Hpa { min: 2 };
                    s.max_surge = Some(int(2));
                },
                Want::Is(Action::None),
            ),
            row(
                "HPA above its minimum, percent budget: surge past the running scale",
                min_available(pct("90%")),
                |s| {
                    on_draining_node(s, 5, 1);
                    s.applier = Applier::Hpa { min: 4 };
                    s.max_surge = Some(pct("200%"));
                },
                // 90% of 10 = 9 leaves one; below 10 none.
                Want::Is(start(4, 10)),
            ),
            row(
                "KEDA",
                min_available(int(3)),
                |s| {
                    drain(s, "n0");
                    s.applier = Applier::Keda { min: 3 };
                },
                Want::Is(start(3, 4)),
            ),
            // `kubectl scale --replicas=0` switches the autoscaler off; the
            // pods it is removing are still seen for a moment.
            row(
                "HPA: the Deployment scaled to 0 is not surged",
                min_available(int(2)),
                |s| {
                    on_draining_node(s, 2, 1);
                    s.replicas = 0;
                    s.applier = Applier::Hpa { min: 2 };
                },
                Want::Is(Action::None),
            ),
            row(
                "KEDA: the Deployment scaled to 0 is not surged",
                min_available(int(3)),
                |s| {
                    drain(s, "n0");
                    s.replicas = 0;
                    s.applier = Applier::Keda { min: 3 };
                },
                Want::Is(Action::None),
            ),
            row(
                "KEDA at 0, minAvailable 100%",
                min_available(pct("100%")),
                |s| {
                    on_draining_node(s, 1, 1);
                    s.applier = Applier::Keda { min: 0 };
                },
                Want::Impossible("100%"),
            ),
            row(
                "KEDA at 0 scaled to 1, maxSurge 2, maxUnavailable 50%",
                max_unavailable(pct("50%")),
                |s| {
                    on_draining_node(s, 1, 1);
                    s.applier = Applier::Keda { min: 0 };
                    s.max_surge = Some(int(2));
                },
                // ceil(50% of 1) = 1 already.
                Want::Is(Action::None),
            ),
            row(
                "KEDA and HPA",
                min_available(int(3)),
                |s| {
                    drain(s, "n0");
                    s.applier = Applier::Conflict;
                },
                Want::Impossible("KEDA ScaledObject and an HPA (or two HPAs) both target"),
            ),
            row(
                "KEDA and HPA, nothing displaced",
                min_available(int(3)),
                |s| s.applier = Applier::Conflict,
                Want::Is(Action::None),
            ),
        ]);
    }

    fn active(s: &mut Snapshot, baseline: i32, surged_to: i32) {
        s.markers = Some(Markers {
            baseline,
            surged_to,
        });
        match &mut s.applier {
            Applier::Deployment | Applier::Conflict => s.replicas = surged_to,
            Applier::Hpa { min } => {
                *min = surged_to;
                s.replicas = s.replicas.max(surged_to);
            }
            Applier::Keda { min } => *min = surged_to,
        }
    }

    #[test]
    fn top_ups_and_no_shrink() {
        check(vec![
            row(
                "second node cordoned: top up",
                min_available(int(3)),
                |s| {
                    s.max_surge = Some(int(3));
                    active(s, 3, 4);
                    drain(s, "n0");
                    drain(s, "n1");
                },
                Want::Is(surge(3, 5, SurgeKind::TopUp)),
            ),
            row(
                "top-up capped",
                min_available(int(3)),
                |s| {
                    s.max_surge = Some(int(1));
                    active(s, 3, 4);
                    drain(s, "n0");
                    drain(s, "n1");
                },
                Want::Is(Action::Wait(Wait::Draining { displaced: 2 })),
            ),
            row(
                "fewer displaced: never shrink",
                min_available(int(3)),
                |s| {
                    s.max_surge = Some(int(3));
                    active(s, 3, 6);
                    drain(s, "n0");
                },
                Want::Is(Action::Wait(Wait::Draining { displaced: 1 })),
            ),
            row(
                "top-up not gated on the budget's room",
                min_available(int(3)),
                |s| {
                    s.max_surge = Some(int(3));
                    active(s, 3, 4);
                    s.pdb_disruptions_allowed = 1;
                    drain(s, "n0");
                    drain(s, "n1");
                },
                Want::Is(surge(3, 5, SurgeKind::TopUp)),
            ),
            row(
                "maxSurge lowered during the surge: kept, no impossible",
                min_available(int(3)),
                |s| {
                    active(s, 3, 5);
                    s.max_surge = Some(int(0));
                    drain(s, "n0");
                },
                Want::Is(Action::Wait(Wait::Draining { displaced: 1 })),
            ),
            row(
                "PDB turned to maxUnavailable 0 during the surge",
                max_unavailable(int(0)),
                |s| {
                    active(s, 3, 4);
                    drain(s, "n0");
                },
                Want::Impossible("maxUnavailable is 0"),
            ),
            row(
                "HPA: interrupted write of the Deployment's replicas",
                min_available(int(2)),
                |s| {
                    s.applier = Applier::Hpa { min: 3 };
                    s.markers = Some(Markers {
                        baseline: 2,
                        surged_to: 3,
                    });
                    on_draining_node(s, 2, 1);
                },
                Want::Is(surge(2, 3, SurgeKind::Resume)),
            ),
            row(
                "HPA: autoscaled above the surge",
                min_available(int(2)),
                |s| {
                    s.applier = Applier::Hpa { min: 3 };
                    s.markers = Some(Markers {
                        baseline: 2,
                        surged_to: 3,
                    });
                    on_draining_node(s, 6, 1);
                },
                Want::Is(Action::Wait(Wait::Draining { displaced: 1 })),
            ),
            row(
                "KEDA: the Deployment's raise was interrupted: resume it",
                min_available(int(2)),
                |s| {
                    s.applier = Applier::Keda { min: 3 };
                    s.markers = Some(Markers {
                        baseline: 2,
                        surged_to: 3,
                    });
                    on_draining_node(s, 2, 1);
                },
                Want::Is(surge(2, 3, SurgeKind::Resume)),
            ),
            row(
                "HPA: the Deployment scaled to 0 mid-surge (its pods still seen): no resume",
                min_available(int(2)),
                |s| {
                    s.applier = Applier::Hpa { min: 3 };
                    on_draining_node(s, 2, 1);
                    active(s, 2, 3);
                    s.replicas = 0;
                },
                Want::Is(Action::Wait(Wait::Draining { displaced: 1 })),
            ),
            row(
                "KEDA: the Deployment at 0 with more displaced: no top-up",
                min_available(int(2)),
                |s| {
                    s.applier = Applier::Keda { min: 3 };
                    on_draining_node(s, 3, 2);
                    active(s, 2, 3);
                    s.replicas = 0;
                },
                Want::Is(Action::Wait(Wait::Draining { displaced: 2 })),
            ),
        ]);
    }

    #[test]
    fn user_changes_during_a_surge() {
        check(vec![
            row(
                "scaled up by someone",
                min_available(int(3)),
                |s| {
                    active(s, 3, 4);
                    s.replicas = 7;
                    drain(s, "n0");
                },
                Want::Is(Action::AdoptUserChange {
                    new_baseline: 7,
                    displaced: 1,
                }),
            ),
            row(
                "scaled back to the baseline by someone (e.g. GitOps)",
                min_available(int(3)),
                |s| {
                    active(s, 3, 4);
                    s.replicas = 3;
                    drain(s, "n0");
                },
                Want::Is(Action::AdoptUserChange {
                    new_baseline: 3,
                    displaced: 1,
                }),
            ),
            row(
                "scaled during the cooldown: not undone by a revert",
                min_available(int(3)),
                |s| {
                    active(s, 3, 4);
                    s.replicas = 2;
                    s.pdb_disruptions_allowed = 1;
                },
                Want::Is(Action::AdoptUserChange {
                    new_baseline: 2,
                    displaced: 0,
                }),
            ),
            row(
                "scaled to 0 by someone",
                min_available(int(3)),
                |s| {
                    active(s, 3, 4);
                    s.replicas = 0;
                },
                Want::Is(Action::AdoptUserChange {
                    new_baseline: 0,
                    displaced: 0,
                }),
            ),
            row(
                "scaled to 0 (adopted), then more pods displaced: no top-up to 1",
                min_available(int(0)),
                |s| {
                    active(s, 0, 0);
                    s.replicas = 0;
                    s.adopted_displaced = Some(0);
                    s.max_surge = Some(int(1));
                    drain(s, "n0");
                },
                Want::Is(Action::Wait(Wait::Draining { displaced: 1 })),
            ),
            row(
                "HPA minimum changed",
                min_available(int(2)),
                |s| {
                    s.applier = Applier::Hpa { min: 2 };
                    active(s, 2, 3);
                    s.applier = Applier::Hpa { min: 5 };
                    drain(s, "n0");
                },
                Want::Is(Action::AdoptUserChange {
                    new_baseline: 5,
                    displaced: 1,
                }),
            ),
            row(
                "KEDA minimum changed",
                min_available(int(2)),
                |s| {
                    s.applier = Applier::Keda { min: 2 };
                    active(s, 2, 3);
                    s.applier = Applier::Keda { min: 1 };
                },
                Want::Is(Action::AdoptUserChange {
                    new_baseline: 1,
                    displaced: 0,
                }),
            ),
            row(
                "HPA scaling the Deployment is not a user change",
                min_available(int(2)),
                |s| {
                    s.applier = Applier::Hpa { min: 2 };
                    active(s, 2, 3);
                    s.replicas = 9;
                    drain(s, "n0");
                },
                Want::Is(Action::Wait(Wait::Draining { displaced: 1 })),
            ),
            row(
                "markers we cannot have written",
                min_available(int(3)),
                |s| {
                    s.markers = Some(Markers {
                        baseline: 5,
                        surged_to: 3,
                    });
                },
                Want::Is(Action::AdoptUserChange {
                    new_baseline: 3,
                    displaced: 0,
                }),
            ),
            row(
                "negative baseline marker",
                min_available(int(3)),
                |s| {
                    s.markers = Some(Markers {
                        baseline: -1,
                        surged_to: 3,
                    });
                },
                Want::Is(Action::AdoptUserChange {
                    new_baseline: 3,
                    displaced: 0,
                }),
            ),
        ]);
    }

    #[test]
    fn scale_back_gating() {
        check(vec![
            row(
                "all conditions hold",
                min_available(int(3)),
                |s| {
                    active(s, 3, 4);
                    s.since_last_signal = Some(secs(61));
                    s.pdb_disruptions_allowed = 1;
                },
                Want::Is(Action::Revert { baseline: 3 }),
            ),
            row(
                "exactly at the cooldown",
                min_available(int(3)),
                |s| {
                    active(s, 3, 4);
                    s.since_last_signal = Some(secs(60));
                    s.pdb_disruptions_allowed = 1;
                },
                Want::Is(Action::Revert { baseline: 3 }),
            ),
            row(
                "no signal ever",
                min_available(int(3)),
                |s| {
                    active(s, 3, 4);
                    s.pdb_disruptions_allowed = 1;
                },
                Want::Is(Action::Revert { baseline: 3 }),
            ),
            row(
                "cooldown not passed",
                min_available(int(3)),
                |s| {
                    active(s, 3, 4);
                    s.since_last_signal = Some(secs(45));
                    s.pdb_disruptions_allowed = 1;
                },
                Want::Is(Action::Wait(Wait::Cooldown {
                    remaining: secs(15),
                })),
            ),
            row(
                "custom cooldown",
                min_available(int(3)),
                |s| {
                    active(s, 3, 4);
                    s.cooldown = secs(5);
                    s.since_last_signal = Some(secs(6));
                    s.pdb_disruptions_allowed = 1;
                },
                Want::Is(Action::Revert { baseline: 3 }),
            ),
            row(
                "displaced pods remain",
                min_available(int(3)),
                |s| {
                    active(s, 3, 4);
                    s.since_last_signal = Some(secs(600));
                    s.pdb_disruptions_allowed = 1;
                    drain(s, "n2");
                },
                Want::Is(Action::Wait(Wait::Draining { displaced: 1 })),
            ),
            row(
                "a denied pod remains",
                min_available(int(3)),
                |s| {
                    active(s, 3, 4);
                    s.since_last_signal = Some(secs(600));
                    s.pdb_disruptions_allowed = 1;
                    s.denied_pods.insert("p1".into());
                },
                Want::Is(Action::Wait(Wait::Draining { displaced: 1 })),
            ),
            row(
                "disruptionsAllowed 0",
                min_available(int(3)),
                |s| {
                    active(s, 3, 4);
                    s.since_last_signal = Some(secs(600));
                },
                Want::Is(Action::Wait(Wait::NoDisruptionAllowed)),
            ),
            row(
                "budget can never open: do not strand the surge",
                max_unavailable(int(0)),
                |s| {
                    active(s, 3, 4);
                    s.since_last_signal = Some(secs(600));
                },
                Want::Is(Action::Revert { baseline: 3 }),
            ),
            row(
                "conflict does not strand the surge",
                min_available(int(3)),
                |s| {
                    active(s, 3, 4);
                    s.applier = Applier::Conflict;
                    s.pdb_disruptions_allowed = 1;
                },
                Want::Is(Action::Revert { baseline: 3 }),
            ),
            row(
                "conflict while draining",
                min_available(int(3)),
                |s| {
                    active(s, 3, 4);
                    s.applier = Applier::Conflict;
                    drain(s, "n0");
                },
                Want::Impossible("KEDA ScaledObject"),
            ),
            row(
                "Deployment never reverted to 0",
                min_available(int(1)),
                |s| {
                    active(s, 0, 1);
                    s.pdb_disruptions_allowed = 1;
                },
                Want::Is(Action::Revert { baseline: 1 }),
            ),
            row(
                "HPA recorded 0 honoured",
                min_available(int(1)),
                |s| {
                    s.applier = Applier::Hpa { min: 0 };
                    active(s, 0, 1);
                    s.pdb_disruptions_allowed = 1;
                },
                Want::Is(Action::Revert { baseline: 0 }),
            ),
            row(
                "KEDA recorded 0 honoured",
                min_available(int(1)),
                |s| {
                    s.applier = Applier::Keda { min: 0 };
                    active(s, 0, 2);
                    s.pdb_disruptions_allowed = 1;
                },
                Want::Is(Action::Revert { baseline: 0 }),
            ),
        ]);
    }

    /// The worker's writes, as the next snapshot sees them.
    fn apply(s: &mut Snapshot, a: &Action) {
        match *a {
            Action::Surge {
                baseline, target, ..
            } => {
                s.markers = Some(Markers {
                    baseline,
                    surged_to: target,
                });
                match &mut s.applier {
                    Applier::Deployment | Applier::Conflict => s.replicas = target,
                    Applier::Hpa { min } => {
                        *min = target;
                        s.replicas = s.replicas.max(target);
                    }
                    Applier::Keda { min } => {
                        *min = target;
                        s.replicas = s.replicas.max(target);
                    }
                }
            }
            Action::AdoptUserChange { .. } => s.markers = None,
            Action::Revert { baseline } => {
                s.markers = None;
                match &mut s.applier {
                    Applier::Deployment | Applier::Conflict => s.replicas = baseline,
                    Applier::Hpa { min } | Applier::Keda { min } => *min = baseline,
                }
            }
            Action::None | Action::Impossible { .. } | Action::Wait(_) => {}
        }
    }

    /// Plans, checks that a restart (planning again) agrees, applies, and
    /// checks that the applied action is not asked for again.
    fn step(s: &mut Snapshot, want: Action) {
        let a = plan(s);
        assert_eq!(a, want);
        assert_eq!(plan(&s.clone()), a, "restart before applying");
        apply(s, &a);
        let next = plan(s);
        if matches!(a, Action::Surge { .. } | Action::Revert { .. }) {
            assert_ne!(next, a, "applied {a:?} asked for again");
            assert!(
                !matches!(next, Action::Surge { .. } | Action::AdoptUserChange { .. }),
                "after {a:?}: {next:?}"
            );
        }
    }

    /// A drain across two nodes, with a restart (re-plan) at every step.
    #[test]
    fn drain_story_with_restarts() {
        let spec = min_available(int(4));
        let mut s = snap(&spec);
        s.max_surge = Some(int(3));
        on_draining_node(&mut s, 4, 0);
        s.draining_nodes.clear();
        step(&mut s, Action::None);

        // Node a cordoned with one pod: surge 4 -> 5.
        s.pods[0].node = Some("a".into());
        drain(&mut s, "a");
        s.since_last_signal = Some(secs(0));
        step(&mut s, start(4, 5));
        s.pdb_disruptions_allowed = 1;
        step(&mut s, Action::Wait(Wait::Draining { displaced: 1 }));

        // Node c cordoned with two more pods: top up to 4 + 3 = 7.
        s.pods[1].node = Some("c".into());
        s.pods[2].node = Some("c".into());
        drain(&mut s, "c");
        step(&mut s, surge(4, 7, SurgeKind::TopUp));
        step(&mut s, Action::Wait(Wait::Draining { displaced: 3 }));

        // Pods leave one by one; the surge never shrinks meanwhile.
        s.pods[0].terminating = true;
        step(&mut s, Action::Wait(Wait::Draining { displaced: 2 }));
        s.pods[1].terminating = true;
        s.pods[2].completed = true;
        s.since_last_signal = Some(secs(10));
        step(
            &mut s,
            Action::Wait(Wait::Cooldown {
                remaining: secs(50),
            }),
        );
        s.since_last_signal = Some(secs(70));
        s.pdb_disruptions_allowed = 0;
        step(&mut s, Action::Wait(Wait::NoDisruptionAllowed));
        s.pdb_disruptions_allowed = 3;
        step(&mut s, Action::Revert { baseline: 4 });
        assert_eq!((s.replicas, s.markers), (4, None));
        step(&mut s, Action::None);
    }

    #[test]
    fn user_change_story() {
        let spec = min_available(int(3));
        let mut s = snap(&spec);
        drain(&mut s, "n0");
        step(&mut s, start(3, 4));
        // Someone scales to 6 during the surge: theirs wins, markers go.
        s.replicas = 6;
        step(
            &mut s,
            Action::AdoptUserChange {
                new_baseline: 6,
                displaced: 1,
            },
        );
        assert_eq!(s.markers, None);
        // Still blocked: a new surge on top of their value (25% of 6 = 2).
        step(&mut s, start(6, 7));
        s.pods[0].terminating = true;
        s.pdb_disruptions_allowed = 1;
        step(&mut s, Action::Revert { baseline: 6 });
        assert_eq!(s.replicas, 6, "their value is never undone");
    }

    /// The worker may adopt by setting both markers to the new value.
    #[test]
    fn adopting_with_markers_kept() {
        let spec = min_available(int(6));
        let mut s = snap(&spec);
        s.replicas = 6;
        active(&mut s, 6, 6);
        assert_eq!(plan(&s), Action::Revert { baseline: 6 });
        drain(&mut s, "n0");
        step(&mut s, surge(6, 7, SurgeKind::TopUp));
        s.pods[0].terminating = true;
        s.pdb_disruptions_allowed = 1;
        step(&mut s, Action::Revert { baseline: 6 });
    }

    #[test]
    fn hpa_story() {
        let spec = min_available(int(2));
        let mut s = snap(&spec);
        s.applier = Applier::Hpa { min: 2 };
        on_draining_node(&mut s, 2, 1);
        step(&mut s, start(2, 3));
        assert_eq!((s.applier, s.replicas), (Applier::Hpa { min: 3 }, 3));
        // The HPA scales up under load: not ours to undo, not a user change.
        s.replicas = 8;
        step(&mut s, Action::Wait(Wait::Draining { displaced: 1 }));
        s.pods[0].terminating = true;
        s.pdb_disruptions_allowed = 2;
        step(&mut s, Action::Revert { baseline: 2 });
        assert_eq!(s.applier, Applier::Hpa { min: 2 });
    }

    // ---- properties ----

    #[derive(Debug, Clone)]
    struct Case {
        spec: PodDisruptionBudgetSpec,
        allowed: i32,
        replicas: i32,
        max_surge: Option<IntOrString>,
        recreate: bool,
        applier: Applier,
        applier_max: Option<i32>,
        markers: Option<Markers>,
        pods: Vec<PodState>,
        draining: BTreeSet<String>,
        denied: BTreeSet<String>,
        since: Option<Duration>,
        zero_surge_override: Option<IntOrPercent>,
    }

    impl Case {
        fn snapshot(&self) -> Snapshot<'_> {
            Snapshot {
                pdb_spec: Some(&self.spec),
                pdb_disruptions_allowed: self.allowed,
                replicas: self.replicas,
                max_surge: self.max_surge.clone(),
                recreate: self.recreate,
                applier: self.applier,
                applier_max: self.applier_max,
                keda_held_at: None,
                markers: self.markers,
                adopted_displaced: None,
                adoption_pending: false,
                set_by_someone: false,
                may_surge: true,
                pods: self.pods.clone(),
                other_pods: 0,
                ready_pods: 0,
                rolling_out: true,
                draining_nodes: self.draining.clone(),
                denied_pods: self.denied.clone(),
                since_last_signal: self.since,
                zero_surge_override: self.zero_surge_override,
                cooldown: secs(60),
            }
        }
    }

    fn int_or_pct() -> impl Strategy<Value = IntOrString> {
        prop_oneof![
            (0..12i32).prop_map(IntOrString::Int),
            (0..=100i32).prop_map(|p| IntOrString::String(format!("{p}%"))),
        ]
    }

    fn spec() -> impl Strategy<Value = PodDisruptionBudgetSpec> {
        prop_oneof![
            int_or_pct().prop_map(min_available),
            int_or_pct().prop_map(max_unavailable),
            Just(PodDisruptionBudgetSpec::default()),
        ]
    }

    fn case() -> impl Strategy<Value = Case> {
        let applier = prop_oneof![
            Just(Applier::Deployment),
            (0..10i32).prop_map(|min| Applier::Hpa { min }),
            (0..10i32).prop_map(|min| Applier::Keda { min }),
            Just(Applier::Conflict),
        ];
        let pods =
            prop::collection::vec((0..4u8, any::<bool>(), any::<bool>(), any::<bool>()), 0..12)
                .prop_map(|v| {
                    v.into_iter()
                        .enumerate()
                        .map(|(i, (node, scheduled, terminating, completed))| PodState {
                            name: format!("p{i}"),
                            node: scheduled.then(|| format!("n{node}")),
                            terminating: terminating && i % 3 == 0,
                            completed: completed && i % 5 == 0,
                        })
                        .collect::<Vec<_>>()
                });
        let markers = prop::option::of((0..10i32, 0..8i32).prop_map(|(b, extra)| Markers {
            baseline: b,
            surged_to: b + extra,
        }));
        let override_ = prop::option::of(prop_oneof![
            (0..5i32).prop_map(IntOrPercent::Int),
            (0..=100i32).prop_map(IntOrPercent::Percent),
        ]);
        // Biased towards blocked budgets and draining nodes, where surges happen.
        (
            (spec(), any::<bool>()),
            prop_oneof![3 => Just(0), 1 => 1..3i32],
            0..12i32,
            prop::option::of(int_or_pct()),
            any::<bool>(),
            (applier, prop::option::of(0..6i32)),
            markers,
            pods,
            prop::collection::btree_set((0..4u8).prop_map(|n| format!("n{n}")), 1..4),
            prop::collection::btree_set((0..12u8).prop_map(|n| format!("p{n}")), 0..3),
            prop::option::of((0..120u64).prop_map(secs)),
            override_,
        )
            .prop_map(
                |(
                    (spec, owned),
                    allowed,
                    replicas,
                    max_surge,
                    recreate,
                    (applier, room),
                    markers,
                    pods,
                    draining,
                    denied,
                    since,
                    zero_surge_override,
                )| {
                    let mut c = Case {
                        spec,
                        allowed,
                        replicas,
                        max_surge,
                        recreate,
                        applier,
                        applier_max: None,
                        markers,
                        pods,
                        draining,
                        denied,
                        since,
                        zero_surge_override,
                    };
                    // Mostly consistent markers (our own surge), sometimes a user change.
                    if let (Some(m), true) = (c.markers, c.replicas % 4 != 0) {
                        let (applier, replicas) = {
                            let mut s = c.snapshot();
                            active(&mut s, m.baseline, m.surged_to);
                            (s.applier, s.replicas)
                        };
                        c.applier = applier;
                        c.replicas = replicas;
                    }
                    // An autoscaler's maximum is never below its minimum (the
                    // apiserver validates it); sometimes it leaves little room.
                    if let Applier::Hpa { min } | Applier::Keda { min } = c.applier {
                        c.applier_max = room.map(|r| min + r);
                    }
                    // Half the time, the PDB we would own: minAvailable = baseline.
                    if owned {
                        let current = c.applier.current(c.replicas).unwrap_or(c.replicas);
                        let baseline = c.markers.map_or(current, |m| m.baseline);
                        c.spec = min_available(int(baseline));
                    }
                    c
                },
            )
    }

    proptest! {
        // The planner is cheap; surges are a minority of generated cases.
        #![proptest_config(ProptestConfig::with_cases(1024))]

        #[test]
        fn surge_stays_within_bounds(c in case()) {
            let s = c.snapshot();
            if let Action::Surge { baseline, target, kind } = plan(&s) {
                prop_assert!(target > baseline || kind == SurgeKind::Resume);
                prop_assert!(baseline >= 0);
                let cap = surge_cap(&s, baseline).map(|c| c.replicas).unwrap_or(0);
                if let Some(max) = s.applier_max {
                    let in_place = s.markers.map_or(0, |m| m.surged_to);
                    prop_assert!(target <= max.max(in_place), "{} above the autoscaler's maximum {}", target, max);
                }
                match s.markers {
                    None => {
                        prop_assert_eq!(kind, SurgeKind::Start);
                        prop_assert!(target <= baseline + cap, "{} > {} + {}", target, baseline, cap);
                    }
                    Some(m) => {
                        prop_assert_eq!(baseline, m.baseline);
                        prop_assert!(target >= m.surged_to, "never shrinks");
                        prop_assert!(target <= m.surged_to.max(baseline + cap));
                    }
                }
            }
        }

        #[test]
        fn plan_is_deterministic(c in case()) {
            prop_assert_eq!(plan(&c.snapshot()), plan(&c.clone().snapshot()));
        }

        #[test]
        fn applying_an_action_settles(c in case()) {
            let mut s = c.snapshot();
            let a = plan(&s);
            apply(&mut s, &a);
            let next = plan(&s);
            match a {
                Action::Surge { .. } => prop_assert!(
                    matches!(next, Action::Wait(_)),
                    "after {:?}: {:?}", a, next
                ),
                Action::Revert { .. } => prop_assert_eq!(next, Action::None),
                Action::AdoptUserChange { .. } => prop_assert!(
                    !matches!(next, Action::AdoptUserChange { .. } | Action::Revert { .. }),
                    "after {:?}: {:?}", a, next
                ),
                _ => {}
            }
        }

        #[test]
        fn scale_back_only_when_gated(c in case()) {
            let s = c.snapshot();
            if let Action::Revert { baseline } = plan(&s) {
                prop_assert_eq!(displaced_count(&s), 0);
                prop_assert!(s.since_last_signal.is_none_or(|d| d >= s.cooldown));
                prop_assert!(baseline >= 0);
                if matches!(s.applier, Applier::Deployment) {
                    prop_assert!(baseline >= 1);
                }
            }
        }

        #[test]
        fn allowed_is_monotone(spec in spec(), t in 0..200i32, floor in 0..50i32, others in 0..20i32) {
            if let Ok(rule) = Rule::from_spec(&spec) {
                prop_assert!(allowed_at(rule, t, floor, others) <= allowed_at(rule, t + 1, floor, others));
            }
        }
    }
}

/// The rules added for the safety invariants (behaviour.md sections 5 and 6).
#[cfg(test)]
mod invariant_tests {
    use super::*;

    fn spec(min: i32) -> PodDisruptionBudgetSpec {
        PodDisruptionBudgetSpec {
            min_available: Some(IntOrString::Int(min)),
            ..Default::default()
        }
    }

    fn pods(n: i32, on: &str) -> Vec<PodState> {
        (0..n)
            .map(|i| PodState {
                name: format!("p{i}"),
                node: Some(if i == 0 { on.into() } else { "other".into() }),
                terminating: false,
                completed: false,
            })
            .collect()
    }

    fn base(spec: &PodDisruptionBudgetSpec) -> Snapshot<'_> {
        Snapshot {
            pdb_spec: Some(spec),
            pdb_disruptions_allowed: 0,
            replicas: 3,
            max_surge: Some(IntOrString::String("100%".into())),
            recreate: false,
            applier: Applier::Deployment,
            applier_max: None,
            keda_held_at: None,
            markers: None,
            adopted_displaced: None,
            adoption_pending: false,
            set_by_someone: false,
            may_surge: true,
            pods: pods(3, "a"),
            other_pods: 0,
            ready_pods: 3,
            rolling_out: false,
            draining_nodes: ["a".to_string()].into(),
            denied_pods: BTreeSet::new(),
            since_last_signal: Some(Duration::ZERO),
            zero_surge_override: None,
            cooldown: Duration::from_secs(60),
        }
    }

    fn active(s: &mut Snapshot, baseline: i32, to: i32) {
        s.markers = Some(Markers {
            baseline,
            surged_to: to,
        });
        s.replicas = to;
    }

    fn drained(s: &mut Snapshot) {
        s.draining_nodes.clear();
        s.since_last_signal = Some(Duration::from_secs(61));
    }

    #[test]
    fn no_single_pdb_or_out_of_scope_only_ends_a_surge() {
        let sp = spec(3);
        // Nothing starts without exactly one PDB, or out of scope.
        let mut s = base(&sp);
        s.pdb_spec = None;
        assert_eq!(plan(&s), Action::None);
        let mut s = base(&sp);
        s.may_surge = false;
        assert_eq!(plan(&s), Action::None);
        // An active surge is neither topped up nor stranded.
        let mut s = base(&sp);
        s.pdb_spec = None;
        active(&mut s, 3, 4);
        s.pods = pods(4, "a");
        s.pods[1].node = Some("a".into());
        assert_eq!(plan(&s), Action::Wait(Wait::Draining { displaced: 2 }));
        drained(&mut s);
        s.ready_pods = 0;
        assert_eq!(plan(&s), Action::Revert { baseline: 3 }, "no PDB: revert");
        let mut s = base(&sp);
        s.may_surge = false;
        active(&mut s, 3, 6);
        drained(&mut s);
        s.ready_pods = 6;
        assert_eq!(plan(&s), Action::Revert { baseline: 3 }, "out of scope");
    }

    #[test]
    fn scale_back_gate_is_readiness_not_disruptions_allowed() {
        let sp = spec(3);
        let mut s = base(&sp);
        active(&mut s, 3, 6);
        drained(&mut s);
        // No rollout: the ReplicaSet removes unready pods first, so even with
        // one Ready pod the scale back removes none of them.
        s.ready_pods = 1;
        assert_eq!(plan(&s), Action::Revert { baseline: 3 });
        // Mid-rollout, scaling is proportional: wait for readiness or room.
        s.rolling_out = true;
        // One crash-looping pod keeps disruptionsAllowed at 0 forever; 5 Ready
        // of the 3 to keep is safe.
        s.pdb_disruptions_allowed = 0;
        s.ready_pods = 5;
        assert_eq!(plan(&s), Action::Revert { baseline: 3 });
        // Surge pods that never schedule: the 3 originals are Ready.
        s.ready_pods = 3;
        assert_eq!(plan(&s), Action::Revert { baseline: 3 });
        // Fewer Ready than the baseline, budget closed: wait.
        s.ready_pods = 2;
        assert_eq!(plan(&s), Action::Wait(Wait::NoDisruptionAllowed));
        s.pdb_disruptions_allowed = 1;
        assert_eq!(plan(&s), Action::Revert { baseline: 3 });
    }

    #[test]
    fn adopted_value_is_not_surged_again_unless_more_are_displaced() {
        let sp = spec(3);
        let mut s = base(&sp);
        active(&mut s, 3, 6);
        // GitOps puts 3 back mid-drain.
        s.replicas = 3;
        assert_eq!(
            plan(&s),
            Action::AdoptUserChange {
                new_baseline: 3,
                displaced: 1
            }
        );
        s.markers = Some(Markers {
            baseline: 3,
            surged_to: 3,
        });
        s.adopted_displaced = Some(1);
        assert_eq!(plan(&s), Action::Wait(Wait::Draining { displaced: 1 }));
        // Another node cordoned: more displaced than counted → top-up again.
        s.pods[1].node = Some("b".into());
        s.draining_nodes.insert("b".into());
        assert!(matches!(
            plan(&s),
            Action::Surge {
                kind: SurgeKind::TopUp,
                ..
            }
        ));
    }

    #[test]
    fn a_pdb_over_several_deployments_counts_every_pod() {
        // minAvailable 5 over a (3 pods) and b (2 pods): sized with all 5.
        let sp = spec(5);
        let mut s = base(&sp);
        s.max_surge = None; // 25% of 3 → 1
        assert!(
            matches!(plan(&s), Action::Impossible { .. }),
            "alone, 4 pods can never satisfy minAvailable 5"
        );
        s.other_pods = 2;
        assert_eq!(
            plan(&s),
            Action::Surge {
                baseline: 3,
                target: 4,
                kind: SurgeKind::Start
            }
        );
    }
}
