//! KEDA uninstalled in the middle of a surge (its CRD deleted, which deletes
//! every ScaledObject with it). The product's ScaledObject store is emptied
//! when the API goes, and the surge still returns to its baseline through
//! the markers on the Deployment: nothing is stranded, and no write goes to
//! a ScaledObject that is gone. The CRD is cluster-wide, so this runs with
//! the other chaos tests, one at a time; it puts the CRD back however it
//! ends (the KEDA tests of the e2e suite apply it too).

use std::time::Duration;

use crate::fleet::blocked_on_node;
use crate::support::*;

const CRD: &str = "scaledobjects.keda.sh";

/// KEDA's CRD applied and the shared server restarted, watching ScaledObjects.
pub(crate) async fn server_with_keda() -> WebhookInfo {
    install_keda_crd();
    let wh = restart_server(&[]);
    wait_keda_watched(&wh).await;
    wh
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn keda_removed_mid_surge_the_surge_is_still_reverted() {
    let _g = nodes_lock().await;
    let _back = ApplyOnDrop::manifest("tests/e2e/keda-crd.yaml");
    let wh = server_with_keda().await;
    let ns = TestNs::new("chaos-keda").await;
    let sos = create_scaled_object(&ns, "kr", 3).await;
    let node = "kwok-node-1";
    let on_node = blocked_on_node(&ns, "kr", node).await.len() as i64;

    // The cordon surges: the ScaledObject's minimum and the Deployment.
    kubectl_ok(&["cordon", node]);
    let surged = wait_for(
        "the ScaledObject's minReplicaCount raised",
        Duration::from_secs(30),
        || async {
            let so = sos.get("kr").await.ok()?;
            let min = so.data["spec"]["minReplicaCount"].as_i64()?;
            (min > 3).then_some(min)
        },
    )
    .await;
    wait_deployment(&ns, "kr", 3 + on_node as i32, true, Duration::from_secs(30)).await;

    // KEDA uninstalled mid-surge.
    kubectl_ok(&["delete", "crd", CRD, "--wait=true", "--timeout=60s"]);
    wait_for(
        "the server to stop watching ScaledObjects",
        Duration::from_secs(30),
        || async {
            wh.log()
                .contains("KEDA ScaledObjects are no longer served")
                .then_some(())
        },
    )
    .await;

    // The drain is over: back to the baseline, with KEDA gone.
    uncordon(node);
    assert_settled_at(&ns, "kr", 3, Duration::from_secs(60)).await;
    let keda_absent = !kubectl(&["get", "crd", CRD]).status.success();
    let started = event_total(&ns.name, "SurgeStarted");
    let reverted = event_total(&ns.name, "SurgeReverted");
    // Writes to ScaledObjects after KEDA went: the product's own API
    // requests by verb, resource and code (only the patch of the raise, and
    // no 404 from one that is gone).
    let so_writes_failed = wh.metric_sum(
        "eviction_autoscaler_api_requests_total",
        &[
            "verb=\"patch\"",
            "resource=\"scaledobjects\"",
            "code=\"404\"",
        ],
    ) as u64;
    record_figure(format!(
        "KEDA's CRD deleted mid-surge (minReplicaCount raised to {surged}): Deployment back at 3 without markers with KEDA gone {keda_absent}; ScaledObject patches answered 404 {so_writes_failed}; SurgeStarted {started}, SurgeReverted {reverted}"
    ));
    assert!(keda_absent, "KEDA's CRD stayed deleted during the revert");
    assert_eq!(
        so_writes_failed, 0,
        "patches of a ScaledObject that was gone"
    );
    assert!(started >= 1 && reverted >= 1, "{}", event_log(&ns.name));
}
