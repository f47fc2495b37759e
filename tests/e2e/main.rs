//! End-to-end tests on the local control plane (tests/cluster/up.sh): real
//! etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok
//! nodes; the webhook registered through real webhook configurations; drains
//! with the real kubectl.

mod agreement;
mod chart;
mod doctor;
mod gitops;
mod hold;
pub mod pdbs;
mod safety;
mod stalls;
mod support;
mod surge;
mod surge_safety;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{EvictParams, PostParams};
use kube::Api;

use support::*;

/// The apiserver calls both webhooks: a Deployment create and an eviction
/// show up in the server's own metrics.
#[tokio::test]
async fn apiserver_calls_both_webhooks() {
    let wh = WebhookInfo::get();
    let ns = TestNs::with_annotations("e2e-calls", &[]).await;
    let before_dep = wh.metric_sum(
        "eviction_autoscaler_admission_requests_total",
        &["webhook=\"deployments\""],
    );
    let before_ev = wh.metric_sum(
        "eviction_autoscaler_admission_requests_total",
        &["webhook=\"evictions\""],
    );

    let deps = ns.api();
    deps.create(&PostParams::default(), &deployment("calls", 1, None))
        .await
        .expect("create deployment");
    let pods = wait_ready(&ns, "calls", 1).await;
    let pod = pods[0].metadata.name.clone().expect("pod name");
    let pod_api: Api<Pod> = ns.api();
    pod_api
        .evict(&pod, &EvictParams::default())
        .await
        .expect("eviction without a PDB is allowed");

    let after_dep = wh.metric_sum(
        "eviction_autoscaler_admission_requests_total",
        &["webhook=\"deployments\""],
    );
    let after_ev = wh.metric_sum(
        "eviction_autoscaler_admission_requests_total",
        &["webhook=\"evictions\""],
    );
    assert!(
        after_dep > before_dep,
        "deployments webhook not called ({before_dep} -> {after_dep})"
    );
    assert!(
        after_ev > before_ev,
        "evictions webhook not called ({before_ev} -> {after_ev})"
    );
}

/// A budget no surge can help (maxUnavailable: 0) on an in-scope
/// Deployment: the webhook answers 429 with its message, and kubectl drain
/// shows it and keeps retrying until its own timeout.
#[tokio::test]
async fn blocked_eviction_is_a_429_visible_to_kubectl_drain() {
    let _nodes = nodes_lock().await;
    let ns = TestNs::new("e2e-429").await;
    // The user's PDB first: the Deployment then gets no PDB of ours.
    let pdbs: Api<PodDisruptionBudget> = ns.api();
    pdbs.create(
        &PostParams::default(),
        &user_pdb("blocked-pdb", "blocked", None, Some(IntOrString::Int(0))),
    )
    .await
    .expect("create pdb");
    let deps = ns.api();
    deps.create(
        &PostParams::default(),
        &deployment("blocked", 2, Some("kwok-node-2")),
    )
    .await
    .expect("create deployment");
    let pods = wait_ready(&ns, "blocked", 2).await;
    wait_pdb(
        &ns,
        "blocked-pdb",
        "disruption controller settles the PDB",
        |p| {
            p.status.as_ref().is_some_and(|s| {
                s.observed_generation == p.metadata.generation
                    && s.current_healthy == 2
                    && s.disruptions_allowed == 0
            })
        },
    )
    .await;

    let node = nodes_of(&pods)[0].clone();
    let out = kubectl(&[
        "drain",
        &node,
        "--pod-selector=app=blocked",
        "--ignore-daemonsets",
        "--delete-emptydir-data",
        "--timeout=12s",
    ]);
    uncordon(&node);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "drain cannot complete while the budget allows nothing"
    );
    assert!(
        stderr.contains(
            "admission webhook \"evictions.eviction-autoscaler.azure.com\" denied the request"
        ) && stderr.contains("Cannot evict pod as it would violate the pod's disruption budget.")
            && stderr.contains("blocked-pdb")
            && stderr.contains("will retry after"),
        "drain output:\n{stderr}"
    );
    assert!(
        stderr.matches("denied the request").count() >= 2,
        "kubectl drain retried the 429:\n{stderr}"
    );
    // The pods are still there.
    assert_eq!(ready_pods(&ns, "blocked").await.len(), 2);
}

/// The server runs with the product's ServiceAccount token, and the
/// ClusterRole in manifests/ grants what the features need and no more.
#[tokio::test]
async fn server_runs_as_its_service_account_with_least_privilege() {
    let wh = WebhookInfo::get();
    let kubeconfig = wh.state.join("kubeconfig");
    let who = kubectl_ok(&[
        "--kubeconfig",
        &path_str(&kubeconfig),
        "auth",
        "whoami",
        "-o",
        "jsonpath={.status.userInfo.username}",
    ]);
    assert_eq!(
        who,
        "system:serviceaccount:eviction-autoscaler:eviction-autoscaler"
    );
    let pid = std::fs::read_to_string(wh.state.join("pid")).expect("pid");
    let environ =
        std::fs::read(format!("/proc/{}/environ", pid.trim())).expect("server environment");
    let environ = String::from_utf8_lossy(&environ);
    assert!(
        environ
            .split('\0')
            .any(|e| e == format!("KUBECONFIG={}", kubeconfig.display())),
        "the server does not use the ServiceAccount kubeconfig"
    );
    // Ready means its watches work with exactly these permissions.
    assert!(wh.log().contains("watch caches synced"));

    let sa = "system:serviceaccount:eviction-autoscaler:eviction-autoscaler";
    let can = |verb: &str, resource: &str| {
        let out = kubectl(&[
            "auth",
            "can-i",
            verb,
            resource,
            "--all-namespaces",
            "--as",
            sa,
        ]);
        String::from_utf8_lossy(&out.stdout).trim() == "yes"
    };
    for (verb, res) in [
        ("watch", "pods"),
        ("watch", "nodes"),
        ("watch", "namespaces"),
        ("watch", "replicasets.apps"),
        ("patch", "deployments.apps"),
        ("patch", "horizontalpodautoscalers.autoscaling"),
        ("patch", "scaledobjects.keda.sh"),
        ("create", "poddisruptionbudgets.policy"),
        ("delete", "poddisruptionbudgets.policy"),
        ("patch", "evictionautoscalers.eviction-autoscaler.azure.com"),
        (
            "patch",
            "evictionautoscalers.eviction-autoscaler.azure.com/status",
        ),
        ("create", "events.events.k8s.io"),
    ] {
        assert!(can(verb, res), "the ServiceAccount needs {verb} {res}");
    }
    for (verb, res) in [
        ("get", "secrets"),
        ("delete", "pods"),
        ("create", "pods/eviction"),
        ("update", "nodes"),
        ("delete", "deployments.apps"),
        ("create", "clusterrolebindings.rbac.authorization.k8s.io"),
    ] {
        assert!(!can(verb, res), "the ServiceAccount must not {verb} {res}");
    }
}

/// The shipped manifests are accepted by a real apiserver.
#[tokio::test]
async fn manifests_pass_server_side_dry_run() {
    let _ = WebhookInfo::get(); // the namespace exists once deploy-local ran
    let out = kubectl_ok(&[
        "apply",
        "--dry-run=server",
        "-k",
        &path_str(&repo().join("manifests")),
    ]);
    assert!(
        out.contains("validatingwebhookconfiguration")
            || out.contains("ValidatingWebhookConfiguration"),
        "{out}"
    );
}
