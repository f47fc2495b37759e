//! The product restarted between two steps of one change (invariant 1 and
//! 3): a new process, nothing in memory, finds the first step done and the
//! second not, and finishes the job from what the cluster shows.
//! - a surge taken over from the Go project, its revert refused, restarted;
//! - a KEDA surge whose ScaledObject is back while KEDA's HPA lags behind,
//!   restarted, after KEDA's HPA was deleted (and made again) mid-surge.

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use kube::api::DeleteParams;
use kube::Api;

use crate::fleet::blocked_on_node;
use crate::keda_removed::server_with_keda;
use crate::set_back::Restore;
use crate::support::*;

const TAKEN_OVER: &str = "eviction-autoscaler.azure.com/taken-over";

/// The shared server started again however the test ends.
struct ServerBack;

impl Drop for ServerBack {
    fn drop(&mut self) {
        let _ = restart_server(&[]);
    }
}

/// A surge of the Go project taken over (the baseline written beside its
/// marker), the revert refused past the cooldown, then a restart: the new
/// process reverts it to the recorded baseline, the PDB stays at it, and
/// the take-over is not announced twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_taken_over_surge_restarted_before_its_revert_goes_back_to_its_baseline() {
    let _g = nodes_lock().await;
    let _back = ServerBack;
    let _ = restart_server(&[]);
    let ns = TestNs::new("chaos-legacy").await;
    stop_server();
    legacy_go_surge(&ns, "lr", 5, 3).await;
    // Every lowering of the Deployment refused: the take-over (a write at
    // 5) passes, the revert does not.
    let deny = DenyUpdates::apply(
        &ns,
        "apps",
        "deployments",
        "object.spec.replicas >= oldObject.spec.replicas",
    );
    let lower = [
        "patch",
        "deployment/lr",
        "--type=merge",
        "-p",
        r#"{"spec":{"replicas":1}}"#,
    ];
    deny.wait_refusing_command(&lower).await;
    wait_ready(&ns, "lr", 5).await;
    let sampler = PdbSampler::start(&ns, "lr");

    let _ = restart_server(&[]);
    let deps: Api<Deployment> = ns.api();
    wait_for(
        "the take-over written (baseline 3 beside the marker, the note)",
        Duration::from_secs(60),
        || async {
            let d = deps.get("lr").await.ok()?;
            let a = d.metadata.annotations?;
            let r = d.spec?.replicas?;
            (r == 5
                && a.get(SURGE_MARKER).map(String::as_str) == Some("5")
                && a.get(BASELINE_MARKER).map(String::as_str) == Some("3")
                && a.contains_key(TAKEN_OVER))
            .then_some(())
        },
    )
    .await;
    // Past the cooldown (5 s): the revert is refused, the surge stands.
    tokio::time::sleep(Duration::from_secs(8)).await;
    assert_eq!(deployment_state(&ns, "lr").await, (5, Some(true)));

    // The restart at this step.
    let _ = restart_server(&[]);
    deny.lift_command(&lower).await;
    wait_deployment(&ns, "lr", 3, false, Duration::from_secs(60)).await;
    let d = deps.get("lr").await.expect("Deployment");
    assert!(
        !d.metadata
            .annotations
            .unwrap_or_default()
            .contains_key(TAKEN_OVER),
        "the take-over note is cleared with the markers"
    );
    let status = eas_get(&ns.name, "lr", "jsonpath={.status.minReplicas}");
    assert_eq!(String::from_utf8_lossy(&status.stdout).trim(), "3");
    assert_settled_at(&ns, "lr", 3, Duration::from_secs(30)).await;
    let seen = sampler.finish().await;
    assert_eq!(seen, [3].into(), "the PDB's minimum during the episode");
    assert_eq!(
        event_count(&ns.name, "SurgeTakenOver"),
        1,
        "the take-over announced once across the restart"
    );
}

/// A KEDA surge (with a stand-in for KEDA's operator): KEDA's HPA deleted
/// mid-surge and made again by its operator with copies of our markers;
/// then the drain over, the ScaledObject back at its minimum while KEDA's
/// HPA lags at the surged one, and the product restarted at that step. The
/// new process keeps the Deployment surged while KEDA's HPA lags (lowered,
/// the HPA controller would lift it again) and lowers it once KEDA catches
/// up; KEDA's HPA is never written by us; Ready pods never below 3.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_keda_surge_restarted_while_kedas_hpa_lags_goes_back_once_it_catches_up() {
    let _g = nodes_lock().await;
    let _back = ServerBack;
    server_with_keda().await;
    let ns = TestNs::new("chaos-kedalag").await;
    let sos = create_scaled_object(&ns, "kl", 3).await;
    let keda = KedaOperator::start(&ns, "kl");
    let node = "kwok-node-1";
    let t = 3 + blocked_on_node(&ns, "kl", node).await.len() as i32;
    let watch = AvailabilityWatcher::start(&ns, "kl");
    let hpas: Api<HorizontalPodAutoscaler> = ns.api();
    let kedas_min = || async {
        let h = hpas.get_opt("keda-hpa-kl").await.ok()??;
        Some((h.metadata.uid?, h.spec?.min_replicas?))
    };

    let restore = Restore(node);
    kubectl_ok(&["cordon", node]);
    wait_deployment(&ns, "kl", t, true, Duration::from_secs(30)).await;
    let (first, _) = wait_for(
        "KEDA's HPA at the surged minimum",
        Duration::from_secs(30),
        || async { kedas_min().await.filter(|(_, m)| *m == t) },
    )
    .await;

    // KEDA's HPA deleted mid-surge; its operator makes it again.
    hpas.delete("keda-hpa-kl", &DeleteParams::default())
        .await
        .expect("delete KEDA's HPA");
    wait_for(
        "KEDA's HPA made again at the surged minimum",
        Duration::from_secs(30),
        || async { kedas_min().await.filter(|(u, m)| *u != first && *m == t) },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert_eq!(
        deployment_state(&ns, "kl").await,
        (t, Some(true)),
        "the surge stands while the node is cordoned"
    );

    // KEDA's operator lags; the drain is over; the ScaledObject goes back.
    keda.pause(true);
    uncordon(node);
    wait_so_restored(&sos, "kl", 3).await;
    assert_eq!(
        kedas_min().await.map(|(_, m)| m),
        Some(t),
        "KEDA's HPA lags"
    );

    // The restart at this step.
    server_with_keda().await;
    for _ in 0..8 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(
            deployment_state(&ns, "kl").await,
            (t, Some(true)),
            "lowered while KEDA's HPA still holds the surged minimum"
        );
    }
    keda.pause(false);
    wait_deployment(&ns, "kl", 3, false, Duration::from_secs(60)).await;
    assert_settled_at(&ns, "kl", 3, Duration::from_secs(30)).await;
    let (_, foreign) = keda.finish().await;
    assert!(foreign.is_empty(), "KEDA's HPA written by {foreign:?}");
    let min = watch.finish().await;
    assert!(min >= 3, "Ready pods went down to {min}");
    drop(restore);
}
