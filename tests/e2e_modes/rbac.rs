//! RBAC least privilege (behaviour.md 8): manifests/rbac.yaml grants exactly
//! the (resource, verb) pairs in [`USES`], each tied to the code that makes
//! the call; the apiserver refuses the ServiceAccount a list of dangerous
//! verbs; and the features run as that ServiceAccount through its token
//! (tests/e2e/deploy-local.sh gives the server a TokenRequest token of the
//! shipped ServiceAccount, bound to the shipped ClusterRole and Role).
//!
//! `doctor` and `uninstall` are not here: they run as the operator (the
//! kubectl user), not as the ServiceAccount.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::rbac::v1::{ClusterRole, PolicyRule, Role};
use kube::api::{Patch, PatchParams, PostParams};
use kube::Api;
use serde_json::json;

use crate::support::*;

const SA_USER: &str = "system:serviceaccount:eviction-autoscaler:eviction-autoscaler";
const NS: &str = "eviction-autoscaler";

/// One granted (group, resource, verb) and the call that needs it: `code`
/// must occur in `file` (whitespace-insensitive), so a reason cannot
/// outlive its call.
struct Use {
    group: &'static str,
    resource: &'static str,
    verb: &'static str,
    file: &'static str,
    code: &'static str,
}

const fn u(
    group: &'static str,
    resource: &'static str,
    verb: &'static str,
    file: &'static str,
    code: &'static str,
) -> Use {
    Use {
        group,
        resource,
        verb,
        file,
        code,
    }
}

// Watch caches: kube-runtime's watcher lists, then watches; it never gets.
const CACHE: &str = "src/cache.rs";
const APPLY: &str = "src/surge/apply.rs";
const RECONCILE: &str = "src/reconcile/mod.rs";
const WEBHOOK: &str = "src/webhook/mod.rs";

