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

use std::sync::Arc;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ManagedFieldsEntry, ObjectMeta};
use kube::core::DynamicObject;
use kube::Resource;
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

/// Someone else's copy of our surge markers, not a record of ours: both
/// markers owned (managedFields) by a manager that is not this product (nor
/// a client without a name, nor the Go project's), alone or beside us (an
/// apply of the very numbers we wrote shares them), and a value that is
/// not what our surge would have left: someone's, or not the copy's surged
/// number (and not set by the HPA controller, which clamps a surge of ours
/// at its maximum), or a copy that surges nothing. A GitOps source holding
/// a manifest taken mid-surge puts them back after each revert or
/// adoption: read as ours, each time they were adopted or cleaned (a
/// write, and an Event) and the tool wrote them again, a write loop. Read
/// as someone's, the value stays the tool's (a value someone set is what
/// the surge planner adopts anyway), and nothing of ours writes. Our own
/// surge owns its markers (its patch sets them), unless it wrote the very
/// numbers already there: then its value, the surged number, ours, keeps
/// it ours. Without managedFields, never.
pub fn foreign_markers(meta: &ObjectMeta, field: Field, value: Option<i32>) -> bool {
    let Some(m) = crate::markers::Markers::from_annotations(meta.annotations.as_ref()) else {
        return false;
    };
    if !(also_theirs(meta, names::SURGE_REPLICAS)
        && also_theirs(meta, names::ORIGINAL_MIN_REPLICAS))
    {
        return false;
    }
    let by = writer(meta, field);
    // Where the HPA controller clamps a surge of ours (at a maximum between
    // its baseline and its surge): still ours to take back.
    let clamp = by == ReplicasWriter::Autoscaler
        && value.is_some_and(|v| m.baseline < v && v < m.surged_to);
    by == ReplicasWriter::Someone
        || m.surged_to == m.baseline
        || (value != Some(m.surged_to) && !clamp)
}

/// [`foreign_markers`]: takes them (and the notes that go with our markers,
/// when as foreign) out of `meta`'s annotations, as the caches keep it, so
/// that no reader takes them for a surge. The map stays, even emptied: a
/// patch of ours then adds its keys one by one, never a whole new map over
/// annotations the cache does not show. Returns whether it did.
pub fn drop_foreign_markers(meta: &mut ObjectMeta, field: Field, value: Option<i32>) -> bool {
    if !foreign_markers(meta, field, value) {
        return false;
    }
    let theirs: Vec<&str> = crate::markers::Markers::CLEAR
        .iter()
        .map(|(k, _)| *k)
        .filter(|k| also_theirs(meta, k))
        .collect();
    let mut managers: Vec<&str> = annotation_owners(meta, names::SURGE_REPLICAS)
        .filter(|e| !could_be_ours(e))
        .filter_map(|e| e.manager.as_deref())
        .collect();
    managers.sort_unstable();
    managers.dedup();
    let managers = managers.join(", ");
    if let Some(a) = meta.annotations.as_mut() {
        for k in theirs {
            a.remove(k);
        }
        a.insert(crate::markers::FOREIGN.to_string(), managers);
    }
    true
}

/// An object whose value a surge changes: a Deployment, an HPA, a KEDA
/// ScaledObject (the only dynamic objects read as such).
pub trait SurgeTarget: Resource {
    /// The field, and its value as read.
    fn surge_value(&self) -> (Field, Option<i32>);
}

impl SurgeTarget for Deployment {
    fn surge_value(&self) -> (Field, Option<i32>) {
        (Field::Replicas, self.spec.as_ref().and_then(|s| s.replicas))
    }
}

impl SurgeTarget for HorizontalPodAutoscaler {
    fn surge_value(&self) -> (Field, Option<i32>) {
        let min = self.spec.as_ref().and_then(|s| s.min_replicas);
        (Field::MinReplicas, min)
    }
}

