//! A scale-down that the PDB's status has not counted yet (the race behind
//! the one availability dip of the drain benchmark). A Deployment goes from
//! 4 to 3 under a PDB with minAvailable 3; before the disruption controller
//! recounts, the status still says 4 healthy and one disruption allowed, and
//! the apiserver checks the status, not the pods. An eviction then would
//! leave 2 Ready pods. The webhook holds it until the recount, which blocks
//! it, and the surge makes room the usual way: Ready never goes below 3.
//!
//! The race is made deterministic without touching the other controllers:
//! a ValidatingAdmissionPolicy, bound to this test's namespace only, refuses
//! the disruption controller's PDB status writes, so the real deployment
//! and ReplicaSet controllers scale down while the status stays as it was.
//! Removing the binding lets the recount through. (Pausing the whole
//! controller-manager instead made the ReplicaSet controller act on a stale
//! view when resumed: it deleted a pod of its own.) Cluster-wide objects, so
//! it runs with the other chaos tests, one at a time.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::{
    PodDisruptionBudget, PodDisruptionBudgetSpec, PodDisruptionBudgetStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{EvictParams, Patch, PatchParams, PostParams};
use kube::Api;

use crate::support::*;

const HOLDS: &str = "eviction_autoscaler_eviction_holds_total";
/// kube-controller-manager's disruption controller, with
/// `--use-service-account-credentials` (tests/cluster/up.sh).
const DISRUPTION_CONTROLLER: &str = "system:serviceaccount:kube-system:disruption-controller";
const POLICY: &str = "e2e-freeze-pdb-status";

/// The policy and its binding (to `ns` only); deleted when dropped, so a
/// failing test never leaves the disruption controller refused.
struct StatusFrozen {
    ns: String,
    /// The PDB (and app label) whose status writes are checked.
    pdb: String,
}

impl StatusFrozen {
    /// Applies the policy and waits until the disruption controller's
    /// status writes of `pdb` are refused.
    async fn freeze(ns: &str, pdb: &str) -> StatusFrozen {
        let frozen = StatusFrozen::apply(ns, pdb);
        wait_for(
            "the policy to refuse the disruption controller's status writes",
            Duration::from_secs(30),
            || async { (frozen.dc_may_write() == Some(false)).then_some(()) },
        )
        .await;
        frozen
    }

    /// Lets the recount through, and gives the disruption controller a pod
    /// event so that it does not wait out its retry backoff.
    async fn thaw(&self) {
        self.lift();
        wait_for(
            "the disruption controller allowed to write again",
            Duration::from_secs(30),
            || async { (self.dc_may_write() == Some(true)).then_some(()) },
        )
        .await;
        let _ = kubectl(&[
            "-n",
            &self.ns,
            "annotate",
            "pods",
            "-l",
            &format!("app={}", self.pdb),
            "e2e-nudge=1",
            "--overwrite",
        ]);
    }

    fn apply(ns: &str, pdb: &str) -> StatusFrozen {
        let manifest = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": [
            {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
             "metadata": {"name": POLICY},
             "spec": {"failurePolicy": "Fail",
                "matchConstraints": {"resourceRules": [{"apiGroups": ["policy"], "apiVersions": ["v1"],
                    "operations": ["UPDATE"], "resources": ["poddisruptionbudgets/status"]}]},
                "validations": [{"expression": format!("request.userInfo.username != '{DISRUPTION_CONTROLLER}'"),
                    "message": "PDB status frozen by the chaos test recount"}]}},
            {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
             "metadata": {"name": POLICY},
             "spec": {"policyName": POLICY, "validationActions": ["Deny"],
                "matchResources": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}}}}}
        ]});
        let path = std::env::temp_dir().join(format!("{POLICY}-{}.json", std::process::id()));
        std::fs::write(&path, manifest.to_string()).expect("write policy");
        kubectl_ok(&["apply", "-f", &path_str(&path)]);
        StatusFrozen {
            ns: ns.to_string(),
            pdb: pdb.to_string(),
        }
    }

    /// Whether the disruption controller may write this PDB's status now:
    /// a server-side dry run of its own kind of write (an update of the
    /// status subresource, as that controller), refused by this policy and
    /// by nothing else. None: the PDB changed between the read and the dry
    /// run (a conflict is answered before admission runs), so ask again.
    fn dc_may_write(&self) -> Option<bool> {
        let current = kubectl_ok(&["-n", &self.ns, "get", "pdb", &self.pdb, "-o", "json"]);
        let path = std::env::temp_dir().join(format!("{POLICY}-pdb-{}.json", std::process::id()));
        std::fs::write(&path, current).expect("write PDB");
        let out = kubectl(&[
            "replace",
            "--subresource=status",
            "-f",
            &path_str(&path),
            "--dry-run=server",
            &format!("--as={DISRUPTION_CONTROLLER}"),
        ]);
        let err = String::from_utf8_lossy(&out.stderr);
        if !out.status.success() && err.contains("the object has been modified") {
            return None;
        }
        assert!(
            out.status.success() || err.contains("frozen by the chaos test"),
            "a status update as the disruption controller failed for another reason: {err}"
        );
        Some(out.status.success())
    }

    fn lift(&self) {
        let _ = kubectl(&[
            "delete",
            "validatingadmissionpolicybinding,validatingadmissionpolicy",
            POLICY,
            "--ignore-not-found",
        ]);
    }
}

