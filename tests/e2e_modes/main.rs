//! End-to-end tests that restart or reconfigure the server, so they run one
//! at a time after the main suite (`make e2e`): opt-out mode, Deployments
//! that existed before start-up, a SIGKILL during a surge, and leader
//! election between two replicas, and a follower's blocked eviction
//! reaching the leader.

mod events;
mod rbac;
mod remade;
#[path = "../e2e/support.rs"]
mod support;
mod surge_upgrade;
mod uninstall;
mod webhook_safety;

use std::process::Command;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::{Deployment, DeploymentStrategy, RollingUpdateDeployment};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{Patch, PatchParams, PostParams};
use kube::Api;
use serde_json::json;

use support::*;

async fn pdb_exists(ns: &TestNs, name: &str) -> bool {
    let api: Api<PodDisruptionBudget> = ns.api();
    api.get_opt(name).await.ok().flatten().is_some()
}

/// Issue "owned PDBs" scenario 2: Deployments made while the product was
/// down get their PDBs within seconds of its start.
#[tokio::test]
async fn preexisting_deployments_get_pdbs_at_start() {
    let _g = nodes_lock().await;
    let _ = restart_server(&[]);
    let ns = TestNs::new("e2e-pre").await;
    stop_server();
    let deps: Api<Deployment> = ns.api();
    deps.create(&PostParams::default(), &deployment("old", 2, None))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(
        !pdb_exists(&ns, "old").await,
        "no PDB while the product is down"
    );
    let started = Instant::now();
    let _ = restart_server(&[]);
    wait_for(
        "PDB for the pre-existing Deployment",
        Duration::from_secs(30),
        || async { pdb_exists(&ns, "old").await.then_some(()) },
    )
    .await;
    record_figure(format!(
        "pre-existing Deployment: PDB {:.1}s after `deploy-local.sh start` returned",
        started.elapsed().as_secs_f64()
    ));
}

/// Issue "owned PDBs" scenario 8, opt-out mode (ENABLED_BY_DEFAULT=true).
#[tokio::test]
async fn opt_out_mode_mirrors_opt_in() {
    let _g = nodes_lock().await;
    let _ = restart_server(&[("ENABLED_BY_DEFAULT", "true")]);
    let ns = TestNs::with_annotations("e2e-optout", &[]).await;
    let deps: Api<Deployment> = ns.api();
    deps.create(&PostParams::default(), &deployment("w", 2, None))
        .await
        .unwrap();
    wait_for(
        "PDB in an unannotated namespace",
        Duration::from_secs(30),
        || async { pdb_exists(&ns, "w").await.then_some(()) },
    )
    .await;
    let nss: Api<Namespace> = Api::all(ns.client.clone());
    let set = |v: serde_json::Value| json!({"metadata": {"annotations": {"eviction-autoscaler.azure.com/enable": v}}});
    nss.patch(
        &ns.name,
        &PatchParams::default(),
        &Patch::Merge(&set(json!("false"))),
    )
    .await
    .unwrap();
    wait_for(
        "our PDB removed after opting out",
        Duration::from_secs(30),
        || async { (!pdb_exists(&ns, "w").await).then_some(()) },
    )
    .await;
    nss.patch(
        &ns.name,
        &PatchParams::default(),
        &Patch::Merge(&set(serde_json::Value::Null)),
    )
    .await
    .unwrap();
    wait_for(
        "PDB recreated when the annotation is removed",
        Duration::from_secs(30),
        || async { pdb_exists(&ns, "w").await.then_some(()) },
    )
    .await;
    let _ = restart_server(&[]);
}

/// Issue "surge" scenario 9: SIGKILL during a surge; the restarted server
/// resumes from the markers and restores the original count exactly once.
#[tokio::test]
async fn sigkill_during_surge_resumes_from_markers() {
    let _g = nodes_lock().await;
    let wh = restart_server(&[]);
    let ns = TestNs::new("e2e-kill").await;
    let deps: Api<Deployment> = ns.api();
    let mut d = deployment("k", 3, Some("kwok-node-0"));
    if let Some(spec) = d.spec.as_mut() {
        spec.strategy = Some(DeploymentStrategy {
            type_: Some("RollingUpdate".into()),
            rolling_update: Some(RollingUpdateDeployment {
                max_surge: Some(IntOrString::String("100%".into())),
                max_unavailable: Some(IntOrString::Int(0)),
            }),
        });
    }
    deps.create(&PostParams::default(), &d).await.unwrap();
    let pods = wait_ready(&ns, "k", 3).await;
    let on_node = nodes_of(&pods)
        .iter()
        .filter(|n| *n == "kwok-node-0")
        .count() as i32;
    assert!(on_node > 0);
    wait_pdb(&ns, "k", "blocked", |p| {
        p.status
            .as_ref()
            .is_some_and(|s| s.current_healthy == 3 && s.disruptions_allowed == 0)
    })
    .await;
    kubectl_ok(&["cordon", "kwok-node-0"]);
    let replicas = |d: Deployment| {
        let a = d.metadata.annotations.clone().unwrap_or_default();
        (
            d.spec.and_then(|s| s.replicas).unwrap_or(1),
            a.contains_key("evictionSurgeReplicas"),
        )
    };
    wait_for("surge with markers", Duration::from_secs(20), || async {
        let (r, m) = replicas(deps.get("k").await.ok()?);
        (r == 3 + on_node && m).then_some(())
    })
    .await;
    // Its Event is sent after the write, off the worker's loop: a SIGKILL
    // right after the write would lose it, and the count below tells a
    // second surge by it.
    wait_for(
        "the SurgeStarted Event",
        Duration::from_secs(10),
        || async { (event_count(&ns.name, "SurgeStarted") == 1).then_some(()) },
    )
    .await;
    // SIGKILL: no chance to clean up.
    assert!(signal(&wh.pid().to_string(), "9"), "SIGKILL the server");
    uncordon("kwok-node-0");
    let _ = restart_server(&[]);
    wait_for(
        "back to exactly 3 without markers",
        Duration::from_secs(60),
        || async {
            let (r, m) = replicas(deps.get("k").await.ok()?);
            (r == 3 && !m).then_some(())
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(8)).await; // past another cooldown
    let (r, m) = replicas(deps.get("k").await.unwrap());
    assert_eq!(
        (r, m),
        (3, false),
        "restored exactly once, nothing re-applied"
    );
    assert_eq!(
        event_count(&ns.name, "SurgeStarted"),
        1,
        "the restart did not surge twice"
    );
    assert_eq!(event_count(&ns.name, "SurgeReverted"), 1, "reverted once");
}

/// Several replicas: one holds the Lease and runs the controllers; when it
/// dies another takes over.
#[tokio::test]
async fn a_second_replica_takes_over_the_lease() {
    let _g = nodes_lock().await;
    let wh = restart_server(&[]);
    let client = client().await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), "eviction-autoscaler");
    let holder = |l: Lease| l.spec.and_then(|s| s.holder_identity).unwrap_or_default();
    let me = std::fs::read_to_string(wh.state.join("pod_name"))
        .expect("pod_name")
        .trim()
        .to_string();
    let first = wait_for(
        "the lease is held by the running server",
        Duration::from_secs(30),
        || async {
            let h = holder(leases.get_opt("eviction-autoscaler").await.ok()??);
            (h == me).then_some(h)
        },
    )
    .await;

    // A second replica with the same ServiceAccount.
    let (second, _, _) = wh.spawn_extra("second-replica", &[("PDB_CREATE", "true")]);
    // Killed however the test ends: a stray replica would run controllers.
    let _second = KillOnDrop(second);
    tokio::time::sleep(Duration::from_secs(8)).await;
    let now = holder(leases.get("eviction-autoscaler").await.unwrap());
    assert_eq!(
        now, first,
        "the second replica waits while the first renews"
    );

    signal(&wh.pid().to_string(), "9");
    let started = Instant::now();
    wait_for(
        "the second replica takes the lease",
        Duration::from_secs(40),
        || async {
            let h = holder(leases.get("eviction-autoscaler").await.ok()?);
            (h == "second-replica").then_some(())
        },
    )
    .await;
    record_figure(format!(
        "leader failover: {:.1}s after SIGKILL of the leader",
        started.elapsed().as_secs_f64()
    ));
    _second.terminate();
    let _ = restart_server(&[]);
}

