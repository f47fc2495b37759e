//! Leader election on a coordination.k8s.io Lease: every replica serves the
//! webhooks; only the holder of the Lease runs the controllers.
//!
//! Timing (client-go's defaults): lease 15 s, renew deadline 10 s, retry
//! every 2 s. Every Lease request is bounded by `Timing::call_timeout`
//! (2.5 s), and a renewal round never runs past the renew deadline. A leader
//! whose last successful renewal is `renew_deadline` old steps down at once
//! (publishes leader=false, zeroes the leader-only gauges): that is 5 s before
//! any other replica may take the Lease, so two replicas never write at once.
//!
//! Expiry never compares the holder's renewTime with our wall clock: clocks
//! of two nodes may disagree by more than a lease. A replica measures, on its
//! own monotonic clock, how long the Lease has gone unchanged since it last
//! saw it change (client-go's observedTime), so only the clocks' rates matter.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::PostParams;
use kube::Api;
use tokio::sync::watch;

use crate::metrics::Metrics;

#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    #[error(transparent)]
    Kube(#[from] kube::Error),
    #[error("Lease request timed out after {0:?}")]
    Timeout(Duration),
}

/// Durations of the election; see the module comment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    /// Written into the Lease: how long others wait after our last renewal.
    pub lease_duration: Duration,
    /// How long we keep leading without a successful renewal. Less than
    /// `lease_duration`, so we stop before anyone else may start.
    pub renew_deadline: Duration,
    /// Pause between renewal rounds (and between attempts to acquire).
    pub retry_period: Duration,
}

