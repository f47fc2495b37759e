//! The surge worker (leader only): the run loop around [`Core`]. Each pass
//! takes one snapshot of the watch caches ([`ClusterView`]), lets the core
//! plan and write, then reports: Events, the Degraded reason the reconciler
//! puts on the EvictionAutoScaler, and metrics. Decisions live in
//! `plan.rs` / `step.rs`, writes in `apply.rs`.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use futures::stream::{FuturesUnordered, StreamExt};
use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::EventType;
use kube::Client;
use tokio::sync::watch;

use crate::cache::{Cache, Reader};
use crate::events::Events;
use crate::markers::Markers;
use crate::metrics::{ControllerLabel, Metrics};
use crate::reconcile::DegradedReasons;
use crate::surge::apply::{Core, Key, KubeApi, Outcome};
use crate::surge::clock::{Look, SignalClock};
use crate::surge::plan::{Action, SurgeKind};
use crate::surge::signals::SignalBook;
use crate::surge::view::ClusterView;

pub use crate::surge::view::{node_draining, DRAIN_TAINTS};

/// Passes run at once: one waiting on slow writes, others beside it.
const MAX_PASSES: usize = 4;
/// A pass running this long (a write waiting for its timeout) has the next
/// one run beside it.
const SLOW_PASS: Duration = Duration::from_secs(2);

pub struct Worker {
    pub cache: Cache,
    pub client: Client,
    pub metrics: Arc<Metrics>,
    pub signals: SignalBook,
    pub degraded: DegradedReasons,
    /// Where Events go (shared with the reconciler; never awaited).
    pub events: Events,
    started: std::sync::Mutex<BTreeMap<(String, String), Instant>>,
    /// The "no surge can help" reason last said in an Event, per
    /// Deployment: said once while it stays, not again at a pass that finds
    /// it after one that did not judge it.
    said_impossible: std::sync::Mutex<BTreeMap<(String, String), String>>,
    /// Starts whose write failed, perhaps only its answer (a timeout): the
    /// pass that finds their markers in place says the surge started.
    unconfirmed_starts: std::sync::Mutex<BTreeMap<(String, String), Markers>>,
    /// The durable signal's timestamps on this replica's clock.
    clock: std::sync::Mutex<SignalClock>,
    /// The election's terms (see [`crate::leader::Election::term`]).
    term: crate::leader::Term,
}

/// One look's decision: whether a pass starts, and whether a pass is still
/// owed after activity (`was_busy` for the next look). A look that found
/// nothing after a busy one still starts one pass, to report the activity
/// ended; a running pass that keeps it from starting leaves that pass owed.
fn look(busy: bool, was_busy: bool, beside: bool, leading: bool) -> (bool, bool) {
    let idle = !busy && !was_busy;
    if !idle && beside && leading {
        (true, busy)
    } else {
        (false, was_busy || busy)
    }
}

/// How long a lead may be lost and still be taken back as the same one
/// (the Lease's duration: a flap, not an outage).
const FLAP: Duration = Duration::from_secs(15);
/// How long a surge's start is kept for `surge_duration` (see `note_start`).
const STARTED_KEPT: Duration = Duration::from_secs(24 * 3600);

/// The last lead of this replica: its term, its start, and when it was lost.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LastLead {
    pub term: u64,
    pub start: Instant,
    pub lost: Option<Instant>,
}

/// When the lead taken at `now` in `term` began: a lead lost and taken back
/// in the same term (no other leader between; an apiserver's brownout longer
/// than the renew deadline) within [`FLAP`] keeps its start, so surges found
/// in place are not given a whole cooldown again at each such flap (this
/// replica's signals outlive the lead). A new term, or a longer gap, starts
/// now: while it did not lead, this replica looked at no node, and a drain
/// may have come and gone meanwhile (the webhook skipped, a replica cut off).
pub fn lead_start(last: Option<LastLead>, term: u64, now: Instant) -> Instant {
    match last {
        Some(l)
            if l.term == term
                && l.lost
                    .is_none_or(|lost| now.saturating_duration_since(lost) <= FLAP) =>
        {
            l.start
        }
        _ => now,
    }
}

