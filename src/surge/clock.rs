//! The durable signal's timestamps read on this replica's clock.
//!
//! `spec.lastEviction.evictionTime` is written with the wall clock of the
//! replica that denied the eviction (or by anyone who edits the object).
//! Read as is, a writer's clock ahead of ours (or a hand-written time in
//! the future) keeps the signal fresh until that time: a surge stranded
//! for as long as the skew. A writer's clock behind ours by more than the
//! cooldown makes every signal look expired: no surge for the evictions a
//! follower denies. So the leader ages each value from when it saw it:
//! - a value that replaced another on a known object was written since
//!   this replica last saw the old one in a current store, so it is taken
//!   as at most that long old (the gap), whatever its time says: news when
//!   this replica looks every second, its own age after a gap (a replica
//!   that did not lead, or a watch that was down). The stamp is taken at
//!   the denial and written within [`FRESH`], so this can read it up to
//!   [`FRESH`] younger than it is (a surge held that much longer) or up to
//!   the gap older (a second while leading). Read as "gap plus
//!   [`FRESH`]", the denial of a follower whose clock is behind looked
//!   older than a cooldown of [`FRESH`] or less, and each one started a
//!   surge that the next look reverted;
//! - a value seen first on an object this replica did not know (its start,
//!   a new object) is as old as its time says. A time up to [`FRESH`]
//!   ahead is now; one further ahead cannot be vouched for and counts as
//!   expired (the next denial writes a new value, which is news);
//! - from then on it ages on this replica's monotonic clock.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::{SignedDuration, Timestamp};

use crate::crd::EvictionAutoScaler;

/// The most a new `lastEviction` can be older than its write reaching the
/// watch: its stamp is taken at the denial, and the write is retried for up
/// to 4 s while the object does not exist yet.
pub const FRESH: Duration = Duration::from_secs(5);

/// The age of a value whose age no one can vouch for: older than any cooldown.
const EXPIRED: Duration = Duration::from_secs(365 * 24 * 3600);

/// What this replica saw of one EvictionAutoScaler's `lastEviction`.
struct Seen {
    value: Option<Timestamp>,
    /// When the value was first seen, and its age then.
    at: Instant,
    age_then: Duration,
    /// The last [`SignalClock::localize`] that saw the object.
    pass: u64,
    /// The last time it was seen in a current store.
    last_seen: Instant,
}

/// One look at the EvictionAutoScalers.
#[derive(Clone, Copy)]
pub struct Look {
    pub wall_now: Timestamp,
    pub now: Instant,
    /// The store's watch works now: what it shows is current.
    pub current: bool,
    /// Ages past this matter to no decision (the signal window): a value
    /// past it both as written and on this clock is left as written.
    pub window: Duration,
}

/// Per EvictionAutoScaler (by uid: a name used again is a new object), the
/// value last seen.
#[derive(Default)]
pub struct SignalClock {
    seen: HashMap<String, Seen>,
    pass: u64,
}

impl SignalClock {
    /// Rewrites the `evictionTime` of each EvictionAutoScaler in `eas` to
    /// the look's wall time minus its age on this replica's clock (see the
    /// module), so the planner's wall-clock arithmetic reads ages this
    /// replica can vouch for. Objects whose time needs no change are not
    /// copied; objects no longer present are forgotten.
    pub fn localize(&mut self, eas: &mut [Arc<EvictionAutoScaler>], look: Look) {
        self.pass += 1;
        for e in eas.iter_mut() {
            let value = e
                .spec
                .last_eviction
                .as_ref()
                .and_then(|l| l.eviction_time.as_ref())
                .map(|t| t.0);
            let age = self.age(key_of(e), value, look);
            let (Some(value), Some(age)) = (value, age) else {
                continue;
            };
            let written_age = age_at(look.wall_now, value);
            if age >= look.window && written_age >= look.window {
                continue;
            }
            let local = SignedDuration::try_from(age)
                .ok()
                .and_then(|a| look.wall_now.checked_sub(a).ok())
                .unwrap_or(Timestamp::MIN);
            // The wall and monotonic clocks drift apart by microseconds:
            // a value within a second of its reading stays as written (no
            // copy of the object on every pass).
            if local.duration_since(value).abs() >= SignedDuration::from_secs(1) {
                let mut copy = EvictionAutoScaler::clone(e);
                if let Some(l) = copy.spec.last_eviction.as_mut() {
                    l.eviction_time = Some(Time(local));
                }
                *e = Arc::new(copy);
            }
        }
        let pass = self.pass;
        self.seen.retain(|_, s| s.pass == pass);
    }

