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
use crate::scope::deployment_opted_out;
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
    /// `Kind/name` of the object the surge changes: the Deployment, or the
    /// HorizontalPodAutoscaler or ScaledObject whose minimum it raises.
    pub object: String,
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
            [] => {
                let opted_out = match owner {
                    Owner::Deployment(d) => self
                        .objs
                        .deployments
                        .iter()
                        .find(|x| ns_of(x.as_ref()) == ns_of(p) && name_of(x.as_ref()) == d)
                        .is_some_and(|x| deployment_opted_out(x.metadata.annotations.as_ref())),
                    _ => false,
                };
                return decided(
                    Verdict::Free,
                    if opted_out {
                        "no PDB selects it (its Deployment opted out of ours: pdb-create \"false\")"
                    } else {
                        "no PDB selects it"
                    },
                );
            }
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
                    Outcome::Surge {
                        from,
                        to,
                        active,
                        object,
                    } => {
                        let through = if object == format!("Deployment/{d}") {
                            String::new()
                        } else {
                            format!(" (through {object})")
                        };
                        let what = if active {
                            format!("a surge of Deployment {d} from {from} to {to}{through} is under way")
                        } else {
                            format!("the product would surge Deployment {d} from {from} to {to}{through}")
                        };
                        Decision {
                            verdict: Verdict::Surge,
                            surge: Some(SurgePlan {
                                deployment: d.clone(),
                                from,
                                to,
                                under_way: active,
                                object,
                            }),
                            reason: format!(
                                "PDB {} allows no disruption; {what}, the eviction is retried (429) until the new pods are Ready",
                                name_of(pdb)
                            ),
                        }
                    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doctor::fixtures::*;
    use k8s_openapi::api::apps::v1::{DeploymentStrategy, RollingUpdateDeployment};
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    use std::sync::Arc;

    fn run(w: &World, nodes: &[&str]) -> Preflight {
        let b = behaviour();
        let view = w.objs.surge_view(&b, &[]);
        let nodes: Vec<String> = nodes.iter().map(|s| s.to_string()).collect();
        preflight(&w.objs, &view, &b, &nodes)
    }

    fn row<'a>(p: &'a Preflight, pod: &str) -> &'a PodReport {
        p.nodes
            .iter()
            .flat_map(|n| &n.pods)
            .find(|r| r.name == pod)
            .unwrap_or_else(|| panic!("no row for {pod}: {p:#?}"))
    }

    struct Case {
        name: &'static str,
        world: World,
        pod: &'static str,
        verdict: Verdict,
        reason: &'static str,
        needs: &'static [&'static str],
        surge: Option<(i32, i32)>,
    }

    fn world(f: impl FnOnce(&mut World)) -> World {
        let mut w = World::new();
        f(&mut w);
        w
    }

    /// A Deployment `web` of 3 pods (web-0 on n1) under a PDB that allows none.
    fn blocked_web(ns: &str, min: Option<IntOrString>, max: Option<IntOrString>) -> World {
        world(|w| {
            w.deploy(ns, "web", &["n1", "n2", "n3"], |_| {})
                .add_pdb(pdb(ns, "web-pdb", "web", min, max, (0, 3, 3)));
        })
    }

    fn cases() -> Vec<Case> {
        vec![
            Case {
                name: "DaemonSet pods are skipped with --ignore-daemonsets",
                world: world(|w| {
                    w.add_pod(owned(pod("on", "ds-0", "ds", "n1"), "DaemonSet", "ds"));
                }),
                pod: "ds-0",
                verdict: Verdict::Skipped,
                reason: "DaemonSet",
                needs: &["--ignore-daemonsets"],
                surge: None,
            },
            Case {
                name: "mirror pods are skipped",
                world: world(|w| {
                    w.add_pod(mirror(owned(
                        pod("on", "static-0", "s", "n1"),
                        "Node",
                        "n1",
                    )));
                }),
                pod: "static-0",
                verdict: Verdict::Skipped,
                reason: "mirror",
                needs: &[],
                surge: None,
            },
            Case {
                name: "completed pods are removed without a budget check",
                world: world(|w| {
                    w.add_pod(phase(
                        owned(pod("on", "job-0", "web", "n1"), "Job", "j"),
                        "Succeeded",
                    ))
                    .add_pdb(pdb("on", "p", "web", int(5), None, (0, 0, 5)));
                }),
                pod: "job-0",
                verdict: Verdict::Free,
                reason: "completed",
                needs: &[],
                surge: None,
            },
            Case {
                name: "unmanaged pods need --force",
                world: world(|w| {
                    w.add_pod(pod("on", "bare", "bare", "n1"));
                }),
                pod: "bare",
                verdict: Verdict::Free,
                reason: "no PDB",
                needs: &["--force"],
                surge: None,
            },
            Case {
                name: "emptyDir pods need --delete-emptydir-data",
                world: world(|w| {
                    w.add_pod(with_empty_dir(owned(
                        pod("on", "e", "e", "n1"),
                        "StatefulSet",
                        "e",
                    )));
                }),
                pod: "e",
                verdict: Verdict::Free,
                reason: "no PDB",
                needs: &["--delete-emptydir-data"],
                surge: None,
            },
            Case {
                name: "an opted-out Deployment without a PDB goes freely, and says why",
                world: world(|w| {
                    w.deploy("on", "web", &["n1"], |d| {
                        d.metadata.annotations = Some(
                            [(crate::names::PDB_CREATE.to_string(), "false".to_string())].into(),
                        );
                    });
                }),
                pod: "web-0",
                verdict: Verdict::Free,
                reason: "opted out",
                needs: &[],
                surge: None,
            },
            Case {
                name: "a budget with room lets the pods go one by one",
                world: world(|w| {
                    w.deploy("on", "web", &["n1", "n1", "n2"], |_| {})
                        .add_pdb(pdb("on", "web-pdb", "web", int(2), None, (1, 3, 2)));
                }),
                pod: "web-0",
                verdict: Verdict::Free,
                reason: "its 2 pods here go one by one",
                needs: &[],
                surge: None,
            },
            Case {
                name: "a user PDB at the replicas is opened by a surge (maxSurge 25% of 3 = 1)",
                world: blocked_web("on", int(3), None),
                pod: "web-0",
                verdict: Verdict::Surge,
                reason: "would surge Deployment web from 3 to 4",
                needs: &[],
                surge: Some((3, 4)),
            },
            Case {
                name: "an owned PDB at the replicas is opened by a surge",
                world: world(|w| {
                    w.deploy("on", "web", &["n1", "n1", "n2"], |_| {})
                        .add_pdb(ours(pdb("on", "web", "web", int(3), None, (0, 3, 3))));
                }),
                pod: "web-1",
                verdict: Verdict::Surge,
                reason: "from 3 to 4",
                needs: &[],
                surge: Some((3, 4)),
            },
            Case {
                name: "out of scope: no surge",
                world: blocked_web("off", int(3), None),
                pod: "web-0",
                verdict: Verdict::Blocked,
                reason: "out of the product's scope",
                needs: &[],
                surge: None,
            },
            Case {
                name: "maxUnavailable 0: no surge can help",
                world: blocked_web("on", None, int(0)),
                pod: "web-0",
                verdict: Verdict::Blocked,
                reason: "maxUnavailable is 0",
                needs: &[],
                surge: None,
            },
            Case {
                name: "maxUnavailable 0 out of scope says the budget, not the scope",
                world: blocked_web("off", None, int(0)),
                pod: "web-0",
                verdict: Verdict::Blocked,
                reason: "no eviction is ever allowed",
                needs: &[],
                surge: None,
            },
            Case {
                name: "user PDB minAvailable 100%",
                world: blocked_web("on", pct("100%"), None),
                pod: "web-0",
                verdict: Verdict::Blocked,
                reason: "minAvailable is 100%",
                needs: &[],
                surge: None,
            },
            Case {
                name: "Recreate strategy: no room to surge",
                world: world(|w| {
                    w.deploy("on", "web", &["n1", "n2", "n3"], |d| {
                        if let Some(s) = d.spec.as_mut() {
                            s.strategy = Some(DeploymentStrategy {
                                type_: Some("Recreate".into()),
                                rolling_update: None,
                            });
                        }
                    })
                    .add_pdb(pdb(
                        "on",
                        "web-pdb",
                        "web",
                        int(3),
                        None,
                        (0, 3, 3),
                    ));
                }),
                pod: "web-0",
                verdict: Verdict::Blocked,
                reason: "cannot surge Deployment web",
                needs: &[],
                surge: None,
            },
            Case {
                name: "maxSurge 2 surges by 2 for 2 displaced pods",
                world: world(|w| {
                    w.deploy("on", "web", &["n1", "n1", "n2"], |d| {
                        if let Some(s) = d.spec.as_mut() {
                            s.strategy = Some(DeploymentStrategy {
                                type_: Some("RollingUpdate".into()),
                                rolling_update: Some(RollingUpdateDeployment {
                                    max_surge: int(2),
                                    max_unavailable: None,
                                }),
                            });
                        }
                    })
                    .add_pdb(pdb(
                        "on",
                        "web-pdb",
                        "web",
                        int(3),
                        None,
                        (0, 3, 3),
                    ));
                }),
                pod: "web-0",
                verdict: Verdict::Surge,
                reason: "from 3 to 5",
                needs: &[],
                surge: Some((3, 5)),
            },
            Case {
                name: "a StatefulSet is not surged",
                world: world(|w| {
                    w.add_pod(owned(pod("on", "db-0", "db", "n1"), "StatefulSet", "db"))
                        .add_pdb(pdb("on", "db", "db", int(1), None, (0, 1, 1)));
                }),
                pod: "db-0",
                verdict: Verdict::Blocked,
                reason: "StatefulSet/db is not a Deployment",
                needs: &[],
                surge: None,
            },
            Case {
                name: "an unmanaged pod under a closed budget",
                world: world(|w| {
                    w.add_pod(pod("on", "bare", "bare", "n1")).add_pdb(pdb(
                        "on",
                        "b",
                        "bare",
                        int(1),
                        None,
                        (0, 1, 1),
                    ));
                }),
                pod: "bare",
                verdict: Verdict::Blocked,
                reason: "no controller",
                needs: &["--force"],
                surge: None,
            },
            Case {
                name: "two PDBs over one pod: the apiserver refuses",
                world: world(|w| {
                    w.deploy("on", "web", &["n1", "n2", "n3"], |_| {})
                        .add_pdb(pdb("on", "a", "web", int(1), None, (2, 3, 1)))
                        .add_pdb(pdb("on", "b", "web", int(1), None, (2, 3, 1)));
                }),
                pod: "web-0",
                verdict: Verdict::Blocked,
                reason: "selected by 2 PDBs (a, b)",
                needs: &[],
                surge: None,
            },
            Case {
                name: "KEDA and an HPA on one Deployment: no surge",
                world: world(|w| {
                    w.deploy("on", "web", &["n1", "n2", "n3"], |_| {})
                        .add_pdb(pdb("on", "web-pdb", "web", int(3), None, (0, 3, 3)));
                    w.objs.hpas.push(Arc::new(hpa("on", "web", 3)));
                    w.objs
                        .scaled_objects
                        .push(Arc::new(scaled_object("on", "web", 3)));
                }),
                pod: "web-0",
                verdict: Verdict::Blocked,
                reason: "a KEDA ScaledObject and an HPA (or two HPAs) both target this Deployment",
                needs: &[],
                surge: None,
            },
            Case {
                name: "KEDA holds the Deployment at its paused count: no surge",
                world: world(|w| {
                    w.deploy("on", "web", &["n1", "n2", "n3"], |_| {})
                        .add_pdb(pdb("on", "web-pdb", "web", int(3), None, (0, 3, 3)));
                    w.objs
                        .scaled_objects
                        .push(Arc::new(held_at("on", "web", 3, 3)));
                    w.objs
                        .hpas
                        .push(Arc::new(crate::surge::view::kedas_hpa("on", "web", 3, 3)));
                }),
                pod: "web-0",
                verdict: Verdict::Blocked,
                reason: "KEDA holds it at 3 replicas",
                needs: &[],
                surge: None,
            },
            Case {
                name: "an unready pod the policy lets go",
                world: world(|w| {
                    w.add_pod(not_ready(owned(
                        pod("on", "u", "u", "n1"),
                        "StatefulSet",
                        "u",
                    )));
                    let mut b = pdb("on", "u", "u", int(2), None, (0, 1, 2));
                    if let Some(s) = b.spec.as_mut() {
                        s.unhealthy_pod_eviction_policy = Some("AlwaysAllow".into());
                    }
                    w.add_pdb(b);
                }),
                pod: "u",
                verdict: Verdict::Free,
                reason: "unhealthyPodEvictionPolicy",
                needs: &[],
                surge: None,
            },
            Case {
                name: "an unready pod under IfHealthyBudget with too few healthy stays",
                world: world(|w| {
                    w.add_pod(not_ready(owned(
                        pod("on", "u", "u", "n1"),
                        "StatefulSet",
                        "u",
                    )))
                    .add_pdb(pdb("on", "u", "u", int(2), None, (0, 1, 2)));
                }),
                pod: "u",
                verdict: Verdict::Blocked,
                reason: "not a Deployment",
                needs: &[],
                surge: None,
            },
        ]
    }

    #[test]
    fn pod_verdicts() {
        for c in cases() {
            let p = run(&c.world, &["n1"]);
            let r = row(&p, c.pod);
            assert_eq!(r.verdict, c.verdict, "{}: {r:#?}", c.name);
            assert!(r.reason.contains(c.reason), "{}: {}", c.name, r.reason);
            assert_eq!(r.needs, c.needs, "{}", c.name);
            assert_eq!(
                r.surge.as_ref().map(|s| (s.from, s.to)),
                c.surge,
                "{}",
                c.name
            );
            assert_eq!(p.blocked, c.verdict == Verdict::Blocked, "{}", c.name);
        }
    }

    /// Two nodes drained together displace the pods of both: one larger surge.
    #[test]
    fn nodes_drained_together_share_one_surge() {
        let mut w = World::new();
        w.deploy("on", "web", &["n1", "n2", "n3", "n3"], |d| {
            if let Some(s) = d.spec.as_mut() {
                s.strategy = Some(DeploymentStrategy {
                    type_: Some("RollingUpdate".into()),
                    rolling_update: Some(RollingUpdateDeployment {
                        max_surge: pct("100%"),
                        max_unavailable: None,
                    }),
                });
            }
        })
        .add_pdb(pdb("on", "web-pdb", "web", int(4), None, (0, 4, 4)));
        let one = run(&w, &["n1"]);
        assert_eq!(row(&one, "web-0").surge.as_ref().map(|s| s.to), Some(5));
        let two = run(&w, &["n1", "n3"]);
        assert_eq!(two.nodes.len(), 2);
        assert_eq!(two.nodes[1].pods.len(), 2);
        for pod in ["web-0", "web-2", "web-3"] {
            assert_eq!(
                row(&two, pod).surge.as_ref().map(|s| (s.from, s.to)),
                Some((4, 7)),
                "{pod}"
            );
        }
        assert!(!two.blocked);
    }

    /// A surge already in place is reported as under way.
    #[test]
    fn an_active_surge_is_under_way() {
        let mut w = World::new();
        w.deploy("on", "web", &["n1", "n2", "n3", "n2"], |d| {
            d.metadata.annotations = Some(
                [
                    (
                        crate::names::ORIGINAL_MIN_REPLICAS.to_string(),
                        "3".to_string(),
                    ),
                    (crate::names::SURGE_REPLICAS.to_string(), "4".to_string()),
                ]
                .into(),
            );
        })
        .add_pdb(ours(pdb("on", "web", "web", int(3), None, (0, 3, 3))));
        let p = run(&w, &["n1"]);
        let r = row(&p, "web-0");
        assert_eq!(r.verdict, Verdict::Surge, "{r:#?}");
        assert_eq!(
            r.surge,
            Some(SurgePlan {
                deployment: "web".into(),
                from: 3,
                to: 4,
                under_way: true,
                object: "Deployment/web".into(),
            })
        );
        assert!(r.reason.contains("under way"), "{}", r.reason);
    }

    /// Under an HPA the surge raises its minimum; the report names it.
    #[test]
    fn a_surge_through_an_hpa_names_it() {
        let mut w = World::new();
        w.deploy("on", "web", &["n1", "n2", "n3", "n3"], |_| {})
            .add_pdb(ours(pdb("on", "web", "web", int(4), None, (0, 4, 4))));
        w.objs.hpas.push(Arc::new(hpa("on", "web", 4)));
        let p = run(&w, &["n1"]);
        let r = row(&p, "web-0");
        let s = r.surge.as_ref().unwrap_or_else(|| panic!("{r:#?}"));
        assert_eq!(
            (s.from, s.to, s.object.as_str()),
            (4, 5, "HorizontalPodAutoscaler/web-hpa")
        );
        assert!(
            r.reason
                .contains("from 4 to 5 (through HorizontalPodAutoscaler/web-hpa)"),
            "{}",
            r.reason
        );
    }

    /// Only pods of the named node are reported; a cordoned node says so.
    #[test]
    fn only_the_named_nodes() {
        let mut w = World::new();
        w.deploy("on", "web", &["n1", "n2"], |_| {});
        let mut n2 = (*w.objs.nodes[1]).clone();
        if let Some(s) = n2.spec.as_mut() {
            s.unschedulable = Some(true);
        }
        w.objs.nodes[1] = Arc::new(n2);
        let p = run(&w, &["n2"]);
        assert_eq!(p.nodes.len(), 1);
        assert!(p.nodes[0].draining);
        let names: Vec<&str> = p.nodes[0].pods.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, ["web-1"]);
    }
}