impl Default for Timing {
    fn default() -> Self {
        Timing {
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

impl Timing {
    /// The bound of one Lease request: a round (a read and a write) fits
    /// twice in the renew deadline, so one hung request costs one retry, not
    /// the leadership.
    pub fn call_timeout(&self) -> Duration {
        self.renew_deadline / 4
    }

    /// The timing rule: still leading at `now` only while the last successful
    /// renewal (taken at the start of its round) is younger than the renew deadline.
    pub fn leading(&self, last_renewed: Option<Instant>, now: Instant) -> bool {
        last_renewed.is_some_and(|t| now.saturating_duration_since(t) < self.renew_deadline)
    }

    /// Time left before a leader must step down (zero when not leading).
    pub fn until_deadline(&self, last_renewed: Option<Instant>, now: Instant) -> Duration {
        last_renewed.map_or(Duration::ZERO, |t| {
            (t + self.renew_deadline).saturating_duration_since(now)
        })
    }

    /// How long the next renewal round may take: while leading it ends at the
    /// deadline at the latest, so the step-down is never late.
    pub fn round_budget(&self, last_renewed: Option<Instant>, now: Instant) -> Duration {
        let round = self.call_timeout() * 2;
        if self.leading(last_renewed, now) {
            round.min(self.until_deadline(last_renewed, now))
        } else {
            round
        }
    }

    /// Pause before the next round: a leader never sleeps past its deadline.
    pub fn pause(&self, last_renewed: Option<Instant>, now: Instant) -> Duration {
        if self.leading(last_renewed, now) {
            self.retry_period
                .min(self.until_deadline(last_renewed, now))
        } else {
            self.retry_period
        }
    }

    /// The invariant the durations must keep.
    pub fn is_safe(&self) -> bool {
        self.call_timeout() < self.renew_deadline
            && self.renew_deadline < self.lease_duration
            && self.retry_period < self.renew_deadline
    }
}

#[derive(Clone)]
pub struct Election {
    pub api: Api<Lease>,
    pub name: String,
    pub identity: String,
    pub timing: Timing,
    /// Shared by clones: one replica, one view of the Lease.
    pub observed: Arc<Mutex<Observed>>,
    /// This replica's terms: bumped each time it takes the Lease from
    /// another holder (or makes it), not when it renews or takes back a
    /// Lease still in its own name. A lead lost and taken back within one
    /// term had no other leader between (see [`Term`]).
    pub term: Term,
}

/// See [`Election::term`]; shared with the surge worker.
#[derive(Debug, Clone, Default)]
pub struct Term(Arc<std::sync::atomic::AtomicU64>);

impl Term {
    pub fn get(&self) -> u64 {
        self.0.load(std::sync::atomic::Ordering::SeqCst)
    }

    fn next(&self) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// This replica's name in the Lease: POD_NAME (the downward API), else the
/// host name plus a random suffix. Never the process id: it is 1 in every
/// container, so two replicas would share it and both lead.
pub fn identity(pod_name: Option<&str>) -> String {
    let read = |path: &str| {
        std::fs::read_to_string(path)
            .ok()
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
    };
    identity_from(
        pod_name,
        read("/etc/hostname").or_else(|| std::env::var("HOSTNAME").ok()),
        read("/proc/sys/kernel/random/uuid"),
    )
}

/// The pure part of [`identity`]: `random` is a fresh UUID from the kernel,
/// or None where there is none (then the clock's nanoseconds and the pid).
pub fn identity_from(
    pod_name: Option<&str>,
    hostname: Option<String>,
    random: Option<String>,
) -> String {
    if let Some(p) = pod_name.map(str::trim).filter(|p| !p.is_empty()) {
        return p.to_string();
    }
    let host = hostname
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "eviction-autoscaler".to_string());
    let suffix: String = random
        .map(|r| {
            r.chars()
                .filter(char::is_ascii_alphanumeric)
                .take(12)
                .collect()
        })
        .filter(|s: &String| !s.is_empty())
        .unwrap_or_else(|| {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.subsec_nanos())
                .unwrap_or_default();
            format!("{:x}{:x}", std::process::id(), nanos)
        });
    format!("{host}-{suffix}")
}

/// Publishes a change of leadership. On losing it, the gauges only the
/// leader keeps up to date go to 0 at once, so no replica reports stale values.
pub fn publish(tx: &watch::Sender<bool>, metrics: &Metrics, identity: &str, leading: bool) {
    if leading == *tx.borrow() {
        return;
    }
    tracing::info!(identity, leading, "leadership changed");
    if !leading {
        metrics.reset_leader_gauges();
    }
    metrics.leader.set(i64::from(leading));
    let _ = tx.send(leading);
}

/// The Lease as this replica last saw it, and when it first saw it so (its
/// own monotonic clock).
#[derive(Debug, Default)]
pub struct Observed {
    spec: Option<LeaseSpec>,
    since: Option<Instant>,
    /// When the Lease was first found gone after it had been seen.
    gone_since: Option<Instant>,
}

impl Observed {
    /// Records what a read returned at `now`; the clock restarts only when
    /// the Lease changed (a renewal changes its renewTime).
    pub fn see(&mut self, spec: &LeaseSpec, now: Instant) {
        self.gone_since = None;
        if self.spec.as_ref() != Some(spec) {
            self.spec = Some(spec.clone());
            self.since = Some(now);
        }
    }

    /// How long the Lease has been seen unchanged at `now` (zero when never seen).
    pub fn unchanged_for(&self, now: Instant) -> Duration {
        self.since
            .map_or(Duration::ZERO, |t| now.saturating_duration_since(t))
    }

    /// The Lease is found gone at `now`: may `me` make it now? A replica
    /// that never saw one (a fresh install) makes it at once, and so does
    /// the holder it was deleted from (its lead goes on). Any other waits a
    /// lease duration from when it found it gone, as for a Lease unchanged:
    /// the holder may still lead until its next round, and a follower that
    /// made the Lease at once would lead beside it.
    pub fn may_create(&mut self, me: &str, lease_duration: Duration, now: Instant) -> bool {
        let Some(last) = &self.spec else {
            return true;
        };
        if last.holder_identity.as_deref() == Some(me) {
            return true;
        }
        let since = *self.gone_since.get_or_insert(now);
        now.saturating_duration_since(since) >= lease_duration
    }
}

/// The pure part: may `me` take or keep this lease, `unchanged_for` being how
/// long this replica has seen it as it is now?
pub fn can_hold(spec: &LeaseSpec, me: &str, unchanged_for: Duration) -> bool {
    match spec.holder_identity.as_deref() {
        None | Some("") => true,
        Some(h) if h == me => true,
        // A lease never renewed is free.
        Some(_) if spec.renew_time.is_none() && spec.acquire_time.is_none() => true,
        Some(_) => {
            let duration = u64::try_from(spec.lease_duration_seconds.unwrap_or(15)).unwrap_or(0);
            unchanged_for >= Duration::from_secs(duration)
        }
    }
}

impl Election {
    fn spec(&self, previous: Option<&LeaseSpec>, now: Timestamp) -> LeaseSpec {
        let same_holder = previous
            .and_then(|p| p.holder_identity.as_deref())
            .is_some_and(|h| h == self.identity);
        let transitions = previous.and_then(|p| p.lease_transitions).unwrap_or(0);
        LeaseSpec {
            holder_identity: Some(self.identity.clone()),
            lease_duration_seconds: Some(self.timing.lease_duration.as_secs() as i32),
            acquire_time: if same_holder {
                previous.and_then(|p| p.acquire_time.clone())
            } else {
                Some(MicroTime(now))
            },
            renew_time: Some(MicroTime(now)),
            lease_transitions: Some(if same_holder {
                transitions
            } else {
                transitions + 1
            }),
            ..Default::default()
        }
    }

    /// One Lease request, bounded by the call timeout.
    async fn call<T>(
        &self,
        f: impl Future<Output = Result<T, kube::Error>>,
    ) -> Result<T, LeaseError> {
        let limit = self.timing.call_timeout();
        match tokio::time::timeout(limit, f).await {
            Ok(r) => Ok(r?),
            Err(_) => Err(LeaseError::Timeout(limit)),
        }
    }

    /// One round: Ok(true) while we hold the lease.
    pub async fn try_hold(&self) -> Result<bool, LeaseError> {
        let now = Timestamp::now();
        match self.call(self.api.get_opt(&self.name)).await? {
            None => {
                let may = {
                    let mut seen = self.observed.lock().unwrap_or_else(|p| p.into_inner());
                    seen.may_create(&self.identity, self.timing.lease_duration, Instant::now())
                };
                if !may {
                    return Ok(false);
                }
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(self.name.clone()),
                        ..Default::default()
                    },
                    spec: Some(self.spec(None, now)),
                };
                match self
                    .call(self.api.create(&PostParams::default(), &lease))
                    .await
                {
                    Ok(_) => {
                        self.term.next();
                        Ok(true)
                    }
                    Err(LeaseError::Kube(kube::Error::Api(s))) if s.code == 409 => Ok(false),
                    Err(e) => Err(e),
                }
            }
            Some(mut lease) => {
                let spec = lease.spec.clone().unwrap_or_default();
                let unchanged_for = {
                    let mut seen = self.observed.lock().unwrap_or_else(|p| p.into_inner());
                    let at = Instant::now();
                    seen.see(&spec, at);
                    seen.unchanged_for(at)
                };
                if !can_hold(&spec, &self.identity, unchanged_for) {
                    return Ok(false);
                }
                lease.spec = Some(self.spec(Some(&spec), now));
                let taken = spec.holder_identity.as_deref() != Some(self.identity.as_str());
                // replace carries the resourceVersion: a concurrent taker wins, we lose.
                match self
                    .call(self.api.replace(&self.name, &PostParams::default(), &lease))
                    .await
                {
                    Ok(_) => {
                        if taken {
                            self.term.next();
                        }
                        Ok(true)
                    }
                    Err(LeaseError::Kube(kube::Error::Api(s))) if s.code == 409 => Ok(false),
                    Err(e) => Err(e),
                }
            }
        }
    }

