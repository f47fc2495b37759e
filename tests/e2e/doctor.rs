//! `eviction-autoscaler doctor` against prepared bad configurations: the
//! real binary, the real apiserver, exit codes and the JSON report
//! (docs/doctor.md). Each test looks only at its own namespace
//! (`--only-namespace`), since other tests run beside it.

use std::process::{Command, Output};
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{DeleteParams, PostParams};
use kube::Api;
use serde_json::Value;

use super::support::*;

/// Runs the doctor with the default scope settings (namespaces in scope by
/// their `enable` annotation), whatever the test's environment says.
fn doctor(args: &[&str]) -> (i32, Value, String) {
    let out: Output = Command::new(env!("CARGO_BIN_EXE_eviction-autoscaler"))
        .arg("doctor")
        .args(args)
        .env("KUBECONFIG", cluster_dir().join("kubeconfig"))
        .env_remove("ENABLED_BY_DEFAULT")
        .env_remove("ACTIONED_NAMESPACES")
        .env_remove("ZERO_SURGE_OVERRIDE")
        .output()
        .expect("run doctor");
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    let json = serde_json::from_str(&stdout).unwrap_or(Value::Null);
    let code = out.status.code().unwrap_or(-1);
    (code, json, format!("{stdout}{stderr}"))
}

/// The report's pods of one app, from `drain.nodes[*].pods`.
fn pods_of_app<'a>(report: &'a Value, app: &str) -> Vec<&'a Value> {
    report["drain"]["nodes"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|n| n["pods"].as_array().into_iter().flatten())
        .filter(|p| {
            p["name"]
                .as_str()
                .is_some_and(|n| n.starts_with(&format!("{app}-")))
        })
        .collect()
}

async fn create_pdb(ns: &TestNs, pdb: PodDisruptionBudget) {
    let api: Api<PodDisruptionBudget> = ns.api();
    api.create(&PostParams::default(), &pdb)
        .await
        .expect("create pdb");
}

async fn create_deployment(ns: &TestNs, d: Deployment) {
    let api: Api<Deployment> = ns.api();
    api.create(&PostParams::default(), &d)
        .await
        .expect("create deployment");
}