/// Writes the leader Lease as a peer named `holder` whose last renewal, by
/// its own clock, was `renew_time`; the Lease is created when missing.
/// Fails when anyone but `holder` (or nobody, for the first write) holds it.
async fn renew_as_peer(
    leases: &Api<Lease>,
    holder: &str,
    renew_time: k8s_openapi::jiff::Timestamp,
) {
    use k8s_openapi::api::coordination::v1::LeaseSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
    let spec = LeaseSpec {
        holder_identity: Some(holder.into()),
        lease_duration_seconds: Some(15),
        acquire_time: Some(MicroTime(renew_time)),
        renew_time: Some(MicroTime(renew_time)),
        ..Default::default()
    };
    for _ in 0..5 {
        let current = leases
            .get_opt("eviction-autoscaler")
            .await
            .expect("get Lease");
        let result = match current {
            None => {
                let mut l = Lease::default();
                l.metadata.name = Some("eviction-autoscaler".into());
                l.spec = Some(spec.clone());
                leases.create(&PostParams::default(), &l).await
            }
            Some(mut l) => {
                let h = l
                    .spec
                    .as_ref()
                    .and_then(|s| s.holder_identity.clone())
                    .unwrap_or_default();
                assert!(
                    h.is_empty() || h == holder || h.ends_with("-peer"),
                    "{h} took the Lease while {holder} renews it"
                );
                l.spec = Some(spec.clone());
                leases
                    .replace("eviction-autoscaler", &PostParams::default(), &l)
                    .await
            }
        };
        match result {
            Ok(_) => return,
            Err(kube::Error::Api(s)) if s.code == 409 => continue,
            Err(e) => panic!("write the Lease as {holder}: {e}"),
        }
    }
    panic!("the Lease kept changing under {holder}");
}

/// Lease expiry never compares the holder's renewTime with this replica's
/// wall clock (node clocks disagree): a live holder whose clock runs a
/// minute behind keeps the Lease while it renews, and a dead holder whose
/// clock ran an hour ahead loses it about a lease duration after its last
/// renewal, not an hour later.
#[tokio::test]
async fn lease_expiry_does_not_depend_on_the_holders_clock() {
    use k8s_openapi::jiff::{SignedDuration, Timestamp};
    let _g = nodes_lock().await;
    let wh = restart_server(&[]);
    stop_server(); // SIGTERM: the server releases the Lease
    let client = client().await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), "eviction-autoscaler");
    let holder = || async {
        leases
            .get_opt("eviction-autoscaler")
            .await
            .ok()
            .flatten()
            .and_then(|l| l.spec?.holder_identity)
            .unwrap_or_default()
    };

    // Whoever held it before (a server SIGKILLed by an earlier test does not
    // release it): the peer below starts from no Lease.
    match leases
        .delete("eviction-autoscaler", &Default::default())
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 404 => {}
        Err(e) => panic!("delete the Lease: {e}"),
    }
    // A live peer, its clock 60 s behind: every renewal looks 60 s old.
    let behind = || Timestamp::now() - SignedDuration::from_secs(60);
    renew_as_peer(&leases, "slow-clock-peer", behind()).await;
    let (replica, _, log) = wh.spawn_extra("clock-check", &[]);
    let replica = KillOnDrop(replica);
    let watched = Instant::now();
    while watched.elapsed() < Duration::from_secs(24) {
        tokio::time::sleep(Duration::from_secs(2)).await;
        renew_as_peer(&leases, "slow-clock-peer", behind()).await;
    }
    let log_text = || std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        log_text().contains("leader election identity"),
        "the replica ran:\n{}",
        log_text()
    );
    assert_eq!(
        holder().await,
        "slow-clock-peer",
        "the peer renews: it keeps the Lease"
    );

    // A peer whose clock ran an hour ahead writes once and dies.
    renew_as_peer(
        &leases,
        "fast-clock-peer",
        Timestamp::now() + SignedDuration::from_secs(3600),
    )
    .await;
    let died = Instant::now();
    let took = wait_for(
        "the replica takes the dead peer's Lease",
        Duration::from_secs(40),
        || async { (holder().await == "clock-check").then(|| died.elapsed()) },
    )
    .await;
    replica.terminate();
    let _ = restart_server(&[]);
    record_figure(format!(
        "lease and clock skew: a peer 60 s behind kept the Lease for 24 s of renewals; a dead peer 1 h ahead lost it {:.1}s after its last renewal (lease 15 s)",
        took.as_secs_f64()
    ));
    assert!(
        took >= Duration::from_secs(15),
        "taken {took:?} after the last renewal: before the lease expired"
    );
}

