//! No surge is ever stranded (behaviour.md sections 3, 5, 6): whatever
//! happens to the PDB, the namespace's scope, the opt-out annotation or the
//! autoscalers during a surge, the Deployment ends at exactly its baseline
//! without markers. Real cordons and `kubectl drain`s on the local control
//! plane; each test holds the nodes lock (its guard uncordons every node however
//! the test ends) and watches that Ready pods never fall below the budget.
//! The server runs with COOLDOWN=5s. The node-by-node upgrade, which needs a
//! longer cooldown, is in tests/e2e_modes/surge_upgrade.rs.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{DeleteParams, EvictParams, ListParams, Patch, PatchParams, PostParams};
use kube::Api;
use serde_json::json;

use eviction_autoscaler::surge::writer::{replicas_writer, ReplicasWriter};

use crate::support::*;

const ENABLE: &str = "eviction-autoscaler.azure.com/enable";
const PDB_CREATE: &str = "eviction-autoscaler.azure.com/pdb-create";
/// Surge, cooldown (5 s) and revert fit well inside this.
const REVERT_TIMEOUT: Duration = Duration::from_secs(60);

/// `replicas` pods preferring `node`, maxSurge 100% (so a surge can double it).
fn on_node(name: &str, replicas: i32, node: &str) -> Deployment {
    rolling_max_surge(
        deployment(name, replicas, Some(node)),
        IntOrString::String("100%".into()),
    )
}

fn annotate(mut d: Deployment, key: &str, value: &str) -> Deployment {
    d.metadata
        .annotations
        .get_or_insert_with(BTreeMap::new)
        .insert(key.into(), value.into());
    d
}

/// Adds a label to the pod template only (the selector stays `app=<name>`).
fn template_label(mut d: Deployment, key: &str, value: &str) -> Deployment {
    if let Some(meta) = d.spec.as_mut().and_then(|s| s.template.metadata.as_mut()) {
        meta.labels
            .get_or_insert_with(BTreeMap::new)
            .insert(key.into(), value.into());
    }
    d
}

async fn create_deployment(ns: &TestNs, d: &Deployment) {
    let deps: Api<Deployment> = ns.api();
    deps.create(&PostParams::default(), d)
        .await
        .unwrap_or_else(|e| panic!("create Deployment {:?}: {e}", d.metadata.name));
}

async fn create_pdb(ns: &TestNs, p: &PodDisruptionBudget) {
    let pdbs: Api<PodDisruptionBudget> = ns.api();
    pdbs.create(&PostParams::default(), p)
        .await
        .unwrap_or_else(|e| panic!("create PDB {:?}: {e}", p.metadata.name));
}

/// The user's PDB `tier-web` (minAvailable `min`) over every pod labelled `tier=web`.
async fn create_tier_web_pdb(ns: &TestNs, min: i32) {
    let pdb = user_pdb_over(
        "tier-web",
        &[("tier", "web")],
        Some(IntOrString::Int(min)),
        None,
    );
    create_pdb(ns, &pdb).await;
}

/// `n` Ready pods of `app`, all on `node` (so a cordon displaces every one).
async fn ready_on(ns: &TestNs, app: &str, n: usize, node: &str) {
    let pods = wait_ready(ns, app, n).await;
    let nodes = nodes_of(&pods);
    assert!(
        nodes.len() == n && nodes.iter().all(|x| x == node),
        "all {n} pods of {app} on {node}: {nodes:?}"
    );
}

/// Deployment `name` (3 replicas, all on `node`) under an HPA of the same
/// name with minimum 3, its PDB allowing no disruption. Returns the HPAs.
async fn under_hpa_on(ns: &TestNs, name: &str, node: &str) -> Api<HorizontalPodAutoscaler> {
    create_deployment(ns, &on_node(name, 3, node)).await;
    let hpas: Api<HorizontalPodAutoscaler> = ns.api();
    hpas.create(&PostParams::default(), &hpa(name, name, 3))
        .await
        .expect("create HPA");
    ready_on(ns, name, 3, node).await;
    wait_pdb_blocking(ns, name, 3).await;
    hpas
}

/// An HPA surge in place: [`under_hpa_on`], then `node` cordoned, the
/// HPA's minimum and the Deployment at 6 with the surge's markers.
async fn hpa_surge_on(ns: &TestNs, name: &str, node: &str) -> Api<HorizontalPodAutoscaler> {
    let hpas = under_hpa_on(ns, name, node).await;
    cordon_and_wait_surge(ns, node, &[(name, 6)]).await;
    wait_hpa_min(&hpas, name, 6, Some(true), REVERT_TIMEOUT).await;
    hpas
}

/// Cordons `node` and waits for the surge to `to` replicas with its markers,
/// and for the surge pods to be Ready.
async fn cordon_and_wait_surge(ns: &TestNs, node: &str, apps: &[(&str, i32)]) {
    kubectl_ok(&["cordon", node]);
    for (app, to) in apps {
        wait_deployment(ns, app, *to, true, Duration::from_secs(30)).await;
        wait_ready(ns, app, *to as usize).await;
    }
}

/// Deployment `app` (3 replicas, all on `node`, its PDB allowing no
/// disruption) surged to 6 by the node's cordon; the returned watcher has
/// counted its Ready pods since before the cordon.
async fn surged_on(ns: &TestNs, app: &str, node: &str) -> AvailabilityWatcher {
    create_deployment(ns, &on_node(app, 3, node)).await;
    ready_on(ns, app, 3, node).await;
    wait_pdb_blocking(ns, app, 3).await;
    let watch = AvailabilityWatcher::start(ns, app);
    cordon_and_wait_surge(ns, node, &[(app, 6)]).await;
    watch
}