/// A drain of a node holding a Deployment under our PDB (surge 2 -> 3) and
/// one under `maxUnavailable: 0`: the preflight says which is which, exits
/// 1, and once the blocking budget is gone exits 0. Then a real kubectl
/// drain shows the product doing what the preflight said: 2 -> 3.
#[tokio::test]
async fn doctor_node_preflight_predicts_the_drain() {
    // No other test cordons a node meanwhile: the pods land where they prefer.
    let _nodes = nodes_lock().await;
    let ns = TestNs::new("e2e-doctor-node").await;
    let prefer = "kwok-node-1";
    create_pdb(
        &ns,
        user_pdb("stuck-pdb", "doc-stuck", None, Some(IntOrString::Int(0))),
    )
    .await;
    create_deployment(&ns, deployment("doc-stuck", 2, Some(prefer))).await;
    create_deployment(&ns, deployment("doc-surge", 2, Some(prefer))).await;
    let stuck_pods = wait_ready(&ns, "doc-stuck", 2).await;
    let pods = wait_ready(&ns, "doc-surge", 2).await;
    wait_pdb_blocking(&ns, "doc-surge", 2).await;
    // Every node holding one of the pods (preferred is not required).
    let mut all = nodes_of(&pods);
    all.extend(nodes_of(&stuck_pods));
    all.sort();
    all.dedup();
    let node = all.join(",");

    let only = format!("--only-namespace={}", ns.name);
    let (code, report, text) = doctor(&["--node", &node, &only, "-o", "json"]);
    assert_eq!(code, 1, "a budget with maxUnavailable 0 blocks:\n{text}");
    assert_eq!(report["schema"], 1, "{text}");
    assert_eq!(report["exitCode"], 1, "{text}");
    assert_eq!(report["drain"]["blocked"], true, "{text}");
    let surge = pods_of_app(&report, "doc-surge");
    assert_eq!(surge.len(), 2, "doc-surge pods on {node}:\n{text}");
    for p in &surge {
        assert_eq!(p["verdict"], "surge", "{p}");
        assert_eq!(p["owner"], "Deployment/doc-surge", "{p}");
        assert_eq!(p["pdbs"][0], "doc-surge", "{p}");
        assert_eq!(p["surge"]["from"], 2, "{p}");
        assert_eq!(p["surge"]["to"], 3, "{p}");
        assert_eq!(p["surge"]["underWay"], false, "{p}");
        assert_eq!(p["surge"]["object"], "Deployment/doc-surge", "{p}");
    }
    let stuck = pods_of_app(&report, "doc-stuck");
    assert_eq!(stuck.len(), 2, "doc-stuck pods on {node}:\n{text}");
    for p in &stuck {
        assert_eq!(p["verdict"], "blocked", "{p}");
        assert!(
            p["reason"]
                .as_str()
                .is_some_and(|r| r.contains("maxUnavailable is 0")),
            "{p}"
        );
    }
    // The human output: a table for the node, and the verdict.
    let (code, _, text) = doctor(&["--node", &node, &only]);
    assert_eq!(code, 1, "{text}");
    assert!(text.contains(&format!("node {}", all[0])), "{text}");
    assert!(
        text.lines()
            .any(|l| l.contains("doc-surge-") && l.contains("surge 2->3")),
        "{text}"
    );
    assert!(
        text.lines()
            .any(|l| l.contains("doc-stuck-") && l.contains("BLOCKED")),
        "{text}"
    );
    assert!(text.contains("BLOCKED: the drain would stop at"), "{text}");

    // Without the blocking budget the drain would complete.
    let pdbs: Api<PodDisruptionBudget> = ns.api();
    pdbs.delete("stuck-pdb", &DeleteParams::default())
        .await
        .expect("delete pdb");
    let (code, report, text) = wait_for(
        "the preflight passes without the blocking PDB",
        Duration::from_secs(30),
        || async {
            let r = doctor(&["--node", &node, &only, "-o", "json"]);
            (r.0 == 0).then_some(r)
        },
    )
    .await;
    assert_eq!(
        (code, &report["drain"]["blocked"]),
        (0, &Value::Bool(false)),
        "{text}"
    );

    // The real drain: the product surges exactly as predicted, and it completes.
    let drained = nodes_of(&pods)[0].clone();
    let sampler = ReplicaSampler::start(&ns, "doc-surge");
    let run = drain_node(&drained, "app=doc-surge", &["--timeout=120s"]).await;
    uncordon(&drained);
    let samples = sampler.finish().await;
    assert!(run.ok, "drain:\n{}", run.output);
    let peak = samples.iter().map(|(_, r)| *r).max().unwrap_or(0);
    assert_eq!(peak, 3, "the preflight said 2 -> 3: {samples:?}");
}

