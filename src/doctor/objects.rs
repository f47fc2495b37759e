//! What the budget lint and the drain preflight read: one listing of the
//! cluster's objects, taken once. The checks are pure functions of it, so a
//! test builds one by hand; this file is the only one that talks to the API.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, OnceLock};

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::ListParams;
use kube::core::DynamicObject;
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;

use crate::budget::Selector;
use crate::cache::{keda_resource, PodWire, SlimCondition, SlimPod, SlimPodSpec, SlimPodStatus};
use crate::config::Behaviour;
use crate::surge::view::{ClusterView, Indexed};
use crate::surge::writer::{without_copy, SurgeTarget};

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
    /// Built on first use, once the lists are complete (a cluster has many
    /// pods; every rule looks within one namespace).
    index: OnceLock<Index>,
}

#[derive(Debug, Clone, Default)]
struct Index {
    /// Positions in `pods`, by namespace.
    pods: HashMap<String, Vec<usize>>,
    /// Positions in `pdbs`, by namespace.
    pdbs: HashMap<String, Vec<usize>>,
    /// Compiled selectors, by position in `pdbs` (`None`: invalid).
    selectors: Vec<Option<Selector>>,
    /// ReplicaSet (namespace, name) -> its controller.
    rs_owner: HashMap<(String, String), Option<OwnerReference>>,
}

/// Which namespaces to read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    All,
    Only(Vec<String>),
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
    SlimPod::from(PodWire {
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
    })
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
            // Listed above, or the doctor failed (a missing API is none).
            keda_unknown: false,
            // Not read by the doctor: a lone surge marker is shown as it is.
            eas_unknown: true,
        };
        let mut indexed = view.index();
        indexed.draining.extend(extra_draining.iter().cloned());
        indexed
    }
}

/// Page size of every list: a big cluster's pods arrive in pieces.
const PAGE: u32 = 500;

async fn list_params<K>(
    api: Api<K>,
    params: ListParams,
    what: &'static str,
) -> Result<Vec<Arc<K>>, ReadError>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    let mut out = Vec::new();
    let mut params = params.limit(PAGE);
    loop {
        let page = api
            .list(&params)
            .await
            .map_err(|source| ReadError::List { what, source })?;
        out.extend(page.items.into_iter().map(Arc::new));
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => return Ok(out),
        }
    }
}

async fn list<K>(api: Api<K>, what: &'static str) -> Result<Vec<Arc<K>>, ReadError>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    list_params(api, ListParams::default(), what).await
}

/// Lists in every namespace, or in each of `scope`'s.
async fn list_in<K>(
    client: &Client,
    scope: &Scope,
    what: &'static str,
) -> Result<Vec<Arc<K>>, ReadError>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug,
{
    match scope {
        Scope::All => list(Api::all(client.clone()), what).await,
        Scope::Only(namespaces) => {
            let mut out = Vec::new();
            for ns in namespaces {
                out.extend(list(Api::namespaced(client.clone(), ns), what).await?);
            }
            Ok(out)
        }
    }
}

/// ScaledObjects, or none when KEDA is not installed.
async fn scaled_objects(
    client: &Client,
    scope: &Scope,
) -> Result<Vec<Arc<DynamicObject>>, ReadError> {
    let ar = keda_resource();
    let apis: Vec<Api<DynamicObject>> = match scope {
        Scope::All => vec![Api::all_with(client.clone(), &ar)],
        Scope::Only(namespaces) => namespaces
            .iter()
            .map(|ns| Api::namespaced_with(client.clone(), ns, &ar))
            .collect(),
    };
    let mut out = Vec::new();
    for api in apis {
        match list_params(api, ListParams::default(), "ScaledObjects").await {
            Ok(items) => out.extend(items),
            Err(ReadError::List {
                source: kube::Error::Api(e),
                ..
            }) if e.code == 404 => return Ok(Vec::new()),
            Err(e) => return Err(e),
        }
    }
    Ok(out)
}

/// Every node.
pub async fn nodes(client: &Client) -> Result<Vec<Arc<Node>>, ReadError> {
    list(Api::all(client.clone()), "Nodes").await
}

/// The namespaces of the pods on these nodes (a field selector per node,
/// so a preflight reads only the namespaces it needs).
pub async fn namespaces_on(client: &Client, nodes: &[String]) -> Result<Vec<String>, ReadError> {
    let mut out = BTreeSet::new();
    for n in nodes {
        let params = ListParams::default().fields(&format!("spec.nodeName={n}"));
        let pods: Vec<Arc<Pod>> = list_params(Api::all(client.clone()), params, "Pods").await?;
        out.extend(pods.iter().map(|p| ns_of(p.as_ref()).to_string()));
    }
    Ok(out.into_iter().collect())
}