async fn patch_ns_annotation(ns: &TestNs, key: &str, value: &str) {
    let api: Api<Namespace> = Api::all(ns.client.clone());
    let patch = json!({"metadata": {"annotations": {key: value}}});
    api.patch(&ns.name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap_or_else(|e| panic!("annotate namespace {}: {e}", ns.name));
}

/// None of our PDBs or EvictionAutoScalers (every one in the namespace is ours) is left.
async fn wait_nothing_of_ours(ns: &TestNs, what: &str) {
    wait_for(what, Duration::from_secs(30), || async {
        (owned_pdbs(ns).await.is_empty() && eviction_autoscalers(&ns.name).is_empty()).then_some(())
    })
    .await;
}

/// 1b. A manifest's PDB of the Deployment's name is applied over ours
///     mid-surge (Flux: a forced server-side apply), at another minimum: the
///     PDB is the manifest's from then on (our reference dropped, its
///     minimum never set back), and the surge, sized on ours, still goes
///     back to exactly its baseline once the drain is over.
#[tokio::test]
async fn a_manifests_pdb_applied_over_ours_mid_surge_stays_and_the_surge_reverts() {
    let _nodes = nodes_lock().await;
    let ns = TestNs::new("e2e-ss-declared").await;
    let node = "kwok-node-0";
    let watch = surged_on(&ns, "web", node).await;
    wait_pdb(&ns, "web", "our PDB with our reference", |p| {
        is_owned(p) && controlled_by(p, "web")
    })
    .await;
    let manifest: PodDisruptionBudget = serde_json::from_value(json!({
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": "web"},
        "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "web"}}}
    }))
    .expect("the manifest's PDB");
    let pdbs: Api<PodDisruptionBudget> = ns.api();
    let mut pp = PatchParams::apply("kustomize-controller");
    pp.force = true;
    pdbs.patch("web", &pp, &Patch::Apply(&manifest))
        .await
        .expect("the tool's apply");
    let d = drain_node(node, "app=web", &[]).await;
    uncordon(node);
    assert!(d.ok, "drain mid-surge must complete:\n{}", d.output);
    assert_settled_at(&ns, "web", 3, REVERT_TIMEOUT).await;
    let p = pdbs.get("web").await.expect("PDB web");
    assert!(
        !controlled_by(&p, "web"),
        "our reference dropped: {:?}",
        p.metadata.owner_references
    );
    assert_eq!(
        p.spec.and_then(|s| s.min_available),
        Some(IntOrString::Int(2)),
        "the manifest's minimum kept through the surge and its revert"
    );
    let fewest = watch.finish().await;
    assert!(
        fewest >= 2,
        "Ready pods went down to {fewest}, under the manifest's 2"
    );
    assert_eq!(
        event_total(&ns.name, "SurgeReverted"),
        1,
        "one revert:\n{}",
        event_log(&ns.name)
    );
}

/// 1. The user's PDB is deleted while the surge it caused is active. `web`
///    is the case in the brief (the reconciler then creates our PDB in its
///    place); `own` has also opted out of our PDB, so no PDB is left at all.
///    Both must end at exactly 3 without markers.
#[tokio::test]
async fn user_pdb_deleted_mid_surge_still_reverts() {
    let _nodes = nodes_lock().await;
    let ns = TestNs::new("e2e-ss-pdbgone").await;
    let node = "kwok-node-0";
    // The user's PDBs first: neither Deployment gets one of ours.
    create_pdb(
        &ns,
        &user_pdb("web-user", "web", Some(IntOrString::Int(3)), None),
    )
    .await;
    create_pdb(
        &ns,
        &user_pdb("own-user", "own", Some(IntOrString::Int(3)), None),
    )
    .await;
    create_deployment(&ns, &on_node("web", 3, node)).await;
    create_deployment(&ns, &annotate(on_node("own", 3, node), PDB_CREATE, "false")).await;
    ready_on(&ns, "web", 3, node).await;
    ready_on(&ns, "own", 3, node).await;
    wait_pdb_blocking(&ns, "web-user", 3).await;
    wait_pdb_blocking(&ns, "own-user", 3).await;
    assert!(
        owned_pdbs(&ns).await.is_empty(),
        "no PDB of ours beside a user PDB"
    );

    let web_watch = AvailabilityWatcher::start(&ns, "web");
    let own_watch = AvailabilityWatcher::start(&ns, "own");
    cordon_and_wait_surge(&ns, node, &[("web", 6), ("own", 6)]).await;

    let pdbs: Api<PodDisruptionBudget> = ns.api();
    for p in ["web-user", "own-user"] {
        pdbs.delete(p, &DeleteParams::default())
            .await
            .unwrap_or_else(|e| panic!("delete PDB {p}: {e}"));
    }
    let d = drain_node(node, "app in (web,own)", &[]).await;
    uncordon(node);
    assert!(
        d.ok,
        "drain with no user PDB left must complete:\n{}",
        d.output
    );

    assert_settled_at(&ns, "web", 3, REVERT_TIMEOUT).await;
    assert_settled_at(&ns, "own", 3, REVERT_TIMEOUT).await;
    let web_min = web_watch.finish().await;
    let own_min = own_watch.finish().await;
    assert!(web_min >= 3, "web: Ready pods went down to {web_min}");
    assert!(own_min >= 3, "own: Ready pods went down to {own_min}");
    assert_eq!(
        event_total(&ns.name, "SurgeReverted"),
        2,
        "one revert each:\n{}",
        event_log(&ns.name)
    );
}

/// 2a. The namespace leaves scope (`enable: "false"`) during a surge: the
///     product deletes its PDB and EvictionAutoScaler there, and the surge is
///     still reverted to exactly the baseline.
#[tokio::test]
async fn namespace_leaving_scope_mid_surge_reverts_and_cleans_up() {
    let _nodes = nodes_lock().await;
    let ns = TestNs::new("e2e-ss-nsout").await;
    let node = "kwok-node-1";
    let watch = surged_on(&ns, "nso", node).await;
    patch_ns_annotation(&ns, ENABLE, "false").await;
    wait_nothing_of_ours(
        &ns,
        "our PDB and EvictionAutoScaler removed after opting out",
    )
    .await;
    uncordon(node);

    assert_settled_at(&ns, "nso", 3, REVERT_TIMEOUT).await;
    let min = watch.finish().await;
    assert!(min >= 3, "Ready pods went down to {min}");
    assert!(
        owned_pdbs(&ns).await.is_empty(),
        "no PDB of ours out of scope"
    );
    assert!(
        eviction_autoscalers(&ns.name).is_empty(),
        "no EvictionAutoScaler out of scope"
    );
}

/// 2b. The Deployment opts out (`pdb-create: "false"`) during a surge: our
///     PDB goes, and the surge is still reverted to exactly the baseline.
#[tokio::test]
async fn deployment_opt_out_mid_surge_reverts_and_cleans_up() {
    let _nodes = nodes_lock().await;
    let ns = TestNs::new("e2e-ss-optout").await;
    let node = "kwok-node-2";
    let watch = surged_on(&ns, "opt", node).await;
    let deps: Api<Deployment> = ns.api();
    deps.patch(
        "opt",
        &PatchParams::default(),
        &Patch::Merge(&json!({"metadata": {"annotations": {PDB_CREATE: "false"}}})),
    )
    .await
    .expect("annotate the Deployment");
    wait_nothing_of_ours(
        &ns,
        "our PDB and EvictionAutoScaler removed after the opt-out",
    )
    .await;
    uncordon(node);

    assert_settled_at(&ns, "opt", 3, REVERT_TIMEOUT).await;
    let min = watch.finish().await;
    assert!(min >= 3, "Ready pods went down to {min}");
    assert!(
        owned_pdbs(&ns).await.is_empty(),
        "no PDB of ours for an opted-out Deployment"
    );
    assert!(
        eviction_autoscalers(&ns.name).is_empty(),
        "no EvictionAutoScaler for an opted-out Deployment"
    );
}

/// 4b. One user PDB (minAvailable 4) over a Deployment (`a`, 2 replicas,
///     maxSurge 1) and a StatefulSet (`db`, 2), every pod on the drained
///     node; db's pods drained (a's stay, displaced by the cordon). An
///     evicted db pod stays terminating a while (a finalizer here,
///     its grace period in life) and is made again only once gone. Counted
///     meanwhile, `a` surged to 3 keeps the budget able to open (3 + 2 > 4);
///     uncounted, the budget looked shut for good at a's largest surge
///     (3 + 1 = 4): a false "impossible", which also ends the webhook's hold.
#[tokio::test]
async fn a_statefulset_pod_terminating_under_the_same_pdb_makes_no_false_impossible() {
    let _nodes = nodes_lock().await;
    let ns = TestNs::new("e2e-ss-stspdb").await;
    let node = "kwok-node-0";
    create_tier_web_pdb(&ns, 4).await;
    let a = rolling_max_surge(deployment("a", 2, Some(node)), IntOrString::Int(1));
    create_deployment(&ns, &template_label(a, "tier", "web")).await;
    let db_spec = template_label(deployment("db", 2, Some(node)), "tier", "web")
        .spec
        .expect("spec");
    let sts: k8s_openapi::api::apps::v1::StatefulSet = serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": "db"},
        "spec": {"replicas": 2, "serviceName": "db",
                 "selector": db_spec.selector,
                 "template": db_spec.template}
    }))
    .expect("StatefulSet");
    let stss: Api<k8s_openapi::api::apps::v1::StatefulSet> = ns.api();
    stss.create(&PostParams::default(), &sts)
        .await
        .expect("create StatefulSet db");
    ready_on(&ns, "a", 2, node).await;
    ready_on(&ns, "db", 2, node).await;
    wait_pdb_blocking(&ns, "tier-web", 4).await;

    // Each db pod held terminating once evicted; the hold taken off however
    // the test ends (else the namespace is never deleted).
    const HOLD: &str = "e2e.eviction-autoscaler.azure.com/hold";
    let _unhold = Unhold {
        namespace: ns.name.clone(),
        pods: &["db-0", "db-1"],
    };
    let pods: Api<Pod> = ns.api();
    let set_hold = |name: &'static str, on: bool| {
        let pods = pods.clone();
        async move {
            let f = if on { json!([HOLD]) } else { json!(null) };
            pods.patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(&json!({"metadata": {"finalizers": f}})),
            )
            .await
            .unwrap_or_else(|e| panic!("finalizer of {name}: {e}"));
        }
    };
    set_hold("db-0", true).await;
    set_hold("db-1", true).await;

    // Only db's pods are evicted: `a`'s stay displaced on the cordoned node
    // the whole time, so a's step sizes its surge while each db pod is held.
    let drain = drain_node(node, "app=db", &["--timeout=120s"]);
    // Released 4 s after it is seen terminating: a few passes of the worker.
    let release = async {
        let mut seen: BTreeMap<&str, std::time::Instant> = BTreeMap::new();
        let mut done: Vec<&str> = Vec::new();
        let started = std::time::Instant::now();
        while done.len() < 2 && started.elapsed() < Duration::from_secs(120) {
            for name in ["db-0", "db-1"] {
                if done.contains(&name) {
                    continue;
                }
                let terminating = pods
                    .get_opt(name)
                    .await
                    .ok()
                    .flatten()
                    .is_some_and(|p| p.metadata.deletion_timestamp.is_some());
                match seen.get(name) {
                    None if terminating => {
                        seen.insert(name, std::time::Instant::now());
                    }
                    Some(t) if t.elapsed() > Duration::from_secs(4) && terminating => {
                        set_hold(name, false).await;
                        done.push(name);
                    }
                    _ => {}
                }
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        done.len()
    };
    let (d, released) = tokio::join!(drain, release);
    uncordon(node);
    let events = event_log(&ns.name);
    assert!(d.ok, "drain failed:\n{}\nEvents:\n{events}", d.output);
    assert_eq!(released, 2, "both db pods were held terminating:\n{events}");
    assert_eq!(
        event_total(&ns.name, "SurgeImpossible"),
        0,
        "no false \"impossible\":\n{events}"
    );
    assert_settled_at(&ns, "a", 2, REVERT_TIMEOUT).await;
}

/// 3b. The user's PDB is edited mid-surge to a minimum no surge can meet
///     (Degraded SurgeImpossible), then back. The condition goes while the
///     surge still holds (the webhook reads it: with it set, evictions are
///     not held and the 429 says "cannot surge" for the rest of the drain),
///     and the surge still goes back to exactly the baseline.
#[tokio::test]
async fn a_budget_made_impossible_and_back_mid_surge_clears_degraded() {
    let _nodes = nodes_lock().await;
    let ns = TestNs::new("e2e-ss-impback").await;
    let node = "kwok-node-1";
    create_pdb(
        &ns,
        &user_pdb("imp-user", "imp", Some(IntOrString::Int(3)), None),
    )
    .await;
    create_deployment(&ns, &on_node("imp", 3, node)).await;
    ready_on(&ns, "imp", 3, node).await;
    wait_pdb_blocking(&ns, "imp-user", 3).await;
    let watch = AvailabilityWatcher::start(&ns, "imp");
    cordon_and_wait_surge(&ns, node, &[("imp", 6)]).await;

    let pdbs: Api<PodDisruptionBudget> = ns.api();
    let set_min = |min: i32| {
        let pdbs = pdbs.clone();
        async move {
            pdbs.patch(
                "imp-user",
                &PatchParams::default(),
                &Patch::Merge(&json!({"spec": {"minAvailable": min}})),
            )
            .await
            .unwrap_or_else(|e| panic!("set the PDB's minAvailable to {min}: {e}"));
        }
    };
    let degraded = || {
        kubectl_ok(&[
            "get",
            "evictionautoscalers.eviction-autoscaler.azure.com",
            "-n",
            &ns.name,
            "imp-user",
            "-o",
            "yaml",
        ])
        .contains("reason: SurgeImpossible")
    };
    set_min(10).await;
    wait_for(
        "Degraded SurgeImpossible at minAvailable 10",
        Duration::from_secs(30),
        || async { degraded().then_some(()) },
    )
    .await;
    set_min(3).await;
    wait_for(
        "Degraded SurgeImpossible cleared at minAvailable 3, the node still cordoned",
        Duration::from_secs(30),
        || async { (!degraded()).then_some(()) },
    )
    .await;
    let deps: Api<Deployment> = ns.api();
    let d = deps.get("imp").await.expect("get Deployment imp");
    assert_eq!(
        (
            d.spec.and_then(|s| s.replicas),
            markers_present(d.metadata.annotations.as_ref())
        ),
        (Some(6), Some(true)),
        "the surge still holds"
    );
    uncordon(node);

    assert_settled_at(&ns, "imp", 3, REVERT_TIMEOUT).await;
    let min = watch.finish().await;
    assert!(min >= 3, "Ready pods went down to {min}");
}

/// 4. One user PDB (minAvailable 5) over two Deployments (`a` 3 replicas,
///    `b` 2, sharing `tier: web`), every pod on the drained node, maxSurge 1
///    each. Sized with one Deployment's replicas the budget can never open
///    (4 < 5, 3 < 5: a false "impossible"); sized with every pod it selects,
///    surging both gives 7 pods, 2 disruptions, and the drain completes.
#[tokio::test]
async fn pdb_over_two_deployments_is_sized_with_all_its_pods() {
    let _nodes = nodes_lock().await;
    let ns = TestNs::new("e2e-ss-twodeps").await;
    let node = "kwok-node-0";
    create_tier_web_pdb(&ns, 5).await;
    for (name, replicas) in [("a", 3), ("b", 2)] {
        let d = rolling_max_surge(deployment(name, replicas, Some(node)), IntOrString::Int(1));
        create_deployment(&ns, &template_label(d, "tier", "web")).await;
    }
    ready_on(&ns, "a", 3, node).await;
    ready_on(&ns, "b", 2, node).await;
    wait_pdb_blocking(&ns, "tier-web", 5).await;
    assert!(
        owned_pdbs(&ns).await.is_empty(),
        "the user PDB covers both Deployments: none of ours"
    );

    let watch = AvailabilityWatcher::start_selector(&ns, "tier=web");
    let d = drain_node(node, "tier=web", &["--timeout=120s"]).await;
    uncordon(node);
    let events = event_log(&ns.name);
    assert!(d.ok, "drain failed:\n{}\nEvents:\n{events}", d.output);
    assert_eq!(
        event_total(&ns.name, "SurgeImpossible"),
        0,
        "no false \"impossible\":\n{events}"
    );
    let eas = kubectl_ok(&[
        "get",
        "evictionautoscalers.eviction-autoscaler.azure.com",
        "-n",
        &ns.name,
        "-o",
        "jsonpath={range .items[*].status.conditions[*]}{.type}={.status} {.reason}{\"\\n\"}{end}",
    ]);
    assert!(
        !eas.lines().any(|l| l.starts_with("Degraded=True")),
        "not Degraded:\n{eas}"
    );

    assert_settled_at(&ns, "a", 3, REVERT_TIMEOUT).await;
    assert_settled_at(&ns, "b", 2, REVERT_TIMEOUT).await;
    let min = watch.finish().await;
    assert!(min >= 5, "Ready tier=web pods went down to {min}");
}

/// 5. A user PDB over the same pods appears beside ours: ours steps aside
///    (two PDBs over one pod make the apiserver answer 500 to every eviction,
///    which aborts `kubectl drain`), and the drain completes.
#[tokio::test]
async fn user_pdb_beside_ours_makes_ours_step_aside_and_the_drain_completes() {
    let _nodes = nodes_lock().await;
    let ns = TestNs::new("e2e-ss-beside").await;
    let node = "kwok-node-1";
    create_deployment(&ns, &on_node("st", 3, node)).await;
    ready_on(&ns, "st", 3, node).await;
    wait_pdb_blocking(&ns, "st", 3).await;

    create_pdb(
        &ns,
        &user_pdb("st-user", "st", Some(IntOrString::Int(2)), None),
    )
    .await;
    wait_for(
        "our PDB st deleted beside the user's st-user",
        Duration::from_secs(30),
        || async { owned_pdbs(&ns).await.is_empty().then_some(()) },
    )
    .await;

    let watch = AvailabilityWatcher::start(&ns, "st");
    let d = drain_node(node, "app=st", &[]).await;
    uncordon(node);
    assert!(
        d.ok,
        "drain failed:\n{}\nEvents:\n{}",
        d.output,
        event_log(&ns.name)
    );
    assert_settled_at(&ns, "st", 3, REVERT_TIMEOUT).await;
    let min = watch.finish().await;
    assert!(min >= 2, "Ready pods went down to {min} (user PDB: 2)");
    assert!(
        owned_pdbs(&ns).await.is_empty(),
        "ours is not recreated beside the user's"
    );
}

/// 6. An HPA (min 2, max 10) is created for a Deployment whose replicas are
///    surged (markers on the Deployment). The surge is reverted on the object
///    it changed, to its persisted baseline: the Deployment goes back to 3
///    (behaviour.md section 6: "restore exactly the persisted baseline ...
///    whatever happened to ... its autoscalers"), and the HPA is left as the
///    user made it (minReplicas 2, never raised by us, so nothing to restore).
///    The HPA's own value is not higher: 3 is within [2, 10], and without
///    metrics the HPA controller leaves the replicas alone.
#[tokio::test]
async fn hpa_added_mid_surge_reverts_to_the_baseline() {
    let _nodes = nodes_lock().await;
    let ns = TestNs::new("e2e-ss-hpalate").await;
    let node = "kwok-node-2";
    let watch = surged_on(&ns, "hl", node).await;
    let hpas: Api<HorizontalPodAutoscaler> = ns.api();
    hpas.create(&PostParams::default(), &hpa("hl", "hl", 2))
        .await
        .expect("create HPA");
    // Let the product see the HPA while the node is still cordoned.
    wait_min(&ns, "hl", 2).await;
    uncordon(node);

    assert_settled_at(&ns, "hl", 3, REVERT_TIMEOUT).await;
    let h = hpas.get("hl").await.expect("HPA");
    assert_eq!(
        h.spec.as_ref().and_then(|s| s.min_replicas),
        Some(2),
        "HPA minReplicas as the user set it"
    );
    assert_eq!(
        markers_present(h.metadata.annotations.as_ref()),
        Some(false),
        "no markers on the HPA"
    );
    let min = watch.finish().await;
    assert!(min >= 3, "Ready pods went down to {min}");
}

/// The same with an HPA whose maximum (4) is below the surge (6): the HPA
///    controller takes the Deployment down to 4 through `scale` at once,
///    with no metrics. That is the autoscaler's clamp, not a user's value:
///    after the drain the Deployment still goes back to its baseline 3
///    (within [2, 4], where the HPA leaves it), not kept at 4 for good.
#[tokio::test]
async fn hpa_added_mid_surge_below_the_surge_reverts_to_the_baseline() {
    let _nodes = nodes_lock().await;
    let ns = TestNs::new("e2e-ss-hpaclamp").await;
    let node = "kwok-node-2";
    let watch = surged_on(&ns, "hc", node).await;
    let hpas: Api<HorizontalPodAutoscaler> = ns.api();
    let mut h = hpa("hc", "hc", 2);
    if let Some(s) = h.spec.as_mut() {
        s.max_replicas = 4;
    }
    hpas.create(&PostParams::default(), &h)
        .await
        .expect("create HPA");
    wait_deployment(&ns, "hc", 4, true, Duration::from_secs(30)).await;
    wait_min(&ns, "hc", 2).await;
    uncordon(node);

    assert_settled_at(&ns, "hc", 3, REVERT_TIMEOUT).await;
    let h = hpas.get("hc").await.expect("HPA");
    assert_eq!(
        h.spec.as_ref().and_then(|s| s.min_replicas),
        Some(2),
        "HPA minReplicas as the user set it"
    );
    let min = watch.finish().await;
    assert!(min >= 3, "Ready pods went down to {min}");
}

/// A surge write that fails halfway. Under an HPA the surge writes the
/// Deployment first, then the HPA's minimum; here an admission policy
/// refuses every update of the HPA through the whole drain, so only the
/// first write lands. The Deployment's half of the surge is kept while the
/// node is cordoned (its surge pods let the drain go on) and goes back to
/// its baseline alone afterwards; once the policy is lifted, no late retry
/// raises the HPA's minimum after the episode. (Whether the refused write
/// is retried mid-drain depends on the budget: with the Deployment's surge
/// pods Ready it allows disruptions, and nothing more is planned.)
#[tokio::test]
async fn a_surge_whose_hpa_write_is_refused_keeps_the_deployments_half_and_reverts_it() {
    let _nodes = nodes_lock().await;
    let ns = TestNs::new("e2e-ss-halfway").await;
    let node = "kwok-node-1";
    let hpas = under_hpa_on(&ns, "hw", node).await;
    let watch = AvailabilityWatcher::start(&ns, "hw");
    let hpa_state = || async {
        let h = hpas.get("hw").await.expect("HPA");
        (
            h.spec.as_ref().and_then(|s| s.min_replicas),
            markers_present(h.metadata.annotations.as_ref()),
        )
    };

    let deny = DenyUpdates::apply(&ns, "autoscaling", "horizontalpodautoscalers", "false");
    deny.wait_refusing("hpa/hw").await;
    cordon_and_wait_surge(&ns, node, &[("hw", 6)]).await;
    // The surge stands while the node is cordoned, without the HPA's half.
    for _ in 0..6 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(deployment_state(&ns, "hw").await, (6, Some(true)));
        assert_eq!(
            hpa_state().await,
            (Some(3), Some(false)),
            "the HPA's update is refused"
        );
    }
    uncordon(node);
    assert_settled_at(&ns, "hw", 3, REVERT_TIMEOUT).await;
    deny.lift("hpa/hw").await;
    // Past the longest backoff a retry of the raise could still be waiting
    // out here (a few doublings of 0.5 s).
    tokio::time::sleep(Duration::from_secs(20)).await;
    assert_eq!(
        hpa_state().await,
        (Some(3), Some(false)),
        "a late write raised the HPA after the episode"
    );
    assert_eq!(deployment_state(&ns, "hw").await, (3, Some(false)));
    let min = watch.finish().await;
    assert!(min >= 3, "Ready pods went down to {min}");
}

