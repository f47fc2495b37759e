//! Hand-built listings for the lint and preflight table tests.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec, DeploymentStrategy, ReplicaSet};
use k8s_openapi::api::autoscaling::v2::{
    CrossVersionObjectReference, HorizontalPodAutoscaler, HorizontalPodAutoscalerSpec,
};
use k8s_openapi::api::core::v1::{
    EmptyDirVolumeSource, Namespace, Node, NodeSpec, Pod, PodCondition, PodSpec, PodStatus,
    PodTemplateSpec, Volume,
};
use k8s_openapi::api::policy::v1::{
    PodDisruptionBudget, PodDisruptionBudgetSpec, PodDisruptionBudgetStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::core::DynamicObject;

use super::objects::Objects;
use crate::config::Behaviour;
use crate::names;

pub fn behaviour() -> Behaviour {
    Behaviour::default()
}

fn meta(ns: &str, name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        namespace: Some(ns.into()),
        ..Default::default()
    }
}

fn app(a: &str) -> BTreeMap<String, String> {
    [("app".to_string(), a.to_string())].into()
}

fn controller(kind: &str, name: &str) -> Option<Vec<OwnerReference>> {
    Some(vec![OwnerReference {
        kind: kind.into(),
        name: name.into(),
        controller: Some(true),
        api_version: "apps/v1".into(),
        uid: format!("uid-{name}"),
        ..Default::default()
    }])
}

/// A pod as the fixtures make it; adjust the fields in the test.
pub fn pod(ns: &str, name: &str, label: &str, node: &str) -> Pod {
    Pod {
        metadata: ObjectMeta {
            labels: Some(app(label)),
            ..meta(ns, name)
        },
        spec: Some(PodSpec {
            node_name: Some(node.into()),
            ..Default::default()
        }),
        status: Some(PodStatus {
            phase: Some("Running".into()),
            conditions: Some(vec![PodCondition {
                type_: "Ready".into(),
                status: "True".into(),
                ..Default::default()
            }]),
            ..Default::default()
        }),
    }
}

pub fn not_ready(mut p: Pod) -> Pod {
    if let Some(s) = p.status.as_mut() {
        s.conditions = Some(vec![PodCondition {
            type_: "Ready".into(),
            status: "False".into(),
            ..Default::default()
        }]);
    }
    p
}

pub fn owned(mut p: Pod, kind: &str, name: &str) -> Pod {
    p.metadata.owner_references = controller(kind, name);
    p
}

pub fn with_empty_dir(mut p: Pod) -> Pod {
    if let Some(s) = p.spec.as_mut() {
        s.volumes = Some(vec![Volume {
            name: "scratch".into(),
            empty_dir: Some(EmptyDirVolumeSource::default()),
            ..Default::default()
        }]);
    }
    p
}

pub fn phase(mut p: Pod, phase: &str) -> Pod {
    if let Some(s) = p.status.as_mut() {
        s.phase = Some(phase.into());
    }
    p
}

pub fn mirror(mut p: Pod) -> Pod {
    p.metadata.annotations = Some([("kubernetes.io/config.mirror".to_string(), "x".into())].into());
    p
}

/// A PDB over `app=label` with a status as the disruption controller would write it.
pub fn pdb(
    ns: &str,
    name: &str,
    label: &str,
    min: Option<IntOrString>,
    max: Option<IntOrString>,
    status: (i32, i32, i32),
) -> PodDisruptionBudget {
    let (allowed, healthy, desired) = status;
    PodDisruptionBudget {
        metadata: meta(ns, name),
        spec: Some(PodDisruptionBudgetSpec {
            min_available: min,
            max_unavailable: max,
            selector: Some(LabelSelector {
                match_labels: Some(app(label)),
                ..Default::default()
            }),
            ..Default::default()
        }),
        status: Some(PodDisruptionBudgetStatus {
            disruptions_allowed: allowed,
            current_healthy: healthy,
            desired_healthy: desired,
            expected_pods: healthy,
            ..Default::default()
        }),
    }
}

