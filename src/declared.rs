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
//!
//! The write guards test `ownedBy` on the live object, which a manifest
//! leaves there: a plan read before the apply may still land one write (our
//! controller reference), and the next pass takes it back. Its
//! `minAvailable` write tests the value read, so it fails on the manifest's.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ManagedFieldsEntry, ObjectMeta, Time};

use crate::names;

/// The annotation a client-side apply (`kubectl apply`) keeps its manifest in.
pub const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// The field manager of a client-side apply's patch.
const CLIENT_SIDE_APPLY: &str = "kubectl-client-side-apply";

/// `ownedBy` ([`names::OWNED_BY`]) in a managedFields entry's fieldsV1.
const OWNED_BY_FIELD: &str = "f:ownedBy";

/// Who declares this object in a manifest that leaves out our `ownedBy`:
/// the server-side apply's field manager, or `kubectl apply` for a
/// last-applied configuration with a spec. None for an object no manifest
/// declares, one whose manifest carries `ownedBy: EvictionAutoScaler`, or
/// one to which someone else (not us) gave `ownedBy` since that manifest
/// was applied (`kubectl annotate` of a PDB once applied: the Go project's
/// hand-over, behaviour.md section 3): the last word wins.
pub fn declared_by(meta: &ObjectMeta) -> Option<String> {
    let entries = meta.managed_fields.as_deref().unwrap_or_default();
    // The manifest that leaves ownedBy out, and when it was last applied
    // (None: not known).
    let mut declared: Option<(String, Option<&Time>)> = None;
    if let Some(applied) = meta.annotations.as_ref().and_then(|a| a.get(LAST_APPLIED)) {
        // Unreadable: someone applied it all the same, and a hand-over only
        // stops our writes.
        let v = serde_json::from_str::<serde_json::Value>(applied).ok();
        let with_spec = v
            .as_ref()
            .and_then(|v| v.as_object())
            .is_none_or(|o| o.contains_key("spec"));
        let carries_ours = v
            .as_ref()
            .and_then(|v| v.get("metadata")?.get("annotations")?.get(names::OWNED_BY))
            .is_some_and(|o| o == names::OWNED_BY_VALUE);
        if with_spec && !carries_ours {
            let at = entries
                .iter()
                .filter(|e| e.manager.as_deref() == Some(CLIENT_SIDE_APPLY))
                .filter_map(|e| e.time.as_ref())
                .max();
            declared = Some(("kubectl apply".to_string(), at));
        }
    }
    for e in entries {
        let applies = e.operation.as_deref() == Some("Apply")
            && e.manager.as_deref().is_some_and(|m| m != names::MANAGER);
        if applies && declares_spec(e) && !owns_owned_by(e) {
            let later = match &declared {
                None => true,
                Some((_, at)) => e.time.as_ref() > *at,
            };
            if later {
                declared = Some((e.manager.clone().unwrap_or_default(), e.time.as_ref()));
            }
        }
    }
    let (by, at) = declared?;
    let given_since = entries.iter().any(|e| {
        e.manager.as_deref() != Some(names::MANAGER)
            && owns_owned_by(e)
            && (at.is_none() || e.time.as_ref() >= at)
    });
    (!given_since).then_some(by)
}

fn declares_spec(e: &ManagedFieldsEntry) -> bool {
    e.fields_v1
        .as_ref()
        .is_some_and(|f| f.0.get("f:spec").is_some())
}

fn owns_owned_by(e: &ManagedFieldsEntry) -> bool {
    e.fields_v1.as_ref().is_some_and(|f| {
        f.0.get("f:metadata")
            .and_then(|m| m.get("f:annotations"))
            .and_then(|a| a.get(OWNED_BY_FIELD))
            .is_some()
    })
}

/// For the caches: an object with our `ownedBy` that a manifest declares
/// without it loses `ownedBy` in the cached copy, so that every reader of
/// the caches takes it for someone else's. Before the managedFields and the
/// last-applied configuration are dropped.
pub fn strip_declared(meta: &mut ObjectMeta) {
    if !crate::cache::carries_owned_by(meta) {
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
        let mut unreadable = ours();
        unreadable
            .annotations
            .get_or_insert_with(BTreeMap::new)
            .insert(LAST_APPLIED.into(), "{".into());
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
        let m = applied(json!({"metadata": {"annotations": {"ownedBy": "someone"}}, "spec": {}}));
        assert!(declared_by(&m).is_some());
    }

    fn at(mut e: ManagedFieldsEntry, secs: i64) -> ManagedFieldsEntry {
        e.time = Some(Time(
            k8s_openapi::jiff::Timestamp::from_second(1_800_000_000 + secs).unwrap(),
        ));
        e
    }

    fn annotate(manager: &str) -> ManagedFieldsEntry {
        entry(
            manager,
            "Update",
            json!({"f:metadata": {"f:annotations": {OWNED_BY_FIELD: {}}}}),
        )
    }

    #[test]
    fn the_last_word_wins() {
        assert_eq!(OWNED_BY_FIELD, format!("f:{}", names::OWNED_BY));
        // A PDB made with `kubectl apply`, then handed to us with `kubectl
        // annotate` (the Go project's way): ours.
        let mut m = applied(json!({"metadata": {"name": "web"}, "spec": {"minAvailable": 2}}));
        m.managed_fields = Some(vec![
            at(entry(CLIENT_SIDE_APPLY, "Update", SPEC()), 0),
            at(annotate("kubectl-annotate"), 60),
        ]);
        assert_eq!(declared_by(&m), None);
        // Applied again since, without it: the manifest's.
        m.managed_fields = Some(vec![
            at(annotate("kubectl-annotate"), 60),
            at(entry(CLIENT_SIDE_APPLY, "Update", SPEC()), 120),
        ]);
        assert_eq!(declared_by(&m).as_deref(), Some("kubectl apply"));
        // A tool's server-side apply after the annotation, and before it.
        let m = with_entries(vec![
            at(annotate("kubectl-annotate"), 60),
            at(entry("kustomize-controller", "Apply", SPEC()), 120),
        ]);
        assert_eq!(declared_by(&m).as_deref(), Some("kustomize-controller"));
        let m = with_entries(vec![
            at(entry("kustomize-controller", "Apply", SPEC()), 0),
            at(annotate("kubectl-annotate"), 60),
        ]);
        assert_eq!(declared_by(&m), None);
        // Our own ownership of the annotation, however recent, is no word of
        // the user's: the manifest still declares it.
        let m = with_entries(vec![
            at(entry("kustomize-controller", "Apply", SPEC()), 60),
            at(annotate(names::MANAGER), 120),
        ]);
        assert_eq!(declared_by(&m).as_deref(), Some("kustomize-controller"));
        // A client-side apply of labels only declares no budget.
        let m = applied(json!({"metadata": {"labels": {"team": "a"}}}));
        assert_eq!(declared_by(&m), None);
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
