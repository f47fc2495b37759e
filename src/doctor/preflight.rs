//! The drain preflight of `eviction-autoscaler doctor --node NAME`: for each
//! node, what `kubectl drain` would do with each pod, which budget would
//! stop it, and whether the product would surge for it. A pure function of
//! the listed objects.
//!
//! kubectl drain's filters (k8s.io/kubectl/pkg/drain/filters.go) are
//! mirrored: DaemonSet pods are skipped (`--ignore-daemonsets`; without it
//! drain refuses to start), mirror (static) pods are skipped, completed and
//! terminating pods go without a budget check, pods with no controller need
//! `--force` and pods with emptyDir volumes `--delete-emptydir-data`. Those
//! flags are reported per pod; they do not make the drain "blocked", since
//! the command line decides them. Every other pod goes through the Eviction
//! API, decided as `eviction.go` does (behaviour.md section 4): no PDB,
//! an unhealthy pod the policy lets go, or `disruptionsAllowed > 0` → free;
//! several PDBs → blocked (HTTP 500); otherwise the surge worker's own step
//! says whether a surge opens the budget, and if not, why.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use serde::Serialize;

use super::lint::closed;
use super::objects::{name_of, ns_of, pod_node, pod_ready, Objects, Owner};
use super::surge::{outcome, Outcome};
use crate::budget::Rule;
use crate::config::Behaviour;
use crate::surge::view::Indexed;

