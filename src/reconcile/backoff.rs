//! Per-object retry book (behaviour.md section 8: failed writes are retried
//! with backoff; one failing object never holds back the others). Pure: the
//! caller passes the clock, so the schedule is a unit test.

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Delay after the first failure; doubled on each further one.
pub const INITIAL: Duration = Duration::from_secs(1);
/// Longest delay between two attempts on one object.
pub const CAP: Duration = Duration::from_secs(300);

#[derive(Debug, Clone, Copy)]
struct Entry {
    failures: u32,
    retry_at: Instant,
}

/// Objects whose last write failed, and when each may be tried again.
/// An object not in the book is always due.
#[derive(Debug, Default)]
pub struct Backoff {
    entries: HashMap<String, Entry>,
}

/// The delay after `failures` consecutive failures (1 → INITIAL).
pub fn delay(failures: u32) -> Duration {
    let exp = failures.saturating_sub(1).min(31);
    INITIAL.saturating_mul(1u32 << exp).min(CAP)
}

impl Backoff {
    /// May `key` be written at `now`?
    pub fn due(&self, key: &str, now: Instant) -> bool {
        self.entries.get(key).is_none_or(|e| now >= e.retry_at)
    }

    /// Did the last write of `key` fail (waiting or due again)?
    pub fn failing(&self, key: &str) -> bool {
        self.entries.contains_key(key)
    }

    /// Records a failure; returns how long the object now waits.
    pub fn failed(&mut self, key: &str, now: Instant) -> Duration {
        let failures = self.entries.get(key).map_or(0, |e| e.failures) + 1;
        let wait = delay(failures);
        self.entries.insert(
            key.to_string(),
            Entry {
                failures,
                retry_at: now + wait,
            },
        );
        wait
    }

    /// A write succeeded: the next failure starts again at INITIAL.
    pub fn succeeded(&mut self, key: &str) {
        self.entries.remove(key);
    }

    /// The earliest time an object in the book becomes due (to wake up for it).
    pub fn next_retry(&self) -> Option<Instant> {
        self.entries.values().map(|e| e.retry_at).min()
    }

    /// [`Backoff::next_retry`] among the objects not due yet at `t` (those
    /// due by then were already queued).
    pub fn next_retry_after(&self, t: Instant) -> Option<Instant> {
        self.entries
            .values()
            .map(|e| e.retry_at)
            .filter(|at| *at > t)
            .min()
    }

    /// The objects whose wait is over at `now` (their namespaces are planned
    /// again even if nothing in them changed).
    pub fn due_keys(&self, now: Instant) -> impl Iterator<Item = &str> {
        self.entries
            .iter()
            .filter(move |(_, e)| now >= e.retry_at)
            .map(|(k, _)| k.as_str())
    }

    /// The namespaces of the objects whose wait is over (keys are
    /// "namespace/kind/name"): a pass plans them even if nothing in them
    /// changed, so a failed write is retried without a watch event.
    pub fn due_namespaces(&self, now: Instant) -> impl Iterator<Item = &str> {
        self.due_keys(now)
            .filter_map(|k| k.split_once('/').map(|(ns, _)| ns))
    }

    /// After a pass over `planned_ns`: forgets the objects of those
    /// namespaces it no longer planned to write (their problem went away);
    /// other namespaces' objects wait for their own pass.
    pub fn settle_pass(
        &mut self,
        planned: &std::collections::BTreeSet<String>,
        planned_ns: &std::collections::BTreeSet<String>,
    ) {
        self.retain(|k| {
            planned.contains(k)
                || k.split_once('/')
                    .is_some_and(|(ns, _)| !planned_ns.contains(ns))
        });
    }

    /// Forgets the objects of namespaces that no longer exist (`exists`
    /// false): deleted while no pass of this replica planned them (it was
    /// not leading, or a pass outlasted the deletion), their entries would
    /// stay due for good and wake the reconciler at every turn.
    pub fn forget_gone_namespaces(&mut self, exists: impl Fn(&str) -> bool) {
        self.entries
            .retain(|k, _| k.split_once('/').is_none_or(|(ns, _)| exists(ns)));
    }

