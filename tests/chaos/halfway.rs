//! A surge written halfway, then the product restarted at that step
//! (invariant 1). Under an HPA the surge writes the Deployment first, then
//! the HPA's minimum; an admission policy refuses every update of the HPA,
//! so only the Deployment carries the surge and its markers. A new process
//! (nothing in memory) finds that half: it keeps it while the node is
//! cordoned, past the cooldown, and reverts it alone once the node is
//! uncordoned; the HPA keeps its value and gets no markers, also after the
//! policy is lifted.

use std::time::Duration;

use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use kube::api::PostParams;
use kube::Api;

use crate::fleet::blocked_on_node;
use crate::set_back::Restore;
use crate::support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_surge_written_halfway_survives_a_restart_and_reverts_whole() {
    let _g = nodes_lock().await;
    let _ = restart_server(&[]);
    let ns = TestNs::new("chaos-halfway").await;
    let node = "kwok-node-1";
    let on_node = blocked_on_node(&ns, "hw", node).await.len() as i32;
    let hpas: Api<HorizontalPodAutoscaler> = ns.api();
    hpas.create(&PostParams::default(), &hpa("hw", "hw", 3))
        .await
        .expect("create HPA");
    let hpa_state = || async {
        let h = hpas.get("hw").await.expect("HPA");
        (
            h.spec.as_ref().and_then(|s| s.min_replicas),
            markers_present(h.metadata.annotations.as_ref()),
        )
    };
    let deny = DenyUpdates::apply(&ns, "autoscaling", "horizontalpodautoscalers", "false");
    deny.wait_refusing("hpa/hw").await;
    let watch = AvailabilityWatcher::start(&ns, "hw");

    let _restore = Restore(node);
    kubectl_ok(&["cordon", node]);
    let t = 3 + on_node;
    wait_deployment(&ns, "hw", t, true, Duration::from_secs(30)).await;
    assert_eq!(
        hpa_state().await,
        (Some(3), Some(false)),
        "the HPA's update is refused"
    );

    // The restart at this step: a new process, nothing in memory.
    let _ = restart_server(&[]);
    // Past the cooldown (5 s) with the node still cordoned: the half stands.
    for _ in 0..8 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(
            deployment_state(&ns, "hw").await,
            (t, Some(true)),
            "the restarted product changed the half-written surge mid-drain"
        );
    }
    assert_eq!(hpa_state().await, (Some(3), Some(false)));

    uncordon(node);
    assert_settled_at(&ns, "hw", 3, Duration::from_secs(60)).await;
    deny.lift("hpa/hw").await;
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(
        hpa_state().await,
        (Some(3), Some(false)),
        "a write raised the HPA after the episode"
    );
    assert_eq!(deployment_state(&ns, "hw").await, (3, Some(false)));
    let min = watch.finish().await;
    assert!(min >= 3, "Ready pods went down to {min}");
}
