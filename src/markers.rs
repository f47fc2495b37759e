//! The surge markers (behaviour.md section 1): `original-min-replicas` (the
//! baseline) and `evictionSurgeReplicas` (the value the surge set), on the
//! object the surge changed. The one parser and the one writer of both, so
//! every reader (webhook message, PDB floor, KEDA minimum, surge worker,
//! uninstall) agrees on what counts as a surge.

use std::collections::BTreeMap;

use crate::names;

/// The persisted surge state on the applier object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Markers {
    /// `original-min-replicas`: the value before the surge.
    pub baseline: i32,
    /// `evictionSurgeReplicas`: the value the surge set.
    pub surged_to: i32,
}

impl Markers {
    /// Both annotations present and integers (surrounding blanks ignored);
    /// anything else is no surge we manage.
    pub fn from_annotations(annotations: Option<&BTreeMap<String, String>>) -> Option<Markers> {
        let get = |k: &str| {
            annotations
                .and_then(|a| a.get(k))
                .and_then(|v| v.trim().parse::<i32>().ok())
        };
        Some(Markers {
            baseline: get(names::ORIGINAL_MIN_REPLICAS)?,
            surged_to: get(names::SURGE_REPLICAS)?,
        })
    }

    /// Does the object carry any of our surge annotations (even a malformed
    /// one)? Such an object is ours to clean up.
    pub fn any_present(annotations: Option<&BTreeMap<String, String>>) -> bool {
        annotations.is_some_and(|a| Markers::CLEAR.iter().any(|(k, _)| a.contains_key(*k)))
    }