struct KillOnDrop(std::process::Child);

impl KillOnDrop {
    fn terminate(mut self) {
        terminate(&mut self.0);
    }
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Runs `eviction-autoscaler uninstall` against the local cluster.
fn uninstall() -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_eviction-autoscaler"))
        .arg("uninstall")
        .env("KUBECONFIG", cluster_dir().join("kubeconfig"))
        .output()
        .expect("run uninstall")
}

/// `eviction-autoscaler uninstall` reverts an active surge to its baseline
/// and deletes the PDBs and EvictionAutoScalers the product owns.
#[tokio::test]
async fn uninstall_reverts_surges_and_removes_what_we_own() {
    let _g = nodes_lock().await;
    let _ = restart_server(&[]);
    let ns = TestNs::new("e2e-uninstall").await;
    let deps: Api<Deployment> = ns.api();
    deps.create(
        &PostParams::default(),
        &deployment("un", 2, Some("kwok-node-1")),
    )
    .await
    .unwrap();
    let pods = wait_ready(&ns, "un", 2).await;
    let on_node = nodes_of(&pods)
        .iter()
        .filter(|n| *n == "kwok-node-1")
        .count() as i32;
    assert!(on_node > 0);
    wait_pdb(&ns, "un", "blocked", |p| {
        p.status
            .as_ref()
            .is_some_and(|s| s.current_healthy == 2 && s.disruptions_allowed == 0)
    })
    .await;
    // A second Deployment whose PDB its user takes over (ownedBy removed)
    // while no controller runs to release it: uninstall drops our owner
    // reference, so the PDB does not go with its Deployment.
    deps.create(&PostParams::default(), &deployment("kept", 1, None))
        .await
        .unwrap();
    let pdbs: Api<PodDisruptionBudget> = ns.api();
    let kept_uid = wait_for(
        "kept's PDB and its record",
        Duration::from_secs(30),
        || async {
            // With our reference on it (it follows the proof, a pass later).
            let p = pdbs.get_opt("kept").await.ok()??;
            let uid = p.metadata.uid.clone()?;
            if p.metadata.owner_references.unwrap_or_default().is_empty() {
                return None;
            }
            let out = kubectl(&[
                "get",
                "evictionautoscalers",
                "kept",
                "-n",
                &ns.name,
                "-o",
                "jsonpath={.status.pdbUID}",
            ]);
            let recorded = String::from_utf8_lossy(&out.stdout).to_string();
            (recorded.trim() == uid).then_some(uid)
        },
    )
    .await;
    kubectl_ok(&["cordon", "kwok-node-1"]);
    wait_for("surge", Duration::from_secs(20), || async {
        let d = deps.get("un").await.ok()?;
        let m = d
            .metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key("evictionSurgeReplicas"));
        (m && d.spec.and_then(|s| s.replicas) == Some(2 + on_node.min(1))).then_some(())
    })
    .await;
    stop_server();
    // As the Go project's current versions leave a record that surged: with
    // their finalizer, deleted, it would stay Terminating for good.
    kubectl_ok(&[
        "-n",
        &ns.name,
        "patch",
        "evictionautoscalers",
        "un",
        "--type=merge",
        "-p",
        r#"{"metadata":{"finalizers":["eviction-autoscaler.azure.com/surge-revert"]}}"#,
    ]);
    kubectl_ok(&["annotate", "pdb", "kept", "-n", &ns.name, "ownedBy-"]);
    // A dry run says the finalizer would go (the surge reverted first) and
    // changes nothing.
    let out = Command::new(env!("CARGO_BIN_EXE_eviction-autoscaler"))
        .args(["uninstall", "--dry-run"])
        .env("KUBECONFIG", cluster_dir().join("kubeconfig"))
        .output()
        .expect("run uninstall --dry-run");
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains(&format!(
            "the Go project's finalizers removed (dry run) (what they guard is done): {}/evictionautoscaler/un",
            ns.name
        )),
        "{text}"
    );
    let held = kubectl(&[
        "get",
        "evictionautoscalers",
        "un",
        "-n",
        &ns.name,
        "-o",
        "jsonpath={.metadata.finalizers}",
    ]);
    assert!(
        String::from_utf8_lossy(&held.stdout).contains("surge-revert"),
        "the dry run removed nothing"
    );
    // First with every update of a PDB refused: the release fails, and the
    // record that proves the PDB was ours is kept for the next run.
    let deny = DenyUpdates::apply(&ns, "policy", "poddisruptionbudgets", "false");
    deny.wait_refusing("pdb/kept").await;
    let out = uninstall();
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "a failed release fails the run: {text}"
    );
    assert!(
        text.contains(&format!("{}/evictionautoscaler/kept: kept", ns.name)),
        "{text}"
    );
    assert!(
        text.contains(&format!("{}/deployment/un", ns.name)),
        "the surge went back in the first run: {text}"
    );
    assert!(
        text.contains(&format!(
            "the Go project's finalizers removed (what they guard is done): {}/evictionautoscaler/un",
            ns.name
        )),
        "{text}"
    );
    wait_for(
        "un's record gone with its finalizer",
        Duration::from_secs(30),
        || async { (!eviction_autoscalers(&ns.name).contains(&"un".to_string())).then_some(()) },
    )
    .await;
    deny.lift("pdb/kept").await;
    let out = uninstall();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(&format!(
            "released to its user (our owner reference dropped): {}/pdb/kept",
            ns.name
        )),
        "{text}"
    );
    let kept = pdbs.get("kept").await.expect("the PDB taken over stays");
    assert_eq!(kept.metadata.uid.as_deref(), Some(kept_uid.as_str()));
    assert!(
        kept.metadata
            .owner_references
            .unwrap_or_default()
            .is_empty(),
        "no owner reference of ours left"
    );
    // Its Deployment deleted: the PDB stays, the user's now.
    deps.delete("kept", &Default::default()).await.unwrap();
    wait_for(
        "kept's Deployment gone",
        Duration::from_secs(30),
        || async { deps.get_opt("kept").await.ok()?.is_none().then_some(()) },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(pdb_exists(&ns, "kept").await, "not garbage-collected");
    let d = deps.get("un").await.unwrap();
    assert_eq!(
        d.spec.and_then(|s| s.replicas),
        Some(2),
        "back to the baseline"
    );
    assert!(!d
        .metadata
        .annotations
        .unwrap_or_default()
        .contains_key("evictionSurgeReplicas"));
    assert!(!pdb_exists(&ns, "un").await, "our PDB is gone");
    uncordon("kwok-node-1");
    let _ = restart_server(&[]);
}