impl SurgeTarget for DynamicObject {
    fn surge_value(&self) -> (Field, Option<i32>) {
        let min = self.data["spec"]["minReplicaCount"]
            .as_i64()
            .and_then(|v| i32::try_from(v).ok());
        (Field::MinReplicaCount, min)
    }
}

/// [`drop_foreign_markers`] on an object of its own.
pub fn leave_out_copy<K: SurgeTarget>(k: &mut K) -> bool {
    let (field, value) = k.surge_value();
    drop_foreign_markers(k.meta_mut(), field, value)
}

/// [`drop_foreign_markers`] on a shared object: copied only when it
/// carries a copy to leave out.
pub fn without_copy<K: SurgeTarget + Clone>(k: Arc<K>) -> Arc<K> {
    let (field, value) = k.surge_value();
    if !foreign_markers(k.meta(), field, value) {
        return k;
    }
    let mut own = K::clone(&k);
    drop_foreign_markers(own.meta_mut(), field, value);
    Arc::new(own)
}

/// The managedFields entries that own annotation `key`.
fn annotation_owners<'a>(
    meta: &'a ObjectMeta,
    key: &'a str,
) -> impl Iterator<Item = &'a ManagedFieldsEntry> + 'a {
    let path = format!("f:{key}");
    meta.managed_fields.iter().flatten().filter(move |e| {
        e.fields_v1.as_ref().is_some_and(|f| {
            f.0.get("f:metadata")
                .and_then(|m| m.get("f:annotations"))
                .and_then(|a| a.get(path.as_str()))
                .is_some()
        })
    })
}

/// Annotation `key` is owned by someone who cannot be us, alone or beside us.
fn also_theirs(meta: &ObjectMeta, key: &str) -> bool {
    annotation_owners(meta, key).any(|e| !could_be_ours(e))
}

/// This product, an earlier build of it, or the Go project's client; or
/// the entry the apiserver merges the oldest Update managers into past ten,
/// or the one it gives every field of an object whose managedFields were
/// reset when it is next applied (ours may be among them: no evidence
/// either way).
fn could_be_ours(e: &ManagedFieldsEntry) -> bool {
    matches!(
        e.manager.as_deref(),
        None | Some(names::MANAGER | UNNAMED | GO_PROJECT | ANCIENT | BEFORE_FIRST_APPLY)
    )
}

