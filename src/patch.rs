//! JSON patches that guard exactly the fields they change: a `test` of the
//! value we based the decision on, then the change. Unlike a resourceVersion
//! precondition they do not fail on the status writes the controllers make
//! all the time, yet a concurrent change of the same field (a user's scale)
//! makes the whole patch fail, and the next pass re-plans.

use std::collections::BTreeMap;

use kube::api::Patch;
use serde_json::{json, Value};

/// RFC 6901 escaping of one path segment.
pub fn escape(segment: &str) -> String {
    segment.replace('~', "~0").replace('/', "~1")
}

/// Sets (Some) or removes (None) annotations, given the ones the object has.
pub fn annotation_ops(
    existing: Option<&BTreeMap<String, String>>,
    changes: &[(&str, Option<String>)],
) -> Vec<Value> {
    let mut ops = Vec::new();
    match existing {
        None => {
            let map: serde_json::Map<String, Value> = changes
                .iter()
                .filter_map(|(k, v)| {
                    v.as_ref()
                        .map(|v| (k.to_string(), Value::String(v.clone())))
                })
                .collect();
            if !map.is_empty() {
                ops.push(json!({"op": "add", "path": "/metadata/annotations", "value": map}));
            }
        }
        Some(a) => {
            for (k, v) in changes {
                let path = format!("/metadata/annotations/{}", escape(k));
                match v {
                    Some(v) => ops.push(json!({"op": "add", "path": path, "value": v})),
                    None if a.contains_key(*k) => ops.push(json!({"op": "remove", "path": path})),
                    None => {}
                }
            }
        }
    }
    ops
}

/// A `test` of the object's resourceVersion, for writes whose guard is an
/// absence: JSON Patch cannot test that a member is absent, and an `add` of
/// what the cache showed absent replaces whatever is there now (a user's
/// annotations, a value just set). Such writes are rare (most objects carry
/// annotations and the value), so failing them on any change costs little.
/// None when the object was read without a version.
pub fn version_guard(resource_version: Option<&str>) -> Option<Value> {
    resource_version
        .map(|rv| json!({"op": "test", "path": "/metadata/resourceVersion", "value": rv}))
}

/// `test` that `path` still holds `expected` (absent when None), then set it to `value`.
pub fn guarded_set(path: &str, expected: Option<Value>, value: Value) -> Vec<Value> {
    match expected {
        Some(e) => vec![
            json!({"op": "test", "path": path, "value": e}),
            json!({"op": "replace", "path": path, "value": value}),
        ],
        None => vec![json!({"op": "add", "path": path, "value": value})],
    }
}

/// Undo a surge recorded on a Deployment: its replicas back to the baseline
/// (never 0) if they are still the surged value, and the markers removed.
/// Not below `floor` (an autoscaler's own minimum, which would lift the
/// Deployment straight back; 0 for none), nor above the surged value.
/// `maxima`: the maxReplicas of the HPAs over it. None when it carries no
/// markers.
pub fn deployment_revert_ops(
    dep: &k8s_openapi::api::apps::v1::Deployment,
    floor: i32,
    maxima: &[i32],
) -> Option<Vec<Value>> {
    let ann = dep.metadata.annotations.as_ref();
    let m = crate::markers::Markers::from_annotations(ann)?;
    let current = dep.spec.as_ref().and_then(|s| s.replicas);
    // Numbers we could not have written (edited, copied), or our surged
    // value written again by someone (a manifest exported mid-surge and
    // re-applied): the value is theirs, as the surge worker takes it (a
    // surge taken over from the Go project, whose client wrote it, is ours).
    let writer = crate::surge::step::deployment_writer(dep);
    let theirs = !m.plausible() || writer == crate::surge::writer::ReplicasWriter::Someone;
    // A surge the HPA controller clamped (Markers::clamped_at): still ours
    // above the baseline, as the surge worker records it (also with no
    // owner of the value recorded: after a scale to 0 there is none).
    let by_autoscaler = writer != crate::surge::writer::ReplicasWriter::Someone;
    let clamped = current.is_some_and(|c| m.clamped_at(c, by_autoscaler, maxima.iter().copied()));
    // Not from 0: an autoscaler leaves a Deployment at 0 alone.
    let floor = if m.baseline > 0 {
        floor.min(m.surged_to)
    } else {
        0
    };
    let to = m.baseline.max(1).max(floor);
    let mut ops = Vec::new();
    // Only our own value is undone; a value someone else set stays, and so
    // does one adopted mid-surge (markers n to n: someone's, even a 0).
    let ours = !theirs && current == Some(m.surged_to) && m.surged_to != m.baseline;
    if (ours && to != m.surged_to) || (clamped && current.is_some_and(|c| to < c)) {
        ops.extend(guarded_set(
            "/spec/replicas",
            current.map(|c| json!(c)),
            json!(to),
        ));
    }
    ops.extend(annotation_ops(ann, &crate::markers::Markers::CLEAR));
    Some(ops)
}

pub fn json_patch(ops: Vec<Value>) -> Result<Patch<()>, kube::Error> {
    let p: json_patch::Patch =
        serde_json::from_value(Value::Array(ops)).map_err(kube::Error::SerdeError)?;
    Ok(Patch::Json(p))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn apply(doc: &mut Value, ops: Vec<Value>) -> Result<(), String> {
        let p: json_patch::Patch =
            serde_json::from_value(Value::Array(ops)).map_err(|e| e.to_string())?;
        json_patch::patch(doc, &p).map_err(|e| e.to_string())
    }

    #[test]
    fn guarded_replica_change() {
        let mut doc = json!({"metadata": {}, "spec": {"replicas": 3}});
        let mut ops = guarded_set("/spec/replicas", Some(json!(3)), json!(6));
        ops.extend(annotation_ops(
            None,
            &[
                ("evictionSurgeReplicas", Some("6".into())),
                ("a/b", Some("3".into())),
            ],
        ));
        apply(&mut doc, ops).unwrap();
        assert_eq!(doc["spec"]["replicas"], 6);
        assert_eq!(doc["metadata"]["annotations"]["a/b"], "3");
        // Someone else changed it: the test fails, nothing is applied.
        let mut doc2 = json!({"metadata": {"annotations": {}}, "spec": {"replicas": 5}});
        let mut ops = guarded_set("/spec/replicas", Some(json!(3)), json!(6));
        ops.extend(annotation_ops(
            Some(&BTreeMap::new()),
            &[("x", Some("1".into()))],
        ));
        assert!(apply(&mut doc2, ops).is_err());
    }

    #[test]
    fn annotations_removed_only_when_present() {
        let existing: BTreeMap<String, String> = [("a/b".to_string(), "1".to_string())].into();
        let ops = annotation_ops(Some(&existing), &[("a/b", None), ("c", None)]);
        assert_eq!(
            ops,
            vec![json!({"op": "remove", "path": "/metadata/annotations/a~1b"})]
        );
    }
}
