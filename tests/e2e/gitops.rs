//! A GitOps tool (Flux, or Argo CD with server-side apply) re-applies its
//! manifest every few seconds during a drain, forcing conflicts: its value
//! wins once, and nothing of ours writes back (behaviour.md section 5: "no
//! write loop with GitOps tools", invariant 4).
//!
//! Also the premise on the real apiserver: once the surge is written, the
//! field belongs to our field manager, so an apply that does not force
//! conflicts is refused (409) rather than silently undone.

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{EvictParams, Patch, PatchParams, PostParams};
use kube::{Api, Resource};
use serde::de::DeserializeOwned;
use serde::Serialize;

use eviction_autoscaler::surge::writer::{writer, Field, ReplicasWriter};

use crate::support::*;

const GITOPS: &str = "gitops";
/// The tool's sync interval here, and how long it keeps syncing: past the
/// e2e cooldown (5 s) several times, with the node still cordoned.
const SYNC_EVERY: Duration = Duration::from_millis(1500);
const SYNCS: usize = 10;

/// One sync: a server-side apply of `obj` as the GitOps tool, forcing
/// conflicts when `force`.
async fn sync<K>(api: &Api<K>, obj: &K, force: bool) -> kube::Result<K>
where
    K: Resource + Clone + Serialize + DeserializeOwned + std::fmt::Debug,
{
    let name = obj.meta().name.clone().expect("a name");
    let mut pp = PatchParams::apply(GITOPS);
    pp.force = force;
    api.patch(&name, &pp, &Patch::Apply(obj)).await
}

/// The premise: without `--force-conflicts` the apply is refused, since the
/// surge's write made our field manager the owner of the value.
async fn unforced_sync_conflicts<K>(api: &Api<K>, obj: &K)
where
    K: Resource + Clone + Serialize + DeserializeOwned + std::fmt::Debug,
{
    match sync(api, obj, false).await {
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        other => panic!("an unforced apply over our surge: want a 409 conflict, got {other:?}"),
    }
}

/// What a write of ours would change: the spec (its generation) and the
/// annotations (the markers). The controllers' status writes change neither.
fn ours<K: Resource>(
    k: &K,
) -> (
    Option<i64>,
    Option<std::collections::BTreeMap<String, String>>,
) {
    (k.meta().generation, k.meta().annotations.clone())
}

/// The record of Deployment `name`, as YAML.
fn record(ns: &TestNs, name: &str) -> String {
    String::from_utf8_lossy(&eas_get(&ns.name, name, "yaml").stdout).to_string()
}

/// The record of `name` is Degraded `SurgeImpossible`: its markers are the
/// GitOps tool's.
async fn wait_said_the_tools(ns: &TestNs, name: &str) {
    wait_for(
        "Degraded SurgeImpossible: markers written by someone else (the tool)",
        Duration::from_secs(30),
        || async {
            let y = record(ns, name);
            (y.contains("reason: SurgeImpossible")
                && y.contains("written by someone else (gitops)"))
            .then_some(())
        },
    )
    .await;
}

async fn wait_impossible_cleared(ns: &TestNs, name: &str) {
    wait_for("Degraded cleared", Duration::from_secs(30), || async {
        (!record(ns, name).contains("reason: SurgeImpossible")).then_some(())
    })
    .await;
}