/// Reads the objects of `scope`, with `nodes` (listed by the caller) and every namespace.
pub async fn read(
    client: &Client,
    scope: &Scope,
    nodes: Vec<Arc<Node>>,
) -> Result<Objects, ReadError> {
    Ok(Objects {
        nodes,
        namespaces: list(Api::all(client.clone()), "Namespaces").await?,
        pods: list_in(client, scope, "Pods").await?,
        pdbs: list_in(client, scope, "PodDisruptionBudgets").await?,
        deployments: without_copies(list_in(client, scope, "Deployments").await?),
        replicasets: list_in(client, scope, "ReplicaSets").await?,
        hpas: without_copies(list_in(client, scope, "HorizontalPodAutoscalers").await?),
        scaled_objects: without_copies(scaled_objects(client, scope).await?),
        index: OnceLock::new(),
    })
}

/// The objects as the controllers' caches read them: copies of our surge
/// markers that someone else wrote are no surge
/// ([`crate::surge::writer::drop_foreign_markers`]).
fn without_copies<K: SurgeTarget + Clone>(objects: Vec<Arc<K>>) -> Vec<Arc<K>> {
    objects.into_iter().map(without_copy).collect()
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
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
        .is_some_and(|c| c.status == "True")
}

pub fn pod_node(p: &Pod) -> Option<&str> {
    p.spec.as_ref().and_then(|s| s.node_name.as_deref())
}

static NO_LABELS: BTreeMap<String, String> = BTreeMap::new();

fn labels_of(p: &Pod) -> &BTreeMap<String, String> {
    p.metadata.labels.as_ref().unwrap_or(&NO_LABELS)
}

impl Objects {
    fn index(&self) -> &Index {
        self.index.get_or_init(|| {
            let mut ix = Index::default();
            for (i, p) in self.pods.iter().enumerate() {
                ix.pods
                    .entry(ns_of(p.as_ref()).to_string())
                    .or_default()
                    .push(i);
            }
            for (i, b) in self.pdbs.iter().enumerate() {
                ix.pdbs
                    .entry(ns_of(b.as_ref()).to_string())
                    .or_default()
                    .push(i);
            }
            ix.selectors = self
                .pdbs
                .iter()
                .map(|b| Selector::compile(b.spec.as_ref().and_then(|s| s.selector.as_ref())).ok())
                .collect();
            for r in &self.replicasets {
                let key = (
                    ns_of(r.as_ref()).to_string(),
                    name_of(r.as_ref()).to_string(),
                );
                ix.rs_owner
                    .insert(key, crate::cache::controller_of(&r.metadata).cloned());
            }
            ix
        })
    }

    fn pods_in<'a>(&'a self, ns: &str) -> impl Iterator<Item = &'a Arc<Pod>> + 'a {
        let ix = self.index().pods.get(ns);
        ix.into_iter().flatten().filter_map(|&i| self.pods.get(i))
    }

    /// The namespace's PDBs with their compiled selectors.
    fn pdbs_in<'a>(
        &'a self,
        ns: &str,
    ) -> impl Iterator<Item = (&'a Arc<PodDisruptionBudget>, Option<&'a Selector>)> + 'a {
        let ix = self.index();
        ix.pdbs.get(ns).into_iter().flatten().filter_map(|&i| {
            let sel = ix.selectors.get(i).and_then(Option::as_ref);
            self.pdbs.get(i).map(|b| (b, sel))
        })
    }

    pub fn owner(&self, pod: &Pod) -> Owner {
        let Some(c) = crate::cache::controller_of(&pod.metadata) else {
            return Owner::None;
        };
        if c.kind == "ReplicaSet" {
            let key = (ns_of(pod).to_string(), c.name.clone());
            if let Some(Some(d)) = self.index().rs_owner.get(&key) {
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
        let labels = labels_of(pod);
        self.pdbs_in(ns_of(pod))
            .filter(|(_, sel)| sel.is_some_and(|s| s.selects_for_eviction(labels)))
            .map(|(b, _)| b)
            .collect()
    }

    /// The pods a PDB selects that count in its budget.
    pub fn pods_of(&self, pdb: &PodDisruptionBudget) -> Vec<&Arc<Pod>> {
        let Ok(sel) = Selector::compile(pdb.spec.as_ref().and_then(|s| s.selector.as_ref())) else {
            return Vec::new();
        };
        self.pods_in(ns_of(pdb))
            .filter(|p| !pod_gone(p))
            .filter(|p| sel.selects_for_eviction(labels_of(p)))
            .collect()
    }
}
