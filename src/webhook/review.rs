//! The eviction webhook's AdmissionReview: only the fields it reads.
//!
//! Every drain sends one review per pod and retry, so this is the hot path.
//! kube's `AdmissionRequest<DynamicObject>` allocates every field of the
//! review (user info, kinds, options, the object as a JSON tree); the
//! profile of `make bench` put that parse at a quarter of the time spent per
//! request. Here strings are borrowed from the body where they need no
//! unescaping, everything else is skipped unread, and the answer is built
//! without a request object.

use std::borrow::Cow;

use kube::core::admission::{AdmissionResponse, AdmissionReview};
use kube::core::DynamicObject;
use serde::Deserialize;

use super::ReviewError;

/// The review a webhook sends back.
#[derive(Debug)]
pub enum Reply {
    /// Allowed, with an optional warning: the answer to nearly every
    /// eviction, written without building kube's response types (the same
    /// bytes; a unit test compares them).
    Allowed {
        uid: String,
        warning: Option<String>,
    },
    /// Any other answer (boxed: the common answer stays small).
    Review(Box<AdmissionReview<DynamicObject>>),
}

impl Reply {
    /// The review carrying `resp` back.
    pub fn review(resp: AdmissionResponse) -> Self {
        Reply::Review(Box::new(into_review(resp)))
    }

    /// The JSON body.
    pub fn to_json(&self) -> Result<Vec<u8>, serde_json::Error> {
        match self {
            // Written straight out: only the uid and the warning need
            // escaping (a profile put serializing the constant keys at 1.6%
            // of the eviction path's CPU).
            Reply::Allowed { uid, warning } => {
                let mut out = Vec::with_capacity(
                    ALLOWED_HEAD.len() + uid.len() + 64 + warning.as_ref().map_or(0, String::len),
                );
                out.extend_from_slice(ALLOWED_HEAD);
                serde_json::to_writer(&mut out, uid)?;
                out.extend_from_slice(br#","allowed":true,"status":{}"#);
                if let Some(w) = warning {
                    out.extend_from_slice(br#","warnings":["#);
                    serde_json::to_writer(&mut out, w)?;
                    out.push(b']');
                }
                out.extend_from_slice(b"}}");
                Ok(out)
            }
            Reply::Review(r) => serde_json::to_vec(r),
        }
    }
}

// Field order and names as kube's AdmissionReview / AdmissionResponse
// serialize them (an empty Status is `{}`); a unit test compares the bytes.
const ALLOWED_HEAD: &[u8] =
    br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":"#;

/// What the eviction webhook needs from a review, borrowed from the body
/// where the JSON needs no unescaping (no allocation on the hot path).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EvictionRequest<'a> {
    pub uid: Cow<'a, str>,
    pub namespace: Option<Cow<'a, str>>,
    pub name: Cow<'a, str>,
    /// `request.resource.resource` ("pods" for an eviction).
    pub resource: Cow<'a, str>,
    pub sub_resource: Option<Cow<'a, str>>,
    /// `CREATE` for an eviction; kept as sent.
    pub operation: Cow<'a, str>,
    /// The request is a dry run: `request.dryRun`, or a non-empty
    /// `deleteOptions.dryRun` in the Eviction itself.
    pub dry_run: bool,
}

impl EvictionRequest<'_> {
    /// An eviction (`CREATE pods/eviction`) in a namespace.
    pub fn is_eviction(&self) -> bool {
        self.resource == "pods"
            && self.sub_resource.as_deref() == Some("eviction")
            && self.operation == "CREATE"
            && self.namespace.is_some()
    }

    /// The review allowing this request, with a warning for the client.
    pub fn allowed(&self, warning: Option<String>) -> Reply {
        Reply::Allowed {
            uid: self.uid.to_string(),
            warning,
        }
    }

    /// An answer with this request's uid (allowed, no status).
    pub fn response(&self) -> AdmissionResponse {
        let mut r = AdmissionResponse::invalid("");
        r.uid = self.uid.to_string();
        r.allowed = true;
        r.result = Default::default();
        r
    }
}

#[derive(Deserialize)]
struct Wire<'a> {
    #[serde(borrow, rename = "apiVersion", default)]
    api_version: Cow<'a, str>,
    #[serde(borrow, default)]
    kind: Cow<'a, str>,
    #[serde(borrow)]
    request: Option<WireRequest<'a>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireRequest<'a> {
    #[serde(borrow)]
    uid: Cow<'a, str>,
    #[serde(borrow)]
    resource: WireResource<'a>,
    #[serde(borrow, default, deserialize_with = "borrowed")]
    sub_resource: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    name: Cow<'a, str>,
    #[serde(borrow, default, deserialize_with = "borrowed")]
    namespace: Option<Cow<'a, str>>,
    #[serde(borrow)]
    operation: Cow<'a, str>,
    #[serde(default)]
    dry_run: Option<bool>,
    #[serde(borrow, default)]
    object: Option<WireEviction<'a>>,
}

