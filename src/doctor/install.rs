//! The installation checks of `eviction-autoscaler doctor`: an installation
//! checked the way an operator would by hand, one line per finding. The
//! findings are computed by pure functions over the objects read, so each
//! rule is tested.

use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhook, MutatingWebhookConfiguration, RuleWithOperations, ValidatingWebhook,
    ValidatingWebhookConfiguration, WebhookClientConfig,
};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{ListParams, PostParams};
use kube::{Api, Client};

use crate::crd::EvictionAutoScaler;

use super::{Finding, Level};

fn ok(what: impl Into<String>) -> Finding {
    Finding {
        level: Level::Ok,
        what: what.into(),
    }
}
fn warn(what: impl Into<String>) -> Finding {
    Finding {
        level: Level::Warn,
        what: what.into(),
    }
}
fn fail(what: impl Into<String>) -> Finding {
    Finding {
        level: Level::Fail,
        what: what.into(),
    }
}

/// What one webhook of either configuration must look like.
pub struct WebhookView<'a> {
    pub name: &'a str,
    pub failure_policy: Option<&'a str>,
    pub side_effects: &'a str,
    pub versions: &'a [String],
    pub client: &'a WebhookClientConfig,
    pub rules: &'a [RuleWithOperations],
}

pub fn check_webhook(w: &WebhookView, resource: &str) -> Vec<Finding> {
    let mut out = Vec::new();
    // Unset failurePolicy means Fail in admissionregistration/v1.
    if w.failure_policy != Some("Ignore") {
        out.push(fail(format!(
            "webhook {}: failurePolicy is {:?}; it must be Ignore so that drains work when the webhook is down",
            w.name,
            w.failure_policy.unwrap_or("Fail (unset)")
        )));
    }
    if w.side_effects != "NoneOnDryRun" && w.side_effects != "None" {
        out.push(fail(format!(
            "webhook {}: sideEffects {} makes dry-run requests fail",
            w.name, w.side_effects
        )));
    }
    if !w.versions.iter().any(|v| v == "v1") {
        out.push(fail(format!(
            "webhook {}: admissionReviewVersions lacks v1",
            w.name
        )));
    }
    if w.client.ca_bundle.as_ref().is_none_or(|b| b.0.is_empty()) {
        out.push(warn(format!(
            "webhook {}: no caBundle (fine only if the serving certificate is publicly trusted)",
            w.name
        )));
    }
    let covers = w.rules.iter().any(|r| {
        r.operations
            .as_ref()
            .is_some_and(|o| o.iter().any(|o| o == "CREATE" || o == "*"))
            && r.resources
                .as_ref()
                .is_some_and(|rs| rs.iter().any(|x| x == resource || x == "*"))
    });
    if !covers {
        out.push(fail(format!(
            "webhook {}: its rules do not cover CREATE of {resource}",
            w.name
        )));
    }
    if out.is_empty() {
        out.push(ok(format!("webhook {} is registered as required", w.name)));
    }
    out
}

/// Both webhook types carry the same fields; one view serves the checks.
macro_rules! webhook_view {
    ($t:ty) => {
        impl<'a> From<&'a $t> for WebhookView<'a> {
            fn from(w: &'a $t) -> Self {
                WebhookView {
                    name: &w.name,
                    failure_policy: w.failure_policy.as_deref(),
                    side_effects: &w.side_effects,
                    versions: &w.admission_review_versions,
                    client: &w.client_config,
                    rules: w.rules.as_deref().unwrap_or_default(),
                }
            }
        }
    };
}
webhook_view!(ValidatingWebhook);
webhook_view!(MutatingWebhook);

/// The webhooks of one configuration, as read (or why not).
fn check_configuration<W>(
    read: Result<Option<Vec<W>>, kube::Error>,
    resource: &str,
    missing: Finding,
) -> Vec<Finding>
where
    for<'a> &'a W: Into<WebhookView<'a>>,
{
    match read {
        Ok(Some(webhooks)) => webhooks
            .iter()
            .flat_map(|w| check_webhook(&w.into(), resource))
            .collect(),
        Ok(None) => vec![missing],
        Err(e) => vec![warn(format!("cannot read webhook configurations: {e}"))],
    }
}