impl Worker {
    pub fn new(
        cache: Cache,
        client: Client,
        metrics: Arc<Metrics>,
        signals: SignalBook,
        degraded: DegradedReasons,
        events: Events,
        term: crate::leader::Term,
    ) -> Self {
        Worker {
            cache,
            client,
            metrics,
            signals,
            degraded,
            events,
            started: std::sync::Mutex::new(BTreeMap::new()),
            said_impossible: std::sync::Mutex::new(BTreeMap::new()),
            unconfirmed_starts: std::sync::Mutex::new(BTreeMap::new()),
            clock: std::sync::Mutex::default(),
            term,
        }
    }

    pub async fn run(self, mut leader: watch::Receiver<bool>) {
        let mut changed = self.cache.changed.clone();
        let wake = self.signals.wake.clone();
        // A new Core each time this replica becomes leader: memory (signals
        // aside) and backoff start afresh, and the cooldown of a surge found
        // in place counts from the lead's start (see [`lead_start`]).
        let mut core: Option<Arc<Core<KubeApi>>> = None;
        let mut last_lead: Option<LastLead> = None;
        // Passes still running. A pass waits for its slowest write (up to
        // the call timeout); the next ones run beside it and leave that
        // Deployment out, so one slow object never holds back the others.
        let mut passes: FuturesUnordered<BoxFuture<'static, Vec<Outcome>>> =
            FuturesUnordered::new();
        let mut last_start = Instant::now();
        let mut pending = false;
        // Whether the last pass had anything to look at (see below).
        let mut was_busy = true;
        loop {
            // The election gone (its task ended): nothing says this replica
            // leads any more, so it stops (and the process with it, see
            // crate::supervise) rather than write on a stale flag.
            if leader.has_changed().is_err() {
                tracing::error!("the leader flag's sender is gone: the surge worker stops");
                return;
            }
            let leading = *leader.borrow();
            // No decision on a frozen or partial snapshot: while a store it
            // reads is stale (behaviour.md section 4, rule 6), the worker
            // waits; its writes are guarded anyway. The EvictionAutoScaler
            // store is not one of them: its CRD deleted under a surge must
            // not strand it. Nor are KEDA's ScaledObjects: while they are
            // unknown only the Deployments under KEDA's HPAs wait (step.rs).
            if !leading {
                // A replica that loses the lead stops writing at once: its
                // passes are dropped (their writes are guarded, so a cut one
                // is re-planned by the next leader), and no gauge is set after.
                if core.take().is_some() {
                    if let Some(l) = last_lead.as_mut() {
                        l.lost = Some(Instant::now());
                    }
                }
                passes = FuturesUnordered::new();
                was_busy = true;
                // What another leader did meanwhile is not ours to say.
                if let Ok(mut u) = self.unconfirmed_starts.lock() {
                    u.clear();
                }
            } else if self.cache.ready_for(Reader::SurgeWorker) {
                let c = core
                    .get_or_insert_with(|| {
                        let (term, now) = (self.term.get(), Instant::now());
                        let start = lead_start(last_lead, term, now);
                        if start != now {
                            tracing::info!(
                                term,
                                led_for = ?start.elapsed(),
                                "lead taken back with no other leader between: cooldowns go on"
                            );
                        }
                        last_lead = Some(LastLead {
                            term,
                            start,
                            lost: None,
                        });
                        Arc::new(Core::new(
                            KubeApi(self.client.clone()),
                            self.signals.clone(),
                            start,
                            self.cache.behaviour.cooldown,
                            self.cache.behaviour.zero_surge_override,
                        ))
                    })
                    .clone();
                let (view, busy) = self.view();
                // Nothing marked, signalled or draining: a pass has no
                // candidate and would only index every object again (the
                // bulk of an idle replica's CPU at 2,000 Deployments). One
                // idle pass still runs after activity, to report it ended.
                let idle = !busy && !was_busy;
                // Beside a pass only once it is slow: passes one after
                // another see each other's writes in the caches.
                let beside = passes.is_empty()
                    || passes.len() < MAX_PASSES && last_start.elapsed() >= SLOW_PASS;
                // The lead may have gone while the view was read (long at
                // 100,000 pods): no pass starts after the step-down.
                let start;
                (start, was_busy) = look(busy, was_busy, beside, *leader.borrow());
                if start {
                    last_start = Instant::now();
                    passes.push(Box::pin(async move { c.pass(view, Instant::now()).await }));
                }
                // A look that found work but left it to the running pass:
                // look again as soon as that pass ends.
                pending = !idle && !beside;
            }
            // Until the next look, the passes run and each is reported as it
            // ends. Waking on every watch event would mean a pass per pod
            // update; 200 ms batches them while keeping the drain fast.
            let next_look = async {
                tokio::time::sleep(Duration::from_millis(200)).await;
                tokio::select! {
                    _ = changed.changed() => {},
                    _ = wake.notified() => {},
                    _ = tokio::time::sleep(Duration::from_secs(1)) => {},
                }
            };
            tokio::pin!(next_look);
            loop {
                tokio::select! {
                    // A step-down first: its passes are dropped before any
                    // of them is polled again (and sends another write).
                    biased;
                    _ = leader.changed() => break,
                    Some(outcomes) = passes.next() => {
                        let still = *leader.borrow();
                        let running = core.as_ref().filter(|_| still).map(|c| (c.in_flight_surges(&outcomes), c.looked_at()));
                        if let Some((running, looked_at)) = running {
                            self.report(&outcomes, running, &looked_at);
                        }
                        if pending && passes.is_empty() {
                            break;
                        }
                    }
                    _ = &mut next_look => break,
                }
            }
        }
    }