/// An HPA whose minimum a surge raised is retargeted to another kind (a
/// StatefulSet of the same name) mid-surge. No Deployment step sees it any
/// more; it is stepped on its own and its minimum goes back to the user's
/// value, and the Deployment the surge raised goes back to its baseline.
#[tokio::test]
async fn hpa_retargeted_to_another_kind_mid_surge_is_restored() {
    let _nodes = nodes_lock().await;
    let ns = TestNs::new("e2e-ss-hparetarget").await;
    let node = "kwok-node-1";
    let hpas = hpa_surge_on(&ns, "hr", node).await;
    let retarget = json!({"spec": {"scaleTargetRef":
        {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "hr"}}});
    hpas.patch("hr", &PatchParams::default(), &Patch::Merge(&retarget))
        .await
        .expect("retarget the HPA");
    uncordon(node);

    wait_hpa_min(&hpas, "hr", 3, Some(false), REVERT_TIMEOUT).await;
    assert_settled_at(&ns, "hr", 3, REVERT_TIMEOUT).await;
    let h = hpas.get("hr").await.expect("HPA");
    assert_eq!(
        h.spec.map(|s| s.scale_target_ref.kind),
        Some("StatefulSet".to_string()),
        "the user's retarget is kept"
    );
}

/// The Deployment of an HPA surge is deleted mid-surge and made again under
/// the same name (a GitOps prune and sync, `kubectl replace --force`), its
/// new pods on other nodes. The HPA's minimum, which the surge raised, goes
/// back to the user's 3 without markers; the new Deployment ends at 3
/// without markers; one PDB of ours stands over the new pods, owned by the
/// new Deployment (the old one's went with it).
#[tokio::test]
async fn deployment_recreated_mid_surge_its_hpa_goes_back() {
    let _nodes = nodes_lock().await;
    let ns = TestNs::new("e2e-ss-recreated").await;
    let node = "kwok-node-0";
    let hpas = hpa_surge_on(&ns, "dr", node).await;
    let deps: Api<Deployment> = ns.api();
    let old_uid = deps.get("dr").await.expect("Deployment").metadata.uid;
    deps.delete("dr", &DeleteParams::foreground())
        .await
        .expect("delete Deployment dr");
    wait_gone(&deps, "dr", "Deployment dr gone", Duration::from_secs(60)).await;
    // Its pods prefer the cordoned node and land on the others.
    create_deployment(&ns, &on_node("dr", 3, node)).await;
    let new_uid = deps.get("dr").await.expect("Deployment").metadata.uid;
    assert_ne!(old_uid, new_uid, "a new Deployment");
    // The node is still cordoned, but none of dr's pods is on it any more:
    // nothing is displaced, so after the cooldown the HPA's minimum goes
    // back, and the new Deployment ends at its 3 (below the raised minimum
    // it may be recorded from its 3 and lifted by us meanwhile, as the HPA
    // would lift it; never kept at the HPA's 6, nor given the old one's
    // markers).
    wait_hpa_min(&hpas, "dr", 3, Some(false), REVERT_TIMEOUT).await;
    assert_settled_at(&ns, "dr", 3, REVERT_TIMEOUT).await;
    uncordon(node);
    let pdbs: Api<PodDisruptionBudget> = ns.api();
    let one_of_ours = wait_for(
        "one PDB, ours, owned by the new Deployment, minAvailable 3",
        Duration::from_secs(30),
        || async {
            let all = pdbs.list(&Default::default()).await.ok()?.items;
            let [p] = &all[..] else { return None };
            let owners: Vec<_> = p
                .metadata
                .owner_references
                .iter()
                .flatten()
                .map(|o| Some(o.uid.clone()))
                .collect();
            let min = p.spec.as_ref().and_then(|s| s.min_available.clone());
            (is_owned(p) && owners == vec![new_uid.clone()] && min == Some(IntOrString::Int(3)))
                .then(|| p.metadata.name.clone())
        },
    )
    .await;
    assert_eq!(one_of_ours.as_deref(), Some("dr"));
}

