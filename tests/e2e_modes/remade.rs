//! A Deployment deleted and made again while its HPA's minimum is raised by
//! a surge (behaviour.md section 6: nothing may strand a surge). The markers
//! go with the old object, and the HPA controller would lift the new
//! Deployment to our raised minimum at its next sync, a value an HPA without
//! metrics never lowers: the product records the new object's own value and
//! makes the lift itself first. Runs here because it needs a cooldown longer
//! than the HPA controller's sync period (15 s).

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{DeleteParams, PostParams};
use kube::Api;

use crate::support::*;

const COOLDOWN: Duration = Duration::from_secs(60);

#[tokio::test]
async fn a_deployment_made_again_mid_surge_under_its_raised_hpa_goes_back() {
    let _nodes = nodes_lock().await;
    let cooldown = format!("{}s", COOLDOWN.as_secs());
    let _ = restart_server(&[("COOLDOWN", cooldown.as_str())]);
    let ns = TestNs::new("e2e-remade").await;
    let deps: Api<Deployment> = ns.api();
    let hpas: Api<HorizontalPodAutoscaler> = ns.api();
    let node = "kwok-node-2";
    let app = "rm";
    let made = || rolling_max_surge(deployment(app, 2, Some(node)), IntOrString::Int(2));
    deps.create(&PostParams::default(), &made())
        .await
        .expect("create Deployment");
    hpas.create(&PostParams::default(), &hpa(app, app, 2))
        .await
        .expect("create HPA");
    wait_ready(&ns, app, 2).await;
    wait_pdb_blocking(&ns, app, 2).await;

    // A cordon surges the HPA's minimum (and the Deployment) from 2 to 4.
    let uncordon_later = UncordonOnDrop(node);
    kubectl_ok(&["cordon", node]);
    wait_hpa_min(&hpas, app, 4, Some(true), Duration::from_secs(30)).await;
    drop(uncordon_later);

    // Made again: the new object has no markers, and the HPA controller
    // lifts it to 4 within its sync period, before the cooldown ends.
    deps.delete(app, &DeleteParams::foreground())
        .await
        .expect("delete Deployment");
    wait_for(
        &format!("Deployment {app} gone"),
        Duration::from_secs(60),
        || async {
            deps.get_opt(app)
                .await
                .ok()
                .and_then(|d| d.is_none().then_some(()))
        },
    )
    .await;
    // Made again just after one of the HPA's syncs (each one without its
    // target records a FailedGetScale Event), so that the product sees the
    // new object below the minimum before the next sync, as it does in
    // practice (a pass within a second; the HPA every 15 s).
    let synced = failed_get_scale(&ns);
    wait_for(
        "an HPA sync without its target",
        Duration::from_secs(40),
        || async { (failed_get_scale(&ns) > synced).then_some(()) },
    )
    .await;
    deps.create(&PostParams::default(), &made())
        .await
        .expect("create Deployment again");
    // Its own 2 recorded, and the lift to 4 made by the product.
    wait_deployment(&ns, app, 4, true, Duration::from_secs(10)).await;
    let log = event_log(&ns.name);
    assert_eq!(
        event_total(&ns.name, "SurgeReverted"),
        0,
        "reverted before the cooldown:\n{log}"
    );

    // After the cooldown: the HPA back to 2, then the Deployment, and both
    // stay there without markers.
    wait_hpa_min(
        &hpas,
        app,
        2,
        Some(false),
        COOLDOWN + Duration::from_secs(30),
    )
    .await;
    assert_settled_at(&ns, app, 2, Duration::from_secs(60)).await;
    assert_eq!(
        hpa_min_of(&hpas, app).await,
        2,
        "the HPA stays at its baseline"
    );
}

async fn hpa_min_of(hpas: &Api<HorizontalPodAutoscaler>, name: &str) -> i32 {
    hpas.get(name)
        .await
        .ok()
        .and_then(|h| h.spec)
        .and_then(|s| s.min_replicas)
        .unwrap_or(0)
}

/// How many times the HPA controller failed to read its target's scale
/// (the count of its aggregated FailedGetScale Events).
fn failed_get_scale(ns: &TestNs) -> u64 {
    kubectl_ok(&[
        "get",
        "events",
        "-n",
        &ns.name,
        "--field-selector",
        "reason=FailedGetScale",
        "-o",
        "jsonpath={range .items[*]}{.count}{\"\\n\"}{end}",
    ])
    .lines()
    .filter_map(|l| l.trim().parse::<u64>().ok())
    .sum()
}
