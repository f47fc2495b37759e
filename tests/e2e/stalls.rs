//! Nothing stalls (behaviour.md section 8, invariant 5): an Events API that
//! answers slowly costs the controllers nothing. A validating webhook on
//! Events in the test's namespace points at a port that never answers, so
//! the apiserver spends its `timeoutSeconds` on every Event created there
//! (then lets it through: failurePolicy Ignore). The surge worker used to
//! send its Events one after another after each pass and plan nothing
//! meanwhile: 8 surges meant 8 slow Events before the next surge.

use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, PostParams};

use crate::support::*;

/// The black hole's timeoutSeconds: each Event in the namespace takes this long.
const EVENT_DELAY: Duration = Duration::from_secs(3);
/// Deployments surged by the first cordon: their Events alone kept the old
/// worker busy 8 x 3 s.
const FIRST: usize = 8;

/// `deployment(name, 1)` on exactly `node`.
fn pinned(name: &str, node: &str) -> Deployment {
    pinned_to(deployment(name, 1, None), node)
}

#[tokio::test]
async fn slow_events_do_not_hold_back_the_next_surge() {
    let _nodes = nodes_lock().await;
    let ns = TestNs::new("e2e-slow-events").await;
    let deps: Api<Deployment> = ns.api();
    let first_node = "kwok-node-1";
    for i in 0..FIRST {
        deps.create(
            &PostParams::default(),
            &pinned(&format!("se-{i}"), first_node),
        )
        .await
        .expect("create Deployment");
    }
    let second_node = "kwok-node-2";
    deps.create(&PostParams::default(), &pinned("late", second_node))
        .await
        .expect("create Deployment");
    let mut apps: Vec<String> = (0..FIRST).map(|i| format!("se-{i}")).collect();
    for app in &apps {
        wait_ready(&ns, app, 1).await;
        wait_pdb_blocking(&ns, app, 1).await;
    }
    wait_ready(&ns, "late", 1).await;
    wait_pdb_blocking(&ns, "late", 1).await;

    // The fault is in place: an Event in the namespace takes the webhook's
    // timeout (else this test could not fail).
    let _slow = SlowEvents::install(&ns, EVENT_DELAY).await;

    kubectl_ok(&["cordon", first_node]);
    for app in &apps {
        wait_deployment(&ns, app, 2, true, Duration::from_secs(30)).await;
    }
    // The worker now owes FIRST SurgeStarted Events, each EVENT_DELAY long;
    // the next cordon's surge must not wait for them.
    let cordoned = Instant::now();
    kubectl_ok(&["cordon", second_node]);
    let within = EVENT_DELAY * (FIRST as u32) / 2;
    wait_deployment(&ns, "late", 2, true, within).await;
    let surged_after = cordoned.elapsed();

    // Back to the baselines once the cordons are gone (COOLDOWN 5 s).
    uncordon(first_node);
    uncordon(second_node);
    apps.push("late".into());
    for app in &apps {
        wait_deployment(&ns, app, 1, false, Duration::from_secs(60)).await;
    }
    // The Events went out too, late: one SurgeStarted per Deployment.
    wait_for(
        "a SurgeStarted Event per Deployment",
        Duration::from_secs(120),
        || async { (event_total(&ns.name, "SurgeStarted") >= apps.len()).then_some(()) },
    )
    .await;
    record_figure(format!(
        "slow Events ({EVENT_DELAY:?} each): the second cordon's surge {:.1}s after it, with {FIRST} slow Events owed",
        surged_after.as_secs_f64()
    ));
}