pub fn ours(mut b: PodDisruptionBudget) -> PodDisruptionBudget {
    b.metadata.annotations = Some(
        [(
            names::OWNED_BY.to_string(),
            names::OWNED_BY_VALUE.to_string(),
        )]
        .into(),
    );
    b
}

pub fn int(i: i32) -> Option<IntOrString> {
    Some(IntOrString::Int(i))
}

pub fn pct(s: &str) -> Option<IntOrString> {
    Some(IntOrString::String(s.into()))
}

pub fn hpa(ns: &str, target: &str, min: i32) -> HorizontalPodAutoscaler {
    HorizontalPodAutoscaler {
        metadata: meta(ns, &format!("{target}-hpa")),
        spec: Some(HorizontalPodAutoscalerSpec {
            min_replicas: Some(min),
            max_replicas: 20,
            scale_target_ref: CrossVersionObjectReference {
                kind: "Deployment".into(),
                name: target.into(),
                api_version: Some("apps/v1".into()),
            },
            ..Default::default()
        }),
        status: None,
    }
}

pub fn scaled_object(ns: &str, target: &str, min: i64) -> DynamicObject {
    crate::surge::view::scaled_object_of(ns, &format!("{target}-so"), target, min)
}

/// [`scaled_object`] paused with `paused-replicas: count`, applied by KEDA.
pub fn held_at(ns: &str, target: &str, min: i64, count: i32) -> DynamicObject {
    crate::surge::view::paused_at(scaled_object(ns, target, min), count)
}

/// A cluster of nodes n1..n3, namespaces `on` (enabled) and `off` (not).
pub struct World {
    pub objs: Objects,
}

impl World {
    pub fn new() -> World {
        let ns = |name: &str, enable: &str| {
            Arc::new(Namespace {
                metadata: ObjectMeta {
                    name: Some(name.into()),
                    annotations: Some([(names::ENABLE.to_string(), enable.to_string())].into()),
                    ..Default::default()
                },
                ..Default::default()
            })
        };
        let node = |name: &str| {
            Arc::new(Node {
                metadata: ObjectMeta {
                    name: Some(name.into()),
                    ..Default::default()
                },
                spec: Some(NodeSpec::default()),
                status: None,
            })
        };
        let mut objs = Objects::default();
        objs.nodes = vec![node("n1"), node("n2"), node("n3")];
        objs.namespaces = vec![ns("on", "true"), ns("off", "false")];
        World { objs }
    }

    /// A Deployment `name` (label app=name) with a ReplicaSet and one Ready
    /// pod on each of `nodes`; `edit` adjusts the Deployment.
    pub fn deploy(
        &mut self,
        ns: &str,
        name: &str,
        nodes: &[&str],
        edit: impl FnOnce(&mut Deployment),
    ) -> &mut World {
        let replicas = i32::try_from(nodes.len()).unwrap_or(0);
        let mut d = Deployment {
            metadata: meta(ns, name),
            spec: Some(DeploymentSpec {
                replicas: Some(replicas),
                selector: LabelSelector {
                    match_labels: Some(app(name)),
                    ..Default::default()
                },
                strategy: Some(DeploymentStrategy::default()),
                template: PodTemplateSpec {
                    metadata: Some(ObjectMeta {
                        labels: Some(app(name)),
                        ..Default::default()
                    }),
                    spec: None,
                },
                ..Default::default()
            }),
            status: None,
        };
        edit(&mut d);
        self.objs.deployments.push(Arc::new(d));
        let rs = format!("{name}-rs");
        self.objs.replicasets.push(Arc::new(ReplicaSet {
            metadata: ObjectMeta {
                owner_references: controller("Deployment", name),
                ..meta(ns, &rs)
            },
            ..Default::default()
        }));
        for (i, n) in nodes.iter().enumerate() {
            let p = owned(pod(ns, &format!("{name}-{i}"), name, n), "ReplicaSet", &rs);
            self.objs.pods.push(Arc::new(p));
        }
        self
    }

    pub fn add_pod(&mut self, p: Pod) -> &mut World {
        self.objs.pods.push(Arc::new(p));
        self
    }

    pub fn add_pdb(&mut self, b: PodDisruptionBudget) -> &mut World {
        self.objs.pdbs.push(Arc::new(b));
        self
    }
}