    /// One read of each store, and whether anything in it may need a step:
    /// a marked object, a recent signal, or a draining node. Pods (the big
    /// store) are read only then.
    fn view(&self) -> (ClusterView, bool) {
        let c = &self.cache;
        let (wall_now, now) = (k8s_openapi::jiff::Timestamp::now(), Instant::now());
        let mut eas = c.eas.state();
        let window = crate::surge::signals::window(c.behaviour.cooldown);
        if let Ok(mut clock) = self.clock.lock() {
            let look = Look {
                wall_now,
                now,
                current: c.eas_current(),
                window,
            };
            clock.localize(&mut eas, look);
        }
        let mut v = ClusterView {
            deployments: c.deployments.state(),
            hpas: c.hpas.state(),
            scaled_objects: c
                .keda
                .read()
                .ok()
                .and_then(|g| g.clone())
                .map(|s| s.state())
                .unwrap_or_default(),
            pdbs: c.pdbs.state(),
            pods: Vec::new(),
            nodes: c.nodes.state(),
            namespaces: c.namespaces.state(),
            eas,
            behaviour: c.behaviour.clone(),
            wall_now: Some(wall_now),
            keda_unknown: !c.keda_known(),
            eas_unknown: !c.eas_ready(),
        };
        let signalled = !self.signals.recent(window, now).is_empty();
        let busy = v.may_need_a_step(signalled, window);
        if busy {
            // With a StatefulSet's pods gone and not yet made again: under
            // a PDB beside the Deployment's, they still count in its budget.
            v.pods = c.pods.state_and_leaving();
        }
        (v, busy)
    }

    /// `running`: active surges and their replicas among the steps of
    /// other passes still running (their outcome is reported then).
    fn report(&self, outcomes: &[Outcome], running: (i64, i64), looked_at: &HashSet<Key>) {
        // "No surge can help" holds while a surge is needed: a Deployment no
        // pass looks at any more (nothing displaced, signalled or marked for
        // twice the cooldown, or deleted) has it cleared, so a cause fixed
        // meanwhile does not stay Degraded (nor in this map) for good.
        self.degraded.retain_reason("SurgeImpossible", |ns, dep| {
            looked_at.contains(&(ns.to_string(), dep.to_string()))
        });
        if let Ok(mut said) = self.said_impossible.lock() {
            said.retain(|k, _| looked_at.contains(k));
        }
        if let Ok(mut u) = self.unconfirmed_starts.lock() {
            u.retain(|k, _| looked_at.contains(k));
        }
        let (mut active, mut surge_replicas) = running;
        for o in outcomes {
            let s = &o.step;
            // Every decision, for `RUST_LOG=eviction_autoscaler::surge=debug`.
            tracing::debug!(namespace = %s.namespace, deployment = %s.deployment, action = ?s.action,
                displaced = s.displaced, on_draining = s.on_draining, pdb = ?s.pdb, "surge step");
            if let Some(m) = s.active {
                active += 1;
                surge_replicas += i64::from((m.surged_to - m.baseline).max(0));
            }
            self.say_cleaned(o);
            if let (
                Some(_),
                Action::Surge {
                    baseline,
                    target,
                    kind: SurgeKind::Start,
                },
            ) = (&o.error, &s.action)
            {
                if let Ok(mut u) = self.unconfirmed_starts.lock() {
                    u.insert(
                        (s.namespace.clone(), s.deployment.clone()),
                        Markers {
                            baseline: *baseline,
                            surged_to: *target,
                        },
                    );
                }
            }
            if let Some(e) = &o.error {
                self.metrics
                    .reconcile_errors
                    .get_or_create(&ControllerLabel {
                        controller: "surge",
                    })
                    .inc();
                tracing::warn!(namespace = %s.namespace, deployment = %s.deployment,
                    written = o.written, error = %e, "surge step failed; retrying with backoff");
                continue;
            }
            self.announce(o);
        }
        self.metrics.active_surges.set(active);
        self.metrics.surge_replicas.set(surge_replicas);
    }

