//! Owned PDBs (behaviour.md section 3): what we create for a Deployment and
//! the pure checks around it.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::budget::{Selector, SelectorIndex};
use crate::cache::owned_by_us;
use crate::markers::Markers;
use crate::names;

/// The Deployment's pod-template labels (what PDB selectors are matched against).
pub fn template_labels(dep: &Deployment) -> BTreeMap<String, String> {
    template_labels_of(dep).cloned().unwrap_or_default()
}

/// PDBs in the Deployment's namespace that select its pods.
pub fn matching_pdbs<'a>(
    dep: &Deployment,
    pdbs: &'a [Arc<PodDisruptionBudget>],
) -> Vec<&'a Arc<PodDisruptionBudget>> {
    CompiledPdbs::new(pdbs).matching(dep)
}

/// The PDBs over `dep`'s running pods by the pods' own labels. For a
/// Deployment whose template no PDB selects: pods may carry labels their
/// template lacks (a service mesh injects its own; a rollout that changed
/// the template leaves the old pods' labels), and the apiserver picks a
/// pod's budget by the pod's labels, as `pod_overlap` does for the
/// reconciler.
pub fn pdbs_over_pods<'a>(
    dep: &Deployment,
    pdbs: &'a [Arc<PodDisruptionBudget>],
    pods: &[Arc<crate::cache::SlimPod>],
) -> Vec<&'a Arc<PodDisruptionBudget>> {
    let (Some(ns), Ok(ours)) = (
        dep.metadata.namespace.as_deref(),
        Selector::compile(dep.spec.as_ref().map(|s| &s.selector)),
    ) else {
        return Vec::new();
    };
    let name = dep.metadata.name.as_deref().unwrap_or_default();
    // The Deployment's own pods: its selector may also cover another
    // workload's (a StatefulSet of the same chart), whose PDB is not its.
    // Its ReplicaSets are named after it and the pod-template hash.
    let owned = |p: &crate::cache::SlimPod| p.of_deployment(name) == Some(true);
    let compiled = CompiledPdbs::new(pdbs);
    let mut found: Vec<&'a Arc<PodDisruptionBudget>> = Vec::new();
    for p in pods.iter().filter(|p| {
        p.namespace() == ns
            && !p.is_terminating()
            && !p.is_completed()
            && ours.selects_for_eviction(p.labels())
            && owned(p)
    }) {
        for pdb in compiled.selecting(ns, p.labels()) {
            if !found.iter().any(|f| Arc::ptr_eq(f, pdb)) {
                found.push(pdb);
            }
        }
    }
    found
}

/// PDBs with their selectors compiled once, for a pass that matches every
/// Deployment of a namespace against every PDB (compiling per pair was the
/// bulk of an idle replica's CPU at 2,000 Deployments, per the profile in
/// BENCHMARKS.md), and indexed by the label each requires
/// ([`SelectorIndex`]), so a lookup tests the few PDBs that may select the
/// labels, not all (a namespace's plan looks up each of its Deployments and
/// pods). An invalid selector
/// selects nothing, as in `eviction.go`.
pub struct CompiledPdbs<'a> {
    pdbs: Vec<(&'a Arc<PodDisruptionBudget>, Option<Selector>)>,
    index: SelectorIndex,
}

impl<'a> CompiledPdbs<'a> {
    pub fn new(pdbs: &'a [Arc<PodDisruptionBudget>]) -> CompiledPdbs<'a> {
        let pdbs: Vec<_> = pdbs
            .iter()
            .map(|p| {
                let sel = p.spec.as_ref().and_then(|s| s.selector.as_ref());
                (p, Selector::compile(sel).ok())
            })
            .collect();
        let index = SelectorIndex::new(pdbs.iter().map(|(_, s)| s.as_ref()));
        CompiledPdbs { pdbs, index }
    }

    /// The PDBs of `ns` whose selector selects these labels (a pod's), in
    /// the order of the list they were compiled from.
    pub fn selecting<L: crate::budget::LabelSet + ?Sized>(
        &self,
        ns: &str,
        labels: &L,
    ) -> Vec<&'a Arc<PodDisruptionBudget>> {
        self.selecting_in(Some(ns), labels)
    }

    /// [`Self::selecting`] for the PDBs whose namespace is `ns` (None: the
    /// PDBs of no namespace, as a Deployment of none compares).
    fn selecting_in<L: crate::budget::LabelSet + ?Sized>(
        &self,
        ns: Option<&str>,
        labels: &L,
    ) -> Vec<&'a Arc<PodDisruptionBudget>> {
        self.index
            .candidates(labels)
            .into_iter()
            .map(|i| &self.pdbs[i])
            .filter(|(p, _)| p.metadata.namespace.as_deref() == ns)
            .filter(|(_, s)| s.as_ref().is_some_and(|s| s.selects_for_eviction(labels)))
            .map(|(p, _)| *p)
            .collect()
    }

    /// [`matching_pdbs`] over the compiled selectors.
    pub fn matching(&self, dep: &Deployment) -> Vec<&'a Arc<PodDisruptionBudget>> {
        let empty = BTreeMap::new();
        let labels = template_labels_of(dep).unwrap_or(&empty);
        self.selecting_in(dep.metadata.namespace.as_deref(), labels)
    }
}

