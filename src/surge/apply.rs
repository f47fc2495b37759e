//! Carries out surge steps (behaviour.md section 8: nothing stalls). The
//! writes go through [`SurgeApi`], a one-method interface that the kube
//! client implements here and an in-memory apiserver implements in tests, so
//! the same [`Core`] runs against both.
//!
//! - Every call is bounded by [`CALL_TIMEOUT`] (on top of the client's own).
//! - Deployments are stepped concurrently, at most [`CONCURRENCY`] at once.
//! - A Deployment whose step is still running (a write waiting for its
//!   timeout) is left out of other passes, which the worker runs beside the
//!   slow one: one slow object never holds back the others.
//! - A Deployment whose write failed is not stepped again until its backoff
//!   has passed, counted from when the failure came (doubling from
//!   [`BACKOFF_MIN`] to [`BACKOFF_MAX`]; a value someone else changed
//!   retries sooner), and is reset by a success.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use kube::api::PatchParams;
use kube::core::DynamicObject;
use kube::{Api, Client};
use serde_json::Value;

use crate::budget::IntOrPercent;
use crate::cache::keda_resource;
use crate::patch::json_patch;
use crate::surge::plan::Action;
use crate::surge::signals::SignalBook;
use crate::surge::step::{self, Facts, ObjKey, ObjKind, Settings, Step};
use crate::surge::view::{ClusterView, Indexed, NsObjects};

pub const CALL_TIMEOUT: Duration = Duration::from_secs(10);
pub const CONCURRENCY: usize = 8;
pub const BACKOFF_MIN: Duration = Duration::from_millis(500);
pub const BACKOFF_MAX: Duration = Duration::from_secs(300);
/// A guarded write that failed because the value changed: re-plan soon.
pub const BACKOFF_CONFLICT_MAX: Duration = Duration::from_secs(2);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApiError {
    /// The value a write was guarded on changed (JSON patch `test` failed).
    #[error("the object changed since it was read: {0}")]
    Conflict(String),
    #[error("not found")]
    NotFound,
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    #[error("{0}")]
    Other(String),
}

impl From<kube::Error> for ApiError {
    fn from(e: kube::Error) -> Self {
        match e {
            kube::Error::Api(s) if s.code == 404 => ApiError::NotFound,
            // A failed `test` op, or a 409. A 422 with causes is validation
            // refusing the value (a minimum above a maximum), and a policy's
            // denial is a refusal whatever its code: no re-read makes either
            // pass, so they back off like any failure instead of retrying
            // every 2 s.
            kube::Error::Api(s) if crate::client::changed_since_read(&s) => {
                ApiError::Conflict(s.message.clone())
            }
            e => ApiError::Other(e.to_string()),
        }
    }
}

/// The calls a surge makes: one JSON patch to one object, and a fresh read
/// of one object after a guarded patch failed.
pub trait SurgeApi: Send + Sync {
    fn patch(
        &self,
        target: &ObjKey,
        ops: &[Value],
    ) -> impl Future<Output = Result<(), ApiError>> + Send;

    /// The object as the apiserver has it now; `None` when it is gone.
    fn get(&self, target: &ObjKey) -> impl Future<Output = Result<Option<Value>, ApiError>> + Send;
}

/// The real apiserver.
#[derive(Clone)]
pub struct KubeApi(pub Client);

