//! The PDB and EvictionAutoScaler planner (behaviour.md sections 2, 3, 7):
//! a snapshot of one namespace in, the writes that bring it to the desired
//! state out. Pure, so every rule is a table test; `reconcile::apply` does the I/O.
//!
//! Ownership rules (the "never modify what is not ours" invariant):
//! - A PDB is ours while it carries `ownedBy: EvictionAutoScaler`. Only ours
//!   are ever created, patched (`SetMinAvailable`, `SetOwner`) or deleted
//!   (`DeletePdb`, `StepAside`, through `client::delete_ours`: read fresh,
//!   still ours under the UID planned, deleted with that read's
//!   resourceVersion as precondition, so a hand-over in between is kept).
//! - The one write to a PDB without `ownedBy` is `ReleaseOwner` (hand-over:
//!   drop the controller reference to the Deployment we wrote, keep every other
//!   reference). It is planned only for a PDB we provably created: the
//!   EvictionAutoScaler of the PDB's name records that PDB's UID in
//!   `status.pdbUID`. That field is written only while the PDB carries
//!   `ownedBy` (and kept while the UID stays the same, see
//!   `reconcile::desired_status`), so a Helm chart's or operator's PDB, which
//!   never carried it, never loses a reference, whatever its references say.
//!   Without the evidence (EvictionAutoScaler deleted by hand, or the user
//!   removed `ownedBy` before its status was first written) we do nothing:
//!   the safe side is to leave the PDB alone.
//! - Hand-back: `ownedBy` added again makes the PDB ours again (`SetOwner`,
//!   `SetMinAvailable`).
//!
//! One PDB per pod (the "never two PDBs over one pod" invariant):
//! - Step aside: when a PDB we do not own selects a Deployment's pods while
//!   ours for that Deployment does too, ours is deleted (`StepAside`, an Event
//!   names the PDB that took over) and theirs gets the EvictionAutoScaler.
//!   When theirs goes, "no matching PDB" creates ours again.
//! - Overlapping Deployment selectors (`app=shop` also selects the pods of a
//!   Deployment with template `app=shop, role=api`): no PDB of ours is created
//!   whose selector covers pods another PDB protects (`SelectorOverlap`,
//!   Degraded and an Event), and ours steps aside when a PDB we do not own
//!   comes to protect pods it covers, or one of ours for the other
//!   Deployment does (two admission requests racing). PDBs planned in one
//!   pass are checked against each other the same way (`one_per_pod`): the
//!   narrower is made first. Two of ours that select each other's pods (the
//!   same selector): the one for the name that sorts first stays
//!   (`mutual_pdb`). Neither rule re-creates what it deleted: the Deployment
//!   left without a PDB of its own is in `SelectorOverlap` or protected by
//!   the one that stayed.
//!
//! The caller applies the actions in order, those that failed before last
//! (with, behind a failing EvictionAutoScaler, the create of or our reference
//! on the PDB of its name); a failed action is retried with per-object
//! backoff (`reconcile::backoff`); `Action::object` names the object for
//! that book.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::budget::Selector;
use crate::cache::{owned_by_us, SlimPod};
use crate::crd::EvictionAutoScaler;
use crate::names;
use crate::pdb::{self, min_available_for, owned_pdb, owner_reference};
use crate::scope::deployment_opted_out;
use crate::surge::view::{hpa_is_kedas, hpa_target};

/// One namespace as the caches see it.
pub struct NamespaceSnapshot<'a> {
    pub name: &'a str,
    pub in_scope: bool,
    pub pdb_create: bool,
    pub deployments: &'a [Arc<Deployment>],
    pub pdbs: &'a [Arc<PodDisruptionBudget>],
    pub hpas: &'a [Arc<HorizontalPodAutoscaler>],
    /// Deployment name → the KEDA ScaledObject minimum (its persisted baseline while surged).
    pub keda_min: &'a BTreeMap<String, i32>,
    /// None while the EvictionAutoScaler store is not ready (its CRD deleted,
    /// or not yet listed): then only PDBs are planned (creates, steps aside,
    /// floors), no EvictionAutoScaler is created or deleted, and no PDB is
    /// released (that needs the record its status holds).
    pub eas: Option<&'a [Arc<EvictionAutoScaler>]>,
    /// KEDA's API is served but its ScaledObjects are not known (see
    /// `Cache::keda_known`): `keda_min` may miss some, so the Deployments
    /// under KEDA's HPAs are left as they are (their floor is unknown).
    pub keda_unknown: bool,
    /// The namespace's pods; None while the pod cache is not ready, and then
    /// no PDB is created (one over a pod another PDB protects could be).
    pub pods: Option<&'a [Arc<SlimPod>]>,
    /// Seconds since each PDB was created, for the orphan grace period.
    pub pdb_age_secs: &'a (dyn Fn(&PodDisruptionBudget) -> i64 + Sync),
    pub orphan_grace_secs: i64,
    /// Deployments (in lower case) some object of which (the Deployment,
    /// an HPA, a ScaledObject) carries a marker of a surge.
    pub surging: &'a BTreeSet<String>,
    /// Deployments being deleted (left out of `deployments`): their pods
    /// may run on for a while (a finalizer), and their PDB stays until
    /// garbage collection takes it.
    pub deleting: &'a BTreeSet<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    CreatePdb(Box<PodDisruptionBudget>),
    SetMinAvailable {
        pdb: String,
        min: i32,
    },
    /// Add our controller reference (admission-time PDBs, or a hand-back).
    SetOwner {
        pdb: String,
        owner: OwnerReference,
    },
    /// The user removed `ownedBy` from a PDB we created: drop our reference, keep the PDB.
    ReleaseOwner {
        pdb: String,
        /// The PDB read (a precondition: not a PDB re-created under the name).
        uid: Option<String>,
        /// Whose controller reference goes; any other reference stays, as
        /// read at write time.
        deployment: String,
    },
    DeletePdb {
        pdb: String,
        uid: Option<String>,
        why: &'static str,
    },
    /// Our PDB's selector set back to its Deployment's (`from` is the one
    /// read: edited by hand, made at the admission of a create refused as a
    /// duplicate, or the Go project's copy of the matchLabels alone).
    SetSelector {
        pdb: String,
        uid: Option<String>,
        from: Option<LabelSelector>,
        to: LabelSelector,
    },
    /// A PDB of the Deployment's name exists and does not select its pods.
    NameConflict {
        deployment: String,
        pdb: String,
    },
    /// The Deployment's selector also covers the pods of Deployment `other`,
    /// which PDB `pdb` protects: a PDB of ours would be a second PDB over
    /// them, so none is created.
    SelectorOverlap {
        deployment: String,
        pdb: String,
        /// What else it covers: `Deployment api` or `Pod db-0`.
        other: String,
    },
    /// Planned before the PDB writes of the same pass, so the evidence of a
    /// PDB of ours (`pdb_uid`, written into its status right after the create)
    /// exists by the time our ownerReference appears on the PDB.
    CreateEas {
        name: String,
        target: String,
        owner: Option<OwnerReference>,
        /// The PDB's UID when the PDB is ours: recorded as `status.pdbUID`.
        pdb_uid: Option<String>,
    },
    /// With the UID read as precondition: an EvictionAutoScaler that
    /// replaced ours under the name meanwhile is not deleted.
    DeleteEas {
        name: String,
        uid: Option<String>,
    },
    /// The Go project's finalizers that may go from a deleted record of
    /// ours ([`crate::finalizers::releasable`]); its UID and the
    /// finalizers read are the patch's preconditions.
    ReleaseFinalizers {
        name: String,
        uid: Option<String>,
        read: Vec<String>,
        remove: Vec<String>,
    },
    /// Another PDB (not ours) selects the pods of `deployment`: delete ours
    /// (UID precondition), with an Event naming the PDB that took over.
    StepAside {
        pdb: String,
        uid: Option<String>,
        deployment: String,
        by: String,
    },
}

impl Action {
    /// The object this action writes, for the per-object backoff book.
    pub fn object(&self) -> String {
        match self {
            Action::CreatePdb(p) => {
                format!("pdb/{}", p.metadata.name.as_deref().unwrap_or_default())
            }
            Action::SetMinAvailable { pdb, .. }
            | Action::SetOwner { pdb, .. }
            | Action::ReleaseOwner { pdb, .. }
            | Action::DeletePdb { pdb, .. }
            | Action::SetSelector { pdb, .. }
            | Action::StepAside { pdb, .. } => format!("pdb/{pdb}"),
            Action::NameConflict { deployment, .. }
            | Action::SelectorOverlap { deployment, .. } => {
                format!("deployment/{deployment}")
            }
            Action::CreateEas { name, .. } | Action::DeleteEas { name, .. } => {
                format!("eas/{name}")
            }
            Action::ReleaseFinalizers { name, .. } => format!("eas/{name}"),
        }
    }
}

pub(crate) fn pdb_owner(p: &PodDisruptionBudget) -> Option<OwnerReference> {
    Some(OwnerReference {
        api_version: "policy/v1".into(),
        kind: "PodDisruptionBudget".into(),
        name: p.metadata.name.clone()?,
        uid: p.metadata.uid.clone()?,
        controller: Some(true),
        block_owner_deletion: Some(true),
    })
}

/// The controller reference to this Deployment, as we write it.
fn is_our_deployment_ref(o: &OwnerReference, dep_name: &str) -> bool {
    o.kind == "Deployment" && o.controller == Some(true) && o.name == dep_name
}

fn deployment_ref<'a>(p: &'a PodDisruptionBudget, dep_name: &str) -> Option<&'a OwnerReference> {
    p.metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| is_our_deployment_ref(o, dep_name))
}

/// The floor our PDB keeps for a Deployment: KEDA minimum, else HPA minimum,
/// else replicas, never counting our own surge. None: not known yet (a lone
/// surge marker while the EvictionAutoScalers are not listed): the PDB is
/// neither resized nor created meanwhile.
/// `hpa`: the one targeting `dep` ([`pdb::hpa_for`]).
fn floor_for(
    dep: &Deployment,
    hpa: Option<&Arc<HorizontalPodAutoscaler>>,
    s: &NamespaceSnapshot,
) -> Option<i32> {
    let name = dep.metadata.name.as_deref().unwrap_or_default();
    if let Some(min) = s.keda_min.get(name) {
        return Some(*min);
    }
    // A surge of the Go project's older versions (lone marker): its
    // recorded baseline, not the surged number, until the surge worker
    // writes that baseline beside the marker.
    if hpa.is_none() {
        let annotations = dep.metadata.annotations.as_ref();
        let replicas = dep.spec.as_ref().and_then(|sp| sp.replicas);
        let Some(eas) = s.eas else {
            return match crate::markers::lone_marker_at(annotations, replicas) {
                Some(_) => None,
                None => Some(min_available_for(dep, None)),
            };
        };
        if let Some(m) = crate::markers::legacy_surge(name, annotations, replicas, eas) {
            return Some(m.baseline);
        }
    }
    Some(min_available_for(dep, hpa.map(|h| h.as_ref())))
}

/// The same label selector, an empty map or list counting as absent.
fn same_selector(a: Option<&LabelSelector>, b: Option<&LabelSelector>) -> bool {
    let labels = |s: Option<&LabelSelector>| {
        s.and_then(|s| s.match_labels.clone())
            .filter(|m| !m.is_empty())
    };
    let exprs = |s: Option<&LabelSelector>| {
        s.and_then(|s| s.match_expressions.clone())
            .filter(|e| !e.is_empty())
    };
    labels(a) == labels(b) && exprs(a) == exprs(b)
}

pub(crate) fn target_of(p: &PodDisruptionBudget) -> Option<&str> {
    p.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(names::TARGET))
        .map(String::as_str)
        .or(p.metadata.name.as_deref())
}

/// Ours, and made for this Deployment.
fn ours_for(p: &PodDisruptionBudget, dep_name: &str) -> bool {
    owned_by_us(&p.metadata) && target_of(p) == Some(dep_name)
}

/// The writes that keep our PDB for `dep` in line, or hand it over.
/// `overlap`: a PDB over another Deployment's pods that our selector covers too.
/// `mutual`: our PDB for another Deployment that selects these pods while
/// ours for `dep` selects that Deployment's pods too (see [`mutual_pdb`]).
#[allow(clippy::too_many_arguments)]
fn plan_matching(
    dep: &Deployment,
    dep_name: &str,
    matching: &[&Arc<PodDisruptionBudget>],
    overlap: Option<&Arc<PodDisruptionBudget>>,
    mutual: Option<&Arc<PodDisruptionBudget>>,
    floor: Option<i32>,
    opted_out: bool,
    proven: &dyn Fn(&PodDisruptionBudget) -> bool,
    out: &mut Vec<Action>,
) {
    // The first PDB we do not own that selects these pods, or any PDB over
    // pods of another Deployment that our selector covers too (ours is the
    // broader, and another budget already protects those pods), or one of
    // ours over the same pods (`mutual`): ours steps aside for it.
    let theirs = matching
        .iter()
        .copied()
        .find(|p| !owned_by_us(&p.metadata))
        .or(overlap)
        .or(mutual)
        .and_then(|p| p.metadata.name.clone());
    // Two PDBs of ours for this Deployment (one copied with our annotations):
    // two budgets over one pod. The one named after the Deployment stays,
    // else the first by name.
    let own: Vec<&str> = matching
        .iter()
        .filter(|p| ours_for(p, dep_name))
        .filter_map(|p| p.metadata.name.as_deref())
        .collect();
    let keep = own
        .iter()
        .find(|n| **n == dep_name)
        .or(own.iter().min())
        .copied();
    for p in matching {
        let pdb_name = p.metadata.name.clone().unwrap_or_default();
        if ours_for(p, dep_name) {
            if let Some(by) = &theirs {
                out.push(Action::StepAside {
                    pdb: pdb_name,
                    uid: p.metadata.uid.clone(),
                    deployment: dep_name.to_string(),
                    by: by.clone(),
                });
                continue;
            }
            if keep != Some(pdb_name.as_str()) {
                out.push(Action::DeletePdb {
                    pdb: pdb_name,
                    uid: p.metadata.uid.clone(),
                    why: "a second PDB of ours over the same pods",
                });
                continue;
            }
            if opted_out {
                out.push(Action::DeletePdb {
                    pdb: pdb_name,
                    uid: p.metadata.uid.clone(),
                    why: "deployment opted out",
                });
                continue;
            }
            let current = p.spec.as_ref().and_then(|sp| sp.min_available.clone());
            if let Some(floor) = floor.filter(|f| current != Some(IntOrString::Int(*f))) {
                out.push(Action::SetMinAvailable {
                    pdb: pdb_name.clone(),
                    min: floor,
                });
            }
            let has_owner = dep
                .metadata
                .uid
                .as_deref()
                .is_some_and(|uid| deployment_ref(p, dep_name).is_some_and(|o| o.uid == uid));
            // Only once the record of its name proves it ours: a user who
            // took it over (`ownedBy` removed) before the proof existed would
            // keep our reference for good (deleting the Deployment would take
            // their PDB), as nothing could release it.
            if !has_owner && proven(p) {
                if let Some(owner) = owner_reference(dep) {
                    out.push(Action::SetOwner {
                        pdb: pdb_name,
                        owner,
                    });
                }
            }
        }
    }
}

