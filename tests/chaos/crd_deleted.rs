//! The EvictionAutoScaler CRD deleted while a surge is in place (an
//! uninstall that deletes the CRD before the server, or a mistake): the
//! EvictionAutoScaler watch fails for good and its store goes stale. The
//! webhook fails open and /readyz says why, but the surge worker does not
//! read that store to revert (the baseline is in the Deployment's markers),
//! so the surge still returns to its baseline; and again across a restart
//! while the CRD is gone (that store then never lists). The reconciler does
//! not wait on that store either: a user's PDB that comes meanwhile makes
//! ours step aside (never two PDBs over one pod), and ours is made again
//! when it goes. With the CRD back, the product recovers by itself.

use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{DeleteParams, PostParams};
use kube::Api;

use crate::fleet::{blocked_on_node, https_get};
use crate::support::*;

const CRD: &str = "evictionautoscalers.eviction-autoscaler.azure.com";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn crd_deleted_mid_surge_the_surge_is_still_reverted() {
    let _g = nodes_lock().await;
    let wh = restart_server(&[("WATCH_STALE_AFTER", "5s")]);
    let ca = wh.state.join("ca.crt");
    let readyz = || https_get(&ca, wh.port, "/readyz");
    let ns = TestNs::new("chaos-crd").await;
    let on_node = blocked_on_node(&ns, "crdd", "kwok-node-1").await.len() as i32;
    // crdq, with a PDB of ours made while the CRD is there, on a node the
    // first cordon leaves alone.
    let q = TestNs::new("chaos-crdq").await;
    crdq_with_ours(&q).await;
    wait_for(
        "the EvictionAutoScaler of crdd",
        Duration::from_secs(30),
        || async { (!eviction_autoscalers(&ns.name).is_empty()).then_some(()) },
    )
    .await;

    // The cordon is the signal: the surge starts.
    kubectl_ok(&["cordon", "kwok-node-1"]);
    wait_deployment(&ns, "crdd", 3 + on_node, true, Duration::from_secs(30)).await;

    let back = ApplyOnDrop::crd("manifests/crd.yaml", CRD);
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

    // One PDB per pod while the CRD is gone: a user's PDB comes over the
    // pods of a Deployment that has ours, and ours steps aside.
    let stepped_aside = user_pdb_steps_ours_aside(&q).await;
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
    let settings = [
        ("WATCH_STALE_AFTER", "5s"),
        ("COOLDOWN", "5s"),
        ("PDB_CREATE", "true"),
    ];
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
    // The new server, whose EvictionAutoScaler store never listed, keeps
    // the PDBs too: the user's PDB goes and ours is made again.
    let pdbs: Api<PodDisruptionBudget> = q.api();
    pdbs.delete(USER_PDB, &DeleteParams::default())
        .await
        .expect("delete the user's PDB");
    let remade = Instant::now();
    wait_pdb(&q, "crdq", "ours made again with the CRD gone", |p| {
        is_owned(p)
            && p.spec.as_ref().and_then(|s| s.min_available.clone()) == Some(IntOrString::Int(2))
    })
    .await;
    let remade = remade.elapsed();
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
    wait_for(
        "the EvictionAutoScaler of crdq, made once the CRD is back",
        Duration::from_secs(60),
        || async {
            eviction_autoscalers(&q.name)
                .contains(&"crdq".to_string())
                .then_some(())
        },
    )
    .await;
    drop(r2);
    let started = event_total(&ns.name, "SurgeStarted");
    let reverted = event_total(&ns.name, "SurgeReverted");
    record_figure(format!(
        "EvictionAutoScaler CRD deleted mid-surge: reverted to 3 with the CRD gone (/readyz said: {}); ours stepped aside for a user's PDB {:.1} s after it came, and was made again {:.1} s after it went (restarted server); again across a restart with the CRD gone (/readyz said: {}); recovered once it was back; SurgeStarted {started}, SurgeReverted {reverted}",
        why.trim().replace('\n', "; "),
        stepped_aside.as_secs_f64(),
        remade.as_secs_f64(),
        why2.trim().replace('\n', "; ")
    ));
    assert!(
        crd_absent && still_unready && crd_absent_2,
        "the reverts happened while the CRD was gone (absent {crd_absent} and {crd_absent_2}, unready {still_unready})"
    );
    assert_eq!((started, reverted), (2, 2), "{}", event_log(&ns.name));
}

const USER_PDB: &str = "team";

/// Deployment crdq: 2 replicas on kwok-node-2, with our PDB.
async fn crdq_with_ours(q: &TestNs) {
    let deps: Api<Deployment> = q.api();
    let d = pinned_to(deployment("crdq", 2, None), "kwok-node-2");
    deps.create(&PostParams::default(), &d)
        .await
        .expect("create Deployment crdq");
    wait_ready(q, "crdq", 2).await;
    wait_pdb(q, "crdq", "our PDB for crdq", is_owned).await;
}

/// A user's PDB over crdq's pods: returns how long both stood before ours
/// went. The user's PDB allows 2 of 2 unavailable, so no cordon of this
/// test surges crdq, and it is never modified.
async fn user_pdb_steps_ours_aside(q: &TestNs) -> Duration {
    let theirs = user_pdb(USER_PDB, "crdq", None, Some(IntOrString::Int(2)));
    let pdbs: Api<PodDisruptionBudget> = q.api();
    pdbs.create(&PostParams::default(), &theirs)
        .await
        .expect("create the user's PDB");
    let came = Instant::now();
    wait_gone(
        &pdbs,
        "crdq",
        "our PDB for crdq to step aside with the CRD gone",
        Duration::from_secs(30),
    )
    .await;
    let both = came.elapsed();
    let after = pdbs.get(USER_PDB).await.expect("read the user's PDB");
    assert!(
        !is_owned(&after) && after.metadata.owner_references.is_none() && after.spec == theirs.spec,
        "the user's PDB was modified: {after:?}"
    );
    both
}

/// A server process of the test's own in place of the shared one (which
/// the tests after this one use): stopped, and the shared one started
/// again, however the test ends.
pub(crate) struct InPlaceOfShared(pub(crate) std::process::Child);

impl Drop for InPlaceOfShared {
    fn drop(&mut self) {
        terminate(&mut self.0);
        let _ = restart_server(&[]);
    }
}