    /// The age of `value` on `key` now, remembering it.
    fn age(
        &mut self,
        key: std::borrow::Cow<'_, str>,
        value: Option<Timestamp>,
        look: Look,
    ) -> Option<Duration> {
        let (pass, now) = (self.pass, look.now);
        let mut gap = None;
        let mut last_seen = now;
        if let Some(s) = self.seen.get_mut(key.as_ref()) {
            gap = Some(now.saturating_duration_since(s.last_seen));
            s.pass = pass;
            if look.current {
                s.last_seen = now;
            }
            if s.value == value {
                return value.map(|_| s.age_then + now.saturating_duration_since(s.at));
            }
            last_seen = s.last_seen;
        }
        let age_then = value.map_or(Duration::ZERO, |t| {
            let stamped = age_at(look.wall_now, t);
            match gap {
                Some(gap) => stamped.min(gap),
                // How far ahead of now `t` is.
                None if age_at(t, look.wall_now) > FRESH => EXPIRED,
                None => stamped,
            }
        });
        self.seen.insert(
            key.into_owned(),
            Seen {
                value,
                at: now,
                age_then,
                pass,
                last_seen,
            },
        );
        value.map(|_| age_then)
    }
}

/// How long before `wall_now` the time `t` is; 0 for a time in the future.
fn age_at(wall_now: Timestamp, t: Timestamp) -> Duration {
    Duration::try_from(wall_now.duration_since(t)).unwrap_or(Duration::ZERO)
}