impl Drop for StatusFrozen {
    fn drop(&mut self) {
        self.lift();
    }
}

/// The PDB `name` counts 4 healthy pods and allows one disruption.
async fn wait_four_healthy_one_allowed(ns: &TestNs, name: &str) {
    wait_pdb(ns, name, "4 healthy, one disruption allowed", |p| {
        p.status.as_ref().is_some_and(|s| {
            s.current_healthy == 4
                && s.disruptions_allowed == 1
                && s.observed_generation == p.metadata.generation
        })
    })
    .await;
}

/// The ReplicaSet of `app` down to 3 pods, all Ready.
async fn three_ready_left(ns: &TestNs, app: &str) -> Vec<Pod> {
    let all: Api<Pod> = ns.api();
    wait_for(
        "the ReplicaSet at 3 pods",
        Duration::from_secs(30),
        || async {
            let n = all
                .list(&kube::api::ListParams::default().labels(&format!("app={app}")))
                .await
                .ok()?
                .items
                .len();
            let r = ready_pods(ns, app).await;
            (n == 3 && r.len() == 3).then_some(r)
        },
    )
    .await
}

/// The PDB `name`'s status, read from the apiserver.
async fn pdb_status(ns: &TestNs, name: &str) -> PodDisruptionBudgetStatus {
    let pdbs: Api<PodDisruptionBudget> = ns.api();
    pdbs.get(name)
        .await
        .expect("PDB")
        .status
        .unwrap_or_default()
}