    /// Forgets objects the last pass no longer planned to write: their
    /// problem went away, so a later write starts afresh.
    pub fn retain(&mut self, mut keep: impl FnMut(&str) -> bool) {
        self.entries.retain(|k, _| keep(k));
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_from_one_second_up_to_five_minutes() {
        let got: Vec<u64> = (1..=11).map(|n| delay(n).as_secs()).collect();
        assert_eq!(got, [1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300]);
        assert_eq!(delay(u32::MAX), CAP);
    }

    #[test]
    fn a_failing_object_waits_and_others_do_not() {
        let t0 = Instant::now();
        let mut b = Backoff::default();
        assert!(b.due("ns/pdb/a", t0));
        assert_eq!(b.failed("ns/pdb/a", t0), Duration::from_secs(1));
        assert!(!b.due("ns/pdb/a", t0 + Duration::from_millis(500)));
        assert!(b.due("ns/pdb/b", t0), "another object is not held back");
        assert!(b.due("ns/pdb/a", t0 + Duration::from_secs(1)));

        let t1 = t0 + Duration::from_secs(1);
        assert_eq!(b.failed("ns/pdb/a", t1), Duration::from_secs(2));
        assert!(!b.due("ns/pdb/a", t1 + Duration::from_millis(1999)));
        assert!(b.due("ns/pdb/a", t1 + Duration::from_secs(2)));
        assert_eq!(b.next_retry(), Some(t1 + Duration::from_secs(2)));
        assert_eq!(b.due_keys(t1).count(), 0);
        let due: Vec<_> = b.due_keys(t1 + Duration::from_secs(2)).collect();
        assert_eq!(due, ["ns/pdb/a"]);

        // Known failing while waiting and once due again (its write goes
        // after the others of its namespace); others are not.
        assert!(b.failing("ns/pdb/a") && !b.failing("ns/pdb/b"));

        // Success resets the schedule.
        b.succeeded("ns/pdb/a");
        assert!(b.is_empty() && !b.failing("ns/pdb/a"));
        assert_eq!(b.failed("ns/pdb/a", t1), Duration::from_secs(1));
    }

    #[test]
    fn a_namespace_with_a_due_retry_is_planned_and_unplanned_namespaces_keep_theirs() {
        let t0 = Instant::now();
        let mut b = Backoff::default();
        b.failed("a/pdb/x", t0);
        b.failed("b/status/y", t0);
        assert_eq!(b.due_namespaces(t0).count(), 0, "still waiting");
        let mut due: Vec<_> = b.due_namespaces(t0 + INITIAL).collect();
        due.sort();
        assert_eq!(due, ["a", "b"], "re-planned without any watch event");
        // A pass over "a" alone that no longer plans a/pdb/x forgets it and
        // keeps b's entry for b's own pass.
        let planned_ns = ["a".to_string()].into();
        b.settle_pass(&Default::default(), &planned_ns);
        assert!(b.due("a/pdb/x", t0));
        assert!(
            !b.due("b/status/y", t0),
            "b's backoff survives a pass over a"
        );
        // A pass over "b" that plans the object again keeps its backoff.
        let planned = ["b/status/y".to_string()].into();
        b.settle_pass(&planned, &["b".to_string()].into());
        assert_eq!(b.len(), 1);
    }

    #[test]
    fn stays_capped_under_persistent_failure() {
        let mut now = Instant::now();
        let mut b = Backoff::default();
        let mut waits = Vec::new();
        for _ in 0..20 {
            let w = b.failed("k", now);
            waits.push(w);
            now += w;
        }
        assert!(waits.iter().all(|w| *w <= CAP));
        assert_eq!(waits.last(), Some(&CAP));
    }

    #[test]
    fn objects_no_longer_planned_are_forgotten() {
        let now = Instant::now();
        let mut b = Backoff::default();
        b.failed("a", now);
        b.failed("b", now);
        b.retain(|k| k == "b");
        assert_eq!(b.len(), 1);
        assert!(b.due("a", now));
        assert!(!b.due("b", now));
    }

    #[test]
    fn entries_of_a_namespace_that_is_gone_are_forgotten() {
        let now = Instant::now();
        let mut b = Backoff::default();
        b.failed("gone/pdb/web", now);
        b.failed("here/pdb/web", now);
        let later = now + Duration::from_secs(600);
        assert_eq!(b.due_namespaces(later).count(), 2);
        b.forget_gone_namespaces(|ns| ns == "here");
        assert_eq!(b.due_namespaces(later).collect::<Vec<_>>(), ["here"]);
    }
}