/// Syncs `obj` (forced) `SYNCS` times, reading `value` of the live object
/// every 100 ms in between; after each sync, `between` runs (a drain's
/// eviction). Returns the readings after the first sync, and the live
/// object after the last sync but one and at the end.
async fn sync_loop<K, F, B, Fut>(
    api: &Api<K>,
    obj: &K,
    value: F,
    mut between: B,
) -> (Vec<Option<i32>>, K, K)
where
    K: Resource + Clone + Serialize + DeserializeOwned + std::fmt::Debug,
    F: Fn(&K) -> Option<i32>,
    B: FnMut() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let name = obj.meta().name.clone().expect("a name");
    let mut seen = Vec::new();
    let mut before_last = None;
    for i in 0..SYNCS {
        let synced = sync(api, obj, true).await.expect("forced apply");
        if i + 2 == SYNCS {
            before_last = Some(synced);
        }
        between().await;
        let until = tokio::time::Instant::now() + SYNC_EVERY;
        while tokio::time::Instant::now() < until {
            if let Ok(live) = api.get(&name).await {
                seen.push(value(&live));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    let last = api.get(&name).await.expect("get");
    (seen, before_last.expect("two syncs or more"), last)
}

/// Nothing of ours wrote between the last two syncs.
fn assert_no_write_between<K: Resource + std::fmt::Debug>(before_last: &K, last: &K, what: &str) {
    assert_eq!(
        ours(before_last),
        ours(last),
        "something wrote the {what}'s spec or annotations after a sync: {:?} then {:?}",
        before_last.meta(),
        last.meta()
    );
}

/// The field's value is the GitOps tool's, as managedFields record it.
fn assert_the_tools<K: Resource>(k: &K, field: Field) {
    assert_eq!(
        writer(k.meta(), field),
        ReplicasWriter::Someone,
        "{field:?} is the GitOps tool's: {:?}",
        k.meta().managed_fields
    );
}

fn assert_never_raised_again(seen: &[Option<i32>], want: i32, what: &str) {
    assert!(!seen.is_empty(), "no reading of {what}");
    let other: Vec<_> = seen.iter().filter(|v| **v != Some(want)).collect();
    assert!(
        other.is_empty(),
        "{what} left the GitOps value {want} between syncs (a write loop): {seen:?}"
    );
}

/// The Deployment's replicas, owned by the GitOps tool (server-side apply,
/// 3), surged by a cordon. The tool re-syncs 3 every 1.5 s for 15 s with
/// the node cordoned, and a drain tries to evict a pod of the node after
/// each sync. The pods on the node carry a high pod-deletion-cost, so the
/// scale-down to 3 removes the surge's pods and the node keeps holding the
/// pods the surge counted: each pass of the surge worker, woken by the
/// blocked eviction, still has a reason to surge. 3 is adopted at the
/// first sync and never raised again; the evictions are refused (the budget
/// allows none, as the tool wants); nothing of ours writes the Deployment
/// after the adoption; and with the node uncordoned the Deployment settles
/// at 3 without markers.
#[tokio::test]
async fn a_gitops_tool_forcing_its_replicas_mid_surge_wins_once_without_a_write_loop() {
    let _nodes = nodes_lock().await;
    let ns = TestNs::new("e2e-gitops").await;
    let deps: Api<Deployment> = ns.api();
    let node = "kwok-node-1";
    let d = rolling_max_surge(
        deployment("g", 3, Some(node)),
        IntOrString::String("100%".into()),
    );
    sync(&deps, &d, false).await.expect("create by apply");
    let on_node: Vec<String> = ready_on_node(&ns, "g", 3, node)
        .await
        .into_iter()
        .filter_map(|p| p.metadata.name)
        .collect();
    for pod in &on_node {
        kubectl_ok(&[
            "annotate",
            "-n",
            &ns.name,
            &format!("pod/{pod}"),
            "controller.kubernetes.io/pod-deletion-cost=1000",
        ]);
    }
    wait_pdb_blocking(&ns, "g", 3).await;

    kubectl_ok(&["cordon", node]);
    let t = 3 + on_node.len() as i32;
    wait_deployment(&ns, "g", t, true, Duration::from_secs(30)).await;
    unforced_sync_conflicts(&deps, &d).await;

    // The first sync, adopted; the budget counts the scale-down before the
    // drain's next eviction, so the apiserver refuses it too.
    sync(&deps, &d, true).await.expect("forced apply");
    wait_pdb_blocking(&ns, "g", 3).await;
    // A 429 must fail the eviction, not be retried by the client.
    let pods = pods_without_retry(&ns).await;
    let victim = on_node[0].clone();
    let mut refused = 0;
    let last_refusal = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let replicas = |d: &Deployment| d.spec.as_ref().and_then(|s| s.replicas);
    let (seen, before_last, last) = sync_loop(&deps, &d, replicas, || {
        let (pods, victim, last_refusal) = (pods.clone(), victim.clone(), last_refusal.clone());
        refused += 1;
        async move {
            match pods.evict(&victim, &EvictParams::default()).await {
                Err(kube::Error::Api(e)) if e.code == 429 => {
                    if let Ok(mut m) = last_refusal.lock() {
                        *m = e.message;
                    }
                }
                other => panic!(
                    "the eviction was not refused after the sync of 3 (raised again?): {other:?}"
                ),
            }
        }
    })
    .await;
    assert_eq!(refused, SYNCS, "one eviction after each sync");
    // Said at once, not after a hold: no room is coming from us.
    let said = last_refusal.lock().map(|m| m.clone()).unwrap_or_default();
    assert!(
        said.contains("keeps the 3 replicas someone set during its surge"),
        "the 429 says the tool's value stands: {said}"
    );
    let still: Vec<String> = wait_ready(&ns, "g", 3)
        .await
        .into_iter()
        .filter_map(|p| p.metadata.name)
        .filter(|p| on_node.contains(p))
        .collect();
    assert_eq!(
        still, on_node,
        "the node still holds the pods the surge counted"
    );
    assert_never_raised_again(&seen, 3, "spec.replicas");
    assert_no_write_between(&before_last, &last, "Deployment");
    assert_the_tools(&deps.get("g").await.expect("Deployment"), Field::Replicas);

    uncordon(node);
    assert_settled_at(&ns, "g", 3, Duration::from_secs(60)).await;
}

/// The same for an HPA's minimum: the GitOps tool owns the HPA (minimum 3),
/// a cordon raises the minimum and the Deployment, and the tool re-syncs
/// minimum 3 for 15 s with the node cordoned. 3 is adopted once and never
/// raised again, nothing of ours writes the HPA after it, and once the node is
/// uncordoned the HPA keeps 3 without markers and the Deployment goes back
/// to its baseline 3 without markers.
#[tokio::test]
async fn a_gitops_tool_forcing_an_hpa_minimum_mid_surge_wins_once_without_a_write_loop() {
    let _nodes = nodes_lock().await;
    let ns = TestNs::new("e2e-gitops-hpa").await;
    let deps: Api<Deployment> = ns.api();
    let hpas: Api<HorizontalPodAutoscaler> = ns.api();
    let node = "kwok-node-1";
    deps.create(
        &PostParams::default(),
        &rolling_max_surge(
            deployment("gh", 3, Some(node)),
            IntOrString::String("100%".into()),
        ),
    )
    .await
    .expect("create Deployment");
    let h = hpa("gh", "gh", 3);
    sync(&hpas, &h, false).await.expect("create HPA by apply");
    let on_node = ready_on_node(&ns, "gh", 3, node).await.len() as i32;
    wait_pdb_blocking(&ns, "gh", 3).await;

    kubectl_ok(&["cordon", node]);
    let t = 3 + on_node;
    wait_hpa_min(&hpas, "gh", t, Some(true), Duration::from_secs(30)).await;
    wait_deployment(&ns, "gh", t, true, Duration::from_secs(30)).await;
    unforced_sync_conflicts(&hpas, &h).await;

    let min = |h: &HorizontalPodAutoscaler| h.spec.as_ref().and_then(|s| s.min_replicas);
    let (seen, before_last, last) = sync_loop(&hpas, &h, min, || async {}).await;
    assert_never_raised_again(&seen, 3, "the HPA's minReplicas");
    assert_no_write_between(&before_last, &last, "HPA");
    assert_the_tools(&hpas.get("gh").await.expect("HPA"), Field::MinReplicas);

    uncordon(node);
    wait_hpa_min(&hpas, "gh", 3, Some(false), Duration::from_secs(60)).await;
    assert_settled_at(&ns, "gh", 3, Duration::from_secs(60)).await;
}

/// A manifest taken mid-surge carries our markers (baseline 3, surge 4):
/// `gm` with its replicas (4), `gn` with the markers alone (its replicas
/// defaulted to 1). The tool applies both again and again, with no drain.
/// The markers are the tool's, not a surge of ours: before, each sync had
/// them adopted or cleaned (a write, an Event) and the tool put them back,
/// a write loop as long as the tool runs. Now nothing of ours writes either
/// Deployment, the replicas stay the tool's, no surge Event is emitted, and
/// our PDB follows the replicas (the copy's baseline 3 is no floor). A
/// cordon meanwhile surges nothing (the copy would overwrite the surge at
/// the next sync): its record is Degraded and says why.
#[tokio::test]
async fn a_gitops_manifest_carrying_our_markers_is_left_alone() {
    use eviction_autoscaler::names::{ORIGINAL_MIN_REPLICAS, SURGE_REPLICAS};
    // No node cordoned by another test meanwhile: a pod there would be a
    // drain's, and the surge it starts a real one.
    let _nodes = nodes_lock().await;
    let ns = TestNs::new("e2e-gitops-markers").await;
    let deps: Api<Deployment> = ns.api();
    let with_markers = |mut d: Deployment| {
        d.metadata.annotations = Some(
            [(ORIGINAL_MIN_REPLICAS, "3"), (SURGE_REPLICAS, "4")]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        );
        d
    };
    let gm = with_markers(deployment("gm", 4, None));
    let mut gn = with_markers(deployment("gn", 1, None));
    if let Some(s) = gn.spec.as_mut() {
        s.replicas = None;
    }
    // Sampled from before the create: its budget is never sized on the
    // copy's baseline 3 (the admission webhook reads the copy as the
    // caches do).
    let sampler = PdbSampler::start(&ns, "gm");
    sync(&deps, &gm, false).await.expect("create gm by apply");
    sync(&deps, &gn, false).await.expect("create gn by apply");
    let gm_pods = wait_ready(&ns, "gm", 4).await;
    wait_ready(&ns, "gn", 1).await;
    wait_pdb_blocking(&ns, "gm", 4).await;
    wait_pdb_blocking(&ns, "gn", 1).await;

    let gn_seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let replicas = |d: &Deployment| d.spec.as_ref().and_then(|s| s.replicas);
    let (seen, before_last, last) = sync_loop(&deps, &gm, replicas, || {
        let (deps, gn, gn_seen) = (deps.clone(), gn.clone(), gn_seen.clone());
        async move {
            let synced = sync(&deps, &gn, true).await.expect("forced apply of gn");
            if let Ok(mut s) = gn_seen.lock() {
                s.push(synced);
            }
        }
    })
    .await;
    assert_never_raised_again(&seen, 4, "gm's spec.replicas");
    assert_no_write_between(&before_last, &last, "Deployment gm");
    let gn_syncs = gn_seen.lock().map(|s| s.clone()).unwrap_or_default();
    let gn_now = deps.get("gn").await.expect("gn");
    let gn_before = gn_syncs.last().expect("gn synced");
    assert_no_write_between(gn_before, &gn_now, "Deployment gn");
    assert_eq!(
        gn_now.spec.as_ref().and_then(|s| s.replicas),
        Some(1),
        "gn keeps its replicas"
    );
    for d in [&last, &gn_now] {
        let a = d.meta().annotations.clone().unwrap_or_default();
        assert_eq!(
            (
                a.get(ORIGINAL_MIN_REPLICAS).map(String::as_str),
                a.get(SURGE_REPLICAS).map(String::as_str)
            ),
            (Some("3"), Some("4")),
            "the tool's annotations stay as it wrote them: {a:?}"
        );
    }
    for reason in [
        "SurgeBaselineChanged",
        "SurgeReverted",
        "SurgeMarkersInvalid",
        "SurgeStarted",
    ] {
        assert_eq!(event_total(&ns.name, reason), 0, "no {reason} Event");
    }
    wait_pdb_blocking(&ns, "gm", 4).await;
    assert_eq!(sampler.finish().await, [4].into(), "gm's PDB minimum");

    // A drain meanwhile: a surge would be overwritten by the copy at the
    // tool's next sync, and made again. None is made; the record says why.
    let node = nodes_of(&gm_pods)[0].clone();
    kubectl_ok(&["cordon", &node]);
    wait_said_the_tools(&ns, "gm").await;
    sync(&deps, &gm, true).await.expect("forced apply");
    tokio::time::sleep(SYNC_EVERY).await;
    let d = deps.get("gm").await.expect("gm");
    uncordon(&node);
    assert_eq!(replicas(&d), Some(4), "no surge");
    assert_eq!(event_total(&ns.name, "SurgeStarted"), 0, "no surge");
    wait_impossible_cleared(&ns, "gm").await;
}

/// The tool's manifest is taken from the live Deployment while our surge
/// runs (replicas and both markers, as we wrote them) and synced from then
/// on: the apiserver makes the tool a co-owner of our numbers. The surge is
/// the tool's from its first sync: no write of ours follows (before, each
/// sync was adopted as a user's change, the markers written n to n, and
/// the tool put its baseline back: a write per sync), the replicas stay the
/// tool's through the drain and after it, and while pods are displaced the
/// record is Degraded, naming the tool (invariants 3 and 4).
#[tokio::test]
async fn a_copy_of_our_running_surge_synced_by_a_tool_becomes_the_tools() {
    use eviction_autoscaler::names::{ORIGINAL_MIN_REPLICAS, SURGE_REPLICAS};
    let _nodes = nodes_lock().await;
    let ns = TestNs::new("e2e-gitops-copy").await;
    let deps: Api<Deployment> = ns.api();
    let node = "kwok-node-1";
    let _uncordon = UncordonOnDrop(node);
    let (t, copy) = surged_and_a_copy(&ns, "gc", node).await;

    let first = sync(&deps, &copy, true).await.expect("forced apply");
    wait_said_the_tools(&ns, "gc").await;

    let mut syncs = 0;
    let replicas = |d: &Deployment| d.spec.as_ref().and_then(|s| s.replicas);
    let (seen, _, last) = sync_loop(&deps, &copy, replicas, || {
        syncs += 1;
        if syncs == 3 {
            uncordon(node);
        }
        async {}
    })
    .await;
    assert_never_raised_again(&seen, t, "spec.replicas");
    // Nothing of ours wrote after the tool's first sync (its own syncs
    // change nothing: the same values).
    assert_no_write_between(&first, &last, "Deployment");
    assert_the_tools(&last, Field::Replicas);
    let a = last.meta().annotations.clone().unwrap_or_default();
    assert_eq!(
        (
            a.get(ORIGINAL_MIN_REPLICAS).cloned(),
            a.get(SURGE_REPLICAS).cloned()
        ),
        (Some("3".to_string()), Some(t.to_string())),
        "the tool's copy stays as it wrote it: {a:?}"
    );
    for reason in [
        "SurgeReverted",
        "SurgeBaselineChanged",
        "SurgeMarkersInvalid",
    ] {
        assert_eq!(event_total(&ns.name, reason), 0, "no {reason} Event");
    }
    wait_impossible_cleared(&ns, "gm").await;
}

/// A manifest with Deployment `name` and a PDB of the same name, as YAML:
/// kustomize and Flux apply a PodDisruptionBudget after the Deployment, so
/// our admission-time PDB of that name is there first.
fn app_with_pdb(name: &str, replicas: i32, min_available: i32) -> String {
    format!(
        "apiVersion: apps/v1
kind: Deployment
metadata:
  name: {name}
spec:
  replicas: {replicas}
  selector:
    matchLabels: {{app: {name}}}
  template:
    metadata:
      labels: {{app: {name}}}
    spec:
      terminationGracePeriodSeconds: 0
      containers:
      - name: app
        image: registry.local/app:1
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: {name}
spec:
  minAvailable: {min_available}
  selector:
    matchLabels: {{app: {name}}}
"
    )
}

/// `kubectl apply -f` of `yaml` in `ns`, with `extra` flags; its output.
fn apply_manifest(ns: &TestNs, name: &str, yaml: &str, extra: &[&str]) -> String {
    let file = std::env::temp_dir().join(format!("e2e-{}-{name}.yaml", ns.name));
    std::fs::write(&file, yaml).expect("write the manifest");
    let path = path_str(&file);
    let mut args = vec!["apply", "-n", &ns.name, "-f", &path];
    args.extend_from_slice(extra);
    kubectl_ok(&args)
}

/// PDB `name` is the manifest's: its minimum as applied, no controller
/// reference of ours (deleting the Deployment would take it), and it stays
/// so while the Deployment scales (our PDB would follow the replicas) and
/// the manifest is applied again: nothing of ours writes it (its
/// generation). The only PDB there: ours did not come back beside it.
async fn assert_the_manifests(ns: &TestNs, name: &str, min: i32, sync: impl Fn()) {
    let pdbs: Api<k8s_openapi::api::policy::v1::PodDisruptionBudget> = ns.api();
    let settled = wait_pdb(ns, name, "the manifest's PDB, without our reference", |p| {
        !controlled_by(p, name)
            && p.spec.as_ref().and_then(|s| s.min_available.clone()) == Some(IntOrString::Int(min))
    })
    .await;
    let sampler = PdbSampler::start(ns, name);
    let deps: Api<Deployment> = ns.api();
    deps.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"spec": {"replicas": 4}})),
    )
    .await
    .expect("scale to 4");
    wait_ready(ns, name, 4).await;
    sync();
    // Several passes of the reconciler (it follows a scale within a second).
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(
        sampler.finish().await,
        [min].into(),
        "PDB {name}'s minAvailable"
    );
    let now = pdbs.get(name).await.expect("the PDB");
    assert!(
        !controlled_by(&now, name),
        "no reference of ours came back: {:?}",
        now.metadata.owner_references
    );
    assert_eq!(
        now.metadata.generation, settled.metadata.generation,
        "nothing wrote its spec"
    );
    let all = pdbs
        .list(&Default::default())
        .await
        .expect("list PDBs")
        .items;
    assert_eq!(
        all.len(),
        1,
        "one PDB over the pods: {:?}",
        all.iter().map(|p| &p.metadata.name).collect::<Vec<_>>()
    );
}

