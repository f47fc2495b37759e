//! Admission webhooks: the AdmissionReview codec and the two handlers.
//! Decisions are pure (`eviction::decide`, `pdb::plan_for_new_deployment`);
//! this module does the parsing, the I/O and the answer.

pub mod eviction;
pub mod hold;
pub mod live;
pub mod review;

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::PostParams;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview, Operation};
use kube::core::response::{StatusCause, StatusDetails, StatusSummary};
use kube::core::DynamicObject;
use kube::{Api, Client};
use tokio::sync::{mpsc, Semaphore};

use crate::cache::Cache;
use crate::metrics::{AdmissionLabels, HoldLabel, Metrics, WebhookLabel, BUDGET_ALLOWS, EVICTIONS};
use crate::names;
use crate::pdb::{self, CreatePlan};
use eviction::{AllowReason, Blocked, Decision, EvictionView, Recount, SurgeState};
use hold::{HoldFor, HoldOutcome};
use live::ApiReader;
pub use review::{parse_eviction_review, EvictionRequest, Reply};

/// A blocked eviction, handed to the surge worker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signal {
    pub namespace: String,
    pub deployment: String,
    pub pdb: String,
    pub pod: String,
}

#[derive(Debug, thiserror::Error)]
pub enum ReviewError {
    #[error("request body is not an AdmissionReview: {0}")]
    Parse(#[from] serde_json::Error),
    #[error("AdmissionReview has no request")]
    NoRequest,
    #[error("unsupported AdmissionReview apiVersion {0:?}; want admission.k8s.io/v1")]
    Version(String),
}

/// The Deployment webhook's review: the request without its object, and
/// the object as sent, unparsed (read as a typed Deployment by the handler,
/// its unknown fields skipped unread). `oldObject`, `options` and
/// `userInfo` are not read. kube's `AdmissionRequest<DynamicObject>` kept
/// the object and the options as JSON trees, some 600 bytes per JSON
/// object in them, and the handler copied the object twice more: a
/// 3 MiB review of small objects grew to hundreds of MiB.
pub struct DeploymentReview {
    pub request: AdmissionRequest<DynamicObject>,
    pub object: Option<Box<serde_json::value::RawValue>>,
}

/// Parses an AdmissionReview v1 for the Deployment webhook (see
/// [`DeploymentReview`]).
pub fn parse_deployment_review(body: &[u8]) -> Result<DeploymentReview, ReviewError> {
    use kube::core::{GroupVersionKind, GroupVersionResource, TypeMeta};
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Wire {
        #[serde(default)]
        api_version: String,
        #[serde(default)]
        kind: String,
        request: Option<Request>,
    }
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Request {
        uid: String,
        kind: GroupVersionKind,
        resource: GroupVersionResource,
        #[serde(default)]
        sub_resource: Option<String>,
        #[serde(default)]
        name: String,
        #[serde(default)]
        namespace: Option<String>,
        operation: Operation,
        #[serde(default)]
        object: Option<Box<serde_json::value::RawValue>>,
        #[serde(default)]
        dry_run: bool,
    }
    let w: Wire = serde_json::from_slice(body)?;
    v1_review(&w.api_version, &w.kind)?;
    let r = w.request.ok_or(ReviewError::NoRequest)?;
    Ok(DeploymentReview {
        request: AdmissionRequest {
            types: TypeMeta {
                api_version: w.api_version,
                kind: w.kind,
            },
            uid: r.uid,
            kind: r.kind,
            resource: r.resource,
            sub_resource: r.sub_resource,
            request_kind: None,
            request_resource: None,
            request_sub_resource: None,
            name: r.name,
            namespace: r.namespace,
            operation: r.operation,
            user_info: Default::default(),
            object: None,
            old_object: None,
            dry_run: r.dry_run,
            options: None,
        },
        object: r.object,
    })
}

/// Only AdmissionReview v1 is read (the webhooks register v1 alone).
pub(crate) fn v1_review(api_version: &str, kind: &str) -> Result<(), ReviewError> {
    if api_version != "admission.k8s.io/v1" || kind != "AdmissionReview" {
        return Err(ReviewError::Version(format!("{api_version}/{kind}")));
    }
    Ok(())
}

/// Parses an AdmissionReview v1 (any object kind).
pub fn parse_review(body: &[u8]) -> Result<AdmissionRequest<DynamicObject>, ReviewError> {
    let review: AdmissionReview<DynamicObject> = serde_json::from_slice(body)?;
    v1_review(&review.types.api_version, &review.types.kind)?;
    review.request.ok_or(ReviewError::NoRequest)
}

/// What the HTTP layer sends back: the review and the code for metrics.
pub struct Answer {
    pub review: Reply,
    pub decision: &'static str,
    pub code: u16,
}

fn allowed(req: &AdmissionRequest<DynamicObject>, warning: Option<String>) -> AdmissionResponse {
    let mut resp = AdmissionResponse::from(req);
    resp.warnings = warning.map(|w| vec![w]);
    resp
}

/// The 429 the apiserver would give, with our message (behaviour.md 4.5).
pub fn deny_too_many_requests(
    req: &EvictionRequest<'_>,
    b: &Blocked,
    surge: &SurgeState,
) -> AdmissionResponse {
    let message = eviction::blocked_message(b, surge);
    let mut resp = req.response();
    resp.allowed = false;
    resp.result.status = Some(StatusSummary::Failure);
    resp.result.code = 429;
    resp.result.reason = "TooManyRequests".into();
    resp.result.message = message;
    resp.result.details = Some(StatusDetails {
        name: b.pod.clone(),
        kind: "pods".into(),
        causes: vec![StatusCause {
            reason: names::DISRUPTION_BUDGET_CAUSE.into(),
            message: format!(
                "The disruption budget {} needs {} healthy pods and has {} currently",
                b.pdb, b.desired_healthy, b.current_healthy
            ),
            field: String::new(),
        }],
        group: String::new(),
        uid: String::new(),
        retry_after_seconds: 0,
    });
    resp
}

pub struct Webhooks {
    pub cache: Cache,
    pub client: Client,
    pub metrics: Arc<Metrics>,
    pub signals: mpsc::Sender<Signal>,
    /// Limit for the mutating webhook's API calls together (the live list,
    /// the create, the read after a conflict): one deadline, well under the
    /// webhook's `timeoutSeconds` (10 s), so a slow apiserver costs the
    /// Deployment's create that much at most and the answer is still ours.
    pub write_timeout: Duration,
    /// Reads the pod and PDBs again before any 429.
    pub live: ApiReader,
    /// Limit for those reads ([`live::LIVE_CHECK_TIMEOUT`]).
    pub live_timeout: Duration,
    /// EVICTION_HOLD: how long a blocked eviction may wait for room during a
    /// surge, from its arrival (0 = off; see [`hold`]).
    pub hold: Duration,
    /// Permits for held requests ([`hold::MAX_HELD`]).
    pub held: Arc<Semaphore>,
    /// Room shared out among held requests ([`hold::RoomLedger`]).
    pub room: std::sync::Mutex<hold::RoomLedger>,
}

impl Webhooks {
    fn observe(&self, webhook: &'static str, started: Instant, decision: &'static str, code: u16) {
        let m = &self.metrics;
        let secs = started.elapsed().as_secs_f64();
        if webhook == EVICTIONS {
            m.evictions_duration.observe(secs);
        } else {
            m.admission_duration
                .get_or_create(&WebhookLabel { webhook })
                .observe(secs);
        }
        if webhook == EVICTIONS && decision == BUDGET_ALLOWS && code == 200 {
            m.evictions_allowed.inc();
        } else {
            m.admission_requests
                .get_or_create(&AdmissionLabels {
                    webhook,
                    decision,
                    code,
                })
                .inc();
        }
    }

