//! Any bytes as an AdmissionReview body: the decoder never panics, and a
//! request it accepts always yields an answer that encodes.
#![no_main]
use kube::core::admission::AdmissionResponse;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(req) = eviction_autoscaler::webhook::parse_review(data) {
        let review = AdmissionResponse::from(&req).into_review();
        assert!(serde_json::to_vec(&review).is_ok());
    }
});
