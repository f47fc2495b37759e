//! End-to-end tests that restart or reconfigure the server, so they run one
//! at a time after the main suite (`make e2e`): opt-out mode, Deployments
//! that existed before start-up, a SIGKILL during a surge, and leader
//! election between two replicas.

#[path = "../e2e/support.rs"]
mod support;
mod surge_upgrade;

use std::process::{Command, Stdio};
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
    // SIGKILL: no chance to clean up.
    let ok = Command::new("kill")
        .args(["-9", &wh.pid().to_string()])
        .status()
        .unwrap();
    assert!(ok.success());
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
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let log = std::fs::File::create(wh.state.join("second.log")).unwrap();
    let second = Command::new(env!("CARGO_BIN_EXE_eviction-autoscaler"))
        .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
        .arg("--tls-cert-file")
        .arg(wh.state.join("tls.crt"))
        .arg("--tls-key-file")
        .arg(wh.state.join("tls.key"))
        .env("KUBECONFIG", wh.state.join("kubeconfig"))
        .env("POD_NAMESPACE", "eviction-autoscaler")
        .env("POD_NAME", "second-replica")
        .env("PDB_CREATE", "true")
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    // Killed however the test ends: a stray replica would run controllers.
    let _second = KillOnDrop(second);
    tokio::time::sleep(Duration::from_secs(8)).await;
    let now = holder(leases.get("eviction-autoscaler").await.unwrap());
    assert_eq!(
        now, first,
        "the second replica waits while the first renews"
    );

    let _ = Command::new("kill")
        .args(["-9", &wh.pid().to_string()])
        .status();
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
    drop(_second);
    let _ = restart_server(&[]);
}

struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
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
    let out = Command::new(env!("CARGO_BIN_EXE_eviction-autoscaler"))
        .arg("uninstall")
        .env("KUBECONFIG", cluster_dir().join("kubeconfig"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(&format!("{}/deployment/un", ns.name)),
        "{text}"
    );
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
            .arg("doctor")
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
    kubectl_ok(&[
        "patch",
        "validatingwebhookconfiguration",
        "eviction-autoscaler",
        "--type=json",
        "-p",
        r#"[{"op":"replace","path":"/webhooks/0/failurePolicy","value":"Fail"}]"#,
    ]);
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
