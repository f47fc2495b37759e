//! A scale-down that the PDB's status has not counted yet (the race behind
//! the one availability dip of the drain benchmark). A Deployment goes from
//! 4 to 3 under a PDB with minAvailable 3; before the disruption controller
//! recounts, the status still says 4 healthy and one disruption allowed, and
//! the apiserver checks the status, not the pods. An eviction then would
//! leave 2 Ready pods. The webhook holds it until the recount, which blocks
//! it, and the surge makes room the usual way: Ready never goes below 3.
//!
//! The race is made deterministic: kube-controller-manager is paused
//! (SIGSTOP) and the test does the deployment and ReplicaSet controllers'
//! scale-down writes itself (Deployment and ReplicaSet at 3, one pod
//! deleted), so the disruption controller cannot recount until the test
//! resumes it. It stops the whole cluster's controllers, so it runs with the
//! other chaos tests, one at a time.

use std::process::Command;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{DeleteParams, EvictParams, ListParams, Patch, PatchParams, PostParams};
use kube::Api;

use crate::support::*;

const HOLDS: &str = "eviction_autoscaler_eviction_holds_total";

/// kube-controller-manager stopped with SIGSTOP; resumed when dropped, so
/// a failing test never leaves the cluster without its controllers.
struct Paused(u32);

impl Paused {
    fn controller_manager() -> Paused {
        let pidfile = cluster_dir().join("pids/kube-controller-manager.pid");
        let pid: u32 = std::fs::read_to_string(&pidfile)
            .unwrap_or_else(|e| panic!("{}: {e}", pidfile.display()))
            .trim()
            .parse()
            .expect("pid");
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let cluster = path_str(&cluster_dir());
        assert!(
            String::from_utf8_lossy(&cmdline).contains(&cluster),
            "pid {pid} is not this cluster's kube-controller-manager"
        );
        signal(pid, "-STOP");
        Paused(pid)
    }
}

impl Drop for Paused {
    fn drop(&mut self) {
        signal(self.0, "-CONT");
    }
}

fn signal(pid: u32, sig: &str) {
    let ok = Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok || std::thread::panicking(), "kill {sig} {pid}");
}