/// The pod-template labels of a Deployment, borrowed.
fn template_labels_of(dep: &Deployment) -> Option<&BTreeMap<String, String>> {
    dep.spec
        .as_ref()
        .and_then(|s| s.template.metadata.as_ref())
        .and_then(|m| m.labels.as_ref())
}

/// Positions of labelled items (Deployments' pod templates, pods) by each
/// of their labels: the candidates a selector may select are those carrying
/// the label it requires, so a namespace's plan tests each selector against
/// a few items, not all.
struct LabelIndex<'a> {
    by_label: HashMap<&'a str, HashMap<&'a str, Vec<usize>>>,
    len: usize,
}

impl<'a> LabelIndex<'a> {
    fn new<I, L>(items: I) -> LabelIndex<'a>
    where
        I: IntoIterator<Item = L>,
        L: IntoIterator<Item = (&'a str, &'a str)>,
    {
        let mut by_label: HashMap<&'a str, HashMap<&'a str, Vec<usize>>> = HashMap::new();
        let mut len = 0;
        for (i, labels) in items.into_iter().enumerate() {
            len = i + 1;
            for (k, v) in labels {
                by_label.entry(k).or_default().entry(v).or_default().push(i);
            }
        }
        LabelIndex { by_label, len }
    }

    /// The positions, ascending, of the items `sel` may select: those that
    /// carry its required label, else all. Each is still to be tested.
    fn candidates(&self, sel: &Selector) -> std::borrow::Cow<'_, [usize]> {
        match (sel, sel.required_label()) {
            (Selector::Nothing, _) => std::borrow::Cow::Borrowed(&[]),
            (_, Some((k, v))) => std::borrow::Cow::Borrowed(
                self.by_label
                    .get(k)
                    .and_then(|m| m.get(v))
                    .map_or(&[][..], Vec::as_slice),
            ),
            (_, None) => std::borrow::Cow::Owned((0..self.len).collect()),
        }
    }
}

/// A namespace's Deployments indexed by their pod-template labels (for
/// [`overlapping`]).
pub struct Templates<'a> {
    deployments: &'a [Arc<Deployment>],
    index: LabelIndex<'a>,
}

impl<'a> Templates<'a> {
    pub fn new(deployments: &'a [Arc<Deployment>]) -> Templates<'a> {
        let index = LabelIndex::new(deployments.iter().map(|d| {
            template_labels_of(d)
                .into_iter()
                .flatten()
                .map(|(k, v)| (k.as_str(), v.as_str()))
        }));
        Templates { deployments, index }
    }

    /// The Deployments whose pod template `sel` may select, in list order.
    fn candidates<'s>(&'s self, sel: &Selector) -> impl Iterator<Item = &'a Arc<Deployment>> + 's {
        let at = self.index.candidates(sel);
        (0..at.len()).map(move |i| &self.deployments[at[i]])
    }
}

/// The HPA targeting this Deployment, if any.
pub fn hpa_for<'a>(
    dep: &Deployment,
    hpas: &'a [Arc<HorizontalPodAutoscaler>],
) -> Option<&'a Arc<HorizontalPodAutoscaler>> {
    let name = dep.metadata.name.as_deref()?;
    // Of two (a misconfiguration the HPA controller refuses to act on), the
    // first by name: the caches' order changes with the process.
    hpas.iter()
        .filter(|h| {
            h.metadata.namespace == dep.metadata.namespace
                && h.spec.as_ref().is_some_and(|s| {
                    s.scale_target_ref.kind == "Deployment" && s.scale_target_ref.name == name
                })
        })
        .min_by_key(|h| h.metadata.name.as_deref())
}

/// Replicas not counting our own surge: the persisted baseline when a surge
/// marker is present, else `spec.replicas` (default 1).
pub fn baseline_replicas(dep: &Deployment) -> i32 {
    let current = dep.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
    Markers::baseline_or(dep.metadata.annotations.as_ref(), current)
}

/// The floor the PDB keeps: the autoscaler minimum (its persisted baseline
/// while we surge it) when one targets the Deployment, else the replicas.
pub fn min_available_for(dep: &Deployment, hpa: Option<&HorizontalPodAutoscaler>) -> i32 {
    match hpa {
        Some(h) => {
            let current = h.spec.as_ref().and_then(|s| s.min_replicas).unwrap_or(1);
            Markers::baseline_or(h.metadata.annotations.as_ref(), current)
        }
        None => baseline_replicas(dep),
    }
}