/// PDBs handed to their user (`ownedBy` removed from one we made) that still
/// carry our controller reference. Released whatever they select now (the
/// same edit may change the selector) and whatever the namespace's scope:
/// else deleting the Deployment would garbage-collect the user's PDB.
fn releases(s: &NamespaceSnapshot) -> Vec<Action> {
    let mut eas_named: HashMap<&str, Vec<Arc<EvictionAutoScaler>>> = HashMap::new();
    for e in s.eas.unwrap_or_default() {
        if let Some(n) = e.metadata.name.as_deref() {
            eas_named.entry(n).or_default().push(Arc::clone(e));
        }
    }
    s.pdbs
        .iter()
        .filter(|p| !owned_by_us(&p.metadata))
        .filter_map(|p| {
            let named = eas_named.get(p.metadata.name.as_deref()?)?;
            let target = once_ours(p, named)?;
            deployment_ref(p, target)?;
            Some(Action::ReleaseOwner {
                pdb: p.metadata.name.clone()?,
                uid: p.metadata.uid.clone(),
                deployment: target.to_string(),
            })
        })
        .collect()
}

/// Objects by name, each name's in list order (what `find` by name gives
/// first is the first of its list): a namespace's plan looks up each of its
/// Deployments by name, and a scan each time made it quadratic.
pub(crate) type Named<'a, K> = HashMap<&'a str, Vec<&'a Arc<K>>>;

pub(crate) fn named<K: kube::Resource>(items: &[Arc<K>]) -> Named<'_, K> {
    let mut by: Named<'_, K> = HashMap::new();
    for i in items {
        if let Some(n) = i.meta().name.as_deref() {
            by.entry(n).or_default().push(i);
        }
    }
    by
}

/// A PDB of ours made at admission whose Deployment never appeared (no
/// owner reference yet, and no Deployment of its target's name).
fn admission_orphan(
    p: &PodDisruptionBudget,
    deployments: &HashSet<&str>,
    deleting: &BTreeSet<String>,
) -> bool {
    let target = target_of(p).unwrap_or_default();
    owned_by_us(&p.metadata)
        && p.metadata
            .owner_references
            .as_ref()
            .is_none_or(|o| o.is_empty())
        && !deleting.contains(target)
        && !deployments.contains(target)
}

/// Does the namespace wait on the clock rather than on a change: an
/// admission-time PDB whose Deployment has not appeared, deleted once its
/// grace is over (by a later plan that no watch event may bring).
pub fn waits_on_the_clock(s: &NamespaceSnapshot) -> bool {
    let names: HashSet<&str> = s
        .deployments
        .iter()
        .filter_map(|d| d.metadata.name.as_deref())
        .collect();
    s.pdbs
        .iter()
        .any(|p| admission_orphan(p, &names, s.deleting))
}

/// The references a release leaves on a PDB: all of `current` but our
/// controller reference to `deployment`. None when that is not there
/// (nothing to write).
pub fn released_references(
    current: &[OwnerReference],
    deployment: &str,
) -> Option<Vec<OwnerReference>> {
    let keep: Vec<OwnerReference> = current
        .iter()
        .filter(|o| !is_our_deployment_ref(o, deployment))
        .cloned()
        .collect();
    (keep.len() < current.len()).then_some(keep)
}

/// The patch that drops our controller reference to `deployment` from the
/// PDB of `uid` whose references are `current`: guarded by its UID (one
/// made again under its name was never ours) and by the references as
/// read (one added since fails it, and stays). None when that reference is
/// not there. The reconciler's hand-over and uninstall's both write it.
pub fn release_ops(
    uid: Option<&str>,
    current: &[OwnerReference],
    deployment: &str,
) -> Option<Vec<serde_json::Value>> {
    let keep = released_references(current, deployment)?;
    let mut ops = vec![serde_json::json!({"op": "test", "path": "/metadata/uid", "value": uid})];
    ops.extend(crate::patch::guarded_set(
        "/metadata/ownerReferences",
        Some(serde_json::json!(current)),
        serde_json::json!(keep),
    ));
    Some(ops)
}

/// Did we create this PDB, and for which Deployment? The EvictionAutoScaler
/// of its name recorded its UID while it carried `ownedBy` (see the header).
pub fn once_ours<'a>(
    p: &PodDisruptionBudget,
    eas: &'a [Arc<EvictionAutoScaler>],
) -> Option<&'a str> {
    let (name, uid) = (p.metadata.name.as_deref()?, p.metadata.uid.as_deref()?);
    eas.iter()
        .filter(|e| e.metadata.name.as_deref() == Some(name))
        .find(|e| e.status.as_ref().and_then(|s| s.pdb_uid.as_deref()) == Some(uid))
        .map(|e| e.spec.target_name.as_str())
}

/// Releases first; the EvictionAutoScaler that holds a release's evidence
/// is not deleted in the same pass (a failed release could not be retried).
fn with_releases(s: &NamespaceSnapshot, out: Vec<Action>) -> Vec<Action> {
    let mut all = releases(s);
    let released: BTreeSet<String> = all
        .iter()
        .filter_map(|a| match a {
            Action::ReleaseOwner { pdb, .. } => Some(pdb.clone()),
            _ => None,
        })
        .collect();
    all.extend(
        out.into_iter()
            .filter(|a| !matches!(a, Action::DeleteEas { name, .. } if released.contains(name))),
    );
    all
}

/// Ours for another Deployment of the namespace whose pod template `dep`'s
/// selector does not cover: made for a broader one (`shop`, selector
/// `app=shop`, over `api`'s pods, template `app=shop, role=api`). Of two
/// that cover each other, `mutual_pdb` decides.
fn broader_ours(
    p: &PodDisruptionBudget,
    dep: &Deployment,
    dep_name: &str,
    deployments: &[Arc<Deployment>],
) -> bool {
    let Some(other) = target_of(p).filter(|t| owned_by_us(&p.metadata) && *t != dep_name) else {
        return false;
    };
    let Some(b) = deployments
        .iter()
        .filter(|d| d.metadata.namespace == dep.metadata.namespace)
        .find(|d| d.metadata.name.as_deref() == Some(other))
    else {
        return false;
    };
    // One whose selector is not its Deployment's is being set back (the
    // `edited` path), not stepping aside.
    let faithful = same_selector(
        p.spec.as_ref().and_then(|sp| sp.selector.as_ref()),
        b.spec.as_ref().map(|sp| &sp.selector),
    );
    faithful
        && Selector::compile(dep.spec.as_ref().map(|s| &s.selector))
            .is_ok_and(|s| !s.selects_for_eviction(&pdb::template_labels(b)))
}

/// Our PDB for another Deployment that selects `dep`'s pods while ours for
/// `dep` selects that Deployment's pods too (the same or mutually covering
/// selectors): two budgets over both Deployments' pods. The PDB of the
/// Deployment whose name sorts first stays, so both passes agree on which
/// one goes. None unless `dep` has its own PDB among `matching`.
fn mutual_pdb<'a>(
    dep: &Deployment,
    dep_name: &str,
    matching: &[&'a Arc<PodDisruptionBudget>],
    deployments: &Named<'_, Deployment>,
    compiled: &pdb::CompiledPdbs<'a>,
) -> Option<&'a Arc<PodDisruptionBudget>> {
    let own = matching.iter().find(|p| ours_for(p, dep_name))?;
    matching.iter().copied().find(|p| {
        let Some(other) = target_of(p).filter(|t| owned_by_us(&p.metadata) && *t < dep_name) else {
            return false;
        };
        deployments
            .get(other)
            .into_iter()
            .flatten()
            .find(|d| d.metadata.namespace == dep.metadata.namespace)
            .is_some_and(|d| compiled.matching(d).iter().any(|q| Arc::ptr_eq(q, own)))
    })
}

/// The PDBs planned in one pass, less any whose selector covers the pods of
/// another Deployment planned a PDB in the same pass (overlapping selectors):
/// both made at once would put two budgets over those pods, which
/// `overlapping` cannot see before either exists. The narrower one is made;
/// the next pass sees it and plans `SelectorOverlap` for the broader. Of two
/// that cover each other, the one for the name that sorts first is made.
/// Two whose selectors both select one running pod (a Job's pod labelled for
/// both) but not each other's templates: the one for the name that sorts
/// first is made, as `pod_overlap` would settle it once both existed.
fn one_per_pod(
    planned: Vec<(&Arc<Deployment>, PodDisruptionBudget)>,
    pods: &[Arc<crate::cache::SlimPod>],
) -> Vec<PodDisruptionBudget> {
    let selectors: Vec<_> = planned
        .iter()
        .map(|(d, _)| Selector::compile(d.spec.as_ref().map(|s| &s.selector)).ok())
        .collect();
    let templates: Vec<_> = planned
        .iter()
        .map(|(d, _)| pdb::template_labels(d))
        .collect();
    let covers = |a: usize, b: usize| {
        selectors[a]
            .as_ref()
            .is_some_and(|s| s.selects_for_eviction(&templates[b]))
    };
    let name = |a: usize| planned[a].0.metadata.name.as_deref();
    let n = planned.len();
    // Pairs whose selectors share a running pod: per pod, the planned
    // selectors over it (pods × planned checks, not pairs × pods).
    let mut share = BTreeSet::new();
    // Which pods count: as in `pdb::protected_pods`.
    for pod in pods
        .iter()
        .filter(|p| !p.is_completed() && (!p.is_terminating() || p.replaced_once_gone()))
    {
        let over: Vec<usize> = (0..n)
            .filter(|a| {
                selectors[*a]
                    .as_ref()
                    .is_some_and(|s| s.selects_for_eviction(pod.labels()))
            })
            .collect();
        for (i, a) in over.iter().enumerate() {
            for b in &over[i + 1..] {
                share.insert((*a, *b));
                share.insert((*b, *a));
            }
        }
    }
    let dropped: Vec<bool> = (0..n)
        .map(|a| {
            (0..n).any(|b| {
                b != a
                    && (covers(a, b) && (!covers(b, a) || name(b) < name(a))
                        // Only where neither covers the other's template:
                        // else the broader one goes by the rule above, and
                        // the narrower one (sharing its own pods with it)
                        // must stay, or neither is ever made.
                        || !covers(a, b)
                            && !covers(b, a)
                            && share.contains(&(a, b))
                            && name(b) < name(a))
            })
        })
        .collect();
    planned
        .into_iter()
        .zip(dropped)
        .filter(|(_, d)| !d)
        .map(|((_, p), _)| p)
        .collect()
}

pub fn plan(s: &NamespaceSnapshot) -> Vec<Action> {
    let mut out = plan_all(s);
    // A record whose PDB, ours as it proves, is still there waits for it:
    // with that delete failing (a policy, a conflict), the user may take the
    // PDB over meanwhile, and only the record lets us release it then. It
    // goes with the PDB (its owner), or in the pass after.
    let proves_a_pdb_left = |name: &str| {
        let recorded = s
            .eas
            .unwrap_or_default()
            .iter()
            .find(|e| e.metadata.name.as_deref() == Some(name))
            .and_then(|e| e.status.as_ref())
            .and_then(|st| st.pdb_uid.as_deref());
        recorded.is_some_and(|uid| {
            s.pdbs.iter().any(|p| {
                p.metadata.name.as_deref() == Some(name)
                    && p.metadata.uid.as_deref() == Some(uid)
                    && owned_by_us(&p.metadata)
            })
        })
    };
    out.retain(|a| !matches!(a, Action::DeleteEas { name, .. } if proves_a_pdb_left(name)));
    out.extend(finalizer_releases(s.eas, s.pdbs, s.surging));
    // A surge of the Go project's older versions not yet taken over: its
    // baseline lives in the status of its EvictionAutoScaler (owned by its
    // PDB), and a delete of either would take it away before the surge
    // worker has written it beside the marker (the surged number would then
    // stay for good). Those deletes wait for the take-over, the worker's
    // first step on that Deployment.
    let pending: BTreeSet<String> = s
        .eas
        .map(|eas| {
            s.deployments
                .iter()
                .filter_map(|d| {
                    let name = d.metadata.name.as_deref()?;
                    let replicas = d.spec.as_ref().and_then(|sp| sp.replicas);
                    let ann = d.metadata.annotations.as_ref();
                    crate::markers::legacy_surge(name, ann, replicas, eas)
                        .map(|_| name.to_ascii_lowercase())
                })
                .collect()
        })
        .unwrap_or_default();
    if pending.is_empty() {
        return out;
    }
    let holds_record =
        |target: Option<&str>| target.is_some_and(|t| pending.contains(&t.to_ascii_lowercase()));
    let pdb_target = |name: &str| {
        s.pdbs
            .iter()
            .find(|p| p.metadata.name.as_deref() == Some(name))
            .and_then(|p| target_of(p))
    };
    let eas_target = |name: &str| {
        s.eas
            .unwrap_or_default()
            .iter()
            .find(|e| e.metadata.name.as_deref() == Some(name))
            .map(|e| e.spec.target_name.as_str())
    };
    out.retain(|a| match a {
        Action::DeletePdb { pdb, .. } | Action::StepAside { pdb, .. } => {
            !holds_record(pdb_target(pdb))
        }
        Action::DeleteEas { name, .. } => !holds_record(eas_target(name)),
        _ => true,
    });
    out
}

