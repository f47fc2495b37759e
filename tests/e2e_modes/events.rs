//! The reconciler works in proportion to what changed (issue 9): pod updates
//! plan nothing, and a Deployment change plans its own namespace only.

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Patch, PatchParams, PostParams};
use kube::Api;
use serde_json::json;

use crate::support::*;

const NAMESPACES: &str = "eviction_autoscaler_reconcile_namespaces_total";
const PASSES: &str = "eviction_autoscaler_reconcile_passes_total";
const MARKED: &str = "pass=\"marked\"";

/// (marked passes, namespaces they planned), read from /metrics.
fn marked_counts(info: &WebhookInfo) -> (f64, f64) {
    (
        info.metric_sum(PASSES, &[MARKED]),
        info.metric_sum(NAMESPACES, &[MARKED]),
    )
}

/// Waits until the marked counters stop moving for `quiet`.
async fn settled(info: &WebhookInfo, quiet: Duration) -> (f64, f64) {
    let mut last = marked_counts(info);
    let mut since = std::time::Instant::now();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let now = marked_counts(info);
        if now != last {
            last = now;
            since = std::time::Instant::now();
        } else if since.elapsed() >= quiet {
            return now;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the reconciler never went quiet: {last:?}"
        );
    }
}

#[tokio::test]
async fn pod_updates_plan_nothing_and_a_change_plans_only_its_namespace() {
    let _g = nodes_lock().await;
    let info = restart_server(&[]);
    // Namespaces of earlier tests still being deleted would mark theirs.
    wait_for(
        "no namespace terminating",
        Duration::from_secs(120),
        || async {
            let out = kubectl_ok(&[
                "get",
                "namespaces",
                "-o",
                "jsonpath={.items[*].status.phase}",
            ]);
            (!out.contains("Terminating")).then_some(())
        },
    )
    .await;
    let mut spaces = Vec::new();
    for i in 0..4 {
        let ns = TestNs::new(&format!("e2e-ev{i}")).await;
        let api: Api<Deployment> = ns.api();
        api.create(&PostParams::default(), &deployment("web", 1, None))
            .await
            .unwrap();
        spaces.push(ns);
    }
    // Settled means the disruption controller has computed every PDB's
    // status (its update marks the namespace, and our EvictionAutoScaler
    // status follows it): on a loaded machine that comes seconds later.
    for ns in &spaces {
        wait_ready(ns, "web", 1).await;
        wait_pdb(ns, "web", "owned PDB with its status computed", |p| {
            p.status.as_ref().is_some_and(|s| {
                s.observed_generation == p.metadata.generation
                    && s.expected_pods == 1
                    && s.current_healthy == 1
            })
        })
        .await;
    }
    let quiet = Duration::from_secs(5);
    let (p0, n0) = settled(&info, quiet).await;

    // Pod-only updates (an annotation on the pod) touch no object the
    // reconciler reads.
    for k in 0..10 {
        kubectl_ok(&[
            "-n",
            &spaces[0].name,
            "annotate",
            "pods",
            "-l",
            "app=web",
            &format!("e2e-touch={k}"),
            "--overwrite",
        ]);
    }
    let (p1, n1) = settled(&info, quiet).await;
    assert_eq!(
        (p1 - p0, n1 - n0),
        (0.0, 0.0),
        "pod updates made the reconciler plan namespaces"
    );

    // A Deployment change in one namespace: every marked pass since plans
    // that namespace alone.
    let api: Api<Deployment> = spaces[1].api();
    api.patch(
        "web",
        &PatchParams::default(),
        &Patch::Merge(&json!({"spec": {"replicas": 3}})),
    )
    .await
    .unwrap();
    wait_pdb(&spaces[1], "web", "minAvailable follows replicas", |p| {
        p.spec.as_ref().and_then(|s| s.min_available.clone())
            == Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(3))
    })
    .await;
    let (p2, n2) = settled(&info, quiet).await;
    let (passes, namespaces) = (p2 - p1, n2 - n1);
    assert!(passes >= 1.0, "the change was never planned");
    assert_eq!(
        namespaces, passes,
        "a pass after one namespace changed planned others too"
    );
    record_figure(format!(
        "event-driven reconciler: 10 pod updates -> 0 namespaces planned; one Deployment \
         scaled -> {passes} passes, {namespaces} namespace(s) planned (of {} in scope)",
        spaces.len()
    ));
}
