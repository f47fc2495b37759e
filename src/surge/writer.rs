//! Who last set the value a surge changes (a Deployment's `spec.replicas`,
//! an HPA's `spec.minReplicas`, a ScaledObject's `spec.minReplicaCount`),
//! read from the object's managedFields.
//!
//! Under an autoscaler surge the Deployment can reach our raised minimum in
//! two ways: the autoscaler lifts it (a smaller value, ours to take back) or
//! someone writes that number (theirs, to keep). The value alone cannot tell
//! them apart; the apiserver's field ownership can, in part: an Update takes
//! ownership of the fields it changes, and the HPA controller (also the one
//! behind every KEDA ScaledObject) writes through the scale subresource as
//! `kube-controller-manager`. Only a write through the Deployment itself is
//! taken for someone's value: through the scale subresource, a user's
//! `kubectl scale` and a controller's lift look alike.
//!
//! One gap, seen on a real apiserver (1.34): a write through the scale
//! subresource records an owner only if someone owns `spec.replicas`
//! already, and a scale to 0 leaves no owner (the Scale's `replicas` is
//! omitted when 0). After a `kubectl scale --replicas=0`, neither the user's
//! next `kubectl scale` nor the HPA's lift is recorded until someone writes
//! the replicas through the Deployment itself (`kubectl patch`, `apply`,
//! `edit`, GitOps, or a surge of ours).
//!
//! An autoscaler's minimum has no subresource and no controller writing it:
//! every write is someone's (`kubectl patch`, `apply`, `edit`, Helm, GitOps)
//! or ours, so the same rule reads it.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ManagedFieldsEntry, ObjectMeta};
use serde_json::json;

use crate::names;

/// The field manager of the HPA controller.
pub const AUTOSCALER_MANAGER: &str = "kube-controller-manager";

/// The manager the apiserver records for a client that sends no
/// User-Agent. Builds of this product before [`names::MANAGER`] wrote their
/// surges so; read as someone's value, a surge of theirs would stay.
const UNNAMED: &str = "unknown";

/// The Go project's client (its binary, `/manager`, names its User-Agent).
/// Its current versions write both markers with the surged value, on a
/// Deployment, an HPA or a ScaledObject, as this product does: read as
/// someone's value, a surge it left when this product took over would be
/// adopted and kept for good. No evidence either way, as for [`UNNAMED`].
const GO_PROJECT: &str = "manager";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplicasWriter {
    /// Only the HPA controller owns the value.
    Autoscaler,
    /// Some owner wrote through the Deployment itself and is not this
    /// product (`kubectl patch`, `edit`, `apply`, a GitOps tool), nor a
    /// client without a name (which earlier builds of this product were).
    Someone,
    /// Anything else: no evidence either way. An owner other than the HPA
    /// controller writing through the scale subresource may be a user
    /// (`kubectl scale`) or another controller lifting the Deployment to an
    /// autoscaler's minimum (KEDA's operator activating from 0), and taking
    /// such a lift for someone's value would strand the surge. Also only
    /// this product, or nothing recorded (managedFields stripped, or the gap
    /// above).
    Unknown,
}

/// The field a surge changes, by the kind of object that carries it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Field {
    /// A Deployment's `spec.replicas`.
    Replicas,
    /// An HPA's `spec.minReplicas`.
    MinReplicas,
    /// A KEDA ScaledObject's `spec.minReplicaCount`.
    MinReplicaCount,
}

impl Field {
    /// Its key under `f:spec` in a FieldsV1 set.
    fn key(self) -> &'static str {
        match self {
            Field::Replicas => "f:replicas",
            Field::MinReplicas => "f:minReplicas",
            Field::MinReplicaCount => "f:minReplicaCount",
        }
    }
}

fn owns(e: &ManagedFieldsEntry, field: Field) -> bool {
    e.fields_v1
        .as_ref()
        .is_some_and(|f| f.0.get("f:spec").and_then(|s| s.get(field.key())).is_some())
}

fn is_autoscaler(e: &ManagedFieldsEntry) -> bool {
    e.manager.as_deref() == Some(AUTOSCALER_MANAGER) && e.subresource.as_deref() == Some("scale")
}

/// Who set a Deployment's `spec.replicas`.
pub fn replicas_writer(meta: &ObjectMeta) -> ReplicasWriter {
    writer(meta, Field::Replicas)
}