/// `eviction-autoscaler doctor` passes on a good installation and names a
/// webhook registered with failurePolicy Fail.
#[tokio::test]
async fn doctor_checks_the_installation() {
    let _g = nodes_lock().await;
    let _ = restart_server(&[]);
    let doctor = || {
        Command::new(env!("CARGO_BIN_EXE_eviction-autoscaler"))
            .args(["doctor", "--only", "install"])
            .env("KUBECONFIG", cluster_dir().join("kubeconfig"))
            .output()
            .expect("run doctor")
    };
    // The leader may need a moment after the restart.
    let good = wait_for("doctor passes", Duration::from_secs(30), || async {
        let out = doctor();
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).to_string())
    })
    .await;
    for line in [
        "CRD",
        "evictions.eviction-autoscaler.azure.com",
        "deployments.eviction-autoscaler.azure.com",
        "RBAC",
        "leader",
    ] {
        assert!(
            good.lines()
                .any(|l| l.starts_with("ok") && l.contains(line)),
            "{line}:\n{good}"
        );
    }
    patch_eviction_webhook(
        r#"[{"op":"replace","path":"/webhooks/0/failurePolicy","value":"Fail"}]"#,
    );
    let out = doctor();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let _ = restart_server(&[]); // re-registers the webhooks as shipped
    assert!(!out.status.success(), "doctor must fail:\n{text}");
    assert!(
        text.lines()
            .any(|l| l.starts_with("FAIL") && l.contains("failurePolicy")),
        "{text}"
    );
}

/// An `uninstall` that cannot revert one surge (an admission policy denies
/// updates of that Deployment) still reverts the others, names the one it
/// could not (`failed: <key>: <error>`), exits 1 and leaves that surge's
/// markers in place; run again once the write is possible, it reverts that
/// one too. No surge is stranded by a write that fails halfway. ("denied"
/// sorts before "free": a run that stopped at its first failure would leave
/// both.)
#[tokio::test]
async fn uninstall_goes_on_past_a_surge_it_cannot_revert() {
    let _g = nodes_lock().await;
    let _ = restart_server(&[]);
    let node = "kwok-node-1";
    let ns = TestNs::new("e2e-uninst-fail").await;
    let deps: Api<Deployment> = ns.api();
    for name in ["free", "denied"] {
        deps.create(&PostParams::default(), &deployment(name, 2, Some(node)))
            .await
            .unwrap();
    }
    for name in ["free", "denied"] {
        let pods = wait_ready(&ns, name, 2).await;
        assert!(
            nodes_of(&pods).iter().any(|n| n == node),
            "{name} on {node}"
        );
        wait_pdb(&ns, name, "blocked", |p| {
            p.status
                .as_ref()
                .is_some_and(|s| s.current_healthy == 2 && s.disruptions_allowed == 0)
        })
        .await;
    }
    kubectl_ok(&["cordon", node]);
    for name in ["free", "denied"] {
        wait_deployment(&ns, name, 3, true, Duration::from_secs(30)).await;
    }
    stop_server();

    // Updates of "denied" denied from now on.
    let deny = DenyUpdates::apply(
        &ns,
        "apps",
        "deployments",
        "object.metadata.name != 'denied'",
    );
    deny.wait_refusing("deployment/denied").await;

    let out = uninstall();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout).to_string(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    );
    let first = (
        deployment_state(&ns, "free").await,
        deployment_state(&ns, "denied").await,
    );
    deny.lift("deployment/denied").await;
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(
        stderr.contains(&format!("failed: {}/deployment/denied: ", ns.name)),
        "{stderr}"
    );
    assert!(
        stdout.contains(&format!("reverted surge: {}/deployment/free", ns.name)),
        "{stdout}"
    );
    assert_eq!(first.0, (2, Some(false)), "free reverted:\n{stdout}");
    assert_eq!(
        first.1,
        (3, Some(true)),
        "denied left surged with its markers, to be reverted later"
    );

    // The write is possible again: a second run reverts it.
    let out = uninstall();
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let again = deployment_state(&ns, "denied").await;
    uncordon(node);
    let _ = restart_server(&[]);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains(&format!("reverted surge: {}/deployment/denied", ns.name)),
        "{stdout}"
    );
    assert_eq!(again, (2, Some(false)), "denied reverted:\n{stdout}");
}