pub fn owner_reference(dep: &Deployment) -> Option<OwnerReference> {
    Some(OwnerReference {
        api_version: "apps/v1".into(),
        kind: "Deployment".into(),
        name: dep.metadata.name.clone()?,
        uid: dep.metadata.uid.clone()?,
        controller: Some(true),
        block_owner_deletion: Some(true),
    })
}

/// The PDB we own for a Deployment. Without a UID (admission time) it has no
/// ownerReference yet; the reconciler adds it once the Deployment exists.
pub fn owned_pdb(dep: &Deployment, min_available: i32) -> PodDisruptionBudget {
    let name = dep.metadata.name.clone().unwrap_or_default();
    PodDisruptionBudget {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            namespace: dep.metadata.namespace.clone(),
            annotations: Some(
                [
                    (
                        names::OWNED_BY.to_string(),
                        names::OWNED_BY_VALUE.to_string(),
                    ),
                    (names::TARGET.to_string(), name),
                ]
                .into(),
            ),
            owner_references: owner_reference(dep).map(|o| vec![o]),
            ..Default::default()
        },
        spec: Some(PodDisruptionBudgetSpec {
            selector: dep.spec.as_ref().map(|s| s.selector.clone()),
            min_available: Some(IntOrString::Int(min_available)),
            ..Default::default()
        }),
        status: None,
    }
}

/// The minimum a PDB made at admission keeps: a KEDA ScaledObject's
/// minimum when one targets the Deployment (made before it, its HPA may not
/// exist yet), else what [`min_available_for`] says; the reconciler's
/// `floor_for` reads them in the same order.
pub fn admission_floor(
    dep: &Deployment,
    keda_min: Option<i32>,
    hpas: &[Arc<HorizontalPodAutoscaler>],
) -> i32 {
    keda_min.unwrap_or_else(|| min_available_for(dep, hpa_for(dep, hpas).map(|h| h.as_ref())))
}

/// What to do for a Deployment at admission time.
#[derive(Debug, Clone, PartialEq)]
pub enum CreatePlan {
    Create(Box<PodDisruptionBudget>),
    Skip(&'static str),
}

pub fn plan_for_new_deployment(
    dep: &Deployment,
    pdb_create: bool,
    in_scope: bool,
    pdbs: &[Arc<PodDisruptionBudget>],
    deployments: &[Arc<Deployment>],
    min_available: i32,
    pods: &[Arc<crate::cache::SlimPod>],
) -> CreatePlan {
    if !pdb_create {
        return CreatePlan::Skip("PDB_CREATE is off");
    }
    if !in_scope {
        return CreatePlan::Skip("namespace not in scope");
    }
    if crate::scope::deployment_opted_out(dep.metadata.annotations.as_ref()) {
        return CreatePlan::Skip("deployment opted out");
    }
    if dep.metadata.name.is_none() {
        // generateName: the name is not known at admission; the reconciler creates it.
        return CreatePlan::Skip("deployment has no name yet");
    }
    // Validation runs after mutating admission: the apiserver rejects a
    // Deployment whose selector is empty or misses its own template, and a
    // PDB made for it would outlive it, its selector covering other pods
    // (an empty one, every pod of the namespace).
    let valid = matches!(
        Selector::compile(dep.spec.as_ref().map(|s| &s.selector)),
        Ok(s @ Selector::Requirements(_)) if s.matches(&template_labels(dep))
    );
    if !valid {
        return CreatePlan::Skip("selector does not select the pod template");
    }
    let compiled = CompiledPdbs::new(pdbs);
    if !compiled.matching(dep).is_empty() {
        return CreatePlan::Skip("a PDB already selects its pods");
    }
    let ns = dep.metadata.namespace.as_deref().unwrap_or_default();
    if overlapping(dep, &Templates::new(deployments), &compiled).is_some()
        || pod_overlap(dep, &protected_pods(&compiled, ns, pods), |_| false).is_some()
    {
        return CreatePlan::Skip("its selector covers pods another PDB protects");
    }
    CreatePlan::Create(Box::new(owned_pdb(dep, min_available)))
}

/// A PDB of a live list that no cached Deployment's template explains
/// (`deployments`) and that may protect pods `dep`'s selector selects
/// ([`may_overlap_unseen`]): one made for a Deployment not cached yet
/// (`api`, its PDB and `shop` applied together). Ours for `dep` would be a
/// second budget over those pods: the reconciler decides once it sees them.
pub fn unexplained_overlap<'a>(
    dep: &Deployment,
    live: &'a [Arc<PodDisruptionBudget>],
    deployments: &[Arc<Deployment>],
) -> Option<&'a Arc<PodDisruptionBudget>> {
    let compiled = CompiledPdbs::new(live);
    let explained: Vec<&Arc<PodDisruptionBudget>> = deployments
        .iter()
        .filter(|d| d.metadata.namespace == dep.metadata.namespace)
        .flat_map(|d| compiled.matching(d))
        .collect();
    live.iter()
        .find(|p| !explained.iter().any(|e| Arc::ptr_eq(e, p)) && may_overlap_unseen(dep, p))
}