    /// On shutdown: give the lease up so another replica takes over at once
    /// instead of after its expiry.
    pub async fn release(&self) {
        let Ok(Some(mut lease)) = self.call(self.api.get_opt(&self.name)).await else {
            return;
        };
        let mine = lease
            .spec
            .as_ref()
            .and_then(|s| s.holder_identity.as_deref())
            .is_some_and(|h| h == self.identity);
        if !mine {
            return;
        }
        if let Some(spec) = lease.spec.as_mut() {
            spec.holder_identity = None;
            spec.renew_time = None;
            spec.acquire_time = None;
        }
        match self
            .call(self.api.replace(&self.name, &PostParams::default(), &lease))
            .await
        {
            Ok(_) => tracing::info!(identity = %self.identity, "lease released"),
            Err(e) => tracing::warn!(error = %e, "lease not released"),
        }
    }

    /// The election while `ready()` says whether this replica's caches let
    /// its controllers act (see [`round_plan`]); `unready_bound`: how long a
    /// leader keeps the Lease while they do not.
    pub async fn run(
        self,
        tx: watch::Sender<bool>,
        metrics: Arc<Metrics>,
        ready: impl Fn() -> bool,
        unready_bound: Duration,
    ) {
        let this = &self;
        let (txr, m) = (&tx, &metrics);
        let mut unready_since: Option<Instant> = None;
        run_rounds(this.timing, &this.identity, &tx, &metrics, move || {
            let now = Instant::now();
            let ready_now = ready();
            if ready_now {
                unready_since = None;
            }
            let unready_for = now.saturating_duration_since(*unready_since.get_or_insert(now));
            let plan = round_plan(ready_now, *txr.borrow(), unready_for, unready_bound);
            async move {
                match plan {
                    RoundPlan::Hold => this.try_hold().await,
                    RoundPlan::StayOut => Ok(false),
                    RoundPlan::Release => {
                        tracing::warn!(
                            identity = %this.identity,
                            ?unready_for,
                            "watch caches not usable: stepping down and releasing the Lease for another replica"
                        );
                        // Controllers stop before anyone else may start.
                        publish(txr, m, &this.identity, false);
                        this.release().await;
                        Ok(false)
                    }
                }
            }
        })
        .await
    }
}

