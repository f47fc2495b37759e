//! A PDB (or EvictionAutoScaler) of ours that someone's manifest declares.
//!
//! The webhook makes a Deployment's PDB at its admission, named after it
//! (behaviour.md section 3). kustomize and Flux apply a PodDisruptionBudget
//! after the Deployment of the same manifest, so a manifest's PDB of the
//! Deployment's name lands on ours: `kubectl apply` patches it (no
//! last-applied configuration yet), a server-side apply takes its fields.
//! Either way our `ownedBy` stays on it, and keeping its `minAvailable` in
//! sync would set the manifest's value back at every sync: a write loop with
//! the tool, and the user's budget never kept.
//!
//! So an object a manifest declares without our `ownedBy` is not ours: a
//! client-side apply's last-applied configuration that does not carry it, or
//! a server-side apply by another manager that owns spec fields and not
//! `ownedBy`. [`crate::cache::owned_by_us`] says so on live objects; the
//! caches drop `ownedBy` from their copy ([`strip_declared`]), as they drop
//! the managedFields and the last-applied configuration. It is then handed
//! over as when `ownedBy` is removed: our controller reference goes, and the
//! PDB is never written again. A manifest that carries `ownedBy` hands it to
//! us (a copy of ours kept in Git), as adding `ownedBy` back does.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::names;

/// The annotation a client-side apply (`kubectl apply`) keeps its manifest in.
pub const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Who declares this object in a manifest that leaves out our `ownedBy`:
/// the server-side apply's field manager, or `kubectl apply` for the
/// last-applied configuration. None for an object no manifest declares, or
/// one whose manifest carries `ownedBy: EvictionAutoScaler`.
pub fn declared_by(meta: &ObjectMeta) -> Option<String> {
    if let Some(applied) = meta.annotations.as_ref().and_then(|a| a.get(LAST_APPLIED)) {
        // Unreadable: someone applied it all the same, and a hand-over only
        // stops our writes.
        let ours = serde_json::from_str::<serde_json::Value>(applied)
            .ok()
            .and_then(|v| {
                v.pointer(&format!(
                    "/metadata/annotations/{}",
                    crate::patch::escape(names::OWNED_BY)
                ))
                .and_then(|o| o.as_str().map(|o| o == names::OWNED_BY_VALUE))
            })
            .unwrap_or(false);
        if !ours {
            return Some("kubectl apply".to_string());
        }
    }
    let owned_by = format!("f:{}", names::OWNED_BY);
    meta.managed_fields
        .iter()
        .flatten()
        .filter(|e| e.operation.as_deref() == Some("Apply"))
        .filter(|e| e.manager.as_deref().is_some_and(|m| m != names::MANAGER))
        .find(|e| {
            e.fields_v1.as_ref().is_some_and(|f| {
                let declares_spec = f.0.get("f:spec").is_some();
                let carries_ours =
                    f.0.get("f:metadata")
                        .and_then(|m| m.get("f:annotations"))
                        .and_then(|a| a.get(owned_by.as_str()))
                        .is_some();
                declares_spec && !carries_ours
            })
        })
        .and_then(|e| e.manager.clone())
}

