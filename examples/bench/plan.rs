//! The reconciler's plan of one namespace at steady state: every
//! Deployment with its PDB, its EvictionAutoScaler and its pods, so the plan
//! has nothing to write. A namespace's plan runs at every change in it (a
//! pod made or gone marks it) and at each resync, so its cost should grow
//! with the namespace's size, not with its square.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Instant;

use eviction_autoscaler::cache::{PodWire, SlimPod};
use eviction_autoscaler::crd::{
    EvictionAutoScaler, EvictionAutoScalerSpec, EvictionAutoScalerStatus,
};
use eviction_autoscaler::names;
use eviction_autoscaler::reconcile::plan::{plan, Action, NamespaceSnapshot};
use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};

const NS: &str = "bench";

/// One namespace's objects, as the reconciler's job reads them.
pub struct Namespace {
    deployments: Vec<Arc<Deployment>>,
    pdbs: Vec<Arc<PodDisruptionBudget>>,
    eas: Vec<Arc<EvictionAutoScaler>>,
    pods: Vec<Arc<SlimPod>>,
}

fn deployment(i: usize) -> Deployment {
    let app = format!("app-{i:05}");
    let labels: BTreeMap<String, String> = [("app".to_string(), app.clone())].into();
    let mut template = labels.clone();
    template.insert("tier".into(), "web".into());
    Deployment {
        metadata: ObjectMeta {
            name: Some(app.clone()),
            namespace: Some(NS.into()),
            uid: Some(format!("dep-{i}")),
            ..Default::default()
        },
        spec: Some(DeploymentSpec {
            replicas: Some(3),
            selector: LabelSelector {
                match_labels: Some(labels),
                ..Default::default()
            },
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(template),
                    ..Default::default()
                }),
                spec: None,
            },
            ..Default::default()
        }),
        status: None,
    }
}

fn record(
    name: &str,
    target: &str,
    owner: Option<OwnerReference>,
    pdb_uid: Option<String>,
) -> EvictionAutoScaler {
    EvictionAutoScaler {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(NS.into()),
            uid: Some(format!("eas-{name}")),
            annotations: Some(
                [(
                    names::OWNED_BY.to_string(),
                    names::OWNED_BY_VALUE.to_string(),
                )]
                .into(),
            ),
            owner_references: owner.map(|o| vec![o]),
            ..Default::default()
        },
        spec: EvictionAutoScalerSpec {
            target_name: target.into(),
            target_kind: "deployment".into(),
            last_eviction: None,
        },
        status: Some(EvictionAutoScalerStatus {
            pdb_uid,
            ..Default::default()
        }),
    }
}

impl Namespace {
    /// `n` Deployments of 3 pods each, their PDBs and records made by the
    /// planner itself (its writes applied until it plans none).
    pub fn steady(n: usize) -> Result<Namespace, String> {
        let deployments: Vec<Arc<Deployment>> = (0..n).map(|i| Arc::new(deployment(i))).collect();
        let mut pods = Vec::new();
        for i in 0..n {
            let app = format!("app-{i:05}");
            for k in 0..3 {
                let mut v = crate::pod_json(NS, i * 3 + k, &app, &format!("node-{}", (i + k) % 50));
                v["metadata"]["labels"]["tier"] = "web".into();
                let w: PodWire = serde_json::from_value(v).map_err(|e| e.to_string())?;
                pods.push(Arc::new(SlimPod::from(&w)));
            }
        }
        let mut ns = Namespace {
            deployments,
            pdbs: Vec::new(),
            eas: Vec::new(),
            pods,
        };
        for _ in 0..4 {
            let actions = ns.plan();
            if actions.is_empty() {
                return Ok(ns);
            }
            for a in actions {
                ns.apply(a)?;
            }
        }
        Err(format!(
            "not steady after 4 rounds: {:?}",
            ns.plan().first()
        ))
    }

    /// What the reconciler's write of `a` leaves in the caches.
    fn apply(&mut self, a: Action) -> Result<(), String> {
        match a {
            Action::CreatePdb(mut p) => {
                let name = p.metadata.name.clone().unwrap_or_default();
                p.metadata.uid = Some(format!("pdb-{name}"));
                p.metadata.creation_timestamp =
                    Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                        k8s_openapi::jiff::Timestamp::now(),
                    ));
                self.pdbs.push(Arc::new(*p));
            }
            Action::CreateEas {
                name,
                target,
                owner,
                pdb_uid,
            } => self
                .eas
                .push(Arc::new(record(&name, &target, owner, pdb_uid))),
            Action::SetOwner { pdb, owner } => {
                let p = self
                    .pdbs
                    .iter_mut()
                    .find(|p| p.metadata.name.as_deref() == Some(pdb.as_str()))
                    .ok_or_else(|| format!("SetOwner of a PDB not there: {pdb}"))?;
                Arc::make_mut(p).metadata.owner_references = Some(vec![owner]);
            }
            other => return Err(format!("a steady namespace plans no {other:?}")),
        }
        Ok(())
    }

    pub fn plan(&self) -> Vec<Action> {
        let (keda, surging, deleting) = (BTreeMap::new(), BTreeSet::new(), BTreeSet::new());
        let snapshot = NamespaceSnapshot {
            name: NS,
            in_scope: true,
            pdb_create: true,
            deployments: &self.deployments,
            pdbs: &self.pdbs,
            hpas: &[],
            keda_min: &keda,
            keda_unknown: false,
            eas: Some(&self.eas),
            pods: Some(&self.pods),
            pdb_age_secs: &|_| 3600,
            orphan_grace_secs: 60,
            surging: &surging,
            deleting: &deleting,
        };
        plan(&snapshot)
    }
}

/// Milliseconds per plan of a steady namespace of `n` Deployments (mean of
/// enough rounds to take about `budget_ms`).
pub fn time_plan(n: usize, budget_ms: f64) -> Result<f64, String> {
    let ns = Namespace::steady(n)?;
    let start = Instant::now();
    std::hint::black_box(ns.plan());
    let once = start.elapsed().as_secs_f64() * 1e3;
    let rounds = ((budget_ms / once.max(1e-3)) as usize).clamp(1, 10_000);
    let start = Instant::now();
    for _ in 0..rounds {
        std::hint::black_box(ns.plan());
    }
    Ok(start.elapsed().as_secs_f64() * 1e3 / rounds as f64)
}
