//! EVICTION_HOLD (behaviour.md section 4, drain speed). A blocked eviction
//! during a surge would otherwise be retried by kubectl only after 5 s, even
//! when the replacement pod is Ready within a second. So, while a surge is
//! under way (or was just asked for by this very request), the webhook keeps
//! the request open and answers allowed as soon as the watch caches show
//! room; the apiserver re-checks the budget itself, so an allow is never
//! unsafe. At the deadline the facts are read again ([`after_hold`]): the
//! 429 only if the caches and the apiserver still say the budget blocks.
//!
//! Contract for the caller (`Webhooks::evictions`):
//! - hold only what [`should_hold`] accepts: a live-confirmed Block, not a
//!   dry run, facts fresh, a surge active or requested (never when no surge
//!   can help: the 429 says why at once); or, without a surge, an allow
//!   whose room is taken ([`HoldFor::Taken`], below), not a dry run, of a
//!   Deployment's pod in scope: the evicted pods' replacements make room;
//! - at most [`MAX_HELD`] requests at once (beyond, the 429 at once);
//! - the deadline counts from the request's admission (its body read), so
//!   the answer stays within the hold plus one live read (1.5 s at most)
//!   after it; the server's request time limit bounds the whole, a slow body
//!   included (past it: a 503, which `failurePolicy: Ignore` allows);
//! - any Allow the caches give during the hold is answered (the budget made
//!   room, the pod went away, a cache went stale: each is an allow without
//!   the hold too).
//!
//! The same hold serves a second case ([`HoldFor::Recount`]): an eviction
//! the PDB's status allows only because it has not counted a scale-down of
//! the pod's Deployment yet ([`Recount`](super::eviction::Recount)). It is
//! held until the status is recounted and then decided again: an allow, or a
//! Block that goes on as above (live-confirmed, held for room while time is
//! left). When the hold ends first it is allowed: the apiserver would allow
//! it, and only it may refuse on that status.
//!
//! Room is shared out ([`RoomLedger`]): when a PDB's status allows k
//! disruptions, at most k evictions are let through on it until the status
//! shows them; the others are held ([`HoldFor::Taken`], or wait on in their
//! hold) for the next room. Letting them all through would make the
//! apiserver answer its own 429 to all but k, and kubectl would wait its
//! full 5 s retry for those (seen in the e2e drains and the drain bench).
//! Such a hold ends as any other: allowed on room, or at the deadline on
//! the facts read again (the 429 only if they block).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use k8s_openapi::api::policy::v1::PodDisruptionBudget;

use super::eviction::{decide_room, AllowReason, Decision, EvictionView, Freshness, SurgeState};
use super::live::{self, LiveReader};

/// Requests held at once, across all PDBs. A drain evicts every pod of a node
/// at once (110 by default per node); a managed upgrade drains a few nodes
/// together. Each held request is one idle future here, one of the server's
/// request slots and one open request in the apiserver. Fewer than the
/// slots ([`crate::server::MAX_IN_FLIGHT`]), so that requests that are not
/// held (evictions with room, the Deployment webhook) always find one.
pub const MAX_HELD: usize = 96;
const _: () = assert!(MAX_HELD + 32 <= crate::server::MAX_IN_FLIGHT);

/// Whether a Block may be held: only while a surge of ours is asked for or
/// in place, the one thing that can make room within the hold.
pub fn should_hold(
    hold: Duration,
    dry_run: bool,
    freshness: Freshness,
    surge: &SurgeState,
) -> bool {
    !hold.is_zero()
        && !dry_run
        && freshness == Freshness::Fresh
        && matches!(surge, SurgeState::Active { .. } | SurgeState::Requested)
}

/// What a hold waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HoldFor {
    /// A blocked eviction during a surge: room in the budget.
    Room,
    /// A [`Recount`](super::eviction::Recount): the PDB's status to count
    /// the Deployment's scale-down; any other decision ends it.
    Recount,
    /// An eviction the PDB's status allows, whose room evictions let through
    /// already took ([`RoomLedger`]): the next room, as for [`HoldFor::Room`].
    Taken,
}

impl HoldFor {
    /// The `wait` label of `eviction_holds_total`.
    pub fn as_str(self) -> &'static str {
        match self {
            HoldFor::Room => "room",
            HoldFor::Recount => "recount",
            HoldFor::Taken => "taken",
        }
    }
}