/// `eviction-autoscaler uninstall` deletes only the EvictionAutoScalers we
/// own: one a user created (no ownedBy) stays, like their PDBs.
#[tokio::test]
async fn uninstall_leaves_user_evictionautoscalers_alone() {
    use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
    let _g = nodes_lock().await;
    let _ = restart_server(&[]);
    let ns = TestNs::new("e2e-uninst-user").await;
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("eviction-autoscaler.azure.com", "v1", "EvictionAutoScaler"),
        "evictionautoscalers",
    );
    let eas = Api::<DynamicObject>::namespaced_with(ns.client.clone(), &ns.name, &ar);
    let deps: Api<Deployment> = ns.api();
    deps.create(&PostParams::default(), &deployment("mixed", 2, None))
        .await
        .unwrap();
    wait_for(
        "our EvictionAutoScaler",
        Duration::from_secs(30),
        || async { eas.get_opt("mixed").await.ok().flatten() },
    )
    .await;
    let by_hand: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "eviction-autoscaler.azure.com/v1",
        "kind": "EvictionAutoScaler",
        "metadata": {"name": "by-hand"},
        "spec": {"targetName": "mixed", "targetKind": "deployment"}
    }))
    .unwrap();
    eas.create(&PostParams::default(), &by_hand).await.unwrap();
    stop_server();
    let out = uninstall();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let _ = restart_server(&[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        !text.contains(&format!("{}/evictionautoscaler/by-hand", ns.name)),
        "{text}"
    );
    assert!(
        eas.get_opt("by-hand").await.unwrap().is_some(),
        "the user's EvictionAutoScaler stays:\n{text}"
    );
    assert!(
        text.contains(&format!("{}/pdb/mixed", ns.name)),
        "our PDB is deleted:\n{text}"
    );
}

/// A leader that cannot renew its Lease (its RBAC for Leases revoked) steps
/// down at the renew deadline, before the Lease could expire for the other
/// replicas, and zeroes the gauges only a leader keeps.
#[tokio::test]
async fn a_leader_that_cannot_renew_steps_down_before_its_lease_expires() {
    let _g = nodes_lock().await;
    let wh = restart_server(&[]);
    let ns = TestNs::new("e2e-stepdown").await;
    let deps: Api<Deployment> = ns.api();
    deps.create(&PostParams::default(), &deployment("sd", 1, None))
        .await
        .unwrap();
    wait_for(
        "leader with a managed PDB",
        Duration::from_secs(30),
        || async {
            let leading = wh.metric_sum("eviction_autoscaler_leader", &[]) == 1.0;
            let managed = wh.metric_sum("eviction_autoscaler_managed_pdbs", &[]) >= 1.0;
            (leading && managed).then_some(())
        },
    )
    .await;
    let leases: Api<Lease> = Api::namespaced(ns.client.clone(), "eviction-autoscaler");
    let renew_time = || async {
        leases
            .get("eviction-autoscaler")
            .await
            .ok()
            .and_then(|l| l.spec?.renew_time)
            .map(|t| t.0)
    };
    kubectl_ok(&[
        "delete",
        "rolebinding",
        "-n",
        "eviction-autoscaler",
        "eviction-autoscaler-leader",
    ]);
    let revoked = Instant::now();
    let stepped = wait_for("step-down", Duration::from_secs(30), || async {
        (wh.metric_sum("eviction_autoscaler_leader", &[]) == 0.0).then(Instant::now)
    })
    .await;
    let stepped_at = k8s_openapi::jiff::Timestamp::now();
    let last_renewal = renew_time().await.expect("renewTime");
    let managed = wh.metric_sum("eviction_autoscaler_managed_pdbs", &[]);
    let surges = wh.metric_sum("eviction_autoscaler_active_surges", &[]);
    let since_renewal = stepped_at.duration_since(last_renewal).as_secs_f64();
    record_figure(format!(
        "leader step-down: {:.1}s after the Lease RBAC was revoked, {since_renewal:.1}s after the last renewal (lease 15s)",
        stepped.duration_since(revoked).as_secs_f64()
    ));
    let _ = restart_server(&[]); // re-applies manifests/rbac.yaml
    assert!(
        since_renewal < 15.0,
        "stepped down {since_renewal:.1}s after the last renewal: the lease had expired"
    );
    assert_eq!((managed, surges), (0.0, 0.0), "leader-only gauges zeroed");
}

/// CPU seconds (user + system) a process has used so far.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("stat");
    // Fields after the command name (which ends with ')'): utime and stime
    // are the 12th and 13th of them.
    let rest = stat.rsplit_once(')').expect("stat format").1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = f[11].parse::<f64>().unwrap() + f[12].parse::<f64>().unwrap();
    ticks / 100.0 // USER_HZ
}

/// With the EvictionAutoScaler CRD missing, the caches never sync and the
/// controllers wait: the process stays nearly idle instead of spinning.
#[tokio::test]
async fn missing_crd_does_not_make_the_controllers_spin() {
    let _g = nodes_lock().await;
    let wh = restart_server(&[]);
    stop_server();
    kubectl_ok(&[
        "delete",
        "crd",
        "evictionautoscalers.eviction-autoscaler.azure.com",
        "--wait=true",
    ]);
    let (child, _, _) = wh.spawn_extra(
        "no-crd",
        &[
            ("PDB_CREATE", "true"),
            ("RUST_LOG", "info,kube_runtime=warn"),
        ],
    );
    let pid = child.id();
    let mut server = KillOnDrop(child);
    // Let it start, take the Lease and settle into waiting.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let c0 = cpu_seconds(pid);
    let t0 = Instant::now();
    // Watch events keep coming meanwhile (pods of other tests' leftovers, nodes).
    tokio::time::sleep(Duration::from_secs(10)).await;
    let cpu = cpu_seconds(pid) - c0;
    let wall = t0.elapsed().as_secs_f64();
    let alive = server.0.try_wait().unwrap().is_none();
    drop(server);
    let log = std::fs::read_to_string(wh.state.join("no-crd.log")).unwrap();
    let _ = restart_server(&[]); // re-applies the CRD
    record_figure(format!(
        "missing CRD: {cpu:.2} CPU-seconds in {wall:.1}s with caches unsynced"
    ));
    assert!(alive, "the server kept running:\n{log}");
    assert!(
        log.contains("leadership changed") && !log.contains("watch caches synced"),
        "leading, with caches unsynced:\n{log}"
    );
    assert!(
        cpu < 0.1 * wall,
        "{cpu:.2} CPU-seconds in {wall:.1}s: spinning"
    );
}