/// Who set `field` of an object. Only a Deployment's replicas can be
/// [`ReplicasWriter::Autoscaler`]'s (the scale subresource).
pub fn writer(meta: &ObjectMeta, field: Field) -> ReplicasWriter {
    let owners: Vec<&ManagedFieldsEntry> = meta
        .managed_fields
        .iter()
        .flatten()
        .filter(|e| owns(e, field))
        .collect();
    if owners.is_empty() {
        ReplicasWriter::Unknown
    } else if owners.iter().all(|e| is_autoscaler(e)) {
        ReplicasWriter::Autoscaler
    } else if owners.iter().any(|e| {
        e.subresource.as_deref().unwrap_or_default().is_empty()
            && !matches!(
                e.manager.as_deref(),
                None | Some(names::MANAGER | UNNAMED | GO_PROJECT)
            )
    }) {
        ReplicasWriter::Someone
    } else {
        ReplicasWriter::Unknown
    }
}

/// What the caches keep of an object's managedFields: the owners of
/// `field` (manager, operation, subresource), nothing else.
pub fn keep_owners(meta: &mut ObjectMeta, field: Field) {
    let Some(entries) = meta.managed_fields.take() else {
        return;
    };
    let kept: Vec<ManagedFieldsEntry> = entries
        .into_iter()
        .filter(|e| owns(e, field))
        .map(|e| ManagedFieldsEntry {
            fields_type: e.fields_type,
            fields_v1: Some(only(field)),
            manager: e.manager,
            operation: e.operation,
            subresource: e.subresource,
            api_version: None,
            time: None,
        })
        .collect();
    meta.managed_fields = (!kept.is_empty()).then_some(kept);
}

fn only(field: Field) -> k8s_openapi::apimachinery::pkg::apis::meta::v1::FieldsV1 {
    k8s_openapi::apimachinery::pkg::apis::meta::v1::FieldsV1(json!({"f:spec": {field.key(): {}}}))
}

/// A managedFields entry owning `spec.replicas` (tests and the model).
#[cfg(test)]
pub fn replicas_entry(manager: &str, subresource: Option<&str>) -> ManagedFieldsEntry {
    field_entry(Field::Replicas, manager, subresource)
}