/// ClusterRole `eviction-autoscaler`.
const USES: &[Use] = &[
    u("", "pods", "list", CACHE, "let api: Api<PodWire> = Api::all("),
    u("", "pods", "watch", CACHE, "let api: Api<PodWire> = Api::all("),
    // The live read before any 429 (behaviour.md 4).
    u("", "pods", "get", "src/webhook/live.rs", "pods.get_opt(pod)"),
    u("", "namespaces", "list", CACHE, "r.reflect::<Namespace>"),
    u("", "namespaces", "watch", CACHE, "r.reflect::<Namespace>"),
    u("", "nodes", "list", CACHE, "r.reflect::<Node>"),
    u("", "nodes", "watch", CACHE, "r.reflect::<Node>"),
    u("apps", "replicasets", "list", CACHE, "r.reflect::<ReplicaSet>"),
    u("apps", "replicasets", "watch", CACHE, "r.reflect::<ReplicaSet>"),
    u("apps", "deployments", "list", CACHE, "r.reflect_notifying::<Deployment>("),
    u("apps", "deployments", "watch", CACHE, "r.reflect_notifying::<Deployment>("),
    // Surge applier: a fresh read before the write, then a JSON patch.
    u("apps", "deployments", "get", APPLY, "Api::<Deployment>::namespaced(self.0.clone(), ns) .get_opt(name)"),
    u("apps", "deployments", "patch", APPLY, "Api::<Deployment>::namespaced(self.0.clone(), ns) .patch(name, &pp, &patch)"),
    u("autoscaling", "horizontalpodautoscalers", "list", CACHE, "r.reflect_notifying::<HorizontalPodAutoscaler>("),
    u("autoscaling", "horizontalpodautoscalers", "watch", CACHE, "r.reflect_notifying::<HorizontalPodAutoscaler>("),
    u("autoscaling", "horizontalpodautoscalers", "get", APPLY, "Api::<HorizontalPodAutoscaler>::namespaced(self.0.clone(), ns) .get_opt(name)"),
    u("autoscaling", "horizontalpodautoscalers", "patch", APPLY, "Api::<HorizontalPodAutoscaler>::namespaced(self.0.clone(), ns) .patch(name, &pp, &patch)"),
    u("keda.sh", "scaledobjects", "list", CACHE, "let stream = watcher(api, watch_config())"),
    u("keda.sh", "scaledobjects", "watch", CACHE, "let stream = watcher(api, watch_config())"),
    u("keda.sh", "scaledobjects", "get", APPLY, "Api::<DynamicObject>::namespaced_with(self.0.clone(), ns, &keda_resource()) .get_opt(name)"),
    u("keda.sh", "scaledobjects", "patch", APPLY, "Api::<DynamicObject>::namespaced_with(self.0.clone(), ns, &keda_resource()) .patch(name, &pp, &patch)"),
    u("policy", "poddisruptionbudgets", "list", "src/webhook/live.rs", "pdbs.list(&ListParams::default())"),
    u("policy", "poddisruptionbudgets", "watch", CACHE, "r.reflect_notifying::<PodDisruptionBudget>("),
    // After a create conflict at admission: is the PDB of that name ours?
    u("policy", "poddisruptionbudgets", "get", WEBHOOK, "let existing = tokio::time::timeout_at(deadline, api.get(name))"),
    u("policy", "poddisruptionbudgets", "create", WEBHOOK, "api.create(&pp, want)"),
    u("policy", "poddisruptionbudgets", "patch", RECONCILE, "pdbs.patch(&pdb, &pp, &json_patch(ops)?)"),
    // Deletes of ours (reconciler, uninstall): a fresh read, then the delete.
    u("policy", "poddisruptionbudgets", "delete", "src/client.rs", "match api.delete(name, &dp).await"),
    // Our owner references block their owner's foreground deletion: with
    // OwnerReferencesPermissionEnforcement (OpenShift; the local control
    // plane enables it) that needs update on the owner's finalizers.
    u("apps", "deployments/finalizers", "update", "src/pdb.rs", "block_owner_deletion: Some(true)"),
    u("policy", "poddisruptionbudgets/finalizers", "update", "src/reconcile/plan.rs", "block_owner_deletion: Some(true)"),
    // An owned PDB's status that still counts pods a revert removed.
    u("policy", "poddisruptionbudgets/status", "patch", WEBHOOK, "api.patch_status(&c.pdb, &kube::api::PatchParams::default(), &patch)"),
    u("eviction-autoscaler.azure.com", "evictionautoscalers", "list", CACHE, "r.reflect::<EvictionAutoScaler>"),
    u("eviction-autoscaler.azure.com", "evictionautoscalers", "watch", CACHE, "r.reflect::<EvictionAutoScaler>"),
    u("eviction-autoscaler.azure.com", "evictionautoscalers", "create", RECONCILE, "match api.create(&pp, &obj).await"),
    // spec.lastEviction, the durable signal (behaviour.md 4).
    u("eviction-autoscaler.azure.com", "evictionautoscalers", "patch", "src/surge/signals.rs", ".patch(&s.pdb, &PatchParams::default(), &Patch::Merge(&patch))"),
    u("eviction-autoscaler.azure.com", "evictionautoscalers", "get", "src/client.rs", "let cur = match api.get(name).await"),
    u("eviction-autoscaler.azure.com", "evictionautoscalers", "delete", "src/client.rs", "match api.delete(name, &dp).await"),
    u("eviction-autoscaler.azure.com", "evictionautoscalers/status", "patch", RECONCILE, ".patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))"),
    // kube-runtime's Recorder: creates events.k8s.io/v1 Events, patches a repeat's series.
    u("events.k8s.io", "events", "create", RECONCILE, "Recorder::new("),
    u("events.k8s.io", "events", "patch", RECONCILE, "Recorder::new("),
];

/// Role `eviction-autoscaler-leader` in the product's namespace.
const LEADER_USES: &[Use] = &[
    u(
        "coordination.k8s.io",
        "leases",
        "create",
        "src/leader.rs",
        "self.api.create(&PostParams::default(), &lease)",
    ),
    u(
        "coordination.k8s.io",
        "leases",
        "get",
        "src/leader.rs",
        "self.api.get_opt(&self.name)",
    ),
    u(
        "coordination.k8s.io",
        "leases",
        "update",
        "src/leader.rs",
        "self.api.replace(&self.name, &PostParams::default(), &lease)",
    ),
];