pub fn check_lease(lease: Option<&Lease>, now: Timestamp) -> Finding {
    let Some(spec) = lease.and_then(|l| l.spec.as_ref()) else {
        return warn("no leader Lease yet: no replica runs the controllers");
    };
    let holder = spec.holder_identity.as_deref().unwrap_or_default();
    let duration = i64::from(spec.lease_duration_seconds.unwrap_or(15));
    match spec.renew_time.as_ref() {
        Some(t) if holder.is_empty() => warn(format!("leader Lease released at {}", t.0)),
        Some(t) if t.0 + SignedDuration::from_secs(duration) >= now => ok(format!(
            "leader {holder}, renewed {}s ago",
            (now - t.0).get_seconds()
        )),
        _ => fail(format!(
            "leader Lease held by {holder:?} has expired: no replica runs the controllers"
        )),
    }
}

/// Permissions the features need (verb, group, resource, subresource).
pub const NEEDED: &[(&str, &str, &str, &str)] = &[
    ("watch", "", "pods", ""),
    ("watch", "", "nodes", ""),
    ("watch", "", "namespaces", ""),
    ("watch", "apps", "replicasets", ""),
    ("patch", "apps", "deployments", ""),
    ("patch", "autoscaling", "horizontalpodautoscalers", ""),
    // The watch too: while KEDA is served and this is refused, the
    // Deployments under KEDA's HPAs are neither surged nor reverted.
    ("watch", "keda.sh", "scaledobjects", ""),
    ("patch", "keda.sh", "scaledobjects", ""),
    ("create", "policy", "poddisruptionbudgets", ""),
    ("delete", "policy", "poddisruptionbudgets", ""),
    ("patch", "policy", "poddisruptionbudgets", "status"),
    (
        "create",
        "eviction-autoscaler.azure.com",
        "evictionautoscalers",
        "",
    ),
    (
        "patch",
        "eviction-autoscaler.azure.com",
        "evictionautoscalers",
        "status",
    ),
    ("create", "events.k8s.io", "events", ""),
];

