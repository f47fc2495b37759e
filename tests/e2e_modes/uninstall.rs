//! `eviction-autoscaler uninstall` at its edges: a controller still running,
//! an autoscaler it cannot revert, a surge of the Go project, KEDA's HPA
//! lagging behind its reverted ScaledObject. (The plain run and a Deployment
//! it cannot write are in main.rs.)

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{DynamicObject, PostParams};
use kube::Api;

use crate::support::*;
use crate::uninstall;

fn text(out: &std::process::Output) -> String {
    format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Deployment `name` (2 replicas, pods on `node`) held by its PDB, then the
/// node cordoned: the surged number once the Deployment carries it with
/// its markers. The guard uncordons the node and starts the server again
/// however the test ends (uninstall is cluster-wide: a surge left behind
/// would fail the next test's run).
async fn surged_on(ns: &TestNs, name: &str, node: &'static str) -> (Uncordon, i32) {
    let deps: Api<Deployment> = ns.api();
    deps.create(&PostParams::default(), &deployment(name, 2, Some(node)))
        .await
        .expect("create Deployment");
    let pods = wait_ready(ns, name, 2).await;
    assert!(
        nodes_of(&pods).iter().any(|n| n == node),
        "a pod of {name} on {node}"
    );
    wait_pdb_blocking(ns, name, 2).await;
    let guard = Uncordon(node);
    kubectl_ok(&["cordon", node]);
    let t = wait_for(
        &format!("{name} surged with markers"),
        Duration::from_secs(30),
        || async {
            let (r, m) = deployment_state(ns, name).await;
            (r > 2 && m == Some(true)).then_some(r)
        },
    )
    .await;
    (guard, t)
}

struct Uncordon(&'static str);

impl Drop for Uncordon {
    fn drop(&mut self) {
        uncordon(self.0);
        let _ = restart_server(&[]);
    }
}

/// While a controller renews the Lease, uninstall refuses (it would surge
/// again or make the PDBs again right after) and changes nothing; a dry run
/// still shows what would change.
#[tokio::test]
async fn uninstall_refuses_while_a_controller_renews_the_lease() {
    let _ = restart_server(&[]);
    let leases: Api<Lease> = Api::namespaced(crate::support::client().await, "eviction-autoscaler");
    wait_for("the Lease held", Duration::from_secs(30), || async {
        let l = leases.get_opt("eviction-autoscaler").await.ok()??;
        l.spec?.holder_identity.filter(|h| !h.is_empty())
    })
    .await;
    let ns = TestNs::new("e2e-uninst-lease").await;
    let deps: Api<Deployment> = ns.api();
    deps.create(&PostParams::default(), &deployment("ul", 1, None))
        .await
        .expect("create Deployment");
    wait_pdb(&ns, "ul", "our PDB", |_| true).await;

    let out = uninstall();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out)
            .contains("a controller still holds Lease eviction-autoscaler/eviction-autoscaler"),
        "{}",
        text(&out)
    );
    let pdbs: Api<PodDisruptionBudget> = ns.api();
    assert!(
        pdbs.get_opt("ul").await.expect("get PDB").is_some(),
        "nothing deleted"
    );

    let out = std::process::Command::new(env!("CARGO_BIN_EXE_eviction-autoscaler"))
        .args(["uninstall", "--dry-run"])
        .env("KUBECONFIG", cluster_dir().join("kubeconfig"))
        .output()
        .expect("run uninstall --dry-run");
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains(&format!("deleted (dry run): {}/pdb/ul", ns.name)),
        "{}",
        text(&out)
    );
    assert!(pdbs.get_opt("ul").await.expect("get PDB").is_some());
}