    pub async fn evictions(&self, req: EvictionRequest<'_>) -> Answer {
        let started = Instant::now();
        let answer = self.evictions_inner(&req, started).await;
        self.observe(EVICTIONS, started, answer.decision, answer.code);
        answer
    }

    async fn evictions_inner(&self, req: &EvictionRequest<'_>, started: Instant) -> Answer {
        let Some(ns) = req.namespace.as_deref().filter(|_| req.is_eviction()) else {
            return Answer {
                review: req.allowed(Some(format!(
                    "eviction-autoscaler: {} {}/{} is not handled by this webhook",
                    req.operation,
                    req.resource,
                    req.sub_resource.as_deref().unwrap_or("")
                ))),
                decision: "not_handled",
                code: 200,
            };
        };
        // The cached decision first, in line: the live read and the hold
        // (large futures) only for a blocked eviction or a lagging PDB
        // status, boxed so that the common answer does not carry them.
        let mut recounted = false;
        let (decision, room) = eviction::decide_room(&self.cache, ns, &req.name);
        let decision = match decision {
            // Room shared out, so that the apiserver does not answer its
            // own 429 to an eviction let through on room already taken. An
            // eviction that may not be held (a dry run, EVICTION_HOLD 0)
            // is allowed whatever the ledger says: nothing to count.
            Decision::Allow {
                reason: AllowReason::BudgetAllows,
                warning,
            } if !req.dry_run && !self.hold.is_zero() => match room {
                Some(pdb) if !hold::take_room(&self.cache, &self.room, ns, &pdb, &req.name) => {
                    return Box::pin(self.taken(req, ns, &pdb, warning, started)).await;
                }
                _ => Decision::Allow {
                    reason: AllowReason::BudgetAllows,
                    warning,
                },
            },
            Decision::Block(_) => {
                Box::pin(live::decide_confirmed(
                    &self.cache,
                    &self.live,
                    ns,
                    &req.name,
                    self.live_timeout,
                ))
                .await
            }
            Decision::Recount(r) => {
                recounted = true;
                Box::pin(self.recount(req, r, started)).await
            }
            allow => allow,
        };
        let (reason, warning) = match decision {
            Decision::Allow { reason, warning } => (reason, warning),
            Decision::Block(b) => return Box::pin(self.blocked(req, ns, b, started)).await,
            // Lagging again right after a recount: the apiserver decides.
            Decision::Recount(_) => (AllowReason::RecountNotHeld, None),
        };
        tracing::debug!(namespace = ns, pod = %req.name, reason = reason.as_str(), ?reason, "eviction allowed");
        let held_then_allowed = recounted
            && !matches!(
                reason,
                AllowReason::RecountNotHeld | AllowReason::RecountTimedOut
            );
        Answer {
            review: req.allowed(warning),
            decision: if held_then_allowed {
                "allowed_after_recount"
            } else {
                reason.as_str()
            },
            code: 200,
        }
    }