    /// The annotations to write (with the value, in one patch).
    pub fn to_annotations(self) -> [(&'static str, String); 2] {
        [
            (names::SURGE_REPLICAS, self.surged_to.to_string()),
            (names::ORIGINAL_MIN_REPLICAS, self.baseline.to_string()),
        ]
    }

    /// Annotation changes that set these markers.
    pub fn set_changes(self) -> [(&'static str, Option<String>); 2] {
        let [a, b] = self.to_annotations();
        [(a.0, Some(a.1)), (b.0, Some(b.1))]
    }

    /// Annotation changes that remove both markers (and the adoption and
    /// take-over notes).
    pub const CLEAR: [(&'static str, Option<String>); 4] = [
        (names::SURGE_REPLICAS, None),
        (names::ORIGINAL_MIN_REPLICAS, None),
        (ADOPTED_DISPLACED, None),
        (TAKEN_OVER, None),
    ];

    /// Could we have written these? A surge never goes below its baseline
    /// and no baseline is negative; other numbers (edited, or copied in a
    /// manifest) are no surge of ours, and the surge planner takes the
    /// value in place as the user's.
    pub fn plausible(self) -> bool {
        self.baseline >= 0 && self.surged_to >= self.baseline
    }

    /// The value `v`, last written by the HPA controller (`by_autoscaler`:
    /// or by no one the managedFields name, as a lift is read),
    /// is an HPA's maxReplicas (of `maxima`) between our baseline and our
    /// surge: the autoscaler clamped our surge there (an HPA made or edited
    /// mid-surge). The rest of the surge is still ours to take back; a
    /// scale-down on metrics to another number is the HPA's own.
    pub fn clamped_at(
        self,
        v: i32,
        by_autoscaler: bool,
        mut maxima: impl Iterator<Item = i32>,
    ) -> bool {
        by_autoscaler
            && self.plausible()
            && self.baseline < v
            && v < self.surged_to
            && maxima.any(|m| m == v)
    }

    /// The value not counting our surge: the baseline when markers we could
    /// have written are present, else `current` (a PDB floor of a marker's
    /// -1 is refused by the apiserver, one of 10 over 3 pods blocks every
    /// eviction until the planner adopts the value in place).
    pub fn baseline_or(annotations: Option<&BTreeMap<String, String>>, current: i32) -> i32 {
        Markers::from_annotations(annotations)
            .filter(|m| m.plausible())
            .map_or(current, |m| m.baseline)
    }
}

/// A surge left by the Go project's older versions (behaviour.md names both
/// markers; those versions wrote `evictionSurgeReplicas` alone on a
/// Deployment and kept the baseline in the EvictionAutoScaler's
/// `status.minReplicas`): the lone marker is an integer equal to `replicas`,
/// and an EvictionAutoScaler of the namespace targeting `deployment`, whose
/// status this product has not written yet, records a baseline from 1 to
/// below it (the reconciler leaves that status alone meanwhile). Read so the surge goes back to that
/// baseline instead of the lone marker being cleaned and the surged number
/// kept for good; anything less certain is no surge we manage.
pub fn legacy_surge(
    deployment: &str,
    annotations: Option<&BTreeMap<String, String>>,
    replicas: Option<i32>,
    eas: &[std::sync::Arc<crate::crd::EvictionAutoScaler>],
) -> Option<Markers> {
    let surged_to = lone_marker_at(annotations, replicas)?;
    let mut baselines = eas
        .iter()
        .filter(|e| e.spec.target_name.eq_ignore_ascii_case(deployment))
        .filter(|e| e.spec.target_kind.eq_ignore_ascii_case("deployment"))
        // Its record, not ours: this product's status carries
        // `baselineReplicas` and sets `minReplicas` to the PDB's minimum.
        .filter_map(|e| e.status.as_ref().filter(|s| s.baseline_replicas.is_none()))
        .filter_map(|s| s.min_replicas)
        .filter(|m| (1..surged_to).contains(m));
    let baseline = baselines.next()?;
    // Two records that disagree: no baseline to trust.
    if baselines.any(|m| m != baseline) {
        return None;
    }
    Some(Markers {
        baseline,
        surged_to,
    })
}

/// `evictionSurgeReplicas` alone, an integer equal to `replicas`: what a
/// surge of the Go project's older versions looks like (see
/// [`legacy_surge`]); its value.
pub fn lone_marker_at(
    annotations: Option<&BTreeMap<String, String>>,
    replicas: Option<i32>,
) -> Option<i32> {
    let a = annotations?;
    if a.contains_key(names::ORIGINAL_MIN_REPLICAS) {
        return None;
    }
    let surged_to = a.get(names::SURGE_REPLICAS)?.trim().parse::<i32>().ok()?;
    (replicas == Some(surged_to)).then_some(surged_to)
}

/// Written with the baseline of a surge taken over from the Go project
/// ([`legacy_surge`]), to the replicas it found: that value, though last
/// written by the Go project's client (not us, not an autoscaler), is the
/// surge's and not someone's to keep. Removed with the markers.
pub const TAKEN_OVER: &str = "eviction-autoscaler.azure.com/taken-over";

/// Never on the server: what the caches put on an object in place of copies
/// of our markers that someone else wrote
/// ([`crate::surge::writer::drop_foreign_markers`]), naming their field
/// managers. The surge worker does not surge through such an object (its
/// surge would be overwritten by the copy at the next sync, and surged
/// again, a write loop), and says why. Not among [`Markers::CLEAR`]: no
/// write of ours ever sets or removes it.
pub const FOREIGN: &str = "eviction-autoscaler.azure.com/markers-written-by";

/// The managers named by [`FOREIGN`], if the object carries it.
pub fn foreign_writers(annotations: Option<&BTreeMap<String, String>>) -> Option<&str> {
    annotations.and_then(|a| a.get(FOREIGN)).map(String::as_str)
}

/// Ours, beside the markers: set when a user's change during a surge is
/// adopted, to the number of displaced pods counted then. The episode is not
/// surged again unless more pods are displaced (behaviour.md section 5), so a
/// GitOps tool that re-asserts its value never alternates with us.
pub const ADOPTED_DISPLACED: &str = "eviction-autoscaler.azure.com/adopted-displaced";

/// The adoption note, if present and an integer.
pub fn adopted_displaced(annotations: Option<&BTreeMap<String, String>>) -> Option<i32> {
    annotations
        .and_then(|a| a.get(ADOPTED_DISPLACED))
        .and_then(|v| v.trim().parse::<i32>().ok())
}

#[cfg(test)]
pub mod tests {
    use super::*;
    use crate::crd::{EvictionAutoScaler, EvictionAutoScalerSpec, EvictionAutoScalerStatus};
    use std::sync::Arc;

    /// An EvictionAutoScaler targeting `target` with `status.minReplicas`;
    /// `ours`: its status written by this product (`baselineReplicas` set).
    pub fn record(target: &str, min: i32, ours: bool) -> Arc<EvictionAutoScaler> {
        let mut e = EvictionAutoScaler::new(
            target,
            EvictionAutoScalerSpec {
                target_name: target.into(),
                target_kind: "deployment".into(),
                last_eviction: None,
            },
        );
        e.status = Some(EvictionAutoScalerStatus {
            min_replicas: Some(min),
            baseline_replicas: ours.then_some(min),
            ..Default::default()
        });
        Arc::new(e)
    }

    #[test]
    fn a_lone_marker_of_the_go_project_is_read_with_its_records_baseline() {
        let lone = |v: &str| -> BTreeMap<String, String> {
            [(names::SURGE_REPLICAS.to_string(), v.to_string())].into()
        };
        let go = [record("web", 3, false)];
        let m = Some(Markers {
            baseline: 3,
            surged_to: 5,
        });
        assert_eq!(legacy_surge("web", Some(&lone("5")), Some(5), &go), m);
        assert_eq!(legacy_surge("Web", Some(&lone(" 5 ")), Some(5), &go), m);
        // Not at the marker's value: someone changed it; no surge of ours.
        assert_eq!(legacy_surge("web", Some(&lone("5")), Some(4), &go), None);
        assert_eq!(legacy_surge("web", Some(&lone("x")), Some(5), &go), None);
        assert_eq!(legacy_surge("web", None, Some(5), &go), None);
        // Both markers: ours, read by `from_annotations`.
        let mut both = lone("5");
        both.insert(names::ORIGINAL_MIN_REPLICAS.into(), "3".into());
        assert_eq!(legacy_surge("web", Some(&both), Some(5), &go), None);
        // No record, another target's, one this product wrote, one not below
        // the surge or not above 0, two that disagree: no baseline to trust.
        assert_eq!(legacy_surge("web", Some(&lone("5")), Some(5), &[]), None);
        let other = [record("api", 3, false)];
        assert_eq!(legacy_surge("web", Some(&lone("5")), Some(5), &other), None);
        let ours = [record("web", 3, true)];
        assert_eq!(legacy_surge("web", Some(&lone("5")), Some(5), &ours), None);
        for min in [0, 5, 6] {
            let r = [record("web", min, false)];
            assert_eq!(legacy_surge("web", Some(&lone("5")), Some(5), &r), None);
        }
        let split = [record("web", 3, false), record("web", 2, false)];
        assert_eq!(legacy_surge("web", Some(&lone("5")), Some(5), &split), None);
        let agree = [record("web", 3, false), record("web", 3, false)];
        assert_eq!(legacy_surge("web", Some(&lone("5")), Some(5), &agree), m);
    }

    #[test]
    fn markers_round_trip() {
        let m = Markers {
            baseline: 3,
            surged_to: 5,
        };
        let ann: BTreeMap<String, String> = m
            .to_annotations()
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
        assert_eq!(ann[names::SURGE_REPLICAS], "5");
        assert_eq!(ann[names::ORIGINAL_MIN_REPLICAS], "3");
        assert_eq!(Markers::from_annotations(Some(&ann)), Some(m));
        assert_eq!(Markers::from_annotations(None), None);
        assert!(Markers::any_present(Some(&ann)));
        let mut half = ann.clone();
        half.remove(names::SURGE_REPLICAS);
        assert_eq!(Markers::from_annotations(Some(&half)), None);
        assert!(Markers::any_present(Some(&half)));
        assert_eq!(Markers::baseline_or(Some(&half), 7), 7);
        let mut bad = ann.clone();
        bad.insert(names::ORIGINAL_MIN_REPLICAS.into(), "three".into());
        assert_eq!(Markers::from_annotations(Some(&bad)), None);
        let mut spaced = ann.clone();
        spaced.insert(names::SURGE_REPLICAS.into(), " 5 ".into());
        assert_eq!(Markers::from_annotations(Some(&spaced)), Some(m));
        assert_eq!(Markers::baseline_or(Some(&ann), 7), 3);
        assert!(!Markers::any_present(None));
        // Numbers we could not have written are no baseline: the value in
        // place stands (the PDB floor, the webhook's PDB at admission).
        for (surged, baseline) in [("3", "10"), ("5", "-1"), ("-1", "-2")] {
            let mut odd = ann.clone();
            odd.insert(names::SURGE_REPLICAS.into(), surged.into());
            odd.insert(names::ORIGINAL_MIN_REPLICAS.into(), baseline.into());
            assert_eq!(
                Markers::baseline_or(Some(&odd), 3),
                3,
                "{surged} over {baseline}"
            );
        }
        let mut adopted = ann.clone();
        adopted.insert(names::SURGE_REPLICAS.into(), "4".into());
        adopted.insert(names::ORIGINAL_MIN_REPLICAS.into(), "4".into());
        assert_eq!(Markers::baseline_or(Some(&adopted), 4), 4);
        assert_eq!(
            Markers::baseline_or(Some(&adopted), 9),
            4,
            "a surge in place"
        );
    }
}