impl SurgeApi for KubeApi {
    async fn patch(&self, target: &ObjKey, ops: &[Value]) -> Result<(), ApiError> {
        let patch = json_patch(ops.to_vec()).map_err(|e| ApiError::Other(e.to_string()))?;
        // Our field manager owns what a surge changes (surge::writer).
        let pp = PatchParams {
            field_manager: Some(crate::names::MANAGER.into()),
            ..PatchParams::default()
        };
        let ns = &target.namespace;
        let name = &target.name;
        let call = async {
            match target.kind {
                ObjKind::Deployment => Api::<Deployment>::namespaced(self.0.clone(), ns)
                    .patch(name, &pp, &patch)
                    .await
                    .map(drop),
                ObjKind::Hpa => Api::<HorizontalPodAutoscaler>::namespaced(self.0.clone(), ns)
                    .patch(name, &pp, &patch)
                    .await
                    .map(drop),
                ObjKind::ScaledObject => {
                    Api::<DynamicObject>::namespaced_with(self.0.clone(), ns, &keda_resource())
                        .patch(name, &pp, &patch)
                        .await
                        .map(drop)
                }
            }
        };
        match tokio::time::timeout(CALL_TIMEOUT, call).await {
            Ok(r) => r.map_err(ApiError::from),
            Err(_) => Err(ApiError::Timeout(CALL_TIMEOUT)),
        }
    }

    async fn get(&self, target: &ObjKey) -> Result<Option<Value>, ApiError> {
        let ns = &target.namespace;
        let name = &target.name;
        let to_value = |v: Result<Option<Value>, serde_json::Error>| {
            v.map_err(|e| ApiError::Other(e.to_string()))
        };
        let call = async {
            Ok::<_, ApiError>(match target.kind {
                ObjKind::Deployment => to_value(
                    Api::<Deployment>::namespaced(self.0.clone(), ns)
                        .get_opt(name)
                        .await?
                        .map(serde_json::to_value)
                        .transpose(),
                )?,
                ObjKind::Hpa => to_value(
                    Api::<HorizontalPodAutoscaler>::namespaced(self.0.clone(), ns)
                        .get_opt(name)
                        .await?
                        .map(serde_json::to_value)
                        .transpose(),
                )?,
                ObjKind::ScaledObject => to_value(
                    Api::<DynamicObject>::namespaced_with(self.0.clone(), ns, &keda_resource())
                        .get_opt(name)
                        .await?
                        .map(serde_json::to_value)
                        .transpose(),
                )?,
            })
        };
        match tokio::time::timeout(CALL_TIMEOUT, call).await {
            Ok(r) => r,
            Err(_) => Err(ApiError::Timeout(CALL_TIMEOUT)),
        }
    }
}

/// What happened to one step.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub step: Step,
    /// Writes done before the first failure.
    pub written: usize,
    pub error: Option<ApiError>,
    /// The objects of `step.cleaned` whose markers are removed: said even
    /// when a later write fails, or the re-plan after it sees nothing to
    /// clean (their Warning Event would be lost).
    pub cleaned: Vec<ObjKey>,
    /// The first adoption of `step.adopting` whose write was not done.
    unwritten_adoption: Option<step::Adoption>,
}