    /// The Warning Event of markers removed, whether or not the rest of the
    /// step's writes succeeded.
    fn say_cleaned(&self, o: &Outcome) {
        let (ns, name) = (o.step.namespace.as_str(), o.step.deployment.as_str());
        if o.cleaned.is_empty() {
            return;
        }
        let dep_ref = self.event_target(ns, name);
        for k in &o.cleaned {
            let what = format!("{:?} {}", k.kind, k.name);
            tracing::warn!(namespace = ns, deployment = name, object = %what,
                "surge markers half there or not numbers (edited by hand?): removed; \
                 the value is kept as it is");
            self.events.emit(
                &dep_ref,
                EventType::Warning,
                "SurgeMarkersInvalid",
                format!(
                    "removed the surge markers of {what}: one was missing or not a number (edited by hand?); its value is kept as it is, and the baseline they recorded is lost"
                ),
            );
        }
    }

    /// What the Events of a Deployment's step are about.
    fn event_target(&self, ns: &str, name: &str) -> ObjectReference {
        match self.cache.deployment(ns, name) {
            Some(d) => crate::reconcile::object_ref(d.as_ref()),
            None => match name.split_once('/') {
                // An autoscaler of ours retargeted to another kind: the
                // Event goes to what it targets now (`hpa_carrier`).
                Some((kind, target)) => ObjectReference {
                    kind: Some(kind.into()),
                    namespace: Some(ns.into()),
                    name: Some(target.into()),
                    ..Default::default()
                },
                None => ObjectReference {
                    kind: Some("Deployment".into()),
                    api_version: Some("apps/v1".into()),
                    namespace: Some(ns.into()),
                    name: Some(name.into()),
                    ..Default::default()
                },
            },
        }
    }

    /// When a surge started, for `surge_duration`. Entries whose revert this
    /// replica never saw (the Deployment deleted mid-surge, reverted under
    /// another leader) are dropped after a day, so the map stays bounded.
    fn note_start(&self, key: (String, String)) {
        if let Ok(mut st) = self.started.lock() {
            let now = Instant::now();
            st.retain(|_, t| now.saturating_duration_since(*t) < STARTED_KEPT);
            st.insert(key, now);
        }
    }