/// One round's course, by whether this replica's caches let its
/// controllers act. A leader whose caches cannot be used (a watch failing
/// past its bound, a list that never ends) would hold the Lease and do
/// nothing, its surges stranded while a replica with working caches
/// waits: it keeps the Lease for `bound`, then releases it. A replica
/// whose caches are not usable never takes the Lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RoundPlan {
    Hold,
    StayOut,
    Release,
}

pub fn round_plan(ready: bool, leading: bool, unready_for: Duration, bound: Duration) -> RoundPlan {
    match (ready, leading) {
        (true, _) => RoundPlan::Hold,
        (false, false) => RoundPlan::StayOut,
        (false, true) if unready_for < bound => RoundPlan::Hold,
        (false, true) => RoundPlan::Release,
    }
}

/// The renewal loop around `round` (one [`Election::try_hold`]); apart so
/// that a test can drive it with rounds that fail or hang.
async fn run_rounds<F, Fut>(
    t: Timing,
    identity: &str,
    tx: &watch::Sender<bool>,
    metrics: &Metrics,
    mut round: F,
) where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<bool, LeaseError>>,
{
    // Start of the last round that renewed the Lease.
    let mut last_renewed: Option<Instant> = None;
    loop {
        let started = Instant::now();
        // A pause ends at the deadline at the latest: step down now, not
        // after one more round that may last a whole budget past it.
        if !t.leading(last_renewed, started) {
            publish(tx, metrics, identity, false);
            last_renewed = None;
        }
        let budget = t.round_budget(last_renewed, started);
        match tokio::time::timeout(budget, round()).await {
            Ok(Ok(true)) => last_renewed = Some(started),
            // Someone else holds it: whatever we believed, we do not lead.
            Ok(Ok(false)) => last_renewed = None,
            Ok(Err(e)) => tracing::warn!(error = %e, "lease not renewed"),
            Err(_) => tracing::warn!(?budget, "lease renewal did not finish in time"),
        }
        let now = Instant::now();
        let leading = t.leading(last_renewed, now);
        publish(tx, metrics, identity, leading);
        if !leading {
            last_renewed = None;
        }
        tokio::time::sleep(t.pause(last_renewed, now)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::jiff::SignedDuration;

    fn spec(holder: Option<&str>, renewed_secs_ago: Option<i64>) -> LeaseSpec {
        let now = Timestamp::now();
        LeaseSpec {
            holder_identity: holder.map(str::to_string),
            lease_duration_seconds: Some(15),
            renew_time: renewed_secs_ago.map(|s| MicroTime(now - SignedDuration::from_secs(s))),
            ..Default::default()
        }
    }

    fn secs(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    #[test]
    fn who_may_hold() {
        assert!(can_hold(&spec(None, None), "a", secs(0)));
        assert!(can_hold(&spec(Some("a"), Some(1)), "a", secs(0)));
        assert!(
            !can_hold(&spec(Some("b"), Some(1)), "a", secs(14)),
            "b's lease is fresh"
        );
        assert!(
            can_hold(&spec(Some("b"), Some(1)), "a", secs(15)),
            "b's lease unchanged for its duration"
        );
        assert!(can_hold(&spec(Some("b"), None), "a", secs(0)));
    }

    /// The holder's renewTime, read against our wall clock, decides nothing:
    /// a holder whose clock runs a minute behind keeps its Lease while it
    /// renews; one whose clock runs an hour ahead loses it 15 s after its last
    /// renewal, not an hour later.
    #[test]
    fn expiry_follows_what_this_replica_saw_not_the_holders_clock() {
        let t0 = Instant::now();
        let mut seen = Observed::default();
        // Behind by 60 s, renewing every 2 s: each read shows a new renewTime.
        for round in 0..20u64 {
            let at = t0 + secs(2 * round);
            seen.see(&spec(Some("b"), Some(60 + round as i64)), at);
            assert!(
                !can_hold(&spec(Some("b"), Some(60)), "a", seen.unchanged_for(at)),
                "round {round}: b renews"
            );
        }
        // Ahead by an hour, then dead: the same record read again and again.
        let ahead = spec(Some("c"), Some(-3600));
        let t1 = t0 + secs(100);
        let mut seen = Observed::default();
        for s in 0..=16u64 {
            let at = t1 + secs(s);
            seen.see(&ahead, at);
            assert_eq!(
                can_hold(&ahead, "a", seen.unchanged_for(at)),
                s >= 15,
                "{s} s after the first read"
            );
        }
        // A replica that just started has seen nothing yet: it waits a whole
        // lease, however old the renewTime looks.
        let mut fresh = Observed::default();
        let old = spec(Some("b"), Some(3600));
        fresh.see(&old, t0);
        assert!(!can_hold(&old, "a", fresh.unchanged_for(t0 + secs(14))));
        assert!(can_hold(&old, "a", fresh.unchanged_for(t0 + secs(15))));
    }

    #[test]
    fn defaults_keep_the_invariant() {
        let t = Timing::default();
        assert!(t.is_safe());
        assert!(t.call_timeout() < t.renew_deadline);
        assert!(t.renew_deadline < t.lease_duration);
        assert!(!Timing {
            renew_deadline: secs(15),
            ..t
        }
        .is_safe());
    }

    #[test]
    fn a_leader_steps_down_at_the_renew_deadline_before_the_lease_expires() {
        let t = Timing::default();
        let t0 = Instant::now();
        assert!(!t.leading(None, t0), "never renewed: not leading");
        assert!(t.leading(Some(t0), t0));
        assert!(t.leading(Some(t0), t0 + secs(9)));
        assert!(!t.leading(Some(t0), t0 + secs(10)), "deadline reached");
        assert!(!t.leading(Some(t0), t0 + secs(14)));
        // Others may take over only at lease expiry, after we stopped.
        assert!(t.renew_deadline < t.lease_duration);
    }

    #[test]
    fn rounds_and_pauses_never_carry_a_leader_past_its_deadline() {
        let t = Timing::default();
        let t0 = Instant::now();
        // Fresh renewal: a full round (two bounded calls) and the retry period.
        assert_eq!(t.round_budget(Some(t0), t0), t.call_timeout() * 2);
        assert_eq!(t.pause(Some(t0), t0), t.retry_period);
        // 9 s after the last renewal: 1 s left for both.
        assert_eq!(t.round_budget(Some(t0), t0 + secs(9)), secs(1));
        assert_eq!(
            t.pause(Some(t0), t0 + Duration::from_millis(9500)),
            Duration::from_millis(500)
        );
        // Past the deadline: no longer leading, ordinary retries.
        assert_eq!(
            t.round_budget(Some(t0), t0 + secs(11)),
            t.call_timeout() * 2
        );
        assert_eq!(t.pause(None, t0), t.retry_period);
        // Every moment of a failing leader: round end <= deadline.
        for ms in (0..10_000).step_by(250) {
            let now = t0 + Duration::from_millis(ms);
            assert!(now + t.round_budget(Some(t0), now) <= t0 + t.renew_deadline);
            assert!(now + t.pause(Some(t0), now) <= t0 + t.renew_deadline);
        }
    }

    /// Rounds that each end on their own call timeout (the apiserver does
    /// not answer) leave less than a retry period before the deadline; the
    /// pause then ends exactly at the deadline. The step-down must happen
    /// there, not after one more round (seen: 2.4 s late with the defaults,
    /// tests/chaos/slow_apiserver.rs).
    #[tokio::test]
    async fn a_leader_whose_rounds_time_out_steps_down_at_the_deadline() {
        let t = Timing {
            lease_duration: Duration::from_millis(1500),
            renew_deadline: Duration::from_millis(1000),
            retry_period: Duration::from_millis(200),
        };
        let m = Metrics::new();
        let (tx, mut rx) = watch::channel(false);
        let renewed = Arc::new(std::sync::Mutex::new(None));
        let mut calls = 0;
        let r = renewed.clone();
        let rounds = run_rounds(t, "me", &tx, &m, move || {
            calls += 1;
            let first = calls == 1;
            let r = r.clone();
            async move {
                if first {
                    *r.lock().expect("lock") = Some(Instant::now());
                    return Ok(true);
                }
                // A hung request, cut by its own timeout.
                tokio::time::sleep(t.call_timeout()).await;
                Err(LeaseError::Timeout(t.call_timeout()))
            }
        });
        let stepped = async {
            let _ = rx.wait_for(|l| *l).await;
            let _ = rx.wait_for(|l| !*l).await;
            Instant::now()
        };
        let stepped = tokio::select! {
            _ = rounds => unreachable!("the loop never ends"),
            s = stepped => s,
        };
        let renewed = renewed.lock().expect("lock").expect("renewed once");
        let after = stepped.duration_since(renewed);
        assert!(
            after <= t.renew_deadline + Duration::from_millis(60),
            "stepped down {after:?} after the last renewal (deadline {:?})",
            t.renew_deadline
        );
    }

    #[test]
    fn identity_is_the_pod_name_else_host_and_random_suffix() {
        assert_eq!(
            identity_from(Some("pod-a"), Some("h".into()), None),
            "pod-a"
        );
        assert_eq!(
            identity_from(Some(""), Some("host\n".into()), Some("12ab-34cd".into())),
            "host-12ab34cd"
        );
        assert_eq!(
            identity_from(None, None, Some("ff".into())),
            "eviction-autoscaler-ff"
        );
        // Two replicas in containers without POD_NAME (same pid 1, maybe the
        // same host name) still get different identities.
        let a = identity(None);
        let b = identity(None);
        assert_ne!(a, b);
        assert!(!a.ends_with(&format!("-{}", std::process::id())));
    }

    #[test]
    fn losing_the_lead_zeroes_the_leader_only_gauges() {
        let m = Metrics::new();
        let (tx, rx) = watch::channel(false);
        publish(&tx, &m, "me", true);
        assert!(*rx.borrow());
        m.managed_pdbs.set(7);
        m.active_surges.set(2);
        m.surge_replicas.set(5);
        publish(&tx, &m, "me", false);
        assert!(!*rx.borrow());
        assert_eq!(
            (
                m.leader.get(),
                m.managed_pdbs.get(),
                m.active_surges.get(),
                m.surge_replicas.get()
            ),
            (0, 0, 0, 0)
        );
    }

    fn lease(holder: Option<&str>, renewed: bool) -> (u16, String) {
        let now = Timestamp::now();
        let spec = LeaseSpec {
            holder_identity: holder.map(str::to_string),
            lease_duration_seconds: Some(15),
            renew_time: renewed.then_some(MicroTime(now)),
            acquire_time: renewed.then_some(MicroTime(now)),
            lease_transitions: Some(1),
            ..Default::default()
        };
        let l = Lease {
            metadata: ObjectMeta {
                name: Some("ea".into()),
                namespace: Some("ns".into()),
                resource_version: Some("1".into()),
                ..Default::default()
            },
            spec: Some(spec),
        };
        (200, serde_json::to_string(&l).expect("lease json"))
    }

    /// The term moves when the Lease is made or taken from another holder
    /// (or a released one), not when it is renewed or taken back in our
    /// own name after a step-down: then no other replica led between.
    #[tokio::test]
    async fn a_term_is_a_lead_no_other_replica_interrupted() {
        use crate::client::scripted::{status, Script};
        let election = |script: &Script, term: &Term| Election {
            api: Api::namespaced(script.client(), "ns"),
            name: "ea".into(),
            identity: "me".into(),
            timing: Timing::default(),
            observed: Default::default(),
            term: term.clone(),
        };
        let term = Term::default();
        for (answers, held, moved) in [
            // Made: a new term.
            (vec![status(404), lease(Some("me"), true)], true, true),
            // Renewed, or taken back in our name after a step-down.
            (
                vec![lease(Some("me"), true), lease(Some("me"), true)],
                true,
                false,
            ),
            // Released by another replica, then taken: a new term.
            (
                vec![lease(None, false), lease(Some("me"), true)],
                true,
                true,
            ),
            // Another's, never renewed (free), taken: a new term.
            (
                vec![lease(Some("other"), false), lease(Some("me"), true)],
                true,
                true,
            ),
            // Another's, fresh: not ours, no term.
            (vec![lease(Some("other"), true)], false, false),
            // Taken back in our name, but the write lost to another taker.
            (vec![lease(Some("me"), true), status(409)], false, false),
        ] {
            let script = Script::new(&answers);
            let before = term.get();
            let r = election(&script, &term).try_hold().await;
            assert_eq!(r.ok(), Some(held), "{answers:?}");
            assert_eq!(term.get() > before, moved, "{answers:?}");
        }
    }

    #[test]
    fn a_replica_whose_caches_cannot_be_used_leaves_the_lease_to_others() {
        let b = secs(30);
        assert_eq!(round_plan(true, false, secs(0), b), RoundPlan::Hold);
        assert_eq!(round_plan(true, true, secs(0), b), RoundPlan::Hold);
        assert_eq!(
            round_plan(false, false, secs(0), b),
            RoundPlan::StayOut,
            "never taken unready"
        );
        assert_eq!(round_plan(false, false, secs(99), b), RoundPlan::StayOut);
        assert_eq!(
            round_plan(false, true, secs(29), b),
            RoundPlan::Hold,
            "a short failure"
        );
        assert_eq!(round_plan(false, true, secs(30), b), RoundPlan::Release);
    }

    /// A Lease deleted under its holder: the holder makes it again at once,
    /// a follower that had seen it waits a lease duration (the holder may
    /// still lead until its next round), a replica that never saw one makes
    /// it at once (a fresh install).
    #[test]
    fn a_deleted_lease_is_made_again_by_its_holder_first() {
        let t0 = Instant::now();
        let held_by = |h: &str| LeaseSpec {
            holder_identity: Some(h.into()),
            ..Default::default()
        };
        let mut fresh = Observed::default();
        assert!(fresh.may_create("b", secs(15), t0));
        let mut holder = Observed::default();
        holder.see(&held_by("a"), t0);
        assert!(holder.may_create("a", secs(15), t0 + secs(1)));
        let mut follower = Observed::default();
        follower.see(&held_by("a"), t0);
        assert!(!follower.may_create("b", secs(15), t0 + secs(1)));
        assert!(!follower.may_create("b", secs(15), t0 + secs(15)));
        assert!(follower.may_create("b", secs(15), t0 + secs(16)));
        // Seen again meanwhile: the wait starts over when it goes again.
        follower.see(&held_by("a"), t0 + secs(17));
        assert!(!follower.may_create("b", secs(15), t0 + secs(18)));
    }
}