    /// The PDB's status has not counted a scale-down of the pod's Deployment
    /// ([`Recount`]): hold the request until it has, then decide again. A
    /// 429 can follow only from that fresh decision (confirmed live, as any
    /// Block); when the request may not wait, or the hold ends first, allow.
    async fn recount(&self, req: &EvictionRequest<'_>, r: Recount, started: Instant) -> Decision {
        let not_held = Decision::Allow {
            reason: AllowReason::RecountNotHeld,
            warning: None,
        };
        if req.dry_run {
            return not_held;
        }
        // Pods already gone: the status says so at once (an owned PDB only),
        // so the apiserver refuses what has no room even if this request
        // does not wait for the recount.
        self.catch_up_status(&r.namespace, &r.pdb).await;
        if self.hold.is_zero() {
            return not_held;
        }
        tracing::info!(namespace = %r.namespace, pod = %r.pod, pdb = %r.pdb,
            deployment = %r.deployment, status_healthy = r.current_healthy,
            settled_healthy = r.settled_healthy, desired_healthy = r.desired_healthy,
            "the PDB's status has not counted the Deployment's scale-down yet; \
             holding the eviction until it does");
        let held = (r.namespace.as_str(), r.pod.as_str());
        match self.hold_for(held, HoldFor::Recount, started).await {
            None => not_held,
            Some(HoldOutcome::Room { reason, warning }) => Decision::Allow { reason, warning },
            Some(HoldOutcome::Blocked) => {
                live::decide_confirmed(&self.cache, &self.live, held.0, held.1, self.live_timeout)
                    .await
            }
            Some(HoldOutcome::Expired) => {
                // The ReplicaSet may have removed its pods during the hold.
                self.catch_up_status(&r.namespace, &r.pdb).await;
                tracing::warn!(namespace = %r.namespace, pod = %r.pod, pdb = %r.pdb,
                    held = ?started.elapsed(),
                    "the PDB's status was not recounted within EVICTION_HOLD; allowing \
                     (the apiserver decides on its status)");
                Decision::Allow {
                    reason: AllowReason::RecountTimedOut,
                    warning: None,
                }
            }
        }
    }

    /// The PDB's status allows the eviction, but evictions let through
    /// already took its room ([`hold::RoomLedger`]): the apiserver would
    /// answer its own 429. Held for the next room like a blocked eviction
    /// during a surge (the caller only asks with EVICTION_HOLD on); allowed
    /// at once when it may not wait (not a Deployment's pod, no permit left:
    /// the apiserver decides), and at the end of the hold decided again on
    /// facts read now.
    async fn taken(
        &self,
        req: &EvictionRequest<'_>,
        ns: &str,
        pdb: &k8s_openapi::api::policy::v1::PodDisruptionBudget,
        warning: Option<String>,
        started: Instant,
    ) -> Answer {
        let allowed = |warning: Option<String>, label: &'static str| Answer {
            review: req.allowed(warning),
            decision: label,
            code: 200,
        };
        let of_deployment = self
            .cache
            .pod(ns, &req.name)
            .is_some_and(|p| self.cache.owning_deployment(&p).is_some());
        if !of_deployment {
            return allowed(warning, AllowReason::BudgetAllows.as_str());
        }
        tracing::debug!(namespace = ns, pod = %req.name,
            pdb = pdb.metadata.name.as_deref().unwrap_or_default(),
            "the PDB's room is taken by evictions let through already; holding");
        let at = (ns, &*req.name);
        let Some(outcome) = self.hold_for(at, HoldFor::Taken, started).await else {
            return allowed(warning, AllowReason::BudgetAllows.as_str());
        };
        match hold::after_hold(outcome, &self.cache, &self.live, at, self.live_timeout).await {
            Decision::Allow { warning, .. } => allowed(warning, "allowed_after_hold"),
            // The room never came, and the apiserver's own objects say so.
            Decision::Block(b) => Box::pin(self.blocked(req, ns, b, started)).await,
            Decision::Recount(_) => allowed(None, AllowReason::RecountNotHeld.as_str()),
        }
    }

