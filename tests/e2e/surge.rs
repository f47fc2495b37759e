//! Surge and scale back with real drains (behaviour.md sections 4, 5, 6).
//! Every drain test holds the NODES lock and runs the availability watcher.
//! The server runs with COOLDOWN=5s.

use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::{Deployment, DeploymentStrategy, RollingUpdateDeployment};
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{EvictParams, ListParams, Patch, PatchParams, PostParams};
use kube::Api;

use crate::support::drain_node as drain;
use crate::support::*;

const SURGE: &str = "evictionSurgeReplicas";
const ORIGINAL: &str = "eviction-autoscaler.azure.com/original-min-replicas";

fn with_max_surge(mut d: Deployment, max_surge: Option<IntOrString>) -> Deployment {
    if let Some(spec) = d.spec.as_mut() {
        spec.strategy = Some(DeploymentStrategy {
            type_: Some("RollingUpdate".into()),
            rolling_update: max_surge.map(|m| RollingUpdateDeployment {
                max_surge: Some(m),
                max_unavailable: Some(IntOrString::Int(0)),
            }),
        });
    }
    d
}

fn spread(mut d: Deployment) -> Deployment {
    let app = d.metadata.name.clone().unwrap_or_default();
    if let Some(spec) = d.spec.as_mut().and_then(|s| s.template.spec.as_mut()) {
        spec.affinity = None;
        spec.topology_spread_constraints = Some(vec![serde_json::from_value(serde_json::json!({
            "maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
            "whenUnsatisfiable": "ScheduleAnyway",
            "labelSelector": {"matchLabels": {"app": app}}
        }))
        .expect("spread")]);
    }
    d
}

async fn replicas(ns: &TestNs, name: &str) -> (i32, Option<String>, Option<String>) {
    let deps: Api<Deployment> = ns.api();
    let d = deps.get(name).await.expect("deployment");
    let a = d.metadata.annotations.unwrap_or_default();
    (
        d.spec.and_then(|s| s.replicas).unwrap_or(1),
        a.get(SURGE).cloned(),
        a.get(ORIGINAL).cloned(),
    )
}

async fn wait_replicas(ns: &TestNs, name: &str, want: i32, markers: bool, timeout: Duration) {
    wait_for(
        &format!("{name} at {want} replicas (markers: {markers})"),
        timeout,
        || async {
            let (r, s, o) = replicas(ns, name).await;
            (r == want && s.is_some() == markers && o.is_some() == markers).then_some(())
        },
    )
    .await;
}

/// A Deployment `app` of 2 pods that prefer `node` (maxSurge 2), Ready,
/// under our PDB, which blocks: its pods.
async fn two_under_our_budget(ns: &TestNs, app: &str, node: &str) -> Vec<Pod> {
    let deps: Api<Deployment> = ns.api();
    deps.create(
        &PostParams::default(),
        &with_max_surge(deployment(app, 2, Some(node)), Some(IntOrString::Int(2))),
    )
    .await
    .unwrap();
    let pods = wait_ready(ns, app, 2).await;
    owned_pdb_blocking(ns, app, 2).await;
    pods
}

/// The owned PDB exists and the disruption controller reports it blocked.
async fn owned_pdb_blocking(ns: &TestNs, name: &str, healthy: i32) {
    wait_pdb(
        ns,
        name,
        "owned PDB settled with no disruption allowed",
        |p| {
            p.status.as_ref().is_some_and(|s| {
                s.observed_generation == p.metadata.generation
                    && s.current_healthy == healthy
                    && s.disruptions_allowed == 0
            })
        },
    )
    .await;
}

/// Samples spec.replicas over time: the peak, whether it ever shrank before
/// the revert, and the replica-seconds above a baseline.
struct ReplicaTrace {
    stop: tokio::sync::watch::Sender<bool>,
    task: tokio::task::JoinHandle<Vec<(Instant, i32)>>,
}

impl ReplicaTrace {
    fn start(ns: &TestNs, name: &str) -> ReplicaTrace {
        let deps: Api<Deployment> = ns.api();
        let name = name.to_string();
        let (stop, mut stopped) = tokio::sync::watch::channel(false);
        let task = tokio::spawn(async move {
            let mut samples = Vec::new();
            loop {
                if let Ok(d) = deps.get(&name).await {
                    samples.push((Instant::now(), d.spec.and_then(|s| s.replicas).unwrap_or(1)));
                }
                tokio::select! {
                    _ = stopped.changed() => break,
                    _ = tokio::time::sleep(Duration::from_millis(100)) => {}
                }
            }
            samples
        });
        ReplicaTrace { stop, task }
    }

    async fn finish(self) -> Vec<(Instant, i32)> {
        let _ = self.stop.send(true);
        self.task.await.unwrap_or_default()
    }
}

fn peak(samples: &[(Instant, i32)]) -> i32 {
    samples.iter().map(|s| s.1).max().unwrap_or(0)
}

fn replica_seconds_above(samples: &[(Instant, i32)], baseline: i32) -> f64 {
    samples
        .windows(2)
        .map(|w| f64::from((w[0].1 - baseline).max(0)) * (w[1].0 - w[0].0).as_secs_f64())
        .sum()
}

async fn pods_of(ns: &TestNs, app: &str) -> Vec<Pod> {
    wait_ready(ns, app, ready_pods(ns, app).await.len().max(1)).await
}

/// Scenario 1 (and 11): a 3-replica Deployment with its owned PDB, every
/// pod on one node; a real `kubectl drain` of that node completes with the
/// surge, never below 3 Ready pods, and scales back to exactly 3.
async fn drain_one_node(prefix: &str, max_surge: Option<IntOrString>, want_peak: i32) {
    let _nodes = nodes_lock().await;
    let ns = TestNs::new(prefix).await;
    let deps: Api<Deployment> = ns.api();
    let node = "kwok-node-0";
    deps.create(
        &PostParams::default(),
        &with_max_surge(deployment("web", 3, Some(node)), max_surge),
    )
    .await
    .expect("create");
    let pods = wait_ready(&ns, "web", 3).await;
    assert!(
        nodes_of(&pods).iter().all(|n| n == node),
        "all pods on {node}: {:?}",
        nodes_of(&pods)
    );
    owned_pdb_blocking(&ns, "web", 3).await;

    let watcher = AvailabilityWatcher::start(&ns, "web");
    let trace = ReplicaTrace::start(&ns, "web");
    let wh = WebhookInfo::get();
    let blocked = || {
        wh.metric_sum("eviction_autoscaler_blocked_evictions_total", &[])
            + wh.metric_sum("eviction_autoscaler_evictions_held", &[])
    };
    let before = blocked();
    let d = drain_blocked_first(node, "app=web", || blocked() > before).await;
    // The node stays cordoned until the last check (a replacement created
    // just after the drain would otherwise land on it again), and is
    // uncordoned however the test ends.
    let _uncordon = UncordonOnDrop(node);
    assert!(d.ok, "drain failed:\n{}", d.output);
    // Blocked at first: kubectl met our 429, or the webhook held the
    // eviction (EVICTION_HOLD) until the surge made room.
    let held = WebhookInfo::get()
        .log()
        .lines()
        .any(|l| l.contains(&ns.name) && l.contains("blocked eviction held"));
    assert!(
        d.output.contains("denied the request") || held,
        "the budget blocked at first:\n{}",
        d.output
    );
    wait_replicas(&ns, "web", 3, false, Duration::from_secs(60)).await;
    let samples = trace.finish().await;
    let min_ready = watcher.finish().await;
    assert!(min_ready >= 3, "Ready pods went down to {min_ready}");
    assert_eq!(peak(&samples), want_peak, "peak replicas");
    let after = ready_pods(&ns, "web").await;
    assert!(
        nodes_of(&after).iter().all(|n| n != node),
        "no pod left on the drained node"
    );
    record_figure(format!(
        "{prefix}: kubectl drain ran {:.1}s (from its start, whose first evictions were blocked, to completion), peak {} replicas, {:.1} extra replica-seconds",
        d.took.as_secs_f64(),
        peak(&samples),
        replica_seconds_above(&samples, 3)
    ));
}