pub async fn run(client: Client, namespace: &str, service_account: &str) -> Vec<Finding> {
    let mut out = Vec::new();
    match client.apiserver_version().await {
        Ok(v) => out.push(ok(format!(
            "apiserver reachable, Kubernetes {}",
            v.git_version
        ))),
        Err(e) => {
            out.push(fail(format!("apiserver not reachable: {e}")));
            return out;
        }
    }

    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    match crds
        .get_opt("evictionautoscalers.eviction-autoscaler.azure.com")
        .await
    {
        Ok(Some(c)) => {
            let established = c.status.as_ref().is_some_and(|s| {
                s.conditions
                    .iter()
                    .flatten()
                    .any(|c| c.type_ == "Established" && c.status == "True")
            });
            out.push(if established {
                ok("CRD evictionautoscalers.eviction-autoscaler.azure.com established")
            } else {
                fail("CRD evictionautoscalers.eviction-autoscaler.azure.com not established")
            });
        }
        Ok(None) => out.push(fail("CRD evictionautoscalers.eviction-autoscaler.azure.com missing: kubectl apply -f manifests/crd.yaml")),
        Err(e) => out.push(warn(format!("cannot read CRDs: {e}"))),
    }

    let validating = Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .get_opt("eviction-autoscaler")
        .await
        .map(|c| c.map(|c| c.webhooks.unwrap_or_default()));
    out.extend(check_configuration(
        validating,
        "pods/eviction",
        fail("ValidatingWebhookConfiguration eviction-autoscaler missing: no surge on blocked evictions"),
    ));
    let mutating = Api::<MutatingWebhookConfiguration>::all(client.clone())
        .get_opt("eviction-autoscaler")
        .await
        .map(|c| c.map(|c| c.webhooks.unwrap_or_default()));
    out.extend(check_configuration(
        mutating,
        "deployments",
        warn("MutatingWebhookConfiguration eviction-autoscaler missing: PDBs come from the reconciler only"),
    ));

    let user = format!("system:serviceaccount:{namespace}:{service_account}");
    let sar: Api<SubjectAccessReview> = Api::all(client.clone());
    let mut missing = Vec::new();
    for (verb, group, resource, sub) in NEEDED {
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(user.clone()),
                groups: Some(vec![
                    "system:serviceaccounts".into(),
                    format!("system:serviceaccounts:{namespace}"),
                ]),
                resource_attributes: Some(ResourceAttributes {
                    verb: Some((*verb).into()),
                    group: Some((*group).into()),
                    resource: Some((*resource).into()),
                    subresource: (!sub.is_empty()).then(|| (*sub).to_string()),
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        match sar.create(&PostParams::default(), &review).await {
            Ok(r) if r.status.as_ref().is_some_and(|s| s.allowed) => {}
            Ok(_) => missing.push(format!(
                "{verb} {resource}{}",
                if sub.is_empty() {
                    String::new()
                } else {
                    format!("/{sub}")
                }
            )),
            Err(e) => {
                out.push(warn(format!(
                    "cannot check RBAC (SubjectAccessReview): {e}"
                )));
                missing.clear();
                break;
            }
        }
    }
    if missing.is_empty() {
        out.push(ok(format!("RBAC of {user} covers the features")));
    } else {
        out.push(fail(format!("{user} lacks: {}", missing.join(", "))));
    }

    let leases: Api<Lease> = Api::namespaced(client.clone(), namespace);
    match leases.get_opt("eviction-autoscaler").await {
        Ok(l) => out.push(check_lease(l.as_ref(), Timestamp::now())),
        Err(e) => out.push(warn(format!("cannot read the leader Lease: {e}"))),
    }

    let eas: Api<EvictionAutoScaler> = Api::all(client);
    if let Ok(list) = eas.list(&ListParams::default()).await {
        let mut surging = 0;
        for e in &list.items {
            let st = e.status.as_ref();
            if st.and_then(|s| s.surge_replicas).unwrap_or(0) > 0 {
                surging += 1;
            }
            out.extend(check_terminating(e, Timestamp::now()));
            for c in st.map(|s| s.conditions.as_slice()).unwrap_or_default() {
                if c.type_ == "Degraded" && c.status == "True" {
                    out.push(warn(format!(
                        "{}/{} Degraded ({}): {}",
                        e.metadata.namespace.as_deref().unwrap_or_default(),
                        e.metadata.name.as_deref().unwrap_or_default(),
                        c.reason,
                        c.message
                    )));
                }
            }
        }
        out.push(ok(format!(
            "{} EvictionAutoScalers, {surging} surging",
            list.items.len()
        )));
    }
    out
}

/// How long a record may stay Terminating before doctor names what holds it.
const TERMINATING_FOR: SignedDuration = SignedDuration::from_secs(60);

/// A record deleted for a while and still there: the finalizers that hold
/// it, and for the Go project's, what would let them go.
pub fn check_terminating(e: &EvictionAutoScaler, now: Timestamp) -> Option<Finding> {
    use crate::finalizers::{
        ORIGINAL_PDB_SPEC, PDB_FLOOR, PDB_FLOOR_RESTORE, PINNED_FLOOR, SURGE_REVERT,
    };
    let since = e.metadata.deletion_timestamp.as_ref()?.0;
    let held: Vec<&String> = e.metadata.finalizers.iter().flatten().collect();
    if held.is_empty() || now.duration_since(since) < TERMINATING_FOR {
        return None;
    }
    let name = e.metadata.name.as_deref().unwrap_or_default();
    let why: Vec<String> = held
        .iter()
        .map(|f| match f.as_str() {
            SURGE_REVERT => format!(
                "{f} (the Go project's: goes once no object of Deployment {} carries a surge's marker)",
                e.spec.target_name
            ),
            PDB_FLOOR | PDB_FLOOR_RESTORE => format!(
                "{f} (the Go project's: goes once PodDisruptionBudget {name} no longer carries the \
                 floor it pinned; this product does not restore it: put back the spec saved in \
                 annotation {ORIGINAL_PDB_SPEC}, then remove it and {PINNED_FLOOR})"
            ),
            _ => format!("{f} (not this product's)"),
        })
        .collect();
    Some(warn(format!(
        "{}/{name} Terminating since {since}, held by {}",
        e.metadata.namespace.as_deref().unwrap_or_default(),
        why.join("; ")
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::coordination::v1::LeaseSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
    use k8s_openapi::ByteString;

    #[test]
    fn a_record_held_terminating_is_named_with_what_would_free_it() {
        use crate::finalizers::{PDB_FLOOR, SURGE_REVERT};
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
        let now = Timestamp::from_second(1_000_000).expect("time");
        let mut e = EvictionAutoScaler::new(
            "web",
            crate::crd::EvictionAutoScalerSpec {
                target_name: "web".into(),
                target_kind: "deployment".into(),
                last_eviction: None,
            },
        );
        e.metadata.namespace = Some("shop".into());
        assert!(check_terminating(&e, now).is_none(), "not deleted");
        e.metadata.deletion_timestamp = Some(Time(now - SignedDuration::from_secs(120)));
        assert!(
            check_terminating(&e, now).is_none(),
            "no finalizer: about to go"
        );
        e.metadata.finalizers = Some(vec![PDB_FLOOR.into(), "example.com/x".into()]);
        let f = check_terminating(&e, now).expect("named");
        assert_eq!(f.level, Level::Warn);
        assert!(
            f.what.starts_with("shop/web Terminating since"),
            "{}",
            f.what
        );
        assert!(
            f.what.contains("original-pdb-spec")
                && f.what.contains("example.com/x (not this product's)"),
            "{}",
            f.what
        );
        e.metadata.finalizers = Some(vec![SURGE_REVERT.into()]);
        assert!(check_terminating(&e, now)
            .expect("named")
            .what
            .contains("Deployment web"));
        // Just deleted: a pass has yet to release it.
        e.metadata.deletion_timestamp = Some(Time(now - SignedDuration::from_secs(5)));
        assert!(check_terminating(&e, now).is_none());
    }

    fn rules(resource: &str) -> Vec<RuleWithOperations> {
        vec![RuleWithOperations {
            operations: Some(vec!["CREATE".into()]),
            resources: Some(vec![resource.into()]),
            ..Default::default()
        }]
    }

    #[test]
    fn webhook_rules() {
        let client = WebhookClientConfig {
            ca_bundle: Some(ByteString(b"pem".to_vec())),
            ..Default::default()
        };
        let versions = vec!["v1".to_string()];
        let r = rules("pods/eviction");
        let good = WebhookView {
            name: "w",
            failure_policy: Some("Ignore"),
            side_effects: "NoneOnDryRun",
            versions: &versions,
            client: &client,
            rules: &r,
        };
        let f = check_webhook(&good, "pods/eviction");
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].level, Level::Ok);
        let bad = WebhookView {
            failure_policy: None,
            side_effects: "Some",
            ..good
        };
        let f = check_webhook(&bad, "pods/eviction");
        assert!(
            f.iter().filter(|x| x.level == Level::Fail).count() == 2,
            "{f:?}"
        );
        assert!(f[0].what.contains("failurePolicy"));
        let f = check_webhook(
            &WebhookView {
                failure_policy: Some("Ignore"),
                side_effects: "None",
                ..bad
            },
            "deployments",
        );
        assert!(f.iter().any(|x| x.what.contains("do not cover")), "{f:?}");
    }

    #[test]
    fn lease_states() {
        let now = Timestamp::now();
        let lease = |holder: &str, ago: i64| Lease {
            spec: Some(LeaseSpec {
                holder_identity: Some(holder.into()),
                lease_duration_seconds: Some(15),
                renew_time: Some(MicroTime(now - SignedDuration::from_secs(ago))),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(check_lease(Some(&lease("a", 3)), now).level, Level::Ok);
        assert_eq!(check_lease(Some(&lease("a", 60)), now).level, Level::Fail);
        assert_eq!(check_lease(None, now).level, Level::Warn);
    }
}