/// Prepared bad budgets: each is named with its rule; errors exit 1, and
/// once they are fixed only warnings remain (exit 0).
#[tokio::test]
async fn doctor_lints_prepared_bad_budgets() {
    // Its Deployments are in scope on every node: a node another test
    // cordons would surge them (4 pods under 67% no longer round to all).
    let _nodes = nodes_lock().await;
    let ns = TestNs::new("e2e-doctor-lint").await;
    // Budgets first, so no PDB of ours is created beside them.
    create_pdb(
        &ns,
        user_pdb("never", "doc-never", None, Some(IntOrString::Int(0))),
    )
    .await;
    create_pdb(
        &ns,
        user_pdb("nothing", "doc-nobody", Some(IntOrString::Int(1)), None),
    )
    .await;
    create_pdb(
        &ns,
        user_pdb("twice-a", "doc-twice", Some(IntOrString::Int(1)), None),
    )
    .await;
    create_pdb(
        &ns,
        user_pdb("twice-b", "doc-twice", Some(IntOrString::Int(1)), None),
    )
    .await;
    create_pdb(
        &ns,
        user_pdb(
            "rounds",
            "doc-rounds",
            Some(IntOrString::String("67%".into())),
            None,
        ),
    )
    .await;
    create_pdb(
        &ns,
        user_pdb("fine", "doc-fine", Some(IntOrString::Int(1)), None),
    )
    .await;
    for (app, n) in [
        ("doc-never", 2),
        ("doc-twice", 2),
        ("doc-rounds", 3),
        ("doc-fine", 3),
    ] {
        create_deployment(&ns, deployment(app, n, None)).await;
    }
    for (app, n) in [
        ("doc-never", 2),
        ("doc-twice", 2),
        ("doc-rounds", 3),
        ("doc-fine", 3),
    ] {
        wait_ready(&ns, app, n).await;
    }

    let only = format!("--only-namespace={}", ns.name);
    let (code, report, text) = doctor(&["--only", "budgets", &only, "-o", "json"]);
    assert_eq!(code, 1, "{text}");
    assert!(report.get("installation").is_none(), "{text}");
    assert!(report.get("drain").is_none(), "{text}");
    let findings: Vec<(String, String, String)> = report["budgets"]
        .as_array()
        .expect("budgets")
        .iter()
        .map(|f| {
            (
                f["level"].as_str().unwrap_or_default().to_string(),
                f["rule"].as_str().unwrap_or_default().to_string(),
                f["object"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    let has = |level: &str, rule: &str, object: &str| {
        findings
            .iter()
            .any(|(l, r, o)| l == level && r == rule && o.as_str() == object)
    };
    assert!(
        has("fail", "never-allows", "PodDisruptionBudget/never"),
        "{text}"
    );
    assert!(
        has("warn", "selects-no-pods", "PodDisruptionBudget/nothing"),
        "{text}"
    );
    assert!(
        findings
            .iter()
            .any(|(l, r, o)| l == "fail" && r == "several-pdbs" && o.starts_with("Pod/doc-twice-")),
        "{text}"
    );
    // 67% of 3 rounds up to 3: closed at this size, opened by the product's surge.
    assert!(
        has(
            "warn",
            "percent-rounds-to-all",
            "PodDisruptionBudget/rounds"
        ),
        "{text}"
    );
    assert!(
        !findings.iter().any(|(_, _, o)| o.contains("fine")),
        "{text}"
    );

    // The human output names each finding on one line.
    let (code, _, text) = doctor(&["--only", "budgets", &only]);
    assert_eq!(code, 1, "{text}");
    assert!(
        text.lines()
            .any(|l| l.starts_with("FAIL budget never-allows:")
                && l.contains(&format!("{}/PodDisruptionBudget/never", ns.name))),
        "{text}"
    );

    // The default run: the installation checks, then the lint.
    let (code, _, text) = doctor(&[&only]);
    assert_eq!(code, 1, "{text}");
    let crd = text
        .lines()
        .position(|l| l.starts_with("ok") && l.contains("CRD"));
    let lint = text
        .lines()
        .position(|l| l.starts_with("FAIL budget never-allows:"));
    assert!(
        crd.is_some() && lint.is_some() && crd < lint,
        "installation first, then budgets:\n{text}"
    );
    let (_, report, text) = doctor(&[&only, "-o", "json"]);
    assert!(
        report["installation"].is_array() && report["budgets"].is_array(),
        "{text}"
    );

    // Fixed: the errors go, the warnings stay, exit 0.
    let pdbs: Api<PodDisruptionBudget> = ns.api();
    for name in ["never", "twice-b"] {
        pdbs.delete(name, &DeleteParams::default())
            .await
            .expect("delete pdb");
    }
    let (code, report, text) = wait_for(
        "the lint passes once the errors are fixed",
        Duration::from_secs(30),
        || async {
            let r = doctor(&["--only", "budgets", &only, "-o", "json"]);
            (r.0 == 0).then_some(r)
        },
    )
    .await;
    assert_eq!(code, 0, "{text}");
    assert!(
        report["budgets"]
            .as_array()
            .is_some_and(|b| b.iter().all(|f| f["level"] == "warn") && !b.is_empty()),
        "{text}"
    );
}

/// What cannot be checked exits 2: an unknown node, bad arguments.
#[tokio::test]
async fn doctor_cannot_check_exits_2() {
    let _ = WebhookInfo::get();
    let (code, _, text) = doctor(&["--node", "no-such-node"]);
    assert_eq!(code, 2, "{text}");
    assert!(text.contains("no such node: no-such-node"), "{text}");
    let (code, _, text) = doctor(&["-o", "yaml"]);
    assert_eq!(code, 2, "{text}");
    let (code, _, text) = doctor(&["--node", "kwok-node-0", "--only", "budgets"]);
    assert_eq!(code, 2, "--only does not go with --node: {text}");
}

/// A budget at the replicas in a namespace out of scope: no surge, so the
/// lint fails it and the preflight blocks, both saying why; once the
/// namespace is enabled the same budget is opened by a surge (2 -> 3).
#[tokio::test]
async fn doctor_follows_the_namespace_scope() {
    use k8s_openapi::api::core::v1::Namespace;
    use kube::api::{Patch, PatchParams};
    // Once enabled, a node another test cordons would surge it (the
    // preflight would say free, not 2 -> 3).
    let _nodes = nodes_lock().await;
    let ns = TestNs::with_annotations("e2e-doctor-scope", &[]).await;
    create_pdb(
        &ns,
        user_pdb("floor", "doc-scope", Some(IntOrString::Int(2)), None),
    )
    .await;
    create_deployment(&ns, deployment("doc-scope", 2, None)).await;
    let pods = wait_ready(&ns, "doc-scope", 2).await;
    wait_pdb_blocking(&ns, "floor", 2).await;
    let nodes = nodes_of(&pods).join(",");
    let only = format!("--only-namespace={}", ns.name);
    let scope_reason = "out of the product's scope";

    let (code, report, text) = doctor(&["--only", "budgets", &only, "-o", "json"]);
    assert_eq!(code, 1, "{text}");
    let f = &report["budgets"][0];
    assert_eq!(
        (&f["level"], &f["rule"]),
        (
            &Value::from("fail"),
            &Value::from("min-available-at-or-above-pods")
        ),
        "{text}"
    );
    assert!(
        f["message"]
            .as_str()
            .is_some_and(|m| m.contains(scope_reason)),
        "{text}"
    );
    let (code, report, text) = doctor(&["--node", &nodes, &only, "-o", "json"]);
    assert_eq!(code, 1, "{text}");
    for p in pods_of_app(&report, "doc-scope") {
        assert_eq!(p["verdict"], "blocked", "{p}");
        assert!(
            p["reason"]
                .as_str()
                .is_some_and(|r| r.contains(scope_reason)),
            "{p}"
        );
    }

    let api: Api<Namespace> = Api::all(ns.client.clone());
    let patch = serde_json::json!({"metadata": {"annotations": {
        "eviction-autoscaler.azure.com/enable": "true"}}});
    api.patch(&ns.name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("enable the namespace");
    let (code, report, text) = doctor(&["--node", &nodes, &only, "-o", "json"]);
    assert_eq!(code, 0, "{text}");
    let surged = pods_of_app(&report, "doc-scope");
    assert_eq!(surged.len(), 2, "{text}");
    for p in surged {
        assert_eq!(p["verdict"], "surge", "{p}");
        assert_eq!(
            (&p["surge"]["from"], &p["surge"]["to"]),
            (&Value::from(2), &Value::from(3)),
            "{p}"
        );
    }
    let (code, report, text) = doctor(&["--only", "budgets", &only, "-o", "json"]);
    assert_eq!(code, 0, "{text}");
    assert_eq!(report["budgets"][0]["level"], "warn", "{text}");
}
