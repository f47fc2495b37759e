//! The budget lint of `eviction-autoscaler doctor`: PodDisruptionBudgets
//! that will stop a drain, or surprise whoever wrote them. A pure function
//! of the listed objects; docs/doctor.md says what each rule means and what
//! to do about it.
//!
//! Rules (id, level):
//! - `invalid-pdb` (fail): a selector or budget value the apiserver's
//!   eviction check cannot use (the PDB then protects nothing, or blocks).
//! - `never-allows` (fail): `maxUnavailable: 0`, `minAvailable: 100%`, or
//!   neither field: no eviction is ever allowed; no surge changes that.
//! - `min-available-at-or-above-pods`, `percent-rounds-to-all`: at the pods'
//!   current number no eviction is allowed. Fail, unless the product would
//!   surge for it (then warn; nothing for the PDBs the product owns, where
//!   that is the design).
//! - `percent-protects-nothing` (warn): a `maxUnavailable` percentage that
//!   rounds up to every pod.
//! - `selects-no-pods` (warn): the selector matches no pod.
//! - `several-pdbs` (fail): pods under more than one PDB; the apiserver
//!   refuses their evictions (HTTP 500) and kubectl drain stops.
//! - `unhealthy-pods-hold-budget` (warn): not-Ready pods hold the budget at
//!   zero and the policy keeps even them from being evicted (Ready counted
//!   from the pods, not from a status that may lag).
//! - `autoscaler-min-above-pods` (warn): an HPA or ScaledObject minimum
//!   above the pods a PDB selects: the autoscaler is not acting, and the
//!   PDB the product owns (its floor follows the minimum) allows nothing.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use serde::Serialize;

use super::objects::{name_of, ns_of, pod_node, pod_ready, Objects, Owner};
use super::surge::{outcome, Outcome};
use super::Level;
use crate::budget::{IntOrPercent, Rule, Selector};
use crate::cache::owned_by_us;
use crate::config::Behaviour;
use crate::markers::Markers;
use crate::surge::view::{hpa_is_kedas, hpa_target, scaled_object_target, Indexed};

/// One finding of the lint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LintFinding {
    pub level: Level,
    /// Stable rule id (docs/doctor.md).
    pub rule: &'static str,
    pub namespace: String,
    /// `Kind/name` of the object the finding is about.
    pub object: String,
    pub message: String,
}

/// Why a budget allows no eviction at the pods' current number, and whether
/// more replicas could change that.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Closed {
    pub rule: &'static str,
    pub message: String,
    /// More pods (a surge) would open the budget.
    pub surge_can_help: bool,
}

/// A budget that allows no eviction with `pods` healthy pods selected.
pub fn closed(rule: Rule, pods: i32) -> Option<Closed> {
    let never = |what: String| Closed {
        rule: "never-allows",
        message: format!("{what}: no eviction is ever allowed, whatever the number of replicas"),
        surge_can_help: false,
    };
    match rule {
        Rule::MaxUnavailable(m @ (IntOrPercent::Int(0) | IntOrPercent::Percent(0))) => {
            Some(never(format!("maxUnavailable is {m}")))
        }
        Rule::MinAvailable(IntOrPercent::Percent(p)) if p >= 100 => {
            Some(never(format!("minAvailable is {p}%")))
        }
        Rule::None => Some(never("neither minAvailable nor maxUnavailable is set".into())),
        Rule::MinAvailable(IntOrPercent::Int(k)) if pods > 0 && k >= pods => Some(Closed {
            rule: "min-available-at-or-above-pods",
            message: format!(
                "minAvailable {k} is at or above the {pods} pods it selects: no eviction is allowed at this size"
            ),
            surge_can_help: true,
        }),
        Rule::MinAvailable(p @ IntOrPercent::Percent(pc)) if pods > 0 && p.scaled(pods, true) >= pods => {
            Some(Closed {
                rule: "percent-rounds-to-all",
                message: format!(
                    "minAvailable {pc}% of {pods} pods rounds up to {}, every pod: no eviction is allowed at this size",
                    p.scaled(pods, true)
                ),
                surge_can_help: true,
            })
        }
        _ => None,
    }
}

