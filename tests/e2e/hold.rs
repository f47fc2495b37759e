//! EVICTION_HOLD (behaviour.md section 4, drain speed) and the API request
//! counter, against the default server (EVICTION_HOLD unset: 6 s).

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{EvictParams, PostParams};
use kube::Api;

use crate::support::*;

const HOLDS: &str = "eviction_autoscaler_eviction_holds_total";
/// Evictions held now (a gauge).
const HELD_NOW: &str = "eviction_autoscaler_evictions_held";

/// The same drain twice, one node holding 3 pods of a Deployment with
/// maxSurge 100%: first under a budget that never blocks (the drain's own
/// speed), then under our PDB (minAvailable 3), where every eviction is
/// blocked until the surge's pods are Ready. With the hold, the webhook
/// keeps the blocked evictions open and allows them as soon as its PDB cache
/// shows room, instead of answering 429 and leaving kubectl to retry 5 s
/// later. Both times are figures; the assertions are that both drains
/// complete, availability never drops below 3, and the hold was taken and
/// ended in an allow.
#[tokio::test]
async fn a_blocked_drain_is_held_until_the_surge_makes_room() {
    let _nodes = nodes_lock().await;
    let wh = WebhookInfo::get();
    let node = "kwok-node-1";

    // 1. A budget that never blocks (minAvailable 0): the drain's own time.
    let free_ns = TestNs::new("e2e-hold-free").await;
    let pdbs: Api<PodDisruptionBudget> = free_ns.api();
    pdbs.create(
        &PostParams::default(),
        &user_pdb("free", "holdfree", Some(IntOrString::Int(0)), None),
    )
    .await
    .expect("create the user's PDB");
    let deps: Api<Deployment> = free_ns.api();
    deps.create(
        &PostParams::default(),
        &rolling_max_surge(
            deployment("holdfree", 3, Some(node)),
            IntOrString::String("100%".into()),
        ),
    )
    .await
    .expect("create");
    let pods = wait_ready(&free_ns, "holdfree", 3).await;
    assert!(
        nodes_of(&pods).iter().all(|n| n == node),
        "all pods on {node}"
    );
    wait_pdb(&free_ns, "free", "the user's PDB allows 3", |p| {
        p.status
            .as_ref()
            .is_some_and(|s| s.disruptions_allowed == 3 && s.current_healthy == 3)
    })
    .await;
    let free = drain_node(node, "app=holdfree", &[]).await;
    uncordon(node);
    assert!(free.ok, "drain failed:\n{}", free.output);

    // 2. Our PDB blocks every eviction until the surge's pods are Ready.
    let ns = TestNs::new("e2e-hold").await;
    let deps: Api<Deployment> = ns.api();
    deps.create(
        &PostParams::default(),
        &rolling_max_surge(
            deployment("holdweb", 3, Some(node)),
            IntOrString::String("100%".into()),
        ),
    )
    .await
    .expect("create");
    let pods = wait_ready(&ns, "holdweb", 3).await;
    assert!(
        nodes_of(&pods).iter().all(|n| n == node),
        "all pods on {node}"
    );
    wait_pdb_blocking(&ns, "holdweb", 3).await;

    let allowed_before = wh.metric_sum(HOLDS, &["outcome=\"allowed\""]);
    let watcher = AvailabilityWatcher::start(&ns, "holdweb");
    // Held: the figure includes the wait for that (about 0.1 s).
    let held =
        drain_blocked_first(node, "app=holdweb", || wh.metric_sum(HELD_NOW, &[]) >= 1.0).await;
    uncordon(node);
    let min_ready = watcher.finish().await;
    assert!(held.ok, "drain failed:\n{}", held.output);
    assert!(min_ready >= 3, "Ready pods went down to {min_ready}");
    let allowed_after = wh.metric_sum(HOLDS, &["outcome=\"allowed\""]);
    assert!(
        allowed_after > allowed_before,
        "no blocked eviction was held and then allowed ({allowed_before} -> {allowed_after}); drain output:\n{}",
        held.output
    );
    let denied = held.output.matches("denied the request").count();
    record_figure(format!(
        "eviction hold (EVICTION_HOLD=6s): 3-pod drain under a budget that never blocks {:.2}s; \
         the same drain blocked by our PDB, held until the surge made room {:.2}s \
         (difference {:+.2}s; {} held evictions allowed, {denied} 429s seen by kubectl)",
        free.took.as_secs_f64(),
        held.took.as_secs_f64(),
        held.took.as_secs_f64() - free.took.as_secs_f64(),
        allowed_after - allowed_before,
    ));
    // Leave no surge behind (cooldown 5 s in e2e).
    wait_deployment(&ns, "holdweb", 3, false, Duration::from_secs(60)).await;
}

