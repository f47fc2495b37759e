//! Which namespaces the reconciler plans next, and when (pure: the caller
//! passes the clock, so the rules are unit tests).
//!
//! A namespace waits in a queue until a job may start for it, one job per
//! namespace at a time: a namespace marked while its job runs waits for that
//! job to end. Namespaces marked by a change (a watch event, a backoff that
//! is over, a job that ran out of its share) come before those of the
//! resync sweep. A job counts against [`Limits::fast`] only for its first
//! [`Limits::slow_after`]: a namespace whose writes hang (an admission
//! webhook there that never answers, each write waiting for its timeout)
//! keeps its job, not a slot, so it holds back no other namespace (a
//! step-aside among them). [`Limits::total`] bounds all jobs at once.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Jobs younger than `slow_after` running at once.
    pub fast: usize,
    /// Jobs running at once, slow ones included.
    pub total: usize,
    /// Age after which a job no longer holds a slot of `fast`.
    pub slow_after: Duration,
}

/// Where a queued namespace came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// A change: served first.
    Marked,
    /// The resync sweep.
    Sweep,
}

#[derive(Debug)]
pub struct Schedule {
    limits: Limits,
    marked: VecDeque<String>,
    /// May hold names no longer queued as [`Origin::Sweep`] (marked since,
    /// or started): skipped when reached.
    sweep: VecDeque<String>,
    queued: HashMap<String, Origin>,
    /// Namespace → when its job started.
    running: HashMap<String, Instant>,
}

impl Schedule {
    pub fn new(limits: Limits) -> Self {
        Schedule {
            limits,
            marked: VecDeque::new(),
            sweep: VecDeque::new(),
            queued: HashMap::new(),
            running: HashMap::new(),
        }
    }

    /// `ns` changed: queued among the marked (moved there from the sweep).
    pub fn mark(&mut self, ns: &str) {
        match self.queued.get(ns) {
            Some(Origin::Marked) => {}
            _ => {
                self.queued.insert(ns.to_string(), Origin::Marked);
                self.marked.push_back(ns.to_string());
            }
        }
    }

