//! The durable signal's timestamps read on this replica's clock.
//!
//! `spec.lastEviction.evictionTime` is written with the wall clock of the
//! replica that denied the eviction (or by anyone who edits the object).
//! Read as is, a writer's clock ahead of ours (or a hand-written time in
//! the future) keeps the signal fresh until that time: a surge stranded
//! for as long as the skew. A writer's clock behind ours by more than the
//! cooldown makes every signal look expired: no surge for the evictions a
//! follower denies. So the leader ages each value from when it saw it:
//! - a value seen for the first time on an object it did not know (its
//!   start, a new object) is as old as its timestamp says, never younger
//!   than 0 (a time in the future is "now");
//! - a value that replaced another on a known object was written since this
//!   replica last saw the old one (a replica writes within [`FRESH`] of the
//!   denial), so it is at most that long ago plus [`FRESH`] old, whatever
//!   its timestamp says: news when this replica looks every second, its
//!   own age after a long gap (a replica that did not lead meanwhile);
//! - from then on it ages on this replica's monotonic clock.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::{SignedDuration, Timestamp};

use crate::crd::EvictionAutoScaler;

/// The most a new `lastEviction` can be old when a replica sees it change:
/// the writer coalesces to one write per 5 s, retries a missing object for
/// up to 4 s, and the watch adds its lag.
pub const FRESH: Duration = Duration::from_secs(15);