/// Evicts `pod` the way kubectl drain does: a 429 is retried (every second
/// here), anything else ends it. Returns (the answer, 429s seen).
async fn evict_retrying(pods: Api<Pod>, pod: String) -> (Result<(), String>, usize) {
    let mut refused = 0;
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        match pods.evict(&pod, &EvictParams::default()).await {
            Ok(_) => return (Ok(()), refused),
            Err(kube::Error::Api(e)) if e.code == 429 && Instant::now() < deadline => {
                refused += 1;
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            Err(e) => return (Err(e.to_string()), refused),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_eviction_before_the_pdb_counts_a_scale_down_waits_for_the_recount() {
    let _g = nodes_lock().await;
    // A server of our own (the test before may have stopped or replaced the
    // shared one), with the longest hold: the recount comes once the policy
    // is lifted, and the surge after it.
    let wh = restart_server(&[("EVICTION_HOLD", "8s")]);
    let ns = TestNs::new("chaos-recount").await;
    // The user's PDB first, so the Deployment never gets one of ours.
    let pdbs: Api<PodDisruptionBudget> = ns.api();
    let pdb = PodDisruptionBudget {
        metadata: ObjectMeta {
            name: Some("rc".into()),
            ..Default::default()
        },
        spec: Some(PodDisruptionBudgetSpec {
            min_available: Some(IntOrString::Int(3)),
            selector: Some(LabelSelector {
                match_labels: Some(labels("rc")),
                ..Default::default()
            }),
            ..Default::default()
        }),
        status: None,
    };
    pdbs.create(&PostParams::default(), &pdb)
        .await
        .expect("create PDB");
    let deps: Api<k8s_openapi::api::apps::v1::Deployment> = ns.api();
    deps.create(&PostParams::default(), &deployment("rc", 4, None))
        .await
        .expect("create Deployment");
    wait_ready(&ns, "rc", 4).await;
    wait_four_healthy_one_allowed(&ns, "rc").await;
    let holds_before = wh.metric_sum(HOLDS, &["wait=\"recount\"", "outcome=\"blocked\""]);

    // The disruption controller may not publish a recount from now on.
    let frozen = StatusFrozen::freeze(&ns.name, "rc").await;
    // The scale-down, by the real deployment and ReplicaSet controllers.
    let t0 = Instant::now();
    deps.patch(
        "rc",
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"spec": {"replicas": 3}})),
    )
    .await
    .expect("scale Deployment to 3");
    let left = three_ready_left(&ns, "rc").await;
    let stale = pdb_status(&ns, "rc").await;
    assert_eq!(
        (stale.current_healthy, stale.disruptions_allowed),
        (4, 1),
        "the PDB's status must still lag the scale-down for this test to mean anything"
    );
    // Let the webhook's watch caches see the scale-down (milliseconds here).
    tokio::time::sleep(Duration::from_millis(1000)).await;

    let pods: Api<Pod> = ns.api();
    let watcher = AvailabilityWatcher::start(&ns, "rc");
    let victim = left[0].metadata.name.clone().expect("pod name");
    let eviction = tokio::spawn(evict_retrying(pods.clone(), victim.clone()));
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let answered_while_lagging = eviction.is_finished();
    let ready_while_lagging = ready_pods(&ns, "rc").await.len();
    let paused_for = t0.elapsed();
    frozen.thaw().await;
    let (evicted, refused) = eviction.await.expect("eviction task");
    let took = t0.elapsed();
    wait_ready(&ns, "rc", 3).await;
    let min_ready = watcher.finish().await;
    let holds = wh.metric_sum(HOLDS, &["wait=\"recount\"", "outcome=\"blocked\""]) - holds_before;
    // The surge that made room goes back to the user's 3.
    assert_settled_at(&ns, "rc", 3, Duration::from_secs(90)).await;
    let started = event_total(&ns.name, "SurgeStarted");
    let reverted = event_total(&ns.name, "SurgeReverted");
    record_figure(format!(
        "eviction while the PDB status lagged a 4->3 scale-down (status frozen {:.1}s): answered while lagging {answered_while_lagging}, Ready then {ready_while_lagging}, fewest Ready {min_ready}/3, recount holds that found the budget blocking {holds}, 429s {refused}, evicted after {:.1}s, SurgeStarted {started}, SurgeReverted {reverted}",
        paused_for.as_secs_f64(),
        took.as_secs_f64()
    ));
    assert!(
        !answered_while_lagging,
        "the eviction was answered at once, on a PDB status that had not counted the scale-down"
    );
    assert_eq!(ready_while_lagging, 3, "Ready pods while the status lagged");
    assert!(
        evicted.is_ok(),
        "the eviction went through once the surge made room: {evicted:?}"
    );
    assert!(min_ready >= 3, "availability: {min_ready} Ready < 3");
    assert!(
        holds >= 1.0,
        "a recount hold ended with the budget blocking"
    );
    assert_eq!((started, reverted), (1, 1), "{}", event_log(&ns.name));
}