/// How a hold ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HoldOutcome {
    /// The caches allow the eviction now.
    Room {
        reason: AllowReason,
        warning: Option<String>,
    },
    /// A recount hold: the recounted status blocks the eviction (the caller
    /// confirms it live and goes on as for any Block).
    Blocked,
    /// The deadline passed with the budget still blocking (or, for a
    /// recount, the status still lagging).
    Expired,
}

impl HoldOutcome {
    /// The `outcome` label of `eviction_holds_total`.
    pub fn as_str(&self) -> &'static str {
        match self {
            HoldOutcome::Room { .. } => "allowed",
            HoldOutcome::Blocked => "blocked",
            HoldOutcome::Expired => "expired",
        }
    }
}

/// A held request decides again at least this often, besides every PDB
/// change: a pod event (the excess pod gone, a new pod Ready in the pod
/// cache after the PDB's status already counted it) can end a hold too, and
/// the pod store has no notifier.
const RECHECK_EVERY: Duration = Duration::from_millis(250);

/// How long an eviction let through on a PDB's room is counted against that
/// room while the PDB's status does not show it yet. The apiserver writes
/// `status.disruptedPods` right after the webhook's answer (milliseconds);
/// an eviction still not there after this did not happen (another
/// admission refused it, or the apiserver's own 429).
pub const IN_FLIGHT_FOR: Duration = Duration::from_secs(2);

/// Forget expired entries every this many takes, so PDBs that are never
/// evicted again do not keep theirs.
const PRUNE_EVERY: u32 = 256;

/// The evictions this replica let through on a PDB's room that the PDB's
/// status does not count yet, keyed by namespace and PDB name.
///
/// The apiserver lets an eviction through only while `disruptionsAllowed`
/// is above 0, and takes one for it in the same status write that adds the
/// pod to `disruptedPods`. Until that write reaches the PDB cache, the
/// cached status still shows the room the eviction took; a second eviction
/// let through on it gets the apiserver's own 429, and kubectl then waits
/// its full 5 s retry (seen in the drain bench: up to 8 per drain). So the
/// room left is the status's `disruptionsAllowed` less the evictions let
/// through whose pod the status does not list in `disruptedPods` and that
/// is still there and not terminating (once it is, the disruption
/// controller's recount no longer counts it healthy).
///
/// A terminating pod ends its entry only once the cached PDB is another
/// version than the one its room was taken from. The apiserver writes the
/// status before it deletes the pod, but the pod and PDB watches are
/// separate streams: the pod cache can show the pod terminating while the
/// PDB cache still shows the room it took, and a second eviction let
/// through on that room gets the apiserver's own 429 (seen once in CI).
#[derive(Debug, Default)]
pub struct RoomLedger {
    sent: HashMap<String, HashMap<String, Vec<Sent>>>,
    takes: u32,
}

/// One eviction let through on a PDB's room.
#[derive(Debug)]
struct Sent {
    pod: String,
    at: Instant,
    /// The PDB's resourceVersion its room was taken from.
    pdb_version: Option<String>,
}

impl RoomLedger {
    /// Takes one disruption of `pdb` (in `ns`, status as cached) for `pod`;
    /// false when evictions let through already took all it allows.
    /// `counted(p)`: pod `p` is still there and not terminating.
    pub fn take(
        &mut self,
        ns: &str,
        pdb: &PodDisruptionBudget,
        pod: &str,
        counted: impl Fn(&str) -> bool,
        now: Instant,
    ) -> bool {
        self.takes = self.takes.wrapping_add(1);
        if self.takes % PRUNE_EVERY == 0 {
            self.prune(now);
        }
        let Some(name) = pdb.metadata.name.as_deref() else {
            return true;
        };
        let status = pdb.status.as_ref();
        let allowed = status.map_or(0, |s| s.disruptions_allowed);
        let disrupted = status.and_then(|s| s.disrupted_pods.as_ref());
        if !self.sent.contains_key(ns) {
            self.sent.insert(ns.to_string(), HashMap::new());
        }
        let Some(by_pdb) = self.sent.get_mut(ns) else {
            return true;
        };
        if !by_pdb.contains_key(name) {
            by_pdb.insert(name.to_string(), Vec::new());
        }
        let Some(sent) = by_pdb.get_mut(name) else {
            return true;
        };
        let version = pdb.metadata.resource_version.as_deref();
        // A retry of the same pod replaces its own entry.
        sent.retain(|e| {
            e.pod != pod
                && now.saturating_duration_since(e.at) < IN_FLIGHT_FOR
                && !disrupted.is_some_and(|d| d.contains_key(&e.pod))
                && (counted(&e.pod) || e.pdb_version.as_deref() == version)
        });
        let left = i64::from(allowed) - sent.len() as i64;
        if left > 0 {
            sent.push(Sent {
                pod: pod.to_string(),
                at: now,
                pdb_version: version.map(str::to_string),
            });
            true
        } else {
            false
        }
    }

