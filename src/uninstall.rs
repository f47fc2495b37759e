//! `eviction-autoscaler uninstall`: reverts every active surge to its
//! persisted baseline and deletes what the product owns. Run it after removing
//! the webhook configurations and the Deployment, so nothing recreates them
//! meanwhile: it refuses to start while a controller still renews the Lease
//! (`--force` skips that check).
//!
//! What is ours: objects carrying our surge markers (reverted; markers that do
//! not parse are just removed), a surge left by the Go project's older
//! versions (a lone marker, its baseline in an EvictionAutoScaler's status),
//! and PDBs and EvictionAutoScalers carrying `ownedBy: EvictionAutoScaler`
//! (deleted while still ours: `client::delete_ours`). An EvictionAutoScaler a user
//! created (no `ownedBy`) stays, like their PDBs.
//!
//! A Deployment goes back only when its autoscalers did: one whose HPA or
//! ScaledObject could not be reverted (or whose ScaledObjects could not be
//! read, or whose KEDA HPA still holds the old minimum) keeps its surge and
//! markers and is listed as failed, because lowered under a raised minimum the
//! HPA controller would lift it straight back, markers gone.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{ListParams, PatchParams};
use kube::core::DynamicObject;
use kube::{Api, Client};
use serde_json::{json, Value};

use crate::cache::{keda_resource, owned_by_us, KEDA_GROUP, KEDA_VERSION};
use crate::client::{delete_ours, Deleted};
use crate::crd::EvictionAutoScaler;
use crate::finalizers::GO_FINALIZERS;
use crate::leader::{can_hold, Observed};
use crate::markers::{self, Markers};
use crate::patch::{annotation_ops, deployment_revert_ops, guarded_set, json_patch};
use crate::surge::step::annotation_path;
use crate::surge::view::{self, hpa_is_kedas};
use crate::surge::writer;
use crate::surge::writer::{writer, Field, ReplicasWriter};

#[derive(Debug, thiserror::Error)]
pub enum UninstallError {
    #[error(
        "a controller still holds Lease {lease} and renews it (holder {holder}): scale the \
         eviction-autoscaler Deployment to 0 and wait for its pods to stop, or pass --force"
    )]
    ControllerRunning { lease: String, holder: String },
    #[error(
        "Deployment {deployment} still runs {replicas} replica(s) of eviction-autoscaler (their \
         controllers would surge again and make the PDBs again; with LEADER_ELECTION=false no \
         Lease shows them): scale it to 0 and wait for its pods to stop, or pass --force"
    )]
    ControllerDeployed { deployment: String, replicas: i32 },
    #[error(transparent)]
    Api(#[from] kube::Error),
}

#[derive(Debug, Clone)]
pub struct Options {
    /// Server-side dry run of every write.
    pub dry_run: bool,
    /// Skip the check that no controller holds the Lease.
    pub force: bool,
    /// Namespace of the Lease (`eviction-autoscaler`).
    pub namespace: String,
    /// How long to wait for KEDA's operator to copy a reverted
    /// ScaledObject's minimum onto its HPA.
    pub keda_wait: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            dry_run: false,
            force: false,
            namespace: "eviction-autoscaler".into(),
            keda_wait: Duration::from_secs(30),
        }
    }
}

#[derive(Debug, Default)]
pub struct Report {
    /// Objects whose value went back to its recorded baseline.
    pub reverted: Vec<String>,
    /// Objects whose markers only were removed: the value is someone
    /// else's (set mid-surge), or already the baseline.
    pub cleaned: Vec<String>,
    pub deleted_pdbs: Vec<String>,
    pub deleted_eas: Vec<String>,
    /// PDBs taken over by their user (`ownedBy` removed) whose controller
    /// reference to their Deployment was ours and was dropped.
    pub released_pdbs: Vec<String>,
    /// Deleted EvictionAutoScalers the Go project's finalizers held, with
    /// those removed (what they guard is done: [`crate::finalizers`]).
    pub released_finalizers: Vec<String>,
    /// Objects whose write failed or was held back (`key: why`). Uninstall
    /// goes on past them, so one object never leaves the others' surges in
    /// place; the command exits non-zero and can be run again.
    pub failed: Vec<String>,
}

/// Files one patch under `done`, or under the failures. Gone (404) is
/// nothing left to do; a patch carries no precondition, so its 409 is a
/// write that did not happen.
fn record(
    done: &mut Vec<String>,
    failed: &mut Vec<String>,
    key: String,
    r: Result<(), kube::Error>,
) {
    match r {
        Ok(()) => done.push(key),
        Err(kube::Error::Api(s)) if s.code == 404 => {}
        Err(e) => failed.push(format!("{key}: {e}")),
    }
}

/// A write that failed; a 404 (the object is gone) left nothing to do.
fn not_done(r: &Result<(), kube::Error>) -> bool {
    match r {
        Ok(()) => false,
        Err(kube::Error::Api(s)) => s.code != 404,
        Err(_) => true,
    }
}

/// Files one delete: gone, or taken over by a user meanwhile, is nothing of
/// ours to delete; a 409 that outlasted [`delete_ours`]'s reads is a failure.
fn record_delete(
    done: &mut Vec<String>,
    failed: &mut Vec<String>,
    key: String,
    r: Result<Deleted, kube::Error>,
) {
    match r {
        Ok(Deleted::Done) => done.push(key),
        Ok(Deleted::Gone | Deleted::HandedOver) => {}
        Err(e) => failed.push(format!("{key}: {e}")),
    }
}

