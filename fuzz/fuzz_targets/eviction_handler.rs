//! The eviction handler over the fixed snapshot (fuzz/src/harness.rs):
//! reviews built from structured input (names known to the snapshot or
//! free text, operations, subresources, dry-run flags), or raw bytes.
//! Properties: never a panic; the answer carries the request's uid and
//! encodes; out of scope is never denied; a denial is the 429 of
//! behaviour.md 4.5 for a pod the snapshot blocks; a dry run queues no signal.
#![no_main]
use std::sync::{Mutex, OnceLock};

use arbitrary::Arbitrary;
use eviction_autoscaler::webhook::{parse_eviction_review, Signal, Webhooks};
use kube::core::admission::AdmissionReview;
use kube::core::DynamicObject;
use eviction_autoscaler_fuzz::harness::{eviction_review, NAMESPACES, PODS};
use eviction_autoscaler_fuzz::runtime;
use libfuzzer_sys::fuzz_target;
use serde_json::{json, Value};
use std::sync::Arc;
use tokio::sync::mpsc::Receiver;

#[derive(Arbitrary, Debug)]
enum Name<'a> {
    Known(u8),
    Free(&'a str),
}

#[derive(Arbitrary, Debug)]
struct Input<'a> {
    raw: Option<&'a [u8]>,
    uid: &'a str,
    ns: Name<'a>,
    pod: Name<'a>,
    dry_run: bool,
    delete_options_dry_run: Option<bool>,
    operation: u8,
    resource: Name<'a>,
    sub_resource: Option<Name<'a>>,
    drop_object: bool,
}

fn pick<'a>(n: &Name<'a>, known: &[&'a str]) -> String {
    match n {
        Name::Known(i) => known[*i as usize % known.len()].to_string(),
        Name::Free(s) => s.to_string(),
    }
}

fn state() -> &'static (Arc<Webhooks>, Mutex<Receiver<Signal>>) {
    static S: OnceLock<(Arc<Webhooks>, Mutex<Receiver<Signal>>)> = OnceLock::new();
    S.get_or_init(|| {
        let (hooks, _, rx) =
            runtime().block_on(async { eviction_autoscaler_fuzz::harness::webhooks(false) });
        (hooks, Mutex::new(rx))
    })
}

fn body(input: &Input) -> Vec<u8> {
    if let Some(raw) = input.raw {
        return raw.to_vec();
    }
    let ns = pick(&input.ns, &NAMESPACES);
    let pod = pick(&input.pod, &PODS);
    let mut v = eviction_review(input.uid, &ns, &pod, input.dry_run);
    let r = &mut v["request"];
    let operation =
        ["CREATE", "UPDATE", "DELETE", "CONNECT", "create", ""][input.operation as usize % 6];
    r["operation"] = json!(operation);
    r["resource"]["resource"] = json!(pick(&input.resource, &["pods", "pods", "deployments"]));
    r["subResource"] = match &input.sub_resource {
        None => Value::Null,
        Some(s) => json!(pick(s, &["eviction", "status", "exec"])),
    };
    if let Some(d) = input.delete_options_dry_run {
        r["object"]["deleteOptions"] = json!({ "dryRun": if d { vec!["All"] } else { vec![] } });
    }
    if input.drop_object {
        r["object"] = Value::Null;
    }
    serde_json::to_vec(&v).unwrap_or_default()
}

fuzz_target!(|input: Input| {
    let (hooks, rx) = state();
    let body = body(&input);
    let Ok(req) = parse_eviction_review(&body) else {
        return;
    };
    let uid = req.uid.to_string();
    let ns = req.namespace.as_deref().unwrap_or_default().to_string();
    let pod = req.name.to_string();
    let dry = req.dry_run;
    let answer = runtime().block_on(hooks.evictions(req));
    // What goes on the wire, read back as kube reads a review.
    let json = answer.review.to_json().expect("the answer serializes");
    let review: AdmissionReview<DynamicObject> =
        serde_json::from_slice(&json).expect("the answer is an AdmissionReview");
    assert_eq!(review.types.api_version, "admission.k8s.io/v1");
    let resp = review.response.as_ref().expect("a response");
    assert_eq!(resp.uid, uid);
    if !resp.allowed {
        assert_eq!(ns, "ns", "denied out of scope");
        assert!(
            pod.starts_with("web-"),
            "denied {pod}, which no budget blocks"
        );
        assert_eq!(resp.result.code, 429);
        assert_eq!(resp.result.reason, "TooManyRequests");
        assert!(resp
            .result
            .message
            .starts_with("Cannot evict pod as it would violate the pod's disruption budget."));
    }
    let mut rx = rx.lock().unwrap_or_else(|p| p.into_inner());
    let mut queued = 0;
    while rx.try_recv().is_ok() {
        queued += 1;
    }
    if dry || resp.allowed {
        assert_eq!(queued, 0, "a signal for an allowed or dry-run eviction");
    } else {
        assert_eq!(queued, 1);
    }
});