/// The API request counter sees the PDB the mutating webhook creates.
#[tokio::test]
async fn a_pdb_creation_is_counted_as_an_api_request() {
    let wh = WebhookInfo::get();
    let created = || {
        wh.metric_sum(
            "eviction_autoscaler_api_requests_total",
            &[
                "verb=\"create\"",
                "resource=\"poddisruptionbudgets\"",
                "code=\"201\"",
            ],
        )
    };
    let ns = TestNs::new("e2e-apicount").await;
    let before = created();
    let deps: Api<Deployment> = ns.api();
    deps.create(&PostParams::default(), &deployment("counted", 1, None))
        .await
        .expect("create");
    wait_pdb(&ns, "counted", "the owned PDB exists", |_| true).await;
    let after = created();
    assert!(
        after >= before + 1.0,
        "create/poddisruptionbudgets/201 went {before} -> {after}"
    );
    // Watches count when they start: the caches have started theirs.
    let watches = wh.metric_sum(
        "eviction_autoscaler_api_requests_total",
        &["verb=\"watch\"", "resource=\"pods\""],
    );
    assert!(watches >= 1.0, "pod watches counted: {watches}");
}

/// Two evictions sent at once under a budget that allows one disruption
/// (a user's PDB, maxUnavailable 1, over 3 Ready pods on one node). The
/// apiserver lets the first through and takes its one disruption in a
/// status write that reaches the webhook's cache only after the second has
/// been asked about. The second, let through on the same room, would lose
/// the apiserver's status write race, be retried by it once 0.5 s later
/// (EvictionsRetry in eviction.go) and answered 429 if there is no room by
/// then, and kubectl would wait 5 s. A taint keeps the first pod's
/// replacement off the node for 1.5 s, so there is none. The webhook holds
/// the second for the room it needs instead: both evictions succeed.
#[tokio::test]
async fn evictions_sent_at_once_share_one_disruption_in_turn() {
    let _nodes = nodes_lock().await;
    let node = "kwok-node-2";
    let taint = format!("{LATER_TAINT}=1:NoSchedule");
    let wh = WebhookInfo::get();
    let ns = TestNs::new("e2e-taken").await;
    let pdbs: Api<PodDisruptionBudget> = ns.api();
    pdbs.create(
        &PostParams::default(),
        &user_pdb("one", "taken", None, Some(IntOrString::Int(1))),
    )
    .await
    .expect("create the user's PDB");
    let d = pinned_to(deployment("taken", 3, None), node);
    let deps: Api<Deployment> = ns.api();
    deps.create(&PostParams::default(), &d)
        .await
        .expect("create");
    let pods = wait_ready(&ns, "taken", 3).await;
    wait_pdb(&ns, "one", "the user's PDB allows 1", |p| {
        p.status
            .as_ref()
            .is_some_and(|s| s.disruptions_allowed == 1 && s.current_healthy == 3)
    })
    .await;
    let allowed =
        |wait: &str| wh.metric_sum(HOLDS, &[&format!("wait=\"{wait}\""), "outcome=\"allowed\""]);
    let taken_before = allowed("taken");
    // A 429 must fail the eviction, not be retried by the client.
    let api = pods_without_retry(&ns).await;
    // Connections open beforehand, so that both requests leave at once
    // (a new connection's handshake would delay the second).
    let lp = kube::api::ListParams::default();
    let lists = (0..4).map(|_| api.list(&lp));
    for l in futures::future::join_all(lists).await {
        l.expect("list the pods");
    }
    kubectl_ok(&["taint", "node", node, &taint]);
    let untaint = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(1500)).await;
        kubectl_ok(&["taint", "node", node, &format!("{LATER_TAINT}-")]);
    });
    let started = std::time::Instant::now();
    let evictions = pods.iter().take(2).map(|p| {
        let api = api.clone();
        let name = p.metadata.name.clone().unwrap_or_default();
        async move {
            let r = api.evict(&name, &EvictParams::default()).await;
            (name, r.map(|_| ()), started.elapsed())
        }
    });
    let results = futures::future::join_all(evictions).await;
    untaint.await.expect("untaint");
    let taken = allowed("taken") - taken_before;
    for (name, r, took) in &results {
        assert!(
            r.is_ok(),
            "eviction of {name} failed after {took:?}: {r:?} ({taken} held for room \
             already taken, then allowed)"
        );
    }
    record_figure(format!(
        "two evictions at once under one disruption, the replacement kept off for 1.5 s: \
         both allowed, after {:?}; held for room already taken, then allowed: {taken}",
        results.iter().map(|r| r.2).max().unwrap_or_default()
    ));
}