/// Whether a revert's patch sets the value back (else it only removes
/// markers): every value write of ours is a `replace` guarded by a `test`.
fn sets_value(ops: &[Value]) -> bool {
    ops.iter().any(|o| {
        o["op"] == "replace"
            && !o["path"]
                .as_str()
                .unwrap_or_default()
                .starts_with("/metadata")
    })
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
/// Deployment, and so does one adopted mid-surge, markers n to n, or our
/// value written again by `someone`), and markers removed; markers that do
/// not parse, or hold numbers we could not have written, are only removed.
/// None when the object carries no marker.
fn autoscaler_revert_ops(
    annotations: Option<&BTreeMap<String, String>>,
    path: &str,
    current: Option<Value>,
    someone: bool,
) -> Option<Vec<Value>> {
    let mut ops = match Markers::from_annotations(annotations) {
        Some(m)
            if m.plausible()
                && !someone
                && m.surged_to != m.baseline
                && current.as_ref().and_then(Value::as_i64) == Some(i64::from(m.surged_to)) =>
        {
            guarded_set(path, current, json!(m.baseline.max(0)))
        }
        Some(_) => Vec::new(),
        None if Markers::any_present(annotations) => Vec::new(),
        None => return None,
    };
    ops.extend(annotation_ops(annotations, &CLEAR));
    Some(ops)
}

/// The minimum an autoscaler is left at: the reverted value if `ops`
/// replaces it, else `current`.
fn minimum_after(ops: &[Value], path: &str, current: Option<i64>) -> Option<i64> {
    ops.iter()
        .rev()
        .find(|o| o["op"] == "replace" && o["path"] == path)
        .and_then(|o| o["value"].as_i64())
        .or(current)
}

/// A surge of the Go project's older versions on `d` (a lone marker at its
/// replicas, the baseline in an EvictionAutoScaler's status): replicas back
/// to that baseline, guarded on the value and the marker, the marker removed.
fn legacy_revert_ops(d: &Deployment, eas: &[Arc<EvictionAutoScaler>]) -> Option<Vec<Value>> {
    let ann = d.metadata.annotations.as_ref();
    let replicas = d.spec.as_ref().and_then(|s| s.replicas);
    let name = d.metadata.name.as_deref()?;
    let ns = d.metadata.namespace.as_deref();
    let mine: Vec<Arc<EvictionAutoScaler>> = eas
        .iter()
        .filter(|e| e.metadata.namespace.as_deref() == ns)
        .cloned()
        .collect();
    let m = markers::legacy_surge(name, ann, replicas, &mine)?;
    let lone = ann?.get(crate::names::SURGE_REPLICAS)?;
    let mut ops = vec![json!({"op": "test",
        "path": annotation_path(crate::names::SURGE_REPLICAS), "value": lone})];
    ops.extend(guarded_set(
        "/spec/replicas",
        Some(json!(m.surged_to)),
        json!(m.baseline),
    ));
    ops.extend(annotation_ops(ann, &CLEAR));
    Some(ops)
}

/// Does an object of Deployment `target` in `ns` (the Deployment, an HPA,
/// a ScaledObject) still carry a marker of a surge, read now (after this
/// run's reverts), as the reconciler reads it ([`crate::reconcile::surging`])?
/// With KEDA's API unknown, it may.
async fn target_surging(
    client: &Client,
    ns: &str,
    target: &str,
    keda: &Keda,
) -> Result<bool, kube::Error> {
    let sos = match keda {
        Keda::Absent => Vec::new(),
        Keda::Unknown(_) => return Ok(true),
        Keda::Present => {
            Api::<DynamicObject>::namespaced_with(client.clone(), ns, &keda_resource())
                .list(&ListParams::default())
                .await?
                .items
        }
    };
    let deps: Api<Deployment> = Api::namespaced(client.clone(), ns);
    let hpas: Api<HorizontalPodAutoscaler> = Api::namespaced(client.clone(), ns);
    let deployment: Vec<Arc<Deployment>> = deps
        .get_opt(target)
        .await?
        .map(Arc::new)
        .into_iter()
        .collect();
    let hpas: Vec<Arc<HorizontalPodAutoscaler>> = hpas
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .map(Arc::new)
        .collect();
    // Copies of our markers someone else wrote are no surge (as the caches
    // read them).
    let deployment: Vec<_> = deployment.into_iter().map(writer::without_copy).collect();
    let hpas: Vec<_> = hpas.into_iter().map(writer::without_copy).collect();
    let sos: Vec<_> = sos
        .into_iter()
        .map(|so| writer::without_copy(Arc::new(so)))
        .collect();
    let surging = crate::reconcile::surging(&deployment, &hpas, &sos, false);
    Ok(surging.contains(&target.to_ascii_lowercase()))
}

/// Removes the Go project's finalizers from EvictionAutoScaler `name`, just
/// deleted, once what they guard is done; one that stays (a PDB still
/// carrying the Go project's floor) is reported, the record left
/// Terminating. A dry run (the record not deleted) reports what a run
/// would remove, as if deleted.
async fn release_go_finalizers(
    name: &str,
    surging: bool,
    client: &Client,
    ns: &str,
    k: &str,
    dry_run: bool,
    report: &mut Report,
) {
    let api: Api<EvictionAutoScaler> = Api::namespaced(client.clone(), ns);
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), ns);
    let read = match (api.get_opt(name).await, pdbs.get_opt(name).await) {
        (Ok(Some(e)), Ok(p)) => (e, p),
        (Ok(None), _) => return,
        (Err(err), _) | (_, Err(err)) => {
            report.failed.push(format!("{k}: {err}"));
            return;
        }
    };
    let (mut e, pdb) = read;
    if dry_run {
        e.metadata.deletion_timestamp.get_or_insert_with(|| {
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::now())
        });
    }
    let remove = crate::finalizers::releasable(&e, surging, pdb.as_ref());
    let stays: Vec<&String> = e
        .metadata
        .finalizers
        .iter()
        .flatten()
        .filter(|f| GO_FINALIZERS.contains(&f.as_str()) && !remove.contains(f))
        .collect();
    if !remove.is_empty() {
        let finalizers = e.metadata.finalizers.clone().unwrap_or_default();
        let ops = crate::finalizers::release_ops(e.metadata.uid.as_deref(), &finalizers, &remove);
        let r = if dry_run {
            Ok(())
        } else {
            patch_ops(&api, name, &PatchParams::default(), ops).await
        };
        record(
            &mut report.released_finalizers,
            &mut report.failed,
            k.to_string(),
            r,
        );
    }
    if !stays.is_empty() {
        let why = if surging {
            format!(
                "an object of Deployment {} still carries a surge's markers (or KEDA's API \
                 could not be read)",
                e.spec.target_name
            )
        } else {
            format!(
                "PodDisruptionBudget {name} still carries the floor it pinned (annotations {} \
                 and {}): put back the spec saved there, then remove both",
                crate::finalizers::PINNED_FLOOR,
                crate::finalizers::ORIGINAL_PDB_SPEC
            )
        };
        report.failed.push(format!(
            "{k}: left Terminating: the Go project's finalizer {stays:?} guards what is not done: \
             {why}; run uninstall again once it is, or remove the finalizer yourself"
        ));
    }
}

/// The Deployment an HPA or a ScaledObject scales, as (namespace, name).
type Target = (String, String);

/// The Deployment an HPA scales ([`view::hpa_target`]), with its namespace.
fn hpa_target(h: &HorizontalPodAutoscaler) -> Option<Target> {
    let ns = h.metadata.namespace.clone().unwrap_or_default();
    view::hpa_target(h).map(|n| (ns, n.to_string()))
}

/// The Deployment a ScaledObject scales ([`view::scaled_object_target`]),
/// with its namespace.
fn so_target(so: &DynamicObject) -> Option<Target> {
    let ns = so.metadata.namespace.clone().unwrap_or_default();
    view::scaled_object_target(so).map(|n| (ns, n.to_string()))
}

/// Is KEDA's API served? From the discovery of its group version: absent
/// on a 404 or without `scaledobjects`; any other error is no answer.
#[derive(Debug, PartialEq)]
enum Keda {
    Present,
    Absent,
    Unknown(String),
}

fn keda_listing(
    r: Result<k8s_openapi::apimachinery::pkg::apis::meta::v1::APIResourceList, kube::Error>,
) -> Keda {
    match r {
        Ok(l) if l.resources.iter().any(|r| r.name == "scaledobjects") => Keda::Present,
        Ok(_) => Keda::Absent,
        Err(kube::Error::Api(s)) if s.code == 404 => Keda::Absent,
        Err(e) => Keda::Unknown(e.to_string()),
    }
}

