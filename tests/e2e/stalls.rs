//! Nothing stalls (behaviour.md section 8, invariant 5): an Events API that
//! answers slowly costs the controllers nothing. A validating webhook on
//! Events in the test's namespace points at a port that never answers, so
//! the apiserver spends its `timeoutSeconds` on every Event created there
//! (then lets it through: failurePolicy Ignore). The surge worker used to
//! send its Events one after another after each pass and plan nothing
//! meanwhile: 8 surges meant 8 slow Events before the next surge.

use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, PostParams};
use serde_json::json;

use crate::support::*;

/// The black hole's timeoutSeconds: each Event in the namespace takes this long.
const EVENT_DELAY: Duration = Duration::from_secs(3);
/// Deployments surged by the first cordon: their Events alone kept the old
/// worker busy 8 x 3 s.
const FIRST: usize = 8;

/// A ValidatingWebhookConfiguration on Events of one namespace, pointing at
/// a port that accepts connections and never answers; deleted on drop.
struct SlowEvents {
    name: String,
    _hole: std::net::TcpListener,
}

impl SlowEvents {
    fn install(ns: &str) -> SlowEvents {
        // Bound and never accepted: the kernel completes the TCP handshake
        // (backlog), the TLS handshake never comes.
        let hole = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = hole.local_addr().expect("addr").port();
        let name = format!("e2e-slow-events-{ns}");
        let config = json!({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": name},
            "webhooks": [{
                "name": "slow-events.e2e.local",
                "clientConfig": {"url": format!("https://127.0.0.1:{port}/")},
                "rules": [{
                    "apiGroups": ["", "events.k8s.io"], "apiVersions": ["v1"],
                    "operations": ["CREATE", "UPDATE"], "resources": ["events"]
                }],
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}},
                "failurePolicy": "Ignore",
                "sideEffects": "None",
                "admissionReviewVersions": ["v1"],
                "timeoutSeconds": EVENT_DELAY.as_secs()
            }]
        });
        let path = std::env::temp_dir().join(format!("{name}.json"));
        std::fs::write(&path, config.to_string()).expect("write webhook config");
        kubectl_ok(&["apply", "-f", &path_str(&path)]);
        SlowEvents { name, _hole: hole }
    }
}

impl Drop for SlowEvents {
    fn drop(&mut self) {
        let _ = kubectl(&[
            "delete",
            "validatingwebhookconfiguration",
            &self.name,
            "--ignore-not-found",
        ]);
    }
}

/// Creates an Event in `ns` and returns how long the apiserver took.
async fn time_one_event(ns: &TestNs, n: usize) -> Duration {
    let api: Api<Event> = ns.api();
    let ev = Event {
        metadata: ObjectMeta {
            name: Some(format!("probe-{n}")),
            ..Default::default()
        },
        event_time: Some(MicroTime(k8s_openapi::jiff::Timestamp::now())),
        regarding: Some(ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Pod".into()),
            name: Some("probe".into()),
            namespace: Some(ns.name.clone()),
            ..Default::default()
        }),
        reporting_controller: Some("e2e/probe".into()),
        reporting_instance: Some("e2e".into()),
        action: Some("Probe".into()),
        reason: Some("Probe".into()),
        type_: Some("Normal".into()),
        ..Default::default()
    };
    let t = Instant::now();
    api.create(&PostParams::default(), &ev)
        .await
        .expect("create probe Event");
    t.elapsed()
}

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
    let _slow = SlowEvents::install(&ns.name);
    let mut took = Duration::ZERO;
    for n in 0..20 {
        took = time_one_event(&ns, n).await;
        if took >= EVENT_DELAY - Duration::from_millis(500) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(
        took >= EVENT_DELAY - Duration::from_millis(500),
        "the webhook on Events does not slow them: {took:?}"
    );

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