/// 3. The durable signal carries a time in the future (a replica's clock a
///    day ahead, or someone editing the EvictionAutoScaler): it counts as a
///    blocked eviction now, not until that time. The drain over, the surge
///    is reverted after the cooldown, as for any other signal.
#[tokio::test]
async fn last_eviction_in_the_future_does_not_strand_the_surge() {
    let _nodes = nodes_lock().await;
    let ns = TestNs::new("e2e-ss-future").await;
    let node = "kwok-node-2";
    let watch = surged_on(&ns, "fut", node).await;
    // A pod that stays: the signal names it, so it would count as displaced
    // for as long as the signal is fresh.
    let pod = a_ready_pod(&ns, "fut").await;
    let day_ahead =
        k8s_openapi::jiff::Timestamp::now() + k8s_openapi::jiff::SignedDuration::from_hours(24);
    let eas = eas_api(&ns);
    let patch = json!({"spec": {"lastEviction": {
        "podName": pod,
        "evictionTime": k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(day_ahead),
    }}});
    // The reconciler makes the EvictionAutoScaler beside the PDB, maybe a
    // moment after it.
    wait_for(
        "a lastEviction a day ahead written",
        Duration::from_secs(30),
        || async {
            eas.patch("fut", &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .ok()
                .map(|_| ())
        },
    )
    .await;
    uncordon(node);

    assert_settled_at(&ns, "fut", 3, REVERT_TIMEOUT).await;
    let min = watch.finish().await;
    assert!(min >= 3, "Ready pods went down to {min}");
}

/// 3b. A replica whose clock is an hour behind denies an eviction and writes
///    the durable signal with its time: read as written, it would be long
///    expired and the drain would wait on a surge that never comes. The
///    leader knew the EvictionAutoScaler before the value came, so it ages
///    the value from when it saw it (surge::clock): the Deployment surges,
///    and once the value has aged past the cooldown on the leader's clock
///    the surge is reverted. (The test writes the value as that replica
///    would: the same patch of `spec.lastEviction`.)
#[tokio::test]
async fn last_eviction_written_on_a_clock_an_hour_behind_still_surges_then_reverts() {
    let _nodes = nodes_lock().await;
    let ns = TestNs::new("e2e-ss-behind").await;
    let node = "kwok-node-2";
    create_deployment(&ns, &on_node("behind", 3, node)).await;
    ready_on(&ns, "behind", 3, node).await;
    wait_pdb_blocking(&ns, "behind", 3).await;
    let eas = eas_api(&ns);
    // The leader must know the object before the value comes (the
    // reconciler makes it beside the PDB), and see it without a signal.
    wait_for(
        "the EvictionAutoScaler, without a lastEviction",
        Duration::from_secs(30),
        || async {
            let e = eas.get_opt("behind").await.ok().flatten()?;
            e.data["spec"]["lastEviction"].is_null().then_some(())
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(deployment_state(&ns, "behind").await, (3, Some(false)));

    let watch = AvailabilityWatcher::start(&ns, "behind");
    let pod = a_ready_pod(&ns, "behind").await;
    let hour_behind =
        k8s_openapi::jiff::Timestamp::now() - k8s_openapi::jiff::SignedDuration::from_hours(1);
    let patch = json!({"spec": {"lastEviction": {
        "podName": pod,
        "evictionTime": k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(hour_behind),
    }}});
    eas.patch("behind", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("write lastEviction an hour behind");
    wait_surged_above(
        &ns,
        "behind",
        3,
        "an eviction denied on a clock an hour behind",
    )
    .await;

    assert_settled_at(&ns, "behind", 3, REVERT_TIMEOUT).await;
    let min = watch.finish().await;
    assert!(min >= 3, "Ready pods went down to {min}");
}

/// 4. Under an HPA surge the user scales the Deployment to 0 and then
///    patches it to exactly the HPA's raised minimum. The value alone looks
///    like the HPA lifting theirs to our minimum (ours to take back); the
///    Deployment's managedFields say the user wrote it, so their 6 is kept
///    after the surge, and the HPA goes back to the user's minimum. First,
///    the premise on a real control plane: a lift by the HPA is recorded as
///    the HPA controller's. (`kubectl scale` to 6 would not do: a write
///    through the scale subresource may be a controller's lift, see
///    surge::writer, and the product takes it for one.)
#[tokio::test]
async fn a_users_scale_to_the_raised_minimum_under_an_hpa_surge_is_kept() {
    let _nodes = nodes_lock().await;
    let ns = TestNs::new("e2e-ss-hpauser").await;
    let node = "kwok-node-1";
    create_deployment(&ns, &on_node("hu", 1, node)).await;
    let hpas: Api<HorizontalPodAutoscaler> = ns.api();
    hpas.create(&PostParams::default(), &hpa("hu", "hu", 3))
        .await
        .expect("create HPA");
    let deps: Api<Deployment> = ns.api();
    let lifted = wait_for(
        "the HPA lifts the Deployment from 1 to its minimum 3",
        Duration::from_secs(60),
        || async {
            let d = deps.get("hu").await.ok()?;
            (d.spec.as_ref().and_then(|s| s.replicas) == Some(3)).then_some(d)
        },
    )
    .await;
    assert_eq!(
        replicas_writer(&lifted.metadata),
        ReplicasWriter::Autoscaler,
        "the lift is read as the HPA's: {:?}",
        lifted.metadata.managed_fields
    );
    ready_on(&ns, "hu", 3, node).await;
    wait_pdb_blocking(&ns, "hu", 3).await;

    cordon_and_wait_surge(&ns, node, &[("hu", 6)]).await;
    wait_hpa_min(&hpas, "hu", 6, None, REVERT_TIMEOUT).await;
    kubectl_ok(&["scale", "deployment/hu", "-n", &ns.name, "--replicas=0"]);
    wait_for("the user's 0 recorded", REVERT_TIMEOUT, || async {
        let d = deps.get("hu").await.ok()?;
        let a = d.metadata.annotations?;
        (a.get(BASELINE_MARKER).map(String::as_str) == Some("0")).then_some(())
    })
    .await;
    assert_eq!(
        patch_replicas(&ns, "hu", &[6]).await,
        ReplicasWriter::Someone,
        "kubectl patch is read as someone's"
    );
    uncordon(node);

    wait_hpa_min(&hpas, "hu", 3, Some(false), REVERT_TIMEOUT).await;
    assert_settled_at(&ns, "hu", 6, REVERT_TIMEOUT).await;
}

/// A node of its own for one test (the three shared nodes stay as they
/// are); deleted again on drop, whatever the test did.
struct ExtraNode(&'static str);

impl ExtraNode {
    async fn create(name: &'static str) -> ExtraNode {
        let nodes: Api<Node> = Api::all(client().await);
        let node: Node = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "annotations": {"kwok.x-k8s.io/node": "fake"},
                         "labels": {"kubernetes.io/hostname": name, "type": "kwok"}},
            "status": {"allocatable": {"cpu": "32", "memory": "256Gi", "pods": "110"},
                       "capacity": {"cpu": "32", "memory": "256Gi", "pods": "110"}}}))
        .expect("node");
        nodes
            .create(&PostParams::default(), &node)
            .await
            .unwrap_or_else(|e| panic!("create node {name}: {e}"));
        let guard = ExtraNode(name);
        wait_for(
            &format!("node {name} Ready, without the node lifecycle controller's taints"),
            Duration::from_secs(60),
            || {
                let nodes = nodes.clone();
                async move {
                    let n = nodes.get(name).await.ok()?;
                    // A new node carries `not-ready:NoSchedule` until that
                    // controller sees it Ready: the pods, only preferring
                    // it, would be scheduled elsewhere meanwhile (seen once).
                    let tainted =
                        n.spec
                            .as_ref()
                            .and_then(|s| s.taints.as_ref())
                            .is_some_and(|t| {
                                t.iter().any(|t| t.key.starts_with("node.kubernetes.io/"))
                            });
                    let ready = n
                        .status?
                        .conditions?
                        .iter()
                        .any(|c| c.type_ == "Ready" && c.status == "True");
                    (ready && !tainted).then_some(())
                }
            },
        )
        .await;
        guard
    }
}

impl Drop for ExtraNode {
    fn drop(&mut self) {
        let _ = kubectl(&[
            "delete",
            "node",
            self.0,
            "--ignore-not-found",
            "--wait=false",
        ]);
    }
}

/// 9. The drained node is deleted mid-surge, as a managed upgrade or a
///    cluster autoscaler does once it is cordoned: its pods are left on a
///    node that no longer exists (the pod GC removes them only after 40 s).
///    A node that is gone is not draining, so nothing is displaced and the
///    surge goes back to 3 after the cooldown: it waits for no garbage
///    collector.
#[tokio::test]
async fn a_cordoned_node_deleted_mid_surge_the_surge_still_reverts() {
    let _nodes = nodes_lock().await;
    let node = "kwok-node-deleted";
    let extra = ExtraNode::create(node).await;
    let ns = TestNs::new("e2e-ss-nodegone").await;
    let _watch = surged_on(&ns, "ng", node).await;
    kubectl_ok(&["delete", "node", node, "--wait=true"]);
    drop(extra);

    // Within 30 s: the pod GC takes pods off a deleted node only after its
    // 40 s quarantine, so this revert did not wait for their removal.
    wait_deployment(&ns, "ng", 3, false, Duration::from_secs(30)).await;
    assert_settled_at(&ns, "ng", 3, REVERT_TIMEOUT).await;
    let pdb = wait_min(&ns, "ng", 3).await;
    assert!(is_owned(&pdb), "the PDB is ours");
}

/// 10. A rollout starts mid-surge (`kubectl rollout restart`, as a CD
///     pipeline may do during an upgrade): the template changes, a new
///     ReplicaSet replaces the pods while the node is still drained. The
///     template write is not a change of the replicas: the surge is not
///     adopted as the user's value and goes back to exactly 3; the rollout
///     completes, Ready pods never fall below the PDB's 3.
#[tokio::test]
async fn a_rollout_started_mid_surge_completes_and_the_surge_reverts() {
    let _nodes = nodes_lock().await;
    let ns = TestNs::new("e2e-ss-rollout").await;
    let node = "kwok-node-1";
    let watch = surged_on(&ns, "ro", node).await;
    kubectl_ok(&["-n", &ns.name, "rollout", "restart", "deployment/ro"]);
    let d = drain_node(node, "app=ro", &[]).await;
    assert!(d.ok, "drain during the rollout:\n{}", d.output);
    kubectl_ok(&[
        "-n",
        &ns.name,
        "rollout",
        "status",
        "deployment/ro",
        "--timeout=90s",
    ]);
    uncordon(node);

    assert_settled_at(&ns, "ro", 3, REVERT_TIMEOUT).await;
    let min = watch.finish().await;
    assert!(min >= 3, "Ready pods went down to {min}");
    let pdb = wait_min(&ns, "ro", 3).await;
    assert!(is_owned(&pdb), "the PDB is ours");
    assert_eq!(
        event_total(&ns.name, "SurgeReverted"),
        1,
        "one revert:\n{}",
        event_log(&ns.name)
    );
}

/// 11. The evicted pods stay Terminating on the cordoned node (a finalizer
///     that never clears, a volume that never detaches): they are leaving,
///     so they are not displaced, and the surge goes back to 3 after the
///     cooldown with the node still cordoned and those pods still there.
#[tokio::test]
async fn pods_stuck_terminating_on_a_cordoned_node_do_not_hold_the_surge() {
    let _nodes = nodes_lock().await;
    let ns = TestNs::new("e2e-ss-stuck").await;
    let _release = ReleasePods(ns.name.clone());
    let node = "kwok-node-2";
    let mut d = on_node("st", 3, node);
    if let Some(spec) = d.spec.as_mut() {
        spec.template
            .metadata
            .get_or_insert_with(Default::default)
            .finalizers = Some(vec![HOLD_FINALIZER.into()]);
    }
    create_deployment(&ns, &d).await;
    ready_on(&ns, "st", 3, node).await;
    wait_pdb_blocking(&ns, "st", 3).await;

    cordon_and_wait_surge(&ns, node, &[("st", 6)]).await;
    let pods: Api<Pod> = ns.api();
    let on_node: Vec<String> = ready_pods(&ns, "st")
        .await
        .into_iter()
        .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node))
        .filter_map(|p| p.metadata.name)
        .collect();
    assert_eq!(on_node.len(), 3, "the three first pods on {node}");
    for victim in &on_node {
        // Retried until the PDB's status counts the surge's pods.
        wait_for(
            &format!("eviction of {victim}"),
            Duration::from_secs(60),
            || async {
                pods.evict(victim, &EvictParams::default())
                    .await
                    .ok()
                    .map(|_| ())
            },
        )
        .await;
    }

    wait_deployment(&ns, "st", 3, false, REVERT_TIMEOUT).await;
    let stuck = pods
        .list(&ListParams::default().labels("app=st"))
        .await
        .expect("list pods")
        .items
        .into_iter()
        .filter(|p| on_node.contains(p.metadata.name.as_ref().unwrap_or(&String::new())))
        .filter(|p| p.metadata.deletion_timestamp.is_some())
        .count();
    assert_eq!(stuck, 3, "the evicted pods still Terminating on {node}");
    assert!(
        kubectl_ok(&["get", "node", node, "-o", "jsonpath={.spec.unschedulable}"]) == "true",
        "{node} still cordoned"
    );
    uncordon(node);
    assert_settled_at(&ns, "st", 3, REVERT_TIMEOUT).await;
}