/// An optional string, borrowed where it can be: serde borrows a `Cow`
/// field itself, but copies one inside an `Option`.
fn borrowed<'de: 'a, 'a, D>(d: D) -> Result<Option<Cow<'a, str>>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    #[derive(Deserialize)]
    struct Borrowed<'a>(#[serde(borrow)] Cow<'a, str>);
    Ok(Option::<Borrowed>::deserialize(d)?.map(|b| b.0))
}

#[derive(Deserialize)]
struct WireResource<'a> {
    #[serde(borrow)]
    resource: Cow<'a, str>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireEviction<'a> {
    #[serde(borrow, default)]
    delete_options: Option<WireDeleteOptions<'a>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireDeleteOptions<'a> {
    #[serde(borrow, default)]
    dry_run: Option<Vec<Cow<'a, str>>>,
}

/// Parses an AdmissionReview v1 of an eviction (any other request too: the
/// handler answers what it does not handle).
pub fn parse_eviction_review(body: &[u8]) -> Result<EvictionRequest<'_>, ReviewError> {
    let w: Wire = serde_json::from_slice(body)?;
    super::v1_review(&w.api_version, &w.kind)?;
    let r = w.request.ok_or(ReviewError::NoRequest)?;
    let options_dry_run = r
        .object
        .and_then(|o| o.delete_options)
        .and_then(|d| d.dry_run)
        .is_some_and(|v| !v.is_empty());
    Ok(EvictionRequest {
        uid: r.uid,
        namespace: r.namespace,
        name: r.name,
        resource: r.resource.resource,
        sub_resource: r.sub_resource,
        operation: r.operation,
        dry_run: r.dry_run.unwrap_or(false) || options_dry_run,
    })
}