/// The Go project's finalizers that may go from our deleted records:
/// `surging` names (in lower case) the Deployments some object of which
/// carries a marker of a surge. In a namespace being deleted, none of it
/// matters any more: pass no PDB and no Deployment.
pub(crate) fn finalizer_releases(
    eas: Option<&[Arc<EvictionAutoScaler>]>,
    pdbs: &[Arc<PodDisruptionBudget>],
    surging: &BTreeSet<String>,
) -> Vec<Action> {
    eas.unwrap_or_default()
        .iter()
        .filter(|e| e.metadata.deletion_timestamp.is_some())
        .filter_map(|e| {
            let pdb = pdbs.iter().find(|p| p.metadata.name == e.metadata.name);
            let surging = surging.contains(&e.spec.target_name.to_ascii_lowercase());
            let remove = crate::finalizers::releasable(e, surging, pdb.map(|p| &**p));
            (!remove.is_empty()).then(|| Action::ReleaseFinalizers {
                name: e.metadata.name.clone().unwrap_or_default(),
                uid: e.metadata.uid.clone(),
                read: e.metadata.finalizers.clone().unwrap_or_default(),
                remove,
            })
        })
        .collect()
}

/// [`plan`] before the deletes that wait for a take-over are held back.
fn plan_all(s: &NamespaceSnapshot) -> Vec<Action> {
    with_releases(s, plan_kept(s))
}