/// 12. The HPA whose minimum a surge raised is deleted mid-surge (a GitOps
///     prune, an operator moving to KEDA). The surge also raised the
///     Deployment, with its own markers: it goes back to its baseline of 3
///     after the cooldown, and nothing is recreated or written for the HPA.
#[tokio::test]
async fn hpa_deleted_mid_surge_the_deployment_still_reverts() {
    let _nodes = nodes_lock().await;
    let ns = TestNs::new("e2e-ss-hpagone").await;
    let node = "kwok-node-0";
    let hpas = hpa_surge_on(&ns, "hg", node).await;
    hpas.delete("hg", &DeleteParams::default())
        .await
        .expect("delete HPA hg");
    wait_gone(&hpas, "hg", "HPA hg gone", Duration::from_secs(30)).await;
    // Our PDB stays at 3: without the HPA it follows the Deployment's own
    // baseline (its markers), not the surged 6.
    wait_min(&ns, "hg", 3).await;
    uncordon(node);

    assert_settled_at(&ns, "hg", 3, REVERT_TIMEOUT).await;
    assert!(
        hpas.get_opt("hg").await.expect("get HPA").is_none(),
        "the deleted HPA was made again"
    );
}

/// 13. The EvictionAutoScaler of a surged Deployment is deleted by hand
///     mid-surge (`kubectl delete evictionautoscalers --all`). The surge's
///     record is in the markers on the Deployment, not in the
///     EvictionAutoScaler: the Deployment goes back to exactly 3 after the
///     cooldown, the EvictionAutoScaler is made again and shows it.
#[tokio::test]
async fn eviction_autoscaler_deleted_mid_surge_the_surge_still_reverts() {
    let _nodes = nodes_lock().await;
    let ns = TestNs::new("e2e-ss-easgone").await;
    let node = "kwok-node-1";
    let watch = surged_on(&ns, "eg", node).await;
    wait_for(
        "one EvictionAutoScaler",
        Duration::from_secs(30),
        || async { (eviction_autoscalers(&ns.name) == ["eg"]).then_some(()) },
    )
    .await;
    let uid = || eas_get(&ns.name, "eg", "jsonpath={.metadata.uid}");
    let old_uid = String::from_utf8_lossy(&uid().stdout).to_string();
    kubectl_ok(&[
        "-n",
        &ns.name,
        "delete",
        "evictionautoscalers.eviction-autoscaler.azure.com",
        "--all",
        "--wait=true",
    ]);
    // Made again while the surge stands (the node is still cordoned).
    wait_for(
        "the EvictionAutoScaler made again",
        Duration::from_secs(30),
        || async {
            let out = uid();
            let now = String::from_utf8_lossy(&out.stdout).to_string();
            (out.status.success() && !now.is_empty() && now != old_uid).then_some(())
        },
    )
    .await;
    assert_eq!(deployment_state(&ns, "eg").await, (6, Some(true)));
    uncordon(node);

    assert_settled_at(&ns, "eg", 3, REVERT_TIMEOUT).await;
    let min = watch.finish().await;
    assert!(min >= 3, "Ready pods went down to {min}");
    let baseline = eas_get(&ns.name, "eg", "jsonpath={.status.minReplicas}");
    assert_eq!(
        String::from_utf8_lossy(&baseline.stdout).trim(),
        "3",
        "the new EvictionAutoScaler's baseline"
    );
}