/// kustomize's order (`kubectl apply -k`, or one file with the Deployment
/// first): the Deployment's admission makes our PDB `web`, then the
/// manifest's PDB `web` is applied over it (`kubectl apply` patches what it
/// finds). The manifest's budget is kept: before, ours was kept in sync, its
/// `minAvailable` set back to the replicas at once and at every re-apply.
#[tokio::test]
async fn a_manifests_pdb_applied_over_ours_is_the_manifests() {
    let ns = TestNs::new("e2e-gitops-csa").await;
    let yaml = app_with_pdb("web", 3, 2);
    let out = apply_manifest(&ns, "web", &yaml, &[]);
    // Ours was there first (made at the Deployment's admission): kubectl
    // patched it rather than created it.
    assert!(
        out.contains("poddisruptionbudget.policy/web configured"),
        "the manifest's PDB landed on ours: {out}"
    );
    wait_ready(&ns, "web", 3).await;
    assert_the_manifests(&ns, "web", 2, || {
        apply_manifest(&ns, "web", &yaml, &[]);
    })
    .await;
}

/// Flux (server-side apply, forcing conflicts) adds a PDB of the
/// Deployment's name to a running app, over our PDB with its controller
/// reference: the apply takes the fields, our reference is dropped, the
/// PDB is the manifest's from then on, and an Event says so.
#[tokio::test]
async fn a_pdb_a_tool_adds_over_ours_is_handed_to_it() {
    let ns = TestNs::new("e2e-gitops-ssa").await;
    let deps: Api<Deployment> = ns.api();
    deps.create(&PostParams::default(), &deployment("api", 3, None))
        .await
        .expect("create api");
    wait_ready(&ns, "api", 3).await;
    wait_pdb(&ns, "api", "our PDB with our reference", |p| {
        is_owned(p) && controlled_by(p, "api")
    })
    .await;
    let yaml = app_with_pdb("api", 3, 1);
    let ssa = [
        "--server-side",
        "--force-conflicts",
        "--field-manager=kustomize-controller",
    ];
    apply_manifest(&ns, "api", &yaml, &ssa);
    assert_the_manifests(&ns, "api", 1, || {
        apply_manifest(&ns, "api", &yaml, &ssa);
    })
    .await;
    wait_for(
        "an Event saying the manifest took PDB api",
        Duration::from_secs(15),
        || async {
            let log = event_log(&ns.name);
            (log.contains("PDBHandedOver")
                && log.contains("a manifest applied by kustomize-controller declares it"))
            .then_some(())
        },
    )
    .await;
}