/// An HPA surge whose HPA cannot be written: the Deployment keeps its surge
/// and markers too (lowered under the raised minimum, the HPA controller
/// would lift it straight back, markers gone); run again once the write
/// is possible, both go back.
#[tokio::test]
async fn uninstall_keeps_a_deployment_whose_hpa_it_cannot_revert() {
    let _g = nodes_lock().await;
    let _ = restart_server(&[]);
    let node = "kwok-node-2";
    let ns = TestNs::new("e2e-uninst-hpa").await;
    let hpas: Api<HorizontalPodAutoscaler> = ns.api();
    hpas.create(&PostParams::default(), &hpa("uh", "uh", 2))
        .await
        .expect("create HPA");
    let (guard, t) = surged_on(&ns, "uh", node).await;
    wait_hpa_min(&hpas, "uh", t, Some(true), Duration::from_secs(30)).await;
    stop_server();

    let deny = DenyUpdates::apply(&ns, "autoscaling", "horizontalpodautoscalers", "false");
    deny.wait_refusing("hpa/uh").await;
    let out = uninstall();
    let first = deployment_state(&ns, "uh").await;
    deny.lift("hpa/uh").await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains(&format!(
            "failed: {}/deployment/uh: keeps its surge and markers: its HPA uh was not reverted",
            ns.name
        )),
        "{}",
        text(&out)
    );
    assert_eq!(first, (t, Some(true)), "the Deployment kept its surge");

    let out = uninstall();
    let again = deployment_state(&ns, "uh").await;
    let h = hpas.get("uh").await.expect("HPA");
    drop(guard);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(again, (2, Some(false)), "{}", text(&out));
    assert_eq!(
        (
            h.spec.and_then(|s| s.min_replicas),
            markers_present(h.metadata.annotations.as_ref())
        ),
        (Some(2), Some(false))
    );
}