/// The review that carries `resp` back. kube's `into_review` copies the
/// request's type meta, which a request never carries on the wire; the
/// apiserver needs apiVersion and kind set.
pub fn into_review(resp: AdmissionResponse) -> AdmissionReview<DynamicObject> {
    let mut review = resp.into_review();
    review.types = kube::core::TypeMeta {
        api_version: "admission.k8s.io/v1".into(),
        kind: "AdmissionReview".into(),
    };
    review
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::webhook::parse_review;

    pub const EVICTION: &str = r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"705ab4f5-6393-11e8-b7cc-42010a800002","kind":{"group":"policy","version":"v1","kind":"Eviction"},"resource":{"group":"","version":"v1","resource":"pods"},"subResource":"eviction","requestKind":{"group":"policy","version":"v1","kind":"Eviction"},"requestResource":{"group":"","version":"v1","resource":"pods"},"requestSubResource":"eviction","name":"web-1","namespace":"ns","operation":"CREATE","userInfo":{"username":"admin"},"object":{"apiVersion":"policy/v1","kind":"Eviction","metadata":{"name":"web-1","namespace":"ns"}},"oldObject":null,"dryRun":false,"options":{"apiVersion":"meta.k8s.io/v1","kind":"CreateOptions"}}}"#;

    #[test]
    fn reads_what_the_typed_review_reads() {
        let fast = parse_eviction_review(EVICTION.as_bytes()).unwrap();
        let full = parse_review(EVICTION.as_bytes()).unwrap();
        assert_eq!(fast.uid, full.uid);
        assert_eq!(fast.name, full.name);
        assert_eq!(fast.namespace.as_deref(), full.namespace.as_deref());
        assert_eq!(fast.resource, full.resource.resource);
        assert_eq!(fast.sub_resource.as_deref(), full.sub_resource.as_deref());
        assert!(fast.is_eviction() && !fast.dry_run);
        // Plain strings are borrowed from the body: no allocation per field.
        for field in [&fast.uid, &fast.name, &fast.resource, &fast.operation] {
            assert!(matches!(field, Cow::Borrowed(_)), "{field:?} was copied");
        }
        assert!(matches!(fast.namespace, Some(Cow::Borrowed(_))));
        assert!(matches!(fast.sub_resource, Some(Cow::Borrowed(_))));
        // Escaped strings are unescaped, not borrowed.
        let escaped = EVICTION.replace(r#""name":"web-1""#, r#""name":"web\u002d1""#);
        let unescaped = parse_eviction_review(escaped.as_bytes()).unwrap().name;
        assert_eq!(unescaped, "web-1");
        assert!(matches!(unescaped, Cow::Owned(_)));
        let escaped = EVICTION.replace(r#""namespace":"ns""#, r#""namespace":"n\u0073""#);
        let unescaped = parse_eviction_review(escaped.as_bytes()).unwrap().namespace;
        assert_eq!(unescaped.as_deref(), Some("ns"));
        assert!(matches!(unescaped, Some(Cow::Owned(_))));
    }

    #[test]
    fn dry_runs_either_way() {
        let options = EVICTION.replace(
            r#""metadata":{"name":"web-1","namespace":"ns"}}"#,
            r#""metadata":{"name":"web-1","namespace":"ns"},"deleteOptions":{"dryRun":["All"]}}"#,
        );
        assert!(parse_eviction_review(options.as_bytes()).unwrap().dry_run);
        let empty = EVICTION.replace(
            r#""metadata":{"name":"web-1","namespace":"ns"}}"#,
            r#""metadata":{"name":"web-1","namespace":"ns"},"deleteOptions":{"dryRun":[]}}"#,
        );
        assert!(!parse_eviction_review(empty.as_bytes()).unwrap().dry_run);
        let request = EVICTION.replace(r#""dryRun":false"#, r#""dryRun":true"#);
        assert!(parse_eviction_review(request.as_bytes()).unwrap().dry_run);
        let no_object = EVICTION.replace(
            r#""object":{"apiVersion":"policy/v1","kind":"Eviction","metadata":{"name":"web-1","namespace":"ns"}}"#,
            r#""object":null"#,
        );
        assert!(!parse_eviction_review(no_object.as_bytes()).unwrap().dry_run);
    }

    #[test]
    fn rejects_what_is_not_a_v1_review() {
        for bad in [&b"garbage"[..], b"{}", b"[]", b"{\"request\":{}}"] {
            assert!(parse_eviction_review(bad).is_err(), "{bad:?}");
        }
        assert!(matches!(
            parse_eviction_review(
                br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}"#
            ),
            Err(ReviewError::NoRequest)
        ));
        let v1beta1 = EVICTION.replace("admission.k8s.io/v1", "admission.k8s.io/v1beta1");
        assert!(matches!(
            parse_eviction_review(v1beta1.as_bytes()),
            Err(ReviewError::Version(_))
        ));
        // A request without the fields every review has is not a review.
        let no_uid = EVICTION.replace(r#""uid":"705ab4f5-6393-11e8-b7cc-42010a800002","#, "");
        assert!(matches!(
            parse_eviction_review(no_uid.as_bytes()),
            Err(ReviewError::Parse(_))
        ));
    }

    #[test]
    fn answers_with_the_uid_and_the_v1_types() {
        let req = parse_eviction_review(EVICTION.as_bytes()).unwrap();
        let v = serde_json::to_value(into_review(req.response())).unwrap();
        assert_eq!(v["apiVersion"], "admission.k8s.io/v1");
        assert_eq!(v["kind"], "AdmissionReview");
        assert_eq!(v["response"]["uid"], "705ab4f5-6393-11e8-b7cc-42010a800002");
        assert_eq!(v["response"]["allowed"], true);
    }

    #[test]
    fn the_written_allow_is_byte_for_byte_the_one_kube_writes() {
        let uids = [
            "705ab4f5-6393-11e8-b7cc-42010a800002",
            "",
            "a\"b\\c\u{1}\u{e9}",
        ];
        let warnings = [None, Some("two PDBs: a, b"), Some("\"quoted\"\n\u{2028}")];
        for uid in uids {
            for warning in warnings {
                let mut req = parse_eviction_review(EVICTION.as_bytes()).unwrap();
                req.uid = uid.into();
                let mut resp = req.response();
                resp.warnings = warning.map(|w| vec![w.to_string()]);
                let kube = serde_json::to_vec(&into_review(resp)).unwrap();
                let ours = req.allowed(warning.map(str::to_string)).to_json().unwrap();
                assert_eq!(
                    String::from_utf8_lossy(&ours),
                    String::from_utf8_lossy(&kube)
                );
                // And kube reads it back.
                let back: AdmissionReview<DynamicObject> = serde_json::from_slice(&ours).unwrap();
                let r = back.response.unwrap();
                assert!(r.allowed);
                assert_eq!(r.uid, uid);
            }
        }
    }
}
