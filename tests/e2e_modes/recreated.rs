//! A Deployment deleted and made again (a GitOps tool replacing it) while
//! its HPA's minimum is raised by a surge (behaviour.md section 6: nothing
//! may strand a surge). Runs here because it needs a cooldown longer than
//! the main suite's 5 s: the HPA controller lifts the new Deployment within
//! its 15 s sync, and the raised minimum must still stand then.

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::PostParams;
use kube::Api;

use crate::support::*;

const COOLDOWN: Duration = Duration::from_secs(30);

/// Uncordons a node when dropped, so a failing test leaves it schedulable.
struct UncordonOnDrop(&'static str);

impl Drop for UncordonOnDrop {
    fn drop(&mut self) {
        uncordon(self.0);
    }
}

/// The HPA lifts the new Deployment to the raised minimum, with none of our
/// markers on it. The lift is recorded, so the Deployment goes back too
/// after the HPA's revert; the HPA here acts on no metrics, so nothing else
/// would ever bring it down (it stayed at 4 before).
#[tokio::test]
async fn a_deployment_made_again_mid_surge_is_not_left_lifted() {
    let _nodes = nodes_lock().await;
    let cooldown = format!("{}s", COOLDOWN.as_secs());
    let _ = restart_server(&[("COOLDOWN", cooldown.as_str())]);
    let ns = TestNs::new("e2e-hpa-again").await;
    let deps: Api<Deployment> = ns.api();
    let node = "kwok-node-2";
    let make = || rolling_max_surge(deployment("h", 2, Some(node)), IntOrString::Int(2));
    deps.create(&PostParams::default(), &make()).await.unwrap();
    let hpas: Api<HorizontalPodAutoscaler> = ns.api();
    hpas.create(&PostParams::default(), &hpa("h", "h", 2))
        .await
        .unwrap();
    let pods = wait_ready(&ns, "h", 2).await;
    assert!(nodes_of(&pods).iter().all(|n| n == node), "both on {node}");
    wait_pdb_blocking(&ns, "h", 2).await;
    let _uncordon = UncordonOnDrop(node);
    kubectl_ok(&["cordon", node]);
    wait_hpa_min(&hpas, "h", 4, Some(true), Duration::from_secs(30)).await;
    deps.delete("h", &Default::default()).await.unwrap();
    wait_gone(
        &deps,
        "h",
        "the Deployment deleted",
        Duration::from_secs(30),
    )
    .await;
    let mut again = make();
    if let Some(spec) = again.spec.as_mut() {
        spec.replicas = Some(1);
    }
    deps.create(&PostParams::default(), &again).await.unwrap();
    // The HPA lifts it to the raised minimum (its sync: 15 s).
    wait_for(
        "the HPA to lift the new Deployment to 4",
        Duration::from_secs(25),
        || async { (deployment_state(&ns, "h").await.0 == 4).then_some(()) },
    )
    .await;
    uncordon(node);
    wait_hpa_min(
        &hpas,
        "h",
        2,
        Some(false),
        COOLDOWN + Duration::from_secs(30),
    )
    .await;
    wait_deployment(&ns, "h", 2, false, Duration::from_secs(45)).await;
}