/// The writes for the PDBs and EvictionAutoScalers we own.
fn plan_kept(s: &NamespaceSnapshot) -> Vec<Action> {
    let mut out = Vec::new();
    if !s.in_scope {
        // Out of scope: remove what we own there, touch nothing else.
        for p in s.pdbs.iter().filter(|p| owned_by_us(&p.metadata)) {
            out.push(Action::DeletePdb {
                pdb: p.metadata.name.clone().unwrap_or_default(),
                uid: p.metadata.uid.clone(),
                why: "namespace left scope",
            });
        }
        for e in s
            .eas
            .unwrap_or_default()
            .iter()
            .filter(|e| owned_by_us(&e.metadata) && e.metadata.deletion_timestamp.is_none())
        {
            out.push(Action::DeleteEas {
                name: e.metadata.name.clone().unwrap_or_default(),
                uid: e.metadata.uid.clone(),
            });
        }
        return out;
    }

    // Our PDBs whose record (of their name) holds their UID: the proof, to
    // be in place before our reference is (`Action::SetOwner`).
    let proofs: BTreeSet<(&str, &str)> = s
        .eas
        .unwrap_or_default()
        .iter()
        .filter_map(|e| {
            let uid = e.status.as_ref()?.pdb_uid.as_deref()?;
            Some((e.metadata.name.as_deref()?, uid))
        })
        .collect();
    let proven = |p: &PodDisruptionBudget| {
        matches!((p.metadata.name.as_deref(), p.metadata.uid.as_deref()),
            (Some(n), Some(u)) if proofs.contains(&(n, u)))
    };
    // EvictionAutoScaler name → (target, owner, UID of the PDB when ours).
    let mut wanted_eas: BTreeMap<String, (String, Option<OwnerReference>, Option<String>)> =
        BTreeMap::new();
    let compiled = pdb::CompiledPdbs::new(s.pdbs);
    let templates = pdb::Templates::new(s.deployments);
    // Each pod some PDB protects, with those PDBs (for `pod_overlap`).
    let protected = pdb::protected_pods(&compiled, s.name, s.pods.unwrap_or_default());
    // Looked up per Deployment: indexed once, not scanned each time.
    let pdbs_named = named(s.pdbs);
    let deployments_named = named(s.deployments);
    let dep_names: HashSet<&str> = deployments_named.keys().copied().collect();
    let mut ours_by_target: HashMap<&str, Vec<&Arc<PodDisruptionBudget>>> = HashMap::new();
    for p in s.pdbs.iter().filter(|p| owned_by_us(&p.metadata)) {
        if let Some(t) = target_of(p) {
            ours_by_target.entry(t).or_default().push(p);
        }
    }
    let mut hpas_by_target: HashMap<&str, Vec<&Arc<HorizontalPodAutoscaler>>> = HashMap::new();
    for h in s.hpas {
        if let Some(sp) = h
            .spec
            .as_ref()
            .filter(|sp| sp.scale_target_ref.kind == "Deployment")
        {
            hpas_by_target
                .entry(&sp.scale_target_ref.name)
                .or_default()
                .push(h);
        }
    }
    let orphans: Vec<&Arc<PodDisruptionBudget>> = s
        .pdbs
        .iter()
        .filter(|p| admission_orphan(p, &dep_names, s.deleting))
        .collect();
    // PDBs to create, kept apart until the pass has seen every Deployment.
    let mut planned = Vec::new();
    // Ours for a broader Deployment over the pods of narrower ones that
    // have none of their own, with those that can have one (see the loop).
    let mut for_narrower: Vec<(Arc<PodDisruptionBudget>, BTreeSet<String>)> = Vec::new();
    // Deployments under KEDA's HPAs while the ScaledObjects are unknown.
    let waiting: BTreeSet<&str> = s
        .hpas
        .iter()
        .filter(|h| s.keda_unknown && hpa_is_kedas(h))
        .filter_map(|h| hpa_target(h))
        .collect();
    for dep in s.deployments {
        let Some(dep_name) = dep.metadata.name.clone() else {
            continue;
        };
        // Under KEDA's HPA with the ScaledObjects unknown: the floor is not
        // known (neither resized nor made), but one budget per pod still
        // holds (a PDB of the user's over its pods makes ours step aside).
        let waits = waiting.contains(dep_name.as_str());
        // Ours for this Deployment (its reference, or none yet) with another
        // selector than the Deployment's: edited by hand, or made at the
        // admission of a create refused as a duplicate. It may select other
        // pods a second budget protects (every eviction of them fails) and
        // not these: deleted (UID precondition), and made again right.
        let edited: Vec<&Arc<PodDisruptionBudget>> = ours_by_target
            .get(dep_name.as_str())
            .into_iter()
            .flatten()
            .copied()
            .filter(|p| {
                deployment_ref(p, &dep_name)
                    .is_none_or(|o| Some(&o.uid) == dep.metadata.uid.as_ref())
            })
            .filter(|p| {
                let theirs = p.spec.as_ref().and_then(|sp| sp.selector.as_ref());
                !same_selector(theirs, dep.spec.as_ref().map(|sp| &sp.selector))
            })
            .collect();
        let opted_out = deployment_opted_out(dep.metadata.annotations.as_ref());
        let matching = compiled.matching(dep);
        let hpa = hpas_by_target
            .get(dep_name.as_str())
            .into_iter()
            .flatten()
            .filter(|h| h.metadata.namespace == dep.metadata.namespace)
            .min_by_key(|h| h.metadata.name.as_deref())
            .copied();
        let floor = if waits { None } else { floor_for(dep, hpa, s) };
        let overlap = pdb::overlapping(dep, &templates, &compiled)
            .map(|(p, d)| {
                let name = d.metadata.name.as_deref().unwrap_or_default();
                (p, format!("Deployment {name}"))
            })
            .or_else(|| {
                // Ours for another Deployment over a pod ours covers too
                // through the pod's own labels (a Job's pod labelled for
                // both): only the one whose Deployment sorts after steps
                // aside, as with `mutual_pdb`. Both stepping aside, the next
                // pass would make both again, and so on.
                let has_own = matching.iter().any(|p| ours_for(p, &dep_name));
                let yields_to_us = |p: &PodDisruptionBudget| {
                    has_own
                        && owned_by_us(&p.metadata)
                        && target_of(p).is_some_and(|t| t > dep_name.as_str())
                };
                // An admission-time PDB of ours whose Deployment never
                // appeared goes in this pass when it sits beside this
                // Deployment's own (below): stepping aside for it would
                // leave neither. (Without one of its own, none is made
                // beside it: it waits for that PDB to go.)
                let among = |list: &[&Arc<PodDisruptionBudget>], p: &Arc<PodDisruptionBudget>| {
                    list.iter().any(|q| Arc::ptr_eq(q, p))
                };
                let ignored = |p: &Arc<PodDisruptionBudget>| {
                    among(&matching, p)
                        || yields_to_us(p)
                        || has_own && among(&orphans, p)
                        || among(&edited, p)
                };
                pdb::pod_overlap(dep, &protected, ignored).map(|(p, pod)| (p, format!("Pod {pod}")))
            });
        let overlap_pdb = overlap.as_ref().map(|(p, _)| *p);
        let mutual = mutual_pdb(dep, &dep_name, &matching, &deployments_named, &compiled);
        if !edited.is_empty() {
            // Set back in place (the one named after the Deployment, else
            // the first by name): no moment without a budget, and its
            // EvictionAutoScaler (owned by it, with any record the Go
            // project's older versions kept there) stays. Any other is a
            // copy and goes.
            // Only where it is then the pods' one budget, as a new PDB
            // would be: not for an opted-out Deployment, nor beside another
            // PDB over these pods (or over pods its selector covers), else
            // two budgets until the next pass steps aside. Then it goes.
            let is_edited =
                |p: &&Arc<PodDisruptionBudget>| edited.iter().any(|e| Arc::ptr_eq(e, p));
            let alone = !opted_out && overlap.is_none() && matching.iter().all(is_edited);
            let keep = edited
                .iter()
                .find(|p| p.metadata.name.as_deref() == Some(dep_name.as_str()))
                .or_else(|| edited.iter().min_by_key(|p| p.metadata.name.clone()))
                .copied()
                .filter(|_| alone);
            for p in edited {
                let pdb = p.metadata.name.clone().unwrap_or_default();
                if keep.is_some_and(|k| Arc::ptr_eq(k, p)) {
                    if let Some(to) = dep.spec.as_ref().map(|sp| sp.selector.clone()) {
                        out.push(Action::SetSelector {
                            pdb: pdb.clone(),
                            uid: p.metadata.uid.clone(),
                            from: p.spec.as_ref().and_then(|sp| sp.selector.clone()),
                            to,
                        });
                        let uid = p.metadata.uid.clone();
                        wanted_eas.insert(pdb, (dep_name.clone(), pdb_owner(p), uid));
                        continue;
                    }
                }
                out.push(Action::DeletePdb {
                    pdb,
                    uid: p.metadata.uid.clone(),
                    why: "a copy of ours whose selector is not its Deployment's",
                });
            }
            continue;
        }

        plan_matching(
            dep,
            &dep_name,
            &matching,
            overlap_pdb,
            mutual,
            floor,
            opted_out,
            &proven,
            &mut out,
        );
        // What protects the pods once the step-aside is done. Ours stepping
        // aside for ours of another Deployment: that one's own pass plans
        // its EvictionAutoScaler.
        if mutual.is_some()
            || overlap_pdb.is_some_and(|p| owned_by_us(&p.metadata))
                && matching.iter().any(|p| ours_for(p, &dep_name))
        {
            continue;
        }
        let steps_aside = matching
            .iter()
            .copied()
            .chain(overlap_pdb)
            .any(|p| !owned_by_us(&p.metadata));
        let stays: Vec<_> = if steps_aside {
            matching
                .iter()
                .filter(|p| !ours_for(p, &dep_name))
                .copied()
                .collect()
        } else {
            matching.clone()
        };

        // One EvictionAutoScaler per PDB that protects this Deployment.
        if stays.len() == 1 && !(opted_out && owned_by_us(&stays[0].metadata)) {
            let p = stays[0];
            if let Some(name) = p.metadata.name.clone() {
                let ours = owned_by_us(&p.metadata).then(|| p.metadata.uid.clone());
                wanted_eas.insert(name, (dep_name.clone(), pdb_owner(p), ours.flatten()));
            }
        }

        // Only PDBs of ours made for broader Deployments select these pods
        // (`shop`'s over `api`'s, `shop` admitted first): each is sized for
        // its own Deployment, and would let all of these go at once. They
        // step aside now, and this Deployment gets its own in the next
        // pass (deleted first: never two budgets over a pod), as when both
        // exist; only when that create can be made (floor and pods known,
        // its name free, no other overlap).
        if !matching.is_empty()
            && edited.is_empty()
            && s.pdb_create
            && !opted_out
            && overlap.is_none()
            && floor.is_some()
            && s.pods.is_some()
            && !pdbs_named.contains_key(dep_name.as_str())
            && matching
                .iter()
                .all(|p| broader_ours(p, dep, &dep_name, s.deployments))
        {
            for p in &matching {
                match for_narrower.iter_mut().find(|(q, _)| Arc::ptr_eq(q, p)) {
                    Some((_, asked)) => {
                        asked.insert(dep_name.clone());
                    }
                    None => for_narrower.push((Arc::clone(p), [dep_name.clone()].into())),
                }
            }
        }

        if matching.is_empty() && s.pdb_create && !opted_out {
            if let Some((p, other)) = overlap {
                out.push(Action::SelectorOverlap {
                    deployment: dep_name.clone(),
                    pdb: p.metadata.name.clone().unwrap_or_default(),
                    other,
                });
                // Its EvictionAutoScaler carries the Degraded condition.
                wanted_eas
                    .entry(dep_name.clone())
                    .or_insert_with(|| (dep_name.clone(), owner_reference(dep), None));
                continue;
            }
            match pdbs_named
                .get(dep_name.as_str())
                .and_then(|ps| ps.first())
                .copied()
            {
                // Ours for an earlier Deployment of this name (re-created
                // with another selector after `--cascade=orphan`, which
                // strips owner references): stale, not a conflict. Deleted
                // (UID precondition); the next pass makes the right one.
                Some(p)
                    if ours_for(p, &dep_name)
                        && !pdb::is_ours_for(p, dep)
                        && !p
                            .metadata
                            .owner_references
                            .iter()
                            .flatten()
                            .any(|o| Some(&o.uid) == dep.metadata.uid.as_ref()) =>
                {
                    out.push(Action::DeletePdb {
                        pdb: dep_name.clone(),
                        uid: p.metadata.uid.clone(),
                        why: "made for an earlier Deployment of this name, with another selector",
                    });
                }
                Some(p) if !pdb::is_ours_for(p, dep) => {
                    out.push(Action::NameConflict {
                        deployment: dep_name.clone(),
                        pdb: dep_name.clone(),
                    });
                    // Its EvictionAutoScaler carries the Degraded condition.
                    wanted_eas
                        .entry(dep_name.clone())
                        .or_insert_with(|| (dep_name.clone(), owner_reference(dep), None));
                }
                Some(_) => {}
                // Pods unknown: a PDB now might cover one another protects.
                None if s.pods.is_none() => {}
                // The floor not known yet: made once it is.
                None => {
                    if let Some(floor) = floor {
                        // Our reference comes once the record proves the
                        // PDB ours (`SetOwner`), as for one made at admission.
                        let mut p = owned_pdb(dep, floor);
                        p.metadata.owner_references = None;
                        planned.push((dep, p));
                    }
                }
            }
        }
    }
    // Only where every other Deployment under it gets its own: one that
    // cannot (its name taken, its floor unknown, opted out) keeps it.
    for_narrower.retain(|(p, asked)| {
        let owner = target_of(p).unwrap_or_default();
        s.deployments
            .iter()
            .filter(|d| d.metadata.name.as_deref() != Some(owner))
            .filter(|d| compiled.matching(d).iter().any(|q| Arc::ptr_eq(q, p)))
            .all(|d| d.metadata.name.as_ref().is_some_and(|n| asked.contains(n)))
    });
    if !for_narrower.is_empty() {
        let going = |name: &str| {
            for_narrower
                .iter()
                .any(|(p, _)| p.metadata.name.as_deref() == Some(name))
        };
        out.retain(|a| {
            !matches!(a, Action::SetMinAvailable { pdb, .. } | Action::SetOwner { pdb, .. } if going(pdb))
        });
        for (p, _) in &for_narrower {
            out.push(Action::DeletePdb {
                pdb: p.metadata.name.clone().unwrap_or_default(),
                uid: p.metadata.uid.clone(),
                why: "it covers the pods of a narrower Deployment with no PDB of its own, which \
                      gets its own next (and this one's Deployment reports PDBSelectorOverlap)",
            });
        }
    }
    out.extend(
        one_per_pod(planned, s.pods.unwrap_or_default())
            .into_iter()
            .map(|p| Action::CreatePdb(Box::new(p))),
    );

    // Admission-time PDBs whose Deployment never appeared.
    for p in orphans {
        // Within the grace it may select another workload's pods, and a
        // budget of someone else's over one of them makes two: the
        // apiserver then refuses every eviction of that pod.
        let beside_theirs = || {
            protected.iter().any(|(_, over)| {
                over.iter().any(|q| Arc::ptr_eq(q, p)) && over.iter().any(|q| !Arc::ptr_eq(q, p))
            })
        };
        // Its record, made by a pass that saw the Deployment, says it did
        // appear: deleted since (before our reference was on the PDB, which
        // waits for that record's proof), it is not coming.
        let seen = || {
            s.eas.unwrap_or_default().iter().any(|e| {
                owned_by_us(&e.metadata)
                    && e.metadata.name == p.metadata.name
                    && Some(e.spec.target_name.as_str()) == target_of(p)
                    && p.metadata.uid.is_some()
                    && e.metadata.owner_references.iter().flatten().any(|o| {
                        o.kind == "PodDisruptionBudget" && Some(&o.uid) == p.metadata.uid.as_ref()
                    })
            })
        };
        let why = if seen() {
            "its Deployment was deleted before our owner reference was on it"
        } else if (s.pdb_age_secs)(p) >= s.orphan_grace_secs {
            "its Deployment never appeared"
        } else if beside_theirs() {
            "its Deployment never appeared, and another PDB selects its pods"
        } else {
            continue;
        };
        out.push(Action::DeletePdb {
            pdb: p.metadata.name.clone().unwrap_or_default(),
            uid: p.metadata.uid.clone(),
            why,
        });
    }

    // EvictionAutoScalers unknown: the PDB writes alone (the one-PDB-per-pod
    // rule must not wait for a CRD someone deleted).
    let Some(eas) = s.eas else {
        return out;
    };
    let mut creates = Vec::new();
    let eas_names: HashSet<&str> = eas
        .iter()
        .filter_map(|e| e.metadata.name.as_deref())
        .collect();
    for (name, (target, owner, pdb_uid)) in &wanted_eas {
        let exists = eas_names.contains(name.as_str());
        if !exists {
            creates.push(Action::CreateEas {
                name: name.clone(),
                target: target.clone(),
                owner: owner.clone(),
                pdb_uid: pdb_uid.clone(),
            });
        }
    }
    // EvictionAutoScalers first (see `Action::CreateEas`).
    creates.append(&mut out);
    let mut out = creates;
    // Pods unknown: an overlap seen through pods is missing from this plan,
    // not gone; the EvictionAutoScaler that reports it (and keeps
    // `lastEviction`) stays while its Deployment exists.
    let unsure = |target: &str| s.pods.is_none() && dep_names.contains(target);
    // One being deleted already is not deleted again every pass.
    for e in eas
        .iter()
        .filter(|e| owned_by_us(&e.metadata) && e.metadata.deletion_timestamp.is_none())
    {
        let name = e.metadata.name.clone().unwrap_or_default();
        let target = e.spec.target_name.as_str();
        if !wanted_eas.contains_key(&name) && !waiting.contains(target) && !unsure(target) {
            out.push(Action::DeleteEas {
                name,
                uid: e.metadata.uid.clone(),
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pdb::tests::dep;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn with_uid(mut d: Deployment) -> Arc<Deployment> {
        d.metadata.uid = Some(format!(
            "uid-{}",
            d.metadata.name.clone().unwrap_or_default()
        ));
        Arc::new(d)
    }

    fn user_pdb(name: &str, app: &str) -> Arc<PodDisruptionBudget> {
        let mut p = owned_pdb(&dep(app, 1), 1);
        p.metadata.name = Some(name.into());
        p.metadata.annotations = None;
        p.metadata.uid = Some(format!("pdb-{name}"));
        Arc::new(p)
    }

    struct World {
        in_scope: bool,
        pdb_create: bool,
        deps: Vec<Arc<Deployment>>,
        pdbs: Vec<Arc<PodDisruptionBudget>>,
        hpas: Vec<Arc<HorizontalPodAutoscaler>>,
        keda: BTreeMap<String, i32>,
        eas: Vec<Arc<EvictionAutoScaler>>,
        /// False: the EvictionAutoScaler store is not ready (CRD deleted).
        eas_known: bool,
        keda_unknown: bool,
        pods: Option<Vec<Arc<SlimPod>>>,
        age: i64,
        surging: BTreeSet<String>,
        deleting: BTreeSet<String>,
    }

    impl World {
        fn new() -> Self {
            World {
                in_scope: true,
                pdb_create: true,
                deps: vec![with_uid(dep("web", 3))],
                pdbs: vec![],
                hpas: vec![],
                keda: BTreeMap::new(),
                eas: vec![],
                eas_known: true,
                keda_unknown: false,
                pods: Some(vec![]),
                age: 0,
                surging: BTreeSet::new(),
                deleting: BTreeSet::new(),
            }
        }
        fn plan(&self) -> Vec<Action> {
            self.with_snapshot(plan)
        }

        fn with_snapshot<T>(&self, f: impl FnOnce(&NamespaceSnapshot) -> T) -> T {
            let age = self.age;
            let age_of = move |_: &PodDisruptionBudget| age;
            f(&NamespaceSnapshot {
                name: "ns",
                in_scope: self.in_scope,
                pdb_create: self.pdb_create,
                deployments: &self.deps,
                pdbs: &self.pdbs,
                hpas: &self.hpas,
                keda_min: &self.keda,
                keda_unknown: self.keda_unknown,
                eas: self.eas_known.then_some(self.eas.as_slice()),
                pods: self.pods.as_deref(),
                pdb_age_secs: &age_of,
                orphan_grace_secs: 60,
                surging: &self.surging,
                deleting: &self.deleting,
            })
        }
    }

    fn ours(d: &Deployment, min: i32) -> Arc<PodDisruptionBudget> {
        let mut p = owned_pdb(d, min);
        p.metadata.uid = Some("pdb-uid".into());
        Arc::new(p)
    }

    /// Overlapping selectors: `shop` (selector `app=shop`) covers the pods of
    /// `api` (template `app=shop, role=api`). Never two PDBs over api's pods.
    #[test]
    fn overlapping_selectors_never_make_a_second_pdb() {
        use crate::pdb::tests::labelled;
        let shop_l: &[(&str, &str)] = &[("app", "shop")];
        let api_l: &[(&str, &str)] = &[("app", "shop"), ("role", "api")];
        let api = with_uid(labelled("api", api_l, api_l));
        let shop = with_uid(labelled(
            "shop",
            shop_l,
            &[("app", "shop"), ("role", "web")],
        ));
        let creates = |a: &[Action], name: &str| {
            a.iter().any(
                |x| matches!(x, Action::CreatePdb(p) if p.metadata.name.as_deref() == Some(name)),
            )
        };

        // api's PDB (ours) exists: shop gets none, Degraded names the overlap.
        let mut w = World::new();
        w.deps = vec![api.clone(), shop.clone()];
        w.pdbs = vec![ours(&api, 3)];
        let a = w.plan();
        assert!(!creates(&a, "shop"), "{a:?}");
        assert!(a.contains(&Action::SelectorOverlap {
            deployment: "shop".into(),
            pdb: "api".into(),
            other: "Deployment api".into(),
        }));
        assert!(a
            .iter()
            .any(|x| matches!(x, Action::CreateEas { name, .. } if name == "shop")));

        // The same with the user's PDB over api's pods.
        let mut theirs = (*ours(&api, 2)).clone();
        theirs.metadata.name = Some("api-budget".into());
        theirs.metadata.annotations = None;
        let theirs = Arc::new(theirs);
        w.pdbs = vec![theirs.clone()];
        let a = w.plan();
        assert!(!creates(&a, "shop") && !creates(&a, "api"), "{a:?}");
        assert!(a
            .iter()
            .any(|x| matches!(x, Action::SelectorOverlap { pdb, .. } if pdb == "api-budget")));

        // shop's PDB (ours) came first; the user then protects api: ours
        // steps aside (two PDBs over api's pods otherwise), and is not re-created.
        let mut shop_pdb = (*ours(&shop, 3)).clone();
        shop_pdb.metadata.uid = Some("pdb-shop".into());
        w.pdbs = vec![Arc::new(shop_pdb), theirs.clone()];
        let a = w.plan();
        assert!(
            a.contains(&Action::StepAside {
                pdb: "shop".into(),
                uid: Some("pdb-shop".into()),
                deployment: "shop".into(),
                by: "api-budget".into(),
            }),
            "{a:?}"
        );
        w.pdbs = vec![theirs];
        let a = w.plan();
        assert!(!creates(&a, "shop"), "{a:?}");

        // shop's PDB (ours) came first and covers api's pods: api gets none
        // (it is protected) and nothing steps aside: one PDB over each pod.
        let mut shop_pdb = (*ours(&shop, 3)).clone();
        shop_pdb.metadata.uid = Some("pdb-shop".into());
        w.pdbs = vec![Arc::new(shop_pdb)];
        let a = w.plan();
        assert!(
            !creates(&a, "api")
                && !a.iter().any(|x| matches!(
                    x,
                    Action::StepAside { .. } | Action::SelectorOverlap { .. }
                )),
            "{a:?}"
        );

        // Selectors that do not overlap: each gets its own.
        let other = with_uid(labelled("other", &[("app", "other")], &[("app", "other")]));
        w.deps = vec![api.clone(), other];
        w.pdbs = vec![];
        let a = w.plan();
        assert!(creates(&a, "api") && creates(&a, "other"), "{a:?}");
    }

    /// Never two PDBs of ours over one pod: PDBs planned in the same pass
    /// (a fresh install, a chart applied at once) and pairs of ours that
    /// exist already (two admission webhooks racing, or made before the rule).
    #[test]
    fn overlapping_deployments_get_one_pdb_of_ours_over_each_pod() {
        use crate::pdb::tests::labelled;
        let api_l: &[(&str, &str)] = &[("app", "shop"), ("role", "api")];
        let api = with_uid(labelled("api", api_l, api_l));
        let shop = with_uid(labelled(
            "shop",
            &[("app", "shop")],
            &[("app", "shop"), ("role", "web")],
        ));
        let pdb_of = |d: &Deployment| {
            let mut p = (*ours(d, 3)).clone();
            p.metadata.uid = Some(format!(
                "pdb-{}",
                d.metadata.name.clone().unwrap_or_default()
            ));
            Arc::new(p)
        };

        // Neither has a PDB yet, in either store order: the narrower one is
        // made, the broader waits (next pass: SelectorOverlap, as above).
        let mut w = World::new();
        for deps in [
            vec![api.clone(), shop.clone()],
            vec![shop.clone(), api.clone()],
        ] {
            w.deps = deps;
            let a = w.plan();
            assert_eq!(created(&a), ["api"], "{a:?}");
        }
        // With the narrower one's pods running (the broader selector
        // selects them too), and the broader one's name sorting first: still
        // the narrower is made, not neither.
        let backend = with_uid(labelled(
            "all-shop",
            &[("app", "shop")],
            &[("app", "shop"), ("role", "web")],
        ));
        w.deps = vec![backend, api.clone()];
        w.pods = Some(vec![running_pod("api-1", api_l)]);
        let a = w.plan();
        assert_eq!(created(&a), ["api"], "{a:?}");
        w.pods = World::new().pods;
        w.deps = vec![api.clone(), shop.clone()];

        // Only the broader one's (shop admitted first, over api's pods too,
        // sized for shop's alone): it goes, nothing is made beside it, and
        // the next pass makes api's (a review, session 45: api was left
        // with shop's budget over its pods for good).
        w.pdbs = vec![pdb_of(&shop)];
        let a = w.plan();
        assert_eq!(deleted(&a), ["shop"], "{a:?}");
        assert!(created(&a).is_empty(), "{a:?}");
        assert!(
            !a.iter()
                .any(|x| matches!(x, Action::SetMinAvailable { .. })),
            "{a:?}"
        );
        w.pdbs = vec![];
        assert_eq!(created(&w.plan()), ["api"]);
        // Not while api's own could not be made (its pods unknown), nor for
        // an api opted out: shop's budget is better than none.
        w.pdbs = vec![pdb_of(&shop)];
        let pods = w.pods.take();
        let a = w.plan();
        assert!(deleted(&a).is_empty(), "{a:?}");
        w.pods = pods;
        let mut out_api = (*api).clone();
        out_api
            .metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(crate::names::PDB_CREATE.into(), "false".into());
        w.deps = vec![Arc::new(out_api.clone()), shop.clone()];
        let a = w.plan();
        assert!(deleted(&a).is_empty(), "{a:?}");
        // Nor while another Deployment under it cannot have its own (a
        // review: api alone took shop's budget from `worker`'s pods).
        let worker_l: &[(&str, &str)] = &[("app", "shop"), ("role", "worker")];
        let mut worker = labelled("worker", worker_l, worker_l);
        worker
            .metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(crate::names::PDB_CREATE.into(), "false".into());
        w.deps = vec![api.clone(), shop.clone(), with_uid(worker)];
        let a = w.plan();
        assert!(deleted(&a).is_empty(), "{a:?}");
        // Both can: it goes once.
        w.deps = vec![
            api.clone(),
            shop.clone(),
            with_uid(labelled("worker", worker_l, worker_l)),
        ];
        assert_eq!(deleted(&w.plan()), ["shop"]);
        // Nor one whose selector is not its Deployment's: being set back.
        let mut loose = (*pdb_of(&shop)).clone();
        if let Some(sel) = loose.spec.as_mut().and_then(|sp| sp.selector.as_mut()) {
            sel.match_expressions = Some(vec![
                k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement {
                    key: "tier".into(),
                    operator: "NotIn".into(),
                    values: Some(vec!["batch".into()]),
                },
            ]);
        }
        w.pdbs = vec![Arc::new(loose)];
        w.deps = vec![api.clone(), shop.clone()];
        let a = w.plan();
        assert!(deleted(&a).is_empty(), "{a:?}");
        w.pdbs = vec![pdb_of(&shop)];

        // Both of ours exist already: the broader (shop's, over api's pods
        // too) steps aside for api's; api's stays, and nothing is re-made.
        w.pdbs = vec![pdb_of(&api), pdb_of(&shop)];
        let a = w.plan();
        assert_eq!(stepped_aside(&a), [("shop".into(), "api".into())], "{a:?}");
        assert!(created(&a).is_empty(), "{a:?}");
        w.pdbs = vec![pdb_of(&api)];
        let a = w.plan();
        assert!(
            created(&a).is_empty() && stepped_aside(&a).is_empty(),
            "{a:?}"
        );
        assert!(overlap_for(&a, "shop"), "{a:?}");

        // Two Deployments with the same selector and template: each PDB
        // selects both's pods. One is made; of two existing, the one for the
        // name that sorts first stays, whatever the store order.
        let same: &[(&str, &str)] = &[("app", "twin")];
        let a1 = with_uid(labelled("twin-a", same, same));
        let b1 = with_uid(labelled("twin-b", same, same));
        w.pdbs = vec![];
        for deps in [vec![a1.clone(), b1.clone()], vec![b1.clone(), a1.clone()]] {
            w.deps = deps;
            let a = w.plan();
            assert_eq!(created(&a), ["twin-a"], "{a:?}");
            w.pdbs = vec![pdb_of(&b1), pdb_of(&a1)];
            let a = w.plan();
            assert_eq!(
                stepped_aside(&a),
                [("twin-b".into(), "twin-a".into())],
                "{a:?}"
            );
            // Ours stepping aside for ours: no EvictionAutoScaler named
            // after the other's PDB is planned for the wrong target.
            assert!(
                !a.iter().any(|x| matches!(x, Action::CreateEas { name, target, .. } if name == "twin-a" && target == "twin-b")),
                "{a:?}"
            );
            w.pdbs = vec![pdb_of(&a1)];
            let a = w.plan();
            assert!(
                created(&a).is_empty() && stepped_aside(&a).is_empty(),
                "{a:?}"
            );
            w.pdbs = vec![];
        }
    }

    /// The PDBs a plan creates, by name.
    fn created(a: &[Action]) -> Vec<String> {
        a.iter()
            .filter_map(|x| match x {
                Action::CreatePdb(p) => p.metadata.name.clone(),
                _ => None,
            })
            .collect()
    }

    fn deleted(a: &[Action]) -> Vec<String> {
        a.iter()
            .filter_map(|x| match x {
                Action::DeletePdb { pdb, .. } => Some(pdb.clone()),
                _ => None,
            })
            .collect()
    }

    /// Does the plan report a selector overlap for `dep`?
    fn overlap_for(a: &[Action], dep: &str) -> bool {
        a.iter()
            .any(|x| matches!(x, Action::SelectorOverlap { deployment, .. } if deployment == dep))
    }

    /// The step-asides of a plan: (our PDB, the PDB it steps aside for).
    fn stepped_aside(a: &[Action]) -> Vec<(String, String)> {
        a.iter()
            .filter_map(|x| match x {
                Action::StepAside { pdb, by, .. } => Some((pdb.clone(), by.clone())),
                _ => None,
            })
            .collect()
    }

    fn running_pod(name: &str, labels: &[(&str, &str)]) -> Arc<SlimPod> {
        let wire: crate::cache::PodWire = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "ns",
                "labels": labels.iter().map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect::<BTreeMap<_, _>>()},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
        }))
        .expect("a pod");
        Arc::new(SlimPod::from(&wire))
    }

    /// A Deployment whose selector is broader than its template also
    /// selects pods that are not its own (a StatefulSet's of the same chart,
    /// labels a pod sets at run time). When a PDB protects such a pod, ours
    /// would be a second budget over it: never made, and one made before
    /// steps aside. While the pods are not known, no PDB is made at all.
    #[test]
    fn a_pod_another_pdb_protects_is_never_under_a_second_one() {
        use crate::pdb::tests::labelled;
        let web = with_uid(labelled(
            "web",
            &[("app", "web")],
            &[("app", "web"), ("tier", "fe")],
        ));
        let mut db_pdb = (*user_pdb("db", "x")).clone();
        db_pdb.spec.as_mut().unwrap().selector = Some(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector {
                match_labels: Some([("tier".to_string(), "db".to_string())].into()),
                match_expressions: None,
            },
        );
        let db_pdb = Arc::new(db_pdb);
        let mut w = World::new();
        w.deps = vec![web.clone()];
        w.pdbs = vec![db_pdb.clone()];
        w.pods = Some(vec![
            running_pod("web-1", &[("app", "web"), ("tier", "fe")]),
            running_pod("db-0", &[("app", "web"), ("tier", "db")]),
        ]);
        let a = w.plan();
        assert!(
            !a.iter().any(|x| matches!(x, Action::CreatePdb(_))),
            "{a:?}"
        );
        assert!(
            a.contains(&Action::SelectorOverlap {
                deployment: "web".into(),
                pdb: "db".into(),
                other: "Pod db-0".into(),
            }),
            "{a:?}"
        );
        // Of several such pods, the one of the smallest name, whatever the
        // cache's order (the name is in the Degraded message).
        let one = w.pods.replace(vec![
            running_pod("db-1", &[("app", "web"), ("tier", "db")]),
            running_pod("web-1", &[("app", "web"), ("tier", "fe")]),
            running_pod("db-0", &[("app", "web"), ("tier", "db")]),
        ]);
        assert!(w.plan().iter().any(|x| matches!(x,
            Action::SelectorOverlap { other, .. } if other == "Pod db-0")));
        w.pods = one;
        // Ours made before the db pods came: it steps aside.
        let mut ours_web = (*ours(&web, 1)).clone();
        ours_web.metadata.uid = Some("pdb-web".into());
        w.pdbs = vec![Arc::new(ours_web), db_pdb.clone()];
        let a = w.plan();
        assert!(
            a.contains(&Action::StepAside {
                pdb: "web".into(),
                uid: Some("pdb-web".into()),
                deployment: "web".into(),
                by: "db".into(),
            }),
            "{a:?}"
        );
        // A terminating db pod is leaving: no overlap with it.
        w.pdbs = vec![db_pdb.clone()];
        let mut wire: crate::cache::PodWire = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "db-0", "namespace": "ns",
                "labels": {"app": "web", "tier": "db"},
                "deletionTimestamp": "2026-12-01T00:00:00Z"},
            "status": {"phase": "Running"}
        }))
        .unwrap();
        wire.metadata.namespace = Some("ns".into());
        w.pods = Some(vec![Arc::new(SlimPod::from(&wire))]);
        let a = w.plan();
        assert!(a.iter().any(|x| matches!(x, Action::CreatePdb(_))), "{a:?}");
        // A StatefulSet's terminating pod comes back under its name once
        // gone: still an overlap, or ours would be a second budget over it.
        wire.metadata.owner_references = Some(vec![
            k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
                kind: "StatefulSet".into(),
                name: "db".into(),
                controller: Some(true),
                ..Default::default()
            },
        ]);
        w.pods = Some(vec![Arc::new(SlimPod::from(&wire))]);
        let a = w.plan();
        assert!(
            !a.iter().any(|x| matches!(x, Action::CreatePdb(_))),
            "{a:?}"
        );
        // Pods not known yet (pod cache not ready): nothing is created.
        w.pods = None;
        let a = w.plan();
        assert!(
            !a.iter().any(|x| matches!(x, Action::CreatePdb(_))),
            "{a:?}"
        );
        // Nor is the EvictionAutoScaler deleted that reports the overlap
        // (and keeps `lastEviction`): the overlap is unknown, not gone. It
        // goes with its Deployment.
        w.eas = vec![eas_with_pdb_uid("web", None)];
        let a = w.plan();
        assert!(
            !a.iter().any(|x| matches!(x, Action::DeleteEas { .. })),
            "{a:?}"
        );
        w.deps = Vec::new();
        let a = w.plan();
        assert!(
            a.iter().any(|x| matches!(x, Action::DeleteEas { .. })),
            "its Deployment gone: {a:?}"
        );
        w.deps = vec![web.clone()];
        w.eas = Vec::new();
        // The admission webhook checks the same.
        let pods = vec![running_pod("db-0", &[("app", "web"), ("tier", "db")])];
        assert!(matches!(
            pdb::plan_for_new_deployment(&web, true, true, &[db_pdb], &[], 1, &pods),
            pdb::CreatePlan::Skip(_)
        ));
    }

    /// Two Deployments whose templates do not overlap, and a pod (a Job's)
    /// labelled for both: each of our PDBs covers it. Only the one whose
    /// Deployment sorts after steps aside; once it has, the other stays and
    /// no PDB is made again (both stepping aside made both again, forever).
    #[test]
    fn two_of_ours_over_a_pod_labelled_for_both_settle_on_one() {
        use crate::pdb::tests::labelled;
        let web = with_uid(labelled("web", &[("app", "web")], &[("app", "web")]));
        let pay = with_uid(labelled(
            "payments",
            &[("team", "payments")],
            &[("team", "payments"), ("app", "billing")],
        ));
        let mut w = World::new();
        w.deps = vec![web.clone(), pay.clone()];
        w.pods = Some(vec![
            running_pod("web-1", &[("app", "web")]),
            running_pod("pay-1", &[("team", "payments"), ("app", "billing")]),
            running_pod("migrate-1", &[("app", "web"), ("team", "payments")]),
        ]);
        let uid = |p: Arc<PodDisruptionBudget>, u: &str| {
            let mut p = (*p).clone();
            p.metadata.uid = Some(u.into());
            Arc::new(p)
        };
        let (web_pdb, pay_pdb) = (uid(ours(&web, 1), "pdb-web"), uid(ours(&pay, 1), "pdb-pay"));
        w.pdbs = vec![web_pdb, pay_pdb.clone()];
        let a = w.plan();
        assert_eq!(
            stepped_aside(&a),
            [("web".to_string(), "payments".to_string())],
            "{a:?}"
        );
        w.pdbs = vec![pay_pdb];
        let a = w.plan();
        assert!(
            created(&a).is_empty() && stepped_aside(&a).is_empty(),
            "{a:?}"
        );
        assert!(overlap_for(&a, "web"), "{a:?}");
        // Neither made yet: only payments' is, never both in one pass.
        w.pdbs = vec![];
        let a = w.plan();
        assert_eq!(created(&a), ["payments"], "{a:?}");
        // The pod gone (or completed): both.
        w.pods.as_mut().unwrap().retain(|p| p.name() != "migrate-1");
        let a = w.plan();
        assert_eq!(created(&a).len(), 2, "{a:?}");
    }

    /// A completed pod (a CronJob's history) is deleted without reading any
    /// budget (eviction.go `canIgnorePDB`): no overlap with it.
    #[test]
    fn a_completed_pod_under_another_pdb_is_no_overlap() {
        use crate::pdb::tests::labelled;
        let web = with_uid(labelled(
            "web",
            &[("app", "web")],
            &[("app", "web"), ("tier", "fe")],
        ));
        let mut w = World::new();
        w.deps = vec![web];
        w.pdbs = vec![user_pdb("web-jobs", "web")];
        let pdb = w.pdbs[0].clone();
        let mut p = (*pdb).clone();
        p.spec.as_mut().unwrap().selector = Some(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector {
                match_labels: Some([("tier".to_string(), "job".to_string())].into()),
                match_expressions: None,
            },
        );
        w.pdbs = vec![Arc::new(p)];
        let done: crate::cache::PodWire = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "job-1", "namespace": "ns",
                "labels": {"app": "web", "tier": "job"}},
            "status": {"phase": "Succeeded"}
        }))
        .expect("a pod");
        w.pods = Some(vec![Arc::new(SlimPod::from(&done))]);
        let a = w.plan();
        assert!(a.iter().any(|x| matches!(x, Action::CreatePdb(_))), "{a:?}");
        // Running, it is one: no PDB of ours over it.
        w.pods = Some(vec![running_pod(
            "job-1",
            &[("app", "web"), ("tier", "job")],
        )]);
        let a = w.plan();
        assert!(
            !a.iter().any(|x| matches!(x, Action::CreatePdb(_))),
            "{a:?}"
        );
    }

    #[test]
    fn creates_a_pdb_for_an_unprotected_deployment() {
        let w = World::new();
        let a = w.plan();
        assert!(
            matches!(&a[..], [Action::CreatePdb(p)] if p.metadata.name.as_deref() == Some("web"))
        );
        let mut w = World::new();
        w.pdb_create = false;
        assert!(w.plan().is_empty());
    }

    #[test]
    fn in_sync_world_plans_nothing_but_its_eas() {
        let mut w = World::new();
        w.pdbs = vec![ours(&w.deps[0], 3)];
        let a = w.plan();
        assert_eq!(a.len(), 1, "{a:?}");
        assert!(
            matches!(&a[0], Action::CreateEas { name, target, owner: Some(_), pdb_uid: Some(u) }
                if name == "web" && target == "web" && u == "pdb-uid")
        );
        w.eas = vec![Arc::new(EvictionAutoScaler {
            metadata: ObjectMeta {
                name: Some("web".into()),
                annotations: Some(
                    [(
                        names::OWNED_BY.to_string(),
                        names::OWNED_BY_VALUE.to_string(),
                    )]
                    .into(),
                ),
                ..Default::default()
            },
            spec: Default::default(),
            status: None,
        })];
        assert!(w.plan().is_empty());
    }

    #[test]
    fn follows_replicas_and_autoscaler_minimums() {
        let mut w = World::new();
        w.pdbs = vec![ours(&w.deps[0], 3)];
        w.deps = vec![with_uid(dep("web", 5))];
        assert!(w.plan().contains(&Action::SetMinAvailable {
            pdb: "web".into(),
            min: 5
        }));
        w.keda.insert("web".into(), 2);
        assert!(w.plan().contains(&Action::SetMinAvailable {
            pdb: "web".into(),
            min: 2
        }));
    }

    /// KEDA's ScaledObjects unknown: a Deployment under KEDA's HPA keeps
    /// its PDB's minimum as it is (its floor is its ScaledObject's minimum,
    /// not known), and no PDB is made for it; one budget per pod still holds
    /// for it. The others are planned as usual.
    #[test]
    fn with_scaled_objects_unknown_only_deployments_under_kedas_hpa_wait() {
        let mut w = World::new();
        w.deps = vec![with_uid(dep("web", 5)), with_uid(dep("api", 2))];
        // Ours at 3 (KEDA's minimum); the replicas are 5.
        w.pdbs = vec![ours(&dep("web", 3), 3)];
        let mut e = (*eas_with_pdb_uid("web", Some("pdb-uid"))).clone();
        e.spec.target_name = "web".into();
        w.eas = vec![Arc::new(e)];
        w.hpas = vec![Arc::new(crate::surge::view::kedas_hpa("ns", "web", 3, 9))];
        w.keda_unknown = true;
        let a = w.plan();
        let for_web = |a: &[Action]| {
            a.iter()
                .filter(|a| {
                    matches!(a, Action::SetMinAvailable { pdb, .. } if pdb == "web")
                        || matches!(a, Action::CreatePdb(p) if p.metadata.name.as_deref() == Some("web"))
                })
                .count()
        };
        assert_eq!(for_web(&a), 0, "{a:?}");
        assert!(
            a.iter().any(
                |a| matches!(a, Action::CreatePdb(p) if p.metadata.name.as_deref() == Some("api"))
            ),
            "{a:?}"
        );
        // Without its PDB: none made while the floor is unknown.
        let kept = std::mem::take(&mut w.pdbs);
        assert_eq!(for_web(&w.plan()), 0);
        // A PDB of the user's over web's pods: ours steps aside even so.
        let mut theirs = (*ours(&dep("web", 3), 1)).clone();
        theirs.metadata.name = Some("web-user".into());
        theirs.metadata.annotations = None;
        theirs.metadata.owner_references = None;
        theirs.metadata.uid = Some("user-uid".into());
        w.pdbs = kept.into_iter().chain([Arc::new(theirs)]).collect();
        let a = w.plan();
        assert!(
            a.iter()
                .any(|a| matches!(a, Action::StepAside { pdb, .. } if pdb == "web")),
            "{a:?}"
        );
        w.pdbs.pop();
        // Known again: web is planned, its floor read from its ScaledObject.
        w.keda_unknown = false;
        w.keda.insert("web".into(), 3);
        let a = w.plan();
        assert!(
            a.iter()
                .any(|a| matches!(a, Action::SetOwner { pdb, .. } if pdb == "web"))
                && !a
                    .iter()
                    .any(|a| matches!(a, Action::SetMinAvailable { pdb, .. } if pdb == "web")),
            "{a:?}"
        );
    }

    #[test]
    fn a_surge_left_by_the_go_project_keeps_its_pdb_at_the_recorded_baseline() {
        // The Go project's older versions: `evictionSurgeReplicas` alone on
        // the Deployment at 5, the baseline 3 in its record's status; its PDB
        // (ownedBy) at 3. Not raised to 5 while the surge worker completes
        // the markers; with no record to trust it follows the replicas.
        let mut w = World::new();
        let mut d = dep("web", 5);
        d.metadata.annotations =
            Some([(names::SURGE_REPLICAS.to_string(), "5".to_string())].into());
        w.deps = vec![with_uid(d)];
        let mut p = owned_pdb(&dep("web", 3), 3);
        p.metadata.uid = Some("pdb-uid".into());
        w.pdbs = vec![Arc::new(p)];
        w.eas = vec![crate::markers::tests::record("web", 3, false)];
        let raised = |a: &[Action]| {
            a.iter()
                .any(|a| matches!(a, Action::SetMinAvailable { pdb, min: 5 } if pdb == "web"))
        };
        let a = w.plan();
        assert!(!raised(&a), "{a:?}");
        // The records not listed yet: the PDB is left as it is, and none is
        // made where there is none.
        w.eas_known = false;
        let a = w.plan();
        assert!(!raised(&a), "{a:?}");
        let pdbs = std::mem::take(&mut w.pdbs);
        let a = w.plan();
        assert!(
            !a.iter().any(|a| matches!(a, Action::CreatePdb(_))),
            "{a:?}"
        );
        w.pdbs = pdbs;
        w.eas_known = true;
        w.eas = vec![crate::markers::tests::record("web", 3, true)];
        let a = w.plan();
        assert!(raised(&a), "{a:?}");
    }

    /// The namespace leaves scope before the surge worker has taken over a
    /// surge of the Go project: its PDB (owning the record) and its record
    /// stay until the baseline is written beside the marker, then go.
    #[test]
    fn a_go_surge_not_yet_taken_over_keeps_its_record_out_of_scope() {
        let mut w = World::new();
        w.in_scope = false;
        let mut d = dep("web", 5);
        d.metadata.annotations =
            Some([(names::SURGE_REPLICAS.to_string(), "5".to_string())].into());
        w.deps = vec![with_uid(d.clone())];
        let mut p = owned_pdb(&dep("web", 3), 3);
        p.metadata.uid = Some("pdb-uid".into());
        w.pdbs = vec![Arc::new(p)];
        let mut e = (*crate::markers::tests::record("web", 3, false)).clone();
        e.metadata.annotations = Some(
            [(
                names::OWNED_BY.to_string(),
                names::OWNED_BY_VALUE.to_string(),
            )]
            .into(),
        );
        w.eas = vec![Arc::new(e)];
        let deletes = |a: &[Action]| {
            a.iter()
                .filter(|x| matches!(x, Action::DeletePdb { .. } | Action::DeleteEas { .. }))
                .count()
        };
        let a = w.plan();
        assert_eq!(deletes(&a), 0, "{a:?}");
        // Taken over (the baseline beside the marker): both go.
        if let Some(a) = d.metadata.annotations.as_mut() {
            a.insert(names::ORIGINAL_MIN_REPLICAS.to_string(), "3".to_string());
        }
        w.deps = vec![with_uid(d)];
        let a = w.plan();
        assert_eq!(deletes(&a), 2, "{a:?}");
    }

    #[test]
    fn adds_the_owner_reference_once_the_uid_is_known() {
        let mut w = World::new();
        let mut p = owned_pdb(&dep("web", 3), 3); // admission time: no uid, no owner
        p.metadata.uid = Some("pdb-uid".into());
        w.pdbs = vec![Arc::new(p)];
        // Once the record of its name proves the PDB ours.
        w.eas = vec![eas_with_pdb_uid("web", Some("pdb-uid"))];
        assert!(w
            .plan()
            .iter()
            .any(|a| matches!(a, Action::SetOwner { owner, .. } if owner.uid == "uid-web")));
    }

    #[test]
    fn the_evidence_comes_before_our_owner_reference() {
        let mut w = World::new();
        let mut p = owned_pdb(&dep("web", 3), 3); // admission time: no owner yet
        p.metadata.uid = Some("pdb-uid".into());
        w.pdbs = vec![Arc::new(p)];
        // The record first, and no reference until it holds the PDB's UID
        // (a failed create of it, then a take-over, could never be released).
        let a = w.plan();
        assert!(
            matches!(&a[..], [Action::CreateEas { pdb_uid: Some(u), .. }] if u == "pdb-uid"),
            "{a:?}"
        );
        w.eas = vec![eas_with_pdb_uid("web", None)];
        assert!(
            !w.plan()
                .iter()
                .any(|a| matches!(a, Action::SetOwner { .. })),
            "a record without the proof: {:?}",
            w.plan()
        );
        w.eas = vec![eas_with_pdb_uid("web", Some("other-uid"))];
        assert!(!w
            .plan()
            .iter()
            .any(|a| matches!(a, Action::SetOwner { .. })));
        w.eas = vec![eas_with_pdb_uid("web", Some("pdb-uid"))];
        assert!(w
            .plan()
            .iter()
            .any(|a| matches!(a, Action::SetOwner { .. })));
        w.eas = vec![];
        // A user PDB's EvictionAutoScaler records nothing.
        w.pdbs = vec![user_pdb("mine", "web")];
        assert!(matches!(
            &w.plan()[..],
            [Action::CreateEas { pdb_uid: None, .. }]
        ));
    }

    #[test]
    fn user_pdbs_are_never_touched() {
        let mut w = World::new();
        w.pdbs = vec![user_pdb("mine", "web")];
        w.deps = vec![with_uid(dep("web", 7))];
        let a = w.plan();
        assert!(
            a.iter().all(|a| matches!(a, Action::CreateEas { .. })),
            "{a:?}"
        );
    }

    #[test]
    fn hand_over_and_hand_back() {
        let mut w = World::new();
        let mut p = (*ours(&w.deps[0], 3)).clone();
        p.metadata.annotations = None; // user removed ownedBy
        w.pdbs = vec![Arc::new(p.clone())];
        w.eas = vec![eas_with_pdb_uid("web", Some("pdb-uid"))];
        let a = w.plan();
        assert!(
            a.iter().any(
                |a| matches!(a, Action::ReleaseOwner { deployment, .. } if deployment == "web")
            ),
            "{a:?}"
        );
        assert!(!a
            .iter()
            .any(|a| matches!(a, Action::SetMinAvailable { .. })));
        // Adding it back: ours again, owner restored.
        p.metadata.annotations = Some(
            [(
                names::OWNED_BY.to_string(),
                names::OWNED_BY_VALUE.to_string(),
            )]
            .into(),
        );
        p.metadata.owner_references = None;
        w.pdbs = vec![Arc::new(p)];
        assert!(w
            .plan()
            .iter()
            .any(|a| matches!(a, Action::SetOwner { .. })));
    }

    #[test]
    fn same_name_pdb_with_another_selector_is_a_conflict() {
        let mut w = World::new();
        w.pdbs = vec![user_pdb("web", "something-else")];
        assert!(w.plan().contains(&Action::NameConflict {
            deployment: "web".into(),
            pdb: "web".into()
        }));
    }

    /// Ours, made for an earlier `web` with selector app=web-v1 (deleted
    /// with --cascade=orphan, which strips owner references): stale, not a
    /// conflict for the new `web`. Its selector is set back to the new
    /// Deployment's in place (UID guard). One owned by an earlier Deployment
    /// of the name is deleted with its UID as precondition; then the right
    /// one is made.
    #[test]
    fn a_stale_pdb_of_ours_from_an_earlier_deployment_is_replaced() {
        let mut w = World::new();
        let old = with_uid(dep("web-v1", 3));
        let mut stale = owned_pdb(&old, 3);
        stale.metadata.name = Some("web".into());
        stale.metadata.annotations = Some(
            [
                (
                    names::OWNED_BY.to_string(),
                    names::OWNED_BY_VALUE.to_string(),
                ),
                (names::TARGET.to_string(), "web".to_string()),
            ]
            .into(),
        );
        stale.metadata.owner_references = None;
        stale.metadata.uid = Some("pdb-stale".into());
        w.pdbs = vec![Arc::new(stale.clone())];
        let a = w.plan();
        let set_back = Action::SetSelector {
            pdb: "web".into(),
            uid: Some("pdb-stale".into()),
            from: stale.spec.as_ref().and_then(|s| s.selector.clone()),
            to: w.deps[0].spec.as_ref().map(|s| s.selector.clone()).unwrap(),
        };
        assert!(a.contains(&set_back), "{a:?}");
        assert!(
            !a.iter()
                .any(|x| matches!(x, Action::DeletePdb { .. } | Action::DeleteEas { .. })),
            "{a:?}"
        );
        assert!(
            !a.iter().any(|x| matches!(x, Action::NameConflict { .. })),
            "{a:?}"
        );
        w.pdbs = vec![];
        assert!(w.plan().iter().any(
            |x| matches!(x, Action::CreatePdb(p) if p.metadata.name.as_deref() == Some("web"))
        ));
        // Owned by another Deployment of this name (an earlier UID): stale.
        let mut earlier = stale.clone();
        earlier.metadata.owner_references = crate::pdb::owner_reference(&old).map(|mut o| {
            o.name = "web".into();
            vec![o]
        });
        w.pdbs = vec![Arc::new(earlier)];
        assert!(
            w.plan().contains(&Action::DeletePdb {
                pdb: "web".into(),
                uid: Some("pdb-stale".into()),
                why: "made for an earlier Deployment of this name, with another selector",
            }),
            "{:?}",
            w.plan()
        );
        // Owned by this Deployment (its UID), its selector edited by hand:
        // it may now select pods another PDB protects (two budgets over
        // them) and not its own; set back in place, not left as a name
        // conflict; its EvictionAutoScaler (owned by it) is kept.
        stale.metadata.owner_references = crate::pdb::owner_reference(&w.deps[0]).map(|o| vec![o]);
        w.pdbs = vec![Arc::new(stale.clone())];
        let mut e = (*eas_with_pdb_uid("web", Some("pdb-stale"))).clone();
        e.spec.target_name = "web".into();
        w.eas = vec![Arc::new(e)];
        assert_eq!(w.plan(), vec![set_back]);
        // A copy of it under another name, edited the same: deleted.
        let mut copy = stale.clone();
        copy.metadata.name = Some("web-copy".into());
        copy.metadata.uid = Some("pdb-copy".into());
        w.pdbs = vec![Arc::new(stale), Arc::new(copy)];
        let a = w.plan();
        assert!(
            a.contains(&Action::DeletePdb {
                pdb: "web-copy".into(),
                uid: Some("pdb-copy".into()),
                why: "a copy of ours whose selector is not its Deployment's",
            }),
            "{a:?}"
        );
        assert_eq!(
            a.iter()
                .filter(|x| matches!(x, Action::SetSelector { pdb, .. } if pdb == "web"))
                .count(),
            1,
            "{a:?}"
        );
    }

    /// An edited PDB of ours is set back only where it is then the pods' one
    /// budget: beside a user's PDB over the Deployment's pods (a create
    /// refused as a duplicate of a protected Deployment left it), or for an
    /// opted-out Deployment, it is deleted instead; set back, the pods would
    /// have two budgets until the next pass stepped aside.
    #[test]
    fn an_edited_pdb_of_ours_is_set_back_only_as_the_one_budget() {
        let mut w = World::new();
        let mut edited = owned_pdb(&w.deps[0], 3);
        edited.metadata.uid = Some("pdb-edited".into());
        edited.metadata.owner_references = None;
        if let Some(sel) = edited.spec.as_mut().and_then(|s| s.selector.as_mut()) {
            sel.match_labels = Some([("app".to_string(), "web2".to_string())].into());
            sel.match_expressions = None;
        }
        let deleted = |a: &[Action]| {
            a.contains(&Action::DeletePdb {
                pdb: "web".into(),
                uid: Some("pdb-edited".into()),
                why: "a copy of ours whose selector is not its Deployment's",
            }) && !a.iter().any(|x| matches!(x, Action::SetSelector { .. }))
        };
        w.pdbs = vec![Arc::new(edited.clone())];
        assert!(
            w.plan()
                .iter()
                .any(|x| matches!(x, Action::SetSelector { .. })),
            "alone: set back"
        );
        w.pdbs = vec![Arc::new(edited.clone()), user_pdb("web-user", "web")];
        let a = w.plan();
        assert!(deleted(&a), "beside the user's PDB: {a:?}");
        w.pdbs = vec![Arc::new(edited)];
        let mut d = (*w.deps[0]).clone();
        d.metadata.annotations =
            Some([(names::PDB_CREATE.to_string(), "false".to_string())].into());
        w.deps = vec![Arc::new(d)];
        let a = w.plan();
        assert!(deleted(&a), "opted out: {a:?}");
    }

    /// The Go project's PDB copies the Deployment's matchLabels alone; with
    /// matchExpressions on the Deployment it is set back in place (no moment
    /// without a budget), and its EvictionAutoScaler, owned by it and
    /// holding the Go project's record, is not deleted.
    #[test]
    fn the_go_projects_matchlabels_only_pdb_is_set_back_in_place() {
        let mut w = World::new();
        let d = w.deps[0].clone();
        let mut go = owned_pdb(&d, 3);
        go.metadata.uid = Some("go-uid".into());
        if let Some(sel) = go.spec.as_mut().and_then(|s| s.selector.as_mut()) {
            sel.match_expressions = None;
        }
        w.pdbs = vec![Arc::new(go)];
        let mut e = (*eas_with_pdb_uid("web", None)).clone();
        e.spec.target_name = "web".into();
        w.eas = vec![Arc::new(e)];
        let a = w.plan();
        assert!(
            a.iter()
                .any(|x| matches!(x, Action::SetSelector { pdb, .. } if pdb == "web")),
            "{a:?}"
        );
        assert!(
            !a.iter()
                .any(|x| matches!(x, Action::DeletePdb { .. } | Action::DeleteEas { .. })),
            "{a:?}"
        );
    }

    #[test]
    fn the_same_selector_with_empty_parts_absent() {
        let sel = |labels: Option<Vec<(&str, &str)>>, exprs: Option<usize>| LabelSelector {
            match_labels: labels.map(|l| {
                l.into_iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect()
            }),
            match_expressions: exprs.map(|n| {
                (0..n)
                    .map(|i| {
                        k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement {
                            key: format!("k{i}"),
                            operator: "Exists".into(),
                            values: None,
                        }
                    })
                    .collect()
            }),
        };
        let app = sel(Some(vec![("app", "web")]), None);
        assert!(same_selector(
            Some(&app),
            Some(&sel(Some(vec![("app", "web")]), Some(0)))
        ));
        assert!(!same_selector(
            Some(&app),
            Some(&sel(Some(vec![("app", "api")]), None))
        ));
        assert!(!same_selector(
            Some(&app),
            Some(&sel(Some(vec![("app", "web")]), Some(1)))
        ));
        assert!(same_selector(None, Some(&sel(Some(vec![]), Some(0)))));
        assert!(!same_selector(None, Some(&app)));
    }

    #[test]
    fn opt_out_and_scope_cleanup() {
        let mut w = World::new();
        let mut d = dep("web", 3);
        d.metadata.annotations =
            Some([(names::PDB_CREATE.to_string(), "false".to_string())].into());
        w.deps = vec![with_uid(d)];
        assert!(w.plan().is_empty());
        w.pdbs = vec![ours(&w.deps[0], 3)];
        assert!(w.plan().iter().any(|a| matches!(
            a,
            Action::DeletePdb {
                why: "deployment opted out",
                ..
            }
        )));

        let mut w = World::new();
        w.in_scope = false;
        w.pdbs = vec![ours(&w.deps[0], 3), user_pdb("user", "web")];
        let a = w.plan();
        assert_eq!(a.len(), 1, "only ours goes: {a:?}");
        assert!(matches!(&a[0], Action::DeletePdb { pdb, .. } if pdb == "web"));
        // Our EvictionAutoScaler goes too, with its UID as precondition.
        let mut e = (*eas_with_pdb_uid("web", None)).clone();
        e.metadata.uid = Some("eas-uid".into());
        w.eas = vec![Arc::new(e)];
        let a = w.plan();
        assert!(
            a.contains(&Action::DeleteEas {
                name: "web".into(),
                uid: Some("eas-uid".into()),
            }),
            "{a:?}"
        );
    }

    #[test]
    fn orphaned_admission_pdbs_go_after_the_grace_period() {
        let mut w = World::new();
        w.deps.clear();
        w.pdbs = vec![Arc::new(owned_pdb(&dep("ghost", 3), 3))];
        w.age = 10;
        assert!(w.plan().is_empty());
        // Nothing to do now, but its grace ends without a watch event: the
        // resync must not leave the namespace out as settled.
        assert!(w.with_snapshot(waits_on_the_clock));
        // Its Deployment made: ours is adopted (a write), and then no rule
        // waits on the clock.
        w.deps = vec![with_uid(dep("ghost", 3))];
        assert!(!w.with_snapshot(waits_on_the_clock));
        w.deps.clear();
        w.age = 61;
        // Its Deployment being deleted (held by a finalizer, its pods
        // still running): garbage collection's to take, not an orphan.
        w.deleting = ["ghost".to_string()].into();
        assert!(w.plan().is_empty(), "{:?}", w.plan());
        w.deleting.clear();
        assert!(matches!(
            &w.plan()[..],
            [Action::DeletePdb {
                why: "its Deployment never appeared",
                ..
            }]
        ));
        // Within the grace, over a running pod another PDB selects too
        // (two budgets: every eviction of it refused): it goes at once,
        // beside one of ours as beside a user's.
        w.age = 10;
        w.pods = Some(vec![running_pod("ghost-1", &[("app", "ghost")])]);
        let mut mine = owned_pdb(&dep("ghost", 3), 3);
        mine.metadata.name = Some("ghost-too".into());
        mine.metadata.owner_references = Some(vec![
            k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
                kind: "Deployment".into(),
                name: "web".into(),
                controller: Some(true),
                ..Default::default()
            },
        ]);
        w.pdbs.push(Arc::new(mine));
        let a = w.plan();
        assert!(
            a.iter().any(|x| matches!(x, Action::DeletePdb {
                pdb,
                why: "its Deployment never appeared, and another PDB selects its pods",
                ..
            } if pdb == "ghost")),
            "{a:?}"
        );
        w.pdbs.pop();
        w.pods = None;
        w.age = 10;
        w.pods = Some(vec![running_pod("ghost-1", &[("app", "ghost")])]);
        assert!(w.plan().is_empty(), "no other budget over its pod");
        w.pdbs.push(user_pdb("theirs", "ghost"));
        assert!(matches!(
            &w.plan()[..],
            [Action::DeletePdb {
                why: "its Deployment never appeared, and another PDB selects its pods",
                ..
            }]
        ));
        // Not for a pod that has ended.
        let done: crate::cache::PodWire = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "ghost-1", "namespace": "ns", "labels": {"app": "ghost"}},
            "status": {"phase": "Succeeded"}
        }))
        .expect("a pod");
        w.pods = Some(vec![Arc::new(SlimPod::from(&done))]);
        assert!(w.plan().is_empty());
    }

    /// A PDB made at admission whose Deployment a pass saw (its record,
    /// owned by it, was made) and that was deleted before our reference was
    /// on the PDB (that waits for the record's proof): gone at once, not
    /// after the grace for one whose Deployment never appeared (e2e
    /// `deployment_deleted_mid_surge_leaves_nothing_of_ours`, session 45).
    #[test]
    fn a_pdb_whose_deployment_was_seen_and_deleted_goes_at_once() {
        let mut w = World::new();
        w.deps.clear();
        let mut p = owned_pdb(&dep("ghost", 3), 3);
        p.metadata.uid = Some("pdb-ghost".into());
        w.pdbs = vec![Arc::new(p)];
        w.age = 10;
        let record = |owner_uid: &str| {
            let mut e = (*eas_with_pdb_uid("ghost", None)).clone();
            e.metadata.owner_references = Some(vec![
                k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
                    kind: "PodDisruptionBudget".into(),
                    name: "ghost".into(),
                    uid: owner_uid.into(),
                    ..Default::default()
                },
            ]);
            Arc::new(e)
        };
        w.eas = vec![record("pdb-ghost")];
        let why = w.plan().iter().find_map(|x| match x {
            Action::DeletePdb { pdb, why, .. } if pdb == "ghost" => Some(*why),
            _ => None,
        });
        assert_eq!(
            why,
            Some("its Deployment was deleted before our owner reference was on it")
        );
        // A record of an earlier PDB under the name proves nothing of this one.
        w.eas = vec![record("pdb-earlier")];
        assert!(deleted(&w.plan()).is_empty());
        // Its Deployment being deleted: garbage collection's, as before.
        w.eas = vec![record("pdb-ghost")];
        w.deleting = ["ghost".to_string()].into();
        assert!(deleted(&w.plan()).is_empty());
    }

    /// An admission-time orphan of ours (`aaa`, no Deployment) over a pod
    /// of `web` through the pod's own labels, beside web's own PDB: the
    /// orphan goes in this pass, web's PDB does not step aside for it (that
    /// would leave the pod with no budget until the next pass).
    #[test]
    fn our_pdb_does_not_step_aside_for_an_orphan_that_goes() {
        let mut w = World::new();
        let web = w.deps[0].clone();
        let mut mine = (*ours(&web, 3)).clone();
        mine.metadata.owner_references = Some(vec![
            k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
                kind: "Deployment".into(),
                name: "web".into(),
                uid: web.metadata.uid.clone().unwrap_or_default(),
                controller: Some(true),
                ..Default::default()
            },
        ]);
        // Over `app=web, job=x`: not web's template, but its pod's labels.
        let mut orphan = owned_pdb(&dep("aaa", 3), 3);
        orphan.metadata.uid = Some("orphan-uid".into());
        if let Some(sel) = orphan.spec.as_mut().and_then(|s| s.selector.as_mut()) {
            sel.match_labels = Some(
                [("app", "web"), ("job", "x")]
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .into(),
            );
            sel.match_expressions = None;
        }
        w.pdbs = vec![Arc::new(mine), Arc::new(orphan)];
        w.pods = Some(vec![running_pod("web-1", &[("app", "web"), ("job", "x")])]);
        w.age = 10;
        let a = w.plan();
        assert!(
            a.iter()
                .any(|x| matches!(x, Action::DeletePdb { pdb, .. } if pdb == "aaa")),
            "the orphan goes: {a:?}"
        );
        assert!(stepped_aside(&a).is_empty(), "web's stays: {a:?}");
    }

    fn eas_with_pdb_uid(name: &str, uid: Option<&str>) -> Arc<EvictionAutoScaler> {
        Arc::new(EvictionAutoScaler {
            metadata: ObjectMeta {
                name: Some(name.into()),
                annotations: Some(
                    [(
                        names::OWNED_BY.to_string(),
                        names::OWNED_BY_VALUE.to_string(),
                    )]
                    .into(),
                ),
                ..Default::default()
            },
            // Ours are named after their Deployment.
            spec: crate::crd::EvictionAutoScalerSpec {
                target_name: name.into(),
                ..Default::default()
            },
            status: Some(crate::crd::EvictionAutoScalerStatus {
                pdb_uid: uid.map(str::to_string),
                ..Default::default()
            }),
        })
    }

    /// A record of ours the Go project marked (`surge-revert`, and a
    /// finalizer of someone else), deleted with its Deployment and PDB: its
    /// finalizer goes once no marker of a surge is left, and it is not
    /// deleted again every pass meanwhile.
    #[test]
    fn a_deleted_record_sheds_the_go_projects_finalizer_once_its_surge_is_reverted() {
        use crate::finalizers::SURGE_REVERT;
        let mut w = World::new();
        w.deps = vec![];
        let mut e = (*eas_with_pdb_uid("web", Some("pdb-uid"))).clone();
        e.metadata.finalizers = Some(vec![SURGE_REVERT.into(), "example.com/keep".into()]);
        e.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
        ));
        w.eas = vec![Arc::new(e)];
        w.surging = ["web".to_string()].into();
        assert!(w.plan().is_empty(), "a marker left: {:?}", w.plan());
        w.surging.clear();
        let a = w.plan();
        assert!(
            matches!(&a[..], [Action::ReleaseFinalizers { remove, .. }] if remove == &[SURGE_REVERT.to_string()]),
            "{a:?}"
        );
        // Out of scope too (no DeleteEas of it either).
        w.in_scope = false;
        let a = w.plan();
        assert!(
            matches!(&a[..], [Action::ReleaseFinalizers { .. }]),
            "{a:?}"
        );
    }

    /// A chart's PDB: its own name, labels and annotations, a controller
    /// reference to the Deployment, no `ownedBy`.
    fn helm_pdb(d: &Deployment) -> Arc<PodDisruptionBudget> {
        let mut p = (*user_pdb("web-chart", "web")).clone();
        p.metadata.annotations =
            Some([("meta.helm.sh/release-name".to_string(), "web".to_string())].into());
        p.metadata.labels = Some(
            [(
                "app.kubernetes.io/managed-by".to_string(),
                "Helm".to_string(),
            )]
            .into(),
        );
        p.metadata.owner_references = owner_reference(d).map(|o| vec![o]);
        Arc::new(p)
    }

    #[test]
    fn helm_pdb_with_a_controller_reference_is_never_touched() {
        let mut w = World::new();
        w.pdbs = vec![helm_pdb(&w.deps[0])];
        let a = w.plan();
        assert!(
            a.iter().all(|a| matches!(a, Action::CreateEas { .. })),
            "{a:?}"
        );
        // Even with an EvictionAutoScaler of that name whose status names
        // another PDB (or none).
        w.eas = vec![eas_with_pdb_uid("web-chart", None)];
        assert!(w.plan().is_empty(), "{:?}", w.plan());
        w.eas = vec![eas_with_pdb_uid("web-chart", Some("pdb-other"))];
        assert!(w.plan().is_empty(), "{:?}", w.plan());
    }

    /// The hand-over in the same edit as a new selector (the PDB no longer
    /// selects the Deployment's pods), or with the namespace leaving scope:
    /// our reference still goes, and the EvictionAutoScaler holding the
    /// evidence is not deleted before it has.
    #[test]
    fn a_pdb_handed_over_is_released_whatever_it_selects_or_the_scope() {
        let mut w = World::new();
        let mut p = (*ours(&w.deps[0], 3)).clone();
        p.metadata.annotations = None;
        w.eas = vec![eas_with_pdb_uid("web", Some("pdb-uid"))];
        let release = Action::ReleaseOwner {
            pdb: "web".into(),
            uid: Some("pdb-uid".into()),
            deployment: "web".into(),
        };
        let mut canary = p.clone();
        canary.spec.as_mut().unwrap().selector = Some(LabelSelector {
            match_labels: Some([("app".to_string(), "web-canary".to_string())].into()),
            ..Default::default()
        });
        w.pdbs = vec![Arc::new(canary)];
        let a = w.plan();
        assert!(a.contains(&release), "{a:?}");
        assert!(
            !a.iter().any(|a| matches!(a, Action::DeleteEas { .. })),
            "{a:?}"
        );
        w.pdbs = vec![Arc::new(p.clone())];
        w.in_scope = false;
        let a = w.plan();
        assert_eq!(a, vec![release], "the EvictionAutoScaler waits");
        // Released: now it goes.
        p.metadata.owner_references = None;
        w.pdbs = vec![Arc::new(p)];
        assert!(
            matches!(&w.plan()[..], [Action::DeleteEas { name, .. }] if name == "web"),
            "{:?}",
            w.plan()
        );
    }

    #[test]
    fn only_a_pdb_we_once_owned_is_released() {
        let mut w = World::new();
        let mut p = (*ours(&w.deps[0], 3)).clone();
        p.metadata.annotations = None; // user removed ownedBy
        w.pdbs = vec![Arc::new(p.clone())];
        // The evidence: our EvictionAutoScaler recorded this PDB's UID.
        w.eas = vec![eas_with_pdb_uid("web", Some("pdb-uid"))];
        let a = w.plan();
        assert!(
            a.iter().any(
                |a| matches!(a, Action::ReleaseOwner { deployment, .. } if deployment == "web")
            ),
            "{a:?}"
        );
        // A recreated PDB of the same name (another UID) was never ours.
        w.eas = vec![eas_with_pdb_uid("web", Some("pdb-older"))];
        assert!(w.plan().is_empty(), "{:?}", w.plan());
        // Other references are kept.
        let mut p2 = p.clone();
        let extra = OwnerReference {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            name: "cm".into(),
            uid: "cm-uid".into(),
            ..Default::default()
        };
        p2.metadata
            .owner_references
            .get_or_insert_with(Vec::new)
            .push(extra.clone());
        w.pdbs = vec![Arc::new(p2.clone())];
        w.eas = vec![eas_with_pdb_uid("web", Some("pdb-uid"))];
        assert!(w.plan().contains(&Action::ReleaseOwner {
            pdb: "web".into(),
            uid: Some("pdb-uid".into()),
            deployment: "web".into(),
        }));
        // As the release writes them: only our reference goes.
        let refs = p2.metadata.owner_references.clone().unwrap_or_default();
        assert_eq!(released_references(&refs, "web"), Some(vec![extra.clone()]));
        assert_eq!(
            released_references(&[extra], "web"),
            None,
            "nothing to drop"
        );
    }

    /// The EvictionAutoScaler store not ready (its CRD deleted): the PDB
    /// rules still hold, and nothing that needs an EvictionAutoScaler is
    /// planned, neither its writes nor a release (whose evidence it holds).
    #[test]
    fn without_eviction_autoscalers_the_pdbs_are_still_kept() {
        let mut w = World::new();
        w.eas_known = false;
        w.eas = vec![eas_with_pdb_uid("web", Some("pdb-uid"))];
        let eas_action =
            |a: &Action| matches!(a, Action::CreateEas { .. } | Action::DeleteEas { .. });
        // No PDB: ours is created, no EvictionAutoScaler with it.
        assert!(
            matches!(&w.plan()[..], [Action::CreatePdb(_)]),
            "{:?}",
            w.plan()
        );
        // A user's PDB comes: ours steps aside, theirs gets no EvictionAutoScaler yet.
        w.pdbs = vec![ours(&w.deps[0], 3), user_pdb("team", "web")];
        let a = w.plan();
        assert!(
            a.iter()
                .any(|a| matches!(a, Action::StepAside { by, .. } if by == "team")),
            "{a:?}"
        );
        assert!(!a.iter().any(eas_action), "{a:?}");
        // The floor follows the replicas.
        w.pdbs = vec![ours(&w.deps[0], 2)];
        assert_eq!(
            w.plan(),
            vec![Action::SetMinAvailable {
                pdb: "web".into(),
                min: 3
            }]
        );
        // A PDB handed over (ownedBy removed): kept as is until the
        // evidence can be read.
        let mut p = (*ours(&w.deps[0], 3)).clone();
        p.metadata.annotations = None;
        w.pdbs = vec![Arc::new(p)];
        assert!(w.plan().is_empty(), "{:?}", w.plan());
        w.eas_known = true;
        assert!(
            w.plan()
                .iter()
                .any(|a| matches!(a, Action::ReleaseOwner { .. })),
            "{:?}",
            w.plan()
        );
        // Out of scope: ours is deleted, the EvictionAutoScaler waits.
        w.eas_known = false;
        w.in_scope = false;
        w.pdbs = vec![ours(&w.deps[0], 3)];
        let a = w.plan();
        assert!(
            matches!(&a[..], [Action::DeletePdb { why, .. }] if *why == "namespace left scope"),
            "{a:?}"
        );
        w.eas_known = true;
        // Known again: the record that proves the PDB ours waits for it (a
        // failed delete and a take-over meanwhile could not be released
        // without it), then goes.
        assert!(!w.plan().iter().any(eas_action), "{:?}", w.plan());
        w.pdbs = vec![];
        assert!(w.plan().iter().any(eas_action), "{:?}", w.plan());
    }

    #[test]
    fn our_pdb_steps_aside_for_a_user_pdb() {
        let mut w = World::new();
        w.pdbs = vec![ours(&w.deps[0], 3), user_pdb("team", "web")];
        let a = w.plan();
        assert!(
            a.contains(&Action::StepAside {
                pdb: "web".into(),
                uid: Some("pdb-uid".into()),
                deployment: "web".into(),
                by: "team".into(),
            }),
            "{a:?}"
        );
        assert!(
            !a.iter().any(|a| matches!(
                a,
                Action::SetMinAvailable { .. } | Action::SetOwner { .. } | Action::CreatePdb(_)
            )),
            "{a:?}"
        );
        // Their PDB gets the EvictionAutoScaler; ours (the step-aside one) does not.
        assert!(
            a.iter()
                .any(|a| matches!(a, Action::CreateEas { name, .. } if name == "team")),
            "{a:?}"
        );
        // A Helm PDB with a controller reference counts as theirs too.
        w.pdbs = vec![ours(&w.deps[0], 3), helm_pdb(&w.deps[0])];
        assert!(w
            .plan()
            .iter()
            .any(|a| matches!(a, Action::StepAside { by, .. } if by == "web-chart")));
        // Theirs gone: ours comes back.
        w.pdbs = vec![];
        assert!(matches!(&w.plan()[..], [Action::CreatePdb(_)]));
    }

    #[test]
    fn a_copy_of_our_pdb_is_deleted_so_one_budget_stays() {
        // Someone copied ours under another name, annotations and all.
        let mut w = World::new();
        let mut copy = (*ours(&w.deps[0], 3)).clone();
        copy.metadata.name = Some("web-copy".into());
        copy.metadata.uid = Some("copy-uid".into());
        w.pdbs = vec![Arc::new(copy), ours(&w.deps[0], 3)];
        let a = w.plan();
        assert!(
            a.contains(&Action::DeletePdb {
                pdb: "web-copy".into(),
                uid: Some("copy-uid".into()),
                why: "a second PDB of ours over the same pods",
            }),
            "{a:?}"
        );
        assert!(
            !a.iter()
                .any(|a| matches!(a, Action::DeletePdb { pdb, .. } if pdb == "web")),
            "{a:?}"
        );
    }

    #[test]
    fn hand_back_restores_the_owner() {
        let mut w = World::new();
        let mut p = (*ours(&w.deps[0], 3)).clone();
        p.metadata.owner_references = None;
        w.pdbs = vec![Arc::new(p)];
        w.eas = vec![eas_with_pdb_uid("web", Some("pdb-uid"))];
        assert!(w
            .plan()
            .iter()
            .any(|a| matches!(a, Action::SetOwner { pdb, .. } if pdb == "web")));
    }
}