/// Evicts `pod` the way kubectl drain does: a 429 is retried (every second
/// here), anything else ends it. Returns (the answer, 429s seen).
async fn evict_retrying(pods: Api<Pod>, pod: String) -> (Result<(), String>, usize) {
    let mut refused = 0;
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        match pods.evict(&pod, &EvictParams::default()).await {
            Ok(_) => return (Ok(()), refused),
            Err(kube::Error::Api(e)) if e.code == 429 && Instant::now() < deadline => {
                refused += 1;
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            Err(e) => return (Err(e.to_string()), refused),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_eviction_before_the_pdb_counts_a_scale_down_waits_for_the_recount() {
    let _g = nodes_lock().await;
    // A server of our own with the default settings: the test before may
    // have stopped or replaced the shared one.
    let wh = restart_server(&[]);
    let ns = TestNs::new("chaos-recount").await;
    // The user's PDB first, so the Deployment never gets one of ours.
    let pdbs: Api<PodDisruptionBudget> = ns.api();
    let pdb = PodDisruptionBudget {
        metadata: ObjectMeta {
            name: Some("rc".into()),
            ..Default::default()
        },
        spec: Some(PodDisruptionBudgetSpec {
            min_available: Some(IntOrString::Int(3)),
            selector: Some(LabelSelector {
                match_labels: Some(labels("rc")),
                ..Default::default()
            }),
            ..Default::default()
        }),
        status: None,
    };
    pdbs.create(&PostParams::default(), &pdb)
        .await
        .expect("create PDB");
    let deps: Api<k8s_openapi::api::apps::v1::Deployment> = ns.api();
    deps.create(&PostParams::default(), &deployment("rc", 4, None))
        .await
        .expect("create Deployment");
    let ready = wait_ready(&ns, "rc", 4).await;
    wait_pdb(&ns, "rc", "4 healthy, one disruption allowed", |p| {
        p.status.as_ref().is_some_and(|s| {
            s.current_healthy == 4
                && s.disruptions_allowed == 1
                && s.observed_generation == p.metadata.generation
        })
    })
    .await;
    let rs_name = wait_for("the ReplicaSet of rc", Duration::from_secs(30), || async {
        let rs: Api<ReplicaSet> = ns.api();
        rs.list(&ListParams::default().labels("app=rc"))
            .await
            .ok()?
            .items
            .into_iter()
            .find_map(|r| r.metadata.name)
    })
    .await;
    let holds_before = wh.metric_sum(HOLDS, &["wait=\"recount\"", "outcome=\"blocked\""]);

    // The scale-down, as the deployment and ReplicaSet controllers would
    // write it, with the disruption controller unable to count it.
    let paused = Paused::controller_manager();
    let t0 = Instant::now();
    let scale = |n: i32| serde_json::json!({"spec": {"replicas": n}});
    deps.patch("rc", &PatchParams::default(), &Patch::Merge(scale(3)))
        .await
        .expect("scale Deployment to 3");
    let rss: Api<ReplicaSet> = ns.api();
    rss.patch(&rs_name, &PatchParams::default(), &Patch::Merge(scale(3)))
        .await
        .expect("scale ReplicaSet to 3");
    let pods: Api<Pod> = ns.api();
    let gone = ready[3].metadata.name.clone().expect("pod name");
    pods.delete(
        &gone,
        &DeleteParams {
            grace_period_seconds: Some(0),
            ..Default::default()
        },
    )
    .await
    .expect("delete the pod the ReplicaSet would remove");
    wait_for(
        "3 Ready pods after the scale-down",
        Duration::from_secs(30),
        || async { (ready_pods(&ns, "rc").await.len() == 3).then_some(()) },
    )
    .await;
    let stale = pdbs
        .get("rc")
        .await
        .expect("PDB")
        .status
        .unwrap_or_default();
    assert_eq!(
        (stale.current_healthy, stale.disruptions_allowed),
        (4, 1),
        "the PDB's status must still lag the scale-down for this test to mean anything"
    );
    // Let the webhook's watch caches see the scale-down (milliseconds here).
    tokio::time::sleep(Duration::from_millis(1500)).await;

    let watcher = AvailabilityWatcher::start(&ns, "rc");
    let victim = ready[0].metadata.name.clone().expect("pod name");
    let eviction = tokio::spawn(evict_retrying(pods.clone(), victim.clone()));
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let answered_while_lagging = eviction.is_finished();
    let ready_while_lagging = ready_pods(&ns, "rc").await.len();
    let paused_for = t0.elapsed();
    drop(paused);

    let (evicted, refused) = eviction.await.expect("eviction task");
    let took = t0.elapsed();
    wait_ready(&ns, "rc", 3).await;
    let min_ready = watcher.finish().await;
    let holds = wh.metric_sum(HOLDS, &["wait=\"recount\"", "outcome=\"blocked\""]) - holds_before;
    // The surge that made room goes back to the user's 3.
    assert_settled_at(&ns, "rc", 3, Duration::from_secs(90)).await;
    let started = event_total(&ns.name, "SurgeStarted");
    let reverted = event_total(&ns.name, "SurgeReverted");
    record_figure(format!(
        "eviction while the PDB status lagged a 4->3 scale-down (controller-manager paused {:.1}s): answered while lagging {answered_while_lagging}, Ready then {ready_while_lagging}, fewest Ready {min_ready}/3, recount holds that found the budget blocking {holds}, 429s {refused}, evicted after {:.1}s, SurgeStarted {started}, SurgeReverted {reverted}",
        paused_for.as_secs_f64(),
        took.as_secs_f64()
    ));
    assert!(
        !answered_while_lagging,
        "the eviction was answered at once, on a PDB status that had not counted the scale-down"
    );
    assert_eq!(ready_while_lagging, 3, "Ready pods while the status lagged");
    assert!(
        evicted.is_ok(),
        "the eviction went through once the surge made room: {evicted:?}"
    );
    assert!(min_ready >= 3, "availability: {min_ready} Ready < 3");
    assert!(
        holds >= 1.0,
        "a recount hold ended with the budget blocking"
    );
    assert_eq!((started, reverted), (1, 1), "{}", event_log(&ns.name));
}
