//! Nothing stalls (behaviour.md section 8, invariant 5): an Events API that
//! answers slowly costs the controllers nothing. A validating webhook on
//! Events in the test's namespace points at a port that never answers, so
//! the apiserver spends its `timeoutSeconds` on every Event created there
//! (then lets it through: failurePolicy Ignore). The surge worker used to
//! send its Events one after another after each pass and plan nothing
//! meanwhile: 8 surges meant 8 slow Events before the next surge.

use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, PostParams};

use crate::support::*;

/// The black hole's timeoutSeconds: each Event in the namespace takes this long.
const EVENT_DELAY: Duration = Duration::from_secs(3);
/// Deployments surged by the first cordon: their Events alone kept the old
/// worker busy 8 x 3 s.
const FIRST: usize = 8;

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
    let _slow = SlowEvents::install(&ns, EVENT_DELAY).await;

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

/// Our PDB updates owed in the slow namespace.
const HUNG: usize = 12;
/// The hung webhook's timeoutSeconds: each PDB update there takes this long, then fails.
const HUNG_DELAY: Duration = Duration::from_secs(4);

/// A hung admission webhook on the PDBs of one namespace (failurePolicy
/// Fail: each update answered 500 after its timeout). The reconciler's
/// writes there are slow failures: after the first, the rest of that
/// namespace waits for a later pass, and a step-aside needed in another
/// namespace is not held behind them (a pass ends when all its namespaces
/// have; 12 slow writes in a row held the next one about 48 s).
#[tokio::test]
async fn a_hung_webhook_in_one_namespace_does_not_hold_back_another() {
    // Its writes fail on purpose: not while another test counts errors.
    let _counter = crate::safety::ERROR_COUNTER.lock().await;
    let slow_ns = TestNs::new("e2e-hung-pdbs").await;
    let deps: Api<Deployment> = slow_ns.api();
    let names: Vec<String> = (0..HUNG).map(|i| format!("h-{i}")).collect();
    for n in &names {
        deps.create(&PostParams::default(), &deployment(n, 1, None))
            .await
            .expect("create Deployment");
    }
    for n in &names {
        wait_pdb(&slow_ns, n, "our PDB", |_| true).await;
    }
    let _hung = hung_pdb_updates(&slow_ns, "h-0", HUNG_DELAY).await;
    let other = TestNs::new("e2e-hung-other").await;
    let pdbs = one_of_ours(&other).await;

    // HUNG PDB updates owed in the slow namespace (minAvailable follows
    // replicas), all at once: one pass plans them together.
    kubectl_ok(&[
        "scale",
        "-n",
        &slow_ns.name,
        "deployment",
        "--all",
        "--replicas=2",
    ]);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let took = steps_aside_within(&pdbs, HUNG_DELAY * (HUNG as u32) / 3).await;
    record_figure(format!(
        "hung PDB webhook ({HUNG_DELAY:?}, {HUNG} updates owed in its namespace): a step-aside in another namespace {:.1}s after its cause",
        took.as_secs_f64()
    ));
}

/// A hung webhook on PDB updates in `ns` (see [`HungWebhook`]), once an
/// update of its PDB `pdb` is seen taking `delay` and failing.
async fn hung_pdb_updates(ns: &TestNs, pdb: &str, delay: Duration) -> HungWebhook {
    let hung = HungWebhook::apply(
        ns,
        &["policy"],
        "poddisruptionbudgets",
        &["UPDATE"],
        "Fail",
        delay,
    );
    wait_for(
        "the hung webhook in force (a PDB update there slow, then refused)",
        Duration::from_secs(30),
        || async {
            let t = Instant::now();
            let out = kubectl(&[
                "annotate",
                "-n",
                &ns.name,
                &format!("pdb/{pdb}"),
                "e2e-probe=1",
                "--overwrite",
                "--dry-run=server",
            ]);
            (!out.status.success() && t.elapsed() >= delay - Duration::from_millis(500))
                .then_some(())
        },
    )
    .await;
    hung
}

/// Deployment `o` in `ns`, once our PDB is over it; the namespace's PDBs.
async fn one_of_ours(ns: &TestNs) -> Api<k8s_openapi::api::policy::v1::PodDisruptionBudget> {
    let deps: Api<Deployment> = ns.api();
    deps.create(&PostParams::default(), &deployment("o", 1, None))
        .await
        .expect("create Deployment");
    wait_pdb(ns, "o", "our PDB", |_| true).await;
    ns.api()
}

/// A user's PDB over `o`'s pods: how long ours took to step aside (one
/// budget per pod), failing after `within`.
async fn steps_aside_within(
    pdbs: &Api<k8s_openapi::api::policy::v1::PodDisruptionBudget>,
    within: Duration,
) -> Duration {
    let asked = Instant::now();
    pdbs.create(
        &PostParams::default(),
        &user_pdb(
            "o-user",
            "o",
            Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(1)),
            None,
        ),
    )
    .await
    .expect("create the user's PDB");
    wait_for(
        "ours stepping aside in the healthy namespace",
        within,
        || async { pdbs.get_opt("o").await.ok()?.is_none().then_some(()) },
    )
    .await;
    asked.elapsed()
}

/// Namespaces whose PDB updates hang, more than the reconciler's 8 slots.
const HUNG_SPACES: usize = 16;
/// Their webhooks' timeoutSeconds.
const HUNG_SPACES_DELAY: Duration = Duration::from_secs(8);

/// A hung admission webhook on the PDBs of many namespaces at once (more
/// than the namespaces planned at once): each of their jobs waits for one
/// timeout. Those jobs keep running but give up their slots, so a
/// step-aside in a healthy namespace is not queued behind them. When a
/// pass waited for all its namespaces, 16 of them took two rounds of 8 s,
/// and the step-aside waited for the pass to end.
#[tokio::test]
async fn hung_webhooks_in_many_namespaces_do_not_hold_back_another() {
    let _counter = crate::safety::ERROR_COUNTER.lock().await;
    let mut spaces = Vec::new();
    for i in 0..HUNG_SPACES {
        let ns = TestNs::new(&format!("e2e-hungs-{i}")).await;
        let deps: Api<Deployment> = ns.api();
        deps.create(&PostParams::default(), &deployment("h", 1, None))
            .await
            .expect("create Deployment");
        spaces.push(ns);
    }
    for ns in &spaces {
        wait_pdb(ns, "h", "our PDB", |_| true).await;
    }
    let mut hung = Vec::new();
    for ns in &spaces {
        hung.push(hung_pdb_updates(ns, "h", HUNG_SPACES_DELAY).await);
    }
    let other = TestNs::new("e2e-hungs-other").await;
    let pdbs = one_of_ours(&other).await;

    // One PDB update owed in each hung namespace (minAvailable follows
    // replicas), all marked at once.
    for ns in &spaces {
        kubectl_ok(&["scale", "-n", &ns.name, "deployment/h", "--replicas=2"]);
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let took = steps_aside_within(&pdbs, HUNG_SPACES_DELAY).await;
    record_figure(format!(
        "hung PDB webhooks in {HUNG_SPACES} namespaces ({HUNG_SPACES_DELAY:?} each): a step-aside in another namespace {:.1}s after its cause",
        took.as_secs_f64()
    ));
    drop(hung);
}