/// Whether a PDB whose Deployment may not be cached may protect pods that
/// `dep`'s selector selects, judged from its selector alone (with that
/// Deployment unseen, [`overlapping`] cannot see it): its matchLabels taken
/// as a pod's labels. One with matchExpressions is taken to overlap.
pub fn may_overlap_unseen(dep: &Deployment, pdb: &PodDisruptionBudget) -> bool {
    let Some(sel) = pdb.spec.as_ref().and_then(|s| s.selector.as_ref()) else {
        return false;
    };
    if sel
        .match_expressions
        .as_ref()
        .is_some_and(|e| !e.is_empty())
    {
        return true;
    }
    let Ok(ours) = Selector::compile(dep.spec.as_ref().map(|s| &s.selector)) else {
        return true;
    };
    ours.selects_for_eviction(&sel.match_labels.clone().unwrap_or_default())
}

/// A PDB that already protects pods a PDB made for `dep` would select too:
/// one selecting the pod template of another Deployment of the namespace that
/// `dep`'s selector also selects (overlapping Deployment selectors). Creating
/// ours then would put two PDBs over those pods, and the apiserver answers
/// every eviction of them with a 500. Returns that PDB and the Deployment.
pub fn overlapping<'a>(
    dep: &Deployment,
    templates: &Templates<'a>,
    compiled: &CompiledPdbs<'a>,
) -> Option<(&'a Arc<PodDisruptionBudget>, &'a Arc<Deployment>)> {
    let ours = Selector::compile(dep.spec.as_ref().map(|s| &s.selector)).ok()?;
    // A PDB over `dep`'s own pods is no overlap here: the rules for the PDBs
    // that select a Deployment (ours, theirs, step aside) handle it.
    let own = compiled.matching(dep);
    let empty = BTreeMap::new();
    templates
        .candidates(&ours)
        .filter(|d| d.metadata.namespace == dep.metadata.namespace)
        .filter(|d| d.metadata.name != dep.metadata.name)
        .filter(|d| ours.selects_for_eviction(template_labels_of(d).unwrap_or(&empty)))
        .find_map(|d| {
            compiled
                .matching(d)
                .into_iter()
                .find(|p| !own.iter().any(|o| Arc::ptr_eq(o, p)))
                .map(|p| (p, d))
        })
}

/// The pods of a namespace that some PDB protects, each with those PDBs
/// (what [`pod_overlap`] reads), indexed by their labels.
pub struct Protected<'a> {
    pods: Vec<(&'a crate::cache::SlimPod, Vec<&'a Arc<PodDisruptionBudget>>)>,
    index: LabelIndex<'a>,
}

impl<'a> Protected<'a> {
    /// Each protected pod with the PDBs over it.
    pub fn iter(
        &self,
    ) -> impl Iterator<Item = &(&'a crate::cache::SlimPod, Vec<&'a Arc<PodDisruptionBudget>>)> {
        self.pods.iter()
    }
}

/// The pods of `ns` that some PDB protects, each with those PDBs (what
/// [`pod_overlap`] reads). Completed ones (a CronJob's kept history) are
/// left out: eviction.go's `canIgnorePDB` deletes them without reading any
/// budget, so two budgets over them refuse nothing. So are terminating
/// pods, but a StatefulSet's or a DaemonSet's: those are replaced only once
/// gone, and a PDB of ours made in that gap would be a second budget over
/// the new pod (then stepped aside, and made again at its next eviction).
/// The caller passes such pods for a while after they are gone too
/// (`cache::PodStore::pods_and_leaving_in`). One stuck terminating (its
/// node gone) keeps ours away until it is deleted; the PDBSelectorOverlap
/// condition names it. (A ReplicaSet's replacement is made at once, and
/// overlaps itself.) Pending pods stay: they will run.
pub fn protected_pods<'a>(
    compiled: &CompiledPdbs<'a>,
    ns: &str,
    pods: &'a [Arc<crate::cache::SlimPod>],
) -> Protected<'a> {
    let pods: Vec<_> = pods
        .iter()
        .filter(|p| !p.is_completed() && (!p.is_terminating() || p.replaced_once_gone()))
        .map(|p| (p.as_ref(), compiled.selecting(ns, p.labels())))
        .filter(|(_, pdbs)| !pdbs.is_empty())
        .collect();
    let index = LabelIndex::new(pods.iter().map(|(p, _)| p.labels().iter()));
    Protected { pods, index }
}