/// The manager of the apiserver's merged entry (`ancient-changes`).
const ANCIENT: &str = "ancient-changes";
/// The manager the apiserver names for the fields an object had before its
/// first server-side apply when it kept no managedFields.
const BEFORE_FIRST_APPLY: &str = "before-first-apply";

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

    /// An entry owning the two markers (and `extra` annotations), and the
    /// value too when `value`.
    fn markers_entry(manager: &str, value: bool, extra: &[&str]) -> ManagedFieldsEntry {
        let mut ann = serde_json::Map::new();
        for k in [names::SURGE_REPLICAS, names::ORIGINAL_MIN_REPLICAS]
            .iter()
            .chain(extra)
        {
            ann.insert(format!("f:{k}"), json!({}));
        }
        let mut fields = json!({"f:metadata": {"f:annotations": ann}});
        if value {
            fields["f:spec"] = json!({"f:replicas": {}});
        }
        entry(manager, None, fields)
    }

    /// An entry owning the surge number alone (not the baseline).
    fn surge_marker_entry(manager: &str) -> ManagedFieldsEntry {
        entry(
            manager,
            None,
            json!({"f:metadata": {"f:annotations": {format!("f:{}", names::SURGE_REPLICAS): {}}}}),
        )
    }

    fn marked(entries: Vec<ManagedFieldsEntry>, baseline: &str, surged: &str) -> ObjectMeta {
        let mut m = meta(entries);
        m.annotations = Some(
            [
                (names::SURGE_REPLICAS, surged),
                (names::ORIGINAL_MIN_REPLICAS, baseline),
                ("team", "shop"),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        );
        m
    }

    #[test]
    fn a_copy_of_our_running_surge_applied_with_its_value_is_theirs() {
        // The tool applied our very numbers, value included: it shares
        // markers and value with us. Read as ours, the planner adopted the
        // value (someone set it) and wrote the markers n to n; the tool's
        // next sync put its baseline back, and so on (seen end to end).
        let m = marked(
            vec![
                markers_entry(names::MANAGER, true, &[]),
                markers_entry("argocd-controller", true, &[]),
            ],
            "3",
            "4",
        );
        assert!(foreign_markers(&m, Field::Replicas, Some(4)));
        // After such an adoption: the baseline the tool's (forced), the
        // surge number still shared.
        let surge_only = surge_marker_entry(names::MANAGER);
        let mut m = marked(
            vec![surge_only, markers_entry("argocd-controller", true, &[])],
            "3",
            "4",
        );
        assert!(foreign_markers(&m, Field::Replicas, Some(4)));
        // Both markers leave what the caches keep, shared or not.
        assert!(drop_foreign_markers(&mut m, Field::Replicas, Some(4)));
        assert_eq!(
            m.annotations
                .as_ref()
                .map(|a| a.keys().map(String::as_str).collect::<Vec<_>>()),
            Some(vec![crate::markers::FOREIGN, "team"])
        );
        assert_eq!(
            crate::markers::foreign_writers(m.annotations.as_ref()),
            Some("argocd-controller"),
            "named: the others, not us"
        );
    }

    /// A GitOps manifest taken mid-surge (replicas 4, markers 3 and 4),
    /// applied again by its tool: someone's, not ours.
    #[test]
    fn markers_and_value_written_by_someone_else_are_theirs() {
        let m = marked(
            vec![markers_entry("argocd-controller", true, &[])],
            "3",
            "4",
        );
        assert!(foreign_markers(&m, Field::Replicas, Some(4)));
        // The manifest without replicas: the value is ours (the revert's), at
        // the copy's baseline.
        let mut m = marked(
            vec![
                markers_entry("argocd-controller", false, &[]),
                replicas_entry(names::MANAGER, None),
            ],
            "3",
            "4",
        );
        assert!(foreign_markers(&m, Field::Replicas, Some(3)));
        // Our surge wrote the very numbers of the copy (their owner stays):
        // its value, the surged number and ours, keeps it ours.
        assert!(!foreign_markers(&m, Field::Replicas, Some(4)));
        // Made with the copy and no replicas (defaulted, no owner): theirs.
        let made = marked(
            vec![markers_entry("argocd-controller", false, &[])],
            "3",
            "4",
        );
        assert!(foreign_markers(&made, Field::Replicas, Some(1)));
        // A copy of an adopted surge (n to n): nothing to take back.
        let adopted = marked(
            vec![markers_entry("argocd-controller", false, &[])],
            "4",
            "4",
        );
        assert!(foreign_markers(&adopted, Field::Replicas, Some(4)));
        // Dropped from what the caches keep; the other annotations stay.
        assert!(drop_foreign_markers(&mut m, Field::Replicas, Some(3)));
        let left = m.annotations.as_ref().expect("the map stays");
        assert_eq!(
            left.iter()
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .collect::<Vec<_>>(),
            [
                (crate::markers::FOREIGN, "argocd-controller"),
                ("team", "shop")
            ]
        );
    }

    #[test]
    fn markers_we_own_or_share_are_ours() {
        // Written by our patch.
        let m = marked(vec![markers_entry(names::MANAGER, true, &[])], "3", "4");
        assert!(!foreign_markers(&m, Field::Replicas, Some(4)));
        // Applied by a tool with the same values as ours, without the
        // replicas (its manifest leaves them out): the markers are shared,
        // the value is our surge's; ours until the revert, after which the
        // tool's markers over our baseline are its own.
        let m = marked(
            vec![
                markers_entry(names::MANAGER, true, &[]),
                markers_entry("argocd-controller", false, &[]),
            ],
            "3",
            "4",
        );
        assert!(!foreign_markers(&m, Field::Replicas, Some(4)));
        // One marker edited by hand: the baseline is still our record.
        let edited = surge_marker_entry("kubectl-edit");
        let m = marked(
            vec![edited, markers_entry(names::MANAGER, true, &[])],
            "3",
            "5",
        );
        assert!(!foreign_markers(&m, Field::Replicas, Some(4)));
        // Both rewritten by hand over our surge, to numbers that are not its
        // value: theirs, the value left as it is (the planner would have
        // adopted it); at the surged number they write, still ours.
        let m = marked(
            vec![
                markers_entry("kubectl-edit", false, &[]),
                replicas_entry(names::MANAGER, None),
            ],
            "2",
            "5",
        );
        assert!(foreign_markers(&m, Field::Replicas, Some(4)));
        assert!(!foreign_markers(&m, Field::Replicas, Some(5)));
        // Our surge clamped by an HPA's maximum: the HPA controller's value,
        // ours to take back, so the markers stay read.
        let m = marked(
            vec![
                markers_entry("argocd-controller", false, &[]),
                replicas_entry(AUTOSCALER_MANAGER, Some("scale")),
            ],
            "3",
            "6",
        );
        assert!(!foreign_markers(&m, Field::Replicas, Some(5)));
        // Under an HPA holding the Deployment at the copy's baseline (the
        // tool's manifest has no replicas), or above the copy's surge on
        // metrics: the HPA's value, not a surge of ours; theirs.
        assert!(foreign_markers(&m, Field::Replicas, Some(3)));
        assert!(foreign_markers(&m, Field::Replicas, Some(7)));
        // Our entry merged by the apiserver with older ones: no evidence.
        let merged = marked(vec![markers_entry(ANCIENT, true, &[])], "3", "4");
        assert!(!foreign_markers(&merged, Field::Replicas, Some(4)));
        // Nor the apiserver's entry for what an object held before its first
        // apply, once its managedFields were reset.
        let reset = marked(
            vec![markers_entry(BEFORE_FIRST_APPLY, false, &[])],
            "3",
            "4",
        );
        assert!(!foreign_markers(&reset, Field::Replicas, Some(3)));
        // No managedFields (stripped): no evidence, ours.
        let mut m = marked(vec![], "3", "4");
        m.managed_fields = None;
        assert!(!foreign_markers(&m, Field::Replicas, Some(4)));
        assert!(!drop_foreign_markers(&mut m, Field::Replicas, Some(4)));
        assert_eq!(m.annotations.as_ref().map(|a| a.len()), Some(3));
    }

    /// The notes that go with the markers leave with them when theirs too
    /// (a cleaning of them alone would be the same loop); ours stay.
    #[test]
    fn notes_copied_with_the_markers_go_with_them() {
        let mut m = marked(
            vec![markers_entry(
                "argocd-controller",
                true,
                &[crate::markers::ADOPTED_DISPLACED],
            )],
            "3",
            "4",
        );
        if let Some(a) = m.annotations.as_mut() {
            a.insert(crate::markers::ADOPTED_DISPLACED.into(), "1".into());
            a.insert(crate::markers::TAKEN_OVER.into(), "4".into());
        }
        m.managed_fields.get_or_insert_with(Vec::new).push(entry(
            names::MANAGER,
            None,
            json!({"f:metadata": {"f:annotations": {format!("f:{}", crate::markers::TAKEN_OVER): {}}}}),
        ));
        assert!(drop_foreign_markers(&mut m, Field::Replicas, Some(4)));
        let left = m.annotations.as_ref().expect("the map stays");
        assert_eq!(
            left.keys().map(String::as_str).collect::<Vec<_>>(),
            [crate::markers::FOREIGN, crate::markers::TAKEN_OVER, "team"]
        );
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
