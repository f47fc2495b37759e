//! Any bytes as an AdmissionReview body: no decoder (kube's typed one, the
//! mutating webhook's, the eviction webhook's fields-only one) panics, a
//! request either accepts always yields an answer that encodes, and the two
//! agree on the fields they share.
#![no_main]
use kube::core::admission::AdmissionResponse;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let typed = eviction_autoscaler::webhook::parse_review(data);
    if let Ok(req) = &typed {
        let review = AdmissionResponse::from(req).into_review();
        assert!(serde_json::to_vec(&review).is_ok());
    }
    // The Deployment webhook's decoder (the object kept raw).
    if let Ok(d) = eviction_autoscaler::webhook::parse_deployment_review(data) {
        let review = AdmissionResponse::from(&d.request).into_review();
        assert!(serde_json::to_vec(&review).is_ok());
        if let Ok(req) = &typed {
            assert_eq!(
                (&d.request.uid, &d.request.name, &d.request.namespace),
                (&req.uid, &req.name, &req.namespace)
            );
        }
    }
    if let Ok(fast) = eviction_autoscaler::webhook::parse_eviction_review(data) {
        let review = eviction_autoscaler::webhook::review::into_review(fast.response());
        assert!(serde_json::to_vec(&review).is_ok());
        if let Ok(req) = &typed {
            assert_eq!(
                (
                    &*fast.uid,
                    &*fast.name,
                    fast.namespace.as_deref(),
                    fast.sub_resource.as_deref()
                ),
                (
                    req.uid.as_str(),
                    req.name.as_str(),
                    req.namespace.as_deref(),
                    req.sub_resource.as_deref()
                )
            );
        }
    }
});
