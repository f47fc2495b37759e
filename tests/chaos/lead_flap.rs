//! A lead lost and taken back with no other leader between (an apiserver
//! brownout longer than the renew deadline): the surge's cooldown goes on
//! from its last signal. Before, each new lead gave every surge in place a
//! whole cooldown again, so brownouts shorter than the cooldown apart kept
//! surges in place for as long as they lasted.

use std::time::{Duration, Instant};

use k8s_openapi::jiff::Timestamp;
use kube::api::EvictParams;

use crate::fleet::*;
use crate::proxy::{Mode, TcpProxy};
use crate::support::*;

const COOLDOWN: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_lead_taken_back_in_its_own_name_keeps_the_cooldown_going() {
    let _g = nodes_lock().await;
    let wh = WebhookInfo::get();
    stop_server();
    let client = client().await;
    let link = TcpProxy::start(vec![crate::slow_apiserver::apiserver_addr()]);
    let mut spec = ReplicaSpec::from_deployed(wh);
    spec.kubeconfig = crate::slow_apiserver::proxied_kubeconfig(&spec, link.port);
    spec.env.retain(|(k, _)| k != "COOLDOWN");
    spec.env
        .push(("COOLDOWN".into(), format!("{}s", COOLDOWN.as_secs())));
    // Answered at once: a held eviction would be let through once the surge
    // made room, and this test wants the one refusal as its signal.
    spec.env.push(("EVICTION_HOLD".into(), "0".into()));
    let flap = start_leading(&client, &spec, "flap-r").await;
    register_webhooks(wh, flap.port);

    let ns = TestNs::new("chaos-flap").await;
    blocked_on_node(&ns, "fl", "kwok-node-0").await;
    let victim = a_ready_pod(&ns, "fl").await;
    // The one signal: the cooldown counts from the webhook's 429. Until the
    // apiserver calls this replica (its webhook configuration just changed)
    // the apiserver answers the 429 itself, which signals nothing.
    let pods = pods_without_retry(&ns).await;
    let answered = |log: &str| {
        log.lines()
            .any(|l| l.contains("answered 429") && l.contains(ns.name.as_str()))
    };
    let signalled = wait_for(
        "a 429 from this replica's webhook",
        Duration::from_secs(30),
        || async {
            match pods.evict(&victim, &EvictParams::default()).await {
                Err(kube::Error::Api(e)) if e.code == 429 => {}
                other => panic!("the budget allows nothing at 3: want a 429, got {other:?}"),
            }
            if answered(&flap.log()) {
                return Some(Instant::now());
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
            None
        },
    )
    .await;
    wait_surged_above(&ns, "fl", 3, "the eviction's signal").await;

    // A brownout for the product alone, past the renew deadline (10 s).
    tokio::time::sleep(Duration::from_secs(1)).await;
    let held_wall = Timestamp::now();
    link.set_mode(Mode::Hold);
    wait_for(
        "the held leader stepping down",
        Duration::from_secs(20),
        || async { leadership_logged(&flap.log(), false, held_wall).map(|_| ()) },
    )
    .await;
    link.set_mode(Mode::Forward);
    wait_for("the lead taken back", Duration::from_secs(20), || async {
        leadership_logged(&flap.log(), true, held_wall).map(|_| ())
    })
    .await;
    let (holder, _) = lease(&client).await;
    assert_eq!(holder, flap.name, "no other replica held the Lease");
    let retaken_after = signalled.elapsed();

    wait_deployment(&ns, "fl", 3, false, Duration::from_secs(60)).await;
    let reverted_after = signalled.elapsed();
    record_figure(format!(
        "lead lost and taken back in its own name {:.1}s after the signal (cooldown {}s): surge reverted {:.1}s after the signal",
        retaken_after.as_secs_f64(),
        COOLDOWN.as_secs(),
        reverted_after.as_secs_f64()
    ));
    let log = tail(&flap.log(), 30);
    drop(flap);
    drop(link);
    let _ = restart_server(&[]);
    // Due at the cooldown after the signal; a new cooldown from the lead's
    // return would put it past retaken + COOLDOWN.
    assert!(
        retaken_after + Duration::from_secs(5) < COOLDOWN,
        "the lead came back too late for the test to tell: {retaken_after:?}"
    );
    assert!(
        reverted_after < retaken_after + COOLDOWN - Duration::from_secs(3),
        "reverted {reverted_after:?} after the signal, a cooldown from the lead's return \
         ({retaken_after:?}):\n{log}"
    );
}

/// A leader whose watch caches stop working while its Lease still renews
/// (its ClusterRoleBinding deleted: the Lease goes through the namespace's
/// Role) would hold the Lease and do nothing, its surges stranded, while
/// another replica with working caches waits. It releases the Lease once
/// its caches have been unusable for `WATCH_STALE_AFTER` more, the other
/// takes over, and it does not take the Lease back while they stay so.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_leader_whose_caches_fail_hands_the_lease_to_a_working_replica() {
    let _g = nodes_lock().await;
    let wh = WebhookInfo::get();
    stop_server();
    let client = client().await;
    let mut spec = ReplicaSpec::from_deployed(wh);
    spec.env.push(("WATCH_STALE_AFTER".into(), "5s".into()));
    // The other replica runs as the cluster's admin: RBAC taken from the
    // ServiceAccount leaves it working.
    let mut admin_spec = spec.clone();
    admin_spec.kubeconfig = cluster_dir().join("kubeconfig");
    let blind = start_leading(&client, &spec, "blind-r").await;
    let sighted = Replica::start(&admin_spec, "sighted-r");
    sighted.wait_ready(Duration::from_secs(30));
    // A surge of the blind leader's in place across the hand-over: its
    // node stays cordoned until the other replica leads, which must then
    // take it back to its baseline (invariant 1).
    let ns = TestNs::new("chaos-blind").await;
    blocked_on_node(&ns, "bl", "kwok-node-0").await;
    let _uncordon = UncordonOnDrop("kwok-node-0");
    kubectl_ok(&["cordon", "kwok-node-0"]);
    wait_surged_above(&ns, "bl", 3, "the cordon, by the blind leader").await;

    let _restore = ApplyOnDrop::manifest("manifests/rbac.yaml");
    let revoked = Instant::now();
    kubectl_ok(&["delete", "clusterrolebinding", "eviction-autoscaler"]);
    // Its watches fail as each is opened again (the apiserver ends each
    // after 60 s); then 5 s to stale, 5 s more before it lets go.
    let took_over = wait_leader(
        &client,
        std::slice::from_ref(&sighted.name),
        Duration::from_secs(120),
    )
    .await;
    let handed_after = revoked.elapsed();
    // Still blind: it stays out.
    let mut holders = Vec::new();
    for _ in 0..20 {
        holders.push(lease(&client).await.0);
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let surged_at_handover = deployment_state(&ns, "bl").await;
    uncordon("kwok-node-0");
    // Back at 3 without markers, by the replica that leads now.
    wait_deployment(&ns, "bl", 3, false, Duration::from_secs(60)).await;
    let full_log = blind.log();
    let blind_log = tail(&full_log, 15);
    let said_why = full_log.contains("releasing the Lease");
    record_figure(format!(
        "leader's ClusterRoleBinding deleted (its Lease still renewable): Lease handed to the other replica {:.1}s after",
        handed_after.as_secs_f64()
    ));
    drop(blind);
    drop(sighted);
    drop(_restore);
    let _ = restart_server(&[]);
    assert_eq!(took_over, "sighted-r");
    assert!(
        surged_at_handover.0 > 3 && surged_at_handover.1 == Some(true),
        "the surge was in place at the hand-over: {surged_at_handover:?}"
    );
    assert!(
        holders.iter().all(|h| h == "sighted-r"),
        "the blind replica took the Lease back: {holders:?}\n{blind_log}"
    );
    assert!(
        said_why,
        "the blind leader said why it let go:\n{blind_log}"
    );
}
