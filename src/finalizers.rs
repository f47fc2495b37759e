//! The Go project's finalizers on EvictionAutoScalers, and when they may go.
//!
//! Its current versions put `surge-revert` on every EvictionAutoScaler that
//! ever surged (its teardown reverts a surge still in place), and
//! `pdb-floor` (older: `pdb-floor-restore`) while a PDB of its name carries
//! the floor it pinned (its teardown puts the user's spec back). Once this
//! product has taken over, nothing else would remove them, and such a
//! record, deleted (its PDB deleted with its Deployment, the namespace out
//! of scope or deleted, `uninstall`), would stay Terminating for good: its
//! name taken, no new record made for a new PDB, the namespace's or the
//! CRD's deletion held.
//!
//! A finalizer goes only once what it guards is done: no marker of a surge
//! left on the target (our surge worker reverts every surge from its
//! markers, the Go project's included), and no floor of the Go project left
//! on a user's PDB of the record's name (we never restore a user's PDB
//! spec: that record stays Terminating, and `doctor` names it). In a
//! namespace being deleted, nothing is left to guard. Any other finalizer
//! is someone else's and stays.

use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use serde_json::{json, Value};

use crate::crd::EvictionAutoScaler;

pub const SURGE_REVERT: &str = "eviction-autoscaler.azure.com/surge-revert";
pub const PDB_FLOOR: &str = "eviction-autoscaler.azure.com/pdb-floor";
pub const PDB_FLOOR_RESTORE: &str = "eviction-autoscaler.azure.com/pdb-floor-restore";
/// Every finalizer of the Go project's on EvictionAutoScalers.
pub const GO_FINALIZERS: [&str; 3] = [SURGE_REVERT, PDB_FLOOR, PDB_FLOOR_RESTORE];
/// The Go project's annotations on a PDB whose floor it pinned.
pub const PINNED_FLOOR: &str = "eviction-autoscaler.azure.com/pinned-floor";
pub const ORIGINAL_PDB_SPEC: &str = "eviction-autoscaler.azure.com/original-pdb-spec";

/// Whether a PDB still carries a floor the Go project pinned (and would
/// restore on the record's deletion).
pub fn floor_pinned(pdb: &PodDisruptionBudget) -> bool {
    pdb.metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(PINNED_FLOOR) || a.contains_key(ORIGINAL_PDB_SPEC))
}

/// The Go project's finalizers that may go from `eas`, deleted and ours:
/// `surging` tells whether any object of its target (the Deployment, its
/// HPAs, its ScaledObjects) still carries a marker of a surge; `pdb` is the
/// PDB of the record's name, if any.
pub fn releasable(
    eas: &EvictionAutoScaler,
    surging: bool,
    pdb: Option<&PodDisruptionBudget>,
) -> Vec<String> {
    // While a surge's marker is left, nothing goes: a surge of the Go
    // project's older versions keeps its baseline in this record's status
    // until the surge worker has written it beside the marker (whatever
    // finalizer that version put on the record).
    if eas.metadata.deletion_timestamp.is_none()
        || !crate::cache::owned_by_us(&eas.metadata)
        || surging
    {
        return Vec::new();
    }
    // The floor is moot with no PDB of the record's own (gone, going, or
    // another one made under the name since), as the Go project decides,
    // and on a PDB of ours: its spec is ours to keep in line, not the
    // user's to restore.
    let floor_moot = pdb.is_none_or(|p| {
        p.metadata.deletion_timestamp.is_some()
            || !floor_pinned(p)
            || !same_pdb(eas, p)
            || crate::cache::owned_by_us(&p.metadata)
    });
    eas.metadata
        .finalizers
        .iter()
        .flatten()
        .filter(|f| match f.as_str() {
            SURGE_REVERT => true,
            PDB_FLOOR | PDB_FLOOR_RESTORE => floor_moot,
            _ => false,
        })
        .cloned()
        .collect()
}

/// The PDB the record was made for (its owner reference's UID); a record
/// with none is taken to be for the PDB of its name.
fn same_pdb(eas: &EvictionAutoScaler, pdb: &PodDisruptionBudget) -> bool {
    eas.metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.kind == "PodDisruptionBudget")
        .is_none_or(|o| Some(&o.uid) == pdb.metadata.uid.as_ref())
}