    /// The resync: every namespace of `all` not queued yet, after the marked.
    pub fn sweep<'a>(&mut self, all: impl IntoIterator<Item = &'a str>) {
        for ns in all {
            if !self.queued.contains_key(ns) {
                self.queued.insert(ns.to_string(), Origin::Sweep);
                self.sweep.push_back(ns.to_string());
            }
        }
    }

    fn fast_running(&self, now: Instant) -> usize {
        self.running
            .values()
            .filter(|t| now.saturating_duration_since(**t) < self.limits.slow_after)
            .count()
    }

    fn has_room(&self, now: Instant) -> bool {
        self.fast_running(now) < self.limits.fast && self.running.len() < self.limits.total
    }

    /// Whether [`Schedule::start`] would start a job at `now`.
    pub fn startable(&self, now: Instant) -> bool {
        self.has_room(now) && self.queued.keys().any(|ns| !self.running.contains_key(ns))
    }

    /// Takes the namespaces whose job starts at `now` (with where each came
    /// from), as many as the limits leave room for, in queue order. A
    /// namespace whose job still runs stays queued, in its place.
    pub fn start(&mut self, now: Instant) -> Vec<(String, Origin)> {
        let mut out = Vec::new();
        let mut fast = self.fast_running(now);
        for origin in [Origin::Marked, Origin::Sweep] {
            let mut kept = VecDeque::new();
            loop {
                if fast >= self.limits.fast || self.running.len() >= self.limits.total {
                    break;
                }
                let queue = match origin {
                    Origin::Marked => &mut self.marked,
                    Origin::Sweep => &mut self.sweep,
                };
                let Some(ns) = queue.pop_front() else {
                    break;
                };
                if self.queued.get(&ns) != Some(&origin) {
                    continue; // a stale sweep entry: marked since, or started
                }
                if self.running.contains_key(&ns) {
                    kept.push_back(ns);
                    continue;
                }
                self.queued.remove(&ns);
                self.running.insert(ns.clone(), now);
                fast += 1;
                out.push((ns, origin));
            }
            let queue = match origin {
                Origin::Marked => &mut self.marked,
                Origin::Sweep => &mut self.sweep,
            };
            while let Some(ns) = kept.pop_back() {
                queue.push_front(ns);
            }
        }
        out
    }

    /// The job of `ns` ended.
    pub fn finished(&mut self, ns: &str) {
        self.running.remove(ns);
    }

    /// When a slot of [`Limits::fast`] frees without a job ending (the
    /// youngest of the full slots turns slow), if a queued namespace waits
    /// for one.
    pub fn next_free(&self, now: Instant) -> Option<Instant> {
        let waiting = self.queued.keys().any(|ns| !self.running.contains_key(ns));
        if !waiting || self.running.len() >= self.limits.total || self.has_room(now) {
            return None;
        }
        self.running
            .values()
            .filter(|t| now.saturating_duration_since(**t) < self.limits.slow_after)
            .map(|t| *t + self.limits.slow_after)
            .min()
    }

    pub fn is_running(&self, ns: &str) -> bool {
        self.running.contains_key(ns)
    }

    /// Namespaces queued (their job not started).
    pub fn queued(&self) -> usize {
        self.queued.len()
    }

    /// Leadership lost: nothing queued, no job (the caller drops them).
    pub fn clear(&mut self) {
        self.marked.clear();
        self.sweep.clear();
        self.queued.clear();
        self.running.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: Limits = Limits {
        fast: 2,
        total: 3,
        slow_after: Duration::from_secs(2),
    };

    fn names(started: &[(String, Origin)]) -> Vec<&str> {
        started.iter().map(|(n, _)| n.as_str()).collect()
    }

    #[test]
    fn marked_namespaces_go_before_the_sweep_and_each_is_queued_once() {
        let mut s = Schedule::new(Limits { fast: 10, ..LIMITS });
        let t = Instant::now();
        s.sweep(["a", "b", "c"]);
        s.mark("c");
        s.mark("d");
        s.mark("d");
        s.sweep(["a", "d", "e"]);
        assert_eq!(s.queued(), 5);
        let started = s.start(t);
        assert_eq!(names(&started), ["c", "d", "a"], "the limit of 3 jobs");
        let origins: Vec<Origin> = started.iter().map(|(_, o)| *o).collect();
        assert_eq!(origins, [Origin::Marked, Origin::Marked, Origin::Sweep]);
        s.finished("c");
        s.finished("d");
        let started = s.start(t);
        assert_eq!(names(&started), ["b", "e"]);
        assert!(s.start(t).is_empty() && s.queued() == 0);
    }

    #[test]
    fn a_namespace_marked_while_its_job_runs_waits_for_it_in_its_place() {
        let mut s = Schedule::new(LIMITS);
        let t = Instant::now();
        s.mark("a");
        assert_eq!(names(&s.start(t)), ["a"]);
        s.mark("a");
        s.mark("b");
        assert!(s.is_running("a"));
        assert_eq!(names(&s.start(t)), ["b"], "a waits for its job");
        assert!(!s.startable(t), "b started, a still runs");
        s.finished("a");
        assert!(s.startable(t));
        assert_eq!(names(&s.start(t)), ["a"]);
        assert_eq!(s.queued(), 0);
    }

    #[test]
    fn a_slow_job_frees_its_slot_but_counts_in_the_total() {
        let mut s = Schedule::new(LIMITS);
        let t = Instant::now();
        for ns in ["hung-1", "hung-2", "ok", "late"] {
            s.mark(ns);
        }
        assert_eq!(names(&s.start(t)), ["hung-1", "hung-2"]);
        assert!(!s.startable(t + Duration::from_secs(1)));
        assert_eq!(
            s.next_free(t + Duration::from_secs(1)),
            Some(t + LIMITS.slow_after),
            "woken when the first full slot turns slow"
        );
        let later = t + LIMITS.slow_after;
        assert_eq!(names(&s.start(later)), ["ok"], "the total of 3 jobs");
        assert_eq!(
            s.next_free(later),
            None,
            "the total is full: a job's end frees room"
        );
        s.finished("ok");
        assert_eq!(names(&s.start(later)), ["late"]);
    }

    #[test]
    fn nothing_to_wake_for_with_room_or_nothing_queued() {
        let mut s = Schedule::new(LIMITS);
        let t = Instant::now();
        assert_eq!(s.next_free(t), None);
        s.mark("a");
        assert_eq!(s.next_free(t), None, "room now: start, no wait");
        s.start(t);
        s.mark("a");
        assert_eq!(s.next_free(t), None, "only a, which waits for its own job");
    }

    #[test]
    fn clear_forgets_queue_and_jobs() {
        let mut s = Schedule::new(LIMITS);
        let t = Instant::now();
        s.sweep(["a", "b"]);
        s.mark("c");
        s.start(t);
        s.clear();
        assert!(!s.is_running("c") && s.queued() == 0 && s.start(t).is_empty());
        s.sweep(["a"]);
        assert_eq!(names(&s.start(t)), ["a"]);
    }
}