/// A managedFields entry owning `field` (tests and the model).
#[cfg(test)]
pub fn field_entry(field: Field, manager: &str, subresource: Option<&str>) -> ManagedFieldsEntry {
    ManagedFieldsEntry {
        fields_type: Some("FieldsV1".into()),
        fields_v1: Some(only(field)),
        manager: Some(manager.into()),
        operation: Some("Update".into()),
        subresource: subresource.map(str::to_string),
        api_version: Some("apps/v1".into()),
        time: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn entry(manager: &str, sub: Option<&str>, fields: Value) -> ManagedFieldsEntry {
        ManagedFieldsEntry {
            fields_type: Some("FieldsV1".into()),
            fields_v1: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::FieldsV1(
                fields,
            )),
            manager: Some(manager.into()),
            operation: Some("Update".into()),
            subresource: sub.map(str::to_string),
            api_version: Some("apps/v1".into()),
            time: None,
        }
    }

    fn meta(entries: Vec<ManagedFieldsEntry>) -> ObjectMeta {
        ObjectMeta {
            managed_fields: Some(entries),
            ..ObjectMeta::default()
        }
    }

    #[test]
    fn the_owner_of_replicas_decides() {
        let replicas = json!({"f:spec": {"f:replicas": {}}});
        let labels = json!({"f:metadata": {"f:labels": {}}, "f:spec": {"f:template": {}}});
        let cases = [
            // The HPA lifted it; the creator owns the rest of the object.
            (
                vec![
                    entry("kubectl-create", None, labels.clone()),
                    entry(AUTOSCALER_MANAGER, Some("scale"), replicas.clone()),
                ],
                ReplicasWriter::Autoscaler,
            ),
            // `kubectl patch`.
            (
                vec![
                    entry(AUTOSCALER_MANAGER, Some("scale"), labels.clone()),
                    entry("kubectl-patch", None, replicas.clone()),
                ],
                ReplicasWriter::Someone,
            ),
            // `kubectl scale`, or KEDA's operator: either may be a lift.
            (
                vec![entry("kubectl", Some("scale"), replicas.clone())],
                ReplicasWriter::Unknown,
            ),
            (
                vec![entry("keda-operator", Some("scale"), replicas.clone())],
                ReplicasWriter::Unknown,
            ),
            // The controller manager, but not through the scale subresource.
            (
                vec![entry(AUTOSCALER_MANAGER, None, replicas.clone())],
                ReplicasWriter::Someone,
            ),
            // A GitOps apply sharing the value with the HPA.
            (
                vec![
                    entry(AUTOSCALER_MANAGER, Some("scale"), replicas.clone()),
                    entry("argocd-controller", None, replicas.clone()),
                ],
                ReplicasWriter::Someone,
            ),
            (
                vec![entry(names::MANAGER, None, replicas.clone())],
                ReplicasWriter::Unknown,
            ),
            // The Go project's surge, taken over: theirs is ours to end.
            (
                vec![entry(GO_PROJECT, None, replicas.clone())],
                ReplicasWriter::Unknown,
            ),
            // A surge written by an earlier build (no User-Agent).
            (
                vec![entry(UNNAMED, None, replicas.clone())],
                ReplicasWriter::Unknown,
            ),
            (
                vec![entry("kubectl-create", None, labels)],
                ReplicasWriter::Unknown,
            ),
            (vec![], ReplicasWriter::Unknown),
        ];
        for (entries, want) in cases {
            assert_eq!(replicas_writer(&meta(entries.clone())), want, "{entries:?}");
        }
        assert_eq!(
            replicas_writer(&ObjectMeta::default()),
            ReplicasWriter::Unknown
        );
    }

    #[test]
    fn the_cache_keeps_only_the_owners_of_replicas() {
        let mut m = meta(vec![
            entry(
                "kubectl-create",
                None,
                json!({"f:metadata": {"f:labels": {}}, "f:spec": {"f:template": {}}}),
            ),
            entry(
                AUTOSCALER_MANAGER,
                Some("scale"),
                json!({"f:spec": {"f:replicas": {}}}),
            ),
        ]);
        keep_owners(&mut m, Field::Replicas);
        let kept = m.managed_fields.clone().unwrap_or_default();
        assert_eq!(kept.len(), 1);
        assert_eq!(kept[0].manager.as_deref(), Some(AUTOSCALER_MANAGER));
        assert_eq!(kept[0].time, None);
        assert_eq!(replicas_writer(&m), ReplicasWriter::Autoscaler);
        let mut none = meta(vec![entry("kubectl-create", None, json!({"f:spec": {}}))]);
        keep_owners(&mut none, Field::Replicas);
        assert_eq!(none.managed_fields, None);
    }

    #[test]
    fn an_autoscalers_minimum_is_read_from_its_own_field() {
        let min = json!({"f:spec": {"f:minReplicas": {}, "f:maxReplicas": {}}});
        let count = json!({"f:spec": {"f:minReplicaCount": {}}});
        let replicas = json!({"f:spec": {"f:replicas": {}}});
        let cases = [
            // `kubectl patch`, `edit`, Helm, GitOps: someone's.
            (
                Field::MinReplicas,
                vec![entry("kubectl-patch", None, min.clone())],
                ReplicasWriter::Someone,
            ),
            (
                Field::MinReplicaCount,
                vec![entry("helm", None, count.clone())],
                ReplicasWriter::Someone,
            ),
            // Our surge took the field.
            (
                Field::MinReplicas,
                vec![entry(names::MANAGER, None, min.clone())],
                ReplicasWriter::Unknown,
            ),
            // An owner of another field says nothing of this one.
            (
                Field::MinReplicas,
                vec![entry("kubectl-patch", None, replicas.clone())],
                ReplicasWriter::Unknown,
            ),
            (
                Field::MinReplicaCount,
                vec![entry("kubectl-patch", None, min.clone())],
                ReplicasWriter::Unknown,
            ),
            (
                Field::Replicas,
                vec![entry("kubectl-patch", None, min)],
                ReplicasWriter::Unknown,
            ),
        ];
        for (field, entries, want) in cases {
            assert_eq!(
                writer(&meta(entries.clone()), field),
                want,
                "{field:?} {entries:?}"
            );
        }
        let mut m = meta(vec![
            entry("kubectl-create", None, replicas),
            entry("keda-user", None, count),
        ]);
        keep_owners(&mut m, Field::MinReplicaCount);
        let kept = m.managed_fields.clone().unwrap_or_default();
        assert_eq!(kept.len(), 1);
        assert_eq!(kept[0].manager.as_deref(), Some("keda-user"));
        assert_eq!(writer(&m, Field::MinReplicaCount), ReplicasWriter::Someone);
    }
}
