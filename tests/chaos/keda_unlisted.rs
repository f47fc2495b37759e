//! KEDA's API served, but the product cannot list ScaledObjects (its
//! ClusterRole lost the `keda.sh` rule: an RBAC from before KEDA support,
//! or a hand-trimmed one). Two surges are in place when that server starts:
//! one on a plain Deployment, one through a ScaledObject whose Deployment
//! is under KEDA's HPA. /readyz names the ScaledObject store; the plain
//! surge is still reverted once the drain is over (a watch the product
//! cannot list must not strand every surge); the KEDA one is left exactly as
//! it is (raising or reverting that Deployment beside KEDA would fight it)
//! until the rule is back, and then reverted too.

use std::time::{Duration, Instant};

use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::rbac::v1::ClusterRole;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{DynamicObject, PostParams};
use kube::Api;

use crate::crd_deleted::InPlaceOfShared;
use crate::fleet::{blocked_on_node, https_get};
use crate::keda_removed::server_with_keda;
use crate::support::*;

const ROLE: &str = "eviction-autoscaler";

/// The ScaledObject's minReplicaCount and whether both surge markers are on it.
async fn so_state(sos: &Api<DynamicObject>, name: &str) -> Option<(i64, Option<bool>)> {
    let so = sos.get(name).await.ok()?;
    let min = so.data["spec"]["minReplicaCount"].as_i64()?;
    Some((min, markers_present(so.metadata.annotations.as_ref())))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn scaled_objects_it_cannot_list_hold_only_the_keda_surge() {
    let _g = nodes_lock().await;
    let _rbac = ApplyOnDrop::manifest("manifests/rbac.yaml");
    let wh = server_with_keda().await;
    let ns = TestNs::new("chaos-kedarbac").await;
    let node = "kwok-node-1";

    // kk: a ScaledObject (minimum 3) and KEDA's HPA over Deployment kk, as
    // KEDA's operator makes it (controlled by the ScaledObject). No KEDA
    // operator runs here; the HPA controller has no metrics and leaves kk's
    // replicas alone between its minimum and maximum.
    let sos = create_scaled_object(&ns, "kk", 3).await;
    let so_uid = sos
        .get("kk")
        .await
        .expect("read ScaledObject kk")
        .metadata
        .uid
        .expect("uid");
    let mut kedas = hpa("keda-hpa-kk", "kk", 3);
    kedas.metadata.owner_references = Some(vec![OwnerReference {
        api_version: "keda.sh/v1alpha1".into(),
        kind: "ScaledObject".into(),
        name: "kk".into(),
        uid: so_uid,
        controller: Some(true),
        block_owner_deletion: Some(true),
    }]);
    let hpas: Api<HorizontalPodAutoscaler> = ns.api();
    hpas.create(&PostParams::default(), &kedas)
        .await
        .expect("create KEDA's HPA");
    let kk_on = blocked_on_node(&ns, "kk", node).await.len() as i32;
    let plain_on = blocked_on_node(&ns, "plain", node).await.len() as i32;

    // The cordon surges both: plain's replicas; kk's ScaledObject minimum
    // and its replicas.
    kubectl_ok(&["cordon", node]);
    wait_deployment(&ns, "plain", 3 + plain_on, true, Duration::from_secs(30)).await;
    let (kk_min, _) = wait_for(
        "ScaledObject kk's minimum raised with markers",
        Duration::from_secs(30),
        || async {
            so_state(&sos, "kk")
                .await
                .filter(|(m, k)| *m > 3 && *k == Some(true))
        },
    )
    .await;
    wait_deployment(&ns, "kk", 3 + kk_on, true, Duration::from_secs(30)).await;
    let (kk_replicas, _) = deployment_state(&ns, "kk").await;

    // The ClusterRole loses its keda.sh rule; a new server starts with it
    // (not through deploy-local.sh, which applies the shipped RBAC).
    stop_server();
    let roles: Api<ClusterRole> = Api::all(ns.client.clone());
    let mut role = roles.get(ROLE).await.expect("read the ClusterRole");
    let before = role.rules.as_ref().map_or(0, Vec::len);
    if let Some(rules) = role.rules.as_mut() {
        rules.retain(|r| !r.api_groups.iter().flatten().any(|g| g == "keda.sh"));
    }
    assert_eq!(
        role.rules.as_ref().map_or(0, Vec::len),
        before - 1,
        "one keda.sh rule"
    );
    roles
        .replace(ROLE, &PostParams::default(), &role)
        .await
        .expect("replace the ClusterRole");
    let settings = [
        ("WATCH_STALE_AFTER", "5s"),
        ("COOLDOWN", "5s"),
        ("PDB_CREATE", "true"),
    ];
    let (child, port, log) = wh.spawn_extra("keda-r2", &settings);
    let _r2 = InPlaceOfShared(child);
    let log = || std::fs::read_to_string(&log).unwrap_or_default();
    let ca = wh.state.join("ca.crt");
    let (_, why) = wait_for(
        "/readyz to name the ScaledObjects it cannot list",
        Duration::from_secs(30),
        || async {
            let (code, body) = https_get(&ca, port, "/readyz");
            (code == 503
                && body.contains("scaledobjects: not listed yet")
                && body.contains("forbidden"))
            .then_some((code, body))
        },
    )
    .await;

    // The doctor, run as the operator, names what the account lacks.
    let doctor = std::process::Command::new(env!("CARGO_BIN_EXE_eviction-autoscaler"))
        .arg("doctor")
        .env("KUBECONFIG", cluster_dir().join("kubeconfig"))
        .output()
        .expect("run doctor");
    let doctor = String::from_utf8_lossy(&doctor.stdout).to_string();
    let lacks = doctor
        .lines()
        .find(|l| l.contains("lacks:"))
        .unwrap_or_default()
        .to_string();
    assert!(
        lacks.contains("watch scaledobjects") && lacks.contains("patch scaledobjects"),
        "the doctor did not name the missing rule: {doctor}"
    );

    // The drain is over. plain goes back to 3; kk stays as it is.
    uncordon(node);
    let over = Instant::now();
    wait_deployment(&ns, "plain", 3, false, Duration::from_secs(60)).await;
    let plain_back = over.elapsed();
    tokio::time::sleep(Duration::from_secs(8)).await;
    let kk_held = (
        so_state(&sos, "kk").await,
        deployment_state(&ns, "kk").await,
    );
    assert_eq!(
        kk_held,
        (Some((kk_min, Some(true))), (kk_replicas, Some(true))),
        "kk's surge was changed while its ScaledObject was unknown"
    );
    let logged = log().contains("Deployments under KEDA's HPAs are not surged or reverted");

    // The rule is back: the watch lists, kk is reverted too.
    let rbac = repo().join("manifests/rbac.yaml");
    kubectl_ok(&["apply", "-f", &path_str(&rbac)]);
    let back = Instant::now();
    wait_for(
        "ScaledObject kk back at 3 without markers",
        Duration::from_secs(60),
        || async { (so_state(&sos, "kk").await == Some((3, Some(false)))).then_some(()) },
    )
    .await;
    assert_settled_at(&ns, "kk", 3, Duration::from_secs(60)).await;
    let kk_back = back.elapsed();
    wait_for("/readyz 200", Duration::from_secs(30), || async {
        (https_get(&ca, port, "/readyz").0 == 200).then_some(())
    })
    .await;
    assert_settled_at(&ns, "plain", 3, Duration::from_secs(10)).await;
    let started = event_total(&ns.name, "SurgeStarted");
    let reverted = event_total(&ns.name, "SurgeReverted");
    record_figure(format!(
        "ScaledObjects unlistable (keda.sh rule removed, /readyz said: {}; doctor: {}): plain reverted {:.1} s after the uncordon; kk held at minReplicaCount {kk_min}, replicas {kk_replicas}; reverted {:.1} s after the rule was back; SurgeStarted {started}, SurgeReverted {reverted}",
        why.trim().replace('\n', "; "),
        lacks.trim(),
        plain_back.as_secs_f64(),
        kk_back.as_secs_f64()
    ));
    assert!(logged, "no WARN naming what waits: {}", log());
    assert_eq!((started, reverted), (2, 2), "{}", event_log(&ns.name));
}
