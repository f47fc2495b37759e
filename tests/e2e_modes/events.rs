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

/// The namespaces each marked reconcile pass planned after byte `from` of
/// the log (its debug line `reconcile pass pass="marked" namespaces={..}`).
fn marked_passes(log: &str, from: usize) -> Vec<Vec<String>> {
    passes(log, from, "marked")
}

/// The namespaces each reconcile pass of this kind ("marked", "full")
/// planned after byte `from` of the log.
fn passes(log: &str, from: usize, kind: &str) -> Vec<Vec<String>> {
    let kind = format!("pass=\"{kind}\"");
    log.get(from..)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains("reconcile pass") && l.contains(&kind))
        .filter_map(|l| {
            let set = l.split("namespaces={").nth(1)?.split('}').next()?;
            Some(
                set.split(", ")
                    .map(|n| n.trim_matches('"').to_string())
                    .filter(|n| !n.is_empty())
                    .collect(),
            )
        })
        .collect()
}

/// Counted from the log, not from the metrics alone: namespaces other tests
/// left behind (an object of theirs still settling) may be planned meanwhile,
/// and they say nothing about what this test's changes cost.
#[tokio::test]
async fn pod_updates_plan_nothing_and_a_change_plans_only_its_namespace() {
    let _g = nodes_lock().await;
    let info = restart_server(&[(
        "RUST_LOG",
        "info,kube_runtime=warn,eviction_autoscaler::reconcile=debug",
    )]);
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
        // The deployment controller's last status writes (available
        // replicas, then the Progressing condition) are Deployment events
        // that mark the namespace; on a loaded machine they can come
        // seconds after the pod is Ready. Seen once in CI: all four
        // namespaces planned twice during the pod updates below.
        let deps: Api<Deployment> = ns.api();
        wait_for(
            "the Deployment's rollout status complete",
            Duration::from_secs(60),
            || async {
                let d = deps.get("web").await.ok()?;
                let st = d.status?;
                let done = st.observed_generation == d.metadata.generation
                    && st.available_replicas == Some(1)
                    && st.conditions.unwrap_or_default().iter().any(|c| {
                        c.type_ == "Progressing"
                            && c.reason.as_deref() == Some("NewReplicaSetAvailable")
                    });
                done.then_some(())
            },
        )
        .await;
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
    let ours: Vec<String> = spaces.iter().map(|n| n.name.clone()).collect();
    settled(&info, quiet).await;
    let before_pods = strip_ansi(&info.log()).len();

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
    settled(&info, quiet).await;
    let log = strip_ansi(&info.log());
    let during_pods = marked_passes(&log, before_pods);
    assert!(
        during_pods
            .iter()
            .all(|planned| !planned.iter().any(|n| ours.contains(n))),
        "pod updates made the reconciler plan this test's namespaces: {during_pods:?}"
    );
    // A full pass plans everything; one comes every 30 s by itself, more
    // would mean the pod updates asked for them.
    let full = passes(&log, before_pods, "full").len();
    assert!(full <= 1, "{full} full passes during the pod updates");
    let before_change = log.len();

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
    settled(&info, quiet).await;
    let after_change = marked_passes(&strip_ansi(&info.log()), before_change);
    let changed = &spaces[1].name;
    let planned_ours: Vec<&String> = after_change
        .iter()
        .flatten()
        .filter(|n| ours.contains(n))
        .collect();
    assert!(
        planned_ours.contains(&changed),
        "the change was never planned: {after_change:?}"
    );
    assert!(
        planned_ours.iter().all(|n| *n == changed),
        "a pass after one namespace changed planned others too: {after_change:?}"
    );
    let others = after_change.iter().flatten().count() - planned_ours.len();
    record_figure(format!(
        "event-driven reconciler: 10 pod updates -> 0 of the test's namespaces planned; one \
         Deployment scaled -> {} marked passes planning it, none planning the test's other {} \
         namespaces ({others} planning of namespaces outside the test)",
        planned_ours.len(),
        spaces.len() - 1
    ));
}

/// An Event owed when SIGTERM comes is sent before the process exits
/// (run.rs flushes the Events, 2 s at most, before it closes the
/// listener). Events in the namespace take 1 s here (a webhook that never
/// answers, `SlowEvents`), so the surge's Event is still on its way when
/// the signal arrives; SHUTDOWN_DELAY is 0 s in e2e, so nothing else keeps
/// the process alive for it.
#[tokio::test]
async fn an_event_owed_at_sigterm_is_sent_before_exit() {
    let _g = nodes_lock().await;
    let wh = restart_server(&[]);
    let ns = TestNs::new("e2e-flush").await;
    let node = "kwok-node-1";
    let deps: Api<Deployment> = ns.api();
    deps.create(
        &PostParams::default(),
        &pinned_to(deployment("fl", 1, None), node),
    )
    .await
    .expect("create Deployment");
    wait_ready(&ns, "fl", 1).await;
    wait_pdb_blocking(&ns, "fl", 1).await;
    let _slow = SlowEvents::install(&ns, Duration::from_secs(1)).await;

    let pid = wh.pid().to_string();
    kubectl_ok(&["cordon", node]);
    wait_deployment(&ns, "fl", 2, true, Duration::from_secs(30)).await;
    // Read in process, not by kubectl (whose start alone may take most of
    // the Event's 1 s on a loaded machine), so the signal follows at once.
    let events: Api<k8s_openapi::api::events::v1::Event> = ns.api();
    let before = events
        .list(&Default::default())
        .await
        .expect("list Events")
        .items
        .iter()
        .filter(|e| e.reason.as_deref() == Some("SurgeStarted"))
        .count();
    assert_eq!(
        before, 0,
        "the Event was sent before the signal: this run cannot tell"
    );
    let signalled = std::time::Instant::now();
    signal(&pid, "TERM");
    wait_for("the server gone", Duration::from_secs(15), || async {
        (!signal(&pid, "0")).then_some(())
    })
    .await;
    let exited = signalled.elapsed();
    let sent = event_count(&ns.name, "SurgeStarted");
    let _ = restart_server(&[]);
    assert_eq!(
        sent, 1,
        "the SurgeStarted Event owed at SIGTERM (the server exited {exited:?} after it)"
    );
}