impl Outcome {
    fn of(step: Step, written: usize, error: Option<ApiError>) -> Self {
        // A clean, or an adoption, is in the first write to its object
        // (`step::step`); the writes before index `written` are done.
        let done = |k: &ObjKey| {
            step.writes
                .iter()
                .position(|w| &w.target == k)
                .is_some_and(|i| i < written)
        };
        let cleaned = step.cleaned.iter().filter(|k| done(k)).cloned().collect();
        let unwritten_adoption = step.adopting.iter().find(|a| !done(&a.key)).cloned();
        Outcome {
            step,
            written,
            error,
            cleaned,
            unwritten_adoption,
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Retry {
    not_before: Instant,
    failures: u32,
}

pub type Key = (String, String);

/// Per Deployment, what a step planned to persist and could not (the write
/// failed): known only here until a later step of that Deployment succeeds.
struct Unpersisted<T>(Mutex<HashMap<Key, T>>);

impl<T: Clone> Unpersisted<T> {
    fn new() -> Self {
        Unpersisted(Mutex::new(HashMap::new()))
    }

    fn get(&self, ns: &str, dep: &str) -> Option<T> {
        let m = self.0.lock().ok()?;
        m.get(&(ns.to_string(), dep.to_string())).cloned()
    }

    /// Forgets the Deployments a pass did not look at: one with something
    /// unpersisted still carries markers, so it is looked at while it exists.
    fn retain(&self, looked_at: &std::collections::HashSet<Key>) {
        if let Ok(mut m) = self.0.lock() {
            m.retain(|k, _| looked_at.contains(k));
        }
    }

    /// After a step of `key` that `planned` this: kept when its writes
    /// failed, forgotten once a step succeeds.
    fn record(&self, key: &Key, planned: Option<&T>, failed: bool) {
        let Ok(mut m) = self.0.lock() else { return };
        match (planned, failed) {
            (Some(v), true) => {
                m.insert(key.clone(), v.clone());
            }
            (_, false) => {
                m.remove(key);
            }
            (None, true) => {}
        }
    }
}

/// The surge worker's decisions and writes, without the run loop, Events or
/// metrics: what the in-memory model drives.
pub struct Core<A> {
    pub api: A,
    pub book: SignalBook,
    /// When this replica became leader (a restart starts a new Core).
    pub lead_start: Instant,
    pub settings: Settings,
    backoff: Mutex<HashMap<Key, Retry>>,
    /// The object per Deployment whose adoption write failed: the user's
    /// change was seen there.
    adoptions: Unpersisted<step::Adoption>,
    /// The lift record per Deployment whose write failed.
    lifts: Unpersisted<crate::markers::Markers>,
    /// Per Deployment, its autoscalers' minimum as read and since when.
    mins: Mutex<HashMap<Key, (i32, Instant)>>,
    /// The candidates of the last pass (stepped or not): see [`Core::looked_at`].
    looked_at: Mutex<std::collections::HashSet<Key>>,
    /// Node → the Deployments whose pods it held at the last pass.
    last_nodes: Mutex<HashMap<String, std::collections::BTreeSet<Key>>>,
    /// Deployments whose step is running, and when the last ones ended.
    in_flight: std::sync::Arc<Mutex<Slots>>,
}

#[derive(Default)]
struct Slots {
    /// Running steps, with the surge replicas each keeps in place (metrics
    /// of passes that leave it out).
    running: HashMap<Key, Option<i64>>,
    /// When a Deployment's last step ended: a step planned before that is
    /// stale and left out (another pass stepped the Deployment meanwhile).
    ended: HashMap<Key, Instant>,
}

/// How long [`Slots::ended`] keeps an entry: longer than any pass lasts.
const ENDED_KEPT: Duration = Duration::from_secs(600);

/// A step's place in [`Core::in_flight`], given back when the step ends or
/// is dropped (a pass abandoned when the lead is lost).
struct InFlight {
    set: std::sync::Arc<Mutex<Slots>>,
    key: Key,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if let Ok(mut s) = self.set.lock() {
            s.running.remove(&self.key);
            s.ended.insert(self.key.clone(), Instant::now());
        }
    }
}

impl<A: SurgeApi> Core<A> {
    pub fn new(
        api: A,
        book: SignalBook,
        lead_start: Instant,
        cooldown: Duration,
        zero_surge_override: Option<IntOrPercent>,
    ) -> Self {
        Core {
            api,
            book,
            lead_start,
            settings: Settings {
                cooldown,
                zero_surge_override,
            },
            backoff: Mutex::new(HashMap::new()),
            adoptions: Unpersisted::new(),
            lifts: Unpersisted::new(),
            mins: Mutex::new(HashMap::new()),
            looked_at: Mutex::new(Default::default()),
            last_nodes: Mutex::new(HashMap::new()),
            in_flight: Default::default(),
        }
    }

    /// Active surges and their replicas among the steps still running that
    /// `outcomes` does not include.
    pub fn in_flight_surges(&self, outcomes: &[Outcome]) -> (i64, i64) {
        let Ok(s) = self.in_flight.lock() else {
            return (0, 0);
        };
        s.running
            .iter()
            .filter(|(k, _)| {
                !outcomes
                    .iter()
                    .any(|o| o.step.namespace == k.0 && o.step.deployment == k.1)
            })
            .filter_map(|(_, r)| *r)
            .fold((0, 0), |(n, r), x| (n + 1, r + x))
    }

    pub(crate) fn in_flight(&self, ns: &str, dep: &str) -> bool {
        self.in_flight
            .lock()
            .is_ok_and(|s| s.running.contains_key(&(ns.to_string(), dep.to_string())))
    }

    /// The object of an adoption of someone's value this replica could not
    /// persist, and the value seen on it.
    #[cfg(test)]
    pub(crate) fn adoption_pending_on(&self, ns: &str, dep: &str) -> Option<step::Adoption> {
        self.adoptions.get(ns, dep)
    }

    /// The lift record this replica remembers as failed for a Deployment.
    #[cfg(test)]
    pub(crate) fn lift_pending(&self, ns: &str, dep: &str) -> Option<crate::markers::Markers> {
        self.lifts.get(ns, dep)
    }

    /// The Deployment's slot for a step planned at `planned`, as the step
    /// begins: None while another pass runs a step of it, or once one that
    /// began after `planned` has ended (this step is stale then).
    fn take_slot(&self, s: &Step, planned: Instant) -> Option<InFlight> {
        let key = (s.namespace.clone(), s.deployment.clone());
        let surge = s
            .active
            .map(|m| i64::from((m.surged_to - m.baseline).max(0)));
        let mut set = self.in_flight.lock().ok()?;
        if set.running.contains_key(&key) || set.ended.get(&key).is_some_and(|t| *t >= planned) {
            return None;
        }
        set.running.insert(key.clone(), surge);
        Some(InFlight {
            set: self.in_flight.clone(),
            key,
        })
    }

    /// Plans every candidate Deployment and carries out the writes.
    /// The Deployments the last pass looked at: marked, signalled, or with
    /// pods on a draining node (stepped, or skipped while backing off or in
    /// another pass).
    pub fn looked_at(&self) -> std::collections::HashSet<Key> {
        self.looked_at.lock().map(|l| l.clone()).unwrap_or_default()
    }

    pub async fn pass(&self, view: ClusterView, now: Instant) -> Vec<Outcome> {
        // On the real clock, whatever `now` says (tests pass their own).
        let planned = Instant::now();
        if let Ok(mut s) = self.in_flight.lock() {
            s.ended.retain(|_, t| t.elapsed() < ENDED_KEPT);
        }
        let cooldown = self.settings.cooldown;
        let window = crate::surge::signals::window(cooldown);
        let mut signalled: HashMap<String, std::collections::BTreeSet<String>> = HashMap::new();
        for (ns, dep) in self.book.recent(window, now) {
            signalled.entry(ns).or_default().insert(dep);
        }
        let idx = view.index();
        // A node found draining that held a Deployment's pods at the last
        // pass is a signal for it, even if a fast drain emptied it in between.
        if let Ok(last) = self.last_nodes.lock() {
            for node in &idx.draining {
                for (ns, dep) in last.get(node).into_iter().flatten() {
                    self.book.touch(ns, dep, now);
                }
            }
        }
        let mut steps = Vec::new();
        let mut looked_at = std::collections::HashSet::new();
        // Nodes of the Deployments skipped below, for `last_nodes`.
        let mut skipped_nodes: Vec<(Key, std::collections::BTreeSet<String>)> = Vec::new();
        for (ns, objs) in &idx.namespaces {
            let empty = Default::default();
            let sig = signalled.get(ns).unwrap_or(&empty);
            let durable = idx.wall_now.map(|t| (t, window));
            for name in objs.candidates(&idx.draining, sig, durable) {
                let key = (ns.clone(), name.clone());
                looked_at.insert(key.clone());
                if self.backing_off(ns, &name, now) || self.in_flight(ns, &name) {
                    // Not stepped, but its pods on a draining node are still
                    // a signal: else a surge whose writes keep failing
                    // through a drain (no eviction refused, the room it
                    // gave being used) could go back with no cooldown once
                    // they succeed.
                    let (on_draining, nodes) = step::pods_on_draining(objs, &idx.draining, &name);
                    if on_draining > 0 {
                        self.book.touch(ns, &name, now);
                    }
                    skipped_nodes.push((key, nodes));
                    continue;
                }
                let (since_signal, denied) = self.book.get(ns, &name, cooldown, now);
                let facts = Facts {
                    since_signal,
                    denied: denied.into_iter().collect(),
                    adoption_pending: self.adoptions.get(ns, &name),
                    lift_pending: self.lifts.get(ns, &name),
                    autoscaler_min: self.min_read(&key, now),
                    lead_for: now.saturating_duration_since(self.lead_start),
                };
                let s = step::step(
                    ns,
                    objs,
                    &idx.draining,
                    &name,
                    &facts,
                    self.settings,
                    idx.wall_now,
                );
                self.note_min(key, s.autoscaler_min, now);
                if s.on_draining > 0 {
                    // A draining node that still holds pods is a signal (section 6).
                    self.book.touch(ns, &name, now);
                }
                steps.push((s, facts));
            }
        }
        if let Ok(mut m) = self.mins.lock() {
            m.retain(|k, _| looked_at.contains(k));
        }
        if let Ok(mut l) = self.looked_at.lock() {
            l.clone_from(&looked_at);
        }
        self.adoptions.retain(&looked_at);
        self.lifts.retain(&looked_at);
        let idx = &idx;
        let started = Instant::now();
        // Each step holds its Deployment's slot while it runs, so a pass
        // run beside this one leaves it out. Taken as the step begins, not
        // for the whole pass: steps queued behind slow ones (CONCURRENCY
        // writes hanging to their timeout) stay free for a pass beside.
        let ran: Vec<Result<Outcome, (Key, std::collections::BTreeSet<String>)>> =
            futures::stream::iter(steps)
                .map(|(s, facts)| async move {
                    // Left out: its nodes are still remembered below.
                    let Some(slot) = self.take_slot(&s, planned) else {
                        return Err(((s.namespace, s.deployment), s.nodes));
                    };
                    let first = self.execute(s).await;
                    let outcome = if !matches!(first.error, Some(ApiError::Conflict(_))) {
                        first
                    } else {
                        // The value changed under us: re-plan once from fresh
                        // reads, so a user's change seen mid-write is adopted at once.
                        match idx.namespaces.get(&first.step.namespace) {
                            Some(objs) => self.replan(objs, idx, first, &facts).await,
                            None => first,
                        }
                    };
                    // The backoff counts from the failure, not from the pass's
                    // start: a write that timed out waits its turn like any other.
                    self.record(&outcome, now, now + started.elapsed());
                    drop(slot);
                    Ok(outcome)
                })
                .buffer_unordered(CONCURRENCY)
                .collect()
                .await;
        let mut outcomes = Vec::with_capacity(ran.len());
        for r in ran {
            match r {
                Ok(o) => outcomes.push(o),
                Err(skipped) => skipped_nodes.push(skipped),
            }
        }
        if let Ok(mut last) = self.last_nodes.lock() {
            last.clear();
            for o in &outcomes {
                for n in &o.step.nodes {
                    last.entry(n.clone())
                        .or_default()
                        .insert((o.step.namespace.clone(), o.step.deployment.clone()));
                }
            }
            for (key, nodes) in skipped_nodes {
                for n in nodes {
                    last.entry(n).or_default().insert(key.clone());
                }
            }
        }
        outcomes
    }

    async fn replan(
        &self,
        objs: &NsObjects,
        idx: &Indexed,
        failed: Outcome,
        facts: &Facts,
    ) -> Outcome {
        let mut fresh = objs.clone();
        let targets: std::collections::BTreeSet<ObjKey> = failed
            .step
            .writes
            .iter()
            .map(|w| w.target.clone())
            .collect();
        for t in &targets {
            match self.api.get(t).await {
                Ok(v) => fresh.replace(t, v),
                Err(_) => return failed,
            }
        }
        let again = step::step(
            &failed.step.namespace,
            &fresh,
            &idx.draining,
            &failed.step.deployment,
            facts,
            self.settings,
            idx.wall_now,
        );
        let mut second = self.execute(again).await;
        second.written += failed.written;
        let mut cleaned = failed.cleaned;
        cleaned.retain(|k| !second.cleaned.contains(k));
        cleaned.append(&mut second.cleaned);
        second.cleaned = cleaned;
        second
    }

    async fn execute(&self, step: Step) -> Outcome {
        let mut written = 0;
        for w in &step.writes {
            if let Err(e) = self.api.patch(&w.target, &w.ops).await {
                return Outcome::of(step, written, Some(e));
            }
            written += 1;
        }
        Outcome::of(step, written, None)
    }

    /// `read`: when the pass read the signals its steps were planned from.
    fn record(&self, o: &Outcome, read: Instant, now: Instant) {
        let key = (o.step.namespace.clone(), o.step.deployment.clone());
        let failed = o.error.is_some();
        // A failed step keeps the user's value it could not persist; one
        // whose adoptions are all written (a later write failed) has none.
        let unpersisted = o.unwritten_adoption.as_ref();
        let adopted_all = failed && unpersisted.is_none() && !o.step.adopting.is_empty();
        self.adoptions
            .record(&key, unpersisted, failed && !adopted_all);
        self.lifts.record(&key, o.step.lifting.as_ref(), failed);
        let Ok(mut b) = self.backoff.lock() else {
            return;
        };
        match &o.error {
            None => {
                b.remove(&key);
                // Over once nothing is left in place (the Deployment's
                // scale-back may come a few seconds after its autoscaler's).
                if (o.step.reverted || matches!(o.step.action, Action::Revert { .. }))
                    && o.step.active.is_none()
                {
                    self.book.forget_until(&key.0, &key.1, read);
                }
            }
            Some(e) => {
                let failures = b.get(&key).map_or(0, |r| r.failures).saturating_add(1);
                let cap = if matches!(e, ApiError::Conflict(_)) {
                    BACKOFF_CONFLICT_MAX
                } else {
                    BACKOFF_MAX
                };
                let delay = BACKOFF_MIN
                    .saturating_mul(1u32 << failures.saturating_sub(1).min(16))
                    .min(cap);
                b.insert(
                    key,
                    Retry {
                        not_before: now + delay,
                        failures,
                    },
                );
            }
        }
    }

    /// The autoscalers' minimum read at earlier passes, and how long it has stood.
    fn min_read(&self, key: &Key, now: Instant) -> Option<(i32, Duration)> {
        let m = self.mins.lock().ok()?;
        m.get(key)
            .map(|&(v, at)| (v, now.saturating_duration_since(at)))
    }

    fn note_min(&self, key: Key, min: Option<i32>, now: Instant) {
        let Ok(mut m) = self.mins.lock() else { return };
        match min {
            Some(v) if m.get(&key).is_some_and(|e| e.0 == v) => {}
            Some(v) => {
                m.insert(key, (v, now));
            }
            None => {
                m.remove(&key);
            }
        }
    }

    fn backing_off(&self, ns: &str, dep: &str, now: Instant) -> bool {
        self.backoff.lock().is_ok_and(|b| {
            b.get(&(ns.to_string(), dep.to_string()))
                .is_some_and(|r| now < r.not_before)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn api(body: serde_json::Value) -> kube::Error {
        kube::Error::Api(Box::new(serde_json::from_value(body).expect("a Status")))
    }

    struct NoApi;

    impl SurgeApi for NoApi {
        async fn patch(&self, _: &ObjKey, _: &[Value]) -> Result<(), ApiError> {
            Ok(())
        }
        async fn get(&self, _: &ObjKey) -> Result<Option<Value>, ApiError> {
            Ok(None)
        }
    }

    /// A step takes its Deployment's slot as it begins (not when its pass
    /// is planned, so steps queued behind hanging ones stay free for a pass
    /// beside): none while another step of it runs, nor once one begun
    /// after this step was planned has ended (this one is stale then).
    #[test]
    fn a_step_planned_before_another_ran_is_left_out() {
        let core = Core::new(
            NoApi,
            SignalBook::default(),
            Instant::now(),
            Duration::from_secs(60),
            None,
        );
        let settings = Settings {
            cooldown: Duration::from_secs(60),
            zero_surge_override: None,
        };
        let objs = NsObjects::default();
        let s = step::step(
            "ns",
            &objs,
            &Default::default(),
            "web",
            &Facts::default(),
            settings,
            None,
        );
        let planned_a = Instant::now();
        let b = core.take_slot(&s, Instant::now()).expect("free");
        assert!(
            core.take_slot(&s, planned_a).is_none(),
            "running in another pass"
        );
        drop(b);
        assert!(
            core.take_slot(&s, planned_a).is_none(),
            "stale: stepped since it was planned"
        );
        std::thread::sleep(Duration::from_millis(1));
        assert!(
            core.take_slot(&s, Instant::now()).is_some(),
            "planned after: free"
        );
    }

    /// The bodies the apiserver (v1.34) answered on the local control plane:
    /// a JSON patch whose `test` failed, and an HPA minimum above its maximum.
    #[test]
    fn a_failed_test_op_is_a_conflict_and_a_refused_value_is_not() {
        let test_failed = json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": "the server rejected our request due to an error in our request",
            "reason": "Invalid", "details": {}, "code": 422
        });
        assert!(matches!(
            ApiError::from(api(test_failed)),
            ApiError::Conflict(_)
        ));
        let conflict = json!({"status": "Failure", "message": "the object has been modified",
            "reason": "Conflict", "code": 409});
        assert!(matches!(
            ApiError::from(api(conflict)),
            ApiError::Conflict(_)
        ));
        let invalid = json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": "HorizontalPodAutoscaler.autoscaling \"x\" is invalid: spec.maxReplicas: Invalid value: 3: must be greater than or equal to `minReplicas`",
            "reason": "Invalid",
            "details": {"name": "x", "group": "autoscaling", "kind": "HorizontalPodAutoscaler",
                "causes": [{"reason": "FieldValueInvalid",
                    "message": "Invalid value: 3: must be greater than or equal to `minReplicas`",
                    "field": "spec.maxReplicas"}]},
            "code": 422
        });
        assert!(matches!(ApiError::from(api(invalid)), ApiError::Other(_)));
        // A ValidatingAdmissionPolicy with `reason: Invalid` (the body the
        // local control plane answered), and an admission webhook's denial
        // with its own code and no causes: refusals, whatever the code.
        let policy = json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": "configmaps \"c\" is forbidden: ValidatingAdmissionPolicy 'probe-deny' with binding 'probe-deny' denied request: no updates",
            "reason": "Invalid",
            "details": {"name": "c", "kind": "configmaps", "causes": [{"message":
                "ValidatingAdmissionPolicy 'probe-deny' with binding 'probe-deny' denied request: no updates"}]},
            "code": 422
        });
        assert!(matches!(ApiError::from(api(policy)), ApiError::Other(_)));
        for code in [409, 422] {
            let webhook = json!({"status": "Failure", "code": code, "details": {},
                "message": "admission webhook \"lock.example.com\" denied the request: replicas are locked"});
            assert!(
                matches!(ApiError::from(api(webhook)), ApiError::Other(_)),
                "{code}"
            );
        }
        let gone =
            json!({"status": "Failure", "message": "not found", "reason": "NotFound", "code": 404});
        assert_eq!(ApiError::from(api(gone)), ApiError::NotFound);
    }
}
