//! The EvictionAutoScaler CRD deleted while a surge is in place (an
//! uninstall that deletes the CRD before the server, or a mistake): the
//! EvictionAutoScaler watch fails for good and its store goes stale. The
//! webhook fails open and /readyz says why, but the surge worker does not
//! read that store to revert (the baseline is in the Deployment's markers),
//! so the surge still returns to its baseline. With the CRD back, the
//! product recovers by itself.

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::PostParams;
use kube::Api;

use crate::fleet::https_get;
use crate::support::*;

const CRD: &str = "evictionautoscalers.eviction-autoscaler.azure.com";

/// Puts the CRD back however the test ends: the tests after this one need it.
struct CrdBack;

impl Drop for CrdBack {
    fn drop(&mut self) {
        let crd = repo().join("manifests/crd.yaml");
        let _ = kubectl(&["apply", "-f", &path_str(&crd)]);
        let _ = kubectl(&[
            "wait",
            "--for=condition=Established",
            &format!("crd/{CRD}"),
            "--timeout=60s",
        ]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn crd_deleted_mid_surge_the_surge_is_still_reverted() {
    let _g = nodes_lock().await;
    let wh = restart_server(&[("WATCH_STALE_AFTER", "5s")]);
    let ca = wh.state.join("ca.crt");
    let readyz = || https_get(&ca, wh.port, "/readyz");
    let ns = TestNs::new("chaos-crd").await;
    let deps: Api<Deployment> = ns.api();
    let d = rolling_max_surge(
        deployment("crdd", 3, Some("kwok-node-1")),
        IntOrString::String("100%".into()),
    );
    deps.create(&PostParams::default(), &d)
        .await
        .expect("create");
    let pods = wait_ready(&ns, "crdd", 3).await;
    let on_node = nodes_of(&pods)
        .iter()
        .filter(|n| *n == "kwok-node-1")
        .count() as i32;
    assert!(on_node > 0, "pods prefer kwok-node-1");
    wait_pdb_blocking(&ns, "crdd", 3).await;
    wait_for(
        "the EvictionAutoScaler of crdd",
        Duration::from_secs(30),
        || async { (!eviction_autoscalers(&ns.name).is_empty()).then_some(()) },
    )
    .await;

    // The cordon is the signal: the surge starts.
    kubectl_ok(&["cordon", "kwok-node-1"]);
    wait_deployment(&ns, "crdd", 3 + on_node, true, Duration::from_secs(30)).await;

    let back = CrdBack;
    kubectl_ok(&["delete", "crd", CRD, "--timeout=60s"]);
    let (_, why) = wait_for(
        "/readyz to report the EvictionAutoScaler store stale",
        Duration::from_secs(60),
        || async {
            let (code, body) = readyz();
            (code == 503 && body.contains("evictionautoscalers")).then_some((code, body))
        },
    )
    .await;

    // The drain is over: the surge goes back to the baseline while the CRD
    // is still gone (cooldown 5 s in e2e).
    uncordon("kwok-node-1");
    wait_deployment(&ns, "crdd", 3, false, Duration::from_secs(60)).await;
    let crd_absent = !kubectl(&["get", "crd", CRD]).status.success();
    let still_unready = readyz().0 == 503;

    drop(back);
    wait_for(
        "/readyz 200 with the CRD back",
        Duration::from_secs(60),
        || async { (readyz().0 == 200).then_some(()) },
    )
    .await;
    wait_for(
        "the EvictionAutoScaler of crdd again",
        Duration::from_secs(60),
        || async {
            // Not kubectl_ok: the API may take a moment to be served again.
            let out = kubectl(&["get", "evictionautoscalers", "-n", &ns.name, "-o", "name"]);
            (out.status.success() && !out.stdout.is_empty()).then_some(())
        },
    )
    .await;
    assert_settled_at(&ns, "crdd", 3, Duration::from_secs(30)).await;
    let started = event_total(&ns.name, "SurgeStarted");
    let reverted = event_total(&ns.name, "SurgeReverted");
    record_figure(format!(
        "EvictionAutoScaler CRD deleted mid-surge: reverted to 3 with the CRD gone (/readyz said: {}), recovered once it was back; SurgeStarted {started}, SurgeReverted {reverted}",
        why.trim().replace('\n', "; ")
    ));
    assert!(
        crd_absent && still_unready,
        "the revert happened while the CRD was gone (absent {crd_absent}, unready {still_unready})"
    );
    assert_eq!((started, reverted), (1, 1), "{}", event_log(&ns.name));
}
