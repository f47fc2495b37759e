//! Safety invariants of the PDB reconciler on the local control plane:
//! never modify what is not ours, never leave two PDBs over one pod, status
//! fields we stop setting are removed, and a namespace deletion is not an
//! error. The server runs as in pdbs.rs (PDB_CREATE=true).

use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::Api;
use serde_json::json;

use crate::support::*;

const OWNED: &str = "ownedBy";

/// Held by the tests that read the reconcile error counter or make it grow
/// on purpose, so one does not count the other's errors.
pub(crate) static ERROR_COUNTER: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn ours(p: &PodDisruptionBudget) -> bool {
    p.metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.get(OWNED).map(String::as_str) == Some("EvictionAutoScaler"))
}

async fn our_pdbs(ns: &TestNs) -> Vec<String> {
    let api: Api<PodDisruptionBudget> = ns.api();
    api.list(&Default::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default()
        .into_iter()
        .filter(ours)
        .filter_map(|p| p.metadata.name)
        .collect()
}

/// The disruption controller has caught up with the PDB's spec and pods, so
/// it writes the PDB no more while nothing changes.
async fn settled(ns: &TestNs, name: &str, healthy: i32) -> PodDisruptionBudget {
    wait_pdb(ns, name, "the disruption controller settles the PDB", |p| {
        p.status.as_ref().is_some_and(|s| {
            s.observed_generation == p.metadata.generation && s.current_healthy == healthy
        })
    })
    .await
}

/// (a) A Helm chart's PDB: its own labels and annotations, a controller
/// ownerReference to the Deployment, no ownedBy. It is never written (spec,
/// annotations, ownerReferences, resourceVersion unchanged), and the
/// Deployment gets no PDB of ours.
#[tokio::test]
async fn helm_style_pdb_is_left_untouched() {
    let ns = TestNs::new("e2e-helm").await;
    let pdbs: Api<PodDisruptionBudget> = ns.api();
    let mut chart = user_pdb("chart-pdb", "charted", Some(IntOrString::Int(1)), None);
    chart.metadata.labels = Some(
        [
            (
                "app.kubernetes.io/managed-by".to_string(),
                "Helm".to_string(),
            ),
            (
                "app.kubernetes.io/instance".to_string(),
                "charted".to_string(),
            ),
        ]
        .into(),
    );
    chart.metadata.annotations = Some(
        [
            (
                "meta.helm.sh/release-name".to_string(),
                "charted".to_string(),
            ),
            (
                "meta.helm.sh/release-namespace".to_string(),
                ns.name.clone(),
            ),
        ]
        .into(),
    );
    // The chart's PDB exists first (Helm installs PDBs before Deployments) ...
    pdbs.create(&PostParams::default(), &chart).await.unwrap();
    let deps: Api<Deployment> = ns.api();
    let d = deps
        .create(&PostParams::default(), &deployment("charted", 2, None))
        .await
        .unwrap();
    wait_ready(&ns, "charted", 2).await;
    // ... and its operator makes the Deployment its controller.
    let owner = OwnerReference {
        api_version: "apps/v1".into(),
        kind: "Deployment".into(),
        name: "charted".into(),
        uid: d.metadata.uid.clone().unwrap(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    };
    let patch = json!({"metadata": {"ownerReferences": [owner]}});
    pdbs.patch("chart-pdb", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    let before = settled(&ns, "chart-pdb", 2).await;
    assert_eq!(
        before.metadata.owner_references.as_ref().map(Vec::len),
        Some(1)
    );

    let deadline = Instant::now() + Duration::from_secs(6);
    while Instant::now() < deadline {
        let now = pdbs.get("chart-pdb").await.unwrap();
        assert_eq!(before.spec, now.spec, "spec untouched");
        assert_eq!(before.metadata.annotations, now.metadata.annotations);
        assert_eq!(before.metadata.labels, now.metadata.labels);
        assert_eq!(
            before.metadata.owner_references, now.metadata.owner_references,
            "the chart's controller reference stays"
        );
        assert_eq!(
            before.metadata.resource_version, now.metadata.resource_version,
            "no write at all"
        );
        assert!(
            our_pdbs(&ns).await.is_empty(),
            "no PDB of ours for a Deployment the chart protects"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// (b) A user PDB added beside ours (a chart upgrade): ours is deleted within
/// seconds with an Event naming theirs, a real `kubectl drain` of a node
/// holding the pods completes, and ours comes back once theirs is deleted.
#[tokio::test]
async fn our_pdb_steps_aside_and_drain_completes() {
    let _nodes = nodes_lock().await;
    let ns = TestNs::new("e2e-aside").await;
    let deps: Api<Deployment> = ns.api();
    let pdbs: Api<PodDisruptionBudget> = ns.api();
    let node = "kwok-node-0";
    let d = deps
        .create(&PostParams::default(), &deployment("aside", 2, Some(node)))
        .await
        .unwrap();
    let uid = d.metadata.uid.clone().unwrap();
    let pods = wait_ready(&ns, "aside", 2).await;
    assert!(nodes_of(&pods).iter().any(|n| n == node), "a pod on {node}");
    wait_pdb(&ns, "aside", "our PDB with its owner", |p| {
        ours(p)
            && p.metadata
                .owner_references
                .iter()
                .flatten()
                .any(|o| o.uid == uid)
    })
    .await;

    pdbs.create(
        &PostParams::default(),
        &user_pdb("team-aside", "aside", None, Some(IntOrString::Int(1))),
    )
    .await
    .unwrap();
    let added = Instant::now();
    wait_for("our PDB deleted", Duration::from_secs(10), || async {
        our_pdbs(&ns).await.is_empty().then_some(())
    })
    .await;
    let took = added.elapsed();
    record_figure(format!(
        "step aside: our PDB deleted {:.1}s after the user's PDB was created",
        took.as_secs_f64()
    ));
    let events = wait_for("PDBSteppedAside Event", Duration::from_secs(10), || async {
        let out = kubectl_ok(&[
            "get",
            "events.events.k8s.io",
            "-n",
            &ns.name,
            "-o",
            "jsonpath={range .items[*]}{.reason}|{.regarding.kind}|{.note}{\"\\n\"}{end}",
        ]);
        let lines: Vec<String> = out
            .lines()
            .filter(|l| l.starts_with("PDBSteppedAside|"))
            .map(str::to_string)
            .collect();
        (lines.len() >= 2).then_some(lines)
    })
    .await;
    assert!(
        events
            .iter()
            .any(|l| l.contains("|Deployment|") && l.contains("team-aside")),
        "an Event on the Deployment names the PDB that took over: {events:?}"
    );
    assert!(
        events
            .iter()
            .any(|l| l.contains("|PodDisruptionBudget|") && l.contains("team-aside")),
        "and one on our PDB: {events:?}"
    );
    settled(&ns, "team-aside", 2).await;

    let drain_started = Instant::now();
    let out = tokio::task::spawn_blocking(move || {
        kubectl(&[
            "drain",
            node,
            "--pod-selector=app=aside",
            "--ignore-daemonsets",
            "--delete-emptydir-data",
            "--timeout=90s",
        ])
    })
    .await
    .unwrap();
    let drained_in = drain_started.elapsed();
    uncordon(node);
    record_figure(format!(
        "step aside: kubectl drain of {node} (pods of one Deployment, the user's PDB only) took {:.1}s",
        drained_in.as_secs_f64()
    ));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "drain failed:\n{text}");
    assert!(
        !text.contains("more than one PodDisruptionBudget"),
        "one budget per pod:\n{text}"
    );
    assert!(our_pdbs(&ns).await.is_empty(), "ours stays away");

    pdbs.delete("team-aside", &DeleteParams::default())
        .await
        .unwrap();
    wait_pdb(&ns, "aside", "ours back once theirs is gone", ours).await;
}

/// (c) A user PDB switched from minAvailable to maxUnavailable: the
/// EvictionAutoScaler's status no longer carries the old minimum, and it is
/// not written again while nothing changes. Under the nodes' lock: a drain
/// test's cordon beside it surged `flip` (its pods land anywhere), a change
/// the record rightly follows (session 50's suite: a surge and its revert
/// inside the 5 s window).
#[tokio::test]
async fn status_field_we_stop_setting_is_cleared() {
    let _nodes = nodes_lock().await;
    let ns = TestNs::new("e2e-clear").await;
    let pdbs: Api<PodDisruptionBudget> = ns.api();
    pdbs.create(
        &PostParams::default(),
        &user_pdb("flip-pdb", "flip", Some(IntOrString::Int(2)), None),
    )
    .await
    .unwrap();
    let deps: Api<Deployment> = ns.api();
    deps.create(&PostParams::default(), &deployment("flip", 2, None))
        .await
        .unwrap();
    wait_ready(&ns, "flip", 2).await;
    let eas = eas_api(&ns);
    wait_for("status minReplicas 2", Duration::from_secs(30), || async {
        let e = eas.get_opt("flip-pdb").await.ok().flatten()?;
        (e.data["status"]["minReplicas"].as_i64() == Some(2)).then_some(())
    })
    .await;

    let flip = json!({"spec": {"minAvailable": null, "maxUnavailable": 1}});
    pdbs.patch("flip-pdb", &PatchParams::default(), &Patch::Merge(&flip))
        .await
        .unwrap();
    // A steady cluster costs no status write. Steady means the PDB too: the
    // disruption controller may write its status again under load, which
    // the record follows, so a window in which the PDB changed is retried.
    for attempt in 1..=3 {
        let p = settled(&ns, "flip-pdb", 2).await;
        let allowed = p.status.as_ref().map(|s| s.disruptions_allowed);
        let e = wait_for(
            "status without minReplicas, with the new disruptionsAllowed",
            Duration::from_secs(30),
            || async {
                let e = eas.get_opt("flip-pdb").await.ok().flatten()?;
                let st = &e.data["status"];
                (st.get("minReplicas").is_none()
                    && st["disruptionsAllowed"].as_i64().map(|v| v as i32) == allowed)
                    .then_some(e)
            },
        )
        .await;
        let rv = e.metadata.resource_version.clone();
        tokio::time::sleep(Duration::from_secs(5)).await;
        let later = eas.get("flip-pdb").await.unwrap();
        let pdb_later = pdbs.get("flip-pdb").await.unwrap();
        if pdb_later.metadata.resource_version != p.metadata.resource_version {
            assert!(attempt < 3, "the PDB never held still for 5 s");
            continue;
        }
        assert_eq!(
            later.metadata.resource_version, rv,
            "no status write in a steady cluster: {:?}",
            later.data["status"]
        );
        break;
    }
}

/// (d) Deleting a namespace that holds our PDBs and EvictionAutoScalers is
/// no reconcile error.
#[tokio::test]
async fn namespace_deletion_is_not_a_reconcile_error() {
    let _counter = ERROR_COUNTER.lock().await;
    let wh = WebhookInfo::get();
    let ns = TestNs::new("e2e-nsdel").await;
    let deps: Api<Deployment> = ns.api();
    let eas = eas_api(&ns);
    let names = ["del-a", "del-b", "del-c", "del-d"];
    for n in names {
        deps.create(&PostParams::default(), &deployment(n, 2, None))
            .await
            .unwrap();
    }
    for n in names {
        wait_for(
            &format!("status of the EvictionAutoScaler {n}"),
            Duration::from_secs(60),
            || async {
                let e = eas.get_opt(n).await.ok().flatten()?;
                e.data["status"]["conditions"].is_array().then_some(())
            },
        )
        .await;
    }
    // The reconciler's errors (PDB and status writes); the total includes the
    // surge worker's, recorded as a figure.
    let errors = || {
        wh.metric_sum(
            "eviction_autoscaler_reconcile_errors_total",
            &["controller=\"pdb\""],
        ) + wh.metric_sum(
            "eviction_autoscaler_reconcile_errors_total",
            &["controller=\"status\""],
        )
    };
    let total = || wh.metric_sum("eviction_autoscaler_reconcile_errors_total", &[]);
    let (before, total_before) = (errors(), total());
    let started = Instant::now();
    kubectl_ok(&[
        "delete",
        "namespace",
        &ns.name,
        "--wait=true",
        "--timeout=120s",
    ]);
    let took = started.elapsed();
    // Passes that ran on the last events of the deletion.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (after, total_after) = (errors(), total());
    record_figure(format!(
        "namespace deletion with 4 owned PDBs: {:.1}s, reconciler errors {} -> {}, \
         all controllers {} -> {}",
        took.as_secs_f64(),
        before + 0.0, // -0.0 (an empty sum) prints as "-0"
        after + 0.0,
        total_before + 0.0,
        total_after + 0.0
    ));
    assert_eq!(
        after, before,
        "a namespace deletion counted as reconcile errors"
    );
    // The counter is shared with the whole run; the log names the namespace.
    let warned: Vec<String> = wh
        .log()
        .lines()
        .filter(|l| l.contains(&ns.name) && l.contains("WARN") && l.contains("write failed"))
        .map(str::to_string)
        .collect();
    assert!(
        warned.is_empty(),
        "warnings about the namespace: {warned:#?}"
    );
}

/// A write that keeps failing (an admission policy refuses every update of
/// one of our PDBs) is retried with per-object backoff, not on every pass,
/// while the other PDBs of the namespace keep following their Deployments.
#[tokio::test]
async fn failing_write_backs_off_and_does_not_hold_back_others() {
    let _counter = ERROR_COUNTER.lock().await;
    // No drain of another test beside it: a cordoned node would surge
    // `stuck`, and during a surge its PDB is (rightly) not written.
    let _nodes = nodes_lock().await;
    let wh = WebhookInfo::get();
    let ns = TestNs::new("e2e-backoff").await;
    let deps: Api<Deployment> = ns.api();
    for n in ["stuck", "free"] {
        deps.create(&PostParams::default(), &deployment(n, 2, None))
            .await
            .unwrap();
        wait_pdb(&ns, n, "our PDB", ours).await;
    }
    // Every update of PDB stuck refused from now on.
    let deny = DenyUpdates::apply(
        &ns,
        "policy",
        "poddisruptionbudgets",
        "object.metadata.name != 'stuck'",
    );
    deny.wait_refusing("pdb/stuck").await;
    let pdbs: Api<PodDisruptionBudget> = ns.api();

    let errors = || {
        wh.metric_sum(
            "eviction_autoscaler_reconcile_errors_total",
            &["controller=\"pdb\""],
        )
    };
    let before = errors();
    kubectl_ok(&["-n", &ns.name, "scale", "deployment/stuck", "--replicas=3"]);
    let started = Instant::now();
    // Churn: a watch event every 250 ms, so without backoff every pass retries.
    let window = Duration::from_secs(16);
    let mut scaled_free = None;
    let mut n = 0;
    while started.elapsed() < window {
        n += 1;
        let tick = json!({"metadata": {"annotations": {"e2e/tick": n.to_string()}}});
        deps.patch("stuck", &PatchParams::default(), &Patch::Merge(&tick))
            .await
            .unwrap();
        if n == 8 {
            kubectl_ok(&["-n", &ns.name, "scale", "deployment/free", "--replicas=4"]);
            scaled_free = Some(Instant::now());
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let failures = errors() - before;
    let free = pdbs.get("free").await.unwrap();
    let stuck = pdbs.get("stuck").await.unwrap();
    record_figure(format!(
        "backoff: {failures} failed writes of one frozen PDB in {}s of watch churn ({n} events); \
         the other PDB followed its Deployment",
        window.as_secs()
    ));
    assert_eq!(
        free.spec.as_ref().and_then(|s| s.min_available.clone()),
        Some(IntOrString::Int(4)),
        "the other PDB followed its Deployment (scaled {:?} ago)",
        scaled_free.map(|t| t.elapsed())
    );
    assert_eq!(
        stuck.spec.as_ref().and_then(|s| s.min_available.clone()),
        Some(IntOrString::Int(2)),
        "the policy froze it"
    );
    // 1 s, 2 s, 4 s, 8 s: attempts at about 0, 1, 3, 7 and 15 s.
    assert!(
        (2.0..=6.0).contains(&failures),
        "{failures} failed attempts in {window:?}: not backed off"
    );
}

async fn wait_owned_pdb(ns: &TestNs, name: &str) {
    wait_for(
        &format!("our PDB for {name}"),
        Duration::from_secs(60),
        || async { owned_pdbs(ns).await.iter().any(|p| p == name).then_some(()) },
    )
    .await;
}

/// Waits for the Degraded PDBSelectorOverlap condition on `shop`'s record.
async fn wait_shop_overlap(ns: &TestNs) {
    wait_for(
        "Degraded PDBSelectorOverlap on shop",
        Duration::from_secs(60),
        || async {
            let out = kubectl(&[
                "get",
                "evictionautoscalers",
                "shop",
                "-n",
                &ns.name,
                "-o",
                "yaml",
            ]);
            String::from_utf8_lossy(&out.stdout)
                .contains("PDBSelectorOverlap")
                .then_some(())
        },
    )
    .await;
}

/// Overlapping Deployment selectors: `shop` selects `app=shop`, which also
/// covers the pods of `api`, protected by our PDB `api`. Neither the
/// admission webhook nor the reconciler makes a second PDB over api's pods;
/// Degraded and an Event on `shop` say why. In the other order (shop's
/// first), shop's steps aside and api gets its own. Then the user protects api's
/// pods with a PDB of their own while ours for `shop` would cover them: none
/// of ours stays over them.
#[tokio::test]
async fn overlapping_selectors_never_make_a_second_pdb() {
    let ns = TestNs::new("e2e-overlap").await;
    let deps: Api<Deployment> = ns.api();
    let pdbs: Api<PodDisruptionBudget> = ns.api();
    let api_labels: &[(&str, &str)] = &[("app", "shop"), ("role", "api")];
    deps.create(
        &PostParams::default(),
        &labelled("api", api_labels, api_labels),
    )
    .await
    .expect("create api");
    wait_owned_pdb(&ns, "api").await;
    deps.create(
        &PostParams::default(),
        &labelled(
            "shop",
            &[("app", "shop")],
            &[("app", "shop"), ("role", "web")],
        ),
    )
    .await
    .expect("create shop");
    wait_shop_overlap(&ns).await;
    // Two reconcile passes later (RESYNC is 30 s; events mark the namespace at once).
    tokio::time::sleep(Duration::from_secs(3)).await;
    let names = |l: Vec<PodDisruptionBudget>| -> Vec<String> {
        l.into_iter().filter_map(|p| p.metadata.name).collect()
    };
    let all = names(pdbs.list(&Default::default()).await.expect("list").items);
    assert_eq!(all, vec!["api".to_string()], "one PDB over api's pods");
    assert!(
        event_count(&ns.name, "PDBSelectorOverlap") >= 1,
        "{}",
        event_log(&ns.name)
    );

    // The other order: shop's PDB first, then a user PDB over api's pods.
    let ns2 = TestNs::new("e2e-overlap2").await;
    let deps2: Api<Deployment> = ns2.api();
    let pdbs2: Api<PodDisruptionBudget> = ns2.api();
    deps2
        .create(
            &PostParams::default(),
            &labelled(
                "shop",
                &[("app", "shop")],
                &[("app", "shop"), ("role", "web")],
            ),
        )
        .await
        .expect("create shop");
    wait_owned_pdb(&ns2, "shop").await;
    // api's pods are covered by shop's PDB, sized for shop's pods alone: it
    // steps aside and api gets its own, as in the first order, with never
    // two PDBs at once (the admission webhook leaves api's to the
    // reconciler, which deletes shop's first). Before session 45, shop's
    // stayed over api's pods for good.
    let mut api = labelled("api", api_labels, api_labels);
    api.metadata.annotations = None;
    deps2
        .create(&PostParams::default(), &api)
        .await
        .expect("create api");
    wait_sole_pdb(&ns2, "api").await;
    wait_shop_overlap(&ns2).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        names(pdbs2.list(&Default::default()).await.expect("list").items),
        vec!["api".to_string()],
        "nothing made again"
    );
    let mut theirs = user_pdb("api-budget", "api", Some(IntOrString::Int(1)), None);
    if let Some(spec) = theirs.spec.as_mut() {
        spec.selector = Some(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector {
                match_labels: Some(
                    api_labels
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect(),
                ),
                match_expressions: None,
            },
        );
    }
    pdbs2
        .create(&PostParams::default(), &theirs)
        .await
        .expect("user PDB");
    wait_for(
        "ours steps aside for the user's PDB",
        Duration::from_secs(60),
        || async {
            let l = names(pdbs2.list(&Default::default()).await.ok()?.items);
            (l == vec!["api-budget".to_string()]).then_some(())
        },
    )
    .await;
    assert!(
        event_count(&ns2.name, "PDBSteppedAside") >= 1,
        "{}",
        event_log(&ns2.name)
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        names(pdbs2.list(&Default::default()).await.expect("list").items),
        vec!["api-budget".to_string()],
        "ours is not made again"
    );
}

/// The user's PDB `db` over every pod labelled `tier=db`.
async fn create_db_pdb(ns: &TestNs, min: Option<IntOrString>, max: Option<IntOrString>) {
    let mut theirs = user_pdb("db", "db", min, max);
    if let Some(spec) = theirs.spec.as_mut() {
        spec.selector = Some(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector {
                match_labels: Some([("tier".to_string(), "db".to_string())].into()),
                match_expressions: None,
            },
        );
    }
    let pdbs: Api<PodDisruptionBudget> = ns.api();
    pdbs.create(&PostParams::default(), &theirs)
        .await
        .expect("user PDB");
}

/// Creates Deployment `web` (selector app=web, template app=web,tier=fe),
/// whose selector also covers the pod `db-0` under the user's PDB `db`, and
/// waits for its Degraded PDBSelectorOverlap naming that pod.
async fn web_overlapping_db_0(ns: &TestNs) {
    let deps: Api<Deployment> = ns.api();
    deps.create(
        &PostParams::default(),
        &labelled("web", &[("app", "web")], &[("app", "web"), ("tier", "fe")]),
    )
    .await
    .expect("create web");
    wait_for(
        "Degraded PDBSelectorOverlap on web, naming db-0",
        Duration::from_secs(60),
        || async {
            let out = kubectl(&[
                "get",
                "evictionautoscalers",
                "web",
                "-n",
                &ns.name,
                "-o",
                "yaml",
            ]);
            let y = String::from_utf8_lossy(&out.stdout).to_string();
            (y.contains("PDBSelectorOverlap") && y.contains("Pod db-0")).then_some(())
        },
    )
    .await;
}

/// A Deployment whose selector (`app=web`) is broader than its template
/// also selects pods that are not its own: here a bare pod `app=web,
/// tier=db` (a StatefulSet's of the same chart would do the same) under the
/// user's PDB `db`. No PDB of ours is made over that pod (two budgets over
/// one pod make every eviction of it fail); when the pod goes, ours is made;
/// when such a pod comes back, ours steps aside.
#[tokio::test]
async fn a_pod_another_pdb_protects_never_gets_a_second_pdb() {
    let ns = TestNs::new("e2e-podov").await;
    let pdbs: Api<PodDisruptionBudget> = ns.api();
    let pods: Api<k8s_openapi::api::core::v1::Pod> = ns.api();
    let db: &[(&str, &str)] = &[("app", "web"), ("tier", "db")];
    create_db_pdb(&ns, Some(IntOrString::Int(1)), None).await;
    pods.create(&PostParams::default(), &bare_pod("db-0", db))
        .await
        .expect("db pod");
    let running = |name: &'static str| {
        let pods = pods.clone();
        async move {
            let p = pods.get_opt(name).await.ok().flatten()?;
            (p.status?.phase.as_deref() == Some("Running")).then_some(())
        }
    };
    wait_for("db-0 running", Duration::from_secs(60), || running("db-0")).await;
    web_overlapping_db_0(&ns).await;
    let names = || pdb_names(&pdbs);
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        names().await,
        vec!["db".to_string()],
        "no second PDB over db-0"
    );

    // The pod goes: nothing else of ours would overlap, so web gets its PDB.
    pods.delete("db-0", &DeleteParams::default().grace_period(0))
        .await
        .expect("delete db-0");
    wait_owned_pdb(&ns, "web").await;

    // Such a pod comes again: ours steps aside, theirs stays.
    pods.create(&PostParams::default(), &bare_pod("db-1", db))
        .await
        .expect("db pod again");
    wait_for(
        "ours steps aside for the PDB over db-1",
        Duration::from_secs(60),
        || async { (names().await == vec!["db".to_string()]).then_some(()) },
    )
    .await;
    assert!(
        event_count(&ns.name, "PDBSteppedAside") >= 1,
        "{}",
        event_log(&ns.name)
    );
}

/// As above with a StatefulSet's pod (`db-0`, app=web, tier=db) under the
/// user's PDB: when it is deleted, the StatefulSet makes it again under its
/// name only once the old one is gone (its grace period; a finalizer holds
/// it here). No PDB of ours is made in that gap: it would be a second
/// budget over the new db-0 (every eviction of it refused until ours
/// stepped aside, and again at its next deletion).
#[tokio::test]
async fn a_statefulset_pod_being_made_again_gets_no_second_pdb_meanwhile() {
    let ns = TestNs::new("e2e-stsgap").await;
    let pdbs: Api<PodDisruptionBudget> = ns.api();
    let pods: Api<k8s_openapi::api::core::v1::Pod> = ns.api();
    create_db_pdb(&ns, None, Some(IntOrString::Int(1))).await;
    let mut template = deployment("x", 1, None).spec.expect("spec").template;
    let labels: std::collections::BTreeMap<String, String> = [("app", "web"), ("tier", "db")]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    if let Some(m) = template.metadata.as_mut() {
        m.labels = Some(labels.clone());
    }
    let sts: k8s_openapi::api::apps::v1::StatefulSet = serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": "db"},
        "spec": {"replicas": 1, "serviceName": "db",
                 "selector": {"matchLabels": labels},
                 "template": template}
    }))
    .expect("StatefulSet");
    let stss: Api<k8s_openapi::api::apps::v1::StatefulSet> = ns.api();
    stss.create(&PostParams::default(), &sts)
        .await
        .expect("create StatefulSet db");
    let running = || {
        let pods = pods.clone();
        async move {
            let p = pods.get_opt("db-0").await.ok().flatten()?;
            (p.metadata.deletion_timestamp.is_none()
                && p.status?.phase.as_deref() == Some("Running"))
            .then_some(())
        }
    };
    wait_for("db-0 running", Duration::from_secs(60), running).await;
    web_overlapping_db_0(&ns).await;
    let names = || pdb_names(&pdbs);
    let only_theirs = vec!["db".to_string()];

    // Held terminating by a finalizer, as by a long grace period; taken
    // off however the test ends (else the namespace is never deleted).
    const HOLD: &str = "e2e.eviction-autoscaler.azure.com/hold";
    let _unhold = Unhold {
        namespace: ns.name.clone(),
        pods: &["db-0"],
    };
    pods.patch(
        "db-0",
        &PatchParams::default(),
        &Patch::Merge(&json!({"metadata": {"finalizers": [HOLD]}})),
    )
    .await
    .expect("add the finalizer");
    pods.delete("db-0", &DeleteParams::default())
        .await
        .expect("delete db-0");
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(6) {
        assert_eq!(
            names().await,
            only_theirs,
            "no PDB of ours while db-0 is terminating"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    pods.patch(
        "db-0",
        &PatchParams::default(),
        &Patch::Merge(&json!({"metadata": {"finalizers": null}})),
    )
    .await
    .expect("remove the finalizer");
    wait_for("db-0 made again", Duration::from_secs(60), running).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        names().await,
        only_theirs,
        "no second PDB over the new db-0"
    );
    assert_eq!(
        event_count(&ns.name, "PDBSteppedAside"),
        0,
        "none of ours was made to step aside:\n{}",
        event_log(&ns.name)
    );

    // Scaled down: db-0 goes and is not made again. It counts as leaving
    // for LEAVING_FOR (15 s), then its namespace is planned again and web
    // gets its PDB, without waiting for the reconciler's resync (every
    // 30 s: up to 45 s after the pod went).
    stss.patch(
        "db",
        &PatchParams::default(),
        &Patch::Merge(&json!({"spec": {"replicas": 0}})),
    )
    .await
    .expect("scale db to 0");
    wait_for("db-0 gone", Duration::from_secs(60), || async {
        pods.get_opt("db-0")
            .await
            .ok()
            .and_then(|p| p.is_none().then_some(()))
    })
    .await;
    let gone = Instant::now();
    wait_for(
        "web's PDB within 30 s of db-0 going",
        Duration::from_secs(30),
        || async { (names().await == vec!["db".to_string(), "web".to_string()]).then_some(()) },
    )
    .await;
    eprintln!("web's PDB came {:?} after db-0 went", gone.elapsed());
}

/// Two Deployments whose templates do not overlap (`lp`: team=lp; `lw`:
/// app=lw), each with our PDB, and a bare pod labelled for both (a Job's
/// `app=lw, team=lp`): two budgets of ours over it. Only the PDB of the
/// Deployment whose name sorts after steps aside, and the rest stays as it
/// is: no PDB made and stepped aside again and again (a write loop, half
/// the time the pod under two budgets).
#[tokio::test]
async fn two_of_our_pdbs_over_a_pod_labelled_for_both_settle_on_one() {
    let ns = TestNs::new("e2e-podtwo").await;
    let deps: Api<Deployment> = ns.api();
    let pdbs: Api<PodDisruptionBudget> = ns.api();
    let pods: Api<k8s_openapi::api::core::v1::Pod> = ns.api();
    deps.create(
        &PostParams::default(),
        &labelled("lw", &[("app", "lw")], &[("app", "lw")]),
    )
    .await
    .expect("create lw");
    deps.create(
        &PostParams::default(),
        &labelled(
            "lp",
            &[("team", "lp")],
            &[("team", "lp"), ("app", "billing")],
        ),
    )
    .await
    .expect("create lp");
    wait_owned_pdb(&ns, "lw").await;
    wait_owned_pdb(&ns, "lp").await;
    let lp = pdbs.get("lp").await.expect("lp's PDB");
    pods.create(
        &PostParams::default(),
        &bare_pod("migrate-1", &[("app", "lw"), ("team", "lp")]),
    )
    .await
    .expect("the pod labelled for both");
    let names = || async {
        let l = pdbs.list(&Default::default()).await.expect("list").items;
        let mut n: Vec<(String, Option<String>)> = l
            .into_iter()
            .map(|p| (p.metadata.name.unwrap_or_default(), p.metadata.uid))
            .collect();
        n.sort();
        n
    };
    let settled = vec![("lp".to_string(), lp.metadata.uid.clone())];
    wait_for(
        "lw's PDB stepped aside, lp's kept",
        Duration::from_secs(60),
        || async { (names().await == settled).then_some(()) },
    )
    .await;
    // A loop would make lw's again (and lp's step aside) within a pass or two.
    for _ in 0..10 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(names().await, settled, "{}", event_log(&ns.name));
    }
    // One step-aside: its Event on the Deployment and on the PDB.
    assert_eq!(
        event_count(&ns.name, "PDBSteppedAside"),
        2,
        "{}",
        event_log(&ns.name)
    );
}
