//! The Deployment mutating handler over the fixed snapshot, PDB_CREATE on:
//! Deployments built from structured input (names, replicas, labels,
//! selectors with expressions, the opt-out annotation), or raw object JSON.
//! Properties: never a panic; never a rejection (behaviour.md 3); no write
//! on dry-run or out of scope, nor for a Deployment the apiserver will
//! reject (selector missing its template); a patch only adds annotations.
#![no_main]
use std::sync::{Arc, OnceLock};

use arbitrary::Arbitrary;
use eviction_autoscaler::webhook::{parse_deployment_review, Webhooks};
use kube::core::admission::AdmissionReview;
use kube::core::DynamicObject;
use eviction_autoscaler_fuzz::harness::{deployment_review, Writes, NAMESPACES};
use eviction_autoscaler_fuzz::runtime;
use k8s_openapi::api::apps::v1::Deployment;
use libfuzzer_sys::fuzz_target;
use serde_json::{json, Map, Value};

#[derive(Arbitrary, Debug)]
struct Expr<'a> {
    key: &'a str,
    op: u8,
    values: Vec<&'a str>,
}

#[derive(Arbitrary, Debug)]
struct Input<'a> {
    raw_object: Option<&'a [u8]>,
    uid: &'a str,
    ns: Option<&'a str>,
    ns_known: u8,
    name: &'a str,
    replicas: Option<i32>,
    labels: Vec<(&'a str, &'a str)>,
    match_labels: Vec<(&'a str, &'a str)>,
    expressions: Vec<Expr<'a>>,
    annotations: Vec<(&'a str, &'a str)>,
    opt_out: Option<bool>,
    dry_run: bool,
    operation: u8,
    kind: u8,
}

fn map(pairs: &[(&str, &str)]) -> Value {
    Value::Object(
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), json!(v)))
            .collect::<Map<_, _>>(),
    )
}

fn state() -> &'static (Arc<Webhooks>, Arc<Writes>) {
    static S: OnceLock<(Arc<Webhooks>, Arc<Writes>)> = OnceLock::new();
    S.get_or_init(|| {
        let (hooks, writes, _rx) =
            runtime().block_on(async { eviction_autoscaler_fuzz::harness::webhooks(true) });
        (hooks, writes)
    })
}

fuzz_target!(|input: Input| {
    let (hooks, writes) = state();
    let ns = input
        .ns
        .map(str::to_string)
        .unwrap_or_else(|| NAMESPACES[input.ns_known as usize % 2].to_string());
    let object = match input.raw_object {
        Some(raw) => serde_json::from_slice(raw).unwrap_or(Value::Null),
        None => {
            let mut ann: Vec<(&str, &str)> = input.annotations.clone();
            if let Some(o) = input.opt_out {
                ann.push((
                    "eviction-autoscaler.azure.com/pdb-create",
                    if o { "false" } else { "true" },
                ));
            }
            let exprs: Vec<Value> = input
                .expressions
                .iter()
                .map(|e| {
                    let op = ["In", "NotIn", "Exists", "DoesNotExist", "Bogus"][e.op as usize % 5];
                    json!({"key": e.key, "operator": op, "values": e.values})
                })
                .collect();
            json!({
                "apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": input.name, "annotations": map(&ann)},
                "spec": {"replicas": input.replicas,
                         "selector": {"matchLabels": map(&input.match_labels), "matchExpressions": exprs},
                         "template": {"metadata": {"labels": map(&input.labels)}}}
            })
        }
    };
    let mut review = deployment_review(input.uid, &ns, object, input.dry_run);
    let operation = ["CREATE", "UPDATE", "DELETE"][input.operation as usize % 3];
    let kind = ["Deployment", "StatefulSet"][input.kind as usize % 2];
    review["request"]["operation"] = json!(operation);
    review["request"]["kind"]["kind"] = json!(kind);
    let Ok(req) = parse_deployment_review(&serde_json::to_vec(&review).unwrap_or_default()) else {
        return;
    };
    let uid = req.request.uid.clone();
    let dry = req.request.dry_run;
    let before = writes.count();
    let answer = runtime().block_on(hooks.deployments(req));
    // What goes on the wire, read back as kube reads a review.
    let json = answer.review.to_json().expect("the answer serializes");
    let back: AdmissionReview<DynamicObject> =
        serde_json::from_slice(&json).expect("the answer is an AdmissionReview");
    let resp = back.response.as_ref().expect("a response");
    assert_eq!(resp.uid, uid);
    assert!(resp.allowed, "a Deployment was rejected");
    // In scope: annotated `ns`, and kube-system (ACTIONED_NAMESPACES' default).
    let in_scope = ns == "ns" || ns == "kube-system";
    if dry || !in_scope {
        assert_eq!(writes.count(), before, "a write on dry-run or out of scope");
    }
    if writes.count() > before {
        // Only for a Deployment the apiserver can accept: its selector
        // selects its own pod template.
        let dep: Deployment =
            serde_json::from_value(review["request"]["object"].clone()).expect("a Deployment");
        let labels = eviction_autoscaler::pdb::template_labels(&dep);
        let selector = dep.spec.as_ref().map(|s| &s.selector);
        assert!(
            eviction_autoscaler::budget::pdb_selects(selector, &labels),
            "a PDB for a Deployment whose selector misses its template"
        );
    }
    if let Some(p) = &resp.patch {
        // kube keeps the patch as its JSON bytes (base64 only on the wire).
        let ops: Value = serde_json::from_slice(p).expect("the patch is JSON");
        for op in ops.as_array().expect("a JSON patch is an array") {
            let path = op["path"].as_str().unwrap_or_default();
            assert!(
                path.starts_with("/metadata/annotations"),
                "patch touches {path}"
            );
        }
    }
});
