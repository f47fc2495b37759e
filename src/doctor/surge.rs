//! What the product would do for a Deployment if some nodes drained: the
//! surge worker's own step (`surge::step`, hence `surge::plan`) run on the
//! listed objects, with those nodes counted as draining. Nothing is written.

use std::collections::BTreeSet;

use crate::config::Behaviour;
use crate::surge::plan::{Action, SurgeKind, Wait};
use crate::surge::step::{self, Facts, ObjKey, ObjKind, Settings};
use crate::surge::view::Indexed;

/// The answer for one Deployment whose budget allows no disruption.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// A surge starts (or is under way, `active`): the evictions are
    /// answered 429 and retried until the new pods are Ready.
    Surge {
        from: i32,
        to: i32,
        active: bool,
        /// `Kind/name` of the object whose value the surge changes (the
        /// Deployment, or the HPA or ScaledObject whose minimum it raises).
        object: String,
    },
    /// No surge helps; why.
    Blocked(String),
}

/// Runs the surge step for `deployment` of `namespace` with `nodes` draining
/// (in addition to the nodes already cordoned or tainted for a drain).
pub fn outcome(
    view: &Indexed,
    behaviour: &Behaviour,
    namespace: &str,
    deployment: &str,
    nodes: &BTreeSet<String>,
) -> Outcome {
    let Some(objs) = view
        .namespaces
        .get(namespace)
        .filter(|o| o.deployment(deployment).is_some())
    else {
        return Outcome::Blocked(format!("Deployment {deployment} not found"));
    };
    let mut draining = view.draining.clone();
    draining.extend(nodes.iter().cloned());
    let settings = Settings {
        cooldown: behaviour.cooldown,
        zero_surge_override: behaviour.zero_surge_override,
    };
    let s = step::step(
        namespace,
        objs,
        &draining,
        deployment,
        &Facts::default(),
        settings,
        None,
    );
    match s.action {
        Action::Surge {
            baseline,
            target,
            kind,
        } => Outcome::Surge {
            from: baseline,
            to: target,
            active: kind != SurgeKind::Start,
            // The applier is written last (after the Deployment it raises).
            object: s
                .writes
                .last()
                .map_or_else(|| format!("Deployment/{deployment}"), |w| object(&w.target)),
        },
        Action::Impossible { reason } => {
            Outcome::Blocked(format!("cannot surge Deployment {deployment}: {reason}"))
        }
        Action::Wait(Wait::Draining { .. }) | Action::Wait(Wait::NoDisruptionAllowed) => {
            match s.active {
                Some(m) if m.surged_to > m.baseline => Outcome::Surge {
                    from: m.baseline,
                    to: m.surged_to,
                    active: true,
                    object: format!("Deployment/{deployment}"),
                },
                _ => Outcome::Blocked(format!(
                    "a user's change to Deployment {deployment} was adopted during this drain; \
                     no new surge starts unless more pods are displaced"
                )),
            }
        }
        Action::AdoptUserChange { .. } => Outcome::Blocked(format!(
            "someone else changed the replicas of Deployment {deployment} during a surge; \
             their value stands and no new surge starts for this drain"
        )),
        Action::None | Action::Revert { .. } | Action::Wait(Wait::Cooldown { .. }) => {
            Outcome::Blocked(why_none(objs.in_scope, s.pdb.as_deref(), deployment))
        }
    }
}

fn object(k: &ObjKey) -> String {
    let kind = match k.kind {
        ObjKind::Deployment => "Deployment",
        ObjKind::Hpa => "HorizontalPodAutoscaler",
        ObjKind::ScaledObject => "ScaledObject",
    };
    format!("{kind}/{}", k.name)
}

/// Why the planner does nothing although the budget allows no disruption.
fn why_none(in_scope: bool, pdb: Option<&str>, deployment: &str) -> String {
    if !in_scope {
        return "the namespace is out of the product's scope (annotation \
                eviction-autoscaler.azure.com/enable, ACTIONED_NAMESPACES, ENABLED_BY_DEFAULT): \
                no surge, the apiserver's 429 stands"
            .into();
    }
    if pdb.is_none() {
        return format!(
            "Deployment {deployment} is not under exactly one PDB, so there is no single \
             budget to size a surge for"
        );
    }
    format!(
        "Deployment {deployment}'s budget allows no disruption now but would at its current \
         size once every pod is Ready: a surge cannot help, the drain waits for the pods"
    )
}