/// For the caches: an object with our `ownedBy` that a manifest declares
/// without it loses `ownedBy` in the cached copy, so that every reader of
/// the caches takes it for someone else's. Before the managedFields and the
/// last-applied configuration are dropped.
pub fn strip_declared(meta: &mut ObjectMeta) {
    let ours = meta
        .annotations
        .as_ref()
        .and_then(|a| a.get(names::OWNED_BY))
        .is_some_and(|v| v == names::OWNED_BY_VALUE);
    if !ours {
        return;
    }
    if let Some(by) = declared_by(meta) {
        tracing::debug!(namespace = ?meta.namespace, name = ?meta.name, declared_by = %by,
            "declared by a manifest without ownedBy: not ours");
        if let Some(a) = meta.annotations.as_mut() {
            a.remove(names::OWNED_BY);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry};
    use serde_json::{json, Value};
    use std::collections::BTreeMap;

    fn ours() -> ObjectMeta {
        ObjectMeta {
            name: Some("web".into()),
            annotations: Some(BTreeMap::from([
                (
                    names::OWNED_BY.to_string(),
                    names::OWNED_BY_VALUE.to_string(),
                ),
                (names::TARGET.to_string(), "web".to_string()),
            ])),
            ..ObjectMeta::default()
        }
    }

    fn entry(manager: &str, operation: &str, fields: Value) -> ManagedFieldsEntry {
        ManagedFieldsEntry {
            fields_type: Some("FieldsV1".into()),
            fields_v1: Some(FieldsV1(fields)),
            manager: Some(manager.into()),
            operation: Some(operation.into()),
            ..ManagedFieldsEntry::default()
        }
    }

    fn with_entries(entries: Vec<ManagedFieldsEntry>) -> ObjectMeta {
        ObjectMeta {
            managed_fields: Some(entries),
            ..ours()
        }
    }

    fn applied(manifest: Value) -> ObjectMeta {
        let mut m = ours();
        m.annotations
            .get_or_insert_with(BTreeMap::new)
            .insert(LAST_APPLIED.into(), manifest.to_string());
        m
    }

    const SPEC: fn() -> Value = || json!({"f:spec": {"f:minAvailable": {}, "f:selector": {}}});

    #[test]
    fn a_manifest_without_our_annotation_declares_it() {
        // Flux's server-side apply of the manifest's PDB over ours.
        let m = with_entries(vec![
            entry(names::MANAGER, "Update", SPEC()),
            entry("kustomize-controller", "Apply", SPEC()),
        ]);
        assert_eq!(declared_by(&m).as_deref(), Some("kustomize-controller"));
        // `kubectl apply` (client side): the manifest in the annotation.
        let m = applied(json!({"metadata": {"name": "web"}, "spec": {"minAvailable": 2}}));
        assert_eq!(declared_by(&m).as_deref(), Some("kubectl apply"));
        let unreadable = applied(json!("{"));
        assert!(declared_by(&unreadable).is_some());
    }

    #[test]
    fn ours_alone_and_edits_declare_nothing() {
        assert_eq!(declared_by(&ours()), None);
        // Our own writes, an edit (`kubectl edit` is an Update: set back as
        // before), an apply of labels only, our own apply.
        let m = with_entries(vec![
            entry(names::MANAGER, "Update", SPEC()),
            entry(
                "kubectl-edit",
                "Update",
                json!({"f:spec": {"f:minAvailable": {}}}),
            ),
            entry(
                "labeller",
                "Apply",
                json!({"f:metadata": {"f:labels": {"f:team": {}}}}),
            ),
            entry(names::MANAGER, "Apply", SPEC()),
        ]);
        assert_eq!(declared_by(&m), None);
    }

    #[test]
    fn a_manifest_that_carries_our_annotation_hands_it_to_us() {
        let fields = json!({
            "f:metadata": {"f:annotations": {"f:ownedBy": {}, "f:target": {}}},
            "f:spec": {"f:minAvailable": {}, "f:selector": {}},
        });
        let m = with_entries(vec![entry("argocd-controller", "Apply", fields)]);
        assert_eq!(declared_by(&m), None);
        let m = applied(json!({"metadata": {"annotations": {"ownedBy": "EvictionAutoScaler"}}}));
        assert_eq!(declared_by(&m), None);
        // Another value is not ours.
        let m = applied(json!({"metadata": {"annotations": {"ownedBy": "someone"}}}));
        assert!(declared_by(&m).is_some());
    }

    #[test]
    fn the_cached_copy_of_a_declared_object_is_not_ours_either() {
        let live = with_entries(vec![entry("kustomize-controller", "Apply", SPEC())]);
        assert!(!crate::cache::owned_by_us(&live));
        let mut cached = live.clone();
        crate::cache::strip_meta(&mut cached);
        assert_eq!(cached.managed_fields, None);
        assert!(!crate::cache::owned_by_us(&cached));
        assert_eq!(
            cached
                .annotations
                .as_ref()
                .and_then(|a| a.get(names::TARGET))
                .map(String::as_str),
            Some("web"),
            "only ownedBy goes from the copy"
        );
        let mut plain = with_entries(vec![entry(names::MANAGER, "Update", SPEC())]);
        assert!(crate::cache::owned_by_us(&plain));
        crate::cache::strip_meta(&mut plain);
        assert!(crate::cache::owned_by_us(&plain));
    }
}