    /// Drops every entry older than [`IN_FLIGHT_FOR`].
    fn prune(&mut self, now: Instant) {
        for by_pdb in self.sent.values_mut() {
            for sent in by_pdb.values_mut() {
                sent.retain(|e| now.saturating_duration_since(e.at) < IN_FLIGHT_FOR);
            }
            by_pdb.retain(|_, sent| !sent.is_empty());
        }
        self.sent.retain(|_, by_pdb| !by_pdb.is_empty());
    }

    /// PDBs with an entry (for tests).
    #[cfg(test)]
    fn pdbs(&self) -> usize {
        self.sent.values().map(HashMap::len).sum()
    }
}

/// Takes `pdb`'s room for evicting `pod` through `ledger`.
pub fn take_room(
    view: &impl EvictionView,
    ledger: &Mutex<RoomLedger>,
    ns: &str,
    pdb: &PodDisruptionBudget,
    pod: &str,
) -> bool {
    let counted = |p: &str| view.pod(ns, p).is_some_and(|p| !p.is_terminating());
    let now = Instant::now();
    match ledger.lock() {
        Ok(mut l) => l.take(ns, pdb, pod, counted, now),
        Err(poisoned) => poisoned.into_inner().take(ns, pdb, pod, counted, now),
    }
}

/// Re-decides over `view` now, after every bump of `changes` (the PDB
/// store's notifier) and every [`RECHECK_EVERY`], until the decision ends
/// the hold or `deadline` passes. A PDB status update from the disruption
/// controller is what usually makes room (or recounts), and that is a PDB
/// event. Any Allow ends a hold. A Block ends a recount hold, and a hold
/// for room taken (the room went to the eviction let through, and the
/// budget now blocks): the caller decides again on fresh facts and, for a
/// 429, wakes the surge worker at once instead of at the hold's end.
pub async fn wait_for_room(
    view: &impl EvictionView,
    ledger: &Mutex<RoomLedger>,
    mut changes: watch::Receiver<u64>,
    held: (&str, &str),
    wait: HoldFor,
    deadline: Instant,
) -> HoldOutcome {
    let (ns, pod) = held;
    // Mark the current version seen before deciding, so a change between
    // the decision and the wait still wakes us.
    changes.borrow_and_update();
    let mut notifier_alive = true;
    loop {
        match decide_room(view, ns, pod) {
            // A budget that allows disruptions is shared out through the
            // ledger; any other reason to allow is answered.
            (Decision::Allow { reason, warning }, room) => {
                if room.is_none_or(|pdb| take_room(view, ledger, ns, &pdb, pod)) {
                    return HoldOutcome::Room { reason, warning };
                }
            }
            (Decision::Block(_), _) if wait != HoldFor::Room => return HoldOutcome::Blocked,
            (Decision::Block(_) | Decision::Recount(_), _) => {}
        }
        let recheck = (Instant::now() + RECHECK_EVERY).min(deadline);
        tokio::select! {
            r = changes.changed(), if notifier_alive => {
                // The store's task ended: only the timers wake us now.
                notifier_alive = r.is_ok();
            }
            _ = tokio::time::sleep_until(recheck) => {
                if Instant::now() >= deadline {
                    return HoldOutcome::Expired;
                }
            }
        }
    }
}