/// KEDA's HPAs (made by its operator from a ScaledObject) of `target` whose
/// minimum is not yet `want` (the ScaledObject's, at least 1): lowered now,
/// the Deployment would be lifted back by the HPA controller.
fn kedas_lagging(hpas: &[HorizontalPodAutoscaler], target: &Target, want: i64) -> Vec<String> {
    hpas.iter()
        .filter(|h| hpa_is_kedas(h) && hpa_target(h).as_ref() == Some(target))
        .filter(|h| {
            let min = h.spec.as_ref().and_then(|s| s.min_replicas).unwrap_or(1);
            view::kedas_hpa_lags(i64::from(min), want)
        })
        .map(|h| {
            format!(
                "KEDA's HPA {} has minimum {}, not its ScaledObject's {}",
                h.metadata.name.as_deref().unwrap_or_default(),
                h.spec.as_ref().and_then(|s| s.min_replicas).unwrap_or(1),
                want.max(1)
            )
        })
        .collect()
}

/// The first of the product's Deployments with replicas still running
/// (`namespace/name`, how many).
fn still_running(deployments: &[Deployment]) -> Option<(String, i32)> {
    deployments.iter().find_map(|d| {
        let running = d.status.as_ref().and_then(|s| s.replicas).unwrap_or(0);
        (running > 0).then(|| {
            let ns = d.metadata.namespace.as_deref().unwrap_or_default();
            let name = d.metadata.name.as_deref().unwrap_or_default();
            (format!("{ns}/{name}"), running)
        })
    })
}

