//! `unhealthyPodEvictionPolicy` against the real apiserver: the webhook must
//! let an unready pod go wherever eviction.go would, and refuse it only
//! where eviction.go would refuse it too.

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{EvictParams, Patch, PatchParams, PostParams};
use kube::Api;
use serde_json::json;

use crate::support::*;

/// kwok leaves a pod with this annotation unready (tests/cluster/kwok/stages.yaml).
const STAY_UNREADY: &str = "eviction-autoscaler.test/stay-unready";

/// Marks one Ready pod of `app` not Ready, for good; returns its name.
async fn make_one_unready(ns: &TestNs, app: &str) -> String {
    let pods: Api<Pod> = ns.api();
    let name = a_ready_pod(ns, app).await;
    pods.patch(
        &name,
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"annotations": {STAY_UNREADY: "true"}}})),
    )
    .await
    .unwrap_or_else(|e| panic!("annotate {name}: {e}"));
    let status = json!({"status": {"conditions": [
        {"type": "Ready", "status": "False", "reason": "E2E"},
        {"type": "ContainersReady", "status": "False", "reason": "E2E"}]}});
    pods.patch_status(&name, &PatchParams::default(), &Patch::Strategic(status))
        .await
        .unwrap_or_else(|e| panic!("mark {name} not Ready: {e}"));
    name
}

/// The 429 came from the webhook (the apiserver wraps a webhook's denial
/// in these words), not from the apiserver's own PDB check.
fn from_webhook(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 429 && s.message.contains("admission webhook"))
}

/// One Deployment per policy, each under a user PDB of minAvailable 3 over
/// its 3 pods, one of them not Ready: 2 healthy of 3, no disruption
/// allowed. AlwaysAllow lets the unready pod go at the first attempt (the
/// webhook must not refuse it, nor surge); IfHealthyBudget keeps it while
/// the budget is short (the webhook holds or refuses it and surges), then
/// lets it go once the surge's pod makes the budget healthy.
#[tokio::test]
async fn unhealthy_pod_policies_agree_with_the_apiserver() {
    let ns = TestNs::new("e2e-unhealthy").await;
    let (pdbs, deps): (Api<PodDisruptionBudget>, Api<Deployment>) = (ns.api(), ns.api());
    for (app, policy) in [("ua", "AlwaysAllow"), ("ui", "IfHealthyBudget")] {
        let mut pdb = user_pdb(app, app, Some(IntOrString::Int(3)), None);
        if let Some(spec) = pdb.spec.as_mut() {
            spec.unhealthy_pod_eviction_policy = Some(policy.into());
        }
        pdbs.create(&PostParams::default(), &pdb)
            .await
            .unwrap_or_else(|e| panic!("create PDB {app}: {e}"));
        deps.create(&PostParams::default(), &deployment(app, 3, None))
            .await
            .unwrap_or_else(|e| panic!("create Deployment {app}: {e}"));
    }
    let mut unready = Vec::new();
    for app in ["ua", "ui"] {
        wait_pdb_blocking(&ns, app, 3).await;
        unready.push(make_one_unready(&ns, app).await);
        wait_pdb(&ns, app, "2 healthy of 3, no disruption allowed", |p| {
            p.status.as_ref().is_some_and(|s| {
                s.current_healthy == 2
                    && s.desired_healthy == 3
                    && s.disruptions_allowed == 0
                    && s.observed_generation == p.metadata.generation
            })
        })
        .await;
    }
    let pods = pods_without_retry(&ns).await;

    pods.evict(&unready[0], &EvictParams::default())
        .await
        .unwrap_or_else(|e| {
            panic!("AlwaysAllow: the apiserver lets an unready pod go, the webhook refused it: {e}")
        });
    assert_eq!(
        deployment_state(&ns, "ua").await,
        (3, Some(false)),
        "AlwaysAllow: let go at once, without a surge"
    );

    // The webhook holds or refuses it (with a surge) until the surge's pod
    // is Ready and the budget healthy; were it to let the pod go before,
    // the apiserver would refuse it and nothing would surge.
    wait_for(
        "the unready pod of ui let go once the budget is healthy",
        Duration::from_secs(60),
        || async {
            match pods.evict(&unready[1], &EvictParams::default()).await {
                Ok(_) => Some(()),
                Err(e) => {
                    assert!(
                        from_webhook(&e),
                        "only the webhook refuses it (with its surge), not the apiserver: {e}"
                    );
                    None
                }
            }
        },
    )
    .await;
    let (replicas, markers) = deployment_state(&ns, "ui").await;
    assert!(
        replicas == 4 && markers == Some(true),
        "IfHealthyBudget: let go only with the surge in place (ui at {replicas}, markers {markers:?})"
    );
}