    /// Events and the Degraded reason for a step whose writes all succeeded.
    fn announce(&self, o: &Outcome) {
        let s = &o.step;
        let (ns, name) = (s.namespace.as_str(), s.deployment.as_str());
        let key = (ns.to_string(), name.to_string());
        let dep_ref = self.event_target(ns, name);
        let pdb = s.pdb.clone().unwrap_or_default();
        let unconfirmed = self
            .unconfirmed_starts
            .lock()
            .ok()
            .and_then(|mut u| u.remove(&key));
        if let Some(m) = start_found(unconfirmed, s.active, &s.action) {
            self.note_start(key.clone());
            tracing::info!(
                namespace = ns,
                deployment = name,
                baseline = m.baseline,
                target = m.surged_to,
                "surge in place: the answer to its write was lost"
            );
            self.events.emit(
                &dep_ref,
                EventType::Normal,
                "SurgeStarted",
                started_note(m.baseline, m.surged_to, &pdb),
            );
        }
        if let Some(m) = s.legacy {
            tracing::info!(
                namespace = ns,
                deployment = name,
                baseline = m.baseline,
                surged_to = m.surged_to,
                "a surge left by an earlier eviction-autoscaler (evictionSurgeReplicas alone): \
                 the baseline its EvictionAutoScaler recorded is written beside it"
            );
            self.events.emit(
                &dep_ref,
                EventType::Normal,
                "SurgeTakenOver",
                format!(
                    "surge to {} replicas left by an earlier eviction-autoscaler taken over; it goes back to the {} recorded in its EvictionAutoScaler",
                    m.surged_to, m.baseline
                ),
            );
        }
        // "No surge can help" lasts only while the plan says so: a pass in
        // the moment between an eviction and its replacement may say it of
        // an active surge, whose later passes wait (no Surge) while the
        // webhook, reading Degraded, would stop holding for the whole drain.
        // Not on a pass that did not judge it (nothing to do while pods are
        // displaced because the budget lets one go now), or it would come
        // and go with every eviction. Its own reason only: the
        // reconciler's (a name conflict, a selector overlap) stay until it
        // clears them. Once cleared, it is said again if it comes back.
        let unjudged = matches!(s.action, Action::None) && s.displaced > 0 && s.budget_open;
        if !unjudged && !matches!(s.action, Action::Impossible { .. }) {
            self.degraded.clear_reason(ns, name, "SurgeImpossible");
            if let Ok(mut said) = self.said_impossible.lock() {
                said.remove(&key);
            }
        }
        match &s.action {
            Action::Surge {
                baseline,
                target,
                kind,
            } => {
                tracing::info!(
                    namespace = ns,
                    deployment = name,
                    baseline,
                    target,
                    ?kind,
                    "surge"
                );
                let event = match kind {
                    SurgeKind::TopUp => Some(("SurgeToppedUp", format!("surge topped up to {target} replicas (baseline {baseline}): more pods displaced; PDB {pdb}"))),
                    SurgeKind::Start => {
                        self.note_start(key);
                        Some(("SurgeStarted", started_note(*baseline, *target, &pdb)))
                    }
                    SurgeKind::Resume => None,
                };
                if let Some((reason, note)) = event {
                    self.events.emit(&dep_ref, EventType::Normal, reason, note);
                }
            }
            Action::AdoptUserChange { new_baseline, .. } => {
                tracing::info!(
                    namespace = ns,
                    deployment = name,
                    new_baseline,
                    "value changed by someone else during the surge: it is the new baseline"
                );
                self.events
                    .emit(
                        &dep_ref,
                        EventType::Normal,
                        "SurgeBaselineChanged",
                        format!("replicas changed during the surge; {new_baseline} is kept as the new baseline"),
                    );
            }
            Action::Impossible { reason } => {
                let fresh = self.said_impossible.lock().map_or(true, |mut said| {
                    said.insert(key.clone(), reason.clone()).as_ref() != Some(reason)
                });
                self.degraded.set(ns, name, "SurgeImpossible", reason);
                if fresh {
                    tracing::warn!(namespace = ns, deployment = name, %reason, "no surge can help");
                    self.events.emit(
                        &dep_ref,
                        EventType::Warning,
                        "SurgeImpossible",
                        reason.clone(),
                    );
                }
            }
            _ => {}
        }
        // Any revert (the applier's, or another object's): one Event when
        // the last marker is gone.
        if s.reverted && s.active.is_none() {
            if let Some(t) = self
                .started
                .lock()
                .ok()
                .and_then(|mut st| st.remove(&(ns.to_string(), name.to_string())))
            {
                self.metrics
                    .surge_duration
                    .observe(t.elapsed().as_secs_f64());
            }
            tracing::info!(namespace = ns, deployment = name, "surge reverted");
            self.events.emit(
                &dep_ref,
                EventType::Normal,
                "SurgeReverted",
                reverted_note(&s.action, s.writes.iter().map(|w| w.target.kind)),
            );
        }
    }
}

/// The SurgeStarted Event's note.
/// The SurgeReverted note: what went back to what. Under an autoscaler
/// the number restored is its minimum, not the Deployment's replicas.
fn reverted_note(
    action: &Action,
    written: impl IntoIterator<Item = crate::surge::step::ObjKind>,
) -> String {
    use crate::surge::step::ObjKind;
    let applier = written.into_iter().find(|k| *k != ObjKind::Deployment);
    match (action, applier) {
        (Action::Revert { baseline }, Some(ObjKind::Hpa)) => {
            format!("drain over and cooldown passed: restored the HPA's minReplicas to {baseline}")
        }
        (Action::Revert { baseline }, Some(ObjKind::ScaledObject)) => format!(
            "drain over and cooldown passed: restored the ScaledObject's minReplicaCount to {baseline}"
        ),
        (Action::Revert { baseline }, _) => {
            format!("drain over and cooldown passed: restored {baseline} replicas")
        }
        _ => "drain over and cooldown passed: restored the values recorded before the surge"
            .to_string(),
    }
}

