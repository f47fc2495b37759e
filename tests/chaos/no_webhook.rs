//! Item 4: every webhook replica stopped during a drain. The webhook
//! configurations stay (failurePolicy Ignore): the apiserver's calls fail
//! and evictions follow the plain PDB rules, with no availability lost.
//! When the replicas return, the surge they left is finished and reverted
//! exactly once.

use std::time::Duration;

use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::Api;

use crate::fleet::*;
use crate::support::*;

/// Lines of the apiserver log that say a webhook call failed.
fn failed_webhook_calls() -> usize {
    std::fs::read_to_string(cluster_dir().join("logs/kube-apiserver.log"))
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains("Failed calling webhook, failing open"))
        .count()
}

fn stop_all(wh: &WebhookInfo, b: &mut Replica, sig: &str) {
    let _ = std::process::Command::new("kill")
        .args([sig, &wh.pid().to_string()])
        .status();
    b.signal(sig);
    assert!(
        b.wait_exit(Duration::from_secs(30)).is_some(),
        "second replica did not stop"
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while std::path::Path::new(&format!("/proc/{}", wh.pid())).exists() {
        assert!(std::time::Instant::now() < deadline, "server did not stop");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn all_webhook_replicas_down_during_a_drain_plain_pdb_rules_then_nothing_half_done() {
    let _g = nodes_lock().await;
    let wh = restart_server(&[]);
    let spec = ReplicaSpec::from_deployed(&wh);
    let mut b = Replica::start(&spec, "nw-b");
    b.wait_ready(Duration::from_secs(30));
    let ns = TestNs::new("chaos-nw").await;
    let on_node = blocked_on_node(&ns, "nwd", "kwok-node-1").await.len() as i32;
    let watcher = AvailabilityWatcher::start(&ns, "nwd");

    // 1. Both replicas stopped (SIGTERM) before the drain: the PDB allows no
    // disruption, so the apiserver refuses every eviction (its own 429) and
    // the drain evicts nothing.
    stop_all(&wh, &mut b, "-TERM");
    let calls0 = failed_webhook_calls();
    let blocked = drain_node("kwok-node-1", "app=nwd", &["--timeout=15s"]).await;
    let calls1 = failed_webhook_calls();
    let still = ready_pods(&ns, "nwd").await;
    assert!(
        !blocked.ok,
        "no room: the drain cannot finish:\n{}",
        blocked.output
    );
    assert!(
        blocked
            .output
            .contains("Cannot evict pod as it would violate the pod's disruption budget"),
        "{}",
        blocked.output
    );
    assert_eq!(still.len(), 3, "nothing evicted while the webhook was down");

    // 2. They return: the cordon left by the drain is a signal, the surge
    // starts. Both are stopped again (SIGKILL) as soon as the markers are on.
    let wh = restart_server(&[]);
    b.restart_as("nw-b-2");
    wait_deployment(&ns, "nwd", 3 + on_node, true, Duration::from_secs(30)).await;
    stop_all(&wh, &mut b, "-KILL");
    let drain = drain_node("kwok-node-1", "app=nwd", &["--timeout=120s"]).await;
    let calls2 = failed_webhook_calls();
    assert!(drain.ok, "drain with the webhook down:\n{}", drain.output);
    let during = deployment_state(&ns, "nwd").await;

    // 3. Back again: the surge is reverted once, nothing is left half-done.
    let _ = restart_server(&[]);
    b.restart_as("nw-b-3");
    uncordon("kwok-node-1");
    assert_settled_at(&ns, "nwd", 3, Duration::from_secs(90)).await;
    let min_ready = watcher.finish().await;
    let pdbs: Api<PodDisruptionBudget> = ns.api();
    let pdb = pdbs.get("nwd").await.expect("our PDB is still there");
    let min_available = pdb.spec.and_then(|s| s.min_available);
    let started = event_total(&ns.name, "SurgeStarted");
    let reverted = event_total(&ns.name, "SurgeReverted");
    record_figure(format!(
        "webhook replicas down: drain without room refused ({} failed-open webhook calls), drain mid-surge {:.1}s ({} failed-open calls), min Ready {min_ready}/3, SurgeStarted {started}, SurgeReverted {reverted}",
        calls1 - calls0,
        drain.took.as_secs_f64(),
        calls2 - calls1,
    ));
    assert_eq!(
        during,
        (3 + on_node, Some(true)),
        "the surge stayed while they were down"
    );
    assert!(
        calls1 > calls0 && calls2 > calls1,
        "the apiserver did call the (absent) webhook"
    );
    assert!(min_ready >= 3, "availability: {min_ready} Ready < 3");
    assert_eq!(
        min_available,
        Some(IntOrString::Int(3)),
        "PDB back at the baseline"
    );
    assert_eq!((started, reverted), (1, 1), "{}", event_log(&ns.name));
}