fn count(n: usize) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

fn finding(
    level: Level,
    rule: &'static str,
    ns: &str,
    object: String,
    message: String,
) -> LintFinding {
    LintFinding {
        level,
        rule,
        namespace: ns.to_string(),
        object,
        message,
    }
}

/// Lints every PDB and autoscaler of `objs`. `view` is `objs.surge_view(..)`.
pub fn lint(objs: &Objects, view: &Indexed, behaviour: &Behaviour) -> Vec<LintFinding> {
    let mut out = Vec::new();
    for pdb in &objs.pdbs {
        out.extend(lint_pdb(objs, view, behaviour, pdb));
    }
    out.extend(several_pdbs(objs));
    out.extend(autoscaler_minimums(objs));
    // Failures first, then by object.
    out.sort_by(|a, b| {
        b.level
            .cmp(&a.level)
            .then_with(|| (&a.namespace, &a.object, a.rule).cmp(&(&b.namespace, &b.object, b.rule)))
    });
    out
}

fn lint_pdb(
    objs: &Objects,
    view: &Indexed,
    behaviour: &Behaviour,
    pdb: &PodDisruptionBudget,
) -> Vec<LintFinding> {
    let ns = ns_of(pdb);
    let object = format!("PodDisruptionBudget/{}", name_of(pdb));
    let mut out = Vec::new();
    let spec = pdb.spec.clone().unwrap_or_default();
    let rule = match Rule::from_spec(&spec) {
        Ok(r) => r,
        Err(e) => {
            out.push(finding(
                Level::Fail,
                "invalid-pdb",
                ns,
                object,
                format!("its budget cannot be evaluated: {e}"),
            ));
            return out;
        }
    };
    match Selector::compile(spec.selector.as_ref()) {
        Err(e) => {
            out.push(finding(
                Level::Fail,
                "invalid-pdb",
                ns,
                object,
                format!("{e}: the eviction check ignores this PDB, it protects nothing"),
            ));
            return out;
        }
        Ok(Selector::Nothing) => {
            out.push(finding(
                Level::Warn,
                "selects-no-pods",
                ns,
                object,
                "its selector is missing: the eviction check matches no pod with it, \
                 it protects nothing"
                    .into(),
            ));
            return out;
        }
        // policy/v1: `{}` is every pod of the namespace. Rarely meant, and
        // any other PDB there puts two over some pods (evictions: 500).
        Ok(Selector::Everything) => out.push(finding(
            Level::Warn,
            "selects-every-pod",
            ns,
            object.clone(),
            "its selector is empty: it protects every pod of the namespace, and where another \
             PDB selects a pod too, the eviction of that pod fails (500)"
                .into(),
        )),
        Ok(Selector::Requirements(_)) => {}
    }
    let pods = objs.pods_of(pdb);
    if pods.is_empty() {
        out.push(finding(
            Level::Warn,
            "selects-no-pods",
            ns,
            object,
            "its selector matches no running pod in the namespace: it protects nothing \
             (check it against the pods' labels)"
                .into(),
        ));
        return out;
    }
    let n = count(pods.len());
    if let Some(c) = closed(rule, n) {
        out.extend(closed_finding(objs, view, behaviour, pdb, &pods, c));
    }
    if let Rule::MaxUnavailable(p @ IntOrPercent::Percent(pc)) = rule {
        let scaled = p.scaled(n, true);
        if pc > 0 && pc < 100 && scaled >= n {
            out.push(finding(
                Level::Warn,
                "percent-protects-nothing",
                ns,
                object.clone(),
                format!(
                    "maxUnavailable {pc}% of {n} pods rounds up to {scaled}: every pod may be \
                     evicted at once, the budget protects nothing at this size"
                ),
            ));
        }
    }
    if let Some(st) = pdb.status.as_ref() {
        let always = spec.unhealthy_pod_eviction_policy.as_deref() == Some("AlwaysAllow");
        // Ready counted from the pods listed now, not from the status: the
        // disruption controller may not have counted pods that became Ready
        // (seen right after a rollout), and a budget with no unready pod is
        // not one that unhealthy pods hold.
        let ready = count(pods.iter().filter(|p| pod_ready(p)).count());
        if ready < n && ready < st.desired_healthy && !always {
            out.push(finding(
                Level::Warn,
                "unhealthy-pods-hold-budget",
                ns,
                object,
                format!(
                    "{ready} of its {n} pods are Ready and it needs {}: no eviction is allowed, \
                     not even of the {} not Ready; unhealthyPodEvictionPolicy: AlwaysAllow lets \
                     those go",
                    st.desired_healthy,
                    n - ready
                ),
            ));
        }
    }
    out
}