/// 14. The user scales a surged Deployment to 0 mid-drain (the workload is
///     being retired). Their value wins: the Deployment stays at 0 without
///     markers, our PDB follows it to minAvailable 0, and no surge raises
///     it again, neither while the node is still cordoned nor after.
#[tokio::test]
async fn a_users_scale_to_zero_mid_surge_is_kept() {
    let _nodes = nodes_lock().await;
    let ns = TestNs::new("e2e-ss-zero").await;
    let node = "kwok-node-2";
    let _watch = surged_on(&ns, "zr", node).await;
    kubectl_ok(&["-n", &ns.name, "scale", "deployment/zr", "--replicas=0"]);
    wait_deployment(&ns, "zr", 0, false, Duration::from_secs(30)).await;
    wait_min(&ns, "zr", 0).await;
    // Past a cooldown with the node still cordoned, then after it.
    tokio::time::sleep(Duration::from_secs(8)).await;
    assert_eq!(deployment_state(&ns, "zr").await, (0, Some(false)));
    uncordon(node);
    assert_settled_at(&ns, "zr", 0, REVERT_TIMEOUT).await;
    assert_eq!(
        event_total(&ns.name, "SurgeStarted"),
        1,
        "one surge, not raised again:\n{}",
        event_log(&ns.name)
    );
}