    /// A 429 on fresh facts: signal the worker, maybe hold, then answer.
    async fn blocked(
        &self,
        req: &EvictionRequest<'_>,
        ns: &str,
        mut b: Blocked,
        started: Instant,
    ) -> Answer {
        let mut surge = self.surge_state(ns, &b);
        let dry_run = req.dry_run;
        if !dry_run {
            self.metrics.blocked_evictions.inc();
            let signal = Signal {
                namespace: b.namespace.clone(),
                deployment: b.deployment.clone(),
                pdb: b.pdb.clone(),
                pod: b.pod.clone(),
            };
            // Never wait on the admission path: a full queue already
            // holds a wake-up for the worker.
            if let Err(e) = self.signals.try_send(signal) {
                tracing::debug!(error = %e, "surge signal not queued");
            }
        }
        // Only with time left: a recount hold or a slow live read may have
        // used it up, and the answer must stay within the hold plus one
        // live read (under the webhooks' timeoutSeconds).
        if hold::should_hold(self.hold, dry_run, self.cache.freshness(), &surge)
            && started.elapsed() < self.hold
        {
            let held = (b.namespace.as_str(), b.pod.as_str());
            if let Some(outcome) = self.hold_for(held, HoldFor::Room, started).await {
                let at = (ns, &*req.name);
                match hold::after_hold(outcome, &self.cache, &self.live, at, self.live_timeout)
                    .await
                {
                    Decision::Allow { reason, warning } => {
                        tracing::info!(namespace = ns, pod = %b.pod, pdb = %b.pdb,
                            reason = reason.as_str(), held = ?started.elapsed(),
                            "blocked eviction held until there was room; allowed");
                        return Answer {
                            review: req.allowed(warning),
                            decision: "allowed_after_hold",
                            code: 200,
                        };
                    }
                    Decision::Block(now) => b = now,
                    // The status allows it again but lags a scale-down: the
                    // apiserver decides (no second hold), on a status
                    // brought up to date where it is ours.
                    Decision::Recount(r) => {
                        if !dry_run {
                            self.catch_up_status(&r.namespace, &r.pdb).await;
                        }
                        return Answer {
                            review: req.allowed(None),
                            decision: AllowReason::RecountNotHeld.as_str(),
                            code: 200,
                        };
                    }
                }
            }
            // The leader may have started the surge meanwhile.
            surge = self.surge_state(ns, &b);
        }
        if dry_run && surge == SurgeState::Requested {
            surge = SurgeState::WouldRequest;
        }
        tracing::info!(namespace = ns, pod = %b.pod, pdb = %b.pdb, deployment = %b.deployment,
            dry_run, "eviction blocked by budget; answered 429");
        Answer {
            review: Reply::review(deny_too_many_requests(req, &b, &surge)),
            decision: "blocked",
            code: 429,
        }
    }

    /// Brings an owned PDB's status up to date with the pods that are gone
    /// ([`eviction::status_catch_up`]); nothing when it is not ours or does
    /// not lag. A failed write changes nothing: the apiserver then decides on
    /// the status as it is, as it would without us. The read and the write
    /// share one live-read timeout, so an answer that follows a hold stays
    /// within the hold plus one live read (`MAX_EVICTION_HOLD`).
    async fn catch_up_status(&self, ns: &str, pdb: &str) {
        let Some(c) = eviction::status_catch_up(&self.cache, ns, pdb) else {
            return;
        };
        let deadline = tokio::time::Instant::now() + self.live_timeout;
        // The caches said so; the pods read now must say so too.
        let Some(c) = self.live_catch_up(ns, c, deadline).await else {
            return;
        };
        let api: kube::Api<k8s_openapi::api::policy::v1::PodDisruptionBudget> =
            kube::Api::namespaced(self.live.client.clone(), ns);
        let written = match crate::patch::json_patch(c.ops(k8s_openapi::jiff::Timestamp::now())) {
            Ok(patch) => tokio::time::timeout_at(
                deadline,
                api.patch_status(&c.pdb, &kube::api::PatchParams::default(), &patch),
            )
            .await
            .map_err(|_| format!("no answer within {:?} of the read", self.live_timeout))
            .and_then(|r| r.map(|_| ()).map_err(|e| e.to_string())),
            Err(e) => Err(e.to_string()),
        };
        match written {
            Ok(()) => tracing::info!(
                namespace = ns,
                pdb,
                was_healthy = c.was_healthy,
                was_allowed = c.was_allowed,
                healthy = c.current_healthy,
                allowed = c.disruptions_allowed,
                "the PDB's status still counted pods that are gone; \
                 wrote the count the disruption controller has not written yet"
            ),
            // Usually the controller's own recount came first.
            Err(e) => tracing::info!(namespace = ns, pdb, error = %e,
                "the PDB's status was not brought up to date"),
        }
    }

