//! The EvictionAutoScaler CRD deleted while a surge is in place (an
//! uninstall that deletes the CRD before the server, or a mistake): the
//! EvictionAutoScaler watch fails for good and its store goes stale. The
//! webhook fails open and /readyz says why, but the surge worker does not
//! read that store to revert (the baseline is in the Deployment's markers),
//! so the surge still returns to its baseline; and again across a restart
//! while the CRD is gone (that store then never lists). With the CRD back,
//! the product recovers by itself.

use std::time::Duration;

use crate::fleet::{blocked_on_node, https_get};
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
    let on_node = blocked_on_node(&ns, "crdd", "kwok-node-1").await.len() as i32;
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

    // Again, with a restart at that step: a surge in place, the server
    // stopped and a new one started while the CRD is still gone. Its
    // EvictionAutoScaler store never lists; it must revert all the same.
    // The scale-back kept the surge pods, elsewhere: cordon where they are.
    let mut held = nodes_of(&wait_ready(&ns, "crdd", 3).await);
    held.sort();
    held.dedup();
    for n in &held {
        kubectl_ok(&["cordon", n]);
    }
    wait_deployment(&ns, "crdd", 6, true, Duration::from_secs(30)).await;
    stop_server();
    let settings = [("WATCH_STALE_AFTER", "5s"), ("COOLDOWN", "5s")];
    let (child, port, _log) = wh.spawn_extra("crd-r2", &settings);
    let r2 = InPlaceOfShared(child);
    let readyz2 = || https_get(&ca, port, "/readyz");
    let (_, why2) = wait_for(
        "the new server to say the EvictionAutoScaler store has not listed",
        Duration::from_secs(30),
        || async {
            let (code, body) = readyz2();
            (code == 503 && body.contains("evictionautoscalers: not listed yet"))
                .then_some((code, body))
        },
    )
    .await;
    for n in &held {
        uncordon(n);
    }
    wait_for(
        "the restarted server to revert to 3 with the CRD gone",
        Duration::from_secs(60),
        || async { (deployment_state(&ns, "crdd").await == (3, Some(false))).then_some(()) },
    )
    .await;
    let crd_absent_2 = !kubectl(&["get", "crd", CRD]).status.success();

    drop(back);
    wait_for(
        "/readyz 200 with the CRD back",
        Duration::from_secs(60),
        || async { (readyz2().0 == 200).then_some(()) },
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
    drop(r2);
    let started = event_total(&ns.name, "SurgeStarted");
    let reverted = event_total(&ns.name, "SurgeReverted");
    record_figure(format!(
        "EvictionAutoScaler CRD deleted mid-surge: reverted to 3 with the CRD gone (/readyz said: {}); again across a restart with the CRD gone (/readyz said: {}); recovered once it was back; SurgeStarted {started}, SurgeReverted {reverted}",
        why.trim().replace('\n', "; "),
        why2.trim().replace('\n', "; ")
    ));
    assert!(
        crd_absent && still_unready && crd_absent_2,
        "the reverts happened while the CRD was gone (absent {crd_absent} and {crd_absent_2}, unready {still_unready})"
    );
    assert_eq!((started, reverted), (2, 2), "{}", event_log(&ns.name));
}

/// A server process of the test's own in place of the shared one (which
/// the tests after this one use): stopped, and the shared one started
/// again, however the test ends.
struct InPlaceOfShared(std::process::Child);

impl Drop for InPlaceOfShared {
    fn drop(&mut self) {
        terminate(&mut self.0);
        let _ = restart_server(&[]);
    }
}