#[tokio::test]
async fn drain_completes_with_surge_to_double() {
    drain_one_node("e2e-drain100", Some(IntOrString::String("100%".into())), 6).await;
}

#[tokio::test]
async fn drain_completes_with_default_max_surge() {
    // An unset rolling update means maxSurge 25%: ceil(0.75) = 1 extra replica.
    drain_one_node("e2e-drain25", None, 4).await;
}

/// Scenario 2: a cordon alone surges before any eviction; uncordon with
/// nothing evicted scales back after the cooldown.
#[tokio::test]
async fn cordon_surges_proactively_and_uncordon_scales_back() {
    let _nodes = nodes_lock().await;
    let ns = TestNs::new("e2e-cordon").await;
    let deps: Api<Deployment> = ns.api();
    let node = "kwok-node-1";
    deps.create(
        &PostParams::default(),
        &with_max_surge(deployment("cw", 2, Some(node)), Some(IntOrString::Int(5))),
    )
    .await
    .unwrap();
    let pods = wait_ready(&ns, "cw", 2).await;
    let on_node = nodes_of(&pods).iter().filter(|n| *n == node).count() as i32;
    assert!(on_node > 0, "a pod on {node}");
    owned_pdb_blocking(&ns, "cw", 2).await;
    kubectl_ok(&["cordon", node]);
    wait_replicas(&ns, "cw", 2 + on_node, true, Duration::from_secs(20)).await;
    uncordon(node);
    wait_replicas(&ns, "cw", 2, false, Duration::from_secs(40)).await;
}

/// Scenario 3: two nodes cordoned one after the other, then drained: the
/// surge tops up and never shrinks until the scale back.
#[tokio::test]
async fn second_node_tops_up_and_never_shrinks() {
    let _nodes = nodes_lock().await;
    let ns = TestNs::new("e2e-topup").await;
    let deps: Api<Deployment> = ns.api();
    deps.create(
        &PostParams::default(),
        &spread(with_max_surge(
            deployment("tu", 3, None),
            Some(IntOrString::Int(3)),
        )),
    )
    .await
    .unwrap();
    let pods = wait_ready(&ns, "tu", 3).await;
    let mut nodes = nodes_of(&pods);
    nodes.sort();
    nodes.dedup();
    assert_eq!(nodes.len(), 3, "one pod per node: {nodes:?}");
    owned_pdb_blocking(&ns, "tu", 3).await;
    let watcher = AvailabilityWatcher::start(&ns, "tu");
    let trace = ReplicaTrace::start(&ns, "tu");
    kubectl_ok(&["cordon", "kwok-node-0"]);
    wait_replicas(&ns, "tu", 4, true, Duration::from_secs(20)).await;
    kubectl_ok(&["cordon", "kwok-node-1"]);
    // Node 1 holds its own pod and perhaps the first surge pod: 5 or 6.
    wait_for(
        "top-up after the second cordon",
        Duration::from_secs(20),
        || async {
            let (r, s, _) = replicas(&ns, "tu").await;
            (r >= 5 && s.is_some()).then_some(())
        },
    )
    .await;
    let d0 = drain("kwok-node-0", "app=tu", &[]).await;
    let d1 = drain("kwok-node-1", "app=tu", &[]).await;
    uncordon("kwok-node-0");
    uncordon("kwok-node-1");
    assert!(d0.ok && d1.ok, "drains:\n{}\n{}", d0.output, d1.output);
    wait_replicas(&ns, "tu", 3, false, Duration::from_secs(60)).await;
    let samples = trace.finish().await;
    assert!(watcher.finish().await >= 3, "Ready pods below 3");
    // Non-decreasing until the first sample back at the baseline.
    let values: Vec<i32> = samples.iter().map(|s| s.1).collect();
    let max = peak(&samples);
    assert!(max >= 5, "topped up: {values:?}");
    let top = values.iter().position(|v| *v == max).expect("peak");
    let end = values.iter().rposition(|v| *v == max).expect("peak");
    assert!(
        values[..=top].windows(2).all(|w| w[0] <= w[1]),
        "shrank before the top: {values:?}"
    );
    assert!(
        values[top..=end].iter().all(|v| *v == max),
        "shrank mid-drain: {values:?}"
    );
}