    /// `c` with the healthy pods counted from a live list of the PDB's pods
    /// (by `deadline`); None when that list fails or leaves
    /// the room the status says: no write then.
    async fn live_catch_up(
        &self,
        ns: &str,
        c: eviction::StatusCatchUp,
        deadline: tokio::time::Instant,
    ) -> Option<eviction::StatusCatchUp> {
        use eviction::EvictionView;
        let pdb = self.cache.pdb_named(ns, &c.pdb)?;
        let selector = pdb.spec.as_ref().and_then(|s| s.selector.clone())?;
        let selector = kube::core::Selector::try_from(selector).ok()?;
        let pods: kube::Api<k8s_openapi::api::core::v1::Pod> =
            kube::Api::namespaced(self.live.client.clone(), ns);
        let lp = kube::api::ListParams::default().labels_from(&selector);
        let listed = match tokio::time::timeout_at(deadline, pods.list(&lp)).await {
            Ok(Ok(l)) => l.items,
            Ok(Err(e)) => {
                tracing::info!(namespace = ns, pdb = %c.pdb, error = %e, "the PDB's pods could not be read; its status is left as it is");
                return None;
            }
            Err(_) => {
                tracing::info!(namespace = ns, pdb = %c.pdb, "the PDB's pods were not read in time; its status is left as it is");
                return None;
            }
        };
        let healthy = eviction::live_healthy(&listed, &pdb, k8s_openapi::jiff::Timestamp::now())?;
        let confirmed = c.confirmed(healthy);
        if confirmed.is_none() {
            tracing::debug!(
                namespace = ns,
                healthy,
                "the pods read now leave the room the PDB's status says: no write"
            );
        }
        confirmed
    }