/// What happens to one pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    /// Not evicted by kubectl drain.
    Skipped,
    /// Evicted (or deleted) without waiting on a budget beyond its normal pace.
    Free,
    /// The budget allows no disruption; the product surges, then it goes.
    Surge,
    /// The drain cannot evict it.
    Blocked,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SurgePlan {
    pub deployment: String,
    pub from: i32,
    pub to: i32,
    /// Already in place (a surge under way), not started by this drain.
    pub under_way: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PodReport {
    pub namespace: String,
    pub name: String,
    /// `Kind/name` of the controller (a ReplicaSet followed to its
    /// Deployment), `-` for none.
    pub owner: String,
    /// kubectl drain flags this pod needs (`--ignore-daemonsets`, `--force`,
    /// `--delete-emptydir-data`).
    pub needs: Vec<&'static str>,
    /// The PDBs that select it.
    pub pdbs: Vec<String>,
    pub verdict: Verdict,
    pub surge: Option<SurgePlan>,
    pub reason: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeReport {
    pub name: String,
    /// Cordoned or tainted for a drain already.
    pub draining: bool,
    pub pods: Vec<PodReport>,
    pub blocked: usize,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Preflight {
    pub nodes: Vec<NodeReport>,
    /// A pod on one of the nodes cannot be evicted: the drain would block.
    pub blocked: bool,
}

const MIRROR: &str = "kubernetes.io/config.mirror";

/// The preflight of draining all of `nodes` together. `view` is
/// `objs.surge_view(..)` (without the nodes: they are added here).
pub fn preflight(
    objs: &Objects,
    view: &Indexed,
    behaviour: &Behaviour,
    nodes: &[String],
) -> Preflight {
    let draining: BTreeSet<String> = nodes.iter().cloned().collect();
    let mut ctx = Ctx {
        objs,
        view,
        behaviour,
        nodes: &draining,
        surges: BTreeMap::new(),
    };
    let mut reports = Vec::new();
    for node in nodes {
        let mut pods: Vec<PodReport> = objs
            .pods
            .iter()
            .filter(|p| pod_node(p) == Some(node.as_str()))
            .map(|p| ctx.pod(p))
            .collect();
        pods.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
        let blocked = pods
            .iter()
            .filter(|p| p.verdict == Verdict::Blocked)
            .count();
        reports.push(NodeReport {
            name: node.clone(),
            draining: view.draining.contains(node),
            pods,
            blocked,
        });
    }
    Preflight {
        blocked: reports.iter().any(|n| n.blocked > 0),
        nodes: reports,
    }
}

struct Ctx<'a> {
    objs: &'a Objects,
    view: &'a Indexed,
    behaviour: &'a Behaviour,
    nodes: &'a BTreeSet<String>,
    /// One surge answer per Deployment (namespace, name).
    surges: BTreeMap<(String, String), Outcome>,
}

struct Decision {
    verdict: Verdict,
    surge: Option<SurgePlan>,
    reason: String,
}

fn decided(verdict: Verdict, reason: impl Into<String>) -> Decision {
    Decision {
        verdict,
        surge: None,
        reason: reason.into(),
    }
}

impl Ctx<'_> {
    fn pod(&mut self, p: &Pod) -> PodReport {
        let owner = self.objs.owner(p);
        let pdbs = self.objs.pdbs_of(p);
        let mut needs = Vec::new();
        let d = self.decide(p, &owner, &pdbs, &mut needs);
        PodReport {
            namespace: ns_of(p).to_string(),
            name: name_of(p).to_string(),
            owner: owner.to_string(),
            needs,
            pdbs: pdbs
                .iter()
                .map(|b| name_of(b.as_ref()).to_string())
                .collect(),
            verdict: d.verdict,
            surge: d.surge,
            reason: d.reason,
        }
    }

    fn decide(
        &mut self,
        p: &Pod,
        owner: &Owner,
        pdbs: &[&std::sync::Arc<PodDisruptionBudget>],
        needs: &mut Vec<&'static str>,
    ) -> Decision {
        // kubectl drain's filters, in its order.
        if p.metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(MIRROR))
        {
            return decided(
                Verdict::Skipped,
                "mirror (static) pod: kubectl drain skips it, the kubelet owns it",
            );
        }
        let direct = crate::cache::controller_of(&p.metadata);
        if direct.is_some_and(|c| c.kind == "DaemonSet") {
            needs.push("--ignore-daemonsets");
            return decided(
                Verdict::Skipped,
                "DaemonSet pod: kubectl drain --ignore-daemonsets skips it (without the flag drain refuses to start)",
            );
        }
        if p.metadata.deletion_timestamp.is_some() {
            return decided(Verdict::Free, "already terminating: no budget check");
        }
        let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
        if matches!(phase, Some("Succeeded" | "Failed")) {
            return decided(
                Verdict::Free,
                "completed: kubectl drain removes it without a budget check",
            );
        }
        if direct.is_none() {
            needs.push("--force");
        }
        let empty_dir = p
            .spec
            .as_ref()
            .and_then(|s| s.volumes.as_ref())
            .is_some_and(|v| v.iter().any(|v| v.empty_dir.is_some()));
        if empty_dir {
            needs.push("--delete-emptydir-data");
        }
        if phase == Some("Pending") {
            return decided(Verdict::Free, "Pending: evicted without a budget check");
        }
        // The Eviction API (eviction.go).
        let pdb = match pdbs {
            [] => return decided(Verdict::Free, "no PDB selects it"),
            [one] => one,
            many => {
                let names: Vec<&str> = many.iter().map(|b| name_of(b.as_ref())).collect();
                return decided(
                    Verdict::Blocked,
                    format!(
                        "selected by {} PDBs ({}): the apiserver refuses its eviction (HTTP 500) and kubectl drain stops",
                        names.len(),
                        names.join(", ")
                    ),
                );
            }
        };
        let status = pdb.status.clone().unwrap_or_default();
        if !pod_ready(p) {
            let policy = pdb
                .spec
                .as_ref()
                .and_then(|s| s.unhealthy_pod_eviction_policy.as_deref());
            let lets_go = match policy {
                Some("AlwaysAllow") => true,
                _ => status.current_healthy >= status.desired_healthy,
            };
            if lets_go {
                return decided(
                    Verdict::Free,
                    "not Ready, and the PDB's unhealthyPodEvictionPolicy lets it go",
                );
            }
        }
        if status.disruptions_allowed > 0 {
            let here = self.on_nodes_under(pdb);
            let mut reason = format!(
                "PDB {} allows {} disruption(s) now",
                name_of(pdb.as_ref()),
                status.disruptions_allowed
            );
            if here > status.disruptions_allowed {
                reason.push_str(&format!(
                    "; its {here} pods here go one by one as replacements become Ready"
                ));
            }
            return decided(Verdict::Free, reason);
        }
        self.closed_budget(p, owner, pdb)
    }

    /// The budget allows no disruption: a surge, or why not.
    fn closed_budget(&mut self, p: &Pod, owner: &Owner, pdb: &PodDisruptionBudget) -> Decision {
        let never = pdb
            .spec
            .as_ref()
            .and_then(|s| Rule::from_spec(s).ok())
            .and_then(|r| closed(r, 1))
            .filter(|c| !c.surge_can_help)
            .map(|c| format!("PDB {}: {}", name_of(pdb), c.message));
        let ns = ns_of(p).to_string();
        match owner {
            Owner::Deployment(d) => {
                let key = (ns.clone(), d.clone());
                let o = self
                    .surges
                    .entry(key)
                    .or_insert_with(|| outcome(self.view, self.behaviour, &ns, d, self.nodes))
                    .clone();
                match o {
                    Outcome::Surge { from, to, active } => Decision {
                        verdict: Verdict::Surge,
                        surge: Some(SurgePlan {
                            deployment: d.clone(),
                            from,
                            to,
                            under_way: active,
                        }),
                        reason: if active {
                            format!(
                                "PDB {} allows no disruption; a surge of Deployment {d} from {from} to {to} is under way, the eviction is retried (429) until the new pods are Ready",
                                name_of(pdb)
                            )
                        } else {
                            format!(
                                "PDB {} allows no disruption; the product would surge Deployment {d} from {from} to {to}, the eviction is retried (429) until the new pods are Ready",
                                name_of(pdb)
                            )
                        },
                    },
                    Outcome::Blocked(why) => decided(Verdict::Blocked, never.unwrap_or(why)),
                }
            }
            Owner::Other(kind, name) => decided(
                Verdict::Blocked,
                never.unwrap_or(format!(
                    "PDB {} allows no disruption and {kind}/{name} is not a Deployment: the product surges Deployments only",
                    name_of(pdb)
                )),
            ),
            Owner::None => decided(
                Verdict::Blocked,
                never.unwrap_or(format!(
                    "PDB {} allows no disruption and the pod has no controller: nothing replaces it",
                    name_of(pdb)
                )),
            ),
        }
    }

    /// Pods of this PDB on the drained nodes.
    fn on_nodes_under(&self, pdb: &PodDisruptionBudget) -> i32 {
        let n = self
            .objs
            .pods_of(pdb)
            .into_iter()
            .filter(|p| pod_node(p).is_some_and(|n| self.nodes.contains(n)))
            .count();
        i32::try_from(n).unwrap_or(i32::MAX)
    }
}