/// A running pod that `dep`'s selector selects and that a PDB protects
/// which does not select `dep`'s pod template: a PDB made for `dep` would be
/// a second budget over that pod. Overlapping Deployment templates are
/// [`overlapping`]'s; this covers every other pod: a StatefulSet's or a bare
/// pod's under the user's PDB, or labels a pod set on itself at run time.
/// `ignored`: the PDBs that do not count (`dep`'s own among them). Returns
/// that PDB and the pod's name.
pub fn pod_overlap<'a>(
    dep: &Deployment,
    protected: &Protected<'a>,
    ignored: impl Fn(&Arc<PodDisruptionBudget>) -> bool,
) -> Option<(&'a Arc<PodDisruptionBudget>, String)> {
    let ours = Selector::compile(dep.spec.as_ref().map(|s| &s.selector)).ok()?;
    // The pod of the smallest name: the cache's order changes as pods come
    // and go, and the name is in the Degraded message (a new name, a new
    // status write, on every rollout).
    let at = protected.index.candidates(&ours);
    at.iter()
        .map(|i| &protected.pods[*i])
        .filter(|(pod, _)| ours.selects_for_eviction(pod.labels()))
        .filter_map(|(pod, pdbs)| pdbs.iter().find(|p| !ignored(p)).map(|p| (*p, pod.name())))
        .min_by_key(|(_, name)| *name)
        .map(|(p, name)| (p, name.to_string()))
}