/// Waits until no controller renews the Lease `name` (or its `duration`
/// has passed with it unchanged, as a replica would wait before taking it;
/// measured on this process's clock, so the holder's clock does not matter).
/// The holder when one renews it.
async fn controller_holding(api: &Api<Lease>, name: &str) -> Result<Option<String>, kube::Error> {
    let mut seen = Observed::default();
    let mut renewed = false;
    loop {
        let Some(lease) = api.get_opt(name).await? else {
            return Ok(None);
        };
        let Some(spec) = lease.spec else {
            return Ok(None);
        };
        let now = Instant::now();
        let before = seen.unchanged_for(now);
        seen.see(&spec, now);
        renewed |= seen.unchanged_for(now) < before;
        if can_hold(
            &spec,
            "eviction-autoscaler-uninstall",
            seen.unchanged_for(now),
        ) {
            return Ok(None);
        }
        // Renewed while watched: a controller runs.
        if renewed {
            return Ok(Some(spec.holder_identity.unwrap_or_default()));
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
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

/// The patch that drops our controller reference from `p`, a PDB without
/// `ownedBy` that we made (an EvictionAutoScaler of its name recorded its
/// UID: see `reconcile::plan`), guarded by its UID and its references as
/// read. None when it is not one of those or carries no such reference.
pub fn release_ops(
    p: &PodDisruptionBudget,
    records: &[Arc<EvictionAutoScaler>],
) -> Option<Vec<Value>> {
    if owned_by_us(&p.metadata) {
        return None;
    }
    let target = crate::reconcile::plan::once_ours(p, records)?;
    let current = p.metadata.owner_references.as_deref()?;
    crate::reconcile::plan::release_ops(p.metadata.uid.as_deref(), current, target)
}

/// The PDBs and EvictionAutoScalers uninstall deletes: ours only.
pub fn ours<K: kube::Resource>(items: Vec<K>) -> Vec<K> {
    items
        .into_iter()
        .filter(|o| owned_by_us(o.meta()))
        .collect()
}

/// KEDA's group version discovered, retried a few times: a transient error
/// would otherwise pass for KEDA absent and leave its surges in place.
async fn discover_keda(client: &Client) -> Keda {
    let gv = format!("{KEDA_GROUP}/{KEDA_VERSION}");
    let mut last = Keda::Absent;
    for attempt in 0..3 {
        if attempt > 0 {
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        last = keda_listing(client.list_api_group_resources(&gv).await);
        if !matches!(last, Keda::Unknown(_)) {
            return last;
        }
    }
    last
}

pub async fn run(client: Client, opts: &Options) -> Result<Report, UninstallError> {
    let mut report = Report::default();
    let pp = PatchParams {
        dry_run: opts.dry_run,
        ..Default::default()
    };
    // A dry run writes nothing a running controller could undo.
    let watch_leases = !opts.force && !opts.dry_run;
    let lease_name = crate::names::MANAGER;
    let mut leases_seen = Vec::new();
    if watch_leases {
        // Without leader election no Lease is written: the product's own
        // Deployment still running is the sign then.
        let ours: Api<Deployment> = Api::all(client.clone());
        let lp = ListParams::default().labels("app.kubernetes.io/name=eviction-autoscaler");
        if let Some((deployment, replicas)) = still_running(&ours.list(&lp).await?.items) {
            return Err(UninstallError::ControllerDeployed {
                deployment,
                replicas,
            });
        }
        for ns in lease_namespaces(&client, &opts.namespace).await {
            let leases: Api<Lease> = Api::namespaced(client.clone(), &ns);
            if let Some(holder) = controller_holding(&leases, lease_name).await? {
                return Err(UninstallError::ControllerRunning {
                    lease: format!("{ns}/{lease_name}"),
                    holder,
                });
            }
            let version = leases
                .get_opt(lease_name)
                .await?
                .and_then(|l| l.metadata.resource_version);
            leases_seen.push((ns, version));
        }
    }

    // Read first: the records of the Go project's surges (their baselines
    // are deleted with the EvictionAutoScalers at the end).
    let eas: Api<EvictionAutoScaler> = Api::all(client.clone());
    let records: Vec<Arc<EvictionAutoScaler>> = match eas.list(&ListParams::default()).await {
        Ok(l) => l.items.into_iter().map(Arc::new).collect(),
        // The CRD is already gone: no records, nothing of ours there.
        Err(kube::Error::Api(s)) if s.code == 404 => Vec::new(),
        Err(e) => return Err(e.into()),
    };

    // Deployments that keep their surge: an autoscaler of theirs was not
    // reverted (why, by target).
    let mut held: BTreeMap<Target, String> = BTreeMap::new();
    // The minimum each autoscaler is left at, by target: a Deployment is not
    // lowered below it (someone's raised minimum, adopted mid-surge), or
    // the autoscaler would lift it straight back.
    let mut floors: BTreeMap<Target, i64> = BTreeMap::new();

    // Autoscalers first: their Deployments' own markers are reverted below.
    let hpas: Api<HorizontalPodAutoscaler> = Api::all(client.clone());
    let mut hpa_list = hpas.list(&ListParams::default()).await?.items;
    // Copies of our markers someone else wrote are theirs: left as they are.
    for h in &mut hpa_list {
        writer::leave_out_copy(h);
    }
    // Each Deployment's HPAs' maxReplicas (KEDA's too): a surged Deployment
    // the HPA controller took down to one is still ours above its baseline.
    let mut maxima: BTreeMap<Target, Vec<i32>> = BTreeMap::new();
    for h in &hpa_list {
        if let (Some(t), Some(s)) = (hpa_target(h), h.spec.as_ref()) {
            maxima.entry(t).or_default().push(s.max_replicas);
        }
    }
    // An HPA minimum lowered: the Deployments wait SETTLE (below).
    let mut hpa_lowered = false;
    // KEDA's own HPA carries copies of its ScaledObject's markers: the
    // ScaledObject is reverted below and KEDA's operator follows it.
    for h in hpa_list.iter().filter(|h| !hpa_is_kedas(h)) {
        let current = h
            .spec
            .as_ref()
            .and_then(|s| s.min_replicas)
            .map(|c| json!(c));
        let ops = autoscaler_revert_ops(
            h.metadata.annotations.as_ref(),
            "/spec/minReplicas",
            current.clone(),
            writer(&h.metadata, Field::MinReplicas) == ReplicasWriter::Someone,
        );
        // An HPA's minimum defaults to 1.
        let left_at = minimum_after(
            ops.as_deref().unwrap_or_default(),
            "/spec/minReplicas",
            current.and_then(|c| c.as_i64()),
        );
        if let Some(t) = hpa_target(h) {
            let f = floors.entry(t).or_default();
            *f = (*f).max(left_at.unwrap_or(1));
        }
        let Some(ops) = ops else {
            continue;
        };
        let ns = h.metadata.namespace.clone().unwrap_or_default();
        let api: Api<HorizontalPodAutoscaler> = Api::namespaced(client.clone(), &ns);
        let name = h.metadata.name.as_deref().unwrap_or_default();
        let lowers = sets_value(&ops);
        let r = patch_ops(&api, name, &pp, ops).await;
        let k = key(Some(&ns), "hpa", Some(name));
        hpa_lowered |= lowers && r.is_ok();
        if not_done(&r) {
            if let Some(t) = hpa_target(h) {
                held.insert(t, format!("its HPA {name} was not reverted"));
            }
        }
        let done = if lowers {
            &mut report.reverted
        } else {
            &mut report.cleaned
        };
        record(done, &mut report.failed, k, r);
    }

    // ScaledObjects: the minimum each is left at, by target (KEDA's HPA
    // must show it before the Deployment is lowered).
    let mut keda_minimum: BTreeMap<Target, i64> = BTreeMap::new();
    let mut keda_unknown: Option<String> = None;
    let keda = discover_keda(&client).await;
    match &keda {
        Keda::Absent => {}
        Keda::Unknown(e) => keda_unknown = Some(format!("KEDA's API could not be read: {e}")),
        Keda::Present => {
            let sos: Api<DynamicObject> = Api::all_with(client.clone(), &keda_resource());
            match sos.list(&ListParams::default()).await {
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => keda_unknown = Some(format!("ScaledObjects could not be listed: {e}")),
                Ok(list) => {
                    for mut so in list {
                        writer::leave_out_copy(&mut so);
                        let current = so.data["spec"].get("minReplicaCount").cloned();
                        // Paused, KEDA deleted its HPA (or holds the
                        // Deployment at its paused count): its minimum holds
                        // no Deployment (no floor, nothing to wait for). Not
                        // before then: until then that HPA lifts the
                        // Deployment (the wait below holds it then).
                        let target = so_target(&so);
                        let floor_of = target
                            .clone()
                            .filter(|_| !view::scaled_object_idle(&so, &hpa_list));
                        let Some(ops) = autoscaler_revert_ops(
                            so.metadata.annotations.as_ref(),
                            "/spec/minReplicaCount",
                            current.clone(),
                            writer(&so.metadata, Field::MinReplicaCount) == ReplicasWriter::Someone,
                        ) else {
                            if let (Some(t), Some(min)) =
                                (floor_of, current.as_ref().and_then(Value::as_i64))
                            {
                                keda_minimum.insert(t, min);
                            }
                            continue;
                        };
                        let ns = so.metadata.namespace.clone().unwrap_or_default();
                        let api: Api<DynamicObject> =
                            Api::namespaced_with(client.clone(), &ns, &keda_resource());
                        let name = so.metadata.name.as_deref().unwrap_or_default();
                        let left_at = minimum_after(
                            &ops,
                            "/spec/minReplicaCount",
                            current.as_ref().and_then(Value::as_i64),
                        );
                        let lowers = sets_value(&ops);
                        let r = patch_ops(&api, name, &pp, ops).await;
                        if let Some(t) = target {
                            if not_done(&r) {
                                held.insert(t, format!("its ScaledObject {name} was not reverted"));
                            } else if let (Some(min), Some(t)) = (left_at, floor_of) {
                                keda_minimum.insert(t, min);
                            }
                        }
                        let k = key(Some(&ns), "scaledobject", Some(name));
                        let done = if lowers {
                            &mut report.reverted
                        } else {
                            &mut report.cleaned
                        };
                        record(done, &mut report.failed, k, r);
                    }
                }
            }
        }
    }
    if let Some(why) = &keda_unknown {
        report.failed.push(format!(
            "{why}; Deployments under KEDA's HPAs with surge markers keep them (a ScaledObject may hold them)"
        ));
    }

    let deps: Api<Deployment> = Api::all(client.clone());
    let mut dep_list = deps.list(&ListParams::default()).await?.items;
    for d in &mut dep_list {
        writer::leave_out_copy(d);
    }
    let marked = |d: &Deployment| Markers::any_present(d.metadata.annotations.as_ref());
    // KEDA's operator copies a ScaledObject's minimum onto its HPA a moment
    // later: wait for that (bounded) before lowering the Deployments.
    let keda_targets: Vec<(Target, i64)> = dep_list
        .iter()
        .filter(|d| marked(d))
        .filter_map(|d| {
            let t = (
                d.metadata.namespace.clone().unwrap_or_default(),
                d.metadata.name.clone().unwrap_or_default(),
            );
            keda_minimum.get(&t).map(|m| (t, *m))
        })
        .collect();
    let mut kedas_hpas = hpa_list;
    let deadline = Instant::now() + opts.keda_wait;
    loop {
        let lagging: Vec<(Target, String)> = keda_targets
            .iter()
            .filter_map(|(t, want)| {
                let lag = kedas_lagging(&kedas_hpas, t, *want);
                (!lag.is_empty()).then(|| (t.clone(), lag.join("; ")))
            })
            .collect();
        // A dry run changed nothing for KEDA's operator to follow.
        if lagging.is_empty() || opts.dry_run || Instant::now() >= deadline {
            if !opts.dry_run {
                for (t, why) in lagging {
                    held.entry(t).or_insert(why);
                }
            }
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        // A failed re-read is waited out like a lag (held at the deadline),
        // not the end of the run: the others' surges and our PDBs remain.
        if let Ok(l) = hpas.list(&ListParams::default()).await {
            kedas_hpas = l.items;
        }
    }

    // The HPA controller reads HPAs from its cache: a Deployment lowered
    // right after its HPA's minimum (or KEDA's HPA's, just followed) could
    // be lifted back to the old one, markers gone (the surge worker waits
    // as long).
    if (hpa_lowered || !keda_targets.is_empty()) && !opts.dry_run {
        tokio::time::sleep(crate::surge::step::SETTLE).await;
    }
    // ScaledObjects unknown: only a Deployment under KEDA's HPA may carry
    // its surge on one (as in the surge worker).
    let under_kedas_hpa = |t: &Target| {
        kedas_hpas
            .iter()
            .any(|h| hpa_is_kedas(h) && hpa_target(h).as_ref() == Some(t))
    };

    // Deployments whose surge of the Go project's older versions stays: its
    // baseline lives only in an EvictionAutoScaler's status, which must
    // outlast this run for the next one (or the worker) to revert it.
    let mut legacy_kept: BTreeSet<Target> = BTreeSet::new();
    for d in &dep_list {
        let ann = d.metadata.annotations.as_ref();
        let ns = d.metadata.namespace.clone().unwrap_or_default();
        let name = d.metadata.name.clone().unwrap_or_default();
        let k = key(Some(&ns), "deployment", Some(&name));
        let legacy = deployment_revert_ops(d, 0, &[])
            .is_none()
            .then(|| legacy_revert_ops(d, &records))
            .flatten();
        let target = (ns.clone(), name.to_ascii_lowercase());
        if marked(d) {
            let t = (ns.clone(), name.clone());
            let why = held
                .get(&t)
                .or(keda_unknown.as_ref().filter(|_| under_kedas_hpa(&t)));
            if let Some(why) = why {
                report
                    .failed
                    .push(format!("{k}: keeps its surge and markers: {why}"));
                if legacy.is_some() {
                    legacy_kept.insert(target);
                }
                continue;
            }
        }
        let is_legacy = legacy.is_some();
        let t = (ns.clone(), name.clone());
        // KEDA's minimum is what its HPA is left at. With KEDA and an HPA at
        // once neither scales on metrics, but each HPA still lifts the
        // Deployment to its minimum: the higher one.
        let floor = match (floors.get(&t), keda_minimum.get(&t)) {
            (Some(a), Some(b)) => i32::try_from(*a.max(b)).unwrap_or(i32::MAX),
            (Some(f), None) | (None, Some(f)) => i32::try_from(*f).unwrap_or(i32::MAX),
            (None, None) => 0,
        };
        let maxima = maxima.get(&t).map_or(&[][..], Vec::as_slice);
        let replicas = d.spec.as_ref().and_then(|s| s.replicas);
        let ops = if let Some(ops) = deployment_revert_ops(d, floor, maxima) {
            ops
        } else if let Some(ops) = legacy {
            ops
        } else if crate::markers::lone_marker_at(ann, replicas).is_some() {
            // What a surge of the Go project's older versions looks like,
            // with no record of its baseline we can be sure of (none, or
            // two that disagree): stripped, the surged number would stay
            // with nothing left to say so. Kept, with the records.
            report.failed.push(format!(
                "{k}: kept: a lone evictionSurgeReplicas at its replicas (a surge of the Go project's older versions) whose baseline no EvictionAutoScaler records for certain; set the replicas yourself, then remove the annotation"
            ));
            legacy_kept.insert(target);
            continue;
        } else if Markers::any_present(ann) {
            annotation_ops(ann, &CLEAR)
        } else {
            continue;
        };
        let api: Api<Deployment> = Api::namespaced(client.clone(), &ns);
        let lowers = sets_value(&ops);
        let r = patch_ops(&api, &name, &pp, ops).await;
        if is_legacy && not_done(&r) {
            legacy_kept.insert(target);
        }
        let done = if lowers {
            &mut report.reverted
        } else {
            &mut report.cleaned
        };
        record(done, &mut report.failed, k, r);
    }
    // Those records, and the PDBs that own them (garbage collection would
    // take the record with its PDB).
    let keeps_record = |e: &EvictionAutoScaler| {
        let ns = e.metadata.namespace.clone().unwrap_or_default();
        legacy_kept.contains(&(ns, e.spec.target_name.to_ascii_lowercase()))
    };
    let record_owners: BTreeSet<&str> = records
        .iter()
        .filter(|e| keeps_record(e))
        .flat_map(|e| e.metadata.owner_references.iter().flatten())
        .map(|o| o.uid.as_str())
        .collect();
    let kept = |k: &str| {
        format!("{k}: kept: it holds the baseline of a surge of the Go project's older versions that was not reverted; run uninstall again")
    };

    let pdbs: Api<PodDisruptionBudget> = Api::all(client.clone());
    let (pdb_list, theirs): (Vec<PodDisruptionBudget>, Vec<PodDisruptionBudget>) = pdbs
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .partition(|p| owned_by_us(&p.metadata));
    // A PDB its user took over (`ownedBy` removed) while no controller ran
    // to release it keeps our controller reference to its Deployment:
    // dropped now, before the records that prove it was ours go (else it
    // would be garbage-collected with its Deployment, for good).
    // Releases that failed: the record of the same name is their proof,
    // kept for the next run (deleted, nothing would ever release them).
    let mut unreleased: BTreeSet<(String, String)> = BTreeSet::new();
    for p in &theirs {
        let Some(ops) = release_ops(p, &records) else {
            continue;
        };
        let ns = p.metadata.namespace.clone().unwrap_or_default();
        let name = p.metadata.name.as_deref().unwrap_or_default();
        let k = key(Some(&ns), "pdb", Some(name));
        let api: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), &ns);
        let r = patch_ops(&api, name, &pp, ops).await;
        if r.is_err() {
            unreleased.insert((ns.clone(), name.to_string()));
        }
        record(&mut report.released_pdbs, &mut report.failed, k, r);
    }
    for p in pdb_list {
        let ns = p.metadata.namespace.clone().unwrap_or_default();
        let api: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), &ns);
        let name = p.metadata.name.as_deref().unwrap_or_default();
        let k = key(Some(&ns), "pdb", Some(name));
        if p.metadata
            .uid
            .as_deref()
            .is_some_and(|u| record_owners.contains(u))
        {
            report.failed.push(kept(&k));
            continue;
        }
        let r = delete_ours(&api, name, p.metadata.uid.as_deref(), opts.dry_run).await;
        record_delete(&mut report.deleted_pdbs, &mut report.failed, k, r);
    }
    for e in records.iter().filter(|e| owned_by_us(&e.metadata)) {
        let ns = e.metadata.namespace.clone().unwrap_or_default();
        let api: Api<EvictionAutoScaler> = Api::namespaced(client.clone(), &ns);
        // Those owned by a PDB may already be gone with it.
        let name = e.metadata.name.as_deref().unwrap_or_default();
        let k = key(Some(&ns), "evictionautoscaler", Some(name));
        if keeps_record(e) {
            report.failed.push(kept(&k));
            continue;
        }
        if unreleased.contains(&(ns.clone(), name.to_string())) {
            report.failed.push(format!(
                "{k}: kept: it proves that PodDisruptionBudget {name}, which its user took over, was ours, and dropping our owner reference from it failed; run uninstall again"
            ));
            continue;
        }
        let r = delete_ours(&api, name, e.metadata.uid.as_deref(), opts.dry_run).await;
        let deleted = matches!(r, Ok(Deleted::Done));
        record_delete(&mut report.deleted_eas, &mut report.failed, k.clone(), r);
        let go_held = e
            .metadata
            .finalizers
            .iter()
            .flatten()
            .any(|f| GO_FINALIZERS.contains(&f.as_str()));
        if deleted && go_held {
            // A dry run reverts nothing: what a run would leave is no
            // marker where its revert succeeds, which it reports itself.
            let surging = if opts.dry_run {
                false
            } else {
                match target_surging(&client, &ns, &e.spec.target_name, &keda).await {
                    Ok(s) => s,
                    Err(err) => {
                        report.failed.push(format!("{k}: {err}"));
                        continue;
                    }
                }
            };
            release_go_finalizers(name, surging, &client, &ns, &k, opts.dry_run, &mut report).await;
        }
    }
    // A replica that took the Lease meanwhile (one released on a step-down
    // is free at once) may surge or make PDBs again.
    for (ns, before) in leases_seen {
        let leases: Api<Lease> = Api::namespaced(client.clone(), &ns);
        let Ok(Some(l)) = leases.get_opt(lease_name).await else {
            continue;
        };
        let holder = l.spec.and_then(|s| s.holder_identity).unwrap_or_default();
        if l.metadata.resource_version != before && !holder.is_empty() {
            report.failed.push(format!(
                "lease {ns}/{lease_name}: taken by {holder} during this run: a controller may surge or \
                 make PDBs again; scale the eviction-autoscaler Deployment to 0 and run uninstall again"
            ));
        }
    }
    Ok(report)
}

/// The namespaces with a Lease of ours: `--namespace`'s, and any other
/// (installed elsewhere, the flag forgotten). On a failed list, the flag's.
async fn lease_namespaces(client: &Client, given: &str) -> Vec<String> {
    let all: Api<Lease> = Api::all(client.clone());
    let by_name = ListParams::default().fields(&format!("metadata.name={}", crate::names::MANAGER));
    let mut found = vec![given.to_string()];
    if let Ok(list) = all.list(&by_name).await {
        for l in list.items {
            let ns = l.metadata.namespace.unwrap_or_default();
            if !found.contains(&ns) {
                found.push(ns);
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::names;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    #[test]
    fn one_failed_object_is_listed_and_the_others_still_count() {
        let api = |code: u16| Err(crate::client::api_status(code));
        let (mut done, mut failed) = (Vec::new(), Vec::new());
        record(&mut done, &mut failed, "ns/hpa/a".into(), Ok(()));
        record(&mut done, &mut failed, "ns/hpa/b".into(), api(500));
        // Gone, or another object of that name: nothing left to do.
        record(&mut done, &mut failed, "ns/hpa/c".into(), api(404));
        // A patch carries no precondition: its 409 is a write not done.
        record(&mut done, &mut failed, "ns/hpa/f".into(), api(409));
        record(&mut done, &mut failed, "ns/hpa/e".into(), Ok(()));
        assert_eq!(done, vec!["ns/hpa/a", "ns/hpa/e"]);
        assert_eq!(failed.len(), 2);
        assert!(failed[0].starts_with("ns/hpa/b: "), "{failed:?}");
        assert!(failed[1].starts_with("ns/hpa/f: "), "{failed:?}");
    }

    /// An autoscaler gone before its revert holds no Deployment back.
    #[test]
    fn only_a_write_that_failed_holds_its_deployment() {
        let api = |code: u16| Err(crate::client::api_status(code));
        assert!(!not_done(&Ok(())));
        assert!(!not_done(&api(404)));
        assert!(not_done(&api(409)));
        assert!(not_done(&api(500)));
    }

    #[test]
    fn a_delete_of_what_is_gone_or_handed_over_is_nothing_to_do() {
        let (mut done, mut failed) = (Vec::new(), Vec::new());
        record_delete(&mut done, &mut failed, "ns/pdb/a".into(), Ok(Deleted::Done));
        record_delete(&mut done, &mut failed, "ns/pdb/b".into(), Ok(Deleted::Gone));
        record_delete(
            &mut done,
            &mut failed,
            "ns/pdb/c".into(),
            Ok(Deleted::HandedOver),
        );
        // Conflicts that outlasted the reads again: not done, said so.
        let r = Err(crate::client::api_status(409));
        record_delete(&mut done, &mut failed, "ns/pdb/d".into(), r);
        assert_eq!(done, vec!["ns/pdb/a"]);
        assert_eq!(failed.len(), 1);
        assert!(failed[0].starts_with("ns/pdb/d: "), "{failed:?}");
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
        let ops = autoscaler_revert_ops(Some(&ann), "/spec/minReplicas", Some(json!(6)), false)
            .expect("ops");
        assert_eq!(
            ops,
            vec![json!({"op": "remove", "path": "/metadata/annotations/evictionSurgeReplicas"})]
        );
        let ann: std::collections::BTreeMap<String, String> = [
            (names::SURGE_REPLICAS.to_string(), "6".to_string()),
            (names::ORIGINAL_MIN_REPLICAS.to_string(), "2".to_string()),
        ]
        .into();
        let ops = autoscaler_revert_ops(Some(&ann), "/spec/minReplicas", Some(json!(6)), false)
            .expect("ops");
        assert_eq!(
            ops[1],
            json!({"op": "replace", "path": "/spec/minReplicas", "value": 2})
        );
        assert!(autoscaler_revert_ops(None, "/spec/minReplicas", Some(json!(6)), false).is_none());
        // The user set the minimum to 4 during the surge (markers 2 -> 6):
        // their value stays, only the markers go; so does a minimum removed.
        for user in [Some(json!(4)), None] {
            let ops = autoscaler_revert_ops(Some(&ann), "/spec/minReplicas", user.clone(), false)
                .expect("ops");
            assert!(
                ops.iter().all(|o| o["path"] != "/spec/minReplicas"),
                "{user:?}: {ops:?}"
            );
            assert_eq!(ops.len(), 2, "{ops:?}");
        }
    }

    fn marked(surged: &str, baseline: Option<&str>) -> BTreeMap<String, String> {
        let mut a: BTreeMap<String, String> =
            [(names::SURGE_REPLICAS.to_string(), surged.to_string())].into();
        if let Some(b) = baseline {
            a.insert(names::ORIGINAL_MIN_REPLICAS.to_string(), b.to_string());
        }
        a
    }

    fn dep(ns: &str, name: &str, replicas: i32, ann: BTreeMap<String, String>) -> Deployment {
        Deployment {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some(ns.into()),
                annotations: Some(ann),
                ..Default::default()
            },
            spec: Some(k8s_openapi::api::apps::v1::DeploymentSpec {
                replicas: Some(replicas),
                ..Default::default()
            }),
            status: None,
        }
    }

    fn touches(ops: &[Value], path: &str) -> bool {
        ops.iter().any(|o| o["path"] == path && o["op"] != "test")
    }

    /// A value adopted mid-surge (markers n to n, a user's scale to 0
    /// among them) is theirs: only the markers go, never a scale back up,
    /// and the report says so (not a reverted surge).
    #[test]
    fn an_adopted_value_keeps_its_number() {
        for n in [0, 4] {
            let d = dep("a", "web", n, marked(&n.to_string(), Some(&n.to_string())));
            let ops = deployment_revert_ops(&d, 0, &[]).expect("ops");
            assert!(!touches(&ops, "/spec/replicas"), "{n}: {ops:?}");
            assert!(!sets_value(&ops), "{n}: {ops:?}");
            let ann = marked(&n.to_string(), Some(&n.to_string()));
            let ops = autoscaler_revert_ops(Some(&ann), "/spec/minReplicas", Some(json!(n)), false)
                .expect("ops");
            assert!(!touches(&ops, "/spec/minReplicas"), "{n}: {ops:?}");
        }
        // The control: our surge 3 -> 5 at 5 goes back to 3.
        let ops = deployment_revert_ops(&dep("a", "web", 5, marked("5", Some("3"))), 0, &[])
            .expect("ops");
        assert!(ops.contains(&json!({"op": "replace", "path": "/spec/replicas", "value": 3})));
        assert!(sets_value(&ops));
    }

    /// The product's Deployment still running pods refuses the run (no
    /// Lease shows it without leader election); scaled to 0, it does not.
    #[test]
    fn a_running_product_deployment_is_refused() {
        let mut d = dep(
            "eviction-autoscaler",
            "eviction-autoscaler",
            0,
            BTreeMap::new(),
        );
        assert_eq!(still_running(std::slice::from_ref(&d)), None);
        d.status = Some(k8s_openapi::api::apps::v1::DeploymentStatus {
            replicas: Some(2),
            ..Default::default()
        });
        assert_eq!(
            still_running(&[d]),
            Some(("eviction-autoscaler/eviction-autoscaler".to_string(), 2))
        );
    }

    /// Numbers we could not have written (a baseline above the surge, or
    /// below 0), and our surged value written again by someone (a manifest
    /// exported mid-surge, re-applied): the value is theirs, as the surge
    /// worker takes it; only the markers go.
    #[test]
    fn a_value_that_is_not_our_surge_is_kept() {
        for (n, surged, baseline) in [(3, "3", "10"), (5, "5", "-1")] {
            let d = dep("a", "web", n, marked(surged, Some(baseline)));
            let ops = deployment_revert_ops(&d, 0, &[]).expect("ops");
            assert!(!touches(&ops, "/spec/replicas"), "{baseline}: {ops:?}");
            let ann = marked(surged, Some(baseline));
            let ops = autoscaler_revert_ops(Some(&ann), "/spec/minReplicas", Some(json!(n)), false)
                .expect("ops");
            assert!(!touches(&ops, "/spec/minReplicas"), "{baseline}: {ops:?}");
        }
        let mut d = dep("a", "web", 5, marked("5", Some("3")));
        d.metadata.managed_fields = Some(vec![crate::surge::writer::field_entry(
            Field::Replicas,
            "kubectl-client-side-apply",
            None,
        )]);
        let ops = deployment_revert_ops(&d, 0, &[]).expect("ops");
        assert!(!touches(&ops, "/spec/replicas"), "{ops:?}");
        assert_eq!(ops.len(), 2, "the markers go: {ops:?}");
        // A surge taken over from the Go project (its client wrote the
        // value; the take-over note still equals it) is ours: back to 3.
        let mut taken = d.clone();
        if let Some(a) = taken.metadata.annotations.as_mut() {
            a.insert(markers::TAKEN_OVER.into(), "5".into());
        }
        let ops = deployment_revert_ops(&taken, 0, &[]).expect("ops");
        assert!(ops.contains(&json!({"op": "replace", "path": "/spec/replicas", "value": 3})));
        let ann = marked("5", Some("3"));
        let ops = autoscaler_revert_ops(Some(&ann), "/spec/minReplicas", Some(json!(5)), true)
            .expect("ops");
        assert!(!touches(&ops, "/spec/minReplicas"), "{ops:?}");
        // Ours (our field manager's write): back to 3.
        d.metadata.managed_fields = Some(vec![crate::surge::writer::field_entry(
            Field::Replicas,
            crate::names::MANAGER,
            None,
        )]);
        let ops = deployment_revert_ops(&d, 0, &[]).expect("ops");
        assert!(ops.contains(&json!({"op": "replace", "path": "/spec/replicas", "value": 3})));
        // Taken down to 4 by the HPA controller (its maxReplicas): the rest
        // of our surge, back to 3; at 3 or below, the autoscaler's value;
        // at 4 with no HPA whose maximum is 4, the HPA's own number.
        for (n, maxima, want) in [
            (4, &[9, 4][..], Some(3)),
            (3, &[3][..], None),
            (2, &[2][..], None),
            (4, &[9][..], None),
        ] {
            let mut d = dep("a", "web", n, marked("5", Some("3")));
            d.metadata.managed_fields = Some(vec![crate::surge::writer::replicas_entry(
                crate::surge::writer::AUTOSCALER_MANAGER,
                Some("scale"),
            )]);
            let ops = deployment_revert_ops(&d, 0, maxima).expect("ops");
            let to = ops
                .iter()
                .find(|o| o["op"] == "replace" && o["path"] == "/spec/replicas")
                .map(|o| o["value"].clone());
            assert_eq!(to, want.map(|w| json!(w)), "{n}: {ops:?}");
            assert!(
                ops.contains(&json!({"op": "test", "path": "/spec/replicas", "value": n}))
                    || want.is_none()
            );
        }
    }

    /// An autoscaler's minimum raised mid-surge (someone's, adopted): the
    /// Deployment goes back no lower than it, never higher than its surge,
    /// and not from a baseline of 0.
    #[test]
    fn a_deployment_is_not_lowered_below_its_autoscalers_minimum() {
        let to = |baseline: &str, floor: i32| {
            let d = dep("a", "web", 5, marked("5", Some(baseline)));
            let ops = deployment_revert_ops(&d, floor, &[]).expect("ops");
            ops.iter()
                .find(|o| o["op"] == "replace" && o["path"] == "/spec/replicas")
                .and_then(|o| o["value"].as_i64())
        };
        assert_eq!(to("3", 0), Some(3));
        assert_eq!(to("3", 2), Some(3));
        assert_eq!(to("3", 4), Some(4));
        assert_eq!(to("3", 5), None, "the surged value is the minimum's");
        assert_eq!(to("3", 9), None);
        assert_eq!(to("0", 4), Some(1));
    }

    fn record_of(ns: &str, target: &str, min: i32) -> Arc<EvictionAutoScaler> {
        let mut e = eas(target, true);
        e.metadata.namespace = Some(ns.into());
        e.spec.target_name = target.into();
        e.spec.target_kind = "deployment".into();
        e.status = Some(crate::crd::EvictionAutoScalerStatus {
            min_replicas: Some(min),
            ..Default::default()
        });
        Arc::new(e)
    }

    /// A PDB we made whose user removed `ownedBy` loses our controller
    /// reference (and only it); one we never made, or still ours, is not
    /// written here.
    #[test]
    fn a_pdb_taken_over_is_released_only_when_a_record_proves_it_ours() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
        let reference = |kind: &str, name: &str, controller: bool| OwnerReference {
            api_version: "apps/v1".into(),
            kind: kind.into(),
            name: name.into(),
            uid: format!("{name}-uid"),
            controller: Some(controller),
            block_owner_deletion: Some(true),
        };
        let pdb = |owned: bool, refs: Vec<OwnerReference>| PodDisruptionBudget {
            metadata: ObjectMeta {
                name: Some("web".into()),
                namespace: Some("a".into()),
                uid: Some("pdb-uid".into()),
                owner_references: Some(refs),
                annotations: owned.then(|| {
                    [(
                        names::OWNED_BY.to_string(),
                        names::OWNED_BY_VALUE.to_string(),
                    )]
                    .into()
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let record = |uid: &str| {
            let mut e = (*record_of("a", "web", 3)).clone();
            e.status.get_or_insert_with(Default::default).pdb_uid = Some(uid.into());
            Arc::new(e)
        };
        let other = reference("ConfigMap", "cfg", false);
        let taken = pdb(
            false,
            vec![reference("Deployment", "web", true), other.clone()],
        );
        let ops = release_ops(&taken, &[record("pdb-uid")]).expect("released");
        assert_eq!(
            ops[0],
            json!({"op": "test", "path": "/metadata/uid", "value": "pdb-uid"})
        );
        assert!(
            ops.contains(
                &json!({"op": "replace", "path": "/metadata/ownerReferences", "value": [other]})
            ),
            "{ops:?}"
        );
        let mut doc = serde_json::to_value(&taken).expect("json");
        let patch: json_patch::Patch = serde_json::from_value(Value::Array(ops)).expect("patch");
        json_patch::patch(&mut doc, &patch).expect("applies to the PDB read");
        assert_eq!(
            doc["metadata"]["ownerReferences"].as_array().map(Vec::len),
            Some(1)
        );
        // No record of its UID: a PDB we never made (a user's, Helm's).
        assert!(release_ops(&taken, &[record("another-uid")]).is_none());
        assert!(release_ops(&taken, &[]).is_none());
        // Still ours: deleted, not released.
        let ours = pdb(true, vec![reference("Deployment", "web", true)]);
        assert!(release_ops(&ours, &[record("pdb-uid")]).is_none());
        // Released already, or its controller is not our Deployment.
        assert!(release_ops(&pdb(false, vec![other]), &[record("pdb-uid")]).is_none());
        let helm = pdb(false, vec![reference("Deployment", "api", true)]);
        assert!(release_ops(&helm, &[record("pdb-uid")]).is_none());
    }

    /// A surge of the Go project (a lone marker at the replicas, the
    /// baseline in its EvictionAutoScaler's status) goes back to that
    /// baseline; a record of another namespace is no record of it.
    #[test]
    fn a_surge_left_by_the_go_project_goes_back_to_its_record() {
        let d = dep("a", "web", 5, marked("5", None));
        assert!(deployment_revert_ops(&d, 0, &[]).is_none());
        let ops = legacy_revert_ops(&d, &[record_of("a", "web", 3)]).expect("ops");
        assert!(ops.contains(&json!({"op": "test", "path": "/spec/replicas", "value": 5})));
        assert!(ops.contains(&json!({"op": "replace", "path": "/spec/replicas", "value": 3})));
        assert!(ops.contains(
            &json!({"op": "remove", "path": "/metadata/annotations/evictionSurgeReplicas"})
        ));
        assert!(legacy_revert_ops(&d, &[record_of("b", "web", 3)]).is_none());
        assert!(legacy_revert_ops(&d, &[]).is_none());
        // Not at the marker's number: someone's, no surge to revert.
        let d = dep("a", "web", 4, marked("5", None));
        assert!(legacy_revert_ops(&d, &[record_of("a", "web", 3)]).is_none());
    }

    #[test]
    fn keda_is_absent_only_on_a_clear_answer() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::{APIResource, APIResourceList};
        let list = |names: &[&str]| APIResourceList {
            group_version: "keda.sh/v1alpha1".into(),
            resources: names
                .iter()
                .map(|n| APIResource {
                    name: n.to_string(),
                    ..Default::default()
                })
                .collect(),
        };
        let api = |code: u16| Err(crate::client::api_status(code));
        assert_eq!(
            keda_listing(Ok(list(&["scaledobjects", "scaledjobs"]))),
            Keda::Present
        );
        assert_eq!(keda_listing(Ok(list(&["scaledjobs"]))), Keda::Absent);
        assert_eq!(keda_listing(api(404)), Keda::Absent);
        for code in [429, 500, 503] {
            assert!(
                matches!(keda_listing(api(code)), Keda::Unknown(_)),
                "{code}"
            );
        }
    }

    fn keda_hpa(ns: &str, target: &str, min: i32) -> HorizontalPodAutoscaler {
        crate::surge::view::kedas_hpa(ns, target, min, 10)
    }

    /// A ScaledObject back at 3 while KEDA's HPA still says 5: the
    /// Deployment waits (lowered, the HPA controller would lift it back).
    #[test]
    fn a_deployment_waits_while_kedas_hpa_lags() {
        let t = ("a".to_string(), "web".to_string());
        assert_eq!(kedas_lagging(&[keda_hpa("a", "web", 5)], &t, 3).len(), 1);
        assert!(kedas_lagging(&[keda_hpa("a", "web", 3)], &t, 3).is_empty());
        // KEDA's HPA floors a minimum of 0 at 1.
        assert!(kedas_lagging(&[keda_hpa("a", "web", 1)], &t, 0).is_empty());
        // Another Deployment's, or a standalone HPA: not KEDA's lag.
        assert!(kedas_lagging(&[keda_hpa("a", "api", 5)], &t, 3).is_empty());
        let mut standalone = keda_hpa("a", "web", 5);
        standalone.metadata.owner_references = None;
        assert!(kedas_lagging(&[standalone], &t, 3).is_empty());
    }

    #[test]
    fn the_reverted_minimum_is_the_one_written() {
        let ann = marked("6", Some("2"));
        let ops = autoscaler_revert_ops(Some(&ann), "/spec/minReplicaCount", Some(json!(6)), false)
            .expect("ops");
        assert_eq!(
            minimum_after(&ops, "/spec/minReplicaCount", Some(6)),
            Some(2)
        );
        // Someone's 4 stays.
        let ops = autoscaler_revert_ops(Some(&ann), "/spec/minReplicaCount", Some(json!(4)), false)
            .expect("ops");
        assert_eq!(
            minimum_after(&ops, "/spec/minReplicaCount", Some(4)),
            Some(4)
        );
    }
}
