//! A managed upgrade drains the nodes one after the other (behaviour.md
//! sections 5 and 6): the surge made for the first node must carry over to
//! the next while the next cordon comes within the cooldown, and be reverted
//! once, at the end. Runs here because it restarts the server with a longer
//! cooldown than the main suite's 5 s, so that the pause between two nodes is
//! clearly within it.

use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::PostParams;
use kube::Api;

use crate::support::*;

/// The server's cooldown in this test.
const COOLDOWN: Duration = Duration::from_secs(20);
/// An upgrader's pause between nodes (reimage, node Ready, uncordon): well
/// inside the cooldown, longer than the time the next surge pass takes.
const PAUSE: Duration = Duration::from_secs(5);

/// Waits until our PDB over `app` allows at least one disruption: the surge
/// made for the cordoned node is in place and Ready, so the drain that follows
/// is not refused.
async fn wait_room(ns: &TestNs, app: &str) {
    wait_pdb(
        ns,
        app,
        "the surge gives the PDB room for a disruption",
        |p: &PodDisruptionBudget| {
            p.status.as_ref().is_some_and(|s| {
                s.observed_generation == p.metadata.generation && s.disruptions_allowed > 0
            })
        },
    )
    .await;
}

/// How the upgrader takes each node.
#[derive(Clone, Copy, PartialEq)]
enum Take {
    /// `kubectl cordon`, then `kubectl drain` once the surge gives room: no
    /// eviction is ever refused, so only the cordons signal.
    CordonFirst,
    /// `kubectl drain` alone: it cordons and evicts at once; the first
    /// evictions are refused (429) until the surge lands.
    DrainAtOnce,
}

/// Cordon-first upgrade. Only the cordons signal, so a cooldown counted from
/// blocked evictions alone would scale back as soon as the first node is
/// empty, and surge again for the second.
#[tokio::test]
async fn node_by_node_upgrade_cordon_first_keeps_one_surge_until_the_end() {
    upgrade("e2e-ss-upgrade-c", Take::CordonFirst).await;
}

/// The same with plain `kubectl drain`s, as the brief's upgrader does them.
#[tokio::test]
async fn node_by_node_upgrade_with_plain_drains_keeps_one_surge_until_the_end() {
    upgrade("e2e-ss-upgrade-d", Take::DrainAtOnce).await;
}