/// The object's uid; its namespace and name when it has none (tests).
fn key_of(e: &EvictionAutoScaler) -> std::borrow::Cow<'_, str> {
    match e.metadata.uid.as_deref() {
        Some(uid) => uid.into(),
        None => format!(
            "{}/{}",
            e.metadata.namespace.as_deref().unwrap_or_default(),
            e.metadata.name.as_deref().unwrap_or_default()
        )
        .into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::{EvictionAutoScalerSpec, LastEviction};

    const WINDOW: Duration = Duration::from_secs(120);

    fn eas(name: &str, at: Option<Timestamp>) -> Arc<EvictionAutoScaler> {
        let mut e = EvictionAutoScaler::new(
            name,
            EvictionAutoScalerSpec {
                target_name: name.into(),
                target_kind: "deployment".into(),
                last_eviction: at.map(|t| LastEviction {
                    pod_name: format!("{name}-abc-1"),
                    eviction_time: Some(Time(t)),
                }),
            },
        );
        e.metadata.namespace = Some("ns".into());
        Arc::new(e)
    }

    fn time_of(e: &EvictionAutoScaler) -> Option<Timestamp> {
        e.spec
            .last_eviction
            .as_ref()
            .and_then(|l| l.eviction_time.as_ref())
            .map(|t| t.0)
    }

    fn secs(n: i64) -> SignedDuration {
        SignedDuration::from_secs(n)
    }

    /// The clocks of a test: wall time and monotonic time `n` s after its start.
    struct Clocks(Timestamp, Instant);

    impl Clocks {
        fn at(&self, n: i64) -> Look {
            Look {
                wall_now: self.0 + secs(n),
                now: self.1 + Duration::from_secs(n.unsigned_abs()),
                current: true,
                window: WINDOW,
            }
        }
    }

    fn start() -> Clocks {
        Clocks(Timestamp::now(), Instant::now())
    }

    /// Localizes one object at `look` and returns it.
    fn look_at(
        c: &mut SignalClock,
        e: Arc<EvictionAutoScaler>,
        look: Look,
    ) -> Arc<EvictionAutoScaler> {
        let mut v = vec![e];
        c.localize(&mut v, look);
        v.remove(0)
    }

    fn look(c: &mut SignalClock, e: Arc<EvictionAutoScaler>, look: Look) -> Option<Timestamp> {
        time_of(&look_at(c, e, look))
    }

    #[test]
    fn a_time_on_our_clock_is_read_as_written() {
        let t0 = start();
        let mut c = SignalClock::default();
        let t = t0.0 - secs(20);
        let e = eas("web", Some(t));
        assert!(
            Arc::ptr_eq(&look_at(&mut c, e.clone(), t0.at(0)), &e),
            "not copied when nothing changes"
        );
        // Ten seconds later on both clocks: still the same instant.
        assert_eq!(look(&mut c, e, t0.at(10)), Some(t));
        assert_eq!(look(&mut c, eas("none", None), t0.at(10)), None);
    }

    /// A writer's clock a day ahead (or a hand edit) on an object this
    /// replica knows: news now, then it ages here and passes the cooldown
    /// like any other signal.
    #[test]
    fn a_time_in_the_future_written_while_looking_ages_from_when_it_was_seen() {
        let t0 = start();
        let mut c = SignalClock::default();
        assert_eq!(look(&mut c, eas("web", None), t0.at(0)), None);
        let future = t0.0 + secs(86_400);
        assert_eq!(
            look(&mut c, eas("web", Some(future)), t0.at(1)),
            Some(t0.0 + secs(1))
        );
        assert_eq!(
            look(&mut c, eas("web", Some(future)), t0.at(91)),
            Some(t0.0 + secs(1)),
            "90 s old, not a day younger than now"
        );
    }

    /// Found at start (a failover, a restart): a time far ahead cannot be
    /// vouched for and counts as expired, not as a fresh signal after every
    /// change of leader; one a few seconds ahead (a clock slightly ahead) is now.
    #[test]
    fn a_time_far_ahead_found_at_start_is_expired() {
        let t0 = start();
        let mut c = SignalClock::default();
        let far = look(&mut c, eas("web", Some(t0.0 + secs(86_400))), t0.at(0)).unwrap();
        assert!(
            far < t0.0 - secs(WINDOW.as_secs() as i64),
            "expired: {far} at {}",
            t0.0
        );
        assert_eq!(
            look(&mut c, eas("api", Some(t0.0 + secs(3))), t0.at(0)),
            Some(t0.0)
        );
    }

    /// A writer's clock ten minutes behind: its new value is news all the
    /// same (no older than the last look), while a value already there at
    /// start is as old as it says.
    #[test]
    fn a_new_value_on_a_known_object_is_no_older_than_the_last_look() {
        let t0 = start();
        let mut c = SignalClock::default();
        let old = t0.0 - secs(3_600);
        assert_eq!(
            look(&mut c, eas("web", Some(old)), t0.at(0)),
            Some(old),
            "known at start: its own age"
        );
        let behind = t0.0 - secs(600);
        // Seen 1 s before: written since, read as 1 s old.
        let t = look(&mut c, eas("web", Some(behind)), t0.at(1));
        assert_eq!(t, Some(t0.0));
        // A value written on a right clock keeps its own, smaller age.
        let right = t0.0 + secs(2);
        assert_eq!(look(&mut c, eas("web", Some(right)), t0.at(3)), Some(right));
        // The first lastEviction on an object known without one is news too.
        assert_eq!(look(&mut c, eas("api", None), t0.at(0)), None);
        let t = look(&mut c, eas("api", Some(behind)), t0.at(2));
        assert_eq!(t, Some(t0.0));
    }

    /// A replica that did not look for an hour (it did not lead), or whose
    /// store was not current (its watch down), cannot tell when a value
    /// written meanwhile was written: it reads it at its own age, bounded
    /// by the gap since its last look at a current store, not as news.
    #[test]
    fn a_value_changed_while_not_looking_is_as_old_as_the_gap_allows() {
        let t0 = start();
        let mut c = SignalClock::default();
        assert_eq!(look(&mut c, eas("web", None), t0.at(0)), None);
        let written = t0.0 + secs(60);
        assert_eq!(
            look(&mut c, eas("web", Some(written)), t0.at(3_600)),
            Some(written),
            "an hour-old value is not news"
        );
        // A clock ten minutes behind, after a 30 s gap: read as 30 s old.
        let t = look(&mut c, eas("web", Some(t0.0 - secs(600))), t0.at(3_630));
        assert_eq!(t, Some(t0.0 + secs(3_600)));

        // Looks at a store whose watch is down do not count as looks.
        assert_eq!(look(&mut c, eas("api", None), t0.at(0)), None);
        for n in 1..600 {
            let mut frozen = t0.at(n);
            frozen.current = false;
            assert_eq!(look(&mut c, eas("api", None), frozen), None);
        }
        let written = t0.0 + secs(60);
        assert_eq!(
            look(&mut c, eas("api", Some(written)), t0.at(600)),
            Some(written),
            "written 540 s before the watch came back: not news"
        );
    }

    /// Ages past the window matter to no decision: such a value is not
    /// copied on every pass, whichever clock it was read on.
    #[test]
    fn a_value_past_the_window_is_left_as_written() {
        let t0 = start();
        let mut c = SignalClock::default();
        let e = eas("web", Some(t0.0 - secs(600)));
        assert!(Arc::ptr_eq(&look_at(&mut c, e.clone(), t0.at(0)), &e));
        // News from a clock ten minutes behind: copied while it counts...
        let behind = eas("web", Some(t0.0 - secs(590)));
        assert!(!Arc::ptr_eq(
            &look_at(&mut c, behind.clone(), t0.at(10)),
            &behind
        ));
        // ... and no longer once past the window on both clocks.
        let after = t0.at(10 + WINDOW.as_secs() as i64);
        assert!(Arc::ptr_eq(
            &look_at(&mut c, behind.clone(), after),
            &behind
        ));
    }

    #[test]
    fn objects_gone_are_forgotten() {
        let t0 = start();
        let mut c = SignalClock::default();
        let mut v = vec![eas("a", Some(t0.0)), eas("b", None)];
        c.localize(&mut v, t0.at(0));
        assert_eq!(c.seen.len(), 2);
        let mut v = vec![eas("b", None)];
        c.localize(&mut v, t0.at(0));
        assert_eq!(c.seen.len(), 1);
        // Back again: a new object, read at its own age.
        let old = t0.0 - secs(600);
        assert_eq!(look(&mut c, eas("a", Some(old)), t0.at(0)), Some(old));
    }
}
