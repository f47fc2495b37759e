//! What the budget lint and the drain preflight read: one listing of the
//! cluster's objects, taken once. The checks are pure functions of it, so a
//! test builds one by hand; this file is the only one that talks to the API.

use std::collections::BTreeSet;
use std::sync::Arc;

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::ListParams;
use kube::core::DynamicObject;
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;

use crate::cache::{keda_resource, SlimCondition, SlimPod, SlimPodSpec, SlimPodStatus};
use crate::config::Behaviour;
use crate::surge::view::{ClusterView, Indexed};

#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("cannot list {what}: {source}")]
    List {
        what: &'static str,
        #[source]
        source: kube::Error,
    },
}

/// The objects of the namespaces looked at, and every node.
#[derive(Debug, Clone, Default)]
pub struct Objects {
    pub nodes: Vec<Arc<Node>>,
    pub namespaces: Vec<Arc<Namespace>>,
    pub pods: Vec<Arc<Pod>>,
    pub pdbs: Vec<Arc<PodDisruptionBudget>>,
    pub deployments: Vec<Arc<Deployment>>,
    pub replicasets: Vec<Arc<ReplicaSet>>,
    pub hpas: Vec<Arc<HorizontalPodAutoscaler>>,
    pub scaled_objects: Vec<Arc<DynamicObject>>,
}

/// The namespace of an object (empty for cluster-scoped ones).
pub fn ns_of<K: Resource>(o: &K) -> &str {
    o.meta().namespace.as_deref().unwrap_or_default()
}

/// The name of an object.
pub fn name_of<K: Resource>(o: &K) -> &str {
    o.meta().name.as_deref().unwrap_or_default()
}

/// The fields of a pod the surge step reads, as the watch cache keeps them.
pub fn slim(p: &Pod) -> SlimPod {
    let status = p.status.as_ref();
    SlimPod {
        metadata: p.metadata.clone(),
        spec: SlimPodSpec {
            node_name: p.spec.as_ref().and_then(|s| s.node_name.clone()),
        },
        status: SlimPodStatus {
            phase: status.and_then(|s| s.phase.clone()),
            conditions: status
                .and_then(|s| s.conditions.as_ref())
                .into_iter()
                .flatten()
                .map(|c| SlimCondition {
                    type_: c.type_.clone(),
                    status: c.status.clone(),
                })
                .collect(),
        },
    }
}

impl Objects {
    /// The same view the surge worker plans from, indexed by namespace, with
    /// `extra_draining` counted as draining (the nodes a drain would cordon).
    pub fn surge_view(&self, behaviour: &Behaviour, extra_draining: &[String]) -> Indexed {
        let view = ClusterView {
            deployments: self.deployments.clone(),
            hpas: self.hpas.clone(),
            scaled_objects: self.scaled_objects.clone(),
            pdbs: self.pdbs.clone(),
            pods: self.pods.iter().map(|p| Arc::new(slim(p))).collect(),
            nodes: self.nodes.clone(),
            namespaces: self.namespaces.clone(),
            eas: Vec::new(),
            behaviour: Arc::new(behaviour.clone()),
            wall_now: None,
        };
        let mut indexed = view.index();
        indexed.draining.extend(extra_draining.iter().cloned());
        indexed
    }

    /// Names of the namespaces that hold pods on these nodes.
    pub fn namespaces_on(&self, nodes: &BTreeSet<String>) -> BTreeSet<String> {
        self.pods
            .iter()
            .filter(|p| {
                p.spec
                    .as_ref()
                    .and_then(|s| s.node_name.as_ref())
                    .is_some_and(|n| nodes.contains(n))
            })
            .map(|p| ns_of(p.as_ref()).to_string())
            .collect()
    }
}

async fn list<K>(api: Api<K>, what: &'static str) -> Result<Vec<Arc<K>>, ReadError>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    api.list(&ListParams::default())
        .await
        .map(|l| l.items.into_iter().map(Arc::new).collect())
        .map_err(|source| ReadError::List { what, source })
}

/// Lists in every namespace, or in each of `namespaces`.
async fn list_in<K>(
    client: &Client,
    namespaces: &[String],
    what: &'static str,
) -> Result<Vec<Arc<K>>, ReadError>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug,
{
    if namespaces.is_empty() {
        return list(Api::all(client.clone()), what).await;
    }
    let mut out = Vec::new();
    for ns in namespaces {
        out.extend(list(Api::namespaced(client.clone(), ns), what).await?);
    }
    Ok(out)
}