/// 15. The user's PDB is edited mid-surge so that it no longer selects the
///     surged Deployment's pods (its selector now names another app). For
///     the Deployment that is a PDB gone: one PDB of ours takes its place
///     (minAvailable 3, the baseline, not the surge's 6), never two over
///     the pods, and the surge goes back to exactly 3.
#[tokio::test]
async fn user_pdb_selector_edited_away_mid_surge_reverts_with_one_pdb() {
    let _nodes = nodes_lock().await;
    let ns = TestNs::new("e2e-ss-pdbaway").await;
    let node = "kwok-node-1";
    create_pdb(
        &ns,
        &user_pdb("sel-user", "sel", Some(IntOrString::Int(3)), None),
    )
    .await;
    create_deployment(&ns, &on_node("sel", 3, node)).await;
    ready_on(&ns, "sel", 3, node).await;
    wait_pdb_blocking(&ns, "sel-user", 3).await;
    let watch = AvailabilityWatcher::start(&ns, "sel");
    cordon_and_wait_surge(&ns, node, &[("sel", 6)]).await;

    let pdbs: Api<PodDisruptionBudget> = ns.api();
    let away = json!({"spec": {"selector": {"matchLabels": {"app": "someone-else"}}}});
    pdbs.patch("sel-user", &PatchParams::default(), &Patch::Merge(&away))
        .await
        .expect("edit the user's PDB selector");
    let ours = wait_min(&ns, "sel", 3).await;
    assert!(is_owned(&ours), "the new PDB is ours");
    uncordon(node);

    assert_settled_at(&ns, "sel", 3, REVERT_TIMEOUT).await;
    let min = watch.finish().await;
    assert!(min >= 3, "Ready pods went down to {min}");
    // One PDB over the pods: ours; the user's selects none of them.
    let over: Vec<String> = pdbs
        .list(&ListParams::default())
        .await
        .expect("list PDBs")
        .items
        .into_iter()
        .filter(|p| selector_app(p) == Some("sel"))
        .filter_map(|p| p.metadata.name)
        .collect();
    assert_eq!(over, vec!["sel".to_string()], "one PDB over the pods");
    let user = pdbs.get("sel-user").await.expect("the user's PDB");
    assert_eq!(
        user.spec.and_then(|s| s.min_available),
        Some(IntOrString::Int(3)),
        "the user's PDB as they left it"
    );
}

/// 16. The surged Deployment is deleted mid-surge (a GitOps prune). Nothing
///     of ours is left behind: its PDB and EvictionAutoScaler go, and are
///     not made again once the node is uncordoned.
#[tokio::test]
async fn deployment_deleted_mid_surge_leaves_nothing_of_ours() {
    let _nodes = nodes_lock().await;
    let ns = TestNs::new("e2e-ss-depgone").await;
    let node = "kwok-node-2";
    let _watch = surged_on(&ns, "dg", node).await;
    let deps: Api<Deployment> = ns.api();
    deps.delete("dg", &DeleteParams::background())
        .await
        .expect("delete Deployment dg");
    wait_gone(&deps, "dg", "Deployment dg gone", Duration::from_secs(30)).await;
    wait_nothing_of_ours(&ns, "our PDB and EvictionAutoScaler of dg gone").await;
    uncordon(node);
    // Past a cooldown and a few worker passes: nothing made again.
    tokio::time::sleep(Duration::from_secs(8)).await;
    assert!(
        owned_pdbs(&ns).await.is_empty() && eviction_autoscalers(&ns.name).is_empty(),
        "something of ours came back"
    );
}

/// 17. A Deployment is added mid-surge under the user's PDB that the surged
///     one is under (`tier=web` over both): the PDB now counts the new pods
///     too. No PDB of ours is made for either (one budget over the pods),
///     the newcomer is never surged (none of its pods is displaced), and the
///     surged one goes back to exactly 3.
#[tokio::test]
async fn a_deployment_added_mid_surge_under_the_same_pdb() {
    let _nodes = nodes_lock().await;
    let ns = TestNs::new("e2e-ss-added").await;
    let node = "kwok-node-0";
    create_tier_web_pdb(&ns, 3).await;
    create_deployment(
        &ns,
        &template_label(on_node("first", 3, node), "tier", "web"),
    )
    .await;
    ready_on(&ns, "first", 3, node).await;
    wait_pdb_blocking(&ns, "tier-web", 3).await;
    let watch = AvailabilityWatcher::start(&ns, "first");
    cordon_and_wait_surge(&ns, node, &[("first", 6)]).await;

    // Its pods prefer the cordoned node and land on the others.
    create_deployment(
        &ns,
        &template_label(on_node("later", 2, node), "tier", "web"),
    )
    .await;
    wait_ready(&ns, "later", 2).await;
    wait_pdb(&ns, "tier-web", "8 pods counted", |p| {
        p.status.as_ref().is_some_and(|s| s.expected_pods == 8)
    })
    .await;
    uncordon(node);

    assert_settled_at(&ns, "first", 3, REVERT_TIMEOUT).await;
    assert_eq!(deployment_state(&ns, "later").await, (2, Some(false)));
    assert!(
        owned_pdbs(&ns).await.is_empty(),
        "a PDB of ours beside the user's"
    );
    let min = watch.finish().await;
    assert!(min >= 3, "Ready pods went down to {min}");
    assert_eq!(
        event_total(&ns.name, "SurgeStarted"),
        1,
        "one surge, of the first:\n{}",
        event_log(&ns.name)
    );
}

/// 13. A surge's baseline marker removed by hand mid-surge (`kubectl
///     annotate ... original-min-replicas-`): the lone marker left cannot
///     be told from a half-written one, so it is removed too and the value
///     kept (the baseline it recorded is gone), and a Warning Event says
///     so: the operator learns why the Deployment stays at the surge. The
///     kept 6 is the new baseline (the node still cordoned surges it again,
///     and that surge goes back to 6).
#[tokio::test]
async fn a_surge_marker_removed_by_hand_is_cleaned_and_said() {
    let _nodes = nodes_lock().await;
    let node = "kwok-node-1";
    let ns = TestNs::new("e2e-ss-bymhand").await;
    let _uncordon = UncordonOnDrop(node);
    let _watch = surged_on(&ns, "mh", node).await;
    kubectl_ok(&[
        "annotate",
        "deployment",
        "mh",
        "-n",
        &ns.name,
        &format!("{BASELINE_MARKER}-"),
    ]);
    assert_event_once(&ns.name, "SurgeMarkersInvalid", Duration::from_secs(20)).await;
    let (replicas, _) = deployment_state(&ns, "mh").await;
    assert!(replicas >= 6, "the value is kept: {replicas}");
    uncordon(node);
    assert_settled_at(&ns, "mh", 6, REVERT_TIMEOUT).await;
}