/// The answer after a hold: the allow it found; or, when it expired, the
/// caches and the apiserver read again. The live read before the hold is as
/// old as the hold by now, and a 429 rests on fresh facts only (a watch that
/// lags could hide the room the apiserver already sees).
pub async fn after_hold(
    outcome: HoldOutcome,
    view: &(impl EvictionView + Sync),
    reader: &impl LiveReader,
    blocked: (&str, &str),
    live_timeout: Duration,
) -> Decision {
    match outcome {
        HoldOutcome::Room { reason, warning } => Decision::Allow { reason, warning },
        HoldOutcome::Blocked | HoldOutcome::Expired => {
            let (ns, pod) = blocked;
            live::decide_confirmed(view, reader, ns, pod, live_timeout).await
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::SlimPod;
    use crate::webhook::eviction::tests::{blocking, pdb, pod, Fixture};
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::api::policy::v1::PodDisruptionBudget;
    use std::sync::Arc;

    /// A view the test changes while a hold waits on it; counts decisions.
    struct Shared(Mutex<Fixture>, std::sync::atomic::AtomicUsize);

    fn shared(f: Fixture) -> Shared {
        Shared(Mutex::new(f), Default::default())
    }

    impl EvictionView for Shared {
        fn freshness(&self) -> Freshness {
            self.0.lock().unwrap().freshness
        }
        fn pod(&self, ns: &str, name: &str) -> Option<Arc<SlimPod>> {
            self.1.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            self.0.lock().unwrap().pod(ns, name)
        }
        fn pdbs_in(&self, ns: &str) -> Vec<Arc<PodDisruptionBudget>> {
            self.0.lock().unwrap().pdbs_in(ns)
        }
        fn owning_deployment(&self, pod: &SlimPod) -> Option<Arc<Deployment>> {
            self.0.lock().unwrap().owning_deployment(pod)
        }
        fn namespace_in_scope(&self, ns: &str) -> bool {
            self.0.lock().unwrap().namespace_in_scope(ns)
        }
        fn pods_in(&self, ns: &str) -> Vec<Arc<SlimPod>> {
            self.0.lock().unwrap().pods_in(ns)
        }
        fn now(&self) -> k8s_openapi::jiff::Timestamp {
            self.0.lock().unwrap().now()
        }
    }

    #[tokio::test]
    async fn an_expired_hold_reads_the_apiserver_again_before_its_429() {
        use crate::webhook::eviction::LiveFacts;
        use crate::webhook::live::tests::{reason, Fake, FakeReader};
        use crate::webhook::live::LIVE_CHECK_TIMEOUT;
        use std::sync::atomic::Ordering;
        let cache = blocking();
        let facts = |pdbs: Vec<PodDisruptionBudget>| {
            Fake::Facts(Box::new(LiveFacts {
                pod: cache.pods.first().cloned(),
                pdbs,
            }))
        };
        let at = ("ns", "p");
        // The apiserver has room the caches do not show yet: allowed.
        let r = FakeReader::new(facts(vec![pdb("web", 1, 3, 4)]));
        let d = after_hold(HoldOutcome::Expired, &cache, &r, at, LIVE_CHECK_TIMEOUT).await;
        assert_eq!(
            reason(&d),
            Some(AllowReason::LiveDisagreed("budget_allows")),
            "{d:?}"
        );
        assert_eq!(r.calls.load(Ordering::SeqCst), 1);
        // It agrees: the 429, on facts read now.
        let r = FakeReader::new(facts(cache.pdbs.clone()));
        let d = after_hold(HoldOutcome::Expired, &cache, &r, at, LIVE_CHECK_TIMEOUT).await;
        assert!(matches!(d, Decision::Block(_)), "{d:?}");
        assert_eq!(r.calls.load(Ordering::SeqCst), 1);
        // The read fails: allowed (fail open).
        let r = FakeReader::new(Fake::Fails);
        let d = after_hold(HoldOutcome::Expired, &cache, &r, at, LIVE_CHECK_TIMEOUT).await;
        assert_eq!(reason(&d), Some(AllowReason::LiveCheckFailed));
        // Room found by the hold: allowed, nothing read.
        let r = FakeReader::new(Fake::Fails);
        let room = HoldOutcome::Room {
            reason: AllowReason::BudgetAllows,
            warning: None,
        };
        let d = after_hold(room, &cache, &r, at, LIVE_CHECK_TIMEOUT).await;
        assert_eq!(reason(&d), Some(AllowReason::BudgetAllows));
        assert_eq!(r.calls.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn holds_only_fresh_real_blocks_with_a_surge_that_can_help() {
        let two = Duration::from_secs(2);
        let active = SurgeState::Active { from: 3, to: 4 };
        let fresh = Freshness::Fresh;
        assert!(should_hold(two, false, fresh, &active));
        assert!(should_hold(two, false, fresh, &SurgeState::Requested));
        assert!(
            !should_hold(Duration::ZERO, false, fresh, &active),
            "0 = off"
        );
        assert!(!should_hold(two, true, fresh, &active), "dry run");
        assert!(!should_hold(two, false, Freshness::Stale, &active));
        assert!(!should_hold(two, false, Freshness::NotSynced, &active));
        let impossible = SurgeState::Impossible("maxUnavailable: 0".into());
        assert!(!should_hold(two, false, fresh, &impossible));
        // Someone's value adopted mid-surge: no room is coming from us.
        let kept = SurgeState::Kept { replicas: 3 };
        assert!(!should_hold(two, false, fresh, &kept));
    }

    #[tokio::test]
    async fn a_pdb_change_that_makes_room_ends_the_hold_at_once() {
        let view = Arc::new(shared(blocking()));
        let (tx, rx) = watch::channel(0u64);
        let started = Instant::now();
        let deadline = started + Duration::from_secs(20);
        let v = view.clone();
        let held = tokio::spawn(async move {
            let ledger = Mutex::new(RoomLedger::default());
            wait_for_room(&*v, &ledger, rx, ("ns", "p"), HoldFor::Room, deadline).await
        });
        // A change that still blocks (another PDB field) keeps it waiting.
        tokio::time::sleep(Duration::from_millis(100)).await;
        tx.send_modify(|n| *n += 1);
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(!held.is_finished());
        // The replacement became Ready: the disruption controller allows one.
        view.0.lock().unwrap().pdbs[0] = pdb("web", 1, 3, 4);
        tx.send_modify(|n| *n += 1);
        let out = held.await.unwrap();
        assert_eq!(
            out,
            HoldOutcome::Room {
                reason: AllowReason::BudgetAllows,
                warning: None
            }
        );
        // Woken by the change, not by the deadline (20 s).
        let took = started.elapsed();
        assert!(
            took >= Duration::from_millis(200) && took < Duration::from_secs(10),
            "{took:?}"
        );
    }

    #[tokio::test]
    async fn without_room_the_hold_expires_at_the_deadline() {
        let view = shared(blocking());
        let (tx, rx) = watch::channel(0u64);
        let started = Instant::now();
        let out = wait_for_room(
            &view,
            &Mutex::new(RoomLedger::default()),
            rx,
            ("ns", "p"),
            HoldFor::Room,
            started + Duration::from_millis(300),
        )
        .await;
        assert_eq!(out, HoldOutcome::Expired);
        assert!(started.elapsed() >= Duration::from_millis(300));
        drop(tx);
    }

    #[tokio::test]
    async fn room_already_there_allows_without_waiting() {
        let mut f = blocking();
        f.pdbs[0] = pdb("web", 1, 3, 4);
        let (_tx, rx) = watch::channel(0u64);
        let started = Instant::now();
        let out = wait_for_room(
            &f,
            &Mutex::new(RoomLedger::default()),
            rx,
            ("ns", "p"),
            HoldFor::Room,
            started + Duration::from_secs(20),
        )
        .await;
        assert!(matches!(out, HoldOutcome::Room { .. }));
        assert!(started.elapsed() < Duration::from_secs(10));
    }

    /// A store that stops mid-hold must not spin the loop: it decides again
    /// only on its timer and ends at its deadline.
    #[tokio::test]
    async fn a_notifier_that_goes_away_waits_out_the_deadline() {
        let view = shared(blocking());
        let (tx, rx) = watch::channel(0u64);
        drop(tx);
        let started = Instant::now();
        let out = wait_for_room(
            &view,
            &Mutex::new(RoomLedger::default()),
            rx,
            ("ns", "p"),
            HoldFor::Room,
            started + Duration::from_millis(300),
        )
        .await;
        assert_eq!(out, HoldOutcome::Expired);
        assert!(started.elapsed() >= Duration::from_millis(300));
        // One at the start, one per RECHECK_EVERY, one spare for a timer
        // that fires at the deadline.
        let decisions = view.1.load(std::sync::atomic::Ordering::SeqCst);
        let most = 2 + (300 / RECHECK_EVERY.as_millis()) as usize;
        assert!(decisions <= most, "{decisions} decisions: the loop spun");
    }

    /// `pdb("web", allowed, ..)` with these pods in `status.disruptedPods`.
    /// PDB `web` allowing `allowed` with `disrupted` listed, as the status
    /// version named after them.
    fn with_disrupted(allowed: i32, disrupted: &[&str]) -> PodDisruptionBudget {
        let mut p = pdb("web", allowed, 3, 4);
        p.metadata.resource_version = Some(format!("{allowed}{disrupted:?}"));
        if let Some(s) = p.status.as_mut() {
            s.disrupted_pods = Some(
                disrupted
                    .iter()
                    .map(|n| {
                        let t = k8s_openapi::jiff::Timestamp::UNIX_EPOCH;
                        (
                            n.to_string(),
                            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(t),
                        )
                    })
                    .collect(),
            );
        }
        p
    }

    #[test]
    fn room_is_shared_out_until_the_status_shows_the_evictions() {
        let mut l = RoomLedger::default();
        let t0 = Instant::now();
        let all = |_: &str| true;
        let two = with_disrupted(2, &[]);
        assert!(l.take("ns", &two, "a", all, t0));
        assert!(l.take("ns", &two, "b", all, t0));
        assert!(!l.take("ns", &two, "c", all, t0), "both taken");
        assert!(
            l.take("ns", &two, "b", all, t0),
            "a retry of b takes the room b took"
        );
        let mut api = pdb("api", 1, 3, 4);
        api.metadata.name = Some("api".into());
        assert!(
            l.take("ns", &api, "x", all, t0),
            "another PDB has its own room"
        );
        assert!(
            l.take("other", &two, "c", all, t0),
            "so has one of the same name in another namespace"
        );
        // The apiserver's write for a: one left, and b is still in flight.
        let after_a = with_disrupted(1, &["a"]);
        assert!(!l.take("ns", &after_a, "c", all, t0));
        // Its write for b too: nothing left.
        let after_b = with_disrupted(0, &["a", "b"]);
        assert!(!l.take("ns", &after_b, "c", all, t0));
        // The disruption controller recounts once a and b are terminating
        // (no longer in disruptedPods) and a replacement is Ready.
        let gone = |p: &str| p != "a" && p != "b";
        let recount = with_disrupted(1, &[]);
        assert!(l.take("ns", &recount, "c", gone, t0));
        assert!(!l.take("ns", &recount, "d", gone, t0), "c took it");
        // An eviction let through that never happened (another admission
        // refused it) stops counting after IN_FLIGHT_FOR.
        let later = t0 + IN_FLIGHT_FOR;
        assert!(l.take("ns", &recount, "d", gone, later));
        // Entries nobody asks about again are pruned.
        let much_later = later + IN_FLIGHT_FOR;
        for _ in 0..PRUNE_EVERY {
            l.take("ns", &api, "x", all, much_later);
        }
        assert_eq!(l.pdbs(), 1, "only api's fresh entry is left");
    }

    /// The pod watch ahead of the PDB watch: the pod let through is
    /// terminating while the cached status is still the one its room was
    /// taken from. That room is still taken until another status shows up.
    #[test]
    fn a_terminating_pod_keeps_its_room_until_the_status_is_another() {
        let mut l = RoomLedger::default();
        let t0 = Instant::now();
        let one = with_disrupted(1, &[]);
        assert!(l.take("ns", &one, "a", |_| true, t0));
        let gone = |p: &str| p != "a";
        assert!(
            !l.take("ns", &one, "b", gone, t0),
            "the status as cached has not counted a yet"
        );
        // The disruption controller's recount (a no longer listed, not
        // counted healthy) with a replacement Ready: b's turn.
        let mut recount = with_disrupted(1, &[]);
        recount.metadata.resource_version = Some("recounted".into());
        assert!(l.take("ns", &recount, "b", gone, t0));
    }

    /// An eviction held because its PDB's one disruption was taken by
    /// another let through a moment before (`q`, still in flight): edited
    /// to allow two, the PDB gives it the second at once; deleted, the
    /// eviction is allowed (no budget left to share); and the ledger's
    /// entries are per replica process, so a restarted webhook starts with
    /// none and lets the next eviction through on the status alone.
    #[tokio::test]
    async fn a_taken_room_hold_follows_the_pdb_edited_or_deleted() {
        let setup = || {
            let mut f = blocking();
            f.pods.push(pod("q", "Running", true));
            let dep = f.deployment_of["p"].clone();
            f.deployment_of.insert("q".into(), dep);
            f.pdbs[0] = pdb("web", 1, 3, 4);
            let view = Arc::new(shared(f));
            let ledger = Arc::new(Mutex::new(RoomLedger::default()));
            let room = view.0.lock().unwrap().pdbs[0].clone();
            assert!(
                take_room(&*view, &ledger, "ns", &room, "q"),
                "q let through"
            );
            assert!(
                !take_room(&*view, &ledger, "ns", &room, "p"),
                "p finds it taken"
            );
            (view, ledger)
        };
        let hold = |view: Arc<Shared>, ledger: Arc<Mutex<RoomLedger>>, rx| {
            let deadline = Instant::now() + Duration::from_secs(20);
            tokio::spawn(async move {
                wait_for_room(&*view, &ledger, rx, ("ns", "p"), HoldFor::Taken, deadline).await
            })
        };

        // Edited: maxUnavailable raised, the status allows 2.
        let (view, ledger) = setup();
        let (tx, rx) = watch::channel(0u64);
        let held = hold(view.clone(), ledger.clone(), rx);
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(!held.is_finished(), "held while q has the only room");
        view.0.lock().unwrap().pdbs[0] = pdb("web", 2, 2, 4);
        let edited = Instant::now();
        tx.send_modify(|n| *n += 1);
        assert_eq!(
            held.await.unwrap(),
            HoldOutcome::Room {
                reason: AllowReason::BudgetAllows,
                warning: None
            }
        );
        // On the edit, not because q's entry expired.
        assert!(
            edited.elapsed() < IN_FLIGHT_FOR / 2,
            "{:?}",
            edited.elapsed()
        );

        // Deleted: nothing selects the pod any more.
        let (view, ledger) = setup();
        let (tx, rx) = watch::channel(0u64);
        let held = hold(view.clone(), ledger, rx);
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(!held.is_finished());
        view.0.lock().unwrap().pdbs.clear();
        tx.send_modify(|n| *n += 1);
        assert!(matches!(
            held.await.unwrap(),
            HoldOutcome::Room {
                reason: AllowReason::NoPdb,
                ..
            }
        ));

        // Blocked: q's disruption is counted and the status allows none.
        // The hold ends at once, so that the caller signals the surge now.
        let (view, ledger) = setup();
        let (tx, rx) = watch::channel(0u64);
        let held = hold(view.clone(), ledger, rx);
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(!held.is_finished());
        view.0.lock().unwrap().pdbs[0] = pdb("web", 0, 3, 3);
        let counted = Instant::now();
        tx.send_modify(|n| *n += 1);
        assert_eq!(held.await.unwrap(), HoldOutcome::Blocked);
        assert!(counted.elapsed() < RECHECK_EVERY, "{:?}", counted.elapsed());

        // A restart: a new ledger has no entry for q.
        let (view, _) = setup();
        let room = view.0.lock().unwrap().pdbs[0].clone();
        let fresh = Mutex::new(RoomLedger::default());
        assert!(take_room(&*view, &fresh, "ns", &room, "p"));
    }

    /// Two evictions held under one PDB whose status makes room for one:
    /// one is allowed, the other waits for the next status.
    #[tokio::test]
    async fn room_for_one_allows_one_held_eviction() {
        let mut f = blocking();
        f.pods.push(pod("q", "Running", true));
        let dep = f.deployment_of["p"].clone();
        f.deployment_of.insert("q".into(), dep);
        f.pdbs[0].metadata.resource_version = Some("1".into());
        let view = Arc::new(shared(f));
        let ledger = Arc::new(Mutex::new(RoomLedger::default()));
        let (tx, rx) = watch::channel(0u64);
        let deadline = Instant::now() + Duration::from_secs(20);
        let hold = |pod: &'static str| {
            let (v, l, rx) = (view.clone(), ledger.clone(), rx.clone());
            tokio::spawn(async move {
                wait_for_room(&*v, &l, rx, ("ns", pod), HoldFor::Room, deadline).await
            })
        };
        let (hp, hq) = (hold("p"), hold("q"));
        tokio::time::sleep(Duration::from_millis(100)).await;
        let mut room = pdb("web", 1, 3, 4);
        room.metadata.resource_version = Some("2".into());
        view.0.lock().unwrap().pdbs[0] = room;
        tx.send_modify(|n| *n += 1);
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(
            usize::from(hp.is_finished()) + usize::from(hq.is_finished()),
            1,
            "exactly one of the two is allowed"
        );
        // The first eviction went through (its pod is terminating, so the
        // recount no longer lists it) and a second new pod is Ready.
        let mut more = pdb("web", 1, 3, 4);
        more.metadata.resource_version = Some("3".into());
        {
            let mut f = view.0.lock().unwrap();
            let first = if hp.is_finished() { "p" } else { "q" };
            f.pods.retain(|p| p.name() != first);
            f.pdbs[0] = more;
        }
        tx.send_modify(|n| *n += 1);
        for h in [hp, hq] {
            assert!(matches!(h.await.unwrap(), HoldOutcome::Room { .. }));
        }
    }

    /// A cache that goes stale while a request is held gives it up with the
    /// allow a stale cache always gives (behaviour.md 4.6).
    #[tokio::test]
    async fn a_cache_gone_stale_during_the_hold_allows() {
        let view = Arc::new(shared(blocking()));
        let (tx, rx) = watch::channel(0u64);
        let deadline = Instant::now() + Duration::from_secs(20);
        let v = view.clone();
        let held = tokio::spawn(async move {
            let ledger = Mutex::new(RoomLedger::default());
            wait_for_room(&*v, &ledger, rx, ("ns", "p"), HoldFor::Room, deadline).await
        });
        tokio::time::sleep(Duration::from_millis(100)).await;
        view.0.lock().unwrap().freshness = Freshness::Stale;
        tx.send_modify(|n| *n += 1);
        assert!(matches!(
            held.await.unwrap(),
            HoldOutcome::Room {
                reason: AllowReason::CacheStale,
                ..
            }
        ));
    }

    /// A recount hold (a PDB status that lags a scale-down): it ends with
    /// Blocked once the status is recounted to no room, with Room once the
    /// pods give room after all, and at the deadline still lagging.
    #[tokio::test]
    async fn a_recount_hold_ends_at_the_recount() {
        use crate::webhook::eviction::tests::pod;
        // Deployment scaled from 4 to 3; the status still counts 4 healthy.
        let lagging = || {
            let mut f = blocking();
            for n in ["q", "r", "s"] {
                f.pods.push(pod(n, "Running", true));
            }
            let mut dep = f.deployment_of["p"].clone();
            dep.spec.as_mut().unwrap().replicas = Some(3);
            f.deployment_of = f
                .pods
                .iter()
                .map(|p| (p.name().to_string(), dep.clone()))
                .collect();
            f.pdbs[0] = pdb("web", 1, 3, 4);
            f
        };
        let run = |view: Arc<Shared>, rx, ms: u64| async move {
            let deadline = Instant::now() + Duration::from_millis(ms);
            let ledger = Mutex::new(RoomLedger::default());
            wait_for_room(&*view, &ledger, rx, ("ns", "p"), HoldFor::Recount, deadline).await
        };

        // The disruption controller recounts: 3 healthy, none allowed.
        let view = Arc::new(shared(lagging()));
        let (tx, rx) = watch::channel(0u64);
        let held = tokio::spawn(run(view.clone(), rx, 20_000));
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(!held.is_finished(), "held while the status lags");
        view.0.lock().unwrap().pdbs[0] = pdb("web", 0, 3, 3);
        tx.send_modify(|n| *n += 1);
        assert_eq!(held.await.unwrap(), HoldOutcome::Blocked);

        // The Deployment was scaled up again (a new surge): the status's 4
        // healthy are all wanted. Seen by the next recheck, no PDB event.
        let view = Arc::new(shared(lagging()));
        let (_tx, rx) = watch::channel(0u64);
        let held = tokio::spawn(run(view.clone(), rx, 20_000));
        tokio::time::sleep(Duration::from_millis(100)).await;
        for d in view.0.lock().unwrap().deployment_of.values_mut() {
            d.spec.as_mut().unwrap().replicas = Some(4);
        }
        let started = Instant::now();
        assert!(matches!(held.await.unwrap(), HoldOutcome::Room { .. }));
        assert!(started.elapsed() < RECHECK_EVERY * 3);

        // Never recounted: the deadline.
        let view = Arc::new(shared(lagging()));
        let (_tx, rx) = watch::channel(0u64);
        assert_eq!(run(view, rx, 300).await, HoldOutcome::Expired);
    }
}
