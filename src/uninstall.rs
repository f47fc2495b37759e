//! `eviction-autoscaler uninstall`: reverts every active surge to its
//! persisted baseline and deletes what the product owns. Run it after removing
//! the webhook configurations and the Deployment, so nothing recreates them
//! meanwhile.
//!
//! What is ours: objects carrying our surge markers (reverted; markers that do
//! not parse are just removed), and PDBs and EvictionAutoScalers carrying
//! `ownedBy: EvictionAutoScaler` (deleted, with their UID as precondition).
//! An EvictionAutoScaler a user created (no `ownedBy`) stays, like their PDBs.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{ListParams, PatchParams};
use kube::core::DynamicObject;
use kube::{Api, Client};
use serde_json::{json, Value};

use crate::cache::{keda_resource, owned_by_us, KEDA_GROUP, KEDA_VERSION};
use crate::crd::EvictionAutoScaler;
use crate::markers::Markers;
use crate::patch::{annotation_ops, deployment_revert_ops, guarded_set, json_patch};
use crate::surge::view::hpa_is_kedas;

#[derive(Debug, Default)]
pub struct Report {
    pub reverted: Vec<String>,
    pub deleted_pdbs: Vec<String>,
    pub deleted_eas: Vec<String>,
    /// Objects whose write failed (`key: error`). Uninstall goes on past
    /// them, so one object never leaves the others' surges in place; the
    /// command exits non-zero and can be run again.
    pub failed: Vec<String>,
}

/// Files one object's write under `done`, or under the failures. Gone (404)
/// is nothing left to do, and so is a UID precondition that failed (409): an
/// object of that name that is not the one we listed is not ours.
fn record(
    done: &mut Vec<String>,
    failed: &mut Vec<String>,
    key: String,
    r: Result<(), kube::Error>,
) {
    match r {
        Ok(()) => done.push(key),
        Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
        Err(e) => failed.push(format!("{key}: {e}")),
    }
}

fn key(ns: Option<&str>, kind: &str, name: Option<&str>) -> String {
    format!(
        "{}/{kind}/{}",
        ns.unwrap_or_default(),
        name.unwrap_or_default()
    )
}

const CLEAR: [(&str, Option<String>); 4] = Markers::CLEAR;

/// Reverting an autoscaler minimum at `path`: back to the persisted baseline
/// if it is still the surged value (a value someone else set stays, as on a
/// Deployment), and markers removed; markers that do not parse are only
/// removed. None when the object carries no marker.
fn autoscaler_revert_ops(
    annotations: Option<&std::collections::BTreeMap<String, String>>,
    path: &str,
    current: Option<Value>,
) -> Option<Vec<Value>> {
    let mut ops = match Markers::from_annotations(annotations) {
        Some(m) if current.as_ref().and_then(Value::as_i64) == Some(i64::from(m.surged_to)) => {
            guarded_set(path, current, json!(m.baseline.max(0)))
        }
        Some(_) => Vec::new(),
        None if Markers::any_present(annotations) => Vec::new(),
        None => return None,
    };
    ops.extend(annotation_ops(annotations, &CLEAR));
    Some(ops)
}

/// The PDBs and EvictionAutoScalers uninstall deletes: ours only.
pub fn ours<K: kube::Resource>(items: Vec<K>) -> Vec<K> {
    items
        .into_iter()
        .filter(|o| owned_by_us(o.meta()))
        .collect()
}

/// One JSON patch of `ops` to the object `name`.
async fn patch_ops<K>(
    api: &Api<K>,
    name: &str,
    pp: &PatchParams,
    ops: Vec<Value>,
) -> Result<(), kube::Error>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.patch(name, pp, &json_patch(ops)?).await.map(|_| ())
}