/// 3 nodes, a 3-replica Deployment with one pod on each and our PDB; each
/// node in turn is taken (see [`Take`]), left for `PAUSE`, then uncordoned,
/// and the next one follows. One SurgeStarted for the whole upgrade, no
/// SurgeReverted until the last node is done, replicas never lower before
/// that, Ready pods never below 3, and exactly 3 without markers at the end.
async fn upgrade(prefix: &str, take: Take) {
    let _nodes = nodes_lock().await;
    // A name of its own per variant: `kubectl drain --pod-selector` spans
    // namespaces, and the other variant's namespace may still be terminating.
    let app = match take {
        Take::CordonFirst => "upc",
        Take::DrainAtOnce => "upd",
    };
    let selector = format!("app={app}");
    let cooldown = format!("{}s", COOLDOWN.as_secs());
    let _ = restart_server(&[("COOLDOWN", cooldown.as_str())]);
    let ns = TestNs::new(prefix).await;
    let deps: Api<Deployment> = ns.api();
    deps.create(
        &PostParams::default(),
        &spread_one_per_node(rolling_max_surge(
            deployment(app, 3, None),
            IntOrString::Int(3),
        )),
    )
    .await
    .expect("create Deployment");
    let pods = wait_ready(&ns, app, 3).await;
    let mut nodes = nodes_of(&pods);
    nodes.sort();
    nodes.dedup();
    assert_eq!(nodes.len(), 3, "one pod per node: {nodes:?}");
    wait_pdb_blocking(&ns, app, 3).await;

    let watch = AvailabilityWatcher::start(&ns, app);
    let trace = ReplicaSampler::start(&ns, app);
    // Per node: from its cordon to the end of its drain, and the drain alone.
    let mut per_node = Vec::new();
    let mut last_drain_done = Instant::now();
    let mut last_taken = Instant::now();
    let mut first_refused = false;
    for node in NODE_NAMES {
        let taken = Instant::now();
        last_taken = taken;
        if take == Take::CordonFirst {
            kubectl_ok(&["cordon", node]);
            wait_for(
                &format!("surge markers while {node} is cordoned"),
                Duration::from_secs(30),
                || async { (deployment_state(&ns, app).await.1 == Some(true)).then_some(()) },
            )
            .await;
            wait_room(&ns, app).await;
        }
        let d = drain_node(node, &selector, &[]).await;
        last_drain_done = Instant::now();
        assert!(
            d.ok,
            "drain of {node} failed:\n{}\nEvents:\n{}",
            d.output,
            event_log(&ns.name)
        );
        // Whether kubectl met a 429 depends on a race the product may win:
        // the cordon alone can land the surge before the first eviction.
        if take == Take::DrainAtOnce && node == NODE_NAMES[0] {
            first_refused = d.output.contains("denied the request");
        }
        per_node.push(format!(
            "{:.1}s ({:.1}s drain)",
            taken.elapsed().as_secs_f64(),
            d.took.as_secs_f64()
        ));
        assert_eq!(
            event_total(&ns.name, "SurgeReverted"),
            0,
            "reverted mid-upgrade (after draining {node}):\n{}",
            event_log(&ns.name)
        );
        tokio::time::sleep(PAUSE).await;
        uncordon(node);
    }

    wait_deployment(&ns, app, 3, false, COOLDOWN + Duration::from_secs(40)).await;
    let reverted_after = last_drain_done.elapsed();
    let samples = trace.finish().await;
    let min = watch.finish().await;
    assert!(min >= 3, "Ready pods went down to {min}");

    // Replicas never go down until the one revert, which goes straight to 3
    // and comes after the last drain.
    let values: Vec<i32> = samples.iter().map(|s| s.1).collect();
    let first_drop = values
        .windows(2)
        .position(|w| w[1] < w[0])
        .map(|i| i + 1)
        .unwrap_or_else(|| panic!("never scaled back: {values:?}"));
    assert!(
        values[first_drop..].iter().all(|v| *v == 3),
        "scaled back before the end of the upgrade (or not to 3): {values:?}"
    );
    assert!(
        samples[first_drop].0 >= last_drain_done,
        "scaled back before the last drain finished: {values:?}"
    );
    // The last node, cordoned while it held displaced pods, is a signal
    // however fast its pods left (behaviour.md section 6): the cooldown runs
    // from then, not from the node before. (1 s of slack for timestamps the
    // product keeps in whole seconds.)
    let after_last_cordon = samples[first_drop].0.duration_since(last_taken);
    assert!(
        after_last_cordon + Duration::from_secs(1) >= COOLDOWN,
        "scaled back {:.1}s after the last node was cordoned, before the {}s cooldown",
        after_last_cordon.as_secs_f64(),
        COOLDOWN.as_secs()
    );
    let events = event_log(&ns.name);
    assert_eq!(
        event_total(&ns.name, "SurgeStarted"),
        1,
        "one surge for the whole upgrade:\n{events}"
    );
    assert_eq!(
        event_total(&ns.name, "SurgeReverted"),
        1,
        "one revert:\n{events}"
    );
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(
        deployment_state(&ns, app).await,
        (3, Some(false)),
        "stays at 3 without markers"
    );

    let peak = values.iter().copied().max().unwrap_or(0);
    let how = match take {
        Take::CordonFirst => "cordon first",
        Take::DrainAtOnce => "plain kubectl drain",
    };
    record_figure(format!(
        "node-by-node upgrade, {how} (3 nodes, 3 replicas, COOLDOWN {}s, {}s pause between nodes): per node cordon to drained {}, peak {peak} replicas, {:.1} extra replica-seconds, reverted {:.1}s after the last drain{}",
        COOLDOWN.as_secs(),
        PAUSE.as_secs(),
        per_node.join(" / "),
        extra_replica_seconds(&samples, 3),
        reverted_after.as_secs_f64(),
        match (take, first_refused) {
            (Take::DrainAtOnce, true) => "; the first eviction met a 429",
            (Take::DrainAtOnce, false) => "; the cordon's surge landed before the first eviction",
            _ => "",
        },
    ));
    let _ = restart_server(&[]);
}
