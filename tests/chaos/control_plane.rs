//! Item 2: the apiserver, then etcd, restarted while a surge is under way.
//! The product is not restarted: its watches and clients recover on their
//! own, the drain completes, and the surge is reverted exactly once.

use std::process::Command;
use std::time::{Duration, Instant};

use crate::fleet::blocked_on_node;
use crate::support::*;

/// Runs tests/cluster/<script>; returns its output lines (it prints its timings).
pub fn run_cluster_script(script: &str) -> String {
    let out = Command::new(repo().join("tests/cluster").join(script))
        .env("CLUSTER_DIR", cluster_dir())
        .output()
        .unwrap_or_else(|e| panic!("run {script}: {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{script} failed:\n{text}");
    text
}

/// The seconds a restart script printed after `prefix`.
fn seconds(text: &str, prefix: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(prefix))
        .and_then(|s| s.trim().trim_end_matches('s').parse().ok())
        .unwrap_or_else(|| panic!("no '{prefix}' in:\n{text}"))
}

fn alive(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn apiserver_then_etcd_restarted_during_a_surge_the_drain_completes() {
    let _g = nodes_lock().await;
    let wh = restart_server(&[]);
    let pid = wh.pid();
    let ns = TestNs::new("chaos-cp").await;
    let on_node = blocked_on_node(&ns, "cpr", "kwok-node-2").await.len() as i32;
    let watcher = AvailabilityWatcher::start(&ns, "cpr");

    kubectl_ok(&["cordon", "kwok-node-2"]);
    wait_deployment(&ns, "cpr", 3 + on_node, true, Duration::from_secs(30)).await;

    // Both restarts while the surge holds the extra replicas.
    let t0 = Instant::now();
    let api = run_cluster_script("restart-apiserver.sh");
    let api_away = seconds(&api, "restart-apiserver.sh: ready again after ");
    let etcd = run_cluster_script("restart-etcd.sh");
    let etcd_away = seconds(&etcd, "restart-etcd.sh: apiserver ready again after ");
    assert!(alive(pid), "the product kept running through both restarts");

    let drain = drain_node("kwok-node-2", "app=cpr", &["--timeout=180s"]).await;
    assert!(drain.ok, "drain after the restarts:\n{}", drain.output);
    let during = deployment_state(&ns, "cpr").await;
    uncordon("kwok-node-2");
    assert_settled_at(&ns, "cpr", 3, Duration::from_secs(90)).await;
    let min_ready = watcher.finish().await;
    let started = event_total(&ns.name, "SurgeStarted");
    let reverted = event_total(&ns.name, "SurgeReverted");
    record_figure(format!(
        "apiserver restart (away {api_away:.1}s) then etcd restart (apiserver ready after {etcd_away:.1}s) during a surge: drain {:.1}s after them, {:.0}s from the first restart to the revert, product pid unchanged, min Ready {min_ready}/3, SurgeStarted {started}, SurgeReverted {reverted}",
        drain.took.as_secs_f64(),
        t0.elapsed().as_secs_f64()
    ));
    assert_eq!(
        during,
        (3 + on_node, Some(true)),
        "the surge survived the restarts"
    );
    assert!(alive(pid) && wh.pid() == pid, "no restart of the product");
    assert!(min_ready >= 3, "availability: {min_ready} Ready < 3");
    assert_eq!((started, reverted), (1, 1), "{}", event_log(&ns.name));
}