pub async fn run(client: Client, dry_run: bool) -> Result<Report, kube::Error> {
    let mut report = Report::default();
    let pp = PatchParams {
        dry_run,
        ..Default::default()
    };

    // Autoscalers first: their Deployments' own markers are reverted below.
    let hpas: Api<HorizontalPodAutoscaler> = Api::all(client.clone());
    // KEDA's own HPA carries copies of its ScaledObject's markers: the
    // ScaledObject is reverted below and KEDA's operator follows it.
    for h in hpas.list(&ListParams::default()).await? {
        if hpa_is_kedas(&h) {
            continue;
        }
        let current = h
            .spec
            .as_ref()
            .and_then(|s| s.min_replicas)
            .map(|c| json!(c));
        let Some(ops) = autoscaler_revert_ops(
            h.metadata.annotations.as_ref(),
            "/spec/minReplicas",
            current,
        ) else {
            continue;
        };
        let ns = h.metadata.namespace.clone().unwrap_or_default();
        let api: Api<HorizontalPodAutoscaler> = Api::namespaced(client.clone(), &ns);
        let name = h.metadata.name.as_deref().unwrap_or_default();
        let r = patch_ops(&api, name, &pp, ops).await;
        let k = key(Some(&ns), "hpa", Some(name));
        record(&mut report.reverted, &mut report.failed, k, r);
    }
    let keda_present = client
        .list_api_group_resources(&format!("{KEDA_GROUP}/{KEDA_VERSION}"))
        .await
        .is_ok();
    if keda_present {
        let sos: Api<DynamicObject> = Api::all_with(client.clone(), &keda_resource());
        for so in sos.list(&ListParams::default()).await? {
            let current = so.data["spec"].get("minReplicaCount").cloned();
            let Some(ops) = autoscaler_revert_ops(
                so.metadata.annotations.as_ref(),
                "/spec/minReplicaCount",
                current,
            ) else {
                continue;
            };
            let ns = so.metadata.namespace.clone().unwrap_or_default();
            let api: Api<DynamicObject> =
                Api::namespaced_with(client.clone(), &ns, &keda_resource());
            let name = so.metadata.name.as_deref().unwrap_or_default();
            let r = patch_ops(&api, name, &pp, ops).await;
            let k = key(Some(&ns), "scaledobject", Some(name));
            record(&mut report.reverted, &mut report.failed, k, r);
        }
    }
    let deps: Api<Deployment> = Api::all(client.clone());
    for d in deps.list(&ListParams::default()).await? {
        let ann = d.metadata.annotations.as_ref();
        let ops = match deployment_revert_ops(&d) {
            Some(ops) => ops,
            None if Markers::any_present(ann) => annotation_ops(ann, &CLEAR),
            None => continue,
        };
        let ns = d.metadata.namespace.clone().unwrap_or_default();
        let api: Api<Deployment> = Api::namespaced(client.clone(), &ns);
        let name = d.metadata.name.as_deref().unwrap_or_default();
        let r = patch_ops(&api, name, &pp, ops).await;
        let k = key(Some(&ns), "deployment", Some(name));
        record(&mut report.reverted, &mut report.failed, k, r);
    }

    let pdbs: Api<PodDisruptionBudget> = Api::all(client.clone());
    for p in ours(pdbs.list(&ListParams::default()).await?.items) {
        let ns = p.metadata.namespace.clone().unwrap_or_default();
        let api: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), &ns);
        let dp = crate::client::delete_only(p.metadata.uid.clone(), dry_run);
        let name = p.metadata.name.as_deref().unwrap_or_default();
        let r = api.delete(name, &dp).await.map(|_| ());
        let k = key(Some(&ns), "pdb", Some(name));
        record(&mut report.deleted_pdbs, &mut report.failed, k, r);
    }
    let eas: Api<EvictionAutoScaler> = Api::all(client.clone());
    match eas.list(&ListParams::default()).await {
        Ok(list) => {
            for e in ours(list.items) {
                let ns = e.metadata.namespace.clone().unwrap_or_default();
                let api: Api<EvictionAutoScaler> = Api::namespaced(client.clone(), &ns);
                let dp = crate::client::delete_only(e.metadata.uid.clone(), dry_run);
                // Those owned by a PDB may already be gone with it.
                let name = e.metadata.name.as_deref().unwrap_or_default();
                let r = api.delete(name, &dp).await.map(|_| ());
                let k = key(Some(&ns), "evictionautoscaler", Some(name));
                record(&mut report.deleted_eas, &mut report.failed, k, r);
            }
        }
        // The CRD is already gone: nothing of ours is left there.
        Err(kube::Error::Api(s)) if s.code == 404 => {}
        Err(e) => return Err(e),
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::names;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    #[test]
    fn one_failed_object_is_listed_and_the_others_still_count() {
        let api = |code: u16| {
            Err(kube::Error::Api(Box::new(kube::core::Status {
                code,
                message: format!("code {code}"),
                ..Default::default()
            })))
        };
        let (mut done, mut failed) = (Vec::new(), Vec::new());
        record(&mut done, &mut failed, "ns/hpa/a".into(), Ok(()));
        record(&mut done, &mut failed, "ns/hpa/b".into(), api(500));
        // Gone, or another object of that name: nothing left to do.
        record(&mut done, &mut failed, "ns/hpa/c".into(), api(404));
        record(&mut done, &mut failed, "ns/pdb/d".into(), api(409));
        record(&mut done, &mut failed, "ns/hpa/e".into(), Ok(()));
        assert_eq!(done, vec!["ns/hpa/a", "ns/hpa/e"]);
        assert_eq!(failed.len(), 1);
        assert!(failed[0].starts_with("ns/hpa/b: "), "{failed:?}");
    }

    fn eas(name: &str, owned: bool) -> EvictionAutoScaler {
        EvictionAutoScaler {
            metadata: ObjectMeta {
                name: Some(name.into()),
                annotations: owned.then(|| {
                    [(
                        names::OWNED_BY.to_string(),
                        names::OWNED_BY_VALUE.to_string(),
                    )]
                    .into()
                }),
                ..Default::default()
            },
            spec: Default::default(),
            status: None,
        }
    }

    #[test]
    fn only_our_evictionautoscalers_are_deleted() {
        let kept = ours(vec![eas("ours", true), eas("users", false)]);
        let names: Vec<_> = kept
            .iter()
            .filter_map(|e| e.metadata.name.clone())
            .collect();
        assert_eq!(names, ["ours"]);
    }

    #[test]
    fn malformed_markers_are_removed_without_touching_the_value() {
        let ann: std::collections::BTreeMap<String, String> = [
            (names::SURGE_REPLICAS.to_string(), "six".to_string()),
            ("team".to_string(), "a".to_string()),
        ]
        .into();
        let ops =
            autoscaler_revert_ops(Some(&ann), "/spec/minReplicas", Some(json!(6))).expect("ops");
        assert_eq!(
            ops,
            vec![json!({"op": "remove", "path": "/metadata/annotations/evictionSurgeReplicas"})]
        );
        let ann: std::collections::BTreeMap<String, String> = [
            (names::SURGE_REPLICAS.to_string(), "6".to_string()),
            (names::ORIGINAL_MIN_REPLICAS.to_string(), "2".to_string()),
        ]
        .into();
        let ops =
            autoscaler_revert_ops(Some(&ann), "/spec/minReplicas", Some(json!(6))).expect("ops");
        assert_eq!(
            ops[1],
            json!({"op": "replace", "path": "/spec/minReplicas", "value": 2})
        );
        assert!(autoscaler_revert_ops(None, "/spec/minReplicas", Some(json!(6))).is_none());
        // The user set the minimum to 4 during the surge (markers 2 -> 6):
        // their value stays, only the markers go; so does a minimum removed.
        for user in [Some(json!(4)), None] {
            let ops =
                autoscaler_revert_ops(Some(&ann), "/spec/minReplicas", user.clone()).expect("ops");
            assert!(
                ops.iter().all(|o| o["path"] != "/spec/minReplicas"),
                "{user:?}: {ops:?}"
            );
            assert_eq!(ops.len(), 2, "{ops:?}");
        }
    }
}
