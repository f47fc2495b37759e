//! `eviction-autoscaler uninstall`: reverts every active surge to its
//! persisted baseline and deletes what the product owns (its PDBs and
//! EvictionAutoScalers). Run it after removing the webhook configurations and
//! the Deployment, so nothing recreates them meanwhile.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{DeleteParams, ListParams, PatchParams};
use kube::core::DynamicObject;
use kube::{Api, Client};
use serde_json::json;

use crate::cache::{keda_resource, owned_by_us, KEDA_GROUP, KEDA_VERSION};
use crate::crd::EvictionAutoScaler;
use crate::patch::{annotation_ops, deployment_revert_ops, guarded_set, json_patch};
use crate::surge::plan::Markers;

#[derive(Debug, Default)]
pub struct Report {
    pub reverted: Vec<String>,
    pub deleted_pdbs: Vec<String>,
    pub deleted_eas: Vec<String>,
}

fn key(ns: Option<&str>, kind: &str, name: Option<&str>) -> String {
    format!(
        "{}/{kind}/{}",
        ns.unwrap_or_default(),
        name.unwrap_or_default()
    )
}

const CLEAR: [(&str, Option<String>); 3] = Markers::CLEAR;

fn ignore_gone<T>(r: Result<T, kube::Error>) -> Result<(), kube::Error> {
    match r {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e),
    }
}

pub async fn run(client: Client, dry_run: bool) -> Result<Report, kube::Error> {
    let mut report = Report::default();
    let pp = PatchParams {
        dry_run,
        ..Default::default()
    };
    let dp = DeleteParams {
        dry_run,
        ..Default::default()
    };

    // Autoscalers first: their Deployments' own markers are reverted below.
    let hpas: Api<HorizontalPodAutoscaler> = Api::all(client.clone());
    for h in hpas.list(&ListParams::default()).await? {
        let Some(m) = Markers::from_annotations(h.metadata.annotations.as_ref()) else {
            continue;
        };
        let ns = h.metadata.namespace.clone().unwrap_or_default();
        let current = h
            .spec
            .as_ref()
            .and_then(|s| s.min_replicas)
            .map(|c| json!(c));
        let mut ops = guarded_set("/spec/minReplicas", current, json!(m.baseline.max(0)));
        ops.extend(annotation_ops(h.metadata.annotations.as_ref(), &CLEAR));
        let api: Api<HorizontalPodAutoscaler> = Api::namespaced(client.clone(), &ns);
        api.patch(
            h.metadata.name.as_deref().unwrap_or_default(),
            &pp,
            &json_patch(ops)?,
        )
        .await?;
        report
            .reverted
            .push(key(Some(&ns), "hpa", h.metadata.name.as_deref()));
    }
    let keda_present = client
        .list_api_group_resources(&format!("{KEDA_GROUP}/{KEDA_VERSION}"))
        .await
        .is_ok();
    if keda_present {
        let sos: Api<DynamicObject> = Api::all_with(client.clone(), &keda_resource());
        for so in sos.list(&ListParams::default()).await? {
            let Some(m) = Markers::from_annotations(so.metadata.annotations.as_ref()) else {
                continue;
            };
            let ns = so.metadata.namespace.clone().unwrap_or_default();
            let current = so.data["spec"].get("minReplicaCount").cloned();
            let mut ops = guarded_set("/spec/minReplicaCount", current, json!(m.baseline.max(0)));
            ops.extend(annotation_ops(so.metadata.annotations.as_ref(), &CLEAR));
            let api: Api<DynamicObject> =
                Api::namespaced_with(client.clone(), &ns, &keda_resource());
            api.patch(
                so.metadata.name.as_deref().unwrap_or_default(),
                &pp,
                &json_patch(ops)?,
            )
            .await?;
            report
                .reverted
                .push(key(Some(&ns), "scaledobject", so.metadata.name.as_deref()));
        }
    }
    let deps: Api<Deployment> = Api::all(client.clone());
    for d in deps.list(&ListParams::default()).await? {
        let Some(ops) = deployment_revert_ops(&d) else {
            continue;
        };
        let ns = d.metadata.namespace.clone().unwrap_or_default();
        let api: Api<Deployment> = Api::namespaced(client.clone(), &ns);
        api.patch(
            d.metadata.name.as_deref().unwrap_or_default(),
            &pp,
            &json_patch(ops)?,
        )
        .await?;
        report
            .reverted
            .push(key(Some(&ns), "deployment", d.metadata.name.as_deref()));
    }

    let pdbs: Api<PodDisruptionBudget> = Api::all(client.clone());
    for p in pdbs.list(&ListParams::default()).await? {
        if !owned_by_us(&p.metadata) {
            continue;
        }
        let ns = p.metadata.namespace.clone().unwrap_or_default();
        let api: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), &ns);
        ignore_gone(
            api.delete(p.metadata.name.as_deref().unwrap_or_default(), &dp)
                .await,
        )?;
        report
            .deleted_pdbs
            .push(key(Some(&ns), "pdb", p.metadata.name.as_deref()));
    }
    let eas: Api<EvictionAutoScaler> = Api::all(client.clone());
    match eas.list(&ListParams::default()).await {
        Ok(list) => {
            for e in list {
                let ns = e.metadata.namespace.clone().unwrap_or_default();
                let api: Api<EvictionAutoScaler> = Api::namespaced(client.clone(), &ns);
                // Those owned by a PDB may already be gone with it.
                ignore_gone(
                    api.delete(e.metadata.name.as_deref().unwrap_or_default(), &dp)
                        .await,
                )?;
                report.deleted_eas.push(key(
                    Some(&ns),
                    "evictionautoscaler",
                    e.metadata.name.as_deref(),
                ));
            }
        }
        // The CRD is already gone: nothing of ours is left there.
        Err(kube::Error::Api(s)) if s.code == 404 => {}
        Err(e) => return Err(e),
    }
    Ok(report)
}