fn started_note(baseline: i32, target: i32, pdb: &str) -> String {
    format!("surging from {baseline} to {target} replicas so that PDB {pdb} lets displaced pods go")
}

/// The surge found in place after a Start whose write failed: that write
/// landed and only its answer was lost (a timeout), so the surge's start
/// was never said. Same baseline, and not this pass's own Start (then the
/// write did not land, and this pass says it).
fn start_found(
    unconfirmed: Option<Markers>,
    active: Option<Markers>,
    action: &Action,
) -> Option<Markers> {
    let (asked, found) = (unconfirmed?, active?);
    let starts_now = matches!(
        action,
        Action::Surge {
            kind: SurgeKind::Start,
            ..
        }
    );
    (found.baseline == asked.baseline && !starts_now).then_some(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reverted_note_names_what_went_back() {
        use crate::surge::step::ObjKind::*;
        let back = Action::Revert { baseline: 2 };
        assert!(reverted_note(&back, [Deployment]).ends_with("restored 2 replicas"));
        assert!(reverted_note(&back, [Hpa]).ends_with("the HPA's minReplicas to 2"));
        assert!(reverted_note(&back, [Deployment, ScaledObject])
            .ends_with("the ScaledObject's minReplicaCount to 2"));
        let waited = Action::Wait(crate::surge::plan::Wait::Draining { displaced: 1 });
        assert!(reverted_note(&waited, [Deployment]).ends_with("recorded before the surge"));
    }

    #[test]
    fn a_start_whose_answer_was_lost_is_said_when_found() {
        let m = |baseline, surged_to| Markers {
            baseline,
            surged_to,
        };
        let wait = Action::Wait(crate::surge::plan::Wait::Draining { displaced: 3 });
        let start = Action::Surge {
            baseline: 3,
            target: 6,
            kind: SurgeKind::Start,
        };
        // Landed: found at the next pass (topped up since, still said).
        assert_eq!(
            start_found(Some(m(3, 6)), Some(m(3, 6)), &wait),
            Some(m(3, 6))
        );
        assert_eq!(
            start_found(Some(m(3, 6)), Some(m(3, 7)), &wait),
            Some(m(3, 7))
        );
        // Did not land: this pass starts it and says so itself.
        assert_eq!(start_found(Some(m(3, 6)), None, &start), None);
        // Not ours (another baseline), nothing asked, or nothing in place.
        assert_eq!(start_found(Some(m(3, 6)), Some(m(4, 6)), &wait), None);
        assert_eq!(start_found(None, Some(m(3, 6)), &wait), None);
        assert_eq!(start_found(Some(m(3, 6)), None, &Action::None), None);
    }

    #[test]
    fn the_idle_pass_after_activity_is_owed_until_it_runs() {
        // Busy: a pass; then idle: one more pass, then none.
        assert_eq!(look(true, false, true, true), (true, true));
        assert_eq!(look(false, true, true, true), (true, false));
        assert_eq!(look(false, false, true, true), (false, false));
        // That idle pass kept from starting by a running one stays owed.
        assert_eq!(look(false, true, false, true), (false, true));
        assert_eq!(look(false, true, true, true), (true, false));
        // Not leading: nothing starts, nothing is forgotten.
        assert_eq!(look(true, false, true, false), (false, true));
    }

    #[test]
    fn a_lead_taken_back_in_its_term_keeps_its_start() {
        let t0 = Instant::now();
        let later = t0 + Duration::from_secs(40);
        let lead = |term, lost_for: Option<u64>| {
            Some(LastLead {
                term,
                start: t0,
                lost: lost_for.map(|s| later - Duration::from_secs(s)),
            })
        };
        assert_eq!(lead_start(None, 1, later), later, "first lead");
        assert_eq!(lead_start(lead(1, None), 1, later), t0, "same term");
        assert_eq!(lead_start(lead(1, Some(5)), 1, later), t0, "a flap");
        assert_eq!(
            lead_start(lead(1, Some(16)), 1, later),
            later,
            "lost longer than a flap: a drain may have come and gone"
        );
        assert_eq!(
            lead_start(lead(1, Some(5)), 2, later),
            later,
            "another leader between"
        );
    }
}