fn squash(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Every (group, resource, verb) the rules grant; `*` anywhere is refused.
fn grants(rules: &[PolicyRule]) -> BTreeSet<(String, String, String)> {
    let mut out = BTreeSet::new();
    for r in rules {
        assert!(
            r.non_resource_urls.is_none(),
            "non-resource URLs granted: {r:?}"
        );
        for g in r.api_groups.iter().flatten() {
            for res in r.resources.iter().flatten() {
                for v in &r.verbs {
                    for x in [g, res, v] {
                        assert_ne!(x, "*", "wildcard in {r:?}");
                    }
                    out.insert((g.clone(), res.clone(), v.clone()));
                }
            }
        }
    }
    out
}

fn manifest_doc<T: serde::de::DeserializeOwned>(kind: &str) -> T {
    let text = std::fs::read_to_string(repo().join("manifests/rbac.yaml")).unwrap();
    let doc = text
        .split("\n---\n")
        .find(|d| d.lines().any(|l| l == format!("kind: {kind}")))
        .unwrap_or_else(|| panic!("no {kind} in manifests/rbac.yaml"));
    serde_norway::from_str(doc).unwrap_or_else(|e| panic!("{kind}: {e}"))
}

fn check(granted: BTreeSet<(String, String, String)>, uses: &[Use], what: &str) {
    let needed: BTreeSet<_> = uses
        .iter()
        .map(|x| (x.group.into(), x.resource.into(), x.verb.into()))
        .collect();
    let unexplained: Vec<_> = granted.difference(&needed).collect();
    let missing: Vec<_> = needed.difference(&granted).collect();
    assert!(
        unexplained.is_empty(),
        "{what} grants verbs no code path needs (remove them, or add the call to USES): {unexplained:?}"
    );
    assert!(
        missing.is_empty(),
        "{what} lacks verbs the code uses: {missing:?}"
    );
    for x in uses {
        let src = std::fs::read_to_string(repo().join(x.file)).unwrap();
        assert!(
            squash(&src).contains(&squash(x.code)),
            "{} {}/{}: `{}` is no longer in {}; is the grant still needed?",
            x.verb,
            x.group,
            x.resource,
            x.code,
            x.file
        );
    }
}

/// (a) Each granted verb is needed: the YAML's grants equal the table, and
/// each row's call is still in the source. Needs no cluster.
#[test]
fn every_granted_verb_is_used_by_the_code() {
    let cr: ClusterRole = manifest_doc("ClusterRole");
    check(
        grants(cr.rules.as_deref().unwrap_or_default()),
        USES,
        "ClusterRole",
    );
    let role: Role = manifest_doc("Role");
    let rules = role.rules.unwrap_or_default();
    check(grants(&rules), LEADER_USES, "Role");
    // get and update only on our own Lease (create cannot be narrowed by name).
    for r in &rules {
        if r.verbs.iter().any(|v| v == "get" || v == "update") {
            assert_eq!(
                r.resource_names.as_deref(),
                Some(&["eviction-autoscaler".to_string()][..]),
                "{r:?}"
            );
        }
    }
}

/// SubjectAccessReviews for the ServiceAccount, in one kubectl call:
/// `allowed` for each (verb, group, resource, subresource, namespace, name).
fn access(checks: &[(&str, &str, &str, &str, &str, &str)]) -> Vec<bool> {
    let items: Vec<_> = checks
        .iter()
        .map(|(verb, group, resource, sub, ns, name)| {
            json!({
                "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
                "spec": {
                    "user": SA_USER,
                    "groups": ["system:serviceaccounts", format!("system:serviceaccounts:{NS}"), "system:authenticated"],
                    "resourceAttributes": {"verb": verb, "group": group, "resource": resource,
                        "subresource": sub, "namespace": ns, "name": name}
                }
            })
        })
        .collect();
    let list = json!({"apiVersion": "v1", "kind": "List", "items": items});
    let file = cluster_dir().join(format!("sar-{}.json", std::process::id()));
    std::fs::write(&file, list.to_string()).unwrap();
    let out = kubectl_ok(&[
        "create",
        "-f",
        &path_str(&file),
        "-o",
        // kubectl prints each created object through the template.
        "jsonpath={.status.allowed}{\"\\n\"}",
    ]);
    let _ = std::fs::remove_file(&file);
    let got: Vec<bool> = out.lines().map(|l| l.trim() == "true").collect();
    assert_eq!(got.len(), checks.len(), "{out}");
    got
}

/// (b) The apiserver refuses the ServiceAccount what it must never do, and
/// (the other side) allows every verb of the table, so the test checks the
/// role the cluster has, not only the YAML.
#[tokio::test]
async fn dangerous_verbs_are_refused_to_the_service_account() {
    let _ = WebhookInfo::get(); // the shipped rbac.yaml is applied
    #[rustfmt::skip]
    let dangerous: &[(&str, &str, &str, &str, &str, &str)] = &[
        ("get", "", "secrets", "", "", ""),
        ("list", "", "secrets", "", "", ""),
        ("watch", "", "secrets", "", "", ""),
        ("get", "", "secrets", "", NS, ""),
        ("list", "", "secrets", "", "kube-system", ""),
        ("get", "", "configmaps", "", "", ""),
        ("create", "", "pods", "", "", ""),
        ("delete", "", "pods", "", "", ""),
        ("deletecollection", "", "pods", "", "", ""),
        ("create", "", "pods", "exec", "", ""),
        ("create", "", "pods", "attach", "", ""),
        ("create", "", "pods", "portforward", "", ""),
        ("create", "", "pods", "eviction", "", ""),
        ("create", "", "serviceaccounts", "token", "", ""),
        ("impersonate", "", "users", "", "", ""),
        ("impersonate", "", "groups", "", "", ""),
        ("impersonate", "", "serviceaccounts", "", "", ""),
        ("escalate", "rbac.authorization.k8s.io", "clusterroles", "", "", ""),
        ("bind", "rbac.authorization.k8s.io", "clusterroles", "", "", ""),
        ("escalate", "rbac.authorization.k8s.io", "roles", "", NS, ""),
        ("bind", "rbac.authorization.k8s.io", "roles", "", NS, ""),
        ("create", "rbac.authorization.k8s.io", "clusterrolebindings", "", "", ""),
        ("*", "*", "*", "", "", ""),
        ("*", "", "pods", "", "", ""),
        ("update", "", "nodes", "", "", ""),
        ("patch", "", "nodes", "", "", ""),
        ("delete", "", "nodes", "", "", ""),
        ("patch", "", "namespaces", "", "", ""),
        ("delete", "", "namespaces", "", "", ""),
        ("create", "apps", "deployments", "", "", ""),
        ("delete", "apps", "deployments", "", "", ""),
        ("update", "apps", "deployments", "", "", ""),
        ("patch", "apps", "deployments", "scale", "", ""),
        ("update", "autoscaling", "horizontalpodautoscalers", "", "", ""),
        ("delete", "autoscaling", "horizontalpodautoscalers", "", "", ""),
        ("update", "keda.sh", "scaledobjects", "", "", ""),
        ("update", "policy", "poddisruptionbudgets", "", "", ""),
        ("update", "eviction-autoscaler.azure.com", "evictionautoscalers", "", "", ""),
        ("update", "eviction-autoscaler.azure.com", "evictionautoscalers", "status", "", ""),
        ("create", "", "events", "", "", ""),
        ("patch", "admissionregistration.k8s.io", "validatingwebhookconfigurations", "", "", ""),
        ("delete", "admissionregistration.k8s.io", "mutatingwebhookconfigurations", "", "", ""),
        ("create", "apiextensions.k8s.io", "customresourcedefinitions", "", "", ""),
        ("delete", "apiextensions.k8s.io", "customresourcedefinitions", "", "", ""),
        // Other components' leader election, and Leases other than ours.
        ("update", "coordination.k8s.io", "leases", "", "kube-system", "kube-controller-manager"),
        ("get", "coordination.k8s.io", "leases", "", NS, "another-lease"),
        ("update", "coordination.k8s.io", "leases", "", NS, "another-lease"),
        ("delete", "coordination.k8s.io", "leases", "", NS, "eviction-autoscaler"),
        ("patch", "coordination.k8s.io", "leases", "", NS, "eviction-autoscaler"),
    ];
    let answers = access(dangerous);
    let allowed: Vec<_> = dangerous
        .iter()
        .zip(&answers)
        .filter(|(_, a)| **a)
        .map(|(c, _)| *c)
        .collect();
    assert!(allowed.is_empty(), "granted to {SA_USER}: {allowed:?}");

    let mut needed: Vec<(&str, &str, &str, &str, &str, &str)> = Vec::new();
    for x in USES {
        let (res, sub) = x.resource.split_once('/').unwrap_or((x.resource, ""));
        needed.push((x.verb, x.group, res, sub, "", ""));
    }
    for x in LEADER_USES {
        let name = if x.verb == "create" {
            ""
        } else {
            "eviction-autoscaler"
        };
        needed.push((x.verb, x.group, x.resource, "", NS, name));
    }
    let answers = access(&needed);
    let refused: Vec<_> = needed
        .iter()
        .zip(&answers)
        .filter(|(_, a)| !**a)
        .map(|(c, _)| *c)
        .collect();
    assert!(refused.is_empty(), "refused to {SA_USER}: {refused:?}");
    record_figure(format!(
        "RBAC: {} dangerous requests refused and {} needed ones allowed for {SA_USER} (SubjectAccessReview)",
        dangerous.len(),
        needed.len()
    ));
}

/// (c) The features, run by the server as the ServiceAccount through its
/// token: PDB and EvictionAutoScaler creation, a drain with a surge through
/// an HPA, the scale back, Events, the leader Lease, and the cleanup when
/// the namespace leaves scope. No request of the server is refused.
#[tokio::test]
async fn features_work_as_the_service_account_through_its_token() {
    let _nodes = nodes_lock().await;
    let log_before = std::fs::read_to_string(cluster_dir().join("webhook/server.log"))
        .map(|l| l.len())
        .unwrap_or(0);
    let wh = restart_server(&[]);
    // The server's credentials are the ServiceAccount's token.
    let who = kubectl_ok(&[
        "--kubeconfig",
        &path_str(&wh.state.join("kubeconfig")),
        "auth",
        "whoami",
        "-o",
        "jsonpath={.status.userInfo.username}",
    ]);
    assert_eq!(who.trim(), SA_USER);
    let started = Instant::now();

    let ns = TestNs::new("e2e-rbac").await;
    let deps: Api<Deployment> = ns.api();
    let node = "kwok-node-2";
    let mut d = deployment("r", 2, Some(node));
    if let Some(spec) = d.spec.as_mut() {
        spec.strategy = Some(serde_json::from_value(
            json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 2, "maxUnavailable": 0}}),
        )
        .unwrap());
    }
    deps.create(&PostParams::default(), &d).await.unwrap();
    let hpas: Api<HorizontalPodAutoscaler> = ns.api();
    hpas.create(&PostParams::default(), &hpa("r", "r", 2))
        .await
        .unwrap();
    wait_ready(&ns, "r", 2).await;
    wait_pdb_blocking(&ns, "r", 2).await;
    wait_for("EvictionAutoScaler r", Duration::from_secs(30), || async {
        eviction_autoscalers(&ns.name)
            .contains(&"r".to_string())
            .then_some(())
    })
    .await;

    let sampler = {
        let hpas = hpas.clone();
        tokio::spawn(async move {
            let mut peak = 0;
            for _ in 0..600 {
                if let Ok(h) = hpas.get("r").await {
                    peak = peak.max(h.spec.and_then(|s| s.min_replicas).unwrap_or(0));
                }
                if peak > 2 {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            peak
        })
    };
    let run = drain_node(node, "app=r", &[]).await;
    uncordon(node);
    assert!(run.ok, "drain:\n{}", run.output);
    let peak = sampler.await.unwrap_or(0);
    assert!(peak > 2, "the HPA minimum was raised (peak {peak})");
    wait_hpa_min(&hpas, "r", 2, Some(false), Duration::from_secs(60)).await;
    // The Deployment a few seconds after its HPA (surge::step::SETTLE); the
    // surge's end is reported when its last marker goes.
    wait_deployment(&ns, "r", 2, false, Duration::from_secs(30)).await;
    for reason in ["SurgeStarted", "SurgeReverted"] {
        let what = format!("a {reason} Event");
        let found = wait_for(&what, Duration::from_secs(10), || async {
            (event_total(&ns.name, reason) >= 1).then_some(true)
        });
        assert!(found.await, "{reason}:\n{}", event_log(&ns.name));
    }
    let holder = kubectl_ok(&[
        "-n",
        NS,
        "get",
        "lease",
        "eviction-autoscaler",
        "-o",
        "jsonpath={.spec.holderIdentity}",
    ]);
    let pod_name = std::fs::read_to_string(wh.state.join("pod_name")).unwrap();
    assert_eq!(holder.trim(), pod_name.trim(), "the server holds the Lease");

    // Out of scope: our PDB and EvictionAutoScaler are deleted.
    let nss: Api<Namespace> = Api::all(ns.client.clone());
    nss.patch(
        &ns.name,
        &PatchParams::default(),
        &Patch::Merge(&json!({"metadata": {"annotations": {"eviction-autoscaler.azure.com/enable": "false"}}})),
    )
    .await
    .unwrap();
    wait_for(
        "owned PDB and EvictionAutoScaler deleted",
        Duration::from_secs(30),
        || async {
            (owned_pdbs(&ns).await.is_empty() && eviction_autoscalers(&ns.name).is_empty())
                .then_some(())
        },
    )
    .await;

    let log = wh.log();
    let refusals: Vec<&str> = log
        .get(log_before..)
        .unwrap_or(&log)
        .lines()
        .filter(|l| l.to_lowercase().contains("forbidden"))
        .collect();
    assert!(
        refusals.is_empty(),
        "the server met refusals:\n{}",
        refusals.join("\n")
    );
    record_figure(format!(
        "RBAC: every feature as {SA_USER} (PDB, EvictionAutoScaler, drain with HPA surge, scale back, Events, Lease, cleanup) in {:.1}s, 0 refusals in the server log",
        started.elapsed().as_secs_f64()
    ));
}