/// The same race after a surge's own revert, under a PDB of ours, with a
/// hold shorter than the disruption controller's delay: the revert takes
/// the Deployment from 4 back to 3 while the controller cannot write, so the
/// PDB's status still allows one disruption with only the minimum left. An
/// eviction then must not go through when the hold ends: the webhook writes
/// the count the controller has not (the PDB is ours), so the apiserver
/// refuses it, and it goes through only once a new surge made room.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_eviction_after_a_revert_the_pdb_has_not_counted_is_refused_past_the_hold() {
    let _g = nodes_lock().await;
    let wh = restart_server(&[("EVICTION_HOLD", "2s"), ("COOLDOWN", "15s")]);
    let ns = TestNs::new("chaos-revert-recount").await;
    let deps: Api<k8s_openapi::api::apps::v1::Deployment> = ns.api();
    deps.create(&PostParams::default(), &deployment("rr", 3, None))
        .await
        .expect("create Deployment");
    wait_ready(&ns, "rr", 3).await;
    wait_pdb_blocking(&ns, "rr", 3).await;
    let pdbs: Api<PodDisruptionBudget> = ns.api();
    let ours = pdbs.get("rr").await.expect("our PDB");
    assert!(
        ours.metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.get("ownedBy").map(String::as_str) == Some("EvictionAutoScaler")),
        "the PDB is ours: {:?}",
        ours.metadata.annotations
    );
    let pods: Api<Pod> = ns.api();
    // A first eviction: the surge to 4 makes room, the pod goes, its
    // replacement comes, and the status counts 4 with one disruption left.
    let first = wait_ready(&ns, "rr", 3).await[0]
        .metadata
        .name
        .clone()
        .expect("pod name");
    let (evicted, _) = evict_retrying(pods.clone(), first).await;
    assert!(evicted.is_ok(), "first eviction: {evicted:?}");
    wait_deployment(&ns, "rr", 4, true, Duration::from_secs(30)).await;
    wait_ready(&ns, "rr", 4).await;
    wait_four_healthy_one_allowed(&ns, "rr").await;
    // The controller may not write the status from now on; the revert
    // comes when the cooldown ends.
    let frozen = StatusFrozen::freeze(&ns.name, "rr").await;
    let writes = |info: &WebhookInfo| {
        info.metric_sum(
            "eviction_autoscaler_api_requests_total",
            &[
                "verb=\"patch\"",
                "resource=\"poddisruptionbudgets/status\"",
                "code=\"200\"",
            ],
        )
    };
    let blocked = |info: &WebhookInfo| {
        info.metric_sum(
            "eviction_autoscaler_admission_requests_total",
            &["decision=\"blocked\""],
        )
    };
    let writes_before = writes(&wh);
    let blocked_before = blocked(&wh);
    wait_deployment(&ns, "rr", 3, false, Duration::from_secs(60)).await;
    let left = three_ready_left(&ns, "rr").await;
    let stale = pdb_status(&ns, "rr").await;
    assert_eq!(
        (stale.current_healthy, stale.disruptions_allowed),
        (4, 1),
        "the PDB's status must still lag the revert for this test to mean anything"
    );
    tokio::time::sleep(Duration::from_millis(1000)).await;

    let t0 = Instant::now();
    let watcher = AvailabilityWatcher::start(&ns, "rr");
    let victim = left[0].metadata.name.clone().expect("pod name");
    let eviction = tokio::spawn(evict_retrying(pods.clone(), victim));
    // Past the hold, twice over, with the controller still unable to write.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let answered_while_lagging = eviction.is_finished();
    let ready_while_lagging = ready_pods(&ns, "rr").await.len();
    let written = writes(&wh) - writes_before;
    let status_then = pdb_status(&ns, "rr").await;
    frozen.thaw().await;
    let (evicted, _) = eviction.await.expect("eviction task");
    // The test's client retries a 429 itself; the webhook counts its own.
    let refused = blocked(&wh) - blocked_before;
    let took = t0.elapsed();
    wait_ready(&ns, "rr", 3).await;
    let min_ready = watcher.finish().await;
    assert_settled_at(&ns, "rr", 3, Duration::from_secs(90)).await;
    record_figure(format!(
        "eviction after a revert the PDB had not counted (hold 2 s, status frozen 5 s): answered while lagging {answered_while_lagging}, Ready then {ready_while_lagging}, status then {}/{} allowed, status writes of ours {written}, fewest Ready {min_ready}/3, 429s {refused}, evicted after {:.1}s",
        status_then.current_healthy,
        status_then.disruptions_allowed,
        took.as_secs_f64()
    ));
    assert!(
        !answered_while_lagging,
        "the eviction went through on a PDB status that had not counted the revert"
    );
    // 4 once the new surge's pod is Ready.
    assert!(
        ready_while_lagging >= 3,
        "Ready pods while the status lagged: {ready_while_lagging}"
    );
    assert_eq!(
        (status_then.current_healthy, status_then.disruptions_allowed),
        (3, 0),
        "the webhook brought our PDB's status down to the pods left"
    );
    assert!(written >= 1.0, "status writes of ours: {written}");
    assert!(
        refused >= 1.0,
        "429s of the webhook while the status lagged: {refused}"
    );
    assert!(
        evicted.is_ok(),
        "the eviction went through once a surge made room: {evicted:?}"
    );
    assert!(min_ready >= 3, "availability: {min_ready} Ready < 3");
}