/// The JSON patch that removes `remove` from the finalizers read, guarded by
/// the record's UID and that list: a finalizer added or removed meanwhile
/// fails the patch, and the next pass decides again.
pub fn release_ops(uid: Option<&str>, read: &[String], remove: &[String]) -> Vec<Value> {
    let kept: Vec<&String> = read.iter().filter(|f| !remove.contains(f)).collect();
    vec![
        json!({"op": "test", "path": "/metadata/uid", "value": uid}),
        json!({"op": "test", "path": "/metadata/finalizers", "value": read}),
        json!({"op": "replace", "path": "/metadata/finalizers", "value": kept}),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::EvictionAutoScalerSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};

    const FOREIGN: &str = "example.com/keep";

    fn eas(finalizers: &[&str], deleted: bool, ours: bool) -> EvictionAutoScaler {
        EvictionAutoScaler {
            metadata: ObjectMeta {
                name: Some("web".into()),
                uid: Some("eas-1".into()),
                annotations: ours.then(|| {
                    [(
                        crate::names::OWNED_BY.to_string(),
                        crate::names::OWNED_BY_VALUE.to_string(),
                    )]
                    .into()
                }),
                finalizers: Some(finalizers.iter().map(|f| f.to_string()).collect()),
                deletion_timestamp: deleted
                    .then_some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH)),
                owner_references: Some(vec![OwnerReference {
                    kind: "PodDisruptionBudget".into(),
                    name: "web".into(),
                    uid: "pdb-1".into(),
                    ..Default::default()
                }]),
                ..Default::default()
            },
            spec: EvictionAutoScalerSpec {
                target_name: "web".into(),
                target_kind: "deployment".into(),
                last_eviction: None,
            },
            status: None,
        }
    }

    fn pdb(uid: &str, pinned: bool, deleted: bool) -> PodDisruptionBudget {
        PodDisruptionBudget {
            metadata: ObjectMeta {
                name: Some("web".into()),
                uid: Some(uid.into()),
                annotations: pinned.then(|| [(PINNED_FLOOR.to_string(), "2".to_string())].into()),
                deletion_timestamp: deleted
                    .then_some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH)),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    #[test]
    fn a_go_finalizer_goes_only_once_what_it_guards_is_done() {
        let all = [SURGE_REVERT, PDB_FLOOR, PDB_FLOOR_RESTORE, FOREIGN];
        let deleted = eas(&all, true, true);
        let pinned = pdb("pdb-1", true, false);
        let mut spec_only = pdb("pdb-1", false, false);
        spec_only.metadata.annotations =
            Some([(ORIGINAL_PDB_SPEC.to_string(), "{}".to_string())].into());
        let mut ours_pinned = pinned.clone();
        if let Some(a) = ours_pinned.metadata.annotations.as_mut() {
            a.insert(
                crate::names::OWNED_BY.into(),
                crate::names::OWNED_BY_VALUE.into(),
            );
        }
        type Case<'a> = (bool, Option<PodDisruptionBudget>, Vec<&'a str>);
        let cases: Vec<Case> = vec![
            // Nothing left to guard: both of the Go project's go, never
            // someone else's.
            (
                false,
                None,
                vec![SURGE_REVERT, PDB_FLOOR, PDB_FLOOR_RESTORE],
            ),
            (
                false,
                Some(pdb("pdb-1", false, false)),
                vec![SURGE_REVERT, PDB_FLOOR, PDB_FLOOR_RESTORE],
            ),
            // A surge's marker still on the target: its revert is not done,
            // and the record may hold its baseline (older Go versions).
            (true, None, vec![]),
            // The PDB still pinned: the Go project's restore is not done
            // (and not ours to do).
            (false, Some(pinned.clone()), vec![SURGE_REVERT]),
            (true, Some(pinned), vec![]),
            // Only original-pdb-spec left: still pinned.
            (false, Some(spec_only.clone()), vec![SURGE_REVERT]),
            // A pinned PDB of ours: its spec is ours, nothing to restore.
            (
                false,
                Some(ours_pinned),
                vec![SURGE_REVERT, PDB_FLOOR, PDB_FLOOR_RESTORE],
            ),
            // A pinned PDB being deleted, or another one under the name.
            (
                false,
                Some(pdb("pdb-1", true, true)),
                vec![SURGE_REVERT, PDB_FLOOR, PDB_FLOOR_RESTORE],
            ),
            (
                false,
                Some(pdb("pdb-2", true, false)),
                vec![SURGE_REVERT, PDB_FLOOR, PDB_FLOOR_RESTORE],
            ),
        ];
        for (surging, p, want) in cases {
            assert_eq!(
                releasable(&deleted, surging, p.as_ref()),
                want,
                "{surging} {p:?}"
            );
        }
        // Not deleted, or not ours: nothing.
        assert!(releasable(&eas(&all, false, true), false, None).is_empty());
        assert!(releasable(&eas(&all, true, false), false, None).is_empty());
    }

    #[test]
    fn the_release_keeps_every_other_finalizer_and_tests_the_list_read() {
        let e = eas(&[SURGE_REVERT, FOREIGN], true, true);
        let read = e.metadata.finalizers.clone().unwrap_or_default();
        let ops = release_ops(
            e.metadata.uid.as_deref(),
            &read,
            &[SURGE_REVERT.to_string()],
        );
        let mut doc = serde_json::to_value(&e).expect("serialize");
        let p: json_patch::Patch =
            serde_json::from_value(Value::Array(ops.clone())).expect("patch");
        json_patch::patch(&mut doc, &p).expect("applies to the record read");
        assert_eq!(doc["metadata"]["finalizers"], json!([FOREIGN]));
        // A finalizer added meanwhile fails the test: nothing written.
        let mut changed = serde_json::to_value(eas(&[SURGE_REVERT, FOREIGN, "x/y"], true, true))
            .expect("serialize");
        assert!(json_patch::patch(&mut changed, &p).is_err());
        // Another record made under the name fails it too.
        let mut other = e.clone();
        other.metadata.uid = Some("eas-2".into());
        let mut other = serde_json::to_value(other).expect("serialize");
        assert!(json_patch::patch(&mut other, &p).is_err());
    }
}