/// Scenario 4 (HPA): the HPA minimum is raised and restored.
#[tokio::test]
async fn hpa_minimum_is_raised_and_restored() {
    let _nodes = nodes_lock().await;
    let ns = TestNs::new("e2e-hpa").await;
    let deps: Api<Deployment> = ns.api();
    let node = "kwok-node-2";
    deps.create(
        &PostParams::default(),
        &with_max_surge(deployment("h", 2, Some(node)), Some(IntOrString::Int(2))),
    )
    .await
    .unwrap();
    let hpas: Api<HorizontalPodAutoscaler> = ns.api();
    hpas.create(&PostParams::default(), &hpa("h", "h", 2))
        .await
        .unwrap();
    wait_ready(&ns, "h", 2).await;
    owned_pdb_blocking(&ns, "h", 2).await;
    let watcher = AvailabilityWatcher::start(&ns, "h");
    let sampler = {
        let hpas = hpas.clone();
        tokio::spawn(async move {
            let mut peak = 0;
            for _ in 0..600 {
                if let Ok(h) = hpas.get("h").await {
                    peak = peak.max(h.spec.and_then(|s| s.min_replicas).unwrap_or(0));
                }
                if peak > 2 {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            peak
        })
    };
    let d = drain(node, "app=h", &[]).await;
    uncordon(node);
    assert!(d.ok, "drain:\n{}", d.output);
    let peak_min = sampler.await.unwrap_or(0);
    assert!(peak_min > 2, "the HPA minimum was raised (peak {peak_min})");
    wait_hpa_min(&hpas, "h", 2, Some(false), Duration::from_secs(60)).await;
    // The Deployment goes back too, a few seconds after its HPA (SETTLE),
    // and without markers: nothing lifts it again.
    wait_replicas(&ns, "h", 2, false, Duration::from_secs(30)).await;
    assert!(watcher.finish().await >= 2);
    let events = kubectl_ok(&[
        "get",
        "events.events.k8s.io",
        "-n",
        &ns.name,
        "-o",
        "jsonpath={range .items[*]}{.reason}{\"\\n\"}{end}",
    ]);
    assert!(
        events.contains("SurgeStarted") && events.contains("SurgeReverted"),
        "{events}"
    );
}

/// An HPA made while a surge of the Deployment's replicas is in place and
/// the budget still blocks (the surge's pods kept Pending by a taint on the
/// other nodes): the Deployment runs a surge nothing holds, the state a
/// surge cut between its two writes (Deployment, then minimum) also leaves.
/// The HPA's minimum is raised to the surge too (an HPA acting on metrics
/// would otherwise take the Deployment down mid-drain, a value then adopted
/// as someone's), and both go back to the baseline after the drain.
#[tokio::test]
async fn an_hpa_made_mid_surge_gets_the_surge_and_both_go_back() {
    let _nodes = nodes_lock().await;
    let ns = TestNs::new("e2e-hpa-late").await;
    let node = "kwok-node-2";
    let pods = two_under_our_budget(&ns, "h", node).await;
    assert!(nodes_of(&pods).iter().all(|n| n == node), "both on {node}");
    let taint = format!("{LATER_TAINT}=1:NoSchedule");
    for n in NODE_NAMES.iter().filter(|n| **n != node) {
        kubectl_ok(&["taint", "node", n, &taint]);
    }
    let _uncordon = UncordonOnDrop(node);
    kubectl_ok(&["cordon", node]);
    wait_replicas(&ns, "h", 4, true, Duration::from_secs(20)).await;
    let hpas: Api<HorizontalPodAutoscaler> = ns.api();
    hpas.create(&PostParams::default(), &hpa("h", "h", 2))
        .await
        .unwrap();
    wait_hpa_min(&hpas, "h", 4, Some(true), Duration::from_secs(30)).await;
    let (replicas, _, _) = replicas(&ns, "h").await;
    assert_eq!(replicas, 4, "the Deployment keeps the surge");
    for n in NODE_NAMES.iter().filter(|n| **n != node) {
        kubectl_ok(&["taint", "node", n, &format!("{LATER_TAINT}-")]);
    }
    uncordon(node);
    wait_hpa_min(&hpas, "h", 2, Some(false), Duration::from_secs(60)).await;
    wait_replicas(&ns, "h", 2, false, Duration::from_secs(30)).await;
}

/// Scenario 5: a user PDB with maxUnavailable 0 cannot be helped: no surge,
/// Degraded with the reason, and the 429 says why.
#[tokio::test]
async fn max_unavailable_zero_is_degraded_and_the_429_says_why() {
    let _nodes = nodes_lock().await;
    let ns = TestNs::new("e2e-zero").await;
    let deps: Api<Deployment> = ns.api();
    let pdbs: Api<PodDisruptionBudget> = ns.api();
    pdbs.create(
        &PostParams::default(),
        &user_pdb("z-pdb", "z", None, Some(IntOrString::Int(0))),
    )
    .await
    .unwrap();
    deps.create(
        &PostParams::default(),
        &deployment("z", 2, Some("kwok-node-0")),
    )
    .await
    .unwrap();
    let pods = wait_ready(&ns, "z", 2).await;
    wait_pdb(&ns, "z-pdb", "settled", |p| {
        p.status.as_ref().is_some_and(|s| {
            s.observed_generation == p.metadata.generation && s.current_healthy == 2
        })
    })
    .await;
    let node = nodes_of(&pods)[0].clone();
    let d = drain(&node, "app=z", &["--timeout=15s"]).await;
    let eas = || {
        kubectl_ok(&[
            "get",
            "evictionautoscalers",
            "-n",
            &ns.name,
            "z-pdb",
            "-o",
            "yaml",
        ])
    };
    // Read while the node is still cordoned: once it is not, nothing is
    // displaced and the next pass clears the condition (checked below).
    let yaml = eas();
    uncordon(&node);
    assert!(!d.ok);
    assert!(
        d.output.contains("cannot surge Deployment z"),
        "the 429 says why:\n{}",
        d.output
    );
    let (r, s, _) = replicas(&ns, "z").await;
    assert_eq!((r, s), (2, None), "no surge");
    assert!(yaml.contains("reason: SurgeImpossible"), "{yaml}");
    // Nothing displaced any more: no surge is needed, and the condition
    // clears (a cause fixed since is not shown for good).
    wait_for(
        "Degraded SurgeImpossible cleared after the drain",
        Duration::from_secs(45),
        || async { (!eas().contains("reason: SurgeImpossible")).then_some(()) },
    )
    .await;
}

/// An HPA already at its maximum (min 3 = max 3): the apiserver refuses a
/// higher minimum, so no surge is written; Degraded and the 429 say why
/// (before, the refused write was retried every 2 s while the drain waited).
#[tokio::test]
async fn hpa_at_its_maximum_is_degraded_and_the_429_says_why() {
    let _nodes = nodes_lock().await;
    let ns = TestNs::new("e2e-hpamax").await;
    let deps: Api<Deployment> = ns.api();
    let node = "kwok-node-1";
    deps.create(
        &PostParams::default(),
        &with_max_surge(deployment("hm", 3, Some(node)), Some(IntOrString::Int(2))),
    )
    .await
    .unwrap();
    let hpas: Api<HorizontalPodAutoscaler> = ns.api();
    let mut h = hpa("hm", "hm", 3);
    if let Some(spec) = h.spec.as_mut() {
        spec.max_replicas = 3;
    }
    hpas.create(&PostParams::default(), &h).await.unwrap();
    let pods = wait_ready(&ns, "hm", 3).await;
    owned_pdb_blocking(&ns, "hm", 3).await;
    let on_node = nodes_of(&pods).iter().filter(|n| *n == node).count();
    assert!(on_node > 0, "pods prefer {node}");
    let d = drain(node, "app=hm", &["--timeout=15s"]).await;
    // Read while the node is still cordoned: once it is not, nothing is
    // displaced and the next pass clears the condition.
    let yaml = kubectl_ok(&["get", "evictionautoscalers", "-n", &ns.name, "-o", "yaml"]);
    uncordon(node);
    assert!(
        !d.ok,
        "the budget blocks and nothing can surge:\n{}",
        d.output
    );
    assert!(
        d.output.contains("cannot surge Deployment hm")
            && d.output.contains("maximum of 3 replicas"),
        "the 429 says why:\n{}",
        d.output
    );
    let h = hpas.get("hm").await.unwrap();
    assert_eq!(
        (
            h.spec.as_ref().and_then(|s| s.min_replicas),
            markers_present(h.metadata.annotations.as_ref())
        ),
        (Some(3), Some(false)),
        "the HPA is left as it was"
    );
    let (r, s, _) = replicas(&ns, "hm").await;
    assert_eq!((r, s), (3, None), "no surge of the Deployment");
    assert!(
        yaml.contains("reason: SurgeImpossible") && yaml.contains("maximum of 3 replicas"),
        "{yaml}"
    );
}

/// Scenario 6: a user PDB minAvailable 80% on 3 replicas: the surge is
/// sized so that the drain completes.
#[tokio::test]
async fn percent_budget_surge_is_sized_to_let_the_drain_finish() {
    let _nodes = nodes_lock().await;
    let ns = TestNs::new("e2e-pct").await;
    let deps: Api<Deployment> = ns.api();
    let node = "kwok-node-1";
    let pdbs: Api<PodDisruptionBudget> = ns.api();
    pdbs.create(
        &PostParams::default(),
        &user_pdb("p-pdb", "p", Some(IntOrString::String("80%".into())), None),
    )
    .await
    .unwrap();
    deps.create(
        &PostParams::default(),
        &with_max_surge(deployment("p", 3, Some(node)), Some(IntOrString::Int(3))),
    )
    .await
    .unwrap();
    wait_ready(&ns, "p", 3).await;
    wait_pdb_blocking(&ns, "p-pdb", 3).await;
    drain_keeps_three_ready(&ns, "p", node, &[]).await;
}

/// Drains `node` for the 3 pods of `app` under a budget that blocks: the
/// drain completes, 3 pods stay Ready throughout, and the Deployment is
/// back at 3 without markers afterwards.
async fn drain_keeps_three_ready(ns: &TestNs, app: &str, node: &str, extra: &[&str]) {
    let watcher = AvailabilityWatcher::start(ns, app);
    let d = drain(node, &format!("app={app}"), extra).await;
    uncordon(node);
    assert!(d.ok, "drain:\n{}", d.output);
    assert!(watcher.finish().await >= 3, "Ready pods stayed at 3");
    wait_replicas(ns, app, 3, false, Duration::from_secs(60)).await;
}

/// A user's PDB over a label the pods get after admission (a service mesh
/// injects its own; a labeller stands in for it here), which the pod
/// template lacks. The apiserver picks a pod's budget by the pod's labels,
/// so evictions are blocked under it: the surge must be sized by it (it was
/// looked for by the template's labels only, found none, and the drain
/// waited for good), and ours, made at admission, steps aside for it.
#[tokio::test]
async fn a_budget_over_labels_the_template_lacks_is_surged_for() {
    let _nodes = nodes_lock().await;
    let ns = TestNs::new("e2e-mesh").await;
    let node = "kwok-node-2";
    let pods: Api<Pod> = ns.api();
    struct Abort(tokio::task::JoinHandle<()>);
    impl Drop for Abort {
        fn drop(&mut self) {
            self.0.abort();
        }
    }
    let _labeller = Abort(tokio::spawn({
        let pods = pods.clone();
        async move {
            let unlabelled = ListParams::default().labels("app=web,!mesh");
            let label = Patch::Merge(serde_json::json!({"metadata": {"labels": {"mesh": "web"}}}));
            // Each call bounded, each failure said: a labeller stuck on one
            // call would leave a pod out of the budget.
            let limit = Duration::from_secs(5);
            loop {
                match tokio::time::timeout(limit, pods.list(&unlabelled)).await {
                    Ok(Ok(list)) => {
                        for p in list {
                            let name = p.metadata.name.unwrap_or_default();
                            let patched = tokio::time::timeout(
                                limit,
                                pods.patch(&name, &PatchParams::default(), &label),
                            )
                            .await;
                            if !matches!(patched, Ok(Ok(_))) {
                                eprintln!("labeller: pod {name}: {patched:?}");
                            }
                        }
                    }
                    other => eprintln!("labeller: list: {:?}", other.map(|r| r.map(|_| ()))),
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }));
    let pdbs: Api<PodDisruptionBudget> = ns.api();
    pdbs.create(
        &PostParams::default(),
        &user_pdb_over(
            "mesh-budget",
            &[("mesh", "web")],
            Some(IntOrString::Int(3)),
            None,
        ),
    )
    .await
    .expect("user PDB");
    let deps: Api<Deployment> = ns.api();
    deps.create(
        &PostParams::default(),
        &with_max_surge(
            deployment("web", 3, Some(node)),
            Some(IntOrString::String("100%".into())),
        ),
    )
    .await
    .expect("create");
    wait_ready(&ns, "web", 3).await;
    wait_for(
        "3 pods labelled by the labeller",
        Duration::from_secs(60),
        || async {
            let labelled = pods
                .list(&ListParams::default().labels("app=web,mesh=web"))
                .await
                .ok()?;
            (labelled.items.len() == 3).then_some(())
        },
    )
    .await;
    wait_gone(
        &pdbs,
        "web",
        "ours to step aside for the PDB over the pods' labels",
        Duration::from_secs(60),
    )
    .await;
    // A pod labelled while two PDBs selected it (ours not yet stepped
    // aside) was counted by the disruption controller for one of them only
    // (`getPdbForPod` picks one "arbitrarily"); nothing recounts the other
    // until the pod changes again: the user's budget then counted 2 pods
    // for good (seen twice in whole e2e runs). A pod update now, with one
    // PDB over the pods, makes it recount.
    let nudge =
        Patch::Merge(serde_json::json!({"metadata": {"annotations": {"e2e/recount": "1"}}}));
    for p in pods
        .list(&ListParams::default().labels("app=web"))
        .await
        .expect("list pods")
    {
        let name = p.metadata.name.unwrap_or_default();
        pods.patch(&name, &PatchParams::default(), &nudge)
            .await
            .expect("nudge a pod");
    }
    wait_pdb_blocking(&ns, "mesh-budget", 3).await;
    drain_keeps_three_ready(&ns, "web", node, &["--timeout=90s"]).await;
}

/// Scenario 7: an eviction that is not part of a drain (a descheduler's)
/// surges and then succeeds.
#[tokio::test]
async fn plain_eviction_api_call_surges_and_succeeds() {
    let _nodes = nodes_lock().await;
    let ns = TestNs::new("e2e-evict").await;
    let deps: Api<Deployment> = ns.api();
    deps.create(
        &PostParams::default(),
        &with_max_surge(deployment("e", 2, None), Some(IntOrString::Int(1))),
    )
    .await
    .unwrap();
    let pods = wait_ready(&ns, "e", 2).await;
    owned_pdb_blocking(&ns, "e", 2).await;
    let victim = pods[0].metadata.name.clone().unwrap();
    let api: Api<Pod> = ns.api();
    let wh = WebhookInfo::get();
    let blocked_before = wh.metric_sum("eviction_autoscaler_blocked_evictions_total", &[]);
    // kube's client retries 429 with backoff, as kubectl drain and
    // descheduler do: the call returns once the surge lets the pod go.
    wait_for(
        "eviction allowed after the surge",
        Duration::from_secs(60),
        || async {
            api.evict(&victim, &EvictParams::default())
                .await
                .ok()
                .map(|_| ())
        },
    )
    .await;
    assert!(
        wh.metric_sum("eviction_autoscaler_blocked_evictions_total", &[]) > blocked_before,
        "the first attempts were answered 429"
    );
    let events = kubectl_ok(&[
        "get",
        "events.events.k8s.io",
        "-n",
        &ns.name,
        "-o",
        "jsonpath={range .items[*]}{.reason}{\"\\n\"}{end}",
    ]);
    assert!(events.contains("SurgeStarted"), "{events}");
    // The durable copy of the signal, for whichever replica leads.
    let eas = eas_api(&ns);
    // Written off the admission path (and retried while the CR is being
    // created), so it may land a moment after the eviction succeeded.
    let e = wait_for(
        "spec.lastEviction written",
        Duration::from_secs(15),
        || async {
            let e = eas.get_opt("e").await.ok().flatten()?;
            (e.data["spec"]["lastEviction"]["podName"] == victim.as_str()).then_some(e)
        },
    )
    .await;
    assert!(e.data["spec"]["lastEviction"]["evictionTime"].is_string());
    wait_replicas(&ns, "e", 2, false, Duration::from_secs(60)).await;
}

/// Scenario 8: the user scales during a surge: their count is kept.
#[tokio::test]
async fn user_scale_during_surge_is_kept() {
    let _nodes = nodes_lock().await;
    let ns = TestNs::new("e2e-userscale").await;
    let node = "kwok-node-2";
    let pods = two_under_our_budget(&ns, "u", node).await;
    assert!(nodes_of(&pods).iter().any(|n| n == node));
    kubectl_ok(&["cordon", node]);
    wait_for("surge", Duration::from_secs(20), || async {
        let (r, s, _) = replicas(&ns, "u").await;
        (r > 2 && s.is_some()).then_some(())
    })
    .await;
    kubectl_ok(&["-n", &ns.name, "scale", "deployment/u", "--replicas=7"]);
    uncordon(node);
    // The user's count kept, the markers removed once the cooldown is
    // over, and still so a cooldown later (waited for, not slept: the
    // uncordon seen, the cooldown and a pass take longer on a loaded machine).
    assert_settled_at(&ns, "u", 7, Duration::from_secs(60)).await;
}

/// Scenario 10: a server-side dry-run drain surges nothing and writes nothing.
#[tokio::test]
async fn dry_run_drain_changes_nothing() {
    let _nodes = nodes_lock().await;
    let ns = TestNs::new("e2e-dry").await;
    let deps: Api<Deployment> = ns.api();
    let node = "kwok-node-0";
    deps.create(&PostParams::default(), &deployment("dr", 2, Some(node)))
        .await
        .unwrap();
    let pods = wait_ready(&ns, "dr", 2).await;
    owned_pdb_blocking(&ns, "dr", 2).await;
    let before = deps.get("dr").await.unwrap();
    let on_node = nodes_of(&pods).iter().any(|n| n == node);
    assert!(on_node);
    // Each retry of the refused evictions is another dry run; 20 s is four.
    let d = drain(node, "app=dr", &["--dry-run=server", "--timeout=20s"]).await;
    assert!(d.output.contains("server dry run"), "{}", d.output);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let now = deps.get("dr").await.unwrap();
    // The controllers write status; only a spec or annotation change would be ours.
    assert_eq!(
        now.metadata.generation, before.metadata.generation,
        "the Deployment spec was not written"
    );
    assert_eq!(
        now.metadata.annotations, before.metadata.annotations,
        "no surge markers"
    );
    let node_obj = kubectl_ok(&["get", "node", node, "-o", "jsonpath={.spec.unschedulable}"]);
    assert_ne!(node_obj.trim(), "true", "a dry-run drain does not cordon");
    let _ = pods_of(&ns, "dr").await;
}

/// KEDA's CRD installed and watched by the server (run alone on a fresh
/// cluster, a test must not drain before the product has noticed KEDA); a
/// namespace with ScaledObject `so` (minimum `min`); its ScaledObjects.
pub(crate) async fn keda_namespace(
    prefix: &str,
    so: &str,
    min: i64,
) -> (TestNs, Api<kube::core::DynamicObject>) {
    install_keda_crd();
    wait_keda_watched(WebhookInfo::get()).await;
    let ns = TestNs::new(prefix).await;
    let api = create_scaled_object(&ns, so, min).await;
    (ns, api)
}

/// Scenario 4 (KEDA): the ScaledObject's minReplicaCount is raised and
/// restored; with a standalone HPA as well, no surge: Degraded, and the drain
/// behaves as without the product.
#[tokio::test]
async fn keda_minimum_is_raised_and_restored_and_keda_plus_hpa_is_degraded() {
    let _nodes = nodes_lock().await;
    let (ns, so_api) = keda_namespace("e2e-kedasurge", "kd", 2).await;
    let deps: Api<Deployment> = ns.api();
    let node = "kwok-node-0";
    deps.create(
        &PostParams::default(),
        &with_max_surge(deployment("kd", 2, Some(node)), Some(IntOrString::Int(2))),
    )
    .await
    .unwrap();
    wait_ready(&ns, "kd", 2).await;
    owned_pdb_blocking(&ns, "kd", 2).await;
    let watcher = AvailabilityWatcher::start(&ns, "kd");
    let sampler = {
        let so_api = so_api.clone();
        tokio::spawn(async move {
            let mut peak = 0;
            for _ in 0..600 {
                if let Ok(so) = so_api.get("kd").await {
                    peak = peak.max(so.data["spec"]["minReplicaCount"].as_i64().unwrap_or(0));
                }
                if peak > 2 {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            peak
        })
    };
    let d = drain(node, "app=kd", &[]).await;
    uncordon(node);
    assert!(d.ok, "drain:\n{}", d.output);
    assert!(sampler.await.unwrap_or(0) > 2, "minReplicaCount was raised");
    assert!(watcher.finish().await >= 2);
    wait_so_restored(&so_api, "kd", 2).await;
    wait_replicas(&ns, "kd", 2, false, Duration::from_secs(30)).await;

    // KEDA plus a standalone HPA on one Deployment.
    let hpas: Api<HorizontalPodAutoscaler> = ns.api();
    hpas.create(&PostParams::default(), &hpa("kd-hpa", "kd", 2))
        .await
        .unwrap();
    let pods = wait_ready(&ns, "kd", 2).await;
    owned_pdb_blocking(&ns, "kd", 2).await;
    let node = nodes_of(&pods)[0].clone();
    let d = drain(&node, "app=kd", &["--timeout=15s"]).await;
    // Read while the node is still cordoned (see above).
    let yaml = kubectl_ok(&[
        "get",
        "evictionautoscalers",
        "-n",
        &ns.name,
        "kd",
        "-o",
        "yaml",
    ]);
    uncordon(&node);
    assert!(!d.ok, "the budget blocks, as without the product");
    assert!(
        d.output.contains("both target"),
        "the 429 says why:\n{}",
        d.output
    );
    let (r, s, _) = replicas(&ns, "kd").await;
    assert_eq!((r, s), (2, None), "no surge");
    assert!(yaml.contains("reason: SurgeImpossible"), "{yaml}");
}

/// A namespace with ScaledObject `name` at minimum 3, KEDA's stand-in
/// (`holding`: [`KedaOperator::start_holding`]), and Deployment `name` of 3
/// Ready pods preferring `node`, our PDB at 3 and KEDA's HPA made; then
/// `annotation` set on the ScaledObject (a pause).
async fn keda_deployment_paused(
    prefix: &str,
    name: &str,
    node: &str,
    annotation: &str,
    holding: bool,
) -> (
    TestNs,
    Api<kube::core::DynamicObject>,
    KedaOperator,
    Api<HorizontalPodAutoscaler>,
) {
    let (ns, so_api) = keda_namespace(prefix, name, 3).await;
    let keda = if holding {
        KedaOperator::start_holding(&ns, name)
    } else {
        KedaOperator::start(&ns, name)
    };
    let deps: Api<Deployment> = ns.api();
    let hpas: Api<HorizontalPodAutoscaler> = ns.api();
    deps.create(&PostParams::default(), &deployment(name, 3, Some(node)))
        .await
        .expect("create Deployment");
    wait_ready(&ns, name, 3).await;
    wait_pdb(&ns, name, "our PDB at the ScaledObject's minimum", |p| {
        p.spec.as_ref().and_then(|s| s.min_available.clone()) == Some(IntOrString::Int(3))
    })
    .await;
    let kedas = format!("keda-hpa-{name}");
    wait_for("KEDA's HPA", Duration::from_secs(30), || async {
        hpas.get_opt(&kedas).await.ok()?.map(|_| ())
    })
    .await;
    kubectl_ok(&["annotate", "scaledobject", "-n", &ns.name, name, annotation]);
    (ns, so_api, keda, hpas)
}

/// Deployment `name` (one pod, its ScaledObject paused at minimum 3): our
/// PDB follows its 1 replica; its node drained, it surges to 2 with the
/// ScaledObject's minimum untouched (the peaks sampled while the drain
/// runs), and comes back to exactly 1 without markers.
async fn drain_one_and_back_to_one(
    ns: &TestNs,
    so_api: &Api<kube::core::DynamicObject>,
    name: &str,
) {
    let deps: Api<Deployment> = ns.api();
    let pods = wait_ready(ns, name, 1).await;
    wait_pdb(ns, name, "our PDB following the replicas", |p| {
        p.spec.as_ref().and_then(|s| s.min_available.clone()) == Some(IntOrString::Int(1))
    })
    .await;
    owned_pdb_blocking(ns, name, 1).await;
    let node = nodes_of(&pods)[0].clone();
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sampler = {
        let (deps, so_api, done, name) = (deps, so_api.clone(), done.clone(), name.to_string());
        tokio::spawn(async move {
            let (mut replicas, mut min) = (0, 0);
            while !done.load(std::sync::atomic::Ordering::SeqCst) {
                if let Ok(d) = deps.get(&name).await {
                    replicas = replicas.max(d.spec.and_then(|s| s.replicas).unwrap_or(0));
                }
                if let Ok(so) = so_api.get(&name).await {
                    min = min.max(so.data["spec"]["minReplicaCount"].as_i64().unwrap_or(0));
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            (replicas, min)
        })
    };
    let d = drain(&node, &format!("app={name}"), &["--timeout=60s"]).await;
    uncordon(&node);
    assert!(d.ok, "drain:\n{}", d.output);
    wait_replicas(ns, name, 1, false, Duration::from_secs(60)).await;
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    let peaks = sampler.await.expect("sampler");
    assert_eq!(
        peaks,
        (2, 3),
        "the Deployment surged from its 1 replica by the one pod displaced; \
         the paused ScaledObject's minimum not raised"
    );
    // And it stays there: nothing of ours lifts it back (KEDA is paused).
    tokio::time::sleep(Duration::from_secs(5)).await;
    let (r, s, _) = replicas(ns, name).await;
    assert_eq!((r, s), (1, None), "the exact baseline, kept");
}

/// A ScaledObject paused (`autoscaling.keda.sh/paused`: KEDA deletes its
/// HPA and scales nothing) at minimum 3, its Deployment scaled to 1 by hand
/// (default maxSurge, 25%), then drained. Nothing holds the Deployment at
/// the minimum any more, so: our PDB follows the 1 replica (it stayed at 3);
/// the surge is made on the Deployment alone, from 1 to 2 (it went from the
/// ScaledObject's minimum, 3 to 4, the Deployment to 4 with it: three extra
/// replicas to let one pod go); and it goes back to exactly 1, not to the
/// minimum (3 would strand two replicas for as long as the pause lasts).
#[tokio::test]
async fn under_a_paused_scaled_object_the_surge_goes_back_to_the_exact_baseline() {
    let _nodes = nodes_lock().await;
    let (ns, so_api, keda, hpas) = keda_deployment_paused(
        "e2e-kedapause",
        "kp",
        "kwok-node-0",
        "autoscaling.keda.sh/paused=true",
        false,
    )
    .await;
    wait_for(
        "KEDA's HPA deleted by the pause",
        Duration::from_secs(30),
        || async { matches!(hpas.get_opt("keda-hpa-kp").await, Ok(None)).then_some(()) },
    )
    .await;
    kubectl_ok(&["scale", "deployment", "-n", &ns.name, "kp", "--replicas=1"]);
    drain_one_and_back_to_one(&ns, &so_api, "kp").await;
    let _ = keda.finish().await;
}

/// `autoscaling.keda.sh/paused-replicas: 1` on a ScaledObject at minimum
/// 3: KEDA scales the Deployment to 1, records the count in the status,
/// deletes its HPA, and scales it to 1 again whenever a change of the
/// ScaledObject's spec finds it elsewhere. Our PDB follows the 1 replica, a
/// drain surges the Deployment alone (1 to 2, the minimum untouched), and
/// it goes back to exactly 1. Before (the cache dropped the status, so this
/// pause never counted): the PDB stayed at 3 and the surge went 1 to 4 with
/// the minimum raised to 4 (peaks (4, 4)), a spec change KEDA reconciles.
#[tokio::test]
async fn under_paused_replicas_the_deployment_alone_is_surged_and_goes_back() {
    let _nodes = nodes_lock().await;
    let (ns, so_api, keda, hpas) = keda_deployment_paused(
        "e2e-kedapr",
        "kr",
        "kwok-node-2",
        "autoscaling.keda.sh/paused-replicas=1",
        false,
    )
    .await;
    wait_for(
        "KEDA's pause applied: its HPA gone, the count recorded",
        Duration::from_secs(30),
        || async {
            let gone = matches!(hpas.get_opt("keda-hpa-kr").await, Ok(None));
            let so = so_api.get("kr").await.ok()?;
            (gone && so.data["status"]["pausedReplicaCount"].as_i64() == Some(1)).then_some(())
        },
    )
    .await;
    drain_one_and_back_to_one(&ns, &so_api, "kr").await;
    let _ = keda.finish().await;
}

/// Waits until KEDA's stand-in applied `paused-replicas: n` to ScaledObject
/// `name`: its HPA at a minimum and maximum of n, the count in the status.
async fn wait_held(
    hpas: &Api<HorizontalPodAutoscaler>,
    so_api: &Api<kube::core::DynamicObject>,
    name: &str,
    n: i32,
) {
    let hpa = format!("keda-hpa-{name}");
    wait_for(
        &format!("KEDA's pause applied: its HPA at {n} and {n}, the count recorded"),
        Duration::from_secs(30),
        || async {
            let spec = hpas.get_opt(&hpa).await.ok()??.spec?;
            let so = so_api.get(name).await.ok()?;
            (spec.min_replicas == Some(n)
                && spec.max_replicas == n
                && so.data["status"]["pausedReplicaCount"].as_i64() == Some(i64::from(n)))
            .then_some(())
        },
    )
    .await;
}

/// ScaledObject `name` at minimum `min`, with no surge marker.
async fn assert_so_unsurged(so_api: &Api<kube::core::DynamicObject>, name: &str, min: i64) {
    let so = so_api.get(name).await.expect("ScaledObject");
    assert_eq!(so.data["spec"]["minReplicaCount"].as_i64(), Some(min));
    assert!(
        !so.metadata
            .annotations
            .unwrap_or_default()
            .contains_key(SURGE_MARKER),
        "no surge of the ScaledObject"
    );
}

/// `autoscaling.keda.sh/paused-replicas: 2` on a ScaledObject at minimum
/// 3, with KEDA's HPA left at a minimum and maximum of 2 (what KEDA's
/// operator does once the Deployment is at the count, kedacore/keda#7663):
/// the HPA controller takes any replica above 2 back, so no surge can help.
/// Our PDB follows the 2 replicas (it stayed at 3, over 2 pods); a drain is
/// refused with a 429 that says KEDA holds the Deployment and what to do,
/// the EvictionAutoScaler is Degraded, and nothing is written (before: the
/// minimum raised to 4, which moves nothing, and "surging" said forever).
/// The pause lifted, the drain goes on through a surge of the minimum that
/// goes back to exactly 3.
#[tokio::test]
async fn under_paused_replicas_held_by_kedas_hpa_a_drain_is_told_why_and_goes_on_once_lifted() {
    let _nodes = nodes_lock().await;
    let (ns, so_api, keda, hpas) = keda_deployment_paused(
        "e2e-kedaheld",
        "kq",
        "kwok-node-1",
        "autoscaling.keda.sh/paused-replicas=2",
        true,
    )
    .await;
    wait_held(&hpas, &so_api, "kq", 2).await;
    let pods = wait_ready(&ns, "kq", 2).await;
    wait_pdb(
        &ns,
        "kq",
        "our PDB following the 2 replicas KEDA holds",
        |p| p.spec.as_ref().and_then(|s| s.min_available.clone()) == Some(IntOrString::Int(2)),
    )
    .await;
    owned_pdb_blocking(&ns, "kq", 2).await;
    let node = nodes_of(&pods)[0].clone();
    let d = drain(&node, "app=kq", &["--timeout=15s"]).await;
    // Read while the node is still cordoned.
    let yaml = kubectl_ok(&[
        "get",
        "evictionautoscalers",
        "-n",
        &ns.name,
        "kq",
        "-o",
        "yaml",
    ]);
    uncordon(&node);
    assert!(!d.ok, "the budget blocks, as without a surge");
    assert!(
        d.output.contains("KEDA holds it at 2 replicas") && d.output.contains("lift the pause"),
        "the 429 says why:\n{}",
        d.output
    );
    assert!(yaml.contains("reason: SurgeImpossible"), "{yaml}");
    let (r, s, _) = replicas(&ns, "kq").await;
    assert_eq!((r, s), (2, None), "no surge of the Deployment");
    assert_so_unsurged(&so_api, "kq", 3).await;

    // The pause lifted: KEDA's HPA back at the minimum (3), the drain goes on.
    kubectl_ok(&[
        "annotate",
        "scaledobject",
        "-n",
        &ns.name,
        "kq",
        "autoscaling.keda.sh/paused-replicas-",
    ]);
    let pods = wait_ready(&ns, "kq", 3).await;
    owned_pdb_blocking(&ns, "kq", 3).await;
    let node = nodes_of(&pods)[0].clone();
    let d = drain(&node, "app=kq", &["--timeout=90s"]).await;
    uncordon(&node);
    assert!(d.ok, "drain:\n{}", d.output);
    wait_so_restored(&so_api, "kq", 3).await;
    wait_replicas(&ns, "kq", 3, false, Duration::from_secs(60)).await;
    let _ = keda.finish().await;
}

/// A ScaledObject at minimum 1 frozen at its current scale with
/// `paused-replicas: 3`, KEDA's HPA kept at 3 and 3: our PDB's floor stays
/// the minimum (1, up to the hold), so a drain of the node holding its pods
/// goes through as it did before the pause, with no surge and nothing
/// written. Read as a floor of 3 (the held HPA's minimum), the hold made
/// every eviction wait until the pause was lifted.
#[tokio::test]
async fn a_scaled_object_frozen_at_its_scale_by_paused_replicas_lets_a_drain_through() {
    let _nodes = nodes_lock().await;
    let (ns, so_api) = keda_namespace("e2e-kedafrz", "kz", 1).await;
    let keda = KedaOperator::start_holding(&ns, "kz");
    let deps: Api<Deployment> = ns.api();
    let hpas: Api<HorizontalPodAutoscaler> = ns.api();
    let node = "kwok-node-2";
    deps.create(&PostParams::default(), &deployment("kz", 3, Some(node)))
        .await
        .expect("create Deployment");
    wait_ready(&ns, "kz", 3).await;
    wait_for("KEDA's HPA", Duration::from_secs(30), || async {
        hpas.get_opt("keda-hpa-kz").await.ok()?.map(|_| ())
    })
    .await;
    kubectl_ok(&[
        "annotate",
        "scaledobject",
        "-n",
        &ns.name,
        "kz",
        "autoscaling.keda.sh/paused-replicas=3",
    ]);
    wait_held(&hpas, &so_api, "kz", 3).await;
    // Long enough for the reconciler to have read the hold (it runs on
    // every change of the HPA and the ScaledObject).
    tokio::time::sleep(Duration::from_secs(2)).await;
    wait_pdb(
        &ns,
        "kz",
        "our PDB at the minimum of 1, two pods free",
        |p| {
            p.spec.as_ref().and_then(|s| s.min_available.clone()) == Some(IntOrString::Int(1))
                && p.status.as_ref().is_some_and(|s| {
                    s.observed_generation == p.metadata.generation && s.disruptions_allowed == 2
                })
        },
    )
    .await;
    let d = drain(node, "app=kz", &["--timeout=60s"]).await;
    uncordon(node);
    assert!(d.ok, "drain:\n{}", d.output);
    let (r, s, _) = replicas(&ns, "kz").await;
    assert_eq!((r, s), (3, None), "no surge of the Deployment");
    assert_so_unsurged(&so_api, "kz", 1).await;
    let pdb = ns
        .api::<PodDisruptionBudget>()
        .get("kz")
        .await
        .expect("our PDB");
    assert_eq!(
        pdb.spec.and_then(|s| s.min_available),
        Some(IntOrString::Int(1)),
        "our PDB still at the minimum after the drain"
    );
    let _ = keda.finish().await;
}

/// A ScaledObject paused mid-surge while KEDA's operator lags (held here):
/// KEDA's HPA stays at our raised minimum and the HPA controller holds the
/// Deployment there. The pause counts only once that HPA is gone: the
/// ScaledObject goes back, the Deployment keeps its surge and markers while
/// the HPA stays, and goes back to exactly its baseline once the operator
/// deletes it. Lowered at once, the HPA would lift it back with no markers
/// left: stranded for good.
#[tokio::test]
async fn a_pause_keda_has_not_acted_on_holds_the_surge_until_its_hpa_is_gone() {
    let _nodes = nodes_lock().await;
    let (ns, so_api) = keda_namespace("e2e-kedalate", "kl", 2).await;
    let keda = KedaOperator::start(&ns, "kl");
    let deps: Api<Deployment> = ns.api();
    let hpas: Api<HorizontalPodAutoscaler> = ns.api();
    let node = "kwok-node-1";
    deps.create(
        &PostParams::default(),
        &with_max_surge(deployment("kl", 2, Some(node)), Some(IntOrString::Int(2))),
    )
    .await
    .expect("create Deployment");
    wait_ready(&ns, "kl", 2).await;
    owned_pdb_blocking(&ns, "kl", 2).await;
    let drain = tokio::spawn(drain(node, "app=kl", &[]));
    let raised = wait_for(
        "KEDA's HPA at our raised minimum",
        Duration::from_secs(60),
        || async {
            let min = hpas
                .get_opt("keda-hpa-kl")
                .await
                .ok()??
                .spec?
                .min_replicas?;
            (min > 2).then_some(min)
        },
    )
    .await;
    // The operator stops following; then the pause.
    keda.pause(true);
    kubectl_ok(&[
        "annotate",
        "scaledobject",
        "-n",
        &ns.name,
        "kl",
        "autoscaling.keda.sh/paused=true",
    ]);
    let d = drain.await.expect("drain task");
    uncordon(node);
    assert!(d.ok, "drain:\n{}", d.output);
    wait_so_restored(&so_api, "kl", 2).await;
    // Past the cooldown and SETTLE, and longer than the HPA controller's
    // sync (15 s): the Deployment keeps its markers the whole time.
    let until = Instant::now() + Duration::from_secs(20);
    while Instant::now() < until {
        let (r, s, _) = replicas(&ns, "kl").await;
        assert!(
            s.is_some(),
            "the Deployment lost its markers at {r} replicas while KEDA's HPA stood at {raised}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // The operator catches up: it deletes its HPA (paused).
    keda.pause(false);
    wait_for(
        "KEDA's HPA deleted by the pause",
        Duration::from_secs(30),
        || async { matches!(hpas.get_opt("keda-hpa-kl").await, Ok(None)).then_some(()) },
    )
    .await;
    wait_replicas(&ns, "kl", 2, false, Duration::from_secs(60)).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let (r, s, _) = replicas(&ns, "kl").await;
    assert_eq!((r, s), (2, None), "the exact baseline, kept");
    let _ = keda.finish().await;
}

/// Drain taints are signals like a cordon (karpenter.sh/disrupted here).
#[tokio::test]
async fn drain_taint_surges_like_a_cordon() {
    let _nodes = nodes_lock().await;
    let ns = TestNs::new("e2e-taint").await;
    let deps: Api<Deployment> = ns.api();
    let node = "kwok-node-2";
    deps.create(
        &PostParams::default(),
        &with_max_surge(deployment("t", 2, Some(node)), Some(IntOrString::Int(2))),
    )
    .await
    .unwrap();
    let pods = wait_ready(&ns, "t", 2).await;
    let on_node = nodes_of(&pods).iter().filter(|n| *n == node).count() as i32;
    assert!(on_node > 0, "a pod on {node}");
    owned_pdb_blocking(&ns, "t", 2).await;
    kubectl_ok(&["taint", "node", node, "karpenter.sh/disrupted=:NoSchedule"]);
    let surged = wait_for("surge on the taint", Duration::from_secs(20), || async {
        let (r, s, _) = replicas(&ns, "t").await;
        (r == 2 + on_node && s.is_some()).then_some(())
    })
    .await;
    kubectl_ok(&["taint", "node", node, "karpenter.sh/disrupted:NoSchedule-"]);
    wait_replicas(&ns, "t", 2, false, Duration::from_secs(40)).await;
    surged
}

/// KEDA's HPA carries copies of the ScaledObject's annotations, our surge
/// markers among them, and its minimum follows our raised one: the surge
/// lives on the ScaledObject, and KEDA's HPA is never written by us (each
/// write KEDA's operator would undo: a write loop on an object not ours).
#[tokio::test]
async fn kedas_hpa_with_copies_of_our_markers_is_left_to_keda() {
    let _nodes = nodes_lock().await;
    let (ns, so_api) = keda_namespace("e2e-kedahpa", "kh", 2).await;
    let keda = KedaOperator::start(&ns, "kh");
    let deps: Api<Deployment> = ns.api();
    let node = "kwok-node-1";
    deps.create(
        &PostParams::default(),
        &with_max_surge(deployment("kh", 2, Some(node)), Some(IntOrString::Int(2))),
    )
    .await
    .expect("create Deployment");
    wait_ready(&ns, "kh", 2).await;
    owned_pdb_blocking(&ns, "kh", 2).await;
    let hpas: Api<HorizontalPodAutoscaler> = ns.api();
    let copied = || async {
        let h = hpas.get_opt("keda-hpa-kh").await.ok()??;
        let a = h.metadata.annotations.unwrap_or_default();
        let min = h.spec.and_then(|s| s.min_replicas);
        (a.contains_key(SURGE) && a.contains_key(ORIGINAL) && min.unwrap_or(0) > 2).then_some(())
    };
    let watcher = AvailabilityWatcher::start(&ns, "kh");
    let drain = tokio::spawn(drain(node, "app=kh", &[]));
    // The markers reach KEDA's HPA mid-surge, as its operator copies them.
    wait_for(
        "KEDA's HPA carrying copies of the surge markers",
        Duration::from_secs(60),
        copied,
    )
    .await;
    let d = drain.await.expect("drain task");
    uncordon(node);
    assert!(d.ok, "drain:\n{}", d.output);
    assert!(watcher.finish().await >= 2);
    wait_so_restored(&so_api, "kh", 2).await;
    wait_replicas(&ns, "kh", 2, false, Duration::from_secs(60)).await;
    // KEDA's operator catches up (its HPA back at 2, no markers), then a
    // quiet spell in which nobody writes it.
    wait_for(
        "KEDA's HPA back at 2 without markers",
        Duration::from_secs(30),
        || async {
            let h = hpas.get_opt("keda-hpa-kh").await.ok()??;
            let marked = h
                .metadata
                .annotations
                .is_some_and(|a| a.contains_key(SURGE) || a.contains_key(ORIGINAL));
            (!marked && h.spec.and_then(|s| s.min_replicas) == Some(2)).then_some(())
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (writes, foreign) = keda.finish().await;
    assert!(
        foreign.is_empty(),
        "KEDA's HPA written by {foreign:?} (KEDA's operator wrote it {writes} times)"
    );
    // Made, raised, lowered: a loop would be one write per pass of ours.
    assert!(
        writes <= 6,
        "KEDA's operator wrote its HPA {writes} times: a write loop"
    );
    let (r, s, _) = replicas(&ns, "kh").await;
    assert_eq!((r, s), (2, None));
}