/// What this replica saw of one EvictionAutoScaler's `lastEviction`.
struct Seen {
    value: Option<Timestamp>,
    /// When the value was first seen, and its age then.
    at: Instant,
    age_then: Duration,
    /// The last [`SignalClock::localize`] that saw the object, and when.
    pass: u64,
    last_seen: Instant,
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
    /// `wall_now` minus its age on this replica's clock (see the module),
    /// so the planner's wall-clock arithmetic reads ages this replica can
    /// vouch for. Objects whose time needs no change are not copied;
    /// objects no longer present are forgotten.
    pub fn localize(
        &mut self,
        eas: &mut [Arc<EvictionAutoScaler>],
        wall_now: Timestamp,
        now: Instant,
    ) {
        self.pass += 1;
        for e in eas.iter_mut() {
            let value = e
                .spec
                .last_eviction
                .as_ref()
                .and_then(|l| l.eviction_time.as_ref())
                .map(|t| t.0);
            let age = self.age(key_of(e), value, wall_now, now);
            let (Some(value), Some(age)) = (value, age) else {
                continue;
            };
            let local = SignedDuration::try_from(age)
                .ok()
                .and_then(|a| wall_now.checked_sub(a).ok())
                .unwrap_or(wall_now);
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
        wall_now: Timestamp,
        now: Instant,
    ) -> Option<Duration> {
        let pass = self.pass;
        let mut since_seen = None;
        if let Some(s) = self.seen.get_mut(key.as_ref()) {
            since_seen = Some(now.saturating_duration_since(s.last_seen));
            s.pass = pass;
            s.last_seen = now;
            if s.value == value {
                return value.map(|_| s.age_then + now.saturating_duration_since(s.at));
            }
        }
        // A time in the future is read as now.
        let stamped =
            value.map(|t| Duration::try_from(wall_now.duration_since(t)).unwrap_or(Duration::ZERO));
        let age_then = match (stamped, since_seen) {
            (Some(a), Some(gap)) => a.min(gap + FRESH),
            (Some(a), None) => a,
            (None, _) => Duration::ZERO,
        };
        self.seen.insert(
            key.into_owned(),
            Seen {
                value,
                at: now,
                age_then,
                pass,
                last_seen: now,
            },
        );
        stamped.map(|_| age_then)
    }
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

    /// Localizes one object seen at `wall` / `now` and returns its time.
    fn look(
        c: &mut SignalClock,
        e: Arc<EvictionAutoScaler>,
        wall: Timestamp,
        now: Instant,
    ) -> Option<Timestamp> {
        let mut v = vec![e];
        c.localize(&mut v, wall, now);
        time_of(&v[0])
    }

    #[test]
    fn a_time_on_our_clock_is_read_as_written() {
        let (wall, now) = (Timestamp::now(), Instant::now());
        let mut c = SignalClock::default();
        let t = wall - secs(20);
        let e = eas("web", Some(t));
        let mut v = vec![e.clone()];
        c.localize(&mut v, wall, now);
        assert!(Arc::ptr_eq(&v[0], &e), "not copied when nothing changes");
        // Ten seconds later on both clocks: still the same instant.
        let later = look(&mut c, e, wall + secs(10), now + Duration::from_secs(10));
        assert_eq!(later, Some(t));
        assert_eq!(look(&mut c, eas("none", None), wall, now), None);
    }

    /// A writer's clock a day ahead (or a hand-edited time): fresh at first
    /// sight, then it ages here and passes the cooldown like any other.
    #[test]
    fn a_time_in_the_future_ages_from_when_it_was_seen() {
        let (wall, now) = (Timestamp::now(), Instant::now());
        let mut c = SignalClock::default();
        let future = wall + secs(86_400);
        assert_eq!(
            look(&mut c, eas("web", Some(future)), wall, now),
            Some(wall)
        );
        let later = wall + secs(90);
        let t = look(
            &mut c,
            eas("web", Some(future)),
            later,
            now + Duration::from_secs(90),
        );
        assert_eq!(t, Some(wall), "90 s old, not a day younger than now");
    }

    /// A writer's clock ten minutes behind: its new value is news all the
    /// same (at most FRESH older than the last look), while a value already
    /// there at start is as old as it says.
    #[test]
    fn a_new_value_on_a_known_object_is_at_most_fresh_old() {
        let (wall, now) = (Timestamp::now(), Instant::now());
        let mut c = SignalClock::default();
        let old = wall - secs(3_600);
        assert_eq!(
            look(&mut c, eas("web", Some(old)), wall, now),
            Some(old),
            "known at start: its own age"
        );
        let behind = wall - secs(600);
        let t = look(
            &mut c,
            eas("web", Some(behind)),
            wall + secs(1),
            now + Duration::from_secs(1),
        );
        // Seen 1 s before: written at most 1 s + FRESH ago.
        assert_eq!(t, Some(wall + secs(1) - secs(1 + FRESH.as_secs() as i64)));
        // A value written on a right clock keeps its own, smaller age.
        let right = wall + secs(1);
        let t = look(
            &mut c,
            eas("web", Some(right)),
            wall + secs(3),
            now + Duration::from_secs(3),
        );
        assert_eq!(t, Some(right));
        // The first lastEviction on an object known without one is news too.
        assert_eq!(look(&mut c, eas("api", None), wall, now), None);
        let t = look(
            &mut c,
            eas("api", Some(behind)),
            wall + secs(2),
            now + Duration::from_secs(2),
        );
        assert_eq!(t, Some(wall + secs(2) - secs(2 + FRESH.as_secs() as i64)));
    }

    /// A replica that did not look for an hour (it did not lead) cannot
    /// tell when a value written meanwhile was written: it reads it at its
    /// own age, bounded by the gap, not as news.
    #[test]
    fn a_value_changed_while_not_looking_is_as_old_as_the_gap_allows() {
        let (wall, now) = (Timestamp::now(), Instant::now());
        let mut c = SignalClock::default();
        assert_eq!(look(&mut c, eas("web", None), wall, now), None);
        let hour = Duration::from_secs(3_600);
        let written = wall + secs(60);
        let t = look(
            &mut c,
            eas("web", Some(written)),
            wall + secs(3_600),
            now + hour,
        );
        assert_eq!(t, Some(written), "an hour-old value is not news");
        // A clock ten minutes behind, after a 30 s gap: at most 45 s old.
        let t = look(
            &mut c,
            eas("web", Some(wall - secs(600))),
            wall + secs(3_630),
            now + hour + Duration::from_secs(30),
        );
        assert_eq!(
            t,
            Some(wall + secs(3_630) - secs(30 + FRESH.as_secs() as i64))
        );
    }

    #[test]
    fn objects_gone_are_forgotten() {
        let (wall, now) = (Timestamp::now(), Instant::now());
        let mut c = SignalClock::default();
        let mut v = vec![eas("a", Some(wall)), eas("b", None)];
        c.localize(&mut v, wall, now);
        assert_eq!(c.seen.len(), 2);
        let mut v = vec![eas("b", None)];
        c.localize(&mut v, wall, now);
        assert_eq!(c.seen.len(), 1);
        // Back again: a new object, read at its own age.
        let old = wall - secs(600);
        assert_eq!(look(&mut c, eas("a", Some(old)), wall, now), Some(old));
    }
}