/// Points the eviction webhook at another replica's port, and back at the
/// main server's however the test ends.
struct EvictionsRoutedTo {
    main: u16,
}

/// A JSON patch of the eviction webhook's configuration.
fn patch_eviction_webhook(patch: &str) {
    kubectl_ok(&[
        "patch",
        "validatingwebhookconfiguration",
        "eviction-autoscaler",
        "--type=json",
        "-p",
        patch,
    ]);
}

fn route_evictions(port: u16) {
    let patch = json!([{"op": "replace", "path": "/webhooks/0/clientConfig/url",
        "value": format!("https://127.0.0.1:{port}/validate/evictions")}]);
    patch_eviction_webhook(&patch.to_string());
}

impl EvictionsRoutedTo {
    fn port(port: u16, main: u16) -> Self {
        route_evictions(port);
        EvictionsRoutedTo { main }
    }
}

impl Drop for EvictionsRoutedTo {
    fn drop(&mut self) {
        route_evictions(self.main);
    }
}

/// A blocked eviction answered by a follower reaches the leader only
/// through the EvictionAutoScaler's `spec.lastEviction` (behaviour.md
/// section 4): the eviction webhook goes to the follower alone, the leader
/// surges, the eviction goes through, and the surge is reverted after the
/// cooldown. No node is cordoned, so no other signal can start the surge.
#[tokio::test]
async fn a_followers_blocked_eviction_surges_through_the_leader() {
    let _g = nodes_lock().await;
    let wh = restart_server(&[]);
    let client = client().await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), "eviction-autoscaler");
    let leader = std::fs::read_to_string(wh.state.join("pod_name"))
        .expect("pod_name")
        .trim()
        .to_string();
    wait_for(
        "the lease is held by the main server",
        Duration::from_secs(30),
        || async {
            let l = leases.get_opt("eviction-autoscaler").await.ok()??;
            (l.spec?.holder_identity? == leader).then_some(())
        },
    )
    .await;
    // The main server's settings (tests/e2e/deploy-local.sh).
    let (follower, port, log) = wh.spawn_extra(
        "follower",
        &[
            ("PDB_CREATE", "true"),
            ("ENABLED_BY_DEFAULT", "false"),
            ("ACTIONED_NAMESPACES", "kube-system,e2e-actioned"),
            ("COOLDOWN", "5s"),
            ("RUST_LOG", "info,kube_runtime=warn"),
        ],
    );
    let follower = KillOnDrop(follower);
    wait_for("the follower ready", Duration::from_secs(30), || async {
        (webhook_safety::probe(port, "/readyz").0 == 200).then_some(())
    })
    .await;

    let ns = TestNs::new("e2e-follower").await;
    let deps: Api<Deployment> = ns.api();
    let mut d = deployment("fw", 3, None);
    if let Some(spec) = d.spec.as_mut() {
        spec.strategy = Some(DeploymentStrategy {
            type_: Some("RollingUpdate".into()),
            rolling_update: Some(RollingUpdateDeployment {
                max_surge: Some(IntOrString::Int(1)),
                max_unavailable: Some(IntOrString::Int(0)),
            }),
        });
    }
    deps.create(&PostParams::default(), &d).await.unwrap();
    let pods = wait_ready(&ns, "fw", 3).await;
    wait_pdb_blocking(&ns, "fw", 3).await;
    let victim = pods[0].metadata.name.clone().expect("pod name");

    // The main server's lines about the victim, dry runs aside.
    let about_victim = |log: &str| -> Vec<String> {
        strip_ansi(log)
            .lines()
            .filter(|l| l.contains(&victim) && !l.contains("dry_run=true"))
            .map(str::to_string)
            .collect()
    };
    let routed = EvictionsRoutedTo::port(port, wh.port);
    // Each 429 comes back as it is (kube's client would retry it for minutes).
    let pod_api = pods_without_retry(&ns).await;
    // The apiserver takes up the new webhook URL a moment later: dry runs
    // (which signal nothing) until the follower answers one, so the real
    // eviction cannot reach the leader.
    let dry_run = kube::api::EvictParams {
        post_options: PostParams {
            dry_run: true,
            ..Default::default()
        },
        ..Default::default()
    };
    wait_for(
        "the follower answering the eviction webhook",
        Duration::from_secs(30),
        || async {
            let _ = pod_api.evict(&victim, &dry_run).await;
            let text = strip_ansi(&std::fs::read_to_string(&log).unwrap_or_default());
            text.lines()
                .any(|l| l.contains(&victim) && l.contains("dry_run=true"))
                .then_some(())
        },
    )
    .await;
    let refused = std::cell::Cell::new(0);
    wait_for(
        "the eviction allowed once the leader surged",
        Duration::from_secs(60),
        || async {
            match pod_api
                .evict(&victim, &kube::api::EvictParams::default())
                .await
            {
                Ok(_) => Some(()),
                Err(_) => {
                    refused.set(refused.get() + 1);
                    None
                }
            }
        },
    )
    .await;
    drop(routed);
    let follower_log = std::fs::read_to_string(&log).unwrap_or_default();
    // Blocked: answered 429 (the eviction retried), or held until the
    // leader's surge made room (EVICTION_HOLD).
    assert!(
        follower_log.lines().any(|l| l.contains(&victim)
            && (l.contains("eviction blocked by budget; answered 429")
                || l.contains("blocked eviction held until there was room; allowed"))),
        "the follower found the eviction blocked ({} refused):\n{follower_log}",
        refused.get()
    );
    let leader_log = strip_ansi(&wh.log());
    assert_eq!(
        about_victim(&leader_log),
        Vec::<String>::new(),
        "the leader never answered the eviction"
    );
    assert!(
        leader_log
            .lines()
            .any(|l| l.contains("surge") && l.contains(&ns.name) && l.contains("target=4")),
        "the leader surged fw to 4:\n{leader_log}"
    );
    // The follower never led: its log says it did not start the controllers.
    assert!(
        leadership_logged(
            &strip_ansi(&follower_log),
            true,
            k8s_openapi::jiff::Timestamp::UNIX_EPOCH
        )
        .is_none(),
        "the follower must not have led:\n{follower_log}"
    );
    wait_for(
        "back to exactly 3 without markers",
        Duration::from_secs(60),
        || async {
            let d = deps.get("fw").await.ok()?;
            let marked = markers_present(d.metadata.annotations.as_ref()) == Some(true);
            (d.spec?.replicas == Some(3) && !marked).then_some(())
        },
    )
    .await;
    follower.terminate();
}