/// A budget closed at this size: does the product's surge open it?
fn closed_finding(
    objs: &Objects,
    view: &Indexed,
    behaviour: &Behaviour,
    pdb: &PodDisruptionBudget,
    pods: &[&std::sync::Arc<Pod>],
    c: Closed,
) -> Option<LintFinding> {
    let ns = ns_of(pdb);
    let object = format!("PodDisruptionBudget/{}", name_of(pdb));
    let ours = owned_by_us(&pdb.metadata);
    if !c.surge_can_help {
        return Some(finding(Level::Fail, c.rule, ns, object, c.message));
    }
    // One node per Deployment whose pods it selects: what would a drain of it bring?
    let mut per_dep: BTreeMap<String, Option<String>> = BTreeMap::new();
    let mut others = BTreeSet::new();
    for p in pods {
        match objs.owner(p) {
            Owner::Deployment(d) => {
                let slot = per_dep.entry(d).or_default();
                if slot.is_none() {
                    *slot = pod_node(p).map(str::to_string);
                }
            }
            o => {
                others.insert(o.to_string());
            }
        }
    }
    let mut helped = Vec::new();
    let mut why_not = Vec::new();
    for (dep, node) in &per_dep {
        let Some(node) = node else { continue };
        let nodes = BTreeSet::from([node.clone()]);
        match outcome(view, behaviour, ns, dep, &nodes) {
            Outcome::Surge { from, to, .. } => helped.push(format!(
                "a drain of {node} surges Deployment {dep} from {from} to {to}"
            )),
            Outcome::Blocked(r) => why_not.push(r),
        }
    }
    for o in &others {
        why_not.push(format!(
            "{o} is not a Deployment: the product surges Deployments only"
        ));
    }
    if why_not.is_empty() && !helped.is_empty() {
        // The PDBs we own pin the floor at the replicas by design.
        return (!ours).then(|| {
            finding(
                Level::Warn,
                c.rule,
                ns,
                object,
                format!(
                    "{}; drains rely on the product's surge ({})",
                    c.message,
                    helped.join("; ")
                ),
            )
        });
    }
    let mut message = c.message;
    if !why_not.is_empty() {
        message = format!("{message}; no surge helps: {}", why_not.join("; "));
    }
    Some(finding(Level::Fail, c.rule, ns, object, message))
}

/// Pods selected by more than one PDB, one finding per set of PDBs.
fn several_pdbs(objs: &Objects) -> Vec<LintFinding> {
    let mut sets: BTreeMap<(String, Vec<String>), Vec<String>> = BTreeMap::new();
    for p in objs.pods.iter().filter(|p| !super::objects::pod_gone(p)) {
        let pdbs = objs.pdbs_of(p);
        if pdbs.len() > 1 {
            let mut names: Vec<String> = pdbs
                .iter()
                .map(|b| name_of(b.as_ref()).to_string())
                .collect();
            names.sort();
            sets.entry((ns_of(p.as_ref()).to_string(), names))
                .or_default()
                .push(name_of(p.as_ref()).to_string());
        }
    }
    sets.into_iter()
        .map(|((ns, names), pods)| {
            finding(
                Level::Fail,
                "several-pdbs",
                &ns,
                format!("Pod/{}", pods[0]),
                format!(
                    "{} pod(s) ({}) are selected by {} PDBs ({}): the apiserver refuses their \
                     evictions (HTTP 500) and kubectl drain stops; make the selectors disjoint",
                    pods.len(),
                    pods.join(", "),
                    names.len(),
                    names.join(", ")
                ),
            )
        })
        .collect()
}