    /// Holds an eviction (namespace, pod) until the caches show room
    /// (or, for a recount, decide anything else) or the hold ends; None when
    /// no permit is left: answer at once.
    async fn hold_for(
        &self,
        held: (&str, &str),
        wait: HoldFor,
        started: Instant,
    ) -> Option<HoldOutcome> {
        let count = |outcome: &'static str| {
            self.metrics
                .eviction_holds
                .get_or_create(&HoldLabel {
                    wait: wait.as_str(),
                    outcome,
                })
                .inc();
        };
        let Ok(_permit) = self.held.try_acquire() else {
            count("busy");
            return None;
        };
        // Dropped on every exit, including the apiserver hanging up.
        struct Held<'a>(&'a prometheus_client::metrics::gauge::Gauge);
        impl Drop for Held<'_> {
            fn drop(&mut self) {
                self.0.dec();
            }
        }
        self.metrics.evictions_held.inc();
        let _held = Held(&self.metrics.evictions_held);
        let deadline = tokio::time::Instant::from_std(started + self.hold);
        let outcome = hold::wait_for_room(
            &self.cache,
            &self.room,
            self.cache.pdb_changed.clone(),
            held,
            wait,
            deadline,
        )
        .await;
        count(outcome.as_str());
        self.metrics
            .eviction_hold_seconds
            .get_or_create(&HoldLabel {
                wait: wait.as_str(),
                outcome: outcome.as_str(),
            })
            .observe(started.elapsed().as_secs_f64());
        Some(outcome)
    }

    /// What the leader is doing, as every replica's caches see it: an
    /// impossible surge is the EvictionAutoScaler's Degraded condition; an
    /// active one is in the markers.
    fn surge_state(&self, ns: &str, b: &Blocked) -> SurgeState {
        let eas = self
            .cache
            .eas
            .get(&kube::runtime::reflector::ObjectRef::new(&b.pdb).within(ns));
        let impossible = eas.as_ref().and_then(|e| e.status.as_ref()).and_then(|s| {
            s.conditions
                .iter()
                .find(|c| {
                    c.type_ == "Degraded" && c.status == "True" && c.reason == "SurgeImpossible"
                })
                .map(|c| c.message.clone())
        });
        if let Some(why) = impossible {
            return SurgeState::Impossible(why);
        }
        let Some(dep) = self.cache.deployment(ns, &b.deployment) else {
            return SurgeState::Requested;
        };
        // Autoscalers matter only once someone's value was kept (rare): read then.
        let state = eviction::surge_state_from_markers(&dep);
        if !matches!(state, SurgeState::Kept { .. }) {
            return state;
        }
        let in_ns = |m: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta| {
            m.namespace.as_deref() == Some(ns)
        };
        let hpas: Vec<_> = self
            .cache
            .hpas
            .state()
            .into_iter()
            .filter(|h| in_ns(&h.metadata))
            .collect();
        let sos: Vec<_> = self
            .cache
            .keda
            .read()
            .ok()
            .and_then(|g| g.clone())
            .map(|store| store.state())
            .unwrap_or_default()
            .into_iter()
            .filter(|so| in_ns(&so.metadata))
            .collect();
        eviction::surge_state_under_autoscalers(Some(&dep), &hpas, &sos)
    }

    pub async fn deployments(&self, review: DeploymentReview) -> Answer {
        let started = Instant::now();
        let answer = self
            .deployments_inner(&review.request, review.object.as_deref())
            .await;
        self.observe("deployments", started, answer.decision, answer.code);
        answer
    }

    async fn deployments_inner(
        &self,
        req: &AdmissionRequest<DynamicObject>,
        object: Option<&serde_json::value::RawValue>,
    ) -> Answer {
        let skip = |decision: &'static str, warning: Option<String>| Answer {
            review: Reply::review(allowed(req, warning)),
            decision,
            code: 200,
        };
        let is_deployment = req.kind.group == "apps" && req.kind.kind == "Deployment";
        if !is_deployment || !matches!(req.operation, Operation::Create) {
            return skip(
                "not_handled",
                Some(format!(
                    "eviction-autoscaler: {} {} is not handled by this webhook",
                    operation_name(&req.operation),
                    req.kind.kind
                )),
            );
        }
        let dep: Deployment = match object.map(|o| serde_json::from_str::<Deployment>(o.get())) {
            Some(Ok(d)) => d,
            Some(Err(e)) => {
                return skip(
                    "not_handled",
                    Some(format!(
                        "eviction-autoscaler: cannot read the Deployment: {e}"
                    )),
                )
            }
            None => return skip("not_handled", None),
        };
        let mut dep = dep;
        // The object carries the namespace only sometimes; the request always does.
        if dep.metadata.namespace.is_none() {
            dep.metadata.namespace = req.namespace.clone();
        }
        // Copies of our markers someone else wrote (a manifest taken
        // mid-surge) are no surge: its floor is its replicas, as the
        // caches will read it. The map stays, so the annotation patch
        // below is unchanged.
        crate::surge::writer::leave_out_copy(&mut dep);
        let ns = dep.metadata.namespace.clone().unwrap_or_default();
        if !self.cache.synced() {
            // The reconciler creates the PDB once caches are synced.
            return skip("not_synced", None);
        }
        if self.cache.stale() {
            // A stale PDB cache could miss the user's PDB, and two PDBs over
            // one pod make every eviction of it fail.
            return skip("cache_stale", None);
        }
        if !self.cache.namespace_known(&ns) {
            // Created in the same apply and not in the cache yet: its
            // opt-out annotation is unknown, and out of scope means no
            // writes. The reconciler decides once it has the namespace.
            return skip("namespace_not_cached", None);
        }
        let name = dep.metadata.name.as_deref().unwrap_or_default();
        let hpas = self.cache.hpas.state();
        let keda_min =
            crate::reconcile::keda_minimums_of(&self.cache.scaled_objects_in(&ns), &hpas)
                .get(name)
                .copied();
        let floor = pdb::admission_floor(&dep, keda_min, &hpas);
        let deployments = self.cache.deployments.state();
        let in_scope = self.cache.namespace_in_scope(&ns);
        // Synced and not stale (above): the namespace's pods are current.
        // With those gone but not yet replaced (a StatefulSet's), as the reconciler reads them.
        let pods = self.cache.pods.pods_and_leaving_in(&ns);
        let plan = |pdbs: &[Arc<PodDisruptionBudget>]| {
            pdb::plan_for_new_deployment(
                &dep,
                self.cache.behaviour.pdb_create,
                in_scope,
                pdbs,
                &deployments,
                floor,
                &pods,
            )
        };
        // The cache first: no API call for a Deployment that gets no PDB.
        let CreatePlan::Create(_) = plan(&self.cache.pdbs_in(&ns)) else {
            return skip("skipped", None);
        };
        if req.dry_run {
            return skip("dry_run", None);
        }
        // Plan again on a live list: a PDB the user created just before the
        // Deployment may not be in the watch cache yet (seen in CI: ours
        // made beside theirs, two PDBs over the pods until the reconciler
        // stepped aside). On any failure the reconciler creates it later.
        let deadline = tokio::time::Instant::now() + self.write_timeout;
        let api: Api<PodDisruptionBudget> = Api::namespaced(self.client.clone(), &ns);
        let live = match tokio::time::timeout_at(deadline, api.list(&Default::default())).await {
            Ok(Ok(l)) => l.items.into_iter().map(Arc::new).collect::<Vec<_>>(),
            _ => return skip("error", None),
        };
        let CreatePlan::Create(want) = plan(&live) else {
            return skip("skipped", None);
        };
        if let Some(p) = pdb::unexplained_overlap(&dep, &live, &deployments) {
            tracing::debug!(namespace = %ns, deployment = %name,
                pdb = p.metadata.name.as_deref().unwrap_or_default(),
                "a PDB of a Deployment not cached yet may cover its pods: the reconciler decides");
            return skip("skipped", None);
        }
        let name = want.metadata.name.clone().unwrap_or_default();
        match self.create_pdb(&ns, &want, &dep, deadline).await {
            Ok(()) => {
                tracing::info!(namespace = %ns, pdb = %name, "created PDB at admission");
                // A `pdb-create` that is no boolean is why it got one.
                let note =
                    crate::scope::invalid_opt_out(dep.metadata.annotations.as_ref()).map(|v| {
                        format!(
                            "eviction-autoscaler: {}",
                            crate::scope::invalid_opt_out_note(v)
                        )
                    });
                let patched = annotation_patch(&dep, names::PDB_ANNOTATION, &name)
                    .map_err(|e| e.to_string())
                    .and_then(|op| {
                        allowed(req, note)
                            .with_patch(json_patch::Patch(vec![op]))
                            .map_err(|e| e.to_string())
                    });
                match patched {
                    Ok(r) => Answer {
                        review: Reply::review(r),
                        decision: "pdb_created",
                        code: 200,
                    },
                    Err(e) => skip("error", Some(format!("eviction-autoscaler: {e}"))),
                }
            }
            Err(e) => {
                // Never reject a Deployment: the reconciler retries later.
                tracing::warn!(namespace = %ns, pdb = %name, error = %e, "PDB not created at admission");
                skip("error", None)
            }
        }
    }

    async fn create_pdb(
        &self,
        ns: &str,
        want: &PodDisruptionBudget,
        dep: &Deployment,
        deadline: tokio::time::Instant,
    ) -> Result<(), kube::Error> {
        let api: Api<PodDisruptionBudget> = Api::namespaced(self.client.clone(), ns);
        let pp = PostParams {
            field_manager: Some(names::MANAGER.into()),
            ..Default::default()
        };
        let create = tokio::time::timeout_at(deadline, api.create(&pp, want)).await;
        match create {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(kube::Error::Api(s))) if s.code == 409 => {
                // Ours from an earlier attempt (retried admission) is fine.
                let name = want.metadata.name.as_deref().unwrap_or_default();
                let existing = tokio::time::timeout_at(deadline, api.get(name))
                    .await
                    .map_err(|_| {
                        kube::Error::Service(
                            format!("PDB read timed out after {:?}", self.write_timeout).into(),
                        )
                    })??;
                if pdb::is_ours_for(&existing, dep) {
                    Ok(())
                } else {
                    Err(kube::Error::Api(s))
                }
            }
            Ok(Err(e)) => Err(e),
            Err(_) => Err(kube::Error::Service(
                format!("PDB create timed out after {:?}", self.write_timeout).into(),
            )),
        }
    }
}