/// ZERO_SURGE_OVERRIDE (behaviour.md sections 1 and 5). A Deployment whose
/// strategy allows no surge (Recreate) gets none by default: the
/// EvictionAutoScaler is Degraded and the eviction's 429 says why. With the
/// override at 1, the same cordon surges it by one, and the uncordon takes
/// it back to exactly its baseline.
#[tokio::test]
async fn zero_surge_override_surges_a_recreate_deployment() {
    let _g = nodes_lock().await;
    let _ = restart_server(&[]);
    let ns = TestNs::new("e2e-zso").await;
    let node = "kwok-node-0";
    let mut d = deployment("rc", 2, Some(node));
    if let Some(spec) = d.spec.as_mut() {
        spec.strategy = Some(DeploymentStrategy {
            type_: Some("Recreate".into()),
            rolling_update: None,
        });
    }
    let deps: Api<Deployment> = ns.api();
    deps.create(&PostParams::default(), &d)
        .await
        .expect("create Deployment");
    let pods = wait_ready(&ns, "rc", 2).await;
    assert!(
        nodes_of(&pods).iter().all(|n| n == node),
        "both pods on {node}: {:?}",
        nodes_of(&pods)
    );
    wait_pdb_blocking(&ns, "rc", 2).await;

    // Without the override: no surge, and both say why.
    kubectl_ok(&["cordon", node]);
    let eas = || String::from_utf8_lossy(&eas_get(&ns.name, "rc", "yaml").stdout).to_string();
    wait_for(
        "Degraded: SurgeImpossible because of Recreate",
        Duration::from_secs(30),
        || async {
            let y = eas();
            (y.contains("reason: SurgeImpossible") && y.contains("Recreate")).then_some(())
        },
    )
    .await;
    assert_eq!(
        deployment_state(&ns, "rc").await,
        (2, Some(false)),
        "no surge"
    );
    let victim = pods[0].metadata.name.clone().unwrap_or_default();
    let refused = pods_without_retry(&ns)
        .await
        .evict(&victim, &Default::default())
        .await;
    match refused {
        Err(kube::Error::Api(s)) => assert!(
            s.code == 429 && s.message.contains("Recreate"),
            "the 429 says why: {s:?}"
        ),
        other => panic!("eviction of {victim} not refused: {other:?}"),
    }
    uncordon(node);

    // With the override: one more replica, then back to exactly 2.
    let _ = restart_server(&[("ZERO_SURGE_OVERRIDE", "1")]);
    kubectl_ok(&["cordon", node]);
    wait_deployment(&ns, "rc", 3, true, Duration::from_secs(30)).await;
    wait_for("Degraded cleared", Duration::from_secs(30), || async {
        (!eas().contains("reason: SurgeImpossible")).then_some(())
    })
    .await;
    uncordon(node);
    assert_settled_at(&ns, "rc", 2, Duration::from_secs(60)).await;
    let _ = restart_server(&[]);
}

/// A surge left by the Go project's older versions, found when this product
/// takes over: `evictionSurgeReplicas` alone on the Deployment at 5, the
/// baseline 3 in its EvictionAutoScaler's `status.minReplicas`, its PDB
/// (`ownedBy`) at 3. The server is stopped while they are made. The baseline is written beside the lone marker and the
/// surge goes back to 3 (not cleaned away with the Deployment left at 5);
/// the PDB never goes to 5.
#[tokio::test]
async fn a_surge_left_by_the_go_project_goes_back_to_its_recorded_baseline() {
    let _ = restart_server(&[]);
    let ns = TestNs::new("e2e-legacy").await;
    // The Go project's objects, made while this product is not running.
    stop_server();
    legacy_go_surge(&ns, "lg", 5, 3).await;
    wait_ready(&ns, "lg", 5).await;

    // Sampled from before the take-over: the PDB's minimum never leaves 3.
    let sampler = PdbSampler::start(&ns, "lg");
    let _ = restart_server(&[]);
    wait_deployment(&ns, "lg", 3, false, Duration::from_secs(60)).await;
    let seen = sampler.finish().await;
    assert_eq!(
        seen,
        [3].into(),
        "the PDB's minimum while the surge was taken over"
    );
    let status = eas_get(&ns.name, "lg", "jsonpath={.status.minReplicas}");
    assert_eq!(String::from_utf8_lossy(&status.stdout).trim(), "3");
    assert_settled_at(&ns, "lg", 3, Duration::from_secs(30)).await;
    wait_for(
        "one SurgeTakenOver Event",
        Duration::from_secs(20),
        || async { (event_count(&ns.name, "SurgeTakenOver") == 1).then_some(()) },
    )
    .await;
}