/// Is an existing PDB of this name ours and for this Deployment?
pub fn is_ours_for(pdb: &PodDisruptionBudget, dep: &Deployment) -> bool {
    owned_by_us(&pdb.metadata)
        && pdb.spec.as_ref().and_then(|s| s.selector.as_ref())
            == dep.spec.as_ref().map(|s| &s.selector)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::DeploymentSpec;
    use k8s_openapi::api::autoscaling::v2::{
        CrossVersionObjectReference, HorizontalPodAutoscalerSpec,
    };
    use k8s_openapi::api::core::v1::PodTemplateSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};

    pub fn dep(name: &str, replicas: i32) -> Deployment {
        let labels: BTreeMap<String, String> = [("app".to_string(), name.to_string())].into();
        Deployment {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                ..Default::default()
            },
            spec: Some(DeploymentSpec {
                replicas: Some(replicas),
                selector: LabelSelector {
                    match_labels: Some(labels.clone()),
                    match_expressions: Some(vec![LabelSelectorRequirement {
                        key: "tier".into(),
                        operator: "NotIn".into(),
                        values: Some(vec!["batch".into()]),
                    }]),
                },
                template: PodTemplateSpec {
                    metadata: Some(ObjectMeta {
                        labels: Some(labels),
                        ..Default::default()
                    }),
                    spec: None,
                },
                ..Default::default()
            }),
            status: None,
        }
    }

    /// A Deployment of 3 with these selector labels and template labels.
    pub fn labelled(
        name: &str,
        selector: &[(&str, &str)],
        template: &[(&str, &str)],
    ) -> Deployment {
        let mut d = dep(name, 3);
        let map = |kv: &[(&str, &str)]| -> BTreeMap<String, String> {
            kv.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        if let Some(spec) = d.spec.as_mut() {
            spec.selector = LabelSelector {
                match_labels: Some(map(selector)),
                match_expressions: None,
            };
            spec.template.metadata = Some(ObjectMeta {
                labels: Some(map(template)),
                ..Default::default()
            });
        }
        d
    }

    fn hpa(target: &str, min: i32) -> HorizontalPodAutoscaler {
        HorizontalPodAutoscaler {
            metadata: ObjectMeta {
                name: Some("h".into()),
                namespace: Some("ns".into()),
                ..Default::default()
            },
            spec: Some(HorizontalPodAutoscalerSpec {
                min_replicas: Some(min),
                max_replicas: 10,
                scale_target_ref: CrossVersionObjectReference {
                    api_version: Some("apps/v1".into()),
                    kind: "Deployment".into(),
                    name: target.into(),
                },
                ..Default::default()
            }),
            status: None,
        }
    }

    #[test]
    fn owned_pdb_copies_the_whole_selector_and_owner() {
        let mut d = dep("web", 3);
        let p = owned_pdb(&d, 3);
        assert_eq!(p.metadata.name.as_deref(), Some("web"));
        assert!(p.metadata.owner_references.is_none(), "no uid yet");
        let sel = p.spec.as_ref().unwrap().selector.as_ref().unwrap();
        assert_eq!(sel, &d.spec.as_ref().unwrap().selector);
        assert!(sel.match_expressions.is_some());
        assert_eq!(p.spec.unwrap().min_available, Some(IntOrString::Int(3)));
        assert!(owned_by_us(&p.metadata));
        d.metadata.uid = Some("u-1".into());
        let o = owned_pdb(&d, 3).metadata.owner_references.unwrap();
        assert_eq!(o[0].uid, "u-1");
        assert_eq!(
            (o[0].controller, o[0].block_owner_deletion),
            (Some(true), Some(true))
        );
    }

    #[test]
    fn plan_rows() {
        let d = dep("web", 3);
        let none: Vec<Arc<PodDisruptionBudget>> = vec![];
        let no_hpa: Vec<Arc<HorizontalPodAutoscaler>> = vec![];
        assert_eq!(
            plan_for_new_deployment(&d, false, true, &none, &[], 3, &[]),
            CreatePlan::Skip("PDB_CREATE is off")
        );
        assert_eq!(
            plan_for_new_deployment(&d, true, false, &none, &[], 3, &[]),
            CreatePlan::Skip("namespace not in scope")
        );
        let mut opted = d.clone();
        opted.metadata.annotations =
            Some([(names::PDB_CREATE.to_string(), "false".to_string())].into());
        assert_eq!(
            plan_for_new_deployment(&opted, true, true, &none, &[], 3, &[]),
            CreatePlan::Skip("deployment opted out")
        );
        // Found by fuzz/mutate_handler: a Deployment the apiserver will
        // reject after admission (empty selector, or one that misses its
        // template) gets no PDB.
        for selector in [
            LabelSelector::default(),
            LabelSelector {
                match_labels: Some([("app".to_string(), "db".to_string())].into()),
                match_expressions: None,
            },
        ] {
            let mut invalid = d.clone();
            if let Some(spec) = invalid.spec.as_mut() {
                spec.selector = selector;
            }
            assert_eq!(
                plan_for_new_deployment(&invalid, true, true, &none, &[], 3, &[]),
                CreatePlan::Skip("selector does not select the pod template")
            );
        }
        let existing = vec![Arc::new(owned_pdb(&d, 1))];
        assert_eq!(
            plan_for_new_deployment(&d, true, true, &existing, &[], 3, &[]),
            CreatePlan::Skip("a PDB already selects its pods")
        );
        match plan_for_new_deployment(&d, true, true, &none, &[], 3, &[]) {
            CreatePlan::Create(p) => {
                assert_eq!(p.spec.unwrap().min_available, Some(IntOrString::Int(3)))
            }
            other => panic!("{other:?}"),
        }
        let hpas = vec![Arc::new(hpa("web", 2))];
        assert_eq!(admission_floor(&d, None, &no_hpa), 3, "replicas");
        assert_eq!(admission_floor(&d, None, &hpas), 2, "the HPA's minimum");
        // A ScaledObject made before the Deployment: KEDA's HPA may not
        // exist yet, and KEDA's minimum is the floor either way.
        assert_eq!(admission_floor(&d, Some(5), &no_hpa), 5, "KEDA's minimum");
        assert_eq!(
            admission_floor(&d, Some(5), &hpas),
            5,
            "KEDA's before the HPA's"
        );
        match plan_for_new_deployment(&d, true, true, &none, &[], 2, &[]) {
            CreatePlan::Create(p) => {
                assert_eq!(p.spec.unwrap().min_available, Some(IntOrString::Int(2)))
            }
            other => panic!("{other:?}"),
        }
    }

    /// `api` (template `app=shop, role=api`), `shop` (selector `app=shop`,
    /// over api's pods too) and `other`.
    fn shop_api_other() -> (Deployment, Deployment, Deployment) {
        let api = labelled(
            "api",
            &[("app", "shop"), ("role", "api")],
            &[("app", "shop"), ("role", "api")],
        );
        let shop = labelled(
            "shop",
            &[("app", "shop")],
            &[("app", "shop"), ("role", "web")],
        );
        let other = labelled("other", &[("app", "other")], &[("app", "other")]);
        (api, shop, other)
    }

    /// Overlapping Deployment selectors: `shop` selects `app=shop` only, so it
    /// also selects the pods of `api` (template `app=shop, role=api`).
    #[test]
    fn a_selector_covering_pods_another_pdb_protects_gets_no_pdb() {
        let (api, shop, other) = shop_api_other();
        let api_pdb = vec![Arc::new(owned_pdb(&api, 3))];
        let deps = vec![
            Arc::new(api.clone()),
            Arc::new(shop.clone()),
            Arc::new(other.clone()),
        ];
        assert_eq!(
            plan_for_new_deployment(&shop, true, true, &api_pdb, &deps, 1, &[]),
            CreatePlan::Skip("its selector covers pods another PDB protects")
        );
        let compiled = CompiledPdbs::new(&api_pdb);
        let (p, d) = overlapping(&shop, &Templates::new(&deps), &compiled).expect("overlap");
        assert_eq!(
            (p.metadata.name.as_deref(), d.metadata.name.as_deref()),
            (Some("api"), Some("api"))
        );
        // api's own PDB is not an overlap for api; `other` selects nothing of api's.
        assert!(overlapping(&api, &Templates::new(&deps), &compiled).is_none());
        assert!(matches!(
            plan_for_new_deployment(&other, true, true, &api_pdb, &deps, 1, &[]),
            CreatePlan::Create(_)
        ));
        // Without a PDB over api's pods, shop gets one (api then finds it).
        assert!(matches!(
            plan_for_new_deployment(&shop, true, true, &[], &deps, 1, &[]),
            CreatePlan::Create(_)
        ));
    }

    /// `api`'s PDB and `shop` applied together: at `shop`'s admission
    /// neither `api` nor its PDB is cached, and the live PDB alone says its
    /// pods may be `shop`'s too (a review, session 45).
    #[test]
    fn an_unseen_pdb_over_pods_the_selector_covers_is_an_overlap() {
        let (api, shop, other) = shop_api_other();
        let api_pdb = owned_pdb(&api, 3);
        // Neither `api` nor its PDB cached: the plan alone makes ours.
        assert!(matches!(
            plan_for_new_deployment(&shop, true, true, &[Arc::new(api_pdb.clone())], &[], 1, &[]),
            CreatePlan::Create(_)
        ));
        assert!(may_overlap_unseen(&shop, &api_pdb));
        assert!(!may_overlap_unseen(&other, &api_pdb));
        // `shop`'s PDB does not cover `api`'s selector's every pod, but a
        // plan sees that one (it selects `api`'s template).
        assert!(!may_overlap_unseen(&api, &owned_pdb(&shop, 1)));
        // A selector with expressions is taken to overlap; none, to select
        // nothing.
        let mut exprs = api_pdb.clone();
        if let Some(sel) = exprs.spec.as_mut().and_then(|s| s.selector.as_mut()) {
            sel.match_labels = None;
            sel.match_expressions = Some(vec![LabelSelectorRequirement {
                key: "app".into(),
                operator: "Exists".into(),
                values: None,
            }]);
        }
        assert!(may_overlap_unseen(&other, &exprs));
        let mut none = api_pdb.clone();
        if let Some(spec) = none.spec.as_mut() {
            spec.selector = None;
        }
        assert!(!may_overlap_unseen(&shop, &none));
        // In a live list: api's PDB is unexplained while api is not cached,
        // and explained once it is.
        let live = vec![Arc::new(api_pdb.clone())];
        let found = unexplained_overlap(&shop, &live, &[]).and_then(|p| p.metadata.name.clone());
        assert_eq!(found.as_deref(), Some("api"));
        assert!(unexplained_overlap(&shop, &live, &[Arc::new(api.clone())]).is_none());
        assert!(unexplained_overlap(&other, &live, &[]).is_none());
    }

    #[test]
    fn baseline_ignores_our_surge() {
        let mut d = dep("web", 6);
        assert_eq!(baseline_replicas(&d), 6);
        d.metadata.annotations = Some(
            [
                (names::SURGE_REPLICAS.to_string(), "6".to_string()),
                (names::ORIGINAL_MIN_REPLICAS.to_string(), "3".to_string()),
            ]
            .into(),
        );
        assert_eq!(baseline_replicas(&d), 3);
        let mut h = hpa("web", 5);
        h.metadata.annotations = d.metadata.annotations.clone();
        assert_eq!(min_available_for(&d, Some(&h)), 3);
        assert_eq!(min_available_for(&d, Some(&hpa("web", 5))), 5);
    }

    mod indexed {
        //! The indexes return what a scan of every object would.
        use super::*;
        use crate::cache::{PodWire, SlimPod};
        use proptest::prelude::*;

        type Pairs = Vec<(String, String)>;

        fn pairs() -> impl Strategy<Value = Pairs> {
            prop::collection::vec(("[abc]", "[xy]"), 0..3)
        }

        fn map(p: &Pairs) -> BTreeMap<String, String> {
            p.iter().cloned().collect()
        }

        /// A selector of matchLabels and expressions over few keys and
        /// values; None is a nil selector.
        fn selector() -> impl Strategy<Value = Option<LabelSelector>> {
            let expr = ("[abc]", 0..4usize, prop::collection::vec("[xy]", 0..3)).prop_map(
                |(key, op, values)| {
                    let op = ["In", "NotIn", "Exists", "DoesNotExist"][op];
                    let values = matches!(op, "In" | "NotIn").then_some(values);
                    LabelSelectorRequirement {
                        key,
                        operator: op.into(),
                        values,
                    }
                },
            );
            prop::option::weighted(
                0.9,
                (pairs(), prop::collection::vec(expr, 0..2)).prop_map(|(ml, ex)| LabelSelector {
                    match_labels: Some(map(&ml)),
                    match_expressions: Some(ex),
                }),
            )
        }

        fn pdb(i: usize, ns: bool, sel: Option<LabelSelector>) -> Arc<PodDisruptionBudget> {
            Arc::new(PodDisruptionBudget {
                metadata: ObjectMeta {
                    name: Some(format!("p{i}")),
                    namespace: Some(if ns { "ns" } else { "other" }.into()),
                    ..Default::default()
                },
                spec: Some(PodDisruptionBudgetSpec {
                    selector: sel,
                    ..Default::default()
                }),
                status: None,
            })
        }

        fn deployment(i: usize, sel: Option<LabelSelector>, template: &Pairs) -> Arc<Deployment> {
            let mut d = dep(&format!("d{i}"), 1);
            if let Some(spec) = d.spec.as_mut() {
                spec.selector = sel.unwrap_or_default();
                spec.template.metadata = Some(ObjectMeta {
                    labels: Some(map(template)),
                    ..Default::default()
                });
            }
            Arc::new(d)
        }

        fn pod(i: usize, labels: &Pairs) -> Arc<SlimPod> {
            let wire: PodWire = serde_json::from_value(serde_json::json!({
                "metadata": {"name": format!("pod-{}", i % 4), "namespace": "ns", "labels": map(labels)},
                "status": {"phase": "Running"}
            }))
            .expect("a pod");
            Arc::new(SlimPod::from(&wire))
        }

        fn same(a: &[&Arc<PodDisruptionBudget>], b: &[&Arc<PodDisruptionBudget>]) -> bool {
            a.len() == b.len() && a.iter().zip(b).all(|(x, y)| Arc::ptr_eq(x, y))
        }

        proptest! {
            #[test]
            fn lookups_find_what_a_scan_finds(
                pdbs in prop::collection::vec((any::<bool>(), selector()), 0..8),
                deps in prop::collection::vec((selector(), pairs()), 1..8),
                pods in prop::collection::vec(pairs(), 0..8),
            ) {
                let pdbs: Vec<_> = pdbs.into_iter().enumerate().map(|(i, (ns, s))| pdb(i, ns, s)).collect();
                let deps: Vec<_> = deps.into_iter().enumerate().map(|(i, (s, t))| deployment(i, s, &t)).collect();
                let pods: Vec<_> = pods.iter().enumerate().map(|(i, l)| pod(i, l)).collect();
                let compiled = CompiledPdbs::new(&pdbs);
                let scan = |labels: &dyn Fn(&Selector) -> bool| -> Vec<&Arc<PodDisruptionBudget>> {
                    pdbs.iter()
                        .filter(|p| p.metadata.namespace.as_deref() == Some("ns"))
                        .filter(|p| Selector::compile(p.spec.as_ref().and_then(|s| s.selector.as_ref()))
                            .is_ok_and(|s| labels(&s)))
                        .collect()
                };
                for p in &pods {
                    let want = scan(&|s| s.selects_for_eviction(p.labels()));
                    prop_assert!(same(&compiled.selecting("ns", p.labels()), &want));
                }
                let templates = Templates::new(&deps);
                let protected = protected_pods(&compiled, "ns", &pods);
                for d in &deps {
                    let t = template_labels(d);
                    let want = scan(&|s| s.selects_for_eviction(&t));
                    let own = compiled.matching(d);
                    prop_assert!(same(&own, &want));
                    // `overlapping` as a scan of every Deployment.
                    let want = Selector::compile(Some(&d.spec.as_ref().expect("spec").selector)).ok().and_then(|ours| {
                        deps.iter()
                            .filter(|o| o.metadata.name != d.metadata.name)
                            .filter(|o| ours.selects_for_eviction(&template_labels(o)))
                            .find_map(|o| compiled.matching(o).into_iter()
                                .find(|p| !own.iter().any(|q| Arc::ptr_eq(p, q)))
                                .map(|p| (p, o)))
                    });
                    let got = overlapping(d, &templates, &compiled);
                    prop_assert_eq!(
                        got.map(|(p, o)| (Arc::as_ptr(p), Arc::as_ptr(o))),
                        want.map(|(p, o)| (Arc::as_ptr(p), Arc::as_ptr(o)))
                    );
                    // `pod_overlap` as a scan of every protected pod.
                    let ignored = |p: &Arc<PodDisruptionBudget>| own.iter().any(|q| Arc::ptr_eq(p, q));
                    let want = Selector::compile(Some(&d.spec.as_ref().expect("spec").selector)).ok().and_then(|ours| {
                        protected.iter()
                            .filter(|(pod, _)| ours.selects_for_eviction(pod.labels()))
                            .filter_map(|(pod, over)| over.iter().find(|p| !ignored(p)).map(|p| (*p, pod.name())))
                            .min_by_key(|(_, n)| *n)
                            .map(|(p, n)| (Arc::as_ptr(p), n.to_string()))
                    });
                    let got = pod_overlap(d, &protected, ignored).map(|(p, n)| (Arc::as_ptr(p), n));
                    prop_assert_eq!(got, want);
                }
            }
        }
    }
}