/// Autoscaler minimums above the pods the Deployment's PDB selects.
fn autoscaler_minimums(objs: &Objects) -> Vec<LintFinding> {
    let mut mins: Vec<(String, String, String, i32)> = Vec::new();
    for h in objs.hpas.iter().filter(|h| !hpa_is_kedas(h)) {
        if let Some(t) = hpa_target(h) {
            let raw = h.spec.as_ref().and_then(|s| s.min_replicas).unwrap_or(1);
            let min = Markers::baseline_or(h.metadata.annotations.as_ref(), raw);
            let what = format!("HorizontalPodAutoscaler/{}", name_of(h.as_ref()));
            mins.push((ns_of(h.as_ref()).into(), t.into(), what, min));
        }
    }
    // As our PDB reads it (`surge::view::scaled_object_floor`): none once
    // KEDA deleted a paused ScaledObject's HPA, up to the count it holds.
    for so in &objs.scaled_objects {
        let floor =
            crate::surge::view::scaled_object_floor(so, objs.hpas.iter().map(AsRef::as_ref));
        if let (Some(t), Some(min)) = (scaled_object_target(so), floor) {
            let what = format!("ScaledObject/{}", name_of(so.as_ref()));
            mins.push((ns_of(so.as_ref()).into(), t.into(), what, min));
        }
    }
    let mut out = Vec::new();
    for (ns, target, what, min) in mins {
        let Some(dep) = objs
            .deployments
            .iter()
            .find(|d| ns_of(d.as_ref()) == ns && name_of(d.as_ref()) == target)
        else {
            continue;
        };
        for pdb in crate::pdb::matching_pdbs(dep, &objs.pdbs) {
            let n = count(objs.pods_of(pdb).len());
            if min > n {
                let ours = if owned_by_us(&pdb.metadata) {
                    "; the PDB the product owns keeps minAvailable at the minimum, so it allows no \
                     eviction until that many pods run"
                } else {
                    ""
                };
                out.push(finding(
                    Level::Warn,
                    "autoscaler-min-above-pods",
                    &ns,
                    what.clone(),
                    format!(
                        "its minimum {min} for Deployment {target} is above the {n} pods \
                         PodDisruptionBudget/{} selects: the autoscaler is not keeping its \
                         minimum (no metrics, or quota){ours}",
                        name_of(pdb.as_ref())
                    ),
                ));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doctor::fixtures::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
    use std::sync::Arc;

    fn run(w: &World) -> Vec<LintFinding> {
        let b = behaviour();
        let view = w.objs.surge_view(&b, &[]);
        lint(&w.objs, &view, &b)
    }

    fn world(f: impl FnOnce(&mut World)) -> World {
        let mut w = World::new();
        f(&mut w);
        w
    }

    /// `web` (3 pods on n1..n3) under one PDB `p` with this budget and status.
    fn web(
        ns: &str,
        min: Option<k8s_openapi::apimachinery::pkg::util::intstr::IntOrString>,
        max: Option<k8s_openapi::apimachinery::pkg::util::intstr::IntOrString>,
        status: (i32, i32, i32),
    ) -> World {
        world(|w| {
            w.deploy(ns, "web", &["n1", "n2", "n3"], |_| {})
                .add_pdb(pdb(ns, "p", "web", min, max, status));
        })
    }

    /// (case, world, expected (level, rule, message part) findings).
    type Want = Vec<(Level, &'static str, &'static str)>;

    fn cases() -> Vec<(&'static str, World, Want)> {
        vec![
            (
                "a budget with room",
                web("on", int(2), None, (1, 3, 2)),
                vec![],
            ),
            (
                "maxUnavailable 0",
                web("on", None, int(0), (0, 3, 3)),
                vec![(Level::Fail, "never-allows", "maxUnavailable is 0")],
            ),
            (
                "maxUnavailable 0%",
                web("on", None, pct("0%"), (0, 3, 3)),
                vec![(Level::Fail, "never-allows", "maxUnavailable is 0%")],
            ),
            (
                "minAvailable 100%",
                web("on", pct("100%"), None, (0, 3, 3)),
                vec![(Level::Fail, "never-allows", "minAvailable is 100%")],
            ),
            (
                "neither field",
                web("on", None, None, (0, 3, 0)),
                vec![(Level::Fail, "never-allows", "neither")],
            ),
            (
                "minAvailable at the pods, in scope: the surge opens it",
                web("on", int(3), None, (0, 3, 3)),
                vec![(
                    Level::Warn,
                    "min-available-at-or-above-pods",
                    "a drain of n1 surges Deployment web from 3 to 4",
                )],
            ),
            (
                "minAvailable above the pods, out of scope",
                web("off", int(4), None, (0, 3, 4)),
                // Every pod is Ready: no unhealthy-pods-hold-budget (the
                // status's 3 healthy of 4 is the budget above the pods).
                vec![(
                    Level::Fail,
                    "min-available-at-or-above-pods",
                    "no surge helps: the namespace is out of the product's scope",
                )],
            ),
            (
                "our own PDB at the replicas is the design",
                world(|w| {
                    w.deploy("on", "web", &["n1", "n2", "n3"], |_| {})
                        .add_pdb(ours(pdb("on", "web", "web", int(3), None, (0, 3, 3))));
                }),
                vec![],
            ),
            (
                "minAvailable 67% of 3 rounds up to 3",
                web("off", pct("67%"), None, (0, 3, 3)),
                vec![(
                    Level::Fail,
                    "percent-rounds-to-all",
                    "minAvailable 67% of 3 pods rounds up to 3",
                )],
            ),
            (
                "minAvailable 50% of 3 is 2: fine",
                web("off", pct("50%"), None, (1, 3, 2)),
                vec![],
            ),
            (
                "maxUnavailable 50% of 1 rounds up to every pod",
                world(|w| {
                    w.deploy("on", "one", &["n1"], |_| {}).add_pdb(pdb(
                        "on",
                        "p",
                        "one",
                        None,
                        pct("50%"),
                        (1, 1, 0),
                    ));
                }),
                vec![(Level::Warn, "percent-protects-nothing", "rounds up to 1")],
            ),
            (
                "a selector that matches nothing",
                world(|w| {
                    w.deploy("on", "web", &["n1"], |_| {}).add_pdb(pdb(
                        "on",
                        "p",
                        "wbe",
                        int(1),
                        None,
                        (0, 0, 1),
                    ));
                }),
                vec![(Level::Warn, "selects-no-pods", "matches no running pod")],
            ),
            (
                "an empty selector",
                world(|w| {
                    let mut b = pdb("on", "p", "web", int(1), None, (0, 0, 1));
                    if let Some(s) = b.spec.as_mut() {
                        s.selector = Some(LabelSelector::default());
                    }
                    w.deploy("on", "web", &["n1"], |_| {}).add_pdb(b);
                }),
                vec![
                    // The other rules still apply: it does protect web's pod.
                    (
                        Level::Warn,
                        "min-available-at-or-above-pods",
                        "minAvailable 1",
                    ),
                    (
                        Level::Warn,
                        "selects-every-pod",
                        "every pod of the namespace",
                    ),
                ],
            ),
            (
                "an invalid selector",
                world(|w| {
                    let mut b = pdb("on", "p", "web", int(1), None, (0, 0, 1));
                    if let Some(s) = b.spec.as_mut() {
                        s.selector = Some(LabelSelector {
                            match_expressions: Some(vec![LabelSelectorRequirement {
                                key: "app".into(),
                                operator: "In".into(),
                                values: None,
                            }]),
                            ..Default::default()
                        });
                    }
                    w.deploy("on", "web", &["n1"], |_| {}).add_pdb(b);
                }),
                vec![(Level::Fail, "invalid-pdb", "needs values")],
            ),
            (
                "two PDBs over the same pods",
                world(|w| {
                    w.deploy("on", "web", &["n1", "n2", "n3"], |_| {})
                        .add_pdb(pdb("on", "a", "web", int(1), None, (2, 3, 1)))
                        .add_pdb(pdb("on", "b", "web", int(1), None, (2, 3, 1)));
                }),
                vec![(
                    Level::Fail,
                    "several-pdbs",
                    "3 pod(s) (web-0, web-1, web-2) are selected by 2 PDBs (a, b)",
                )],
            ),
            (
                "unhealthy pods hold the budget at zero",
                world(|w| {
                    one_ready_two_not(w).add_pdb(pdb("on", "p", "web", int(2), None, (0, 1, 2)));
                }),
                vec![(
                    Level::Warn,
                    "unhealthy-pods-hold-budget",
                    "1 of its 3 pods are Ready and it needs 2: no eviction is allowed, not even of \
                     the 2 not Ready; unhealthyPodEvictionPolicy: AlwaysAllow",
                )],
            ),
            (
                // The disruption controller has not counted the pods that
                // became Ready: the status lags, no pod is unhealthy.
                "a status that has not counted Ready pods yet",
                world(|w| {
                    w.deploy("on", "web", &["n1", "n2", "n3"], |_| {})
                        .add_pdb(pdb("on", "p", "web", int(2), None, (0, 0, 2)));
                }),
                vec![],
            ),
            (
                "unhealthy pods under AlwaysAllow are fine",
                world(|w| {
                    let mut b = pdb("on", "p", "web", int(2), None, (0, 1, 2));
                    if let Some(s) = b.spec.as_mut() {
                        s.unhealthy_pod_eviction_policy = Some("AlwaysAllow".into());
                    }
                    one_ready_two_not(w).add_pdb(b);
                }),
                vec![],
            ),
            (
                "an HPA minimum above the pods",
                world(|w| {
                    w.deploy("on", "web", &["n1", "n2", "n3"], |_| {})
                        .add_pdb(pdb("on", "p", "web", int(1), None, (2, 3, 1)));
                    w.objs.hpas.push(Arc::new(hpa("on", "web", 5)));
                }),
                vec![(
                    Level::Warn,
                    "autoscaler-min-above-pods",
                    "its minimum 5 for Deployment web is above the 3 pods",
                )],
            ),
            (
                "a ScaledObject minimum above the pods of our PDB",
                world(|w| {
                    w.deploy("on", "web", &["n1", "n2"], |_| {})
                        .add_pdb(ours(pdb("on", "web", "web", int(1), None, (1, 2, 1))));
                    w.objs
                        .scaled_objects
                        .push(Arc::new(scaled_object("on", "web", 4)));
                }),
                vec![(
                    Level::Warn,
                    "autoscaler-min-above-pods",
                    "the PDB the product owns keeps minAvailable",
                )],
            ),
            (
                "a paused ScaledObject's minimum holds nothing",
                world(|w| {
                    w.deploy("on", "web", &["n1", "n2"], |_| {}).add_pdb(pdb(
                        "on",
                        "p",
                        "web",
                        int(1),
                        None,
                        (1, 2, 1),
                    ));
                    let mut so = scaled_object("on", "web", 4);
                    so.metadata.annotations = Some(
                        [("autoscaling.keda.sh/paused".to_string(), "true".to_string())].into(),
                    );
                    w.objs.scaled_objects.push(Arc::new(so));
                }),
                vec![],
            ),
            (
                "a minimum above the pods under a hold above it (quota, say)",
                world(|w| {
                    w.deploy("on", "web", &["n1", "n2"], |_| {})
                        .add_pdb(ours(pdb("on", "web", "web", int(3), None, (0, 2, 3))));
                    w.objs
                        .scaled_objects
                        .push(Arc::new(held_at("on", "web", 3, 5)));
                    w.objs
                        .hpas
                        .push(Arc::new(crate::surge::view::kedas_hpa("on", "web", 5, 5)));
                }),
                vec![
                    (
                        Level::Fail,
                        "min-available-at-or-above-pods",
                        "minAvailable 3 is at or above the 2 pods",
                    ),
                    (
                        Level::Warn,
                        "autoscaler-min-above-pods",
                        "its minimum 3 for Deployment web is above the 2 pods",
                    ),
                ],
            ),
            (
                "a minimum above a hold at the pods: our PDB stops at the hold",
                world(|w| {
                    w.deploy("on", "web", &["n1", "n2"], |_| {})
                        .add_pdb(ours(pdb("on", "web", "web", int(2), None, (0, 2, 2))));
                    w.objs
                        .scaled_objects
                        .push(Arc::new(held_at("on", "web", 4, 2)));
                    w.objs
                        .hpas
                        .push(Arc::new(crate::surge::view::kedas_hpa("on", "web", 2, 2)));
                }),
                // No word of the minimum (4): the hold's reason instead.
                vec![(
                    Level::Fail,
                    "min-available-at-or-above-pods",
                    "KEDA holds it at 2 replicas",
                )],
            ),
            (
                "an HPA minimum at the pods is fine",
                world(|w| {
                    w.deploy("on", "web", &["n1", "n2", "n3"], |_| {})
                        .add_pdb(pdb("on", "p", "web", int(1), None, (2, 3, 1)));
                    w.objs.hpas.push(Arc::new(hpa("on", "web", 3)));
                }),
                vec![],
            ),
        ]
    }

    /// Deployment web with one Ready pod and two not Ready.
    fn one_ready_two_not(w: &mut World) -> &mut World {
        w.deploy("on", "web", &["n1"], |_| {});
        for (i, n) in ["n2", "n3"].iter().enumerate() {
            let p = pod("on", &format!("web-u{i}"), "web", n);
            w.add_pod(not_ready(owned(p, "ReplicaSet", "web-rs")));
        }
        w
    }

    #[test]
    fn lint_rules() {
        for (name, w, want) in cases() {
            let got = run(&w);
            assert_eq!(got.len(), want.len(), "{name}: {got:#?}");
            for (g, (level, rule, part)) in got.iter().zip(&want) {
                assert_eq!((g.level, g.rule), (*level, *rule), "{name}: {g:#?}");
                assert!(g.message.contains(part), "{name}: {}", g.message);
            }
        }
    }

    #[test]
    fn closed_budgets() {
        use crate::budget::IntOrPercent::{Int, Percent};
        let rows = [
            (
                Rule::MaxUnavailable(Int(0)),
                3,
                Some(("never-allows", false)),
            ),
            (Rule::MaxUnavailable(Int(1)), 3, None),
            (
                Rule::MinAvailable(Percent(100)),
                3,
                Some(("never-allows", false)),
            ),
            (
                Rule::MinAvailable(Int(3)),
                3,
                Some(("min-available-at-or-above-pods", true)),
            ),
            (Rule::MinAvailable(Int(2)), 3, None),
            (Rule::MinAvailable(Int(2)), 0, None),
            (
                Rule::MinAvailable(Percent(90)),
                9,
                Some(("percent-rounds-to-all", true)),
            ),
            (Rule::MinAvailable(Percent(90)), 10, None),
            (
                Rule::MinAvailable(Percent(50)),
                1,
                Some(("percent-rounds-to-all", true)),
            ),
            (Rule::None, 3, Some(("never-allows", false))),
        ];
        for (rule, pods, want) in rows {
            let got = closed(rule, pods).map(|c| (c.rule, c.surge_can_help));
            assert_eq!(got, want, "{rule:?} with {pods} pods");
        }
    }
}