/// A surge left by the Go project's current versions, found when this
/// product takes over: both markers on the Deployment (baseline 3, surge 5)
/// and the replicas at 5, all written by its client (field manager
/// `manager`). Its number is the Go project's surge, not someone's value:
/// it goes back to 3 once the cooldown from the take-over has passed (read
/// as someone's, it was adopted and kept at 5 for good).
#[tokio::test]
async fn a_surge_left_by_the_go_projects_current_version_goes_back_to_its_baseline() {
    let _ = restart_server(&[]);
    let ns = TestNs::new("e2e-gonow").await;
    stop_server();
    let deps: Api<Deployment> = ns.api();
    let mut d = deployment("gn", 5, None);
    d.metadata.annotations = Some(
        [
            (SURGE_MARKER.to_string(), "5".to_string()),
            (BASELINE_MARKER.to_string(), "3".to_string()),
        ]
        .into(),
    );
    deps.create(&go_client(), &d)
        .await
        .expect("create Deployment");
    wait_ready(&ns, "gn", 5).await;
    let _ = restart_server(&[]);
    assert_settled_at(&ns, "gn", 3, Duration::from_secs(60)).await;
}

/// Two Deployments made while the server is down and a Job's pod labelled
/// for both (`migrate-1`: `app=ow`, `team=op`): the reconciler's first pass
/// plans a PDB for each, and both would select that pod. Only one is made
/// (`op`'s, the name that sorts first): every PDB event is watched, and two
/// PDBs never exist at once; `ow` is left in SelectorOverlap.
#[tokio::test]
async fn the_first_pass_never_makes_two_budgets_over_one_pod() {
    use futures::StreamExt;
    use kube::runtime::watcher;
    let _ = restart_server(&[]);
    let ns = TestNs::new("e2e-onepass").await;
    stop_server();
    let deps: Api<Deployment> = ns.api();
    let pods: Api<k8s_openapi::api::core::v1::Pod> = ns.api();
    deps.create(
        &PostParams::default(),
        &labelled("ow", &[("app", "ow")], &[("app", "ow")]),
    )
    .await
    .expect("create ow");
    deps.create(
        &PostParams::default(),
        &labelled(
            "op",
            &[("team", "op")],
            &[("team", "op"), ("app", "billing")],
        ),
    )
    .await
    .expect("create op");
    pods.create(
        &PostParams::default(),
        &bare_pod("migrate-1", &[("app", "ow"), ("team", "op")]),
    )
    .await
    .expect("the pod labelled for both");
    wait_for("migrate-1 running", Duration::from_secs(60), || async {
        let p = pods.get_opt("migrate-1").await.ok().flatten()?;
        (p.status?.phase.as_deref() == Some("Running")).then_some(())
    })
    .await;
    let pdbs: Api<PodDisruptionBudget> = ns.api();
    let most = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let watch = {
        let (most, api) = (most.clone(), pdbs.clone());
        tokio::spawn(async move {
            let mut now = std::collections::BTreeSet::new();
            let mut events = watcher(api, watcher::Config::default()).boxed();
            while let Some(Ok(ev)) = events.next().await {
                match ev {
                    watcher::Event::Apply(p) | watcher::Event::InitApply(p) => {
                        now.insert(p.metadata.name.unwrap_or_default());
                    }
                    watcher::Event::Delete(p) => {
                        now.remove(&p.metadata.name.unwrap_or_default());
                    }
                    _ => {}
                }
                most.fetch_max(now.len(), std::sync::atomic::Ordering::SeqCst);
            }
        })
    };
    let _ = restart_server(&[]);
    wait_for("op's PDB", Duration::from_secs(60), || async {
        pdbs.get_opt("op").await.ok().flatten()
    })
    .await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    watch.abort();
    let left = pdb_names(&pdbs).await;
    assert_eq!(left, ["op"], "{}", event_log(&ns.name));
    assert_eq!(
        most.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "two PDBs over migrate-1 at once:\n{}",
        event_log(&ns.name)
    );
}

/// A GitOps tool applies a copy of our running surge (its replicas and both
/// markers, as we wrote them) while the server is down after a SIGKILL. The
/// restarted server reads it as the tool's from its first look, as the
/// running one does (`gitops::a_copy_of_our_running_surge_synced_by_a_tool_becomes_the_tools`):
/// Degraded naming the tool while the node is cordoned, and once it is
/// uncordoned and the cooldown has passed, no revert, no adoption, no
/// write of ours (invariants 3 and 4 across a restart).
#[tokio::test]
async fn a_tools_copy_of_our_surge_applied_while_we_are_down_stays_the_tools() {
    let _g = nodes_lock().await;
    let wh = restart_server(&[]);
    let ns = TestNs::new("e2e-copy-down").await;
    let deps: Api<Deployment> = ns.api();
    let node = "kwok-node-0";
    let _uncordon = UncordonOnDrop(node);
    let (t, copy) = surged_and_a_copy(&ns, "cd", node).await;
    assert!(signal(&wh.pid().to_string(), "9"), "SIGKILL the server");
    let mut pp = PatchParams::apply("gitops");
    pp.force = true;
    let applied = deps
        .patch("cd", &pp, &Patch::Apply(&copy))
        .await
        .expect("the tool's apply");

    let _ = restart_server(&[]);
    let record = || String::from_utf8_lossy(&eas_get(&ns.name, "cd", "yaml").stdout).to_string();
    wait_for(
        "Degraded SurgeImpossible naming the tool",
        Duration::from_secs(30),
        || async {
            let y = record();
            (y.contains("reason: SurgeImpossible")
                && y.contains("written by someone else (gitops)"))
            .then_some(())
        },
    )
    .await;
    uncordon(node);
    wait_for("Degraded cleared", Duration::from_secs(30), || async {
        (!record().contains("reason: SurgeImpossible")).then_some(())
    })
    .await;
    // Past the cooldown (5 s) with nothing displaced: a surge of ours
    // would be reverted by now.
    tokio::time::sleep(Duration::from_secs(8)).await;
    let now = deps.get("cd").await.expect("cd");
    assert_eq!(
        (now.metadata.generation, now.metadata.annotations.clone()),
        (
            applied.metadata.generation,
            applied.metadata.annotations.clone()
        ),
        "nothing of ours wrote the tool's copy"
    );
    assert_eq!(
        now.spec.and_then(|s| s.replicas),
        Some(t),
        "the tool's value"
    );
    for reason in ["SurgeReverted", "SurgeBaselineChanged"] {
        assert_eq!(event_count(&ns.name, reason), 0, "no {reason} Event");
    }
}