/// kubectl drain --dry-run=server puts the dry run in the Eviction's
/// deleteOptions, not in the request: the apiserver merges both.
fn operation_name(op: &Operation) -> &'static str {
    match op {
        Operation::Create => "CREATE",
        Operation::Update => "UPDATE",
        Operation::Delete => "DELETE",
        Operation::Connect => "CONNECT",
    }
}

/// A JSON patch operation that sets one annotation (creating the map if absent).
pub fn annotation_patch(
    dep: &Deployment,
    key: &str,
    value: &str,
) -> Result<json_patch::PatchOperation, serde_json::Error> {
    // RFC 6901 escaping: `~` then `/`.
    let escaped = key.replace('~', "~0").replace('/', "~1");
    let op = if dep.metadata.annotations.is_some() {
        serde_json::json!({"op": "add", "path": format!("/metadata/annotations/{escaped}"), "value": value})
    } else {
        serde_json::json!({"op": "add", "path": "/metadata/annotations", "value": { key: value }})
    };
    serde_json::from_value(op)
}

#[cfg(test)]
mod tests {
    use super::*;

    use review::tests::EVICTION;

    /// The Deployment webhook reads the request's fields as kube does, the
    /// object unparsed, and skips what it does not read: an object or
    /// options padded with many small JSON objects are never built as trees.
    #[test]
    fn a_deployment_review_keeps_its_object_raw_and_skips_the_rest() {
        let review = |object: &str, options: &str| {
            format!(
                r#"{{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{{"uid":"u-1","kind":{{"group":"apps","version":"v1","kind":"Deployment"}},"resource":{{"group":"apps","version":"v1","resource":"deployments"}},"name":"web","namespace":"ns","operation":"CREATE","userInfo":{{"username":"admin"}},"object":{object},"oldObject":null,"dryRun":true,"options":{options}}}}}"#
            )
        };
        let dep = r#"{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"web"},"spec":{"selector":{"matchLabels":{"app":"web"}},"template":{"metadata":{"labels":{"app":"web"}}}}}"#;
        let body = review(dep, r#"{"kind":"CreateOptions"}"#);
        let r = parse_deployment_review(body.as_bytes()).expect("parses");
        let kube = parse_review(body.as_bytes()).expect("kube parses");
        assert_eq!(
            (
                &r.request.uid,
                &r.request.name,
                &r.request.namespace,
                r.request.dry_run
            ),
            (&kube.uid, &kube.name, &kube.namespace, kube.dry_run)
        );
        assert_eq!(
            (&r.request.kind, &r.request.operation),
            (&kube.kind, &kube.operation)
        );
        assert_eq!(r.object.as_deref().map(|o| o.get()), Some(dep));
        // Padding: 20,000 small objects in the object and in the options.
        let junk = format!("[{}]", vec![r#"{"a":0}"#; 20_000].join(","));
        let padded = dep.replacen(r#""metadata""#, &format!(r#""junk":{junk},"metadata""#), 1);
        let body = review(&padded, &junk);
        let r = parse_deployment_review(body.as_bytes()).expect("parses");
        let raw = r.object.expect("the object");
        assert_eq!(raw.get().len(), padded.len(), "kept as sent");
        let d: Deployment = serde_json::from_str(raw.get()).expect("a Deployment");
        assert_eq!(d.metadata.name.as_deref(), Some("web"));
        // No object (a DELETE): none.
        let body = review("null", "null");
        assert!(parse_deployment_review(body.as_bytes())
            .expect("parses")
            .object
            .is_none());
        assert!(matches!(
            parse_deployment_review(br#"{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview","request":null}"#),
            Err(ReviewError::Version(_))
        ));
    }

    #[test]
    fn parses_an_eviction_review() {
        let req = parse_review(EVICTION.as_bytes()).unwrap();
        assert_eq!(req.uid, "705ab4f5-6393-11e8-b7cc-42010a800002");
        assert_eq!(req.name, "web-1");
        assert_eq!(req.sub_resource.as_deref(), Some("eviction"));
        // v1beta1 Eviction objects (older clients) parse the same way.
        let beta = EVICTION
            .replace(
                r#""version":"v1","kind":"Eviction""#,
                r#""version":"v1beta1","kind":"Eviction""#,
            )
            .replace(
                r#""apiVersion":"policy/v1""#,
                r#""apiVersion":"policy/v1beta1""#,
            );
        assert_eq!(parse_review(beta.as_bytes()).unwrap().name, "web-1");
    }

    #[test]
    fn rejects_what_is_not_a_review() {
        assert!(matches!(
            parse_review(b"garbage"),
            Err(ReviewError::Parse(_))
        ));
        assert!(matches!(parse_review(b"{}"), Err(ReviewError::Parse(_))));
        assert!(matches!(
            parse_review(br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}"#),
            Err(ReviewError::NoRequest)
        ));
        let v1beta1 = EVICTION.replace("admission.k8s.io/v1", "admission.k8s.io/v1beta1");
        assert!(matches!(
            parse_review(v1beta1.as_bytes()),
            Err(ReviewError::Version(_))
        ));
    }

    #[test]
    fn denial_is_a_429_with_a_disruption_budget_cause() {
        let req = parse_eviction_review(EVICTION.as_bytes()).unwrap();
        let b = Blocked {
            namespace: "ns".into(),
            pod: "web-1".into(),
            pdb: "web".into(),
            deployment: "web".into(),
            desired_healthy: 3,
            current_healthy: 3,
        };
        let review = review::into_review(deny_too_many_requests(
            &req,
            &b,
            &SurgeState::Active { from: 3, to: 4 },
        ));
        let v = serde_json::to_value(&review).unwrap();
        let r = &v["response"];
        assert_eq!(r["uid"], "705ab4f5-6393-11e8-b7cc-42010a800002");
        assert_eq!(r["allowed"], false);
        assert_eq!(r["status"]["code"], 429);
        assert_eq!(r["status"]["reason"], "TooManyRequests");
        assert_eq!(
            r["status"]["details"]["causes"][0]["reason"],
            "DisruptionBudget"
        );
        let msg = r["status"]["message"].as_str().unwrap();
        assert!(msg.starts_with(names::APISERVER_PDB_MESSAGE), "{msg}");
        assert!(msg.contains("from 3 to 4"), "{msg}");
        assert_eq!(v["apiVersion"], "admission.k8s.io/v1");
        assert_eq!(v["kind"], "AdmissionReview");
    }

    #[test]
    fn annotation_patch_applies() {
        let mut d = crate::pdb::tests::dep("web", 3);
        let mut doc = serde_json::to_value(&d).unwrap();
        json_patch::patch(
            &mut doc,
            &[annotation_patch(&d, names::PDB_ANNOTATION, "web").unwrap()],
        )
        .unwrap();
        assert_eq!(doc["metadata"]["annotations"][names::PDB_ANNOTATION], "web");
        d.metadata.annotations = Some([("a/b~c".to_string(), "x".to_string())].into());
        let mut doc = serde_json::to_value(&d).unwrap();
        json_patch::patch(
            &mut doc,
            &[annotation_patch(&d, names::PDB_ANNOTATION, "web").unwrap()],
        )
        .unwrap();
        assert_eq!(doc["metadata"]["annotations"][names::PDB_ANNOTATION], "web");
        assert_eq!(doc["metadata"]["annotations"]["a/b~c"], "x");
    }
}