/// A surge of the Go project's older versions (its lone marker, the
/// baseline in its EvictionAutoScaler's status): uninstall takes the
/// Deployment back to that baseline before deleting the record.
#[tokio::test]
async fn uninstall_reverts_a_surge_left_by_the_go_project() {
    let _ = restart_server(&[]);
    let ns = TestNs::new("e2e-uninst-go").await;
    stop_server();
    legacy_go_surge(&ns, "ug", 5, 3).await;
    let out = uninstall();
    let state = deployment_state(&ns, "ug").await;
    let _ = restart_server(&[]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(state, (3, Some(false)), "{}", text(&out));
    let d: Deployment = ns.api().get("ug").await.expect("Deployment");
    assert!(
        !d.metadata
            .annotations
            .unwrap_or_default()
            .contains_key(SURGE_MARKER),
        "the Go project's marker removed"
    );
    assert!(
        text(&out).contains(&format!("deleted: {}/evictionautoscaler/ug", ns.name)),
        "{}",
        text(&out)
    );
}

/// A KEDA surge of Deployment `name` (ScaledObject minimum 2, KEDA's HPA
/// at the surged minimum `t`), the server stopped and KEDA's operator
/// paused: a reverted ScaledObject is not followed until it resumes.
async fn keda_surge_lagging(
    prefix: &str,
    name: &str,
) -> (TestNs, Api<DynamicObject>, KedaOperator, Uncordon, i32) {
    install_keda_crd();
    let wh = restart_server(&[]);
    wait_keda_watched(&wh).await;
    let ns = TestNs::new(prefix).await;
    let sos = create_scaled_object(&ns, name, 2).await;
    let keda = KedaOperator::start(&ns, name);
    let (guard, t) = surged_on(&ns, name, "kwok-node-0").await;
    let hpas: Api<HorizontalPodAutoscaler> = ns.api();
    let kedas_hpa = format!("keda-hpa-{name}");
    wait_for(
        "KEDA's HPA at the surged minimum",
        Duration::from_secs(30),
        || async {
            let min = hpas
                .get_opt(&kedas_hpa)
                .await
                .ok()
                .flatten()?
                .spec?
                .min_replicas;
            (min == Some(t)).then_some(())
        },
    )
    .await;
    stop_server();
    keda.pause(true);
    (ns, sos, keda, guard, t)
}

/// `uninstall` run while KEDA's operator is paused, resumed 4 s after the
/// ScaledObject is back at 2: the Deployment stays at `t` with its markers
/// while KEDA lags, then goes to 2 without them; KEDA's HPA is written by
/// KEDA alone.
async fn uninstall_while_keda_lags(
    ns: &TestNs,
    sos: &Api<DynamicObject>,
    name: &str,
    keda: KedaOperator,
    t: i32,
) {
    let run = tokio::task::spawn_blocking(uninstall);
    wait_so_restored(sos, name, 2).await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    let while_lagging = deployment_state(ns, name).await;
    keda.pause(false);
    let out = run.await.expect("uninstall task");
    let after = deployment_state(ns, name).await;
    let (_, foreign) = keda.finish().await;
    assert_eq!(
        while_lagging,
        (t, Some(true)),
        "lowered while KEDA's HPA still said {t}"
    );
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(after, (2, Some(false)), "{}", text(&out));
    assert!(foreign.is_empty(), "KEDA's HPA written by {foreign:?}");
}

/// A KEDA surge: uninstall reverts the ScaledObject, then waits while KEDA's
/// HPA still holds the surged minimum (its operator lagging), and lowers
/// the Deployment once it has caught up. KEDA's HPA is never written by it.
#[tokio::test]
async fn uninstall_lowers_a_keda_deployment_once_kedas_hpa_follows() {
    let _g = nodes_lock().await;
    let (ns, sos, keda, guard, t) = keda_surge_lagging("e2e-uninst-keda", "uk").await;

    uninstall_while_keda_lags(&ns, &sos, "uk", keda, t).await;
    drop(guard);
}

/// A controller killed with SIGKILL leaves its Lease held (never released):
/// uninstall waits it out (unchanged for its 15 s, on this process's clock)
/// and then goes on, rather than refusing for good.
#[tokio::test]
async fn uninstall_waits_out_the_lease_of_a_killed_controller() {
    let wh = restart_server(&[]);
    let leases: Api<Lease> = Api::namespaced(crate::support::client().await, "eviction-autoscaler");
    wait_for("the Lease held", Duration::from_secs(30), || async {
        let l = leases.get_opt("eviction-autoscaler").await.ok()??;
        l.spec?.holder_identity.filter(|h| !h.is_empty())
    })
    .await;
    let killed = std::process::Command::new("kill")
        .args(["-9", &wh.pid().to_string()])
        .status()
        .expect("kill");
    assert!(killed.success());
    let started = std::time::Instant::now();
    let out = uninstall();
    let waited = started.elapsed();
    // The dead holder's Lease gone: the next server leads at once instead
    // of waiting it out too (the tests after this one need a leader).
    let _ = kubectl(&[
        "delete",
        "lease",
        "-n",
        "eviction-autoscaler",
        "eviction-autoscaler",
    ]);
    let _ = restart_server(&[]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        waited >= Duration::from_secs(10),
        "went on after {waited:?} while the killed controller's Lease was still fresh"
    );
}

/// `uninstall` killed halfway: the ScaledObject reverted, KEDA's HPA not
/// yet following, the Deployment still surged with its markers. A second
/// run finds the Deployment's markers with the ScaledObject already at its
/// baseline, waits for KEDA's HPA, and lowers the Deployment: nothing is
/// left surged, nothing is lowered early.
#[tokio::test]
async fn uninstall_killed_halfway_is_finished_by_a_second_run() {
    let _g = nodes_lock().await;
    let (ns, sos, keda, guard, t) = keda_surge_lagging("e2e-uninst-half", "uh").await;

    // The first run: killed while it waits for KEDA's HPA, after the
    // ScaledObject went back.
    let mut first = std::process::Command::new(env!("CARGO_BIN_EXE_eviction-autoscaler"))
        .arg("uninstall")
        .env("KUBECONFIG", cluster_dir().join("kubeconfig"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("run uninstall");
    wait_so_restored(&sos, "uh", 2).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let _ = first.kill();
    let _ = first.wait();
    let halfway = deployment_state(&ns, "uh").await;

    // The second run, KEDA lagging still for a few seconds.
    assert_eq!(
        halfway,
        (t, Some(true)),
        "the first run was killed before the Deployment"
    );
    uninstall_while_keda_lags(&ns, &sos, "uh", keda, t).await;
    drop(guard);
}

/// A surge of the Go project's older versions that the first run cannot
/// revert (updates of the Deployment denied): its record (the
/// EvictionAutoScaler, owned by its PDB as the Go project made it) and that
/// PDB stay, so the second run still knows the baseline and reverts it.
/// Deleted with the rest, the surge would have stayed for good.
#[tokio::test]
async fn a_go_surge_not_reverted_keeps_its_record_for_the_next_run() {
    let _ = restart_server(&[]);
    let ns = TestNs::new("e2e-uninst-gofail").await;
    stop_server();
    legacy_go_surge(&ns, "ug", 5, 3).await;
    let pdbs: Api<PodDisruptionBudget> = ns.api();
    let pdb_uid = pdbs
        .get("ug")
        .await
        .expect("PDB")
        .metadata
        .uid
        .expect("uid");
    let owned = format!(
        r#"{{"metadata":{{"ownerReferences":[{{"apiVersion":"policy/v1","kind":"PodDisruptionBudget","name":"ug","uid":"{pdb_uid}"}}]}}}}"#
    );
    kubectl_ok(&[
        "-n",
        &ns.name,
        "patch",
        "evictionautoscalers.eviction-autoscaler.azure.com",
        "ug",
        "--type=merge",
        "-p",
        &owned,
    ]);
    let deny = DenyUpdates::apply(&ns, "apps", "deployments", "false");
    deny.wait_refusing("deployment/ug").await;
    let out = uninstall();
    let first = deployment_state(&ns, "ug").await.0;
    let eas = eas_api(&ns);
    let kept = (
        pdbs.get_opt("ug").await.expect("get PDB").is_some(),
        eas.get_opt("ug").await.expect("get record").is_some(),
    );
    deny.lift("deployment/ug").await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert_eq!(first, 5, "the write was denied");
    assert_eq!(kept, (true, true), "PDB and record kept:\n{}", text(&out));
    assert!(
        text(&out).contains(&format!(
            "failed: {}/evictionautoscaler/ug: kept: it holds the baseline",
            ns.name
        )),
        "{}",
        text(&out)
    );

    let out = uninstall();
    let again = deployment_state(&ns, "ug").await.0;
    let _ = restart_server(&[]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(again, 3, "back at the recorded baseline:\n{}", text(&out));
}

/// An HPA surge whose minimum someone raised past the surge (the server
/// stopped): uninstall leaves that minimum and does not lower the
/// Deployment below it (it went to the old baseline, under the HPA's own
/// minimum: an HPA with metrics lifts it back, one without leaves it
/// there).
#[tokio::test]
async fn uninstall_keeps_a_deployment_at_its_hpas_raised_minimum() {
    let _g = nodes_lock().await;
    let _ = restart_server(&[]);
    let node = "kwok-node-2";
    let ns = TestNs::new("e2e-uninst-hpamin").await;
    let hpas: Api<HorizontalPodAutoscaler> = ns.api();
    hpas.create(&PostParams::default(), &hpa("um", "um", 2))
        .await
        .expect("create HPA");
    let (guard, t) = surged_on(&ns, "um", node).await;
    wait_hpa_min(&hpas, "um", t, Some(true), Duration::from_secs(30)).await;
    stop_server();
    let raised = t + 1;
    let mut h = hpas.get("um").await.expect("HPA");
    h.spec.as_mut().expect("spec").min_replicas = Some(raised);
    hpas.replace("um", &PostParams::default(), &h)
        .await
        .expect("raise the HPA's minimum");

    let out = uninstall();
    let after = deployment_state(&ns, "um").await;
    let h = hpas.get("um").await.expect("HPA");
    drop(guard);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(
        (
            h.spec.and_then(|s| s.min_replicas),
            markers_present(h.metadata.annotations.as_ref())
        ),
        (Some(raised), Some(false)),
        "the raised minimum stays"
    );
    assert_eq!(after, (t, Some(false)), "{}", text(&out));
}

/// A controller installed in another namespace than `--namespace` names
/// (the flag forgotten): its Lease is found by name and uninstall refuses
/// while it is renewed, naming that Lease.
#[tokio::test]
async fn uninstall_refuses_for_a_controller_leading_in_another_namespace() {
    use k8s_openapi::api::coordination::v1::LeaseSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
    let _ = restart_server(&[]);
    let ns = TestNs::new("e2e-uninst-elsewhere").await;
    stop_server();
    let leases: Api<Lease> = ns.api();
    let now = || MicroTime(k8s_openapi::jiff::Timestamp::now());
    let lease = Lease {
        metadata: kube::api::ObjectMeta {
            name: Some("eviction-autoscaler".into()),
            ..Default::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some("elsewhere-0".into()),
            lease_duration_seconds: Some(15),
            renew_time: Some(now()),
            ..Default::default()
        }),
    };
    leases
        .create(&PostParams::default(), &lease)
        .await
        .expect("create Lease");
    // Renewed every 500 ms, as a leader does, until the run ends.
    let renewing = {
        let leases = leases.clone();
        tokio::spawn(async move {
            loop {
                let patch = serde_json::json!({"spec": {"renewTime": now()}});
                let _ = leases
                    .patch(
                        "eviction-autoscaler",
                        &kube::api::PatchParams::default(),
                        &kube::api::Patch::Merge(&patch),
                    )
                    .await;
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        })
    };
    let out = tokio::task::spawn_blocking(uninstall)
        .await
        .expect("uninstall task");
    renewing.abort();
    let _ = restart_server(&[]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains(&format!(
            "a controller still holds Lease {}/eviction-autoscaler",
            ns.name
        )),
        "{}",
        text(&out)
    );
}