/// ScaledObjects, or none when KEDA is not installed.
async fn scaled_objects(
    client: &Client,
    namespaces: &[String],
) -> Result<Vec<Arc<DynamicObject>>, ReadError> {
    let ar = keda_resource();
    let apis: Vec<Api<DynamicObject>> = if namespaces.is_empty() {
        vec![Api::all_with(client.clone(), &ar)]
    } else {
        namespaces
            .iter()
            .map(|ns| Api::namespaced_with(client.clone(), ns, &ar))
            .collect()
    };
    let mut out = Vec::new();
    for api in apis {
        match api.list(&ListParams::default()).await {
            Ok(l) => out.extend(l.items.into_iter().map(Arc::new)),
            Err(kube::Error::Api(e)) if e.code == 404 => return Ok(Vec::new()),
            Err(source) => {
                return Err(ReadError::List {
                    what: "ScaledObjects",
                    source,
                })
            }
        }
    }
    Ok(out)
}

/// Reads the objects of `namespaces` (all when empty) and every node and namespace.
pub async fn read(client: &Client, namespaces: &[String]) -> Result<Objects, ReadError> {
    Ok(Objects {
        nodes: list(Api::all(client.clone()), "Nodes").await?,
        namespaces: list(Api::all(client.clone()), "Namespaces").await?,
        pods: list_in(client, namespaces, "Pods").await?,
        pdbs: list_in(client, namespaces, "PodDisruptionBudgets").await?,
        deployments: list_in(client, namespaces, "Deployments").await?,
        replicasets: list_in(client, namespaces, "ReplicaSets").await?,
        hpas: list_in(client, namespaces, "HorizontalPodAutoscalers").await?,
        scaled_objects: scaled_objects(client, namespaces).await?,
    })
}

/// What controls a pod, followed through its ReplicaSet to a Deployment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Owner {
    /// No controller reference: nothing replaces the pod.
    None,
    Deployment(String),
    /// Any other controller (`kind`, `name`): StatefulSet, DaemonSet, Job, a bare ReplicaSet...
    Other(String, String),
}

impl std::fmt::Display for Owner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Owner::None => write!(f, "-"),
            Owner::Deployment(n) => write!(f, "Deployment/{n}"),
            Owner::Other(k, n) => write!(f, "{k}/{n}"),
        }
    }
}

/// Not in the budget's count: completed, or on its way out.
pub fn pod_gone(p: &Pod) -> bool {
    p.metadata.deletion_timestamp.is_some()
        || matches!(
            p.status.as_ref().and_then(|s| s.phase.as_deref()),
            Some("Succeeded" | "Failed")
        )
}

pub fn pod_ready(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

pub fn pod_node(p: &Pod) -> Option<&str> {
    p.spec.as_ref().and_then(|s| s.node_name.as_deref())
}

impl Objects {
    pub fn owner(&self, pod: &Pod) -> Owner {
        let Some(c) = crate::cache::controller_of(&pod.metadata) else {
            return Owner::None;
        };
        if c.kind == "ReplicaSet" {
            let rs = self
                .replicasets
                .iter()
                .find(|r| ns_of(r.as_ref()) == ns_of(pod) && name_of(r.as_ref()) == c.name);
            if let Some(d) = rs.and_then(|r| crate::cache::controller_of(&r.metadata)) {
                if d.kind == "Deployment" {
                    return Owner::Deployment(d.name.clone());
                }
                return Owner::Other(d.kind.clone(), d.name.clone());
            }
        }
        Owner::Other(c.kind.clone(), c.name.clone())
    }

    /// The PDBs that protect this pod from eviction, as `eviction.go` picks them.
    pub fn pdbs_of(&self, pod: &Pod) -> Vec<&Arc<PodDisruptionBudget>> {
        let labels = pod.metadata.labels.clone().unwrap_or_default();
        self.pdbs
            .iter()
            .filter(|b| ns_of(b.as_ref()) == ns_of(pod))
            .filter(|b| {
                crate::budget::pdb_selects(
                    b.spec.as_ref().and_then(|s| s.selector.as_ref()),
                    &labels,
                )
            })
            .collect()
    }

    /// The pods a PDB selects that count in its budget.
    pub fn pods_of(&self, pdb: &PodDisruptionBudget) -> Vec<&Arc<Pod>> {
        let sel = pdb.spec.as_ref().and_then(|s| s.selector.as_ref());
        self.pods
            .iter()
            .filter(|p| ns_of(p.as_ref()) == ns_of(pdb) && !pod_gone(p))
            .filter(|p| {
                let labels = p.metadata.labels.clone().unwrap_or_default();
                crate::budget::pdb_selects(sel, &labels)
            })
            .collect()
    }
}