/// 14. A DaemonSet of the same chart: its pods carry the Deployment's label
///     (`app`), so the Deployment's selector and the budget cover them too.
///     A drain with `--ignore-daemonsets` surges the Deployment and leaves
///     the DaemonSet's pod on the node, which stays cordoned (maintenance).
///     That pod is not displaced from the Deployment (its controller is the
///     DaemonSet): the surge goes back after the cooldown, node cordoned.
///     Counted as the Deployment's, it held the surge as long as the node
///     stayed cordoned.
#[tokio::test]
async fn a_daemonset_pod_left_on_a_drained_node_does_not_hold_the_surge() {
    use k8s_openapi::api::apps::v1::DaemonSet;
    let _nodes = nodes_lock().await;
    let node = "kwok-node-0";
    let ns = TestNs::new("e2e-ss-daemon").await;
    let _uncordon = UncordonOnDrop(node);
    // The user's budget over all of app=dsw (3 of the Deployment, 3
    // agents), first: no PDB of ours is made beside it.
    create_pdb(
        &ns,
        &user_pdb("dsw", "dsw", Some(IntOrString::Int(6)), None),
    )
    .await;
    create_deployment(&ns, &on_node("dsw", 3, node)).await;
    ready_on(&ns, "dsw", 3, node).await;
    let ds: DaemonSet = serde_json::from_value(json!({
        "metadata": {"name": "dsw-agent"},
        "spec": {
            "selector": {"matchLabels": {"app": "dsw", "component": "agent"}},
            "template": {
                "metadata": {"labels": {"app": "dsw", "component": "agent"}},
                "spec": {"containers": [{"name": "agent", "image": "agent:1"}]}
            }
        }
    }))
    .expect("a DaemonSet");
    let daemonsets: Api<DaemonSet> = ns.api();
    daemonsets
        .create(&PostParams::default(), &ds)
        .await
        .expect("create the DaemonSet");
    let pods: Api<Pod> = ns.api();
    let agents = ListParams::default().labels("component=agent");
    let on_nodes = wait_for(
        "an agent Ready on each node",
        Duration::from_secs(60),
        || {
            let (pods, agents) = (pods.clone(), agents.clone());
            async move {
                let list = pods.list(&agents).await.ok()?;
                let ready: Vec<String> = list
                    .items
                    .iter()
                    .filter(|p| pod_is_ready(p))
                    .filter_map(|p| p.spec.as_ref().and_then(|s| s.node_name.clone()))
                    .collect();
                (ready.len() == 3).then_some(ready)
            }
        },
    )
    .await;
    assert!(on_nodes.iter().any(|n| n == node), "{on_nodes:?}");
    wait_pdb_blocking(&ns, "dsw", 6).await;

    let drain = drain_node(node, "app=dsw", &[]).await;
    assert!(drain.ok, "drain failed:\n{}", drain.output);
    assert!(
        deployment_state(&ns, "dsw").await.0 > 3,
        "the drain was blocked and surged"
    );
    // The node stays cordoned, the agent on it: back to 3 all the same.
    assert_settled_at(&ns, "dsw", 3, REVERT_TIMEOUT).await;
    let cordoned: Api<Node> = Api::all(ns.client.clone());
    let n = cordoned.get(node).await.expect("the node");
    assert_eq!(
        n.spec.and_then(|s| s.unschedulable),
        Some(true),
        "still cordoned"
    );
}

/// A KEDA surge in place when a standalone HPA comes: a conflict, in which
/// neither HPA scales on metrics but each still lifts the Deployment to its
/// minimum (KEDA's at the ScaledObject's raised one), and KEDA's webhook
/// refuses every write of the ScaledObject. While it lasts the surge stays
/// whole, markers and all: lowering the Deployment would only have KEDA's
/// HPA lift it again, with no markers left to bring it back. Once the
/// conflict ends, everything goes back to its baseline.
#[tokio::test]
async fn a_keda_surge_held_by_a_conflict_goes_back_once_it_ends() {
    let _nodes = nodes_lock().await;
    let (ns, so_api) = crate::surge::keda_namespace("e2e-kedaconf", "kc", 3).await;
    let keda = KedaOperator::start(&ns, "kc");
    let node = "kwok-node-2";
    create_deployment(&ns, &on_node("kc", 3, node)).await;
    ready_on(&ns, "kc", 3, node).await;
    wait_pdb_blocking(&ns, "kc", 3).await;
    cordon_and_wait_surge(&ns, node, &[("kc", 6)]).await;
    let so_min = || async {
        let so = so_api.get("kc").await.ok()?;
        let marked = so
            .metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(SURGE_MARKER));
        Some((so.data["spec"]["minReplicaCount"].as_i64()?, marked))
    };
    wait_for(
        "the ScaledObject's minimum raised",
        REVERT_TIMEOUT,
        || async { (so_min().await == Some((6, true))).then_some(()) },
    )
    .await;
    let hpas: Api<HorizontalPodAutoscaler> = ns.api();
    wait_hpa_min(&hpas, "keda-hpa-kc", 6, None, REVERT_TIMEOUT).await;

    hpas.create(&PostParams::default(), &hpa("kc-hpa", "kc", 3))
        .await
        .expect("create HPA");
    // KEDA's webhook, as it answers in that conflict.
    let refuses = DenyUpdates::forbid_updates(&ns, "keda.sh", "scaledobjects");
    refuses.wait_refusing("scaledobjects.keda.sh/kc").await;
    uncordon(node);
    // Past the cooldown (5 s) and SETTLE (3 s) several times over: the
    // Deployment is never lowered (KEDA's HPA would lift it straight back).
    let until = std::time::Instant::now() + Duration::from_secs(20);
    while std::time::Instant::now() < until {
        assert_eq!(
            deployment_state(&ns, "kc").await,
            (6, Some(true)),
            "the surge stays whole while the conflict lasts"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert_eq!(so_min().await, Some((6, true)), "refused: still recorded");

    // The conflict gone: the ScaledObject back to its minimum, KEDA's HPA
    // follows, then the Deployment back to its baseline.
    hpas.delete("kc-hpa", &DeleteParams::default())
        .await
        .expect("delete HPA");
    refuses.lift("scaledobjects.keda.sh/kc").await;
    wait_so_restored(&so_api, "kc", 3).await;
    assert_settled_at(&ns, "kc", 3, REVERT_TIMEOUT).await;
    let (_, foreign) = keda.finish().await;
    assert!(
        foreign.is_empty(),
        "KEDA's HPA written by someone else: {foreign:?}"
    );
}

/// Displaced pods are those a PDB selects (behaviour.md section 5): a
/// surge whose PDB is gone while its node stays cordoned (a quarantine, an
/// autoscaler's taint left behind) goes back to its baseline once the
/// cooldown has passed, without waiting for the node. `own` has opted out
/// of our PDB, so deleting the user's leaves none.
#[tokio::test]
async fn a_surge_whose_pdb_went_goes_back_while_its_node_stays_cordoned() {
    let _nodes = nodes_lock().await;
    let ns = TestNs::new("e2e-ss-nopdb").await;
    let node = "kwok-node-1";
    create_pdb(
        &ns,
        &user_pdb("own-user", "own", Some(IntOrString::Int(3)), None),
    )
    .await;
    create_deployment(&ns, &annotate(on_node("own", 3, node), PDB_CREATE, "false")).await;
    ready_on(&ns, "own", 3, node).await;
    wait_pdb_blocking(&ns, "own-user", 3).await;
    cordon_and_wait_surge(&ns, node, &[("own", 6)]).await;
    let pdbs: Api<PodDisruptionBudget> = ns.api();
    pdbs.delete("own-user", &DeleteParams::default())
        .await
        .expect("delete the user's PDB");
    // The node stays cordoned, its three pods on it.
    assert_settled_at(&ns, "own", 3, REVERT_TIMEOUT).await;
    let nodes: Api<Node> = Api::all(ns.client.clone());
    let n = nodes.get(node).await.expect("the node");
    assert_eq!(
        n.spec.and_then(|s| s.unschedulable),
        Some(true),
        "still cordoned"
    );
    assert!(
        owned_pdbs(&ns).await.is_empty(),
        "no PDB of ours (opted out)"
    );
    uncordon(node);
}

/// A narrower Deployment added mid-surge under ours for a broader one
/// (`shop`'s PDB selects `app=shop`; `api`'s pods are `app=shop, role=api`):
/// shop's PDB, sized for shop's pods alone, steps aside and api gets its
/// own, with never two PDBs at once; shop's surge still goes back to
/// exactly its baseline without markers (session 45's rule for a broader
/// PDB made first, checked against a surge in place).
#[tokio::test]
async fn a_narrower_deployment_added_mid_surge_gets_its_own_pdb_and_the_surge_reverts() {
    let _nodes = nodes_lock().await;
    let ns = TestNs::new("e2e-ss-narrow").await;
    let node = "kwok-node-1";
    let watch = surged_on(&ns, "shop", node).await;
    let api_l: &[(&str, &str)] = &[("app", "shop"), ("role", "api")];
    create_deployment(&ns, &labelled("api", api_l, api_l)).await;
    wait_sole_pdb(&ns, "api").await;
    uncordon(node);
    assert_settled_at(&ns, "shop", 3, REVERT_TIMEOUT).await;
    assert_eq!(owned_pdbs(&ns).await, ["api"], "nothing made again");
    // Never below its baseline's worth of Ready pods while that went on.
    assert!(watch.finish().await >= 3);
}
